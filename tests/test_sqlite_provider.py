"""The SQLite provider against a real database file (DB-09..12, the contract's SQLite run)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nucleo_trio.admission import DatabaseGate
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.resources import CountingDBResourceProvider, DBResourceProvider, SQLiteProvider


@pytest.fixture
def provider(tmp_path: Path) -> SQLiteProvider:
    path = tmp_path / "contract.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, note TEXT)")
    return SQLiteProvider("contract", path, 2)


def committed(provider: SQLiteProvider) -> list[str]:
    with sqlite3.connect(provider.path) as reader:
        return [row[0] for row in reader.execute("SELECT note FROM rows ORDER BY id")]


async def test_the_account_is_named_after_the_datasource(provider: SQLiteProvider) -> None:
    """DB-01, DB-09: db:<name> sized by the host, stable; the provider meets the protocol."""
    assert isinstance(provider, DBResourceProvider)
    gate = provider.admission()
    assert isinstance(gate, DatabaseGate) and gate is provider.admission()
    assert (gate.limiter_name, gate.capacity) == ("db:contract", 2)


async def test_a_handle_holds_one_connection_from_acquire_to_close(
    provider: SQLiteProvider,
) -> None:
    """DB-10: acquire opens one connection, a commit keeps it, close returns it; uncommitted rows
    are invisible to others and visible once committed; several transactions share it."""
    handle = await provider.acquire()
    assert provider.open_connections == 1
    await provider.begin(handle)
    await provider.execute(handle, "INSERT INTO rows (note) VALUES (?)", ["first"])
    assert committed(provider) == []
    await provider.commit(handle)
    await provider.await_completion(handle)
    assert committed(provider) == ["first"] and provider.open_connections == 1
    await provider.begin(handle)
    await provider.execute(handle, "INSERT INTO rows (note) VALUES (?)", ["second"])
    await provider.commit(handle)
    assert committed(provider) == ["first", "second"]
    await provider.close(handle)
    assert provider.open_connections == 0


async def test_rollback_and_close_are_repeatable_and_discard(provider: SQLiteProvider) -> None:
    """DB-11: rollback with nothing open, and again; close rolls back an open transaction and
    repeats."""
    handle = await provider.acquire()
    await provider.rollback(handle)
    await provider.begin(handle)
    await provider.execute(handle, "INSERT INTO rows (note) VALUES ('gone')")
    await provider.rollback(handle)
    await provider.rollback(handle)
    await provider.begin(handle)
    await provider.execute(handle, "INSERT INTO rows (note) VALUES ('also gone')")
    await provider.close(handle)
    await provider.close(handle)
    assert committed(provider) == [] and provider.open_connections == 0


async def test_abort_severs_and_a_close_still_hands_back(provider: SQLiteProvider) -> None:
    """DB-11: abort repeats; statements fail after it with an UncorrectableError; the close that
    follows still returns the connection; nothing written before the abort is committed."""
    handle = await provider.acquire()
    await provider.begin(handle)
    await provider.execute(handle, "INSERT INTO rows (note) VALUES ('never')")
    provider.abort(handle)
    provider.abort(handle)
    with pytest.raises(UncorrectableError, match="aborted"):
        await provider.execute(handle, "SELECT 1")
    await provider.close(handle)
    assert provider.open_connections == 0 and committed(provider) == []


async def test_the_read_only_hint_reaches_the_connection(provider: SQLiteProvider) -> None:
    """DB-12: acquire(True) cannot write; the next acquire(False) does not inherit it; a foreign
    handle is refused."""
    reader = await provider.acquire(read_only=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        await provider.execute(reader, "INSERT INTO rows (note) VALUES ('x')")
    writer = await provider.acquire()
    await provider.execute(writer, "INSERT INTO rows (note) VALUES ('ok')")
    assert committed(provider) == ["ok"]
    foreign = await CountingDBResourceProvider("other", 1).acquire()
    with pytest.raises(ValueError, match="SQLite provider 'contract'"):
        await provider.commit(foreign)
    await provider.close(reader)
    await provider.close(writer)


async def test_through_admission_jobs_never_hold_more_connections_than_the_bound(
    provider: SQLiteProvider,
) -> None:
    """DB-12: six writing jobs through a real dispatcher commit six rows holding at most two
    connections at once."""
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

    peak = 0

    class Write(Tool[None]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(provider.admission())

        async def execute(self, context: JobContext) -> None:
            nonlocal peak
            handle = await provider.acquire()
            peak = max(peak, provider.open_connections)
            try:
                await provider.begin(handle)
                await provider.execute(handle, "INSERT INTO rows (note) VALUES (?)", [self.job_id])
                await provider.commit(handle)
            finally:
                await provider.close(handle)

    async with open_dispatcher() as dispatcher:
        root = workflow("u", "writes")
        for handle in [dispatcher.submit(Write(root)) for _ in range(6)]:
            await handle.result()
    assert len(committed(provider)) == 6 and peak <= 2 and provider.open_connections == 0
