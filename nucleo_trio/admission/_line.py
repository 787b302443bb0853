"""The line: the records admission keeps per waiter and per account, and the index over them
that says whom a pass asks next.

The line is an ordered dict ``seq -> waiter``; every account keeps *groups* of the followers
short on it with the same demand; a pass takes its *candidates* from a heap. The functions take
the monitor (``m``) and work on its state, which :class:`~nucleo_trio.admission.monitor.Admission`
declares in ``__init__``. Why re-asking only these candidates gives the grants a walk of the
whole line would: docs/internals/admission.md, "How the monitor keeps its books".
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import trio
from trio.lowlevel import reschedule

from .demand import DemandEntry, Grant
from .gates import CountingGate
from .limiter import LimiterIdentity, RateLimiter

if TYPE_CHECKING:
    from ..jobs.snapshot import JobSnapshot
    from .monitor import Admission, AdmissionWaiter

NOTHING: tuple[Any, ...] = ()
"""No amounts: what memory is asked with, and what a head that does not use an account sets
aside on it."""

DEADLINE_SLACK = 256
"""The deadline heap is compacted (stale entries dropped) when it outgrows twice its live
entries and at least this many."""


# --------------------------------------------------------------------------------------------
# The records (slotted for the pass)
# --------------------------------------------------------------------------------------------


class Account:
    """One account as admission tracks it: a limiter and the identity it debits.

    ``users`` counts the waiters in the monitor and the unsettled grants that name it; at 0 it
    is the monitor's idle account, forgotten when another goes idle. ``exact`` says whether the head's grant there takes exactly
    what it set aside (:func:`takes_what_it_set_aside`).
    """

    __slots__ = ("exact", "groups", "ident", "key", "key_id", "limiter", "peers", "users")

    def __init__(self, limiter: RateLimiter, key: LimiterIdentity) -> None:
        self.limiter = limiter
        self.key = key
        self.key_id = id(key)
        self.ident = (id(limiter), self.key_id)
        self.groups: dict[Hashable, Group] = {}
        self.users = 0
        # The accounts in use on the same limiter, this one included (the monitor's list).
        self.peers: list[Account] = []
        exact = _SET_ASIDE_IS_TAKEN.get(type(limiter))  # known for the class: no call
        self.exact = takes_what_it_set_aside(limiter) if exact is None else exact

    def group(self, signature: Hashable) -> Group:
        group = self.groups.get(signature)
        if group is None:
            group = self.groups[signature] = Group(self, signature)
        return group


class Group:
    """Followers short on one account with the same amounts, oldest first (lazy-deletion heap).

    An entry ``(seq, stamp)`` is live while the waiter is in the line and has not been asked
    again since it joined (its ``stamp`` is unchanged).
    """

    __slots__ = ("account", "deadline", "heap", "live", "signature")

    def __init__(self, account: Account, signature: Hashable) -> None:
        self.account = account
        self.signature = signature
        self.heap: list[tuple[int, int]] = []
        self.live = 0
        self.deadline: float | None = None

    def first(self, line: dict[int, Waiter]) -> Waiter | None:
        heap = self.heap
        while heap:
            seq, stamp = heap[0]
            waiter = line.get(seq)
            if waiter is not None and waiter.stamp == stamp:
                return waiter
            heapq.heappop(heap)
        return None


class Unset:
    __slots__ = ()


UNSET = Unset()


_NO_RESERVE: dict[Any, tuple[Any, ...]] = {}
"""A waiter's reservation until it becomes the head (never written)."""
_ABORT_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED  # read once: an Enum member read is slow


