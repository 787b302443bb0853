"""The soak's checks: what must hold after every batch, and the violations when it does not.

Two sets. :func:`live_checks` runs while the batch's dispatcher is still open, once every handle
settled (or the batch's bound ran out): nothing left running, queued, parked or holding a task,
every account back to zero, every connection closed. :func:`post_checks` runs after the
dispatcher stopped and its bus delivered everything: each handle settled exactly once and not
before its terminal event was published, exactly one terminal event per job and of the kind the
handle's state says, no exception group anywhere in a failure's chain, and a database row for
exactly the transactional jobs that completed.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import trio

from nucleo_trio.errors import (
    DependencyFailedError,
    JobCancelledError,
    JobTimeoutError,
    suppressed,
)
from nucleo_trio.jobs import JobState

from ._soak_env import Batch, JobRecord, stage_of

__all__ = [
    "EXPECTED_EVENT",
    "Violations",
    "describe_exc",
    "fate_unknown",
    "group_in_chain",
    "is_quiet",
    "live_checks",
    "post_checks",
    "read_rows",
    "system_task_names",
]

EXAMPLES_KEPT = 4

EXPECTED_EVENT: dict[JobState, tuple[str, ...]] = {
    JobState.COMPLETED: ("JobCompletedEvent",),
    JobState.FAILED: ("JobFailedEvent", "DependencyFailureEvent"),
    JobState.TIMED_OUT: ("JobTimedOut",),
    JobState.CANCELLED: ("JobCancelled",),
}


class Violations:
    """Counts by kind, and the first few examples of each."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(example)

    def merge(self, other: Violations, prefix: str, tag: str) -> None:
        """Add ``other``'s counts under ``prefix``, its examples tagged with ``tag``."""
        for kind, count in other.counts.items():
            name = f"{prefix}{kind}"
            self.counts[name] += count
            kept = self.examples.setdefault(name, [])
            for example in other.examples.get(kind, []):
                if len(kept) < EXAMPLES_KEPT:
                    kept.append(f"{tag}: {example}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def describe_exc(exc: BaseException | None, limit: int = 220) -> str:
    if exc is None:
        return "-"
    text = str(exc).replace("\n", " ")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(exc, BaseExceptionGroup):
        inner = ", ".join(type(e).__name__ for e in exc.exceptions)
        return f"{type(exc).__name__}([{inner}]): {text}"
    return f"{type(exc).__name__}: {text}"


def _example(record: JobRecord, extra: str = "") -> str:
    handle = record.handle
    state = handle.state.value if handle is not None else "?"
    error = handle.error if handle is not None else None
    stage = record.cancel_stage or record.host_stage
    where = f" | cancelled while {stage}" if stage else ""
    tail = f" | {extra}" if extra else ""
    return f"{record.describe()}{where} | {state} | {describe_exc(error)}{tail}"


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """Every exception reachable from ``error`` through ``__cause__``, ``__context__``, the
    suppressed riders and a group's members, each once."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        link = stack.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        stack.extend((link.__cause__, link.__context__, *suppressed(link)))
        if isinstance(link, BaseExceptionGroup):
            stack.extend(link.exceptions)


def group_in_chain(error: BaseException | None) -> BaseExceptionGroup[Any] | None:
    """The first exception group reachable from ``error`` (see :func:`_chain`), or ``None``."""
    return next((link for link in _chain(error) if isinstance(link, BaseExceptionGroup)), None)


def fate_unknown(error: BaseException | None, database: str) -> bool:
    """Whether a failure in ``error``'s chain says the commit on ``database`` has an unknown
    fate (a ``CommitError`` whose ``unknown`` names it)."""
    return _chain_names(error, "unknown", database)


def reported_committed(error: BaseException | None, database: str) -> bool:
    """Whether ``error``'s chain says the job's own commit on ``database`` succeeded before the
    job was stopped (a ``CancelledAfterCommit`` whose ``committed`` names it); a dependency's
    failure riding in the chain speaks for the dependency, not for this job."""
    if isinstance(error, DependencyFailedError):
        return False
    return _chain_names(error, "committed", database)


def _chain_names(error: BaseException | None, field: str, database: str) -> bool:
    for link in _chain(error):
        named = getattr(link, field, None)
        if isinstance(named, tuple) and database in named:
            return True
    return False


# -- trio's task tree --------------------------------------------------------------------------


def _tasks_under(nursery: trio.Nursery | None) -> list[trio.lowlevel.Task]:
    if nursery is None:
        return []
    out: list[trio.lowlevel.Task] = []
    stack = list(nursery.child_tasks)
    while stack:
        task = stack.pop()
        out.append(task)
        for child in task.child_nurseries:
            stack.extend(child.child_tasks)
    return out


def _short_task_name(task: trio.lowlevel.Task) -> str:
    name = task.name
    for prefix in ("nucleo_trio.", "benchmarks."):
        name = name.replace(prefix, "")
    return name


def system_task_names(batch: Batch) -> Counter[str]:
    """The tasks under the dispatcher's system nursery (bus consumers, admission, timers,
    background closes), by name. The dispatcher keeps its nurseries private; without them
    (a refactor) this answers nothing and the task checks pass vacuously."""
    return Counter(
        _short_task_name(t) for t in _tasks_under(getattr(batch.dispatcher, "_system", None))
    )


def job_tasks(batch: Batch) -> list[trio.lowlevel.Task]:
    """The tasks under the dispatcher's job nursery: one per job that has a task."""
    return _tasks_under(getattr(batch.dispatcher, "_jobs", None))


