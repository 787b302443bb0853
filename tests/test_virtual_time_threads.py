"""Issue 21, item 5: virtual time and worker threads.

Every blocking call the runtime makes in a worker thread (a SQLite connect, a statement, a
commit, a close) holds an autojump ``MockClock`` still while it runs, so in a virtual-time test a
query costs no virtual time: a job doing three slow SELECTs under a 1 s timeout completes, and a
transactional job whose commit takes real milliseconds is never left "unknown whether committed".
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio._clock import run_sync_holding_the_clock
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, Tool, workflow
from nucleo_trio.resources import SQLiteProvider

SLOW_CALL = 0.05  # real seconds one slow statement takes in its worker thread


class SlowSQLite(SQLiteProvider):
    """SQLite whose connections know ``slow()``: a SQL function that sleeps in its thread."""

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        connection = super()._connect(read_only)
        connection.create_function("slow", 1, _slow)
        return connection


def _slow(value: Any) -> Any:
    time.sleep(SLOW_CALL)
    return value


@pytest.fixture
def provider(tmp_path: Path) -> SlowSQLite:
    path = tmp_path / "orders.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
        setup.executemany("INSERT INTO orders (note) VALUES (?)", [("a",), ("b",), ("c",)])
    return SlowSQLite("orders", path, max_connections=2)


class ThreeSelects(Tool[list[Any]]):
    timeout = 1.0

    def __init__(self, parent: Any, provider: SlowSQLite) -> None:
        super().__init__(parent)
        self.provider = provider

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_database(self.provider)

    async def execute(self, context: JobContext) -> list[Any]:
        assert context.resources is not None
        handle = context.resources.handle(self.provider)
        rows = []
        for note in ("a", "b", "c"):
            rows += await self.provider.execute(
                handle, "SELECT slow(id) FROM orders WHERE note = ?", [note]
            )
        return rows


async def test_a_job_doing_three_slow_selects_under_an_autojump_clock_does_not_time_out(
    autojump_clock: trio.testing.MockClock, provider: SlowSQLite
) -> None:
    """Three statements of 50 real ms each under a 1 s deadline: the clock does not jump to the
    deadline while a thread works, so the job completes with its rows, and no virtual time
    passed."""
    start = trio.current_time()
    async with open_dispatcher() as dispatcher:
        handle = dispatcher.submit(ThreeSelects(workflow("u", "selects"), provider))
    assert await handle.result() == [(1,), (2,), (3,)]
    assert handle.state is JobState.COMPLETED
    assert trio.current_time() - start < 0.01
    assert provider.open_connections == 0


class SlowCommit(Tool[str]):
    timeout = 0.5

    def __init__(self, parent: Any, provider: SlowSQLite, note: str) -> None:
        super().__init__(parent)
        self.provider = provider
        self.note = note

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_database(self.provider).require_transaction()

    async def execute(self, context: JobContext) -> str:
        assert context.resources is not None
        handle = context.resources.handle(self.provider)
        await self.provider.execute(
            handle, "INSERT INTO orders (note) VALUES (slow(?))", [self.note]
        )
        return self.note


async def test_transactional_jobs_with_slow_statements_all_commit_and_say_so(
    autojump_clock: trio.testing.MockClock, provider: SlowSQLite
) -> None:
    """Ten transactional jobs whose insert takes real milliseconds, under 0.5 s deadlines: each
    completes, each row is there, and none ends "unknown whether committed"."""
    async with open_dispatcher() as dispatcher:
        root = workflow("u", "commits")
        handles = [dispatcher.submit(SlowCommit(root, provider, f"n{i}")) for i in range(10)]
    assert [h.state for h in handles] == [JobState.COMPLETED] * 10
    with sqlite3.connect(provider.path) as reader:
        notes = {row[0] for row in reader.execute("SELECT note FROM orders")}
    assert {f"n{i}" for i in range(10)} <= notes


async def test_the_helper_answers_errors_bare_and_lets_cancellation_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``run_sync_holding_the_clock`` raises the thread's exception itself (not in a group),
    returns its value, and holds the clock while the thread sleeps: a 1 s ``move_on_after``
    around a 0.2 s call that may be abandoned does not fire (an unheld clock jumps to it)."""

    def broken() -> None:
        raise LookupError("no such row")

    with pytest.raises(LookupError, match="no such row"):
        await run_sync_holding_the_clock(broken)
    assert await run_sync_holding_the_clock(_slow, 7) == 7
    with trio.move_on_after(1) as scope:
        await run_sync_holding_the_clock(time.sleep, 0.2, abandon_on_cancel=True)
    assert not scope.cancelled_caught, "the clock held still while the thread slept"
