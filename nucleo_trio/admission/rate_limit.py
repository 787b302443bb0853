"""A plain "N per period" account: at most ``limit`` requests in any ``per`` seconds.

``RateLimit(5, per=1.0)`` is the account for "5 requests per second": no model name, no token
amount, no subclass. It is a sliding window, the way most upstreams count: it remembers one stamp
per request it let through, and a request fits when fewer than ``limit`` stamps lie within the
last ``per`` seconds. So no interval of ``per`` seconds ever holds more than ``limit`` requests,
wherever it starts, and ``earliest_fit`` names the exact instant the next one fits (the oldest
stamp in the way plus ``per``), which admission sleeps until instead of polling.

Two optional knobs:

* ``burst``: the most requests that go at once. Without it a fresh account lets all ``limit``
  through at the same instant; with ``burst=b`` it lets ``b`` through and then one every
  ``per / limit`` seconds (a generic cell rate: a bucket of ``b`` refilled at the sustained
  rate), and the sliding window still holds.
* ``margin``: seconds each stamp stays beyond ``per``. A stamp is the instant the caller started
  (:mod:`nucleo_trio.admission._start_stamps` says why not the instant admission decided), but
  the upstream counts the instant the request *arrives*, after the caller's HTTP client has done
  its own work and the network its own: on a loaded machine that lag bunches requests that
  left evenly. With ``margin=m`` the window is ``per + m`` long, so requests that arrive up to
  ``m`` seconds late still fit the upstream's window of ``per``; the sustained rate is then
  ``limit`` per ``per + m``.

Amounts are numbers of requests: ``None`` is one (``require_rate_limiter(limit)`` with no
amount), a positive ``int`` is that many (a batch call the upstream counts as several). Anything
else (a bool, zero, a negative, a fraction, NaN, a string) is refused by name, and so is an ask
for more requests at once than the limit or the burst, when the job declares it.

The account is TIME: a request's slot comes back with the clock, never at release; a roll-back
(``give``) forgets the newest stamps at once. It never throttles itself: a 429 is logged (once a
window), since it means the upstream counts differently than the account or shares the quota
with other clients. An account that slows down under push-back is the elastic window.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ..errors import UncorrectableError, UpstreamFailure
from ._start_stamps import StartStamps
from .demand import amount_problem
from .elastic_window import format_window
from .limiter import AbstractRateLimiter, LimiterIdentity, Replenishment

__all__ = ["RateLimit", "RateLimitStatus"]

log = logging.getLogger("nucleo_trio.admission.rate_limit")


@attrs.frozen
class RateLimitStatus:
    """A rate limit at one instant: ``available`` of ``limit`` requests free in the window of
    ``per`` seconds (``margin`` beyond it); ``burst`` the most at once, or ``None``."""

    limit: int
    """Requests admitted in any window of :attr:`per` seconds."""
    per: float
    """The window's length in seconds."""
    available: int
    """Requests free in the window right now (``limit`` less the stamps in it)."""
    burst: int | None = None
    """The most requests that go at once, or ``None`` when the account sets no burst."""
    margin: float = 0.0
    """Seconds each request's slot is held beyond :attr:`per`."""

    @property
    def summary(self) -> str:
        """``requests a/L free per <per>``, then the burst and the margin when set."""
        line = f"requests {self.available}/{self.limit} free per {format_window(self.per)}"
        if self.burst is not None:
            line += f", burst {self.burst}"
        if self.margin:
            line += f", margin {format_window(self.margin)}"
        return line


