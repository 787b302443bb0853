"""Rate bounds as the callers see them, and the token bucket's burst bound.

The real clock is measured in ``benchmarks`` (``python -m benchmarks.run --only rates``), never
here: these tests stay on the virtual clock. Load is simulated the way a CPU-busy task causes it
on the real clock: a task whose every step jumps the clock (``MockClock.jump``) before it yields,
so the tasks trio resumes after it in the same batch start late.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, Demand, ElasticWindow
from nucleo_trio.admission.token_bucket import TokenBucket, TokenBucketConfig
from nucleo_trio.errors import UncorrectableError


class TenPerSecond(ElasticWindow):
    base_window = 1.0
    max_requests = 10


def most_in_any(instants: list[float], span: float) -> int:
    """The most instants in any half-open interval [t, t + span)."""
    ordered = sorted(instants)
    return max(
        (bisect.bisect_left(ordered, t + span) - i for i, t in enumerate(ordered)), default=0
    )


async def drive(
    account: object,
    amount: int | None = None,
    *,
    callers: int,
    seconds: float,
    clock: trio.testing.MockClock,
    amounts: Callable[[], Any] | None = None,
    busy_step: float = 0.0,
) -> list[float]:
    """The instants ``callers`` looping callers resume from ``admit`` (as they see them), one
    entry per request taken: each asks ``amount``, or what ``amounts()`` answers."""
    admission = Admission()
    starts: list[float] = []

    async def caller() -> None:
        while True:
            asked = amount if amounts is None else amounts()
            grant = await admission.admit(Demand().add(account, asked))
            starts.extend([trio.current_time()] * (1 if asked is None else asked))
            admission.release(grant)

    async def busy() -> None:
        while True:
            clock.jump(busy_step)  # a step that holds the loop this long, then yields
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as inner:
                for _ in range(callers):
                    inner.start_soon(caller)
                if busy_step:
                    inner.start_soon(busy)
        admission.stop()
    return [t for t in starts if t < seconds]


# -- elastic window ---------------------------------------------------------------------------------


@pytest.mark.parametrize("busy_step", [0.0, 0.05, 0.3])
async def test_callers_never_see_more_than_the_window_allows(
    autojump_clock: trio.testing.MockClock, busy_step: float
) -> None:
    """With or without a busy task delaying every resumption, the starts the callers see hold
    at most ``max_requests`` in any window, and the rate is still served."""
    starts = await drive(
        TenPerSecond(), None, callers=40, seconds=20.0, clock=autojump_clock, busy_step=busy_step
    )
    assert most_in_any(starts, 1.0) <= 10
    # A slot is held for the window, the caller's wake-up delay and the confirmation (up to
    # three batches, here each one busy step long), and admission itself wakes a step late.
    assert len(starts) >= 10 * 20.0 / (1.0 + 5 * busy_step) - 10


async def test_an_idle_loop_keeps_the_decision_instant_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """On the virtual clock the confirmed stamp is the decision instant: deadlines stay exact."""
    w = TenPerSecond()
    assert w.try_take([1] * 10, [])
    assert w.earliest_fit([1], []) == 1.0
    await trio.sleep(0.5)
    assert w.earliest_fit([1], []) == 1.0
    assert not w.fits([1], [])
    await trio.sleep(0.5)
    assert trio.current_time() == 1.0 and w.fits([1], []) and w.in_use == 0


async def test_a_stamp_counts_from_when_its_caller_can_have_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A grant whose caller is held up (here the loop is held 0.4 s right after the decision)
    keeps its slot until a window after the caller started, not after the decision."""
    w = TenPerSecond()
    assert w.try_take([1] * 10, [])
    autojump_clock.jump(0.4)  # this step runs long: nobody else starts before 0.4
    for _ in range(3):
        await trio.lowlevel.checkpoint()
    assert w.earliest_fit([1], []) == pytest.approx(1.4)
    await trio.sleep(0.99)
    assert not w.fits([1], [])
    await trio.sleep(0.02)
    assert w.fits([1], [])


