"""The runtime's clock: reading it where there may be none, whole milliseconds, and waiting on
work the autojump clock cannot see.

trio's :class:`~trio.testing.MockClock` with an autojump threshold jumps to the next timer as
soon as every task is blocked, and a task waiting on a worker thread counts as blocked: a test
would see a commit, or a connection's close, take as long as the next timer was away, and a
timeout race the thread in virtual time that the thread wins in real time. While a task waits
on such work, :func:`wait_holding_the_clock` keeps a helper parked in
``trio.testing.wait_all_tasks_blocked`` with an endless cushion, which the autojump treats as a
task still busy (trio documents that it takes priority), so the clock holds still until the
answer comes. Under any other clock it is a plain ``await event.wait()``.

Every blocking call the runtime makes in a worker thread goes through
:func:`run_sync_holding_the_clock` (``trio.to_thread.run_sync`` with the same hold), so in a
virtual-time test a query takes no virtual time at all, as a test expects: a job doing three
SELECTs does not time out, and a commit is never overtaken by a deadline while SQLite writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import outcome
import trio
import trio.testing

__all__ = ["run_sync_holding_the_clock", "trio_now_or_none", "wait_holding_the_clock", "whole_ms"]

T = TypeVar("T")


def trio_now_or_none() -> float | None:
    """The trio clock, or ``None`` outside a trio run (something built at configuration
    time, or read after ``trio.run`` returned)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return None


def whole_ms(seconds: float) -> int:
    """``seconds`` as whole milliseconds, truncated (never negative): through integer
    nanoseconds, so 0.0015 s is 1 ms and float noise never turns 3 ms into 2."""
    nanoseconds = round(seconds * 1_000_000_000)
    return nanoseconds // 1_000_000 if nanoseconds > 0 else 0  # not max(): it costs a call


def _clock_jumps() -> bool:
    """Whether the run's clock is a MockClock that jumps when every task is blocked."""
    clock = trio.lowlevel.current_clock()
    return isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold != math.inf


async def run_sync_holding_the_clock(
    fn: Callable[..., T], *args: object, abandon_on_cancel: bool = False
) -> T:
    """``await trio.to_thread.run_sync(fn, *args)``; under an autojump MockClock the clock
    holds still until the thread answers (or, with ``abandon_on_cancel``, until the caller is
    cancelled and stops waiting for it)."""
    if not _clock_jumps():
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.testing.wait_all_tasks_blocked, math.inf)
        try:
            # Captured, not raised here: raised inside the nursery it would leave wrapped in
            # an exception group.
            answer = await outcome.acapture(
                trio.to_thread.run_sync, fn, *args, abandon_on_cancel=abandon_on_cancel
            )
        finally:
            nursery.cancel_scope.cancel()
    return answer.unwrap()


async def wait_holding_the_clock(event: trio.Event) -> None:
    """``await event.wait()``; under an autojump MockClock, the clock holds still meanwhile."""
    if event.is_set() or not _clock_jumps():
        await event.wait()
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.testing.wait_all_tasks_blocked, math.inf)
        await event.wait()
        nursery.cancel_scope.cancel()
