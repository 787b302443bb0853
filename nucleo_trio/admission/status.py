"""Frozen snapshots of an account, each with the one line a health report prints.

Every account returns its own record type from ``status()``; what they share is
:class:`RateLimiterStatus`: a ``summary`` property, one line that names the numbers.
Instants (``last_activity``) are :func:`trio.current_time` values, the clock every account reads.
"""

from __future__ import annotations

import enum
from typing import Protocol, runtime_checkable

import attrs

__all__ = [
    "MemoryPressureStatus",
    "MemoryZone",
    "RateLimiterStatus",
    "SemaphoreLimiterStatus",
    "UnboundedMemoryStatus",
]

_GIB = 1024**3


@runtime_checkable
class RateLimiterStatus(Protocol):
    """What every status record answers: one line for a log or a status row."""

    @property
    def summary(self) -> str:
        """One line that names the record's numbers, for a log or a health row (a ``str``)."""
        ...


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen
class SemaphoreLimiterStatus:
    """A counting gate at one moment: how many permits exist, how many are free.

    Both counts must be ``int`` values of 0 or more (:class:`TypeError` or :class:`ValueError`
    otherwise).
    """

    capacity: int = attrs.field(validator=_non_negative)
    """The gate's permits."""
    available: int = attrs.field(validator=_non_negative)
    """Permits free at that moment (never negative, even under a lowered capacity)."""
    last_activity: float | None = None
    """The :func:`trio.current_time` instant of the gate's last take or give (its construction
    until then), or ``None`` for a gate built and used outside a trio run."""

    @property
    def active(self) -> int:
        """Permits held: ``capacity - available``."""
        return self.capacity - self.available

    @property
    def summary(self) -> str:
        """``permits <active>/<capacity> active, last activity at <t>s`` (or ``never``)."""
        when = "never" if self.last_activity is None else f"at {self.last_activity:.3f}s"
        return f"permits {self.active}/{self.capacity} active, last activity {when}"


@attrs.frozen
class UnboundedMemoryStatus:
    """The memory account when no memory gate is configured: nothing is paced or latched.

    The figures are read when the status is taken; they inform, they do not gate.
    """

    used_bytes: int = attrs.field(validator=_non_negative)
    """The process's resident memory, in bytes."""
    total_bytes: int = attrs.field(validator=_non_negative)
    """The machine's physical memory, in bytes."""

    @property
    def usage_ratio(self) -> float:
        """``used_bytes / total_bytes`` (0.0 when ``total_bytes`` is 0)."""
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0

    @property
    def summary(self) -> str:
        """``memory unbounded: <p>% (<used>/<total> GiB), no gate``."""
        return (
            f"memory unbounded: {self.usage_ratio * 100:.1f}% "
            f"({self.used_bytes / _GIB:.1f}/{self.total_bytes / _GIB:.1f} GiB), no gate"
        )


class MemoryZone(enum.StrEnum):
    """Where the memory pressure gate stands: latched, draining its line, or clear."""

    CRITICAL = "CRITICAL"
    """The latch is set: no resourceful job is granted until a reading is below 90 %."""
    DRAINING = "DRAINING"
    """Memory's line is not empty: it goes one job per completion or per elapsed delay."""
    GREEN = "GREEN"
    """Nobody is held on memory: an arrival starts at once."""


def _ratio(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{attribute.name} must be a ratio >= 0, got {value!r}")


def _zone(value: str) -> MemoryZone:
    try:
        return MemoryZone(value)
    except ValueError:
        raise ValueError(f"zone must be one of CRITICAL, DRAINING, GREEN, got {value!r}") from None


@attrs.frozen
class MemoryPressureStatus:
    """The memory pressure gate at one look: the reading, the floor, the zone, memory's line,
    the pacing and the growth penalty.

    Counts must be ``int`` values of 0 or more and ratios numbers of 0 or more; ``zone`` takes a
    :class:`MemoryZone` or its name (a :class:`ValueError` names what else came).
    """

    used_bytes: int = attrs.field(validator=_non_negative)
    """Bytes in use, as the gate's reader measured them."""
    max_bytes: int = attrs.field(validator=_non_negative)
    """The limit the reading is measured against, in bytes."""
    usage_ratio: float = attrs.field(validator=_ratio)
    """``used_bytes / max_bytes``: the level the delay curve and the latch read (0.95 is 95 %)."""
    floor_ratio: float = attrs.field(validator=_ratio)
    """The live-set floor as a ratio: the reading after the last fall, which the growth
    penalty measures."""
    zone: MemoryZone = attrs.field(converter=_zone)
    """``CRITICAL`` while latched, ``DRAINING`` while memory's line is not empty, else
    ``GREEN``."""
    held_on_memory: int = attrs.field(validator=_non_negative)
    """How many jobs wait in memory's line."""
    pacing_ms: int = attrs.field(validator=_non_negative)
    """Milliseconds until the delay lets the next job go; 0 when nothing is paced or a
    completion already lets one go."""
    growth_penalty: float = attrs.field(validator=_ratio)
    """The factor (1 to 72 000) a release now would multiply the delay by."""

    @property
    def summary(self) -> str:
        """The level, the bytes in GiB, the floor, the zone, memory's line, the next release
        and the penalty, in that order."""
        return (
            f"{self.usage_ratio * 100:.1f}% "
            f"({self.used_bytes / _GIB:.1f}/{self.max_bytes / _GIB:.1f} GiB), "
            f"floor {self.floor_ratio * 100:.1f}%, zone {self.zone}, "
            f"{self.held_on_memory} in memory's line, "
            f"next release in {self.pacing_ms}ms unless a job finishes first, "
            f"growth penalty x{self.growth_penalty:.0f}"
        )
