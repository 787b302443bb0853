"""A commit in flight against a deadline, a cancel and a shutdown (issue 11, item 6).

Once a transactional job's commit is sent, its answer is the outcome: the commit is shielded
from every cancellation within the commit window, a deadline that lands meanwhile waits for
the answer, and what the caller is told is what the database did. A committed job is never
reported as rolled back.

The first half drives a provider whose commit waits in trio until the test answers it, in
virtual time. The second half does the same on a real SQLite file whose COMMIT is held in its
worker thread by a ``threading.Event``; the clock there is trio's mock clock, moved only by the
test (``mock_clock.jump``), so no test sleeps on the real clock to prove a timing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.dispatch import JobDispatcher, grace_period, open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, workflow
from nucleo_trio.resources import (
    COMMIT_WINDOW,
    CancelledAfterCommit,
    CommitError,
    DBHandle,
    SQLiteProvider,
)

from .conftest import Recorder, settle
from .db_doubles import ProviderFault, RecordingProvider
from .jobs_for_tests import Fn

TIMEOUT = 1.0
GRACE = grace_period(TIMEOUT)


class HeldCommit(RecordingProvider):
    """A provider whose commit waits (in trio) until the test answers it: ``answer()`` lets it
    commit, ``answer(refuse=True)`` makes it raise. It ignores an abort, as a commit stuck in
    the network would; only a cancel of the call stops it."""

    def __init__(self, name: str, log: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(name, log, **kwargs)
        self.sent = trio.Event()
        self._answered = trio.Event()
        self._refuse = False
        self.committed = False

    def answer(self, *, refuse: bool = False) -> None:
        self._refuse = refuse
        self._answered.set()

    async def commit(self, handle: DBHandle) -> None:
        self._record("commit")
        self.sent.set()
        await self._answered.wait()
        if self._refuse:
            raise ProviderFault(f"{self.name} refused the commit")
        self.committed = True


def transactional(*providers: Any) -> JobRequirements:
    requirements = JobRequirements()
    for provider in providers:
        requirements.require_database(provider)
    return requirements.require_transaction()


async def pays(ctx: JobContext) -> str:
    await trio.lowlevel.checkpoint()
    return "paid"


def paying_job(*providers: Any, timeout: float = TIMEOUT) -> Fn:
    return Fn(
        workflow("u", "wf"), pays, requirements=lambda: transactional(*providers), timeout=timeout
    )


# -- a deadline mid-commit ----------------------------------------------------------------------


async def test_a_deadline_mid_commit_waits_for_the_answer_and_a_committed_job_completes(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-03, TMO-04: the deadline and the end of the grace pass while the commit is in
    flight; nothing is aborted and the job's verdict waits. The commit succeeds: the job ends
    COMPLETED with its result, after exactly acquire, begin, commit, await, close, and no
    JobTimedOut is published."""
    orders = HeldCommit("orders")
    job = paying_job(orders)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    sent_at = trio.current_time()
    await trio.sleep(TIMEOUT + 2 * GRACE + 1)  # well past the deadline and the grace
    assert not handle.done and not job.context.timed_out
    assert orders.aborted_at is None and orders.gate.in_use == 1
    orders.answer()
    assert await handle.result() == "paid"
    assert trio.current_time() - sent_at < COMMIT_WINDOW
    assert job.context.state is JobState.COMPLETED
    assert orders.log == [
        "orders.acquire",
        "orders.begin",
        "orders.commit",
        "orders.await",
        "orders.close",
    ]
    await settle()
    assert recorder.names(job.job_id)[-2:] == ["JobCompletedEvent", "WorkflowCompleteEvent"]
    assert orders.gate.in_use == 0 and orders.open_handles == 0


