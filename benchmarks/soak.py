"""A fault soak of the dispatcher: ``python -m benchmarks.soak --jobs 100000 --seed 1``.

Not a test and not a timing benchmark: a long run of hostile but legal work that checks, after
every batch, the promises the runtime makes about every job, and prints every broken one.

**Phase one** runs ``--jobs`` jobs in batches of ``--batch``, each batch on a fresh dispatcher in
its own ``trio.run`` under ``trio.testing.MockClock(autojump_threshold=0)`` (so timeouts, pacing
and token windows cost no real time). A batch is a set of random job trees drawn from the seed
before anything runs (:mod:`benchmarks._soak_plan`): orchestrators submitting children with
dependencies among siblings, tools that return, raise (``ValueError``, a correctable error),
raise re-run signals (``RateLimitRetry``, ``TransientErrorRetry``, ``OverloadRetry``,
``ResponseCorrectionRetry``, within and past their budgets), run past their timeout (stopping
at phase one, ignoring it until phase two, or shielded past the grace), block in a worker
thread, or ignore their cancellation. Most tools demand two or three of four accounts (two
``CountingGate``, a ``TokenBucket``, a custom limiter), some the HTTP gate too; some write a row keyed
by their job id to a real SQLite file inside a transaction run by the dispatcher, and some of
those fail at COMMIT (a deferred foreign key). Jobs are cancelled with ``handle.cancel()`` at
every stage: in a lane, waiting for a dependency, parked in admission, pacing between re-runs,
running, and while their COMMIT is in flight (driven from the COMMIT's own worker thread, which
also jumps the clock past a job's deadline, or past its grace, before it sends the COMMIT).
Four observers on the bus raise on some of the events they get.

After every batch (:mod:`benchmarks._soak_checks`): every handle settled, exactly once, and not
before its terminal event was published; exactly one terminal event per job, of the kind the
handle's state says; nothing running, queued or parked; no task left in the dispatcher's job
nursery and none added to its system nursery; every account back to zero (the token bucket back
to full one window later); every connection closed and never more open than the provider's
bound; no exception group anywhere in a handle's error chain; and a row for exactly the
transactional jobs that completed.

**Phase two** (:mod:`benchmarks._soak_host`) cuts dispatchers off from outside while jobs run
and park (or while it starts, idles or drains): an outer ``trio.move_on_after`` or
``fail_after``, a cancelled parent nursery, an exception raised by the block's body, a
``KeyboardInterrupt`` or ``SystemExit`` raised by a job or an observer; then checks that only
what should came out of the block, bare, and the same per-job promises as phase one.

The plan is deterministic from ``--seed``. The outcomes are not entirely: SQLite runs in worker
threads on the real clock, and the autojump clock moves on whenever every task waits (a task
waiting for a worker thread included), so where a deadline lands against a statement varies
from run to run; the checks hold whatever the order. Two consequences are handled on purpose:
while a COMMIT runs the clock is held still (a helper task keeps the scheduler busy), so the
runtime's bound on a commit's answer measures the commit and not the next timer; and the wait
for a batch's handles is bounded on the real clock (``--stall-after``), not the virtual one. A
commit the runtime itself reports as of unknown fate (a ``CommitError`` whose ``unknown`` names
the database) is consistent with a row or without one: it is counted, not flagged.

Prints each kind of violation with its count and a few examples, the totals and jobs per second
(wall clock, phase one); exits 1 when any violation was found, 3 when a batch or a scenario hung
(``--hang-after``). ``--quick`` is the CI run: 6,000 jobs and 12 host scenarios, about 10 s on
an idle two-core machine (20 s with the cores shared).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.config import MemoryConfig
from nucleo_trio.jobs import JobHandle, workflow

from ._harness import Row, progress, verdict
from ._soak_checks import (
    Violations,
    describe_exc,
    is_quiet,
    live_checks,
    post_checks,
    read_rows,
    system_task_names,
)
from ._soak_env import ACTIVE, PROVIDER_BOUND, Batch, create_database, settle_counter
from ._soak_host import run_host_scenario
from ._soak_plan import JobPlan, draw_batch, draw_host_scenarios

NAME = "soak"
TITLE = "fault soak: random job trees, faults and cancels; violations must be 0"

QUICK_JOBS = 6_000
QUICK_HOST = 12
FULL_HOST = 48
HOST_JOBS = 150
BUCKET_WINDOW = 660.0
"""Virtual seconds after the last job before the token bucket must be full again (its refill
window stretches to ten minutes at the most)."""


class _CountingHandler(logging.Handler):
    """Counts the runtime's log records by logger and level instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname} {record.name}"] += 1


