"""The event classes: families, verdicts, messages, immutability, limiter events (OBS, EVT)."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import attrs
import pytest

from nucleo_trio.admission.limiter import LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.bus.events import (
    EVENT_FAMILIES,
    AbstractTerminalEvent,
    ContentStreamEvent,
    DependencyFailureEvent,
    FailureEvent,
    HeartbeatEvent,
    HumanReadable,
    JobCancelled,
    JobCompletedEvent,
    JobEvent,
    JobFailedEvent,
    JobProgressEvent,
    JobScheduled,
    JobStartedEvent,
    JobTimedOut,
    LifecycleEvent,
    LimiterEvent,
    MessageCompleteEvent,
    MsgType,
    NotificationEvent,
    OperationalEvent,
    OrchestratorIdleEvent,
    OrchestratorResumedEvent,
    OutputTruncationRetryEvent,
    ProgressEvent,
    RateLimitRetryEvent,
    ResponseCorrectionRetryEvent,
    RetryEvent,
    ScheduledState,
    SchedulerEvent,
    SchedulerEventType,
    Severity,
    SuccessEvent,
    SystemEvent,
    TerminalEvent,
    ToolCallStreamEvent,
    TransientErrorRetryEvent,
    UserNotificationEvent,
    WorkflowCompleteEvent,
    WorkflowTerminationEvent,
    amount_of,
    family_of,
)
from nucleo_trio.jobs.snapshot import JobSnapshot
from nucleo_trio.jobs.state import JobState


def snapshot(**changes: Any) -> JobSnapshot:
    base = JobSnapshot(
        job_id="j-1",
        workflow_id="wf-1",
        parent_job_id=None,
        user_id="u",
        job_class="X",
        job_class_qualname="m.X",
        name="X",
    )
    return attrs.evolve(base, **changes)


def limiter_event(kind: LimiterEventType, *, with_job: bool = True, **changes: Any) -> LimiterEvent:
    fields: dict[str, Any] = dict(
        snapshot=snapshot() if with_job else None,
        limiter_name="db:main",
        limiter_category="semaphore",
        capacity=4,
        in_use=3,
        waiters=2,
        type=kind,
    )
    if kind is LimiterEventType.REJECTED:
        fields["reject_reason"] = "cancelled"
    fields.update(changes)
    return LimiterEvent(**fields)


def one_of_each() -> dict[type[JobEvent], JobEvent]:
    """One instance of every concrete event class."""
    s = snapshot()
    built: list[JobEvent] = [
        JobScheduled(snapshot=s),
        JobStartedEvent(snapshot=s, attempt=1),
        OrchestratorIdleEvent(snapshot=s),
        OrchestratorResumedEvent(snapshot=s),
        JobCompletedEvent(snapshot=s, result=42),
        JobFailedEvent(snapshot=s, error=ValueError("bad")),
        JobTimedOut(snapshot=s, timeout=30.0),
        JobCancelled(snapshot=s),
        DependencyFailureEvent(snapshot=s, error=ValueError("upstream")),
        WorkflowCompleteEvent(snapshot=s),
        JobProgressEvent(snapshot=s, payload="half", percent=50),
        ContentStreamEvent(snapshot=s, chunk="hello"),
        ToolCallStreamEvent(snapshot=s, index=0, call_id="c1", name="search"),
        RateLimitRetryEvent(snapshot=s, attempt=2, delay=3.0, reason="429"),
        TransientErrorRetryEvent(snapshot=s, attempt=2, delay=1.0, reason="503"),
        OutputTruncationRetryEvent(snapshot=s, attempt=2, reason="max_tokens"),
        ResponseCorrectionRetryEvent(snapshot=s, attempt=2, reason="ValidationError"),
        UserNotificationEvent(snapshot=s, severity=Severity.INFO, title="t", text="x"),
        limiter_event(LimiterEventType.HELD),
        SchedulerEvent(type=SchedulerEventType.STARTED),
        MessageCompleteEvent(snapshot=s),
    ]
    return {type(event): event for event in built}


CONCRETE = list(one_of_each())


# -- families and verdicts -----------------------------------------------------------------


EXPECTED_FAMILY: dict[type[JobEvent], type[JobEvent] | None] = {
    JobScheduled: LifecycleEvent,
    JobStartedEvent: LifecycleEvent,
    OrchestratorIdleEvent: LifecycleEvent,
    OrchestratorResumedEvent: LifecycleEvent,
    JobCompletedEvent: LifecycleEvent,
    JobFailedEvent: LifecycleEvent,
    JobTimedOut: LifecycleEvent,
    JobCancelled: LifecycleEvent,
    DependencyFailureEvent: LifecycleEvent,
    WorkflowCompleteEvent: WorkflowTerminationEvent,
    JobProgressEvent: ProgressEvent,
    ContentStreamEvent: ProgressEvent,
    ToolCallStreamEvent: ProgressEvent,
    RateLimitRetryEvent: RetryEvent,
    TransientErrorRetryEvent: RetryEvent,
    OutputTruncationRetryEvent: RetryEvent,
    ResponseCorrectionRetryEvent: RetryEvent,
    UserNotificationEvent: NotificationEvent,
    LimiterEvent: OperationalEvent,
    SchedulerEvent: SystemEvent,
    MessageCompleteEvent: None,
}


def test_every_concrete_event_is_in_exactly_one_family() -> None:
    """OBS-01: each concrete event belongs to exactly one family; MessageCompleteEvent to none."""
    assert set(EXPECTED_FAMILY) == set(CONCRETE)
    assert len(EVENT_FAMILIES) == 8
    assert HeartbeatEvent in EVENT_FAMILIES
    for cls, family in EXPECTED_FAMILY.items():
        memberships = [f for f in EVENT_FAMILIES if issubclass(cls, f)]
        assert memberships == ([family] if family else []), cls
        assert family_of(cls) is family
        assert family_of(one_of_each()[cls]) is family
        assert issubclass(cls, JobEvent)


def test_terminal_family_and_its_base() -> None:
    """OBS-01: TerminalEvent sits under LifecycleEvent and holds the four plus the dependency failure."""
    terminal = {cls for cls in CONCRETE if issubclass(cls, TerminalEvent)}
    assert terminal == {
        JobCompletedEvent,
        JobFailedEvent,
        JobTimedOut,
        JobCancelled,
        DependencyFailureEvent,
    }
    assert {cls for cls in CONCRETE if issubclass(cls, AbstractTerminalEvent)} == {
        JobCompletedEvent,
        JobFailedEvent,
        JobTimedOut,
        JobCancelled,
    }
    assert issubclass(TerminalEvent, LifecycleEvent)
    assert not issubclass(WorkflowCompleteEvent, LifecycleEvent)
    assert issubclass(ContentStreamEvent, JobProgressEvent)


def test_verdict_markers() -> None:
    """OBS-02: SuccessEvent is completion only; FailureEvent is failure, timeout, dependency failure."""
    assert {cls for cls in CONCRETE if issubclass(cls, SuccessEvent)} == {JobCompletedEvent}
    assert {cls for cls in CONCRETE if issubclass(cls, FailureEvent)} == {
        JobFailedEvent,
        JobTimedOut,
        DependencyFailureEvent,
    }
    cancelled: JobEvent = JobCancelled(snapshot=snapshot())
    assert not isinstance(cancelled, SuccessEvent | FailureEvent)


def test_families_and_markers_cannot_be_built_alone() -> None:
    """OBS-01: a family classifies events; building one on its own is refused clearly."""
    for family in (*EVENT_FAMILIES, JobEvent, TerminalEvent, AbstractTerminalEvent, HumanReadable):
        with pytest.raises(TypeError, match="cannot be built on its own"):
            family(snapshot=snapshot())


# -- finality and immutability -------------------------------------------------------------

OPEN = {JobProgressEvent, ContentStreamEvent, MessageCompleteEvent}


@pytest.mark.parametrize("cls", CONCRETE, ids=lambda c: c.__name__)
def test_concrete_events_are_final_except_three(cls: type[JobEvent]) -> None:
    """OBS-03: every concrete event is final except JobProgressEvent, ContentStreamEvent, MessageCompleteEvent."""
    if cls in OPEN:

        @attrs.frozen(kw_only=True)
        class Custom(cls):  # type: ignore[valid-type,misc]
            extra: int = 0

        assert issubclass(Custom, cls)
    else:
        with pytest.raises(TypeError, match="final"):
            type("Custom", (cls,), {})


@pytest.mark.parametrize("cls", CONCRETE, ids=lambda c: c.__name__)
def test_no_event_exposes_a_mutator(cls: type[JobEvent]) -> None:
    """OBS-03: events are immutable: every field refuses assignment and there are no setters."""
    event = one_of_each()[cls]
    for field in attrs.fields(cls):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(event, field.name, getattr(event, field.name))
    public = [name for name in dir(event) if not name.startswith("_")]
    assert not [name for name in public if name.startswith(("set", "add", "clear", "update"))]


def test_collections_on_events_are_read_only() -> None:
    """OBS-03, OBS-11: metadata is a read-only copy, responses a tuple."""
    metadata = {"cost": 1}
    responses = ["r1"]
    event = JobCompletedEvent(snapshot=snapshot(), metadata=metadata, llm_responses=responses)
    metadata["cost"] = 2
    responses.append("r2")
    assert event.metadata == {"cost": 1}
    assert event.llm_responses == ("r1",)
    with pytest.raises(TypeError):
        event.metadata["cost"] = 3  # type: ignore[index]


# -- what every event answers --------------------------------------------------------------


@pytest.mark.parametrize("cls", CONCRETE, ids=lambda c: c.__name__)
def test_every_event_exposes_snapshot_timestamp_message(cls: type[JobEvent]) -> None:
    """OBS-04: every event answers snapshot, timestamp and message."""
    before = time.time()
    event = attrs.evolve(one_of_each()[cls], timestamp=time.time())
    assert before <= event.timestamp <= time.time()
    assert event.message is None or isinstance(event.message, str)
    expected_snapshot = cls is not SchedulerEvent
    assert (event.snapshot is not None) == expected_snapshot


def test_timestamp_defaults_to_the_wall_clock() -> None:
    """OBS-04: timestamp is the wall-clock instant the event was built."""
    before = time.time()
    event = JobStartedEvent(snapshot=snapshot(), attempt=1)
    assert before <= event.timestamp <= time.time()


def test_snapshot_is_none_for_system_heartbeat_and_jobless_limiter_events() -> None:
    """OBS-04: SystemEvent, HeartbeatEvent and a job-less LimiterEvent carry no snapshot."""
    assert SchedulerEvent(type=SchedulerEventType.STOPPED).snapshot is None
    assert limiter_event(LimiterEventType.RELEASED, with_job=False).snapshot is None
    with pytest.raises(ValueError, match="belongs to no job"):
        SchedulerEvent(snapshot=snapshot(), type=SchedulerEventType.STARTED)

    @attrs.frozen(kw_only=True)
    class Beat(HeartbeatEvent):
        pass

    assert Beat().snapshot is None
    with pytest.raises(ValueError, match="belongs to no job"):
        Beat(snapshot=snapshot())


def test_job_scoped_events_refuse_to_be_built_without_a_snapshot() -> None:
    """OBS-04: an event about a job names the job; without a snapshot it is refused."""
    with pytest.raises(ValueError, match="JobStartedEvent is about a job"):
        JobStartedEvent(attempt=1)
    with pytest.raises(ValueError, match="WorkflowCompleteEvent"):
        WorkflowCompleteEvent()
    with pytest.raises(TypeError):
        JobStartedEvent(snapshot="not a snapshot", attempt=1)  # type: ignore[arg-type]


# -- messages ------------------------------------------------------------------------------


def test_scheduling_and_ending_messages() -> None:
    """OBS-05: the scheduling, start and ending messages."""
    s = snapshot()
    assert JobScheduled(snapshot=s).message is None
    assert JobStartedEvent(snapshot=s, attempt=2).message == "Job started (attempt 2)"
    assert (
        JobCompletedEvent(snapshot=s, attempts=3).message
        == "Job completed successfully (attempt 3)"
    )
    assert JobFailedEvent(snapshot=s, error=RuntimeError("disk full")).message == (
        "Job failed: disk full"
    )
    assert JobFailedEvent(snapshot=s).message == "Job failed: unknown error"
    assert JobFailedEvent(snapshot=s, error=RuntimeError()).message == "Job failed: unknown error"
    timed_out = JobTimedOut(snapshot=s, timeout=30.0)
    assert timed_out.message == "Job timed out after 30 seconds"
    assert timed_out.error is None
    assert JobTimedOut(snapshot=s, timeout=0.5).message == "Job timed out after 0.5 seconds"
    assert DependencyFailureEvent(snapshot=s, error=KeyError("k")).message == (
        "Job failed due to dependency failure: KeyError: 'k'"
    )
    assert DependencyFailureEvent(snapshot=s).message == (
        "Job failed due to dependency failure: Unknown"
    )


def test_cancellation_messages() -> None:
    """OBS-06: "Job cancelled", "Job forcefully cancelled", or the publisher's own message."""
    s = snapshot()
    assert JobCancelled(snapshot=s).message == "Job cancelled"
    assert JobCancelled(snapshot=s, force=True).message == "Job forcefully cancelled"
    for text in (
        "Cancelled while queued: user asked",
        "Workflow cancelled: superseded",
        "Cancelled by shutdown",
    ):
        assert JobCancelled(snapshot=s, message=text).message == text


