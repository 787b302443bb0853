"""The recorder: every job's snapshot in SQLite, terminal events with their LLM responses, the
doer's ordinal as iteration_number (OBS-31).

The recorder writes in a worker thread and stores wall-clock instants (when) beside the runtime's
own clock (how long), so everything here runs in virtual time and reads the file after a flush
or a close. Its writer's own behaviour (a slow
commit, batching, failures, a clean stop) is held in ``test_store_writers.py``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.bus import MessageBus, events as ev
from nucleo_trio.dispatch import DispatcherConfig, grace_period, open_dispatcher
from nucleo_trio.errors import RateLimitRetry
from nucleo_trio.jobs import (
    Doer,
    Identifiable,
    JobContext,
    JobSnapshot,
    JobState,
    Orchestrator,
    Tool,
    workflow,
)
from nucleo_trio.observability import (
    RECORDER_SCHEMA,
    TrajectoryRecorder,
    render_trajectory,
    trajectory,
)


@attrs.frozen
class Reply:
    """An LLM response as a client would record it."""

    model: str
    text: str
    output_tokens: int


class Ask(Tool[str]):
    """Records two LLM responses, then answers (or fails, when told to)."""

    def __init__(self, parent: Identifiable, *, fail: bool = False) -> None:
        super().__init__(parent)
        self.fail = fail

    async def execute(self, context: JobContext) -> str:
        context.record_llm_response(Reply("small", "draft", 12))
        context.record_llm_response({"model": "large", "text": "final"})
        await trio.sleep(1)
        if self.fail:
            raise ValueError("the answer did not parse")
        return "answered"


class Flaky(Tool[str]):
    """Pushed back by its upstream on the first attempt, fine on the second."""

    async def execute(self, context: JobContext) -> str:
        if context.attempt == 1:
            raise RateLimitRetry("upstream answered 429")
        return "second time lucky"


class Slow(Tool[str]):
    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        self.timeout = 2.0

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(60)
        return "too late"


class Research(Doer[list[str]]):
    """Three steps: one question, a fan-out of two (one fails), then a flaky tool and a slow
    one side by side."""

    async def execute(self, context: JobContext) -> list[str]:
        outcomes = [await self.submit_in_step(Ask(self)).result()]
        self.next_step()
        fanout = [self.submit_in_current_step(Ask(self, fail=fail)) for fail in (False, True)]
        for handle in fanout:
            try:
                outcomes.append(await handle.result())
            except ValueError as exc:
                outcomes.append(f"failed: {exc}")
        self.next_step()
        flaky = self.submit_in_current_step(Flaky(self))
        slow = self.submit_in_current_step(Slow(self))
        outcomes.append(await flaky.result())
        try:
            await slow.result()
        except Exception as exc:
            outcomes.append(type(exc).__name__)
        return outcomes


async def test_the_recorder_keeps_every_job_with_its_ordinal_outcome_and_responses(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-31: a lifecycle observer persists every job's snapshot, stores the terminal events
    with their LLM responses (of failed jobs too) and keeps META_ITERATION as
    iteration_number."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    bus = MessageBus()
    recorder.attach(bus)
    root = Research(workflow("alice", "research"))
    async with open_dispatcher(DispatcherConfig(seed=3), bus=bus) as dispatcher:
        outcomes = await dispatcher.submit(root).result()
    recorder.close()
    assert outcomes == [
        "answered",
        "answered",
        "failed: the answer did not parse",
        "second time lucky",
        "JobTimeoutError",
    ]

    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT job_class, iteration_number, state, attempts, failure, parent_job_id, "
            "user_id, started_at IS NOT NULL, ended_at IS NOT NULL FROM jobs ORDER BY seq"
        ).fetchall()
        responses = db.execute(
            "SELECT j.state, r.position, r.response FROM llm_responses r "
            "JOIN jobs j ON j.job_id = r.job_id ORDER BY j.seq, r.position"
        ).fetchall()
    by_class: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_class.setdefault(row[0].rsplit(".", 1)[-1], []).append(row[1:])
    assert by_class["Research"] == [(None, "COMPLETED", 1, None, root.workflow_id, "alice", 1, 1)]
    asks = by_class["Ask"]
    assert [(ordinal, state) for ordinal, state, *_ in asks] == [
        (1, "COMPLETED"),
        (2, "COMPLETED"),
        (2, "FAILED"),
    ]
    assert asks[2][3] == "ValueError: the answer did not parse"
    assert all(row[4] == root.job_id for row in asks), "children of the doer"
    assert by_class["Flaky"] == [(3, "COMPLETED", 2, None, root.job_id, "alice", 1, 1)]
    (slow,) = by_class["Slow"]
    assert slow[:2] == (3, "TIMED_OUT") and slow[3] == "Job timed out after 2 seconds"

    assert len(responses) == 6, "two per Ask, the failed one's included"
    assert [json.loads(text) for _, _, text in responses[:2]] == [
        {"model": "small", "output_tokens": 12, "text": "draft"},
        {"model": "large", "text": "final"},
    ]
    assert {state for state, _, _ in responses} == {"COMPLETED", "FAILED"}

    recorded = trajectory(path, root.workflow_id)
    assert len(recorded) == 6
    failed_ask = next(step for step in recorded if step.state == "FAILED")
    assert failed_ask.llm_responses[1] == {"model": "large", "text": "final"}
    assert failed_ask.metadata["iteration"] == 2


async def test_durations_are_measured_on_the_runtime_clock(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A run in virtual time lasts its virtual seconds: each Ask its 1 s sleep, and the slow job
    its 2 s timeout plus the 0.5 s grace it spent not unwinding (phase two cancels it), though
    the wall clock hardly moved; the wall-clock instants still say when (epoch seconds)."""
    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    root = Research(workflow("alice", "research"))
    async with open_dispatcher(DispatcherConfig(seed=3)) as dispatcher:
        recorder.attach(dispatcher)
        await dispatcher.submit(root).result()
    recorder.close()

    steps = list(trajectory(path, root.workflow_id))
    slow = next(step for step in steps if step.state == "TIMED_OUT")
    assert slow.failure == "Job timed out after 2 seconds"
    assert slow.duration == pytest.approx(2.0 + grace_period(2.0), abs=1e-9) == 2.5
    asks = [step for step in steps if step.job_class.endswith(".Ask")]
    assert [step.duration for step in asks] == [pytest.approx(1.0, abs=1e-9)] * 3
    assert slow.clock_started is not None and slow.clock_ended is not None
    assert slow.started_at is not None and slow.started_at > 1e9, "when: wall-clock epoch"
    assert "TIMED_OUT  2.500 s: Job timed out after 2 seconds" in render_trajectory(
        trajectory(path, root.workflow_id), ids=False
    )


