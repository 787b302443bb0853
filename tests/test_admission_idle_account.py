"""The idle account: the one account admission keeps tracked while nobody uses it.

When the last user of an account leaves (a grant settled, a waiter gone), the account is not
forgotten at once: it stays tracked, unlisted, until another account goes idle, it is used again,
or admission stops. A limiter used by one job after another (each settled before the next is
admitted, the usual shape of a roomy gate) then keeps its bookkeeping instead of being met afresh
for every job. What is observable stays as it was: ``accounts()`` lists only accounts in use, in
the order first met since they were last idle, and a wake cleared while the account was idle is
put back when it is used again.
"""

from __future__ import annotations

import gc
import weakref

import trio

from nucleo_trio.admission import CountingGate, Demand

from .admission_doubles import FakeJob
from .test_admission import Probe, park, running, settle


async def test_the_idle_account_is_unlisted_and_reused(autojump_clock: trio.abc.Clock) -> None:
    """A gate used by job after job is listed only while held, and its account is the same
    record each time (kept, not met afresh); the wake is installed once."""
    gate = Probe("slot", 1)
    async with running() as (admission, _):
        seen = set()
        for name in "abcde":
            grant = await admission.admit(Demand().add(gate), FakeJob(name))
            assert admission.accounts() == (gate,)
            seen.add(id(admission._accounts[(id(gate), id(gate))]))
            admission.release(grant)
            assert admission.accounts() == ()
        assert len(seen) == 1
        assert len(gate.wake_installs) == 1


async def test_an_account_used_again_is_listed_as_met_now(autojump_clock: trio.abc.Clock) -> None:
    """``accounts()`` keeps the order first met since last idle: an idle account used again
    after another comes after it."""
    a, b = CountingGate("a", 1), CountingGate("b", 1)
    async with running() as (admission, _):
        admission.release(await admission.admit(Demand().add(a), FakeJob("a1")))
        held_b = await admission.admit(Demand().add(b), FakeJob("b"))
        held_a = await admission.admit(Demand().add(a), FakeJob("a2"))
        assert admission.accounts() == (b, a)
        admission.release(held_b)
        admission.release(held_a)
        assert admission.accounts() == ()


async def test_the_idle_account_goes_when_another_goes_idle(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Only one idle account is kept: the one before it is forgotten, and its limiter, once
    dropped, is not kept alive."""
    async with running() as (admission, _):
        first = CountingGate("first", 1)
        admission.release(await admission.admit(Demand().add(first), FakeJob("one")))
        probe = weakref.ref(first)
        del first
        second = CountingGate("second", 1)
        admission.release(await admission.admit(Demand().add(second), FakeJob("two")))
        gc.collect()
        assert probe() is None
        assert list(admission._accounts.values()) == [admission._idle]
        assert admission._idle is not None and admission._idle.limiter is second


async def test_stop_forgets_the_idle_account(autojump_clock: trio.abc.Clock) -> None:
    """ADM-06: stopping forgets every account, the idle one too, and clears its wake; a grant
    settled after the stop leaves nothing tracked."""
    idle, busy = Probe("idle", 1), CountingGate("busy", 1)
    async with running() as (admission, _):
        admission.release(await admission.admit(Demand().add(idle), FakeJob("a")))
        grant = await admission.admit(Demand().add(busy), FakeJob("b"))
    assert idle.wake_installs[-1] is None
    assert admission._idle is None
    admission.release(grant)
    assert admission.accounts() == () and admission._accounts == {}


async def test_a_waiter_on_the_idle_account_is_granted_by_a_raise(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-10, ADM-20: the idle account's wake still reaches the evaluator when it is used
    again: a waiter parked on it is granted when its capacity is raised."""
    gate = Probe("slot", 1)
    async with running() as (admission, nursery):
        admission.release(await admission.admit(Demand().add(gate), FakeJob("a")))
        assert gate.try_take([None], [])  # a slot held outside admission
        waiter = await park(nursery, admission, Demand().add(gate), "waiter")
        assert waiter.grant is None and admission.accounts() == (gate,)
        gate.set_capacity(2)
        await settle()
        assert waiter.grant is not None
        assert len(gate.wake_installs) == 1