def test_other_messages() -> None:
    """OBS-07: workflow, streaming, orchestrator, chat-message and scheduler messages."""
    s = snapshot()
    assert WorkflowCompleteEvent(snapshot=s).message == "Workflow completed successfully"
    assert WorkflowCompleteEvent(snapshot=s).successful
    failed = WorkflowCompleteEvent(snapshot=s, successful=False, reason="root failed: boom")
    assert failed.message == "root failed: boom"
    long_chunk = "x" * 80
    assert ContentStreamEvent(snapshot=s, chunk=long_chunk).message == (
        "Streaming chunk: " + "x" * 50
    )
    assert ContentStreamEvent(snapshot=s, chunk="end", last=True).message == "Streaming complete"
    assert OrchestratorIdleEvent(snapshot=s).message == "Ready"
    assert OrchestratorResumedEvent(snapshot=s).message == "Processing"
    assert MessageCompleteEvent(snapshot=s).message == "Message processed"
    assert MessageCompleteEvent(snapshot=s, successful=False).message == (
        "Message processing failed"
    )
    assert SchedulerEvent(type=SchedulerEventType.STARTED).type is SchedulerEventType.STARTED
    assert {t.name for t in SchedulerEventType} == {"STARTED", "STOPPING", "STOPPED", "ERROR"}
    error = SchedulerEvent(type=SchedulerEventType.ERROR, error=OSError("no disk"))
    assert error.message == "Scheduler error: no disk"
    assert SchedulerEvent(type=SchedulerEventType.ERROR).message == "Scheduler error: Unknown"
    assert SchedulerEvent(type=SchedulerEventType.STOPPED).message == "Job scheduler stopped"


