"""The HTTP connection pool jobs share, and the settings it is built from.

A dispatcher admits at most ``pool_size`` HTTP-using jobs at once through its ``http`` gate, and
those jobs talk to the outside world through one :class:`httpx.AsyncClient` whose pool holds the
same number of connections. One number sizes both, so a job the gate lets in always finds a
connection, and no job ever queues inside the client holding a permit it cannot use::

    settings = HttpSettings(pool_size=200)
    gate = settings.gate()  # the ``http`` account admission reserves
    async with open_http_client(settings) as client:
        response = await client.get("https://api.example.com/v1/models")

The client runs on trio: httpx does its I/O through anyio, which runs on whichever event loop
is current.

The timeouts are long on purpose. A model's answer can take minutes to stream, so reads and
writes get 15 minutes; waiting for a free connection gets an hour, since under admission that
wait should never happen at all (the gate is the queue, not the pool). The client never retries
on its own: re-running a failed call is the dispatcher's decision, made with the whole job in
view (its re-run budget, its pacing, the account's feedback), and a retry hidden below it would
spend quota twice and report once.

A request that fails below HTTP (refused, dropped, timed out) is translated by
:data:`TRANSPORT_ERRORS`, the table a client of the pool wraps its calls in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import httpx

from ._redact import redact_text
from ._serialization import structure_config
from .admission.named_gates import DEFAULT_HTTP_POOL_SIZE, HttpConnectionGate
from .errors import ConfigError, ExternalServiceError, TransientErrorRetry, lost_in_transit
from .errors._boundary_map import exception_map

__all__ = ["HttpSettings", "open_http_client"]


def _positive_int(instance: HttpSettings, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"HttpSettings.{attribute.name} must be a positive int, got {value!r}")


def _positive_seconds(
    instance: HttpSettings, attribute: attrs.Attribute[float], value: float
) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(
            f"HttpSettings.{attribute.name} must be a positive number of seconds, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class HttpSettings:
    """How the shared HTTP pool is sized and timed; every duration is in seconds.

    Every field is keyword-only and must be positive; a bad value raises
    :class:`~nucleo_trio.errors.ConfigError`. Before it reuses an idle connection, httpx checks
    the socket and drops the connection if the server has closed it or its keep-alive expired,
    so a stale connection is never handed to a job.
    """

    # GATE-06: one number sizes the pool (in total and per host) and the gate.
    pool_size: int = attrs.field(default=DEFAULT_HTTP_POOL_SIZE, validator=_positive_int)
    """The most connections open at once, in total and to any one host (httpx has one cap for
    the whole pool), and the capacity of the ``http`` gate (:meth:`gate`). Default 1000."""
    connect_timeout: float = attrs.field(default=30.0, validator=_positive_seconds)
    """Seconds to establish a connection; default 30."""
    read_timeout: float = attrs.field(default=15 * 60.0, validator=_positive_seconds)
    """Seconds to wait for each chunk of response bytes; default 900 (15 minutes)."""
    write_timeout: float = attrs.field(default=15 * 60.0, validator=_positive_seconds)
    """Seconds to wait to send each chunk of request bytes; default 900 (15 minutes)."""
    pool_timeout: float = attrs.field(default=60 * 60.0, validator=_positive_seconds)
    """Seconds to wait for a free connection from the pool; default 3600 (an hour)."""
    keepalive_expiry: float = attrs.field(default=5 * 60.0, validator=_positive_seconds)
    """Seconds an idle connection stays open before it is closed; default 300 (5 minutes)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> HttpSettings:
        """Build settings from plain data; an unknown key or a bad value is a ConfigError."""
        return structure_config(data, cls, what="http settings")

    def limits(self) -> httpx.Limits:
        """The pool's limits: ``pool_size`` connections, all of which may stay alive idle."""
        return httpx.Limits(
            max_connections=self.pool_size,
            max_keepalive_connections=self.pool_size,
            keepalive_expiry=self.keepalive_expiry,
        )

    def timeout(self) -> httpx.Timeout:
        """The four timeouts, as httpx takes them."""
        return httpx.Timeout(
            connect=self.connect_timeout,
            read=self.read_timeout,
            write=self.write_timeout,
            pool=self.pool_timeout,
        )

    def gate(self) -> HttpConnectionGate:
        """A fresh ``http`` gate with one permit per pooled connection."""
        # GATE-05: the gate's capacity is the pool's size.
        return HttpConnectionGate(self.pool_size)


def open_http_client(settings: HttpSettings | None = None) -> httpx.AsyncClient:
    """A client whose pool and timeouts follow ``settings``, with automatic retries off.

    The caller owns the client: use it as ``async with open_http_client(...) as client`` or
    ``await client.aclose()`` it when done, after the jobs using it have finished.
    """
    settings = HttpSettings() if settings is None else settings
    if not isinstance(settings, HttpSettings):
        raise TypeError(
            f"open_http_client needs HttpSettings or None, got {type(settings).__name__}"
        )
    # The limits live on the transport: httpx ignores a client's own limits once a transport is
    # given, and the transport is where retries are set.
    transport = httpx.AsyncHTTPTransport(limits=settings.limits(), retries=0)
    return httpx.AsyncClient(transport=transport, timeout=settings.timeout())


def _unreachable(exc: httpx.HTTPError, *, service: str, endpoint: str) -> ExternalServiceError:
    return ExternalServiceError(
        f"{service} could not be reached for {endpoint}: {type(exc).__name__}: "
        f"{redact_text(str(exc))}",
        service=service,
        cause=exc,
    )


def _lost_in_transit(exc: httpx.HTTPError, *, service: str, endpoint: str) -> TransientErrorRetry:
    return lost_in_transit(
        f"{service} failed in transit for {endpoint} ({type(exc).__name__})",
        _unreachable(exc, service=service, endpoint=endpoint),
    )


TRANSPORT_ERRORS = exception_map(
    {
        httpx.TimeoutException: _lost_in_transit,
        httpx.NetworkError: _lost_in_transit,
        httpx.RemoteProtocolError: _lost_in_transit,
        httpx.HTTPError: _unreachable,
    }
)
"""What httpx raises for a request to ``endpoint`` of ``service``, as the runtime's: a failure
a later try may get past (a timeout, a network error, a reply cut short) is a re-run signal
whose cause is the :class:`~nucleo_trio.errors.ExternalServiceError` the caller is told if
the re-runs run out; any other is that error straight away. Used as
``with map_exceptions(TRANSPORT_ERRORS, service=..., endpoint=...)``."""
