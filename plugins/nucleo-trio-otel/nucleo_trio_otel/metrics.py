"""A dispatcher's metrics through the OpenTelemetry metrics API.

Counters and histograms are fed from the bus's events as they are delivered:

- ``nucleo.limiter.acquire`` (counter): grants, by ``limiter.name``, ``limiter.category`` and
  ``outcome`` (``immediate`` or ``held``);
- ``nucleo.limiter.reject`` (counter): refusals, by ``limiter.name``, ``limiter.category`` and
  ``reason``;
- ``nucleo.limiter.wait`` (histogram, seconds): how long a job was held on an account, by
  ``limiter.name`` and ``limiter.category``;
- ``nucleo.job.started`` and ``nucleo.job.completed`` (counters), by ``job.type``;
- ``nucleo.job.failed`` (counter), by ``job.type`` and ``error.type`` (the exception's class
  name, ``timeout`` or ``cancelled``);
- ``nucleo.job.duration`` (histogram, seconds), by ``job.type`` and ``outcome``;
- ``nucleo.llm.calls``, ``nucleo.llm.input_tokens``, ``nucleo.llm.output_tokens``,
  ``nucleo.llm.cache_read_tokens`` and ``nucleo.llm.cache_creation_tokens`` (counters) and
  ``nucleo.llm.latency`` (histogram, seconds), by ``llm.model``, from the model calls a job
  recorded, counted at its end.

Observable gauges read the dispatcher's live state
(:meth:`~nucleo_trio.dispatch.JobDispatcher.health`) each time the SDK collects:

- ``nucleo.limiter.in_use`` and ``nucleo.limiter.capacity``: each account's use and capacity,
  by ``limiter.name`` and ``limiter.category``;
- ``nucleo.admission.parked``: the jobs parked in admission;
- ``nucleo.dispatcher.queued``: the jobs waiting in each lane, by ``lane`` (``standard``,
  ``fast``);
- ``nucleo.jobs.running``: the jobs running, by ``job.type`` (every type, zero included).

No attribute names a job or a workflow: every attribute takes a bounded set of values.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import trio
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from nucleo_trio.admission import LimiterEventType
from nucleo_trio.bus import (
    DependencyFailureEvent,
    JobCancelled,
    JobCompletedEvent,
    JobEvent,
    JobFailedEvent,
    JobStartedEvent,
    JobTimedOut,
    LimiterEvent,
)
from nucleo_trio.jobs import JobType
from nucleo_trio.observability import HealthSnapshot

if TYPE_CHECKING:
    from nucleo_trio.dispatch import JobDispatcher

__all__ = ["HEALTH_READ_TIMEOUT", "INSTRUMENTATION_NAME", "DispatcherMetrics"]

log = logging.getLogger(__name__)

HEALTH_READ_TIMEOUT: Final = 1.0
"""Seconds a collection from another thread waits for the trio thread to read the dispatcher's
state; past it the gauges report nothing for that collection rather than hold the exporter."""

INSTRUMENTATION_NAME: Final = "nucleo_trio_otel"
"""The instrumentation scope the tracer and the meter are obtained under (this package's name)."""

INSTRUMENTATION_VERSION: Final = "0.1.0"


_TOKEN_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
)
# A response's usage names cache writes ``cache_write_tokens``; the meter says "creation", as
# OBS-24 does.
_USAGE_FIELDS: Final = {"cache_creation_tokens": "cache_write_tokens"}


