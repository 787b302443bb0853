"""The framework's own contributions, registered through the same hooks as any plugin.

Registering the built-ins as a plugin (the tox pattern) keeps one path for everything: a
built-in kind and a third-party kind are found, checked for clashes and built the same way,
and a deployment can block this module by name
(``pm.set_blocked("nucleo_trio.plugins.builtin")`` before registration) to replace them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nucleo_trio.admission import (
    CountingGate,
    ElasticWindow,
    RateLimit,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.admission.elastic_window import TEMPLATE_SETTINGS
from nucleo_trio.admission.memory_reader import MemoryReader, ProcessMemoryReader
from nucleo_trio.guardrails import (
    CallerClassAllowListGuardrail,
    ExfiltrationMarkerGuardrail,
    PayloadSizeCapGuardrail,
    PIIDetectionGuardrail,
    PrincipalAllowListGuardrail,
    UrlGuardrail,
)
from nucleo_trio.heartbeat import HeartbeatStore, InMemoryHeartbeatStore, SQLiteHeartbeatStore
from nucleo_trio.heartbeat.store import _settings_of
from nucleo_trio.llm.providers import openai_compatible
from nucleo_trio.plugins.hookspecs import (
    DBProviderFactory,
    GuardrailFactory,
    LimiterFactory,
    ModelProviderFactory,
    hookimpl,
)
from nucleo_trio.resources import CountingDBResourceProvider, SQLiteProvider

__all__ = [
    "counting_database",
    "elastic_window",
    "nucleo_trio_db_provider_kinds",
    "nucleo_trio_guardrails",
    "nucleo_trio_heartbeat_store",
    "nucleo_trio_limiter_kinds",
    "nucleo_trio_memory_reader",
    "nucleo_trio_model_provider_kinds",
    "rate_limit",
    "sqlite_database",
    "token_bucket",
]


DEFAULT_BUCKET_BURST = 1
"""The burst a configured or catalogued bucket gets when none is stated: one request at a time,
spaced ``60 / rpm`` seconds apart, so no sliding minute ever holds more than ``rpm`` requests."""


def token_bucket(
    name: str, *, rpm: int, tpm: int, burst: float | None = DEFAULT_BUCKET_BURST
) -> TokenBucket:
    """A :class:`~nucleo_trio.admission.TokenBucket` for the model ``name``: ``rpm`` requests and
    ``tpm`` tokens a minute, at most ``burst`` requests at once (default 1: evenly spaced, so no
    sliding minute sees more than ``rpm``; ``None`` lets a whole minute's requests go at once)
    (``{"kind": "token_bucket", "settings": {"rpm": 600, "tpm": 60000}}``)."""
    return TokenBucket(name, TokenBucketConfig(rpm, tpm, burst=burst))


_WINDOW_TUNING = tuple(sorted(TEMPLATE_SETTINGS - {"base_window", "max_requests"}))


def elastic_window(name: str, *, max_requests: int, window: float, **tuning: Any) -> ElasticWindow:
    """An :class:`~nucleo_trio.admission.ElasticWindow` named ``name`` admitting
    ``max_requests`` per ``window`` seconds
    (``{"kind": "elastic_window", "settings": {"max_requests": 100, "window": 60}}``).

    Any template setting may be given by its name, among them the breaker's
    ``failures_at_max_to_block`` (push-backs at the throttle ceiling that open the circuit),
    ``initial_cooldown`` and ``max_cooldown`` (seconds), the ceiling ``max_throttle`` and the
    safety ``margin`` (seconds); the others keep the template's defaults. An unknown setting is
    a :class:`TypeError` naming it, a bad value the window's own error naming the setting.
    """
    unknown = sorted(set(tuning) - set(_WINDOW_TUNING))
    if unknown:
        raise TypeError(
            f"elastic_window {name!r}: unknown setting(s) {', '.join(map(repr, unknown))}; "
            f"known: 'max_requests', 'window', {', '.join(map(repr, _WINDOW_TUNING))}"
        )
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise TypeError(
            f"elastic_window {name!r}: window must be a number of seconds, got {window!r}"
        )
    template = type(
        "ConfiguredWindow",
        (ElasticWindow,),
        {"base_window": float(window), "max_requests": max_requests, **tuning},
    )
    window_account: ElasticWindow = template(name)
    return window_account


def rate_limit(
    name: str,
    *,
    limit: int,
    per: float = 1.0,
    burst: int | None = None,
    margin: float = 0.0,
) -> RateLimit:
    """A :class:`~nucleo_trio.admission.RateLimit` named ``name``: at most ``limit`` requests in
    any ``per`` seconds, at most ``burst`` at once, each slot held ``margin`` seconds beyond
    ``per`` (``{"kind": "rate_limit", "settings": {"limit": 5, "per": 1}}``)."""
    return RateLimit(limit, per, burst=burst, margin=margin, name=name)


@hookimpl
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:
    """Provide ``"counting"`` (a :class:`~nucleo_trio.admission.CountingGate` of ``capacity``
    permits), ``"token_bucket"`` (see :func:`token_bucket`), ``"elastic_window"`` (see
    :func:`elastic_window`) and ``"rate_limit"`` (see :func:`rate_limit`)."""
    return {
        "counting": CountingGate,
        "token_bucket": token_bucket,
        "elastic_window": elastic_window,
        "rate_limit": rate_limit,
    }


# --- database providers -------------------------------------------------------------------------


def sqlite_database(name: str, *, path: str, max_connections: int) -> SQLiteProvider:
    """A :class:`~nucleo_trio.resources.SQLiteProvider` for the database file ``path``, at most
    ``max_connections`` at once
    (``{"kind": "sqlite", "settings": {"path": "app.db", "max_connections": 4}}``)."""
    return SQLiteProvider(name, path, max_connections)


def counting_database(name: str, *, max_concurrent: int) -> CountingDBResourceProvider:
    """A :class:`~nucleo_trio.resources.CountingDBResourceProvider`: only the count of
    ``max_concurrent`` permits, for a stack that opens its own connections
    (``{"kind": "counting", "settings": {"max_concurrent": 8}}``)."""
    return CountingDBResourceProvider(name, max_concurrent)


@hookimpl
def nucleo_trio_db_provider_kinds() -> Mapping[str, DBProviderFactory]:
    """Provide ``"sqlite"`` (see :func:`sqlite_database`) and ``"counting"`` (see
    :func:`counting_database`)."""
    return {"sqlite": sqlite_database, "counting": counting_database}


@hookimpl
def nucleo_trio_model_provider_kinds() -> Mapping[str, ModelProviderFactory]:
    """Provide ``"openai_compatible"``: any OpenAI-compatible endpoint over the runtime's own
    httpx client (see :func:`~nucleo_trio.llm.openai_compatible`; settings ``base_url``,
    ``api_key``, ``credential``)."""
    return {"openai_compatible": openai_compatible}


@hookimpl(trylast=True)
def nucleo_trio_memory_reader(limit_bytes: int | None) -> MemoryReader:
    """Answer last with a :class:`~nucleo_trio.admission.ProcessMemoryReader`: the process's
    resident memory against the cgroup v2 limit or ``limit_bytes``, whichever is tighter, else
    physical memory. A plugin that answers first replaces it."""
    return ProcessMemoryReader(limit_bytes)


# --- guardrails ---------------------------------------------------------------------------------


@hookimpl
def nucleo_trio_guardrails() -> Mapping[str, GuardrailFactory]:
    """Provide the shipped guards by name: ``"payload_size_cap"`` (setting ``max_chars``),
    ``"pii_detection"``, ``"principal_allow_list"`` and ``"caller_class_allow_list"`` (setting
    ``allowed``), ``"url"`` and ``"exfiltration_marker"`` (setting ``direction``, a
    :class:`~nucleo_trio.guardrails.Direction`, for the content guards that take one)."""
    return {
        "payload_size_cap": PayloadSizeCapGuardrail,
        "pii_detection": PIIDetectionGuardrail,
        "principal_allow_list": PrincipalAllowListGuardrail,
        "caller_class_allow_list": CallerClassAllowListGuardrail,
        "url": UrlGuardrail,
        "exfiltration_marker": ExfiltrationMarkerGuardrail,
    }


# --- heartbeats ---------------------------------------------------------------------------------


@hookimpl(trylast=True)
def nucleo_trio_heartbeat_store(kind: str, settings: Mapping[str, Any]) -> HeartbeatStore | None:
    """Answer last for ``"memory"`` (an :class:`~nucleo_trio.heartbeat.InMemoryHeartbeatStore`,
    no settings) and ``"sqlite"`` (a :class:`~nucleo_trio.heartbeat.SQLiteHeartbeatStore` at the
    setting ``path``); ``None`` for any other kind, which a plugin may provide."""
    if kind == "memory":
        _settings_of(kind, settings, ())
        return InMemoryHeartbeatStore()
    if kind == "sqlite":
        _settings_of(kind, settings, ("path",))
        if "path" not in settings:
            raise ValueError("heartbeat store kind 'sqlite' needs the setting 'path'")
        return SQLiteHeartbeatStore(settings["path"])
    return None
