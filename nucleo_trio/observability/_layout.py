"""The text of a health snapshot: rows, bars, short counts and tints (SHR-03..13).

Pure functions from numbers to strings, so the layout can be tested without a dispatcher. Colour
is ANSI 24-bit ("truecolor") and strictly optional: with ``color=False`` the words and the bar
cells are the same and no escape code is written.
"""

from __future__ import annotations

import math

__all__ = [
    "BAR_CELLS",
    "GREEN",
    "NAME_WIDTH",
    "RED",
    "YELLOW",
    "bar",
    "bold_white",
    "limiter_row",
    "short_count",
    "tint",
    "tint_for",
    "unit_of",
]

NAME_WIDTH = 28
"""Columns the name takes in a row; a longer name is cut to fit and ends in ``...`` (SHR-06)."""

BAR_CELLS = 20
"""Cells in a utilisation bar (SHR-11)."""

RED = (255, 80, 80)
YELLOW = (230, 170, 50)
GREEN = (80, 200, 100)
_GREY = (110, 110, 110)
_SOLID_SHARE = 0.6  # filled cells stay plain green up to this share of the bar, then fade to red

_UNITS = {
    "memory": "B",
    "token_bucket": "tok",
    "elastic_window": "req",
    "rate_limit": "req",
    "semaphore": "slot",
}

_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))

_RESET = "\x1b[0m"

RGB = tuple[int, int, int]


def tint(text: str, rgb: RGB, color: bool) -> str:
    """``text`` in the 24-bit foreground colour ``rgb``; unchanged when colour is off."""
    if not color or not text:
        return text
    r, g, b = rgb
    return f"\x1b[38;2;{r};{g};{b}m{text}{_RESET}"


def bold_white(text: str, color: bool) -> str:
    """``text`` in bold bright white; unchanged when colour is off."""
    return f"\x1b[1;97m{text}{_RESET}" if color else text


def unit_of(category: str) -> str:
    """The unit a category counts in (SHR-07): bytes, tokens, requests, slots, or nothing."""
    return _UNITS.get(category, "")


def short_count(value: float) -> str:
    """A count in at most a handful of characters, base 1000 (SHR-08).

    Under 1000 the whole number as is (``40``); above, one decimal and a suffix: ``1.2K``,
    ``7.9G``, ``34.4G``, up to ``T``.
    """
    if math.isnan(value):
        return "?"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    magnitude = abs(value)
    for threshold, suffix in _SUFFIXES:
        if magnitude >= threshold:
            return f"{value / threshold:.1f}{suffix}"
    return str(int(math.floor(value + 0.5)))


def tint_for(status: str | None) -> RGB | None:
    """The row colour a status indicator calls for (SHR-10): red for a blocked account, yellow
    for one throttled, pacing or probing, none for a nominal one."""
    if not status:
        return None
    if "blocked" in status:
        return RED
    if any(word in status for word in ("throttle", "pace", "probing")):
        return YELLOW
    return None


def _filled_cells(ratio: float) -> int:
    if math.isnan(ratio):
        return 0
    if math.isinf(ratio):  # a use reported as infinite fills the bar (floor(inf) would raise)
        return BAR_CELLS if ratio > 0 else 0
    # Half rounds up (0.225 of 20 cells is 5), as a reader expects of a bar.
    return max(0, min(BAR_CELLS, int(math.floor(ratio * BAR_CELLS + 0.5))))


def _cell_colour(index: int) -> RGB:
    solid = int(BAR_CELLS * _SOLID_SHARE)
    if index < solid:
        return GREEN
    share = (index - solid + 1) / (BAR_CELLS - solid)
    return (
        round(GREEN[0] + (RED[0] - GREEN[0]) * share),
        round(GREEN[1] + (RED[1] - GREEN[1]) * share),
        round(GREEN[2] + (RED[2] - GREEN[2]) * share),
    )


def bar(ratio: float, *, color: bool, ascii_only: bool = False) -> str:
    """A :data:`BAR_CELLS`-cell bar with ``round(ratio * 20)`` cells filled (SHR-11).

    Filled cells are green up to 60 % of the width and fade from green to red after it; empty
    cells are dim grey. ``ascii_only`` draws ``#`` and ``.`` instead of block characters, for an
    output that cannot encode them.
    """
    full, empty = ("#", ".") if ascii_only else ("\u2588", "\u2591")
    filled = _filled_cells(ratio)
    if not color:
        return full * filled + empty * (BAR_CELLS - filled)
    runs: list[tuple[RGB, str]] = []
    for index in range(filled):
        colour = _cell_colour(index)
        if runs and runs[-1][0] == colour:
            runs[-1] = (colour, runs[-1][1] + full)  # one escape for the solid stretch
        else:
            runs.append((colour, full))
    if filled < BAR_CELLS:
        runs.append((_GREY, empty * (BAR_CELLS - filled)))
    return "".join(tint(text, colour, True) for colour, text in runs)


def _fit(name: str, width: int) -> str:
    if len(name) > width:
        name = name[: max(0, width - 3)] + "..."
    return f"{name:<{width}}"


def limiter_row(
    name: str,
    ratio: float,
    *,
    waiters: int | None = None,
    used: float | None = None,
    total: float | None = None,
    unit: str = "",
    status: str | None = None,
    color: bool,
    ascii_only: bool = False,
    name_width: int = NAME_WIDTH,
) -> str:
    """One row: four spaces, the name, the percent, the bar, then the counts (SHR-06).

    ``    <name padded>  90.0% <bar>  waiters=  3  used:     90  total: 100    slot  <status>``,
    trailing spaces trimmed. With no ``waiters`` (the CPU row) the row ends at the bar. The
    name and percent, and the counts after the bar, take the status's tint; the bar keeps its
    own colours.
    """
    rgb = tint_for(status)
    head = f"    {_fit(name, name_width)}{ratio * 100:6.1f}%"
    cells = bar(ratio, color=color, ascii_only=ascii_only)
    if waiters is None:
        tail = ""
    else:
        tail = (
            f"  waiters={waiters:3d}  used: {short_count(used or 0):>6}  "
            f"total: {short_count(total or 0):<6} {unit:<4}  {status or ''}"
        ).rstrip()
    if rgb is not None:
        head, tail = tint(head, rgb, color), tint(tail, rgb, color)
    return f"{head} {cells}{tail}"
