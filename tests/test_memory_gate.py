"""The memory pressure gate on its own: the latch, the drain, the curve, the growth penalty and
the status (MEM-01..33, MEM-50), with a scripted reader and a hand-driven clock.

The heap is 100 GB (decimal), so a reading of 89 GB is a ratio of exactly 0.89. The clock is
the gate's ``clock`` seam moved by hand (virtual time), so instants can be checked to the
nanosecond.
"""

from __future__ import annotations

import logging

import pytest

from nucleo_trio.admission import (
    MemoryPressureGate,
    MemoryPressureStatus,
    MemoryReading,
    MemoryZone,
    Replenishment,
)
from nucleo_trio.admission.memory_gate import (
    CRITICAL_RATIO,
    CURVE_START_RATIO,
    MAX_DELAY_MS,
    MAX_PENALTY,
    MAX_WAIT_MS,
    MIN_DELAY_MS,
    PENALTY_BASE,
    RECHECK_SECONDS,
    RECOVERY_RATIO,
    throttle_delay_ms,
)

GB = 10**9
NS = 1e-9


class FakeHeap:
    """A MemoryReader over a scripted heap of ``limit`` bytes; counts its reads."""

    def __init__(self, ratio: float = 0.5, limit: int = 100 * GB) -> None:
        self.limit = limit
        self.used = round(ratio * limit)
        self.reads = 0

    def set(self, ratio: float) -> None:
        self.used = round(ratio * self.limit)

    def read(self) -> MemoryReading:
        self.reads += 1
        return MemoryReading(self.used, self.limit)


class Clock:
    """A clock moved by hand, in seconds."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Rig:
    """A gate over a fake heap and a hand clock, with memory's line set by the test."""

    def __init__(self, ratio: float = 0.5, held: int = 0) -> None:
        self.heap = FakeHeap(ratio)
        self.clock = Clock()
        self.held = held
        self.wakes = 0
        self.gate = MemoryPressureGate(self.heap, clock=self.clock)
        self.gate.observe_held(lambda: self.held)
        self.gate.on_capacity_change(self._wake)

    def _wake(self) -> None:
        self.wakes += 1

    def at(self, ratio: float) -> Rig:
        self.heap.set(ratio)
        return self

    def fits(self) -> bool:
        return self.gate.fits([], [])

    def take(self) -> bool:
        return self.gate.try_take([], [])

    def earliest(self) -> float | None:
        return self.gate.earliest_fit([], [])

    def look(self, ratio: float) -> MemoryPressureStatus:
        self.heap.set(ratio)
        return self.gate.status()

    def release_at(self, floor: float) -> float:
        """A release whose floor is ``floor``: read just above it, then at it (a fall), then
        take with nobody held, so the take always goes. Answers the penalty it committed."""
        held, self.held = self.held, 0
        self.look(min(floor + 0.01, 0.949))
        self.look(floor)
        committed = self.gate.growth_penalty
        assert self.take()
        self.held = held
        return committed

    def delay(self, ratio: float) -> float:
        """The penalised delay for ``ratio`` in seconds, as the gate works it out now."""
        return self.gate.penalised_delay_ms(ratio) / 1000


# --------------------------------------------------------------------------------------------
# Constants and identity
# --------------------------------------------------------------------------------------------


def test_the_constants() -> None:
    """MEM-01: the curve from 0.80, the latch at 0.95 cleared below 0.90, spacing 50 ms to
    30 s, base 2, the wait capped at one hour and the penalty at 72 000, re-check 2 s."""
    assert (CURVE_START_RATIO, CRITICAL_RATIO, RECOVERY_RATIO) == (0.80, 0.95, 0.90)
    assert (MIN_DELAY_MS, MAX_DELAY_MS) == (50, 30_000)
    assert PENALTY_BASE == 2.0
    assert MAX_WAIT_MS == 3_600_000 and MAX_PENALTY == 72_000
    assert RECHECK_SECONDS == 2.0


