"""A provider quota as an account: requests and tokens per minute, refilled by the clock.

The bucket is clocked, not ticked: nothing refills it in the background. Every read first
credits what the time since the last read earned, at the per-minute caps stretched by the
adaptive throttle. So ``earliest_fit`` can name the instant a shortfall closes from the clock
alone (the deficit over the rate), and admission sleeps until then instead of polling.

The throttle is the bucket's answer to upstream push-back: each unit of backpressure (a 429 is
one, an overload three) stretches the refill window by half a minute, up to ten minutes; every
third success relaxes it by 0.2, faster (0.5 a success) once five minutes pass without
push-back. Only a relaxation wakes admission, since only a relaxation can let anyone in sooner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ..errors import UncorrectableError
from .limiter import AbstractRateLimiter, Replenishment

__all__ = ["TokenBucket", "TokenBucketConfig", "TokenBucketStatus"]

log = logging.getLogger("nucleo_trio.admission.token_bucket")

THROTTLE_INCREMENT = 0.5
THROTTLE_DECREMENT = 0.2
MAX_THROTTLE = 9.0
SUCCESSES_PER_DECREMENT = 3
BASE_WINDOW = 60.0
QUIET_RECOVERY = 5 * 60.0
"""After this long without push-back, every success relaxes the throttle (by 2.5 decrements)."""


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"TokenBucketConfig.{attribute.name} must be a positive int, got {value!r}"
        )


@attrs.frozen
class TokenBucketConfig:
    """The per-minute caps: ``rpm`` requests and ``tpm`` tokens."""

    rpm: int = attrs.field(validator=_positive)
    tpm: int = attrs.field(validator=_positive)


@attrs.frozen
class TokenBucketStatus:
    """A bucket's levels at one instant (TB-25)."""

    rpm: int
    requests: int
    tpm: int
    tokens: int
    at: float

    @property
    def summary(self) -> str:
        """``requests a/R, tokens t/T`` (STS-02)."""
        return f"requests {self.requests}/{self.rpm}, tokens {self.tokens}/{self.tpm}"

    def has_capacity(self, tokens: int) -> bool:
        """Whether one more request of ``tokens`` would fit the levels this status read."""
        return self.requests > 0 and self.tokens >= tokens


class TokenBucket(AbstractRateLimiter):
    """Two-dimensional token bucket (requests and tokens per minute) for one model.

    Amounts are token counts; each amount is also one request. The bucket starts full.
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
        self.model_name = model_name
        self.config = config
        self._clock = clock
        self._tokens = float(config.tpm)
        self._requests = float(config.rpm)
        # Stamped at the first read, so a bucket can be built outside a trio run (a module-level
        # quota); it starts full either way.
        self._stamp: float | None = None
        self.throttle = 0.0
        self._successes = 0
        self._last_backpressure: float | None = None

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        return self.model_name

    @property
    def limiter_category(self) -> str:
        return "token_bucket"

    @property
    def capacity(self) -> int:
        return self.config.tpm

    @property
    def in_use(self) -> int:
        self._refresh()
        return max(0, int(self.config.tpm - self._tokens))

    @property
    def status_indicator(self) -> str | None:
        if self.throttle <= 0:
            return None
        return f"throttle:{1 + self.throttle:.1f}x"

    def replenishment(self) -> Replenishment:
        return Replenishment.TIME

    def status(self) -> TokenBucketStatus:
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
        self._requests = min(float(self.config.rpm), self._requests + share * self.config.rpm)
        self._stamp = now

    # -- the account ------------------------------------------------------------------------------
    def _refuse_alone(self, mine: Sequence[Any]) -> tuple[int, int]:
        tokens, requests = sum(mine), len(mine)
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
        return tokens, requests

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        tokens, requests = self._refuse_alone(mine)
        self._refresh()
        return self._tokens >= tokens + sum(reserved_ahead) and self._requests >= requests + len(
            reserved_ahead
        )

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        self._tokens -= sum(mine)
        self._requests -= len(mine)
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """Refund at once, never above the caps (TB-11)."""
        self._refresh()
        self._tokens = min(float(self.config.tpm), self._tokens + sum(amounts))
        self._requests = min(float(self.config.rpm), self._requests + len(amounts))
        self._capacity_changed()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        tokens: float = sum(mine) + sum(reserved_ahead)
        requests = len(mine) + len(reserved_ahead)
        if tokens > self.config.tpm or requests > self.config.rpm:
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
        self._refresh()  # what was earned so far was earned at the old rate
        self.throttle = min(self.throttle + THROTTLE_INCREMENT * increments, MAX_THROTTLE)
        self._last_backpressure = self._clock()

    def record_429(self) -> None:
        self.record_backpressure(1)

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        """Log the upstream's verdict and tighten by its weight: an
        :class:`~nucleo_trio.errors.UpstreamFailure` carries the push-back its signal counts
        for (a 429 is 1, an overload 3, a transient error 0); anything else counts as a 429."""
        log.warning("%s upstream failure: %s", self.model_name, failure)
        weight = getattr(failure, "backpressure", 1)
        self.record_backpressure(weight if isinstance(weight, int) else 1)

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
        self._requests = min(self._requests, float(config.rpm))
        log.info(
            "Updated rate limits for %s (RPM: %d -> %d, TPM: %d -> %d)",
            self.model_name,
            old.rpm,
            config.rpm,
            old.tpm,
            config.tpm,
        )
        if config.rpm > old.rpm or config.tpm > old.tpm:
            self._capacity_changed()
