"""Admission: the one place a job waits, and it waits holding nothing.

A job's needs are one :class:`~nucleo_trio.admission.demand.Demand`. :meth:`Admission.admit`
grants all of it at once or parks the job in one line, in arrival order, with the head's amounts
set aside for it; a grant takes every account or none, in one critical section, and every
answer an account gives is checked where it arrives.

This module is the facade: :class:`Admission`, its evaluator loop, the admit call, settlement
and stop. Behind it, each a set of functions over the monitor's state: ``_line`` (the waiter and
account records, and the index that says whom a pass asks next), ``_pass`` (one pass, one grant
attempt, its outcomes and events), ``_settle`` (release and roll-back), ``_accounts`` (the
accounts in use and the wakes that reach the monitor) and ``_answers`` (the check of an
account's answers). How the books keep a grant's cost the same however long the line is, and
the invariant they hold: docs/internals/admission.md, "How the monitor keeps its books".
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import trio
from trio.lowlevel import checkpoint_if_cancelled, current_task, wait_task_rescheduled

from ..errors import CancellationRequested, UncorrectableError
from ._accounts import (
    Seen,
    Wake,
    account_of,
    forget_idle,
    install_wake,
    release_accounts,
    unuse,
    unwire,
)
from ._line import (
    DEADLINE_SLACK,
    UNSET,
    Account,
    Group,
    Unset,
    Waiter,
    is_held,
    push,
    request_pass,
)
from ._pass import (
    CANCELLED_WHILE_PARKED,
    GRANTED,
    REFUSED,
    attempt,
    evaluate,
    reject,
    reject_held,
)
from ._settle import settle
from .demand import NO_WAITS, Demand, DemandEntry, Grant
from .limiter import LimiterEventType, LimiterIdentity, RateLimiter, name_of
from .memory import UnboundedMemory

if TYPE_CHECKING:
    from ..jobs.snapshot import JobSnapshot

__all__ = [
    "Admission",
    "AdmissionClosedError",
    "AdmissionWaiter",
    "LimiterEmitter",
    "ParkedWaiter",
    "Ticket",
]

log = logging.getLogger("nucleo_trio.admission")

LimiterEmitter: TypeAlias = Callable[
    [LimiterIdentity, "JobSnapshot | None", int, LimiterEventType, float, "str | None", Any], None
]
"""Receives one admission transition: ``(account, snapshot, waiters, type, wait, reject_reason,
amount)``. ``waiters`` is the count held on that account after the transition, ``wait`` the
seconds held (0 unless the waiter was held), ``amount`` the units moved
(:func:`~nucleo_trio.admission.units_of`). Best effort: whatever it raises drops that event,
never silently: the first failure per account is logged as a warning naming the account and
the error, later ones at debug."""


class AdmissionClosedError(UncorrectableError):
    """Raised to every parked waiter and every later ``admit`` once admission has stopped."""

    def __init__(
        self, message: str = "Admission stopped because the dispatcher is shutting down"
    ) -> None:
        super().__init__(
            message,
            llm_message="The runtime is shutting down; the job was not admitted and did not run.",
        )


class AdmissionWaiter(Protocol):
    """What admission needs from the job that waits (the :class:`JobContext` implements it)."""

    def snapshot(self) -> JobSnapshot | None:
        """The job as it stands now, for the events of its wait; ``None`` when there is none.
        Called at the admit call when events are reported, else only when something asks."""
        ...

    @property
    def is_cancelled(self) -> bool:
        """``True`` once the job was cancelled: a parked waiter then leaves the line with
        :class:`~nucleo_trio.errors.CancellationRequested`."""
        ...

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run ``callback`` when the job is cancelled (at once if it already is); the answer
        unregisters it."""
        ...


ParkedWaiter: TypeAlias = tuple["AdmissionWaiter | None", float, tuple[str, ...]]
"""One parked waiter as :meth:`Admission.parked` lists it: ``(waiter, arrival, held_on)``."""

