"""(d) Rate accuracy: clocked accounts driven by more demand than they allow.

A token bucket and an elastic window are each driven for 10 virtual minutes through a real
`Admission` by more workers than the rate can serve. A quota account earns its keep twice: it
must not let more through than its bound (the upstream would answer 429), and it must not let
less through than its rate (capacity paid for and wasted). The targets: throughput after the
first window at least 99 % of the configured rate, and never above the bound in any interval of
the window's length.

The same two quotas are then driven, the same way, through two asyncio rate limiters for
comparison: ``aiolimiter``'s ``AsyncLimiter`` (a leaky bucket) and ``pyrate-limiter``'s
``Limiter`` over an ``InMemoryBucket`` (a sliding-window log). Both run on
:class:`VirtualTimeLoop`, an asyncio event loop whose clock is virtual, so their ten minutes are
exact and as quick as ours. They are optional (``pip install -e '.[bench]'``); a missing one
shows as a row saying so.

First, though, come the rows measured on the real clock (:mod:`benchmarks._rate_realclock`): the
most arrivals in any second at a loopback upstream whose kernel stamps them, for the plain rate
limit (with and without a margin), the elastic window and a catalog entry's default bucket, all
at 50 a second, beside both peers, on an idle machine, beside two CPU burner processes the
benchmark starts itself, and (full runs) with a CPU-busy task in the callers' loop.
``python -m benchmarks._rate_realclock --load N`` runs that part alone, under ``N`` burners.
"""

from __future__ import annotations

import asyncio
import bisect
import importlib
import selectors
from collections.abc import Awaitable, Callable
from functools import partial
from types import ModuleType
from typing import Any

import attrs
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    Demand,
    ElasticWindow,
    RateLimiter,
    TokenBucket,
    TokenBucketConfig,
)

from . import _rate_realclock
from ._harness import Row, progress, verdict


def _optional(module: str) -> ModuleType | None:
    """An optional benchmark dependency, or None when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


aiolimiter = _optional("aiolimiter")
pyrate_limiter = _optional("pyrate_limiter")

NAME = "rates"
TITLE = (
    "rate accuracy: a token bucket and an elastic window under excess demand, beside "
    "aiolimiter and pyrate-limiter (virtual time), and arrivals at a loopback upstream on the "
    "real clock, idle and under load"
)

DURATION = 600.0
WORKERS = 40
TARGET_THROUGHPUT = 99.0
INSTALL_HINT = "pip install -e '.[bench]'"

BUCKET_RPM = 600
BUCKET_TPM = 60_000
TOKENS_PER_REQUEST = 100


class TenSecondWindow(ElasticWindow):
    base_window = 10.0
    max_requests = 100


@attrs.frozen
class Quota:
    """One quota as every limiter is configured for it, and how its grants are judged.

    ``span`` is the window the bound applies to; ``bound`` the most grants any interval of that
    length may hold; ``rate`` the configured requests per second.
    """

    label: str
    span: float
    bound: int
    rate: float

    def throughput(self, grants: list[float]) -> float:
        """The rate kept up after the first window, as a percentage of the configured rate.

        The first window is left out because a limiter may start with a full bucket and spend
        it at once. After it, the rate is read over whole quotas (a quota being one window's
        worth of requests): from the first grant after the first window to the grant a whole
        number of quotas later, so a limiter that grants in bursts of a quota is measured from
        burst to burst rather than by how many bursts happen to fit in the run.
        """
        steady = sorted(t for t in grants if self.span <= t < DURATION)
        quota = round(self.rate * self.span)
        whole = (len(steady) - 1) // quota * quota
        if whole <= 0 or steady[whole] == steady[0]:
            return 0.0
        return whole / (steady[whole] - steady[0]) / self.rate * 100.0


# A token bucket of 600 requests and 60,000 tokens a minute, 100 tokens a request: it starts
# full, so any minute may hold one full bucket plus one minute of refill.
BUCKET = Quota("token bucket", 60.0, 2 * BUCKET_TPM // TOKENS_PER_REQUEST, BUCKET_RPM / 60.0)
WINDOW = Quota(
    "elastic window",
    TenSecondWindow.base_window,
    TenSecondWindow.max_requests,
    TenSecondWindow.max_requests / TenSecondWindow.base_window,
)


# ------------------------------------------------------------------------------------------------
# Ours: through a real Admission on trio's virtual clock
# ------------------------------------------------------------------------------------------------


def _drive(
    make: Callable[[], RateLimiter],
    amount: int | None,
    duration: float = DURATION,
    workers: int = WORKERS,
) -> list[float]:
    """Grant instants of ``workers`` tasks that each ask again the moment they are granted."""

    async def main() -> list[float]:
        account = make()
        admission = Admission()
        granted: list[float] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(admission.run)

            async def worker() -> None:
                while True:
                    grant = await admission.admit(Demand().add(account, amount))
                    granted.append(trio.current_time())
                    admission.release(grant)  # TIME accounts keep the debit: only time refunds

            with trio.move_on_after(duration):
                async with trio.open_nursery() as tasks:
                    for _ in range(workers):
                        tasks.start_soon(worker)
            admission.stop()
        return granted

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# ------------------------------------------------------------------------------------------------
# The peers: asyncio limiters on an asyncio loop with a virtual clock
# ------------------------------------------------------------------------------------------------


class _SkippingSelector(selectors.DefaultSelector):
    """A selector that, instead of sleeping until the next timer, moves the clock to it.

    The loop asks the selector to wait ``timeout`` seconds for I/O on every iteration (0 when
    callbacks are ready). Here nothing does I/O, so the wait is answered at once with "no
    events" and the virtual clock jumps by ``timeout``: the timer that set it is then due.

    Each iteration also costs :data:`TICK` of virtual time, as it costs real time on a real
    loop. Without it, a limiter that re-arms a timer for "now plus a rounding error" (the leaky
    bucket does, when its level is a hair over the line) would spin at one instant forever.
    """

    TICK = 1e-6

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if timeout is None and not events:
            raise RuntimeError("VirtualTimeLoop: nothing is ready and nothing is scheduled")
        self.now += self.TICK if events or not timeout else max(timeout, self.TICK)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock: sleeps and timers take no real time.

    The asyncio counterpart of ``trio.testing.MockClock(autojump_threshold=0)``: whenever every
    task waits on a timer, the clock jumps to the earliest one; every loop iteration costs a
    microsecond. ``loop.time()`` starts at 0.
    """

    def __init__(self) -> None:
        self._skipping = _SkippingSelector()
        super().__init__(self._skipping)

    def time(self) -> float:
        return self._skipping.now