def test_the_gate_is_the_memory_account() -> None:
    """MEM-02: named and categorised memory, capacity the limit and in use the bytes used (as
    of the last look), the ratio used/max or 0 for no limit, RELEASE, and the upstream verdicts
    do nothing."""
    rig = Rig(0.42)
    gate = rig.gate
    assert gate.limiter_name == "memory" and gate.limiter_category == "memory"
    assert gate.account_for(None) is gate
    assert gate.capacity == 100 * GB and gate.in_use == 42 * GB
    assert gate.replenishment() is Replenishment.RELEASE
    assert gate.status().usage_ratio == pytest.approx(0.42)
    gate.on_success()
    gate.on_rate_limit_error(RuntimeError("429"))
    assert gate.status().growth_penalty == 1 and not gate.is_latched
    assert MemoryReading(5, 0).ratio == 0.0
    nothing = MemoryPressureGate(FakeHeapWithoutLimit(), clock=rig.clock)
    assert nothing.fits([], []) and nothing.status().zone is MemoryZone.GREEN


class FakeHeapWithoutLimit:
    def read(self) -> MemoryReading:
        return MemoryReading(10 * GB, 0)


def test_a_reader_must_read() -> None:
    """MEM-02: the seam is a reader with read(); anything else is refused naming its type."""
    with pytest.raises(TypeError, match="MemoryReader"):
        MemoryPressureGate(object())  # type: ignore[arg-type]
    gate = MemoryPressureGate(FakeHeap())
    with pytest.raises(TypeError, match="int"):
        gate.use_reader(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="clock"):
        MemoryPressureGate(FakeHeap(), clock=3.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="supplier"):
        gate.observe_held(7)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The curve
# --------------------------------------------------------------------------------------------


def test_the_cubic_curve() -> None:
    """MEM-03, MEM-04: 50 ms at and below 0.80, about 1.1 s at 0.85 and 8.9 s at 0.90, rising
    steadily, exactly 30 s at 0.95 and above."""
    assert throttle_delay_ms(0.50) == 50 and throttle_delay_ms(0.80) == 50
    assert throttle_delay_ms(0.0) == 50
    assert 1000 <= throttle_delay_ms(0.85) <= 1300
    assert 8500 <= throttle_delay_ms(0.90) <= 9200
    assert throttle_delay_ms(0.94) == pytest.approx(24_391, abs=1)
    assert throttle_delay_ms(0.948) == pytest.approx(28_815, abs=1)
    assert throttle_delay_ms(0.95) == 30_000 and throttle_delay_ms(0.99) == 30_000
    assert throttle_delay_ms(0.83) == pytest.approx(239, abs=1)
    assert throttle_delay_ms(0.86) == pytest.approx(1919, abs=1)
    assert throttle_delay_ms(0.88) == pytest.approx(4551, abs=1)
    assert throttle_delay_ms(0.89) == 6480 and throttle_delay_ms(0.92) == 15_360
    rising = [throttle_delay_ms(r / 100) for r in range(85, 95)]
    assert rising == sorted(rising) and len(set(rising)) == len(rising)
    for ratio in (0.81, 0.87, 0.91, 0.93):
        normalized = min(max((ratio - 0.80) / 0.15, 0.0), 1.0)
        assert throttle_delay_ms(ratio) == pytest.approx(
            max(50, int(30_000 * normalized**3)), abs=1
        )


# --------------------------------------------------------------------------------------------
# The latch
# --------------------------------------------------------------------------------------------


def test_every_question_reads_once() -> None:
    """MEM-05: fits, try_take, non-latched earliest_fit, status_indicator and status read the
    heap exactly once each; a latched earliest_fit reads nothing."""
    rig = Rig(0.5, held=2)
    for question in (
        rig.fits,
        rig.take,
        rig.earliest,
        lambda: rig.gate.status_indicator,
        rig.gate.status,
    ):
        before = rig.heap.reads
        question()
        assert rig.heap.reads == before + 1
    rig.look(0.96)
    before = rig.heap.reads
    assert rig.earliest() == rig.clock.now + 2.0
    assert rig.heap.reads == before


