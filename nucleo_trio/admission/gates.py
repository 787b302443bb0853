"""Counting gates: the shape of every concurrency cap.

A :class:`CountingGate` is a capacity of permits and an in-use count. Each amount in a demand
is a number of permits: ``None`` is one permit, ``24`` is 24. A job that needs 24 GiB of an
80 GiB GPU declares ``require_rate_limiter(gpu_memory, 24)``, and three such jobs run at once.
A merged ask counts every amount, so ``[None, None]`` is two permits and ``[3, None]`` four. A
permit comes back only when a job gives it back, which is why ``earliest_fit`` is always
``None``: the clock alone never frees a slot.

A permit count is ``None`` or a positive ``int``. Anything else (a bool, zero, a negative, a
float, NaN, a string) is refused by every question, naming the gate, the call and the value;
:meth:`CountingGate.check_declared` refuses it when a job declares it, together with an ask the
gate can never grant ("gpu-memory: asks for 96 permits but the gate has only 80").

Database gates, model gates, MCP subprocess slots and the HTTP gate are counting gates; a new
concurrency cap is a subclass with a name::

    class RenderSlots(CountingGate):
        def __init__(self) -> None:
            super().__init__("render", 4)
"""

from __future__ import annotations

import decimal
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar

import trio

from .._clock import trio_now_or_none
from .._watch import AsyncValue
from ..errors import UncorrectableError
from .demand import amount_problem
from .limiter import AbstractRateLimiter
from .status import SemaphoreLimiterStatus

__all__ = ["CountingGate", "check_permits", "permit_count"]

_current_time = trio.current_time


def check_permits(name: str, amounts: Sequence[Any], where: str) -> None:
    """Refuse an amount no account can take (a bool, NaN, an infinity, a negative), naming the
    account ``name``, the call and the value. ``None`` costs one comparison; anything that is
    not a number (a routing record) passes. For accounts whose amounts are not permit counts
    (an elastic window); a gate counts its amounts with :func:`permit_count`."""
    for amount in amounts:
        if amount is not None:
            problem = amount_problem(amount)
            if problem is not None:
                _refuse_permit(name, where, amount, problem)


def _refuse_permit(
    name: str, where: str, amount: object, problem: tuple[type[Exception], str]
) -> None:
    error, reason = problem
    raise error(
        f"{name}: {where}: {amount!r} is not an amount ({type(amount).__name__}: {reason}); "
        "an amount is None, a finite non-negative number, or a routing value"
    )


def permit_count(name: str, amount: object, where: str) -> int:
    """How many permits ``amount`` is on the gate ``name``: ``None`` is one, a positive ``int``
    is itself, and a value that is not a number at all (a routing record a subclass resolves in
    ``account_for``) is one, like ``None``.

    Anything else raises, naming the gate, the call and the value: a bool, NaN, an infinity or
    a negative as any account refuses them; zero (no ask) as a :class:`ValueError`; a fraction,
    a float or a numeric string as a :class:`TypeError` (half a permit is none, and ``"16"`` is
    not sixteen permits).
    """
    if amount is None:
        return 1
    kind = type(amount)
    if kind is int:
        if amount > 0:  # type: ignore[operator]
            return amount  # type: ignore[return-value]
    else:
        problem = amount_problem(amount)
        if problem is not None:
            _refuse_permit(name, where, amount, problem)
        if isinstance(amount, int):  # an int subclass (an IntEnum); bools were refused above
            if amount > 0:
                return int(amount)
        elif not isinstance(amount, numbers.Number | decimal.Decimal | str | bytes):
            return 1  # a routing record: one permit, as None is
    if isinstance(amount, int):
        reason = "zero permits is no ask" if amount == 0 else "it is negative"
        error: type[Exception] = ValueError
    else:
        reason = f"a {kind.__name__} is not a whole number of permits"
        error = TypeError
    raise error(
        f"{name}: {where}: {amount!r} is not a permit count ({reason}); a gate's amount is "
        "None for one permit or a positive int"
    )


