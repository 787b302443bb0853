"""Building the plugin manager, and turning the limiter-kind hook into a registry.

:func:`make_plugin_manager` assembles plugins in a fixed order, the tox/datasette way: the hook
specifications, then the built-ins (registered through the same hooks as everyone else), then
the plugin objects the caller passes, then every entry point of the ``nucleo_trio`` group, and
finally ``check_pending()``, which refuses a decorated function that implements no known hook.
Every pluggy failure on that path comes back as a :class:`PluginError` that names the plugin
and the hook, because a typo'd hook name otherwise fails silently (nothing ever calls it).

:class:`LimiterRegistry` asks every plugin for its limiter kinds once, refuses a kind claimed
twice, and builds accounts by kind name with every failure traced to the plugin responsible.
:class:`DBProviderKinds` does the same for database provider kinds, and :class:`GuardrailKinds`
for guardrails registered by name.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar, cast

import pluggy

from nucleo_trio._plugin_errors import PluginError, plugin_label as _label
from nucleo_trio.admission import RateLimiter
from nucleo_trio.bus import JobObserver
from nucleo_trio.errors import ConfigError, UsageError
from nucleo_trio.errors._suggest import did_you_mean, nearest
from nucleo_trio.guardrails import Guardrail
from nucleo_trio.heartbeat.registry import HeartbeatJobs
from nucleo_trio.jobs import AbstractJob, AbstractStoppable, Identifiable
from nucleo_trio.models import Provider
from nucleo_trio.plugins import builtin, hookspecs
from nucleo_trio.plugins.hookspecs import (
    PROJECT_NAME,
    DBProviderFactory,
    GuardrailFactory,
    LimiterFactory,
    ModelProviderFactory,
)
from nucleo_trio.resources import DBResourceProvider

__all__ = [
    "DBProviderKinds",
    "GuardrailKinds",
    "LimiterRegistry",
    "ModelProviderKinds",
    "PluginError",
    "UnknownDBProviderKindError",
    "UnknownGuardrailKindError",
    "UnknownLimiterKindError",
    "UnknownModelProviderKindError",
    "heartbeat_jobs_from",
    "make_plugin_manager",
    "mcp_servers_from",
    "observers_from",
]

_T = TypeVar("_T")


class UnknownLimiterKindError(PluginError, LookupError):
    """A limiter kind was asked for that no registered plugin provides.

    The message lists the kinds that are known; a missing kind usually means the distribution
    that provides it is not installed in this environment.
    """


class UnknownDBProviderKindError(PluginError, LookupError):
    """A database provider kind was asked for that no registered plugin provides.

    The message lists the kinds that are known; ``"postgres"`` missing usually means the
    ``nucleo-trio-postgres`` distribution is not installed in this environment.
    """


class UnknownModelProviderKindError(PluginError, LookupError):
    """A model provider kind was asked for that no registered plugin provides.

    The message lists the kinds that are known; ``"openai"`` missing usually means the
    ``nucleo-trio-openai`` distribution is not installed in this environment.
    """


class UnknownGuardrailKindError(PluginError, LookupError):
    """A guardrail was asked for by a name that no registered plugin provides.

    The message lists the names that are known.
    """


def make_plugin_manager(
    *, load_entrypoints: bool = True, plugins: Iterable[object] = ()
) -> pluggy.PluginManager:
    """Return a plugin manager holding every nucleo_trio hook and every plugin, checked.

    The order is fixed: hook specifications, the built-ins (:mod:`nucleo_trio.plugins.builtin`),
    then ``plugins`` in the order given, then (when ``load_entrypoints`` is true) every entry
    point of the ``nucleo_trio`` group, then ``check_pending()``. Tests pass
    ``load_entrypoints=False`` to see only the built-ins and their own plugins.

    Raises :class:`PluginError` naming the plugin and hook when a plugin implements a hook that
    has no specification, implements one with arguments its specification lacks, is
    registered twice, or (for entry points) fails to import.
    """
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    _register(pm, builtin)
    for plugin in plugins:
        _register(pm, plugin)
    if load_entrypoints:
        _load_entrypoints(pm)
    _check_pending(pm)
    return pm


def _register(pm: pluggy.PluginManager, plugin: object) -> None:
    try:
        pm.register(plugin)
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {_label(pm, plugin)} was refused: {exc}") from exc
    except ValueError as exc:
        # pluggy refuses a second registration of the same object or the same name; its own
        # message dumps the whole registry, so it stays in the chained cause.
        raise PluginError(
            f"plugin {_label(pm, plugin)} cannot be registered: a plugin with that name or "
            "that very object is already registered (each plugin is registered once)"
        ) from exc


def _load_entrypoints(pm: pluggy.PluginManager) -> None:
    # One entry point at a time, so a module that fails to import is named on its own: the
    # distribution that declares it, the entry point, and the import error.
    for ep in sorted(
        importlib.metadata.entry_points(group=PROJECT_NAME), key=lambda ep: (ep.name, ep.value)
    ):
        try:
            pm.load_setuptools_entrypoints(PROJECT_NAME, name=ep.name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"entry-point plugin {_label(pm, exc.plugin)} was refused: {exc}"
            ) from exc
        except Exception as exc:
            dist = f"distribution {ep.dist.name} {ep.dist.version}" if ep.dist else "a distribution"
            raise PluginError(
                f"the {PROJECT_NAME!r} entry point {ep.name} = {ep.value} of {dist} "
                f"failed to import: {type(exc).__name__}: {exc}"
            ) from exc


def _check_pending(pm: pluggy.PluginManager) -> None:
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = sorted(
            name for name, caller in vars(pm.hook).items() if _is_hook(name) and caller.has_spec()
        )
        problems = []
        for hook_name, impl in _unspecified_impls(pm):
            hint = difflib.get_close_matches(hook_name, known, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            problems.append(
                f"plugin {_label(pm, impl.plugin)} implements hook {hook_name!r}, "
                f"which no nucleo_trio hook specification declares{suggestion}"
            )
        detail = "; ".join(problems) or str(exc)
        raise PluginError(f"{detail}. Known hooks: {', '.join(known)}") from exc


def _unspecified_impls(pm: pluggy.PluginManager) -> Iterator[tuple[str, pluggy.HookImpl]]:
    # The same scan pluggy's check_pending makes, kept here so the refusal can name every
    # offending (plugin, hook) pair rather than only the first.
    for hook_name, caller in sorted(vars(pm.hook).items()):
        if not _is_hook(hook_name) or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                yield hook_name, impl


def _is_hook(attribute: str) -> bool:
    # pluggy's HookRelay keeps its own bookkeeping in underscore attributes beside the hooks.
    return not attribute.startswith("_")


def _collect_named(
    pm: pluggy.PluginManager,
    hook_name: str,
    what: str,
    check: Callable[[object], _T | None],
    hook_kwargs: Mapping[str, object] | None = None,
) -> dict[str, tuple[_T, str]]:
    """Gather a fan-out registration hook whose answers are ``{name: thing}`` mappings.

    Returns ``{name: (thing, plugin label)}``. Each implementation is called on its own (rather
    than through ``pm.hook``) so every answer stays attributed to the plugin that gave it: a
    name claimed twice must be refused naming both claimants, and a malformed answer naming its
    author. ``check`` returns the thing when it is acceptable, else ``None``. ``hook_kwargs``
    are the hook's arguments; each implementation receives the ones it names, as pluggy does.

    Registration hooks take no wrappers, so wrapper implementations are not consulted.
    """
    caller = getattr(pm.hook, hook_name)
    kwargs = hook_kwargs or {}
    found: dict[str, tuple[_T, str]] = {}
    # pluggy lists implementations in registration order; built-ins come first.
    for impl in caller.get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        label = _label(pm, impl.plugin)
        try:
            answer = impl.function(*(kwargs[arg] for arg in impl.argnames))
        except Exception as exc:
            raise PluginError(f"plugin {label} failed answering {hook_name}: {exc!r}") from exc
        if answer is None:
            continue
        if not isinstance(answer, Mapping):
            raise PluginError(
                f"plugin {label} answered {hook_name} with {type(answer).__name__}, "
                f"expected a mapping of {what} names"
            )
        for name, thing in answer.items():
            if not isinstance(name, str) or not name:
                raise PluginError(
                    f"plugin {label} answered {hook_name} with {what} name {name!r}, "
                    "expected a non-empty string"
                )
            accepted = check(thing)
            if accepted is None:
                raise PluginError(
                    f"plugin {label} answered {hook_name} with {what} {name!r} -> {thing!r}, "
                    f"which is not a valid {what}"
                )
            if name in found:
                raise PluginError(
                    f"{what} {name!r} is provided by two plugins: {found[name][1]} and {label}; "
                    "uninstall or block one of them"
                )
            found[name] = (accepted, label)
    return found


def _as_job_class(thing: object) -> type[AbstractJob[Any]] | None:
    return thing if isinstance(thing, type) and issubclass(thing, AbstractJob) else None


def heartbeat_jobs_from(plugins: pluggy.PluginManager, jobs: HeartbeatJobs) -> HeartbeatJobs:
    """Register in ``jobs`` every job class the plugins name through
    ``nucleo_trio_heartbeat_jobs``, under the name each gives it; answer ``jobs``.

    A name two plugins give, an answer that is not a mapping of names to job classes, and a
    name or class ``jobs`` already holds otherwise, are each a :class:`PluginError` naming the
    plugin.
    """
    found = _collect_named(plugins, "nucleo_trio_heartbeat_jobs", "heartbeat job", _as_job_class)
    for name, (job_class, label) in found.items():
        try:
            jobs.register(job_class, name)
        except UsageError as exc:
            raise PluginError(
                f"plugin {label} answered nucleo_trio_heartbeat_jobs with {name!r}: {exc}"
            ) from exc
    return jobs


def observers_from(
    plugins: pluggy.PluginManager, dispatcher: object
) -> list[JobObserver[Any] | Callable[[Any], object]]:
    """Every observer the plugins attach to ``dispatcher`` through ``nucleo_trio_observers``,
    in plugin order.

    Each implementation is called on its own so that a failure names its plugin: a hook that
    raises, an answer that is not an iterable, and an item that is neither a
    :class:`~nucleo_trio.bus.JobObserver` nor callable are each a :class:`PluginError`.
    """
    found: list[JobObserver[Any] | Callable[[Any], object]] = []
    for impl in plugins.hook.nucleo_trio_observers.get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        label = _label(plugins, impl.plugin)
        try:
            answer = cast(
                "Iterable[object] | None", impl.function(*(dispatcher for _ in impl.argnames))
            )
            observers: tuple[object, ...] = () if answer is None else tuple(answer)
        except Exception as exc:
            raise PluginError(
                f"plugin {label} failed answering nucleo_trio_observers: {exc!r}"
            ) from exc
        for observer in observers:
            if not callable(observer) and not isinstance(observer, JobObserver):
                raise PluginError(
                    f"plugin {label} answered nucleo_trio_observers with {observer!r}, "
                    "which is neither a JobObserver nor a callable taking an event"
                )
            found.append(observer)
    return found


def mcp_servers_from(
    plugins: pluggy.PluginManager, dispatcher: object, settings: Mapping[str, Any]
) -> AbstractStoppable:
    """The MCP servers the plugins provide for ``dispatcher`` from its ``mcp`` table
    (``nucleo_trio_mcp_servers``, the first answer that is not ``None``).

    Each implementation is asked on its own so that a failure names its plugin: one that raises
    (settings it refuses) and one that answers something other than an
    :class:`~nucleo_trio.jobs.AbstractStoppable` are each a
    :class:`~nucleo_trio.errors.ConfigError` naming the plugin; no answer at all is one naming
    the distribution to install.
    """
    for impl in reversed(plugins.hook.nucleo_trio_mcp_servers.get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        label = _label(plugins, impl.plugin)
        arguments = {"dispatcher": dispatcher, "settings": settings}
        try:
            answer = impl.function(*(arguments[name] for name in impl.argnames))
        except Exception as exc:
            raise ConfigError(f"dispatcher config: mcp: plugin {label} refused it: {exc}") from exc
        if answer is None:
            continue
        if not isinstance(answer, AbstractStoppable):
            raise ConfigError(
                f"dispatcher config: mcp: plugin {label} answered nucleo_trio_mcp_servers with "
                f"{answer!r}, which is not an AbstractStoppable"
            )
        return answer
    raise ConfigError(
        "dispatcher config: mcp: no installed plugin serves MCP servers; the nucleo-trio-mcp "
        "plugin does: install it with `pip install -e plugins/nucleo-trio-mcp` from the "
        "repository's root"
    )


F = TypeVar("F", bound=Callable[..., Any])


def _as_callable(thing: object) -> Callable[..., Any] | None:
    # Only callability can be checked up front; the result is checked at each create().
    return thing if callable(thing) else None


_SHIPPED_KINDS = {
    "redis_": "nucleo-trio-redis",
    "postgres": "nucleo-trio-postgres",
}
"""Kinds the project's own plugin packages provide, by the start of their name: an unknown kind
that starts so names the package and its install command instead of guessing."""


def _install_hint(kind: object) -> str:
    if isinstance(kind, str):
        for prefix, package in _SHIPPED_KINDS.items():
            if kind.startswith(prefix):
                return (
                    f"the {package} plugin provides it: install it with "
                    f"`pip install -e plugins/{package}` from the repository's root"
                )
    return "is the plugin that provides it installed?"


def _guess(name: object, known: Iterable[str], *, shipped: bool = False) -> str:
    """`` (did you mean 'x'?)`` for a likely typo; nothing for a kind one of the project's own
    plugin packages provides (when ``shipped``), whose message names the package instead."""
    if shipped and isinstance(name, str) and name.startswith(tuple(_SHIPPED_KINDS)):
        return ""
    match = nearest(name, known)
    return f" (did you mean {match!r}?)" if match is not None and match != name else ""


def _accepted_settings(factory: Callable[..., Any]) -> list[str]:
    """The keyword settings ``factory`` names after its first argument, in its order; empty
    when its signature cannot be read."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters[1:] if p.kind in kinds]


