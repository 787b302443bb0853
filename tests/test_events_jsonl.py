"""Events as JSON lines: every event class writes one line and reads back as itself; the sink on
a real dispatcher's bus; the reader's refusals; the ``nucleo-trio events`` command."""

from __future__ import annotations

import enum
import inspect
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from nucleo_trio.admission import CountingGate
from nucleo_trio.admission.limiter import LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.cli import main
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.errors import JobTimeoutError, NucleoSystemError
from nucleo_trio.guardrails import ScopeGuard, TenantScope
from nucleo_trio.heartbeat import FixedInterval
from nucleo_trio.heartbeat.records import Heartbeat, _mint
from nucleo_trio.jobs import (
    JobContext,
    JobRequirements,
    JobSnapshot,
    JobState,
    JobType,
    Tool,
    workflow as new_workflow,
)
from nucleo_trio.observability.jsonl import (
    EVENT_KINDS,
    EventFileError,
    JsonLinesSink,
    RecordedError,
    dumps_event,
    event_from_json,
    event_to_json,
    loads_event,
    read_event_records,
    read_events,
)


class Nightly(Tool[None]):
    """A module-level job class, so a heartbeat naming it can be restored by import path."""

    async def execute(self, context: JobContext) -> None:
        return None


SNAPSHOT = JobSnapshot(
    job_id="Fetch-1a2b3c4d5e6f",
    workflow_id="research-0a0b0c0d0e0f",
    parent_job_id="research-0a0b0c0d0e0f",
    user_id="alice",
    job_class="Fetch",
    job_class_qualname="app.tools.Fetch",
    kind=JobType.TOOL,
    name="Fetch page",
    action="fetching",
    description="Downloads one page.",
    state=JobState.RUNNING,
    attempt_number=2,
    priority=5,
    timeout=30.0,
    metadata={"iteration": 3, "wait_times": {"db": 0.25}, "tags": ["a", "b"]},
    created_at=1_700_000_000.5,
    started_at=1_700_000_001.0,
    ended_at=1_700_000_004.25,
)
AT = 1_700_000_005.125


def _beat(run_at: float = 1_800_000_000.0) -> Heartbeat:
    return _mint(
        Nightly,
        "nightly-report",
        run_at,
        "conv-1",
        {"report": "sales", "days": 7},
        FixedInterval(86400),
        "alice",
        ScopeGuard(TenantScope("acme")),
    )