class Waiter:
    """One admit call: its demand, what it was held on and since when, and how it ended."""

    __slots__ = (
        "arrival",
        "asks",
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
        "task",
    )

    def __init__(
        self,
        seq: int,
        entries: tuple[DemandEntry, ...],
        asks: tuple[tuple[Account, DemandEntry], ...],
        snapshot: JobSnapshot | None | Unset,
        context: AdmissionWaiter | None,
        arrival: float,
    ) -> None:
        self.seq = seq
        self.entries = entries
        # Each entry with the account it debits, in the demand's order: what the attempt and
        # the grant walk, and the waiter's claim on those accounts (one user each) until it
        # passes to the grant or the waiter leaves without one (then ``()``).
        self.asks = asks
        self._snapshot = snapshot
        self.context = context
        self.arrival = arrival
        # What this waiter sets aside for a follower on each account while it is the head
        # (ADM-36), worked out when it becomes the head (only the head's is ever read), and the
        # demand's signature, worked out when it joins the line (a grant at once needs neither).
        self.reserve: dict[Account, tuple[Any, ...]] = _NO_RESERVE
        self.signature: Hashable = None
        # Groups whose chain stopped at this waiter because it was held on another account:
        # they go on from here when it leaves the line.
        self.chained: list[Group] | None = None
        # Each account the waiter is held on, as (key id, identity, instant first held), in
        # the order it was first held (so REJECTED follows marking order). A tuple, not a map:
        # a waiter is held on one or two accounts, and a parked one then holds two small
        # tuples, not a dict and its table.
        self.held: tuple[tuple[int, LimiterIdentity, float], ...] = ()
        # The groups the waiter is in, one per account it is short on (a tuple: a parked
        # waiter is usually in one, and rarely changes groups).
        self.groups: tuple[Group, ...] = ()
        self.stamp = 0
        self.on_memory = False
        self.in_line = False
        self.grant: Grant | None = None
        self.failure: BaseException | None = None
        # The parked task while it waits to be woken (``Admission.wait``), else None.
        self.task: trio.lowlevel.Task | None = None

    @property
    def snapshot(self) -> JobSnapshot | None:
        """The job's snapshot: read at the admit call when events are reported (ADM-09), else
        from the context the first time anything asks; a grant nobody hears about builds none."""
        snapshot = self._snapshot
        if isinstance(snapshot, Unset):
            assert self.context is not None
            snapshot = self._snapshot = self.context.snapshot()
        return snapshot

    @property
    def snapshot_pending(self) -> bool:
        """Whether the snapshot is still to be taken (nobody heard about the job at its admit
        call); a waiter without a context has none to take."""
        return self.context is not None and isinstance(self._snapshot, Unset)

    def join_line(self) -> None:
        """Work out what only a waiter in the line needs: its signature. One signature for the
        whole demand (every entry's limiter, identity and amounts) is used for this waiter's
        group on every account: followers with equal signatures ask every account, memory
        included, the same question, so when one is held anywhere, so is each of them behind
        it."""
        self.signature = _signature(
            tuple((id(entry.limiter), id(entry.key), entry.amounts) for entry in self.entries),
            self.seq,
        )

    def take_the_head(self) -> None:
        """Work out what the head sets aside: its amounts on each of its accounts. Only the
        head's reservation is ever read, so a follower keeps no map of its own."""
        if self.reserve is _NO_RESERVE:
            self.reserve = {account: entry.amounts for account, entry in self.asks}

    @property
    def resourceful(self) -> bool:
        return bool(self.entries)

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        """The parked task was cancelled while it waited: the waiter is itself the ``abort_fn``
        it parks with (``wait_task_rescheduled(waiter)``), so a park makes no bound method.
        Nothing may reschedule the task now."""
        self.task = None
        return _ABORT_SUCCEEDED

    def unpark(self) -> None:
        """Wake the parked task, if it is parked (any number of calls wake it once)."""
        task = self.task
        if task is not None:
            self.task = None
            reschedule(task)


_SET_ASIDE_IS_TAKEN: dict[type, bool] = {}


def takes_what_it_set_aside(limiter: RateLimiter) -> bool:
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


def is_held(w: Waiter, key_id: int) -> bool:
    """Whether ``w`` is held on the account whose identity has id ``key_id``."""
    for hold in w.held:
        if hold[0] == key_id:
            return True
    return False


def _signature(demand: tuple[Any, ...], seq: int) -> Hashable:
    """The demand itself when it is hashable; otherwise a key of this waiter's own (amounts
    that cannot be compared cannot be shown equal, so such a waiter is a group of one)."""
    try:
        hash(demand)
    except TypeError:
        return ("unhashable", seq)
    return demand


# --------------------------------------------------------------------------------------------
# The line and its index
# --------------------------------------------------------------------------------------------


def request_pass(m: Admission) -> None:
    """An event calls for a pass: wake the evaluator task, unless a settlement is about to
    run one in its own task (``_pass.pass_here``), which answers this request too."""
    m._wake_requested = True
    if m._wake_event is not None and not m._pass_follows:
        m._wake_event.set()


