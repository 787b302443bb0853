"""The floor: the least a runtime of nucleo_trio's shape does per job (issue 23).

Issue 23 sets the dispatch targets from this floor rather than from a bare trio task: a minimal
runtime that keeps the design's nursery per job and does only the steps every job needs. It is
written with trio and the standard library alone, so it measures the same whatever the runtime
in ``nucleo_trio/`` becomes. Per job:

* **a handle with a result**: :meth:`FloorRuntime.submit` makes a context and a handle and
  spawns the job's task in the runtime's nursery (submission never awaits);
* **a context with state and a contextvar**: the task sets :data:`CURRENT` to the job's
  context and moves its state through ``SCHEDULED``, ``RUNNING`` and a terminal state;
* **a timekeeper entry for phase one**: one entry in a runtime-wide heap, served by one task
  that sleeps until the earliest entry (cancelled when the job ends, dropped lazily);
* **a grant on a counting account through a monitor**: one unit of a :class:`CountingAccount`,
  granted at once when nobody waits and it fits, else parked in the monitor's line; given back
  when the body ends, which grants the head of the line in the releasing task;
* **the job's own nursery**, whose cancel scope phase two would cancel, around the body;
* **one event appended**: the terminal event, to a log.

What it leaves out is what issue 23 says a no-resource job does not need: door checks, lanes,
dependency graphs, listeners, snapshots, verdict objects, wait-time records.
"""

from __future__ import annotations

import contextlib
import enum
import heapq
import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import trio

__all__ = [
    "CURRENT",
    "CountingAccount",
    "FloorContext",
    "FloorHandle",
    "FloorRuntime",
    "Monitor",
    "State",
    "Timekeeper",
    "open_floor",
]

TIMEOUT = 30.0
"""Phase one's delay, as a job's default timeout: far enough that it never fires here."""


class State(enum.Enum):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class _Entry:
    """A pending timed call; cancelling it drops it lazily."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback: Callable[[], None] | None = callback
        self.cancelled = False


class Timekeeper:
    """One heap of timed calls and one task that sleeps until the earliest."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Entry]] = []
        self._order = itertools.count()
        self._dropped = 0
        self._sleep: trio.CancelScope | None = None

    def call_at(self, when: float, callback: Callable[[], None]) -> _Entry:
        entry = _Entry(callback)
        heapq.heappush(self._heap, (when, next(self._order), entry))
        if self._sleep is not None and when < self._sleep.deadline:
            self._sleep.deadline = when
        return entry

    def cancel(self, entry: _Entry) -> None:
        entry.cancelled = True
        entry.callback = None
        self._dropped += 1
        if self._dropped > 64 and self._dropped * 2 > len(self._heap):
            self._heap = [e for e in self._heap if not e[2].cancelled]
            heapq.heapify(self._heap)
            self._dropped = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
                self._dropped -= 1
            earliest = self._heap[0][0] if self._heap else math.inf
            with trio.CancelScope(deadline=earliest) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, entry = heapq.heappop(self._heap)
                if entry.cancelled:
                    self._dropped -= 1
                    continue
                callback, entry.callback = entry.callback, None
                entry.cancelled = True
                if callback is not None:
                    callback()


class CountingAccount:
    """A capacity of units and how many are in use."""

    __slots__ = ("capacity", "in_use", "name")

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.in_use = 0

    def fits(self, amount: int) -> bool:
        return self.in_use + amount <= self.capacity


class Grant:
    __slots__ = ("account", "amount")

    def __init__(self, account: CountingAccount, amount: int) -> None:
        self.account = account
        self.amount = amount


class _Waiter:
    __slots__ = ("account", "amount", "grant", "task")

    def __init__(self, account: CountingAccount, amount: int) -> None:
        self.account = account
        self.amount = amount
        self.grant: Grant | None = None
        self.task = trio.lowlevel.current_task()


