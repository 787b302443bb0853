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
