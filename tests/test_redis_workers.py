"""Workers across processes on one shared quota, judged from logs kept in Redis.

The first half holds the judges to account: the window checks (``benchmarks/_redis_quota``)
on points whose answer is known, and the round-trip counter on a real server. The second half
runs real worker processes (``tests/programs/redis_worker.py``, each its own ``trio.run`` and
dispatcher) against a real ``redis-server``, on a quota scaled down so a run takes seconds:

* four workers with uneven load on one shared token bucket never let the upstream see more
  than the burst plus the refill in any span, and four on one shared window never more than
  its count in any window, by the jobs' own log and by the account's grant log; each quota is
  used to at least 95 % of what it allowed, at a few commands to Redis per call;
* a worker SIGKILLed while it holds counting-gate permits: they come back within the TTL and
  not before it died, and the others go on;
* the quota's Redis restarted mid-run: no overshoot across the restart, the jobs refused
  meanwhile name Redis and the account, and grants resume.
"""

from __future__ import annotations

import math
from typing import Any

import coredis
import pytest
import trio

from benchmarks._redis_fleet import harness_commands, open_fleet
from benchmarks._redis_quota import (
    MICROS,
    GrantLog,
    LogLine,
    bucket_worst,
    most_held,
    parse_log_line,
    per_window,
    points,
    read_grant_log,
    read_upstream_log,
    redis_now_us,
    window_worst,
)
from benchmarks._redis_roundtrips import count_round_trips
from tests.redis_server import running_redis

S = MICROS  # one second, in the microseconds the checks count in


def _at(*seconds: float) -> list[tuple[int, float]]:
    return [(round(t * S), 1.0) for t in seconds]


# -- the judges ----------------------------------------------------------------------------------


def test_a_bucket_run_at_its_exact_allowance_is_not_an_overshoot() -> None:
    """Burst 5 at once, then one grant every 1/rate: every span holds exactly its allowance."""
    grants = _at(*[0.0] * 5, *[0.5 * k for k in range(1, 11)])
    worst = bucket_worst(grants, rate=2.0, burst=5.0)
    assert worst is not None
    assert worst.excess == pytest.approx(0.0)
    one_more = bucket_worst(sorted([*grants, (round(2.2 * S), 1.0)]), rate=2.0, burst=5.0)
    assert one_more is not None and one_more.excess == pytest.approx(1.0)


def test_one_grant_too_many_is_found_with_the_span_it_falls_in() -> None:
    grants = _at(*[0.0] * 5, 1.0, 1.0, 1.0)  # at 1 s the refill allows 2 more, not 3
    worst = bucket_worst(grants, rate=2.0, burst=5.0)
    assert worst is not None
    assert worst.excess == pytest.approx(1.0)
    assert (worst.start_us, worst.end_us) == (0, 1 * S)


def test_a_credit_in_the_log_gives_its_amount_back() -> None:
    """A lease handed back (a negative point) lets the same amount be taken again."""
    grants = [(0, 5.0), (100_000, -3.0), (200_000, 3.0)]
    worst = bucket_worst(grants, rate=1.0, burst=5.0)
    assert worst is not None and worst.excess <= 0
    assert bucket_worst([(0, 5.0), (200_000, 3.0)], rate=1.0, burst=5.0).excess > 2  # type: ignore[union-attr]


def test_a_grant_log_stamped_to_the_millisecond_is_judged_with_that_much_allowance() -> None:
    """Stamps truncated to the millisecond (a stream entry id) can make a span read up to 1 ms
    shorter than it was: a take exactly at the allowance must not read as an overshoot."""
    truncated = [(0, 1.0), (99_000, 1.0)]  # really at 0 and 0.1 s: 1 + 10/s * 0.1 s = 2 allowed
    assert bucket_worst(truncated, rate=10.0, burst=1.0).excess > 0  # type: ignore[union-attr]
    judged = GrantLog(truncated, resolution=1e-3).bucket_worst(rate=10.0, burst=1.0)
    assert judged is not None and judged.excess <= 1e-9


def test_the_window_check_counts_every_span_of_the_window_length_half_open() -> None:
    """A sliding window of 3 per second: a grant exactly one second after another is allowed
    (the older one has left), a fourth inside one second is not."""
    fine = window_worst(_at(0.0, 0.2, 0.4, 1.0, 1.2, 1.4), count=3, length=1.0)
    assert fine is not None and fine.excess == 0
    over = window_worst(_at(0.0, 0.2, 0.4, 0.99), count=3, length=1.0)
    assert over is not None and over.excess == 1 and over.end_us == round(0.99 * S)


