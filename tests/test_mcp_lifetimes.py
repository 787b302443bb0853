"""The MCP plugin's lifetimes and failures against real server processes: a server killed
mid-call is started again and the call re-run; a call cancelled or timed out tells the server
and gives its slot back; the processes are the dispatcher's and none outlives it, however it
stops (its end, a cancelled block, Ctrl-C), as the process table shows.

Real processes on the real clock: the tests assert outcomes, never durations.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio
from nucleo_trio_mcp import McpServers

from nucleo_trio.bus import events as ev
from nucleo_trio.errors import JobTimeoutError, UncorrectableError
from nucleo_trio.jobs import JobState, workflow

from .test_mcp_servers import serving, stats, stdio

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 120  # seconds: only so a broken build fails instead of hanging


def gone(pid: int) -> bool:
    """Whether the process table no longer holds ``pid`` (a zombie still counts as there)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_DEAD
    except psutil.NoSuchProcess:
        return True


async def server_pid(dispatcher: object, servers: McpServers, name: str = "kit") -> int:
    pid_tool = servers[name].tool("pid")
    result = await dispatcher.submit(pid_tool(workflow("u", "pid"))).result()  # type: ignore[attr-defined]
    return int(result)


async def in_flight(dispatcher: object, servers: McpServers, *, calls: int) -> None:
    """Return once the server has seen ``calls`` calls of slow in all (the server says so)."""
    started = servers["kit"].tool("started")(workflow("u", "started"), {"calls": calls})
    await dispatcher.submit(started).result()  # type: ignore[attr-defined]


async def test_a_server_killed_mid_call_is_started_again_and_the_call_re_run() -> None:
    """SIGKILL while a call runs: the call's attempt fails as an upstream failure (a re-run
    event), the plugin starts the server again, the re-run succeeds on the new process, and the
    killed one is gone from the process table."""
    retries: list[ev.JobEvent] = []
    async with serving(kit=stdio("kit")) as dispatcher:
        dispatcher.bus.subscribe(retries.append, event_type=ev.TransientErrorRetryEvent)
        servers = McpServers.of(dispatcher)
        await servers.tools()
        first = await server_pid(dispatcher, servers)
        slow = servers["kit"].tool("slow")
        handle = dispatcher.submit(slow(workflow("u", "killed"), {"seconds": 1.5}))
        await in_flight(dispatcher, servers, calls=1)
        os.kill(first, signal.SIGKILL)
        assert await handle.result() == "slept 1.5 s"
        assert handle.job.context.attempt == 2
        assert servers["kit"].starts == 2
        second = await server_pid(dispatcher, servers)
        assert second != first and gone(first)
        assert [e.snapshot.job_id for e in retries if e.snapshot] == [handle.job.job_id]
    assert gone(second)


async def test_a_server_that_keeps_dying_fails_the_call_once_the_budget_is_spent() -> None:
    """Each attempt kills the server; every re-run starts it again, and the last failure is the
    job's, uncorrectable, once its upstream budget is spent."""
    async with serving(kit=stdio("kit")) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        crash = servers["kit"].tool("crash")(workflow("u", "crash"))
        crash.upstream_retries = 1
        handle = dispatcher.submit(crash)
        with pytest.raises(UncorrectableError, match="exhausted its transparent retry budget"):
            await handle.result()
        assert servers["kit"].starts == 2
    assert not servers["kit"].is_connected


async def test_a_timed_out_call_tells_the_server_and_gives_its_slot_back() -> None:
    async with serving(kit=stdio("kit")) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        call = servers["kit"].tool("slow")(workflow("u", "late"), {"seconds": 60})
        call.timeout = 2.0
        handle = dispatcher.submit(call)
        await in_flight(dispatcher, servers, calls=1)
        with pytest.raises(JobTimeoutError):
            await handle.result()
        assert handle.state is JobState.TIMED_OUT
        assert servers["kit"].gate.in_use == 0 and servers.pool.in_use == 0
        counted = await stats(servers)
        assert counted["cancelled"] == 1 and counted["in_flight"] == 0


async def test_a_cancelled_call_tells_the_server_and_gives_its_slot_back() -> None:
    async with serving(kit=stdio("kit", max_concurrent=2)) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        slow = servers["kit"].tool("slow")
        root = workflow("u", "stop")
        handle = dispatcher.submit(slow(root, {"seconds": 60}))
        await in_flight(dispatcher, servers, calls=1)
        assert handle.cancel("the user pressed stop")
        with pytest.raises(Exception, match="the user pressed stop"):
            await handle.result()
        assert handle.state is JobState.CANCELLED
        assert servers["kit"].gate.in_use == 0
        counted = await stats(servers)
        assert counted["cancelled"] == 1 and counted["in_flight"] == 0


async def test_no_server_process_outlives_its_dispatcher() -> None:
    """The processes stop with the dispatcher: after its block ends normally, and after the
    block is cancelled with calls in flight (which settle as cancelled)."""
    async with serving(a=stdio("kit"), b=stdio("notes")) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers.tools()
        pids = [await server_pid(dispatcher, servers, "a")]
    assert all(gone(pid) for pid in pids)
    assert not any(server.is_connected for server in servers.values())

    with trio.CancelScope() as block:
        async with serving(kit=stdio("kit")) as dispatcher:
            servers = McpServers.of(dispatcher)
            await servers.tools()
            pid = await server_pid(dispatcher, servers)
            handle = dispatcher.submit(
                servers["kit"].tool("slow")(workflow("u", "cut"), {"seconds": 60})
            )
            await servers["kit"].gate.use.wait_value(1)
            block.cancel()
            await trio.sleep_forever()
    assert block.cancelled_caught
    assert handle.state is JobState.CANCELLED
    assert gone(pid)


async def test_a_server_set_to_start_at_start_is_up_when_the_dispatcher_runs() -> None:
    async with serving(kit=stdio("kit", start="at_start"), later=stdio("kit")) as dispatcher:
        servers = McpServers.of(dispatcher)
        await servers["kit"].listings.wait_value(1)
        assert servers["kit"].is_connected and servers["kit"].starts == 1
        assert servers["later"].starts == 0
        pid = await server_pid(dispatcher, servers)
    assert gone(pid)


@pytest.mark.parametrize("attempt", range(3))  # where the signal lands varies run to run
def test_ctrl_c_stops_every_server_process(attempt: int) -> None:
    """SIGINT to a program with a call in flight on each of two servers: the calls settle as
    cancelled, the program exits 130, and neither server process is left. (Where the signal
    lands varies: in the program's own task, or in one of the SDK's, whose connection hands it
    on to the program.)"""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.programs.mcp_ctrl_c"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("ready"):
            break
    else:
        proc.wait(HANG_BOUND)
        pytest.fail(f"never ready: {''.join(seen)} {proc.stderr and proc.stderr.read()}")
    pids = [int(pid) for pid in seen[-1].split("pids=")[1].split(",")]
    assert all(not gone(pid) for pid in pids)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_BOUND)
    assert proc.returncode == 130, (out, err)
    assert out.strip().splitlines()[-1] == "interrupted states=CANCELLED,CANCELLED", (out, err)
    assert all(gone(pid) for pid in pids), [psutil.Process(p).status() for p in pids if not gone(p)]
