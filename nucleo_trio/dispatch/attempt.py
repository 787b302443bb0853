"""One job's run, as the runtime keeps it: the record (:class:`JobRun`) and its execution.

The route a job's task takes once its lane let it go (``JobDispatcher._run_job``):
:meth:`JobRun.execute` waits for the dependencies holding nothing, runs the input guards, then
the attempts, then the output guards and ``post_execute``. Each attempt has its steps:
**admit** (the requirements captured afresh, the whole demand asked of admission: a grant at
once, or a place in the line, holding nothing; taken in the execution's own frame, so a job
parked in the line holds no frame of the attempt yet), then the two-phase
:mod:`~.deadline` timeout armed and the database handles opened, **run the body**
(``pre_execute`` and ``execute``, inside a transaction when asked, then the commit), **tell
the limiters** how it went, and **close**. An upstream signal re-runs the attempt with
jittered pacing (the upstream's Retry-After plus jitter when it named one) against the job's
own budget; a truncation or a correction re-runs it at once, within theirs. What a job raises
from a nursery or a task group is read leaf by leaf
(:func:`~nucleo_trio.errors._groups.read_raised`): the most demanding of its signals, or its
failure, and every upstream failure for the limiters. Steps with nothing to do (no
dependencies, no guards, the default hooks, no handles) are answered synchronously rather than
awaited.

The record reads its dispatcher only through :class:`Runtime`: the public parts a job consults,
and the private ones the dispatcher hands it.
"""

from __future__ import annotations

import itertools
import logging
import random
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

import trio

from .._clock import whole_ms
from ..admission import Demand, Grant, Ticket
from ..admission.limiter import RateLimiter
from ..bus import events as ev
from ..bus._lifecycle import job_started
from ..errors import (
    JobTimeoutError,
    OutputTruncationRetry,
    RateLimitRetry,
    RerunSignal,
    ResponseCorrectionRetry,
    UncorrectableError,
    UpstreamFailure,
    UpstreamRetry,
    add_suppressed,
)
from ..errors._groups import Reading, read_raised
from ..guardrails import StandardGuardrailEnforcer
from ..jobs.context import META_ADMISSION_WAIT_MS
from ..jobs.job import NONE_REQUIRED, AbstractJob, requirements_of
from ..jobs.state import JobState
from ..models.runtime import ModelDemandAssembler, binding_accounts
from ..resources import (
    DBResourceProvider,
    DBResourceProviders,
    GrantReleaseError,
    JobResources,
    ResourceCloseError,
)
from ..resources.job_resources import Spawn
from . import deadline
from ._boundary import _fatal_in
from .dependencies import DependencyGraph, await_dependencies, wait_holding_nothing
from .timekeeper import Timekeeper, TimerHandle
from .verdicts import (
    Verdict,
    account_fault,
    budget_of,
    is_cancellation,
    settled_verdict,
    stopped_after_commit,
    verdict_for,
)

if TYPE_CHECKING:
    from ..bus.bus import MessageBus
    from ..jobs.context import JobContext
    from ..jobs.handle import JobHandle
    from ..jobs.requirements import JobRequirements
    from .dispatcher import JobDispatcher
    from .lanes import Lane

__all__ = [
    "MAX_CORRECTION_RETRIES",
    "MAX_TRUNCATION_RETRIES",
    "FirstAdmission",
    "Hooks",
    "JobRun",
    "Runtime",
    "hooks_of",
]

log = logging.getLogger("nucleo_trio.dispatcher")
# Read on every job: on CPython 3.11 a module global is found much faster than an enum
# class's member (an attribute read on a class is never specialised there).
_RUNNING, _COMPLETED = JobState.RUNNING, JobState.COMPLETED

MAX_CORRECTION_RETRIES = 4  # EXEC-16
"""How many times the dispatcher re-runs one job on a
:class:`~nucleo_trio.errors.ResponseCorrectionRetry`: a backstop behind the job's own
correction budget (an ``LLMCall`` stops at 2). One more correction fails the job with
:class:`~nucleo_trio.errors.UncorrectableError`."""

