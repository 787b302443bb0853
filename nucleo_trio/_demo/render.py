"""Turning the tally into the text a newcomer reads in one look.

Plain text in aligned columns, at most :data:`WIDTH` characters a line, ASCII only except the
health snapshot's bars (block characters, or ``#`` and ``.`` for an output that cannot encode
them). Colour (bold titles, dim notes, the snapshot's tints) is used only when the output is a
terminal and ``NO_COLOR`` is unset, so a pipe, a file or a test gets exactly the same words
without escape codes.
"""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

import attrs

from ..observability import HealthSnapshot, Trajectory, render_trajectory
from .options import (
    DB_SLOTS,
    HTTP_CONNECTIONS,
    SEARCH_REQUESTS_PER_SECOND,
    TRAJECTORY_CHILDREN,
    DemoOptions,
)
from .tally import AccountRow, KindRow, TallyReport
from .workload import Behaviour, JobPlan

__all__ = [
    "HEALTH_NAME_WIDTH",
    "SECTION_TITLES",
    "WIDTH",
    "Style",
    "render_header",
    "render_health",
    "render_report",
    "render_trajectory_section",
]

WIDTH = 100
"""The longest line the report prints; longer messages wrap onto indented lines."""

SECTION_TITLES = (
    "Jobs by kind",
    "Admission by account",
    "Events seen on the bus",
    "Example failures",
    "Elapsed",
    "Trajectory",
)
"""The titles the report's sections start with, in order."""

HEALTH_NAME_WIDTH = 14
"""The name column of the health snapshot's rows. The reporter's log gives names 28 columns;
the demo's accounts have short names, and its lines stay within :data:`WIDTH`."""

_BLOCKS = "\u2588\u2591"


@attrs.frozen
class Style:
    """ANSI emphasis, or none at all; block characters, or ASCII where they cannot be written."""

    color: bool = False
    ascii_only: bool = False

    @classmethod
    def for_stream(cls, stream: TextIO, color: bool | None = None) -> Style:
        """Colour when asked to, else only for a terminal with ``NO_COLOR`` unset; ASCII bars
        when the stream's encoding has no block characters."""
        if color is None:
            isatty = getattr(stream, "isatty", None)
            color = bool(isatty and isatty()) and not os.environ.get("NO_COLOR")
        try:
            _BLOCKS.encode(getattr(stream, "encoding", None) or "utf-8")
        except (UnicodeEncodeError, LookupError):
            return cls(color, ascii_only=True)
        return cls(color)

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color else text

    def dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color else text


# -- the header -----------------------------------------------------------------------------------
def render_header(plans: Sequence[JobPlan], options: DemoOptions, style: Style) -> str:
    """Two lines saying what is about to compete for what, on which clock; then, dimmed, the
    trouble the plan holds."""
    planned = Counter(plan.behaviour for plan in plans)
    if options.real_time:
        clock = f"on the real clock (seed {options.seed}, re-runs paced 0.5-3 s)."
    else:
        clock = f"in virtual time (seed {options.seed}): instant, deterministic."
    first = (
        f"nucleo-trio demo: {len(plans)} jobs from one orchestrator compete for db "
        f"({DB_SLOTS} slots), http ({HTTP_CONNECTIONS} connections)"
    )
    second = f"and search-api (a custom limiter, {SEARCH_REQUESTS_PER_SECOND} requests/s), {clock}"
    pushed_back = planned[Behaviour.RERUNS] + planned[Behaviour.OVER_BUDGET]
    plan = (
        f"Planned trouble: {_count(planned[Behaviour.TIMES_OUT], 'timeout')}, "
        f"{_count(planned[Behaviour.FAILS], 'failure')}, "
        f"{_count(planned[Behaviour.CANCELLED], 'cancellation')}, "
        f"{_count(pushed_back, 'upstream push-back')} "
        f"({planned[Behaviour.OVER_BUDGET]} over budget)."
    )
    return "\n".join([style.bold(first), style.bold(second), style.dim(plan)])


