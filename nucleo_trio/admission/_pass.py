"""The pass: the walk over the candidates in arrival order, one grant attempt for each, and
what each outcome does (a grant, a hold, a refusal) and reports.

A pass reads the clock once and never awaits, so it is one critical section wherever it
runs: in the evaluator task (``Admission.run``), or in the task that settled a grant
(:func:`pass_here`), so that a grant under contention is one step of the granted task. Passes
never nest. A pass asks the head first when it is owed a question (``Admission._ask_head``),
then its candidates from the index (``_line``): new arrivals and the first follower of each
group of an account that may have more to give. Every answer an account gives is checked as
it arrives (``_answers.answer``); a wrong answer or a raise refuses that waiter alone. The
functions take the monitor (``m``) and work on its state.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from .._clock import whole_ms
from ..errors import CancellationRequested, LLMReadableError, UncorrectableError
from ._accounts import unuse
from ._answers import answer
from ._line import (
    NOTHING,
    UNSET,
    Account,
    Group,
    Unset,
    Waiter,
    continue_chain,
    is_held,
    join,
    leave_groups,
    leave_line,
    mark_account,
    mark_group,
    push_deadline,
    request_pass,
    schedule,
)
from .demand import NO_WAITS, DemandEntry, Grant
from .limiter import LimiterEventType, LimiterIdentity, name_of

if TYPE_CHECKING:
    from ..jobs.snapshot import JobSnapshot
    from .monitor import Admission

log = logging.getLogger("nucleo_trio.admission")

GRANTED, REFUSED, HELD = 0, 1, 2
"""What one attempt came to."""

# The event types, read once: an Enum class's attributes cost a slow lookup.
_HELD = LimiterEventType.HELD
_GRANTED_IMMEDIATE = LimiterEventType.GRANTED_IMMEDIATE
_GRANTED_FROM_HOLD = LimiterEventType.GRANTED_FROM_HOLD
_REJECTED = LimiterEventType.REJECTED

CANCELLED_WHILE_PARKED = "Job cancelled while waiting for admission"

"""The per-account waits of a grant that was held nowhere (shared: it is read-only)."""


# --------------------------------------------------------------------------------------------
# The walk and one attempt
# --------------------------------------------------------------------------------------------


def pass_here(m: Admission) -> None:
    """Run the pass an event calls for in the task that caused it (a settlement), instead of
    waking the evaluator task for it: a pass never awaits, so it is one critical section
    wherever it runs, and a grant is then one task step, the granted waiter's.

    Passes never nest: during a pass (an account or an emitter settling a grant from inside
    it) the event only marks the pass to run again, as it would wake the evaluator. Before the
    evaluator started, or once admission stopped, the event wakes the evaluator as before. A
    defect closes admission here as it would in the evaluator (ADM-44): the settlement that
    ran the pass is done and does not raise it. When the pass scheduled a look earlier than
    the instant the evaluator sleeps until, the evaluator is woken to re-arm its timer.
    """
    if m._in_pass or m._wake_event is None or m._stopped or m._defect is not None:
        request_pass(m)
        return
    m._in_pass = True
    try:
        evaluate(m)
    except Exception as defect:  # noqa: BLE001 - a defect closes admission for good
        m._in_pass = False
        m._close_on_defect(defect)
        return
    m._in_pass = False
    deadlines = m._deadlines
    if deadlines and deadlines[0][0] < m._sleeps_until:
        request_pass(m)


def evaluate(m: Admission) -> None:
    """One pass (ADM-19..25): the looks that fell due and the limiters that woke mark their
    candidates, then every candidate is asked in arrival order until none is left."""
    now = m._clock()  # one `now` for every attempt of the pass (ADM-21)
    deadlines = m._deadlines
    while deadlines and deadlines[0][0] <= now:
        instant, _, target = heapq.heappop(deadlines)
        if isinstance(target, Group):
            if target.deadline == instant:
                target.deadline = None
            mark_group(m, target)
        else:
            if m._head_deadline == (target, instant):
                m._head_deadline = None
            if m._head is not None and m._head.seq == target:
                m._ask_head = True
    if m._woken:
        woken, m._woken = m._woken, set()
        for limiter_id in woken:
            wired = m._wired.get(limiter_id)
            if wired is not None:
                for account in wired[1]:
                    mark_account(m, account)
    line = m._line
    candidates = m._candidates
    vias_of = m._vias
    while True:
        if m._ask_head:
            # The head is owed a question. It is the oldest in the line, so asking it before
            # every candidate keeps arrival order; if it is a candidate too, it is asked once,
            # for all the groups it was marked through.
            m._ask_head = False
            head = m._head
            if head is not None:
                vias = vias_of.pop(head.seq, None)
                if head.context is not None and head.context.is_cancelled:
                    # ADM-18: a cancelled head leaves, and stops reserving.
                    reject(m, head, "cancelled", CancellationRequested(CANCELLED_WHILE_PARKED), now)
                else:
                    attempt(m, head, None, now)
                given = m._given
                if given:
                    # The counting gates a settlement gave back to while this head was short
                    # on them: a follower short on one was short with the head's amounts set
                    # aside there. Granted, the head took exactly those; if the new head sets
                    # aside the very permits given back, each follower's question (in use +
                    # asked + set aside) is what it was before the give, and none is asked
                    # again. Otherwise (the head held, refused or cancelled, or other
                    # amounts) the gate is marked as any give marks it.
                    new_head = m._head if head.grant is not None else None
                    reserve = new_head.reserve if new_head is not None else None
                    for account, amounts in given:
                        if reserve is not None and reserve.get(account) == amounts:
                            # The same list of None and whole numbers is the same permits;
                            # any other amount is left to the gate to count.
                            for amount in amounts:
                                if amount is not None and type(amount) is not int:
                                    break
                            else:
                                continue
                        mark_account(m, account)
                    given.clear()
                if vias is not None:
                    _carry_on(m, head, vias, True)
            continue
        if candidates:
            seq = heapq.heappop(candidates)
            vias = vias_of.pop(seq, None)
            if vias is None:
                continue  # asked already, as the head
            w = line.get(seq)
            if w is None:
                for via in vias:
                    if via is not None:
                        continue_chain(m, via, seq)
                continue
            head = m._head
            assert head is not None  # w is in the line
            _visit(m, w, vias, now, head)
            continue
        if m._recheck_head and line and not m._head_memory_short:
            # A follower found memory closed after a grant earlier in the pass: the head,
            # asked again, is short on memory too, and then so is everyone behind it.
            m._recheck_head = False
            m._ask_head = True
            continue
        m._recheck_head = False
        return


def _visit(m: Admission, w: Waiter, vias: list[Group | None], now: float, head: Waiter) -> None:
    """Ask the candidate ``w`` (``head`` is the head now: a new arrival may be it), then carry
    on the chains it was marked through. (The head owed a question is asked in the pass's
    loop, which also settles what a settlement left for after the head.)"""
    is_head = head is w
    if w.context is not None and w.context.is_cancelled:
        # ADM-18: a cancelled waiter leaves; a cancelled head stops reserving.
        reject(m, w, "cancelled", CancellationRequested(CANCELLED_WHILE_PARKED), now)
    else:
        attempt(m, w, None if is_head else head, now)
    _carry_on(m, w, vias, is_head)


def _carry_on(m: Admission, w: Waiter, vias: list[Group | None], is_head: bool) -> None:
    """After ``w`` was asked: go on down the chain of every group it was marked through, or
    note where that chain stops."""
    for via in vias:
        if via is None:
            continue
        if w.in_line and not is_head:
            # Still held: everyone behind it in the group has its demand and would be held
            # the same way, so the chain stops here until what holds it changes.
            if w.on_memory:
                if via.account is not m._memory_account:
                    m._suspended.add(via)  # goes on when memory is marked
            elif via not in w.groups:
                # Held elsewhere: goes on when it leaves the line.
                if w.chained is None:
                    w.chained = [via]
                else:
                    w.chained.append(via)
            continue
        if w.in_line and via.account.exact and via.account in m._head_blockers:
            # The head, asked with nothing set aside, is short on the group's account. Everyone
            # behind it in the group has its demand and is asked with its amounts set aside
            # there, which on a counting gate can only make it shorter: the chain stops here
            # until what holds the head changes (a give marks the account; the head leaving
            # without its grant marks it too, and with it, takes what it set aside).
            continue
        continue_chain(m, via, w.seq)


def attempt(m: Admission, w: Waiter, head: Waiter | None, now: float) -> int:
    """Steps 1-5 of one grant attempt (ADM-26..33); ``head`` is None when ``w`` is the head.

    Returns GRANTED, REFUSED or HELD, having done what each means: events, the waiter
    completed or failed and out of the line, or its blockers and deadlines recorded.
    """
    if not w.entries:
        # An empty demand never meets memory and holds nothing (ADM-26).
        _grant(m, w, now)
        return GRANTED
    memory = m._memory
    memory_account = m._memory_account
    # Step 1 (ADM-27): behind a head short on memory, a resourceful waiter is held on memory.
    if head is not None and m._head_memory_short:
        _mark_held(m, w, memory_account, None, now)
        _hold(m, w, head, (), on_memory=True, memory_deadline=None, now=now)
        return HELD
    # Step 2 (ADM-28): memory before any entry.
    try:
        memory_fits: object = memory.fits(NOTHING, NOTHING)
        if memory_fits is not True and memory_fits is not False:
            memory_fits = answer("fits", memory_fits)  # not a bool: raises
    except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
        return _refuse(m, w, memory_account, exc, now)
    if not memory_fits:
        return _short_on_memory(m, w, head, now)
    asks = w.asks
    reserve = head.reserve if head is not None else None
    # Step 3 (ADM-29, ADM-30): every entry, even after a short one.
    shorts: list[tuple[Account, float | None]] | None = None
    for account, entry in asks:
        reserved = NOTHING if reserve is None else reserve.get(account, NOTHING)
        try:
            fits: object = entry.limiter.fits(entry.amounts, reserved)
            if fits is True:
                continue
            if fits is not False:
                fits = answer("fits", fits)  # not a bool: raises
            _mark_held(m, w, account, entry, now)  # (once per account: EVT-04)
            if account.exact:
                # A counting gate that keeps the gate's own questions names no instant: only
                # a give frees a permit (its earliest_fit answers None, and fits has already
                # refused any amount it would refuse).
                instant = None
            else:
                instant = entry.limiter.earliest_fit(entry.amounts, reserved)
                if instant is not None:
                    instant = answer("earliest_fit", instant)
        except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
            return _refuse(m, w, account, exc, now)
        if shorts is None:
            shorts = [(account, instant)]
        else:
            shorts.append((account, instant))
    if shorts is not None:
        if head is None and w.in_line:
            w.on_memory = False
            _hold_head(m, w, shorts, False, None, now)
        else:
            _hold(m, w, head, shorts, on_memory=False, memory_deadline=None, now=now)
        return HELD
    # Step 4 (ADM-31): take every entry; a refused take undoes the ones before it.
    taken = 0
    for account, entry in asks:
        reserved = NOTHING if reserve is None else reserve.get(account, NOTHING)
        try:
            took: object = entry.limiter.try_take(entry.amounts, reserved)
            if took is not True and took is not False:
                # Not a bool (raises): whether it debited is unknown, so only the entries
                # before it go back.
                took = answer("try_take", took)
        except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
            _give_back(m, w, taken)
            return _refuse(m, w, account, exc, now)
        if not took:
            _give_back(m, w, taken)
            try:
                _mark_held(m, w, account, entry, now)
                instant = entry.limiter.earliest_fit(entry.amounts, reserved)
                if instant is not None:
                    instant = answer("earliest_fit", instant)
            except Exception as exc:  # noqa: BLE001 - as above
                return _refuse(m, w, account, exc, now)
            _hold(m, w, head, [(account, instant)], on_memory=False, memory_deadline=None, now=now)
            return HELD
        taken += 1
    # Step 5 (ADM-32): memory after every entry.
    try:
        memory_took: object = memory.try_take(NOTHING, NOTHING)
        if memory_took is not True and memory_took is not False:
            memory_took = answer("try_take", memory_took)  # not a bool: raises
    except Exception as exc:  # noqa: BLE001 - as above
        _give_back(m, w, taken)
        return _refuse(m, w, memory_account, exc, now)
    if not memory_took:
        _give_back(m, w, taken)
        return _short_on_memory(m, w, head, now)
    _grant(m, w, now)
    return GRANTED


def _short_on_memory(m: Admission, w: Waiter, head: Waiter | None, now: float) -> int:
    memory_account = m._memory_account
    try:
        _mark_held(m, w, memory_account, None, now)
        instant = m._memory.earliest_fit(NOTHING, NOTHING)
        if instant is not None:
            instant = answer("earliest_fit", instant)
    except Exception as exc:  # noqa: BLE001 - an account's fault refuses only this waiter
        return _refuse(m, w, memory_account, exc, now)
    if head is not None and not m._head_memory_short:
        m._recheck_head = True
    _hold(m, w, head, (), on_memory=True, memory_deadline=instant, now=now)
    return HELD


def _give_back(m: Admission, w: Waiter, taken: int) -> None:
    """Undo this attempt's takes. A give that raises here is a defect (ADM-44)."""
    for index in range(taken - 1, -1, -1):
        entry = w.entries[index]
        entry.limiter.give(entry.amounts)


