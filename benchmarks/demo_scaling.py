"""(i) The demo at scale: ``nucleo-trio demo --jobs N`` in virtual time, N = 1,000 to 10,000.

The demo is the project's main job: one orchestrator fans out N jobs that compete for a database
gate, the HTTP gate and a rate-limited search API, with timeouts, failures, re-runs and cancels,
a bus observer tallying every event and a recorder writing every job to SQLite. In virtual time
the run's cost is the runtime's own work, so it should grow with N and nothing more: the cost of
a job is the same in a run of 1,000 as in a run of 10,000.

Each run is a fresh process (``python -m nucleo_trio demo --jobs N``, output discarded) and is
measured by the CPU time it used (user + system, from the operating system's account of the
child), so start-up counts once per run and the marginal cost per job between two sizes
cancels it. Sizes are interleaved round by round.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

from ._harness import Row, progress, verdict

NAME = "demo"
TITLE = "the demo at scale: CPU seconds of `nucleo-trio demo --jobs N` (virtual time)"

SIZES = (1_000, 3_000, 10_000)
QUICK_SIZES = (300, 1_000, 3_000)
TOTAL_TARGET = 10.0
"""Seconds the 10,000-job run may take (issue 13)."""
FLAT_TARGET = 1.2
"""The marginal cost per job of the larger step over the smaller one: flat within 20 %."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_demo(jobs: int) -> float:
    """CPU seconds of one demo run with ``jobs`` jobs (its exit status must say all is well)."""
    before = _children_cpu()
    subprocess.run(
        [sys.executable, "-m", "nucleo_trio", "demo", "--jobs", str(jobs)],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return _children_cpu() - before


def run(quick: bool) -> list[Row]:
    sizes = QUICK_SIZES if quick else SIZES
    rounds = 2 if quick else 3
    seconds: dict[int, list[float]] = {size: [] for size in sizes}
    for round_ in range(rounds):
        for size in sizes:
            seconds[size].append(run_demo(size))
        progress(
            f"  demo round {round_ + 1}/{rounds} (CPU s): "
            + ", ".join(f"{size:,} jobs {seconds[size][-1]:.2f}" for size in sizes)
        )
    small, middle, large = sizes
    # Per round, the marginal ms per job of each step; the verdict reads the median ratio.
    first = [
        (m - s) / (middle - small) * 1e3
        for s, m in zip(seconds[small], seconds[middle], strict=True)
    ]
    second = [
        (la - m) / (large - middle) * 1e3
        for m, la in zip(seconds[middle], seconds[large], strict=True)
    ]
    growth = [b / a for a, b in zip(first, second, strict=True)]
    rows = [
        Row(
            NAME,
            f"{size:,} jobs",
            min(seconds[size]),
            "s",
            *(
                (f"< {TOTAL_TARGET:g} s", verdict(statistics.median(seconds[size]) < TOTAL_TARGET))
                if size == 10_000
                else ("", "")
            ),
            median=statistics.median(seconds[size]),
        )
        for size in sizes
    ]
    rows += [
        Row(
            NAME,
            f"per job, {small:,} -> {middle:,}",
            min(first),
            "ms",
            median=statistics.median(first),
        ),
        Row(
            NAME,
            f"per job, {middle:,} -> {large:,}",
            min(second),
            "ms",
            median=statistics.median(second),
        ),
        Row(
            NAME,
            f"growth of the per-job cost ({middle:,} -> {large:,} over {small:,} -> {middle:,})",
            min(growth),
            "x",
            f"<= {FLAT_TARGET:g}x",
            verdict(statistics.median(growth) <= FLAT_TARGET),
            median=statistics.median(growth),
        ),
    ]
    return rows
