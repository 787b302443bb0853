"""JobContext on its own: state transitions, cancellation, deadlines, progress, waits and
dependencies (spec A.7 ST-01..05 and ST-10's context side, A.8 CTX-01..14)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from nucleo_trio.bus.events import JobEvent, JobProgressEvent, Severity, UserNotificationEvent
from nucleo_trio.errors import CancellationRequested, LLMReadableError, UncorrectableError, unwrap
from nucleo_trio.jobs import (
    META_ADMISSION_WAIT_MS,
    META_WAIT_TIMES,
    AbstractJob,
    CancellationToken,
    JobContext,
    JobSnapshot,
    JobState,
    current_job,
    workflow,
)


class Plain(AbstractJob[Any]):
    async def execute(self, context: JobContext) -> Any:
        return None


def make_context(events: list[JobEvent] | None = None) -> JobContext:
    job = Plain(workflow("alice", "wf"))
    return JobContext(job, "alice", publish=None if events is None else events.append)


class Counter:
    """Counts how often each named callback ran."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def callback(self, name: str) -> Callable[[], None]:
        self.runs.setdefault(name, 0)

        def run() -> None:
            self.runs[name] += 1

        return run


async def checkpoints(count: int) -> None:
    """Yield to the scheduler ``count`` times, so racing tasks interleave differently."""
    for _ in range(count):
        await trio.lowlevel.checkpoint()


# -- CTX-01 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("user", [None, "", "  \t"])
def test_a_blank_user_is_refused(user: Any) -> None:
    """CTX-01: a context for a missing or blank user is refused with ValueError naming the user."""
    with pytest.raises(ValueError, match="user id"):
        JobContext(Plain(workflow("alice", "wf")), user)


# -- ST-01..05: state transitions -----------------------------------------------------------------


async def complete_after(context: JobContext, delay: int, order: list[str]) -> None:
    await checkpoints(delay)
    context.complete("done")
    order.append("complete")


async def cancel_after(context: JobContext, delay: int, order: list[str]) -> None:
    await checkpoints(delay)
    context.cancel("racing")
    order.append("cancel")


async def test_cancel_racing_completion_yields_one_terminal_state() -> None:
    """ST-01, ST-03: over 2000 rounds of complete() racing cancel() across checkpoints, neither
    raises, the first terminal transition wins, and completed_at is always set."""
    rng = random.Random(2000)
    winners: set[JobState] = set()
    for _ in range(2000):
        context = make_context()
        context.set_state(JobState.RUNNING)
        order: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(complete_after, context, rng.randrange(3), order)
            nursery.start_soon(cancel_after, context, rng.randrange(3), order)
        winner = JobState.COMPLETED if order[0] == "complete" else JobState.CANCELLED
        assert context.state is winner
        assert context.completed_at is not None
        assert context.is_cancelled
        winners.add(winner)
    assert winners == {JobState.COMPLETED, JobState.CANCELLED}  # both sides did win some rounds


@pytest.mark.parametrize("terminal", [JobState.COMPLETED, JobState.FAILED, JobState.TIMED_OUT])
def test_cancel_after_a_terminal_state_changes_nothing_but_the_flag(terminal: JobState) -> None:
    """ST-02: cancel() after COMPLETED, FAILED or TIMED_OUT does not raise and keeps the state,
    but is_cancelled turns true."""
    context = make_context()
    context.set_state(JobState.RUNNING)
    context.set_state(terminal)
    ended = context.completed_at
    context.cancel("too late")
    assert context.state is terminal
    assert context.is_cancelled
    assert context.completed_at == ended


