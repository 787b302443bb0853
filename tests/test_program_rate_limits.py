"""Rate limits as upstreams count them (issue 20, item 3).

* ``RateLimit(limit, per=, burst=, margin=)``: a plain "N per period" account, a sliding window
  of start stamps, usable with no amount and as the ``rate_limit`` config kind;
* the elastic window counts the 429s of one burst of in-flight replies as one push-back, and its
  breaker (threshold, cooldown, throttle ceiling) and a safety margin are config settings;
* a catalog entry states its bucket's ``burst``, and a bucket built from an entry that states
  none lets one request go at a time, so no sliding minute sees more than the quota (checked
  against the project's fake OpenAI server, whose window is a sliding minute).

Time is virtual throughout (``autojump_clock``); the real clock is measured in
``benchmarks/_rate_realclock.py``, never here.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import JobRequirements, RateLimit, Tool, open_dispatcher, workflow
from nucleo_trio.admission import (
    Admission,
    CircuitState,
    Demand,
    ElasticWindow,
    RateLimiterRegistry,
    TokenBucket,
)
from nucleo_trio.dispatch import DispatcherConfig
from nucleo_trio.errors import ConfigError, UncorrectableError, UpstreamFailure
from nucleo_trio.jobs import JobContext
from nucleo_trio.llm import LLMRequest, Message
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.llm.clients.openai import OpenAICompatibleClient
from nucleo_trio.plugins import LimiterRegistry, PluginError, make_plugin_manager

from .model_doubles import catalog, entry
from .test_rates_realclock import drive, most_in_any


class Stamp(Tool[float]):
    """Answers the instant it started, after one request on ``account`` (``amount`` of it)."""

    def __init__(self, parent: Any, account: Any, amount: Any = None) -> None:
        super().__init__(parent)
        self.account = account
        self.amount = amount

    def requirements(self) -> JobRequirements:
        if self.amount is None:
            return JobRequirements().require_rate_limiter(self.account)
        return JobRequirements().require_rate_limiter(self.account, self.amount)

    async def execute(self, context: JobContext) -> float:
        return trio.current_time()


async def starts_of(account: Any, jobs: int, amount: Any = None) -> list[float]:
    """When each of ``jobs`` jobs on ``account`` started, through a real dispatcher."""
    async with open_dispatcher() as dispatcher:
        root = workflow("alice", "rates")
        handles = [dispatcher.submit(Stamp(root, account, amount)) for _ in range(jobs)]
        return [round(await handle.result(), 6) for handle in handles]


# ------------------------------------------------------------------------------------------------
# RateLimit: N per period
# ------------------------------------------------------------------------------------------------


async def test_five_per_second_needs_no_amount_no_model_and_no_subclass(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``require_rate_limiter(limit)`` with no amount is one request: twelve jobs on 5 per
    second start five at 0, five at 1 and two at 2."""
    five = RateLimit(5, per=1.0)
    assert five.limiter_name == "5 per 1 s" and five.limiter_category == "rate_limit"
    assert await starts_of(five, 12) == [0.0] * 5 + [1.0] * 5 + [2.0] * 2
    assert five.status().summary == "requests 3/5 free per 1 s"


@pytest.mark.parametrize("busy_step", [0.0, 0.05, 0.3])
async def test_no_window_of_per_seconds_ever_holds_more_than_the_limit(
    autojump_clock: trio.testing.MockClock, busy_step: float
) -> None:
    """Forty looping callers asking for one to three requests at random, with or without a
    busy task delaying every resumption: no interval of ``per`` seconds, wherever it starts,
    holds more than ``limit`` requests as the callers see them, and the rate is served."""
    rng = random.Random(20)
    account = RateLimit(10, per=0.5)
    starts = await drive(
        account,
        callers=40,
        seconds=20.0,
        clock=autojump_clock,
        amounts=lambda: rng.choice([None, 1, 2, 3]),
        busy_step=busy_step,
    )
    assert most_in_any(starts, 0.5) <= 10
    # A slot is held for the window, the caller's wake-up delay and the confirmation (up to
    # three batches, each one busy step long); a head asking three waits for three free.
    assert len(starts) >= 0.9 * 10 * 20.0 / (0.5 + 5 * busy_step) - 10


