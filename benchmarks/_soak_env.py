"""What one soak batch runs on: its accounts, its SQLite file, its jobs, and its instruments.

A :class:`Batch` owns everything a batch of jobs touches: the four accounts a demand draws
from (two :class:`~nucleo_trio.admission.CountingGate`, a
:class:`~nucleo_trio.admission.TokenBucket` and :class:`Ledger`, a custom limiter written here
that counts every take and give), an :class:`~nucleo_trio.resources.SQLiteProvider` over the
run's database file, the record of every job it submitted, and the instruments the checks read:
terminal events published and delivered, handle settlements, connections really open.

Stage-precise cancels that must land while a COMMIT is in flight are driven from inside the
worker thread that runs the COMMIT (:class:`SoakConnection`): it cancels the job, or jumps the
virtual clock past the job's deadline (and past the grace, for phase two), through
``trio.from_thread``, and only then sends the COMMIT. While the COMMIT itself runs, a helper
task keeps the scheduler busy so the autojump clock stands still (see
:meth:`Batch.keep_awake_from_thread`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing

from nucleo_trio.admission import (
    AbstractRateLimiter,
    CountingGate,
    SemaphoreLimiterStatus,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.bus import events as ev
from nucleo_trio.bus.bus import MessageBus
from nucleo_trio.bus.observers import JobObserver
from nucleo_trio.dispatch import JobDispatcher, grace_period
from nucleo_trio.errors import (
    InvalidInputError,
    OverloadRetry,
    RateLimitRetry,
    ResponseCorrectionRetry,
    TransientErrorRetry,
)
from nucleo_trio.jobs import (
    AbstractJob,
    Identifiable,
    JobContext,
    JobHandle,
    JobRequirements,
    JobState,
    Orchestrator,
    Tool,
    current_job,
)
from nucleo_trio.resources import SQLiteProvider

from ._soak_plan import JobPlan

__all__ = [
    "ACTIVE",
    "BUSY_TIMEOUT",
    "MAX_JUMP",
    "PROVIDER_BOUND",
    "TERMINAL",
    "Batch",
    "JobRecord",
    "Ledger",
    "SoakBus",
    "SoakConnection",
    "SoakOrchestrator",
    "SoakSQLite",
    "SoakTool",
    "create_database",
    "settle_counter",
    "stage_of",
]

TERMINAL = (
    ev.JobCompletedEvent,
    ev.JobFailedEvent,
    ev.JobTimedOut,
    ev.JobCancelled,
    ev.DependencyFailureEvent,
)

PROVIDER_BOUND = 2
"""The SQLite provider's ``max_connections``: more open at once is a violation (DB-12)."""

BUSY_TIMEOUT = 1.0
"""Real seconds a statement waits for another connection's write lock ("database is locked"
after that). Two connections within the bound only ever wait a few milliseconds; more than
the bound open at once (DB-12) is where longer waits come from."""

MAX_JUMP = 6.0
"""The longest jump of the virtual clock the commit hook makes to reach a job's deadline: the
runtime bounds a commit's answer (10 s), and a longer jump would test that bound instead of
the race between a deadline and a commit that answers."""

ACTIVE: list[Batch | None] = [None]
"""The batch running now (one at a time): where the patched ``JobHandle._settle`` reports."""


# -- the custom limiter ------------------------------------------------------------------------


