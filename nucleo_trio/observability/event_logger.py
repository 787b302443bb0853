"""Every event the runtime tells, written to the standard :mod:`logging` tree.

The :class:`EventLogger` is a bus observer that turns each event into one log record. It is
the quickest way to see what a dispatcher does: subscribe it (or set
``DispatcherConfig(log_events=True)``) and configure logging as usual::

    logging.getLogger("nucleo_trio.events").setLevel(logging.INFO)
    dispatcher.bus.subscribe(EventLogger())

On which logger, at which level and in which words each event is written, see
:class:`EventLogger`.

**The workflow id in a formatter.** The workflow id reaches a log line two ways. Every record
this module writes carries ``workflow_id`` (the whole id, or ``"-"`` for an event with no
workflow), ``job_id`` (or ``"-"``) and ``event`` as attributes, so a format string may say
``%(workflow_id)s``. And while a line is being written, :func:`current_workflow_id` answers its
workflow id, for filters and handlers to read. Add a :class:`WorkflowIdFilter` to a handler
that also receives other records, and each gets a ``workflow_id`` too: the line's, else the
running job's, else ``"-"``.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Final

from ..bus.events import (
    ContentStreamEvent,
    FailureEvent,
    HeartbeatEvent,
    JobEvent,
    LifecycleEvent,
    NotificationEvent,
    OperationalEvent,
    ProgressEvent,
    RetryEvent,
    Severity,
    SystemEvent,
    WorkflowTerminationEvent,
)
from ..bus.observers import JobObserver
from ..errors import LLMReadableError
from ..jobs.context import current_job

__all__ = [
    "EVENT_LOGGER_ROOT",
    "NO_WORKFLOW",
    "SYSTEM_PREFIX",
    "EventLogger",
    "WorkflowIdFilter",
    "current_workflow_id",
    "shorten_workflow_id",
]

EVENT_LOGGER_ROOT: Final = "nucleo_trio.events"
"""The logger every :class:`EventLogger` line is written under."""

SYSTEM_PREFIX: Final = "[SYSTEM] "
"""How the line of an event with no snapshot (one about no job) begins."""

NO_WORKFLOW: Final = "-"
"""The ``workflow_id`` (and ``job_id``) of a record about no workflow (and no job)."""

_SHORT_AFTER: Final = 15
_HEAD, _TAIL = 10, 4

_writing: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "nucleo_trio_event_log_workflow", default=None
)


def shorten_workflow_id(workflow_id: str) -> str:
    """The workflow id as a line shows it: whole up to 15 characters, else its first 10, an
    ellipsis and its last 4 (15 characters in all)."""
    if len(workflow_id) <= _SHORT_AFTER:
        return workflow_id
    return f"{workflow_id[:_HEAD]}\u2026{workflow_id[-_TAIL:]}"


def current_workflow_id() -> str | None:
    """The workflow id of the event line being written now, else of the job whose task runs
    now, else ``None``. Filters and handlers read it; :class:`WorkflowIdFilter` copies it onto
    records."""
    # OBS-19
    writing = _writing.get()
    if writing is not None:
        return writing
    context = current_job()
    return context.workflow_id if context is not None else None


class WorkflowIdFilter(logging.Filter):
    """Gives every record a ``workflow_id`` attribute, so one format string fits all records.

    A record that already has one (every :class:`EventLogger` record does) keeps it; any other
    gets :func:`current_workflow_id`, or ``"-"``. It never drops a record. Add it to a handler::

        handler.addFilter(WorkflowIdFilter())
        handler.setFormatter(logging.Formatter("%(workflow_id)s %(name)s %(message)s"))
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Set ``record.workflow_id`` unless it has one; always ``True`` (keep the record)."""
        if not hasattr(record, "workflow_id"):
            record.workflow_id = current_workflow_id() or NO_WORKFLOW
        return True


_NOTIFICATION_LEVELS: Final = {
    Severity.INFO: logging.DEBUG,
    Severity.SUCCESS: logging.DEBUG,
    Severity.WARNING: logging.WARNING,
    Severity.ERROR: logging.ERROR,
}


def _segment(event: JobEvent) -> tuple[str, int]:
    # Failures are lifecycle events and stream chunks progress events: the narrower goes first.
    if isinstance(event, FailureEvent):
        return "failure", logging.WARNING
    if isinstance(event, LifecycleEvent):
        return "lifecycle", logging.INFO
    if isinstance(event, RetryEvent):
        return "retry", logging.DEBUG
    if isinstance(event, WorkflowTerminationEvent):
        return "workflow", logging.INFO
    if isinstance(event, ContentStreamEvent):
        return "stream", logging.DEBUG
    if isinstance(event, ProgressEvent):
        return "progress", logging.DEBUG
    if isinstance(event, NotificationEvent):
        severity = getattr(event, "severity", None)
        if isinstance(severity, Severity):
            return "notification", _NOTIFICATION_LEVELS[severity]
        return "notification", logging.INFO
    if isinstance(event, SystemEvent):
        return "system", logging.INFO
    if isinstance(event, HeartbeatEvent):
        return "heartbeat", logging.INFO
    return "event", logging.INFO


def _is_logged(event: JobEvent) -> bool:
    return not isinstance(event, OperationalEvent)


class EventLogger(JobObserver[JobEvent]):
    """A bus observer that logs every event but limiter events, one record each.

    All instances are equal (and hash alike), so however many are subscribed to one bus, the
    bus keeps one subscription and each event is logged once.

    **Which logger.** A job's event is written on ``nucleo_trio.events.<job class>.<segment>``,
    where ``<job class>`` is the job's fully qualified class name (``myapp.tools.Fetch``) and
    ``<segment>`` names what kind of event it is. An event that belongs to no job (a scheduler
    or heartbeat event) is written on ``nucleo_trio.events.<segment>``. So the one logger
    ``nucleo_trio.events`` (:data:`EVENT_LOGGER_ROOT`) governs them all, one grep and one
    ``setLevel`` away; ``nucleo_trio.events.myapp.tools.Fetch`` one job class; and
    ``nucleo_trio.events.myapp.tools.Fetch.progress`` one kind of event of that class.

    **Which level**, by segment:

    * ``failure``, WARNING: a :class:`~nucleo_trio.bus.FailureEvent` (a job failed, timed out,
      or lost a dependency);
    * ``lifecycle``, INFO: the other lifecycle events (scheduled, started, completed, cancelled,
      idle, resumed);
    * ``retry``, DEBUG: the four retry events;
    * ``workflow``, INFO: :class:`~nucleo_trio.bus.WorkflowCompleteEvent`;
    * ``stream``, DEBUG: :class:`~nucleo_trio.bus.ContentStreamEvent`;
    * ``progress``, DEBUG: the other progress events;
    * ``notification``, by severity: a :class:`~nucleo_trio.bus.UserNotificationEvent` of INFO
      or SUCCESS at DEBUG, WARNING at WARNING, ERROR at ERROR (INFO for one that names no
      severity);
    * ``system``, INFO: :class:`~nucleo_trio.bus.SchedulerEvent`;
    * ``heartbeat``, INFO: the six heartbeat events;
    * ``event``, INFO: anything else (a chat message's completion, an application's own events).

    Limiter events (the :class:`~nucleo_trio.bus.OperationalEvent` family) are skipped: there
    are several per admission, and the health reporter is their reader.

    **The line.** ``[<workflow id>] <job name> (<job id>): <message>``, the workflow id cut to
    its first 10 and last 4 characters when it is longer than 15 (``research-4…9c2e``). An
    event with no snapshot reads ``[SYSTEM] <message>``. An event with no message is named by
    its class. A failure whose error is not an :class:`~nucleo_trio.errors.LLMReadableError`
    carries the error's stack trace; an LLM-readable error is an answer the model reads, not a
    bug, so it gets none.

    Every record carries ``workflow_id``, ``job_id`` (``"-"`` when there is none) and ``event``
    as attributes, for a format string such as ``%(workflow_id)s``.

    :meth:`log_event` writes one event directly, without a bus. Nothing is formatted for a
    logger that is not enabled for the event's level, so a subscribed logger whose output is
    switched off costs a lookup per event.
    """

    # OBS-17 (one subscription however many are added), OBS-18 (loggers and levels), OBS-19

    def __init__(self) -> None:
        self._loggers: dict[tuple[str | None, str], logging.Logger] = {}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLogger):
            return type(other) is type(self)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def predicate(self) -> Callable[[JobEvent], bool]:
        """Every event but the operational ones (limiter events)."""
        return _is_logged

    async def on_event(self, event: JobEvent) -> None:
        self.log_event(event)

    def route(self, event: JobEvent) -> tuple[logging.Logger, int] | None:
        """The logger and level ``event`` is written at, or ``None`` for an event it skips."""
        if not _is_logged(event):
            return None
        segment, level = _segment(event)
        snapshot = event.snapshot
        job_class = snapshot.job_class_qualname if snapshot is not None else None
        logger = self._loggers.get((job_class, segment))
        if logger is None:
            name = (
                f"{EVENT_LOGGER_ROOT}.{segment}"
                if job_class is None
                else f"{EVENT_LOGGER_ROOT}.{job_class}.{segment}"
            )
            logger = self._loggers[(job_class, segment)] = logging.getLogger(name)
        return logger, level

    @staticmethod
    def line(event: JobEvent) -> str:
        """The text of ``event``'s record, as the module docstring describes it."""
        text = event.message
        if text is None:
            text = type(event).__name__
        snapshot = event.snapshot
        if snapshot is None:
            return f"{SYSTEM_PREFIX}{text}"
        workflow = shorten_workflow_id(snapshot.workflow_id)
        return f"[{workflow}] {snapshot.name} ({snapshot.job_id}): {text}"

    def log_event(self, event: JobEvent) -> None:
        """Write ``event`` on its logger at its level; do nothing for a limiter event."""
        routed = self.route(event)
        if routed is None:
            return
        logger, level = routed
        if not logger.isEnabledFor(level):
            return
        snapshot = event.snapshot
        workflow_id = snapshot.workflow_id if snapshot is not None else None
        error = getattr(event, "error", None) if isinstance(event, FailureEvent) else None
        trace = error if error is not None and not isinstance(error, LLMReadableError) else None
        token = _writing.set(workflow_id)
        try:
            logger.log(
                level,
                "%s",
                self.line(event),
                exc_info=trace,
                extra={
                    "workflow_id": workflow_id or NO_WORKFLOW,
                    "job_id": snapshot.job_id if snapshot is not None else NO_WORKFLOW,
                    "event": event,
                },
            )
        finally:
            _writing.reset(token)