MAX_TRUNCATION_RETRIES = 1
"""A truncated answer is re-run once at the escalated budget (or on the failover model)."""

_sequence = itertools.count()


FirstAdmission: TypeAlias = "Grant | Ticket | Exception"
"""The first attempt's admission when the job's task asks it before the job's nursery opens
(:meth:`JobRun.admit_first`), and what it came to: the grant; or, while the task still waits in
admission's line for it, the :data:`~nucleo_trio.admission.Ticket` that is its place there (the
task waits before it opens the nursery, so a parked job holds neither its nursery nor a frame of
its execution); or what the admission or the wait raised (the cancel check,
``requirements()``, the demand, a refusal), which :meth:`JobRun.execute` raises where the
admission would have been, so it is judged (re-run or verdict) exactly as an admission inside
the nursery is. The requirements that attempt captured (SUB-10) and their providers are the
record's :attr:`JobRun.first_requirements` and :attr:`JobRun.first_providers`."""

_NO_DEMAND = Demand()
"""The demand of the shared default requirements under the built-in assembler: nothing.
Admission only reads it (its entries, none), so every such attempt hands it the same one."""


class Runtime:
    """What every job's record shares with its dispatcher, one per dispatcher: the dispatcher
    for the parts a job consults through its public attributes (admission, the bus, the
    guardrails, the databases, the demand assembler, the ``http`` gate), and the private parts
    it is handed here (the dependency graph, the timekeeper, the table of executing jobs, the
    pacing's random source, the spawner of the clean-up that outlives a job)."""

    __slots__ = ("dispatcher", "executing", "graph", "rng", "spawn_system", "timekeeper")

    def __init__(
        self,
        dispatcher: JobDispatcher,
        *,
        graph: DependencyGraph,
        timekeeper: Timekeeper,
        executing: dict[str, JobRun],
        rng: random.Random,
        spawn_system: Spawn,
    ) -> None:
        self.dispatcher = dispatcher
        self.graph = graph
        self.timekeeper = timekeeper
        self.executing = executing
        self.rng = rng
        self.spawn_system = spawn_system


