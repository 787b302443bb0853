"""How the runtime is doing, in one look: the health snapshot and the reporter that logs it.

A :class:`HealthSnapshot` is five sections, in order:

* **Limiters**: one row per account, highest utilisation first, with its waiters, what it has
  used out of its total, and its status indicator when it is not nominal; then, when the
  machine reports it, a CPU row;
* **Memory**: the memory account's one-line status;
* **Jobs running**: how many jobs have started and not yet ended, by type;
* **Workflows active**: how many distinct workflows those jobs belong to;
* **Queue**: the two lanes' sizes and how many jobs are parked in admission.

Two things build one. :meth:`JobDispatcher.health() <nucleo_trio.dispatch.JobDispatcher.health>`
reads the dispatcher's live state at the instant it is called. The
:class:`SystemHealthReporter` listens on the bus instead: it builds its limiter rows from the
latest limiter event of each account and its job counts from start and terminal events, and
every 50th event it logs the snapshot at INFO. The dispatcher subscribes one at start unless
``DispatcherConfig.health_every`` is ``None``. Both render the same way (:meth:`HealthSnapshot.render`)::

    [System health snapshot]
      Limiters:
        search-api                   80.0% ████████████████░░░░  waiters=  3  used:      4  total: 5      req
        db                           50.0% ██████████░░░░░░░░░░  waiters=  0  used:      2  total: 4      slot
      Memory: memory 41.3% (6.4/15.5 GiB), floor 40.1%, zone GREEN, 0 in memory's line, ...
      Jobs running: 3 total
        TOOL          3
      Workflows active: 1
      Queue: 0 standard, 0 fast, 3 parked in admission
"""

from __future__ import annotations

import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import attrs
import trio

from .._clock import trio_now_or_none
from ..admission.limiter import LimiterEventType, LimiterIdentity
from ..bus.events import JobEvent, JobStartedEvent, LifecycleEvent, LimiterEvent, TerminalEvent
from ..bus.observers import JobObserver
from ..jobs.state import JobType
from . import _layout

__all__ = [
    "DEFAULT_HEALTH_EVERY",
    "GRANT_WINDOW",
    "SNAPSHOT_TITLE",
    "CpuLoad",
    "HealthSnapshot",
    "LimiterRow",
    "QueueSizes",
    "SystemHealthReporter",
    "capture_health",
    "is_health_event",
    "memory_summary",
    "read_cpu_load",
]

log = logging.getLogger("nucleo_trio.observability.health")

SNAPSHOT_TITLE: Final = "[System health snapshot]"
"""The first line of every rendered snapshot, and so of every record the reporter logs."""

DEFAULT_HEALTH_EVERY: Final = 50
"""How many events the reporter counts between two logged snapshots (50), unless
``DispatcherConfig.health_every`` says otherwise."""

GRANT_WINDOW: Final = 60.0
"""Seconds of grants a token bucket's "used" adds up in the reporter's snapshot (60.0): a
per-minute quota's minute."""

_TYPE_COLOURS: Final[Mapping[JobType, tuple[int, int, int]]] = {
    JobType.JOB: (200, 200, 200),
    JobType.TOOL: (90, 180, 250),
    JobType.DOER: (120, 210, 120),
    JobType.THINKER: (200, 130, 250),
    JobType.GUARDRAIL: (230, 170, 50),
    JobType.LLM_CALL: (250, 130, 180),
    JobType.UTILITY: (160, 160, 160),
}


