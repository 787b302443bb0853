"""The plugin module the ``nucleo_trio`` entry point names: the hooks this distribution answers.

The limiter kinds are added here as the shared accounts land; the Redis heartbeat store answers
``nucleo_trio_heartbeat_store`` from this module too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nucleo_trio.heartbeat import HeartbeatStore
from nucleo_trio.plugins import hookimpl

from .heartbeat_store import RedisHeartbeatStore

__all__ = ["nucleo_trio_heartbeat_store"]


@hookimpl
def nucleo_trio_heartbeat_store(kind: str, settings: Mapping[str, Any]) -> HeartbeatStore | None:
    """Provide the heartbeat store kind ``"redis"``: a schedule shared by every worker on one
    Redis, each slot fired once (settings ``url``, ``prefix``, ``claim_ttl``, ``timeout``; see
    :class:`~nucleo_trio_redis.heartbeat_store.RedisHeartbeatStore`)."""
    if kind != "redis":
        return None
    return RedisHeartbeatStore.from_settings(settings)