class Stats:
    """What the run did, for the report."""

    def __init__(self) -> None:
        self.jobs = 0
        self.batches = 0
        self.states: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.cancel_stages: Counter[str] = Counter()
        self.plans: Counter[str] = Counter()
        self.transactional = 0
        self.rows = 0
        self.wall = 0.0
        self.peak_connections = 0
        self.unknown_fates: Counter[str] = Counter()
        self.unknown_examples: list[str] = []
        self.jumps = 0
        self.jumps_skipped = 0
        self.host_jobs = 0
        self.host_wall = 0.0
        self.host_escapes: Counter[str] = Counter()

    def absorb(self, batch: Batch, rows: int) -> None:
        self.batches += 1
        self.rows += rows
        self.peak_connections = max(self.peak_connections, batch.connections_peak)
        self.cancel_stages.update(batch.cancel_stages)
        self.unknown_fates.update(batch.unknown_fates)
        self.unknown_examples.extend(batch.unknown_examples[: 3 - len(self.unknown_examples)])
        self.jumps += batch.jumps
        self.jumps_skipped += batch.jumps_skipped
        for record in batch.records:
            handle = record.handle
            if handle is None:
                continue
            self.jobs += 1
            plan = record.plan
            self.plans[plan.kind if plan.kind == "orch" else plan.behaviour] += 1
            if plan.db:
                self.transactional += 1
            state = handle.state.value if handle.done else "UNSETTLED"
            self.states[state] += 1
            if handle.done and handle.error is not None:
                self.errors[f"{state}: {type(handle.error).__name__}"] += 1


# -- phase one ----------------------------------------------------------------------------------


async def _wait_settled(handle: JobHandle[Any]) -> None:
    if handle.done:
        return
    try:
        await handle.result()
    except BaseException:
        if not handle.done:
            raise  # our own bound, or a real interrupt


async def _submit_roots(batch: Batch, roots: list[JobPlan], done: trio.Event) -> None:
    dispatcher = batch.dispatcher
    assert dispatcher is not None and batch.helpers is not None
    start = trio.current_time()
    handles: list[JobHandle[Any]] = []
    for root in roots:
        await trio.sleep_until(start + root.submit_at)
        job = batch.make(root, workflow(f"user{root.index % 7}", f"soak-b{batch.number}"))
        deps = [handles[root.root_dep]] if root.root_dep is not None else []
        handle = dispatcher.submit(job, dependencies=deps)
        batch.submitted(job.record, handle)
        handles.append(handle)
        if root.workflow_cancel_after is not None:
            batch.helpers.start_soon(
                batch.cancel_workflow_later, job.workflow_id, root.workflow_cancel_after
            )
    done.set()


async def _stall_detector(batch: Batch, waiting: trio.CancelScope, stall_after: float) -> None:
    """Stop the wait for the batch's handles when none has settled for ``stall_after`` real
    seconds. The bound is on the real clock: the virtual one races ahead whenever every task
    waits for a worker thread, so a virtual bound would fire while SQLite merely works."""
    settled = -1
    since = time.monotonic()
    while True:
        await trio.to_thread.run_sync(time.sleep, 0.25)
        now = sum(1 for r in batch.records if r.handle is not None and r.handle.done)
        if now != settled:
            settled, since = now, time.monotonic()
        elif time.monotonic() - since > stall_after:
            waiting.cancel()
            return


async def _quiesce(batch: Batch, baseline: Counter[str]) -> None:
    """Give background work (closes in worker threads) up to three seconds of real time to
    finish before the live checks look."""
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        await trio.testing.wait_all_tasks_blocked()
        if is_quiet(batch, baseline):
            return
        await trio.to_thread.run_sync(time.sleep, 0.005)


async def _batch_main(
    batch: Batch,
    roots: list[JobPlan],
    seed: int,
    stall_after: float,
    violations: Violations,
) -> None:
    config = DispatcherConfig(
        http_connections=12,
        seed=seed * 7919 + batch.number,
        memory=MemoryConfig(enabled=False),
    )
    try:
        async with open_dispatcher(config, bus=batch.bus) as dispatcher:
            async with trio.open_nursery() as helpers:
                batch.attach(dispatcher, helpers)
                baseline = system_task_names(batch)
                submitted = trio.Event()
                helpers.start_soon(_submit_roots, batch, roots, submitted)
                with trio.CancelScope() as waiting:
                    helpers.start_soon(_stall_detector, batch, waiting, stall_after)
                    await submitted.wait()
                    index = 0
                    while index < len(batch.records):
                        handle = batch.records[index].handle
                        if handle is not None:
                            await _wait_settled(handle)
                        index += 1
                helpers.cancel_scope.cancel()
            await _quiesce(batch, baseline)
            await trio.sleep(BUCKET_WINDOW)
            live_checks(batch, baseline, violations)
    except BaseException as exc:  # noqa: BLE001 - anything out of the block is a finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        violations.add(
            "open_dispatcher raised out of a batch",
            f"batch {batch.number}: {describe_exc(exc)}",
        )


