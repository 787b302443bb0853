"""(b) Admission scaling: the cost of one grant must not grow with the line behind it.

The seed puts every waiting job's whole demand on one queue so the system knows the total demand
and can decide globally; DESIGN.md adds the price of that: never ``notify_all`` the line, "the
cost of one grant must not grow with the length of the line". The reference walks the whole
line on every event (ADM-25: a pass costs time linear in the waiters); this monitor re-asks only
the waiters whose answer can have changed. This benchmark checks the
claim where it bites: a one-slot gate, a line of N parked waiters, and the line draining one
grant at a time.

Setup, outside the timed section: an :class:`~nucleo_trio.admission.Admission` started with
``await nursery.start(admission.run)``, the gate's one slot held, then N tasks parked in
``admit(Demand().add(gate))``. Timed: release the held grant; each granted task releases its own
grant at once, which grants the next, until the line is empty. Drain time / N is the cost of
one grant (the evaluator's pass, the waiter's wake-up, its release), at N = 100 and N = 10,000.
Both sides time 10,000 grants: the line of 100 is parked and drained 100 times (parking outside
the timed section), so both measure timed sections of the same length.

The same drain with multi-account demands (each waiter needs two or three of four one-slot
gates, a fixed seeded mix) checks the claim where demands overlap: disjoint demands are granted
side by side, and a freed gate re-asks the first waiter of each group of followers short on it.
Drained whole, a line of 100 spends a good part of its drain on grants with few waiters behind
them, where its ten demand groups empty one by one and fewer are asked again, so the
multi-account target is judged on drains where every timed grant keeps at least N parked behind
it (N + the timed grants are parked; the rest are cancelled, untimed); the whole-line drains
stand beside them for context.

trio's own ``CapacityLimiter(1)`` drained the same way is the floor of a hand-off between tasks:
a grant under contention on Admission (the direct drain behind a line of 100) is held to at most
2 times it (issue 23; the medians of the two drains). Whatever grows with the line on the
limiter is the interpreter's and trio's (ten thousand parked tasks are more memory and colder
caches), not admission's. The same drain through a dispatcher (jobs requiring the gate, so each
grant also runs a job) is given for context: the per-job cost of a dispatcher serving a long
line.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable
from functools import partial
from typing import Protocol

import attrs
import trio
import trio.testing

from nucleo_trio.admission import Admission, CountingGate, Demand
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

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

NAME = "admission"
TITLE = "admission scaling: per-grant cost draining 100 vs 10,000 parked jobs on a one-slot gate"

TARGET_RATIO = 1.2
"""Growth of a grant's cost from a line of 100 to a line of 10,000 (issue 13's, kept by 23)."""
HANDOFF_TARGET = 2.0
"""Issue 23: a grant under contention on Admission against a trio.CapacityLimiter(1)
hand-off."""
SHORT, LONG = 100, 10_000
BEHIND_GRANTS = 2_000
"""Grants timed on each side when every grant keeps N parked behind it: 20 batches of 100
behind a line of 100, one batch of 2,000 behind a line of 10,000."""


async def drain_admission(watch: Stopwatch, line: int, grants: int) -> None:
    """Drain lines of ``line`` waiters behind a held one-slot gate, directly on Admission,
    until ``grants`` grants are timed. One monitor serves every line, as one serves a program."""
    admission = Admission()
    gate = CountingGate("slot", 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        for _ in range(_batches(line, grants)):
            held = await admission.admit(Demand().add(gate))
            drained = _Countdown(line)

            async def waiter(drained: _Countdown = drained) -> None:
                grant = await admission.admit(Demand().add(gate))
                admission.release(grant)  # at once: the next grant is all that is left to time
                drained.tick()

            for _ in range(line):
                nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            _check_parked(admission.queue_size, line)
            watch.start()
            admission.release(held)
            await drained.done.wait()
            watch.stop()
        nursery.cancel_scope.cancel()


async def drain_multi_account(watch: Stopwatch, line: int, grants: int) -> None:
    """Drain lines whose waiters each need two or three of four one-slot gates (a fixed,
    seeded mix), directly on Admission: every gate is held while the line forms, then all
    four are given back and the line drains, disjoint demands granted side by side."""
    await _multi_account(watch, behind=0, timed_per_batch=line, grants=grants)


async def drain_multi_account_behind(watch: Stopwatch, line: int, grants: int) -> None:
    """The multi-account drain, timed only while every grant has at least ``line`` waiters
    parked behind it: ``line`` more than the timed grants are parked (at most ``line`` timed a
    batch), and once the timed grants are through, the rest are cancelled, untimed. A full drain
    also times a line's last grants, made with almost nobody behind them: a line of 100 spends a
    good part of its drain there, a line of 10,000 almost none of it."""
    await _multi_account(watch, behind=line, timed_per_batch=min(line, grants), grants=grants)


async def _multi_account(
    watch: Stopwatch, *, behind: int, timed_per_batch: int, grants: int
) -> None:
    """Batches of ``behind + timed_per_batch`` multi-account waiters behind all four gates held;
    the first ``timed_per_batch`` grants of each are timed, and whoever is still parked then
    is cancelled, untimed."""
    admission = Admission()
    gates = [CountingGate(f"slot-{n}", 1) for n in range(4)]
    mix = random.Random(13)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        for _ in range(_batches(timed_per_batch, grants)):
            held = await admission.admit(_demand_of(gates))
            timed = _Countdown(timed_per_batch)

            async def waiter(needs: list[CountingGate], timed: _Countdown = timed) -> None:
                grant = await admission.admit(_demand_of(needs))
                admission.release(grant)
                timed.tick()

            async with trio.open_nursery() as waiters:
                for _ in range(behind + timed_per_batch):
                    waiters.start_soon(waiter, mix.sample(gates, mix.choice((2, 3))))
                await trio.testing.wait_all_tasks_blocked()
                _check_parked(admission.queue_size, behind + timed_per_batch)
                watch.start()
                admission.release(held)
                await timed.done.wait()
                watch.stop()
                waiters.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def drain_trio_limiter(watch: Stopwatch, line: int, grants: int) -> None:
    """The same drains on trio's own FIFO :class:`trio.CapacityLimiter`: the floor of a hand-off."""
    limiter = trio.CapacityLimiter(1)
    async with trio.open_nursery() as nursery:
        for _ in range(_batches(line, grants)):
            await limiter.acquire()
            drained = _Countdown(line)

            async def waiter(drained: _Countdown = drained) -> None:
                async with limiter:
                    pass
                drained.tick()

            for _ in range(line):
                nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            _check_parked(limiter.statistics().tasks_waiting, line)
            watch.start()
            limiter.release()
            await drained.done.wait()
            watch.stop()


