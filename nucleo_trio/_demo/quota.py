"""The demo's custom account: a "search-api" quota of N requests per second.

It is written the way a third party would write one, against the public contract only
(:class:`~nucleo_trio.admission.AbstractRateLimiter`), to show that a custom account joins
admission exactly like a built-in gate: it is asked ``fits`` with the head's amounts set aside,
it is debited in the same critical section as the job's other accounts, and it names the instant
its shortfall closes (``earliest_fit``), so admission sleeps until then instead of polling.

It is a TIME account: a request spends its slot against the window, and only the clock gives it
back. Releasing it when the job finishes would make throughput a function of job duration and
quietly defeat the quota, so admission's release skips it; a roll-back (work that never ran)
refunds the slot at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ..admission import AbstractRateLimiter, Replenishment
from ..errors import UncorrectableError, UpstreamFailure

__all__ = ["SearchApiQuota", "SearchApiQuotaStatus"]


@attrs.frozen
class SearchApiQuotaStatus:
    """The quota at one moment: the window, how much of it is spent, what the upstream said."""

    requests: int
    per_seconds: float
    in_window: int
    successes: int
    pushbacks: int

    @property
    def summary(self) -> str:
        return (
            f"{self.in_window}/{self.requests} requests in the last {self.per_seconds:g} s, "
            f"{self.successes} answered, {self.pushbacks} pushed back"
        )


class SearchApiQuota(AbstractRateLimiter):
    """At most ``requests`` requests in any ``per_seconds`` window (a sliding window of stamps).

    Each amount in a demand is one request (its value is ignored), so a job asking ``[None]``
    spends one slot. A stamp leaves the window ``per_seconds`` after it was taken; that is what
    ``earliest_fit`` reports. Like every window it also needs the dispatcher's ``http`` gate,
    which it declares with ``requires_http_connection``.
    """

    def __init__(self, name: str = "search-api", requests: int = 20, per_seconds: float = 1.0):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"SearchApiQuota: name must be a non-blank str, got {name!r}")
        if isinstance(requests, bool) or not isinstance(requests, int) or requests <= 0:
            raise ValueError(
                f"SearchApiQuota {name!r}: requests must be a positive int, got {requests!r}"
            )
        if (
            isinstance(per_seconds, bool)
            or not isinstance(per_seconds, int | float)
            or per_seconds <= 0
        ):
            raise ValueError(
                f"SearchApiQuota {name!r}: per_seconds must be positive seconds, got {per_seconds!r}"
            )
        self._name = name
        self._requests = requests
        self._per = float(per_seconds)
        # Oldest first: the oldest stamp is the next to leave the window.
        self._stamps: deque[float] = deque()
        self.successes = 0
        self.pushbacks = 0

    # -- identity -------------------------------------------------------------------------------
    @property
    def limiter_name(self) -> str:
        return self._name

    @property
    def limiter_category(self) -> str:
        # A sliding window of requests is the elastic-window family with the elasticity left out.
        return "elastic_window"

    @property
    def capacity(self) -> int:
        return self._requests

    @property
    def in_use(self) -> int:
        """Requests still inside the window now."""
        self._expire(trio.current_time())
        return len(self._stamps)

    @property
    def requires_http_connection(self) -> bool:
        return True

    def replenishment(self) -> Replenishment:
        return Replenishment.TIME

    def status(self) -> SearchApiQuotaStatus:
        return SearchApiQuotaStatus(
            self._requests, self._per, self.in_use, self.successes, self.pushbacks
        )

    # -- the account questions --------------------------------------------------------------------
    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self._refuse_impossible(mine)
        self._expire(trio.current_time())
        return len(self._stamps) + len(mine) + len(reserved_ahead) <= self._requests

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        now = trio.current_time()
        self._stamps.extend(now for _ in mine)
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        # Only a roll-back reaches a TIME account. Dropping the newest stamps keeps the oldest
        # ones, which the deadlines are computed from, honest.
        for _ in range(min(len(amounts), len(self._stamps))):
            self._stamps.pop()

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        asked = len(mine) + len(reserved_ahead)
        if asked > self._requests:
            return None  # only the head leaving (an event) can help
        now = trio.current_time()
        self._expire(now)
        deficit = len(self._stamps) + asked - self._requests
        if deficit <= 0:
            return now
        # The instant the deficit-th oldest stamp leaves the window.
        return self._stamps[deficit - 1] + self._per

    # -- what the upstream said -------------------------------------------------------------------
    def on_success(self, input: Any = None) -> None:
        self.successes += 1

    def on_rate_limit_error(
        self, failure: UpstreamFailure | BaseException, input: Any = None
    ) -> None:
        self.pushbacks += 1

    # -- helpers ----------------------------------------------------------------------------------
    def _refuse_impossible(self, mine: Sequence[Any]) -> None:
        if len(mine) > self._requests:
            raise UncorrectableError(
                f"{self._name}: {len(mine)} requests can never fit a window of {self._requests}",
                llm_message=(
                    f"The job asks for {len(mine)} requests at once on {self._name}, which allows "
                    f"only {self._requests} per {self._per:g} s."
                ),
            )

    def _expire(self, now: float) -> None:
        # The same expression as earliest_fit's, so at that instant the slot really is free.
        stamps, per = self._stamps, self._per
        while stamps and stamps[0] + per <= now:
            stamps.popleft()
