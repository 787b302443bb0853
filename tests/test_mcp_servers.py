"""The MCP plugin against real servers (tests/mcp_test_server.py, written with the SDK), each a
child process: listing at connect, calls as jobs, the gates, failures, lifetimes.

These tests run real processes on the real clock; they assert outcomes, never durations.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import trio
from nucleo_trio_mcp import (
    McpArgumentsError,
    McpProtocolError,
    McpServerError,
    McpServers,
    McpTool,
    McpToolError,
    McpToolResult,
)

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import CorrectableError, UncorrectableError
from nucleo_trio.jobs import workflow
from nucleo_trio.plugins import make_plugin_manager

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


@asynccontextmanager
async def a_dispatcher(**config: Any) -> AsyncIterator[JobDispatcher]:
    """A dispatcher with the built-in plugins only (the installed ones cost seconds to import,
    and these tests bring what they use)."""
    plugins = make_plugin_manager(load_entrypoints=False)
    async with open_dispatcher(
        DispatcherConfig(seed=1, **config), plugin_manager=plugins
    ) as dispatcher:
        yield dispatcher


async def stats(servers: McpServers, name: str = "kit") -> dict[str, int]:
    """What the server counted, asked through a call of its own (outside any dispatcher)."""
    server = servers[name]
    connection = await server._connected()
    assert connection.client is not None
    result = await connection.client.call_tool("stats", {})
    counted: dict[str, int] = result.structured_content
    return counted


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


async def test_fifty_concurrent_calls_never_exceed_the_server_gates_or_the_stdio_pool() -> None:
    """50 calls at once over two stdio servers: at most max_concurrent of them in flight on each
    server (as the server itself counts them), at most stdio_pool_max on both together (as
    admission granted them), and every call a job with its events and both gates' grants."""
    config = {
        "stdio_pool_max": 5,
        "servers": {"a": stdio("kit", max_concurrent=3), "b": stdio("kit", max_concurrent=3)},
    }
    async with McpServers(config) as servers:
        await servers.tools()
        peak = 0

        async def watch_pool() -> None:
            nonlocal peak
            async for _, now in servers.pool.use.transitions():
                peak = max(peak, now)

        events: list[ev.JobEvent] = []
        async with a_dispatcher() as dispatcher:
            dispatcher.bus.subscribe(events.append)
            async with trio.open_nursery() as watcher:
                watcher.start_soon(watch_pool)
                root = workflow("u", "fan-out")
                handles = [
                    dispatcher.submit(servers["ab"[n % 2]].tool("slow")(root, {"seconds": 0.1}))
                    for n in range(50)
                ]
                results = [await handle.result() for handle in handles]
                watcher.cancel_scope.cancel()
        assert results == ["slept 0.1 s"] * 50
        counted = {name: await stats(servers, name) for name in "ab"}
        assert counted["a"]["calls"] == counted["b"]["calls"] == 25
        assert 1 <= counted["a"]["max_in_flight"] <= 3 and 1 <= counted["b"]["max_in_flight"] <= 3
        assert 3 <= peak <= 5
        assert servers.pool.in_use == servers["a"].gate.in_use == servers["b"].gate.in_use == 0
        first = handles[0].job.job_id
        kinds = [type(e).__name__ for e in events if e.snapshot and e.snapshot.job_id == first]
        assert kinds[0] == "JobScheduled" and kinds[-1] == "WorkflowCompleteEvent"
        assert {"JobStartedEvent", "JobCompletedEvent"} <= set(kinds)
        granted = {
            e.limiter_name
            for e in events
            if isinstance(e, ev.LimiterEvent)
            and e.snapshot is not None
            and e.snapshot.job_id == first
            and e.type.name.startswith("GRANTED")
        }
        assert granted == {"mcp:a", "mcp:stdio"}


async def test_arguments_the_schema_refuses_fail_correctably_before_admission() -> None:
    """A call whose arguments do not match the input schema fails with every problem listed,
    as a correctable failure, without asking admission for anything or reaching the server."""
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        await servers.tools()
        add = servers["kit"].tool("add")
        events: list[ev.JobEvent] = []
        async with a_dispatcher() as dispatcher:
            dispatcher.bus.subscribe(events.append)
            handle = dispatcher.submit(add(workflow("u", "bad"), {"a": "two", "c": 1}))
            with pytest.raises(McpArgumentsError) as refused:
                await handle.result()
        error = refused.value
        assert isinstance(error, CorrectableError)
        assert error.problems == (
            "(the arguments): 'b' is a required property",
            "a: 'two' is not of type 'integer'",
        )
        assert "The arguments of add were refused:\n- (the arguments): 'b'" in error.llm_message
        assert not [e for e in events if isinstance(e, ev.LimiterEvent)]
        assert servers["kit"].gate.in_use == 0


async def test_a_tool_that_answers_is_error_fails_correctably_with_what_it_said() -> None:
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        await servers.tools()
        fail = servers["kit"].tool("fail")
        async with a_dispatcher() as dispatcher:
            handle = dispatcher.submit(fail(workflow("u", "f"), {"message": "no such file"}))
            with pytest.raises(McpToolError) as failed:
                await handle.result()
        assert isinstance(failed.value, CorrectableError)
        assert failed.value.tool == "fail" and "no such file" in failed.value.text
        assert failed.value.explain_to_llm().startswith("The tool fail failed: ")


