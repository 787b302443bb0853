"""A service for tests/test_top_in_processes.py: a dispatcher on the real clock with its control
socket at the default place (``default_socket_path``, made if need be), one job holding the
``batch`` gate and one holding ``render``.

It prints ``ready PATH`` once both jobs run. A line on its standard input lets the ``batch`` job
finish: admission then forgets the gate, and it prints ``idle``. When its standard input closes
it lets the ``render`` job finish, leaves the block (the socket is removed) and prints
``stopped``.
"""

from __future__ import annotations

import sys

import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import DispatcherConfig, MemoryConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow
from nucleo_trio.observability.control import default_socket_path

batch = CountingGate("batch", 2)
render = CountingGate("render", 1)


class Hold(Tool[None]):
    """Holds one permit of ``gate`` until ``until`` is set."""

    timeout = 600.0

    def __init__(self, parent: Identifiable, gate: CountingGate, until: trio.Event) -> None:
        super().__init__(parent)
        self.gate, self.until = gate, until

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.gate)

    async def execute(self, context: JobContext) -> None:
        await self.until.wait()


async def read_line() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def main() -> None:
    path = default_socket_path(make=True)
    config = DispatcherConfig(control_socket=str(path), memory=MemoryConfig(enabled=False))
    async with open_dispatcher(config) as dispatcher:
        root = workflow("dana", "posters")
        batch_done, render_done = trio.Event(), trio.Event()
        batched = dispatcher.submit(Hold(root, batch, batch_done))
        dispatcher.submit(Hold(root, render, render_done))
        await trio.testing.wait_all_tasks_blocked()
        assert batch.in_use == render.in_use == 1
        print(f"ready {path}", flush=True)
        await read_line()
        batch_done.set()
        await batched.result()
        await trio.testing.wait_all_tasks_blocked()
        assert all(account is not batch for account in dispatcher.admission.accounts())
        print("idle", flush=True)
        while await read_line():  # until the standard input closes
            pass
        render_done.set()
    print("stopped", flush=True)


if __name__ == "__main__":
    trio.run(main)
