"""HTTP statuses: the response classes, and :func:`http_error_from_status`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeAlias

import attrs

from ._checks import _preview, _require_name
from .hierarchy import (
    ExternalServiceError,
    InvalidInputError,
    ResourceNotFoundError,
    UnauthorizedError,
    UpstreamThrottleError,
)


def _status_code(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"HttpErrorDetail: status_code must be an int, got {value!r}")
    if not 100 <= value <= 599:
        raise ValueError(f"HttpErrorDetail: status_code must be in 100..599, got {value}")


@attrs.frozen
class HttpErrorDetail:
    """What an upstream answered: the status, who answered, where, and the body it sent."""

    status_code: int = attrs.field(validator=_status_code)
    """The HTTP status the upstream answered with, 100 to 599."""
    service: str = attrs.field(validator=attrs.validators.instance_of(str))
    """The name of the upstream service that answered."""
    endpoint: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    """The endpoint that was called, or ``None`` (the default) when not known."""
    response_body: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    """The body the upstream sent, whole, or ``None`` (the default) when there was none."""


class HttpErrorResponse:
    """Marks an error built from an HTTP status; ``isinstance(e, HttpErrorResponse)`` tests for one.

    It is mixed in front of the semantic parent (``Http404Error(HttpErrorResponse,
    ResourceNotFoundError)``), so ``except ResourceNotFoundError`` still says what to do and this
    class says where the answer came from. A connection failure has no status and therefore is a
    plain :class:`ExternalServiceError`, never one of these.
    """

    http_status: ClassVar[int | None] = None
    """The HTTP status this class stands for; ``None`` on :class:`HttpUnmappedStatusError`,
    whose instances each carry their own in :attr:`status_code`."""
    http_detail: HttpErrorDetail
    """What the upstream answered: status, service, endpoint and body."""

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