# One sample of every event class the runtime defines, each field given a value of its own.
SAMPLES: dict[type[ev.JobEvent], Callable[[], ev.JobEvent]] = {
    ev.JobScheduled: lambda: ev.JobScheduled(
        snapshot=SNAPSHOT,
        timestamp=AT,
        state=ev.ScheduledState.QUEUED,
        requirements=JobRequirements()
        .require_rate_limiter(CountingGate("db", 4), 2)
        .require_http()
        .require_memory("1MiB"),
        priority=5,
    ),
    ev.JobStartedEvent: lambda: ev.JobStartedEvent(snapshot=SNAPSHOT, timestamp=AT, attempt=2),
    ev.OrchestratorIdleEvent: lambda: ev.OrchestratorIdleEvent(
        snapshot=SNAPSHOT, timestamp=AT, llm_responses=["hi", {"tokens": 3}], metadata={"k": 1}
    ),
    ev.OrchestratorResumedEvent: lambda: ev.OrchestratorResumedEvent(
        snapshot=SNAPSHOT, timestamp=AT
    ),
    ev.JobCompletedEvent: lambda: ev.JobCompletedEvent(
        snapshot=SNAPSHOT,
        timestamp=AT,
        attempts=2,
        llm_responses=["answer"],
        metadata={"admission_wait_ms": 250},
        completion_time=AT - 1,
        result={"pages": ["a", "b"], "count": 2, "ok": True, "ratio": 0.5},
    ),
    ev.JobFailedEvent: lambda: ev.JobFailedEvent(
        snapshot=SNAPSHOT, timestamp=AT, attempts=1, error=LookupError("no such page")
    ),
    ev.JobTimedOut: lambda: ev.JobTimedOut(snapshot=SNAPSHOT, timestamp=AT, timeout=30.5),
    ev.JobCancelled: lambda: ev.JobCancelled(
        snapshot=SNAPSHOT, timestamp=AT, force=True, message="Cancelled while queued: stop"
    ),
    ev.DependencyFailureEvent: lambda: ev.DependencyFailureEvent(
        snapshot=SNAPSHOT, timestamp=AT, error=JobTimeoutError(30.0)
    ),
    ev.WorkflowCompleteEvent: lambda: ev.WorkflowCompleteEvent(
        snapshot=SNAPSHOT, timestamp=AT, successful=False, reason="Workflow failed: boom"
    ),
    ev.JobProgressEvent: lambda: ev.JobProgressEvent(
        snapshot=SNAPSHOT, timestamp=AT, payload={"done": 3, "of": 10}, percent=30, title="Pages"
    ),
    ev.ContentStreamEvent: lambda: ev.ContentStreamEvent(
        snapshot=SNAPSHOT, timestamp=AT, chunk="The answer is", last=True
    ),
    ev.ToolCallStreamEvent: lambda: ev.ToolCallStreamEvent(
        snapshot=SNAPSHOT, timestamp=AT, index=1, call_id="call_2", name="wea", arguments='{"ci'
    ),
    ev.RateLimitRetryEvent: lambda: ev.RateLimitRetryEvent(
        snapshot=SNAPSHOT, timestamp=AT, attempt=2, delay=12.5, reason="429", model="m-1"
    ),
    ev.TransientErrorRetryEvent: lambda: ev.TransientErrorRetryEvent(
        snapshot=SNAPSHOT, timestamp=AT, attempt=3, delay=None, reason="503", provider="acme"
    ),
    ev.OutputTruncationRetryEvent: lambda: ev.OutputTruncationRetryEvent(
        snapshot=SNAPSHOT,
        timestamp=AT,
        attempt=2,
        reason="length",
        model="m-2",
        previous_budget=512,
        new_budget=1024,
    ),
    ev.ResponseCorrectionRetryEvent: lambda: ev.ResponseCorrectionRetryEvent(
        snapshot=SNAPSHOT, timestamp=AT, attempt=2, reason="bad JSON", model="m-3"
    ),
    ev.UserNotificationEvent: lambda: ev.UserNotificationEvent(
        snapshot=SNAPSHOT,
        timestamp=AT,
        severity=ev.Severity.WARNING,
        title="Slow",
        text="The index is slow today",
        details={"p99_ms": 900},
    ),
    ev.LimiterEvent: lambda: ev.LimiterEvent(
        snapshot=SNAPSHOT,
        timestamp=AT,
        limiter_name="memory",
        limiter_category="memory",
        capacity=math.inf,
        in_use=0.75,
        waiters=3,
        type=LimiterEventType.REJECTED,
        wait=1.5,
        reject_reason="cancelled",
        status_indicator="throttle:2.0x",
        amount=1024,
    ),
    ev.SchedulerEvent: lambda: ev.SchedulerEvent(
        timestamp=AT, type=ev.SchedulerEventType.ERROR, error=RuntimeError("lane died")
    ),
    ev.HeartbeatRequested: lambda: ev.HeartbeatRequested(timestamp=AT, heartbeat=_beat()),
    ev.CancelHeartbeat: lambda: ev.CancelHeartbeat(timestamp=AT, heartbeat_id="nightly-report"),
    ev.HeartbeatScheduled: lambda: ev.HeartbeatScheduled(timestamp=AT, heartbeat=_beat()),
    ev.HeartbeatRebound: lambda: ev.HeartbeatRebound(
        timestamp=AT, heartbeat=_beat(), displaced=_beat(1_700_000_000.0)
    ),
    ev.HeartbeatFired: lambda: ev.HeartbeatFired(
        timestamp=AT, heartbeat=_beat(), job_id="Nightly-00aa11bb22cc"
    ),
    ev.HeartbeatFireFailed: lambda: ev.HeartbeatFireFailed(
        timestamp=AT, heartbeat=_beat(), error=NucleoSystemError("heart", "refused at the door")
    ),
    ev.MessageCompleteEvent: lambda: ev.MessageCompleteEvent(
        snapshot=SNAPSHOT, timestamp=AT, successful=False, error_message="model went away"
    ),
}


def _buildable_event_classes() -> set[type[ev.JobEvent]]:
    """Every event class of nucleo_trio.bus.events that can be built, found by walking the
    module, so a class added there is in this set without anyone listing it."""
    found = set()
    for _, cls in inspect.getmembers(ev, inspect.isclass):
        if not issubclass(cls, ev.JobEvent) or cls.__module__ != ev.__name__:
            continue
        try:
            _ = cls()  # an abstract family refuses before it looks at any field
        except TypeError as exc:
            if "cannot be built on its own" in str(exc):
                continue
        except (ValueError, attrs.exceptions.FrozenInstanceError):
            pass
        found.add(cls)
    return found