Ticket: TypeAlias = Waiter
"""A parked demand's place in the line, as :meth:`Admission.enter` answers it (opaque)."""

_CONTRADICTION_RETRY = 0.01
"""Seconds before the evaluator looks again when an account keeps naming a past instant for a
waiter it says is short (a correct account never does: its instant is when ``fits`` turns)."""


# --------------------------------------------------------------------------------------------
# The monitor
# --------------------------------------------------------------------------------------------


class Admission:
    """One per dispatcher: the line, the evaluator, and settlement (see the module docstring).

    ``memory`` is the memory account (``None``: :class:`UnboundedMemory`); its identity is read
    once, as ``memory.account_for(None)``. ``emit`` receives every transition (``None``: no
    events are built). ``hears``, when given, answers whether an event about a waiter (what
    :meth:`admit` was given) could reach anyone right now: it may say yes for an event nobody
    then receives, never no for one that would be delivered. An event it says nobody hears is
    not built (no snapshot, no units, no call to ``emit``), except the memory account's own
    transitions, which always reach ``emit``; what it raises counts as a yes. It is asked once
    at the admit call, and that answer also covers a grant made there and then (the same
    step); a later event asks again. ``clock`` reads
    instants; it must agree with :func:`trio.current_time`, the clock every account's
    ``earliest_fit`` answers in.

    Start the evaluator with ``await nursery.start(admission.run)``; :meth:`stop` refuses every
    parked waiter and ends it.
    """

    def __init__(
        self,
        memory: RateLimiter | None = None,
        *,
        emit: LimiterEmitter | None = None,
        hears: Callable[[AdmissionWaiter | None], bool] | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if memory is not None and not callable(getattr(memory, "account_for", None)):
            raise TypeError(f"Admission: memory must be a RateLimiter, got {type(memory).__name__}")
        if emit is not None and not callable(emit):
            raise TypeError(f"Admission: emit must be callable, got {type(emit).__name__}")
        if hears is not None and not callable(hears):
            raise TypeError(f"Admission: hears must be callable, got {type(hears).__name__}")
        if not callable(clock):
            raise TypeError(f"Admission: clock must be callable, got {type(clock).__name__}")
        self._memory: RateLimiter = memory if memory is not None else UnboundedMemory()
        self._memory_account = Account(self._memory, self._memory.account_for(None))
        self._emit_fn = emit
        self._hears = hears
        self._clock = clock

        self._line: OrderedDict[int, Waiter] = OrderedDict()
        self._head: Waiter | None = None  # the line's first waiter, kept as the line changes
        self._seqs = itertools.count()
        # (limiter id, identity id) -> the account: only accounts in use right now.
        self._accounts: dict[tuple[int, int], Account] = {}
        # The one account in _accounts that nobody uses now: the last to go idle, kept until
        # another goes idle, it is used again, or admission stops (_accounts.release_accounts).
        self._idle: Account | None = None
        # limiter id -> (limiter, its accounts in use): the limiters whose wake counts now.
        self._wired: dict[int, tuple[RateLimiter, list[Account]]] = {}
        # limiter id -> the wake installed on it, while the limiter holds it (weakly: an entry
        # goes when its limiter drops the wake or dies, so this is as large as what holds one).
        self._hooks: dict[int, weakref.ref[Wake]] = {}
        self._held_counts: dict[int, int] = {}
        # Accounts whose shape passed (_check_shape), and those whose event failed to build.
        self._sound = Seen()
        self._unreported = Seen()
        # Set once a limiter this monitor wired was seen serving another monitor too: only
        # then does a settlement tell the others (_accounts.tell_others).
        self._shares_limiters = False

        self._head_blockers: set[Account] = set()
        self._head_memory_short = False
        self._head_deadline: tuple[int, float] | None = None  # (head seq, instant) scheduled
        self._suspended: set[Group] = set()
        # Resourceful waiters in the line not yet held on memory, oldest first (a plain dict:
        # it is only walked whole and popped by key, and an entry costs less than an
        # OrderedDict's).
        self._off_memory: dict[int, Waiter] = {}
        self._recheck_head = False
        self._ask_head = False  # the head is owed a question at the next pass
        # Counting gates a settlement gave back to while the head was short on them, with the
        # amounts: marked, or not, once the head was asked (``_pass.evaluate``).
        self._given: list[tuple[Account, tuple[Any, ...]]] = []

        self._candidates: list[int] = []
        self._vias: dict[int, list[Group | None]] = {}
        self._deadlines: list[tuple[float, int, Group | int]] = []
        self._deadline_order = itertools.count()
        self._deadline_limit = DEADLINE_SLACK  # the heap is compacted when it grows past this
        self._woken: set[int] = set()

        self._started = False
        self._stopped = False
        self._defect: BaseException | None = None
        self._wake_event: trio.Event | None = None
        self._wake_requested = False
        self._in_pass = False
        self._pass_follows = False  # a settlement runs a pass in its own task right after
        # The instant the evaluator sleeps until (inf: until an event); -inf while it is awake,
        # when it reads the deadlines itself. A pass run elsewhere (``_pass.pass_here``) that
        # schedules a look before this instant wakes it to re-arm.
        self._sleeps_until = -math.inf
        self._departures = 0  # waiters that left the line (granted, refused, cancelled)
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: int | None = None

    # -- introspection ----------------------------------------------------------------------------
    @property
    def queue_size(self) -> int:
        """How many waiters are parked in the line right now."""
        return len(self._line)

    def accounts(self) -> tuple[LimiterIdentity, ...]:
        """Every account in use right now (a parked waiter or an unsettled grant names it), in
        the order first met since it was last idle. An account nobody holds or waits on is
        forgotten. The memory account, which no demand names, is :attr:`memory`."""
        return tuple(account.key for account in self._accounts.values() if account.users > 0)

    @property
    def is_stopped(self) -> bool:
        """True once :meth:`stop` ran or a defect closed admission."""
        return self._stopped or self._defect is not None

    @property
    def memory(self) -> RateLimiter:
        """The memory account every resourceful demand meets."""
        return self._memory

    def held_on(self, account: LimiterIdentity) -> int:
        """How many parked waiters are held on ``account`` right now."""
        return self._held_counts.get(id(account), 0)

    def parked(self, limit: int | None = None) -> tuple[ParkedWaiter, ...]:
        """The parked waiters, oldest first, for a live view (nothing on the grant path): all of
        them, or the ``limit`` oldest, at the cost of those listed (:attr:`queue_size` counts
        them all).

        Each is ``(waiter, arrival, held_on)``: what :meth:`enter` was given (the job's
        context, or ``None``), the instant it arrived, and the names of the accounts it is
        held on, in the order it was first held on each.
        """
        return tuple(
            (w.context, w.arrival, tuple(name_of(key) for _, key, _ in w.held))
            for w in itertools.islice(self._line.values(), limit)
        )

    # -- the evaluator ----------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The one evaluator task: re-evaluates at every deadline and on every event that has
        no pass of its own (an arrival, an account's wake from outside, a stop). A release or
        a roll-back runs its pass in the settling task, so a grant under contention is one
        step of the granted task; passes never nest.

        Wires the memory account (its wake, and the reader of memory's line), then loops until
        :meth:`stop`. A second ``run`` raises ``RuntimeError("Admission already started")``. If
        the task is cancelled, admission stops, so no waiter is left parked with nobody to
        grant it.
        """
        if self._started:
            raise RuntimeError("Admission already started")
        self._started = True
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()
        self._wake_event = trio.Event()
        if not self.is_stopped:
            memory = self._memory
            self._memory_account.peers = [self._memory_account]
            self._wired[id(memory)] = (memory, self._memory_account.peers)
            install_wake(self, memory)
            memory_key = self._memory_account.key_id
            counts = self._held_counts
            memory.observe_held(lambda: counts.get(memory_key, 0))
        task_status.started()
        fruitless = 0  # passes in a row that found a deadline due and moved nobody
        try:
            while not self.is_stopped:
                self._wake_requested = False
                self._in_pass = True
                departures = self._departures
                try:
                    evaluate(self)
                except Exception as defect:  # noqa: BLE001 - a defect closes admission for good
                    self._close_on_defect(defect)
                    break
                finally:
                    self._in_pass = False
                deadline = self._deadlines[0][0] if self._deadlines else None
                if self._wake_requested:
                    fruitless = 0
                    await trio.lowlevel.checkpoint()
                    continue
                if deadline is not None and deadline <= self._clock():
                    fruitless = 0 if self._departures != departures else fruitless + 1
                    if fruitless < 2:
                        await trio.lowlevel.checkpoint()  # ADM-19: a past deadline: look now
                        continue
                    # An account answers "already" to a waiter it keeps saying is short: asking
                    # again at once would ask the same question forever (a spin that also
                    # freezes a virtual clock). Look again a little later, or at an event.
                    deadline = self._clock() + _CONTRADICTION_RETRY
                else:
                    fruitless = 0
                self._wake_event = trio.Event()
                try:
                    if deadline is None:
                        self._sleeps_until = math.inf
                        await self._wake_event.wait()  # only an event can help: no timer
                    else:
                        self._sleeps_until = deadline
                        with trio.move_on_at(deadline):
                            await self._wake_event.wait()
                finally:
                    self._sleeps_until = -math.inf
        finally:
            if not self.is_stopped:
                self.stop()

    def _limiter_woke(self, limiter_id: int) -> None:
        if not self._line:
            # Nobody waits (a stopped monitor's line is empty too): nothing to ask again. A
            # job settling with nobody parked has its memory gate's completion land here.
            return
        if self.is_stopped:
            return
        if self._thread is not None and threading.get_ident() != self._thread:
            # A driver thread changed the account; the line belongs to the trio thread.
            if self._token is not None:
                self._token.run_sync_soon(self._limiter_woke, limiter_id)
            return
        if limiter_id not in self._wired:
            return  # nobody uses the limiter now: nothing to look at
        self._woken.add(limiter_id)
        request_pass(self)

    # -- admit ------------------------------------------------------------------------------------
    async def admit(self, demand: Demand, waiter: AdmissionWaiter | None = None) -> Grant:
        """Grant the whole ``demand`` or park until it can be granted; never hold part of it.

        Raises the refusal of an account that refuses the job (its own LLM-readable error), an
        :class:`~nucleo_trio.errors.UncorrectableError` for an account that failed,
        :class:`AdmissionClosedError` once admission stopped, and
        :class:`~nucleo_trio.errors.CancellationRequested` if ``waiter`` is cancelled while
        parked. A :class:`trio.Cancelled` while parked withdraws the waiter (rolling back a
        grant that raced it) and propagates.
        """
        if not isinstance(demand, Demand):
            raise TypeError(
                f"Admission.admit: demand must be a Demand, got {type(demand).__name__}"
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        entered = self.enter(demand, waiter)
        if isinstance(entered, Grant):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return entered
        return await self.wait(entered)

    def enter(self, demand: Demand, waiter: AdmissionWaiter | None = None) -> Grant | Ticket:
        """The synchronous half of :meth:`admit`: the grant at once, or a place in the line.

        With nobody parked and everything fitting, the answer is the :class:`Grant`; otherwise
        the job joins the line holding nothing and the answer is its :data:`Ticket`, which the
        caller must hand to :meth:`wait` (a ticket nobody waits on would hold its grant
        forever). Refusals raise as in :meth:`admit`. Unlike :meth:`admit` this is not a
        checkpoint, which is what a caller that checkpoints elsewhere (the dispatcher) wants.
        """
        if not isinstance(demand, Demand):
            raise TypeError(
                f"Admission.enter: demand must be a Demand, got {type(demand).__name__}"
            )
        if self._stopped or self._defect is not None:
            self._check_open()  # raises
        if not demand._entries and not self._line:  # Demand.entries, without the property
            # ADM-11's inline attempt of an empty demand grants it at once, touching nothing and
            # reporting nothing (DG-10); it needs no waiter to get there. (By position:
            # entries, snapshot, wall wait, waits, owner.)
            return Grant((), None, 0.0, NO_WAITS, self)
        entries = tuple(demand._entries)
        arrival = self._clock()
        # ADM-09: the snapshot is the job as it stands at the admit call. It is only read when
        # something will report it: an emitter is wired, someone hears about the job and the
        # demand holds anything. Otherwise it is read when (if ever) an event needs it.
        snapshot: JobSnapshot | None | Unset = None
        if waiter is not None:
            snapshot = UNSET
            if entries and self._emit_fn is not None and self.heard(waiter):
                snapshot = waiter.snapshot()
        w = self._new_waiter(entries, snapshot, waiter, arrival)
        if not self._line:
            # The fast path (ADM-11): nobody to overtake, so try at once, as the head.
            try:
                outcome = attempt(self, w, None, arrival)
            except Exception as defect:  # noqa: BLE001 - a defect closes admission for good
                self._close_on_defect(defect)
                unuse(self, w)
                raise self._defect_error() from defect
            if outcome == GRANTED:
                assert w.grant is not None
                return w.grant
            if outcome == REFUSED:
                assert w.failure is not None
                raise w.failure
        self._enqueue(w)
        return w

    def heard(self, waiter: AdmissionWaiter | None) -> bool:
        """Whether an event about ``waiter`` could reach anyone now, as ``hears`` answers (yes
        without one, and when it raises)."""
        hears = self._hears
        if hears is None:
            return True
        try:
            return bool(hears(waiter))
        except Exception:  # noqa: BLE001 - unsure: the event is built, as without hears
            return True

    def _check_open(self) -> None:
        if self._defect is not None:
            raise self._defect_error()
        if self._stopped:
            raise AdmissionClosedError()

    def _new_waiter(
        self,
        entries: tuple[DemandEntry, ...],
        snapshot: JobSnapshot | None | Unset,
        context: AdmissionWaiter | None,
        arrival: float,
    ) -> Waiter:
        asks: list[tuple[Account, DemandEntry]] = []
        try:
            for entry in entries:
                asks.append((account_of(self, entry), entry))
        except BaseException:
            release_accounts(self, asks)
            raise
        return Waiter(next(self._seqs), entries, tuple(asks), snapshot, context, arrival)

    def _enqueue(self, w: Waiter) -> None:
        w.join_line()
        if not self._line:
            self._head = w
            w.take_the_head()
        self._line[w.seq] = w
        w.in_line = True
        if w.resourceful and not is_held(w, self._memory_account.key_id):
            self._off_memory[w.seq] = w
        push(self, w.seq, None)
        request_pass(self)

    async def wait(self, w: Ticket) -> Grant:
        """Park until the ticket ``w`` is granted or refused; see :meth:`admit` for what it
        raises. The park itself, with no coroutine around it: a parked job's frames are part of
        what it holds."""
        unregister: Callable[[], None] | None = None
        if w.context is not None:
            unregister = w.context.on_cancel(w.unpark)
        try:
            while True:
                # ADM-15: a grant, then a failure, then (below) the interrupt, then a cancel.
                grant = w.grant
                if grant is not None:
                    return grant
                if w.failure is not None:
                    raise w.failure
                if w.context is not None and w.context.is_cancelled:
                    self._withdraw(w)
                    raise CancellationRequested(CANCELLED_WHILE_PARKED)
                try:
                    # Parked on trio's own primitive, as trio.CapacityLimiter's waiters are:
                    # a wake is one reschedule (Waiter.unpark), no event object per wait.
                    w.task = current_task()
                    await wait_task_rescheduled(w)  # the waiter is its own abort_fn
                    if w.grant is not None:
                        # ADM-17: a cancellation that reached this task after its grant
                        # landed, before it ran, still wins: the grant goes back.
                        await checkpoint_if_cancelled()
                except BaseException:
                    self._interrupted(w)
                    raise
        finally:
            if unregister is not None:
                unregister()

    def _interrupted(self, w: Waiter) -> None:
        """The parked task was cancelled: leave holding nothing (ADM-17)."""
        if w.grant is not None:
            try:
                self.rollback(w.grant)
            except Exception:  # noqa: BLE001 - the cancellation is what propagates
                log.exception("Rolling back a grant that raced a cancellation failed")
        elif w.failure is None:
            self._withdraw(w)

    def _withdraw(self, w: Waiter) -> None:
        if w.in_line:
            reject(
                self, w, "cancelled", CancellationRequested(CANCELLED_WHILE_PARKED), self._clock()
            )

    # -- settlement -------------------------------------------------------------------------------
    def release(self, grant: Grant) -> None:
        """Give back the RELEASE accounts of a job that ran, and count a completion for the
        memory account; TIME accounts keep what was taken. A second call does nothing.

        Every account is given back even if one raises; the first error is then raised.
        Raises :class:`TypeError` for something other than a :class:`Grant`, and
        :class:`ValueError` for a grant another :class:`Admission` issued.
        """
        settle(self, grant, False)

    def rollback(self, grant: Grant) -> None:
        """Give back every account, TIME ones included: the work never happened. Otherwise as
        :meth:`release`."""
        settle(self, grant, True)

    settle = settle
    """``settle(grant, everything)``: :meth:`rollback` with ``everything`` true, else
    :meth:`release`, without a call around it (the module function itself, bound: a job's
    resources settle through it on every attempt)."""

    # -- stop and defects -------------------------------------------------------------------------
    def stop(self) -> None:
        """Refuse every parked waiter with :class:`AdmissionClosedError` (their events say
        ``shutdown``), clear the wakes it installed, and end the evaluator. Every later
        ``admit`` raises :class:`AdmissionClosedError`; a second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._drain("shutdown", AdmissionClosedError)
        request_pass(self)

    def _close_on_defect(self, defect: BaseException) -> None:
        if self._defect is not None or self._stopped:
            return
        self._defect = defect
        log.error("Admission failed on an internal defect and is closed", exc_info=defect)
        self._drain("aborted", self._defect_error)
        request_pass(self)

    def _defect_error(self) -> UncorrectableError:
        defect = self._defect
        return UncorrectableError(
            f"Admission failed on an internal defect: {defect!r}",
            llm_message="The runtime's admission failed internally; the job did not run.",
            cause=defect,
        )

    def _drain(self, reason: str, failure: Callable[[], BaseException]) -> None:
        """Refuse every parked waiter and forget every wired account (ADM-06, ADM-44)."""
        unwire(self)
        forget_idle(self)
        try:
            now: float | None = self._clock()
        except RuntimeError:
            now = None  # stopped from outside a trio run: nothing can have waited
        waiters = list(self._line.values())
        self._line.clear()
        self._head = None
        for w in waiters:
            w.in_line = False
            reject_held(self, w, reason, now)
            w.failure = failure()
            unuse(self, w)
            w.unpark()
        self._off_memory.clear()
        self._candidates.clear()
        self._vias.clear()
        self._deadlines.clear()
        self._head_deadline = None
        self._head_blockers.clear()
        self._suspended.clear()
        self._woken.clear()
        self._head_memory_short = False
        self._ask_head = False
        self._given.clear()
        for account in self._accounts.values():
            account.groups.clear()
        self._memory_account.groups.clear()
