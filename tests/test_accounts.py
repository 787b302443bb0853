"""The account contract: AbstractRateLimiter's defaults, CountingGate, UnboundedMemory, statuses."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio

from nucleo_trio.admission import (
    AbstractRateLimiter,
    CountingGate,
    DatabaseGate,
    ElasticWindow,
    HttpConnectionGate,
    LimiterIdentity,
    ModelGate,
    RateLimit,
    RateLimiter,
    RateLimiterStatus,
    Replenishment,
    SemaphoreLimiterStatus,
    StdioEndpointGate,
    StdioPoolGate,
    TokenBucket,
    TokenBucketConfig,
    UnboundedMemory,
    UnboundedMemoryStatus,
)
from nucleo_trio.errors import LLMReadableError, UncorrectableError


class Plain(AbstractRateLimiter):
    """The smallest account on the base: a fixed answer, to see the inherited defaults."""

    def __init__(self) -> None:
        self.success_calls: list[Any] = []
        self.failure_calls: list[Any] = []

    @property
    def limiter_name(self) -> str:
        return "plain"

    @property
    def limiter_category(self) -> str:
        return "semaphore"

    @property
    def capacity(self) -> int:
        return 1

    @property
    def in_use(self) -> int:
        return 0

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(1, 1, None)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return True

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        return None

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None

    def grow(self) -> None:
        self._capacity_changed()


class RenderSlots(CountingGate):
    """A new concurrency cap is a subclass with a name."""

    def __init__(self) -> None:
        super().__init__("render", 4)


# --------------------------------------------------------------------------------------------
# The contract every account keeps (one suite, every implementation)
# --------------------------------------------------------------------------------------------

ACCOUNTS: dict[str, Callable[[], RateLimiter]] = {
    "counting-gate": lambda: CountingGate("slot", 2),
    "counting-subclass": RenderSlots,
    "unbounded-memory": UnboundedMemory,
    "plain-base": Plain,
}


@pytest.fixture(params=sorted(ACCOUNTS))
def account(request: pytest.FixtureRequest) -> RateLimiter:
    return ACCOUNTS[request.param]()


def test_every_account_answers_at_once_and_never_parks(account: RateLimiter) -> None:
    """ACC-01: the account questions are plain calls (nothing to await), answered at once."""
    for name in ("fits", "try_take", "give", "earliest_fit", "account_for", "replenishment"):
        assert not inspect.iscoroutinefunction(getattr(account, name)), name
    assert isinstance(account.fits([None], []), bool)
    taken = account.try_take([None], [])
    assert taken is True
    account.give([None])
    assert account.earliest_fit([None], []) is None


def test_every_account_is_a_rate_limiter_with_a_typed_identity(account: RateLimiter) -> None:
    """ACC-11: identity = name, category (one of four), capacity, in use, indicator, status."""
    assert isinstance(account, RateLimiter)
    assert isinstance(account, LimiterIdentity)
    assert isinstance(account.limiter_name, str) and account.limiter_name
    assert account.limiter_category in {"memory", "token_bucket", "elastic_window", "semaphore"}
    assert isinstance(account.capacity, int | float)
    assert isinstance(account.in_use, int | float)
    assert account.status_indicator is None
    status = account.status()
    assert isinstance(status, RateLimiterStatus)
    assert isinstance(status.summary, str) and "\n" not in status.summary


def test_every_account_says_how_its_permits_come_back(account: RateLimiter) -> None:
    """ACC-06: each account declares its replenishment; the base and its gates are RELEASE."""
    assert account.replenishment() is Replenishment.RELEASE


def test_replenishment_has_no_default_on_the_protocol() -> None:
    """ACC-06: the protocol gives no replenishment; an object that omits it is no account."""

    class NoReplenishment:
        limiter_name = "x"
        limiter_category = "semaphore"
        capacity = 1
        in_use = 0
        status_indicator = None
        requires_http_connection = False

        def status(self) -> SemaphoreLimiterStatus:
            return SemaphoreLimiterStatus(1, 1, None)

        def fits(self, mine: Any, reserved: Any) -> bool:
            return True

        try_take = fits

        def give(self, amounts: Any) -> None:
            return None

        def earliest_fit(self, mine: Any, reserved: Any) -> None:
            return None

        def on_capacity_change(self, wake: Any) -> None:
            return None

        def account_for(self, amount: Any) -> Any:
            return self

        def on_success(self, input: Any = None) -> None:
            return None

        def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
            return None

        def observe_held(self, supplier: Any) -> None:
            return None

    assert not isinstance(NoReplenishment(), RateLimiter)
    NoReplenishment.replenishment = lambda self: Replenishment.TIME  # type: ignore[attr-defined]
    assert isinstance(NoReplenishment(), RateLimiter)


# --------------------------------------------------------------------------------------------
# AbstractRateLimiter's defaults
# --------------------------------------------------------------------------------------------


def test_the_base_account_is_its_own_identity_releases_and_is_nominal() -> None:
    """ACC-08: account_for(x) is the account itself; status_indicator is None; RELEASE."""
    plain = Plain()
    assert plain.account_for(None) is plain
    assert plain.account_for(400) is plain
    assert plain.account_for("route-key") is plain
    assert plain.status_indicator is None
    assert plain.replenishment() is Replenishment.RELEASE


def test_the_installed_wake_runs_on_a_capacity_change_and_none_clears_it() -> None:
    """ACC-09: one wake slot: install, run on _capacity_changed, replace, clear with None."""
    plain = Plain()
    plain.grow()  # nothing installed: nothing happens
    first: list[str] = []
    second: list[str] = []
    plain.on_capacity_change(lambda: first.append("wake"))
    plain.grow()
    assert first == ["wake"]
    plain.on_capacity_change(lambda: second.append("wake"))  # one slot: replaces
    plain.grow()
    assert first == ["wake"] and second == ["wake"]
    plain.on_capacity_change(None)
    plain.grow()
    assert second == ["wake"]
    with pytest.raises(TypeError, match="wake must be callable"):
        plain.on_capacity_change("not a function")  # type: ignore[arg-type]


def test_the_other_defaults_hold() -> None:
    """ACC-10: on_success/on_rate_limit_error take an optional input and do nothing;
    requires_http_connection is False; observe_held never calls the supplier."""
    plain = Plain()
    assert plain.on_success() is None
    assert plain.on_success({"request": 1}) is None
    assert plain.on_rate_limit_error(RuntimeError("429")) is None
    assert plain.on_rate_limit_error(RuntimeError("429"), {"request": 1}) is None
    assert plain.requires_http_connection is False
    called: list[int] = []

    def supplier() -> int:
        called.append(1)
        return 3

    plain.observe_held(supplier)
    assert called == []


# --------------------------------------------------------------------------------------------
# CountingGate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [0, -1])
def test_a_counting_gate_needs_a_positive_capacity(capacity: int) -> None:
    """ACC-13: capacity 0 or less is refused, naming the value."""
    with pytest.raises(ValueError, match=f"capacity must be positive, got {capacity}"):
        CountingGate("db", capacity)


def test_a_counting_gate_refuses_bad_names_and_capacities_clearly() -> None:
    """A blank name, a non-string name or a non-int capacity is an error that says so."""
    with pytest.raises(ValueError, match="name must not be blank"):
        CountingGate("  ", 1)
    with pytest.raises(TypeError, match="name must be a str"):
        CountingGate(None, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capacity must be an int"):
        CountingGate("db", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capacity must be an int"):
        CountingGate("db", True)


def test_fits_counts_mine_and_the_reservation_and_refuses_the_impossible() -> None:
    """ACC-02, ACC-14: more permits than the gate has is refused outright; fitting alone but
    not beside the reservation is a plain False."""
    gate = CountingGate("db", 2)
    assert gate.fits([None, None], []) and gate.fits([2], [])
    assert not gate.fits([None], [None, None])  # fits alone, not with the head's two
    assert not gate.fits([None], [2])
    assert gate.fits([None], [None])
    with pytest.raises(UncorrectableError, match="can never fit a gate of 2") as refused:
        gate.fits([None, None, None], [])
    with pytest.raises(UncorrectableError, match="3 permits can never fit a gate of 2"):
        gate.fits([3], [])
    assert isinstance(refused.value, LLMReadableError)
    assert not refused.value.correctable


def test_try_take_checks_and_debits_in_one_step_and_refuses_like_fits() -> None:
    """ACC-03, ACC-14: try_take is the same check plus the debit; an impossible ask takes nothing."""
    gate = CountingGate("db", 2)
    assert gate.try_take([None], [])
    assert gate.in_use == 1
    assert not gate.try_take([None], [None])  # 1 + 1 + 1 > 2: nothing taken
    assert gate.in_use == 1
    with pytest.raises(UncorrectableError, match="can never fit a gate of 2"):
        gate.try_take([None, None, None], [])
    assert gate.in_use == 1
    assert gate.try_take([None], [])
    assert gate.in_use == 2
    assert not gate.try_take([None], [])


def test_give_credits_permits_and_neither_give_nor_take_wakes() -> None:
    """ACC-04, ACC-15: give subtracts the permits given back (None is one, 2 is two); neither
    give nor take runs the wake."""
    gate = CountingGate("db", 3)
    wakes: list[int] = []
    gate.on_capacity_change(lambda: wakes.append(1))
    assert gate.try_take([None, None, None], [])
    gate.give([2])
    assert gate.in_use == 1
    gate.give([None])
    assert gate.in_use == 0
    assert wakes == []
    with pytest.raises(ValueError, match="give of 1 permits exceeds the 0 in use"):
        gate.give([None])


def test_a_counting_gate_is_a_semaphore_whose_earliest_fit_is_always_none() -> None:
    """ACC-05, ACC-16: only a give frees a permit, so earliest_fit is None even when full;
    category semaphore, capacity as configured, in_use the count; feedback does nothing."""
    gate = CountingGate("db", 2)
    assert gate.limiter_category == "semaphore"
    assert gate.capacity == 2
    assert gate.earliest_fit([None], []) is None
    assert gate.try_take([None, None], [])
    assert gate.in_use == 2
    assert gate.earliest_fit([None], []) is None
    assert gate.earliest_fit([None], [None]) is None
    gate.on_success()
    gate.on_rate_limit_error(RuntimeError("429"))
    assert gate.in_use == 2
    assert gate.replenishment() is Replenishment.RELEASE


async def test_a_counting_gate_stamps_its_last_activity(autojump_clock: trio.abc.Clock) -> None:
    """ACC-17: last_activity starts at construction and moves to now on each take and give."""
    await trio.sleep(5)
    gate = CountingGate("db", 2)
    assert gate.last_activity == trio.current_time() == 5.0
    await trio.sleep(1)
    assert not gate.try_take([None], [None, None])  # a refused take
    assert gate.last_activity == 5.0
    assert gate.try_take([None], [])
    assert gate.last_activity == 6.0
    await trio.sleep(2)
    gate.give([None])
    assert gate.last_activity == 8.0


def test_a_gate_built_outside_trio_has_no_activity_stamp_yet() -> None:
    """A gate built at configuration time (no trio run) still works; it has no stamp yet."""
    gate = CountingGate("http", 1)
    assert gate.last_activity is None
    assert gate.try_take([None], [])
    assert gate.status().summary.endswith("last activity never")


async def test_a_counting_gates_status_reports_its_numbers(autojump_clock: trio.abc.Clock) -> None:
    """ACC-18: status() is SemaphoreLimiterStatus(capacity, capacity - in_use, last_activity)."""
    gate = CountingGate("db", 2)
    assert gate.try_take([None], [])
    status = gate.status()
    assert status == SemaphoreLimiterStatus(2, 1, gate.last_activity)
    assert (status.capacity, status.available, status.active) == (2, 1, 1)
    assert status.last_activity == gate.last_activity
    assert "1/2" in status.summary
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        status.available = 2  # type: ignore[misc]


def test_set_capacity_wakes_only_when_the_gate_grows() -> None:
    """ACC-09: a raised capacity wakes admission; a cut never does."""
    gate = CountingGate("db", 2)
    wakes: list[int] = []
    gate.on_capacity_change(lambda: wakes.append(1))
    gate.set_capacity(1)
    assert (gate.capacity, wakes) == (1, [])
    gate.set_capacity(1)
    assert wakes == []
    gate.set_capacity(4)
    assert (gate.capacity, wakes) == (4, [1])
    with pytest.raises(ValueError, match="capacity must be positive, got 0"):
        gate.set_capacity(0)


def test_a_subclass_with_a_name_is_a_new_concurrency_cap() -> None:
    """A new concurrency cap is a subclass with a name (the seed's CountingGate paragraph)."""
    slots = RenderSlots()
    assert (slots.limiter_name, slots.capacity, slots.limiter_category) == (
        "render",
        4,
        "semaphore",
    )
    assert isinstance(slots, RateLimiter)
    assert repr(slots) == "<RenderSlots 'render'>"


# --------------------------------------------------------------------------------------------
# UnboundedMemory and the status records
# --------------------------------------------------------------------------------------------


def test_unbounded_memory_is_the_memory_account_that_never_gates() -> None:
    """The default memory seam: named and categorised memory, RELEASE, always fits, never
    short, earliest_fit None, and a completion (give) changes nothing."""
    memory = UnboundedMemory()
    assert (memory.limiter_name, memory.limiter_category) == ("memory", "memory")
    assert memory.account_for(None) is memory
    assert memory.replenishment() is Replenishment.RELEASE
    for _ in range(3):
        assert memory.fits([], [])
        assert memory.try_take([], [])
    memory.give([])
    assert memory.earliest_fit([], []) is None
    assert memory.capacity > 0
    assert 0 < memory.in_use
    status = memory.status()
    assert isinstance(status, UnboundedMemoryStatus)
    assert status.total_bytes == memory.capacity
    assert "memory unbounded" in status.summary and "GiB" in status.summary


def test_status_records_validate_their_numbers() -> None:
    """STS-01, STS-04: each record has a one-line summary; active = capacity - available."""
    status = SemaphoreLimiterStatus(capacity=5, available=2, last_activity=12.5)
    assert status.active == 3
    assert status.summary == "permits 3/5 active, last activity at 12.500s"
    with pytest.raises(ValueError, match="available must be >= 0"):
        SemaphoreLimiterStatus(capacity=5, available=-1)
    with pytest.raises(TypeError, match="capacity must be an int"):
        SemaphoreLimiterStatus(capacity="5", available=1)  # type: ignore[arg-type]
    memory = UnboundedMemoryStatus(used_bytes=1024**3, total_bytes=4 * 1024**3)
    assert memory.usage_ratio == 0.25
    assert memory.summary == "memory unbounded: 25.0% (1.0/4.0 GiB), no gate"
    assert UnboundedMemoryStatus(used_bytes=0, total_bytes=0).usage_ratio == 0.0


# --------------------------------------------------------------------------------------------
# The status indicator of every account kind (the memory gate's pace is tested with it)
# --------------------------------------------------------------------------------------------

INDICATOR = re.compile(r"blocked|probing|throttle:\d+\.\dx|pace:\d+ms")
"""The four forms a non-nominal indicator takes (ACC-12)."""


class QuickCooldownWindow(ElasticWindow):
    base_window = 1.0
    max_requests = 3
    initial_cooldown = 1.0
    max_cooldown = 4.0


def indicator(account: LimiterIdentity) -> str | None:
    """The account's indicator, checked against ACC-12's grammar on the way."""
    shown = account.status_indicator
    assert shown is None or INDICATOR.fullmatch(shown), shown
    return shown


# Each kind, and the amounts that take all it has: a full account is busy, not abnormal.
EVERY_KIND: dict[str, tuple[Callable[[], RateLimiter], list[Any]]] = {
    "counting-gate": (lambda: CountingGate("slot", 2), [None, None]),
    "counting-subclass": (RenderSlots, [None] * 4),
    "http-gate": (lambda: HttpConnectionGate(3), [None] * 3),
    "database-gate": (lambda: DatabaseGate("orders", 2), [None, None]),
    "model-gate": (lambda: ModelGate("local-llama", 2), [None, None]),
    "stdio-endpoint-gate": (lambda: StdioEndpointGate("files", 2), [None, None]),
    "stdio-pool-gate": (lambda: StdioPoolGate(2), [None, None]),
    "unbounded-memory": (UnboundedMemory, []),
    "plain-base": (Plain, [None]),
    "token-bucket": (lambda: TokenBucket("model-a", TokenBucketConfig(60, 6000)), [6000]),
    "elastic-window": (QuickCooldownWindow, [1, 1, 1]),
    "rate-limit": (lambda: RateLimit(3, per=1.0), [None, 2]),
    "rate-limit-burst": (lambda: RateLimit(3, per=1.0, burst=2, margin=0.1), [None, None]),
}


@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
async def test_a_nominal_account_of_every_kind_has_no_indicator(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    """ACC-12: status_indicator is None while the account is nominal, for every kind: fresh,
    and still when all its capacity is taken (a full account is busy, not abnormal)."""
    make, everything = EVERY_KIND[kind]
    account = make()
    assert indicator(account) is None
    assert account.try_take(everything, [])
    assert indicator(account) is None
    account.on_success()
    assert indicator(account) is None


async def test_the_token_bucket_shows_its_throttle_to_one_decimal(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ACC-12: a throttled bucket shows throttle:<1 + throttle>x with one decimal, and None
    again once the throttle has relaxed to 0."""
    bucket = TokenBucket("model-a", TokenBucketConfig(60, 6000))
    bucket.on_rate_limit_error(RuntimeError("429 Too Many Requests"))
    assert indicator(bucket) == "throttle:1.5x"
    for _ in range(3):
        bucket.on_success()
    assert bucket.throttle == pytest.approx(0.3)
    assert indicator(bucket) == "throttle:1.3x"
    bucket.record_backpressure(3)  # an overload counts three times
    assert indicator(bucket) == "throttle:2.8x"
    await trio.sleep(300)  # quiet minutes: every success relaxes
    while bucket.throttle > 0:
        bucket.on_success()
    assert indicator(bucket) is None


async def test_the_elastic_window_shows_its_circuit_over_its_throttle(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ACC-12: a window shows throttle:<1 + throttle>x, then blocked and probing, each of
    which takes precedence over the throttle, and None again once it has recovered."""
    window = QuickCooldownWindow()
    window.on_rate_limit_error(RuntimeError("429"))
    assert indicator(window) == "throttle:2.0x"
    for _ in range(11):  # push-backs a window apart each (one burst's 429s count once)
        window.record_pushback()
    assert window.throttle == 9.0
    assert indicator(window) == "blocked"
    await trio.sleep(1.0)  # the cooldown runs out; the head claims the probe
    assert window.try_take([1], [])
    assert indicator(window) == "probing"
    window.on_success()  # the probe succeeded: the circuit closes, the throttle remains
    assert indicator(window) == "throttle:10.0x"
    await trio.sleep(300)
    while window.throttle > 0:
        window.on_success()
    assert indicator(window) is None
