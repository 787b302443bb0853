"""Test doubles for admission: a job that waits, a TIME-kind token meter, and the identity
every fake memory account shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from nucleo_trio.admission import AbstractRateLimiter, Replenishment, SemaphoreLimiterStatus
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs.snapshot import JobSnapshot


class FakeJob:
    """An AdmissionWaiter: a snapshot and a cancel signal with callbacks."""

    def __init__(self, name: str, *, deaf: bool = False) -> None:
        self.name = name
        self.snapshots = 0
        self.cancelled = False
        self.deaf = deaf  # a deaf job never runs its callbacks: only a pass can notice
        self.registrations = 0
        self._callbacks: dict[int, Callable[[], object]] = {}

    def snapshot(self) -> JobSnapshot:
        self.snapshots += 1
        return JobSnapshot(
            job_id=self.name,
            workflow_id="wf",
            parent_job_id=None,
            user_id="tester",
            job_class="FakeJob",
            job_class_qualname="tests.FakeJob",
            name=self.name,
            attempt_number=self.snapshots,
        )

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        self.registrations += 1
        if self.cancelled:
            callback()
            return lambda: None
        key = id(callback)
        self._callbacks[key] = callback
        return lambda: self._callbacks.pop(key, None) and None

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if not self.deaf:
                for callback in list(self._callbacks.values()):
                    callback()


class Meter(AbstractRateLimiter):
    """A TIME token meter: ``cap`` tokens refilled at ``rate`` per second of trio time."""

    def __init__(self, name: str, cap: float, rate: float, level: float | None = None) -> None:
        self.name, self.cap, self.rate = name, cap, rate
        self.level = cap if level is None else level
        self.stamp = trio.current_time()
        self.takes = 0
        self.gives = 0

    def _refresh(self) -> None:
        now = trio.current_time()
        if self.rate > 0 and now > self.stamp:
            self.level = min(self.cap, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    @property
    def limiter_name(self) -> str:
        return self.name

    @property
    def limiter_category(self) -> str:
        return "token_bucket"

    @property
    def capacity(self) -> int:
        return int(self.cap)

    @property
    def in_use(self) -> int:
        self._refresh()
        return int(self.cap - self.level)

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(int(self.cap), int(self.level), None)

    def replenishment(self) -> Replenishment:
        return Replenishment.TIME

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if sum(mine) > self.cap:
            raise UncorrectableError(f"{self.name}: {sum(mine)} exceeds the cap of {self.cap}")
        self._refresh()
        return self.level + 1e-6 >= sum(mine) + sum(reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        self.level -= sum(mine)
        assert self.level >= -1e-6, "overdrawn"
        self.takes += 1
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        self._refresh()
        self.level = min(self.cap, self.level + sum(amounts))
        self.gives += 1
        self._capacity_changed()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        need = sum(mine) + sum(reserved_ahead)
        if need > self.cap or self.rate <= 0:
            return None
        self._refresh()
        deficit = need - self.level
        return self.stamp if deficit <= 1e-6 else self.stamp + deficit / self.rate

    def set_config(self, cap: float, rate: float) -> None:
        """Swap the cap and the rate; only a raise of either wakes admission."""
        self._refresh()
        grew = cap > self.cap or rate > self.rate
        self.cap, self.rate = cap, rate
        self.level = min(self.level, cap)
        if grew:
            self._capacity_changed()


class MemoryDouble(AbstractRateLimiter):
    """The identity of a fake memory account: named and categorised "memory", 100 units, 96 in
    use while ``latched`` and 50 otherwise. Subclasses decide when it fits."""

    latched: bool = False

    @property
    def limiter_name(self) -> str:
        return "memory"

    @property
    def limiter_category(self) -> str:
        return "memory"

    @property
    def capacity(self) -> int:
        return 100

    @property
    def in_use(self) -> int:
        return 96 if self.latched else 50

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(100, 50, None)
