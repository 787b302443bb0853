"""AccountContract, run the way a plugin author runs it: against a built-in counting gate, a
database gate, the test plugin distribution's ``fixed_slots`` kind, a token bucket, an elastic
window and the plain rate limit (with and without a burst and a margin, and as the config kind
builds it); and shown to catch an account that breaks the contract."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import pytest
from nucleo_trio_testplugin import FixedSlots

from nucleo_trio.admission import (
    CountingGate,
    DatabaseGate,
    ElasticWindow,
    RateLimit,
    RateLimiter,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.plugins import LimiterRegistry, make_plugin_manager
from nucleo_trio.testing import AccountContract


class TestCountingGateContract(AccountContract):
    def make_account(self) -> RateLimiter:
        return CountingGate("slot", 3)


class TestDatabaseGateContract(AccountContract):
    def make_account(self) -> RateLimiter:
        return DatabaseGate("orders", 2)


class TestFixedSlotsPluginContract(AccountContract):
    """The third-party kind, built the way a dispatcher builds it: by name, from its plugin."""

    def make_account(self) -> RateLimiter:
        registry = LimiterRegistry(make_plugin_manager())
        account = registry.create("fixed_slots", "render", slots=2)
        assert isinstance(account, FixedSlots)
        return account


class RenderSlots(CountingGate):
    """A plugin's own kind of account: its category is its own name, not a built-in one."""

    @property
    def limiter_category(self) -> str:
        return "render_slots"


class TestOwnCategoryContract(AccountContract):
    """A category is any non-blank name a plugin gives: the contract does not ask a new kind
    of account to pretend to be one of the built-in four."""

    def make_account(self) -> RateLimiter:
        return RenderSlots("render", 2)


class TestTokenBucketContract(AccountContract):
    """A TIME account whose amounts are token counts: it says what one unit is and what fills it."""

    amount = 100

    def make_account(self) -> RateLimiter:
        return TokenBucket("model-a", TokenBucketConfig(60, 1000))

    def fill(self, account: RateLimiter) -> list[Any]:
        return [1000]


class TestPacedTokenBucketContract(AccountContract):
    """The bucket a catalog entry gets by default: one request at a time."""

    amount = 100

    def make_account(self) -> RateLimiter:
        return TokenBucket("model-b", TokenBucketConfig(60, 1000, burst=1))

    def fill(self, account: RateLimiter) -> list[Any]:
        return [1000]


class ThreePerSecond(ElasticWindow):
    base_window = 1.0
    max_requests = 3


class TestElasticWindowContract(AccountContract):
    """A TIME account of unit permits whose stamps wait for their callers to start."""

    def make_account(self) -> RateLimiter:
        return ThreePerSecond()


class TestRateLimitContract(AccountContract):
    def make_account(self) -> RateLimiter:
        return RateLimit(5, per=1.0)


class TestRateLimitWithBurstAndMarginContract(AccountContract):
    """A burst below the limit: what fills it is the burst, and one more never fits at once."""

    def make_account(self) -> RateLimiter:
        return RateLimit(6, per=2.0, burst=3, margin=0.25)

    def fill(self, account: RateLimiter) -> list[Any]:
        return [None] * 3

    def grow(self, account: RateLimiter) -> bool:
        assert isinstance(account, RateLimit)
        account.set_limit(account.limit + 1)
        return True


class TestRateLimitKindContract(AccountContract):
    """The ``rate_limit`` kind, built by name the way a dispatcher's configuration builds it."""

    amount = 2  # two requests: a batch call the upstream counts twice

    def make_account(self) -> RateLimiter:
        registry = LimiterRegistry(make_plugin_manager(load_entrypoints=False))
        return registry.create("rate_limit", "search", limit=8, per=0.5)

    def fill(self, account: RateLimiter) -> list[Any]:
        return [2] * 4


# --------------------------------------------------------------------------------------------
# The contract catches what it is there to catch
# --------------------------------------------------------------------------------------------


