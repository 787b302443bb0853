"""What a call costs: an exact amount in one currency, never converted.

A :class:`Cost` is a :class:`~decimal.Decimal` rounded to a billionth, so a thousand calls of
0.001 sum to exactly 1, with its ISO 4217 currency. Adding or comparing two currencies is a
ValueError: a deployment that buys in dollars and euros keeps two totals, one per currency.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING

import attrs

from .grades import ModelKind

if TYPE_CHECKING:
    from .catalog import ModelSpec

__all__ = ["Cost"]

_QUANTUM = Decimal("1e-9")
_MILLION = Decimal(1_000_000)
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def _exact(value: Decimal | int | str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str):
        raise TypeError(f"Cost amount must be a Decimal, int or str, got {type(value).__name__}")
    amount = Decimal(value)
    if not amount.is_finite():
        raise ValueError(f"Cost amount must be finite, got {value!r}")
    return amount.quantize(_QUANTUM, rounding=ROUND_HALF_EVEN)


def _currency(instance: Cost, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _CURRENCY.match(value):
        raise ValueError(f"a currency is 3 upper-case letters (ISO 4217), got {value!r}")


@attrs.frozen(order=False)
class Cost:
    """An amount of money in one currency, exact to 1e-9.

    Build one from a :class:`~decimal.Decimal`, an int or a str (never a float, which is a
    TypeError): ``Cost(Decimal("0.50"), "USD")``. Costs of two currencies neither add nor
    compare (a ValueError).
    """

    # OBS-26: exact to a billionth, one currency, never converted.
    amount: Decimal = attrs.field(converter=_exact)
    """The amount, rounded half-even to a billionth (1e-9) of the currency's unit. A value that
    is not finite is a ValueError."""
    currency: str = attrs.field(validator=_currency)
    """The ISO 4217 code, three upper-case letters (``"USD"``); anything else is a ValueError."""

    @classmethod
    def zero(cls, currency: str) -> Cost:
        """Nothing, in ``currency``."""
        return cls(Decimal(0), currency)

    def _same(self, other: Cost, what: str) -> None:
        if not isinstance(other, Cost):
            raise TypeError(f"Cost.{what} takes a Cost, got {type(other).__name__}")
        if other.currency != self.currency:
            raise ValueError(
                f"Cost.{what}: {self.currency} and {other.currency} do not mix; currencies are "
                "never converted, costs are kept per currency"
            )

    def plus(self, other: Cost) -> Cost:
        """The sum; another currency is a ValueError."""
        self._same(other, "plus")
        return Cost(self.amount + other.amount, self.currency)

    __add__ = plus

    def exceeds(self, cap: Cost) -> bool:
        """Strictly more than ``cap``: an amount equal to the cap does not exceed it."""
        self._same(cap, "exceeds")
        return self.amount > cap.amount

    def __str__(self) -> str:
        return f"{self.amount:.6f} {self.currency}"

    # -- pricing (OBS-27) -------------------------------------------------------------------------
    @classmethod
    def of(
        cls,
        spec: ModelSpec,
        input_tokens: int,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
        output_tokens: int = 0,
    ) -> Cost | None:
        """What a call cost on ``spec``: uncached input at the input price, cache writes and
        reads at the entry's multipliers of it, output at the output price; an embeddings
        entry on its input only. ``None`` for an unpriced entry (never a zero)."""
        if spec.input_price_per_million is None or spec.currency is None:
            return None
        price_in = spec.input_price_per_million
        total = (
            Decimal(input_tokens) * price_in
            + Decimal(cache_write_tokens) * price_in * spec.cache_write_multiplier
            + Decimal(cache_read_tokens) * price_in * spec.cache_read_multiplier
        )
        if spec.kind is not ModelKind.EMBEDDINGS:
            total += Decimal(output_tokens) * (spec.output_price_per_million or Decimal(0))
        return cls(total / _MILLION, spec.currency)

    @classmethod
    def reserved(cls, spec: ModelSpec, input_tokens: int, output_tokens: int) -> Cost | None:
        """The most a reservation can cost: nothing cached. ``None`` for an unpriced entry."""
        return cls.of(spec, input_tokens, 0, 0, output_tokens)
