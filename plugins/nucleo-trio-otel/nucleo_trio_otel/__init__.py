"""OpenTelemetry for nucleo_trio: every job a span, admission as span events, accounts and jobs
as metrics.

Install the distribution, configure an OpenTelemetry SDK in the program, and every dispatcher
reports through it (the entry point is :mod:`nucleo_trio_otel.plugin`)::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    async with open_dispatcher() as dispatcher:
        ...

:class:`OpenTelemetryObserver` is what is subscribed to the dispatcher's bus;
:class:`OpenTelemetryPlugin` hands explicit providers to the dispatchers of one plugin manager;
:class:`DispatcherMetrics` lists the instruments.
"""

import logging as _logging

from .metrics import (
    HEALTH_READ_TIMEOUT as HEALTH_READ_TIMEOUT,
    INSTRUMENTATION_NAME as INSTRUMENTATION_NAME,
    DispatcherMetrics as DispatcherMetrics,
)
from .observer import OpenTelemetryObserver as OpenTelemetryObserver
from .plugin import OpenTelemetryPlugin as OpenTelemetryPlugin, is_configured as is_configured

__all__ = [
    "HEALTH_READ_TIMEOUT",
    "INSTRUMENTATION_NAME",
    "DispatcherMetrics",
    "OpenTelemetryObserver",
    "OpenTelemetryPlugin",
    "is_configured",
]

# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_otel").addHandler(_logging.NullHandler())
