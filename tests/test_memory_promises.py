"""Memory that jobs promise: declared bytes reserved against the headroom under the latch,
given back at release, and an estimate learnt per job class for jobs that declare nothing
(issue 13). Virtual time, a fake memory of 1 GiB moved by the jobs themselves."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, CountingGate, Demand, MemoryPressureGate
from nucleo_trio.admission.memory_gate import LEARN_SECONDS, MemoryClaim
from nucleo_trio.admission.memory_reader import MemoryReading
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow
from nucleo_trio.jobs.identity import Identifiable

MIB = 2**20
LIMIT = 1024 * MIB


class Memory:
    """A memory reader of ``LIMIT`` bytes whose use the test's jobs move; keeps its peak."""

    def __init__(self, used: int = 100 * MIB) -> None:
        self.used = used
        self.peak = used

    def grow(self, nbytes: int) -> None:
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def read(self) -> MemoryReading:
        return MemoryReading(self.used, LIMIT)


class Allocates(Tool[None]):
    """Allocates ``nbytes`` a second after it is admitted (lazily), holds them, frees them."""

    def __init__(
        self, parent: Identifiable, memory: Memory, nbytes: int, *, declare: Any = None
    ) -> None:
        super().__init__(parent)
        self.memory, self.nbytes, self.declare = memory, nbytes, declare
        self.timeout = 600.0
        self.started_at: float | None = None

    def requirements(self) -> JobRequirements:
        needs = JobRequirements().require_http()
        return needs if self.declare is None else needs.require_memory(self.declare)

    async def execute(self, context: JobContext) -> None:
        self.started_at = trio.current_time()
        await trio.sleep(1)
        self.memory.grow(self.nbytes)
        await trio.sleep(10)
        self.memory.grow(-self.nbytes)


class Other(Allocates):
    """A second class, so estimates are seen to be per class."""


def claim(nbytes: int, job_class: str = "Job") -> MemoryClaim:
    return MemoryClaim(job_class, nbytes)


# --------------------------------------------------------------------------------------------
# Declaring
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "nbytes"),
    [(50 * MIB, 50 * MIB), ("50MiB", 50 * MIB), ("2 GB", 2 * 10**9), (1, 1), (4096.0, 4096)],
)
def test_a_job_declares_bytes_or_a_size(size: Any, nbytes: int) -> None:
    needs = JobRequirements().require_memory(size)
    assert needs.memory_bytes == nbytes
    assert needs.has_resources  # a promise is a resource: the job needs a timeout (SUB-08)


@pytest.mark.parametrize("hostile", [0, -1, True, False, "lots", "8 parsecs", 1.5, None, [50]])
def test_a_hostile_declaration_is_refused_by_name(hostile: Any) -> None:
    with pytest.raises(ValueError, match=r"require_memory") as refused:
        JobRequirements().require_memory(hostile)
    assert repr(hostile) in str(refused.value)


def test_the_gate_resolves_a_claim_to_its_reservations_and_refuses_other_amounts() -> None:
    gate = MemoryPressureGate(Memory())
    assert gate.account_for(None) is gate
    assert gate.account_for(claim(MIB)) is gate.reservations
    assert gate.reservations.limiter_name == "memory-reserved"
    with pytest.raises(ValueError, match="'50MiB'"):
        gate.account_for("50MiB")
    with pytest.raises(ValueError, match="nbytes"):
        MemoryClaim("Job", 0)


# --------------------------------------------------------------------------------------------
# Reserving, inside a real Admission
# --------------------------------------------------------------------------------------------


async def test_declared_bytes_are_reserved_and_given_back_at_release(
    autojump_clock: trio.testing.MockClock,
) -> None:
    memory = Memory()
    gate = MemoryPressureGate(memory)
    admission = Admission(gate)
    work = CountingGate("work", 100)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        grant = await admission.admit(Demand().add(work).add(gate, claim(300 * MIB)))
        assert gate.reservations.in_use == 300 * MIB
        assert gate.reservations.status().unseen_bytes == 300 * MIB
        memory.grow(200 * MIB)  # the job allocated two thirds of its promise
        assert gate.reservations.status().unseen_bytes == 100 * MIB
        admission.release(grant)
        assert gate.reservations.in_use == 0
        assert work.in_use == 0
        admission.stop()


