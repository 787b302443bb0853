"""Workers across processes on one shared quota, judged from logs kept in Redis.

The first half holds the judges to account: the window checks (``benchmarks/_redis_quota``)
on points whose answer is known, and the round-trip counter on a real server. The second half
runs real worker processes (``tests/programs/redis_worker.py``, each its own ``trio.run`` and
dispatcher) against a real ``redis-server``, on a quota scaled down so a run takes seconds:

* four workers with uneven load on one shared token bucket never let the upstream see more
  than the burst plus the refill in any span, by the jobs' own log and by the account's grant
  log, and use at least 95 % of what the quota allowed;
* four workers each given a *local* bucket with the whole quota (what one would do without
  shared accounts) overshoot it, and the same checks say so: the control that shows the checks
  can see an overshoot;
* a worker SIGKILLed while it holds counting-gate permits: they come back within the TTL and
  not before it died, and the others go on.
"""

from __future__ import annotations

import math
from typing import Any

import coredis
import pytest

from benchmarks._redis_quota import (
    MICROS,
    LogLine,
    bucket_worst,
    most_held,
    parse_log_line,
    per_window,
    window_worst,
)
from benchmarks._redis_roundtrips import count_round_trips

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
