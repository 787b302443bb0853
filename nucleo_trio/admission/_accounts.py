"""The accounts admission tracks: checked when first met, wired so that their capacity changes
wake the monitor, and forgotten once nobody waits on them or holds them.

An account is in use while a parked waiter or an unsettled grant uses it (``users``). When the
last one leaves it becomes the idle account (``m._idle``), kept until another goes idle, it is
used again or admission stops (:func:`release_accounts`); then its bookkeeping goes, so every
map stays as large as what is in use plus that one account.
The wake installed on a limiter stays installed when it goes idle: it reaches the monitor only
through weak references and does nothing while the limiter is not in use, and when the limiter
is used again the same wake serves it (only a limiter whose wake was cleared or taken since
gets a new one). The functions take the monitor (``m``) and work on its state.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UncorrectableError
from ._line import Account, Waiter
from .demand import DemandEntry
from .limiter import (
    AbstractRateLimiter,
    LimiterIdentity,
    RateLimiter,
    _identity_faults,
    _limiter_faults,
    describe_faults,
    name_of,
)

if TYPE_CHECKING:
    from .monitor import Admission

log = logging.getLogger("nucleo_trio.admission")

_NO_WIRING: tuple[None, list[Any]] = (None, [])


class Wake:
    """The wake-up one monitor hears a limiter through (ADM-10): a callable that reaches the
    monitor and the limiter only weakly, so an idle limiter keeps neither alive and a wake
    from a limiter the monitor no longer tracks does nothing.

    One limiter may serve several monitors (two dispatchers in one program). The first
    installs its wake in the limiter's one slot (``on_capacity_change``); on an account of
    the base class, every later one adds its own as a wake listener
    (:meth:`~nucleo_trio.admission.limiter.AbstractRateLimiter.add_wake_listener`), so a
    change of capacity reaches each, and each tells the others when it gives back
    (:func:`tell_others`). ``shared`` says another monitor was seen on the limiter.
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


def _wakes_on(limiter: AbstractRateLimiter) -> list[Wake]:
    """The monitors' wakes ``limiter`` runs on a change of capacity."""
    return [
        wake
        for wake in limiter.wake_listeners
        if isinstance(wake, Wake) and wake.limiter is limiter
    ]


def _in_place(limiter: RateLimiter, wake: Wake | None) -> bool:
    """Whether ``wake`` is alive, bound to ``limiter`` and still run by it. An account of the
    base class says what it runs; of any other, a wake once installed is taken to be there."""
    if wake is None or wake.limiter is not limiter:
        return False
    return not isinstance(limiter, AbstractRateLimiter) or limiter.runs_wake(wake)


class Seen:
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


# --------------------------------------------------------------------------------------------
# Tracking
# --------------------------------------------------------------------------------------------


def install_wake(m: Admission, limiter: RateLimiter) -> None:
    """Install the wake on ``limiter`` unless the one installed earlier is still in place
    (once per limiter over the monitor's life, ADM-10): it may have been cleared or taken
    while the limiter was idle."""
    limiter_id = id(limiter)
    hooks = m._hooks
    installed = hooks.get(limiter_id)
    if installed is not None:
        current: Wake | None = installed()
        if current is not None:
            if current._limiter() is limiter and getattr(limiter, "_wake", None) is current:
                return  # still in the limiter's slot (the usual case, read without a call)
            if _in_place(limiter, current):
                return
    others: list[Wake] = []
    listened = limiter if isinstance(limiter, AbstractRateLimiter) else None
    if listened is not None:
        for wake in _wakes_on(listened):
            if wake.monitor is None:
                listened.remove_wake_listener(wake)  # a monitor that is gone
            elif wake.monitor is not m:
                others.append(wake)
    hook: Wake
    if listened is not None and others:
        # Another monitor hears this limiter: listen beside it, leaving its wake alone.
        hook = Wake(m, limiter, listener=True)
        listened.add_wake_listener(hook)
        hook.shared = True
        m._shares_limiters = True
        for other in others:
            other.shared = True
            other_monitor = other.monitor
            if other_monitor is not None:
                other_monitor._shares_limiters = True
    else:
        hook = Wake(m, limiter, listener=False)
        limiter.on_capacity_change(hook)

    def dropped(ref: weakref.ref[Wake]) -> None:
        if hooks.get(limiter_id) is ref:
            del hooks[limiter_id]

    hooks[limiter_id] = weakref.ref(hook, dropped)


def tell_others(m: Admission, limiter: RateLimiter) -> None:
    """Another monitor serving ``limiter`` hears that this one gave back to it."""
    if not m._shares_limiters:
        return  # no limiter of this monitor was ever seen serving another
    ref = m._hooks.get(id(limiter))
    hook = ref() if ref is not None else None
    if hook is not None and hook.shared and isinstance(limiter, AbstractRateLimiter):
        for wake in _wakes_on(limiter):
            if wake.monitor is not m:
                wake()


