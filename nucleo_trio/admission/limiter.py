"""The account contract every gate, bucket, window and memory line implements.

An *account* is anything a job must hold capacity on before it runs: a concurrency cap, a
token bucket, a sliding window of requests, the process's memory. Admission does not care which:
it asks every account the same five questions, and none of them ever blocks.

* ``fits(mine, reserved_ahead)``: would the asking job's amounts fit right now, with the amounts
  of the head of the line set aside? It raises :class:`~nucleo_trio.errors.UncorrectableError`
  to refuse what can never fit (more permits than the gate has) or to refuse everyone (an open
  circuit); "fits alone but not beside the head" is a plain ``False``.
* ``try_take(mine, reserved_ahead)``: the same check and the debit, as one step.
* ``give(amounts)``: credit amounts back.
* ``earliest_fit(mine, reserved_ahead)``: the :func:`trio.current_time` instant at which the clock
  alone closes the shortfall, or ``None`` when only an event (a give, a raised cap) can help.
* ``on_capacity_change(wake)``: install the one wake-up the account runs after any change of its
  own that can only *increase* capacity. Admission installs it; decreases never wake anyone.

Admission checks every answer where it receives it. ``fits`` and ``try_take`` answer exactly
``True`` or ``False`` (not ``None``, not a truthy string); ``earliest_fit`` answers ``None`` or an
int or float instant, where ``+inf`` is read as ``None`` ("never from the clock alone") and an
instant that has passed means "look again now" (an account that keeps naming a past instant for
a waiter it calls short is asked again 10 ms later, not in a loop). NaN, ``-inf``, a bool or
anything else is a fault of the account, handled like a raise: only that waiter is refused,
with an error naming the account and the value.

Amounts reach an account already checked: a demand refuses a bool, NaN, an infinity, a negative
or a complex number when it is built (:func:`~nucleo_trio.admission.demand.check_amount`), and
``account_for`` is where an account refuses a value it does not take (a token bucket takes only
token counts). The built-in accounts refuse such amounts from direct callers too, so a negative
amount can never credit anything.

Because trio runs one task at a time, "atomic" needs no lock here: an account that answers
synchronously is one critical section by construction.

Two ways a permit comes back (:class:`Replenishment`): a RELEASE account (a slot, a connection,
retained heap) gets its permit back when the job's resources close; a TIME account (tokens per
minute, requests per second) only as the clock moves on, so releasing it at close would make
throughput a function of job duration and silently defeat throttling. A roll-back returns
both, because work that never ran never spent its window.

An account whose state lives elsewhere (a shared account settled through Redis) may add two
optional members: ``async wait_ready()`` returns once the account has its first reading of that
state (or knows it cannot have one), and ``unavailable`` is ``None`` while the account can read
its state, otherwise a sentence saying why not. ``nucleo-trio health`` waits on the first, within
its ``--wait`` bound, and reports the second.

:class:`AbstractRateLimiter` is the base most accounts build on: it is its own identity, it is
RELEASE, it is nominal (no status indicator), and it holds the one wake slot, beside which any
number of wake listeners may listen (:meth:`AbstractRateLimiter.add_wake_listener`).
"""

from __future__ import annotations

import abc
import enum
import inspect
import sys
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, _ProtocolMeta, final, runtime_checkable

from ..errors import UncorrectableError

if TYPE_CHECKING:
    from ..errors import UpstreamFailure
    from .status import RateLimiterStatus

__all__ = [
    "AbstractRateLimiter",
    "LimiterEventType",
    "LimiterIdentity",
    "RateLimiter",
    "Replenishment",
    "account_faults",
    "check_account",
    "describe_faults",
]


class Replenishment(enum.Enum):
    """How a permit comes back: at release (a held thing) or only with time (a window)."""

    RELEASE = "RELEASE"
    """Given back when the job's resources close: a slot, a connection, retained memory."""
    TIME = "TIME"
    """Given back only as the clock moves on (a window, a bucket); release returns nothing,
    so throughput does not depend on how long jobs take. A roll-back still returns it."""


