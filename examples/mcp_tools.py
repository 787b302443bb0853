"""A thinker over the tools of two MCP servers, each a child process spoken to over stdio.

Needs the nucleo-trio-mcp plugin (it brings the official mcp SDK):
pip install -e plugins/nucleo-trio-mcp. The program is also its own servers (``--serve facts``,
``--serve units``), written with the SDK's ``MCPServer``. The dispatcher's configuration
declares both; listing them makes each tool a job class the thinker offers its model, here a
scripted one (no API key): it asks one server for a distance, the other to convert it, then
answers. Each call is a job admitted on its server's ``mcp:<name>`` gate and the ``mcp:stdio``
pool. Run from the repository root: python examples/mcp_tools.py"""

from __future__ import annotations

import json
import sys

import trio

from nucleo_trio.bus import JobCompletedEvent
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Thinker, ThinkerDeclaration, reply
from nucleo_trio.llm.clients import LLMRequest, LLMResponse, Role, ToolCall
from nucleo_trio.models import Grade, OutputSize
from nucleo_trio.testing import ScriptedLLMFactory

try:
    from mcp.server.mcpserver import MCPServer
    from nucleo_trio_mcp import McpServers, McpToolResult
except ModuleNotFoundError as missing:  # one line saying what to install, not a traceback
    sys.exit(f"{missing.name} is missing: pip install -e plugins/nucleo-trio-mcp")

ROADS_KM = {("Lyon", "Paris"): 465.0, ("Lyon", "Marseille"): 315.0}


def serve(name: str) -> None:
    """Be one of the two servers, on stdin and stdout."""
    server: MCPServer = MCPServer(name, log_level="WARNING")
    if name == "facts":

        @server.tool()
        def road_distance(a: str, b: str) -> float:
            """The road distance between two French cities, in kilometres."""
            return ROADS_KM[(min(a, b), max(a, b))]
    else:

        @server.tool()
        def km_to_miles(km: float) -> float:
            """Kilometres in miles, to two decimals."""
            return round(km / 1.609344, 2)

    server.run()


def model(request: LLMRequest) -> LLMResponse:
    """A scripted stand-in for a model: one tool call a turn, then the answer."""
    said = [message.content for message in request.messages if message.role is Role.TOOL]
    if not said:
        call = ToolCall(id="1", name="road_distance", arguments='{"a": "Paris", "b": "Lyon"}')
    elif len(said) == 1:
        call = ToolCall(id="2", name="km_to_miles", arguments=json.dumps({"km": float(said[0])}))
    else:
        answer = f"Paris to Lyon is {said[0]} km by road, {said[1]} miles."
        call = ToolCall(id="3", name="final_answer", arguments=json.dumps({"answer": answer}))
    return reply(tool_calls=[call])


async def main() -> None:
    servers = {  # each a [mcp.servers.NAME] table, in a configuration file
        name: {"command": sys.executable, "args": [__file__, "--serve", name], "max_concurrent": 2}
        for name in ("facts", "units")
    }
    config = DispatcherConfig(mcp={"stdio_pool_max": 2, "servers": servers})
    scripted = ScriptedLLMFactory()
    scripted(responder=model)
    completed: list[JobCompletedEvent] = []
    async with open_dispatcher(config) as dispatcher:
        dispatcher.models.providers.register(scripted.provider())
        dispatcher.models.use_catalog(scripted.catalog())
        dispatcher.bus.subscribe(completed.append, event_type=JobCompletedEvent)
        tools = await McpServers.of(dispatcher).tools()  # starts both servers, lists their tools
        print("tools:", ", ".join(f"{tool.server_name}.{tool.tool_name}" for tool in tools))
        thinker = Thinker(
            workflow("example", "mcp"),
            ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT),
            "How far is Paris from Lyon by road, in miles?",
            tools=tools,
        )
        answer = await dispatcher.submit(thinker).result()
    for result in (event.result for event in completed):  # all delivered once the block ended
        if isinstance(result, McpToolResult):
            print(f"{result.server}.{result.tool} returned {result}")
    print(f"answer: {answer}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        trio.run(main)
