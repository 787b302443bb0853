"""The Heart: two tasks that keep a dispatcher's schedule and fire it through the door.

The dispatcher starts the Heart with itself and stops it first thing at shutdown. One task
moves heartbeat requests from the bus into the store (:class:`HeartbeatRequested` in,
:class:`HeartbeatScheduled` or :class:`HeartbeatRebound` out; :class:`CancelHeartbeat` takes an
id off the schedule). The other sleeps until the store's next run instant, or until the store
says its head changed, and fires every heartbeat that is due.

**A fire is a submission.** The Heart builds the job from its class with a fresh workflow for
the heartbeat's user as its only argument, hands it the conversation id (only through
:class:`ConversationCarrier`) and the input (only through a typed ``set_input``), and submits
it through the very door a live submission crosses, with the heartbeat's captured guard in the
caller's seat: the scope wall judges the job's scope and its input's claim against that guard,
and a fired orchestrator seals the guard merged with its own scope. A flow that schedules
itself therefore cannot shed the scope it inherited, and whatever the door learns later
applies to fires as well. A job that cannot be built, or that the door refuses, is a
:class:`HeartbeatFireFailed`; either way a recurring heartbeat is put back at its next slot,
counted from the slot that fired, so slots that fell due during a pause fire back to back.

**What a stored row may say.** A durable store keeps rows others could write, so the Heart gives
it a :class:`~nucleo_trio.heartbeat.HeartbeatCodec`: job classes by the names registered in the
dispatcher's :class:`~nucleo_trio.heartbeat.HeartbeatJobs` (the classes passed to
``open_dispatcher(heartbeat_jobs=...)``, those plugins name through
``nucleo_trio_heartbeat_jobs``, and each class the program schedules), and every row signed with
the configured key. A row changed outside the runtime, or a name nobody registered here, fails
its fire; nothing in a row is imported or run.

**Stopping.** Once :meth:`Heart.stop` is called the Heart drops every request and cancellation
it is handed, each with a warning: a dispatcher that is shutting down schedules nothing.
"""

from __future__ import annotations

import inspect
import logging
import math
import types
import typing
from typing import TYPE_CHECKING, Any

import trio

from ..bus import events as ev
from ..errors import ConfigError, NucleoSystemError, UsageError
from ..guardrails.scope import ScopeGuard
from ..jobs.context import JobContext, _current
from ..jobs.identity import Identifiable, workflow
from ..jobs.job import AbstractJob, Orchestrator, ScopeAuthority
from .codec import HeartbeatCodec
from .records import (
    ConversationCarrier,
    Heartbeat,
    ScheduleHeartbeat,
    _mint_from,
    heartbeat_now,
)
from .registry import HeartbeatJobs
from .signing import signing_key_from
from .store import DurableHeartbeatStore, HeartbeatStore

if TYPE_CHECKING:
    from ..dispatch.dispatcher import JobDispatcher
    from ..jobs.handle import JobHandle

__all__ = ["META_HEARTBEAT_ID", "STORE_RETRY_DELAY", "Heart"]

log = logging.getLogger("nucleo_trio.heartbeat")

META_HEARTBEAT_ID = "heartbeat.id"
"""Metadata key: the id of the heartbeat whose fire submitted the job."""

STORE_RETRY_DELAY = 1.0
"""Seconds the firing task waits after its store failed before it asks again."""

_Request = ev.HeartbeatRequested | ev.CancelHeartbeat


