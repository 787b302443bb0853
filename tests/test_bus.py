"""The message bus and its observers (BUS-01..12, OBS-17, OBS-34), in virtual time."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission.limiter import LimiterEventType
from nucleo_trio.bus import (
    DRAIN_TIMEOUT,
    NOOP_SUBSCRIPTION_ID,
    QUEUE_CAPACITY,
    SWEEP_INTERVAL,
    AbstractWorkflowObserver,
    ContentStreamEvent,
    JobCompletedEvent,
    JobEvent,
    JobObserver,
    JobProgressEvent,
    JobScheduled,
    JobStartedEvent,
    LifecycleEvent,
    LimiterEvent,
    MessageBus,
    OrchestratorIdleEvent,
    SchedulerEvent,
    SchedulerEventType,
    Subscription,
    WorkflowCompleteEvent,
    open_message_bus,
)
from nucleo_trio.bus.bus import DELIVERY_BATCH
from nucleo_trio.jobs.snapshot import JobSnapshot

BUS_LOGGER = "nucleo_trio.bus.bus"


def snap(
    workflow_id: str = "wf-1",
    job_id: str = "j-1",
    job_class: str = "X",
    job_class_qualname: str = "m.X",
) -> JobSnapshot:
    return JobSnapshot(
        job_id=job_id,
        workflow_id=workflow_id,
        parent_job_id=None,
        user_id="u",
        job_class=job_class,
        job_class_qualname=job_class_qualname,
        name=job_class,
    )


def started(n: int = 1, workflow_id: str = "wf-1", **kwargs: Any) -> JobStartedEvent:
    return JobStartedEvent(snapshot=snap(workflow_id, **kwargs), attempt=n)


def progress(n: int, workflow_id: str = "wf-1") -> JobProgressEvent:
    return JobProgressEvent(snapshot=snap(workflow_id), payload=n)


def scheduler_event() -> SchedulerEvent:
    return SchedulerEvent(type=SchedulerEventType.STARTED)


def jobless_limiter_event() -> LimiterEvent:
    return LimiterEvent(
        limiter_name="http",
        limiter_category="semaphore",
        capacity=10,
        in_use=0,
        waiters=0,
        type=LimiterEventType.RELEASED,
    )


class Recorder(JobObserver[JobEvent]):
    """Records what it receives; optionally sleeps per event or waits on a gate first."""

    def __init__(self, delay: float = 0.0, gate: trio.Event | None = None) -> None:
        self.events: list[JobEvent] = []
        self.delay = delay
        self.gate = gate

    async def on_event(self, event: JobEvent) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await trio.sleep(self.delay)
        self.events.append(event)


@asynccontextmanager
async def running_bus(**kwargs: Any) -> AsyncIterator[tuple[MessageBus, trio.Nursery]]:
    """A started bus inside a nursery the test can also use; stopped on exit if still running."""
    bus = MessageBus(**kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        yield bus, nursery
        if bus.is_running:
            await bus.stop()


def is_running(bus: MessageBus) -> bool:
    # Read through a call so a type checker does not keep an earlier narrowing of the property.
    return bus.is_running


def is_active(subscription: Subscription) -> bool:
    return subscription.is_active


async def settle() -> None:
    """Let every consumer deliver what it can without virtual time passing."""
    await trio.testing.wait_all_tasks_blocked()


# -- publishing ----------------------------------------------------------------------------


async def test_publish_never_waits_and_a_slow_observer_never_starves_a_fast_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-01: 20 events with a subscriber sleeping 200 ms each publish in no time; the fast one has all 20 while the slow one is behind."""
    async with running_bus() as (bus, _):
        slow = Recorder(delay=0.2)
        fast = Recorder()
        bus.subscribe(slow)
        bus.subscribe(fast)
        before = trio.current_time()
        for i in range(20):
            bus.publish(progress(i))
        assert trio.current_time() == before, "publish is synchronous"
        await settle()
        assert trio.current_time() == before
        assert [e.payload for e in fast.events] == list(range(20))  # type: ignore[attr-defined]
        assert len(slow.events) < 20
        await trio.sleep(20 * 0.2 + 0.1)
        assert [e.payload for e in slow.events] == list(range(20))  # type: ignore[attr-defined]


