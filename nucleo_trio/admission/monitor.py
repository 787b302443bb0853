"""Admission: the one place a job waits, and it waits holding nothing.

A job's needs are one :class:`~nucleo_trio.admission.demand.Demand`. :meth:`Admission.admit`
grants all of it at once or parks the job in one line; a grant is one critical section that
takes every account or none (trio runs one task at a time and an attempt never awaits, so that
needs no lock). Waiting while holding part of a demand (hold-and-wait) is impossible by
construction: an attempt asks every account ``fits`` first, and only when all fit does it
``try_take`` each; a take that fails undoes the takes before it inside the same attempt.

The rules of the line:

* **Arrival order, head reservation.** The *head* (oldest parked waiter) is asked with no
  reservation; every later waiter is asked with the head's amounts on the same account set aside
  (``reserved_ahead``), so a small job never starves the head by taking what it is accumulating.
  A waiter whose accounts the head does not use passes it at once.
* **Memory first.** A resourceful demand asks the memory account before any entry and takes it
  after every entry. While the head is short on memory, every resourceful follower is held on
  memory without its own accounts being asked: memory's line drains strictly in order.
* **Deadlines.** A short account says when the clock alone will close the gap
  (``earliest_fit``); the evaluator sleeps until the earliest such instant or the next event. A
  deadline in the past means "look again now". Nothing polls.
* **Events.** HELD at most once per waiter per account, GRANTED_IMMEDIATE or GRANTED_FROM_HOLD at
  the grant, REJECTED (``cancelled``, ``circuit_blocked``, ``aborted``, ``shutdown``) on every
  account a refused waiter was held on, RELEASED once per entry given back. Memory reports HELD,
  GRANTED_FROM_HOLD and REJECTED, never RELEASED and nothing on the fast path.

Walking the whole line on every event would make each grant cost as much as the line is long.
This monitor gets the same grants at a cost per grant that does not grow with the line, by
re-asking only the waiters whose answer can have changed. The bookkeeping and its invariant:

* The line is an ordered dict ``seq -> waiter`` (O(1) head and removal).
* Every account keeps *groups*: for each *demand signature* (the whole demand: every entry's
  limiter, identity and amounts), a heap (by arrival) of the **followers** with that demand
  whose last attempt was short on that account. Memory is one more account, grouped the same
  way. The head is never in a group; ``_head_blockers`` names the accounts it was short on.
* **Invariant.** For every follower ``w`` in a group ``G`` of account ``A``, asking ``w`` again
  would give the same answer as its last attempt unless one of these happened since, and each of
  them schedules a re-ask: ``A`` gained capacity (a give, a release, a roll-back or ``A``'s wake
  marks ``A``), ``A``'s clock instant was reached (a per-group deadline), or the reservation on
  ``A`` shrank (the head left: its accounts are marked).
* **Chains.** Followers in one group have the same demand and the same reservation ahead (the
  head's), so they ask every account *the same question*. When ``A`` is marked, only the first
  of each of its groups is asked; the next one becomes a candidate only once the first has left
  the line (granted, refused, cancelled). If the first is still held, everyone behind it would
  be held the same way, so the chain stops: held on ``A`` again, nothing more is owed; held on
  another account, the chain is remembered on the waiter (``chained``) and goes on when it
  leaves the line; held on memory, the chain is *suspended* and goes on when memory is marked.
  Grouping by the whole demand is what keeps two accounts that take turns binding (a meter
  that refills while the slots are taken, slots that free while the meter is empty) from
  moving the whole line from one group to the other at every event.
* A pass takes candidates in arrival order from a heap: new arrivals, the new head, the head when
  one of its blockers is marked, and the first follower of each group of a marked account. So
  one give on a one-slot gate costs a constant number of account calls, however long the line;
  the cost grows with the number of *distinct* demands waiting on an account, not with the
  number of waiters.
* Work done in bulk is paid once per waiter: when the head finds memory closed, every
  resourceful follower not yet held on memory is marked held (one HELD each, ever), from a set
  kept for exactly that.

Account wake-ups that land during a pass (a compensating give that runs the wake) are applied at
the start of the next pass, which the wake-up requests; a pass therefore never loops on itself.

**Hostile accounts.** Every answer an account gives is checked where the monitor receives it:
``fits`` and ``try_take`` must answer ``True`` or ``False``, ``earliest_fit`` ``None`` or an
instant (an int or a float; ``+inf`` means "never from the clock alone" and is read as ``None``;
NaN, ``-inf``, a bool or anything else is refused). A wrong answer is an account fault, handled
exactly like a raise: that waiter alone is refused with an
:class:`~nucleo_trio.errors.UncorrectableError` naming the account and the value, what the
attempt took is given back, and the evaluator goes on. (What a ``try_take`` that gave no
answer did to its own account is unknown, so only the entries taken before it are given back.)
The account's shape is checked when admission first meets it
(:func:`~nucleo_trio.admission.limiter.account_faults`: ``capacity`` and ``in_use`` numbers and
not methods, the questions callable, ``replenishment()`` and ``status()`` of the right type); an
account that fails is refused to the job that names it, with one error naming the account and
everything wrong, and is asked again the next time it is met. One that passed is not checked
again while it lives.

**Forgetting.** An account is tracked only while a parked waiter or an unsettled grant uses it:
when the last one leaves, its bookkeeping goes, so ``accounts()`` and every map stay as large
as what is in use, however many accounts come and go. The wake installed on a limiter (once per
limiter) stays installed, but it reaches the monitor only through weak references and
does nothing while the limiter is not in use; when the limiter is used again the same wake
serves it, and only a limiter whose wake was replaced or cleared since gets a new one.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import trio

from .._clock import whole_ms
from ..errors import CancellationRequested, LLMReadableError, UncorrectableError
from ._answers import answer
from .demand import Demand, DemandEntry, Grant
from .gates import CountingGate
from .limiter import (
    AbstractRateLimiter,
    LimiterEventType,
    LimiterIdentity,
    RateLimiter,
    Replenishment,
    _identity_faults,
    _limiter_faults,
    describe_faults,
    name_of,
)
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

_NOTHING: tuple[Any, ...] = ()
_NO_WIRING: tuple[None, list[Any]] = (None, [])

_GRANTED, _REFUSED, _HELD = 0, 1, 2

_CANCELLED_WHILE_PARKED = "Job cancelled while waiting for admission"


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


# --------------------------------------------------------------------------------------------
# Bookkeeping records (private; slotted for the evaluator's hot path)
# --------------------------------------------------------------------------------------------


class _Account:
    """One account as admission tracks it: a limiter and the identity it debits.

    ``users`` counts the waiters in the monitor and the unsettled grants that name it; at 0 the
    monitor forgets the account.
    """

    __slots__ = ("groups", "ident", "key", "key_id", "limiter", "peers", "users")

    def __init__(self, limiter: RateLimiter, key: LimiterIdentity) -> None:
        self.limiter = limiter
        self.key = key
        self.key_id = id(key)
        self.ident = (id(limiter), self.key_id)
        self.groups: dict[Hashable, _Group] = {}
        self.users = 0
        # The accounts in use on the same limiter, this one included (the monitor's list).
        self.peers: list[_Account] = []

    def group(self, signature: Hashable) -> _Group:
        group = self.groups.get(signature)
        if group is None:
            group = self.groups[signature] = _Group(self, signature)
        return group


class _Group:
    """Followers short on one account with the same amounts, oldest first (lazy-deletion heap).

    An entry ``(seq, stamp)`` is live while the waiter is in the line and has not been asked
    again since it joined (its ``stamp`` is unchanged).
    """

    __slots__ = ("account", "deadline", "heap", "live", "signature")

    def __init__(self, account: _Account, signature: Hashable) -> None:
        self.account = account
        self.signature = signature
        self.heap: list[tuple[int, int]] = []
        self.live = 0
        self.deadline: float | None = None

    def first(self, line: dict[int, _Waiter]) -> _Waiter | None:
        heap = self.heap
        while heap:
            seq, stamp = heap[0]
            waiter = line.get(seq)
            if waiter is not None and waiter.stamp == stamp:
                return waiter
            heapq.heappop(heap)
        return None


class _Wake:
    """The wake-up one monitor hears a limiter through (ADM-10): a callable that reaches the
    monitor and the limiter only weakly, so an idle limiter keeps neither alive and a wake
    from a limiter the monitor no longer tracks does nothing.

    One limiter may serve several monitors (two dispatchers in one program). The first
    installs its wake in the limiter's one slot (``on_capacity_change``); on an account of
    the base class, every later one adds its own as a wake listener
    (:meth:`~nucleo_trio.admission.limiter.AbstractRateLimiter.add_wake_listener`), so a
    change of capacity reaches each, and each tells the others when it gives back
    (:func:`_tell_others`). ``shared`` says another monitor was seen on the limiter.
    """

    __slots__ = ("__weakref__", "_limiter", "_limiter_id", "_monitor", "listener", "shared")

    def __init__(self, monitor: Admission, limiter: RateLimiter, *, listener: bool) -> None:
        self._monitor = weakref.ref(monitor)
        self._limiter_id = id(limiter)
        self._limiter: Callable[[], RateLimiter | None]
        try:
            self._limiter = weakref.ref(limiter)
        except TypeError:
            # A limiter without weak references: held strongly, so its id cannot be reused
            # while this wake (installed on it) is alive.
            self._limiter = lambda: limiter
        # Added with add_wake_listener (else installed in the slot).
        self.listener = listener
        self.shared = False

    def __call__(self) -> None:
        monitor = self._monitor()
        if monitor is not None:
            monitor._limiter_woke(self._limiter_id)

    @property
    def monitor(self) -> Admission | None:
        """The monitor this wake reaches, if it is still alive."""
        return self._monitor()

    @property
    def limiter(self) -> RateLimiter | None:
        """The limiter this wake was installed on, if it is still alive."""
        return self._limiter()


def _wakes_on(limiter: AbstractRateLimiter) -> list[_Wake]:
    """The monitors' wakes ``limiter`` runs on a change of capacity."""
    return [
        wake
        for wake in limiter.wake_listeners
        if isinstance(wake, _Wake) and wake.limiter is limiter
    ]


