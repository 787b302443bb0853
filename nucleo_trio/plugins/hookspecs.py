"""Every hook a nucleo_trio plugin can implement, as a typed stub with its contract.

nucleo_trio is extended through `pluggy <https://pluggy.readthedocs.io>`_ under the project
name ``nucleo_trio``. A plugin is any module, class or object with functions decorated with
:data:`hookimpl` whose names match a stub below; a third-party distribution makes itself known
by declaring an entry point in the ``nucleo_trio`` group::

    [project.entry-points.nucleo_trio]
    my_limiters = "my_package.nucleo_plugin"

The built-ins use the very same hooks (see :mod:`nucleo_trio.plugins.builtin`), so a plugin's
contributions sit beside the framework's own on equal terms: a third-party account joins
grants, head reservation and rollback exactly like a built-in gate.

Two kinds of hook live here, and each stub says which it is:

* **registration hooks** fan out: every plugin may answer, all answers are gathered, and a name
  claimed by two plugins is refused naming both (limiter kinds, DB providers, guardrails,
  heartbeat job classes, event observers);
* **provider hooks** pick one thing and are ``firstresult``: the first plugin that answers
  something other than ``None`` wins (the memory reader, the heartbeat store).

A hook implementation may accept fewer arguments than its stub declares, never more; a
decorated function whose name matches no stub is refused when the plugin manager starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import pluggy

if TYPE_CHECKING:
    from nucleo_trio.admission import RateLimiter
    from nucleo_trio.admission.memory_reader import MemoryReader
    from nucleo_trio.dispatch import JobDispatcher
    from nucleo_trio.guardrails import Guardrail
    from nucleo_trio.heartbeat import HeartbeatStore
    from nucleo_trio.jobs import AbstractJob, AbstractStoppable, Identifiable
    from nucleo_trio.models import Provider
    from nucleo_trio.resources import DBResourceProvider

__all__ = [
    "PROJECT_NAME",
    "DBProviderFactory",
    "GuardrailFactory",
    "LimiterFactory",
    "ModelProviderFactory",
    "hookimpl",
    "hookspec",
    "nucleo_trio_db_provider_kinds",
    "nucleo_trio_guardrails",
    "nucleo_trio_heartbeat_jobs",
    "nucleo_trio_heartbeat_store",
    "nucleo_trio_limiter_kinds",
    "nucleo_trio_mcp_servers",
    "nucleo_trio_memory_reader",
    "nucleo_trio_model_catalog",
    "nucleo_trio_model_provider_kinds",
    "nucleo_trio_observers",
]

PROJECT_NAME: Final = "nucleo_trio"
"""The pluggy project name, and the entry-point group third-party distributions register in."""

hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a stub in this module as a hook specification."""

hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's function as the implementation of the hook of the same name."""


class LimiterFactory(Protocol):
    """Builds one account of a limiter kind: ``factory(name, **settings) -> RateLimiter``.

    ``name`` is the account's own name (it shows up in status rows and limiter events);
    ``settings`` are the kind's keyword options, typically read from configuration, such as
    ``capacity`` for a counting gate. A class whose constructor takes the name first is a
    factory as it stands: ``{"counting": CountingGate}``.

    A factory refuses settings it cannot honour by raising; the registry reports that failure
    naming the kind and the plugin that provides it.
    """

    # `*args` is never passed; with `**settings` it makes the signature gradual after `name`,
    # so a class such as `CountingGate(name, capacity)` type-checks as a factory.
    def __call__(self, name: str, /, *args: Any, **settings: Any) -> RateLimiter:
        """Build the account called ``name`` from the kind's keyword ``settings``.

        Raise when a setting cannot be honoured; the registry turns that into a
        :class:`~nucleo_trio.plugins.PluginError` naming the kind and its plugin.
        """
        ...


class DBProviderFactory(Protocol):
    """Builds one database provider of a kind: ``factory(name, **settings) -> provider``.

    ``name`` is the datasource's name (its admission account is ``db:<name>``); ``settings``
    are the kind's keyword options from configuration, such as ``path`` and
    ``max_connections`` for SQLite or ``conninfo`` for PostgreSQL.
    """

    def __call__(self, name: str, /, *args: Any, **settings: Any) -> DBResourceProvider:
        """Build the provider of the datasource called ``name`` from the kind's keyword
        ``settings``.

        Raise when a setting cannot be honoured; the registry turns that into a
        :class:`~nucleo_trio.plugins.PluginError` naming the kind and its plugin.
        """
        ...