def test_every_event_class_has_a_sample_and_a_kind() -> None:
    classes = _buildable_event_classes()
    assert len(classes) >= 26
    missing = sorted(cls.__name__ for cls in classes - set(SAMPLES))
    assert not missing, f"add a sample (and check the round trip) for: {missing}"
    assert set(EVENT_KINDS.values()) == classes
    assert {name: cls.__name__ for name, cls in EVENT_KINDS.items()} == {
        cls.__name__: cls.__name__ for cls in classes
    }


def _field_values(event: ev.JobEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in attrs.fields(type(event)) if f.init}


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda cls: cls.__name__)
def test_an_event_reads_back_as_it_was_written(cls: type[ev.JobEvent]) -> None:
    event = SAMPLES[cls]()
    assert type(event) is cls
    line = dumps_event(event)
    assert "\n" not in line
    data = json.loads(line)
    family = ev.family_of(cls)
    assert data["kind"] == cls.__name__
    assert data["family"] == (None if family is None else family.__name__)
    assert data["message"] == event.message
    assert data["timestamp"] == AT
    back = loads_event(line)
    assert type(back) is cls
    assert back.message == event.message
    assert event_to_json(back) == event_to_json(event)
    for name, value in _field_values(event).items():
        again = getattr(back, name)
        if isinstance(value, BaseException):
            assert isinstance(again, RecordedError)
            assert type(again).__name__ == type(value).__name__
            assert str(again) == str(value)
            module = type(value).__module__
            qualname = type(value).__qualname__
            expected = qualname if module == "builtins" else f"{module}.{qualname}"
            assert again.type_name == expected
        elif name == "requirements":
            assert again == data["requirements"]
        else:
            assert again == value, name


def test_the_field_names_are_the_attribute_names() -> None:
    data = event_to_json(SAMPLES[ev.JobCompletedEvent]())
    assert list(data) == [
        "kind",
        "family",
        "message",
        "snapshot",
        "timestamp",
        "attempts",
        "llm_responses",
        "metadata",
        "completion_time",
        "result",
    ]
    assert data["snapshot"]["kind"] == "TOOL" and data["snapshot"]["state"] == "RUNNING"
    assert set(data["snapshot"]) == {f.name for f in attrs.fields(JobSnapshot)}
    scheduled = event_to_json(SAMPLES[ev.JobScheduled]())
    assert scheduled["requirements"] == {
        "requires_queueing": True,
        "requires_http": True,
        "requires_transaction": False,
        "read_only": False,
        "rate_limiters": [{"limiter": "db", "amount": 2}],
        "databases": [],
        "model_bindings": [],
        "memory_bytes": 1024 * 1024,
    }
    limiter = dumps_event(SAMPLES[ev.LimiterEvent]())
    assert '"capacity": Infinity' in limiter
    assert event_to_json(SAMPLES[ev.JobFailedEvent]())["error"] == {
        "type": "LookupError",
        "message": "no such page",
    }


def test_values_json_cannot_hold_come_back_as_plain_data() -> None:
    @attrs.frozen
    class Page:
        url: str
        words: tuple[str, ...]

    class Opaque:
        def __str__(self) -> str:
            return "<opaque>"

    event = ev.JobCompletedEvent(
        snapshot=SNAPSHOT,
        timestamp=AT,
        result={"page": Page("u", ("a",)), "other": Opaque(), ("x", 1): {2: "two"}},
    )
    back = loads_event(dumps_event(event))
    assert isinstance(back, ev.JobCompletedEvent)
    assert back.result == {
        "page": {"url": "u", "words": ["a"]},
        "other": "<opaque>",
        "('x', 1)": {"2": "two"},
    }


def test_an_application_event_is_named_by_its_path_and_read_back_when_given() -> None:
    @attrs.frozen(kw_only=True)
    class Shipped(ev.NotificationEvent):
        order: str

    event = Shipped(snapshot=SNAPSHOT, timestamp=AT, order="A-1")
    data = event_to_json(event)
    assert data["kind"] == f"{__name__}:{Shipped.__qualname__}"
    assert data["family"] == "NotificationEvent"
    with pytest.raises(ValueError, match="pass its class in kinds="):
        event_from_json(data)
    assert event_from_json(data, kinds=[Shipped]) == event


