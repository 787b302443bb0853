"""A user's program for the Ctrl-C tests: a dispatcher with jobs running, parked on a gate and
waiting on a dependency, on the real clock. It prints ``ready`` when the jobs are in place,
then waits where ``argv[1]`` says: ``block`` (the main task awaits a handle in the block),
``shutdown`` (a graceful ``shutdown()`` waits for the running jobs) or ``exit`` (the block has
ended normally and waits, as a nursery does, for every job to settle). On
Ctrl-C it prints one line describing what it can see and exits with status 130.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, JobHandle, JobRequirements, Tool, workflow

gate = CountingGate("slot", 1)
handles: list[JobHandle[Any]] = []
terminal: dict[str, int] = {}


class Hold(Tool[str]):
    timeout = 600.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(gate)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(500)
        return "held"


class Nap(Tool[str]):
    timeout = 600.0

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(500)
        return "slept"


def count(event: ev.JobEvent) -> None:
    if isinstance(event, ev.TerminalEvent) and event.snapshot is not None:
        terminal[event.snapshot.job_id] = terminal.get(event.snapshot.job_id, 0) + 1


async def main(where: str) -> None:
    async with open_dispatcher(DispatcherConfig(shutdown_timeout=300)) as d:
        d.bus.subscribe(count)
        running = d.submit(Hold(workflow("u", "running")))
        handles.append(running)
        handles.append(d.submit(Hold(workflow("u", "parked"))))
        handles.append(d.submit(Nap(workflow("u", "dep")), dependencies=[running]))
        handles.append(d.submit(Nap(workflow("u", "free"))))
        await trio.sleep(0.2)
        print("ready", flush=True)
        if where == "block":
            await running.result()
        elif where == "shutdown":
            await d.shutdown()  # waits up to 300 s for the running jobs
    # where == "exit": leaving the block waits for every job (500 s of sleeps) to settle


if __name__ == "__main__":
    try:
        trio.run(main, sys.argv[1])
    except KeyboardInterrupt as exc:
        states = sorted(h.state.value for h in handles)
        print(
            f"interrupted type={type(exc).__name__} settled={sum(h.done for h in handles)}"
            f"/{len(handles)} states={','.join(states)} "
            f"terminal={sorted(terminal.values())} in_use={gate.in_use}",
            flush=True,
        )
        sys.exit(130)
    print("not interrupted", flush=True)