def test_retry_messages_and_titles() -> None:
    """OBS-12: the four retry events read for a person and name themselves in their titles."""
    s = snapshot()
    rate = RateLimitRetryEvent(snapshot=s, attempt=2, delay=12.0, reason="429", model="m-1")
    assert rate.message == "Hit rate limit for m-1: 429. Retrying in ~12 seconds (attempt 2)"
    assert rate.title == "Rate Limit Retry"
    server = TransientErrorRetryEvent(snapshot=s, attempt=3, reason="529 overloaded", provider="p")
    assert server.message == (
        "Server error from p: 529 overloaded. Retrying in ~0 seconds (attempt 3)"
    )
    assert server.title == "Server Error Retry"
    truncated = OutputTruncationRetryEvent(
        snapshot=s, attempt=2, reason="max_tokens", model="m", previous_budget=1000, new_budget=2000
    )
    assert truncated.message == (
        "Output truncated at 1000 tokens on m (max_tokens). Retrying with budget 2000 (attempt 2)"
    )
    assert truncated.title == "Output Truncation Retry"
    corrected = ResponseCorrectionRetryEvent(snapshot=s, attempt=2, reason="ValidationError")
    assert corrected.message == (
        "Response failed to parse or validate (ValidationError). "
        "Retrying with correction (attempt 2)"
    )
    assert corrected.title == "Response Correction Retry"
    for event in (rate, server, truncated, corrected):
        assert event.msg_type is MsgType.STATUS_UPDATE
        assert event.human_message == event.message


