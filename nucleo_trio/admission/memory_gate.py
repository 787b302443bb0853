"""The memory pressure gate: the account every resourceful demand meets first and takes last.

Memory is the one resource nothing declares: no job knows how much it will hold, and no caller
can be asked. So the gate does not budget; it holds a line and lets it go at a pace memory can
take. It reads memory through a :class:`~nucleo_trio.admission.memory_reader.MemoryReader`
(used bytes against a limit), once per question, and decides from the ratio:

* **The latch.** A reading at or above 95 % sets it; only a reading below 90 % clears it. While
  it is set nothing resourceful is granted, and the evaluator is told to look again in 2 s.
  It is logged once when it sets (WARNING) and once when it clears (INFO).
* **Memory's line** is the waiters admission holds on memory (it hands the gate a reader of
  their number through ``observe_held``). With nobody in it, a job starts at once at any reading
  below the latch: a lone arrival is never spaced.
* **The drain.** While the line is not empty, one job goes per *look* that finds it releasable:
  a job finished since the last release (a completion: ``give([])``), or the delay for memory
  *as it reads now* has passed since the last release, whichever comes first. Completions do not
  pile up: ten of them under the latch are one look when it clears.
* **The curve.** The delay is cubic in the level: 50 ms at and below 80 %, about 1.1 s at 85 %,
  8.9 s at 90 %, 30 s at 95 % (:func:`throttle_delay_ms`).
* **The growth penalty.** The curve reads the level; the penalty reads the *live set*, taken as
  the *floor*: the first reading, then any reading lower than the one before it (memory only
  falls when something was freed, so a reading after a fall is the live set plus what was
  allocated since). Each release commits the penalty a release at that moment would carry: the
  committed one times 2 to the points the floor gained over the last two releases (a fall
  divides it the same way), between 1 and 72 000. The wait is the curve times the penalty,
  capped at one hour; a fall of 17 points is therefore a reset from any state.
* **The re-check.** Freeing memory signals nothing, so while anything is paced or latched,
  ``earliest_fit`` is never more than 2 s away: the one timed re-check in admission.

**Promises.** The reading sees only what jobs have already allocated, so a burst admitted while
memory is low would overshoot by all of them. A job may promise the memory it expects to use
(``JobRequirements.require_memory``); the promise is a :class:`MemoryClaim`, an amount on this
same limiter that resolves to a second identity, :attr:`MemoryPressureGate.reservations`
(``memory-reserved``, RELEASE). It is taken whole with the rest of the demand and given back at
release. The bytes promised and not yet seen in the reading are reserved against the headroom
under the latch: a claim fits while ``used + unseen + claim`` stays below 95 % of the limit.
``unseen`` is what is reserved less the promises kept: the growth since ``base`` (the reading
when the reservations last went from none to some, lowered by any lower reading), in the share
of running jobs that promised, so bytes a job has allocated are not counted twice and the growth
of jobs that promised nothing keeps no promise. A job that
promises nothing is given the estimate learnt for its class, if there is one. A class is
measured on at most one of its jobs per :data:`LEARN_SECONDS`: the growth from the reading at
that job's assembly to the highest reading before its release (readings are taken at every
look, at release and whenever the scheduler is about to wait, while a measured job is in
flight), shared among the jobs running when it started and those assembled since, folded into
an exponentially weighted maximum per class (:meth:`MemoryPressureGate.estimate`).
A job with neither meets only the latch, memory's line, the drain and the penalty, and those
never see a claim: they are the questions asked with no amounts.

Orchestrators (empty demands) never meet the gate; a line held on another account is that
account's to release whatever memory reads; both are admission's doing (see
:mod:`nucleo_trio.admission.monitor`). Times are :func:`trio.current_time` seconds; delays are
whole milliseconds, as the status reports them.
"""

from __future__ import annotations

import bisect
import logging
import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._clock import whole_ms
from .._watch import AsyncValue
from ..errors import UncorrectableError
from .limiter import AbstractRateLimiter, LimiterIdentity
from .memory_reader import MemoryReader, MemoryReading, ProcessMemoryReader
from .status import MemoryPressureStatus, MemoryZone

if TYPE_CHECKING:
    from ..jobs.context import JobContext

__all__ = [
    "CRITICAL_RATIO",
    "CURVE_START_RATIO",
    "MAX_DELAY_MS",
    "MAX_PENALTY",
    "MAX_WAIT_MS",
    "MIN_DELAY_MS",
    "PENALTY_BASE",
    "RECHECK_SECONDS",
    "RECOVERY_RATIO",
    "MemoryClaim",
    "MemoryPressureGate",
    "MemoryReservations",
    "MemoryReservationsStatus",
    "throttle_delay_ms",
]

