"""The lifecycle events the runtime publishes for every job, built by position.

A job a listener hears is told with the same few events: :class:`~.events.JobScheduled`,
:class:`~.events.JobStartedEvent`, :class:`~.events.JobCompletedEvent` and, for a root,
:class:`~.events.WorkflowCompleteEvent`. Their constructors are for everyone: keywords,
defaults, converters, validators and the family's snapshot rule, each field written through
``object.__setattr__``. That costs more than the event (a JobStartedEvent of three fields takes
about 17,000 instructions; callgrind). The runtime holds values of the right types already, so
it builds these events here: each is filled in as a draft of its own layout, one plain slot store
a field, then given its class (about 3,000 for the same event; see :func:`_draft_of`).

An event built here equals the one its constructor builds from the same values, and is as
frozen; ``tests/test_runtime_records.py`` holds every builder to its constructor, field by field.
The other endings (a failure, a timeout, a cancel) are rarer and keep their constructors, which
check what they are given.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import attrs

from nucleo_trio._job_snapshot import JobSnapshot

from .events import (
    JobCompletedEvent,
    JobEvent,
    JobScheduled,
    JobStartedEvent,
    ScheduledState,
    WorkflowCompleteEvent,
    _default_workflow_reason,
)

__all__ = ["job_completed", "job_scheduled", "job_started", "workflow_complete"]

_new = object.__new__
_now = time.time
# A module global: on CPython 3.11 a member read off an Enum class goes through EnumType's
# __getattr__ hook, never specialised (about 900 instructions a read, more than a field costs).
_QUEUED: Final = ScheduledState.QUEUED


def _draft_of(cls: type[JobEvent]) -> type:
    """A writable twin of the event class ``cls``: the same bases and the same slots of its
    own, without the frozen ``__setattr__`` and ``__delattr__``.

    A builder fills a draft in, each field one plain slot store (which CPython 3.11
    specialises: about 80 instructions, against about 670 for a call of the slot's setter),
    then gives it its real class (``event.__class__ = cls``), from then on a frozen event like
    the constructor's. CPython allows that assignment only between classes of one layout; the
    draft built and re-classed here checks it once, at import. The event classes are final, so
    the twin is a sibling, not a subclass; no draft ever leaves its builder.
    """
    own = tuple(name for name in vars(cls)["__slots__"] if name != "__weakref__")
    draft = type(
        f"_{cls.__name__}Draft",
        cls.__bases__,
        {
            "__slots__": own,
            "__module__": __name__,
            # Both, so the draft's attribute store is object's own (one type slot for the two).
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
        },
    )
    probe: Any = _new(draft)
    probe.__class__ = cls  # a TypeError here: the layouts differ
    return draft


def _writes_every_field(builder: Any, cls: type[JobEvent]) -> None:
    """Fail at import when ``builder`` writes no field of ``cls`` by that name (the names a
    function's code stores to are among its ``co_names``): a field added to an event and not
    set by its builder would be unreadable in a listener."""
    unwritten = {field.name for field in attrs.fields(cls)} - set(builder.__code__.co_names)
    if unwritten:
        raise RuntimeError(f"{builder.__name__} does not write {sorted(unwritten)}")


_ScheduledDraft: Final = _draft_of(JobScheduled)
_StartedDraft: Final = _draft_of(JobStartedEvent)
_CompletedDraft: Final = _draft_of(JobCompletedEvent)
_WorkflowDraft: Final = _draft_of(WorkflowCompleteEvent)


def job_scheduled(snapshot: JobSnapshot, requirements: object, priority: int) -> JobScheduled:
    """``JobScheduled(snapshot=..., state=ScheduledState.QUEUED, requirements=...,
    priority=...)``: the job was queued for execution."""
    event: Any = _new(_ScheduledDraft)  # Any: a type checker sees the draft as its bases
    event.snapshot = snapshot
    event.timestamp = _now()
    event.state = _QUEUED
    event.requirements = requirements
    event.priority = priority
    event.__class__ = JobScheduled
    built: JobScheduled = event
    return built


def job_started(snapshot: JobSnapshot, attempt: int) -> JobStartedEvent:
    """``JobStartedEvent(snapshot=..., attempt=...)``: attempt ``attempt`` (from 1) started."""
    event: Any = _new(_StartedDraft)
    event.snapshot = snapshot
    event.timestamp = _now()
    event.attempt = attempt
    event.__class__ = JobStartedEvent
    built: JobStartedEvent = event
    return built


def job_completed(
    snapshot: JobSnapshot,
    attempts: int,
    llm_responses: tuple[Any, ...],
    metadata: Mapping[str, Any],
    completion_time: float,
    result: Any,
) -> JobCompletedEvent:
    """``JobCompletedEvent(snapshot=..., attempts=..., llm_responses=..., metadata=...,
    completion_time=..., result=...)``.

    ``llm_responses`` is the tuple the event keeps, and ``metadata`` a read-only mapping no one
    changes (the snapshot's, taken at the same moment): the constructor would copy both.
    """
    event: Any = _new(_CompletedDraft)
    event.snapshot = snapshot
    event.timestamp = _now()
    event.attempts = attempts
    event.llm_responses = llm_responses
    event.metadata = metadata
    event.completion_time = completion_time
    event.result = result
    event.__class__ = JobCompletedEvent
    built: JobCompletedEvent = event
    return built


def workflow_complete(
    snapshot: JobSnapshot, successful: bool, reason: str | None = None
) -> WorkflowCompleteEvent:
    """``WorkflowCompleteEvent(snapshot=..., successful=..., reason=...)``; without a reason,
    the constructor's default ("Workflow completed successfully" or "Workflow failed")."""
    event: Any = _new(_WorkflowDraft)
    event.snapshot = snapshot
    event.timestamp = _now()
    event.successful = successful
    event.reason = _default_workflow_reason(event) if reason is None else reason
    event.__class__ = WorkflowCompleteEvent
    built: WorkflowCompleteEvent = event
    return built


_writes_every_field(job_scheduled, JobScheduled)
_writes_every_field(job_started, JobStartedEvent)
_writes_every_field(job_completed, JobCompletedEvent)
_writes_every_field(workflow_complete, WorkflowCompleteEvent)
