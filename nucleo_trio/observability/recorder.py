"""The recorder: every job's snapshot, kept in SQLite, so a workflow can be read after the fact.

:class:`TrajectoryRecorder` is a bus observer of the lifecycle family. For every job it keeps one row, created when it first hears of the job and brought up to
date by each later event: id, parent, workflow, user, class, display name, its ordinal in its
parent's execution order (the ``iteration`` metadata a doer stamps, as ``iteration_number``),
attempts, state, the created, started and ended instants, the start and end on the runtime's
own clock, the failure, and the metadata. A terminal event also stores the LLM responses the run
collected, one row each.

The schema, for reading it by hand::

    jobs(seq, job_id, parent_job_id, workflow_id, user_id, job_class, name, kind,
         iteration_number, attempts, state, created_at, started_at, ended_at, failure, metadata,
         clock_started, clock_ended)
    llm_responses(job_id, position, response)

``seq`` counts jobs in the order the recorder first heard of them; ``created_at``,
``started_at`` and ``ended_at`` say *when*, as wall-clock epoch seconds; ``clock_started`` and
``clock_ended`` are the runtime's own clock (``trio.current_time()``) when the recorder first
heard that the job had started and had ended, and they are what a duration is measured on: a run
in virtual time (a ``MockClock``) hardly moves the wall clock, yet its timeouts and sleeps are
real on its own clock. ``metadata`` and ``response`` are JSON. Read a workflow back in call order
with :func:`~nucleo_trio.observability.trajectory`, never with a flat ``ORDER BY``. A file
written by a recorder that had no clock columns gets them added when a recorder opens it.

The recorder never writes on the trio thread: :meth:`~TrajectoryRecorder.record` builds the row
and hands it to the recorder's one writer, which does every statement on the file in a worker
thread, in batches, one transaction each (``WAL``, ``synchronous=NORMAL``). It sends a batch when
it has caught up with its queue, at most every :data:`COMMIT_INTERVAL` seconds of real time (and
at least every :data:`COMMIT_EVERY` events), at the end of every root job, at
:meth:`~TrajectoryRecorder.flush` and at close; whatever arrives while a batch is being written
goes in the next one, so a slow disk makes batches bigger and never stalls the loop. A reader of
the file sees a workflow whole once its root has ended and that batch has landed; mid-run it may
trail by the events since the last batch. A clean close writes everything recorded before it. A
write that fails is logged at error and raised by the next :meth:`~TrajectoryRecorder.flush` or
close, naming the file. A power cut may lose the last few records, never corrupt the file.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._clock import trio_now_or_none
from .._serialization import converter
from .._sqlite_writer import SQLiteWriter, WriterStatistics
from ..bus import events as ev
from ..bus.bus import MessageBus
from ..bus.observers import JobObserver
from ..jobs.job import META_ITERATION

if TYPE_CHECKING:
    from ..bus.bus import Subscription
    from ..dispatch.dispatcher import JobDispatcher

__all__ = ["COMMIT_EVERY", "COMMIT_INTERVAL", "RECORDER_SCHEMA", "TrajectoryRecorder"]

log = logging.getLogger("nucleo_trio.observability")

COMMIT_EVERY = 500
"""Events recorded since the last batch after which the recorder sends one without waiting."""

COMMIT_INTERVAL = 0.1
"""Real seconds between two batches the recorder sends on catching up with its queue."""

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
    metadata TEXT NOT NULL DEFAULT '{}',
    clock_started REAL,
    clock_ended REAL
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
    "clock_started",
    "clock_ended",
)

_CLOCK_COLUMNS = _JOB_COLUMNS[-2:]
_WITHOUT_CLOCK = _JOB_COLUMNS[:-2]
"""The columns of a recording made before durations were measured on the runtime's clock."""

_UPSERT = """
INSERT INTO jobs (job_id, parent_job_id, workflow_id, user_id, job_class, name, kind,
                  iteration_number, attempts, state, created_at, started_at, ended_at, failure,
                  metadata, clock_started, clock_ended)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO UPDATE SET
    name = excluded.name,
    iteration_number = coalesce(excluded.iteration_number, jobs.iteration_number),
    attempts = max(jobs.attempts, excluded.attempts),
    state = excluded.state,
    created_at = coalesce(jobs.created_at, excluded.created_at),
    started_at = coalesce(jobs.started_at, excluded.started_at),
    ended_at = coalesce(excluded.ended_at, jobs.ended_at),
    failure = coalesce(excluded.failure, jobs.failure),
    metadata = excluded.metadata,
    clock_started = coalesce(jobs.clock_started, excluded.clock_started),
    clock_ended = coalesce(jobs.clock_ended, excluded.clock_ended)
"""


