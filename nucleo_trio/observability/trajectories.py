"""Reading a recorded workflow back in the order its jobs were called.

A workflow is a tree, and the order that matters is per parent: a doer that runs A, then B,
then C stamps them 1, 2 and 3, and the children of one fan-out share an ordinal. So
:func:`trajectory` walks the tree depth-first and orders each parent's children by
``iteration_number``, then in the order they were submitted. Sorting a whole workflow flat on
one column reads as noise even when every ordinal is right: ordinals are per parent, so they
collide across parents, and start times interleave parallel branches.

Within one parent, children without an ordinal (a plain orchestrator's, a guard's) come first,
as SQL's ascending order puts ``NULL`` first; children of one ordinal, or of none, follow in the
order the recorder first heard of them, which is their submission order (each job's
``JobScheduled``). Start times do not order siblings: admission starts whichever fits first (a
short demand passes a long one parked on a full account), so the fortieth job submitted may
start before the first, and that is not the order the workflow called them in.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from ..jobs.state import JobState

__all__ = [
    "Trajectory",
    "TrajectoryStep",
    "WorkflowSummary",
    "open_recording",
    "recorded_workflows",
    "render_trajectory",
    "trajectory",
]

_STATE_ORDER = ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELLED")


@attrs.frozen(kw_only=True)
class TrajectoryStep:
    """One job of a recorded workflow, with its children in call order.

    ``iteration_number`` is its ordinal in its parent's execution order (``None`` when the
    parent stamped none); ``created_at``, ``started_at`` and ``ended_at`` are wall-clock epoch
    seconds (when); ``clock_started`` and ``clock_ended`` are the runtime's own clock
    (``trio.current_time()``, virtual under a ``MockClock``) at its start and end, ``None`` in a
    recording made without them; ``state`` is the
    :class:`~nucleo_trio.jobs.JobState` value it was last recorded in; ``failure`` is the error
    or the timeout or cancellation message; ``llm_responses`` are the responses its terminal
    event carried, as JSON data. ``depth`` is 0 for a root.
    """

    job_id: str
    parent_job_id: str | None
    workflow_id: str
    user_id: str
    job_class: str
    name: str
    kind: str
    iteration_number: int | None
    attempts: int
    state: str
    created_at: float | None
    started_at: float | None
    ended_at: float | None
    failure: str | None
    metadata: Mapping[str, Any]
    llm_responses: tuple[Any, ...]
    depth: int
    seq: int
    children: tuple[TrajectoryStep, ...] = ()
    clock_started: float | None = None
    clock_ended: float | None = None

    @property
    def duration(self) -> float | None:
        """Seconds from start to end on the runtime's own clock, so a run in virtual time shows
        its virtual seconds; ``None`` for a job that never started or has not ended. A recording
        made without the runtime's clock falls back to the wall-clock instants."""
        if self.clock_started is not None and self.clock_ended is not None:
            return max(0.0, self.clock_ended - self.clock_started)
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)

    @property
    def job_state(self) -> JobState | None:
        """``state`` as a :class:`JobState`, or ``None`` for a value this version does not know."""
        try:
            return JobState(self.state)
        except ValueError:
            return None

    def walk(self) -> Iterator[TrajectoryStep]:
        """This step, then each child's walk in call order: depth first."""
        stack = [self]
        while stack:
            step = stack.pop()
            yield step
            stack.extend(reversed(step.children))


@attrs.frozen
class Trajectory:
    """A recorded workflow as a tree: its root jobs (usually one), each with its children.

    Iterating walks it depth first, each parent's children in call order, which is the order
    the workflow called its jobs in.
    """

    workflow_id: str
    roots: tuple[TrajectoryStep, ...]

    def walk(self) -> Iterator[TrajectoryStep]:
        for root in self.roots:
            yield from root.walk()

    def __iter__(self) -> Iterator[TrajectoryStep]:
        return self.walk()

    def __len__(self) -> int:
        return sum(1 for _ in self.walk())

    @property
    def user_id(self) -> str | None:
        return self.roots[0].user_id if self.roots else None

    def states(self) -> Counter[str]:
        """How many jobs ended (or stand) in each state."""
        return Counter(step.state for step in self.walk())


