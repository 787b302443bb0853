"""The plugin module the ``nucleo_trio`` entry point names: the hooks this distribution answers.

Three limiter kinds, each building one shared account on a hub of its own (its own connection)
from configuration::

    {"kind": "redis_token_bucket",
     "settings": {"url": "redis://127.0.0.1:6379/0", "rpm": 600, "tpm": 60000, "burst": 20}}

The settings are the hub's keyword arguments (``url``, ``namespace``, ``worker``, ``lease_ttl``,
``reservation_ttl``, ``on_redis_lost``, ``local_share``, ``timeout``) and the account's. Each
account has its hub to itself, so its TTLs are its own. Such a hub starts itself the first time
admission asks its account inside a trio run, and stops, giving its lease back, when the
dispatcher that built the account stops (it closes the account, :meth:`SharedAccount.aclose
<nucleo_trio_redis.SharedAccount.aclose>`). The Redis heartbeat store answers
``nucleo_trio_heartbeat_store`` from this module too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from nucleo_trio.heartbeat import HeartbeatStore
from nucleo_trio.plugins.hookspecs import LimiterFactory, hookimpl

from .accounts import SharedAccount, SharedCountingGate, SharedElasticWindow, SharedTokenBucket
from .heartbeat_store import RedisHeartbeatStore
from .hub import RedisAccounts

__all__ = [
    "nucleo_trio_heartbeat_store",
    "nucleo_trio_limiter_kinds",
    "redis_counting",
    "redis_elastic_window",
    "redis_token_bucket",
]

_A = TypeVar("_A", bound=SharedAccount)

_HUB_SETTINGS = (
    "namespace",
    "worker",
    "lease_ttl",
    "reservation_ttl",
    "on_redis_lost",
    "local_share",
    "timeout",
)


def _hub(kind: str, settings: dict[str, Any]) -> RedisAccounts:
    if "url" not in settings:
        raise ValueError(f"{kind}: settings need a url (redis://host:port/db)")
    options = {key: settings.pop(key) for key in _HUB_SETTINGS if key in settings}
    return RedisAccounts(settings.pop("url"), **options)


def _own_hub(account: _A) -> _A:
    account._owns_hub = True  # closing the account closes its hub
    return account


def redis_token_bucket(name: str, **settings: Any) -> SharedTokenBucket:
    """A :class:`~nucleo_trio_redis.SharedTokenBucket` (``rpm``, ``tpm``, ``burst``, ``lease``,
    ``lease_max``, ``grant_log``) on a hub of its own (``url`` and the hub's settings)."""
    return _own_hub(_hub("redis_token_bucket", settings).token_bucket(name, **settings))


def redis_elastic_window(name: str, **settings: Any) -> SharedElasticWindow:
    """A :class:`~nucleo_trio_redis.SharedElasticWindow` (``max_requests``, ``window``,
    ``max_throttle``, the lease settings) on a hub of its own."""
    return _own_hub(_hub("redis_elastic_window", settings).elastic_window(name, **settings))


def redis_counting(name: str, **settings: Any) -> SharedCountingGate:
    """A :class:`~nucleo_trio_redis.SharedCountingGate` (``capacity``, the lease settings) on a
    hub of its own."""
    return _own_hub(_hub("redis_counting", settings).counting_gate(name, **settings))


@hookimpl
def nucleo_trio_limiter_kinds() -> Mapping[str, LimiterFactory]:
    """Provide ``redis_token_bucket``, ``redis_elastic_window`` and ``redis_counting``."""
    return {
        "redis_token_bucket": redis_token_bucket,
        "redis_elastic_window": redis_elastic_window,
        "redis_counting": redis_counting,
    }


@hookimpl
def nucleo_trio_heartbeat_store(kind: str, settings: Mapping[str, Any]) -> HeartbeatStore | None:
    """Provide the heartbeat store kind ``"redis"``: a schedule shared by every worker on one
    Redis, each slot fired once (settings ``url``, ``prefix``, ``claim_ttl``, ``timeout``; see
    :class:`~nucleo_trio_redis.heartbeat_store.RedisHeartbeatStore`)."""
    if kind != "redis":
        return None
    return RedisHeartbeatStore.from_settings(settings)
