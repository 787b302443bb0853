"""Issue 21, item 7: the control socket costs what it lists, and answers only its own user.

A snapshot with thousands of jobs parked builds the rows it lists (at most ``LISTED_JOBS``
running and parked) and counts the rest, so a ``top`` against a busy dispatcher does not stall
its event loop. A peer whose uid is not the dispatcher's (``SO_PEERCRED``) is refused, whatever
the socket file's mode.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, MemoryConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow
from nucleo_trio.jobs.context import JobContext as ContextClass
from nucleo_trio.observability.control import (
    LISTED_JOBS,
    ControlServer,
    ControlSocketError,
    live_snapshot,
    request_snapshot,
)

HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging


@pytest.fixture
def place() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="nt-peer-"))
    directory.chmod(0o700)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


one = CountingGate("one", 1)


class Hold(Tool[None]):
    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(one)

    async def execute(self, context: JobContext) -> None:
        await trio.sleep(100)


async def test_a_snapshot_of_thousands_parked_builds_only_the_rows_it_lists(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 jobs on a one-slot gate: the snapshot counts 2,999 parked and builds the job
    snapshots of the listed rows only (one running, LISTED_JOBS parked), not one per job."""
    built = 0
    snapshot_of = ContextClass.snapshot

    def counting(self: Any) -> Any:
        nonlocal built
        built += 1
        return snapshot_of(self)

    config = DispatcherConfig(memory=MemoryConfig(enabled=False))
    async with open_dispatcher(config) as dispatcher:
        root = workflow("u", "crowd")
        for _ in range(3000):
            dispatcher.submit(Hold(root))
        await trio.testing.wait_all_tasks_blocked()
        monkeypatch.setattr(ContextClass, "snapshot", counting)
        snapshot = live_snapshot(dispatcher)
        monkeypatch.undo()
        await dispatcher.shutdown(1)
    assert snapshot.parked_total == 2999 and len(snapshot.parked) == LISTED_JOBS
    assert snapshot.running_total == 1 and len(snapshot.running) == 1
    assert built == LISTED_JOBS + 1


async def test_a_peer_of_another_uid_is_refused_and_the_server_serves_on(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    """The server answers only :attr:`ControlServer.allowed_uid`: with it set to a uid this
    process does not have, the request is refused naming the uid, counted, and the server goes
    on answering once the uid is the caller's again."""
    path = place / "d.sock"
    async with open_dispatcher(DispatcherConfig(memory=MemoryConfig(enabled=False))) as d:
        server = ControlServer(d, path)
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            server.allowed_uid = os.getuid() + 1
            with pytest.raises(ControlSocketError, match=f"uid {os.getuid()} may not read"):
                await request_snapshot(path)
            assert (server.refused, server.served) == (1, 0)
            server.allowed_uid = os.getuid()
            assert (await request_snapshot(path)).pid == os.getpid()
            nursery.cancel_scope.cancel()


PEER = """
import json, os, socket, sys
os.setgid(65534)
os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
# The refusal comes before any request is read: receive it without sending (a send could meet
# the socket the server already closed).
print(s.recv(65536).decode().strip())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another user")
async def test_a_real_process_of_another_user_is_refused_even_on_a_world_writable_socket(
    place: Path,
) -> None:
    """A process running as ``nobody`` connects to a socket whose file mode was opened to
    everyone (0666, its directory 0755): the kernel's peer credentials refuse it."""
    path = place / "open.sock"
    await trio.Path(place).chmod(0o755)
    async with open_dispatcher(DispatcherConfig(control_socket=str(path))):
        await trio.Path(path).chmod(0o666)
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", PEER, str(path)],
                capture_output=True,
                text=True,
                timeout=HANG_BOUND,
            )
        )
        assert (await request_snapshot(path)).pid == os.getpid()  # the owner is still answered
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer == {"ok": False, "error": "uid 65534 may not read this dispatcher"}
