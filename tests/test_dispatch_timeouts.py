"""The two-phase timeout (TMO) in virtual time."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, workflow

from .conftest import Recorder, settle
from .db_doubles import SlowClose
from .jobs_for_tests import Fn


async def test_a_timeout_casualty_becomes_job_timeout_error(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-01: a job with a 200 ms timeout, interrupted, that throws a raw error: the caller finds
    JobTimeoutError (not correctable) with the raw error as cause; TIMED_OUT and JobTimedOut."""

    async def stubborn(ctx: JobContext) -> None:
        try:
            await trio.sleep(10)
        finally:
            raise RuntimeError("raw casualty")

    job = Fn(workflow("u", "wf"), stubborn, timeout=0.2)
    with pytest.raises(errors.JobTimeoutError) as info:
        await dispatcher.submit(job).result()
    assert not info.value.correctable
    assert isinstance(info.value.__cause__, RuntimeError)
    assert job.context.state is JobState.TIMED_OUT
    await settle()
    timed = [e for e in recorder.of(job.job_id) if isinstance(e, ev.JobTimedOut)]
    assert len(timed) == 1 and timed[0].message == "Job timed out after 0.2 seconds"


async def test_phase_one_flags_and_closes_phase_two_cancels_after_the_grace(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-04: at the deadline phase one sets the timeout and cancel flags, runs the callbacks and
    closes the resources (the permit returns while the job still runs); after the grace (10 %,
    at least 0.5 s) phase two cancels the job."""
    gate = CountingGate("slot", 1)
    marks: dict[str, float] = {}
    start = trio.current_time()

    async def slow(ctx: JobContext) -> None:
        ctx.on_timeout(lambda: marks.setdefault("timeout_cb", trio.current_time() - start))
        ctx.on_cancel(lambda: marks.setdefault("cancel_cb", trio.current_time() - start))
        try:
            await trio.sleep(100)
        finally:
            marks["cancelled_at"] = trio.current_time() - start
            marks["in_use_at_phase_two"] = gate.in_use

    job = Fn(
        workflow("u", "wf"),
        slow,
        timeout=2.0,
        requirements=lambda: JobRequirements().require_rate_limiter(gate),
    )
    with pytest.raises(errors.JobTimeoutError):
        await dispatcher.submit(job).result()
    assert marks["timeout_cb"] == pytest.approx(2.0)
    assert marks["cancel_cb"] == pytest.approx(2.0)
    assert marks["cancelled_at"] == pytest.approx(2.5)
    assert marks["in_use_at_phase_two"] == 0
    assert job.context.is_cancelled and job.context.timed_out
    assert gate.in_use == 0


async def test_a_cooperative_job_that_stops_in_phase_one_times_out(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-01, TMO-04: a job that checks its token stops inside the grace with CancellationRequested;
    the caller still gets JobTimeoutError and the state is TIMED_OUT."""

    async def polite(ctx: JobContext) -> None:
        while True:
            ctx.check_cancellation()
            await trio.sleep(0.05)

    job = Fn(workflow("u", "wf"), polite, timeout=1.0)
    start = trio.current_time()
    with pytest.raises(errors.JobTimeoutError) as info:
        await dispatcher.submit(job).result()
    assert trio.current_time() - start < 1.5
    assert isinstance(info.value.__cause__, errors.CancellationRequested)
    assert job.context.state is JobState.TIMED_OUT


async def test_an_llm_readable_casualty_passes_through(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-05: a casualty that is already LLM-readable reaches the caller unchanged."""
    own = errors.ExternalServiceError("upstream went away", service="search")

    async def readable(ctx: JobContext) -> None:
        try:
            await trio.sleep(10)
        finally:
            raise own

    job = Fn(workflow("u", "wf"), readable, timeout=1.0)
    with pytest.raises(errors.ExternalServiceError) as info:
        await dispatcher.submit(job).result()
    assert info.value is own
    assert job.context.state is JobState.TIMED_OUT


async def test_a_job_with_no_deadline_never_times_out(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """CTX-08: without a deadline remaining_time is None and is_timed_out stays false."""

    async def long(ctx: JobContext) -> Any:
        assert ctx.remaining_time is None
        await trio.sleep(10_000)
        return ctx.is_timed_out

    assert await dispatcher.submit(Fn(workflow("u", "wf"), long, timeout=None)).result() is False


async def test_remaining_time_counts_down_the_attempts_deadline(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """CTX-08: with a deadline remaining_time is the seconds left."""

    async def measure(ctx: JobContext) -> float | None:
        await trio.sleep(3)
        return ctx.remaining_time

    assert await dispatcher.submit(
        Fn(workflow("u", "wf"), measure, timeout=10)
    ).result() == pytest.approx(7)


async def test_phase_two_gives_the_database_permit_back_only_after_the_close(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """TMO-04, JR-19, DB-12: a job that overruns holding the only connection of a database
    whose close hangs: phase two aborts at the end of the grace, but the permit stays held (and
    the job waiting for the database stays parked) until the aborted connection has closed;
    then the waiting job runs."""
    db = SlowClose("db", max_concurrent=1)
    started: list[float] = []

    async def overruns(ctx: JobContext) -> None:
        await trio.sleep(100)

    async def waits(ctx: JobContext) -> str:
        started.append(trio.current_time())
        return "ran"

    def needs_db() -> JobRequirements:
        return JobRequirements().require_database(db)

    stuck = Fn(workflow("u", "wf"), overruns, timeout=1.0, requirements=needs_db)
    later = Fn(workflow("u", "wf"), waits, timeout=1.0, requirements=needs_db)
    stuck_handle = dispatcher.submit(stuck)
    await settle()
    later_handle = dispatcher.submit(later)
    with pytest.raises(errors.JobTimeoutError):
        await stuck_handle.result()
    assert db.aborted_at == pytest.approx(1.5)
    await trio.sleep(50)
    assert db.gate.in_use == 1 and db.open_handles == 1 and started == []
    db.closable.set()
    assert await later_handle.result() == "ran"
    assert started == [pytest.approx(trio.current_time())]
    assert db.gate.in_use == 0 and db.open_handles == 0
