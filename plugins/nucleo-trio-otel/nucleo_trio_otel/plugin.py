"""The ``nucleo_trio`` entry point: attaches an :class:`OpenTelemetryObserver` to every
dispatcher once the program has configured OpenTelemetry.

Installed, this module is registered as a plugin through the ``nucleo_trio`` entry-point group,
and its :func:`nucleo_trio_observers` answers for each dispatcher as it starts:

* nothing, when the program set no SDK provider (``opentelemetry.trace.set_tracer_provider``
  or ``opentelemetry.metrics.set_meter_provider``), when ``OTEL_SDK_DISABLED`` is ``true``, or
  when an :class:`OpenTelemetryPlugin` is registered with the dispatcher's plugin manager;
  the dispatcher then runs exactly as without the plugin;
* otherwise one observer reporting to the global providers.

:class:`OpenTelemetryPlugin` is the explicit form, for a program or a test that hands its
providers to one dispatcher rather than setting global ones::

    plugins = make_plugin_manager(plugins=[OpenTelemetryPlugin(tracer_provider=provider)])
    async with open_dispatcher(plugin_manager=plugins) as dispatcher:
        ...
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from opentelemetry import metrics, trace

from nucleo_trio.plugins import hookimpl

from .observer import OpenTelemetryObserver, check_providers

if TYPE_CHECKING:
    from nucleo_trio.dispatch import JobDispatcher

__all__ = ["OpenTelemetryPlugin", "is_configured", "nucleo_trio_observers"]


def is_configured() -> bool:
    """Whether the program configured OpenTelemetry: a global tracer or meter provider was set
    to something other than the API's own no-op and proxy providers, and ``OTEL_SDK_DISABLED``
    is not ``true``."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    tracer_provider = trace.get_tracer_provider()
    if not isinstance(tracer_provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return True
    # The metrics API's proxy provider is private; both it and the no-op live in the API.
    meter_provider = metrics.get_meter_provider()
    return not type(meter_provider).__module__.startswith("opentelemetry.metrics")


class OpenTelemetryPlugin:
    """A plugin object that attaches an :class:`OpenTelemetryObserver` with the given providers
    to every dispatcher built with a plugin manager it is registered in.

    ``tracer_provider`` and ``meter_provider`` are an
    ``opentelemetry.trace.TracerProvider`` and an ``opentelemetry.metrics.MeterProvider``;
    either left out means the global one. Anything else is a ``TypeError`` naming the argument.
    While one is registered, the entry-point plugin stands aside, so a dispatcher is never
    traced twice.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        check_providers("OpenTelemetryPlugin", tracer_provider, meter_provider)
        self.tracer_provider = tracer_provider
        """The tracer provider each observer reports spans to; ``None`` means the global one."""
        self.meter_provider = meter_provider
        """The meter provider each observer's instruments live on; ``None`` means the global
        one."""

    @hookimpl
    def nucleo_trio_observers(self, dispatcher: JobDispatcher) -> list[OpenTelemetryObserver]:
        """One observer for ``dispatcher``, reporting to this plugin's providers."""
        return [
            OpenTelemetryObserver(
                dispatcher,
                tracer_provider=self.tracer_provider,
                meter_provider=self.meter_provider,
            )
        ]

    def __repr__(self) -> str:
        return (
            f"OpenTelemetryPlugin(tracer_provider={self.tracer_provider!r}, "
            f"meter_provider={self.meter_provider!r})"
        )


@hookimpl
def nucleo_trio_observers(dispatcher: JobDispatcher) -> list[OpenTelemetryObserver] | None:
    """An observer reporting to the global providers, when OpenTelemetry is configured (see
    :func:`is_configured`) and no :class:`OpenTelemetryPlugin` is registered; else ``None``."""
    plugins = dispatcher.plugins
    if plugins is not None and any(
        isinstance(plugin, OpenTelemetryPlugin) for plugin in plugins.get_plugins()
    ):
        return None
    if not is_configured():
        return None
    return [OpenTelemetryObserver(dispatcher)]
