"""Submitting large dependency graphs: the time ``submit`` spends refusing cycles.

``submit`` refuses a dependency list that closes a cycle. A job being submitted can close one
only if a live job already names it as a dependency (by its job object, before it was
submitted), so the search runs only then, and it is one iterative walk with a visited set.
Two graphs of 10,000 jobs, each submitted by handle (no job named ahead, so no walk runs),
then one job that a live job already waits for, depending on the graph's top, so the walk
visits every live job once:

* **a chain**: each job depends on the one before; the old recursive search raised
  ``RecursionError`` near 1,000 live jobs.
* **a layered diamond DAG**: 21 layers of about 476 jobs, each depending on two of the layer
  below; the old search, with no visited set and a copy of the path at every step, took 4 to
  5 s inside ``submit`` on 21 layers of a far smaller graph.

Timed: every ``submit`` call (the jobs run afterwards, outside the timed section).

Target: both together well under one second of CPU on the trio thread.
"""

from __future__ import annotations

from typing import Any

import trio

from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, Tool, workflow

from ._harness import Row, Stopwatch, Timing, best, progress, run_trio, verdict

NAME = "graph_submit"
TITLE = "submitting a 10,000-job chain and a 10,000-job DAG (cycle refusal cost)"

JOBS = 10_000
LAYERS = 21
TARGET_SECONDS = 1.0


class _Leaf(Tool[int]):
    timeout = 60.0

    async def execute(self, context: JobContext) -> int:
        return 0


async def _submit_and_close(watch: Stopwatch, n: int, shape: str) -> None:
    """Submit ``n`` jobs as ``shape`` by handle (no walk can run), then one job that a live
    job already waits for, with the graph's top as its dependencies: one walk over it all."""
    async with open_dispatcher() as d:
        root = workflow("bench", shape)
        closer = _Leaf(root)
        waiter = d.submit(_Leaf(root), dependencies=[closer])  # names the closer ahead
        watch.start()
        handles: list[Any] = []
        if shape == "chain":
            handles.append(d.submit(_Leaf(root)))
            for _ in range(n - 1):
                handles.append(d.submit(_Leaf(root), dependencies=[handles[-1]]))
            top = [handles[-1]]
        else:
            width = max(2, n // LAYERS)
            below = [d.submit(_Leaf(root)) for _ in range(width)]
            handles.extend(below)
            for _ in range(LAYERS - 1):
                layer = [
                    d.submit(_Leaf(root), dependencies=[below[i], below[(i + 1) % width]])
                    for i in range(width)
                ]
                handles.extend(layer)
                below = layer
            top = below
        watch.stop()
        watch.start()
        d.submit(closer, dependencies=top)  # the walk: every live job once
        watch.stop()
        await waiter.result()


SHAPES = (
    ("chain", "a chain"),
    ("diamond", f"a {LAYERS}-layer diamond DAG"),
)


def run(quick: bool) -> list[Row]:
    n = JOBS // 5 if quick else JOBS
    rounds = 2 if quick else 3
    rows: list[Row] = []
    total_cpu = 0.0
    for shape, label in SHAPES:
        timings: list[Timing] = []
        for _ in range(rounds):

            async def main(watch: Stopwatch, shape: str = shape) -> None:
                await _submit_and_close(watch, n, shape)

            timings.append(run_trio(main, clock=trio.testing.MockClock(autojump_threshold=0)))
        fastest = best(timings)
        total_cpu += fastest.cpu
        progress(f"  {label}: {fastest.cpu * 1e3:.0f} ms CPU for {n + 1} submissions")
        rows.append(
            Row.timed(NAME, f"{label} of {n}, then one walk over it", fastest.per(1, 1e3), "ms")
        )
    rows.append(
        Row(
            NAME,
            f"both graphs, {n} jobs each",
            total_cpu,
            "s",
            target=f"< {TARGET_SECONDS:g} s",
            verdict=verdict(total_cpu < TARGET_SECONDS),
        )
    )
    return rows


if __name__ == "__main__":
    from ._harness import format_table

    print(format_table(run(quick=False)))
