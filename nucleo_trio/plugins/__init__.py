"""nucleo_trio's plugin mechanism: pluggy hooks, the plugin manager, and the limiter registry.

A plugin implements hooks from :mod:`nucleo_trio.plugins.hookspecs` with :data:`hookimpl`
and is found through the ``nucleo_trio`` entry-point group (see ``docs/plugins.md``)::

    from nucleo_trio.plugins import hookimpl

    @hookimpl
    def nucleo_trio_limiter_kinds():
        return {"fixed_slots": FixedSlots}

The runtime builds one manager with :func:`make_plugin_manager` and asks it for limiter kinds
through a :class:`LimiterRegistry`, for database provider kinds through a
:class:`DBProviderKinds`, for model provider kinds through a :class:`ModelProviderKinds`, and
for guardrails by name through a :class:`GuardrailKinds`.
"""

from nucleo_trio.plugins.hookspecs import (
    PROJECT_NAME as PROJECT_NAME,
    DBProviderFactory as DBProviderFactory,
    GuardrailFactory as GuardrailFactory,
    LimiterFactory as LimiterFactory,
    ModelProviderFactory as ModelProviderFactory,
    hookimpl as hookimpl,
    hookspec as hookspec,
)
from nucleo_trio.plugins.manager import (
    DBProviderKinds as DBProviderKinds,
    GuardrailKinds as GuardrailKinds,
    LimiterRegistry as LimiterRegistry,
    ModelProviderKinds as ModelProviderKinds,
    PluginError as PluginError,
    UnknownDBProviderKindError as UnknownDBProviderKindError,
    UnknownGuardrailKindError as UnknownGuardrailKindError,
    UnknownLimiterKindError as UnknownLimiterKindError,
    UnknownModelProviderKindError as UnknownModelProviderKindError,
    heartbeat_jobs_from as heartbeat_jobs_from,
    make_plugin_manager as make_plugin_manager,
    observers_from as observers_from,
)

__all__ = [
    "PROJECT_NAME",
    "DBProviderFactory",
    "DBProviderKinds",
    "GuardrailFactory",
    "GuardrailKinds",
    "LimiterFactory",
    "LimiterRegistry",
    "ModelProviderFactory",
    "ModelProviderKinds",
    "PluginError",
    "UnknownDBProviderKindError",
    "UnknownGuardrailKindError",
    "UnknownLimiterKindError",
    "UnknownModelProviderKindError",
    "heartbeat_jobs_from",
    "hookimpl",
    "hookspec",
    "make_plugin_manager",
    "observers_from",
]

# Errors and the registry report themselves under the path users import them from.
for _public in (
    DBProviderKinds,
    GuardrailKinds,
    LimiterRegistry,
    ModelProviderKinds,
    PluginError,
    UnknownDBProviderKindError,
    UnknownGuardrailKindError,
    UnknownLimiterKindError,
    UnknownModelProviderKindError,
):
    _public.__module__ = __name__
del _public
