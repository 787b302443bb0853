"""A job's whole demand, and the grant that settles it exactly once.

A :class:`Demand` is the ordered list of accounts a job must hold at once, with its amounts on
each. ``add(limiter, amount)`` resolves the account the amount debits with
``limiter.account_for(amount)``; amounts that land on the same account (the same limiter
instance *and* the same identity) merge into one entry, so the account sees the whole ask at
once: two bindings on one model become one entry ``[300, 300]`` that must fit together. Entries
keep the order in which their first amount was added.

A :class:`Grant` is what admission hands back: the entries it took, how long the job waited in
all (``wall_wait``) and, per account name, how long that account kept the job waiting
(``wait_times_ms``; these overlap, so they can add up to more than the wall wait). It is settled
exactly once, by ``Admission.release`` or ``Admission.rollback``; a second settlement is a no-op,
so a close that overlaps a force-close cannot return a permit twice.

An amount is checked where it is declared, not where it is spent: ``None`` (one permit on a
counting gate), a finite non-negative number (permits on a gate, tokens on a bucket), or
anything else the account resolves with ``account_for`` (a routing key). A bool, NaN, an
infinity, a negative or a complex number is refused by :func:`check_amount` when the demand is
built, with an error naming the limiter and the value, so no account ever sees one (a negative
token count would otherwise credit a bucket, and a NaN is neither more nor less than any level).
"""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

from .._amounts import units_of
from .._clock import whole_ms
from .limiter import LimiterIdentity, RateLimiter, name_of

if TYPE_CHECKING:
    from ..jobs.snapshot import JobSnapshot
    from .monitor import AdmissionWaiter

__all__ = ["Demand", "DemandEntry", "Grant", "amount_problem", "check_amount", "units_of"]

_INF = math.inf


def amount_problem(amount: object) -> tuple[type[Exception], str] | None:
    """Why ``amount`` can be on no account, as ``(error class, reason)``; ``None`` when it can.

    ``None`` and finite non-negative numbers pass; so does anything that is not a number at all
    (a routing key: the account judges it in ``account_for``). A bool (``True`` would count as
    1), a complex number, NaN, an infinity and a negative number are refused.
    """
    kind = type(amount)
    if kind is int:
        return None if amount >= 0 else (ValueError, "it is negative")  # type: ignore[operator]
    if kind is float:
        if 0.0 <= amount < _INF:  # type: ignore[operator]
            return None  # NaN fails both comparisons and falls through
    elif amount is None:
        return None
    if kind is bool:
        return TypeError, "a bool is not an amount"
    if not isinstance(amount, numbers.Number | decimal.Decimal):
        return None  # not a number: the account's to understand
    if not isinstance(amount, numbers.Real | decimal.Decimal):
        return TypeError, f"a {kind.__name__} is not a real number"
    try:
        value = float(amount)
    except (ArithmeticError, ValueError):
        return ValueError, "it is not a finite number"
    if value != value:
        return ValueError, "it is NaN"
    if value in (_INF, -_INF):
        return ValueError, "it is infinite"
    if value < 0:
        return ValueError, "it is negative"
    return None


def check_amount(limiter: object, amount: object, *, where: str) -> None:
    """Refuse an amount no account can take (see :func:`amount_problem`), naming ``where`` it
    was declared, the limiter and the value."""
    problem = amount_problem(amount)
    if problem is not None:
        error, reason = problem
        raise error(
            f"{where}: the amount on {_limiter_name(limiter)} must be None or a finite, "
            f"non-negative number, got {amount!r} ({type(amount).__name__}: {reason})"
        )