_RELEASE = Replenishment.RELEASE  # read once: an Enum class's attributes cost a slow lookup


class LimiterEventType(enum.Enum):
    """The five transitions admission reports per account; accounts never report their own."""

    HELD = "HELD"
    """The account said no and the job waits in admission's line; reported at most once per
    waiter and account, with the waiters held on it after the job joined."""
    GRANTED_IMMEDIATE = "GRANTED_IMMEDIATE"
    """The account was granted without ever holding the job (it may have waited on another
    account); its wait is 0."""
    GRANTED_FROM_HOLD = "GRANTED_FROM_HOLD"
    """The account was granted after holding the job; the event carries the seconds held."""
    REJECTED = "REJECTED"
    """A waiter held on this account, or refused by it, left without a grant; the reason is
    ``cancelled``, ``circuit_blocked`` (an account refused the job), ``aborted`` (an account
    or admission failed) or ``shutdown``."""
    RELEASED = "RELEASED"
    """The job's amounts went back to the account at release or roll-back, once per entry."""


class _StaticProtocolMeta(_ProtocolMeta):
    """``isinstance`` against an account protocol looks the members up without running them,
    the rule Python 3.12 adopted, on every version.

    Python 3.11 reads every member with ``hasattr``, which runs properties: an ``in_use`` that
    reads the trio clock then fails ("must be called from async context") when an account is
    checked outside a run, as a plugin registry does when it builds one. Only a real check may
    read live state, and only where it may (admission, inside the run).
    """

    def __instancecheck__(cls, instance: object) -> bool:
        if sys.version_info >= (3, 12) or not getattr(cls, "_is_protocol", False):
            return super().__instancecheck__(instance)
        for name in typing._get_protocol_attrs(cls):  # type: ignore[attr-defined]
            member = inspect.getattr_static(instance, name, _ABSENT)
            if member is _ABSENT:
                return False
            if member is None and callable(getattr(cls, name, None)):
                return False  # a method set to None opts out, as in typing
        return True


_ABSENT = object()


@runtime_checkable
class LimiterIdentity(Protocol, metaclass=_StaticProtocolMeta):
    """What an account is, as events, status rows, health and wait times name it.

    Every member is a property except :meth:`status`. Admission checks the shape the first time
    it meets an account (names non-blank strs, ``capacity`` and ``in_use`` numbers rather than
    methods, ``status()`` a record with a str ``summary``) and refuses the job of an account
    that breaks it, naming the account and everything wrong.
    """

    @property
    def limiter_name(self) -> str:
        """The account's name as events, status rows, health and a grant's wait times show
        it: a non-blank ``str`` (``"http"``, ``"db:orders"``, a model id)."""
        ...

    @property
    def limiter_category(self) -> str:
        """The kind of account, a non-blank ``str``: ``"memory"``, ``"token_bucket"``,
        ``"elastic_window"``, ``"rate_limit"`` or ``"semaphore"`` for the built-in ones, or a
        plugin's own name (health shows an unknown category as it is, with no unit)."""
        ...

    @property
    def capacity(self) -> int | float:
        """What the account holds when nothing is taken, an ``int`` or a ``float`` (not a
        bool) in the account's own unit: permits, tokens per minute, requests per window,
        bytes. Events and health show it; admission decides through :meth:`fits` alone."""
        ...

    @property
    def in_use(self) -> int | float:
        """How much of :attr:`capacity` is taken right now, in the same unit, an ``int`` or a
        ``float``. An account may read its clock here, so read it inside a trio run."""
        ...

    @property
    def status_indicator(self) -> str | None:
        """``None`` while the account is nominal, otherwise one short word for health and
        events: ``"blocked"``, ``"probing"``, ``"throttle:2.0x"`` (1 + the throttle, one
        decimal) or ``"pace:1500ms"``."""
        ...

    def status(self) -> RateLimiterStatus:
        """A frozen snapshot of the account, a record of its own type whose ``summary``
        property is one line naming the numbers. It may read the account's clock."""
        ...