# --------------------------------------------------------------------------------------------
# Outcomes
# --------------------------------------------------------------------------------------------


def _hold(
    m: Admission,
    w: Waiter,
    head: Waiter | None,
    shorts: Sequence[tuple[Account, float | None]],
    *,
    on_memory: bool,
    memory_deadline: float | None,
    now: float,
) -> None:
    """Record why ``w`` waits (``shorts``: each account it is short on, with the instant that
    account named), so that exactly the events that can help ask it again."""
    w.on_memory = on_memory
    if not w.in_line:
        return  # the fast path: enqueueing makes it a candidate of the next pass
    if head is None:
        _hold_head(m, w, shorts, on_memory, memory_deadline, now)
        return
    if on_memory:
        _regroup(m, w, [m._memory_account])
        schedule(m, w.groups[0], memory_deadline)
        return
    _regroup(m, w, [account for account, _ in shorts])
    groups = w.groups  # one per short account, in the same order
    for index, (_, instant) in enumerate(shorts):
        schedule(m, groups[index], instant)


def _regroup(m: Admission, w: Waiter, accounts: list[Account]) -> None:
    """Put ``w`` in its group on each of ``accounts``, in order. Held again where it was
    held before (the common case in a long line), it keeps its places: its entries stay
    valid and no heap moves (a group with a member is never dropped)."""
    groups = w.groups
    if len(groups) == len(accounts):
        for index, group in enumerate(groups):
            if group.account is not accounts[index]:
                break
        else:
            return
    leave_groups(m, w)  # may drop a group it was the last member of: look up afresh
    for account in accounts:
        join(m, account.group(w.signature), w)