async def test_a_protocol_error_is_uncorrectable_unless_it_refuses_the_arguments() -> None:
    """A JSON-RPC error answer: invalid params (-32602) is the model's to fix; any other code
    (an internal error) is an uncorrectable protocol error carrying its code."""
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        await servers.tools()
        refuse = servers["kit"].tool("refuse")
        root = workflow("u", "p")
        async with a_dispatcher() as dispatcher:
            params = dispatcher.submit(
                refuse(root, {"code": mcp_types.INVALID_PARAMS, "message": "path outside root"})
            )
            internal = dispatcher.submit(
                refuse(root, {"code": mcp_types.INTERNAL_ERROR, "message": "database down"})
            )
            with pytest.raises(McpArgumentsError, match="path outside root"):
                await params.result()
            with pytest.raises(McpProtocolError) as broken:
                await internal.result()
        assert isinstance(broken.value, UncorrectableError)
        assert broken.value.code == mcp_types.INTERNAL_ERROR
        assert broken.value.service == "mcp:kit"
        assert "database down" in str(broken.value)


async def test_closed_servers_refuse_every_later_call() -> None:
    async with McpServers({"servers": {"kit": stdio("kit")}}) as servers:
        await servers.tools()
        echo = servers["kit"].tool("echo")
    with pytest.raises(McpServerError, match="closed"):
        await servers["kit"].connect()
    async with a_dispatcher() as dispatcher:
        handle = dispatcher.submit(echo(workflow("u", "late"), {"text": "hi"}))
        with pytest.raises(UncorrectableError, match="closed"):
            await handle.result()
    assert json.dumps(str(echo))  # the class outlives its servers, harmlessly


@asynccontextmanager
async def serving(**servers: dict[str, Any]) -> AsyncIterator[JobDispatcher]:
    """A dispatcher whose configuration declares ``servers``, served by the plugin (registered
    as its entry point would register it)."""
    import nucleo_trio_mcp.plugin

    plugins = make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])
    config = DispatcherConfig(seed=1, mcp={"servers": servers})
    async with open_dispatcher(config, plugin_manager=plugins) as dispatcher:
        yield dispatcher


async def test_the_servers_of_a_dispatchers_config_are_its_own() -> None:
    """Declared in the dispatcher's configuration, the servers start on first use, serve its
    jobs, and stop with it."""
    async with serving(kit=stdio("kit")) as dispatcher:
        servers = McpServers.of(dispatcher)
        assert servers["kit"].starts == 0
        (add,) = [cls for cls in await servers.tools() if cls.tool_name == "add"]
        result = await dispatcher.submit(add(workflow("u", "cfg"), {"a": 1, "b": 2})).result()
        assert result == "3" and servers["kit"].starts == 1
    assert not servers["kit"].is_connected
    with pytest.raises(McpServerError, match="closed"):
        await servers["kit"].connect()


async def test_the_two_gates_are_rows_of_the_health_report() -> None:
    """While a call holds its slots, the health report shows mcp:<name> and mcp:stdio as rows
    with one in use each (as for any account a demand names, while it is held or waited on)."""
    async with serving(kit=stdio("kit", max_concurrent=4)) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        slow = servers["kit"].tool("slow")
        handle = dispatcher.submit(slow(workflow("u", "health"), {"seconds": 1}))
        await servers["kit"].gate.use.wait_value(1)
        rows = {row.name: row for row in dispatcher.health().limiters}
        assert rows["mcp:kit"].used == 1 and rows["mcp:kit"].capacity == 4
        assert rows["mcp:stdio"].used == 1 and rows["mcp:stdio"].capacity == 20
        await handle.result()
        assert servers["kit"].gate.in_use == servers.pool.in_use == 0


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_tool_list_that_changes_is_listed_again(protocol: str) -> None:
    """The server adds a tool and says so (the change stream of a 2026 connection, the notice
    of a 2025 one): the tools are listed again and the new one is a job class like the rest.
    It removes one: its class refuses calls before admission, and the listings say it is
    gone."""
    async with serving(kit=stdio("kit", protocol=protocol)) as dispatcher:
        servers = McpServers.of(dispatcher)
        kit = servers["kit"]
        await kit.list_tools()
        assert kit.listings.value == 1 and "twice" not in kit.tools
        root = workflow("u", "change")
        await dispatcher.submit(kit.tool("grow")(root, {"name": "twice"})).result()
        await kit.listings.wait_value(lambda n: n >= 2)
        twice = kit.tool("twice")
        assert twice.parameters["required"] == ["text"] and twice.offered
        assert await dispatcher.submit(twice(root, {"text": "ab"})).result() == "abab"

        seen = kit.listings.value
        await dispatcher.submit(kit.tool("shrink")(root, {"name": "twice"})).result()
        await kit.listings.wait_value(lambda n: n > seen)
        assert "twice" not in kit.tools and not twice.offered
        with pytest.raises(McpArgumentsError, match="no longer offers twice"):
            await dispatcher.submit(twice(root, {"text": "ab"})).result()
        assert kit.starts == 1


async def test_each_call_is_a_span_with_its_admission_through_the_otel_plugin() -> None:
    """With the OpenTelemetry plugin, each call is a span named after its tool class, carrying
    its grant on the server's gates as span events."""
    import nucleo_trio_mcp.plugin
    from nucleo_trio_otel import OpenTelemetryPlugin
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plugins = make_plugin_manager(
        load_entrypoints=False,
        plugins=[nucleo_trio_mcp.plugin, OpenTelemetryPlugin(tracer_provider=provider)],
    )
    config = DispatcherConfig(seed=1, mcp={"servers": {"kit": stdio("kit")}})
    async with open_dispatcher(config, plugin_manager=plugins) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        add = servers["kit"].tool("add")
        assert await dispatcher.submit(add(workflow("u", "span"), {"a": 1, "b": 1})).result() == "2"
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "kit.add"]
    assert span.attributes is not None and span.attributes["job.state"] == "COMPLETED"
    assert "limiter.granted_immediate" in [event.name for event in span.events]
