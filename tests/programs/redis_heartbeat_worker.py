"""A worker process for the Redis heartbeat tests: its own ``trio.run``, its own dispatcher on
the Redis heartbeat store, and the schedule every worker publishes at its start.

Run as ``python -m tests.programs.redis_heartbeat_worker URL --prefix P --period S --log FILE``.
Once its dispatcher is up the worker prints ``ready`` and reads one line from stdin: three epoch
instants, ``ANCHOR UNTIL STALL_AFTER`` (``inf`` for no stall), so a parent can start every
worker and then give them all the same instants, however long each took to start. It then
publishes the heartbeat ``pulse`` (anchored at ``ANCHOR``, every ``--period`` seconds) and runs
until the wall clock reaches ``UNTIL``; then it shuts down and exits 0. Each fire it makes is
appended to ``--log`` as ``fired <run_at> <pid>``, from the ``HeartbeatFired`` event. The
store's warnings go to stderr.

With ``--stall-marker PATH``, the first fire any worker builds at or after ``STALL_AFTER``
stalls: the job's constructor (which the Heart runs inside the fire, after the
slot was claimed and before it was submitted) creates ``PATH`` exclusively, writes its pid
there, and blocks the whole process, as a worker hung mid-fire would be, until the test kills
it. Only one worker can create the marker, so the slot, once another worker takes it over,
fires normally.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Sequence

import trio

from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.heartbeat import FixedInterval, HeartbeatFired, ScheduleHeartbeat
from nucleo_trio.jobs import Identifiable, JobContext, Tool

STALL: dict[str, str | float | None] = {"marker": None, "after": math.inf}
"""Where and from when the first fire stalls (set by :func:`main` from the arguments)."""


class Pulse(Tool[str]):
    """The fired job. Its constructor stalls the first fire after ``--stall-after`` (see the
    module documentation); the job itself does nothing but return."""

    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        marker = STALL["marker"]
        after = STALL["after"]
        if isinstance(marker, str) and isinstance(after, float) and time.time() >= after:
            try:
                descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(descriptor, str(os.getpid()).encode())
            os.close(descriptor)
            time.sleep(600)  # hung mid-fire: the slot is claimed and not yet submitted

    async def execute(self, context: JobContext) -> str:
        return "pulse"


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"a finite number, got {text!r}")
    return value


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="redis_heartbeat_worker", description=__doc__)
    parser.add_argument("url", help="the Redis URL of the heartbeat store")
    parser.add_argument("--prefix", required=True, help="the store's key prefix")
    parser.add_argument("--period", type=_finite, required=True, help="seconds between slots")
    parser.add_argument("--log", required=True, help="the file each fire is appended to")
    parser.add_argument("--claim-ttl", type=_finite, default=1.0, help="the store's claim_ttl")
    parser.add_argument("--timeout", type=_finite, default=1.0, help="the store's timeout")
    parser.add_argument("--stall-marker", default=None, help="see the module documentation")
    return parser.parse_args(argv)


async def _run(arguments: argparse.Namespace) -> None:
    config = DispatcherConfig(
        heartbeat=HeartbeatConfig(
            kind="redis",
            settings={
                "url": arguments.url,
                "prefix": arguments.prefix,
                "claim_ttl": arguments.claim_ttl,
                "timeout": arguments.timeout,
            },
            # Every worker holds the same key; a real deployment reads it from its secrets
            # through signing_key_env.
            signing_key="a test key, never a real one",
        )
    )
    log = os.open(arguments.log, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    pid = os.getpid()

    def note(event: HeartbeatFired) -> None:
        os.write(log, f"fired {event.heartbeat.run_at!r} {pid}\n".encode())

    try:
        async with open_dispatcher(config) as dispatcher:
            dispatcher.bus.subscribe(note, event_type=HeartbeatFired)
            print("ready", flush=True)
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            anchor, until, stall_after = (float(word) for word in line.split())
            STALL["after"] = stall_after
            dispatcher.schedule_heartbeat(
                ScheduleHeartbeat(
                    Pulse, "pulse", anchor, recurrence=FixedInterval(arguments.period)
                ),
                "ops",
            )
            await trio.sleep(max(0.0, until - time.time()))
    finally:
        os.close(log)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments, start the dispatcher, say ``ready``, read the instants, and run
    the worker until the last of them."""
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    STALL["marker"] = arguments.stall_marker
    trio.run(_run, arguments)


if __name__ == "__main__":
    # Run through the module's own name, so the job class the store names by import path is
    # tests.programs.redis_heartbeat_worker:Pulse in every worker, not __main__:Pulse.
    from tests.programs.redis_heartbeat_worker import main as _main

    _main()