class Ledger(AbstractRateLimiter):
    """A unit-permit account that keeps books instead of trusting its callers.

    RELEASE kind. Every push-back from upstream (``on_rate_limit_error``) tightens it by a
    permit (at most two below its base), every success relaxes it again and wakes admission.
    A give of more than is held is not refused (that would hide the amount): it is counted in
    ``overgiven`` for the checks.
    """

    def __init__(self, name: str, capacity: int) -> None:
        self._name = name
        self._base = capacity
        self._penalty = 0
        self._in_use = 0
        self.takes = 0
        self.gives = 0
        self.overgiven = 0
        self.successes = 0
        self.pushbacks = 0

    @property
    def limiter_name(self) -> str:
        return self._name

    @property
    def limiter_category(self) -> str:
        return "semaphore"

    @property
    def capacity(self) -> int:
        return self._base - self._penalty

    @property
    def in_use(self) -> int:
        return self._in_use

    def status(self) -> SemaphoreLimiterStatus:
        return SemaphoreLimiterStatus(self.capacity, max(0, self.capacity - self._in_use), None)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self._in_use + len(mine) + len(reserved_ahead) <= self.capacity

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        if not self.fits(mine, reserved_ahead):
            return False
        self._in_use += len(mine)
        self.takes += 1
        return True

    def give(self, amounts: Sequence[Any]) -> None:
        returned = len(amounts)
        self.gives += 1
        if returned > self._in_use:
            self.overgiven += returned - self._in_use
            self._in_use = 0
        else:
            self._in_use -= returned

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None

    def on_success(self, input: Any = None) -> None:
        self.successes += 1
        if self._penalty:
            self._penalty -= 1
            self._capacity_changed()

    def on_rate_limit_error(self, failure: BaseException | Any, input: Any = None) -> None:
        self.pushbacks += 1
        self._penalty = min(2, self._penalty + 1)


# -- SQLite ------------------------------------------------------------------------------------


def create_database(path: Path) -> None:
    """The soak's tables: one row per committed job, and an orphan table whose deferred
    foreign key fails the COMMIT of every job that writes to it."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS soak_rows ("
            " job_id TEXT PRIMARY KEY, batch INTEGER NOT NULL, run INTEGER NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS soak_orphans ("
            " job_id TEXT PRIMARY KEY,"
            " parent TEXT REFERENCES soak_rows(job_id) DEFERRABLE INITIALLY DEFERRED)"
        )
    conn.close()


class SoakConnection(sqlite3.Connection):
    """A connection that tells its batch when it opens and closes, and runs the batch's
    commit-stage hook in the worker thread just before each COMMIT is sent."""

    batch: Batch | None = None
    _counted_closed = False

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        batch = self.batch
        if batch is not None and sql == "ROLLBACK":
            # A close's rollback is part of the close: the clock holds still for it too.
            awake = batch.keep_awake_from_thread()
            try:
                return super().execute(sql, parameters)
            finally:
                if awake:
                    batch.let_sleep_from_thread()
        if batch is None or sql != "COMMIT":
            return super().execute(sql, parameters)
        # the clock stands still from here (but for the hook's own jumps) until COMMIT answers
        awake = batch.keep_awake_from_thread()
        record = batch.before_commit_in_thread()
        try:
            return super().execute(sql, parameters)
        finally:
            if record is not None:
                record.stage = "committed"
            if awake:
                batch.let_sleep_from_thread()

    def close(self) -> None:
        # The clock holds still while the connection closes in its worker thread: a forced
        # close runs in the background, and the dispatcher's bounded wait for it (virtual
        # seconds) must not run out on a close that takes microseconds of real time.
        batch = self.batch
        awake = batch.keep_awake_from_thread() if batch is not None else False
        try:
            if batch is not None and not self._counted_closed:
                self._counted_closed = True
                batch.connection_closed(self)
            super().close()
        finally:
            if awake and batch is not None:
                batch.let_sleep_from_thread()


class SoakSQLite(SQLiteProvider):
    """The project's SQLite provider over :class:`SoakConnection`: foreign keys enforced (a
    per-connection pragma, set before any transaction), no fsync (commits are real, the disk
    is not the subject)."""

    def __init__(self, name: str, path: Path, max_connections: int, batch: Batch) -> None:
        super().__init__(name, path, max_connections)
        self.batch = batch

    def _connect(self, read_only: bool) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT,
            isolation_level=None,
            check_same_thread=False,
            factory=SoakConnection,
        )
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("PRAGMA synchronous = OFF")
        assert isinstance(connection, SoakConnection)
        connection.batch = self.batch
        self.batch.connection_opened(connection)
        return connection


# -- the bus -----------------------------------------------------------------------------------


class SoakBus(MessageBus):
    """The dispatcher's bus, counting the terminal events published per job as they are
    published (delivery is counted by a subscriber)."""

    def __init__(self) -> None:
        super().__init__()
        self.published: Counter[str] = Counter()

    def publish(self, event: ev.JobEvent) -> None:
        if isinstance(event, TERMINAL) and event.snapshot is not None:
            self.published[event.snapshot.job_id] += 1
        super().publish(event)


class _TerminalRecorder:
    """Delivered terminal events per job, by class name."""

    def __init__(self) -> None:
        self.seen: defaultdict[str, list[str]] = defaultdict(list)

    def __call__(self, event: ev.JobEvent) -> None:
        if isinstance(event, TERMINAL) and event.snapshot is not None:
            self.seen[event.snapshot.job_id].append(type(event).__name__)


class _ThrowOnStart:
    """Raises on every third ``JobStartedEvent``."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: ev.JobEvent) -> None:
        if isinstance(event, ev.JobStartedEvent):
            self.count += 1
            if self.count % 3 == 0:
                raise ValueError(f"soak observer: refusing start #{self.count}")