async def test_a_burst_longer_than_a_batch_arrives_whole_and_in_order_yielding_between_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A burst of 2.5 batches reaches the observer whole and in publish order; the consumer
    delivers a whole batch per scheduler step, and another task runs between batches."""
    async with running_bus() as (bus, nursery):
        seen = Recorder()
        bus.subscribe(seen)
        burst = DELIVERY_BATCH * 5 // 2
        between: list[int] = []

        async def watch() -> None:
            while len(seen.events) < burst:
                between.append(len(seen.events))
                await trio.lowlevel.checkpoint()

        for i in range(burst):
            bus.publish(progress(i))
        nursery.start_soon(watch)
        await settle()
        assert [e.payload for e in seen.events] == list(range(burst))  # type: ignore[attr-defined]
        # Seen from another task, the deliveries move a whole batch at a time, and the other
        # task does run before the burst is through.
        assert all(count % DELIVERY_BATCH == 0 for count in between)
        assert any(0 < count < burst for count in between)


async def test_publish_refuses_what_is_not_an_event(autojump_clock: trio.testing.MockClock) -> None:
    """Bad input: only JobEvent instances can be published."""
    async with running_bus() as (bus, _):
        with pytest.raises(TypeError, match="only JobEvent instances"):
            bus.publish("hello")  # type: ignore[arg-type]


# -- scoping -------------------------------------------------------------------------------


async def test_workflow_scoped_subscription_sees_only_its_workflow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-02: a subscription scoped to a workflow receives only that workflow's events."""
    async with running_bus() as (bus, _):
        mine, everything = Recorder(), Recorder()
        bus.subscribe(mine, workflow_id="wf-a")
        bus.subscribe(everything)
        for workflow in ("wf-a", "wf-b", "wf-a", "wf-c"):
            bus.publish(started(workflow_id=workflow))
        await settle()
        assert [e.snapshot.workflow_id for e in mine.events] == ["wf-a", "wf-a"]  # type: ignore[union-attr]
        assert len(everything.events) == 4


