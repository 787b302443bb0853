"""The exception hierarchy: what a failure says to the log, and what it says to the model.

Every failure that can reach a language model is an :class:`LLMReadableError`. It carries two
texts: ``str(e)`` is the technical message for logs and operators, and :attr:`~LLMReadableError.llm_message`
is the text a model reads when a tool call fails. :meth:`~LLMReadableError.explain_to_llm` adds one
line telling the model what to do about it, and that line depends only on which branch the
error sits in:

* :class:`CorrectableError`: the model caused it and can fix it (a bad argument, an unknown id,
  a guardrail refusal, a reply that did not parse). "You can retry with different parameters."
* :class:`UncorrectableError`: nothing the model changes will help (an upstream outage, missing
  credentials, a timeout, a cancellation). "Consider an alternative approach."

The tree is closed: every LLM-readable class extends exactly one of the two branches, and a class
that tries to be both, neither, or to flip its branch's ``correctable`` is refused when it is
defined. The seed's checked/unchecked split does not exist in Python, so it collapses into this
one tree.

Outside the tree sit the failures that are never addressed to a model
(:class:`DependencyFailedError`, :class:`JobDeadlockError`, :class:`ModelResolutionError`) and the
re-run signals (:class:`RerunSignal` and its kinds). A re-run signal is not an error at all: it
asks the dispatcher to run the attempt again, so the translation helpers (:func:`unwrap`,
:func:`wrap_with_context`) re-raise it instead of converting it, and a catch-all in a job cannot
turn a rate limit into a tool failure by accident.

Errors from below are translated at the boundary: :func:`http_error_from_status` turns an HTTP
status into the class that says what to do about it, :func:`unwrap` digs the LLM-readable failure
out of a wrapper chain (or an ``ExceptionGroup`` from a nursery), and :func:`wrap_with_context`
re-frames a failure in terms of the tool parameter that caused it.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeAlias

import attrs
import trio

__all__ = [
    "CORRECTABLE_SUFFIX",
    "MAX_PACING_MULTIPLIER",
    "MAX_PACING_SECONDS",
    "UNCORRECTABLE_SUFFIX",
    "add_suppressed",
    "CancellationRequested",
    "ConfigError",
    "ContextOverflowError",
    "CorrectableError",
    "DependencyFailedError",
    "ExternalServiceError",
    "GuardrailError",
    "Http400Error",
    "Http401Error",
    "Http403Error",
    "Http404Error",
    "Http413Error",
    "Http422Error",
    "Http429Error",
    "Http500Error",
    "Http502Error",
    "Http503Error",
    "HttpError",
    "HttpErrorDetail",
    "HttpErrorResponse",
    "HttpUnmappedStatusError",
    "InvalidInputError",
    "JobCancelledError",
    "JobDeadlockError",
    "JobTimeoutError",
    "JsonParseError",
    "LLMReadableError",
    "LLMStopReason",
    "ModelNotFoundError",
    "ModelResolutionError",
    "NucleoSystemError",
    "OutputTruncationRetry",
    "OverloadRetry",
    "PermissionDeniedError",
    "PromptNotFoundError",
    "ProviderRefusalError",
    "QuotaExhaustedError",
    "RateLimitRetry",
    "RerunSignal",
    "ResourceNotFoundError",
    "ResponseCorrectionRetry",
    "ResponseValidationError",
    "SpendCapExceededError",
    "TokenEstimateExceedsLimitError",
    "TransientErrorRetry",
    "UnauthorizedError",
    "UncorrectableError",
    "UpstreamFailure",
    "UpstreamRetry",
    "UpstreamThrottleError",
    "http_error_from_status",
    "is_fatal_crash",
    "log_failure",
    "suppressed",
    "unwrap",
    "unwrap_runtime",
    "wrap_with_context",
]

CORRECTABLE_SUFFIX = (
    "[This error may be correctable - you can retry with different parameters "
    "or try a different approach]"
)
"""The line :meth:`LLMReadableError.explain_to_llm` adds after a correctable error's message."""
UNCORRECTABLE_SUFFIX = "[This error is not correctable - consider an alternative approach]"
"""The line :meth:`LLMReadableError.explain_to_llm` adds after an uncorrectable error's message."""

# How much of an upstream response body or a parameter value goes into a message. A model reads
# these texts inside its context window; a 2 MB HTML error page would crowd out the task.
_PREVIEW_CHARS = 500


# --------------------------------------------------------------------------------------------
# Argument checks shared by the constructors
# --------------------------------------------------------------------------------------------