async def test_a_deadline_mid_commit_then_a_refused_commit_says_it_was_rolled_back(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-15, TMO-05: the deadline passes during the commit and the database refuses it: the
    timeout then runs, and the caller gets the commit's own error, which says the database
    was rolled back (true: nothing was committed)."""
    orders = HeldCommit("orders")
    job = paying_job(orders)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    await trio.sleep(TIMEOUT + 1)
    orders.answer(refuse=True)
    with pytest.raises(CommitError) as caught:
        await handle.result()
    assert job.context.state is JobState.TIMED_OUT
    assert caught.value.rolled_back == ("orders",) and caught.value.committed == ()
    assert "rolled back: 'orders'" in str(caught.value)
    assert isinstance(caught.value.__cause__, ProviderFault)
    assert not orders.committed and "orders.rollback" in orders.log
    assert orders.gate.in_use == 0


async def test_a_commit_that_never_answers_is_aborted_a_window_after_the_deadline(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """A commit that hangs cannot hang the job: COMMIT_WINDOW seconds after the deadline asked
    the job to stop, the commit is aborted and the job times out. The caller is told the
    commit's fate is unknown, never that it was rolled back; the connection is closed and the
    permit is back."""
    orders = HeldCommit("orders")
    job = paying_job(orders)
    start = trio.current_time()
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    with pytest.raises(CommitError) as caught:
        await handle.result()
    assert trio.current_time() - start == pytest.approx(TIMEOUT + COMMIT_WINDOW)
    assert job.context.state is JobState.TIMED_OUT
    assert caught.value.unknown == ("orders",) and caught.value.rolled_back == ()
    message = str(caught.value)
    assert f"no answer within {COMMIT_WINDOW:g} s of the request to stop" in message
    assert "rolled back" not in message
    assert "orders.abort" in orders.log and "orders.rollback" not in orders.log
    await settle()
    assert orders.gate.in_use == 0 and orders.open_handles == 0


class HeldCommitSlowClose(HeldCommit):
    """A hung commit whose connection then takes twice the grace to close (aborted or not)."""

    async def close(self, handle: DBHandle) -> None:
        await trio.sleep(2 * GRACE)
        await super().close(handle)


async def test_phase_two_landing_in_the_close_after_a_cut_short_commit_keeps_its_error(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-05: the commit hangs and is aborted a window after the deadline; phase one then
    runs, and its grace ends while the connection is still closing. The job's verdict is
    still the commit's own error (its fate unknown), not a bare timeout that would hide a
    commit that may have taken effect."""
    orders = HeldCommitSlowClose("orders")
    job = paying_job(orders)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    with pytest.raises(CommitError) as caught:
        await handle.result()
    assert job.context.state is JobState.TIMED_OUT
    assert caught.value.unknown == ("orders",)
    assert orders.gate.in_use == 1  # held until the aborted connection has closed (JR-19)
    await trio.sleep(3 * GRACE)  # its slow close, in the background
    assert orders.gate.in_use == 0 and orders.open_handles == 0
    assert orders.log[-2:] == ["orders.abort", "orders.close"]


async def test_a_slow_commit_nobody_asked_to_stop_is_left_to_answer(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """The commit window bounds a commit only once something asks the job to stop: a commit
    that takes far longer than the window, well inside the job's time budget, is not aborted."""
    orders = HeldCommit("orders")
    job = paying_job(orders, timeout=3600)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    await trio.sleep(20 * COMMIT_WINDOW)
    assert orders.aborted_at is None and not handle.done
    orders.answer()
    assert await handle.result() == "paid"
    assert orders.committed and job.context.state is JobState.COMPLETED


async def test_a_commit_failing_part_way_says_which_databases_committed_and_which_rolled_back(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-15, JR-16 through the dispatcher: of three databases the second refuses its commit.
    The first stays committed, the second and third are rolled back in reverse, and the error
    says exactly that."""
    log: list[str] = []
    first = RecordingProvider("first", log)
    second = RecordingProvider("second", log, fail={"commit"})
    third = RecordingProvider("third", log)
    job = paying_job(first, second, third)
    with pytest.raises(CommitError) as caught:
        await dispatcher.submit(job).result()
    error = caught.value
    assert (error.committed, error.rolled_back, error.unknown) == (
        ("first",),
        ("second", "third"),
        (),
    )
    assert str(error) == (
        "commit failed on RecordingProvider ('second'): second commit failed; "
        "committed: 'first'; rolled back: 'second', 'third'"
    )
    assert log.index("third.rollback") < log.index("second.rollback")
    assert "first.rollback" not in log
    assert job.context.state is JobState.FAILED


# -- a cancel or a shutdown mid-commit ----------------------------------------------------------


async def test_a_cancel_mid_commit_ends_cancelled_saying_the_commit_succeeded(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """ST-03, ST-06: a cancel that lands once the commit is sent still makes the job CANCELLED
    (the first terminal state wins), but the commit is not abandoned: it answers, and the
    cancellation's cause says the commit succeeded and the work is durable."""
    orders = HeldCommit("orders")
    job = paying_job(orders)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    assert dispatcher.cancel(job.job_id, "user changed their mind")
    await settle()
    assert not handle.done and orders.aborted_at is None
    orders.answer()
    with pytest.raises(errors.JobCancelledError) as caught:
        await handle.result()
    cause = caught.value.__cause__
    assert isinstance(cause, CancelledAfterCommit) and cause.committed == ("orders",)
    assert "user changed their mind" in str(cause)
    assert "the commit succeeded ('orders' committed): the work is durable" in str(cause)
    assert orders.committed and "orders.rollback" not in orders.log
    assert job.context.state is JobState.CANCELLED
    await settle()
    assert "JobCancelled" in recorder.names(job.job_id)
    assert orders.gate.in_use == 0


class SlowAfterCommit(Fn):
    """A transactional job whose ``post_execute`` takes a minute, after its commit."""

    async def post_execute(self, context: JobContext) -> None:
        await trio.sleep(60)


@pytest.mark.parametrize("how", ["cancel", "shutdown"])
async def test_a_job_stopped_after_its_commit_says_what_the_commit_did(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A cancel, or a shutdown's interrupt, that lands after the commit answered (here in
    post_execute) ends the job CANCELLED, and its cause names the database that committed."""
    orders = RecordingProvider("orders")
    async with open_dispatcher() as dispatcher:
        job = SlowAfterCommit(
            workflow("u", "wf"), pays, requirements=lambda: transactional(orders), timeout=600
        )
        handle = dispatcher.submit(job)
        await trio.sleep(1)
        assert "orders.commit" in orders.log and not handle.done
        if how == "cancel":
            assert dispatcher.cancel(job.job_id, "not needed any more")
        else:
            await dispatcher.shutdown(timeout=1)
        with pytest.raises(errors.JobCancelledError) as caught:
            await handle.result()
    cause = caught.value.__cause__
    assert isinstance(cause, CancelledAfterCommit) and cause.committed == ("orders",)
    assert "the work is durable" in str(cause)
    assert "orders.rollback" not in orders.log and orders.gate.in_use == 0


async def test_a_cancel_mid_commit_then_a_refused_commit_carries_the_commit_error(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """A cancel during a commit that is then refused: CANCELLED, and the chain carries the
    CommitError saying the database was rolled back."""
    orders = HeldCommit("orders")
    job = paying_job(orders)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    dispatcher.cancel(job.job_id, "stop")
    orders.answer(refuse=True)
    with pytest.raises(errors.JobCancelledError) as caught:
        await handle.result()
    cause = caught.value.__cause__
    assert isinstance(cause, CancelledAfterCommit) and "commit failed" in str(cause)
    assert cause.committed == () and isinstance(cause.__cause__, CommitError)
    assert cause.__cause__.rolled_back == ("orders",)


async def test_a_shutdown_mid_commit_waits_for_the_commit_and_says_what_it_did(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """Shutdown interrupts a job whose commit is in flight: the interrupt does not abandon the
    commit; the job ends CANCELLED, saying the commit succeeded, and its database is
    committed."""
    orders = HeldCommit("orders")
    job = paying_job(orders, timeout=100)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatcher.shutdown, 1.0)
        await trio.sleep(2.0)  # past the shutdown's wait: the job is interrupted
        assert not handle.done and orders.aborted_at is None
        orders.answer()
    with pytest.raises(errors.JobCancelledError) as caught:
        await handle.result()
    assert "the commit succeeded ('orders' committed)" in str(caught.value.__cause__)
    assert orders.committed and job.context.state is JobState.CANCELLED
    assert orders.gate.in_use == 0 and orders.open_handles == 0


async def test_a_shutdown_aborts_a_hung_commit_a_window_after_the_interrupt(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """A commit that never answers does not hold a shutdown: COMMIT_WINDOW seconds after the
    interrupt it is aborted, and the job ends CANCELLED, its cause saying the commit failed
    with an unknown fate (never that it was rolled back)."""
    orders = HeldCommit("orders")
    job = paying_job(orders, timeout=100)
    handle = dispatcher.submit(job)
    await orders.sent.wait()
    start = trio.current_time()
    await dispatcher.shutdown(1.0)
    assert trio.current_time() - start == pytest.approx(1.0 + COMMIT_WINDOW)
    with pytest.raises(errors.JobCancelledError) as caught:
        await handle.result()
    cause = caught.value.__cause__
    assert isinstance(cause, CancelledAfterCommit) and cause.committed == ()
    assert isinstance(cause.__cause__, CommitError) and cause.__cause__.unknown == ("orders",)
    assert "rolled back" not in str(cause)
    assert orders.gate.in_use == 0 and orders.open_handles == 0


# -- on a real SQLite file ----------------------------------------------------------------------


class HeldSQLite(SQLiteProvider):
    """SQLite whose COMMIT waits in its worker thread until the test sets ``release``; it
    tells the trio side (``sent``) once the thread holds the connection for the commit."""

    def __init__(self, name: str, path: Path, max_connections: int) -> None:
        super().__init__(name, path, max_connections)
        self.release = threading.Event()
        self.sent = trio.Event()

    async def commit(self, handle: DBHandle) -> None:
        own = self._live(handle)
        connection: sqlite3.Connection = own.connection

        def held_commit() -> list[Any]:
            trio.from_thread.run_sync(self.sent.set)
            assert self.release.wait(10), "the test never released the commit"
            return connection.execute("COMMIT").fetchall()

        await own.calls.run(held_commit)


@pytest.fixture
def db_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "races.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE payments (job TEXT)")
    yield path


def _rows(path: Path) -> list[str]:
    with sqlite3.connect(path) as reader:
        return [row[0] for row in reader.execute("SELECT job FROM payments")]


@pytest.mark.parametrize("what", ["deadline", "cancel", "shutdown"])
async def test_on_sqlite_what_lands_mid_commit_never_hides_a_committed_row(
    db_path: Path, mock_clock: trio.testing.MockClock, what: str
) -> None:
    """EXEC-03 on SQLite, the soak's 637 rows: a job writes its row and sends the COMMIT, and
    while the COMMIT is held in its worker thread the job's deadline (and grace) passes, or it
    is cancelled, or the dispatcher shuts down. The row is committed, and the verdict says so:
    COMPLETED with the result for a deadline; CANCELLED saying the commit succeeded for a
    cancel or a shutdown. The connection is closed and the permit is back."""
    provider = HeldSQLite("payments", db_path, max_connections=1)

    async def pay(ctx: JobContext) -> str:
        assert ctx.resources is not None
        handle = ctx.resources.handle(provider)
        await provider.execute(handle, "INSERT INTO payments VALUES (?)", [ctx.job_id])
        return "paid"

    job = Fn(workflow("u", "wf"), pay, requirements=lambda: transactional(provider), timeout=5)
    try:
        async with open_dispatcher() as dispatcher, trio.open_nursery() as nursery:
            handle = dispatcher.submit(job)
            await provider.sent.wait()
            if what == "deadline":
                mock_clock.jump(5)
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(grace_period(5) + 1)
            elif what == "cancel":
                dispatcher.cancel(job.job_id, "not needed")
            else:
                nursery.start_soon(dispatcher.shutdown, 1.0)
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(2)  # past the shutdown's wait: the job is interrupted
            await trio.testing.wait_all_tasks_blocked()
            assert not handle.done and provider.open_connections == 1
            provider.release.set()
            if what == "deadline":
                assert await handle.result() == "paid"
            else:
                with pytest.raises(errors.JobCancelledError) as caught:
                    await handle.result()
                cause = caught.value.__cause__
                assert isinstance(cause, CancelledAfterCommit)
                assert cause.committed == ("payments",)
    finally:
        provider.release.set()
    assert _rows(db_path) == [job.job_id]
    expected = JobState.COMPLETED if what == "deadline" else JobState.CANCELLED
    assert job.context.state is expected
    assert provider.open_connections == 0 and provider.admission().in_use == 0
