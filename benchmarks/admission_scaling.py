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

Two more drains are given for context. trio's own ``CapacityLimiter(1)`` drained the same way is
the floor of a hand-off between tasks; whatever grows with the line there is the interpreter's
and trio's (ten thousand parked tasks are more memory and colder caches), not admission's. The
same drain through a dispatcher (jobs requiring the gate, so each grant also runs a job) is the
per-job cost of a dispatcher serving a long line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing

from nucleo_trio.admission import Admission, CountingGate, Demand
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

from ._harness import Row, Stopwatch, Timing, best, progress, run_trio, verdict

NAME = "admission"
TITLE = "admission scaling: per-grant cost draining 100 vs 10,000 parked jobs on a one-slot gate"

TARGET_RATIO = 1.5
SHORT, LONG = 100, 10_000


async def drain_admission(watch: Stopwatch, n: int) -> None:
    """Park ``n`` waiters behind a held one-slot gate directly on Admission; time the drain."""
    admission = Admission()
    gate = CountingGate("slot", 1)
    drained = 0
    done = trio.Event()

    async def waiter() -> None:
        nonlocal drained
        grant = await admission.admit(Demand().add(gate))
        admission.release(grant)  # at once: the next grant is the only thing left to time
        drained += 1
        if drained == n:
            done.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        held = await admission.admit(Demand().add(gate))
        for _ in range(n):
            nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        _check_parked(admission.queue_size, n)
        watch.start()
        admission.release(held)
        await done.wait()
        watch.stop()
        nursery.cancel_scope.cancel()


class NeedsSlot(Tool[None]):
    """A job whose whole demand is one permit on the gate; it returns at once."""

    def __init__(self, parent: Identifiable, gate: CountingGate) -> None:
        super().__init__(parent)
        self._gate = gate

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self._gate)

    async def execute(self, context: JobContext) -> None:
        return None


async def drain_dispatcher(watch: Stopwatch, n: int) -> None:
    """The same drain with jobs: ``n`` jobs parked in the dispatcher's admission."""
    gate = CountingGate("slot", 1)
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        held = await dispatcher.admission.admit(Demand().add(gate))
        root = workflow("bench", "scaling")
        handles = [dispatcher.submit(NeedsSlot(root, gate)) for _ in range(n)]
        await trio.testing.wait_all_tasks_blocked()
        _check_parked(dispatcher.admission.queue_size, n)
        watch.start()
        dispatcher.admission.release(held)
        for handle in handles:
            await handle.result()
        watch.stop()


def _check_parked(parked: int, n: int) -> None:
    if parked != n:
        raise RuntimeError(
            f"admission benchmark: {parked} waiters parked, expected {n}; the line did not form"
        )


Drain = Callable[[Stopwatch, int], Awaitable[None]]


async def drain_trio_limiter(watch: Stopwatch, n: int) -> None:
    """The same drain on trio's own FIFO :class:`trio.CapacityLimiter`: the floor of a hand-off.

    Given for context: whatever grows here with the line is the interpreter's and trio's (more
    tasks, more memory, colder caches), not admission's.
    """
    limiter = trio.CapacityLimiter(1)
    drained = 0
    done = trio.Event()

    async def waiter() -> None:
        nonlocal drained
        async with limiter:
            pass
        drained += 1
        if drained == n:
            done.set()

    async with trio.open_nursery() as nursery:
        await limiter.acquire()
        for _ in range(n):
            nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        _check_parked(limiter.statistics().tasks_waiting, n)
        watch.start()
        limiter.release()
        await done.wait()
        watch.stop()


def _drain_pair(
    kind: str, drain: Drain, short: int, long: int, rounds: tuple[int, int]
) -> tuple[Timing, Timing]:
    """Best per-grant microseconds at ``short`` and ``long``, their rounds interleaved.

    The short line gets more rounds (a drain of 100 lasts milliseconds, so it needs more tries to
    find its floor); they are spread between the long rounds so that both sides of the ratio
    see the same stretch of machine load.
    """
    short_rounds, long_rounds = rounds
    per_long = -(-short_rounds // long_rounds)
    short_times: list[Timing] = []
    long_times: list[Timing] = []
    for _ in range(long_rounds):
        for _ in range(per_long):
            if len(short_times) < short_rounds:
                short_times.append(run_trio(lambda w: drain(w, short)))
        long_times.append(run_trio(lambda w: drain(w, long)))
    best_short = best(short_times).per(short)
    best_long = best(long_times).per(long)
    progress(
        f"  admission, {kind} (CPU us/grant): line of {short:,}: {best_short.cpu:.1f} (best of "
        f"{short_rounds}); line of {long:,}: {best_long.cpu:.1f} (best of {long_rounds})"
    )
    return best_short, best_long


def run(quick: bool) -> list[Row]:
    # A drain of 100 takes milliseconds, so it gets many more rounds to find its floor.
    direct_rounds = (15, 3) if quick else (40, 5)
    dispatcher_long = 2_000 if quick else LONG
    dispatcher_rounds = (5, 2) if quick else (12, 3)

    direct_short, direct_long = _drain_pair("direct", drain_admission, SHORT, LONG, direct_rounds)
    trio_short, trio_long = _drain_pair(
        "trio.CapacityLimiter", drain_trio_limiter, SHORT, LONG, direct_rounds
    )
    via_short, via_long = _drain_pair(
        "via dispatcher", drain_dispatcher, SHORT, dispatcher_long, dispatcher_rounds
    )

    ratio = direct_long / direct_short
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