def test_earliest_fit_names_the_exact_instant_the_next_request_fits() -> None:
    """Full, the next request fits at the oldest stamp plus ``per``: not a nanosecond before,
    and at that instant exactly, for two requests the second-oldest stamp plus ``per``; beside
    a reservation that the window can never hold with it, only an event helps (None)."""
    now = [0.0]
    account = RateLimit(3, per=0.7, clock=lambda: now[0])
    for at in (0.1, 0.25, 0.3):
        now[0] = at
        assert account.try_take([None], [])
    assert not account.fits([None], [])
    one, two = account.earliest_fit([None], []), account.earliest_fit([None, None], [])
    assert one == 0.1 + 0.7 and two == 0.25 + 0.7
    assert account.earliest_fit([None], [None]) == two  # one behind a reservation of one
    assert account.earliest_fit([None], [None, None, None]) is None
    now[0] = math.nextafter(one, -math.inf)
    assert not account.fits([None], [])
    now[0] = one
    assert account.fits([None], []) and not account.fits([None, None], [])
    assert account.in_use == 2


async def test_a_burst_lets_that_many_go_at_once_then_spaces_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``burst=2`` on 10 per second: two at once, then one every 0.1 s; the window still holds
    (the next ten never come sooner than a second after the first ten)."""
    paced = RateLimit(10, per=1.0, burst=2)
    starts = await starts_of(paced, 6)
    assert starts == [0.0, 0.0, 0.1, 0.2, 0.3, 0.4]
    later = await drive(paced, callers=30, seconds=10.0, clock=autojump_clock)
    assert most_in_any(later, 1.0) <= 10
    assert most_in_any(later, 0.1 - 1e-9) <= 2


async def test_a_margin_holds_each_slot_that_much_longer_than_the_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``margin=0.25``: requests that reach the upstream up to 0.25 s late still fit its
    window of one second, because the account's window is 1.25 s long."""
    careful = RateLimit(5, per=1.0, margin=0.25)
    assert await starts_of(careful, 10) == [0.0] * 5 + [1.25] * 5
    assert careful.status().summary == "requests 0/5 free per 1 s, margin 250 ms"
    assert careful.earliest_fit([None], []) == pytest.approx(2.5)