async def test_a_promise_that_does_not_fit_waits_for_a_release_holding_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Headroom under the latch is 95 % of 1 GiB less 100 MiB in use: 872 MiB. Two 400 MiB
    promises fit; the third waits, holding no work slot, until one is given back."""
    memory = Memory()
    gate = MemoryPressureGate(memory)
    admission = Admission(gate)
    work = CountingGate("work", 10)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        first = await admission.admit(Demand().add(work).add(gate, claim(400 * MIB)))
        await admission.admit(Demand().add(work).add(gate, claim(400 * MIB)))
        third: list[Any] = []

        async def ask() -> None:
            third.append(await admission.admit(Demand().add(work).add(gate, claim(400 * MIB))))

        nursery.start_soon(ask)
        await trio.sleep(30)
        assert third == [] and work.in_use == 2
        admission.release(first)
        await trio.testing.wait_all_tasks_blocked()
        assert len(third) == 1 and gate.reservations.in_use == 800 * MIB
        admission.stop()


async def test_a_promise_beyond_the_latch_is_refused_naming_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = MemoryPressureGate(Memory())
    admission = Admission(gate)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        with pytest.raises(UncorrectableError, match=r"Huge promises 2147483648 bytes"):
            await admission.admit(Demand().add(gate, MemoryClaim("Huge", 2 * LIMIT)))
        admission.stop()


async def test_jobs_that_promise_nothing_meet_the_seeds_gate_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No declaration and no estimate yet: nothing is added to the demand, and a burst admitted
    while memory is low overshoots by all of it, as the seed's gate always did."""
    memory = Memory()
    async with open_dispatcher(DispatcherConfig(), memory=MemoryPressureGate(memory)) as d:
        root = workflow("alice", "burst")
        jobs = [Allocates(root, memory, 50 * MIB) for _ in range(30)]
        handles = [d.submit(job) for job in jobs]
        for handle in handles:
            await handle.result()
    assert memory.peak == 100 * MIB + 30 * 50 * MIB  # > the limit: the seed cannot see ahead


async def test_a_burst_of_declared_jobs_stays_under_the_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    memory = Memory()
    gate = MemoryPressureGate(memory)
    async with open_dispatcher(DispatcherConfig(), memory=gate) as d:
        root = workflow("alice", "burst")
        jobs = [Allocates(root, memory, 50 * MIB, declare="50MiB") for _ in range(60)]
        handles = [d.submit(job) for job in jobs]
        for handle in handles:
            await handle.result()
        assert gate.reservations.in_use == 0
    assert memory.peak <= 0.95 * LIMIT
    assert memory.peak >= 0.95 * LIMIT - 50 * MIB  # the headroom is used, not wasted
    assert memory.used == 100 * MIB


# --------------------------------------------------------------------------------------------
# Learning
# --------------------------------------------------------------------------------------------


async def test_an_estimate_learnt_from_a_class_is_applied_to_its_next_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    memory = Memory()
    gate = MemoryPressureGate(memory)
    name = f"{Allocates.__module__}.{Allocates.__qualname__}"
    async with open_dispatcher(DispatcherConfig(), memory=gate) as d:
        root = workflow("alice", "learn")
        assert gate.estimate(name) is None
        # One job alone: its growth is all its own. It frees what it allocated before it
        # releases; the peak is seen while it runs (the scheduler's idle moments are sampled).
        await d.submit(Allocates(root, memory, 64 * MIB)).result()
        assert memory.used == 100 * MIB
        assert gate.estimate(name) == 64 * MIB
        # The next burst of the class carries the estimate: it stays under the latch.
        handles = [d.submit(Allocates(root, memory, 64 * MIB)) for _ in range(40)]
        for handle in handles:
            await handle.result()
        assert gate.estimate(f"{Other.__module__}.{Other.__qualname__}") is None
    assert memory.peak <= 0.95 * LIMIT


