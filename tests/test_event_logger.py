"""The EventLogger: every event but limiter events, on its logger, at its level (OBS-18, 19)."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate, LimiterEventType
from nucleo_trio.bus import events as ev, open_message_bus
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import (
    CorrectableError,
    DependencyFailedError,
    InvalidInputError,
    UncorrectableError,
)
from nucleo_trio.jobs import JobContext, JobRequirements, JobSnapshot, Tool, workflow
from nucleo_trio.observability import (
    EVENT_LOGGER_ROOT,
    NO_WORKFLOW,
    SYSTEM_PREFIX,
    EventLogger,
    WorkflowIdFilter,
    current_workflow_id,
    shorten_workflow_id,
)

ROOT = EVENT_LOGGER_ROOT
WORKFLOW = "research-4f1e0b9d9c2e"  # 21 characters: the line shortens it
SHORT = "research-4\u20269c2e"


def snapshot(
    job_id: str = "probe-1", *, workflow_id: str = WORKFLOW, qualname: str = "myapp.tools.Probe"
) -> JobSnapshot:
    return JobSnapshot(
        job_id=job_id,
        workflow_id=workflow_id,
        parent_job_id=workflow_id,
        user_id="alice",
        job_class=qualname.rsplit(".", 1)[-1],
        job_class_qualname=qualname,
        name="Probe",
    )


@attrs.frozen(kw_only=True)
class CacheHit(ev.JobEvent):
    """An application's own event, in no family."""

    key: str

    @property
    def message(self) -> str:
        return f"cache hit: {self.key}"


@attrs.frozen(kw_only=True)
class Costly(ev.JobEvent):
    """An event that counts how often its message is built."""

    reads: list[int] = attrs.field(factory=list)

    @property
    def message(self) -> str:
        self.reads.append(1)
        return "built"


def limiter_event(**kwargs: Any) -> ev.LimiterEvent:
    return ev.LimiterEvent(
        limiter_name="db",
        limiter_category="semaphore",
        capacity=2,
        in_use=1,
        waiters=0,
        type=LimiterEventType.GRANTED_IMMEDIATE,
        **kwargs,
    )


def stamp(record: logging.LogRecord, key: str) -> Any:
    """An attribute the logging call added to the record (its ``extra``)."""
    return record.__dict__[key]


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(ROOT + ".") or r.name == ROOT]


@pytest.fixture
def debug(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger=ROOT)
    return caplog


# -- OBS-18: what is skipped, which logger, which level -------------------------------------------
def test_limiter_events_are_skipped(debug: pytest.LogCaptureFixture) -> None:
    """OBS-18: an OperationalEvent (a limiter event, with or without a job) is never logged, and
    the predicate keeps it off the observer's queue; every other event passes."""
    logger = EventLogger()
    logger.log_event(limiter_event())
    logger.log_event(limiter_event(snapshot=snapshot()))
    assert records(debug) == []
    assert logger.route(limiter_event()) is None
    keep = logger.predicate
    assert not keep(limiter_event())
    assert keep(ev.JobStartedEvent(snapshot=snapshot(), attempt=1))
    assert keep(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))


LEVELS: list[tuple[ev.JobEvent, str, int]] = [
    (ev.JobScheduled(snapshot=snapshot()), "lifecycle", logging.INFO),
    (ev.JobStartedEvent(snapshot=snapshot(), attempt=1), "lifecycle", logging.INFO),
    (ev.JobCompletedEvent(snapshot=snapshot(), result=1), "lifecycle", logging.INFO),
    (ev.JobCancelled(snapshot=snapshot()), "lifecycle", logging.INFO),
    (ev.OrchestratorIdleEvent(snapshot=snapshot()), "lifecycle", logging.INFO),
    (ev.OrchestratorResumedEvent(snapshot=snapshot()), "lifecycle", logging.INFO),
    (ev.JobFailedEvent(snapshot=snapshot(), error=InvalidInputError("x")), "failure", 30),
    (ev.JobTimedOut(snapshot=snapshot(), timeout=2.0), "failure", logging.WARNING),
    (ev.DependencyFailureEvent(snapshot=snapshot()), "failure", logging.WARNING),
    (ev.RateLimitRetryEvent(snapshot=snapshot(), attempt=2), "retry", logging.DEBUG),
    (ev.TransientErrorRetryEvent(snapshot=snapshot(), attempt=2), "retry", logging.DEBUG),
    (ev.OutputTruncationRetryEvent(snapshot=snapshot(), attempt=2), "retry", logging.DEBUG),
    (ev.ResponseCorrectionRetryEvent(snapshot=snapshot(), attempt=2), "retry", logging.DEBUG),
    (ev.WorkflowCompleteEvent(snapshot=snapshot()), "workflow", logging.INFO),
    (ev.ContentStreamEvent(snapshot=snapshot(), chunk="Hel"), "stream", logging.DEBUG),
    (ev.JobProgressEvent(snapshot=snapshot(), payload="half", percent=50), "progress", 10),
    (ev.MessageCompleteEvent(snapshot=snapshot()), "event", logging.INFO),
    (CacheHit(snapshot=snapshot(), key="page:1"), "event", logging.INFO),
]


