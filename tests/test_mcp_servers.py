"""The MCP plugin against real servers (tests/mcp_test_server.py, written with the SDK), each a
child process: listing at connect, calls as jobs, the gates, failures, lifetimes.

These tests run real processes on the real clock; they assert outcomes, never durations.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from nucleo_trio_mcp import McpServers, McpTool, McpToolResult

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import workflow

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


def stdio(name: str, **settings: Any) -> dict[str, Any]:
    """The table of a stdio test server."""
    return {"command": sys.executable, "args": [SERVER, name], **settings}


async def test_a_stdio_servers_tools_are_listed_at_connect_as_job_classes() -> None:
    """Listing starts the server and makes one job class per tool, carrying the tool's name,
    description and input schema; a second listing of the same tools keeps the classes."""
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        kit = servers["kit"]
        assert not kit.is_connected and kit.starts == 0
        tools = await servers.tools()
        assert kit.is_connected and kit.starts == 1 and kit.listings.value == 1
        by_name = {cls.tool_name: cls for cls in tools}
        assert {"add", "echo", "fail", "slow", "stats", "pid", "grow", "shrink"} <= set(by_name)
        add = by_name["add"]
        assert issubclass(add, McpTool) and add is kit.tool("add")
        assert add.__qualname__ == "kit.add" and add.server_name == "kit"
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert add.parameters["required"] == ["a", "b"]
        assert add.__nucleo_description__ == "Add two integers."
        assert await kit.list_tools() == [cls for cls in tools if cls.server_name == "kit"]
        assert kit.starts == 1
        with pytest.raises(KeyError, match="offers no tool 'ad'.*did you mean 'add'"):
            kit.tool("ad")


async def test_a_call_is_a_job_that_returns_the_tools_result() -> None:
    """A tool class built with a parent and arguments is a job; its result is the tool's text,
    with the structured content beside it."""
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        await servers.tools()
        add = servers["kit"].tool("add")
        async with open_dispatcher(DispatcherConfig(seed=1)) as dispatcher:
            handle = dispatcher.submit(add(workflow("u", "calc"), {"a": 2, "b": 40}))
            result = await handle.result()
        assert isinstance(result, McpToolResult)
        assert result == "42" and result.structured == {"result": 42}
        assert result.server == "kit" and result.tool == "add"
        assert result.content == ({"type": "text", "text": "42"},)
        assert servers.pool.in_use == 0 and servers["kit"].gate.in_use == 0


def test_trio_runs_the_sdk() -> None:
    """The SDK's stdio client works under a plain ``trio.run`` (no pytest-trio in between)."""

    async def main() -> str:
        async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
            await servers.tools()
            async with open_dispatcher() as dispatcher:
                echo = servers["kit"].tool("echo")
                return str(
                    await dispatcher.submit(echo(workflow("u", "e"), {"text": "hi"})).result()
                )

    assert trio.run(main) == "hi"
