"""The database provider contract as a base test class: what every provider must do for jobs to
hold, commit and give back its connections.

A plugin that brings a database stack subclasses :class:`DBProviderContract` in a test module,
says how to build a provider on a database the test owns and how to read that database behind
the provider's back, and pytest collects every check for that provider::

    import sqlite3

    import pytest
    from nucleo_trio.resources import SQLiteProvider
    from nucleo_trio.testing import DBProviderContract


    class TestMySQLite(DBProviderContract):
        @pytest.fixture(autouse=True)
        def _database(self, tmp_path):
            self.path = tmp_path / "contract.db"

        def make_provider(self, name, bound):
            return SQLiteProvider(name, self.path, bound)

        def create_table(self):
            with sqlite3.connect(self.path) as setup:
                setup.execute("DROP TABLE IF EXISTS contract_rows")
                setup.execute("CREATE TABLE contract_rows (id INTEGER PRIMARY KEY, note TEXT)")

        def committed_rows(self):
            with sqlite3.connect(self.path) as reader:
                rows = reader.execute("SELECT note FROM contract_rows ORDER BY id")
                return [note for (note,) in rows]

The table is :attr:`DBProviderContract.table`, with an auto-numbered key and a text column
``note``; every check creates it afresh and writes to it with ``INSERT ... (note) VALUES (?)``,
the ``?`` being :attr:`DBProviderContract.placeholder` (``"%s"`` for psycopg). A provider with
no ``execute(handle, sql, params)`` of its own overrides :meth:`DBProviderContract.execute`.

Like :class:`~nucleo_trio.testing.AccountContract`, the checks are plain synchronous methods
that raise :class:`AssertionError`, each in a ``trio.run`` of its own, so they need no pytest.
A provider runs its driver in worker threads, and a virtual clock would jump ahead while a
thread works, so these runs keep the real clock; none of them sleeps, and each gives up after
:attr:`DBProviderContract.time_limit` seconds instead of hanging on a provider that never
answers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

import trio

from .._clock import run_sync_holding_the_clock
from ..dispatch import open_dispatcher
from ..errors import UncorrectableError
from ..jobs import JobContext, JobRequirements, Tool, workflow
from ..resources import CountingDBResourceProvider, DBHandle, DBResourceProvider

__all__ = ["DBProviderContract"]

_VERBS = ("begin", "commit", "await_completion", "rollback", "close")


def _in_trio(
    check: Callable[[DBProviderContract, DBResourceProvider], Awaitable[None]],
) -> Callable[[DBProviderContract], None]:
    """Run an async check in a ``trio.run`` of its own on the real clock, on a fresh table and a
    fresh provider named ``contract``, and dispose of the provider whatever the check did."""

    def run(self: DBProviderContract) -> None:
        async def body() -> None:
            with trio.fail_after(self.time_limit):
                await run_sync_holding_the_clock(self.create_table)
                provider = self._fresh("contract", self.bound)
                try:
                    await check(self, provider)
                finally:
                    await self.dispose(provider)

        trio.run(body)

    functools.update_wrapper(run, check)
    # pytest reads a test's arguments through __wrapped__: it would look for a fixture named
    # ``provider``, which the wrapper supplies itself.
    del run.__wrapped__  # type: ignore[attr-defined]
    return run


async def _uncorrectable_or_nothing(call: Awaitable[object], what: str) -> None:
    """Await ``call``; whatever it raises must be an :class:`UncorrectableError`."""
    try:
        await call
    except UncorrectableError:
        pass
    except Exception as exc:
        raise AssertionError(
            f"{what} raised {type(exc).__name__}: {exc}, not an UncorrectableError"
        ) from exc


class DBProviderContract:
    """The database provider contract as a base test class; see the module docstring.

    Subclasses implement :meth:`make_provider`, :meth:`create_table` and
    :meth:`committed_rows`, and may set :attr:`placeholder`, :attr:`table`, :attr:`bound` and
    override :meth:`execute`, :meth:`connections_out` and :meth:`dispose`.
    """

    placeholder: ClassVar[str] = "?"
    """The driver's parameter marker: ``"?"`` (sqlite3) or ``"%s"`` (psycopg)."""

    table: ClassVar[str] = "contract_rows"
    """The table :meth:`create_table` creates and the checks write their notes to."""

    bound: ClassVar[int] = 2
    """The bound the provider under test is built with: the most connections it may have open."""

    time_limit: ClassVar[float] = 30.0
    """Seconds one check may take before it fails as hung."""

    # -- what a subclass provides ----------------------------------------------------------------
    def make_provider(self, name: str, bound: int) -> DBResourceProvider:
        """A fresh provider called ``name``, at most ``bound`` connections at once, on the
        database the test owns. A check may build a second one (named otherwise) beside it."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_provider(name, bound) to return a "
            "fresh provider on a database the test owns"
        )

    def create_table(self) -> None:
        """Create :attr:`table` empty (dropping what a previous check left): an auto-numbered
        key and a text column ``note``. Runs in a worker thread, before the provider is built."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement create_table() to create the empty table "
            f"{self.table!r} (an auto-numbered key and a text column 'note')"
        )

    def committed_rows(self) -> list[str]:
        """The notes committed to :attr:`table`, in the order they were inserted, read through a
        connection of the test's own (never the provider's). Runs in a worker thread."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement committed_rows() to read the committed "
            f"notes of {self.table!r} through a connection of its own"
        )

    async def execute(
        self, provider: DBResourceProvider, handle: DBHandle, sql: str, params: Sequence[Any]
    ) -> object:
        """Run one statement on ``handle``'s connection. The default calls the provider's own
        ``execute(handle, sql, params)``; a provider without one overrides this."""
        run = getattr(provider, "execute", None)
        if not callable(run):
            raise NotImplementedError(
                f"{provider!r} has no execute(handle, sql, params): {type(self).__name__} must "
                "override execute(provider, handle, sql, params) to run a statement on a handle"
            )
        answer = run(handle, sql, params)
        return await answer if inspect.isawaitable(answer) else answer

    def connections_out(self, provider: DBResourceProvider) -> int | None:
        """How many connections ``provider`` has checked out to handles not yet closed, or
        ``None`` when the provider does not say. Answering makes the counts of connections in use
        exact; without it the checks see only what the handles show."""
        return None

    async def dispose(self, provider: DBResourceProvider) -> None:
        """Release what ``provider`` keeps once every handle is closed (an idle pool): the
        default awaits its ``aclose()`` when it has one."""
        aclose = getattr(provider, "aclose", None)
        if callable(aclose):
            await aclose()

    # -- helpers -----------------------------------------------------------------------------------
    def _fresh(self, name: str, bound: int) -> DBResourceProvider:
        provider = self.make_provider(name, bound)
        assert isinstance(provider, DBResourceProvider), (
            f"make_provider() returned a {type(provider).__name__}, which does not implement "
            "the DBResourceProvider protocol"
        )
        return provider

    async def _insert(self, provider: DBResourceProvider, handle: DBHandle, note: str) -> None:
        sql = f"INSERT INTO {self.table} (note) VALUES ({self.placeholder})"
        await self.execute(provider, handle, sql, [note])

    async def _committed(self) -> list[str]:
        return await run_sync_holding_the_clock(self.committed_rows)

    def _assert_out(self, provider: DBResourceProvider, expected: int, when: str) -> None:
        out = self.connections_out(provider)
        assert out is None or out == expected, (
            f"{out} connections checked out {when}, not {expected}"
        )

    async def _works(self, provider: DBResourceProvider, note: str) -> None:
        """A fresh handle writes (autocommitted) and closes: the provider still serves."""
        handle = await provider.acquire()
        await self._insert(provider, handle, note)
        await provider.close(handle)

    # -- the checks --------------------------------------------------------------------------------
    @_in_trio
    async def test_the_account_is_named_after_the_database_and_sized_by_the_bound(
        self, provider: DBResourceProvider
    ) -> None:
        """The provider's account is ``db:<name>`` with the bound as its
        capacity, one object for the provider's life; acquire and close take no permit."""
        # Holds DB-01, DB-09, DB-02.
        assert provider.name == "contract", f"the provider is named {provider.name!r}"
        account = provider.admission()
        assert account is provider.admission(), "admission() answered a second account"
        assert account.limiter_name == "db:contract", f"the account is {account.limiter_name!r}"
        assert account.capacity == self.bound, (
            f"the account's capacity is {account.capacity}, not the bound {self.bound}"
        )
        handle = await provider.acquire()
        assert isinstance(handle, DBHandle), f"acquire() gave {handle!r}, not a DBHandle"
        assert account.in_use == 0, "acquire took a permit: the permit belongs to admission"
        await provider.close(handle)
        assert account.in_use == 0 and provider.admission() is account

    @_in_trio
    async def test_a_handle_holds_one_connection_from_acquire_to_close(
        self, provider: DBResourceProvider
    ) -> None:
        """Acquire checks out one connection of its own, a commit keeps it, close hands
        it back; the bound's worth of handles can be taken and given back again and again."""
        # Holds DB-10.
        handle = await provider.acquire()
        connection = handle.unwrap()
        assert connection is not None, "acquire() gave a handle with no connection"
        self._assert_out(provider, 1, "after one acquire")
        await provider.begin(handle)
        await self._insert(provider, handle, "kept")
        await provider.commit(handle)
        await provider.await_completion(handle)
        assert handle.unwrap() is connection, "the commit swapped the handle's connection"
        self._assert_out(provider, 1, "after a commit")
        await provider.close(handle)
        assert handle.closed, "close() left the handle open"
        self._assert_out(provider, 0, "after close")
        for round_ in range(3):
            handles = [await provider.acquire() for _ in range(self.bound)]
            connections = {id(held.unwrap()) for held in handles}
            assert len(connections) == self.bound, f"{self.bound} handles share a connection"
            self._assert_out(provider, self.bound, f"with {self.bound} handles open")
            for held in handles:
                await provider.close(held)
            self._assert_out(provider, 0, f"after round {round_ + 1} closed its handles")
        assert await self._committed() == ["kept"]

    @_in_trio
    async def test_a_commit_is_visible_to_other_connections_once_awaited(
        self, provider: DBResourceProvider
    ) -> None:
        """Rows written in an open transaction are invisible to other connections; once
        committed and awaited they are visible."""
        # Holds DB-10.
        handle = await provider.acquire()
        await provider.begin(handle)
        await self._insert(provider, handle, "first")
        await self._insert(provider, handle, "second")
        unseen = await self._committed()
        assert unseen == [], f"another connection saw uncommitted rows {unseen}"
        await provider.commit(handle)
        await provider.await_completion(handle)
        seen = await self._committed()
        assert seen == ["first", "second"], f"after the commit another connection saw {seen}"
        await provider.close(handle)

    @_in_trio
    async def test_several_transactions_run_on_the_one_handle(
        self, provider: DBResourceProvider
    ) -> None:
        """Three transactions in a row on one handle, all on its one connection."""
        # Holds DB-10.
        handle = await provider.acquire()
        connection = handle.unwrap()
        for note in ("one", "two", "three"):
            await provider.begin(handle)
            await self._insert(provider, handle, note)
            await provider.commit(handle)
            await provider.await_completion(handle)
            assert handle.unwrap() is connection, "a transaction moved to another connection"
            self._assert_out(provider, 1, f"after transaction {note!r}")
        assert await self._committed() == ["one", "two", "three"]
        await provider.close(handle)

    @_in_trio
    async def test_rollback_and_close_discard_and_are_repeatable(
        self, provider: DBResourceProvider
    ) -> None:
        """Rollback with no transaction does nothing and repeats, and discards what was
        written; close rolls back an open transaction, repeats, and hands the connection back."""
        # Holds DB-11.
        handle = await provider.acquire()
        await provider.rollback(handle)
        await provider.begin(handle)
        await self._insert(provider, handle, "rolled back")
        await provider.rollback(handle)
        await provider.rollback(handle)
        assert await self._committed() == [], "a rolled-back row was committed"
        await provider.begin(handle)
        await self._insert(provider, handle, "kept")
        await provider.commit(handle)
        await provider.begin(handle)
        await self._insert(provider, handle, "closed over")
        await provider.close(handle)
        await provider.close(handle)
        self._assert_out(provider, 0, "after two closes")
        committed = await self._committed()
        assert committed == ["kept"], f"close did not roll back: committed {committed}"
        await self._works(provider, "after")
        assert await self._committed() == ["kept", "after"]

    @_in_trio
    async def test_abort_severs_the_connection_and_a_close_still_hands_it_back(
        self, provider: DBResourceProvider
    ) -> None:
        """Abort repeats; every statement after it, commit included, fails with an
        UncorrectableError; a close after it hands the connection back, raising nothing else;
        nothing written before it is committed."""
        # Holds DB-11.
        handle = await provider.acquire()
        await provider.begin(handle)
        await self._insert(provider, handle, "never")
        provider.abort(handle)
        provider.abort(handle)
        after_abort: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("a statement after abort", lambda: self._insert(provider, handle, "after")),
            ("a commit after abort", lambda: provider.commit(handle)),
        ]
        for what, call in after_abort:
            try:
                await call()
            except UncorrectableError:
                continue
            except Exception as exc:
                raise AssertionError(
                    f"{what} raised {type(exc).__name__}: {exc}, not an UncorrectableError"
                ) from exc
            raise AssertionError(f"{what} succeeded")
        await _uncorrectable_or_nothing(provider.close(handle), "close after abort")
        await _uncorrectable_or_nothing(provider.close(handle), "a second close after abort")
        provider.abort(handle)
        self._assert_out(provider, 0, "after the close that followed abort")
        assert await self._committed() == [], "a row written before abort was committed"
        await self._works(provider, "fresh")
        assert await self._committed() == ["fresh"]

    @_in_trio
    async def test_a_handle_from_another_provider_is_refused(
        self, provider: DBResourceProvider
    ) -> None:
        """Every verb, abort and execute refuse a handle another provider made
        (one of the same kind, and a counting one) with a ValueError naming the provider."""
        # Holds DB-04, DB-12.
        other = self._fresh("other", 1)
        try:
            foreign = [
                await CountingDBResourceProvider("counted", 1).acquire(),
                await other.acquire(),
            ]
            calls: list[tuple[str, Callable[[DBHandle], object]]] = [
                (verb, getattr(provider, verb)) for verb in _VERBS
            ]
            calls.append(("abort", provider.abort))
            calls.append(("execute", lambda h: self.execute(provider, h, "SELECT 1", [])))
            for handle in foreign:
                for verb, call in calls:
                    try:
                        answer = call(handle)
                        if inspect.isawaitable(answer):
                            await answer
                    except ValueError as refusal:
                        assert provider.name in str(refusal), (
                            f"{verb}'s refusal {str(refusal)!r} does not name {provider.name!r}"
                        )
                    else:
                        raise AssertionError(f"{verb} accepted a handle from {handle.provider!r}")
            await other.close(foreign[1])
            self._assert_out(other, 0, "on the other provider after its close")
        finally:
            await self.dispose(other)

    @_in_trio
    async def test_through_a_dispatcher_six_writing_jobs_commit_six_rows(
        self, provider: DBResourceProvider
    ) -> None:
        """Six jobs declaring the database and a transaction, through a real
        dispatcher (which acquires, begins, commits and closes for them), commit six rows with
        never more connections out than the bound; every permit and connection comes back."""
        # Holds DB-12, DB-02.
        contract = self
        peak = 0

        class Write(Tool[None]):
            def requirements(self) -> JobRequirements:
                return JobRequirements().require_database(provider).require_transaction()

            async def execute(self, context: JobContext) -> None:
                nonlocal peak
                assert context.resources is not None
                peak = max(peak, contract.connections_out(provider) or 0)
                await contract._insert(provider, context.resources.handle(provider), self.job_id)

        async with open_dispatcher() as dispatcher:
            jobs = [Write(workflow("contract", "writes")) for _ in range(6)]
            for handle in [dispatcher.submit(job) for job in jobs]:
                await handle.result()
        committed = await self._committed()
        assert sorted(committed) == sorted(job.job_id for job in jobs), (
            f"six jobs committed {committed}"
        )
        assert peak <= self.bound, f"{peak} connections were out at once, bound {self.bound}"
        assert provider.admission().in_use == 0, "a permit stayed taken after the jobs"
        self._assert_out(provider, 0, "after the jobs")
