"""``nucleo-trio top``: a running dispatcher's health, read from its control socket.

Two ways to show a :class:`~nucleo_trio.observability.control.LiveSnapshot`:

* :func:`render_text`, plain text for scripts and logs (``top --once``): the health report as
  :meth:`HealthSnapshot.render` prints it, then the running jobs, the jobs parked in admission
  and the recent failures;
* :func:`render_view`, a rich renderable for a terminal: a header, the accounts as a table with
  bars, the memory, job and queue lines, then the same three lists as tables.
  :func:`watch` redraws it in place every ``interval`` seconds (``top``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence

import trio
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from . import _layout
from .control import (
    CLIENT_TIMEOUT,
    ControlSocketError,
    FailureRow,
    LiveSnapshot,
    ParkedRow,
    RunningRow,
    request_snapshot,
)

__all__ = ["DEFAULT_INTERVAL", "LISTED_ROWS", "render_text", "render_view", "watch"]

DEFAULT_INTERVAL = 1.0
"""Seconds between two refreshes of the live view."""
LISTED_ROWS = 10
"""How many running jobs, parked jobs and failures each list shows; the rest are counted."""


def _clock(wall: float) -> str:
    try:
        return time.strftime("%H:%M:%S", time.localtime(wall))
    except (ValueError, OverflowError, OSError):  # NaN, or past what the platform's time holds
        return "??:??:??"


def _seconds(value: float) -> str:
    """A duration in a few characters: ``0.4s``, ``12.0s``, ``3m05s``, ``2h07m``."""
    if not math.isfinite(value) or value < 0:
        return "?"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def _header(snapshot: LiveSnapshot, source: str | None, *, answering: bool = True) -> str:
    where = f" on {source}" if source else ""
    if not answering:
        return (
            f"nucleo-trio top: dispatcher pid {snapshot.pid}{where}, not answering "
            f"(last seen {snapshot.state} at {_clock(snapshot.wall)})"
        )
    return (
        f"nucleo-trio top: dispatcher pid {snapshot.pid}{where}, {snapshot.state}, "
        f"at {_clock(snapshot.wall)}"
    )


def _more(shown: int, total: int) -> str:
    return f"{total}" if shown >= total else f"{shown} of {total}"


# -- plain text -----------------------------------------------------------------------------------
def render_text(
    snapshot: LiveSnapshot,
    *,
    source: str | None = None,
    color: bool = False,
    rows: int = LISTED_ROWS,
) -> str:
    """The snapshot as plain lines, no trailing newline: a header naming the dispatcher (and
    ``source``, the socket), its health report, then up to ``rows`` running jobs, parked jobs
    and recent failures. ``color`` tints the health report as ``nucleo-trio health`` does."""
    lines = [_header(snapshot, source), snapshot.health.render(color=color)]
    running = snapshot.running[:rows]
    lines.append(f"Running ({_more(len(running), snapshot.running_total)}), the longest first:")
    lines.extend(
        f"  {_cut(row.name, 24):<24} {row.kind:<9} attempt {row.attempt:<2} "
        f"{_seconds(row.seconds):>7}  {row.job_id}"
        for row in running
    )
    parked = snapshot.parked[:rows]
    lines.append(f"Parked in admission ({_more(len(parked), snapshot.parked_total)}):")
    lines.extend(
        f"  {_cut(row.name, 24):<24} {row.kind:<9} waiting {_seconds(row.seconds):>7} "
        f"on {', '.join(row.held_on) or '(its turn)'}  {row.job_id}"
        for row in parked
    )
    failures = snapshot.failures[:rows]
    lines.append(f"Recent failures ({_more(len(failures), len(snapshot.failures))}):")
    lines.extend(
        f"  {_clock(row.at)}  {_cut(row.name, 24):<24} {row.state:<9} {row.message}"
        for row in failures
    )
    return "\n".join(lines)


# -- the rich view --------------------------------------------------------------------------------
def _status_style(status: str | None) -> str:
    rgb = _layout.tint_for(status)
    if rgb is _layout.RED:
        return "bold red"
    if rgb is _layout.YELLOW:
        return "yellow"
    return ""


def _bar(share: float) -> Text:
    """The health report's bar (full and empty cells), green, then yellow from 60 %, red from
    90 %: the same cells with colour or without."""
    cells = _layout.bar(share, color=False)
    filled = len(cells.rstrip("\u2591"))
    style = "green" if share < 0.6 else "yellow" if share < 0.9 else "red"
    bar = Text(cells[:filled], style=style)
    bar.append(cells[filled:], style="bright_black")
    return bar


def _accounts(snapshot: LiveSnapshot) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="Accounts", title_justify="left")
    table.add_column("account", no_wrap=True, overflow="ellipsis", max_width=_layout.NAME_WIDTH)
    table.add_column("use", no_wrap=True, width=_layout.BAR_CELLS)
    table.add_column("%", justify="right", no_wrap=True, min_width=5)
    table.add_column("used/total", justify="right", no_wrap=True, min_width=10)
    table.add_column("waiters", justify="right", no_wrap=True)
    # The status line wraps in what width is left rather than being cut: it is the one
    # column whose words matter past its first few.
    table.add_column("status", overflow="fold")
    for row in snapshot.health.limiters:
        share = row.utilisation
        style = _status_style(row.status)
        unit = f" {row.unit}" if row.unit else ""
        status = Text()
        if row.status:  # the indicator, tinted like the name, then the line itself
            status.append(row.status, style=style)
        line = snapshot.status_line(row.name)
        if line:
            status.append(("; " if row.status else "") + line)
        table.add_row(
            Text(row.name, style=style),
            _bar(share),
            f"{share * 100:.1f}",
            f"{_layout.short_count(row.used)}/{_layout.short_count(row.capacity)}{unit}",
            str(row.waiters),
            status,
        )
    if not snapshot.health.limiters:
        table.add_row("(none active)", "", "", "", "", "")
    return table


def _jobs_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for header in headers:
        table.add_column(header, no_wrap=True, overflow="ellipsis")
    for row in rows:
        table.add_row(*row)
    return table


def _running(snapshot: LiveSnapshot, rows: int) -> Table:
    shown: Sequence[RunningRow] = snapshot.running[:rows]
    return _jobs_table(
        f"Running ({_more(len(shown), snapshot.running_total)}), the longest first",
        ("job", "type", "attempt", "for", "id"),
        [
            (row.name, row.kind, str(row.attempt), _seconds(row.seconds), row.job_id)
            for row in shown
        ],
    )


def _parked(snapshot: LiveSnapshot, rows: int) -> Table:
    shown: Sequence[ParkedRow] = snapshot.parked[:rows]
    return _jobs_table(
        f"Parked in admission ({_more(len(shown), snapshot.parked_total)})",
        ("job", "type", "waiting", "held on", "id"),
        [
            (
                row.name,
                row.kind,
                _seconds(row.seconds),
                ", ".join(row.held_on) or "(its turn)",
                row.job_id,
            )
            for row in shown
        ],
    )


def _failures(snapshot: LiveSnapshot, rows: int) -> Table:
    shown: Sequence[FailureRow] = snapshot.failures[:rows]
    table = _jobs_table(
        f"Recent failures ({_more(len(shown), len(snapshot.failures))})",
        ("at", "job", "state", "message"),
        [(_clock(row.at), row.name, row.state, row.message) for row in shown],
    )
    table.columns[3].no_wrap = False
    return table


def render_view(
    snapshot: LiveSnapshot,
    *,
    source: str | None = None,
    rows: int = LISTED_ROWS,
    note: str | None = None,
    answering: bool = True,
) -> RenderableType:
    """The snapshot as a rich renderable: what one frame of ``nucleo-trio top`` shows.

    ``note``, when given, is a last line in bold (why the view stopped refreshing).
    ``answering=False`` is for a snapshot the dispatcher can no longer be asked for: the
    header then says ``not answering (last seen RUNNING at 08:00:00)`` instead of the state.
    """
    health = snapshot.health
    by_type = ", ".join(f"{count} {kind.value}" for kind, count in health.running) or "none"
    queues = health.queues
    parts: list[RenderableType] = [
        Text(_header(snapshot, source, answering=answering), style="bold"),
        _accounts(snapshot),
        Text(f"Memory: {health.memory}"),
        Text(
            f"Jobs running: {health.jobs_running} ({by_type}); workflows active: "
            f"{health.workflows_active}"
        ),
        Text(
            f"Queue: {queues.standard} standard, {queues.fast} fast, "
            f"{queues.parked} parked in admission"
        ),
        _running(snapshot, rows),
        _parked(snapshot, rows),
        _failures(snapshot, rows),
    ]
    if note:
        parts.append(Text(note, style="bold"))
    return Group(*parts)


def _why_not(source: str, failure: ControlSocketError) -> str:
    """Why a dispatcher that answered no longer does, for the last frame and the error."""
    if not os.path.lexists(source):  # a dispatcher removes its socket as its run ends
        return f"stopped: its control socket {source!r} is gone"
    return f"stopped answering: {failure}"


async def watch(
    path: str | os.PathLike[str],
    *,
    interval: float = DEFAULT_INTERVAL,
    console: Console | None = None,
    refreshes: int | None = None,
    rows: int = LISTED_ROWS,
) -> LiveSnapshot:
    """Redraw :func:`render_view` of the dispatcher at ``path`` every ``interval`` seconds.

    Stops after ``refreshes`` frames (``None``: until cancelled) and answers the last snapshot
    read. A read failing raises :class:`~nucleo_trio.observability.control.ControlSocketError`:
    the first one with nothing drawn; a later one (the dispatcher stopped, or does not answer)
    once the last frame is redrawn with its header saying ``not answering`` and a line saying
    why, left on the screen.
    """
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError(f"watch: interval must be seconds, got {interval!r}")
    if not 0 < interval < math.inf:
        raise ValueError(f"watch: interval must be finite seconds > 0, got {interval!r}")
    if refreshes is not None and (
        isinstance(refreshes, bool) or not isinstance(refreshes, int) or refreshes < 1
    ):
        raise ValueError(f"watch: refreshes must be a positive int or None, got {refreshes!r}")
    source = os.fspath(path)
    last = await request_snapshot(path, within=CLIENT_TIMEOUT)
    with Live(
        render_view(last, source=source, rows=rows),
        console=console,
        auto_refresh=False,
        redirect_stdout=False,
        redirect_stderr=False,
    ) as live:
        shown = 1
        while refreshes is None or shown < refreshes:
            await trio.sleep(interval)
            try:
                last = await request_snapshot(path, within=CLIENT_TIMEOUT)
            except ControlSocketError as exc:
                why = f"dispatcher pid {last.pid} {_why_not(source, exc)}"
                frame = render_view(last, source=source, rows=rows, note=why, answering=False)
                live.update(frame, refresh=True)
                raise ControlSocketError(why) from exc
            live.update(render_view(last, source=source, rows=rows), refresh=True)
            shown += 1
    return last
