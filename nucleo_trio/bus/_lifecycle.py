"""The lifecycle events the runtime publishes for every job, built by position.

A job a listener hears is told with the same few events: :class:`~.events.JobScheduled`,
:class:`~.events.JobStartedEvent`, :class:`~.events.JobCompletedEvent` and, for a root,
:class:`~.events.WorkflowCompleteEvent`. Their constructors are for everyone: keywords,
defaults, converters, validators and the family's snapshot rule, each field written through
``object.__setattr__``. That costs more than the event (a JobStartedEvent of three fields takes
about 17,000 instructions; callgrind). The runtime holds values of the right types already, so
it builds these events here, each field set through its slot (about 4,000 for the same event).

An event built here equals the one its constructor builds from the same values, and is as
frozen; ``tests/test_runtime_records.py`` holds every builder to its constructor, field by field.
The other endings (a failure, a timeout, a cancel) are rarer and keep their constructors, which
check what they are given.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from nucleo_trio._job_snapshot import JobSnapshot, slot_setters

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

# Every event's first two fields are JobEvent's own slots, shared by all its subclasses. Each
# unpacking below names every field of its event, so a field added to one fails at import.
_set_snapshot, _set_timestamp = slot_setters(JobEvent)
_, _, _set_scheduled_state, _set_requirements, _set_priority = slot_setters(JobScheduled)
_, _, _set_attempt = slot_setters(JobStartedEvent)
(
    _,
    _,
    _set_attempts,
    _set_llm_responses,
    _set_metadata,
    _set_completion_time,
    _set_result,
) = slot_setters(JobCompletedEvent)
_, _, _set_successful, _set_reason = slot_setters(WorkflowCompleteEvent)


def job_scheduled(snapshot: JobSnapshot, requirements: object, priority: int) -> JobScheduled:
    """``JobScheduled(snapshot=..., state=ScheduledState.QUEUED, requirements=...,
    priority=...)``: the job was queued for execution."""
    event: JobScheduled = _new(JobScheduled)
    _set_snapshot(event, snapshot)
    _set_timestamp(event, _now())
    _set_scheduled_state(event, _QUEUED)
    _set_requirements(event, requirements)
    _set_priority(event, priority)
    return event


def job_started(snapshot: JobSnapshot, attempt: int) -> JobStartedEvent:
    """``JobStartedEvent(snapshot=..., attempt=...)``: attempt ``attempt`` (from 1) started."""
    event: JobStartedEvent = _new(JobStartedEvent)
    _set_snapshot(event, snapshot)
    _set_timestamp(event, _now())
    _set_attempt(event, attempt)
    return event


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
    event: JobCompletedEvent = _new(JobCompletedEvent)
    _set_snapshot(event, snapshot)
    _set_timestamp(event, _now())
    _set_attempts(event, attempts)
    _set_llm_responses(event, llm_responses)
    _set_metadata(event, metadata)
    _set_completion_time(event, completion_time)
    _set_result(event, result)
    return event


def workflow_complete(
    snapshot: JobSnapshot, successful: bool, reason: str | None = None
) -> WorkflowCompleteEvent:
    """``WorkflowCompleteEvent(snapshot=..., successful=..., reason=...)``; without a reason,
    the constructor's default ("Workflow completed successfully" or "Workflow failed")."""
    event: WorkflowCompleteEvent = _new(WorkflowCompleteEvent)
    _set_snapshot(event, snapshot)
    _set_timestamp(event, _now())
    _set_successful(event, successful)
    _set_reason(event, _default_workflow_reason(event) if reason is None else reason)
    return event
