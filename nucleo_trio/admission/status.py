"""Frozen snapshots of an account, each with the one line a health report prints (STS-01).

Every account returns its own record type from ``status()``; what they share is
:class:`RateLimiterStatus`: a ``summary`` property, one line that names the numbers.
Instants (``last_activity``) are :func:`trio.current_time` values, the clock every account reads.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

__all__ = ["RateLimiterStatus", "SemaphoreLimiterStatus", "UnboundedMemoryStatus"]

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
    """A unit-permit gate at one moment (STS-04): how many permits exist, how many are free.

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