class NeedsSlot(Tool[None]):
    """A job whose whole demand is one permit on the gate; it returns at once."""

    def __init__(self, parent: Identifiable, gate: CountingGate) -> None:
        super().__init__(parent)
        self._gate = gate

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self._gate)

    async def execute(self, context: JobContext) -> None:
        return None


async def drain_dispatcher(watch: Stopwatch, line: int, grants: int) -> None:
    """The same drains with jobs, each line parked in one dispatcher's admission."""
    gate = CountingGate("slot", 1)
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        root = workflow("bench", "scaling")
        for _ in range(_batches(line, grants)):
            held = await dispatcher.admission.admit(Demand().add(gate))
            handles = [dispatcher.submit(NeedsSlot(root, gate)) for _ in range(line)]
            await trio.testing.wait_all_tasks_blocked()
            _check_parked(dispatcher.admission.queue_size, line)
            watch.start()
            dispatcher.admission.release(held)
            for handle in handles:
                await handle.result()
            watch.stop()


def _demand_of(gates: list[CountingGate]) -> Demand:
    demand = Demand()
    for gate in gates:
        demand.add(gate)
    return demand


class _Countdown:
    """Sets ``done`` after ``n`` ticks: the last granted waiter of a line ends the drain."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.done = trio.Event()

    def tick(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


def _batches(line: int, grants: int) -> int:
    if line <= 0 or grants % line:
        raise ValueError(
            f"admission benchmark: {grants} grants is not a whole number of lines of {line}"
        )
    return grants // line


def _check_parked(parked: int, n: int) -> None:
    if parked != n:
        raise RuntimeError(
            f"admission benchmark: {parked} waiters parked, expected {n}; the line did not form"
        )


class Drain(Protocol):
    """A drain benchmark: ``grants`` grants timed, served from lines of ``line`` waiters."""

    def __call__(self, watch: Stopwatch, line: int, grants: int) -> Awaitable[None]: ...


@attrs.frozen
class _Drains:
    """Per-grant figures of one drain at the two line lengths: best and median of the rounds,
    and the median of the per-round growth (long / short)."""

    short: Timing
    long: Timing
    short_median: Timing
    long_median: Timing
    growth_median: Timing


def _drain_pair(
    kind: str, drain: Drain, short: int, long: int, rounds: int, grants: int | None = None
) -> _Drains:
    """Best per-grant microseconds with a line of ``short`` and of ``long``, rounds interleaved.

    Both sides time the same number of grants (``long``): the short line is parked and drained
    ``long // short`` times. Timing sections of equal length matters on a busy machine: the
    best of many ten-millisecond drains is a luckier sample than the best of a few one-second
    ones, and that luck would pass for a cost that grows with the line.
    """
    timed = long if grants is None else grants
    short_times: list[Timing] = []
    long_times: list[Timing] = []
    for _ in range(rounds):
        short_times.append(run_trio(partial(drain, line=short, grants=timed)))
        long_times.append(run_trio(partial(drain, line=long, grants=timed)))
    drains = _Drains(
        best(short_times).per(timed),
        best(long_times).per(timed),
        median(short_times).per(timed),
        median(long_times).per(timed),
        median_ratio(long_times, short_times),
    )
    progress(
        f"  admission, {kind} (CPU us/grant, best of {rounds}): line of {short:,}: "
        f"{drains.short.cpu:.1f}; line of {long:,}: {drains.long.cpu:.1f}"
    )
    return drains


def run(quick: bool) -> list[Row]:
    rounds = 3 if quick else 5
    dispatcher_long = 2_000 if quick else LONG
    dispatcher_rounds = 2 if quick else 3

    direct = _drain_pair("direct", drain_admission, SHORT, LONG, rounds)
    limiter = _drain_pair("trio.CapacityLimiter", drain_trio_limiter, SHORT, LONG, rounds)
    multi = _drain_pair("multi-account (2-3 of 4 gates)", drain_multi_account, SHORT, LONG, rounds)
    behind = _drain_pair(
        "multi-account, at least N parked behind every grant",
        drain_multi_account_behind,
        SHORT,
        LONG,
        rounds,
        grants=BEHIND_GRANTS,
    )
    via = _drain_pair("via dispatcher", drain_dispatcher, SHORT, dispatcher_long, dispatcher_rounds)
    # The verdicts read medians: of the per-round growth, and of the two drains for the hand-off.
    handoff_median = direct.short_median / limiter.short_median
    rows = [
        *_line_rows("Admission direct", direct, SHORT, LONG, target=True),
        Row.timed(
            NAME,
            f"a grant under contention: Admission / trio.CapacityLimiter(1) hand-off, "
            f"line of {SHORT:,}",
            direct.short / limiter.short,
            "x",
            f"<= {HANDOFF_TARGET:g}x",
            verdict(handoff_median.cpu <= HANDOFF_TARGET),
            median=handoff_median,
        ),
        *_line_rows(
            "multi-account (2-3 of 4 gates), whole line drained", multi, SHORT, LONG, target=False
        ),
        *_line_rows(
            "multi-account (2-3 of 4 gates), >= N parked behind each grant",
            behind,
            SHORT,
            LONG,
            target=True,
        ),
        *_line_rows("trio.CapacityLimiter(1)", limiter, SHORT, LONG, target=False),
        *_line_rows("via dispatcher (a job per grant)", via, SHORT, dispatcher_long, target=False),
    ]
    return rows


def _line_rows(label: str, drains: _Drains, short: int, long: int, *, target: bool) -> list[Row]:
    growth = drains.long / drains.short
    return [
        Row.timed(
            NAME,
            f"{label}, line of {short:,}",
            drains.short,
            "us/grant",
            median=drains.short_median,
        ),
        Row.timed(
            NAME, f"{label}, line of {long:,}", drains.long, "us/grant", median=drains.long_median
        ),
        Row.timed(
            NAME,
            f"growth {long:,} / {short:,} ({label})",
            growth,
            "x",
            f"<= {TARGET_RATIO:g}x" if target else "",
            verdict(drains.growth_median.cpu <= TARGET_RATIO) if target else "",
            median=drains.growth_median,
        ),
    ]
