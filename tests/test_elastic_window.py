"""The elastic window: a sliding request window, an adaptive throttle, a circuit breaker (EW).

Time is virtual (``autojump_clock``): a ``trio.sleep`` moves the clock instantly. The Java rules
race threads; trio runs one task at a time, so the "concurrent" tests below start many tasks that
each pass a checkpoint before acting, which interleaves them in an order the test does not pick.
Every account method is synchronous, so each call is one critical section, as a lock would give.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission.elastic_window import (
    Circuit,
    CircuitState,
    ElasticWindow,
    ElasticWindowStatus,
    format_window,
)
from nucleo_trio.admission.limiter import Replenishment
from nucleo_trio.errors import UncorrectableError

ONE = [1]


class SecondWindowRateLimiter(ElasticWindow):
    """A 1 s window of 3 requests."""

    base_window = 1.0
    max_requests = 3


class BigWindowRateLimiter(ElasticWindow):
    """A roomy window whose throttle, not its size, is under test."""

    base_window = 1.0
    max_requests = 1000


class FastCooldownRateLimiter(ElasticWindow):
    """A 100-slot window with a 100 ms cooldown capped at 400 ms."""

    base_window = 1.0
    max_requests = 100
    initial_cooldown = 0.1
    max_cooldown = 0.4


class Wakes:
    def __init__(self, window: ElasticWindow) -> None:
        self.count = 0
        window.on_capacity_change(self)

    def __call__(self) -> None:
        self.count += 1


class Upstream429(Exception):
    """A stand-in rate-limit failure that carries its upstream's one-line summary."""

    @property
    def summary(self) -> str:
        return "429 Too Many Requests (retry-after 30s)"


def fail(window: ElasticWindow, times: int = 1) -> None:
    """``times`` 429s, each counted as a push-back of its own, as 429s a window apart with
    requests between them are. Replies of one burst count once (on_rate_limit_error coalesces
    them; tests/test_program_rate_limits.py); the rules here are about counted push-backs."""
    for _ in range(times):
        before = window.coalesced
        window.on_rate_limit_error(Upstream429())
        if window.coalesced > before:
            window.record_pushback()


def block(window: ElasticWindow) -> None:
    """Open the circuit from a fresh window: 11 failures do it with the defaults; apply 12."""
    fail(window, 12)
    assert window.state is CircuitState.BLOCKED


# -- template, construction, identity -------------------------------------------------------------


