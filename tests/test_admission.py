"""The Admission monitor: the line, the evaluator, one attempt, faults, settlement (ADM-01..53)."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    AdmissionClosedError,
    CountingGate,
    Demand,
    Grant,
    LimiterEventType,
    LimiterIdentity,
    UnboundedMemory,
)
from nucleo_trio.errors import CancellationRequested, UncorrectableError
from nucleo_trio.jobs.snapshot import JobSnapshot

from .admission_doubles import FakeJob, MemoryDouble, Meter

# -- helpers; the shared doubles live in admission_doubles.py ----------------------------------


class Probe(CountingGate):
    """A counting gate that writes down every question it is asked."""

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self.calls: list[tuple[str, tuple[Any, ...], tuple[Any, ...]]] = []
        self.wake_installs: list[object] = []

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.calls.append(("fits", tuple(mine), tuple(reserved_ahead)))
        return super().fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.calls.append(("try_take", tuple(mine), tuple(reserved_ahead)))
        return super().try_take(mine, reserved_ahead)

    def give(self, amounts: Sequence[Any]) -> None:
        self.calls.append(("give", tuple(amounts), ()))
        super().give(amounts)

    def on_capacity_change(self, wake: Callable[[], None] | None) -> None:
        self.wake_installs.append(wake)
        super().on_capacity_change(wake)

    def asked(self, op: str = "fits") -> int:
        return sum(1 for call in self.calls if call[0] == op)


class FakeMemory(MemoryDouble):
    """A memory account driven by the test: latched or not, an optional pacing instant."""

    def __init__(self) -> None:
        self.latched = False
        self.ready_at: float | None = None  # while set and in the future, nothing fits
        self.calls: list[str] = []
        self.identity_reads = 0
        self.supplier: Callable[[], int] | None = None
        self.refuse_take = False

    def account_for(self, amount: Any) -> LimiterIdentity:
        self.identity_reads += 1
        return self

    def _open(self) -> bool:
        if self.latched:
            return False
        return self.ready_at is None or trio.current_time() >= self.ready_at

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.calls.append("fits")
        return self._open()

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.calls.append("try_take")
        return self._open() and not self.refuse_take

    def give(self, amounts: Sequence[Any]) -> None:
        self.calls.append("give")

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        self.calls.append("earliest_fit")
        return None if self.latched else self.ready_at

    def observe_held(self, supplier: Callable[[], int]) -> None:
        self.supplier = supplier

    def clear(self) -> None:
        self.latched = False
        self._capacity_changed()


class Events:
    """An emitter that keeps (limiter name, type, job, waiters, wait, reason, amount)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, LimiterEventType, str | None, int, float, str | None, Any]] = []

    def __call__(
        self,
        account: LimiterIdentity,
        snapshot: JobSnapshot | None,
        waiters: int,
        type: LimiterEventType,
        wait: float,
        reason: str | None,
        amount: Any,
    ) -> None:
        job = snapshot.job_id if snapshot is not None else None
        self.seen.append((account.limiter_name, type, job, waiters, wait, reason, amount))

    def of(self, job: str) -> list[tuple[str, LimiterEventType, str | None]]:
        return [(name, kind, reason) for name, kind, j, _, _, reason, _ in self.seen if j == job]


@asynccontextmanager
async def running(
    memory: Any = None, emit: Any = None, clock: Callable[[], float] | None = None
) -> AsyncIterator[tuple[Admission, trio.Nursery]]:
    async with trio.open_nursery() as nursery:
        if clock is None:
            admission = Admission(memory, emit=emit)
        else:
            admission = Admission(memory, emit=emit, clock=clock)
        await nursery.start(admission.run)
        try:
            yield admission, nursery
        finally:
            admission.stop()


class Parked:
    """One admit call running in its own task, under its own cancel scope."""

    def __init__(self, admission: Admission, demand: Demand, job: FakeJob | None) -> None:
        self.admission, self.demand, self.job = admission, demand, job
        self.grant: Grant | None = None
        self.error: BaseException | None = None
        self.granted_at: float | None = None
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            try:
                self.grant = await self.admission.admit(self.demand, self.job)
                self.granted_at = trio.current_time()
            except Exception as exc:  # noqa: BLE001 - recorded for the test to inspect
                self.error = exc

    @property
    def interrupted(self) -> bool:
        return self.scope.cancelled_caught


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def park(
    nursery: trio.Nursery, admission: Admission, demand: Demand, job: FakeJob | str | None
) -> Parked:
    parked = Parked(admission, demand, FakeJob(job) if isinstance(job, str) else job)
    nursery.start_soon(parked.run)
    await settle()
    return parked


def one(gate: CountingGate) -> Demand:
    return Demand().add(gate)


# --------------------------------------------------------------------------------------------
# Construction, start and stop
# --------------------------------------------------------------------------------------------