class _ThrowOnTerminal:
    """Raises on every terminal event it is given."""

    def __call__(self, event: ev.JobEvent) -> None:
        raise RuntimeError(f"soak observer: {type(event).__name__} is not welcome here")


class _FlakyAsync:
    """An async observer that takes a checkpoint, then raises on every seventh event."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, event: ev.JobEvent) -> None:
        await trio.lowlevel.checkpoint()
        self.count += 1
        if self.count % 7 == 0:
            raise LookupError(f"soak observer: event #{self.count} got lost")


class _ThrowingPredicate(JobObserver[ev.JobEvent]):
    """A JobObserver whose predicate raises on every eleventh event and whose ``on_event``
    raises on every fifth."""

    def __init__(self) -> None:
        self.asked = 0
        self.got = 0

    @property
    def predicate(self) -> Callable[[ev.JobEvent], bool] | None:
        def choose(event: ev.JobEvent) -> bool:
            self.asked += 1
            if self.asked % 11 == 0:
                raise ArithmeticError("soak predicate: cannot decide")
            return True

        return choose

    async def on_event(self, event: ev.JobEvent) -> None:
        self.got += 1
        if self.got % 5 == 0:
            raise OSError("soak observer: disk full (not really)")


# -- jobs --------------------------------------------------------------------------------------


class JobRecord:
    """One submitted job and what the soak saw of it."""

    __slots__ = (
        "plan",
        "job",
        "handle",
        "stage",
        "runs",
        "signal_attempt",
        "cancel_stage",
        "settled_early",
        "host_stage",
    )

    def __init__(self, plan: JobPlan) -> None:
        self.plan = plan
        self.job: AbstractJob[Any] | None = None
        self.handle: JobHandle[Any] | None = None
        self.stage = "submitted"  # the job's own account of where it is
        self.runs = 0  # executions (the dispatcher's attempt also counts the ones that never ran)
        self.signal_attempt = -1  # the attempt that last raised a re-run signal
        self.cancel_stage: str | None = None  # where the job was when the soak cancelled it
        self.settled_early = False  # settled before its terminal event was published
        self.host_stage: str | None = None  # where it was when the host cut the dispatcher

    @property
    def job_id(self) -> str:
        assert self.job is not None
        return self.job.job_id

    def describe(self) -> str:
        return f"{self.job_id if self.job is not None else '?'} {self.plan.describe()}"


def stage_of(record: JobRecord) -> str:
    """Where a job is right now, as precisely as its state and its own account tell."""
    handle = record.handle
    if handle is None:
        return "not submitted"
    if handle.done:
        return "after its end"
    state = handle.state
    if state is JobState.QUEUED:
        return "queued in a lane"
    if record.stage == "committing":
        return "committing"
    if record.stage == "committed":
        return "finishing after its commit"
    attempt = handle.context.attempt
    if record.stage == "pacing":
        if attempt == record.signal_attempt:
            return "pacing between re-runs"
        return "parked in admission (re-run)"
    if record.stage in ("running", "returned") or state is JobState.RUNNING:
        return "running"
    if record.stage == "admitted":
        return "admitted (pre-execute)"
    if attempt == 0:
        return "waiting for dependencies" if record.plan.deps else "starting"
    return "parked in admission"


_SIGNAL_CLASSES: dict[str, type[RateLimitRetry | TransientErrorRetry | OverloadRetry]] = {
    "RateLimitRetry": RateLimitRetry,
    "TransientErrorRetry": TransientErrorRetry,
    "OverloadRetry": OverloadRetry,
}


def _blocking_work() -> None:
    time.sleep(0.0005)


class SoakTool(Tool[Any]):
    """A tool that does what its plan says: work, write a row, return, raise, signal, overrun."""

    def __init__(self, parent: Identifiable, record: JobRecord, batch: Batch) -> None:
        super().__init__(parent, prefix=f"b{batch.number}t{record.plan.index}")
        self.record = record
        self.batch = batch
        plan = record.plan
        self.timeout = plan.timeout
        self.upstream_retries = plan.upstream_retries
        self.tolerates_dependency_failures = plan.tolerant

    def requirements(self) -> JobRequirements:
        plan, batch = self.record.plan, self.batch
        needs = JobRequirements()
        for name in plan.demand:
            needs.require_rate_limiter(
                batch.accounts[name], plan.tokens if name == "bucket" else None
            )
        if plan.http:
            needs.require_http()
        if plan.db:
            needs.require_database(batch.provider).require_transaction()
        return needs

    async def pre_execute(self, context: JobContext) -> None:
        self.record.stage = "admitted"

    async def _write(self, context: JobContext) -> None:
        provider = self.batch.provider
        assert context.resources is not None
        handle = context.resources.handle(provider)
        await provider.execute(
            handle,
            "INSERT INTO soak_rows (job_id, batch, run) VALUES (?, ?, ?)",
            (self.job_id, self.batch.number, self.record.runs),
        )
        if self.record.plan.db == "tx_fail":
            await provider.execute(
                handle,
                "INSERT INTO soak_orphans (job_id, parent) VALUES (?, ?)",
                (self.job_id, f"no-such-job-{self.job_id}"),
            )

    def _pacing(self, context: JobContext) -> None:
        record = self.record
        record.stage = "pacing"
        record.signal_attempt = context.attempt
        if record.plan.cancel == "pacing" and record.runs == 1:
            self.batch.cancel_soon(
                record, record.plan.cancel_after, "soak: cancelled between re-runs"
            )

    async def execute(self, context: JobContext) -> Any:
        record, plan = self.record, self.record.plan
        record.stage = "running"
        record.runs += 1
        if plan.cancel == "running" and record.runs == 1:
            self.batch.cancel_soon(record, plan.cancel_after, "soak: cancelled while it ran")
        behaviour = plan.behaviour
        if behaviour == "overrun_coop":
            if plan.db:
                await self._write(context)
            end = trio.current_time() + plan.timeout * 3
            while trio.current_time() < end:
                context.check_cancellation()
                await trio.sleep(plan.timeout / 4)
            return "late"
        if behaviour == "overrun_deaf":
            if plan.db:
                await self._write(context)
            await trio.sleep(plan.timeout * 5)
            return "late"
        if behaviour == "overrun_shield":
            if plan.db:
                await self._write(context)
            with trio.CancelScope(shield=True):
                await trio.sleep(plan.timeout + grace_period(plan.timeout) + 1.0)
            return "late"
        if behaviour == "listen":
            with trio.CancelScope() as scope:
                unregister = context.on_cancel(scope.cancel)
                try:
                    await trio.sleep(plan.work)
                finally:
                    unregister()
            context.check_cancellation()
        elif behaviour == "thread":
            await trio.to_thread.run_sync(_blocking_work, abandon_on_cancel=True)
            await trio.sleep(plan.work)
        elif behaviour == "ignore_cancel":
            await trio.sleep(plan.work)
        else:
            if plan.work:
                await trio.sleep(plan.work)
            else:
                await trio.lowlevel.checkpoint()
            context.check_cancellation()
        if plan.db:
            await self._write(context)
        if behaviour == "raise_value":
            raise ValueError(f"{self.job_id}: the input was wrong")
        if behaviour == "raise_correctable":
            raise InvalidInputError(f"{self.job_id}: parameter 'q' must not be empty")
        if behaviour in ("rerun", "rerun_exhaust") and record.runs <= plan.signals:
            self._pacing(context)
            signal = _SIGNAL_CLASSES[plan.signal_kind]
            raise signal(f"{self.job_id}: upstream said no (run {record.runs})")
        if behaviour == "correction" and record.runs <= plan.signals:
            self._pacing(context)
            raise ResponseCorrectionRetry(f"{self.job_id}: the reply did not parse")
        record.stage = "returned"
        return f"{self.job_id}:ok"


class SoakOrchestrator(Orchestrator[Any]):
    """Submits its planned children (with their sibling dependencies) and then does what its
    mode says: await them all, fail with the first failure, walk away, raise, cancel some."""

    def __init__(self, parent: Identifiable, record: JobRecord, batch: Batch) -> None:
        super().__init__(parent, prefix=f"b{batch.number}o{record.plan.index}")
        self.record = record
        self.batch = batch
        self.tolerates_dependency_failures = record.plan.tolerant

    async def execute(self, context: JobContext) -> Any:
        record, plan, batch = self.record, self.record.plan, self.batch
        record.stage = "running"
        record.runs += 1
        handles: list[JobHandle[Any]] = []
        for child_plan in plan.children:
            child = batch.make(child_plan, self)
            deps = [handles[d] for d in child_plan.deps]
            handle = self.submit(child, dependencies=deps)
            batch.submitted(child.record, handle)
            handles.append(handle)
        mode = plan.orch_mode
        if mode == "fire_forget":
            return len(handles)
        if mode == "raise_early":
            await trio.sleep(plan.work)
            raise ValueError(f"{self.job_id}: gave up on its children")
        if mode == "cancel_children":
            await trio.sleep(plan.work)
            for position in plan.cancel_children:
                handles[position].cancel("soak: cancelled by its parent")
        failures = 0
        for handle in handles:
            if mode == "watch":
                context.check_cancellation()
            try:
                await handle.result()
            except Exception as exc:
                if mode == "strict":
                    raise RuntimeError(f"{self.job_id}: child {handle.job_id} failed") from exc
                failures += 1
        return failures


# -- the batch ---------------------------------------------------------------------------------


class Batch:
    """Everything one batch of jobs runs on, and what the checks read afterwards."""

    def __init__(self, number: int, db_path: Path, clock: trio.testing.MockClock) -> None:
        self.number = number
        self.clock = clock
        self.gate_a = CountingGate("gate_a", 6)
        self.gate_b = CountingGate("gate_b", 10)
        self.bucket = TokenBucket("soak-model", TokenBucketConfig(rpm=3_000, tpm=400_000))
        self.ledger = Ledger("ledger", 8)
        self.accounts: dict[str, Any] = {
            "gate_a": self.gate_a,
            "gate_b": self.gate_b,
            "bucket": self.bucket,
            "ledger": self.ledger,
        }
        self.provider = SoakSQLite("soak", db_path, max_connections=PROVIDER_BOUND, batch=self)
        self.bus = SoakBus()
        self.recorder = _TerminalRecorder()
        self.records: list[JobRecord] = []
        self.by_id: dict[str, JobRecord] = {}
        self.dispatcher: JobDispatcher | None = None
        self.helpers: trio.Nursery | None = None
        self.live_refusals: list[tuple[JobRecord, str]] = []  # filled by submit/cancel checks
        self.cancel_stages: Counter[str] = Counter()
        self._conn_lock = threading.Lock()
        self.connections_open = 0
        self.connections_peak = 0
        self.provider_bound = PROVIDER_BOUND
        self._owners: dict[int, str] = {}
        self.peak_owners: list[str] = []
        self.peak_permits = 0
        self.hook_failures: list[str] = []
        self._awake = 0
        self.jumps = 0
        self.jumps_skipped = 0
        self.unknown_fates: Counter[str] = Counter()
        self.unknown_examples: list[str] = []
        self.token: trio.lowlevel.TrioToken | None = None

    # -- set-up ---------------------------------------------------------------------------------
    def attach(self, dispatcher: JobDispatcher, helpers: trio.Nursery) -> None:
        """Subscribe the recorder and the throwing observers; remember where helpers run."""
        self.dispatcher = dispatcher
        self.helpers = helpers
        self.token = trio.lowlevel.current_trio_token()
        bus = dispatcher.bus
        bus.subscribe(self.recorder, event_type=ev.TerminalEvent)
        bus.subscribe(_ThrowOnStart(), event_type=ev.JobStartedEvent)
        bus.subscribe(_ThrowOnTerminal(), event_type=ev.TerminalEvent)
        bus.subscribe(_FlakyAsync(), event_type=ev.LifecycleEvent)
        bus.subscribe(_ThrowingPredicate(), event_type=ev.LifecycleEvent)

    def make(self, plan: JobPlan, parent: Identifiable) -> SoakTool | SoakOrchestrator:
        record = JobRecord(plan)
        job: SoakTool | SoakOrchestrator
        if plan.kind == "orch":
            job = SoakOrchestrator(parent, record, self)
        else:
            job = SoakTool(parent, record, self)
        record.job = job
        self.records.append(record)
        self.by_id[job.job_id] = record
        return job

    def submitted(self, record: JobRecord, handle: JobHandle[Any]) -> None:
        """A job was submitted: apply its cancel plan."""
        record.handle = handle
        plan = record.plan
        if plan.cancel == "queued":
            self.cancel(record, "soak: cancelled right after submit")
            if not handle.done:
                self.live_refusals.append(
                    (record, "a cancel while queued in a lane did not settle the job at once")
                )
        elif plan.cancel == "timed":
            self.cancel_soon(record, plan.cancel_after, "soak: cancelled at a random instant")

    def cancel_soon(self, record: JobRecord, delay: float, reason: str) -> None:
        """Cancel ``record``'s job from a helper task ``delay`` virtual seconds from now."""
        if self.helpers is None:
            return
        try:
            self.helpers.start_soon(self._cancel_later, record, delay, reason)
        except RuntimeError:
            pass  # the batch is over (its bound ran out): nothing left to cancel

    def cancel(self, record: JobRecord, reason: str) -> None:
        handle = record.handle
        assert handle is not None
        stage = stage_of(record)
        record.cancel_stage = stage
        self.cancel_stages[stage] += 1
        was_done = handle.done
        found = handle.cancel(reason)
        if not found and not was_done and not handle.done:
            self.live_refusals.append((record, f"cancel() answered False for a live job ({stage})"))

    async def _cancel_later(self, record: JobRecord, delay: float, reason: str) -> None:
        await trio.sleep(delay)
        self.cancel(record, reason)

    async def cancel_workflow_later(self, workflow_id: str, delay: float) -> None:
        await trio.sleep(delay)
        assert self.dispatcher is not None
        self.dispatcher.cancel_workflow(workflow_id, "soak: the user closed the tab")

    # -- connection accounting (worker threads) ----------------------------------------------
    def connection_opened(self, connection: SoakConnection) -> None:
        context = current_job()
        owner = context.job_id if context is not None else "?"
        with self._conn_lock:
            self._owners[id(connection)] = owner
            self.connections_open += 1
            if self.connections_open > self.connections_peak:
                self.connections_peak = self.connections_open
                if self.connections_open > self.provider_bound:
                    self.peak_owners = list(self._owners.values())
                    self.peak_permits = self.provider.admission().in_use

    def connection_closed(self, connection: SoakConnection) -> None:
        with self._conn_lock:
            self._owners.pop(id(connection), None)
            self.connections_open -= 1

    def owners_at_peak(self) -> str:
        """The jobs that held the connections open at the worst moment, described."""
        parts = []
        for job_id in self.peak_owners:
            record = self.by_id.get(job_id)
            parts.append(record.describe() if record is not None else job_id)
        return "; ".join(parts)

    # -- the clock stands still while a COMMIT runs --------------------------------------------
    # With autojump_threshold=0 the virtual clock jumps to the next timer whenever every task
    # waits, including while one waits for a worker thread: a COMMIT that takes 100 us of real
    # time would otherwise take as long as the next timer is far, and every bound the runtime
    # puts on a commit's answer would expire at once. So while a COMMIT is in flight a helper
    # task takes checkpoints, the scheduler never idles, and the clock does not move. (The
    # other statements are left to the autojump: it is what makes deadlines land on them.)
    def keep_awake_from_thread(self) -> bool:
        try:
            return bool(trio.from_thread.run_sync(self._wake_up))
        except (RuntimeError, trio.RunFinishedError):
            return False

    def let_sleep_from_thread(self) -> None:
        try:
            trio.from_thread.run_sync(self._fall_asleep)
        except (RuntimeError, trio.RunFinishedError):
            self._awake = 0

    def _wake_up(self) -> bool:
        if self.helpers is None:
            return False
        self._awake += 1
        if self._awake == 1:
            try:
                self.helpers.start_soon(self._stay_awake)
            except RuntimeError:  # the helpers' nursery is closed: the batch is over
                self._awake = 0
                return False
        return True

    def _fall_asleep(self) -> None:
        self._awake = max(0, self._awake - 1)

    async def _stay_awake(self) -> None:
        while self._awake > 0:
            _yield_gil()  # the COMMIT's thread needs the GIL back to return
            await trio.lowlevel.checkpoint()

    # -- the commit-stage hook (a worker thread, just before COMMIT is sent) ---------------------
    def before_commit_in_thread(self) -> JobRecord | None:
        """Mark the job committing and, when its plan says so, cancel it or jump the clock
        past its deadline (and grace) while its COMMIT is about to run: answers the record."""
        context = current_job()
        if context is None:
            return None
        record = self.by_id.get(context.job_id)
        if record is None:
            return None
        record.stage = "committing"
        how = record.plan.cancel
        if how not in ("commit", "deadline_commit", "phase2_commit"):
            return record
        try:
            if how == "commit":
                trio.from_thread.run_sync(
                    self.cancel, record, "soak: cancelled while its commit was in flight"
                )
                return record
            trio.from_thread.run_sync(self._jump_past_deadline, context)
            _let_trio_run(lambda: context.timed_out)  # phase one's timer fires (or defers)
            if how == "phase2_commit" and record.job is not None:
                timeout = record.job.timeout or 0.0
                trio.from_thread.run_sync(self.clock.jump, grace_period(timeout) + 0.01)
                _let_trio_run(lambda: False)  # phase two's cancel and force-close, if armed
        except Exception as exc:  # noqa: BLE001 - a broken hook is reported, not raised
            self.hook_failures.append(f"{record.describe()}: {type(exc).__name__}: {exc}")
        return record

    def _jump_past_deadline(self, context: JobContext) -> None:
        deadline = context.deadline
        if deadline is None or context.timed_out:
            return
        ahead = deadline - trio.current_time()
        if 0 <= ahead <= MAX_JUMP:
            self.clock.jump(ahead + 0.001)
            self.jumps += 1
        elif ahead > MAX_JUMP:
            self.jumps_skipped += 1


def _noop() -> None:
    return None


def _yield_gil() -> None:
    time.sleep(0)


def _let_trio_run(done: Callable[[], bool], rounds: int = 6) -> None:
    """From a worker thread: give the trio thread a few scheduling rounds (each round trip
    through ``trio.from_thread`` needs one) so the timers a clock jump expired get to run,
    stopping early once ``done()`` is true."""
    for _ in range(rounds):
        if done():
            return
        trio.from_thread.run_sync(_noop)
        time.sleep(0.0002)


def settle_counter(original: Callable[..., None]) -> Callable[..., None]:
    """A replacement for ``JobHandle._settle`` that counts the calls on each handle and tells
    the active batch about the first one."""

    def _settle(
        self: JobHandle[Any], result: Any = None, error: BaseException | None = None
    ) -> None:
        calls = self.__dict__.get("_soak_settles", 0) + 1
        self.__dict__["_soak_settles"] = calls
        batch = ACTIVE[0]
        if calls == 1 and batch is not None:
            record = batch.by_id.get(self.job_id)
            if record is not None and batch.bus.published[self.job_id] == 0:
                record.settled_early = True
        original(self, result, error)

    return _settle