class JobRun:
    """One submitted job as the runtime keeps it, from the door to the settle: what the lanes
    hold, what the stop interrupts, what a verdict reads, and the steps of its execution.

    The job's own face is its :class:`~nucleo_trio.jobs.JobContext` (state, attempt, cancel and
    timeout flags, the attempt's resources while held) and its handle; the rest of what the
    runtime knows of one job is here: its place in a lane, its nursery and task, whether the
    stop interrupted it and with what message, and the last attempt's failure and sent commit,
    which a verdict decided after the attempt's task was cancelled still reads.
    """

    __slots__ = (
        "budget",
        "cancel_message",
        "context",
        "deadline_call",
        "dependencies",
        "failure",
        "first_providers",
        "first_requirements",
        "grace_call",
        "handle",
        "held",
        "interrupted",
        "job",
        "job_id",
        "lane",
        "nursery",
        "runtime",
        "sent_commit",
        "seq",
        "task",
        "workflow_id",
    )

    def __init__(
        self,
        job: AbstractJob[Any],
        context: JobContext,
        handle: JobHandle[Any],
        dependencies: tuple[JobHandle[Any] | AbstractJob[Any], ...],
        runtime: Runtime,
    ) -> None:
        # The door's capture of the requirements served routing and is not kept: every
        # attempt captures afresh (SUB-10), and a parked job would hold it for nothing.
        self.job = job
        self.job_id = job.job_id
        """The job's ``job_id`` and ``workflow_id``, which never change: read once."""
        self.workflow_id = job.workflow_id
        self.context = context
        self.handle = handle
        self.dependencies = dependencies
        self.runtime = runtime
        self.seq = next(_sequence)
        self.lane: Lane | None = None
        self.nursery: trio.Nursery | None = None
        """The job's own nursery while its task runs: what the stop and phase two cancel."""
        self.task: trio.lowlevel.Task | None = None
        """The job's task while it runs, for the stop's report of where a job is stuck."""
        self.interrupted = False
        self.cancel_message: str | None = None
        self.failure: BaseException | None = None
        """The last attempt's own failure, kept for a verdict that phase two or an interrupt
        decides after the attempt's task was cancelled (so a commit's error is not lost)."""
        self.sent_commit: JobResources | None = None
        """The last attempt's resources once its commit was sent, for the same verdicts: a job
        stopped after its commit says what the commit did."""
        # The attempt's two-phase timeout (:mod:`.deadline`): its resources, its budget, the
        # phase-one call at the deadline and, once phase one ran, the phase-two force-close.
        self.held: JobResources | None = None
        self.budget = 0.0
        self.deadline_call: TimerHandle | None = None
        self.grace_call: TimerHandle | None = None
        # first_requirements and first_providers, the first attempt's capture when it is
        # admitted before the nursery opens, are written by admit_first and read only after.

    # -- the lanes and the stop -----------------------------------------------------------------
    def sort_key(self) -> tuple[int, int]:
        """The priority lane's order: the higher priority first, then submission order."""
        # ROUTE-03
        return (-self.job.priority, self.seq)

    def interrupt(self) -> None:
        """Cancel the job's own nursery: what shutdown does to a job that outlived its wait.

        A job parked before its nursery opened (:meth:`admit_first`) has nothing to cancel
        yet, and needs nothing: the stop refuses every parked job before it interrupts any, and
        a nursery that opens on an interrupted job is cancelled at once."""
        self.interrupted = True
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    def nursery_cancelled(self) -> bool:
        """Whether the job's nursery was cancelled: by the stop (:meth:`interrupt`), or by
        phase two, the deadline phase one set on it (:func:`.deadline.phase_one`, which also
        sets :attr:`grace_call`); nothing else cancels it. trio's ``cancel_called`` reads the
        clock (it checks the deadline), so it is asked only once phase one ran."""
        if self.interrupted:
            return True
        nursery = self.nursery
        return (
            self.grace_call is not None
            and nursery is not None
            and nursery.cancel_scope.cancel_called
        )

    def cancel_for_stop(self) -> None:
        """The stop's cancel of the job, the first phase (the flag and its callbacks), with the
        stop's message unless the job already has one."""
        self.cancel_message = self.cancel_message or "Cancelled by shutdown"
        self.context.cancel("Cancelled by shutdown")

    def at_deadline(self) -> None:
        """The timekeeper's call at the attempt's deadline: phase one."""
        deadline.phase_one(self)

    def after_commit(self, committed: bool) -> None:
        """A deadline waited for the commit in flight: not committed, phase one runs now."""
        if not committed:
            deadline.phase_one(self)

    # -- the execution --------------------------------------------------------------------------
    def admit_first(self) -> FirstAdmission | None:
        """The first attempt's admission, asked before the job's nursery opens when nothing
        that comes before it could wait: no dependencies, and an input side the standard
        enforcer answers at once (no input guard). ``None`` otherwise: :meth:`execute` then
        admits the first attempt inside the nursery, as it admits every re-run.

        The answer is the :data:`FirstAdmission`: the grant, or a place in admission's line the
        job's task waits in before it opens the nursery, or what the admission raised. It
        never raises an :class:`Exception` itself: :meth:`execute` raises the failure where
        the admission would have been, so it is judged (re-run or verdict) exactly as there.
        """
        if self.dependencies:
            return None
        dispatcher, job, context = self.runtime.dispatcher, self.job, self.context
        guardrails = dispatcher.guardrails
        if type(guardrails) is not StandardGuardrailEnforcer or not guardrails.input_settled_now(
            job, context
        ):
            return None  # execute runs the input guards, and asks input_settled_now again
        try:
            if context._cancelled:  # the flag behind is_cancelled: a call only when it raises
                context.check_cancellation()
            # The door's capture served routing; every attempt captures afresh (SUB-10).
            self.first_requirements = requirements = requirements_of(job)
            self.first_providers = providers = (
                providers_of(dispatcher.databases, requirements) if requirements.databases else ()
            )
            return self._admit(requirements, providers)
        except Exception as failure:  # noqa: BLE001 - raised by execute, where it is judged
            return failure

    async def execute(self, first: FirstAdmission | None = None) -> Verdict:
        """The job's execution, inside its own nursery: the dependencies, the input guards, the
        attempts, the output guards and ``post_execute``; every failure becomes the verdict.

        ``first`` is :meth:`admit_first`'s answer when it was asked before the nursery opened
        (the dependencies and the input guards then had nothing to do), its grant waited for:
        the first attempt goes on from its grant, or raises what its admission raised."""
        job, context = self.job, self.context
        hooks = _HOOKS.get(type(job)) or hooks_of(type(job))
        dispatcher = self.runtime.dispatcher
        guardrails = dispatcher.guardrails
        # Steps that have nothing to do are answered synchronously rather than awaited: no
        # dependencies, no guard on a side (the standard enforcer answers that at once), the
        # default pre/post hooks. Same answers, fewer coroutines.
        # Exactly the standard enforcer answers at once: a subclass may override the seats.
        standard = guardrails if type(guardrails) is StandardGuardrailEnforcer else None
        try:
            if first is None:
                if self.dependencies:
                    await await_dependencies(self.runtime.graph, self)
                if standard is None or not standard.input_settled_now(job, context):
                    await guardrails.before_resources(job, context)
            # Attempts until one answers, re-running on the three signals within their budgets.
            # A group of signals raised at once arrives as the one that decides (see
            # :meth:`_attempt`), so it is one re-run on one budget.
            reruns: Reruns | None = None
            while True:
                try:
                    if first is None:
                        context.check_cancellation()
                        # The door's capture served routing; every attempt captures afresh
                        # (SUB-10).
                        requirements = requirements_of(job)
                        providers = providers_of(dispatcher.databases, requirements)
                        # Admit, the attempt's first step, here rather than in _attempt: a job
                        # parked in admission's line then holds no attempt frame while it
                        # waits. The synchronous half first: a grant at once costs no scheduler
                        # step, and a job that must wait joins the line and parks holding
                        # nothing.
                        entered = self._admit(requirements, providers)
                        if isinstance(entered, Grant):
                            grant = entered
                        else:
                            grant = await dispatcher.admission.wait(entered)
                    else:  # the first attempt, admitted before the nursery opened
                        admitted, first = first, None
                        if isinstance(admitted, Exception):
                            raise admitted  # judged as the admission's own, below
                        assert type(admitted) is Grant  # the task waited for a ticket's grant
                        grant = admitted
                        requirements, providers = self.first_requirements, self.first_providers
                    # Nothing awaits between the grant and _attempt's first step, which holds it.
                    result = await self._attempt(grant, requirements, providers, hooks)
                    break
                except RerunSignal as signal:
                    if context.timed_out or context.is_cancelled:
                        raise  # a cancellation or a timeout is never re-run (SIG-06)
                    if reruns is None:
                        reruns = Reruns(self)
                    delay = reruns.count(signal)
                    if delay is not None:
                        await pace(context, delay)
            context._result, context._has_result = result, True  # context.set_result, inline
            if standard is None or not standard.output_settled_now(job, context):
                await guardrails.after_release(job, context, result)
            if hooks.post_execute:
                await job.post_execute(context)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes the job's verdict
            if is_cancellation(exc) or _fatal_in(exc) is not None:
                raise
            return verdict_for(self, exc)
        verdict = Verdict(_COMPLETED, result)  # (state, result)
        # The flags behind timed_out and is_cancelled: settled_verdict only when one is up.
        return (
            settled_verdict(self, verdict) if context._timed_out or context._cancelled else verdict
        )

    # -- one attempt ----------------------------------------------------------------------------
    async def _attempt(
        self,
        grant: Grant,
        requirements: JobRequirements,
        providers: tuple[DBResourceProvider, ...],
        hooks: Hooks,
    ) -> Any:
        """One attempt once admitted (:meth:`execute` admits it: ``grant`` is the whole demand
        of ``requirements``), step by step: hold the grant as the attempt's resources; arm the
        timeout and open the handles; run the body, and commit when it runs in a transaction;
        tell the limiters; close. Then answer for it: the result, or what it failed with, timed
        out with, or was stopped after its commit by.

        The steps that never wait are plain calls, and the ones that may are awaited here, so
        an attempt with nothing to wait for costs no coroutine beyond the job's own."""
        job, context = self.job, self.context
        resources = self._hold(grant, requirements, providers)
        outcome: Any = None
        failure: BaseException | None = None
        reading: Reading | None = None
        budget = job.timeout
        timed = budget is not None
        try:
            if budget is not None:
                deadline.arm(self, resources, budget)
            if providers:
                await resources.materialize()  # a failure rolls the grant back; never runs
            context.resources = resources
            transactional = requirements.requires_transaction and resources.has_database
            # Run the body.
            try:
                if hooks.pre_execute:
                    await job.pre_execute(context)
                self._start_running(resources)
                if transactional:
                    await resources.begin_all()
                outcome = await job.execute(context)
                if transactional and not context.timed_out and not context.is_cancelled:
                    transactional = False  # commit_all rolls back what it could not commit
                    await self._commit(resources, timed)
            except BaseException as exc:  # noqa: BLE001 - handed to the verdict below
                if is_cancellation(exc):
                    raise
                # A bare exception, or a group from a nursery or task group inside the job: the
                # re-run it asks for, or the failure it fails with, and its 429s for the limiters.
                reading = read_raised(exc)
                failure = reading.outcome
                if reading.unheeded:
                    log_unheeded(job.name, reading)
            # The close never sends a commit, and only open handles can (a commit_all of none
            # sends nothing): an attempt without databases has none to ask about.
            sent = resources.commit_sent if providers else False
            if sent:
                self.sent_commit = resources
            self.failure = failure
            if transactional and (failure is not None or context.timed_out or context.is_cancelled):
                await roll_back_onto(resources, failure)
            if requirements is not NONE_REQUIRED:  # the default names no account to tell
                self._tell_limiters(requirements, failure, reading)
        finally:
            context.is_executing_job_with_resources = False
            if timed:
                deadline.disarm(self)
            # Close.
            try:
                # (nursery_cancelled() is asked only when it may answer yes.)
                if (self.interrupted or self.grace_call is not None) and self.nursery_cancelled():
                    # Phase two or shutdown: no checkpoint may replace the job's own verdict,
                    # so what is still open is aborted, and closed in the background before
                    # its permits go back.
                    resources.force_close()
                elif not resources.close_now():  # no handles: settled without a step
                    await resources.aclose()
            except (ResourceCloseError, GrantReleaseError) as close_failure:
                failure = _closed_with(close_failure, failure)
            finally:
                context.resources = None
        if sent and (self.nursery_cancelled() or context.is_cancelled) and not context.timed_out:
            raise stopped_after_commit(context, resources, failure)
        if failure is not None:
            raise failure
        if context._timed_out:  # the flag behind timed_out: a property read is a call
            raise JobTimeoutError(budget_of(job))
        return outcome

    def _admit(
        self, requirements: JobRequirements, providers: tuple[DBResourceProvider, ...]
    ) -> Grant | Ticket:
        """The attempt's whole demand, counted as the next attempt and handed to admission:
        a grant at once, or the place in the line to wait in."""
        dispatcher, context = self.runtime.dispatcher, self.context
        assembler = dispatcher.demand_assembler
        if requirements is NONE_REQUIRED and type(assembler) is ModelDemandAssembler:
            # The shared default requirements declare nothing (no model binding, no http, no
            # limiter, no database, no memory promise): the built-in assembler would answer
            # an empty demand, so it is not asked.
            demand = _NO_DEMAND
        else:
            demand = assembler.assemble(requirements, context, dispatcher.http_gate, providers)
        context.attempt += 1
        return dispatcher.admission.enter(demand, context)

    def _hold(
        self,
        grant: Grant,
        requirements: JobRequirements,
        providers: tuple[DBResourceProvider, ...],
    ) -> JobResources:
        """What the grant holds, as the attempt's resources; its waits are recorded."""
        context = self.context
        wall_wait = grant.wall_wait
        if wall_wait:
            context.record_admission_wait(whole_ms(wall_wait))
        else:  # granted at once: the wait recorded is the one so far (record_admission_wait(0))
            context.metadata.setdefault(META_ADMISSION_WAIT_MS, 0)
        waits = grant.wait_times_ms
        if waits:  # (an account may have held the job for no time: its 0 ms is recorded)
            for account, ms in waits.items():
                context.record_resource_wait(account, ms)
        runtime = self.runtime
        resources = JobResources(  # by position: keywords cost a call more here
            runtime.dispatcher.admission,
            grant,
            providers,
            context,
            requirements.read_only,
            runtime.spawn_system,
        )
        if grant.entries:
            context.is_executing_job_with_resources = True
        return resources

    def _start_running(self, resources: JobResources) -> None:
        """The body starts: the turn to RUNNING (a job cancelled meanwhile stops here), the
        job listed as executing, the started event, and its resources marked as worked on."""
        context = self.context
        if not context.try_transition(_RUNNING):
            context.check_cancellation()
        self.runtime.executing[self.job_id] = self
        bus = self.runtime.dispatcher.bus
        if bus.audible and bus.has_listeners(self.workflow_id):  # no call when nobody hears
            bus.publish(job_started(context.snapshot(), context.attempt))
        resources.executed = True

    async def _commit(self, resources: JobResources, timed: bool) -> None:
        """Commit the transaction. Once sent, the commit's answer is the outcome (EXEC-03,
        JR-15): ``commit_all`` is shielded, a cancel or an interrupt gives it the commit window
        to answer, and a deadline that lands meanwhile waits for it."""
        unwatch = deadline.stop_requests_to(resources, self)
        try:
            await resources.commit_all()
        finally:
            unwatch()
        if timed:
            deadline.disarm(self)  # committed: the work is durable, its deadline met

    def _tell_limiters(
        self,
        requirements: JobRequirements,
        failure: BaseException | None,
        reading: Reading | None,
    ) -> None:
        """Tell the limiters how the attempt went: a success to each, or every upstream
        failure (each 429 of a group on its own); nothing for a timeout or a cancel."""
        limiters = signalled(requirements)
        if not limiters:
            return
        context = self.context
        # The flags behind timed_out and is_cancelled (a property read is a call).
        if failure is None and not context._timed_out and not context._cancelled:
            for limiter in limiters:
                signal_limiter(limiter.on_success, limiter)
        elif reading is not None and not context.is_cancelled:
            for leaf in reading.upstream:  # every 429 of a group, each on its own
                upstream = UpstreamFailure.from_exception(leaf)
                for limiter in limiters:
                    signal_limiter(partial(limiter.on_rate_limit_error, upstream), limiter)


