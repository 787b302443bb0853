"""Dependencies: the graph the door refuses cycles against, and the wait that holds nothing.

A job may name other jobs (their handles, or jobs not yet submitted) as dependencies. At the
door, :meth:`DependencyGraph.refuse_cycle` refuses a list that would close a cycle, with the
cycle spelled out. Once the job's task runs, :func:`await_dependencies` waits for each one
holding nothing (no permit, no connection), so a dependency can never deadlock against its
dependent in admission; a cancel of the waiting job ends the wait at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..errors import CancellationRequested, DependencyFailedError
from ..jobs.handle import JobHandle

if TYPE_CHECKING:
    from ..jobs.context import JobContext
    from ..jobs.job import AbstractJob
    from ..jobs.snapshot import JobSnapshot
    from .attempt import JobRun

__all__ = ["DependencyGraph", "await_dependencies", "wait_holding_nothing"]


class DependencyGraph:
    """The live jobs' dependency edges, and the waits on jobs named before they were submitted."""

    def __init__(self) -> None:
        self._edges: dict[str, tuple[str, ...]] = {}
        self._waited_on: dict[str, int] = {}
        """How many live jobs name each job id as a dependency: only such an id can close a
        cycle when it is submitted."""
        self.submission_waiters: dict[str, list[trio.Event]] = {}
        """For each job id named before it was submitted: the waits on it (read on every
        submission, so it is asked of the dict before :meth:`submitted` is called)."""
        self.awaiting_submission: dict[str, str] = {}
        """For each job parked until a dependency is submitted: that dependency's name."""
        self.on_awaiting: Callable[[], object] | None = None
        """Called each time a job starts waiting for a dependency's submission."""

    def refuse_cycle(self, job: AbstractJob[Any], deps: tuple[Any, ...]) -> None:
        """A dependency list that closes a cycle is refused with the cycle spelled out
        (:class:`ValueError`).

        A job being submitted has no dependents yet except live jobs that named it (by its job
        object) before it was submitted, so the walk runs only when such a job exists; then it
        is one iterative search over the live graph, each job visited once.
        """
        target = job.job_id
        ids = [dep.job_id for dep in deps]
        if target not in self._waited_on:
            if target in ids:
                raise ValueError(cycle_message(target, [target]))
            return
        came_from: dict[str, str | None] = {}
        stack: list[str] = []
        for dep_id in ids:
            if dep_id not in came_from:
                came_from[dep_id] = None
                stack.append(dep_id)
        while stack:
            node = stack.pop()
            if node == target:
                path: list[str] = []
                step: str | None = node
                while step is not None:
                    path.append(step)
                    step = came_from[step]
                raise ValueError(cycle_message(target, path[::-1]))
            for nxt in self._edges.get(node, ()):
                if nxt not in came_from:
                    came_from[nxt] = node
                    stack.append(nxt)

    def track(self, job_id: str, deps: tuple[Any, ...]) -> None:
        """Record the edges of a job admitted through the door."""
        dep_ids = tuple(dep.job_id for dep in deps)
        self._edges[job_id] = dep_ids
        waited_on = self._waited_on
        for dep_id in dep_ids:
            waited_on[dep_id] = waited_on.get(dep_id, 0) + 1

    def untrack(self, job_id: str) -> None:
        """Forget the edges of a job that settled."""
        waited_on = self._waited_on
        for dep_id in self._edges.pop(job_id, ()):
            left = waited_on.get(dep_id, 0) - 1
            if left > 0:
                waited_on[dep_id] = left
            else:
                waited_on.pop(dep_id, None)

    def submitted(self, job_id: str) -> None:
        """``job_id`` was just submitted: wake the jobs that named it before it was."""
        for waiter in self.submission_waiters.pop(job_id, ()):
            waiter.set()

    def awaits_submission(self, job_id: str) -> bool:
        """Whether a job waits for ``job_id`` to be submitted."""
        return job_id in self.submission_waiters

    def held(self) -> dict[str, int]:
        """How many entries each table holds (all zero once every job settled): for the soak's
        and the tests' checks that nothing is left behind."""
        return {
            "edges": len(self._edges),
            "waited_on": len(self._waited_on),
            "submitted_waiters": len(self.submission_waiters),
            "awaiting_submission": len(self.awaiting_submission),
        }

    async def handle_of(self, context: JobContext, job: AbstractJob[Any]) -> JobHandle[Any]:
        """A dependency named by its job: wait until it is submitted, then use its handle."""
        while job._context is None or job._context.handle is None:
            submitted = trio.Event()
            waiters = self.submission_waiters.setdefault(job.job_id, [])
            waiters.append(submitted)
            self.awaiting_submission[context.job_id] = job.name
            if self.on_awaiting is not None:
                self.on_awaiting()
            try:
                await wait_holding_nothing(context, submitted.wait)
            finally:
                del self.awaiting_submission[context.job_id]
                if not submitted.is_set():  # cancelled: forget this waiter
                    waiters.remove(submitted)
                    if not waiters and self.submission_waiters.get(job.job_id) is waiters:
                        del self.submission_waiters[job.job_id]
        handle = job._context.handle
        assert handle is not None
        return handle


async def wait_holding_nothing(context: JobContext, wait: Callable[[], Awaitable[object]]) -> None:
    """Await ``wait()`` (an event's ``wait``, a handle's settle); a cancel of the job ends the
    wait with CancellationRequested."""
    with trio.CancelScope() as scope:
        unregister = context.on_cancel(scope.cancel)
        try:
            await wait()
        finally:
            unregister()
    if scope.cancelled_caught:
        raise CancellationRequested(context.cancel_reason or "Job cancelled")


async def await_dependencies(graph: DependencyGraph, run: JobRun) -> None:
    """Wait for each dependency holding nothing; key the outcomes by final snapshot. A failed
    dependency fails the job (:class:`DependencyFailedError`) unless it tolerates that."""
    context = run.context
    results: dict[JobSnapshot, Any] = {}
    errors: dict[JobSnapshot, BaseException] = {}
    for dep in run.dependencies:
        dep_handle = dep if isinstance(dep, JobHandle) else await graph.handle_of(context, dep)
        await wait_holding_nothing(context, dep_handle._wait_settled)
        snapshot = dep_handle.context.snapshot()
        if dep_handle.error is None:
            results[snapshot] = dep_handle._result
            continue
        if not run.job.tolerates_dependency_failures:
            raise DependencyFailedError(dep_handle.job_id, dep_handle.error)
        results[snapshot] = None
        errors[snapshot] = dep_handle.error
    context.set_dependency_outcomes(results, errors)


def cycle_message(target: str, path: list[str]) -> str:
    return (
        f"Cycle detected: submitting {target} with these dependencies closes the cycle "
        + " -> ".join([target, *path])
    )
