"""A heartbeat schedule shared by every worker that points at one Redis: each slot fires once.

:class:`RedisHeartbeatStore` satisfies :class:`~nucleo_trio.heartbeat.HeartbeatStore`. Give N
dispatchers (in as many processes, on as many machines) the same store settings and the same
schedule, and each slot of each heartbeat fires on exactly one of them.

**Claims.** :meth:`~RedisHeartbeatStore.poll_due` does not just take the due entry out: it
claims it, atomically, for this store (a token of its own), with a time to live on Redis's own
clock (``TIME``, never a worker's). The Heart then fires the slot and puts the recurrence's next
slot back with :meth:`~RedisHeartbeatStore.re_enqueue_if_absent`; that call records the claimed
slot as fired, lets go of the claim and stores the next slot, in one script. A slot with no
recurrence is recorded at the firing task's next poll or peek (the Heart comes back to the
store only after its fire). A worker that dies between the claim and the record (killed
mid-fire) leaves a claim that runs out: the next poll on any worker puts the slot back on the
schedule and one of them fires it. While a claim lives, no other worker can take the id, even
when someone rebinds it meanwhile.

**Fired slots.** Redis keeps, per heartbeat id, the latest run instant that fired. A slot at or
before it is never fired again: a poll that meets one moves a recurring heartbeat on to its
first slot after the mark, and drops a one-shot one, without firing either. This is what lets
every worker publish the same schedules at its start (``schedule_heartbeat`` with the same id,
anchor and recurrence): the rebinding re-anchors the entry, and the slots already fired are
skipped, so catch-up after all workers were down fires each missed slot once, back to back.

**Losing Redis.** Every operation is one script, sent by a trio system task that holds the
store's connection (one per run, ended by :meth:`~RedisHeartbeatStore.aclose`), done to the end
once called (a cancelled caller still gets its answer; its cancellation arrives at its next
checkpoint) and bounded by ``timeout``. A failure drops the connection, and the next operation
connects anew; it is a :class:`~nucleo_trio.errors.NucleoSystemError` that names Redis, its
address (without a password) and the operation, which the Heart logs before it asks again.
What this store owes Redis is kept until Redis has it: a fire not yet recorded, and the next
slot the Heart put back, are written at the next operation that reaches Redis, before anything
else, so a connection lost between a fire and its record neither loses the next slot nor fires
the slot again. A claim whose answer was lost with the connection is let go at the next
operation (its slot goes back on the schedule). A claim granted before Redis restarted gets a
whole TTL from the restart, so an outage is not counted against the worker that holds it. The
one duplicate this cannot rule out: a worker cut off from a Redis that stays up for longer than
``claim_ttl`` after it fired and before it recorded the fire is, to the others, a worker that
died, and they fire that slot again. ``claim_ttl`` is therefore both the delay before a crashed
worker's slot is fired by another and the longest partition that is ridden out without a
duplicate.

**Change listeners** hear the head changes this store makes at once, and those any other store
on the same keys makes through a pub/sub channel (each script that moves the head publishes on
``{prefix}:changed``), which a trio system task follows from the first registration inside a
run until :meth:`~RedisHeartbeatStore.aclose`; when that subscription comes back after losing
Redis, the listeners are told once, for what went unheard meanwhile. So a worker wakes for a
heartbeat another worker scheduled sooner, even if that worker stops before it falls due.
:meth:`~RedisHeartbeatStore.peek_next_run_at` also answers the instant the earliest claim runs
out, when that is sooner than the head, so a Heart wakes to take over a crashed worker's slot.

**Rows are data.** A row is written the way :class:`~nucleo_trio.heartbeat.SQLiteHeartbeatStore`
writes one, through the :class:`~nucleo_trio.heartbeat.HeartbeatCodec` the dispatcher hands the
store at start, as a JSON list of its :class:`~nucleo_trio.heartbeat.HeartbeatRow` values: the
job class by its registered name, input and scope guard as JSON that must read back equal, and
a signature over them under the key every worker holds. Anyone who can write the keys can
still delete or reorder the schedule, but not make a worker run a job it did not register, or
run one as another user: a row whose signature does not match is refused at its fire (a
``HeartbeatFireFailed``), is not recorded as fired, and is not put back.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs
import coredis
import coredis.retry
import trio

from nucleo_trio._clock import wait_holding_the_clock
from nucleo_trio._redact import redact_text, redact_url
from nucleo_trio.errors import NucleoSystemError
from nucleo_trio.heartbeat import (
    Heartbeat,
    HeartbeatCodec,
    RefusedHeartbeatRow,
    heartbeat_now,
)
from nucleo_trio.heartbeat.store import (
    ChangeListeners,
    adopt_codec,
    require_codec,
    require_genuine,
)

from . import heartbeat_scripts as scripts

__all__ = ["DEFAULT_CLAIM_TTL", "DEFAULT_PREFIX", "DEFAULT_TIMEOUT", "RedisHeartbeatStore"]

log = logging.getLogger("nucleo_trio_redis.heartbeat")

_COMPONENT: Final = "redis-heartbeat-store"

DEFAULT_PREFIX: Final = "nucleo-trio:heartbeats"
"""The key prefix when none is given: every key is ``{prefix}:<name>``."""

DEFAULT_CLAIM_TTL: Final = 30.0
"""Seconds a claim on a slot lives on Redis's clock before another worker may fire the slot."""