# -- live ---------------------------------------------------------------------------------------


def _release_accounts(batch: Batch) -> list[Any]:
    dispatcher = batch.dispatcher
    assert dispatcher is not None
    return [
        batch.gate_a,
        batch.gate_b,
        batch.ledger,
        dispatcher.http_gate,
        batch.provider.admission(),
    ]


def is_quiet(batch: Batch, baseline: Counter[str]) -> bool:
    """Nothing running, queued or parked; every RELEASE account at zero; no connection open;
    no task in the job nursery and none added to the system nursery."""
    dispatcher = batch.dispatcher
    assert dispatcher is not None
    return (
        not (system_task_names(batch) - baseline)
        and dispatcher.running_jobs == 0
        and dispatcher.queued_jobs == (0, 0)
        and dispatcher.admission.queue_size == 0
        and all(account.in_use == 0 for account in _release_accounts(batch))
        and batch.provider.open_connections == 0
        and batch.connections_open == 0
        and not job_tasks(batch)
    )


def live_checks(batch: Batch, baseline: Counter[str], violations: Violations) -> None:
    """Run inside the batch's trio run, with its dispatcher still open and every handle settled
    (or the batch's bound spent)."""
    dispatcher = batch.dispatcher
    assert dispatcher is not None
    tag = f"batch {batch.number}"
    for record in batch.records:
        if record.handle is not None and not record.handle.done:
            violations.add(
                "handle never settled (no handle settled for --stall-after real seconds)",
                _example(record, f"stage now: {stage_of(record)}"),
            )
    for record, what in batch.live_refusals:
        violations.add(what.split(" (")[0], _example(record, what))
    left: list[str] = []
    if dispatcher.running_jobs:
        left.append(f"running_jobs={dispatcher.running_jobs}")
    if dispatcher.queued_jobs != (0, 0):
        left.append(f"queued_jobs={dispatcher.queued_jobs}")
    if dispatcher.admission.queue_size:
        left.append(f"admission.queue_size={dispatcher.admission.queue_size}")
    for name in ("_live", "_running"):
        held = getattr(dispatcher, name, None)
        if held:
            left.append(f"{name}={len(held)}")
    graph = getattr(dispatcher, "_graph", None)
    if graph is None:
        violations.add(
            "the soak cannot see the dispatcher's dependency graph (harness: update _soak_checks)",
            f"{tag}: JobDispatcher has no _graph",
        )
    else:
        left.extend(f"dependency {table}={n}" for table, n in graph.held().items() if n)
    if left:
        violations.add("job bookkeeping left after the batch", f"{tag}: " + ", ".join(left))
    if getattr(dispatcher, "_jobs", None) is None or getattr(dispatcher, "_system", None) is None:
        violations.add(
            "the soak cannot see the dispatcher's nurseries (harness: update _soak_checks)",
            f"{tag}: JobDispatcher has no _jobs/_system nursery attributes",
        )
    tasks = job_tasks(batch)
    if tasks:
        names = Counter(_short_task_name(t) for t in tasks)
        violations.add(
            "job tasks left in the dispatcher's job nursery",
            f"{tag}: {len(tasks)} task(s): " + ", ".join(f"{n} x{c}" for n, c in names.items()),
        )
    extra = system_task_names(batch) - baseline
    if extra:
        violations.add(
            "system tasks left after the batch",
            f"{tag}: " + ", ".join(f"{n} x{c}" for n, c in extra.items()),
        )
    for account in _release_accounts(batch):
        if account.in_use != 0:
            violations.add(
                "account not back to zero",
                f"{tag}: {account.limiter_name} in_use={account.in_use} of {account.capacity}",
            )
    if batch.ledger.overgiven:
        violations.add(
            "custom limiter given back more than it lent",
            f"{tag}: ledger over-given by {batch.ledger.overgiven} permit(s) "
            f"({batch.ledger.takes} takes, {batch.ledger.gives} gives)",
        )
    if batch.bucket.in_use != 0:
        violations.add(
            "token bucket not back to full after its window",
            f"{tag}: {batch.bucket.limiter_name} in_use={batch.bucket.in_use} "
            f"of {batch.bucket.capacity} eleven virtual minutes after the last job",
        )
    if batch.provider.open_connections or batch.connections_open:
        violations.add(
            "database connections left open",
            f"{tag}: provider counts {batch.provider.open_connections}, "
            f"really open {batch.connections_open}",
        )


