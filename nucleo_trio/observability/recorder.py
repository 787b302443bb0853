"""The recorder: every job's snapshot, kept in SQLite, so a workflow can be read after the fact.

The reference runtime ships no persistence recorder and leaves one to each deployment; this is
the one nucleo_trio ships. :class:`TrajectoryRecorder` is a bus observer of the lifecycle
family. For every job it keeps one row, created when it first hears of the job and brought up to
date by each later event: id, parent, workflow, user, class, display name, its ordinal in its
parent's execution order (the ``iteration`` metadata a doer stamps, as ``iteration_number``),
attempts, state, the created, started and ended instants, the failure, and the metadata. A
terminal event also stores the LLM responses the run collected, one row each.

The schema, for reading it by hand::

    jobs(seq, job_id, parent_job_id, workflow_id, user_id, job_class, name, kind,
         iteration_number, attempts, state, created_at, started_at, ended_at, failure, metadata)
    llm_responses(job_id, position, response)

``seq`` counts jobs in the order the recorder first heard of them; instants are wall-clock
epoch seconds; ``metadata`` and ``response`` are JSON. Read a workflow back in call order with
:func:`~nucleo_trio.observability.trajectory`, never with a flat ``ORDER BY``.

The recorder writes inline on its subscription's task: each event is one short indexed upsert
on a local file in WAL mode with ``synchronous=NORMAL``, cheaper than handing it to a thread,
and only the recorder's own task ever waits on it. It commits when it has caught up with its
queue, at most every :data:`COMMIT_INTERVAL` seconds of real time (and at least every
:data:`COMMIT_EVERY` events), at the end of every root job, at :meth:`~TrajectoryRecorder.flush`
and at close, so a burst costs a few transactions. A reader of the file sees a workflow whole once
its root has ended; mid-run it may trail by the events since the last commit. A power cut may
lose the last few records, never corrupt the file.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._serialization import converter
from ..bus import events as ev
from ..bus.bus import MessageBus
from ..bus.observers import JobObserver
from ..jobs.job import META_ITERATION

if TYPE_CHECKING:
    from ..bus.bus import Subscription
    from ..dispatch.dispatcher import JobDispatcher

__all__ = ["COMMIT_EVERY", "COMMIT_INTERVAL", "RECORDER_SCHEMA", "TrajectoryRecorder"]

COMMIT_EVERY = 500
"""The most events the recorder writes in one transaction."""

COMMIT_INTERVAL = 0.1
"""Real seconds between two commits the recorder makes on catching up with its queue."""

RECORDER_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL UNIQUE,
    parent_job_id TEXT,
    workflow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    job_class TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    iteration_number INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    created_at REAL,
    started_at REAL,
    ended_at REAL,
    failure TEXT,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_by_workflow ON jobs (workflow_id, parent_job_id);
CREATE TABLE IF NOT EXISTS llm_responses (
    job_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (job_id, position)
);
"""
"""The tables the recorder writes (created when missing)."""

_JOB_COLUMNS = (
    "seq",
    "job_id",
    "parent_job_id",
    "workflow_id",
    "user_id",
    "job_class",
    "name",
    "kind",
    "iteration_number",
    "attempts",
    "state",
    "created_at",
    "started_at",
    "ended_at",
    "failure",
    "metadata",
)

_UPSERT = """
INSERT INTO jobs (job_id, parent_job_id, workflow_id, user_id, job_class, name, kind,
                  iteration_number, attempts, state, created_at, started_at, ended_at, failure,
                  metadata)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO UPDATE SET
    name = excluded.name,
    iteration_number = coalesce(excluded.iteration_number, jobs.iteration_number),
    attempts = max(jobs.attempts, excluded.attempts),
    state = excluded.state,
    created_at = coalesce(jobs.created_at, excluded.created_at),
    started_at = coalesce(jobs.started_at, excluded.started_at),
    ended_at = coalesce(excluded.ended_at, jobs.ended_at),
    failure = coalesce(excluded.failure, jobs.failure),
    metadata = excluded.metadata
"""


