"""PostgreSQL as a database provider that holds the connection for the job, through psycopg 3.

psycopg's ``Connection`` blocks, so every call runs in a worker thread under the permit
admission granted on the provider's :class:`~nucleo_trio.admission.DatabaseGate`. The provider
keeps its own small set of connections, at most ``max_connections``: a handle checks one out,
``close`` rolls back whatever is open and hands it back to the idle set, and the next acquire
reuses it. Connections run in autocommit mode and transactions are explicit (``BEGIN``,
``COMMIT``, ``ROLLBACK``), as with :class:`~nucleo_trio.resources.SQLiteProvider`.

``abort`` must cut a connection off from the trio thread without waiting, while another thread
may be inside the driver on that very connection. It shuts down the connection's socket (the
driver's call in the other thread then fails at once, and the server, reading end-of-file,
rolls back and ends the session) and, when a statement is running, sends the server a cancel
request from a spare thread so that a long statement stops holding its locks. A cancel request
can overtake the statement it was meant for, so each session also asks the server (PostgreSQL
14 and later) to check every half second while a statement runs that its client is still there:
a severed session then ends within that time whatever the race.

The shutdown goes through the provider's own duplicate of the socket's descriptor: the driver
may close its descriptor at any moment once the connection breaks, and a number the kernel hands
out again must never be shut down by mistake. An aborted or broken connection is discarded,
never reused.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

import outcome
import psycopg
import trio
from psycopg import pq

from nucleo_trio._clock import run_sync_holding_the_clock
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.errors._boundary_map import exception_map, map_exceptions
from nucleo_trio.resources import DBHandle
from nucleo_trio.resources.threads import (
    ThreadedHandle,
    ThreadedProvider,
    aborted_call,
    closing_failed,
    finish_in_thread,
)

__all__ = ["PostgresProvider"]

log = logging.getLogger("nucleo_trio_postgres")

# Only where the deployment has not set its own interval (0 is the server's default: never).
_CHECK_CLIENT = (
    "SELECT set_config('client_connection_check_interval', '500ms', false)"
    " WHERE current_setting('client_connection_check_interval') = '0'"
)
_CHECK_CLIENT_SINCE = 140000  # the server version that has client_connection_check_interval

# What a holder may leave on a session, undone before the next one gets it: run-time settings
# (back to the connection's start-up values), temporary tables, LISTENs and advisory locks.
# Prepared statements stay: the driver prepares and tracks its own.
_RESET_SESSION = "RESET ALL; DISCARD TEMP; UNLISTEN *; SELECT pg_advisory_unlock_all()"

_CHARACTERISTICS = {
    True: "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    False: "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
}


def _connect_failed(exc: psycopg.Error, *, name: str) -> UncorrectableError:
    return UncorrectableError(f"{name}: could not open a connection: {exc}", cause=exc)


# What the driver raises, as the provider's errors: a failed connect always; a statement's only
# once the handle is aborted (else it goes on as psycopg raised it); a close's always, the
# socket's own errors included (a discard closes the provider's duplicate of it).
_CONNECT_ERRORS = exception_map({psycopg.Error: _connect_failed})
_STATEMENT_ERRORS = exception_map({psycopg.Error: aborted_call})
_CLOSING_ERRORS = exception_map({psycopg.Error: closing_failed, OSError: closing_failed})


def _check_client(connection: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Have the server notice a vanished client within 500 ms (where it can, and where the
    deployment set no interval of its own): a severed session then ends at once instead of
    when its statement would have."""
    if connection.info.server_version >= _CHECK_CLIENT_SINCE:
        connection.execute(_CHECK_CLIENT)