def test_the_aggregate_per_window_splits_at_the_window_edges() -> None:
    assert per_window(_at(0.0, 0.5, 1.0, 1.999, 2.0, 7.0), 0, 1.0, 3) == [2.0, 2.0, 1.0]


def test_permits_held_count_a_killed_workers_open_jobs_until_they_lapse() -> None:
    lines = [
        LogLine(0, "a", "start", "a1", 2.0),
        LogLine(1 * S, "b", "start", "b1", 1.0),
        LogLine(2 * S, "b", "end", "b1", 1.0),
        LogLine(3 * S, "b", "start", "b2", 2.0),  # a's two are still held until 3.5 s
        LogLine(4 * S, "b", "end", "b2", 2.0),
    ]
    assert most_held(lines, {"a": round(3.5 * S)}) == 4.0
    assert most_held(lines, {"a": round(2.5 * S)}) == 3.0  # a1 beside b1 at 1 s


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bucket_worst([], rate=math.nan, burst=1), "rate must be a finite number"),
        (lambda: bucket_worst([], rate=1, burst=-1), "burst must be >= 0"),
        (lambda: window_worst([], count=0, length=1), "count must be positive"),
        (lambda: bucket_worst(_at(1, 0), rate=1, burst=1), "in time order"),
        (lambda: per_window([], 0, 1.0, 0), "windows must be >= 1"),
        (lambda: parse_log_line("1 2 w start"), "a line has 6 fields"),
        (lambda: parse_log_line("1 2 w begin j 1"), "'start' or 'end'"),
    ],
)
def test_the_checks_refuse_bad_input_by_name(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


async def test_the_round_trip_counter_counts_what_clients_send_not_what_scripts_run(
    redis_server: Any,
) -> None:
    client = coredis.Redis.from_url(redis_server.url, decode_responses=True)
    async with client:
        await client.ping()  # the client's own handshake happens before the count
        async with count_round_trips(redis_server.url) as trips:
            await client.set("rt:a", "1")
            await client.get("rt:a")
            await client.eval(
                "redis.call('INCR', KEYS[1]); return redis.call('GET', KEYS[1])",
                keys=["rt:b"],
                args=[],
            )
    assert trips.by_command == {"set": 1, "get": 1, "eval": 1}
    assert trips.total == 3 and trips.from_scripts == 2


# -- real worker processes -----------------------------------------------------------------------

BURST, PER_SECOND, SECONDS = 20, 10, 5  # a bucket of 20 at once and 10 a second, for 5 s
WINDOW = 2.0  # and a window of 20 calls in any 2 s
UNEVEN = {"1": 15, "2": 8, "3": 3, "4": 1}  # calls a second: 27 against a quota of 10
ROUND_TRIPS_PER_CALL = 10
"""The most commands the shared accounts may send Redis per call granted with eight workers
contending (about 3 measured): a hub that re-asked faster than Redis's answer allows sends
tens or hundreds."""
STAMP_LAG = 0.05
"""Seconds a job's stamp may trail its grant in the upstream log (the job's first step is the
round trip that stamps it) on an idle machine. A run allows the longest lag its workers
measured, when longer (:func:`stamp_lag`): a loaded machine delays the stamping step, not the
grant. The grant log, stamped inside the grant itself, gets no such slack."""


def stamp_lag(summaries: dict[str, dict[str, Any]]) -> float:
    """The slack the stamp-based checks allow: :data:`STAMP_LAG`, or the longest any worker
    saw between a job's start and its stamp's reply, if longer."""
    return max(STAMP_LAG, *(summary["stamp_lag"] for summary in summaries.values()))


def _quota_args(kind: str, rate: float) -> list[str]:
    namespace = f"workers-{kind}"
    return [
        "--kind", kind, "--namespace", namespace, "--limit", str(BURST), "--period", str(WINDOW),
        "--log", f"{{{namespace}}}:upstream", "--rate", str(rate), "--duration", str(SECONDS),
        "--grant-log",
    ]  # fmt: skip


async def test_four_workers_on_a_shared_bucket_and_four_on_a_window_keep_to_them_and_use_them(
    redis_server: Any,
) -> None:
    """Eight processes at once: four with uneven load on one shared bucket, four on one shared
    window. In no span does the upstream see more than the bucket's burst plus its refill, or
    more than the window's count in any window, by the grant log (exact) or by the jobs' own
    stamps (allowing their lag); each quota was used to at least 95 % of what it allowed over
    the run, and every worker, the slow one too, got some of it; and the accounts sent Redis a
    few commands per call, not a stream of re-asks."""
    kinds = ("bucket", "window")
    workers = {f"{kind}{n}": _quota_args(kind, r) for kind in kinds for n, r in UNEVEN.items()}
    url = redis_server.url
    with trio.fail_after(120):
        async with count_round_trips(url) as trips, open_fleet(url, workers) as fleet:
            start_us = await fleet.go(lead=0.3)
            summaries = await fleet.finish()
    client = coredis.Redis.from_url(url, decode_responses=True)
    async with client:
        runs = {
            kind: (
                await read_upstream_log(client, f"{{workers-{kind}}}:upstream"),
                await read_grant_log(client, summaries[f"{kind}1"]["grant_log"]),
            )
            for kind in kinds
        }
    bucket_lines, bucket_grants = runs["bucket"]
    window_lines, window_grants = runs["window"]
    lag = stamp_lag(summaries)
    checks = {
        "bucket by its grant log": bucket_grants.bucket_worst(PER_SECOND, BURST),
        "bucket by the stamps": bucket_worst(
            points(bucket_lines), PER_SECOND, BURST + PER_SECOND * lag
        ),
        "window by its grant log": window_grants.window_worst(BURST, WINDOW),
        "window by the stamps": window_worst(points(window_lines), BURST, WINDOW - lag),
    }
    for check, worst in checks.items():
        assert worst is not None and worst.excess <= 1e-9, (check, worst)
    # Use is counted by the stamps, so the grants of the run's last `lag` seconds may stamp
    # after its end: that many calls (the refill rate times the lag) are not asked of it.
    allowed = {"bucket": BURST + PER_SECOND * SECONDS, "window": BURST * SECONDS / WINDOW}
    refill = {"bucket": PER_SECOND, "window": BURST / WINDOW}
    for kind, (lines, _) in runs.items():
        starts = points(lines)
        started = sum(summaries[f"{kind}{n}"]["started"] for n in UNEVEN)
        assert started == len(starts)
        used = sum(per_window(starts, start_us, SECONDS, 1))
        late = refill[kind] * (lag - STAMP_LAG)
        assert used >= 0.95 * allowed[kind] - late, (kind, used, allowed[kind], lag)
        assert {line.worker for line in lines} == {f"{kind}{n}" for n in UNEVEN}
    # Waiting workers are woken, not polling: the accounts' commands stay a few per call.
    calls = sum(len(points(lines)) for lines, _ in runs.values())
    per_call = (trips.total - harness_commands(trips)) / calls
    assert per_call <= ROUND_TRIPS_PER_CALL, (per_call, trips.by_command)


CAPACITY, TTL = 4, 1.0  # a gate of four permits; a worker's permits live 1 s unless renewed
RETURN_SLACK = 0.5
"""Seconds beyond the TTL a dead worker's permits may take to reach a waiting worker: the
waiter's settle, its admission's wake-up and the job's first round trip, on a busy machine."""


def _gate_args(namespace: str, **options: float) -> list[str]:
    arguments = [
        "--kind", "gate", "--namespace", namespace, "--limit", str(CAPACITY), "--ttl", str(TTL),
        "--log", f"{{{namespace}}}:upstream", "--grant-log",
    ]  # fmt: skip
    for option, value in options.items():
        arguments += [f"--{option}", str(value)]
    return arguments


async def test_a_killed_workers_permits_come_back_within_the_ttl_and_the_others_go_on(
    redis_server: Any,
) -> None:
    """``holder`` takes three of the four permits with jobs that would run a minute; ``b`` and
    ``c`` run short jobs through what is left. While the holder lives (two TTLs), ``b`` and
    ``c`` never hold more than the one permit left; SIGKILLed, its three come back within the
    TTL, ``b`` and ``c`` use them, and both finish their run."""
    namespace = "workers-gate"
    workers = {
        "holder": _gate_args(namespace, jobs=3, rate=50, hold=60, duration=60),
        "b": _gate_args(namespace, rate=5, hold=0.5, duration=60),
        "c": _gate_args(namespace, rate=5, hold=0.5, duration=60),
    }
    url = redis_server.url
    client = coredis.Redis.from_url(url, decode_responses=True)
    with trio.fail_after(90):
        async with client, open_fleet(url, workers) as fleet:
            await fleet.go(lead=0.1, names=["holder"])
            for _ in range(3):
                await fleet.workers["holder"].next_event("started")
            await fleet.go(lead=0.1, names=["b", "c"])
            await trio.sleep(2 * TTL)  # renewed twice over: nobody may take the three
            await fleet.kill("holder")
            killed_us = await redis_now_us(client)
            await trio.sleep(TTL + RETURN_SLACK + 1.0)  # time to come back, and to be used
            await fleet.stop("b")
            await fleet.stop("c")
            summaries = await fleet.finish()
            lines = await read_upstream_log(client, f"{{{namespace}}}:upstream")
    held = {line.job for line in lines if line.worker == "holder" and line.event == "start"}
    assert len(held) == 3
    assert {"b", "c"} <= summaries.keys()
    # While the holder lived, its three were never lent out: at most four at once, counting
    # its jobs as held until the kill.
    assert most_held(lines, {"holder": killed_us}) <= CAPACITY
    # From the moment the holder held its three, the first instant b and c hold more than the
    # one permit left: after the kill, and within the TTL of it.
    holding_us = max(line.at_us for line in lines if line.job in held and line.event == "start")
    others = [line for line in lines if line.worker != "holder"]
    back_us = _first_above(others, 1, after=holding_us)
    assert back_us is not None, "the killed worker's permits never came back"
    assert killed_us < back_us <= killed_us + round((TTL + RETURN_SLACK) * MICROS), (
        back_us - killed_us
    ) / MICROS
    assert any(line.at_us > back_us for line in others if line.worker == "b")
    assert any(line.at_us > back_us for line in others if line.worker == "c")


def _first_above(lines: list[LogLine], permits: float, *, after: int) -> int | None:
    """The first instant past ``after`` at which the jobs in ``lines`` hold more than
    ``permits`` (a job that ends at the instant another starts has let go first)."""
    held = 0.0
    for line in sorted(lines, key=lambda line: (line.at_us, line.event == "start")):
        held += line.amount if line.event == "start" else -line.amount
        if held > permits and line.at_us > after:
            return line.at_us
    return None


async def test_redis_restarted_mid_run_refuses_by_name_never_overshoots_and_recovers(
    redis_binary: str, redis_server: Any
) -> None:
    """Two workers on a shared bucket whose Redis is stopped for a second and started again
    (without persistence: it forgets the bucket) in the middle of their run. The upstream log lives on a Redis of its own. No
    span ever holds more than the bucket allows, across the restart too (a bucket Redis forgot
    starts empty); a job refused meanwhile says it was Redis and which account; and calls are
    granted again after the restart."""
    namespace = "workers-restart"
    log = f"{{{namespace}}}:upstream"
    rates = {"r1": 15, "r2": 5}
    with running_redis(redis_binary) as quota_server:
        workers = {
            name: [
                "--kind", "bucket", "--namespace", namespace, "--limit", str(BURST),
                "--period", str(WINDOW), "--log", log, "--log-url", redis_server.url,
                "--rate", str(rate), "--duration", "4.5",
            ]
            for name, rate in rates.items()
        }  # fmt: skip
        client = coredis.Redis.from_url(redis_server.url, decode_responses=True)
        with trio.fail_after(120):
            async with (
                client,
                open_fleet(quota_server.url, workers, clock_url=redis_server.url) as fleet,
            ):
                await fleet.go(lead=0.3)
                await trio.sleep(1.5)
                down_us = await redis_now_us(client)
                await trio.to_thread.run_sync(quota_server.stop)
                await trio.sleep(1.0)  # down long enough for waiting jobs to be asked
                await trio.to_thread.run_sync(quota_server.start)
                up_us = await redis_now_us(client)
                summaries = await fleet.finish()
                lines = await read_upstream_log(client, log)
    starts = points(lines)
    worst = bucket_worst(starts, PER_SECOND, BURST + PER_SECOND * stamp_lag(summaries))
    assert worst is not None and worst.excess <= 1e-9, worst
    assert any(at_us < down_us for at_us, _ in starts)
    assert any(at_us > up_us for at_us, _ in starts), "no call was granted after the restart"
    refused = 0
    for summary in summaries.values():
        for kind, message in summary["failures"].items():
            assert kind == "RedisUnavailableError", (kind, message)
            assert "Redis at redis://127.0.0.1" in message and "'quota'" in message, message
            refused += summary["failed"][kind]
    assert refused >= 1, summaries
