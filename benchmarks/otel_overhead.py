"""What the OpenTelemetry plugin costs a dispatcher: nothing measurable when no SDK is configured,
and the price of a span per job when one is.

Three dispatchers run the same workload on the real clock, in interleaved rounds: one root
orchestrator submits N trivial tools and awaits them all (N = 5,000), so the time per job is the
dispatcher's own path (door, lane, attempt, events). The setups:

- ``without the plugin``: the entry-point plugin unregistered before the dispatcher loads its
  observers (as if the distribution were not installed);
- ``installed, no SDK``: the default, the plugin loaded and answering ``None``;
- ``traced``: an SDK tracer provider (a simple span processor into the in-memory exporter) and an
  SDK meter provider (an in-memory reader) handed over through ``OpenTelemetryPlugin``.

It also reports how long importing the entry point takes in a fresh interpreter (after
``nucleo_trio`` itself), which every program that loads plugins pays once.

Run from the repository root: ``python -m benchmarks.otel_overhead``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

import nucleo_trio_otel.plugin
import pluggy
import trio
from nucleo_trio_otel import OpenTelemetryPlugin
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, Orchestrator, Tool, workflow
from nucleo_trio.plugins import make_plugin_manager

JOBS = 5_000
ROUNDS = 7


class Noop(Tool[None]):
    async def execute(self, context: JobContext) -> None:
        return None


class Fan(Orchestrator[None]):
    async def execute(self, context: JobContext) -> None:
        handles = [context.dispatcher.submit(Noop(self)) for _ in range(JOBS)]
        for handle in handles:
            await handle.result()


def without_plugin() -> pluggy.PluginManager:
    pm = make_plugin_manager()
    pm.unregister(nucleo_trio_otel.plugin)
    return pm


def traced() -> tuple[pluggy.PluginManager, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = OpenTelemetryPlugin(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return make_plugin_manager(plugins=[plugin]), exporter


async def one_round(pm: pluggy.PluginManager) -> float:
    async with open_dispatcher(plugin_manager=pm) as dispatcher:
        started = time.perf_counter()
        await dispatcher.submit(Fan(workflow("bench", "otel"))).result()
        return time.perf_counter() - started


def measure(setups: dict[str, Any]) -> dict[str, list[float]]:
    """Microseconds per job of each setup, ROUNDS rounds each, the setups interleaved round by
    round so that a machine busy with other work weighs on all of them alike."""
    per_job: dict[str, list[float]] = {label: [] for label in setups}
    for _ in range(ROUNDS):
        for label, make in setups.items():
            made = make()
            pm = made[0] if isinstance(made, tuple) else made
            per_job[label].append(trio.run(one_round, pm) / JOBS * 1e6)
            if isinstance(made, tuple):
                spans = len(made[1].get_finished_spans())
                assert spans == JOBS + 1, f"expected {JOBS + 1} spans, got {spans}"
    return per_job


def import_ms() -> float:
    """Milliseconds to import the entry point after nucleo_trio, in a fresh interpreter (best of 5)."""
    code = (
        "import time, nucleo_trio.plugins; t = time.perf_counter(); import nucleo_trio_otel.plugin;"
        " print((time.perf_counter() - t) * 1000)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(5)
    ]
    return min(runs)


def main() -> None:
    print(f"{JOBS} trivial jobs per round, {ROUNDS} interleaved rounds, real clock")
    setups = {
        "without the plugin": without_plugin,
        "installed, no SDK": make_plugin_manager,
        "traced (SDK, in-memory)": traced,
    }
    for label, times in measure(setups).items():
        best, median = min(times), statistics.median(times)
        print(f"  {label:<24} {best:7.1f} us/job best, {median:7.1f} us/job median")
    print(f"importing the entry point (opentelemetry-api included): {import_ms():.1f} ms once")


if __name__ == "__main__":
    main()
