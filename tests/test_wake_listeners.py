"""Wake listeners: any number of callables an account of the base class runs beside its one wake
slot, and how admission uses them when several monitors share an account.

The slot (``on_capacity_change``) is the contract every account keeps; the listeners belong to
:class:`AbstractRateLimiter`. The first monitor to use an account installs its wake in the slot,
as before; a second monitor on an account of the base class listens beside it instead of
taking its place. An account that does not build on the base class is still reached through
the slot alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    AbstractRateLimiter,
    CountingGate,
    Demand,
    LimiterIdentity,
    RateLimiter,
    Replenishment,
)

from .admission_doubles import FakeJob
from .test_admission import Probe, one, park, running, settle


class Plain(CountingGate):
    def grow(self) -> None:
        self._capacity_changed()


def test_several_listeners_run_after_the_slot_each_once_in_order() -> None:
    """ACC-09: the slot runs first, then every listener in the order added; a listener added
    twice runs once; installing or clearing the slot leaves the listeners listening."""
    gate = Plain("g", 1)
    heard: list[str] = []
    first, second = (lambda: heard.append("first")), (lambda: heard.append("second"))
    gate.add_wake_listener(first)
    gate.add_wake_listener(second)
    gate.add_wake_listener(first)
    gate.grow()
    assert heard == ["first", "second"]

    def slot() -> None:
        heard.append("slot")

    gate.on_capacity_change(slot)
    assert gate.wake_listeners == (slot, first, second)
    heard.clear()
    gate.grow()
    assert heard == ["slot", "first", "second"]
    gate.on_capacity_change(None)
    heard.clear()
    gate.grow()
    assert heard == ["first", "second"]
    assert gate.wake_listeners == (first, second)


def test_a_removed_listener_is_not_run_and_removal_answers_whether_it_listened() -> None:
    """ACC-09: removing answers True once, False after; the slot is not a listener."""
    gate = Plain("g", 1)
    heard: list[str] = []

    def listener() -> None:
        heard.append("listener")

    def slot() -> None:
        heard.append("slot")

    gate.add_wake_listener(listener)
    gate.on_capacity_change(slot)
    assert gate.remove_wake_listener(listener) is True
    assert gate.remove_wake_listener(listener) is False
    assert gate.remove_wake_listener(slot) is False
    gate.grow()
    assert heard == ["slot"]


def test_a_listener_that_is_not_callable_is_refused() -> None:
    gate = Plain("g", 1)
    with pytest.raises(TypeError, match="listener must be callable"):
        gate.add_wake_listener("not a function")  # type: ignore[arg-type]
    assert gate.wake_listeners == ()


def test_every_listener_runs_when_one_raises_and_the_first_error_is_raised() -> None:
    gate = Plain("g", 1)
    heard: list[str] = []

    def broken() -> None:
        raise RuntimeError("first")

    def also_broken() -> None:
        raise ValueError("second")

    gate.on_capacity_change(broken)
    gate.add_wake_listener(also_broken)
    gate.add_wake_listener(lambda: heard.append("ran"))
    with pytest.raises(RuntimeError, match="first"):
        gate.grow()
    assert heard == ["ran"]


def test_a_subclass_that_skips_init_still_takes_listeners() -> None:
    class Bare(Plain):
        def __init__(self) -> None:  # no super().__init__()
            pass

    bare, other = Bare(), Plain("other", 1)
    heard: list[str] = []
    bare.add_wake_listener(lambda: heard.append("bare"))
    other.grow()
    assert other.wake_listeners == () and heard == []
    bare.grow()
    assert heard == ["bare"]


async def test_a_listener_of_a_gate_admission_uses_keeps_listening(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-10: admission installs its wake in the slot and leaves a listener alone; both hear
    a raise, and after stop only the listener is left."""
    gate = Probe("slot", 1)
    heard: list[str] = []

    def listener() -> None:
        heard.append("raised")

    gate.add_wake_listener(listener)
    async with running() as (admission, nursery):
        held = await admission.admit(one(gate), FakeJob("holder"))
        waiter = await park(nursery, admission, one(gate), "waiter")
        gate.set_capacity(2)
        await settle()
        assert waiter.grant is not None and heard == ["raised"]
        admission.release(held)
        admission.release(waiter.grant)
    assert gate.wake_installs[-1] is None
    assert gate.wake_listeners == (listener,)


