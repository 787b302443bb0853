"""Observability: what the runtime tells about itself beyond the event bus.

``health`` holds the :class:`HealthSnapshot` (what :meth:`JobDispatcher.health()
<nucleo_trio.dispatch.JobDispatcher.health>` answers) and the :class:`SystemHealthReporter`, a
bus observer that logs one every 50 events.
"""

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

__all__ = [
    "DEFAULT_HEALTH_EVERY",
    "GRANT_WINDOW",
    "SNAPSHOT_TITLE",
    "CpuLoad",
    "HealthSnapshot",
    "LimiterRow",
    "QueueSizes",
    "SystemHealthReporter",
    "capture_health",
    "is_health_event",
    "memory_summary",
    "read_cpu_load",
]
