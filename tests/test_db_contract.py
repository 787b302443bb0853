"""The database provider contract (DB-09..12, with DB-01/02), run against every real provider.

One suite, two real databases: :class:`~nucleo_trio.resources.SQLiteProvider` on a file in a
temporary directory, and the ``nucleo-trio-postgres`` plugin's ``PostgresProvider`` on a
PostgreSQL server the session starts (``tests/pg_server.py``; skipped, with the reason, only
where no server binary exists). A :class:`Backend` hides what differs between the two: the
placeholder style, how a test reads what is committed from a connection of its own, how it
counts the connections a provider has out, and a statement slow enough to be caught running.

The leak checks of issue 3 close the file: a job killed mid-transaction, a close that hangs, a
handle that fails to open and a commit that throws leave no connection, session or row behind.

Everything here waits on worker threads, so it runs on the real clock; nothing sleeps to prove
a timing, and the few waits on the server (for a severed session to end) are bounded.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import DatabaseGate
from nucleo_trio.errors import JobTimeoutError, UncorrectableError
from nucleo_trio.resources import (
    CountingDBResourceProvider,
    DBHandle,
    DBResourceProvider,
    SQLiteProvider,
)

SCHEMA = [
    "CREATE TABLE rows (id INTEGER PRIMARY KEY, note TEXT)",
    "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
    "CREATE TABLE child (id INTEGER PRIMARY KEY,"
    " parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
]
APPLICATION = "nucleo-contract"
"""The application_name of the PostgreSQL provider's sessions, so the tests can count them."""


@attrs.define
class Backend:
    """One real database under a provider named ``contract`` with a bound of 2 (DB-09)."""

    kind: str
    provider: Any
    read_only_error: type[BaseException]
    slow_sql: str
    committed: Callable[[], Awaitable[list[str]]]
    """The notes committed to ``rows``, in id order, read through a connection of its own."""
    sessions: Callable[[], Awaitable[int]]
    """Connections the provider holds open on the database (checked out and idle)."""
    make: Callable[[str, int], Any]
    """Another provider of the same kind on the same database: ``make(name, bound)``."""

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.kind == "postgres" else statement

    def active(self, provider: Any = None) -> int:
        """Connections checked out by handles not yet closed."""
        provider = provider or self.provider
        if isinstance(provider, SQLiteProvider):
            return provider.open_connections
        count: int = provider.active_connections
        return count

    async def prepare(self, handle: DBHandle) -> None:
        """What the connection needs before the foreign-key tests (SQLite enforces none
        unless asked, per connection)."""
        if self.kind == "sqlite":
            await self.provider.execute(handle, "PRAGMA foreign_keys = ON")

    async def insert(self, handle: DBHandle, note: str, provider: Any = None) -> None:
        await (provider or self.provider).execute(
            handle, self.sql("INSERT INTO rows (note) VALUES (?)"), [note]
        )

    async def until_running(self, handle: DBHandle) -> None:
        """Return once a statement started on ``handle`` holds the handle's lock in its worker
        thread (at most 5 s). ``wait_all_tasks_blocked`` cannot tell: a task waiting on a
        thread counts as blocked before the OS has run the thread, and a close started then
        may take the lock first and find no statement to wait behind."""
        # Only the worker thread knows when it has the lock, and it tells no one: poll, bounded.
        with trio.fail_after(5):
            while not handle.calls.busy:  # noqa: ASYNC110
                await trio.sleep(0.001)

    async def sessions_settle_at(self, expected: int) -> int:
        """The session count once it reaches ``expected``, or after 5 s whatever it is: a
        severed PostgreSQL session ends on the server a moment after the client cuts it."""
        # The server tells no one when a session ends, so this one wait polls, bounded.
        with trio.move_on_after(5):
            while (count := await self.sessions()) != expected:  # noqa: ASYNC110
                await trio.sleep(0.02)
        return count


