"""One server: its gate, its tools, and the connection its calls go through.

An :class:`McpServer` is started (or, for a url, connected to) the first time its tools are
listed or called, and again after it dies: a call that finds the connection gone raises the
runtime's :class:`~nucleo_trio.errors.TransientErrorRetry`, and the re-run finds a new one. The
connection itself runs in a task of the :class:`~nucleo_trio_mcp.McpServers` that holds the
server, so it outlives any one call and ends when they are closed.

Its tools are listed when it connects, and again whenever it says its list changed (the
``notifications/tools/list_changed`` notice of a 2025 connection, the ``subscriptions/listen``
stream of a 2026 one). Each listing brings the tool classes in line: a new tool gets a class, a
changed one its new schema, one no longer offered refuses its calls.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import mcp_types
import pydantic
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from nucleo_trio._watch import AsyncValue
from nucleo_trio.admission import StdioEndpointGate, StdioPoolGate
from nucleo_trio.errors import TransientErrorRetry, UpstreamFailure
from nucleo_trio.errors._suggest import did_you_mean
from nucleo_trio.jobs import JobRequirements

from ._interrupts import holds, interrupt_the_program, without
from .config import McpServerConfig
from .errors import McpArgumentsError, McpProtocolError, McpServerError, McpToolError
from .tools import McpTool, McpToolResult, tool_class, update_tool_class

if TYPE_CHECKING:
    from nucleo_trio.jobs import JobContext

__all__ = ["HttpEndpointGate", "McpServer"]

log = logging.getLogger("nucleo_trio_mcp")

_MAX_PAGES = 100  # a listing that pages on past this is cut short rather than followed forever
_CLIENT_INFO = mcp_types.Implementation(name="nucleo-trio-mcp", version="0.1.0")

Spawn = Callable[[Callable[..., Awaitable[None]], Any], None]


class HttpEndpointGate(StdioEndpointGate):
    """``mcp:<endpoint>`` of a streamable HTTP server: how many of its calls may be in flight at
    once. It behaves as a stdio endpoint's gate does (refusing everyone once closed); only what
    it counts differs, calls over HTTP rather than a child process's slots."""