@runtime_checkable
class RateLimiter(LimiterIdentity, Protocol):
    """An account admission can grant from; see the module docstring for the contract.

    ``amounts`` are whatever the account understands: token counts for a bucket, ``None`` per
    permit for a unit gate, a routing key for a limiter with several buckets. ``account_for``
    resolves one amount to the :class:`LimiterIdentity` it debits, so a demand can merge the
    amounts that land on the same account. ``replenishment`` has no default on purpose: every
    account must say how its permits come back.
    """

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Would ``mine`` fit right now, with ``reserved_ahead`` set aside? ``True`` or
        ``False``, exactly; nothing is taken.

        ``mine`` is the asking job's amounts on this account, ``reserved_ahead`` the amounts
        the head of admission's line holds on the same account (empty when the asker is the
        head, or the head does not use this account). Fitting alone but not beside the
        reservation is ``False``. Raise :class:`~nucleo_trio.errors.UncorrectableError` to
        refuse the job for good, when ``mine`` alone can never fit (more than the account
        ever holds) or the account refuses everyone (an open circuit, a closed endpoint): the
        job fails with that error (any :class:`~nucleo_trio.errors.LLMReadableError` reaches
        it as raised). Any other exception, or an answer that is not a bool, is a fault of
        the account: that job alone is refused, with an error naming the account.
        """
        ...

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The check of :meth:`fits` and, when it passes, the debit, in one step.

        ``True`` when ``mine`` was taken; ``False``, taking nothing, when it does not fit now.
        It raises as :meth:`fits` does, and then takes nothing. Admission calls it only once
        every account of the demand said it fits; a ``False`` makes admission give back what
        the same attempt already took and hold the job.
        """
        ...

    def give(self, amounts: Sequence[Any]) -> None:
        """Credit ``amounts`` back: the same list a :meth:`try_take` took.

        Admission calls it at release for RELEASE accounts, at roll-back for every account,
        and to undo a take when a later account of the same attempt says no. It need not run
        the wake: admission looks at its line again after every settlement. What it raises
        at release or roll-back reaches whoever settles the grant, once every other account
        got its amounts back; a raise while undoing an attempt closes admission as a defect.
        """
        ...

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """When the clock alone will make ``mine`` fit beside ``reserved_ahead``.

        A :func:`trio.current_time` instant (an ``int`` or a ``float``), or ``None`` when
        only an event can help (a give, a raised capacity, the head leaving the line).
        Admission asks it right after :meth:`fits` or :meth:`try_take` said no, and sleeps
        until the earliest instant any short account names or the next event. An instant
        already past means "look again now"; ``+inf`` reads as ``None``. An account whose
        permits come back only when given (a counting gate) answers ``None``, and so does any
        account when ``mine`` and the reservation together exceed what it can ever hold.
        NaN, ``-inf``, a bool or any other type is a fault of the account.
        """
        ...

    def on_capacity_change(self, wake: Callable[[], None] | None) -> None:
        """Install ``wake``, the one callable the account runs after a change of its own
        that can only let more fit: a raised capacity, a relaxed throttle, a cleared latch.
        ``None`` clears it.

        There is one slot: a second call replaces the first. Admission installs its wake the
        first time it meets the account and clears it when it stops. The account calls it
        synchronously, with no arguments; a call from another thread is handed over to the
        trio thread by admission. A change that can only shrink capacity never runs it.
        """
        ...

    def account_for(self, amount: Any) -> LimiterIdentity:
        """The :class:`LimiterIdentity` ``amount`` debits.

        Events, status rows and wait times name that identity, and a demand merges the
        amounts that land on the same limiter and identity into one entry, so the account
        sees them together (two bindings on one model become one entry ``[300, 300]``). A
        limiter with several buckets answers the bucket a routing amount selects. It is
        called when the demand is built (``Demand.add``), so it is the place to refuse an
        amount the account does not take, with a :class:`TypeError` or :class:`ValueError`
        naming it, before the job waits. It must not answer ``None``.
        """
        ...

    def replenishment(self) -> Replenishment:
        """How this account's amounts come back after the job ran.

        :attr:`Replenishment.RELEASE`: given back when the job's resources close (a slot, a
        connection). :attr:`Replenishment.TIME`: only with the clock, so release gives
        nothing back (a window, a bucket). A roll-back, for work that never ran, gives every
        account its amounts back either way. Admission asks at every settlement. Every
        account must answer: the protocol has no default.
        """
        ...

    def on_success(self, input: Any = None) -> None:
        """An attempt that declared this account succeeded; the account may relax.

        The dispatcher calls it, with no ``input``, after an attempt that ended without a
        failure, a timeout or a cancel, on each account the job declared through a model
        binding or ``require_rate_limiter``. ``input`` is the request, for a caller that
        passes one. What it raises is logged and dropped.
        """
        ...

    def on_rate_limit_error(
        self, failure: UpstreamFailure | BaseException, input: Any = None
    ) -> None:
        """The upstream pushed back (a 429, an overload); the account may tighten.

        The dispatcher calls it when a failed, uncancelled attempt raised upstream signals,
        once per signal, on each account the job declared through a model binding or
        ``require_rate_limiter``. ``failure`` is the
        :class:`~nucleo_trio.errors.UpstreamFailure` read from the signal (its
        ``backpressure`` is how many units of push-back it counts for); a direct caller may
        pass any exception. ``input`` is the request, for a caller that passes one. What it
        raises is logged and dropped.
        """
        ...

    @property
    def requires_http_connection(self) -> bool:
        """``True`` when a job that declares this account also needs a permit on the
        dispatcher's ``http`` gate (the account fronts an HTTP upstream). Read when the job's
        requirements are assembled."""
        ...

    def observe_held(self, supplier: Callable[[], int]) -> None:
        """Admission hands over ``supplier``, a callable that answers how many waiters it
        holds on this account right now (cheap, never raises).

        Only the memory account is handed one, when admission's evaluator starts; an account
        that paces its line reads it, others may ignore it.
        """
        ...