def _hold_head(
    m: Admission,
    w: Waiter,
    shorts: Sequence[tuple[Account, float | None]],
    on_memory: bool,
    memory_deadline: float | None,
    now: float,
) -> None:
    """The head waits: what it is short on are the blockers whose marks ask it again, and its
    look is at the latest instant they named (none when any needs an event)."""
    if w.groups:
        leave_groups(m, w)
    was_memory_short = m._head_memory_short
    m._head_memory_short = on_memory
    deadline: float | None
    if on_memory:
        m._head_blockers = {m._memory_account}
        deadline = memory_deadline
    else:
        # The latest short instant; None when any short account needs an event (ADM-30).
        blockers = set()
        deadline = None
        timed = True  # every short account named an instant
        for account, instant in shorts:
            blockers.add(account)
            if instant is None:
                timed = False
            elif deadline is None or instant > deadline:
                deadline = instant
        m._head_blockers = blockers
        if not timed:
            deadline = None
    registered = m._head_deadline
    if deadline is not None and (
        registered is None or registered[0] != w.seq or deadline < registered[1]
    ):
        # An earlier look already scheduled for this head suffices: it asks again and
        # schedules afresh, so re-asks on events do not pile up entries.
        m._head_deadline = (w.seq, deadline)
        push_deadline(m, deadline, w.seq)
    if on_memory and not was_memory_short:
        # MEM-36: every resourceful waiter behind a head short on memory is held on memory.
        for follower in list(m._off_memory.values()):
            if follower is not w:
                _mark_held(m, follower, m._memory_account, None, now)
    elif was_memory_short and not on_memory:
        mark_account(m, m._memory_account)


