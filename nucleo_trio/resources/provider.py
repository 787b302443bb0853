"""The database provider contract, and the provider that is only a count.

A provider owns one database's admission account (its :class:`DatabaseGate`, ``db:<name>``)
and turns a permit the job already holds into a handle on a connection. Admission grants the
permit with the rest of the job's demand and takes it back at release; a handle never holds
it, so materializing connections can never become a second place a job waits (DB-01, DB-02).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

from ..admission import DatabaseGate, RateLimiter

__all__ = ["CountingDBResourceProvider", "DBHandle", "DBResourceProvider"]

H = TypeVar("H")


class DBHandle:
    """One job's hold on one connection, made by one provider.

    ``connection`` is what the stack hands the job (``None`` for the counting provider, which
    checks nothing out); ``read_only`` is the hint the job acquired it with.
    """

    def __init__(
        self, provider: object, connection: Any = None, *, read_only: bool = False
    ) -> None:
        self.provider = provider
        self.connection = connection
        self.read_only = read_only
        self.closed = False
        self.aborted = False

    def unwrap(self) -> Any:
        return self.connection


@runtime_checkable
class DBResourceProvider(Protocol):
    """What a database stack implements to join admission (DB-01).

    ``admission()`` is the account every declaring job's demand gets one permit on, stable for
    the provider's life. ``acquire`` builds a handle under a permit the caller already holds and
    never waits for one. The transaction verbs and ``close``/``abort`` take the handle; ``abort``
    severs the connection (phase two of a timeout), ``close`` hands it back, both repeatable.
    """

    @property
    def name(self) -> str: ...

    def admission(self) -> RateLimiter: ...

    async def acquire(self, read_only: bool = False) -> DBHandle: ...

    async def begin(self, handle: DBHandle) -> None: ...

    async def commit(self, handle: DBHandle) -> None: ...

    async def await_completion(self, handle: DBHandle) -> None: ...

    async def rollback(self, handle: DBHandle) -> None: ...

    async def close(self, handle: DBHandle) -> None: ...

    def abort(self, handle: DBHandle) -> None: ...


class CountingDBResourceProvider:
    """The provider that is only the count (DB-03, DB-04).

    The job declares it and waits for a permit on ``db:<name>``; it then takes its connection from
    its own stack whenever it needs it, never more at once than the bound. ``acquire`` checks
    nothing out, and every verb does nothing.
    """

    def __init__(self, name: str, max_concurrent: int) -> None:
        self._gate = DatabaseGate(name, max_concurrent)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def admission(self) -> RateLimiter:
        return self._gate

    def _own(self, handle: DBHandle) -> DBHandle:
        if not isinstance(handle, DBHandle) or handle.provider is not self:
            raise ValueError(f"Handle was not produced by the counting provider {self._name!r}")
        return handle

    async def acquire(self, read_only: bool = False) -> DBHandle:
        return DBHandle(self, None, read_only=read_only)

    async def begin(self, handle: DBHandle) -> None:
        self._own(handle)

    async def commit(self, handle: DBHandle) -> None:
        self._own(handle)

    async def await_completion(self, handle: DBHandle) -> None:
        self._own(handle)

    async def rollback(self, handle: DBHandle) -> None:
        self._own(handle)

    async def close(self, handle: DBHandle) -> None:
        self._own(handle).closed = True

    def abort(self, handle: DBHandle) -> None:
        self._own(handle).aborted = True

    def __repr__(self) -> str:
        return f"<CountingDBResourceProvider {self._name!r} max={self._gate.capacity}>"