async def test_a_fresh_window_is_healthy_and_takes_one_stamp(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-07, EW-05: HEALTHY, throttle 0, no indicator; a take adds one stamp."""
    w = SecondWindowRateLimiter()
    assert w.state is CircuitState.HEALTHY and w.throttle == 0
    assert w.status_indicator is None
    assert w.in_use == 0 and w.capacity == 3
    assert w.try_take(ONE, [])
    assert w.in_use == 1


async def test_identity_and_shape_are_fixed(autojump_clock: trio.testing.MockClock) -> None:
    """EW-04, EW-05, EW-06: needs the HTTP gate, TIME, elastic_window; the name drops the
    RateLimiter suffix, keeps a name without it, and an explicit name wins."""
    w = SecondWindowRateLimiter()
    assert w.requires_http_connection is True
    assert w.replenishment() is Replenishment.TIME
    assert w.limiter_category == "elastic_window"
    assert w.limiter_name == "SecondWindow"

    class Suffixless(ElasticWindow):
        base_window = 1.0
        max_requests = 1

    assert Suffixless().limiter_name == "Suffixless"
    assert SecondWindowRateLimiter("search-api").limiter_name == "search-api"


def test_the_template_defaults() -> None:
    """EW-01: the tuning defaults, and probe timeout falls back to the max cooldown."""
    w = SecondWindowRateLimiter()
    assert (w.throttle_increment, w.throttle_decrement, w.max_throttle) == (1.0, 0.2, 9.0)
    assert (w.successes_per_decrease, w.recovery_minutes, w.recovery_multiplier) == (3, 5, 2.5)
    assert w.failures_at_max_to_block == 3
    assert (w.initial_cooldown, w.max_cooldown) == (30.0, 3600.0)
    assert w.probe_timeout_seconds == 3600.0


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("max_requests", 0),
        ("base_window", 0.0),
        ("initial_cooldown", -1.0),
        ("failures_at_max_to_block", 0),
        ("successes_per_decrease", 0),
        ("probe_timeout", 0.0),
        ("max_throttle", -0.5),
        ("max_cooldown", 10.0),
    ],
)
def test_validation_rejects_bad_config(attribute: str, value: float) -> None:
    """EW-02: each of the eight bounds is enforced and the error names the value."""
    bad = type("BadRateLimiter", (SecondWindowRateLimiter,), {attribute: value})
    with pytest.raises(ValueError, match=attribute):
        bad()


def test_a_template_without_its_two_values_is_refused() -> None:
    """EW-01: a subclass must set base_window and max_requests."""

    class Incomplete(ElasticWindow):
        base_window = 1.0

    with pytest.raises(TypeError, match="max_requests"):
        Incomplete()


def test_a_zero_max_throttle_is_allowed() -> None:
    """EW-02: max throttle only needs to be >= 0."""
    rigid = type("RigidRateLimiter", (SecondWindowRateLimiter,), {"max_throttle": 0.0})
    assert rigid().max_throttle == 0.0


@attrs.frozen
class SearchApiSettings:
    """A deployment's settings object, as a template reads its values from."""

    requests_per_window: int = 4
    window_seconds: float = 2.0
    cooldown_seconds: float = 5.0


SEARCH_API = SearchApiSettings()


class SearchApiRateLimiter(ElasticWindow):
    """A template whose settings are a settings object's values, read when the class is made."""

    base_window = SEARCH_API.window_seconds
    max_requests = SEARCH_API.requests_per_window
    initial_cooldown = SEARCH_API.cooldown_seconds
    max_cooldown = 4 * SEARCH_API.cooldown_seconds


class StricterSearchApiRateLimiter(SearchApiRateLimiter):
    """A template refined by a constant in a subclass of a subclass."""

    max_requests = 2


async def test_a_template_of_constants_and_settings_values_works(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-03, in its Python form: the template's settings are class attributes, fixed when the
    class is defined from constants or a settings object's values, and read off the class, so
    nothing an instance does can change them. Such a subclass is checked and behaves by its
    settings: its capacity, its window, its cooldown; a subclass of it overrides one value."""
    w = SearchApiRateLimiter()
    assert (w.limiter_name, w.capacity, w.effective_window) == ("SearchApi", 4, 2.0)
    for _ in range(4):
        assert w.try_take(ONE, [])
    assert not w.fits(ONE, [])
    assert w.earliest_fit(ONE, []) == 2.0  # the oldest stamp (t = 0) plus the 2 s window
    block(w)
    assert w.circuit.cooldown == 5.0 and w.cooldown_remaining == 5.0
    stricter = StricterSearchApiRateLimiter()
    assert (stricter.capacity, stricter.base_window, stricter.initial_cooldown) == (2, 2.0, 5.0)
    assert stricter.try_take([1, 1], []) and not stricter.fits(ONE, [])


def test_a_setting_that_depends_on_the_instance_is_refused() -> None:
    """EW-03: a setting may not depend on instance state. One written as a property over an
    instance field (the Java hazard's shape) is refused at construction, naming it; one
    assigned on an instance, before or after the base initialiser, raises AttributeError."""

    class PropertyRateLimiter(ElasticWindow):
        base_window = 1.0

        def __init__(self, limit: int) -> None:
            super().__init__()
            self._limit = limit

        @property
        def max_requests(self) -> int:  # type: ignore[override]
            return self._limit

    with pytest.raises(TypeError, match=r"PropertyRateLimiter\.max_requests must be a class attr"):
        PropertyRateLimiter(5)

    class AssignedAfterRateLimiter(SecondWindowRateLimiter):
        def __init__(self, limit: int) -> None:
            super().__init__()
            self.max_requests = limit  # type: ignore[misc]

    with pytest.raises(AttributeError, match="max_requests is a template setting"):
        AssignedAfterRateLimiter(5)

    class AssignedBeforeRateLimiter(SecondWindowRateLimiter):
        def __init__(self, window: float) -> None:
            self.base_window = window  # type: ignore[misc]
            super().__init__()

    with pytest.raises(AttributeError, match="base_window is a template setting"):
        AssignedBeforeRateLimiter(5.0)
    w = SecondWindowRateLimiter()
    with pytest.raises(AttributeError, match="initial_cooldown is a template setting"):
        w.initial_cooldown = 1.0  # type: ignore[misc]
    assert w.initial_cooldown == 30.0


# -- window arithmetic ----------------------------------------------------------------------------


async def test_the_effective_window_stretches_with_the_throttle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-08: base x (1 + throttle), applied to stamps already recorded."""
    w = SecondWindowRateLimiter()
    assert w.effective_window == 1.0
    fail(w)
    assert w.effective_window == 2.0
    fail(w)
    assert w.effective_window == 3.0
    for _ in range(20):
        w.on_advisory_pressure()  # advisories, so the circuit stays closed
    assert w.effective_window == 10.0
    assert w.try_take(ONE, [])
    await trio.sleep(5)
    assert w.in_use == 1  # a 1 s window would have let it go; the 10 s one holds it


async def test_a_full_window_does_not_fit_until_the_oldest_stamp_leaves(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-09, EW-10, EW-11: a full window refuses; the deadline is the k-th oldest stamp + the
    window; two slots wait longer than one; one behind one waits as long as two."""
    w = SecondWindowRateLimiter()
    start = trio.current_time()
    for _ in range(3):
        assert w.try_take(ONE, [])
        await trio.sleep(0.1)
    assert not w.fits(ONE, [])
    assert not w.try_take(ONE, [])
    one = w.earliest_fit(ONE, [])
    two = w.earliest_fit([1, 1], [])
    assert one == pytest.approx(start + 1.0)
    assert two == pytest.approx(start + 1.1)
    assert w.earliest_fit(ONE, ONE) == two
    assert w.earliest_fit([1, 1, 1, 1], []) is None
    with pytest.raises(UncorrectableError, match="can never fit a window of 3"):
        w.fits([1, 1, 1, 1], [])
    with pytest.raises(UncorrectableError, match="can never fit"):
        w.try_take([1, 1, 1, 1], [])
    assert one is not None
    await trio.sleep_until(one)
    assert w.fits(ONE, []) and w.try_take(ONE, [])


async def test_room_for_mine_but_not_beside_the_reservation_is_false(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-09, EW-10: stamps + mine + reserved <= max; an empty shortfall means now."""
    w = SecondWindowRateLimiter()
    assert w.try_take(ONE, [])
    assert w.fits(ONE, ONE)
    assert not w.fits(ONE, [1, 1])
    assert w.earliest_fit(ONE, ONE) == trio.current_time()


async def test_earliest_fit_ignores_the_circuit(autojump_clock: trio.testing.MockClock) -> None:
    """EW-10: a blocked circuit still answers a deadline from the stamps alone."""
    w = FastCooldownRateLimiter()
    block(w)
    assert w.earliest_fit(ONE, []) == trio.current_time()


async def test_give_drops_the_newest_stamps_and_wakes_nobody(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-12: a refund removes the newest stamps, so the oldest deadline stays; no wake."""
    w = SecondWindowRateLimiter()
    wakes = Wakes(w)
    start = trio.current_time()
    for _ in range(3):
        assert w.try_take(ONE, [])
        await trio.sleep(0.2)
    w.give(ONE)
    assert w.in_use == 2
    # The oldest stamp (start) is still there: two more slots wait for it to leave.
    assert w.earliest_fit([1, 1], []) == pytest.approx(start + 1.0)
    w.give([1, 1, 1, 1])  # more than held: the window is simply empty
    assert w.in_use == 0
    assert wakes.count == 0


async def test_a_time_window_still_binds_after_the_work_is_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-12: nothing but the clock or a rollback frees a slot."""
    w = SecondWindowRateLimiter()
    for _ in range(3):
        assert w.try_take(ONE, [])
    await trio.sleep(0.5)
    assert not w.fits(ONE, [])
    await trio.sleep(0.5)
    assert w.fits(ONE, [])


# -- throttle -------------------------------------------------------------------------------------


async def test_a_rate_limit_error_bumps_the_throttle_and_logs(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """EW-13: +1.0 per failure up to 9.0, a warn line with the summary, no wake."""
    w = BigWindowRateLimiter()
    wakes = Wakes(w)
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.admission.elastic_window"):
        fail(w)
    assert w.throttle == 1.0
    assert any("429 Too Many Requests" in r.getMessage() for r in caplog.records)
    fail(w, 19)
    assert w.throttle == 9.0
    assert wakes.count == 0


async def test_advisory_pressure_bumps_the_throttle_without_touching_the_circuit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-14: twenty advisories give 9.0 and the circuit stays HEALTHY, streak untouched."""
    w = BigWindowRateLimiter()
    fail(w, 10)  # throttle 9, two failures at max: one more would open
    for _ in range(20):
        w.on_advisory_pressure()
    assert w.throttle == 9.0 and w.state is CircuitState.HEALTHY
    fail(w)
    assert w.state is CircuitState.BLOCKED  # the streak was still 2; advisories did not count


async def test_successes_relax_the_throttle(autojump_clock: trio.testing.MockClock) -> None:
    """EW-15: within 5 min every 3rd success takes 0.2 off; never below 0."""
    w = BigWindowRateLimiter()
    fail(w, 2)
    w.on_success()
    w.on_success()
    assert w.throttle == 2.0
    w.on_success()
    assert w.throttle == pytest.approx(1.8)
    fresh = BigWindowRateLimiter()
    for _ in range(100):
        fresh.on_success()
    assert fresh.throttle == 0


async def test_five_quiet_minutes_recover_faster_per_success(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-15: throttle 1.0 and one success stays 1.0; after +5 min one success gives 0.5."""
    w = BigWindowRateLimiter()
    fail(w)
    w.on_success()
    assert w.throttle == 1.0
    await trio.sleep(5 * 60)
    w.on_success()
    assert w.throttle == pytest.approx(0.5)
    w.on_success()
    w.on_success()
    assert w.throttle == 0.0


async def test_only_a_relaxation_wakes_the_monitor(autojump_clock: trio.testing.MockClock) -> None:
    """EW-16: one failure gives 0 wakes; then 3 successes give exactly 1."""
    w = BigWindowRateLimiter()
    wakes = Wakes(w)
    fail(w)
    assert wakes.count == 0
    for _ in range(3):
        w.on_success()
    assert wakes.count == 1


# -- circuit breaker ------------------------------------------------------------------------------


async def test_the_circuit_opens_after_failures_at_max_throttle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-17, EW-18: nine failures stay HEALTHY at 9.0; the 11th opens for the initial cooldown."""
    w = SecondWindowRateLimiter()
    fail(w, 9)
    assert w.state is CircuitState.HEALTHY and w.throttle == 9.0
    fail(w)
    assert w.state is CircuitState.HEALTHY
    fail(w)
    circuit = w.circuit
    assert circuit.state is CircuitState.BLOCKED
    assert circuit.cooldown == 30.0
    assert circuit.blocked_until == trio.current_time() + 30.0


async def test_a_success_resets_the_failure_streak(autojump_clock: trio.testing.MockClock) -> None:
    """EW-15, EW-18: a success between failures at max starts the streak again."""
    w = BigWindowRateLimiter()
    fail(w, 10)  # streak 2
    w.on_success()  # streak 0; 1 success at throttle 9 relaxes nothing
    fail(w, 2)
    assert w.state is CircuitState.HEALTHY
    fail(w)
    assert w.state is CircuitState.BLOCKED


async def test_a_blocked_circuit_refuses_with_the_cooldown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-19, EW-20: fits and try_take refuse during the cooldown; the message names the
    limiter, the nominal rate, the time left and the upstream's last response."""
    w = SecondWindowRateLimiter()
    block(w)
    with pytest.raises(UncorrectableError) as refused:
        w.fits(ONE, [])
    message = str(refused.value)
    assert "Cooldown is active" in message and "30 s" in message
    assert "SecondWindow" in message and "3 requests / 1 s" in message
    assert "429 Too Many Requests" in message
    with pytest.raises(UncorrectableError, match="Cooldown is active"):
        w.try_take(ONE, [])
    assert w.in_use == 0


async def test_after_the_cooldown_only_the_head_may_probe(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-19, EW-21: past the cooldown an asker behind a reservation gets the probe refusal;
    the head fits, and its take claims the probe (PROBING, one stamp, info log)."""
    w = FastCooldownRateLimiter()
    block(w)
    await trio.sleep(0.1)
    with pytest.raises(UncorrectableError, match="single probe"):
        w.fits(ONE, ONE)
    with pytest.raises(UncorrectableError, match="single probe"):
        w.try_take(ONE, ONE)
    assert w.fits(ONE, [])
    assert w.state is CircuitState.BLOCKED  # fits claims nothing
    assert w.try_take(ONE, [])
    assert w.state is CircuitState.PROBING and w.in_use == 1
    assert w.circuit.probe_since == trio.current_time()
    assert w.status_indicator == "probing"


async def test_probing_refuses_everyone_including_the_head(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-19: while the probe is in flight nobody passes."""
    w = FastCooldownRateLimiter()
    block(w)
    await trio.sleep(0.1)
    assert w.try_take(ONE, [])
    for reserved in ([], ONE):
        with pytest.raises(UncorrectableError, match="single probe"):
            w.fits(ONE, reserved)


async def test_a_full_window_claims_no_probe(autojump_clock: trio.testing.MockClock) -> None:
    """EW-21: the head on a full window gets False and the circuit stays BLOCKED."""

    class TinyRateLimiter(ElasticWindow):
        base_window = 60.0
        max_requests = 1
        initial_cooldown = 0.1

    w = TinyRateLimiter()
    assert w.try_take(ONE, [])
    block(w)
    await trio.sleep(0.1)
    assert not w.try_take(ONE, [])
    assert w.state is CircuitState.BLOCKED


async def test_a_probe_success_returns_to_healthy_and_wakes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-16, EW-23: the probe's success closes the circuit and resets its timing; one wake."""
    w = FastCooldownRateLimiter()
    wakes = Wakes(w)
    block(w)
    await trio.sleep(0.1)
    assert w.try_take(ONE, [])
    w.on_success()
    assert w.state is CircuitState.HEALTHY
    assert (w.circuit.blocked_until, w.circuit.cooldown) == (0.0, 0.0)
    assert wakes.count == 1
    assert w.fits(ONE, ONE)


async def test_a_probe_failure_doubles_the_cooldown_up_to_the_max(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-23: 100 -> 200 ms (more than 150 ms left right after) -> 400 -> capped at 400."""
    w = FastCooldownRateLimiter()
    block(w)
    expected = [0.2, 0.4, 0.4]
    cooldown = 0.1
    for doubled in expected:
        await trio.sleep(cooldown)
        assert w.try_take(ONE, [])
        fail(w)
        assert w.state is CircuitState.BLOCKED
        assert w.circuit.cooldown == pytest.approx(doubled)
        assert w.cooldown_remaining > doubled * 0.75
        cooldown = doubled


async def test_failure_and_success_while_blocked(autojump_clock: trio.testing.MockClock) -> None:
    """EW-24: a failure while BLOCKED raises the throttle only; a success leaves the circuit."""
    w = FastCooldownRateLimiter()
    block(w)
    before = w.circuit
    w.throttle = 5.0
    fail(w)
    assert w.throttle == 6.0 and w.circuit is before
    w.on_success()
    assert w.circuit is before


async def test_a_probe_without_a_verdict_expires(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """EW-25: cooldown 50 ms, timeout 100 ms, probe at 80 ms; 150 ms later the head may probe
    again; the expiry keeps the cooldown and logs a warning."""

    class ShortProbeRateLimiter(ElasticWindow):
        base_window = 1.0
        max_requests = 100
        initial_cooldown = 0.05
        probe_timeout = 0.1

    w = ShortProbeRateLimiter()
    block(w)
    await trio.sleep(0.08)
    assert w.try_take(ONE, [])
    with pytest.raises(UncorrectableError, match="single probe"):
        w.fits(ONE, [])
    await trio.sleep(0.15)
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.admission.elastic_window"):
        assert w.try_take(ONE, [])
    assert any("no verdict" in r.getMessage() for r in caplog.records)
    assert w.state is CircuitState.PROBING and w.circuit.cooldown == 0.05


async def test_give_reverts_a_pending_probe(autojump_clock: trio.testing.MockClock) -> None:
    """EW-26: a rollback while PROBING returns to BLOCKED with the same cooldown."""
    w = FastCooldownRateLimiter()
    block(w)
    await trio.sleep(0.1)
    blocked = w.circuit
    assert w.try_take(ONE, [])
    w.give(ONE)
    assert w.state is CircuitState.BLOCKED and w.in_use == 0
    assert w.circuit.cooldown == blocked.cooldown
    assert w.circuit.blocked_until == blocked.blocked_until
    assert w.try_take(ONE, [])  # the head may claim it again at once


async def test_give_after_a_verdict_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-26: after a success (HEALTHY) or a failure (BLOCKED) a give leaves the state."""
    w = FastCooldownRateLimiter()
    block(w)
    await trio.sleep(0.1)
    assert w.try_take(ONE, [])
    w.on_success()
    w.give(ONE)
    assert w.state is CircuitState.HEALTHY
    block(w)
    await trio.sleep(0.1)
    assert w.try_take(ONE, [])
    fail(w)
    reopened = w.circuit
    w.give(ONE)
    assert w.circuit is reopened


async def test_cooldown_remaining(autojump_clock: trio.testing.MockClock) -> None:
    """EW-28: 0 unless BLOCKED; the time left while BLOCKED; 0 once past."""
    w = FastCooldownRateLimiter()
    assert w.cooldown_remaining == 0
    block(w)
    assert w.cooldown_remaining == pytest.approx(0.1)
    await trio.sleep(0.04)
    assert w.cooldown_remaining == pytest.approx(0.06)
    await trio.sleep(0.1)
    assert w.cooldown_remaining == 0
    assert w.try_take(ONE, [])
    assert w.cooldown_remaining == 0  # PROBING


def test_a_frozen_clock_reads_exactly() -> None:
    """EW-28, EW-29: on an injected frozen clock a 100 ms cooldown leaves exactly 100 ms; the
    stamps, the cooldown and the recovery all read the one clock: +99 ms is still refused and
    +1 ms more lets the head claim the probe."""
    now = [1000.0]
    w = FastCooldownRateLimiter(clock=lambda: now[0])
    block(w)
    assert w.cooldown_remaining == pytest.approx(0.1, abs=1e-9)
    now[0] = 1000.099
    with pytest.raises(UncorrectableError, match="Cooldown is active"):
        w.try_take(ONE, [])
    now[0] = 1000.1
    assert w.try_take(ONE, [])
    assert w.state is CircuitState.PROBING
    assert w.circuit.probe_since == now[0]


async def test_fifty_tasks_race_for_one_probe(autojump_clock: trio.testing.MockClock) -> None:
    """EW-22: 50 tasks, each passing a checkpoint, then trying to take as the head once the
    50 ms cooldown is over: exactly one wins, 49 are refused, the state ends PROBING."""

    class RaceRateLimiter(ElasticWindow):
        base_window = 1.0
        max_requests = 100
        initial_cooldown = 0.05

    w = RaceRateLimiter()
    block(w)
    wins: list[int] = []
    refusals: list[int] = []

    async def contender(i: int) -> None:
        await trio.sleep(0.05)
        await trio.lowlevel.checkpoint()
        try:
            if w.try_take(ONE, []):
                wins.append(i)
        except UncorrectableError:
            refusals.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(contender, i)
    assert len(wins) == 1 and len(refusals) == 49
    assert w.state is CircuitState.PROBING


async def test_concurrent_failures_do_not_corrupt_the_circuit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-27: 100 tasks each reporting one failure after a checkpoint on a 1000-slot window
    leave it BLOCKED at throttle 9.0."""
    w = BigWindowRateLimiter()

    async def failing() -> None:
        await trio.lowlevel.checkpoint()
        fail(w)

    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(failing)
    assert w.state is CircuitState.BLOCKED and w.throttle == 9.0


# -- status ---------------------------------------------------------------------------------------


async def test_status_indicator_precedence(autojump_clock: trio.testing.MockClock) -> None:
    """EW-30: None when nominal, the throttle multiplier, then "blocked" over the throttle."""
    w = SecondWindowRateLimiter()
    assert w.status_indicator is None
    fail(w)
    assert w.status_indicator == "throttle:2.0x"
    fail(w, 7)
    assert w.status_indicator == "throttle:9.0x"
    fail(w, 15)
    assert w.status_indicator == "blocked"


async def test_status_reports_the_window(autojump_clock: trio.testing.MockClock) -> None:
    """EW-31: (max, max - stamps, throttle, effective window, state name) with a summary."""
    w = SecondWindowRateLimiter()
    assert w.try_take(ONE, [])
    fail(w)
    status = w.status()
    assert status == ElasticWindowStatus(3, 2, 1.0, 2.0, "HEALTHY")
    assert "2/3" in status.summary and "2000ms" in status.summary and "HEALTHY" in status.summary


async def test_concurrent_status_reads_never_release_live_stamps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-31: 200 tasks reading the status (with checkpoints between) while 20 stamps sit in a
    500 ms window all see 0 available; after 600 ms all 20 are back."""

    class HalfSecondRateLimiter(ElasticWindow):
        base_window = 0.5
        max_requests = 20

    w = HalfSecondRateLimiter()
    for _ in range(20):
        assert w.try_take(ONE, [])
    seen: list[int] = []

    async def reader() -> None:
        await trio.lowlevel.checkpoint()
        seen.append(w.status().available)

    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(reader)
    assert seen == [0] * 200
    await trio.sleep(0.6)
    assert w.status().available == 20


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(60.0, "1 min"), (120.0, "2 min"), (1.0, "1 s"), (90.0, "90 s"), (0.25, "250 ms")],
)
def test_the_window_is_written_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    """EW-20: N min, N s or N ms."""
    assert format_window(seconds) == text


async def test_a_refusal_without_a_remembered_failure_has_no_upstream_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EW-14, EW-20: advisories alone never remember a failure; a message appends the upstream
    summary only when one was remembered (here the circuit is opened by an injected record)."""

    class MinuteRateLimiter(ElasticWindow):
        base_window = 60.0
        max_requests = 5

    w = MinuteRateLimiter()
    for _ in range(20):
        w.on_advisory_pressure()
    assert w.state is CircuitState.HEALTHY
    w._circuit = Circuit(CircuitState.BLOCKED, trio.current_time() + 5, 5.0)
    with pytest.raises(UncorrectableError) as refused:
        w.fits(ONE, [])
    message = str(refused.value)
    assert "5 requests / 1 min" in message and "Last upstream response" not in message


async def test_soak_mixed_operations(autojump_clock: trio.testing.MockClock) -> None:
    """EW-32: 20 tasks x 500 mixed operations (40 % take+give, 20 % failure, 30 % success,
    10 % advisory), with small virtual sleeps between, on a 500 ms / 50 window: only the
    account's own refusals are raised, the state stays valid, throttle in [0, 9], available in
    [0, 50]."""

    class SoakRateLimiter(ElasticWindow):
        base_window = 0.5
        max_requests = 50
        initial_cooldown = 0.05
        max_cooldown = 0.5

    w = SoakRateLimiter()
    problems: list[Any] = []
    states_seen: set[str] = set()

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(500):
            roll = rng.random()
            try:
                if roll < 0.4:
                    if w.try_take(ONE, []):
                        await trio.lowlevel.checkpoint()
                        w.give(ONE)
                elif roll < 0.6:
                    fail(w)
                elif roll < 0.9:
                    w.on_success()
                else:
                    w.on_advisory_pressure()
            except UncorrectableError:
                pass  # a blocked or probing circuit refusing is the expected answer
            status = w.status()
            if not (0 <= status.throttle <= 9 and 0 <= status.available <= 50):
                problems.append(status)
            if status.state not in {s.name for s in CircuitState}:
                problems.append(status)
            states_seen.add(status.state)
            await trio.sleep(rng.random() * 0.01)

    async with trio.open_nursery() as nursery:
        for seed in range(20):
            nursery.start_soon(worker, seed)
    assert problems == []
    assert w.state in set(CircuitState)
    assert {"HEALTHY", "BLOCKED"} <= states_seen  # the soak really drove the breaker
