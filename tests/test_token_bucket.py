"""The token bucket: two clocked dimensions, an adaptive throttle, caps set in place (TB)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, Demand, Replenishment
from nucleo_trio.admission.token_bucket import TokenBucket, TokenBucketConfig
from nucleo_trio.errors import UncorrectableError


class Wakes:
    def __init__(self, bucket: TokenBucket) -> None:
        self.count = 0
        bucket.on_capacity_change(self)

    def __call__(self) -> None:
        self.count += 1


def bucket(rpm: int = 600, tpm: int = 6000, *, drained: bool = False) -> TokenBucket:
    b = TokenBucket("model-a", TokenBucketConfig(rpm, tpm))
    if drained:
        assert b.try_take([tpm], [])
    return b


async def test_a_fresh_bucket_is_full_and_names_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-01, TB-23, TB-24: starts full; named by the model, category token_bucket, capacity is
    tpm, in use 0, TIME replenishment, no indicator at throttle 0."""
    b = bucket(60, 60_000)
    status = b.status()
    assert (status.requests, status.tokens) == (60, 60_000)
    assert b.limiter_name == "model-a" and b.limiter_category == "token_bucket"
    assert b.capacity == 60_000 and b.in_use == 0
    assert b.replenishment() is Replenishment.TIME
    assert b.status_indicator is None


async def test_the_level_comes_from_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    """TB-03, TB-25: no refill task; the status reads the level at that instant."""
    b = bucket(60, 60_000)
    assert b.try_take([60_000], [])
    status = b.status()
    assert (status.tokens, status.requests) == (0, 59)
    await trio.sleep(30)
    status = b.status()
    assert status.tokens == pytest.approx(30_000, abs=1) and status.requests == 60
    assert "tokens" in status.summary


async def test_a_drained_bucket_names_the_deficit_over_the_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-04, TB-07, TB-08: drained, 100 tokens are 1000 ms away; at +999 ms they do not fit, at
    +1001 ms they fit and can be taken."""
    b = bucket(600, 6000, drained=True)
    start = trio.current_time()
    assert not b.fits([100], [])
    assert b.earliest_fit([100], []) == pytest.approx(start + 1.0, abs=0.001)
    await trio.sleep(0.999)
    assert not b.fits([100], [])
    await trio.sleep(0.002)
    assert b.fits([100], []) and b.try_take([100], [])
    assert b.earliest_fit([0], []) is not None


async def test_requests_are_the_second_dimension(autojump_clock: trio.testing.MockClock) -> None:
    """TB-04, TB-09: with rpm 2 two takes exhaust the minute; the next request is 30 s away."""
    b = bucket(2, 1_000_000)
    start = trio.current_time()
    assert b.try_take([1], []) and b.try_take([1], [])
    assert not b.fits([1], [])
    assert b.earliest_fit([1], []) == pytest.approx(start + 30.0, abs=0.001)


async def test_what_can_never_fit_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    """TB-05: more tokens than a minute holds, or more requests, is refused outright by fits and
    by try_take."""
    b = bucket(2, 1000)
    for call in (b.fits, b.try_take):
        with pytest.raises(UncorrectableError, match="exceeds"):
            call([1001], [])
        with pytest.raises(UncorrectableError, match="requests exceeds"):
            call([1, 1, 1], [])


async def test_a_reservation_ahead_holds_never_refuses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-06, TB-07: 500 behind 800 on tpm 1000 is false with no deadline; behind 400 it fits."""
    b = bucket(100, 1000)
    assert b.fits([500], [800]) is False
    assert b.earliest_fit([500], [800]) is None
    assert b.fits([500], [400]) is True


async def test_the_throttle_stretches_the_deadline(autojump_clock: trio.testing.MockClock) -> None:
    """TB-10, TB-14, TB-15: two 429s (throttle 1.0) double the wait for the same deficit."""
    plain = bucket(600, 6000, drained=True)
    slowed = bucket(600, 6000, drained=True)
    slowed.record_429()
    slowed.record_429()
    assert slowed.throttle == 1.0
    now = trio.current_time()
    ratio = (slowed.earliest_fit([100], []) - now) / (plain.earliest_fit([100], []) - now)  # type: ignore[operator]
    assert ratio == pytest.approx(2.0, abs=0.01)