log = logging.getLogger("nucleo_trio.admission.memory")

CURVE_START_RATIO = 0.80
"""Below this level every release is spaced by the minimum delay."""
CRITICAL_RATIO = 0.95
"""A reading at or above this sets the latch."""
RECOVERY_RATIO = 0.90
"""Only a reading below this clears the latch."""
MIN_DELAY_MS = 50
"""The delay curve's floor, in milliseconds: the spacing at and below 80 %."""
MAX_DELAY_MS = 30_000
"""The delay curve's top, in milliseconds, reached at 95 %."""
PENALTY_BASE = 2.0
"""The growth penalty moves by this factor per percentage point of floor growth."""
MAX_WAIT_MS = 3_600_000
"""The penalised wait never exceeds one hour."""
MAX_PENALTY = MAX_WAIT_MS / MIN_DELAY_MS
"""72 000: the cap over the curve's minimum, so a 17-point fall (2^17 > 72 000) resets it."""
RECHECK_SECONDS = 2.0
"""While anything is paced or latched, admission looks again at least this often."""


def _points(ratio: float) -> float:
    """A ratio in percentage points, rid of binary noise (0.89 is 89 points, not 88.999...)."""
    return round(ratio * 100, 6)


def throttle_delay_ms(ratio: float) -> int:
    """The release spacing in milliseconds for a memory level ``ratio``, before the growth
    penalty.

    ``normalized = clamp((ratio - 0.80) / 0.15, 0, 1)`` and the delay is
    ``max(50, floor(30 000 * normalized**3))`` ms: 50 at and below 80 %, 1111 at 85 %, 6480 at
    89 %, 8888 at 90 %, 15 360 at 92 %, 30 000 at 95 % and above.
    """
    span = _points(CRITICAL_RATIO) - _points(CURVE_START_RATIO)
    over = min(max(_points(ratio) - _points(CURVE_START_RATIO), 0.0), span)
    # Cubed over the span's cube in one division, so 9 points over 15 is exactly 6480.
    return max(MIN_DELAY_MS, math.floor(MAX_DELAY_MS * over**3 / span**3 + 1e-9))


def _nobody() -> int:
    return 0


_MIB = 2**20
ESTIMATE_FLOOR_BYTES = _MIB
"""A learnt estimate under one MiB is noise: the job meets the gate as if it promised nothing."""
SAMPLE_SECONDS = 0.005
"""While measured jobs are in flight, the scheduler's idle moments are sampled at most this
often."""
ESTIMATE_DECAY = 0.25
"""How far one smaller observation pulls a class's estimate down (a larger one replaces it)."""
LEARN_SECONDS = 1.0
"""A job class starts a new measurement at most this often (the gate's clock): the jobs of the
class assembled meanwhile are counted in the measured one's share, not measured themselves, so
learning costs a job next to nothing however many of its class run."""


def _claim_bytes(claim: MemoryClaim, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"MemoryClaim.nbytes must be a positive int of bytes, got {value!r}")


@attrs.frozen
class MemoryClaim:
    """The memory one attempt promises: ``nbytes`` for a job of class ``job_class``, either
    ``declared`` by the job or the class's learnt estimate. Claims compare by value, so jobs of
    one class promising the same bytes have one demand signature (they wait as one group)."""

    job_class: str
    nbytes: int = attrs.field(validator=_claim_bytes)
    declared: bool = True


@attrs.frozen
class MemoryReservationsStatus:
    """The memory promises at one look, as ``gate.reservations.status()`` answers them: the
    bytes the running jobs promised (``reserved_bytes``), the part of it the memory reading
    does not show yet (``unseen_bytes``), and the limit (``max_bytes``). All in bytes."""

    reserved_bytes: int
    """The bytes promised by the jobs that hold a promise now, summed: each one's
    ``require_memory``, or for a job that declared none its class's learnt estimate, from
    its grant until it gives its resources back. A promise, not a measurement: what the jobs
    really allocated is in the reading. 0 when no job holds one."""
    unseen_bytes: int
    """The part of ``reserved_bytes`` the reading does not show yet: the promises less the
    growth in use since the promises began, of which only the promising jobs' share counts.
    A new promise fits while the bytes in use, this and the promise stay under 95 % of
    ``max_bytes``."""
    max_bytes: int
    """The memory limit in bytes, as the reader gave it at this look; 0 when the reader cannot
    tell, and then no promise is ever held back."""
    jobs: int
    """How many running jobs hold a promise."""

    @property
    def summary(self) -> str:
        """One line: ``300 MiB promised by 3 running jobs, 120 MiB not yet in the reading,
        limit 4096 MiB``."""
        return (
            f"{self.reserved_bytes / _MIB:.0f} MiB promised by {self.jobs} running jobs, "
            f"{self.unseen_bytes / _MIB:.0f} MiB not yet in the reading, "
            f"limit {self.max_bytes / _MIB:.0f} MiB"
        )


