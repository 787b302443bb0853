"""What the ``openai`` SDK raises, as the runtime's re-run signals and errors.

The SDK is built with its own retries off, so each of its exceptions is one refused or failed
request, and the dispatcher decides what happens next:

* :class:`openai.RateLimitError` (429) is a :class:`~nucleo_trio.errors.RateLimitRetry`, unless
  the body says the quota is spent (``insufficient_quota``), which waiting does not fix: that is
  a :class:`~nucleo_trio.errors.QuotaExhaustedError`;
* a 529, or a 503 whose body says it is overloaded, is an
  :class:`~nucleo_trio.errors.OverloadRetry`;
* a 408, any other 5xx, :class:`openai.APITimeoutError` and :class:`openai.APIConnectionError`
  are a :class:`~nucleo_trio.errors.TransientErrorRetry`;
* any other :class:`openai.APIStatusError` is what
  :func:`~nucleo_trio.errors.http_error_from_status` makes of its status (a 400 is correctable,
  a 401 is not, a 404 says the model is not there).

Every signal carries the server's wait (``retry-after-ms``, else ``Retry-After``) as
``retry_after`` and an :class:`~nucleo_trio.errors.UpstreamFailure`; the SDK's exception is the
cause of the error it is translated to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import httpx2
import openai

from nucleo_trio.errors import (
    ExternalServiceError,
    QuotaExhaustedError,
    TransientErrorRetry,
    http_error_from_status,
    lost_in_transit,
    rerun_for_status,
)
from nucleo_trio.errors._boundary_map import exception_map, mapped
from nucleo_trio.llm.clients.openai import parse_retry_after

__all__ = ["translate"]

_QUOTA_CODES = frozenset({"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached"})
_PREVIEW = 300


def translate(error: BaseException, *, service: str, endpoint: str) -> BaseException:
    """The runtime's exception for ``error``, raised by the SDK (or by the HTTP layer below it
    while a stream is read) for a request to ``endpoint`` of ``service``.

    An exception that is neither the SDK's nor a transport failure is returned as it is.
    """
    translated = mapped(SDK_ERRORS, error, service=service, endpoint=endpoint)
    return error if translated is None else translated


def _lost(
    error: openai.APIConnectionError | httpx2.TransportError, *, service: str, endpoint: str
) -> TransientErrorRetry:
    kind = type(error).__name__
    return lost_in_transit(
        f"{service} failed in transit for {endpoint} ({kind})",
        ExternalServiceError(
            f"{service} could not be reached for {endpoint}: {kind}: {error}",
            service=service,
            cause=error,
        ),
    )


def _failed(error: openai.OpenAIError, *, service: str, endpoint: str) -> ExternalServiceError:
    return ExternalServiceError(
        f"{service} failed for {endpoint}: {type(error).__name__}: {error}",
        service=service,
        cause=error,
    )


def _body_text(error: openai.APIStatusError) -> str:
    body = error.body
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body)
    except (TypeError, ValueError):
        return str(body)


def _quota_spent(error: openai.APIStatusError) -> bool:
    codes = {str(value).lower() for value in (error.code, error.type) if value}
    return bool(codes & _QUOTA_CODES)


def _status_failure(error: openai.APIStatusError, *, service: str, endpoint: str) -> Exception:
    status = error.status_code
    headers: Mapping[str, str] = error.response.headers
    retry_after = parse_retry_after(headers)
    body = _body_text(error)
    http_error = http_error_from_status(
        status,
        service=service,
        endpoint=endpoint,
        body=body or None,
        retry_after=retry_after,
        cause=error,
    )
    if status == 429 and _quota_spent(error):
        return QuotaExhaustedError(
            f"{service} says the quota is exhausted (HTTP 429 for {endpoint}): {body[:_PREVIEW]}",
            cause=http_error,
        )
    return rerun_for_status(
        http_error,
        status=status,
        service=service,
        endpoint=endpoint,
        body=body,
        retry_after=retry_after,
    )


SDK_ERRORS = exception_map(
    {
        openai.APIStatusError: _status_failure,
        # APITimeoutError is an APIConnectionError; a stream cut while it is read surfaces from
        # httpx2 itself, below the SDK.
        openai.APIConnectionError: _lost,
        httpx2.TransportError: _lost,
        openai.OpenAIError: _failed,
    }
)
"""The SDK's exceptions (and httpx2's transport failures below it), each with the builder of
the runtime's exception for it, called with ``service`` and ``endpoint``: :func:`translate`
reads it, and a call site may wrap the SDK in ``map_exceptions(SDK_ERRORS, ...)``."""
