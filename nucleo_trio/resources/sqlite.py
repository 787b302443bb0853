"""SQLite as a database provider that holds the connection for the job.

The standard library's driver blocks, so every call runs in a worker thread
(``trio.to_thread``) under the permit admission granted; the connection is opened per handle in
autocommit mode and transactions are explicit. ``abort`` interrupts whatever statement is
running (SQLite's ``interrupt`` is safe from any thread) and poisons the handle; the ``close``
that follows rolls back and hands the connection back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from ..admission import DatabaseGate, RateLimiter
from ..errors import UncorrectableError
from .provider import DBHandle

__all__ = ["SQLiteProvider"]


class SQLiteProvider:
    """Connections to the SQLite database at ``path``, at most ``max_connections`` at once."""

    def __init__(self, name: str, path: str | Path, max_connections: int) -> None:
        self._gate = DatabaseGate(name, max_connections)
        self._name = name
        self.path = Path(path)
        self.open_connections = 0

    @property
    def name(self) -> str:
        return self._name

    def admission(self) -> RateLimiter:
        return self._gate

    def _own(self, handle: DBHandle) -> sqlite3.Connection:
        if not isinstance(handle, DBHandle) or handle.provider is not self:
            raise ValueError(f"Handle was not produced by the SQLite provider {self._name!r}")
        connection: sqlite3.Connection = handle.connection
        return connection

    def _live(self, handle: DBHandle) -> sqlite3.Connection:
        connection = self._own(handle)
        if handle.aborted or handle.closed:
            state = "aborted" if handle.aborted else "closed"
            raise UncorrectableError(f"{self._name}: the connection was {state}")
        return connection

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        if read_only:
            connection = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        else:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        return connection

    async def acquire(self, read_only: bool = False) -> DBHandle:
        connection = await trio.to_thread.run_sync(self._connect, read_only)
        self.open_connections += 1
        return DBHandle(self, connection, read_only=read_only)

    async def execute(
        self, handle: DBHandle, sql: str, parameters: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one statement on the handle's connection and return its rows."""
        connection = self._live(handle)

        def run() -> list[tuple[Any, ...]]:
            return connection.execute(sql, parameters).fetchall()

        try:
            return await trio.to_thread.run_sync(run)
        except sqlite3.Error as exc:
            if handle.aborted:
                raise UncorrectableError(f"{self._name}: the connection was aborted") from exc
            raise

    async def begin(self, handle: DBHandle) -> None:
        await self.execute(handle, "BEGIN")

    async def commit(self, handle: DBHandle) -> None:
        await self.execute(handle, "COMMIT")

    async def await_completion(self, handle: DBHandle) -> None:
        """A SQLite commit is durable when it returns: nothing to wait for."""
        self._live(handle)

    async def rollback(self, handle: DBHandle) -> None:
        """Roll back an open transaction; with none open, or again, it does nothing."""
        connection = self._live(handle)
        if connection.in_transaction:
            await self.execute(handle, "ROLLBACK")

    async def close(self, handle: DBHandle) -> None:
        """Roll back what is open and hand the connection back; repeatable, and still hands it
        back after an abort (whatever the driver says then is an UncorrectableError)."""
        connection = self._own(handle)
        if handle.closed:
            return
        handle.closed = True
        self.open_connections -= 1

        def finish() -> None:
            try:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
            finally:
                connection.close()

        try:
            await trio.to_thread.run_sync(finish)
        except sqlite3.Error as exc:
            raise UncorrectableError(f"{self._name}: closing the connection failed: {exc}") from exc

    def abort(self, handle: DBHandle) -> None:
        """Sever the connection at once (phase two of a timeout): interrupt the running
        statement; every later use fails until ``close`` hands it back."""
        connection = self._own(handle)
        if handle.aborted or handle.closed:
            handle.aborted = True
            return
        handle.aborted = True
        connection.interrupt()

    def __repr__(self) -> str:
        return f"<SQLiteProvider {self._name!r} {self.path} max={self._gate.capacity}>"
