"""The transaction seat in the attempt, and a forced close at phase two."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import JobDispatcher, open_dispatcher
from nucleo_trio.errors import UncorrectableError, suppressed
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, workflow
from nucleo_trio.resources import GrantReleaseError, SQLiteProvider

from .conftest import Recorder, settle
from .db_doubles import ProviderFault, RecordingProvider
from .jobs_for_tests import Fn, naps


def transactional(provider: RecordingProvider | SQLiteProvider) -> JobRequirements:
    return JobRequirements().require_database(provider).require_transaction()


async def test_a_transactional_success_acquires_begins_commits_awaits_and_closes(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-03: a transactional job that succeeds makes exactly acquire, begin, commit,
    await_completion, close."""
    orders = RecordingProvider("orders")
    job = Fn(workflow("u", "wf"), naps(0.1), requirements=lambda: transactional(orders))
    await dispatcher.submit(job).result()
    assert orders.log == [
        "orders.acquire",
        "orders.begin",
        "orders.commit",
        "orders.await",
        "orders.close",
    ]
    assert orders.gate.in_use == 0


async def test_a_transactional_failure_rolls_back_and_never_commits(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-04: when a transactional execute raises, the calls are acquire, begin, rollback,
    close, with no commit; the caller gets the job's own failure."""
    orders = RecordingProvider("orders")

    async def fails(ctx: JobContext) -> None:
        raise ValueError("work failed")

    job = Fn(workflow("u", "wf"), fails, requirements=lambda: transactional(orders))
    with pytest.raises(ValueError, match="work failed"):
        await dispatcher.submit(job).result()
    assert orders.log == ["orders.acquire", "orders.begin", "orders.rollback", "orders.close"]
    assert orders.gate.in_use == 0


async def test_a_failed_rollback_rides_as_suppressed_on_the_jobs_own_failure(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-05: when the rollback itself raises, the caller still gets the job's own exception;
    it carries exactly one suppressed UncorrectableError, which carries the provider's error;
    close is still called."""
    orders = RecordingProvider("orders", fail={"rollback"})

    async def fails(ctx: JobContext) -> None:
        raise ValueError("work failed")

    job = Fn(workflow("u", "wf"), fails, requirements=lambda: transactional(orders))
    with pytest.raises(ValueError, match="work failed") as caught:
        await dispatcher.submit(job).result()
    (rider,) = suppressed(caught.value)
    assert isinstance(rider, UncorrectableError)
    (provider_error,) = suppressed(rider)
    assert isinstance(provider_error, ProviderFault)
    assert orders.log[-1] == "orders.close" and orders.gate.in_use == 0


async def test_a_commit_failure_fails_the_job_and_rolls_back(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-15 through the dispatcher: a commit that raises fails the job with the uncorrectable
    error naming the provider; the transaction is rolled back and the handle closed."""
    orders = RecordingProvider("orders", fail={"commit"})
    job = Fn(workflow("u", "wf"), naps(), requirements=lambda: transactional(orders))
    with pytest.raises(UncorrectableError, match="commit failed on RecordingProvider"):
        await dispatcher.submit(job).result()
    assert orders.log == [
        "orders.acquire",
        "orders.begin",
        "orders.commit",
        "orders.rollback",
        "orders.close",
    ]
    assert job.context.state is JobState.FAILED and orders.gate.in_use == 0


async def test_a_close_that_hangs_is_aborted_at_phase_two_and_the_permit_returns_once(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """SIG-07: a job with a 1 s timeout sleeps 3 s holding a provider whose close blocks: the
    caller's wait fails within 20 s, phase two aborts the handle within 5 s, and the database
    permit comes back exactly once."""
    stuck = RecordingProvider("stuck", close_blocks=True)
    given: list[int] = []
    original_give = stuck.gate.give

    def counting_give(amounts: object) -> None:
        given.append(1)
        original_give(amounts)  # type: ignore[arg-type]

    stuck.gate.give = counting_give  # type: ignore[method-assign]
    job = Fn(
        workflow("u", "wf"),
        naps(3),
        requirements=lambda: JobRequirements().require_database(stuck),
        timeout=1.0,
    )
    start = trio.current_time()
    with trio.fail_after(20):
        with pytest.raises(errors.JobTimeoutError):
            await dispatcher.submit(job).result()
    assert stuck.aborted_at is not None and stuck.aborted_at - start <= 5
    await trio.testing.wait_all_tasks_blocked()
    assert given == [1] and stuck.gate.in_use == 0
    assert stuck.log[:3] == ["stuck.acquire", "stuck.close", "stuck.abort"]
    assert stuck.open_handles == 0


# -- against a real SQLite file (worker threads: the real clock) ----------------------------------


def _rows(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    import sqlite3

    path = tmp_path / "leak.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (v INTEGER PRIMARY KEY)")
    return path


async def test_a_job_killed_mid_transaction_leaks_no_permit_connection_or_row(
    db_path: Path,
) -> None:
    """JR-19, SIG-07 on SQLite: a transactional job that writes and then overruns its timeout
    is rolled back; no row is committed, no connection stays open and the permit is back."""
    provider = SQLiteProvider("leak", db_path, max_connections=2)

    async def write_then_hang(ctx: JobContext) -> None:
        assert ctx.resources is not None
        await provider.execute(ctx.resources.handle(provider), "INSERT INTO t VALUES (1)")
        await trio.sleep(10)

    async with open_dispatcher() as dispatcher:
        job = Fn(
            workflow("u", "wf"),
            write_then_hang,
            requirements=lambda: transactional(provider),
            timeout=0.2,
        )
        with pytest.raises(errors.JobTimeoutError):
            await dispatcher.submit(job).result()
    assert _rows(db_path) == 0
    assert provider.open_connections == 0
    assert provider.admission().in_use == 0


async def test_a_commit_that_throws_on_sqlite_leaks_nothing(db_path: Path) -> None:
    """JR-15 on SQLite: a deferred constraint fails at commit; the job fails, nothing is
    committed, the connection is closed and the permit is back."""
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER "
            "REFERENCES t(v) DEFERRABLE INITIALLY DEFERRED)"
        )

    class EnforcingSQLite(SQLiteProvider):
        """Foreign keys are enforced per connection, and only outside a transaction."""

        def _connect(self, read_only: bool) -> sqlite3.Connection:
            connection = super()._connect(read_only)
            connection.execute("PRAGMA foreign_keys = ON")
            return connection

    provider = EnforcingSQLite("leak", db_path, max_connections=1)

    async def orphan(ctx: JobContext) -> None:
        assert ctx.resources is not None
        handle = ctx.resources.handle(provider)
        await provider.execute(handle, "INSERT INTO t VALUES (7)")
        await provider.execute(handle, "INSERT INTO child VALUES (1, 999)")

    async with open_dispatcher() as dispatcher:
        job = Fn(workflow("u", "wf"), orphan, requirements=lambda: transactional(provider))
        with pytest.raises(UncorrectableError, match="commit failed on EnforcingSQLite") as caught:
            await dispatcher.submit(job).result()
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert _rows(db_path) == 0
    assert provider.open_connections == 0 and provider.admission().in_use == 0


async def test_a_handle_that_fails_to_open_on_sqlite_leaks_nothing(tmp_path: Path) -> None:
    """JR-10 on SQLite: a database file that cannot be opened fails the job before it runs,
    with the acquisition error; the permit is back and no connection is open."""
    # A directory is no database file: every open fails, as the file system says.
    provider = SQLiteProvider("missing", tmp_path, max_connections=1)
    async with open_dispatcher() as dispatcher:
        job = Fn(
            workflow("u", "wf"),
            naps(),
            requirements=lambda: JobRequirements().require_database(provider),
        )
        with pytest.raises(UncorrectableError, match="Failed to acquire database handle"):
            await dispatcher.submit(job).result()
    assert job.runs == 0
    assert provider.open_connections == 0 and provider.admission().in_use == 0


async def test_committed_rows_are_visible_after_a_transactional_job(db_path: Path) -> None:
    """EXEC-03 on SQLite: six transactional writing jobs, at most two connections at once,
    commit six rows."""
    provider = SQLiteProvider("rows", db_path, max_connections=2)
    peak = 0

    async with open_dispatcher() as dispatcher:
        root = workflow("u", "wf")
        handles = []
        for i in range(6):

            async def write_i(ctx: JobContext, i: int = i) -> None:
                nonlocal peak
                assert ctx.resources is not None
                peak = max(peak, provider.open_connections)
                await provider.execute(
                    ctx.resources.handle(provider), "INSERT INTO t VALUES (?)", (i,)
                )

            handles.append(
                dispatcher.submit(Fn(root, write_i, requirements=lambda: transactional(provider)))
            )
        for handle in handles:
            await handle.result()
    assert _rows(db_path) == 6 and 1 <= peak <= 2
    assert provider.open_connections == 0


# -- an account that raises as a finished job's grant goes back (ADM-45) --------------------------


class FaultyGate(CountingGate):
    """A gate whose give raises: a bug in an account."""

    def give(self, amounts: Any) -> None:
        raise RuntimeError(f"{self.limiter_name} lost its count")


async def test_an_account_raising_at_release_keeps_a_finished_jobs_result(
    dispatcher: JobDispatcher,
    recorder: Recorder,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ADM-45: the release of a job that finished raises from one account's give. The job keeps
    its verdict and its result (COMPLETED, JobCompletedEvent), the fault is logged at error
    naming the account, every other account and the database permit are back, and the
    dispatcher goes on serving."""
    faulty, fine = FaultyGate("faulty", 5), CountingGate("fine", 1)
    orders = RecordingProvider("orders")

    async def answer(ctx: JobContext) -> str:
        await trio.lowlevel.checkpoint()
        return "kept"

    job = Fn(
        workflow("u", "wf"),
        answer,
        requirements=lambda: (
            JobRequirements()
            .require_rate_limiter(fine)
            .require_rate_limiter(faulty)
            .require_database(orders)
            .require_transaction()
        ),
    )
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.dispatcher"):
        assert await dispatcher.submit(job).result() == "kept"
    assert job.context.state is JobState.COMPLETED
    (record,) = [r for r in caplog.records if "account faulty" in r.getMessage()]
    assert record.levelno == logging.ERROR and "lost its count" in record.getMessage()
    assert fine.in_use == 0 and orders.gate.in_use == 0 and orders.open_handles == 0
    await settle()
    assert recorder.names(job.job_id)[-2:] == ["JobCompletedEvent", "WorkflowCompleteEvent"]
    after = Fn(
        workflow("u", "wf"),
        answer,
        requirements=lambda: JobRequirements().require_rate_limiter(fine),
    )
    assert await dispatcher.submit(after).result() == "kept"


async def test_an_account_raising_at_release_rides_on_the_jobs_own_failure(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """ADM-45: when the job had failed on its own, the caller still gets the job's failure,
    with the account's fault riding on it as suppressed."""
    faulty = FaultyGate("faulty", 5)

    async def fails(ctx: JobContext) -> None:
        raise ValueError("work failed")

    job = Fn(
        workflow("u", "wf"),
        fails,
        requirements=lambda: JobRequirements().require_rate_limiter(faulty),
    )
    with pytest.raises(ValueError, match="work failed") as caught:
        await dispatcher.submit(job).result()
    (rider,) = suppressed(caught.value)
    assert isinstance(rider, GrantReleaseError) and rider.account == "faulty"
    assert job.context.state is JobState.FAILED