def _count(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{owner}: {name} must be at least 1, got {value!r}")
    return value


def _seconds(owner: str, name: str, value: object, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{owner}: {name} must be a number of seconds, got {value!r} ({type(value).__name__})"
        )
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(
            f"{owner}: {name} must be a finite number of seconds {bound}, got {value!r}"
        )
    return seconds


class RateLimit(AbstractRateLimiter):
    """At most ``limit`` requests in any ``per`` seconds; see the module docstring.

    ``burst`` (an int from 1 to ``limit``, default ``None``: all ``limit`` at once) bounds how
    many go at once; ``margin`` (seconds, default 0) holds each request's slot that much longer
    than ``per``. ``name`` names the account in events and health (default ``"<limit> per
    <per>"``); ``clock`` is for tests. A wrong type is a :class:`TypeError`, a value out of
    range (zero, negative, NaN, an infinity, a burst above the limit) a :class:`ValueError`,
    each naming the argument.
    """

    def __init__(
        self,
        limit: int,
        per: float = 1.0,
        *,
        burst: int | None = None,
        margin: float = 0.0,
        name: str | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        owner = "RateLimit"
        self._limit = _count(owner, "limit", limit)
        self._per = _seconds(owner, "per", per, zero=False)
        if burst is not None:
            _count(owner, "burst", burst)
            if burst > limit:
                raise ValueError(
                    f"{owner}: burst must be at most the limit ({limit}), got {burst!r}; "
                    "the window never lets more than the limit through at once anyway"
                )
        self._burst = burst
        self._margin = _seconds(owner, "margin", margin, zero=True)
        if name is None:
            name = f"{limit} per {format_window(self._per)}"
        elif not isinstance(name, str) or not name.strip():
            raise ValueError(f"{owner}: name must be a non-blank str, got {name!r}")
        if not callable(clock):
            raise TypeError(f"{owner}: clock must be callable, got {type(clock).__name__}")
        self._name = name
        self._clock = clock
        self._stamps = StartStamps(name, clock)
        self._tat: float | None = None  # the burst's theoretical arrival time; None: full
        self._warned_at: float | None = None

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        """The ``name`` given, else ``"<limit> per <per>"`` (``"5 per 1 s"``)."""
        return self._name

    @property
    def limiter_category(self) -> str:
        """Always ``"rate_limit"``."""
        return "rate_limit"

    @property
    def capacity(self) -> int:
        """:attr:`limit`: the requests one window admits."""
        return self._limit

    @property
    def in_use(self) -> int:
        """Requests still inside the window (the stamps not yet ``per + margin`` old)."""
        self._stamps.expire(self._span, self._clock())
        return len(self._stamps)

    @property
    def limit(self) -> int:
        """Requests admitted in any window of :attr:`per` seconds."""
        return self._limit

    @property
    def per(self) -> float:
        """The window's length in seconds, as the upstream counts it."""
        return self._per

    @property
    def burst(self) -> int | None:
        """The most requests at once, or ``None`` (as many as the window holds)."""
        return self._burst

    @property
    def margin(self) -> float:
        """Seconds each slot is held beyond :attr:`per`."""
        return self._margin

    def replenishment(self) -> Replenishment:
        """:attr:`~nucleo_trio.admission.Replenishment.TIME`: a request's slot comes back
        with the clock, never at release; a roll-back still forgets it at once."""
        return Replenishment.TIME

    def status(self) -> RateLimitStatus:
        """The window now, as a :class:`RateLimitStatus` (expired stamps dropped first)."""
        in_use = self.in_use
        burst = None if self._burst is None else self._most_at_once()
        return RateLimitStatus(
            self._limit, self._per, max(0, self._limit - in_use), burst, self._margin
        )

    # -- arithmetic -----------------------------------------------------------------------------
    @property
    def _span(self) -> float:
        """How long a stamp holds its slot: the window plus the margin."""
        return self._per + self._margin

    @property
    def _interval(self) -> float:
        """The burst's spacing: one request every ``(per + margin) / limit`` seconds."""
        return self._span / self._limit

    def _burst_ready(self, units: int) -> float:
        """The instant ``units`` requests (at most the burst) fit the burst; in the past when
        they fit now. The same sum answers ``fits`` and ``earliest_fit``, so the instant it
        names is exactly when the ask fits."""
        if self._tat is None:
            return -math.inf
        return self._tat + (units - self._most_at_once()) * self._interval

    def _window_ready(self, units: int) -> float:
        """The instant ``units`` more requests fit the window: when the k-th oldest stamp
        leaves, k the shortfall; ``-inf`` when there is none. Read after an expiry; an instant
        already past is a stamp whose caller has yet to start (confirmed, it moves later)."""
        deficit = len(self._stamps) + units - self._limit
        if deficit <= 0:
            return -math.inf
        return self._stamps[deficit - 1] + self._span

    # -- amounts ----------------------------------------------------------------------------------
    def _requests(self, amount: object, where: str) -> int:
        """How many requests ``amount`` is: ``None`` one, a positive int itself; else refused."""
        if amount is None:
            return 1
        if type(amount) is int and amount > 0:
            return amount
        problem = amount_problem(amount)
        if problem is None:
            if isinstance(amount, int) and not isinstance(amount, bool):
                if amount > 0:
                    return int(amount)  # an int subclass (an IntEnum)
                problem = (ValueError, "zero requests is no ask")
            else:
                problem = (TypeError, f"a {type(amount).__name__} is not a whole number")
        error, reason = problem
        raise error(
            f"{self._name}: {where}: {amount!r} is not a request count ({reason}); a rate "
            "limit's amount is None for one request or a positive int"
        )

    def _units(self, amounts: Sequence[Any], where: str) -> int:
        if len(amounts) == 1 and amounts[0] is None:
            return 1  # the usual ask
        return sum(self._requests(amount, where) for amount in amounts)

    def _most_at_once(self) -> int:
        return self._limit if self._burst is None else min(self._burst, self._limit)

    def account_for(self, amount: Any) -> LimiterIdentity:
        """The account itself; an amount that is not a request count, or that asks for more
        requests at once than the limit or the burst allows, is refused here, when the job
        declares it."""
        asked = self._requests(amount, "account_for")
        if asked > self._most_at_once():
            raise ValueError(f"{self._name}: asks for {asked} requests at once, {self._bound()}")
        return self

    def _bound(self) -> str:
        if self._burst is not None and self._burst < self._limit:
            return f"but the burst is {self._burst}"
        return f"but the limit is {self._limit} per {format_window(self._per)}"

    # -- the account questions ---------------------------------------------------------------------
    def _ask(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> int | None:
        """The requests ``mine`` asks for when they fit now beside ``reserved_ahead``."""
        asked = self._units(mine, "fits/try_take")
        if asked > self._most_at_once():
            raise UncorrectableError(
                f"{self._name}: {asked} requests at once can never fit: {self._bound()}",
                llm_message=(
                    f"The job asks for {asked} requests at once on {self._name}, which never "
                    f"lets more than {self._most_at_once()} through at once."
                ),
            )
        total = asked + (self._units(reserved_ahead, "reserved_ahead") if reserved_ahead else 0)
        now = self._clock()
        self._stamps.expire(self._span, now)
        # Counted, not compared with the clock: a stamp whose caller has not started yet holds
        # its slot whatever it reads (it only ever moves later).
        if total > self._most_at_once() or len(self._stamps) + total > self._limit:
            return None
        if self._burst is not None and self._burst_ready(total) > now:
            return None
        return asked

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Whether the requests of ``mine`` and ``reserved_ahead`` together fit the window
        (with them, at most ``limit`` stamps in the last ``per + margin`` seconds) and, with
        a burst, the burst's pace. An ask of more requests at once than the limit or the
        burst is refused with :class:`~nucleo_trio.errors.UncorrectableError`; an amount that
        is not a request count raises :class:`TypeError` or :class:`ValueError`."""
        return self._ask(mine, reserved_ahead) is not None

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The check of :meth:`fits` and one stamp per request, at the instant the caller
        starts; with a burst, the burst's pace moves on by one interval per request."""
        asked = self._ask(mine, reserved_ahead)
        if asked is None:
            return False
        now = self._clock()
        self._stamps.add(now, asked)
        if self._burst is not None:
            start = now if self._tat is None or self._tat < now else self._tat
            self._tat = start + asked * self._interval
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """Roll back: forget the newest stamps, one per request, and hand the burst back its
        share. No wake: admission wakes itself after settling."""
        returned = self._stamps.drop_newest(self._units(amounts, "give"))
        if self._burst is not None and self._tat is not None:
            self._tat -= returned * self._interval

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """The instant the window (and the burst) have room for ``mine`` beside the
        reservation: exact, from the stamps alone; ``None`` when they can never hold both."""
        total = self._units(mine, "earliest_fit")
        if reserved_ahead:
            total += self._units(reserved_ahead, "reserved_ahead")
        if total > self._most_at_once():
            return None  # only the head leaving (or a larger limit) can help: an event
        now = self._clock()
        self._stamps.expire(self._span, now)
        ready = self._window_ready(total)
        if self._burst is not None:
            ready = max(ready, self._burst_ready(total))
        return now if ready < now else ready

    # -- upstream signals and configuration --------------------------------------------------------
    def on_rate_limit_error(
        self, failure: UpstreamFailure | BaseException, input: Any = None
    ) -> None:
        """Log the upstream's refusal, at most once a window; the account does not slow down."""
        now = self._clock()
        if self._warned_at is not None and now < self._warned_at + self._span:
            return
        self._warned_at = now
        log.warning(
            "%s: the upstream refused a request although the account kept %d per %s (%s); it "
            "counts differently (a margin may help) or shares the quota with other clients",
            self._name,
            self._limit,
            format_window(self._per),
            failure,
        )

    def set_limit(self, limit: int) -> None:
        """Change the limit in place, keeping the stamps; a raise wakes admission, a cut never
        does (what is in the window stays until it leaves). A burst above a lowered limit
        counts as the limit."""
        new = _count("RateLimit.set_limit", "limit", limit)
        grew = new > self._limit
        self._limit = new
        if grew:
            self._capacity_changed()
