"""(a) Dispatch overhead: what the full path costs per job over a bare trio task.

Every job a dispatcher runs crosses the door, a lane, admission (an empty demand here), the
two-phase timeout's arming, the terminal bookkeeping and the handle's settle. This benchmark
puts a number on that: N jobs whose ``execute`` returns at once, each a :class:`Tool` with the
default timeout and no resources, submitted and awaited through ``open_dispatcher``,
``submit`` and ``await handle.result()``; against the least a trio program can do for the same
work, a task per job in one nursery, each setting a :class:`trio.Event` the main task awaits.

The timed section covers building each job, submitting it, and awaiting every handle (for trio:
building each event, spawning each task, awaiting every event), and ends once every task is
blocked, so a subscriber's backlog is delivered inside it. Opening and closing the dispatcher
are outside it: they happen once per program, not once per job.

The same path is timed again with one no-op :class:`~nucleo_trio.bus.JobObserver` subscribed to
every event, so the cost of listening is visible on its own.
"""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.bus.observers import JobObserver
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, Tool, workflow

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

NAME = "dispatch"
TITLE = "dispatch overhead: full path vs a bare trio task per job"

TARGET_RATIO = 4.0
"""Issue 13's target for a no-resource job against a bare trio task + Event."""
LISTENED_TARGET = 6.0
"""The same with one no-op observer of every event."""


class Nop(Tool[None]):
    """Returns at once: everything measured is the runtime's own cost."""

    async def execute(self, context: JobContext) -> None:
        return None


class CountingObserver(JobObserver[ev.JobEvent]):
    """A no-op listener: it only counts, so its delivery cost is the bus's, not its own."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_event(self, event: ev.JobEvent) -> None:
        self.seen += 1


async def bare_trio(watch: Stopwatch, n: int) -> None:
    """The baseline: one task per job, each settling an event the main task awaits."""

    async def settle(done: trio.Event) -> None:
        done.set()

    async with trio.open_nursery() as nursery:
        watch.start()
        events: list[trio.Event] = []
        for _ in range(n):
            done = trio.Event()
            events.append(done)
            nursery.start_soon(settle, done)
        for done in events:
            await done.wait()
        await trio.testing.wait_all_tasks_blocked()
        watch.stop()


async def dispatched(watch: Stopwatch, n: int, observer: CountingObserver | None) -> None:
    """The subject: N no-resource jobs through the full dispatch path."""
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        if observer is not None:
            dispatcher.bus.subscribe(observer)
        root = workflow("bench", "dispatch")
        watch.start()
        handles = [dispatcher.submit(Nop(root)) for _ in range(n)]
        for handle in handles:
            await handle.result()
        # The subscriber's consumer task drains its queue before everything is blocked.
        await trio.testing.wait_all_tasks_blocked()
        watch.stop()


def run(quick: bool) -> list[Row]:
    n = 2_000 if quick else 10_000
    rounds = 3 if quick else 4
    bare: list[Timing] = []
    plain: list[Timing] = []
    listened: list[Timing] = []
    delivered = 0
    for round_ in range(rounds):
        # Interleaved, so a burst of load from elsewhere lands on every side of the ratio.
        bare.append(run_trio(partial(bare_trio, n=n)))
        plain.append(run_trio(partial(dispatched, n=n, observer=None)))
        observer = CountingObserver()
        listened.append(run_trio(partial(dispatched, n=n, observer=observer)))
        delivered = observer.seen
        progress(
            f"  dispatch round {round_ + 1}/{rounds} (CPU us/job): bare "
            f"{bare[-1].per(n).cpu:.1f}, dispatched {plain[-1].per(n).cpu:.1f}, with "
            f"subscriber {listened[-1].per(n).cpu:.1f}"
        )
    if delivered < n:
        raise RuntimeError(
            f"dispatch benchmark: the subscriber saw {delivered} events for {n} jobs; the timed "
            "section did not include delivering them"
        )
    bare_us = best(bare).per(n)
    plain_us = best(plain).per(n)
    listened_us = best(listened).per(n)
    ratio = median_ratio(plain, bare)
    listened_ratio = median_ratio(listened, bare)
    label = f"N={n:,}"
    # The verdicts read the median of the per-round ratios: a target met only in the luckiest
    # round is not met.
    return [
        Row.timed(
            NAME,
            f"bare trio: task + Event per job, {label}",
            bare_us,
            "us/job",
            median=median(bare).per(n),
        ),
        Row.timed(
            NAME,
            f"nucleo_trio: submit + await result, {label}",
            plain_us,
            "us/job",
            median=median(plain).per(n),
        ),
        Row.timed(
            NAME,
            "overhead (nucleo_trio / bare trio)",
            plain_us / bare_us,
            "x",
            f"<= {TARGET_RATIO:g}x",
            verdict(ratio.cpu <= TARGET_RATIO),
            median=ratio,
        ),
        Row.timed(
            NAME,
            f"nucleo_trio + 1 no-op subscriber, {label}",
            listened_us,
            "us/job",
            median=median(listened).per(n),
        ),
        Row.timed(
            NAME,
            f"cost of listening ({delivered / n:.1f} events/job delivered)",
            listened_us - plain_us,
            "us/job",
        ),
        Row.timed(
            NAME,
            "with subscriber / bare trio",
            listened_us / bare_us,
            "x",
            f"<= {LISTENED_TARGET:g}x",
            verdict(listened_ratio.cpu <= LISTENED_TARGET),
            median=listened_ratio,
        ),
    ]
