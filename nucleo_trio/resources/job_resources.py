"""What one attempt holds: the grant, and the database handles materialized under it.

The dispatcher admits the attempt's whole demand first (:func:`demand_of` builds it from the
requirements), then :meth:`JobResources.materialize` opens one handle per declared provider
under the permits the grant already holds, so opening a connection can never become a second
place a job waits. A handle that fails to open rolls the whole grant back and the job never
runs.

The handles are fixed once materialized, in declaration order: a forced close racing a
``commit_all`` walks the same immutable mapping. Two promises hold whatever lands meanwhile (a
deadline, a cancel, a shutdown):

* **A commit sent is the outcome.** Once ``commit_all`` sends its first commit it runs shielded
  from cancellation, within :data:`COMMIT_WINDOW`; a cooperative close waits for its answer; and
  a failure says which databases committed, which rolled back, and which were cut short with
  their fate unknown (:class:`CommitError`).
* **A permit goes back after its connection closed.** The grant settles once, after the last
  handle closed, whichever of :meth:`~JobResources.aclose` (the cooperative close) and
  :meth:`~JobResources.force_close` (phase two: abort now, close in the background) gets there,
  so a provider's bound holds at every instant.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import trio

from ..admission import Admission, Demand, Grant
from ..admission.limiter import name_of
from ..admission.memory_gate import MemoryPressureGate
from ..errors import CancellationRequested, UncorrectableError, add_suppressed
from ..jobs.context import current_job
from .provider import DBHandle, DBResourceProvider

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter
    from ..jobs.context import JobContext
    from ..jobs.requirements import JobRequirements

__all__ = [
    "COMMIT_WINDOW",
    "FORCED_CLOSE_WINDOW",
    "CancelledAfterCommit",
    "CommitError",
    "GrantReleaseError",
    "JobResources",
    "ResourceCloseError",
    "demand_of",
]

log = logging.getLogger("nucleo_trio.resources")

COMMIT_WINDOW = 5.0
"""Seconds a commit in flight still gets once something asks the job to stop (its deadline, a
cancel, a shutdown: :meth:`JobResources.request_stop`). Past it the call in flight is aborted
and whether that commit took effect is unknown. Without a stop request a commit takes as long
as the database needs. Shorter than the dispatcher's window for an interrupted job to end, so a
shutdown hears the commit's answer, or its abort, before it gives up on the job."""

FORCED_CLOSE_WINDOW = 30.0
"""Seconds after which a forced close reports an aborted handle's ``close`` that has not
returned. It goes on waiting, the permit held, since the connection is still open."""

Spawn = Callable[[Callable[[], Awaitable[None]]], None]
"""Starts a task that may outlive the job (the dispatcher's system nursery's ``start_soon``)."""


class ResourceCloseError(OSError):
    """One or more database handles failed to close; raised by :meth:`JobResources.aclose`
    after it tried every handle.

    The first failure is the ``__cause__``; later ones ride along
    (:func:`~nucleo_trio.errors.suppressed`). The grant was released all the same.
    """


class GrantReleaseError(RuntimeError):
    """An account raised while the grant went back.

    The grant is settled all the same: every other account got its permits back, and the
    account's exception is the ``__cause__``. A fault in an account is a bug in that account,
    not in the job whose grant it was: the dispatcher logs it and keeps the job's own verdict.
    """

    def __init__(self, message: str, account: str | None = None) -> None:
        super().__init__(message)
        self.account = account
        """The name of the account whose ``give`` raised, or ``None`` when it cannot be told."""


