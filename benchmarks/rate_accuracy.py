"""(d) Rate accuracy: clocked accounts driven by more demand than they allow.

A token bucket and an elastic window are each driven for 10 virtual minutes through a real
`Admission` by more workers than the rate can serve. A quota account earns its keep twice: it
must not let more through than its bound (the upstream would answer 429), and it must not let
less through than its rate (capacity paid for and wasted). The targets: achieved throughput at
least 99 % of the configured rate, and never above the bound in any interval of the window's
length.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

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

from ._harness import Row, progress, verdict

NAME = "rates"
TITLE = "rate accuracy: a token bucket and an elastic window under excess demand (virtual time)"

DURATION = 600.0
WORKERS = 40
TARGET_THROUGHPUT = 99.0

BUCKET_RPM = 600
BUCKET_TPM = 60_000
TOKENS_PER_REQUEST = 100


class TenSecondWindow(ElasticWindow):
    base_window = 10.0
    max_requests = 100


def _drive(make: Callable[[], RateLimiter], amount: int | None) -> list[float]:
    """Grant instants of WORKERS tasks that each ask again the moment they are granted."""

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

            with trio.move_on_after(DURATION):
                async with trio.open_nursery() as workers:
                    for _ in range(WORKERS):
                        workers.start_soon(worker)
            admission.stop()
        return granted

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _most_in_any(instants: list[float], span: float) -> int:
    """The most grants in any half-open interval [t, t + span)."""
    ordered = sorted(instants)
    return max(
        (bisect.bisect_left(ordered, t + span) - i for i, t in enumerate(ordered)), default=0
    )


def _verdicts(label: str, throughput: float, worst: int, span: str, bound: int) -> list[Row]:
    """The two rows every account is judged on: its throughput and its worst interval."""
    return [
        Row(
            NAME,
            f"{label} throughput / configured rate",
            throughput,
            "%",
            f">= {TARGET_THROUGHPUT:g} %",
            verdict(throughput >= TARGET_THROUGHPUT),
        ),
        Row(
            NAME,
            f"{label.split(':')[0]}: most grants in any {span} (bound {bound})",
            worst,
            "requests",
            f"<= {bound}",
            verdict(worst <= bound),
        ),
    ]


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    # Token bucket: it starts full, so the first minute may also spend the initial bucket; the
    # steady rate is what it grants beyond that, and the bound in any minute is one full
    # bucket plus one minute of refill.
    bucket_grants = _drive(
        lambda: TokenBucket("quota", TokenBucketConfig(BUCKET_RPM, BUCKET_TPM)),
        TOKENS_PER_REQUEST,
    )
    per_minute = BUCKET_TPM // TOKENS_PER_REQUEST
    steady = (len(bucket_grants) - per_minute) / (DURATION / 60.0)
    throughput = steady / per_minute * 100.0
    worst = _most_in_any(bucket_grants, 60.0)
    progress(
        f"  token bucket: {len(bucket_grants)} grants in {DURATION:.0f} s, steady "
        f"{throughput:.2f} % of the rate, at most {worst} in a minute"
    )
    rows += _verdicts("token bucket: steady", throughput, worst, "60 s", 2 * per_minute)
    window_grants = _drive(TenSecondWindow, None)
    rate = TenSecondWindow.max_requests / TenSecondWindow.base_window
    throughput = len(window_grants) / (DURATION * rate) * 100.0
    worst = _most_in_any(window_grants, TenSecondWindow.base_window)
    progress(
        f"  elastic window: {len(window_grants)} grants in {DURATION:.0f} s, "
        f"{throughput:.2f} % of the rate, at most {worst} in a window"
    )
    rows += _verdicts("elastic window:", throughput, worst, "10 s", TenSecondWindow.max_requests)
    return rows