class TrajectoryRecorder(JobObserver[ev.LifecycleEvent]):
    """Persists every job's snapshot into the SQLite database at ``path`` (created when missing).

    Subscribe it to the lifecycle family, before the dispatcher starts if it should hear the
    first job too::

        recorder = TrajectoryRecorder("runs.db")
        recorder.attach(dispatcher)  # bus.subscribe(recorder, event_type=LifecycleEvent)
        ...
        recorder.close()

    A file whose ``jobs`` table the recorder did not create is refused with :class:`ValueError`
    naming the columns it expected.
    """

    def __init__(self, path: str | Path) -> None:
        if not isinstance(path, str | Path) or not str(path).strip():
            raise ValueError(f"TrajectoryRecorder needs a database path, got {path!r}")
        self.path = str(path)
        self.recorded = 0
        """How many events the recorder has written."""
        self._subscription: Subscription | None = None
        self._pending = 0  # events written since the last commit
        self._commit_due = 0.0  # time.monotonic() after which catching up commits
        self._db: sqlite3.Connection | None = sqlite3.connect(self.path, isolation_level=None)
        try:
            columns = tuple(row[1] for row in self._db.execute("PRAGMA table_info(jobs)"))
            if columns and columns != _JOB_COLUMNS:
                raise ValueError(
                    f"{self.path} has a table 'jobs' with columns {list(columns)}, not the "
                    f"recorder's {list(_JOB_COLUMNS)}; record into a file of its own"
                )
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(RECORDER_SCHEMA)
        except BaseException:
            self._db.close()
            self._db = None
            raise

    def attach(self, target: JobDispatcher | MessageBus) -> Subscription:
        """Subscribe to the lifecycle events of ``target`` (a dispatcher, or its bus)."""
        bus = target if isinstance(target, MessageBus) else target.bus
        return bus.subscribe(self, event_type=ev.LifecycleEvent)

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription

    async def on_event(self, event: ev.LifecycleEvent) -> None:
        self.record(event)

    def record(self, event: ev.JobEvent) -> None:
        """Bring the row of the event's job up to date; a terminal event also stores the run's
        LLM responses. An event with no snapshot is ignored."""
        snapshot = event.snapshot
        if snapshot is None:
            return
        db = self._open()
        ordinal = snapshot.metadata.get(META_ITERATION)
        row = (
            snapshot.job_id,
            snapshot.parent_job_id,
            snapshot.workflow_id,
            snapshot.user_id,
            snapshot.job_class_qualname,
            snapshot.name,
            snapshot.kind.value,
            ordinal if isinstance(ordinal, int) and not isinstance(ordinal, bool) else None,
            _attempts(event),
            snapshot.state.value,
            snapshot.created_at,
            snapshot.started_at,
            snapshot.ended_at,
            _failure(event),
            _json(dict(snapshot.metadata)),
        )
        if not db.in_transaction:
            db.execute("BEGIN")
        try:
            db.execute(_UPSERT, row)
            if isinstance(event, ev.TerminalEvent):
                self._responses(db, snapshot.job_id, event.llm_responses)
        except BaseException:
            db.execute("ROLLBACK")
            self._pending = 0
            raise
        self.recorded += 1
        self._pending += 1
        subscription = self._subscription
        if (
            subscription is None
            or self._pending >= COMMIT_EVERY
            or (isinstance(event, ev.TerminalEvent) and snapshot.is_root)
            or (subscription.backlog == 0 and time.monotonic() >= self._commit_due)
        ):
            self.flush()

    def flush(self) -> None:
        """Commit what is written; the recorder does it on its own whenever it catches up."""
        db = self._open()
        if db.in_transaction:
            db.execute("COMMIT")
        self._pending = 0
        self._commit_due = time.monotonic() + COMMIT_INTERVAL

    def close(self) -> None:
        """Close the file; recording after this raises :class:`RuntimeError`."""
        if self._db is not None:
            self.flush()
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else f"{self.recorded} events"
        return f"<TrajectoryRecorder {self.path} {state}>"

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"the recorder of {self.path} is closed")
        return self._db

    @staticmethod
    def _responses(db: sqlite3.Connection, job_id: str, responses: Iterable[Any]) -> None:
        db.execute("DELETE FROM llm_responses WHERE job_id = ?", (job_id,))
        db.executemany(
            "INSERT INTO llm_responses (job_id, position, response) VALUES (?, ?, ?)",
            [(job_id, position, _json(response)) for position, response in enumerate(responses)],
        )


def _attempts(event: ev.JobEvent) -> int:
    if isinstance(event, ev.AbstractTerminalEvent):
        return event.attempts
    if isinstance(event, ev.JobStartedEvent):
        return event.attempt
    return event.snapshot.attempt_number if event.snapshot is not None else 0


def _failure(event: ev.JobEvent) -> str | None:
    """What ended the job, in one line: the error for a failure, the message otherwise."""
    if isinstance(event, ev.JobFailedEvent | ev.DependencyFailureEvent):
        error = event.error
        return event.message if error is None else f"{type(error).__name__}: {error}"
    if isinstance(event, ev.JobTimedOut | ev.JobCancelled):
        return event.message
    return None


def _json(value: object) -> str:
    """JSON, with records (attrs classes, dataclasses) through the library's converter and
    anything else it cannot write as its ``str``."""
    return json.dumps(value, default=_plain, sort_keys=True)


def _plain(value: object) -> object:
    data = converter.unstructure(value)
    return str(value) if data is value else data
