"""The MCP plugin over streamable HTTP, against a real server written with the SDK
(tests/mcp_test_server.py run with ``--http``, uvicorn on a free loopback port): listing and
calls, the headers, the gate (no stdio pool), a timed-out call, a server that goes away and
comes back.

Real processes on the real clock: the tests assert outcomes, never durations.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from nucleo_trio_mcp import McpServers

from nucleo_trio.bus import events as ev
from nucleo_trio.errors import JobTimeoutError, UncorrectableError
from nucleo_trio.jobs import workflow

from .test_mcp_servers import serving, stats

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))
START_BOUND = 60.0  # seconds: only so a server that never comes up fails instead of hanging


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for_port(port: int) -> None:
    """Return once ``port`` accepts connections (an external process coming up has nothing
    else to wait on); fail if nothing listens within :data:`START_BOUND` seconds."""
    deadline = time.monotonic() + START_BOUND
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no HTTP server came up on port {port}") from None
            time.sleep(0.05)


@asynccontextmanager
async def http_server(name: str, port: int | None = None) -> AsyncIterator[str]:
    """Serve the test server ``name`` over streamable HTTP; yields its url."""
    port = port or free_port()
    process = await trio.lowlevel.open_process(
        [sys.executable, SERVER, name, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await trio.to_thread.run_sync(wait_for_port, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def test_an_http_servers_tools_are_jobs_that_hold_its_gate_alone() -> None:
    """Over HTTP: the tools are listed and called as jobs, the configured headers reach the
    server, and a call's grant holds the server's mcp:<name> gate but no stdio slot."""
    async with http_server("kit") as url:
        granted: list[ev.LimiterEvent] = []
        async with serving(web={"url": url, "headers": {"X-Team": "blue"}}) as dispatcher:
            dispatcher.bus.subscribe(granted.append, event_type=ev.LimiterEvent)
            servers = McpServers.of(dispatcher)
            web = servers["web"]
            assert web.transport == "http" and web.pool is None
            await web.list_tools()
            root = workflow("u", "web")
            add, header = web.tool("add"), web.tool("header")
            assert await dispatcher.submit(add(root, {"a": 20, "b": 22})).result() == "42"
            team = await dispatcher.submit(header(root, {"name": "X-Team"})).result()
            assert team == "blue"
        names = {e.limiter_name for e in granted if e.type.name.startswith("GRANTED")}
        assert names == {"mcp:web"}
        assert servers.pool.in_use == 0 and web.gate.in_use == 0


async def test_concurrent_http_calls_never_exceed_the_servers_gate() -> None:
    async with http_server("kit") as url:
        async with serving(web={"url": url, "max_concurrent": 3}) as dispatcher:
            servers = McpServers.of(dispatcher)
            slow = (await servers.tools()) and servers["web"].tool("slow")
            root = workflow("u", "fan-out")
            handles = [dispatcher.submit(slow(root, {"seconds": 0.1})) for _ in range(20)]
            assert [await handle.result() for handle in handles] == ["slept 0.1 s"] * 20
            counted = await stats(servers, "web")
        assert counted["calls"] == 20 and 1 <= counted["max_in_flight"] <= 3


async def test_a_timed_out_http_call_tells_the_server_and_gives_its_slot_back() -> None:
    async with http_server("kit") as url:
        async with serving(web={"url": url}) as dispatcher:
            servers = McpServers.of(dispatcher)
            await servers.tools()
            call = servers["web"].tool("slow")(workflow("u", "late"), {"seconds": 60})
            call.timeout = 2.0
            with pytest.raises(JobTimeoutError):
                await dispatcher.submit(call).result()
            assert servers["web"].gate.in_use == 0
            with trio.fail_after(START_BOUND):
                counted = await stats(servers, "web")
        assert counted["cancelled"] == 1 and counted["in_flight"] == 0


async def test_an_http_server_that_goes_away_fails_the_call_and_is_reached_again_later() -> None:
    """The server stops: a call's re-runs cannot reach it, and the call fails, uncorrectably,
    once its budget is spent. The server comes back on its port: the next call connects
    again."""
    port = free_port()
    async with serving(web={"url": f"http://127.0.0.1:{port}/mcp"}) as dispatcher:
        web = McpServers.of(dispatcher)["web"]
        root = workflow("u", "away")
        async with http_server("kit", port):
            await web.list_tools()
            echo = web.tool("echo")
            assert await dispatcher.submit(echo(root, {"text": "one"})).result() == "one"
        call = echo(root, {"text": "two"})
        call.upstream_retries = 1
        with pytest.raises(UncorrectableError, match="exhausted its transparent retry budget"):
            await dispatcher.submit(call).result()
        async with http_server("kit", port):
            assert await dispatcher.submit(echo(root, {"text": "three"})).result() == "three"
        assert web.starts >= 3