def _closed_with(
    close_failure: ResourceCloseError | GrantReleaseError, failure: BaseException | None
) -> BaseException | None:
    """The attempt's failure once its close failed: a handle that failed to close is the
    failure, or rides on it as suppressed; an account's fault as the grant went back is logged
    and the job keeps its verdict and result (ADM-45)."""
    if isinstance(close_failure, GrantReleaseError):
        account_fault(close_failure, failure)
        return failure
    if failure is None:
        return close_failure
    add_suppressed(failure, close_failure)
    return failure


async def pace(context: JobContext, delay: float) -> None:
    """The pacing sleep between re-runs, holding nothing; a cancel ends it."""
    done = trio.Event()
    with trio.move_on_after(delay):
        await wait_holding_nothing(context, done.wait)


def publish_retry(
    bus: MessageBus, context: JobContext, signal: RerunSignal, delay: float | None
) -> None:
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
    bus.publish(event)


def providers_of(
    databases: DBResourceProviders, requirements: JobRequirements
) -> tuple[DBResourceProvider, ...]:
    """The declared databases, names resolved against :attr:`databases`."""
    if not requirements.databases:
        return ()
    return tuple(databases.provider(p) if isinstance(p, str) else p for p in requirements.databases)


def signal_limiter(call: Any, limiter: RateLimiter) -> None:
    try:
        call()
    except Exception:
        log.exception(
            "limiter %s raised from its upstream signal",
            getattr(limiter, "limiter_name", limiter),
        )