def test_limiter_messages() -> None:
    """OBS-08, EVT-12: one line per transition type."""
    held = limiter_event(LimiterEventType.HELD, in_use=4, capacity=4, waiters=3)
    assert held.message == "db:main HELD (4/4, waiters=3)"
    assert limiter_event(LimiterEventType.GRANTED_IMMEDIATE, in_use=1).message == (
        "db:main GRANTED (1/4)"
    )
    assert limiter_event(LimiterEventType.GRANTED_FROM_HOLD, wait=1.5).message == (
        "db:main GRANTED after 1500ms"
    )
    assert limiter_event(LimiterEventType.GRANTED_FROM_HOLD, wait=0.07).message == (
        "db:main GRANTED after 70ms"
    )
    assert limiter_event(LimiterEventType.REJECTED, reject_reason="shutdown").message == (
        "db:main REJECTED (shutdown)"
    )
    assert limiter_event(LimiterEventType.RELEASED, in_use=0).message == ("db:main RELEASED (0/4)")


# -- person-facing events ------------------------------------------------------------------


def test_msg_type_values_and_progress_mapping() -> None:
    """OBS-09: seven MsgType values; progress maps none/0/1-99/100; its title is the display name."""
    assert [m.name for m in MsgType] == [
        "STARTING",
        "PROGRESSING",
        "COMPLETING",
        "FAILING",
        "STATUS_UPDATE",
        "MESSAGE",
        "ERROR",
    ]
    s = snapshot(name="Fetcher")

    def progress(percent: int | None) -> JobProgressEvent:
        return JobProgressEvent(snapshot=s, payload="p", percent=percent)

    assert progress(None).msg_type is MsgType.STATUS_UPDATE
    assert not progress(None).has_progress
    assert progress(0).msg_type is MsgType.STARTING
    assert progress(0).has_progress
    assert progress(1).msg_type is MsgType.PROGRESSING
    assert progress(99).msg_type is MsgType.PROGRESSING
    assert progress(100).msg_type is MsgType.COMPLETING
    assert progress(50).title == "Fetcher"
    assert JobProgressEvent(snapshot=s, payload="p", title="Step 2").title == "Step 2"
    assert progress(50).message == "p"
    assert JobProgressEvent(snapshot=s).message is None