async def test_category_subscription_spans_its_members_and_nothing_else(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-03: a LifecycleEvent subscription gets every lifecycle member and nothing else; WorkflowCompleteEvent is not lifecycle."""
    async with running_bus() as (bus, _):
        lifecycle = Recorder()
        bus.subscribe(lifecycle, event_type=LifecycleEvent)
        s = snap()
        members = [
            JobScheduled(snapshot=s),
            JobStartedEvent(snapshot=s, attempt=1),
            OrchestratorIdleEvent(snapshot=s),
            JobCompletedEvent(snapshot=s, result=1),
        ]
        others = [
            WorkflowCompleteEvent(snapshot=s),
            JobProgressEvent(snapshot=s, payload="p"),
            ContentStreamEvent(snapshot=s, chunk="c"),
            scheduler_event(),
        ]
        for event in [*others, *members]:
            bus.publish(event)
        await settle()
        assert lifecycle.events == members


async def test_job_class_scoped_subscription_matches_the_class_and_its_subclasses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job-class subscription matches snapshots of that class, its subclasses, or the named class."""

    class Base:
        pass

    class Child(Base):
        pass

    def qualname(cls: type) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    async with running_bus() as (bus, _):
        by_class, by_name = Recorder(), Recorder()
        bus.subscribe(by_class, job_class=Base)
        bus.subscribe(by_name, job_class="Child")

        class Grandchild(Child):  # defined after the subscription: still a match
            pass

        for cls in (Base, Child, Grandchild, int):
            bus.publish(started(job_class=cls.__name__, job_class_qualname=qualname(cls)))
        await settle()
        assert [e.snapshot.job_class for e in by_class.events] == [  # type: ignore[union-attr]
            "Base",
            "Child",
            "Grandchild",
        ]
        assert [e.snapshot.job_class for e in by_name.events] == ["Child"]  # type: ignore[union-attr]


async def test_events_without_a_snapshot_reach_only_unscoped_subscriptions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-12: system and job-less limiter events reach global and all-jobs by-type subscriptions, never scoped ones."""
    async with running_bus() as (bus, _):
        global_, by_type, limiter_type = Recorder(), Recorder(), Recorder()
        workflow_scoped, class_scoped = Recorder(), Recorder()
        bus.subscribe(global_)
        bus.subscribe(by_type, event_type=SchedulerEvent)
        bus.subscribe(limiter_type, event_type=LimiterEvent)
        bus.subscribe(workflow_scoped, workflow_id="wf-1")
        bus.subscribe(class_scoped, job_class="X")
        system, limiter = scheduler_event(), jobless_limiter_event()
        bus.publish(system)
        bus.publish(limiter)
        await settle()
        assert global_.events == [system, limiter]
        assert by_type.events == [system]
        assert limiter_type.events == [limiter]
        assert workflow_scoped.events == []
        assert class_scoped.events == []


# -- duplicates and observers --------------------------------------------------------------


async def test_a_duplicate_observer_instance_gets_a_noop_subscription(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """BUS-04: the same observer again gets id "noop" and a warning; each event arrives once."""
    async with running_bus() as (bus, _):
        observer = Recorder()
        first = bus.subscribe(observer)
        with caplog.at_level(logging.WARNING, logger=BUS_LOGGER):
            second = bus.subscribe(observer, event_type=LifecycleEvent)
        assert first.id != NOOP_SUBSCRIPTION_ID
        assert second.id == NOOP_SUBSCRIPTION_ID == "noop"
        assert not second.is_active
        assert "already subscribed" in caplog.text
        second.unsubscribe()  # harmless
        bus.publish(started())
        await settle()
        assert len(observer.events) == 1
        assert first.is_active


async def test_equal_observers_count_as_one_and_defaults(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-17: predicate defaults to None and is read once; is_stale defaults to False; equal observers count as one."""

    class Session(Recorder):
        def __init__(self, session_id: str) -> None:
            super().__init__()
            self.session_id = session_id

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Session) and other.session_id == self.session_id

        def __hash__(self) -> int:
            return hash(self.session_id)

    class CountingPredicate(Recorder):
        reads = 0

        @property
        def predicate(self) -> Callable[[JobEvent], bool]:
            type(self).reads += 1
            return lambda event: isinstance(event, JobStartedEvent)

    plain = Recorder()
    assert plain.predicate is None
    assert plain.is_stale() is False

    async with running_bus() as (bus, _):
        assert bus.subscribe(Session("s1")).id != NOOP_SUBSCRIPTION_ID
        assert bus.subscribe(Session("s1")).id == NOOP_SUBSCRIPTION_ID
        assert bus.subscribe(Session("s2")).id != NOOP_SUBSCRIPTION_ID
        counting = CountingPredicate()
        bus.subscribe(counting)
        for event in (started(), progress(1), started(2), progress(2)):
            bus.publish(event)
        await settle()
        assert CountingPredicate.reads == 1
        assert [type(e) for e in counting.events] == [JobStartedEvent, JobStartedEvent]