# -- the records ----------------------------------------------------------------------------------
@attrs.frozen
class LimiterRow:
    """One account as the snapshot shows it.

    ``used`` is what the account has out of ``capacity`` (for a reporter's token bucket, the
    tokens granted in the last minute); ``waiters`` the jobs held on it; ``status`` its
    indicator, ``None`` while nominal.
    """

    name: str
    """The account's name (``limiter_name``)."""
    category: str
    """The account's category (``"memory"``, ``"token_bucket"``, ``"semaphore"``...); it decides
    the :attr:`unit`."""
    capacity: int | float
    """The account's total, in its :attr:`unit`."""
    used: int | float
    """What the account has in use out of :attr:`capacity`, in its :attr:`unit`."""
    waiters: int = 0
    """How many jobs are held waiting on the account (0 by default)."""
    status: str | None = None
    """The account's status indicator (``"blocked"``, ``"probing"``, ``"throttle:2.0x"``,
    ``"pace:1500ms"``); ``None`` (the default) while it is nominal."""

    # SHR-05 (utilisation), SHR-07 (units)
    @property
    def utilisation(self) -> float:
        """``used / capacity`` (1.0 is full), or 0.0 for an account with no capacity."""
        return self.used / self.capacity if self.capacity > 0 else 0.0

    @property
    def unit(self) -> str:
        """What :attr:`used` and :attr:`capacity` count: ``"B"`` (bytes, a memory account),
        ``"tok"`` (tokens, a token bucket), ``"req"`` (requests, a rate limit or an elastic
        window), ``"slot"`` (a semaphore), or ``""`` for another category."""
        return _layout.unit_of(self.category)

    def render(
        self, *, color: bool = False, ascii_only: bool = False, name_width: int = _layout.NAME_WIDTH
    ) -> str:
        """The row as the snapshot prints it: the name cut to ``name_width`` columns, the
        utilisation in percent, a 20-cell bar, the waiters, used and total in short counts and
        the unit, then the status. ``color`` and ``ascii_only`` as in
        :meth:`HealthSnapshot.render`; no trailing newline."""
        return _layout.limiter_row(
            self.name,
            self.utilisation,
            waiters=self.waiters,
            used=self.used,
            total=self.capacity,
            unit=self.unit,
            status=self.status,
            color=color,
            ascii_only=ascii_only,
            name_width=name_width,
        )


@attrs.frozen
class CpuLoad:
    """The machine's processors: how many, and the share of all of them in use (0 to 1)."""

    cores: int
    """How many logical processors the machine has."""
    load: float
    """The share of all processors in use, from 0.0 (idle) to 1.0 (every core busy)."""

    def render(
        self, *, color: bool = False, ascii_only: bool = False, name_width: int = _layout.NAME_WIDTH
    ) -> str:
        """The CPU row as the snapshot prints it: ``cpu (N cores)``, the load in percent and a
        bar, with no counts. ``color`` and ``ascii_only`` as in :meth:`HealthSnapshot.render`."""
        return _layout.limiter_row(
            f"cpu ({self.cores} cores)",
            self.load,
            color=color,
            ascii_only=ascii_only,
            name_width=name_width,
        )


@attrs.frozen
class QueueSizes:
    """Jobs waiting for a task in each lane, and jobs parked in admission."""

    # SHR-15
    standard: int = 0
    """Jobs waiting in the standard lane (0 by default)."""
    fast: int = 0
    """Jobs waiting in the fast (priority) lane (0 by default)."""
    parked: int = 0
    """Jobs parked in admission, waiting for a resource (0 by default)."""


def _by_utilisation(rows: Iterable[LimiterRow]) -> tuple[LimiterRow, ...]:
    # Highest utilisation first (SHR-05); equal ones by name, so a snapshot reads the same twice.
    return tuple(sorted(rows, key=lambda row: (-row.utilisation, row.name)))


def _by_count(
    running: Mapping[JobType, int] | Iterable[tuple[JobType, int]],
) -> tuple[tuple[JobType, int], ...]:
    pairs = running.items() if isinstance(running, Mapping) else running
    return tuple(sorted(((k, n) for k, n in pairs if n > 0), key=lambda kv: (-kv[1], kv[0].value)))


