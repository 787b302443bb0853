"""A provider quota as an account: requests and tokens per minute, refilled by the clock.

The bucket is clocked, not ticked: nothing refills it in the background. Every read first
credits what the time since the last read earned, at the per-minute caps stretched by the
adaptive throttle. So ``earliest_fit`` can name the instant a shortfall closes from the clock
alone (the deficit over the rate), and admission sleeps until then instead of polling.

The throttle is the bucket's answer to upstream push-back: each unit of backpressure (a 429 is
one, an overload three) stretches the refill window by half a minute, up to ten minutes; every
third success relaxes it by 0.2, faster (0.5 a success) once five minutes pass without
push-back. Only a relaxation wakes admission, since only a relaxation can let anyone in sooner.

A bucket sized per minute starts full and refills to full, so it would let a whole minute's
requests through in the first second; a provider that enforces its per-minute quota over shorter
periods answers that with 429s. The optional ``burst`` bound caps how many requests the bucket
holds at once: it starts with ``min(rpm, burst)`` and never refills above that, so any span of
``T`` seconds holds at most ``burst + rpm * T / 60`` grants, while the sustained rate stays
``rpm``. ``burst=None`` (the default) leaves the cap at ``rpm``. Tokens keep their per-minute
cap either way.

Amounts are token counts: finite, non-negative numbers. Anything else (``None``, a bool, NaN,
an infinity, a negative) is refused by name when the demand is built (``account_for``) and
again by every question, so a negative amount can never credit the bucket and a NaN can never
sit in its level.
"""

from __future__ import annotations

import decimal
import logging
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ..errors import UncorrectableError
from .demand import amount_problem
from .limiter import AbstractRateLimiter, LimiterIdentity, Replenishment

__all__ = ["TokenBucket", "TokenBucketConfig", "TokenBucketStatus"]

log = logging.getLogger("nucleo_trio.admission.token_bucket")

THROTTLE_INCREMENT = 0.5
"""Throttle added per unit of push-back (a 429 is one unit): half a minute more per refill."""
THROTTLE_DECREMENT = 0.2
"""Throttle taken off per relaxation."""
MAX_THROTTLE = 9.0
"""The highest throttle: a refill window of ten minutes."""
SUCCESSES_PER_DECREMENT = 3
"""Successes per relaxation while push-back is recent."""
BASE_WINDOW = 60.0
"""Seconds the per-minute caps refill over when nothing pushed back."""
QUIET_RECOVERY = 5 * 60.0
"""After this long without push-back, every success relaxes the throttle (by 2.5 decrements)."""

_INF = math.inf


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"TokenBucketConfig.{attribute.name} must be a positive int, got {value!r}"
        )


def _burst(instance: object, attribute: attrs.Attribute[float | None], value: object) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 1
    ):
        raise ValueError(
            "TokenBucketConfig.burst must be None or a finite number of requests >= 1, "
            f"got {value!r}"
        )


@attrs.frozen
class TokenBucketConfig:
    """The per-minute caps: ``rpm`` requests and ``tpm`` tokens.

    ``burst``, when set, is the most requests the bucket holds at once (it starts with that many
    and refills no higher), so any ``T`` seconds hold at most ``burst + rpm * T / 60`` grants;
    ``None`` means ``rpm``, a whole minute's requests at once.
    """

    rpm: int = attrs.field(validator=_positive)
    """Requests per minute, a positive ``int`` (else :class:`ValueError`)."""
    tpm: int = attrs.field(validator=_positive)
    """Tokens per minute, a positive ``int`` (else :class:`ValueError`): the bucket's
    capacity."""
    burst: float | None = attrs.field(default=None, validator=_burst, kw_only=True)
    """The most requests held at once, a finite number of at least 1, or ``None`` (the
    default) for ``rpm``; keyword-only."""

    @property
    def request_cap(self) -> float:
        """The most requests held at once: ``rpm``, or ``burst`` when that is lower."""
        return float(self.rpm if self.burst is None else min(self.rpm, self.burst))


