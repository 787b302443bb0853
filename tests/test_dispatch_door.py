"""The door, routing and the dispatcher's life (SUB, ROUTE)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import (
    OBS_CALLER_CLASS,
    DispatcherConfig,
    JobDispatcher,
    grace_period,
    open_dispatcher,
)
from nucleo_trio.dispatch.attempt import JobRun
from nucleo_trio.jobs import (
    JobContext,
    JobRequirements,
    JobState,
    Orchestrator,
    Tool,
    workflow,
)

from .conftest import Recorder, settle
from .jobs_for_tests import Echo, Fn, naps


async def test_submit_before_start_is_refused() -> None:
    """SUB-14: any submit before start raises RuntimeError."""
    d = JobDispatcher()
    with pytest.raises(RuntimeError, match="not started"):
        d.submit(Echo(workflow("u", "wf")))


async def test_second_start_is_a_noop_with_a_warning(nursery: trio.Nursery) -> None:
    """SUB-14: a second start warns, does not throw, and the dispatcher keeps running."""
    d = JobDispatcher()
    await nursery.start(d.run)
    with pytest.warns(RuntimeWarning, match="already started"):
        await nursery.start(d.run)
    assert d.is_running
    handle = d.submit(Echo(workflow("u", "wf"), 5))
    assert await handle.result() == 5
    await d.shutdown()
    assert not d.is_running


async def test_a_plain_job_submitting_from_inside_is_born_failed(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """SUB-01, SUB-02, SUB-03: a non-orchestrator that submits gets a born-failed handle; the refused
    job publishes JobFailedEvent and never JobScheduled."""
    children: list[Any] = []

    async def submit_child(ctx: JobContext) -> str:
        child = Echo(ctx.job)
        children.append(child)
        handle = ctx.dispatcher.submit(child)
        assert handle.done  # born failed: settled before submit returns
        with pytest.raises(errors.NucleoSystemError, match="Only orchestrators may submit"):
            await handle.result()
        return "parent done"

    parent = Fn(workflow("u", "wf"), submit_child)
    assert await dispatcher.submit(parent).result() == "parent done"
    await settle()
    (child,) = children
    names = recorder.names(child.job_id)
    assert names == ["JobFailedEvent"]
    assert child.context.state is JobState.FAILED


async def test_a_refused_root_publishes_a_failed_workflow(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """SUB-02, SUB-08: a resourceful job with no timeout is refused at the door: JobFailedEvent then
    WorkflowCompleteEvent(false), never JobScheduled."""
    gate = CountingGate("db", 1)
    job = Echo(
        workflow("u", "wf"),
        requirements=lambda: JobRequirements().require_rate_limiter(gate),
        timeout=None,
    )
    handle = dispatcher.submit(job)
    with pytest.raises(errors.NucleoSystemError, match="no timeout"):
        await handle.result()
    await settle()
    assert recorder.names(job.job_id) == ["JobFailedEvent", "WorkflowCompleteEvent"]
    (wf,) = [e for e in recorder.of(job.job_id) if isinstance(e, ev.WorkflowCompleteEvent)]
    assert wf.successful is False
    assert job.runs == 0


async def test_outside_code_cannot_name_a_live_job_as_parent(dispatcher: JobDispatcher) -> None:
    """SUB-04: code outside any job naming a live job as parent gets "may only create new roots"."""
    release = trio.Event()

    async def wait(ctx: JobContext) -> str:
        await release.wait()
        return "done"

    parent = Fn(workflow("u", "wf"), wait, timeout=None)
    parent_handle = dispatcher.submit(parent)
    await settle()
    orphan = Echo(parent)
    with pytest.raises(errors.NucleoSystemError, match="may only create new roots"):
        await dispatcher.submit(orphan).result()
    release.set()
    assert await parent_handle.result() == "done"


class _Fanout(Orchestrator[Any]):
    def __init__(self, parent: Any, make_child: Any) -> None:
        super().__init__(parent)
        self.make_child = make_child

    async def execute(self, context: JobContext) -> Any:
        handle = self.submit(self.make_child(self))
        return await handle.result()


async def test_an_orchestrator_may_only_parent_from_its_own_task(dispatcher: JobDispatcher) -> None:
    """SUB-05: an orchestrator naming another live job as parent gets "runs on the thread of"."""
    release = trio.Event()

    async def wait(ctx: JobContext) -> str:
        await release.wait()
        return "other"

    other = Fn(workflow("u", "wf"), wait, timeout=None)
    other_handle = dispatcher.submit(other)
    await settle()
    fan = _Fanout(workflow("u", "wf2"), lambda me: Echo(other))
    with pytest.raises(errors.NucleoSystemError, match="runs on the thread of"):
        await dispatcher.submit(fan).result()
    # from its own task it may: the same orchestrator shape with itself as parent runs
    ok = _Fanout(workflow("u", "wf3"), lambda me: Echo(me, "child"))
    assert await dispatcher.submit(ok).result() == "child"
    release.set()
    await other_handle.result()


async def test_a_dependency_cycle_is_refused_naming_it(dispatcher: JobDispatcher) -> None:
    """SUB-09: a dependency list that closes a cycle raises ValueError at submit, naming the job."""
    wf = workflow("u", "wf")
    a = Echo(wf, "a")
    b = Echo(wf, "b")
    handle_b = dispatcher.submit(b, [a])  # b waits for a, which is not submitted yet
    with pytest.raises(ValueError, match="Cycle detected") as info:
        dispatcher.submit(a, [handle_b])
    assert a.job_id in str(info.value)
    dispatcher.cancel(b.job_id, "test over")
    with pytest.raises(errors.JobCancelledError):
        await handle_b.result()


async def test_requirements_are_captured_once_at_submit_and_once_per_attempt(
    dispatcher: JobDispatcher,
) -> None:
    """SUB-10: a job with one attempt sees exactly two requirements() calls."""
    job = Echo(workflow("u", "wf"))
    await dispatcher.submit(job).result()
    assert job.requirement_calls == 2


async def test_initial_metadata_is_on_the_first_schedule_event(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """SUB-11, OBS-10: metadata handed to submit is on JobScheduled's snapshot; the event carries
    QUEUED, the requirements and the priority."""
    job = Echo(workflow("u", "wf"))
    job.priority = 3
    await dispatcher.submit(job, metadata={"ticket": "T-1"}).result()
    await settle()
    scheduled = recorder.of(job.job_id)[0]
    assert isinstance(scheduled, ev.JobScheduled)
    assert scheduled.snapshot is not None
    assert scheduled.snapshot.metadata["ticket"] == "T-1"
    assert scheduled.snapshot.state is JobState.QUEUED
    assert scheduled.priority == 3
    assert isinstance(scheduled.requirements, JobRequirements)


async def test_a_child_carries_its_callers_class(dispatcher: JobDispatcher) -> None:
    """SUB-12: a submission from inside a job stamps the caller's qualified class name."""
    seen: list[Any] = []

    def make(me: Any) -> Any:
        child = Echo(me, "c")
        seen.append(child)
        return child

    await dispatcher.submit(_Fanout(workflow("u", "wf"), make)).result()
    (child,) = seen
    assert (
        child.context.metadata[OBS_CALLER_CLASS] == f"{_Fanout.__module__}.{_Fanout.__qualname__}"
    )
    root = Echo(workflow("u", "wf"))
    await dispatcher.submit(root).result()
    assert OBS_CALLER_CLASS not in root.context.metadata


