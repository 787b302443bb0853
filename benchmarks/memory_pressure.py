"""(e) Memory pressure: jobs that each hold real memory, against a configured limit.

The seed ("Memory Is a Resource Too"): memory is the one resource nothing declares, so the gate
does not budget it; it latches at 95 % of the limit, holds a line, and lets it go at a pace
memory can take. This benchmark runs a workload that needs that: a stream of jobs, each holding
a real allocation for a while, arriving faster than the memory limit can hold them all.

The workload, the same on both sides, on the real clock and with real memory:

* the limit is this process's resident memory at the start plus room for 8 jobs' allocations
  (configured as ``DispatcherConfig(memory=MemoryConfig(limit=...))``);
* N jobs (60; 30 with ``--quick``) arrive one every 20 ms, each a :class:`Tool` with one permit
  on a roomy counting gate (so its demand is resourceful and meets memory), whose ``execute``
  allocates 48 MiB (above glibc's largest mmap threshold, so freeing it returns it to the system
  at once), touches it page by page, holds it 250 ms and frees it.

Arrivals every 20 ms of jobs that live 250 ms make about 13 at a time, 600 MiB, well over the
8 jobs' room. With the gate (the dispatcher's default) the latch sets at 95 % of the limit and
memory's line drains as jobs finish; without it (``MemoryConfig(enabled=False)``) every job
starts at once.

Measured: the peak resident memory (read right after every allocation, when it peaks, and by a
sampler every 5 ms), above the starting level and as a share of the limit, and the throughput
(jobs per second from the first arrival to the last completion) on each side. The gate holds
the peak under the latch plus one job's allocation; without it the peak goes over the limit.
"""

from __future__ import annotations

import gc

import attrs
import psutil  # type: ignore[import-untyped, unused-ignore]
import trio

from nucleo_trio.admission import CountingGate, MemoryPressureGate
from nucleo_trio.admission.memory_gate import CRITICAL_RATIO
from nucleo_trio.dispatch import DispatcherConfig, MemoryConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

from ._harness import Row, progress, verdict

NAME = "memory"
TITLE = "memory pressure: jobs holding real allocations against a configured limit"

MIB = 1024**2
ALLOCATION = 40 * MIB
ROOM_JOBS = 8
ARRIVAL_EVERY = 0.050
HOLD = 0.750
SAMPLE_EVERY = 0.005
PAGE = 4096


@attrs.define
class Ledger:
    """What one run saw: peaks of resident memory, and when the jobs ran."""

    process: psutil.Process
    peak: int = 0
    first_arrival: float = 0.0
    last_completion: float = 0.0
    running: int = 0
    peak_running: int = 0

    def observe(self) -> None:
        self.peak = max(self.peak, int(self.process.memory_info().rss))


class Ballast(Tool[int]):
    """Holds ``ALLOCATION`` bytes of real, touched memory for ``HOLD`` seconds."""

    def __init__(self, parent: Identifiable, workers: CountingGate, ledger: Ledger) -> None:
        super().__init__(parent)
        self.workers = workers
        self.ledger = ledger

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.workers)

    async def execute(self, context: JobContext) -> int:
        ledger = self.ledger
        ledger.running += 1
        ledger.peak_running = max(ledger.peak_running, ledger.running)
        ballast = bytearray(ALLOCATION)
        ballast[::PAGE] = b"\x01" * len(range(0, ALLOCATION, PAGE))
        ledger.observe()
        await trio.sleep(HOLD)
        size = len(ballast)
        del ballast
        ledger.running -= 1
        return size


@attrs.frozen
class Outcome:
    base: int
    limit: int
    peak: int
    jobs_per_second: float
    peak_running: int
    limit_source: str


async def _workload(jobs: int, limit: int, gated: bool, ledger: Ledger) -> str:
    memory = MemoryConfig(limit=limit) if gated else MemoryConfig(enabled=False)
    async with open_dispatcher(DispatcherConfig(memory=memory)) as dispatcher:
        source = "none"
        if isinstance(dispatcher.memory_gate, MemoryPressureGate):
            source = getattr(dispatcher.memory_gate.reader, "limit_source", "plugin")
        workers = CountingGate("workers", 10 * jobs)
        root = workflow("bench", "memory")
        done = trio.Event()

        async def sampler() -> None:
            while not done.is_set():
                ledger.observe()
                await trio.sleep(SAMPLE_EVERY)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler)
            ledger.first_arrival = trio.current_time()
            handles = []
            for _ in range(jobs):
                handles.append(dispatcher.submit(Ballast(root, workers, ledger)))
                await trio.sleep(ARRIVAL_EVERY)
            for handle in handles:
                await handle.result()
            ledger.last_completion = trio.current_time()
            done.set()
        return source


def _measure(jobs: int, gated: bool) -> Outcome:
    gc.collect()
    process = psutil.Process()
    base = int(process.memory_info().rss)
    limit = base + ROOM_JOBS * ALLOCATION
    ledger = Ledger(process)
    source = trio.run(_workload, jobs, limit, gated, ledger)
    elapsed = ledger.last_completion - ledger.first_arrival
    return Outcome(base, limit, ledger.peak, jobs / elapsed, ledger.peak_running, source)


def run(quick: bool) -> list[Row]:
    jobs = 30 if quick else 60
    off = _measure(jobs, gated=False)
    progress(
        f"  without the gate: peak {(off.peak - off.base) / MIB:.0f} MiB over the start "
        f"({off.peak / off.limit:.0%} of the limit), {off.jobs_per_second:.1f} jobs/s"
    )
    on = _measure(jobs, gated=True)
    progress(
        f"  with the gate: peak {(on.peak - on.base) / MIB:.0f} MiB over the start "
        f"({on.peak / on.limit:.0%} of the limit), {on.jobs_per_second:.1f} jobs/s"
    )
    bound = CRITICAL_RATIO * on.limit + ALLOCATION
    room = f"limit = start + {ROOM_JOBS} x {ALLOCATION // MIB} MiB ({on.limit_source})"
    return [
        Row(NAME, f"{jobs} jobs x {ALLOCATION // MIB} MiB, {room}", on.limit / MIB, "MiB"),
        Row(
            NAME,
            "gate on: peak RSS",
            on.peak / MIB,
            "MiB",
            f"< latch + 1 job = {bound / MIB:,.0f}",
            verdict(on.peak < bound),
        ),
        Row(NAME, "gate on: peak share of the limit", on.peak / on.limit * 100, "%"),
        Row(NAME, "gate on: most jobs holding memory at once", on.peak_running, "jobs"),
        Row(NAME, "gate on: throughput", on.jobs_per_second, "jobs/s"),
        Row(
            NAME,
            "gate off: peak RSS",
            off.peak / MIB,
            "MiB",
            f"> limit = {off.limit / MIB:,.0f}",
            verdict(off.peak > off.limit),
        ),
        Row(NAME, "gate off: peak share of the limit", off.peak / off.limit * 100, "%"),
        Row(NAME, "gate off: most jobs holding memory at once", off.peak_running, "jobs"),
        Row(NAME, "gate off: throughput", off.jobs_per_second, "jobs/s"),
    ]