async def test_plain_callables_sync_and_async_observe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A plain function observes; an awaitable it returns is awaited; the same bound method counts once (BUS-04)."""
    seen_sync: list[JobEvent] = []
    seen_async: list[JobEvent] = []

    async def async_observer(event: JobEvent) -> None:
        await trio.sleep(1)
        seen_async.append(event)

    class Holder:
        def __init__(self) -> None:
            self.seen: list[JobEvent] = []

        def on(self, event: JobEvent) -> None:
            self.seen.append(event)

    holder = Holder()
    async with running_bus() as (bus, _):
        bus.subscribe(seen_sync.append)
        bus.subscribe(async_observer, event_type=JobStartedEvent)
        bus.subscribe(holder.on)
        assert bus.subscribe(holder.on).id == NOOP_SUBSCRIPTION_ID
        event = started()
        bus.publish(event)
        await trio.sleep(2)
        assert seen_sync == [event]
        assert seen_async == [event]
        assert holder.seen == [event]


async def test_subscribe_refuses_bad_input(autojump_clock: trio.testing.MockClock) -> None:
    """Bad input: the observer, event type, workflow id, job class and capacity are checked."""
    with pytest.raises(ValueError, match="queue_capacity"):
        MessageBus(queue_capacity=0)
    async with running_bus() as (bus, _):
        with pytest.raises(TypeError, match="observer must be a JobObserver or a callable"):
            bus.subscribe(42)  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="event_type must be a JobEvent class"):
            bus.subscribe(print, event_type=str)  # type: ignore[type-var]
        with pytest.raises(ValueError, match="workflow_id"):
            bus.subscribe(print, workflow_id="")
        with pytest.raises(TypeError, match="job_class"):
            bus.subscribe(print, job_class=3)  # type: ignore[call-overload]
        assert bus.subscriptions == ()


# -- lifecycle -----------------------------------------------------------------------------


async def test_messages_before_start_or_after_stop_are_dropped_and_a_second_start_is_a_noop(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """BUS-05: events outside start..stop are dropped, not deferred; a second start is a no-op."""
    bus = MessageBus()
    observer = Recorder()
    bus.subscribe(observer)
    bus.publish(started(1))  # before start: dropped
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        with caplog.at_level(logging.WARNING, logger=BUS_LOGGER):
            await nursery.start(bus.run)
        assert "second start is a no-op" in caplog.text
        assert bus.is_running
        bus.publish(started(2))
        await bus.stop()
        assert not is_running(bus)
        bus.publish(started(3))  # after stop: dropped silently
    assert [e.attempt for e in observer.events] == [2]  # type: ignore[attr-defined]


async def test_stop_delivers_what_was_queued_before_it_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-06: stop() delivers everything queued before it: 10 events at 50 ms each all arrive."""
    async with running_bus() as (bus, _):
        observer = Recorder(delay=0.05)
        bus.subscribe(observer)
        for i in range(10):
            bus.publish(progress(i))
        before = trio.current_time()
        await bus.stop()
        assert len(observer.events) == 10
        assert trio.current_time() - before == pytest.approx(0.5)