@pytest.mark.parametrize(
    ("event", "segment", "level"), LEVELS, ids=[type(e).__name__ for e, _, _ in LEVELS]
)
def test_a_job_event_is_logged_on_its_job_class_and_segment_at_its_level(
    debug: pytest.LogCaptureFixture, event: ev.JobEvent, segment: str, level: int
) -> None:
    """OBS-18: on "nucleo_trio.events.<job class>.<segment>": failure WARNING, lifecycle INFO,
    retry DEBUG, workflow INFO, stream DEBUG, progress DEBUG, anything else INFO."""
    EventLogger().log_event(event)
    [record] = records(debug)
    assert record.name == f"{ROOT}.myapp.tools.Probe.{segment}"
    assert record.levelno == level


@pytest.mark.parametrize(
    ("event", "segment"),
    [
        (ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED), "system"),
        (ev.SchedulerEvent(type=ev.SchedulerEventType.ERROR, error=OSError("disk")), "system"),
        (ev.CancelHeartbeat(heartbeat_id="nightly"), "heartbeat"),
        (CacheHit(key="page:1"), "event"),
    ],
)
def test_an_event_of_no_job_is_logged_on_its_segment_at_info(
    debug: pytest.LogCaptureFixture, event: ev.JobEvent, segment: str
) -> None:
    """OBS-18: system INFO, heartbeat INFO, event INFO; with no job the logger is the root's
    child named by the segment."""
    EventLogger().log_event(event)
    [record] = records(debug)
    assert (record.name, record.levelno) == (f"{ROOT}.{segment}", logging.INFO)


@pytest.mark.parametrize(
    ("severity", "level"),
    [
        (ev.Severity.INFO, logging.DEBUG),
        (ev.Severity.SUCCESS, logging.DEBUG),
        (ev.Severity.WARNING, logging.WARNING),
        (ev.Severity.ERROR, logging.ERROR),
    ],
)
def test_a_notification_is_logged_at_its_severitys_level(
    debug: pytest.LogCaptureFixture, severity: ev.Severity, level: int
) -> None:
    """OBS-18: INFO and SUCCESS at DEBUG, WARNING at WARNING, ERROR at ERROR."""
    event = ev.UserNotificationEvent(
        snapshot=snapshot(), severity=severity, title="Report", text="ready"
    )
    EventLogger().log_event(event)
    [record] = records(debug)
    assert record.name == f"{ROOT}.myapp.tools.Probe.notification"
    assert record.levelno == level
    assert record.getMessage() == f"[{SHORT}] Probe (probe-1): ready"


def test_a_notification_of_your_own_without_a_severity_is_logged_at_info(
    debug: pytest.LogCaptureFixture,
) -> None:
    """OBS-18: the notification segment, at INFO when the event names no severity."""

    @attrs.frozen(kw_only=True)
    class Ping(ev.NotificationEvent):
        pass

    EventLogger().log_event(Ping(snapshot=snapshot()))
    [record] = records(debug)
    assert (record.name, record.levelno) == (f"{ROOT}.myapp.tools.Probe.notification", 20)
    assert record.getMessage() == f"[{SHORT}] Probe (probe-1): Ping"


