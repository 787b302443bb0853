"""The dispatcher: the door every job passes, the lanes, the job's task, and the settle.

A job's route, in the order of the modules that hold each step:

1. **The door** (:meth:`JobDispatcher.submit`, here): the walls (authority, parent/thread,
   scope), the cycle check (:mod:`.dependencies`), the requirements captured for routing. A
   refusal is a handle born failed.
2. **The lane** (:mod:`.lanes`): the priority lane for short timeouts, the FIFO lane for the
   rest; a relay of tasks lets the jobs go in order, one scheduler step each.
3. **The job's task** (``_run_job``, here) opens the job's own nursery, whose cancel scope is
   what a shutdown and phase two of the timeout cancel.
4. **The execution** (:mod:`.attempt`): dependencies awaited holding nothing, input guards,
   the attempts (admission of the whole demand, the two-phase timeout of :mod:`.deadline`,
   the handles, ``execute``, the limiter signals, the close), re-runs, output guards.
5. **The settle** (``_finish``, here, with :mod:`.verdicts`): one verdict, the terminal event,
   the workflow event, the teardown, and last of all the handle.

The dispatcher's life (one phase, the start, the stop in order, Ctrl-C and outer
cancellation) is in :mod:`._life`; what crosses the boundary to the program around it is in
:mod:`._boundary`.
"""

from __future__ import annotations

import logging
import random
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pluggy
import trio
from trio import (
    lowlevel as _lowlevel,
    open_nursery,  # (on every job: a trio module attribute is a slow look-up)
)

from .._watch import AsyncValue
from ..admission import Admission, HttpConnectionGate, Ticket
from ..admission.limiter import LimiterEventType, LimiterIdentity, RateLimiter
from ..admission.memory_gate import MemoryPressureGate
from ..admission.memory_reader import memory_reader_from
from ..admission.registry import RateLimiterRegistry
from ..bus import events as ev
from ..bus._lifecycle import job_scheduled
from ..bus.bus import MessageBus
from ..errors import (
    ConfigError,
    NucleoSystemError,
    UsageError,
    UsageKeyError,
    UsageRuntimeError,
    UsageTypeError,
    log_failure,
)
from ..errors._suggest import did_you_mean
from ..guardrails import (
    ScopeGuard,
    StandardGuardrailEnforcer,
    check_attached_guardrails,
    is_guard_under_enforcement,
)
from ..heartbeat import (
    Heart,
    Heartbeat,
    HeartbeatJobs,
    HeartbeatStore,
    ScheduleHeartbeat,
    heartbeat_store_from,
)
from ..jobs.context import OBS_CALLER_CLASS, JobContext, _current
from ..jobs.handle import JobHandle
from ..jobs.job import (
    NONE_REQUIRED,
    AbstractJob,
    ScopeAuthority,
    check_job_settings,
    requirements_of,
)
from ..jobs.requirements import JobRequirements
from ..jobs.snapshot import JobSnapshot
from ..jobs.state import JobState
from ..jobs.stoppable import AbstractStoppable
from ..models.envelope import ComplianceEnvelope
from ..models.runtime import ModelDemandAssembler, ModelRuntime
from ..models.spend import SpendGate
from ..observability.health import HealthSnapshot, QueueSizes, capture_health
from ..plugins.manager import (
    DBProviderKinds,
    GuardrailKinds,
    LimiterRegistry,
    ModelProviderKinds,
    PluginError,
    heartbeat_jobs_from,
    make_plugin_manager,
    mcp_servers_from,
    observers_from,
)
from ..resources import (
    DBResourceProviders,
)
from ._boundary import (
    _boundary_error,
    _checked_seconds,
    _fatal_in,
)
from ._life import INTERRUPT_WINDOW, Life
from .attempt import MAX_CORRECTION_RETRIES, JobRun, Runtime
from .config import DispatcherConfig
from .dependencies import DependencyGraph
from .lanes import PRIORITY_LANE_MAX_TIMEOUT, Lane
from .lifecycle import DispatcherState
from .seams import DemandAssembler, GuardrailEnforcer
from .timekeeper import Timekeeper
from .verdicts import (
    Verdict,
    cancelled,
    forced,
    is_cancellation,
    terminal_event,
    timed_out,
    verdict_for,
    workflow_event,
)

__all__ = [
    "MAX_CORRECTION_RETRIES",
    "OBS_CALLER_CLASS",
    "DelayedSubmission",
    "JobDispatcher",
    "open_dispatcher",
]

log = logging.getLogger("nucleo_trio.dispatcher")
# Read on every job: on CPython 3.11 a module global is found much faster than an enum
# class's member (an attribute read on a class is never specialised there).
_SCHEDULED, _COMPLETED, _CANCELLED = JobState.SCHEDULED, JobState.COMPLETED, JobState.CANCELLED

R = TypeVar("R")