class _Connection:
    """One start of a server: the client session, and the events of its life."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.client: Client | None = None
        self.failure: BaseException | None = None
        self.ready = trio.Event()  # connected and listed, or failed
        self.closing = trio.Event()  # asked to end: lost, or its servers closed
        self.closed = trio.Event()  # ended: the process is gone, the session closed
        self.relist = trio.Event()  # the server said its tools changed


class McpServer:
    """One configured server, reached through its own connection.

    Built by :class:`~nucleo_trio_mcp.McpServers` from a :class:`~nucleo_trio_mcp.McpServerConfig`;
    ``name`` is its key in the ``[mcp.servers]`` table. The gate (:attr:`gate`) and, for a stdio
    server, the pool (:attr:`pool`) are what each call's demand holds.
    """

    def __init__(
        self, name: str, config: McpServerConfig, *, pool: StdioPoolGate, spawn: Spawn
    ) -> None:
        self.name = name
        """The server's name, the key of its table; its gate is ``mcp:<name>``."""
        self.config = config
        """The server's settings."""
        self.gate: StdioEndpointGate = (
            StdioEndpointGate(name, config.max_concurrent)
            if config.transport == "stdio"
            else HttpEndpointGate(name, config.max_concurrent)
        )
        """The ``mcp:<name>`` gate: ``max_concurrent`` calls in flight at once."""
        self.pool: StdioPoolGate | None = pool if config.transport == "stdio" else None
        """The ``mcp:stdio`` gate every stdio server shares; ``None`` for an HTTP server."""
        self.starts = 0
        """How many times the server was started (or connected to); one more than its restarts
        once it is up."""
        self.listings: AsyncValue[int] = AsyncValue(0)
        """How many times its tools were listed, as a value tasks can wait on:
        ``await server.listings.wait_value(lambda n: n > seen)`` waits for the next listing."""
        self._spawn = spawn
        self._classes: dict[str, type[McpTool]] = {}
        self._connection: _Connection | None = None
        self._closed = False

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return self.config.transport

    @property
    def is_connected(self) -> bool:
        """Whether the server is up now: connected, listed, and not lost or closed."""
        connection = self._connection
        return (
            connection is not None
            and connection.ready.is_set()
            and connection.failure is None
            and not connection.closing.is_set()
        )

    # -- tools --------------------------------------------------------------------------------
    @property
    def tools(self) -> Mapping[str, type[McpTool]]:
        """The tool classes of the last listing, by tool name (empty before the first)."""
        return {name: cls for name, cls in self._classes.items() if cls.offered}

    def tool(self, name: str) -> type[McpTool]:
        """The class of the tool called ``name`` in the last listing; a name it does not offer
        is a :class:`KeyError` naming the tools it does, and the nearest one."""
        cls = self._classes.get(name)
        if cls is None or not cls.offered:
            offered = self.tools
            known = ", ".join(sorted(offered)) or "none (list its tools first)"
            raise KeyError(
                f"mcp:{self.name} offers no tool {name!r}; it offers: {known}"
                + did_you_mean(name, offered)
            )
        return cls

    async def list_tools(self) -> list[type[McpTool]]:
        """The tool classes the server offers, starting it first if it is not up."""
        await self.connect()
        return list(self.tools.values())

    # -- a call -------------------------------------------------------------------------------
    def requirements(self) -> JobRequirements:
        """The demand of one call: a slot of :attr:`gate`, and one of :attr:`pool` for a stdio
        server."""
        demand = JobRequirements().require_rate_limiter(self.gate)
        if self.pool is not None:
            demand.require_rate_limiter(self.pool)
        return demand

    async def call(
        self, context: JobContext, tool: str, arguments: Mapping[str, Any]
    ) -> McpToolResult:
        """Call ``tool`` with ``arguments`` on behalf of the job of ``context``, which holds the
        slots. A cancel or a timeout of the job ends the call at once, and the server is told
        (the protocol's ``notifications/cancelled``)."""
        scope = trio.CancelScope()
        unregister = context.on_cancel(scope.cancel)
        try:
            with scope:
                return await self._call(tool, arguments)
        finally:
            unregister()
        context.check_cancellation()  # the scope caught the job's cancel or timeout
        raise McpServerError(self.name, f"the call of {tool} was cancelled")

    async def _call(self, tool: str, arguments: Mapping[str, Any]) -> McpToolResult:
        connection = await self._connected()
        assert connection.client is not None
        try:
            result = await connection.client.call_tool(tool, dict(arguments))
        except MCPError as exc:
            code = exc.error.code
            if code == mcp_types.CONNECTION_CLOSED:
                raise await self._lost_during(connection, tool, exc.error.message) from exc
            if code == mcp_types.INVALID_PARAMS:
                raise McpArgumentsError(self.name, tool, [exc.error.message]) from exc
            raise McpProtocolError(self.name, f"{tool}: {exc.error.message}", code=code) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise await self._lost_during(connection, tool, repr(exc)) from exc
        except pydantic.ValidationError as exc:
            raise McpProtocolError(self.name, f"{tool} answered a malformed result: {exc}") from exc
        except RuntimeError as exc:
            if connection.closing.is_set():
                raise await self._lost_during(connection, tool, str(exc)) from exc
            raise McpProtocolError(self.name, f"{tool}: {exc}") from exc
        answer = McpToolResult.of(self.name, tool, result)
        if result.is_error:
            raise McpToolError(self.name, tool, answer.text)
        return answer

    async def _lost_during(
        self, connection: _Connection, tool: str, detail: str
    ) -> TransientErrorRetry:
        """The re-run signal of a call whose connection was lost, once the connection is gone
        (its process stopped), so the re-run starts a new one."""
        self._lose(connection, f"the connection closed during a call of {tool} ({detail})")
        await connection.closed.wait()
        return TransientErrorRetry(
            f"mcp:{self.name}: the server's connection closed during {tool}; the re-run starts "
            "it again",
            retry_after=0.0,
            failure=UpstreamFailure(status=None, service=f"mcp:{self.name}", detail=detail),
        )

    # -- the connection -----------------------------------------------------------------------
    async def connect(self) -> None:
        """Start the server (or connect to its url) and list its tools, unless it is up; wait
        for that. A server that cannot be started raises
        :class:`~nucleo_trio_mcp.McpServerError`; one that fails on its way up raises
        :class:`~nucleo_trio.errors.TransientErrorRetry` (a job calling it is run again)."""
        await self._connected()

    async def _connected(self) -> _Connection:
        connection = self._connection
        if connection is None or connection.closing.is_set():
            if self._closed:
                raise McpServerError(self.name, "its servers are closed")
            connection = _Connection(self.starts + 1)
            try:
                self._spawn(self._serve, connection)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise McpServerError(self.name, "its servers are closed") from None
            self.starts += 1
            self._connection = connection
        await connection.ready.wait()
        if connection.failure is not None:
            raise self._start_failure(connection.failure)
        return connection

    def _start_failure(self, failure: BaseException) -> Exception:
        if isinstance(failure, McpServerError):
            return failure
        if isinstance(failure, OSError):
            what = self.config.command or self.config.url
            return McpServerError(self.name, f"cannot start {what!r}: {failure}")
        return TransientErrorRetry(
            f"mcp:{self.name}: the server failed on its way up: {failure!r}",
            retry_after=0.0,
            failure=UpstreamFailure(status=None, service=f"mcp:{self.name}", detail=repr(failure)),
        )

    def _lose(self, connection: _Connection, why: str) -> None:
        if not connection.closing.is_set():
            log.warning("mcp:%s: %s; it is started again on the next call", self.name, why)
            connection.closing.set()

    def close(self) -> None:
        """Refuse every later call and end the connection (its task stops the server)."""
        self._closed = True
        self.gate.close()
        if self._connection is not None:
            self._connection.closing.set()

    async def wait_closed(self) -> None:
        """Wait until the last connection has ended."""
        if self._connection is not None:
            await self._connection.closed.wait()

    @trio.lowlevel.enable_ki_protection
    async def _serve(self, connection: _Connection) -> None:
        """The connection's task, in the task of the servers that hold it: connect, list, then
        relist on every change notice until asked to close."""
        try:
            deadline = trio.current_time() + self.config.connect_timeout
            with trio.CancelScope(deadline=deadline) as connecting:
                async with self._client(connection) as client:
                    connection.client = client
                    await self._list(client)
                    connecting.deadline = math.inf
                    connection.ready.set()
                    async with trio.open_nursery() as watchers:
                        watchers.start_soon(self._relist_on_notice, connection)
                        watchers.start_soon(self._listen, connection)
                        await connection.closing.wait()
                        watchers.cancel_scope.cancel()
            if connecting.cancelled_caught and not connection.ready.is_set():
                connection.failure = TimeoutError(
                    f"not up within connect_timeout ({self.config.connect_timeout:g} s)"
                )
        except BaseException as exc:  # noqa: BLE001 - recorded for the callers, or re-raised
            if holds(exc, KeyboardInterrupt):
                interrupt_the_program()  # Ctrl-C landed in one of the SDK's tasks
            rest = without(exc, KeyboardInterrupt)
            failure = None if rest is None else _first_failure(rest)
            if isinstance(failure, Exception):
                if not connection.ready.is_set():
                    connection.failure = failure
                else:
                    log.warning("mcp:%s: the connection ended: %r", self.name, failure)
            if rest is not None and not _only_failures(rest):
                raise rest from None  # a cancellation: the servers are closing
        finally:
            if not connection.ready.is_set() and connection.failure is None:
                connection.failure = McpServerError(self.name, "its servers are closed")
            connection.closing.set()
            connection.ready.set()
            connection.closed.set()

    @asynccontextmanager
    async def _client(self, connection: _Connection) -> AsyncIterator[Client]:
        config = self.config

        async def on_message(message: Any) -> None:
            if isinstance(message, mcp_types.ToolListChangedNotification):
                connection.relist.set()

        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            async with Client(
                stdio_client(params, errlog=_errlog()),
                message_handler=on_message,
                client_info=_CLIENT_INFO,
                cache=None,
                mode=config.protocol,
            ) as client:
                yield client
            return
        assert config.url is not None
        async with create_mcp_http_client(headers=dict(config.headers) or None) as http:
            async with Client(
                streamable_http_client(config.url, http_client=http),
                message_handler=on_message,
                client_info=_CLIENT_INFO,
                cache=None,
                mode=config.protocol,
            ) as client:
                yield client

    async def _list(self, client: Client) -> None:
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._absorb(listed)

    def _absorb(self, listed: list[mcp_types.Tool]) -> None:
        """Bring the classes in line with a listing, and say what changed."""
        seen = {tool.name: tool for tool in listed}
        added = [name for name in seen if name not in self._classes]
        gone = [name for name, cls in self._classes.items() if cls.offered and name not in seen]
        for name, tool in seen.items():
            cls = self._classes.get(name)
            if cls is None:
                self._classes[name] = tool_class(
                    self, tool, self.config.timeout, self.config.tool_prefix
                )
            else:
                update_tool_class(cls, tool)
        for name in gone:
            update_tool_class(self._classes[name], None)
        if self.listings.value and (added or gone):
            log.info(
                "mcp:%s: its tools changed: %s",
                self.name,
                ", ".join([*(f"+{n}" for n in added), *(f"-{n}" for n in gone)]),
            )
        self.listings.value += 1

    async def _relist_on_notice(self, connection: _Connection) -> None:
        assert connection.client is not None
        while True:
            await connection.relist.wait()
            connection.relist = trio.Event()
            try:
                await self._list(connection.client)
            except MCPError as exc:
                if exc.error.code == mcp_types.CONNECTION_CLOSED:
                    self._lose(connection, "the connection closed while listing its tools")
                    return
                log.warning("mcp:%s: listing its tools failed: %s", self.name, exc)

    async def _listen(self, connection: _Connection) -> None:
        """On a 2026 connection, the server's change stream: every tools event is a relist."""
        client = connection.client
        assert client is not None
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    connection.relist.set()
        except ListenNotSupportedError:
            return  # a 2025 connection: its notices arrive through the message handler
        except SubscriptionLost:
            self._lose(connection, "its change stream was lost")
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                self._lose(connection, "the connection closed")
            else:
                log.info("mcp:%s: no change stream (%s); listings follow notices", self.name, exc)

    def __repr__(self) -> str:
        where = self.config.command or self.config.url
        return f"<McpServer {self.name} ({self.transport}: {where!r})>"


def _first_failure(exc: BaseException) -> BaseException | None:
    """The first failure in ``exc`` that is not a cancellation (``None`` when it is only
    cancellation)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_failure(inner)
            if found is not None:
                return found
        return None
    return None if isinstance(exc, trio.Cancelled) else exc


def _only_failures(exc: BaseException) -> bool:
    """Whether ``exc`` holds nothing but ordinary failures (no cancellation, no
    ``KeyboardInterrupt``): only then may a connection's task keep it to itself."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_failures(inner) for inner in exc.exceptions)
    return isinstance(exc, Exception)


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: the program's, as a real file (under a test runner
    ``sys.stderr`` may be a buffer with no descriptor)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or sys.stderr
    return sys.stderr
