"""What a provider said about its rate limits on one call: a frozen reading.

Providers publish their limits on every answer. OpenAI and the servers that copy it send
``x-ratelimit-limit-requests`` and ``x-ratelimit-limit-tokens`` (the per-minute caps of the key),
``x-ratelimit-remaining-*`` (what is left of the current minute) and ``x-ratelimit-reset-*``
(when it refills, as a duration such as ``6m0s``). A :class:`RateLimitInfo` keeps one such
reading, or the bare fact that a call was refused for rate::

    RateLimitInfo.from_headers("gpt-4o", token_limit=30_000, tokens_remaining=29_000, reset="2s")
    RateLimitInfo.rate_limited("gpt-4o")        # a 429: limit hit, nothing remaining, wait 60 s

A CAPACITY reading whose two per-minute figures are both known is what a model entry's token
bucket follows: the models layer hands them to
:meth:`~nucleo_trio.admission.RateLimiterRegistry.update_limits`, so admission paces to what the
provider publishes rather than to what the catalog guessed.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..._clock import trio_now_or_none

__all__ = [
    "RATE_LIMITED_RETRY_AFTER",
    "RateLimitInfo",
    "RateLimitType",
    "parse_int_or_null",
]

RATE_LIMITED_RETRY_AFTER = 60.0
"""The wait a bare "rate limited" reading suggests, in seconds: a minute."""

_NOT_A_NUMBER = "n/a"
_INTEGER = re.compile(r"[+-]?[0-9]+")

_LIMIT_REQUESTS = "x-ratelimit-limit-requests"
_LIMIT_TOKENS = "x-ratelimit-limit-tokens"
_REMAINING_REQUESTS = "x-ratelimit-remaining-requests"
_REMAINING_TOKENS = "x-ratelimit-remaining-tokens"
_RESET_TOKENS = "x-ratelimit-reset-tokens"


class RateLimitType(enum.Enum):
    """What kind of limit a reading describes."""

    CAPACITY = "capacity"
    """The provider's published caps and what is left of them: requests and tokens a minute."""
    ACCELERATION = "acceleration"
    """A limit on how fast usage may grow, which a provider enforces apart from its caps."""
    UNKNOWN = "unknown"
    """The reading does not say (a bare 429)."""


