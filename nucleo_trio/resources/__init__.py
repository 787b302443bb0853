"""Database providers: the contract a database stack implements to join admission, the
provider that is only a count, the registry of providers by name, and the resources one
attempt holds (its grant and the handles opened under it)."""

from .job_resources import (
    COMMIT_WINDOW as COMMIT_WINDOW,
    CancelledAfterCommit as CancelledAfterCommit,
    CommitError as CommitError,
    GrantReleaseError as GrantReleaseError,
    JobResources as JobResources,
    ResourceCloseError as ResourceCloseError,
    demand_of as demand_of,
)
from .provider import (
    CountingDBResourceProvider as CountingDBResourceProvider,
    DBHandle as DBHandle,
    DBResourceProvider as DBResourceProvider,
)
from .registry import DBResourceProviders as DBResourceProviders
from .sqlite import SQLiteProvider as SQLiteProvider

__all__ = [
    "COMMIT_WINDOW",
    "CancelledAfterCommit",
    "CommitError",
    "CountingDBResourceProvider",
    "DBHandle",
    "DBResourceProvider",
    "DBResourceProviders",
    "GrantReleaseError",
    "JobResources",
    "ResourceCloseError",
    "SQLiteProvider",
    "demand_of",
]