def test_the_latch_sets_at_95_and_clears_only_below_90(caplog: pytest.LogCaptureFixture) -> None:
    """MEM-06: set at >= 0.95 and logged once at WARNING, "Memory latch set: <summary>";
    cleared only below 0.90 and logged once at INFO, "Memory latch cleared: <summary>";
    readings in between change nothing and log nothing; 0.90 does not clear, 0.899 does."""
    caplog.set_level(logging.INFO, logger="nucleo_trio.admission.memory")
    rig = Rig(0.94)
    assert rig.fits() and not rig.gate.is_latched
    rig.at(0.95)
    assert not rig.fits() and rig.gate.is_latched
    for ratio in (0.99, 0.94, 0.92, 0.90, 0.95, 0.90):
        assert not rig.at(ratio).fits(), ratio
    sets = [r for r in caplog.records if r.getMessage().startswith("Memory latch set: ")]
    assert len(sets) == 1 and sets[0].levelno == logging.WARNING
    assert "zone CRITICAL" in sets[0].getMessage() and "95.0%" in sets[0].getMessage()
    assert not any("cleared" in r.getMessage() for r in caplog.records)
    assert rig.at(0.899).fits() and not rig.gate.is_latched
    clears = [r for r in caplog.records if r.getMessage().startswith("Memory latch cleared: ")]
    assert len(clears) == 1 and clears[0].levelno == logging.INFO
    assert "89.9%" in clears[0].getMessage()
    assert rig.at(0.93).fits()
    assert len(caplog.records) == 2


def test_a_latched_gate_refuses_and_asks_for_a_look_in_two_seconds() -> None:
    """MEM-07: while latched fits and try_take are false, earliest_fit is now + 2 s, the
    indicator is blocked and the zone CRITICAL."""
    rig = Rig(0.97, held=1)
    assert not rig.fits() and not rig.take()
    assert rig.earliest() == rig.clock.now + 2.0
    assert rig.gate.status_indicator == "blocked"
    assert rig.gate.status().zone is MemoryZone.CRITICAL


def test_a_completion_under_the_latch_releases_nobody() -> None:
    """MEM-08: a give under the latch lets nobody through; when the latch clears exactly one
    goes (using up the completion) and the next waits."""
    rig = Rig(0.5, held=4)
    rig.release_at(0.5)
    rig.at(0.96)
    for _ in range(3):
        rig.gate.give([])
        assert not rig.fits() and not rig.take()
    rig.clock.advance(0.001)
    rig.at(0.89)
    assert rig.take()
    assert not rig.fits() and not rig.take()


def test_the_latch_clears_into_the_drain_not_a_flood() -> None:
    """MEM-09: at 0.96 with 5 held the take is false; at 0.89 one take is true, the next false,
    and earliest_fit is later than now."""
    rig = Rig(0.5, held=0)
    rig.release_at(0.5)
    rig.held = 5
    assert not rig.at(0.96).take()
    rig.clock.advance(60)
    assert rig.at(0.89).take()
    assert not rig.take()
    earliest = rig.earliest()
    assert earliest is not None and earliest > rig.clock.now


# --------------------------------------------------------------------------------------------
# The drain
# --------------------------------------------------------------------------------------------


def test_memorys_line_is_what_admission_says_it_is() -> None:
    """MEM-10: observe_held installs the count of memory's line; the default is nobody."""
    gate = MemoryPressureGate(FakeHeap(0.9), clock=Clock())
    assert gate.try_take([], []) and gate.try_take([], [])  # nobody held: nothing paces
    assert gate.status().held_on_memory == 0
    line = [3]
    gate.observe_held(lambda: line[0])
    assert gate.status().held_on_memory == 3
    assert not gate.fits([], [])
    line[0] = 0
    assert gate.fits([], [])