def run_batch(
    number: int,
    seed: int,
    jobs: int,
    db_path: Path,
    stall_after: float,
    violations: Violations,
    stats: Stats,
) -> None:
    roots = draw_batch(seed, number, jobs)
    clock = trio.testing.MockClock(autojump_threshold=0)
    batch = Batch(number, db_path, clock)
    ACTIVE[0] = batch
    started = time.perf_counter()
    try:
        trio.run(_batch_main, batch, roots, seed, stall_after, violations, clock=clock)
    finally:
        ACTIVE[0] = None
    stats.wall += time.perf_counter() - started
    rows = read_rows(db_path, number)
    post_checks(batch, rows, violations)
    stats.absorb(batch, len(rows))


# -- the run ------------------------------------------------------------------------------------


class _Watchdog:
    """Aborts the run, printing what it found so far, when one step takes too long for real."""

    def __init__(self, limit: float, report: Any) -> None:
        self.limit = limit
        self.report = report
        self.step = "starting"
        self.since = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="soak watchdog", daemon=True)

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def beat(self, step: str) -> None:
        self.step = step
        self.since = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self.since > self.limit:
                print(
                    f"\nHANG: {self.step} did not finish within {self.limit:.0f} s of real time; "
                    "the report so far follows, then the stacks.",
                    flush=True,
                )
                try:
                    self.report(hung=self.step)
                finally:
                    faulthandler.dump_traceback(all_threads=True)
                    os._exit(3)


def _print_report(
    args: argparse.Namespace,
    stats: Stats,
    violations: Violations,
    logs: Counter[str],
    elapsed: float,
    hung: str | None = None,
) -> None:
    out = sys.stderr if args.report_to_stderr else sys.stdout
    rate = stats.jobs / stats.wall if stats.wall else 0.0
    print(file=out)
    print(
        f"nucleo_trio soak: seed {args.seed}, {args.jobs:,} jobs in batches of {args.batch:,}"
        f"{' (quick)' if args.quick else ''}",
        file=out,
    )
    print(
        f"phase one: {stats.jobs:,} jobs in {stats.batches} batches, {stats.wall:.1f} s wall, "
        f"{rate:,.0f} jobs/s",
        file=out,
    )
    print("  outcomes: " + ", ".join(f"{k} {v:,}" for k, v in stats.states.most_common()), file=out)
    print(
        f"  transactional jobs: {stats.transactional:,}, rows committed: {stats.rows:,}, "
        f"peak connections open: {stats.peak_connections} (max_connections {PROVIDER_BOUND})",
        file=out,
    )
    unknown = ", ".join(f"{k} {v:,}" for k, v in stats.unknown_fates.most_common()) or "none"
    print(
        f"  commits the runtime called of unknown fate (not violations): {unknown}; "
        f"clock jumps to a deadline mid-COMMIT: {stats.jumps:,} "
        f"(skipped as too far: {stats.jumps_skipped:,})",
        file=out,
    )
    for example in stats.unknown_examples:
        print(f"    unknown fate, e.g. {example}", file=out)
    print(
        "  cancels by stage: "
        + ", ".join(f"{k} {v:,}" for k, v in stats.cancel_stages.most_common()),
        file=out,
    )
    print(
        "  failures: " + ", ".join(f"{k} {v:,}" for k, v in stats.errors.most_common(12)),
        file=out,
    )
    print(
        f"phase two: {args.host} host scenarios, {stats.host_jobs:,} jobs, "
        f"{stats.host_wall:.1f} s wall; what came out of the block: "
        + ", ".join(f"{k} x{v}" for k, v in sorted(stats.host_escapes.items())),
        file=out,
    )
    if logs:
        print(
            "runtime log records (not violations): "
            + ", ".join(f"{k} {v:,}" for k, v in logs.most_common(6)),
            file=out,
        )
    print(file=out)
    if violations.total:
        print("VIOLATIONS", file=out)
        for kind, count in sorted(violations.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {count:>7,}  {kind}", file=out)
            for example in violations.examples.get(kind, []):
                print(f"             e.g. {example}", file=out)
    print(file=out)
    if hung is not None:
        print(f"HUNG in {hung}", file=out)
    print(
        f"violations: {violations.total:,}   jobs/s: {rate:,.0f}   total wall: {elapsed:.1f} s",
        file=out,
        flush=True,
    )


def soak(args: argparse.Namespace) -> tuple[Stats, Violations, float]:
    """Run both phases; return what they found and the wall time."""
    violations = Violations()
    stats = Stats()
    handler = _CountingHandler()
    runtime_log = logging.getLogger("nucleo_trio")
    saved = (runtime_log.level, runtime_log.propagate)
    runtime_log.addHandler(handler)
    runtime_log.setLevel(logging.WARNING)
    runtime_log.propagate = False
    original_settle = JobHandle._settle
    JobHandle._settle = settle_counter(original_settle)  # type: ignore[method-assign]
    began = time.perf_counter()

    def report(hung: str | None = None) -> None:
        if hung is not None:
            violations.add(
                "the run hung (the watchdog aborted it)",
                f"{hung}: no progress for {args.hang_after:g} s of real time",
            )
        _print_report(args, stats, violations, handler.counts, time.perf_counter() - began, hung)

    try:
        with tempfile.TemporaryDirectory(prefix="nucleo-soak-") as tmp:
            db_path = Path(tmp) / "soak.db"
            create_database(db_path)
            with _Watchdog(args.hang_after, report) as watchdog:
                # jobs under an orchestrator that never ran are never submitted, so batches
                # go on until the submitted jobs reach --jobs
                number = 0
                while stats.jobs < args.jobs:
                    size = min(args.batch, max(args.jobs - stats.jobs, 50))
                    watchdog.beat(f"phase one, batch {number}")
                    before = stats.jobs
                    run_batch(number, args.seed, size, db_path, args.stall_after, violations, stats)
                    number += 1
                    if stats.jobs == before:
                        break  # a batch that submitted nothing: its violations say why
                    progress(
                        f"  batch {number}: {stats.jobs:,} jobs, "
                        f"{stats.wall:.1f} s, violations so far {violations.total:,}"
                    )
                host_began = time.perf_counter()
                for scenario in draw_host_scenarios(args.seed, args.host, HOST_JOBS):
                    watchdog.beat(f"phase two, scenario {scenario.index} ({scenario.kind})")
                    result = run_host_scenario(scenario, args.seed, db_path, violations)
                    stats.host_jobs += result["jobs"]
                    stats.host_escapes[f"{scenario.kind} -> {result['escaped']}"] += 1
                stats.host_wall = time.perf_counter() - host_began
                progress(
                    f"  phase two: {args.host} scenarios, violations so far {violations.total:,}"
                )
    finally:
        JobHandle._settle = original_settle  # type: ignore[method-assign]
        runtime_log.removeHandler(handler)
        runtime_log.setLevel(saved[0])
        runtime_log.propagate = saved[1]
    elapsed = time.perf_counter() - began
    report()
    return stats, violations, elapsed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="A fault soak of the nucleo_trio dispatcher; prints violations (must be 0).",
    )
    parser.add_argument("--jobs", type=int, default=100_000, help="phase-one jobs (100,000)")
    parser.add_argument("--seed", type=int, default=1, help="the seed every choice is drawn from")
    parser.add_argument("--batch", type=int, default=2_000, help="jobs per batch (2,000)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the CI run: {QUICK_JOBS:,} jobs and {QUICK_HOST} host scenarios",
    )
    parser.add_argument(
        "--host",
        type=int,
        default=None,
        help=f"phase-two scenarios ({FULL_HOST}; quick {QUICK_HOST})",
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        default=20.0,
        help="real seconds without a handle settling before a batch's unsettled handles are "
        "reported and the batch moves on (20)",
    )
    parser.add_argument(
        "--hang-after",
        type=float,
        default=300.0,
        help="real seconds one batch or scenario may take before the run is aborted (300)",
    )
    return parser


