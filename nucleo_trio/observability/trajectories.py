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

A recording is a file, and a file may come from anywhere: every row is checked as it is read (a
value of the wrong type, text that is not UTF-8, metadata that is not a JSON object, a job that
is its own parent or ancestor, a job id recorded twice), and what does not read back is a
:class:`RecordingError` naming the file, the row and what is wrong. The tree is built and walked
without recursion, so a workflow nested a hundred thousand deep reads back as one nested three.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import attrs

from .. import _bounded_json
from ..errors._boundary_map import exception_map, map_exceptions
from ..jobs.state import JobState
from .recorder import _WITHOUT_CLOCK

__all__ = [
    "RecordingError",
    "Trajectory",
    "TrajectoryStep",
    "WorkflowSummary",
    "open_recording",
    "recorded_workflows",
    "render_trajectory",
    "trajectory",
]

_STATE_ORDER = ("COMPLETED", "FAILED", "TIMED_OUT", "CANCELLED")


class RecordingError(ValueError):
    """A recording that does not read back: a row with a value of the wrong type, text that is
    not UTF-8, metadata that is not a JSON object, a job that is its own parent or ancestor, a
    job id recorded twice, a jobs table without the recorder's columns. The message names the
    file, the row (its ``seq`` and job id) and what is wrong."""


def _children_repr(children: tuple[TrajectoryStep, ...]) -> str:
    # A step's repr names its children by count: written out, a deep tree's repr recurses.
    return f"<{len(children)} step(s)>"


@attrs.frozen(kw_only=True, eq=False)
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
    """The job's id."""
    parent_job_id: str | None
    """The id of the job that submitted it; ``None`` for a root."""
    workflow_id: str
    """The workflow it ran in."""
    user_id: str
    """The user the workflow ran for."""
    job_class: str
    """The job's fully qualified class name (``myapp.tools.Fetch``)."""
    name: str
    """The job's display name."""
    kind: str
    """Its :class:`~nucleo_trio.jobs.JobType` value (``"TOOL"``, ``"THINKER"``...)."""
    iteration_number: int | None
    """Its ordinal in its parent's execution order; ``None`` when the parent stamped none."""
    attempts: int
    """How many attempts it had, as last recorded."""
    state: str
    """The :class:`~nucleo_trio.jobs.JobState` value it was last recorded in (see
    :attr:`job_state`)."""
    created_at: float | None
    """When it was created, in wall-clock epoch seconds."""
    started_at: float | None
    """When it started, in wall-clock epoch seconds; ``None`` if it never started."""
    ended_at: float | None
    """When it ended, in wall-clock epoch seconds; ``None`` if it has not ended."""
    failure: str | None
    """What ended it when it did not complete: the error (``"ValueError: ..."``), or the timeout
    or cancellation message; ``None`` otherwise."""
    metadata: Mapping[str, Any]
    """Its metadata as last recorded, read-only."""
    llm_responses: tuple[Any, ...]
    """The LLM responses its terminal event carried, as JSON data, in order."""
    depth: int
    """How deep it sits in the tree: 0 for a root, 1 for its children, and so on."""
    seq: int
    """Its place in the order the recorder first heard of the jobs (its submission order)."""
    children: tuple[TrajectoryStep, ...] = attrs.field(default=(), repr=_children_repr)
    """The jobs it submitted, in call order."""
    clock_started: float | None = None
    """The runtime's clock (``trio.current_time()``) when it started, in seconds; ``None`` if
    it never started or the recording has no runtime-clock columns."""
    clock_ended: float | None = None
    """The runtime's clock when it ended, in seconds; ``None`` as for :attr:`clock_started`."""

    def __eq__(self, other: object) -> bool:
        """Equal fields, and equal children all the way down, compared without recursion."""
        if not isinstance(other, TrajectoryStep):
            return NotImplemented
        pairs = [(self, other)]
        while pairs:
            mine, theirs = pairs.pop()
            if mine._own() != theirs._own() or len(mine.children) != len(theirs.children):
                return False
            pairs.extend(zip(mine.children, theirs.children, strict=True))
        return True

    def _own(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _OWN_FIELDS)

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


_OWN_FIELDS: Final = tuple(f.name for f in attrs.fields(TrajectoryStep) if f.name != "children")