class DelayedSubmission:
    """The answer of :meth:`JobDispatcher.submit_with_delay`: await :meth:`handle`."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._handle: JobHandle[Any] | None = None
        self._error: BaseException | None = None

    async def handle(self) -> JobHandle[Any]:
        """The handle once the delay has passed, or the refusal the submission met (a
        :class:`NucleoSystemError` when the dispatcher stopped before the delay passed)."""
        await self._done.wait()
        if self._handle is None:
            raise self._error or NucleoSystemError("dispatcher", "the submission never happened")
        return self._handle

    @property
    def done(self) -> bool:
        """True once the delay has passed and the submission happened or was refused:
        :meth:`handle` then answers at once."""
        return self._done.is_set()


class _NamedLimiters(dict[str, "RateLimiter"]):
    """``dispatcher.limiters``: a plain dict of the configured accounts by name, except that a
    name it does not hold is a :class:`~nucleo_trio.errors.UsageKeyError` (a ``KeyError``)
    listing the names there are and the nearest one."""

    def __missing__(self, name: str) -> RateLimiter:
        known = ", ".join(repr(key) for key in sorted(self)) or "none"
        raise UsageKeyError(
            "dispatcher",
            f"no limiter named {name!r} in dispatcher.limiters (configured: {known})"
            + did_you_mean(name, self),
            "declare it under [limiters.NAME] in the dispatcher's configuration, or pass the "
            "account object you built to require_rate_limiter",
        )


class JobDispatcher:
    """Runs a tree of jobs: the door, the lanes, admission, the attempt, the bus.

    Start it with ``async with open_dispatcher() as dispatcher`` (or
    ``await nursery.start(dispatcher.run)``), then :meth:`submit` jobs and await their handles.

    ``config`` is the :class:`~nucleo_trio.dispatch.DispatcherConfig` (the defaults when
    ``None``). The keyword arguments replace a part the dispatcher would otherwise build:
    ``memory`` the memory account, ``bus`` the message bus, ``guardrails`` the enforcer,
    ``demand_assembler`` the demand builder, ``plugin_manager`` the plugins, ``models`` the model
    runtime and ``heartbeat_store`` the store ``config.heartbeat`` would choose;
    ``heartbeat_jobs`` names the job classes a durable heartbeat store may fire.
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
        heartbeat_jobs: Iterable[type[AbstractJob[Any]]]
        | Mapping[str, type[AbstractJob[Any]]] = (),
    ) -> None:
        self.config = config or DispatcherConfig()
        """The settings the dispatcher was built with (the defaults when none were given)."""
        self._heartbeat_store = heartbeat_store
        self.heartbeat_jobs = HeartbeatJobs(heartbeat_jobs)
        """The job classes a durable store's heartbeat rows may name, by name: those passed in,
        those plugins name (added at start), and each class scheduled. Register more here before
        the start, so slots held over a restart find theirs."""
        self.heart: Heart | None = None
        """The heartbeat schedule and its two tasks, built at start with the store the plugins
        chose for ``config.heartbeat`` (or the ``heartbeat_store`` passed in)."""
        self._plugin_manager = plugin_manager
        self.plugins: pluggy.PluginManager | None = None
        """The plugin manager: the ``plugin_manager`` passed in, else the built-in plugins and
        every installed one. ``None`` until the plugins load, at start (or as
        :func:`open_dispatcher` opens, before its block runs)."""
        self.limiter_kinds: LimiterRegistry | None = None
        """The account kinds the plugins provide, by name (``"counting"``, ...): what
        ``config.limiters`` is built from. ``None`` until the plugins load."""
        self.limiters: dict[str, RateLimiter] = _NamedLimiters()
        """The accounts ``config.limiters`` declares, by name, built when the plugins load:
        pass one to :meth:`JobRequirements.require_rate_limiter
        <nucleo_trio.jobs.JobRequirements.require_rate_limiter>`
        (``dispatcher.limiters["search"]``). Empty until then; a kind or a setting its plugin
        refuses stops the start with :class:`~nucleo_trio.errors.ConfigError`. A name it does
        not hold raises :class:`~nucleo_trio.errors.UsageKeyError` (a ``KeyError``) listing the
        configured names and the nearest one. Shutdown closes each one it built that has an
        ``aclose()`` (a shared account gives its lease back then), after the jobs end."""
        self.accounts = RateLimiterRegistry()
        """The shared accounts, built on first use and kept for the dispatcher's life: one
        instance per limiter class (``dispatcher.accounts.instance(RenderSlots)``), and a token
        bucket and a gate per model entry. The health report lists them."""
        self.databases = DBResourceProviders()
        """The database providers jobs may declare by name (``require_database("orders")``):
        those ``config.databases`` declares, built when the plugins load, and any registered
        here. Shutdown closes the ones it built; one you register is yours to close."""
        self.db_kinds: DBProviderKinds | None = None
        """The database provider kinds the plugins provide, by name: what ``config.databases``
        is built from. ``None`` until the plugins load."""
        self.model_provider_kinds: ModelProviderKinds | None = None
        """The model provider kinds the plugins provide, by name: what
        ``config.model_providers`` is built from. ``None`` until the plugins load."""
        self.mcp: AbstractStoppable | None = None
        """The MCP servers ``config.mcp`` declares, as the plugin that serves them holds them
        (a :class:`nucleo_trio_mcp.McpServers` with ``nucleo-trio-mcp``), built when the plugins
        load and stopped when the dispatcher stops; ``None`` when the table is empty."""
        self.bus = bus or MessageBus()
        """The message bus every event goes through: the ``bus`` passed in, else one of its
        own. Subscribe observers to it; it stops last at shutdown, delivering what was
        published before."""
        self.memory_gate: MemoryPressureGate | None = None
        """The dispatcher's memory pressure gate; ``None`` when a ``memory`` account was passed
        in or ``config.memory`` switched it off. Its reader is chosen by the plugins at start."""
        if memory is None and self.config.memory.enabled:
            memory = self.memory_gate = MemoryPressureGate()
        self.admission = Admission(
            memory, emit=self._emit_limiter_event, hears=self._hears_limiter_events
        )
        """Admission: grants each attempt's whole demand at once, or parks the job in its line
        holding nothing until it fits. Its memory account is :attr:`memory_gate` (or the
        ``memory`` passed in, or none when both are off)."""
        self._timekeeper = Timekeeper()
        self.http_gate: RateLimiter = HttpConnectionGate(self.config.http_connections)
        """The ``http`` gate: one permit per admitted job that needs an HTTP connection, sized
        by ``config.http_connections`` (1000 by default)."""
        self.guardrails: GuardrailEnforcer = guardrails or StandardGuardrailEnforcer()
        """The guardrail enforcer the door and every attempt consult: the ``guardrails`` passed
        in, else the standard one, which judges scope and runs each job's declared guards."""
        self.guardrail_kinds: GuardrailKinds | None = None
        """The guardrails plugins register by name; configuration attaches them to tool classes."""
        self.models = (models or ModelRuntime()).attach(self)
        """The dispatcher's models: catalog, picker, compliance envelope, spend gates, clients."""
        self.demand_assembler: DemandAssembler = demand_assembler or ModelDemandAssembler(
            self.models, self.accounts
        )
        """What turns each attempt's requirements into the demand admission grants: the
        ``demand_assembler`` passed in, else one that also resolves and prices the job's model
        bindings."""
        self._rng = random.Random(self.config.seed)
        # Bound once, shared by every job's context and handle (a bound method made per job
        # is two allocations the collector then walks for as long as the handle lives).
        self._publish_event = self.bus.publish
        self._cancel_job = self.cancel
        self._fast = Lane("fast", prioritized=True)
        self._standard = Lane("standard", prioritized=False)
        self._live: dict[str, JobRun] = {}
        self._running: dict[str, JobRun] = {}  # every job whose task runs
        # Of those, the ones that started an attempt: what the health report and the live view
        # list, without walking the jobs parked in admission or waiting on a dependency.
        self._executing: dict[str, JobRun] = {}
        self._graph = DependencyGraph()
        # The life: one phase, the stop asked for (by shutdown(), an exception or cancellation
        # around the dispatcher, or a fatal exception inside it), the dispatcher's own tasks,
        # and the stop sequence its run task carries out.
        self._life = Life(
            self,
            timekeeper=self._timekeeper,
            live=self._live,
            running=self._running,
            lanes=(self._fast, self._standard),
            run_job=self._run_job,
            finish=self._finish,
            on_stop=self._wake_drain,
        )
        self.state: AsyncValue[DispatcherState] = self._life.state
        """Where the dispatcher is in its life, as a value tasks can wait on:
        ``await dispatcher.state.wait_value(DispatcherState.STOPPING)``."""
        self._spawn = self._life.spawn
        # What every job's record shares: the parts of the dispatcher its attempts are handed.
        self._runtime = Runtime(
            self,
            graph=self._graph,
            timekeeper=self._timekeeper,
            executing=self._executing,
            rng=self._rng,
            spawn_system=self._life.spawn_system,
        )
        self._delayed = 0  # submissions of submit_with_delay still waiting out their delay
        self._drained: trio.Event | None = None  # set while the block's exit waits for jobs
        self.interrupt_window = INTERRUPT_WINDOW
        """Seconds the stop waits for interrupted jobs to end before it settles them as
        cancelled and names each one still running in a warning (repeated while it runs)."""

    # -- life -----------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        """Whether the dispatcher has started and not stopped (false again once its run ended,
        however it ended)."""
        return self._life.is_running

    # Read by tests and the soak's checks, which look at the dispatcher from outside.
    @property
    def _stopping(self) -> bool:
        return self._life.stopping

    @property
    def _system(self) -> trio.Nursery | None:
        return self._life.system

    @property
    def _jobs(self) -> trio.Nursery | None:
        return self._life.jobs

    @trio.lowlevel.enable_ki_protection
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the dispatcher until :meth:`shutdown`. A second start is a no-op with a warning.

        The dispatcher's own tasks run shielded from the cancel scopes around it, so that
        however it is stopped it stops in order and settles every handle: a cancellation from
        outside (``move_on_after``, a cancelled nursery) stops it at once, like an exception in
        the ``async with open_dispatcher()`` block, then re-raises. A ``KeyboardInterrupt`` or
        ``SystemExit`` raised inside it (a job, an observer) stops it the same way and leaves
        ``run`` as itself; so does a crash of one of its own tasks.
        """
        if self._life.started:
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
        await self._life.run(task_status)

    async def wait_until_settled(self) -> None:
        """Wait until every job submitted so far, and every job those submit, has settled.

        Queued, parked in admission, waiting on a dependency, running, or still waiting out a
        :meth:`submit_with_delay`: each counts until its handle settles. Heartbeats stop firing
        from the first call on (what falls due stays in the store, for the next start), so a
        recurring heartbeat cannot keep the wait open; requests to schedule are still taken.
        Returns at once when the dispatcher is stopping. This is what leaving the
        ``async with open_dispatcher()`` block normally does before it stops the dispatcher.

        A job waiting for a dependency that was never submitted could keep the wait open for
        good: once every job left is such a job (and no delayed submission is pending), nothing
        inside the dispatcher can submit what they wait for, so each is cancelled with a
        message naming the dependency it waited for, and the wait ends when they have settled.
        """
        if self.heart is not None:
            self.heart.hold_fires()
        self._graph.on_awaiting = self._wake_drain
        try:
            while (self._live or self._delayed) and not self._life.stopping:
                if self._stranded():
                    self._cancel_stranded()
                self._drained = trio.Event()
                try:
                    await self._drained.wait()
                finally:
                    self._drained = None
        finally:
            self._graph.on_awaiting = None

    def _stranded(self) -> bool:
        """Whether every live job waits for a dependency that was never submitted."""
        return not self._delayed and 0 < len(self._live) <= len(self._graph.awaiting_submission)

    def _cancel_stranded(self) -> None:
        for job_id, dependency in list(self._graph.awaiting_submission.items()):
            run = self._live.get(job_id)
            if run is None or run.context.is_cancelled:
                continue
            reason = (
                f"the open_dispatcher block ended while {run.job.name} waited for "
                f"{dependency}, which was never submitted (nothing left could submit it)"
            )
            log.warning("%s is cancelled: %s", run.job.name, reason)
            run.cancel_message = reason
            run.context.cancel(reason)

    def _wake_drain(self) -> None:
        """The block's exit waits for the last job: tell it when there may be none left, or
        when every job left waits for a dependency nobody submitted."""
        if self._drained is not None and (
            self._life.stopping or not (self._live or self._delayed) or self._stranded()
        ):
            self._drained.set()

    def _stopped_error(self, when: str = "") -> NucleoSystemError:
        why = "" if self._life.fatal is None else f" (it stopped on {self._life.fatal!r})"
        what = f"the dispatcher stopped {when}" if when else "the dispatcher has stopped"
        return NucleoSystemError("dispatcher", what + why)

    def _not_running(self, call: str) -> UsageRuntimeError:
        """What a call that needs a running dispatcher raises before the start or after the
        stop: the mistake, and where the call belongs."""
        if not self._life.started:
            return UsageRuntimeError(
                "dispatcher",
                f"JobDispatcher.{call}: the dispatcher is not started",
                "call it inside `async with open_dispatcher() as dispatcher:`, or after "
                "`await nursery.start(dispatcher.run)`",
            )
        why = "" if self._life.fatal is None else f" (it stopped on {self._life.fatal!r})"
        return UsageRuntimeError(
            "dispatcher",
            f"JobDispatcher.{call}: the dispatcher has stopped{why}",
            "call it before the `async with open_dispatcher()` block ends, or open a new "
            "dispatcher",
        )

    def _load_plugins(self) -> None:
        """Plugins (built-ins, then entry points, then ``check_pending``) and the configured
        limiters, before anything runs: a broken plugin or a bad limiter refuses the start."""
        self.plugins = self._plugin_manager or make_plugin_manager()
        if self.memory_gate is not None:
            self.memory_gate.use_reader(memory_reader_from(self.plugins, self.config.memory.limit))
        self.limiter_kinds = LimiterRegistry(self.plugins)
        for name, declared in self.config.limiters.items():
            try:
                limiter = self.limiter_kinds.create(declared.kind, name, **declared.settings)
            except (PluginError, TypeError, ValueError) as exc:
                raise ConfigError(f"dispatcher config: limiter {name!r}: {exc}") from exc
            self.limiters[name] = limiter
            self._life.built_limiters.append(limiter)
        self.db_kinds = DBProviderKinds(self.plugins)
        for name, database in self.config.databases.items():
            try:
                provider = self.db_kinds.create(database.kind, name, **database.settings)
                self.databases.register(provider)
                self._life.built_databases.append(provider)
            except (PluginError, RuntimeError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"dispatcher config: database {name!r} (kind {database.kind!r}): {exc}"
                ) from exc
        self.model_provider_kinds = ModelProviderKinds(self.plugins)
        for key, provided in self.config.model_providers.items():
            try:
                self.models.providers.register(
                    self.model_provider_kinds.create(provided.kind, key, **provided.settings)
                )
            except (PluginError, TypeError, ValueError) as exc:
                raise ConfigError(
                    f"dispatcher config: model provider {key!r} (kind {provided.kind!r}): {exc}"
                ) from exc
        self.guardrail_kinds = GuardrailKinds(self.plugins)
        check_attached_guardrails(self.config.guardrails, self.guardrail_kinds)
        for observer in observers_from(self.plugins, self):
            self.bus.subscribe(observer)
        heartbeat_jobs_from(self.plugins, self.heartbeat_jobs)
        if self.config.mcp:
            self.mcp = mcp_servers_from(self.plugins, self, self.config.mcp)
            self.register_stoppable(self.mcp)
        # Last: the store may open a file, and nothing after it can refuse the start.
        store = self._heartbeat_store or heartbeat_store_from(self.plugins, self.config.heartbeat)
        self.heart = Heart(self, store)

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - the seed's shutdown(timeoutMs)
        """Stop the dispatcher, in order, and return once it has stopped.

        Every parked waiter is refused first, then the lanes stop; running jobs get ``timeout``
        seconds (the config's, 30 s when zero) before they are interrupted; every job still run
        is settled as cancelled; each registered stoppable stops; the bus stops last, delivering
        what was published before it.

        The stop runs in the dispatcher's own task, so it is idempotent and safe to cancel: a
        caller whose ``shutdown()`` is cancelled stops waiting while the stop goes on, and every
        later call waits for the same stop. Called from inside one of the dispatcher's jobs it
        starts the stop and returns at once (a job cannot wait for its own end). A
        ``KeyboardInterrupt`` that lands while it waits turns the stop into a fast one (every job
        cancelled at once) and propagates once the stop is done. Interrupted jobs get
        :attr:`interrupt_window` seconds to end; one that outlives it is settled as cancelled and
        named in a warning while its task lives.
        """
        if not self._life.started:
            raise self._not_running("shutdown()")
        if timeout is not None:
            timeout = _checked_seconds("shutdown(timeout)", timeout)
        await self._life.shutdown(timeout)

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
        if self.heart is None or not self._life.started or self._life.stopping:
            raise RuntimeError(
                "JobDispatcher.schedule_heartbeat: the dispatcher is not running; schedule once "
                "it has started (boot code re-publishes fixed schedules at every start)"
            )
        return self.heart._schedule(spec, user_id, scope_guard)

    def register_stoppable(self, stoppable: AbstractStoppable) -> None:
        """Stop ``stoppable`` at shutdown, after the jobs and before the bus."""
        self._life.stoppables.append(stoppable)

    # -- models ---------------------------------------------------------------------------------
    @property
    def compliance_envelope(self) -> ComplianceEnvelope:
        """The :class:`~nucleo_trio.models.ComplianceEnvelope` every model resolution answers
        to: the sealed one, or before any seal the default that refuses, read without sealing
        it. The start seals the default when nothing was sealed."""
        # ENV-01
        return self.models.compliance_envelope

    def seal_compliance_envelope(self, envelope: ComplianceEnvelope) -> None:
        """Seal the envelope every model resolution answers to, once, before the start (the
        start seals the default): a second seal raises :class:`RuntimeError` and ``None``
        raises :class:`ValueError`."""
        # ENV-02
        self.models.seal_compliance_envelope(envelope)

    def register_spend_gate(self, gate: SpendGate) -> None:
        """Consult ``gate`` on every attempt with model bindings, after they are priced and
        before anything is held; a gate that raises
        (:class:`~nucleo_trio.errors.SpendCapExceededError`) fails the attempt. ``None`` raises
        :class:`ValueError`, anything without ``admit`` :class:`TypeError`."""
        # EXEC-14
        self.models.register_spend_gate(gate)

    # -- the door -------------------------------------------------------------------------------
    def submit(
        self,
        job: AbstractJob[R],
        dependencies: Iterable[JobHandle[Any] | AbstractJob[Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[R]:
        """Submit ``job`` and return its handle at once; never awaits.

        A refusal at the door is a handle born failed, never an exception: a job submitted
        while the dispatcher shuts down is one, and so is a job that declares resources with no
        timeout. A dependency list that would close a
        cycle is a programming error and raises :class:`ValueError`; a submission before the
        dispatcher started, or once it has stopped (however its run ended), raises
        :class:`~nucleo_trio.errors.UsageRuntimeError` (a ``RuntimeError``), and a value that is
        not a job or a handle :class:`~nucleo_trio.errors.UsageTypeError` (a ``TypeError``).
        """
        # SUB-01: refusals at the door are handles born failed; these raises are usage errors.
        if not self._life.is_running:
            raise self._not_running("submit()")
        # A job class has AbstractJob in its MRO: found there without ABCMeta's (Python)
        # __instancecheck__; isinstance still answers for anything else.
        if AbstractJob not in type(job).__mro__ and not isinstance(job, AbstractJob):
            raise UsageTypeError(
                "dispatcher",
                f"JobDispatcher.submit() takes a job, got {type(job).__name__}",
                "submit an instance of a Tool, Orchestrator or other AbstractJob subclass "
                "(`dispatcher.submit(MyTool(workflow(user, name)))`)",
            )
        if job._context is not None:
            raise UsageRuntimeError(
                "dispatcher",
                f"{job.name} was already submitted; a job instance runs once",
                f"submit a new instance (`{type(job).__qualname__}(...)`) for another run",
            )
        deps = tuple(dependencies)
        for dep in deps:
            if not isinstance(dep, JobHandle | AbstractJob):
                raise UsageTypeError(
                    "dispatcher",
                    f"{job.name}: a dependency must be a JobHandle or a job, got "
                    f"{type(dep).__name__}",
                    "pass the handles submit() returned (`dependencies=[handle]`)",
                )
        if deps:  # no dependency closes no cycle
            self._graph.refuse_cycle(job, deps)

        caller = _current.get()  # current_job()
        context = JobContext(
            job, job.user_id, dispatcher=self, metadata=metadata, publish=self._publish_event
        )
        if caller is not None:
            caller_cls = type(caller.job)
            context.metadata[OBS_CALLER_CLASS] = (
                f"{caller_cls.__module__}.{caller_cls.__qualname__}"
            )
        job._context = context
        handle: JobHandle[R] = JobHandle(job, context, self._life.token)
        handle._canceller = self._cancel_job
        context.handle = handle
        job_id = job.job_id
        if self._graph.submission_waiters:  # anybody named a job before it was submitted?
            self._graph.submitted(job_id)

        timeout: float | None = None
        try:
            # A knob set past its setter: refused before anything else.
            timeout = check_job_settings(job)
        except (TypeError, ValueError) as bad:
            refusal: BaseException | None = bad
        else:
            refusal = self._door(job, caller, context)
        if refusal is not None:
            self._born_failed(context, handle, refusal)
            return handle
        try:
            requirements = requirements_of(job)
        except Exception as exc:  # noqa: BLE001 - a job that breaks its contract is born failed
            self._born_failed(context, handle, _requirements_failure(job, exc))
            return handle
        if timeout is None and requirements is not NONE_REQUIRED and requirements.has_resources:
            self._born_failed(context, handle, _no_timeout(job))
            return handle

        run = JobRun(job, context, handle, deps, self._runtime)
        self._live[job_id] = run
        if deps:
            self._graph.track(job_id, deps)
        bus = self.bus
        if bus.audible and bus.has_listeners(run.workflow_id):  # audible: no call when nobody hears
            bus.publish(
                job_scheduled(
                    context.snapshot(),
                    # the shared empty capture is the runtime's own: an event gets a copy
                    JobRequirements() if requirements is NONE_REQUIRED else requirements,
                    job.priority,
                )
            )
        if not requirements.requires_queueing:
            self._spawn(run)
            return handle
        # Offered to its lane, and a task started to take the lane's next job.
        if timeout is not None and timeout <= PRIORITY_LANE_MAX_TIMEOUT:
            lane = self._fast
        else:
            lane = self._standard
        lane.offer(run)
        self._spawn(lane)
        return handle

    def submit_with_delay(self, job: AbstractJob[Any], delay: float | None) -> DelayedSubmission:
        """Submit ``job`` as a root after ``delay`` seconds (none, zero or negative: at once).

        The submission happens on a fresh task outside any job, so it can only create roots: a
        delayed child of a live job is refused at the door. A delay that is not a number of
        seconds (a bool, a string, NaN) raises :class:`ValueError`, and a call before the start
        or after the stop :class:`~nucleo_trio.errors.UsageRuntimeError`.
        """
        # SUB-13
        system = self._life.system
        if system is None or not self._life.is_running:
            raise self._not_running("submit_with_delay()")
        if delay is not None:
            delay = _checked_seconds("submit_with_delay(delay)", delay, allow_negative=True)
        answer = DelayedSubmission()

        @trio.lowlevel.enable_ki_protection
        async def later() -> None:
            _current.set(None)
            try:
                if delay is not None and delay > 0:
                    await trio.sleep(delay)
                answer._handle = self.submit(job)
            except Exception as exc:
                answer._error = exc
            finally:
                if answer._handle is None and answer._error is None:
                    answer._error = self._stopped_error("before the delay passed")
                answer._done.set()
                self._delayed -= 1
                self._wake_drain()

        self._delayed += 1
        system.start_soon(later)
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
            return UsageError(
                "dispatcher",
                f"Only orchestrators may submit jobs from inside a job: {caller.job.name} "
                f"({type(caller.job).__qualname__}) is not a ScopeAuthority and tried to submit "
                f"{job.name}",
                f"make {type(caller.job).__qualname__} an Orchestrator (it then holds no resources "
                "and may wait on its children), or submit the work from the orchestrator above it",
            )
        parent_id = job.parent_job_id
        if parent_id is not None and parent_id in self._live:
            if caller is None:
                return UsageError(
                    "dispatcher",
                    f"{job.name} names the live job {parent_id} as its parent, but code outside "
                    "any job may only create new roots",
                    "give it a new root (`workflow(user, name)`) as its parent, or let the parent "
                    "submit it from its own execute() with `context.submit(...)`",
                )
            if caller.job_id != parent_id:
                return UsageError(
                    "dispatcher",
                    f"{job.name} names the live job {parent_id} as its parent, but that job "
                    f"runs on the thread of its own task, not {caller.job.name}'s",
                    f"build the child with {caller.job.name} (`context.job`) as its parent",
                )
        if self._life.stopping:
            return NucleoSystemError(
                "dispatcher", f"{job.name} was submitted while the dispatcher is shutting down"
            )
        return self.guardrails.judge_submission(job, caller, context.metadata)

    def _born_failed(
        self, context: JobContext, handle: JobHandle[Any], error: BaseException
    ) -> None:
        context.set_state(JobState.FAILED)
        log_failure(log, error, job=context.job.name)
        if self.bus.has_listeners(context.workflow_id):
            snapshot = context.snapshot()
            self.bus.publish(ev.JobFailedEvent(snapshot=snapshot, error=error, attempts=0))
            if snapshot.is_root:
                self.bus.publish(
                    ev.WorkflowCompleteEvent(snapshot=snapshot, successful=False, reason=str(error))
                )
        handle._settle(error=error)

    # -- lanes and tasks ------------------------------------------------------------------------
    @trio.lowlevel.enable_ki_protection
    async def _run_job(self, source: JobRun | Lane) -> None:
        """A job's task, from the start to the settle: ``source`` is the job itself when it
        runs at once, without queueing, or the lane it was offered to.

        A task started by an offer takes whichever job the lane serves next when it runs, not
        the job whose offer started it: the tasks a scheduler step starts run in an order of
        trio's choosing, and the jobs still leave the lane strictly in its order (priority,
        then submission). A job stays queued, and cancellable as queued, until a task takes
        it; a task that finds the lane empty (its job was cancelled, or drained at shutdown)
        ends at once.

        The job runs in its own nursery, whose cancel scope is the one shutdown cancels to
        interrupt it and phase two of a timeout cancels at its deadline. Whatever happens, the
        handle settles before the task ends. One coroutine from the lane to the settle: every
        frame a job's task holds, it holds for as long as the job waits in admission's line.
        A job with nothing to wait for before its first admission waits there before its
        nursery opens (:meth:`JobRun.admit_first`), holding no nursery either.
        """
        # KI-protected, as every job's task is: a Ctrl-C is delivered to the program's main
        # task (which stops the dispatcher in order), never half-way through a job's
        # bookkeeping.
        try:
            if isinstance(source, Lane):
                run = source.take()
                if run is None:
                    return
                if self._life.stopping:
                    # A job still queued at shutdown is settled as cancelled, never started
                    # into a closed admission.
                    self._finish(run, cancelled(run, "Cancelled by shutdown"))
                    return
            else:
                run = source
            # (Few locals: this frame, and trio's copy of it, is a parked job's largest.)
            _current.set(run.context)
            self._running[run.job_id] = run
            run.task = _lowlevel.current_task()
            run.context.try_transition(_SCHEDULED)
            try:
                verdict: Verdict | None = None
                try:
                    first = run.admit_first()
                    if type(first) is Ticket:
                        # Parked in admission's line before the nursery opens. What the wait
                        # raises (a refusal, a cancel) is the admission's failure, raised by
                        # the execution where the admission would have been; a trio.Cancelled
                        # leaves as below.
                        try:
                            first = await self.admission.wait(first)
                        except Exception as failure:  # noqa: BLE001 - judged by execute
                            first = failure
                    async with open_nursery() as job_nursery:
                        run.nursery = job_nursery
                        if run.interrupted:
                            job_nursery.cancel_scope.cancel()
                        verdict = await run.execute(first)
                except BaseException as exc:  # noqa: BLE001 - what the job's nursery let through
                    fatal = _fatal_in(exc)
                    if fatal is None and is_cancellation(exc) and not run.interrupted:
                        raise
                    verdict = self._escaped(run, exc, fatal)
                # mypy does not see the nursery keep the Cancelled of its own scope, which
                # leaves the verdict unanswered: the job was cut short.
                if verdict is None:
                    verdict = self._cut_short(run)  # type: ignore[unreachable]
                self._finish(run, verdict)
            finally:
                self._running.pop(run.job_id, None)
                self._executing.pop(run.job_id, None)
                if not run.handle._done:  # a defect in the dispatcher itself: still settle
                    self._ended_without_verdict(run)
        finally:
            self._life.task_ended()

    def _ended_without_verdict(self, run: JobRun) -> None:
        """Settle a job whose task is ending without a verdict (a defect in the dispatcher
        itself) as failed, saying so."""
        log.error("%s ended without a verdict; settling it as failed", run.job.name)
        error = NucleoSystemError("dispatcher", f"{run.job.name} ended without a verdict")
        self._finish(run, Verdict(JobState.FAILED, error=error))

    def _escaped(self, run: JobRun, exc: BaseException, fatal: BaseException | None) -> Verdict:
        """The verdict on what the job's nursery let through."""
        if fatal is not None:
            # KeyboardInterrupt or SystemExit from inside a job stops the whole dispatcher,
            # and leaves run() as itself once every job has settled; this job is the first.
            self._life.escalate(fatal)
            run.cancel_for_stop()
            return forced(run)
        return verdict_for(run, exc)

    @staticmethod
    def _cut_short(run: JobRun) -> Verdict:
        """The verdict on a job whose nursery was cancelled before it answered."""
        if run.context.timed_out and not run.interrupted:
            # Phase two cancelled the job at the grace's end: the timeout is the verdict, and
            # what the attempt had already failed with (a commit's error) is not lost.
            return timed_out(run.job, run.failure)
        return forced(run)  # shutdown interrupted the job

    # -- endings --------------------------------------------------------------------------------
    def _finish(self, run: JobRun, verdict: Verdict) -> None:
        """Terminal event, workflow event, teardown, and last the handle; once per job (a job
        the stop settled before its task ended is not settled again)."""
        job, context, handle = run.job, run.context, run.handle
        # The handle's and the context's own fields rather than their properties (done,
        # state): on CPython 3.11 a property read is a call, and these run on every job.
        if handle._done:
            return
        state = context._state
        if state.is_terminal and state is not verdict.state:
            if state is _CANCELLED:
                verdict = cancelled(run, verdict.cancel_message)
        elif verdict.state is not _COMPLETED:
            context.try_transition(verdict.state)
        if verdict.state is _COMPLETED:
            context.complete(verdict.result)  # the result, and the turn to COMPLETED
        if verdict.error is not None and verdict.state is not _CANCELLED:
            log_failure(log, verdict.error, job=job.name)
        bus = self.bus
        if bus.audible and bus.has_listeners(run.workflow_id):  # audible: no call when nobody hears
            snapshot = context.snapshot()
            bus.publish(terminal_event(run, verdict, snapshot))
            if snapshot.is_root:
                bus.publish(workflow_event(snapshot, verdict))
        # teardown: out of the live set, conversations released, recorded calls released
        self._live.pop(run.job_id, None)
        if self._drained is not None:
            self._wake_drain()
        if run.dependencies:
            self._graph.untrack(run.job_id)
        if context.conversations:
            context.release_conversations()
        if context.llm_responses:
            context.clear_completion_data()
        handle._settle(verdict.result, verdict.error)

    # -- cancelling -----------------------------------------------------------------------------
    def cancel(self, job_id: str, reason: str = "Job cancelled") -> bool:
        """Cooperatively cancel a job: a queued one is settled CANCELLED at once, a running one is
        signalled (it finds out at its next ``check_cancellation()``). Answers whether the job
        was found queued or running."""
        run = self._live.get(job_id)
        if run is None:
            return False
        lane = run.lane
        if lane is not None and lane.remove(run):
            message = f"Cancelled while queued: {reason}"
            run.context.cancel(message)
            self._finish(run, cancelled(run, message))
            return True
        run.context.cancel(reason)
        return True

    def cancel_workflow(self, workflow_id: str, reason: str = "Workflow cancelled") -> int:
        """Cancel every queued or running job of a workflow; answers how many were cancelled."""
        message = f"Workflow cancelled: {reason}"
        count = 0
        for run in list(self._live.values()):
            if run.job.workflow_id == workflow_id and not run.context.is_cancelled:
                run.cancel_message = message
                if self.cancel(run.job.job_id, message):
                    count += 1
        return count

    # -- status ---------------------------------------------------------------------------------
    @property
    def running_jobs(self) -> int:
        """How many jobs have a task running now, counting those that wait on a dependency or
        in admission; jobs still queued in a lane are not counted."""
        return len(self._running)

    def unsettled_jobs(self) -> list[JobSnapshot]:
        """A snapshot of every job submitted and not settled yet (queued in a lane, waiting on a
        dependency or in admission, running), in submission order. Jobs submitted with a delay
        count once their delay has passed."""
        return [run.context.snapshot() for run in self._live.values()]

    @property
    def queued_jobs(self) -> tuple[int, int]:
        """How many jobs wait in each lane: (the standard lane, the priority lane)."""
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
            (run.job.job_type, run.job.workflow_id)
            for run in self._executing.values()
            if run.context.started_at is not None and not run.context.state.is_terminal
        ]
        return capture_health(
            accounts,
            waiters=admission.held_on,
            memory=memory,
            running=running,
            queues=QueueSizes(len(self._standard), len(self._fast), admission.queue_size),
        )

    # -- events ---------------------------------------------------------------------------------
    def _hears_limiter_events(self, context: Any) -> bool:
        """Whether a limiter event about ``context``'s job could reach a subscriber now:
        admission builds none that nobody hears (no snapshot, no event)."""
        return self.bus.has_listeners(context.workflow_id if context is not None else None)

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
        if account is self.memory_gate:  # one test per transition (~120 instructions)
            assert self.memory_gate is not None
            self.memory_gate.held_changed()  # its watchable zone follows memory's line
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


def _requirements_failure(job: AbstractJob[Any], exc: Exception) -> NucleoSystemError:
    """What a job whose ``requirements()`` raised is born failed with. A ``TypeError`` or
    ``ValueError`` there is a declaration the runtime refused (an amount an account does not
    take, a limiter's name for the limiter): the program's mistake, said as one."""
    where = f"{type(job).__qualname__}.requirements()"
    failure: NucleoSystemError
    if isinstance(exc, UsageError):
        failure = UsageError("job", f"{job.name}: {where}: {exc.problem}", exc.fix)
    elif isinstance(exc, TypeError | ValueError):
        failure = UsageError(
            "job",
            f"{job.name}: {where} raised {type(exc).__name__}: {exc}",
            f"fix the declaration in {where}; the job did not run",
        )
    else:
        return NucleoSystemError(
            "job", f"{job.name}.requirements() raised {type(exc).__name__}: {exc}", exc
        )
    failure.__cause__ = exc
    return failure


def _no_timeout(job: AbstractJob[Any]) -> UsageError:
    """What a job that declares resources with no timeout is born failed with."""
    cls = type(job).__qualname__
    return UsageError(
        "dispatcher",
        f"{job.name} declares resources but no timeout (it is None); admission's progress rests on "
        "every permit returning in finite time",
        f"give {cls} a timeout: `timeout = 60` in the class body, or `job.timeout = 60` before "
        "submit()",
    )


@asynccontextmanager
async def open_dispatcher(
    config: DispatcherConfig | None = None, **kwargs: Any
) -> AsyncIterator[JobDispatcher]:
    """Run a :class:`JobDispatcher` for the duration of the block; leaving it shuts down.

    A start-up error (``ConfigError``, a broken plugin) is raised bare before the block runs.
    Leaving the block normally waits, as a nursery waits for its children, for every job
    submitted in it to settle (:meth:`~JobDispatcher.wait_until_settled`: heartbeats stop
    firing, so a recurring one does not hold the block open), then stops the dispatcher.
    Leaving it with an exception or a cancellation (an outer ``move_on_after``, Ctrl-C, also
    while it waits for the jobs) stops the dispatcher at once: every job is cancelled and every
    handle settled before the block is left. ``await dispatcher.shutdown()`` inside the block is
    the graceful stop with a deadline: the parked are refused, running jobs get the timeout,
    then are interrupted. What the block raised comes out as it was raised; an exception group
    comes out only when the block and the dispatcher failed at once.
    """
    dispatcher = JobDispatcher(config, **kwargs)
    dispatcher._load_plugins()  # a bad plugin or config raises here, not from inside a nursery
    body_error: BaseException | None = None
    failure: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            # A fatal exception inside the dispatcher cancels the block at once (its own stop
            # runs shielded); the exception leaves in place of that cancellation.
            dispatcher._life.on_fatal = nursery.cancel_scope.cancel
            await nursery.start(dispatcher.run)
            try:
                yield dispatcher
                await dispatcher.wait_until_settled()
            except BaseException as exc:
                body_error = exc
                dispatcher._life.request_stop(fast=True)
                raise
            finally:
                with trio.CancelScope(shield=True):
                    await dispatcher.shutdown()
    except BaseExceptionGroup as group:
        failure = _boundary_error(group, prefer=body_error)
        if failure is group:
            raise
    if failure is not None:
        raise failure  # outside the except block: the failure keeps its own context