def leave_line(m: Admission, w: Waiter) -> None:
    """``w`` leaves the line (granted, refused, cancelled); when it was the head, its
    reservation goes with it (ADM-23)."""
    if not w.in_line:
        return
    m._departures += 1
    line = m._line
    del line[w.seq]
    w.in_line = False
    was_head = m._head is w
    if was_head:
        head = m._head = line[next(iter(line))] if line else None
        if head is not None:
            head.take_the_head()
    m._off_memory.pop(w.seq, None)
    if w.groups:
        leave_groups(m, w)
    if w.chained:
        chained, w.chained = w.chained, None
        for group in chained:
            continue_chain(m, group, w.seq)
        if not m._in_pass:
            request_pass(m)
    if not was_head:
        return
    # The head left: the new head is asked with nothing set aside (never grouped), and the
    # followers with the new head's amounts set aside where the old head's were.
    was_memory_short = m._head_memory_short
    m._head_blockers = set()
    m._head_memory_short = False
    new_head = m._head
    if new_head is not None:
        if new_head.groups:
            leave_groups(m, new_head)
        m._ask_head = True
    granted = w.grant is not None
    for account, _ in w.asks:
        if granted and account.exact:
            # The head took exactly what it had set aside there: no follower fits on this
            # account now that did not fit before, so none is asked again for it.
            continue
        mark_account(m, account)
    memory = m._memory_account
    if (w.entries or was_memory_short) and (memory.groups or m._suspended):
        mark_account(m, memory)  # (with nobody held on memory there is nothing to mark)
    if not m._in_pass:
        request_pass(m)


def leave_groups(m: Admission, w: Waiter) -> None:
    if not w.groups:
        return  # in no group, so no heap holds a live entry of it: nothing to drop
    w.stamp += 1
    for group in w.groups:
        group.live -= 1
        if group.live <= 0:
            group.live = 0
            group.heap.clear()
            groups = group.account.groups
            if groups.get(group.signature) is group:
                del groups[group.signature]
            m._suspended.discard(group)
    w.groups = ()


def join(m: Admission, group: Group, w: Waiter) -> None:
    heap = group.heap
    heapq.heappush(heap, (w.seq, w.stamp))
    group.live += 1
    w.groups = (*w.groups, group)
    # The group's signature equals the waiter's: keep one object for all its members (a parked
    # waiter then holds no tuple of its own).
    w.signature = group.signature
    if len(heap) > 2 * group.live + 32:
        # Drop the entries of waiters that left or were asked again since they joined.
        line = m._line
        heap[:] = [
            (seq, stamp)
            for seq, stamp in heap
            if (member := line.get(seq)) is not None and member.stamp == stamp
        ]
        heapq.heapify(heap)


def schedule(m: Admission, group: Group, instant: float | None) -> None:
    """Look at ``group`` again at ``instant``; an earlier look already scheduled suffices."""
    if instant is None:
        return
    if group.deadline is None or instant < group.deadline:
        group.deadline = instant
        push_deadline(m, instant, group)


def push_deadline(m: Admission, instant: float, target: Group | int) -> None:
    deadlines = m._deadlines
    heapq.heappush(deadlines, (instant, next(m._deadline_order), target))
    if len(deadlines) > m._deadline_limit:
        # Entries whose look is no longer owed (a superseded instant, a group that
        # emptied, a head that left) would stay until their instant: drop them now.
        deadlines[:] = [entry for entry in deadlines if _deadline_owed(m, *entry)]
        heapq.heapify(deadlines)
        m._deadline_limit = max(DEADLINE_SLACK, 2 * len(deadlines))


def _deadline_owed(m: Admission, instant: float, order: int, target: Group | int) -> bool:
    if isinstance(target, Group):
        return target.deadline == instant and target.account.groups.get(target.signature) is target
    return m._head_deadline == (target, instant)


def push(m: Admission, seq: int, via: Group | None) -> None:
    vias = m._vias.get(seq)
    if vias is None:
        m._vias[seq] = [via]
        heapq.heappush(m._candidates, seq)
    else:
        vias.append(via)


def mark_group(m: Admission, group: Group) -> None:
    first = group.first(m._line)
    if first is not None:
        push(m, first.seq, group)


def continue_chain(m: Admission, group: Group, after: int) -> None:
    first = group.first(m._line)
    if first is not None and first.seq > after:
        push(m, first.seq, group)


def mark_account(m: Admission, account: Account) -> None:
    """``account`` may have more to give: ask the head if it waits on it, and the first
    follower of each of its groups."""
    groups = account.groups
    if groups:
        for group in groups.values():  # marking a group neither adds nor drops one
            mark_group(m, group)
    if account in m._head_blockers and m._line:
        m._ask_head = True
    if m._suspended and account is m._memory_account:
        suspended, m._suspended = m._suspended, set()
        for group in suspended:
            mark_group(m, group)