def test_completion_after_cancel_keeps_cancelled() -> None:
    """ST-03: complete() after cancel() does not raise and the state stays CANCELLED."""
    context = make_context()
    context.set_state(JobState.RUNNING)
    assert context.cancel("stop")
    assert context.state is JobState.CANCELLED
    assert context.complete("finished anyway") is False
    assert context.state is JobState.CANCELLED
    assert context.completed_at is not None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (JobState.COMPLETED, JobState.FAILED),
        (JobState.CANCELLED, JobState.COMPLETED),
        (JobState.FAILED, JobState.TIMED_OUT),
        (JobState.TIMED_OUT, JobState.CANCELLED),
    ],
)
def test_the_explicit_setter_refuses_a_second_terminal(first: JobState, second: JobState) -> None:
    """ST-04: set_state() into a second terminal state raises "illegal state transition"."""
    context = make_context()
    context.set_state(first)
    with pytest.raises(RuntimeError, match="illegal state transition"):
        context.set_state(second)
    assert context.state is first


def test_try_transition_answers_instead_of_raising() -> None:
    """try_transition moves an active job and answers False, without raising, for a terminal one."""
    context = make_context()
    assert context.try_transition(JobState.SCHEDULED)
    assert context.try_transition(JobState.FAILED)
    assert not context.try_transition(JobState.COMPLETED)
    assert context.state is JobState.FAILED


@pytest.mark.parametrize("before", [JobState.QUEUED, JobState.SCHEDULED])
def test_a_progress_report_upgrades_to_running_once(before: JobState) -> None:
    """ST-05: publish() moves a QUEUED or SCHEDULED job to RUNNING, once."""
    context = make_context()
    if before is not JobState.QUEUED:
        context.set_state(before)
    context.publish("step 1", 10)
    assert context.state is JobState.RUNNING
    started = context.started_at
    assert started is not None
    context.publish("step 2", 20)
    assert context.state is JobState.RUNNING
    assert context.started_at == started


@pytest.mark.parametrize(
    "terminal", [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT]
)
def test_a_progress_report_never_leaves_a_terminal_state(terminal: JobState) -> None:
    """ST-05: after a terminal state publish() changes nothing: no state, no progress, no event."""
    events: list[JobEvent] = []
    context = make_context(events)
    context.publish("working", 40)
    context.set_state(terminal)
    events.clear()
    context.publish("ghost", 90)
    assert context.state is terminal
    assert (context.progress_percent, context.progress_message) == (40, "working")
    assert events == []


# -- CTX-02..04, ST-10: cancellation ---------------------------------------------------------------


async def test_cancel_callbacks_run_once_and_at_once_when_registered_late() -> None:
    """CTX-02: on_cancel callbacks run once however many times cancel() is called; one registered
    after the cancel runs at once; is_cancelled is then true and check_cancellation raises
    CancellationRequested whose LLM message says "cancelled"."""
    context = make_context()
    counter = Counter()
    context.on_cancel(counter.callback("early"))
    context.check_cancellation()
    assert not context.is_cancelled
    assert context.cancel("user asked")
    assert not context.cancel("again")
    context.cancel("and again")
    context.on_cancel(counter.callback("late"))
    assert counter.runs == {"early": 1, "late": 1}
    assert context.is_cancelled
    assert context.cancel_reason == "user asked"
    with pytest.raises(CancellationRequested) as info:
        context.check_cancellation()
    assert "cancelled" in info.value.llm_message


def test_a_cancellation_is_an_uncorrectable_llm_readable_error_with_the_reason() -> None:
    """ST-10: what check_cancellation raises is LLM-readable, not correctable, carries the
    cancel reason in its LLM message, and unwrap of an error caused by it returns the same
    instance."""
    context = make_context()
    context.cancel("the user closed the tab")
    with pytest.raises(CancellationRequested) as info:
        context.check_cancellation()
    signal = info.value
    assert isinstance(signal, LLMReadableError)
    assert isinstance(signal, UncorrectableError)
    assert not signal.correctable
    assert "the user closed the tab" in signal.llm_message
    wrapper = RuntimeError("a catch-all caught it")
    wrapper.__cause__ = signal
    assert unwrap(wrapper) is signal


