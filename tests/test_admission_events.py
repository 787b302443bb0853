"""The limiter events admission reports per account and per waiter (EVT-01..14, OBS-15)."""

from __future__ import annotations

import logging
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
    Grant,
    LimiterEventType,
    LimiterIdentity,
)
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs.snapshot import JobSnapshot

from .admission_doubles import FakeJob, MemoryDouble

HELD = LimiterEventType.HELD
IMMEDIATE = LimiterEventType.GRANTED_IMMEDIATE
FROM_HOLD = LimiterEventType.GRANTED_FROM_HOLD
REJECTED = LimiterEventType.REJECTED
RELEASED = LimiterEventType.RELEASED

# -- helpers; the shared doubles live in admission_doubles.py ----------------------------------


class Latch(MemoryDouble):
    """A memory account that is short while latched; clearing it wakes admission."""

    def __init__(self) -> None:
        self.latched = False

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


class Event:
    """One emitted transition, as the emitter received it (the account read at that moment)."""

    def __init__(
        self,
        account: LimiterIdentity,
        snapshot: JobSnapshot | None,
        waiters: int,
        type: LimiterEventType,
        wait: float,
        reason: str | None,
        amount: Any,
    ) -> None:
        self.name = account.limiter_name
        self.in_use = account.in_use
        self.job = snapshot.job_id if snapshot is not None else None
        self.snapshot = snapshot
        self.waiters, self.type, self.wait, self.reason, self.amount = (
            waiters,
            type,
            wait,
            reason,
            amount,
        )

    @property
    def short(self) -> tuple[str, LimiterEventType, int]:
        return (self.name, self.type, self.waiters)


class Events(list[Event]):
    def __call__(self, *args: Any) -> None:
        self.append(Event(*args))

    def of(self, job: str) -> list[Event]:
        return [e for e in self if e.job == job]


@asynccontextmanager
async def running(memory: Any = None) -> AsyncIterator[tuple[Admission, trio.Nursery, Events]]:
    events = Events()
    async with trio.open_nursery() as nursery:
        admission = Admission(memory, emit=events)
        await nursery.start(admission.run)
        try:
            yield admission, nursery, events
        finally:
            admission.stop()


class Parked:
    def __init__(self, admission: Admission, demand: Demand, job: FakeJob) -> None:
        self.admission, self.demand, self.job = admission, demand, job
        self.grant: Grant | None = None
        self.error: BaseException | None = None
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            try:
                self.grant = await self.admission.admit(self.demand, self.job)
            except Exception as exc:  # noqa: BLE001 - recorded for the test to inspect
                self.error = exc


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def park(nursery: trio.Nursery, admission: Admission, demand: Demand, name: str) -> Parked:
    parked = Parked(admission, demand, FakeJob(name))
    nursery.start_soon(parked.run)
    await settle()
    return parked


# --------------------------------------------------------------------------------------------


async def test_only_admission_emits_and_with_five_types(autojump_clock: trio.abc.Clock) -> None:
    """EVT-01: the accounts emit nothing themselves; admission reports HELD, GRANTED_IMMEDIATE,
    GRANTED_FROM_HOLD, REJECTED and RELEASED."""
    assert [t.name for t in LimiterEventType] == [
        "HELD",
        "GRANTED_IMMEDIATE",
        "GRANTED_FROM_HOLD",
        "REJECTED",
        "RELEASED",
    ]
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery, events):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(gate), "j")
        refused = await park(nursery, admission, Demand().add(gate).add(gate), "refused")
        assert isinstance(refused.error, UncorrectableError)
        admission.release(holder)
        await settle()
        assert parked.grant is not None
        admission.release(parked.grant)
        gate.try_take([None], [])  # an account moving on its own tells no one
        gate.give([None])
    assert {e.type for e in events} == set(LimiterEventType)
    assert len(events) == 6


