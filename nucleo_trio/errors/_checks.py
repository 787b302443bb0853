"""Argument checks and message helpers shared by the error classes' constructors."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

CORRECTABLE_SUFFIX = (
    "[This error may be correctable - you can retry with different parameters "
    "or try a different approach]"
)
"""The line :meth:`LLMReadableError.explain_to_llm` adds after a correctable error's message."""
UNCORRECTABLE_SUFFIX = "[This error is not correctable - consider an alternative approach]"
"""The line :meth:`LLMReadableError.explain_to_llm` adds after an uncorrectable error's message."""

# How much of an upstream response body or a parameter value goes into a message. A model reads
# these texts inside its context window; a 2 MB HTML error page would crowd out the task.
_PREVIEW_CHARS = 500


def _require_str(name: str, value: object, *, owner: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {name} must be a str, got {type(value).__name__}")
    return value


def _require_name(name: str, value: object, *, owner: str) -> str:
    text = _require_str(name, value, owner=owner)
    if not text.strip():
        raise ValueError(f"{owner}: {name} must not be blank")
    return text


def _require_optional_str(name: str, value: object, *, owner: str) -> str | None:
    return None if value is None else _require_str(name, value, owner=owner)


def _require_cause(value: object, *, owner: str) -> BaseException | None:
    if value is not None and not isinstance(value, BaseException):
        raise TypeError(f"{owner}: cause must be an exception, got {type(value).__name__}")
    return value


def _require_seconds(name: str, value: object, *, owner: str) -> float | None:
    """A non-negative, finite number of seconds, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}: {name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}: {name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _preview(text: str) -> str:
    if len(text) <= _PREVIEW_CHARS:
        return text
    return text[:_PREVIEW_CHARS] + f"... ({len(text) - _PREVIEW_CHARS} more characters)"


def _describe(exc: BaseException) -> str:
    """`ValueError: bad thing`, or just the class name when the exception has no message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reduce_by_state(self: BaseException) -> tuple[Any, ...]:
    # The constructors below take keyword-only and derived arguments, so the default
    # `BaseException.__reduce__` (which replays `self.args` into `__init__`) cannot rebuild them.
    # Restoring args and attributes directly keeps every error picklable across processes.
    return (_restore_exception, (type(self), self.args, dict(self.__dict__)))


def _restore_exception(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> BaseException:
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _walk_chain(exc: BaseException) -> Iterator[BaseException]:
    """Every exception reachable from ``exc``, nearest first.

    Depth-first: an exception, then the members of a group (in order, each with its own chain),
    then its ``__cause__``, or its ``__context__`` when there is no cause and the context was
    not suppressed with ``raise ... from None``. Each exception is visited once, so a cyclic
    chain ends.
    """
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        following: list[BaseException] = []
        if isinstance(current, BaseExceptionGroup):
            following.extend(current.exceptions)
        if current.__cause__ is not None:
            following.append(current.__cause__)
        elif current.__context__ is not None and not current.__suppress_context__:
            following.append(current.__context__)
        stack.extend(reversed(following))
