"""Round trips to Redis, counted on the server: ``MONITOR`` lines that came from a client.

A shared account's cost is mostly the round trips it pays, and what matters is how many a
grant costs *on average*: a lease answers most grants with none. ``INFO commandstats`` cannot
tell a command a client sent from one a Lua script ran (both are counted), but ``MONITOR`` can:
every command it reports is tagged with where it came from, ``[0 127.0.0.1:53412]`` for a
client and ``[0 lua]`` for a script. :func:`count_round_trips` opens a monitoring connection of
its own and counts the client-sent commands (pipelined commands count one each, so the figure
errs high, never low). ``MONITOR`` slows the server, so a benchmark counts in a round of its
own and times the others.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import trio

__all__ = ["RoundTrips", "count_round_trips"]

_LINE = re.compile(rb'^\+\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]*)"(?: "([^"]*)")?')


class RoundTrips:
    """What the monitor saw so far: client commands by name, ``EVALSHA`` calls by script
    digest (so a harness can leave out its own scripts), and the commands scripts ran."""

    def __init__(self) -> None:
        self.by_command: Counter[str] = Counter()
        self.by_script: Counter[str] = Counter()
        self.from_scripts = 0

    @property
    def total(self) -> int:
        """Every command a client sent: one round trip each."""
        return sum(self.by_command.values())

    def _saw(self, line: bytes) -> None:
        match = _LINE.match(line)
        if match is None:
            return
        if match.group(1) == b"lua":
            self.from_scripts += 1
        else:
            command = match.group(2).decode().lower()
            self.by_command[command] += 1
            if command == "evalsha" and match.group(3) is not None:
                self.by_script[match.group(3).decode().lower()] += 1


@asynccontextmanager
async def count_round_trips(url: str) -> AsyncIterator[RoundTrips]:
    """Count the commands clients send to the server at ``url`` while the block runs.

    The count is settled when the block ends: an ``ECHO`` of a marker, sent on a connection of
    its own, marks the end; every line the monitor reports before it is counted (and the marker
    itself is not).
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    counts = RoundTrips()
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(b"MONITOR\r\n")
        buffer = b""
        while b"\r\n" not in buffer:
            buffer += await stream.receive_some(4096)
        reply, buffer = buffer.split(b"\r\n", 1)
        if reply != b"+OK":
            raise RuntimeError(f"MONITOR on {host}:{port} answered {reply!r}")
        marker = f"round-trip-marker-{id(counts)}".encode()

        async def read_until_marker() -> None:
            nonlocal buffer
            while True:
                while b"\r\n" in buffer:
                    line, buffer = buffer.split(b"\r\n", 1)
                    if marker in line:
                        return
                    counts._saw(line)
                chunk = await stream.receive_some(65536)
                if not chunk:
                    raise RuntimeError("the monitor connection closed before the count settled")
                buffer += chunk

        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def reader() -> None:
                await read_until_marker()
                done.set()

            nursery.start_soon(reader)
            yield counts
            marker_stream = await trio.open_tcp_stream(host, port)
            async with marker_stream:
                command = b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (len(marker), marker)
                await marker_stream.send_all(command)
                await marker_stream.receive_some(4096)
            with trio.fail_after(30):
                await done.wait()
