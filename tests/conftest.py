"""Shared fixtures: a running dispatcher and an event recorder."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher


class Recorder:
    """Collects every event the bus delivers to it, in delivery order."""

    def __init__(self) -> None:
        self.events: list[ev.JobEvent] = []

    def __call__(self, event: ev.JobEvent) -> None:
        self.events.append(event)

    def of(self, job_id: str, *, limiter: bool = False) -> list[ev.JobEvent]:
        return [
            e
            for e in self.events
            if e.snapshot is not None
            and e.snapshot.job_id == job_id
            and (limiter or not isinstance(e, ev.LimiterEvent))
        ]

    def names(self, job_id: str) -> list[str]:
        return [type(e).__name__ for e in self.of(job_id)]

    def typed(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


async def settle() -> None:
    """Let every task run until all are blocked: delivered events, parked waiters."""
    await trio.testing.wait_all_tasks_blocked()


@pytest.fixture
async def dispatcher(nursery: trio.Nursery) -> AsyncIterator[JobDispatcher]:
    d = JobDispatcher(DispatcherConfig(seed=7))
    await nursery.start(d.run)
    yield d
    if not d._stopping:
        await d.shutdown()


@pytest.fixture
async def recorder(dispatcher: JobDispatcher) -> Recorder:
    rec = Recorder()
    dispatcher.bus.subscribe(rec)
    return rec


@pytest.fixture(scope="session")
def postgres_conninfo() -> Iterator[str]:
    """A PostgreSQL server started for the session (tests/pg_server.py); skips only when no
    server binary exists on this machine."""
    from .pg_server import NO_SERVER_REASON, find_binaries, running_server

    binaries = find_binaries()
    if binaries is None:
        pytest.skip(NO_SERVER_REASON)
    with running_server(binaries) as conninfo:
        yield conninfo


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The ``redis-server`` binary (tests/redis_server.py); skips only when none is installed."""
    from .redis_server import NO_SERVER_REASON, find_binary

    binary = find_binary()
    if binary is None:
        pytest.skip(NO_SERVER_REASON)
    return binary


@pytest.fixture(scope="session")
def redis_server(redis_binary: str) -> Iterator[Any]:
    """One Redis server for the session, on a free loopback port, without persistence.

    Tests that share it use keys under their own prefix; a test that restarts or kills a
    server starts its own with :func:`tests.redis_server.running_redis`."""
    from .redis_server import running_redis

    with running_redis(redis_binary) as server:
        yield server
