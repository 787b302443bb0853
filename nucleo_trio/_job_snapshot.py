"""A job's state and its snapshot: what every event says about the job it is about.

The states a job moves through (:class:`JobState`), the kinds of job the health report counts
(:class:`JobType`), and the immutable picture of a job at one moment that events carry and
recorders persist (:class:`JobSnapshot`). Users import them from :mod:`nucleo_trio.jobs` (or
:mod:`nucleo_trio.jobs.state` and :mod:`nucleo_trio.jobs.snapshot`).

A leaf module (it imports nothing of nucleo_trio), so :mod:`nucleo_trio.bus.events` can build
its events on a snapshot without importing the :mod:`nucleo_trio.jobs` package, whose job
context publishes those events.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

__all__ = [
    "JobSnapshot",
    "JobState",
    "JobType",
    "build_snapshot",
    "class_facts",
    "forget_class_facts",
]


class JobState(enum.Enum):
    """Where a job is in its life.

    ``COMPLETED``, ``FAILED``, ``CANCELLED`` and ``TIMED_OUT`` are terminal: once a job reaches
    one it stays there. ``FAILED`` and ``TIMED_OUT`` are failures, ``COMPLETED`` is the success,
    and ``CANCELLED`` is neither. Every other state, ``IDLE`` included, is active.
    """

    QUEUED = "QUEUED"
    """Submitted and waiting in a lane for its task to start; every job begins here."""
    SCHEDULED = "SCHEDULED"
    """Its task has started: it waits for its dependencies, runs its input guards and waits
    for admission to grant its demand."""
    RUNNING = "RUNNING"
    """Executing: entered after ``pre_execute``, with the resources held, or at the first
    progress the job publishes."""
    CANCELLING = "CANCELLING"
    """Active. The dispatcher never enters it itself; a job's context may be moved to it."""
    IDLE = "IDLE"
    """Active. The dispatcher never enters it itself; a job's context may be moved to it."""
    COMPLETED = "COMPLETED"
    """Terminal: the job returned a result and its output guards passed."""
    FAILED = "FAILED"
    """Terminal: the job raised, ran out of re-runs, or was refused at submit."""
    CANCELLED = "CANCELLED"
    """Terminal: cancelled by a caller, by its workflow's cancel or by shutdown."""
    TIMED_OUT = "TIMED_OUT"
    """Terminal: an attempt outlived the job's ``timeout``."""

    def __init__(self, value: str) -> None:
        # Stamped once per member, so the predicate the dispatcher asks on every transition
        # is a plain attribute read.
        self.is_terminal = value in {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
        """True for ``COMPLETED``, ``FAILED``, ``CANCELLED`` and ``TIMED_OUT``: a job that
        reaches one stays there."""

    @property
    def is_active(self) -> bool:
        """True for every state that is not terminal, ``IDLE`` and ``CANCELLING`` included."""
        return not self.is_terminal

    @property
    def is_failure(self) -> bool:
        """True for ``FAILED`` and ``TIMED_OUT``; ``CANCELLED`` is not a failure."""
        return self is JobState.FAILED or self is JobState.TIMED_OUT

    @property
    def is_success(self) -> bool:
        """True for ``COMPLETED`` only."""
        return self is JobState.COMPLETED


class JobType(enum.Enum):
    """The kind of work a job does, as the health report and the event logger group it."""

    JOB = "JOB"
    """A plain :class:`~nucleo_trio.jobs.AbstractJob` subclass that names no kind of its own."""
    TOOL = "TOOL"
    """A :class:`~nucleo_trio.jobs.Tool`: a leaf job, function tools included."""
    DOER = "DOER"
    """An :class:`~nucleo_trio.jobs.Orchestrator` or a :class:`~nucleo_trio.jobs.Doer`."""
    THINKER = "THINKER"
    """A :class:`~nucleo_trio.llm.Thinker`: the orchestrator that holds a model conversation."""
    GUARDRAIL = "GUARDRAIL"
    """A :class:`~nucleo_trio.guardrails.Guardrail`: a guard, which runs as a job of its own."""
    LLM_CALL = "LLM_CALL"
    """An :class:`~nucleo_trio.llm.LLMCall`: one model call, as a tool."""
    UTILITY = "UTILITY"
    """A helper job; no built-in class uses it, a job class of yours may."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not value:
        return _EMPTY
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class JobSnapshot:
    """What a job is and where it stands, frozen.

    Every event about a job carries one, taken when the event was made
    (:meth:`JobContext.snapshot <nucleo_trio.jobs.JobContext.snapshot>`). The ``with_*``
    methods return changed copies; the snapshot itself never changes. Times are wall-clock
    seconds since the epoch (:func:`time.time`).
    """

    job_id: str
    """The job's id, ``<prefix>-<12 hex digits>``."""
    workflow_id: str
    """The id of the workflow the job belongs to: its root's id."""
    parent_job_id: str | None
    """The id of what the job was built under: the workflow root's id for a root job (so it
    equals ``workflow_id``), else the id of the job that submitted it."""
    user_id: str
    """The user the job's workflow works for."""
    job_class: str
    """The job's class name, without its module (``Fetch``)."""
    job_class_qualname: str
    """The job's class with its module (``myapp.tools.Fetch``)."""
    kind: JobType = JobType.JOB
    """The kind of job, from its class's ``job_type``."""
    name: str
    """The job's name for people: its own ``display_name`` when it answers one, else the
    ``@display_name`` decorator's, else :attr:`job_class`."""
    action: str = ""
    """What the job is doing, in a word or two, from the ``@display_name`` decorator; ``""``
    when none was given."""
    description: str | None = None
    """What the job does: the context's ``description`` when set, else the
    ``@tool_description`` decorator's (a function tool's docstring); ``None`` without either."""
    state: JobState = JobState.QUEUED
    """The job's state when the snapshot was taken."""
    attempt_number: int = 0
    """Which attempt the job is on: 0 before its first, 1 during the first, and one more for
    each re-run."""
    priority: int = 0
    """The job's priority; higher runs first in the priority lane."""
    timeout: float | None = None
    """The deadline of each attempt, in seconds; ``None`` for a job with no deadline (an
    orchestrator)."""
    metadata: Mapping[str, Any] = attrs.field(default=_EMPTY, converter=_freeze, hash=False)
    """A read-only copy of the job's metadata: what the submitter passed, plus the keys the
    runtime adds (``iteration``, ``wait_times``, ``admission_wait_ms``, ``obs.caller_class``)."""
    created_at: float | None = None
    """When the job was submitted."""
    started_at: float | None = None
    """When the job first turned ``RUNNING``; ``None`` until then."""
    ended_at: float | None = None
    """When the job reached a terminal state; ``None`` until then."""

    @property
    def job_type(self) -> str:
        """The job's class name, without its module: the same as :attr:`job_class`."""
        return self.job_class

    @property
    def is_root(self) -> bool:
        """True for a root job: one built directly under its workflow root."""
        return self.parent_job_id == self.workflow_id

    def with_state(self, state: JobState) -> JobSnapshot:
        """A copy in ``state``."""
        return attrs.evolve(self, state=state)

    def with_attempt_number(self, attempt_number: int) -> JobSnapshot:
        """A copy on attempt ``attempt_number``."""
        return attrs.evolve(self, attempt_number=attempt_number)

    def with_description(self, description: str | None) -> JobSnapshot:
        """A copy with ``description`` (``None`` for none)."""
        return attrs.evolve(self, description=description)

    def with_metadata(self, metadata: Mapping[str, Any]) -> JobSnapshot:
        """A copy whose metadata is a read-only copy of ``metadata`` (replaced, not merged)."""
        return attrs.evolve(self, metadata=metadata)


class _Draft(JobSnapshot):
    """A snapshot being filled in: :func:`build_snapshot`'s object until its last field is set.

    The snapshot's own layout (no slot of its own, no field of its own) without the frozen
    class's ``__setattr__`` and ``__delattr__``, so each field is a plain slot store, which
    CPython 3.11 specialises (about 80 instructions, against about 670 for a call of the slot's
    setter and more for ``object.__setattr__``). Once every field is set, the object is given
    its real class (``__class__ = JobSnapshot``): from then on it is a frozen snapshot like any
    other, equal to and hashed like the constructor's. No draft ever leaves
    :func:`build_snapshot`.
    """

    __slots__ = ()
    # Both, so the class's attribute store is object's own (it is one type slot for the two).
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


_new = object.__new__


def build_snapshot(
    job_id: str,
    workflow_id: str,
    parent_job_id: str | None,
    user_id: str,
    job_class: str,
    job_class_qualname: str,
    kind: JobType,
    name: str,
    action: str,
    description: str | None,
    state: JobState,
    attempt_number: int,
    priority: int,
    timeout: float | None,
    metadata: Mapping[str, Any] | None,
    created_at: float | None,
    started_at: float | None,
    ended_at: float | None,
) -> JobSnapshot:
    """``JobSnapshot(job_id=..., ..., ended_at=...)``, the fields given by position in their
    order: how the runtime takes a snapshot for each event it publishes (three a job).

    The snapshot is the same, ``metadata`` frozen the same way; what is left out is the work
    around it. The constructor is called with eighteen keywords, which CPython matches one by
    one, and writes each field through ``object.__setattr__``; here each is a slot store on a
    :class:`_Draft`, which then becomes the snapshot (about 4,200 instructions instead of
    26,000, callgrind; 14,300 when each field went through its slot's setter).
    """
    # Any: to a type checker the draft's fields are the frozen snapshot's.
    snapshot: Any = _new(_Draft)
    snapshot.job_id = job_id
    snapshot.workflow_id = workflow_id
    snapshot.parent_job_id = parent_job_id
    snapshot.user_id = user_id
    snapshot.job_class = job_class
    snapshot.job_class_qualname = job_class_qualname
    snapshot.kind = kind
    snapshot.name = name
    snapshot.action = action
    snapshot.description = description
    snapshot.state = state
    snapshot.attempt_number = attempt_number
    snapshot.priority = priority
    snapshot.timeout = timeout
    snapshot.metadata = _freeze(metadata)
    snapshot.created_at = created_at
    snapshot.started_at = started_at
    snapshot.ended_at = ended_at
    snapshot.__class__ = JobSnapshot
    built: JobSnapshot = snapshot
    return built


# A field added to the snapshot and not written by build_snapshot fails here, at import (the
# names a function's code stores to are among its co_names), rather than in a listener's read.
_unwritten = {field.name for field in attrs.fields(JobSnapshot)} - set(
    build_snapshot.__code__.co_names
)
if _unwritten:
    raise RuntimeError(f"build_snapshot does not write {sorted(_unwritten)}")
del _unwritten


class _ClassFacts:
    """What a snapshot reads from a job's class, read once per class; the naming decorators
    (``@display_name``, ``@tool_description``) forget what was read when they mark a class."""

    __slots__ = ("action", "description", "display_name", "name", "qualname")

    def __init__(self, cls: type) -> None:
        self.name = cls.__name__
        self.qualname = f"{cls.__module__}.{cls.__qualname__}"
        self.display_name: str = getattr(cls, "__nucleo_display_name__", None) or cls.__name__
        self.action: str = getattr(cls, "__nucleo_action__", "")
        self.description: str | None = getattr(cls, "__nucleo_description__", None)


class _ClassFactsCache(dict[type, _ClassFacts]):
    """Each job class's facts, read on the first snapshot of one of its jobs."""

    def __missing__(self, cls: type) -> _ClassFacts:
        facts = self[cls] = _ClassFacts(cls)
        return facts


_CLASS_FACTS = _ClassFactsCache()

class_facts: Callable[[type], _ClassFacts] = _CLASS_FACTS.__getitem__
"""The class-level facts of a snapshot of a ``cls`` job, read once per class. The cache's own
lookup, so a snapshot's read of known facts is a C call, not a Python function's frame."""


def forget_class_facts() -> None:
    """Read every class afresh: a decorator just marked one (its subclasses read it too)."""
    _CLASS_FACTS.clear()


# The classes answer to the modules users import them from, as they did when they were defined
# there: reprs, pickles and the API reference name ``nucleo_trio.jobs.state.JobState`` and
# ``nucleo_trio.jobs.snapshot.JobSnapshot``. The snapshot's annotations are resolved here first,
# against this module, so a converter that reads them never looks in the public module.
attrs.resolve_types(JobSnapshot)
JobState.__module__ = JobType.__module__ = "nucleo_trio.jobs.state"
JobSnapshot.__module__ = "nucleo_trio.jobs.snapshot"
