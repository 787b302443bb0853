"""(d) The elastic window's bound on the real clock under load, as the callers see it.

A window of 50 requests a second is driven by :data:`CALLERS` tasks that each ask again the
moment they start, beside one CPU-busy task that holds the loop :data:`BUSY_STEP` seconds at a
time and then sleeps :data:`BUSY_GAP` seconds, so some bursts are resumed late and others on
time (the load under which stamping grants at the decision let callers see 100 in one second). Every caller notes the instant it resumes from the limiter (the
instant it would call the upstream); the figure is the most of those in any 1 s interval,
against the bound of 50. The same load drives ``aiolimiter``'s ``AsyncLimiter(50, 1)`` and
``pyrate-limiter``'s ``Rate(50, 1 s)`` on an ordinary asyncio loop.

Each limiter runs :data:`ROUNDS` rounds of :data:`SECONDS` seconds, interleaved; the row shows
the median of the rounds, and the progress line the best (fewest) and the worst. The real clock
is noisy by nature: these figures come from here, never from a timed assertion in a test.
"""

from __future__ import annotations

import asyncio
import bisect
import statistics
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import trio

from nucleo_trio.admission import Admission, Demand, ElasticWindow

from ._harness import Row, progress, verdict

RATE = 50
CALLERS = 200
BUSY_STEP = 0.2
BUSY_GAP = 0.5
SECONDS = 2.0
ROUNDS = 3
QUICK_ROUNDS = 2


class FiftyPerSecond(ElasticWindow):
    base_window = 1.0
    max_requests = RATE


def _busy_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def most_in_any(instants: list[float], span: float = 1.0) -> int:
    """The most instants in any half-open interval [t, t + span)."""
    ordered = sorted(instants)
    return max(
        (bisect.bisect_left(ordered, t + span) - i for i, t in enumerate(ordered)), default=0
    )


def ours() -> list[float]:
    """Start instants of callers through a real Admission and an elastic window."""

    async def main() -> list[float]:
        window = FiftyPerSecond()
        admission = Admission()
        starts: list[float] = []

        async def caller() -> None:
            while True:
                grant = await admission.admit(Demand().add(window))
                starts.append(time.perf_counter())
                admission.release(grant)

        async def busy() -> None:
            while True:
                _busy_for(BUSY_STEP)
                await trio.sleep(BUSY_GAP)

        async with trio.open_nursery() as nursery:
            await nursery.start(admission.run)
            with trio.move_on_after(SECONDS):
                async with trio.open_nursery() as inner:
                    inner.start_soon(busy)
                    for _ in range(CALLERS):
                        inner.start_soon(caller)
            admission.stop()
        return starts

    return trio.run(main)


def _asyncio(make: Callable[[], Callable[[], Awaitable[Any]]]) -> list[float]:
    """Start instants of callers through an asyncio limiter, on a real asyncio loop."""

    async def main() -> list[float]:
        acquire = make()
        starts: list[float] = []

        async def caller() -> None:
            while True:
                await acquire()
                starts.append(time.perf_counter())

        async def busy() -> None:
            while True:
                _busy_for(BUSY_STEP)
                await asyncio.sleep(BUSY_GAP)

        tasks = [asyncio.create_task(busy())]
        tasks += [asyncio.create_task(caller()) for _ in range(CALLERS)]
        await asyncio.sleep(SECONDS)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return starts

    return asyncio.run(main())


def aiolimiter_run(lib: ModuleType) -> list[float]:
    def make() -> Callable[[], Awaitable[Any]]:
        limiter = lib.AsyncLimiter(RATE, 1.0)
        return limiter.acquire  # type: ignore[no-any-return]

    return _asyncio(make)


def pyrate_run(lib: ModuleType) -> list[float]:
    """A ``Limiter`` over ``InMemoryBucket([Rate(50, 1000)])`` with its default 50 ms buffer."""

    def make() -> Callable[[], Awaitable[Any]]:
        bucket = lib.InMemoryBucket([lib.Rate(RATE, 1000)])
        limiter = lib.Limiter(lib.SingleBucketFactory(bucket, schedule_leak=False))

        async def acquire() -> bool:
            if not await limiter.try_acquire_async("quota", 1):
                raise RuntimeError("pyrate-limiter refused a request outright")
            return True

        return acquire

    return _asyncio(make)


def rows(
    name: str, peers: dict[str, ModuleType | None], quick: bool, missing: Callable[..., list[Row]]
) -> list[Row]:
    """Interleaved rounds of ours and each installed peer; one row per limiter."""
    runners: dict[str, Callable[[], list[float]]] = {
        f"elastic window {RATE}/s": ours,
    }
    out: list[Row] = []
    aio, pyrate = peers.get("aiolimiter"), peers.get("pyrate_limiter")
    labels = {
        "aiolimiter": f"aiolimiter AsyncLimiter({RATE}, 1)",
        "pyrate_limiter": f"pyrate-limiter Rate({RATE}, 1 s)",
    }
    if aio is not None:
        runners[labels["aiolimiter"]] = lambda: aiolimiter_run(aio)
    if pyrate is not None:
        runners[labels["pyrate_limiter"]] = lambda: pyrate_run(pyrate)
    worst: dict[str, list[int]] = {label: [] for label in runners}
    served: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(QUICK_ROUNDS if quick else ROUNDS):
        for label, run in runners.items():
            starts = run()
            worst[label].append(most_in_any(starts))
            served[label].append(len(starts) / SECONDS)
    for index, (label, counts) in enumerate(worst.items()):
        median = statistics.median(counts)
        progress(
            f"  {label}, real clock, {CALLERS} callers, busy {BUSY_STEP * 1000:g} ms of every "
            f"{(BUSY_STEP + BUSY_GAP) * 1000:g} ms: "
            f"most starts in any 1 s median {median:g}, best {min(counts)}, worst {max(counts)} "
            f"(rounds {counts}); served {statistics.median(served[label]):.1f}/s"
        )
        ours_row = index == 0
        met = median <= RATE
        out.append(
            Row(
                name,
                f"{label}: most starts in any 1 s as callers see them, real clock under load "
                f"(median of {len(counts)}; best {min(counts)})",
                float(median),
                "requests",
                f"<= {RATE}",
                verdict(met) if ours_row else ("met" if met else "not met"),
            )
        )
    for module, label in labels.items():
        if peers.get(module) is None:
            out += missing(label, module.replace("_", "-"))
    return out
