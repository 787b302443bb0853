"""A dispatcher's settings, from code or from plain data (a parsed TOML or JSON file)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn, override

from .._redact import redacted_repr
from .._serialization import converter, read_settings_file, structure_config, suggest_keywords
from ..admission.memory_reader import parse_memory_limit
from ..admission.named_gates import DEFAULT_HTTP_POOL_SIZE
from ..errors import ConfigError

__all__ = [
    "DatabaseConfig",
    "DispatcherConfig",
    "GuardrailConfig",
    "HeartbeatConfig",
    "LimiterConfig",
    "MemoryConfig",
    "ModelProviderConfig",
]


def _names_a_kind(what: str) -> Callable[[object, attrs.Attribute[str], object], None]:
    """A ``kind`` validator: a non-blank string, else a ConfigError saying it must name ``what``."""

    def check(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
        if not isinstance(value, str) or not value.strip():
            owner = type(instance).__name__
            raise ConfigError(f"{owner}.kind must name {what}, got {value!r}")

    return check


_kind = _names_a_kind("a registered kind")


def _shown(settings: Mapping[str, Any]) -> str:
    """A settings table as a repr shows it: URLs and credential-like values masked."""
    return redacted_repr(settings)


def _settings(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        owner = type(instance).__name__
        raise ConfigError(
            f"{owner}.settings must be a table of settings, got {redacted_repr(value)}"
        )


@suggest_keywords
@attrs.frozen(kw_only=True)
class LimiterConfig:
    """One account a deployment declares by kind: ``{"kind": "counting", "settings": {...}}``."""

    kind: str = attrs.field(validator=_kind)
    """The account kind a plugin registers: built in, ``"counting"``, ``"token_bucket"``,
    ``"elastic_window"`` and ``"rate_limit"``. A blank one raises
    :class:`~nucleo_trio.errors.ConfigError`; an unknown one stops the dispatcher's start."""
    settings: dict[str, Any] = attrs.field(factory=dict, validator=_settings, repr=_shown)
    """The keyword arguments the kind is built with (``{"capacity": 4}`` for a counting gate);
    empty by default. A ``repr`` masks URLs and credential-like values."""


@suggest_keywords
@attrs.frozen(kw_only=True)
class GuardrailConfig:
    """One guard a deployment attaches to a tool class by registered name:
    ``{"kind": "payload_size_cap", "settings": {"max_chars": 4000}}``."""

    kind: str = attrs.field(validator=_kind)
    settings: dict[str, Any] = attrs.field(factory=dict, validator=_settings, repr=_shown)


@suggest_keywords
@attrs.frozen(kw_only=True)
class DatabaseConfig:
    """One datasource a deployment declares by provider kind:
    ``{"kind": "postgres", "settings": {"conninfo": "...", "max_connections": 4}}``."""

    kind: str = attrs.field(validator=_kind)
    """The provider kind a plugin registers: built in, ``"sqlite"`` and ``"counting"``;
    ``"postgres"`` comes with the Postgres plugin. A blank one raises
    :class:`~nucleo_trio.errors.ConfigError`; an unknown one stops the dispatcher's start."""
    settings: dict[str, Any] = attrs.field(factory=dict, validator=_settings, repr=_shown)
    """The keyword arguments the provider is built with; empty by default. A ``repr`` masks
    URLs and credential-like values (a connection string's password)."""