async def test_an_unconfirmed_stamp_never_leaves_and_give_forgets_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stamp not yet confirmed holds its slot whatever the clock says; a roll-back of the
    newest stamps drops the unconfirmed ones first."""
    w = TenPerSecond()
    assert w.try_take([1] * 4, [])
    autojump_clock.jump(5.0)  # no checkpoint yet: the callers have not started
    assert w.in_use == 4
    w.give([1] * 4)
    assert w.in_use == 0
    await trio.lowlevel.checkpoint()
    assert w.try_take([1], [])
    await trio.sleep(1.0)
    assert w.in_use == 0


def test_outside_a_run_the_decision_is_the_start() -> None:
    """With a clock driven by hand and no scheduler, a stamp is the decision instant."""
    now = [0.0]
    w = TenPerSecond(clock=lambda: now[0])
    assert w.try_take([1] * 10, [])
    now[0] = 1.0
    assert w.fits([1], []) and w.in_use == 0


# -- token bucket burst -----------------------------------------------------------------------------


async def test_without_a_burst_bound_a_minute_goes_in_the_first_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Today's behaviour, kept as the default: 3,000 rpm lets 3,000 through at once."""
    bucket = TokenBucket("m", TokenBucketConfig(3000, 3_000_000))
    starts = await drive(bucket, 1, callers=200, seconds=3.0, clock=autojump_clock)
    assert most_in_any(starts, 1.0) > 3000


async def test_a_burst_bound_holds_any_second_to_burst_plus_a_second_of_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """At 3,000 rpm with ``burst=50``, no second holds more than 50 + 3000/60 = 100 grants,
    and the sustained rate is still 3,000 a minute."""
    bucket = TokenBucket("m", TokenBucketConfig(3000, 3_000_000, burst=50))
    assert bucket.status().requests == 50
    starts = await drive(bucket, 1, callers=200, seconds=20.0, clock=autojump_clock)
    assert most_in_any(starts, 1.0) <= 100
    assert len(starts) == pytest.approx(50 + 50 * 20, abs=2)
    later = [t for t in starts if t >= 1.0]
    assert most_in_any(later, 1.0) <= 51  # once the burst is spent, the rate alone


async def test_a_burst_of_one_spaces_requests_evenly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bucket = TokenBucket("m", TokenBucketConfig(600, 600_000, burst=1))
    starts = await drive(bucket, 1, callers=20, seconds=5.0, clock=autojump_clock)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) == pytest.approx(0.1, abs=1e-3)
    assert len(starts) == 50


@pytest.mark.parametrize("burst", [0, 0.5, -1, math.nan, math.inf, True, "5"])
def test_a_burst_must_be_a_finite_number_of_at_least_one_request(burst: object) -> None:
    with pytest.raises(ValueError, match=r"TokenBucketConfig\.burst"):
        TokenBucketConfig(60, 6000, burst=burst)  # type: ignore[arg-type]


def test_the_default_is_no_burst_bound() -> None:
    config = TokenBucketConfig(60, 6000)
    assert config.burst is None and config.request_cap == 60
    assert TokenBucketConfig(60, 6000, burst=500).request_cap == 60


async def test_more_requests_at_once_than_the_burst_can_never_fit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bucket = TokenBucket("m", TokenBucketConfig(600, 60_000, burst=2))
    with pytest.raises(UncorrectableError, match="burst bound of 2 requests"):
        bucket.fits([1, 1, 1], [])
    assert bucket.earliest_fit([1, 1], [1]) is None
    assert bucket.try_take([1, 1], [])
    bucket.give([1, 1, 1])
    assert bucket.status().requests == 2  # a refund never lifts the level past the burst


async def test_raising_the_burst_wakes_admission(autojump_clock: trio.testing.MockClock) -> None:
    bucket = TokenBucket("m", TokenBucketConfig(600, 60_000, burst=2))
    woken: list[int] = []
    bucket.on_capacity_change(lambda: woken.append(1))
    bucket.set_config(TokenBucketConfig(600, 60_000, burst=1))
    assert woken == [] and bucket.status().requests == 1
    bucket.set_config(TokenBucketConfig(600, 60_000, burst=4))
    assert woken == [1]