class AbstractRateLimiter(abc.ABC):
    """The base for accounts: the defaults of the contract.

    A subclass supplies its identity (``limiter_name``, ``limiter_category``, ``capacity``,
    ``in_use``), ``status`` and the four account questions. It inherits:

    * ``account_for(amount)`` is ``self``: every amount debits this one account;
    * ``replenishment()`` is RELEASE; clocked families override it with TIME;
    * ``status_indicator`` is ``None`` (nominal);
    * one wake slot: ``on_capacity_change(wake)`` installs it, ``None`` clears it, and
      :meth:`_capacity_changed` runs it. Call it only after a change that can *increase*
      capacity: a decrease never helps a waiter, so it never wakes anyone;
    * wake listeners beside the slot, as many as listen (:meth:`add_wake_listener`,
      :meth:`remove_wake_listener`), run by the same :meth:`_capacity_changed`;
    * ``on_success``, ``on_rate_limit_error`` and ``observe_held`` do nothing (``observe_held``
      never calls the supplier), and ``requires_http_connection`` is ``False``.
    """

    # Class-level defaults keep the slot and the listeners valid for subclasses that skip
    # ``super().__init__``. The listeners are a tuple replaced whole on every change, so a
    # capacity change read from another thread always sees a complete one.
    _wake: Callable[[], None] | None = None
    _wake_listeners: tuple[Callable[[], None], ...] = ()

    @property
    @abc.abstractmethod
    def limiter_name(self) -> str:
        """The account's name as events, status rows, health and a grant's wait times show
        it: a non-blank ``str`` (``"http"``, ``"db:orders"``, a model id)."""

    @property
    @abc.abstractmethod
    def limiter_category(self) -> str:
        """The kind of account, a non-blank ``str``: ``"memory"``, ``"token_bucket"``,
        ``"elastic_window"``, ``"rate_limit"`` or ``"semaphore"`` for the built-in ones, or a
        plugin's own name (health shows an unknown category as it is, with no unit)."""

    @property
    @abc.abstractmethod
    def capacity(self) -> int | float:
        """What the account holds when nothing is taken, an ``int`` or a ``float`` (not a
        bool) in the account's own unit: permits, tokens per minute, requests per window,
        bytes. Events and health show it; admission decides through :meth:`fits` alone."""

    @property
    @abc.abstractmethod
    def in_use(self) -> int | float:
        """How much of :attr:`capacity` is taken right now, in the same unit, an ``int`` or a
        ``float``. An account may read its clock here, so read it inside a trio run."""

    @abc.abstractmethod
    def status(self) -> RateLimiterStatus:
        """A frozen snapshot of the account, a record of its own type whose ``summary``
        property is one line naming the numbers. It may read the account's clock."""

    @abc.abstractmethod
    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Would ``mine`` fit right now, with ``reserved_ahead`` set aside? ``True`` or
        ``False``, exactly; nothing is taken.

        ``mine`` is the asking job's amounts on this account, ``reserved_ahead`` the amounts
        the head of admission's line holds on the same account (empty when the asker is the
        head, or the head does not use this account). Fitting alone but not beside the
        reservation is ``False``. Raise :class:`~nucleo_trio.errors.UncorrectableError` to
        refuse the job for good, when ``mine`` alone can never fit (more than the account
        ever holds) or the account refuses everyone (an open circuit, a closed endpoint): the
        job fails with that error (any :class:`~nucleo_trio.errors.LLMReadableError` reaches
        it as raised). Any other exception, or an answer that is not a bool, is a fault of
        the account: that job alone is refused, with an error naming the account.
        """

    @abc.abstractmethod
    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The check of :meth:`fits` and, when it passes, the debit, in one step.

        ``True`` when ``mine`` was taken; ``False``, taking nothing, when it does not fit now.
        It raises as :meth:`fits` does, and then takes nothing. Admission calls it only once
        every account of the demand said it fits; a ``False`` makes admission give back what
        the same attempt already took and hold the job.
        """

    @abc.abstractmethod
    def give(self, amounts: Sequence[Any]) -> None:
        """Credit ``amounts`` back: the same list a :meth:`try_take` took.

        Admission calls it at release for RELEASE accounts, at roll-back for every account,
        and to undo a take when a later account of the same attempt says no. It need not run
        the wake: admission looks at its line again after every settlement. What it raises
        at release or roll-back reaches whoever settles the grant, once every other account
        got its amounts back; a raise while undoing an attempt closes admission as a defect.
        """

    @abc.abstractmethod
    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """When the clock alone will make ``mine`` fit beside ``reserved_ahead``.

        A :func:`trio.current_time` instant (an ``int`` or a ``float``), or ``None`` when
        only an event can help (a give, a raised capacity, the head leaving the line).
        Admission asks it right after :meth:`fits` or :meth:`try_take` said no, and sleeps
        until the earliest instant any short account names or the next event. An instant
        already past means "look again now"; ``+inf`` reads as ``None``. An account whose
        permits come back only when given (a counting gate) answers ``None``, and so does any
        account when ``mine`` and the reservation together exceed what it can ever hold.
        NaN, ``-inf``, a bool or any other type is a fault of the account.
        """

    @property
    def status_indicator(self) -> str | None:
        """``None`` while the account is nominal, otherwise one short word for health and
        events: ``"blocked"``, ``"probing"``, ``"throttle:2.0x"`` (1 + the throttle, one
        decimal) or ``"pace:1500ms"``.

        The base class always answers ``None``; an account that tightens overrides it.
        """
        return None

    def account_for(self, amount: Any) -> LimiterIdentity:
        """The :class:`LimiterIdentity` ``amount`` debits.

        Events, status rows and wait times name that identity, and a demand merges the
        amounts that land on the same limiter and identity into one entry, so the account
        sees them together (two bindings on one model become one entry ``[300, 300]``). A
        limiter with several buckets answers the bucket a routing amount selects. It is
        called when the demand is built (``Demand.add``), so it is the place to refuse an
        amount the account does not take, with a :class:`TypeError` or :class:`ValueError`
        naming it, before the job waits. It must not answer ``None``.

        The base class answers the account itself: every amount debits this one account.
        """
        return self

    def replenishment(self) -> Replenishment:
        """How this account's amounts come back after the job ran.

        :attr:`Replenishment.RELEASE`: given back when the job's resources close (a slot, a
        connection). :attr:`Replenishment.TIME`: only with the clock, so release gives
        nothing back (a window, a bucket). A roll-back, for work that never ran, gives every
        account its amounts back either way. Admission asks at every settlement.

        The base class answers :attr:`Replenishment.RELEASE`; a clocked account overrides
        it with TIME.
        """
        return _RELEASE

    def on_capacity_change(self, wake: Callable[[], None] | None) -> None:
        """Install ``wake``, the one callable the account runs after a change of its own
        that can only let more fit: a raised capacity, a relaxed throttle, a cleared latch.
        ``None`` clears it.

        There is one slot: a second call replaces the first. Admission installs its wake the
        first time it meets the account and clears it when it stops. The account calls it
        synchronously, with no arguments; a call from another thread is handed over to the
        trio thread by admission. A change that can only shrink capacity never runs it.

        The base class keeps the slot, which a subclass runs with :meth:`_capacity_changed`;
        a ``wake`` that is neither callable nor ``None`` raises :class:`TypeError`. The
        slot is apart from the wake listeners (:meth:`add_wake_listener`): installing or
        clearing it leaves every listener listening.
        """
        if wake is not None and not callable(wake):
            raise TypeError(
                f"{type(self).__name__}.on_capacity_change: wake must be callable or None, "
                f"got {type(wake).__name__}"
            )
        self._wake = wake

    def add_wake_listener(self, listener: Callable[[], None]) -> None:
        """Run ``listener`` after every change that can let more fit, beside the wake
        installed with :meth:`on_capacity_change`.

        Any number of listeners may listen at once: a second dispatcher that shares this
        account listens this way, so neither takes the other's wake. Each runs once per
        change, synchronously and with no arguments, after the installed wake and in the
        order added, in the thread that made the change. Adding a listener that already
        listens does nothing; one that is not callable raises :class:`TypeError`.
        """
        if not callable(listener):
            raise TypeError(
                f"{type(self).__name__}.add_wake_listener: listener must be callable, "
                f"got {type(listener).__name__}"
            )
        if listener not in self._wake_listeners:
            self._wake_listeners = (*self._wake_listeners, listener)

    def remove_wake_listener(self, listener: Callable[[], None]) -> bool:
        """Stop running ``listener``; answers whether it was listening.

        The wake installed with :meth:`on_capacity_change` is not a listener: clear it with
        ``on_capacity_change(None)``.
        """
        listeners = self._wake_listeners
        if listener not in listeners:
            return False
        self._wake_listeners = tuple(other for other in listeners if other != listener)
        return True

    def runs_wake(self, wake: Callable[[], None]) -> bool:
        """Whether a change of capacity runs ``wake``: it is the installed wake or one of the
        listeners (what :attr:`wake_listeners` would hold, without building it)."""
        return wake is self._wake or wake in self._wake_listeners

    @property
    def wake_listeners(self) -> tuple[Callable[[], None], ...]:
        """Everything a change of capacity runs, in the order it runs them: the wake
        installed with :meth:`on_capacity_change`, if any, then every listener."""
        wake = self._wake
        return self._wake_listeners if wake is None else (wake, *self._wake_listeners)

    @final
    def _capacity_changed(self) -> None:
        """Run the installed wake, if any, then every wake listener. Call only after
        capacity may have grown.

        Every one of them runs even if one raises; the first error is then raised.
        """
        wake = self._wake
        if not self._wake_listeners:
            if wake is not None:
                wake()
            return
        _run_listeners(self.wake_listeners)

    def on_success(self, input: Any = None) -> None:
        """An attempt that declared this account succeeded; the account may relax.

        The dispatcher calls it, with no ``input``, after an attempt that ended without a
        failure, a timeout or a cancel, on each account the job declared through a model
        binding or ``require_rate_limiter``. ``input`` is the request, for a caller that
        passes one. What it raises is logged and dropped.

        The base class does nothing.
        """
        return None

    def on_rate_limit_error(
        self, failure: UpstreamFailure | BaseException, input: Any = None
    ) -> None:
        """The upstream pushed back (a 429, an overload); the account may tighten.

        The dispatcher calls it when a failed, uncancelled attempt raised upstream signals,
        once per signal, on each account the job declared through a model binding or
        ``require_rate_limiter``. ``failure`` is the
        :class:`~nucleo_trio.errors.UpstreamFailure` read from the signal (its
        ``backpressure`` is how many units of push-back it counts for); a direct caller may
        pass any exception. ``input`` is the request, for a caller that passes one. What it
        raises is logged and dropped.

        The base class does nothing.
        """
        return None

    @property
    def requires_http_connection(self) -> bool:
        """``True`` when a job that declares this account also needs a permit on the
        dispatcher's ``http`` gate (the account fronts an HTTP upstream). Read when the job's
        requirements are assembled. The base class answers ``False``."""
        return False

    def observe_held(self, supplier: Callable[[], int]) -> None:
        """Admission hands over ``supplier``, a callable that answers how many waiters it
        holds on this account right now (cheap, never raises).

        Only the memory account is handed one, when admission's evaluator starts; an account
        that paces its line reads it, others may ignore it.

        The base class does nothing and never calls ``supplier``.
        """
        return None

    def __repr__(self) -> str:
        try:
            name = self.limiter_name
        except Exception:  # noqa: BLE001 - a repr must never raise
            name = "?"
        return f"<{type(self).__name__} {name!r}>"