def test_fits_is_unlatched_and_releasable() -> None:
    """MEM-11: releasable is any of: no release yet, nobody held, a completion since the last
    release, or the penalised delay for the reading now has passed."""
    rig = Rig(0.9, held=3)
    assert rig.fits()  # no release yet
    assert rig.take()
    assert not rig.fits()
    rig.held = 0
    assert rig.fits()  # nobody held
    rig.held = 3
    rig.gate.give([])
    assert rig.fits()  # a completion
    assert rig.take()
    rig.clock.advance(rig.delay(0.9))
    assert rig.fits()  # the delay passed
    rig.at(0.96)
    rig.gate.give([])
    assert not rig.fits()  # latched, whatever else holds


def test_a_lone_arrival_is_never_spaced() -> None:
    """MEM-12: with nobody held on memory, takes in a row succeed at 0.50, 0.80, 0.90 and
    0.94, and earliest_fit is None."""
    rig = Rig(0.5, held=0)
    for ratio in (0.50, 0.80, 0.90, 0.94):
        rig.at(ratio)
        for _ in range(5):
            assert rig.take(), ratio
        assert rig.earliest() is None


def test_a_take_stamps_uses_the_completion_commits_and_shifts() -> None:
    """MEM-13: a successful take stamps the release, uses up a completion, commits the
    penalty and shifts the floor history."""
    rig = Rig(0.80, held=2)
    rig.release_at(0.80)
    rig.gate.give([])
    rig.clock.advance(1)
    rig.release_at(0.83)  # uses the completion; history (0.80, 0.83)
    assert not rig.fits()  # no completion left, the delay started at this release
    assert rig.gate.status().pacing_ms == rig.gate.penalised_delay_ms(0.83)
    assert rig.gate.growth_penalty == pytest.approx(8)  # 0.83 over 0.80: 3 points
    rig.release_at(0.83)  # commits 8; history (0.83, 0.83)
    assert rig.gate.growth_penalty == pytest.approx(8)
    rig.look(0.86)  # a rise: the floor stays
    assert rig.gate.growth_penalty == pytest.approx(8)


def test_completions_do_not_accumulate() -> None:
    """MEM-14: a give marks a completion and runs the wake; three gives let exactly one
    through."""
    rig = Rig(0.9, held=3)
    assert rig.take()
    wakes = rig.wakes
    for _ in range(3):
        rig.gate.give([])
    assert rig.wakes == wakes + 3
    assert rig.take()
    assert not rig.take()


def test_whichever_comes_first() -> None:
    """MEM-15: at 0.90 with 3 held the first take goes at once and the next waits until
    exactly last + delay(0.90): false 1 ns before, true at the delay; a completion instead
    lets it go at once."""
    rig = Rig(0.9, held=3)
    start = rig.clock.now
    assert rig.take()
    delay = throttle_delay_ms(0.90) / 1000
    rig.clock.now = start + delay - NS
    assert not rig.fits()
    rig.clock.now = start + delay
    assert rig.fits() and rig.take()
    second = rig.clock.now
    rig.clock.advance(0.5)
    assert not rig.fits()
    rig.gate.give([])
    assert rig.fits() and rig.take()
    assert rig.clock.now < second + delay


def test_the_delay_is_the_heap_now() -> None:
    """MEM-16: released at 0.90, after the 0.85 delay fits is still false at 0.90 and becomes
    true when the reading drops to 0.85."""
    rig = Rig(0.9, held=2)
    assert rig.take()
    rig.clock.advance(throttle_delay_ms(0.85) / 1000)
    assert not rig.fits()
    assert rig.at(0.85).fits()


def test_below_the_curve_the_line_still_drains_one_at_a_time() -> None:
    """MEM-17: at 0.50 with 25 held the head goes, the next is false and earliest_fit is
    start + 50 ms."""
    rig = Rig(0.5, held=25)
    start = rig.clock.now
    assert rig.take()
    assert not rig.take()
    assert rig.earliest() == start + 0.050


def test_earliest_fit_is_the_delay_or_the_recheck() -> None:
    """MEM-18: None when nothing paces (no release yet, nobody held); otherwise min(last +
    penalised delay, now + 2 s): now + 2 s at 0.94; last + 50 ms once it reads 0.79."""
    rig = Rig(0.94, held=3)
    assert rig.earliest() is None  # no release yet
    start = rig.clock.now
    assert rig.take()
    rig.held = 0
    assert rig.earliest() is None  # nobody held
    rig.held = 3
    rig.clock.advance(0.010)
    assert rig.earliest() == rig.clock.now + 2.0
    rig.at(0.79)
    assert rig.earliest() == start + 0.050


