"""The bus observer that turns a dispatcher's events into OpenTelemetry spans and metrics.

One span per job, opened when the job's first attempt starts and ended by its terminal event,
carrying the job's attributes, its admission transitions and its model usage; every re-run is a
child span of the job's span. The metrics are in :mod:`nucleo_trio_otel.metrics`.

Where a span's parent comes from
--------------------------------
The bus routes an event synchronously, in the task that publishes it, and calls each
subscription's predicate there; only the delivery to :meth:`on_event` happens later, in
the observer's own task. The observer's predicate uses that instant for the two things that must
happen in the publisher's task:

* when ``dispatcher.submit`` publishes :class:`~nucleo_trio.bus.JobScheduled`, it keeps the
  submitter's current OpenTelemetry context: the job's span will be its child;
* when the job's own task publishes :class:`~nucleo_trio.bus.JobStartedEvent`, it opens the
  job's span (or a re-run's span) and makes it current in that task, so spans the job's code
  opens, and jobs it submits, are its children.

Everything else (events, attributes, the status, the end) is done at delivery, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Any

import trio
from opentelemetry import context as otel_context, metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from nucleo_trio.bus import (
    AbstractTerminalEvent,
    DependencyFailureEvent,
    JobCancelled,
    JobCompletedEvent,
    JobEvent,
    JobFailedEvent,
    JobObserver,
    JobScheduled,
    JobStartedEvent,
    JobTimedOut,
    LimiterEvent,
    RetryEvent,
    TerminalEvent,
)
from nucleo_trio.jobs import JobSnapshot, current_job

from .metrics import INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, DispatcherMetrics

if TYPE_CHECKING:
    from nucleo_trio.dispatch import JobDispatcher

__all__ = ["OpenTelemetryObserver"]

log = logging.getLogger(__name__)


def _ns(seconds: float) -> int:
    """A wall-clock event timestamp (``time.time()`` seconds) in nanoseconds, as spans take it."""
    return int(seconds * 1_000_000_000)


def _start_attributes(snapshot: JobSnapshot, attempt: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "job.id": snapshot.job_id,
        "workflow.id": snapshot.workflow_id,
        "user.id": snapshot.user_id,
        "job.class": snapshot.job_class_qualname,
        "job.type": snapshot.kind.value,
        "job.display_name": snapshot.name,
        "job.attempt": attempt,
        "job.priority": snapshot.priority,
    }
    if snapshot.parent_job_id is not None:
        attributes["job.parent_id"] = snapshot.parent_job_id
    if snapshot.action:
        attributes["job.action"] = snapshot.action
    return attributes


def _limiter_attributes(event: LimiterEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "limiter.name": event.limiter_name,
        "limiter.category": event.limiter_category,
        "limiter.type": event.type.value,
        "limiter.in_use": event.in_use,
        "limiter.capacity": event.capacity,
        "limiter.waiters": event.waiters,
        "limiter.amount": event.amount,
    }
    if event.wait > 0:
        attributes["limiter.wait_ms"] = event.wait * 1000.0
    if event.reject_reason is not None:
        attributes["limiter.reject_reason"] = event.reject_reason
    if event.status_indicator is not None:
        attributes["limiter.status"] = event.status_indicator
    return attributes


def _llm_attributes(responses: tuple[Any, ...]) -> dict[str, Any]:
    """The ``llm.*`` end attributes, summed over the job's LLM responses (read by duck typing: a
    response has ``model``, ``duration`` in seconds and a ``usage`` with token counts)."""
    totals = dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), 0
    )
    latency = 0.0
    models: list[str] = []
    for response in responses:
        usage = getattr(response, "usage", None)
        for field in totals:
            value = getattr(usage, field, 0)
            if isinstance(value, int) and not isinstance(value, bool):
                totals[field] += value
        duration = getattr(response, "duration", None)
        if isinstance(duration, int | float) and not isinstance(duration, bool):
            latency += float(duration)
        model = getattr(response, "model", None)
        if isinstance(model, str) and model and model not in models:
            models.append(model)
    return {
        "llm.calls": len(responses),
        "llm.input_tokens": totals["input_tokens"],
        "llm.output_tokens": totals["output_tokens"],
        "llm.cache_read_tokens": totals["cache_read_tokens"],
        "llm.cache_creation_tokens": totals["cache_write_tokens"],
        "llm.latency_ms": latency * 1000.0,
        "llm.models": models,
    }


class _Traced:
    """One job's span, and the spans of its re-runs not yet ended.

    A re-run's span opens when its start is published and ends when the next signal is
    delivered: the two happen in different tasks, so an attempt's span is found by its number
    (a retry event names the attempt it is about to run), never by "the latest one".
    """

    __slots__ = ("span", "reruns", "name")

    def __init__(self, span: Span, name: str) -> None:
        self.span = span
        self.reruns: dict[int, Span] = {}
        """The re-runs' spans not yet ended, by attempt."""
        self.name = name


