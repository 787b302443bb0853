"""The bus's routing table: what an event's class reaches is remembered, and forgotten on time.

A publish reads the unscoped subscriptions its event's class reaches from a table made on the
class's first publish; every subscribe and unsubscribe forgets it. These tests publish a class
first, then change the subscriptions, and check that the next event of the same class goes
exactly where the delivery rules say (BUS-03, BUS-07, BUS-09, BUS-12).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.bus import (
    JobEvent,
    JobProgressEvent,
    JobStartedEvent,
    LifecycleEvent,
    MessageBus,
    SchedulerEvent,
    SchedulerEventType,
    open_message_bus,
)
from nucleo_trio.jobs.snapshot import JobSnapshot


def _snapshot(job_class: str = "X") -> JobSnapshot:
    return JobSnapshot(
        job_id="j-1",
        workflow_id="wf-1",
        parent_job_id=None,
        user_id="u",
        job_class=job_class,
        job_class_qualname=f"m.{job_class}",
        name=job_class,
    )


def _started(job_class: str = "X") -> JobStartedEvent:
    return JobStartedEvent(snapshot=_snapshot(job_class), attempt=1)


class _Seen:
    def __init__(self) -> None:
        self.events: list[JobEvent] = []

    def __call__(self, event: JobEvent) -> None:
        self.events.append(event)


async def test_a_subscription_made_after_a_class_was_published_hears_the_next_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-03: a subscriber to a family that arrives after its members were published gets
    the next member of each class, and the one before it still gets every one."""
    async with open_message_bus() as bus:
        first, later = _Seen(), _Seen()
        bus.subscribe(first)
        bus.publish(_started())
        bus.publish(JobProgressEvent(snapshot=_snapshot(), payload="p"))
        await trio.testing.wait_all_tasks_blocked()
        bus.subscribe(later, event_type=LifecycleEvent)
        bus.publish(_started())
        bus.publish(JobProgressEvent(snapshot=_snapshot(), payload="q"))
        await trio.testing.wait_all_tasks_blocked()
        assert [type(e) for e in first.events] == [JobStartedEvent, JobProgressEvent] * 2
        assert [type(e) for e in later.events] == [JobStartedEvent]


async def test_an_unsubscribed_observer_hears_no_event_of_a_class_already_routed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-07: after an unsubscribe, the next event of a class published before reaches only
    the subscriptions left."""
    async with open_message_bus() as bus:
        leaving, staying = _Seen(), _Seen()
        subscription = bus.subscribe(leaving)
        bus.subscribe(staying)
        bus.publish(_started())
        await trio.testing.wait_all_tasks_blocked()
        subscription.unsubscribe()
        bus.publish(_started())
        await trio.testing.wait_all_tasks_blocked()
        assert len(leaving.events) == 1
        assert len(staying.events) == 2


async def test_filters_still_apply_beside_subscriptions_that_take_every_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-09: a job-class filter and a predicate still refuse what they refuse when an
    unfiltered subscription of the same class takes everything, and a predicate that raises
    rejects that one event only."""
    async with open_message_bus() as bus:
        everything, of_y, odd = _Seen(), _Seen(), _Seen()
        calls: list[int] = []

        def is_odd(event: Any) -> bool:
            calls.append(event.attempt)
            if event.attempt == 3:
                raise RuntimeError("boom")
            return bool(event.attempt % 2)

        bus.subscribe(everything)
        bus.subscribe(of_y, job_class="Y")
        bus.subscribe(odd, event_type=JobStartedEvent, predicate=is_odd)
        for attempt, job_class in [(1, "X"), (2, "Y"), (3, "Y"), (5, "X")]:
            bus.publish(JobStartedEvent(snapshot=_snapshot(job_class), attempt=attempt))
        await trio.testing.wait_all_tasks_blocked()
        assert len(everything.events) == 4
        assert [e.attempt for e in of_y.events] == [2, 3]  # type: ignore[attr-defined]
        assert [e.attempt for e in odd.events] == [1, 5]  # type: ignore[attr-defined]
        assert calls == [1, 2, 3, 5]


async def test_an_event_of_no_job_reaches_what_takes_its_class(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-12: a system event reaches the unscoped subscriptions that take its class only."""
    async with open_message_bus() as bus:
        everything, lifecycle, scoped = _Seen(), _Seen(), _Seen()
        bus.subscribe(everything)
        bus.subscribe(lifecycle, event_type=LifecycleEvent)
        bus.subscribe(scoped, workflow_id="wf-1")
        bus.publish(SchedulerEvent(type=SchedulerEventType.STARTED))
        await trio.testing.wait_all_tasks_blocked()
        assert [type(e) for e in everything.events] == [SchedulerEvent]
        assert lifecycle.events == scoped.events == []


def test_publish_refuses_what_is_not_an_event_in_every_state() -> None:
    """Bad input: a non-event is refused before the bus starts as once it runs."""
    bus = MessageBus()
    with pytest.raises(TypeError, match="only JobEvent instances"):
        bus.publish("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only JobEvent instances"):
        bus.publish(object())  # type: ignore[arg-type]
