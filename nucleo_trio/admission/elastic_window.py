"""A sliding window of requests that stretches under push-back and breaks open when it must.

An elastic window admits at most ``max_requests`` requests in any ``base_window`` seconds. It
remembers one time stamp per admitted request; a stamp leaves the window when it is older than
the *effective* window, so ``earliest_fit`` can name the instant a slot frees from the clock
alone: the k-th oldest stamp plus the window, where k is the shortfall.

Upstream push-back (a 429, or an advisory "slow down") raises an adaptive *throttle* that
stretches the window: at throttle ``t`` the window is ``base_window * (1 + t)`` long, and the
stretch applies to the stamps already recorded too. Successes relax it again, slowly while
push-back is recent, faster once it has been quiet for a few minutes. Only a relaxation wakes
admission, since only a relaxation can let anyone in sooner.

When the throttle is already at its maximum and failures keep coming, slowing down further is
pointless: a *circuit breaker* opens. The circuit has three states (:class:`CircuitState`):

* HEALTHY: requests pass (subject to the window);
* BLOCKED: everyone is refused until a cooldown runs out; after that exactly one request, the
  head of admission's line, may go through as a *probe*;
* PROBING: the probe is in flight; everyone is refused until it reports. A success closes the
  circuit, a failure re-opens it with a doubled cooldown, and a probe that never reports expires
  back to BLOCKED after ``probe_timeout``.

The circuit lives in one frozen :class:`Circuit` record swapped as a whole, so a reader never
sees half a transition. trio runs one task at a time and every method here is synchronous, so
each method is one critical section by construction; the "compare" before each swap documents
the intent and keeps the code honest should a method ever gain a checkpoint.

Amounts are unit permits: each amount is one request and its value is not counted, but a bool,
NaN, an infinity or a negative is refused (:func:`~nucleo_trio.admission.gates.check_permits`).

**The bound as the upstream sees it.** A stamp is the instant its caller can have *started*, not
the instant admission decided (see :mod:`nucleo_trio.admission._start_stamps`): on the real clock
a caller resumes some time after its grant, and stamping the decision would let a burst resumed
late and the next one resumed promptly reach the upstream inside one window. What comes after
the start (the HTTP client's own steps, the network) is out of sight: ``margin`` holds every
stamp that many seconds beyond the window, so requests that reach the upstream up to ``margin``
late still fit the upstream's window.

**One push-back per burst.** The requests already in flight when the upstream starts refusing
come back refused together, and each reply says the same thing: the old pace was too fast. So a
429 counts as a new push-back (it raises the throttle and drives the breaker) only when, since
the last one counted, the window has let a request through and a whole effective window has
passed; the others are remembered for the refusal messages and logged, and change nothing else.
:meth:`ElasticWindow.record_pushback` counts one push-back directly, for a caller that knows it
is new. A failure while PROBING is always the probe's verdict.
"""

from __future__ import annotations

import enum
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, final

import attrs
import trio

from ..errors import UncorrectableError, UpstreamFailure
from ._start_stamps import StartStamps
from .gates import check_permits
from .limiter import AbstractRateLimiter, Replenishment

__all__ = [
    "TEMPLATE_SETTINGS",
    "Circuit",
    "CircuitState",
    "ElasticWindow",
    "ElasticWindowStatus",
    "format_window",
]

log = logging.getLogger("nucleo_trio.admission.elastic_window")


class CircuitState(enum.Enum):
    """The breaker's three states."""

    HEALTHY = "HEALTHY"
    """Requests pass, subject to the window."""
    BLOCKED = "BLOCKED"
    """Everyone is refused until the cooldown ends; then the head of admission's line may take
    the single probe."""
    PROBING = "PROBING"
    """The probe is in flight and everyone else is refused until it reports: a success closes
    the circuit, a failure re-opens it with a doubled cooldown."""


@attrs.frozen
class Circuit:
    """One immutable breaker record, replaced whole on every transition, so a reader never
    sees half of one. The fields that do not apply to the state are 0."""

    state: CircuitState
    """Where the breaker stands."""
    blocked_until: float = 0.0
    """The :func:`trio.current_time` instant the cooldown ends (BLOCKED, and kept while
    PROBING)."""
    cooldown: float = 0.0
    """Seconds of the current cooldown; a failed probe doubles it, up to ``max_cooldown``."""
    probe_since: float = 0.0
    """The :func:`trio.current_time` instant the probe was claimed (PROBING only)."""


