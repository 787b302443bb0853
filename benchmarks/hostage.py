"""(c) The hostage scenario, in virtual time: whole-demand admission vs sequential acquisition.

The seed ("Admission: The Whole Demand, or Nothing"): a job that takes one resource and then
waits for the next holds capacity other jobs need while it waits. "A saturated token bucket with
a long line behind it is enough for every waiter in the line to hold an HTTP permit, the pool
to empty, and jobs that never needed a token to wait hours for a connection that no one is
using." This benchmark builds exactly that and measures what the jobs that never needed a token
wait.

The scenario, the same on both sides:

* a token bucket of 1,000 tokens per minute, refilled continuously, starting drained (a small
  TIME-kind :class:`~nucleo_trio.admission.AbstractRateLimiter` written here, with an exact
  ``earliest_fit``);
* an HTTP pool of 50 connections;
* 1,000 *token jobs*, each needing 100 tokens and an HTTP connection, submitted at t = 0;
* 100 *HTTP-only jobs*, each needing only an HTTP connection, arriving 10 s later;
* every job holds what it was granted for 1 s of work.

The subject runs the jobs through a dispatcher whose ``http`` gate has 50 permits; admission
grants each job's whole demand or parks it holding nothing. The baseline is the obvious plain
trio program, sequential acquisition: a job takes a connection from a
``trio.CapacityLimiter(50)`` first and then waits for its tokens on the same bucket (polling its
``earliest_fit`` with ``trio.sleep_until``), holding the connection while it waits.

Measured: each HTTP-only job's wait, in virtual seconds from its submission to the start of its
work; the p99 on each side and their ratio. Also, for context, the most connections ever held by
jobs that were not working (sampled every virtual second), and when the last token job started
(the bucket's throughput, which whole-demand admission must not cost). Everything runs under
``trio.testing.MockClock(autojump_threshold=0)``: the hundred virtual minutes take about a second,
and the result is a property of the scheduling, not of the machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing

from nucleo_trio.admission import AbstractRateLimiter, Replenishment
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow

from ._harness import Row, percentile, progress, verdict

NAME = "hostage"
TITLE = "the hostage scenario (virtual time): HTTP-only jobs behind a saturated token bucket"

TARGET_PERCENT = 1.0

TOKENS_PER_MINUTE = 1_000
TOKENS_PER_JOB = 100
HTTP_PERMITS = 50
TOKEN_JOBS = 1_000
HTTP_ONLY_JOBS = 100
HTTP_ONLY_ARRIVAL = 10.0
WORK_SECONDS = 1.0
SAMPLE_EVERY = 1.0
VIRTUAL_TIME_LIMIT = 24 * 3600.0
# Samples fall between the instants jobs start and end, never on them.
SAMPLE_OFFSET = 0.5


# --------------------------------------------------------------------------------------------
# The bucket: a TIME account, clocked on trio.current_time()
# --------------------------------------------------------------------------------------------


@attrs.frozen
class MinuteBucketStatus:
    """The bucket at one moment: whole tokens available out of the per-minute capacity."""

    capacity: int
    available: int

    @property
    def summary(self) -> str:
        return f"tokens {self.available}/{self.capacity}"


def _tokens(amounts: Sequence[Any]) -> int:
    """The token count of a list of amounts (each amount is a count)."""
    total = 0
    for amount in amounts:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise TypeError(f"MinuteBucket: an amount is a token count >= 0, got {amount!r}")
        total += amount
    return total


class MinuteBucket(AbstractRateLimiter):
    """``per_minute`` tokens a minute, refilled continuously, starting drained.

    A TIME account: a spent token comes back only as the clock moves on, so ``release`` never
    returns it (a roll-back does). Each amount is a token count. ``earliest_fit`` is exact: at
    the instant it names, ``fits`` answers true (it adds a microsecond so float rounding in the
    refill can never leave the bucket a hair short at the deadline).
    """

    _NUDGE = 1e-6

    def __init__(self, name: str, per_minute: int) -> None:
        if per_minute <= 0:
            raise ValueError(
                f"MinuteBucket {name!r}: per_minute must be positive, got {per_minute}"
            )
        self._name = name
        self._capacity = per_minute
        self._rate = per_minute / 60.0
        self._level = 0.0
        self._stamp = trio.current_time()

    @property
    def limiter_name(self) -> str:
        return self._name

    @property
    def limiter_category(self) -> str:
        return "token_bucket"

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        self._refresh()
        return self._capacity - math.floor(self._level)

    def status(self) -> MinuteBucketStatus:
        self._refresh()
        return MinuteBucketStatus(self._capacity, math.floor(self._level))

    def replenishment(self) -> Replenishment:
        return Replenishment.TIME

    def _refresh(self) -> None:
        now = trio.current_time()
        elapsed = now - self._stamp
        if elapsed > 0:
            self._level = min(float(self._capacity), self._level + elapsed * self._rate)
            self._stamp = now

    def _asked(self, mine: Sequence[Any]) -> int:
        asked = _tokens(mine)
        if asked > self._capacity:
            raise UncorrectableError(
                f"{self._name}: {asked} tokens exceeds the {self._capacity} tokens-per-minute budget"
            )
        return asked

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        asked = self._asked(mine)
        self._refresh()
        return self._level >= asked + _tokens(reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        self._level -= self._asked(mine)
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        self._refresh()
        self._level = min(float(self._capacity), self._level + _tokens(amounts))
        self._capacity_changed()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        needed = self._asked(mine) + _tokens(reserved_ahead)
        if needed > self._capacity:
            return None  # only the head leaving can help, never the clock
        self._refresh()
        deficit = needed - self._level
        now = trio.current_time()
        if deficit <= 0:
            return now
        return now + deficit / self._rate + self._NUDGE


# --------------------------------------------------------------------------------------------
# What both sides record
# --------------------------------------------------------------------------------------------


class Ledger:
    """Waits of each kind of job, and how many connections idle jobs held."""

    def __init__(self) -> None:
        self.http_only_waits: list[float] = []
        self.token_waits: list[float] = []
        self.working = 0
        self.peak_idle_held = 0
        self.last_token_start = 0.0
        self.done = trio.Event()
        self._outstanding = TOKEN_JOBS + HTTP_ONLY_JOBS

    async def work(self, submitted: float, *, token_job: bool) -> None:
        now = trio.current_time()
        if token_job:
            self.token_waits.append(now - submitted)
            self.last_token_start = max(self.last_token_start, now)
        else:
            self.http_only_waits.append(now - submitted)
        self.working += 1
        try:
            await trio.sleep(WORK_SECONDS)
        finally:
            self.working -= 1
        self._outstanding -= 1
        if self._outstanding == 0:
            self.done.set()

    async def sample(self, held: Any) -> None:
        """Every virtual second, connections held minus jobs working: connections held idle."""
        await trio.sleep(SAMPLE_OFFSET)
        while not self.done.is_set():
            self.peak_idle_held = max(self.peak_idle_held, int(held()) - self.working)
            with trio.move_on_after(SAMPLE_EVERY):
                await self.done.wait()


# --------------------------------------------------------------------------------------------
# The subject: nucleo_trio
# --------------------------------------------------------------------------------------------


class TokenJob(Tool[None]):
    """Needs 100 tokens and an HTTP connection, as one demand."""

    def __init__(self, parent: Identifiable, bucket: MinuteBucket, ledger: Ledger) -> None:
        super().__init__(parent)
        self._bucket = bucket
        self._ledger = ledger
        self.submitted = trio.current_time()

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self._bucket, TOKENS_PER_JOB).require_http()

    async def execute(self, context: JobContext) -> None:
        await self._ledger.work(self.submitted, token_job=True)


class HttpOnlyJob(Tool[None]):
    """Needs only an HTTP connection."""

    def __init__(self, parent: Identifiable, ledger: Ledger) -> None:
        super().__init__(parent)
        self._ledger = ledger
        self.submitted = trio.current_time()

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_http()

    async def execute(self, context: JobContext) -> None:
        await self._ledger.work(self.submitted, token_job=False)


async def whole_demand(ledger: Ledger) -> None:
    config = DispatcherConfig(http_connections=HTTP_PERMITS)
    async with open_dispatcher(config) as dispatcher, trio.open_nursery() as nursery:
        http_gate = dispatcher.http_gate
        nursery.start_soon(ledger.sample, lambda: http_gate.in_use)
        bucket = MinuteBucket("tokens", TOKENS_PER_MINUTE)
        root = workflow("bench", "hostage")
        handles = [dispatcher.submit(TokenJob(root, bucket, ledger)) for _ in range(TOKEN_JOBS)]
        await trio.sleep(HTTP_ONLY_ARRIVAL)
        handles += [dispatcher.submit(HttpOnlyJob(root, ledger)) for _ in range(HTTP_ONLY_JOBS)]
        for handle in handles:
            await handle.result()


# --------------------------------------------------------------------------------------------
# The baseline: sequential acquisition in plain trio
# --------------------------------------------------------------------------------------------


async def sequential(ledger: Ledger) -> None:
    pool = trio.CapacityLimiter(HTTP_PERMITS)
    bucket = MinuteBucket("tokens", TOKENS_PER_MINUTE)
    asked = (TOKENS_PER_JOB,)

    async def token_job(submitted: float) -> None:
        async with pool:  # the connection first...
            while not bucket.try_take(asked, ()):  # ...then the tokens, holding it
                deadline = bucket.earliest_fit(asked, ())
                assert deadline is not None
                await trio.sleep_until(deadline)
            await ledger.work(submitted, token_job=True)

    async def http_only_job(submitted: float) -> None:
        async with pool:
            await ledger.work(submitted, token_job=False)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.sample, lambda: pool.borrowed_tokens)
        for _ in range(TOKEN_JOBS):
            nursery.start_soon(token_job, trio.current_time())
        await trio.sleep(HTTP_ONLY_ARRIVAL)
        for _ in range(HTTP_ONLY_JOBS):
            nursery.start_soon(http_only_job, trio.current_time())


def _play(main: Any) -> Ledger:
    ledger = Ledger()

    async def bounded() -> None:
        # A wrong earliest_fit or a lost wake-up would otherwise spin virtual time for ever.
        with trio.fail_after(VIRTUAL_TIME_LIMIT):
            await main(ledger)

    trio.run(bounded, clock=trio.testing.MockClock(autojump_threshold=0))
    if len(ledger.http_only_waits) != HTTP_ONLY_JOBS or len(ledger.token_waits) != TOKEN_JOBS:
        raise RuntimeError(
            f"hostage benchmark: {len(ledger.token_waits)} token jobs and "
            f"{len(ledger.http_only_waits)} HTTP-only jobs ran, expected {TOKEN_JOBS} and "
            f"{HTTP_ONLY_JOBS}"
        )
    return ledger


def run(quick: bool) -> list[Row]:
    # Virtual time makes the answer exact and the run cheap, so --quick runs the same scenario.
    subject = _play(whole_demand)
    baseline = _play(sequential)
    p99 = percentile(subject.http_only_waits, 0.99)
    p99_base = percentile(baseline.http_only_waits, 0.99)
    percent = p99 / p99_base * 100.0
    progress(
        f"  hostage: HTTP-only p99 wait {p99:.2f} s (nucleo_trio) vs {p99_base:,.0f} s "
        f"(sequential): {percent:.3f} %"
    )
    return [
        Row(NAME, "HTTP-only p99 wait, sequential acquisition", p99_base, "virtual s"),
        Row(NAME, "HTTP-only p99 wait, nucleo_trio", p99, "virtual s"),
        Row(
            NAME,
            "p99 ratio (nucleo_trio / sequential)",
            percent,
            "%",
            f"<= {TARGET_PERCENT:g} %",
            verdict(percent <= TARGET_PERCENT),
        ),
        Row(
            NAME,
            "HTTP-only p50 wait, sequential acquisition",
            percentile(baseline.http_only_waits, 0.5),
            "virtual s",
        ),
        Row(
            NAME,
            "HTTP-only p50 wait, nucleo_trio",
            percentile(subject.http_only_waits, 0.5),
            "virtual s",
        ),
        Row(
            NAME,
            "peak connections held idle, sequential",
            baseline.peak_idle_held,
            f"of {HTTP_PERMITS}",
        ),
        Row(
            NAME,
            "peak connections held idle, nucleo_trio",
            subject.peak_idle_held,
            f"of {HTTP_PERMITS}",
        ),
        Row(NAME, "last token job started, sequential", baseline.last_token_start, "virtual s"),
        Row(NAME, "last token job started, nucleo_trio", subject.last_token_start, "virtual s"),
    ]
