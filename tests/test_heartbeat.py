"""Heartbeats through a running dispatcher (HB-01..12, HB-17, HB-18) and the Stethoscope
(OBS-33), in virtual time.

Every fire is a submission through the door, so these tests watch what the bus tells (the
heartbeat events, the fired jobs' own events) and what the fired jobs saw. Instants are
``heartbeat_now()`` values: wall-clock seconds on trio's clock, which the autojump clock moves.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import GuardrailError, NucleoSystemError
from nucleo_trio.guardrails import Scoped, ScopeGuard, TenantScope, TenantScoped
from nucleo_trio.heartbeat import (
    META_HEARTBEAT_ID,
    CancelHeartbeat,
    ConversationCarrier,
    FixedInterval,
    Heartbeat,
    HeartbeatFired,
    HeartbeatFireFailed,
    HeartbeatRebound,
    HeartbeatRequested,
    HeartbeatScheduled,
    InMemoryHeartbeatStore,
    ScheduleHeartbeat,
    Stethoscope,
    format_instant,
    heartbeat_now,
)
from nucleo_trio.jobs import Identifiable, JobContext, Orchestrator, Tool, workflow

from .conftest import Recorder, settle
from .test_scope import RegionScope


@attrs.frozen
class Run:
    """What one fired job saw when it ran."""

    job_id: str
    user_id: str
    at: float
    conversation_id: str | None = None
    input: Any = None
    guard: ScopeGuard | None = None


RUNS: list[Run] = []


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()


class Beat(Tool[str]):
    """The plain fired job: notes who it ran for and when."""

    async def execute(self, context: JobContext) -> str:
        RUNS.append(Run(self.job_id, context.user_id, trio.current_time()))
        return "beat"


class Resume(Tool[str], ConversationCarrier):
    """Takes over a conversation, as a thinker does."""

    conversation_id: str | None = None

    def set_conversation_id(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id

    async def execute(self, context: JobContext) -> str:
        RUNS.append(Run(self.job_id, context.user_id, trio.current_time(), self.conversation_id))
        return "resumed"


class LookAlike(Tool[str]):
    """Has a setter of the carrier's name, but never claims to adopt a conversation."""

    def set_conversation_id(self, conversation_id: str) -> None:
        raise AssertionError("a heartbeat must not reach a look-alike setter")

    async def execute(self, context: JobContext) -> str:
        RUNS.append(Run(self.job_id, context.user_id, trio.current_time()))
        return "should not run"


class Greet(Tool[str]):
    """Takes a typed input: a name."""

    input: str | None = None

    def set_input(self, name: str) -> None:
        self.input = name

    async def execute(self, context: JobContext) -> str:
        RUNS.append(Run(self.job_id, context.user_id, trio.current_time(), input=self.input))
        return f"hello {self.input}"


class NeedsMore(Tool[str]):
    """Cannot be built from a parent identity alone."""

    def __init__(self, parent: Identifiable, extra: str) -> None:
        super().__init__(parent)

    async def execute(self, context: JobContext) -> str:
        return "never"


@attrs.frozen
class Claim(TenantScoped):
    tenant_id: str


class Bill(Tool[str]):
    """Its input claims a tenant, which the door judges against the captured guard."""

    input: Claim | None = None

    def set_input(self, claim: Claim) -> None:
        self.input = claim

    async def execute(self, context: JobContext) -> str:
        assert self.input is not None
        RUNS.append(Run(self.job_id, context.user_id, trio.current_time(), input=self.input))
        return f"billed {self.input.tenant_id}"


class RegionalDesk(Orchestrator[str], Scoped):
    """A fired orchestrator with a scope of its own: the door merges it into what it seals."""

    def scope(self) -> RegionScope:
        return RegionScope("emea")

    async def execute(self, context: JobContext) -> str:
        RUNS.append(
            Run(self.job_id, context.user_id, trio.current_time(), guard=context.scope_guard)
        )
        return "desk"


class Planner(Orchestrator[str]):
    """Schedules (or cancels) through its own publish."""

    requests: ClassVar[list[object]] = []

    async def execute(self, context: JobContext) -> str:
        for request in Planner.requests:
            context.publish(request)
        return "planned"