class Monitor:
    """Grants whole demands in arrival order: at once when nobody waits and the demand fits,
    else from a line whose head is granted by whoever gives units back (a pass that never
    awaits, run in the releasing task)."""

    def __init__(self) -> None:
        self._line: deque[_Waiter] = deque()

    def enter(self, account: CountingAccount, amount: int) -> Grant | None:
        if not self._line and account.fits(amount):
            account.in_use += amount
            return Grant(account, amount)
        return None

    async def wait(self, account: CountingAccount, amount: int) -> Grant:
        waiter = _Waiter(account, amount)
        self._line.append(waiter)

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._line.remove(waiter)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        assert waiter.grant is not None
        return waiter.grant

    def release(self, grant: Grant) -> None:
        grant.account.in_use -= grant.amount
        line = self._line
        while line and line[0].account.fits(line[0].amount):
            waiter = line.popleft()
            waiter.account.in_use += waiter.amount
            waiter.grant = Grant(waiter.account, waiter.amount)
            trio.lowlevel.reschedule(waiter.task)


class FloorContext:
    """The job's state, as the runtime and the body see it."""

    __slots__ = ("attempt", "grant", "job_id", "nursery", "state", "timer")

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.state = State.QUEUED
        self.attempt = 0
        self.grant: Grant | None = None
        self.nursery: trio.Nursery | None = None
        self.timer: _Entry | None = None

    def transition(self, state: State) -> None:
        if self.state in (State.COMPLETED, State.FAILED):
            raise RuntimeError(f"job {self.job_id} is already {self.state.value}")
        self.state = state

    def interrupt(self) -> None:
        """Phase one: ask the body to stop; phase two would cancel the nursery later."""
        if self.nursery is not None:
            self.nursery.cancel_scope.deadline = trio.current_time() + 1.0


CURRENT: ContextVar[FloorContext | None] = ContextVar("floor_job", default=None)


class FloorHandle:
    """What ``submit`` answers: the job's result once it has one."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    async def result(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


Body = Callable[[FloorContext], Awaitable[Any]]


class FloorRuntime:
    def __init__(self, nursery: trio.Nursery, timekeeper: Timekeeper, monitor: Monitor) -> None:
        self._nursery = nursery
        self._timekeeper = timekeeper
        self._monitor = monitor
        self._ids = itertools.count()
        self.events: list[tuple[State, int]] = []

    def submit(self, body: Body, account: CountingAccount, amount: int = 1) -> FloorHandle:
        context = FloorContext(next(self._ids))
        handle = FloorHandle()
        self._nursery.start_soon(self._run, body, context, handle, account, amount)
        return handle

    async def _run(
        self,
        body: Body,
        context: FloorContext,
        handle: FloorHandle,
        account: CountingAccount,
        amount: int,
    ) -> None:
        CURRENT.set(context)
        context.transition(State.SCHEDULED)
        context.timer = self._timekeeper.call_at(trio.current_time() + TIMEOUT, context.interrupt)
        grant = self._monitor.enter(account, amount)
        if grant is None:
            grant = await self._monitor.wait(account, amount)
        context.grant = grant
        context.attempt += 1
        context.transition(State.RUNNING)
        try:
            async with trio.open_nursery() as nursery:
                context.nursery = nursery
                handle._value = await body(context)
        except Exception as exc:  # noqa: BLE001 - the body's failure is the job's result
            handle._error = exc
            context.transition(State.FAILED)
        else:
            context.transition(State.COMPLETED)
        finally:
            context.nursery = None
            context.grant = None
            self._monitor.release(grant)
            self._timekeeper.cancel(context.timer)
            context.timer = None
        self.events.append((context.state, context.job_id))
        handle._done.set()


@contextlib.asynccontextmanager
async def open_floor() -> AsyncIterator[FloorRuntime]:
    """A floor runtime with its timekeeper running, for the length of the block."""
    timekeeper = Timekeeper()
    async with trio.open_nursery() as system:
        await system.start(timekeeper.run)
        async with trio.open_nursery() as jobs:
            yield FloorRuntime(jobs, timekeeper, Monitor())
        system.cancel_scope.cancel()


async def nop(context: FloorContext) -> None:
    """The body every floor job runs: it returns at once."""
    return None
