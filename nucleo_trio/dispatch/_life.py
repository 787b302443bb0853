"""The dispatcher's life: where it is, the start, and the stop in order.

One :class:`_Phase` says where the dispatcher is; every fact about its life is read from it
(started, stopping, stopped, still serving), so no two of them can disagree, and the public
:class:`~.lifecycle.DispatcherState` is the phase as users see it. What is truly separate is
kept beside it: whether the stop asked for is the fast one, and the failure that stopped it.

:class:`Life` runs the dispatcher's own tasks (the bus, admission, the timekeeper, the control
socket, the heart) in the nursery order the stop undoes, counts the jobs' tasks and the
clean-up tasks that outlive a job, takes the requests to stop (``shutdown``, the end of the
block, a cancellation from outside, a crash or a Ctrl-C inside) and carries out the stop
sequence in the run task: the parked refused, the running given their time then interrupted,
a commit in flight heard, the stuck named, the queued settled, each stoppable stopped, the
databases and limiters it built closed, the bus last.

What the stop does to a job goes through the job's record and the dispatcher's settle step,
handed to :class:`Life` when the dispatcher is built; what crosses the boundary to the program
around it is in :mod:`._boundary`.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import trio

from .._watch import AsyncValue
from ..admission.limiter import RateLimiter
from ..bus import events as ev
from ..jobs.context import current_job
from ..jobs.stoppable import AbstractStoppable
from ..observability.control import ControlServer
from ..observability.event_logger import EventLogger
from ..observability.health import QueueSizes, SystemHealthReporter
from ..resources import DBResourceProvider
from ._boundary import (
    _boundary_error,
    _cancel_after_real_seconds,
    _fatal_in,
    _only_cancellation,
    _StartedRelay,
    _where_stuck,
)
from .attempt import JobRun
from .lanes import Lane
from .lifecycle import DispatcherState
from .timekeeper import Timekeeper
from .verdicts import Verdict, cancelled, forced

if TYPE_CHECKING:
    from .dispatcher import JobDispatcher

__all__ = ["DATABASE_CLOSE_WINDOW", "INTERRUPT_WINDOW", "Life"]

log = logging.getLogger("nucleo_trio.dispatcher")

DATABASE_CLOSE_WINDOW = 10.0
"""Seconds shutdown gives each configured database provider to close its idle connections."""

INTERRUPT_WINDOW = 10.0
"""Seconds shutdown waits for interrupted jobs to end (and each stoppable to stop) before it
goes on without them (:attr:`JobDispatcher.interrupt_window`)."""


class _Phase(enum.IntEnum):
    """Where the dispatcher is in its life, in order; it only moves forward."""

    NEW = 0
    """Built; ``run`` has not been called."""
    STARTING = 1
    """``run`` is starting the dispatcher's own tasks; submits are taken."""
    RUNNING = 2
    """Every task of its own runs."""
    STOPPING = 3
    """A stop was asked for: the stop sequence runs (or is about to)."""
    CLOSING = 4
    """The stop sequence is done with the jobs: nothing is taken any more; the bus and the
    heartbeat store close."""
    ENDING = 5
    """Its own tasks are being cancelled: a crash of one now is the run's end, not a stop."""
    STOPPED = 6
    """The run has ended, however it ended."""


_SEEN_AS = {
    _Phase.NEW: DispatcherState.NEW,
    _Phase.STARTING: DispatcherState.NEW,
    _Phase.RUNNING: DispatcherState.RUNNING,
    _Phase.STOPPING: DispatcherState.STOPPING,
    _Phase.CLOSING: DispatcherState.STOPPING,
    _Phase.ENDING: DispatcherState.STOPPING,
    _Phase.STOPPED: DispatcherState.STOPPED,
}