class Heart:
    """A dispatcher's heartbeat schedule: its store, its intake task and its firing task.

    The dispatcher builds one at start with the store the plugins chose (``dispatcher.heart``)
    and runs it in its own nursery. :meth:`hand` is how requests reach it; :meth:`now` is the
    instant it fires by. ``jobs`` are the job classes stored rows may name (the dispatcher's
    ``heartbeat_jobs``, with those the plugins name added); ``codec`` is what a durable store
    writes and reads its rows through (``None`` for a store that keeps the schedule in memory).
    A durable store with no signing key configured refuses the start with a
    :class:`~nucleo_trio.errors.ConfigError` saying how to set one.
    """

    def __init__(self, dispatcher: JobDispatcher, store: HeartbeatStore) -> None:
        self._dispatcher = dispatcher
        self.store = store
        """Where the schedule lives; the Heart closes it in :meth:`aclose`."""
        self.jobs: HeartbeatJobs = dispatcher.heartbeat_jobs
        """The job classes a stored row may name: the dispatcher's ``heartbeat_jobs``, with those
        the plugins name and each class the program schedules added as it goes."""
        self.codec: HeartbeatCodec | None = None
        """What a durable store writes and reads its rows through (names and signatures);
        ``None`` for a store that keeps the schedule in memory."""
        if isinstance(store, DurableHeartbeatStore):
            key = signing_key_from(dispatcher.config.heartbeat)
            if key is None:
                raise ConfigError(
                    f"dispatcher config: the heartbeat store {store!r} keeps the schedule outside "
                    "this process, so its rows are signed, and no signing key is configured: set "
                    "heartbeat.signing_key_env to the name of an environment variable holding "
                    "one (or heartbeat.signing_key), the same in every worker; make one with "
                    "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
                )
            self.codec = HeartbeatCodec(self.jobs, key)
            try:
                store.use_codec(self.codec)
            except UsageError as exc:
                raise ConfigError(f"dispatcher config: {exc}") from exc
        self._inbox, self._requests = trio.open_memory_channel[_Request](math.inf)
        self._scope = trio.CancelScope()
        self._changed = trio.Event()
        self._stopping = False
        self._holding = False
        self._running = False
        self._ended = trio.Event()

    def published_request(self, context: JobContext, data: object) -> ev.HeartbeatEvent | None:
        """What ``context.publish(data)`` sends for a heartbeat request, or ``None`` for
        anything else (see :func:`published_request`)."""
        request = published_request(context, data)
        if isinstance(request, ev.HeartbeatRequested):
            self._admit(request.heartbeat.job_class)
        return request

    def _admit(self, job_class: type[AbstractJob[Any]]) -> None:
        """Name ``job_class`` for a durable store's rows before a heartbeat of it is minted:
        the class object came from this program, so it is registered here, and a name another
        class holds is refused now rather than when the row is written."""
        if self.codec is not None:
            self.codec.admit(job_class)

    # -- life -----------------------------------------------------------------------------------
    @property
    def is_stopping(self) -> bool:
        """``True`` once :meth:`stop` was called: every request handed in is dropped from then
        on."""
        return self._stopping

    @staticmethod
    def now() -> float:
        """The instant the Heart fires by: :func:`~nucleo_trio.heartbeat.heartbeat_now`."""
        return heartbeat_now()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the two tasks until :meth:`stop`; the dispatcher starts it in its nursery."""
        heartbeat_now()  # anchor the clock for this run before anything is compared with it
        # Only heartbeat events: the bus does not count this subscription as a listener for job
        # events, so the dispatcher still skips building events nobody hears.
        self._dispatcher.bus.subscribe(
            self.hand, event_type=ev.HeartbeatEvent, predicate=_is_request
        )
        unlisten = self.store.on_change(self._wake)
        self._running = True
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._intake, name="heartbeat-intake")
                    nursery.start_soon(self._beat, name="heartbeat-firing")
                    task_status.started()
        finally:
            unlisten()
            self._ended.set()

    def hold_fires(self) -> None:
        """Fire nothing more, but keep taking requests: what falls due stays in the store, for
        the next start to fire. The dispatcher holds the fires while the ``open_dispatcher``
        block waits for its jobs, so a recurring heartbeat cannot keep the block open."""
        self._holding = True
        self._changed.set()

    def stop(self) -> None:
        """Stop both tasks; from now on whatever the Heart is handed is dropped with a warning."""
        self._stopping = True
        self._scope.cancel()

    async def aclose(self) -> None:
        """Stop, wait for both tasks to end, and close the store; the dispatcher's last act at
        shutdown. A store operation in flight (a durable store answers from a worker thread)
        ends first, so nothing is written to a closed store."""
        self.stop()
        if self._running:
            await self._ended.wait()
        await self.store.aclose()

    # -- intake ---------------------------------------------------------------------------------
    def hand(self, event: ev.HeartbeatEvent) -> None:
        """Take a :class:`HeartbeatRequested` or :class:`CancelHeartbeat` for the store.

        The bus calls it for every such event published; a stopping Heart drops it with a
        warning. Any other heartbeat event is ignored.
        """
        if not isinstance(event, _Request):
            return
        if self._stopping:
            what = (
                f"the request to schedule {event.heartbeat}"
                if isinstance(event, ev.HeartbeatRequested)
                else f"the cancellation of {event.heartbeat_id!r}"
            )
            log.warning("the Heart is stopping; %s is dropped", what)
            return
        self._inbox.send_nowait(event)

    @trio.lowlevel.enable_ki_protection
    async def _intake(self) -> None:
        async for event in self._requests:
            try:
                await self._take(event)
            except Exception:
                log.exception("the Heart could not store %r", event)

    async def _take(self, event: _Request) -> None:
        if isinstance(event, ev.CancelHeartbeat):
            removed = await self.store.cancel(event.heartbeat_id)
            if removed is not None:
                log.info("heartbeat %r cancelled", event.heartbeat_id)
            return
        heartbeat = event.heartbeat
        displaced = await self.store.enqueue(heartbeat)
        if displaced is None:
            self._publish(ev.HeartbeatScheduled(heartbeat=heartbeat))
        else:
            self._publish(ev.HeartbeatRebound(heartbeat=heartbeat, displaced=displaced))

    # -- firing ---------------------------------------------------------------------------------
    def _wake(self) -> None:
        self._changed.set()

    @trio.lowlevel.enable_ki_protection
    async def _beat(self) -> None:
        while True:
            self._changed = trio.Event()
            try:
                deadline = await self._fire_due()
            except Exception:
                log.exception("the heartbeat store failed; asking again in %s s", STORE_RETRY_DELAY)
                deadline = trio.current_time() + STORE_RETRY_DELAY
            with trio.move_on_at(deadline):
                await self._changed.wait()

    async def _fire_due(self) -> float:
        """Fire everything due, then answer the trio instant to sleep until."""
        if self._holding:
            return math.inf
        while (heartbeat := await self.store.poll_due(self.now())) is not None:
            if self._stopping or self._holding:
                # stop() or hold_fires() came while the store was answering: the slot has not
                # fired, so it goes back as it was, for the next start to fire.
                await self._recur(heartbeat)
                return math.inf
            self._fire(heartbeat)
            recurrence = heartbeat.recurrence
            if recurrence is not None:
                await self._recur(heartbeat.next(recurrence.next_after(heartbeat.run_at)))
            # A long catch-up burst still lets every other task run between two fires.
            await trio.lowlevel.checkpoint()
        run_at = await self.store.peek_next_run_at()
        if run_at is None:
            return math.inf
        return trio.current_time() + (run_at - self.now())

    async def _recur(self, following: Heartbeat) -> None:
        """Put the next slot back, unless the id was rebound while this one fired."""
        try:
            stored = await self.store.re_enqueue_if_absent(following)
        except Exception:
            log.exception(
                "heartbeat %r: the store refused its next slot (%s); the recurrence stops here",
                following.id,
                following,
            )
            return
        if not stored:
            log.info("heartbeat %r was rebound while it fired; the rebinding wins", following.id)

    def _fire(self, heartbeat: Heartbeat) -> None:
        """Build the job and submit it through the door in the heartbeat's seat; publish the
        outcome. Never raises: a failure is the fire's, and the schedule goes on."""
        try:
            job = _build(heartbeat)
            handle = self._submit(job, heartbeat)
        except Exception as exc:
            self._publish(ev.HeartbeatFireFailed(heartbeat=heartbeat, error=exc))
            return
        if handle.done and handle.error is not None:  # refused at the door: born failed
            self._publish(ev.HeartbeatFireFailed(heartbeat=heartbeat, error=handle.error))
            return
        self._publish(ev.HeartbeatFired(heartbeat=heartbeat, job_id=job.job_id))

    def _submit(self, job: AbstractJob[Any], heartbeat: Heartbeat) -> JobHandle[Any]:
        """``dispatcher.submit(job)`` from the heartbeat's seat: the door sees a caller whose
        sealed guard is the one the heartbeat captured."""
        seat = _Seat(workflow(heartbeat.user_id, "heartbeat"), heartbeat.id)
        context = JobContext(seat, heartbeat.user_id, dispatcher=self._dispatcher)
        context.seal_scope_guard(heartbeat.scope_guard)
        token = _current.set(context)
        try:
            return self._dispatcher.submit(job, metadata={META_HEARTBEAT_ID: heartbeat.id})
        finally:
            _current.reset(token)

    # -- minting ----------------------------------------------------------------------------------
    def _schedule(
        self, spec: ScheduleHeartbeat, user_id: str, scope_guard: ScopeGuard | None
    ) -> Heartbeat:
        """The operator's mint (``dispatcher.schedule_heartbeat``): ``user_id`` is the authority,
        so it is refused from inside a job, which schedules as itself through its publish."""
        caller = _current.get()
        if caller is not None:
            raise NucleoSystemError(
                "dispatcher",
                f"schedule_heartbeat is the boot and operator entry and names any user; "
                f"{caller.job.name} runs inside the dispatcher, so it schedules with "
                "context.publish(spec), under its own user and sealed scope guard",
            )
        if not isinstance(user_id, str) or not user_id.strip():
            raise ValueError(
                f"schedule_heartbeat needs the user the heartbeat runs for, got {user_id!r}"
            )
        if scope_guard is not None and not isinstance(scope_guard, ScopeGuard):
            raise TypeError(
                f"schedule_heartbeat: scope_guard must be a ScopeGuard or None, "
                f"got {type(scope_guard).__name__}"
            )
        if isinstance(spec, ScheduleHeartbeat):
            self._admit(spec.job_class)
        heartbeat = _mint_from(spec, user_id, scope_guard or ScopeGuard())
        self._dispatcher.bus.publish(ev.HeartbeatRequested(heartbeat=heartbeat))
        return heartbeat

    def _publish(self, event: ev.HeartbeatEvent) -> None:
        message = event.message
        if isinstance(event, ev.HeartbeatFireFailed):
            log.warning("%s", message)
        elif message is not None:
            log.info("%s", message)
        self._dispatcher.bus.publish(event)

    def __repr__(self) -> str:
        state = "stopping" if self._stopping else "beating"
        return f"<Heart {state} {self.store!r}>"


