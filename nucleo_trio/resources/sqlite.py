"""SQLite as a database provider that holds the connection for the job.

The standard library's driver blocks, so every call runs in a worker thread
(``trio.to_thread``) under the permit admission granted, one at a time per handle
(:class:`~nucleo_trio.resources.threads.HandleCalls`); the connection is opened per handle in
autocommit mode and transactions are explicit. ``abort`` interrupts whatever statement is
running (SQLite's ``interrupt`` is safe from any thread) and poisons the handle; the ``close``
that follows rolls back and hands the connection back, even when its caller is cancelled.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import outcome

from .._clock import run_sync_holding_the_clock
from ..errors import ConfigError
from ..errors._boundary_map import exception_map, map_exceptions
from .provider import DBHandle
from .threads import ThreadedHandle, ThreadedProvider, aborted_call, closing_failed

__all__ = ["SQLiteProvider"]

_ABORT_CHECK_STEPS = 10_000

# What the driver raises, as the provider's errors: a statement's only once the handle is
# aborted (else it goes on as sqlite3 raised it), a close's always.
_STATEMENT_ERRORS = exception_map({sqlite3.Error: aborted_call})
_CLOSING_ERRORS = exception_map({sqlite3.Error: closing_failed})


class _SQLiteHandle(ThreadedHandle):
    connection: sqlite3.Connection


class SQLiteProvider(ThreadedProvider[_SQLiteHandle]):
    """Connections to the SQLite database at ``path``, at most ``max_connections`` at once.

    The directory the file lives in must exist when the provider is built (``":memory:"``
    needs none), else :class:`~nucleo_trio.errors.ConfigError`: SQLite would only fail at a
    job's first connection, long after start. ``begin`` and ``commit`` run ``BEGIN`` and
    ``COMMIT`` through :meth:`execute`; a commit is durable when it returns, so
    ``await_completion`` only waits for the handle's calls in flight.
    """

    _handle_type = _SQLiteHandle
    _label = "SQLite"

    def __init__(self, name: str, path: str | Path, max_connections: int) -> None:
        super().__init__(name, max_connections)
        self.path = Path(path)
        """The database file (``:memory:`` gives every connection a database of its own)."""
        if str(path) != ":memory:" and not self.path.parent.is_dir():
            raise ConfigError(
                f"SQLite database {name!r}: the directory {self.path.parent} of {self.path} "
                "does not exist"
            )
        self.open_connections = 0
        """Connections open now: one more at each ``acquire``, one less when a close has
        closed it."""

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        if read_only:
            connection = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        else:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        return connection

    async def acquire(self, read_only: bool = False) -> DBHandle:
        """Open a connection to :attr:`path` in a worker thread, in autocommit mode
        (transactions are explicit), read-only (``mode=ro``) when asked. The handle's calls
        then run one at a time in worker threads, and an abort stops even a statement that
        starts after it."""
        connection = await run_sync_holding_the_clock(self._connect, read_only)
        self.open_connections += 1
        handle = _SQLiteHandle(self, connection, read_only=read_only)
        # interrupt() reaches only a statement already running; this stops one that starts
        # after the abort, checked every few thousand VM steps.
        connection.set_progress_handler(lambda: handle.aborted, _ABORT_CHECK_STEPS)
        return handle

    async def execute(
        self, handle: DBHandle, sql: str, parameters: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one statement on the handle's connection and return its rows."""
        own = self._live(handle)
        connection: sqlite3.Connection = own.connection

        def run() -> list[tuple[Any, ...]]:
            return connection.execute(sql, parameters).fetchall()

        with map_exceptions(_STATEMENT_ERRORS, name=self._name, handle=own):
            return await own.calls.run(run)

    async def rollback(self, handle: DBHandle) -> None:
        """Roll back an open transaction; with none open, or again, it does nothing."""
        own = self._live(handle)
        if own.connection.in_transaction:
            await self.execute(handle, "ROLLBACK")

    async def close(self, handle: DBHandle) -> None:
        """Roll back what is open and hand the connection back; repeatable, and still hands it
        back after an abort (whatever the driver says then is an UncorrectableError). The
        connection is closed after any statement still in flight, and even if the caller is
        cancelled while it waits; a repeated close waits until the first has finished."""
        own = self._own(handle)
        if own.closed:
            await own.calls.wait_finished()
            return
        own.closed = True
        own.calls.release()
        connection: sqlite3.Connection = own.connection

        def finish() -> None:
            connection.set_progress_handler(None, 0)  # the rollback must run, aborted or not
            try:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
            finally:
                connection.close()

        def settle(result: outcome.Outcome[None]) -> None:
            self.open_connections -= 1

        with map_exceptions(_CLOSING_ERRORS, name=self._name):
            await own.calls.finish(finish, settle)

    def abort(self, handle: DBHandle) -> None:
        """Sever the connection at once (phase two of a timeout): interrupt the running
        statement; every later use fails until ``close`` hands it back. An abort while a close
        waits behind a running statement interrupts that statement too."""
        own = self._own(handle)
        already = own.aborted
        own.aborted = True
        own.calls.release()
        if already or own.calls.finished:
            return
        try:
            own.connection.interrupt()
        except sqlite3.ProgrammingError:
            pass  # the close already shut it: nothing left to interrupt

    def __repr__(self) -> str:
        return f"<SQLiteProvider {self._name!r} {self.path} max={self._gate.capacity}>"