def _run_listeners(listeners: tuple[Callable[[], None], ...]) -> None:
    first_error: Exception | None = None
    for listener in listeners:
        try:
            listener()
        except Exception as exc:  # noqa: BLE001 - run the rest, then raise the first
            first_error = first_error or exc
    if first_error is not None:
        raise first_error


# -- the account's shape ---------------------------------------------------------------------------
# Python's abstract classes only check that a name is defined, not what it is: a ``capacity``
# written as a method, or a ``status()`` that returns None, passes them and then breaks every
# event and every health row. Admission checks the shape when it first meets an account.

_QUESTIONS = ("fits", "try_take", "give", "earliest_fit", "on_capacity_change", "account_for")


def _read(account: object, name: str) -> tuple[bool, object, str | None]:
    """``(ok, value, fault)``: the attribute's value, or what went wrong reading it."""
    try:
        return True, getattr(account, name), None
    except Exception as exc:  # noqa: BLE001 - a broken property is a fault to report
        return False, None, f"reading {name} raised {type(exc).__name__}: {exc}"


def _number_fault(name: str, value: object) -> str | None:
    if callable(value):
        return f"{name} is a method, not a number (declare it with @property)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} is {value!r} (a {type(value).__name__}), not an int or a float"
    return None


def _name_fault(name: str, value: object) -> str | None:
    if callable(value):
        return f"{name} is a method, not a str (declare it with @property)"
    if not isinstance(value, str) or not value.strip():
        return f"{name} is {value!r}, not a non-blank str"
    return None