@attrs.frozen
class WorkflowSummary:
    """One workflow of a recording: its id, user, job count, and first and last instants."""

    workflow_id: str
    user_id: str
    jobs: int
    first_created_at: float | None
    last_ended_at: float | None


def open_recording(database: str | Path) -> sqlite3.Connection:
    """Open a recorder's file read-only; a missing file is :class:`FileNotFoundError` and a file
    with no ``jobs`` table a :class:`ValueError`, each naming the path."""
    path = Path(database)
    if not path.is_file():
        raise FileNotFoundError(f"no recording at {path}: the file does not exist")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        found = db.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
        ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ValueError(f"{path} is not a recording: {exc}") from exc
    if not found:
        db.close()
        raise ValueError(f"{path} is not a recording: it has no 'jobs' table")
    return db


def recorded_workflows(database: str | Path | sqlite3.Connection) -> tuple[WorkflowSummary, ...]:
    """Every workflow in a recording, the most recent first."""
    with _connection(database) as db:
        rows = db.execute(
            "SELECT workflow_id, min(user_id), count(*), min(created_at), max(ended_at) "
            "FROM jobs GROUP BY workflow_id ORDER BY min(seq) DESC"
        ).fetchall()
    return tuple(WorkflowSummary(*row) for row in rows)


def trajectory(database: str | Path | sqlite3.Connection, workflow_id: str) -> Trajectory:
    """The workflow ``workflow_id`` of a recording (a path, or an open connection), in call order.

    An unknown workflow is a :class:`LookupError` naming it and the most recent workflows the
    recording holds.
    """
    with _connection(database) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        clock = (
            "clock_started, clock_ended"
            if {"clock_started", "clock_ended"} <= columns
            else "NULL, NULL"  # a recording from before the runtime's clock was recorded
        )
        rows = db.execute(
            "SELECT seq, job_id, parent_job_id, workflow_id, user_id, job_class, name, kind, "
            "iteration_number, attempts, state, created_at, started_at, ended_at, failure, "
            f"metadata, {clock} FROM jobs WHERE workflow_id = ?",
            (workflow_id,),
        ).fetchall()
        if not rows:
            known = [
                row[0]
                for row in db.execute(
                    "SELECT workflow_id FROM jobs GROUP BY workflow_id ORDER BY min(seq) DESC "
                    "LIMIT 5"
                )
            ]
            holds = ", ".join(known) if known else "no workflow at all"
            raise LookupError(f"no workflow {workflow_id!r} in the recording; it holds: {holds}")
        responses: dict[str, list[Any]] = {}
        for job_id, text in db.execute(
            "SELECT r.job_id, r.response FROM llm_responses r JOIN jobs j ON j.job_id = r.job_id "
            "WHERE j.workflow_id = ? ORDER BY r.job_id, r.position",
            (workflow_id,),
        ):
            responses.setdefault(job_id, []).append(_loads(text))
    return Trajectory(workflow_id, _tree(rows, responses))