async def test_amounts_are_requests_and_a_bad_one_is_refused_when_declared(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``None`` is one request, an int that many (a batch the upstream counts as several);
    a bool, zero, a negative, a fraction, NaN or a string is refused by
    ``require_rate_limiter``, naming the account and the value, and so is an ask for more at
    once than the limit or the burst."""
    account = RateLimit(4, per=1.0, name="search")
    assert await starts_of(account, 3, amount=2) == [0.0, 0.0, 1.0]
    refused: list[tuple[Any, type[Exception], str]] = [
        (True, TypeError, "bool"),
        (0, ValueError, "zero requests"),
        (-1, ValueError, "negative"),
        (1.5, TypeError, "float is not a whole number"),
        (math.nan, ValueError, "NaN"),
        ("2", TypeError, "str is not a whole number"),
        (5, ValueError, "5 requests at once, but the limit is 4 per 1 s"),
    ]
    for amount, error, reason in refused:
        with pytest.raises(error, match=reason) as caught:
            JobRequirements().require_rate_limiter(account, amount)
        assert "search" in str(caught.value)
    with pytest.raises(ValueError, match="3 requests at once, but the burst is 2"):
        JobRequirements().require_rate_limiter(RateLimit(4, burst=2), 3)
    with pytest.raises(UncorrectableError, match="5 requests at once can never fit"):
        account.fits([None] * 5, [])


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"limit": 0}, ValueError, "limit must be at least 1, got 0"),
        ({"limit": -3}, ValueError, "limit must be at least 1"),
        ({"limit": 2.5}, TypeError, "limit must be an int, got 2.5"),
        ({"limit": True}, TypeError, "limit must be an int"),
        ({"limit": "5"}, TypeError, "limit must be an int"),
        ({"limit": 5, "per": 0}, ValueError, "per must be a finite number of seconds > 0"),
        ({"limit": 5, "per": -1.0}, ValueError, "per must be"),
        ({"limit": 5, "per": math.nan}, ValueError, "per must be a finite number"),
        ({"limit": 5, "per": math.inf}, ValueError, "per must be a finite number"),
        ({"limit": 5, "per": "1"}, TypeError, "per must be a number of seconds"),
        ({"limit": 5, "burst": 0}, ValueError, "burst must be at least 1"),
        ({"limit": 5, "burst": 6}, ValueError, r"burst must be at most the limit \(5\)"),
        ({"limit": 5, "burst": 1.0}, TypeError, "burst must be an int"),
        (
            {"limit": 5, "margin": -0.1},
            ValueError,
            "margin must be a finite number of seconds >= 0",
        ),
        ({"limit": 5, "margin": math.nan}, ValueError, "margin must be"),
        ({"limit": 5, "margin": None}, TypeError, "margin must be a number of seconds"),
        ({"limit": 5, "name": " "}, ValueError, "name must be a non-blank str"),
        ({"limit": 5, "clock": 3}, TypeError, "clock must be callable"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"RateLimit: {message}"):
        RateLimit(**arguments)


async def test_a_roll_back_gives_the_slots_back_and_a_raised_limit_wakes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``give`` (a roll-back) forgets the newest stamps and the burst's share at once; a raised
    limit runs the wake, a lowered one never does, and a burst above a lowered limit counts as
    the limit."""
    account = RateLimit(4, per=1.0, burst=4)
    wakes: list[int] = []
    account.on_capacity_change(lambda: wakes.append(1))
    assert account.try_take([None, None, None], [])
    account.give([None, None])
    assert account.in_use == 1 and account.fits([None, None, None], [])
    account.set_limit(2)
    assert wakes == [] and account.status().burst == 2
    assert account.fits([None], []) and not account.fits([None, None], [])
    account.set_limit(6)
    assert wakes == [1] and account.status().burst == 4
    with pytest.raises(ValueError, match="RateLimit.set_limit: limit must be at least 1"):
        account.set_limit(0)


async def test_a_429_is_logged_once_a_window_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The plain account never slows down: a refusal means the upstream counts differently
    or shares the quota; it is said once a window."""
    account = RateLimit(5, per=1.0, name="search")
    failure = UpstreamFailure(status=429, service="search", detail="slow down")
    for _ in range(5):
        account.on_rate_limit_error(failure)
    await trio.sleep(1.0)
    account.on_rate_limit_error(failure)
    warnings = [r for r in caplog.records if r.name == "nucleo_trio.admission.rate_limit"]
    assert len(warnings) == 2 and "kept 5 per 1 s" in warnings[0].getMessage()
    assert account.fits([None] * 5, [])


async def test_the_rate_limit_kind_is_built_from_configuration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``{"kind": "rate_limit", "settings": {"limit": 3, "per": 2, "burst": 2}}`` builds the
    account named after its key; a bad setting refuses the start, naming the limiter."""
    config = DispatcherConfig.from_mapping(
        {"limiters": {"search": {"kind": "rate_limit", "settings": {"limit": 3, "per": 2}}}}
    )
    async with open_dispatcher(config) as dispatcher:
        search = dispatcher.limiters["search"]
        assert isinstance(search, RateLimit) and search.limiter_name == "search"
        root = workflow("alice", "configured")
        handles = [dispatcher.submit(Stamp(root, search)) for _ in range(4)]
        assert [await handle.result() for handle in handles] == [0.0, 0.0, 0.0, 2.0]
    for settings, named in (
        ({"limit": 0}, "limit must be at least 1"),
        ({"limit": 3, "pre": 1}, "pre"),
        ({"per": 1}, "limit"),
    ):
        broken = DispatcherConfig.from_mapping(
            {"limiters": {"search": {"kind": "rate_limit", "settings": settings}}}
        )
        with pytest.raises(ConfigError, match="limiter 'search'") as caught:
            async with open_dispatcher(broken):
                pass
        assert named in str(caught.value)


# ------------------------------------------------------------------------------------------------
# The elastic window's breaker: one push-back per burst, settings from config
# ------------------------------------------------------------------------------------------------


class TwentyPerSecond(ElasticWindow):
    base_window = 1.0
    max_requests = 20


def _rate_limited(text: str) -> UpstreamFailure:
    return UpstreamFailure(status=429, service="search", detail=text)


class Search(Tool[str]):
    """One call to the upstream through the OpenAI-compatible client, under ``window``."""

    timeout = 120.0

    def __init__(self, parent: Any, window: ElasticWindow, client: OpenAICompatibleClient):
        super().__init__(parent)
        self.window = window
        self.client = client

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.window)

    async def execute(self, context: JobContext) -> str:
        request = LLMRequest(messages=[Message.user("find it")], max_tokens=10)
        return (await self.client.complete(request)).content