class MemoryReservations:
    """The identity a :class:`MemoryClaim` debits on its gate (``memory-reserved``): what the
    jobs running now have promised. Events and health name it; the gate keeps the figures."""

    def __init__(self, gate: MemoryPressureGate) -> None:
        self._gate = gate

    @property
    def limiter_name(self) -> str:
        return "memory-reserved"

    @property
    def limiter_category(self) -> str:
        return "memory"

    @property
    def capacity(self) -> int:
        return self._gate._last_reading().limit_bytes

    @property
    def in_use(self) -> int:
        return self._gate._reserved

    @property
    def status_indicator(self) -> str | None:
        return None

    def status(self) -> MemoryReservationsStatus:
        """A fresh reading, which moves neither the floor nor the latch (like any lower
        reading, it may lower the reservations' ``base``)."""
        gate = self._gate
        reading = gate.reader.read()
        return MemoryReservationsStatus(
            gate._reserved, gate._unseen(reading), reading.limit_bytes, gate._claims
        )

    def __repr__(self) -> str:
        return f"<MemoryReservations {self._gate._reserved} bytes>"


class _Peaks:
    """Readings taken while measured jobs are in flight, kept as a falling staircase: the highest
    reading since any earlier sample is the first step at or after it (one bisect), and a new
    reading costs what it knocks off the end."""

    __slots__ = ("_count", "_seqs", "_values")
    LIMIT = 4096

    def __init__(self) -> None:
        self._count = 0
        self._seqs: list[int] = []
        self._values: list[int] = []

    def add(self, used: int) -> int:
        """Record a reading; answers its sequence number."""
        self._count += 1
        seqs, values = self._seqs, self._values
        if values and values[-1] == used:
            # The reading of the last step again (most readings in a burst): it ends there now.
            seqs[-1] = self._count
            return self._count
        while values and values[-1] <= used:
            values.pop()
            seqs.pop()
        seqs.append(self._count)
        values.append(used)
        if len(seqs) > self.LIMIT:  # the oldest steps go: a very old start then reads low
            del seqs[: self.LIMIT // 2], values[: self.LIMIT // 2]
        return self._count

    def since(self, seq: int) -> int:
        """The highest reading from sample ``seq`` on (0 when none is kept)."""
        index = bisect.bisect_left(self._seqs, seq)
        return self._values[index] if index < len(self._values) else 0

    def clear(self) -> None:
        self._seqs.clear()
        self._values.clear()


class _Sampler(trio.abc.Instrument):
    """Samples memory for the gate each time the scheduler is about to wait, while measured
    jobs are in flight: installed when a measurement starts, it removes itself at the first
    wait that finds none (and is forgotten when its trio run ends), so the scheduler pays
    nothing for it between measurements."""

    def __init__(self, gate: MemoryPressureGate) -> None:
        self._gate = weakref.ref(gate)

    def before_io_wait(self, timeout: float) -> None:
        gate = self._gate()
        if gate is not None and gate._flights.records:
            gate._sample()
            return
        trio.lowlevel.remove_instrument(self)
        if gate is not None and gate._sampling is self:
            gate._sampling = None

    def after_run(self) -> None:
        gate = self._gate()
        if gate is not None and gate._sampling is self:
            gate._sampling = None


class _Flights:
    """The measured attempts in flight, each keyed weakly by the task that runs it (an attempt
    assembles its demand and releases its grant in its job's task): an entry goes at its
    release, or when its task ends first (an attempt refused or cancelled before its grant).

    ``records`` is a plain dict of weak references to the tasks, so counting the attempts and
    finding one are single dict operations (a :class:`weakref.WeakKeyDictionary` is the same
    map behind a layer of Python calls).
    """

    __slots__ = ("__weakref__", "_gone", "records")

    def __init__(self) -> None:
        self.records: dict[weakref.ref[trio.lowlevel.Task], list[Any]] = {}
        flights = weakref.ref(self)

        def gone(ref: weakref.ref[trio.lowlevel.Task]) -> None:
            alive = flights()
            if alive is not None:
                alive.records.pop(ref, None)

        self._gone = gone

    def key(self, task: trio.lowlevel.Task) -> weakref.ref[trio.lowlevel.Task]:
        """The key of ``task``'s attempt (a weak reference that drops the entry when the task
        goes)."""
        return weakref.ref(task, self._gone)


def _qualified(cls: type) -> str:
    """A job class as estimates are keyed: ``module.qualname``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _bytes_of(claims: Sequence[Any]) -> int:
    return sum(c.nbytes for c in claims if isinstance(c, MemoryClaim))


class MemoryPressureGate(AbstractRateLimiter):
    """The memory account (see the module docstring): name and category ``memory``, RELEASE.

    ``reader`` measures memory (``None``: a :class:`ProcessMemoryReader` with no configured
    limit, built at the first look); :meth:`use_reader` swaps it, which is how a dispatcher hands
    over the reader its plugins chose. ``clock`` reads instants and must agree with
    :func:`trio.current_time`, the clock admission sleeps on.

    ``capacity`` and ``in_use`` are the limit and the bytes in use as of the last look (they do
    not read memory again, so the figures a limiter event carries are the ones the transition
    was decided on).

    :attr:`zone` is the gate's :class:`~nucleo_trio.admission.MemoryZone` as a value tasks can
    wait on (``await gate.zone.wait_value(MemoryZone.GREEN)``).
    """

    # Made on the first read of ``zone``; until then nothing pays for it.
    _zone: AsyncValue[MemoryZone] | None = None

    def __init__(
        self,
        reader: MemoryReader | None = None,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if reader is not None:
            self._check_reader(reader)
        if not callable(clock):
            raise TypeError(
                f"MemoryPressureGate: clock must be callable, got {type(clock).__name__}"
            )
        self._reader = reader
        self._clock = clock
        self._held: Callable[[], int] = _nobody
        self._latched = False
        self._stopping = False
        self._reading: MemoryReading | None = None
        self._ratio: float | None = None  # the ratio the last look read
        self._floor: float | None = None
        # The floor in points, now, at the last release and at the release before it.
        self._floor_points: float | None = None
        self._points_at_last: float | None = None
        self._points_before_last: float | None = None
        self._committed = 1.0
        self._would_commit: float | None = None  # the penalty a release now would commit
        self._last_release: float | None = None
        self._completed = False
        # Promises (see the module docstring): bytes reserved by running claims, their number,
        # and the reading they are measured from.
        self.reservations = MemoryReservations(self)
        """The identity a :class:`MemoryClaim` debits (``memory-reserved``): the bytes the
        running jobs promised, which events and health show as an account of their own."""
        self._reserved = 0
        self._claims = 0
        self._running = 0  # resourceful jobs granted and not yet given back, claims or none
        self._base = 0
        # Learning: per class, the estimate in bytes.
        self._estimates: dict[str, float] = {}
        # Per measured attempt in flight, keyed by the task that runs it: [class, reading at
        # its start, jobs before it, sample number]; per class, when its last measurement began.
        self._flights = _Flights()
        self._measured_at: dict[str, float] = {}
        self._pending: list[list[Any]] = []  # starts waiting for the next look's reading
        self._class_names: dict[type, str] = {}
        self._sampled_at = -math.inf
        self._assemblies = 0
        self._peaks = _Peaks()
        self._sampling: _Sampler | None = None  # the sampler installed now, while measuring

    @staticmethod
    def _check_reader(reader: object) -> None:
        if not callable(getattr(reader, "read", None)):
            raise TypeError(
                f"MemoryPressureGate: reader must be a MemoryReader (with read()), "
                f"got {type(reader).__name__}"
            )

    @property
    def reader(self) -> MemoryReader:
        """What the gate measures with (the default reader is built on first use)."""
        if self._reader is None:
            self._reader = ProcessMemoryReader()
        return self._reader

    def use_reader(self, reader: MemoryReader) -> None:
        """Measure with ``reader`` from the next look on; the floor history carries over."""
        self._check_reader(reader)
        self._reader = reader

    # -- identity ---------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        """Always ``"memory"``."""
        return "memory"

    @property
    def limiter_category(self) -> str:
        """Always ``"memory"``."""
        return "memory"

    @property
    def capacity(self) -> int:
        """The memory limit in bytes as of the last look (the first read looks once)."""
        return self._last_reading().limit_bytes

    @property
    def in_use(self) -> int:
        """The bytes in use as of the last look (the first read looks once)."""
        return self._last_reading().used_bytes

    @property
    def zone(self) -> AsyncValue[MemoryZone]:
        """The zone as a trio-util ``AsyncValue``: ``CRITICAL`` while the latch is set,
        ``DRAINING`` while jobs wait in memory's line, ``GREEN`` otherwise (the zone
        :meth:`status` reports).

        ``await gate.zone.wait_value(MemoryZone.GREEN)`` returns once the pressure is gone. It is
        made on the first read; from then on it moves when a look sets or clears the latch and
        when memory's line fills or empties (:meth:`held_changed`, which a dispatcher calls on
        each of memory's transitions). Between looks it tells the latch as last read: memory is
        read when admission asks (a resourceful demand, and every 2 s while one waits) and when
        :meth:`status` is read; with nobody asking, the zone keeps its last value.
        """
        zone = self._zone
        if zone is None:
            zone = self._zone = AsyncValue(self._zone_now())
        return zone

    def held_changed(self) -> None:
        """Memory's line grew or shrank: move :attr:`zone` if it is watched (cheap otherwise)."""
        self._refresh_zone()

    def _refresh_zone(self) -> None:
        if self._zone is not None:
            self._zone.value = self._zone_now()

    def _zone_now(self) -> MemoryZone:
        if self._latched:
            return MemoryZone.CRITICAL
        return MemoryZone.DRAINING if self._held() > 0 else MemoryZone.GREEN

    @property
    def is_latched(self) -> bool:
        """Whether the latch was set at the last look (this does not look again)."""
        return self._latched

    @property
    def is_stopping(self) -> bool:
        """True once :meth:`stop` ran: every question then answers yes."""
        return self._stopping

    def observe_held(self, supplier: Callable[[], int]) -> None:
        """Admission hands over the reader of memory's line: how many jobs wait on memory,
        which decides whether a release is paced at all. A ``supplier`` that is not callable
        raises :class:`TypeError`."""
        if not callable(supplier):
            raise TypeError(
                f"MemoryPressureGate.observe_held: supplier must be callable, "
                f"got {type(supplier).__name__}"
            )
        self._held = supplier

    # -- the account ------------------------------------------------------------------------------
    def account_for(self, amount: Any) -> LimiterIdentity:
        """``None`` is memory's line (the gate itself); a :class:`MemoryClaim` debits
        :attr:`reservations`; anything else is refused, naming the value."""
        if amount is None:
            return self
        if isinstance(amount, MemoryClaim):
            return self.reservations
        raise ValueError(
            f"memory: an amount on the memory gate is a MemoryClaim (declare it with "
            f"JobRequirements.require_memory), got {type(amount).__name__} {amount!r}"
        )

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """Not latched, and releasable: no release yet, nobody held on memory, a completion
        since the last release, or the penalised delay for the reading now has passed. Reads
        memory once (a look), which may set or clear the latch.

        With claims (``mine`` not empty) the question is the reservation's instead: whether
        the bytes in use, the promised bytes not yet seen and the claims stay under 95 % of
        the limit. A claim above 95 % of the limit on its own is refused with
        :class:`~nucleo_trio.errors.UncorrectableError`.
        """
        if mine:
            return self._claim_fits(mine, reserved_ahead)
        if self._stopping:
            return True
        reading = self._look()
        # A completion since the last release lets the next job go (MEM-11, MEM-14): the
        # usual answer, without the call that works out the rest.
        return not self._latched and (self._completed or self._releasable(reading))

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        """The same check, and a release: stamp it, use up the completion, commit the penalty
        and shift the floor history. With claims, the reservation is taken instead."""
        if mine:
            if not self._claim_fits(mine, reserved_ahead):
                return False
            if self._reserved == 0:
                self._base = self._last_reading().used_bytes
            self._reserved += _bytes_of(mine)
            self._claims += 1
            return True
        if self._stopping:
            self._running += 1
            return True
        reading = self._look()
        if self._latched or not (self._completed or self._releasable(reading)):
            return False  # (a completion since the last release releases, as in fits)
        before, floor = self._points_before_last, self._floor_points
        if before is not None and floor is not None and floor != before:
            # The floor moved over the last two releases: the penalty moves with it. (Else a
            # release commits the penalty committed before.)
            self._committed = self._penalty()
        self._points_before_last = self._points_at_last
        self._points_at_last = self._floor_points
        self._would_commit = None
        self._last_release = self._clock()
        self._completed = False
        self._running += 1
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        """A completion: a moment to look, not a token to spend. It lets one job go at the
        next look that finds the latch clear, however many completions came before it, and
        runs the wake. With claims, the reservation comes back (the completion follows as
        ``give([])``)."""
        if amounts:
            self._reserved = max(0, self._reserved - _bytes_of(amounts))
            self._claims = max(0, self._claims - 1)
            self._capacity_changed()
            return
        self._completed = True
        if self._running > 0:
            self._running -= 1
        if self._flights.records:  # a measured job may be among those in flight
            self._learn_from_release()
        self._capacity_changed()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        """When to look again: in 2 s while latched (without reading memory); ``None`` when
        nothing paces (no release yet, or nobody held); now after a completion; otherwise
        the end of the delay for the reading now, but never more than 2 s away, and a delay
        that already ended as its past instant. A claim that does not fit is looked at again
        within 2 s (freeing memory signals nothing) or at the next release. ``None`` once
        stopping."""
        if mine:
            return None if self._stopping else self._clock() + RECHECK_SECONDS
        if self._stopping:
            return None
        now = self._clock()
        reading = None if self._latched else self._look()
        if reading is None or self._latched:
            return now + RECHECK_SECONDS
        last = self._last_release
        if last is None or self._held() <= 0:
            return None
        if self._completed:
            return now
        return min(last + self._delay_ms(reading.ratio) / 1000, now + RECHECK_SECONDS)

    # -- stop -------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Wave every job through from now on: shutting down, nothing is worth holding.
        Logged once at INFO; runs the wake so admission looks again. A second call does
        nothing."""
        if self._stopping:
            return
        self._stopping = True
        log.info("Memory pressure gate stopping: every job is waved through")
        self._capacity_changed()

    # -- status -----------------------------------------------------------------------------------
    @property
    def status_indicator(self) -> str | None:
        """``"blocked"`` while latched, ``"pace:<ms>ms"`` while the delay holds the next
        release back and no completion has come, else ``None``. Reads memory once (a look)."""
        reading = self._look()
        if self._latched:
            return "blocked"
        pacing = self._pacing_ms(reading.ratio, self._status_now())
        return f"pace:{pacing}ms" if pacing > 0 else None

    def status(self) -> MemoryPressureStatus:
        """The gate at one look, as a :class:`~nucleo_trio.admission.MemoryPressureStatus`:
        the reading, the floor, the zone, memory's line, the pacing and the penalty."""
        reading = self._look()
        return self._status_of(reading, self._status_now())

    def _status_now(self) -> float:
        """The clock for a status read, which may come from outside any trio run (a health
        snapshot taken before the dispatcher starts): then nothing can be pacing."""
        try:
            return self._clock()
        except RuntimeError:
            return math.inf

    def penalised_delay_ms(self, ratio: float) -> int:
        """The penalised wait in milliseconds for ``ratio`` with the penalty as it stands: the
        curve (:func:`throttle_delay_ms`) times the penalty a release now would commit, capped
        at one hour."""
        return self._delay_ms(ratio)

    @property
    def growth_penalty(self) -> float:
        """The factor a release now would commit, from 1 to 72 000, from the floor as of the
        last look: the penalty committed at the last release times 2 per percentage point the
        floor gained over the last two releases (halved per point it fell)."""
        return self._penalty()

    # -- promises -------------------------------------------------------------------------------
    def estimate(self, job_class: type | str) -> int | None:
        """The bytes a job of ``job_class`` (the class, or its ``module.qualname``) is expected
        to use, as learnt, or ``None`` before any job of it has released."""
        if isinstance(job_class, type):
            job_class = _qualified(job_class)
        learnt = self._estimates.get(job_class)
        return None if learnt is None else math.ceil(learnt)

    def claim_for(self, context: JobContext | None, declared: int | None) -> MemoryClaim | None:
        """The claim of one attempt about to meet admission (called as its demand is assembled,
        only for a demand that holds anything): ``declared`` bytes, else the estimate of its
        class, else ``None`` (the job then meets only the latch and the paced line). The
        attempt is also noted for learning: it counts in the shares of the jobs measured while
        it runs, and when its class is due a measurement its growth is measured from here to its
        release. An estimate under one MiB counts as none; a learnt one is rounded up to whole
        MiB and never more than half of what fits under the latch."""
        if context is None:
            job_class = ""
        else:
            cls = type(context.job)
            job_class = self._class_names.get(cls) or self._class_of(cls)
            self._assembled(job_class)
        if declared is not None:
            return MemoryClaim(job_class, declared, True)
        learnt = self._estimates.get(job_class)
        if learnt is None or learnt < ESTIMATE_FLOOR_BYTES:
            return None
        # Whole MiB, so a class's jobs keep one signature while the estimate wobbles; never so
        # much that the class could not run at all (a declaration may be refused, a guess not).
        limit = self._last_reading().limit_bytes
        nbytes = math.ceil(learnt / _MIB) * _MIB
        if limit > 0:
            nbytes = max(1, min(nbytes, math.floor(CRITICAL_RATIO * limit / 2)))
        return MemoryClaim(job_class, nbytes, False)

    def _assembled(self, job_class: str) -> None:
        """An attempt of ``job_class`` assembles its demand: it counts in the shares, and it is
        measured from here to its release unless a job of its class started a measurement less
        than :data:`LEARN_SECONDS` ago."""
        flights = self._flights
        records = flights.records
        key = None
        if records:
            key = flights.key(trio.lowlevel.current_task())
            records.pop(key, None)  # a re-run starts over
        now = self._clock()
        last = self._measured_at.get(job_class)
        if last is None or now - last >= LEARN_SECONDS:
            self._measured_at[job_class] = now
            if self._sampling is None:
                self._sample_while_running()
            if key is None:
                key = flights.key(trio.lowlevel.current_task())
            # Counted from the jobs already running, so a burst's growth is shared among it.
            record: list[Any] = [job_class, None, self._assemblies - self._running, 0]
            records[key] = record
            self._pending.append(record)  # its first reading is the next look's (just after)
        self._assemblies += 1

    def _class_of(self, cls: type) -> str:
        """A job class's name as estimates are keyed, noted the first time it is met."""
        name = self._class_names[cls] = _qualified(cls)
        return name

    def observe(self, job_class: str, grown_bytes: int) -> None:
        """Fold one job's growth into its class's estimate: a larger one replaces it, a smaller
        one pulls it down by :data:`ESTIMATE_DECAY` of the difference."""
        grown = float(max(0, grown_bytes))
        learnt = self._estimates.get(job_class)
        if learnt is None or grown >= learnt:
            self._estimates[job_class] = grown
        else:
            self._estimates[job_class] = learnt - (learnt - grown) * ESTIMATE_DECAY

    def _learn_from_release(self) -> None:
        records = self._flights.records
        if not records:
            return
        try:
            task = trio.lowlevel.current_task()
        except RuntimeError:  # a release from outside any trio run: nothing to learn from
            return
        start = records.pop(weakref.ref(task), None)
        if start is None:
            return
        job_class, used, assemblies, seq = start
        if used is None:
            return  # never looked at (a stopping gate asks nothing)
        try:
            self._peaks.add(self.reader.read().used_bytes)
        except Exception:  # noqa: BLE001 - learning is best effort
            return
        peak = self._peaks.since(seq)
        if not records:
            self._peaks.clear()
        # The growth to the highest reading in the job's time, shared with the jobs running
        # when it started and those assembled since (a burst's growth is all of theirs).
        self.observe(job_class, (peak - used) // max(1, self._assemblies - assemblies))

    def _sample(self) -> None:
        """One reading for the measured jobs in flight (the sampler asks only while there are
        any), at most one per :data:`SAMPLE_SECONDS`."""
        now = self._clock()
        if now - self._sampled_at < SAMPLE_SECONDS:
            return
        self._sampled_at = now
        try:
            self._peaks.add(self.reader.read().used_bytes)
        except Exception:  # noqa: BLE001 - learning is best effort
            return

    def _sample_while_running(self) -> None:
        """Jobs free what they allocated before they release, so a reading at release alone
        misses their peak: sample whenever the scheduler is about to sleep while a measured
        job is in flight (one read, about a microsecond). The gate serves one trio run at a
        time."""
        try:
            sampler = _Sampler(self)
            trio.lowlevel.add_instrument(sampler)
        except RuntimeError:  # outside a trio run
            return
        self._sampling = sampler

    def _unseen(self, reading: MemoryReading) -> int:
        """Promised bytes the reading does not show yet: the growth since ``base`` is read as
        promises kept only in the share of the running jobs that promised (the others grow too,
        and their growth keeps no promise)."""
        reserved = self._reserved
        if reserved == 0:
            return 0
        self._base = base = min(self._base, reading.used_bytes)
        claims = self._claims
        kept = (reading.used_bytes - base) * claims // max(claims, self._running, 1)
        return max(0, reserved - kept)

    def _claim_fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if self._stopping:
            return True
        reading = self._last_reading()
        if reading.limit_bytes <= 0:
            return True  # a reader that cannot tell its limit never holds anyone (MEM-02)
        ceiling = CRITICAL_RATIO * reading.limit_bytes
        need = _bytes_of(mine)
        if need > ceiling:
            claim = next(c for c in mine if isinstance(c, MemoryClaim))
            raise UncorrectableError(
                f"memory: {claim.job_class or 'the job'} promises {need} bytes, more than the "
                f"{math.floor(ceiling)} bytes under the memory latch; it could never run"
            )
        projected = reading.used_bytes + self._unseen(reading)
        return projected + need + _bytes_of(reserved_ahead) <= ceiling

    # -- internals --------------------------------------------------------------------------------
    def _look(self) -> MemoryReading:
        """Read memory once: move the floor on a fall, set or clear the latch, log either.
        The last look's reading again (a reader answers an unchanged reading as the same
        object) moves none of them: they were decided on it already."""
        reader = self._reader
        reading = (reader if reader is not None else self.reader).read()
        if reading is not self._reading:
            self._moved(reading)
        if self._flights.records:
            seq = self._peaks.add(reading.used_bytes)
            if self._pending:
                for record in self._pending:
                    record[1], record[3] = reading.used_bytes, seq
                self._pending.clear()
        return reading

    def _moved(self, reading: MemoryReading) -> None:
        """A new reading: the floor on a fall, the latch."""
        ratio = reading.ratio
        previous = self._ratio
        if previous is None or ratio < previous:
            self._floor = ratio  # a fall: the live set plus what was allocated since (MEM-21)
            self._floor_points = _points(ratio)
            self._would_commit = None
        self._ratio = ratio
        self._reading = reading
        if self._latched:
            if ratio < RECOVERY_RATIO:
                self._latched = False
                log.info("Memory latch cleared: %s", self._summary(reading))
                self._refresh_zone()
                self._capacity_changed()
        elif ratio >= CRITICAL_RATIO:
            self._latched = True
            log.warning("Memory latch set: %s", self._summary(reading))
            self._refresh_zone()

    def _last_reading(self) -> MemoryReading:
        reading = self._reading
        if reading is None:
            reading = self._look()
        return reading

    def _penalty(self) -> float:
        penalty = self._would_commit
        if penalty is None:
            before, floor = self._points_before_last, self._floor_points
            if before is None or floor is None or floor == before:
                penalty = self._committed  # no release before last, or no net growth
            else:
                moved = self._committed * math.pow(PENALTY_BASE, floor - before)
                penalty = min(MAX_PENALTY, max(1.0, moved))
            self._would_commit = penalty  # it moves only with the floor and at a release
        return penalty

    def _delay_ms(self, ratio: float) -> int:
        return min(MAX_WAIT_MS, round(throttle_delay_ms(ratio) * self._penalty()))

    def _releasable(self, reading: MemoryReading) -> bool:
        last = self._last_release
        if last is None or self._completed or self._held() <= 0:
            return True
        return self._clock() >= last + self._delay_ms(reading.ratio) / 1000

    def _pacing_ms(self, ratio: float, now: float) -> int:
        last = self._last_release
        if last is None or self._completed or self._held() <= 0:
            return 0
        ahead = last + self._delay_ms(ratio) / 1000 - now
        return whole_ms(ahead)

    def _summary(self, reading: MemoryReading) -> str:
        return self._status_of(reading, self._status_now()).summary

    def _status_of(self, reading: MemoryReading, now: float) -> MemoryPressureStatus:
        held = max(0, self._held())
        if self._latched:
            zone = MemoryZone.CRITICAL
        elif held > 0:
            zone = MemoryZone.DRAINING
        else:
            zone = MemoryZone.GREEN
        floor = self._floor if self._floor is not None else reading.ratio
        return MemoryPressureStatus(
            reading.used_bytes,
            reading.limit_bytes,
            reading.ratio,
            floor,
            zone,
            held,
            self._pacing_ms(reading.ratio, now),
            self._penalty(),
        )
