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

Two more drains are given for context. trio's own ``CapacityLimiter(1)`` drained the same way is
the floor of a hand-off between tasks; whatever grows with the line there is the interpreter's
and trio's (ten thousand parked tasks are more memory and colder caches), not admission's. The
same drain through a dispatcher (jobs requiring the gate, so each grant also runs a job) is the
per-job cost of a dispatcher serving a long line.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable
from functools import partial
from typing import Protocol

import trio
import trio.testing

from nucleo_trio.admission import Admission, CountingGate, Demand
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

from ._harness import Row, Stopwatch, Timing, best, progress, run_trio, verdict

NAME = "admission"
TITLE = "admission scaling: per-grant cost draining 100 vs 10,000 parked jobs on a one-slot gate"

TARGET_RATIO = 1.2
HANDOFF_TARGET = 2.5
"""A grant on Admission against a trio.CapacityLimiter(1) hand-off (issue 13's target)."""
SHORT, LONG = 100, 10_000


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
    admission = Admission()
    gates = [CountingGate(f"slot-{n}", 1) for n in range(4)]
    mix = random.Random(13)
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        for _ in range(_batches(line, grants)):
            held = await admission.admit(_demand_of(gates))
            drained = _Countdown(line)

            async def waiter(needs: list[CountingGate], drained: _Countdown = drained) -> None:
                grant = await admission.admit(_demand_of(needs))
                admission.release(grant)
                drained.tick()

            for _ in range(line):
                needs = mix.sample(gates, mix.choice((2, 3)))
                nursery.start_soon(waiter, needs)
            await trio.testing.wait_all_tasks_blocked()
            _check_parked(admission.queue_size, line)
            watch.start()
            admission.release(held)
            await drained.done.wait()
            watch.stop()
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


def _drain_pair(
    kind: str, drain: Drain, short: int, long: int, rounds: int
) -> tuple[Timing, Timing]:
    """Best per-grant microseconds with a line of ``short`` and of ``long``, rounds interleaved.

    Both sides time the same number of grants (``long``): the short line is parked and drained
    ``long // short`` times. Timing sections of equal length matters on a busy machine: the
    best of many ten-millisecond drains is a luckier sample than the best of a few one-second
    ones, and that luck would pass for a cost that grows with the line.
    """
    short_times: list[Timing] = []
    long_times: list[Timing] = []
    for _ in range(rounds):
        short_times.append(run_trio(partial(drain, line=short, grants=long)))
        long_times.append(run_trio(partial(drain, line=long, grants=long)))
    best_short = best(short_times).per(long)
    best_long = best(long_times).per(long)
    progress(
        f"  admission, {kind} (CPU us/grant, best of {rounds}): line of {short:,}: "
        f"{best_short.cpu:.1f}; line of {long:,}: {best_long.cpu:.1f}"
    )
    return best_short, best_long


def run(quick: bool) -> list[Row]:
    rounds = 3 if quick else 5
    dispatcher_long = 2_000 if quick else LONG
    dispatcher_rounds = 2 if quick else 3

    direct_short, direct_long = _drain_pair("direct", drain_admission, SHORT, LONG, rounds)
    trio_short, trio_long = _drain_pair(
        "trio.CapacityLimiter", drain_trio_limiter, SHORT, LONG, rounds
    )
    multi_short, multi_long = _drain_pair(
        "multi-account (2-3 of 4 gates)", drain_multi_account, SHORT, LONG, rounds
    )
    via_short, via_long = _drain_pair(
        "via dispatcher", drain_dispatcher, SHORT, dispatcher_long, dispatcher_rounds
    )

    ratio = direct_long / direct_short
    multi_ratio = multi_long / multi_short
    handoff = direct_short / trio_short
    return [
        Row.timed(NAME, f"Admission direct, line of {SHORT:,}", direct_short, "us/grant"),
        Row.timed(NAME, f"Admission direct, line of {LONG:,}", direct_long, "us/grant"),
        Row.timed(
            NAME,
            f"growth {LONG:,} / {SHORT:,} (Admission direct)",
            ratio,
            "x",
            f"<= {TARGET_RATIO:g}x",
            verdict(ratio.cpu <= TARGET_RATIO),
        ),
        Row.timed(NAME, f"trio.CapacityLimiter(1), line of {SHORT:,}", trio_short, "us/grant"),
        Row.timed(NAME, f"trio.CapacityLimiter(1), line of {LONG:,}", trio_long, "us/grant"),
        Row.timed(
            NAME, f"growth {LONG:,} / {SHORT:,} (trio.CapacityLimiter)", trio_long / trio_short, "x"
        ),
        Row.timed(
            NAME,
            f"a grant: Admission / trio.CapacityLimiter hand-off, line of {SHORT:,}",
            handoff,
            "x",
            f"<= {HANDOFF_TARGET:g}x",
            verdict(handoff.cpu <= HANDOFF_TARGET),
        ),
        Row.timed(
            NAME, f"multi-account (2-3 of 4 gates), line of {SHORT:,}", multi_short, "us/grant"
        ),
        Row.timed(
            NAME, f"multi-account (2-3 of 4 gates), line of {LONG:,}", multi_long, "us/grant"
        ),
        Row.timed(
            NAME,
            f"growth {LONG:,} / {SHORT:,} (multi-account)",
            multi_ratio,
            "x",
            f"<= {TARGET_RATIO:g}x",
            verdict(multi_ratio.cpu <= TARGET_RATIO),
        ),
        Row.timed(
            NAME, f"via dispatcher (a job per grant), line of {SHORT:,}", via_short, "us/grant"
        ),
        Row.timed(
            NAME,
            f"via dispatcher (a job per grant), line of {dispatcher_long:,}",
            via_long,
            "us/grant",
        ),
        Row.timed(
            NAME,
            f"growth {dispatcher_long:,} / {SHORT:,} (via dispatcher)",
            via_long / via_short,
            "x",
        ),
    ]
