"""How many units a list of amounts moves: one rule for demands and for limiter events."""

from __future__ import annotations

import decimal
import numbers
from collections.abc import Iterable

__all__ = ["units_of"]


def units_of(amounts: Iterable[object]) -> int | float:
    """How many units a list of amounts moves, as limiter events report it.

    Numbers add up; anything else (a unit permit's ``None``, a routing key) counts as 1; a
    ``bool`` counts as 1, not as a number. ``[300, 300]`` is 600, three ``None`` are 3, and an
    empty list is 0. A whole float comes back as an ``int``.
    """
    total: int | float = 0
    for amount in amounts:
        if isinstance(amount, bool):
            total += 1
        elif isinstance(amount, int):
            total += amount
        elif isinstance(amount, numbers.Real | decimal.Decimal):
            total += float(amount)
        else:
            total += 1
    if isinstance(total, float) and total.is_integer():
        return int(total)
    return total