class ModelProviderFactory(Protocol):
    """Builds the provider of one catalog provider key: ``factory(key, **settings) -> Provider``.

    ``key`` is the provider key catalog entries name as ``provider_key``; ``settings`` are the
    kind's keyword options from configuration, such as ``base_url`` and ``credential`` (the
    name of the environment variable that holds the API key, never the key itself).
    """

    def __call__(self, key: str, /, *args: Any, **settings: Any) -> Provider:
        """Build the :class:`~nucleo_trio.models.Provider` for ``key`` from the kind's keyword
        ``settings``.

        Raise when a setting cannot be honoured; the registry turns that into a
        :class:`~nucleo_trio.plugins.PluginError` naming the kind and its plugin.
        """
        ...


class GuardrailFactory(Protocol):
    """Builds one guard of a registered kind: ``factory(parent, **settings) -> Guardrail``.

    ``parent`` is the job the guard gates (a guard is a job, built fresh for every submission
    it judges); ``settings`` are the kind's keyword options from configuration, such as
    ``max_chars`` for a payload size cap. A guardrail class whose constructor takes the parent
    first is a factory as it stands.
    """

    def __call__(self, parent: Identifiable, /, *args: Any, **settings: Any) -> Guardrail:
        """Build one guard of ``parent``, the job it gates, from the kind's keyword
        ``settings``.

        Raise when a setting cannot be honoured; the registry turns that into a
        :class:`~nucleo_trio.plugins.PluginError` naming the guardrail and its plugin.
        """
        ...


# Each stub's body is only its docstring: pluggy reads a specification's name, arguments and
# options but never calls it, hence the `empty-body` ignores.


# --- limiters -----------------------------------------------------------------------------------


@hookspec
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:  # type: ignore[empty-body]
    """Name the limiter kinds this plugin provides (a registration hook: every answer counts).

    Called once per :class:`~nucleo_trio.plugins.LimiterRegistry` built from a plugin manager,
    that is, when the runtime assembles the accounts a configuration names by kind.

    Return a mapping from kind name (a non-empty string such as ``"counting"`` or
    ``"fixed_slots"``) to the :class:`LimiterFactory` that builds one account of that kind.
    The factory must return an object satisfying the
    :class:`~nucleo_trio.admission.RateLimiter` protocol; anything else is refused when the
    account is created, naming the kind and the plugin. A kind already provided by another
    plugin, built-ins included, is refused naming both plugins: kinds are never silently
    shadowed. Returning ``None`` or an empty mapping contributes nothing.
    """


# --- database providers -------------------------------------------------------------------------


@hookspec
def nucleo_trio_db_provider_kinds() -> Mapping[str, DBProviderFactory]:  # type: ignore[empty-body]
    """Name the database provider kinds this plugin provides (a registration hook).

    Return a mapping from kind name (``"sqlite"``, ``"postgres"``, ...) to the
    :class:`DBProviderFactory` that builds one provider of that kind. A configuration's
    ``databases`` table names a kind per datasource; the dispatcher builds each at start and
    registers it under its name. A kind provided by two plugins is refused naming both.
    """


# --- guardrails ---------------------------------------------------------------------------------


@hookspec
def nucleo_trio_guardrails() -> Mapping[str, GuardrailFactory]:  # type: ignore[empty-body]
    """Name the guardrails this plugin provides (a registration hook: every answer counts).

    Return a mapping from guardrail name (``"payload_size_cap"``, ``"url"``, ...) to the
    :class:`GuardrailFactory` that builds one guard. A configuration's ``guardrails`` table
    attaches guards by these names to tool classes; the dispatcher checks every attachment at
    start and builds the guards fresh, with the gated job as parent, on each submission. A name
    provided by two plugins is refused naming both.
    """


# --- models -------------------------------------------------------------------------------------


# MOD-05: fragments are read only when no catalog file is named.
@hookspec
def nucleo_trio_model_catalog() -> Mapping[str, Any] | None:
    """Contribute model catalog entries (a registration hook: every answer counts).

    Called when a dispatcher's :class:`~nucleo_trio.models.ModelRuntime` first needs its
    catalog and neither its configuration (``models``) nor the ``NUCLEO_TRIO_MODELS``
    environment variable names a catalog file; a named file is the whole catalog and no
    fragment is read.

    Return a catalog fragment: plain data of the catalog file's shape, a mapping with a
    ``models`` list of entries and optionally ``provider_defaults``, or ``None`` to contribute
    nothing. A fragment may not declare ``pins``; an entry id declared by two fragments, and a
    malformed entry, are refused naming the fragment's plugin, the entry and the field.
    """


@hookspec
def nucleo_trio_model_provider_kinds() -> Mapping[str, ModelProviderFactory]:  # type: ignore[empty-body]
    """Name the model provider kinds this plugin provides (a registration hook: every answer
    counts).

    Return a mapping from kind name (``"openai_compatible"``, ``"openai"``, ...) to the
    :class:`ModelProviderFactory` that builds the :class:`~nucleo_trio.models.Provider` of one
    provider key. A configuration's ``model_providers`` table names a kind per provider key;
    the dispatcher builds each when its plugins load and registers it on
    ``dispatcher.models.providers``, and closes what it holds when the dispatcher stops. A kind
    provided by two plugins is refused naming both.
    """