# -- the health snapshot --------------------------------------------------------------------------
def render_health(snapshot: HealthSnapshot, at: float, options: DemoOptions, style: Style) -> str:
    """What ``dispatcher.health()`` answered mid-run, as the reporter renders it, with one line
    saying when it was taken."""
    clock = "real" if options.real_time else "virtual"
    body = snapshot.render(
        color=style.color, ascii_only=style.ascii_only, name_width=HEALTH_NAME_WIDTH
    )
    title, _, rest = body.partition("\n")
    note = style.dim(f"  (dispatcher.health(), {at:.1f} s of {clock} time into the run)")
    return "\n" + style.bold(title) + note + "\n" + rest


# -- the report -----------------------------------------------------------------------------------
def render_report(
    report: TallyReport,
    elapsed: float,
    wall: float,
    options: DemoOptions,
    style: Style,
    finished: int | None = None,
) -> str:
    """The five sections after the run, each a title and an indented block. ``finished``,
    after Ctrl-C, is how many jobs settled before it: the rate counts those alone."""
    sections = [
        _kinds(report, style),
        _accounts(report.accounts, style, report.rejections),
        _events(report, style),
        _examples(report, style),
        _elapsed(report, elapsed, wall, options, style, finished),
    ]
    return "\n" + "\n\n".join(sections)


def _kinds(report: TallyReport, style: Style) -> str:
    header = (
        "kind",
        "needs",
        "jobs",
        "completed",
        "failed",
        "timed out",
        "cancelled",
        "re-runs",
        "wait p50/max",
    )
    rows = [_kind_cells(row) for row in (*report.kinds, report.total)]
    lines = _table(header, rows, left=2)
    lines.insert(len(lines) - 1, "  " + "-" * (len(lines[0]) - 2))
    title = style.bold("Jobs by kind") + style.dim(
        "  (wait: time parked in admission, holding nothing, before the work could start)"
    )
    return "\n".join([title, *lines])


def _kind_cells(row: KindRow) -> list[str]:
    return [
        row.kind,
        row.needs,
        str(row.jobs),
        str(row.completed),
        str(row.failed),
        str(row.timed_out),
        str(row.cancelled),
        str(row.reruns),
        _waits(row.median_wait, row.max_wait),
    ]


def _accounts(
    rows: Sequence[AccountRow], style: Style, rejections: Sequence[tuple[str, int]] = ()
) -> str:
    header = (
        "account",
        "size",
        "returns",
        "at once",
        "after hold",
        "rejected",
        "released",
        "peak use",
        "max wait",
    )
    cells = [
        [
            row.name,
            row.size,
            _returns(row.replenishment),
            str(row.immediate),
            str(row.after_hold),
            str(row.rejected),
            str(row.released),
            f"{row.peak_in_use}/{row.capacity}",
            _seconds(row.longest_wait),
        ]
        for row in rows
    ]
    title = style.bold("Admission by account") + style.dim(
        "  (a job's whole demand is granted at once, or it waits holding nothing)"
    )
    note = style.dim(
        "  A TIME account's permit comes back with the clock, never at release: hence 0 released."
    )
    lines = [title, *_table(header, cells, left=2, names=3)]
    if any(row.replenishment == "TIME" for row in rows):
        lines.append(note)
    if rejections:
        lines.extend(style.dim(line) for line in _wrap(_rejected(rejections), indent=2))
    return "\n".join(lines)


# What each ``reject_reason`` of a REJECTED limiter event means, as the demo says it.
_REJECT_REASONS = {
    "cancelled": "cancelled while parked",
    "shutdown": "refused at shutdown",
    "circuit_blocked": "refused by an open circuit",
    "aborted": "refused on an account fault",
}


def _rejected(rejections: Sequence[tuple[str, int]]) -> str:
    """The ``rejected`` column (and the bus's REJECTED) in one line: what it is, and why here."""
    why = ", ".join(f"{n} {_REJECT_REASONS.get(reason, reason)}" for reason, n in rejections)
    return f"rejected (REJECTED on the bus): a parked job refused, never granted: {why}."


def _returns(replenishment: str) -> str:
    return {"RELEASE": "at release", "TIME": "with time"}.get(replenishment, replenishment or "-")


