"""The message bus: typed events from publishers to observers, never waiting on either.

A :class:`MessageBus` gives each subscription a bounded queue and a task of its own that feeds
the queue's events to the observer one at a time, in publish order. :meth:`MessageBus.publish`
only routes and enqueues, so it is synchronous and never waits on an observer, and a slow
observer only ever delays itself.

Start a bus inside a nursery and stop it when done::

    bus = MessageBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        bus.subscribe(print_it, event_type=LifecycleEvent)
        bus.publish(event)
        await bus.stop()

or let :func:`open_message_bus` do both. The delivery rules:

- an event published before the bus starts, or once it is stopping, is dropped, not deferred;
- :meth:`~MessageBus.stop` delivers what was published before it, giving each subscription up
  to :data:`DRAIN_TIMEOUT` seconds to drain; an observer still busy then is cancelled and the
  rest of its queue dropped, so a wedged observer cannot hang shutdown;
- an unsubscribed observer still receives what was already queued for it, nothing later, and
  :meth:`Subscription.unsubscribe` returns at once;
- a queue holds at most :data:`QUEUE_CAPACITY` events; one more is dropped with an error log;
- the same (or an equal) observer subscribed twice gets a no-op subscription and a warning;
- an observer that raises is logged and keeps receiving; a predicate that raises rejects that
  one event;
- subscriptions whose observer reports stale are reaped every :data:`SWEEP_INTERVAL` seconds and
  on :meth:`~MessageBus.cleanup_stale_subscriptions`;
- an event with no snapshot reaches only subscriptions scoped to no workflow and no job class.

The bus is a trio object: call it from trio tasks. A worker thread publishes with
``trio.from_thread.run_sync(bus.publish, event)``.
"""

from __future__ import annotations

import abc
import enum
import inspect
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, overload

import trio

from .events import HeartbeatEvent, JobEvent, SystemEvent
from .observers import JobObserver

__all__ = [
    "DRAIN_TIMEOUT",
    "NOOP_SUBSCRIPTION_ID",
    "QUEUE_CAPACITY",
    "SWEEP_INTERVAL",
    "MessageBus",
    "Subscription",
    "open_message_bus",
]

logger = logging.getLogger(__name__)

# BUS-11: a bounded queue per subscription.
QUEUE_CAPACITY: Final = 1_000_000
"""Events one subscription may hold undelivered, by default; one more is dropped with an error
log."""

# BUS-06: the drain bound of stop().
DRAIN_TIMEOUT: Final = 5.0
"""Seconds each subscription gets, once :meth:`MessageBus.stop` is called, to deliver what is
queued for it; an observer still busy after that is cancelled."""

DELIVERY_BATCH: Final = 64
"""Events one subscription delivers per scheduler step when several are queued."""

# BUS-10: the periodic sweep for stale subscriptions.
SWEEP_INTERVAL: Final = 60.0
"""Seconds between the automatic sweeps for stale subscriptions while the bus runs."""

# BUS-04: a duplicate observer gets a no-op subscription.
NOOP_SUBSCRIPTION_ID: Final = "noop"
"""The id of the subscription an observer gets when an equal observer is already subscribed."""

E = TypeVar("E", bound=JobEvent)

_Deliver = Callable[[JobEvent], Awaitable[None]]


class Subscription(abc.ABC):
    """A handle on one observer's registration with a bus.

    :meth:`unsubscribe` is synchronous and never blocks: events already queued for the observer
    are still delivered, events published afterwards are not. Calling it again is harmless.
    """

    # BUS-07: unsubscribing never blocks and keeps what is queued.
    __slots__ = ()

    @property
    @abc.abstractmethod
    def id(self) -> str:
        """A unique id; ``"noop"`` for the subscription a duplicate observer gets."""

    @property
    @abc.abstractmethod
    def is_active(self) -> bool:
        """Whether new events are still routed to this subscription."""

    @property
    @abc.abstractmethod
    def backlog(self) -> int:
        """How many events are queued and not yet delivered."""

    @abc.abstractmethod
    def unsubscribe(self) -> None:
        """Stop routing events here; whatever is already queued is still delivered."""

    @abc.abstractmethod
    async def wait_drained(self) -> None:
        """Return once the subscription has delivered all it ever will: it was unsubscribed,
        or its bus stopped, and the observer has returned from the last event queued for it
        (or the bus's stop gave up on it). Called on an active subscription, it waits for
        one of those. Unsubscribe, then wait, to close an observer without losing what was
        published before."""


