"""Where the schedule lives: the :class:`HeartbeatStore` contract and the in-memory store.

A store holds at most one heartbeat per id, ordered by run instant (ties by id). The Heart is
its only poller: it takes each due heartbeat out with :meth:`~HeartbeatStore.poll_due`, fires
it, and puts the recurrence's next slot back with
:meth:`~HeartbeatStore.re_enqueue_if_absent`, which yields to an operator who rebound the id in
the meantime. Between polls it sleeps until :meth:`~HeartbeatStore.peek_next_run_at`, and a
store wakes it through its change listener whenever the head of the schedule changes.

Every operation is a coroutine so a store may talk to something that lives elsewhere; each must
be atomic with respect to the others (one trio task runs at a time, so a store that never
awaits inside an operation is atomic by construction). A store refuses a heartbeat the runtime
did not mint (:func:`~nucleo_trio.heartbeat.is_genuine`).

The store a dispatcher uses is chosen through the ``nucleo_trio_heartbeat_store`` hook (a
``firstresult`` provider hook): the built-in answers for the kinds ``"memory"`` (the default)
and ``"sqlite"`` (:class:`~nucleo_trio.heartbeat.SQLiteHeartbeatStore`, which survives a
restart); a plugin answers first for a kind of its own.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._plugin_errors import PluginError
from ..errors import ConfigError, NucleoSystemError, UsageRuntimeError, UsageValueError
from .codec import HeartbeatCodec
from .records import Heartbeat, is_genuine

if TYPE_CHECKING:
    import pluggy

    from ..dispatch.config import HeartbeatConfig

__all__ = [
    "DurableHeartbeatStore",
    "HeartbeatStore",
    "InMemoryHeartbeatStore",
    "adopt_codec",
    "heartbeat_store_from",
    "require_codec",
    "require_genuine",
]

log = logging.getLogger("nucleo_trio.heartbeat")


@runtime_checkable
class HeartbeatStore(Protocol):
    """The schedule: at most one heartbeat per id, due in order of run instant, then id."""

    async def enqueue(self, heartbeat: Heartbeat) -> Heartbeat | None:
        """Store ``heartbeat``, replacing any under its id (most recent wins); answer the one
        it displaced, or ``None``. A heartbeat the runtime did not mint is refused."""
        ...

    async def cancel(self, heartbeat_id: str) -> Heartbeat | None:
        """Remove the heartbeat ``heartbeat_id`` and answer it; ``None`` when there is none."""
        ...

    async def poll_due(self, now: float) -> Heartbeat | None:
        """Remove and answer the most overdue heartbeat whose run instant is at or before
        ``now``; ``None`` when none is due. Never a future one."""
        ...

    async def peek_next_run_at(self) -> float | None:
        """The earliest run instant held, or ``None`` for an empty schedule."""
        ...

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        """Store ``heartbeat`` only if its id is free; answer whether it was stored. A slot
        someone rebound while the previous one fired keeps the rebinding."""
        ...

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (synchronously) after every change of the schedule's head: the
        earliest entry appearing, leaving or being replaced. Answers an unregister."""
        ...

    async def inspect(self) -> tuple[Heartbeat, ...]:
        """Every heartbeat held, in the order they fall due."""
        ...

    async def aclose(self) -> None:
        """Let go of what the store holds open (a file, a connection); the dispatcher calls it
        at shutdown."""
        ...


@runtime_checkable
class DurableHeartbeatStore(HeartbeatStore, Protocol):
    """A store that keeps the schedule outside this process (a file, a server), as rows.

    What others can write there is data, never code or authority: the store writes and reads
    every row through a :class:`~nucleo_trio.heartbeat.HeartbeatCodec`, which names job classes
    by registered name and signs each row. The dispatcher hands its store the codec built from
    its :class:`~nucleo_trio.heartbeat.HeartbeatJobs` and its configured signing key, at start
    and before any operation; a store used on its own is given one when built.
    """

    @property
    def codec(self) -> HeartbeatCodec | None:
        """The codec rows go through; ``None`` until one is given."""
        ...

    def use_codec(self, codec: HeartbeatCodec) -> None:
        """Write and read rows through ``codec`` from now on. A store given another codec
        already refuses a second one (:class:`~nucleo_trio.errors.UsageValueError`)."""
        ...


def adopt_codec(store_name: str, held: HeartbeatCodec | None, codec: object) -> HeartbeatCodec:
    """What a durable store's :meth:`~DurableHeartbeatStore.use_codec` keeps: ``codec``, once
    checked, and never a second one."""
    if not isinstance(codec, HeartbeatCodec):
        raise TypeError(f"{store_name}.use_codec takes a HeartbeatCodec, got {codec!r}")
    if held is not None and held is not codec:
        raise UsageValueError(
            "heartbeat-store",
            f"{store_name} already writes its rows through another codec",
            "give the store to one dispatcher, and build it without codec= when a dispatcher "
            "is to hand it its own",
        )
    return codec


def require_codec(store_name: str, codec: HeartbeatCodec | None) -> HeartbeatCodec:
    """``codec``, or the error a durable store used before it has one raises."""
    if codec is None:
        raise UsageRuntimeError(
            "heartbeat-store",
            f"{store_name} has no codec to sign and read its rows with",
            "hand the store to a dispatcher (which gives it one at start), or build it with "
            "codec=HeartbeatCodec(HeartbeatJobs([...]), SigningKey(secret))",
        )
    return codec