def test_one_logger_governs_all_one_job_class_or_one_segment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OBS-18: the names nest, so the root, a job class, or a class's segment can be tuned."""
    caplog.set_level(logging.WARNING, logger=ROOT)
    caplog.set_level(logging.DEBUG, logger=f"{ROOT}.myapp.tools.Probe.progress")
    logger = EventLogger()
    logger.log_event(ev.JobStartedEvent(snapshot=snapshot(), attempt=1))  # INFO < WARNING
    logger.log_event(ev.JobProgressEvent(snapshot=snapshot(), payload="half"))
    other = snapshot(qualname="myapp.tools.Other")
    logger.log_event(ev.JobProgressEvent(snapshot=other, payload="quiet"))
    logger.log_event(ev.JobTimedOut(snapshot=other, timeout=1.0))
    assert [(r.name.removeprefix(ROOT + "."), r.getMessage()) for r in records(caplog)] == [
        ("myapp.tools.Probe.progress", f"[{SHORT}] Probe (probe-1): half"),
        ("myapp.tools.Other.failure", f"[{SHORT}] Probe (probe-1): Job timed out after 1 seconds"),
    ]


def test_nothing_is_built_for_a_logger_that_is_switched_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A disabled level costs a lookup: the event's message is not even read."""
    caplog.set_level(logging.WARNING, logger=ROOT)
    event = Costly(snapshot=snapshot())
    EventLogger().log_event(event)
    assert event.reads == [] and records(caplog) == []
    caplog.set_level(logging.INFO, logger=ROOT)
    EventLogger().log_event(event)
    assert event.reads == [1] and len(records(caplog)) == 1


def test_all_event_loggers_are_equal() -> None:
    """OBS-18: every EventLogger equals every other and hashes alike; other observers, and a
    subclass (a different logger), are not equal to it."""

    class Quieter(EventLogger):
        pass

    first, second = EventLogger(), EventLogger()
    assert first == second and hash(first) == hash(second)
    assert len({first, second}) == 1
    assert first != Quieter() and Quieter() == Quieter()
    assert first != object() and first != "EventLogger()"
    assert repr(first) == "EventLogger()"


async def test_subscribing_a_second_event_logger_is_a_no_op(
    debug: pytest.LogCaptureFixture,
) -> None:
    """OBS-17, OBS-18: the bus counts equal observers as one, so a second EventLogger gets the
    no-op subscription (and a warning) and every event is logged once."""
    async with open_message_bus() as bus:
        live = bus.subscribe(EventLogger())
        again = bus.subscribe(EventLogger())
        assert live.is_active and again.id == "noop" and not again.is_active
        bus.publish(ev.JobStartedEvent(snapshot=snapshot(), attempt=1))
        bus.publish(limiter_event(snapshot=snapshot()))
    assert [r.getMessage() for r in records(debug)] == [
        f"[{SHORT}] Probe (probe-1): Job started (attempt 1)"
    ]
    assert any("already subscribed" in r.getMessage() for r in debug.records)


# -- OBS-19: the line -----------------------------------------------------------------------------
def test_a_workflow_id_longer_than_15_is_cut_to_its_first_10_and_last_4() -> None:
    """OBS-19: up to 15 characters the id is whole; past that, 10 + an ellipsis + 4."""
    assert shorten_workflow_id("wf-1") == "wf-1"
    assert shorten_workflow_id("a" * 15) == "a" * 15
    assert shorten_workflow_id("0123456789ABCDEF") == "0123456789\u2026CDEF"
    assert shorten_workflow_id(WORKFLOW) == SHORT and len(SHORT) == 15


def test_the_line_names_the_workflow_the_job_and_the_message(
    debug: pytest.LogCaptureFixture,
) -> None:
    """OBS-19: "[<workflow>] <name> (<job id>): <message>", the workflow id shortened when long,
    kept whole when short; an event with no message is named by its class."""
    logger = EventLogger()
    logger.log_event(ev.JobStartedEvent(snapshot=snapshot(), attempt=2))
    logger.log_event(ev.JobScheduled(snapshot=snapshot(workflow_id="wf-7")))
    logger.log_event(ev.JobProgressEvent(snapshot=snapshot()))
    assert [r.getMessage() for r in records(debug)] == [
        f"[{SHORT}] Probe (probe-1): Job started (attempt 2)",
        "[wf-7] Probe (probe-1): JobScheduled",
        f"[{SHORT}] Probe (probe-1): JobProgressEvent",
    ]


def test_an_event_without_a_snapshot_reads_system(debug: pytest.LogCaptureFixture) -> None:
    """OBS-19: "[SYSTEM] " then the message (or the event's class when it has none)."""
    logger = EventLogger()
    logger.log_event(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))
    logger.log_event(ev.CancelHeartbeat(heartbeat_id="nightly"))
    logger.log_event(CacheHit(key="page:1"))
    assert [r.getMessage() for r in records(debug)] == [
        "[SYSTEM] Job scheduler started",
        "[SYSTEM] CancelHeartbeat",
        "[SYSTEM] cache hit: page:1",
    ]
    assert all(r.getMessage().startswith(SYSTEM_PREFIX) for r in records(debug))
    assert all(stamp(r, "workflow_id") == NO_WORKFLOW for r in records(debug))