def test_a_closed_delay_is_its_past_instant_never_none() -> None:
    """MEM-19: at start + delay + 1 ns fits is true and earliest_fit is start + delay."""
    rig = Rig(0.5, held=4)
    start = rig.clock.now
    assert rig.take()
    rig.clock.now = start + 0.050 + NS
    assert rig.fits()
    assert rig.earliest() == start + 0.050


def test_a_stopping_gate_waves_everyone_through(caplog: pytest.LogCaptureFixture) -> None:
    """MEM-20: after stop (once, logged at INFO, running the wake) fits and try_take answer
    true to everyone, even at 0.99 with 10 held; is_stopping reports it."""
    caplog.set_level(logging.INFO, logger="nucleo_trio.admission.memory")
    rig = Rig(0.99, held=10)
    assert not rig.fits()
    assert not rig.gate.is_stopping
    wakes = rig.wakes
    rig.gate.stop()
    rig.gate.stop()
    assert rig.gate.is_stopping and rig.wakes == wakes + 1
    assert all(rig.fits() and rig.take() for _ in range(10))
    stops = [r for r in caplog.records if "stopping" in r.getMessage()]
    assert len(stops) == 1 and stops[0].levelno == logging.INFO


# --------------------------------------------------------------------------------------------
# Floor and growth penalty
# --------------------------------------------------------------------------------------------


def test_the_floor_is_the_reading_after_a_fall() -> None:
    """MEM-21: the first reading, then any reading lower than the one before; rises never move
    it: 0.50, 0.70, 0.60, 0.65 give floors 0.50, 0.50, 0.60, 0.60."""
    rig = Rig()
    floors = [rig.look(r).floor_ratio for r in (0.50, 0.70, 0.60, 0.65)]
    assert floors == pytest.approx([0.50, 0.50, 0.60, 0.60])


def test_each_look_works_out_the_penalty_a_release_would_commit() -> None:
    """MEM-22, MEM-23: committed x 2^(points of floor growth since the release before last),
    clamped to [1, 72 000]; just the committed value before a second release; the penalised
    delay is min(1 h, round(curve x penalty))."""
    rig = Rig()
    assert rig.gate.growth_penalty == 1
    rig.release_at(0.80)
    rig.look(0.90)
    assert rig.gate.growth_penalty == 1  # no release before last yet
    rig.release_at(0.81)
    rig.look(0.85)  # a rise: the floor stays 0.81
    assert rig.gate.growth_penalty == pytest.approx(2)
    assert rig.gate.penalised_delay_ms(0.85) == round(throttle_delay_ms(0.85) * 2)
    rig.look(0.84)  # a fall: floor 0.84, 4 points over 0.80
    assert rig.gate.growth_penalty == pytest.approx(16)
    assert rig.gate.penalised_delay_ms(0.94) == round(throttle_delay_ms(0.94) * 16)


def test_no_penalty_before_two_releases_or_without_net_growth() -> None:
    """MEM-24: a release at 0.80 then a look at 0.92 gives 1; floors 0.89, 0.92, 0.89, 0.92
    give 1 and the plain curve applies."""
    rig = Rig()
    rig.release_at(0.80)
    rig.look(0.93)
    rig.look(0.92)
    assert rig.gate.growth_penalty == 1
    rig = Rig(held=2)
    for floor in (0.89, 0.92, 0.89, 0.92):
        rig.look(0.93)
        rig.look(floor)
        assert rig.gate.growth_penalty == pytest.approx(1), floor
        assert rig.gate.penalised_delay_ms(floor) == throttle_delay_ms(floor)
        rig.gate.give([])
        assert rig.take()
        rig.clock.advance(throttle_delay_ms(floor) / 1000)