class _Pooled:
    """One server connection the provider owns, with what ``abort`` needs to sever it."""

    def __init__(self, connection: psycopg.Connection[tuple[Any, ...]]) -> None:
        self.connection = connection
        # Both taken now, in the connecting thread: later the driver may be busy in another.
        self.cancel = connection.pgconn.get_cancel()
        self.socket = socket.socket(fileno=os.dup(connection.fileno()))

    def prepare(self, read_only: bool) -> None:
        """Set the session's transactions read-only or read-write for the next holder (every
        acquire says which, so no holder inherits the last one's hint). Discards the
        connection if it turns out to be dead."""
        try:
            self.connection.execute(_CHARACTERISTICS[read_only])
        except psycopg.Error:
            self.discard()
            raise

    def reset(self) -> bool:
        """Roll back whatever the holder left open; ``True`` if the connection can be reused,
        else it is discarded."""
        if self.connection.broken or self.connection.closed:
            self.discard()
            return False
        try:
            self.connection.rollback()
        except psycopg.Error:
            self.discard()
            raise
        if self.connection.info.transaction_status != pq.TransactionStatus.IDLE:
            self.discard()
            return False
        try:
            self.connection.execute(_RESET_SESSION)
            _check_client(self.connection)
        except psycopg.Error:
            self.discard()
            raise
        return True

    def sever(self) -> None:
        """Cut the connection from any thread at once, never blocking."""
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already shut, or already closed by discard(): either way it is cut

    def send_cancel(self) -> None:
        """Ask the server to stop the running statement (opens a short connection: blocks)."""
        try:
            self.cancel.cancel()
        except psycopg.Error as exc:
            log.debug("cancel request failed: %s", exc)

    def discard(self) -> None:
        try:
            self.connection.close()
        finally:
            self.socket.close()


class _PostgresHandle(ThreadedHandle):
    def __init__(self, provider: PostgresProvider, pooled: _Pooled, read_only: bool) -> None:
        super().__init__(provider, pooled.connection, read_only=read_only)
        self.pooled = pooled


