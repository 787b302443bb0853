"""A pytest plugin for programs built on nucleo_trio: a running dispatcher, its events, a fake LLM.

Enable it in your top-level ``conftest.py`` (or at the top of one test module)::

    pytest_plugins = ["nucleo_trio.testing.pytest_plugin"]

It needs pytest-trio, whose ``nursery`` fixture the dispatcher runs in; set ``trio_mode = true``
in your pytest configuration or mark each test ``@pytest.mark.trio``. Ask for pytest-trio's
``autojump_clock`` fixture in a test and every timeout, pause and re-run delay of the dispatcher
passes in virtual time.

Fixtures:

* ``nucleo_dispatcher``: a started :class:`~nucleo_trio.dispatch.JobDispatcher` in the test's
  nursery, shut down when the test ends (unless the test shut it down itself). It is seeded,
  and built with the built-in plugins only: installed entry points are not loaded, so a test
  sees the same runtime on every machine.
* ``nucleo_events``: an :class:`~nucleo_trio.testing.EventRecorder` subscribed to it.
* ``scripted_llm``: a factory for :class:`~nucleo_trio.llm.clients.ScriptedLLMClient`, which
  keeps every client it built in ``scripted_llm.clients``.
* ``nucleo_dispatcher_config`` and ``nucleo_plugin_manager``: what the dispatcher is built from.

A test asks for a different dispatcher with the ``nucleo_dispatcher`` marker::

    @pytest.mark.nucleo_dispatcher(load_entrypoints=True, plugins=[my_plugin], config=config)

and a module or a conftest can override ``nucleo_dispatcher_config`` or ``nucleo_plugin_manager``
like any fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import pluggy
import pytest
import trio

from ..dispatch import DispatcherConfig, JobDispatcher
from ..plugins import make_plugin_manager
from .helpers import DEFAULT_SEED, EventRecorder, ScriptedLLMFactory

__all__ = [
    "MARKER",
    "nucleo_dispatcher",
    "nucleo_dispatcher_config",
    "nucleo_events",
    "nucleo_plugin_manager",
    "scripted_llm",
]

MARKER = "nucleo_dispatcher"
"""The marker that configures the ``nucleo_dispatcher`` fixture for one test:
``@pytest.mark.nucleo_dispatcher(config=..., load_entrypoints=..., plugins=...)``."""
_MARKER_KEYS = frozenset({"config", "load_entrypoints", "plugins"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(config=None, load_entrypoints=False, plugins=()): how the nucleo_dispatcher "
        "fixture builds its dispatcher (nucleo_trio.testing.pytest_plugin)",
    )


def _marker_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER} takes keyword arguments only ({', '.join(sorted(_MARKER_KEYS))}), "
            f"got positional {marker.args!r}"
        )
    unknown = set(marker.kwargs) - _MARKER_KEYS
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(_MARKER_KEYS))}"
        )
    return dict(marker.kwargs)


@pytest.fixture
def nucleo_dispatcher_config(request: pytest.FixtureRequest) -> DispatcherConfig:
    """The fixture dispatcher's configuration: the marker's ``config``, else the defaults with
    :data:`DEFAULT_SEED`."""
    config = _marker_options(request).get("config")
    if config is None:
        return DispatcherConfig(seed=DEFAULT_SEED)
    if not isinstance(config, DispatcherConfig):
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: config must be a DispatcherConfig, got {type(config).__name__}"
        )
    return config


@pytest.fixture
def nucleo_plugin_manager(request: pytest.FixtureRequest) -> pluggy.PluginManager:
    """The fixture dispatcher's plugins: the built-ins and the marker's ``plugins``; entry
    points only when the marker says ``load_entrypoints=True``."""
    options = _marker_options(request)
    load_entrypoints = options.get("load_entrypoints", False)
    if not isinstance(load_entrypoints, bool):
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: load_entrypoints must be a bool, got {load_entrypoints!r}"
        )
    plugins = options.get("plugins", ())
    if isinstance(plugins, str | bytes) or not isinstance(plugins, Iterable):
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: plugins must be a list of plugin objects, got {plugins!r}"
        )
    return make_plugin_manager(load_entrypoints=load_entrypoints, plugins=plugins)


@pytest.fixture
async def nucleo_dispatcher(
    nursery: trio.Nursery,
    nucleo_dispatcher_config: DispatcherConfig,
    nucleo_plugin_manager: pluggy.PluginManager,
) -> AsyncIterator[JobDispatcher]:
    """A started dispatcher in the test's nursery, shut down when the test ends."""
    dispatcher = JobDispatcher(nucleo_dispatcher_config, plugin_manager=nucleo_plugin_manager)
    await nursery.start(dispatcher.run)
    yield dispatcher
    if dispatcher.is_running:
        await dispatcher.shutdown()


@pytest.fixture
def nucleo_events(nucleo_dispatcher: JobDispatcher) -> EventRecorder:
    """Every event the fixture dispatcher publishes from now on, in delivery order."""
    recorder = EventRecorder()
    nucleo_dispatcher.bus.subscribe(recorder)
    return recorder


@pytest.fixture
def scripted_llm() -> ScriptedLLMFactory:
    """A factory of scripted LLM clients; see :class:`ScriptedLLMFactory`."""
    return ScriptedLLMFactory()
