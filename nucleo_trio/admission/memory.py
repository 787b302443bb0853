"""The memory account's seam, and its default when no memory gate is configured.

Memory is the one resource nothing declares, so admission treats it apart from a demand's
entries: every *resourceful* demand (one with at least one entry) asks the memory account
``fits([], [])`` before anything else and ``try_take([], [])`` after every entry is taken, a
job short on memory is held on the memory account (memory's line), and every release or
roll-back of a resourceful grant calls ``give([])`` as a *completion*. Admission also hands
the memory account ``observe_held(supplier)``, a reader of how many waiters it holds on memory.
An empty demand (an orchestrator's) never meets the memory account at all.

The gate that latches near the memory limit and drains its line at a pace memory can take is
:class:`~nucleo_trio.admission.memory_gate.MemoryPressureGate`, the dispatcher's default; any
:class:`~nucleo_trio.admission.limiter.RateLimiter` named ``"memory"`` with category
``"memory"`` can take its seat. :class:`UnboundedMemory` is what an :class:`Admission` built
without one uses (and a dispatcher configured with ``MemoryConfig(enabled=False)``): it always
fits, so it never holds anyone and never emits an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]

from .limiter import AbstractRateLimiter
from .status import UnboundedMemoryStatus

__all__ = ["UnboundedMemory"]


class UnboundedMemory(AbstractRateLimiter):
    """A memory account that never gates: always fits, never short, ``earliest_fit`` ``None``.

    It is RELEASE, like every memory account. ``capacity`` is the machine's physical memory
    (read once) and ``in_use`` the process's resident memory (read on each call); both are
    informational only.
    """

    def __init__(self) -> None:
        self._total = int(psutil.virtual_memory().total)
        self._process = psutil.Process()

    @property
    def limiter_name(self) -> str:
        """Always ``"memory"``, the name of the seat it takes."""
        return "memory"

    @property
    def limiter_category(self) -> str:
        """Always ``"memory"``."""
        return "memory"

    @property
    def capacity(self) -> int:
        """The machine's physical memory in bytes, read once when the account was built."""
        return self._total

    @property
    def in_use(self) -> int:
        """The process's resident memory in bytes, read on every call."""
        return int(self._process.memory_info().rss)

    def status(self) -> UnboundedMemoryStatus:
        """The resident and physical memory now, as an
        :class:`~nucleo_trio.admission.UnboundedMemoryStatus`."""
        return UnboundedMemoryStatus(used_bytes=self.in_use, total_bytes=self._total)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Always ``True``: nobody is ever held on memory."""
        return True

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Always ``True``, and nothing is counted."""
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """A completion; there is nothing to give back or look at again, so it does nothing."""
        return None

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """Always ``None``: it is never short, so there is nothing to wait for."""
        return None
