"""(e) Memory pressure: jobs that each hold real memory, against a configured limit.

The seed ("Memory Is a Resource Too"): memory is the one resource nothing declares, so the gate
latches at 95 % of the limit, holds a line, and lets it go at a pace memory can take. It can only
see what jobs have already allocated, so a burst admitted while memory is low overshoots by all
of it; issue 13 lets a job promise its memory (``JobRequirements.require_memory``), reserved
against the headroom under the latch, and lets the gate learn an estimate per job class for jobs
that promise nothing. Three workloads, each with the gate on and off, on the real clock with real
memory. Every job holds one permit on a roomy counting gate (so its demand is resourceful and
meets memory) and allocates a ``bytearray`` above glibc's largest mmap threshold (so freeing it
gives it back to the system at once), touches it page by page, holds it and frees it.

* **eager**: the limit is the process's resident memory at the start plus room for 8 jobs; N
  jobs (60; 30 with ``--quick``) arrive one every 50 ms, each allocating 40 MiB as it starts and
  holding it 750 ms: about 15 at a time against room for 8. Nothing is declared: the seed's gate.
* **lazy burst**: the limit is 1 GiB; N jobs are submitted at once, and each allocates 50 MiB
  100 ms *after* it is admitted and holds it 500 ms. Run four ways: gate off; gate on with
  nothing declared (the seed alone: all admitted while memory is low); gate on with each job
  declaring ``require_memory("50MiB")``; gate on with nothing declared after one job of the same
  class ran alone (the estimate the gate learnt from it).
* **mix**: the limit is 1 GiB; N jobs arrive one every 20 ms, alternately an eager 40 MiB job
  that declares nothing and a lazy 50 MiB job that declares its 50 MiB; each holds 750 ms.

Measured: the peak resident memory (read right after every allocation, when it peaks, and by a
sampler every 5 ms) as a share of the limit, the most jobs holding memory at once, and the
throughput (jobs per second from the first arrival to the last completion).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

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
GIB_LIMIT = 1024 * MIB
LAZY_ALLOCATION = 50 * MIB
LAZY_AFTER = 0.100
LAZY_HOLD = 0.500
MIX_ARRIVAL_EVERY = 0.020


@attrs.define
class Ledger:
    """What one run saw: peaks of resident memory, and when the jobs ran."""

    process: psutil.Process
    peak: int = 0
    first_arrival: float = 0.0
    last_completion: float = 0.0
    running: int = 0
    peak_running: int = 0
    jobs: int = 0

    def observe(self) -> None:
        self.peak = max(self.peak, int(self.process.memory_info().rss))


class Ballast(Tool[int]):
    """Holds ``size`` bytes of real, touched memory for ``hold`` seconds, allocated ``after``
    seconds into the job (0: as it starts); promises ``declare`` bytes when given."""

    def __init__(
        self,
        parent: Identifiable,
        workers: CountingGate,
        ledger: Ledger,
        *,
        size: int = ALLOCATION,
        hold: float = HOLD,
        after: float = 0.0,
        declare: int | None = None,
    ) -> None:
        super().__init__(parent)
        self.workers = workers
        self.ledger = ledger
        self.size, self.hold, self.after, self.declare = size, hold, after, declare

    def requirements(self) -> JobRequirements:
        needs = JobRequirements().require_rate_limiter(self.workers)
        return needs if self.declare is None else needs.require_memory(self.declare)

    async def execute(self, context: JobContext) -> int:
        ledger = self.ledger
        if self.after:
            await trio.sleep(self.after)
        ledger.running += 1
        ledger.peak_running = max(ledger.peak_running, ledger.running)
        ballast = bytearray(self.size)
        ballast[::PAGE] = b"\x01" * len(range(0, self.size, PAGE))
        ledger.observe()
        await trio.sleep(self.hold)
        size = len(ballast)
        del ballast
        ledger.running -= 1
        return size


class LazyBallast(Ballast):
    """The lazy burst's class: allocates after it is admitted (its estimate is its own)."""