# --- memory -------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nucleo_trio_memory_reader(limit_bytes: int | None) -> MemoryReader | None:
    """Provide the reader the memory pressure gate measures with (a provider hook:
    ``firstresult``, the first answer that is not ``None`` wins).

    ``limit_bytes`` is the limit the deployment configured, or ``None``. The built-in answers
    last, with a reader of the process's resident memory against the tighter of the cgroup v2
    limit and the configured limit (physical memory when neither is set); a plugin answers
    first to measure something else
    (a container's whole memory, or the Python heap through tracemalloc in tests).
    """


# --- heartbeats ---------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nucleo_trio_heartbeat_store(kind: str, settings: Mapping[str, Any]) -> HeartbeatStore | None:
    """Provide the store that keeps a dispatcher's heartbeat schedule (a provider hook:
    ``firstresult``, the first answer that is not ``None`` wins).

    Called once per dispatcher, when it starts, with the configuration's ``heartbeat.kind`` and
    ``heartbeat.settings``. Answer a :class:`~nucleo_trio.heartbeat.HeartbeatStore` for a kind
    you provide and ``None`` for any other. The built-in answers last for ``"memory"`` (no
    settings) and ``"sqlite"`` (setting ``path``); a kind nobody answers for, or settings a
    provider refuses by raising, stop the start with a ``ConfigError`` naming the kind.
    """


@hookspec
def nucleo_trio_heartbeat_jobs() -> Mapping[str, type[AbstractJob[Any]]]:  # type: ignore[empty-body]
    """Name the job classes stored heartbeats may run (a registration hook: every answer counts).

    Called once per dispatcher while it loads its plugins, before its Heart fires anything, so
    the slots a durable store held over a restart find their classes. Return a mapping from the
    name a heartbeat row gives a job class (its ``heartbeat_name``, or any stable text such as
    ``"billing.close-books"``) to the class. A row naming a class by a name nobody registered
    fails its fire: a dispatcher never imports what a row names. A name two plugins give, or one
    the dispatcher's own ``heartbeat_jobs`` give another class, is a
    :class:`~nucleo_trio.plugins.PluginError` naming the plugin; returning ``None`` or an empty
    mapping contributes nothing.
    """


# --- MCP servers --------------------------------------------------------------------------------


@hookspec(firstresult=True)
def nucleo_trio_mcp_servers(
    dispatcher: JobDispatcher, settings: Mapping[str, Any]
) -> AbstractStoppable | None:
    """Provide the MCP servers of a dispatcher whose configuration declares some (a provider
    hook: ``firstresult``, the first answer that is not ``None`` wins).

    Called once per dispatcher while it loads its plugins, when its configuration's ``mcp``
    table is not empty, with the dispatcher and that table as written
    (``{"servers": {"files": {"command": "...", "args": [...]}}, "stdio_pool_max": 20}``).
    Answer the object that holds the servers, an
    :class:`~nucleo_trio.jobs.AbstractStoppable`: the dispatcher keeps it as
    ``dispatcher.mcp`` and stops it when it stops, after its jobs, however it stops. Answer
    ``None`` when you do not serve MCP. The ``nucleo-trio-mcp`` distribution answers it. A table
    nobody answers for stops the start with a :class:`~nucleo_trio.errors.ConfigError` naming
    the distribution to install; settings the provider refuses by raising, and an answer that
    is not a stoppable, stop it too, naming the plugin.
    """


# --- observers ----------------------------------------------------------------------------------


@hookspec
def nucleo_trio_observers(dispatcher: JobDispatcher) -> Iterable[object] | None:
    """Attach observers to a dispatcher's bus (a registration hook: every answer counts).

    Called once per dispatcher while it loads its plugins, before it starts and before anything
    is published, with the dispatcher itself (its ``config``, ``bus``, ``plugins`` and
    :meth:`~nucleo_trio.dispatch.JobDispatcher.health` are there to read).

    Return the observers to subscribe, in order, or ``None`` (or nothing) to subscribe none:
    each is a :class:`~nucleo_trio.bus.JobObserver` or a callable taking an event, and is
    subscribed to every event on the dispatcher's bus; a ``JobObserver`` narrows what it receives
    with its ``predicate``. A plugin that observes only when the deployment configured it
    answers ``None`` otherwise, so that installing it costs a dispatcher nothing. A hook that
    raises, or an answer that is not an iterable of observers, refuses the start with a
    :class:`~nucleo_trio.plugins.PluginError` naming the plugin.
    """