def log_unheeded(name: str, reading: Reading) -> None:
    """Say which re-run signals of a group were not acted on: the other signals of an
    all-signal group, or every signal beside a failure."""
    acted = "re-runs on" if reading.signal is not None else "fails with"
    log.debug(
        "%s %s %s: %s; not acted on beside it: %s",
        name,
        acted,
        type(reading.outcome).__name__,
        reading.outcome,
        "; ".join(f"{type(s).__name__}: {s}" for s in reading.unheeded),
    )


def signalled(requirements: JobRequirements) -> list[RateLimiter]:
    """The accounts an attempt's outcome is reported to: each model binding's, then each
    custom limiter (SIG-01, ERR-14)."""
    if not requirements.model_bindings and not requirements.rate_limiters:
        return []
    return [*binding_accounts(requirements), *(n.limiter for n in requirements.limiters)]


class Reruns:
    """One job's re-runs so far, against their budgets: made at the first signal."""

    __slots__ = ("corrections", "first_truncation", "run", "truncations", "upstream")

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.upstream = self.truncations = self.corrections = 0
        self.first_truncation: OutputTruncationRetry | None = None

    def count(self, signal: RerunSignal) -> float | None:
        """Count ``signal`` against its budget and publish the re-run: the pacing delay before
        it (an upstream signal's), or ``None`` to re-run at once. A spent budget raises
        :class:`UncorrectableError` from the signal."""
        job, context = self.run.job, self.run.context
        bus = self.run.runtime.dispatcher.bus
        if isinstance(signal, UpstreamRetry):
            self.upstream += 1
            budget = job.upstream_retries
            if self.upstream > budget:
                raise UncorrectableError(
                    f"{job.name} exhausted its transparent retry budget ({budget}) on "
                    f"upstream signals; the last one: {signal}",
                    cause=signal,
                ) from signal
            # The named delay (Retry-After) plus jitter, else the kind's window; either scaled
            # by the re-run number and capped (SIG-05).
            delay = type(signal).pacing_delay(
                self.upstream, self.run.runtime.rng, retry_after=signal.retry_after
            )
            publish_retry(bus, context, signal, delay)
            return delay
        if isinstance(signal, OutputTruncationRetry):
            self.truncations += 1
            if self.truncations > MAX_TRUNCATION_RETRIES:
                first = self.first_truncation.model if self.first_truncation else None
                if first is not None and signal.model is not None and signal.model != first:
                    how = f"after failover from {first}"
                else:
                    how = "after the job rebuilt its conversation at the escalated budget"
                raise UncorrectableError(
                    f"{job.name}: the model's output was truncated again {how}",
                    cause=signal,
                ) from signal
            self.first_truncation = signal
            publish_retry(bus, context, signal, None)
            return None
        self.corrections += 1
        if self.corrections > MAX_CORRECTION_RETRIES:
            raise UncorrectableError(
                f"{job.name}: Exceeded max response correction retries "
                f"({MAX_CORRECTION_RETRIES}); the last: {signal}",
                cause=signal,
            ) from signal
        publish_retry(bus, context, signal, None)
        return None


class Hooks:
    """Which of a job class's optional hooks do anything: the defaults are not awaited."""

    __slots__ = ("post_execute", "pre_execute")

    def __init__(self, cls: type[AbstractJob[Any]]) -> None:
        self.pre_execute = cls.pre_execute is not AbstractJob.pre_execute
        self.post_execute = cls.post_execute is not AbstractJob.post_execute


_HOOKS: dict[type, Hooks] = {}


def hooks_of(cls: type[AbstractJob[Any]]) -> Hooks:
    """The class's :class:`Hooks`, worked out once per class."""
    hooks = _HOOKS.get(cls)
    if hooks is None:
        hooks = _HOOKS[cls] = Hooks(cls)
    return hooks


async def roll_back_onto(resources: JobResources, failure: BaseException | None) -> None:
    """Roll back a failed transactional attempt; a failed rollback rides on the job's own
    failure as suppressed (EXEC-05), or is logged when the attempt timed out."""
    try:
        await resources.rollback_all()
    except UncorrectableError as rollback_failure:
        if failure is not None:
            add_suppressed(failure, rollback_failure)
        else:
            log.error("rolling back a timed-out job failed: %s", rollback_failure)
