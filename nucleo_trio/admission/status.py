"""Frozen snapshots of an account, each with the one line a health report prints (STS-01).

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
    def summary(self) -> str: ...


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen
class SemaphoreLimiterStatus:
    """A counting gate at one moment (STS-04): how many permits exist, how many are free.

    ``active`` is ``capacity - available``: the permits held right now. ``last_activity`` is the
    instant of the gate's last take or give (its construction until then), or ``None`` for a
    gate built and used outside a trio run.
    """

    capacity: int = attrs.field(validator=_non_negative)
    available: int = attrs.field(validator=_non_negative)
    last_activity: float | None = None

    @property
    def active(self) -> int:
        return self.capacity - self.available

    @property
    def summary(self) -> str:
        when = "never" if self.last_activity is None else f"at {self.last_activity:.3f}s"
        return f"permits {self.active}/{self.capacity} active, last activity {when}"


@attrs.frozen
class UnboundedMemoryStatus:
    """The memory account when no memory gate is configured: nothing is paced or latched.

    ``used_bytes`` is the process's resident memory and ``total_bytes`` the machine's physical
    memory, both read when the status was taken; they inform, they do not gate.
    """

    used_bytes: int = attrs.field(validator=_non_negative)
    total_bytes: int = attrs.field(validator=_non_negative)

    @property
    def usage_ratio(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0

    @property
    def summary(self) -> str:
        return (
            f"memory unbounded: {self.usage_ratio * 100:.1f}% "
            f"({self.used_bytes / _GIB:.1f}/{self.total_bytes / _GIB:.1f} GiB), no gate"
        )


class MemoryZone(enum.StrEnum):
    """Where the memory pressure gate stands (MEM-31): latched, draining its line, or clear."""

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
    """The memory pressure gate at one look (MEM-32, STS-05).

    ``used_bytes`` against ``max_bytes`` is the reading; ``usage_ratio`` is their ratio (the
    level the curve and the latch read) and ``floor_ratio`` the live-set floor (the reading after
    the last fall, which the growth penalty measures). ``zone`` is CRITICAL, DRAINING or GREEN;
    ``held_on_memory`` the length of memory's line; ``pacing_ms`` how long until the delay lets
    the next job go, 0 when nothing is paced or a completion already lets one go;
    ``growth_penalty`` the factor a release now would commit.
    """

    used_bytes: int = attrs.field(validator=_non_negative)
    max_bytes: int = attrs.field(validator=_non_negative)
    usage_ratio: float = attrs.field(validator=_ratio)
    floor_ratio: float = attrs.field(validator=_ratio)
    zone: MemoryZone = attrs.field(converter=_zone)
    held_on_memory: int = attrs.field(validator=_non_negative)
    pacing_ms: int = attrs.field(validator=_non_negative)
    growth_penalty: float = attrs.field(validator=_ratio)

    @property
    def summary(self) -> str:
        """The level, the bytes in GiB, the floor, the zone, memory's line, the next release
        and the penalty, in that order (STS-05)."""
        return (
            f"{self.usage_ratio * 100:.1f}% "
            f"({self.used_bytes / _GIB:.1f}/{self.max_bytes / _GIB:.1f} GiB), "
            f"floor {self.floor_ratio * 100:.1f}%, zone {self.zone}, "
            f"{self.held_on_memory} in memory's line, "
            f"next release in {self.pacing_ms}ms unless a job finishes first, "
            f"growth penalty x{self.growth_penalty:.0f}"
        )