class CommitError(UncorrectableError):
    """``commit_all`` could not commit every database.

    The message names the provider whose commit failed and says what became of every
    database of the transaction; :attr:`committed`, :attr:`rolled_back`,
    :attr:`not_committed` and :attr:`unknown` hold their names, in declaration order. The
    failure is the ``__cause__`` (none when the window cut a commit that never answered);
    rollback failures ride along as suppressed.
    """

    def __init__(
        self,
        message: str,
        *,
        committed: tuple[str, ...] = (),
        rolled_back: tuple[str, ...] = (),
        not_committed: tuple[str, ...] = (),
        unknown: tuple[str, ...] = (),
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause=cause)
        self.committed = committed
        """Databases committed before the failure: durable, and they stay committed."""
        self.rolled_back = rolled_back
        """Databases rolled back, the failing one included when its rollback worked."""
        self.not_committed = not_committed
        """Databases whose commit was never sent but whose rollback failed, had no time left
        or met an aborted connection; the transaction dies with the connection when the
        handle closes."""
        self.unknown = unknown
        """Databases whose commit may have taken effect: sent and then cut short (aborted, or
        no answer within :data:`COMMIT_WINDOW`), or failed and then failed to roll back."""


class CancelledAfterCommit(CancellationRequested):
    """The job was cancelled, or interrupted, once its commit had been sent, so the commit
    answered first. The job ends CANCELLED (the first terminal state it reached stands), and
    this says what the databases did; when the commit failed, the :class:`CommitError` is the
    cause."""

    def __init__(
        self,
        reason: str,
        *,
        committed: tuple[str, ...] = (),
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(reason, cause=cause)
        self.committed = committed
        """The names of the databases that committed: durable, whatever the job's state
        says."""


def demand_of(
    requirements: JobRequirements | None,
    http_gate: RateLimiter,
    providers: Sequence[DBResourceProvider] = (),
    *,
    into: Demand | None = None,
) -> Demand:
    """The whole demand of one attempt, added to ``into`` (default: a new :class:`Demand`).

    Model bindings come first when the models layer adds them (its assembler passes the
    demand holding them as ``into``); then ``http_gate`` when anything needs it, each custom
    limiter with its declared amount in declaration order, one unit permit on each of
    ``providers``' accounts, and the attempt's memory promise when the dispatcher has a memory
    pressure gate. ``None`` requirements (an orchestrator's) and empty ones add nothing, so
    alone they give an empty demand.
    """
    demand = Demand() if into is None else into
    if requirements is None:
        return demand
    # Asked of every attempt, so read plainly: whether the demand holds anything is followed
    # here (Demand.is_empty is a property, a call), and the limiters are the requirements'
    # own list (JobRequirements.limiters copies it into a tuple, behind a property).
    holds = into is not None and not into.is_empty
    if requirements.needs_http:
        demand.add(http_gate, None)
        holds = True
    for need in requirements.rate_limiters:
        demand.add(need.limiter, need.amount)
        holds = True
    for provider in providers:
        demand.add(provider.admission(), None)
        holds = True
    declared = requirements.memory_bytes
    if holds or declared is not None:
        _add_memory_claim(demand, declared)
    return demand


def _add_memory_claim(demand: Demand, declared: int | None) -> None:
    """The attempt's memory promise on its dispatcher's memory gate: the declared bytes, else
    the estimate learnt for its class (none yet: nothing is added and the gate paces the job by
    its line alone). Outside a job, or with no memory pressure gate, nothing is added."""
    context = current_job()
    if context is None or context.dispatcher is None:  # outside a job, or any dispatcher
        return
    # The field behind Admission.memory (a property read is a call).
    gate = context.dispatcher.admission._memory
    if not isinstance(gate, MemoryPressureGate):
        return
    claim = gate.claim_for(context, declared)
    if claim is not None:
        demand.add(gate, claim)


_NO_HANDLES: Mapping[Any, Any] = MappingProxyType({})
_NO_IDS: set[int] = cast("set[int]", frozenset())
"""Shared by every attempt until it opens handles; a frozenset, so a stray ``add`` fails loudly."""


def _label(provider: DBResourceProvider) -> str:
    return f"{type(provider).__name__} ({provider.name!r})"


_FATES = (
    ("committed", "committed"),
    ("rolled_back", "rolled back"),
    ("not_committed", "not committed"),
    ("unknown", "unknown whether committed"),
)


class _Commit(enum.Enum):
    """Where the transaction's commit is, since the last ``begin_all``; it only moves forward
    until the next ``begin_all``."""

    NOT_SENT = "not sent"
    """No ``commit_all`` has sent a commit since the last ``begin_all``."""
    SENT = "sent"
    """``commit_all`` sent its first commit and has not answered: its answer is the outcome."""
    OVERDUE = "overdue"
    """Sent, and the commit window after a request to stop has passed: the call in flight was
    aborted and no further call starts; the answer follows as soon as the walk ends."""
    COMMITTED = "committed"
    """Answered: every database committed."""
    FAILED = "failed"
    """Answered: not every database committed (the :class:`CommitError` says what each
    did)."""


_IN_FLIGHT = (_Commit.SENT, _Commit.OVERDUE)
# Read on every attempt: a module global is found faster than an enum class's member.
_NOT_SENT = _Commit.NOT_SENT


class _Closer(enum.Enum):
    """Who is closing the handles now."""

    NOBODY = "nobody"
    COOPERATIVE = "cooperative"
    """:meth:`JobResources.aclose`, in the attempt's task (or phase one's)."""
    REAPING = "reaping"
    """A forced close's background task, closing the aborted handles."""


_NOBODY = _Closer.NOBODY


class JobResources:
    """One attempt's grant and its database handles; the job reaches them through
    ``context.resources``.

    ``get(provider)`` is the connection a provider opened for this job (``handle(provider)`` the
    :class:`~nucleo_trio.resources.DBHandle` around it); ``provider`` is the object the job
    declared or the name it is registered under. An undeclared provider is refused with
    :class:`LookupError`. Iterating yields ``(provider, handle)`` pairs in declaration order.

    ``spawn`` starts the background task of a forced close (it closes the aborted handles,
    then settles the grant). Without one, a forced close gives the permits back at once and
    leaves the aborted handles for a later :meth:`aclose`.
    """

    # One per attempt: what every attempt reads is a slot, set in __init__. The transaction's
    # and the close's bookkeeping below is read only once handles are open or a close is
    # forced, and an attempt with no database never writes it: it starts as these class-level
    # defaults (immutable, so shared safely; the id sets are frozensets, so a stray ``add``
    # fails loudly), and an attempt that writes one gets it in its own ``__dict__`` (made then,
    # not at construction). The plain attempt thus costs a dozen slot stores, not two dozen.
    __slots__ = (
        "__dict__",
        "_admission",
        "_commit",
        "_commit_window",
        "_context",
        "_handles",
        "_materializing",
        "_providers",
        "_read_only",
        "_settled",
        "_spawn",
        "executed",
        "grant",
    )

    # The transaction: what committed, the answer a close waits on while the commit is in
    # flight, and the callbacks of that answer. The id sets only fill once handles are open:
    # materialize gives an attempt with databases sets of its own.
    _committed: set[int] = _NO_IDS
    _answered: trio.Event | None = None
    _on_answer: list[Callable[[bool], object]] | None = None
    _in_flight: tuple[DBResourceProvider, DBHandle, trio.CancelScope] | None = None
    # A request to stop (a deadline, a cancel, a shutdown): when the commit window ends.
    _stop_at: float | None = None
    _stop_requested: trio.Event | None = None
    # The close: handles whose close started and returned, handles aborted, who closes.
    _closing_handles: set[int] = _NO_IDS
    _closed_handles: set[int] = _NO_IDS
    _aborted: set[int] = _NO_IDS
    _closer: _Closer = _NOBODY
    _closing: trio.Event | None = None
    _force_requested: bool = False

    def __init__(
        self,
        admission: Admission,
        grant: Grant,
        providers: Sequence[DBResourceProvider] = (),
        context: JobContext | None = None,
        read_only: bool = False,
        spawn: Spawn | None = None,
        commit_window: float = COMMIT_WINDOW,
    ) -> None:
        self._admission = admission
        self.grant = grant
        """What admission granted this attempt; it goes back once, when the resources close."""
        self._providers = tuple(providers)
        self._context = context
        self._read_only = read_only
        self._spawn = spawn
        self._commit_window = commit_window
        self._handles: Mapping[DBResourceProvider, DBHandle] = _NO_HANDLES
        self._commit = _NOT_SENT  # where the commit is (commit_sent: read on every attempt)
        self._materializing: trio.Event | None = None
        self.executed = False
        """Set when the job's work began: settling then releases (RELEASE accounts only)
        instead of rolling back every account, so a TIME account keeps what the work spent."""
        self._settled = False

    # -- materialization ------------------------------------------------------------------------
    async def materialize(self) -> None:
        """Open one handle per declared provider, in declaration order, with the
        requirements' read-only hint.

        If one fails, the handles already open are closed quietly in reverse order and the
        whole grant is rolled back; the job gets an :class:`UncorrectableError` naming the
        provider and never runs. A cancellation does the same and propagates.
        """
        if not self._providers:
            return
        # A close that comes while connections are being opened waits for them (aclose) or is
        # done once they are (force_close): a permit never goes back under a connect.
        materializing = self._materializing = trio.Event()
        opened: dict[DBResourceProvider, DBHandle] = {}
        try:
            for provider in self._providers:
                opened[provider] = await provider.acquire(self._read_only)
        except BaseException as exc:
            for provider, handle in reversed(opened.items()):
                await self._close_quietly(provider, handle)
            fault = self._settle_logged(rollback=True)
            materializing.set()
            if not isinstance(exc, Exception):
                raise
            failing = self._providers[len(opened)]
            error = UncorrectableError(
                f"Failed to acquire database handle from {type(failing).__name__}: {exc}",
                cause=exc,
            )
            if fault is not None:
                add_suppressed(error, fault)
            raise error from exc
        self._handles = MappingProxyType(opened)
        self._committed, self._closing_handles = set(), set()
        self._closed_handles, self._aborted = set(), set()
        materializing.set()
        if self._force_requested:
            self.force_close()

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
        """True once :meth:`materialize` opened at least one handle."""
        return bool(self._handles)

    def handle(self, provider: DBResourceProvider | str) -> DBHandle:
        """The :class:`~nucleo_trio.resources.DBHandle` ``provider`` (the object, or its
        name) opened for this job; an undeclared one raises :class:`LookupError` naming the
        declared ones."""
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
        """Begin a transaction on every handle, in declaration order, forgetting what the
        last transaction committed."""
        self._committed = set()
        self._commit = _Commit.NOT_SENT
        for provider, handle in tuple(self._handles.items()):
            await provider.begin(handle)

    @property
    def commit_sent(self) -> bool:
        """A ``commit_all`` started since the last ``begin_all``: its answer is the outcome."""
        return self._commit is not _NOT_SENT

    @property
    def commit_in_flight(self) -> bool:
        """A ``commit_all`` is under way and has not answered yet."""
        return self._commit in _IN_FLIGHT

    @property
    def committed(self) -> tuple[DBResourceProvider, ...]:
        """The providers committed since the last ``begin_all``, in declaration order."""
        return tuple(p for p in self._providers if id(p) in self._committed)

    @property
    def all_committed(self) -> bool:
        """Every handle's transaction committed since the last ``begin_all``."""
        return bool(self._handles) and len(self._committed) == len(self._handles)

    def cancelled_after_commit(
        self, reason: str, failure: BaseException | None = None
    ) -> CancelledAfterCommit:
        """What a job cancelled once its commit was sent tells its caller: ``reason`` (the
        canceller's) and what the commit did, so a committed job is never taken for one that
        was rolled back. ``failure`` is the attempt's failure, if any (the CommitError when
        the commit failed)."""
        names = tuple(p.name for p in self.committed)
        if self.all_committed:
            listed = ", ".join(repr(n) for n in names)
            said = f"the commit succeeded ({listed} committed): the work is durable"
        else:
            said = f"the commit failed: {failure}"
        return CancelledAfterCommit(
            f"{reason}; it came after the job's commit was sent, and {said}",
            committed=names,
            cause=failure,
        )

    def on_commit_answer(self, callback: Callable[[bool], object]) -> None:
        """Call ``callback(all_committed)`` once the commit in flight has answered: ``True``
        when every database committed. With none in flight it is called at once."""
        if not self.commit_in_flight:
            callback(self.all_committed)
            return
        if self._on_answer is None:
            self._on_answer = []
        self._on_answer.append(callback)

    def request_stop(self) -> None:
        """Something wants the job stopped (its deadline, a cancel, a shutdown): a commit in
        flight, or one sent later, gets the commit window from now to answer, then the call in
        flight is aborted. Synchronous, and idempotent (the first request sets the instant)."""
        if self._stop_at is None:
            self._stop_at = trio.current_time() + self._commit_window
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def commit_all(self) -> None:
        """Commit, then await completion, on each provider not yet committed, in declaration
        order.

        Once the first commit is sent its answer is the outcome, so the whole walk is shielded
        from cancellation: a deadline, a cancel or a shutdown takes effect once it has
        answered, and a cooperative close waits for it. It is bounded once a stop is requested
        (:meth:`request_stop`): the commit window (:data:`COMMIT_WINDOW`) later the call in
        flight is aborted, and a commit cut short that way, or by a forced close, has an
        unknown fate.

        If one fails, every provider not yet committed, the failing one included, is rolled
        back in reverse order; rollback failures ride along as suppressed. The raised
        :class:`CommitError` names the failing provider, has the failure as its cause and says
        which databases committed and which rolled back. Providers already committed stay
        committed.
        """
        if all(id(p) in self._committed for p in self._handles):
            return
        self._commit = _Commit.SENT
        answered = self._answered = trio.Event()
        error: CommitError | None = None
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as watch:
                    watch.start_soon(self._watch_commit)
                    error = await self._commit_in_order()
                    watch.cancel_scope.cancel()
        finally:
            everything = self.all_committed
            self._commit = _Commit.COMMITTED if everything else _Commit.FAILED
            answered.set()
            callbacks, self._on_answer = self._on_answer or (), None
            for callback in callbacks:
                try:
                    callback(everything)
                except Exception:
                    log.exception("a commit-answer callback raised")
        if error is not None:
            raise error

    @trio.lowlevel.enable_ki_protection
    async def _watch_commit(self) -> None:
        """The commit window: once a stop was requested and the window has passed, cut the
        call in flight short (abort its handle, which stops a statement in a worker thread,
        and cancel the call, which stops one that waits in trio) and let no further call
        start."""
        if self._stop_at is None:
            self._stop_requested = trio.Event()
            await self._stop_requested.wait()
        assert self._stop_at is not None
        await trio.sleep_until(self._stop_at)
        self._commit = _Commit.OVERDUE
        if self._in_flight is not None:
            provider, handle, call = self._in_flight
            self._abort(provider, handle)
            call.cancel()

    async def _bounded(
        self,
        provider: DBResourceProvider,
        handle: DBHandle,
        verb: Callable[[DBHandle], Awaitable[None]],
    ) -> bool:
        """One provider call of ``commit_all`` within the commit window: ``False`` when the
        window cut it short or had already passed (then it is not made)."""
        if self._commit is _Commit.OVERDUE:
            return False
        with trio.CancelScope() as call:
            self._in_flight = (provider, handle, call)
            try:
                await verb(handle)
            finally:
                self._in_flight = None
        return not call.cancelled_caught

    async def _commit_in_order(self) -> CommitError | None:
        for provider, handle in tuple(self._handles.items()):
            if id(provider) in self._committed:
                continue
            failure: Exception | None = None
            try:
                answered = await self._bounded(provider, handle, provider.commit) and (
                    await self._bounded(provider, handle, provider.await_completion)
                )
            except Exception as exc:
                failure, answered = exc, False
            if not answered:
                return await self._commit_failed(provider, handle, failure)
            self._committed.add(id(provider))
        return None

    async def _commit_failed(
        self, failing: DBResourceProvider, handle: DBHandle, failure: Exception | None
    ) -> CommitError:
        """Roll back the uncommitted rest in reverse (the failing provider included) and say
        what became of every database."""
        label = _label(failing)
        cut_short = failure is None or self._was_aborted(handle)
        if cut_short and self._commit is _Commit.OVERDUE:
            headline = (
                f"commit failed on {label}: no answer within {self._commit_window:g} s of the "
                "request to stop, so it was aborted" + (f" ({failure})" if failure else "")
            )
        elif cut_short:
            headline = f"commit failed on {label}: it was cut short by an abort ({failure})"
        else:
            headline = f"commit failed on {label}: {failure}"
        fate = {id(p): "committed" for p in self._providers if id(p) in self._committed}
        rollback_failures: list[BaseException] = []
        for provider, other in reversed(tuple(self._handles.items())):
            if id(provider) in fate:
                continue
            sent = provider is failing
            if sent and cut_short:
                fate[id(provider)] = "unknown"
                continue
            if self._was_aborted(other):  # its transaction dies with the connection
                fate[id(provider)] = "not_committed"
                continue
            try:
                rolled_back = await self._bounded(provider, other, provider.rollback)
            except Exception as exc:
                rollback_failures.append(exc)
                rolled_back = False
            if rolled_back:
                fate[id(provider)] = "rolled_back"
            else:
                fate[id(provider)] = "unknown" if sent else "not_committed"
        groups = {
            kind: tuple(p.name for p in self._providers if fate.get(id(p)) == kind)
            for kind, _ in _FATES
        }
        said = "; ".join(
            f"{words}: {', '.join(repr(n) for n in groups[kind])}"
            for kind, words in _FATES
            if groups[kind]
        )
        error = CommitError(
            f"{headline}; {said}",
            committed=groups["committed"],
            rolled_back=groups["rolled_back"],
            not_committed=groups["not_committed"],
            unknown=groups["unknown"],
            cause=failure,
        )
        for rollback_failure in rollback_failures:
            add_suppressed(error, rollback_failure)
        return error

    async def rollback_all(self) -> None:
        """Roll back every provider not committed, in reverse declaration order.

        Goes on after a failure; if any failed, raises :class:`UncorrectableError`
        ("rollback_all encountered N errors") with each failure suppressed. A handle that is
        closing or aborted is skipped: its close rolls the transaction back.
        """
        failures: list[BaseException] = []
        for provider, handle in reversed(tuple(self._handles.items())):
            if id(provider) in self._committed or id(handle) in self._closing_handles:
                continue
            if self._was_aborted(handle):
                continue
            try:
                await provider.rollback(handle)
            except Exception as exc:
                failures.append(exc)
        if failures:
            error = UncorrectableError(f"rollback_all encountered {len(failures)} errors")
            for failure in failures:
                add_suppressed(error, failure)
            raise error

    # -- close ----------------------------------------------------------------------------------
    def close_now(self) -> bool:
        """The cooperative close of an attempt that opened no database handle, done at once:
        mark the resources released and settle the grant. Answers ``False``, doing nothing,
        when there are handles to close (or being opened): then :meth:`aclose` is the close.
        Raises :class:`GrantReleaseError` as :meth:`aclose` does."""
        if self._handles or self._materializing is not None:
            return False
        # Every attempt with no database closes here: _mark_released's one store inline, and
        # _settle's flag passed positionally (a keyword costs the call its kwnames).
        if self._context is not None:
            self._context.is_executing_job_with_resources = False
        self._settle(not self.executed)
        return True

    async def aclose(self) -> None:
        """The cooperative close: mark the resources released, let a commit in flight
        answer, close every handle in declaration order (going on after a failure), then settle
        the grant. After a commit that succeeded the close is shielded from cancellation within
        the commit window (past it, the rest is force-closed).

        Raises :class:`ResourceCloseError` if any close failed (the grant is back regardless),
        else :class:`GrantReleaseError` if an account raised as the grant went back.
        A second call, or one while another close is under way, waits for the first and
        returns; one while the handles are being opened waits for them first. If the closing
        task is cancelled, the handles still open are force-closed: aborted now, closed in the
        background, and the grant settles after them.
        """
        if self._materializing is not None and not self._materializing.is_set():
            try:
                await self._materializing.wait()
            except BaseException:
                self.force_close()
                raise
        if not self._handles:  # nothing to close: settle without a scheduler step
            self._mark_released()
            self._settle(rollback=not self.executed)
            return
        if self._closing is not None:
            if not self._closing.is_set():
                await self._closing.wait()
            return
        closing = self._closing = trio.Event()
        self._mark_released()
        failures: list[tuple[DBResourceProvider, BaseException]] = []
        self._closer = _Closer.COOPERATIVE
        try:
            if self._answered is not None and self.commit_in_flight:
                await self._answered.wait()  # never close a connection under its commit
            # Once everything committed the outcome is settled: a cancel must not cut the
            # close short (and with it the attempt's report), so it is shielded, within the
            # commit window.
            with trio.CancelScope(shield=self.all_committed) as window:
                if self.all_committed:
                    window.deadline = trio.current_time() + self._commit_window
                for provider, handle in tuple(self._handles.items()):
                    if id(handle) in self._closed_handles:
                        continue
                    try:
                        await self._close_one(provider, handle)
                    except Exception as exc:
                        failures.append((provider, exc))
        except BaseException:
            self._closer = _Closer.NOBODY
            self.force_close()
            raise
        self._closer = _Closer.NOBODY
        if window.cancelled_caught:  # the window passed: the rest is aborted and closed later
            self.force_close()
            return
        fault: GrantReleaseError | None = None
        try:
            self._settle(rollback=not self.executed)
        except GrantReleaseError as exc:
            fault = exc
        finally:
            closing.set()
        if failures:
            provider, first = failures[0]
            error = ResourceCloseError(
                f"Failed to close database handle from {type(provider).__name__}: {first}"
            )
            error.__cause__ = first
            for _, later in failures[1:]:
                add_suppressed(error, later)
            if fault is not None:  # it rides on the close failure, so it is said here
                _log_release_fault(fault)
                add_suppressed(error, fault)
            raise error
        if fault is not None:
            raise fault

    async def _close_one(self, provider: DBResourceProvider, handle: DBHandle) -> None:
        """Close one handle; it counts as closed once ``close`` returned or raised (not when
        the caller was cancelled: then a later close goes again, which a provider allows)."""
        self._closing_handles.add(id(handle))
        try:
            await provider.close(handle)
        except Exception:
            self._closed_handles.add(id(handle))
            raise
        self._closed_handles.add(id(handle))

    def force_close(self) -> None:
        """Phase two's close: abort every handle still open, now, then close each and only
        then settle the grant, in a background task (``spawn``). The permits stay held until
        the aborted connections are closed, so a provider's bound holds at every instant; a
        close that does not return within :data:`FORCED_CLOSE_WINDOW` is reported
        and waited for. Errors, and an account that raises as the grant goes back, are logged.

        A commit in flight is aborted too, and its fate is unknown (see :meth:`commit_all`). A
        close under way (:meth:`aclose`) goes on over the aborted handles and settles the
        grant itself; one that comes while the handles are being opened is done as soon as
        they are. The grant settles once, so a later :meth:`aclose` is harmless, and a
        ``commit_all`` under way walks the same fixed mapping."""
        self._mark_released()
        if self._materializing is not None and not self._materializing.is_set():
            self._force_requested = True  # done by materialize once the handles exist
            return
        pending = [(p, h) for p, h in self._handles.items() if id(h) not in self._closed_handles]
        if not pending:
            if self._closer is not _Closer.COOPERATIVE:
                self._settle_logged(rollback=not self.executed)
            return
        fresh = [(p, h) for p, h in pending if id(h) not in self._aborted]
        if fresh:
            log.warning(
                "force-closing %d database handle(s) of %s",
                len(fresh),
                self._context.job_id if self._context is not None else "a job",
            )
        for provider, handle in fresh:
            self._abort(provider, handle)
        if self._closer is not _Closer.NOBODY:
            return
        closing = self._closing
        if closing is None:
            closing = self._closing = trio.Event()
        self._closer = _Closer.REAPING
        try:
            if self._spawn is None:
                raise RuntimeError("no task to close them in was given (spawn)")
            self._spawn(partial(self._reap, pending))
        except RuntimeError as exc:
            # Nothing can await the closes: give the permits back now, and leave the aborted
            # handles to a later aclose(), which closes what is still open.
            self._closer = _Closer.NOBODY
            self._closing = None
            log.warning("the aborted handles' permits go back before they are closed: %s", exc)
            self._settle_logged(rollback=not self.executed)
            closing.set()

    async def _reap(self, pending: list[tuple[DBResourceProvider, DBHandle]]) -> None:
        """Close each aborted handle, then settle the grant. Cancelled (the dispatcher is
        stopping), it gives the closes one more window, shielded, so that the dispatcher stops
        with its connections closed, then settles the grant and lets the cancellation go on."""
        try:
            for provider, handle in pending:
                await self._close_after_abort(provider, handle)
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(FORCED_CLOSE_WINDOW):
                for provider, handle in pending:
                    if id(handle) not in self._closed_handles:
                        await self._close_after_abort(provider, handle)
            raise
        finally:
            self._closer = _Closer.NOBODY
            self._settle_logged(rollback=not self.executed)
            if self._closing is not None:
                self._closing.set()

    async def _close_after_abort(self, provider: DBResourceProvider, handle: DBHandle) -> None:
        """Close an aborted handle, never giving up on it: the connection is open until the
        close returns. One that takes longer than the window is reported, once."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report_stuck_close, provider)
            try:
                await self._close_one(provider, handle)
            except Exception:
                log.exception("closing %s's handle after an abort failed", _label(provider))
            nursery.cancel_scope.cancel()

    def _abort(self, provider: DBResourceProvider, handle: DBHandle) -> None:
        self._aborted.add(id(handle))
        try:
            provider.abort(handle)
        except Exception:
            log.exception("aborting %s's handle failed", _label(provider))

    def _was_aborted(self, handle: DBHandle) -> bool:
        return id(handle) in self._aborted or handle.aborted

    def _mark_released(self) -> None:
        if self._context is not None:
            self._context.is_executing_job_with_resources = False

    def _settle(self, rollback: bool) -> None:
        """Give the grant back, once; an account that raises is a :class:`GrantReleaseError`
        (ADM-45: admission gave every other account back first)."""
        if self._settled:
            return
        self._settled = True
        try:
            # Admission.rollback when rolling back, else Admission.release, in one call.
            self._admission.settle(self.grant, rollback)
        except Exception as exc:
            account = _account_that_raised(exc, self.grant)
            accounts = account or ", ".join(name_of(e.key) for e in self.grant.entries)
            job = self._context.job_id if self._context is not None else "a job"
            verb = "rolling back" if rollback else "releasing"
            raise GrantReleaseError(
                f"{verb} the grant of {job} failed: account {accounts} raised "
                f"{type(exc).__name__}: {exc}",
                account,
            ) from exc

    def _settle_logged(self, *, rollback: bool) -> GrantReleaseError | None:
        """Settle where nobody can be told: an account's fault is logged (and returned)."""
        try:
            self._settle(rollback=rollback)
        except GrantReleaseError as fault:
            _log_release_fault(fault)
            return fault
        return None

    @property
    def settled(self) -> bool:
        """True once the grant went back (released or rolled back)."""
        return self._settled

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self._providers)
        state = "settled" if self._settled else "held"
        return f"<JobResources [{names}] {state}>"


@trio.lowlevel.enable_ki_protection
async def _report_stuck_close(provider: DBResourceProvider) -> None:
    await trio.sleep(FORCED_CLOSE_WINDOW)
    log.error(
        "%s's close has not returned %.0f s after an abort; its permit stays held until it does",
        _label(provider),
        FORCED_CLOSE_WINDOW,
    )


def _log_release_fault(fault: GrantReleaseError) -> None:
    log.error("%s", fault, exc_info=fault)


def _account_that_raised(exc: BaseException, grant: Grant) -> str | None:
    """The name of the grant's account whose ``give`` raised ``exc``, or ``None``.

    Admission gives every other account back before it raises the first failure (ADM-45), so
    the exception is all that is left to say which account it was: the outermost frame of its
    traceback that runs on one of the grant's accounts (``self``) is that account's ``give``.
    """
    entries = {id(entry.limiter): entry for entry in grant.entries}
    frame = exc.__traceback__
    while frame is not None:
        entry = entries.get(id(frame.tb_frame.f_locals.get("self")))
        if entry is not None:
            return name_of(entry.key)
        frame = frame.tb_next
    return None