def _grant(m: Admission, w: Waiter, now: float) -> None:
    held = w.held
    waits: Mapping[str, int] = NO_WAITS  # a waiter never held waited on no account
    if held:
        waits = {}
        for _, key, since in held:
            name = name_of(key)
            ms = whole_ms(now - since)
            if name in waits:
                waits[name] += ms  # two accounts of one name add up
            else:
                waits[name] = ms
        waits = MappingProxyType(waits)
    wall_wait = now - w.arrival
    if wall_wait < 0.0:
        wall_wait = 0.0
    emitting = m._emit_fn is not None
    # An empty grant never reports anything, so it needs no snapshot (DG-10); one whose
    # snapshot was not taken at the admit call takes it when an event first needs it.
    snapshot: JobSnapshot | None = None
    later = None
    if emitting and w.entries:
        taken = w._snapshot
        if not isinstance(taken, Unset):
            snapshot = taken
        else:
            later = w.context
            if not w.in_line:
                # The grant at the admit call (ADM-11), in the same step as the admit call
                # that found nobody to hear about the job: its events would reach nobody
                # either, so none is built (and it was held nowhere: nothing to count back).
                emitting = False
    # The waiter's claim on its accounts passes to the grant, until it settles.
    # (By position: entries, snapshot, wall wait, waits, owner, tracked.)
    grant = Grant(w.entries, snapshot, wall_wait, waits, m, w.asks, later)
    if held or emitting:
        # The held counts come back into balance, and with an emitter each entry reports
        # its grant (with nobody listening and nothing held, nothing is left to do).
        counts = m._held_counts
        # The holds not yet answered by an entry's grant: what is left is memory's (and
        # anything else the waiter was held on).
        unanswered = list(held)
        for account, entry in w.asks:
            key_id = account.key_id
            was_held = None
            for index, hold in enumerate(unanswered):
                if hold[0] == key_id:
                    was_held = unanswered.pop(index)
                    break
            if was_held is None:
                if emitting:
                    emit(
                        m,
                        entry.key,
                        w,
                        counts.get(key_id, 0),
                        _GRANTED_IMMEDIATE,
                        0.0,
                        None,
                        entry,
                    )
                continue
            counts[key_id] -= 1
            if emitting:
                emit(
                    m,
                    entry.key,
                    w,
                    counts[key_id],
                    _GRANTED_FROM_HOLD,
                    max(0.0, now - was_held[2]),
                    None,
                    entry,
                )
        for key_id, key, since in unanswered:
            # Memory (EVT-05), and anything else the waiter was held on.
            counts[key_id] -= 1
            if emitting:
                emit(
                    m,
                    key,
                    w,
                    counts[key_id],
                    _GRANTED_FROM_HOLD,
                    max(0.0, now - since),
                    None,
                    1,
                )
        w.held = ()
    w.grant = grant
    leave_line(m, w)
    w.asks = ()  # the claim on the accounts is the grant's now
    w.unpark()


