"""Issue 20, item 1: the ``open_dispatcher`` block ends like a nursery.

Leaving the block normally waits for every job submitted in it (queued, parked, waiting on a
dependency, running, their children, a delayed submission) to settle, then stops; a recurring
heartbeat does not hold it open. An exception or a cancellation leaving the block, also while it
waits, is the fast stop; ``await dispatcher.shutdown()`` inside the block is the graceful stop
with a deadline. Tested from the outside: the public API, an outer cancel scope, a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, DispatcherState, MemoryConfig, open_dispatcher
from nucleo_trio.heartbeat import FixedInterval, ScheduleHeartbeat, heartbeat_now
from nucleo_trio.jobs import (
    JobContext,
    JobHandle,
    JobRequirements,
    JobState,
    Orchestrator,
    Tool,
    workflow,
)

from .jobs_for_tests import Echo

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging


def one_slot(gate: CountingGate) -> Any:
    return lambda: JobRequirements().require_rate_limiter(gate)


async def test_a_normal_exit_waits_for_queued_parked_dependent_and_running_jobs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Twenty jobs on a one-slot gate (one running, the rest parked), one waiting on a
    dependency, one delayed: leaving the block runs every one to completion, in virtual time."""
    gate = CountingGate("slot", 1)
    handles: list[JobHandle[Any]] = []
    start = trio.current_time()
    async with open_dispatcher() as dispatcher:
        root = workflow("u", "twenty")
        handles = [
            dispatcher.submit(Echo(root, i, sleep=1, requirements=one_slot(gate)))
            for i in range(20)
        ]
        handles.append(dispatcher.submit(Echo(root, "after"), dependencies=[handles[-1]]))
        delayed = dispatcher.submit_with_delay(Echo(workflow("u", "later"), "late"), 30)
    assert [await h.result() for h in handles] == [*range(20), "after"]
    assert await (await delayed.handle()).result() == "late"
    assert trio.current_time() - start == pytest.approx(30, abs=0.1)
    assert gate.in_use == 0
    assert dispatcher.state.value is DispatcherState.STOPPED


class FanOut(Orchestrator[list[int]]):
    """Submits its children, then grandchildren from a child orchestrator, and waits."""

    def __init__(self, parent: Any, depth: int) -> None:
        super().__init__(parent)
        self.depth = depth

    async def execute(self, context: JobContext) -> list[int]:
        await trio.sleep(1)
        handles: list[JobHandle[Any]] = [
            context.submit(Echo(context.job, i, sleep=2)) for i in range(3)
        ]
        if self.depth:
            handles.append(context.submit(FanOut(context.job, self.depth - 1)))
        return [
            len(await h.result()) if self.depth and i == 3 else 1 for i, h in enumerate(handles)
        ]


async def test_a_normal_exit_waits_for_the_children_jobs_submit_after_the_block_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An orchestrator that submits its children only after the block's body has ended: the
    exit waits for them and for their own children, and nothing is cancelled."""
    async with open_dispatcher() as dispatcher:
        tree = dispatcher.submit(FanOut(workflow("u", "tree"), depth=2))
    assert await tree.result() == [1, 1, 1, 4]
    assert tree.state is JobState.COMPLETED


class Tick(Tool[None]):
    runs = 0

    async def execute(self, context: JobContext) -> None:
        type(self).runs += 1


async def test_a_recurring_heartbeat_does_not_hold_the_block_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A heartbeat that fires every second, and a job that runs ten seconds: the exit waits
    for the job only; no fire starts while it waits, and the block is left at once after."""
    Tick.runs = 0
    start = trio.current_time()
    async with open_dispatcher() as dispatcher:
        dispatcher.schedule_heartbeat(
            ScheduleHeartbeat(Tick, "tick", heartbeat_now() + 1, recurrence=FixedInterval(1)),
            "ops",
        )
        await trio.sleep(3.5)
        fired_in_body = Tick.runs
        slow = dispatcher.submit(Echo(workflow("u", "slow"), sleep=10))
    assert fired_in_body == 3
    assert Tick.runs == fired_in_body, "no fire while the exit waits"
    assert await slow.result() == "ok"
    assert trio.current_time() - start == pytest.approx(13.5, abs=0.1)


async def test_an_exception_leaving_the_block_is_the_fast_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The body raises: the running and the parked jobs are cancelled at once, every handle
    settled, and the exception comes out bare."""
    gate = CountingGate("slot", 1)
    start = trio.current_time()
    with pytest.raises(KeyError, match="the body broke"):
        async with open_dispatcher() as dispatcher:
            root = workflow("u", "broken")
            running = dispatcher.submit(Echo(root, sleep=100, requirements=one_slot(gate)))
            parked = dispatcher.submit(Echo(root, sleep=100, requirements=one_slot(gate)))
            await trio.sleep(1)
            raise KeyError("the body broke")
    assert trio.current_time() - start < 2
    for handle in (running, parked):
        assert handle.done and handle.state is JobState.CANCELLED
    assert gate.in_use == 0


async def test_an_outer_cancel_scope_while_the_exit_waits_is_the_fast_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``move_on_after`` around the block fires while the exit waits for a 100 s job: the job is
    cancelled, its handle settled, and the cancel scope catches its own cancellation."""
    handles: list[JobHandle[Any]] = []
    with trio.move_on_after(5) as outer:
        async with open_dispatcher() as dispatcher:
            handles.append(dispatcher.submit(Echo(workflow("u", "long"), sleep=100)))
    assert outer.cancelled_caught
    assert trio.current_time() == pytest.approx(5, abs=0.1)
    (handle,) = handles
    assert handle.state is JobState.CANCELLED
    with pytest.raises(errors.JobCancelledError):
        await handle.result()
    assert dispatcher.state.value is DispatcherState.STOPPED


