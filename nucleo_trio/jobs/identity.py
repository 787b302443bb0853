"""Who a job is: its id, its parent, its workflow and the user it works for."""

from __future__ import annotations

import operator
import os
import random
import secrets
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["Identifiable", "WorkflowRoot", "mint_id", "workflow"]


@runtime_checkable
class Identifiable(Protocol):
    """Anything a job can be built under: a workflow root or another job."""

    @property
    def job_id(self) -> str:
        """The id the jobs built under it name as their parent."""
        ...

    @property
    def workflow_id(self) -> str:
        """The workflow the jobs built under it join."""
        ...

    @property
    def parent_job_id(self) -> str | None:
        """Its own parent's id; ``None`` for a workflow root."""
        ...

    @property
    def user_id(self) -> str:
        """The user the jobs built under it work for."""
        ...


# Ids name jobs, they guard nothing: a generator seeded from the OS once per process draws
# them without a system call each. A forked child reseeds, so two worker processes started
# from one parent never draw the same sequence.
_tails = random.Random(secrets.randbits(128))
os.register_at_fork(after_in_child=lambda: _tails.seed(secrets.randbits(128)))


def mint_id(prefix: str) -> str:
    """``<prefix>-<random tail>``: 12 hex digits of randomness, unique in practice."""
    return f"{prefix}-{_tails.getrandbits(48):012x}"


def _non_blank(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"WorkflowRoot.{attribute.name} must be a non-empty str, got {value!r}")


@attrs.frozen
class WorkflowRoot:
    """The identity a root job is built under: its own workflow, with no parent.

    Build it with :func:`workflow`; built directly, it refuses a missing or blank id or user.
    """

    job_id: str = attrs.field(validator=_non_blank)
    """The root's id, which is also the workflow's id: the ``parent_job_id`` of every root
    job built under it."""
    user_id: str = attrs.field(validator=_non_blank)
    """The user every job of the workflow works for."""

    @property
    def workflow_id(self) -> str:
        """The same as :attr:`job_id`: a root is its own workflow."""
        return self.job_id

    @property
    def parent_job_id(self) -> None:
        """Always ``None``: a root has no parent."""
        return None


# Every root job reads its parent's workflow_id when it is built: a C attrgetter as the
# property's getter runs no Python frame for it (CPython 3.11), as for the jobs' own identity.
WorkflowRoot.workflow_id = property(  # type: ignore[method-assign,assignment]
    operator.attrgetter("job_id"), None, None, vars(WorkflowRoot)["workflow_id"].__doc__
)


def workflow(user_id: str, prefix: str) -> WorkflowRoot:
    """Start a workflow for ``user_id``: the parent of every root job in it.

    The id is ``<prefix>-<random tail>`` and is its own workflow id. A missing or empty user or
    prefix is refused with :class:`ValueError`.
    """
    # ID-02
    if not isinstance(user_id, str) or not user_id.strip():
        raise ValueError(f"workflow() needs a non-empty user id, got {user_id!r}")
    if not isinstance(prefix, str) or not prefix.strip():
        raise ValueError(f"workflow() needs a non-empty id prefix, got {prefix!r}")
    return WorkflowRoot(job_id=mint_id(prefix), user_id=user_id)
