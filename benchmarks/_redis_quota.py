"""What a shared quota looks like from outside: a log on Redis's clock, and the window checks.

Several worker processes share one quota on Redis. Whether they kept to it is a question about
time stamps, and the only clock every process agrees on is the server's. So the evidence is
kept in Redis, stamped by Redis:

* the **upstream log** (:data:`UPSTREAM_LOG_SCRIPT`): every job, as it starts and as it ends,
  appends one line to a Redis list from a Lua script that reads ``TIME`` on the server. It is
  what a provider behind the quota would see: requests arriving, and for a concurrency cap the
  spans during which each one was held;
* the **grant log** the shared accounts keep themselves when asked to (their debug option),
  read with :func:`read_grant_log`: every debit and credit of the shared account, stamped
  inside the script that made it.

The checks are plain functions over ``(instant, amount)`` points in integer microseconds of
Redis time, so the tests and the benchmark judge a run the same way:

* :func:`bucket_worst`: a token bucket of rate ``r`` and burst ``B`` allows at most
  ``B + r * (b - a)`` in any span ``[a, b]``; the worst span of the run, found in one pass;
* :func:`window_worst`: a sliding window allows at most its count in any span of its length;
* :func:`most_held`: the most permits held at once, from the start and end lines;
* :func:`per_window`: the aggregate per consecutive window (what ``examples/scaling_out.py``
  prints, computed there on its own so the example stands alone).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = [
    "CREDITS",
    "MICROS",
    "GrantLog",
    "UPSTREAM_LOG_SCRIPT",
    "LogLine",
    "Span",
    "bucket_worst",
    "most_held",
    "parse_log_line",
    "per_window",
    "points",
    "read_grant_log",
    "read_upstream_log",
    "redis_now_us",
    "window_worst",
]

MICROS = 1_000_000
"""Microseconds in a second: every instant here is an int count of them (Redis ``TIME``)."""

UPSTREAM_LOG_SCRIPT = """
local now = redis.call('TIME')
local line = now[1] .. ' ' .. now[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]
    .. ' ' .. ARGV[4]
redis.call('RPUSH', KEYS[1], line)
return now
"""
"""Append ``"<seconds> <micros> <worker> <event> <job> <amount>"`` to the list ``KEYS[1]``,
stamped with the server's clock. ``ARGV``: worker, event (``start`` or ``end``), job, amount.
Redis runs one script at a time, so the list is in the order of its stamps."""


@attrs.frozen
class LogLine:
    """One line of the upstream log: at ``at_us`` (Redis time), ``worker``'s ``job`` did
    ``event`` (``start`` or ``end``) for ``amount`` (requests, tokens or permits)."""

    at_us: int
    worker: str
    event: str
    job: str
    amount: float


def parse_log_line(raw: str | bytes) -> LogLine:
    """One line as :data:`UPSTREAM_LOG_SCRIPT` wrote it; a malformed line is an error naming it."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    parts = text.split(" ")
    if len(parts) != 6:
        raise ValueError(f"upstream log: a line has 6 fields, got {text!r}")
    seconds, micros, worker, event, job, amount = parts
    if event not in ("start", "end"):
        raise ValueError(f"upstream log: the event is 'start' or 'end', got {text!r}")
    return LogLine(int(seconds) * MICROS + int(micros), worker, event, job, float(amount))


async def read_upstream_log(client: Any, key: str) -> list[LogLine]:
    """Every line of the upstream log at ``key`` (a coredis client), in the order of its stamps."""
    raw: Sequence[str | bytes] = await client.lrange(key, 0, -1)
    return [parse_log_line(line) for line in raw]


async def redis_now_us(client: Any) -> int:
    """The server's clock (``TIME``) in microseconds: the clock every worker's log is on."""
    seconds, micros = await client.eval("return redis.call('TIME')", keys=[], args=[])
    return int(seconds) * MICROS + int(micros)


@attrs.frozen
class GrantLog:
    """A shared account's grant log as signed ``(at_us, amount)`` points in time order, and the
    resolution of its stamps in seconds (a millisecond entry id, or ``at_us`` to the µs).

    A stamp may be early by up to ``resolution``, so a span between two stamps may read that
    much longer or shorter than it was: :meth:`bucket_worst` and :meth:`window_worst` judge with
    that much allowance (rate times the resolution; a window that much shorter)."""

    points: list[tuple[int, float]]
    resolution: float

    def bucket_worst(self, rate: float, burst: float) -> Span | None:
        return bucket_worst(self.points, rate, burst + rate * self.resolution)

    def window_worst(self, count: float, length: float) -> Span | None:
        return window_worst(self.points, count, length - self.resolution)


async def read_grant_log(client: Any, key: str) -> GrantLog:
    """The grant log a shared account keeps at ``key`` (a Redis stream), as signed points:
    a debit (``kind`` ``take``) positive, a credit (:data:`CREDITS`: a lease handed back, a
    roll-back, a dead worker's permits expired) negative.

    Each entry's id is ``<milliseconds>-<sequence>`` on the server's clock; when every entry
    carries ``at_us`` (the script's own ``TIME`` in microseconds) that finer stamp is used.
    """
    entries: Sequence[Any] = await client.xrange(key)  # coredis StreamEntry tuples
    found: list[tuple[int, float]] = []
    resolution = 1e-6
    for entry in entries:
        entry_id, fields = entry.identifier, entry.field_values
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        if "at_us" in decoded:
            at_us = int(decoded["at_us"])
        else:
            at_us = int(_text(entry_id).split("-")[0]) * 1000
            resolution = 1e-3
        kind = decoded.get("kind", "take")
        amount = float(decoded.get("requests", decoded.get("permits", "1")))
        found.append((at_us, -amount if kind in CREDITS else amount))
    found.sort(key=lambda point: point[0])
    return GrantLog(found, resolution)