def test_a_callback_registered_while_the_firing_is_under_way_runs_once() -> None:
    """CTX-03: a callback registered from inside a firing callback is run once, by its registrar,
    and a later cancel() does not run it again."""
    context = make_context()
    counter = Counter()
    nested = counter.callback("nested")

    def registrar() -> None:
        context.on_cancel(nested)
        assert counter.runs["nested"] == 1  # run at once, by this very registration

    context.on_cancel(registrar)
    context.cancel("first")
    context.cancel("second")
    assert counter.runs == {"nested": 1}


async def register_cancel_after(
    context: JobContext, delay: int, callback: Callable[[], None], late: list[bool]
) -> None:
    await checkpoints(delay)
    late.append(context.is_cancelled)
    context.on_cancel(callback)


async def test_cancel_callbacks_racing_the_firing_run_each_exactly_once() -> None:
    """CTX-04: eight registrars racing one cancel across checkpoints, over 100 rounds: every
    callback runs exactly once."""
    rng = random.Random(4)
    late: list[bool] = []
    for _ in range(100):
        context = make_context()
        counter = Counter()
        async with trio.open_nursery() as nursery:
            for i in range(8):
                callback = counter.callback(f"r{i}")
                nursery.start_soon(register_cancel_after, context, rng.randrange(4), callback, late)
            nursery.start_soon(cancel_after, context, rng.randrange(4), [])
        context.cancel("again")
        assert counter.runs == {f"r{i}": 1 for i in range(8)}
    assert set(late) == {False, True}  # registrations landed both before and after the firing


def test_a_raising_callback_does_not_stop_the_others() -> None:
    """A cancel callback that raises is logged; the others still run and cancel() raises nothing."""
    context = make_context()
    counter = Counter()

    def broken() -> None:
        raise ValueError("callback broke")

    context.on_cancel(counter.callback("before"))
    context.on_cancel(broken)
    context.on_cancel(counter.callback("after"))
    assert context.cancel("go")
    assert counter.runs == {"before": 1, "after": 1}


def test_an_unregistered_cancel_callback_never_runs() -> None:
    """The function on_cancel returns unregisters the callback before the cancel."""
    context = make_context()
    counter = Counter()
    unregister = context.on_cancel(counter.callback("gone"))
    context.on_cancel(counter.callback("kept"))
    unregister()
    unregister()  # a second unregister is harmless
    context.cancel("go")
    assert counter.runs == {"gone": 0, "kept": 1}


# -- CTX-05..08: deadlines and timeout callbacks ---------------------------------------------------