def test_the_workflow_id_is_on_the_record_and_in_context_while_the_line_is_written(
    debug: pytest.LogCaptureFixture,
) -> None:
    """OBS-19: the whole workflow id is the record's ``workflow_id`` (the job's id its
    ``job_id``, the event itself ``event``), and current_workflow_id() answers it while the
    line is written, and nothing once it is."""
    seen: list[str | None] = []

    class Peek(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(current_workflow_id())

    peek = Peek()
    root = logging.getLogger(ROOT)
    root.addHandler(peek)
    try:
        event = ev.JobStartedEvent(snapshot=snapshot(), attempt=1)
        EventLogger().log_event(event)
        EventLogger().log_event(ev.SchedulerEvent(type=ev.SchedulerEventType.STOPPED))
    finally:
        root.removeHandler(peek)
    assert seen == [WORKFLOW, None]
    assert current_workflow_id() is None
    job, system = records(debug)
    assert [stamp(job, key) for key in ("workflow_id", "job_id", "event")] == [
        WORKFLOW,
        "probe-1",
        event,
    ]
    assert [stamp(system, key) for key in ("workflow_id", "job_id")] == [NO_WORKFLOW] * 2
    formatted = logging.Formatter("%(workflow_id)s %(message)s").format(job)
    assert formatted == f"{WORKFLOW} [{SHORT}] Probe (probe-1): Job started (attempt 1)"


async def test_the_filter_gives_every_record_a_workflow_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-19: WorkflowIdFilter keeps an EventLogger record's id, gives a record logged inside a
    job that job's workflow id, and "-" to one logged outside any job; it drops nothing."""
    stamped: list[tuple[str, str]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stamped.append((record.getMessage(), stamp(record, "workflow_id")))

    handler = Collect()
    handler.addFilter(WorkflowIdFilter())
    app = logging.getLogger("tests.event_logger.app")
    app.addHandler(handler)
    app.setLevel(logging.INFO)
    app.propagate = False

    class Chatty(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            app.info("inside")
            return "ok"

    try:
        app.info("outside")
        async with open_dispatcher(DispatcherConfig()) as dispatcher:
            root = workflow("alice", "filtered")
            await dispatcher.submit(Chatty(root)).result()
        app.info("stamped already", extra={"workflow_id": "given"})
    finally:
        app.removeHandler(handler)
        app.propagate = True
        app.setLevel(logging.NOTSET)
    assert stamped == [
        ("outside", NO_WORKFLOW),
        ("inside", root.workflow_id),
        ("stamped already", "given"),
    ]


def test_a_failure_logs_a_stack_trace_unless_its_error_is_llm_readable(
    debug: pytest.LogCaptureFixture,
) -> None:
    """OBS-19: a failure with an error from outside the LLM-readable tree carries its trace; a
    correctable or uncorrectable error, and a timeout (no error), carry none."""

    def raised(error: BaseException) -> BaseException:
        try:
            raise error
        except BaseException as caught:  # kept, to be logged with its traceback
            return caught

    bug = raised(KeyError("lost state"))
    logger = EventLogger()
    logger.log_event(ev.JobFailedEvent(snapshot=snapshot(), error=bug))
    logger.log_event(ev.JobFailedEvent(snapshot=snapshot(), error=CorrectableError("bad arg")))
    logger.log_event(ev.JobFailedEvent(snapshot=snapshot(), error=UncorrectableError("down")))
    logger.log_event(ev.JobTimedOut(snapshot=snapshot(), timeout=5.0))
    dependency = raised(DependencyFailedError("dep-1", RuntimeError("boom")))
    logger.log_event(ev.DependencyFailureEvent(snapshot=snapshot(), error=dependency))
    logged = records(debug)
    assert [r.levelno for r in logged] == [logging.WARNING] * 5
    traced = [r.exc_info[1] if r.exc_info else None for r in logged]
    assert traced == [bug, None, None, None, dependency]
    text = logging.Formatter().format(logged[0])
    assert "Traceback (most recent call last)" in text and "KeyError: 'lost state'" in text
    assert "Traceback" not in logging.Formatter().format(logged[1])


# -- through the dispatcher -----------------------------------------------------------------------
class Reporting(Tool[str]):
    """Publishes progress and a warning, then succeeds or fails."""

    def __init__(self, parent: Any, gate: CountingGate, *, fail: bool = False) -> None:
        super().__init__(parent)
        self.gate = gate
        self.fail = fail
        self.timeout = 60.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.gate)

    async def execute(self, context: JobContext) -> str:
        context.publish("half way", 50)
        await trio.sleep(1)
        context.publish_user_notification(ev.Severity.WARNING, "Slow", "the source is slow")
        if self.fail:
            raise ValueError("the page was empty")
        return "ok"


async def test_log_events_subscribes_one_logger_that_writes_a_whole_run(
    debug: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """OBS-18, OBS-19 through the dispatcher: ``log_events=True`` subscribes one EventLogger at
    start; a run reads as lines on the job class's loggers, the limiter events of its admission
    are not among them, and the failure carries its trace."""
    async with open_dispatcher(DispatcherConfig(log_events=True)) as dispatcher:
        loggers = [s for s in dispatcher.bus.subscriptions if "EventLogger" in repr(s)]
        assert len(loggers) == 1
        assert dispatcher.bus.subscribe(EventLogger()).id == "noop"
        published: list[ev.JobEvent] = []
        dispatcher.bus.subscribe(published.append, event_type=ev.LimiterEvent)
        root, gate = workflow("alice", "logged"), CountingGate("pages", 1)
        await dispatcher.submit(Reporting(root, gate)).result()
        with pytest.raises(ValueError, match="empty"):
            await dispatcher.submit(Reporting(root, gate, fail=True)).result()
        await trio.testing.wait_all_tasks_blocked()
    short = shorten_workflow_id(root.workflow_id)
    job_class = f"{Reporting.__module__}.{Reporting.__qualname__}"
    logged = [(r.name.removeprefix(ROOT + "."), r.levelno, r.getMessage()) for r in records(debug)]
    assert logged[0] == ("system", logging.INFO, "[SYSTEM] Job scheduler started")
    assert logged[-2:] == [
        ("system", logging.INFO, "[SYSTEM] Job scheduler stopping"),
        ("system", logging.INFO, "[SYSTEM] Job scheduler stopped"),
    ]
    job_lines = [(name.removeprefix(job_class + "."), level, text) for name, level, text in logged]
    kinds = [(name, level) for name, level, _ in job_lines[1:-2]]
    assert kinds == [
        ("lifecycle", logging.INFO),  # scheduled
        ("lifecycle", logging.INFO),  # started
        ("progress", logging.DEBUG),
        ("notification", logging.WARNING),
        ("lifecycle", logging.INFO),  # completed
        ("workflow", logging.INFO),
        ("lifecycle", logging.INFO),
        ("lifecycle", logging.INFO),
        ("progress", logging.DEBUG),
        ("notification", logging.WARNING),
        ("failure", logging.WARNING),
        ("workflow", logging.INFO),
    ]
    texts = [text for _, _, text in job_lines[1:-2]]
    assert all(text.startswith(f"[{short}] Reporting (") for text in texts)
    assert texts[2].endswith("): half way") and texts[3].endswith("): the source is slow")
    assert texts[10].endswith("): Job failed: the page was empty")
    assert {e.limiter_name for e in published if isinstance(e, ev.LimiterEvent)} >= {"pages"}
    assert not any("pages" in text for text in texts), "no limiter event is logged"
    failure = records(debug)[11]
    assert failure.exc_info is not None and isinstance(failure.exc_info[1], ValueError)
    assert all(stamp(r, "workflow_id") == root.workflow_id for r in records(debug)[1:-2])


async def test_log_events_is_off_by_default_and_must_be_a_bool(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No EventLogger unless asked for: the bus builds no event nobody reads."""
    assert DispatcherConfig().log_events is False
    quiet = JobDispatcher(DispatcherConfig())
    async with trio.open_nursery() as nursery:
        await nursery.start(quiet.run)
        assert not [s for s in quiet.bus.subscriptions if "EventLogger" in repr(s)]
        assert not quiet.bus.has_listeners("any-workflow")
        await quiet.shutdown()
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="log_events must be a bool"):
            DispatcherConfig(log_events=bad)  # type: ignore[arg-type]
    assert DispatcherConfig.from_mapping({"log_events": True}).log_events is True
