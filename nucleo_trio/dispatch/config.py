"""A dispatcher's settings, from code or from plain data (a parsed TOML or JSON file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._serialization import structure_config

__all__ = ["DispatcherConfig", "LimiterConfig"]


@attrs.frozen(kw_only=True)
class LimiterConfig:
    """One account a deployment declares by kind: ``{"kind": "counting", "settings": {...}}``."""

    kind: str
    settings: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class DispatcherConfig:
    """Settings of one dispatcher.

    ``http_connections`` sizes the ``http`` gate (one permit per admitted HTTP-using job).
    ``shutdown_timeout`` is how long :meth:`JobDispatcher.shutdown` waits for running jobs before
    interrupting them. ``seed`` makes re-run pacing reproducible. ``limiters`` declares accounts
    by plugin kind, built at start and reachable as ``dispatcher.limiters[name]``.
    :meth:`from_mapping` builds one from plain data (a parsed TOML or JSON file), refusing
    unknown keys by name.
    """

    http_connections: int = attrs.field(default=64)
    shutdown_timeout: float = attrs.field(default=30.0)
    seed: int | None = None
    limiters: dict[str, LimiterConfig] = attrs.field(factory=dict)

    @http_connections.validator
    def _check_http(self, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"DispatcherConfig.http_connections must be a positive int, got {value!r}"
            )

    @shutdown_timeout.validator
    def _check_shutdown(self, attribute: attrs.Attribute[float], value: float) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"DispatcherConfig.shutdown_timeout must be seconds >= 0, got {value!r}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DispatcherConfig:
        """Build a config from plain data; a typo'd key is a ConfigError naming it."""
        return structure_config(data, cls, what="dispatcher config")
