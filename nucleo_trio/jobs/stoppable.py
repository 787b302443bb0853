"""Things the dispatcher stops at shutdown, once."""

from __future__ import annotations

import abc
import inspect

__all__ = ["AbstractStoppable"]


class AbstractStoppable(abc.ABC):
    """A component with a one-shot ``stop()``.

    ``stop()`` raises the stopping flag first and then runs :meth:`do_stop`, exactly once however
    often it is called (ID-12); ``do_stop`` already sees ``is_stopping`` true. ``do_stop`` may be
    a plain or an ``async`` method; ``stop()`` is async either way so the dispatcher can await it.
    """

    _stopping: bool = False

    @property
    def is_stopping(self) -> bool:
        return self._stopping

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        outcome = self.do_stop()
        if inspect.isawaitable(outcome):
            await outcome

    @abc.abstractmethod
    def do_stop(self) -> object:
        """Release what this component holds. Called once, with ``is_stopping`` already true."""
