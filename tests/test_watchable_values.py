"""Values people wait on (trio-util's AsyncValue): a counting gate's use, the memory gate's zone,
the dispatcher's state. Virtual time throughout."""

from __future__ import annotations

import warnings

import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate, MemoryZone
from nucleo_trio.admission.memory_reader import MemoryReading
from nucleo_trio.dispatch import DispatcherState, JobDispatcher, open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow


class Dial:
    """A memory reader whose reading the test sets: ``used`` percent of 100 bytes."""

    def __init__(self, used: int) -> None:
        self.used = used

    def read(self) -> MemoryReading:
        return MemoryReading(self.used, 100)


def _render(slots: CountingGate, seconds: float) -> type[Tool[str]]:
    class Render(Tool[str]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(slots)

        async def execute(self, context: JobContext) -> str:
            await trio.sleep(seconds)
            return "rendered"

    return Render


async def test_a_gates_use_is_a_value_to_wait_on(autojump_clock: trio.testing.MockClock) -> None:
    slots = CountingGate("render", 2)
    Render = _render(slots, 10)
    seen: list[tuple[int, float]] = []
    async with open_dispatcher() as dispatcher, trio.open_nursery() as nursery:

        async def follow() -> None:
            async for used in slots.use.eventual_values():
                seen.append((used, trio.current_time()))

        nursery.start_soon(follow)
        root = workflow("alice", "render")
        for _ in range(5):
            dispatcher.submit(Render(root))
        await slots.use.wait_value(2)
        assert trio.current_time() == 0
        # At 10 s and 20 s each job that ends hands its permit straight to the next one waiting
        # (the pass runs in the releasing task), so the use stays at 2 then; it first reaches
        # 0 at 30 s, once the last job is done, and stays there.
        assert await slots.use.wait_value(lambda n: n == 0) == 0
        assert trio.current_time() == 30
        await slots.use.wait_value(0, held_for=1)
        assert trio.current_time() == 31
        nursery.cancel_scope.cancel()
    # eventual_values may skip values set within one scheduler step, never the last one.
    assert seen[-1] == (0, 30.0)
    assert {time for _, time in seen} <= {0.0, 10.0, 20.0, 30.0}
    assert max(used for used, _ in seen) == 2
    assert slots.in_use == 0 and isinstance(slots.in_use, int)


async def test_use_read_late_starts_from_the_permits_held_then() -> None:
    slots = CountingGate("render", 4)
    assert slots.try_take([3], [])
    use = slots.use
    assert use.value == 3
    assert slots.use is use, "one value per gate"
    slots.give([None])
    assert use.value == 2
    assert slots.try_take([None, None], [])
    assert use.value == 4
    with pytest.raises(ValueError, match="exceeds the 4 in use"):
        slots.give([5])
    assert use.value == 4, "a refused give moves nothing"


async def test_the_memory_zone_follows_the_latch_and_memorys_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = CountingGate("render", 5)
    Render = _render(slots, 1)
    seen: list[tuple[MemoryZone, float]] = []
    async with open_dispatcher() as dispatcher:
        gate = dispatcher.memory_gate
        assert gate is not None
        dial = Dial(50)
        gate.use_reader(dial)
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async for zone in gate.zone.eventual_values():
                    seen.append((zone, trio.current_time()))

            nursery.start_soon(follow)
            await trio.sleep(1)
            dial.used = 97  # over the latch: nothing resourceful is granted
            root = workflow("bob", "render")
            handles = [dispatcher.submit(Render(root)) for _ in range(3)]
            await gate.zone.wait_value(MemoryZone.CRITICAL)
            assert trio.current_time() == 1
            await trio.sleep(7.5)
            assert gate.zone.value is MemoryZone.CRITICAL
            assert slots.in_use == 0
            dial.used = 50  # below 90 %: the next look (every 2 s while latched) clears it
            await gate.zone.wait_value(MemoryZone.GREEN)
            for handle in handles:
                assert await handle.result() == "rendered"
            nursery.cancel_scope.cancel()
    # Latched at 1 s, looked at again every 2 s: cleared at 9 s with three jobs in memory's
    # line (draining, one per 50 ms at this level), the line empty at 9.1 s.
    assert [zone for zone, _ in seen] == [
        MemoryZone.GREEN,
        MemoryZone.CRITICAL,
        MemoryZone.DRAINING,
        MemoryZone.GREEN,
    ]
    assert [round(at, 3) for _, at in seen] == [0.0, 1.0, 9.0, 9.1]


async def test_a_cancel_in_memorys_line_and_a_status_read_move_the_zone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = CountingGate("render", 5)
    Render = _render(slots, 1)
    async with open_dispatcher() as dispatcher:
        gate = dispatcher.memory_gate
        assert gate is not None
        gate.use_reader(Dial(97))
        handle = dispatcher.submit(Render(workflow("carol", "render")))
        await gate.zone.wait_value(MemoryZone.CRITICAL)
        await trio.sleep(1)
        gate.use_reader(Dial(50))
        await gate.zone.wait_value(MemoryZone.GREEN)
        assert await handle.result() == "rendered"
        # Now one that leaves memory's line by a cancel, not a grant.
        gate.use_reader(Dial(97))
        waiting = dispatcher.submit(Render(workflow("carol", "again")))
        await gate.zone.wait_value(MemoryZone.CRITICAL)
        await trio.testing.wait_all_tasks_blocked()
        assert dispatcher.admission.held_on(gate) == 1
        gate.use_reader(Dial(91))  # under the latch's 95 %, above its 90 % recovery: still set
        assert dispatcher.cancel(waiting.job_id)
        await trio.testing.wait_all_tasks_blocked()
        assert dispatcher.admission.held_on(gate) == 0
        assert gate.zone.value is MemoryZone.CRITICAL
        # With nobody asking, nothing reads memory: the zone is the latch as last read until
        # a look (a job's demand, or a status read) finds it clear.
        gate.use_reader(Dial(50))
        await trio.sleep(60)
        assert gate.zone.value is MemoryZone.CRITICAL
        assert gate.status().zone is MemoryZone.GREEN
        assert gate.zone.value.name == "GREEN"


async def test_the_dispatcher_state_runs_new_running_stopping_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dispatcher = JobDispatcher()
    assert dispatcher.state.value is DispatcherState.NEW
    transitions: list[tuple[DispatcherState, DispatcherState]] = []
    async with trio.open_nursery() as outer:

        async def follow() -> None:
            async for new, old in dispatcher.state.transitions():
                transitions.append((old, new))

        outer.start_soon(follow)
        async with trio.open_nursery() as nursery:
            await nursery.start(dispatcher.run)
            await trio.sleep(2)
            await dispatcher.shutdown()
        await trio.testing.wait_all_tasks_blocked()
        outer.cancel_scope.cancel()
    assert transitions == [
        (DispatcherState.NEW, DispatcherState.RUNNING),
        (DispatcherState.RUNNING, DispatcherState.STOPPING),
        (DispatcherState.STOPPING, DispatcherState.STOPPED),
    ]


def test_trio_util_imports_without_a_deprecation_warning_on_this_trio() -> None:
    import importlib

    import trio_util  # type: ignore[import-untyped]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(trio_util)

        async def main() -> int:
            value = trio_util.AsyncValue(1)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(value.wait_value, 2)
                await trio.testing.wait_all_tasks_blocked()
                value.value = 2
            return int(value.value)

        assert trio.run(main) == 2