def _drive_asyncio(
    make: Callable[[], tuple[Callable[[], Awaitable[Any]], Callable[[], None] | None]],
) -> list[float]:
    """Grant instants of WORKERS asyncio tasks that each ask again the moment they are granted.

    ``make`` runs inside the loop and returns the acquire call and, optionally, a housekeeping
    call the library expects a background timer to make every 10 s.
    """

    async def main() -> list[float]:
        acquire, housekeeping = make()
        loop = asyncio.get_running_loop()
        granted: list[float] = []

        async def worker() -> None:
            while True:
                await acquire()
                granted.append(loop.time())

        async def every_ten_seconds(call: Callable[[], None]) -> None:
            while True:
                await asyncio.sleep(10.0)
                call()

        tasks = [asyncio.create_task(worker()) for _ in range(WORKERS)]
        if housekeeping is not None:
            tasks.append(asyncio.create_task(every_ten_seconds(housekeeping)))
        await asyncio.sleep(DURATION)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return [t for t in granted if t < DURATION]

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())


def _aiolimiter(max_rate: int, period: float, amount: int) -> list[float]:
    """An ``AsyncLimiter(max_rate, period)``, each request acquiring ``amount``."""
    assert aiolimiter is not None

    def make() -> tuple[Callable[[], Awaitable[None]], None]:
        limiter = aiolimiter.AsyncLimiter(max_rate, period)
        return (lambda: limiter.acquire(amount)), None

    return _drive_asyncio(make)


def _pyrate(limit: int, interval_ms: int, weight: int) -> list[float]:
    """A ``Limiter`` over an ``InMemoryBucket([Rate(limit, interval_ms)])``, each request of
    ``weight``, with the bucket's clock reading the loop's virtual time.

    The library's own leaker is a thread on the real clock; it is left unscheduled and the same
    leak runs every 10 virtual seconds instead (the leaker's default interval). Acquiring uses
    ``try_acquire_async``, so the library's own wait-and-retry loop is what is measured,
    including its default 50 ms ``buffer_ms``.
    """
    assert pyrate_limiter is not None
    lib = pyrate_limiter

    def loop_ms(clock: object) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    # A clock and a bucket class that reads it: the bucket's clock is a class attribute.
    loop_clock = type("LoopClock", (lib.AbstractClock,), {"now": loop_ms})()
    virtual_bucket = type("VirtualBucket", (lib.InMemoryBucket,), {"_clock": loop_clock})

    def make() -> tuple[Callable[[], Awaitable[bool]], Callable[[], None]]:
        bucket = virtual_bucket([lib.Rate(limit, interval_ms)])
        limiter = lib.Limiter(lib.SingleBucketFactory(bucket, schedule_leak=False))

        async def acquire() -> bool:
            if not await limiter.try_acquire_async("quota", weight):
                raise RuntimeError(f"pyrate-limiter refused a weight of {weight} outright")
            return True

        def leak() -> None:
            bucket.leak(bucket.now())

        return acquire, leak

    return _drive_asyncio(make)