class MixedBallast(Ballast):
    """The mix's class."""


@attrs.frozen
class Outcome:
    base: int
    limit: int
    peak: int
    jobs_per_second: float
    peak_running: int
    limit_source: str


Plan = Callable[[Identifiable, CountingGate, Ledger], list[tuple[float, Ballast]]]
"""Builds a workload: (seconds to wait before submitting, the job) in arrival order."""


def _eager(jobs: int) -> Plan:
    def plan(
        root: Identifiable, workers: CountingGate, ledger: Ledger
    ) -> list[tuple[float, Ballast]]:
        return [(ARRIVAL_EVERY, Ballast(root, workers, ledger)) for _ in range(jobs)]

    return plan


def _lazy(jobs: int, declare: bool) -> Plan:
    def plan(
        root: Identifiable, workers: CountingGate, ledger: Ledger
    ) -> list[tuple[float, Ballast]]:
        return [
            (
                0.0,
                LazyBallast(
                    root,
                    workers,
                    ledger,
                    size=LAZY_ALLOCATION,
                    hold=LAZY_HOLD,
                    after=LAZY_AFTER,
                    declare=LAZY_ALLOCATION if declare else None,
                ),
            )
            for _ in range(jobs)
        ]

    return plan


def _mix(jobs: int) -> Plan:
    def plan(
        root: Identifiable, workers: CountingGate, ledger: Ledger
    ) -> list[tuple[float, Ballast]]:
        out: list[tuple[float, Ballast]] = []
        for i in range(jobs):
            if i % 2:
                job = MixedBallast(
                    root,
                    workers,
                    ledger,
                    size=LAZY_ALLOCATION,
                    after=LAZY_AFTER,
                    declare=LAZY_ALLOCATION,
                )
            else:
                job = Ballast(root, workers, ledger)
            out.append((MIX_ARRIVAL_EVERY, job))
        return out

    return plan


async def _workload(
    plan: Plan, limit: int, gated: bool, ledger: Ledger, warm_up: Plan | None
) -> str:
    memory = MemoryConfig(limit=limit) if gated else MemoryConfig(enabled=False)
    async with open_dispatcher(DispatcherConfig(memory=memory)) as dispatcher:
        source = "none"
        if isinstance(dispatcher.memory_gate, MemoryPressureGate):
            source = getattr(dispatcher.memory_gate.reader, "limit_source", "plugin")
        root = workflow("bench", "memory")
        if warm_up is not None:
            # Jobs of the class run alone first: the gate learns their class's estimate.
            scratch = Ledger(ledger.process)
            for _, job in warm_up(root, CountingGate("warm-up", 10), scratch):
                await dispatcher.submit(job).result()
        done = trio.Event()
        arrivals = plan(root, CountingGate("workers", 10 * 1000), ledger)
        ledger.jobs = len(arrivals)

        async def sampler() -> None:
            while not done.is_set():
                ledger.observe()
                await trio.sleep(SAMPLE_EVERY)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler)
            ledger.first_arrival = trio.current_time()
            handles = []
            for wait, job in arrivals:
                handles.append(dispatcher.submit(job))
                if wait:
                    await trio.sleep(wait)
            for handle in handles:
                await handle.result()
            ledger.last_completion = trio.current_time()
            done.set()
        return source


def _measure(
    plan: Plan, gated: bool, *, limit: int | None = None, warm_up: Plan | None = None
) -> Outcome:
    gc.collect()
    process = psutil.Process()
    base = int(process.memory_info().rss)
    if limit is None:
        limit = base + ROOM_JOBS * ALLOCATION
    ledger = Ledger(process)
    source = trio.run(_workload, plan, limit, gated, ledger, warm_up)
    elapsed = ledger.last_completion - ledger.first_arrival
    return Outcome(base, limit, ledger.peak, ledger.jobs / elapsed, ledger.peak_running, source)


def _say(name: str, outcome: Outcome) -> None:
    progress(
        f"  {name}: peak {outcome.peak / MIB:.0f} MiB ({outcome.peak / outcome.limit:.0%} of "
        f"the limit), {outcome.peak_running} at once, {outcome.jobs_per_second:.1f} jobs/s"
    )


