"""Run the benchmarks and print one table: ``python -m benchmarks.run [--quick] [--only NAME]``.

``--quick`` runs a smaller variant (fewer jobs, fewer rounds) in under a minute; the full run
takes a few minutes. ``--only NAME`` runs one benchmark (repeat it for several).
``--markdown`` prints the table as Markdown, the form ``docs/performance.md`` quotes.
``--at COMMIT`` runs the same benchmarks (this tree's ``benchmarks/``) against that commit's
``nucleo_trio`` and plugins, unpacked with ``git archive`` into a temporary directory: the
"before" of a change, measured by the same code as its "after" (see :mod:`benchmarks._at`).

Progress goes to stderr, the table to stdout. The exit status is 0 whether or not a target was
met: a benchmark reports, it does not gate (a busy machine is not a regression). Read the
verdict column.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType

from . import (
    admission_scaling,
    demo_scaling,
    dispatch_overhead,
    graph_submit,
    hostage,
    loop_stall,
    mcp_call,
    memory_pressure,
    parked_memory,
    rate_accuracy,
    redis_accounts,
    soak,
    web_service,
)
from ._at import snapshot
from ._harness import Row, format_table, machine_line, progress

BENCHMARKS: tuple[ModuleType, ...] = (
    dispatch_overhead,
    admission_scaling,
    parked_memory,
    graph_submit,
    hostage,
    rate_accuracy,
    memory_pressure,
    loop_stall,
    demo_scaling,
    redis_accounts,
    web_service,
    mcp_call,
    soak,
)


def _runner(module: ModuleType) -> Callable[[bool], list[Row]]:
    run: Callable[[bool], list[Row]] = module.run
    return run


def main(argv: Sequence[str] | None = None) -> int:
    names = [module.NAME for module in BENCHMARKS]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="nucleo_trio benchmarks against bare trio; prints one table.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smaller, faster variant (under a minute)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run only this benchmark (repeatable); one of: {', '.join(names)}",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument(
        "--at",
        metavar="COMMIT",
        help="measure that commit (git archive) with this tree's benchmarks instead of this tree",
    )
    args = parser.parse_args(argv)
    if args.at:
        forwarded = [
            *(["--quick"] if args.quick else []),
            *(["--markdown"] if args.markdown else []),
        ]
        for name in args.only or ():
            forwarded += ["--only", name]
        with snapshot(args.at) as (root, env):
            progress(f"measuring {args.at} in {root}")
            command = [sys.executable, "-m", "benchmarks.run", *forwarded]
            return subprocess.run(command, cwd=root, env=env).returncode

    chosen = [m for m in BENCHMARKS if not args.only or m.NAME in args.only]
    mode = "quick" if args.quick else "full"
    progress(f"nucleo_trio benchmarks ({mode}): {machine_line()}")
    rows: list[Row] = []
    began = time.perf_counter()
    for module in chosen:
        progress(f"{module.NAME}: {module.TITLE}")
        started = time.perf_counter()
        rows.extend(_runner(module)(args.quick))
        progress(f"  ({time.perf_counter() - started:.1f} s)")
    elapsed = time.perf_counter() - began

    print(f"nucleo_trio benchmarks ({mode} run, {elapsed:.0f} s): {machine_line()}")
    print(
        "value: best-of-rounds CPU time of the trio thread (virtual seconds for hostage; counts "
        "and memory as their units say); median: the median round, which a verdict reads where "
        "it is given; wall: best-of-rounds wall clock"
    )
    print()
    print(format_table(rows, markdown=args.markdown))
    missed = [r for r in rows if r.verdict == "MISSED"]
    if missed:
        print()
        print("missed: " + "; ".join(f"{r.benchmark}: {r.metric} ({r.target})" for r in missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