class _Seat(Orchestrator[None]):
    """Who the door sees submitting a fire: an orchestrator of the heartbeat's user whose
    sealed guard is the heartbeat's. It is never submitted and never runs."""

    def __init__(self, parent: Identifiable, heartbeat_id: str) -> None:
        super().__init__(parent, prefix="heartbeat")
        self.heartbeat_id = heartbeat_id

    async def execute(self, context: JobContext) -> None:
        raise RuntimeError("a heartbeat's seat is never submitted")

    @property
    def display_name(self) -> str:
        return f"heartbeat {self.heartbeat_id}"


def _is_request(event: ev.HeartbeatEvent) -> bool:
    return isinstance(event, _Request)


# -- building the fired job ------------------------------------------------------------------------


def _build(heartbeat: Heartbeat) -> AbstractJob[Any]:
    """The job a fire submits: ``job_class(parent)`` under a fresh workflow for the heartbeat's
    user, with its conversation id and input handed over."""
    cls = heartbeat.job_class
    parent = workflow(heartbeat.user_id, heartbeat.id)
    try:
        job = cls(parent)
    except TypeError as exc:
        raise NucleoSystemError(
            "heartbeat",
            f"cannot build {cls.__qualname__}: a fired job class must be constructible from its "
            f"parent identity alone ({exc})",
            exc,
        ) from exc
    if heartbeat.conversation_id is not None:
        if not isinstance(job, ConversationCarrier):
            raise NucleoSystemError(
                "heartbeat",
                f"the heartbeat names the conversation {heartbeat.conversation_id!r}, but "
                f"{cls.__qualname__} does not implement ConversationCarrier, the only way a fired "
                "job takes over a conversation",
            )
        job.set_conversation_id(heartbeat.conversation_id)
    if heartbeat.input is not None:
        _hand_input(job, heartbeat)
    return job