def _events(report: TallyReport, style: Style) -> str:
    title = style.bold("Events seen on the bus") + style.dim(f"  ({report.event_total} in all)")
    width = max((len(name) for name, _ in report.events), default=0)
    count_width = max((len(str(count)) for _, count in report.events), default=0)
    lines = [title]
    for name, count in report.events:
        lines.append(f"  {name:<{width}}  {count:>{count_width}}")
        if name == "LimiterEvent" and report.limiter_events:
            kinds = ", ".join(f"{kind} {n}" for kind, n in report.limiter_events)
            lines.extend(_wrap(kinds, indent=6))
    return "\n".join(lines)


def _examples(report: TallyReport, style: Style) -> str:
    title = style.bold("Example failures") + style.dim(
        "  (the first of each, as its job reported it)"
    )
    if not report.examples:
        return "\n".join([title, "  none"])
    outcome_width = max(len(example.outcome) for example in report.examples)
    label_width = max(len(example.label) for example in report.examples)
    lines = [title]
    for example in report.examples:
        lead = f"  {example.outcome:<{outcome_width}}  {example.label:<{label_width}}  "
        wrapped = _wrap(example.text, indent=len(lead))
        lines.append(lead + wrapped[0].lstrip())
        lines.extend(wrapped[1:])
    return "\n".join(lines)


def _elapsed(
    report: TallyReport,
    elapsed: float,
    wall: float,
    options: DemoOptions,
    style: Style,
    finished: int | None = None,
) -> str:
    settled = report.total.settled if finished is None else finished
    rate = settled / elapsed if elapsed > 0 else float("inf")
    clock = "real" if options.real_time else "virtual"
    jobs = f"{settled} jobs" if finished is None else f"{settled} jobs finished before Ctrl-C"
    line = f"{style.bold('Elapsed')}: {elapsed:.2f} s of {clock} time for {jobs}, {rate:.1f} jobs/s"
    if not options.real_time:
        line += style.dim(f" (the run took {wall:.2f} s of real time)")
    lines = [line + "."]
    if report.workflow is not None:
        lines.append(f"The root's WorkflowCompleteEvent: {report.workflow}.")
    lines.append(
        style.dim(
            "The code: nucleo_trio/_demo/workload.py (jobs), quota.py (limiter), tally.py (observer)."
        )
    )
    return "\n".join(lines)


# -- the trajectory -------------------------------------------------------------------------------
def render_trajectory_section(recorded: Trajectory, options: DemoOptions, style: Style) -> str:
    """The workflow as the recorder kept it, read back in call order: the root and its first
    children in the order the root submitted them, the rest summed up. Durations are on the
    run's own clock (virtual seconds in a virtual run, which repeat for a seed), and never a
    random id, so a virtual run prints the same trajectory every time."""
    where = (
        f"recorded into {options.record}" if options.record else "recorded into a temporary file"
    )
    title = style.bold("Trajectory") + style.dim(
        f"  ({where} by a TrajectoryRecorder, read back in call order)"
    )
    body = render_trajectory(
        recorded,
        ids=False,
        durations=True,
        max_children=TRAJECTORY_CHILDREN,
        width=WIDTH - 2,
    )
    lines = ["", title, *("  " + line for line in body.splitlines())]
    if options.record:
        lines.append(
            style.dim(
                f"  All of it: nucleo-trio trajectory {options.record} {recorded.workflow_id}"
            )
        )
    return "\n".join(lines)


# -- helpers --------------------------------------------------------------------------------------
def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int, names: int = 2
) -> list[str]:
    """Aligned columns: the first ``names`` left-aligned, the rest (numbers) right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    out = []
    for cells in (header, *rows):
        parts = [
            cell.ljust(width) if index < names else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        out.append((" " * left + "  ".join(parts)).rstrip())
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _waits(median: float | None, longest: float | None) -> str:
    if median is None or longest is None:
        return "-"
    return f"{median:.2f}/{longest:.2f}s"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _wrap(text: str, *, indent: int) -> list[str]:
    """``text`` in lines of at most :data:`WIDTH`, each indented by ``indent`` spaces."""
    pad = " " * indent
    return textwrap.wrap(
        text, WIDTH, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False
    ) or [pad]