@attrs.frozen
class TokenBucketStatus:
    """A bucket's levels at one instant, refilled from the clock before they were read."""

    rpm: int
    """The requests-per-minute cap."""
    requests: int
    """Requests left in the bucket, rounded down."""
    tpm: int
    """The tokens-per-minute cap."""
    tokens: int
    """Tokens left in the bucket, rounded down."""
    at: float
    """The :func:`trio.current_time` instant the levels were read."""

    @property
    def summary(self) -> str:
        """``requests a/R, tokens t/T``."""
        return f"requests {self.requests}/{self.rpm}, tokens {self.tokens}/{self.tpm}"

    def has_capacity(self, tokens: int) -> bool:
        """Whether one more request of ``tokens`` would fit the levels this status read."""
        return self.requests > 0 and self.tokens >= tokens


class TokenBucket(AbstractRateLimiter):
    """Two-dimensional token bucket (requests and tokens per minute) for one model.

    Amounts are token counts; each amount is also one request. The bucket starts full (with
    ``config.burst`` requests when that is lower than ``rpm``). ``model_name`` must be a
    non-blank ``str`` (else :class:`ValueError`) and ``config`` a :class:`TokenBucketConfig`
    (else :class:`TypeError`); ``clock`` is for tests.
    """

    def __init__(
        self,
        model_name: str,
        config: TokenBucketConfig,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if not isinstance(model_name, str) or not model_name.strip():
            raise ValueError(f"TokenBucket needs a model name, got {model_name!r}")
        if not isinstance(config, TokenBucketConfig):
            raise TypeError(f"TokenBucket needs a TokenBucketConfig, got {type(config).__name__}")
        if not callable(clock):
            raise TypeError(f"TokenBucket: clock must be callable, got {type(clock).__name__}")
        self.model_name = model_name
        """The model the bucket meters; also its :attr:`limiter_name`."""
        self.config = config
        """The caps in force; :meth:`set_config` replaces them."""
        self._clock = clock
        self._tokens = float(config.tpm)
        self._requests = config.request_cap
        # Stamped at the first read, so a bucket can be built outside a trio run (a module-level
        # quota); it starts full either way.
        self._stamp: float | None = None
        self.throttle = 0.0
        """The adaptive throttle, from 0 to 9.0: the caps refill over ``60 * (1 + throttle)``
        seconds instead of a minute."""
        self._successes = 0
        self._last_backpressure: float | None = None

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        """:attr:`model_name`."""
        return self.model_name

    @property
    def limiter_category(self) -> str:
        """Always ``"token_bucket"``."""
        return "token_bucket"

    @property
    def capacity(self) -> int:
        """The tokens-per-minute cap, ``config.tpm``."""
        return self.config.tpm

    @property
    def in_use(self) -> int:
        """Tokens spent and not yet refilled (``tpm`` less the level, rounded down), after
        refilling from the clock."""
        self._refresh()
        return max(0, int(self.config.tpm - self._tokens))

    @property
    def status_indicator(self) -> str | None:
        """``"throttle:<1 + throttle>x"`` (one decimal) while throttled, else ``None``."""
        if self.throttle <= 0:
            return None
        return f"throttle:{1 + self.throttle:.1f}x"

    def replenishment(self) -> Replenishment:
        """:attr:`~nucleo_trio.admission.Replenishment.TIME`: spent tokens come back with the
        clock, never at release; a roll-back refunds them at once."""
        return Replenishment.TIME

    def status(self) -> TokenBucketStatus:
        """The levels now, refilled from the clock, as a :class:`TokenBucketStatus`."""
        self._refresh()
        return TokenBucketStatus(
            self.config.rpm, int(self._requests), self.config.tpm, int(self._tokens), self._clock()
        )

    # -- the clock --------------------------------------------------------------------------------
    @property
    def _window(self) -> float:
        return BASE_WINDOW * (1 + self.throttle)

    def _refresh(self) -> None:
        now = self._clock()
        if self._stamp is None:
            self._stamp = now
            return
        elapsed = now - self._stamp
        if elapsed <= 0:
            return
        share = elapsed / self._window
        self._tokens = min(float(self.config.tpm), self._tokens + share * self.config.tpm)
        self._requests = min(self.config.request_cap, self._requests + share * self.config.rpm)
        self._stamp = now

    # -- the account ------------------------------------------------------------------------------
    def account_for(self, amount: Any) -> LimiterIdentity:
        """The bucket itself, for a token count; anything else is refused here, when the demand
        is built, naming the bucket and the value."""
        kind = type(amount)
        if not ((kind is int and amount >= 0) or (kind is float and 0.0 <= amount < _INF)):
            self._token_count(amount, "account_for")
        return self

    def _token_sum(self, amounts: Sequence[Any], where: str) -> int | float:
        """The tokens ``amounts`` add up to, refusing any amount that is not a token count."""
        total: int | float = 0
        for amount in amounts:
            kind = type(amount)
            if (kind is int and amount >= 0) or (kind is float and 0.0 <= amount < _INF):
                total += amount
            else:
                total += self._token_count(amount, where)
        return total

    def _token_count(self, amount: Any, where: str) -> float:
        problem = amount_problem(amount)
        if problem is None and not isinstance(amount, numbers.Real | decimal.Decimal):
            problem = (TypeError, "not a number")
        if problem is not None:
            error, reason = problem
            raise error(
                f"{self.model_name}: {where}: {amount!r} is not a token count "
                f"({type(amount).__name__}: {reason}); a token bucket's amounts are finite, "
                "non-negative numbers"
            )
        return float(amount)

    def _refuse_alone(self, mine: Sequence[Any]) -> tuple[int | float, int]:
        tokens, requests = self._token_sum(mine, "fits/try_take"), len(mine)
        if tokens > self.config.tpm:
            raise UncorrectableError(
                f"{self.model_name}: {tokens} tokens exceeds the budget of {self.config.tpm} "
                "tokens per minute; ask for fewer tokens or pick a model with a larger quota"
            )
        if requests > self.config.rpm:
            raise UncorrectableError(
                f"{self.model_name}: {requests} requests exceeds the budget of "
                f"{self.config.rpm} requests per minute"
            )
        if requests > self.config.request_cap:
            raise UncorrectableError(
                f"{self.model_name}: {requests} requests at once exceeds the burst bound of "
                f"{self.config.burst:g} requests"
            )
        return tokens, requests

    def _fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> int | float | None:
        """The tokens ``mine`` takes when it fits now beside ``reserved_ahead``, else None."""
        tokens, requests = self._refuse_alone(mine)
        reserved = self._token_sum(reserved_ahead, "the reservation ahead")
        self._refresh()
        if self._tokens >= tokens + reserved and self._requests >= requests + len(reserved_ahead):
            return tokens
        return None

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Whether the bucket, refilled from the clock, holds the tokens of ``mine`` and
        ``reserved_ahead`` together, and one request for each amount.

        Refuses with :class:`~nucleo_trio.errors.UncorrectableError` an ask of more tokens
        than ``tpm``, more requests than ``rpm`` or more requests at once than the burst;
        an amount that is not a token count raises :class:`TypeError` or :class:`ValueError`.
        """
        return self._fits(mine, reserved_ahead) is not None

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The check of :meth:`fits`, then the debit of the tokens and one request per
        amount."""
        tokens = self._fits(mine, reserved_ahead)
        if tokens is None:
            return False
        self._tokens -= tokens
        self._requests -= len(mine)
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """Refund the tokens and one request per amount at once, never above the caps, and
        run the wake. Only token counts come back: a negative, NaN or infinite amount is
        refused, never credited."""
        tokens = self._token_sum(amounts, "give")
        self._refresh()
        self._tokens = min(float(self.config.tpm), self._tokens + tokens)
        self._requests = min(self.config.request_cap, self._requests + len(amounts))
        self._capacity_changed()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """The instant the refill closes the larger of the token and request shortfalls (the
        deficit over the rate, the throttle included), rounded up to the millisecond; now
        when nothing is short; ``None`` when ``mine`` and the reservation together exceed a
        cap, which only a larger cap can help."""
        tokens: float = self._token_sum(mine, "earliest_fit")
        tokens += self._token_sum(reserved_ahead, "the reservation ahead")
        requests = len(mine) + len(reserved_ahead)
        if tokens > self.config.tpm or requests > self.config.request_cap:
            return None  # only a larger cap can help: an event
        self._refresh()
        now: float = self._clock()
        token_deficit = max(0.0, tokens - self._tokens)
        request_deficit = max(0.0, requests - self._requests)
        if not token_deficit and not request_deficit:
            return now
        share = max(token_deficit / self.config.tpm, request_deficit / self.config.rpm)
        # Rounded up to the whole millisecond, so the instant never falls short of the fit.
        return now + math.ceil(share * self._window * 1000) / 1000

    # -- upstream signals -------------------------------------------------------------------------
    def record_backpressure(self, increments: int) -> None:
        """Tighten by ``increments`` units of push-back (a 429 is 1, an overload 3); no wake."""
        if isinstance(increments, bool) or not isinstance(increments, int) or increments < 0:
            raise ValueError(
                f"{self.model_name}: record_backpressure takes a non-negative int, "
                f"got {increments!r}"
            )
        self._refresh()  # what was earned so far was earned at the old rate
        self.throttle = min(self.throttle + THROTTLE_INCREMENT * increments, MAX_THROTTLE)
        self._last_backpressure = self._clock()

    def record_429(self) -> None:
        """Count one 429: ``record_backpressure(1)``."""
        self.record_backpressure(1)

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        """Log the upstream's verdict and tighten by its weight: an
        :class:`~nucleo_trio.errors.UpstreamFailure` carries the push-back its signal counts
        for (a 429 is 1, an overload 3, a transient error 0); anything else counts as a 429."""
        log.warning("%s upstream failure: %s", self.model_name, failure)
        weight = getattr(failure, "backpressure", 1)
        valid = isinstance(weight, int) and not isinstance(weight, bool) and weight >= 0
        self.record_backpressure(weight if valid else 1)

    def record_success(self) -> None:
        """Count a success; every third relaxes the throttle, each one after quiet minutes."""
        if self.throttle <= 0:
            return
        self._refresh()
        self._successes += 1
        now = self._clock()
        quiet = self._last_backpressure is None or now - self._last_backpressure >= QUIET_RECOVERY
        if quiet:
            step = THROTTLE_DECREMENT * 2.5
        elif self._successes % SUCCESSES_PER_DECREMENT == 0:
            step = THROTTLE_DECREMENT
        else:
            return
        self._successes = 0
        before = self.throttle
        self.throttle = max(0.0, self.throttle - step)
        if self.throttle < before:
            self._capacity_changed()  # only a relaxation can let anyone in sooner

    def on_success(self, input: Any = None) -> None:
        """Count a success (:meth:`record_success`); ``input`` is not read."""
        self.record_success()

    # -- configuration ----------------------------------------------------------------------------
    def set_config(self, config: TokenBucketConfig) -> None:
        """Swap the caps in place, keeping the throttle; a larger cap wakes admission."""
        old = self.config
        if config == old:
            return
        self._refresh()
        self.config = config
        self._tokens = min(self._tokens, float(config.tpm))
        self._requests = min(self._requests, config.request_cap)
        log.info(
            "Updated rate limits for %s (RPM: %d -> %d, TPM: %d -> %d)",
            self.model_name,
            old.rpm,
            config.rpm,
            old.tpm,
            config.tpm,
        )
        if config.rpm > old.rpm or config.tpm > old.tpm or config.request_cap > old.request_cap:
            self._capacity_changed()
