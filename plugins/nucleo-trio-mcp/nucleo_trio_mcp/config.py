"""The servers a deployment declares: ``[mcp.servers.NAME]`` tables, as frozen settings.

A server is reached one of two ways, and its table says which by the keys it has:

* **stdio**: ``command`` (with ``args``, ``env`` and ``cwd``) starts the server as a child
  process and talks to it over its stdin and stdout;
* **streamable HTTP**: ``url`` (with ``headers``) talks to a server that is already running.

Every server has ``max_concurrent``, the size of its ``mcp:<name>`` gate: how many of its calls
may be in flight at once. The stdio servers together share one more cap, ``stdio_pool_max``,
the ``mcp:stdio`` gate. A typo'd key or a value of the wrong type is a
:class:`~nucleo_trio.errors.ConfigError` naming the server, the key and the value.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

import attrs
from cattrs.gen import make_dict_structure_fn, override

from nucleo_trio._redact import redacted_repr
from nucleo_trio._serialization import converter, read_settings_file, structure_config
from nucleo_trio.admission.named_gates import DEFAULT_STDIO_MAX_PER_ENDPOINT, DEFAULT_STDIO_POOL_MAX
from nucleo_trio.errors import ConfigError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "McpConfig",
    "McpServerConfig",
]

DEFAULT_CALL_TIMEOUT = 300.0
"""The deadline of one tool call, in seconds, when its server's table names none: five
minutes."""
DEFAULT_CONNECT_TIMEOUT = 60.0
"""How long starting a server and listing its tools may take, in seconds, when its table names
no other: one minute."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_PREFIX = re.compile(r"[A-Za-z0-9_-]*")


def _problem(owner: str, key: str, expected: str, value: object) -> ConfigError:
    shown = redacted_repr(value)
    return ConfigError(f"{owner}.{key} must be {expected}, got {type(value).__name__} {shown}")


def _optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _problem(type(instance).__name__, attribute.name, "a non-blank string", value)


