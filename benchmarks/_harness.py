"""What every benchmark shares: timing a trio run, best-of rounds, rows, and the table.

The machine the benchmarks run on is shared (two cores, other processes running), so a single
timing says little. Every measurement here is the *minimum* over several rounds: noise only ever
adds time, so the fastest round is the closest to what the code costs. Ratios are computed
from minima taken in the same run, with subject and baseline interleaved round by round, so a
burst of load hits both sides rather than one. Where a benchmark gives it, the *median* of the
rounds stands beside the best (a ratio's median is the median of the per-round ratios): the best
says what the code can do, the median what a run usually sees.

Each timed section is measured twice, on two clocks:

* **CPU**: :func:`time.thread_time`, the CPU time of the thread running ``trio.run``. Everything
  a benchmark does (the scheduler, the runtime, the garbage collector) runs on that thread and
  nothing waits on I/O, so this is the work the code does. Being descheduled in favour of another
  process does not count, which is what makes a one-second section comparable with a
  ten-millisecond one on a busy machine: the longer section is far more likely to be
  pre-empted, and wall time would charge that to the code. Ratios and verdicts use it.
* **wall**: :func:`time.perf_counter`, shown beside it. On an idle machine the two agree.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

__all__ = [
    "Row",
    "Stopwatch",
    "Timing",
    "best",
    "cpu_count",
    "median",
    "median_ratio",
    "format_table",
    "machine_line",
    "percentile",
    "progress",
    "run_trio",
    "verdict",
]


@attrs.frozen
class Timing:
    """One timed section on both clocks, in seconds."""

    cpu: float
    wall: float

    def per(self, n: int, scale: float = 1e6) -> Timing:
        """Per item, in ``1/scale`` seconds (microseconds by default)."""
        return Timing(self.cpu / n * scale, self.wall / n * scale)

    def __truediv__(self, other: Timing) -> Timing:
        return Timing(self.cpu / other.cpu, self.wall / other.wall)

    def __sub__(self, other: Timing) -> Timing:
        return Timing(self.cpu - other.cpu, self.wall - other.wall)


def best(timings: Sequence[Timing]) -> Timing:
    """The fastest round on each clock (each minimum taken on its own)."""
    if not timings:
        raise ValueError("best: no rounds")
    return Timing(min(t.cpu for t in timings), min(t.wall for t in timings))


def median(timings: Sequence[Timing]) -> Timing:
    """The middle round on each clock (the mean of the two middle ones for an even count)."""
    if not timings:
        raise ValueError("median: no rounds")
    return Timing(
        statistics.median(t.cpu for t in timings), statistics.median(t.wall for t in timings)
    )


def median_ratio(subject: Sequence[Timing], baseline: Sequence[Timing]) -> Timing:
    """The median of the per-round ratios of two interleaved series of rounds."""
    if len(subject) != len(baseline):
        raise ValueError("median_ratio: the two series have different numbers of rounds")
    return median([s / b for s, b in zip(subject, baseline, strict=True)])


@attrs.frozen
class Row:
    """One line of the results table.

    ``value`` is the figure the row is judged on (CPU time for timed rows, virtual seconds for
    the hostage scenario); ``wall`` is the wall-clock counterpart of a timed row, else ``None``.
    ``target`` is the bound the row is held to (``""`` for a row given for context) and
    ``verdict`` says whether this run met it (``"met"``, ``"MISSED"`` or ``""``). ``median``
    is the median of the rounds on the value's clock, when the benchmark gives it.
    """

    benchmark: str
    metric: str
    value: float
    unit: str
    target: str = ""
    verdict: str = ""
    wall: float | None = None
    median: float | None = None

    @classmethod
    def timed(
        cls,
        benchmark: str,
        metric: str,
        timing: Timing,
        unit: str,
        target: str = "",
        verdict: str = "",
        *,
        median: Timing | None = None,
    ) -> Row:
        return cls(
            benchmark,
            metric,
            timing.cpu,
            unit,
            target,
            verdict,
            timing.wall,
            None if median is None else median.cpu,
        )

    def formatted_value(self) -> str:
        return _digits(self.value, self.unit)

    def formatted_wall(self) -> str:
        return "" if self.wall is None else _digits(self.wall, self.unit)

    def formatted_median(self) -> str:
        return "" if self.median is None else _digits(self.median, self.unit)


def _digits(value: float, unit: str) -> str:
    """The value with as many digits as its size deserves."""
    if unit == "%":
        return f"{value:.3f}"
    if unit not in ("x", "%") and float(value).is_integer():
        return f"{int(value):,}"  # a count, or an exact virtual instant
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


class Stopwatch:
    """Marks the timed section inside a trio run; several start/stop pairs add up.

    The section is what a benchmark says it measures; setting up a dispatcher or parking a line
    of waiters happens outside it (between a ``stop`` and the next ``start``).
    """

    __slots__ = ("_cpu", "_running", "_segments", "_wall")

    def __init__(self) -> None:
        self._cpu = 0.0
        self._wall = 0.0
        self._segments = 0
        self._running: tuple[float, float] | None = None

    def start(self) -> None:
        if self._running is not None:
            raise RuntimeError("Stopwatch.start: already running")
        self._running = (time.thread_time(), time.perf_counter())

    def stop(self) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        if self._running is None:
            raise RuntimeError("Stopwatch.stop: not running")
        self._cpu += cpu - self._running[0]
        self._wall += wall - self._running[1]
        self._segments += 1
        self._running = None

    @property
    def elapsed(self) -> Timing:
        if self._segments == 0 or self._running is not None:
            raise RuntimeError("Stopwatch: the timed section never started or never ended")
        return Timing(self._cpu, self._wall)


def run_trio(
    main: Callable[[Stopwatch], Awaitable[Any]],
    *,
    clock: trio.abc.Clock | None = None,
) -> Timing:
    """Run ``main(stopwatch)`` in a fresh ``trio.run`` and answer what it timed.

    A full collection first, so garbage left by the previous round is not collected on this
    round's time. The collector stays enabled: what it costs during the section is part of what
    the code costs.
    """
    gc.collect()
    watch = Stopwatch()
    trio.run(main, watch, clock=clock)
    return watch.elapsed


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in (0, 1]): a value that was really observed."""
    if not values:
        raise ValueError("percentile: no values")
    if not 0 < fraction <= 1:
        raise ValueError(f"percentile: fraction must be in (0, 1], got {fraction}")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil without floats drifting
    return ordered[int(rank) - 1]


def cpu_count() -> int:
    """The cores this process may run on (what ``nproc`` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_line() -> str:
    """The machine as the results table names it: cores, Python, trio, and the current load."""
    line = (
        f"nproc {cpu_count()}, {platform.python_implementation()} {platform.python_version()}, "
        f"trio {trio.__version__}, {platform.system()} {platform.machine()}"
    )
    if hasattr(os, "getloadavg"):
        one, five, fifteen = os.getloadavg()
        line += f", load average {one:.2f} {five:.2f} {fifteen:.2f}"
    return line


def format_table(rows: Sequence[Row], *, markdown: bool = False) -> str:
    """The rows as one aligned text table, or as a Markdown table for the docs."""
    header = ("benchmark", "metric", "value", "median", "wall", "unit", "target", "verdict")
    cells = [
        (
            r.benchmark,
            r.metric,
            r.formatted_value(),
            r.formatted_median(),
            r.formatted_wall(),
            r.unit,
            r.target,
            r.verdict,
        )
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(lines)
    widths = [
        max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)
    ]
    right = {2, 3, 4}  # numbers align right

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(c) for c in cells)])


def progress(message: str) -> None:
    """A progress line on stderr, so the table on stdout stays clean."""
    print(message, file=sys.stderr, flush=True)