async def test_the_fast_path_emits_one_granted_immediate_per_entry(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-03, OBS-15: a fast-path grant emits exactly one GRANTED_IMMEDIATE per entry, wait 0,
    the held count on that account (0), the entry's amount; memory emits nothing."""
    gate, other = CountingGate("slot", 2), CountingGate("other", 1)
    async with running(Latch()) as (admission, _, events):
        await admission.admit(Demand().add(gate).add(gate).add(other), FakeJob("j"))
    assert [(e.name, e.type, e.waiters, e.wait, e.amount, e.in_use) for e in events] == [
        ("slot", IMMEDIATE, 0, 0.0, 2, 2),
        ("other", IMMEDIATE, 0, 0.0, 1, 1),
    ]


async def test_the_slow_path_emits_held_then_granted_from_hold_with_post_transition_counts(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-04, EVT-05, EVT-09, OBS-15: N slow-path waiters give exactly 2N transitions: HELD
    with the post-increment count and wait 0 (once each, however often re-asked), then
    GRANTED_FROM_HOLD with its wait and the post-decrement count (0 for the last)."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery, events):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        parked = [await park(nursery, admission, Demand().add(gate), f"w{i}") for i in range(3)]
        gate.set_capacity(1)  # no growth, no wake
        await trio.sleep(2)
        admission.release(holder)
        for p in parked:
            await settle()
            await trio.sleep(1)
            assert p.grant is not None
            admission.release(p.grant)
        await settle()
    transitions = [e for e in events if e.type in (HELD, FROM_HOLD)]
    assert len(transitions) == 6
    assert [e.short for e in transitions] == [
        ("slot", HELD, 1),
        ("slot", HELD, 2),
        ("slot", HELD, 3),
        ("slot", FROM_HOLD, 2),
        ("slot", FROM_HOLD, 1),
        ("slot", FROM_HOLD, 0),
    ]
    assert all(e.wait == 0.0 and e.amount == 1 for e in transitions if e.type is HELD)
    assert [e.wait for e in transitions if e.type is FROM_HOLD] == [2.0, 3.0, 4.0]


async def test_held_is_once_per_account_and_a_grant_names_each_entrys_history(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-04, EVT-05: entries held emit GRANTED_FROM_HOLD, entries never held emit
    GRANTED_IMMEDIATE; re-asking a held waiter emits nothing new."""
    scarce, plentiful = CountingGate("scarce", 1), CountingGate("plentiful", 5)
    async with running() as (admission, nursery, events):
        holder = await admission.admit(Demand().add(scarce), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(plentiful).add(scarce), "j")
        for _ in range(3):
            plentiful.set_capacity(plentiful.capacity + 1)  # wakes that re-ask nothing useful
            await settle()
        assert [e.short for e in events.of("j")] == [("scarce", HELD, 1)]
        await trio.sleep(1)
        admission.release(holder)
        await settle()
        assert parked.grant is not None
    assert [(e.name, e.type, e.wait) for e in events.of("j")] == [
        ("scarce", HELD, 0.0),
        ("plentiful", IMMEDIATE, 0.0),
        ("scarce", FROM_HOLD, 1.0),
    ]


async def test_stop_emits_rejected_shutdown_on_every_account_a_waiter_was_held_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-06: REJECTED `shutdown` on each held account, waiting since the first refusal,
    amount 1, balanced counts."""
    first, second = CountingGate("first", 1), CountingGate("second", 1)
    async with running() as (admission, nursery, events):
        await admission.admit(Demand().add(first), FakeJob("h1"))
        await admission.admit(Demand().add(second), FakeJob("h2"))
        await park(nursery, admission, Demand().add(first).add(second), "a")
        await park(nursery, admission, Demand().add(first), "b")
        await trio.sleep(2)
        admission.stop()
        await settle()
    rejected = [
        (e.name, e.job, e.waiters, e.wait, e.reason, e.amount) for e in events if e.type is REJECTED
    ]
    assert rejected == [
        ("first", "a", 1, 2.0, "shutdown", 1),
        ("second", "a", 0, 2.0, "shutdown", 1),
        ("first", "b", 0, 2.0, "shutdown", 1),
    ]


async def test_an_interrupt_while_parked_emits_rejected_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-06, OBS-15: an interrupt (or a cancel) gives HELD then REJECTED(wait, cancelled)."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery, events):
        await admission.admit(Demand().add(gate), FakeJob("holder"))
        interrupted = await park(nursery, admission, Demand().add(gate), "interrupted")
        cancelled = await park(nursery, admission, Demand().add(gate), "cancelled")
        await trio.sleep(1.5)
        interrupted.scope.cancel()
        cancelled.job.cancel()
        await settle()
    for job in ("interrupted", "cancelled"):
        assert [(e.type, e.wait, e.reason) for e in events.of(job)] == [
            (HELD, 0.0, None),
            (REJECTED, 1.5, "cancelled"),
        ]
    assert events[-1].waiters == 0


class Refusing(CountingGate):
    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        raise UncorrectableError("the circuit is open: pick a different tool")


async def test_a_refusal_emits_rejected_circuit_blocked_and_reaches_the_caller(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-06, EVT-07, OBS-15: a refusal by an account that never held the job is one
    REJECTED(0, circuit_blocked) on it; a job held elsewhere first also gets REJECTED(wait)
    there; the caller sees the account's own message."""
    refusing = Refusing("refusing", 1)
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery, events):
        with pytest.raises(UncorrectableError, match="pick a different tool"):
            await admission.admit(Demand().add(refusing), FakeJob("alone"))
        await admission.admit(Demand().add(gate), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(gate).add(refusing), "held-first")
        assert isinstance(parked.error, UncorrectableError)
    assert [(e.name, e.type, e.wait, e.reason, e.amount) for e in events.of("alone")] == [
        ("refusing", REJECTED, 0.0, "circuit_blocked", 1)
    ]
    assert [(e.name, e.type, e.reason, e.waiters) for e in events.of("held-first")] == [
        ("slot", HELD, None, 1),
        ("slot", REJECTED, "circuit_blocked", 0),
        ("refusing", REJECTED, "circuit_blocked", 0),
    ]


class Buggy(CountingGate):
    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        raise KeyError("lost state")


async def test_an_account_bug_emits_rejected_aborted_and_the_waiter_carries_the_cause(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-06, EVT-07: an account bug refuses with reason `aborted`; the caller's error is
    caused by the bug."""
    async with running() as (admission, _, events):
        with pytest.raises(UncorrectableError, match="buggy failed during admission") as caught:
            await admission.admit(Demand().add(Buggy("buggy", 1)), FakeJob("j"))
    assert isinstance(caught.value.__cause__, KeyError)
    assert [(e.name, e.type, e.reason) for e in events] == [("buggy", REJECTED, "aborted")]


async def test_rollback_emits_released_on_every_entry(autojump_clock: trio.abc.Clock) -> None:
    """EVT-08, OBS-15: a rollback of a 2-slot grant gives one RELEASED, with in use back to 0."""
    gate = CountingGate("slot", 2)
    async with running() as (admission, _, events):
        grant = await admission.admit(Demand().add(gate).add(gate), FakeJob("j"))
        admission.rollback(grant)
    released = [e for e in events if e.type is RELEASED]
    assert [(e.name, e.in_use, e.amount, e.waiters) for e in released] == [("slot", 0, 2, 0)]


async def test_a_latched_memory_holds_everyone_on_memory_until_it_clears(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-10: while memory is latched the job is HELD on memory and nothing appears on its
    other accounts; once memory clears, one GRANTED_FROM_HOLD appears on memory."""
    latch = Latch()
    latch.latched = True
    gate = CountingGate("slot", 1)
    async with running(latch) as (admission, nursery, events):
        first = await park(nursery, admission, Demand().add(gate), "first")
        second = await park(nursery, admission, Demand().add(CountingGate("other", 1)), "second")
        await trio.sleep(3)
        assert [e.short for e in events] == [("memory", HELD, 1), ("memory", HELD, 2)]
        latch.clear()
        await settle()
        assert first.grant is not None and second.grant is not None
    assert [(e.name, e.type, e.wait) for e in events.of("first")] == [
        ("memory", HELD, 0.0),
        ("slot", IMMEDIATE, 0.0),
        ("memory", FROM_HOLD, 3.0),
    ]
    assert sum(1 for e in events if e.name == "memory" and e.type is FROM_HOLD) == 2
    assert not any(e.name == "memory" and e.type is RELEASED for e in events)


async def test_a_line_held_elsewhere_is_put_on_memory_when_the_head_finds_it_closed(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-04, EVT-10: waiters parked on a gate when the head finds memory latched are each
    held on memory once; when it clears they are granted in order as the gate allows."""
    latch = Latch()
    gate = CountingGate("slot", 1)
    async with running(latch) as (admission, nursery, events):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        parked = [await park(nursery, admission, Demand().add(gate), f"w{i}") for i in range(3)]
        latch.latched = True
        admission.release(holder)  # a completion: the head looks and finds memory latched
        await settle()
        assert [e.short for e in events if e.name == "memory"] == [
            ("memory", HELD, 1),
            ("memory", HELD, 2),
            ("memory", HELD, 3),
        ]
        assert all(p.grant is None for p in parked)
        latch.clear()
        await settle()
        assert [p.grant is not None for p in parked] == [True, False, False]
        assert parked[0].grant is not None
        admission.release(parked[0].grant)
        await settle()
        assert [p.grant is not None for p in parked] == [True, True, False]
    assert sum(1 for e in events if e.name == "memory" and e.type is HELD) == 3


async def test_every_event_carries_the_waiting_jobs_snapshot(
    autojump_clock: trio.abc.Clock,
) -> None:
    """EVT-11: HELD, grants, REJECTED and RELEASED all carry the job's snapshot."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery, events):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        parked = await park(nursery, admission, Demand().add(gate), "j")
        cancelled = await park(nursery, admission, Demand().add(gate), "c")
        cancelled.job.cancel()
        admission.release(holder)
        await settle()
        assert parked.grant is not None
        admission.release(parked.grant)
    assert {e.type for e in events} == set(LimiterEventType) and len(events) == 7
    assert all(e.snapshot is not None and e.snapshot.job_id == e.job for e in events)


async def test_emission_is_best_effort_and_never_silent(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """EVT-14: with no emitter nothing is built; an emitter that fails, even because reading
    the account's name throws, drops the event and admission never hears of it. The drop is
    never silent: the first per account is a warning naming the account and the error, the
    later ones are logged at debug."""

    class Fickle(CountingGate):
        """Sound when admission meets it; its name breaks afterwards."""

        broken = False

        @property
        def limiter_name(self) -> str:
            if self.broken:
                raise RuntimeError("no name today")
            return "fickle"

    def explode(account: LimiterIdentity, *rest: Any) -> None:
        raise RuntimeError(f"bus down for {account.limiter_name}")

    gate, fickle = CountingGate("gate", 1), Fickle("unused", 1)
    silent = Admission()
    grant = await silent.admit(Demand().add(gate), FakeJob("quiet"))
    silent.release(grant)
    with caplog.at_level(logging.DEBUG, logger="nucleo_trio.admission"):
        admission = Admission(emit=explode)
        async with trio.open_nursery() as nursery:
            await nursery.start(admission.run)
            holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
            parked = await park(nursery, admission, Demand().add(gate), "j")
            admission.release(holder)
            await settle()
            assert parked.grant is not None and gate.in_use == 1
            admission.release(parked.grant)
            odd = await admission.admit(Demand().add(fickle), FakeJob("odd"))
            fickle.broken = True
            admission.release(odd)
            admission.stop()
    dropped = [r for r in caplog.records if "Dropped a" in r.getMessage()]
    warned = [r.getMessage() for r in dropped if r.levelno == logging.WARNING]
    assert warned == [
        "Dropped a GRANTED_IMMEDIATE limiter event for gate: RuntimeError: bus down for gate "
        "(later ones for this account are logged at debug)",
        "Dropped a GRANTED_IMMEDIATE limiter event for fickle: RuntimeError: bus down for "
        "fickle (later ones for this account are logged at debug)",
    ]
    assert len(dropped) == 7 and all(
        r.levelno == logging.DEBUG for r in dropped if r.levelno != logging.WARNING
    )
