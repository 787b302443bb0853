"""The OpenTelemetry plugin (``plugins/nucleo-trio-otel``): spans and metrics of real
dispatchers, read back through the SDK's in-memory span exporter and in-memory metric reader, in
virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import nucleo_trio_otel
import pytest
import trio
import trio.testing
from nucleo_trio_otel import OpenTelemetryObserver, OpenTelemetryPlugin, plugin as entry_point
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import JobDispatcher, open_dispatcher
from nucleo_trio.jobs import (
    AbstractJob,
    Identifiable,
    JobContext,
    JobRequirements,
    Orchestrator,
    Tool,
    display_name,
    workflow,
)
from nucleo_trio.plugins import make_plugin_manager, observers_from

from .jobs_for_tests import Echo, Fn, naps


class Telemetry:
    """An SDK tracer provider and meter provider that keep everything in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("tests")

    def plugins(self) -> Any:
        return make_plugin_manager(
            plugins=[
                OpenTelemetryPlugin(
                    tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
                )
            ]
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        found = [span for span in self.spans() if span.name == name]
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.spans()}"
        return found[0]

    def points(self, name: str, data: MetricsData | None = None) -> dict[tuple[Any, ...], Any]:
        """The data points of instrument ``name``: {sorted attribute items: value or sum}."""
        data = data if data is not None else self.reader.get_metrics_data()
        found: dict[tuple[Any, ...], Any] = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        key = tuple(sorted(dict(point.attributes or {}).items()))
                        if isinstance(point, HistogramDataPoint):
                            found[key] = (point.count, point.sum)
                        else:
                            found[key] = getattr(point, "value", None)
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.tracer_provider.shutdown()
    t.meter_provider.shutdown()


@pytest.fixture
async def traced(telemetry: Telemetry) -> AsyncIterator[JobDispatcher]:
    async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:
        yield dispatcher


async def _delivered() -> None:
    await trio.testing.wait_all_tasks_blocked()


