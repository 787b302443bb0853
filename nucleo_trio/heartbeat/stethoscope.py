"""The Stethoscope: an observer base that hears the Heart, for dashboards and audit sinks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..bus import events as ev
from ..bus.bus import MessageBus
from ..bus.observers import JobObserver

if TYPE_CHECKING:
    from ..bus.bus import Subscription
    from ..dispatch.dispatcher import JobDispatcher

__all__ = ["Stethoscope"]


class Stethoscope(JobObserver[ev.HeartbeatEvent]):
    """Routes each of the six heartbeat events to a hook of its own.

    Subclass it and override the hooks you care about; a hook you leave alone does nothing::

        class Audit(Stethoscope):
            async def on_fired(self, event: HeartbeatFired) -> None:
                audit_log.write(f"{event.heartbeat_id} ran as {event.job_id}")

        audit = Audit()
        audit.attach(dispatcher)

    :meth:`attach` subscribes it to a dispatcher's bus (or a bus) once; a second attach raises
    :class:`RuntimeError`. :meth:`detach` unsubscribes, and may be called any number of times.
    """

    def __init__(self) -> None:
        self._attached = False
        self._subscription: Subscription | None = None

    def attach(self, target: JobDispatcher | MessageBus) -> Subscription:
        """Subscribe to every heartbeat event of ``target`` (a dispatcher, or its bus)."""
        if self._attached:
            raise RuntimeError(f"{self!r} is already attached; a stethoscope attaches once")
        bus = target if isinstance(target, MessageBus) else target.bus
        self._attached = True
        self._subscription = bus.subscribe(self, event_type=ev.HeartbeatEvent)
        return self._subscription

    def detach(self) -> None:
        """Stop hearing the Heart (events already queued are still delivered); harmless again."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.unsubscribe()

    @property
    def is_attached(self) -> bool:
        """``True`` while the stethoscope's subscription is active: after :meth:`attach` and
        before :meth:`detach`."""
        return self._subscription is not None and self._subscription.is_active

    async def on_event(self, event: ev.HeartbeatEvent) -> None:
        if isinstance(event, ev.HeartbeatRequested):
            await self.on_requested(event)
        elif isinstance(event, ev.CancelHeartbeat):
            await self.on_cancel(event)
        elif isinstance(event, ev.HeartbeatScheduled):
            await self.on_scheduled(event)
        elif isinstance(event, ev.HeartbeatRebound):
            await self.on_rebound(event)
        elif isinstance(event, ev.HeartbeatFired):
            await self.on_fired(event)
        elif isinstance(event, ev.HeartbeatFireFailed):
            await self.on_fire_failed(event)

    async def on_requested(self, event: ev.HeartbeatRequested) -> None:
        """A minted heartbeat is on its way to the store."""

    async def on_cancel(self, event: ev.CancelHeartbeat) -> None:
        """Someone asked to take a heartbeat off the schedule."""

    async def on_scheduled(self, event: ev.HeartbeatScheduled) -> None:
        """A heartbeat was stored under a free id."""

    async def on_rebound(self, event: ev.HeartbeatRebound) -> None:
        """A heartbeat replaced the one under its id; ``event.displaced`` is the old one."""

    async def on_fired(self, event: ev.HeartbeatFired) -> None:
        """A heartbeat's job passed the door; ``event.job_id`` is its run."""

    async def on_fire_failed(self, event: ev.HeartbeatFireFailed) -> None:
        """A heartbeat's fire failed; ``event.error`` says why. A recurrence goes on."""