@attrs.frozen(kw_only=True)
class HealthSnapshot:
    """The runtime at one instant, in the five sections of the module docstring.

    ``limiters`` is sorted highest utilisation first and ``running`` (jobs by type) highest
    count first, whatever order they were given in. ``memory`` is the memory account's status
    line. ``cpu`` is ``None`` when nobody read the processors (a dispatcher's own snapshot does
    not: a CPU reading is the reporter's). ``at`` is the :func:`trio.current_time` it was taken.
    """

    limiters: tuple[LimiterRow, ...] = attrs.field(default=(), converter=_by_utilisation)
    """One row per account, highest utilisation first (equal ones by name); empty by default."""
    memory: str = ""
    """The memory account's status line, as :func:`memory_summary` writes it; empty by
    default."""
    running: tuple[tuple[JobType, int], ...] = attrs.field(default=(), converter=_by_count)
    """``(job type, count)`` pairs of the jobs running, highest count first; a mapping is
    accepted, and types with no job running are left out."""
    workflows_active: int = 0
    """How many distinct workflows the running jobs belong to."""
    queues: QueueSizes = QueueSizes()
    """The two lanes' sizes and the jobs parked in admission."""
    cpu: CpuLoad | None = None
    """The processors' load; ``None`` (the default) when nobody read it."""
    at: float | None = None
    """The :func:`trio.current_time` the snapshot was taken at, in seconds; ``None`` outside a
    trio run."""

    @property
    def jobs_running(self) -> int:
        """Jobs that have started and not yet ended, every type together."""
        return sum(count for _, count in self.running)

    def limiter(self, name: str) -> LimiterRow | None:
        """The row of the account named ``name``, if the snapshot has one."""
        return next((row for row in self.limiters if row.name == name), None)

    def render(
        self, *, color: bool = False, ascii_only: bool = False, name_width: int = _layout.NAME_WIDTH
    ) -> str:
        """The snapshot as text: the title line, then the five sections; no trailing newline.

        ``color`` adds ANSI 24-bit colour (tinted abnormal rows, coloured bars and job types);
        ``ascii_only`` draws the bars with ``#`` and ``.``; ``name_width`` is the column the
        names take (28, as the reporter logs it).
        """
        lines = [SNAPSHOT_TITLE]
        if self.limiters:
            lines.append("  Limiters:")
            lines.extend(
                row.render(color=color, ascii_only=ascii_only, name_width=name_width)
                for row in self.limiters
            )
        else:
            lines.append("  Limiters: (none active)")
        if self.cpu is not None:
            lines.append(self.cpu.render(color=color, ascii_only=ascii_only, name_width=name_width))
        lines.append(f"  Memory: {self.memory}")
        lines.append("  " + _layout.bold_white(f"Jobs running: {self.jobs_running} total", color))
        for kind, count in self.running:
            row = f"{kind.value:<10} {count:4d}"
            lines.append(
                "    " + _layout.tint(row, _TYPE_COLOURS.get(kind, (200, 200, 200)), color)
            )
        lines.append(f"  Workflows active: {self.workflows_active}")
        queues = self.queues
        lines.append(
            f"  Queue: {queues.standard} standard, {queues.fast} fast, "
            f"{queues.parked} parked in admission"
        )
        return "\n".join(lines)


# -- reading the live state -----------------------------------------------------------------------
def memory_summary(memory: LimiterIdentity | None) -> str:
    """The memory account's status line (its ``status().summary``), ``"not reported"`` for
    ``None``, or ``"unavailable (...)"`` naming the error when reading it raised."""
    # SHR-12
    if memory is None:
        return "not reported"
    try:
        return str(memory.status().summary)
    except Exception as exc:  # noqa: BLE001 - a health report must not fail on one bad reading
        return f"unavailable ({type(exc).__name__}: {exc})"


def _row_of(account: LimiterIdentity, waiters: int) -> LimiterRow | None:
    try:
        return LimiterRow(
            name=account.limiter_name,
            category=account.limiter_category,
            capacity=account.capacity,
            used=account.in_use,
            waiters=waiters,
            status=account.status_indicator,
        )
    except Exception:  # noqa: BLE001 - one broken account must not hide the others
        log.debug("Left an account out of the health snapshot", exc_info=True)
        return None


