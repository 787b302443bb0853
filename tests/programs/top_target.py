"""A user's service for the ``nucleo-trio top`` tests: a dispatcher on the real clock with its
control socket at ``argv[1]`` (``--default``: where ``top`` looks by default), two jobs running
on a gate of two slots, three parked behind them, and one that failed. It prints ``ready``
when they are in place, then runs until its standard input closes; it then cancels its jobs,
leaves the block, and prints ``stopped``.
"""

from __future__ import annotations

import contextlib
import sys

import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, MemoryConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

render_slots = CountingGate("render", 2)


class Render(Tool[str]):
    timeout = 600.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(render_slots)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(500)
        return "rendered"


class Publish(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        raise RuntimeError("the printer is on fire")


async def main(socket: str) -> None:
    config = DispatcherConfig(
        control_socket=socket, memory=MemoryConfig(enabled=False), shutdown_timeout=0.1
    )
    async with open_dispatcher(config) as dispatcher:
        root = workflow("carol", "posters")
        handles = [dispatcher.submit(Render(root)) for _ in range(5)]
        failed = dispatcher.submit(Publish(root))
        with trio.move_on_after(5), contextlib.suppress(RuntimeError):
            await failed.result()
        await trio.testing.wait_all_tasks_blocked()  # two running, three parked
        assert dispatcher.admission.queue_size == 3
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        # The stop refuses the parked, waits shutdown_timeout for the running, interrupts them.
        await dispatcher.shutdown()
    assert all(handle.done for handle in handles)
    print("stopped", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--default":  # where `nucleo-trio top` looks without --socket
        from nucleo_trio.observability.control import default_socket_path

        trio.run(main, str(default_socket_path(make=True)))
    else:
        trio.run(main, sys.argv[1])
