"""The states a job moves through, and the kinds of job the health report counts."""

from __future__ import annotations

import enum

__all__ = ["JobState", "JobType"]


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

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_active(self) -> bool:
        return self not in _TERMINAL

    @property
    def is_failure(self) -> bool:
        return self is JobState.FAILED or self is JobState.TIMED_OUT

    @property
    def is_success(self) -> bool:
        return self is JobState.COMPLETED


_TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT})


class JobType(enum.Enum):
    """The kind of work a job does, as the health report and the event logger group it."""

    JOB = "JOB"
    TOOL = "TOOL"
    DOER = "DOER"
    THINKER = "THINKER"
    GUARDRAIL = "GUARDRAIL"
    LLM_CALL = "LLM_CALL"
    UTILITY = "UTILITY"
