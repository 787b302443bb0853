"""The servers of one configuration, and the task their connections run in.

:class:`McpServers` holds every server of an :class:`~nucleo_trio_mcp.McpConfig`, the
``mcp:stdio`` gate they share, and one task that runs their connections. Whoever holds it runs
that task: a dispatcher whose configuration declares the servers runs it for its own life, or a
program runs it for the duration of a block::

    async with McpServers({"servers": {"calc": {"command": "python", "args": ["calc.py"]}}}) as mcp:
        tools = await mcp.tools()

Closing (the end of the block, the dispatcher's stop) refuses every later call, ends each
connection and waits for each server process to exit.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import trio

from nucleo_trio.admission import StdioPoolGate
from nucleo_trio.dispatch import DispatcherState
from nucleo_trio.errors import UsageKeyError
from nucleo_trio.errors._suggest import did_you_mean
from nucleo_trio.jobs import AbstractStoppable

from ._interrupts import holds, interrupt_the_program
from .config import McpConfig
from .server import McpServer
from .tools import McpTool

if TYPE_CHECKING:
    from nucleo_trio.dispatch import JobDispatcher

__all__ = ["CLOSE_WINDOW", "McpServers"]

log = logging.getLogger("nucleo_trio_mcp")

CLOSE_WINDOW = 10.0
"""Seconds closing waits for the servers' processes to exit before it cancels what is left
(the SDK then kills them)."""

_Task = tuple[Callable[..., Awaitable[None]], Any]


class McpServers(Mapping[str, McpServer], AbstractStoppable):
    """Every server of a configuration, by name, and the task their connections run in.

    ``config`` is an :class:`~nucleo_trio_mcp.McpConfig` or the plain data of one (the
    ``[mcp]`` table); a bad one raises :class:`~nucleo_trio.errors.ConfigError`. It is a
    read-only mapping of the servers by name (``servers["calc"]``, a name it does not hold a
    :class:`KeyError` naming those it does). Use it as ``async with``, run :meth:`run` in a
    nursery, or let a dispatcher hold it (its configuration's ``mcp`` table).
    """

    def __init__(self, config: McpConfig | Mapping[str, Any]) -> None:
        if not isinstance(config, McpConfig):
            config = McpConfig.from_mapping(config)
        self.config = config
        """The configuration the servers were built from."""
        self.pool = StdioPoolGate(config.stdio_pool_max)
        """The ``mcp:stdio`` gate every stdio server's calls share."""
        self._servers = {
            name: McpServer(name, settings, pool=self.pool, spawn=self._spawn)
            for name, settings in config.servers.items()
        }
        send, receive = trio.open_memory_channel[_Task](math.inf)
        self._requests = send
        self._incoming = receive
        self._running = False
        self._done = trio.Event()
        self._host: trio.CancelScope | None = None
        self._block: Any = None  # the nursery of `async with`

    @classmethod
    def of(cls, dispatcher: JobDispatcher) -> McpServers:
        """The servers of ``dispatcher``, the ones its configuration's ``mcp`` table declares;
        a dispatcher that declares none raises :class:`~nucleo_trio.errors.UsageKeyError` (a
        ``KeyError``) saying where to declare them."""
        servers = dispatcher.mcp
        if not isinstance(servers, McpServers):
            raise UsageKeyError(
                "nucleo_trio_mcp",
                "the dispatcher has no MCP servers (its configuration's mcp table is empty)",
                "declare them under [mcp.servers.NAME] in the dispatcher's configuration "
                '(DispatcherConfig(mcp={"servers": {...}})), or hold them yourself with '
                "`async with McpServers(...)`",
            )
        return servers

    def serve_for(self, dispatcher: JobDispatcher) -> None:
        """Run the connections for ``dispatcher``'s life, in a task of trio's own: from its
        start (servers set to start ``"at_start"`` are started then) until it stops, when its
        stop closes them (register this with
        :meth:`~nucleo_trio.dispatch.JobDispatcher.register_stoppable`, as the plugin does).
        Call it inside a trio run."""
        trio.lowlevel.spawn_system_task(
            self._run_for,
            dispatcher,
            name=f"MCP servers of {dispatcher!r}",
            context=contextvars.Context(),
        )

    async def _run_for(self, dispatcher: JobDispatcher) -> None:
        try:
            state = await dispatcher.state.wait_value(lambda now: now is not DispatcherState.NEW)
            if state is not DispatcherState.RUNNING:
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._close_when_stopped, dispatcher)
                await self.run()
                nursery.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - a system task's failure ends the trio run
            if holds(exc, KeyboardInterrupt):
                interrupt_the_program()  # Ctrl-C landed in one of the SDK's tasks
                return
            if not holds(exc, Exception):
                raise  # cancelled: the trio run is ending
            log.exception("the MCP servers' task failed; their calls fail from now on")
            await self.aclose()

    async def _close_when_stopped(self, dispatcher: JobDispatcher) -> None:
        """However the dispatcher's run ends, its servers end with it (its stop closes them
        first, in order; this is for a run that ended without its stop)."""
        await dispatcher.state.wait_value(DispatcherState.STOPPED)
        await self.aclose()

    # -- the mapping ----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> McpServer:
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(sorted(self._servers)) or "none"
            raise KeyError(
                f"no MCP server named {name!r} (configured: {known})"
                + did_you_mean(name, self._servers)
            )
        return server

    def __iter__(self) -> Iterator[str]:
        return iter(self._servers)

    def __len__(self) -> int:
        return len(self._servers)

    # -- tools ----------------------------------------------------------------------------------
    async def tools(self, *names: str) -> list[type[McpTool]]:
        """The tool classes of the servers called ``names`` (all of them when none is named),
        server by server in configuration order, starting each that is not up (together).

        A server that cannot be started raises its failure (see :meth:`McpServer.connect`)."""
        chosen = [self[name] for name in names] if names else list(self._servers.values())
        failures: list[BaseException] = []

        async def connect(server: McpServer) -> None:
            try:
                await server.connect()
            except Exception as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for server in chosen:
                nursery.start_soon(connect, server)
        if failures:
            raise failures[0]
        return [cls for server in chosen for cls in server.tools.values()]

    # -- the task -------------------------------------------------------------------------------
    def _spawn(self, task: Callable[..., Awaitable[None]], argument: Any) -> None:
        """Hand a connection's task to :meth:`run` (connections are started from its own task,
        so they carry none of a calling job's context)."""
        self._requests.send_nowait((task, argument))  # ClosedResourceError once closed

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the servers' connections until :meth:`aclose`; servers set to start
        ``"at_start"`` are started at once. Cancelled, it ends every connection (the SDK stops
        each process, shielded) and returns. A second run raises :class:`RuntimeError`."""
        if self._running:
            raise RuntimeError("McpServers.run: already running")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                self._host = nursery.cancel_scope
                for server in self._servers.values():
                    if server.config.start == "at_start":
                        nursery.start_soon(self._start_early, server)
                task_status.started()
                async with self._incoming:
                    async for task, argument in self._incoming:
                        nursery.start_soon(task, argument)
        finally:
            self._done.set()

    @trio.lowlevel.enable_ki_protection
    async def _start_early(self, server: McpServer) -> None:
        try:
            await server.connect()
        except Exception as exc:  # its first call meets the failure again
            log.warning("mcp:%s: could not start: %s", server.name, exc)

    async def aclose(self) -> None:
        """Close: every later call is refused, each connection ends, and this waits for the
        server processes to exit (at most :data:`CLOSE_WINDOW` seconds, then the rest are
        killed). Safe to call more than once."""
        for server in self._servers.values():
            server.close()
        self._requests.close()
        if not self._running:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLOSE_WINDOW):
                await self._done.wait()
            if not self._done.is_set() and self._host is not None:
                log.error(
                    "MCP servers still running %.0f s after the close; cancelled", CLOSE_WINDOW
                )
                self._host.cancel()
                await self._done.wait()

    async def do_stop(self) -> None:
        """What a dispatcher's stop runs: :meth:`aclose`."""
        await self.aclose()

    async def __aenter__(self) -> McpServers:
        block = trio.open_nursery()
        nursery = await block.__aenter__()
        try:
            await nursery.start(self.run)
        except BaseException as exc:
            await block.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._block = block
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.aclose()
        finally:
            try:
                swallowed: bool | None = await self._block.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                if exc is not None and list(group.exceptions) == [exc]:
                    return False  # the block's own exception leaves as itself, not in a group
                raise
        return swallowed

    def __repr__(self) -> str:
        return f"<McpServers {', '.join(self._servers) or '(none)'}>"