def _in_place(limiter: RateLimiter, wake: _Wake | None) -> bool:
    """Whether ``wake`` is alive, bound to ``limiter`` and still run by it. An account of the
    base class says what it runs; of any other, a wake once installed is taken to be there."""
    if wake is None or wake.limiter is not limiter:
        return False
    return not isinstance(limiter, AbstractRateLimiter) or wake in limiter.wake_listeners


class _Unset:
    __slots__ = ()


class _Seen:
    """A set of objects by identity that keeps none alive: an entry goes when its object dies,
    so a later object that reuses the id is not mistaken for it. An object that takes no weak
    reference is remembered by its class instead."""

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}

    def __contains__(self, obj: object) -> bool:
        ref = self._refs.get(id(obj))
        if ref is not None and ref() is obj:
            return True
        ref = self._refs.get(id(type(obj)))
        return ref is not None and ref() is type(obj)

    def add(self, obj: object) -> None:
        try:
            self._hold(obj)
        except TypeError:
            self._hold(type(obj))

    def _hold(self, obj: object) -> None:
        refs, key = self._refs, id(obj)

        def gone(ref: weakref.ref[Any]) -> None:
            if refs.get(key) is ref:
                del refs[key]

        refs[key] = weakref.ref(obj, gone)


_UNSET = _Unset()


class _Waiter:
    """One admit call: its demand, what it was held on and since when, and how it ended."""

    __slots__ = (
        "accounts",
        "arrival",
        "context",
        "entries",
        "failure",
        "grant",
        "groups",
        "held",
        "in_line",
        "on_memory",
        "reserve",
        "seq",
        "signature",
        "chained",
        "_snapshot",
        "stamp",
        "wakeup",
    )

    def __init__(
        self,
        seq: int,
        entries: tuple[DemandEntry, ...],
        accounts: tuple[_Account, ...],
        snapshot: JobSnapshot | None | _Unset,
        context: AdmissionWaiter | None,
        arrival: float,
    ) -> None:
        self.seq = seq
        self.entries = entries
        self.accounts = accounts
        self._snapshot = snapshot
        self.context = context
        self.arrival = arrival
        # What the head sets aside for a follower on each account (ADM-36).
        self.reserve: dict[_Account, tuple[Any, ...]] = {
            account: entry.amounts for account, entry in zip(accounts, entries, strict=True)
        }
        # One signature for the whole demand (every entry's limiter, identity and amounts),
        # used for this waiter's group on every account: followers with equal signatures ask
        # every account, memory included, the same question, so when one is held anywhere, so
        # is each of them behind it.
        self.signature: Hashable = _signature(
            tuple((id(entry.limiter), id(entry.key), entry.amounts) for entry in entries), seq
        )
        # Groups whose chain stopped at this waiter because it was held on another account:
        # they go on from here when it leaves the line.
        self.chained: list[_Group] = []
        # key id -> (identity, instant first held): ordered, so REJECTED follows marking order.
        self.held: dict[int, tuple[LimiterIdentity, float]] = {}
        self.groups: list[_Group] = []
        self.stamp = 0
        self.on_memory = False
        self.in_line = False
        self.grant: Grant | None = None
        self.failure: BaseException | None = None
        self.wakeup: trio.Event | None = None

    @property
    def snapshot(self) -> JobSnapshot | None:
        """The job's snapshot: read at the admit call when events are reported (ADM-09), else
        from the context the first time anything asks; a grant nobody hears about builds none."""
        snapshot = self._snapshot
        if isinstance(snapshot, _Unset):
            assert self.context is not None
            snapshot = self._snapshot = self.context.snapshot()
        return snapshot

    @property
    def resourceful(self) -> bool:
        return bool(self.entries)

    def unpark(self) -> None:
        if self.wakeup is not None:
            self.wakeup.set()


