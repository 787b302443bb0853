"""How a job ended: the verdict of its execution, and the terminal events it is told with.

Every path a job can end by (it returned, it raised, a timeout or a cancel landed first, the
stop interrupted it, a dependency failed) comes down to one :class:`Verdict`, decided here; the
dispatcher's settle step (``JobDispatcher._finish``) publishes :func:`terminal_event` and, for a
root, :func:`workflow_event`, then settles the handle. The first terminal state wins:
a cancel or a timeout outranks what the job returned, and a job stopped after its commit was
sent says what the commit did.
"""

# ST-03: the first terminal state wins.

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..bus import events as ev
from ..bus._lifecycle import job_completed, workflow_complete
from ..errors import (
    CancellationRequested,
    DependencyFailedError,
    JobCancelledError,
    JobTimeoutError,
    LLMReadableError,
    NucleoSystemError,
    add_suppressed,
    is_fatal_crash,
)
from ..errors._groups import read_raised
from ..jobs.state import JobState

if TYPE_CHECKING:
    from ..jobs.context import JobContext
    from ..jobs.job import AbstractJob
    from ..jobs.snapshot import JobSnapshot
    from ..resources import GrantReleaseError, JobResources
    from .attempt import JobRun

__all__ = [
    "Verdict",
    "account_fault",
    "budget_of",
    "cancelled",
    "commit_cause",
    "forced",
    "is_cancellation",
    "settled_verdict",
    "stopped_after_commit",
    "terminal_event",
    "timed_out",
    "verdict_for",
    "workflow_event",
]

log = logging.getLogger("nucleo_trio.dispatcher")


@attrs.define
class Verdict:
    """How one execution ended, before anything is published."""

    state: JobState
    result: Any = None
    error: BaseException | None = None
    dependency_failure: bool = False
    cancel_message: str | None = None
    forced: bool = False


def cancelled(
    run: JobRun, message: str | None, cause: CancellationRequested | None = None
) -> Verdict:
    """The CANCELLED verdict: the canceller's reason (else ``message``), with ``cause`` (a
    :class:`CancellationRequested`, made from the reason when none) under the error."""
    context = run.context
    reason = context.cancel_reason or message or "Job cancelled"
    if cause is None:
        cause = CancellationRequested(reason)
    return Verdict(
        JobState.CANCELLED,
        error=JobCancelledError(f"{run.job.name} was cancelled: {reason}", cause=cause),
        cancel_message=message or run.cancel_message,
    )


def forced(run: JobRun) -> Verdict:
    """A job interrupted (by the stop) before it could say how it ended. One whose commit
    was sent says what the commit did, so a committed job is never taken for one that
    was rolled back."""
    verdict = cancelled(run, None, commit_cause(run))
    verdict.forced = True
    return verdict


def settled_verdict(run: JobRun, verdict: Verdict) -> Verdict:
    """A cancel or a timeout that landed while the job ran outranks what it returned."""
    context = run.context
    # The flags behind timed_out and is_cancelled: on every job, and a property read is a call.
    if context._timed_out:
        return timed_out(run.job, None)
    if context._cancelled:
        return cancelled(run, None, commit_cause(run))
    return verdict


def verdict_for(run: JobRun, exc: BaseException) -> Verdict:
    """The verdict of an execution that raised ``exc``: a timeout or a cancel that landed
    first outranks it; a dependency's failure and a crash are told apart.

    An exception group (a nursery or a task group inside the job, its ``post_execute`` or a
    guard) is read first: the job fails with its one failure as raised, or with several kept
    as a group; a group of nothing but re-run signals fails with the most demanding of them,
    as a bare one would here, after the attempts."""
    context = run.context
    exc = read_raised(exc).outcome
    if context.timed_out:
        return timed_out(run.job, exc)
    if context.is_cancelled or isinstance(exc, CancellationRequested):
        cause = exc if isinstance(exc, CancellationRequested) else None
        return cancelled(run, None, cause)
    if isinstance(exc, DependencyFailedError):
        return Verdict(JobState.FAILED, error=exc, dependency_failure=True)
    if is_fatal_crash(exc):
        error: BaseException = NucleoSystemError(
            "job", f"{run.job.name} crashed with {type(exc).__name__}: {exc}", exc
        )
        return Verdict(JobState.FAILED, error=error)
    return Verdict(JobState.FAILED, error=exc)


