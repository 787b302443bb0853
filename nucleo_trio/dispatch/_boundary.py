"""Where the dispatcher meets the trio program around it.

What leaves ``open_dispatcher`` and ``JobDispatcher.run`` for the exception groups their
nurseries raise (a ``KeyboardInterrupt`` or ``SystemExit`` bare, one real failure as itself,
cancellations only as a cancellation), the checks on the seconds a caller hands to ``shutdown``
and ``submit_with_delay``, the report of where a job that will not end is stuck, and the small
task helpers the stop sequence uses.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable

import trio


@trio.lowlevel.enable_ki_protection
async def _cancel_after_real_seconds(
    seconds: float, finished: threading.Event, scope: trio.CancelScope
) -> None:
    """Cancel ``scope`` after ``seconds`` on the wall clock, unless ``finished`` is set first."""
    if not await trio.to_thread.run_sync(finished.wait, seconds, abandon_on_cancel=True):
        scope.cancel()


class _StartedRelay:
    """A task status that tells :meth:`JobDispatcher._supervised` its task has started."""

    def __init__(self, started: Callable[[None], None]) -> None:
        self.started = started


def _only_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(isinstance(leaf, trio.Cancelled) for leaf in _leaves(exc))
    return False


def _fatal_in(exc: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or ``SystemExit`` in ``exc``, bare or inside a group."""
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for leaf in _leaves(exc):
            if isinstance(leaf, KeyboardInterrupt | SystemExit):
                return leaf
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(reversed(exc.exceptions))
        elif not any(exc is seen for seen in out):
            out.append(exc)
    return out


def _boundary_error(
    group: BaseExceptionGroup[BaseException], prefer: BaseException | None = None
) -> BaseException:
    """What leaves the dispatcher's boundary for a group its nurseries raised.

    A ``KeyboardInterrupt`` or ``SystemExit`` wins and leaves bare. Cancellations are the echo of
    whatever stopped the nurseries and are dropped beside a real failure; one real failure
    leaves as itself; only two or more real failures at once leave as a group. A group of
    nothing but cancellations leaves as one ``Cancelled`` (``prefer``'s, when it is one), which
    the cancel scope that caused it catches.
    """
    leaves = _leaves(group)
    for leaf in leaves:
        if isinstance(leaf, KeyboardInterrupt | SystemExit):
            return leaf
    real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    if real:
        return BaseExceptionGroup("the dispatcher and the code around it both failed", real)
    if isinstance(prefer, trio.Cancelled):
        return prefer
    return leaves[0] if leaves else group


def _checked_seconds(what: str, value: object, *, allow_negative: bool = False) -> float:
    """A number of seconds from a caller: a real number, not NaN (nor a bool, nor a string)."""
    if type(value) is bool or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}")
    if value < 0 and not allow_negative:
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return float(value)


def _where_stuck(task: trio.lowlevel.Task) -> str:
    """Where a job's task (or the deepest of its child tasks) is waiting, for the stop's
    warning: the innermost frame outside trio, and whether trio holds it in a worker thread."""
    places: list[str] = []
    stack = [task]
    while stack:
        current = stack.pop()
        children = [t for n in current.child_nurseries for t in n.child_tasks]
        if children:
            stack.extend(children)
            continue
        frames = [frame for frame, _ in current.iter_await_frames()]
        own = [f for f in frames if f"{os.sep}trio{os.sep}" not in f.f_code.co_filename]
        if not own:
            continue
        frame = own[-1]
        where = f"at {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        if any(f.f_code.co_filename.endswith(f"trio{os.sep}_threads.py") for f in frames):
            where += " (waiting on a worker thread)"
        places.append(where)
    return "; ".join(places) if places else "(no frame found)"
