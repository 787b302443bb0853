"""The stamps of a sliding-window account: one per granted unit, the instant its caller started.

A sliding window admits at most ``n`` units in any ``span`` seconds by remembering one stamp per
unit; a stamp leaves at exactly ``stamp + span``, the instant the account names in
``earliest_fit``. The window's bound is meant for the upstream, which counts a request when it
arrives, so a stamp must not be the instant admission *decided*: a grant is decided in one task
(admission's, or the caller's own on the fast path) and the caller starts when trio next runs it,
which under load can be a good while later. Were a stamp the decision, a burst decided at ``t``
but resumed late and the next burst, decided at ``t + span`` the moment the first one's stamps
leave and resumed promptly, would both reach the upstream inside one window: twice the bound.

So a stamp is the instant its caller *starts*, bounded from above. trio resumes a task woken in
one scheduler batch in the next batch, so a caller granted in batch ``k`` has started by the end
of batch ``k + 1``. Inside a trio run a stamp is therefore *unconfirmed* when it is taken: it
holds its slot from the decision on, and a small system task (one per account while stamps are
unconfirmed, gone otherwise) moves it to the clock reading it takes three batches later, past the
end of the caller's batch. A stamp only ever moves later, so an unconfirmed stamp never leaves
the window, and grants as the callers see them never exceed the bound in any window. On trio's
virtual clock the clock cannot move while that task is runnable, so the stamp keeps the exact
instant of the decision and every deadline stays exact; on the real clock the slot is held for
the caller's wake-up delay besides the window. Outside a trio run (an injected clock driven by
hand) a stamp is the decision instant.

What happens after the caller starts (its HTTP client's own steps before the bytes leave, the
network) is beyond any account's sight: an account that must hold under that lag as well adds a
safety margin to its span.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

__all__ = ["StartStamps"]

CONFIRM_AFTER = 3
"""Scheduler steps after which an unconfirmed group's callers have surely started."""


class StartStamps:
    """Stamps, oldest first, the newest ones unconfirmed until their callers have started.

    ``name`` names the confirming system task; ``clock`` is the account's clock, read when a
    stamp is confirmed.
    """

    __slots__ = ("_clock", "_confirmer", "_name", "_pending", "_stamps", "_unconfirmed")

    def __init__(self, name: str, clock: Callable[[], float]) -> None:
        self._name = name
        self._clock = clock
        self._stamps: deque[float] = deque()
        # The newest stamps not yet confirmed as started, oldest first: [count, steps seen].
        self._unconfirmed: deque[list[int]] = deque()
        self._pending = 0  # how many of the newest stamps are unconfirmed
        self._confirmer: trio.lowlevel.Task | None = None

    def __len__(self) -> int:
        return len(self._stamps)

    def __getitem__(self, index: int) -> float:
        """The stamp at ``index``, 0 the oldest."""
        return self._stamps[index]

    @property
    def unconfirmed(self) -> int:
        """How many of the newest stamps wait for their callers to start."""
        return self._pending

    def expire(self, span: float, now: float) -> None:
        """Drop the confirmed stamps that have left a window of ``span`` seconds at ``now``.

        A stamp leaves when ``stamp + span <= now``: the same sum ``earliest_fit`` names, so an
        account woken at that instant finds the slot free (``now - span`` can round the other
        way). An unconfirmed stamp never leaves: its caller has not started yet.
        """
        stamps = self._stamps
        confirmed = len(stamps) - self._pending
        while confirmed and stamps[0] + span <= now:
            stamps.popleft()
            confirmed -= 1

    def add(self, now: float, count: int) -> None:
        """Stamp ``count`` units decided at ``now``; inside a run, as unconfirmed starts."""
        self._stamps.extend([now] * count)
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return  # no scheduler: the decision is the start
        self._pending += count
        groups = self._unconfirmed
        if groups and groups[-1][1] == 0:
            groups[-1][0] += count
        else:
            groups.append([count, 0])
        if self._confirmer is None:
            self._confirmer = trio.lowlevel.spawn_system_task(
                self._confirm, name=f"{self._name} start confirmer"
            )

    def drop_newest(self, count: int) -> int:
        """Forget the ``count`` newest stamps (a roll-back), unconfirmed ones first; returns how
        many there were to forget. The oldest stay: deadlines are computed from them."""
        dropped = min(count, len(self._stamps))
        for _ in range(dropped):
            self._stamps.pop()
            if self._pending:  # the newest stamps are the unconfirmed ones
                self._pending -= 1
                groups = self._unconfirmed
                groups[-1][0] -= 1
                if not groups[-1][0]:
                    groups.pop()
        return dropped

    async def _confirm(self) -> None:
        """Move unconfirmed stamps to the instant their callers have surely started.

        One step per scheduler batch while stamps are unconfirmed. A group is confirmed on the
        third step after it was stamped: stamped in batch ``k`` (before or after this task's
        step there), its callers run in batch ``k + 1`` at the latest, and the third step falls
        in batch ``k + 2`` or later. Each step raises every unconfirmed stamp to the clock, so
        the deque stays in order and a stamp only ever moves later.
        """
        try:
            while self._pending:
                await trio.lowlevel.checkpoint()
                self._advance(CONFIRM_AFTER)
        finally:
            self._advance(0)  # the run is ending: what remains counts from now
            self._confirmer = None

    def _advance(self, due: int) -> None:
        """One confirmer step: raise the unconfirmed stamps to now, confirm the due groups."""
        pending = self._pending
        if not pending:
            return
        now = self._clock()
        stamps = self._stamps
        for index in range(len(stamps) - pending, len(stamps)):
            if stamps[index] < now:
                stamps[index] = now
        groups = self._unconfirmed
        for group in groups:
            group[1] += 1
        while groups and groups[0][1] >= due:
            self._pending -= groups.popleft()[0]