def test_a_climb_compounds() -> None:
    """MEM-25: floors 0.80, 0.83 then 0.86 give 64, and the 86 % wait is 64 x curve(0.86),
    about two minutes; after another release a floor of 0.89 gives 4096."""
    rig = Rig()
    rig.release_at(0.80)
    rig.release_at(0.83)
    rig.look(0.87)
    rig.look(0.86)
    assert rig.gate.growth_penalty == pytest.approx(64)
    wait = rig.gate.penalised_delay_ms(0.86)
    assert wait == round(64 * throttle_delay_ms(0.86))
    assert 115_000 <= wait <= 125_000
    rig.release_at(0.86)
    rig.look(0.90)
    rig.look(0.89)
    assert rig.gate.growth_penalty == pytest.approx(4096)


def test_a_live_set_held_where_it_is_keeps_its_penalty() -> None:
    """MEM-26: after the climb, 86, 89, 86, 89 stays at 4096, and back down to 86 stays
    4096."""
    rig = Rig()
    for floor in (0.80, 0.83, 0.86):
        rig.release_at(floor)
    assert rig.release_at(0.89) == pytest.approx(4096)
    for floor in (0.86, 0.89, 0.86, 0.89):
        assert rig.release_at(floor) == pytest.approx(4096), floor
    rig.look(0.90)
    rig.look(0.86)
    assert rig.gate.growth_penalty == pytest.approx(4096)


def test_a_jump_in_one_release_is_a_stop_capped_at_an_hour() -> None:
    """MEM-27: floors 0.80, 0.80, then 0.92 give 4096; the wait is capped at 3 600 000 ms."""
    rig = Rig()
    rig.release_at(0.80)
    rig.release_at(0.80)
    rig.look(0.93)
    rig.look(0.92)
    assert rig.gate.growth_penalty == pytest.approx(4096)
    assert rig.gate.penalised_delay_ms(0.92) == 3_600_000


def test_garbage_between_collections_does_not_count() -> None:
    """MEM-28: releases at 0.80 and 0.83 give 8; looks at 0.86, 0.90 and 0.94 leave the floor
    at 0.83 and the penalty at 8 while the curve follows the level; a collection to 0.84 then
    gives 16."""
    rig = Rig()
    rig.release_at(0.80)
    rig.release_at(0.83)
    assert rig.gate.growth_penalty == pytest.approx(8)
    for ratio in (0.86, 0.90, 0.94):
        status = rig.look(ratio)
        assert status.floor_ratio == pytest.approx(0.83)
        assert status.growth_penalty == pytest.approx(8)
    assert rig.gate.penalised_delay_ms(0.94) == round(8 * throttle_delay_ms(0.94))
    assert rig.look(0.84).growth_penalty == pytest.approx(16)


def test_a_falling_floor_divides_the_penalty() -> None:
    """MEM-29: from 64, a floor one point under the release before last gives 32; a collection
    to 0.20 gives 1 and the wait is back to 50 ms."""
    rig = Rig()
    rig.release_at(0.80)
    rig.release_at(0.83)
    rig.release_at(0.86)  # commits 64; the release before last is at 0.83
    rig.look(0.83)
    assert rig.gate.growth_penalty == pytest.approx(64)
    rig.look(0.82)
    assert rig.gate.growth_penalty == pytest.approx(32)
    rig.look(0.20)
    assert rig.gate.growth_penalty == 1
    assert rig.gate.penalised_delay_ms(0.20) == 50


def test_the_cap_makes_a_seventeen_point_fall_a_reset() -> None:
    """MEM-30: floors 0.80, 0.80, 0.92, 0.92 give 72 000 and a wait of 3 600 000 ms; a
    collection to 0.75 then gives 1."""
    rig = Rig()
    for floor in (0.80, 0.80, 0.92, 0.92):
        rig.release_at(floor)
    assert rig.gate.growth_penalty == 72_000
    assert rig.gate.penalised_delay_ms(0.92) == 3_600_000
    assert rig.gate.penalised_delay_ms(0.50) == 3_600_000
    rig.look(0.75)
    assert rig.gate.growth_penalty == 1


