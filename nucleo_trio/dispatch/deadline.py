r"""The two-phase timeout, on the job's own nursery.

Phase one is a timekeeper call at the job's deadline: it sets the timeout and cancel
flags, runs the callbacks, closes the resources on a task of their own in the job's
nursery, and sets the nursery's cancel-scope deadline to the end of the grace. Phase two
is that deadline: trio cancels the job, and a timekeeper call force-closes (aborts) what
a job that does not unwind still holds. A job that finishes in time costs one heap
entry. The attempt :func:`arm`\ s it and :func:`disarm`\ s it when it ends; the two timers
live on the job's record.

A deadline that lands while the job's commit is in flight waits for the commit's answer,
for at most the commit window (:data:`~nucleo_trio.resources.COMMIT_WINDOW`; past it
the commit is aborted and its fate unknown). The job's work was done and sent before
its deadline, and the database decides the outcome: committed, the job met its deadline
and ends COMPLETED with its result (reporting TIMED_OUT would invite a retry of work
that is durable; what is left of the attempt is the close, which the commit window
bounds); not committed, phase one runs at once and the caller gets the commit's own
error, which says what was rolled back.
"""

# TMO-04, TMO-05: a deadline that lands during a commit waits for the commit's answer.

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from trio import current_time  # (a trio module attribute costs a slow look-up)

from ..resources import GrantReleaseError, JobResources, ResourceCloseError
from .lanes import grace_period
from .verdicts import account_fault

if TYPE_CHECKING:
    from .attempt import JobRun

__all__ = ["arm", "close_cooperatively", "disarm", "phase_one", "stop_requests_to"]

log = logging.getLogger("nucleo_trio.dispatcher")


def arm(run: JobRun, resources: JobResources, budget: float) -> None:
    """Arm the attempt's two-phase timeout: phase one ``budget`` seconds from now, on
    ``resources``. The timers live on the job's record (no object of their own)."""
    # context.arm_deadline(budget), inline: the deadline is read back for the timekeeper
    run.context.deadline = when = current_time() + budget
    run.held = resources
    run.budget = budget
    run.grace_call = None
    run.deadline_call = run.runtime.timekeeper.call_at(when, run.at_deadline)


def phase_one(run: JobRun) -> None:
    """The deadline: time the job out, unless its commit decides (see the module)."""
    resources = run.held
    assert resources is not None
    if resources.commit_in_flight:
        resources.request_stop()
        resources.on_commit_answer(run.after_commit)
        return
    if resources.commit_sent and resources.all_committed:
        return  # committed before the deadline; the attempt has not resumed yet
    run.context.time_out()
    assert run.nursery is not None
    run.nursery.start_soon(close_cooperatively, resources)
    phase_two = trio.current_time() + grace_period(run.budget)
    run.nursery.cancel_scope.deadline = phase_two
    run.grace_call = run.runtime.timekeeper.call_at(phase_two, resources.force_close)


def disarm(run: JobRun) -> None:
    """The attempt ended (or its commit answered): drop what has not run."""
    if run.deadline_call is not None:
        run.deadline_call.cancel()
    if run.grace_call is not None:
        run.grace_call.cancel()


@trio.lowlevel.enable_ki_protection
async def close_cooperatively(resources: JobResources) -> None:
    """Phase one's close, on a task of its own in the job's nursery."""
    try:
        await resources.aclose()
    except ResourceCloseError:
        log.exception("closing the resources of a timed-out job failed")
    except GrantReleaseError as fault:
        account_fault(fault, None)


def stop_requests_to(resources: JobResources, run: JobRun) -> Callable[[], None]:
    """While the commit is in flight, a cancel of the job or an interrupt of its nursery (phase
    two, a shutdown) asks the commit to answer within its window. Returns the call that stops
    listening."""
    unregister = run.context.on_cancel(resources.request_stop)
    listening = trio.CancelScope()
    assert run.nursery is not None
    run.nursery.start_soon(_request_stop_when_interrupted, resources, listening)

    def unwatch() -> None:
        unregister()
        listening.cancel()

    return unwatch


@trio.lowlevel.enable_ki_protection
async def _request_stop_when_interrupted(
    resources: JobResources, listening: trio.CancelScope
) -> None:
    with listening:
        try:
            await trio.sleep_forever()
        finally:
            if not listening.cancel_called:  # the job's nursery was cancelled, not this task
                resources.request_stop()