def _require_str(name: str, value: object, *, owner: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {name} must be a str, got {type(value).__name__}")
    return value


def _require_name(name: str, value: object, *, owner: str) -> str:
    text = _require_str(name, value, owner=owner)
    if not text.strip():
        raise ValueError(f"{owner}: {name} must not be blank")
    return text


def _require_optional_str(name: str, value: object, *, owner: str) -> str | None:
    return None if value is None else _require_str(name, value, owner=owner)


def _require_cause(value: object, *, owner: str) -> BaseException | None:
    if value is not None and not isinstance(value, BaseException):
        raise TypeError(f"{owner}: cause must be an exception, got {type(value).__name__}")
    return value


def _require_seconds(name: str, value: object, *, owner: str) -> float | None:
    """A non-negative, finite number of seconds, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}: {name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}: {name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _preview(text: str) -> str:
    if len(text) <= _PREVIEW_CHARS:
        return text
    return text[:_PREVIEW_CHARS] + f"... ({len(text) - _PREVIEW_CHARS} more characters)"


def _describe(exc: BaseException) -> str:
    """`ValueError: bad thing`, or just the class name when the exception has no message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reduce_by_state(self: BaseException) -> tuple[Any, ...]:
    # The constructors below take keyword-only and derived arguments, so the default
    # `BaseException.__reduce__` (which replays `self.args` into `__init__`) cannot rebuild them.
    # Restoring args and attributes directly keeps every error picklable across processes.
    return (_restore_exception, (type(self), self.args, dict(self.__dict__)))


def _restore_exception(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> BaseException:
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


# --------------------------------------------------------------------------------------------
# The LLM-readable tree
# --------------------------------------------------------------------------------------------


class LLMReadableError(Exception):
    """Base of every failure a model may read; raise one of its two branches, never this class."""

    # Set by the two branches; every other class inherits its branch's value unchanged.
    correctable: ClassVar[bool]

    __reduce__ = _reduce_by_state

    def __init__(
        self,
        message: str,
        *,
        llm_message: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """Build the error from its technical message.

        ``llm_message`` is the text for the model when it should differ from the technical one
        (it defaults to ``message``); ``cause`` becomes ``__cause__``, as ``raise ... from cause``
        would set it.
        """
        owner = type(self).__name__
        if type(self) is LLMReadableError:
            raise TypeError(
                "LLMReadableError is the abstract root: raise CorrectableError, "
                "UncorrectableError or one of their subclasses"
            )
        _require_str("message", message, owner=owner)
        _require_optional_str("llm_message", llm_message, owner=owner)
        _require_cause(cause, owner=owner)
        super().__init__(message)
        self._llm_message = message if llm_message is None else llm_message
        if cause is not None:
            self.__cause__ = cause

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_is_branch" in cls.__dict__:
            return
        branches = [
            c for c in cls.__mro__ if "_is_branch" in c.__dict__ and issubclass(c, LLMReadableError)
        ]
        if len(branches) != 1:
            raise TypeError(
                f"{cls.__qualname__} must extend exactly one of CorrectableError and "
                f"UncorrectableError (it extends {len(branches)})"
            )
        if cls.correctable is not branches[0].correctable:
            raise TypeError(
                f"{cls.__qualname__} cannot set correctable={cls.correctable}: "
                f"it sits under {branches[0].__name__}"
            )

    @property
    def llm_message(self) -> str:
        """The text a model reads when this error is the result of its tool call."""
        return self._llm_message

    def explain_to_llm(self) -> str:
        """The model-facing message followed by one line saying whether a retry can help."""
        suffix = CORRECTABLE_SUFFIX if self.correctable else UNCORRECTABLE_SUFFIX
        return f"{self.llm_message}\n{suffix}"


class CorrectableError(LLMReadableError):
    """Raised when the model caused the failure and can fix it by changing what it asked for."""

    _is_branch: ClassVar[bool] = True
    correctable: ClassVar[bool] = True


class UncorrectableError(LLMReadableError):
    """Raised when nothing the model changes in its request can make the operation succeed."""

    _is_branch: ClassVar[bool] = True
    correctable: ClassVar[bool] = False


# ---- correctable branch ------------------------------------------------------------------------


class InvalidInputError(CorrectableError):
    """Raised when a tool argument or request is malformed, out of range or refused as invalid."""


class ResourceNotFoundError(CorrectableError):
    """Raised when a fetch by id finds nothing (an empty search is a valid answer, not this)."""


class GuardrailError(CorrectableError):
    """Raised when a guardrail refuses an input, an output or a submission."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        """``message`` is the refusal itself; the model reads it after "Guardrail violation: "."""
        _require_str("message", message, owner=type(self).__name__)
        super().__init__(message, llm_message=f"Guardrail violation: {message}", cause=cause)


class JsonParseError(CorrectableError):
    """Raised when a model's reply cannot be parsed as the JSON the caller expects."""

    def __init__(
        self, reason: str, expected_shape: str, *, cause: BaseException | None = None
    ) -> None:
        """``reason`` is the parser's complaint; ``expected_shape`` describes the JSON wanted."""
        owner = type(self).__name__
        self.reason = _require_str("reason", reason, owner=owner)
        self.expected_shape = _require_name("expected_shape", expected_shape, owner=owner)
        super().__init__(
            f"Reply is not valid JSON: {reason}",
            llm_message=(
                f"Your reply could not be parsed as JSON ({reason}). "
                f"Reply with JSON of this shape:\n{expected_shape}"
            ),
            cause=cause,
        )


class ResponseValidationError(CorrectableError):
    """Raised when a parsed reply still leaves required fields empty or invalid."""

    def __init__(self, failures: Mapping[str, str], *, cause: BaseException | None = None) -> None:
        """``failures`` maps each failed field (a name or a path) to what is wrong with it.

        The message lists every field on its own line, so a model fixes them all in one go
        instead of one per correction round.
        """
        owner = type(self).__name__
        if not isinstance(failures, Mapping):
            raise TypeError(
                f"{owner}: failures must map field -> problem, got {type(failures).__name__}"
            )
        if not failures:
            raise ValueError(f"{owner}: failures is empty; a reply with no failed field is valid")
        for field, problem in failures.items():
            _require_name("field name", field, owner=owner)
            _require_str(f"problem of field {field!r}", problem, owner=owner)
        # A tuple, not a dict: the error is a value once raised, and a shared dict could change.
        self.failures: tuple[tuple[str, str], ...] = tuple(failures.items())
        lines = "\n".join(f"- {field}: {problem}" for field, problem in self.failures)
        super().__init__(
            f"The reply failed validation on {len(self.failures)} field(s):\n{lines}",
            cause=cause,
        )

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the failed fields, in the order given."""
        return tuple(field for field, _ in self.failures)


# ---- uncorrectable branch ------------------------------------------------------------------


class ExternalServiceError(UncorrectableError):
    """Raised when a service the job depends on fails or cannot be reached."""

    def __init__(
        self,
        message: str,
        *,
        service: str | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``service`` names the upstream; ``retry_after`` is its Retry-After, in seconds."""
        owner = type(self).__name__
        self._service = _require_optional_str("service", service, owner=owner)
        self.retry_after = _require_seconds("retry_after", retry_after, owner=owner)
        super().__init__(message, cause=cause)

    @property
    def service(self) -> str | None:
        """The upstream service that failed, when the raiser said."""
        return self._service


class UpstreamThrottleError(ExternalServiceError):
    """Raised when an upstream refuses the call because the caller is over its rate."""


class UnauthorizedError(UncorrectableError):
    """Raised when an upstream refuses the caller's credentials."""


class PermissionDeniedError(UncorrectableError):
    """Raised when the caller is known but not allowed to perform the operation."""


class NucleoSystemError(UncorrectableError):
    """Raised when the runtime itself fails, or a failure from outside nucleo_trio must reach a model."""

    def __init__(self, component: str, technical: str, cause: BaseException | None = None) -> None:
        """``component`` names where it broke; ``technical`` is the detail, kept from the model."""
        owner = type(self).__name__
        self.component = _require_name("component", component, owner=owner)
        self.technical = _require_str("technical", technical, owner=owner)
        super().__init__(
            f"System error in {component}: {technical}",
            llm_message=(
                f"A system error occurred in {component}. The operation could not be completed."
            ),
            cause=cause,
        )


class JobCancelledError(UncorrectableError):
    """Raised to a job's caller when the job was cancelled before it finished."""

    def __init__(self, message: str | None = None, *, cause: BaseException | None = None) -> None:
        """``message`` says why (e.g. "Cancelled while queued"); it defaults to the cause's reason."""
        owner = type(self).__name__
        _require_optional_str("message", message, owner=owner)
        reason = message
        if reason is None and isinstance(cause, CancellationRequested):
            reason = cause.reason
        super().__init__(
            message or (f"Job cancelled: {reason}" if reason else "Job cancelled"),
            llm_message=(
                f"The job was cancelled before it finished: {reason}"
                if reason
                else "The job was cancelled before it finished."
            ),
            cause=cause,
        )


class CancellationRequested(UncorrectableError):
    """Raised inside a job by ``check_cancellation()`` once the job has been asked to stop."""

    def __init__(self, reason: str | None = None, *, cause: BaseException | None = None) -> None:
        """``reason`` is the canceller's own words, passed on to the log and the model."""
        owner = type(self).__name__
        self.reason = _require_optional_str("reason", reason, owner=owner)
        super().__init__(
            f"Job cancelled: {reason}" if reason else "Job cancelled",
            llm_message=(
                f"The job was cancelled: {reason}" if reason else "The job was cancelled."
            ),
            cause=cause,
        )


class JobTimeoutError(UncorrectableError):
    """Raised to a job's caller when the job ran past its timeout and was stopped."""

    def __init__(self, timeout_seconds: float, cause: BaseException | None = None) -> None:
        """``timeout_seconds`` is the budget the job exceeded; ``cause`` is its own casualty."""
        owner = type(self).__name__
        seconds = _require_seconds("timeout_seconds", timeout_seconds, owner=owner)
        if not seconds:
            raise ValueError(f"{owner}: timeout_seconds must be > 0, got {timeout_seconds!r}")
        self.timeout_seconds = seconds
        super().__init__(
            f"Job timed out after {seconds:g} s",
            llm_message=(
                f"The job exceeded its time budget of {seconds:g} seconds and was stopped."
            ),
            cause=cause,
        )


class TokenEstimateExceedsLimitError(UncorrectableError):
    """Raised before a model call whose estimated prompt would not fit the model's context."""

    def __init__(
        self,
        estimate: int,
        limit: int,
        *,
        model: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``estimate`` and ``limit`` are token counts; ``model`` names whose limit it is."""
        owner = type(self).__name__
        for name, value in (("estimate", estimate), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__}")
        if limit <= 0:
            raise ValueError(f"{owner}: limit must be > 0, got {limit}")
        if estimate <= limit:
            raise ValueError(f"{owner}: estimate {estimate} does not exceed the limit {limit}")
        self.estimate = estimate
        self.limit = limit
        self.model = _require_optional_str("model", model, owner=owner)
        where = f" of {model}" if model else ""
        super().__init__(
            f"Token estimate {estimate} exceeds the limit{where} of {limit} by "
            f"{self.overflow} tokens ({self.ratio:.2f}x the limit)",
            cause=cause,
        )

    @property
    def overflow(self) -> int:
        """How many tokens too many: ``estimate - limit``."""
        return self.estimate - self.limit

    @property
    def ratio(self) -> float:
        """``estimate / limit``: compacting the prompt by this factor would just fit."""
        return self.estimate / self.limit


class ContextOverflowError(UncorrectableError):
    """Raised when a prompt still exceeds the model's context after compaction."""


class PromptNotFoundError(UncorrectableError):
    """Raised when a named prompt template does not exist."""


class QuotaExhaustedError(UncorrectableError):
    """Raised when a provider quota is spent; it is never retried, since waiting does not refill it."""


class SpendCapExceededError(UncorrectableError):
    """Raised by a spend gate when new work would push a workflow past its spending cap."""


class ModelNotFoundError(UncorrectableError):
    """Raised when a model id is not in the catalog."""


class ProviderRefusalError(UncorrectableError):
    """Raised when a model provider refuses to serve the request."""


# --------------------------------------------------------------------------------------------
# HTTP statuses
# --------------------------------------------------------------------------------------------


def _status_code(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"HttpErrorDetail: status_code must be an int, got {value!r}")
    if not 100 <= value <= 599:
        raise ValueError(f"HttpErrorDetail: status_code must be in 100..599, got {value}")


@attrs.frozen
class HttpErrorDetail:
    """What an upstream answered: the status, who answered, where, and the body it sent."""

    status_code: int = attrs.field(validator=_status_code)
    service: str = attrs.field(validator=attrs.validators.instance_of(str))
    endpoint: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    response_body: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )


class HttpErrorResponse:
    """Marks an error built from an HTTP status; ``isinstance(e, HttpErrorResponse)`` tests for one.

    It is mixed in front of the semantic parent (``Http404Error(HttpErrorResponse,
    ResourceNotFoundError)``), so ``except ResourceNotFoundError`` still says what to do and this
    class says where the answer came from. A connection failure has no status and therefore is a
    plain :class:`ExternalServiceError`, never one of these.
    """

    # The status every instance of the class carries; HttpUnmappedStatusError has none of its own.
    http_status: ClassVar[int | None] = None
    http_detail: HttpErrorDetail

    def __init__(
        self,
        message: str,
        *,
        service: str,
        endpoint: str | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """Build the error for this class's status.

        ``retry_after`` is kept only by upstream failures (the :class:`ExternalServiceError`
        family), where it paces the next try; a client error is not retried as-is, so its
        Retry-After has nothing to pace and is dropped.
        """
        if self.http_status is None:
            raise TypeError(f"{type(self).__name__} has no status of its own; pass status_code")
        self._init_http(self.http_status, message, service, endpoint, body, retry_after, cause)

    def _init_http(
        self,
        status_code: int,
        message: str,
        service: str,
        endpoint: str | None,
        body: str | None,
        retry_after: float | None,
        cause: BaseException | None,
    ) -> None:
        owner = type(self).__name__
        _require_name("service", service, owner=owner)
        self.http_detail = HttpErrorDetail(status_code, service, endpoint, body)
        forwarded: dict[str, Any] = {"cause": cause}
        if isinstance(self, ExternalServiceError):
            forwarded.update(service=service, retry_after=retry_after)
        # Cooperative multiple inheritance: the next class in the MRO is the semantic parent
        # (InvalidInputError, ExternalServiceError, ...), whose constructor takes these keywords.
        args: tuple[Any, ...] = (message,)
        super().__init__(*args, **forwarded)

    @property
    def status_code(self) -> int:
        """The HTTP status the upstream answered with."""
        return self.http_detail.status_code

    @property
    def service(self) -> str:
        """The upstream service that answered."""
        return self.http_detail.service

    @property
    def endpoint(self) -> str | None:
        """The endpoint called, when known."""
        return self.http_detail.endpoint

    @property
    def response_body(self) -> str | None:
        """The body the upstream sent with the status, when there was one."""
        return self.http_detail.response_body


class Http400Error(HttpErrorResponse, InvalidInputError):
    """Raised when an upstream answers 400 Bad Request."""

    http_status = 400


class Http413Error(HttpErrorResponse, InvalidInputError):
    """Raised when an upstream answers 413 Content Too Large."""

    http_status = 413


class Http422Error(HttpErrorResponse, InvalidInputError):
    """Raised when an upstream answers 422 Unprocessable Content."""

    http_status = 422


class Http404Error(HttpErrorResponse, ResourceNotFoundError):
    """Raised when an upstream answers 404 Not Found."""

    http_status = 404


class Http401Error(HttpErrorResponse, UnauthorizedError):
    """Raised when an upstream answers 401 Unauthorized."""

    http_status = 401


class Http403Error(HttpErrorResponse, UnauthorizedError):
    """Raised when an upstream answers 403 Forbidden."""

    http_status = 403


class Http429Error(HttpErrorResponse, UpstreamThrottleError):
    """Raised when an upstream answers 429 Too Many Requests."""

    http_status = 429


class Http500Error(HttpErrorResponse, ExternalServiceError):
    """Raised when an upstream answers 500 Internal Server Error."""

    http_status = 500


class Http502Error(HttpErrorResponse, ExternalServiceError):
    """Raised when an upstream answers 502 Bad Gateway."""

    http_status = 502


class Http503Error(HttpErrorResponse, ExternalServiceError):
    """Raised when an upstream answers 503 Service Unavailable."""

    http_status = 503


class HttpUnmappedStatusError(HttpErrorResponse, ExternalServiceError):
    """Raised when an upstream answers an error status with no class of its own (e.g. 418)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        service: str,
        endpoint: str | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """Like the other HTTP errors, with the ``status_code`` given since the class has none."""
        self._init_http(status_code, message, service, endpoint, body, retry_after, cause)


HttpError: TypeAlias = (
    Http400Error
    | Http401Error
    | Http403Error
    | Http404Error
    | Http413Error
    | Http422Error
    | Http429Error
    | Http500Error
    | Http502Error
    | Http503Error
    | HttpUnmappedStatusError
)
"""Any error :func:`http_error_from_status` can return."""

_HttpClass: TypeAlias = (
    type[Http400Error]
    | type[Http401Error]
    | type[Http403Error]
    | type[Http404Error]
    | type[Http413Error]
    | type[Http422Error]
    | type[Http429Error]
    | type[Http500Error]
    | type[Http502Error]
    | type[Http503Error]
)

_HTTP_CLASSES: Mapping[int, _HttpClass] = {
    cls.http_status: cls
    for cls in (
        Http400Error,
        Http401Error,
        Http403Error,
        Http404Error,
        Http413Error,
        Http422Error,
        Http429Error,
        Http500Error,
        Http502Error,
        Http503Error,
    )
    if cls.http_status is not None
}


def http_error_from_status(
    status: int,
    *,
    service: str,
    endpoint: str | None = None,
    body: str | None = None,
    message: str | None = None,
    retry_after: float | None = None,
    cause: BaseException | None = None,
) -> HttpError:
    """Turn an HTTP error status into the error class that says what to do about it.

    400/413/422 are :class:`InvalidInputError` (fix the request), 401/403
    :class:`UnauthorizedError`, 404 :class:`ResourceNotFoundError` (fix the id), 429
    :class:`UpstreamThrottleError`, 500/502/503 :class:`ExternalServiceError`, and any other
    status an :class:`HttpUnmappedStatusError` that keeps its code. Each is also an
    :class:`HttpErrorResponse` carrying the status, service, endpoint and body.

    Without a ``message`` one is composed from the status, the endpoint and the start of the body.
    """
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"http_error_from_status: status must be an int, got {status!r}")
    if not 100 <= status <= 599:
        raise ValueError(f"http_error_from_status: status must be in 100..599, got {status}")
    _require_name("service", service, owner="http_error_from_status")
    if message is None:
        where = f" for {endpoint}" if endpoint else ""
        message = f"{service} answered HTTP {status}{where}"
        if body:
            message += f": {_preview(body)}"
    cls = _HTTP_CLASSES.get(status)
    if cls is None:
        return HttpUnmappedStatusError(
            message,
            status_code=status,
            service=service,
            endpoint=endpoint,
            body=body,
            retry_after=retry_after,
            cause=cause,
        )
    return cls(
        message,
        service=service,
        endpoint=endpoint,
        body=body,
        retry_after=retry_after,
        cause=cause,
    )


# --------------------------------------------------------------------------------------------
# Outside the tree: never addressed to a model
# --------------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """Raised when a configuration is malformed; the message names every bad key and value."""


class DependencyFailedError(Exception):
    """Raised to a job that did not run because a job it depends on failed."""

    __reduce__ = _reduce_by_state

    def __init__(self, dependency_id: str, cause: BaseException) -> None:
        """``dependency_id`` names the failed dependency; ``cause`` is its failure."""
        owner = type(self).__name__
        self.dependency_id = _require_name("dependency_id", dependency_id, owner=owner)
        if not isinstance(cause, BaseException):
            raise TypeError(f"{owner}: cause must be an exception, got {type(cause).__name__}")
        super().__init__(f"Dependency {dependency_id} failed: {_describe(cause)}")
        self.__cause__ = cause


class JobDeadlockError(Exception):
    """Raised when a job holding resources waits on another job's result."""

    __reduce__ = _reduce_by_state

    def __init__(self, waiting_job_id: str, target_job_id: str, call_site: str) -> None:
        """Names the job that waited, the job it waited on, and where in the code it waited."""
        owner = type(self).__name__
        self.waiting_job_id = _require_name("waiting_job_id", waiting_job_id, owner=owner)
        self.target_job_id = _require_name("target_job_id", target_job_id, owner=owner)
        self.call_site = _require_name("call_site", call_site, owner=owner)
        super().__init__(
            f"Job {waiting_job_id} waits on job {target_job_id} at {call_site} while holding "
            f"resources: a job holding resources must not block on another job, since the "
            f"job it waits on may need those resources to run (deadlock)"
        )


class ModelResolutionError(Exception):
    """Raised when no model in the catalog can serve a grade (a configuration fault, not correctable)."""

    __reduce__ = _reduce_by_state

    def __init__(self, message: str, *, grade: str | None = None) -> None:
        """``message`` names the grade and what is missing; ``grade`` is kept for code."""
        owner = type(self).__name__
        _require_str("message", message, owner=owner)
        self.grade = _require_optional_str("grade", grade, owner=owner)
        super().__init__(message)


# --------------------------------------------------------------------------------------------
# Re-run signals
# --------------------------------------------------------------------------------------------


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
    service: str | None = attrs.field(
        validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    detail: str = attrs.field(validator=attrs.validators.instance_of(str))
    retry_after: float | None = attrs.field(default=None)
    backpressure: int = attrs.field(default=1, validator=attrs.validators.instance_of(int))

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

# Pacing draws come from a generator of our own, so a program that seeds the global `random`
# for its own reasons does not also synchronise every process's retries.
_pacing_rng = random.Random()


class UpstreamRetry(RerunSignal):
    """Raised by a job to re-run its attempt after an upstream signal; see its three kinds."""

    # Seconds of random wait on the first re-run; later re-runs scale both edges.
    jitter_window: ClassVar[tuple[float, float]]
    # How much a limiter tightens on this signal (0: the fault is not about our rate).
    backpressure_increment: ClassVar[int]

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        failure: UpstreamFailure | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``retry_after`` is the upstream's Retry-After in seconds; ``failure`` what it said."""
        owner = type(self).__name__
        self.retry_after = _require_seconds("retry_after", retry_after, owner=owner)
        if failure is not None and not isinstance(failure, UpstreamFailure):
            raise TypeError(
                f"{owner}: failure must be an UpstreamFailure, got {type(failure).__name__}"
            )
        self.failure = failure
        super().__init__(message, cause=cause)

    @classmethod
    def pacing_delay(cls, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before re-run number ``attempt`` (1 for the first re-run).

        A uniform draw from the signal's jitter window with both edges multiplied by the attempt
        number, at most tenfold, and never more than 300 s. Jitter spreads the re-runs of many
        jobs hit by one outage, so they do not return in a single burst.
        """
        if cls is UpstreamRetry:
            raise TypeError(
                "UpstreamRetry.pacing_delay: the window depends on the kind; call it on "
                "RateLimitRetry, OverloadRetry or TransientErrorRetry"
            )
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise TypeError(f"pacing_delay: attempt must be an int, got {type(attempt).__name__}")
        if attempt < 1:
            raise ValueError(f"pacing_delay: attempt counts from 1, got {attempt}")
        scale = min(attempt, MAX_PACING_MULTIPLIER)
        low, high = cls.jitter_window
        delay = (rng or _pacing_rng).uniform(low * scale, high * scale)
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
        for name, value in (
            ("escalated_max_tokens", escalated_max_tokens),
            ("previous_max_tokens", previous_max_tokens),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
        self.escalated_max_tokens = escalated_max_tokens
        self.previous_max_tokens = previous_max_tokens
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
        self.model = _require_optional_str("model", model, owner=owner)
        if attempt is not None and (
            isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1
        ):
            raise ValueError(f"{owner}: attempt must be an int >= 1, got {attempt!r}")
        self.attempt = attempt
        super().__init__(message, cause=cause)


# --------------------------------------------------------------------------------------------
# Stop reasons
# --------------------------------------------------------------------------------------------


class LLMStopReason(enum.Enum):
    """Why a model stopped generating, normalised across providers."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    CONTENT_FILTERED = "content_filtered"
    UNKNOWN = "unknown"

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


# --------------------------------------------------------------------------------------------
# Translation at the boundary
# --------------------------------------------------------------------------------------------


def _walk_chain(exc: BaseException) -> Iterator[BaseException]:
    """Every exception reachable from ``exc``, nearest first.

    Depth-first: an exception, then the members of a group (in order, each with its own chain),
    then its ``__cause__``, or its ``__context__`` when there is no cause and the context was
    not suppressed with ``raise ... from None``. Each exception is visited once, so a cyclic
    chain ends.
    """
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        following: list[BaseException] = []
        if isinstance(current, BaseExceptionGroup):
            following.extend(current.exceptions)
        if current.__cause__ is not None:
            following.append(current.__cause__)
        elif current.__context__ is not None and not current.__suppress_context__:
            following.append(current.__context__)
        stack.extend(reversed(following))


def _propagate_non_exceptions(exc: BaseException) -> None:
    # trio.Cancelled, KeyboardInterrupt and friends are not failures to translate: converting one
    # would swallow a cancellation. They leave exactly as they came.
    if not isinstance(exc, Exception):
        raise exc


def unwrap(exc: BaseException, *, component: str = "unknown") -> LLMReadableError:
    """The LLM-readable failure inside ``exc``, for a catch-all that must answer a model.

    The chain (causes, contexts, group members) is searched nearest first, and the first
    LLM-readable error or re-run signal found decides:

    * an LLM-readable error is returned as the same instance (a :class:`CancellationRequested`
      included, so a cancellation survives the catch-all and the job still ends cancelled);
    * a re-run signal is raised, never converted, so it still reaches the dispatcher;
    * with neither, the result is a :class:`NucleoSystemError` of ``component`` with ``exc`` as
      its cause: the model learns something failed, the log keeps what.

    Nearest first matters when both occur: an error that already gave up on a signal (a spent
    retry budget whose cause is the last signal) is returned, not turned back into a re-run.
    An ``exc`` that is not an ``Exception`` (``trio.Cancelled``, ``KeyboardInterrupt``) is
    re-raised unchanged.
    """
    _propagate_non_exceptions(exc)
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            return link
        if isinstance(link, RerunSignal):
            raise link
    return NucleoSystemError(component, _describe(exc), exc)


def unwrap_runtime(exc: BaseException, fallback: str) -> LLMReadableError:
    """The LLM-readable failure inside ``exc``, or an :class:`UncorrectableError` of ``fallback``.

    Unlike :func:`unwrap`, a re-run signal in the chain is not raised: it counts as nothing
    LLM-readable, and the result is ``UncorrectableError(fallback)`` caused by ``exc``. Use it
    where the answer must be a plain failure, such as a re-run budget that is spent. An ``exc``
    that is not an ``Exception`` is re-raised unchanged.
    """
    _require_str("fallback", fallback, owner="unwrap_runtime")
    _propagate_non_exceptions(exc)
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            return link
    return UncorrectableError(fallback, cause=exc)


def wrap_with_context(
    exc: BaseException, *, service: str, param: str, value: object, step: str
) -> LLMReadableError:
    """Re-frame a tool's failure in terms of the parameter it was called with.

    Searched like :func:`unwrap`, nearest first:

    * a correctable error becomes an :class:`InvalidInputError` naming ``param`` and ``value``,
      with ``step`` and the buried message as the rule (so a 404 on a fetch tells the model
      which id to fix);
    * a re-run signal is raised;
    * a :class:`CancellationRequested` is returned as itself, so the job still ends cancelled;
    * an uncorrectable error, or a chain with nothing LLM-readable, becomes an
      :class:`ExternalServiceError` naming ``service`` and ``step``.

    The result has ``exc`` as its cause. An ``exc`` that is not an ``Exception`` is re-raised.
    """
    owner = "wrap_with_context"
    _require_name("service", service, owner=owner)
    _require_name("param", param, owner=owner)
    _require_name("step", step, owner=owner)
    _propagate_non_exceptions(exc)
    found: LLMReadableError | None = None
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            found = link
            break
        if isinstance(link, RerunSignal):
            raise link
    if isinstance(found, CancellationRequested):
        return found
    if found is not None and found.correctable:
        return InvalidInputError(
            f"Invalid value for parameter '{param}': {_preview(repr(value))}. "
            f"At step '{step}': {found.llm_message}",
            cause=exc,
        )
    detail = found.llm_message if found is not None else _describe(exc)
    retry_after = found.retry_after if isinstance(found, ExternalServiceError) else None
    return ExternalServiceError(
        f"{service} failed at step '{step}': {detail}",
        service=service,
        retry_after=retry_after,
        cause=exc,
    )


_NOT_CRASHES = (trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)


def is_fatal_crash(exc: BaseException) -> bool:
    """Whether ``exc`` is something a job cannot be expected to handle (the seed's ``Error``).

    True for ``MemoryError``, ``RecursionError`` and any ``BaseException`` that is not an
    ``Exception`` and not one of trio's or Python's control-flow exceptions (``trio.Cancelled``,
    ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``). A group is fatal when any member
    is. The dispatcher fails such a job as a :class:`NucleoSystemError` of component ``job`` and
    never re-runs it.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(is_fatal_crash(member) for member in exc.exceptions)
    if isinstance(exc, MemoryError | RecursionError):
        return True
    return not isinstance(exc, Exception) and not isinstance(exc, _NOT_CRASHES)


_SUPPRESSED = "_nucleo_suppressed"


def add_suppressed(error: BaseException, other: BaseException) -> None:
    """Attach ``other`` to ``error`` as a failure that happened while ``error`` was handled.

    Python chains one exception through ``__context__``; a clean-up that fails after the job's
    own failure (a rollback, a close) must not replace that failure, so it rides along instead:
    readable through :func:`suppressed` and shown in the traceback as a note.
    """
    riders: list[BaseException] = error.__dict__.setdefault(_SUPPRESSED, [])
    riders.append(other)
    error.add_note(f"Suppressed while handling it: {type(other).__name__}: {other}")


def suppressed(error: BaseException) -> tuple[BaseException, ...]:
    """The failures attached to ``error`` with :func:`add_suppressed`, oldest first."""
    return tuple(error.__dict__.get(_SUPPRESSED, ()))


def log_failure(
    logger: logging.Logger | logging.LoggerAdapter[Any],
    exc: BaseException,
    *,
    job: str | None = None,
) -> None:
    """Log a job's failure as one line at WARNING, and its traceback at DEBUG.

    The line reads ``<job> failed: <ErrorClass>: <message>``, as the runtimes people already
    know log a failed task: with ``logging.basicConfig()`` a failing job is one line, and
    turning the logger down to DEBUG adds the traceback as a second record. ``job`` names the
    job; without it, the job whose task is settling (see :func:`_failing_job`) is named.
    """
    name = job or _failing_job() or "a job"
    logger.warning("%s failed: %s", name, _describe(exc))
    logger.debug("%s failed, traceback:", name, exc_info=exc)


def _failing_job() -> str | None:
    # The dispatcher settles a job in the job's own task, where the current job is the one
    # that failed and already stands in a terminal state. A job refused at submission is
    # settled in its submitter's task, whose job is still running: that one must not be named.
    from .jobs.context import current_job

    context = current_job()
    if context is None or not context.state.is_terminal:
        return None
    return context.job.name
