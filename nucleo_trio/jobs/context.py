"""A job's context: its state, progress, cancellation, deadline and what it waited on."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import trio

from .._job_snapshot import build_snapshot
from ..bus.events import JobEvent, JobProgressEvent, Severity, UserNotificationEvent
from ..errors import CancellationRequested
from .snapshot import JobSnapshot, class_facts
from .state import JobState

if TYPE_CHECKING:
    from ..dispatch.dispatcher import JobDispatcher
    from ..guardrails.scope import ScopeGuard
    from ..resources.job_resources import JobResources
    from .handle import JobHandle
    from .job import AbstractJob

__all__ = [
    "OBS_CALLER_CLASS",
    "META_ADMISSION_WAIT_MS",
    "META_WAIT_TIMES",
    "CancellationToken",
    "JobContext",
    "current_job",
]

OBS_CALLER_CLASS = "obs.caller_class"  # SUB-12
"""Metadata key the dispatcher writes when a job submits another: the submitting job's class,
with its module (``myapp.flows.Research``). Admission guards read it to judge who calls."""

log = logging.getLogger("nucleo_trio.context")

# CTX-12: both waits are summed over the job's attempts.
META_WAIT_TIMES = "wait_times"
"""Metadata key: a dict of the milliseconds the job waited on each account, by account name,
summed over its attempts (:meth:`JobContext.record_resource_wait`)."""

META_ADMISSION_WAIT_MS = "admission_wait_ms"
"""Metadata key: the milliseconds the job waited in admission before each grant, summed over
its attempts (:meth:`JobContext.record_admission_wait`)."""

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "nucleo_trio_current_job", default=None
)


def current_job() -> JobContext | None:
    """The context of the job whose task is running, or ``None`` outside any job.

    Tasks a job starts in its own nursery inherit it, as trio copies context into child tasks.
    """
    return _current.get()


def _run_callback(callback: Callable[[], object], what: str) -> None:
    try:
        callback()
    except Exception:
        log.exception("a %s callback raised; the others still run", what)


class _OnceCallbacks:
    """Callbacks that fire once; one registered after (or during) the firing runs at once.

    trio runs one task at a time, so registration and firing cannot interleave except through
    a callback registering another while the firing is under way: that one sees ``fired`` and is
    run by its registrar, never also by the firing loop.
    """

    __slots__ = ("_callbacks", "_what", "fired")

    def __init__(self, what: str) -> None:
        # Most jobs never register a callback: the list is made by the first registration.
        self._callbacks: list[Callable[[], object]] | None = None
        self._what = what
        self.fired = False

    def add(self, callback: Callable[[], object]) -> Callable[[], None]:
        if self.fired:
            _run_callback(callback, self._what)
            return _noop
        if self._callbacks is None:
            self._callbacks = []
        callbacks = self._callbacks
        callbacks.append(callback)
        return _Unregister(self, callbacks, callback)

    def fire(self) -> bool:
        if self.fired:
            return False
        self.fired = True
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            _run_callback(callback, self._what)
        return True

    def drop(self) -> None:
        if self._callbacks:
            self._callbacks.clear()

    def __len__(self) -> int:
        return len(self._callbacks) if self._callbacks else 0


class _Unregister:
    """What :meth:`_OnceCallbacks.add` answers: called, it takes its callback out of the list
    it was added to, unless that list has fired since (the firing owns it then).

    One small object rather than a closure: a closure over the three is a function, its tuple
    of cells and three cells, which a job parked in admission's line (its cancel callback
    registered) would hold for as long as it waits.
    """

    __slots__ = ("_callback", "_callbacks", "_owner")

    def __init__(
        self,
        owner: _OnceCallbacks,
        callbacks: list[Callable[[], object]],
        callback: Callable[[], object],
    ) -> None:
        self._owner = owner
        self._callbacks = callbacks
        self._callback = callback

    def __call__(self) -> None:
        callbacks = self._callbacks
        if self._owner._callbacks is not callbacks:
            return  # fired since: the firing owns that list now
        try:
            callbacks.remove(self._callback)
        except ValueError:
            pass


def _noop() -> None:
    return None


_NO_OUTCOMES: Mapping[Any, Any] = MappingProxyType({})
# Read on every job: on CPython 3.11 a module global is found much faster than an enum
# class's member (an attribute read on a class is never specialised there).
_QUEUED, _RUNNING, _COMPLETED = JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED
"""A job without dependencies shares this empty view instead of two dicts of its own."""


class CancellationToken:
    """A one-shot cancellation signal with callbacks.

    The first :meth:`cancel` wins and keeps its reason; callbacks run once, and a callback
    registered after the cancel runs at once. A token of its own touches no job context.
    """

    def __init__(self) -> None:
        self._callbacks = _OnceCallbacks("cancellation")
        self._reason: str | None = None

    @property
    def is_cancelled(self) -> bool:
        """True once :meth:`cancel` has been called."""
        return self._callbacks.fired

    @property
    def reason(self) -> str | None:
        """The reason the first :meth:`cancel` gave; ``None`` until then."""
        return self._reason

    def cancel(self, reason: str = "Job cancelled") -> bool:
        """Signal cancellation; answers whether this call was the one that did it."""
        if self._callbacks.fired:
            return False
        self._reason = reason
        return self._callbacks.fire()

    def on_cancellation(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` once when cancelled (at once if already). Returns an unregister."""
        return self._callbacks.add(callback)

    def check(self) -> None:
        """Raise :class:`CancellationRequested` if cancelled."""
        if self._callbacks.fired:
            raise CancellationRequested(self._reason or "Job cancelled")


