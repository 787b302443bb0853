"""Two MCP servers offering tools of one name serve one thinker through each server's
``tool_prefix``. The servers are real processes (tests/mcp_test_server.py); the model is the
pytest plugin's ``scripted_llm``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nucleo_trio_mcp.plugin
import pluggy
import pytest
from nucleo_trio_mcp import McpServers

from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Thinker, ThinkerDeclaration, reply
from nucleo_trio.llm.clients import Role, ToolCall
from nucleo_trio.models import Grade, OutputSize
from nucleo_trio.plugins import make_plugin_manager
from nucleo_trio.testing import ScriptedLLMFactory

pytest_plugins = ["nucleo_trio.testing.pytest_plugin"]

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@pytest.fixture
def nucleo_dispatcher_config() -> DispatcherConfig:
    """Two copies of one server, each with its own prefix."""
    return PREFIXED


@pytest.fixture
def nucleo_plugin_manager() -> pluggy.PluginManager:
    """The built-ins and the MCP plugin, as its entry point registers it."""
    return make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])


PREFIXED = DispatcherConfig(
    seed=1,
    mcp={
        "servers": {
            name: {"command": sys.executable, "args": [SERVER, "kit"], "tool_prefix": f"{name}_"}
            for name in ("left", "right")
        }
    },
)


async def test_prefixed_tools_of_two_servers_with_one_name_serve_one_thinker(
    nucleo_dispatcher: JobDispatcher, scripted_llm: ScriptedLLMFactory
) -> None:
    """Two servers offering a tool of one name: each server's ``tool_prefix`` gives the model
    two names, and each call goes to the server its name came from, under the server's own
    name for the tool."""
    servers = McpServers.of(nucleo_dispatcher)
    left, right = servers["left"], servers["right"]
    await servers.tools()
    assert left.tool("pid").tool_name == "left_pid" and left.tool("pid").listed_name == "pid"
    model = scripted_llm(
        [
            reply(tool_calls=[call("c1", "left_pid"), call("c2", "right_pid")]),
            reply(tool_calls=[call("c3", "final_answer", answer="done")]),
        ]
    )
    thinker = Thinker(
        workflow("u", "prefixed"),
        ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT),
        "Say which processes answer.",
        tools=[left.tool("pid"), right.tool("pid")],
    )
    assert await nucleo_dispatcher.submit(thinker).result() == "done"

    first, second = model.requests
    assert {tool.name for tool in first.tools} == {"left_pid", "right_pid", "final_answer"}
    results = {m.tool_call_id: m.content for m in second.messages if m.role is Role.TOOL}
    root = workflow("u", "direct")
    for call_id, server in (("c1", left), ("c2", right)):
        direct = await nucleo_dispatcher.submit(server.tool("pid")(root)).result()
        assert results[call_id] == direct and direct.server == server.name
    assert results["c1"] != results["c2"]