@contextlib.contextmanager
def _connection(database: str | Path | sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A path opened read-only for the call, or a connection passed in and left open."""
    if isinstance(database, sqlite3.Connection):
        yield database
        return
    db = open_recording(database)
    try:
        yield db
    finally:
        db.close()


def _tree(
    rows: Sequence[tuple[Any, ...]], responses: Mapping[str, list[Any]]
) -> tuple[TrajectoryStep, ...]:
    by_id = {row[1]: row for row in rows}
    children: dict[str | None, list[tuple[Any, ...]]] = {}
    for row in rows:
        parent = row[2] if row[2] in by_id else None
        children.setdefault(parent, []).append(row)

    def build(row: tuple[Any, ...], depth: int) -> TrajectoryStep:
        (seq, job_id, parent, workflow_id, user_id, job_class, name, kind, ordinal) = row[:9]
        (attempts, state, created_at, started_at, ended_at, failure, metadata) = row[9:16]
        clock_started, clock_ended = row[16:18]
        kids = tuple(build(child, depth + 1) for child in _call_order(children.get(job_id, [])))
        return TrajectoryStep(
            job_id=job_id,
            parent_job_id=parent,
            workflow_id=workflow_id,
            user_id=user_id,
            job_class=job_class,
            name=name,
            kind=kind,
            iteration_number=ordinal,
            attempts=attempts,
            state=state,
            created_at=created_at,
            started_at=started_at,
            ended_at=ended_at,
            failure=failure,
            metadata=MappingProxyType(_loads(metadata) or {}),
            llm_responses=tuple(responses.get(job_id, ())),
            depth=depth,
            seq=seq,
            children=kids,
            clock_started=clock_started,
            clock_ended=clock_ended,
        )

    return tuple(build(row, 0) for row in _call_order(children.get(None, [])))


def _call_order(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Siblings by ``iteration_number`` (no ordinal first), then in submission order: the
    order the recorder first heard of them."""

    def key(row: tuple[Any, ...]) -> tuple[bool, int, int]:
        ordinal = row[8]
        return (ordinal is not None, ordinal or 0, row[0])

    return sorted(rows, key=key)


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# -- rendering -------------------------------------------------------------------------------------


def render_trajectory(
    recorded: Trajectory,
    *,
    ids: bool = True,
    durations: bool = True,
    max_children: int | None = None,
    width: int | None = None,
) -> str:
    """The trajectory as an indented tree, one job a line, in call order.

    Each line reads ``[ordinal] name  STATE  (n attempts)  duration  failure``. ``ids`` adds
    each job's id (and the workflow's to the heading); without it, a failure that names its own
    job by id names it by its name instead; ``durations`` adds start-to-end seconds
    on the runtime's own clock (:attr:`TrajectoryStep.duration`);
    ``max_children`` shows at most that many children of a parent and sums up the rest in one
    line; ``width`` cuts longer lines with ``...``. ASCII only.
    """
    if max_children is not None and max_children < 1:
        raise ValueError(f"max_children must be a positive int or None, got {max_children!r}")
    lines = [_heading(recorded, ids)]

    def emit(step: TrajectoryStep, prefix: str, branch: str) -> None:
        lines.append(f"{prefix}{branch}{_describe(step, ids, durations)}")
        below = prefix + ("" if not branch else ("|   " if branch == "|-- " else "    "))
        shown = list(step.children)
        hidden: list[TrajectoryStep] = []
        if max_children is not None and len(shown) > max_children:
            shown, hidden = shown[:max_children], shown[max_children:]
        for position, child in enumerate(shown):
            last = position == len(shown) - 1 and not hidden
            emit(child, below, "`-- " if last else "|-- ")
        if hidden:
            lines.append(f"{below}`-- ... and {len(hidden)} more: {_tally(hidden)}")

    for root in recorded.roots:
        emit(root, "", "")
    if width is not None:
        lines = [
            line if len(line) <= width else line[: max(width - 3, 0)] + "..." for line in lines
        ]
    return "\n".join(lines)


def _heading(recorded: Trajectory, ids: bool) -> str:
    name = f"Workflow {recorded.workflow_id}" if ids else "Workflow"
    steps = list(recorded.walk())
    jobs = f"{len(steps)} job{'s' if len(steps) != 1 else ''}"
    return f"{name} for {recorded.user_id}: {jobs} ({_tally(steps)})"


def _tally(steps: Sequence[TrajectoryStep]) -> str:
    counts = Counter(step.state for step in steps)
    ordered = [state for state in _STATE_ORDER if counts[state]]
    ordered += sorted(state for state in counts if state not in _STATE_ORDER)
    return ", ".join(f"{counts[state]} {state.lower().replace('_', ' ')}" for state in ordered)


def _describe(step: TrajectoryStep, ids: bool, durations: bool) -> str:
    parts = []
    label = step.name if step.iteration_number is None else f"[{step.iteration_number}] {step.name}"
    parts.append(label)
    if ids:
        parts.append(step.job_id)
    parts.append(step.state)
    if step.attempts > 1:
        parts.append(f"{step.attempts} attempts")
    if durations and step.duration is not None:
        parts.append(f"{step.duration:.3f} s")
    text = "  ".join(parts)
    if step.failure:
        text += f": {step.failure if ids else _named(step.failure, step)}"
    return text


def _named(failure: str, step: TrajectoryStep) -> str:
    """``failure`` with the step's own job named by its name instead of its id: the runtime
    names a job in its messages by its id, led by its class when a prefix was given
    (``Search-search-7efd...``), and an id is random, so without ids two runs of one seed would
    print different failures."""
    cls = step.job_class.rpartition(".")[2]
    return failure.replace(f"{cls}-{step.job_id}", step.name).replace(step.job_id, step.name)
