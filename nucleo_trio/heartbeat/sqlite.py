"""A durable schedule: heartbeats in a SQLite file, so adaptive schedules survive a restart.

The in-memory store forgets the schedule at exit, and boot code re-publishes fixed-cadence
schedules at every start. A schedule a flow adapts while it runs (an orchestrator that moves its
own next check-in) is lost that way; :class:`SQLiteHeartbeatStore` keeps it in a file. A
dispatcher opened on the same file finds every heartbeat where it was left, and the slots that
fell due while it was down fire back to back, each exactly one period after the last.

**One process per file.** The change listener tells this process only, and the store assumes
nobody else writes the table. Readers (``sqlite3`` on the command line) are harmless.

**How a heartbeat is written.** A row holds the intent, the user and the sealed guard, one
column per value of :class:`~nucleo_trio.heartbeat.HeartbeatRow`, and a signature over them,
all through the store's :class:`~nucleo_trio.heartbeat.HeartbeatCodec` (which the dispatcher
hands it at start): the job class by its registered name, the classes of the values (each scope
of the guard, the recurrence, the input's type) by import path, the values as JSON through the
library's converter. A value must come back equal from JSON; anything else is refused when it
is stored, never discovered after a restart. Reading, a row whose signature does not match (it
was edited outside the runtime) is refused at its fire, and a job name this process has not
registered fails its fire; nothing a row says is ever imported before its signature matched.
A file written before rows were signed gets its ``signature`` column added when it is opened;
its rows, unsigned, are refused when they fall due, and are scheduled again by their owner.

**Off the loop, and as durable as before.** The standard library's driver blocks, and a
commit with ``synchronous=FULL`` (WAL mode) waits for the disk: a schedule is written rarely and
must outlive a power cut. So the store has one writer (:mod:`nucleo_trio._sqlite_writer`) that
does every statement in a worker thread, in batches: each operation is queued, the operations
queued while a commit is in flight go in the next transaction together, and each is answered
only once its transaction has committed. The Heart awaits that answer, so it never fires a slot
whose removal is not on disk yet, and the trio thread never waits on the disk. Each operation
runs alone in its batch's worker, one at a time on the one connection, so
:meth:`~SQLiteHeartbeatStore.re_enqueue_if_absent` is still a compare-and-set without a lock. An
operation once called is done to the end and answered even if its caller is cancelled
meanwhile (its cancellation arrives at its next checkpoint), as an inline call was: a stopping
Heart never leaves a slot taken and not put back. Under an autojump clock the clock holds still
while an operation is in the worker, so virtual-time tests stay exact. A driver error, in a
statement or in its batch's commit, is the caller's :class:`~nucleo_trio.errors.NucleoSystemError`
naming the operation and the file; nothing of a batch that did not commit is on disk.
:meth:`~SQLiteHeartbeatStore.aclose` waits for every operation queued before it, then closes the
file in the worker.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .._sqlite_writer import SQLiteWriter, WriterStatistics
from ..errors import NucleoSystemError
from ..errors._boundary_map import exception_map, map_exceptions
from .codec import HeartbeatCodec
from .records import Heartbeat, HeartbeatRow
from .store import ChangeListeners, adopt_codec, require_codec, require_genuine

__all__ = ["SQLiteHeartbeatStore"]

log = logging.getLogger("nucleo_trio.heartbeat")

_COMPONENT = "heartbeat-store"


def _store_failed(exc: sqlite3.Error, *, doing: str) -> NucleoSystemError:
    return NucleoSystemError(_COMPONENT, f"{doing} failed: {exc}", exc)


# A driver error, as the store's system error naming what it was doing.
_DRIVER_ERRORS = exception_map({sqlite3.Error: _store_failed})

_COLUMNS = HeartbeatRow._fields

_SCHEMA = """
CREATE TABLE IF NOT EXISTS heartbeats (
    id TEXT PRIMARY KEY,
    run_at REAL NOT NULL,
    job_class TEXT NOT NULL,
    user_id TEXT NOT NULL,
    scope_guard TEXT NOT NULL,
    conversation_id TEXT,
    input TEXT,
    recurrence TEXT,
    signature TEXT
)
"""
_INDEX = "CREATE INDEX IF NOT EXISTS heartbeats_due ON heartbeats (run_at, id)"

_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM heartbeats"
_HEAD = "SELECT run_at, id FROM heartbeats ORDER BY run_at, id LIMIT 1"
_INSERT = (
    f"INSERT INTO heartbeats ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
)

_UNSIGNED_COLUMNS = _COLUMNS[:-1]
"""The table as it was before rows were signed: opened, it gets the ``signature`` column."""

_Row = tuple[Any, ...]
_Answer = TypeVar("_Answer")


class SQLiteHeartbeatStore:
    """The schedule in the SQLite database at ``path`` (created when missing).

    Satisfies :class:`~nucleo_trio.heartbeat.HeartbeatStore`. Choose it in a dispatcher's
    configuration with ``{"heartbeat": {"kind": "sqlite", "settings": {"path": "beats.db"}}}``.
    See the module documentation for what it can write and how it writes off the trio thread.
    Its rows go through ``codec``; a dispatcher hands the store its own at start, so give one
    only to a store used on its own. A blank path is a :class:`ValueError`; a file that cannot
    be opened, or holds a ``heartbeats`` table of another shape, is a
    :class:`~nucleo_trio.errors.NucleoSystemError`.

    Writing or reading a row (every operation but :meth:`peek_next_run_at`, :meth:`on_change`
    and :meth:`aclose`) needs a codec: before one is given it raises
    :class:`~nucleo_trio.errors.UsageRuntimeError`. A driver error is a
    :class:`~nucleo_trio.errors.NucleoSystemError` naming the operation and the file.
    """

    def __init__(self, path: str | Path, *, codec: HeartbeatCodec | None = None) -> None:
        if not isinstance(path, str | Path) or not str(path).strip():
            raise ValueError(f"SQLiteHeartbeatStore needs a database path, got {path!r}")
        self.path = str(path)
        """The database file, as given (``":memory:"`` for a database in memory)."""
        self._codec = None if codec is None else adopt_codec(self._name, None, codec)
        self._listeners = ChangeListeners()
        # Opened and checked here, once, so the dispatcher's start refuses a bad file; from now
        # on only the writer's worker threads use the connection.
        with map_exceptions(_DRIVER_ERRORS, doing=f"opening the heartbeat store {self.path}"):
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                if self.path != ":memory:":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                db.execute(_SCHEMA)
                columns = [row[1] for row in db.execute("PRAGMA table_info(heartbeats)")]
                if tuple(columns) == _UNSIGNED_COLUMNS:
                    db.execute("ALTER TABLE heartbeats ADD COLUMN signature TEXT")
                    columns.append("signature")
                if tuple(columns) != _COLUMNS:
                    raise NucleoSystemError(
                        _COMPONENT,
                        f"{self.path} has a table 'heartbeats' with columns {columns}, not the "
                        f"store's {list(_COLUMNS)}; point the store at a file of its own",
                    )
                db.execute(_INDEX)
            except BaseException:
                db.close()
                raise
        self._writer = SQLiteWriter(
            db,
            path=self.path,
            name=f"the heartbeat store {self.path}",
            component=_COMPONENT,
            log=log,
        )

    # -- the codec ------------------------------------------------------------------------------
    @property
    def codec(self) -> HeartbeatCodec | None:
        """The codec rows are written and read through; ``None`` until one is given."""
        return self._codec

    def use_codec(self, codec: HeartbeatCodec) -> None:
        """Write and read rows through ``codec`` from now on. Giving the same codec again is
        harmless; another one is a :class:`~nucleo_trio.errors.UsageValueError`, anything but a
        codec a :class:`TypeError`."""
        self._codec = adopt_codec(self._name, self._codec, codec)

    # -- the contract ---------------------------------------------------------------------------
    async def enqueue(self, heartbeat: Heartbeat) -> Heartbeat | None:
        """Write ``heartbeat``'s signed row, replacing any under its id, and answer the one it
        displaced (``None`` when there was none); returns once the write is committed. A
        heartbeat the runtime did not mint is a :class:`TypeError`, a value that would not read
        back a :class:`~nucleo_trio.errors.NucleoSystemError`."""
        row = self._row(heartbeat)

        def store(db: sqlite3.Connection) -> tuple[_Row | None, _Row | None, _Row | None]:
            head = db.execute(_HEAD).fetchone()
            old = db.execute(f"{_SELECT} WHERE id = ?", (heartbeat.id,)).fetchone()
            db.execute("DELETE FROM heartbeats WHERE id = ?", (heartbeat.id,))
            db.execute(_INSERT, row)
            return head, old, db.execute(_HEAD).fetchone()

        head, old, after = await self._run(store, f"storing heartbeat {heartbeat.id!r}")
        self._told(head, after)
        return None if old is None else self._restored(old, "displaced")

    async def cancel(self, heartbeat_id: str) -> Heartbeat | None:
        """Delete the heartbeat ``heartbeat_id`` and answer it; ``None`` when there is none."""
        self._require_codec()

        def remove(db: sqlite3.Connection) -> tuple[_Row | None, _Row | None, _Row | None]:
            head = db.execute(_HEAD).fetchone()
            old = db.execute(f"{_SELECT} WHERE id = ?", (heartbeat_id,)).fetchone()
            db.execute("DELETE FROM heartbeats WHERE id = ?", (heartbeat_id,))
            return head, old, db.execute(_HEAD).fetchone()

        head, old, after = await self._run(remove, f"cancelling heartbeat {heartbeat_id!r}")
        self._told(head, after)
        return None if old is None else self._restored(old, "cancelled")

    async def poll_due(self, now: float) -> Heartbeat | None:
        """Delete and answer the earliest heartbeat whose run instant (epoch seconds) is at or
        before ``now``; ``None`` when none is due. A refused row comes back as its stand-in,
        which fails its fire; a row with no id is logged and skipped."""
        self._require_codec()  # before a row is taken out that could not be read

        def take(db: sqlite3.Connection) -> _Row | None:
            row: _Row | None = db.execute(
                f"{_SELECT} WHERE run_at <= ? ORDER BY run_at, id LIMIT 1", (now,)
            ).fetchone()
            if row is not None:
                db.execute("DELETE FROM heartbeats WHERE id = ?", (row[0],))
            return row

        while True:
            row = await self._run(take, "polling")
            if row is None:
                return None
            self._listeners.notify()  # the head was due, so it just left
            heartbeat = self._restored(row, "due")
            if heartbeat is not None:
                return heartbeat

    async def peek_next_run_at(self) -> float | None:
        """The earliest run instant in the file, in epoch seconds, or ``None`` when it holds no
        heartbeat."""

        def earliest(db: sqlite3.Connection) -> Any:
            return db.execute("SELECT min(run_at) FROM heartbeats").fetchone()[0]

        run_at = await self._run(earliest, "reading the next run instant")
        return None if run_at is None else float(run_at)

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        """Write ``heartbeat``'s row only if no row holds its id; answer whether it was
        written."""
        row = self._row(heartbeat)

        def put_back(db: sqlite3.Connection) -> tuple[_Row | None, int, _Row | None]:
            head = db.execute(_HEAD).fetchone()
            stored = db.execute(_INSERT.replace("INSERT", "INSERT OR IGNORE", 1), row).rowcount
            return head, stored, db.execute(_HEAD).fetchone()

        head, stored, after = await self._run(put_back, f"re-enqueuing heartbeat {heartbeat.id!r}")
        self._told(head, after)
        return stored == 1

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every change this process makes to the schedule's head;
        answers a function that unregisters it. Writes by another process are not heard."""
        return self._listeners.add(listener)

    async def inspect(self) -> tuple[Heartbeat, ...]:
        """Every heartbeat in the file, in the order they fall due; refused rows appear as their
        stand-ins."""
        self._require_codec()

        def everything(db: sqlite3.Connection) -> list[_Row]:
            return db.execute(f"{_SELECT} ORDER BY run_at, id").fetchall()

        rows = await self._run(everything, "reading the schedule")
        restored = (self._restored(row, "listed") for row in rows)
        return tuple(heartbeat for heartbeat in restored if heartbeat is not None)

    async def aclose(self) -> None:
        """Wait for every operation queued before it to commit, then close the file."""
        await self._writer.aclose()

    def statistics(self) -> WriterStatistics:
        """What the store's writer holds and has written: queued, in flight, batches."""
        return self._writer.statistics()

    def __repr__(self) -> str:
        state = "closed" if self._writer.closed else "open"
        return f"<SQLiteHeartbeatStore {self.path} {state}>"

    # -- plumbing -------------------------------------------------------------------------------
    async def _run(self, work: Callable[[sqlite3.Connection], _Answer], doing: str) -> _Answer:
        """``work`` done by the writer in the next batch, answered once that batch committed."""
        ticket = self._writer.submit(work, f"{doing} in {self.path}", owned=True)
        self._writer.start()
        return await self._writer.result(ticket)

    def _told(self, head: _Row | None, after: _Row | None) -> None:
        if head != after:
            self._listeners.notify()

    @property
    def _name(self) -> str:
        return f"SQLiteHeartbeatStore({self.path!r})"

    def _require_codec(self) -> HeartbeatCodec:
        return require_codec(self._name, self._codec)

    def _row(self, heartbeat: Heartbeat) -> HeartbeatRow:
        return self._require_codec().to_row(require_genuine(heartbeat))

    def _restored(self, row: _Row, what: str) -> Heartbeat | None:
        """The heartbeat ``row`` gives (a refused row's stand-in included, which fails its
        fire); ``None`` only for a row with no id, logged."""
        codec = self._require_codec()
        try:
            return codec.from_row(row)
        except NucleoSystemError:
            log.exception(
                "heartbeat %r (%s) could not be restored from %s", row[0], what, self.path
            )
            return None
