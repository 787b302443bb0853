"""The concrete counting gates: HTTP connections, database connections, a model's concurrency,
and subprocess (MCP stdio) slots per endpoint and pool-wide.

Each is a :class:`~nucleo_trio.admission.CountingGate` with a name that says what it counts, so
it shows up as its own row in status and health. An amount on any of them is a number of permits
(``None`` for one, as the runtime asks for a connection or a slot); an ask beyond the capacity is
refused when a job declares it. A new concurrency cap is one more subclass.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..errors import UncorrectableError
from .gates import CountingGate

__all__ = [
    "DEFAULT_HTTP_POOL_SIZE",
    "DEFAULT_STDIO_MAX_PER_ENDPOINT",
    "DEFAULT_STDIO_POOL_MAX",
    "DatabaseGate",
    "HttpConnectionGate",
    "ModelGate",
    "StdioEndpointGate",
    "StdioPoolGate",
]

log = logging.getLogger("nucleo_trio.admission.gates")

DEFAULT_HTTP_POOL_SIZE = 1000
"""Permits of an :class:`HttpConnectionGate` built without a ``pool_size``."""
DEFAULT_STDIO_MAX_PER_ENDPOINT = 10
"""Subprocess slots of a :class:`StdioEndpointGate` built without ``max_concurrent``."""
DEFAULT_STDIO_POOL_MAX = 20
"""Pool-wide stdio slots of a :class:`StdioPoolGate` built without ``max_concurrent``."""


class HttpConnectionGate(CountingGate):
    """``http``: one permit per admitted HTTP-using job, sized to the HTTP connection pool.

    Each dispatcher owns its own (two dispatchers in one process share nothing unless a gate is
    handed to both); an HTTP client that serves those jobs should size its pool to the same
    number, so a granted job always finds a connection.
    """

    _capacity_parameter = "pool_size"

    def __init__(self, pool_size: int = DEFAULT_HTTP_POOL_SIZE) -> None:
        super().__init__("http", pool_size)


class DatabaseGate(CountingGate):
    """``db:<name>``: the connections of one database pool, ``max_connections`` permits.

    Its database provider declares it as the admission account; each job that declares the
    database takes one permit, held until the job's resources close.
    """

    _capacity_parameter = "max_connections"

    def __init__(self, name: str, max_connections: int) -> None:
        super().__init__(f"db:{name}", max_connections)
        self.datasource = name
        """The database's name, without the ``db:`` prefix the account's name carries."""


class ModelGate(CountingGate):
    """One model's concurrent requests, for a catalog entry bounded by ``max_concurrent``
    rather than a quota window (a model served from a machine the deployment owns).

    The gate is named after the entry id. A ``max_concurrent`` of ``None`` raises
    :class:`ValueError`: an entry bounded by tokens and requests per minute is a
    :class:`~nucleo_trio.admission.TokenBucket`.
    """

    _capacity_parameter = "max_concurrent"

    def __init__(self, entry_id: str, max_concurrent: int | None) -> None:
        if max_concurrent is None:
            raise ValueError(
                f"ModelGate {entry_id!r}: the entry declares no max_concurrent; an entry "
                "bounded by tokens and requests per minute is a TokenBucket account, not a gate"
            )
        super().__init__(entry_id, max_concurrent)


class StdioEndpointGate(CountingGate):
    """``mcp:<endpoint>``: the subprocess slots of one stdio endpoint, ``max_concurrent``
    permits (default :data:`DEFAULT_STDIO_MAX_PER_ENDPOINT`).

    Once closed it refuses everyone with an error saying so; upstream push-back only logs, since
    a local subprocess has no quota to throttle.
    """

    _capacity_parameter = "max_concurrent"

    def __init__(self, endpoint: str, max_concurrent: int = DEFAULT_STDIO_MAX_PER_ENDPOINT) -> None:
        super().__init__(f"mcp:{endpoint}", max_concurrent)
        self.endpoint = endpoint
        """The endpoint's name, without the ``mcp:`` prefix the account's name carries."""
        self.closed = False
        """``True`` once :meth:`close` ran: every later ``fits`` and ``try_take`` refuses."""

    @property
    def is_idle(self) -> bool:
        """``True`` when no slot is taken (``in_use == 0``)."""
        return self.in_use == 0

    def close(self) -> None:
        """Close the endpoint for good: from now on every job that asks for a slot is refused
        with an :class:`~nucleo_trio.errors.UncorrectableError` saying the endpoint is closed.
        Slots already held stay held until given back."""
        self.closed = True

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise UncorrectableError(
                f"{self.limiter_name}: the endpoint is closed",
                llm_message=f"The tool endpoint {self.endpoint} is closed; use another tool.",
            )

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """As any counting gate, except that a closed endpoint refuses with an
        :class:`~nucleo_trio.errors.UncorrectableError` (the job is told to use another
        tool)."""
        self._refuse_if_closed()
        return super().fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """As any counting gate, except that a closed endpoint refuses, as :meth:`fits`
        does, and takes nothing."""
        self._refuse_if_closed()
        return super().try_take(mine, reserved_ahead)

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        """Log the failure as a warning and change nothing: a local subprocess has no quota to
        slow down for."""
        log.warning("%s upstream failure: %s", self.limiter_name, failure)


class StdioPoolGate(CountingGate):
    """``mcp:stdio``: the pool-wide cap on stdio subprocess slots, ``max_concurrent`` permits
    (default :data:`DEFAULT_STDIO_POOL_MAX`). A stdio tool declares both its endpoint's gate
    and this one, so admission reserves both for the head."""

    _capacity_parameter = "max_concurrent"

    def __init__(self, max_concurrent: int = DEFAULT_STDIO_POOL_MAX) -> None:
        super().__init__("mcp:stdio", max_concurrent)
