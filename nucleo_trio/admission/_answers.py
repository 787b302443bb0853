"""The one check of what an account answers admission (ADM-41).

``fits`` and ``try_take`` answer exactly ``True`` or ``False``; ``earliest_fit`` answers ``None``
or an instant, an int or a float, where ``+inf`` reads as ``None`` and NaN, ``-inf``, a bool or
anything else is refused. :func:`answer` is where those rules live: it turns an answer into
what the pass uses, or raises :class:`AccountAnswerError`, which the pass handles as the
account raising (only that waiter is refused, naming the account and the value).

On the grant path the pass tests a question's answer ``is True`` / ``is False`` inline and
calls :func:`answer` only for anything else, so an account that keeps the contract costs no
call there; ``earliest_fit``, asked only of a waiter that is short (and never of a counting
gate that keeps the gate's own questions, which names no instant), goes through it unless it
answers ``None``.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, overload

__all__ = ["AccountAnswerError", "answer"]

_INF = math.inf
_A_BOOL = "True or False"
_AN_INSTANT = (
    "None (only an event can help) or a trio.current_time() instant, an int or a float "
    "(+inf reads as None; not NaN, -inf or a bool)"
)


class AccountAnswerError(TypeError):
    """An account answered admission with a value its contract does not allow."""


@overload
def answer(question: Literal["fits", "try_take"], value: object) -> bool: ...


@overload
def answer(question: Literal["earliest_fit"], value: object) -> float | None: ...


def answer(question: str, value: object) -> bool | float | None:
    """``value``, the account's answer to ``question``, as the pass uses it; raises
    :class:`AccountAnswerError` for a value the contract does not allow."""
    if question == "earliest_fit":
        if value is None:
            return None
        kind = type(value)
        if kind is float:
            if -_INF < value < _INF:  # type: ignore[operator]
                return value  # type: ignore[return-value]
        elif kind is int:
            return value  # type: ignore[return-value]
        return _odd_instant(value)
    if value is True or value is False:
        return value
    raise _bad_answer(question, value, _A_BOOL)


def _odd_instant(value: object) -> float | None:
    """The slow path of an instant: subclasses, other reals, infinities and faults."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad_answer("earliest_fit", value, _AN_INSTANT)
    try:
        instant = float(value)
    except (ArithmeticError, ValueError, TypeError):
        raise _bad_answer("earliest_fit", value, _AN_INSTANT) from None
    if instant != instant or instant == -_INF:
        raise _bad_answer("earliest_fit", value, _AN_INSTANT)
    return None if instant == _INF else instant


def _bad_answer(question: str, value: object, expected: str) -> AccountAnswerError:
    return AccountAnswerError(
        f"{question} returned {value!r} (a {type(value).__name__}); it must return {expected}"
    )