async def test_twelve_replies_in_flight_refused_together_are_one_push_back(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The reported case: a hundred jobs on a window of 20 a second, whose first twelve
    requests are all in flight (the upstream takes half a second) when it answers each of them
    429. Counted one by one, those twelve replies opened the circuit for 30 s and most jobs
    then failed "blocked after sustained rate limiting"; they are one push-back now: the
    throttle doubles the window once, the circuit stays closed, and every job succeeds (the
    twelve on a re-run)."""
    window = TwentyPerSecond()
    refusals = [FakeReply.rate_limited() for _ in range(12)]
    async with serve_fake_openai(*refusals, latency=0.5) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            async with open_dispatcher() as dispatcher:
                root = workflow("alice", "search")
                handles = [dispatcher.submit(Search(root, window, client)) for _ in range(100)]
                answers = [await handle.result() for handle in handles]
    assert answers == ["echo: find it"] * 100
    assert len(server.requests) == 112  # the twelve went again
    assert window.state is CircuitState.HEALTHY and window.coalesced == 11
    said = [r.getMessage() for r in caplog.records if r.name.endswith("elastic_window")]
    assert sum("upstream failure: " in line for line in said) == 1  # one push-back counted
    assert not any("circuit open" in line for line in said)
    assert window.throttle == 0.0  # and the hundred successes since have relaxed it again

    counted_one_by_one = TwentyPerSecond()
    for _ in range(12):
        counted_one_by_one.record_pushback()
    assert counted_one_by_one.state is CircuitState.BLOCKED  # what the twelve used to do


async def test_eight_refusals_of_one_burst_raise_the_throttle_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Eight 429s back from the same burst: throttle 1 (a 2x window), not 8 (9x)."""
    window = TwentyPerSecond()
    assert window.try_take([None] * 8, [])
    await trio.sleep(0.4)
    for n in range(8):
        window.on_rate_limit_error(_rate_limited(f"reply {n}"))
    assert window.throttle == 1.0 and window.status_indicator == "throttle:2.0x"
    assert window.coalesced == 7
    assert "reply 7" in str(window._probe_refusal())  # the newest reply is the one remembered


async def test_a_refusal_counts_again_once_a_window_has_passed_and_a_request_went_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After a counted push-back, a 429 is news only when the window has let a request
    through since and a whole (stretched) window has passed: neither alone is enough."""
    window = TwentyPerSecond()
    window.on_rate_limit_error(_rate_limited("first"))
    assert window.throttle == 1.0  # counted at 0; the effective window is now 2 s
    await trio.sleep(10.0)
    window.on_rate_limit_error(_rate_limited("nothing was sent since"))
    assert (window.throttle, window.coalesced) == (1.0, 1)
    assert window.try_take([None], [])
    window.on_rate_limit_error(_rate_limited("a request went, ten seconds on"))
    assert (window.throttle, window.coalesced) == (2.0, 1)  # counted at 10; window 3 s
    await trio.sleep(0.5)
    assert window.try_take([None], [])
    await trio.sleep(2.0)
    window.on_rate_limit_error(_rate_limited("a request went, but within the window"))
    assert (window.throttle, window.coalesced) == (2.0, 2)
    await trio.sleep(0.5)
    window.on_rate_limit_error(_rate_limited("a window after the last one counted"))
    assert (window.throttle, window.coalesced) == (3.0, 2)


async def test_sustained_push_back_still_opens_the_circuit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A request refused every window, each after a request sent at the slower pace, is
    sustained rate limiting: eleven counted push-backs (nine to the ceiling, then three at it,
    the one reaching it included) open the circuit, as before."""
    window = TwentyPerSecond()
    counted = 0
    while window.state is CircuitState.HEALTHY:
        assert window.try_take([None], [])
        await trio.sleep(window.effective_window)
        window.on_rate_limit_error(_rate_limited("still too fast"))
        counted += 1
        assert counted <= 11
    assert counted == 11 and window.coalesced == 0
    assert window.state is CircuitState.BLOCKED and window.throttle == 9.0


async def test_the_probes_refusal_always_counts(autojump_clock: trio.testing.MockClock) -> None:
    """While PROBING a 429 is the probe's verdict, however soon after the last push-back: the
    circuit re-opens with the cooldown doubled."""

    class QuickWindow(TwentyPerSecond):
        initial_cooldown = 1.0
        max_cooldown = 8.0

    window = QuickWindow()
    for _ in range(11):
        window.record_pushback()
    assert window.state is CircuitState.BLOCKED
    await trio.sleep(1.0)
    assert window.try_take([None], [])
    assert window.state is CircuitState.PROBING
    window.on_rate_limit_error(_rate_limited("probe refused"))
    assert window.state is CircuitState.BLOCKED and window.circuit.cooldown == 2.0


def _window_kind(**settings: Any) -> ElasticWindow:
    registry = LimiterRegistry(make_plugin_manager(load_entrypoints=False))
    built = registry.create("elastic_window", "search", **settings)
    assert isinstance(built, ElasticWindow)
    return built


async def test_the_breaker_and_the_margin_are_set_from_configuration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The ``elastic_window`` kind takes the breaker's threshold (``failures_at_max_to_block``),
    its cooldowns and the throttle ceiling, and the safety margin, by their names."""
    config = DispatcherConfig.from_mapping(
        {
            "limiters": {
                "search": {
                    "kind": "elastic_window",
                    "settings": {
                        "max_requests": 10,
                        "window": 1,
                        "failures_at_max_to_block": 1,
                        "initial_cooldown": 5,
                        "max_cooldown": 20,
                        "max_throttle": 2,
                        "margin": 0.5,
                    },
                }
            }
        }
    )
    async with open_dispatcher(config) as dispatcher:
        window = dispatcher.limiters["search"]
        assert isinstance(window, ElasticWindow)
        assert window.try_take([None] * 10, [])
        assert window.earliest_fit([None], []) == 1.5  # the window plus the margin
        window.record_pushback()
        assert window.state is CircuitState.HEALTHY and window.throttle == 1.0
        window.record_pushback()  # the ceiling of 2, and one push-back there opens it
        assert window.state is CircuitState.BLOCKED and window.throttle == 2.0
        assert window.cooldown_remaining == 5.0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"failures_at_max_to_block": 0}, "failures_at_max_to_block must be > 0, got 0"),
        ({"failures_at_max_to_block": 1.5}, "failures_at_max_to_block must be an int"),
        ({"max_throttle": math.nan}, "max_throttle must be a finite number, got nan"),
        ({"max_throttle": -1}, "max_throttle must be >= 0"),
        ({"initial_cooldown": 0}, "initial_cooldown must be > 0"),
        ({"initial_cooldown": 60, "max_cooldown": 10}, "max_cooldown must be >= initial_cooldown"),
        ({"margin": -0.5}, "margin must be >= 0"),
        ({"margin": "0.1"}, "margin must be a finite number"),
        ({"cooldown": 5}, "unknown setting(s) 'cooldown'"),
        ({"window": "1"}, "window must be a number of seconds"),
    ],
)
def test_a_bad_breaker_setting_is_refused_naming_it(settings: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"max_requests": 10, "window": 1}
    with pytest.raises(PluginError, match=re.escape(message)) as caught:
        _window_kind(**{**base, **settings})
    assert "'elastic_window'" in str(caught.value)


# ------------------------------------------------------------------------------------------------
# The token bucket's burst from the catalog
# ------------------------------------------------------------------------------------------------


def test_a_catalog_entry_states_its_buckets_burst() -> None:
    """``burst`` is a positive int, at most ``rpm``, on an entry that has a bucket (a ``tpm``);
    anything else is refused naming the entry and the field."""
    models = catalog(entry("paced", rpm=30, tpm=90_000, burst=5), entry("plain", rpm=30))
    assert models.spec("paced").burst == 5 and models.spec("plain").burst is None
    for fields, problem in (
        ({"burst": 0}, "must be a positive int, got 0"),
        ({"burst": 2.5}, "must be a positive int"),
        ({"burst": True}, "must be a positive int"),
        ({"burst": 31}, "must be at most rpm (30)"),
        ({"tpm": None, "burst": 2}, "an entry without tpm has no bucket"),
    ):
        with pytest.raises(ConfigError, match=re.escape(problem)) as caught:
            catalog(entry("bad", rpm=30, **fields))
        assert "'bad'" in str(caught.value) and "'burst'" in str(caught.value)


async def test_an_entrys_bucket_takes_its_burst_and_one_request_at_a_time_by_default(
    autojump_clock: trio.testing.MockClock,
) -> None:
    models = catalog(entry("paced", rpm=30, tpm=90_000, burst=5), entry("plain", rpm=30))
    registry = RateLimiterRegistry()
    assert registry.bucket(models.spec("paced")).config.burst == 5
    plain = registry.bucket(models.spec("plain"))
    assert plain.config.burst == 1 and plain.status().requests == 1
    registry.update_limits(models.spec("plain"), 60, 90_000)  # published caps keep the burst
    assert plain.config.burst == 1 and plain.config.rpm == 60


async def _calls_against_the_fake_server(bucket: TokenBucket, calls: int) -> tuple[int, int]:
    """``calls`` callers, each one request through ``bucket`` to a fake server that allows 30
    requests in any sliding minute; (refusals, most arrivals in any minute)."""
    admission = Admission()
    async with serve_fake_openai(requests_per_minute=30) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            refused = 0

            async def call() -> None:
                nonlocal refused
                grant = await admission.admit(Demand().add(bucket, 50))
                admission.release(grant)
                request = LLMRequest(messages=[Message.user("hi")], max_tokens=10)
                try:
                    await client.complete(request)
                except Exception:  # noqa: BLE001 - a 429 is what is counted here
                    refused += 1

            async with trio.open_nursery() as nursery:
                await nursery.start(admission.run)
                async with trio.open_nursery() as callers:
                    for _ in range(calls):
                        callers.start_soon(call)
                admission.stop()
    arrivals = [r.received_at for r in server.requests]
    assert server.rate_limited == refused
    return refused, most_in_any(arrivals, 60.0)


async def test_a_bucket_from_an_entry_at_30_rpm_never_lets_a_sliding_minute_see_more_than_30(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Sixty calls through the bucket of an entry stating ``rpm = 30`` and no burst, against
    the fake server's sliding minute of 30: none refused, no minute holding more than 30. The
    same entry stating ``burst = 30`` (the whole minute at once, as every bucket used to) has
    its next 29 requests refused inside the first minute."""
    paced = catalog(entry("paced", rpm=30, tpm=1_000_000)).spec("paced")
    refused, most = await _calls_against_the_fake_server(RateLimiterRegistry().bucket(paced), 60)
    assert (refused, most) == (0, 30)

    eager = catalog(entry("eager", rpm=30, tpm=1_000_000, burst=30)).spec("eager")
    refused, _ = await _calls_against_the_fake_server(RateLimiterRegistry().bucket(eager), 60)
    assert refused == 29


async def test_the_token_bucket_kind_defaults_to_one_request_at_a_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A bucket declared in configuration is an upstream's quota too: one request at a time
    unless its ``burst`` says otherwise (``None`` in code: the whole minute at once)."""
    registry = LimiterRegistry(make_plugin_manager(load_entrypoints=False))
    default = registry.create("token_bucket", "m", rpm=600, tpm=60_000)
    assert isinstance(default, TokenBucket) and default.config.burst == 1
    assert await starts_of(default, 3, amount=10) == [0.0, 0.1, 0.2]
    eager = registry.create("token_bucket", "n", rpm=600, tpm=60_000, burst=None)
    assert isinstance(eager, TokenBucket) and eager.config.request_cap == 600