# --------------------------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------------------------


def test_the_zone() -> None:
    """MEM-31: CRITICAL while latched, DRAINING while memory's line is not empty, GREEN
    otherwise; a fresh gate at 0.50 is GREEN."""
    rig = Rig(0.5)
    assert rig.gate.status().zone is MemoryZone.GREEN
    rig.held = 2
    assert rig.gate.status().zone is MemoryZone.DRAINING
    assert rig.look(0.95).zone is MemoryZone.CRITICAL
    assert rig.look(0.91).zone is MemoryZone.CRITICAL
    assert rig.look(0.89).zone is MemoryZone.DRAINING


def test_the_status_record() -> None:
    """MEM-32: (used, max, ratio, floor, zone, held, pacing, penalty); after a take at 0.90
    with 3 held: DRAINING, held 3, pacing delay(0.90); after a give the pacing is 0."""
    rig = Rig(0.9, held=3)
    assert rig.take()
    status = rig.gate.status()
    assert status == MemoryPressureStatus(
        90 * GB, 100 * GB, 0.9, 0.9, MemoryZone.DRAINING, 3, throttle_delay_ms(0.90), 1.0
    )
    rig.clock.advance(1.0)
    assert rig.gate.status().pacing_ms == throttle_delay_ms(0.90) - 1000
    rig.gate.give([])
    assert rig.gate.status().pacing_ms == 0


def test_the_status_indicator() -> None:
    """MEM-33, ACC-12: blocked while latched, pace:<ms>ms while a future release is pending
    with no completion, None otherwise."""
    rig = Rig(0.9, held=2)
    assert rig.gate.status_indicator is None
    assert rig.take()
    assert rig.gate.status_indicator == f"pace:{throttle_delay_ms(0.90)}ms"
    rig.gate.give([])
    assert rig.gate.status_indicator is None
    rig.at(0.96)
    assert rig.gate.status_indicator == "blocked"


def test_the_summary_in_the_specs_form() -> None:
    """STS-05: the usage %, used and max in GiB, the floor %, zone, memory's line, the next
    release in ms unless a job finishes first, and the penalty x<n> with no decimals."""
    status = MemoryPressureStatus(0, 1, 0.5, 0.4, "DRAINING", 3, 120, 8.0)
    summary = status.summary
    assert status.zone is MemoryZone.DRAINING
    parts = [
        "50.0%",
        "0.0/0.0 GiB",
        "floor 40.0%",
        "zone DRAINING",
        "3 in memory's line",
        "120ms unless a job finishes first",
        "x8",
    ]
    positions = [summary.index(part) for part in parts]
    assert positions == sorted(positions), summary
    assert "x8." not in summary
    big = MemoryPressureStatus(
        3 * 1024**3 + 1024**3 // 2, 8 * 1024**3, 0.4375, 0.25, MemoryZone.GREEN, 0, 0, 1.0
    )
    assert "3.5/8.0 GiB" in big.summary and "43.8%" in big.summary
    with pytest.raises(ValueError, match="zone"):
        MemoryPressureStatus(0, 1, 0.5, 0.4, "PURPLE", 0, 0, 1.0)
    with pytest.raises(ValueError, match="held_on_memory"):
        MemoryPressureStatus(0, 1, 0.5, 0.4, MemoryZone.GREEN, -1, 0, 1.0)


def test_the_package_summary() -> None:
    """MEM-50: at 95 % nothing with resources is granted until a reading is under 90 %; the
    spacing is 50 ms below 80 % rising to 30 s at 95 %; a job that arrives with nobody waiting
    on memory starts at once below 95 %."""
    rig = Rig(0.95, held=1)
    assert not rig.take()
    for ratio in (0.94, 0.92, 0.90):
        assert not rig.at(ratio).take()
    assert rig.at(0.8999).take()
    assert throttle_delay_ms(0.79) == 50 and throttle_delay_ms(0.95) == 30_000
    rig.held = 0
    assert rig.at(0.949).take() and rig.take()
