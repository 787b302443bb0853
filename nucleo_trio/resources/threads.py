"""Blocking database drivers in worker threads: one handle's calls, and a close that finishes.

A provider over a blocking driver (``sqlite3``, psycopg) runs every call in a worker thread so
the trio thread never waits on the network or the disk. Two things then need care, and
:class:`HandleCalls` holds both for one handle:

* a handle's calls run one at a time, each holding the handle's lock in its thread, so the
  close that hands the connection back waits for a statement still running instead of pulling
  the connection from under it;
* the count of calls in flight lives on the trio side, so ``await_completion`` can wait for it
  to reach zero, and ``close`` or ``abort`` can release every such waiter at once.

The close itself runs through :meth:`HandleCalls.finish`, whose thread starts even when the
caller is already cancelled and whose bookkeeping runs when the thread ends whether or not
anyone still waits for it: a job killed while it closes, or a close abandoned after a time
limit, still hands its connection back.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import trio

from .._clock import run_sync_holding_the_clock, wait_holding_the_clock
from ..admission import DatabaseGate, RateLimiter
from ..errors import UncorrectableError
from .provider import DBHandle

if TYPE_CHECKING:
    from outcome import Outcome

__all__ = [
    "HandleCalls",
    "ThreadedHandle",
    "ThreadedProvider",
    "aborted_call",
    "closing_failed",
    "finish_in_thread",
]

T = TypeVar("T")
HandleT = TypeVar("HandleT", bound="ThreadedHandle")


async def finish_in_thread(work: Callable[[], T], settle: Callable[[Outcome[T]], None]) -> T:
    """Run ``work`` in a worker thread to the end, then ``settle(outcome)`` in the trio thread.

    Unlike ``trio.to_thread.run_sync``, the thread starts even if the caller is already
    cancelled, and ``settle`` runs when it ends even if the caller stopped waiting (cancelled,
    or gave up after a time limit): it is where a provider puts the connection back or counts
    it gone, so that bookkeeping never depends on the caller's patience. ``settle`` must not
    raise. Returns what ``work`` returned, or raises what it raised.
    """
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    results: list[Outcome[T]] = []

    def settle_here(result: Outcome[T]) -> None:
        try:
            settle(result)
        finally:
            results.append(result)
            done.set()

    def deliver(result: Outcome[T]) -> None:
        try:
            token.run_sync_soon(settle_here, result)
        except trio.RunFinishedError:
            pass  # the run is over, and every connection with it

    trio.lowlevel.start_thread_soon(work, deliver, name=f"finish {work!r}")
    await wait_holding_the_clock(done)
    return results[0].unwrap()


class HandleCalls:
    """The blocking calls on one handle's connection, one at a time in worker threads.

    :meth:`run` runs a call in a thread under the handle's lock; :meth:`wait_quiet` waits
    until no call is in flight, or until :meth:`release` (close or abort) frees the waiters;
    :meth:`finish` runs the close after whatever call is still in flight. ``finished`` turns
    true once the provider has the connection back, after which nothing may touch it, and
    :meth:`wait_finished` waits for that (a repeated close waits for the first).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handed_back = False  # set under the lock by the close: no call may follow it
        self._in_flight = 0
        self._quiet = trio.Event()
        self._quiet.set()
        self.released = False
        self._finished = trio.Event()

    @property
    def finished(self) -> bool:
        """The close has run and the provider has the connection back (or counted it gone)."""
        return self._finished.is_set()

    async def wait_finished(self) -> None:
        """Wait until :meth:`finish` has run to the end and settled."""
        await self._finished.wait()

    @property
    def in_flight(self) -> int:
        """Calls started and not yet returned."""
        return self._in_flight

    @property
    def busy(self) -> bool:
        """A worker thread holds the handle right now (a call or the close is running)."""
        return self._lock.locked()

    def _locked(self, call: Callable[[], T]) -> T:
        with self._lock:
            if self._handed_back:
                # A call whose thread started after the close had already run (the close can
                # overtake it on the way to the lock): the connection is someone else's now.
                raise UncorrectableError(
                    "the connection was closed before this call could run on it"
                )
            return call()

    def _closing(self, close: Callable[[], T]) -> T:
        with self._lock:
            try:
                return close()
            finally:
                self._handed_back = True

    async def run(self, call: Callable[[], T]) -> T:
        """Run ``call`` in a worker thread once the handle's previous calls are done.

        The thread runs to the end even if the caller is cancelled meanwhile (a driver call
        cannot be abandoned halfway); ``abort`` is what cuts a running statement short.
        """
        if self._in_flight == 0 and not self.released:
            self._quiet = trio.Event()
        self._in_flight += 1
        try:
            return await run_sync_holding_the_clock(self._locked, call)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._quiet.set()

    async def wait_quiet(self) -> bool:
        """Wait until no call is in flight: ``True``; or until released first: ``False``."""
        await self._quiet.wait()
        return not self.released

    def release(self) -> None:
        """The handle is closing or aborted: free every waiter of :meth:`wait_quiet` now."""
        self.released = True
        self._quiet.set()

    async def finish(self, close: Callable[[], T], settle: Callable[[Outcome[T]], None]) -> T:
        """Run ``close`` after any call in flight, to the end (see :func:`finish_in_thread`);
        ``settle`` runs in the trio thread when it is done, and ``finished`` is true by then."""

        def settled(result: Outcome[T]) -> None:
            try:
                settle(result)
            finally:
                self._finished.set()

        return await finish_in_thread(partial(self._closing, close), settled)


