"""Progress for the command line's long runs: a rich bar on a terminal, nothing anywhere else.

The demo and ``nucleo-trio trajectory`` print plain text that a pipe, a file or a test reads
word for word. On a terminal, a long run also shows what it is doing: a transient bar (or a
spinner, for work that has no count) drawn by rich while the run lasts and cleared when it ends,
so what stays on the screen is the same text a pipe gets. Whether the output is a terminal is
the stream's own answer (``isatty()``); a caller may pass a rich ``Console`` of its own instead
(a test forces one with ``Console(force_terminal=True)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = ["RunProgress", "terminal_console"]


def terminal_console(stream: TextIO, *, color: bool = True) -> Console | None:
    """A rich console writing to ``stream`` when it is a terminal, else ``None``."""
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        return None
    from rich.console import Console

    return Console(file=stream, no_color=not color)


class RunProgress:
    """One bar (or spinner) for one run, shown on ``console`` and on nothing when it is ``None``.

    Use it as a context manager; inside it, :meth:`start` sets the bar's description and
    total, :meth:`advance` moves it, :meth:`print` writes a line above the bar (or to
    ``stream`` when there is no bar), and :meth:`status` shows a spinner while a step with no
    count runs. Leaving the block clears the bar. Every method is safe to call with no console:
    then it does nothing but :meth:`print`.
    """

    def __init__(self, console: Console | None, stream: TextIO | None = None) -> None:
        self.console = console
        self._stream = stream
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @property
    def shown(self) -> bool:
        """Whether a bar is drawn (a console was given)."""
        return self.console is not None

    def __enter__(self) -> RunProgress:
        if self.console is not None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def start(self, description: str, total: int) -> None:
        """Show a bar reading ``description`` that fills at ``total``."""
        if self._progress is not None:
            self._task = self._progress.add_task(description, total=total)

    def advance(self, steps: int = 1) -> None:
        """Move the bar ``steps`` forward."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, steps)

    def print(self, text: str) -> None:
        """Write ``text`` (ANSI codes allowed) above the bar, or to the stream without one."""
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text.from_ansi(text), soft_wrap=True)
        elif self._stream is not None:
            print(text, file=self._stream, flush=True)

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[None]:
        """A spinner reading ``text`` while the block runs (a step with nothing to count)."""
        if self.console is None or self._progress is not None:
            yield
            return
        with self.console.status(text):
            yield