DEFAULT_TIMEOUT: Final = 5.0
"""Seconds one operation may take (connecting included) before it fails."""

_BACKOFF_FIRST: Final = 0.05
_BACKOFF_MOST: Final = 1.0

_Answer = TypeVar("_Answer")


@attrs.define
class _Held:
    """A slot this store claimed and has not recorded yet: whether it fired (``None`` until
    the Heart says), and the next slot to put back with the record."""

    heartbeat: Heartbeat
    fired: bool | None = None
    following: Heartbeat | None = None


class _Request:
    """One operation for the connection task: the work, and its answer or failure."""

    __slots__ = ("answer", "done", "failure", "work")

    def __init__(self, work: Callable[[coredis.Redis[str]], Awaitable[Any]]) -> None:
        self.work = work
        self.answer: Any = None
        self.failure: BaseException | None = None
        self.done = trio.Event()

    def fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.done.set()


def _only_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation, alone or in (nested) groups of nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(inner) for inner in exc.exceptions)
    return False


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"RedisHeartbeatStore: {what} must be a number of seconds, "
            f"got {type(value).__name__}: {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"RedisHeartbeatStore: {what} must be a positive, finite number of seconds, "
            f"got {value!r}"
        )
    return float(value)


def _redacted(url: str) -> str:
    """``url`` with its credentials (the userinfo's password, ``?password=``) masked as
    ``***``, for reprs and messages."""
    return redact_url(url)


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (coredis runs in task groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class RedisHeartbeatStore:
    """The heartbeat schedule in Redis at ``url``, shared by every store built on the same
    ``url`` and ``prefix``; see the module documentation for how each slot fires once.

    Choose it in a dispatcher's configuration with
    ``{"heartbeat": {"kind": "redis", "settings": {"url": "redis://host:6379/0"}}}``; the other
    settings are ``prefix`` (the keys' hash tag, :data:`DEFAULT_PREFIX`), ``claim_ttl``
    (:data:`DEFAULT_CLAIM_TTL`) and ``timeout`` (:data:`DEFAULT_TIMEOUT`). Its operations must
    be awaited inside a trio run, where a system task holds the store's connection and sends
    them one after the other; a connection that sat idle is checked with a ``PING`` first, so
    a Redis restart between two operations costs nothing but the reconnect. Its rows go through
    ``codec``; a dispatcher hands the store its own at start, so give one only to a store used on
    its own.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        timeout: float = DEFAULT_TIMEOUT,
        codec: HeartbeatCodec | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"RedisHeartbeatStore needs a Redis URL, got {url!r}")
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"RedisHeartbeatStore: the URL must start redis://, rediss:// or unix://, "
                f"got {_redacted(url)!r}"
            )
        if not isinstance(prefix, str) or not prefix.strip() or any(c in prefix for c in "{}"):
            raise ValueError(
                f"RedisHeartbeatStore: prefix must be a non-blank string without braces "
                f"(it becomes the keys' hash tag), got {prefix!r}"
            )
        self.url = url
        """The Redis URL as given, credentials included; reprs and messages mask the password."""
        self.prefix = prefix
        """The keys' hash tag: every key is ``{prefix}:<name>`` (default
        :data:`DEFAULT_PREFIX`)."""
        self.claim_ttl = _seconds(claim_ttl, "claim_ttl")
        """Seconds, on Redis's clock, a claim on a slot lives before another worker may fire
        the slot (default :data:`DEFAULT_CLAIM_TTL`)."""
        self.timeout = _seconds(timeout, "timeout")
        """Seconds one operation may take, connecting included (default
        :data:`DEFAULT_TIMEOUT`)."""
        tag = "{" + prefix + "}"
        self.keys: tuple[str, ...] = tuple(
            f"{tag}:{name}" for name in ("due", "entry", "claim", "until", "fired", "changed")
        )
        """The store's Redis names, in order: the ``due``, ``entry``, ``claim``, ``until`` and
        ``fired`` keys, and the ``changed`` pub/sub channel."""
        self._where = f"Redis at {_redacted(url)}"
        self._codec = None if codec is None else adopt_codec(self._name, None, codec)
        self._token = secrets.token_hex(8)
        self._held: dict[str, _Held] = {}
        self._suspect = False  # a poll failed: Redis may hold a claim of ours we never heard of
        self._listeners = ChangeListeners()
        self._closed = False
        self._listening: trio.lowlevel.TrioToken | None = None
        self._listen_scope = trio.CancelScope()
        self._connection_run: trio.lowlevel.TrioToken | None = None
        self._connection_scope = trio.CancelScope()
        self._requests: trio.MemorySendChannel[_Request]
        self._queued: trio.MemoryReceiveChannel[_Request]

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RedisHeartbeatStore:
        """The store for a configuration's ``heartbeat.settings``: ``url`` (required),
        ``prefix``, ``claim_ttl``, ``timeout``. An unknown or missing setting is a
        :class:`ValueError` naming it."""
        known = ("url", "prefix", "claim_ttl", "timeout")
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ValueError(
                f"heartbeat store kind 'redis': unknown setting(s) {unknown}; "
                f"known: {', '.join(known)}"
            )
        if "url" not in settings:
            raise ValueError("heartbeat store kind 'redis' needs the setting 'url'")
        return cls(
            settings["url"],
            prefix=settings.get("prefix", DEFAULT_PREFIX),
            claim_ttl=settings.get("claim_ttl", DEFAULT_CLAIM_TTL),
            timeout=settings.get("timeout", DEFAULT_TIMEOUT),
        )

    # -- the codec ------------------------------------------------------------------------------
    @property
    def codec(self) -> HeartbeatCodec | None:
        """The codec rows are signed and read with; ``None`` until a dispatcher hands one over
        (or one was given when built)."""
        return self._codec

    def use_codec(self, codec: HeartbeatCodec) -> None:
        """Sign and read rows with ``codec`` from now on. A second, different codec is a
        :class:`~nucleo_trio.errors.UsageValueError`; anything but a
        :class:`~nucleo_trio.heartbeat.HeartbeatCodec` is a :class:`TypeError`."""
        self._codec = adopt_codec(self._name, self._codec, codec)

    # -- the contract ---------------------------------------------------------------------------
    async def enqueue(self, heartbeat: Heartbeat) -> Heartbeat | None:
        """Store ``heartbeat`` as a signed row, replacing any under its id, and answer the one
        it displaced (``None`` when there was none). A heartbeat the runtime did not mint is a
        :class:`TypeError`; a failed round trip is a
        :class:`~nucleo_trio.errors.NucleoSystemError` naming Redis."""
        row = self._row(require_genuine(heartbeat))
        self._require_open()
        old, changed = await self._script(
            scripts.ENQUEUE,
            [heartbeat.id, repr(heartbeat.run_at), row],
            f"storing heartbeat {heartbeat.id!r}",
        )
        self._told(changed)
        return self._restored(old, "displaced") if old else None

    async def cancel(self, heartbeat_id: str) -> Heartbeat | None:
        """Remove the heartbeat ``heartbeat_id``, and any worker's claim on its slot, and
        answer it; ``None`` when there was none."""
        if not isinstance(heartbeat_id, str):
            raise TypeError(f"a heartbeat id is a string, got {type(heartbeat_id).__name__}")
        self._require_open()
        self._require_codec()
        old, changed = await self._script(
            scripts.CANCEL, [heartbeat_id], f"cancelling heartbeat {heartbeat_id!r}"
        )
        self._told(changed)
        return self._restored(old, "cancelled") if old else None

    async def poll_due(self, now: float) -> Heartbeat | None:
        """Claim and answer the most overdue heartbeat due at or before ``now`` (epoch
        seconds), or ``None`` when none is. The claim keeps other workers off the slot for
        :attr:`claim_ttl` seconds; a slot that already fired elsewhere is skipped (moved on to
        its next slot, or dropped) rather than answered. A claim another worker let run out is
        put back on the schedule first, with a warning in the log."""
        if isinstance(now, bool) or not isinstance(now, int | float):
            raise TypeError(f"poll_due needs an instant in epoch seconds, got {now!r}")
        if not math.isfinite(now):
            raise ValueError(f"poll_due needs a finite instant, got {now!r}")
        self._require_codec()  # before a slot is claimed that could not be read
        await self._catch_up()
        while True:
            try:
                answer = await self._script(
                    scripts.POLL,
                    [repr(float(now)), str(max(1, round(self.claim_ttl * 1000)))],
                    "polling",
                )
            except NucleoSystemError:
                self._suspect = True
                raise
            heartbeat_id, run_at, row, mark, changed, *recovered = answer
            self._told(changed)
            for index in range(0, len(recovered), 3):
                log.warning(
                    "heartbeat %r: the claim on its slot at %s ran out before its fire was "
                    "recorded (the worker holding it died or lost %s); %s",
                    recovered[index],
                    recovered[index + 1],
                    self._where,
                    "the slot is due again"
                    if recovered[index + 2]
                    else "the id was rebound meanwhile, and the rebinding stands",
                )
            if not heartbeat_id:
                return None
            heartbeat = self._restored(row, "due")
            if heartbeat is None or heartbeat.id != heartbeat_id:
                heartbeat = self._require_codec().refused(
                    heartbeat_id,
                    "the row is unreadable"
                    if heartbeat is None
                    else f"the row kept under this id is the heartbeat {heartbeat.id!r}'s",
                    float(run_at),
                )
            held = _Held(heartbeat)
            self._held[heartbeat.id] = held
            if issubclass(heartbeat.job_class, RefusedHeartbeatRow):
                # The Heart sees it fail; it is not a fire, so no mark is recorded (a forged
                # instant must not silence the real heartbeat), and nothing goes back.
                held.fired = False
                return heartbeat
            if mark and float(mark) >= heartbeat.run_at:
                held.fired = False
                held.following = _after_mark(heartbeat, float(mark))
                log.info(
                    "heartbeat %r: its slot at %s already fired (up to %s); %s",
                    heartbeat.id,
                    heartbeat.run_at,
                    mark,
                    "dropped"
                    if held.following is None
                    else f"moved on to {held.following.run_at!r}",
                )
                await self._settle(heartbeat.id, held)
                continue
            return heartbeat

    async def peek_next_run_at(self) -> float | None:
        """The earliest run instant held (epoch seconds), or the instant the earliest claim
        runs out when that is sooner; ``None`` for an empty schedule with no claims."""
        await self._catch_up()
        head, remaining = await self._script(scripts.PEEK, [], "reading the next run instant")
        candidates = [] if not head else [float(head)]
        if remaining:
            candidates.append(heartbeat_now() + max(0.0, float(remaining)) / 1000)
        return min(candidates) if candidates else None

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        """Store the next slot ``heartbeat`` only if its id is free; answer whether it was
        stored. For a slot this store claimed, the same script records the claimed slot as
        fired and lets go of the claim; what cannot reach Redis now is written at the next
        operation that does."""
        row = self._row(require_genuine(heartbeat))
        held = self._held.get(heartbeat.id)
        if held is None:
            await self._catch_up()
            _, stored, changed = await self._script(
                scripts.SETTLE,
                [heartbeat.id, "", "0", repr(heartbeat.run_at), row],
                f"re-enqueuing heartbeat {heartbeat.id!r}",
            )
            self._told(changed)
            return bool(stored)
        # Written down before anything can fail: the record is owed until Redis has it.
        held.fired = heartbeat.run_at != held.heartbeat.run_at
        held.following = heartbeat
        await self._catch_up(but=heartbeat.id)
        return await self._settle(heartbeat.id, held)

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every change of the schedule's head this store makes and,
        once registered inside a trio run, after every one another worker's store makes (heard
        on the ``changed`` channel) and after the subscription comes back from a lost Redis.
        Answers an unregister."""
        unregister = self._listeners.add(listener)
        self._start_listening()
        return unregister

    async def inspect(self) -> tuple[Heartbeat, ...]:
        """Every heartbeat on the schedule, in the order they fall due; slots claimed but not
        yet recorded are not listed. A row whose signature fails is listed as the stand-in that
        fails its fire; one that is not a stored row at all is left out and logged."""
        self._require_open()
        self._require_codec()
        rows = await self._script(scripts.INSPECT, [], "reading the schedule")
        restored = (self._restored(row, "listed") for row in rows)
        return tuple(heartbeat for heartbeat in restored if heartbeat is not None)

    async def aclose(self) -> None:
        """Record what this store still owes Redis (fires not yet recorded, next slots), then
        refuse further use. When Redis cannot be reached the loss is logged, naming each slot:
        their claims run out and another worker fires them."""
        if self._closed:
            return
        try:
            await self._catch_up()
        except NucleoSystemError as exc:
            log.error(
                "closing the Redis heartbeat store: %s; the slots %s stay claimed until their "
                "claims run out (claim_ttl %s s), then another worker fires them (a second "
                "time for those this worker had fired)",
                exc,
                sorted(
                    f"{held.heartbeat.id}@{held.heartbeat.run_at!r}" for held in self._held.values()
                ),
                self.claim_ttl,
            )
        finally:
            self._closed = True
            self._listen_scope.cancel()
            self._connection_scope.cancel()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<RedisHeartbeatStore {_redacted(self.url)} prefix={self.prefix!r} {state}>"

    # -- what is owed ---------------------------------------------------------------------------
    async def _catch_up(self, *, but: str | None = None) -> None:
        """Before anything else: let go of claims a lost answer left behind, and record every
        slot this store claimed and the Heart has moved past (so it fired).

        Only the firing task's operations (poll, peek, re-enqueue) and :meth:`aclose` do this:
        they run one after the other, so a slot is never recorded while the Heart is still
        between its claim and its fire. The intake task's operations (enqueue, cancel,
        inspect), which may run meanwhile, leave the claims alone."""
        self._require_open()
        if self._suspect:
            *released, changed = await self._script(
                scripts.RELEASE_MINE,
                list(self._held),
                "letting go of claims whose answers were lost",
            )
            self._suspect = False
            self._told(changed)
            for heartbeat_id in released:
                log.warning(
                    "heartbeat %r: a claim whose answer was lost with %s is let go; the slot "
                    "is due again",
                    heartbeat_id,
                    self._where,
                )
        for heartbeat_id, held in list(self._held.items()):
            if heartbeat_id == but:
                continue
            if held.fired is None:
                held.fired = True
            await self._settle(heartbeat_id, held)

    async def _settle(self, heartbeat_id: str, held: _Held) -> bool:
        """Record ``held`` in Redis and forget it here; answers whether its next slot was
        stored."""
        stored = await self._record(
            heartbeat_id, repr(held.heartbeat.run_at), bool(held.fired), held.following
        )
        if self._held.get(heartbeat_id) is held:
            del self._held[heartbeat_id]
        return stored

    async def _record(
        self, heartbeat_id: str, claimed_at: str, fired: bool, following: Heartbeat | None
    ) -> bool:
        """One settle script: the claimed slot's fire (when it fired), the end of the claim,
        and the next slot when the id is free. Answers whether the next slot was stored."""
        arguments = [
            heartbeat_id,
            claimed_at,
            "1" if fired else "0",
            "" if following is None else repr(following.run_at),
            "" if following is None else self._row(following),
        ]
        owned, stored, changed = await self._script(
            scripts.SETTLE, arguments, f"recording the fire of heartbeat {heartbeat_id!r}"
        )
        self._told(changed)
        if fired and not owned:
            log.warning(
                "heartbeat %r: the claim on its slot at %s ran out before this worker recorded "
                "its fire; another worker may have fired it too (raise claim_ttl above %s s)",
                heartbeat_id,
                claimed_at,
                self.claim_ttl,
            )
        if following is not None and not stored:
            log.info(
                "heartbeat %r was rebound or is held elsewhere; its next slot at %r is not "
                "stored over it",
                heartbeat_id,
                following.run_at,
            )
        return bool(stored)

    # -- the other workers' changes ----------------------------------------------------------
    def _start_listening(self) -> None:
        """Subscribe to the ``changed`` channel in a trio system task, once per run; outside a
        run there is nothing to wake, so nothing starts."""
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return
        if self._closed or self._listening is token:
            return
        self._listening = token
        self._listen_scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(self._listen_in_system_task)

    async def _listen_in_system_task(self) -> None:
        try:
            with self._listen_scope:
                await self._listen()
        except BaseException as exc:  # noqa: BLE001 - a system task's crash ends the whole run
            if isinstance(exc, trio.Cancelled):
                raise
            if isinstance(exc, BaseExceptionGroup):
                cancelled, rest = exc.split(trio.Cancelled)
                if rest is None and cancelled is not None:
                    raise cancelled from None
            log.error(
                "%r: the subscription to other workers' changes failed; this worker now hears "
                "of them only at its own wake-ups",
                self,
                exc_info=exc,
            )

    async def _listen(self) -> None:
        """Tell the listeners of each head change another store announces; resubscribe with a
        backoff when Redis goes away, and tell them once when it is back (what changed
        meanwhile went unheard)."""
        backoff = _BACKOFF_FIRST
        heard_before = False
        while True:
            try:
                client: coredis.Redis[str] = coredis.Redis.from_url(
                    self.url, decode_responses=True, retry_policy=coredis.retry.NoRetryPolicy()
                )
                # No retry policy: coredis would resubscribe on its own, unseen, and the
                # listeners would never hear that Redis came back.
                async with (
                    client,
                    client.pubsub(
                        channels=[self.keys[5]], ignore_subscribe_messages=True, retry_policy=None
                    ) as pubsub,
                ):
                    backoff = _BACKOFF_FIRST
                    if heard_before:
                        self._listeners.notify()
                    heard_before = True
                    async for message in pubsub:
                        if message.get("data") != self._token:
                            self._listeners.notify()
            except BaseExceptionGroup as group:
                cancelled, _ = group.split(trio.Cancelled)
                if cancelled is not None:
                    raise cancelled from None
                log.debug(
                    "%r: the subscription ended (%s); resubscribing", self, redact_text(repr(group))
                )
            except Exception as exc:  # noqa: BLE001 - resubscribing is the whole answer
                log.debug(
                    "%r: the subscription ended (%s); resubscribing", self, redact_text(repr(exc))
                )
            await trio.sleep(backoff)
            backoff = min(_BACKOFF_MOST, backoff * 2)

    # -- plumbing -------------------------------------------------------------------------------
    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _told(self, changed: object) -> None:
        if changed:
            self._listeners.notify()

    @property
    def _name(self) -> str:
        return f"RedisHeartbeatStore({_redacted(self.url)!r}, prefix={self.prefix!r})"

    def _require_codec(self) -> HeartbeatCodec:
        return require_codec(self._name, self._codec)

    def _row(self, heartbeat: Heartbeat) -> str:
        return json.dumps(list(self._require_codec().to_row(heartbeat)), allow_nan=False)

    def _restored(self, row: str, what: str) -> Heartbeat | None:
        """The heartbeat ``row`` gives (a refused row's stand-in included, which fails its
        fire); ``None`` only for a row that is not a JSON list with an id, logged."""
        codec = self._require_codec()
        try:
            values = json.loads(row)
            if not isinstance(values, list):
                raise TypeError(f"a stored row is a JSON list, got {type(values).__name__}")
            return codec.from_row(values)
        except (NucleoSystemError, ValueError, TypeError) as exc:
            log.error("a heartbeat (%s) could not be restored from %s: %s", what, self._where, exc)
            return None

    async def _script(self, source: str, arguments: Sequence[str], doing: str) -> Any:
        """Run one script over the store's keys; answered even if the caller is cancelled."""

        async def run(client: coredis.Redis[str]) -> Any:
            script = client.register_script(source)
            return await script(keys=list(self.keys), args=[self._token, *arguments])

        return await self._call(run, doing)

    async def _call(
        self, work: Callable[[coredis.Redis[str]], Awaitable[_Answer]], doing: str
    ) -> _Answer:
        """``work`` done by the connection task on its connection, within ``timeout``;
        answered even if the caller is cancelled meanwhile (shielded), so a script once sent is
        answered and the store always knows what it holds."""
        request = _Request(work)
        self._start_connection()
        self._requests.send_nowait(request)
        with trio.CancelScope(shield=True):
            await wait_holding_the_clock(request.done)
        if request.failure is not None:
            exc = _leaf(request.failure)
            if isinstance(exc, trio.TooSlowError):
                detail = f"no answer within {self.timeout} s"
            else:
                detail = f"{type(exc).__name__}: {redact_text(str(exc))}"
            raise NucleoSystemError(
                _COMPONENT, f"{self._where}: {doing} failed: {detail}", exc
            ) from exc
        answer: _Answer = request.answer
        return answer

    def _start_connection(self) -> None:
        """Start the task that holds this store's connection, once per trio run (again if it
        ended)."""
        token = trio.lowlevel.current_trio_token()
        if self._connection_run is token:
            return
        self._connection_run = token
        self._connection_scope = trio.CancelScope()
        self._requests, self._queued = trio.open_memory_channel[_Request](math.inf)
        trio.lowlevel.spawn_system_task(self._connection_in_system_task, self._queued)

    async def _connection_in_system_task(self, queued: trio.MemoryReceiveChannel[_Request]) -> None:
        pending: list[_Request] = []
        try:
            with self._connection_scope:
                await self._serve(queued, pending)
        except BaseException as exc:  # noqa: BLE001 - a system task's crash ends the whole run
            if not _only_cancelled(exc):
                log.error("%r: the connection task failed", self, exc_info=exc)
        finally:
            # Whatever is still queued or under way is answered: no caller waits forever.
            self._connection_run = None
            while True:
                try:
                    pending.append(queued.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
            for request in pending:
                if not request.done.is_set():
                    request.fail(RuntimeError(f"{self!r} is closed"))

    async def _serve(
        self, queued: trio.MemoryReceiveChannel[_Request], pending: list[_Request]
    ) -> None:
        """Answer the requests in order over one connection. A connection that sat idle is
        first asked for a ``PING``; when that fails nothing of the request was sent, so the
        connection is replaced and the request goes out on the new one. Any other failure
        answers the request it hit and drops the connection (its state is unknown); the next
        request connects anew."""
        while True:
            if not pending:
                pending.append(await queued.receive())
            stale = False
            try:
                client: coredis.Redis[str] = coredis.Redis.from_url(
                    self.url, decode_responses=True, retry_policy=coredis.retry.NoRetryPolicy()
                )
                async with client:
                    idle = False
                    while True:
                        request = pending[0]
                        if idle and not await _answers_ping(client, self.timeout):
                            stale = True
                            break
                        with trio.fail_after(self.timeout):
                            request.answer = await request.work(client)
                        request.done.set()
                        pending.pop(0)
                        try:
                            pending.append(queued.receive_nowait())
                            idle = False
                        except trio.WouldBlock:
                            pending.append(await queued.receive())
                            idle = True
            except BaseException as exc:  # noqa: BLE001 - sorted below
                if _only_cancelled(exc):
                    raise
                if pending and not stale:
                    pending.pop(0).fail(exc)


async def _answers_ping(client: coredis.Redis[str], within: float) -> bool:
    """Whether an idle connection still answers within ``within`` seconds (a restarted Redis
    closed it meanwhile)."""
    try:
        with trio.fail_after(within):
            await client.ping()
    except Exception:  # noqa: BLE001 - any failure means: connect anew
        return False
    return True


def _after_mark(heartbeat: Heartbeat, mark: float) -> Heartbeat | None:
    """The heartbeat's first slot after ``mark``, or ``None`` when it does not recur."""
    recurrence = heartbeat.recurrence
    if recurrence is None:
        return None
    instant = heartbeat.run_at
    while instant <= mark:
        instant = recurrence.next_after(instant)
    return heartbeat.next(instant)