def _rows(label: str, outcome: Outcome, target: str = "", met: str = "") -> list[Row]:
    return [
        Row(
            NAME,
            f"{label}: peak RSS, share of the limit",
            outcome.peak / outcome.limit * 100,
            "%",
            target,
            met,
        ),
        Row(NAME, f"{label}: most jobs holding memory at once", outcome.peak_running, "jobs"),
        Row(NAME, f"{label}: throughput", outcome.jobs_per_second, "jobs/s"),
    ]


PROMISED = ("lazy, gate on, require_memory", "lazy, gate on, nothing declared, estimate")
"""The lazy rows held to the target: the gate with a promise, declared or learnt."""


def run(quick: bool) -> list[Row]:
    jobs = 30 if quick else 60
    rows: list[Row] = []

    # Eager: the seed's workload, unchanged.
    off = _measure(_eager(jobs), gated=False)
    _say("eager, gate off", off)
    on = _measure(_eager(jobs), gated=True)
    _say("eager, gate on", on)
    bound = CRITICAL_RATIO * on.limit + ALLOCATION
    room = f"limit = start + {ROOM_JOBS} x {ALLOCATION // MIB} MiB ({on.limit_source})"
    rows.append(
        Row(NAME, f"eager: {jobs} jobs x {ALLOCATION // MIB} MiB, {room}", on.limit / MIB, "MiB")
    )
    rows += _rows(
        "eager, gate on",
        on,
        f"< latch + 1 job = {bound / on.limit * 100:.0f} %",
        verdict(on.peak < bound),
    )
    rows += _rows("eager, gate off", off, "> 100 %", verdict(off.peak > off.limit))

    # The lazy burst, against 1 GiB.
    one_job = f"< limit + 1 job = {(GIB_LIMIT + LAZY_ALLOCATION) / GIB_LIMIT * 100:.0f} %"
    rows.append(
        Row(
            NAME,
            f"lazy burst: {jobs} jobs x {LAZY_ALLOCATION // MIB} MiB allocated "
            f"{LAZY_AFTER * 1000:.0f} ms after admission, limit",
            GIB_LIMIT / MIB,
            "MiB",
        )
    )
    lazy = {
        "lazy, gate off": _measure(_lazy(jobs, False), False, limit=GIB_LIMIT),
        "lazy, gate on, nothing declared (the seed)": _measure(
            _lazy(jobs, False), True, limit=GIB_LIMIT
        ),
        "lazy, gate on, require_memory('50MiB')": _measure(
            _lazy(jobs, True), True, limit=GIB_LIMIT
        ),
        "lazy, gate on, nothing declared, estimate learnt": _measure(
            _lazy(jobs, False), True, limit=GIB_LIMIT, warm_up=_lazy(1, False)
        ),
    }
    for label, outcome in lazy.items():
        _say(label, outcome)
        if label.startswith(PROMISED):
            met = verdict(outcome.peak < GIB_LIMIT + LAZY_ALLOCATION)
            rows += _rows(label, outcome, one_job, met)
        else:
            rows += _rows(label, outcome)

    # The mix, against 1 GiB.
    rows.append(
        Row(
            NAME,
            f"mix: {jobs} jobs every {MIX_ARRIVAL_EVERY * 1000:.0f} ms, eager 40 MiB undeclared "
            "and lazy 50 MiB declared by turns, limit",
            GIB_LIMIT / MIB,
            "MiB",
        )
    )
    mix_off = _measure(_mix(jobs), False, limit=GIB_LIMIT)
    _say("mix, gate off", mix_off)
    mix_on = _measure(_mix(jobs), True, limit=GIB_LIMIT)
    _say("mix, gate on", mix_on)
    rows += _rows(
        "mix, gate on", mix_on, one_job, verdict(mix_on.peak < GIB_LIMIT + LAZY_ALLOCATION)
    )
    rows += _rows("mix, gate off", mix_off)
    return rows