HEALTHY_CIRCUIT = Circuit(CircuitState.HEALTHY)


@attrs.frozen
class ElasticWindowStatus:
    """A window's state at one instant."""

    max_requests: int
    """Requests admitted per nominal window."""
    available: int
    """Requests that fit now: ``max_requests`` less the stamps still in the window."""
    throttle: float
    """The adaptive throttle; 0 when nothing pushed back."""
    effective_window: float
    """Seconds a stamp stays in the window: ``base_window * (1 + throttle)``."""
    state: str
    """The circuit's state by name: ``"HEALTHY"``, ``"BLOCKED"`` or ``"PROBING"``."""

    @property
    def summary(self) -> str:
        """``permits a/m, throttle t, window <n>ms, circuit <S>``."""
        return (
            f"permits {self.available}/{self.max_requests}, throttle {self.throttle:.1f}, "
            f"window {round(self.effective_window * 1000)}ms, circuit {self.state}"
        )


def format_window(seconds: float) -> str:
    """Write ``seconds`` as ``N min``, ``N s`` or ``N ms``, the largest unit that is whole
    (``60.0`` is ``"1 min"``, ``1.5`` is ``"1500 ms"``); a fraction of a millisecond is
    written as it is (``"0.25 ms"``)."""
    ms = seconds * 1000
    whole_ms = round(ms)
    if math.isclose(ms, whole_ms, abs_tol=1e-6):
        if whole_ms and whole_ms % 60_000 == 0:
            return f"{whole_ms // 60_000} min"
        if whole_ms and whole_ms % 1000 == 0:
            return f"{whole_ms // 1000} s"
        return f"{whole_ms} ms"
    return f"{ms:g} ms"


def _describe(failure: object) -> str:
    """The upstream's own one-line account of a failure: its ``summary`` if it has one."""
    summary = getattr(failure, "summary", None)
    if callable(summary):
        summary = summary()
    if isinstance(summary, str) and summary:
        return summary
    return str(failure) or type(failure).__name__


