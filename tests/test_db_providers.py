"""The database provider contract, the counting provider and the registry (DB)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, DatabaseGate, Demand
from nucleo_trio.errors import ConfigError
from nucleo_trio.resources import (
    CountingDBResourceProvider,
    DBHandle,
    DBResourceProvider,
    DBResourceProviders,
)
from nucleo_trio.resources.sqlite import SQLiteProvider


async def test_the_counting_provider_is_its_gate_and_a_handle_of_nothing() -> None:
    """DB-01, DB-02, DB-03, DB-04: the account is db:<name> sized by the host and stable; acquire
    checks nothing out and takes no permit; every verb does nothing and close repeats."""
    provider = CountingDBResourceProvider("orders", 2)
    assert isinstance(provider, DBResourceProvider)
    gate = provider.admission()
    assert isinstance(gate, DatabaseGate) and gate is provider.admission()
    assert (gate.limiter_name, gate.capacity) == ("db:orders", 2)
    handle = await provider.acquire(read_only=True)
    assert handle.unwrap() is None and handle.read_only
    assert gate.in_use == 0  # the permit is admission's, never the handle's
    for verb in (provider.begin, provider.commit, provider.await_completion, provider.rollback):
        await verb(handle)
    await provider.close(handle)
    await provider.close(handle)
    provider.abort(handle)
    assert handle.closed and handle.aborted


async def test_a_handle_from_another_provider_is_refused() -> None:
    """DB-04: a foreign handle names the provider it was not produced by."""
    mine, other = CountingDBResourceProvider("a", 1), CountingDBResourceProvider("b", 1)
    foreign = await other.acquire()
    with pytest.raises(ValueError, match="not produced by the counting provider 'a'"):
        await mine.commit(foreign)
    with pytest.raises(ValueError, match="counting provider 'a'"):
        mine.abort(DBHandle(object()))


async def test_jobs_never_hold_more_connections_than_the_bound(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """DB-02, DB-05: six jobs each hold a permit on a bound of 2 while they work: never more
    than 2 at once, none at the end."""
    provider = CountingDBResourceProvider("main", 2)
    gate = provider.admission()
    admission = Admission()
    await nursery.start(admission.run)
    peak = 0

    async def job() -> None:
        nonlocal peak
        grant = await admission.admit(Demand().add(gate))
        handle = await provider.acquire()
        peak = max(peak, gate.in_use)
        await trio.sleep(1)
        await provider.close(handle)
        admission.release(grant)

    async with trio.open_nursery() as jobs:
        for _ in range(6):
            jobs.start_soon(job)
    assert peak == 2 and gate.in_use == 0
    admission.stop()


def test_the_registry_by_name() -> None:
    """DB-06, DB-07: the same instance twice is a no-op; another under a taken name is refused
    and the first stays; a miss names the sorted registered names; a wrong type names both;
    unregister removes only that instance; names are sorted."""
    registry = DBResourceProviders()
    first = CountingDBResourceProvider("orders", 2)
    registry.register(first)
    registry.register(first)
    with pytest.raises(RuntimeError, match="'orders' is already registered"):
        registry.register(CountingDBResourceProvider("orders", 5))
    assert registry.get("orders", CountingDBResourceProvider) is first
    registry.register(CountingDBResourceProvider("audit", 1))
    assert registry.names() == ["audit", "orders"]
    with pytest.raises(RuntimeError, match="'missing'; registered: audit, orders"):
        registry.get("missing", CountingDBResourceProvider)

    class OtherProvider(CountingDBResourceProvider):
        pass

    with pytest.raises(RuntimeError, match="CountingDBResourceProvider.*OtherProvider"):
        registry.get("orders", OtherProvider)
    registry.unregister(CountingDBResourceProvider("orders", 2))  # not that instance
    assert "orders" in registry.names()
    registry.unregister(first)
    assert registry.names() == ["audit"]


def test_the_default_provider_comes_from_a_bound_only() -> None:
    """DB-08: no bound registers nothing; a bound registers a counting provider of that size."""
    registry = DBResourceProviders()
    assert registry.register_default(None) is None and registry.names() == []
    provider = registry.register_default(7, "registry-default")
    assert provider is not None and provider.admission().capacity == 7
    assert registry.names() == ["registry-default"]


def test_a_sqlite_database_in_a_missing_directory_is_refused_when_built(tmp_path: Path) -> None:
    """SQLite would only fail at a job's first connection; the provider refuses at once,
    naming the database and the directory. ":memory:" and an existing directory are fine."""
    missing = tmp_path / "no" / "such"
    with pytest.raises(ConfigError) as refused:
        SQLiteProvider("notes", missing / "notes.db", 2)
    assert str(refused.value) == (
        f"SQLite database 'notes': the directory {missing} of {missing / 'notes.db'} does not exist"
    )
    assert SQLiteProvider("scratch", ":memory:", 1).path == Path(":memory:")
    assert SQLiteProvider("notes", tmp_path / "notes.db", 1).path == tmp_path / "notes.db"
