"""The runtime's own builders of snapshots and events make what the public constructors make.

The runtime takes a snapshot and builds an event by position, through the records' slots
(:func:`nucleo_trio._job_snapshot.build_snapshot`, :mod:`nucleo_trio.bus._lifecycle`), which is
cheaper than the keyword constructors; these tests hold them to the constructors, field by
field, so a field added to a record cannot be left out by its builder.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import attrs
import pytest

from nucleo_trio._job_snapshot import build_snapshot
from nucleo_trio.bus import events as ev
from nucleo_trio.bus._lifecycle import job_completed, job_scheduled, job_started, workflow_complete
from nucleo_trio.jobs import JobSnapshot, JobState, JobType


def _fields(record: object) -> dict[str, Any]:
    return {field.name: getattr(record, field.name) for field in attrs.fields(type(record))}


SNAPSHOT_FIELDS: dict[str, Any] = {
    "job_id": "Fetch-0123456789ab",
    "workflow_id": "wf-1",
    "parent_job_id": "wf-1",
    "user_id": "alice",
    "job_class": "Fetch",
    "job_class_qualname": "app.tools.Fetch",
    "kind": JobType.TOOL,
    "name": "Fetcher",
    "action": "fetching",
    "description": "fetches a page",
    "state": JobState.RUNNING,
    "attempt_number": 2,
    "priority": 5,
    "timeout": 30.0,
    "metadata": {"iteration": 1, "wait_times": {"http": 150}},
    "created_at": 100.0,
    "started_at": 101.5,
    "ended_at": None,
}


def test_build_snapshot_is_the_constructors_snapshot() -> None:
    """ID-09: the runtime's snapshot is the constructor's, in every field (ID-08's names
    included), and equal to it."""
    assert [field.name for field in attrs.fields(JobSnapshot)] == list(SNAPSHOT_FIELDS)
    built = build_snapshot(*SNAPSHOT_FIELDS.values())
    made = JobSnapshot(**SNAPSHOT_FIELDS)
    assert type(built) is JobSnapshot
    assert _fields(built) == _fields(made)
    assert built == made
    assert hash(built) == hash(made)
    assert repr(built) == repr(made)


def test_build_snapshot_freezes_a_copy_of_the_metadata() -> None:
    """CTX-12: the snapshot's metadata is what the job's was when it was taken: a read-only
    copy, unchanged by later writes to the job's dict."""
    metadata: dict[str, Any] = {"iteration": 1}
    fields = {**SNAPSHOT_FIELDS, "metadata": metadata}
    built = build_snapshot(*fields.values())
    metadata["iteration"] = 2
    metadata["later"] = True
    assert isinstance(built.metadata, MappingProxyType)
    assert dict(built.metadata) == {"iteration": 1}
    with pytest.raises(TypeError):
        built.metadata["iteration"] = 3  # type: ignore[index]


@pytest.mark.parametrize("empty", [None, {}])
def test_build_snapshot_with_no_metadata_shares_the_empty_mapping(empty: Any) -> None:
    """Empty metadata is the constructor's one empty read-only mapping."""
    built = build_snapshot(*{**SNAPSHOT_FIELDS, "metadata": empty}.values())
    assert built.metadata is JobSnapshot(**{**SNAPSHOT_FIELDS, "metadata": empty}).metadata
    assert dict(built.metadata) == {}


def test_built_snapshot_is_frozen() -> None:
    """OBS-03: a snapshot the runtime builds has no mutator either."""
    built = build_snapshot(*SNAPSHOT_FIELDS.values())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.state = JobState.COMPLETED  # type: ignore[misc]
    assert built.with_state(JobState.COMPLETED).state is JobState.COMPLETED
    assert built.state is JobState.RUNNING


# -- the lifecycle events -------------------------------------------------------------------------

SNAPSHOT = JobSnapshot(**SNAPSHOT_FIELDS)


def _same_event(built: ev.JobEvent, made: ev.JobEvent) -> None:
    # The timestamp is the instant each was built: compared apart, the rest must be equal.
    assert type(built) is type(made)
    assert abs(built.timestamp - made.timestamp) < 60
    built_fields, made_fields = _fields(built), _fields(made)
    assert set(built_fields) == set(made_fields)
    del built_fields["timestamp"], made_fields["timestamp"]
    assert built_fields == made_fields
    assert built.message == made.message
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.snapshot = None  # type: ignore[misc]


def test_job_scheduled_is_the_constructors() -> None:
    """OBS-10: the dispatcher's JobScheduled is QUEUED, with the requirements and priority."""
    requirements = object()
    built = job_scheduled(SNAPSHOT, requirements, 7)
    made = ev.JobScheduled(
        snapshot=SNAPSHOT, state=ev.ScheduledState.QUEUED, requirements=requirements, priority=7
    )
    _same_event(built, made)
    assert built.requirements is requirements


def test_job_started_is_the_constructors() -> None:
    """OBS-05: a started event reads "Job started (attempt N)"."""
    _same_event(job_started(SNAPSHOT, 2), ev.JobStartedEvent(snapshot=SNAPSHOT, attempt=2))
    assert job_started(SNAPSHOT, 2).message == "Job started (attempt 2)"


def test_job_completed_is_the_constructors() -> None:
    """OBS-05 and OBS-11: a completion carries its attempts, responses, metadata, completion
    time and result; its duration runs from the snapshot's start."""
    responses = ("first", "second")
    result = {"answer": 42}
    built = job_completed(SNAPSHOT, 2, responses, SNAPSHOT.metadata, 103.0, result)
    made = ev.JobCompletedEvent(
        snapshot=SNAPSHOT,
        attempts=2,
        llm_responses=list(responses),
        metadata=dict(SNAPSHOT.metadata),
        completion_time=103.0,
        result=result,
    )
    _same_event(built, made)
    assert built.result is result
    assert built.duration == made.duration == 1.5
    assert isinstance(built.metadata, MappingProxyType)


@pytest.mark.parametrize(
    ("successful", "reason"),
    [(True, None), (False, None), (False, "Workflow ended FAILED: boom")],
)
def test_workflow_complete_is_the_constructors(successful: bool, reason: str | None) -> None:
    """OBS-07: the workflow's end reads its reason, by default "Workflow completed
    successfully" or "Workflow failed"."""
    built = workflow_complete(SNAPSHOT, successful, reason)
    given = {} if reason is None else {"reason": reason}
    made = ev.WorkflowCompleteEvent(snapshot=SNAPSHOT, successful=successful, **given)
    _same_event(built, made)
    assert (built.msg_type, built.title) == (made.msg_type, made.title)