def capture_health(
    accounts: Iterable[LimiterIdentity],
    *,
    waiters: Callable[[LimiterIdentity], int] = lambda account: 0,
    memory: LimiterIdentity | None = None,
    running: Iterable[tuple[JobType, str | None]] = (),
    queues: QueueSizes = QueueSizes(),
    cpu: CpuLoad | None = None,
    at: float | None = None,
) -> HealthSnapshot:
    """A snapshot read from live accounts and jobs.

    Each account in ``accounts`` (an account listed twice counts once) becomes a row with its
    current ``in_use``, ``capacity`` and status indicator, and ``waiters(account)`` jobs held on
    it. ``running`` names each running job by ``(type, workflow id)``. ``at`` defaults to the
    trio clock's now (``None`` outside a trio run).
    """
    if at is None:
        at = trio_now_or_none()
    rows: list[LimiterRow] = []
    seen: set[int] = set()
    for account in accounts:
        if id(account) in seen:
            continue
        seen.add(id(account))
        row = _row_of(account, waiters(account))
        if row is not None:
            rows.append(row)
    by_type: dict[JobType, int] = {}
    workflows: set[str] = set()
    for kind, workflow_id in running:
        by_type[kind] = by_type.get(kind, 0) + 1
        if workflow_id is not None:
            workflows.add(workflow_id)
    return HealthSnapshot(
        limiters=tuple(rows),
        memory=memory_summary(memory),
        running=by_type,
        workflows_active=len(workflows),
        queues=queues,
        cpu=cpu,
        at=at,
    )


def read_cpu_load() -> CpuLoad | None:
    """The processors' load since the previous call, through psutil; ``None`` when unavailable.

    psutil measures between two calls, so the very first call answers 0 %; the reporter makes
    that call when it is built.
    """
    try:
        import psutil  # type: ignore[import-untyped, unused-ignore]

        cores = psutil.cpu_count() or 1
        percent = float(psutil.cpu_percent(interval=None))
    except Exception:  # noqa: BLE001 - no reading is an answer: the row is left out
        return None
    if percent < 0:
        return None
    return CpuLoad(cores=int(cores), load=percent / 100.0)


# -- the reporter ---------------------------------------------------------------------------------
def is_health_event(event: JobEvent) -> bool:
    """Whether the reporter counts ``event``: ``True`` for limiter and lifecycle events only."""
    # SHR-01
    return isinstance(event, LimiterEvent | LifecycleEvent)


def _colour_by_default() -> bool:
    stream = sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


class _Account:
    """What the reporter knows of one account: its latest event, and a bucket's recent grants."""

    __slots__ = ("grants", "latest")

    def __init__(self, latest: LimiterEvent) -> None:
        self.latest = latest
        self.grants: deque[tuple[float, float]] = deque()