async def test_a_refund_is_immediate_and_capped(autojump_clock: trio.testing.MockClock) -> None:
    """TB-11: give refunds at once, never above the caps, and wakes admission."""
    b = bucket(1000, 1_000_000)
    wakes = Wakes(b)
    assert b.try_take([600_000], [])
    b.give([5_000_000])
    status = b.status()
    assert (status.tokens, status.requests) == (1_000_000, 1000)
    assert wakes.count == 1


async def test_a_lowered_cap_refuses_a_parked_amount_and_clamps_a_take(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-12, TB-13: a cap lowered under an amount refuses it at the next check; a take after a
    clamp that made it short answers False."""
    b = bucket(1000, 10_000, drained=True)
    assert not b.fits([9000], [])
    b.set_config(TokenBucketConfig(600, 8000))
    with pytest.raises(UncorrectableError, match="exceeds"):
        b.fits([9000], [])
    full = bucket(1000, 10_000)
    assert full.fits([9000], [])
    full.set_config(TokenBucketConfig(600, 9500))
    assert full.try_take([1000], [])
    assert full.try_take([9000], []) is False


async def test_backpressure_is_weighted_capped_and_never_wakes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-02, TB-14, TB-15, TB-16, TB-24: +0.5 per unit (a 429 is 1, an overload 3), capped at
    9.0, shown as throttle:<1+t>x; tightening wakes no one."""
    from nucleo_trio.errors import OverloadRetry, RateLimitRetry, TransientErrorRetry

    b = bucket()
    wakes = Wakes(b)
    b.record_429()
    assert b.throttle == 0.5 and b.status_indicator == "throttle:1.5x"
    b.record_429()
    assert b.status_indicator == "throttle:2.0x"
    b.record_backpressure(OverloadRetry.backpressure_increment)
    assert b.throttle == 2.5
    b.record_backpressure(TransientErrorRetry.backpressure_increment)
    assert b.throttle == 2.5
    assert RateLimitRetry.backpressure_increment == 1
    for _ in range(20):
        b.record_429()
    assert b.throttle == 9.0
    assert wakes.count == 0


async def test_an_upstream_failure_is_a_429_logged_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """TB-17: on_rate_limit_error logs one WARN line naming the model, then records a 429."""
    b = bucket()
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.admission.token_bucket"):
        b.on_rate_limit_error("429 Too Many Requests")
    assert b.throttle == 0.5
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "model-a upstream failure: 429 Too Many Requests"


async def test_successes_relax_the_throttle(autojump_clock: trio.testing.MockClock) -> None:
    """TB-18, TB-19, TB-20: nothing at throttle 0; every third success takes 0.2 off and wakes;
    after five quiet minutes each success takes 0.5 off; never below 0."""
    b = bucket()
    wakes = Wakes(b)
    b.record_success()
    assert b.throttle == 0.0 and wakes.count == 0
    b.record_429()
    b.record_429()
    b.record_success()
    b.record_success()
    assert b.throttle == 1.0 and wakes.count == 0
    b.on_success()
    assert b.throttle == pytest.approx(0.8) and wakes.count == 1
    await trio.sleep(5 * 60)
    b.record_success()
    assert b.throttle == pytest.approx(0.3)
    b.record_success()
    assert b.throttle == 0.0 and wakes.count == 3


async def test_quiet_minutes_after_two_429s(autojump_clock: trio.testing.MockClock) -> None:
    """TB-19: two 429s give 1.0; five minutes later one success gives 0.5."""
    b = bucket()
    b.record_429()
    b.record_429()
    await trio.sleep(5 * 60)
    b.record_success()
    assert b.throttle == pytest.approx(0.5)


async def test_set_config_in_place(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """TB-21, TB-22: the same values change nothing; new caps clamp the levels, keep the
    throttle, log once, and wake only when a cap grew."""
    b = bucket(1000, 10_000)
    wakes = Wakes(b)
    b.record_429()
    with caplog.at_level(logging.INFO, logger="nucleo_trio.admission.token_bucket"):
        b.set_config(TokenBucketConfig(1000, 10_000))
        assert not caplog.records and wakes.count == 0
        b.set_config(TokenBucketConfig(2000, 10_000))
    assert wakes.count == 1 and b.throttle == 0.5
    assert [r.getMessage() for r in caplog.records] == [
        "Updated rate limits for model-a (RPM: 1000 -> 2000, TPM: 10000 -> 10000)"
    ]
    b.set_config(TokenBucketConfig(2000, 500))
    assert b.status().tokens == 500 and wakes.count == 1


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rpm"):
        TokenBucketConfig(0, 10)
    with pytest.raises(ValueError, match="model name"):
        TokenBucket(" ", TokenBucketConfig(1, 1), clock=lambda: 0.0)


async def test_a_time_shortfall_is_granted_with_no_give(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """ADM-52, ADM-53 (with the real bucket): a drained bucket's waiter is granted at its deadline
    with no give; a cap raised through set_config wakes and grants at once."""
    admission = Admission()
    await nursery.start(admission.run)
    b = TokenBucket("m", TokenBucketConfig(6000, 60_000))
    assert b.try_take([60_000], [])
    start = trio.current_time()
    grant = await admission.admit(Demand().add(b, 100))
    assert 0.05 <= trio.current_time() - start < 3
    admission.release(grant)
    slow = TokenBucket("slow", TokenBucketConfig(60, 1000))
    assert slow.try_take([1000], [])
    granted: list[float] = []

    async def wait() -> None:
        await admission.admit(Demand().add(slow, 500))
        granted.append(trio.current_time())

    nursery.start_soon(wait)
    await trio.testing.wait_all_tasks_blocked()
    raised_at = trio.current_time()
    slow.set_config(TokenBucketConfig(60_000, 60_000_000))
    await trio.sleep(5)
    assert granted and granted[0] - raised_at < 5
    admission.stop()


def test_a_bucket_can_be_built_outside_a_trio_run() -> None:
    """TB-01: a module-level quota is built before any trio run and starts full at its first read."""
    b = TokenBucket("module-level", TokenBucketConfig(10, 100))

    async def read() -> tuple[int, int]:
        status = b.status()
        return status.tokens, status.requests

    assert trio.run(read) == (100, 10)


async def test_the_dispatcher_weighs_push_back_by_the_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB-16, SIG-01: an overload signal raised by a job tightens its bucket by three units (1.5),
    a transient error by none, through the dispatcher's limiter feedback."""
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.errors import OverloadRetry, TransientErrorRetry
    from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

    quota = TokenBucket("m", TokenBucketConfig(600, 60_000))

    class Call(Tool[str]):
        def __init__(self, parent: object, signal: Exception) -> None:
            super().__init__(parent)  # type: ignore[arg-type]
            self.signal: Exception | None = signal

        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(quota, 10)

        async def execute(self, context: JobContext) -> str:
            if self.signal is not None:
                signal, self.signal = self.signal, None
                raise signal
            return "ok"

    async with open_dispatcher() as d:
        await d.submit(Call(workflow("u", "a"), TransientErrorRetry("503"))).result()
        assert quota.throttle == 0.0
        await d.submit(Call(workflow("u", "b"), OverloadRetry("529"))).result()
        assert quota.throttle == 1.5


def test_the_status_records_summarize_their_numbers() -> None:
    """STS-02, STS-03: the bucket's status names requests and tokens and answers has_capacity;
    the window's names permits, throttle, window and circuit."""
    from nucleo_trio.admission import ElasticWindowStatus
    from nucleo_trio.admission.token_bucket import TokenBucketStatus

    status = TokenBucketStatus(10, 3, 1000, 250, 0.0)
    assert "3/10" in status.summary and "250/1000" in status.summary
    assert status.has_capacity(250) and not status.has_capacity(251)
    assert not TokenBucketStatus(10, 0, 1000, 999, 0.0).has_capacity(1)
    window = ElasticWindowStatus(5, 2, 1.0, 2.0, "HEALTHY")
    assert "2/5" in window.summary and "2000ms" in window.summary and "HEALTHY" in window.summary
