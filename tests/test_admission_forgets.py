"""Admission forgets an account nobody holds or waits on.

An account is listed while a parked waiter or an unsettled grant names it, and only then: a
program that gives every job its own gate leaves no accounts, wake registrations or health rows
behind. Only the one account that went idle last is kept tracked (unlisted) until another goes
idle, it is used again or admission stops, so a limiter used by one job after another is not met
afresh each time. The wake a limiter got stays installed (once per limiter, ADM-10) but reaches
the monitor only weakly and does nothing while the limiter is idle; using the limiter again puts
it back to work.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, CountingGate, Demand
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import CancellationRequested, UncorrectableError
from nucleo_trio.jobs import JobRequirements, workflow

from .admission_doubles import FakeJob, Meter
from .jobs_for_tests import Echo
from .test_admission import BrokenGive, Probe, park, running, settle

JOBS = 5_000


def tracked(admission: Admission) -> dict[str, int]:
    """The sizes of the monitor's per-account maps (the memory account aside)."""
    memory = admission.memory
    return {
        "accounts": len(admission._accounts),
        "wired": sum(1 for limiter, _ in admission._wired.values() if limiter is not memory),
        "held counts": sum(1 for count in admission._held_counts.values() if count),
        "hooks": sum(
            1 for ref in admission._hooks.values() if (h := ref()) and h.limiter is not memory
        ),
    }


async def test_five_thousand_own_gates_leave_nothing_behind(
    autojump_clock: trio.abc.Clock,
) -> None:
    """5,000 jobs, each with its own gate, granted and released (a third of them after waiting
    for a slot): no account is listed, and only the one that went idle last is still tracked,
    with no held count; once the gates are dropped admission keeps none alive but that last
    one, which goes when another account goes idle."""
    async with running() as (admission, nursery):
        gates = [CountingGate(f"own-{i}", 1) for i in range(JOBS)]
        waiters = []
        for i, gate in enumerate(gates):
            grant = await admission.admit(Demand().add(gate), FakeJob(f"j{i}"))
            if i % 3:
                admission.release(grant)
                continue
            waiters.append((grant, await park(nursery, admission, Demand().add(gate), f"w{i}")))
        assert len(admission.accounts()) == len(waiters)
        for grant, waiter in waiters:
            admission.release(grant)
            await settle()
            assert waiter.grant is not None
            admission.release(waiter.grant)
        assert admission.accounts() == ()
        assert tracked(admission) == {"accounts": 1, "wired": 1, "held counts": 0, "hooks": JOBS}
        probe, last = weakref.ref(gates[0]), weakref.ref(gates[-1])
        del gates, gate, waiters, grant, waiter
        gc.collect()
        assert probe() is None, "admission keeps no idle limiter alive but the last"
        assert tracked(admission)["hooks"] == 1
        other = CountingGate("other", 1)
        admission.release(await admission.admit(Demand().add(other), FakeJob("other")))
        gc.collect()
        assert last() is None, "the last idle limiter goes when another goes idle"
        assert tracked(admission) == {"accounts": 1, "wired": 1, "held counts": 0, "hooks": 1}


async def test_an_account_is_tracked_while_held_or_waited_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    """An account is listed while a grant holds it or a waiter waits on it, in the order first
    met, and forgotten when the last of them leaves, whichever way it leaves."""
    a, b = CountingGate("a", 1), CountingGate("b", 1)
    async with running() as (admission, nursery):
        assert admission.accounts() == ()
        held = await admission.admit(Demand().add(a), FakeJob("held"))
        assert admission.accounts() == (a,)
        waiting = await park(nursery, admission, Demand().add(b).add(a), "waiting")
        assert admission.accounts() == (a, b)
        admission.release(held)
        await settle()
        assert waiting.grant is not None and admission.accounts() == (a, b)
        admission.rollback(waiting.grant)
        assert admission.accounts() == ()

        held = await admission.admit(Demand().add(a), FakeJob("held"))
        cancelled = await park(nursery, admission, Demand().add(b).add(a), "cancelled")
        cancelled.scope.cancel()
        await settle()
        assert cancelled.interrupted and admission.accounts() == (a,)
        job = FakeJob("deserter")
        deserter = await park(nursery, admission, Demand().add(b).add(a), job)
        job.cancel()
        await settle()
        assert isinstance(deserter.error, CancellationRequested)
        assert admission.accounts() == (a,)
        with pytest.raises(UncorrectableError, match="can never fit"):
            await admission.admit(Demand().add(b).add(b), FakeJob("too-big"))
        admission.release(held)
        assert admission.accounts() == ()
        stranded = await admission.admit(Demand().add(a), FakeJob("stranded"))
        await park(nursery, admission, Demand().add(a).add(b), "parked")
    # Stopped: the parked waiter was refused; the grant still outstanding keeps its account.
    assert admission.accounts() == (a,)
    admission.release(stranded)
    assert admission.accounts() == ()