class _NoOpSubscription(Subscription):
    __slots__ = ()

    @property
    def id(self) -> str:
        return NOOP_SUBSCRIPTION_ID

    @property
    def is_active(self) -> bool:
        return False

    @property
    def backlog(self) -> int:
        return 0

    def unsubscribe(self) -> None:
        return None

    async def wait_drained(self) -> None:
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return "<Subscription noop>"


_NOOP: Final = _NoOpSubscription()


class _JobClassFilter:
    """Matches a snapshot's job class against a class (and its subclasses) or a name.

    A snapshot names its job class by strings (``job_class``, ``job_class_qualname``), so a
    class filter compares qualified names. Subclasses may be defined after the subscription,
    so a name that is not yet known re-walks the class's subclass tree before it is refused.
    """

    __slots__ = ("_cls", "_name", "_known")

    def __init__(self, job_class: type | str) -> None:
        if isinstance(job_class, str):
            if not job_class:
                raise ValueError("job_class must be a class or a non-empty class name")
            self._cls: type | None = None
            self._name = job_class
            self._known: frozenset[str] = frozenset()
        elif isinstance(job_class, type):
            self._cls = job_class
            self._name = _qualified_name(job_class)
            self._known = _qualified_names_below(job_class)
        else:
            raise TypeError(f"job_class must be a class or a class name, got {job_class!r}")

    def matches(self, job_class: str, job_class_qualname: str) -> bool:
        if self._cls is None:
            return self._name in (job_class, job_class_qualname)
        if job_class_qualname in self._known:
            return True
        self._known = _qualified_names_below(self._cls)
        return job_class_qualname in self._known

    def __repr__(self) -> str:
        return self._name


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _qualified_names_below(cls: type) -> frozenset[str]:
    names: set[str] = set()
    stack = [cls]
    while stack:
        current = stack.pop()
        name = _qualified_name(current)
        if name not in names:
            names.add(name)
            stack.extend(current.__subclasses__())
    return frozenset(names)


