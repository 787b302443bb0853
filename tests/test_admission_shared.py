"""One limiter, several admissions: two dispatchers in one program may share an account.

A limiter has one wake slot (ADM-10 installs the wake once per limiter instance over a
monitor's life). The second monitor to use a limiter joins the wake the first installed, so a
change of capacity reaches both, and a monitor that gives back to a shared limiter tells the
others: a waiter parked in one is granted when a grant of the other is released. Before this, the
second install replaced the first, and a waiter whose monitor did not give the capacity back
stayed parked with the account free.
"""

from __future__ import annotations

import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

from .test_admission import one, park, running, settle


async def test_a_release_in_one_admission_grants_the_waiter_of_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ADM-20: the gate's holder and its waiter live in two admissions; the release in one
    grants the waiter in the other at once, in both directions."""
    gate = CountingGate("shared", 1)
    async with running() as (first, nursery), running() as (second, _):
        held = await first.admit(one(gate))
        waiting = await park(nursery, second, one(gate), "in-second")
        assert waiting.grant is None
        first.release(held)
        await settle()
        assert waiting.grant is not None and waiting.granted_at == 0.0

        back = await park(nursery, first, one(gate), "in-first")
        assert back.grant is None
        second.release(waiting.grant)
        await settle()
        assert back.grant is not None
        first.release(back.grant)
        assert gate.in_use == 0


async def test_a_capacity_raise_wakes_every_admission_and_one_stopping_leaves_the_other_awake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ADM-10, ADM-20: a raise of a shared gate's capacity wakes the waiters of both monitors;
    once one monitor stops, the other still hears the gate (the wake stays in its slot)."""
    gate = CountingGate("shared", 1)
    async with running() as (first, nursery):
        async with running() as (second, _):
            held = await first.admit(one(gate))
            a = await park(nursery, first, one(gate), "a")
            b = await park(nursery, second, one(gate), "b")
            gate.set_capacity(3)
            await settle()
            assert a.grant is not None and b.grant is not None
            second.release(b.grant)
        # The second admission stopped: the first still hears the gate.
        c = await park(nursery, first, one(gate), "c")
        d = await park(nursery, first, one(gate), "d")
        assert c.grant is not None and d.grant is None
        first.release(held)
        await settle()
        assert d.grant is not None


class _NeedsShared(Tool[str]):
    def __init__(self, parent: Identifiable, gate: CountingGate, label: str) -> None:
        super().__init__(parent)
        self.gate, self.label = gate, label

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.gate)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(1)
        return self.label


async def test_two_dispatchers_sharing_a_gate_run_every_job_one_at_a_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ADM-20: ten jobs on each of two dispatchers need the same one-slot gate; every job
    completes, never two at once, in 20 s of virtual time (none waits on a wake it never gets)."""
    gate = CountingGate("shared", 1)
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, gate.in_use)
            await trio.sleep(0.25)

    async with open_dispatcher(DispatcherConfig()) as one_side:
        async with open_dispatcher(DispatcherConfig()) as other_side, trio.open_nursery() as n:
            n.start_soon(watch)
            root = workflow("shared", "gate")
            handles = [
                side.submit(_NeedsShared(root, gate, f"{name}{i}"))
                for i in range(10)
                for side, name in ((one_side, "a"), (other_side, "b"))
            ]
            with trio.fail_after(30):
                results = [await handle.result() for handle in handles]
            n.cancel_scope.cancel()
    assert sorted(results) == sorted(f"{s}{i}" for i in range(10) for s in "ab")
    assert most == 1
    assert trio.current_time() < 21
