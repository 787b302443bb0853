"""The two queues a submitted job waits in before its task starts.

A job whose timeout is five seconds or less enters the priority lane, served by the higher
priority first and by submission order among equals; every other job enters the FIFO lane.
Each offer starts the task that takes the lane's next job, the instant the job is offered:
nothing polls.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .attempt import JobRun

__all__ = ["PRIORITY_LANE_MAX_TIMEOUT", "Lane", "grace_period"]

PRIORITY_LANE_MAX_TIMEOUT = 5.0  # ROUTE-02
"""Seconds: a job whose timeout is this or less waits in the priority lane, served by
priority; every other queued job waits in the FIFO lane."""


def grace_period(timeout: float) -> float:
    """The grace, in seconds, between the two phases of a ``timeout`` of that many seconds:
    10 % of it, at least 0.5 s and at most 30 s.

    At the deadline the job is timed out cooperatively (its cancel flag and callbacks, its
    resources closed); a job still running when the grace ends has its task cancelled.
    """
    # ROUTE-05
    return min(30.0, max(0.5, timeout * 0.1))


class Lane:
    """One queue; each job offered starts a task that takes the lane's next one (see
    :meth:`JobDispatcher._run_job`)."""

    def __init__(self, name: str, *, prioritized: bool) -> None:
        self.name = name
        self.prioritized = prioritized
        self._heap: list[tuple[tuple[int, int], JobRun]] = []
        self._fifo: deque[JobRun] = deque()
        self._removed: set[int] = set()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def offer(self, queued: JobRun) -> None:
        """Queue ``queued``."""
        queued.lane = self
        if self.prioritized:
            heapq.heappush(self._heap, (queued.sort_key(), queued))
        else:
            self._fifo.append(queued)
        self._size += 1

    def remove(self, queued: JobRun) -> bool:
        """Take ``queued`` out of the lane if it is still there."""
        if queued.lane is not self or queued.seq in self._removed:
            return False
        self._removed.add(queued.seq)
        queued.lane = None
        self._size -= 1
        return True

    def take(self) -> JobRun | None:
        """The next job in serving order, or ``None`` when the lane is empty."""
        while self._heap or self._fifo:
            queued = heapq.heappop(self._heap)[1] if self.prioritized else self._fifo.popleft()
            if queued.seq in self._removed:
                self._removed.discard(queued.seq)
                continue
            queued.lane = None
            self._size -= 1
            return queued
        return None

    def drain(self) -> list[JobRun]:
        """Everything still waiting, in serving order, leaving the lane empty."""
        out: list[JobRun] = []
        while (queued := self.take()) is not None:
            out.append(queued)
        return out