ParkedWaiter: TypeAlias = tuple["AdmissionWaiter | None", float, tuple[str, ...]]
"""One parked waiter as :meth:`Admission.parked` lists it: ``(waiter, arrival, held_on)``."""

Ticket: TypeAlias = _Waiter
"""A parked demand's place in the line, as :meth:`Admission.enter` answers it (opaque)."""


_SET_ASIDE_IS_TAKEN: dict[type, bool] = {}


def _takes_what_it_set_aside(limiter: RateLimiter) -> bool:
    """Whether a head's grant on ``limiter`` leaves every follower's answer as it was under the
    head's reservation: true of a :class:`CountingGate` that keeps the gate's own questions
    (``in use + asked + set aside <= capacity``, and never an instant). A time-based account
    can answer a follower an instant once the reservation is a debit, so it is asked again."""
    cls = type(limiter)
    answer = _SET_ASIDE_IS_TAKEN.get(cls)
    if answer is None:
        answer = _SET_ASIDE_IS_TAKEN[cls] = isinstance(limiter, CountingGate) and all(
            getattr(cls, name) is getattr(CountingGate, name)
            for name in ("fits", "try_take", "earliest_fit", "give", "_ask", "_permits")
        )
    return answer


def _signature(demand: tuple[Any, ...], seq: int) -> Hashable:
    """The demand itself when it is hashable; otherwise a key of this waiter's own (amounts
    that cannot be compared cannot be shown equal, so such a waiter is a group of one)."""
    try:
        hash(demand)
    except TypeError:
        return ("unhashable", seq)
    return demand


_NO_WAITS: Mapping[str, int] = MappingProxyType({})


_DeadlineTarget: TypeAlias = "_Group | int"

_CONTRADICTION_RETRY = 0.01
"""Seconds before the evaluator looks again when an account keeps naming a past instant for a
waiter it says is short (a correct account never does: its instant is when ``fits`` turns)."""

_DEADLINE_SLACK = 256
"""The deadline heap is compacted (stale entries dropped) when it outgrows twice its live
entries and at least this many."""


# --------------------------------------------------------------------------------------------
# The monitor
# --------------------------------------------------------------------------------------------


