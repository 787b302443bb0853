"""Shared accounts: a token bucket, an elastic window and a counting gate whose capacity lives in
Redis and is spent from a local lease.

Admission asks an account five questions and none of them may block, while a Redis round trip
does. So each shared account holds a *lease*: spare capacity its :class:`~nucleo_trio_redis.
RedisAccounts` hub took from Redis, in the Lua script of :mod:`nucleo_trio_redis._scripts`.
``fits`` and ``try_take`` answer from the lease at once; a shortfall is noted and the hub asked
to settle, and when the lease grows the account wakes admission like any account whose capacity
grew. The lease sizes itself from use (what the account spends in one lease period at the rate
it has been spending, up to ``lease_max``), is topped up when half spent, comes back when it sits
idle or another worker waits, and expires with its holder record (``lease_ttl``) when the worker
dies. While another worker waits in Redis's line, this worker's asks go through the line too:
only what a settle granted to a noted ask (its *earmark*) may be spent, so the longest waiter is
not overtaken by a stream of small asks served from a lease.

The three kinds mirror the local ones:

* :class:`SharedTokenBucket` is the provider quota (requests and tokens per minute, an optional
  burst bound) refilled on Redis's clock; a lease is requests with their tokens. TIME.
* :class:`SharedElasticWindow` admits ``max_requests`` per ``window`` seconds; a leased slot
  counts as inside the window from the moment it is leased until its use is stamped in Redis
  (stamps only ever move later, as the local window's unconfirmed stamps do). TIME. It shares
  the throttle; the local window's circuit breaker is not shared.
* :class:`SharedCountingGate` is a concurrency cap; the permits a worker holds (its jobs' and
  its spare) carry the lease lifetime, renewed every third of it while the worker lives, so a
  killed worker's permits come back within ``lease_ttl`` and never earlier while it runs and
  Redis answers. RELEASE.

``in_use`` is the capacity minus what is free in Redis at the last settle minus this worker's
spare: the global use as this worker knows it, moved at once by its own takes and gives.
Upstream push-back (``on_rate_limit_error``) tightens the account at once and is reported at the
next settle, which raises the throttle in Redis for every worker.
"""

from __future__ import annotations

import decimal
import math
import numbers
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import trio

