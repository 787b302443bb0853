"""An MCP tool call through admission against the SDK's ``call_tool`` directly, per call.

One stdio server (``tests/mcp_test_server.py kit``, a child process) is called two ways in the
same trio run, one call at a time, so each figure is a call's whole round trip:

- **the SDK**: ``await client.call_tool("echo", {"text": ...})`` on an ``mcp.Client`` of its
  own (a second process of the same server);
- **nucleo_trio**: the tool's job class from ``McpServers``, ``dispatcher.submit(echo(root,
  arguments))`` and ``await handle.result()``: the door, a lane, the schema check, admission of
  the server's ``mcp:<name>`` slot and the ``mcp:stdio`` pool's, the attempt, the events.

For scale, a third side submits a job that calls nothing but declares two counting gates of the
same sizes: what the dispatcher's path costs a job with resources, one at a time, before any
MCP work. The sides alternate in batches within each round, so load from elsewhere lands on all
of them. The
CPU clock is the trio thread's: the client's work on each side, not the server's (which runs in
its own process and is the same for both). Starting the servers and the dispatcher is outside
the timed sections. Run from the repository root: ``python -m benchmarks.mcp_call``, or
``python -m benchmarks.run --only mcp``.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import trio

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow
from nucleo_trio.plugins import make_plugin_manager

from ._harness import Row, Stopwatch, Timing, best, format_table, median, median_ratio, progress

NAME = "mcp"
TITLE = "an MCP call through admission vs the SDK's call_tool, per call"

SERVER = str(Path(__file__).resolve().parent.parent / "tests" / "mcp_test_server.py")
BATCHES = 5
"""Batches of calls each side makes in a round, alternating with the other side."""


class Gated(Tool[None]):
    """Calls nothing; its demand is two counting gates, as an MCP call's is."""

    endpoint = CountingGate("endpoint", 10)
    pool = CountingGate("pool", 20)

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.endpoint).require_rate_limiter(self.pool)

    async def execute(self, context: JobContext) -> None:
        return None


async def one_round(sdk: Stopwatch, jobs: Stopwatch, gated: Stopwatch, calls: int) -> None:
    """``calls`` calls each way, and as many gated no-op jobs, in alternating batches."""
    from mcp import Client, StdioServerParameters
    from nucleo_trio_mcp import McpServers

    table = {"servers": {"kit": {"command": sys.executable, "args": [SERVER, "kit"]}}}
    params = StdioServerParameters(command=sys.executable, args=[SERVER, "kit"])
    plugins = make_plugin_manager(load_entrypoints=False)
    async with (
        Client(params, cache=None) as client,
        McpServers(table) as servers,
        open_dispatcher(plugin_manager=plugins) as dispatcher,
    ):
        echo = (await servers.tools("kit")) and servers["kit"].tool("echo")
        root = workflow("bench", "mcp")
        arguments = {"text": "hello"}
        await client.call_tool("echo", arguments)  # both sides warm before anything is timed
        await dispatcher.submit(echo(root, arguments)).result()
        batch = calls // BATCHES
        for _ in range(BATCHES):
            sdk.start()
            for _ in range(batch):
                await client.call_tool("echo", arguments)
            sdk.stop()
            jobs.start()
            for _ in range(batch):
                await dispatcher.submit(echo(root, arguments)).result()
            jobs.stop()
            gated.start()
            for _ in range(batch):
                await dispatcher.submit(Gated(root)).result()
            gated.stop()


def run(quick: bool) -> list[Row]:
    try:
        import nucleo_trio_mcp  # noqa: F401
    except ImportError:
        return [Row(NAME, "not run: pip install -e plugins/nucleo-trio-mcp", 0, "")]
    calls = 250 if quick else 1_000
    rounds = 3 if quick else 5
    sdk_rounds: list[Timing] = []
    job_rounds: list[Timing] = []
    gated_rounds: list[Timing] = []
    for number in range(rounds):
        gc.collect()
        sdk, jobs, gated = Stopwatch(), Stopwatch(), Stopwatch()
        trio.run(one_round, sdk, jobs, gated, calls)
        sdk_rounds.append(sdk.elapsed)
        job_rounds.append(jobs.elapsed)
        gated_rounds.append(gated.elapsed)
        progress(
            f"  mcp round {number + 1}/{rounds} (CPU us/call): call_tool "
            f"{sdk.elapsed.per(calls).cpu:.0f}, job {jobs.elapsed.per(calls).cpu:.0f}, gated "
            f"no-op job {gated.elapsed.per(calls).cpu:.0f}"
        )
    sdk_us, job_us = best(sdk_rounds).per(calls), best(job_rounds).per(calls)
    gated_us = best(gated_rounds).per(calls)
    label = f"stdio, one call at a time, {calls:,} calls x {rounds} rounds"
    return [
        Row.timed(
            NAME,
            f"SDK: client.call_tool, {label}",
            sdk_us,
            "us/call",
            median=median(sdk_rounds).per(calls),
        ),
        Row.timed(
            NAME,
            f"nucleo_trio: McpTool job, submit + await result, {label}",
            job_us,
            "us/call",
            median=median(job_rounds).per(calls),
        ),
        Row.timed(NAME, "added by the job (job - call_tool)", job_us - sdk_us, "us/call"),
        Row.timed(
            NAME,
            "for scale: a no-op job holding two gates, one at a time",
            gated_us,
            "us/job",
            median=median(gated_rounds).per(calls),
        ),
        Row.timed(
            NAME,
            "job / call_tool",
            job_us / sdk_us,
            "x",
            median=median_ratio(job_rounds, sdk_rounds),
        ),
    ]


if __name__ == "__main__":
    print(format_table(run("--quick" in sys.argv)))