def test_notification_severity_mapping() -> None:
    """OBS-09: an error is ERROR, a success COMPLETING, a warning or an info MESSAGE."""
    expected = {
        Severity.ERROR: MsgType.ERROR,
        Severity.SUCCESS: MsgType.COMPLETING,
        Severity.WARNING: MsgType.MESSAGE,
        Severity.INFO: MsgType.MESSAGE,
    }
    assert [s.name for s in Severity] == ["INFO", "SUCCESS", "WARNING", "ERROR"]
    for severity, msg_type in expected.items():
        event = UserNotificationEvent(
            snapshot=snapshot(), severity=severity, title="Heads up", text="Slow upstream"
        )
        assert event.msg_type is msg_type
        assert event.message == "Slow upstream"
        assert event.title == "Heads up"
        assert event.severity is severity


def test_stream_and_workflow_person_facing_answers() -> None:
    """OBS-09: a stream's last chunk completes at 100%; a workflow outcome sets its type and title."""
    s = snapshot()
    middle = ContentStreamEvent(snapshot=s, chunk="abc")
    assert (middle.msg_type, middle.title, middle.percent) == (
        MsgType.PROGRESSING,
        "Streaming Content",
        None,
    )
    assert middle.payload == "abc"
    assert middle.human_message == "abc"
    last = ContentStreamEvent(snapshot=s, last=True)
    assert (last.msg_type, last.title, last.percent) == (
        MsgType.COMPLETING,
        "Streaming Complete",
        100,
    )
    assert last.human_message == "Stream completed"
    assert ContentStreamEvent(snapshot=s).human_message == "Streaming..."
    done = WorkflowCompleteEvent(snapshot=s)
    failed = WorkflowCompleteEvent(snapshot=s, successful=False)
    assert (done.msg_type, done.title) == (MsgType.COMPLETING, "Workflow Complete")
    assert (failed.msg_type, failed.title) == (MsgType.FAILING, "Workflow Failed")


def test_human_readable_membership() -> None:
    """OBS-12: exactly the person-facing events implement HumanReadable."""
    readable = {cls for cls in CONCRETE if issubclass(cls, HumanReadable)}
    assert readable == {
        JobProgressEvent,
        ContentStreamEvent,
        ToolCallStreamEvent,
        RateLimitRetryEvent,
        TransientErrorRetryEvent,
        OutputTruncationRetryEvent,
        ResponseCorrectionRetryEvent,
        UserNotificationEvent,
        MessageCompleteEvent,
        WorkflowCompleteEvent,
        OrchestratorIdleEvent,
        OrchestratorResumedEvent,
    }
    assert not issubclass(HeartbeatEvent, HumanReadable)


# -- scheduling and terminal payloads ------------------------------------------------------


def test_job_scheduled_forms() -> None:
    """OBS-10: the dispatcher's form carries QUEUED, requirements, priority; the plain form ACCEPTED."""
    requirements = object()
    queued = JobScheduled(
        snapshot=snapshot(), state=ScheduledState.QUEUED, requirements=requirements, priority=7
    )
    assert (queued.state, queued.requirements, queued.priority) == (
        ScheduledState.QUEUED,
        requirements,
        7,
    )
    accepted = JobScheduled(snapshot=snapshot())
    assert (accepted.state, accepted.requirements, accepted.priority) == (
        ScheduledState.ACCEPTED,
        None,
        0,
    )


