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
"""

from __future__ import annotations

import math

import trio
import trio.testing

__all__ = ["trio_now_or_none", "wait_holding_the_clock", "whole_ms"]


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
    return max(0, round(seconds * 1_000_000_000)) // 1_000_000


async def wait_holding_the_clock(event: trio.Event) -> None:
    """``await event.wait()``; under an autojump MockClock, the clock holds still meanwhile."""
    clock = trio.lowlevel.current_clock()
    if (
        event.is_set()
        or not isinstance(clock, trio.testing.MockClock)
        or clock.autojump_threshold == math.inf
    ):
        await event.wait()
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.testing.wait_all_tasks_blocked, math.inf)
        await event.wait()
        nursery.cancel_scope.cancel()
