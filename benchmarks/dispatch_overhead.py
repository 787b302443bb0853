"""(a) Dispatch overhead: what the full path costs per job over a bare trio task and the floor.

Every job a dispatcher runs crosses the door, admission (an empty demand here), the two-phase
timeout's arming, the terminal bookkeeping and the handle's settle. This benchmark puts a number
on that: N jobs whose ``execute`` returns at once, each a :class:`Tool` with the default timeout
and no resources, submitted and awaited through ``open_dispatcher``, ``submit`` and ``await
handle.result()``; against the least a trio program can do for the same work, a task per job in
one nursery, each setting a :class:`trio.Event` the main task awaits.

Beside them, interleaved round by round (issue 23's targets, judged on the median round):

* the same bare task opening an empty nursery, and **the floor** (:mod:`benchmarks._floor`), a
  minimal runtime that keeps the nursery per job and does only the steps every job needs; the
  targets are set from it;
* **one unit of a roomy gate** per job (a ``CountingGate`` that never fills): the cheapest
  resourceful job, against the no-resource job (target: at most 1.4 times);
* the no-resource job with **one no-op** :class:`~nucleo_trio.bus.JobObserver` of every event:
  the cost of listening, per job (target: at most 12 us).

The timed section covers building each job, submitting it, and awaiting every handle (for trio:
building each event, spawning each task, awaiting every event), and ends once every task is
blocked, so a subscriber's backlog is delivered inside it. Opening and closing the dispatcher
are outside it: they happen once per program, not once per job.

A full run also counts the instructions per job of the bare task, the floor, the no-resource
job and the roomy-gate job with callgrind (:mod:`benchmarks.instructions`; target: at most
260,000 for the no-resource job, 1.3 times the floor); a quick run leaves the counts out (they
take about a minute under valgrind) and says so, as a run without ``valgrind`` does.
"""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.bus.observers import JobObserver
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, Tool, workflow

from . import _floor, instructions
from ._harness import (
    Row,
    Stopwatch,
    Timing,
    best,
    median,
    median_ratio,
    progress,
    run_trio,
    verdict,
)
from .admission_scaling import NeedsSlot

NAME = "dispatch"
TITLE = "dispatch overhead: full path vs a bare trio task per job"

TARGET_RATIO = 4.5
"""Issue 23: a no-resource job against a bare trio task + Event, timed."""
GATE_TARGET = 1.4
"""Issue 23: a job holding one unit of a roomy gate against the no-resource job, timed."""
LISTENING_TARGET = 12.0
"""Issue 23: one no-op listener of every event, the CPU microseconds it adds per job."""
COUNTED = ("bare", "floor", "job", "gate")
"""The subjects a full run counts with callgrind."""


class Nop(Tool[None]):
    """Returns at once: everything measured is the runtime's own cost."""

    async def execute(self, context: JobContext) -> None:
        return None


# The cheapest resourceful job, whose demand admission must judge (and the memory gate meet) on
# every submission: one unit of a gate that never fills.
OneUnit = NeedsSlot


