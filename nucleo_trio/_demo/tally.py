"""What the demo learns from the bus: one observer that counts every event it is told.

The demo never asks the dispatcher how things went; it listens, the way a dashboard or an
audit sink would. :class:`Tally` is a :class:`~nucleo_trio.bus.JobObserver` subscribed to every
event. Once the dispatcher has shut down (which delivers everything published before it),
:meth:`Tally.report` freezes what it heard into a :class:`TallyReport`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping

import attrs

from .._clock import trio_now_or_none
from ..admission import LimiterEventType, RateLimiter
from ..bus import JobObserver, events as ev
from ..errors import UncorrectableError, UpstreamRetry
from .workload import META_LABEL, Kind

__all__ = ["AccountRow", "Example", "KindRow", "Tally", "TallyReport"]


@attrs.frozen
class KindRow:
    """The outcomes of one kind of job."""

    kind: str
    needs: str
    jobs: int
    completed: int
    failed: int
    timed_out: int
    cancelled: int
    reruns: int
    median_wait: float | None
    max_wait: float | None

    @property
    def settled(self) -> int:
        return self.completed + self.failed + self.timed_out + self.cancelled


@attrs.frozen
class AccountRow:
    """What admission did on one account."""

    name: str
    size: str
    replenishment: str
    capacity: int | float
    immediate: int
    after_hold: int
    rejected: int
    released: int
    peak_in_use: int | float
    longest_wait: float


@attrs.frozen
class Example:
    """One failure worth showing: what happened, to which job, in one line."""

    outcome: str
    label: str
    text: str


@attrs.frozen
class TallyReport:
    """Everything the demo prints after the run, as heard on the bus."""

    kinds: tuple[KindRow, ...]
    total: KindRow
    accounts: tuple[AccountRow, ...]
    events: tuple[tuple[str, int], ...]
    limiter_events: tuple[tuple[str, int], ...]
    examples: tuple[Example, ...]
    workflow: str | None
    rejections: tuple[tuple[str, int], ...] = ()
    """Why admission refused its parked waiters: ``(reject_reason, REJECTED events)``, the most
    frequent first (``cancelled``, ``shutdown``, ``circuit_blocked``, ``aborted``)."""

    @property
    def event_total(self) -> int:
        return sum(count for _, count in self.events)


@attrs.define
class _KindCounts:
    jobs: set[str] = attrs.field(factory=set)
    completed: int = 0
    failed: int = 0
    timed_out: int = 0
    cancelled: int = 0
    reruns: int = 0
    waits: list[float] = attrs.field(factory=list)


@attrs.define
class _AccountCounts:
    capacity: int | float = 0
    immediate: int = 0
    after_hold: int = 0
    rejected: int = 0
    released: int = 0
    peak_in_use: int | float = 0
    longest_wait: float = 0.0


# The order examples are shown in. (A cancellation is left out: its event says only "Job
# cancelled", and the per-kind table already counts them.)
_EXAMPLE_ORDER = ("timed out", "failed", "over budget")

_ExampleKey = tuple[float | None, int]
"""When an example was heard (the run's clock; ``None`` outside a run, where the first heard is
kept) and the order its job was first heard of: of two at one instant, the smaller is shown."""


class Tally(JobObserver[ev.JobEvent]):
    """Counts events by type, outcomes by job kind and grants by account.

    ``kinds`` maps a job class name to its :class:`Kind`; events of any other job (the root
    orchestrator) count as events only. ``on_settled`` is called once per terminal event of
    such a job, as it is counted (the progress bar's tick). The accounts to report are named with :meth:`watch`,
    in order; an account heard of but not watched (the memory account, say) comes after them.

    The example of each kind of failure is the first one heard; of several heard at the same
    instant of the run's clock, the one whose job was heard of first (its submission, for the
    demo's jobs). Jobs that time out together are woken in an order trio leaves to memory
    addresses (it breaks a tie between two deadlines by ``id()``), so the order their events
    arrive in at one instant can change with anything that allocates differently; the report
    must not.
    """

    def __init__(
        self, kinds: Mapping[str, Kind], on_settled: Callable[[], None] | None = None
    ) -> None:
        self._kinds = dict(kinds)
        self._on_settled = on_settled
        self._accounts: list[tuple[RateLimiter, str]] = []
        self._events: Counter[str] = Counter()
        self._limiter: Counter[str] = Counter()
        self._rejections: Counter[str] = Counter()
        self._by_kind: dict[Kind, _KindCounts] = {kind: _KindCounts() for kind in Kind}
        self._by_account: dict[str, _AccountCounts] = {}
        self._parked_waits: dict[str, float] = {}
        self._examples: dict[str, tuple[_ExampleKey, Example]] = {}
        self._heard: dict[str, int] = {}  # job id -> the order the tally first heard of it
        self._settled_at: list[float] = []  # each terminal event's wall-clock timestamp
        self._workflow: str | None = None

    def watch(self, account: RateLimiter, size: str) -> None:
        """Report ``account``, described as ``size`` (``"4 slots"``), in the order watched."""
        self._accounts.append((account, size))

    async def on_event(self, event: ev.JobEvent) -> None:
        self.record(event)

    def record(self, event: ev.JobEvent) -> None:
        """Count one event (what :meth:`on_event` does; synchronous for tests)."""
        self._events[type(event).__name__] += 1
        if isinstance(event, ev.LimiterEvent):
            self._record_limiter(event)
            return
        snapshot = event.snapshot
        if snapshot is None:
            return
        kind = self._kinds.get(snapshot.job_class)
        if kind is None:
            if isinstance(event, ev.WorkflowCompleteEvent):
                self._workflow = event.message
            return
        counts = self._by_kind[kind]
        counts.jobs.add(snapshot.job_id)
        heard = self._heard.setdefault(snapshot.job_id, len(self._heard))
        if isinstance(event, ev.TerminalEvent):
            self._settled_at.append(event.timestamp)
            if self._on_settled is not None:
                self._on_settled()
        label = str(snapshot.metadata.get(META_LABEL, snapshot.name))
        if isinstance(event, ev.RetryEvent):
            counts.reruns += 1
        elif isinstance(event, ev.JobCompletedEvent):
            counts.completed += 1
            self._record_wait(counts, snapshot.job_id, event.metadata)
        elif isinstance(event, ev.JobTimedOut):
            counts.timed_out += 1
            self._record_wait(counts, snapshot.job_id, event.metadata)
            self._example("timed out", (trio_now_or_none(), heard), label, event.message)
        elif isinstance(event, ev.JobCancelled):
            counts.cancelled += 1
            self._record_wait(counts, snapshot.job_id, event.metadata)
        elif isinstance(event, ev.JobFailedEvent | ev.DependencyFailureEvent):
            counts.failed += 1
            if isinstance(event, ev.JobFailedEvent):
                self._record_wait(counts, snapshot.job_id, event.metadata)
            error = event.error
            outcome = "over budget" if _is_budget_refusal(error) else "failed"
            self._example(
                outcome,
                (trio_now_or_none(), heard),
                label,
                _one_line(error, snapshot.job_class, snapshot.job_id, label),
            )

    def _record_limiter(self, event: ev.LimiterEvent) -> None:
        self._limiter[event.type.name] += 1
        row = self._by_account.setdefault(event.limiter_name, _AccountCounts())
        row.capacity = event.capacity
        row.peak_in_use = max(row.peak_in_use, event.in_use)
        kind = event.type
        if kind is LimiterEventType.GRANTED_IMMEDIATE:
            row.immediate += 1
        elif kind is LimiterEventType.GRANTED_FROM_HOLD:
            row.after_hold += 1
            row.longest_wait = max(row.longest_wait, event.wait)
        elif kind is LimiterEventType.REJECTED:
            row.rejected += 1
            self._rejections[event.reject_reason or "unknown"] += 1
            row.longest_wait = max(row.longest_wait, event.wait)
            if event.snapshot is not None:
                # A job refused while parked never gets an admission wait on its context.
                job_id = event.snapshot.job_id
                self._parked_waits[job_id] = max(self._parked_waits.get(job_id, 0.0), event.wait)
        elif kind is LimiterEventType.RELEASED:
            row.released += 1

    def _record_wait(
        self, counts: _KindCounts, job_id: str, metadata: Mapping[str, object]
    ) -> None:
        waited = metadata.get("admission_wait_ms")
        if isinstance(waited, int | float):
            counts.waits.append(waited / 1000.0)
        elif job_id in self._parked_waits:
            counts.waits.append(self._parked_waits[job_id])

    def _example(self, outcome: str, key: _ExampleKey, label: str, text: str) -> None:
        kept = self._examples.get(outcome)
        if kept is None or (key[0] is not None and key[0] == kept[0][0] and key[1] < kept[0][1]):
            self._examples[outcome] = (key, Example(outcome, label, text))

    def settled_by(self, wall: float) -> int:
        """How many terminal events of the demo's jobs were built by the wall-clock instant
        ``wall`` (:func:`time.time`), however late they were delivered: after Ctrl-C, the jobs
        that finished before it, not those its stop cancelled."""
        return sum(1 for at in self._settled_at if at <= wall)

    # -- the report -------------------------------------------------------------------------------
    def report(self) -> TallyReport:
        """Freeze what was heard so far."""
        kinds = tuple(_kind_row(kind, self._by_kind[kind]) for kind in Kind)
        every = _KindCounts()
        for counts in self._by_kind.values():
            every.jobs |= counts.jobs
            every.completed += counts.completed
            every.failed += counts.failed
            every.timed_out += counts.timed_out
            every.cancelled += counts.cancelled
            every.reruns += counts.reruns
            every.waits.extend(counts.waits)
        total = attrs.evolve(_kind_row(None, every), kind="all jobs", needs="")
        return TallyReport(
            kinds=tuple(row for row in kinds if row.jobs),
            total=total,
            accounts=self._account_rows(),
            events=tuple(sorted(self._events.items(), key=lambda item: (-item[1], item[0]))),
            limiter_events=tuple(
                (kind.name, self._limiter[kind.name])
                for kind in _LIMITER_ORDER
                if self._limiter[kind.name]
            ),
            examples=tuple(
                self._examples[outcome][1]
                for outcome in _EXAMPLE_ORDER
                if outcome in self._examples
            ),
            workflow=self._workflow,
            rejections=tuple(
                sorted(self._rejections.items(), key=lambda item: (-item[1], item[0]))
            ),
        )

    def _account_rows(self) -> tuple[AccountRow, ...]:
        rows: list[AccountRow] = []
        listed: set[str] = set()
        for account, size in self._accounts:
            name = account.limiter_name
            listed.add(name)
            counts = self._by_account.get(name, _AccountCounts(capacity=int(account.capacity)))
            rows.append(_account_row(name, size, account.replenishment().value, counts))
        for name, counts in self._by_account.items():
            if name not in listed:
                rows.append(_account_row(name, str(counts.capacity), "", counts))
        return tuple(rows)


# The order in which limiter event types are listed: a job's way through admission.
_LIMITER_ORDER = (
    LimiterEventType.GRANTED_IMMEDIATE,
    LimiterEventType.HELD,
    LimiterEventType.GRANTED_FROM_HOLD,
    LimiterEventType.RELEASED,
    LimiterEventType.REJECTED,
)


def _kind_row(kind: Kind | None, counts: _KindCounts) -> KindRow:
    waits = counts.waits
    return KindRow(
        kind=kind.value if kind is not None else "",
        needs=kind.needs if kind is not None else "",
        jobs=len(counts.jobs),
        completed=counts.completed,
        failed=counts.failed,
        timed_out=counts.timed_out,
        cancelled=counts.cancelled,
        reruns=counts.reruns,
        median_wait=statistics.median(waits) if waits else None,
        max_wait=max(waits) if waits else None,
    )


def _account_row(name: str, size: str, replenishment: str, counts: _AccountCounts) -> AccountRow:
    return AccountRow(
        name=name,
        size=size,
        replenishment=replenishment,
        capacity=counts.capacity,
        immediate=counts.immediate,
        after_hold=counts.after_hold,
        rejected=counts.rejected,
        released=counts.released,
        peak_in_use=counts.peak_in_use,
        longest_wait=counts.longest_wait,
    )


def _is_budget_refusal(error: BaseException | None) -> bool:
    """The dispatcher's refusal after a job's re-run budget: uncorrectable, caused by a signal."""
    return isinstance(error, UncorrectableError) and isinstance(error.__cause__, UpstreamRetry)


def _one_line(error: BaseException | None, job_class: str, job_id: str, label: str) -> str:
    if error is None:
        return "unknown error"
    # The runtime names a job by its random id (led by its class when a prefix was given); the
    # demo's label reads (and repeats) better, so two runs with one seed print the same words.
    text = str(error).replace(f"{job_class}-{job_id}", label).replace(job_id, label)
    return f"{type(error).__name__}: {' '.join(text.split())}"
