"""Settling a grant: what a job held goes back to its accounts, once.

A release gives back the RELEASE accounts of a job that ran and counts a completion for the
memory account; a roll-back gives back every account, TIME ones included, because the work
never happened. Each account given back is marked, so the pass asks exactly the waiters it may
now let in, and another monitor serving the same limiter is told. That pass runs at once, in
the settling task (``_pass.pass_here``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._accounts import release_accounts, tell_others
from ._line import NOTHING, Account, mark_account
from ._pass import emit, pass_here
from .demand import DemandEntry, Grant
from .limiter import LimiterEventType, Replenishment

if TYPE_CHECKING:
    from .monitor import Admission

# Read once: an Enum class's attributes cost a slow lookup.
_RELEASE = Replenishment.RELEASE
_RELEASED = LimiterEventType.RELEASED


def settle(m: Admission, grant: Grant, everything: bool) -> None:
    """Settle ``grant`` once: its RELEASE accounts, or with ``everything`` all of them, get
    their amounts back, and a completion goes to memory (ADM-45..47)."""
    if not isinstance(grant, Grant):
        raise TypeError(f"Admission: expected a Grant, got {type(grant).__name__}")
    if grant._owner is not m:
        raise ValueError("Admission: this grant was issued by another Admission")
    if grant._settled:
        return  # settled already (ADM-49): a second settlement does nothing
    grant._settled = True  # (Grant has no setattr hooks: a plain write)
    if not grant.entries:
        # Nothing to give back and no completion for memory; a pass still follows every
        # settlement (ADM-20), which costs an empty pass at most. With nobody in the line
        # that pass would find nothing, so it is skipped.
        if m._line and not m.is_stopped:  # (is_stopped is a property: asked last)
            pass_here(m)
        return
    # With nobody parked, nothing is marked and no pass follows: it would find nobody.
    open_ = not m._stopped and m._defect is None and bool(m._line)
    # The pass runs here, right after: a give to a counting gate the head is short on can
    # wait until the head was asked (``_pass.evaluate``).
    here = open_ and not m._in_pass and m._wake_event is not None
    # The grant's claim on its accounts: (account, entry) pairs in the entries' order.
    tracked: tuple[tuple[Account, DemandEntry], ...] = grant._tracked
    first_error: Exception | None = None
    # While the amounts go back, a wake an account runs (memory's completion runs one) asks
    # for the pass that follows anyway: it does not wake the evaluator task for another.
    pass_followed = m._pass_follows
    m._pass_follows = here
    emitting = m._emit_fn is not None
    if emitting and grant._context is not None and not m.heard(grant._context):
        # Nobody heard about the job at its admit call, nor does now: its RELEASED events
        # are not built (asked once for the settlement; memory reports no RELEASED).
        emitting = False
    try:
        for index, entry in enumerate(grant.entries):
            try:
                if not everything and entry.limiter.replenishment() is not _RELEASE:
                    continue
                entry.limiter.give(entry.amounts)
            except Exception as exc:  # noqa: BLE001 - give back the rest, then raise the first
                first_error = first_error or exc
                continue
            if m._shares_limiters:  # only then can another monitor serve this limiter
                tell_others(m, entry.limiter)
            if emitting:
                emit(
                    m,
                    entry.key,
                    grant,
                    m._held_counts.get(id(entry.key), 0),
                    _RELEASED,
                    0.0,
                    None,
                    entry,
                )
            if open_ and index < len(tracked):
                account = tracked[index][0]
                if here and account.exact and account in m._head_blockers:
                    m._given.append((account, entry.amounts))
                    m._ask_head = True
                else:
                    mark_account(m, account)
        try:
            # A completion for the memory gate (ADM-47); memory never reports RELEASED.
            m._memory.give(NOTHING)
        except Exception as exc:  # noqa: BLE001 - raised below, after the wake
            first_error = first_error or exc
        memory = m._memory_account
        if open_ and (memory.groups or m._suspended or memory in m._head_blockers):
            mark_account(m, memory)  # (with nobody held on memory there is nothing to mark)
    finally:
        m._pass_follows = pass_followed
    # The grant is settled whatever a give did (ADM-45): its accounts lose this user.
    release_accounts(m, tracked)
    if open_:
        # The pass the settlement calls for (ADM-20), here in the settling task: the next
        # waiter's grant is one step of its own task, with no evaluator step between.
        pass_here(m)
    if first_error is not None:
        raise first_error