class Plain(Tool[str]):
    """A tool that tries to schedule: only orchestrators may."""

    async def execute(self, context: JobContext) -> str:
        context.publish(ScheduleHeartbeat(Beat, "sneaky", heartbeat_now() + 1))
        return "scheduled?"


def fired(recorder: Recorder) -> list[HeartbeatFired]:
    return recorder.typed(HeartbeatFired)


def failed(recorder: Recorder) -> list[HeartbeatFireFailed]:
    return recorder.typed(HeartbeatFireFailed)


def store_of(dispatcher: JobDispatcher) -> InMemoryHeartbeatStore:
    assert dispatcher.heart is not None
    store = dispatcher.heart.store
    assert isinstance(store, InMemoryHeartbeatStore)
    return store


# -- the two mints -------------------------------------------------------------------------------


async def test_the_boot_entry_fires_under_the_named_principal(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-01, HB-12: schedule_heartbeat(spec, user) fires the job with the context's user equal
    to that principal; HeartbeatFired's job id is the run's own."""
    start = trio.current_time()
    minted = dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Beat, "boot", heartbeat_now() + 5), "alice"
    )
    assert minted.user_id == "alice" and minted.scope_guard == ScopeGuard()
    await trio.sleep(4.9)
    assert RUNS == []
    await trio.sleep(0.2)
    await settle()
    assert [(run.user_id, run.at - start) for run in RUNS] == [("alice", pytest.approx(5.0))]
    (event,) = fired(recorder)
    assert event.job_id == RUNS[0].job_id and event.heartbeat_id == "boot"
    completed = [e for e in recorder.typed(ev.JobCompletedEvent) if e.snapshot is not None]
    assert [e.snapshot.job_id for e in completed if e.snapshot] == [event.job_id]
    assert completed[0].snapshot is not None
    assert completed[0].metadata[META_HEARTBEAT_ID] == "boot"
    assert await store_of(dispatcher).inspect() == (), "a one-shot leaves the schedule"


async def test_the_boot_entry_demands_a_principal(dispatcher: JobDispatcher) -> None:
    """HB-01, HB-17: a blank principal is refused with ValueError; nothing is scheduled."""
    spec = ScheduleHeartbeat(Beat, "boot", heartbeat_now() + 5)
    for blank in ("", "  "):
        with pytest.raises(ValueError, match="needs the user the heartbeat runs for"):
            dispatcher.schedule_heartbeat(spec, blank)
    with pytest.raises(TypeError, match="scope_guard must be a ScopeGuard"):
        dispatcher.schedule_heartbeat(spec, "alice", scope_guard=TenantScope("a"))  # type: ignore[arg-type]
    await settle()
    assert await store_of(dispatcher).inspect() == ()


async def test_schedule_heartbeat_needs_a_running_dispatcher() -> None:
    """HB-01: before start there is no Heart to hand the heartbeat to."""
    idle = JobDispatcher()
    with pytest.raises(RuntimeError, match="the dispatcher is not running"):
        idle.schedule_heartbeat(ScheduleHeartbeat(Beat, "x", 1.0), "alice")


async def test_an_orchestrator_publish_is_captured_with_its_identity(
    dispatcher: JobDispatcher,
) -> None:
    """HB-03: a ScheduleHeartbeat published by an orchestrator is stored with that
    orchestrator's user and the very sealed ScopeGuard it carries."""
    Planner.requests = [ScheduleHeartbeat(Beat, "check-in", heartbeat_now() + 3600)]
    planner = Planner(workflow("bob", "plan"))
    planner.set_scope_guard(ScopeGuard(TenantScope("acme")))
    assert await dispatcher.submit(planner).result() == "planned"
    await settle()
    (stored,) = await store_of(dispatcher).inspect()
    assert stored.id == "check-in" and stored.user_id == "bob"
    assert stored.scope_guard is planner.scope_guard
    assert stored.scope_guard == ScopeGuard(TenantScope("acme"))


async def test_a_non_orchestrator_cannot_schedule(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-04: a plain job publishing a ScheduleHeartbeat fails, "Only orchestrators may
    schedule"; nothing reaches the Heart."""
    handle = dispatcher.submit(Plain(workflow("carol", "plain")))
    with pytest.raises(NucleoSystemError, match="Only orchestrators may schedule heartbeats"):
        await handle.result()
    await settle()
    assert await store_of(dispatcher).inspect() == ()
    assert recorder.typed(HeartbeatRequested) == []


# -- what a fire hands the job -------------------------------------------------------------------


async def test_the_conversation_rides_the_declared_carrier(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-02: a conversation id reaches the job only through
    ConversationCarrier.set_conversation_id, before it runs."""
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Resume, "resume", heartbeat_now() + 1, conversation_id="conv-7"), "dan"
    )
    await trio.sleep(2)
    assert [(run.user_id, run.conversation_id) for run in RUNS] == [("dan", "conv-7")]
    assert len(fired(recorder)) == 1 and failed(recorder) == []


async def test_a_conversation_on_a_non_carrier_fails_the_fire_loudly(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-02: a job class that does not implement ConversationCarrier, even with a setter of
    the same name, fails the fire naming ConversationCarrier; the job never runs."""
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(LookAlike, "resume", heartbeat_now() + 1, conversation_id="c"), "dan"
    )
    await trio.sleep(2)
    (failure,) = failed(recorder)
    assert "does not implement ConversationCarrier" in failure.message
    assert isinstance(failure.error, NucleoSystemError)
    assert RUNS == [] and fired(recorder) == []


async def test_the_input_rides_the_typed_setter_and_a_mismatch_fails_the_fire(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-05: the input is delivered through a typed set_input; a payload of the wrong type (an
    int for a str) fails the fire naming set_input; a job with no set_input fails too."""
    now = heartbeat_now()
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Greet, "ok", now + 1, input="world"), "eve")
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Greet, "typed", now + 2, input=42), "eve")
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "no-setter", now + 3, input="x"), "eve")
    await trio.sleep(4)
    assert [run.input for run in RUNS] == ["world"]
    mismatch, missing = failed(recorder)
    assert mismatch.heartbeat_id == "typed"
    assert "Greet.set_input takes str, but the heartbeat's input is 42 (int)" in mismatch.message
    assert missing.heartbeat_id == "no-setter" and "has no set_input(value)" in missing.message


async def test_a_failed_fire_keeps_the_recurrence_alive(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-06: a FixedInterval(1 s) heartbeat whose job has no (Identifiable) constructor fails
    every fire, and still fires at least twice within 20 s; its next slot stays scheduled."""
    first = heartbeat_now() + 1
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(NeedsMore, "broken", first, recurrence=FixedInterval(1)), "fay"
    )
    await trio.sleep(20)
    failures = failed(recorder)
    assert len(failures) >= 2
    assert "cannot build NeedsMore: a fired job class must be constructible" in failures[0].message
    assert [f.heartbeat.run_at - first for f in failures[:3]] == [0.0, 1.0, 2.0]
    (following,) = await store_of(dispatcher).inspect()
    assert following.id == "broken" and following.run_at > failures[-1].heartbeat.run_at


# -- scheduling, rebinding, cancelling -----------------------------------------------------------


async def test_scheduling_confirms_and_rebinding_audits(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-07, HB-12: scheduling publishes HeartbeatScheduled; the same id again publishes
    HeartbeatRebound whose displaced heartbeat is the previous one (its old instant); the most
    recent wins, so only the new instant fires."""
    now = heartbeat_now()
    first = dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "x", now + 10), "gus")
    await settle()
    second = dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "x", now + 20), "gus")
    await settle()
    (scheduled,) = recorder.typed(HeartbeatScheduled)
    (rebound,) = recorder.typed(HeartbeatRebound)
    assert scheduled.heartbeat is first
    assert rebound.heartbeat is second and rebound.displaced == first
    assert rebound.displaced.run_at == now + 10
    assert scheduled.message == f"Heartbeat scheduled: {first}"
    assert rebound.message == (
        f"Heartbeat rebound: x (was {format_instant(now + 10)}, now {format_instant(now + 20)})"
    )
    start = trio.current_time()
    await trio.sleep(30)
    assert [run.at - start for run in RUNS] == [pytest.approx(20.0)]
    (event,) = fired(recorder)
    assert event.heartbeat is second


async def test_cancel_on_the_bus_empties_the_slot(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher
) -> None:
    """HB-08: a CancelHeartbeat published on the bus removes the entry; cancelling an id that
    is not scheduled is no error."""
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Beat, "x", heartbeat_now() + 5, recurrence=FixedInterval(5)), "hal"
    )
    await settle()
    assert len(await store_of(dispatcher).inspect()) == 1
    dispatcher.bus.publish(CancelHeartbeat(heartbeat_id="x"))
    dispatcher.bus.publish(CancelHeartbeat(heartbeat_id="never-scheduled"))
    await settle()
    assert await store_of(dispatcher).inspect() == ()
    await trio.sleep(60)
    assert RUNS == []
    with pytest.raises(ValueError, match="non-blank heartbeat id"):
        CancelHeartbeat(heartbeat_id=" ")


async def test_an_orchestrator_cancels_through_its_own_publish(
    dispatcher: JobDispatcher,
) -> None:
    """HB-08: an orchestrator's context.publish(CancelHeartbeat(id)) removes the entry."""
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "x", heartbeat_now() + 60), "ivy")
    await settle()
    Planner.requests = [CancelHeartbeat(heartbeat_id="x")]
    await dispatcher.submit(Planner(workflow("ivy", "plan"))).result()
    await settle()
    assert await store_of(dispatcher).inspect() == ()


async def test_overdue_slots_of_a_recurrence_fire_back_to_back(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-09: with the anchor 3.5 s in the past and a 1 s period, the four overdue slots fire
    at once, back to back, and at least four fires arrive within 3 s; consecutive run
    instants are exactly 1 s apart counted from the anchor, not from now plus the period."""
    anchor = heartbeat_now() - 3.5
    start = trio.current_time()
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Beat, "catch-up", anchor, recurrence=FixedInterval(1)), "jo"
    )
    await trio.sleep(3)
    events = fired(recorder)
    assert len(events) >= 4
    assert [event.heartbeat.run_at - anchor for event in events] == [0, 1, 2, 3, 4, 5, 6]
    assert [round(run.at - start, 6) for run in RUNS] == [0, 0, 0, 0, 0.5, 1.5, 2.5]
    (following,) = await store_of(dispatcher).inspect()
    assert following.run_at == anchor + 7


async def test_a_stopping_heart_drops_what_it_is_handed(
    dispatcher: JobDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    """HB-10: once the Heart is stopping it drops every request and cancellation it is handed,
    each with a warning, and the store stays empty."""
    heart = dispatcher.heart
    assert heart is not None and not heart.is_stopping
    heart.stop()
    assert heart.is_stopping
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.heartbeat"):
        minted = dispatcher.schedule_heartbeat(
            ScheduleHeartbeat(Beat, "late", heartbeat_now() + 1), "kim"
        )
        await settle()  # the bus hands the request over
        heart.hand(HeartbeatRequested(heartbeat=minted))
        heart.hand(CancelHeartbeat(heartbeat_id="late"))
    dropped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert dropped.count(f"the Heart is stopping; the request to schedule {minted} is dropped") == 2
    assert "the Heart is stopping; the cancellation of 'late' is dropped" in dropped
    assert await heart.store.inspect() == ()


async def test_the_hearts_four_notifications_render_their_messages_from_what_they_carry() -> None:
    """HB-12: "Heartbeat scheduled: <hb>", "Heartbeat rebound: <id> (was <old>, now <new>)",
    "Heartbeat fired: <id> -> job <jobId>", "Heartbeat fire failed: <id> - <failure>"; a
    request and a cancellation say nothing."""
    from nucleo_trio.heartbeat.records import _mint_from

    guard = ScopeGuard(TenantScope("acme"))
    old = _mint_from(
        ScheduleHeartbeat(Beat, "nightly", 0.0, recurrence=FixedInterval(86400)), "lee", guard
    )
    new = old.next(3600.0)
    assert str(old) == "nightly (Beat at 1970-01-01T00:00:00.000Z, every 86400 s, for lee)"
    assert HeartbeatScheduled(heartbeat=old).message == f"Heartbeat scheduled: {old}"
    assert HeartbeatRebound(heartbeat=new, displaced=old).message == (
        "Heartbeat rebound: nightly (was 1970-01-01T00:00:00.000Z, now 1970-01-01T01:00:00.000Z)"
    )
    assert HeartbeatFired(heartbeat=new, job_id="Beat-1").message == (
        "Heartbeat fired: nightly -> job Beat-1"
    )
    failure = HeartbeatFireFailed(heartbeat=new, error=ValueError("no such job"))
    assert failure.message == "Heartbeat fire failed: nightly - no such job"
    assert HeartbeatRequested(heartbeat=old).message is None
    assert CancelHeartbeat(heartbeat_id="nightly").message is None
    for event in (HeartbeatScheduled(heartbeat=old), CancelHeartbeat(heartbeat_id="x")):
        assert event.snapshot is None and ev.family_of(event) is ev.HeartbeatEvent
    conversing = _mint_from(
        ScheduleHeartbeat(Resume, "r", 0.0, conversation_id="c-1"), "lee", guard
    )
    assert str(conversing) == "r (Resume at 1970-01-01T00:00:00.000Z, for lee, conversation c-1)"


# -- the door ------------------------------------------------------------------------------------


async def test_a_fire_crosses_the_door_with_the_captured_guard_in_the_callers_seat(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-18: a fire is judged at the same door as a live submission with the captured guard as
    the caller's: an input claiming another tenant is refused there, one in scope passes, and a
    fired orchestrator seals the captured guard merged with its own scope."""
    now = heartbeat_now()
    acme = ScopeGuard(TenantScope("acme"))
    Planner.requests = [
        ScheduleHeartbeat(Bill, "wrong-tenant", now + 1, input=Claim("globex")),
        ScheduleHeartbeat(Bill, "right-tenant", now + 2, input=Claim("acme")),
        ScheduleHeartbeat(RegionalDesk, "desk", now + 3),
    ]
    planner = Planner(workflow("max", "plan"))
    planner.set_scope_guard(acme)
    await dispatcher.submit(planner).result()
    await trio.sleep(5)

    (refused,) = failed(recorder)
    assert refused.heartbeat_id == "wrong-tenant" and isinstance(refused.error, GuardrailError)
    assert "Scope mismatch" in refused.message and "globex" in refused.message
    assert [event.heartbeat_id for event in fired(recorder)] == ["right-tenant", "desk"]
    bill, desk = RUNS
    assert bill.input == Claim("acme") and bill.user_id == "max"
    assert desk.guard == ScopeGuard(TenantScope("acme"), RegionScope("emea"))
    assert type(store_of(dispatcher)) is InMemoryHeartbeatStore, "the default store"


async def test_a_fire_into_a_refusing_door_is_a_failed_fire_not_a_crash(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """HB-18: what the door refuses (here a job declaring resources with no timeout) is a
    HeartbeatFireFailed carrying the door's refusal; the Heart goes on beating."""
    from nucleo_trio.admission import CountingGate
    from nucleo_trio.jobs import JobRequirements

    class Untimed(Tool[str]):
        gate: ClassVar[CountingGate] = CountingGate("slots", 1)

        def __init__(self, parent: Identifiable) -> None:
            super().__init__(parent)
            self.timeout = None

        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(self.gate)

        async def execute(self, context: JobContext) -> str:
            return "never"

    now = heartbeat_now()
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Untimed, "untimed", now + 1), "ned")
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "after", now + 2), "ned")
    await trio.sleep(3)
    (refused,) = failed(recorder)
    assert "declares resources but no timeout" in refused.message
    assert [event.heartbeat_id for event in fired(recorder)] == ["after"]