class GreedyGate(CountingGate):
    """Breaks ACC-03: a refused take still debits a permit."""

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if super().try_take(mine, reserved_ahead):
            return True
        self._in_use += 1
        return False


class ForgivingGate(CountingGate):
    """Breaks ACC-02: an ask it can never hold is a plain False instead of a refusal."""

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return len(mine) <= self.capacity and super().fits(mine, reserved_ahead)


class EagerGate(CountingGate):
    """Breaks ACC-09: every take runs the wake, though a take only lowers capacity."""

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        taken = super().try_take(mine, reserved_ahead)
        self._capacity_changed()
        return taken


class ChattyGate(CountingGate):
    """Breaks ACC-12: it shows an indicator while nominal."""

    @property
    def status_indicator(self) -> str | None:
        return "busy"


class MethodCapacityGate(CountingGate):
    """Breaks ACC-11: ``capacity`` is a method, so every event built from it would fail."""

    def capacity(self) -> int:  # type: ignore[override]
        return 2


BROKEN: list[tuple[type[CountingGate], str, str]] = [
    (MethodCapacityGate, "test_the_identity_is_complete", "capacity is a method, not a number"),
    (GreedyGate, "test_a_refused_take_takes_nothing", "a refused take moved in_use"),
    (ForgivingGate, "test_an_ask_beyond_capacity_is_uncorrectable_and_takes_nothing", "instead"),
    (EagerGate, "test_the_capacity_wake_runs_only_when_capacity_may_grow", "ran the wake"),
    (ChattyGate, "test_its_status_is_one_line_and_it_is_nominal_even_when_full", "busy"),
]


@pytest.mark.parametrize(
    ("gate", "check", "message"), BROKEN, ids=[gate.__name__ for gate, _, _ in BROKEN]
)
def test_the_contract_fails_an_account_that_breaks_it(
    gate: type[CountingGate], check: str, message: str
) -> None:
    """ACC-02, ACC-03, ACC-09, ACC-11, ACC-12: each broken gate fails the check for the rule it breaks,
    while a correct gate of the same size passes the same check."""

    class Broken(AccountContract):
        def make_account(self) -> RateLimiter:
            return gate("broken", 2)

    class Correct(AccountContract):
        def make_account(self) -> RateLimiter:
            return CountingGate("correct", 2)

    getattr(Correct(), check)()
    with pytest.raises(AssertionError, match=message):
        getattr(Broken(), check)()


@pytest.mark.parametrize("category", ["", "  ", None, 3])
def test_the_contract_fails_a_blank_or_missing_category(category: Any) -> None:
    """ACC-11: any name, but a name: a blank or non-str category fails, naming it."""

    class Nameless(CountingGate):
        @property
        def limiter_category(self) -> str:
            return category  # type: ignore[no-any-return]

    class Broken(AccountContract):
        def make_account(self) -> RateLimiter:
            return Nameless("broken", 2)

    with pytest.raises(AssertionError, match="limiter_category"):
        Broken().test_the_identity_is_complete()


def test_a_contract_without_make_account_says_what_is_missing() -> None:
    """A subclass that forgot make_account() fails naming the method, not with a bare error."""

    class Forgot(AccountContract):
        pass

    with pytest.raises(NotImplementedError, match=r"Forgot must implement make_account\(\)"):
        Forgot().test_the_identity_is_complete()


def test_the_base_class_is_not_collected_and_every_check_names_its_rules() -> None:
    """AccountContract itself is no test class (pytest collects Test* only); every check says
    in its docstring what it checks, for the user whose account fails it, and names the rule
    ids it holds in a comment, for maintainers (docs/internals/ lists it under each)."""
    assert not AccountContract.__name__.startswith("Test")
    checks = [name for name in dir(AccountContract) if name.startswith("test_")]
    assert len(checks) >= 10
    for name in checks:
        check = getattr(AccountContract, name)
        doc = check.__doc__ or ""
        assert doc.strip() and "ACC-" not in doc and "ADM-" not in doc, name
        source = inspect.getsource(check)
        assert re.search(r"# Holds (ACC|ADM)-\d\d", source), name