class DispatcherMetrics:
    """The instruments of one dispatcher, on the meter of ``meter_provider`` (the global meter
    provider when ``None``). Several dispatchers measured through one provider share its
    instruments: their counts add up, and so do their gauges' values.

    :meth:`record` feeds the counters and histograms one event at a time; the gauges read the
    dispatcher when the SDK collects. A collection on the trio thread (an in-memory reader read
    from a test) reads at once; one from the SDK's export thread asks the trio thread and waits
    at most :data:`HEALTH_READ_TIMEOUT` seconds. A dispatcher that is not running reports no
    gauge values.
    """

    def __init__(
        self, dispatcher: JobDispatcher, *, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self._dispatcher = dispatcher
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._trio_thread: int | None = None
        self.bind_to_trio()
        meter = metrics.get_meter(
            INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, meter_provider=meter_provider
        )
        self._acquire = meter.create_counter(
            "nucleo.limiter.acquire", unit="{grant}", description="Admission grants per account"
        )
        self._reject = meter.create_counter(
            "nucleo.limiter.reject", unit="{refusal}", description="Admission refusals per account"
        )
        self._wait = meter.create_histogram(
            "nucleo.limiter.wait", unit="s", description="Time a job was held on an account"
        )
        self._started = meter.create_counter(
            "nucleo.job.started", unit="{job}", description="Jobs whose first attempt started"
        )
        self._completed = meter.create_counter(
            "nucleo.job.completed", unit="{job}", description="Jobs that completed"
        )
        self._failed = meter.create_counter(
            "nucleo.job.failed",
            unit="{job}",
            description="Jobs that failed, timed out or were cancelled",
        )
        self._duration = meter.create_histogram(
            "nucleo.job.duration", unit="s", description="Jobs' time from start to end"
        )
        self._llm_calls = meter.create_counter(
            "nucleo.llm.calls", unit="{call}", description="Model calls the jobs made"
        )
        self._llm_tokens = {
            field: meter.create_counter(
                f"nucleo.llm.{field}",
                unit="{token}",
                description=f"Model {field.replace('_', ' ')}",
            )
            for field in _TOKEN_FIELDS
        }
        self._llm_latency = meter.create_histogram(
            "nucleo.llm.latency", unit="s", description="Time a model call took"
        )
        _gauges_of(meter_provider or metrics.get_meter_provider(), meter).observe(self)

    def bind_to_trio(self) -> None:
        """Remember the trio run this is called in: collections from other threads read the
        dispatcher through it. Done at construction when that happens inside trio."""
        try:
            self._trio_token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return
        self._trio_thread = threading.get_ident()

    # -- counters and histograms ----------------------------------------------------------------

    def record(self, event: JobEvent) -> None:
        """Count ``event``: a limiter transition or a job's start or end; others are ignored."""
        if isinstance(event, LimiterEvent):
            self._limiter(event)
            return
        snapshot = event.snapshot
        if snapshot is None:
            return
        job_type = {"job.type": snapshot.kind.value}
        if isinstance(event, JobStartedEvent):
            if event.attempt == 1:
                self._started.add(1, job_type)
            return
        if isinstance(event, JobCompletedEvent):
            self._completed.add(1, job_type)
            outcome = "completed"
        elif isinstance(event, JobTimedOut):
            self._failed.add(1, {**job_type, "error.type": "timeout"})
            outcome = "timed_out"
        elif isinstance(event, JobCancelled):
            self._failed.add(1, {**job_type, "error.type": "cancelled"})
            outcome = "cancelled"
        elif isinstance(event, JobFailedEvent | DependencyFailureEvent):
            error = event.error
            error_type = type(error).__name__ if error is not None else "unknown"
            self._failed.add(1, {**job_type, "error.type": error_type})
            outcome = "failed"
        else:
            return
        if snapshot.started_at is not None:
            ended = getattr(event, "completion_time", event.timestamp)
            self._duration.record(
                max(0.0, ended - snapshot.started_at), {**job_type, "outcome": outcome}
            )
        for response in getattr(event, "llm_responses", ()):
            self._llm(response)

    def _llm(self, response: object) -> None:
        """One model call a job recorded (read by duck typing, as the spend ledger reads it:
        ``model``, ``duration`` in seconds, ``usage`` with its token counts)."""
        model = getattr(response, "model", None)
        by_model = {"llm.model": model if isinstance(model, str) and model else "(unknown)"}
        self._llm_calls.add(1, by_model)
        usage = getattr(response, "usage", None)
        for field, counter in self._llm_tokens.items():
            tokens = getattr(usage, _USAGE_FIELDS.get(field, field), 0)
            if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
                counter.add(tokens, by_model)
        duration = getattr(response, "duration", None)
        if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
            self._llm_latency.record(duration, by_model)

    def _limiter(self, event: LimiterEvent) -> None:
        account = {"limiter.name": event.limiter_name, "limiter.category": event.limiter_category}
        kind = event.type
        if kind is LimiterEventType.GRANTED_IMMEDIATE:
            self._acquire.add(1, {**account, "outcome": "immediate"})
        elif kind is LimiterEventType.GRANTED_FROM_HOLD:
            self._acquire.add(1, {**account, "outcome": "held"})
            self._wait.record(event.wait, account)
        elif kind is LimiterEventType.REJECTED:
            self._reject.add(1, {**account, "reason": event.reject_reason or "unknown"})
            if event.wait > 0:
                self._wait.record(event.wait, account)

    # -- gauges ---------------------------------------------------------------------------------

    def read_health(self) -> HealthSnapshot | None:
        """The dispatcher's health now, or ``None`` when it is not running or cannot be read."""
        dispatcher = self._dispatcher
        if threading.get_ident() == self._trio_thread:
            return dispatcher.health() if dispatcher.is_running else None
        token = self._trio_token
        if token is None:
            return None
        answer: list[HealthSnapshot | None] = []
        done = threading.Event()

        def read() -> None:
            try:
                answer.append(dispatcher.health() if dispatcher.is_running else None)
            except Exception:
                log.exception("reading the dispatcher's health for the gauges failed")
            finally:
                done.set()

        try:
            token.run_sync_soon(read)
        except trio.RunFinishedError:
            return None
        if not done.wait(HEALTH_READ_TIMEOUT):
            log.warning(
                "the trio thread did not answer within %s s; the gauges skip this collection",
                HEALTH_READ_TIMEOUT,
            )
            return None
        return answer[0] if answer else None


class _Gauges:
    """The observable gauges of one meter provider, reading every dispatcher observed on it.

    The SDK keeps the callbacks of the first registration of an instrument name, so the gauges
    are registered once per provider and each callback walks the live dispatchers' metrics.
    """

    def __init__(self, meter: Meter) -> None:
        self._observed: weakref.WeakSet[DispatcherMetrics] = weakref.WeakSet()
        # The trio thread adds dispatchers while the SDK's export thread may be walking them.
        self._lock = threading.Lock()
        meter.create_observable_gauge(
            "nucleo.limiter.in_use",
            callbacks=[self._each(_in_use)],
            unit="1",
            description="What each account has out",
        )
        meter.create_observable_gauge(
            "nucleo.limiter.capacity",
            callbacks=[self._each(_capacity)],
            unit="1",
            description="Each account's capacity",
        )
        meter.create_observable_gauge(
            "nucleo.admission.parked",
            callbacks=[self._each(_parked)],
            unit="{job}",
            description="Jobs parked in admission",
        )
        meter.create_observable_gauge(
            "nucleo.dispatcher.queued",
            callbacks=[self._each(_queued)],
            unit="{job}",
            description="Jobs waiting in each lane",
        )
        meter.create_observable_gauge(
            "nucleo.jobs.running",
            callbacks=[self._each(_running)],
            unit="{job}",
            description="Jobs running, by type",
        )

    def observe(self, dispatcher_metrics: DispatcherMetrics) -> None:
        with self._lock:
            self._observed.add(dispatcher_metrics)

    def _each(
        self, observe: Callable[[HealthSnapshot], Iterator[Observation]]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            # Several dispatchers on one provider add up: the process's parked jobs, its
            # running tools. (An attribute set observed twice would otherwise keep one value.)
            totals: dict[tuple[tuple[str, Any], ...], float] = {}
            with self._lock:
                observing = list(self._observed)
            for observed in observing:
                health = observed.read_health()
                if health is None:
                    continue
                for observation in observe(health):
                    key = tuple(sorted((observation.attributes or {}).items()))
                    totals[key] = totals.get(key, 0) + observation.value
            return [Observation(value, dict(key)) for key, value in totals.items()]

        return callback


def _in_use(health: HealthSnapshot) -> Iterator[Observation]:
    for row in health.limiters:
        yield Observation(row.used, {"limiter.name": row.name, "limiter.category": row.category})


def _capacity(health: HealthSnapshot) -> Iterator[Observation]:
    for row in health.limiters:
        yield Observation(
            row.capacity, {"limiter.name": row.name, "limiter.category": row.category}
        )


def _parked(health: HealthSnapshot) -> Iterator[Observation]:
    yield Observation(health.queues.parked)


def _queued(health: HealthSnapshot) -> Iterator[Observation]:
    yield Observation(health.queues.standard, {"lane": "standard"})
    yield Observation(health.queues.fast, {"lane": "fast"})


def _running(health: HealthSnapshot) -> Iterator[Observation]:
    counts = dict(health.running)
    for kind in JobType:
        yield Observation(counts.get(kind, 0), {"job.type": kind.value})


_BY_PROVIDER: weakref.WeakKeyDictionary[metrics.MeterProvider, _Gauges] = (
    weakref.WeakKeyDictionary()
)


def _gauges_of(provider: metrics.MeterProvider, meter: Meter) -> _Gauges:
    gauges = _BY_PROVIDER.get(provider)
    if gauges is None:
        gauges = _BY_PROVIDER[provider] = _Gauges(meter)
    return gauges