class Admission:
    """One per dispatcher: the line, the evaluator, and settlement (see the module docstring).

    ``memory`` is the memory account (``None``: :class:`UnboundedMemory`); its identity is read
    once, as ``memory.account_for(None)``. ``emit`` receives every transition (``None``: no
    events are built). ``clock`` reads instants; it must agree with :func:`trio.current_time`,
    the clock every account's ``earliest_fit`` answers in.

    Start the evaluator with ``await nursery.start(admission.run)``; :meth:`stop` refuses every
    parked waiter and ends it.
    """

    def __init__(
        self,
        memory: RateLimiter | None = None,
        *,
        emit: LimiterEmitter | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if memory is not None and not callable(getattr(memory, "account_for", None)):
            raise TypeError(f"Admission: memory must be a RateLimiter, got {type(memory).__name__}")
        if emit is not None and not callable(emit):
            raise TypeError(f"Admission: emit must be callable, got {type(emit).__name__}")
        if not callable(clock):
            raise TypeError(f"Admission: clock must be callable, got {type(clock).__name__}")
        self._memory: RateLimiter = memory if memory is not None else UnboundedMemory()
        self._memory_account = _Account(self._memory, self._memory.account_for(None))
        self._emit_fn = emit
        self._clock = clock

        self._line: OrderedDict[int, _Waiter] = OrderedDict()
        self._seqs = itertools.count()
        # (limiter id, identity id) -> the account: only accounts in use right now.
        self._accounts: dict[tuple[int, int], _Account] = {}
        # limiter id -> (limiter, its accounts in use): the limiters whose wake counts now.
        self._wired: dict[int, tuple[RateLimiter, list[_Account]]] = {}
        # limiter id -> the wake installed on it, while the limiter holds it (weakly: an entry
        # goes when its limiter drops the wake or dies, so this is as large as what holds one).
        self._hooks: dict[int, weakref.ref[_Wake]] = {}
        self._held_counts: dict[int, int] = {}
        # Accounts whose shape passed (_check_shape), and those whose event failed to build.
        self._sound = _Seen()
        self._unreported = _Seen()

        self._head_blockers: set[_Account] = set()
        self._head_memory_short = False
        self._head_deadline: tuple[int, float] | None = None  # (head seq, instant) scheduled
        self._suspended: set[_Group] = set()
        # Resourceful waiters in the line not yet held on memory, oldest first.
        self._off_memory: OrderedDict[int, _Waiter] = OrderedDict()
        self._recheck_head = False

        self._candidates: list[int] = []
        self._vias: dict[int, list[_Group | None]] = {}
        self._deadlines: list[tuple[float, int, _Group | int]] = []
        self._deadline_order = itertools.count()
        self._deadline_limit = _DEADLINE_SLACK  # the heap is compacted when it grows past this
        self._woken: set[int] = set()

        self._started = False
        self._stopped = False
        self._defect: BaseException | None = None
        self._wake_event: trio.Event | None = None
        self._wake_requested = False
        self._in_pass = False
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
        return tuple(account.key for account in self._accounts.values())

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
            (w.context, w.arrival, tuple(name_of(key) for key, _ in w.held.values()))
            for w in itertools.islice(self._line.values(), limit)
        )

    # -- the evaluator ----------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The one evaluator task: re-evaluates on every event and at every deadline.

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
            self._install_wake(memory)
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
                    self._evaluate()
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
                if deadline is None:
                    await self._wake_event.wait()  # only an event can help: no timer to arm
                else:
                    with trio.move_on_at(deadline):
                        await self._wake_event.wait()
        finally:
            if not self.is_stopped:
                self.stop()

    def _wake(self) -> None:
        self._wake_requested = True
        if self._wake_event is not None:
            self._wake_event.set()

    def _install_wake(self, limiter: RateLimiter) -> None:
        """Install the wake on ``limiter`` unless the one installed earlier is still in place
        (once per limiter over the monitor's life, ADM-10): it may have been cleared or taken
        while the limiter was idle."""
        limiter_id = id(limiter)
        hooks = self._hooks
        installed = hooks.get(limiter_id)
        if installed is not None and _in_place(limiter, installed()):
            return
        others: list[_Wake] = []
        listened = limiter if isinstance(limiter, AbstractRateLimiter) else None
        if listened is not None:
            for wake in _wakes_on(listened):
                if wake.monitor is None:
                    listened.remove_wake_listener(wake)  # a monitor that is gone
                elif wake.monitor is not self:
                    others.append(wake)
        hook: _Wake
        if listened is not None and others:
            # Another monitor hears this limiter: listen beside it, leaving its wake alone.
            hook = _Wake(self, limiter, listener=True)
            listened.add_wake_listener(hook)
            hook.shared = True
            for other in others:
                other.shared = True
        else:
            hook = _Wake(self, limiter, listener=False)
            limiter.on_capacity_change(hook)

        def dropped(ref: weakref.ref[_Wake]) -> None:
            if hooks.get(limiter_id) is ref:
                del hooks[limiter_id]

        hooks[limiter_id] = weakref.ref(hook, dropped)

    def _tell_others(self, limiter: RateLimiter) -> None:
        """Another monitor serving ``limiter`` hears that this one gave back to it."""
        ref = self._hooks.get(id(limiter))
        hook = ref() if ref is not None else None
        if hook is not None and hook.shared and isinstance(limiter, AbstractRateLimiter):
            for wake in _wakes_on(limiter):
                if wake.monitor is not self:
                    wake()

    def _limiter_woke(self, limiter_id: int) -> None:
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
        self._wake()

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
        self._check_open()
        entries = demand.entries
        if not entries and not self._line:
            # ADM-11's inline attempt of an empty demand grants it at once, touching nothing and
            # reporting nothing (DG-10); it needs no waiter to get there.
            return Grant((), None, 0.0, _NO_WAITS, owner=self)
        arrival = self._clock()
        # ADM-09: the snapshot is the job as it stands at the admit call. It is only read when
        # something will report it: an emitter is wired and the demand holds anything.
        snapshot: JobSnapshot | None | _Unset = None
        if waiter is not None:
            snapshot = waiter.snapshot() if entries and self._emit_fn is not None else _UNSET
        w = self._new_waiter(entries, snapshot, waiter, arrival)
        if not self._line:
            # The fast path (ADM-11): nobody to overtake, so try at once, as the head.
            try:
                outcome = self._attempt(w, None, arrival)
            except Exception as defect:  # noqa: BLE001 - a defect closes admission for good
                self._close_on_defect(defect)
                self._unuse(w)
                raise self._defect_error() from defect
            if outcome == _GRANTED:
                assert w.grant is not None
                return w.grant
            if outcome == _REFUSED:
                assert w.failure is not None
                raise w.failure
        self._enqueue(w)
        return w

    async def wait(self, ticket: Ticket) -> Grant:
        """Park until ``ticket`` is granted or refused; see :meth:`admit` for what it raises."""
        return await self._park(ticket)

    def _check_open(self) -> None:
        if self._defect is not None:
            raise self._defect_error()
        if self._stopped:
            raise AdmissionClosedError()

    def _new_waiter(
        self,
        entries: tuple[DemandEntry, ...],
        snapshot: JobSnapshot | None | _Unset,
        context: AdmissionWaiter | None,
        arrival: float,
    ) -> _Waiter:
        accounts: list[_Account] = []
        try:
            for entry in entries:
                accounts.append(self._account_of(entry))
        except BaseException:
            self._release_accounts(accounts)
            raise
        return _Waiter(next(self._seqs), entries, tuple(accounts), snapshot, context, arrival)

    def _account_of(self, entry: DemandEntry) -> _Account:
        """The account ``entry`` debits, tracked from now on, with one more user."""
        limiter = entry.limiter
        ident = (id(limiter), id(entry.key))
        account = self._accounts.get(ident)
        if account is None:
            self._check_shape(limiter, entry.key)
            account = _Account(limiter, entry.key)
            wired = self._wired.get(ident[0])
            if wired is None:
                try:
                    self._install_wake(limiter)
                except Exception as exc:  # noqa: BLE001 - the account's fault: refuse this admit
                    name = name_of(entry.key)
                    raise UncorrectableError(
                        f"{name} failed during admission: on_capacity_change raised {exc!r}",
                        cause=exc,
                    ) from exc
                wired = self._wired[ident[0]] = (limiter, [])
            account.peers = wired[1]
            account.peers.append(account)
            self._accounts[ident] = account
        account.users += 1
        return account

    def _check_shape(self, limiter: RateLimiter, key: LimiterIdentity) -> None:
        """Refuse an account whose shape breaks the contract (a ``capacity`` written as a
        method, a ``status()`` of the wrong type), naming it and everything wrong, before it
        can break events and health. An account that passed is not checked again while it lives:
        accounts are forgotten when idle and met again at the next use."""
        sound = self._sound
        faults: list[str] = []
        if limiter not in sound:
            faults += _limiter_faults(limiter)
        if key not in sound:
            faults += _identity_faults(key)
        if faults:
            raise UncorrectableError(describe_faults(key, faults))
        sound.add(limiter)
        sound.add(key)

    def _unuse(self, w: _Waiter) -> None:
        """``w`` left without a grant: its accounts lose a user (once per waiter)."""
        accounts, w.accounts = w.accounts, ()
        self._release_accounts(accounts)

    def _release_accounts(self, accounts: Sequence[_Account]) -> None:
        for account in accounts:
            account.users -= 1
            if account.users <= 0:
                self._forget(account)

    def _forget(self, account: _Account) -> None:
        """Nobody holds or waits on ``account``: drop its bookkeeping. Its limiter keeps the
        installed wake, which does nothing until the limiter is used again."""
        ident = account.ident
        if self._accounts.get(ident) is account:
            del self._accounts[ident]
        peers = account.peers
        if account in peers:
            peers.remove(account)
            if not peers and self._wired.get(ident[0], _NO_WIRING)[1] is peers:
                del self._wired[ident[0]]
        if self._held_counts.get(account.key_id) == 0:
            del self._held_counts[account.key_id]

    def _enqueue(self, w: _Waiter) -> None:
        self._line[w.seq] = w
        w.in_line = True
        if w.resourceful and self._memory_account.key_id not in w.held:
            self._off_memory[w.seq] = w
        w.wakeup = trio.Event()
        self._push(w.seq, None)
        self._wake()

    async def _park(self, w: _Waiter) -> Grant:
        unregister: Callable[[], None] | None = None
        if w.context is not None:
            unregister = w.context.on_cancel(w.unpark)
        try:
            while True:
                # ADM-15: a grant, then a failure, then (below) the interrupt, then a cancel.
                if w.grant is not None:
                    return w.grant
                if w.failure is not None:
                    raise w.failure
                if w.context is not None and w.context.is_cancelled:
                    self._withdraw(w)
                    raise CancellationRequested(_CANCELLED_WHILE_PARKED)
                assert w.wakeup is not None
                try:
                    await w.wakeup.wait()
                except BaseException:
                    self._interrupted(w)
                    raise
                w.wakeup = trio.Event()
        finally:
            if unregister is not None:
                unregister()

    def _interrupted(self, w: _Waiter) -> None:
        """The parked task was cancelled: leave holding nothing (ADM-17)."""
        if w.grant is not None:
            try:
                self.rollback(w.grant)
            except Exception:  # noqa: BLE001 - the cancellation is what propagates
                log.exception("Rolling back a grant that raced a cancellation failed")
        elif w.failure is None:
            self._withdraw(w)

    def _withdraw(self, w: _Waiter) -> None:
        if w.in_line:
            self._reject(
                w, "cancelled", CancellationRequested(_CANCELLED_WHILE_PARKED), self._clock()
            )

    # -- settlement -------------------------------------------------------------------------------
    def release(self, grant: Grant) -> None:
        """Give back the RELEASE accounts of a job that ran, and count a completion for the
        memory account; TIME accounts keep what was taken. A second call does nothing.

        Every account is given back even if one raises; the first error is then raised.
        Raises :class:`TypeError` for something other than a :class:`Grant`, and
        :class:`ValueError` for a grant another :class:`Admission` issued.
        """
        self._settle(grant, everything=False)

    def rollback(self, grant: Grant) -> None:
        """Give back every account, TIME ones included: the work never happened. Otherwise as
        :meth:`release`."""
        self._settle(grant, everything=True)

    def _settle(self, grant: Grant, *, everything: bool) -> None:
        if not isinstance(grant, Grant):
            raise TypeError(f"Admission: expected a Grant, got {type(grant).__name__}")
        if grant._owner is not self:
            raise ValueError("Admission: this grant was issued by another Admission")
        if not grant._claim():
            return
        if grant.is_empty:
            # Nothing to give back and no completion for memory; the evaluator is still woken
            # after every settlement (ADM-20), which costs an empty pass at most. With nobody in
            # the line that pass would find nothing, so it is skipped.
            if not self.is_stopped and self._line:
                self._wake()
            return
        open_ = not self.is_stopped
        tracked: tuple[_Account, ...] = grant._tracked
        first_error: Exception | None = None
        for index, entry in enumerate(grant.entries):
            try:
                if not everything and entry.limiter.replenishment() is not Replenishment.RELEASE:
                    continue
                entry.limiter.give(entry.amounts)
            except Exception as exc:  # noqa: BLE001 - give back the rest, then raise the first
                first_error = first_error or exc
                continue
            self._tell_others(entry.limiter)
            self._emit(
                entry.key,
                grant.snapshot,
                self._held_counts.get(id(entry.key), 0),
                LimiterEventType.RELEASED,
                0.0,
                None,
                entry,
            )
            if open_ and index < len(tracked):
                self._mark_account(tracked[index])
        try:
            # A completion for the memory gate (ADM-47); memory never reports RELEASED.
            self._memory.give(_NOTHING)
        except Exception as exc:  # noqa: BLE001 - raised below, after the wake
            first_error = first_error or exc
        if open_:
            self._mark_account(self._memory_account)
            self._wake()
        # The grant is settled whatever a give did (ADM-45): its accounts lose this user.
        self._release_accounts(tracked)
        if first_error is not None:
            raise first_error

    # -- stop and defects -------------------------------------------------------------------------
    def stop(self) -> None:
        """Refuse every parked waiter with :class:`AdmissionClosedError` (their events say
        ``shutdown``), clear the wakes it installed, and end the evaluator. Every later
        ``admit`` raises :class:`AdmissionClosedError`; a second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self._drain("shutdown", AdmissionClosedError)
        self._wake()

    def _close_on_defect(self, defect: BaseException) -> None:
        if self._defect is not None or self._stopped:
            return
        self._defect = defect
        log.error("Admission failed on an internal defect and is closed", exc_info=defect)
        self._drain("aborted", self._defect_error)
        self._wake()

    def _defect_error(self) -> UncorrectableError:
        defect = self._defect
        return UncorrectableError(
            f"Admission failed on an internal defect: {defect!r}",
            llm_message="The runtime's admission failed internally; the job did not run.",
            cause=defect,
        )

    def _drain(self, reason: str, failure: Callable[[], BaseException]) -> None:
        """Refuse every parked waiter and forget every wired account (ADM-06, ADM-44)."""
        # Every limiter still holding the wake, in use or idle (the memory account included).
        limiters = {id(limiter): limiter for limiter, _ in self._wired.values()}
        for ref in list(self._hooks.values()):
            hook = ref()
            limiter = hook.limiter if hook is not None else None
            if limiter is not None:
                limiters.setdefault(id(limiter), limiter)
        for limiter in limiters.values():
            held = self._hooks.get(id(limiter))
            hook = held() if held is not None else None
            try:
                if isinstance(limiter, AbstractRateLimiter):
                    if hook is not None and _in_place(limiter, hook):
                        if hook.listener:
                            limiter.remove_wake_listener(hook)
                            continue
                    elif any(wake.monitor not in (None, self) for wake in _wakes_on(limiter)):
                        continue  # the wake there now is another monitor's: it stays in place
                limiter.on_capacity_change(None)
            except Exception:  # noqa: BLE001 - stopping goes on whatever one account does
                log.exception("Clearing the wake of %r failed", limiter)
        self._wired.clear()
        self._hooks.clear()
        try:
            now: float | None = self._clock()
        except RuntimeError:
            now = None  # stopped from outside a trio run: nothing can have waited
        waiters = list(self._line.values())
        self._line.clear()
        for w in waiters:
            w.in_line = False
            self._reject_held(w, reason, now)
            w.failure = failure()
            self._unuse(w)
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
        for account in self._accounts.values():
            account.groups.clear()
        self._memory_account.groups.clear()

    # -- a pass -----------------------------------------------------------------------------------
    def _evaluate(self) -> None:
        now = self._clock()  # one `now` for every attempt of the pass (ADM-21)
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            instant, _, target = heapq.heappop(deadlines)
            if isinstance(target, _Group):
                if target.deadline == instant:
                    target.deadline = None
                self._mark_group(target)
            else:
                if self._head_deadline == (target, instant):
                    self._head_deadline = None
                if self._line and next(iter(self._line)) == target:
                    self._push(target, None)
        if self._woken:
            woken, self._woken = self._woken, set()
            for limiter_id in woken:
                wired = self._wired.get(limiter_id)
                if wired is not None:
                    for account in wired[1]:
                        self._mark_account(account)
        line = self._line
        candidates = self._candidates
        while True:
            while candidates:
                seq = heapq.heappop(candidates)
                vias = self._vias.pop(seq)
                w = line.get(seq)
                if w is None:
                    for via in vias:
                        if via is not None:
                            self._continue(via, seq)
                    continue
                self._visit(w, vias, now)
            if self._recheck_head and line and not self._head_memory_short:
                # A follower found memory closed after a grant earlier in the pass: the head,
                # asked again, is short on memory too, and then so is everyone behind it.
                self._recheck_head = False
                self._push(next(iter(line)), None)
                continue
            self._recheck_head = False
            return

    def _visit(self, w: _Waiter, vias: list[_Group | None], now: float) -> None:
        head = self._line[next(iter(self._line))]
        is_head = head is w
        if w.context is not None and w.context.is_cancelled:
            # ADM-18: a cancelled waiter leaves; a cancelled head stops reserving.
            self._reject(w, "cancelled", CancellationRequested(_CANCELLED_WHILE_PARKED), now)
        else:
            self._attempt(w, None if is_head else head, now)
        for via in vias:
            if via is None:
                continue
            if w.in_line and not is_head:
                # Still held: everyone behind it in the group has its demand and would be held
                # the same way, so the chain stops here until what holds it changes.
                if w.on_memory:
                    if via.account is not self._memory_account:
                        self._suspended.add(via)  # goes on when memory is marked
                elif via not in w.groups:
                    w.chained.append(via)  # held elsewhere: goes on when it leaves the line
                continue
            self._continue(via, w.seq)

    # -- one attempt ------------------------------------------------------------------------------
    def _attempt(self, w: _Waiter, head: _Waiter | None, now: float) -> int:
        """Steps 1-5 of one grant attempt (ADM-26..33); ``head`` is None when ``w`` is the head.

        Returns GRANTED, REFUSED or HELD, having done what each means: events, the waiter
        completed or failed and out of the line, or its blockers and deadlines recorded.
        """
        if not w.entries:
            # An empty demand never meets memory and holds nothing (ADM-26).
            self._grant(w, now)
            return _GRANTED
        memory = self._memory
        memory_account = self._memory_account
        # Step 1 (ADM-27): behind a head short on memory, a resourceful waiter is held on memory.
        if head is not None and self._head_memory_short:
            self._mark_held(w, memory_account, None, now)
            self._hold(w, head, (), on_memory=True, memory_deadline=None, now=now)
            return _HELD
        # Step 2 (ADM-28): memory before any entry.
        try:
            memory_fits: object = memory.fits(_NOTHING, _NOTHING)
            if memory_fits is not True and memory_fits is not False:
                memory_fits = answer("fits", memory_fits)  # not a bool: raises
        except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
            return self._refuse(w, memory_account, exc, now)
        if not memory_fits:
            return self._short_on_memory(w, head, now)
        entries = w.entries
        accounts = w.accounts
        reserve = head.reserve if head is not None else None
        # Step 3 (ADM-29, ADM-30): every entry, even after a short one.
        shorts: list[tuple[int, float | None]] = []
        for index, entry in enumerate(entries):
            account = accounts[index]
            reserved = reserve.get(account, _NOTHING) if reserve is not None else _NOTHING
            try:
                fits: object = entry.limiter.fits(entry.amounts, reserved)
                if fits is True:
                    continue
                if fits is not False:
                    fits = answer("fits", fits)  # not a bool: raises
                self._mark_held(w, account, entry, now)
                instant = answer(
                    "earliest_fit", entry.limiter.earliest_fit(entry.amounts, reserved)
                )
            except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
                return self._refuse(w, account, exc, now)
            shorts.append((index, instant))
        if shorts:
            self._hold(w, head, shorts, on_memory=False, memory_deadline=None, now=now)
            return _HELD
        # Step 4 (ADM-31): take every entry; a refused take undoes the ones before it.
        taken = 0
        for index, entry in enumerate(entries):
            account = accounts[index]
            reserved = reserve.get(account, _NOTHING) if reserve is not None else _NOTHING
            try:
                took: object = entry.limiter.try_take(entry.amounts, reserved)
                if took is not True and took is not False:
                    # Not a bool (raises): whether it debited is unknown, so only the entries
                    # before it go back.
                    took = answer("try_take", took)
            except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
                self._give_back(w, taken)
                return self._refuse(w, account, exc, now)
            if not took:
                self._give_back(w, taken)
                try:
                    self._mark_held(w, account, entry, now)
                    instant = answer(
                        "earliest_fit", entry.limiter.earliest_fit(entry.amounts, reserved)
                    )
                except Exception as exc:  # noqa: BLE001 - as above
                    return self._refuse(w, account, exc, now)
                self._hold(
                    w, head, [(index, instant)], on_memory=False, memory_deadline=None, now=now
                )
                return _HELD
            taken += 1
        # Step 5 (ADM-32): memory after every entry.
        try:
            memory_took: object = memory.try_take(_NOTHING, _NOTHING)
            if memory_took is not True and memory_took is not False:
                memory_took = answer("try_take", memory_took)  # not a bool: raises
        except Exception as exc:  # noqa: BLE001 - as above
            self._give_back(w, taken)
            return self._refuse(w, memory_account, exc, now)
        if not memory_took:
            self._give_back(w, taken)
            return self._short_on_memory(w, head, now)
        self._grant(w, now)
        return _GRANTED

    def _short_on_memory(self, w: _Waiter, head: _Waiter | None, now: float) -> int:
        memory_account = self._memory_account
        try:
            self._mark_held(w, memory_account, None, now)
            instant = answer("earliest_fit", self._memory.earliest_fit(_NOTHING, _NOTHING))
        except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
            return self._refuse(w, memory_account, exc, now)
        if head is not None and not self._head_memory_short:
            self._recheck_head = True
        self._hold(w, head, (), on_memory=True, memory_deadline=instant, now=now)
        return _HELD

    def _give_back(self, w: _Waiter, taken: int) -> None:
        """Undo this attempt's takes. A give that raises here is a defect (ADM-44)."""
        for index in range(taken - 1, -1, -1):
            entry = w.entries[index]
            entry.limiter.give(entry.amounts)

    # -- outcomes ---------------------------------------------------------------------------------
    def _hold(
        self,
        w: _Waiter,
        head: _Waiter | None,
        shorts: Sequence[tuple[int, float | None]],
        *,
        on_memory: bool,
        memory_deadline: float | None,
        now: float,
    ) -> None:
        """Record why ``w`` waits, so that exactly the events that can help ask it again."""
        w.on_memory = on_memory
        if not w.in_line:
            return  # the fast path: enqueueing makes it a candidate of the next pass
        if head is None:
            self._leave_groups(w)
            self._hold_head(
                w, shorts, on_memory=on_memory, memory_deadline=memory_deadline, now=now
            )
            return
        if on_memory:
            self._regroup(w, [self._memory_account])
            self._schedule(w.groups[0], memory_deadline)
            return
        accounts = w.accounts
        self._regroup(w, [accounts[index] for index, _ in shorts])
        for group, (_, instant) in zip(w.groups, shorts, strict=True):
            self._schedule(group, instant)

    def _regroup(self, w: _Waiter, accounts: list[_Account]) -> None:
        """Put ``w`` in its group on each of ``accounts``, in order. Held again where it was
        held before (the common case in a long line), it keeps its places: its entries stay
        valid and no heap moves (a group with a member is never dropped)."""
        groups = w.groups
        if len(groups) == len(accounts) and all(
            group.account is account for group, account in zip(groups, accounts, strict=True)
        ):
            return
        self._leave_groups(w)  # may drop a group it was the last member of: look up afresh
        for account in accounts:
            self._join(account.group(w.signature), w)

    def _hold_head(
        self,
        w: _Waiter,
        shorts: Sequence[tuple[int, float | None]],
        *,
        on_memory: bool,
        memory_deadline: float | None,
        now: float,
    ) -> None:
        was_memory_short = self._head_memory_short
        self._head_memory_short = on_memory
        deadline: float | None
        if on_memory:
            self._head_blockers = {self._memory_account}
            deadline = memory_deadline
        else:
            self._head_blockers = {w.accounts[index] for index, _ in shorts}
            # The latest short instant; None when any short account needs an event (ADM-30).
            instants = [instant for _, instant in shorts]
            deadline = None
            if instants and all(instant is not None for instant in instants):
                deadline = max(instant for instant in instants if instant is not None)
        registered = self._head_deadline
        if deadline is not None and (
            registered is None or registered[0] != w.seq or deadline < registered[1]
        ):
            # An earlier look already scheduled for this head suffices: it asks again and
            # schedules afresh, so re-asks on events do not pile up entries.
            self._head_deadline = (w.seq, deadline)
            self._push_deadline(deadline, w.seq)
        if on_memory and not was_memory_short:
            # MEM-36: every resourceful waiter behind a head short on memory is held on memory.
            for follower in list(self._off_memory.values()):
                if follower is not w:
                    self._mark_held(follower, self._memory_account, None, now)
        elif was_memory_short and not on_memory:
            self._mark_account(self._memory_account)

    def _grant(self, w: _Waiter, now: float) -> None:
        waits: dict[str, int] = {}
        for key, since in w.held.values():
            name = name_of(key)
            waits[name] = waits.get(name, 0) + whole_ms(now - since)
        # An empty grant never reports anything, so it needs no snapshot (DG-10).
        snapshot = w.snapshot if w.entries and self._emit_fn is not None else None
        # The waiter's claim on its accounts passes to the grant, until it settles.
        grant = Grant(
            w.entries,
            snapshot,
            max(0.0, now - w.arrival),
            waits,
            owner=self,
            tracked=w.accounts,
        )
        counts = self._held_counts
        for index, entry in enumerate(w.entries):
            key_id = w.accounts[index].key_id
            held = w.held.pop(key_id, None)
            if held is None:
                self._emit(
                    entry.key,
                    w,
                    counts.get(key_id, 0),
                    LimiterEventType.GRANTED_IMMEDIATE,
                    0.0,
                    None,
                    entry,
                )
            else:
                counts[key_id] -= 1
                self._emit(
                    entry.key,
                    w,
                    counts[key_id],
                    LimiterEventType.GRANTED_FROM_HOLD,
                    max(0.0, now - held[1]),
                    None,
                    entry,
                )
        for key_id, (key, since) in w.held.items():
            # Memory (EVT-05), and anything else the waiter was held on.
            counts[key_id] -= 1
            self._emit(
                key,
                w,
                counts[key_id],
                LimiterEventType.GRANTED_FROM_HOLD,
                max(0.0, now - since),
                None,
                1,
            )
        w.held.clear()
        w.grant = grant
        self._leave_line(w)
        w.accounts = ()
        w.unpark()

    def _refuse(self, w: _Waiter, account: _Account, exc: Exception, now: float) -> int:
        """An account refused (ADM-41, ADM-42): fail this waiter only."""
        failure: BaseException
        if isinstance(exc, LLMReadableError):
            reason, failure = "circuit_blocked", exc
        else:
            name = name_of(account.key)
            log.error("%s failed during admission", name, exc_info=exc)
            reason = "aborted"
            failure = UncorrectableError(f"{name} failed during admission: {exc}", cause=exc)
        self._reject(w, reason, failure, now, refusing=account)
        return _REFUSED

    def _reject(
        self,
        w: _Waiter,
        reason: str,
        failure: BaseException,
        now: float | None,
        *,
        refusing: _Account | None = None,
    ) -> None:
        was_held = refusing is not None and refusing.key_id in w.held
        self._reject_held(w, reason, now)
        if refusing is not None and not was_held:
            # EVT-07: the refusing account had not held the job; it reports the refusal too.
            self._emit(
                refusing.key,
                w,
                self._held_counts.get(refusing.key_id, 0),
                LimiterEventType.REJECTED,
                0.0,
                reason,
                1,
            )
        w.failure = failure
        self._leave_line(w)
        self._unuse(w)
        w.unpark()

    def _reject_held(self, w: _Waiter, reason: str, now: float | None) -> None:
        counts = self._held_counts
        for key_id, (key, since) in w.held.items():
            counts[key_id] -= 1
            wait = 0.0 if now is None else max(0.0, now - since)
            self._emit(key, w, counts[key_id], LimiterEventType.REJECTED, wait, reason, 1)
        w.held.clear()

    def _mark_held(
        self, w: _Waiter, account: _Account, entry: DemandEntry | None, now: float
    ) -> None:
        """HELD at most once per waiter per account (EVT-04), with the post-increment count."""
        key_id = account.key_id
        if key_id in w.held:
            return
        w.held[key_id] = (account.key, now)
        count = self._held_counts[key_id] = self._held_counts.get(key_id, 0) + 1
        if account is self._memory_account:
            self._off_memory.pop(w.seq, None)
        # The entry's amount; memory's HELD counts 1 (EVT-04).
        self._emit(account.key, w, count, LimiterEventType.HELD, 0.0, None, entry or 1)

    # -- the line and the index -------------------------------------------------------------------
    def _leave_line(self, w: _Waiter) -> None:
        if not w.in_line:
            return
        self._departures += 1
        was_head = next(iter(self._line)) == w.seq
        del self._line[w.seq]
        w.in_line = False
        self._off_memory.pop(w.seq, None)
        self._leave_groups(w)
        if w.chained:
            chained, w.chained = w.chained, []
            for group in chained:
                self._continue(group, w.seq)
            if not self._in_pass:
                self._wake()
        if was_head:
            self._head_left(w)

    def _head_left(self, old: _Waiter) -> None:
        """The head left (granted, refused, cancelled): its reservation is gone (ADM-23)."""
        was_memory_short = self._head_memory_short
        self._head_blockers = set()
        self._head_memory_short = False
        if self._line:
            new_head = self._line[next(iter(self._line))]
            self._leave_groups(new_head)  # the head is asked with no reservation, never grouped
            self._push(new_head.seq, None)
        granted = old.grant is not None
        for account in old.accounts:
            if granted and _takes_what_it_set_aside(account.limiter):
                # The head took exactly what it had set aside there: no follower fits on this
                # account now that did not fit before, so none is asked again for it.
                continue
            self._mark_account(account)
        if old.entries or was_memory_short:
            self._mark_account(self._memory_account)
        if not self._in_pass:
            self._wake()

    def _leave_groups(self, w: _Waiter) -> None:
        w.stamp += 1
        for group in w.groups:
            group.live -= 1
            if group.live <= 0:
                group.live = 0
                group.heap.clear()
                groups = group.account.groups
                if groups.get(group.signature) is group:
                    del groups[group.signature]
                self._suspended.discard(group)
        w.groups.clear()

    def _join(self, group: _Group, w: _Waiter) -> None:
        heap = group.heap
        heapq.heappush(heap, (w.seq, w.stamp))
        group.live += 1
        w.groups.append(group)
        if len(heap) > 2 * group.live + 32:
            # Drop the entries of waiters that left or were asked again since they joined.
            line = self._line
            heap[:] = [
                (seq, stamp)
                for seq, stamp in heap
                if (member := line.get(seq)) is not None and member.stamp == stamp
            ]
            heapq.heapify(heap)

    def _schedule(self, group: _Group, instant: float | None) -> None:
        """Look at ``group`` again at ``instant``; an earlier look already scheduled suffices."""
        if instant is None:
            return
        if group.deadline is None or instant < group.deadline:
            group.deadline = instant
            self._push_deadline(instant, group)

    def _push_deadline(self, instant: float, target: _Group | int) -> None:
        deadlines = self._deadlines
        heapq.heappush(deadlines, (instant, next(self._deadline_order), target))
        if len(deadlines) > self._deadline_limit:
            # Entries whose look is no longer owed (a superseded instant, a group that
            # emptied, a head that left) would stay until their instant: drop them now.
            deadlines[:] = [entry for entry in deadlines if self._deadline_owed(*entry)]
            heapq.heapify(deadlines)
            self._deadline_limit = max(_DEADLINE_SLACK, 2 * len(deadlines))

    def _deadline_owed(self, instant: float, order: int, target: _Group | int) -> bool:
        if isinstance(target, _Group):
            return (
                target.deadline == instant and target.account.groups.get(target.signature) is target
            )
        return self._head_deadline == (target, instant)

    def _push(self, seq: int, via: _Group | None) -> None:
        vias = self._vias.get(seq)
        if vias is None:
            self._vias[seq] = [via]
            heapq.heappush(self._candidates, seq)
        else:
            vias.append(via)

    def _mark_group(self, group: _Group) -> None:
        first = group.first(self._line)
        if first is not None:
            self._push(first.seq, group)

    def _continue(self, group: _Group, after: int) -> None:
        first = group.first(self._line)
        if first is not None and first.seq > after:
            self._push(first.seq, group)

    def _mark_account(self, account: _Account) -> None:
        """``account`` may have more to give: ask the head if it waits on it, and the first
        follower of each of its groups."""
        for group in list(account.groups.values()):
            self._mark_group(group)
        if account in self._head_blockers and self._line:
            self._push(next(iter(self._line)), None)
        if account is self._memory_account and self._suspended:
            suspended, self._suspended = self._suspended, set()
            for group in suspended:
                self._mark_group(group)

    # -- events -----------------------------------------------------------------------------------
    def _emit(
        self,
        account: LimiterIdentity,
        owner: _Waiter | JobSnapshot | None,
        waiters: int,
        type: LimiterEventType,
        wait: float,
        reject_reason: str | None,
        amount: DemandEntry | int,
    ) -> None:
        """Report one transition. The snapshot and the units are only worked out when there is
        an emitter to hear them: with none, an event costs nothing."""
        emit = self._emit_fn
        if emit is None:
            return
        try:
            snapshot = owner.snapshot if isinstance(owner, _Waiter) else owner
            units = amount.units if isinstance(amount, DemandEntry) else amount
            emit(account, snapshot, waiters, type, wait, reject_reason, units)
        except Exception as exc:  # noqa: BLE001 - emission is best effort (EVT-14)
            # Dropped, never silently: the first failure per account is a warning that names
            # the account and the error, the later ones are logged at debug.
            if account in self._unreported:
                log.debug("Dropped a %s limiter event", type.name, exc_info=True)
                return
            self._unreported.add(account)
            log.warning(
                "Dropped a %s limiter event for %s: %s: %s (later ones for this account are "
                "logged at debug)",
                type.name,
                name_of(account),
                exc.__class__.__name__,
                # attrs' validators raise with (message, attribute, ...): the message is enough.
                exc.args[0] if len(exc.args) > 1 and isinstance(exc.args[0], str) else exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
