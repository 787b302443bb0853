"""The boundary mapper: a library's exceptions, translated by one table at the line that calls it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from nucleo_trio.errors import ExternalServiceError, UncorrectableError
from nucleo_trio.errors._boundary_map import exception_map, map_exceptions, mapped


class LibraryError(Exception):
    pass


class TimeoutFailure(LibraryError):
    pass


class ReadTimeout(TimeoutFailure):
    pass


class Unrelated(Exception):
    pass


def _unreachable(exc: LibraryError, **context: Any) -> UncorrectableError:
    return UncorrectableError(f"unreachable: {exc}")


def _timed_out(exc: TimeoutFailure, **context: Any) -> UncorrectableError:
    return UncorrectableError(f"timed out: {exc}")


# The general entry first: the lookup goes by the exception's class, not the table's order.
TABLE = exception_map({LibraryError: _unreachable, TimeoutFailure: _timed_out})


def _raise(exc: BaseException) -> None:
    raise exc


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (LibraryError("refused"), "unreachable: refused"),
        (TimeoutFailure("slow"), "timed out: slow"),
        (ReadTimeout("slower"), "timed out: slower"),
    ],
)
def test_the_most_specific_entry_translates_whatever_the_tables_order(
    raised: LibraryError, message: str
) -> None:
    with pytest.raises(UncorrectableError) as caught:
        with map_exceptions(TABLE):
            _raise(raised)
    assert str(caught.value) == message


def test_the_librarys_exception_is_the_cause() -> None:
    raised = TimeoutFailure("slow")
    with pytest.raises(UncorrectableError) as caught:
        with map_exceptions(TABLE):
            _raise(raised)
    assert caught.value.__cause__ is raised
    assert caught.value.__suppress_context__


def test_a_cause_the_builder_set_is_kept() -> None:
    """A builder that chains its own failure (a signal caused by the runtime's error, caused by
    the library's) keeps that chain: the mapper does not put the library's exception first."""

    def chained(exc: LibraryError) -> Exception:
        error = ExternalServiceError(f"down: {exc}", service="svc", cause=exc)
        return UncorrectableError("give up", cause=error)

    raised = LibraryError("refused")
    with pytest.raises(UncorrectableError) as caught:
        with map_exceptions(exception_map({LibraryError: chained})):
            _raise(raised)
    middle = caught.value.__cause__
    assert isinstance(middle, ExternalServiceError)
    assert middle.__cause__ is raised


def test_the_context_reaches_the_builder() -> None:
    def named(exc: LibraryError, *, name: str, doing: str) -> Exception:
        return UncorrectableError(f"{name}: {doing} failed: {exc}")

    with pytest.raises(UncorrectableError, match=r"^db: closing failed: gone$"):
        with map_exceptions(exception_map({LibraryError: named}), name="db", doing="closing"):
            _raise(LibraryError("gone"))


def test_an_unmapped_exception_passes_through_unchanged() -> None:
    raised = Unrelated("not the library's")
    with pytest.raises(Unrelated) as caught:
        with map_exceptions(TABLE):
            _raise(raised)
    assert caught.value is raised
    assert raised.__cause__ is None and raised.__context__ is None


def test_a_builder_that_declines_lets_the_exception_go_on() -> None:
    def only_when_aborted(exc: LibraryError, *, aborted: bool) -> Exception | None:
        return UncorrectableError("aborted") if aborted else None

    table = exception_map({LibraryError: only_when_aborted})
    raised = LibraryError("plain")
    with pytest.raises(LibraryError) as caught:
        with map_exceptions(table, aborted=False):
            _raise(raised)
    assert caught.value is raised
    with pytest.raises(UncorrectableError, match="aborted"):
        with map_exceptions(table, aborted=True):
            _raise(raised)


def test_a_builder_returning_the_exception_itself_lets_it_go_on() -> None:
    raised = LibraryError("same")
    with pytest.raises(LibraryError) as caught:
        with map_exceptions(exception_map({LibraryError: lambda exc: exc})):
            _raise(raised)
    assert caught.value is raised and raised.__cause__ is None


def test_a_block_that_succeeds_is_untouched() -> None:
    with map_exceptions(TABLE):
        value = 1 + 1
    assert value == 2


async def test_a_cancellation_is_never_translated() -> None:
    everything = exception_map({Exception: _unreachable})
    with trio.CancelScope() as scope:
        with map_exceptions(everything):
            scope.cancel()
            await trio.sleep(1)
    assert scope.cancelled_caught


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()])
def test_what_is_not_an_exception_is_never_translated(raised: BaseException) -> None:
    everything = exception_map({Exception: _unreachable})
    with pytest.raises(type(raised)) as caught:
        with map_exceptions(everything):
            _raise(raised)
    assert caught.value is raised


def test_an_exception_group_passes_through_as_raised() -> None:
    """An ``except LibraryError`` never matched a group holding one; the mapper matches none
    either, so a nursery's group reaches its owner as the nursery raised it."""
    group = ExceptionGroup("children", [LibraryError("one child")])
    with pytest.raises(ExceptionGroup) as caught:
        with map_exceptions(exception_map({Exception: _unreachable})):
            _raise(group)
    assert caught.value is group


async def test_it_translates_around_an_await_and_in_a_worker_thread() -> None:
    def blocking() -> None:
        with map_exceptions(TABLE):
            raise ReadTimeout("in a thread")

    with pytest.raises(UncorrectableError, match="timed out: in a thread"):
        await trio.to_thread.run_sync(blocking)
    with pytest.raises(UncorrectableError, match="unreachable: after a checkpoint"):
        with map_exceptions(TABLE):
            await trio.lowlevel.checkpoint()
            raise LibraryError("after a checkpoint")


def test_mapped_answers_without_raising() -> None:
    assert str(mapped(TABLE, ReadTimeout("r"))) == "timed out: r"
    assert mapped(TABLE, Unrelated()) is None
    assert mapped(TABLE, KeyboardInterrupt()) is None


@pytest.mark.parametrize(
    "key", [trio.Cancelled, KeyboardInterrupt, BaseException, ExceptionGroup, "LibraryError"]
)
def test_a_table_refuses_what_could_never_be_translated(key: Any) -> None:
    with pytest.raises(TypeError, match="exception_map"):
        exception_map({key: _unreachable})


def test_a_table_refuses_a_builder_that_is_not_callable() -> None:
    with pytest.raises(TypeError, match="LibraryError is not callable"):
        exception_map({LibraryError: "not a builder"})  # type: ignore[dict-item]


def test_a_table_is_frozen() -> None:
    with pytest.raises(TypeError):
        TABLE[Unrelated] = _unreachable  # type: ignore[index]