async def test_stop_bounds_a_wedged_observer_and_drops_its_rest(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """BUS-06: each consumer gets up to 5 s to drain; after that it is interrupted and the rest dropped."""
    assert DRAIN_TIMEOUT == 5.0
    async with running_bus() as (bus, _):
        wedged = Recorder(delay=1_000_000)
        steady = Recorder(delay=1.0)
        bus.subscribe(wedged)
        bus.subscribe(steady)
        for i in range(3):
            bus.publish(progress(i))
        before = trio.current_time()
        with caplog.at_level(logging.WARNING, logger=BUS_LOGGER):
            await bus.stop()
        assert trio.current_time() - before == pytest.approx(5.0)
        assert wedged.events == []
        assert len(steady.events) == 3, "a normally paced backlog is delivered whole"
        assert "did not drain" in caplog.text


async def test_unsubscribe_never_blocks_and_the_backlog_is_still_delivered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-07: unsubscribe returns at once while the observer is blocked; the 10 queued arrive, later ones do not."""
    async with running_bus() as (bus, _):
        gate = trio.Event()
        observer = Recorder(gate=gate)
        subscription = bus.subscribe(observer)
        for i in range(10):
            bus.publish(progress(i))
        await settle()
        before = trio.current_time()
        subscription.unsubscribe()
        assert trio.current_time() == before
        assert not subscription.is_active
        assert subscription.backlog == 9, "one is in the observer's hands"
        for i in range(10, 15):
            bus.publish(progress(i))
        subscription.unsubscribe()  # a second call is harmless
        gate.set()
        await settle()
        assert [e.payload for e in observer.events] == list(range(10))  # type: ignore[attr-defined]
        assert bus.subscriptions == ()


async def test_stop_and_subscribe_refuse_the_wrong_lifecycle_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-08: stop() on a never-started bus or a second time raises; so does subscribe while stopping or stopped."""
    never_started = MessageBus()
    with pytest.raises(RuntimeError, match="never started"):
        await never_started.stop()

    bus = MessageBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        bus.subscribe(Recorder(delay=1.0))
        bus.publish(started())
        nursery.start_soon(bus.stop)
        await settle()  # stop() is now draining the slow observer
        with pytest.raises(RuntimeError, match="stopping"):
            bus.subscribe(Recorder())
        with pytest.raises(RuntimeError, match="already stopping"):
            await bus.stop()
    with pytest.raises(RuntimeError, match="already stopped"):
        await bus.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        bus.subscribe(Recorder())


async def test_a_throwing_observer_is_logged_and_keeps_receiving(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """BUS-09: an observer that raises is logged and gets later events; a raising predicate rejects only that event."""

    class Flaky(Recorder):
        async def on_event(self, event: JobEvent) -> None:
            if isinstance(event, JobProgressEvent) and event.payload == 0:
                raise ValueError("observer bug")
            await super().on_event(event)

    def picky(event: JobEvent) -> bool:
        if isinstance(event, JobProgressEvent) and event.payload == 1:
            raise KeyError("predicate bug")
        return True

    async with running_bus() as (bus, _):
        flaky, filtered = Flaky(), Recorder()
        bus.subscribe(flaky)
        bus.subscribe(filtered, predicate=picky)
        with caplog.at_level(logging.ERROR, logger=BUS_LOGGER):
            for i in range(3):
                bus.publish(progress(i))
            await settle()
        assert [e.payload for e in flaky.events] == [1, 2]  # type: ignore[attr-defined]
        assert [e.payload for e in filtered.events] == [0, 2]  # type: ignore[attr-defined]
        assert "observer bug" in caplog.text
        assert "predicate bug" in caplog.text


async def test_stale_subscriptions_are_reaped_and_stop_receiving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-10: cleanup_stale_subscriptions() removes stale observers and returns the count; a sweep runs every 60 s."""

    class Expiring(Recorder):
        stale = False

        def is_stale(self) -> bool:
            return self.stale

    assert SWEEP_INTERVAL == 60.0
    async with running_bus() as (bus, _):
        start = trio.current_time()
        manual, swept, keeper = Expiring(), Expiring(), Expiring()
        bus.subscribe(manual)
        bus.subscribe(keeper)
        manual.stale = True
        assert bus.cleanup_stale_subscriptions() == 1
        bus.publish(started())
        await settle()
        assert manual.events == []
        assert len(keeper.events) == 1

        swept_subscription = bus.subscribe(swept)
        swept.stale = True
        await trio.sleep_until(start + SWEEP_INTERVAL - 0.001)
        assert swept_subscription.is_active
        await trio.sleep_until(start + SWEEP_INTERVAL + 0.001)
        assert not is_active(swept_subscription)
        bus.publish(started(2))
        await settle()
        assert swept.events == []
        assert len(keeper.events) == 2


async def test_the_sweep_keeps_no_timer_while_no_observer_can_go_stale(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-10: with only observers that can never report stale, the sweep keeps no timer, so a
    program under an autojump clock that waits on a worker thread does not spin the virtual
    clock from sweep to sweep (holding the GIL from the thread it waits on). Once an observer
    that can go stale subscribes, sweeps resume on the bus's 60 s cadence."""

    class Expiring(Recorder):
        stale = False

        def is_stale(self) -> bool:
            return self.stale

    async with running_bus() as (bus, _):
        start = trio.current_time()
        bus.subscribe(Recorder())
        await trio.to_thread.run_sync(lambda: None)
        await settle()
        assert trio.current_time() == start, "nothing but the sweep's timer could move the clock"

        expiring = Expiring()
        subscription = bus.subscribe(expiring)
        expiring.stale = True
        await trio.sleep_until(start + SWEEP_INTERVAL - 0.001)
        assert subscription.is_active
        await trio.sleep_until(start + SWEEP_INTERVAL + 0.001)
        assert not is_active(subscription)


async def test_each_queue_is_bounded_and_overflow_is_dropped_with_an_error(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """BUS-11: a subscription queue holds at most its capacity (1,000,000 by default); overflow is dropped with an error log."""
    assert QUEUE_CAPACITY == 1_000_000
    assert MessageBus().queue_capacity == 1_000_000
    async with running_bus(queue_capacity=5) as (bus, _):
        gate = trio.Event()
        observer = Recorder(gate=gate)
        subscription = bus.subscribe(observer)
        bus.publish(progress(0))
        await settle()  # the observer holds event 0, blocked on its gate
        with caplog.at_level(logging.ERROR, logger=BUS_LOGGER):
            for i in range(1, 11):
                bus.publish(progress(i))
        assert subscription.backlog == 5
        assert caplog.text.count("is full") == 5
        gate.set()
        await settle()
        assert [e.payload for e in observer.events] == [0, 1, 2, 3, 4, 5]  # type: ignore[attr-defined]


async def test_subscriptions_made_before_start_deliver_once_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-05: subscribing before start is allowed; delivery begins with the start."""
    bus = MessageBus()
    observer = Recorder()
    subscription = bus.subscribe(observer)
    assert isinstance(subscription, Subscription)
    assert bus.subscriptions == (subscription,)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        bus.publish(started())
        await bus.stop()
    assert len(observer.events) == 1


async def test_a_bus_cancelled_from_outside_ends_stopped_and_publish_stays_safe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-05: once its nursery is cancelled the bus is stopped; publishing is dropped, never an error."""
    bus = MessageBus()
    observer = Recorder(delay=1_000)
    bus.subscribe(observer)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        bus.publish(started())
        await settle()
        nursery.cancel_scope.cancel()
    assert not is_running(bus)
    bus.publish(started(2))
    assert observer.events == []
    with pytest.raises(RuntimeError, match="already stopped"):
        await bus.stop()


async def test_open_message_bus_runs_and_stops_the_bus(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """BUS-06: leaving the block stops the bus, delivering what was published."""
    observer = Recorder(delay=0.1)
    async with open_message_bus() as bus:
        assert bus.is_running
        bus.subscribe(observer)
        for i in range(3):
            bus.publish(progress(i))
    assert not is_running(bus)
    assert len(observer.events) == 3


# -- the workflow observer -----------------------------------------------------------------


class Watcher(AbstractWorkflowObserver[JobEvent]):
    def __init__(self, workflow_id: str, inactivity_timeout: float | None = None) -> None:
        super().__init__(workflow_id, inactivity_timeout)
        self.events: list[JobEvent] = []
        self.cleaned = 0

    async def handle_event(self, event: JobEvent) -> None:
        self.events.append(event)

    def on_cleanup(self) -> None:
        self.cleaned += 1


async def test_workflow_observer_filters_and_lets_go_when_the_workflow_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-34: AbstractWorkflowObserver filters by workflow and unsubscribes itself on a WorkflowTerminationEvent."""
    async with running_bus() as (bus, _):
        watcher = Watcher("wf-a")
        subscription = bus.subscribe(watcher)
        assert watcher.subscription is subscription
        bus.publish(started(workflow_id="wf-b"))
        bus.publish(scheduler_event())
        bus.publish(started(workflow_id="wf-a"))
        end = WorkflowCompleteEvent(snapshot=snap("wf-a"))
        bus.publish(end)
        await settle()
        assert [type(e) for e in watcher.events] == [JobStartedEvent, WorkflowCompleteEvent]
        assert not subscription.is_active
        assert watcher.cleaned == 1
        bus.publish(started(2, workflow_id="wf-a"))
        await settle()
        assert watcher.events[-1] is end


async def test_workflow_observer_reports_stale_after_its_inactivity_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-34: stale once the inactivity timeout passes with no event; an event resets the clock; the sweep reaps it (BUS-10)."""
    async with running_bus() as (bus, _):
        start = trio.current_time()
        watcher = Watcher("wf-a", inactivity_timeout=30.0)
        timeless = Watcher("wf-a")
        subscription = bus.subscribe(watcher)
        bus.subscribe(timeless)
        await trio.sleep_until(start + 20)
        bus.publish(started(workflow_id="wf-a"))
        await settle()
        assert watcher.last_event_time == start + 20
        await trio.sleep_until(start + 50)
        assert not watcher.is_stale(), "exactly the timeout is not yet stale"
        await trio.sleep_until(start + 50.5)
        assert watcher.is_stale()
        assert not timeless.is_stale()
        await trio.sleep_until(start + SWEEP_INTERVAL + 1)
        assert not subscription.is_active
        assert len(bus.subscriptions) == 1


def test_workflow_observer_refuses_bad_arguments() -> None:
    """Bad input: a workflow id and a positive timeout are required."""
    with pytest.raises(ValueError, match="workflow_id"):
        Watcher("")
    with pytest.raises(ValueError, match="inactivity_timeout"):
        Watcher("wf", inactivity_timeout=0)
    with pytest.raises(TypeError, match="inactivity_timeout"):
        Watcher("wf", inactivity_timeout="5")  # type: ignore[arg-type]
