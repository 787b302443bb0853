"""Re-run signals (not errors: requests to run the attempt again) and the model's stop reasons."""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping
from typing import ClassVar

import attrs

from ._checks import (
    _describe,
    _reduce_by_state,
    _require_cause,
    _require_optional_str,
    _require_seconds,
    _require_str,
    _walk_chain,
)
from .hierarchy import ExternalServiceError
from .http import HttpErrorResponse


@attrs.frozen
class UpstreamFailure:
    """What an upstream said when it failed: status, service, detail and Retry-After seconds.

    ``backpressure`` is how many units of push-back it counts for an account that throttles
    (a 429 is 1, an overload 3, a transient error 0): a re-run signal's own increment when one
    is in the chain, else 1.
    """

    status: int | None = attrs.field(
        validator=attrs.validators.optional(attrs.validators.instance_of(int))
    )
    """The HTTP status of the failure, or ``None`` when it had none (a lost connection)."""
    service: str | None = attrs.field(
        validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    """The name of the upstream that failed, or ``None`` when not known."""
    detail: str = attrs.field(validator=attrs.validators.instance_of(str))
    """What went wrong, in words (the failing error's message)."""
    retry_after: float | None = attrs.field(default=None)
    """Seconds the upstream asked to wait before the next try, or ``None`` (the default) when
    it named no delay; never negative."""
    backpressure: int = attrs.field(default=1, validator=attrs.validators.instance_of(int))
    """Units of push-back this failure counts for an account that throttles; 1 by default."""

    @retry_after.validator
    def _check_retry_after(self, attribute: attrs.Attribute[float | None], value: object) -> None:
        _require_seconds("retry_after", value, owner="UpstreamFailure")

    @classmethod
    def from_exception(cls, exc: BaseException) -> UpstreamFailure:
        """Read the failure off the first upstream error or signal in ``exc``'s chain.

        The chain is searched as :func:`unwrap` searches it (causes, contexts, group members).
        An :class:`UpstreamRetry` that carries its own failure answers with it; an HTTP error
        gives its status; an :class:`ExternalServiceError` its service and Retry-After. With
        nothing upstream in the chain the answer still exists and describes ``exc``, since a
        limiter told about a failure must always get one.
        """
        signal: UpstreamRetry | None = None
        for link in _walk_chain(exc):
            if isinstance(link, UpstreamRetry):
                if link.failure is not None:
                    return attrs.evolve(link.failure, backpressure=link.backpressure_increment)
                signal = signal or link
            elif isinstance(link, HttpErrorResponse | ExternalServiceError):
                retry_after = link.retry_after if isinstance(link, ExternalServiceError) else None
                if retry_after is None and signal is not None:
                    retry_after = signal.retry_after
                return cls(
                    status=link.status_code if isinstance(link, HttpErrorResponse) else None,
                    service=link.service,
                    detail=str(link),
                    retry_after=retry_after,
                    backpressure=signal.backpressure_increment if signal is not None else 1,
                )
        if signal is not None:
            return cls(
                status=None,
                service=None,
                detail=str(signal),
                retry_after=signal.retry_after,
                backpressure=signal.backpressure_increment,
            )
        return cls(status=None, service=None, detail=_describe(exc), retry_after=None)


class RerunSignal(Exception):
    """Base of the signals asking the dispatcher to run an attempt again; not an error."""

    __reduce__ = _reduce_by_state

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        """``message`` says why a re-run is asked for; ``cause`` becomes ``__cause__``."""
        owner = type(self).__name__
        if type(self) in (RerunSignal, UpstreamRetry):
            raise TypeError(
                f"{owner} is abstract: raise RateLimitRetry, OverloadRetry, TransientErrorRetry, "
                "OutputTruncationRetry or ResponseCorrectionRetry"
            )
        _require_str("message", message, owner=owner)
        _require_cause(cause, owner=owner)
        super().__init__(message)
        if cause is not None:
            self.__cause__ = cause


# The most a single pacing wait may last, and the most the attempt number scales a window.
MAX_PACING_SECONDS = 300.0
"""The longest one pacing wait before a re-run may last, in seconds."""
MAX_PACING_MULTIPLIER = 10
"""The most the attempt number multiplies a re-run signal's jitter window by."""
RETRY_AFTER_JITTER = 0.25
"""After a signal that names its delay (Retry-After), the jitter added on the first re-run: up to
this fraction of the delay, and never less than :data:`RETRY_AFTER_MIN_JITTER` seconds."""
RETRY_AFTER_MIN_JITTER = 1.0
"""The narrowest jitter, in seconds, added to a named delay on the first re-run."""

# Pacing draws come from a generator of our own, so a program that seeds the global `random`
# for its own reasons does not also synchronise every process's retries.
_pacing_rng = random.Random()


class UpstreamRetry(RerunSignal):
    """Raised by a job to re-run its attempt after an upstream signal; see its three kinds."""

    jitter_window: ClassVar[tuple[float, float]]
    """The shortest and longest random wait, in seconds, before the first re-run when the
    upstream named no delay; later re-runs multiply both (see :meth:`pacing_window`)."""
    backpressure_increment: ClassVar[int]
    """Units of push-back this kind counts for an account that throttles: how much the
    account slows down on it (0 when the fault has nothing to do with the caller's rate)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        failure: UpstreamFailure | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``retry_after`` is the upstream's Retry-After in seconds (the re-run then waits that
        long plus jitter instead of the kind's window); ``failure`` is what the upstream said."""
        owner = type(self).__name__
        self.retry_after = _require_seconds("retry_after", retry_after, owner=owner)
        """The delay the upstream named (its Retry-After) in seconds as a float, or ``None``."""
        if failure is not None and not isinstance(failure, UpstreamFailure):
            raise TypeError(
                f"{owner}: failure must be an UpstreamFailure, got {type(failure).__name__}"
            )
        self.failure = failure
        """What the upstream said, when the raiser recorded it; ``None`` otherwise."""
        super().__init__(message, cause=cause)

    @classmethod
    def pacing_window(cls, attempt: int, retry_after: float | None = None) -> tuple[float, float]:
        """The window of the wait before re-run number ``attempt`` (1 for the first re-run).

        Without ``retry_after`` it is the kind's :attr:`jitter_window`; with one (the delay the
        upstream named, in seconds) it is that delay plus jitter: from the delay to the delay
        plus a quarter of it (:data:`RETRY_AFTER_JITTER`), or plus one second
        (:data:`RETRY_AFTER_MIN_JITTER`) when a quarter is less. Either way both edges are
        multiplied by the attempt number, at most tenfold (:data:`MAX_PACING_MULTIPLIER`); the
        wait drawn from it never exceeds :data:`MAX_PACING_SECONDS`.
        """
        if cls is UpstreamRetry:
            raise TypeError(
                "UpstreamRetry has no pacing: the window depends on the kind; ask "
                "RateLimitRetry, OverloadRetry or TransientErrorRetry"
            )
        owner = f"{cls.__name__} pacing"
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise TypeError(f"{owner}: attempt must be an int, got {type(attempt).__name__}")
        if attempt < 1:
            raise ValueError(f"{owner}: attempt counts from 1, got {attempt}")
        named = _require_seconds("retry_after", retry_after, owner=owner)
        if named is None:
            low, high = cls.jitter_window
        else:
            low, high = named, named + max(named * RETRY_AFTER_JITTER, RETRY_AFTER_MIN_JITTER)
        scale = min(attempt, MAX_PACING_MULTIPLIER)
        return low * scale, high * scale

    @classmethod
    def pacing_delay(
        cls, attempt: int, rng: random.Random | None = None, *, retry_after: float | None = None
    ) -> float:
        """Seconds to wait before re-run number ``attempt`` (1 for the first re-run).

        A uniform draw from :meth:`pacing_window` (the kind's jitter window, or ``retry_after``
        plus jitter when the upstream named its delay), both edges multiplied by the attempt
        number, at most tenfold, and never more than 300 s. Jitter spreads the re-runs of many
        jobs hit by one outage, so they do not return in a single burst.
        """
        low, high = cls.pacing_window(attempt, retry_after)
        delay = (rng or _pacing_rng).uniform(low, high)
        return min(delay, MAX_PACING_SECONDS)


class RateLimitRetry(UpstreamRetry):
    """Raised when an upstream says the caller is over its rate (e.g. HTTP 429)."""

    jitter_window = (5.0, 30.0)
    backpressure_increment = 1


class OverloadRetry(UpstreamRetry):
    """Raised when an upstream says it is overloaded (e.g. HTTP 529)."""

    jitter_window = (15.0, 90.0)
    backpressure_increment = 3


class TransientErrorRetry(UpstreamRetry):
    """Raised when an upstream fails in a way that a later try is likely to get past (e.g. 5xx)."""

    jitter_window = (5.0, 30.0)
    backpressure_increment = 0


OVERLOADED_STATUS = 529
"""The HTTP status a provider answers when it is overloaded (Anthropic's, and some gateways')."""


def rerun_for_status(
    error: Exception,
    *,
    status: int,
    service: str,
    endpoint: str,
    body: str = "",
    retry_after: float | None = None,
) -> Exception:
    """The re-run signal an error status asks for, with ``error`` (the HTTP error the status
    maps to) as its cause; ``error`` itself when the status asks for none.

    A 429 is a :class:`RateLimitRetry`; a 529, or a 503 whose ``body`` says it is overloaded,
    an :class:`OverloadRetry`; a 408 or any other 5xx a :class:`TransientErrorRetry`. Each
    carries ``retry_after`` (seconds, as the upstream's Retry-After said) and an
    :class:`UpstreamFailure` for the limiters. A client tells a spent quota apart before it
    asks: that 429 is no re-run.
    """
    kind: type[UpstreamRetry] | None = None
    if status == 429:
        kind = RateLimitRetry
    elif status == OVERLOADED_STATUS or (status == 503 and "overload" in body.lower()):
        kind = OverloadRetry
    elif status == 408 or status >= 500:
        kind = TransientErrorRetry
    if kind is None:
        return error
    failure = UpstreamFailure(
        status=status,
        service=service,
        detail=str(error),
        retry_after=retry_after,
        backpressure=kind.backpressure_increment,
    )
    wait = f", retry after {retry_after:g} s" if retry_after is not None else ""
    return kind(
        f"{service} answered HTTP {status} for {endpoint}{wait}",
        retry_after=retry_after,
        failure=failure,
        cause=error,
    )


def lost_in_transit(message: str, error: ExternalServiceError) -> TransientErrorRetry:
    """A :class:`TransientErrorRetry` for a request or reply lost on the way (no status):
    ``error`` is what the caller is told if the re-run budget runs out, and its service is the
    one the limiters hear about."""
    return TransientErrorRetry(
        message,
        failure=UpstreamFailure(
            status=None,
            service=error.service,
            detail=str(error),
            backpressure=TransientErrorRetry.backpressure_increment,
        ),
        cause=error,
    )


class OutputTruncationRetry(RerunSignal):
    """Raised when a model reply was cut at its output budget, to re-run once with a larger one."""

    def __init__(
        self,
        message: str,
        model: str | None = None,
        escalated_max_tokens: int | None = None,
        *,
        previous_max_tokens: int | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``model`` is the model that truncated; the budgets are output tokens before and after."""
        owner = type(self).__name__
        self.model = _require_optional_str("model", model, owner=owner)
        """The model whose reply was cut, or ``None`` when not given."""
        for name, value in (
            ("escalated_max_tokens", escalated_max_tokens),
            ("previous_max_tokens", previous_max_tokens),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
        self.escalated_max_tokens = escalated_max_tokens
        """The output budget for the re-run, in tokens, or ``None`` when not given."""
        self.previous_max_tokens = previous_max_tokens
        """The output budget the cut reply had, in tokens, or ``None`` when not given."""
        super().__init__(message, cause=cause)


class ResponseCorrectionRetry(RerunSignal):
    """Raised when a model reply needs correcting, to re-run the attempt with the feedback."""

    def __init__(
        self,
        message: str,
        feedback: str | None = None,
        *,
        model: str | None = None,
        attempt: int | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``feedback`` is what the model is told; ``attempt`` counts corrections from 1."""
        owner = type(self).__name__
        self.feedback = _require_optional_str("feedback", feedback, owner=owner)
        """What the model is told about its reply on the re-run, or ``None``."""
        self.model = _require_optional_str("model", model, owner=owner)
        """The model whose reply needs correcting, or ``None`` when not given."""
        if attempt is not None and (
            isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1
        ):
            raise ValueError(f"{owner}: attempt must be an int >= 1, got {attempt!r}")
        self.attempt = attempt
        """Which correction this is, counting from 1, or ``None`` when not given."""
        super().__init__(message, cause=cause)


# --------------------------------------------------------------------------------------------
# Stop reasons
# --------------------------------------------------------------------------------------------


class LLMStopReason(enum.Enum):
    """Why a model stopped generating, normalised across providers."""

    END_TURN = "end_turn"
    """The model finished its reply (providers' ``end_turn``, ``stop``, ``completed``)."""
    MAX_TOKENS = "max_tokens"
    """The reply was cut at its output budget (``max_tokens``, ``length``)."""
    STOP_SEQUENCE = "stop_sequence"
    """The model wrote one of the request's stop sequences."""
    TOOL_USE = "tool_use"
    """The model stopped to call a tool (``tool_use``, ``tool_calls``)."""
    CONTENT_FILTERED = "content_filtered"
    """The provider withheld or ended the reply (``content_filter``, ``guardrail_intervened``,
    ``refusal``)."""
    UNKNOWN = "unknown"
    """Any reason not listed above, or none given."""

    @classmethod
    def from_provider(cls, value: str | None) -> LLMStopReason:
        """Map a provider's stop/finish reason, case-insensitively; anything unknown is UNKNOWN.

        It never raises: a provider adding a new reason must not fail a call that succeeded.
        """
        if not isinstance(value, str):
            return cls.UNKNOWN
        return _STOP_REASONS.get(value.strip().lower(), cls.UNKNOWN)


_STOP_REASONS: Mapping[str, LLMStopReason] = {
    "end_turn": LLMStopReason.END_TURN,
    "stop": LLMStopReason.END_TURN,
    "completed": LLMStopReason.END_TURN,
    "max_tokens": LLMStopReason.MAX_TOKENS,
    "length": LLMStopReason.MAX_TOKENS,
    "stop_sequence": LLMStopReason.STOP_SEQUENCE,
    "tool_use": LLMStopReason.TOOL_USE,
    "tool_calls": LLMStopReason.TOOL_USE,
    "content_filter": LLMStopReason.CONTENT_FILTERED,
    "guardrail_intervened": LLMStopReason.CONTENT_FILTERED,
    "refusal": LLMStopReason.CONTENT_FILTERED,
}