class _LiveSubscription(Subscription):
    """One registration: its filter, its queue, and the task that empties the queue."""

    __slots__ = (
        "_bus",
        "_id",
        "observer",
        "_deliver",
        "event_type",
        "workflow_id",
        "_job_class",
        "_predicate",
        "_queue",
        "_capacity",
        "_closed",
        "_waiter",
        "_scope",
        "_done",
        "_active",
        "filtered",
    )

    def __init__(
        self,
        bus: MessageBus,
        observer: object,
        deliver: _Deliver,
        event_type: type[JobEvent],
        workflow_id: str | None,
        job_class: _JobClassFilter | None,
        predicate: Callable[[Any], bool] | None,
        capacity: int,
    ) -> None:
        self._bus = bus
        self._id = uuid.uuid4().hex
        self.observer = observer
        self._deliver = deliver
        self.event_type = event_type
        self.workflow_id = workflow_id
        self._job_class = job_class
        self._predicate = predicate
        # The queue is a deque and a parked consumer, not a memory channel: an offer is an
        # append (and, when the consumer waits, one reschedule), which a subscriber of every
        # event pays several times per job.
        self._queue: deque[JobEvent] = deque()
        self._capacity = capacity
        # Closed: nothing more is queued. Set by an unsubscribe or a stop (what is queued is
        # still delivered) and when the consumer ends (what is left is dropped).
        self._closed = False
        self._waiter: trio.lowlevel.Task | None = None
        # Created now, entered by the consumer later: stop() can set a drain deadline on a
        # consumer task that has not begun to run yet.
        self._scope = trio.CancelScope()
        self._done = trio.Event()
        self._active = True
        self.filtered = job_class is not None or predicate is not None
        """Whether an event of its type and workflow may still be refused: by the job class or
        by a predicate."""

    @property
    def id(self) -> str:
        return self._id

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def backlog(self) -> int:
        return len(self._queue)

    def unsubscribe(self) -> None:
        self._bus._remove(self)

    async def wait_drained(self) -> None:
        await self._done.wait()

    def __repr__(self) -> str:
        scope = f" workflow={self.workflow_id}" if self.workflow_id is not None else ""
        job = f" job_class={self._job_class!r}" if self._job_class is not None else ""
        return (
            f"<Subscription {self._id[:8]} {self.event_type.__name__}{scope}{job} "
            f"observer={self.observer!r}>"
        )

    def accepts(self, event: JobEvent) -> bool:
        """Whether ``event`` matches: its type, its workflow, then :meth:`passes`."""
        if not isinstance(event, self.event_type):
            return False
        snapshot = event.snapshot
        # A scoped subscription never sees an event that belongs to no job (BUS-12).
        if self.workflow_id is not None and (
            snapshot is None or snapshot.workflow_id != self.workflow_id
        ):
            return False
        return self.passes(event)

    def passes(self, event: JobEvent) -> bool:
        """Whether ``event``, of the subscription's type and workflow, passes the job class and
        the predicate (what :attr:`filtered` says may refuse it)."""
        snapshot = event.snapshot
        if self._job_class is not None and (
            snapshot is None
            or not self._job_class.matches(snapshot.job_class, snapshot.job_class_qualname)
        ):
            return False
        if self._predicate is None:
            return True
        try:
            return bool(self._predicate(event))
        except Exception:
            # A predicate that fails rejects this event only (BUS-09).
            logger.exception("predicate of %r failed on %s; event rejected", self, _describe(event))
            return False

    @trio.lowlevel.enable_ki_protection
    def offer(self, event: JobEvent) -> None:
        if self._closed:
            # Unsubscribed or stopping, or the consumer is gone (the bus's nursery was
            # cancelled under it): a publisher must never fail because of an observer.
            return
        queue = self._queue
        if len(queue) >= self._capacity:
            logger.error(
                "queue of %r is full (%d events); %s dropped",
                self,
                self._bus.queue_capacity,
                _describe(event),
            )
            return
        queue.append(event)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter)

    @trio.lowlevel.enable_ki_protection
    def close_queue(self) -> None:
        # The consumer delivers what is queued, then sees the queue closed and exits.
        self._closed = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter)

    def drain_by(self, deadline: float) -> None:
        self.close_queue()
        self._scope.deadline = min(self._scope.deadline, deadline)

    async def _wait_for_events(self) -> None:
        """Park until an event is queued or the queue closes."""
        self._waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    @trio.lowlevel.enable_ki_protection
    async def consume(self) -> None:
        deliver, queue = self._deliver, self._queue
        try:
            with self._scope:
                while True:
                    if not queue:
                        if self._closed:
                            break
                        # Parked until an offer or the close wakes it: the wake is this step's
                        # schedule point, so what is queued then goes out in the same step.
                        await self._wait_for_events()
                        continue
                    # What queued meanwhile goes out in the same step, up to a batch: a burst of
                    # events costs one scheduler step, not one each.
                    left = DELIVERY_BATCH
                    while queue and left:
                        left -= 1
                        event = queue.popleft()
                        try:
                            await deliver(event)
                        except Exception:
                            # The observer keeps receiving (BUS-09).
                            logger.exception("observer of %r failed on %s", self, _describe(event))
                        except (KeyboardInterrupt, SystemExit) as fatal:
                            # Not an observer's failure but the program's: hand it to the bus's
                            # owner, which stops in order; the bus keeps delivering meanwhile
                            # (the terminal events to come).
                            on_fatal = self._bus.on_fatal
                            if on_fatal is None:
                                raise
                            on_fatal(fatal)
                    if queue:
                        # More than a batch: the consumer yields between batches, so a long
                        # burst shares the loop.
                        await trio.lowlevel.checkpoint()
            if self._scope.cancelled_caught:
                logger.warning(
                    "%r did not drain within %s s of stop; the rest of its queue is dropped",
                    self,
                    DRAIN_TIMEOUT,
                )
        finally:
            self._closed = True
            self._waiter = None
            queue.clear()
            self._done.set()
            self._bus._retire(self)


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


# Read on every publish and every has_listeners(): a module global, because on CPython 3.11 a
# member read off an Enum class goes through EnumType's __getattr__ hook and is never
# specialised (several hundred instructions a read).
_RUNNING: Final = _State.RUNNING