_OLD_SCHEMA = """
CREATE TABLE jobs (
    seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, parent_job_id TEXT,
    workflow_id TEXT NOT NULL, user_id TEXT NOT NULL, job_class TEXT NOT NULL,
    name TEXT NOT NULL, kind TEXT NOT NULL, iteration_number INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL, created_at REAL, started_at REAL,
    ended_at REAL, failure TEXT, metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE llm_responses (
    job_id TEXT NOT NULL, position INTEGER NOT NULL, response TEXT NOT NULL,
    PRIMARY KEY (job_id, position)
);
INSERT INTO jobs (job_id, workflow_id, user_id, job_class, name, kind, attempts, state,
                  created_at, started_at, ended_at)
VALUES ('Old-1', 'wf-old', 'eve', 'app.Old', 'Old', 'TOOL', 1, 'COMPLETED', 100.0, 100.5, 103.0);
"""


def test_a_recording_without_the_runtime_clock_is_read_and_extended(tmp_path: Path) -> None:
    """A file from before the clock columns reads back with wall-clock durations, and a
    recorder that opens it adds the columns instead of refusing the file."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_OLD_SCHEMA)
    (old,) = trajectory(path, "wf-old")
    assert (old.clock_started, old.clock_ended, old.duration) == (None, None, 2.5)

    recorder = TrajectoryRecorder(path)
    recorder.record(ev.JobScheduled(snapshot=_snapshot()))
    recorder.close()
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)")]
    assert columns[-2:] == ["clock_started", "clock_ended"]
    (old,) = trajectory(path, "wf-old")
    assert old.duration == 2.5
    assert len(trajectory(path, "wf-1")) == 1


async def test_a_job_refused_at_the_door_is_recorded_with_no_start(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-31: a refusal at the door still ends in a terminal event, so the job has a row: no
    attempts, never started, FAILED with the refusal."""

    class Sneaky(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            return "never"

    class Submitter(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            handle = context.dispatcher.submit(Sneaky(self))
            try:
                await handle.result()
            except Exception as exc:
                return type(exc).__name__
            return "submitted"

    recorder = TrajectoryRecorder(tmp_path / "runs.db")
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        root = Submitter(workflow("bob", "door"))
        assert (
            await dispatcher.submit(root).result() == "UsageError"
        )  # a NucleoSystemError that names the fix
    recorder.close()
    recorded = trajectory(recorder.path, root.workflow_id)
    steps = {step.job_class.rsplit(".", 1)[-1]: step for step in recorded}
    refused = steps["Sneaky"]
    assert (refused.state, refused.attempts, refused.started_at) == ("FAILED", 0, None)
    assert refused.failure is not None and "Only orchestrators may submit" in refused.failure
    assert refused.duration is None and steps["Submitter"].duration is not None


async def test_a_reader_sees_a_workflow_whole_once_its_root_has_ended(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-31: the recorder commits in batches, but never later than a root's end: another
    connection reads the whole workflow before the recorder is closed."""

    class Fan(Orchestrator[int]):
        async def execute(self, context: JobContext) -> int:
            handles = [self.submit(Ask(self)) for _ in range(20)]
            return len([await handle.result() for handle in handles])

    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        root = Fan(workflow("cy", "fan"))
        assert await dispatcher.submit(root).result() == 20
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.statistics().held == 0, "the root's end sent every row to the writer"
        await recorder.flush()  # sends nothing more: waits for the batch in flight to land
        with sqlite3.connect(path) as reader:
            (count,) = reader.execute(
                "SELECT count(*) FROM jobs WHERE workflow_id = ? AND state = 'COMPLETED'",
                (root.workflow_id,),
            ).fetchone()
        assert count == 21
    assert recorder.recorded >= 63, "scheduled, started and completed, for 21 jobs"
    recorder.close()
    recorder.close()  # harmless
    with pytest.raises(RuntimeError, match="is closed"):
        recorder.record(ev.JobScheduled(snapshot=_snapshot()))


def test_the_recorder_refuses_a_table_it_did_not_create(tmp_path: Path) -> None:
    """A file whose 'jobs' table is someone else's is refused, naming the expected columns."""
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")
    with pytest.raises(ValueError, match="not the recorder's .*'iteration_number'"):
        TrajectoryRecorder(path)
    with pytest.raises(ValueError, match="needs a database path"):
        TrajectoryRecorder("")
    with sqlite3.connect(":memory:") as fresh:
        fresh.executescript(RECORDER_SCHEMA)  # the schema is plain SQLite, readable by hand


def test_recording_outside_a_subscription_commits_each_event(tmp_path: Path) -> None:
    """OBS-31: record() called directly writes and commits at once; an event with no snapshot
    is ignored; metadata that JSON cannot hold is kept as its text."""
    recorder = TrajectoryRecorder(tmp_path / "direct.db")
    snapshot = _snapshot(metadata={"iteration": 4, "when": object(), "flag": True})
    recorder.record(ev.JobScheduled(snapshot=snapshot))
    recorder.record(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))
    recorder.record(
        ev.JobCancelled(snapshot=snapshot.with_state(JobState.CANCELLED), message="user left")
    )
    with sqlite3.connect(recorder.path) as db:
        state, ordinal, failure, metadata = db.execute(
            "SELECT state, iteration_number, failure, metadata FROM jobs"
        ).fetchone()
    assert (state, ordinal, failure) == ("CANCELLED", 4, "user left")
    assert json.loads(metadata)["when"].startswith("<object object")
    assert recorder.recorded == 2 and "2 events" in repr(recorder)
    recorder.close()


def _snapshot(**fields: Any) -> JobSnapshot:
    base: dict[str, Any] = {
        "job_id": "Job-1",
        "workflow_id": "wf-1",
        "parent_job_id": "wf-1",
        "user_id": "dee",
        "job_class": "Job",
        "job_class_qualname": "tests.Job",
        "name": "Job",
    }
    return JobSnapshot(**{**base, **fields})