@attrs.frozen
class DemandEntry:
    """One account of a demand: the limiter, the identity it debits, and the amounts on it.

    ``amounts`` is a tuple (read-only); an amount may be ``None`` (one permit on a gate). Each
    amount is checked with :func:`check_amount` when the entry is built; the account counts
    them all together (``[24, None]`` is 25 permits on a gate).
    """

    limiter: RateLimiter
    """The account admission asks (``fits``, ``try_take``, ``give``, ``earliest_fit``)."""
    key: LimiterIdentity
    """The identity the amounts debit, as ``limiter.account_for`` answered it: what events,
    status and wait times name. Often the limiter itself."""
    amounts: tuple[Any, ...] = attrs.field()
    """Every amount the demand put on this account, in the order added; a plain ``tuple``
    (anything else is a :class:`TypeError`)."""

    @amounts.validator
    def _check_amounts(self, attribute: attrs.Attribute[Any], amounts: tuple[Any, ...]) -> None:
        if type(amounts) is not tuple:
            raise TypeError(f"DemandEntry: amounts must be a tuple, got {type(amounts).__name__}")
        for amount in amounts:
            if amount is not None and not (type(amount) is int and amount >= 0):
                check_amount(self.limiter, amount, where="DemandEntry")

    @property
    def units(self) -> int | float:
        """The entry's amounts as one number of units (see :func:`units_of`)."""
        amounts = self.amounts
        if len(amounts) == 1 and amounts[0] is None:
            return 1  # the usual entry, one unit permit
        return units_of(amounts)


_set = object.__setattr__


def _checked_entry(
    limiter: RateLimiter, key: LimiterIdentity, amounts: tuple[Any, ...]
) -> DemandEntry:
    """A :class:`DemandEntry` whose amounts were each checked as they were added (the demand's
    hot path: the constructor would check them all again)."""
    entry: DemandEntry = object.__new__(DemandEntry)
    _set(entry, "limiter", limiter)
    _set(entry, "key", key)
    _set(entry, "amounts", amounts)
    return entry


class Demand:
    """The accounts a job must hold at once, assembled in order, merged by account.

    ``add`` returns the demand, so a demand reads as one expression::

        Demand().add(bucket, 400).add(http_gate).add(db_gate)

    ``len(demand)`` is the number of entries; a demand with none (an orchestrator's) is granted
    at once and holds nothing.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[DemandEntry] = []

    def add(self, limiter: RateLimiter, amount: Any = None) -> Demand:
        """Add ``amount`` on ``limiter``: merged into the entry for the same account, if any.

        An amount no account can take (a bool, NaN, an infinity, a negative) is refused here,
        before the limiter sees it (:func:`check_amount`); the limiter's ``account_for`` may
        refuse what it does not understand (a token bucket takes only token counts).
        """
        account_for = getattr(limiter, "account_for", None)
        if limiter is None or not callable(account_for):
            raise TypeError(
                f"Demand.add: limiter must be a RateLimiter, got {type(limiter).__name__}"
            )
        if amount is not None and not (type(amount) is int and amount >= 0):
            check_amount(limiter, amount, where="Demand.add")
        key = account_for(amount)
        if key is None:
            raise TypeError(
                f"Demand.add: {limiter!r}.account_for({amount!r}) returned None; an account "
                "must resolve every amount to the identity it debits"
            )
        for index, entry in enumerate(self._entries):
            # Identity, not equality: two limiters that compare equal are still two accounts.
            if entry.limiter is limiter and entry.key is key:
                self._entries[index] = _checked_entry(limiter, key, (*entry.amounts, amount))
                return self
        self._entries.append(_checked_entry(limiter, key, (amount,)))
        return self

    @property
    def entries(self) -> tuple[DemandEntry, ...]:
        """The entries, in the order their first amount was added (a read-only tuple)."""
        return tuple(self._entries)

    @property
    def is_empty(self) -> bool:
        """True for a demand with no entries: an orchestrator's, which holds nothing."""
        return not self._entries

    def amounts_on(self, entry: DemandEntry) -> tuple[Any, ...]:
        """This demand's amounts on the same account as ``entry`` (the same limiter and the
        same identity, compared by identity), else ``()``.

        When this demand heads admission's line, this is what a follower asking the same
        account finds set aside.
        """
        for mine in self._entries:
            if mine.limiter is entry.limiter and mine.key is entry.key:
                return mine.amounts
        return ()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        parts = ", ".join(f"{name_of(e.key)}: {list(e.amounts)!r}" for e in self._entries)
        return f"Demand([{parts}])"