@attrs.frozen
class Trajectory:
    """A recorded workflow as a tree: its root jobs (usually one), each with its children.

    Iterating walks it depth first, each parent's children in call order, which is the order
    the workflow called its jobs in.
    """

    workflow_id: str
    """The workflow's id."""
    roots: tuple[TrajectoryStep, ...]
    """Its root jobs (those with no parent in the workflow), in call order; usually one."""

    def walk(self) -> Iterator[TrajectoryStep]:
        """Every step, depth first: each root, then its children in call order."""
        for root in self.roots:
            yield from root.walk()

    def __iter__(self) -> Iterator[TrajectoryStep]:
        return self.walk()

    def __len__(self) -> int:
        return sum(1 for _ in self.walk())

    @property
    def user_id(self) -> str | None:
        """The user of the first root; ``None`` for a trajectory with no root."""
        return self.roots[0].user_id if self.roots else None

    def states(self) -> Counter[str]:
        """How many jobs ended (or stand) in each state."""
        return Counter(step.state for step in self.walk())


@attrs.frozen
class WorkflowSummary:
    """One workflow of a recording: its id, user, job count, and first and last instants."""

    workflow_id: str
    """The workflow's id."""
    user_id: str
    """The user it ran for (the least, in text order, if its jobs name several)."""
    jobs: int
    """How many jobs the recording holds for it."""
    first_created_at: float | None
    """When its first job was created, in wall-clock epoch seconds."""
    last_ended_at: float | None
    """When its last job ended, in wall-clock epoch seconds; ``None`` while none has ended."""


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
    with _connection(database) as (db, source):
        rows = _fetch(
            db,
            source,
            "SELECT workflow_id, min(user_id), count(*), min(created_at), max(ended_at) "
            "FROM jobs GROUP BY workflow_id ORDER BY min(seq) DESC",
        )
        found = []
        for workflow_id, user_id, jobs, first, last in rows:
            where = f"{source}: the workflow {_shown(workflow_id)}"
            found.append(
                WorkflowSummary(
                    _text(workflow_id, "workflow_id", where),
                    _text(user_id, "user_id", where),
                    jobs,
                    _number(first, "created_at", where),
                    _number(last, "ended_at", where),
                )
            )
    return tuple(found)


def trajectory(database: str | Path | sqlite3.Connection, workflow_id: str) -> Trajectory:
    """The workflow ``workflow_id`` of a recording (a path, or an open connection), in call order.

    An unknown workflow is a :class:`LookupError` naming it and the most recent workflows the
    recording holds; a row that does not read back is a :class:`RecordingError` naming it.
    """
    with _connection(database) as (db, source):
        columns = {_text(row[1], "a column name", source) for row in _fetch(db, source, _COLUMNS)}
        missing = sorted(set(_NEEDED) - columns)
        if missing:
            raise RecordingError(
                f"{source}: the jobs table has no column(s) {', '.join(missing)}; it was not "
                "written by a TrajectoryRecorder"
            )
        clock = (
            "clock_started, clock_ended"
            if {"clock_started", "clock_ended"} <= columns
            else "NULL, NULL"  # a recording from before the runtime's clock was recorded
        )
        rows = _fetch(
            db,
            source,
            f"SELECT {', '.join(_NEEDED)}, {clock} FROM jobs WHERE workflow_id = ?",
            (workflow_id,),
        )
        if not rows:
            known = [
                _text(row[0], "workflow_id", source)
                for row in _fetch(
                    db,
                    source,
                    "SELECT workflow_id FROM jobs GROUP BY workflow_id ORDER BY min(seq) DESC "
                    "LIMIT 5",
                )
            ]
            holds = ", ".join(known) if known else "no workflow at all"
            raise LookupError(f"no workflow {workflow_id!r} in the recording; it holds: {holds}")
        read = [_Row.of(row, source) for row in rows]
        responses: dict[str, list[Any]] = {}
        for job_id, text in _fetch(
            db,
            source,
            "SELECT r.job_id, r.response FROM llm_responses r JOIN jobs j ON j.job_id = r.job_id "
            "WHERE j.workflow_id = ? ORDER BY r.job_id, r.position",
            (workflow_id,),
        ):
            where = f"{source}: an LLM response of the job {_shown(job_id)}"
            responses.setdefault(_text(job_id, "job_id", where), []).append(_response(text, where))
    return Trajectory(workflow_id, _tree(read, responses, source))


_NEEDED: Final = _WITHOUT_CLOCK
"""The columns a recording must have: the recorder's, its runtime-clock pair aside."""
_COLUMNS: Final = "PRAGMA table_info(jobs)"


@contextlib.contextmanager
def _connection(
    database: str | Path | sqlite3.Connection,
) -> Iterator[tuple[sqlite3.Connection, str]]:
    """A path opened read-only for the call, or a connection passed in and left open (as it
    was), with the name of its file. Text is read as bytes while it is used, so that text
    which is not UTF-8 is named by its row instead of failing the whole query."""
    if isinstance(database, sqlite3.Connection):
        db, owned = database, False
    else:
        db, owned = open_recording(database), True
    before = db.text_factory
    db.text_factory = bytes
    try:
        yield db, str(database) if owned else _file_of(db)
    finally:
        db.text_factory = before
        if owned:
            db.close()