def test_terminal_event_carries_the_run() -> None:
    """OBS-11: attempts, responses and metadata (never None), completion time, duration, result, cause."""
    s = snapshot(started_at=1000.0, attempt_number=2, state=JobState.COMPLETED)
    done = JobCompletedEvent(
        snapshot=s, result="answer", llm_responses=["r"], metadata={"k": 1}, completion_time=1012.5
    )
    assert done.attempts == 2
    assert done.llm_responses == ("r",)
    assert done.metadata == {"k": 1}
    assert done.completion_time == 1012.5
    assert done.duration == 12.5
    assert done.result == "answer"
    assert done.cause is None

    empty = JobFailedEvent(
        snapshot=snapshot(), error=ValueError("v"), llm_responses=None, metadata=None
    )
    assert empty.llm_responses == ()
    assert dict(empty.metadata) == {}
    assert empty.duration == 0.0, "a job that never started has no duration"
    assert empty.result is None, "only a completion carries a result"
    assert isinstance(empty.cause, ValueError)
    assert empty.completion_time == empty.timestamp

    cancelled = JobCancelled(snapshot=s, attempts=1)
    assert cancelled.cause is None
    assert cancelled.error is None
    assert cancelled.attempts == 1
    timed_out = JobTimedOut(snapshot=s, timeout=5.0)
    assert timed_out.cause is None

    dependency = DependencyFailureEvent(snapshot=snapshot(), error=KeyError("x"))
    assert dependency.llm_responses == ()
    assert dict(dependency.metadata) == {}
    assert dependency.duration == 0.0
    assert isinstance(dependency.cause, KeyError)


# -- limiter events ------------------------------------------------------------------------


def test_limiter_event_fields_in_order() -> None:
    """OBS-13, EVT-02: twelve fields in the record's order."""
    assert [f.name for f in attrs.fields(LimiterEvent)] == [
        "snapshot",
        "timestamp",
        "limiter_name",
        "limiter_category",
        "capacity",
        "in_use",
        "waiters",
        "type",
        "wait",
        "reject_reason",
        "status_indicator",
        "amount",
    ]
    event = limiter_event(
        LimiterEventType.REJECTED,
        wait=0.25,
        reject_reason="circuit_blocked",
        status_indicator="blocked",
        amount=300,
    )
    assert (event.wait, event.reject_reason, event.status_indicator, event.amount) == (
        0.25,
        "circuit_blocked",
        "blocked",
        300,
    )
    assert limiter_event(LimiterEventType.HELD).wait == 0.0


def test_amount_of() -> None:
    """EVT-13: numbers add up, anything else counts 1, an empty list is 0."""
    assert amount_of([300, 300]) == 600
    assert amount_of([None, None, None]) == 3
    assert amount_of([]) == 0
    assert amount_of(["key", 2]) == 3
    assert amount_of([1.5, Fraction(1, 2), Decimal("1")]) == 3.0
    assert amount_of([True]) == 1


# -- bad input -----------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_clear_error() -> None:
    """Every field that can be wrong says what is wrong."""
    s = snapshot()
    with pytest.raises(ValueError, match="percent must be from 0 to 100"):
        JobProgressEvent(snapshot=s, percent=101)
    with pytest.raises(TypeError, match="percent must be an int"):
        JobProgressEvent(snapshot=s, percent=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attempt"):
        JobStartedEvent(snapshot=s, attempt=0)
    with pytest.raises(ValueError, match="reject_reason"):
        limiter_event(LimiterEventType.REJECTED, reject_reason=None)
    with pytest.raises(ValueError, match="must not be negative"):
        JobTimedOut(snapshot=s, timeout=-1.0)
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        JobCompletedEvent(snapshot=s, metadata=[("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="severity"):
        UserNotificationEvent(snapshot=s, severity="ERROR", title="t", text="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="llm_responses"):
        JobCompletedEvent(snapshot=s, llm_responses="abc")


def test_module_exports_are_complete() -> None:
    """The package re-exports every public name of the events module."""
    import nucleo_trio.bus as bus_package

    for name in ev.__all__:
        assert getattr(bus_package, name) is getattr(ev, name)