def terminal_event(run: JobRun, verdict: Verdict, snapshot: JobSnapshot) -> ev.JobEvent:
    """The one terminal event the bus publishes for ``verdict``. ``snapshot`` is the job's as
    it stands now: its metadata, frozen a moment ago, is the event's."""
    context = run.context
    if verdict.dependency_failure:
        return ev.DependencyFailureEvent(snapshot=snapshot, error=verdict.error)
    attempts = context.attempt
    llm_responses = tuple(context.llm_responses)
    completion_time = context.completed_at or time.time()
    if verdict.state is JobState.COMPLETED:
        # The common ending is built by position; the rarer ones below check what they get.
        return job_completed(
            snapshot, attempts, llm_responses, snapshot.metadata, completion_time, verdict.result
        )
    common: dict[str, Any] = {
        "snapshot": snapshot,
        "attempts": attempts,
        "llm_responses": llm_responses,
        "metadata": snapshot.metadata,
        "completion_time": completion_time,
    }
    if verdict.state is JobState.TIMED_OUT:
        return ev.JobTimedOut(timeout=run.job.timeout or 0.0, **common)
    if verdict.state is JobState.CANCELLED:
        if verdict.cancel_message is None:
            return ev.JobCancelled(force=verdict.forced, **common)
        return ev.JobCancelled(message=verdict.cancel_message, **common)
    return ev.JobFailedEvent(error=verdict.error, **common)


def timed_out(job: AbstractJob[Any], casualty: BaseException | None) -> Verdict:
    """The one TIMED_OUT verdict: a casualty already readable by a model passes through
    unchanged (TMO-05); anything else, or nothing, becomes a JobTimeoutError over the job's
    budget with the casualty as its cause (TMO-01)."""
    if isinstance(casualty, LLMReadableError) and not isinstance(casualty, CancellationRequested):
        return Verdict(JobState.TIMED_OUT, error=casualty)
    return Verdict(JobState.TIMED_OUT, error=JobTimeoutError(budget_of(job), casualty))


def budget_of(job: AbstractJob[Any]) -> float:
    """The job's timeout as a JobTimeoutError states it (never zero)."""
    return max(job.timeout or 0.0, 1e-9)


def workflow_event(snapshot: JobSnapshot, verdict: Verdict) -> ev.WorkflowCompleteEvent:
    """A root job's end is its workflow's end."""
    if verdict.state is JobState.COMPLETED:
        return workflow_complete(snapshot, True)
    return workflow_complete(
        snapshot, False, f"Workflow ended {verdict.state.value}: {verdict.error}"
    )


def is_cancellation(exc: BaseException) -> bool:
    """trio's own cancellation, bare or inside a group from a nursery: never swallowed."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0] is not None
    return False


def commit_cause(run: JobRun) -> CancellationRequested | None:
    """For a job cancelled once its commit was sent (during its close, its output guards or
    ``post_execute``): what the commit did, so a committed job is never taken for one that was
    rolled back."""
    if run.sent_commit is None:
        return None
    return stopped_after_commit(run.context, run.sent_commit, run.failure)


def stopped_after_commit(
    context: JobContext, resources: JobResources, failure: BaseException | None
) -> CancellationRequested:
    """What a job cancelled (or interrupted) once its commit was sent tells its caller: the
    cancel outranks the outcome (ST-03, ST-06), so the job ends CANCELLED, but its cause
    (a CancelledAfterCommit) says what the commit did and names the databases committed, so a
    committed job is never taken for one that was rolled back."""
    return resources.cancelled_after_commit(
        context.cancel_reason or "the job was interrupted", failure
    )


def account_fault(fault: GrantReleaseError, failure: BaseException | None) -> None:
    """An account raised as a finished attempt's grant went back (ADM-45). The grant is settled
    and every other account has its permits; the fault is the account's, not the job's, so the
    job keeps its verdict and its result. The fault is logged naming the account, and rides on
    the job's own failure, if it has one, as suppressed."""
    log.error(
        "account %s raised while the grant of a finished job went back; the job keeps its "
        "outcome: %s",
        fault.account or "(unknown)",
        fault,
        exc_info=fault,
    )
    if failure is not None:
        add_suppressed(failure, fault)
