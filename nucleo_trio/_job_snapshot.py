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
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

__all__ = ["JobSnapshot", "JobState", "JobType", "class_facts", "forget_class_facts"]


class JobState(enum.Enum):
    """Where a job is in its life.

    ``COMPLETED``, ``FAILED``, ``CANCELLED`` and ``TIMED_OUT`` are terminal: once a job reaches
    one it stays there. ``FAILED`` and ``TIMED_OUT`` are failures, ``COMPLETED`` is the success,
    and ``CANCELLED`` is neither. Every other state, ``IDLE`` included, is active.
    """

    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    IDLE = "IDLE"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    def __init__(self, value: str) -> None:
        # Stamped once per member, so the predicate the dispatcher asks on every transition
        # is a plain attribute read.
        self.is_terminal = value in {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}

    @property
    def is_active(self) -> bool:
        return not self.is_terminal

    @property
    def is_failure(self) -> bool:
        return self is JobState.FAILED or self is JobState.TIMED_OUT

    @property
    def is_success(self) -> bool:
        return self is JobState.COMPLETED


class JobType(enum.Enum):
    """The kind of work a job does, as the health report and the event logger group it."""

    JOB = "JOB"
    TOOL = "TOOL"
    DOER = "DOER"
    THINKER = "THINKER"
    GUARDRAIL = "GUARDRAIL"
    LLM_CALL = "LLM_CALL"
    UTILITY = "UTILITY"


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not value:
        return _EMPTY
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class JobSnapshot:
    """What a job is and where it stands, frozen.

    ``job_class`` is the class's simple name and ``job_class_qualname`` its fully qualified
    name. ``name`` follows the naming rule (ID-08): the job's own ``display_name`` when it
    answers one, else the ``@display_name`` decorator's, else the class's simple name.
    ``with_state``, ``with_attempt_number`` and ``with_description`` return copies.
    """

    job_id: str
    workflow_id: str
    parent_job_id: str | None
    user_id: str
    job_class: str
    job_class_qualname: str
    kind: JobType = JobType.JOB
    name: str
    action: str = ""
    description: str | None = None
    state: JobState = JobState.QUEUED
    attempt_number: int = 0
    priority: int = 0
    timeout: float | None = None
    metadata: Mapping[str, Any] = attrs.field(default=_EMPTY, converter=_freeze, hash=False)
    created_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def job_type(self) -> str:
        """The job's class simple name (the reference's ``jobType()``)."""
        return self.job_class

    @property
    def is_root(self) -> bool:
        return self.parent_job_id == self.workflow_id

    def with_state(self, state: JobState) -> JobSnapshot:
        return attrs.evolve(self, state=state)

    def with_attempt_number(self, attempt_number: int) -> JobSnapshot:
        return attrs.evolve(self, attempt_number=attempt_number)

    def with_description(self, description: str | None) -> JobSnapshot:
        return attrs.evolve(self, description=description)

    def with_metadata(self, metadata: Mapping[str, Any]) -> JobSnapshot:
        return attrs.evolve(self, metadata=metadata)


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


_CLASS_FACTS: dict[type, _ClassFacts] = {}


def class_facts(cls: type) -> _ClassFacts:
    """The class-level facts of a snapshot of a ``cls`` job, read once per class."""
    facts = _CLASS_FACTS.get(cls)
    if facts is None:
        facts = _CLASS_FACTS[cls] = _ClassFacts(cls)
    return facts


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