def _refuse(m: Admission, w: Waiter, account: Account, exc: Exception, now: float) -> int:
    """An account refused (ADM-41, ADM-42): fail this waiter only."""
    failure: BaseException
    if isinstance(exc, LLMReadableError):
        reason, failure = "circuit_blocked", exc
    else:
        name = name_of(account.key)
        log.error("%s failed during admission", name, exc_info=exc)
        reason = "aborted"
        failure = UncorrectableError(f"{name} failed during admission: {exc}", cause=exc)
    reject(m, w, reason, failure, now, refusing=account)
    return REFUSED


def reject(
    m: Admission,
    w: Waiter,
    reason: str,
    failure: BaseException,
    now: float | None,
    *,
    refusing: Account | None = None,
) -> None:
    was_held = refusing is not None and is_held(w, refusing.key_id)
    reject_held(m, w, reason, now)
    if refusing is not None and not was_held:
        # EVT-07: the refusing account had not held the job; it reports the refusal too.
        emit(
            m,
            refusing.key,
            w,
            m._held_counts.get(refusing.key_id, 0),
            _REJECTED,
            0.0,
            reason,
            1,
        )
    w.failure = failure
    leave_line(m, w)
    unuse(m, w)
    w.unpark()


def reject_held(m: Admission, w: Waiter, reason: str, now: float | None) -> None:
    counts = m._held_counts
    held, w.held = w.held, ()
    for key_id, key, since in held:
        counts[key_id] -= 1
        wait = 0.0 if now is None else max(0.0, now - since)
        emit(m, key, w, counts[key_id], _REJECTED, wait, reason, 1)