def account_of(m: Admission, entry: DemandEntry) -> Account:
    """The account ``entry`` debits, tracked from now on, with one more user."""
    limiter = entry.limiter
    ident = (id(limiter), id(entry.key))
    account = m._accounts.get(ident)
    if account is None:
        _check_shape(m, limiter, entry.key)
        account = Account(limiter, entry.key)
        wired = m._wired.get(ident[0])
        if wired is None:
            _wire(m, limiter, entry.key)
            wired = m._wired[ident[0]] = (limiter, [])
        account.peers = wired[1]
        account.peers.append(account)
        m._accounts[ident] = account
    elif account.users <= 0:
        # The idle account (``m._idle``), used again: listed as met now, and its wake put
        # back if it was cleared or taken while the account was idle.
        m._idle = None
        accounts = m._accounts
        del accounts[ident]
        accounts[ident] = account
        ref = m._hooks.get(ident[0])
        hook = ref() if ref is not None else None
        if hook is None or getattr(limiter, "_wake", None) is not hook:
            _wire(m, limiter, entry.key)  # (a wake still in its slot is in place: no call)
    account.users += 1
    return account


def _wire(m: Admission, limiter: RateLimiter, key: LimiterIdentity) -> None:
    """Install the wake on ``limiter`` (unless it is in place); a raise refuses the admit."""
    try:
        install_wake(m, limiter)
    except Exception as exc:  # noqa: BLE001 - the account's fault: refuse this admit
        raise UncorrectableError(
            f"{name_of(key)} failed during admission: on_capacity_change raised {exc!r}",
            cause=exc,
        ) from exc


def _check_shape(m: Admission, limiter: RateLimiter, key: LimiterIdentity) -> None:
    """Refuse an account whose shape breaks the contract (a ``capacity`` written as a
    method, a ``status()`` of the wrong type), naming it and everything wrong, before it
    can break events and health. An account that passed is not checked again while it lives:
    accounts are forgotten when idle and met again at the next use."""
    sound = m._sound
    if key is limiter:
        # The usual account, its own identity, met before: one look-up, no call.
        ref = sound._refs.get(id(limiter))
        if ref is not None and ref() is limiter:
            return
    limiter_sound = limiter in sound
    key_sound = limiter_sound if key is limiter else key in sound
    if limiter_sound and key_sound:
        return  # met before (the usual case): nothing to check or to note again
    faults: list[str] = []
    if not limiter_sound:
        faults += _limiter_faults(limiter)
    if not key_sound:
        faults += _identity_faults(key)
    if faults:
        raise UncorrectableError(describe_faults(key, faults))
    sound.add(limiter)
    if key is not limiter:
        sound.add(key)


def unuse(m: Admission, w: Waiter) -> None:
    """``w`` left without a grant: its accounts lose a user (once per waiter)."""
    asks, w.asks = w.asks, ()
    release_accounts(m, asks)


def release_accounts(m: Admission, asks: Sequence[tuple[Account, Any]]) -> None:
    """Each account of ``asks`` (pairs of an account and what was asked of it: a waiter's
    or a grant's) loses a user. One that has none left becomes the idle account
    (``m._idle``), and the idle one before it is forgotten: a limiter used by one job after
    another (each settled before the next is admitted) keeps its bookkeeping instead of
    being forgotten and met afresh every time, while the maps stay as large as what is in
    use plus that one account. A stopped monitor forgets it at once."""
    for account, _ in asks:
        account.users -= 1
        if account.users <= 0:
            idle = m._idle
            if idle is account:
                continue
            if m._stopped or m._defect is not None:
                _forget(m, account)
                continue
            m._idle = account
            if idle is not None:
                _forget(m, idle)


def forget_idle(m: Admission) -> None:
    """Forget the idle account, if there is one (admission stops)."""
    idle, m._idle = m._idle, None
    if idle is not None and idle.users <= 0:
        _forget(m, idle)


def _forget(m: Admission, account: Account) -> None:
    """Nobody holds or waits on ``account``: drop its bookkeeping. Its limiter keeps the
    installed wake, which does nothing until the limiter is used again."""
    ident = account.ident
    accounts = m._accounts
    if accounts.get(ident) is account:
        del accounts[ident]
    peers = account.peers
    if len(peers) == 1 and peers[0] is account:
        # The limiter's only account in use (the usual case): its wiring goes with it.
        peers.clear()
        if m._wired.get(ident[0], _NO_WIRING)[1] is peers:
            del m._wired[ident[0]]
    elif account in peers:
        peers.remove(account)
    counts = m._held_counts
    if counts and counts.get(account.key_id) == 0:
        del counts[account.key_id]


def unwire(m: Admission) -> None:
    """Clear the wake on every limiter the monitor wired, idle ones included (the memory
    account too), and forget them all (ADM-06). A wake the monitor added as a listener is
    removed; one another monitor installed stays in place."""
    # Every limiter still holding the wake, in use or idle.
    limiters = {id(limiter): limiter for limiter, _ in m._wired.values()}
    for ref in list(m._hooks.values()):
        hook = ref()
        limiter = hook.limiter if hook is not None else None
        if limiter is not None:
            limiters.setdefault(id(limiter), limiter)
    for limiter in limiters.values():
        held = m._hooks.get(id(limiter))
        hook = held() if held is not None else None
        try:
            if isinstance(limiter, AbstractRateLimiter):
                if hook is not None and _in_place(limiter, hook):
                    if hook.listener:
                        limiter.remove_wake_listener(hook)
                        continue
                elif any(wake.monitor not in (None, m) for wake in _wakes_on(limiter)):
                    continue  # the wake there now is another monitor's: it stays in place
            limiter.on_capacity_change(None)
        except Exception:  # noqa: BLE001 - stopping goes on whatever one account does
            log.exception("Clearing the wake of %r failed", limiter)
    m._wired.clear()
    m._hooks.clear()
