"""Counting gates: the shape of every unit-permit account.

A :class:`CountingGate` is a capacity and an in-use count. Each amount in a demand is one permit
(the amount itself is usually ``None``), so a job asking ``[None]`` takes one slot and a
merged ask ``[None, None]`` takes two. A permit comes back only when a job gives it back, which
is why ``earliest_fit`` is always ``None``: the clock alone never frees a slot.

An amount's value is not counted (it may be ``None``, a number or a routing record), but a bool,
NaN, an infinity or a negative is refused by name: when the demand is built, and by every
question too (:func:`check_permits`).

Database gates, model gates, MCP subprocess slots and the HTTP gate are counting gates; a new
concurrency cap is a subclass with a name::

    class RenderSlots(CountingGate):
        def __init__(self) -> None:
            super().__init__("render", 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import trio

from ..errors import UncorrectableError
from .demand import amount_problem
from .limiter import AbstractRateLimiter
from .status import SemaphoreLimiterStatus

__all__ = ["CountingGate", "check_permits"]


def check_permits(name: str, amounts: Sequence[Any], where: str) -> None:
    """Refuse an amount no account can take (a bool, NaN, an infinity, a negative), naming the
    account ``name``, the call and the value. ``None`` (the usual amount) costs one comparison;
    anything that is not a number (a routing record) passes, since a permit's value is not
    counted."""
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


def _trio_now() -> float | None:
    """The trio clock, or ``None`` outside a trio run (a gate built at configuration time)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return None


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
    """A concurrency cap of ``capacity`` unit permits (ACC-13..18), category ``semaphore``.

    ``fits`` and ``try_take`` refuse with :class:`~nucleo_trio.errors.UncorrectableError` when a
    job asks for more permits than the gate will ever have; otherwise the question is
    ``in_use + len(mine) + len(reserved_ahead) <= capacity``. ``give`` returns permits and never
    runs the wake: admission wakes itself after settling, so a second wake would only cost a
    pass. Raising the capacity with :meth:`set_capacity` does wake, since parked jobs may now fit.
    """

    _capacity_parameter: ClassVar[str] = "capacity"
    """The constructor parameter a subclass takes the capacity as, so its errors name it."""

    def __init__(self, name: str, capacity: int) -> None:
        owner = type(self).__name__
        if not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        if not name.strip():
            raise ValueError(f"{owner}: name must not be blank")
        self._name = name
        self._capacity = _check_capacity(f"{owner} {name!r}", capacity, self._capacity_parameter)
        self._in_use = 0
        self._last_activity = _trio_now()

    # -- identity ---------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        return self._name

    @property
    def limiter_category(self) -> str:
        return "semaphore"

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def available(self) -> int:
        """Permits free right now (never negative, even after the capacity was lowered)."""
        return max(0, self._capacity - self._in_use)

    @property
    def last_activity(self) -> float | None:
        """The instant of the last successful take or give; construction time until then."""
        return self._last_activity

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(self._capacity, self.available, self._last_activity)

    # -- the account questions ---------------------------------------------------------------------
    def _fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        for amount in mine:
            if amount is not None:
                check_permits(self._name, mine, "fits/try_take")
                break
        asked = len(mine)
        if asked > self._capacity:
            raise UncorrectableError(
                f"{self._name}: {asked} permits can never fit a gate of {self._capacity}",
                llm_message=(
                    f"The job asks for {asked} permits on {self._name}, which only ever has "
                    f"{self._capacity}."
                ),
            )
        return self._in_use + asked + len(reserved_ahead) <= self._capacity

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self._fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self._fits(mine, reserved_ahead):
            return False
        self._in_use += len(mine)
        self._last_activity = _trio_now()
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        for amount in amounts:
            if amount is not None:
                check_permits(self._name, amounts, "give")
                break
        returned = len(amounts)
        if returned > self._in_use:
            # Over-giving would hand out permits that do not exist; that is a settlement bug
            # upstream, and hiding it here would turn it into an overdraw later.
            raise ValueError(
                f"{self._name}: give of {returned} permits exceeds the {self._in_use} in use"
            )
        self._in_use -= returned
        self._last_activity = _trio_now()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
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
