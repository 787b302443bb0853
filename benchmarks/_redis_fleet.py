"""A fleet of worker processes on one Redis: start them, start them *together*, collect them.

Each worker is ``python -m tests.programs.redis_worker`` (its own interpreter, its own
``trio.run``, its own dispatcher). Starting an interpreter and importing the runtime takes a
second or more, and on a busy machine four of them finish at different times, so a worker does
not start its load when it is ready: it prints a ``ready`` line and waits for one line on its
stdin, an instant on the Redis server's clock. :meth:`Fleet.go` waits until every worker is
ready and hands all of them the same instant, a little ahead, so the load begins at once
everywhere and the checks can measure from that instant.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ._redis_quota import MICROS, UPSTREAM_LOG_SCRIPT, redis_now_us
from ._redis_roundtrips import RoundTrips

__all__ = [
    "ROOT",
    "Fleet",
    "WorkerProcess",
    "harness_commands",
    "open_fleet",
    "worker_command",
]

ROOT = Path(__file__).resolve().parent.parent


def harness_commands(trips: RoundTrips) -> int:
    """The commands a fleet's own bookkeeping sent, to leave out of an account's round trips:
    the jobs' stamps (``EVALSHA`` of :data:`~benchmarks._redis_quota.UPSTREAM_LOG_SCRIPT`), the
    clock reads (``EVAL`` of ``TIME``) and script loads. An account whose own scripts fell back
    to ``EVAL`` would be undercounted by those few."""
    stamps = trips.by_script[hashlib.sha1(UPSTREAM_LOG_SCRIPT.encode()).hexdigest()]
    return stamps + trips.by_command["eval"] + trips.by_command["script"]


def worker_command(url: str, name: str, arguments: Sequence[str]) -> list[str]:
    """The command line of one worker process."""
    return [sys.executable, "-m", "tests.programs.redis_worker", url, "--worker", name, *arguments]


class WorkerProcess:
    """One running worker: its process and the JSON lines it prints."""

    def __init__(self, name: str, process: trio.Process) -> None:
        self.name = name
        self.process = process
        self._buffer = b""
        self.lines: list[dict[str, Any]] = []

    async def next_line(self) -> dict[str, Any]:
        """The next JSON line the worker prints; an error naming it if it exits first."""
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._buffer:
            chunk = await stdout.receive_some(65536)
            if not chunk:
                raise RuntimeError(
                    f"worker {self.name} exited ({self.process.poll()}) before printing a line"
                )
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        parsed: dict[str, Any] = json.loads(line)
        self.lines.append(parsed)
        return parsed

    async def next_event(self, event: str) -> dict[str, Any]:
        """The next line of the worker's that reports ``event``, skipping any others."""
        while True:
            line = await self.next_line()
            if line.get("event") == event:
                return line

    async def send(self, text: str) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        await stdin.send_all(text.encode() + b"\n")


class Fleet:
    """The workers of one run, by name."""

    def __init__(
        self, url: str, workers: dict[str, WorkerProcess], clock_url: str | None = None
    ) -> None:
        self.url = url
        self.clock_url = clock_url or url
        """The Redis whose clock the start instant is read on (the workers' log's)."""
        self.workers = workers
        self.killed: set[str] = set()

    async def go(self, lead: float = 0.3, names: Sequence[str] | None = None) -> int:
        """Wait until every worker (or those in ``names``) is ready, then start them all
        ``lead`` seconds from now on the server's clock; the start instant (µs of Redis time).
        Starting some first lets a test put them in place before the others begin."""
        chosen = [self.workers[name] for name in (names if names is not None else self.workers)]
        for worker in chosen:
            await worker.next_event("ready")
        import coredis  # where used: benchmarks.run loads this module without the plugin

        client = coredis.Redis.from_url(self.clock_url)
        async with client:
            start_us = await redis_now_us(client) + round(lead * MICROS)
        for worker in chosen:
            await worker.send(str(start_us))
        return start_us

    async def stop(self, name: str) -> None:
        """Tell one worker to end its run now, as if its duration had passed."""
        await self.workers[name].send("stop")

    async def kill(self, name: str) -> None:
        """SIGKILL one worker, as a crash would, and wait until it is gone."""
        process = self.workers[name].process
        process.send_signal(signal.SIGKILL)
        await process.wait()
        self.killed.add(name)

    async def finish(self) -> dict[str, dict[str, Any]]:
        """Wait for every worker not killed to print its summary and exit 0 (the caller bounds
        the wait with a deadline of its own)."""
        summaries: dict[str, dict[str, Any]] = {}
        for name, worker in self.workers.items():
            if name in self.killed:
                continue
            line = await worker.next_event("done")
            status = await worker.process.wait()
            if status != 0 or line.get("event") != "done":
                raise RuntimeError(f"worker {name} ended with {status}: {line!r}")
            summaries[name] = line
        return summaries


@asynccontextmanager
async def open_fleet(
    url: str, workers: Mapping[str, Sequence[str]], *, clock_url: str | None = None
) -> AsyncIterator[Fleet]:
    """Start one worker process per entry (name: its arguments) on the Redis at ``url``; every
    one still running when the block ends is killed, and every one is waited for. Start
    instants are read on ``clock_url``'s clock (the workers' ``--log-url``), else ``url``'s."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    started: dict[str, WorkerProcess] = {}
    try:
        for name, arguments in workers.items():
            process = await trio.lowlevel.open_process(
                worker_command(url, name, arguments),
                cwd=ROOT,
                env=environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            started[name] = WorkerProcess(name, process)
        yield Fleet(url, started, clock_url)
    finally:
        for worker in started.values():
            if worker.process.returncode is None:
                worker.process.kill()
            with trio.CancelScope(shield=True):
                await worker.process.wait()
