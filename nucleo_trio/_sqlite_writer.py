"""One writer per SQLite file: its statements run in worker threads, in batches, off the loop.

A commit waits on the disk (an fsync, with ``synchronous=FULL``), and nothing in a trio program
may wait on the disk in the trio thread: every other task would stall as long as the disk
takes. :class:`SQLiteWriter` owns one connection and does everything on it in worker threads,
one batch at a time, each batch one transaction:

* :meth:`~SQLiteWriter.submit` queues a piece of work (a function of the connection) and
  answers at once. The trio side never touches the connection, so it never waits on a commit.
* :meth:`~SQLiteWriter.start` sends what is queued to a worker thread, unless a batch is there
  already: then whatever was queued meanwhile goes in the next batch, sent the moment the one in
  flight ends. A slow disk makes the batches bigger, not the loop slower (a group commit).
* Each piece of work runs in a savepoint of its batch's transaction, so one that fails is undone
  alone. A batch commits if it changed anything; a batch of reads ends without a commit.
* :meth:`~SQLiteWriter.result` waits for one piece's answer, which comes once its batch has
  committed: a write answered is a write on disk. The wait is shielded: work once submitted is
  done to the end and answered, as an inline call was, and the caller's cancellation arrives at
  its next checkpoint.
* :meth:`~SQLiteWriter.flush` waits until everything queued before it is on disk;
  :meth:`~SQLiteWriter.aclose` then closes the connection, in the worker, after the last batch.
  A failure nobody awaits (the recorder's rows) is logged at error as it happens and raised by
  the next flush or close, naming the file.

Outside a trio run (a sync ``close()`` after ``trio.run`` returned) there is no loop to stall,
and the writer does the work on the calling thread, after any batch still in a worker.

**Across runs.** A writer may outlive the trio run it was opened in (a recorder attached in one
``trio.run`` and closed in the next, or after it). A batch still in a worker thread when its run
ends is settled by that thread, and a waiter is woken through the token of the run it waits in,
whichever thread settles: every waiter registers its own wake-up, so no ``trio.Event`` is ever
set from outside its run, and a close in the next run finishes the batch in flight first.

**Virtual time.** Trio's autojump clock cannot see a worker thread, so a task waiting on the
writer holds the clock still until the answer comes (:mod:`nucleo_trio._clock`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import attrs
import outcome
import trio

from ._clock import wait_holding_the_clock
from .errors import NucleoSystemError

__all__ = ["SQLiteWriter", "Ticket", "WriterStatistics"]

T = TypeVar("T")


@attrs.frozen
class WriterStatistics:
    """What a writer holds right now, and what it has done since it was opened."""

    queued: int
    """Pieces of work waiting for the next batch."""
    held: int
    """Of those, the ones no batch is due for yet (sent with the next, or at the next start)."""
    in_flight: int
    """Pieces of work in the batch a worker thread is writing (0 when none is)."""
    batches: int
    """Batches finished (committed, read, or failed)."""
    written: int
    """Pieces of work done and committed."""
    failed: int
    """Pieces of work that failed (their own error, or their batch's commit)."""


_Wake = tuple[trio.lowlevel.TrioToken, trio.Event]
"""A waiter: the run it waits in, and the event it waits on there."""


def _wake(waiters: list[_Wake]) -> None:
    """Set each waiter's event in its own run, from whichever thread settles: directly when
    that is the current run's thread, else through the run's token. A run that has ended has
    nobody waiting any more."""
    try:
        here: trio.lowlevel.TrioToken | None = trio.lowlevel.current_trio_token()
    except RuntimeError:
        here = None
    for token, event in waiters:
        if token is here:
            event.set()
            continue
        try:
            token.run_sync_soon(event.set)
        except trio.RunFinishedError:
            pass


class Ticket(Generic[T]):
    """One piece of submitted work: its place in line, and its answer once its batch is done."""

    __slots__ = ("doing", "owned", "result", "run", "seq", "waiters")

    def __init__(
        self, run: Callable[[sqlite3.Connection], T] | None, doing: str, seq: int, owned: bool
    ) -> None:
        self.run = run  # None: close the connection
        self.doing = doing
        self.seq = seq
        self.owned = owned
        self.result: outcome.Outcome[T] | None = None
        self.waiters: list[_Wake] = []


class SQLiteWriter:
    """The one writer of the SQLite connection ``connection`` (see the module documentation).

    The connection must have been opened with ``check_same_thread=False`` and
    ``isolation_level=None``; from now on only the writer uses it. ``name`` says what the writer
    writes for (``"the heartbeat store beats.db"``), in the error raised once it is closed;
    ``component`` names the component in the :class:`~nucleo_trio.errors.NucleoSystemError` a
    failure becomes.
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        *,
        path: str,
        name: str,
        component: str,
        log: logging.Logger,
        in_thread: bool = True,
    ) -> None:
        self.path = path
        self._in_thread = in_thread
        self._name = name
        self._component = component
        self._log = log
        self._db: sqlite3.Connection | None = connection
        # The connection is used by one thread at a time, batches in the order they were sent:
        # batch n waits for batch n - 1 (a sync close can otherwise overtake a worker).
        self._turn = threading.Condition()
        self._sent = 0
        self._done_batches = 0
        # Bookkeeping both sides touch; held for a few assignments, never across I/O.
        self._books = threading.Lock()
        self._queue: list[Ticket[Any]] = []
        self._submitted = 0
        self._due = 0  # every ticket up to this seq is to be written without waiting
        self._settled = 0  # every ticket up to this seq has its answer
        self._in_flight = 0
        self._closing = False
        self._written = 0
        self._failed = 0
        self._unreported: list[BaseException] = []
        self._progress: list[_Wake] = []  # woken each time a batch is settled

    # -- the trio side --------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """:meth:`aclose` or :meth:`close_blocking` was called: nothing more is taken."""
        return self._closing

    def submit(
        self, run: Callable[[sqlite3.Connection], T], doing: str, *, owned: bool
    ) -> Ticket[T]:
        """Queue ``run(connection)`` for a batch; answers at once, never touches the file.

        ``doing`` says what the work does and where, for its error (``"storing heartbeat 'x' in
        beats.db"``). An ``owned`` ticket's caller takes its answer with :meth:`result`; a
        failure of one nobody owns is logged and kept for the next :meth:`flush` or close.
        """
        with self._books:
            if self._closing:
                raise RuntimeError(f"{self._name} is closed")
            self._submitted += 1
            ticket = Ticket(run, doing, self._submitted, owned)
            self._queue.append(ticket)
        return ticket

    def start(self) -> None:
        """Write everything queued as soon as possible: now, or when the batch in flight ends."""
        self._due = self._submitted
        self._launch()

    async def result(self, ticket: Ticket[T]) -> T:
        """The answer of ``ticket``'s work once its batch is done; raises what it failed with.

        Never cancelled half-way: the caller's cancellation is delivered at its next checkpoint.
        """
        with trio.CancelScope(shield=True):
            while True:
                with self._books:
                    if ticket.result is not None:
                        break
                    done = trio.Event()
                    ticket.waiters.append((trio.lowlevel.current_trio_token(), done))
                self._launch()  # its batch may have been left for this run to send
                await wait_holding_the_clock(done)
        answer = ticket.result
        assert answer is not None
        return answer.unwrap()

    async def flush(self) -> None:
        """Write everything queued before the call and wait until it is committed; then raise a
        failure nobody has been told of yet, naming the file."""
        target = self._submitted
        self.start()
        await self._settled_up_to(target)
        self._raise_unreported()

    async def aclose(self) -> None:
        """Write everything queued, close the connection in the worker, and raise a failure nobody
        has been told of yet. The close happens even if the caller is cancelled while it waits.
        A second call waits for the first close. A batch a worker was still writing when an
        earlier trio run ended is finished first."""
        self._queue_close()
        await self._settled_up_to(self._submitted)
        self._raise_unreported()

    async def _settled_up_to(self, target: int) -> None:
        """Wait until every ticket up to ``target`` has its answer, sending what is due each
        time a batch ends (a batch settled after its run ended could not send the next)."""
        while True:
            with self._books:
                if self._settled >= target:
                    return
                progress = trio.Event()
                self._progress.append((trio.lowlevel.current_trio_token(), progress))
            self._launch()
            await wait_holding_the_clock(progress)

    def close_blocking(self) -> None:
        """:meth:`aclose` for a caller outside trio: writes what is queued on this thread, after
        any batch still in a worker, then closes. Inside a trio run it holds the loop for that
        long, so there ``await aclose()`` instead."""
        if self._queue_close():
            batch = self._take()
            self._finish(batch, self._write(self._next_turn(), batch))
        self._raise_unreported()

    def statistics(self) -> WriterStatistics:
        with self._books:
            return WriterStatistics(
                queued=len(self._queue),
                held=sum(1 for ticket in self._queue if ticket.seq > self._due),
                in_flight=self._in_flight,
                batches=self._done_batches,
                written=self._written,
                failed=self._failed,
            )

    # -- sending batches ------------------------------------------------------------------------
    def _queue_close(self) -> bool:
        """Queue the close after everything else; ``False`` if it was queued already."""
        with self._books:
            if self._closing:
                return False
            self._closing = True
            self._submitted += 1
            self._queue.append(Ticket(None, f"closing {self.path}", self._submitted, False))
            self._due = self._submitted
            return True

    def _take(self) -> list[Ticket[Any]]:
        with self._books:
            batch, self._queue = self._queue, []
            self._in_flight = len(batch)
            return batch

    def _next_turn(self) -> int:
        self._sent += 1
        return self._sent

    def _launch(self) -> None:
        with self._books:
            if self._in_flight or not self._queue or self._due <= self._settled:
                return
        try:
            token = trio.lowlevel.current_trio_token()
            if not self._in_thread:
                raise RuntimeError("asked to write on the calling thread")
        except RuntimeError:
            # No trio run on this thread, so no loop to stall (or a caller that prefers the
            # stall to a thread, for a repeatable schedule): write right here.
            batch = self._take()
            self._finish(batch, self._write(self._next_turn(), batch))
            return
        batch = self._take()
        trio.lowlevel.start_thread_soon(
            partial(self._write, self._next_turn(), batch),
            partial(self._deliver, token, batch),
            name=f"sqlite writer of {self.path}",
        )

    def _deliver(
        self,
        token: trio.lowlevel.TrioToken,
        batch: list[Ticket[Any]],
        answers: outcome.Outcome[list[outcome.Outcome[Any]]],
    ) -> None:
        """In the worker thread, when the batch is done: settle it in the trio thread."""
        try:
            token.run_sync_soon(self._settle, batch, answers)
        except trio.RunFinishedError:
            # The run ended meanwhile: settle here, and wake the waiters of a later run (a
            # close there sends what is left, in that run).
            self._settle(batch, answers, relaunch=False)

    def _settle(
        self,
        batch: list[Ticket[Any]],
        answers: outcome.Outcome[list[outcome.Outcome[Any]]],
        relaunch: bool = True,
    ) -> None:
        if isinstance(answers, outcome.Value):
            self._finish(batch, answers.value)
        elif isinstance(answers, outcome.Error):  # _write broke before it could answer
            self._finish(batch, self._broken(batch, answers.error))
        if relaunch:
            self._launch()

    def _finish(self, batch: list[Ticket[Any]], answers: Sequence[outcome.Outcome[Any]]) -> None:
        with self._books:
            for ticket, answer in zip(batch, answers, strict=True):
                ticket.result = answer
                if isinstance(answer, outcome.Error):
                    self._failed += 1
                elif ticket.run is not None:
                    self._written += 1
            self._in_flight = 0
            self._settled = max(self._settled, batch[-1].seq)
            waiters, self._progress = self._progress, []
            for ticket in batch:
                waiters += ticket.waiters
                ticket.waiters = []
        _wake(waiters)

    def _raise_unreported(self) -> None:
        with self._books:
            failures, self._unreported = self._unreported, []
        if failures:
            first = failures[0]
            raise NucleoSystemError(
                self._component,
                f"{len(failures)} write(s) to {self.path} failed and were not recorded; "
                f"the first: {first}",
                first,
            ) from first

    # -- the worker side ------------------------------------------------------------------------
    def _write(self, turn: int, batch: list[Ticket[Any]]) -> list[outcome.Outcome[Any]]:
        """Run one batch on the connection, in the order batches were sent. Never raises."""
        with self._turn:
            self._turn.wait_for(lambda: self._done_batches == turn - 1)
            try:
                answers = self._batch(batch)
            except Exception as exc:  # a fault of the writer's own, not of the file
                answers = self._broken(batch, exc)
            finally:
                self._done_batches = turn
                self._turn.notify_all()
        lost = [
            answer.error
            for ticket, answer in zip(batch, answers, strict=True)
            if not ticket.owned and isinstance(answer, outcome.Error)
        ]
        if lost:
            self._log.error(
                "%d write(s) to %s failed and were not recorded: %s", len(lost), self.path, lost[0]
            )
            with self._books:
                self._unreported.extend(lost)
        return answers

    def _broken(self, batch: list[Ticket[Any]], exc: BaseException) -> list[outcome.Outcome[Any]]:
        """Every ticket of ``batch`` failed with the writer's own fault, each with its error."""
        return [
            outcome.Error(
                NucleoSystemError(self._component, f"{ticket.doing} failed: {exc!r}", exc)
            )
            for ticket in batch
        ]

    def _batch(self, batch: list[Ticket[Any]]) -> list[outcome.Outcome[Any]]:
        db = self._db
        if db is None:
            return [outcome.Error(RuntimeError(f"{self._name} is closed")) for _ in batch]
        works = [ticket for ticket in batch if ticket.run is not None]
        answers = dict(zip(map(id, works), self._transaction(db, works), strict=True))
        if len(works) < len(batch):  # the close was queued: it comes last
            self._db = None
            try:
                db.close()
                answers[id(batch[-1])] = outcome.Value(None)
            except sqlite3.Error as exc:
                answers[id(batch[-1])] = outcome.Error(self._error(batch[-1].doing, exc))
        return [answers[id(ticket)] for ticket in batch]

    def _transaction(
        self, db: sqlite3.Connection, works: list[Ticket[Any]]
    ) -> list[outcome.Outcome[Any]]:
        answers: list[outcome.Outcome[Any]] = []
        if not works:
            return answers
        before = db.total_changes
        try:
            db.execute("BEGIN IMMEDIATE")
            for ticket in works:
                assert ticket.run is not None
                db.execute("SAVEPOINT work")
                try:
                    value = ticket.run(db)
                except Exception as exc:
                    answers.append(outcome.Error(self._error(ticket.doing, exc)))
                    if not db.in_transaction:  # SQLite rolled the whole batch back (disk full)
                        raise sqlite3.OperationalError(
                            f"the transaction was rolled back: {exc}"
                        ) from exc
                    db.execute("ROLLBACK TO work")
                    db.execute("RELEASE work")
                else:
                    db.execute("RELEASE work")
                    answers.append(outcome.Value(value))
            db.execute("COMMIT" if db.total_changes != before else "ROLLBACK")
        except sqlite3.Error as exc:
            # Nothing of the batch is on disk: what looked done is undone with the rest.
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    self._log.exception("rolling back a failed batch on %s failed", self.path)
            failed: list[outcome.Outcome[Any]] = [
                answer
                if isinstance(answer, outcome.Error)
                else outcome.Error(self._error(ticket.doing, exc, commit=True))
                for ticket, answer in zip(works, answers, strict=False)
            ]
            failed += [
                outcome.Error(self._error(ticket.doing, exc, commit=True))
                for ticket in works[len(answers) :]
            ]
            return failed
        return answers

    def _error(self, doing: str, exc: BaseException, *, commit: bool = False) -> BaseException:
        """A driver error as the component's system error, naming what it was doing and where."""
        if not isinstance(exc, sqlite3.Error):
            return exc
        why = "its transaction did not commit: " if commit else ""
        return NucleoSystemError(self._component, f"{doing} failed: {why}{exc}", exc)
