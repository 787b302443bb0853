"""Ctrl-C in the SDK's tasks, handed on to the program.

trio raises ``KeyboardInterrupt`` in whichever task is running when SIGINT arrives, unless that
task's code is protected. The connections' own tasks are; the tasks the SDK starts inside them
(a stdio client's pipe readers and writers) are not, so the interrupt can surface in a
connection. There it ends the connection, and :func:`interrupt_the_program` raises SIGINT again
from protected code, which trio delivers to the run's main task: the program sees its Ctrl-C as
it would have, and stops its dispatcher in order.
"""

from __future__ import annotations

import logging
import signal

__all__ = ["holds", "interrupt_the_program", "without"]

log = logging.getLogger("nucleo_trio_mcp")


def holds(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is, or a group of it holds, an exception of ``kind``."""
    if isinstance(exc, BaseExceptionGroup):
        return any(holds(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)


def without(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` with every exception of ``kind`` taken out; ``None`` when nothing is left."""
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(kind)
        return rest
    return None if isinstance(exc, kind) else exc


def interrupt_the_program() -> None:
    """Raise SIGINT again from protected code, so that trio delivers the ``KeyboardInterrupt``
    to the run's main task (call it only from a function trio protects)."""
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_DFL):
        log.error("Ctrl-C ended an MCP connection, and trio handles no SIGINT to pass it on")
        return
    signal.raise_signal(signal.SIGINT)