def _check_capacity(owner: str, capacity: object, parameter: str = "capacity") -> int:
    where = owner if parameter == "capacity" else f"{owner}: {parameter}"
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise TypeError(
            f"{where}: capacity must be an int, got {capacity!r} ({type(capacity).__name__})"
        )
    if capacity <= 0:
        raise ValueError(f"{where}: capacity must be positive, got {capacity}")
    return capacity


class CountingGate(AbstractRateLimiter):
    """A concurrency cap of ``capacity`` permits, category ``semaphore``, RELEASE.

    Every amount is a number of permits (``None`` for one), and the questions count them:
    ``fits`` and ``try_take`` refuse with :class:`~nucleo_trio.errors.UncorrectableError` when
    a job asks for more permits than the gate will ever have; otherwise the question is
    ``in_use + permits(mine) + permits(reserved_ahead) <= capacity``. ``give`` returns permits
    and never runs the wake: admission wakes itself after settling, so a second wake would only
    cost a pass. Raising the capacity with :meth:`set_capacity` does wake, since parked jobs
    may now fit.

    :attr:`use` is ``in_use`` as a value tasks can wait on
    (``await gate.use.wait_value(lambda n: n == 0)``).

    ``name`` must be a non-blank ``str`` (else :class:`TypeError` or :class:`ValueError`), and
    ``capacity`` an ``int`` above 0 (:class:`TypeError` for another type, :class:`ValueError`
    for 0 or less).
    """

    _capacity_parameter: ClassVar[str] = "capacity"
    """The constructor parameter a subclass takes the capacity as, so its errors name it."""

    # Made on the first read of ``use``; until then a take or a give pays one attribute test.
    # A class-level default keeps it valid for subclasses that skip ``super().__init__``.
    _use: AsyncValue[int] | None = None

    def __init__(self, name: str, capacity: int) -> None:
        owner = type(self).__name__
        if not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        if not name.strip():
            raise ValueError(f"{owner}: name must not be blank")
        self._name = name
        self._capacity = _check_capacity(f"{owner} {name!r}", capacity, self._capacity_parameter)
        self._in_use = 0
        self._last_activity = trio_now_or_none()
        self._use = None  # on the instance: a class attribute read through it is slower

    # -- identity ---------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        return self._name

    @property
    def limiter_category(self) -> str:
        """Always ``"semaphore"``."""
        return "semaphore"

    @property
    def capacity(self) -> int:
        """The number of permits the gate has, as built or last set with :meth:`set_capacity`."""
        return self._capacity

    @property
    def in_use(self) -> int:
        """Permits taken and not yet given back; above :attr:`capacity` for a while after the
        capacity was lowered under what is held."""
        return self._in_use

    @property
    def use(self) -> AsyncValue[int]:
        """The permits in use, as a trio-util ``AsyncValue`` that tasks can wait on.

        ``await gate.use.wait_value(lambda n: n == 0)`` returns once every permit is back;
        ``async for n in gate.use.eventual_values(): ...`` follows it. It is made on the first
        read, and from then on every take and give sets it; ``in_use`` reads the same number
        without it.
        """
        use = self._use
        if use is None:
            use = self._use = AsyncValue(self._in_use)
        return use

    @property
    def available(self) -> int:
        """Permits free right now (never negative, even after the capacity was lowered)."""
        return max(0, self._capacity - self._in_use)

    @property
    def last_activity(self) -> float | None:
        """The instant of the last successful take or give; construction time until then."""
        return self._last_activity

    def status(self) -> SemaphoreLimiterStatus:
        """The capacity, the permits free and the last activity, as a
        :class:`~nucleo_trio.admission.SemaphoreLimiterStatus`."""
        return SemaphoreLimiterStatus(self._capacity, self.available, self._last_activity)

    # -- declaration -------------------------------------------------------------------------------
    def check_declared(self, amount: Any, where: str = "require_rate_limiter") -> int:
        """The permits ``amount`` asks for, checked when a job declares it: refused unless it is
        a permit count (see :func:`permit_count`), and refused with a :class:`ValueError` when
        it is more than the gate has ("gpu-memory: asks for 96 permits but the gate has only
        80"), since such a job could never run."""
        if amount is None:
            return 1  # one permit (a capacity is at least 1)
        asked = permit_count(self._name, amount, where)
        if asked > self._capacity:
            raise ValueError(
                f"{self._name}: asks for {asked} permits but the gate has only {self._capacity}"
            )
        return asked

    # -- the account questions ---------------------------------------------------------------------
    def _permits(self, amounts: Sequence[Any], where: str) -> int:
        if len(amounts) == 1 and amounts[0] is None:
            return 1  # the usual ask: one permit
        name = self._name
        return sum(permit_count(name, amount, where) for amount in amounts)

    def _ask(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> int | None:
        """The permits ``mine`` asks for, or ``None`` when they do not fit beside the
        reservation."""
        asked = self._permits(mine, "fits/try_take")
        if asked > self._capacity:
            raise UncorrectableError(
                f"{self._name}: {asked} permits can never fit a gate of {self._capacity}",
                llm_message=(
                    f"The job asks for {asked} permits on {self._name}, which only ever has "
                    f"{self._capacity}."
                ),
            )
        ahead = self._permits(reserved_ahead, "reserved_ahead") if reserved_ahead else 0
        return asked if self._in_use + asked + ahead <= self._capacity else None

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not reserved_ahead and len(mine) == 1 and mine[0] is None:
            # The usual ask, one permit with nothing set aside (a capacity is at least 1).
            return self._in_use < self._capacity
        return self._ask(mine, reserved_ahead) is not None

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not reserved_ahead and len(mine) == 1 and mine[0] is None:
            if self._in_use >= self._capacity:
                return False
            asked = 1  # the usual ask, as in fits
        else:
            ask = self._ask(mine, reserved_ahead)
            if ask is None:
                return False
            asked = ask
        self._in_use += asked
        try:  # trio_now_or_none, without the call around it (a take is on the grant path)
            self._last_activity = _current_time()
        except RuntimeError:  # outside a trio run
            self._last_activity = None
        if self._use is not None:
            self._use.value = self._in_use
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """Return the permits ``amounts`` count (``None`` one, a positive ``int`` that many).

        A give of more permits than are in use raises :class:`ValueError` and returns none: it
        is a settlement bug that would otherwise hand out permits that do not exist. It never
        runs the wake; admission looks again after every settlement.
        """
        returned = 1 if len(amounts) == 1 and amounts[0] is None else self._permits(amounts, "give")
        if returned > self._in_use:
            # Over-giving would hand out permits that do not exist; that is a settlement bug
            # upstream, and hiding it here would turn it into an overdraw later.
            raise ValueError(
                f"{self._name}: give of {returned} permits exceeds the {self._in_use} in use"
            )
        self._in_use -= returned
        try:  # as in try_take
            self._last_activity = _current_time()
        except RuntimeError:
            self._last_activity = None
        if self._use is not None:
            self._use.value = self._in_use

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """Always ``None``: the clock never frees a permit, only a give does. An amount that is
        not a permit count is still refused."""
        self._permits(mine, "earliest_fit")
        return None

    # -- configuration ---------------------------------------------------------------------------
    def set_capacity(self, capacity: int) -> None:
        """Resize the gate. A raise wakes admission; a cut never does (it frees nothing).

        Permits already held above a lowered capacity stay held; new takes wait until enough
        come back.
        """
        new = _check_capacity(f"{type(self).__name__} {self._name!r}", capacity)
        grew = new > self._capacity
        self._capacity = new
        if grew:
            self._capacity_changed()
