"""Waiting on work the autojump clock cannot see.

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

__all__ = ["wait_holding_the_clock"]


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
