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