def _texts(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
        raise _problem(type(instance).__name__, attribute.name, "a list of strings", value)


def _text_table(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        raise _problem(
            type(instance).__name__, attribute.name, "a table of strings to strings", value
        )


def _prefix(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _PREFIX.fullmatch(value):
        raise _problem(
            type(instance).__name__,
            attribute.name,
            "a string of letters, digits, '_' and '-' (what model APIs allow in a tool's name)",
            value,
        )


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _problem(type(instance).__name__, attribute.name, "a positive int", value)


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    if not ok or not 0 < value < math.inf:  # type: ignore[operator]
        raise _problem(type(instance).__name__, attribute.name, "positive, finite seconds", value)


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _as_dict(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One server: how to reach it, and how many of its calls may be in flight at once.

    Give ``command`` (a stdio server, started as a child process) or ``url`` (a streamable HTTP
    server), not both. ``args``, ``env`` and ``cwd`` belong to a command, ``headers`` to a url;
    a key of the other transport is refused. A ``repr`` masks the values of ``env`` and
    ``headers`` that look like credentials, and the credentials in a url.
    """

    command: str | None = attrs.field(default=None, validator=_optional_text)
    """The program that runs a stdio server (``"python"``, ``"npx"``); ``None`` for an HTTP
    server."""
    args: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple, validator=_texts)
    """The program's arguments; none by default."""
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=_as_dict, validator=_text_table, repr=redacted_repr
    )
    """Environment variables set for the program, over the few the SDK passes on (``PATH``,
    ``HOME`` and the like); none by default."""
    cwd: str | None = attrs.field(default=None, validator=_optional_text)
    """The directory the program starts in; ``None`` (the default) is the caller's."""
    url: str | None = attrs.field(default=None, validator=_optional_text, repr=redacted_repr)
    """The endpoint of a streamable HTTP server (``"http://127.0.0.1:8000/mcp"``); ``None`` for
    a stdio server."""
    headers: Mapping[str, str] = attrs.field(
        factory=dict, converter=_as_dict, validator=_text_table, repr=redacted_repr
    )
    """HTTP headers sent with every request to a url (an ``Authorization`` header, say); none
    by default."""
    max_concurrent: int = attrs.field(
        default=DEFAULT_STDIO_MAX_PER_ENDPOINT, validator=_positive_int
    )
    """The size of the server's ``mcp:<name>`` gate: how many of its calls may be in flight at
    once; 10 by default."""
    start: Literal["lazy", "at_start"] = attrs.field(default="lazy")
    """When the server is started (or, for a url, connected to): ``"lazy"`` (the default), the
    first time its tools are listed or called; ``"at_start"``, when the dispatcher starts."""
    protocol: Literal["auto", "legacy"] = attrs.field(default="auto")
    """How the protocol version is agreed: ``"auto"`` (the default) asks the server for the
    newest both sides speak, falling back to the initialize handshake of a 2025 server;
    ``"legacy"`` always uses the handshake."""
    timeout: float = attrs.field(default=DEFAULT_CALL_TIMEOUT, validator=_seconds)
    """The deadline of each tool call, in seconds (the call job's ``timeout``); 300 by
    default."""
    connect_timeout: float = attrs.field(default=DEFAULT_CONNECT_TIMEOUT, validator=_seconds)
    """How long starting the server, its handshake and the first listing of its tools may
    take, in seconds; 60 by default."""
    tool_prefix: str = attrs.field(default="", validator=_prefix)
    """Put before each of the server's tool names where a model sees them: with
    ``tool_prefix = "files_"`` a thinker is offered the server's ``read`` as ``files_read``, so
    the tools of two servers that share a name can serve one thinker. Letters, digits, ``_``
    and ``-``; none by default."""

    @start.validator
    def _check_start(self, attribute: attrs.Attribute[str], value: object) -> None:
        if value not in ("lazy", "at_start"):
            raise _problem("McpServerConfig", "start", '"lazy" or "at_start"', value)

    @protocol.validator
    def _check_protocol(self, attribute: attrs.Attribute[str], value: object) -> None:
        if value not in ("auto", "legacy"):
            raise _problem("McpServerConfig", "protocol", '"auto" or "legacy"', value)

    def __attrs_post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError(
                "McpServerConfig: give command (a stdio server) or url (a streamable HTTP "
                "server), exactly one of the two"
            )
        if self.command is not None and self.headers:
            raise ConfigError("McpServerConfig: headers belong to a url, not to a command")
        if self.url is not None:
            stray = [key for key in ("args", "env", "cwd") if getattr(self, key)]
            if stray:
                verb = "belongs" if len(stray) == 1 else "belong"
                raise ConfigError(
                    f"McpServerConfig: {' and '.join(stray)} {verb} to a command, not to a url"
                )

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``"stdio"`` for a server started from a command, ``"http"`` for a url."""
        return "stdio" if self.command is not None else "http"


def _servers(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise _problem("McpConfig", "servers", "a table of server tables", value)
    for name, server in value.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"McpConfig.servers: a server's name is letters, digits, '_' and '-', starting "
                f"with a letter or a digit; got {name!r}"
            )
        if not isinstance(server, McpServerConfig):
            raise _problem("McpConfig", f"servers.{name}", "an McpServerConfig", server)


@attrs.frozen(kw_only=True)
class McpConfig:
    """The ``[mcp]`` table: the servers by name, and the cap every stdio server shares.

    Build it in code (``McpConfig(servers={"files": McpServerConfig(command="...")})``) or from
    plain data with :meth:`from_mapping`, which refuses unknown keys by name.
    """

    servers: Mapping[str, McpServerConfig] = attrs.field(
        factory=dict, converter=_as_dict, validator=_servers
    )
    """The servers by name (letters, digits, ``_`` and ``-``); each name is also its gate's,
    ``mcp:<name>``. None by default."""
    stdio_pool_max: int = attrs.field(default=DEFAULT_STDIO_POOL_MAX, validator=_positive_int)
    """The size of the ``mcp:stdio`` gate: how many calls to stdio servers may be in flight at
    once, all servers together; 20 by default."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str | None = None) -> McpConfig:
        """Build the config from plain data (the ``[mcp]`` table of a parsed TOML file); an
        unknown key or a bad value is a :class:`~nucleo_trio.errors.ConfigError` naming it.
        ``source`` names where the data came from, for the message."""
        return structure_config(data, cls, what="mcp config", source=source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> McpConfig:
        """Read the ``[mcp]`` table of a TOML or JSON file (other tables are left to whoever
        reads them); a file with no ``mcp`` table declares no servers."""
        data = read_settings_file(path, "mcp config")
        table = data.get("mcp", {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"invalid mcp config in {path}: [mcp] must be a table")
        return cls.from_mapping(table, source=os.fspath(path))


def _as_written(value: Any, _: type) -> Any:
    # cattrs would turn "4" into 4 and a string into a tuple of its letters before the
    # validators see it; a value is judged as written instead.
    return value


def _structure_servers(data: Any) -> Any:
    """Each server's table on its own, so a refusal names the server."""
    if not isinstance(data, Mapping):
        return data  # the field's validator says what is wrong
    return {
        name: structure_config(table, McpServerConfig, what=f"server {name!r}")
        if isinstance(table, Mapping)
        else table
        for name, table in data.items()
    }


_every_field_as_written: dict[str, Any] = {
    field.name: override(struct_hook=_as_written) for field in attrs.fields(McpServerConfig)
}
converter.register_structure_hook(
    McpServerConfig,
    make_dict_structure_fn(McpServerConfig, converter, **_every_field_as_written),
)
converter.register_structure_hook(
    McpConfig,
    make_dict_structure_fn(
        McpConfig,
        converter,
        servers=override(struct_hook=lambda data, _: _structure_servers(data)),
        stdio_pool_max=override(struct_hook=_as_written),
    ),
)