@suggest_keywords
@attrs.frozen(kw_only=True)
class ModelProviderConfig:
    """The provider of one catalog provider key, declared by kind:
    ``{"kind": "openai", "settings": {"credential": "OPENAI_API_KEY"}}``."""

    kind: str = attrs.field(validator=_kind)
    """The model provider kind a plugin registers: built in, ``"openai_compatible"``;
    ``"openai"`` comes with the OpenAI plugin. A blank one raises
    :class:`~nucleo_trio.errors.ConfigError`; an unknown one stops the dispatcher's start."""
    settings: dict[str, Any] = attrs.field(factory=dict, validator=_settings, repr=_shown)
    """The keyword arguments the provider is built with (``base_url``, ``credential``, ...);
    empty by default. A ``repr`` masks URLs and credential-like values."""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _signing_key(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        shown = "a blank string" if isinstance(value, str) else type(value).__name__
        raise ConfigError(f"HeartbeatConfig.signing_key must be a non-blank string, got {shown}")


def _signing_key_env(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise ConfigError(
            f"HeartbeatConfig.signing_key_env must name an environment variable "
            f"(letters, digits, underscores), got {value!r}"
        )
    if getattr(instance, "signing_key", None) is not None:
        raise ConfigError(
            "HeartbeatConfig: give signing_key or signing_key_env, not both (the environment "
            "variable is the one to keep)"
        )


def _hidden(value: object) -> str:
    return "None" if value is None else "'***'"


@suggest_keywords
@attrs.frozen(kw_only=True)
class HeartbeatConfig:
    """The store that keeps the heartbeat schedule, by plugin kind, and the key its rows are
    signed with: ``{"kind": "sqlite", "settings": {"path": "beats.db"},
    "signing_key_env": "NUCLEO_HEARTBEAT_KEY"}``.

    ``"memory"`` (the default, no settings) forgets the schedule at exit; ``"sqlite"`` (setting
    ``path``) keeps it in a file, so adaptive schedules survive a restart. A plugin provides
    other kinds through the ``nucleo_trio_heartbeat_store`` hook. A store that keeps the
    schedule outside the process signs every row, and needs a key: ``signing_key_env`` names
    the environment variable that holds it (read at start), or ``signing_key`` is the key
    itself (at least 16 bytes; never shown in a ``repr``). Every worker sharing a store holds
    the same key.
    """

    kind: str = attrs.field(default="memory", validator=_names_a_kind("a heartbeat store kind"))
    """The store kind: ``"memory"`` (the default), ``"sqlite"``, or one a plugin provides."""
    settings: dict[str, Any] = attrs.field(factory=dict, validator=_settings, repr=_shown)
    """The store's settings (``{"path": "beats.db"}`` for ``"sqlite"``); empty by default."""
    signing_key: str | None = attrs.field(default=None, validator=_signing_key, repr=_hidden)
    """The key a durable store signs its rows with, at least 16 bytes; never shown in a
    ``repr``. ``None`` by default; prefer :attr:`signing_key_env`, and give only one of the
    two."""
    signing_key_env: str | None = attrs.field(default=None, validator=_signing_key_env)
    """The name of the environment variable that holds the signing key, read at start
    (``"NUCLEO_HEARTBEAT_KEY"``); ``None`` by default. Anything but a variable name raises
    :class:`~nucleo_trio.errors.ConfigError`."""


def _memory_limit(value: int | str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_memory_limit(value, what="MemoryConfig.limit")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


@suggest_keywords
@attrs.frozen(kw_only=True)
class MemoryConfig:
    """The memory pressure gate (on by default): ``{"enabled": true, "limit": "8GiB"}``.

    ``limit`` takes bytes or a size (``"8GiB"``, ``"512MiB"``, ``"2GB"``) and stores bytes. In
    plain data ``memory = false`` is short for ``{"enabled": false}``.
    """

    enabled: bool = attrs.field(default=True)
    """Whether the dispatcher runs its memory pressure gate; ``True`` by default. ``False``
    puts the no-op :class:`~nucleo_trio.admission.UnboundedMemory` in its seat."""
    limit: int | None = attrs.field(default=None, converter=_memory_limit)
    """The memory the gate measures against, in bytes (a size such as ``"8GiB"`` is converted);
    a tighter cgroup v2 limit still wins. ``None``, the default, uses the cgroup v2 limit, or
    else the machine's physical memory. A size that cannot be read raises
    :class:`~nucleo_trio.errors.ConfigError`."""

    @enabled.validator
    def _check_enabled(self, attribute: attrs.Attribute[bool], value: object) -> None:
        if not isinstance(value, bool):
            raise ConfigError(f"MemoryConfig.enabled must be True or False, got {value!r}")


def _structure_memory(data: Any, _: type) -> MemoryConfig:
    if isinstance(data, MemoryConfig):
        return data
    if isinstance(data, bool):
        return MemoryConfig(enabled=data)
    if not isinstance(data, Mapping):
        raise ValueError(
            f"memory must be a table of settings (enabled, limit) or a boolean, got {data!r}"
        )
    unknown = sorted(set(data) - {"enabled", "limit"})
    if unknown:
        raise ValueError(f"memory: unknown setting(s) {unknown}; known: enabled, limit")
    return MemoryConfig(**data)


converter.register_structure_hook(MemoryConfig, _structure_memory)


_INF = math.inf
_MAX_SOCKET_PATH = 107
"""The longest path a Unix socket may be bound to on Linux (``sun_path`` holds 108 bytes,
the last one a NUL)."""


def _refused(attribute: attrs.Attribute[Any], expected: str, value: object) -> ConfigError:
    shown = f"{type(value).__name__} {value!r}" if isinstance(value, str | bool) else repr(value)
    return ConfigError(f"DispatcherConfig.{attribute.name} must be {expected}, got {shown}")


@suggest_keywords
@attrs.frozen(kw_only=True)
class DispatcherConfig:
    """Settings of one dispatcher, all optional and frozen once built.

    Build one in code (``DispatcherConfig(http_connections=200)``), or from plain data with
    :meth:`from_mapping` or :meth:`from_file`, which refuse unknown keys by name. Every field
    is checked when the config is built: a value of the wrong type or out of range raises
    :class:`~nucleo_trio.errors.ConfigError` naming the field and the value.
    """

    http_connections: int = attrs.field(default=DEFAULT_HTTP_POOL_SIZE)  # GATE-05
    """The size of the ``http`` gate: how many jobs that need an HTTP connection are admitted
    at once; a positive int, 1000 by default. Size the HTTP client's pool
    (:attr:`HttpSettings.pool_size <nucleo_trio.http.HttpSettings.pool_size>`) to the same
    number, so an admitted job always finds a connection."""
    shutdown_timeout: float = attrs.field(default=30.0)
    """Seconds :meth:`JobDispatcher.shutdown` waits for running jobs before it interrupts
    them, when it is called without a timeout; finite and >= 0, 30 by default (0 also means
    30)."""
    seed: int | None = attrs.field(default=None)
    """Seeds the jitter of re-run pacing, so a test's delays repeat; ``None`` (the default)
    seeds from the system."""
    limiters: dict[str, LimiterConfig] = attrs.field(factory=dict)
    """Accounts by name, each declared by plugin kind; built at start and reachable as
    ``dispatcher.limiters[name]``. Empty by default."""
    databases: dict[str, DatabaseConfig] = attrs.field(factory=dict)
    """Database providers by name, each declared by plugin kind; built at start, registered in
    ``dispatcher.databases`` under their names (what ``require_database(name)`` finds), and
    closed at shutdown. Empty by default."""
    model_providers: dict[str, ModelProviderConfig] = attrs.field(factory=dict)
    """Model providers by the provider key catalog entries name, each declared by plugin kind;
    built when the plugins load, registered on ``dispatcher.models.providers``, and closed when
    the dispatcher stops. Empty by default."""
    mcp: dict[str, Any] = attrs.field(factory=dict, repr=_shown)
    """The MCP servers a deployment declares, as its ``[mcp]`` table is written
    (``[mcp.servers.NAME]`` with a ``command`` or a ``url``, ``stdio_pool_max``); empty by
    default. The plugin that serves MCP (``nucleo-trio-mcp``) reads it when the plugins load,
    and its servers are the dispatcher's, as :attr:`JobDispatcher.mcp
    <nucleo_trio.dispatch.JobDispatcher.mcp>`; a table with no such plugin installed, or one it
    refuses, stops the start with :class:`~nucleo_trio.errors.ConfigError`."""
    memory: MemoryConfig = attrs.field(
        factory=MemoryConfig, validator=attrs.validators.instance_of(MemoryConfig)
    )
    """The memory pressure gate (:class:`MemoryConfig`): on by default, measured against the
    cgroup or machine limit. In plain data, ``memory = false`` turns it off."""
    health_every: int | None = attrs.field(default=None)
    """Log a health snapshot every that many limiter and lifecycle events (a
    :class:`~nucleo_trio.observability.SystemHealthReporter`; 50 is a usual value). ``None``,
    the default, is off: a subscriber makes the bus build every event, which costs each job a
    little. :meth:`JobDispatcher.health` answers either way."""
    log_events: bool = attrs.field(default=False)
    """Subscribe an :class:`~nucleo_trio.observability.EventLogger` at start, which writes
    every event but limiter events to the ``nucleo_trio.events`` loggers. ``False`` by
    default, for the same cost as :attr:`health_every`."""
    guardrails: dict[str, list[GuardrailConfig]] = attrs.field(factory=dict)
    """Guards attached by registered name to tool classes, keyed by the class's name with its
    module (``{"myapp.tools.Fetch": [{"kind": "url"}]}``); they join the guards the class
    declares on every submission of it or of a subclass. An unknown kind stops the start with
    :class:`~nucleo_trio.errors.ConfigError`. Empty by default."""
    heartbeat: HeartbeatConfig = attrs.field(
        factory=HeartbeatConfig, validator=attrs.validators.instance_of(HeartbeatConfig)
    )
    """The store that keeps the heartbeat schedule (:class:`HeartbeatConfig`); in memory by
    default."""
    models: str | None = attrs.field(default=None)  # MOD-05
    """The model catalog file (TOML or JSON) the dispatcher's
    :class:`~nucleo_trio.models.ModelRuntime` loads on first use. ``None``, the default, falls
    back to the file the ``NUCLEO_TRIO_MODELS`` variable names, then to what the plugins
    provide."""
    control_socket: str | None = attrs.field(default=None)
    """The path of a Unix socket the dispatcher opens at start for ``nucleo-trio top``
    (:mod:`nucleo_trio.observability.control`): read-only, owner-only (mode 0600), in a
    directory that must belong to the user and be writable by nobody else; at most 107 bytes.
    ``None``, the default, is off; on, it costs each job a little, as :attr:`health_every`
    does."""

    @mcp.validator
    def _check_mcp(self, attribute: attrs.Attribute[dict[str, Any]], value: object) -> None:
        if not isinstance(value, Mapping):
            raise _refused(attribute, "a table of MCP settings (servers, stdio_pool_max)", value)

    @http_connections.validator
    def _check_http(self, attribute: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise _refused(attribute, "a positive int", value)

    @shutdown_timeout.validator
    def _check_shutdown(self, attribute: attrs.Attribute[float], value: object) -> None:
        # NaN fails the range too: it compares false with everything.
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < _INF:
            raise _refused(attribute, "finite seconds >= 0 (0 means the default, 30 s)", value)

    @seed.validator
    def _check_seed(self, attribute: attrs.Attribute[int | None], value: object) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _refused(attribute, "an int or None", value)

    @health_every.validator
    def _check_health_every(self, attribute: attrs.Attribute[int | None], value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise _refused(attribute, "a positive int or None", value)

    @log_events.validator
    def _check_log_events(self, attribute: attrs.Attribute[bool], value: object) -> None:
        if not isinstance(value, bool):
            raise _refused(attribute, "a bool (True or False)", value)

    @models.validator
    def _check_models(self, attribute: attrs.Attribute[str | None], value: object) -> None:
        if value is not None and not isinstance(value, str):
            raise _refused(attribute, "a file name or None", value)

    @control_socket.validator
    def _check_control_socket(self, attribute: attrs.Attribute[str | None], value: object) -> None:
        if value is None:
            return
        if not isinstance(value, str) or not value.strip():
            raise _refused(attribute, "the path of a Unix socket (a non-blank str) or None", value)
        if len(os.fsencode(value)) > _MAX_SOCKET_PATH:
            raise ConfigError(
                f"DispatcherConfig.control_socket is {len(os.fsencode(value))} bytes long, "
                f"over the {_MAX_SOCKET_PATH} a Unix socket's path may have: {value!r}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DispatcherConfig:
        """Build a config from plain data; a typo'd key is a ConfigError naming it."""
        return structure_config(data, cls, what="dispatcher config")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> DispatcherConfig:
        """Read a config from a TOML file (``.toml``) or a JSON file (``.json``).

        Any other suffix (``.yaml`` included) is refused as an unsupported format. A file that
        cannot be read or parsed is a :class:`ConfigError` naming the file (and, for a syntax
        error, where in it); its contents are judged as :meth:`from_mapping` judges them, and
        every refusal names the file, the key and the value.
        """
        data = read_settings_file(path, "dispatcher config")
        return structure_config(data, cls, what="dispatcher config", source=path)


def _as_written(value: Any, _: type) -> Any:
    # cattrs would turn "10" or true into 10.0 and 8.9 into 8 before the validators see them;
    # handing a scalar over as written lets the file and the constructor meet one check.
    return value


# A kind written as a number would be read as its string ("3"); judged as written instead.
for _declared in (
    LimiterConfig,
    GuardrailConfig,
    DatabaseConfig,
    ModelProviderConfig,
    HeartbeatConfig,
):
    converter.register_structure_hook(
        _declared,
        make_dict_structure_fn(
            _declared,
            converter,
            kind=override(struct_hook=_as_written),
            settings=override(struct_hook=_as_written),
        ),
    )

converter.register_structure_hook(
    HeartbeatConfig,
    make_dict_structure_fn(
        HeartbeatConfig,
        converter,
        kind=override(struct_hook=_as_written),
        settings=override(struct_hook=_as_written),
        signing_key=override(struct_hook=_as_written),
        signing_key_env=override(struct_hook=_as_written),
    ),
)

converter.register_structure_hook(
    DispatcherConfig,
    make_dict_structure_fn(
        DispatcherConfig,
        converter,
        http_connections=override(struct_hook=_as_written),
        shutdown_timeout=override(struct_hook=_as_written),
        seed=override(struct_hook=_as_written),
        health_every=override(struct_hook=_as_written),
        log_events=override(struct_hook=_as_written),
        models=override(struct_hook=_as_written),
        control_socket=override(struct_hook=_as_written),
        mcp=override(struct_hook=_as_written),
    ),
)
