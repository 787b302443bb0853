"""Contract suites: the checks every implementation of an interface must pass, plugins included.

:class:`AccountContract` holds the account contract as test methods. A
plugin author subclasses it in a test module, says how to build a fresh account, and pytest
collects every check for that account::

    from nucleo_trio.testing import AccountContract
    from my_limiters import FixedSlots

    class TestFixedSlots(AccountContract):
        def make_account(self):
            return FixedSlots("render", 3)

A RELEASE account whose amounts are one ``None`` per permit (every counting gate) needs nothing
more. An account that counts something else says so: ``amount`` is one unit of its smallest
ask (a token count for a bucket), and :meth:`AccountContract.fill` and
:meth:`AccountContract.beyond_capacity` may be overridden when "one ``amount`` per unit of
capacity" is not how the account adds up.

The checks are plain synchronous methods that raise :class:`AssertionError`: they need neither
pytest nor pytest-trio, so a unittest runner or a script can call them too. The one check that
needs a running admission starts its own ``trio.run`` on a :class:`trio.testing.MockClock` that
jumps ahead whenever every task is blocked, so it never waits on the real clock.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import trio
import trio.testing

from ..admission import (
    Admission,
    CountingGate,
    Demand,
    Grant,
    LimiterIdentity,
    RateLimiter,
    RateLimiterStatus,
    Replenishment,
)
from ..admission.limiter import account_faults, describe_faults
from ..errors import UncorrectableError

__all__ = ["AccountContract"]

# The account questions admission calls synchronously; none of them may be a coroutine.
_SYNCHRONOUS = (
    "fits",
    "try_take",
    "give",
    "earliest_fit",
    "on_capacity_change",
    "account_for",
    "replenishment",
    "status",
    "on_success",
    "on_rate_limit_error",
    "observe_held",
)


def _refused(call: Callable[[], object], what: str) -> UncorrectableError:
    """Run ``call`` and return the :class:`UncorrectableError` it must raise."""
    try:
        answer = call()
    except UncorrectableError as refusal:
        return refusal
    raise AssertionError(f"{what} answered {answer!r} instead of raising UncorrectableError")


def _in_trio(check: Callable[[AccountContract], None]) -> Callable[[AccountContract], None]:
    """Run a check inside a trio run on a virtual clock: clocked accounts read
    :func:`trio.current_time`, which only answers inside a run."""

    @functools.wraps(check)
    def run(self: AccountContract) -> None:
        async def body() -> None:
            check(self)

        trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))

    return run


class AccountContract:
    """The account contract as a base test class; see the module docstring for how to use it.

    Subclasses implement :meth:`make_account`, which must return a fresh, nominal account with
    nothing taken each time it is called, and may set :attr:`amount` and :attr:`clocked` and
    override :meth:`fill`, :meth:`beyond_capacity` and :meth:`grow`.
    """

    amount: ClassVar[Any] = None
    """One unit of the account's smallest ask: ``None`` for a permit, ``1`` for a token."""

    clocked: ClassVar[bool] = True
    """Whether a TIME account frees capacity from its own clock, and so names the instant in
    ``earliest_fit``. ``False`` for one whose capacity arrives as an event (a lease refilled
    from a shared store): it answers ``None`` and wakes admission when the capacity comes."""

    # -- what a subclass provides ----------------------------------------------------------------
    def make_account(self) -> RateLimiter:
        """A fresh account, nothing taken. Every check calls this once for its own account."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_account() to return a fresh account"
        )

    def fill(self, account: RateLimiter) -> list[Any]:
        """The amounts that take everything a fresh ``account`` has: :attr:`amount` once per
        unit of capacity."""
        return [self.amount] * self._units(account)

    def beyond_capacity(self, account: RateLimiter) -> list[Any]:
        """Amounts that can never fit ``account``, however long one waits: one unit more than
        :meth:`fill`."""
        return [*self.fill(account), self.amount]

    def grow(self, account: RateLimiter) -> bool:
        """Raise ``account``'s capacity the way its owner would, and return True; return False
        when the account has no such knob. The default calls ``set_capacity(capacity + 1)``
        when the account has one, as every :class:`~nucleo_trio.admission.CountingGate` does."""
        set_capacity = getattr(account, "set_capacity", None)
        if not callable(set_capacity):
            return False
        set_capacity(self._units(account) + 1)
        return True

    # -- helpers -----------------------------------------------------------------------------------
    def _fresh(self) -> RateLimiter:
        account = self.make_account()
        assert isinstance(account, RateLimiter), (
            f"make_account() returned a {type(account).__name__}, which does not implement "
            "the RateLimiter protocol"
        )
        return account

    @staticmethod
    def _units(account: RateLimiter) -> int:
        capacity = account.capacity
        assert capacity >= 1, f"{account!r}: capacity {capacity!r} leaves nothing to take"
        return math.floor(capacity)

    # -- the checks --------------------------------------------------------------------------------
    @_in_trio
    def test_the_identity_is_complete(self) -> None:
        """A non-blank name, a category, a capacity, an in-use count, an indicator and
        a status; every amount resolves to the identity it debits.

        The category is any non-blank name: ``memory``, ``token_bucket``, ``elastic_window``
        and ``semaphore`` are the built-in accounts', and a new kind of account gives its own
        (health lists it as it is). The shape is the one admission checks when it first meets
        the account (:func:`~nucleo_trio.admission.limiter.account_faults`).
        """
        # Holds ACC-11.
        account = self._fresh()
        faults = account_faults(account)
        assert not faults, describe_faults(account, faults)
        assert isinstance(account, LimiterIdentity), f"{account!r} is no LimiterIdentity"
        name = account.limiter_name
        assert isinstance(name, str) and name.strip(), f"limiter_name {name!r} is blank"
        category = account.limiter_category
        assert isinstance(category, str) and category.strip(), (
            f"limiter_category {category!r} is not a non-blank name"
        )
        for number in ("capacity", "in_use"):
            value = getattr(account, number)
            assert isinstance(value, int | float) and not isinstance(value, bool), (
                f"{number} is {value!r}, not a number"
            )
        key = account.account_for(self.amount)
        assert isinstance(key, LimiterIdentity), f"account_for({self.amount!r}) gave {key!r}"
        wants_http = account.requires_http_connection
        assert isinstance(wants_http, bool), f"requires_http_connection is {wants_http!r}"

    @_in_trio
    def test_it_says_how_its_permits_come_back(self) -> None:
        """Every account declares RELEASE or TIME; there is no default to fall back on."""
        # Holds ACC-06.
        answer = self._fresh().replenishment()
        assert isinstance(answer, Replenishment), f"replenishment() gave {answer!r}"

    @_in_trio
    def test_it_answers_at_once_and_never_parks(self) -> None:
        """Every question is a plain call that returns at once, nothing to await."""
        # Holds ACC-01.
        account = self._fresh()
        for name in _SYNCHRONOUS:
            method = getattr(account, name)
            assert not inspect.iscoroutinefunction(method), f"{name} is a coroutine function"
        mine = [self.amount]
        for name in ("fits", "try_take"):
            answer = getattr(account, name)(mine, [])
            assert isinstance(answer, bool), f"{name} gave {answer!r}, not a bool"
        instant = account.earliest_fit(mine, [])
        assert instant is None or isinstance(instant, float), f"earliest_fit gave {instant!r}"

    @_in_trio
    def test_fits_and_try_take_agree_until_the_account_is_full(self) -> None:
        """Try_take answers what fits answers and debits exactly when it is true."""
        # Holds ACC-03.
        account = self._fresh()
        mine = [self.amount]
        for _ in range(self._units(account) + 1):
            before = account.in_use
            fits = account.fits(mine, [])
            assert account.in_use == before, "fits changed in_use"
            taken = account.try_take(mine, [])
            assert taken == fits, f"fits said {fits} but try_take said {taken}"
            if not taken:
                assert account.in_use == before, "a refused take moved in_use"
                break
            assert account.in_use > before, "a successful take did not move in_use"
        else:
            raise AssertionError(f"{account!r} took more than its capacity of single units")

    @_in_trio
    def test_fitting_alone_but_not_beside_the_reservation_is_a_plain_false(self) -> None:
        """An ask that fits alone but not with the head's reservation set aside
        is False, not a refusal, and the take takes nothing."""
        # Holds ACC-02, ACC-03.
        account = self._fresh()
        mine, reserved = [self.amount], self.fill(account)
        assert account.fits(mine, []) is True, "one unit does not fit a fresh account"
        assert account.fits(mine, reserved) is False, "fits ignored the reservation ahead"
        before = account.in_use
        assert account.try_take(mine, reserved) is False, "try_take ignored the reservation"
        assert account.in_use == before, "a refused take moved in_use"

    @_in_trio
    def test_a_refused_take_takes_nothing(self) -> None:
        """When try_take answers False, the account is exactly as it was."""
        # Holds ACC-03.
        account = self._fresh()
        assert account.try_take(self.fill(account), []) is True, "fill() did not fit"
        in_use, status = account.in_use, account.status()
        assert account.try_take([self.amount], []) is False, "a full account took more"
        assert account.in_use == in_use, f"a refused take moved in_use {in_use} -> {account.in_use}"
        assert account.status() == status, "a refused take changed the status"

    @_in_trio
    def test_an_ask_beyond_capacity_is_uncorrectable_and_takes_nothing(self) -> None:
        """More than the account will ever have raises UncorrectableError from
        fits and from try_take, and the refused take debits nothing."""
        # Holds ACC-02, ACC-03.
        account = self._fresh()
        too_much = self.beyond_capacity(account)
        refusal = _refused(lambda: account.fits(too_much, []), "fits(beyond capacity)")
        assert not refusal.correctable, f"{refusal!r} is correctable"
        before = account.in_use
        _refused(lambda: account.try_take(too_much, []), "try_take(beyond capacity)")
        assert account.in_use == before, "a refused take moved in_use"

    @_in_trio
    def test_give_credits_back_what_was_taken(self) -> None:
        """Give returns capacity at once (admission gives RELEASE accounts back at close
        and every account at a roll-back), so a full account fits again."""
        # Holds ACC-04.
        account = self._fresh()
        before, everything = account.in_use, self.fill(account)
        assert account.try_take(everything, []) is True, "fill() did not fit"
        assert account.fits([self.amount], []) is False, "a full account fits more"
        account.give(everything)
        assert account.in_use == before, f"give left in_use at {account.in_use}, not {before}"
        assert account.fits(everything, []) is True, "what was given back does not fit again"

    @_in_trio
    def test_earliest_fit_is_none_when_only_an_event_can_help(self) -> None:
        """None whenever mine plus the reservation exceeds capacity, and always for a
        RELEASE account, fresh or full."""
        # Holds ACC-05.
        account = self._fresh()
        everything = self.fill(account)
        beyond = account.earliest_fit([self.amount], everything)
        assert beyond is None, f"earliest_fit beyond capacity gave {beyond!r}"
        if account.replenishment() is Replenishment.RELEASE:
            for full in (False, True):
                if full:
                    assert account.try_take(everything, []) is True, "fill() did not fit"
                instant = account.earliest_fit([self.amount], [])
                assert instant is None, f"a RELEASE account's earliest_fit gave {instant!r}"

    def test_a_full_time_account_fits_at_the_instant_it_names(self) -> None:
        """A full TIME account names, through earliest_fit, a future instant at
        which the clock alone makes one unit fit, and the instant is the truth: the unit does
        not fit just before it (an answer that is late would leave admission sleeping while
        the unit could run) and fits at it, with no give (admission sleeps until the instant
        and grants then). An account that answers None although the clock frees it strands
        its waiters until some unrelated event."""
        # Holds ACC-05, ACC-07.
        trio.run(
            self._fits_at_the_named_instant, clock=trio.testing.MockClock(autojump_threshold=0)
        )

    def test_beside_a_reservation_the_named_instant_is_the_truth_too(self) -> None:
        """With half the account taken and the other half reserved by the head
        of the line, one unit fits only when the clock frees it beside the reservation: the
        instant earliest_fit names for it, and not just before."""
        # Holds ACC-02, ACC-05.
        trio.run(
            self._fits_beside_the_reservation, clock=trio.testing.MockClock(autojump_threshold=0)
        )

    def _clocked(self, account: RateLimiter) -> bool:
        return account.replenishment() is Replenishment.TIME and self.clocked

    async def _fits_at_the_named_instant(self) -> None:
        account = self._fresh()
        if not self._clocked(account):
            return
        assert account.try_take(self.fill(account), []) is True, "fill() did not fit"
        await trio.testing.wait_all_tasks_blocked()  # whatever the take set going settles first
        await _the_instant_is_the_truth(account, [self.amount], [])

    async def _fits_beside_the_reservation(self) -> None:
        account = self._fresh()
        if not self._clocked(account):
            return
        everything = self.fill(account)
        if len(everything) < 2:
            return  # a one-unit account cannot be half taken and half reserved
        half = len(everything) // 2
        taken, reserved = everything[:half], everything[half:]
        assert account.try_take(taken, []) is True, "half of fill() did not fit"
        await trio.testing.wait_all_tasks_blocked()
        mine = [self.amount]
        assert account.fits(mine, []) is True, "one unit does not fit a half-taken account"
        await _the_instant_is_the_truth(account, mine, reserved)

    @_in_trio
    def test_its_status_is_one_line_and_it_is_nominal_even_when_full(self) -> None:
        """Status() has a one-line summary; status_indicator is None while the
        account is nominal, fresh and with all it has taken."""
        # Holds ACC-11, ACC-12.
        account = self._fresh()
        for full in (False, True):
            if full:
                assert account.try_take(self.fill(account), []) is True, "fill() did not fit"
            status = account.status()
            assert isinstance(status, RateLimiterStatus), f"status() gave {status!r}"
            summary = status.summary
            assert isinstance(summary, str) and summary.strip(), f"summary {summary!r} is blank"
            assert "\n" not in summary, f"summary {summary!r} is more than one line"
            assert account.status_indicator is None, account.status_indicator

    @_in_trio
    def test_the_capacity_wake_runs_only_when_capacity_may_grow(self) -> None:
        """Installing the wake does not run it, a decrease (a take) never runs it, a
        raised capacity does when the account can grow, and installing None clears it."""
        # Holds ACC-09.
        account = self._fresh()
        wakes: list[str] = []
        account.on_capacity_change(lambda: wakes.append("wake"))
        assert wakes == [], "installing the wake ran it"
        assert account.try_take([self.amount], []) is True, "one unit does not fit"
        assert wakes == [], "a take (a capacity decrease) ran the wake"
        if self.grow(account):
            assert wakes == ["wake"], f"growing the account woke {len(wakes)} times"
            account.on_capacity_change(None)
            self.grow(account)
            assert wakes == ["wake"], "the wake ran after it was cleared"
        else:
            account.on_capacity_change(None)

    def test_admission_grants_a_demand_whole_and_gets_it_back(self) -> None:
        """Through a real Admission, a demand naming the account and a gate
        waits holding nothing on either while the account is full, is granted whole when the
        holder rolls back, and release returns the account's part if it is RELEASE."""
        # Holds ADM-35, ADM-46.
        trio.run(self._admit_whole, clock=trio.testing.MockClock(autojump_threshold=0))

    async def _admit_whole(self) -> None:
        account = self._fresh()
        companion = CountingGate("contract-companion", 1)
        start = account.in_use
        admission = Admission()
        async with trio.open_nursery() as nursery:
            await nursery.start(admission.run)
            holder = await admission.admit(_demand(account, self.fill(account)))
            assert account.in_use > start, "the holder's grant took nothing"
            granted: list[Grant] = []

            async def wait_for_grant() -> None:
                demand = _demand(account, [self.amount]).add(companion)
                granted.append(await admission.admit(demand))

            nursery.start_soon(wait_for_grant)
            await trio.testing.wait_all_tasks_blocked()
            assert granted == [], "a demand was granted while the account was full"
            assert companion.in_use == 0, "a parked demand holds the companion gate"
            admission.rollback(holder)
            await trio.testing.wait_all_tasks_blocked()
            assert len(granted) == 1, "rolling the holder back did not grant the waiting demand"
            assert companion.in_use == 1, "the grant is not whole: no companion permit"
            held = account.in_use
            assert held > start
            admission.release(granted[0])
            assert companion.in_use == 0
            if account.replenishment() is Replenishment.RELEASE:
                assert account.in_use == start, "release did not give the RELEASE account back"
            else:
                assert account.in_use == held, "release gave a TIME account back"
            admission.stop()


