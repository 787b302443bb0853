"""Demand normalization and the Grant's bookkeeping (DG-01..10)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    CountingGate,
    Demand,
    DemandEntry,
    Grant,
    LimiterEventType,
    LimiterIdentity,
    SemaphoreLimiterStatus,
    units_of,
)

from .admission_doubles import FakeJob, MemoryDouble, Meter

# -- helpers ----------------------------------------------------------------------------------


class Latch(MemoryDouble):
    """A memory account that is short while latched; clearing it wakes admission."""

    def __init__(self) -> None:
        self.latched = False

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(100, 4 if self.latched else 50, None)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return not self.latched

    try_take = fits

    def give(self, amounts: Sequence[Any]) -> None:
        return None

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None

    def clear(self) -> None:
        self.latched = False
        self._capacity_changed()


@asynccontextmanager
async def running(
    memory: Any = None, emit: Any = None
) -> AsyncIterator[tuple[Admission, trio.Nursery]]:
    async with trio.open_nursery() as nursery:
        admission = Admission(memory, emit=emit)
        await nursery.start(admission.run)
        try:
            yield admission, nursery
        finally:
            admission.stop()


class Parked:
    """One admit call running in its own task."""

    def __init__(self, admission: Admission, demand: Demand, job: FakeJob | None) -> None:
        self.admission, self.demand, self.job = admission, demand, job
        self.grant: Grant | None = None
        self.error: BaseException | None = None

    async def run(self) -> None:
        try:
            self.grant = await self.admission.admit(self.demand, self.job)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to inspect
            self.error = exc


async def park(nursery: trio.Nursery, admission: Admission, demand: Demand, name: str) -> Parked:
    parked = Parked(admission, demand, FakeJob(name))
    nursery.start_soon(parked.run)
    await trio.testing.wait_all_tasks_blocked()
    return parked


# -- normalization ------------------------------------------------------------------------------


async def test_entries_keep_first_added_order_and_merge_by_account(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-01, DG-02: meter 100, slot, meter 50 gives [meter: (100, 50), slot]."""
    meter = Meter("meter", 1000, 0)
    slot = CountingGate("slot", 2)
    demand = Demand().add(meter, 100).add(slot).add(meter, 50)
    assert [(e.limiter, e.amounts) for e in demand.entries] == [(meter, (100, 50)), (slot, (None,))]
    assert demand.entries[0].key is meter
    assert len(demand) == 2


class Routed(CountingGate):
    """A limiter whose amounts route to one of two identities."""

    def __init__(self) -> None:
        super().__init__("routed", 10)
        self.left = CountingGate("left", 1)
        self.right = CountingGate("right", 1)

    def account_for(self, amount: Any) -> LimiterIdentity:
        return self.left if amount == "L" else self.right


def test_merging_needs_the_same_limiter_and_the_same_identity() -> None:
    """DG-01: the key is account_for(amount); a merge needs the same limiter and the same key."""
    routed = Routed()
    other = CountingGate("slot", 1)
    demand = Demand().add(routed, "L").add(routed, "R").add(routed, "L").add(other)
    entries = demand.entries
    assert [(e.key, e.amounts) for e in entries] == [
        (routed.left, ("L", "L")),
        (routed.right, ("R",)),
        (other, (None,)),
    ]
    # Two limiters that merely look alike are two accounts.
    twins = Demand().add(CountingGate("twin", 1)).add(CountingGate("twin", 1))
    assert len(twins.entries) == 2


def test_entries_and_amounts_are_read_only_views() -> None:
    """DG-03: entries and each entry's amounts cannot be changed; amounts may be None."""
    demand = Demand().add(CountingGate("slot", 2)).add(CountingGate("db", 1))
    entries = demand.entries
    assert isinstance(entries, tuple) and isinstance(entries[0].amounts, tuple)
    assert entries[0].amounts == (None,)
    with pytest.raises(AttributeError):
        entries.clear()  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        entries[0].amounts.clear()  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        entries[0].amounts = (1,)  # type: ignore[misc]
    before = demand.entries
    demand.add(CountingGate("later", 1))
    assert len(before) == 2 and len(demand.entries) == 3  # a view taken earlier never moves


def test_an_empty_demand_is_empty() -> None:
    """DG-04: an orchestrator's demand has no entries."""
    assert Demand().is_empty
    assert not Demand().add(CountingGate("slot", 1)).is_empty


def test_amounts_on_finds_the_same_account_by_identity() -> None:
    """DG-06: amounts_on(entry) is this demand's amounts on that key, or empty."""
    slot = CountingGate("slot", 3)
    meter_like = CountingGate("tokens", 5)
    head = Demand().add(slot).add(slot)
    follower = Demand().add(slot).add(meter_like)
    assert head.amounts_on(follower.entries[0]) == (None, None)
    assert head.amounts_on(follower.entries[1]) == ()
    stranger = DemandEntry(CountingGate("slot", 3), slot, (None,))
    assert head.amounts_on(stranger) == ()  # same key, different limiter instance


def test_bad_input_to_a_demand_is_named() -> None:
    """Adding something that is not an account is a TypeError that says what was wrong."""
    with pytest.raises(TypeError, match="limiter must be a RateLimiter, got NoneType"):
        Demand().add(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limiter must be a RateLimiter, got int"):
        Demand().add(5)  # type: ignore[arg-type]

    class Lost(CountingGate):
        def account_for(self, amount: Any) -> LimiterIdentity:
            return None  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"account_for\(None\) returned None"):
        Demand().add(Lost("lost", 1))