CREDITS = frozenset({"return", "expire"})
"""The grant-log kinds that give capacity back to the shared account."""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def points(lines: Iterable[LogLine], event: str = "start") -> list[tuple[int, float]]:
    """The ``(at_us, amount)`` points of the lines of one event, in time order."""
    return sorted((line.at_us, line.amount) for line in lines if line.event == event)


@attrs.frozen
class Span:
    """The worst span a check found: ``used`` in ``[start_us, end_us]`` against ``allowed``.

    ``excess`` is ``used - allowed``: positive means the quota was overshot in that span.
    """

    start_us: int
    end_us: int
    used: float
    allowed: float

    @property
    def excess(self) -> float:
        return self.used - self.allowed

    @property
    def seconds(self) -> float:
        return (self.end_us - self.start_us) / MICROS


def _check_rate(name: str, value: float, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'positive' if positive else '>= 0'}, got {value!r}")


def bucket_worst(grants: Sequence[tuple[int, float]], rate: float, burst: float) -> Span | None:
    """The span ``[a, b]`` of the run where ``used - (burst + rate * (b - a))`` is largest.

    ``grants`` are ``(at_us, amount)`` points in time order (a negative amount is a credit: a
    lease handed back). A bucket of ``rate`` per second holding at most ``burst`` lets through at
    most ``burst + rate * (b - a)`` in any span, so a positive :attr:`Span.excess` is an
    overshoot. One pass: the best start for each end is carried along. ``None`` for no grants.
    """
    _check_rate("bucket_worst: rate", rate, positive=True)
    _check_rate("bucket_worst: burst", burst, positive=False)
    _check_order(grants)
    worst: Span | None = None
    best_start_value = -math.inf  # max over starts i of rate * t_i - (sum before i)
    start_us = 0
    before_start = 0.0  # the amounts before that best start
    before = 0.0
    for at_us, amount in grants:
        value = rate * at_us / MICROS - before
        if value > best_start_value:
            best_start_value, start_us, before_start = value, at_us, before
        before += amount
        used = before - before_start
        allowed = burst + rate * (at_us - start_us) / MICROS
        if worst is None or used - allowed > worst.excess:
            worst = Span(start_us, at_us, used, allowed)
    return worst


def window_worst(grants: Sequence[tuple[int, float]], count: float, length: float) -> Span | None:
    """The span of ``length`` seconds, ``(t - length, t]``, holding the most: a sliding window
    allows at most ``count`` in every such span. ``None`` for no grants."""
    _check_rate("window_worst: count", count, positive=True)
    _check_rate("window_worst: length", length, positive=True)
    _check_order(grants)
    times = [at_us for at_us, _ in grants]
    prefix = [0.0]
    for _, amount in grants:
        prefix.append(prefix[-1] + amount)
    span_us = round(length * MICROS)
    worst: Span | None = None
    for at_us in times:
        end = bisect.bisect_right(times, at_us)
        begin = bisect.bisect_right(times, at_us - span_us)
        used = prefix[end] - prefix[begin]
        if worst is None or used - count > worst.excess:
            worst = Span(at_us - span_us, at_us, used, float(count))
    return worst


def most_held(lines: Iterable[LogLine], held_until: dict[str, int] | None = None) -> float:
    """The most permits held at once, from the start and end lines of the upstream log.

    A job that started and never ended (its worker was killed) holds its permits until
    ``held_until[worker]`` (when its lease lapses); without an entry, to the end of the log.
    """
    events: list[tuple[int, int, float]] = []  # (at, order, change): ends sort before starts
    open_jobs: dict[str, tuple[str, float]] = {}
    last = 0
    for line in lines:
        last = max(last, line.at_us)
        if line.event == "start":
            events.append((line.at_us, 1, line.amount))
            open_jobs[line.job] = (line.worker, line.amount)
        else:
            events.append((line.at_us, 0, -line.amount))
            open_jobs.pop(line.job, None)
    for worker, amount in open_jobs.values():
        until = (held_until or {}).get(worker, last)
        events.append((until, 0, -amount))
    held = peak = 0.0
    for _, _, change in sorted(events):
        held += change
        peak = max(peak, held)
    return peak


def per_window(
    grants: Sequence[tuple[int, float]], start_us: int, length: float, windows: int
) -> list[float]:
    """The amount granted in each of ``windows`` consecutive windows of ``length`` seconds from
    ``start_us``: ``[start, start + length)``, then the next."""
    _check_rate("per_window: length", length, positive=True)
    if windows < 1:
        raise ValueError(f"per_window: windows must be >= 1, got {windows!r}")
    totals = [0.0] * windows
    span_us = length * MICROS
    for at_us, amount in grants:
        index = math.floor((at_us - start_us) / span_us)
        if 0 <= index < windows:
            totals[index] += amount
    return totals


def _check_order(grants: Sequence[tuple[int, float]]) -> None:
    for (earlier, _), (later, _) in zip(grants, grants[1:], strict=False):
        if later < earlier:
            raise ValueError("the points must be in time order (sort them by their instant)")