class TrajectoryRecorder(JobObserver[ev.LifecycleEvent]):
    """Persists every job's snapshot into the SQLite database at ``path`` (created when missing).

    Subscribe it to the lifecycle family, before the dispatcher starts if it should hear the
    first job too, and close it once the dispatcher has stopped::

        recorder = TrajectoryRecorder("runs.db")
        recorder.attach(dispatcher)  # bus.subscribe(recorder, event_type=LifecycleEvent)
        ...
        await recorder.aclose()  # or recorder.close() outside trio

    Closing writes everything recorded before it. ``close()`` does the last batch on the calling
    thread, so inside a trio run prefer ``await aclose()``, which leaves the loop free.

    A file whose ``jobs`` table the recorder did not create is refused with :class:`ValueError`
    naming the columns it expected.

    Batches are written in a worker thread, so a slow disk never stalls the trio loop.
    ``in_thread=False`` writes them on the loop instead: a run in virtual time that must repeat
    exactly under a seeded scheduler (the demo) cannot have a thread answer at a moment of its
    own choosing.
    """

    def __init__(self, path: str | Path, *, in_thread: bool = True) -> None:
        if not isinstance(path, str | Path) or not str(path).strip():
            raise ValueError(f"TrajectoryRecorder needs a database path, got {path!r}")
        self.path = str(path)
        """The SQLite file the recorder writes, as given (``":memory:"`` for a database in
        memory)."""
        self.recorded = 0
        """How many events the recorder has taken to write."""
        self._subscription: Subscription | None = None
        self._pending = 0  # events recorded since the last batch was asked for
        self._commit_due = 0.0  # time.monotonic() after which catching up sends a batch
        # Opened and checked here, once, so a bad file is refused by the constructor; from now on
        # only the writer's worker threads use the connection.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            columns = tuple(row[1] for row in db.execute("PRAGMA table_info(jobs)"))
            if columns == _WITHOUT_CLOCK:
                for column in _CLOCK_COLUMNS:
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {column} REAL")
            elif columns and columns != _JOB_COLUMNS:
                raise ValueError(
                    f"{self.path} has a table 'jobs' with columns {list(columns)}, not the "
                    f"recorder's {list(_JOB_COLUMNS)}; record into a file of its own"
                )
            if self.path != ":memory:":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(RECORDER_SCHEMA)
        except BaseException:
            db.close()
            raise
        self._writer = SQLiteWriter(
            db,
            path=self.path,
            name=f"the recorder of {self.path}",
            component="trajectory-recorder",
            log=log,
            in_thread=in_thread,
        )

    def attach(self, target: JobDispatcher | MessageBus) -> Subscription:
        """Subscribe to the lifecycle events of ``target`` (a dispatcher, or its bus)."""
        bus = target if isinstance(target, MessageBus) else target.bus
        return bus.subscribe(self, event_type=ev.LifecycleEvent)

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription

    async def on_event(self, event: ev.LifecycleEvent) -> None:
        self.record(event)

    def record(self, event: ev.JobEvent) -> None:
        """Queue the row of the event's job to be brought up to date (a terminal event also
        stores the run's LLM responses); never waits on the file. An event with no snapshot is
        ignored. Outside a subscription every event is sent at once; outside a trio run it is
        written and committed before this returns, with no runtime-clock instants (there is no
        runtime clock to read)."""
        snapshot = event.snapshot
        if snapshot is None:
            return
        ordinal = snapshot.metadata.get(META_ITERATION)
        now = trio_now_or_none()  # the runtime's own clock, virtual under a MockClock
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
            now if snapshot.started_at is not None else None,
            now if snapshot.ended_at is not None else None,
        )
        responses = (
            [_json(response) for response in event.llm_responses]
            if isinstance(event, ev.TerminalEvent)
            else None
        )
        self._writer.submit(
            partial(_write_row, row, responses),
            f"recording {type(event).__name__} of {snapshot.job_id} in {self.path}",
            owned=False,
        )
        self.recorded += 1
        self._pending += 1
        subscription = self._subscription
        if (
            subscription is None
            or self._pending >= COMMIT_EVERY
            or (isinstance(event, ev.TerminalEvent) and snapshot.is_root)
            or (subscription.backlog == 0 and time.monotonic() >= self._commit_due)
        ):
            self._send()

    async def flush(self) -> None:
        """Write everything recorded so far and wait until it is committed (the recorder sends
        batches on its own whenever it catches up); raises a write that failed since the last
        flush, naming the file."""
        self._pending = 0
        await self._writer.flush()

    async def aclose(self) -> None:
        """Write everything recorded, then close the file; recording after this raises
        :class:`RuntimeError`. Raises a write that failed and was not reported yet."""
        await self._writer.aclose()

    def close(self) -> None:
        """:meth:`aclose` for a caller outside trio (it holds the trio loop while it writes)."""
        self._writer.close_blocking()

    def statistics(self) -> WriterStatistics:
        """What the recorder's writer holds and has written: queued, in flight, batches."""
        return self._writer.statistics()

    def __repr__(self) -> str:
        state = "closed" if self._writer.closed else f"{self.recorded} events"
        return f"<TrajectoryRecorder {self.path} {state}>"

    def _send(self) -> None:
        self._pending = 0
        self._commit_due = time.monotonic() + COMMIT_INTERVAL
        self._writer.start()


def _write_row(
    row: tuple[Any, ...], responses: Sequence[str] | None, db: sqlite3.Connection
) -> None:
    """In the writer's thread: the upsert, and a terminal event's responses in place of any
    stored before."""
    db.execute(_UPSERT, row)
    if responses is not None:
        job_id = row[0]
        db.execute("DELETE FROM llm_responses WHERE job_id = ?", (job_id,))
        db.executemany(
            "INSERT INTO llm_responses (job_id, position, response) VALUES (?, ?, ?)",
            [(job_id, position, text) for position, text in enumerate(responses)],
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
