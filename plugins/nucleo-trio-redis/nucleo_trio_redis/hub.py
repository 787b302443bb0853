"""The hub: one Redis connection, the accounts it made, and the task that settles their leases.

A :class:`RedisAccounts` hub makes shared accounts (:meth:`~RedisAccounts.token_bucket`,
:meth:`~RedisAccounts.elastic_window`, :meth:`~RedisAccounts.counting_gate`) and runs one task
that settles every account's lease with Redis in one Lua call: when an account finds its lease
short (an ask noted by ``fits``), when Redis names the instant a refused need fits, when another
worker's give-back is announced on ``{namespace}:wake``, and every third of ``lease_ttl`` while
it holds anything (the renewal that keeps a live worker's permits). Nothing polls faster than
that: a worker short on an account that only an event can help waits for the wake-up, with a
keep-alive of its reservation every half ``reservation_ttl``.

Run it for the life of the dispatcher that uses its accounts::

    async with RedisAccounts("redis://127.0.0.1:6379/0", worker="w1") as redis:
        bucket = redis.token_bucket("gpt", rpm=600, tpm=60_000, burst=20)
        async with open_dispatcher() as dispatcher:
            ...

or ``await nursery.start(redis.run)``. Leaving gives the unused leases back. A hub whose run is
never started starts itself in a trio system task the first time one of its accounts is asked
inside a run (the path of accounts built from configuration); :meth:`~RedisAccounts.aclose`
stops it and gives its leases back (the dispatcher that built such an account calls it when it
stops), and otherwise the leases go back when the run ends.

Losing Redis (a refused connection, a timeout, a restart) drops every lease at once (a lease
may expire before Redis answers again, and a restarted Redis forgot it), so a shared account
never grants what Redis did not give it. With ``on_redis_lost="refuse"`` every ask raises
:class:`~nucleo_trio_redis.RedisUnavailableError` naming Redis and the account; with
``"local_share"`` the account grants from its local share of the quota. The hub reconnects
with a backoff up to one second; the first settle that lands recovers every account.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import coredis
import coredis.exceptions
import coredis.retry
import trio

from nucleo_trio._redact import redact_text

from ._checks import check_name, check_seconds, check_share, check_url, redact
from ._scripts import SETTLE
from .accounts import (
    SharedAccount,
    SharedCountingGate,
    SharedElasticWindow,
    SharedTokenBucket,
)

__all__ = ["RedisAccounts"]

_A = TypeVar("_A", bound=SharedAccount)

log = logging.getLogger("nucleo_trio_redis")

_LOST = (
    coredis.exceptions.ConnectionError,
    coredis.exceptions.BusyLoadingError,
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    TimeoutError,
)
_BACKOFF_FIRST = 0.05
_BACKOFF_MOST = 1.0


class RedisAccounts:
    """One Redis, the shared accounts on it, and the task that keeps their leases.

    ``url`` is a ``redis://``, ``rediss://`` or ``unix://`` URL; ``namespace`` the hash tag
    every key of these accounts shares (``{namespace}:<account>:...``), so one script can settle
    them together, on a cluster too; ``worker`` names this process in the holders' records, the
    grant log and status rows (default: host, pid and a random suffix). ``lease_ttl`` is how
    long a lease and a gate's permits live without renewal, so a dead worker's permits come
    back within it; ``reservation_ttl`` bounds a waiting worker's place in Redis's line
    (default ``lease_ttl``). ``on_redis_lost`` says what an account does while Redis is out of
    reach: ``"refuse"`` (every ask raises
    :class:`~nucleo_trio_redis.RedisUnavailableError`) or ``"local_share"`` (it grants from a
    local stand-in holding ``local_share`` of the quota, which starts with nothing to give;
    give each of N workers ``1/N`` and together they stay within the quota; what it granted is
    paid back to Redis when Redis answers again). ``timeout`` bounds one round trip and one
    connect. The TTLs are the hub's, the same for every account it makes: accounts that need
    different TTLs need a hub each (each account built from configuration has its own hub, so
    there the TTLs are set per account).
    ``autostart=False`` keeps a hub that is never run from starting itself in a system task.
    ``redis_clock`` is for tests only: the instant (seconds) the script reads instead of Redis's
    ``TIME``, so that a test can drive the shared arithmetic deterministically; every worker
    sharing the accounts must then use the same clock.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "nucleo",
        worker: str | None = None,
        lease_ttl: float = 10.0,
        reservation_ttl: float | None = None,
        on_redis_lost: str = "refuse",
        local_share: float | None = None,
        timeout: float = 2.0,
        autostart: bool = True,
        redis_clock: Callable[[], float] | None = None,
    ) -> None:
        owner = type(self).__name__
        self.url = check_url(owner, url)
        """The Redis URL as given, credentials included; show :attr:`safe_url` instead."""
        self.namespace = check_name(owner, "namespace", namespace)
        """The hash tag every key of these accounts starts with (default ``"nucleo"``)."""
        self.worker = (
            check_name(owner, "worker", worker)
            if worker is not None
            else f"{socket.gethostname().split('.')[0]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        """This process's name in Redis's holder records, the grant log and status rows; by
        default the short host name, the pid and a random suffix."""
        self.lease_ttl = check_seconds(owner, "lease_ttl", lease_ttl, minimum=0.0)
        """Seconds a lease, and a gate's permits, live in Redis without renewal (default 10.0);
        the hub renews them every third of it."""
        self.reservation_ttl = (
            self.lease_ttl
            if reservation_ttl is None
            else check_seconds(owner, "reservation_ttl", reservation_ttl)
        )
        """Seconds a waiting worker keeps its place in Redis's line without asking again
        (default: ``lease_ttl``)."""
        if on_redis_lost not in ("refuse", "local_share"):
            raise ValueError(
                f"{owner}: on_redis_lost must be 'refuse' or 'local_share', got {on_redis_lost!r}"
            )
        self.on_redis_lost = on_redis_lost
        """What an account does while Redis is out of reach: ``"refuse"`` (the default) or
        ``"local_share"``."""
        self.local_share: float | None = None
        """The fraction of each quota an account grants alone while Redis is lost."""
        if on_redis_lost == "local_share":
            if local_share is None:
                raise ValueError(
                    f"{owner}: on_redis_lost='local_share' needs local_share, the fraction of "
                    "each quota this worker may grant alone (1/N for N workers)"
                )
            self.local_share = check_share(owner, "local_share", local_share)
        elif local_share is not None:
            raise ValueError(
                f"{owner}: local_share is only read with on_redis_lost='local_share', "
                f"not {on_redis_lost!r}"
            )
        self.lease_period = min(self.lease_ttl / 3, 1.0)
        """Seconds of use a lease is sized for (a third of ``lease_ttl``, at most one)."""
        self.timeout = check_seconds(owner, "timeout", timeout)
        """Seconds one round trip, or one connect, may take before Redis counts as lost
        (default 2.0)."""
        self.accounts: dict[str, SharedAccount] = {}
        """The accounts this hub made, by name; the hub settles every one of them."""
        self.round_trips = 0
        """Settles sent to Redis (one round trip each), for measuring."""
        self._poke: trio.Event | None = None
        self._running = False
        self._live = False  # a settling task runs, or a system task was spawned to be one
        self._scope: trio.CancelScope | None = None  # the settling task's, for aclose
        self._ended = trio.Event()  # set when the settling task has given back and ended
        # settle_now: the calls are numbered; a settle begun after call n answers every call
        # up to n, and each answer wakes the callers to check their number.
        self._asked = 0
        self._answered = 0
        self._answer = trio.Event()
        self._auto: trio.lowlevel.TrioToken | None = None  # the run it started itself in
        if not isinstance(autostart, bool):
            raise TypeError(f"{owner}: autostart must be a bool, got {autostart!r}")
        self._explicit = not autostart  # its owner runs it: it never starts itself
        if redis_clock is not None and not callable(redis_clock):
            raise TypeError(
                f"{owner}: redis_clock must be callable or None, got {type(redis_clock).__name__}"
            )
        self._redis_clock = redis_clock
        self._script_sha: str | None = None
        self._epoch: str | None = None  # the namespace's epoch as this hub last saw it
        self._nursery_cm: Any = None
        self._nursery: trio.Nursery | None = None

    @property
    def safe_url(self) -> str:
        """The URL fit to show: its userinfo's password and its credential-like query values
        (``?password=``) masked as ``***``. Every repr, message and status row uses it."""
        return redact(self.url)

    @property
    def epoch_key(self) -> str:
        """The key that tells a Redis which lost its data from one that kept it."""
        return f"{{{self.namespace}}}:epoch"

    @property
    def wake_channel(self) -> str:
        """The pub/sub channel give-backs and expiries are announced on."""
        return f"{{{self.namespace}}}:wake"

    def __repr__(self) -> str:
        return (
            f"<RedisAccounts {self.safe_url} namespace={self.namespace!r} worker={self.worker!r}>"
        )

    # -- the accounts -------------------------------------------------------------------------------
    def _add(self, account: _A) -> _A:
        name = account.limiter_name
        if name in self.accounts:
            raise ValueError(
                f"{self!r}: an account named {name!r} already exists on this hub; shared "
                "accounts are found by name, so two would share one quota"
            )
        self.accounts[name] = account
        if self._poke is not None:
            self._poke.set()  # running: settle the newcomer in
        return account

    def token_bucket(
        self,
        name: str,
        *,
        rpm: int,
        tpm: int,
        burst: float | None = None,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> SharedTokenBucket:
        """A :class:`~nucleo_trio_redis.SharedTokenBucket` named ``name`` (one per name per
        namespace across every worker): ``rpm`` requests and ``tpm`` tokens a minute, at most
        ``burst`` requests at once. ``lease=False`` takes every grant with its own round trip;
        ``lease_max`` caps the lease in requests (default an eighth of the burst);
        ``grant_log`` appends every take and return to the stream
        :attr:`~nucleo_trio_redis.SharedAccount.grant_log_key`."""
        bucket = SharedTokenBucket(
            self,
            name,
            rpm=rpm,
            tpm=tpm,
            burst=burst,
            lease=lease,
            lease_max=lease_max,
            grant_log=grant_log,
        )
        return self._add(bucket)

    def elastic_window(
        self,
        name: str,
        *,
        max_requests: int,
        window: float,
        max_throttle: float = 9.0,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> SharedElasticWindow:
        """A :class:`~nucleo_trio_redis.SharedElasticWindow`: at most ``max_requests`` in any
        ``window`` seconds (stretched by the shared throttle); the lease options as for
        :meth:`token_bucket`, ``lease_max`` in requests."""
        account = SharedElasticWindow(
            self,
            name,
            max_requests=max_requests,
            window=window,
            max_throttle=max_throttle,
            lease=lease,
            lease_max=lease_max,
            grant_log=grant_log,
        )
        return self._add(account)

    def counting_gate(
        self,
        name: str,
        capacity: int,
        *,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> SharedCountingGate:
        """A :class:`~nucleo_trio_redis.SharedCountingGate` of ``capacity`` permits; the permits
        a worker holds live ``lease_ttl`` seconds unless renewed (every third of it)."""
        gate = SharedCountingGate(
            self, name, capacity, lease=lease, lease_max=lease_max, grant_log=grant_log
        )
        return self._add(gate)

    # -- running ------------------------------------------------------------------------------------
    def poke(self) -> None:
        """Ask the settling task to settle now (an account's lease ran short, a report waits).

        Inside a trio run where the hub was never started, this starts it in a system task."""
        if self._poke is not None:
            self._poke.set()
            return
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return  # outside a run: the first ask inside one starts it
        if self._running or self._explicit or self._auto is token:
            return  # running, run by its owner, or already started in this run
        self._auto = token
        self._live = True
        trio.lowlevel.spawn_system_task(self._run_in_system_task)

    async def _run_in_system_task(self) -> None:
        if self._explicit:  # closed, or run by its owner, before this task began
            if not self._running:
                self._live = False
                self._ended.set()
            return
        try:
            await self._run(trio.TASK_STATUS_IGNORED)
        except BaseException as exc:  # noqa: BLE001 - a system task's crash ends the whole run
            if isinstance(exc, trio.Cancelled):
                raise
            if isinstance(exc, BaseExceptionGroup):
                cancelled, rest = exc.split(trio.Cancelled)
                if rest is None:
                    return  # the run is ending: nothing left to settle
            log.error("%r: the settling task failed; its accounts refuse", self, exc_info=exc)
            for account in self.accounts.values():
                account._lose("the settling task failed")

    async def __aenter__(self) -> RedisAccounts:
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        try:
            await nursery.start(self.run)
        except BaseException:
            nursery.cancel_scope.cancel()
            await self._close_nursery()
            raise
        self._nursery = nursery
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The body's exception is not handed to the nursery, so it leaves as it was raised,
        # never wrapped in a group; only a failure of the settling task itself comes out of
        # the nursery, and then in its place (the body's exception is its context).
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        await self._close_nursery()

    async def _close_nursery(self) -> None:
        nursery_cm, self._nursery_cm, self._nursery = self._nursery_cm, None, None
        try:
            await nursery_cm.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            failure = _lone_failure(group)
            if failure is group:
                raise
        else:
            return
        raise failure  # outside the except block: it keeps its own context

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Settle the accounts' leases until cancelled or :meth:`aclose`, then give the unused
        leases back and return.

        Starts at once, connected or not: accounts refuse (or wait for the first settle) until
        Redis answers. A second run while one runs raises :class:`RuntimeError`."""
        self._explicit = True
        await self._run(task_status)

    async def aclose(self) -> None:
        """Stop the settling task, give the unused leases back, and return once they are back
        (or after ``timeout`` seconds, when Redis does not answer: the leases then expire
        within ``lease_ttl``). Safe to call more than once; on a hub that is not running it
        returns at once.

        This is how the life of a hub that started itself is tied to its owner's: the
        dispatcher that built an account from configuration closes the account's hub when it
        stops. Afterwards the hub never starts itself again; ``async with`` or :meth:`run`
        runs it again."""
        self._explicit = True
        if self._scope is not None:
            self._scope.cancel()
        if self._live:
            with trio.CancelScope(shield=True):
                await self._ended.wait()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._running = self._live = True
        self._ended = trio.Event()
        self._poke = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._listen)
                    task_status.started()
                    await self._settle_forever()
        finally:
            self._scope = None
            self._poke = None
            with trio.CancelScope(shield=True), trio.move_on_after(self.timeout):
                await self._give_back()
            self._running = self._live = False
            self._answer_up_to(self._asked)  # the give-back was the last settle there is
            self._ended.set()

    def _client(self) -> coredis.Redis[str]:
        client: coredis.Redis[str] = coredis.Redis.from_url(
            self.url,
            decode_responses=True,
            stream_timeout=self.timeout,
            connect_timeout=self.timeout,
            retry_policy=coredis.retry.NoRetryPolicy(),
        )
        return client

    async def _settle_forever(self) -> None:
        backoff = _BACKOFF_FIRST
        while True:
            try:
                async with self._client() as client:
                    while True:
                        await self._settle(client)
                        backoff = _BACKOFF_FIRST
                        await self._wait_for_reason()
            except BaseException as exc:  # noqa: BLE001 - sorted right below
                trouble = _connection_trouble(exc)
                if trouble is None:
                    raise
                self._lose(trouble)
                self._answer_up_to(self._asked)  # the answer is that Redis is out of reach
            await trio.sleep(backoff)
            backoff = min(_BACKOFF_MOST, backoff * 2)

    async def _wait_for_reason(self) -> None:
        now = trio.current_time()
        due = min(
            (account._next_settle(now) for account in self.accounts.values()), default=math.inf
        )
        assert self._poke is not None
        if due > now:
            with trio.move_on_at(due):
                await self._poke.wait()
        self._poke = trio.Event()

    def _lose(self, exc: BaseException) -> None:
        text = redact_text(str(exc))
        reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        if not any(account.lost for account in self.accounts.values()):
            log.warning("%r: Redis is out of reach (%s); shared accounts refuse", self, reason)
        for account in self.accounts.values():
            account._lose(reason)

    async def _settle(self, client: coredis.Redis[str], *, closing: bool = False) -> None:
        """One round trip: settle every account of the hub in one atomic script call."""
        accounts = list(self.accounts.values())
        asked = self._asked  # the settle_now calls this settle answers
        if not accounts:
            self._answer_up_to(asked)
            return
        now = trio.current_time()
        sent = time.monotonic()  # Redis stamps the leases no earlier than this
        plans = [account._settlement(now, closing) for account in accounts]
        keys: list[str] = []
        args: list[str] = [self.wake_channel, self._epoch or ""]
        args.append("" if self._redis_clock is None else repr(float(self._redis_clock())))
        for account, plan in zip(accounts, plans, strict=True):
            keys.extend(account.keys)
            args.extend(plan.args)
        keys.append(self.epoch_key)
        self.round_trips += 1
        try:
            reply = await self._eval(client, keys, args)
        except BaseException as exc:
            # Whether the call ran is unknown: what it reported (stamps, push-back) is reported
            # again next time. A cancelled call is no loss (the hub is closing, and its
            # give-back says what it holds, absolutely); anything else leaves the lease
            # unknown: drop it.
            for account, plan in zip(accounts, plans, strict=True):
                account._unsent(plan)
            if not closing and not _only_cancelled(exc):
                for account in accounts:
                    account._lose(f"a settle failed: {type(exc).__name__}")
                self._answer_up_to(asked)
            raise
        at = trio.current_time()
        was_lost = any(account.lost for account in accounts)
        rows = _rows(reply)
        if self._epoch is not None and rows[1] != self._epoch:
            log.warning(
                "%r: Redis lost its data (a new epoch); accounts start over carefully", self
            )
        self._epoch = str(rows[1])
        for account, plan, answer in zip(accounts, plans, rows[2:], strict=True):
            account._settled(plan, answer, at, sent)
        if was_lost:
            log.warning("%r: Redis answers again; shared accounts grant again", self)
        self._answer_up_to(asked)

    def _answer_up_to(self, asked: int) -> None:
        if asked > self._answered:
            self._answered = asked
            self._answer.set()
            self._answer = trio.Event()

    async def settle_now(self) -> None:
        """Settle every account with Redis now, and return once that settle has answered: the
        way to a fresh reading, since :meth:`SharedAccount.status
        <nucleo_trio_redis.SharedAccount.status>` shows the accounts as the last settle left
        them (see :meth:`SharedAccount.fresh_status <nucleo_trio_redis.SharedAccount.fresh_status>`).

        On a running hub it asks the settling task for a settle and waits for one that began
        after the call; on a hub that starts itself it starts it first. A hub that is not
        running and does not start itself (``autostart=False``, closed, or driven by
        :meth:`settle_once`) settles on a connection of its own, as :meth:`settle_once` does.
        Redis being out of reach raises nothing: the call returns after the failed attempt
        and each account's status says ``lost: <reason>``. One round trip when Redis answers;
        bound the wait with a cancel scope if Redis may be slow."""
        if not self._live:
            self.poke()  # a hub that starts itself starts now
        if not self._live:
            await self._settle_alone()
            return
        self._asked += 1
        mine = self._asked
        self.poke()
        while self._answered < mine:
            await self._answer.wait()

    async def settle_once(self) -> None:
        """Settle every account once on a connection of its own, for a hub its owner drives
        by hand (a script, a test) instead of running it: the needs the accounts noted are
        asked for, and nothing is given back afterwards. Such a hub never starts itself. A
        running hub refuses it with :class:`RuntimeError`; :meth:`settle_now` settles either
        kind. A connection that fails raises what the client raised."""
        if self._running:
            raise RuntimeError(
                f"{self!r} is running: its own task settles (await settle_now() asks it to)"
            )
        self._explicit = True
        async with self._client() as client:
            await self._settle(client)

    async def _settle_alone(self) -> None:
        """:meth:`settle_once`, with a lost Redis reported through the accounts, not raised."""
        try:
            await self.settle_once()
        except BaseException as exc:  # noqa: BLE001 - sorted right below
            trouble = _connection_trouble(exc)
            if trouble is None:
                raise
            self._lose(trouble)

    async def _eval(
        self, client: coredis.Redis[str], keys: Sequence[str], args: Sequence[str]
    ) -> Any:
        if self._script_sha is not None:
            try:
                return await client.evalsha(self._script_sha, keys=keys, args=args)
            except coredis.exceptions.NoScriptError:
                self._script_sha = None  # a restarted Redis forgot it
        self._script_sha = await client.script_load(SETTLE)
        return await client.evalsha(self._script_sha, keys=keys, args=args)

    async def _give_back(self) -> None:
        """At the end: one last settle that returns every unused lease."""
        if not self.accounts or any(account.lost for account in self.accounts.values()):
            return
        try:
            async with self._client() as client:
                await self._settle(client, closing=True)
        except BaseException as exc:  # noqa: BLE001 - sorted right below
            trouble = _connection_trouble(exc)
            if trouble is None and not isinstance(exc, coredis.exceptions.RedisError):
                raise
            log.warning(
                "%r: could not give the leases back (%s); they expire", self, redact_text(str(exc))
            )

    async def _listen(self) -> None:
        """Poke the settling task when another worker announces a give-back on the channel."""
        backoff = _BACKOFF_FIRST
        while True:
            try:
                async with (
                    self._client() as client,
                    client.pubsub(
                        channels=[self.wake_channel], ignore_subscribe_messages=True
                    ) as pubsub,
                ):
                    backoff = _BACKOFF_FIRST
                    async for message in pubsub:
                        data = message.get("data")
                        if not isinstance(data, str):
                            continue
                        account = self.accounts.get(data.removeprefix("want:"))
                        if account is None:
                            continue
                        if data.startswith("want:"):
                            account._wanted()
                        elif account._waits():
                            self.poke()
            except BaseExceptionGroup as group:
                cancelled, _ = group.split(trio.Cancelled)
                if cancelled is not None:
                    raise cancelled from None  # the cancel scope that asked takes it
                log.debug(
                    "%r: the wake-up subscription ended (%s); resubscribing",
                    self,
                    redact_text(repr(group)),
                )
            except Exception as exc:  # noqa: BLE001 - a listener only speeds wake-ups up
                # coredis tears a subscription down with a group of whatever broke (a closed
                # stream when the server went away); the settling task sees the loss itself.
                log.debug(
                    "%r: the wake-up subscription ended (%s); resubscribing",
                    self,
                    redact_text(repr(exc)),
                )
            await trio.sleep(backoff)
            backoff = min(_BACKOFF_MOST, backoff * 2)


def _lone_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What leaves ``async with hub`` for a group its nursery raised: the one failure in it
    that is not a cancellation, as itself; the group when there are several (or none)."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return False


def _connection_trouble(exc: BaseException) -> BaseException | None:
    """The failure that says Redis is out of reach, when ``exc`` is only that (coredis may
    wrap it in a group from its connection's task group); ``None`` for anything else, a
    cancellation included."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_connection_trouble(inner) for inner in exc.exceptions]
        if not leaves or any(leaf is None for leaf in leaves):
            return None
        return leaves[0]
    if isinstance(exc, _LOST):
        return exc
    if isinstance(exc, coredis.exceptions.RedisError):
        text = str(exc).lower()
        if "loading" in text or "connection" in text or "closed" in text:
            return exc
    return None


def _rows(reply: Any) -> list[Any]:
    if not isinstance(reply, list | tuple):
        raise coredis.exceptions.ResponseError(f"the settle script answered {reply!r}")
    return list(reply)