from nucleo_trio.admission import (
    ElasticWindow,
    LimiterIdentity,
    Replenishment,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.admission.demand import amount_problem
from nucleo_trio.admission.gates import check_permits, permit_count
from nucleo_trio.admission.limiter import AbstractRateLimiter
from nucleo_trio.errors import UncorrectableError

from ._checks import check_name, check_positive_int, check_seconds
from .errors import RedisUnavailableError

if TYPE_CHECKING:
    from .hub import RedisAccounts

__all__ = [
    "SharedAccount",
    "SharedAccountStatus",
    "SharedCountingGate",
    "SharedElasticWindow",
    "SharedTokenBucket",
]

_INF = math.inf
_EPSILON = 1e-9


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0


def _whole(value: float) -> str:
    """A level as a whole number: a bucket refills continuously, a row reads in units."""
    return str(round(value))


@attrs.frozen
class SharedAccountStatus:
    """A shared account at one instant: the global picture at the last settle and this
    worker's share. ``account.status()`` reads it without a round trip;
    ``await account.fresh_status()`` settles with Redis first.

    ``used`` and ``capacity`` are in the account's first unit (tokens, requests, permits);
    ``requests_used``/``requests_capacity`` are a bucket's requests (0 otherwise). ``lease`` is
    the spare this worker holds, ``held`` what its own jobs hold (a gate) or spent since the
    last settle, ``waiting`` how many other workers wait on the account, ``redis`` is ``"ok"``,
    ``"connecting"`` or ``"lost: <reason>"``.
    """

    name: str
    """The account's name, the same on every worker that shares it."""
    kind: str
    """The kind of account: ``bucket``, ``window`` or ``gate``."""
    unit: str
    """What ``capacity``, ``used``, ``lease`` and ``held`` count: ``tokens``, ``requests`` or
    ``permits``."""
    capacity: float
    """The shared capacity, in ``unit``: a bucket's tokens a minute, a window's requests, a
    gate's permits."""
    used: float
    """The global use, in ``unit``, as this worker knows it: the capacity less what Redis had
    free at the last settle and less this worker's lease.

    It counts every other worker's lease as used, spent or not (a bucket's tokens not yet
    refilled, a window's slots inside the window, a gate's permits held by every worker's jobs
    and spare), and this worker's own takes and gives the moment they happen. It leaves out
    whatever changed in Redis since the last settle: other workers' takes and give-backs, a
    bucket's refill, the slots that left a window, a dead worker's holdings that expired. So
    between settles a bucket or a window reads higher than the truth, never lower. Before the
    first settle it is this worker's own use alone."""
    requests_capacity: float
    """A bucket's request bound (``burst``, else ``rpm``); 0 for a window or a gate."""
    requests_used: float
    """A bucket's requests in use across the workers, read like ``used``; 0 for a window or a
    gate."""
    lease: float
    """The spare capacity this worker holds, in ``unit``, ready to grant without a round trip."""
    held: float
    """A gate's permits held by this worker's jobs; for a bucket or a window, what this worker
    spent since the last settle."""
    waiting: int
    """How many other workers held a place in Redis's line for the account at the last
    settle."""
    throttle: float
    """The shared throttle at the last settle, 0 when none: a bucket refills over
    ``60 * (1 + throttle)`` seconds and a window spans ``window * (1 + throttle)``."""
    redis: str
    """The connection as the account last saw it: ``"ok"``, ``"connecting"`` (no settle yet)
    or ``"lost: <reason>"``."""
    worker: str
    """This worker's name, as its hub gives it
    (:attr:`~nucleo_trio_redis.RedisAccounts.worker`)."""

    @property
    def summary(self) -> str:
        """``global 40/100 tokens (requests 3/10); worker w1: lease 5, holds 2; redis ok``."""
        text = f"global {_whole(self.used)}/{_whole(self.capacity)} {self.unit}"
        if self.requests_capacity:
            text += f" (requests {_whole(self.requests_used)}/{_whole(self.requests_capacity)})"
        text += f"; worker {self.worker}: lease {_whole(self.lease)}, holds {_whole(self.held)}"
        if self.waiting:
            text += f"; {self.waiting} other worker(s) waiting"
        if self.throttle > 0:
            text += f"; throttle {self.throttle:.1f}"
        return f"{text}; redis {self.redis}"


@attrs.define
class _Settlement:
    """What one account says in one settle: its block of arguments, what it reports (to be
    reported again if the call fails) and what it asks for."""

    args: list[str]
    confirm: int
    pressure: int
    successes: int
    need_a: float
    need_b: float
    ask_a: float = 0.0
    ask_b: float = 0.0
    head_a: float = 0.0
    head_b: float = 0.0


class SharedAccount(AbstractRateLimiter):
    """The lease logic the three shared kinds have in common; see the module docstring.

    Build one through its hub (:meth:`RedisAccounts.token_bucket` and friends), never
    directly: the hub owns the connection and settles every account it made.
    """

    kind: ClassVar[str]
    """The script's name for the kind: ``bucket``, ``window`` or ``gate``."""
    unit: ClassVar[str]
    """What the account's first amount counts: ``tokens``, ``requests`` or ``permits``."""
    increment: ClassVar[float] = 0.0
    """How much one unit of push-back raises the shared throttle."""
    _owns_hub = False  # the plugin's limiter kinds build the hub for this account alone

    def __init__(
        self,
        hub: RedisAccounts,
        name: str,
        *,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> None:
        owner = type(self).__name__
        self._name = check_name(owner, "name", name)
        if not isinstance(lease, bool):
            raise TypeError(f"{owner} {name!r}: lease must be a bool, got {lease!r}")
        if not isinstance(grant_log, bool):
            raise TypeError(f"{owner} {name!r}: grant_log must be a bool, got {grant_log!r}")
        self._hub = hub
        self._lease = lease
        self._lease_max = (
            self._default_lease_max()
            if lease_max is None
            else check_positive_int(f"{owner} {name!r}", "lease_max", lease_max)
        )
        self.grant_log = grant_log
        """Whether every take and return is appended to the Redis stream
        :attr:`grant_log_key` (``False`` unless the account was made with ``grant_log=True``)."""
        self._spare_a = 0.0
        self._spare_b = 0.0
        # The largest whole ask (mine plus the reservation ahead) found short since the last
        # settle, and whether anyone asked since: a need nobody repeats is dropped.
        self._ask_a = 0.0
        self._ask_b = 0.0
        # Of those, the largest asked with nothing reserved ahead: the head of admission's line,
        # whose whole demand alone is what lets the line move (0: the head did not ask).
        self._head_a = 0.0
        self._head_b = 0.0
        self._noted = False
        self._flying = (0.0, 0.0)  # the ask a settle in flight carries: no second poke for it
        self._refused = (0.0, 0.0)  # the ask the last settle refused
        self._taken_a = 0.0  # taken from the lease since the last settle (refundable locally)
        self._taken_b = 0.0
        self._credit_a = 0.0  # given back beyond that: credited through Redis
        self._credit_b = 0.0
        self._used_a = 0.0  # spent since the last settle, for sizing
        self._used_b = 0.0
        self._rate = 0.0  # units spent a second: quick to rise, slow to fall
        # What the last settle granted for a noted ask: the asker may spend it even while other
        # workers wait (it was granted beside their reservations); it lapses after one settle.
        self._earmark_a = 0.0
        self._earmark_b = 0.0
        self._earmark_settles = 0
        # While Redis is lost with on_redis_lost="local_share": the local stand-in, and what it
        # granted (a bucket pays it back, a window stamps it, at the first settle after).
        self._fallback: Any = None
        self._debt_a = 0.0
        self._debt_b = 0.0
        # time.monotonic() instant the lease's holder record may expire in Redis: past it the
        # spare is void (Redis may have handed it to someone else), even before a settle says so
        self._lease_until: float | None = None
        self._pressure = 0
        self._successes = 0
        self.throttle = 0.0
        """The shared throttle, 0 when none. Push-back from the provider raises it at once on
        this worker; each settle replaces it with the value every worker shares, which
        successes lower again. It stretches a bucket's refill and a window's span by
        ``1 + throttle``."""
        self._free_a = 0.0  # free in Redis beside every lease, at the last settle
        self._free_b = 0.0
        self._waiting = 0
        self._wait: float | None = None  # seconds the last refused need was told to wait
        self._settled_at: float | None = None
        self._last_take: float | None = None
        self._lost: str | None = None
        self._first_reading = trio.Event()  # set by the first settle, or the first loss

    # -- what a kind supplies -------------------------------------------------------------------
    def _default_lease_max(self) -> int:
        raise NotImplementedError

    def _measure(self, amounts: Sequence[Any], where: str) -> tuple[float, float]:
        """``amounts`` in the account's two units (the second is a bucket's requests)."""
        raise NotImplementedError

    def _caps(self) -> tuple[float, float]:
        raise NotImplementedError

    def _params(self) -> tuple[float, float, float]:
        raise NotImplementedError

    def _refuse_alone(self, a: float, b: float) -> None:
        raise NotImplementedError

    def _lease_unit(self) -> tuple[float, float]:
        """One unit of lease: a request with its tokens, a slot, a permit."""
        return 1.0, 0.0

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        """The account's name: the same on every worker that shares it."""
        return self._name

    @property
    def hub(self) -> RedisAccounts:
        """The hub that settles this account."""
        return self._hub

    @property
    def keys(self) -> tuple[str, str, str, str]:
        """The account's Redis keys: state, holders, stamps and grant log."""
        prefix = f"{{{self._hub.namespace}}}:{self._name}"
        return f"{prefix}:state", f"{prefix}:holders", f"{prefix}:stamps", f"{prefix}:log"

    @property
    def grant_log_key(self) -> str | None:
        """The stream the script appends every take and return to, when ``grant_log`` is on."""
        return self.keys[3] if self.grant_log else None

    @property
    def capacity(self) -> int | float:
        """The shared capacity in the first unit: tokens, requests or permits."""
        return self._caps()[0]

    @property
    def in_use(self) -> float:
        """The global use as this worker knows it: the capacity less what Redis had free at the
        last settle and less this worker's spare (so its own takes and gives move it at once).
        Before the first settle only this worker's own use is known, and that is what it says."""
        if self._settled_at is None:
            return self._held()
        return max(0.0, self._caps()[0] - self._free_a - self._spare_a)

    @property
    def lease(self) -> tuple[float, float]:
        """The spare this worker holds now, in the account's two units."""
        return self._spare_a, self._spare_b

    @property
    def lost(self) -> str | None:
        """Why Redis is out of reach, or ``None`` while it answers."""
        return self._lost

    @property
    def unavailable(self) -> str | None:
        """``None`` while Redis answers (or before the first try); otherwise a sentence saying
        which Redis is out of reach, why, and whether the account still grants from its local
        share. ``nucleo-trio health`` reports it and exits 1."""
        if self._lost is None:
            return None
        where = f"Redis at {self._hub.safe_url} is out of reach ({self._lost})"
        if self._fallback is not None:
            return f"{where}; granting from a local share of the capacity"
        return f"{where}; every ask is refused"

    async def wait_ready(self) -> None:
        """Return once the account has its first reading: its first settle with Redis, or the
        news that Redis is out of reach (then :attr:`unavailable` says why). Starts the hub's
        settling task when nothing runs it yet; bound it with a cancel scope."""
        if not self._first_reading.is_set():
            self._hub.poke()
            await self._first_reading.wait()

    @property
    def status_indicator(self) -> str | None:
        """``None`` while nominal; ``redis-lost`` (or ``redis-lost:local-share``) while Redis is
        out of reach; ``throttle:<x>x`` while the shared throttle stretches the account."""
        if self._lost is not None:
            return "redis-lost:local-share" if self._fallback is not None else "redis-lost"
        if self.throttle > 0:
            return f"throttle:{1 + self.throttle:.1f}x"
        return None

    def _redis_state(self) -> str:
        if self._lost is not None:
            return f"lost: {self._lost}"
        return "ok" if self._settled_at is not None else "connecting"

    def _held(self) -> float:
        return self._used_a

    async def fresh_status(self) -> SharedAccountStatus:
        """Settle with Redis now, then answer :meth:`status`: the global use as Redis has it
        at this instant. One round trip for the whole hub
        (:meth:`RedisAccounts.settle_now <nucleo_trio_redis.RedisAccounts.settle_now>`).
        When Redis cannot be reached it raises nothing: the row's ``redis`` says
        ``lost: <reason>``."""
        await self._hub.settle_now()
        return self.status()

    async def aclose(self) -> None:
        """Close the hub this account was built on when the hub is the account's own: the
        limiter kinds of the plugin build each account from configuration on a hub of its
        own, and the dispatcher that built it calls this when it stops, so the lease goes
        back then. On an account made through a hub of yours this does nothing: close the
        hub (leave its ``async with`` block, or :meth:`RedisAccounts.aclose
        <nucleo_trio_redis.RedisAccounts.aclose>`)."""
        if self._owns_hub:
            await self._hub.aclose()

    def status(self) -> SharedAccountStatus:
        """The global use at the last settle and this worker's share, in one frozen row; no
        round trip (see :attr:`SharedAccountStatus.used` for what the global use leaves out).
        :meth:`fresh_status` settles first."""
        cap_a, cap_b = self._caps()
        return SharedAccountStatus(
            name=self._name,
            kind=self.kind,
            unit=self.unit,
            capacity=cap_a,
            used=self.in_use,
            requests_capacity=cap_b,
            requests_used=max(0.0, cap_b - self._free_b - self._spare_b) if cap_b else 0.0,
            lease=self._spare_a,
            held=self._held(),
            waiting=self._waiting,
            throttle=self.throttle,
            redis=self._redis_state(),
            worker=self._hub.worker,
        )

    # -- the account questions --------------------------------------------------------------------
    def _check(self, mine: Sequence[Any], reserved: Sequence[Any]) -> tuple[float, float] | None:
        """The ask when it fits the lease beside the reservation; None (and a noted need) when
        it does not; a raise for what can never fit or while Redis is lost."""
        a, b = self._measure(mine, "fits/try_take")
        self._refuse_alone(a, b)
        ra, rb = self._measure(reserved, "the reservation ahead") if reserved else (0.0, 0.0)
        if self._lost is not None:
            if self._fallback is None:
                raise RedisUnavailableError(self._name, self._hub.safe_url, self._lost)
            return (a, b) if self._fallback_fits(mine, reserved, a, ra) else None
        self._void_expired_lease()
        usable_a, usable_b = self._spare_a, self._spare_b
        if self._waiting or not self._lease:
            # Others wait in Redis's line, or there is no lease: only what a settle granted to
            # this ask may be spent (a permit given back waits for the next settle to go home).
            usable_a, usable_b = min(usable_a, self._earmark_a), min(usable_b, self._earmark_b)
        if usable_a + _EPSILON >= a + ra and usable_b + _EPSILON >= b + rb:
            return a, b
        cap_a, cap_b = self._caps()
        ask_a, ask_b = min(a + ra, cap_a), min(b + rb, cap_b)
        head_a, head_b = (min(a, cap_a), min(b, cap_b)) if not reserved else (0.0, 0.0)
        if self._noted:  # the largest ask since the last settle
            ask_a, ask_b = max(self._ask_a, ask_a), max(self._ask_b, ask_b)
            head_a, head_b = max(self._head_a, head_a), max(self._head_b, head_b)
        # else the first ask since then: it replaces one a refused settle kept
        self._noted = True
        self._ask_a, self._ask_b = ask_a, ask_b
        self._head_a, self._head_b = head_a, head_b
        # Settle now only for an ask larger than the one in flight and the one Redis just
        # refused: those wait for the instant Redis named or a wake-up (asking again at once
        # would only be refused again, a round trip per admission pass).
        flying_a, flying_b = self._flying
        refused_a, refused_b = self._refused
        if ask_a > max(flying_a, refused_a) or ask_b > max(flying_b, refused_b):
            self._hub.poke()
        return None

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Whether the lease covers ``mine`` beside ``reserved_ahead`` now; a shortfall is
        noted for the hub's next settle. Raises what can never fit, and
        :class:`~nucleo_trio_redis.RedisUnavailableError` while Redis is lost (``refuse``)."""
        return self._check(mine, reserved_ahead) is not None

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """:meth:`fits`, and the debit from the lease, as one step."""
        ask = self._check(mine, reserved_ahead)
        if ask is None:
            return False
        a, b = ask
        if self._lost is not None:  # checked above: a local share answers
            if not self._fallback_take(mine, reserved_ahead):
                return False
            self._debt_a += a
            self._debt_b += b
            self._took(a)
            return True
        self._spare_a -= a
        self._spare_b -= b
        self._earmark_a = max(0.0, self._earmark_a - a)
        self._earmark_b = max(0.0, self._earmark_b - b)
        self._taken_a += a
        self._taken_b += b
        self._used_a += a
        self._used_b += b
        self._took(a)
        self._last_take = _now()
        # the ask that was short is served; whoever else waits says so again when asked
        self._ask_a = self._ask_b = 0.0
        self._head_a = self._head_b = 0.0
        self._noted = False
        if self._lease and self._spare_a < self._target()[0] / 2:
            self._hub.poke()  # top the lease up before the next ask finds it empty
        return True

    def _took(self, a: float) -> None:
        """A kind's own bookkeeping of a take (a gate's jobs, a window's unconfirmed slots)."""

    def _void_expired_lease(self) -> None:
        """Drop the spare once its holder record may have expired in Redis (the settling task
        did not renew it in time): spending it could grant what Redis gave someone else."""
        until = self._lease_until
        if until is not None and (self._spare_a or self._spare_b) and time.monotonic() >= until:
            self._spare_a = self._spare_b = 0.0
            self._earmark_a = self._earmark_b = 0.0

    # -- the local share, while Redis is out of reach ---------------------------------------------
    def _make_fallback(self, share: float) -> Any:
        """The local stand-in for ``share`` of the quota, starting with nothing to give (what
        was granted before the loss may still be inside the upstream's window)."""
        raise NotImplementedError

    def _fallback_fits(
        self, mine: Sequence[Any], reserved: Sequence[Any], a: float, ra: float
    ) -> bool:
        fits: bool = self._fallback.fits(mine, reserved)
        return fits

    def _fallback_take(self, mine: Sequence[Any], reserved: Sequence[Any]) -> bool:
        took: bool = self._fallback.try_take(mine, reserved)
        return took

    @property
    def local_share(self) -> bool:
        """Whether the account answers from its local share of the quota (Redis lost)."""
        return self._lost is not None and self._fallback is not None

    def give(self, amounts: Sequence[Any]) -> None:
        """Credit ``amounts`` back to the lease at once (what was taken before the last settle
        is credited through Redis instead); wakes admission."""
        a, b = self._measure(amounts, "give")
        self._given(a, b)
        self._capacity_changed()
        if self._waiting:
            self._hub.poke()  # another worker waits: let the spare go back

    def _given(self, a: float, b: float) -> None:
        # What was taken since the last settle is still in this worker's holder record, so it
        # comes back to the lease; the rest is credited through Redis, capped there.
        local_a, local_b = min(a, self._taken_a), min(b, self._taken_b)
        self._spare_a += local_a
        self._spare_b += local_b
        self._taken_a -= local_a
        self._taken_b -= local_b
        self._credit_a += a - local_a
        self._credit_b += b - local_b

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """Now when the lease covers the ask, else ``None``: the lease arriving is the event
        that wakes admission (the hub settles at the instant Redis names, or on a wake-up)."""
        a, b = self._measure(mine, "earliest_fit")
        ra, rb = (
            self._measure(reserved_ahead, "the reservation ahead") if reserved_ahead else (0, 0)
        )
        cap_a, cap_b = self._caps()
        if a + ra > cap_a + _EPSILON or b + rb > cap_b + _EPSILON:
            return None
        if self._lost is not None:
            if self._fallback is not None and not isinstance(self._fallback, int):
                instant: float | None = self._fallback.earliest_fit(mine, reserved_ahead)
                return instant  # the local share's own clock
            return None
        if self._spare_a + _EPSILON >= a + ra and self._spare_b + _EPSILON >= b + rb:
            return _now()
        return None

    # -- upstream signals -------------------------------------------------------------------------
    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        """Tighten every worker: the push-back (a 429 is 1, an overload 3) is reported to Redis
        at once and raises the shared throttle."""
        weight = getattr(failure, "backpressure", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            weight = 1
        if weight and self.increment:
            self._pressure += weight
            self.throttle += self.increment * weight
            self._hub.poke()

    def on_success(self, input: Any = None) -> None:
        """Count a success toward relaxing the shared throttle (reported at the next settle)."""
        if self.throttle > 0:
            self._successes += 1
            self._hub.poke()

    # -- the hub's side -----------------------------------------------------------------------------
    def _target(self) -> tuple[float, float]:
        """The spare this account wants after a settle: what it spends in one lease period at
        the rate it has been spending (``hub.lease_period``), at least one unit and at most
        ``lease_max`` units; nothing without a lease."""
        if not self._lease:
            return 0.0, 0.0
        unit_a, unit_b = self._lease_unit()
        units = min(
            float(self._lease_max), max(1.0, math.ceil(self._rate * self._hub.lease_period))
        )
        return units * unit_a, units * unit_b

    def _settlement(self, now: float, closing: bool) -> _Settlement:
        """The arguments of this account's block in the next settle; the hub calls it."""
        self._void_expired_lease()
        asking = self._noted and not closing and self._waits()
        idle = self._last_take is None or now - self._last_take >= self._hub.lease_ttl / 3
        # The spare goes back when the hub closes, when it sits idle with nobody here asking,
        # and whenever another worker waits: then every ask of this worker goes through Redis's
        # line too, behind the older waiters, instead of being served from a lease they wait for.
        if self._earmark_settles >= 1 or closing:
            self._earmark_a = self._earmark_b = 0.0  # its asker did not come back for it
        self._earmark_settles += 1
        give_back = closing or bool(self._waiting) or not self._lease or (idle and not asking)
        ret_a, ret_b = self._credit_a, self._credit_b
        if self.kind == "bucket":
            # what a local share granted while Redis was lost is paid back from the level
            ret_a -= self._debt_a
            ret_b -= self._debt_b
        if give_back:
            keep_a = min(self._spare_a, self._earmark_a)
            keep_b = min(self._spare_b, self._earmark_b)
            ret_a += self._spare_a - keep_a
            ret_b += self._spare_b - keep_b
            self._spare_a, self._spare_b = keep_a, keep_b
        rest_a = rest_b = 0.0
        if asking:
            # The need is the head's whole demand when the head asked: all or nothing in Redis,
            # it must not wait for the reservation a follower's ask adds on top (with one unit
            # left and every worker asking for two, nobody would get the one). What the
            # followers want beyond it is asked for as extra, beside it, best effort.
            want_a, want_b = self._ask_a, self._ask_b
            if self._head_a or self._head_b:
                want_a, want_b = min(want_a, self._head_a), min(want_b, self._head_b)
            need_a = max(0.0, want_a - self._spare_a)
            need_b = max(0.0, want_b - self._spare_b)
            rest_a = max(0.0, self._ask_a - self._spare_a - need_a)
            rest_b = max(0.0, self._ask_b - self._spare_b - need_b)
        else:
            need_a = need_b = 0.0  # nobody asked again since the last settle: the ask is gone
        asked = (self._ask_a, self._ask_b) if need_a or need_b else (0.0, 0.0)
        heads = (self._head_a, self._head_b) if need_a or need_b else (0.0, 0.0)
        extra_a = extra_b = 0.0
        if not give_back:
            target_a, target_b = self._target()
            extra_a = max(rest_a, target_a - self._spare_a - need_a, 0.0)
            extra_b = max(rest_b, target_b - self._spare_b - need_b, 0.0)
        confirm = self._confirm_now()
        cap1, cap2, cap3 = self._params()
        args = [
            self._name,
            self.kind,
            repr(cap1),
            repr(cap2),
            repr(cap3),
            self._hub.worker,
            repr(self._base_a()),
            repr(self._spare_b),
            repr(ret_a),
            repr(ret_b),
            str(confirm),
            repr(need_a),
            repr(need_b),
            repr(extra_a),
            repr(extra_b),
            repr(self._hub.lease_ttl),
            repr(self._hub.reservation_ttl),
            str(self._pressure),
            str(self._successes),
            "1" if self.grant_log else "0",
            repr(self.increment),
        ]
        plan = _Settlement(args, confirm, self._pressure, self._successes, need_a, need_b)
        self._credit_a = self._credit_b = 0.0
        self._pressure = self._successes = 0
        self._ask_a = self._ask_b = 0.0  # asks noted while the call flies start afresh
        self._head_a = self._head_b = 0.0
        self._noted = False
        plan.ask_a, plan.ask_b = asked
        plan.head_a, plan.head_b = heads
        self._flying = asked
        return plan

    def _base_a(self) -> float:
        return self._spare_a

    def _confirm_now(self) -> int:
        return 0

    def _settled(self, plan: _Settlement, reply: Sequence[Any], at: float, sent: float) -> None:
        """Apply one settle's answer for this account; the hub calls it. ``sent`` is the
        :func:`time.monotonic` instant the call left: Redis gave the lease its lifetime no
        earlier, so the lease is this worker's until ``sent + lease_ttl``."""
        self._lease_until = sent + self._hub.lease_ttl
        got_a, got_b, free_a, free_b, throttle, wait, _others, waiting = (
            float(value) for value in reply
        )
        was_lost = self._lost is not None
        self._lost = None
        self._first_reading.set()
        self._fallback = None
        self._debt_a = self._debt_b = 0.0
        self._flying = (0.0, 0.0)
        self._spare_a += got_a
        self._spare_b += got_b
        self._free_a, self._free_b = free_a, free_b
        self.throttle = throttle
        self._waiting = int(waiting)
        if self._settled_at is not None and at > self._settled_at:
            unit_a, unit_b = self._lease_unit()
            spent = self._used_b if unit_b else self._used_a / max(unit_a, _EPSILON)
            now_rate = spent / max(at - self._settled_at, 1e-3)
            self._rate = max(now_rate, 0.7 * self._rate + 0.3 * now_rate)
        self._settled_at = at
        if got_a or got_b:
            self._last_take = at  # a fresh lease is not idle
        self._taken_a = self._taken_b = 0.0
        self._used_a = self._used_b = 0.0
        granted = (plan.need_a or plan.need_b) and got_a >= plan.need_a and got_b >= plan.need_b
        if granted:
            self._earmark_a, self._earmark_b = plan.ask_a, plan.ask_b  # the whole ask
            self._earmark_settles = 0
        if (plan.need_a or plan.need_b) and not granted:
            # Refused: the ask stands while someone repeats it (and keeps this worker's place
            # in Redis's line). Admission, woken, asks its waiters again: a live one notes its
            # ask anew; one that left does not, and the next settle drops its need.
            self._ask_a = max(self._ask_a, plan.ask_a)
            self._ask_b = max(self._ask_b, plan.ask_b)
            self._head_a = max(self._head_a, plan.head_a)
            self._head_b = max(self._head_b, plan.head_b)
            self._refused = (plan.ask_a, plan.ask_b)
            self._wait = None if wait < 0 else wait
            self._capacity_changed()
        else:
            self._wait = None
            self._refused = (0.0, 0.0)
            if got_a or got_b or was_lost:
                self._capacity_changed()
        if self._waiting and self._has_spare() and not self._waits():
            self._hub.poke()  # another worker waits: the next settle gives the spare back

    def _unsent(self, plan: _Settlement) -> None:
        """A settle failed before its answer came: report its stamps and push-back again (a
        stamp twice only holds a slot longer; a stamp lost would let the window overshoot)."""
        self._pressure += plan.pressure
        self._successes += plan.successes
        self._restamp(plan.confirm)

    def _restamp(self, confirm: int) -> None:
        """A window's slots to stamp again (only a window stamps)."""

    def _lose(self, reason: str) -> None:
        """Redis is out of reach: drop the lease (it may expire before Redis answers again),
        keep what the jobs hold, and wake admission so that waiters hear the refusal."""
        first = self._lost is None
        self._lost = reason
        self._first_reading.set()
        share = self._hub.local_share
        if first and share is not None:
            self._fallback = self._make_fallback(share)
        self._spare_a = self._spare_b = 0.0
        self._taken_a = self._taken_b = 0.0
        self._credit_a = self._credit_b = 0.0
        self._ask_a = self._ask_b = 0.0
        self._head_a = self._head_b = 0.0
        self._noted = False
        self._earmark_a = self._earmark_b = 0.0
        self._flying = (0.0, 0.0)
        self._refused = (0.0, 0.0)
        self._wait = None
        if first:
            self._capacity_changed()

    def _wanted(self) -> None:
        """Another worker started waiting (heard on the wake channel): spare goes back at the
        next settle, and a give-back settles at once."""
        self._waiting = max(self._waiting, 1)
        if self._has_spare() and not self._waits():
            self._hub.poke()

    def _has_spare(self) -> bool:
        """Whether this worker holds spare it could give back."""
        return self._spare_a > 0 or self._spare_b > 0

    def _waits(self) -> bool:
        """Whether a need of this worker waits on the account (a wake-up may help it)."""
        return self._ask_a > self._spare_a or self._ask_b > self._spare_b

    def _next_settle(self, now: float) -> float:
        """The trio instant this account next needs a settle (``inf``: only when poked)."""
        ttl = self._hub.lease_ttl
        due = _INF
        if self._waits():
            refresh = (self._settled_at or now) + self._hub.reservation_ttl / 2
            due = refresh if self._wait is None else min(refresh, now + self._wait)
        if self._holds_anything():
            due = min(due, (self._settled_at or now) + ttl / 3)
        if self._credit_a or self._credit_b or self._pressure or self._successes:
            due = now
        return due

    def _holds_anything(self) -> bool:
        return self._spare_a > 0 or self._spare_b > 0


def _token_count(name: str, amount: Any, where: str) -> float:
    kind = type(amount)
    if (kind is int and amount >= 0) or (kind is float and 0.0 <= amount < _INF):
        return float(amount)
    problem = amount_problem(amount)
    if problem is None and not isinstance(amount, numbers.Real | decimal.Decimal):
        problem = (TypeError, "not a number")
    if problem is not None:
        error, reason = problem
        raise error(
            f"{name}: {where}: {amount!r} is not a token count ({type(amount).__name__}: "
            f"{reason}); a token bucket's amounts are finite, non-negative numbers"
        )
    return float(amount)


class SharedTokenBucket(SharedAccount):
    """A provider quota shared by every worker: ``rpm`` requests and ``tpm`` tokens a minute,
    at most ``burst`` requests at once (``None``: ``rpm``). Amounts are token counts, each also
    one request, as on :class:`~nucleo_trio.admission.TokenBucket`."""

    kind = "bucket"
    unit = "tokens"
    """A bucket counts tokens first; each amount is also one request."""
    increment = 0.5

    def __init__(
        self,
        hub: RedisAccounts,
        name: str,
        *,
        rpm: int,
        tpm: int,
        burst: float | None = None,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> None:
        owner = f"{type(self).__name__} {name!r}"
        self.rpm = check_positive_int(owner, "rpm", rpm)
        """Requests a minute the bucket refills, shared by every worker."""
        self.tpm = check_positive_int(owner, "tpm", tpm)
        """Tokens a minute the bucket refills, shared by every worker; also the most one ask
        may hold."""
        if burst is not None:
            if isinstance(burst, bool) or not isinstance(burst, int | float):
                raise TypeError(f"{owner}: burst must be None or a number, got {burst!r}")
            if not math.isfinite(burst) or burst < 1:
                raise ValueError(
                    f"{owner}: burst must be None or a finite number of requests >= 1, "
                    f"got {burst!r}"
                )
        self.burst = burst
        """The most requests at once, as given; ``None`` means ``rpm``."""
        self.request_cap = float(rpm if burst is None else min(rpm, burst))
        """The request bound in force: ``burst`` or ``rpm``, whichever is smaller."""
        super().__init__(hub, name, lease=lease, lease_max=lease_max, grant_log=grant_log)
        self._tokens_per_request = tpm / rpm

    def _default_lease_max(self) -> int:
        return max(1, math.ceil(self.request_cap / 8))

    @property
    def limiter_category(self) -> str:
        """``token_bucket``, as the local bucket: health and events read it alike."""
        return "token_bucket"

    def replenishment(self) -> Replenishment:
        """TIME: tokens come back with the clock, never at release."""
        return Replenishment.TIME

    def account_for(self, amount: Any) -> LimiterIdentity:
        """The bucket itself, for a token count; anything else is refused naming both."""
        _token_count(self._name, amount, "account_for")
        return self

    def _measure(self, amounts: Sequence[Any], where: str) -> tuple[float, float]:
        return sum(_token_count(self._name, a, where) for a in amounts), float(len(amounts))

    def _caps(self) -> tuple[float, float]:
        return float(self.tpm), self.request_cap

    def _params(self) -> tuple[float, float, float]:
        return float(self.rpm), float(self.tpm), self.request_cap

    def _lease_unit(self) -> tuple[float, float]:
        return self._tokens_per_request, 1.0

    def _refuse_alone(self, a: float, b: float) -> None:
        if a > self.tpm:
            raise UncorrectableError(
                f"{self._name}: {a:g} tokens exceeds the shared budget of {self.tpm} tokens per "
                "minute; ask for fewer tokens or pick a model with a larger quota"
            )
        if b > self.request_cap:
            raise UncorrectableError(
                f"{self._name}: {b:g} requests at once exceeds the shared bound of "
                f"{self.request_cap:g} requests"
            )

    def _make_fallback(self, share: float) -> TokenBucket | None:
        rpm, tpm = math.floor(self.rpm * share), math.floor(self.tpm * share)
        if rpm < 1 or tpm < 1:
            return None  # a share too small to grant anything: refuse
        burst = max(1.0, math.floor(self.request_cap * share))
        stand_in = TokenBucket(self._name, TokenBucketConfig(rpm, tpm, burst=burst))
        requests = math.floor(stand_in.config.request_cap)
        stand_in.try_take([float(tpm), *([0.0] * (requests - 1))], [])  # it starts empty
        return stand_in

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        took = super().try_take(mine, reserved_ahead)
        if took and mine:
            tokens = self._measure(mine, "try_take")[0] / len(mine)
            self._tokens_per_request = 0.8 * self._tokens_per_request + 0.2 * tokens
        return took


class SharedElasticWindow(SharedAccount):
    """At most ``max_requests`` requests in any ``window`` seconds across every worker,
    stretched by the shared throttle (``window * (1 + throttle)``, at most ``max_throttle``).
    Amounts are unit permits, as on :class:`~nucleo_trio.admission.ElasticWindow`."""

    kind = "window"
    unit = "requests"
    """A window counts requests, one per amount."""
    increment = 1.0

    def __init__(
        self,
        hub: RedisAccounts,
        name: str,
        *,
        max_requests: int,
        window: float,
        max_throttle: float = 9.0,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> None:
        owner = f"{type(self).__name__} {name!r}"
        self.max_requests = check_positive_int(owner, "max_requests", max_requests)
        """The most requests admitted in any one window, across every worker."""
        self.window = check_seconds(owner, "window", window)
        """The window's length in seconds before the throttle stretches it."""
        if isinstance(max_throttle, bool) or not isinstance(max_throttle, int | float):
            raise TypeError(f"{owner}: max_throttle must be a number, got {max_throttle!r}")
        if not math.isfinite(max_throttle) or max_throttle < 0:
            raise ValueError(f"{owner}: max_throttle must be finite and >= 0, got {max_throttle!r}")
        self.max_throttle = float(max_throttle)
        """The highest the shared throttle goes (default 9.0: a window at most ten times its
        length)."""
        self._unconfirmed = 0  # slots spent since the last settle, stamped at the next
        super().__init__(hub, name, lease=lease, lease_max=lease_max, grant_log=grant_log)

    def _default_lease_max(self) -> int:
        return max(1, math.ceil(self.max_requests / 8))

    @property
    def limiter_category(self) -> str:
        """``elastic_window``, as the local window."""
        return "elastic_window"

    @property
    def requires_http_connection(self) -> bool:
        """Every window also needs the shared HTTP gate, as the local window."""
        return True

    def replenishment(self) -> Replenishment:
        """TIME: a slot comes back when its stamp leaves the window."""
        return Replenishment.TIME

    def _measure(self, amounts: Sequence[Any], where: str) -> tuple[float, float]:
        check_permits(self._name, amounts, where)
        return float(len(amounts)), 0.0

    def _caps(self) -> tuple[float, float]:
        return float(self.max_requests), 0.0

    def _params(self) -> tuple[float, float, float]:
        return float(self.max_requests), self.window, self.max_throttle

    def _refuse_alone(self, a: float, b: float) -> None:
        if a > self.max_requests:
            raise UncorrectableError(
                f"{self._name}: {a:g} requests can never fit a shared window of "
                f"{self.max_requests} requests"
            )

    def _took(self, a: float) -> None:
        self._unconfirmed += int(a)  # a local share's grants too: stamped once Redis is back

    def _make_fallback(self, share: float) -> ElasticWindow | None:
        most = math.floor(self.max_requests * share)
        if most < 1:
            return None
        template = type(
            "LocalShareWindow",
            (ElasticWindow,),
            {"base_window": self.window * (1 + self.throttle), "max_requests": most},
        )
        stand_in: ElasticWindow = template(self._name)
        stand_in.try_take([None] * most, [])  # it starts full: one window must pass
        return stand_in

    def _given(self, a: float, b: float) -> None:
        # a rolled-back slot not yet stamped goes back to the lease; a stamped one stays in the
        # window until it leaves (the work may be seen upstream)
        back = min(int(a), self._unconfirmed)
        self._unconfirmed -= back
        self._spare_a += back
        self._taken_a = max(0.0, self._taken_a - back)

    def _base_a(self) -> float:
        return self._spare_a

    def _confirm_now(self) -> int:
        confirm, self._unconfirmed = self._unconfirmed, 0
        return confirm

    def _restamp(self, confirm: int) -> None:
        self._unconfirmed += confirm

    def _holds_anything(self) -> bool:
        return self._spare_a > 0 or self._unconfirmed > 0

    def _next_settle(self, now: float) -> float:
        due = super()._next_settle(now)
        if self._unconfirmed:
            # a spent slot is held in the window until stamped: stamp it soon
            due = min(
                due, (self._settled_at or now) + min(self._hub.lease_ttl / 3, self.window / 20)
            )
        return due


class SharedCountingGate(SharedAccount):
    """A concurrency cap of ``capacity`` permits shared by every worker. Amounts are permit
    counts (``None`` for one), as on :class:`~nucleo_trio.admission.CountingGate`. RELEASE:
    the permits a worker holds carry the hub's ``lease_ttl``, renewed while it lives."""

    kind = "gate"
    unit = "permits"
    """A gate counts permits."""

    def __init__(
        self,
        hub: RedisAccounts,
        name: str,
        capacity: int,
        *,
        lease: bool = True,
        lease_max: int | None = None,
        grant_log: bool = False,
    ) -> None:
        self._capacity = check_positive_int(f"{type(self).__name__} {name!r}", "capacity", capacity)
        self._jobs = 0
        super().__init__(hub, name, lease=lease, lease_max=lease_max, grant_log=grant_log)

    def _default_lease_max(self) -> int:
        return max(1, math.ceil(self._capacity / 8))

    @property
    def limiter_category(self) -> str:
        """``semaphore``, as a local counting gate."""
        return "semaphore"

    @property
    def held(self) -> int:
        """Permits this worker's jobs hold."""
        return self._jobs

    def _held(self) -> float:
        return float(self._jobs)

    def _measure(self, amounts: Sequence[Any], where: str) -> tuple[float, float]:
        if len(amounts) == 1 and amounts[0] is None:
            return 1.0, 0.0
        return float(sum(permit_count(self._name, a, where) for a in amounts)), 0.0

    def _caps(self) -> tuple[float, float]:
        return float(self._capacity), 0.0

    def _params(self) -> tuple[float, float, float]:
        return float(self._capacity), 0.0, 0.0

    def _refuse_alone(self, a: float, b: float) -> None:
        if a > self._capacity:
            raise UncorrectableError(
                f"{self._name}: {a:g} permits can never fit a shared gate of {self._capacity}",
                llm_message=(
                    f"The job asks for {a:g} permits on {self._name}, which only ever has "
                    f"{self._capacity}."
                ),
            )

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        self._measure(mine, "earliest_fit")
        return None

    def _took(self, a: float) -> None:
        self._jobs += int(a)

    def _make_fallback(self, share: float) -> int | None:
        """The most this worker may hold while Redis is away: its share of the permits, but
        never more than Redis had counted for it when the loss came (its jobs' permits and its
        spare lease). Every worker's count at the loss fits the gate together, so however
        unevenly they held, the gate's capacity is never passed; a worker that held less than
        its share waits for Redis, or for its own jobs, rather than take what others hold."""
        most = math.floor(self._capacity * share)
        if most < 1:
            return None
        return min(most, math.floor(self._base_a() + _EPSILON))

    def _fallback_fits(
        self, mine: Sequence[Any], reserved: Sequence[Any], a: float, ra: float
    ) -> bool:
        most: int = self._fallback
        return self._jobs + a + ra <= most

    def _fallback_take(self, mine: Sequence[Any], reserved: Sequence[Any]) -> bool:
        a, _ = self._measure(mine, "try_take")
        ra, _ = self._measure(reserved, "the reservation ahead") if reserved else (0.0, 0.0)
        return self._fallback_fits(mine, reserved, a, ra)

    def _given(self, a: float, b: float) -> None:
        if a > self._jobs:
            raise ValueError(
                f"{self._name}: give of {a:g} permits exceeds the {self._jobs} this worker holds"
            )
        self._jobs -= int(a)
        self._spare_a += a

    def _base_a(self) -> float:
        return self._spare_a + self._jobs

    def _holds_anything(self) -> bool:
        return self._spare_a > 0 or self._jobs > 0
