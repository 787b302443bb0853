"""One attempt in order, dependencies, ordinals, re-runs and limiter signals (EXEC, DEP, ORD, SIG)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.jobs import (
    DEFAULT_UPSTREAM_RETRIES,
    META_ITERATION,
    Doer,
    JobContext,
    JobRequirements,
    JobState,
    Orchestrator,
    Tool,
    current_job,
    workflow,
)

from .conftest import Recorder, settle
from .jobs_for_tests import Echo, Fn


class RecordingGate(CountingGate):
    """A counting gate that writes down every call admission and the dispatcher make."""

    def __init__(self, name: str = "custom", capacity: int = 1) -> None:
        super().__init__(name, capacity)
        self.calls: list[str] = []
        self.failures: list[errors.UpstreamFailure] = []

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        taken = super().try_take(mine, reserved_ahead)
        if taken:
            self.calls.append("take")
        return taken

    def give(self, amounts: Sequence[Any]) -> None:
        self.calls.append("give")
        super().give(amounts)

    def on_success(self, input: Any = None) -> None:
        self.calls.append(f"on_success(in_use={self.in_use})")

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        self.calls.append("on_rate_limit_error")
        self.failures.append(failure)


def gated(gate: CountingGate) -> Any:
    return lambda: JobRequirements().require_rate_limiter(gate)


class Phases(Tool[str]):
    def __init__(self, parent: Any, gate: CountingGate) -> None:
        super().__init__(parent)
        self.gate = gate
        self.timeout = 60.0
        self.seen: list[str] = []

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.gate)

    async def pre_execute(self, context: JobContext) -> None:
        self.seen.append(
            f"pre held={context.is_executing_job_with_resources} in_use={self.gate.in_use}"
        )

    async def execute(self, context: JobContext) -> str:
        self.seen.append(f"execute state={context.state.value}")
        return "result"

    async def post_execute(self, context: JobContext) -> None:
        self.seen.append(f"post result={context.result} in_use={self.gate.in_use}")


async def test_pre_execute_holds_resources_and_post_execute_sees_the_result(
    dispatcher: JobDispatcher,
) -> None:
    """EXEC-01, EXEC-02: pre_execute runs once with the resources held, then RUNNING and execute,
    then release, then post_execute with the result present."""
    gate = CountingGate("slot", 1)
    job = Phases(workflow("u", "wf"), gate)
    assert await dispatcher.submit(job).result() == "result"
    assert job.seen == [
        "pre held=True in_use=1",
        "execute state=RUNNING",
        "post result=result in_use=0",
    ]


async def test_a_roots_success_and_failure_event_order(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """EXEC-06, EXEC-07: Scheduled, Started, Completed|Failed, WorkflowComplete(success?)."""
    ok = Echo(workflow("u", "wf"))
    await dispatcher.submit(ok).result()

    async def boom(ctx: JobContext) -> None:
        raise ValueError("work failed")

    bad = Fn(workflow("u", "wf"), boom)
    with pytest.raises(ValueError, match="work failed"):
        await dispatcher.submit(bad).result()
    await settle()
    assert recorder.names(ok.job_id) == [
        "JobScheduled",
        "JobStartedEvent",
        "JobCompletedEvent",
        "WorkflowCompleteEvent",
    ]
    assert recorder.names(bad.job_id) == [
        "JobScheduled",
        "JobStartedEvent",
        "JobFailedEvent",
        "WorkflowCompleteEvent",
    ]
    assert recorder.of(ok.job_id)[-1].successful is True  # type: ignore[attr-defined]
    assert recorder.of(bad.job_id)[-1].successful is False  # type: ignore[attr-defined]


async def test_a_crash_a_job_cannot_handle_is_a_system_error_never_rerun(
    dispatcher: JobDispatcher,
) -> None:
    """EXEC-08: a RecursionError (the seed's Error) reaches the caller as NucleoSystemError of
    component "job" whose cause is the crash; it is not re-run."""

    async def crash(ctx: JobContext) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    job = Fn(workflow("u", "wf"), crash)
    with pytest.raises(errors.NucleoSystemError) as info:
        await dispatcher.submit(job).result()
    assert info.value.component == "job"
    assert isinstance(info.value.__cause__, RecursionError)
    assert job.runs == 1


async def test_the_handle_settles_after_the_workflow_event_on_both_paths(
    dispatcher: JobDispatcher,
) -> None:
    """EXEC-09, EXEC-20: a workflow observer registered on the handle sees WorkflowCompleteEvent on
    success and on failure, and only its own workflow."""
    for fails in (False, True):
        seen: list[ev.JobEvent] = []

        async def maybe(ctx: JobContext, fails: bool = fails) -> str:
            await trio.lowlevel.checkpoint()
            if fails:
                raise RuntimeError("no")
            return "yes"

        other = dispatcher.submit(Echo(workflow("u", "other")))
        job = Fn(workflow("u", "wf"), maybe)
        handle = dispatcher.submit(job)
        handle.register_workflow_observer(seen.append)
        try:
            await handle.result()
        except RuntimeError:
            pass
        await other.result()
        await settle()
        assert isinstance(seen[-1], ev.WorkflowCompleteEvent)
        assert {e.snapshot.workflow_id for e in seen if e.snapshot} == {job.workflow_id}
        # unsubscribed at settle: a later job of the same workflow is not seen
        count = len(seen)
        await dispatcher.submit(Echo(job)).result() if False else None
        later = Echo(workflow("u", "x"))
        await dispatcher.submit(later).result()
        await settle()
        assert len(seen) == count


async def test_success_signals_the_limiter_while_the_permit_is_held(
    dispatcher: JobDispatcher,
) -> None:
    """EXEC-10, SIG-01: a custom limiter sees take, then on_success (exactly once, permit held), then give."""
    gate = RecordingGate()
    await dispatcher.submit(Echo(workflow("u", "wf"), requirements=gated(gate))).result()
    assert gate.calls == ["take", "on_success(in_use=1)", "give"]


async def test_an_external_service_failure_feeds_the_limiter(dispatcher: JobDispatcher) -> None:
    """EXEC-23, SIG-01, ERR-14: ExternalServiceError calls on_rate_limit_error exactly once with the
    UpstreamFailure read off the cause chain."""
    gate = RecordingGate()

    async def fail(ctx: JobContext) -> None:
        try:
            raise errors.http_error_from_status(503, service="search")
        except errors.ExternalServiceError as exc:
            raise RuntimeError("wrapped") from exc

    job = Fn(workflow("u", "wf"), fail, requirements=gated(gate))
    with pytest.raises(RuntimeError, match="wrapped"):
        await dispatcher.submit(job).result()
    assert gate.calls == ["take", "on_rate_limit_error", "give"]
    (failure,) = gate.failures
    assert failure.status == 503 and failure.service == "search"


async def test_dependents_start_with_the_result_resolved(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """DEP-01, DEP-05, CTX-11: a dependent sees its dependency's result keyed by its final
    snapshot, and single_dependency_result returns it."""
    wf = workflow("u", "wf")
    producer = Echo(wf, "alpha", sleep=1)

    async def consume(ctx: JobContext) -> str:
        (snapshot,) = ctx.dependency_results
        assert snapshot.job_id == producer.job_id and snapshot.state is JobState.COMPLETED
        return f"{ctx.single_dependency_result()}:consumed"

    p = dispatcher.submit(producer)
    consumer = dispatcher.submit(Fn(wf, consume), [p])
    assert await consumer.result() == "alpha:consumed"


async def test_a_failed_dependency_fails_the_dependent_which_never_runs(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """DEP-02: a non-tolerant dependent fails with DependencyFailedError and never executes; its
    terminal event is DependencyFailureEvent."""
    wf = workflow("u", "wf")

    async def boom(ctx: JobContext) -> None:
        raise ValueError("producer broke")

    producer = dispatcher.submit(Fn(wf, boom))
    dependent = Echo(wf)
    handle = dispatcher.submit(dependent, [producer])
    with pytest.raises(errors.DependencyFailedError) as info:
        await handle.result()
    assert isinstance(info.value.__cause__, ValueError)
    assert dependent.runs == 0
    await settle()
    assert "DependencyFailureEvent" in recorder.names(dependent.job_id)
    assert "JobStartedEvent" not in recorder.names(dependent.job_id)


async def test_a_tolerant_dependent_runs_and_sees_the_failure_as_none(
    dispatcher: JobDispatcher,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """DEP-03, DEP-05, CTX-11: a tolerant dependent runs; the failed dependency maps to None and its
    error is under dependency_errors; all_dependency_results keeps declaration order; the view is
    read-only."""
    wf = workflow("u", "wf")

    async def boom(ctx: JobContext) -> None:
        raise ValueError("broke")

    first = dispatcher.submit(Echo(wf, "first", sleep=2))
    failing = dispatcher.submit(Fn(wf, boom))

    async def look(ctx: JobContext) -> list[Any]:
        with pytest.raises(TypeError):
            ctx.dependency_results[next(iter(ctx.dependency_results))] = "x"  # type: ignore[index]
        with pytest.raises(RuntimeError, match="exactly one"):
            ctx.single_dependency_result()
        (err,) = ctx.dependency_errors.values()
        assert isinstance(err, ValueError)
        return ctx.all_dependency_results()

    tolerant = Fn(wf, look)
    tolerant.tolerates_dependency_failures = True
    assert await dispatcher.submit(tolerant, [first, failing]).result() == ["first", None]


async def test_a_dependent_cancelled_while_it_waits_settles_cancelled(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """DEP-04: a dependent with queueing off, cancelled while waiting on its dependency, answers
    True, settles with JobCancelledError when the dependency then fails, and never runs."""
    wf = workflow("u", "wf")

    async def slow_boom(ctx: JobContext) -> None:
        await trio.sleep(3)
        raise ValueError("late failure")

    producer = dispatcher.submit(Fn(wf, slow_boom))
    dependent = Echo(wf, requirements=lambda: JobRequirements().without_queueing())
    handle = dispatcher.submit(dependent, [producer])
    await settle()
    assert dispatcher.cancel(dependent.job_id, "changed my mind") is True
    with trio.fail_after(5):
        with pytest.raises(errors.JobCancelledError):
            await handle.result()
    assert dependent.runs == 0
    assert dependent.context.state is JobState.CANCELLED
    with pytest.raises(ValueError):
        await producer.result()


class _Stepper(Doer[list[int]]):
    async def execute(self, context: JobContext) -> list[int]:
        wf = self
        a = self.submit_in_step(Echo(wf, 1))
        await a.result()
        b = self.submit_in_step(Echo(wf, 2))
        await b.result()
        self.next_step()
        c = self.submit_in_current_step(Echo(wf, 3))
        d = self.submit_in_current_step(Echo(wf, 4))
        await c.result()
        await d.result()
        return [h.context.metadata[META_ITERATION] for h in (a, b, c, d)]


async def test_a_doer_stamps_call_order_and_a_fanout_shares_one_ordinal(
    dispatcher: JobDispatcher,
) -> None:
    """ORD-01: two submit_in_step calls stamp 1 and 2; next_step then two submit_in_current_step
    stamp both 3; a raw submit stamps nothing."""
    assert await dispatcher.submit(_Stepper(workflow("u", "wf"))).result() == [1, 2, 3, 3]
    raw = Echo(workflow("u", "wf"))
    await dispatcher.submit(raw).result()
    assert META_ITERATION not in raw.context.metadata


class _Flaky(Tool[str]):
    def __init__(
        self, parent: Any, signals: list[BaseException], gate: CountingGate | None = None
    ) -> None:
        super().__init__(parent)
        self.signals = signals
        self.gate = gate
        self.timeout = 600.0
        self.runs = 0
        self.requirement_calls = 0

    def requirements(self) -> JobRequirements:
        self.requirement_calls += 1
        r = JobRequirements()
        return r.require_rate_limiter(self.gate) if self.gate else r

    async def execute(self, context: JobContext) -> str:
        self.runs += 1
        if self.signals:
            raise self.signals.pop(0)
        return f"answer after {self.runs}"


async def test_an_upstream_signal_closes_resources_before_pacing_and_rereuns(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """SIG-02, SIG-06, EXEC-01: the permit is back before the pacing sleep (one take, one give
    before re-admission); the re-run captures requirements again, is admitted again and publishes
    its own JobStartedEvent; the wait is inside the signal's jitter window."""
    gate = RecordingGate()
    job = _Flaky(workflow("u", "wf"), [errors.TransientErrorRetry("503 from upstream")], gate)
    handle = dispatcher.submit(job)
    start = trio.current_time()
    await trio.sleep(4.9)  # the jitter floor is 5 s: the job is still pacing
    assert gate.in_use == 0
    assert [c for c in gate.calls if c in ("take", "give")] == ["take", "give"]
    assert await handle.result() == "answer after 2"
    assert 5.0 <= trio.current_time() - start <= 30.0
    assert job.requirement_calls == 3  # submit + two attempts
    await settle()
    names = recorder.names(job.job_id)
    assert names == [
        "JobScheduled",
        "JobStartedEvent",
        "TransientErrorRetryEvent",
        "JobStartedEvent",
        "JobCompletedEvent",
        "WorkflowCompleteEvent",
    ]


async def test_the_upstream_budget_is_the_jobs_own(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """SIG-03: the default budget is 3; with 0 the job makes one attempt and fails uncorrectably
    naming "transparent retry budget (0)" with the signal as cause."""
    assert Echo(workflow("u", "wf")).upstream_retries == DEFAULT_UPSTREAM_RETRIES == 3
    signal = errors.TransientErrorRetry("upstream hiccup")
    job = _Flaky(workflow("u", "wf"), [signal])
    job.upstream_retries = 0
    with pytest.raises(errors.UncorrectableError, match=r"transparent retry budget \(0\)") as info:
        await dispatcher.submit(job).result()
    assert "upstream hiccup" in str(info.value)
    assert info.value.__cause__ is signal
    assert job.runs == 1


async def test_all_upstream_signals_draw_on_one_counter(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """SIG-04, SIG-05: RateLimit, Overload and TransientError share one counter per execution; each
    wait is the attempt-scaled window (never over 300 s)."""
    job = _Flaky(
        workflow("u", "wf"),
        [
            errors.RateLimitRetry("429"),
            errors.OverloadRetry("529"),
            errors.TransientErrorRetry("500"),
            errors.RateLimitRetry("429 again"),
        ],
    )
    start = trio.current_time()
    with pytest.raises(errors.UncorrectableError, match=r"budget \(3\)"):
        await dispatcher.submit(job).result()
    assert job.runs == 4
    elapsed = trio.current_time() - start
    # attempt 1: 5..30, attempt 2 (overload): 30..180, attempt 3: 15..90
    assert 5 + 30 + 15 <= elapsed <= 30 + 180 + 90


async def test_a_named_retry_after_is_the_pause_plus_jitter(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """SIG-05's scaling, with the upstream's Retry-After in place of the window (issue 20): a
    429 naming 1 s waits about 1 s (1 to 2 s), not the rate limit's 5-30 s; the second re-run
    doubles both edges (2 to 4 s)."""
    job = _Flaky(
        workflow("u", "wf"),
        [
            errors.RateLimitRetry("429", retry_after=1),
            errors.RateLimitRetry("429 again", retry_after=1),
        ],
    )
    start = trio.current_time()
    assert await dispatcher.submit(job).result() == "answer after 3"
    elapsed = trio.current_time() - start
    await settle()
    first, second = recorder.typed(ev.RateLimitRetryEvent)
    assert first.delay is not None and 1.0 <= first.delay <= 2.0
    assert second.delay is not None and 2.0 <= second.delay <= 4.0
    assert elapsed == pytest.approx(first.delay + second.delay)


@pytest.mark.parametrize(
    ("retry_after", "attempt", "window"),
    [
        (1.0, 1, (1.0, 2.0)),  # the jitter is at least a second
        (1.0, 3, (3.0, 6.0)),  # both edges times the re-run number
        (0.0, 1, (0.0, 1.0)),  # "now" still spreads the re-runs over a second
        (20.0, 1, (20.0, 25.0)),  # a quarter of a longer delay
        (20.0, 12, (200.0, 250.0)),  # at most tenfold
        (100.0, 4, (400.0, 500.0)),  # the draw is capped at 300 s below
    ],
)
def test_the_pacing_window_of_a_named_delay(
    retry_after: float, attempt: int, window: tuple[float, float]
) -> None:
    """SIG-05's scaling and cap, with a named Retry-After in place of the window (issue 20):
    the delay to the delay plus a quarter of it (at least one second), both edges times the
    re-run number at most tenfold; a draw never passes 300 s. Without a named delay the kind's
    own window applies."""
    assert errors.RateLimitRetry.pacing_window(attempt, retry_after) == window
    assert errors.OverloadRetry.pacing_window(attempt, retry_after) == window  # whatever the kind
    assert errors.OverloadRetry.pacing_window(2) == (30.0, 180.0)
    rng = random.Random(11)
    low, high = window
    draws = [
        errors.RateLimitRetry.pacing_delay(attempt, rng, retry_after=retry_after)
        for _ in range(200)
    ]
    assert all(min(low, 300.0) <= d <= min(high, 300.0) for d in draws)
    with pytest.raises(ValueError, match="retry_after"):
        errors.RateLimitRetry.pacing_window(1, -1.0)


async def test_a_correction_reruns_with_its_own_start_and_the_fifth_is_refused(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """EXEC-15, EXEC-16: each ResponseCorrectionRetry re-runs the attempt with its own started
    event; a job that keeps asking runs 5 times and fails "Exceeded max response correction
    retries (4)" with the last signal as cause."""
    twice = _Flaky(
        workflow("u", "wf"),
        [errors.ResponseCorrectionRetry("fix a"), errors.ResponseCorrectionRetry("fix b")],
    )
    assert await dispatcher.submit(twice).result() == "answer after 3"
    await settle()
    assert recorder.names(twice.job_id) == [
        "JobScheduled",
        "JobStartedEvent",
        "ResponseCorrectionRetryEvent",
        "JobStartedEvent",
        "ResponseCorrectionRetryEvent",
        "JobStartedEvent",
        "JobCompletedEvent",
        "WorkflowCompleteEvent",
    ]
    signals = [errors.ResponseCorrectionRetry(f"fix {i}") for i in range(5)]
    always = _Flaky(workflow("u", "wf"), list(signals))
    with pytest.raises(
        errors.UncorrectableError, match=r"Exceeded max response correction retries \(4\)"
    ) as info:
        await dispatcher.submit(always).result()
    assert always.runs == 5
    assert info.value.__cause__ is signals[-1]


async def test_a_truncation_reruns_once_and_a_second_says_which(dispatcher: JobDispatcher) -> None:
    """EXEC-17: one truncation gives two executions; a second on the same model says it "rebuilt
    its conversation", on another model "after failover from <first>"."""
    once = _Flaky(workflow("u", "wf"), [errors.OutputTruncationRetry("cut", model="m1")])
    assert await dispatcher.submit(once).result() == "answer after 2"
    same = _Flaky(
        workflow("u", "wf"),
        [
            errors.OutputTruncationRetry("cut", model="m1"),
            errors.OutputTruncationRetry("cut", model="m1"),
        ],
    )
    with pytest.raises(errors.UncorrectableError, match="rebuilt its conversation"):
        await dispatcher.submit(same).result()
    moved = _Flaky(
        workflow("u", "wf"),
        [
            errors.OutputTruncationRetry("cut", model="big"),
            errors.OutputTruncationRetry("cut", model="small"),
        ],
    )
    with pytest.raises(errors.UncorrectableError, match="after failover from big"):
        await dispatcher.submit(moved).result()


async def test_cancel_workflow_cancels_its_running_jobs(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-18, OBS-06: cancel_workflow answers how many it cancelled (0 for an unknown workflow);
    the caller's chain holds JobCancelledError and JobCancelled says "Workflow cancelled: <reason>"."""

    async def loop(ctx: JobContext) -> None:
        while True:
            ctx.check_cancellation()
            await trio.sleep(0.1)

    job = Fn(workflow("u", "wf"), loop)
    handle = dispatcher.submit(job)
    await trio.sleep(1)
    assert dispatcher.cancel_workflow("nope", "x") == 0
    assert dispatcher.cancel_workflow(job.workflow_id, "user left") == 1
    with pytest.raises(errors.JobCancelledError):
        await handle.result()
    await settle()
    (cancelled,) = [e for e in recorder.of(job.job_id) if isinstance(e, ev.JobCancelled)]
    assert cancelled.message == "Workflow cancelled: user left"


async def test_the_handle_cancel_is_the_cooperative_cancel(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-19, ST-08, TMO-02: handle.cancel answers True for a running job and the caller gets
    JobCancelledError caused by CancellationRequested; after settling it answers False."""

    async def loop(ctx: JobContext) -> None:
        while True:
            ctx.check_cancellation()
            await trio.sleep(0.1)

    job = Fn(workflow("u", "wf"), loop)
    handle = dispatcher.submit(job)
    await trio.sleep(1)
    assert handle.cancel() is True
    with pytest.raises(errors.JobCancelledError) as info:
        await handle.result()
    assert not info.value.correctable
    assert isinstance(info.value.__cause__, errors.CancellationRequested)
    assert job.context.state is JobState.CANCELLED
    assert handle.cancel() is False


async def test_a_job_that_ignores_its_token_still_ends_cancelled(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """ST-06, ST-07: a cancelled job that returns normally, or fails on its own afterwards,
    settles with JobCancelledError and ends CANCELLED with no illegal-transition error."""
    for fails in (False, True):

        async def ignore(ctx: JobContext, fails: bool = fails) -> str:
            await trio.sleep(2)
            if fails:
                raise ValueError("own failure")
            return "done anyway"

        job = Fn(workflow("u", "wf"), ignore)
        handle = dispatcher.submit(job)
        await trio.sleep(1)
        assert dispatcher.cancel(job.job_id, "stop") is True
        with trio.fail_after(5):
            with pytest.raises(errors.JobCancelledError) as info:
                await handle.result()
        assert "illegal state transition" not in repr(info.value.__cause__)
        assert job.context.state is JobState.CANCELLED


async def test_a_cancellation_survives_a_catch_all(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """ST-09: a doer funnelling check_cancellation through a catch-all with unwrap still ends
    CANCELLED, the caller seeing JobCancelledError over CancellationRequested."""

    class Funnel(Doer[str]):
        async def execute(self, context: JobContext) -> str:
            while True:
                try:
                    context.check_cancellation()
                    await trio.sleep(0.5)
                except Exception as exc:
                    raise errors.unwrap(RuntimeError("wrapped", exc)) from exc

    job = Funnel(workflow("u", "wf"))
    handle = dispatcher.submit(job)
    await trio.sleep(1)
    dispatcher.cancel(job.job_id, "enough")
    with pytest.raises(errors.JobCancelledError) as info:
        await handle.result()
    assert isinstance(info.value.__cause__, errors.CancellationRequested)
    assert job.context.state is JobState.CANCELLED


async def test_waiting_while_holding_resources_is_a_deadlock_error(
    dispatcher: JobDispatcher,
) -> None:
    """JobHandle.result refuses a caller that holds resources with JobDeadlockError naming both
    jobs and the call site; an orchestrator waits freely (CTX-13 inside a job)."""
    gate = CountingGate("slot", 2)
    wf = workflow("u", "wf")
    other = dispatcher.submit(Echo(wf, "other"))

    async def wait_holding(ctx: JobContext) -> str:
        assert current_job() is ctx
        with pytest.raises(errors.JobDeadlockError) as info:
            await other.result()
        assert ctx.job_id in str(info.value) and other.job_id in str(info.value)
        assert "test_dispatch_attempt.py" in info.value.call_site
        return "refused"

    assert (
        await dispatcher.submit(Fn(wf, wait_holding, requirements=gated(gate))).result()
        == "refused"
    )

    class Waits(Orchestrator[str]):
        async def execute(self, context: JobContext) -> str:
            assert current_job() is context
            assert not context.is_executing_job_with_resources
            return str(await other.result())

    assert await dispatcher.submit(Waits(wf)).result() == "other"
    assert current_job() is None


async def test_teardown_releases_recorded_calls_before_the_handle_settles(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """EXEC-22, OBS-11: the recorded LLM responses are cleared from the context before the handle
    settles and live on only on the terminal event; the job has left the running set."""

    async def call_model(ctx: JobContext) -> str:
        ctx.record_llm_response({"model": "m1", "text": "hi"})
        return "answered"

    job = Fn(workflow("u", "wf"), call_model)
    handle = dispatcher.submit(job)
    assert await handle.result() == "answered"
    assert job.context.llm_responses == []
    assert job.job_id not in dispatcher._running and job.job_id not in dispatcher._live
    await settle()
    (completed,) = [e for e in recorder.of(job.job_id) if isinstance(e, ev.JobCompletedEvent)]
    assert completed.llm_responses == ({"model": "m1", "text": "hi"},)
    assert completed.result == "answered" and completed.attempts == 1


async def test_a_parked_job_reports_its_waits_and_limiter_events(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """EVT-11, CTX-12: a job that waited for a slot carries its snapshot on every limiter event and
    its wait under wait_times and admission_wait_ms."""
    gate = CountingGate("slot", 1)
    first = Echo(workflow("u", "wf"), sleep=2.0, requirements=gated(gate))
    second = Echo(workflow("u", "wf"), requirements=gated(gate))
    h1 = dispatcher.submit(first)
    await settle()
    h2 = dispatcher.submit(second)
    await h1.result()
    await h2.result()
    await settle()
    assert second.context.metadata["admission_wait_ms"] >= 1900
    assert second.context.metadata["wait_times"]["slot"] >= 1900
    limiter_events = [
        e for e in recorder.of(second.job_id, limiter=True) if isinstance(e, ev.LimiterEvent)
    ]
    kinds = [e.type.value for e in limiter_events]
    assert kinds == ["HELD", "GRANTED_FROM_HOLD", "RELEASED"]
    assert all(
        e.snapshot is not None and e.snapshot.job_id == second.job_id for e in limiter_events
    )
