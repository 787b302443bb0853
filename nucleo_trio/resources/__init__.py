"""Database providers: the contract a database stack implements to join admission, the
provider that is only a count, and the registry of providers by name."""

from .provider import (
    CountingDBResourceProvider as CountingDBResourceProvider,
    DBHandle as DBHandle,
    DBResourceProvider as DBResourceProvider,
)
from .registry import DBResourceProviders as DBResourceProviders
from .sqlite import SQLiteProvider as SQLiteProvider

__all__ = [
    "CountingDBResourceProvider",
    "DBHandle",
    "DBResourceProvider",
    "DBResourceProviders",
    "SQLiteProvider",
]
