"""A thinker over two MCP servers' tools, with a scripted model: the model sees each tool's
name, description and schema, each call it makes is a job on its server, and a call the schema
refuses comes back as a correction the model acts on instead of ending the run.

The servers are real processes (tests/mcp_test_server.py); the model is the pytest plugin's
``scripted_llm``, which answers the fixture dispatcher's model calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nucleo_trio_mcp.plugin
import pluggy
import pytest
from nucleo_trio_mcp import McpServers

from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher
from nucleo_trio.errors import CORRECTABLE_SUFFIX
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Thinker, ThinkerDeclaration, reply
from nucleo_trio.llm.clients import Role, ToolCall
from nucleo_trio.models import Grade, OutputSize
from nucleo_trio.plugins import make_plugin_manager
from nucleo_trio.testing import ScriptedLLMFactory

pytest_plugins = ["nucleo_trio.testing.pytest_plugin"]

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))
CONFIG = DispatcherConfig(
    seed=1,
    mcp={
        "servers": {
            name: {"command": sys.executable, "args": [SERVER, name]} for name in ("kit", "notes")
        }
    },
)


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@pytest.fixture
def nucleo_dispatcher_config() -> DispatcherConfig:
    """The fixture dispatcher declares the two servers."""
    return CONFIG


@pytest.fixture
def nucleo_plugin_manager() -> pluggy.PluginManager:
    """The built-ins and the MCP plugin, as its entry point registers it."""
    return make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])


async def test_a_thinker_uses_two_servers_tools_and_corrects_a_refused_call(
    nucleo_dispatcher: JobDispatcher, scripted_llm: ScriptedLLMFactory
) -> None:
    servers = McpServers.of(nucleo_dispatcher)
    kit, notes = servers["kit"], servers["notes"]
    await servers.tools()
    model = scripted_llm(
        [
            # Turn 1: a sum with a word for a number (refused), and a note on the other server.
            reply(
                tool_calls=[
                    call("c1", "add", a="two", b=3),
                    call("c2", "remember", key="greeting", value="hello"),
                ]
            ),
            # Turn 2: the sum again, as the refusal asked; read the note back.
            reply(tool_calls=[call("c3", "add", a=2, b=3), call("c4", "recall", key="greeting")]),
            reply(tool_calls=[call("c5", "final_answer", answer="2 + 3 = 5; the note says hello")]),
        ]
    )
    thinker = Thinker(
        workflow("u", "two-servers"),
        ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT),
        "Add 2 and 3, and keep a greeting.",
        tools=[kit.tool("add"), notes.tool("remember"), notes.tool("recall")],
    )
    answer = await nucleo_dispatcher.submit(thinker).result()
    assert answer == "2 + 3 = 5; the note says hello"

    first, second, third = model.requests
    offered = {tool.name: tool for tool in first.tools}
    assert set(offered) == {"add", "remember", "recall", "final_answer"}
    assert offered["add"].description == "Add two integers."
    assert offered["add"].parameters == kit.tool("add").parameters
    assert offered["recall"].parameters["required"] == ["key"]

    results = {m.tool_call_id: m.content for m in second.messages if m.role is Role.TOOL}
    assert results["c1"].startswith("The arguments of add were refused:\n- a: 'two' is not of")
    assert results["c1"].endswith(CORRECTABLE_SUFFIX)
    assert results["c2"] == "kept greeting"
    results = {m.tool_call_id: m.content for m in third.messages if m.role is Role.TOOL}
    assert results["c3"] == "5" and results["c4"] == "hello"
    assert kit.starts == notes.starts == 1
    assert kit.gate.in_use == notes.gate.in_use == servers.pool.in_use == 0