async def test_submit_with_delay_submits_a_root_after_the_delay(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """SUB-13: the handle arrives after at least the delay; zero means at once; a delayed child of a
    live job is refused since the delayed submit runs outside any job."""
    start = trio.current_time()
    delayed = dispatcher.submit_with_delay(Echo(workflow("u", "wf"), "late"), 2.5)
    handle = await delayed.handle()
    assert trio.current_time() - start >= 2.5
    assert await handle.result() == "late"

    now = dispatcher.submit_with_delay(Echo(workflow("u", "wf"), "now"), 0)
    before = trio.current_time()
    assert await (await now.handle()).result() == "now"
    assert trio.current_time() == before

    release = trio.Event()

    async def wait(ctx: JobContext) -> str:
        await release.wait()
        return "p"

    parent = Fn(workflow("u", "wf"), wait, timeout=None)
    parent_handle = dispatcher.submit(parent)
    child_delayed = dispatcher.submit_with_delay(Echo(parent), 1)
    child_handle = await child_delayed.handle()
    with pytest.raises(errors.NucleoSystemError, match="may only create new roots"):
        await child_handle.result()
    release.set()
    await parent_handle.result()


def test_grace_period_is_ten_percent_clamped() -> None:
    """ROUTE-05: 10 % of the timeout, within [0.5 s, 30 s]."""
    assert grace_period(1.0) == 0.5
    assert grace_period(100.0) == 10.0
    assert grace_period(600.0) == 30.0
    assert grace_period(7.0) == pytest.approx(0.7)


def test_the_priority_order_is_priority_then_submission() -> None:
    """ROUTE-03: the higher priority first, then the earlier submission; priority outranks order."""
    wf = workflow("u", "wf")

    def queued(priority: int) -> JobRun:
        job = Echo(wf)
        job.priority = priority
        return JobRun(job, None, None, (), None)  # type: ignore[arg-type]

    first_low, high, second_low = queued(1), queued(9), queued(1)
    order = sorted([second_low, first_low, high], key=JobRun.sort_key)
    assert order == [high, first_low, second_low]


async def test_routing_sends_short_timeouts_to_the_priority_lane(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ROUTE-01, ROUTE-02, ROUTE-03: timeout <= 5 s enters the priority lane and is served by
    priority then submission order; others enter the FIFO lane; queueing off runs at once."""
    order: list[str] = []

    async def note(ctx: JobContext) -> None:
        order.append(ctx.job.job_id.split("-")[0])

    async with open_dispatcher(DispatcherConfig(seed=1)) as d:
        wf = workflow("u", "wf")
        jobs = []
        for prefix, prio, timeout in [
            ("lowA", 1, 5.0),
            ("high", 9, 2.0),
            ("lowB", 1, 5.0),
            ("slow", 9, 60.0),
        ]:
            job = Fn(wf, note, timeout=timeout, prefix=prefix)
            job.priority = prio
            jobs.append(job)
        now = Fn(wf, note, requirements=lambda: JobRequirements().without_queueing(), prefix="now")
        handles = [d.submit(j) for j in jobs]
        assert d.queued_jobs == (1, 3)  # (standard, fast) before the lane tasks run
        handles.append(d.submit(now))
        for h in handles:
            await h.result()
    fast = [p for p in order if p in {"lowA", "high", "lowB"}]
    assert fast == ["high", "lowA", "lowB"]
    assert set(order) == {"lowA", "high", "lowB", "slow", "now"}


async def test_a_job_taken_out_of_a_queue_is_settled_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EXEC-21, OBS-06: a queued job removed by cancel ends CANCELLED; its caller gets
    JobCancelledError whose cause says "Cancelled while queued"; JobCancelled carries the
    remover's message and WorkflowCompleteEvent(false) follows."""
    async with open_dispatcher() as d:
        rec = Recorder()
        d.bus.subscribe(rec)
        job = Echo(workflow("u", "wf"))
        handle = d.submit(job)  # still in the lane: its server has not run yet
        assert d.cancel(job.job_id, "no longer needed") is True
        with pytest.raises(errors.JobCancelledError) as info:
            await handle.result()
        assert isinstance(info.value.__cause__, errors.CancellationRequested)
        assert "Cancelled while queued" in str(info.value.__cause__)
        assert job.context.state is JobState.CANCELLED
        assert job.runs == 0
        await settle()
        names = rec.names(job.job_id)
        assert names == ["JobScheduled", "JobCancelled", "WorkflowCompleteEvent"]
        cancelled = rec.of(job.job_id)[1]
        assert isinstance(cancelled, ev.JobCancelled)
        assert cancelled.message == "Cancelled while queued: no longer needed"
        assert d.cancel(job.job_id, "again") is False


async def test_a_second_start_inside_open_dispatcher_and_shutdown_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SUB-14: is_running is true while started and false after shutdown; shutdown publishes the
    scheduler's STOPPING and STOPPED."""
    rec = Recorder()
    async with open_dispatcher() as d:
        d.bus.subscribe(rec)
        assert d.is_running
    assert not d.is_running
    kinds = [e.type for e in rec.typed(ev.SchedulerEvent)]
    assert kinds == [ev.SchedulerEventType.STOPPING, ev.SchedulerEventType.STOPPED]


class _Holder(Tool[str]):
    def __init__(self, parent: Any, gate: CountingGate) -> None:
        super().__init__(parent)
        self.gate = gate
        self.timeout = 600.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.gate)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(1000)
        return "held"


async def test_shutdown_refuses_parked_waiters_interrupts_the_rest_and_stops_the_bus(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Shutdown in the seed's order: parked waiters refused, running jobs interrupted after the
    timeout and settled as forcefully cancelled, the bus stopped last."""
    gate = CountingGate("slot", 1)
    rec = Recorder()
    async with open_dispatcher() as d:
        d.bus.subscribe(rec)
        running = d.submit(_Holder(workflow("u", "a"), gate))
        parked = d.submit(_Holder(workflow("u", "b"), gate))
        await settle()
        assert d.admission.queue_size == 1
        start = trio.current_time()
        await d.shutdown(timeout=5)
        assert trio.current_time() - start == pytest.approx(5)
    with pytest.raises(errors.UncorrectableError, match="shutting down"):
        await parked.result()
    with pytest.raises(errors.JobCancelledError):
        await running.result()
    assert gate.in_use == 0
    forced = [
        e for e in rec.typed(ev.JobCancelled) if e.snapshot and e.snapshot.job_id == running.job_id
    ]
    assert forced and forced[0].message == "Job forcefully cancelled"


async def test_a_job_still_queued_at_shutdown_is_settled_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job submitted just before shutdown() is settled CANCELLED "Cancelled by shutdown",
    never started into a closed admission."""
    rec = Recorder()
    async with open_dispatcher() as d:
        d.bus.subscribe(rec)
        job = Echo(workflow("u", "wf"))
        handle = d.submit(job)
        await d.shutdown()
    with pytest.raises(errors.JobCancelledError):
        await handle.result()
    assert job.runs == 0
    assert job.context.state is JobState.CANCELLED
    (cancelled,) = [
        e for e in rec.typed(ev.JobCancelled) if e.snapshot and e.snapshot.job_id == job.job_id
    ]
    assert cancelled.message == "Cancelled by shutdown"


class _StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_lanes_wake_when_offered_and_never_poll(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """ROUTE-04 (replaced, per spec/README): no lane polls. A queued job starts at the instant it
    is offered, and an idle dispatcher runs no task at all while a minute passes."""
    started: list[float] = []

    async def note(ctx: JobContext) -> None:
        started.append(trio.current_time())

    await trio.sleep(3.0)
    at = trio.current_time()
    await dispatcher.submit(Fn(workflow("u", "wf"), note)).result()
    assert started == [at]
    await settle()
    counter = _StepCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        await trio.sleep(60)
    finally:
        trio.lowlevel.remove_instrument(counter)
    # the test task itself wakes once; the bus's stale sweep runs once a minute (BUS-10)
    assert counter.steps <= 3


# -- hostile knobs at the door (item 8) ----------------------------------------------------------


def _bypassed(setting: str, value: Any, how: str) -> Fn:
    """A job whose ``setting`` reads ``value`` although assignment refuses it: the ways a value
    can reach the door past the setters."""
    if how == "class attribute replaced":
        cls = type("Bypassed", (Fn,), {})
        job = cls(workflow("u", "wf"), _count_run, timeout=60.0)
        setattr(cls, setting, value)  # after the class was made: __init_subclass__ never sees it
        return job
    if how == "property":
        # a property of the subclass's own, which ignores what Fn.__init__ writes
        hostile = property(lambda self: value, lambda self, written: None)
        cls = type("Bypassed", (Fn,), {setting: hostile})
        return cls(workflow("u", "wf"), _count_run)
    job = Fn(workflow("u", "wf"), _count_run, timeout=60.0)
    slot = {"timeout": "_nucleo_timeout", "priority": "_nucleo_priority"}[setting]
    object.__setattr__(job, slot, value)  # written past the setter
    return job


async def _count_run(ctx: JobContext) -> str:
    return "ran"


BYPASSES = [
    ("timeout", float("nan"), "class attribute replaced", "timeout must be positive"),
    ("timeout", -1.0, "past the setter", "timeout must be positive"),
    ("timeout", "10", "property", "timeout must be positive"),
    ("priority", "high", "property", "priority must be an int"),
    ("priority", 2**70, "past the setter", "priority must be between"),
]


async def _a_timer_due_first(dispatcher: JobDispatcher) -> tuple[Any, float]:
    """A job whose 10 s deadline is due before anything the hostile job could arm."""
    stuck = Fn(workflow("u", "wf"), naps(100), timeout=10.0)
    return dispatcher.submit(stuck), trio.current_time()


async def test_a_nan_deadline_never_reaches_the_timekeeper(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """Item 8: a NaN timeout that bypassed the setters used to kill the timekeeper (and with it
    every job's timeout) when another timer was due first. The NaN fails only its own job, naming
    the value; the other job still times out at its deadline and the dispatcher keeps serving."""
    other, start = await _a_timer_due_first(dispatcher)
    await settle()
    hostile = _bypassed("timeout", float("nan"), "class attribute replaced")
    hostile_handle = dispatcher.submit(hostile)
    with pytest.raises(Exception) as failed:  # noqa: PT011 - the door's refusal, or the keeper's
        await hostile_handle.result()
    assert "nan" in " ".join(_chain_messages(failed.value))
    with pytest.raises(errors.JobTimeoutError):
        await other.result()
    assert trio.current_time() - start == pytest.approx(10 + grace_period(10))  # phase two
    assert await dispatcher.submit(Echo(workflow("u", "wf"), 5)).result() == 5


async def test_wired_door_refuses_bypassed_knobs_born_failed(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """SUB-01, SUB-02: a job whose timeout or priority reads a hostile value (it bypassed the
    setters) is refused at the door: a handle born failed whose error names the setting and the
    value, JobFailedEvent and WorkflowCompleteEvent(false), never JobScheduled, nothing registered,
    never run; a job with a timer due meanwhile times out on time and the dispatcher keeps serving.

    Needs ``check_job_settings`` called by ``JobDispatcher.submit`` (the door)."""
    other, start = await _a_timer_due_first(dispatcher)
    await settle()
    for setting, value, how, says in BYPASSES:
        job = _bypassed(setting, value, how)
        handle = dispatcher.submit(job)
        assert handle.done, (setting, value, how)
        assert job.job_id not in dispatcher._live
        with pytest.raises(Exception) as failed:  # noqa: PT011 - wrapped or bare, see below
            await handle.result()
        messages = " ".join(_chain_messages(failed.value))
        assert f"Bypassed.{setting}" in messages or f"Fn.{setting}" in messages, messages
        assert says in messages and job.job_id in messages
        assert any(isinstance(e, TypeError | ValueError) for e in _chain(failed.value))
        await settle()
        assert recorder.names(job.job_id) == ["JobFailedEvent", "WorkflowCompleteEvent"]
        assert job.runs == 0
    with pytest.raises(errors.JobTimeoutError):
        await other.result()
    assert trio.current_time() - start == pytest.approx(10 + grace_period(10))  # phase two
    assert await dispatcher.submit(Echo(workflow("u", "wf"), 5)).result() == 5


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _chain_messages(error: BaseException) -> list[str]:
    return [str(e) for e in _chain(error)]