class JobContext:
    """Everything a running job can ask of the runtime about itself.

    The dispatcher creates one per submission. Inside :meth:`AbstractJob.execute` it is the job's
    argument and also :func:`current_job`. The first terminal state wins: a cancel racing a
    completion has one winner and raises on neither side.
    """

    # Set by few jobs, so read from the class until a job sets its own: a context then keeps
    # under CPython's 30 shared instance-dict keys (past them every context carries a dict of
    # its own, about 1.3 KB more per job). The token and the cancel callbacks are made on
    # first use: most jobs never touch them.
    _token: CancellationToken | None = None
    _cancel_reason: str | None = None
    _cancel_callbacks: _OnceCallbacks | None = None
    _dependency_results: Mapping[JobSnapshot, Any] = _NO_OUTCOMES
    _dependency_errors: Mapping[JobSnapshot, BaseException] = _NO_OUTCOMES
    description: str | None = None
    """What this one job does, for people; when set, snapshots carry it in place of the
    class's ``@tool_description``. ``None`` by default."""
    progress_percent: int | None = None
    """The last percentage (0 to 100) given to :meth:`publish`; ``None`` until one is."""
    progress_message: str | None = None
    """The last progress :meth:`publish` reported, as a string; ``None`` until then."""

    def __init__(
        self,
        job: AbstractJob[Any],
        user_id: str,
        *,
        dispatcher: JobDispatcher | None = None,
        metadata: Mapping[str, Any] | None = None,
        publish: Callable[[JobEvent], None] | None = None,
    ) -> None:
        if not isinstance(user_id, str) or not user_id.strip():
            raise ValueError(f"a job context needs a non-blank user id, got {user_id!r}")
        self.job = job
        """The job this context belongs to."""
        self.user_id = user_id
        """The user the job works for."""
        # None only for a context built outside any dispatcher (tests, tools run by hand).
        self.dispatcher: JobDispatcher = dispatcher  # type: ignore[assignment]
        """The dispatcher that runs the job; ``None`` for a context built outside any."""
        self.metadata: dict[str, Any] = dict(metadata) if metadata else {}
        """The job's metadata, a dict of its own: what the submitter passed, plus the keys the
        runtime adds (:data:`META_WAIT_TIMES`, :data:`META_ADMISSION_WAIT_MS`, ...). Snapshots
        copy it."""
        self._publish = publish
        self._state = _QUEUED
        # The timeout callbacks are made on first use, like the token and the cancel callbacks
        # (see the class): a settled handle keeps its context for the collector to walk.
        self._cancelled = False
        self._timeout_callbacks: _OnceCallbacks | None = None
        self._timed_out = False
        self._completed = False
        self.deadline: float | None = None
        """When the current attempt's deadline falls, on the trio clock
        (:func:`trio.current_time`, seconds); ``None`` before the first attempt is admitted and
        for a job without a timeout."""
        self.attempt = 0
        """The number of the current attempt: 0 before the first, 1 from when the first starts,
        one more for each re-run."""
        self.created_at = time.time()
        """When the context was made (at submit), in wall-clock seconds since the epoch."""
        self.started_at: float | None = None
        """When the job first turned ``RUNNING``, in wall-clock seconds; ``None`` until then."""
        self.completed_at: float | None = None
        """When the job reached a terminal state, in wall-clock seconds; ``None`` until then."""
        self._result: Any = None
        self._has_result = False
        self.is_executing_job_with_resources = False
        """True while an attempt of the job holds admitted resources. Awaiting another job's
        :meth:`JobHandle.result <nucleo_trio.jobs.JobHandle.result>` then raises
        :class:`~nucleo_trio.errors.JobDeadlockError`."""
        self.resources: JobResources | None = None
        """The attempt's grant and database handles while it holds them, else ``None``."""
        # Both sequences are the empty tuple until their first entry, then a list of the job's
        # own: most jobs record no model response and own no conversation, and a job parked
        # in admission's line would hold two empty lists for nothing.
        self.llm_responses: Sequence[Any] = ()
        """The model responses recorded during the job (:meth:`record_llm_response`), in
        order; the terminal event carries them, and the list is emptied after the teardown
        (an empty tuple until the first is recorded)."""
        self.conversations: Sequence[Any] = ()  # TOOL-35
        """The conversations this job owns, in the order it took them
        (:meth:`hold_conversation`); its teardown releases them (an empty tuple until the
        first is held)."""
        self.handle: JobHandle[Any] | None = None
        """The handle :meth:`JobDispatcher.submit <nucleo_trio.dispatch.JobDispatcher.submit>`
        returned for the job; ``None`` for a context built by hand."""
        self._scope_guard: ScopeGuard | None = None

    # -- identity -----------------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        """The job's id."""
        return self.job.job_id

    @property
    def workflow_id(self) -> str:
        """The id of the job's workflow."""
        return self.job.workflow_id

    @property
    def parent_job_id(self) -> str | None:
        """The id of the job's parent: the workflow root or the job that submitted it."""
        return self.job.parent_job_id

    def snapshot(self) -> JobSnapshot:
        """The job as it stands now, frozen: what events carry (its name: the job's own
        ``display_name``, else the ``@display_name`` decorator's, else the class name)."""
        # ID-08: the naming rule.
        job = self.job
        facts = class_facts(type(job))
        # JobSnapshot(...) by position, in the fields' order (see build_snapshot: the
        # keywords alone cost more than the rest of the snapshot).
        return build_snapshot(
            job.job_id,
            job.workflow_id,
            job.parent_job_id,
            self.user_id,
            facts.name,  # job_class
            facts.qualname,  # job_class_qualname
            job.job_type,  # kind
            job.display_name or facts.display_name,  # name
            facts.action,
            self.description or facts.description,
            self._state,
            self.attempt,  # attempt_number
            job.priority,
            job.timeout,
            self.metadata,
            self.created_at,
            self.started_at,
            self.completed_at,  # ended_at
        )

    # -- state --------------------------------------------------------------------------------
    @property
    def state(self) -> JobState:
        """Where the job is in its life now."""
        return self._state

    def set_state(self, state: JobState) -> None:
        """Move to ``state``; leaving a terminal state is refused with :class:`RuntimeError`."""
        if self._state.is_terminal:  # ST-04
            raise RuntimeError(
                f"illegal state transition for {self.job.name}: {self._state.value} -> {state.value}"
            )
        self.try_transition(state)

    def try_transition(self, state: JobState) -> bool:
        """Move to ``state`` unless the job is already terminal; answers whether it moved."""
        if self._state.is_terminal:
            return False
        # Every move of the state is made here, in one call (three on every job): a terminal
        # state is only ever entered here, so the first entry finds completed_at unset and
        # does the terminal bookkeeping once.
        self._state = state
        if state.is_terminal:
            self._completed = True
            if self._timeout_callbacks is not None:
                self._timeout_callbacks.drop()
            self.completed_at = time.time()
        elif state is _RUNNING and self.started_at is None:
            self.started_at = time.time()
        return True

    def complete(self, result: Any) -> bool:
        """Record the result and turn ``COMPLETED`` unless a terminal state won first;
        answers whether it moved."""
        # ST-03: the first terminal state wins (and did the terminal bookkeeping).
        self._result = result
        self._has_result = True
        return self.try_transition(_COMPLETED)

    def set_result(self, result: Any) -> None:
        """Hold the result before the job turns ``COMPLETED``, so ``post_execute`` can read it
        as :attr:`result`."""
        # EXEC-02
        self._result = result
        self._has_result = True

    @property
    def result(self) -> Any:
        """The result held by :meth:`set_result` or :meth:`complete`; ``None`` until then."""
        return self._result

    @property
    def has_result(self) -> bool:
        """Whether a result has been held (a job may return ``None``)."""
        return self._has_result

    # -- cancellation -------------------------------------------------------------------------
    @property
    def token(self) -> CancellationToken:
        """The job's :class:`CancellationToken`: cancelled with the job, and with the first
        reason given; made on first use, already cancelled if the job is."""
        token = self._token
        if token is None:
            token = self._token = CancellationToken()
            if self._cancel_reason is not None:
                token.cancel(self._cancel_reason)
        return token

    def _cancel_token(self, reason: str) -> None:
        """The token's cancel, whether or not the token was made yet (the first reason wins)."""
        if self._token is not None:
            self._token.cancel(reason)
        elif self._cancel_reason is None:
            self._cancel_reason = reason

    @property
    def is_cancelled(self) -> bool:
        """True once the job was cancelled, or timed out (a timeout cancels it too)."""
        return self._cancelled

    @property
    def cancel_reason(self) -> str | None:
        """The first reason the job was cancelled with (``"Job timed out"`` after a timeout);
        ``None`` while it is not cancelled."""
        return self._token.reason if self._token is not None else self._cancel_reason

    def cancel(self, reason: str = "Job cancelled") -> bool:
        """Signal cancellation. An active job turns ``CANCELLED``; a terminal one keeps its
        state but reads as cancelled. Callbacks run once. Answers whether this call cancelled
        it."""
        if self._cancelled:  # ST-02
            return False
        self._cancel_token(reason)
        self.try_transition(JobState.CANCELLED)
        if self.is_cancelled:  # a callback of the token cancelled the job meanwhile
            return False
        self._fire_cancel()
        return True

    def _fire_cancel(self) -> None:
        self._cancelled = True
        if self._cancel_callbacks is not None:
            self._cancel_callbacks.fire()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` once when the job is cancelled, at once if it already is. Returns
        a function that unregisters it. A callback that raises is logged; the others still
        run."""
        if self._cancelled:
            _run_callback(callback, "cancel")
            return _noop
        if self._cancel_callbacks is None:
            self._cancel_callbacks = _OnceCallbacks("cancel")
        return self._cancel_callbacks.add(callback)

    def check_cancellation(self) -> None:
        """Raise :class:`CancellationRequested` if the job was cancelled; call it often."""
        if self._cancelled:
            raise CancellationRequested(self.cancel_reason or "Job cancelled")

    # -- deadline -----------------------------------------------------------------------------
    def arm_deadline(self, timeout: float | None) -> None:
        """Set :attr:`deadline` to ``timeout`` seconds from now on the trio clock (``None``
        for none); the dispatcher calls it as each attempt is admitted."""
        self.deadline = None if timeout is None else trio.current_time() + timeout

    @property
    def remaining_time(self) -> float | None:
        """Seconds left before the deadline (negative once past), ``None`` without one."""
        if self.deadline is None:
            return None
        return self.deadline - trio.current_time()

    @property
    def is_timed_out(self) -> bool:
        """True once the deadline has passed; the first observation fires the timeout callbacks."""
        if self._timed_out:
            return True
        if self._completed or self.deadline is None:
            return False
        if trio.current_time() >= self.deadline:
            self._mark_timed_out()
            return True
        return False

    def _mark_timed_out(self) -> None:
        if self._timed_out or self._completed:
            return
        self._timed_out = True
        if self._timeout_callbacks is not None:
            self._timeout_callbacks.fire()

    def time_out(self) -> None:
        """Phase one of the timeout: set the timeout and cancel flags and run both callbacks."""
        self._mark_timed_out()
        if not self._cancelled:
            self._cancel_token("Job timed out")
            if not self.is_cancelled:  # a token callback may have cancelled it meanwhile
                self._fire_cancel()

    @property
    def timed_out(self) -> bool:
        """Whether the timeout fired (without observing the clock)."""
        return self._timed_out

    def on_timeout(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` once when the job times out; at once if it already has. A job that
        completed never times out, so a late registration is dropped. Returns a function that
        unregisters it."""
        # CTX-05, CTX-06
        if self._completed and not self._timed_out:
            return _noop
        # Observing the clock here fires the timeout if the deadline has passed, so the new
        # callback is then run at once rather than queued.
        if self.is_timed_out:
            _run_callback(callback, "timeout")
            return _noop
        if self._timeout_callbacks is None:
            self._timeout_callbacks = _OnceCallbacks("timeout")
        return self._timeout_callbacks.add(callback)

    @property
    def pending_timeout_callbacks(self) -> int:
        """How many :meth:`on_timeout` callbacks are registered and have not run yet."""
        return 0 if self._timeout_callbacks is None else len(self._timeout_callbacks)

    # -- progress and notifications -----------------------------------------------------------
    def publish(self, data: Any, percent: int | None = None) -> None:
        """Report progress: a :class:`~nucleo_trio.bus.events.JobProgressEvent` carrying
        ``data`` and ``percent`` (0 to 100; anything else raises :class:`ValueError`). A
        ``QUEUED`` or ``SCHEDULED`` job turns ``RUNNING``; a terminal one publishes no progress.

        A heartbeat request is not progress: a ``ScheduleHeartbeat`` from an orchestrator is
        scheduled for its user under its sealed scope guard (any other job is refused, "Only
        orchestrators may schedule"), and a ``CancelHeartbeat`` goes to the bus. A context
        built outside any dispatcher has no heartbeat schedule, and what it publishes is
        progress.
        """
        # ST-05
        heart = None if self.dispatcher is None else self.dispatcher.heart
        request = None if heart is None else heart.published_request(self, data)
        if request is not None:
            self._emit(request)
            return
        if self._state.is_terminal:
            return
        if self._state in (JobState.QUEUED, JobState.SCHEDULED):
            self.try_transition(JobState.RUNNING)
        self._record_progress(data, percent)

    def publish_user_progress(self, title: str, message: str, percent: int | None = None) -> None:
        """Publish ``"<title>: <message>"`` as progress, as :meth:`publish` does."""
        self.publish(f"{title}: {message}", percent)

    def publish_user_notification(self, severity: Severity, title: str, message: str) -> None:
        """Publish a :class:`~nucleo_trio.bus.events.UserNotificationEvent` of ``severity``
        with ``title`` and ``message``, for the user; the job's state does not change."""
        self._emit(
            UserNotificationEvent(
                snapshot=self.snapshot(), severity=severity, title=title, text=message
            )
        )

    def _record_progress(self, data: Any, percent: int | None) -> None:
        if percent is not None:
            if not 0 <= percent <= 100:
                raise ValueError(f"progress percent must be within 0..100, got {percent}")
            self.progress_percent = percent
        self.progress_message = str(data)
        snapshot = self.snapshot()
        self._emit(
            JobProgressEvent(snapshot=snapshot, payload=data, percent=percent, title=snapshot.name)
        )

    def _emit(self, event: JobEvent) -> None:
        if self._publish is not None:
            self._publish(event)

    # -- waits ----------------------------------------------------------------------------------
    def record_resource_wait(self, account: str, ms: int) -> None:
        """Add ``ms`` milliseconds to the wait recorded for ``account`` under
        :data:`META_WAIT_TIMES`; a blank account name or a negative wait raises
        :class:`ValueError`. The dispatcher calls it after each grant."""
        if not isinstance(account, str) or not account.strip():
            raise ValueError(f"record_resource_wait needs an account name, got {account!r}")
        if ms < 0:
            raise ValueError(f"record_resource_wait: a wait cannot be negative, got {ms!r} ms")
        waits = dict(self.metadata.get(META_WAIT_TIMES) or {})
        waits[account] = waits.get(account, 0) + int(ms)
        self.metadata[META_WAIT_TIMES] = waits

    def record_admission_wait(self, ms: int) -> None:
        """Add ``ms`` milliseconds to the wait in admission recorded under
        :data:`META_ADMISSION_WAIT_MS`; a negative wait raises :class:`ValueError`. The
        dispatcher calls it after each grant."""
        if ms < 0:
            raise ValueError(f"record_admission_wait: a wait cannot be negative, got {ms!r} ms")
        # Once per attempt: int() only for what is not an int already (a call each time).
        metadata = self.metadata
        metadata[META_ADMISSION_WAIT_MS] = metadata.get(META_ADMISSION_WAIT_MS, 0) + (
            ms if type(ms) is int else int(ms)
        )

    # -- dependencies ---------------------------------------------------------------------------
    def set_dependency_outcomes(
        self, results: Mapping[JobSnapshot, Any], errors: Mapping[JobSnapshot, BaseException]
    ) -> None:
        """Hold the dependencies' outcomes, keyed by their final snapshots; the dispatcher's
        call once every dependency has settled."""
        self._dependency_results = dict(results)
        self._dependency_errors = dict(errors)

    @property
    def dependency_results(self) -> Mapping[JobSnapshot, Any]:
        """Each dependency's result keyed by its final snapshot, in declaration order; a failed
        dependency of a tolerant job maps to ``None``. Read-only."""
        return MappingProxyType(self._dependency_results)

    @property
    def dependency_errors(self) -> Mapping[JobSnapshot, BaseException]:
        """Each failed dependency's error keyed by its final snapshot; only a job that
        tolerates dependency failures runs with any. Read-only."""
        return MappingProxyType(self._dependency_errors)

    def all_dependency_results(self) -> list[Any]:
        """Every dependency's result, in declaration order (``None`` for a failed one)."""
        return list(self._dependency_results.values())

    def single_dependency_result(self) -> Any:
        """The one dependency's result; zero or several raise :class:`RuntimeError`."""
        count = len(self._dependency_results)
        if count != 1:
            raise RuntimeError(
                f"single_dependency_result() needs exactly one dependency, {self.job.name} has {count}"
            )
        return next(iter(self._dependency_results.values()))

    # -- LLM calls --------------------------------------------------------------------------------
    def record_llm_response(self, response: Any) -> None:
        """Add ``response`` to :attr:`llm_responses`; the observable model clients of
        :mod:`nucleo_trio.llm.clients` call it once per call, failed calls included."""
        responses = self.llm_responses
        if isinstance(responses, list):
            responses.append(response)
        else:
            self.llm_responses = [response]

    def hold_conversation(self, conversation: Any) -> None:
        """Keep ``conversation`` owned by this job until its teardown releases it."""
        held = self.conversations
        if isinstance(held, list):
            held.append(conversation)
        else:
            self.conversations = [conversation]

    def release_conversations(self) -> None:
        """Release every conversation this job owns, last taken first (the teardown's call)."""
        if not self.conversations:
            return
        held, self.conversations = self.conversations, ()
        for conversation in reversed(held):
            try:
                conversation.release(self)
            except Exception:
                log.exception("releasing a conversation of %s failed", self.job.name)

    def clear_completion_data(self) -> None:
        """Release the recorded LLM responses; after teardown they live on the terminal event."""
        if self.llm_responses:
            self.llm_responses = []

    # -- scope ----------------------------------------------------------------------------------
    @property
    def scope_guard(self) -> ScopeGuard | None:
        """The scope guard the door captured for this job: an orchestrator's own sealed guard,
        else the guard of the caller it was admitted under; ``None`` before the door judged it."""
        return self._scope_guard

    def seal_scope_guard(self, guard: ScopeGuard) -> None:
        """Capture ``guard`` for this job; the door's call, once (a second raises RuntimeError)."""
        if self._scope_guard is not None:
            raise RuntimeError(f"{self.job.name}: the scope guard is already captured")
        self._scope_guard = guard

    # -- submitting -------------------------------------------------------------------------------
    def submit(
        self,
        job: AbstractJob[Any],
        dependencies: Any = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[Any]:
        """Submit a child job through this job's dispatcher (orchestrators only)."""
        return self.dispatcher.submit(job, dependencies, metadata)

    def __repr__(self) -> str:
        return f"<JobContext {self.job.name} {self._state.value}>"