class Parcel(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@attrs.frozen(kw_only=True)
class Delivered(ev.NotificationEvent):
    """Annotated as strings (this module has ``from __future__ import annotations``)."""

    parcel: Parcel
    weights: tuple[float, ...] = ()


def test_an_application_event_with_string_annotations_reads_back_typed() -> None:
    event = Delivered(snapshot=SNAPSHOT, timestamp=AT, parcel=Parcel.LARGE, weights=(1.5, 2.0))
    data = event_to_json(event)
    assert data["parcel"] == "large" and data["weights"] == [1.5, 2.0]
    back = event_from_json(data, kinds=[Delivered])
    assert back == event and isinstance(back, Delivered) and back.parcel is Parcel.LARGE


def test_a_heartbeat_with_no_import_path_is_written_but_not_restored() -> None:
    class Local(Tool[None]):
        async def execute(self, context: JobContext) -> None:
            return None

    beat = _mint(Local, "local", 1.0e9, None, None, None, "alice", ScopeGuard())
    event = ev.HeartbeatScheduled(timestamp=AT, heartbeat=beat)
    data = event_to_json(event)
    assert data["heartbeat"]["restorable"] is False
    assert data["message"] == event.message
    with pytest.raises(ValueError, match="written without what restores it"):
        event_from_json(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "JobExploded"}, "unknown event kind 'JobExploded'"),
        ({"family": "LifecycleEvent"}, "an event needs its kind, got None"),
        (
            {"kind": "JobStartedEvent", "snapshot": None, "attempt": 1},
            "JobStartedEvent: JobStartedEvent is about a job and needs its snapshot",
        ),
        (
            {"kind": "CancelHeartbeat", "heartbeat_id": "x", "colour": 1},
            r"CancelHeartbeat has no field\(s\) colour",
        ),
        ({"kind": "JobTimedOut", "snapshot": {"job_id": 1}}, r"JobTimedOut\.snapshot: "),
        ({"kind": "JobFailedEvent", "error": "boom"}, r"JobFailedEvent\.error: an error is"),
    ],
)
def test_a_bad_object_is_refused_naming_what_is_wrong(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        event_from_json(data)


def test_a_bad_line_is_refused_naming_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = dumps_event(SAMPLES[ev.JobStartedEvent]())
    path.write_text(f"{good}\n\n{good}\nnot json\n", encoding="utf-8")
    with pytest.raises(EventFileError, match=rf"{path}:4: not JSON"):
        list(read_events(path))
    path.write_text(f'{good}\n["a list"]\n', encoding="utf-8")
    with pytest.raises(EventFileError, match=rf"{path}:2: not an event"):
        list(read_event_records(path))
    path.write_text('{"kind": "Nope"}\n', encoding="utf-8")
    with pytest.raises(EventFileError, match=rf"{path}:1: unknown event kind 'Nope'"):
        list(read_events(path))


# -- the sink on a real bus ---------------------------------------------------------------------


class Fetch(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        context.publish("half way", 50)
        await trio.sleep(1)
        return "<html>"


class Broken(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        raise LookupError("no such page")


async def test_the_sink_writes_what_the_bus_carries_in_order(
    tmp_path: Path, autojump_clock: Any
) -> None:
    path = tmp_path / "run.jsonl"
    heard: list[ev.JobEvent] = []
    with JsonLinesSink(path) as sink:
        async with open_dispatcher() as dispatcher:
            sink.attach(dispatcher.bus)
            dispatcher.bus.subscribe(heard.append)
            root = new_workflow("alice", "sink")
            assert await dispatcher.submit(Fetch(root)).result() == "<html>"
            with pytest.raises(LookupError):
                await dispatcher.submit(Broken(root)).result()
    assert sink.written == len(heard) > 0
    back = list(read_events(path))
    assert [type(e) for e in back] == [type(e) for e in heard]
    assert [e.message for e in back] == [e.message for e in heard]
    assert [event_to_json(e) for e in back] == [event_to_json(e) for e in heard]
    kinds = {type(e) for e in back}
    assert {ev.JobProgressEvent, ev.JobCompletedEvent, ev.JobFailedEvent} <= kinds
    with pytest.raises(RuntimeError, match="is closed"):
        sink.write(heard[0])


def test_the_sink_writes_to_a_stream_it_does_not_close() -> None:
    stream = io.StringIO()
    sink = JsonLinesSink(stream)
    sink.write(SAMPLES[ev.JobStartedEvent]())
    sink.close()
    assert not stream.closed
    assert json.loads(stream.getvalue())["kind"] == "JobStartedEvent"


def test_the_sink_refuses_what_it_cannot_write_to(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        JsonLinesSink(tmp_path / "missing" / "events.jsonl")
    with pytest.raises(TypeError, match="a path or a text stream, got int"):
        JsonLinesSink(3)  # type: ignore[arg-type]


# -- the command ---------------------------------------------------------------------------------


@pytest.fixture
def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    other = attrs.evolve(SNAPSHOT, job_id="Other-000000000000", workflow_id="other-wf")
    events = [
        SAMPLES[ev.JobStartedEvent](),
        SAMPLES[ev.JobProgressEvent](),
        ev.JobStartedEvent(snapshot=other, timestamp=AT + 1, attempt=1),
        SAMPLES[ev.LimiterEvent](),
        SAMPLES[ev.JobFailedEvent](),
        SAMPLES[ev.HeartbeatFired](),
        SAMPLES[ev.SchedulerEvent](),
    ]
    with JsonLinesSink(path) as sink:
        for event in events:
            sink.write(event)
    return path


def test_events_prints_every_event_one_line_each(
    events_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events", str(events_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7
    assert lines[0] == (
        "2023-11-14T22:13:25.125Z  JobStartedEvent      Fetch-1a2b3c4d5e6f  Job started (attempt 2)"
    )
    assert lines[5].split()[1:3] == ["HeartbeatFired", "-"]
    assert lines[6].endswith("Scheduler error: lane died")


@pytest.mark.parametrize(
    ("flags", "kinds"),
    [
        (["--kind", "JobStartedEvent"], ["JobStartedEvent", "JobStartedEvent"]),
        (
            ["--kind", "jobfailedevent", "--kind", "LimiterEvent"],
            ["LimiterEvent", "JobFailedEvent"],
        ),
        (["--family", "lifecycle"], ["JobStartedEvent", "JobStartedEvent", "JobFailedEvent"]),
        (
            ["--family", "HeartbeatEvent", "--family", "system"],
            ["HeartbeatFired", "SchedulerEvent"],
        ),
        (["--job", "Other-000000000000"], ["JobStartedEvent"]),
        (["--job", "Nightly-00aa11bb22cc"], ["HeartbeatFired"]),
        (["--workflow", "research-0a0b0c0d0e0f", "--family", "progress"], ["JobProgressEvent"]),
    ],
)
def test_events_filters_by_kind_family_job_and_workflow(
    events_file: Path, flags: list[str], kinds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events", str(events_file), *flags]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == kinds


def test_events_json_prints_the_matching_lines_as_written(
    events_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events", str(events_file), "--json", "--kind", "JobFailedEvent"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert isinstance(loads_event(line), ev.JobFailedEvent)


def test_events_refuses_a_missing_file_an_unknown_name_and_a_bad_line(
    events_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events", str(tmp_path / "none.jsonl")]) == 1
    assert "none.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["events", str(events_file), "--kind", "JobExploded"])
    assert exited.value.code == 2
    assert "unknown kind 'JobExploded'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["events", str(events_file), "--family", "weather"])
    assert "unknown family 'weather'" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(events_file.read_text(encoding="utf-8") + "{oops\n", encoding="utf-8")
    assert main(["events", str(bad)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}:8: not JSON" in captured.err
    assert len(captured.out.splitlines()) == 7  # what came before the bad line was printed


def test_the_demo_writes_its_events_without_changing_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def report() -> list[str]:
        # The real seconds the run took differ from run to run.
        return [line for line in capsys.readouterr().out.splitlines() if "real time" not in line]

    assert main(["demo", "--jobs", "20"]) == 0
    without = report()
    path = tmp_path / "demo.jsonl"
    assert main(["demo", "--jobs", "20", "--events", str(path)]) == 0
    assert report() == without
    events = list(read_events(path))
    terminal = [e for e in events if isinstance(e, ev.TerminalEvent)]
    assert len(terminal) == 21  # the twenty jobs and the orchestrator that fanned them out
    assert isinstance(events[0], ev.SchedulerEvent) and events[0].message == "Job scheduler started"
    assert main(["events", str(path), "--family", "lifecycle", "--kind", "JobTimedOut"]) == 0
    assert "Job timed out after" in capsys.readouterr().out


def test_the_demo_refuses_an_events_file_in_a_missing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "missing" / "demo.jsonl"
    assert main(["demo", "--jobs", "10", "--events", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"nucleo-trio demo: --events {path}: the directory {path.parent} does not exist\n"
    )
