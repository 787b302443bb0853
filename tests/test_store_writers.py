"""The SQLite writers of the trajectory recorder and the heartbeat store: off the trio loop.

Each store has one writer that does its statements in a worker thread, in batches. What is held
here: a commit that takes as long as the test wants never stalls the loop (a task on it keeps
running); what is queued while a commit is in flight goes in the next batch; writes land in the
order they were made; a clean stop writes everything queued before it; a failed write is logged
and raised, naming the file; the heartbeat store answers only once its write is on disk, keeps
an autojump clock still while it writes, and a Heart stopped while a poll is in the worker
puts the slot back unfired.

A commit is made slow by a connection class (:class:`CommitGate`) whose ``COMMIT`` waits, in the
worker thread that runs it, on a :class:`threading.Event` the test opens. Nothing here sleeps on
the real clock to prove a timing.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.bus import MessageBus, events as ev
from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.errors import NucleoSystemError
from nucleo_trio.guardrails import ScopeGuard, TenantScope
from nucleo_trio.heartbeat import (
    FixedInterval,
    Heartbeat,
    HeartbeatCodec,
    HeartbeatFired,
    HeartbeatJobs,
    ScheduleHeartbeat,
    SigningKey,
    SQLiteHeartbeatStore,
    heartbeat_now,
)
from nucleo_trio.heartbeat.records import _mint_from
from nucleo_trio.jobs import JobContext, JobSnapshot, JobState, Tool, workflow
from nucleo_trio.observability import TrajectoryRecorder

_connect = sqlite3.connect


class CommitGate:
    """Connections made through :meth:`connect` run ``COMMIT`` only once the gate is open (it
    starts open), and fail it with ``fail`` when that is set. Counts commits and notes the
    threads they ran on."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.opened.set()
        self.reached = threading.Event()
        self.fail: str | None = None
        self.commits = 0
        self.threads: set[int] = set()

    def hold(self) -> None:
        self.reached.clear()
        self.opened.clear()

    def release(self) -> None:
        self.opened.set()

    async def wait_reached(self) -> None:
        """Until a worker thread stands at a held COMMIT."""
        assert await trio.to_thread.run_sync(self.reached.wait, 10), "no commit came"

    def connect(self, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        gate = self

        class Gated(sqlite3.Connection):
            def execute(self, sql: str, *parameters: Any) -> sqlite3.Cursor:
                if sql == "COMMIT":
                    gate.threads.add(threading.get_ident())
                    gate.reached.set()
                    assert gate.opened.wait(10), "the test never opened the gate"
                    if gate.fail is not None:
                        raise sqlite3.OperationalError(gate.fail)
                    gate.commits += 1
                return super().execute(sql, *parameters)

        return _connect(*args, factory=Gated, **kwargs)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[CommitGate]:
    """Every SQLite connection the test opens goes through one gate (the test's own readers
    never send a COMMIT statement, so they pass it untouched)."""
    built = CommitGate()
    monkeypatch.setattr(sqlite3, "connect", built.connect)
    yield built
    built.release()  # a failing test must not leave a worker thread parked


class Quick(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        return "done"


def snapshot(job_id: str = "Job-1", **fields: Any) -> JobSnapshot:
    base: dict[str, Any] = {
        "job_id": job_id,
        "workflow_id": "wf-1",
        "parent_job_id": "wf-1",
        "user_id": "dee",
        "job_class": "Job",
        "job_class_qualname": "tests.Job",
        "name": job_id,
    }
    return JobSnapshot(**{**base, **fields})


def rows(path: Path) -> list[tuple[Any, ...]]:
    with _connect(path) as db:
        return db.execute("SELECT job_id, state, attempts FROM jobs ORDER BY seq").fetchall()


async def ticks_while_held(gate: CommitGate, count: int = 200) -> int:
    """Steps a task on the loop takes while a commit is held in a worker: all of them."""
    done = 0
    for _ in range(count):
        await trio.lowlevel.checkpoint()
        done += 1
    assert not gate.opened.is_set(), "the commit was still held all along"
    return done


# -- the recorder --------------------------------------------------------------------------------


async def test_a_held_commit_never_stalls_the_loop_and_what_comes_meanwhile_is_the_next_batch(
    tmp_path: Path, gate: CommitGate
) -> None:
    """The recorder's commit runs in a worker thread: while it is held, a task on the loop runs
    200 steps and ten more events are recorded at once; they wait as one queued batch, sent the
    moment the held one ends. No commit ever ran on the trio thread."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    gate.hold()
    recorder.record(ev.JobScheduled(snapshot=snapshot("Job-0")))  # no subscription: sent now
    await gate.wait_reached()
    assert await ticks_while_held(gate) == 200
    for n in range(1, 11):
        recorder.record(ev.JobScheduled(snapshot=snapshot(f"Job-{n}")))
    status = recorder.statistics()
    assert (status.in_flight, status.queued, status.batches) == (1, 10, 0)
    assert rows(path) == [], "nothing is on disk before its commit"
    gate.release()
    await recorder.flush()
    status = recorder.statistics()
    assert (status.batches, status.written, status.failed, status.queued) == (2, 11, 0, 0)
    assert [job_id for job_id, _, _ in rows(path)] == [f"Job-{n}" for n in range(11)]
    assert threading.get_ident() not in gate.threads
    await recorder.aclose()


async def test_updates_of_one_job_land_in_the_order_they_were_recorded(
    tmp_path: Path, gate: CommitGate
) -> None:
    """A job's rows are upserts: its scheduled event in a held batch, its start and its end in
    the next, and the row ends as the last event left it, with the responses of its end."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    first = snapshot()
    gate.hold()
    recorder.record(ev.JobScheduled(snapshot=first))
    await gate.wait_reached()
    recorder.record(ev.JobStartedEvent(snapshot=first.with_state(JobState.RUNNING), attempt=1))
    recorder.record(
        ev.JobCompletedEvent(
            snapshot=first.with_state(JobState.COMPLETED), attempts=2, llm_responses=("a", "b")
        )
    )
    gate.release()
    await recorder.aclose()
    assert rows(path) == [("Job-1", "COMPLETED", 2)]
    with _connect(path) as db:
        assert db.execute("SELECT response FROM llm_responses ORDER BY position").fetchall() == [
            ('"a"',),
            ('"b"',),
        ]


@pytest.mark.parametrize("closing", ["aclose", "close"])
async def test_nothing_recorded_is_lost_on_a_clean_stop(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, gate: CommitGate, closing: str
) -> None:
    """A dispatcher runs 300 jobs while the recorder's first commit is held; the dispatcher
    stops, then the recorder closes: the close waits for the held batch and writes every event
    queued behind it, so every job has its row, completed. ``close()`` does the same from sync
    code."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    bus = MessageBus()
    recorder.attach(bus)
    gate.hold()
    async with open_dispatcher(bus=bus) as dispatcher:
        handles = [dispatcher.submit(Quick(workflow("ed", f"run-{n}"))) for n in range(300)]
        for handle in handles:
            assert await handle.result() == "done"
        await gate.wait_reached()
    assert recorder.statistics().queued > 0, "the events behind the held commit are queued"
    if closing == "aclose":
        async with trio.open_nursery() as nursery:
            nursery.start_soon(recorder.aclose)
            await ticks_while_held(gate, 20)
            gate.release()
    else:
        gate.release()
        recorder.close()
    written = rows(path)
    assert len(written) == 300 and {state for _, state, _ in written} == {"COMPLETED"}
    assert recorder.statistics().failed == 0
    with pytest.raises(RuntimeError, match="the recorder of .* is closed"):
        recorder.record(ev.JobScheduled(snapshot=snapshot()))


async def test_a_failed_commit_is_logged_and_raised_by_the_next_flush_naming_the_file(
    tmp_path: Path, gate: CommitGate, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose commit fails is not silently dropped: the writer logs it at error when it
    happens and the next flush raises it, naming the file and how many writes were lost; the
    recorder goes on writing after it."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    gate.fail = "disk I/O error"
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.observability"):
        recorder.record(ev.JobScheduled(snapshot=snapshot("Job-1")))
        recorder.record(ev.JobScheduled(snapshot=snapshot("Job-2")))
        with pytest.raises(NucleoSystemError) as failed:
            await recorder.flush()
    message = str(failed.value)
    assert f"write(s) to {path} failed" in message and "disk I/O error" in message
    assert "recording JobScheduled of Job-1" in message
    assert "failed and were not recorded" in caplog.text and str(path) in caplog.text
    assert recorder.statistics().failed == 2 and rows(path) == []

    gate.fail = None
    await recorder.flush()  # told once: the failure is not raised again
    recorder.record(ev.JobScheduled(snapshot=snapshot("Job-3")))
    await recorder.aclose()
    assert rows(path) == [("Job-3", "QUEUED", 0)]


async def test_a_statement_that_fails_is_undone_alone_and_raised_by_close(tmp_path: Path) -> None:
    """One write that fails in its own statement (here a trigger refuses one job) is undone on
    its own; the rest of its batch commits, and the close raises the failure by name."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    with _connect(path) as db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.job_id = 'Job-2' "
            "BEGIN SELECT RAISE(ABORT, 'no Job-2 here'); END"
        )
    for n in (1, 2, 3):
        recorder.record(ev.JobScheduled(snapshot=snapshot(f"Job-{n}")))
    with pytest.raises(NucleoSystemError, match=r"Job-2 in .*runs\.db failed: no Job-2 here"):
        await recorder.aclose()
    assert [job_id for job_id, _, _ in rows(path)] == ["Job-1", "Job-3"]


def test_a_close_after_the_run_waits_for_the_batch_still_in_a_worker(
    tmp_path: Path, gate: CommitGate
) -> None:
    """The trio run ends while a batch is held in its worker; the sync close() that follows
    waits its turn behind it, so the later update still lands last."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    first = snapshot()

    async def record_and_leave() -> None:
        gate.hold()
        recorder.record(ev.JobScheduled(snapshot=first))
        await gate.wait_reached()

    trio.run(record_and_leave)
    recorder.record(ev.JobCancelled(snapshot=first.with_state(JobState.CANCELLED), message="bye"))
    assert rows(path) == []
    # Opens while close() waits for the held batch, or before it: the order holds either way.
    threading.Timer(0.05, gate.release).start()
    recorder.close()
    assert rows(path) == [("Job-1", "CANCELLED", 0)]


# -- the heartbeat store ---------------------------------------------------------------------------


class Nightly(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        return "ran"


FIRED: list[str] = []


class Noted(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        FIRED.append(context.user_id)
        return "noted"


TEST_KEY = "a test key, never a real one"


def codec() -> HeartbeatCodec:
    """What a dispatcher hands its store: the job class and the test key."""
    return HeartbeatCodec(HeartbeatJobs([Nightly]), SigningKey(TEST_KEY))


def beat(heartbeat_id: str, run_at: float, **spec: Any) -> Heartbeat:
    return _mint_from(
        ScheduleHeartbeat(Nightly, heartbeat_id, run_at, **spec), "alice", ScopeGuard()
    )


def stored_ids(path: Path) -> list[tuple[str, float]]:
    with _connect(path) as db:
        return db.execute("SELECT id, run_at FROM heartbeats ORDER BY run_at, id").fetchall()


async def test_the_store_answers_once_its_write_is_on_disk_and_the_loop_runs_meanwhile(
    tmp_path: Path, gate: CommitGate
) -> None:
    """An enqueue whose commit is held leaves the loop free (200 steps of another task) and is
    not answered until its commit; two operations queued meanwhile share the next transaction
    and are answered in the order they were made: the second rebinding displaces the first."""
    path = tmp_path / "beats.db"
    store = SQLiteHeartbeatStore(path, codec=codec())
    answers: dict[str, Any] = {}

    async def call(name: str, heartbeat: Heartbeat) -> None:
        answers[name] = await store.enqueue(heartbeat)

    gate.hold()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(call, "a", beat("a", 10.0))
        await gate.wait_reached()
        nursery.start_soon(call, "x1", beat("x", 20.0, input="first"))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(call, "x2", beat("x", 30.0, input="second"))
        assert await ticks_while_held(gate) == 200
        assert answers == {} and stored_ids(path) == [], "nothing answered before its commit"
        assert store.statistics().queued == 2
        gate.release()
    assert answers["a"] is None and answers["x1"] is None
    assert answers["x2"] is not None and answers["x2"].input == "first"
    assert stored_ids(path) == [("a", 10.0), ("x", 30.0)]
    status = store.statistics()
    assert (status.batches, status.written) == (2, 3), "x1 and x2 shared one transaction"
    assert threading.get_ident() not in gate.threads
    await store.aclose()


async def test_virtual_time_holds_still_while_the_store_writes(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, gate: CommitGate
) -> None:
    """A worker thread is invisible to the autojump clock; the store keeps it still while an
    operation is in the worker, so a sleeper elsewhere does not wake early and the operation
    takes no virtual time."""
    store = SQLiteHeartbeatStore(tmp_path / "beats.db", codec=codec())
    start = trio.current_time()
    woke: list[float] = []

    async def sleeper() -> None:
        await trio.sleep(10)
        woke.append(trio.current_time() - start)

    gate.hold()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        nursery.start_soon(store.enqueue, beat("a", 1.0))
        await gate.wait_reached()  # every trio task is blocked meanwhile
        assert trio.current_time() == start and woke == []
        gate.release()
        assert await store.peek_next_run_at() == 1.0
        assert trio.current_time() == start and woke == []
    assert woke == [10]
    await store.aclose()


async def test_a_commit_that_fails_is_the_callers_error_and_nothing_is_stored(
    tmp_path: Path, gate: CommitGate
) -> None:
    """An operation whose transaction does not commit is answered with the store's system
    error, naming the operation and the file, and leaves the schedule as it was."""
    path = tmp_path / "beats.db"
    store = SQLiteHeartbeatStore(path, codec=codec())
    await store.enqueue(beat("kept", 5.0))
    gate.fail = "database or disk is full"
    with pytest.raises(NucleoSystemError, match=r"storing heartbeat 'new' in .*beats\.db failed"):
        await store.enqueue(beat("new", 1.0))
    with pytest.raises(NucleoSystemError, match="did not commit: database or disk is full"):
        await store.cancel("kept")
    gate.fail = None
    assert [heartbeat.id for heartbeat in await store.inspect()] == ["kept"]
    await store.aclose()


async def test_aclose_writes_every_operation_queued_before_it(
    tmp_path: Path, gate: CommitGate
) -> None:
    """A clean close waits for the operation in flight and the one queued behind it, closes the
    file, and refuses anything after it."""
    path = tmp_path / "beats.db"
    store = SQLiteHeartbeatStore(path, codec=codec())
    closed = trio.Event()

    async def close() -> None:
        await store.aclose()
        closed.set()

    gate.hold()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.enqueue, beat("a", 1.0))
        await gate.wait_reached()
        nursery.start_soon(store.enqueue, beat("b", 2.0))
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(close)
        await ticks_while_held(gate, 20)
        assert not closed.is_set()
        gate.release()
    assert stored_ids(path) == [("a", 1.0), ("b", 2.0)]
    assert "closed" in repr(store)
    with pytest.raises(RuntimeError, match="the heartbeat store .* is closed"):
        await store.enqueue(beat("c", 3.0))


async def test_a_heart_stopped_while_its_poll_is_in_the_worker_puts_the_slot_back_unfired(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, gate: CommitGate
) -> None:
    """The poll that takes a due slot is held in its commit when the dispatcher stops: the
    poll completes, the Heart sees it is stopping and puts the slot back as it was, so it is
    neither fired into a stopping dispatcher nor lost; the next start fires it."""
    FIRED.clear()
    path = tmp_path / "beats.db"
    config = DispatcherConfig(
        heartbeat=HeartbeatConfig(kind="sqlite", settings={"path": str(path)}, signing_key=TEST_KEY)
    )
    anchor = heartbeat_now() + 1
    fired: list[HeartbeatFired] = []
    async with open_dispatcher(config, bus=watched(fired)) as dispatcher:
        assert dispatcher.heart is not None
        dispatcher.schedule_heartbeat(
            ScheduleHeartbeat(Noted, "nightly", anchor, recurrence=FixedInterval(60)),
            "alice",
            scope_guard=ScopeGuard(TenantScope("acme")),
        )
        await dispatcher.heart.store.inspect()  # behind the enqueue: it is on disk
        gate.hold()
        await gate.wait_reached()  # the clock reached the slot; its poll is in its commit
        dispatcher.heart.stop()
        gate.release()
    assert fired == [] and FIRED == []
    assert stored_ids(path) == [("nightly", anchor)]

    async with open_dispatcher(config, bus=watched(fired), heartbeat_jobs=[Noted]):
        # The overdue slot fires at start; the poll answers from a worker thread, so wait for
        # the fire itself (a fixed sleep could end the block, which holds fires, mid-poll).
        with trio.fail_after(5):
            while not fired:  # noqa: ASYNC110 - a bus event list has no wake-up of its own
                await trio.sleep(0.05)
    assert [event.heartbeat.run_at for event in fired] == [anchor] and FIRED == ["alice"]
    assert stored_ids(path) == [("nightly", anchor + 60)]


def watched(fired: list[HeartbeatFired]) -> MessageBus:
    bus = MessageBus()
    bus.subscribe(fired.append, event_type=HeartbeatFired)
    return bus
