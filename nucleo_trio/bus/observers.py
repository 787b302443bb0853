"""Observers: what the message bus delivers events to.

Anything that takes an event can observe the bus: a plain function (sync or async) or a
:class:`JobObserver`. Subclass :class:`JobObserver` when the observer needs more than a
callback: a predicate that narrows what it receives, a way to report itself stale so the bus
reaps it, or a hook that hands it its own subscription. :class:`AbstractWorkflowObserver` is the
ready-made one for watching a single workflow until it ends.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, final

import trio

from .events import JobEvent, WorkflowTerminationEvent

if TYPE_CHECKING:
    from .bus import Subscription

__all__ = ["AbstractWorkflowObserver", "JobObserver"]

E_contra = TypeVar("E_contra", bound=JobEvent, contravariant=True)


class JobObserver(abc.ABC, Generic[E_contra]):
    """Receives the events of the subscriptions it is registered under.

    Implement :meth:`on_event`. Each subscription has a task of its own that awaits it once per
    event, in publish order, so a slow observer delays only itself; an exception it raises is
    logged by the bus and the next event is delivered as usual.

    ``predicate`` is read once, when the observer is subscribed: ``None`` (the default) takes
    every event of the subscribed type, a callable keeps only the events it answers true for.
    :meth:`is_stale` (default ``False``) lets the bus reap an observer nobody needs any more.

    The bus counts equal observers as one: subscribing an observer equal to one already
    subscribed returns a no-op subscription. Observers compare by identity unless a subclass
    defines ``__eq__`` (and ``__hash__``), e.g. on a session id, to make two instances the same
    observer.
    """

    # OBS-17: the bus reads the predicate once, when the observer is subscribed.
    @property
    def predicate(self) -> Callable[[E_contra], bool] | None:
        """Which events of the subscribed type to deliver; ``None`` for all of them."""
        return None

    def is_stale(self) -> bool:
        """Whether the bus may drop this observer's subscriptions at its next sweep."""
        return False

    def on_subscribe(self, subscription: Subscription) -> None:
        """Called once the bus has registered this observer, with the new subscription.

        An observer that ends its own subscription keeps it from here. The default does nothing.
        """

    @abc.abstractmethod
    async def on_event(self, event: E_contra) -> None:
        """Handle one event. Runs in the subscription's own task, one event at a time."""


# OBS-34: a workflow-scoped observer that lets go when its workflow ends.
class AbstractWorkflowObserver(JobObserver[E_contra]):
    """Watches one workflow, and lets go of it when the workflow ends.

    It receives only events whose snapshot belongs to ``workflow_id`` (events with no snapshot
    never reach it), hands each to :meth:`handle_event`, and unsubscribes itself after a
    :class:`~nucleo_trio.bus.events.WorkflowTerminationEvent`. With an ``inactivity_timeout``
    (seconds) it reports stale once that long has passed without an event, so the bus's sweep
    reaps an observer whose workflow went quiet. Time is ``trio.current_time()``.

    Subclass and implement :meth:`handle_event`::

        class Progress(AbstractWorkflowObserver[JobProgressEvent]):
            async def handle_event(self, event: JobProgressEvent) -> None:
                print(f"{event.percent}%: {event.message}")

        bus.subscribe(Progress(workflow_id, inactivity_timeout=300),
                      event_type=JobProgressEvent)
    """

    def __init__(self, workflow_id: str, inactivity_timeout: float | None = None) -> None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise ValueError(f"workflow_id must be a non-empty string, got {workflow_id!r}")
        if inactivity_timeout is not None:
            if not isinstance(inactivity_timeout, int | float) or isinstance(
                inactivity_timeout, bool
            ):
                raise TypeError(
                    f"inactivity_timeout must be seconds or None, got {inactivity_timeout!r}"
                )
            if not (inactivity_timeout > 0 and math.isfinite(inactivity_timeout)):
                raise ValueError(
                    f"inactivity_timeout must be a positive number of seconds, "
                    f"got {inactivity_timeout!r}"
                )
        self._workflow_id = workflow_id
        self._inactivity_timeout = inactivity_timeout
        self._last_event_time: float | None = _now_if_in_trio()
        self._subscription: Subscription | None = None

    @property
    def workflow_id(self) -> str:
        """The workflow this observer watches."""
        return self._workflow_id

    @property
    def inactivity_timeout(self) -> float | None:
        """Seconds without an event after which the observer is stale; ``None`` for never."""
        return self._inactivity_timeout

    @property
    def last_event_time(self) -> float | None:
        """``trio.current_time()`` of the last event, or of the subscription before any."""
        return self._last_event_time

    @property
    def subscription(self) -> Subscription | None:
        """The subscription this observer was registered under, once subscribed."""
        return self._subscription

    @final
    @property
    def predicate(self) -> Callable[[E_contra], bool]:
        """Keeps only the events whose snapshot belongs to :attr:`workflow_id`; a subclass
        cannot change it."""
        return self._in_workflow

    def _in_workflow(self, event: JobEvent) -> bool:
        snapshot = event.snapshot
        return snapshot is not None and snapshot.workflow_id == self._workflow_id

    def on_subscribe(self, subscription: Subscription) -> None:
        """Keep ``subscription`` for :meth:`cleanup` and start the inactivity clock."""
        self._subscription = subscription
        # Inactivity is measured from the subscription until the first event arrives.
        self._last_event_time = trio.current_time()

    @final
    async def on_event(self, event: E_contra) -> None:
        """Note the time, pass ``event`` to :meth:`handle_event`, then end the watch when
        :meth:`should_self_cleanup` says so (even if the handler raised). A subclass cannot
        change it."""
        self._last_event_time = trio.current_time()
        try:
            await self.handle_event(event)
        finally:
            # Even a handler that failed on the workflow's last event lets the workflow go.
            if self.should_self_cleanup(event):
                self.cleanup()

    @abc.abstractmethod
    async def handle_event(self, event: E_contra) -> None:
        """Handle one event of the watched workflow."""

    def should_self_cleanup(self, event: E_contra) -> bool:
        """Whether this event ends the watch; by default a workflow termination does."""
        return isinstance(event, WorkflowTerminationEvent)

    def cleanup(self) -> None:
        """Unsubscribe (events already queued are still delivered) and run :meth:`on_cleanup`."""
        subscription, self._subscription = self._subscription, None
        if subscription is None:
            return
        subscription.unsubscribe()
        self.on_cleanup()

    def on_cleanup(self) -> None:
        """Called once when the observer lets go of its workflow. The default does nothing."""

    def is_stale(self) -> bool:
        """Whether more than :attr:`inactivity_timeout` seconds have passed since the last
        event (or the subscription); always ``False`` without a timeout."""
        if self._inactivity_timeout is None:
            return False
        now = trio.current_time()
        if self._last_event_time is None:
            # Built outside trio and never subscribed: the watch starts at the first look.
            self._last_event_time = now
            return False
        return now - self._last_event_time > self._inactivity_timeout


def _now_if_in_trio() -> float | None:
    try:
        return trio.current_time()
    except RuntimeError:
        return None