def _file_of(db: sqlite3.Connection) -> str:
    try:
        for _, name, file in db.execute("PRAGMA database_list"):
            if name in (b"main", "main") and file:
                return file.decode("utf-8", "replace") if isinstance(file, bytes) else str(file)
    except sqlite3.Error:
        pass
    return "the recording"


def _unreadable(exc: sqlite3.Error, *, source: str) -> RecordingError:
    return RecordingError(f"{source}: the recording cannot be read ({exc})")


_READ_ERRORS = exception_map({sqlite3.Error: _unreadable})


def _fetch(
    db: sqlite3.Connection, source: str, query: str, parameters: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    with map_exceptions(_READ_ERRORS, source=source):
        return db.execute(query, parameters).fetchall()


def _shown(value: object, limit: int = 60) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value: object, column: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordingError(
                f"{where}: {column} is not UTF-8 text (byte 0x{value[exc.start]:02x} at "
                f"{exc.start + 1}: {_shown(value)})"
            ) from None
    raise RecordingError(f"{where}: {column} is {_shown(value)}, not text")


def _optional_text(value: object, column: str, where: str) -> str | None:
    return None if value is None else _text(value, column, where)


def _whole(value: object, column: str, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise RecordingError(f"{where}: {column} is {_shown(value)}, not a whole number")


def _number(value: object, column: str, where: str) -> float | None:
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise RecordingError(f"{where}: {column} is {_shown(value)}, not a number of seconds")


def _metadata(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return MappingProxyType({})
    text = _text(value, "metadata", where)
    try:
        data = _bounded_json.loads(text)
    except ValueError as exc:
        raise RecordingError(f"{where}: metadata is {exc}") from None
    if not isinstance(data, dict):
        raise RecordingError(f"{where}: metadata is {_shown(data)}, not a JSON object")
    return MappingProxyType(data)


def _response(value: object, where: str) -> Any:
    text = _text(value, "response", where)
    if _bounded_json.too_deep(text):
        raise RecordingError(
            f"{where}: the response nests more than {_bounded_json.MAX_NESTING} deep"
        )
    try:
        return _bounded_json.loads(text)
    except ValueError:
        return text  # a response that is not JSON is kept as its text


@attrs.frozen
class _Row:
    """One row of the jobs table, each value checked against its column."""

    seq: int
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
    clock_started: float | None
    clock_ended: float | None

    @classmethod
    def of(cls, row: tuple[Any, ...], source: str) -> _Row:
        (seq, job_id, parent, workflow_id, user_id, job_class, name, kind, ordinal) = row[:9]
        (attempts, state, created_at, started_at, ended_at, failure, metadata) = row[9:16]
        clock_started, clock_ended = row[16:18]
        where = f"{source}: row {_shown(seq)}"
        seq = _whole(seq, "seq", where)
        job_id = _text(job_id, "job_id", where)
        where = f"{source}: row {seq} (job {_shown(job_id)})"
        return cls(
            seq=seq,
            job_id=job_id,
            parent_job_id=_optional_text(parent, "parent_job_id", where),
            workflow_id=_text(workflow_id, "workflow_id", where),
            user_id=_text(user_id, "user_id", where),
            job_class=_text(job_class, "job_class", where),
            name=_text(name, "name", where),
            kind=_text(kind, "kind", where),
            iteration_number=None
            if ordinal is None
            else _whole(ordinal, "iteration_number", where),
            attempts=_whole(attempts, "attempts", where),
            state=_text(state, "state", where),
            created_at=_number(created_at, "created_at", where),
            started_at=_number(started_at, "started_at", where),
            ended_at=_number(ended_at, "ended_at", where),
            failure=_optional_text(failure, "failure", where),
            metadata=_metadata(metadata, where),
            clock_started=_number(clock_started, "clock_started", where),
            clock_ended=_number(clock_ended, "clock_ended", where),
        )


def _tree(
    rows: Sequence[_Row], responses: Mapping[str, list[Any]], source: str
) -> tuple[TrajectoryStep, ...]:
    """The roots, each with its children in call order, built leaves first: no recursion, so
    a hundred thousand nested jobs build as three do."""
    by_id: dict[str, _Row] = {}
    for row in rows:
        first = by_id.setdefault(row.job_id, row)
        if first is not row:
            raise RecordingError(
                f"{source}: the job {row.job_id!r} is recorded twice, in rows {first.seq} and "
                f"{row.seq}"
            )
    children: dict[str | None, list[_Row]] = {}
    for row in rows:
        if row.parent_job_id == row.job_id:
            raise RecordingError(
                f"{source}: row {row.seq} (job {row.job_id!r}) names itself as its parent"
            )
        parent = row.parent_job_id if row.parent_job_id in by_id else None
        children.setdefault(parent, []).append(row)
    ordered = {parent: _call_order(kids) for parent, kids in children.items()}
    walked: list[tuple[_Row, int]] = []  # depth first, parents before their children
    stack = [(row, 0) for row in reversed(ordered.get(None, []))]
    while stack:
        row, depth = stack.pop()
        walked.append((row, depth))
        stack.extend((kid, depth + 1) for kid in reversed(ordered.get(row.job_id, [])))
    if len(walked) < len(rows):
        raise RecordingError(_cycle(rows, by_id, {row.job_id for row, _ in walked}, source))
    built: dict[str, TrajectoryStep] = {}
    for row, depth in reversed(walked):
        kids = tuple(built.pop(kid.job_id) for kid in ordered.get(row.job_id, []))
        built[row.job_id] = _step(row, depth, kids, responses)
    return tuple(built[row.job_id] for row in ordered.get(None, []))


def _cycle(rows: Sequence[_Row], by_id: Mapping[str, _Row], reached: set[str], source: str) -> str:
    """Name the parent cycle that keeps rows out of the tree. A row no root reaches has its
    parent in the workflow (else it would be a root) and not reached either, so following
    parents from it must come round to a job already seen."""
    current = next(row for row in rows if row.job_id not in reached)
    seen: list[_Row] = []
    while current not in seen:
        seen.append(current)
        assert current.parent_job_id is not None
        current = by_id[current.parent_job_id]
    loop = seen[seen.index(current) :]
    named = " -> ".join(f"{row.job_id!r} (row {row.seq})" for row in loop)
    return (
        f"{source}: the jobs {named} -> {loop[0].job_id!r} are each other's parents, a cycle no "
        f"root leads to ({len(rows) - len(reached)} job(s) of the workflow hang from it)"
    )


def _step(
    row: _Row, depth: int, kids: tuple[TrajectoryStep, ...], responses: Mapping[str, list[Any]]
) -> TrajectoryStep:
    return TrajectoryStep(
        job_id=row.job_id,
        parent_job_id=row.parent_job_id,
        workflow_id=row.workflow_id,
        user_id=row.user_id,
        job_class=row.job_class,
        name=row.name,
        kind=row.kind,
        iteration_number=row.iteration_number,
        attempts=row.attempts,
        state=row.state,
        created_at=row.created_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        failure=row.failure,
        metadata=row.metadata,
        llm_responses=tuple(responses.get(row.job_id, ())),
        depth=depth,
        seq=row.seq,
        children=kids,
        clock_started=row.clock_started,
        clock_ended=row.clock_ended,
    )


def _call_order(rows: list[_Row]) -> list[_Row]:
    """Siblings by ``iteration_number`` (no ordinal first), then in submission order: the
    order the recorder first heard of them."""

    def key(row: _Row) -> tuple[bool, int, int]:
        ordinal = row.iteration_number
        return (ordinal is not None, ordinal or 0, row.seq)

    return sorted(rows, key=key)


# -- rendering -------------------------------------------------------------------------------------

INDENTED_LEVELS: Final = 32
"""How many levels a rendered tree indents; a deeper job's line stays at that indentation and
says its depth (``[depth 33]``), so a tree nested thousands deep prints lines of one width."""


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
    line; ``width`` cuts longer lines with ``...``. Past :data:`INDENTED_LEVELS` levels the
    indentation stops growing and each line names its depth. ASCII only.
    """
    if max_children is not None and max_children < 1:
        raise ValueError(f"max_children must be a positive int or None, got {max_children!r}")
    lines = [_heading(recorded, ids)]
    # What is left to print, last first: a step with its prefix and branch, or a summary line.
    stack: list[tuple[TrajectoryStep, str, str] | str] = [
        (root, "", "") for root in reversed(recorded.roots)
    ]
    deepest = 4 * INDENTED_LEVELS
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            lines.append(item)
            continue
        step, prefix, branch = item
        depth = f"[depth {step.depth}] " if step.depth > INDENTED_LEVELS else ""
        lines.append(f"{prefix}{branch}{depth}{_describe(step, ids, durations)}")
        below = prefix + ("" if not branch else ("|   " if branch == "|-- " else "    "))
        below = below[:deepest]
        shown = list(step.children)
        hidden: list[TrajectoryStep] = []
        if max_children is not None and len(shown) > max_children:
            shown, hidden = shown[:max_children], shown[max_children:]
        pending: list[tuple[TrajectoryStep, str, str] | str] = [
            (child, below, "`-- " if position == len(shown) - 1 and not hidden else "|-- ")
            for position, child in enumerate(shown)
        ]
        if hidden:
            pending.append(f"{below}`-- ... and {len(hidden)} more: {_tally(hidden)}")
        stack.extend(reversed(pending))
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
