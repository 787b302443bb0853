"""The library's one cattrs converter: configuration in, events and snapshots out.

Structuring forbids extra keys, so a typo in a configuration file is an error that names the
key instead of a setting silently ignored.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import cattrs
from cattrs.v import format_exception

from .errors import ConfigError

__all__ = ["converter", "read_settings_file", "structure_config", "unstructure"]

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True)


def _strict_bool(value: Any, _: type) -> bool:
    # cattrs would take bool("no") as True; a setting that reads true or false must say so.
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {value!r}")


converter.register_structure_hook(bool, _strict_bool)


def structure_config(data: Mapping[str, Any], cls: type[T], *, what: str | None = None) -> T:
    """Build ``cls`` from plain data, or raise :class:`ConfigError` listing every bad field."""
    label = what or cls.__name__
    if not isinstance(data, Mapping):
        raise ConfigError(f"{label}: expected a mapping of settings, got {type(data).__name__}")
    try:
        return converter.structure(dict(data), cls)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(cattrs.transform_error(exc, path=label, format_exception=_describe))
        raise ConfigError(f"invalid {label}: {problems}") from exc
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"invalid {label}: {exc}") from exc


def _describe(exc: BaseException, type_: type | None) -> str:
    # A validator's own words beat cattrs' generic "invalid value".
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    return format_exception(exc, type_)


def unstructure(value: Any) -> Any:
    """Plain data (dicts, lists, scalars) for a config, snapshot or status record."""
    return converter.unstructure(value)


def read_settings_file(path: str | os.PathLike[str], what: str) -> Mapping[str, Any]:
    """The table of settings in the TOML file (``.toml``) or JSON file (anything else) at
    ``path``; a :class:`ConfigError` starting with ``what`` and the file when it cannot be
    read, does not parse, or holds something other than a table."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what} {where}: cannot be read ({exc})") from exc
    toml = where.suffix.lower() == ".toml"
    try:
        data = tomllib.loads(text) if toml else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if toml else "JSON"
        raise ConfigError(f"{what} {where}: not valid {kind} (it does not parse: {exc})") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{what} {where}: expected a table of settings, got {type(data).__name__}"
        )
    return data