def _unknown_settings(factory: Callable[..., Any], settings: Mapping[str, Any]) -> list[str]:
    """The settings ``factory`` cannot take, when its signature says so (a factory taking
    ``**settings`` takes anything, and answers for itself)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    accepted = set(_accepted_settings(factory))
    return sorted(name for name in settings if name not in accepted)


class _NamedFactories(Generic[F]):
    """What the three registries share: one hook asked once, the factories it named, who
    provides each, and the failures that name the kind and its plugin.

    A subclass sets the hook, how a kind is called in messages (``what``), the error for an
    unknown kind, and its own typed ``create`` on top of :meth:`_build`.
    """

    __slots__ = ("_kinds",)

    _hook: ClassVar[str]
    _what: ClassVar[str]
    _plural: ClassVar[str] = "kinds"
    _unknown: ClassVar[type[PluginError]]

    def __init__(self, plugin_manager: pluggy.PluginManager) -> None:
        collected = _collect_named(plugin_manager, self._hook, self._what, _as_callable)
        self._kinds: Mapping[str, tuple[F, str]] = types.MappingProxyType(
            {name: (cast(F, factory), label) for name, (factory, label) in collected.items()}
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every known name, sorted."""
        return tuple(sorted(self._kinds))

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds

    def provider(self, kind: str) -> str:
        """Name the plugin (and distribution, if any) that provides ``kind``."""
        return self._entry(kind)[1]

    def _entry(self, kind: str) -> tuple[F, str]:
        try:
            return self._kinds[kind]
        except (KeyError, TypeError):
            known = ", ".join(repr(k) for k in self.kinds) or "none"
            raise self._unknown(
                f"unknown {self._what} {kind!r}{_guess(kind, self.kinds, shipped=True)}; known "
                f"{self._plural}: {known} ({_install_hint(kind)})"
            ) from None

    def _build(self, kind: str, first: object, what_is_built: str, settings: dict[str, Any]) -> Any:
        """Call ``kind``'s factory with ``first`` and ``settings``; a failure is a
        :class:`PluginError` naming the kind and its plugin, chained to the cause."""
        factory, label = self._entry(kind)
        unknown = _unknown_settings(factory, settings)
        if unknown:
            accepted = _accepted_settings(factory)
            hints = "".join(did_you_mean(name, accepted) for name in unknown)
            raise PluginError(
                f"{self._what} {kind!r} from plugin {label} takes no setting "
                f"{', '.join(repr(name) for name in unknown)}{hints} (its settings: "
                f"{', '.join(accepted) or 'none'})"
            )
        try:
            return factory(first, **settings)
        except Exception as exc:
            # Only the settings' names are repeated: their values may be credentials.
            given = f"settings given: {', '.join(sorted(settings))}" if settings else "no settings"
            raise PluginError(
                f"{self._what} {kind!r} from plugin {label} could not build {what_is_built} "
                f"({given}): {type(exc).__name__}: {exc}"
            ) from exc

    def _refuse(self, kind: str, what_is_built: str, built: object, expected: str) -> PluginError:
        label = self._entry(kind)[1]
        return PluginError(
            f"{self._what} {kind!r} from plugin {label} built {what_is_built} as a "
            f"{type(built).__qualname__}, which {expected}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kinds={self.kinds!r})"


class LimiterRegistry(_NamedFactories[LimiterFactory]):
    """The limiter kinds every plugin provides, and the one place accounts are built by kind.

    Built from a plugin manager (usually :func:`make_plugin_manager`), it asks the
    ``nucleo_trio_limiter_kinds`` hook once and keeps the answers. Construction raises
    :class:`PluginError` when two plugins claim the same kind (naming both) or a plugin answers
    with something that is not a mapping of kind names to callables.

    >>> registry = LimiterRegistry(make_plugin_manager(load_entrypoints=False))
    >>> "counting" in registry.kinds
    True
    >>> gate = registry.create("counting", "render", capacity=4)
    """

    __slots__ = ()
    _hook = "nucleo_trio_limiter_kinds"
    _what = "limiter kind"
    _unknown = UnknownLimiterKindError

    def create(self, kind: str, name: str, **settings: Any) -> RateLimiter:
        """Build the account ``name`` of limiter kind ``kind`` from its ``settings``.

        Raises :class:`UnknownLimiterKindError` naming the kind and the known ones,
        ``ValueError`` for an empty or non-string ``name``, and :class:`PluginError` naming the
        kind and its plugin when the factory raises (the failure is chained as ``__cause__``)
        or returns something that does not satisfy the ``RateLimiter`` protocol.
        """
        self._entry(kind)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {kind!r} limiter needs a non-empty string name, got {name!r}")
        limiter = self._build(kind, name, repr(name), settings)
        if not isinstance(limiter, RateLimiter):
            raise self._refuse(
                kind, repr(name), limiter, "does not implement the RateLimiter protocol"
            )
        return limiter


class DBProviderKinds(_NamedFactories[DBProviderFactory]):
    """The database provider kinds every plugin provides, and the one place providers are built
    by kind (a configuration's ``databases`` table names a kind per datasource).

    Built from a plugin manager, it asks the ``nucleo_trio_db_provider_kinds`` hook once. As
    with :class:`LimiterRegistry`, a kind claimed by two plugins is refused naming both, and
    every failure to build names the kind and the plugin that provides it.

    >>> kinds = DBProviderKinds(make_plugin_manager(load_entrypoints=False))
    >>> kinds.kinds
    ('counting', 'sqlite')
    >>> provider = kinds.create("counting", "reports", max_concurrent=3)
    """

    __slots__ = ()
    _hook = "nucleo_trio_db_provider_kinds"
    _what = "database provider kind"
    _unknown = UnknownDBProviderKindError

    def create(self, kind: str, name: str, **settings: Any) -> DBResourceProvider:
        """Build the provider of datasource ``name`` of kind ``kind`` from its ``settings``.

        Raises :class:`UnknownDBProviderKindError` naming the kind and the known ones,
        ``ValueError`` for an empty or non-string ``name``, and :class:`PluginError` naming the
        kind and its plugin when the factory raises (chained as ``__cause__``) or returns
        something that does not satisfy the ``DBResourceProvider`` protocol or is named other
        than ``name``.
        """
        self._entry(kind)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {kind!r} database needs a non-empty string name, got {name!r}")
        provider = self._build(kind, name, repr(name), settings)
        if not isinstance(provider, DBResourceProvider):
            raise self._refuse(
                kind, repr(name), provider, "does not implement the DBResourceProvider protocol"
            )
        if provider.name != name:
            raise PluginError(
                f"{self._what} {kind!r} from plugin {self.provider(kind)} built {name!r} under "
                f"the name {provider.name!r}; a provider must carry its datasource's name"
            )
        return provider


class ModelProviderKinds(_NamedFactories[ModelProviderFactory]):
    """The model provider kinds every plugin provides, and the one place a
    :class:`~nucleo_trio.models.Provider` is built by kind (a configuration's
    ``model_providers`` table names a kind per provider key).

    Built from a plugin manager, it asks the ``nucleo_trio_model_provider_kinds`` hook once. A
    kind claimed by two plugins is refused naming both, and every failure to build names the
    kind and the plugin that provides it.

    >>> kinds = ModelProviderKinds(make_plugin_manager(load_entrypoints=False))
    >>> "openai_compatible" in kinds
    True
    >>> provider = kinds.create("openai_compatible", "local", base_url="http://127.0.0.1:8000/v1")
    >>> provider.key
    'local'
    """

    __slots__ = ()
    _hook = "nucleo_trio_model_provider_kinds"
    _what = "model provider kind"
    _unknown = UnknownModelProviderKindError

    def create(self, kind: str, key: str, **settings: Any) -> Provider:
        """Build the provider of the provider key ``key`` of kind ``kind`` from its
        ``settings``.

        Raises :class:`UnknownModelProviderKindError` naming the kind and the known ones,
        ``ValueError`` for an empty or non-string ``key``, and :class:`PluginError` naming the
        kind and its plugin when the factory raises (chained as ``__cause__``) or returns
        something that is not a :class:`~nucleo_trio.models.Provider` for ``key``.
        """
        self._entry(kind)
        if not isinstance(key, str) or not key:
            raise ValueError(f"a {kind!r} model provider needs a non-empty string key, got {key!r}")
        provider = self._build(kind, key, repr(key), settings)
        if not isinstance(provider, Provider):
            raise self._refuse(kind, repr(key), provider, "is not a Provider")
        if provider.key != key:
            raise PluginError(
                f"{self._what} {kind!r} from plugin {self.provider(kind)} built {key!r} under "
                f"the key {provider.key!r}; a provider must carry the key it is built for"
            )
        return provider


class GuardrailKinds(_NamedFactories[GuardrailFactory]):
    """The guardrails every plugin registers by name, and the one place a guard is built by
    name (a configuration's ``guardrails`` table attaches guards to tool classes by name).

    Built from a plugin manager, it asks the ``nucleo_trio_guardrails`` hook once. A name
    registered by two plugins is refused naming both, and every failure to build names the
    guardrail and the plugin that provides it.

    >>> kinds = GuardrailKinds(make_plugin_manager(load_entrypoints=False))
    >>> "payload_size_cap" in kinds
    True
    """

    __slots__ = ()
    _hook = "nucleo_trio_guardrails"
    _what = "guardrail"
    _plural = "guardrails"
    _unknown = UnknownGuardrailKindError

    def create(self, kind: str, parent: Identifiable, **settings: Any) -> Guardrail:
        """Build the guard registered as ``kind``, gating ``parent``, from its ``settings``.

        Raises :class:`UnknownGuardrailKindError` naming the name and the known ones, and
        :class:`PluginError` naming the guardrail and its plugin when the factory raises
        (chained as ``__cause__``) or returns something that is not a
        :class:`~nucleo_trio.guardrails.Guardrail`.
        """
        guard = self._build(kind, parent, "its guard", settings)
        if not isinstance(guard, Guardrail):
            raise self._refuse(kind, "its guard", guard, "is not a Guardrail")
        return guard
