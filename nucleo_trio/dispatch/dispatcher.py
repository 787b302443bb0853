"""The dispatcher: the door every job passes, the lanes, and the one attempt in order.

A submission crosses the door's walls (authority, parent/thread, scope), is routed to a lane
(or straight to a task when it declines queueing), and runs as one trio task in the
dispatcher's job nursery. That task awaits the job's dependencies holding nothing, runs the
input guards, captures the attempt's requirements, and asks :class:`~nucleo_trio.admission.Admission`
for the whole demand at once. With the grant in hand it opens the job's own nursery, where a
watchdog arms the two-phase timeout around the attempt's cancel scope, and runs
``pre_execute``, ``execute``, the limiter signals and the release. Then the output guards,
``post_execute``, the terminal event, the workflow event, the teardown, and last of all the
handle settles. Upstream signals re-run the attempt with jittered pacing against the job's own
budget.
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import attrs
import pluggy
import trio

from ..admission import Admission, Grant, HttpConnectionGate
from ..admission.limiter import LimiterEventType, LimiterIdentity, RateLimiter
from ..admission.memory_gate import MemoryPressureGate
from ..admission.memory_reader import memory_reader_from
from ..admission.registry import RateLimiterRegistry
from ..bus import events as ev
from ..bus.bus import MessageBus
from ..errors import (
    MAX_PACING_SECONDS,
    CancellationRequested,
    ConfigError,
    DependencyFailedError,
    ExternalServiceError,
    JobCancelledError,
    JobTimeoutError,
    LLMReadableError,
    NucleoSystemError,
    OutputTruncationRetry,
    RateLimitRetry,
    RerunSignal,
    ResponseCorrectionRetry,
    UncorrectableError,
    UpstreamFailure,
    UpstreamRetry,
    add_suppressed,
    is_fatal_crash,
    log_failure,
)
from ..guardrails import (
    ScopeGuard,
    StandardGuardrailEnforcer,
    check_attached_guardrails,
    is_guard_under_enforcement,
)
from ..heartbeat import Heart, Heartbeat, HeartbeatStore, ScheduleHeartbeat, heartbeat_store_from
from ..jobs.context import JobContext, _current, current_job
from ..jobs.handle import JobHandle
from ..jobs.job import AbstractJob, ScopeAuthority
from ..jobs.requirements import JobRequirements
from ..jobs.snapshot import JobSnapshot
from ..jobs.state import JobState
from ..jobs.stoppable import AbstractStoppable
from ..models.envelope import ComplianceEnvelope
from ..models.runtime import ModelDemandAssembler, ModelRuntime, binding_accounts
from ..models.spend import SpendGate
from ..observability.event_logger import EventLogger
from ..observability.health import HealthSnapshot, QueueSizes, SystemHealthReporter, capture_health
from ..plugins.manager import (
    DBProviderKinds,
    GuardrailKinds,
    LimiterRegistry,
    PluginError,
    make_plugin_manager,
)
from ..resources import DBResourceProvider, DBResourceProviders, JobResources, ResourceCloseError
from .config import DispatcherConfig
from .lanes import PRIORITY_LANE_MAX_TIMEOUT, Lane, QueuedJob, grace_period
from .seams import DemandAssembler, GuardrailEnforcer
from .timekeeper import Timekeeper, TimerHandle

__all__ = [
    "MAX_CORRECTION_RETRIES",
    "OBS_CALLER_CLASS",
    "DelayedSubmission",
    "JobDispatcher",
    "open_dispatcher",
]

log = logging.getLogger("nucleo_trio.dispatcher")

R = TypeVar("R")

OBS_CALLER_CLASS = "obs.caller_class"
"""Metadata key: the fully qualified class of the job that submitted this one (SUB-12)."""

MAX_CORRECTION_RETRIES = 4
"""The dispatcher's backstop behind a job's own correction budget (EXEC-16)."""

MAX_TRUNCATION_RETRIES = 1

DATABASE_CLOSE_WINDOW = 10.0
"""Seconds shutdown gives each configured database provider to close its idle connections."""


@attrs.define
class _Verdict:
    """How one execution ended, before anything is published."""

    state: JobState
    result: Any = None
    error: BaseException | None = None
    dependency_failure: bool = False
    cancel_message: str | None = None
    forced: bool = False


class DelayedSubmission:
    """The answer of :meth:`JobDispatcher.submit_with_delay`: await :meth:`handle`."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._handle: JobHandle[Any] | None = None
        self._error: BaseException | None = None

    async def handle(self) -> JobHandle[Any]:
        """The handle once the delay has passed, or the refusal the submission met."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._handle is not None
        return self._handle

    @property
    def done(self) -> bool:
        return self._done.is_set()


class JobDispatcher:
    """Runs a tree of jobs: the door, the lanes, admission, the attempt, the bus.

    Start it with ``async with open_dispatcher() as dispatcher`` (or
    ``await nursery.start(dispatcher.run)``), then :meth:`submit` jobs and await their handles.
    """

    def __init__(
        self,
        config: DispatcherConfig | None = None,
        *,
        memory: RateLimiter | None = None,
        bus: MessageBus | None = None,
        guardrails: GuardrailEnforcer | None = None,
        demand_assembler: DemandAssembler | None = None,
        plugin_manager: pluggy.PluginManager | None = None,
        models: ModelRuntime | None = None,
        heartbeat_store: HeartbeatStore | None = None,
    ) -> None:
        self.config = config or DispatcherConfig()
        self._heartbeat_store = heartbeat_store
        self.heart: Heart | None = None
        """The heartbeat schedule and its two tasks, built at start with the store the plugins
        chose for ``config.heartbeat`` (or the ``heartbeat_store`` passed in)."""
        self._plugin_manager = plugin_manager
        self.plugins: pluggy.PluginManager | None = None
        self.limiter_kinds: LimiterRegistry | None = None
        self.limiters: dict[str, RateLimiter] = {}
        self.accounts = RateLimiterRegistry()  # shared accounts: per class, per model entry
        self.databases = DBResourceProviders()
        self._built_databases: list[DBResourceProvider] = []
        """The database providers jobs may declare by name (``require_database("orders")``)."""
        self.db_kinds: DBProviderKinds | None = None
        self.bus = bus or MessageBus()
        self.memory_gate: MemoryPressureGate | None = None
        """The dispatcher's memory pressure gate; ``None`` when a ``memory`` account was passed
        in or ``config.memory`` switched it off. Its reader is chosen by the plugins at start."""
        if memory is None and self.config.memory.enabled:
            memory = self.memory_gate = MemoryPressureGate()
        self.admission = Admission(memory, emit=self._emit_limiter_event)
        self._timekeeper = Timekeeper()
        self.http_gate: RateLimiter = HttpConnectionGate(self.config.http_connections)
        self.guardrails: GuardrailEnforcer = guardrails or StandardGuardrailEnforcer()
        self.guardrail_kinds: GuardrailKinds | None = None
        """The guardrails plugins register by name; configuration attaches them to tool classes."""
        self.models = (models or ModelRuntime()).attach(self)
        """The dispatcher's models: catalog, picker, compliance envelope, spend gates, clients."""
        self.demand_assembler: DemandAssembler = demand_assembler or ModelDemandAssembler(
            self.models, self.accounts
        )
        self._rng = random.Random(self.config.seed)
        self._fast = Lane("fast", prioritized=True)
        self._standard = Lane("standard", prioritized=False)
        self._live: dict[str, QueuedJob] = {}
        self._running: dict[str, QueuedJob] = {}
        self._edges: dict[str, tuple[str, ...]] = {}
        self._stoppables: list[AbstractStoppable] = [self.models]
        self._started = False
        self._stopping = False
        self._stopped = False
        self._jobs: trio.Nursery | None = None
        self._system: trio.Nursery | None = None
        self._tasks = 0
        self._idle = trio.Event()
        self._idle.set()
        self._closed = trio.Event()
        self._submitted_waiters: dict[str, list[trio.Event]] = {}

    # -- life -----------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._started and not self._stopped

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the dispatcher until :meth:`shutdown`. A second start is a no-op with a warning."""
        if self._started:
            warnings.warn(
                "JobDispatcher is already started; the second start does nothing",
                RuntimeWarning,
                stacklevel=2,
            )
            log.warning("JobDispatcher.run: already started, ignoring the second start")
            task_status.started()
            return
        if self.plugins is None:
            self._load_plugins()
        self._started = True
        self.models.envelope.seal_default()  # ENV-02: start seals the default if none was
        async with trio.open_nursery() as system:
            self._system = system
            await system.start(self.bus.run)
            if self.config.health_every is not None:
                self.bus.subscribe(self._health_reporter(self.config.health_every))
            if self.config.log_events:
                self.bus.subscribe(EventLogger())
            await system.start(self.admission.run)
            await system.start(self._timekeeper.run)
            self.bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))
            async with trio.open_nursery() as jobs:
                self._jobs = jobs
                # The Heart may fire at once (overdue slots), so only once jobs can run.
                assert self.heart is not None
                await system.start(self.heart.run)
                task_status.started()
                await self._closed.wait()
            system.cancel_scope.cancel()

    def _load_plugins(self) -> None:
        """Plugins (built-ins, then entry points, then ``check_pending``) and the configured
        limiters, before anything runs: a broken plugin or a bad limiter refuses the start."""
        self.plugins = self._plugin_manager or make_plugin_manager()
        if self.memory_gate is not None:
            self.memory_gate.use_reader(memory_reader_from(self.plugins, self.config.memory.limit))
        self.limiter_kinds = LimiterRegistry(self.plugins)
        for name, declared in self.config.limiters.items():
            try:
                self.limiters[name] = self.limiter_kinds.create(
                    declared.kind, name, **declared.settings
                )
            except (PluginError, TypeError, ValueError) as exc:
                raise ConfigError(f"dispatcher config: limiter {name!r}: {exc}") from exc
        self.db_kinds = DBProviderKinds(self.plugins)
        for name, database in self.config.databases.items():
            try:
                provider = self.db_kinds.create(database.kind, name, **database.settings)
                self.databases.register(provider)
                self._built_databases.append(provider)
            except (PluginError, RuntimeError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"dispatcher config: database {name!r} (kind {database.kind!r}): {exc}"
                ) from exc
        self.guardrail_kinds = GuardrailKinds(self.plugins)
        check_attached_guardrails(self.config.guardrails, self.guardrail_kinds)
        # Last: the store may open a file, and nothing after it can refuse the start.
        store = self._heartbeat_store or heartbeat_store_from(self.plugins, self.config.heartbeat)
        self.heart = Heart(self, store)

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - the seed's shutdown(timeoutMs)
        """Stop in the seed's order.

        Every parked waiter is refused first, then the lanes stop; running jobs get ``timeout``
        seconds (the config's, 30 s when zero) before they are interrupted; every job still queued
        is settled as cancelled; each registered stoppable stops; the bus stops last, delivering
        what was published before it.
        """
        if not self._started:
            raise RuntimeError("JobDispatcher.shutdown: the dispatcher was never started")
        if self._stopping:
            await self._closed.wait()
            return
        self._stopping = True
        self.bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STOPPING))
        if self.heart is not None:
            self.heart.stop()  # nothing fires into a dispatcher that is shutting down
        wait = self.config.shutdown_timeout if timeout is None else timeout
        if not wait:
            wait = 30.0
        self.admission.stop()
        with trio.move_on_after(wait):
            await self._idle.wait()
        for queued in list(self._running.values()):
            queued.interrupt()
        await self._idle.wait()
        for lane in (self._fast, self._standard):
            for queued in lane.drain():
                self._finish(queued, self._cancelled(queued, "Cancelled by shutdown"))
        for stoppable in self._stoppables:
            try:
                await stoppable.stop()
            except Exception:
                log.exception("stopping %r failed", stoppable)
        await self._close_built_databases()
        self.bus.publish(ev.SchedulerEvent(type=ev.SchedulerEventType.STOPPED))
        self._stopped = True
        await self.bus.stop()
        if self.heart is not None:
            await self.heart.aclose()
        self._closed.set()

    async def _close_built_databases(self) -> None:
        """Close the idle connections of the providers this dispatcher built from its config
        (a provider passed in by the caller is the caller's to close)."""
        for provider in self._built_databases:
            aclose = getattr(provider, "aclose", None)
            if aclose is None:
                continue
            try:
                with trio.move_on_after(DATABASE_CLOSE_WINDOW) as window:
                    await aclose()
                if window.cancelled_caught:
                    log.error(
                        "closing database %r took over %.0f s; abandoned",
                        provider.name,
                        DATABASE_CLOSE_WINDOW,
                    )
            except Exception:
                log.exception("closing database %r failed", provider.name)

    def schedule_heartbeat(
        self, spec: ScheduleHeartbeat, user_id: str, *, scope_guard: ScopeGuard | None = None
    ) -> Heartbeat:
        """Schedule ``spec`` with the dispatcher's authority: its fires run for ``user_id``.

        The boot and operator entry (an orchestrator schedules with ``context.publish(spec)``
        instead). The heartbeat is minted here under ``user_id`` and ``scope_guard`` (no scope
        when ``None``) and handed to the Heart, which publishes ``HeartbeatScheduled``, or
        ``HeartbeatRebound`` when the id was already scheduled. A blank user is refused with
        :class:`ValueError`, a call while the dispatcher is not running with RuntimeError, and a
        call from inside a job (which could name any user) with a system error.
        """
        if self.heart is None or not self._started or self._stopping:
            raise RuntimeError(
                "JobDispatcher.schedule_heartbeat: the dispatcher is not running; schedule once "
                "it has started (boot code re-publishes fixed schedules at every start)"
            )
        return self.heart._schedule(spec, user_id, scope_guard)

    def register_stoppable(self, stoppable: AbstractStoppable) -> None:
        """Stop ``stoppable`` at shutdown, after the jobs and before the bus."""
        self._stoppables.append(stoppable)

    # -- models ---------------------------------------------------------------------------------
    @property
    def compliance_envelope(self) -> ComplianceEnvelope:
        """The sealed envelope; before any seal the refusing default, read without sealing
        (ENV-01)."""
        return self.models.compliance_envelope

    def seal_compliance_envelope(self, envelope: ComplianceEnvelope) -> None:
        """Seal the envelope every model resolution answers to, once: a second seal is a
        RuntimeError and ``None`` a ValueError (ENV-02)."""
        self.models.seal_compliance_envelope(envelope)

    def register_spend_gate(self, gate: SpendGate) -> None:
        """Consult ``gate`` on every attempt after its bindings are priced and before anything
        is held (EXEC-14); ``None`` is a ValueError."""
        self.models.register_spend_gate(gate)

    # -- the door -------------------------------------------------------------------------------
    def submit(
        self,
        job: AbstractJob[R],
        dependencies: Iterable[JobHandle[Any] | AbstractJob[Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[R]:
        """Submit ``job`` and return its handle at once; never awaits.

        A refusal at the door is a handle born failed, never an exception (SUB-01). A dependency
        list that would close a cycle is a programming error and raises :class:`ValueError`.
        """
        if not self._started:
            raise RuntimeError(
                "JobDispatcher.submit: the dispatcher is not started; use "
                "`async with open_dispatcher() as dispatcher:` or `await nursery.start(dispatcher.run)`"
            )
        if not isinstance(job, AbstractJob):
            raise TypeError(f"submit() takes a job (an AbstractJob), got {type(job).__name__}")
        if job._context is not None:
            raise RuntimeError(f"{job.name} was already submitted; a job instance runs once")
        deps = tuple(dependencies)
        for dep in deps:
            if not isinstance(dep, JobHandle | AbstractJob):
                raise TypeError(
                    f"{job.name}: a dependency must be a JobHandle or a job, got {type(dep).__name__}"
                )
        self._refuse_cycle(job, deps)

        caller = current_job()
        context = JobContext(
            job, job.user_id, dispatcher=self, metadata=metadata, publish=self.bus.publish
        )
        if caller is not None:
            caller_cls = type(caller.job)
            context.metadata[OBS_CALLER_CLASS] = (
                f"{caller_cls.__module__}.{caller_cls.__qualname__}"
            )
        job._context = context
        handle: JobHandle[R] = JobHandle(job, context)
        handle._canceller = self.cancel
        context.handle = handle
        for waiter in self._submitted_waiters.pop(job.job_id, ()):
            waiter.set()

        refusal = self._door(job, caller, context)
        if refusal is not None:
            self._born_failed(context, handle, refusal)
            return handle
        requirements = job.requirements()
        if requirements.has_resources and job.timeout is None:
            self._born_failed(
                context,
                handle,
                NucleoSystemError(
                    "dispatcher",
                    f"{job.name} declares resources but no timeout; admission's progress rests on "
                    "every permit returning in finite time, so set a timeout on the job",
                ),
            )
            return handle

        queued = QueuedJob(job, context, handle, deps, requirements)
        self._live[job.job_id] = queued
        self._edges[job.job_id] = tuple(self._id_of(d) for d in deps)
        if self.bus.has_listeners(job.workflow_id):
            self.bus.publish(
                ev.JobScheduled(
                    snapshot=context.snapshot(),
                    state=ev.ScheduledState.QUEUED,
                    requirements=requirements,
                    priority=job.priority,
                )
            )
        if not requirements.requires_queueing:
            self._spawn(self._run_job, queued)
        elif job.timeout is not None and job.timeout <= PRIORITY_LANE_MAX_TIMEOUT:
            self._offer(self._fast, queued)
        else:
            self._offer(self._standard, queued)
        return handle

    def submit_with_delay(self, job: AbstractJob[Any], delay: float | None) -> DelayedSubmission:
        """Submit ``job`` as a root after ``delay`` seconds (none, zero or negative: at once).

        The submission happens on a fresh task outside any job, so it can only create roots: a
        delayed child of a live job is refused at the door (SUB-13).
        """
        if not self._started or self._system is None:
            raise RuntimeError("JobDispatcher.submit_with_delay: the dispatcher is not started")
        answer = DelayedSubmission()

        async def later() -> None:
            _current.set(None)
            try:
                if delay is not None and delay > 0:
                    await trio.sleep(delay)
                answer._handle = self.submit(job)
            except Exception as exc:
                answer._error = exc
            finally:
                answer._done.set()

        self._system.start_soon(later)
        return answer

    def _door(
        self, job: AbstractJob[Any], caller: JobContext | None, context: JobContext
    ) -> BaseException | None:
        """The three walls, in order; the first refusal, or ``None``."""
        if (
            caller is not None
            and not isinstance(caller.job, ScopeAuthority)
            and not is_guard_under_enforcement(job, caller)  # the internal door
        ):
            return NucleoSystemError(
                "dispatcher",
                f"Only orchestrators may submit jobs from inside a job: {caller.job.name} "
                f"({type(caller.job).__qualname__}) is not a ScopeAuthority and tried to submit {job.name}",
            )
        parent_id = job.parent_job_id
        if parent_id is not None and parent_id in self._live:
            if caller is None:
                return NucleoSystemError(
                    "dispatcher",
                    f"{job.name} names the live job {parent_id} as its parent, but code outside any "
                    "job may only create new roots",
                )
            if caller.job_id != parent_id:
                return NucleoSystemError(
                    "dispatcher",
                    f"{job.name} names the live job {parent_id} as its parent, but that job "
                    f"runs on the thread of its own task, not {caller.job.name}'s",
                )
        if self._stopping:
            return NucleoSystemError(
                "dispatcher", f"{job.name} was submitted while the dispatcher is shutting down"
            )
        return self.guardrails.judge_submission(job, caller, context.metadata)

    @staticmethod
    def _id_of(dep: JobHandle[Any] | AbstractJob[Any]) -> str:
        return dep.job_id

    def _refuse_cycle(self, job: AbstractJob[Any], deps: tuple[Any, ...]) -> None:
        target = job.job_id
        for dep in deps:
            path = self._path_to(self._id_of(dep), target, [target])
            if path is not None:
                raise ValueError(
                    f"Cycle detected: submitting {target} with these dependencies closes the cycle "
                    + " -> ".join(path)
                )

    def _path_to(self, node: str, target: str, path: list[str]) -> list[str] | None:
        path = [*path, node]
        if node == target:
            return path
        for nxt in self._edges.get(node, ()):
            found = self._path_to(nxt, target, path)
            if found is not None:
                return found
        return None

    def _born_failed(
        self, context: JobContext, handle: JobHandle[Any], error: BaseException
    ) -> None:
        context.set_state(JobState.FAILED)
        log_failure(log, error)
        if self.bus.has_listeners(context.workflow_id):
            snapshot = context.snapshot()
            self.bus.publish(ev.JobFailedEvent(snapshot=snapshot, error=error, attempts=0))
            if snapshot.is_root:
                self.bus.publish(
                    ev.WorkflowCompleteEvent(snapshot=snapshot, successful=False, reason=str(error))
                )
        handle._settle(error=error)

    # -- lanes and tasks ------------------------------------------------------------------------
    def _offer(self, lane: Lane, queued: QueuedJob) -> None:
        if lane.offer(queued):
            self._spawn(self._relay, lane)

    async def _relay(self, lane: Lane) -> None:
        """One leg of a lane's relay: take the lane's next job, pass the baton, run the job.

        Each job's task, as its first act, starts the task that takes the job after it, so a
        lane hands out its jobs strictly in order (priority, then submission) at one scheduler
        step per job, and a job stays queued, and cancellable as queued, until its task runs.
        """
        queued = lane.take()
        if queued is None:
            return
        if lane.active:
            self._spawn(self._relay, lane)
        if self._stopping:
            # A job still queued at shutdown is settled as cancelled, never started into a
            # closed admission.
            self._finish(queued, self._cancelled(queued, "Cancelled by shutdown"))
            return
        await self._run_job(queued)

    def _spawn(self, fn: Callable[[Any], Awaitable[None]], arg: Any) -> None:
        assert self._jobs is not None
        self._tasks += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        self._jobs.start_soon(self._counted, fn, arg)

    async def _counted(self, fn: Callable[[Any], Awaitable[None]], arg: Any) -> None:
        try:
            await fn(arg)
        finally:
            self._tasks -= 1
            if self._tasks == 0:
                self._idle.set()

    async def _run_job(self, queued: QueuedJob) -> None:
        """The job's task. The job runs in its own nursery, whose cancel scope is the one
        shutdown cancels to interrupt it and phase two of a timeout cancels at its deadline."""
        context = queued.context
        _current.set(context)
        self._running[queued.job.job_id] = queued
        context.try_transition(JobState.SCHEDULED)
        try:
            self._finish(queued, await self._run_in_own_nursery(queued))
        finally:
            self._running.pop(queued.job.job_id, None)

    async def _run_in_own_nursery(self, queued: QueuedJob) -> _Verdict:
        outcome: list[_Verdict] = []
        try:
            async with trio.open_nursery() as job_nursery:
                queued.nursery = job_nursery
                if queued.interrupted:
                    job_nursery.cancel_scope.cancel()
                outcome.append(await self._execute(queued))
        except BaseException as exc:  # noqa: BLE001 - what the job's nursery let through
            if isinstance(exc, KeyboardInterrupt | SystemExit) or (
                _is_cancellation(exc) and not queued.interrupted
            ):
                raise
            return self._verdict_for(queued, exc)
        if outcome:
            return outcome[0]
        if queued.context.timed_out and not queued.interrupted:
            # Phase two cancelled the job at the grace's end: the timeout is the verdict.
            return _Verdict(JobState.TIMED_OUT, error=JobTimeoutError(_budget(queued.job)))
        forced = self._cancelled(queued, None)  # shutdown interrupted the job
        forced.forced = True
        return forced

    # -- one execution --------------------------------------------------------------------------
    async def _execute(self, queued: QueuedJob) -> _Verdict:
        job, context = queued.job, queued.context
        try:
            await self._await_dependencies(queued)
            await self.guardrails.before_resources(job, context)
            result = await self._run_attempts(queued)
            context.set_result(result)
            await self.guardrails.after_release(job, context, result)
            await job.post_execute(context)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes the job's verdict
            if _is_cancellation(exc):
                raise
            return self._verdict_for(queued, exc)
        return self._settled_verdict(queued, _Verdict(JobState.COMPLETED, result=result))

    def _settled_verdict(self, queued: QueuedJob, verdict: _Verdict) -> _Verdict:
        """A cancel or a timeout that landed while the job ran outranks what it returned."""
        context = queued.context
        if context.timed_out:
            timeout = queued.job.timeout or 0.0
            return _Verdict(JobState.TIMED_OUT, error=JobTimeoutError(max(timeout, 1e-9)))
        if context.is_cancelled:
            return self._cancelled(queued, None)
        return verdict

    def _verdict_for(self, queued: QueuedJob, exc: BaseException) -> _Verdict:
        context = queued.context
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise exc
        if context.timed_out:
            timeout = max(queued.job.timeout or 0.0, 1e-9)
            if isinstance(exc, LLMReadableError) and not isinstance(exc, CancellationRequested):
                return _Verdict(JobState.TIMED_OUT, error=exc)
            return _Verdict(JobState.TIMED_OUT, error=JobTimeoutError(timeout, exc))
        if context.is_cancelled or isinstance(exc, CancellationRequested):
            cause = exc if isinstance(exc, CancellationRequested) else None
            return self._cancelled(queued, None, cause)
        if isinstance(exc, DependencyFailedError):
            return _Verdict(JobState.FAILED, error=exc, dependency_failure=True)
        if is_fatal_crash(exc):
            error: BaseException = NucleoSystemError(
                "job", f"{queued.job.name} crashed with {type(exc).__name__}: {exc}", exc
            )
            return _Verdict(JobState.FAILED, error=error)
        return _Verdict(JobState.FAILED, error=exc)

    def _cancelled(
        self, queued: QueuedJob, message: str | None, cause: CancellationRequested | None = None
    ) -> _Verdict:
        context = queued.context
        reason = context.cancel_reason or message or "Job cancelled"
        if cause is None:
            cause = CancellationRequested(reason)
        return _Verdict(
            JobState.CANCELLED,
            error=JobCancelledError(f"{queued.job.name} was cancelled: {reason}", cause=cause),
            cancel_message=message or queued.cancel_message,
        )

    async def _wait_holding_nothing(self, context: JobContext, event: trio.Event) -> None:
        """Wait for ``event``; a cancel of the job ends the wait with CancellationRequested."""
        with trio.CancelScope() as scope:
            unregister = context.on_cancel(scope.cancel)
            try:
                await event.wait()
            finally:
                unregister()
        if scope.cancelled_caught:
            raise CancellationRequested(context.cancel_reason or "Job cancelled")

    async def _await_dependencies(self, queued: QueuedJob) -> None:
        """Wait for each dependency holding nothing; key the outcomes by final snapshot."""
        if not queued.dependencies:
            return
        context = queued.context
        results: dict[JobSnapshot, Any] = {}
        errors: dict[JobSnapshot, BaseException] = {}
        for dep in queued.dependencies:
            dep_handle = dep if isinstance(dep, JobHandle) else await self._handle_of(context, dep)
            await self._wait_holding_nothing(context, dep_handle._settled)
            snapshot = dep_handle.context.snapshot()
            if dep_handle.error is None:
                results[snapshot] = dep_handle._result
                continue
            if not queued.job.tolerates_dependency_failures:
                raise DependencyFailedError(dep_handle.job_id, dep_handle.error)
            results[snapshot] = None
            errors[snapshot] = dep_handle.error
        context.set_dependency_outcomes(results, errors)

    async def _handle_of(self, context: JobContext, job: AbstractJob[Any]) -> JobHandle[Any]:
        """A dependency named by its job: wait until it is submitted, then use its handle."""
        while job._context is None or job._context.handle is None:
            submitted = trio.Event()
            self._submitted_waiters.setdefault(job.job_id, []).append(submitted)
            await self._wait_holding_nothing(context, submitted)
        handle = job._context.handle
        assert handle is not None
        return handle

    async def _run_attempts(self, queued: QueuedJob) -> Any:
        """Attempts until one answers, re-running on the three signals within their budgets."""
        job, context = queued.job, queued.context
        upstream = truncations = corrections = 0
        first_truncation: OutputTruncationRetry | None = None
        while True:
            context.check_cancellation()
            # The door's capture served routing; every attempt captures afresh (SUB-10).
            requirements = job.requirements()
            try:
                return await self._attempt(queued, requirements)
            except RerunSignal as signal:
                if context.timed_out or context.is_cancelled:
                    raise  # a cancellation or a timeout is never re-run (SIG-06)
                if isinstance(signal, UpstreamRetry):
                    upstream += 1
                    budget = job.upstream_retries
                    if upstream > budget:
                        raise UncorrectableError(
                            f"{job.name} exhausted its transparent retry budget ({budget}) on "
                            f"upstream signals; the last one: {signal}",
                            cause=signal,
                        ) from signal
                    delay = type(signal).pacing_delay(upstream, self._rng)
                    if signal.retry_after is not None:
                        delay = min(max(delay, signal.retry_after), MAX_PACING_SECONDS)
                    self._publish_retry(context, signal, delay)
                    await self._pace(context, delay)
                elif isinstance(signal, OutputTruncationRetry):
                    truncations += 1
                    if truncations > MAX_TRUNCATION_RETRIES:
                        first = first_truncation.model if first_truncation else None
                        if first is not None and signal.model is not None and signal.model != first:
                            how = f"after failover from {first}"
                        else:
                            how = "after the job rebuilt its conversation at the escalated budget"
                        raise UncorrectableError(
                            f"{job.name}: the model's output was truncated again {how}",
                            cause=signal,
                        ) from signal
                    first_truncation = signal
                    self._publish_retry(context, signal, None)
                else:
                    corrections += 1
                    if corrections > MAX_CORRECTION_RETRIES:
                        raise UncorrectableError(
                            f"{job.name}: Exceeded max response correction retries "
                            f"({MAX_CORRECTION_RETRIES}); the last: {signal}",
                            cause=signal,
                        ) from signal
                    self._publish_retry(context, signal, None)

    async def _pace(self, context: JobContext, delay: float) -> None:
        """The pacing sleep between re-runs, holding nothing; a cancel ends it."""
        done = trio.Event()
        with trio.move_on_after(delay):
            await self._wait_holding_nothing(context, done)

    def _publish_retry(self, context: JobContext, signal: RerunSignal, delay: float | None) -> None:
        snapshot = context.snapshot()
        event: ev.JobEvent
        attempt = context.attempt + 1  # the attempt the signal is about to run
        if isinstance(signal, RateLimitRetry):
            event = ev.RateLimitRetryEvent(
                snapshot=snapshot, attempt=attempt, delay=delay, reason=str(signal)
            )
        elif isinstance(signal, UpstreamRetry):
            event = ev.TransientErrorRetryEvent(
                snapshot=snapshot, attempt=attempt, delay=delay, reason=str(signal)
            )
        elif isinstance(signal, OutputTruncationRetry):
            event = ev.OutputTruncationRetryEvent(
                snapshot=snapshot,
                attempt=attempt,
                reason=str(signal),
                model=signal.model,
                previous_budget=signal.previous_max_tokens,
                new_budget=signal.escalated_max_tokens,
            )
        else:
            assert isinstance(signal, ResponseCorrectionRetry)
            event = ev.ResponseCorrectionRetryEvent(
                snapshot=snapshot, attempt=attempt, reason=str(signal), model=signal.model
            )
        self.bus.publish(event)

    async def _attempt(self, queued: QueuedJob, requirements: JobRequirements) -> Any:
        """One attempt: admit, arm the timeout, open the handles, run (inside a transaction
        when asked), signal, close."""
        job, context = queued.job, queued.context
        providers = self._providers_of(requirements)
        demand = self.demand_assembler.assemble(requirements, context, self.http_gate, providers)
        context.attempt += 1
        # The synchronous half first: a grant at once costs no scheduler step, and a job that
        # must wait joins the line and parks holding nothing.
        entered = self.admission.enter(demand, context)
        grant = entered if isinstance(entered, Grant) else await self.admission.wait(entered)
        context.record_admission_wait(grant.wall_wait_ms)
        for account, ms in grant.wait_times_ms.items():
            context.record_resource_wait(account, ms)
        resources = JobResources(
            self.admission,
            grant,
            providers,
            context=context,
            read_only=requirements.read_only,
            spawn=self._spawn_system,
        )
        outcome: Any = None
        failure: BaseException | None = None
        assert queued.nursery is not None
        scope = queued.nursery.cancel_scope
        timers: list[TimerHandle] = []
        try:
            if job.timeout is not None:
                timers = self._arm_timeout(queued, scope, resources, job.timeout)
            context.is_executing_job_with_resources = not demand.is_empty
            await resources.materialize()  # a failure rolls the grant back; the job never runs
            context.resources = resources
            transactional = requirements.requires_transaction and resources.has_database
            try:
                await job.pre_execute(context)
                if not context.try_transition(JobState.RUNNING):
                    context.check_cancellation()
                if self.bus.has_listeners(job.workflow_id):
                    self.bus.publish(
                        ev.JobStartedEvent(snapshot=context.snapshot(), attempt=context.attempt)
                    )
                resources.executed = True
                if transactional:
                    await resources.begin_all()
                outcome = await job.execute(context)
                if transactional and not context.timed_out and not context.is_cancelled:
                    transactional = False  # commit_all rolls back what it could not commit
                    await resources.commit_all()
            except BaseException as exc:  # noqa: BLE001 - handed to the verdict below
                if _is_cancellation(exc):
                    raise
                failure = exc
            if transactional and (failure is not None or context.timed_out or context.is_cancelled):
                await _roll_back_onto(resources, failure)
            if failure is None and not context.timed_out and not context.is_cancelled:
                for limiter in _signalled(requirements):
                    self._signal(limiter.on_success, limiter)
            elif failure is not None and not context.is_cancelled:
                if _upstream_in_chain(failure):
                    upstream = UpstreamFailure.from_exception(failure)
                    for limiter in _signalled(requirements):
                        self._signal(partial(limiter.on_rate_limit_error, upstream), limiter)
        finally:
            context.is_executing_job_with_resources = False
            for timer in timers:
                timer.cancel()
            try:
                if scope.cancel_called:
                    # Phase two or shutdown: no checkpoint may replace the job's own verdict,
                    # so what is still open is aborted and closed in the background.
                    resources.force_close()
                else:
                    await resources.aclose()
            except ResourceCloseError as close_failure:
                if failure is None:
                    failure = close_failure
                else:
                    add_suppressed(failure, close_failure)
            finally:
                context.resources = None
        if failure is not None:
            raise failure
        if context.timed_out:
            raise JobTimeoutError(_budget(job))
        return outcome

    def _providers_of(self, requirements: JobRequirements) -> tuple[DBResourceProvider, ...]:
        """The declared databases, names resolved against :attr:`databases`."""
        if not requirements.databases:
            return ()
        return tuple(
            self.databases.provider(p) if isinstance(p, str) else p for p in requirements.databases
        )

    def _spawn_system(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run clean-up that must outlive the job (a forced close's handle closes)."""
        if self._system is not None:
            self._system.start_soon(fn)

    def _arm_timeout(
        self,
        queued: QueuedJob,
        scope: trio.CancelScope,
        resources: JobResources,
        budget: float,
    ) -> list[TimerHandle]:
        """The two-phase timeout, on the job's own nursery.

        Phase one is a timekeeper call at the job's deadline: it sets the timeout and cancel
        flags, runs the callbacks, closes the resources on a task of their own in the job's
        nursery, and sets the nursery's cancel-scope deadline to the end of the grace. Phase two
        is that deadline: trio cancels the job, and a timekeeper call force-closes (aborts) what
        a job that does not unwind still holds. A job that finishes in time costs one heap
        entry. Returns the pending calls, which the attempt cancels when it ends."""
        context = queued.context
        context.arm_deadline(budget)
        assert context.deadline is not None
        grace = grace_period(budget)
        timers: list[TimerHandle] = []

        def phase_one() -> None:
            context.time_out()
            assert queued.nursery is not None
            queued.nursery.start_soon(_close_cooperatively, resources)
            phase_two = trio.current_time() + grace
            scope.deadline = phase_two
            timers.append(self._timekeeper.call_at(phase_two, resources.force_close))

        timers.append(self._timekeeper.call_at(context.deadline, phase_one))
        return timers

    @staticmethod
    def _signal(call: Any, limiter: RateLimiter) -> None:
        try:
            call()
        except Exception:
            log.exception(
                "limiter %s raised from its upstream signal",
                getattr(limiter, "limiter_name", limiter),
            )

    # -- endings --------------------------------------------------------------------------------
    def _finish(self, queued: QueuedJob, verdict: _Verdict) -> None:
        """Terminal event, workflow event, teardown, and last the handle."""
        job, context, handle = queued.job, queued.context, queued.handle
        if context.state.is_terminal and context.state is not verdict.state:
            if context.state is JobState.CANCELLED:
                verdict = self._cancelled(queued, verdict.cancel_message)
        else:
            context.try_transition(verdict.state)
        if verdict.state is JobState.COMPLETED:
            context.complete(verdict.result)
        if verdict.error is not None and verdict.state is not JobState.CANCELLED:
            log_failure(log, verdict.error)
        if self.bus.has_listeners(job.workflow_id):
            snapshot = context.snapshot()
            self.bus.publish(self._terminal_event(queued, verdict, snapshot))
            if snapshot.is_root:
                self.bus.publish(_workflow_event(snapshot, verdict))
        # teardown: out of the live set, conversations released, recorded calls released
        self._live.pop(job.job_id, None)
        self._edges.pop(job.job_id, None)
        context.release_conversations()
        context.clear_completion_data()
        handle._settle(result=verdict.result, error=verdict.error)

    @staticmethod
    def _terminal_event(queued: QueuedJob, verdict: _Verdict, snapshot: JobSnapshot) -> ev.JobEvent:
        context = queued.context
        if verdict.dependency_failure:
            return ev.DependencyFailureEvent(snapshot=snapshot, error=verdict.error)
        common: dict[str, Any] = {
            "snapshot": snapshot,
            "attempts": context.attempt,
            "llm_responses": tuple(context.llm_responses),
            "metadata": dict(context.metadata),
            "completion_time": context.completed_at or time.time(),
        }
        if verdict.state is JobState.COMPLETED:
            return ev.JobCompletedEvent(result=verdict.result, **common)
        if verdict.state is JobState.TIMED_OUT:
            return ev.JobTimedOut(timeout=queued.job.timeout or 0.0, **common)
        if verdict.state is JobState.CANCELLED:
            if verdict.cancel_message is None:
                return ev.JobCancelled(force=verdict.forced, **common)
            return ev.JobCancelled(message=verdict.cancel_message, **common)
        return ev.JobFailedEvent(error=verdict.error, **common)

    # -- cancelling -----------------------------------------------------------------------------
    def cancel(self, job_id: str, reason: str = "Job cancelled") -> bool:
        """Cooperatively cancel a job: a queued one is settled CANCELLED at once, a running one is
        signalled (it finds out at its next ``check_cancellation()``). Answers whether the job
        was found queued or running."""
        queued = self._live.get(job_id)
        if queued is None:
            return False
        lane = queued.lane
        if lane is not None and lane.remove(queued):
            message = f"Cancelled while queued: {reason}"
            queued.context.cancel(message)
            self._finish(queued, self._cancelled(queued, message))
            return True
        queued.context.cancel(reason)
        return True

    def cancel_workflow(self, workflow_id: str, reason: str = "Workflow cancelled") -> int:
        """Cancel every queued or running job of a workflow; answers how many were cancelled."""
        message = f"Workflow cancelled: {reason}"
        count = 0
        for queued in list(self._live.values()):
            if queued.job.workflow_id == workflow_id and not queued.context.is_cancelled:
                queued.cancel_message = message
                if self.cancel(queued.job.job_id, message):
                    count += 1
        return count

    # -- status ---------------------------------------------------------------------------------
    @property
    def running_jobs(self) -> int:
        return len(self._running)

    @property
    def queued_jobs(self) -> tuple[int, int]:
        """(standard lane, fast lane) sizes."""
        return (len(self._standard), len(self._fast))

    def health(self) -> HealthSnapshot:
        """The dispatcher at this instant, in the health report's five sections.

        Limiters: every account it knows (the ``http`` gate, the configured limiters, the
        registry's accounts, each database provider's gate, and every account a demand has named
        in admission), read live and sorted by utilisation, each with the jobs held
        on it; the memory account is a row only while it holds jobs in its line. Memory: the
        memory account's status line. Jobs running: jobs that started an attempt and have not
        ended, by type, and their workflows. Queue: the lanes and the jobs parked in admission.
        """
        admission = self.admission
        memory = admission.memory.account_for(None)
        accounts: list[LimiterIdentity] = [
            self.http_gate,
            *self.limiters.values(),
            *self.accounts.accounts(),
            *(self.databases.provider(name).admission() for name in self.databases.names()),
            *admission.accounts(),
        ]
        if admission.held_on(memory) > 0:
            accounts.append(memory)
        running = [
            (queued.job.job_type, queued.job.workflow_id)
            for queued in self._running.values()
            if queued.context.started_at is not None and not queued.context.state.is_terminal
        ]
        return capture_health(
            accounts,
            waiters=admission.held_on,
            memory=memory,
            running=running,
            queues=QueueSizes(len(self._standard), len(self._fast), admission.queue_size),
        )

    def _health_reporter(self, every: int) -> SystemHealthReporter:
        """The reporter :meth:`run` subscribes: logs a snapshot every ``every`` events."""
        return SystemHealthReporter(
            every=every,
            memory=self.admission.memory.account_for(None),
            queues=lambda: QueueSizes(
                len(self._standard), len(self._fast), self.admission.queue_size
            ),
        )

    # -- events ---------------------------------------------------------------------------------
    def _emit_limiter_event(
        self,
        account: LimiterIdentity,
        snapshot: JobSnapshot | None,
        waiters: int,
        type: LimiterEventType,
        wait: float,
        reject_reason: str | None,
        amount: Any,
    ) -> None:
        if not self.bus.has_listeners(snapshot.workflow_id if snapshot is not None else None):
            return
        self.bus.publish(
            ev.LimiterEvent(
                snapshot=snapshot,
                limiter_name=account.limiter_name,
                limiter_category=account.limiter_category,
                capacity=account.capacity,
                in_use=account.in_use,
                waiters=waiters,
                type=type,
                wait=wait,
                reject_reason=reject_reason,
                status_indicator=account.status_indicator,
                amount=amount,
            )
        )


def _signalled(requirements: JobRequirements) -> list[RateLimiter]:
    """The accounts an attempt's outcome is reported to: each model binding's, then each
    custom limiter (SIG-01, ERR-14)."""
    if not requirements.model_bindings and not requirements.rate_limiters:
        return []
    return [*binding_accounts(requirements), *(n.limiter for n in requirements.limiters)]


def _budget(job: AbstractJob[Any]) -> float:
    return max(job.timeout or 0.0, 1e-9)


async def _close_cooperatively(resources: JobResources) -> None:
    """Phase one's close, on a task of its own in the job's nursery."""
    try:
        await resources.aclose()
    except ResourceCloseError:
        log.exception("closing the resources of a timed-out job failed")


async def _roll_back_onto(resources: JobResources, failure: BaseException | None) -> None:
    """Roll back a failed transactional attempt; a failed rollback rides on the job's own
    failure as suppressed (EXEC-05), or is logged when the attempt timed out."""
    try:
        await resources.rollback_all()
    except UncorrectableError as rollback_failure:
        if failure is not None:
            add_suppressed(failure, rollback_failure)
        else:
            log.error("rolling back a timed-out job failed: %s", rollback_failure)


def _workflow_event(snapshot: JobSnapshot, verdict: _Verdict) -> ev.WorkflowCompleteEvent:
    if verdict.state is JobState.COMPLETED:
        return ev.WorkflowCompleteEvent(snapshot=snapshot, successful=True)
    reason = f"Workflow ended {verdict.state.value}: {verdict.error}"
    return ev.WorkflowCompleteEvent(snapshot=snapshot, successful=False, reason=reason)


def _is_cancellation(exc: BaseException) -> bool:
    """trio's own cancellation, bare or inside a group from a nursery: never swallowed."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0] is not None
    return False


def _upstream_in_chain(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        link = stack.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        if isinstance(link, ExternalServiceError | UpstreamRetry):
            return True
        if isinstance(link, BaseExceptionGroup):
            stack.extend(link.exceptions)
        for nxt in (link.__cause__, link.__context__):
            if nxt is not None:
                stack.append(nxt)
    return False


@asynccontextmanager
async def open_dispatcher(
    config: DispatcherConfig | None = None, **kwargs: Any
) -> AsyncIterator[JobDispatcher]:
    """Run a :class:`JobDispatcher` for the duration of the block; leaving it shuts down."""
    dispatcher = JobDispatcher(config, **kwargs)
    dispatcher._load_plugins()  # a bad plugin or config raises here, not from inside a nursery
    async with trio.open_nursery() as nursery:
        await nursery.start(dispatcher.run)
        try:
            yield dispatcher
        finally:
            with trio.CancelScope(shield=True):
                await dispatcher.shutdown()