def check_providers(
    owner: str,
    tracer_provider: trace.TracerProvider | None,
    meter_provider: metrics.MeterProvider | None,
) -> None:
    """Refuse a provider of the wrong kind, naming ``owner``'s argument and what was given."""
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise TypeError(
            f"{owner}(tracer_provider=...) takes an opentelemetry.trace.TracerProvider, got "
            f"{type(tracer_provider).__name__}"
        )
    if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
        raise TypeError(
            f"{owner}(meter_provider=...) takes an opentelemetry.metrics.MeterProvider, got "
            f"{type(meter_provider).__name__}"
        )


class OpenTelemetryObserver(JobObserver[JobEvent]):
    """Traces the jobs of one dispatcher and reports its metrics through OpenTelemetry.

    Subscribe it to every event of the dispatcher's bus; the ``nucleo-trio-otel`` plugin does
    that for every dispatcher once the program configured an OpenTelemetry SDK (see
    :mod:`nucleo_trio_otel.plugin`), and a program may do it by hand::

        dispatcher.bus.subscribe(OpenTelemetryObserver(dispatcher, tracer_provider=provider))

    ``tracer_provider`` and ``meter_provider`` default to the global ones
    (``opentelemetry.trace.get_tracer_provider()`` and its metrics twin), which do nothing
    until the program sets an SDK provider.

    Spans: one ``INTERNAL`` span per job, named by its display name, opened by
    its first :class:`~nucleo_trio.bus.JobStartedEvent` and ended by its terminal event. Its
    parent is the span that was current where the job was submitted (in a job's code, that is
    the job's own span, or a span the code opened inside it), else its parent job's span. It
    carries ``job.id``, ``job.parent_id``, ``workflow.id``, ``user.id``, ``job.class``,
    ``job.type``, ``job.display_name``, ``job.action``, ``job.attempt`` and ``job.priority``;
    each admission transition of the job as a span event ``limiter.<type>`` (``limiter.held``,
    ``limiter.granted_from_hold`` with ``limiter.wait_ms``, ...); each re-run signal as a span
    event ``retry``, and each re-run as a child span ``<name> re-run <attempt>``. At the end it
    sets ``job.state``, ``job.attempts`` and, when the job called models, the ``llm.*`` usage
    totals; the status is ``ERROR`` (with the exception recorded) for a failure or a timeout
    and ``OK`` otherwise. A job refused at the door or cancelled before it started has no span.
    """

    def __init__(
        self,
        dispatcher: JobDispatcher,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        check_providers("OpenTelemetryObserver", tracer_provider, meter_provider)
        self._dispatcher = dispatcher
        self._tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, tracer_provider=tracer_provider
        )
        self.metrics = DispatcherMetrics(dispatcher, meter_provider=meter_provider)
        """The dispatcher's instruments (see :class:`~nucleo_trio_otel.metrics.DispatcherMetrics`)."""
        self._submitted: dict[str, otel_context.Context] = {}
        self._spans: dict[str, _Traced] = {}
        self._pending: dict[str, list[LimiterEvent]] = {}
        self._attached: dict[str, tuple[trio.lowlevel.Task, Token[otel_context.Context]]] = {}

    # -- in the publisher's task ------------------------------------------------------------------

    @property
    def predicate(self) -> Callable[[JobEvent], bool]:
        """Accepts every event. It runs in the task that publishes each event, so on
        :class:`~nucleo_trio.bus.JobScheduled` it keeps the submitter's OpenTelemetry context
        (the job's span becomes its child), and on :class:`~nucleo_trio.bus.JobStartedEvent`
        it opens the job's span and makes it current in the job's own task."""
        return self._at_publish

    def _at_publish(self, event: JobEvent) -> bool:
        kind = type(event)
        if kind is JobScheduled:
            assert event.snapshot is not None
            self._submitted[event.snapshot.job_id] = otel_context.get_current()
        elif kind is JobStartedEvent:
            assert isinstance(event, JobStartedEvent)
            self._open(event)
        elif self._attached and isinstance(event, TerminalEvent) and event.snapshot is not None:
            self._detach(event.snapshot.job_id)
        return True

    def _parent_of(self, snapshot: JobSnapshot) -> otel_context.Context:
        submitted = self._submitted.pop(snapshot.job_id, None)
        if submitted is not None and trace.get_current_span(submitted).get_span_context().is_valid:
            return submitted
        parent = self._spans.get(snapshot.parent_job_id or "")
        if parent is not None:
            return trace.set_span_in_context(parent.span)
        # A root span, even if the publishing task has a current span of its own.
        return otel_context.Context()

    def _open(self, event: JobStartedEvent) -> None:
        snapshot = event.snapshot
        assert snapshot is not None
        traced = self._spans.get(snapshot.job_id)
        start = _ns(event.timestamp)
        if traced is None:
            span = self._tracer.start_span(
                snapshot.name,
                context=self._parent_of(snapshot),
                kind=SpanKind.INTERNAL,
                attributes=_start_attributes(snapshot, event.attempt),
                start_time=start,
            )
            traced = self._spans[snapshot.job_id] = _Traced(span, snapshot.name)
            current = span
        else:
            # A re-run (OBS-22: not a new job span): a child of the job's span.
            traced.span.set_attribute("job.attempt", event.attempt)
            current = traced.reruns[event.attempt] = self._tracer.start_span(
                f"{traced.name} re-run {event.attempt}",
                context=trace.set_span_in_context(traced.span),
                kind=SpanKind.INTERNAL,
                attributes={"job.id": snapshot.job_id, "job.attempt": event.attempt},
                start_time=start,
            )
        running = current_job()
        if running is not None and running.job_id == snapshot.job_id:
            # The job's own task: its code and the jobs it submits see the span as current.
            token = otel_context.attach(trace.set_span_in_context(current))
            # The first token restores what the task had before the job (a re-run's attach
            # needs no detach of its own: resetting to before the first undoes both).
            self._attached.setdefault(snapshot.job_id, (trio.lowlevel.current_task(), token))

    def _detach(self, job_id: str) -> None:
        """The job's terminal event is being published: if that happens in the task its span
        was made current in, the task gets its own context back (a task that goes on to other
        work does not carry the job's span along)."""
        attached = self._attached.pop(job_id, None)
        if attached is not None and attached[0] is trio.lowlevel.current_task():
            otel_context.detach(attached[1])

    # -- at delivery ----------------------------------------------------------------------------

    async def on_event(self, event: JobEvent) -> None:
        """Record ``event`` on its job's span and in the metrics."""
        self.metrics.record(event)
        snapshot = event.snapshot
        if snapshot is None:
            return
        job_id = snapshot.job_id
        if isinstance(event, LimiterEvent):
            traced = self._spans.get(job_id)
            if traced is None or job_id in self._pending:
                # Admission comes before the start that opens the span: kept, in order, until
                # that start is delivered (the span may open meanwhile, when it is published).
                self._pending.setdefault(job_id, []).append(event)
            else:
                self._add_limiter_event(traced.span, event)
        elif isinstance(event, JobStartedEvent):
            traced = self._spans.get(job_id)
            if traced is not None:
                for held in self._pending.pop(job_id, ()):
                    self._add_limiter_event(traced.span, held)
        elif isinstance(event, RetryEvent):
            self._retry(job_id, event)
        elif isinstance(event, TerminalEvent) and (
            isinstance(event, AbstractTerminalEvent | DependencyFailureEvent)
        ):
            self._end(job_id, event)

    @staticmethod
    def _add_limiter_event(span: Span, event: LimiterEvent) -> None:
        span.add_event(
            f"limiter.{event.type.value.lower()}",
            attributes=_limiter_attributes(event),
            timestamp=_ns(event.timestamp),
        )

    def _retry(self, job_id: str, event: RetryEvent) -> None:
        traced = self._spans.get(job_id)
        if traced is None:
            return
        attributes: dict[str, Any] = {"retry.kind": type(event).__name__}
        for field in ("attempt", "delay", "reason", "model", "provider"):
            value = getattr(event, field, None)
            if value is not None:
                attributes[f"retry.{field}"] = value
        traced.span.add_event("retry", attributes=attributes, timestamp=_ns(event.timestamp))
        # The signal ended the attempt before the one it is about to run (every retry event
        # the dispatcher publishes names that one).
        attempt = attributes.get("retry.attempt")
        ended = traced.reruns.pop(attempt - 1, None) if isinstance(attempt, int) else None
        if ended is not None:
            ended.set_status(Status(StatusCode.ERROR, str(attributes.get("retry.reason"))))
            ended.end(end_time=_ns(event.timestamp))

    def _end(self, job_id: str, event: TerminalEvent) -> None:
        self._submitted.pop(job_id, None)
        self._pending.pop(job_id, None)
        self._attached.pop(job_id, None)  # settled by another task: its context ends with it
        traced = self._spans.pop(job_id, None)
        if traced is None:
            return  # never started: no span (OBS-22)
        span = traced.span
        snapshot = event.snapshot
        assert snapshot is not None
        end = _ns(event.timestamp)
        attributes: dict[str, Any] = {"job.state": snapshot.state.value}
        if isinstance(event, AbstractTerminalEvent):
            attributes["job.attempts"] = event.attempts
            if event.llm_responses:
                attributes.update(_llm_attributes(event.llm_responses))
        span.set_attributes(attributes)
        error = getattr(event, "error", None)
        if isinstance(event, JobFailedEvent | DependencyFailureEvent):
            description = f"{type(error).__name__}: {error}" if error is not None else event.message
            if isinstance(error, BaseException):
                span.record_exception(error, timestamp=end)
            status = Status(StatusCode.ERROR, description)
        elif isinstance(event, JobTimedOut):
            status = Status(StatusCode.ERROR, event.message)
        else:
            assert isinstance(event, JobCompletedEvent | JobCancelled)
            status = Status(StatusCode.OK)
        for rerun in traced.reruns.values():
            rerun.set_status(status)
            rerun.end(end_time=end)
        span.set_status(status)
        span.end(end_time=end)

    @property
    def open_spans(self) -> Mapping[str, Span]:
        """The spans of the jobs that started and have not ended, by job id."""
        return {job_id: traced.span for job_id, traced in self._spans.items()}

    def __repr__(self) -> str:
        return f"<OpenTelemetryObserver {len(self._spans)} open spans>"
