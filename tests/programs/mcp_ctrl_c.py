"""A user's program for the MCP Ctrl-C test: a dispatcher whose configuration declares two
stdio servers (tests/mcp_test_server.py), one call in flight on each. It prints
``ready pids=<a>,<b>`` once both calls run, then waits for them; on Ctrl-C it prints what became
of the calls and exits with status 130. The test then looks for the two server processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nucleo_trio_mcp.plugin
import trio
from nucleo_trio_mcp import McpServers

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import JobState, workflow
from nucleo_trio.plugins import make_plugin_manager

SERVER = str(Path(__file__).resolve().parent.parent / "mcp_test_server.py")


async def main() -> None:
    servers_table = {
        name: {"command": sys.executable, "args": [SERVER, "kit"]} for name in ("a", "b")
    }
    config = DispatcherConfig(mcp={"servers": servers_table})
    plugins = make_plugin_manager(load_entrypoints=False, plugins=[nucleo_trio_mcp.plugin])
    handles = []
    try:
        async with open_dispatcher(config, plugin_manager=plugins) as dispatcher:
            servers = McpServers.of(dispatcher)
            await servers.tools()
            root = workflow("u", "ctrl-c")
            pids = [
                await dispatcher.submit(servers[name].tool("pid")(root)).result()
                for name in ("a", "b")
            ]
            handles = [
                dispatcher.submit(servers[name].tool("slow")(root, {"seconds": 300}))
                for name in ("a", "b")
            ]
            for name in ("a", "b"):
                await servers[name].gate.use.wait_value(1)
            print(f"ready pids={','.join(pids)}", flush=True)
            for handle in handles:
                await handle.result()
    except KeyboardInterrupt:
        states = ",".join(handle.state.name for handle in handles)
        print(f"interrupted states={states}", flush=True)
        for handle in handles:
            if handle.state is not JobState.CANCELLED:
                print(f"  {handle.job.name}: {handle.error!r}", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    trio.run(main)