class ThreadedHandle(DBHandle):
    """A handle whose calls run in worker threads, one at a time (:class:`HandleCalls`)."""

    def __init__(self, provider: object, connection: Any = None, *, read_only: bool) -> None:
        super().__init__(provider, connection, read_only=read_only)
        self.calls = HandleCalls()


def aborted_call(exc: Exception, *, name: str, handle: ThreadedHandle) -> UncorrectableError | None:
    """A driver's error from a call on an aborted handle is the abort's: an
    :class:`~nucleo_trio.errors.UncorrectableError` naming the provider. On a live handle it
    goes on as the driver raised it. The builder of a driver's table for its statements."""
    if not handle.aborted:
        return None
    return UncorrectableError(f"{name}: the connection was aborted", cause=exc)


def closing_failed(exc: Exception, *, name: str) -> UncorrectableError:
    """What the driver said while a close rolled back and handed the connection back, as the
    :class:`~nucleo_trio.errors.UncorrectableError` of the provider ``name``. The builder of a
    driver's table for its close."""
    return UncorrectableError(f"{name}: closing the connection failed: {exc}", cause=exc)


class ThreadedProvider(abc.ABC, Generic[HandleT]):
    """What the providers over blocking drivers share: the name, the ``db:<name>`` gate that is
    their admission account, the check that a handle is this provider's own (a
    :class:`ValueError` naming the provider otherwise) and still usable, and the transaction
    verbs as statements.

    A subclass sets ``_handle_type`` and ``_label`` (``"SQLite"``, ``"PostgreSQL"``) and
    implements ``execute``, ``acquire``, ``await_completion``, ``rollback``, ``close`` and
    ``abort``.
    """

    _handle_type: ClassVar[type[ThreadedHandle]]
    _label: ClassVar[str]

    def __init__(self, name: str, max_connections: int) -> None:
        self._gate = DatabaseGate(name, max_connections)
        self._name = name

    @property
    def name(self) -> str:
        """The name given; the account is ``db:<name>``."""
        return self._name

    def admission(self) -> RateLimiter:
        """Its :class:`~nucleo_trio.admission.DatabaseGate`, ``db:<name>`` with
        ``max_connections`` permits, the same object for the provider's life."""
        return self._gate

    def _own(self, handle: DBHandle) -> HandleT:
        if not isinstance(handle, self._handle_type) or handle.provider is not self:
            raise ValueError(
                f"Handle was not produced by the {self._label} provider {self._name!r}"
            )
        return cast(HandleT, handle)

    def _live(self, handle: DBHandle) -> HandleT:
        own = self._own(handle)
        if own.aborted or own.closed:
            state = "aborted" if own.aborted else "closed"
            raise UncorrectableError(f"{self._name}: the connection was {state}")
        return own

    @abc.abstractmethod
    async def execute(
        self, handle: DBHandle, sql: str, parameters: Any = ()
    ) -> list[tuple[Any, ...]]:
        """Run one statement on the handle's connection, in its worker thread; its rows."""

    async def await_completion(self, handle: DBHandle) -> None:
        """Wait until no call on the handle is in flight (a commit started by another task,
        say). A commit through these drivers is durable when it returns, so that is all there
        is to wait for. A close or abort meanwhile releases the waiter with an
        UncorrectableError."""
        own = self._live(handle)
        if not await own.calls.wait_quiet():
            state = "aborted" if own.aborted else "closed"
            raise UncorrectableError(
                f"{self._name}: the connection was {state} before its work completed"
            )

    async def begin(self, handle: DBHandle) -> None:
        """Run ``BEGIN`` on the handle's connection."""
        await self.execute(handle, "BEGIN")

    async def commit(self, handle: DBHandle) -> None:
        """Run ``COMMIT`` on the handle's connection; durable when it returns."""
        await self.execute(handle, "COMMIT")
