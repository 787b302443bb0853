"""Accounts shared by many nucleo_trio workers through one Redis.

A :class:`RedisAccounts` hub holds the connection and makes the accounts; each account answers
admission synchronously from a lease of the shared capacity that the hub keeps in step with
Redis (see :mod:`nucleo_trio_redis.accounts` and :mod:`nucleo_trio_redis.hub`). A
:class:`RedisHeartbeatStore` shares one heartbeat schedule among the workers, each slot fired
once (see :mod:`nucleo_trio_redis.heartbeat_store`).
"""

from __future__ import annotations

import logging as _logging

from .accounts import (
    SharedAccount as SharedAccount,
    SharedAccountStatus as SharedAccountStatus,
    SharedCountingGate as SharedCountingGate,
    SharedElasticWindow as SharedElasticWindow,
    SharedTokenBucket as SharedTokenBucket,
)
from .errors import RedisUnavailableError as RedisUnavailableError
from .heartbeat_store import RedisHeartbeatStore as RedisHeartbeatStore
from .hub import RedisAccounts as RedisAccounts

__all__ = [
    "RedisAccounts",
    "RedisHeartbeatStore",
    "RedisUnavailableError",
    "SharedAccount",
    "SharedAccountStatus",
    "SharedCountingGate",
    "SharedElasticWindow",
    "SharedTokenBucket",
]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name

# The plugin is quiet unless the program configures logging (a library's NullHandler).
_logging.getLogger("nucleo_trio_redis").addHandler(_logging.NullHandler())
