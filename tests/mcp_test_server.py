"""MCP servers written with the official SDK, for the MCP plugin's tests to talk to.

Run as a program, it serves one of them: ``python tests/mcp_test_server.py kit`` on stdio, or
``python tests/mcp_test_server.py kit --http PORT`` as a streamable HTTP server on 127.0.0.1.

* ``kit``: ``add``, ``echo``, ``fail`` (answers ``isError``), ``refuse`` (answers a JSON-RPC
  error), ``slow`` (sleeps, counting the calls in flight and the ones cancelled), ``started``
  (waits for a number of calls of slow), ``stats`` (the counts), ``header`` (an HTTP
  request header), ``pid``, ``grow`` and ``shrink`` (add or remove a tool, and say the list
  changed), ``crash`` (exits the process);
* ``notes``: ``remember`` and ``recall``, a small key-value store.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError


class Counts:
    """What the server saw: calls in flight now and at most, cancellations, calls."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.cancelled = 0
        self.calls = 0
        self.changed: anyio.Event | None = None  # made inside the server's event loop

    def called(self) -> None:
        self.calls += 1
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    async def wait_for_calls(self, calls: int) -> None:
        while self.calls < calls:
            if self.changed is None:
                self.changed = anyio.Event()
            await self.changed.wait()

    def as_dict(self) -> dict[str, int]:
        return {
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "cancelled": self.cancelled,
            "calls": self.calls,
        }


def kit() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("kit", log_level="WARNING")
    counts = Counts()

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the message."""
        raise ToolError(message)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep for the seconds given, then say so."""
        counts.called()
        counts.in_flight += 1
        counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
        try:
            await anyio.sleep(seconds)
        except BaseException:
            counts.cancelled += 1
            raise
        finally:
            counts.in_flight -= 1
        return f"slept {seconds:g} s"

    @server.tool()
    async def started(calls: int) -> int:
        """Wait until slow has been called that many times in all, and say how many."""
        await counts.wait_for_calls(calls)
        return counts.calls

    @server.tool()
    async def stats() -> dict[str, int]:
        """The calls of slow in flight now and at most, and how many were cancelled."""
        await anyio.sleep(0.01)  # a slow call cancelled just before has counted itself
        return counts.as_dict()

    @server.tool()
    def refuse(code: int, message: str) -> str:
        """Answer with a JSON-RPC error of the code given, not a result."""
        raise MCPError(code=code, message=message)

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of an HTTP request header of this call ("" on stdio, or when absent)."""
        request = ctx.request_context.request  # the HTTP request of the call, if any
        headers = getattr(request, "headers", None) or {}
        return str(headers.get(name.lower(), ""))

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """Exit the server's process at once."""
        os._exit(3)

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Offer one more tool, called name, that doubles a text."""

        def double(text: str) -> str:
            return text * 2

        server.add_tool(double, name=name, description="Say the text twice.")
        await _tell_changed(ctx)
        return f"added {name}"

    @server.tool()
    async def shrink(name: str, ctx: Context) -> str:
        """Stop offering the tool called name."""
        server.remove_tool(name)
        await _tell_changed(ctx)
        return f"removed {name}"

    return server


async def _tell_changed(ctx: Context) -> None:
    """Say the tool list changed both ways: the change stream of a 2026 connection and the
    notice of a 2025 one (each side hears the one it understands)."""
    await ctx.notify_tools_changed()
    try:
        await ctx.request_context.session.send_tool_list_changed()
    except Exception:  # a 2026 connection has no session notices
        pass


def notes() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("notes", log_level="WARNING")
    store: dict[str, str] = {}

    @server.tool()
    def remember(key: str, value: str) -> str:
        """Keep a value under a key."""
        store[key] = value
        return f"kept {key}"

    @server.tool()
    def recall(key: str) -> str:
        """The value kept under a key."""
        if key not in store:
            raise ToolError(f"nothing kept under {key!r}")
        return store[key]

    return server


SERVERS = {"kit": kit, "notes": notes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("server", choices=sorted(SERVERS))
    parser.add_argument("--http", type=int, metavar="PORT")
    options = parser.parse_args()
    server = SERVERS[options.server]()
    if options.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.http)


if __name__ == "__main__":
    sys.exit(main())