class PostgresProvider(ThreadedProvider[_PostgresHandle]):
    """Connections to the PostgreSQL database at ``conninfo``, at most ``max_connections``.

    ``conninfo`` is a libpq connection string or URI (``"host=/run/postgresql dbname=app"``,
    ``"postgresql://app@db.internal/app"``). ``active_connections`` counts handles checked out
    and ``idle_connections`` the connections waiting for the next one; :meth:`aclose` closes
    the idle ones once the provider is no longer needed.
    """

    _handle_type = _PostgresHandle
    _label = "PostgreSQL"

    def __init__(self, name: str, conninfo: str, max_connections: int) -> None:
        super().__init__(name, max_connections)
        self._max = max_connections
        self.conninfo = conninfo
        """The libpq connection string or URI every new connection opens, as given."""
        self._idle: list[_Pooled] = []
        self._open = 0  # idle, checked out, connecting and closing: never above the bound
        self.active_connections = 0
        """How many handles are checked out now: one more on each ``acquire``, one fewer when
        its ``close`` has finished."""

    @property
    def idle_connections(self) -> int:
        """How many open connections wait, unused, for the next ``acquire``; :meth:`aclose`
        closes them."""
        return len(self._idle)

    # -- checking connections out and back --------------------------------------------------------
    def _connect(self, read_only: bool) -> _Pooled:
        connection = psycopg.Connection.connect(self.conninfo, autocommit=True)
        try:
            _check_client(connection)
            pooled = _Pooled(connection)
        except BaseException:
            connection.close()
            raise
        pooled.prepare(read_only)
        return pooled

    async def _checkout(self, read_only: bool) -> _Pooled:
        while self._idle:
            pooled = self._idle.pop()
            try:
                await run_sync_holding_the_clock(pooled.prepare, read_only)
            except psycopg.Error:
                self._open -= 1  # dead while idle (a restart, an idle timeout): open another
                continue
            except BaseException:
                self._idle.append(pooled)  # cancelled before the thread ran
                raise
            return pooled
        if self._open >= self._max:
            raise UncorrectableError(
                f"{self._name}: all {self._max} connections are checked out; acquire is called "
                f"under a permit on {self._gate.limiter_name}, which admission grants at most "
                f"{self._max} at a time (declare the provider in the job's requirements)"
            )
        self._open += 1
        try:
            with map_exceptions(_CONNECT_ERRORS, name=self._name):
                return await run_sync_holding_the_clock(self._connect, read_only)
        except BaseException:
            self._open -= 1
            raise

    async def acquire(self, read_only: bool = False) -> DBHandle:
        """Check a connection out for one job, its transactions read-only if ``read_only``.

        Never waits for a permit: the caller holds one on ``db:<name>`` already. Reuses an idle
        connection when there is one, else opens a new one. Raises
        :class:`~nucleo_trio.errors.UncorrectableError` when all ``max_connections`` are
        checked out or a new connection cannot be opened.
        """
        # DB-01: acquire runs under the permit admission granted; it never waits for one.
        pooled = await self._checkout(read_only)
        self.active_connections += 1
        return _PostgresHandle(self, pooled, read_only)

    # -- the verbs ------------------------------------------------------------------------------
    async def execute(
        self, handle: DBHandle, sql: str, parameters: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one statement (``%s`` placeholders) on the handle's connection and return its
        rows (none for a statement that returns none)."""
        own = self._live(handle)
        connection = own.pooled.connection

        def run() -> list[tuple[Any, ...]]:
            with connection.cursor() as cursor:
                cursor.execute(sql, parameters)
                return cursor.fetchall() if cursor.description is not None else []

        with map_exceptions(_STATEMENT_ERRORS, name=self._name, handle=own):
            return await own.calls.run(run)

    async def rollback(self, handle: DBHandle) -> None:
        """Roll back an open transaction; with none open, or again, it does nothing."""
        own = self._live(handle)
        if own.pooled.connection.info.transaction_status != pq.TransactionStatus.IDLE:
            await self.execute(handle, "ROLLBACK")

    async def close(self, handle: DBHandle) -> None:
        """Roll back what is open and hand the connection back to the idle set; repeatable.

        After an abort, or when the connection broke, the connection is discarded instead.
        Whatever the driver says on the way is an UncorrectableError, and the connection is
        back (or gone) all the same, even if the caller is cancelled while it waits. A close
        waits for any statement still in flight on the handle; a repeated close waits until
        the first has finished.
        """
        own = self._own(handle)
        if own.closed:
            await own.calls.wait_finished()
            return
        own.closed = True
        own.calls.release()
        pooled = own.pooled

        def finish() -> bool:
            if own.aborted:  # read now: an abort may come while this waits behind a statement
                pooled.discard()
                return False
            return pooled.reset()

        def settle(result: outcome.Outcome[bool]) -> None:
            self.active_connections -= 1
            # A failed finish already discarded the connection; its error goes to the closer.
            if isinstance(result, outcome.Value) and result.value:
                self._idle.append(pooled)
            else:
                self._open -= 1

        with map_exceptions(_CLOSING_ERRORS, name=self._name):
            await own.calls.finish(finish, settle)

    def abort(self, handle: DBHandle) -> None:
        """Sever the connection at once (phase two of a timeout), from the trio thread without
        blocking: shut its socket down, and ask the server to cancel a running statement. Every
        later use fails; the ``close`` that follows discards the connection."""
        own = self._own(handle)
        already = own.aborted
        own.aborted = True
        own.calls.release()
        if already or own.calls.finished:
            return
        if own.calls.in_flight:
            trio.lowlevel.start_thread_soon(own.pooled.send_cancel, _ignore)
        own.pooled.sever()

    async def aclose(self) -> None:
        """Close every idle connection. Handles still out are unaffected, and the provider
        opens connections again on demand."""
        idle, self._idle = self._idle, []

        def close_all() -> None:
            for pooled in idle:
                try:
                    pooled.discard()
                except (psycopg.Error, OSError) as exc:
                    log.debug("closing an idle connection failed: %s", exc)

        def settle(result: outcome.Outcome[None]) -> None:
            self._open -= len(idle)

        await finish_in_thread(close_all, settle)

    def __repr__(self) -> str:
        return (
            f"<PostgresProvider {self._name!r} max={self._max} "
            f"active={self.active_connections} idle={len(self._idle)}>"
        )


def _ignore(result: outcome.Outcome[Any]) -> None:
    """A thread whose result nobody needs (its failures are logged where they happen)."""
