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
defined.

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

The package holds one concept a module: :mod:`.hierarchy` (the tree and the failures outside
it), :mod:`.http` (the status classes and their mapping), :mod:`.signals` (the re-run signals,
their pacing and the stop reasons) and :mod:`.chain` (translation, suppressed riders, the
failure log). Import every name from ``nucleo_trio.errors``.
"""

from __future__ import annotations

from ._checks import (
    CORRECTABLE_SUFFIX as CORRECTABLE_SUFFIX,
    UNCORRECTABLE_SUFFIX as UNCORRECTABLE_SUFFIX,
)
from .chain import (
    add_suppressed as add_suppressed,
    is_fatal_crash as is_fatal_crash,
    log_failure as log_failure,
    suppressed as suppressed,
    unwrap as unwrap,
    unwrap_runtime as unwrap_runtime,
    wrap_with_context as wrap_with_context,
)
from .hierarchy import (
    CancellationRequested as CancellationRequested,
    ConfigError as ConfigError,
    ContextOverflowError as ContextOverflowError,
    CorrectableError as CorrectableError,
    DependencyFailedError as DependencyFailedError,
    ExternalServiceError as ExternalServiceError,
    GuardrailError as GuardrailError,
    InvalidInputError as InvalidInputError,
    JobCancelledError as JobCancelledError,
    JobDeadlockError as JobDeadlockError,
    JobTimeoutError as JobTimeoutError,
    JsonParseError as JsonParseError,
    LLMReadableError as LLMReadableError,
    ModelNotFoundError as ModelNotFoundError,
    ModelResolutionError as ModelResolutionError,
    NucleoSystemError as NucleoSystemError,
    PermissionDeniedError as PermissionDeniedError,
    PromptNotFoundError as PromptNotFoundError,
    ProviderRefusalError as ProviderRefusalError,
    QuotaExhaustedError as QuotaExhaustedError,
    ResourceNotFoundError as ResourceNotFoundError,
    ResponseValidationError as ResponseValidationError,
    SpendCapExceededError as SpendCapExceededError,
    TokenEstimateExceedsLimitError as TokenEstimateExceedsLimitError,
    UnauthorizedError as UnauthorizedError,
    UncorrectableError as UncorrectableError,
    UpstreamThrottleError as UpstreamThrottleError,
    UsageError as UsageError,
    UsageKeyError as UsageKeyError,
    UsageRuntimeError as UsageRuntimeError,
    UsageTypeError as UsageTypeError,
    UsageValueError as UsageValueError,
)
from .http import (
    Http400Error as Http400Error,
    Http401Error as Http401Error,
    Http403Error as Http403Error,
    Http404Error as Http404Error,
    Http413Error as Http413Error,
    Http422Error as Http422Error,
    Http429Error as Http429Error,
    Http500Error as Http500Error,
    Http502Error as Http502Error,
    Http503Error as Http503Error,
    HttpError as HttpError,
    HttpErrorDetail as HttpErrorDetail,
    HttpErrorResponse as HttpErrorResponse,
    HttpUnmappedStatusError as HttpUnmappedStatusError,
    http_error_from_status as http_error_from_status,
)
from .signals import (
    MAX_PACING_MULTIPLIER as MAX_PACING_MULTIPLIER,
    MAX_PACING_SECONDS as MAX_PACING_SECONDS,
    OVERLOADED_STATUS as OVERLOADED_STATUS,
    RETRY_AFTER_JITTER as RETRY_AFTER_JITTER,
    RETRY_AFTER_MIN_JITTER as RETRY_AFTER_MIN_JITTER,
    LLMStopReason as LLMStopReason,
    OutputTruncationRetry as OutputTruncationRetry,
    OverloadRetry as OverloadRetry,
    RateLimitRetry as RateLimitRetry,
    RerunSignal as RerunSignal,
    ResponseCorrectionRetry as ResponseCorrectionRetry,
    TransientErrorRetry as TransientErrorRetry,
    UpstreamFailure as UpstreamFailure,
    UpstreamRetry as UpstreamRetry,
    lost_in_transit as lost_in_transit,
    rerun_for_status as rerun_for_status,
)

__all__ = [
    "CORRECTABLE_SUFFIX",
    "MAX_PACING_MULTIPLIER",
    "MAX_PACING_SECONDS",
    "OVERLOADED_STATUS",
    "RETRY_AFTER_JITTER",
    "RETRY_AFTER_MIN_JITTER",
    "UNCORRECTABLE_SUFFIX",
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
    "UsageError",
    "UsageKeyError",
    "UsageRuntimeError",
    "UsageTypeError",
    "UsageValueError",
    "add_suppressed",
    "http_error_from_status",
    "is_fatal_crash",
    "log_failure",
    "lost_in_transit",
    "rerun_for_status",
    "suppressed",
    "unwrap",
    "unwrap_runtime",
    "wrap_with_context",
]


# The names above are defined in the package's modules (the hierarchy, the HTTP mapping, the
# re-run signals, the chain helpers) and belong to ``nucleo_trio.errors``: that is where
# tracebacks, reprs, pickles and the documentation name them.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