def _limiter_name(limiter: object) -> str:
    """The limiter as an error message names it: its name, else its type."""
    try:
        name = getattr(limiter, "limiter_name", None)
    except Exception:  # noqa: BLE001 - a name for a message must never raise
        name = None
    if isinstance(name, str) and name:
        return repr(name)
    return type(limiter).__name__


NO_WAITS: Mapping[str, int] = MappingProxyType({})
"""The waits of a grant made at once: none (read-only, shared)."""


# No setattr hooks: attrs would otherwise run the converter on every later write, and its
# __init__ would write each field through object.__setattr__ (a call per field, per grant).
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class Grant:
    """What admission granted one job; built by :class:`~nucleo_trio.admission.Admission`.

    Hand it back exactly once, to ``Admission.release`` (the job ran) or ``Admission.rollback``
    (it never did); a second settlement does nothing. The per-account waits overlap: two
    accounts that kept the job waiting at the same time each count the whole overlap, so they
    can add up to more than :attr:`wall_wait`.
    """

    entries: tuple[DemandEntry, ...]
    """The accounts granted, in the demand's order, with the amounts taken on each; empty for
    an empty demand."""
    _snapshot: JobSnapshot | None = attrs.field(default=None, repr=False, alias="snapshot")
    wall_wait: float = 0.0
    """Seconds from the admit call to the grant; 0 when it was granted at once."""
    wait_times_ms: Mapping[str, int] = attrs.field(default=NO_WAITS, repr=False)
    """For every account that held the job at some point (memory included), by its name, the
    whole milliseconds from the first time it held the job to the grant; values for one name
    add up. Read-only (admission hands the grant a read-only view), and empty for a grant made
    at once."""
    _owner: object = attrs.field(default=None, repr=False)
    # The owner's bookkeeping for each entry, handed back at settlement (private to it).
    _tracked: tuple[Any, ...] = attrs.field(default=(), repr=False)
    # The job, while its snapshot is still to be taken: nobody heard its events at the admit
    # call, so none was taken then (the first read of ``snapshot`` takes it).
    _context: AdmissionWaiter | None = attrs.field(default=None, repr=False, alias="context")
    _settled: bool = attrs.field(default=False, init=False)

    @property
    def snapshot(self) -> JobSnapshot | None:
        """The job as it stood at the admit call, which the grant's events carry; ``None`` when
        no events are reported or the demand was empty. When nobody heard the job's events at
        the admit call, none was taken then: it is the job as it stands when first read (a
        listener that arrived since hears of the release)."""
        context = self._context
        if context is not None:
            self._snapshot = context.snapshot()
            self._context = None
        return self._snapshot

    @property
    def snapshot_pending(self) -> bool:
        """Whether the snapshot is still to be taken (see :attr:`snapshot`)."""
        return self._context is not None

    @property
    def is_empty(self) -> bool:
        """True when the demand had no entries: nothing to give back, no events."""
        return not self.entries

    @property
    def resourceful(self) -> bool:
        """True when the grant holds anything, and so counts as a completion for memory."""
        return bool(self.entries)

    @property
    def wall_wait_ms(self) -> int:
        """:attr:`wall_wait` in whole milliseconds, truncated (1.0009 s is 1000)."""
        # Whole nanoseconds first, so 1.001 s reads 1001 ms and not 1000.999...
        return whole_ms(self.wall_wait)

    @property
    def is_settled(self) -> bool:
        """True once released or rolled back."""
        return self._settled

    def _claim(self) -> bool:
        """Mark the grant settled; True only for the first caller (ADM-49)."""
        if self._settled:
            return False
        # Past attrs' on-setattr hooks: this runs once per job, on the hot path.
        object.__setattr__(self, "_settled", True)
        return True
