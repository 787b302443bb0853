"""Observability: what the runtime tells about itself beyond the event bus.

``health`` holds the :class:`HealthSnapshot` (what :meth:`JobDispatcher.health()
<nucleo_trio.dispatch.JobDispatcher.health>` answers) and the :class:`SystemHealthReporter`, a
bus observer that logs one every 50 events. ``event_logger`` holds the :class:`EventLogger`, a
bus observer that writes every event but limiter events to :mod:`logging` under
``nucleo_trio.events``. ``recorder`` holds the :class:`TrajectoryRecorder`,
which keeps every job's snapshot in SQLite, and ``trajectory`` reads a recorded workflow back in
call order (:func:`trajectory`, :func:`render_trajectory`). ``control`` holds the control
socket a dispatcher serves its :class:`LiveSnapshot` on when ``control_socket`` is configured,
and :func:`request_snapshot`, which reads it; ``top`` draws it (``nucleo-trio top``).
``jsonl`` holds the :class:`JsonLinesSink`, a bus observer that writes every event to a file as
one JSON object a line, and the readers that rebuild the events (:func:`read_events`).
"""

from .control import (
    ControlServer as ControlServer,
    ControlSocketError as ControlSocketError,
    FailureRow as FailureRow,
    LiveSnapshot as LiveSnapshot,
    ParkedRow as ParkedRow,
    RunningRow as RunningRow,
    check_socket_directory as check_socket_directory,
    live_snapshot as live_snapshot,
    request_snapshot as request_snapshot,
)
from .event_logger import (
    EVENT_LOGGER_ROOT as EVENT_LOGGER_ROOT,
    NO_WORKFLOW as NO_WORKFLOW,
    SYSTEM_PREFIX as SYSTEM_PREFIX,
    EventLogger as EventLogger,
    WorkflowIdFilter as WorkflowIdFilter,
    current_workflow_id as current_workflow_id,
    shorten_workflow_id as shorten_workflow_id,
)
from .health import (
    DEFAULT_HEALTH_EVERY as DEFAULT_HEALTH_EVERY,
    GRANT_WINDOW as GRANT_WINDOW,
    SNAPSHOT_TITLE as SNAPSHOT_TITLE,
    CpuLoad as CpuLoad,
    HealthSnapshot as HealthSnapshot,
    LimiterRow as LimiterRow,
    QueueSizes as QueueSizes,
    SystemHealthReporter as SystemHealthReporter,
    capture_health as capture_health,
    is_health_event as is_health_event,
    memory_summary as memory_summary,
    read_cpu_load as read_cpu_load,
)
from .jsonl import (
    EVENT_KINDS as EVENT_KINDS,
    EventFileError as EventFileError,
    ForeignError as ForeignError,
    JsonLinesSink as JsonLinesSink,
    RecordedError as RecordedError,
    dumps_event as dumps_event,
    event_from_json as event_from_json,
    event_kind as event_kind,
    event_to_json as event_to_json,
    loads_event as loads_event,
    read_event_records as read_event_records,
    read_events as read_events,
)
from .recorder import RECORDER_SCHEMA as RECORDER_SCHEMA, TrajectoryRecorder as TrajectoryRecorder
from .trajectories import (
    INDENTED_LEVELS as INDENTED_LEVELS,
    RecordingError as RecordingError,
    Trajectory as Trajectory,
    TrajectoryStep as TrajectoryStep,
    WorkflowSummary as WorkflowSummary,
    open_recording as open_recording,
    recorded_workflows as recorded_workflows,
    render_trajectory as render_trajectory,
    trajectory as trajectory,
)

__all__ = [
    "DEFAULT_HEALTH_EVERY",
    "EVENT_KINDS",
    "EVENT_LOGGER_ROOT",
    "GRANT_WINDOW",
    "INDENTED_LEVELS",
    "NO_WORKFLOW",
    "RECORDER_SCHEMA",
    "SNAPSHOT_TITLE",
    "SYSTEM_PREFIX",
    "ControlServer",
    "ControlSocketError",
    "CpuLoad",
    "EventFileError",
    "EventLogger",
    "FailureRow",
    "ForeignError",
    "HealthSnapshot",
    "JsonLinesSink",
    "LimiterRow",
    "LiveSnapshot",
    "ParkedRow",
    "QueueSizes",
    "RecordedError",
    "RecordingError",
    "RunningRow",
    "SystemHealthReporter",
    "Trajectory",
    "TrajectoryRecorder",
    "TrajectoryStep",
    "WorkflowIdFilter",
    "WorkflowSummary",
    "capture_health",
    "check_socket_directory",
    "current_workflow_id",
    "dumps_event",
    "event_from_json",
    "event_kind",
    "event_to_json",
    "is_health_event",
    "live_snapshot",
    "loads_event",
    "memory_summary",
    "open_recording",
    "read_cpu_load",
    "read_event_records",
    "read_events",
    "recorded_workflows",
    "render_trajectory",
    "request_snapshot",
    "shorten_workflow_id",
    "trajectory",
]