class SystemHealthReporter(JobObserver[JobEvent]):
    """A bus observer that logs a :class:`HealthSnapshot` every ``every`` events.

    It takes limiter and lifecycle events (:func:`is_health_event`). Every event handed to
    :meth:`observe` counts, and on every ``every``-th one it logs one INFO record on
    ``logger`` (``nucleo_trio.observability.health`` by default) whose text starts with
    ``[System health snapshot]``.

    What it shows, and from where:

    * a limiter row per account name, from the latest event of that name: its capacity,
      ``in_use``, waiters and status indicator; for a token bucket, "used" is instead the
      amount granted in the last :data:`GRANT_WINDOW` seconds of ``clock``;
    * a CPU row from ``cpu`` (default :func:`read_cpu_load`; ``None`` for no row);
    * the memory line from ``memory``'s status;
    * jobs running, by job id: the first :class:`~nucleo_trio.bus.JobStartedEvent` of a job
      adds it (its re-runs do not add it again), its terminal event removes it;
    * the queue line from ``queues``, a reader of the lanes and the admission line.

    ``color`` ``None`` colours the log only when stderr is a terminal and ``NO_COLOR`` is unset.
    ``every`` must be a positive int (else :class:`ValueError`), and ``queues``, ``cpu`` and
    ``clock`` callables (else :class:`TypeError`).
    """

    # SHR-01..15; SHR-09 (a token bucket's used is its grants in the window), SHR-13, 14 (running)

    def __init__(
        self,
        *,
        every: int = DEFAULT_HEALTH_EVERY,
        memory: LimiterIdentity | None = None,
        queues: Callable[[], QueueSizes] | None = None,
        cpu: Callable[[], CpuLoad | None] | None = read_cpu_load,
        color: bool | None = None,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every <= 0:
            raise ValueError(f"SystemHealthReporter: every must be a positive int, got {every!r}")
        for name, value in (("queues", queues), ("cpu", cpu), ("clock", clock)):
            if value is not None and not callable(value):
                raise TypeError(
                    f"SystemHealthReporter: {name} must be callable, got {type(value).__name__}"
                )
        self.every = every
        """How many counted events separate two logged snapshots (:data:`DEFAULT_HEALTH_EVERY`
        by default)."""
        self.memory = memory
        """The memory account whose status line the snapshot shows; ``None`` for
        ``"not reported"``."""
        self._queues = queues
        self._cpu = cpu
        self.color = _colour_by_default() if color is None else color
        """Whether the logged snapshot is coloured with ANSI codes, as decided when it was
        built."""
        self._log = logger if logger is not None else log
        self._clock = clock
        self._count = 0
        self._accounts: dict[str, _Account] = {}
        self._running: dict[str, tuple[JobType, str | None]] = {}
        if cpu is not None:
            cpu()  # the first reading only sets psutil's baseline

    @property
    def predicate(self) -> Callable[[JobEvent], bool]:
        return is_health_event

    @property
    def events_seen(self) -> int:
        """How many events :meth:`observe` has counted."""
        return self._count

    async def on_event(self, event: JobEvent) -> None:
        self.observe(event)

    def observe(self, event: JobEvent) -> None:
        """Count ``event``, learn from it, and log a snapshot if it is the ``every``-th."""
        self._count += 1
        if isinstance(event, LimiterEvent):
            self._note_limiter(event)
        elif isinstance(event, JobStartedEvent):
            snapshot = event.snapshot
            if snapshot is not None and snapshot.job_id:
                kind = snapshot.kind if isinstance(snapshot.kind, JobType) else JobType.JOB
                self._running.setdefault(snapshot.job_id, (kind, snapshot.workflow_id or None))
        elif isinstance(event, TerminalEvent):
            if event.snapshot is not None:
                self._running.pop(event.snapshot.job_id, None)
        if self._count % self.every == 0 and self._log.isEnabledFor(logging.INFO):
            self._log.info("%s", self.render())

    def _note_limiter(self, event: LimiterEvent) -> None:
        account = self._accounts.get(event.limiter_name)
        if account is None:
            account = self._accounts[event.limiter_name] = _Account(event)
        account.latest = event
        if event.limiter_category == "token_bucket" and event.type in (
            LimiterEventType.GRANTED_IMMEDIATE,
            LimiterEventType.GRANTED_FROM_HOLD,
        ):
            now = self._clock()
            account.grants.append((now, event.amount))
            self._expire(account, now)

    @staticmethod
    def _expire(account: _Account, now: float) -> None:
        grants = account.grants
        while grants and grants[0][0] <= now - GRANT_WINDOW:
            grants.popleft()

    def _row(self, account: _Account, now: float | None) -> LimiterRow:
        event = account.latest
        used: int | float = event.in_use
        if event.limiter_category == "token_bucket":
            if now is not None:
                self._expire(account, now)
            used = sum(amount for _, amount in account.grants)
        return LimiterRow(
            name=event.limiter_name,
            category=event.limiter_category,
            capacity=event.capacity,
            used=used,
            waiters=event.waiters,
            status=event.status_indicator,
        )

    def snapshot(self) -> HealthSnapshot:
        """What the reporter would log now."""
        try:
            now: float | None = self._clock()
        except RuntimeError:  # read outside a trio run: the grants are kept as they are
            now = None
        workflows = {wf for _, wf in self._running.values() if wf is not None}
        by_type: dict[JobType, int] = {}
        for kind, _ in self._running.values():
            by_type[kind] = by_type.get(kind, 0) + 1
        return HealthSnapshot(
            limiters=tuple(self._row(account, now) for account in self._accounts.values()),
            memory=memory_summary(self.memory),
            running=by_type,
            workflows_active=len(workflows),
            queues=self._queues() if self._queues is not None else QueueSizes(),
            cpu=self._cpu() if self._cpu is not None else None,
            at=now,
        )

    def render(self) -> str:
        """The snapshot as the reporter logs it."""
        return self.snapshot().render(color=self.color)