def test_units_add_numbers_and_count_everything_else_as_one() -> None:
    """EVT-13: [300, 300] is 600, three None are 3, an empty list is 0."""
    assert units_of([300, 300]) == 600
    assert units_of([None, None, None]) == 3
    assert units_of([]) == 0
    assert units_of(["route", 2]) == 3
    assert units_of([True]) == 1
    assert units_of([1.5, 1.5]) == 3 and isinstance(units_of([1.5, 1.5]), int)
    assert units_of([0.5]) == 0.5
    assert Demand().add(CountingGate("s", 3)).add(CountingGate("t", 3)).entries[0].units == 1


# -- grants ----------------------------------------------------------------------------------------


async def test_amounts_on_one_account_are_checked_together(autojump_clock: trio.abc.Clock) -> None:
    """DG-05: on a meter at 500, [300, 300] waits (500 < 600); give(100) grants it, level 0."""
    meter = Meter("meter", 1000, 0, level=500)
    async with running() as (admission, nursery):
        parked = await park(nursery, admission, Demand().add(meter, 300).add(meter, 300), "j")
        assert parked.grant is None and admission.queue_size == 1
        meter.give([100])
        await trio.testing.wait_all_tasks_blocked()
        assert parked.grant is not None
        assert parked.grant.entries[0].amounts == (300, 300)
        assert meter.level == 0


async def test_a_fast_path_grant_attributes_no_wait(autojump_clock: trio.abc.Clock) -> None:
    """DG-07, DG-08: a grant on a still clock waited 0 ms and names no account."""
    async with running() as (admission, _):
        grant = await admission.admit(Demand().add(CountingGate("slot", 1)), FakeJob("j"))
        assert grant.wall_wait == 0.0 and grant.wall_wait_ms == 0
        assert dict(grant.wait_times_ms) == {}
        with pytest.raises(TypeError):
            grant.wait_times_ms["slot"] = 5  # type: ignore[index]


async def test_wall_wait_is_truncated_milliseconds(autojump_clock: trio.abc.Clock) -> None:
    """DG-07: (granted - asked) in whole milliseconds, truncated."""
    slot = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(slot), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(slot), "j")
        await trio.sleep(1.0019)
        admission.release(holder)
        await trio.testing.wait_all_tasks_blocked()
        assert parked.grant is not None
        assert parked.grant.wall_wait == pytest.approx(1.0019)
        assert parked.grant.wall_wait_ms == 1001


async def test_a_parked_grant_attributes_its_wait_to_the_account_that_kept_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-09: a single gate kept the job 2 s: {slot: 2000}."""
    slot = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(slot), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(slot), "j")
        await trio.sleep(2)
        admission.release(holder)
        await trio.testing.wait_all_tasks_blocked()
        assert parked.grant is not None
        assert dict(parked.grant.wait_times_ms) == {"slot": 2000}
        assert parked.grant.wall_wait_ms == 2000


async def test_accounts_that_kept_a_job_at_the_same_time_each_get_the_whole_overlap(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-08, DG-09: short on two gates freed at +1 s and +2 s: both get 2000 ms, so the sum
    (4000) exceeds the wall wait (2000)."""
    first, second = CountingGate("first", 1), CountingGate("second", 1)
    async with running() as (admission, nursery):
        one = await admission.admit(Demand().add(first), FakeJob("h1"))
        two = await admission.admit(Demand().add(second), FakeJob("h2"))
        parked = await park(nursery, admission, Demand().add(first).add(second), "j")
        await trio.sleep(1)
        admission.release(one)
        await trio.sleep(1)
        admission.release(two)
        await trio.testing.wait_all_tasks_blocked()
        assert parked.grant is not None
        assert dict(parked.grant.wait_times_ms) == {"first": 2000, "second": 2000}
        assert sum(parked.grant.wait_times_ms.values()) == 4000
        assert parked.grant.wall_wait_ms == 2000


async def test_memory_counts_among_the_accounts_that_kept_a_job(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-08: memory that refused the job for 1.5 s appears as memory: 1500."""
    latch = Latch()
    latch.latched = True
    async with running(latch) as (admission, nursery):
        parked = await park(nursery, admission, Demand().add(CountingGate("slot", 1)), "j")
        await trio.sleep(1.5)
        latch.clear()
        await trio.testing.wait_all_tasks_blocked()
        assert parked.grant is not None
        assert dict(parked.grant.wait_times_ms) == {"memory": 1500}


async def test_an_empty_demand_gets_an_empty_grant_and_no_events(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-10: an orchestrator's empty demand is granted with an empty grant, no events."""
    events: list[LimiterEventType] = []
    async with running(emit=lambda *args: events.append(args[3])) as (admission, _):
        grant = await admission.admit(Demand(), FakeJob("orchestrator"))
        assert grant.is_empty and not grant.resourceful
        admission.release(grant)
        assert grant.is_settled
    assert events == []


async def test_a_grant_belongs_to_the_admission_that_issued_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Settling a grant on another Admission, or something that is no grant, is refused."""
    async with running() as (admission, _), running() as (other, _):
        grant = await admission.admit(Demand().add(CountingGate("slot", 1)), FakeJob("j"))
        with pytest.raises(ValueError, match="issued by another Admission"):
            other.release(grant)
        with pytest.raises(TypeError, match="expected a Grant"):
            admission.release("grant")  # type: ignore[arg-type]
        assert not grant.is_settled
        admission.release(grant)
        assert grant.is_settled