def _mark_held(
    m: Admission, w: Waiter, account: Account, entry: DemandEntry | None, now: float
) -> None:
    """HELD at most once per waiter per account (EVT-04), with the post-increment count."""
    key_id = account.key_id
    if is_held(w, key_id):
        return
    w.held = (*w.held, (key_id, account.key, now))
    count = m._held_counts[key_id] = m._held_counts.get(key_id, 0) + 1
    if account is m._memory_account:
        m._off_memory.pop(w.seq, None)
    # The entry's amount; memory's HELD counts 1 (EVT-04).
    emit(m, account.key, w, count, _HELD, 0.0, None, entry or 1)


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


def emit(
    m: Admission,
    account: LimiterIdentity,
    owner: Waiter | Grant,
    waiters: int,
    type: LimiterEventType,
    wait: float,
    reject_reason: str | None,
    amount: DemandEntry | int,
) -> None:
    """Report one transition. The snapshot and the units are only worked out when there is
    an emitter to hear them: with none, an event costs nothing."""
    emitter = m._emit_fn
    if emitter is None:
        return
    # The job whose snapshot is still to be taken, if it is (nobody heard about it at its
    # admit call); the fields are read directly (a property read is a call).
    if isinstance(owner, Waiter):
        pending = owner.context if owner._snapshot is UNSET else None
    else:
        pending = owner._context
    if pending is not None and account is not m._memory_account.key:
        # Ask again now, and build nothing for an event nobody hears. (Memory's own
        # transitions always reach the emitter.)
        if not m.heard(pending):
            return
    try:
        snapshot = owner.snapshot
        units = amount.units if isinstance(amount, DemandEntry) else amount
        emitter(account, snapshot, waiters, type, wait, reject_reason, units)
    except Exception as exc:  # noqa: BLE001 - emission is best effort (EVT-14)
        # Dropped, never silently: the first failure per account is a warning that names
        # the account and the error, the later ones are logged at debug.
        if account in m._unreported:
            log.debug("Dropped a %s limiter event", type.name, exc_info=True)
            return
        m._unreported.add(account)
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