async def test_a_give_that_throws_at_release_still_forgets_the_account(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-45: the failing give reaches release's caller with the grant settled, and the
    settled grant no longer keeps its accounts."""
    broken, gate = BrokenGive("broken", 1), CountingGate("slot", 1)
    async with running() as (admission, _):
        grant = await admission.admit(Demand().add(broken).add(gate), FakeJob("j"))
        with pytest.raises(RuntimeError, match="give broke"):
            admission.release(grant)
        assert grant.is_settled and gate.in_use == 0
        assert admission.accounts() == ()


async def test_a_forgotten_limiter_used_again_keeps_its_one_wake_and_is_woken(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-10, ADM-20: a limiter used, forgotten and used again gets the wake once over the
    monitor's life, and that wake still reaches the evaluator: raising the capacity of a gate
    whose slot is taken outside admission grants the waiter."""
    gate = Probe("slot", 1)
    async with running() as (admission, nursery):
        for name in "abc":
            admission.release(await admission.admit(Demand().add(gate), FakeJob(name)))
            assert admission.accounts() == ()
        assert len(gate.wake_installs) == 1
        assert gate.try_take([None], [])  # a slot held outside admission
        waiter = await park(nursery, admission, Demand().add(gate), "waiter")
        assert waiter.grant is None and admission.accounts() == (gate,)
        gate.set_capacity(2)  # runs the installed wake
        await settle()
        assert waiter.grant is not None
        assert len(gate.wake_installs) == 1


async def test_the_wake_of_a_forgotten_limiter_does_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A forgotten limiter's wake asks for no pass (the clock the passes read is not read), and
    it keeps no monitor alive."""
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        return trio.current_time()

    gate = CountingGate("slot", 1)
    async with running(clock=clock) as (admission, _):
        admission.release(await admission.admit(Demand().add(gate), FakeJob("j")))
        await settle()
        wake = gate._wake
        assert wake is not None
        before = reads
        for _ in range(100):
            wake()
        await settle()
        assert reads == before
    monitor = weakref.ref(admission)
    del admission
    gc.collect()
    assert monitor() is None
    wake()  # a wake that outlives its monitor is a no-op


async def test_a_wake_cleared_from_outside_is_installed_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-10: when the limiter's wake slot was cleared (or taken) by someone else while it was
    idle, using it again installs the wake afresh, so its capacity changes still wake."""
    gate = Probe("slot", 1)
    async with running() as (admission, nursery):
        admission.release(await admission.admit(Demand().add(gate), FakeJob("a")))
        gate.on_capacity_change(None)
        assert gate.try_take([None], [])
        waiter = await park(nursery, admission, Demand().add(gate), "waiter")
        assert [callable(w) for w in gate.wake_installs] == [True, False, True]
        gate.set_capacity(2)
        await settle()
        assert waiter.grant is not None


async def test_stop_clears_the_wake_of_idle_limiters_too(autojump_clock: trio.abc.Clock) -> None:
    """ADM-06: stopping clears the wake of every limiter the monitor wired that still holds it,
    idle ones included."""
    idle, busy = Probe("idle", 1), Probe("busy", 1)
    async with running() as (admission, _):
        admission.release(await admission.admit(Demand().add(idle), FakeJob("a")))
        grant = await admission.admit(Demand().add(busy), FakeJob("b"))
    assert idle.wake_installs[-1] is None and busy.wake_installs[-1] is None
    admission.release(grant)
    assert admission.accounts() == ()


async def test_cancelled_timed_waiters_leave_no_deadlines_behind(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Waiters on their own clocked accounts, each an hour from its deadline, cancelled: their
    accounts are forgotten at once and the deadline heap stays bounded, not one entry per
    cancelled waiter kept for an hour."""
    async with running() as (admission, nursery):
        for round_ in range(4):
            parked = [
                await park(
                    nursery, admission, Demand().add(Meter(f"m{i}", 10, 10 / 3600, 0), 10), None
                )
                for i in range(500)
            ]
            for p in parked:
                p.scope.cancel()
            await settle()
            assert all(p.interrupted for p in parked)
            assert admission.accounts() == (), f"round {round_}"
        assert len(admission._deadlines) <= 600


async def test_a_waiter_cancelled_as_it_is_granted_leaves_nothing_tracked(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A waiter cancelled just as a release grants it leaves holding nothing, whichever lands
    first (a grant that lands first is rolled back), and its account goes with it."""
    gate = CountingGate("slot", 1)
    async with running() as (admission, nursery):
        holder = await admission.admit(Demand().add(gate), FakeJob("holder"))
        racer = await park(nursery, admission, Demand().add(gate), "racer")
        admission.release(holder)  # grants the racer in the next pass...
        racer.scope.cancel()  # ...which its cancellation races
        await settle()
        assert gate.in_use == 0 and admission.queue_size == 0
        assert admission.accounts() == ()


# --------------------------------------------------------------------------------------------
# Through a dispatcher
# --------------------------------------------------------------------------------------------


def own_gate(name: str) -> Callable[[], JobRequirements]:
    gate = CountingGate(name, 1)
    return lambda: JobRequirements().require_rate_limiter(gate)


async def test_a_dispatcher_running_five_thousand_own_gates_forgets_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """5,000 Tool jobs, each with its own gate, run to completion through a dispatcher: health
    lists none of their gates afterwards, only what the dispatcher owns (the http gate and its
    configured limiters), and admission tracks no account but the one that went idle last.
    While a job holds its gate, health shows that gate."""
    config = DispatcherConfig(health_every=None)
    async with open_dispatcher(config) as dispatcher:
        root = workflow("alice", "own-gates")
        handles = [
            dispatcher.submit(Echo(root, requirements=own_gate(f"own-{i}"))) for i in range(JOBS)
        ]
        for handle in handles:
            assert await handle.result() == "ok"
        assert dispatcher.admission.accounts() == ()
        rows = {row.name for row in dispatcher.health().limiters}
        assert not any(name.startswith("own-") for name in rows)
        assert "http" in rows
        assert tracked(dispatcher.admission)["accounts"] <= 1  # at most the last to go idle

        slow = dispatcher.submit(Echo(root, sleep=10, requirements=own_gate("slow")))
        await trio.testing.wait_all_tasks_blocked()
        row = dispatcher.health().limiter("slow")
        assert row is not None and row.used == 1
        assert await slow.result() == "ok"
        assert dispatcher.health().limiter("slow") is None
        assert dispatcher.admission.accounts() == ()


class Cycled(CountingGate):
    """A gate whose every take is counted, to see the same limiter come back to admission."""

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self.takes = 0

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        took = super().try_take(mine, reserved_ahead)
        self.takes += took
        return took


async def test_a_shared_gate_comes_and_goes_with_its_jobs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One gate shared by waves of jobs: tracked while a wave runs or waits, forgotten between
    waves, and each wave is granted in full (its wake still works after being forgotten)."""
    gate = Cycled("shared", 2)
    config = DispatcherConfig(health_every=None)
    async with open_dispatcher(config) as dispatcher:
        root = workflow("alice", "waves")
        for wave in range(3):
            handles = [
                dispatcher.submit(
                    Echo(
                        root,
                        sleep=1,
                        requirements=lambda: JobRequirements().require_rate_limiter(gate),
                    )
                )
                for _ in range(5)
            ]
            await trio.testing.wait_all_tasks_blocked()
            assert dispatcher.admission.accounts() == (gate,)
            assert dispatcher.health().limiter("shared") is not None
            for handle in handles:
                assert await handle.result() == "ok"
            assert dispatcher.admission.accounts() == (), f"wave {wave}"
        assert gate.takes == 15 and gate.in_use == 0
