"""An immutable picture of a job at one moment: what events carry and recorders persist."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .state import JobState, JobType

__all__ = ["JobSnapshot"]

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