async def test_a_burst_shares_its_growth_among_its_jobs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Thirty jobs of a class that declare nothing all start at once (no estimate yet: the
    seed's gate); the class learns about one job's share of the growth, not the whole burst's."""
    memory = Memory()
    gate = MemoryPressureGate(memory)
    name = f"{Other.__module__}.{Other.__qualname__}"
    async with open_dispatcher(DispatcherConfig(), memory=gate) as d:
        root = workflow("alice", "learn")
        handles = [d.submit(Other(root, memory, 20 * MIB)) for _ in range(30)]
        for handle in handles:
            await handle.result()
    learnt = gate.estimate(name)
    assert learnt is not None and 20 * MIB <= learnt <= 40 * MIB


class Spikes(Tool[None]):
    """Allocates ``nbytes`` at once, holds them a tenth of a second, frees them."""

    def __init__(self, parent: Identifiable, memory: Memory, nbytes: int) -> None:
        super().__init__(parent)
        self.memory, self.nbytes = memory, nbytes
        self.timeout = 600.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_http()

    async def execute(self, context: JobContext) -> None:
        self.memory.grow(self.nbytes)
        await trio.sleep(0.1)
        self.memory.grow(-self.nbytes)


async def test_a_class_is_measured_at_most_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """LEARN_SECONDS: a job of a class that starts within a second of the class's last
    measurement is not measured (its growth leaves the estimate alone); the first one a second
    later is."""
    memory = Memory()
    gate = MemoryPressureGate(memory)
    name = f"{Spikes.__module__}.{Spikes.__qualname__}"
    async with open_dispatcher(DispatcherConfig(), memory=gate) as d:
        root = workflow("alice", "learn")
        await d.submit(Spikes(root, memory, 64 * MIB)).result()
        assert gate.estimate(name) == 64 * MIB
        await d.submit(Spikes(root, memory, 256 * MIB)).result()  # 0.1 s later: not measured
        assert gate.estimate(name) == 64 * MIB
        await trio.sleep(LEARN_SECONDS)
        await d.submit(Spikes(root, memory, 256 * MIB)).result()
        assert gate.estimate(name) == 256 * MIB


def test_an_estimate_is_an_exponentially_weighted_maximum() -> None:
    gate = MemoryPressureGate(Memory())
    gate.observe("Job", 100 * MIB)
    gate.observe("Job", 20 * MIB)  # a smaller run pulls it down a quarter of the way
    assert gate.estimate("Job") == 80 * MIB
    gate.observe("Job", 200 * MIB)  # a larger one replaces it
    assert gate.estimate("Job") == 200 * MIB
    gate.observe("Job", -5)  # a job that freed memory grew by nothing
    assert gate.estimate("Job") == 150 * MIB
    assert gate.estimate("Other") is None


async def test_growth_of_jobs_that_promise_nothing_keeps_no_promise(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten running jobs, five of which promised 100 MiB; 300 MiB of growth since the first
    promise is read as 150 MiB of promises kept (the promising half), not 300."""
    memory = Memory()
    gate = MemoryPressureGate(memory)
    admission = Admission(gate)
    work = CountingGate("work", 100)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        for i in range(10):
            demand = Demand().add(work)
            if i % 2:
                demand.add(gate, claim(100 * MIB))
            await admission.admit(demand)
        memory.grow(300 * MIB)
        assert gate.reservations.status().unseen_bytes == 500 * MIB - 150 * MIB
        admission.stop()


def test_a_claim_moves_none_of_the_seeds_state() -> None:
    """With three held on memory's line, the seed's take paces the next release; a claim is
    the reservation's question only: it stamps no release, uses up no completion and commits
    no penalty, so memory's drain goes on exactly as before."""
    gate = MemoryPressureGate(Memory(), clock=lambda: 100.0)
    gate.observe_held(lambda: 3)
    assert gate.try_take([], [])
    assert not gate.fits([], [])  # the next release waits for the delay
    before = gate.status()
    assert gate.try_take([claim(MIB)], []) and gate.try_take([claim(MIB)], [])
    gate.give([claim(MIB)])
    assert not gate.fits([], [])  # a promise given back is no completion
    assert gate.status() == before
    gate.give([])
    assert gate.fits([], [])


async def test_a_job_that_promises_only_memory_meets_the_gate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    memory = Memory()
    gate = MemoryPressureGate(memory)
    seen: list[int] = []

    class OnlyMemory(Allocates):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_memory("200MiB")

        async def execute(self, context: JobContext) -> None:
            seen.append(gate.reservations.in_use)

    async with open_dispatcher(DispatcherConfig(), memory=gate) as d:
        await d.submit(OnlyMemory(workflow("alice", "one"), memory, 0)).result()
    assert seen == [200 * MIB] and gate.reservations.in_use == 0