async def test_the_constructor_takes_the_memory_account_an_emitter_and_a_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-01: memory alone by default (an unbounded memory, trio's clock, no events); the
    emitter takes 7 arguments and the clock reads every instant."""
    assert isinstance(Admission().memory, UnboundedMemory)
    reads: list[float] = []

    def clock() -> float:
        reads.append(trio.current_time())
        return trio.current_time()

    events = Events()
    async with running(emit=events, clock=clock) as (admission, _):
        before = len(reads)
        grant = await admission.admit(one(CountingGate("slot", 1)), FakeJob("j"))
        assert len(reads) > before
        assert grant.wall_wait == 0.0
    assert events.seen == [("slot", LimiterEventType.GRANTED_IMMEDIATE, "j", 0, 0.0, None, 1)]
    with pytest.raises(TypeError, match="memory must be a RateLimiter"):
        Admission(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="emit must be callable"):
        Admission(emit=5)  # type: ignore[arg-type]


async def test_the_memory_identity_is_read_once_at_construction(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-02: memory.account_for(None) is read once, when the monitor is built."""
    memory = FakeMemory()
    admission = Admission(memory)
    assert memory.identity_reads == 1
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        for name in "abc":
            grant = await admission.admit(one(CountingGate("slot", 1)), FakeJob(name))
            admission.release(grant)
        admission.stop()
    assert memory.identity_reads == 1


async def test_start_wires_the_memory_account(autojump_clock: trio.abc.Clock) -> None:
    """ADM-03: run installs the wake on memory and hands it the count held on memory."""
    memory = FakeMemory()
    memory.latched = True
    async with running(memory) as (admission, nursery):
        assert memory._wake is not None
        assert memory.supplier is not None and memory.supplier() == 0
        parked = [
            await park(nursery, admission, one(CountingGate("s", 1)), f"j{i}") for i in range(3)
        ]
        assert memory.supplier() == 3
        memory.clear()  # the installed wake runs the evaluator
        await settle()
        assert all(p.grant is not None for p in parked)
        assert memory.supplier() == 0


async def test_a_second_start_is_refused(autojump_clock: trio.abc.Clock) -> None:
    """ADM-04: a second run raises RuntimeError("Admission already started")."""
    async with running() as (admission, _):
        with pytest.raises(RuntimeError, match="Admission already started"):
            await admission.run()


async def test_stop_refuses_every_parked_waiter_and_every_later_admit(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-05, ADM-06, ADM-07: stop drains the line with `shutdown` (REJECTED on every held
    account), clears every wired wake, ends the evaluator; later admits are refused too."""
    gate = Probe("slot", 1)
    memory = FakeMemory()
    events = Events()
    admission = Admission(memory, emit=events)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        holder = await admission.admit(one(gate), FakeJob("holder"))
        parked = [await park(nursery, admission, one(gate), f"w{i}") for i in range(3)]
        assert admission.queue_size == 3
        admission.stop()
        await settle()
    # The evaluator returned (the nursery closed) and every waiter got the stopped-refusal.
    for p in parked:
        assert isinstance(p.error, AdmissionClosedError)
        assert "shutting down" in str(p.error)
        assert (gate.limiter_name, LimiterEventType.REJECTED, "shutdown") in events.of(p.job.name)  # type: ignore[union-attr]
    assert admission.queue_size == 0 and admission.is_stopped
    assert gate.wake_installs[-1] is None and memory._wake is None
    assert admission.held_on(gate) == 0
    with pytest.raises(AdmissionClosedError, match="dispatcher is shutting down"):
        await admission.admit(one(gate), FakeJob("late"))
    admission.release(holder)  # settlement still works after a stop
    assert gate.in_use == 0


async def test_queue_size_counts_the_parked(autojump_clock: trio.abc.Clock) -> None:
    """ADM-08: queue_size is the number of parked waiters."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        assert admission.queue_size == 0
        holder = await admission.admit(one(gate), FakeJob("holder"))
        assert admission.queue_size == 0
        for i in range(4):
            await park(nursery, admission, one(gate), f"w{i}")
            assert admission.queue_size == i + 1
        admission.release(holder)
        await settle()
        assert admission.queue_size == 3


# --------------------------------------------------------------------------------------------
# admit: the fast path
# --------------------------------------------------------------------------------------------


async def test_the_snapshot_is_taken_at_the_admit_call(autojump_clock: trio.abc.Clock) -> None:
    """ADM-09: the waiter holds the snapshot read when admit was called, not a later one."""
    gate = CountingGate("slot", 1)
    events = Events()
    snapshots: list[JobSnapshot | None] = []

    def emit(*args: Any) -> None:
        events(*args)
        snapshots.append(args[1])

    async with running(emit=emit) as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        job = FakeJob("j")
        await park(nursery, admission, one(gate), job)
        assert job.snapshots == 1
        admission.release(holder)
        await settle()
    granted = [s for s, e in zip(snapshots, events.seen, strict=True) if e[2] == "j"]
    assert granted and all(s is not None and s.attempt_number == 1 for s in granted)


async def test_the_wake_is_installed_once_per_limiter(autojump_clock: trio.abc.Clock) -> None:
    """ADM-10: each entry's limiter gets the wake once over the monitor's life."""
    gate = Probe("slot", 2)
    async with running() as (admission, _):
        for name in "abcd":
            grant = await admission.admit(Demand().add(gate).add(gate), FakeJob(name))
            admission.release(grant)
        assert len(gate.wake_installs) == 1 and callable(gate.wake_installs[0])


async def test_the_fast_path_grants_or_refuses_inline(autojump_clock: trio.abc.Clock) -> None:
    """ADM-11: with an empty line the attempt runs inline: a grant returns at once (even with
    no evaluator running) and a refusal raises at once."""
    admission = Admission()  # never started
    gate = CountingGate("slot", 1)
    grant = await admission.admit(one(gate), FakeJob("j"))
    assert gate.in_use == 1 and grant.wall_wait_ms == 0
    with pytest.raises(UncorrectableError, match="can never fit a gate of 1"):
        await admission.admit(Demand().add(gate).add(gate), FakeJob("too-big"))
    assert admission.queue_size == 0
    assert (await admission.admit(Demand(), FakeJob("orchestrator"))).is_empty


async def test_a_non_empty_line_enqueues_without_an_inline_attempt(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-12: behind a line, even a disjoint demand is enqueued untouched; the evaluator's
    next pass grants it while the line stays parked."""
    busy = CountingGate("busy", 1)
    free = Probe("free", 1)
    admission = Admission()
    async with trio.open_nursery() as nursery:
        holder = await admission.admit(one(busy), FakeJob("holder"))
        line = [await park(nursery, admission, one(busy), f"w{i}") for i in range(50)]
        disjoint = await park(nursery, admission, one(free), "disjoint")
        assert free.calls == [] and admission.queue_size == 51
        started = trio.current_time()
        await nursery.start(admission.run)
        await settle()
        assert disjoint.grant is not None and disjoint.granted_at is not None
        assert disjoint.granted_at - started < 2
        assert all(p.grant is None for p in line) and admission.queue_size == 50
        admission.stop()
    assert holder is not None


async def test_memory_short_on_the_fast_path_holds_on_memory_and_asks_nothing_else(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-13: the fast path's memory check fails: HELD on memory (amount 1), enqueued, and no
    entry account is consulted."""
    memory = FakeMemory()
    memory.latched = True
    gate = Probe("slot", 1)
    events = Events()
    async with running(memory, events) as (admission, nursery):
        parked = await park(nursery, admission, one(gate), "j")
        assert admission.queue_size == 1 and gate.calls == []
        assert events.seen == [("memory", LimiterEventType.HELD, "j", 1, 0.0, None, 1)]
        memory.clear()
        await settle()
        assert parked.grant is not None


async def test_enqueueing_registers_the_cancel_and_parks_holding_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-14: a parked waiter registered its cancel callback and holds nothing."""
    scarce = CountingGate("scarce", 1)
    plentiful = CountingGate("plentiful", 10)
    async with running() as (admission, nursery):
        holder = await admission.admit(one(scarce), FakeJob("holder"))
        job = FakeJob("j")
        await park(nursery, admission, Demand().add(plentiful).add(scarce), job)
        assert job.registrations == 1 and len(job._callbacks) == 1
        assert plentiful.in_use == 0
        admission.release(holder)
        await settle()
        assert plentiful.in_use == 1 and job._callbacks == {}


# --------------------------------------------------------------------------------------------
# Parking, interrupt and cancel
# --------------------------------------------------------------------------------------------


async def test_a_context_cancel_while_parked_withdraws_and_raises(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-15, ADM-16: a cancelled job leaves the line with CancellationRequested
    ("Job cancelled while waiting for admission") and REJECTED `cancelled` where it was held."""
    gate = CountingGate("slot", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        job = FakeJob("j")
        parked = await park(nursery, admission, one(gate), job)
        await trio.sleep(3)
        job.cancel()
        await settle()
        assert isinstance(parked.error, CancellationRequested)
        assert "Job cancelled while waiting for admission" in str(parked.error)
        assert admission.queue_size == 0 and admission.held_on(gate) == 0
        assert events.seen[-1] == ("slot", LimiterEventType.REJECTED, "j", 0, 3.0, "cancelled", 1)
        admission.release(holder)
        assert gate.in_use == 0


async def test_an_already_cancelled_job_never_parks(autojump_clock: trio.abc.Clock) -> None:
    """ADM-15: a job cancelled before it parks is withdrawn at once."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        await admission.admit(one(gate), FakeJob("holder"))
        job = FakeJob("j")
        job.cancel()
        parked = await park(nursery, admission, one(gate), job)
        assert isinstance(parked.error, CancellationRequested)
        assert admission.queue_size == 0


async def test_an_interrupt_removes_the_waiter_and_the_next_admit_proceeds(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-16: trio.Cancelled while parked (the interrupt) withdraws the waiter and propagates;
    the job behind it is not blocked by it."""
    gate = CountingGate("slot", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        first = await park(nursery, admission, one(gate), "first")
        second = await park(nursery, admission, one(gate), "second")
        first.scope.cancel()
        await settle()
        assert first.interrupted and first.grant is None and first.error is None
        assert admission.queue_size == 1
        assert ("slot", LimiterEventType.REJECTED, "cancelled") in events.of("first")
        admission.release(holder)
        await settle()
        assert second.grant is not None and gate.in_use == 1


async def test_an_interrupt_that_races_a_grant_rolls_the_grant_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-17: the grant lands and the interrupt arrives before the task resumes: the grant is
    rolled back, the cancellation still propagates, in use is back to 0 and the line empty."""
    gate = Probe("slot", 1)
    target: list[Parked] = []

    def emit(account: Any, snapshot: Any, waiters: int, kind: Any, *rest: Any) -> None:
        if kind is LimiterEventType.GRANTED_FROM_HOLD and snapshot.job_id == "j":
            target[0].scope.cancel()  # lands inside the granting pass

    async with running(emit=emit) as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        parked = await park(nursery, admission, one(gate), "j")
        target.append(parked)
        admission.release(holder)
        await settle()
        assert parked.interrupted and parked.grant is None
        assert gate.in_use == 0 and admission.queue_size == 0
        assert [c[0] for c in gate.calls].count("give") == 2  # the holder's, and the roll-back


async def test_a_pass_finds_cancelled_waiters_and_a_cancelled_head_stops_reserving(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-18: a cancel that wakes nobody is found by the next pass; the cancelled head leaves
    and stops reserving, so the waiter behind it is granted."""
    meter = Meter("tokens", 1000, 0, level=700)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        head_job = FakeJob("head", deaf=True)
        head = await park(nursery, admission, Demand().add(meter, 800), head_job)
        follower = await park(nursery, admission, Demand().add(meter, 500), "follower")
        assert head.grant is None and follower.grant is None  # 500 does not fit beside 800
        head_job.cancel()  # nobody is told
        await settle()
        assert head.error is None and follower.grant is None
        meter.give([0])  # any event runs a pass
        await settle()
        assert isinstance(head.error, CancellationRequested)
        assert ("tokens", LimiterEventType.REJECTED, "cancelled") in events.of("head")
        assert follower.grant is not None and meter.level == pytest.approx(200)


async def test_a_head_that_leaves_stops_reserving_at_once(autojump_clock: trio.abc.Clock) -> None:
    """ADM-18, ADM-37: a follower that fits alone but not beside the head is granted the moment
    the head is interrupted, with no give at all, even behind a new head that still waits."""
    meter = Meter("tokens", 1000, 0, level=700)
    busy = CountingGate("busy", 1)
    async with running() as (admission, nursery):
        await admission.admit(one(busy), FakeJob("holder"))
        head = await park(nursery, admission, Demand().add(meter, 800), "head")
        next_head = await park(nursery, admission, one(busy), "next-head")
        follower = await park(nursery, admission, Demand().add(meter, 500), "follower")
        assert follower.grant is None
        head.scope.cancel()
        await settle()
        assert head.interrupted and next_head.grant is None and follower.grant is not None
        assert meter.level == pytest.approx(200) and meter.gives == 0


# --------------------------------------------------------------------------------------------
# The evaluator and a pass
# --------------------------------------------------------------------------------------------


async def test_nothing_polls_a_line_waiting_on_events(autojump_clock: trio.abc.Clock) -> None:
    """ADM-19, ADM-20: with no deadline the evaluator sleeps until an event: hours of virtual
    time pass without a single question to the gate."""
    gate = Probe("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        parked = await park(nursery, admission, one(gate), "j")
        asked = len(gate.calls)
        await trio.sleep(7200)
        assert len(gate.calls) == asked and parked.grant is None
        admission.release(holder)  # an event
        await settle()
        assert parked.grant is not None


async def test_every_kind_of_event_wakes_the_evaluator(autojump_clock: trio.abc.Clock) -> None:
    """ADM-20: an arrival, a release, a roll-back and an account's own wake each run a pass."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        first = await admission.admit(one(gate), FakeJob("first"))
        a = await park(nursery, admission, one(gate), "a")
        admission.release(first)  # release
        await settle()
        assert a.grant is not None
        b = await park(nursery, admission, one(gate), "b")
        admission.rollback(a.grant)  # roll-back
        await settle()
        assert b.grant is not None
        c = await park(nursery, admission, one(gate), "c")
        gate.set_capacity(2)  # the account's own wake
        await settle()
        assert c.grant is not None
        other = CountingGate("other", 1)
        d = await park(nursery, admission, one(other), "d")  # an arrival behind nobody short
        assert d.grant is not None


async def test_one_now_serves_every_attempt_of_a_pass(autojump_clock: trio.abc.Clock) -> None:
    """ADM-21: a pass reads the clock once: with a clock that moves on every read, three
    waiters granted in one pass still share one grant instant (arrival + wall wait)."""
    reads: list[float] = []

    def clock() -> float:
        reads.append(trio.current_time() + 0.001 * (len(reads) + 1))
        return reads[-1]

    gate = CountingGate("slot", 3)
    async with running(clock=clock) as (admission, nursery):
        holder = await admission.admit(Demand().add(gate).add(gate).add(gate), FakeJob("holder"))
        arrivals: list[int] = []
        parked = []
        for i in range(3):
            arrivals.append(len(reads))  # admit's first read is the arrival instant
            parked.append(await park(nursery, admission, one(gate), f"w{i}"))
        admission.release(holder)
        await settle()
        instants = set()
        for index, p in zip(arrivals, parked, strict=True):
            assert p.grant is not None
            instants.add(round(reads[index] + p.grant.wall_wait, 9))
        assert len({round(reads[i], 9) for i in arrivals}) == 3  # three different arrivals
        assert len(instants) == 1  # one grant instant


async def test_the_head_asks_with_no_reservation_and_followers_with_the_heads_amounts(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-22, ADM-36: the head is asked with nothing set aside; a follower with the head's
    amounts on the same account; a follower of an account the head does not use, with none."""
    gate = Probe("slot", 4)
    other = Probe("other", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(gate).add(gate).add(gate), FakeJob("holder"))
        await admission.admit(one(other), FakeJob("other-holder"))
        await park(nursery, admission, Demand().add(gate).add(gate), "head")
        gate.calls.clear()
        await park(nursery, admission, Demand().add(gate), "follower")
        await park(nursery, admission, Demand().add(other), "elsewhere")
        assert ("fits", (None,), (None, None)) in gate.calls
        assert ("fits", (None,), ()) in other.calls
        gate.calls.clear()
        admission.release(holder)
        await settle()
        assert gate.calls[0][0] == "give"  # the holder's release, then the head is asked alone
        assert gate.calls[1:3] == [("fits", (None, None), ()), ("try_take", (None, None), ())]


async def test_one_give_cascades_grants_in_arrival_order(autojump_clock: trio.abc.Clock) -> None:
    """ADM-23: three holders of a 3-slot gate release one by one: waiters 0, 1, 2 are granted,
    exactly one per release."""
    gate = CountingGate("slot", 3)
    async with running() as (admission, nursery):
        holders = [await admission.admit(one(gate), FakeJob(f"h{i}")) for i in range(3)]
        parked = [await park(nursery, admission, one(gate), f"w{i}") for i in range(4)]
        for released, holder in enumerate(holders, start=1):
            admission.release(holder)
            await settle()
            assert [p.grant is not None for p in parked] == [i < released for i in range(4)]


async def test_one_give_grants_everyone_it_covers_in_one_pass(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-23: a give that covers several waiters grants them all, oldest first."""
    meter = Meter("tokens", 1000, 0, level=0)
    order: list[str] = []

    def emit(account: Any, snapshot: Any, waiters: int, kind: Any, *rest: Any) -> None:
        if kind is LimiterEventType.GRANTED_FROM_HOLD:
            order.append(snapshot.job_id)

    async with running(emit=emit) as (admission, nursery):
        for i in range(5):
            await park(nursery, admission, Demand().add(meter, 100), f"w{i}")
        meter.give([350])
        await settle()
        assert order == ["w0", "w1", "w2"] and admission.queue_size == 2


async def test_a_give_grants_every_follower_it_covers_while_the_head_waits_elsewhere(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-23, ADM-39: the head waits on another account; one release of two permits grants
    both followers queued on them in the same pass, in arrival order."""
    busy, pool = CountingGate("busy", 1), CountingGate("pool", 2)
    async with running() as (admission, nursery):
        await admission.admit(one(busy), FakeJob("busy-holder"))
        pool_holder = await admission.admit(Demand().add(pool).add(pool), FakeJob("pool-holder"))
        head = await park(nursery, admission, one(busy), "head")
        first = await park(nursery, admission, one(pool), "first")
        second = await park(nursery, admission, one(pool), "second")
        third = await park(nursery, admission, one(pool), "third")
        admission.release(pool_holder)
        await settle()
        assert first.granted_at == second.granted_at == trio.current_time()
        assert head.grant is None and third.grant is None and pool.in_use == 2


async def test_followers_with_one_demand_go_on_when_the_first_of_them_is_granted(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-23: two followers with the same demand wait on one account, then on the other; when
    both accounts have room for both, both are granted, the second right after the first."""
    busy, a, b = CountingGate("busy", 1), CountingGate("a", 2), CountingGate("b", 2)
    async with running() as (admission, nursery):
        await admission.admit(one(busy), FakeJob("busy-holder"))
        a_holder = await admission.admit(Demand().add(a).add(a), FakeJob("a-holder"))
        head = await park(nursery, admission, one(busy), "head")
        first = await park(nursery, admission, Demand().add(a).add(b), "first")
        second = await park(nursery, admission, Demand().add(a).add(b), "second")
        b_taker = await park(nursery, admission, Demand().add(b).add(b), "b-taker")
        assert b_taker.grant is not None  # disjoint from the head: it passes
        admission.release(a_holder)  # room on a, none on b
        await settle()
        assert first.grant is None and second.grant is None
        admission.release(b_taker.grant)
        await settle()
        assert first.granted_at == second.granted_at == trio.current_time()
        assert head.grant is None and (a.in_use, b.in_use) == (2, 2)


class RouteGate(CountingGate):
    """A gate whose amounts are routing records (dicts): one permit each, never hashable."""


async def test_unhashable_amounts_wait_and_are_granted_in_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-23: amounts that cannot be hashed (a routing record) still queue in arrival order,
    one grant per release."""
    gate = RouteGate("routes", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(gate, {"route": "a"}), FakeJob("holder"))
        parked = [
            await park(nursery, admission, Demand().add(gate, {"route": f"r{i}"}), f"w{i}")
            for i in range(3)
        ]
        admission.release(holder)
        await settle()
        assert [p.grant is not None for p in parked] == [True, False, False]
        assert parked[0].grant is not None
        admission.release(parked[0].grant)
        await settle()
        assert [p.grant is not None for p in parked] == [True, True, False]


async def test_the_next_deadline_is_the_earliest_among_the_waiters(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-24, ADM-52: time shortfalls are granted at their computed instants, earliest first,
    with no give at all."""
    fast = Meter("fast", 100, 100, level=0)  # 50 tokens: 0.5 s
    slow = Meter("slow", 100, 10, level=0)  # 30 tokens: 3 s
    async with running() as (admission, nursery):
        start = trio.current_time()
        a = await park(nursery, admission, Demand().add(slow, 30), "slow")
        b = await park(nursery, admission, Demand().add(fast, 50), "fast")
        await trio.sleep(10)
        assert b.granted_at == pytest.approx(start + 0.5)
        assert a.granted_at == pytest.approx(start + 3.0)
        assert fast.gives == 0 and slow.gives == 0


async def test_a_pegged_bucket_with_ten_thousand_waiters_grants_one_per_token(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-25, ADM-35: 10 000 waiters on a drained bucket hold nothing; giving 1 token grants
    exactly one, leaves 9 999 parked, and the grant lands at once."""
    meter = Meter("tokens", 10_000, 0, level=0)
    arrivals: list[int] = []
    granted: list[int] = []

    async def waiter(admission: Admission, number: int) -> None:
        arrivals.append(number)  # admit enqueues before its first real checkpoint
        try:
            await admission.admit(Demand().add(meter, 1))
        except AdmissionClosedError:
            return  # still parked when the test stops admission
        granted.append(number)

    async with running() as (admission, nursery):
        for number in range(10_000):
            nursery.start_soon(waiter, admission, number)
        await settle()
        assert admission.queue_size == 10_000 and meter.takes == 0
        started = trio.current_time()
        meter.give([1])
        await settle()
        assert granted == arrivals[:1] and admission.queue_size == 9_999
        assert trio.current_time() - started < 2
        admission.stop()


class CallCounter(CountingGate):
    """Counts the questions admission asks (fits and try_take)."""

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self.questions = 0

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.questions += 1
        return super().fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.questions += 1
        return super().try_take(mine, reserved_ahead)


async def _questions_per_grant(line: int, grants: int, meter: Meter | None = None) -> float:
    """Park ``line`` waiters on a one-slot gate (and ``meter``, 1 token each, when given), then
    release grants one by one; answer the gate questions asked per grant."""
    gate = CallCounter("slot", 1)
    out_send, out_receive = trio.open_memory_channel[Grant](grants + 1)
    demand = one(gate) if meter is None else Demand().add(meter, 1).add(gate)

    async def waiter(admission: Admission, name: str) -> None:
        try:
            grant = await admission.admit(demand)
        except AdmissionClosedError:
            return  # still parked when the test stops admission
        await out_send.send(grant)

    async with running() as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        for i in range(line):
            nursery.start_soon(waiter, admission, f"w{i}")
        await settle()
        assert admission.queue_size == line
        before = gate.questions
        current = holder
        for _ in range(grants):
            admission.release(current)
            current = await out_receive.receive()
        per_grant = (gate.questions - before) / grants
        admission.stop()
    return per_grant


async def test_the_cost_of_a_grant_does_not_grow_with_the_line(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-25: the number of account questions per grant is the same for a line of 100 and
    one of 2 000 (the evaluator re-asks only the waiters whose answer can have changed)."""
    short = await _questions_per_grant(100, 50)
    long = await _questions_per_grant(2_000, 50)
    assert short <= 4 and long <= 4
    assert long <= short * 1.1


class CountedMeter(Meter):
    """A meter that counts its fits questions into a shared tally."""

    def __init__(self, tally: list[int], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally = tally

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.tally[0] += 1
        return super().fits(mine, reserved_ahead)


class CountedGate(CountingGate):
    def __init__(self, tally: list[int], name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self.tally = tally

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self.tally[0] += 1
        return super().fits(mine, reserved_ahead)


async def _questions_per_grant_on_two_accounts(line: int, grants: int) -> float:
    """A line of jobs each needing a token and a slot: the meter refills on its own and the
    slots come back when jobs finish (after seeded random holds), so the two accounts take turns
    being the one that binds. Answers the fits questions asked per grant."""
    tally = [0]
    meter = CountedMeter(tally, "tokens", 3, 1.0, level=0)
    gate = CountedGate(tally, "slot", 2)
    holds = random.Random(5)
    finished = trio.Event()
    done = [0]

    async def job(admission: Admission) -> None:
        try:
            grant = await admission.admit(Demand().add(meter, 1).add(gate))
        except AdmissionClosedError:
            return  # still parked when the test stops admission
        await trio.sleep(holds.expovariate(0.5))
        admission.release(grant)
        done[0] += 1
        if done[0] == grants:
            finished.set()

    async with running() as (admission, nursery):
        for _ in range(line):
            nursery.start_soon(job, admission)
        await settle()
        before = tally[0]
        await finished.wait()
        per_grant = (tally[0] - before) / grants
        admission.stop()
    return per_grant


async def test_the_cost_stays_flat_when_two_accounts_take_turns_binding(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-25: jobs needing a token and a slot, with the meter refilling while the slots are
    taken and slots coming back while the meter is empty: a grant still costs the same number
    of questions for a line of 100 as for one of 2 000 (followers with one demand ask the same
    question, so only the first of them is asked)."""
    short = await _questions_per_grant_on_two_accounts(100, 60)
    long = await _questions_per_grant_on_two_accounts(2_000, 60)
    assert short <= 12 and long <= 12
    assert long <= short * 1.1


# --------------------------------------------------------------------------------------------
# One attempt
# --------------------------------------------------------------------------------------------


async def test_an_empty_demand_never_meets_the_memory_gate(autojump_clock: trio.abc.Clock) -> None:
    """ADM-26: an orchestrator's empty demand is not checked, taken or given back on memory,
    even under a latch and behind a line held on memory."""
    memory = FakeMemory()
    memory.latched = True
    async with running(memory) as (admission, nursery):
        grant = await admission.admit(Demand(), FakeJob("orchestrator"))
        assert memory.calls == []
        admission.release(grant)
        await park(nursery, admission, one(CountingGate("s", 1)), "tool")
        calls = len(memory.calls)
        behind = await park(nursery, admission, Demand(), "orchestrator-2")
        assert behind.grant is not None and behind.grant.is_empty
        admission.release(behind.grant)
        assert memory.calls[calls:].count("give") == 0


async def test_behind_a_head_short_on_memory_followers_are_held_on_memory_unasked(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-27: while the head's last attempt was memory-short, a resourceful follower is held
    on memory (HELD once) and its own accounts are not asked; it is granted after the head."""
    memory = FakeMemory()
    memory.latched = True
    head_gate = Probe("head-gate", 1)
    follower_gate = Probe("follower-gate", 1)
    events = Events()
    async with running(memory, events) as (admission, nursery):
        head = await park(nursery, admission, one(head_gate), "head")
        follower = await park(nursery, admission, one(follower_gate), "follower")
        assert follower_gate.calls == []
        assert events.of("follower") == [("memory", LimiterEventType.HELD, None)]
        assert admission.held_on(memory) == 2
        memory.clear()
        await settle()
        assert head.grant is not None and follower.grant is not None
        assert follower_gate.asked("try_take") == 1


async def test_accounts_freed_while_memory_was_closed_are_looked_at_when_it_opens(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-27: a give that lands while the head is short on memory helps nobody yet; when
    memory opens, the followers that give was for are asked again and granted."""
    memory = FakeMemory()
    x, y, pool = CountingGate("x", 1), CountingGate("y", 1), CountingGate("pool", 2)
    async with running(memory) as (admission, nursery):
        x_holder = await admission.admit(one(x), FakeJob("x-holder"))
        await admission.admit(one(y), FakeJob("y-holder"))  # never released
        pool_holder = await admission.admit(Demand().add(pool).add(pool), FakeJob("pool-holder"))
        head = await park(nursery, admission, one(x), "head")
        blocked = await park(nursery, admission, one(y), "blocked")
        first = await park(nursery, admission, one(pool), "first")
        second = await park(nursery, admission, one(pool), "second")
        memory.latched = True
        admission.release(x_holder)  # the head looks, and finds memory latched
        await settle()
        admission.release(pool_holder)  # freed while memory is closed: nobody may go
        await settle()
        assert head.grant is None and first.grant is None and second.grant is None
        await trio.sleep(1)
        memory.clear()
        await settle()
        assert head.grant is not None and blocked.grant is None
        assert first.grant is not None and second.grant is not None


async def test_memory_opening_with_the_clock_lets_the_line_behind_the_head_go(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-27, ADM-28: the head is short on memory until an instant (no wake); at that instant
    it finds memory open but its own gate busy, so the follower it held on memory goes."""
    memory = FakeMemory()
    busy, free = CountingGate("busy", 1), CountingGate("free", 1)
    async with running(memory) as (admission, nursery):
        await admission.admit(one(busy), FakeJob("holder"))
        memory.ready_at = 2.0
        head = await park(nursery, admission, one(busy), "head")
        follower = await park(nursery, admission, one(free), "follower")
        assert head.grant is None and follower.grant is None
        await trio.sleep(5)
        assert head.grant is None
        assert follower.granted_at == pytest.approx(2.0)


async def test_memory_opening_reaches_every_demand_held_on_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-27: behind a head short on memory, followers of different demands are held on
    memory; when it opens, one that is then short on its own gate does not hold back another
    whose account is free."""
    memory = FakeMemory()
    memory.latched = True
    busy, free = CountingGate("busy", 1), CountingGate("free", 1)
    async with running(memory) as (admission, nursery):
        await admission.admit(Demand(), FakeJob("orchestrator"))
        busy.try_take([None], [])  # held outside admission: only a give frees it
        head = await park(nursery, admission, one(busy), "head")
        same = await park(nursery, admission, one(busy), "same-gate")
        other = await park(nursery, admission, one(free), "other-gate")
        memory.clear()
        await settle()
        assert head.grant is None and same.grant is None
        assert other.grant is not None


async def test_memory_is_asked_before_any_entry_and_its_instant_is_the_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-28: memory.fits before any entry; short on memory, the waiter's deadline is
    memory.earliest_fit, and it is granted at that instant with no wake at all."""
    memory = FakeMemory()
    memory.ready_at = 4.0
    gate = Probe("slot", 1)
    async with running(memory) as (admission, nursery):
        parked = await park(nursery, admission, one(gate), "j")
        assert gate.calls == [] and memory.calls[:2] == ["fits", "earliest_fit"]
        await trio.sleep(10)
        assert parked.granted_at == pytest.approx(4.0)
        assert memory.calls[-2:] == ["fits", "try_take"] or "try_take" in memory.calls


async def test_every_entry_is_asked_even_after_a_short_one(autojump_clock: trio.abc.Clock) -> None:
    """ADM-29: a waiter short on its first entry still asks the second, so every short account
    holds it and every refusing account is found."""
    first, second = Probe("first", 1), Probe("second", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        await admission.admit(one(first), FakeJob("h1"))
        await admission.admit(one(second), FakeJob("h2"))
        await park(nursery, admission, Demand().add(first).add(second), "j")
        assert first.asked() >= 1 and second.asked() >= 1
        assert [e[0] for e in events.of("j")] == ["first", "second"]
        refusing = Probe("refusing", 1)
        parked = await park(
            nursery, admission, Demand().add(first).add(refusing).add(refusing), "k"
        )
        assert isinstance(parked.error, UncorrectableError)


async def test_the_deadline_is_the_latest_short_instant_or_none(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-30: short on two meters, the waiter goes when the later one fits; short on a meter
    and a gate, no instant helps and only the gate's give grants it."""
    quick = Meter("quick", 100, 100, level=0)  # 10 tokens in 0.1 s
    late = Meter("late", 100, 10, level=0)  # 10 tokens in 1 s
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        both = await park(nursery, admission, Demand().add(quick, 10).add(late, 10), "both")
        await trio.sleep(5)
        assert both.granted_at == pytest.approx(1.0)
        holder = await admission.admit(one(gate), FakeJob("holder"))
        mixed = await park(nursery, admission, Demand().add(quick, 10).add(gate), "mixed")
        await trio.sleep(60)
        assert mixed.grant is None
        admission.release(holder)
        await settle()
        assert mixed.grant is not None and quick.takes == 2


class Fickle(CountingGate):
    """Says it fits, then declines the take while ``decline`` is set."""

    decline = True

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if self.decline:
            return False
        return super().try_take(mine, reserved_ahead)


async def test_a_partial_take_is_undone_inside_the_attempt(autojump_clock: trio.abc.Clock) -> None:
    """ADM-31: the first entry is taken, the second declines: the first is given back at once,
    the waiter is HELD on the second, and nothing stays held while it waits."""
    first = Probe("first", 1)
    fickle = Fickle("fickle", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        parked = await park(nursery, admission, Demand().add(first).add(fickle), "j")
        assert first.in_use == 0 and fickle.in_use == 0
        assert [c[0] for c in first.calls][:3] == ["fits", "try_take", "give"]
        assert ("fickle", LimiterEventType.HELD, None) in events.of("j")
        fickle.decline = False
        fickle.set_capacity(2)  # a wake
        await settle()
        assert parked.grant is not None and first.in_use == 1 and fickle.in_use == 1


async def test_memory_is_taken_after_every_entry_and_a_refusal_gives_them_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-32: memory.try_take comes after the entries; when it declines, the entries are given
    back and the waiter is held on memory."""
    memory = FakeMemory()
    memory.refuse_take = True
    gate = Probe("slot", 1)
    events = Events()
    async with running(memory, events) as (admission, nursery):
        parked = await park(nursery, admission, one(gate), "j")
        assert gate.in_use == 0 and [c[0] for c in gate.calls][:3] == ["fits", "try_take", "give"]
        assert ("memory", LimiterEventType.HELD, None) in events.of("j")
        memory.refuse_take = False
        memory.clear()
        await settle()
        assert parked.grant is not None and gate.in_use == 1
        assert ("memory", LimiterEventType.GRANTED_FROM_HOLD, None) in events.of("j")


async def test_a_success_settles_the_waits_and_balances_the_counts(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-33: the wall wait is now - arrival, each held account's wait runs from its first
    refusal to the grant, and the held counts are back to zero."""
    first, second = CountingGate("first", 1), CountingGate("second", 1)
    meter = Meter("tokens", 100, 0, level=0)
    async with running() as (admission, nursery):
        h1 = await admission.admit(one(first), FakeJob("h1"))
        parked = await park(nursery, admission, Demand().add(first).add(second), "j")
        assert admission.held_on(first) == 1 and admission.held_on(second) == 0
        later = await park(nursery, admission, Demand().add(meter, 10), "later")
        await trio.sleep(1)
        admission.release(h1)
        await settle()
        assert parked.grant is not None
        assert parked.grant.wall_wait == pytest.approx(1.0)
        assert dict(parked.grant.wait_times_ms) == {"first": 1000}
        assert admission.held_on(first) == 0 and admission.held_on(second) == 0
        await trio.sleep(1.5)
        meter.give([10])
        await settle()
        assert later.grant is not None
        assert later.grant.wall_wait == pytest.approx(2.5)
        assert dict(later.grant.wait_times_ms) == {"tokens": 2500}
        assert admission.held_on(meter) == 0


async def test_a_metered_debit_lands_only_at_the_grant(autojump_clock: trio.abc.Clock) -> None:
    """ADM-34: while the job waits for a permit the bucket is untouched (level 1000, 0 takes);
    at the grant it drops by the amount (1000 to 600)."""
    meter = Meter("tokens", 1000, 0)
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(meter, 400).add(gate), "j")
        await trio.sleep(30)
        assert meter.level == 1000 and meter.takes == 0
        admission.release(holder)
        await settle()
        assert parked.grant is not None and meter.level == 600 and meter.takes == 1


async def test_a_waiter_short_on_one_account_holds_nothing_on_another(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-35: 1000 waiters on a drained bucket hold 0 of 1000 HTTP slots and each holds one
    after the refill; 20 waiters short on a scarce gate hold 0 of a plentiful one."""
    meter = Meter("tokens", 1000, 0, level=0)
    http = CountingGate("http", 1000)
    async with running() as (admission, nursery):
        parked = [
            Parked(admission, Demand().add(meter, 1).add(http), FakeJob(f"w{i}"))
            for i in range(1000)
        ]
        for p in parked:
            nursery.start_soon(p.run)
        await settle()
        assert http.in_use == 0
        meter.give([1000])
        await settle()
        assert http.in_use == 1000 and all(p.grant is not None for p in parked)
        scarce, plentiful = CountingGate("scarce", 1), CountingGate("plentiful", 100)
        await admission.admit(one(scarce), FakeJob("holder"))
        for i in range(20):
            await park(nursery, admission, Demand().add(plentiful).add(scarce), f"s{i}")
        assert plentiful.in_use == 0 and admission.queue_size == 20


async def test_a_waiter_that_fits_alone_but_not_beside_the_head_waits_and_is_never_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-37: the bucket holds 1000 and the head reserves 800 (short elsewhere); a follower
    asking 500 waits, is never refused, and is granted after the head."""
    meter = Meter("tokens", 1000, 0)
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        head = await park(nursery, admission, Demand().add(meter, 800).add(gate), "head")
        follower = await park(nursery, admission, Demand().add(meter, 500), "follower")
        await trio.sleep(5)
        assert follower.grant is None and follower.error is None
        admission.release(holder)
        await settle()
        assert head.grant is not None and follower.grant is None  # 200 left
        meter.give([300])
        await settle()
        assert follower.grant is not None


async def test_the_heads_reservation_blocks_followers_while_it_accumulates(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-38: refill 1000/s, head needs 600, five followers 300 each: at +350 ms nobody behind
    the head is granted; at +650 ms the head is, the followers still wait, then flow at the
    refill rate."""
    meter = Meter("tokens", 1000, 1000, level=0)
    async with running() as (admission, nursery):
        head = await park(nursery, admission, Demand().add(meter, 600), "head")
        followers = [
            await park(nursery, admission, Demand().add(meter, 300), f"f{i}") for i in range(5)
        ]
        await trio.sleep(0.35)
        assert head.grant is None and all(f.grant is None for f in followers)
        await trio.sleep(0.3)
        assert head.granted_at == pytest.approx(0.6)
        assert all(f.grant is None for f in followers)
        await trio.sleep(5)
        assert [f.granted_at for f in followers] == pytest.approx([0.9, 1.2, 1.5, 1.8, 2.1])


async def test_a_disjoint_demand_passes_a_short_head_at_the_first_pass(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-39: a demand that shares no account with the short head is granted at once."""
    busy, free = CountingGate("busy", 1), CountingGate("free", 1)
    async with running() as (admission, nursery):
        await admission.admit(one(busy), FakeJob("holder"))
        head = await park(nursery, admission, one(busy), "head")
        arrival = trio.current_time()
        disjoint = await park(nursery, admission, one(free), "disjoint")
        assert disjoint.granted_at == arrival and head.grant is None


class ProbeWindow(CountingGate):
    """A window whose circuit waits for one probe: only an asker with nothing reserved ahead
    (the head) may take it; a follower is refused (the elastic window's EW-19 shape)."""

    def __init__(self) -> None:
        super().__init__("window", 5)
        self.probing = True

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if self.probing and reserved_ahead:
            raise UncorrectableError("window: a single probe is allowed, and it is the head's")
        return super().fits(mine, reserved_ahead)


async def test_the_probe_belongs_to_the_head(autojump_clock: trio.abc.Clock) -> None:
    """ADM-40: a follower asking the window with a reservation ahead is refused; the head,
    asked with none, takes the probe."""
    window = ProbeWindow()
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        head = await park(nursery, admission, Demand().add(window).add(gate), "head")
        follower = await park(nursery, admission, Demand().add(window), "follower")
        assert isinstance(follower.error, UncorrectableError)
        assert "single probe" in str(follower.error)
        admission.release(holder)
        await settle()
        assert head.grant is not None and window.in_use == 1


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------


class Refusing(CountingGate):
    """An account that refuses everyone from fits (an open circuit)."""

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        raise UncorrectableError("circuit open: pick a different tool")


class Buggy(CountingGate):
    """An account with a bug in one of its questions."""

    def __init__(self, name: str, capacity: int, where: str) -> None:
        super().__init__(name, capacity)
        self.where = where
        self.bug = ZeroDivisionError("division by zero in the account")

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if self.where == "fits":
            raise self.bug
        return super().fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if self.where == "try_take":
            raise self.bug
        return super().try_take(mine, reserved_ahead)

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        if self.where == "earliest_fit":
            raise self.bug
        return None


async def test_an_account_refusing_from_fits_rejects_only_that_waiter(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-41, ADM-42: an LLM-readable refusal reaches the waiter as it is (circuit_blocked);
    what the attempt took is given back; the others go on."""
    gate = Probe("slot", 2)
    refusing = Refusing("refusing", 1)
    events = Events()
    async with running(emit=events) as (admission, nursery):
        holder = await admission.admit(one(gate), FakeJob("holder"))
        await park(nursery, admission, Demand().add(gate).add(gate), "head")
        parked = await park(nursery, admission, Demand().add(refusing), "refused")
        assert isinstance(parked.error, UncorrectableError)
        assert "pick a different tool" in str(parked.error)
        assert ("refusing", LimiterEventType.REJECTED, "circuit_blocked") in events.of("refused")
        admission.release(holder)
        await settle()
        assert admission.queue_size == 0


@pytest.mark.parametrize("where", ["fits", "try_take", "earliest_fit"])
async def test_an_account_bug_rejects_only_that_waiter_and_the_evaluator_survives(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """ADM-41, ADM-42, ADM-43: a bug in fits, try_take or earliest_fit refuses that waiter with
    UncorrectableError("<name> failed during admission: <msg>") caused by the bug (reason
    aborted, logged at error with its stack); takes are undone; others are still granted."""
    busy = CountingGate("busy", 1)
    taken_first = Probe("taken-first", 1)
    buggy = Buggy("buggy", 1, where)
    if where == "earliest_fit":
        buggy.try_take([None], [])  # full, so the waiter is short and asks earliest_fit
    events = Events()
    async with running(emit=events) as (admission, nursery):
        holder = await admission.admit(one(busy), FakeJob("holder"))
        behind = await park(nursery, admission, one(busy), "behind")
        with caplog.at_level(logging.ERROR, logger="nucleo_trio.admission"):
            victim = await park(nursery, admission, Demand().add(taken_first).add(buggy), "victim")
        assert isinstance(victim.error, UncorrectableError)
        assert str(victim.error) == "buggy failed during admission: division by zero in the account"
        assert victim.error.__cause__ is buggy.bug
        assert taken_first.in_use == 0
        assert ("buggy", LimiterEventType.REJECTED, "aborted") in events.of("victim")
        record = next(
            r for r in caplog.records if "buggy failed during admission" in r.getMessage()
        )
        assert record.levelno == logging.ERROR and record.exc_info is not None
        admission.release(holder)
        await settle()
        assert behind.grant is not None


class BrokenGive(CountingGate):
    def give(self, amounts: Sequence[Any]) -> None:
        raise RuntimeError("give broke")


async def test_a_defect_inside_a_pass_fails_every_parked_job_and_closes_admission(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """ADM-44: a give that throws during compensation is a defect: every parked waiter gets
    REJECTED aborted and UncorrectableError("Admission failed on an internal defect: ...")
    caused by the defect; every later admit too; logged at error once."""
    busy = CountingGate("busy", 1)
    broken = BrokenGive("broken", 1)
    fickle = Fickle("fickle", 1)
    events = Events()
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.admission"):
        async with running(emit=events) as (admission, nursery):
            await admission.admit(one(busy), FakeJob("holder"))
            parked = [await park(nursery, admission, one(busy), f"w{i}") for i in range(2)]
            culprit = await park(nursery, admission, Demand().add(broken).add(fickle), "culprit")
            for p in [*parked, culprit]:
                assert isinstance(p.error, UncorrectableError)
                assert str(p.error).startswith("Admission failed on an internal defect:")
            defect = parked[0].error.__cause__  # type: ignore[union-attr]
            assert isinstance(defect, RuntimeError) and str(defect) == "give broke"
            assert all(p.error.__cause__ is defect for p in [*parked, culprit])  # type: ignore[union-attr]
            assert ("busy", LimiterEventType.REJECTED, "aborted") in events.of("w0")
            assert admission.is_stopped and admission.queue_size == 0
            with pytest.raises(UncorrectableError, match="internal defect") as later:
                await admission.admit(one(CountingGate("fresh", 1)), FakeJob("late"))
            assert later.value.__cause__ is defect
    defects = [r for r in caplog.records if "internal defect" in r.getMessage()]
    assert len(defects) == 1 and defects[0].exc_info is not None


async def test_a_give_that_throws_at_release_reaches_the_caller_after_settling(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-45: the failing give propagates to release's caller; the grant is settled anyway and
    the other entries were given back."""
    broken = BrokenGive("broken", 1)
    gate = CountingGate("slot", 1)
    async with running() as (admission, _):
        grant = await admission.admit(Demand().add(broken).add(gate), FakeJob("j"))
        with pytest.raises(RuntimeError, match="give broke"):
            admission.release(grant)
        assert grant.is_settled and gate.in_use == 0
        admission.release(grant)  # settled: nothing happens, nothing raises


# --------------------------------------------------------------------------------------------
# Settlement
# --------------------------------------------------------------------------------------------


async def test_release_returns_only_release_accounts_and_rollback_everything(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-46, ADM-47, ADM-48, OBS-16: release gives back RELEASE entries only (the TIME
    meter keeps its debit), rollback every entry;
    both count as a completion for memory (give([])) and wake; RELEASED per entry given back,
    none for memory."""
    memory = FakeMemory()
    meter = Meter("tokens", 1000, 0)
    gate = CountingGate("slot", 1)
    events = Events()
    async with running(memory, events) as (admission, _):
        grant = await admission.admit(Demand().add(meter, 400).add(gate), FakeJob("a"))
        admission.release(grant)
        assert (meter.level, gate.in_use, meter.gives) == (600, 0, 0)
        assert memory.calls.count("give") == 1
        assert [e[:2] for e in events.seen if e[1] is LimiterEventType.RELEASED] == [
            ("slot", LimiterEventType.RELEASED)
        ]
        events.seen.clear()
        grant = await admission.admit(Demand().add(meter, 400).add(gate), FakeJob("b"))
        admission.rollback(grant)
        assert (meter.level, gate.in_use, meter.gives) == (600, 0, 1)
        assert memory.calls.count("give") == 2
        released = [(e[0], e[6]) for e in events.seen if e[1] is LimiterEventType.RELEASED]
        assert released == [("tokens", 400), ("slot", 1)]
        assert all(e[0] != "memory" for e in events.seen)


async def test_a_grant_settles_once(autojump_clock: trio.abc.Clock) -> None:
    """ADM-49, ADM-50: a second release, or a rollback after a release, does nothing: the slot
    goes back once, the meter refunds once (1 give in total) and stays at 600."""
    meter = Meter("tokens", 1000, 0)
    gate = CountingGate("slot", 1)
    events = Events()
    async with running(emit=events) as (admission, _):
        grant = await admission.admit(Demand().add(gate).add(meter, 400), FakeJob("a"))
        admission.release(grant)
        admission.release(grant)
        admission.rollback(grant)
        assert (gate.in_use, meter.level) == (0, 600)
        again = await admission.admit(Demand().add(gate).add(meter, 400), FakeJob("b"))
        assert meter.level == 200
        admission.rollback(again)
        admission.rollback(again)
        admission.release(again)
        assert (gate.in_use, meter.level, meter.gives) == (0, 600, 1)
        assert sum(1 for e in events.seen if e[1] is LimiterEventType.RELEASED) == 3


# --------------------------------------------------------------------------------------------
# Time shortfalls and raised caps
# --------------------------------------------------------------------------------------------


async def test_a_time_only_shortfall_is_granted_with_no_give(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-52: a drained meter (60 000 per minute) asked for 100 is granted at its computed
    deadline (100 ms), with no give at all: at least 50 ms and under 3 s."""
    meter = Meter("tokens", 60_000, 1000)
    async with running() as (admission, nursery):
        grant = await admission.admit(Demand().add(meter, 60_000), FakeJob("drain"))
        start = trio.current_time()
        parked = await park(nursery, admission, Demand().add(meter, 100), "j")
        await trio.sleep(5)
        assert parked.granted_at is not None
        waited = parked.granted_at - start
        assert 0.05 <= waited < 3 and waited == pytest.approx(0.1)
        assert meter.gives == 0
        assert grant is not None


async def test_a_cap_raised_through_set_config_wakes_and_grants(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-53: a drained meter where 500 tokens would take half a minute; raising its cap and
    rate wakes the evaluator and grants the waiter at once."""
    meter = Meter("tokens", 1000, 1000 / 60, level=0)
    async with running() as (admission, nursery):
        parked = await park(nursery, admission, Demand().add(meter, 500), "j")
        await trio.sleep(1)
        assert parked.grant is None
        meter.set_config(60_000_000, 1_000_000)
        await trio.sleep(4)
        assert parked.granted_at is not None and parked.granted_at - 1.0 < 0.01