def _sqlite_backend(tmp_path: Path) -> Backend:
    path = tmp_path / "contract.db"
    with sqlite3.connect(path) as setup:
        for statement in SCHEMA:
            setup.execute(statement)
    provider = SQLiteProvider("contract", path, 2)

    def read() -> list[str]:
        with sqlite3.connect(path) as reader:
            return [row[0] for row in reader.execute("SELECT note FROM rows ORDER BY id")]

    async def committed() -> list[str]:
        return await trio.to_thread.run_sync(read)

    async def sessions() -> int:
        return provider.open_connections

    return Backend(
        kind="sqlite",
        provider=provider,
        read_only_error=sqlite3.OperationalError,
        slow_sql=(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000000)"
            " SELECT count(*) FROM c"
        ),
        committed=committed,
        sessions=sessions,
        make=lambda name, bound: SQLiteProvider(name, path, bound),
    )


def _postgres_backend(conninfo: str) -> Backend:
    import psycopg
    from nucleo_trio_postgres import PostgresProvider

    with psycopg.connect(conninfo, autocommit=True) as setup:
        setup.execute("DROP TABLE IF EXISTS rows, child, parent")
        for statement in SCHEMA:
            setup.execute(statement.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY", 1))
    mine = f"{conninfo} application_name={APPLICATION}"
    provider = PostgresProvider("contract", mine, 2)

    def query(sql: str, *parameters: object) -> list[tuple[Any, ...]]:
        with psycopg.connect(conninfo, autocommit=True) as reader:
            return reader.execute(sql, parameters).fetchall()

    async def committed() -> list[str]:
        rows = await trio.to_thread.run_sync(query, "SELECT note FROM rows ORDER BY id")
        return [row[0] for row in rows]

    async def sessions() -> int:
        rows = await trio.to_thread.run_sync(
            query, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", APPLICATION
        )
        count: int = rows[0][0]
        return count

    return Backend(
        kind="postgres",
        provider=provider,
        read_only_error=psycopg.errors.ReadOnlySqlTransaction,
        slow_sql="SELECT pg_sleep(30)",
        committed=committed,
        sessions=sessions,
        make=lambda name, bound: PostgresProvider(name, mine, bound),
    )


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield _sqlite_backend(tmp_path)
        return
    conninfo = request.getfixturevalue("postgres_conninfo")
    db = await trio.to_thread.run_sync(_postgres_backend, conninfo)
    yield db
    await db.provider.aclose()


async def _expect_uncorrectable(call: Awaitable[object], outcomes: list[str]) -> None:
    try:
        await call
    except UncorrectableError as exc:
        outcomes.append(f"uncorrectable: {exc}")
    else:
        outcomes.append("returned")


# --- DB-09, DB-01, DB-02 -----------------------------------------------------------------------


async def test_the_account_is_named_after_the_datasource_and_sized_by_the_host(
    backend: Backend,
) -> None:
    """DB-09, DB-01, DB-02: the account is db:contract of capacity 2, one object for the
    provider's life; the provider meets the protocol; acquire takes no permit and a handle
    holds none."""
    provider = backend.provider
    assert isinstance(provider, DBResourceProvider)
    gate = provider.admission()
    assert isinstance(gate, DatabaseGate) and gate is provider.admission()
    assert (gate.limiter_name, gate.capacity, provider.name) == ("db:contract", 2, "contract")
    handle = await provider.acquire()
    assert gate.in_use == 0
    await provider.close(handle)
    assert gate.in_use == 0


# --- DB-10 -------------------------------------------------------------------------------------


async def test_a_handle_holds_one_connection_from_acquire_to_close(backend: Backend) -> None:
    """DB-10: acquire checks out exactly one connection, a commit does not return it, close
    does."""
    provider = backend.provider
    handle = await provider.acquire()
    assert backend.active() == 1 and await backend.sessions() == 1
    await provider.begin(handle)
    await backend.insert(handle, "kept")
    await provider.commit(handle)
    await provider.await_completion(handle)
    assert backend.active() == 1
    await provider.close(handle)
    assert backend.active() == 0


async def test_a_commit_is_visible_to_other_connections_once_awaited(backend: Backend) -> None:
    """DB-10: rows written in an open transaction are invisible to other connections; once
    committed and awaited they are visible."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "first")
    await backend.insert(handle, "second")
    assert await backend.committed() == []
    await provider.commit(handle)
    await provider.await_completion(handle)
    assert await backend.committed() == ["first", "second"]
    await provider.close(handle)


async def test_several_transactions_run_on_the_one_connection(backend: Backend) -> None:
    """DB-10: three transactions in a row reuse the handle's one connection."""
    provider = backend.provider
    handle = await provider.acquire()
    connection = handle.unwrap()
    for note in ("one", "two", "three"):
        await provider.begin(handle)
        await backend.insert(handle, note)
        await provider.commit(handle)
        await provider.await_completion(handle)
        assert handle.unwrap() is connection and backend.active() == 1
    assert await backend.committed() == ["one", "two", "three"]
    assert await backend.sessions() == 1
    await provider.close(handle)


# --- DB-11 -------------------------------------------------------------------------------------


async def test_rollback_discards_the_transaction_and_is_idempotent(backend: Backend) -> None:
    """DB-11: rollback with no transaction does nothing, repeats, and discards what was
    written; the connection goes on working."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.rollback(handle)
    await provider.begin(handle)
    await backend.insert(handle, "gone")
    await provider.rollback(handle)
    await provider.rollback(handle)
    assert await backend.committed() == []
    await provider.begin(handle)
    await backend.insert(handle, "kept")
    await provider.commit(handle)
    assert await backend.committed() == ["kept"]
    await provider.close(handle)


async def test_close_rolls_back_an_open_transaction_and_is_idempotent(backend: Backend) -> None:
    """DB-11: close rolls back what is open and hands the connection back; a second close
    does nothing; the verbs refuse a closed handle."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "gone")
    await provider.close(handle)
    await provider.close(handle)
    assert backend.active() == 0 and await backend.committed() == []
    with pytest.raises(UncorrectableError, match="closed"):
        await backend.insert(handle, "late")
    again = await provider.acquire()
    await backend.insert(again, "autocommitted")
    assert await backend.committed() == ["autocommitted"]
    await provider.close(again)


async def test_abort_severs_the_connection_and_a_close_still_hands_it_back(
    backend: Backend,
) -> None:
    """DB-11: abort repeats; every statement after it fails with an UncorrectableError; the
    close after it hands the connection back; nothing written before it is committed."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "never")
    provider.abort(handle)
    provider.abort(handle)
    with pytest.raises(UncorrectableError, match="aborted"):
        await backend.insert(handle, "after")
    with pytest.raises(UncorrectableError, match="aborted"):
        await provider.commit(handle)
    await provider.close(handle)
    provider.abort(handle)
    assert backend.active() == 0
    assert await backend.committed() == []
    assert await backend.sessions_settle_at(0) == 0


async def test_a_close_straight_after_an_abort_hands_the_connection_back(
    backend: Backend,
) -> None:
    """DB-11: a close right after an abort returns the connection, and whatever it reports is
    an UncorrectableError; a fresh handle works."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "never")
    provider.abort(handle)
    outcomes: list[str] = []
    await _expect_uncorrectable(provider.close(handle), outcomes)
    assert len(outcomes) == 1 and backend.active() == 0
    fresh = await provider.acquire()
    await backend.insert(fresh, "fresh")
    await provider.close(fresh)
    assert await backend.committed() == ["fresh"]


async def test_abort_cuts_a_running_statement_short(backend: Backend) -> None:
    """DB-11: an abort from the trio thread stops a statement running in a worker thread at
    once; what the transaction wrote before it is never committed."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "never")
    outcomes: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                _expect_uncorrectable, provider.execute(handle, backend.slow_sql), outcomes
            )
            await backend.until_running(handle)
            provider.abort(handle)
    assert len(outcomes) == 1 and outcomes[0].startswith("uncorrectable")
    await provider.close(handle)
    assert backend.active() == 0 and await backend.committed() == []
    assert await backend.sessions_settle_at(0) == 0


# --- DB-12 -------------------------------------------------------------------------------------


async def test_the_read_only_hint_reaches_the_connection_and_is_not_inherited(
    backend: Backend,
) -> None:
    """DB-12: acquire(True) gives a connection that cannot write; the next acquire(False),
    beside it or after it on the same connection, writes."""
    provider = backend.provider
    reader = await provider.acquire(True)
    assert reader.read_only
    with pytest.raises(backend.read_only_error):
        await backend.insert(reader, "refused")
    writer = await provider.acquire(False)
    await backend.insert(writer, "beside")
    await provider.close(writer)
    await provider.close(reader)
    for _ in range(2):  # the pool may hand either connection back: try both
        reader = await provider.acquire(True)
        second = await provider.acquire(True)
        await provider.close(reader)
        await provider.close(second)
        writer = await provider.acquire()
        await backend.insert(writer, "after")
        await provider.close(writer)
    assert await backend.committed() == ["beside", "after", "after"]


async def test_a_waiter_for_completion_is_released_by_close(backend: Backend) -> None:
    """DB-12: a task waiting in await_completion while a statement runs on the handle is
    released by close at once (with an UncorrectableError), and the connection still comes
    back once the statement is cut short."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "never")
    running: list[str] = []
    waiting: list[str] = []
    closing: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                _expect_uncorrectable, provider.execute(handle, backend.slow_sql), running
            )
            await backend.until_running(handle)
            nursery.start_soon(_expect_uncorrectable, provider.await_completion(handle), waiting)
            await trio.testing.wait_all_tasks_blocked()
            assert waiting == []  # blocked: the statement is still running
            nursery.start_soon(_expect_uncorrectable, provider.close(handle), closing)
            await trio.testing.wait_all_tasks_blocked()
            assert len(waiting) == 1 and "before its work completed" in waiting[0]
            assert running == [] and closing == []  # the close waits behind the statement
            provider.abort(handle)
    assert running[0].startswith("uncorrectable") and len(closing) == 1
    assert backend.active() == 0 and await backend.committed() == []