# -- after the dispatcher stopped ---------------------------------------------------------------


def read_rows(db_path: Path, batch: int) -> dict[str, int]:
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT job_id, run FROM soak_rows WHERE batch = ?", (batch,))
        found = {job_id: run for job_id, run in rows}
    conn.close()
    return found


def post_checks(
    batch: Batch,
    rows: dict[str, int],
    violations: Violations,
    records: Iterable[JobRecord] | None = None,
) -> None:
    """Run after the batch's dispatcher stopped (its bus drained)."""
    known: set[str] = set()
    tag = f"batch {batch.number}"
    for record in batch.records if records is None else records:
        handle = record.handle
        if handle is None or record.job is None:
            continue
        job_id = record.job_id
        known.add(job_id)
        settles = handle.__dict__.get("_soak_settles", 0)
        if settles > 1:
            violations.add("handle settled more than once", _example(record, f"{settles} settles"))
        if record.settled_early:
            violations.add(
                "handle settled before its terminal event was published (EXEC-09)",
                _example(record),
            )
        if not handle.done:
            continue  # reported by the live check (or the host check)
        state = handle.state
        error = handle.error
        if (state is JobState.COMPLETED) != (error is None):
            violations.add("handle state and outcome disagree", _example(record))
        if state is JobState.CANCELLED and not isinstance(error, JobCancelledError):
            violations.add("a CANCELLED handle without JobCancelledError", _example(record))
        if state is JobState.TIMED_OUT and isinstance(error, JobCancelledError):
            violations.add("a TIMED_OUT handle raising JobCancelledError", _example(record))
        if state is JobState.CANCELLED and isinstance(error, JobTimeoutError):
            violations.add("a CANCELLED handle raising JobTimeoutError", _example(record))
        group = group_in_chain(error)
        if group is not None:
            violations.add(
                "ExceptionGroup in a handle's error chain",
                _example(record, f"group: {describe_exc(group, 160)}"),
            )
        seen = batch.recorder.seen.get(job_id, [])
        published = batch.bus.published.get(job_id, 0)
        if not seen:
            what = "published, never delivered" if published else "never published"
            violations.add(f"no terminal event ({what})", _example(record))
        elif len(seen) > 1:
            violations.add(
                "more than one terminal event", _example(record, "events: " + ", ".join(seen))
            )
        elif seen[0] not in EXPECTED_EVENT.get(state, ()):
            violations.add(
                f"terminal event disagrees with the handle ({seen[0]} for {state.value})",
                _example(record),
            )
        if record.plan.db:
            has_row = job_id in rows
            if state is not JobState.COMPLETED and fate_unknown(error, batch.provider.name):
                # The runtime says it cannot know (a commit cut short, or unanswered within
                # its window): a row either way is consistent with what it reported.
                batch.unknown_fates["row committed" if has_row else "no row"] += 1
                if len(batch.unknown_examples) < 3:
                    batch.unknown_examples.append(_example(record))
            elif state is not JobState.COMPLETED and reported_committed(error, batch.provider.name):
                # Stopped once its commit had answered: the job says its row is durable.
                if not has_row:
                    violations.add(
                        f"reported committed but no row ({state.value})", _example(record)
                    )
            elif has_row and state is not JobState.COMPLETED:
                violations.add(
                    f"row committed for a job reported {state.value}",
                    _example(record, f"committed on run {rows[job_id]}"),
                )
            elif not has_row and state is JobState.COMPLETED:
                violations.add("no row for a COMPLETED transactional job", _example(record))
            if record.plan.db == "tx_fail" and state is JobState.COMPLETED:
                violations.add("a commit that must fail reported COMPLETED", _example(record))
        elif job_id in rows:
            violations.add("row for a job that never writes", _example(record))
    for job_id in rows:
        if job_id not in known:
            violations.add("row for a job the soak never saw", f"{tag}: {job_id}")
    if batch.connections_peak > batch.provider_bound:
        violations.add(
            "more connections open at once than max_connections (DB-12)",
            f"{tag}: {batch.connections_peak} open at once, max_connections="
            f"{batch.provider_bound}, db permits held then: {batch.peak_permits}; "
            f"opened by: {batch.owners_at_peak()}",
        )
    for failure in batch.hook_failures:
        violations.add("the soak's commit hook failed (harness)", failure)