class MessageBus:
    """Routes every published event to the queue of each subscription that matches it.

    See the module documentation for the delivery rules. ``queue_capacity`` bounds each
    subscription's queue (default :data:`QUEUE_CAPACITY`).
    """

    def __init__(self, *, queue_capacity: int = QUEUE_CAPACITY) -> None:
        if not isinstance(queue_capacity, int) or isinstance(queue_capacity, bool):
            raise TypeError(f"queue_capacity must be an int, got {queue_capacity!r}")
        if queue_capacity < 1:
            raise ValueError(f"queue_capacity must be at least 1, got {queue_capacity}")
        self._queue_capacity = queue_capacity
        self._state = _State.NEW
        self.audible = False
        """Whether any event could reach anyone now: the bus runs and some subscription can
        hear a job's events. A publisher on every job's path reads it before it asks
        :meth:`has_listeners`, which answers ``False`` whenever this is ``False``."""
        self._nursery: trio.Nursery | None = None
        self._reapable_subscribed: trio.Event | None = None
        """Set when a subscription whose observer can go stale arrives while the sweep waits."""
        self._stopped = trio.Event()
        # Routing tables are replaced, never mutated, so publish() can iterate one while a
        # predicate it calls subscribes or unsubscribes.
        self._unscoped: tuple[_LiveSubscription, ...] = ()
        # The unscoped subscriptions each event class reaches by type, found on its first
        # publish and forgotten when one subscribes or leaves: a publish reads one dict entry
        # instead of asking every subscription.
        self._routes: dict[type[JobEvent], tuple[_LiveSubscription, ...]] = {}
        # Whether an unscoped subscription can hear a job's events: one to system or heartbeat
        # events only (the Heart's) cannot, so has_listeners() need not count it.
        self._unscoped_hears_jobs = False
        self._by_workflow: dict[str, tuple[_LiveSubscription, ...]] = {}
        self._registered: dict[object, _LiveSubscription] = {}
        self._registered_unhashable: list[_LiveSubscription] = []
        # Subscriptions whose consumer task still runs, unsubscribed ones draining included.
        self._consumers: set[_LiveSubscription] = set()
        self.on_fatal: Callable[[BaseException], None] | None = None
        """Called with a ``KeyboardInterrupt`` or ``SystemExit`` an observer raised, instead of
        letting it tear the bus down (the dispatcher sets it to stop in order); ``None``
        re-raises it."""

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """Whether the bus is started and not stopping: published events are delivered."""
        return self._state is _State.RUNNING

    @property
    def queue_capacity(self) -> int:
        """The most events one subscription may hold undelivered."""
        return self._queue_capacity

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """The active subscriptions."""
        active: list[Subscription] = list(self._unscoped)
        for group in self._by_workflow.values():
            active.extend(group)
        return tuple(active)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the bus: its subscriptions' consumer tasks and the stale sweep.

        Start it with ``await nursery.start(bus.run)``; it returns once :meth:`stop` has
        finished (or when cancelled from outside). Starting a bus a second time is a no-op that
        logs a warning.
        """
        # BUS-05: a second start is a no-op.
        if self._state is not _State.NEW:
            logger.warning("message bus already started; the second start is a no-op")
            task_status.started()
            return
        self._state = _State.RUNNING
        self._hearing_changed()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for subscription in self.subscriptions:
                    assert isinstance(subscription, _LiveSubscription)
                    self._start_consumer(subscription)
                nursery.start_soon(self._sweep_stale, name="message-bus-sweep")
                task_status.started()
                await self._stopped.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self._state = _State.STOPPED
            self._hearing_changed()
            self._stopped.set()

    async def stop(self) -> None:
        """Stop the bus, delivering first what was published before the call.

        New events are dropped from the moment it is called. Each subscription gets up to
        :data:`DRAIN_TIMEOUT` seconds to deliver its queue; an observer still busy after that is
        cancelled and the rest of its queue dropped. Raises :class:`RuntimeError` on a bus that
        never started, and on a second call.
        """
        # BUS-06 (drain within the bound) and BUS-08 (stop once, after a start).
        if self._state is _State.NEW:
            raise RuntimeError("cannot stop the message bus: it was never started")
        if self._state is not _State.RUNNING:
            raise RuntimeError(
                f"cannot stop the message bus: it is already {self._state.value} "
                "(stop() may be called once)"
            )
        self._state = _State.STOPPING
        self._hearing_changed()
        deadline = trio.current_time() + DRAIN_TIMEOUT
        draining = list(self._consumers)
        for subscription in draining:
            subscription.drain_by(deadline)
        try:
            for subscription in draining:
                await subscription._done.wait()
        finally:
            # Even a stop() cancelled midway lets run() finish: it cancels what still runs.
            self._state = _State.STOPPED
            self._hearing_changed()
            self._stopped.set()

    @trio.lowlevel.enable_ki_protection
    async def _sweep_stale(self) -> None:
        """Sweep every :data:`SWEEP_INTERVAL` seconds from the bus's start, while any
        subscription's observer can go stale (its class overrides ``is_stale``); with none, wait
        for one to subscribe instead of keeping a timer. A timer that fires for nothing is not
        free under an autojump clock: a program that waits on a worker thread would spin the
        virtual clock through sweep after sweep, holding the GIL from the thread it waits on."""
        started = trio.current_time()
        sweeps = 0
        while True:
            if not any(_can_go_stale(s) for s in self.subscriptions):
                self._reapable_subscribed = trio.Event()
                await self._reapable_subscribed.wait()
                continue
            due = int((trio.current_time() - started) // SWEEP_INTERVAL) + 1
            sweeps = max(sweeps + 1, due)
            await trio.sleep_until(started + sweeps * SWEEP_INTERVAL)
            self.cleanup_stale_subscriptions()

    def _start_consumer(self, subscription: _LiveSubscription) -> None:
        assert self._nursery is not None
        self._consumers.add(subscription)
        self._nursery.start_soon(subscription.consume, name=f"message-bus-consumer {subscription}")

    def _retire(self, subscription: _LiveSubscription) -> None:
        self._consumers.discard(subscription)

    # -- publishing ---------------------------------------------------------------------------

    def publish(self, event: JobEvent) -> None:
        """Route ``event`` to every matching subscription's queue; never waits.

        The event is dropped silently before the bus starts and once it is stopping. Raises
        :class:`TypeError` when ``event`` is not a :class:`~nucleo_trio.bus.JobEvent`.
        """
        # BUS-01 (synchronous, never waits) and BUS-05 (dropped unless running).
        routes = self._routes.get(type(event))
        if routes is None:
            routes = self._route(event)
        if self._state is not _RUNNING:
            return
        for subscription in routes:
            if not subscription.filtered or subscription.passes(event):
                subscription.offer(event)
        if self._by_workflow:
            snapshot = event.snapshot
            if snapshot is None:
                return
            for subscription in self._by_workflow.get(snapshot.workflow_id, ()):
                if subscription.accepts(event):
                    subscription.offer(event)

    def _route(self, event: JobEvent) -> tuple[_LiveSubscription, ...]:
        """The unscoped subscriptions whose type ``event``'s class is, remembered for its class;
        :class:`TypeError` for anything that is not a :class:`~nucleo_trio.bus.JobEvent`.

        Every event of the class then goes to the same subscriptions by type: an event is an
        instance of an event class exactly when its own class is a subclass of it."""
        if not isinstance(event, JobEvent):
            raise TypeError(f"only JobEvent instances can be published, got {event!r}")
        cls = type(event)
        routes = self._routes[cls] = tuple(
            s for s in self._unscoped if issubclass(cls, s.event_type)
        )
        return routes

    def _hearing_changed(self) -> None:
        """The state or the subscriptions changed: work out :attr:`audible` again."""
        self.audible = self._state is _RUNNING and (
            self._unscoped_hears_jobs or bool(self._by_workflow)
        )

    def has_listeners(self, workflow_id: str | None = None) -> bool:
        """Whether an event of ``workflow_id`` could reach anyone right now.

        Publishers use it to skip building events nobody receives; it may answer True for an
        event every subscription then filters out, never False for one that would be delivered.
        """
        if not self.audible:  # not running, or nobody can hear a job's events
            return False
        if self._unscoped_hears_jobs:
            return True
        # (A workflow's entry goes with its last subscription.)
        return workflow_id in self._by_workflow

    # -- subscribing --------------------------------------------------------------------------

    @overload
    def subscribe(
        self,
        observer: JobObserver[JobEvent] | Callable[[JobEvent], object],
        *,
        workflow_id: str | None = None,
        job_class: type | str | None = None,
        predicate: Callable[[JobEvent], bool] | None = None,
    ) -> Subscription: ...

    @overload
    def subscribe(
        self,
        observer: JobObserver[E] | Callable[[E], object],
        *,
        event_type: type[E],
        workflow_id: str | None = None,
        job_class: type | str | None = None,
        predicate: Callable[[E], bool] | None = None,
    ) -> Subscription: ...

    def subscribe(
        self,
        observer: JobObserver[Any] | Callable[[Any], object],
        *,
        event_type: type[JobEvent] = JobEvent,
        workflow_id: str | None = None,
        job_class: type | str | None = None,
        predicate: Callable[[Any], bool] | None = None,
    ) -> Subscription:
        """Deliver to ``observer`` every published event that matches.

        An event matches when it is an instance of ``event_type`` (a concrete event class, a
        family such as ``LifecycleEvent``, or ``HumanReadable``; default every event), belongs
        to ``workflow_id`` if one is given, was published for a job of ``job_class`` (a class,
        its subclasses included, or a class name) if one is given, and passes the observer's
        own predicate and ``predicate``, when there are any. A subscription scoped to a
        workflow or a job class never sees an event with no snapshot.

        ``observer`` is a :class:`JobObserver` or any callable taking the event; a callable
        that returns an awaitable is awaited. Subscribing an observer equal to one already
        subscribed logs a warning and returns a no-op subscription with id ``"noop"``.
        Allowed before the bus starts; raises :class:`RuntimeError` once it is stopping, and
        :class:`TypeError` or :class:`ValueError` for an argument of the wrong kind.
        """
        # BUS-04 (duplicates get the no-op subscription) and BUS-12 (scoped means a snapshot).
        if self._state in (_State.STOPPING, _State.STOPPED):
            raise RuntimeError(f"cannot subscribe: the message bus is {self._state.value}")
        if not isinstance(event_type, type) or not issubclass(event_type, JobEvent):
            raise TypeError(f"event_type must be a JobEvent class, got {event_type!r}")
        if workflow_id is not None and (not isinstance(workflow_id, str) or not workflow_id):
            raise ValueError(f"workflow_id must be a non-empty string or None, got {workflow_id!r}")
        if predicate is not None and not callable(predicate):
            raise TypeError(f"predicate must be callable, got {predicate!r}")
        class_filter = _JobClassFilter(job_class) if job_class is not None else None

        deliver: _Deliver
        if isinstance(observer, JobObserver):
            own_predicate = observer.predicate  # read once (OBS-17)
            if own_predicate is not None and not callable(own_predicate):
                raise TypeError(f"predicate of {observer!r} must be callable or None")
            deliver = observer.on_event
        elif callable(observer):
            own_predicate = None
            deliver = _callable_delivery(observer)
        else:
            raise TypeError(
                f"observer must be a JobObserver or a callable taking the event, got {observer!r}"
            )

        if self._find_registered(observer) is not None:
            logger.warning(
                "observer %r is already subscribed; returning a no-op subscription", observer
            )
            return _NOOP

        subscription = _LiveSubscription(
            self,
            observer,
            deliver,
            event_type,
            workflow_id,
            class_filter,
            _both(own_predicate, predicate),
            self._queue_capacity,
        )
        self._register(subscription)
        if self._state is _State.RUNNING:
            self._start_consumer(subscription)
        if isinstance(observer, JobObserver):
            observer.on_subscribe(subscription)
        return subscription

    def cleanup_stale_subscriptions(self) -> int:
        """Unsubscribe every subscription whose observer reports stale; return how many.

        Also runs on its own every :data:`SWEEP_INTERVAL` seconds while the bus runs. An
        observer whose ``is_stale()`` raises is logged and kept.
        """
        # BUS-10: the stale sweep.
        stale: list[_LiveSubscription] = []
        for subscription in self.subscriptions:
            assert isinstance(subscription, _LiveSubscription)
            observer = subscription.observer
            if not isinstance(observer, JobObserver):
                continue
            try:
                if observer.is_stale():
                    stale.append(subscription)
            except Exception:
                logger.exception("is_stale() of %r failed; subscription kept", observer)
        for subscription in stale:
            self._remove(subscription)
        if stale:
            logger.info("reaped %d stale subscription(s)", len(stale))
        return len(stale)

    # -- the registry -------------------------------------------------------------------------

    def _find_registered(self, observer: object) -> _LiveSubscription | None:
        try:
            return self._registered.get(observer)
        except TypeError:
            # An unhashable observer: equality is still the rule, just found the slow way.
            for subscription in self._registered_unhashable:
                if subscription.observer == observer:
                    return subscription
            return None

    def _register(self, subscription: _LiveSubscription) -> None:
        if self._reapable_subscribed is not None and _can_go_stale(subscription):
            self._reapable_subscribed.set()  # the sweep has something to look at again
        try:
            self._registered[subscription.observer] = subscription
        except TypeError:
            self._registered_unhashable.append(subscription)
        if subscription.workflow_id is None:
            self._unscoped = (*self._unscoped, subscription)
            self._unscoped_hears_jobs = _hear_jobs(self._unscoped)
            self._routes = {}
        else:
            group = self._by_workflow.get(subscription.workflow_id, ())
            self._by_workflow[subscription.workflow_id] = (*group, subscription)
        self._hearing_changed()

    def _remove(self, subscription: _LiveSubscription) -> None:
        if not subscription._active:
            return
        subscription._active = False
        if subscription in self._registered_unhashable:
            self._registered_unhashable.remove(subscription)
        elif self._registered.get(subscription.observer) is subscription:
            del self._registered[subscription.observer]
        if subscription.workflow_id is None:
            self._unscoped = tuple(s for s in self._unscoped if s is not subscription)
            self._unscoped_hears_jobs = _hear_jobs(self._unscoped)
            self._routes = {}
        else:
            group = tuple(
                s
                for s in self._by_workflow.get(subscription.workflow_id, ())
                if s is not subscription
            )
            if group:
                self._by_workflow[subscription.workflow_id] = group
            else:
                self._by_workflow.pop(subscription.workflow_id, None)
        self._hearing_changed()
        # What is queued is still delivered; a consumer that never started has nothing queued.
        subscription.close_queue()
        if subscription not in self._consumers:
            subscription._done.set()  # no consumer runs, nor will: nothing is left to deliver


def _hear_jobs(subscriptions: tuple[_LiveSubscription, ...]) -> bool:
    """Whether any of ``subscriptions`` takes events that may belong to a job, that is, events
    other than system and heartbeat events, which never carry a snapshot."""
    return any(not issubclass(s.event_type, SystemEvent | HeartbeatEvent) for s in subscriptions)


def _describe(event: JobEvent) -> str:
    # A log line names the event and its job; the whole snapshot would drown it.
    snapshot = event.snapshot
    job = f" of job {snapshot.job_id}" if snapshot is not None else ""
    return f"{type(event).__name__}{job}"


def _callable_delivery(observer: Callable[[Any], object]) -> _Deliver:
    async def deliver(event: JobEvent) -> None:
        outcome = observer(event)
        if inspect.isawaitable(outcome):
            await outcome

    return deliver


def _both(
    first: Callable[[Any], bool] | None, second: Callable[[Any], bool] | None
) -> Callable[[Any], bool] | None:
    if first is None:
        return second
    if second is None:
        return first
    return lambda event: bool(first(event)) and bool(second(event))


@asynccontextmanager
async def open_message_bus(*, queue_capacity: int = QUEUE_CAPACITY) -> AsyncIterator[MessageBus]:
    """Run a :class:`MessageBus` for the duration of an ``async with`` block.

    The bus is started on entry; on exit it is stopped (delivering what was published, within
    the drain bound) unless the block already stopped it::

        async with open_message_bus() as bus:
            bus.subscribe(observer)
            bus.publish(event)
    """
    bus = MessageBus(queue_capacity=queue_capacity)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        try:
            yield bus
        finally:
            if bus.is_running:
                await bus.stop()


def _can_go_stale(subscription: Subscription) -> bool:
    """Whether the subscription's observer can ever report stale: a :class:`JobObserver` whose
    class overrides ``is_stale`` (the default answers ``False`` for ever)."""
    observer = getattr(subscription, "observer", None)
    return isinstance(observer, JobObserver) and type(observer).is_stale is not JobObserver.is_stale