def _resolve(args: argparse.Namespace, argv: Sequence[str] | None) -> argparse.Namespace:
    given = set(argv if argv is not None else sys.argv[1:])
    if args.quick and "--jobs" not in given and not any(a.startswith("--jobs=") for a in given):
        args.jobs = QUICK_JOBS
    if args.host is None:
        args.host = QUICK_HOST if args.quick else FULL_HOST
    args.report_to_stderr = False
    if args.jobs < 1 or args.batch < 1 or args.host < 0:
        raise SystemExit("soak: --jobs and --batch must be positive, --host not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _resolve(_parser().parse_args(argv), argv)
    progress(f"nucleo_trio soak: seed {args.seed}, {args.jobs:,} jobs, {args.host} host scenarios")
    _, violations, _ = soak(args)
    return 1 if violations.total else 0


def run(quick: bool) -> list[Row]:
    """The soak as rows of ``python -m benchmarks.run`` (a smaller run than the CI one when
    quick; its report goes to stderr with the progress): jobs/s and the violation count."""
    argv = ["--jobs", "2000", "--host", "9"] if quick else ["--jobs", "20000"]
    args = _resolve(_parser().parse_args(argv), argv)
    args.report_to_stderr = True
    stats, violations, _ = soak(args)
    rate = stats.jobs / stats.wall if stats.wall else 0.0
    return [
        Row(NAME, f"phase one, {stats.jobs:,} jobs (wall clock)", rate, "jobs/s"),
        Row(
            NAME,
            "violations (both phases)",
            violations.total,
            "count",
            "0",
            verdict(violations.total == 0),
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
