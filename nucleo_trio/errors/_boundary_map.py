"""The libraries below the runtime (httpx, psycopg, sqlite3, the model SDKs), translated at the
line that calls them.

Each client keeps one table per boundary, built once with :func:`exception_map`: it maps the
library's exception types to builders, and every call site wraps the library call in
``with map_exceptions(TABLE, **context)``::

    _CLOSING = exception_map({sqlite3.Error: closing_failed})

    with map_exceptions(_CLOSING, name=self._name):
        connection.close()

An exception the block raises is looked up by its class's MRO, so the most specific entry wins
whatever the table's order (a ``ReadTimeout`` meets the ``TimeoutException`` entry before the
``HTTPError`` one). The entry's builder is called as ``build(exc, **context)`` and returns the
runtime's exception, or ``None`` to let the library's go on as raised (an error that means
something only in some state, say). The runtime's exception is raised ``from`` the library's,
unless the builder gave it a cause of its own (a re-run signal whose cause is the runtime's
error, whose cause is the library's): that chain is kept.

Only :class:`Exception` is translated. A cancellation, a ``KeyboardInterrupt``, a
``SystemExit`` or a ``GeneratorExit`` always goes on untouched, and so does an exception group:
a call site's ``except`` never matched a group, and a failure inside a nursery is the nursery
owner's to read (:mod:`nucleo_trio.errors._groups`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, TypeAlias

__all__ = ["Builder", "ExceptionMap", "exception_map", "map_exceptions", "mapped"]

Builder: TypeAlias = Callable[..., Exception | None]
"""Called as ``build(exc, **context)``: the runtime's exception for ``exc``, or ``None`` to let
``exc`` go on unchanged."""

ExceptionMap: TypeAlias = Mapping[type[Exception], Builder]
"""A library's exception types, each with the builder of the runtime's exception for it."""


def exception_map(table: Mapping[type[Exception], Builder]) -> ExceptionMap:
    """``table`` checked and frozen, for a module to build once.

    Every key must be a subclass of :class:`Exception` other than an exception group (those
    are never translated, so such an entry could never apply), and every value callable; a
    :class:`TypeError` names the entry otherwise.
    """
    for kind, build in table.items():
        if (
            not isinstance(kind, type)
            or not issubclass(kind, Exception)
            or issubclass(kind, BaseExceptionGroup)
        ):
            raise TypeError(
                f"exception_map: {kind!r} is not an Exception class that can be translated "
                "(a cancellation, an interrupt or an exception group never is)"
            )
        if not callable(build):
            raise TypeError(f"exception_map: the builder for {kind.__name__} is not callable")
    return MappingProxyType(dict(table))


def mapped(table: ExceptionMap, exc: BaseException, /, **context: Any) -> Exception | None:
    """The runtime's exception for ``exc`` by ``table`` (the entry of the most specific class
    in its MRO), or ``None`` when the table has none for it or its builder declines."""
    if not isinstance(exc, Exception) or isinstance(exc, BaseExceptionGroup):
        return None
    for kind in type(exc).__mro__:
        build = table.get(kind)
        if build is not None:
            failure = build(exc, **context)
            return None if failure is exc else failure
    return None


class map_exceptions:
    """Translate what the block raises by ``table``, the builders called with ``context``.

    A plain ``with`` block, usable around ``await`` and in worker threads alike. What has no
    entry, or whose builder returns ``None``, leaves the block as it was raised.
    """

    __slots__ = ("_context", "_table")

    def __init__(self, table: ExceptionMap, /, **context: Any) -> None:
        self._table = table
        self._context = context

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        failure = mapped(self._table, exc, **self._context)
        if failure is None:
            return
        cause = failure.__cause__
        raise failure from (exc if cause is None else cause)
