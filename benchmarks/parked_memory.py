"""(l) Memory per parked job: what a job waiting in admission's line holds, at 100,000 parked.

A saturated system's normal state is a long line, and every job in it is a task with its
coroutines, its context, its handle and its place in the line. Issue 23 holds that to at most
5 KiB a job at 100,000 parked.

Each round runs in a fresh interpreter (``python -m benchmarks.parked_memory --child N``), so
memory freed by an earlier benchmark cannot be reused and hide what the jobs take. The child
opens a dispatcher with its default configuration, takes the one slot of a
``CountingGate("slot", 1)`` itself, collects garbage, and reads its resident memory
(``/proc/self/statm``), the objects the collector tracks (``len(gc.get_objects())``) and the
interpreter's allocated blocks (``sys.getallocatedblocks()``). Then it submits N jobs that each
need the slot, waits until every task is blocked, checks that admission's line holds all N,
collects garbage and reads the three again (the collector is off while the line forms: memory is
measured here, not time). Per parked job: the growth of each, over N. The child then leaves at
once (``os._exit``): cancelling 100,000 parked jobs is not what is measured. ``--quick`` parks
20,000 in one round (the figure per job is within a few percent of 100,000's).

The verdict reads the resident memory's median over the rounds (best beside it). The collector's
objects count what a parked job leaves it to walk on every full collection; the allocated blocks
count every object, tracked or not (strings, numbers, the line's entries). A traced run
(``tracemalloc``, 10,000 parked; 5,000 with ``--quick``) gives the bytes the interpreter allocated
for the jobs, without the allocator's own overhead, for context.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tracemalloc
from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from nucleo_trio.admission import CountingGate, Demand
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import workflow

from ._harness import Row, progress, verdict

NAME = "parked"
TITLE = "memory per parked job: N jobs waiting on a held one-slot gate, in a fresh interpreter"

TARGET_KIB = 5.0
"""Issue 23: resident memory per parked job at 100,000 parked."""
PARKED = 100_000
QUICK_PARKED = 20_000
TRACED = 10_000
_PAGE = resource.getpagesize()


def _resident() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


def _reading(traced: bool) -> dict[str, int]:
    # Twice: a collection untracks the tuples whose items are all untracked, but a tuple holding
    # a dict that the same pass untracks is untracked only by the next one.
    gc.collect()
    gc.collect()
    return {
        "rss": _resident(),
        "objects": len(gc.get_objects()),
        "blocks": sys.getallocatedblocks(),
        "traced": tracemalloc.get_traced_memory()[0] if traced else 0,
    }


async def _park(n: int, traced: bool) -> dict[str, Any]:
    from .admission_scaling import NeedsSlot

    gate = CountingGate("slot", 1)
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        root = workflow("bench", "parked")
        held = await dispatcher.admission.admit(Demand().add(gate))
        await trio.testing.wait_all_tasks_blocked()
        if traced:
            tracemalloc.start()
        before = _reading(traced)
        # Memory is measured, not time: with the collector off while the line forms, parking
        # 100,000 jobs does not pay a full collection over a growing heap every few thousand
        # jobs. The reading after collects whatever cycles were left.
        gc.disable()
        handles = [dispatcher.submit(NeedsSlot(root, gate)) for _ in range(n)]
        await trio.testing.wait_all_tasks_blocked()
        parked = dispatcher.admission.queue_size
        after = _reading(traced)
        if parked != n:
            raise RuntimeError(f"parked benchmark: {parked} jobs parked, expected {n}")
        result = {key: (after[key] - before[key]) / n for key in before}
        result["n"] = n
        print(json.dumps(result), flush=True)
        del handles, held
        os._exit(0)  # leave the 100,000 parked jobs to the operating system
    raise AssertionError("unreachable")


def _child(n: int, traced: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.parked_memory", "--child", str(n)]
    if traced:
        command.append("--traced")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"parked benchmark: the child failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def run(quick: bool) -> list[Row]:
    rounds = 1 if quick else 3
    parked = QUICK_PARKED if quick else PARKED
    traced_n = TRACED // 2 if quick else TRACED
    readings = []
    for round_ in range(rounds):
        readings.append(_child(parked, traced=False))
        r = readings[-1]
        progress(
            f"  parked round {round_ + 1}/{rounds}, {parked:,} parked: "
            f"{r['rss'] / 1024:.2f} KiB, {r['objects']:.1f} tracked objects, "
            f"{r['blocks']:.1f} blocks per job"
        )
    traced = _child(traced_n, traced=True)
    progress(f"  traced, {traced_n:,} parked: {traced['traced'] / 1024:.2f} KiB per job")
    label = f"{parked:,} parked"
    rss = [r["rss"] / 1024 for r in readings]
    objects = [r["objects"] for r in readings]
    blocks = [r["blocks"] for r in readings]
    rss_median = _median(rss)
    return [
        Row(
            NAME,
            f"resident memory per parked job, {label}",
            min(rss),
            "KiB/job",
            f"<= {TARGET_KIB:g} KiB",
            verdict(rss_median <= TARGET_KIB),
            median=rss_median,
        ),
        Row(
            NAME,
            f"objects the collector tracks, per parked job, {label}",
            min(objects),
            "objects/job",
            median=_median(objects),
        ),
        Row(
            NAME,
            f"allocated blocks (every object), per parked job, {label}",
            min(blocks),
            "blocks/job",
            median=_median(blocks),
        ),
        Row(
            NAME,
            f"bytes allocated per parked job (tracemalloc), {traced_n:,} parked",
            traced["traced"] / 1024,
            "KiB/job",
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parked_memory")
    parser.add_argument("--child", type=int, metavar="N", help="park N jobs in this process")
    parser.add_argument("--traced", action="store_true", help="with --child: under tracemalloc")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.child is not None:
        trio.run(_park, args.child, args.traced)
        return 0
    from ._harness import format_table

    print(format_table(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
