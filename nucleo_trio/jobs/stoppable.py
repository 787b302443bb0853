"""Things the dispatcher stops at shutdown, once."""

from __future__ import annotations

import abc
import inspect

__all__ = ["AbstractStoppable"]


class AbstractStoppable(abc.ABC):
    """A component with a one-shot ``stop()``.

    ``stop()`` raises the stopping flag first and then runs :meth:`do_stop`, exactly once however
    often it is called; ``do_stop`` already sees ``is_stopping`` true. ``do_stop`` may be
    a plain or an ``async`` method; ``stop()`` is async either way so the dispatcher can await it.
    """

    _stopping: bool = False

    @property
    def is_stopping(self) -> bool:
        """True from the first :meth:`stop` call on; never false again."""
        return self._stopping

    async def stop(self) -> None:
        """Raise the stopping flag and run :meth:`do_stop`, awaiting it when it is async. Only
        the first call does anything; later ones return at once, even while it runs."""
        if self._stopping:  # ID-12: once, however often called
            return
        self._stopping = True
        outcome = self.do_stop()
        if inspect.isawaitable(outcome):
            await outcome

    @abc.abstractmethod
    def do_stop(self) -> object:
        """Release what this component holds. Called once, with ``is_stopping`` already true."""
