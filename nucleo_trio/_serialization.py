"""The library's one cattrs converter: configuration in, events and snapshots out.

Structuring forbids extra keys, so a typo in a configuration file is an error that names the
key instead of a setting silently ignored.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.v import format_exception

from ._redact import redacted_repr
from .errors import ConfigError, UsageTypeError
from .errors._suggest import did_you_mean, nearest

__all__ = [
    "converter",
    "read_settings_file",
    "structure_config",
    "suggest_keywords",
    "unstructure",
]

T = TypeVar("T")
C = TypeVar("C", bound=type)


def suggest_keywords(cls: C) -> C:
    """Make ``cls(...)`` with a keyword it does not take a :class:`~nucleo_trio.errors.
    UsageTypeError` (a ``TypeError``) naming the nearest keyword it does take, where Python's
    own message names only the one it got."""
    init = getattr(cls, "__init__")  # noqa: B009 - mypy refuses cls.__init__ on a type
    parameters = inspect.signature(init).parameters
    takes = [name for name in parameters if name != "self"]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return cls

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = [name for name in kwargs if name not in parameters]
        if unknown:
            name = unknown[0]
            match = nearest(name, takes)
            guess = f"did you mean {match!r}? " if match is not None else ""
            raise UsageTypeError(
                cls.__name__,
                f"{cls.__name__}() got an unexpected keyword argument {name!r}",
                f"{guess}It takes: {', '.join(takes)}",
            )
        init(self, *args, **kwargs)

    setattr(cls, "__init__", checked_init)  # noqa: B010 - mypy refuses assigning to a method
    return cls


converter = cattrs.Converter(forbid_extra_keys=True)


def _strict_bool(value: Any, _: type) -> bool:
    # cattrs would take bool("no") as True; a setting that reads true or false must say so.
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


converter.register_structure_hook(bool, _strict_bool)


def structure_config(
    data: Mapping[str, Any],
    cls: type[T],
    *,
    what: str | None = None,
    source: str | os.PathLike[str] | None = None,
) -> T:
    """Build ``cls`` from plain data, or raise :class:`ConfigError` listing every bad field.

    Each problem names the key and the value as written; ``source``, the file the data came
    from, heads the message, so a refusal read from a file says which file.
    """
    label = what or cls.__name__
    head = f"invalid {label}" if source is None else f"invalid {label} in {source}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{head}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return converter.structure(dict(data), cls)
    except cattrs.BaseValidationError as exc:
        raise ConfigError(f"{head}: {'; '.join(_problems(exc, data, label))}") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{head}: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{head}: the settings nest deeper than can be read") from None


_ABSENT = object()


def _problems(exc: BaseException, data: object, path: str) -> list[str]:
    # cattrs' transform_error, walking the data alongside the errors so that each problem can
    # show the value as written, and an unknown key its value too.
    if not isinstance(exc, ClassValidationError | IterableValidationError):
        return [f"{_describe(exc, data)} @ {path}"]
    found: list[str] = []
    with_notes, without = exc.group_exceptions()
    for sub, note in with_notes:
        if isinstance(note, AttributeValidationNote):
            key: object = note.name
            where = f"{path}.{note.name}"
        else:
            key = note.index
            where = f"{path}[{note.index!r}]"
        found.extend(_problems(sub, _item(data, key), where))
    found.extend(f"{_describe(sub, data)} @ {path}" for sub in without)
    return found


def _item(data: object, key: object) -> object:
    if isinstance(data, Mapping):
        return data.get(key, _ABSENT)
    if isinstance(data, list | tuple) and isinstance(key, int) and -len(data) <= key < len(data):
        return data[key]
    return _ABSENT


def _describe(exc: BaseException, value: object) -> str:
    if isinstance(exc, ForbiddenExtraKeysError) and isinstance(value, Mapping):
        unknown = ", ".join(
            f"{key} = {_cut(redacted_repr(value[key], key))}" for key in sorted(exc.extra_fields)
        )
        names = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        hints = "".join(did_you_mean(key, names) for key in sorted(exc.extra_fields))
        known = ", ".join(names)
        return f"unknown key(s) {unknown}{hints}" + (f" (known: {known})" if known else "")
    # A validator's own words beat cattrs' generic "invalid value", and name the value already.
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    text = format_exception(exc, None)
    return text if value is _ABSENT else f"{text}, got {_cut(redacted_repr(value))}"


def _cut(text: str, limit: int = 200) -> str:
    # A value as written may be a whole nested table: the message names it, it need not hold it.
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unstructure(value: Any) -> Any:
    """Plain data (dicts, lists, scalars) for a config, snapshot or status record."""
    return converter.unstructure(value)


_FORMATS = {".toml": "TOML", ".json": "JSON"}

MAX_SETTINGS_BYTES = 16 * 1024 * 1024
"""The largest settings file :func:`read_settings_file` reads (a configuration is kilobytes)."""


def read_settings_file(path: str | os.PathLike[str], what: str) -> Mapping[str, Any]:
    """The table of settings in the TOML file (``.toml``) or JSON file (``.json``) at ``path``;
    a :class:`ConfigError` starting with ``what`` and the file when its suffix names another
    format, or it cannot be read, is over :data:`MAX_SETTINGS_BYTES`, is not UTF-8, does not
    parse (nesting deeper than the parser can follow included), or holds something other than
    a table."""
    where = Path(path)
    kind = _FORMATS.get(where.suffix.lower())
    if kind is None:
        # A YAML file read as JSON would be refused as "not valid JSON", which misleads.
        shown = repr(where.suffix) if where.suffix else "no suffix"
        raise ConfigError(
            f"{what} {where}: unsupported format ({shown}); write it as TOML (.toml) or JSON (.json)"
        )
    try:
        with where.open("rb") as stream:
            raw = stream.read(MAX_SETTINGS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {where}: cannot be read ({exc})") from exc
    if len(raw) > MAX_SETTINGS_BYTES:
        raise ConfigError(
            f"{what} {where}: over {MAX_SETTINGS_BYTES} bytes, too large for a settings file"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{what} {where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}, "
            f"column {column})"
        ) from None
    toml = kind == "TOML"
    try:
        data = tomllib.loads(text) if toml else json.loads(text)
    except RecursionError:
        raise ConfigError(
            f"{what} {where}: not valid {kind} (it nests arrays or tables deeper than can be read)"
        ) from None
    except ValueError as exc:  # a syntax error, or an integer of over 4300 digits
        raise ConfigError(f"{what} {where}: not valid {kind} (it does not parse: {exc})") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{what} {where}: expected a table of settings, got {type(data).__name__}"
        )
    return data
