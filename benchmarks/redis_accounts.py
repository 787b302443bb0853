"""(h) Shared accounts on Redis: what a grant costs, and what several processes get from one quota.

Two questions, each side by side in one run against a throwaway ``redis-server`` on the loopback
(Debian's package; without it the benchmark prints one row saying so):

**Per-grant cost.** One task takes N grants in a row through a real
:class:`~nucleo_trio.admission.Admission` (admit, then release) from a token bucket whose rate
never binds, so only the account's own cost shows: a local
:class:`~nucleo_trio.admission.TokenBucket`, a shared bucket answering from its lease, and a
shared bucket without a lease (``lease=False``: every grant waits for its own round trip). Each
is timed in rounds, interleaved; each row gives the best round in µs per grant (CPU of the trio
thread, and wall time beside it: a round trip is waiting, which only wall time sees) and the
median round's CPU.
One more round per shared subject runs under ``MONITOR``
(:mod:`benchmarks._redis_roundtrips`), which counts the commands the worker sent: the round
trips per grant, held to at most 0.1 with a lease.

**Several processes, one quota.** Worker processes (``tests/programs/redis_worker.py``, each its
own ``trio.run`` and dispatcher) submit calls at fixed rates for a few real seconds against a
bucket of 20 at once and 10 a second; each call stamps its start in Redis on Redis's clock
(:mod:`benchmarks._redis_quota`). From those stamps: the share of what the quota allowed over
the run that was used, and the overshoot (the most any span held beyond ``burst + rate * span``
for a bucket, beyond its count in any window for a window, allowing the stamps 50 ms of lag
behind their grants; the shared account's own grant log, which has no lag, is checked with
none). One worker at 27 calls a second, then four with uneven load
(15, 8, 3, 1): the shared quota should be used as fully by four as by one, and never overshot;
the four again with ``lease=False``, to show what leases save (or cost) under contention.
Beside them, the same four workers each with a local bucket of the whole quota (what one does
without shared accounts), and ``limits``' moving window on the same Redis (``async+redis://``,
20 per 2 s, a call refused sleeping until the window says a slot frees), judged against its own
bound. These runs are one round each: they take real seconds.
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio

from nucleo_trio.admission import Admission, Demand, RateLimiter, TokenBucket, TokenBucketConfig

from ._harness import Row, Stopwatch, Timing, best, median, progress, run_trio, verdict
from ._redis_fleet import harness_commands, open_fleet
from ._redis_quota import (
    bucket_worst,
    per_window,
    points,
    read_grant_log,
    read_upstream_log,
    window_worst,
)
from ._redis_roundtrips import count_round_trips

NAME = "redis"
TITLE = (
    "shared accounts on Redis: per-grant cost (local, leased, unleased), and 1 vs 4 worker "
    "processes on one quota beside local buckets and limits' moving window"
)

TARGET_ROUND_TRIPS = 0.1
TARGET_SHARE = 95.0
FAST_RPM = 60_000_000  # a million grants a second: the rate never binds the cost rows
BURST, PER_SECOND = 20, 10
STAMP_LAG = 0.05
ONE_WORKER = {"w1": 27.0}
LIMITS_HINT = "pip install limits (its async Redis storage runs on coredis)"
FOUR_WORKERS = {"w1": 15.0, "w2": 8.0, "w3": 3.0, "w4": 1.0}


# -- per-grant cost ------------------------------------------------------------------------------

Subject = Callable[[str, str], AbstractAsyncContextManager[RateLimiter]]


@asynccontextmanager
async def _local(url: str, namespace: str) -> AsyncIterator[RateLimiter]:
    yield TokenBucket("local", TokenBucketConfig(FAST_RPM, FAST_RPM))


def _shared(lease: bool) -> Subject:
    @asynccontextmanager
    async def open_bucket(url: str, namespace: str) -> AsyncIterator[RateLimiter]:
        from nucleo_trio_redis import RedisAccounts

        async with RedisAccounts(url, namespace=namespace, worker="bench") as redis:
            yield redis.token_bucket("cost", rpm=FAST_RPM, tpm=FAST_RPM, lease=lease)

    return open_bucket


SUBJECTS: dict[str, Subject] = {
    "local bucket": _local,
    "shared, leased": _shared(True),
    "shared, no lease": _shared(False),
}


def _grant_round(url: str, subject: Subject, namespace: str, grants: int, count: bool) -> Any:
    """One round: ``grants`` grants in a row; the timing, and the round trips when ``count``."""
    trips: list[int] = []

    async def main(watch: Stopwatch) -> None:
        admission = Admission()
        async with trio.open_nursery() as nursery, subject(url, namespace) as account:
            await nursery.start(admission.run)
            admission.release(await admission.admit(Demand().add(account, 1)))  # connected
            async with _maybe_counting(url, count) as counter:
                watch.start()
                for _ in range(grants):
                    admission.release(await admission.admit(Demand().add(account, 1)))
                watch.stop()
            if counter is not None:
                trips.append(counter.total)
            admission.stop()

    timing = run_trio(main)
    return timing, (trips[0] if trips else None)


@asynccontextmanager
async def _maybe_counting(url: str, count: bool) -> AsyncIterator[Any]:
    if not count:
        yield None
        return
    async with count_round_trips(url) as counter:
        yield counter


def _cost_rows(url: str, quick: bool) -> list[Row]:
    grants, rounds = (500, 3) if quick else (2_000, 7)
    timings: dict[str, list[Timing]] = {name: [] for name in SUBJECTS}
    for round_number in range(rounds):
        for name, subject in SUBJECTS.items():  # interleaved: load lands on every subject
            namespace = f"cost-{round_number}-{_slug(name)}"
            timings[name].append(_grant_round(url, subject, namespace, grants, False)[0])
    rows: list[Row] = []
    for name, subject in SUBJECTS.items():
        fastest = best(timings[name]).per(grants)
        middle = median(timings[name]).per(grants)
        rows.append(
            Row.timed(NAME, f"{name}: per grant, {rounds} rounds", fastest, "µs", median=middle)
        )
        if name == "local bucket":
            continue
        _, trips = _grant_round(url, subject, f"trips-{_slug(name)}", grants, True)
        per_grant = trips / grants
        leased = name == "shared, leased"
        rows.append(
            Row(
                NAME,
                f"{name}: round trips per grant ({trips:,} in {grants:,} grants)",
                per_grant,
                "",
                f"<= {TARGET_ROUND_TRIPS}" if leased else "",
                verdict(per_grant <= TARGET_ROUND_TRIPS) if leased else "",
            )
        )
    return rows


# -- several processes, one quota ----------------------------------------------------------------


@attrs.frozen
class FleetRun:
    """What one run of worker processes showed, from the logs in Redis."""

    label: str
    used_share: float
    overshoot: float
    grant_log_overshoot: float | None
    round_trips_per_call: float
    calls: int


async def _fleet(
    url: str,
    label: str,
    kind: str,
    rates: Mapping[str, float],
    seconds: float,
    extra: Sequence[str],
) -> FleetRun:
    namespace = f"fleet-{_slug(label)}"
    upstream = f"{{{namespace}}}:upstream"
    period = BURST / PER_SECOND
    workers = {
        name: [
            "--kind", kind, "--namespace", namespace, "--name", namespace, "--limit", str(BURST),
            "--period", str(period), "--log", upstream, "--rate", str(rate),
            "--duration", str(seconds), *extra,
        ]
        for name, rate in rates.items()
    }  # fmt: skip
    with trio.fail_after(seconds + 120):
        async with count_round_trips(url) as trips, open_fleet(url, workers) as fleet:
            start_us = await fleet.go(lead=0.3)
            summaries = await fleet.finish()
    import coredis  # where used: benchmarks.run loads this module without the plugin

    client = coredis.Redis.from_url(url, decode_responses=True)
    async with client:
        lines = await read_upstream_log(client, upstream)
        grant_log = next(iter(summaries.values())).get("grant_log")
        grants = await read_grant_log(client, grant_log) if grant_log else None
    starts = points(lines)
    used = sum(per_window(starts, start_us, seconds, 1))
    if kind == "limits" or kind == "window":
        allowed = BURST * seconds / period
        worst = window_worst(starts, BURST, period - STAMP_LAG)
        logged = grants.window_worst(BURST, period) if grants else None
    else:
        allowed = BURST + PER_SECOND * seconds
        worst = bucket_worst(starts, PER_SECOND, BURST + PER_SECOND * STAMP_LAG)
        logged = grants.bucket_worst(PER_SECOND, BURST) if grants else None
    harness = harness_commands(trips)
    return FleetRun(
        label,
        used / allowed * 100.0,
        max(0.0, worst.excess) if worst is not None else 0.0,
        None if logged is None else max(0.0, logged.excess),
        max(0, trips.total - harness) / max(1, len(starts)),
        len(starts),
    )


def _slug(label: str) -> str:
    """A label as a piece of a Redis key name (no braces, commas, colons or spaces)."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _fleet_rows(url: str, quick: bool) -> list[Row]:
    seconds = 4.0 if quick else 10.0
    plans: list[tuple[str, str, Mapping[str, float], list[str]]] = [
        ("shared bucket, 4 workers", "bucket", FOUR_WORKERS, ["--grant-log"]),
        ("limits moving window, 4 workers", "limits", FOUR_WORKERS, []),
    ]
    if not quick:
        plans = [
            ("shared bucket, 1 worker", "bucket", ONE_WORKER, ["--grant-log"]),
            *plans[:1],
            (
                "shared bucket, no lease, 4 workers",
                "bucket",
                FOUR_WORKERS,
                ["--grant-log", "--no-lease"],
            ),
            ("local buckets, 4 workers", "bucket", FOUR_WORKERS, ["--local"]),
            ("shared window, 4 workers", "window", FOUR_WORKERS, ["--grant-log"]),
            ("limits moving window, 1 worker", "limits", ONE_WORKER, []),
            *plans[1:],
        ]
    rows: list[Row] = []
    for label, kind, rates, extra in plans:
        if kind == "limits" and importlib.util.find_spec("limits") is None:
            rows.append(Row(NAME, f"{label}: not run: {LIMITS_HINT}", 0, ""))
            continue
        progress(f"  {label} ({seconds:.0f} s)")
        run = trio.run(_fleet, url, label, kind, rates, seconds, extra)
        ours = kind != "limits" and "--local" not in extra
        rows.append(
            Row(
                NAME,
                f"{label}: share of the quota used",
                run.used_share,
                "%",
                f">= {TARGET_SHARE:.0f} %" if ours else "",
                verdict(run.used_share >= TARGET_SHARE) if ours else "",
            )
        )
        rows.append(
            Row(
                NAME,
                f"{label}: overshoot (calls beyond the bound, worst span)",
                run.overshoot,
                "calls",
                "0" if ours else "",
                verdict(run.overshoot == 0) if ours else "",
            )
        )
        if run.grant_log_overshoot is not None:
            rows.append(
                Row(
                    NAME,
                    f"{label}: overshoot by the account's grant log",
                    run.grant_log_overshoot,
                    "calls",
                    "0",
                    verdict(run.grant_log_overshoot == 0),
                )
            )
        if "--local" not in extra:
            rows.append(Row(NAME, f"{label}: round trips per call", run.round_trips_per_call, ""))
    return rows


def run(quick: bool) -> list[Row]:
    from tests.redis_server import NO_SERVER_REASON, find_binary, running_redis

    binary = find_binary()
    if binary is None:
        return [Row(NAME, f"not run: {NO_SERVER_REASON}", 0, "")]
    try:
        import nucleo_trio_redis  # noqa: F401
    except ImportError:
        return [Row(NAME, "not run: pip install -e plugins/nucleo-trio-redis", 0, "")]
    began = time.perf_counter()
    with running_redis(binary) as server:
        rows = _cost_rows(server.url, quick)
        progress(f"  per-grant cost ({time.perf_counter() - began:.1f} s)")
        rows += _fleet_rows(server.url, quick)
    return rows
