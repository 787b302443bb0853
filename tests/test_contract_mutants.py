"""AccountContract against deliberately broken TIME accounts: five mutants of a plain rate limit
whose ``earliest_fit`` lies in a different way. Each must fail the contract, at the check the
lie breaks, while the unbroken account passes every check (the counting-gate mutants live in
tests/test_testing_contracts.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from nucleo_trio.admission import RateLimit, RateLimiter
from nucleo_trio.testing import AccountContract

HOUR = 3600.0


class NeverSays(RateLimit):
    """Answers None always: its waiters sleep until some unrelated event wakes admission."""

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None


class AnHourLate(RateLimit):
    """Names the true instant plus an hour."""

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        instant = super().earliest_fit(mine, reserved_ahead)
        return None if instant is None else instant + HOUR


class ASecondLate(RateLimit):
    """Names the true instant plus a second: a lie too small to see from halfway."""

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        instant = super().earliest_fit(mine, reserved_ahead)
        return None if instant is None else instant + 1.0


class TooEarly(RateLimit):
    """Names a quarter of the way to the true instant: admission wakes for nothing."""

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        instant = super().earliest_fit(mine, reserved_ahead)
        if instant is None:
            return None
        now = trio.current_time()
        return now + (instant - now) / 4


class BlindToTheHead(RateLimit):
    """Forgets the head's reservation when naming the instant: it names when the ask would fit
    alone (now, on a half-taken account), while beside the reservation it fits only later, so
    admission would ask again and again for nothing."""

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return super().earliest_fit(mine, [])


MUTANTS: list[tuple[type[RateLimit], str, str]] = [
    (NeverSays, "test_a_full_time_account_fits_at_the_instant_it_names", "gave None"),
    (AnHourLate, "test_a_full_time_account_fits_at_the_instant_it_names", "is late"),
    (ASecondLate, "test_a_full_time_account_fits_at_the_instant_it_names", "is late"),
    (TooEarly, "test_a_full_time_account_fits_at_the_instant_it_names", "does not fit at"),
    (
        BlindToTheHead,
        "test_beside_a_reservation_the_named_instant_is_the_truth_too",
        "not an instant after now",
    ),
]


def _contract(account: type[RateLimit]) -> AccountContract:
    class Contract(AccountContract):
        def make_account(self) -> RateLimiter:
            return account(6, per=6.0)

    return Contract()


def _checks() -> list[str]:
    return sorted(name for name in dir(AccountContract) if name.startswith("test_"))


def test_the_unbroken_account_passes_every_check() -> None:
    """ACC-05, ACC-07: the control: the rate limit the mutants are made from keeps the
    contract, so each mutant's failure is its own lie."""
    contract = _contract(RateLimit)
    for check in _checks():
        getattr(contract, check)()


@pytest.mark.parametrize(
    ("mutant", "check", "message"), MUTANTS, ids=[mutant.__name__ for mutant, _, _ in MUTANTS]
)
def test_each_mutant_fails_the_check_its_lie_breaks(
    mutant: type[RateLimit], check: str, message: str
) -> None:
    """ACC-05, ACC-07: the named check fails, with a message saying what the instant got wrong."""
    with pytest.raises(AssertionError, match=message):
        getattr(_contract(mutant), check)()


@pytest.mark.parametrize("mutant", [mutant for mutant, _, _ in MUTANTS], ids=lambda m: m.__name__)
def test_no_mutant_passes_the_whole_contract(mutant: type[RateLimit]) -> None:
    """ACC-05: run as a plugin author runs it, every check in turn, the contract fails."""
    contract = _contract(mutant)
    failed = []
    for check in _checks():
        try:
            getattr(contract, check)()
        except AssertionError:
            failed.append(check)
    assert failed, f"{mutant.__name__} passed every check"