async def test_timeout_callbacks_run_once_after_the_deadline_and_at_once_when_late(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """CTX-05: once a 1 ms deadline has passed, on_timeout runs its callback at once, a callback
    it registers runs once, and is_timed_out is true; one registered before the deadline runs
    once, at the first observation."""
    context = make_context()
    counter = Counter()
    context.arm_deadline(0.001)
    context.on_timeout(counter.callback("early"))
    assert not context.is_timed_out
    assert counter.runs["early"] == 0
    await trio.sleep(0.01)

    nested = counter.callback("nested")

    def late() -> None:
        counter.runs.setdefault("late", 0)
        counter.runs["late"] += 1
        context.on_timeout(nested)

    context.on_timeout(late)
    assert counter.runs == {"early": 1, "late": 1, "nested": 1}
    assert context.is_timed_out
    assert context.is_timed_out
    assert counter.runs == {"early": 1, "late": 1, "nested": 1}
    assert context.pending_timeout_callbacks == 0


async def test_a_timeout_callback_registered_while_the_firing_is_under_way_runs_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """CTX-05: a timeout callback registered from inside a firing timeout callback runs once."""
    context = make_context()
    counter = Counter()
    nested = counter.callback("nested")
    context.arm_deadline(0.001)
    context.on_timeout(lambda: context.on_timeout(nested))
    await trio.sleep(0.01)
    assert context.is_timed_out
    assert context.is_timed_out
    assert counter.runs == {"nested": 1}


async def test_a_completed_job_never_fires_its_timeout_callbacks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """CTX-06: callbacks registered before complete() never run, even past the deadline; one
    registered after complete() runs 0 times and is not queued."""
    context = make_context()
    counter = Counter()
    context.arm_deadline(0.001)
    context.on_timeout(counter.callback("before"))
    context.complete("done")
    await trio.sleep(0.01)
    assert not context.is_timed_out
    context.on_timeout(counter.callback("after"))
    assert counter.runs == {"before": 0, "after": 0}
    assert context.pending_timeout_callbacks == 0


async def test_a_registration_after_complete_past_an_unobserved_deadline_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """CTX-06: even when the deadline passed unobserved before complete(), a later registration
    runs 0 times and leaves no pending timeout callback."""
    context = make_context()
    counter = Counter()
    context.arm_deadline(0.001)
    await trio.sleep(0.01)
    context.complete("just in time")
    context.on_timeout(counter.callback("after"))
    assert counter.runs == {"after": 0}
    assert context.pending_timeout_callbacks == 0
    assert not context.is_timed_out


async def register_timeout_after(
    context: JobContext, delay: float, checks: int, callback: Callable[[], None], late: list[bool]
) -> None:
    await trio.sleep(delay)
    await checkpoints(checks)
    late.append(context.timed_out)  # the flag, read without observing the clock
    context.on_timeout(callback)


async def observe_timeout_after(context: JobContext, delay: float, checks: int) -> None:
    await trio.sleep(delay)
    await checkpoints(checks)
    assert context.is_timed_out


async def test_timeout_callbacks_racing_the_first_observation_run_each_exactly_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """CTX-07: eight registrars racing the first is_timed_out observation around the deadline,
    over 100 rounds: every callback runs exactly once."""
    rng = random.Random(7)
    late: list[bool] = []
    for _ in range(100):
        context = make_context()
        counter = Counter()
        context.arm_deadline(0.001)
        async with trio.open_nursery() as nursery:
            for i in range(8):
                delay = rng.choice([0.0, 0.0005, 0.001, 0.002])
                nursery.start_soon(
                    register_timeout_after,
                    context,
                    delay,
                    rng.randrange(3),
                    counter.callback(f"r{i}"),
                    late,
                )
            nursery.start_soon(observe_timeout_after, context, 0.001, rng.randrange(3))
        assert context.is_timed_out
        assert counter.runs == {f"r{i}": 1 for i in range(8)}
        assert context.pending_timeout_callbacks == 0
    assert set(late) == {False, True}  # registrations landed both before and after the firing


async def test_remaining_time_with_a_deadline(autojump_clock: trio.testing.MockClock) -> None:
    """CTX-08: with a deadline remaining_time counts down and turns negative once it passed."""
    context = make_context()
    context.arm_deadline(5.0)
    assert context.remaining_time == pytest.approx(5.0)
    await trio.sleep(2.0)
    assert context.remaining_time == pytest.approx(3.0)
    assert not context.is_timed_out
    await trio.sleep(4.0)
    remaining = context.remaining_time
    assert remaining is not None and remaining == pytest.approx(-1.0)
    assert context.is_timed_out


async def test_without_a_deadline_nothing_times_out(autojump_clock: trio.testing.MockClock) -> None:
    """CTX-08: without a deadline remaining_time is None and is_timed_out stays false; a timeout
    callback just waits."""
    context = make_context()
    counter = Counter()
    context.arm_deadline(None)
    context.on_timeout(counter.callback("cb"))
    await trio.sleep(10_000)
    assert context.remaining_time is None
    assert not context.is_timed_out
    assert counter.runs == {"cb": 0}
    assert context.pending_timeout_callbacks == 1


def test_phase_one_of_a_timeout_raises_both_flags_and_runs_both_callbacks_once() -> None:
    """time_out() sets the timeout and cancel flags and runs the timeout and cancel callbacks,
    once however often it is called; check_cancellation then raises."""
    context = make_context()
    counter = Counter()
    context.on_timeout(counter.callback("timeout"))
    context.on_cancel(counter.callback("cancel"))
    context.time_out()
    context.time_out()
    assert counter.runs == {"timeout": 1, "cancel": 1}
    assert context.timed_out and context.is_timed_out and context.is_cancelled
    assert context.token.is_cancelled
    with pytest.raises(CancellationRequested):
        context.check_cancellation()


# -- CTX-09, CTX-10: progress and notifications ----------------------------------------------------


def test_user_progress_publishes_title_and_message() -> None:
    """CTX-09: publish_user_progress publishes a JobProgressEvent whose payload is
    "<title>: <msg>" with the given percent, and updates progress_percent and progress_message."""
    events: list[JobEvent] = []
    context = make_context(events)
    context.publish_user_progress("Indexing", "page 3 of 10", 30)
    (event,) = events
    assert isinstance(event, JobProgressEvent)
    assert event.payload == "Indexing: page 3 of 10"
    assert event.percent == 30
    assert event.snapshot is not None and event.snapshot.job_id == context.job_id
    assert context.progress_percent == 30
    assert context.progress_message == "Indexing: page 3 of 10"


def test_progress_without_a_percent_keeps_the_last_percent() -> None:
    """A progress report without a percent updates the message and keeps the last percent."""
    events: list[JobEvent] = []
    context = make_context(events)
    context.publish("half", 50)
    context.publish("still going")
    assert [e.percent for e in events if isinstance(e, JobProgressEvent)] == [50, None]
    assert (context.progress_percent, context.progress_message) == (50, "still going")


@pytest.mark.parametrize("percent", [-1, 101])
def test_a_percent_outside_0_to_100_is_refused(percent: int) -> None:
    """A progress percent outside 0..100 is refused with ValueError naming the value."""
    context = make_context([])
    with pytest.raises(ValueError, match=str(percent)):
        context.publish("bad", percent)


@pytest.mark.parametrize("severity", list(Severity))
def test_a_user_notification_carries_exactly_its_severity(severity: Severity) -> None:
    """CTX-10: publish_user_notification publishes a UserNotificationEvent with exactly the
    severity, title and message given."""
    events: list[JobEvent] = []
    context = make_context(events)
    context.publish_user_notification(severity, "Heads up", "the quota is low")
    (event,) = events
    assert isinstance(event, UserNotificationEvent)
    assert event.severity is severity
    assert (event.title, event.text) == ("Heads up", "the quota is low")
    assert event.snapshot is not None and event.snapshot.job_id == context.job_id


# -- CTX-11: dependencies ---------------------------------------------------------------------------


def dependency_snapshots(count: int) -> list[JobSnapshot]:
    root = workflow("alice", "wf")
    return [JobContext(Plain(root, f"dep{i}"), "alice").snapshot() for i in range(count)]


def test_single_dependency_result_refuses_zero_dependencies() -> None:
    """CTX-11: single_dependency_result() with no dependencies raises, naming the count."""
    context = make_context()
    with pytest.raises(RuntimeError, match="exactly one dependency.*has 0"):
        context.single_dependency_result()
    assert context.all_dependency_results() == []


def test_single_dependency_result_returns_the_only_one() -> None:
    """CTX-11: with exactly one dependency, single_dependency_result() returns its result."""
    context = make_context()
    (snap,) = dependency_snapshots(1)
    context.set_dependency_outcomes({snap: "only"}, {})
    assert context.single_dependency_result() == "only"


def test_single_dependency_result_refuses_two_dependencies() -> None:
    """CTX-11: single_dependency_result() with two dependencies raises, naming the count."""
    context = make_context()
    first, second = dependency_snapshots(2)
    context.set_dependency_outcomes({first: 1, second: 2}, {})
    with pytest.raises(RuntimeError, match="exactly one dependency.*has 2"):
        context.single_dependency_result()


def test_all_dependency_results_keep_declaration_order_and_the_view_is_read_only() -> None:
    """CTX-11: all_dependency_results() returns values in declaration order, and
    dependency_results is a read-only view."""
    context = make_context()
    snaps = dependency_snapshots(4)
    results = {snap: f"r{i}" for i, snap in enumerate(reversed(snaps))}
    context.set_dependency_outcomes(results, {})
    assert context.all_dependency_results() == ["r0", "r1", "r2", "r3"]
    assert list(context.dependency_results) == list(reversed(snaps))
    view = context.dependency_results
    with pytest.raises(TypeError):
        view[snaps[0]] = "overwritten"  # type: ignore[index]
    with pytest.raises(AttributeError):
        view.clear()  # type: ignore[attr-defined]
    assert context.all_dependency_results() == ["r0", "r1", "r2", "r3"]


# -- CTX-12: waits ----------------------------------------------------------------------------------


def test_wait_recordings_sum_per_account_and_as_a_wall_wait() -> None:
    """CTX-12: resource waits sum per account under "wait_times" (http 100+50 is 150, db:default
    7), admission waits sum under "admission_wait_ms" (120+30 is 150), and the snapshot's
    metadata carries both."""
    context = make_context()
    context.record_resource_wait("http", 100)
    context.record_resource_wait("http", 50)
    context.record_resource_wait("db:default", 7)
    context.record_admission_wait(120)
    context.record_admission_wait(30)
    assert META_WAIT_TIMES == "wait_times"
    assert META_ADMISSION_WAIT_MS == "admission_wait_ms"
    assert context.metadata[META_WAIT_TIMES] == {"http": 150, "db:default": 7}
    assert context.metadata[META_ADMISSION_WAIT_MS] == 150
    metadata = context.snapshot().metadata
    assert metadata[META_WAIT_TIMES] == {"http": 150, "db:default": 7}
    assert metadata[META_ADMISSION_WAIT_MS] == 150


def test_an_earlier_snapshot_keeps_the_waits_it_saw() -> None:
    """A snapshot is a picture of one moment: a wait recorded after it does not change it."""
    context = make_context()
    context.record_resource_wait("http", 10)
    before = context.snapshot()
    context.record_resource_wait("http", 5)
    assert before.metadata[META_WAIT_TIMES] == {"http": 10}
    assert context.snapshot().metadata[META_WAIT_TIMES] == {"http": 15}


# -- CTX-13, CTX-14 ---------------------------------------------------------------------------------


async def test_current_job_is_none_outside_a_job() -> None:
    """CTX-13: outside any job current_job() is None, in the test's task, in a child task and on
    a worker thread; a context that is not executing holds no resources."""
    assert current_job() is None
    seen: list[object] = []

    async def child() -> None:
        seen.append(current_job())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)
    seen.append(await trio.to_thread.run_sync(current_job))
    assert seen == [None, None]
    assert make_context().is_executing_job_with_resources is False


def test_a_standalone_token_notifies_once_and_keeps_the_first_reason() -> None:
    """CTX-14: a standalone CancellationToken runs its callbacks once, keeps the first reason,
    runs a late callback at once, and touches no job context."""
    context = make_context()
    token = CancellationToken()
    counter = Counter()
    token.on_cancellation(counter.callback("early"))
    assert not token.is_cancelled and token.reason is None
    assert token.cancel("first reason")
    assert not token.cancel("second reason")
    token.on_cancellation(counter.callback("late"))
    assert counter.runs == {"early": 1, "late": 1}
    assert token.is_cancelled
    assert token.reason == "first reason"
    with pytest.raises(CancellationRequested, match="first reason"):
        token.check()
    assert not context.is_cancelled
    assert not context.token.is_cancelled
    assert context.state is JobState.QUEUED
    context.check_cancellation()


def test_the_contexts_own_token_follows_its_cancel() -> None:
    """A job's cancel() cancels its token with the same reason and runs the token's callbacks."""
    context = make_context()
    counter = Counter()
    context.token.on_cancellation(counter.callback("token"))
    context.cancel("shutting down")
    assert context.token.is_cancelled
    assert context.token.reason == "shutting down"
    assert counter.runs == {"token": 1}