def parse_int_or_null(value: str | None) -> int | None:
    """A header value as an integer, or ``None`` when it holds none.

    The value is trimmed first, so ``" 42 "`` is 42. ``None``, ``""`` and ``"n/a"`` are ``None``,
    and so is anything else that is not a plain decimal integer: a header is the provider's
    diagnostic, and a malformed one must never fail the call it came with, so this never raises.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or text.lower() == _NOT_A_NUMBER or not _INTEGER.fullmatch(text):
        return None
    return int(text)


def _optional_count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"RateLimitInfo.{attribute.name} must be an int >= 0 or None, got {value!r}"
        )


def _optional_seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(
            f"RateLimitInfo.{attribute.name} must be seconds >= 0 or None, got {value!r}"
        )


def _model(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"RateLimitInfo.model must be a non-blank str, got {value!r}")


def _kind(value: RateLimitType | None) -> RateLimitType:
    return RateLimitType.UNKNOWN if value is None else value


# RLI-01 (a bare 429), RLI-02 (from headers), RLI-03 (capacity readings), RLI-04 (parsing).
@attrs.frozen(kw_only=True)
class RateLimitInfo:
    """One reading of a provider's rate limits for ``model``.

    ``token_limit`` / ``request_limit`` are the published per-minute caps and
    ``tokens_remaining`` / ``requests_remaining`` what is left of the current minute; any of them
    is ``None`` when the provider did not say. ``retry_after`` is the wait the reading suggests
    in seconds, ``reset`` the provider's own words for when the window refills, kept as written.
    ``kind`` is what the reading describes (``None`` becomes UNKNOWN), and ``captured_at`` the
    ``trio.current_time()`` of its construction.
    """

    model: str = attrs.field(validator=_model)
    """The model id the reading is about. Must not be blank."""
    was_rate_limited: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )
    """Whether the call was refused for rate (a 429); ``False`` by default."""
    retry_after: float | None = attrs.field(default=None, validator=_optional_seconds)
    """The wait the reading suggests, in seconds (>= 0), or ``None`` when it suggests none."""
    tokens_remaining: int | None = attrs.field(default=None, validator=_optional_count)
    """Tokens left of the current minute, or ``None`` when the provider did not say."""
    token_limit: int | None = attrs.field(default=None, validator=_optional_count)
    """The published cap of tokens a minute, or ``None`` when the provider did not say."""
    requests_remaining: int | None = attrs.field(default=None, validator=_optional_count)
    """Requests left of the current minute, or ``None`` when the provider did not say."""
    request_limit: int | None = attrs.field(default=None, validator=_optional_count)
    """The published cap of requests a minute, or ``None`` when the provider did not say."""
    reset: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    """When the window refills, in the provider's own words (``"6m0s"``), kept as written; ``None``
    when unsaid."""
    kind: RateLimitType = attrs.field(
        default=RateLimitType.UNKNOWN,
        converter=_kind,
        validator=attrs.validators.instance_of(RateLimitType),
    )
    """What the reading describes; ``None`` is taken as UNKNOWN, the default."""
    captured_at: float | None = attrs.field(factory=trio_now_or_none)
    """When the reading was made, in ``trio.current_time()`` seconds; ``None`` when made outside a
    trio run."""

    @property
    def describes_capacity(self) -> bool:
        """Whether this is a CAPACITY reading: the provider's published caps."""
        return self.kind is RateLimitType.CAPACITY

    @property
    def tokens_per_minute(self) -> int:
        """The token cap a minute, 0 when the provider did not publish it."""
        return self.token_limit if self.token_limit is not None else 0

    @property
    def requests_per_minute(self) -> int:
        """The request cap a minute, 0 when the provider did not publish it."""
        return self.request_limit if self.request_limit is not None else 0

    @classmethod
    def rate_limited(cls, model: str) -> RateLimitInfo:
        """The reading of a call refused for rate (a 429), when nothing more is known.

        Nothing remains of tokens or requests, the caps are unknown, the kind is UNKNOWN, and
        the suggested wait is :data:`RATE_LIMITED_RETRY_AFTER` (a minute).
        """
        return cls(
            model=model,
            was_rate_limited=True,
            retry_after=RATE_LIMITED_RETRY_AFTER,
            tokens_remaining=0,
            requests_remaining=0,
        )

    @classmethod
    def from_headers(
        cls,
        model: str,
        token_limit: int | None,
        tokens_remaining: int | None,
        reset: str | None,
    ) -> RateLimitInfo:
        """A CAPACITY reading of the token caps, taken from a successful answer.

        Not rate limited, no suggested wait, and nothing said about requests.
        """
        return cls(
            model=model,
            token_limit=token_limit,
            tokens_remaining=tokens_remaining,
            reset=reset,
            kind=RateLimitType.CAPACITY,
        )

    @classmethod
    def from_response_headers(cls, model: str, headers: Mapping[str, str]) -> RateLimitInfo | None:
        """The CAPACITY reading in a successful answer's ``x-ratelimit-*`` headers.

        Header names are matched without regard to case. A value that is missing, malformed
        or negative counts as unsaid; with none of the four numbers said the answer is ``None``
        (an endpoint that publishes no limits leaves the bucket as the catalog set it).
        """
        lowered = {str(name).lower(): value for name, value in headers.items()}

        def number(name: str) -> int | None:
            parsed = parse_int_or_null(lowered.get(name))
            return parsed if parsed is not None and parsed >= 0 else None

        token_limit = number(_LIMIT_TOKENS)
        tokens_remaining = number(_REMAINING_TOKENS)
        request_limit = number(_LIMIT_REQUESTS)
        requests_remaining = number(_REMAINING_REQUESTS)
        if all(
            n is None for n in (token_limit, tokens_remaining, request_limit, requests_remaining)
        ):
            return None
        reset = lowered.get(_RESET_TOKENS)
        return cls(
            model=model,
            token_limit=token_limit,
            tokens_remaining=tokens_remaining,
            request_limit=request_limit,
            requests_remaining=requests_remaining,
            reset=reset.strip() or None if isinstance(reset, str) else None,
            kind=RateLimitType.CAPACITY,
        )