def _number(owner: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


def _whole(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}: {name} must be an int, got {value!r}")
    return value


TEMPLATE_SETTINGS = frozenset(
    {
        "base_window",
        "max_requests",
        "throttle_increment",
        "throttle_decrement",
        "max_throttle",
        "successes_per_decrease",
        "recovery_minutes",
        "recovery_multiplier",
        "failures_at_max_to_block",
        "initial_cooldown",
        "max_cooldown",
        "probe_timeout",
        "margin",
    }
)
"""The class attributes a subclass may set; each is read off the class, never an instance."""


class ElasticWindow(AbstractRateLimiter):
    """A sliding request window with an adaptive throttle and a circuit breaker.

    A subclass is the template: it sets ``base_window`` (seconds) and ``max_requests`` and may
    override any tuning default below::

        class SearchApiRateLimiter(ElasticWindow):
            base_window = 60.0
            max_requests = 100

    The constructor checks the settings and raises :class:`ValueError` naming the one out of
    range (a count or a length that is not above 0, a NaN, a negative knob, a ``max_cooldown``
    below ``initial_cooldown``), or :class:`TypeError` when ``base_window`` or
    ``max_requests`` is missing. ``name`` defaults to the class name without a trailing
    ``RateLimiter`` (``SearchApi`` above); ``clock`` is for tests.

    The settings are class attributes, read off the class: a setting is fixed when the class
    is defined, from a constant or a settings object (``max_requests = SEARCH.max_requests``),
    and never depends on instance state. A setting written as a property or method is refused
    at construction, and assigning one on an instance (before or after ``super().__init__()``)
    raises :class:`AttributeError`, since the constructor's checks would never see it.
    """

    base_window: ClassVar[float]
    """Seconds in the nominal window; a subclass must set it."""
    max_requests: ClassVar[int]
    """Requests admitted per nominal window; a subclass must set it."""

    throttle_increment: ClassVar[float] = 1.0
    """How much one counted push-back adds to the throttle (default 1.0: the window grows by
    one ``base_window``)."""
    throttle_decrement: ClassVar[float] = 0.2
    """How much a relaxation takes off the throttle (default 0.2)."""
    max_throttle: ClassVar[float] = 9.0
    """The highest throttle (default 9.0: a window ten times the base)."""
    successes_per_decrease: ClassVar[int] = 3
    """Successes per relaxation while push-back is recent (default 3)."""
    recovery_minutes: ClassVar[float] = 5
    """After this many minutes without pressure every success relaxes the throttle."""
    recovery_multiplier: ClassVar[float] = 2.5
    """A quiet success takes ``throttle_decrement * recovery_multiplier`` off."""
    failures_at_max_to_block: ClassVar[int] = 3
    """Push-backs counted at the maximum throttle, in a row, that open the circuit (default 3;
    a success resets the streak)."""
    initial_cooldown: ClassVar[float] = 30.0
    """Seconds the circuit stays BLOCKED when it first opens (default 30)."""
    max_cooldown: ClassVar[float] = 3600.0
    """The longest cooldown, in seconds, however often probes fail (default one hour)."""
    probe_timeout: ClassVar[float | None] = None
    """Seconds a probe may go without a verdict; ``None`` means ``max_cooldown``."""
    margin: ClassVar[float] = 0.0
    """Seconds every stamp stays beyond the effective window: the lag between a caller's start
    and its request's arrival that the upstream's window must still absorb."""

    def __init__(
        self, name: str | None = None, *, clock: Callable[[], float] = trio.current_time
    ) -> None:
        cls = type(self)
        owner = cls.__name__
        for required in ("base_window", "max_requests"):
            if not hasattr(cls, required):
                raise TypeError(f"{owner} must set the class attribute {required!r}")
        for setting in TEMPLATE_SETTINGS:
            if hasattr(type(inspect.getattr_static(cls, setting, None)), "__get__"):
                raise TypeError(
                    f"{owner}.{setting} must be a class attribute holding a constant or a "
                    "settings value, not a property or method: the settings are read off the "
                    "class, before any instance state exists"
                )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"{owner}: name must be a non-empty string, got {name!r}")
        if not callable(clock):
            raise TypeError(f"{owner}: clock must be callable, got {type(clock).__name__}")
        # EW-02: the eight bounds, each error naming the value it refuses.
        max_requests = _whole(owner, "max_requests", cls.max_requests)
        base_window = _number(owner, "base_window", cls.base_window)
        initial_cooldown = _number(owner, "initial_cooldown", cls.initial_cooldown)
        max_cooldown = _number(owner, "max_cooldown", cls.max_cooldown)
        failures = _whole(owner, "failures_at_max_to_block", cls.failures_at_max_to_block)
        successes = _whole(owner, "successes_per_decrease", cls.successes_per_decrease)
        max_throttle = _number(owner, "max_throttle", cls.max_throttle)
        probe_timeout = (
            max_cooldown
            if cls.probe_timeout is None
            else _number(owner, "probe_timeout", cls.probe_timeout)
        )
        positives: dict[str, float] = {
            "max_requests": max_requests,
            "base_window": base_window,
            "initial_cooldown": initial_cooldown,
            "failures_at_max_to_block": failures,
            "successes_per_decrease": successes,
            "probe_timeout": probe_timeout,
        }
        for key, value in positives.items():
            if value <= 0:
                raise ValueError(f"{owner}: {key} must be > 0, got {value!r}")
        if max_throttle < 0:
            raise ValueError(f"{owner}: max_throttle must be >= 0, got {max_throttle!r}")
        # The tuning knobs EW-02 does not bound still move the throttle: a NaN or a negative
        # there would leave it NaN or running backwards.
        for knob in ("throttle_increment", "throttle_decrement", "recovery_minutes", "margin"):
            if _number(owner, knob, getattr(cls, knob)) < 0:
                raise ValueError(f"{owner}: {knob} must be >= 0, got {getattr(cls, knob)!r}")
        if _number(owner, "recovery_multiplier", cls.recovery_multiplier) < 0:
            raise ValueError(
                f"{owner}: recovery_multiplier must be >= 0, got {cls.recovery_multiplier!r}"
            )
        if max_cooldown < initial_cooldown:
            raise ValueError(
                f"{owner}: max_cooldown must be >= initial_cooldown ({initial_cooldown!r}), "
                f"got {max_cooldown!r}"
            )
        self._name = name if name is not None else self._default_name()
        self._clock = clock
        self._probe_timeout = probe_timeout
        self._margin = float(cls.margin)
        self._stamps = StartStamps(self._name, clock)
        self.throttle = 0.0
        """The adaptive throttle, from 0 to :attr:`max_throttle`: push-back raises it,
        successes relax it, and the window is ``base_window * (1 + throttle)`` long."""
        self._successes = 0
        self._failures_at_max = 0
        self._last_pressure: float | None = None
        self._last_failure: object | None = None
        self._circuit = HEALTHY_CIRCUIT
        self._counted_at: float | None = None  # when the last push-back was counted
        self._granted_since_count = False  # whether a request went through since then
        self.coalesced = 0
        """How many 429s counted with an earlier push-back instead of as their own."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TEMPLATE_SETTINGS:
            raise AttributeError(
                f"{type(self).__name__}.{name} is a template setting: set it on the class "
                "(a constant or a settings value), not on an instance"
            )
        super().__setattr__(name, value)

    @classmethod
    def _default_name(cls) -> str:
        """The class name without a trailing ``RateLimiter`` (EW-06)."""
        trimmed = cls.__name__.removesuffix("RateLimiter")
        return trimmed or cls.__name__

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        """The name given to the constructor, else the class name without a trailing
        ``RateLimiter``."""
        return self._name

    @property
    @final
    def limiter_category(self) -> str:
        """Always ``"elastic_window"``; final."""
        return "elastic_window"

    @property
    def capacity(self) -> int:
        """:attr:`max_requests`: the requests one window admits."""
        return self.max_requests

    @property
    def in_use(self) -> int:
        """Requests still in the window: the stamps younger than :attr:`effective_window`
        plus ``margin``."""
        self._cleanup()
        return len(self._stamps)

    @property
    @final
    def requires_http_connection(self) -> bool:
        """Always ``True``, and final: every window fronts an HTTP upstream, so its jobs also
        take a permit on the dispatcher's ``http`` gate."""
        return True

    @final
    def replenishment(self) -> Replenishment:
        """TIME, and final: a window's slot comes back with the clock, never at release."""
        return Replenishment.TIME

    @property
    def circuit(self) -> Circuit:
        """The current breaker record."""
        return self._circuit

    @property
    def state(self) -> CircuitState:
        """The breaker's state (:attr:`circuit`'s ``state``)."""
        return self._circuit.state

    @property
    def effective_window(self) -> float:
        """Seconds a stamp stays in the window: ``base_window * (1 + throttle)``."""
        return self.base_window * (1 + self.throttle)

    @property
    def probe_timeout_seconds(self) -> float:
        """The resolved probe timeout (``max_cooldown`` unless the subclass set one)."""
        return self._probe_timeout

    @property
    def cooldown_remaining(self) -> float:
        """Seconds until the cooldown ends; 0 unless BLOCKED, and 0 once it has ended."""
        circuit = self._circuit
        if circuit.state is not CircuitState.BLOCKED:
            return 0.0
        return max(0.0, circuit.blocked_until - self._clock())

    @property
    def status_indicator(self) -> str | None:
        """``"blocked"`` or ``"probing"`` while the circuit is open, else
        ``"throttle:<1 + throttle>x"`` (one decimal) while throttled, else ``None``."""
        state = self._circuit.state
        if state is CircuitState.BLOCKED:
            return "blocked"
        if state is CircuitState.PROBING:
            return "probing"
        if self.throttle > 0:
            return f"throttle:{1 + self.throttle:.1f}x"
        return None

    def status(self) -> ElasticWindowStatus:
        """The window now, as an :class:`ElasticWindowStatus` (expired stamps dropped first)."""
        self._cleanup()
        return ElasticWindowStatus(
            self.max_requests,
            self.max_requests - len(self._stamps),
            self.throttle,
            self.effective_window,
            self._circuit.state.name,
        )

    # -- the window -------------------------------------------------------------------------------
    def _cleanup(self) -> None:
        """Drop the stamps that have left the window (the effective window plus the margin).

        A stamp leaves at exactly ``stamp + effective_window + margin``, the instant
        ``earliest_fit`` names, so admission woken at that instant finds the slot free.
        """
        self._stamps.expire(self.effective_window + self._margin, self._clock())

    def _refuse_alone(self, mine: Sequence[Any]) -> int:
        check_permits(self._name, mine, "fits/try_take")
        asked = len(mine)
        if asked > self.max_requests:
            raise UncorrectableError(
                f"{self._name}: {asked} requests at once can never fit a window of "
                f"{self.max_requests} requests / {format_window(self.base_window)}"
            )
        return asked

    def _nominal_rate(self) -> str:
        return f"{self.max_requests} requests / {format_window(self.base_window)}"

    def _with_failure(self, message: str) -> str:
        if self._last_failure is None:
            return message
        return f"{message} Last upstream response: {_describe(self._last_failure)}"

    def _cooldown_refusal(self, remaining: float) -> UncorrectableError:
        return UncorrectableError(
            self._with_failure(
                f"{self._name} ({self._nominal_rate()}) is blocked after sustained rate "
                f"limiting. Cooldown is active: about {math.ceil(remaining)} s remain."
            )
        )

    def _probe_refusal(self) -> UncorrectableError:
        return UncorrectableError(
            self._with_failure(
                f"{self._name} ({self._nominal_rate()}) is recovering from sustained rate "
                "limiting: a single probe request tests the upstream before anyone else goes."
            )
        )

    def _check_circuit(self, reserved_ahead: Sequence[Any]) -> Circuit:
        """Pass or refuse by the breaker (EW-19), expiring a verdictless probe (EW-25)."""
        while True:
            circuit = self._circuit
            if circuit.state is CircuitState.HEALTHY:
                return circuit
            now = self._clock()
            if circuit.state is CircuitState.BLOCKED:
                if now < circuit.blocked_until:
                    raise self._cooldown_refusal(circuit.blocked_until - now)
                if reserved_ahead:
                    raise self._probe_refusal()  # only the head may probe
                return circuit
            if now - circuit.probe_since >= self._probe_timeout:
                expired = attrs.evolve(circuit, state=CircuitState.BLOCKED, probe_since=0.0)
                if self._circuit is circuit:
                    self._circuit = expired
                    log.warning(
                        "%s: the probe gave no verdict within %s; back to BLOCKED",
                        self._name,
                        format_window(self._probe_timeout),
                    )
                continue  # ask again against the record now in place
            raise self._probe_refusal()

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Whether ``stamps + len(mine) + len(reserved_ahead) <= max_requests``; each amount
        is one request, whatever its value.

        Refuses with :class:`~nucleo_trio.errors.UncorrectableError` an ask of more requests
        than :attr:`max_requests`, and, by the circuit: everyone while BLOCKED and cooling
        down (the message says how long remains), everyone while PROBING, and once the
        cooldown is over every asker but the head (only the head may probe). A probe that
        gave no verdict within ``probe_timeout`` is expired back to BLOCKED first.
        """
        asked = self._refuse_alone(mine)
        self._check_circuit(reserved_ahead)
        self._cleanup()
        return len(self._stamps) + asked + len(reserved_ahead) <= self.max_requests

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The check of :meth:`fits` and one stamp per request, at the instant the caller
        starts. On a BLOCKED circuit whose cooldown is over, the head's take claims the single
        probe (the circuit turns PROBING); a full window claims nothing and answers
        ``False``."""
        asked = self._refuse_alone(mine)
        circuit = self._check_circuit(reserved_ahead)
        self._cleanup()
        if len(self._stamps) + asked + len(reserved_ahead) > self.max_requests:
            return False  # a full window claims no probe (EW-21)
        now = self._clock()
        if circuit.state is CircuitState.BLOCKED:
            if self._circuit is not circuit:
                return False  # lost the claim to another asker
            self._circuit = attrs.evolve(circuit, state=CircuitState.PROBING, probe_since=now)
            log.info("%s: cooldown over; claimed the single probe", self._name)
        self._stamps.add(now, asked)
        self._granted_since_count = True
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """Roll back: drop the newest stamps, one per amount; a probe in flight is undone
        (PROBING goes back to BLOCKED, its cooldown kept).

        The newest go because the oldest are what deadlines are computed from. No wake: the
        account settles inside admission, which looks again afterwards.
        """
        check_permits(self._name, amounts, "give")
        self._stamps.drop_newest(len(amounts))
        circuit = self._circuit
        if circuit.state is CircuitState.PROBING:
            self._circuit = attrs.evolve(circuit, state=CircuitState.BLOCKED, probe_since=0.0)

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """When the k-th oldest stamp leaves the window, k the shortfall; now when nothing is
        short, ``None`` when ``mine`` and the reservation together exceed
        :attr:`max_requests`. The circuit is not consulted."""
        asked = len(mine) + len(reserved_ahead)
        if asked > self.max_requests:
            return None
        self._cleanup()
        deficit = len(self._stamps) + asked - self.max_requests
        if deficit <= 0:
            return self._clock()
        # The same sum _cleanup compares, so the slot is free at exactly this instant.
        return self._stamps[deficit - 1] + (self.effective_window + self._margin)

    # -- upstream signals -------------------------------------------------------------------------
    def _raise_throttle(self) -> None:
        self.throttle = min(self.throttle + self.throttle_increment, self.max_throttle)
        self._last_pressure = self._clock()

    def on_rate_limit_error(
        self, failure: UpstreamFailure | BaseException, input: Any = None
    ) -> None:
        """The upstream refused a request: remember why, and count it as a push-back unless it
        is one more reply of a burst already counted; never wakes anyone.

        It counts (:meth:`record_pushback`) when no push-back was counted yet, or when the
        window has let a request through since the last one counted and a whole effective
        window has passed since; while PROBING it is the probe's verdict and always counts.
        Otherwise it is one of the requests that were in flight at the old pace, and only
        :attr:`coalesced` and the remembered failure change.
        """
        self._last_failure = failure
        now = self._clock()
        counted_at = self._counted_at
        if (
            counted_at is not None
            and self._circuit.state is not CircuitState.PROBING
            and (not self._granted_since_count or now < counted_at + self.effective_window)
        ):
            self.coalesced += 1
            log.info(
                "%s upstream failure, counted with the push-back %.3f s ago: %s",
                self._name,
                now - counted_at,
                _describe(failure),
            )
            return
        log.warning("%s upstream failure: %s", self._name, _describe(failure))
        self.record_pushback()

    def record_pushback(self) -> None:
        """Count one push-back: raise the throttle and drive the breaker, whatever came
        before it. :meth:`on_rate_limit_error` calls it for each 429 that is news; call it
        directly to count one that is. Never wakes anyone.

        While HEALTHY at the maximum throttle it adds to the streak, and the
        :attr:`failures_at_max_to_block`-th opens the circuit for :attr:`initial_cooldown`
        seconds. While PROBING it re-opens the circuit with the cooldown doubled (at least
        :attr:`initial_cooldown`, at most :attr:`max_cooldown`). While BLOCKED only the
        throttle moves.
        """
        now = self._clock()
        self._counted_at = now
        self._granted_since_count = False
        self._raise_throttle()
        circuit = self._circuit
        if circuit.state is CircuitState.HEALTHY:
            if self.throttle < self.max_throttle:
                return
            self._failures_at_max += 1
            if self._failures_at_max >= self.failures_at_max_to_block:
                self._failures_at_max = 0
                cooldown = float(self.initial_cooldown)
                self._circuit = Circuit(CircuitState.BLOCKED, now + cooldown, cooldown)
                log.warning(
                    "%s: circuit open after %d push-backs at max throttle; cooling down %s",
                    self._name,
                    self.failures_at_max_to_block,
                    format_window(cooldown),
                )
        elif circuit.state is CircuitState.PROBING:
            cooldown = min(
                max(2 * circuit.cooldown, float(self.initial_cooldown)), float(self.max_cooldown)
            )
            self._circuit = Circuit(CircuitState.BLOCKED, now + cooldown, cooldown)
            log.warning(
                "%s: the probe failed; cooling down %s", self._name, format_window(cooldown)
            )
        # BLOCKED: the throttle rose above; the circuit keeps its cooldown (EW-24).

    def on_advisory_pressure(self) -> None:
        """Raise the throttle by :attr:`throttle_increment`, as a counted push-back would, for
        an upstream that asks to slow down without refusing; the circuit and the streak stay
        as they are. Never wakes anyone."""
        self._raise_throttle()

    def on_success(self, input: Any = None) -> None:
        """Reset the streak, close the circuit after a good probe, and relax the throttle.

        While push-back is recent every :attr:`successes_per_decrease`-th success takes
        :attr:`throttle_decrement` off; once :attr:`recovery_minutes` have passed without
        push-back every success takes ``throttle_decrement * recovery_multiplier`` off. A
        relaxation or a closed circuit runs the wake, once.
        """
        self._failures_at_max = 0
        woke = False
        circuit = self._circuit
        if circuit.state is CircuitState.PROBING:
            self._circuit = HEALTHY_CIRCUIT
            log.info("%s: the probe succeeded; circuit closed", self._name)
            woke = True
        if self.throttle > 0:
            self._successes += 1
            now = self._clock()
            quiet = (
                self._last_pressure is None
                or now - self._last_pressure >= self.recovery_minutes * 60
            )
            step: float | None = None
            if quiet:
                step = self.throttle_decrement * self.recovery_multiplier
            elif self._successes % self.successes_per_decrease == 0:
                step = self.throttle_decrement
            if step is not None:
                self._successes = 0
                before = self.throttle
                self.throttle = max(0.0, self.throttle - step)
                woke = woke or self.throttle < before
        if woke:
            self._capacity_changed()
