"""What one attempt holds: the grant, and the database handles materialized under it.

The dispatcher admits the attempt's whole demand first (:func:`demand_of` builds it from the
requirements), then :meth:`JobResources.materialize` opens one handle per declared provider
under the permits the grant already holds, so opening a connection can never become a second
place a job waits. A handle that fails to open rolls the whole grant back and the job never
runs (JR-10).

The handles are fixed once materialized, in declaration order (JR-11): a forced close racing a
``commit_all`` walks the same immutable mapping. Closing settles the grant exactly once, by
whichever of :meth:`~JobResources.aclose` (the cooperative close) and
:meth:`~JobResources.force_close` (phase two of a timeout) comes first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import trio

from ..admission import Admission, Demand, Grant
from ..errors import UncorrectableError, add_suppressed
from .provider import DBHandle, DBResourceProvider

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter
    from ..jobs.context import JobContext
    from ..jobs.requirements import JobRequirements

__all__ = [
    "FORCED_CLOSE_WINDOW",
    "JobResources",
    "ResourceCloseError",
    "demand_of",
]

log = logging.getLogger("nucleo_trio.resources")

FORCED_CLOSE_WINDOW = 30.0
"""Seconds a forced close gives each aborted handle's ``close`` before abandoning it."""


class ResourceCloseError(OSError):
    """One or more database handles failed to close (JR-18).

    The first failure is the ``__cause__``; later ones ride along
    (:func:`~nucleo_trio.errors.suppressed`). The grant was released all the same.
    """


def demand_of(
    requirements: JobRequirements | None,
    http_gate: RateLimiter,
    providers: Sequence[DBResourceProvider] = (),
    *,
    into: Demand | None = None,
) -> Demand:
    """The whole demand of one attempt, in the order of JR-02.

    Model bindings come first when the models layer adds them (its assembler passes the
    demand holding them as ``into``); then the ``http`` gate when anything needs it, each
    custom limiter with its declared amount in declaration order, and one unit permit on each
    declared provider's gate. ``None`` requirements (an orchestrator's) and empty ones add
    nothing, so alone they give an empty demand (JR-01).
    """
    demand = Demand() if into is None else into
    if requirements is None:
        return demand
    if requirements.needs_http:
        demand.add(http_gate, None)
    for need in requirements.limiters:
        demand.add(need.limiter, need.amount)
    for provider in providers:
        demand.add(provider.admission(), None)
    return demand


def _label(provider: DBResourceProvider) -> str:
    return f"{type(provider).__name__} ({provider.name!r})"


