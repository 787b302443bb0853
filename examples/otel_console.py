"""OpenTelemetry to the console: every job a span, the accounts and jobs as metrics.

Needs the nucleo-trio-otel plugin and the SDK: pip install -e 'plugins/nucleo-trio-otel[sdk]'.
Setting global SDK providers is then all it takes: the plugin attaches itself to every
dispatcher. The SDK's console exporters print a line per span as it ends and per metric point.

An orchestrator fetches three pages through an ``api`` gate of two permits, inside the caller's
``handle request`` span: one fetch waits for a permit, one is asked to run again. Run from the
repository root: python examples/otel_console.py"""

from __future__ import annotations

import sys

import trio

from nucleo_trio.admission import CountingGate, LimiterEventType
from nucleo_trio.bus import LimiterEvent
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.errors import ResponseCorrectionRetry
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Orchestrator, Tool, workflow

try:
    import nucleo_trio_otel  # noqa: F401 - the plugin; the dispatcher finds it by itself
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider, export
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
except ModuleNotFoundError as missing:  # one line saying what to install, not a traceback
    sys.exit(f"{missing.name} is missing: pip install -e 'plugins/nucleo-trio-otel[sdk]'")

API = CountingGate("api", 2)


def one_line(span: ReadableSpan) -> str:
    job = dict(span.attributes or {})
    kind = f" {job['job.type']} attempt {job['job.attempt']}" if "job.type" in job else ""
    events = ", ".join(event.name for event in span.events)
    return f"span {span.name!r} {span.status.status_code.name}{kind} [{events}]\n"


def metric_lines(data: object) -> str:
    lines = []
    for scope in (
        scope for r in getattr(data, "resource_metrics", ()) for scope in r.scope_metrics
    ):
        for metric in scope.metrics:
            for point in metric.data.data_points:
                labels = ",".join(f"{k}={v}" for k, v in sorted(point.attributes.items()))
                value = getattr(point, "value", None)
                shown = value if value is not None else f"count={point.count}"
                lines.append(f"metric {metric.name}{{{labels}}} {shown}\n")
    return "".join(sorted(lines))


class Fetch(Tool[str]):
    def __init__(self, parent: Identifiable, page: str, *, flaky: bool = False) -> None:
        super().__init__(parent)
        self.page, self.flaky, self.timeout = page, flaky, 10.0

    display_name = property(lambda self: f"fetch {self.page}")

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(API)

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(0.3 if self.flaky else 0.2)  # the network; the flaky one ends last
        if self.flaky and context.attempt == 1:
            raise ResponseCorrectionRetry("the reply was cut short")
        return f"<{self.page}>"


class Answer(Orchestrator[int]):
    display_name = "answer"

    async def execute(self, context: JobContext) -> int:
        pages = ("intro", "usage", "faq")
        handles = [context.dispatcher.submit(Fetch(self, p, flaky=p == "usage")) for p in pages]
        return sum([len(await handle.result()) for handle in handles])


async def main(meter_provider: MeterProvider) -> None:
    held = trio.Event()
    async with open_dispatcher() as dispatcher:
        is_held = lambda event: event.type is LimiterEventType.HELD  # noqa: E731
        dispatcher.bus.subscribe(lambda _: held.set(), event_type=LimiterEvent, predicate=is_held)
        with trace.get_tracer("example").start_as_current_span("handle request"):
            handle = dispatcher.submit(Answer(workflow("alice", "otel-example")))
        with trio.move_on_after(5):  # two fetches hold the api permits, the third is parked
            await held.wait()
        print("-- metrics while the third fetch waits:")
        meter_provider.force_flush()  # the gauges read the running dispatcher
        print("answer:", await handle.result())


if __name__ == "__main__":
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    trace.set_tracer_provider(tracer_provider)
    exporter = export.ConsoleMetricExporter(formatter=metric_lines)  # flushed by hand: once an hour
    meter_provider = MeterProvider([export.PeriodicExportingMetricReader(exporter, 3_600_000)])
    metrics.set_meter_provider(meter_provider)
    trio.run(main, meter_provider)
    print("-- metrics at exit (the dispatcher has stopped: no gauges):")
    meter_provider.shutdown()