@display_name("named", action="fetch")
class Named(Tool[Any]):
    """A tool with its own display name (and the decorator's action), running ``body``."""

    def __init__(
        self,
        parent: Identifiable,
        body: Callable[[JobContext], Any],
        *,
        name: str,
        requirements: Callable[[], JobRequirements] | None = None,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(parent)
        self._body = body
        self._name = name
        self._requirements = requirements
        self.timeout = timeout

    @property
    def display_name(self) -> str:
        return self._name

    def requirements(self) -> JobRequirements:
        return self._requirements() if self._requirements else JobRequirements()

    async def execute(self, context: JobContext) -> Any:
        return await self._body(context)


# -- spans ------------------------------------------------------------------------------------


async def test_one_span_per_job_named_and_attributed_with_ok_status(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-22, OBS-23: a job's span is named by its display name, carries the job's identity,
    class, type, attempt and priority, and ends OK with the job's terminal state."""
    root = workflow("ada", "wf-1")
    job = Named(root, naps(2.0), name="fetch page")
    job.priority = 3
    assert await traced.submit(job).result() is None
    await _delivered()
    span = telemetry.span("fetch page")
    attributes = dict(span.attributes or {})
    assert attributes == {
        "job.id": job.job_id,
        "job.parent_id": root.workflow_id,
        "workflow.id": root.workflow_id,
        "user.id": "ada",
        "job.class": f"{Named.__module__}.{Named.__qualname__}",
        "job.type": "TOOL",
        "job.display_name": "fetch page",
        "job.action": "fetch",
        "job.attempt": 1,
        "job.priority": 3,
        "job.state": "COMPLETED",
        "job.attempts": 1,
    }
    assert span.status.status_code is StatusCode.OK
    assert span.kind is trace.SpanKind.INTERNAL
    assert span.parent is None  # submitted outside any span: a root
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time >= span.start_time
    assert [s.name for s in telemetry.spans()] == ["fetch page"]


async def test_a_root_job_is_parented_to_the_span_current_at_submit(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """The caller's current span where it called submit() is the job's parent, even though the
    handle is awaited after that span ended."""
    with telemetry.tracer.start_as_current_span("http request") as request:
        handle = traced.submit(Named(workflow("u", "wf"), naps(1.0), name="answer"))
    with telemetry.tracer.start_as_current_span("unrelated"):
        await handle.result()
    await _delivered()
    span = telemetry.span("answer")
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id
    assert span.context is not None
    assert span.context.trace_id == request.get_span_context().trace_id


class Fanout(Orchestrator[list[Any]]):
    """Submits one child directly and one inside a span of its own code, and awaits both."""

    display_name = "fan out"

    def __init__(self, parent: Identifiable, tracer: trace.Tracer) -> None:
        super().__init__(parent)
        self.tracer = tracer

    async def execute(self, context: JobContext) -> list[Any]:
        direct = context.dispatcher.submit(Named(self, naps(1.0), name="direct child"))
        with self.tracer.start_as_current_span("planning"):
            nested = context.dispatcher.submit(Named(self, naps(1.0), name="nested child"))
        return [await direct.result(), await nested.result()]


async def test_children_nest_under_the_parent_job_span_and_spans_its_code_opens(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """Inside a job its span is current: a child submitted there is the job span's child, a span
    the job's code opens is too, and a child submitted inside that span is that span's child.
    All of it is one trace."""
    assert await traced.submit(Fanout(workflow("u", "wf"), telemetry.tracer)).result() == [
        None,
        None,
    ]
    await _delivered()
    parent = telemetry.span("fan out")
    planning = telemetry.span("planning")
    direct = telemetry.span("direct child")
    nested = telemetry.span("nested child")
    assert parent.context is not None and planning.context is not None
    assert direct.parent is not None and direct.parent.span_id == parent.context.span_id
    assert planning.parent is not None and planning.parent.span_id == parent.context.span_id
    assert nested.parent is not None and nested.parent.span_id == planning.context.span_id
    assert {s.context.trace_id for s in telemetry.spans() if s.context} == {parent.context.trace_id}
    assert dict(direct.attributes or {})["job.parent_id"] == dict(parent.attributes or {})["job.id"]


async def test_a_child_is_parented_to_its_parent_job_when_the_submit_context_has_no_span(
    autojump_clock: trio.testing.MockClock,
    telemetry: Telemetry,
) -> None:
    """A child whose submitter had no current span (here the context was captured with none)
    falls back to its parent job's span."""
    async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:

        async def submit_detached(context: JobContext) -> Any:
            from opentelemetry import context as otel_context

            token = otel_context.attach(otel_context.Context())  # no current span here
            try:
                child = context.dispatcher.submit(Named(context.job, naps(), name="detached"))
            finally:
                otel_context.detach(token)
            return await child.result()

        class Parent(Orchestrator[Any]):
            display_name = "parent"

            async def execute(self, context: JobContext) -> Any:
                return await submit_detached(context)

        await dispatcher.submit(Parent(workflow("u", "wf"))).result()
        await _delivered()
    parent, child = telemetry.span("parent"), telemetry.span("detached")
    assert parent.context is not None
    assert child.parent is not None and child.parent.span_id == parent.context.span_id


async def test_failure_is_error_with_the_exception_timeout_is_error_cancel_is_ok(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """The terminal state is the span's status: a failure ERROR with the exception recorded, a
    timeout ERROR, a cancellation OK with job.state CANCELLED."""

    async def boom(context: JobContext) -> None:
        raise LookupError("no such page")

    failing = traced.submit(Named(workflow("u", "wf"), boom, name="failing"))
    with pytest.raises(LookupError):
        await failing.result()
    slow = traced.submit(Named(workflow("u", "wf"), naps(100.0), name="slow", timeout=5.0))
    with pytest.raises(errors.JobTimeoutError):
        await slow.result()
    long = traced.submit(Named(workflow("u", "wf"), naps(100.0), name="cancelled"))
    await trio.sleep(1.0)
    traced.cancel(long.job_id, "no longer needed")
    with pytest.raises(errors.JobCancelledError):
        await long.result()
    await _delivered()

    failed = telemetry.span("failing")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "LookupError: no such page"
    [exception] = [event for event in failed.events if event.name == "exception"]
    assert dict(exception.attributes or {})["exception.type"] == "LookupError"
    assert dict(failed.attributes or {})["job.state"] == "FAILED"

    timed_out = telemetry.span("slow")
    assert timed_out.status.status_code is StatusCode.ERROR
    assert "timed out" in (timed_out.status.description or "")
    assert dict(timed_out.attributes or {})["job.state"] == "TIMED_OUT"

    cancelled = telemetry.span("cancelled")
    assert cancelled.status.status_code is StatusCode.OK
    assert dict(cancelled.attributes or {})["job.state"] == "CANCELLED"


async def test_admission_waits_are_span_events_in_virtual_time(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """Each limiter transition of a job is a span event limiter.<type> with the account's figures;
    the job that waited 10 s of virtual time for the one permit shows held then granted from hold
    with wait_ms 10000, and both show their release."""
    gate = CountingGate("pool", 1)

    def needs_pool() -> JobRequirements:
        return JobRequirements().require_rate_limiter(gate)

    first = traced.submit(
        Named(workflow("u", "wf"), naps(10.0), name="first", requirements=needs_pool)
    )
    second = traced.submit(
        Named(workflow("u", "wf"), naps(10.0), name="second", requirements=needs_pool)
    )
    started = trio.current_time()
    await first.result()
    await second.result()
    # Admission paces a grant from hold by a few milliseconds of jitter.
    assert trio.current_time() - started == pytest.approx(20.0, abs=0.1)
    await _delivered()

    def limiter_events(name: str) -> list[tuple[str, dict[str, Any]]]:
        return [
            (event.name, dict(event.attributes or {}))
            for event in telemetry.span(name).events
            if event.name.startswith("limiter.")
        ]

    assert [name for name, _ in limiter_events("first")] == [
        "limiter.granted_immediate",
        "limiter.released",
    ]
    held, granted, released = limiter_events("second")
    assert held[0] == "limiter.held"
    assert held[1]["limiter.name"] == "pool"
    assert held[1]["limiter.in_use"] == 1 and held[1]["limiter.capacity"] == 1
    assert held[1]["limiter.waiters"] == 1
    assert granted[0] == "limiter.granted_from_hold"
    assert granted[1]["limiter.wait_ms"] == pytest.approx(10_000.0, abs=100.0)
    assert released[0] == "limiter.released"

    assert telemetry.points("nucleo.limiter.acquire") == {
        (("limiter.category", "semaphore"), ("limiter.name", "pool"), ("outcome", "held")): 1,
        (("limiter.category", "semaphore"), ("limiter.name", "pool"), ("outcome", "immediate")): 1,
    }
    [(count, total)] = telemetry.points("nucleo.limiter.wait").values()
    assert count == 1 and total == pytest.approx(granted[1]["limiter.wait_ms"] / 1000.0)


class Flaky(AbstractJob[str]):
    """Raises each of ``signals`` on successive attempts, then answers."""

    display_name = "flaky"

    def __init__(self, parent: Identifiable, signals: list[BaseException]) -> None:
        super().__init__(parent)
        self.signals = signals
        self.timeout = 60.0
        self.runs = 0

    def requirements(self) -> JobRequirements:
        return JobRequirements()

    async def execute(self, context: JobContext) -> str:
        self.runs += 1
        await trio.sleep(1.0)
        if self.signals:
            raise self.signals.pop(0)
        return f"answer after {self.runs}"


async def test_reruns_are_child_spans_and_the_retry_a_span_event(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-22: a re-run opens no second job span; each re-run is a child span of the job's span,
    ended by the next signal (ERROR) or the job's end, and each signal is a retry event."""
    job = Flaky(
        workflow("u", "wf"),
        [errors.ResponseCorrectionRetry("fix a"), errors.ResponseCorrectionRetry("fix b")],
    )
    assert await traced.submit(job).result() == "answer after 3"
    await _delivered()
    span = telemetry.span("flaky")
    assert span.context is not None
    second, third = telemetry.span("flaky re-run 2"), telemetry.span("flaky re-run 3")
    for rerun in (second, third):
        assert rerun.parent is not None and rerun.parent.span_id == span.context.span_id
    assert second.status.status_code is StatusCode.ERROR
    assert second.status.description == "fix b"
    assert third.status.status_code is StatusCode.OK
    retries = [dict(e.attributes or {}) for e in span.events if e.name == "retry"]
    assert [(r["retry.kind"], r["retry.reason"], r["retry.attempt"]) for r in retries] == [
        ("ResponseCorrectionRetryEvent", "fix a", 2),
        ("ResponseCorrectionRetryEvent", "fix b", 3),
    ]
    attributes = dict(span.attributes or {})
    assert attributes["job.attempt"] == 3 and attributes["job.attempts"] == 3
    assert len(telemetry.spans()) == 3


async def test_a_job_refused_at_the_door_has_no_span_but_is_counted(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-22 opens a span on the first start: a job born failed has none; the failure counter
    still counts it, by job type and error class."""
    refused = Echo(workflow("u", "wf"), requirements=lambda: JobRequirements(), timeout=None)
    refused.requirements = lambda: JobRequirements().require_rate_limiter(  # type: ignore[method-assign]
        CountingGate("g", 1)
    )
    with pytest.raises(errors.NucleoSystemError, match="no timeout"):
        await traced.submit(refused).result()
    await _delivered()
    assert telemetry.spans() == []
    assert telemetry.points("nucleo.job.failed") == {
        (("error.type", "UsageError"), ("job.type", "TOOL")): 1  # a NucleoSystemError
    }


# -- metrics ----------------------------------------------------------------------------------


async def test_gauges_read_accounts_parked_and_running_jobs_live(
    autojump_clock: trio.testing.MockClock, telemetry: Telemetry
) -> None:
    """Observable gauges read the dispatcher when the SDK collects: the account's use and
    capacity, the jobs parked in admission, the jobs running by type (zero for the others);
    once the dispatcher stopped they report nothing."""
    gate = CountingGate("pool", 2)

    def needs_pool() -> JobRequirements:
        return JobRequirements().require_rate_limiter(gate)

    async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:
        handles = [
            dispatcher.submit(
                Named(workflow("u", "wf"), naps(10.0), name=f"j{i}", requirements=needs_pool)
            )
            for i in range(3)
        ]
        await trio.sleep(1.0)
        pool = (("limiter.category", "semaphore"), ("limiter.name", "pool"))
        assert telemetry.points("nucleo.limiter.in_use")[pool] == 2
        assert telemetry.points("nucleo.limiter.capacity")[pool] == 2
        assert telemetry.points("nucleo.admission.parked") == {(): 1}
        running = telemetry.points("nucleo.jobs.running")
        assert running[(("job.type", "TOOL"),)] == 2
        assert running[(("job.type", "THINKER"),)] == 0
        assert telemetry.points("nucleo.dispatcher.queued") == {
            (("lane", "fast"),): 0,
            (("lane", "standard"),): 0,
        }
        for handle in handles:
            await handle.result()
        await _delivered()
        # Admission forgets an account no demand names any more: its row may be gone.
        assert telemetry.points("nucleo.limiter.in_use").get(pool, 0) == 0
        assert telemetry.points("nucleo.admission.parked") == {(): 0}
        assert telemetry.points("nucleo.jobs.running")[(("job.type", "TOOL"),)] == 0
        assert telemetry.points("nucleo.job.started") == {(("job.type", "TOOL"),): 3}
        assert telemetry.points("nucleo.job.completed") == {(("job.type", "TOOL"),): 3}
    assert telemetry.points("nucleo.jobs.running") == {}
    assert telemetry.points("nucleo.admission.parked") == {}


async def test_a_collection_from_another_thread_reads_through_the_trio_thread(
    autojump_clock: trio.testing.MockClock,
    telemetry: Telemetry,
) -> None:
    """The SDK's export thread collects off the trio thread: the gauges ask the trio thread for
    the dispatcher's state and get it while trio runs."""
    release = trio.Event()

    async def hold(context: JobContext) -> None:
        # An orchestrator has no deadline: the autojump clock, free to jump while the test
        # waits on the thread, cannot end it meanwhile.
        await release.wait()

    class Holder(Orchestrator[None]):
        async def execute(self, context: JobContext) -> None:
            await hold(context)

    async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:
        handle = dispatcher.submit(Holder(workflow("u", "wf")))
        await trio.sleep(1.0)
        data = await trio.to_thread.run_sync(telemetry.reader.get_metrics_data)
        assert telemetry.points("nucleo.jobs.running", data)[(("job.type", "DOER"),)] == 1
        release.set()
        await handle.result()
    # trio has not finished, but the dispatcher has: nothing to report, and no waiting.
    data = await trio.to_thread.run_sync(telemetry.reader.get_metrics_data)
    assert telemetry.points("nucleo.jobs.running", data) == {}


def test_after_the_trio_run_a_collection_reports_no_gauges(telemetry: Telemetry) -> None:
    """Collected once the trio run is over (an exporter's last collection at exit), the gauges
    report nothing rather than wait for a loop that is gone."""

    async def main() -> None:
        async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:
            await dispatcher.submit(Echo(workflow("u", "wf"))).result()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert telemetry.points("nucleo.jobs.running") == {}
    assert telemetry.points("nucleo.job.completed") == {(("job.type", "TOOL"),): 1}


async def test_failure_classes_and_duration_by_outcome(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-24: nucleo.job.failed is tagged by error class, with timeout and cancelled as their
    own classes; nucleo.job.duration by type and outcome."""

    async def boom(context: JobContext) -> None:
        raise KeyError("x")

    for body, timeout in ((boom, 60.0), (naps(100.0), 1.0)):
        with pytest.raises((KeyError, errors.JobTimeoutError)):
            await traced.submit(Fn(workflow("u", "wf"), body, timeout=timeout)).result()
    await _delivered()
    assert telemetry.points("nucleo.job.failed") == {
        (("error.type", "KeyError"), ("job.type", "JOB")): 1,
        (("error.type", "timeout"), ("job.type", "JOB")): 1,
    }
    outcomes = {dict(key)["outcome"] for key in telemetry.points("nucleo.job.duration")}
    assert outcomes == {"failed", "timed_out"}


# -- the plugin ---------------------------------------------------------------------------------


def test_the_entry_point_attaches_nothing_until_opentelemetry_is_configured(
    monkeypatch: pytest.MonkeyPatch, telemetry: Telemetry
) -> None:
    """Installed but unconfigured, the plugin answers None: a dispatcher gets no observer. With a
    global SDK provider it attaches one; OTEL_SDK_DISABLED=true turns that off; an explicit
    OpenTelemetryPlugin makes the entry point stand aside."""
    assert not nucleo_trio_otel.is_configured()
    pm = make_plugin_manager()
    assert entry_point in pm.get_plugins()  # found through the entry point
    dispatcher = JobDispatcher(plugin_manager=pm)
    dispatcher.plugins = pm
    assert observers_from(pm, dispatcher) == []

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: telemetry.tracer_provider)
    assert nucleo_trio_otel.is_configured()
    [observer] = observers_from(pm, dispatcher)
    assert isinstance(observer, OpenTelemetryObserver)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert observers_from(pm, dispatcher) == []
    monkeypatch.delenv("OTEL_SDK_DISABLED")

    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: telemetry.meter_provider)
    assert nucleo_trio_otel.is_configured()

    explicit = telemetry.plugins()
    dispatcher.plugins = explicit
    [only] = observers_from(explicit, dispatcher)
    assert isinstance(only, OpenTelemetryObserver)


def test_bad_providers_are_refused_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"tracer_provider=.*got str"):
        OpenTelemetryPlugin(tracer_provider="console")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"meter_provider=.*got int"):
        OpenTelemetryPlugin(meter_provider=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"OpenTelemetryObserver\(tracer_provider=.*got object"):
        OpenTelemetryObserver(JobDispatcher(), tracer_provider=object())  # type: ignore[arg-type]


async def test_installed_but_unconfigured_it_adds_no_subscriber(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With the plugin installed (its entry point loaded) and no SDK configured, a dispatcher's
    bus has no one listening for job events: publishers skip building them, as without it."""
    assert not nucleo_trio_otel.is_configured()
    async with open_dispatcher() as dispatcher:
        assert dispatcher.plugins is not None and entry_point in dispatcher.plugins.get_plugins()
        handle = dispatcher.submit(Echo(workflow("u", "wf"), 1))
        assert not dispatcher.bus.has_listeners(handle.job.workflow_id)
        assert await handle.result() == 1


async def test_a_collection_while_the_trio_thread_is_blocked_gives_up_in_bounded_time(
    autojump_clock: trio.testing.MockClock, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that shuts the SDK down from the trio thread blocks it while the export thread
    collects: the gauges wait at most HEALTH_READ_TIMEOUT for the trio thread, then report
    nothing for that collection instead of deadlocking; the counters are still collected."""
    import threading

    from nucleo_trio_otel import metrics as otel_metrics

    monkeypatch.setattr(otel_metrics, "HEALTH_READ_TIMEOUT", 0.05)
    async with open_dispatcher(plugin_manager=telemetry.plugins()) as dispatcher:
        await dispatcher.submit(Echo(workflow("u", "wf"))).result()
        await _delivered()
        collected: list[MetricsData | None] = []
        collector = threading.Thread(
            target=lambda: collected.append(telemetry.reader.get_metrics_data())
        )
        collector.start()
        collector.join(timeout=10)  # the trio thread blocked, as a synchronous shutdown does
        assert not collector.is_alive()
        [data] = collected
        assert telemetry.points("nucleo.jobs.running", data) == {}
        assert telemetry.points("nucleo.job.completed", data) == {(("job.type", "TOOL"),): 1}


async def test_a_job_that_called_models_carries_the_totals_at_its_end(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-23: at the end the span carries llm.calls and the token, latency and model totals of
    the responses the job recorded; a job that called no model has none of them."""
    from nucleo_trio.llm import LLMResponse, Usage

    async def two_calls(context: JobContext) -> None:
        for model, read, wrote in (("small", 10, 5), ("large", 30, 7)):
            usage = Usage(input_tokens=read, output_tokens=wrote)
            context.record_llm_response(
                LLMResponse(content="ok", usage=usage, model=model, started_at=1.0, ended_at=1.25)
            )

    await traced.submit(Named(workflow("u", "wf"), two_calls, name="thinks")).result()
    await traced.submit(Named(workflow("u", "wf"), naps(), name="quiet")).result()
    await _delivered()
    attributes = dict(telemetry.span("thinks").attributes or {})
    assert {key: value for key, value in attributes.items() if key.startswith("llm.")} == {
        "llm.calls": 2,
        "llm.input_tokens": 40,
        "llm.output_tokens": 12,
        "llm.cache_read_tokens": 0,
        "llm.cache_creation_tokens": 0,
        "llm.latency_ms": 500.0,
        "llm.models": ("small", "large"),
    }
    assert not any(key.startswith("llm.") for key in telemetry.span("quiet").attributes or {})
    # OBS-24: the calls and tokens as counters, the latency as a histogram, by model.
    assert telemetry.points("nucleo.llm.calls") == {
        (("llm.model", "small"),): 1,
        (("llm.model", "large"),): 1,
    }
    assert telemetry.points("nucleo.llm.input_tokens") == {
        (("llm.model", "small"),): 10,
        (("llm.model", "large"),): 30,
    }
    assert telemetry.points("nucleo.llm.output_tokens")[(("llm.model", "large"),)] == 7
    assert telemetry.points("nucleo.llm.cache_read_tokens") == {}
    assert telemetry.points("nucleo.llm.latency")[(("llm.model", "small"),)] == (1, 0.25)


async def test_two_dispatchers_on_one_meter_provider_add_up(
    autojump_clock: trio.testing.MockClock, telemetry: Telemetry
) -> None:
    """The SDK keeps the callbacks of an instrument's first registration only: the gauges are
    registered once per provider and read every dispatcher observed on it, adding them up."""
    release = trio.Event()

    class Waits(Orchestrator[None]):
        async def execute(self, context: JobContext) -> None:
            await release.wait()

    async with (
        open_dispatcher(plugin_manager=telemetry.plugins()) as first,
        open_dispatcher(plugin_manager=telemetry.plugins()) as second,
    ):
        handles = [
            first.submit(Waits(workflow("u", "a"))),
            second.submit(Waits(workflow("u", "b"))),
        ]
        handles.append(second.submit(Waits(workflow("u", "c"))))
        await trio.sleep(1.0)
        assert telemetry.points("nucleo.jobs.running")[(("job.type", "DOER"),)] == 3
        release.set()
        for handle in handles:
            await handle.result()
    assert telemetry.points("nucleo.job.completed") == {(("job.type", "DOER"),): 3}


async def test_a_refusal_is_counted_with_its_reason_and_its_wait(
    autojump_clock: trio.testing.MockClock, traced: JobDispatcher, telemetry: Telemetry
) -> None:
    """OBS-25: a job cancelled while parked is refused by admission: nucleo.limiter.reject counts
    it by account and reason, and the 4 s it was held is a nucleo.limiter.wait measurement. It
    never started, so it has no span."""
    gate = CountingGate("pool", 1)

    def needs_pool() -> JobRequirements:
        return JobRequirements().require_rate_limiter(gate)

    holder = traced.submit(
        Named(workflow("u", "wf"), naps(10.0), name="holder", requirements=needs_pool)
    )
    parked = traced.submit(
        Named(workflow("u", "wf"), naps(), name="parked", requirements=needs_pool)
    )
    await trio.sleep(4.0)
    traced.cancel(parked.job_id, "gave up")
    with pytest.raises(errors.JobCancelledError):
        await parked.result()
    await holder.result()
    await _delivered()
    pool = (("limiter.category", "semaphore"), ("limiter.name", "pool"))
    assert telemetry.points("nucleo.limiter.reject") == {(*pool, ("reason", "cancelled")): 1}
    [(count, total)] = telemetry.points("nucleo.limiter.wait").values()
    assert count == 1 and total == pytest.approx(4.0)
    assert [span.name for span in telemetry.spans()] == ["holder"]
