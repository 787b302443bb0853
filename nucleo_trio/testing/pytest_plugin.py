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

import os
import warnings
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pluggy
import pytest
import trio

from ..dispatch import DispatcherConfig, JobDispatcher
from ..models import CATALOG_ENV_VAR
from ..plugins import PROJECT_NAME, make_plugin_manager
from .helpers import DEFAULT_SEED, EventRecorder, ScriptedLLMFactory

__all__ = [
    "LeftRunningWarning",
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
_FIXTURES = (
    "nucleo_dispatcher",
    "nucleo_events",
    "scripted_llm",
    "nucleo_dispatcher_config",
    "nucleo_plugin_manager",
)


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


class LeftRunningWarning(UserWarning):
    """A test ended with jobs of the fixture dispatcher still unsettled; the fixture cancelled
    them at once instead of waiting out the shutdown's grace period."""


def _overridden(request: pytest.FixtureRequest, name: str) -> str | None:
    """Where the fixture ``name`` the test sees is defined, when that is not this plugin."""
    definitions = request._fixturemanager.getfixturedefs(name, request.node)
    if not definitions:
        return None
    func = definitions[-1].func
    if getattr(func, "__module__", None) == __name__:
        return None
    code = getattr(func, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(func)
    return f"{getattr(func, '__qualname__', name)} ({where})"


def _apply_marker_to_overrides(
    request: pytest.FixtureRequest, plugins: pluggy.PluginManager
) -> None:
    """The marker and an overridden config or plugin-manager fixture, together: the marker's
    plugins join the overriding manager; two configs cannot, so that is an error naming both."""
    options = _marker_options(request)
    if not options:
        return
    config_fixture = _overridden(request, "nucleo_dispatcher_config")
    if "config" in options and config_fixture is not None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: @pytest.mark.{MARKER}(config=...) and an overridden "
            f"nucleo_dispatcher_config fixture, {config_fixture}, both set the dispatcher's "
            "configuration; set it in one of them"
        )
    if _overridden(request, "nucleo_plugin_manager") is None:
        return  # the plugin's own fixture read the marker already
    if options.get("load_entrypoints", False) is True:
        plugins.load_setuptools_entrypoints(PROJECT_NAME)
    for plugin in options.get("plugins", ()):
        if not plugins.is_registered(plugin):
            plugins.register(plugin)


def _wire_scripted_models(request: pytest.FixtureRequest, dispatcher: JobDispatcher) -> None:
    """When the test also asks for ``scripted_llm``, the dispatcher's models are answered by
    it: its provider is registered, and without a configured catalog its catalog is used."""
    if "scripted_llm" not in request.fixturenames:
        return
    factory: ScriptedLLMFactory = request.getfixturevalue("scripted_llm")
    models = dispatcher.models
    if models.providers.get(factory.provider_key) is None:
        models.providers.register(factory.provider())
    if dispatcher.config.models is None and not os.environ.get(CATALOG_ENV_VAR):
        models.use_catalog(factory.catalog())


@pytest.fixture
def _nucleo_marker_applied(
    request: pytest.FixtureRequest, nucleo_plugin_manager: pluggy.PluginManager
) -> None:
    """The marker beside overridden fixtures, at setup, so a conflict is a setup error."""
    _apply_marker_to_overrides(request, nucleo_plugin_manager)


@pytest.fixture
async def nucleo_dispatcher(
    request: pytest.FixtureRequest,
    nursery: trio.Nursery,
    nucleo_dispatcher_config: DispatcherConfig,
    nucleo_plugin_manager: pluggy.PluginManager,
    _nucleo_marker_applied: None,
) -> AsyncIterator[JobDispatcher]:
    """A started dispatcher in the test's nursery, shut down when the test ends.

    A test that ends with jobs still unsettled gets a :class:`LeftRunningWarning` naming them,
    and the jobs are cancelled at once (the test does not wait out the 30 s shutdown on the
    real clock). With ``scripted_llm`` in the same test, the dispatcher's model calls are
    answered by the scripted clients (see :class:`~nucleo_trio.testing.ScriptedLLMFactory`).
    """
    dispatcher = JobDispatcher(nucleo_dispatcher_config, plugin_manager=nucleo_plugin_manager)
    _wire_scripted_models(request, dispatcher)
    serving = trio.CancelScope()

    async def serve(*, task_status: trio.TaskStatus[None]) -> None:
        with serving:
            await dispatcher.run(task_status=task_status)

    await nursery.start(serve)
    yield dispatcher
    if not dispatcher.is_running:
        return
    left = dispatcher.unsettled_jobs()
    if not left:
        await dispatcher.shutdown()
        return
    names = ", ".join(f"{job.name} ({job.job_id}, {job.state.value})" for job in left[:10])
    more = f" and {len(left) - 10} more" if len(left) > 10 else ""
    warnings.warn(
        LeftRunningWarning(
            f"{request.node.nodeid} ended with {len(left)} job(s) of nucleo_dispatcher not "
            f"settled: {names}{more}; they are cancelled now. Await their handles (or cancel "
            "them) before the test ends."
        ),
        stacklevel=1,
    )
    serving.cancel()  # a cancelled run stops at once: every job cancelled, every handle settled


@pytest.fixture
def nucleo_events(nucleo_dispatcher: JobDispatcher) -> EventRecorder:
    """Every event the fixture dispatcher publishes from now on, in delivery order."""
    recorder = EventRecorder()
    nucleo_dispatcher.bus.subscribe(recorder)
    return recorder


@pytest.fixture
def scripted_llm() -> ScriptedLLMFactory:
    """A factory of scripted LLM clients; see :class:`ScriptedLLMFactory`. In a test that also
    uses ``nucleo_dispatcher``, the dispatcher's model calls are answered by these clients."""
    return ScriptedLLMFactory()


def _uses_this_plugin(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return any(name in names for name in _FIXTURES)


def _only_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    leaves: list[BaseException] = []
    queue: list[BaseException] = [group]
    while queue:
        exc = queue.pop()
        if isinstance(exc, BaseExceptionGroup):
            queue.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test that uses these fixtures and fails with one exception shows that exception, as a
    test without a nursery would: the group the test's nursery wraps it in is taken off, so the
    report and pytest's one-line summary name the assertion itself."""
    try:
        return (yield)
    except BaseExceptionGroup as group:
        leaf = _only_leaf(group) if _uses_this_plugin(item) else None
        if not isinstance(leaf, Exception):
            raise
        raise leaf.with_traceback(leaf.__traceback__) from None
