"""DBProviderContract, bound the way a plugin author binds it: to SQLiteProvider on a file in a
temporary directory, and to the ``nucleo-trio-postgres`` plugin's PostgresProvider on the
session's PostgreSQL server (``postgres_conninfo``). The deeper checks of both providers (read
only connections, aborts mid-statement, the leak checks) stay in tests/test_db_contract.py;
this file only shows that the contract a plugin runs holds for the real providers, and that it
fails one that breaks it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nucleo_trio.resources import DBHandle, DBResourceProvider, SQLiteProvider
from nucleo_trio.testing import DBProviderContract


class TestSQLiteProviderContract(DBProviderContract):
    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "contract.db"

    def make_provider(self, name: str, bound: int) -> DBResourceProvider:
        return SQLiteProvider(name, self.path, bound)

    def create_table(self) -> None:
        with sqlite3.connect(self.path) as setup:
            setup.execute(f"DROP TABLE IF EXISTS {self.table}")
            setup.execute(f"CREATE TABLE {self.table} (id INTEGER PRIMARY KEY, note TEXT)")

    def committed_rows(self) -> list[str]:
        with sqlite3.connect(self.path) as reader:
            return [
                note for (note,) in reader.execute(f"SELECT note FROM {self.table} ORDER BY id")
            ]

    def connections_out(self, provider: DBResourceProvider) -> int | None:
        assert isinstance(provider, SQLiteProvider)
        return provider.open_connections


class TestPostgresProviderContract(DBProviderContract):
    placeholder = "%s"

    @pytest.fixture(autouse=True)
    def _database(self, postgres_conninfo: str) -> None:
        self.conninfo = postgres_conninfo

    def make_provider(self, name: str, bound: int) -> DBResourceProvider:
        from nucleo_trio_postgres import PostgresProvider

        return PostgresProvider(name, self.conninfo, bound)

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def create_table(self) -> None:
        self._query(f"DROP TABLE IF EXISTS {self.table}")
        self._query(f"CREATE TABLE {self.table} (id SERIAL PRIMARY KEY, note TEXT)")

    def committed_rows(self) -> list[str]:
        return [note for (note,) in self._query(f"SELECT note FROM {self.table} ORDER BY id")]

    def connections_out(self, provider: DBResourceProvider) -> int | None:
        from nucleo_trio_postgres import PostgresProvider

        assert isinstance(provider, PostgresProvider)
        return provider.active_connections


class CloseKeepsTheTransaction(SQLiteProvider):
    """Breaks DB-11: close commits what is open instead of rolling it back."""

    async def close(self, handle: DBHandle) -> None:
        if not handle.closed and not handle.aborted:
            await self.commit(handle)
        await super().close(handle)


def test_the_contract_fails_a_provider_that_breaks_it(tmp_path: Path) -> None:
    """DB-11: a provider whose close commits fails the rollback check, naming what it kept,
    while SQLiteProvider passes the same check; the checks run without pytest's help."""

    class Broken(TestSQLiteProviderContract):
        def make_provider(self, name: str, bound: int) -> DBResourceProvider:
            return CloseKeepsTheTransaction(name, self.path, bound)

    check = "test_rollback_and_close_discard_and_are_repeatable"
    correct, broken = TestSQLiteProviderContract(), Broken()
    correct.path, broken.path = tmp_path / "correct.db", tmp_path / "broken.db"
    getattr(correct, check)()
    with pytest.raises(AssertionError, match=r"close did not roll back.*closed over"):
        getattr(broken, check)()


def test_a_contract_missing_a_method_says_which(tmp_path: Path) -> None:
    """A subclass that forgot a method fails naming it, not with a bare error."""

    class Forgot(DBProviderContract):
        def create_table(self) -> None:
            pass

    with pytest.raises(NotImplementedError, match=r"Forgot must implement make_provider\("):
        Forgot().test_a_commit_is_visible_to_other_connections_once_awaited()