class JobResources:
    """One attempt's grant and its database handles; the job reaches them through
    ``context.resources``.

    ``get(provider)`` is the connection a provider opened for this job (``handle(provider)`` the
    :class:`~nucleo_trio.resources.DBHandle` around it); ``provider`` is the object the job
    declared or the name it is registered under. An undeclared provider is refused (JR-12).
    """

    def __init__(
        self,
        admission: Admission,
        grant: Grant,
        providers: Sequence[DBResourceProvider] = (),
        *,
        context: JobContext | None = None,
        read_only: bool = False,
        spawn: Callable[[Callable[[], Awaitable[None]]], None] | None = None,
    ) -> None:
        self._admission = admission
        self.grant = grant
        self._providers = tuple(providers)
        self._context = context
        self._read_only = read_only
        self._spawn = spawn
        self._handles: Mapping[DBResourceProvider, DBHandle] = MappingProxyType({})
        self._committed: set[int] = set()
        self._closed_handles: set[int] = set()
        self.executed = False
        """Set when the job's work began: settling then releases (RELEASE accounts only)
        instead of rolling back every account (JR-20)."""
        self._settled = False
        self._closing: trio.Event | None = None

    # -- materialization ------------------------------------------------------------------------
    async def materialize(self) -> None:
        """Open one handle per declared provider, in declaration order (JR-10).

        If one fails, the handles already open are closed quietly in reverse order and the
        whole grant is rolled back; the job gets an :class:`UncorrectableError` naming the
        provider and never runs. A cancellation does the same and propagates.
        """
        opened: dict[DBResourceProvider, DBHandle] = {}
        try:
            for provider in self._providers:
                opened[provider] = await provider.acquire(self._read_only)
        except BaseException as exc:
            for provider, handle in reversed(opened.items()):
                await self._close_quietly(provider, handle)
            self._settle(rollback=True)
            if not isinstance(exc, Exception):
                raise
            failing = self._providers[len(opened)]
            raise UncorrectableError(
                f"Failed to acquire database handle from {type(failing).__name__}: {exc}",
                cause=exc,
            ) from exc
        self._handles = MappingProxyType(opened)

    async def _close_quietly(self, provider: DBResourceProvider, handle: DBHandle) -> None:
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(FORCED_CLOSE_WINDOW):
                await provider.close(handle)
        except Exception:
            log.exception("closing %s's handle after a failed acquisition failed", _label(provider))

    # -- access ---------------------------------------------------------------------------------
    @property
    def providers(self) -> tuple[DBResourceProvider, ...]:
        """The declared providers, in declaration order."""
        return self._providers

    @property
    def has_database(self) -> bool:
        """True when any handle is open (JR-12)."""
        return bool(self._handles)

    def handle(self, provider: DBResourceProvider | str) -> DBHandle:
        """The handle ``provider`` opened for this job; refuses an undeclared one (JR-12)."""
        for declared, handle in self._handles.items():
            if declared is provider or declared.name == provider:
                return handle
        declared_names = ", ".join(repr(p.name) for p in self._providers) or "none"
        asked = provider if isinstance(provider, str) else _label(provider)
        raise LookupError(
            f"database {asked!r} was not declared by this job's requirements "
            f"(declared: {declared_names}); add it with JobRequirements.require_database"
        )

    def get(self, provider: DBResourceProvider | str) -> Any:
        """The connection ``provider`` opened for this job (the handle's ``unwrap()``)."""
        return self.handle(provider).unwrap()

    def __iter__(self) -> Iterator[tuple[DBResourceProvider, DBHandle]]:
        return iter(self._handles.items())

    # -- transactions ---------------------------------------------------------------------------
    async def begin_all(self) -> None:
        """Begin a transaction on every handle, in declaration order (JR-13)."""
        self._committed.clear()
        for provider, handle in tuple(self._handles.items()):
            await provider.begin(handle)

    async def commit_all(self) -> None:
        """Commit, then await completion, on each provider not yet committed (JR-14).

        If one fails, every provider not yet committed, the failing one included, is rolled
        back in reverse order; rollback failures ride along as suppressed. The raised
        :class:`UncorrectableError` names the failing provider and has the failure as its cause.
        Providers already committed stay committed (JR-15, JR-16).
        """
        for provider, handle in tuple(self._handles.items()):
            if id(provider) in self._committed:
                continue
            try:
                await provider.commit(handle)
                await provider.await_completion(handle)
            except Exception as exc:
                error = UncorrectableError(
                    f"commit failed on {_label(provider)}: {exc}; the uncommitted databases "
                    "were rolled back",
                    cause=exc,
                )
                for failure in await self._rollback_uncommitted():
                    add_suppressed(error, failure)
                raise error from exc
            self._committed.add(id(provider))

    async def rollback_all(self) -> None:
        """Roll back every provider not committed, in reverse order (JR-17).

        Goes on after a failure; if any failed, raises :class:`UncorrectableError`
        ("rollback_all encountered N errors") with each failure suppressed.
        """
        failures = await self._rollback_uncommitted()
        if failures:
            error = UncorrectableError(f"rollback_all encountered {len(failures)} errors")
            for failure in failures:
                add_suppressed(error, failure)
            raise error

    async def _rollback_uncommitted(self) -> list[BaseException]:
        failures: list[BaseException] = []
        for provider, handle in reversed(tuple(self._handles.items())):
            if id(provider) in self._committed:
                continue
            try:
                await provider.rollback(handle)
            except Exception as exc:
                failures.append(exc)
        return failures

    # -- close ----------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """The cooperative close (JR-18): mark the resources released, close every handle in
        declaration order (going on after a failure), then settle the grant.

        Raises :class:`ResourceCloseError` if any close failed; the grant is back regardless.
        A second call, or one while another is under way, waits for the first and returns. If
        the closing task is cancelled, the remaining handles are force-closed (aborted) and the
        grant settles before the cancellation propagates.
        """
        if not self._handles:  # nothing to close: settle without a scheduler step
            self._mark_released()
            self._settle(rollback=not self.executed)
            return
        if self._closing is not None:
            if not self._closing.is_set():
                await self._closing.wait()
            return
        self._closing = trio.Event()
        self._mark_released()
        failures: list[tuple[DBResourceProvider, BaseException]] = []
        try:
            for provider, handle in tuple(self._handles.items()):
                if id(handle) in self._closed_handles:
                    continue
                try:
                    await provider.close(handle)
                except Exception as exc:
                    failures.append((provider, exc))
                self._closed_handles.add(id(handle))
        except BaseException:
            self.force_close()
            raise
        finally:
            self._settle(rollback=not self.executed)
            self._closing.set()
        if failures:
            provider, first = failures[0]
            error = ResourceCloseError(
                f"Failed to close database handle from {type(provider).__name__}: {first}"
            )
            error.__cause__ = first
            for _, later in failures[1:]:
                add_suppressed(error, later)
            raise error

    def force_close(self) -> None:
        """Phase two's close (JR-19): abort every handle still open, settle the grant at once,
        and close the aborted handles in the background (each within
        :data:`FORCED_CLOSE_WINDOW`). Errors are logged. The grant settles once, so a later
        :meth:`aclose` is harmless, and a ``commit_all`` under way walks the same fixed
        mapping (JR-11)."""
        pending = [(p, h) for p, h in self._handles.items() if id(h) not in self._closed_handles]
        if self._settled and not pending:
            return
        if pending:
            log.warning(
                "force-closing %d database handle(s) of %s",
                len(pending),
                self._context.job_id if self._context is not None else "a job",
            )
        self._mark_released()
        for provider, handle in pending:
            self._closed_handles.add(id(handle))
            try:
                provider.abort(handle)
            except Exception:
                log.exception("aborting %s's handle failed", _label(provider))
        self._settle(rollback=not self.executed)
        if pending and self._spawn is not None:
            for provider, handle in pending:
                self._spawn(_closer(provider, handle))

    def _mark_released(self) -> None:
        if self._context is not None:
            self._context.is_executing_job_with_resources = False

    def _settle(self, *, rollback: bool) -> None:
        if self._settled:
            return
        self._settled = True
        if rollback:
            self._admission.rollback(self.grant)
        else:
            self._admission.release(self.grant)

    @property
    def settled(self) -> bool:
        """True once the grant went back (released or rolled back)."""
        return self._settled

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self._providers)
        state = "settled" if self._settled else "held"
        return f"<JobResources [{names}] {state}>"


def _closer(provider: DBResourceProvider, handle: DBHandle) -> Callable[[], Awaitable[None]]:
    async def close_after_abort() -> None:
        try:
            with trio.move_on_after(FORCED_CLOSE_WINDOW) as window:
                await provider.close(handle)
            if window.cancelled_caught:
                log.error(
                    "%s's close did not return within %.0f s of an abort; abandoning it",
                    _label(provider),
                    FORCED_CLOSE_WINDOW,
                )
        except Exception:
            log.exception("closing %s's handle after an abort failed", _label(provider))

    return close_after_abort