async def test_a_second_monitor_listens_beside_the_first_and_each_clears_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ADM-06, ADM-10, ADM-20: the second monitor on a gate of the base class adds a listener
    instead of taking the slot (the slot is installed once); each hears the other's release;
    whichever stops first leaves the other hearing, and once both stopped nothing of either
    is left on the gate."""
    for first_stops in (True, False):
        gate = Probe("shared", 1)
        async with running() as (first, first_nursery), running() as (second, second_nursery):
            held = await first.admit(one(gate))
            waiting = await park(second_nursery, second, one(gate), "in-second")
            assert [callable(w) for w in gate.wake_installs] == [True]
            assert len(gate.wake_listeners) == 2
            first.release(held)
            await settle()
            assert waiting.grant is not None
            second.release(waiting.grant)
            stopping, staying, nursery = (
                (first, second, second_nursery) if first_stops else (second, first, first_nursery)
            )
            stopping.stop()
            assert len(gate.wake_listeners) == 1
            blocker = await staying.admit(one(gate))
            late = await park(nursery, staying, one(gate), "late")
            assert late.grant is None
            gate.set_capacity(2)  # heard by the monitor still running
            await settle()
            assert late.grant is not None
            staying.release(late.grant)
            staying.release(blocker)
        assert gate.wake_listeners == ()
        assert gate.in_use == 0


@attrs.frozen
class _DuckStatus:
    name: str

    @property
    def summary(self) -> str:
        return f"{self.name}: a duck"


class Duck:
    """A one-slot account that does not build on AbstractRateLimiter: only the protocol."""

    def __init__(self) -> None:
        self.taken = 0
        self.cap = 1
        self.installs: list[Callable[[], None] | None] = []
        self.wake: Callable[[], None] | None = None

    limiter_name = "duck"
    limiter_category = "semaphore"
    status_indicator = None

    @property
    def capacity(self) -> int:
        return self.cap

    @property
    def in_use(self) -> int:
        return self.taken

    def status(self) -> _DuckStatus:
        return _DuckStatus(self.limiter_name)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self.taken + len(mine) + len(reserved_ahead) <= self.cap

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        self.taken += len(mine)
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        self.taken -= len(amounts)

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None

    def on_capacity_change(self, wake: Callable[[], None] | None) -> None:
        self.installs.append(wake)
        self.wake = wake

    def account_for(self, amount: Any) -> LimiterIdentity:
        return self

    def replenishment(self) -> Replenishment:
        return Replenishment.RELEASE

    def on_success(self, input: Any = None) -> None:
        return None

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        return None

    @property
    def requires_http_connection(self) -> bool:
        return False

    def observe_held(self, supplier: Callable[[], int]) -> None:
        return None

    def grow(self) -> None:
        self.cap += 1
        if self.wake is not None:
            self.wake()


async def test_an_account_outside_the_base_class_is_reached_through_its_slot(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ADM-06, ADM-10: a duck-typed account gets admission's wake through on_capacity_change,
    once while it is in use, hears a raise through it, and has it cleared at stop."""
    duck = Duck()
    assert isinstance(duck, RateLimiter) and not isinstance(duck, AbstractRateLimiter)
    async with running() as (admission, nursery):
        held = await admission.admit(Demand().add(duck), FakeJob("holder"))
        waiter = await park(nursery, admission, Demand().add(duck), "waiter")
        assert waiter.grant is None and len(duck.installs) == 1
        duck.grow()
        await settle()
        assert waiter.grant is not None
        admission.release(held)
        admission.release(waiter.grant)
        assert duck.taken == 0
    assert duck.installs[-1] is None and len(duck.installs) == 2