class CountingObserver(JobObserver[ev.JobEvent]):
    """A no-op listener: it only counts, so its delivery cost is the bus's, not its own."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_event(self, event: ev.JobEvent) -> None:
        self.seen += 1


async def bare_trio(watch: Stopwatch, n: int, *, nursery: bool = False) -> None:
    """The baseline: one task per job, each settling an event the main task awaits; with
    ``nursery``, each task opens and closes an empty nursery first."""

    async def settle(done: trio.Event) -> None:
        done.set()

    async def settle_in_nursery(done: trio.Event) -> None:
        async with trio.open_nursery():
            pass
        done.set()

    task = settle_in_nursery if nursery else settle
    async with trio.open_nursery() as tasks:
        watch.start()
        events: list[trio.Event] = []
        for _ in range(n):
            done = trio.Event()
            events.append(done)
            tasks.start_soon(task, done)
        for done in events:
            await done.wait()
        await trio.testing.wait_all_tasks_blocked()
        watch.stop()


async def floor(watch: Stopwatch, n: int) -> None:
    """The floor: N jobs through the minimal runtime of :mod:`benchmarks._floor`, each holding
    one unit of a counting account that never fills."""
    account = _floor.CountingAccount("roomy", 10 * n + 1)
    async with _floor.open_floor() as runtime:
        watch.start()
        handles = [runtime.submit(_floor.nop, account) for _ in range(n)]
        for handle in handles:
            await handle.result()
        await trio.testing.wait_all_tasks_blocked()
        watch.stop()


async def dispatched(
    watch: Stopwatch, n: int, observer: CountingObserver | None, gate: CountingGate | None = None
) -> None:
    """The subject: N jobs through the full dispatch path, with no resources or, given
    ``gate``, one unit of it each."""
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        if observer is not None:
            dispatcher.bus.subscribe(observer)
        root = workflow("bench", "dispatch")
        watch.start()
        if gate is None:
            handles = [dispatcher.submit(Nop(root)) for _ in range(n)]
        else:
            handles = [dispatcher.submit(OneUnit(root, gate)) for _ in range(n)]
        for handle in handles:
            await handle.result()
        # The subscriber's consumer task drains its queue before everything is blocked.
        await trio.testing.wait_all_tasks_blocked()
        watch.stop()


def run(quick: bool) -> list[Row]:
    n = 2_000 if quick else 10_000
    rounds = 3 if quick else 5
    bare: list[Timing] = []
    nursery: list[Timing] = []
    floors: list[Timing] = []
    plain: list[Timing] = []
    gated: list[Timing] = []
    listened: list[Timing] = []
    delivered = 0
    for round_ in range(rounds):
        # Interleaved, so a burst of load from elsewhere lands on every side of the ratios.
        bare.append(run_trio(partial(bare_trio, n=n)))
        nursery.append(run_trio(partial(bare_trio, n=n, nursery=True)))
        floors.append(run_trio(partial(floor, n=n)))
        plain.append(run_trio(partial(dispatched, n=n, observer=None)))
        roomy = CountingGate("roomy", 10 * n + 1)
        gated.append(run_trio(partial(dispatched, n=n, observer=None, gate=roomy)))
        observer = CountingObserver()
        listened.append(run_trio(partial(dispatched, n=n, observer=observer)))
        delivered = observer.seen
        progress(
            f"  dispatch round {round_ + 1}/{rounds} (CPU us/job): bare "
            f"{bare[-1].per(n).cpu:.1f}, empty nursery {nursery[-1].per(n).cpu:.1f}, floor "
            f"{floors[-1].per(n).cpu:.1f}, no-resource job {plain[-1].per(n).cpu:.1f}, roomy "
            f"gate {gated[-1].per(n).cpu:.1f}, with subscriber {listened[-1].per(n).cpu:.1f}"
        )
    if delivered < n:
        raise RuntimeError(
            f"dispatch benchmark: the subscriber saw {delivered} events for {n} jobs; the timed "
            "section did not include delivering them"
        )
    label = f"N={n:,}"

    def per_job(metric: str, timings: list[Timing]) -> Row:
        return Row.timed(
            NAME,
            f"{metric}, {label}",
            best(timings).per(n),
            "us/job",
            median=median(timings).per(n),
        )

    def ratio(
        metric: str, subject: list[Timing], baseline: list[Timing], target: float | None = None
    ) -> Row:
        # The verdicts read the median of the per-round ratios: a target met only in the
        # luckiest round is not met.
        middle = median_ratio(subject, baseline)
        return Row.timed(
            NAME,
            metric,
            best(subject) / best(baseline),
            "x",
            "" if target is None else f"<= {target:g}x",
            "" if target is None else verdict(middle.cpu <= target),
            median=middle,
        )

    listening = median([(a - b).per(n) for a, b in zip(listened, plain, strict=True)])
    rows = [
        per_job("bare trio: task + Event per job", bare),
        per_job("bare trio: the same task opening an empty nursery", nursery),
        per_job("the floor: a minimal runtime with the nursery (benchmarks/_floor.py)", floors),
        per_job("nucleo_trio: no-resource job, submit + await result", plain),
        ratio("overhead: no-resource job / bare trio", plain, bare, TARGET_RATIO),
        *_instruction_rows(quick),
        ratio("the floor / bare trio", floors, bare),
        ratio("no-resource job / the floor", plain, floors),
        per_job("nucleo_trio: one unit of a roomy gate per job", gated),
        ratio("one unit of a roomy gate / no-resource job", gated, plain, GATE_TARGET),
        ratio("one unit of a roomy gate / bare trio", gated, bare),
        per_job("nucleo_trio: no-resource job + 1 no-op subscriber of every event", listened),
        Row.timed(
            NAME,
            f"cost of listening, per job ({delivered / n:.1f} events/job delivered)",
            best(listened).per(n) - best(plain).per(n),
            "us/job",
            f"<= {LISTENING_TARGET:g} us",
            verdict(listening.cpu <= LISTENING_TARGET),
            median=listening,
        ),
        ratio("with subscriber / bare trio", listened, bare),
    ]
    return rows


def _instruction_rows(quick: bool) -> list[Row]:
    """The callgrind counts (a full run with valgrind installed), else one row saying why not."""
    metric = "instructions per no-resource job (callgrind, collector off)"
    target = f"<= {instructions.JOB_TARGET:,}"
    if instructions.valgrind() is None:
        return [Row(NAME, f"{metric}: {instructions.MISSING}", 0, "instr/job", target)]
    if quick:
        return [
            Row(
                NAME,
                f"{metric}: not counted in a quick run (python -m benchmarks.instructions)",
                0,
                "instr/job",
                target,
            )
        ]
    progress(f"  counting instructions with callgrind: {', '.join(COUNTED)}")
    counts = {c.subject: c for c in instructions.count_many(COUNTED)}
    bare, floor_, job, gate = counts["bare"], counts["floor"], counts["job"], counts["gate"]
    label = f"N={job.n:,}"
    return [
        Row(
            NAME,
            f"{metric}, {label}",
            round(job.per),
            "instr/job",
            target,
            verdict(job.per <= instructions.JOB_TARGET),
        ),
        Row(
            NAME, f"instructions per bare trio task + Event, {label}", round(bare.per), "instr/job"
        ),
        Row(NAME, f"instructions per floor job, {label}", round(floor_.per), "instr/job"),
        Row(
            NAME,
            "instructions: no-resource job / the floor",
            job.per / floor_.per,
            "x",
            f"<= {instructions.FLOOR_TARGET:g}x",
            verdict(job.per / floor_.per <= instructions.FLOOR_TARGET),
        ),
        Row(NAME, "instructions: no-resource job / bare trio", job.per / bare.per, "x"),
        Row(NAME, f"instructions per roomy-gate job, {label}", round(gate.per), "instr/job"),
        Row(NAME, "instructions: roomy-gate job / no-resource job", gate.per / job.per, "x"),
    ]