# -- the stethoscope -----------------------------------------------------------------------------


class Audit(Stethoscope):
    """Overrides two hooks; the other four keep their no-op defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[str] = []

    async def on_scheduled(self, event: HeartbeatScheduled) -> None:
        self.heard.append(f"scheduled {event.heartbeat.id}")

    async def on_fired(self, event: HeartbeatFired) -> None:
        self.heard.append(f"fired {event.heartbeat_id}")


async def test_the_stethoscope_routes_the_six_events_to_their_hooks(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher
) -> None:
    """OBS-33: the Stethoscope routes the heartbeat events to hooks, and a hook not overridden
    does nothing; attach works once (a second attach raises), detach may be called again."""
    audit = Audit()
    audit.attach(dispatcher)
    assert audit.is_attached
    with pytest.raises(RuntimeError, match="already attached"):
        audit.attach(dispatcher.bus)
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "x", heartbeat_now() + 1), "ola")
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(NeedsMore, "y", heartbeat_now() + 1), "ola")
    dispatcher.bus.publish(CancelHeartbeat(heartbeat_id="z"))
    await trio.sleep(2)
    assert audit.heard == ["scheduled x", "scheduled y", "fired x"]

    audit.detach()
    audit.detach()
    assert not audit.is_attached
    with pytest.raises(RuntimeError, match="attaches once"):
        audit.attach(dispatcher)
    dispatcher.schedule_heartbeat(ScheduleHeartbeat(Beat, "w", heartbeat_now() + 1), "ola")
    await trio.sleep(2)
    assert audit.heard == ["scheduled x", "scheduled y", "fired x"]


async def test_a_bare_stethoscope_hears_all_six_and_does_nothing(
    autojump_clock: trio.testing.MockClock, dispatcher: JobDispatcher
) -> None:
    """OBS-33: every default hook is a no-op, whichever of the six events arrives."""
    from nucleo_trio.heartbeat.records import _mint_from

    heartbeat: Heartbeat = _mint_from(ScheduleHeartbeat(Beat, "x", 0.0), "pat", ScopeGuard())
    quiet = Stethoscope()
    for event in (
        HeartbeatRequested(heartbeat=heartbeat),
        CancelHeartbeat(heartbeat_id="x"),
        HeartbeatScheduled(heartbeat=heartbeat),
        HeartbeatRebound(heartbeat=heartbeat, displaced=heartbeat),
        HeartbeatFired(heartbeat=heartbeat, job_id="j"),
        HeartbeatFireFailed(heartbeat=heartbeat, error=RuntimeError("x")),
    ):
        assert await quiet.on_event(event) is None
    quiet.detach()  # never attached: harmless


async def test_the_hearts_subscription_does_not_make_job_events_worth_building(
    dispatcher: JobDispatcher,
) -> None:
    """HB-18: the Heart consumes the bus through a subscription of its own, but one that only
    takes heartbeat events, so the dispatcher still skips building job events nobody hears."""
    assert dispatcher.heart is not None
    assert len(dispatcher.bus.subscriptions) == 1, "the Heart's"
    assert not dispatcher.bus.has_listeners("some-workflow")
    assert not dispatcher.bus.has_listeners(None)
    subscription = dispatcher.bus.subscribe(lambda event: None)
    assert dispatcher.bus.has_listeners("some-workflow")
    subscription.unsubscribe()
    assert not dispatcher.bus.has_listeners("some-workflow")


async def test_the_boot_entry_is_closed_to_code_running_inside_a_job(
    dispatcher: JobDispatcher,
) -> None:
    """HB-01, HB-03: schedule_heartbeat names any user, so a job that reaches the dispatcher
    through its context cannot use it to schedule as someone else; it publishes instead."""

    class Impersonator(Orchestrator[str]):
        async def execute(self, context: JobContext) -> str:
            context.dispatcher.schedule_heartbeat(
                ScheduleHeartbeat(Beat, "as-root", heartbeat_now() + 1), "root"
            )
            return "impersonated"

    handle = dispatcher.submit(Impersonator(workflow("mallory", "imp")))
    with pytest.raises(NucleoSystemError, match="schedule_heartbeat is the boot and operator"):
        await handle.result()
    await settle()
    assert await store_of(dispatcher).inspect() == ()


async def test_the_heart_beats_on_two_tasks_of_the_dispatcher(dispatcher: JobDispatcher) -> None:
    """HB-18: the Heart runs on two tasks started with the dispatcher, one taking requests
    from the bus into the store, one firing what falls due; both end at shutdown."""

    def task_names() -> list[str]:
        names: list[str] = []
        stack = [trio.lowlevel.current_root_task()]
        while stack:
            task = stack.pop()
            names.append(task.name)
            stack.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
        return names

    assert {"heartbeat-intake", "heartbeat-firing"} <= set(task_names())
    await dispatcher.shutdown()
    await settle()
    assert not {"heartbeat-intake", "heartbeat-firing"} & set(task_names())


def test_the_heartbeat_package_exports_resolve() -> None:
    """Every name the heartbeat and observability packages export resolves."""
    import nucleo_trio.heartbeat as heartbeat
    import nucleo_trio.observability as observability

    for module in (heartbeat, observability):
        exported = module.__all__
        assert len(exported) == len(set(exported))
        assert [name for name in exported if not hasattr(module, name)] == []