async def test_shutdown_inside_the_block_is_the_graceful_stop_with_a_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``await dispatcher.shutdown(5)``: the parked job is refused, the running one gets 5 s,
    then is interrupted; a job still queued is cancelled."""
    gate = CountingGate("slot", 1)
    async with open_dispatcher() as dispatcher:
        root = workflow("u", "stop")
        running = dispatcher.submit(Echo(root, sleep=100, requirements=one_slot(gate)))
        parked = dispatcher.submit(Echo(root, requirements=one_slot(gate)))
        await trio.sleep(1)
        await dispatcher.shutdown(5)
    assert trio.current_time() == pytest.approx(6, abs=0.1)
    with pytest.raises(errors.UncorrectableError, match="Admission stopped"):
        await parked.result()
    assert running.state is JobState.CANCELLED
    assert gate.in_use == 0


class StopsTheDispatcher(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        await trio.sleep(1)
        await context.dispatcher.shutdown(2)
        return "asked"


async def test_a_job_that_calls_shutdown_while_the_exit_waits_ends_the_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stop asked for while the exit waits is the stop that runs: a 100 s job is interrupted
    after the 2 s the stop gives it, instead of holding the block for 100 s."""
    async with open_dispatcher() as dispatcher:
        root = workflow("u", "self-stop")
        long = dispatcher.submit(Echo(root, sleep=100))
        asker = dispatcher.submit(StopsTheDispatcher(root))
    assert await asker.result() == "asked"
    assert long.state is JobState.CANCELLED
    assert trio.current_time() == pytest.approx(3, abs=0.1)


async def test_the_exit_waits_under_a_real_clock_too() -> None:
    """On the real clock, a handful of short jobs submitted last thing in the block all
    complete: nothing is cancelled for having been submitted late."""
    config = DispatcherConfig(memory=MemoryConfig(enabled=False))
    async with open_dispatcher(config) as dispatcher:
        handles = [
            dispatcher.submit(Echo(workflow("u", f"rt{i}"), i, sleep=0.01)) for i in range(5)
        ]
    assert [h.state for h in handles] == [JobState.COMPLETED] * 5
    assert [await h.result() for h in handles] == list(range(5))


PROGRAM = textwrap.dedent(
    """
    import trio
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.jobs import JobContext, Tool, workflow

    class Work(Tool[int]):
        def __init__(self, parent, n):
            super().__init__(parent)
            self.n = n

        async def execute(self, context: JobContext) -> int:
            await trio.sleep(0.01 * (self.n % 5))
            return self.n * self.n

    async def main():
        async with open_dispatcher() as dispatcher:
            handles = [dispatcher.submit(Work(workflow("u", "w"), n)) for n in range(20)]
        print(sum([await h.result() for h in handles]))

    trio.run(main)
    """
)


def test_a_program_that_submits_twenty_jobs_and_leaves_the_block_gets_twenty_results() -> None:
    """The program from the report, run as a user runs it: 20 jobs submitted, the block left at
    once; it prints the sum of the 20 results, and nothing reaches stderr."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sum(n * n for n in range(20)))
    assert done.stderr == ""


async def test_a_job_waiting_for_a_dependency_never_submitted_does_not_hold_the_block(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job names a dependency that nobody submits: once nothing else is left, the exit
    cancels it with a message naming the missing dependency, instead of waiting for good."""
    async with open_dispatcher() as dispatcher:
        root = workflow("u", "stranded")
        never = Echo(root, "never")
        busy = dispatcher.submit(Echo(root, "busy", sleep=5))
        waiting = dispatcher.submit(Echo(root, "after"), dependencies=[never])
    assert await busy.result() == "busy"
    assert trio.current_time() == pytest.approx(5, abs=0.1)
    assert waiting.state is JobState.CANCELLED
    with pytest.raises(errors.JobCancelledError, match=f"waited for {never.name}, which was never"):
        await waiting.result()
    assert dispatcher._graph.held() == dict.fromkeys(dispatcher._graph.held(), 0)


async def test_a_dependency_submitted_late_by_a_running_job_is_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job waits for a dependency that a running orchestrator submits only after 3 s: the
    exit does not take it for stranded, and both complete."""
    root = workflow("u", "late-dependency")
    later = Echo(root, "later")

    class SubmitsLater(Orchestrator[str]):
        async def execute(self, context: JobContext) -> str:
            await trio.sleep(3)
            return await context.submit(later).result()

    async with open_dispatcher() as dispatcher:
        waiting = dispatcher.submit(Echo(root, "after"), dependencies=[later])
        submitter = dispatcher.submit(SubmitsLater(root))
    assert await submitter.result() == "later"
    assert await waiting.result() == "after"