async def test_a_call_the_close_overtook_never_runs_on_the_handed_back_connection(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement whose worker thread reaches the handle only after the close
    (a close can overtake a call on its way to the handle's lock) fails with an
    UncorrectableError instead of running on a connection that went back to the provider."""
    from nucleo_trio.resources import threads

    original = threads.HandleCalls._locked
    late = threading.Event()

    def reach_the_lock_late(self: threads.HandleCalls, call: Any) -> Any:
        if getattr(call, "__name__", "") == "run":
            late.wait(5)  # held back until the close has run
        return original(self, call)

    monkeypatch.setattr(threads.HandleCalls, "_locked", reach_the_lock_late)
    provider = backend.provider
    handle = await provider.acquire()
    outcome: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_expect_uncorrectable, backend.insert(handle, "stale"), outcome)
        await trio.testing.wait_all_tasks_blocked()
        await provider.close(handle)
        late.set()
    assert len(outcome) == 1 and "closed before this call could run" in outcome[0]
    assert await backend.committed() == [] and backend.active() == 0


async def test_a_handle_from_another_provider_is_refused(backend: Backend) -> None:
    """DB-12: every verb refuses a handle another provider made, naming the provider."""
    provider = backend.provider
    other = backend.make("other", 1)
    foreign = [
        await CountingDBResourceProvider("counted", 1).acquire(),
        await other.acquire(),
    ]
    label = "SQLite" if backend.kind == "sqlite" else "PostgreSQL"
    for handle in foreign:
        for verb in ("begin", "commit", "await_completion", "rollback", "close"):
            with pytest.raises(ValueError, match=f"{label} provider 'contract'"):
                await getattr(provider, verb)(handle)
        with pytest.raises(ValueError, match=f"{label} provider 'contract'"):
            await provider.execute(handle, "SELECT 1")
        with pytest.raises(ValueError, match=f"{label} provider 'contract'"):
            provider.abort(handle)
    await other.close(foreign[1])
    if hasattr(other, "aclose"):
        await other.aclose()


async def test_through_the_dispatcher_jobs_never_hold_more_connections_than_the_bound(
    backend: Backend,
) -> None:
    """DB-12, DB-02, EXEC-03: six transactional writing jobs through a real dispatcher (the
    dispatcher opens each job's handle under its permit, begins and commits) commit six rows,
    never more than two connections out at once; the permits and the connections are all back."""
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

    provider = backend.provider
    peak = 0

    class Write(Tool[None]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_database(provider).require_transaction()

        async def execute(self, context: JobContext) -> None:
            nonlocal peak
            assert context.resources is not None
            peak = max(peak, backend.active())
            await backend.insert(context.resources.handle(provider), self.job_id)

    async with open_dispatcher() as dispatcher:
        root = workflow("u", "writes")
        jobs = [Write(root) for _ in range(6)]
        for handle in [dispatcher.submit(job) for job in jobs]:
            await handle.result()
    assert sorted(await backend.committed()) == sorted(job.job_id for job in jobs)
    assert 1 <= peak <= 2
    assert backend.active() == 0 and provider.admission().in_use == 0
    assert await backend.sessions() <= 2


# --- leak checks (issue 3): nothing stays behind ------------------------------------------------


async def test_a_job_killed_mid_transaction_leaks_nothing(backend: Backend) -> None:
    """A job that times out holding an open transaction, its close cancelled along with it:
    the permit and the connection come back, and none of its rows is committed."""
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

    provider = backend.provider
    held: list[DBHandle] = []

    class Stuck(Tool[None]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(provider.admission())

        async def execute(self, context: JobContext) -> None:
            handle = await provider.acquire()
            held.append(handle)
            try:
                await provider.begin(handle)
                await backend.insert(handle, "never")
                await trio.sleep_forever()
            finally:
                await provider.close(handle)  # unshielded: cancelled as soon as it waits

    async with open_dispatcher() as dispatcher:
        job = Stuck(workflow("u", "stuck"))
        job.set_timeout(0.2)
        with pytest.raises(JobTimeoutError):
            await dispatcher.submit(job).result()
    await provider.close(held[0])  # a repeated close waits for the first to finish
    assert backend.active() == 0 and provider.admission().in_use == 0
    assert await backend.committed() == []
    assert await backend.sessions() <= 1
    with trio.fail_after(10):
        handle = await provider.acquire()  # the connection (or its slot) is usable again
        await backend.insert(handle, "after")
        await provider.close(handle)
    assert await backend.committed() == ["after"]


async def test_a_close_that_hangs_and_is_given_up_on_still_hands_the_connection_back(
    backend: Backend,
) -> None:
    """A close stuck behind a running statement, abandoned by its caller: the abort that
    follows cuts the statement short and the abandoned close still returns the connection."""
    provider = backend.provider
    handle = await provider.acquire()
    await provider.begin(handle)
    await backend.insert(handle, "never")
    running: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                _expect_uncorrectable, provider.execute(handle, backend.slow_sql), running
            )
            await backend.until_running(handle)
            with trio.CancelScope() as give_up:
                nursery.start_soon(_cancel_when_blocked, give_up)
                await provider.close(handle)
            assert give_up.cancelled_caught and backend.active() == 1
            provider.abort(handle)
        await provider.close(handle)
    assert running[0].startswith("uncorrectable")
    assert backend.active() == 0 and await backend.committed() == []
    assert await backend.sessions_settle_at(0) == 0


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def test_a_handle_that_fails_to_open_leaks_nothing(backend: Backend, tmp_path: Path) -> None:
    """A connection that cannot be opened raises and takes no slot: the next attempt fails for
    the same reason, not for a full pool, and nothing is counted out."""
    if backend.kind == "sqlite":
        # A directory is no database file: every open fails, as the file system says.
        broken = SQLiteProvider("broken", tmp_path, 1)
        failure: type[BaseException] = sqlite3.OperationalError
    else:
        from nucleo_trio_postgres import PostgresProvider

        conninfo = backend.provider.conninfo.replace("dbname=postgres", "dbname=missing")
        broken = PostgresProvider("broken", conninfo, 1)
        failure = UncorrectableError
    for _ in range(2):
        with pytest.raises(failure) as caught:
            await broken.acquire()
        assert "checked out" not in str(caught.value)
    assert backend.active(broken) == 0 and broken.admission().in_use == 0


async def test_a_commit_that_throws_leaks_nothing(backend: Backend) -> None:
    """A commit refused by a deferred constraint: nothing is committed, and the connection
    goes back (clean, for PostgreSQL's idle set) at close."""
    provider = backend.provider
    handle = await provider.acquire()
    await backend.prepare(handle)
    await provider.begin(handle)
    await backend.insert(handle, "never")
    await provider.execute(handle, "INSERT INTO child (id, parent) VALUES (1, 42)")
    with pytest.raises(Exception, match=r"(?i)foreign key"):
        await provider.commit(handle)
    await provider.rollback(handle)
    await provider.close(handle)
    assert backend.active() == 0 and await backend.committed() == []
    assert await backend.sessions() <= 1
    again = await provider.acquire()
    await backend.insert(again, "after")
    await provider.close(again)
    assert await backend.committed() == ["after"]


# --- PostgreSQL only: the provider's own set of connections -------------------------------------


async def test_the_postgres_provider_reuses_idle_connections_within_its_bound(
    postgres_conninfo: str,
) -> None:
    """At most max_connections connections: a closed handle's connection serves the next
    acquire; one more acquire than the bound is refused naming the gate; an idle connection the
    server dropped is discarded, not handed out, and another opened in its place."""
    backend = await trio.to_thread.run_sync(_postgres_backend, postgres_conninfo)
    provider = backend.provider
    pid = "SELECT pg_backend_pid()"
    first, second = await provider.acquire(), await provider.acquire()
    first_pid = (await provider.execute(first, pid))[0][0]
    with pytest.raises(UncorrectableError, match="all 2 connections.*db:contract"):
        await provider.acquire()
    await provider.close(first)
    assert (provider.active_connections, provider.idle_connections) == (1, 1)
    reused = await provider.acquire()
    assert (await provider.execute(reused, pid))[0][0] == first_pid
    await provider.close(reused)
    await provider.execute(second, "SELECT pg_terminate_backend(%s)", [first_pid])
    assert await backend.sessions_settle_at(1) == 1
    fresh = await provider.acquire()
    assert (await provider.execute(fresh, pid))[0][0] != first_pid
    await provider.close(fresh)
    await provider.close(second)
    assert await backend.sessions() == 2
    await provider.aclose()
    assert provider.idle_connections == 0
    assert await backend.sessions_settle_at(0) == 0


async def test_a_reused_postgres_connection_carries_nothing_from_its_last_holder(
    postgres_conninfo: str,
) -> None:
    """What one holder leaves on the session stays with it: a changed setting, a temporary
    table, an advisory lock and a LISTEN are gone when the same connection is handed out again,
    while the connection's start-up settings (its application name) and the server's check for
    a vanished client are back in place."""
    backend = await trio.to_thread.run_sync(_postgres_backend, postgres_conninfo)
    provider = backend.provider
    pid = "SELECT pg_backend_pid()"
    first = await provider.acquire()
    first_pid = (await provider.execute(first, pid))[0][0]
    for statement in (
        "SET search_path = pg_catalog",
        "SET statement_timeout = '1s'",
        "CREATE TEMP TABLE scratch (v int)",
        "SELECT pg_advisory_lock(42)",
        "LISTEN nucleo_channel",
    ):
        await provider.execute(first, statement)
    await provider.close(first)
    again = await provider.acquire()
    assert (await provider.execute(again, pid))[0][0] == first_pid
    settings = await provider.execute(
        again,
        "SELECT current_setting('search_path'), current_setting('statement_timeout'),"
        " current_setting('application_name'),"
        " current_setting('client_connection_check_interval')",
    )
    assert settings == [('"$user", public', "0", APPLICATION, "500ms")]
    temp = await provider.execute(again, "SELECT to_regclass('pg_temp.scratch') IS NULL")
    locks = await provider.execute(
        again, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", [first_pid]
    )
    channels = await provider.execute(again, "SELECT count(*) FROM pg_listening_channels()")
    assert temp == [(True,)] and locks == [(0,)] and channels == [(0,)]
    await provider.close(again)
    await provider.aclose()


# --- issue 11, item 7: phase two never lets more than the bound of connections open -------------

BOUND = 4
WAVES = 3


class _OpenCount:
    """Connections open right now and at most, counted in the threads that open and close
    them (after the connect returned, after the close returned: never too few)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def opened(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def closed(self) -> None:
        with self._lock:
            self.now -= 1


class _Holds:
    """A statement that does not notice an abort: it blocks its worker thread until the test
    releases it (``release(n)``), and tells the test once it is running (``entered``).

    Statements are released in the order they entered: each draws a ticket as it enters, and
    ``release(n)`` lets the next ``n`` tickets through. (A plain semaphore let a statement of
    the next wave, admitted as the first released connection closed, take a token meant for a
    statement of this wave that had not yet reached its wait, and finish before its deadline.)
    """

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._drawn = 0  # tickets drawn so far: the next statement's ticket
        self._let_through = 0  # tickets below this may finish
        self._send, self.entered = trio.open_memory_channel[None](BOUND * WAVES)

    def block(self) -> int:
        with self._turns:
            ticket = self._drawn
            self._drawn += 1
        trio.from_thread.run_sync(self._send.send_nowait, None)
        with self._turns:
            released = self._turns.wait_for(lambda: ticket < self._let_through, timeout=30)
        assert released, "the test never released the statement"
        return 1

    def release(self, count: int) -> None:
        with self._turns:
            self._let_through += count
            self._turns.notify_all()


class _HeldSQLite(SQLiteProvider):
    """SQLite with a user function ``hold()`` that blocks in its worker thread (SQLite's
    interrupt reaches a statement only between VM steps, so it waits the function out); every
    real connection is counted, and so is every acquire."""

    def __init__(self, path: Path) -> None:
        super().__init__("held", path, BOUND)
        self.holds = _Holds()
        self.count = _OpenCount()
        self.acquires = 0
        count = self.count

        class Counted(sqlite3.Connection):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.counted = True
                count.opened()

            def close(self) -> None:
                super().close()
                if self.counted:
                    self.counted = False
                    count.closed()

        self._factory = Counted

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, factory=self._factory
        )
        connection.create_function("hold", 0, self.holds.block)
        return connection

    async def acquire(self, read_only: bool = False) -> DBHandle:
        self.acquires += 1
        return await super().acquire(read_only)

    async def hold(self, handle: DBHandle) -> None:
        await self.execute(handle, "SELECT hold()")

    async def open_now(self) -> int:
        return self.count.now


def _held_postgres(conninfo: str) -> Any:
    from nucleo_trio_postgres import PostgresProvider

    class HeldPostgres(PostgresProvider):
        """PostgreSQL whose ``hold`` keeps the handle's worker thread busy inside the provider
        until the test releases it (a driver call that does not notice the abort); the server
        says how many sessions are open."""

        def __init__(self) -> None:
            super().__init__("held", f"{conninfo} application_name={APPLICATION}", BOUND)
            self.holds = _Holds()
            self.acquires = 0

        async def acquire(self, read_only: bool = False) -> DBHandle:
            self.acquires += 1
            return await super().acquire(read_only)

        async def hold(self, handle: DBHandle) -> None:
            await self._live(handle).calls.run(self.holds.block)

        async def open_now(self) -> int:
            def sessions() -> int:
                import psycopg

                with psycopg.connect(conninfo, autocommit=True) as reader:
                    row = reader.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                        [APPLICATION],
                    ).fetchone()
                    assert row is not None
                    return int(row[0])

            server = await trio.to_thread.run_sync(sessions)
            return max(server, self.active_connections + self.idle_connections)

    return HeldPostgres()


@pytest.fixture(params=["sqlite", "postgres"])
async def held(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        yield _HeldSQLite(tmp_path / "held.db")
        return
    conninfo = request.getfixturevalue("postgres_conninfo")
    provider = _held_postgres(conninfo)
    yield provider
    provider.holds.release(BOUND * WAVES)
    await provider.aclose()


async def test_phase_two_never_lets_more_connections_open_than_the_bound(
    held: Any, mock_clock: trio.testing.MockClock
) -> None:
    """JR-19, DB-12 (issue 11, item 7): twelve jobs on a database bound to four connections,
    each running a statement that ignores the abort, time out in three waves. At phase two the
    aborted connections are still open, so their permits stay held: no job of the next wave is
    admitted (no acquire) until the statements end and the connections close. At no instant are
    more than four connections open; every job ends TIMED_OUT, every connection is closed and
    every permit back."""
    from nucleo_trio.dispatch import grace_period, open_dispatcher
    from nucleo_trio.jobs import JobContext, JobRequirements, JobState, Tool, workflow

    provider = held

    class Slow(Tool[None]):
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_database(provider)

        async def execute(self, context: JobContext) -> None:
            assert context.resources is not None
            await provider.hold(context.resources.handle(provider))

    root = workflow("u", "bounded")
    jobs = [Slow(root) for _ in range(BOUND * WAVES)]
    for job in jobs:
        job.set_timeout(1.0)
    seen: list[int] = []
    try:
        async with open_dispatcher() as dispatcher:
            handles = [dispatcher.submit(job) for job in jobs]
            for wave in range(1, WAVES + 1):
                with trio.fail_after(30):
                    for _ in range(BOUND):
                        await provider.holds.entered.receive()
                await trio.testing.wait_all_tasks_blocked()
                assert provider.acquires == BOUND * wave
                mock_clock.jump(1.0)  # phase one: each close queues behind its statement
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(grace_period(1.0))  # phase two: abort, which nothing notices
                await trio.testing.wait_all_tasks_blocked()
                assert provider.admission().in_use == BOUND
                assert provider.acquires == BOUND * wave, "a permit went back before its close"
                seen.append(await provider.open_now())
                provider.holds.release(BOUND)
            for handle in handles:
                with trio.fail_after(30), contextlib.suppress(Exception):
                    await handle.result()
    finally:
        provider.holds.release(BOUND * WAVES)
    assert [job.context.state for job in jobs] == [JobState.TIMED_OUT] * len(jobs)
    assert max(seen) <= BOUND
    if isinstance(provider, _HeldSQLite):
        assert provider.count.peak == BOUND and provider.count.now == 0
        assert provider.open_connections == 0
    else:
        assert provider.active_connections == 0
    assert provider.admission().in_use == 0