class Life:
    """One dispatcher's life: its phase, the stop asked for, its own tasks and its stop.

    ``live`` and ``running`` are the dispatcher's tables of jobs not settled yet and of jobs
    whose task runs, ``lanes`` its two queues, ``run_job`` the function of a job's task (see
    :meth:`spawn`), ``finish`` its settle step and ``on_stop`` what it does the instant a stop
    is asked for; the life reads them and changes nothing else of the dispatcher's.
    """

    def __init__(
        self,
        dispatcher: JobDispatcher,
        *,
        timekeeper: Timekeeper,
        live: Mapping[str, JobRun],
        running: Mapping[str, JobRun],
        lanes: Sequence[Lane],
        run_job: Callable[[Any], Awaitable[None]],
        finish: Callable[[JobRun, Verdict], None],
        on_stop: Callable[[], None],
    ) -> None:
        self._dispatcher = dispatcher
        self._timekeeper = timekeeper
        self._live = live
        self._running = running
        self._lanes = lanes
        self._run_job = run_job
        # The name trio would give each job's task, worked out once: trio formats it afresh
        # for every task it starts unnamed, a string each task then keeps for its life.
        self._job_task_name = f"{run_job.__module__}.{run_job.__qualname__}"
        self._finish = finish
        self._on_stop = on_stop
        self.state: AsyncValue[DispatcherState] = AsyncValue(DispatcherState.NEW)
        """The phase as users see it (``JobDispatcher.state``)."""
        self._enter(_Phase.NEW)
        self.fast = False
        """The stop asked for is the fast one: every job cancelled at once, no wait for the
        running ones. Only ever set together with a stop, and never unset."""
        self.token: trio.lowlevel.TrioToken | None = None
        """The trio run the dispatcher serves in, from its start: the one its handles belong to."""
        self.fatal: BaseException | None = None
        """The ``KeyboardInterrupt``, ``SystemExit`` or crash that stopped the dispatcher;
        ``run`` raises it once every handle has settled."""
        self.on_fatal: Callable[[], object] | None = None
        """Called once when a fatal failure stops the dispatcher (``open_dispatcher`` cancels
        its block with it)."""
        self._stop_requested = trio.Event()
        self._closed = trio.Event()
        self._stop_timeout = dispatcher.config.shutdown_timeout
        self._grace_scope = trio.CancelScope()
        self._interrupted_at = 0.0
        self.system: trio.Nursery | None = None
        """The nursery of the dispatcher's own tasks while it runs."""
        self.jobs: trio.Nursery | None = None
        """The nursery of the jobs' tasks while it runs."""
        self._tasks = 0
        self._idle = trio.Event()
        self._idle.set()
        self._background = 0
        self._background_done = trio.Event()
        self.stoppables: list[AbstractStoppable] = [dispatcher.models]
        """Stopped at shutdown, after the jobs and before the bus, in order."""
        self.built_databases: list[DBResourceProvider] = []
        """The database providers the dispatcher built from its configuration: closed at
        shutdown (one passed in is the caller's)."""
        self.built_limiters: list[RateLimiter] = []
        """The accounts the dispatcher built from its configuration: closed at shutdown."""

    # -- the phase ------------------------------------------------------------------------------
    def _enter(self, phase: _Phase) -> None:
        """Move to ``phase``: the one place the phase changes, so the facts read from it below
        (kept as attributes because every submit reads them) can never disagree."""
        self._phase = phase
        self.started = phase >= _Phase.STARTING
        """``run`` was called (and got past loading the plugins)."""
        self.stopping = phase >= _Phase.STOPPING
        """A stop was asked for, or the run has ended."""
        self.stopped = phase >= _Phase.CLOSING
        """The stop sequence is done with the jobs, or the run has ended: nothing is taken."""
        self.is_running = self.started and not self.stopped
        """Started, and the stop is not done with the jobs yet: submits are taken."""
        self.serving = phase < _Phase.ENDING
        """The dispatcher's own tasks are not being cancelled yet: a crash of one stops it."""
        self.state.value = _SEEN_AS[phase]

    def _fast_requested(self) -> bool:
        """``fast`` read afresh after an await (a direct read there would be narrowed by mypy
        to the value checked before the await, and flagged unreachable)."""
        return self.fast

    # -- the requests to stop -------------------------------------------------------------------
    def request_stop(self, *, fast: bool, timeout: float | None = None) -> None:
        """Ask the run task for the stop sequence (see ``JobDispatcher.shutdown``); a fast stop
        skips the wait for running jobs and cancels every job at once. A later fast request
        overtakes a graceful stop already waiting."""
        if self._phase < _Phase.STOPPING:
            self._enter(_Phase.STOPPING)
            self._on_stop()
            heart = self._dispatcher.heart
            if heart is not None:
                heart.stop()  # from this instant nothing fires into a stopping dispatcher
            if timeout is not None:
                self._stop_timeout = timeout
            self._stop_requested.set()
        if fast and not self.fast:
            self.fast = True
            self._grace_scope.cancel()

    def escalate(self, failure: BaseException) -> None:
        """A ``KeyboardInterrupt``, ``SystemExit`` or crash inside the dispatcher: stop at once,
        and let ``run`` raise it once every handle has settled."""
        if self.fatal is None:
            self.fatal = failure
            if self.on_fatal is not None:
                self.on_fatal()  # the block of open_dispatcher stops at once too
        self.request_stop(fast=True)

    def _mark_stopped(self) -> None:
        """However ``run`` ended: a dead run is seen as stopped, and nothing waits on it."""
        self._enter(_Phase.STOPPED)
        self._stop_requested.set()
        self._closed.set()

    async def shutdown(self, wait_for_running: float | None) -> None:
        """``JobDispatcher.shutdown``: ask for the stop (running jobs get ``wait_for_running``
        seconds, else the configured timeout), then wait for it, unless the caller is one of
        the dispatcher's jobs; a Ctrl-C while waiting makes it the fast stop."""
        self.request_stop(fast=False, timeout=wait_for_running)
        caller = current_job()
        if caller is not None and caller.dispatcher is self._dispatcher:
            return
        try:
            await self._closed.wait()
        except BaseException as exc:
            fatal = _fatal_in(exc)
            if fatal is None:
                raise  # a cancelled wait: the stop goes on, and a later call waits for it
            self.request_stop(fast=True)
            with trio.CancelScope(shield=True):
                await self._closed.wait()
            raise

    # -- the run --------------------------------------------------------------------------------
    @trio.lowlevel.enable_ki_protection
    async def run(self, task_status: trio.TaskStatus[None]) -> None:
        """``JobDispatcher.run`` once the plugins are loaded: serve, shielded from the cancel
        scopes around, until the stop is done; then raise what stopped it, if anything did."""
        self._enter(_Phase.STARTING)
        self.token = trio.lowlevel.current_trio_token()
        self._dispatcher.models.envelope.seal_default()  # ENV-02: start seals the default
        try:
            async with trio.open_nursery() as guard:
                guard.start_soon(self._stop_when_cancelled_from_outside)
                with trio.CancelScope(shield=True):
                    await self._serve(task_status)
                guard.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            failure: BaseException | None = self.fatal or _boundary_error(group)
            if failure is group:
                raise
        else:
            failure = self.fatal
        finally:
            self._mark_stopped()
        if failure is not None:
            raise failure  # outside the except block: the failure keeps its own context

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        """The dispatcher's tasks, in the nursery order the shutdown undoes."""
        dispatcher = self._dispatcher
        config, bus = dispatcher.config, dispatcher.bus
        async with trio.open_nursery() as system:
            self.system = system
            bus.on_fatal = self.escalate
            await system.start(self._supervised, bus.run, "the message bus")
            if config.health_every is not None:
                bus.subscribe(self._health_reporter(config.health_every))
            if config.log_events:
                bus.subscribe(EventLogger())
            await system.start(self._supervised, dispatcher.admission.run, "admission")
            await system.start(self._supervised, self._timekeeper.run, "the timekeeper")
            if config.control_socket is not None:
                # Not supervised: it serves until the nursery closes, and keeps its own
                # failures to itself (a client can never stop the dispatcher).
                await system.start(ControlServer(dispatcher, config.control_socket).run)
            bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))
            async with trio.open_nursery() as jobs:
                self.jobs = jobs
                # The Heart may fire at once (overdue slots), so only once jobs can run.
                assert dispatcher.heart is not None
                await system.start(self._supervised, dispatcher.heart.run, "the heart")
                if self._phase is _Phase.STARTING:
                    self._enter(_Phase.RUNNING)
                task_status.started()
                try:
                    await self._stop_requested.wait()
                except BaseException as exc:
                    # Only when run() is the program's main task (``trio.run(dispatcher.run)``):
                    # trio delivers Ctrl-C there even though this task is KI-protected.
                    fatal = _fatal_in(exc)
                    if fatal is None:
                        raise
                    self.escalate(fatal)
                await self._stop_in_order()
                if self._tasks:
                    system.start_soon(self._warn_while_stuck)
            await self._await_background()
            self._enter(_Phase.ENDING)
            system.cancel_scope.cancel()

    def _health_reporter(self, every: int) -> SystemHealthReporter:
        """The reporter the start subscribes: logs a snapshot every ``every`` events."""
        dispatcher = self._dispatcher
        admission = dispatcher.admission
        return SystemHealthReporter(
            every=every,
            memory=admission.memory.account_for(None),
            queues=lambda: QueueSizes(*dispatcher.queued_jobs, admission.queue_size),
        )

    @trio.lowlevel.enable_ki_protection
    async def _supervised(
        self,
        run: Callable[..., Awaitable[None]],
        what: str,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run one of the dispatcher's own tasks. A failure to start leaves ``run`` as itself;
        a crash once started stops the dispatcher in order (every handle settled) instead of
        tearing the nursery down under the jobs."""
        started = False

        def report_started(value: None = None) -> None:
            nonlocal started
            started = True
            task_status.started(value)

        status = cast("trio.TaskStatus[None]", _StartedRelay(report_started))
        try:
            await run(task_status=status)
        except BaseException as exc:  # noqa: BLE001 - escalated below, or re-raised
            if not started or not self.serving or _only_cancellation(exc):
                raise
            log.critical("%s crashed; the dispatcher stops", what, exc_info=exc)
            bus = self._dispatcher.bus
            bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.ERROR, error=exc))
            self.escalate(_fatal_in(exc) or exc)

    @trio.lowlevel.enable_ki_protection
    async def _stop_when_cancelled_from_outside(self) -> None:
        """Sleeps beside the shielded serve: a cancel scope around the dispatcher that is
        cancelled wakes it, and it asks for the stop the shield would otherwise keep out."""
        try:
            await trio.sleep_forever()
        finally:
            self.request_stop(fast=True)

    # -- tasks ----------------------------------------------------------------------------------
    def spawn(self, arg: Any) -> None:
        """Start a job's task (``run_job(arg)``) in the jobs' nursery, counted: the stop waits
        for the count to reach zero. ``run_job`` is KI-protected and calls :meth:`task_ended`
        as its last act, whatever happens (trio runs every task it starts, a cancelled one to
        its first checkpoint)."""
        assert self.jobs is not None
        self._tasks += 1
        if self._tasks == 1:  # the idle event is set exactly while no job's task runs
            self._idle = trio.Event()
        self.jobs.start_soon(self._run_job, arg, name=self._job_task_name)

    def task_ended(self) -> None:
        """A job's task is ending: one fewer for the stop to wait for."""
        self._tasks -= 1
        if self._tasks == 0:
            self._idle.set()

    def spawn_system(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run clean-up that must outlive the job (a forced close's handle closes, then its
        permits). Raises RuntimeError when the system nursery is gone, so the caller falls
        back to doing what it can at once."""
        if self.system is None:
            raise RuntimeError("the dispatcher's system nursery is not running")
        self._background += 1
        self.system.start_soon(self._background_task, fn)

    @trio.lowlevel.enable_ki_protection
    async def _background_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            await fn()
        finally:
            self._background -= 1
            if self._background == 0:
                self._background_done.set()

    async def _await_background(self) -> None:
        """Clean-up that outlives its job (a forced close) finishes before the dispatcher's
        nursery closes, so no connection is still closing in a worker thread once the block is
        left. Bounded by the interrupt window in real seconds: a close is real I/O, and a
        virtual clock (a test's autojump) must not cut it short while its thread works."""
        if not self._background:
            return
        window_seconds = self._dispatcher.interrupt_window
        finished = threading.Event()
        with trio.CancelScope() as window:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_after_real_seconds, window_seconds, finished, window)
                while self._background:
                    self._background_done = trio.Event()
                    await self._background_done.wait()
                finished.set()
                nursery.cancel_scope.cancel()
        if window.cancelled_caught:
            log.error(
                "%d clean-up tasks (forced closes of database handles) were still running "
                "%.0f s after the dispatcher stopped; cancelled",
                self._background,
                window_seconds,
            )

    # -- the stop -------------------------------------------------------------------------------
    async def _stop_in_order(self) -> None:
        """The stop sequence, run by the dispatcher's own task (see ``shutdown``)."""
        dispatcher = self._dispatcher
        window = dispatcher.interrupt_window
        dispatcher.bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STOPPING))
        # The heart is already stopped: request_stop stopped it when the stop was asked for.
        if self.fast:
            self._cancel_everything()
        dispatcher.admission.stop()
        if not self.fast:
            wait = self._stop_timeout or 30.0
            with self._grace_scope:
                self._grace_scope.deadline = trio.current_time() + wait
                await self._idle.wait()
            if self._fast_requested():
                self._cancel_everything()  # overtaken by a fast stop while it waited
        self._interrupted_at = trio.current_time()
        for run in list(self._running.values()):
            run.interrupt()
        with trio.move_on_after(window):
            await self._idle.wait()
        if await self._await_commits_in_flight():
            with trio.move_on_after(window):
                await self._idle.wait()
        for run in list(self._running.values()):
            if not run.handle.done:
                log.warning(self._stuck_report(run))
                self._finish(run, forced(run))
        for lane in self._lanes:
            for run in lane.drain():
                self._finish(run, cancelled(run, "Cancelled by shutdown"))
        await self._stop_stoppables(window)
        await self._close_built_databases()
        await self._close_built_limiters()
        dispatcher.bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STOPPED))
        self._enter(_Phase.CLOSING)
        if dispatcher.bus.is_running:
            await dispatcher.bus.stop()
        if dispatcher.heart is not None:
            try:
                await dispatcher.heart.aclose()
            except Exception:
                log.exception("closing the heartbeat store failed")
        self._closed.set()

    def _cancel_everything(self) -> None:
        """A fast stop's first phase for every job at once: the cancel flag and callbacks (a
        parked job leaves admission holding nothing, a wait on a dependency ends); the
        interrupt that follows is the second phase."""
        for run in list(self._live.values()):
            run.cancel_for_stop()

    async def _await_commits_in_flight(self) -> bool:
        """A job still running with its commit in flight is not stuck: its commit's answer is
        its outcome, and the commit window bounds the wait for it (past it the commit is
        aborted). Wait for each answer; answers whether there was any."""
        waited = False
        for run in list(self._running.values()):
            resources = run.context.resources
            if resources is None or not resources.commit_in_flight:
                continue
            answered = trio.Event()
            resources.on_commit_answer(partial(_set_on_answer, answered))
            await answered.wait()
            waited = True
        return waited

    @trio.lowlevel.enable_ki_protection
    async def _warn_while_stuck(self) -> None:
        """While a job's task outlives the stop, name it again every interrupt window."""
        while self._tasks:
            await trio.sleep(self._dispatcher.interrupt_window)
            for run in list(self._running.values()):
                log.warning(self._stuck_report(run))

    def _stuck_report(self, run: JobRun) -> str:
        task = run.task
        where = _where_stuck(task) if task is not None else "(its task has ended)"
        waited = trio.current_time() - self._interrupted_at
        return (
            f"{run.job.name} ({type(run.job).__qualname__}, workflow "
            f"{run.job.workflow_id}) has not ended {waited:.1f} s after shutdown interrupted "
            f"it; its handle is settled as cancelled and its task is still {where}. A job must "
            "not swallow trio.Cancelled, block in a shielded cancel scope, or wait on a worker "
            "thread that ignores cancellation."
        )

    async def _stop_stoppables(self, window: float) -> None:
        for stoppable in self.stoppables:
            try:
                with trio.move_on_after(window) as cut:
                    await stoppable.stop()
                if cut.cancelled_caught:
                    log.error("stopping %r took over %.0f s; abandoned", stoppable, window)
            except Exception:
                log.exception("stopping %r failed", stoppable)

    async def _close_built_databases(self) -> None:
        """Close the idle connections of the providers this dispatcher built from its config
        (a provider passed in by the caller is the caller's to close)."""
        for provider in self.built_databases:
            await _close_within(provider, f"database {provider.name!r}")

    async def _close_built_limiters(self) -> None:
        """Close the accounts this dispatcher built from its config that hold something
        outside the process (a shared account's hub and lease); a limiter passed in by the
        caller is the caller's to close."""
        for limiter in self.built_limiters:
            await _close_within(limiter, f"limiter {limiter.limiter_name!r}")


async def _close_within(thing: object, what: str) -> None:
    """Close ``thing`` if it has an ``aclose()``, within :data:`DATABASE_CLOSE_WINDOW`; a
    failure or an overrun is logged naming ``what``."""
    aclose = getattr(thing, "aclose", None)
    if aclose is None:
        return
    try:
        with trio.move_on_after(DATABASE_CLOSE_WINDOW) as window:
            await aclose()
        if window.cancelled_caught:
            log.error("closing %s took over %.0f s; abandoned", what, DATABASE_CLOSE_WINDOW)
    except Exception:
        log.exception("closing %s failed", what)


def _set_on_answer(event: trio.Event, committed: bool) -> None:
    event.set()
