"""The demo's memory account: one that never gates, and says so.

A real memory account reads the process's memory, which differs from one run to the next; the
demo promises that one seed prints one run, word for word, so it hands the dispatcher this
account instead. It always fits, never holds anyone (so admission never emits an event on it),
and its status line, the health snapshot's "Memory:" line, is the same every time.
"""

from __future__ import annotations

import attrs

from ..admission.memory import UnboundedMemory

__all__ = ["DemoMemory", "DemoMemoryStatus"]


@attrs.frozen
class DemoMemoryStatus:
    """What the demo's memory account reports: that it does not gate."""

    @property
    def summary(self) -> str:
        return "not gated in the demo (a real deployment paces admission near its memory limit)"


class DemoMemory(UnboundedMemory):
    """A memory account (``memory``, category ``memory``) that always fits, like
    :class:`~nucleo_trio.admission.memory.UnboundedMemory`, but reads nothing: its figures and
    its status line are the same on every run."""

    @property
    def capacity(self) -> int:
        return 0

    @property
    def in_use(self) -> int:
        return 0

    def status(self) -> DemoMemoryStatus:  # type: ignore[override]  # a fixed status line
        return DemoMemoryStatus()
