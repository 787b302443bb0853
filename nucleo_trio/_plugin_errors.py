"""What the plugin machinery and the parts it serves share without importing each other: the
error a broken plugin raises and a plugin's name for a message.

A leaf module (it imports nothing of nucleo_trio), so the admission, heartbeat and models
packages can name a broken plugin without importing ``nucleo_trio.plugins``, which imports them.
"""

from __future__ import annotations

import inspect
import types

import pluggy

__all__ = ["PluginError", "plugin_label"]


class PluginError(RuntimeError):
    """A plugin is broken: it implements an unknown hook, answers a hook with the wrong shape,
    claims a name another plugin already provides, or builds something that breaks a contract.

    The message names the plugin (and its distribution, for an entry-point plugin) and the hook
    or kind at fault; pluggy's own error, when there is one, is chained as ``__cause__``.
    """


PluginError.__module__ = "nucleo_trio.plugins"


def plugin_label(pm: pluggy.PluginManager, plugin: object) -> str:
    """A human name for a plugin: its registered name and, for entry points, its distribution."""
    for dist_plugin, dist in pm.list_plugin_distinfo():
        if dist_plugin is plugin:
            return f"{pm.get_name(plugin)!r} (distribution {dist.project_name} {dist.version})"
    if isinstance(plugin, types.ModuleType):
        return repr(plugin.__name__)
    if inspect.isclass(plugin) or inspect.isfunction(plugin):
        return repr(f"{plugin.__module__}.{plugin.__qualname__}")
    cls = type(plugin)
    return repr(f"{cls.__module__}.{cls.__qualname__} instance")