# ------------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------------


@attrs.frozen
class _Note(Row):
    """A row that reports a benchmark not run, with no figure to show."""

    def formatted_value(self) -> str:
        return "-"


def _most_in_any(instants: list[float], span: float) -> int:
    """The most grants in any half-open interval [t, t + span)."""
    ordered = sorted(instants)
    return max(
        (bisect.bisect_left(ordered, t + span) - i for i, t in enumerate(ordered)), default=0
    )


def _span(seconds: float) -> str:
    return f"{seconds:g} s"


def _rows(label: str, quota: Quota, grants: list[float], *, ours: bool) -> list[Row]:
    """The two rows every limiter is judged on: its throughput and its worst interval.

    A peer is held to the same targets, but a peer falling short is reported as ``not met``
    rather than ``MISSED``: it is a comparison, not a target of this project.
    """
    throughput = quota.throughput(grants)
    worst = _most_in_any(grants, quota.span)
    progress(
        f"  {label}: {len(grants)} grants in {DURATION:g} s, {throughput:.2f} % of the rate "
        f"after the first {_span(quota.span)}, at most {worst} in any {_span(quota.span)}"
    )

    def judged(met: bool) -> str:
        return verdict(met) if ours else ("met" if met else "not met")

    return [
        Row(
            NAME,
            f"{label}: throughput after the first {_span(quota.span)} / configured rate",
            throughput,
            "%",
            f">= {TARGET_THROUGHPUT:g} %",
            judged(throughput >= TARGET_THROUGHPUT),
        ),
        Row(
            NAME,
            f"{label}: most grants in any {_span(quota.span)} (bound {quota.bound})",
            worst,
            "requests",
            f"<= {quota.bound}",
            judged(worst <= quota.bound),
        ),
    ]


def _missing(label: str, distribution: str) -> list[Row]:
    progress(f"  {label}: {distribution} is not installed; skipped")
    return [
        _Note(
            NAME,
            f"{label}: not run, {distribution} is not installed ({INSTALL_HINT})",
            float("nan"),
            "",
            "",
            "not run",
        )
    ]


def _peers(quota: Quota, limit: int, period: float, amount: int) -> list[Row]:
    """The quota through both peers: ``limit`` units per ``period`` s, ``amount`` a request."""
    rows: list[Row] = []
    label = f"aiolimiter AsyncLimiter({limit}, {period:g})"
    if aiolimiter is None:
        rows += _missing(label, "aiolimiter")
    else:
        rows += _rows(label, quota, _aiolimiter(limit, period, amount), ours=False)
    label = f"pyrate-limiter Rate({limit}, {period:g} s)"
    if pyrate_limiter is None:
        rows += _missing(label, "pyrate-limiter")
    else:
        rows += _rows(label, quota, _pyrate(limit, round(period * 1000), amount), ours=False)
    return rows


BURST_RPM = 3000
BURST = 50


def _burst_rows() -> list[Row]:
    """A 3,000 rpm bucket for 5 virtual seconds, 200 workers: the most grants in any 1 s without
    a burst bound (for context: a minute's requests at once) and with ``burst=50``, whose bound
    is ``burst + rpm / 60`` = 100 in any second."""
    rows: list[Row] = []
    bound = BURST + BURST_RPM // 60
    for burst in (None, BURST):
        config = TokenBucketConfig(BURST_RPM, BURST_RPM * 1000, burst=burst)
        grants = _drive(partial(TokenBucket, "quota", config), 1, duration=5.0, workers=200)
        worst = _most_in_any(grants, 1.0)
        progress(f"  token bucket {BURST_RPM} rpm, burst={burst}: at most {worst} in any 1 s")
        label = "no burst bound" if burst is None else f"burst={burst} (bound {bound})"
        rows.append(
            Row(
                NAME,
                f"token bucket {BURST_RPM:,} rpm, {label}: most grants in any 1 s",
                worst,
                "requests",
                "" if burst is None else f"<= {bound}",
                "" if burst is None else verdict(worst <= bound),
            )
        )
    return rows


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    rows += _rate_realclock.rows(
        NAME, {"aiolimiter": aiolimiter, "pyrate_limiter": pyrate_limiter}, quick, _missing
    )
    bucket_grants = _drive(
        lambda: TokenBucket("quota", TokenBucketConfig(BUCKET_RPM, BUCKET_TPM)),
        TOKENS_PER_REQUEST,
    )
    rows += _rows("token bucket", BUCKET, bucket_grants, ours=True)
    rows += _peers(BUCKET, BUCKET_TPM, 60.0, TOKENS_PER_REQUEST)
    rows += _burst_rows()
    rows += _rows("elastic window", WINDOW, _drive(TenSecondWindow, None), ours=True)
    rows += _peers(WINDOW, TenSecondWindow.max_requests, TenSecondWindow.base_window, 1)
    return rows
