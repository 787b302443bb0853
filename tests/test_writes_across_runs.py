"""Issue 21, item 6: writes that outlive their run.

A SQLite writer (the trajectory recorder's, the SQLite heartbeat store's) may have a batch in a
worker thread when the trio run it was opened in ends. Its close must finish in every order of
events: inside the run, after it (a sync ``close()``), in another ``trio.run``, with the batch
in flight or already settled. Each case runs under a hang guard, so a regression fails naming
the case instead of hanging the suite.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from nucleo_trio._sqlite_writer import SQLiteWriter
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import workflow
from nucleo_trio.observability import TrajectoryRecorder

from .jobs_for_tests import Echo

HANG_GUARD = 30.0  # real seconds: only so a regression fails instead of hanging
SLOW_WRITE = 0.3  # real seconds the batch in flight takes in its worker thread


def _writer(path: Path) -> SQLiteWriter:
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT)")
    return SQLiteWriter(
        connection,
        path=str(path),
        name=f"the test writer of {path}",
        component="test-writer",
        log=logging.getLogger("tests.writer"),
    )


def _note(text: str, delay: float = 0.0) -> Callable[[sqlite3.Connection], None]:
    def write(db: sqlite3.Connection) -> None:
        if delay:
            time.sleep(delay)
        db.execute("INSERT INTO notes VALUES (?)", [text])

    return write


def _notes(path: Path) -> list[str]:
    with sqlite3.connect(path) as reader:
        return [row[0] for row in reader.execute("SELECT text FROM notes ORDER BY rowid")]


def _leave_a_batch_in_flight(writer: SQLiteWriter) -> None:
    """A trio run that sends a slow batch, queues one more note behind it, and ends at once."""

    async def run() -> None:
        writer.submit(_note("in flight", SLOW_WRITE), "writing a slow note", owned=False)
        writer.start()
        writer.submit(_note("queued behind"), "writing a queued note", owned=False)
        assert writer.statistics().in_flight == 1

    trio.run(run)


def _within_guard(what: str, call: Callable[[], object]) -> None:
    """Run ``call`` on a thread of its own; fail naming ``what`` if it does not return."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # handed back to the test below
            errors.append(exc)

    worker = threading.Thread(target=target, name=what, daemon=True)
    worker.start()
    worker.join(HANG_GUARD)
    if worker.is_alive():
        pytest.fail(f"{what} did not return within {HANG_GUARD:.0f} s")
    if errors:
        raise errors[0]


def test_a_close_in_the_same_run_writes_everything(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "same.db")

    async def run() -> None:
        for i in range(3):
            writer.submit(_note(f"n{i}", 0.01), f"note {i}", owned=False)
        writer.start()
        await writer.aclose()

    _within_guard("an aclose in the same run", lambda: trio.run(run))
    assert _notes(tmp_path / "same.db") == ["n0", "n1", "n2"]
    assert writer.closed and writer.statistics().in_flight == 0


def test_a_sync_close_after_the_run_waits_for_the_batch_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "after.db"
    writer = _writer(path)
    _leave_a_batch_in_flight(writer)
    _within_guard("a sync close after the run", writer.close_blocking)
    assert _notes(path) == ["in flight", "queued behind"]


def test_a_close_in_another_run_finishes_the_batch_in_flight_first(tmp_path: Path) -> None:
    path = tmp_path / "another.db"
    writer = _writer(path)
    _leave_a_batch_in_flight(writer)
    _within_guard("an aclose in another run", lambda: trio.run(writer.aclose))
    assert _notes(path) == ["in flight", "queued behind"]
    assert writer.statistics().failed == 0


def test_a_flush_in_another_run_then_a_close_in_a_third(tmp_path: Path) -> None:
    path = tmp_path / "third.db"
    writer = _writer(path)
    _leave_a_batch_in_flight(writer)

    async def flush_and_write() -> None:
        await writer.flush()
        ticket = writer.submit(_note("second run"), "a note of the second run", owned=True)
        writer.start()
        await writer.result(ticket)

    _within_guard("a flush in a second run", lambda: trio.run(flush_and_write))
    _within_guard("an aclose in a third run", lambda: trio.run(writer.aclose))
    assert _notes(path) == ["in flight", "queued behind", "second run"]


def test_a_batch_that_settled_before_the_run_ended_closes_in_another_run(tmp_path: Path) -> None:
    path = tmp_path / "settled.db"
    writer = _writer(path)

    async def write_and_flush() -> None:
        writer.submit(_note("settled"), "a note", owned=False)
        await writer.flush()

    trio.run(write_and_flush)
    _within_guard("an aclose after a settled run", lambda: trio.run(writer.aclose))
    assert _notes(path) == ["settled"]


def test_a_recorder_attached_in_one_run_and_closed_in_the_next(tmp_path: Path) -> None:
    """The report's case: the recorder attached to a dispatcher in one ``trio.run``, closed in
    the next, with whatever batch the first left behind; every job has its row."""
    recorder = TrajectoryRecorder(tmp_path / "runs.db")
    root = workflow("u", "across")

    async def first() -> None:
        async with open_dispatcher() as dispatcher:
            recorder.attach(dispatcher)
            for i in range(20):
                dispatcher.submit(Echo(root, i))

    trio.run(first)
    _within_guard("the recorder's aclose in the next run", lambda: trio.run(recorder.aclose))
    with sqlite3.connect(recorder.path) as reader:
        (count,) = reader.execute(
            "SELECT count(*) FROM jobs WHERE workflow_id = ? AND state = 'COMPLETED'",
            [root.workflow_id],
        ).fetchone()
    assert count == 20
