"""Values people wait on: trio-util's :class:`AsyncValue`, with the types it does not ship.

trio-util 0.8 carries no ``py.typed`` marker, so to mypy its ``AsyncValue`` is ``Any``. The
runtime uses the real class; type checkers see the part of its surface this library hands out
(the value, ``wait_value``, ``wait_transition``, ``eventual_values``, ``transitions``), so a
user's ``await gate.use.wait_value(lambda n: n == 0)`` is checked like the rest of the API.

Setting ``value`` to what it already is does nothing; setting it to something else wakes the
tasks whose predicate the new value satisfies. With nobody waiting, a change costs one
comparison and three empty loops (``docs/guide/live-view.md`` gives the measured figure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

__all__ = ["AsyncValue"]

T = TypeVar("T")

if TYPE_CHECKING:

    class AsyncValue(Generic[T]):
        """A value that tasks can wait on (trio-util's ``AsyncValue``)."""

        def __init__(self, value: T) -> None: ...

        @property
        def value(self) -> T: ...

        @value.setter
        def value(self, x: T) -> None: ...

        async def wait_value(
            self, value_or_predicate: T | Callable[[T], bool], *, held_for: float = 0.0
        ) -> T: ...

        async def wait_transition(
            self, value_or_predicate: T | Callable[[T, T], bool] = ...
        ) -> tuple[T, T]: ...

        def eventual_values(
            self, value_or_predicate: T | Callable[[T], bool] = ..., held_for: float = 0.0
        ) -> AsyncIterator[T]: ...

        def transitions(
            self, value_or_predicate: T | Callable[[T, T], bool] = ...
        ) -> AsyncIterator[tuple[T, T]]: ...

else:
    from trio_util import AsyncValue