def _identity_faults(identity: object) -> list[str]:
    faults: list[str] = []
    for name, judge in (
        ("limiter_name", _name_fault),
        ("limiter_category", _name_fault),
        ("capacity", _number_fault),
        ("in_use", _number_fault),
    ):
        ok, value, fault = _read(identity, name)
        faults.append((fault if not ok else judge(name, value)) or "")
    ok, value, fault = _read(identity, "status_indicator")
    if not ok:
        faults.append(fault or "")
    elif value is not None and not isinstance(value, str):
        faults.append(f"status_indicator is {value!r}, not None or a str")
    faults.append(_status_fault(identity))
    return [fault for fault in faults if fault]


def _status_fault(identity: object) -> str:
    status = getattr(identity, "status", None)
    if not callable(status):
        return f"status is {status!r}, not a method"
    try:
        record = status()
        summary = record.summary
    except Exception as exc:  # noqa: BLE001 - as above
        return f"status() failed: {type(exc).__name__}: {exc}"
    if not isinstance(summary, str):
        return (
            f"status() returned {record!r}, whose summary is {summary!r}; it must return a "
            "status record with a str summary property (RateLimiterStatus)"
        )
    return ""


def _limiter_faults(limiter: object) -> list[str]:
    faults = [
        f"{name} is not callable"
        for name in _QUESTIONS
        if not callable(getattr(limiter, name, None))
    ]
    replenishment = getattr(limiter, "replenishment", None)
    if not callable(replenishment):
        faults.append(f"replenishment is {replenishment!r}, not a method")
    else:
        try:
            answer = replenishment()
        except Exception as exc:  # noqa: BLE001 - as above
            faults.append(f"replenishment() failed: {type(exc).__name__}: {exc}")
        else:
            if not isinstance(answer, Replenishment):
                faults.append(f"replenishment() returned {answer!r}, not a Replenishment")
    return faults