TOO_EARLY = 0.01
"""How far before the instant earliest_fit names the check looks, as a share of the wait
(at least a millisecond): the ask must not fit there yet, or the instant was late."""


async def _the_instant_is_the_truth(
    account: RateLimiter, mine: Sequence[Any], reserved: Sequence[Any]
) -> None:
    """``mine`` does not fit ``account`` beside ``reserved`` now; the instant earliest_fit names
    is in the future, the ask does not fit just before it, and fits at it."""
    assert account.fits(mine, reserved) is False, "a full account fits more"
    now = trio.current_time()
    instant = account.earliest_fit(mine, reserved)
    assert instant is not None, (
        "a full TIME account's earliest_fit gave None, though the clock alone frees it"
    )
    assert isinstance(instant, float) and instant > now, (
        f"earliest_fit gave {instant!r}, not an instant after now ({now})"
    )
    before = instant - max(1e-3, TOO_EARLY * (instant - now))
    if before > now:
        await trio.sleep_until(before)
        assert account.fits(mine, reserved) is False, (
            f"it fits at {before:.6f}, before {instant:.6f}, the instant earliest_fit named: "
            "the named instant is late"
        )
    await trio.sleep_until(instant)
    assert account.fits(mine, reserved) is True, (
        f"it does not fit at {instant:.6f}, the instant earliest_fit named"
    )


def _demand(account: RateLimiter, amounts: Sequence[Any]) -> Demand:
    demand = Demand()
    for amount in amounts:
        demand.add(account, amount)
    return demand