def require_genuine(heartbeat: object) -> Heartbeat:
    """``heartbeat`` itself if the runtime minted it; else :class:`TypeError` naming the two
    places that mint one. Every store calls it before storing anything."""
    if not isinstance(heartbeat, Heartbeat):
        raise TypeError(
            f"a heartbeat store holds Heartbeats, got {type(heartbeat).__name__}: {heartbeat!r}"
        )
    if not is_genuine(heartbeat):
        raise TypeError(
            f"refusing a forged heartbeat {heartbeat.id!r}: only JobContext.publish (from an "
            "orchestrator) and JobDispatcher.schedule_heartbeat mint a Heartbeat"
        )
    return heartbeat


class ChangeListeners:
    """The listeners of one store, told of each head change; one that raises is logged and the
    others still run."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def add(self, listener: Callable[[], None]) -> Callable[[], None]:
        if not callable(listener):
            raise TypeError(f"a change listener must be callable, got {listener!r}")
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def notify(self) -> None:
        for listener in tuple(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("a heartbeat store's change listener raised; the others still run")


class InMemoryHeartbeatStore:
    """The schedule in this process's memory: fast, and gone at exit.

    Fixed-cadence schedules are re-published by boot code at every start; a schedule a flow
    adapts at run time and that must survive a restart belongs in a durable store
    (:class:`~nucleo_trio.heartbeat.SQLiteHeartbeatStore`).
    """

    def __init__(self) -> None:
        self._entries: dict[str, Heartbeat] = {}
        self._order: list[tuple[float, str]] = []  # (run_at, id), kept sorted
        self._listeners = ChangeListeners()

    def _head(self) -> tuple[float, str] | None:
        return self._order[0] if self._order else None

    def _put(self, heartbeat: Heartbeat) -> None:
        self._entries[heartbeat.id] = heartbeat
        bisect.insort(self._order, (heartbeat.run_at, heartbeat.id))

    def _take(self, heartbeat_id: str) -> Heartbeat | None:
        heartbeat = self._entries.pop(heartbeat_id, None)
        if heartbeat is not None:
            self._order.remove((heartbeat.run_at, heartbeat.id))
        return heartbeat

    def _told(self, head: tuple[float, str] | None) -> None:
        if self._head() != head:
            self._listeners.notify()

    async def enqueue(self, heartbeat: Heartbeat) -> Heartbeat | None:
        """Store ``heartbeat``, replacing any under its id; answer the one it displaced, or
        ``None``. A heartbeat the runtime did not mint is a :class:`TypeError`."""
        require_genuine(heartbeat)
        head = self._head()
        displaced = self._take(heartbeat.id)
        self._put(heartbeat)
        self._told(head)
        return displaced

    async def cancel(self, heartbeat_id: str) -> Heartbeat | None:
        """Remove the heartbeat ``heartbeat_id`` and answer it; ``None`` when there is none."""
        head = self._head()
        removed = self._take(heartbeat_id)
        self._told(head)
        return removed

    async def poll_due(self, now: float) -> Heartbeat | None:
        """Remove and answer the earliest heartbeat whose run instant (epoch seconds) is at or
        before ``now``; ``None`` when none is due."""
        head = self._head()
        if head is None or head[0] > now:
            return None
        taken = self._take(head[1])
        self._told(head)
        return taken

    async def peek_next_run_at(self) -> float | None:
        """The earliest run instant held, in epoch seconds, or ``None`` for an empty
        schedule."""
        head = self._head()
        return None if head is None else head[0]

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        """Store ``heartbeat`` only if no heartbeat holds its id; answer whether it was stored.
        A heartbeat the runtime did not mint is a :class:`TypeError`."""
        require_genuine(heartbeat)
        if heartbeat.id in self._entries:
            return False
        head = self._head()
        self._put(heartbeat)
        self._told(head)
        return True

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every change of the schedule's head; answers a function that
        unregisters it. A listener that raises is logged and the others still run."""
        return self._listeners.add(listener)

    async def inspect(self) -> tuple[Heartbeat, ...]:
        """Every heartbeat held, in the order they fall due (run instant, then id)."""
        return tuple(self._entries[heartbeat_id] for _, heartbeat_id in self._order)

    async def aclose(self) -> None:
        """Nothing to let go of: the store holds nothing open, and keeps working after it."""
        return None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<InMemoryHeartbeatStore {len(self._entries)} scheduled>"


def heartbeat_store_from(plugins: pluggy.PluginManager, config: HeartbeatConfig) -> HeartbeatStore:
    """The store the plugins provide for ``config.kind`` through ``nucleo_trio_heartbeat_store``
    (the first answer that is not ``None``).

    A kind nobody provides, or settings its provider refuses, is a :class:`ConfigError` naming
    the kind; an answer that is not a :class:`HeartbeatStore` is a
    :class:`~nucleo_trio.plugins.PluginError`.
    """
    try:
        store = plugins.hook.nucleo_trio_heartbeat_store(
            kind=config.kind, settings=dict(config.settings)
        )
    except (TypeError, ValueError, OSError, NucleoSystemError) as exc:
        raise ConfigError(
            f"dispatcher config: heartbeat store (kind {config.kind!r}) could not be built: {exc}"
        ) from exc
    if store is None:
        raise ConfigError(
            f"dispatcher config: no plugin provides the heartbeat store kind {config.kind!r}; "
            "built in: 'memory', 'sqlite'"
        )
    if not isinstance(store, HeartbeatStore):
        raise PluginError(
            f"the nucleo_trio_heartbeat_store hook answered {type(store).__name__} {store!r}, "
            "which is not a HeartbeatStore (enqueue, cancel, poll_due, peek_next_run_at, "
            "re_enqueue_if_absent, on_change, inspect, aclose)"
        )
    return store


def _settings_of(kind: str, settings: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse a setting the built-in kind does not know, naming it and the known ones."""
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        known = ", ".join(allowed) if allowed else "none"
        raise ConfigError(
            f"heartbeat store kind {kind!r}: unknown setting(s) {unknown}; known: {known}"
        )
