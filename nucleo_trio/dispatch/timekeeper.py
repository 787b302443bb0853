"""One task that runs timed callbacks for every job: the first phase of each timeout.

A watchdog task per job would cost a task spawn and a cancellation for every job, nearly all of
which finish long before their deadline. The timekeeper keeps one heap of pending calls and
sleeps until the earliest; a cancelled call is dropped lazily, and the heap is rebuilt when the
dropped ones outnumber the live ones, so memory stays proportional to the jobs still running.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable

import trio

__all__ = ["Timekeeper", "TimerHandle"]

log = logging.getLogger("nucleo_trio.timekeeper")


def _checked_when(when: object) -> float:
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"Timekeeper.call_at: when must be a trio time (a float), got {when!r}")
    try:
        seconds = float(when)
    except OverflowError:  # an int past any float: never (or now)
        return math.inf if when > 0 else -math.inf
    if math.isnan(seconds):
        raise ValueError("Timekeeper.call_at: when must be a trio time, got nan")
    return seconds


def _nothing() -> None:
    return None


class TimerHandle:
    """A pending call; :meth:`cancel` drops it if it has not run yet."""

    __slots__ = ("_keeper", "callback", "cancelled", "when")

    def __init__(self, keeper: Timekeeper, when: float, callback: Callable[[], None]) -> None:
        self._keeper = keeper
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._keeper._dropped += 1
            # A cancelled entry waits in the heap until it is popped or compacted away; what
            # the callback holds (a job's deadline, its resources and grant) need not wait too.
            self.callback = _nothing


class Timekeeper:
    """Runs ``callback`` at ``trio.current_time() >= when``, in deadline order.

    The task sleeps in a cancel scope whose deadline is the earliest pending call; a call that
    comes due sooner moves that deadline, so scheduling never switches tasks and only a due
    call wakes the keeper.

    One task serves every job's timeout, so nothing one job hands it may stop it: a ``when``
    that is no time is refused at :meth:`call_at`, before it enters the heap, and a callback
    that raises is logged and the next one runs.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._counter = itertools.count()
        self._dropped = 0
        self._sleep: trio.CancelScope | None = None
        # The sleep's deadline, kept beside its scope: only the keeper sets it, and reading it
        # back from the scope is a property call on every call_at.
        self._wake_at = math.inf

    def __len__(self) -> int:
        return len(self._heap) - self._dropped

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once ``trio.current_time() >= when``.

        ``when`` is a trio time, ``-inf`` meaning now and ``inf`` never; a NaN or anything that
        is not a number is refused with :class:`ValueError` or :class:`TypeError` here, in the
        caller, so it can never reach the heap and stop the keeper's task (and with it every
        job's timeout).
        """
        if type(when) is not float or when != when:  # the common case: a float that is not NaN
            when = _checked_when(when)
        handle = TimerHandle(self, when, callback)
        heapq.heappush(self._heap, (when, next(self._counter), handle))
        if self._sleep is not None and when < self._wake_at:
            self._sleep.deadline = self._wake_at = when
        if self._dropped > 64 and self._dropped * 2 > len(self._heap):
            self._compact()
        return handle

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if not entry[2].cancelled]
        heapq.heapify(self._heap)
        self._dropped = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
                self._dropped -= 1
            earliest = self._wake_at = self._heap[0][0] if self._heap else math.inf
            with trio.CancelScope(deadline=earliest) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, handle = heapq.heappop(self._heap)
                if handle.cancelled:
                    self._dropped -= 1
                    continue
                handle.cancelled = True  # ran: a later cancel() is a no-op and counts nothing
                callback, handle.callback = handle.callback, _nothing
                try:
                    callback()
                except Exception:
                    log.exception("a timed callback raised; the timekeeper goes on")
                finally:
                    del callback, handle  # the keeper sleeps next: it keeps neither alive