def account_faults(limiter: object, identity: object | None = None) -> list[str]:
    """Everything wrong with the shape of an account, one phrase each; empty when it is sound.

    ``limiter`` is what admission asks (``fits``, ``try_take``, ``give``, ``earliest_fit``,
    ``on_capacity_change``, ``account_for`` callables, ``replenishment()`` a
    :class:`Replenishment`); ``identity`` what events and health read (``limiter_name`` and
    ``limiter_category`` non-blank strs, ``capacity`` and ``in_use`` ints or floats and not
    bools or methods, ``status_indicator`` ``None`` or a str, ``status()`` a record with a str
    ``summary``). ``identity`` defaults to ``limiter``, its own identity. Reading these runs the
    account's properties, so call it where the account may read its clock (inside a trio run).
    """
    faults = _limiter_faults(limiter)
    faults += _identity_faults(limiter if identity is None else identity)
    return faults


def describe_faults(account: object, faults: Sequence[str]) -> str:
    """One message naming ``account`` and everything wrong with it."""
    try:
        name = getattr(account, "limiter_name", None)
    except Exception:  # noqa: BLE001 - a name for a message must never raise
        name = None
    kind = f"{type(account).__module__}.{type(account).__qualname__}"
    named = f"account {name!r} ({kind})" if isinstance(name, str) and name else f"account {kind}"
    return f"{named} does not keep the account contract: {'; '.join(faults)}"


def check_account(limiter: object, identity: object | None = None) -> None:
    """Raise one :class:`~nucleo_trio.errors.UncorrectableError` naming the account and
    everything wrong with its shape (see :func:`account_faults`); return quietly if nothing is.
    """
    faults = account_faults(limiter, identity)
    if faults:
        raise UncorrectableError(describe_faults(limiter if identity is None else identity, faults))


def name_of(identity: LimiterIdentity) -> str:
    """An account's name for a message, a repr or a wait map; never raises (a broken
    ``limiter_name`` gives the class name instead)."""
    try:
        return identity.limiter_name
    except Exception:  # noqa: BLE001 - a name read for a message must never raise
        return type(identity).__name__
