"""The database provider contract, and the provider that is only a count.

A provider owns one database's admission account (its :class:`DatabaseGate`, ``db:<name>``)
and turns a permit the job already holds into a handle on a connection. Admission grants the
permit with the rest of the job's demand and takes it back at release; a handle never holds
it, so materializing connections can never become a second place a job waits.
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
        """The provider that made the handle; every other provider refuses it."""
        self.connection = connection
        """The driver's connection the handle holds, or ``None`` (the counting provider)."""
        self.read_only = read_only
        """The read-only hint the handle was acquired with."""
        self.closed = False
        """``True`` once the provider's ``close`` ran on it: the connection is handed back."""
        self.aborted = False
        """``True`` once the provider's ``abort`` ran on it: every later statement fails."""

    def unwrap(self) -> Any:
        """The connection, as ``context.resources.get(provider)`` hands it to the job."""
        return self.connection


@runtime_checkable
class DBResourceProvider(Protocol):
    """What a database stack implements to join admission.

    ``admission()`` is the account every declaring job's demand gets one permit on, stable for
    the provider's life. ``acquire`` builds a handle under a permit the caller already holds and
    never waits for one. The transaction verbs and ``close``/``abort`` take the handle; ``abort``
    severs the connection (phase two of a timeout), ``close`` hands it back, both repeatable.
    Every verb, ``close`` and ``abort`` refuse a handle another provider made with a
    :class:`ValueError` naming this provider. :class:`~nucleo_trio.testing.DBProviderContract`
    checks a provider against all of this.
    """

    @property
    def name(self) -> str:
        """The provider's name, a non-blank ``str``: jobs declare the database by it
        (``require_database("orders")``) and the dispatcher's registry keys it."""
        ...

    def admission(self) -> RateLimiter:
        """The account each job that declares this database takes one permit on, granted
        with the rest of its demand and given back when its resources close.

        The same object for the provider's whole life, RELEASE, sized to the most
        connections the provider hands out at once; the built-in providers answer a
        :class:`~nucleo_trio.admission.DatabaseGate` named ``db:<name>``.
        """
        ...

    async def acquire(self, read_only: bool = False) -> DBHandle:
        """A handle on a connection of its own for one job, opened under the permit the job
        already holds: it never waits for a permit and never gates.

        ``read_only`` is the job's hint (``JobRequirements.read_only_connections``); a later
        acquire does not inherit it. If it raises, the job's whole grant is rolled back and
        the job fails without running.
        """
        ...

    async def begin(self, handle: DBHandle) -> None:
        """Open a transaction on the handle's connection (the job required one)."""
        ...

    async def commit(self, handle: DBHandle) -> None:
        """Commit the handle's open transaction; the connection stays the handle's. After an
        abort it raises :class:`~nucleo_trio.errors.UncorrectableError`."""
        ...

    async def await_completion(self, handle: DBHandle) -> None:
        """Wait until the committed work is durable and visible to other connections (for a
        driver whose commit answers at once, until no call on the handle is in flight). A
        ``close`` or ``abort`` meanwhile releases the waiter."""
        ...

    async def rollback(self, handle: DBHandle) -> None:
        """Roll back the open transaction, discarding what it wrote; with none open it does
        nothing, and it can be repeated."""
        ...

    async def close(self, handle: DBHandle) -> None:
        """Hand the connection back, rolling back an open transaction; repeatable.

        It must hand the connection back after an :meth:`abort` too, and whatever it raises
        then is an :class:`~nucleo_trio.errors.UncorrectableError`. The job's permit goes back
        only once every handle's close has returned.
        """
        ...

    def abort(self, handle: DBHandle) -> None:
        """Sever the connection now, synchronously (phase two of a timeout, a shutdown):
        interrupt what is running, and make every later statement on the handle, commit
        included, fail with :class:`~nucleo_trio.errors.UncorrectableError`. Nothing written
        before it is committed. Repeatable; a :meth:`close` must follow to hand the connection
        back."""
        ...


class CountingDBResourceProvider:
    """The provider that is only the count: ``max_concurrent`` permits on ``db:<name>``.

    The job declares it and waits for a permit on ``db:<name>``; it then takes its connection from
    its own stack whenever it needs it, never more at once than the bound. ``acquire`` checks
    nothing out, and every verb does nothing but refuse, with a :class:`ValueError` naming the
    provider, a handle another provider made.
    """

    def __init__(self, name: str, max_concurrent: int) -> None:
        self._gate = DatabaseGate(name, max_concurrent)
        self._name = name

    @property
    def name(self) -> str:
        """The name given; the account is ``db:<name>``."""
        return self._name

    def admission(self) -> RateLimiter:
        """Its :class:`~nucleo_trio.admission.DatabaseGate`, ``db:<name>`` with
        ``max_concurrent`` permits, the same object for the provider's life."""
        return self._gate

    def _own(self, handle: DBHandle) -> DBHandle:
        if not isinstance(handle, DBHandle) or handle.provider is not self:
            raise ValueError(f"Handle was not produced by the counting provider {self._name!r}")
        return handle

    async def acquire(self, read_only: bool = False) -> DBHandle:
        """A handle with no connection (``unwrap()`` is ``None``): the job takes its
        connections from its own stack, under the permit it holds."""
        return DBHandle(self, None, read_only=read_only)

    async def begin(self, handle: DBHandle) -> None:
        """Does nothing: the job runs its own transactions."""
        self._own(handle)

    async def commit(self, handle: DBHandle) -> None:
        """Does nothing: the job runs its own transactions."""
        self._own(handle)

    async def await_completion(self, handle: DBHandle) -> None:
        """Returns at once: there is nothing in flight to wait for."""
        self._own(handle)

    async def rollback(self, handle: DBHandle) -> None:
        """Does nothing: the job runs its own transactions."""
        self._own(handle)

    async def close(self, handle: DBHandle) -> None:
        """Marks the handle closed; repeatable."""
        self._own(handle).closed = True

    def abort(self, handle: DBHandle) -> None:
        """Marks the handle aborted; repeatable."""
        self._own(handle).aborted = True

    def __repr__(self) -> str:
        return f"<CountingDBResourceProvider {self._name!r} max={self._gate.capacity}>"
