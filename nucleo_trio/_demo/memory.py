"""The demo's memory account: one that never gates, and says so.

A real memory account reads the process's memory, which differs from one run to the next; the
demo promises that one seed prints one run, word for word, so it hands the dispatcher this
account instead. It always fits, never holds anyone (so admission never emits an event on it),
and its status line, the health snapshot's "Memory:" line, is the same every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..admission import AbstractRateLimiter

__all__ = ["DemoMemory", "DemoMemoryStatus"]


@attrs.frozen
class DemoMemoryStatus:
    """What the demo's memory account reports: that it does not gate."""

    @property
    def summary(self) -> str:
        return "not gated in the demo (a real deployment paces admission near its memory limit)"


class DemoMemory(AbstractRateLimiter):
    """A memory account (``memory``, category ``memory``) that always fits; RELEASE."""

    @property
    def limiter_name(self) -> str:
        return "memory"

    @property
    def limiter_category(self) -> str:
        return "memory"

    @property
    def capacity(self) -> int:
        return 0

    @property
    def in_use(self) -> int:
        return 0

    def status(self) -> DemoMemoryStatus:
        return DemoMemoryStatus()

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return True

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        return None

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None