def _hand_input(job: AbstractJob[Any], heartbeat: Heartbeat) -> None:
    """Deliver the input through the job's typed ``set_input``; a type that does not match its
    annotation fails the fire naming ``set_input``."""
    cls = type(job)
    setter = getattr(job, "set_input", None)
    if not callable(setter):
        raise NucleoSystemError(
            "heartbeat",
            f"the heartbeat carries an input, but {cls.__qualname__} has no set_input(value) to "
            "take it",
        )
    expected = _input_type(setter)
    value = heartbeat.input
    if not _accepts(expected, value):
        raise NucleoSystemError(
            "heartbeat",
            f"{cls.__qualname__}.set_input takes {_type_name(expected)}, but the heartbeat's "
            f"input is {value!r} ({type(value).__name__})",
        )
    setter(value)


def _input_type(setter: typing.Callable[..., Any]) -> Any:
    """The annotated type of ``set_input``'s one parameter (``Any`` when unannotated)."""
    parameters = [
        p
        for p in inspect.signature(setter).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not parameters:
        raise NucleoSystemError("heartbeat", f"{setter.__qualname__} takes no value")
    try:
        hints = typing.get_type_hints(setter)
    except Exception:  # an annotation that does not resolve judges nothing
        return Any
    return hints.get(parameters[0].name, Any)


def _accepts(expected: Any, value: object) -> bool:
    """Whether ``value`` is of the annotated type, judged shallowly (a ``list[str]`` needs a
    list), with the numeric tower's ``int`` for ``float``."""
    if expected is Any or expected is object:
        return True
    origin = typing.get_origin(expected)
    if origin is typing.Union or origin is types.UnionType:
        return any(_accepts(member, value) for member in typing.get_args(expected))
    if origin is typing.Literal:
        return value in typing.get_args(expected)
    if origin is typing.Annotated:
        return _accepts(typing.get_args(expected)[0], value)
    if origin is not None:
        return isinstance(origin, type) and isinstance(value, origin)
    if expected is None or expected is type(None):
        return value is None
    if isinstance(expected, typing.TypeVar):
        bound = expected.__bound__
        return bound is None or _accepts(bound, value)
    if isinstance(expected, typing.NewType):
        return _accepts(expected.__supertype__, value)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return True
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True


def _type_name(expected: Any) -> str:
    return expected.__name__ if isinstance(expected, type) else str(expected)


# -- the orchestrator's mint -----------------------------------------------------------------------


def published_request(context: JobContext, data: object) -> ev.HeartbeatEvent | None:
    """What ``context.publish(data)`` sends for a heartbeat request, or ``None`` for anything
    else.

    A :class:`ScheduleHeartbeat` is minted here with the publishing orchestrator's user and
    sealed guard, and refused for any other job: scheduling is deferred submission, and only
    orchestrators submit. A :class:`CancelHeartbeat` passes as it is (anyone may take a
    schedule away).
    """
    if isinstance(data, ev.CancelHeartbeat):
        return data
    if not isinstance(data, ScheduleHeartbeat):
        return None
    job = context.job
    if not isinstance(job, ScopeAuthority):
        raise NucleoSystemError(
            "dispatcher",
            f"Only orchestrators may schedule heartbeats: {job.name} "
            f"({type(job).__qualname__}) is not a ScopeAuthority and tried to schedule "
            f"{data.id!r}",
        )
    guard = context.scope_guard
    if guard is None:
        raise NucleoSystemError(
            "dispatcher",
            f"{job.name} has no sealed scope guard, so it was never admitted at the door and "
            f"cannot schedule {data.id!r}",
        )
    return ev.HeartbeatRequested(heartbeat=_mint_from(data, context.user_id, guard))
