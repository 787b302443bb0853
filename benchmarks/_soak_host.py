"""The soak's second phase: the program around the dispatcher cancels it, fails it, interrupts it.

Each scenario runs a fresh dispatcher with a small batch of the same jobs in its own
``trio.run`` (virtual time) and cuts it off from outside at a drawn instant, while jobs run,
wait in lanes and park in admission:

* ``move_on_after``: ``with trio.move_on_after(t): async with open_dispatcher() ...``; nothing
  may escape the block (the scope catches its own cancellation);
* ``move_on_after_draining``: the same, but the body leaves the block halfway to the cut, so
  the cut lands while shutdown waits for the running jobs;
* ``fail_after``: the same under ``trio.fail_after``; only ``trio.TooSlowError`` may escape;
* ``cancel_nursery``: a sibling task cancels the parent nursery the block runs in;
* ``body_raises``: the block's body raises its own ``ValueError``, which must come out bare;
* ``job_interrupt`` / ``job_system_exit`` / ``observer_interrupt``: a job raises
  ``KeyboardInterrupt`` (``SystemExit``), or an observer raises ``KeyboardInterrupt``, which
  must stop the dispatcher and come out bare.

The first two scenarios cut the dispatcher while it starts and while it idles; the next ones
are one of each kind, the rest drawn. After each, every handle must have settled with one
terminal event, every account must be back to zero, no connection open, no exception group in
any handle's error, and rows only for completed jobs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.config import MemoryConfig
from nucleo_trio.jobs import Identifiable, JobContext, Tool, workflow

from ._soak_checks import Violations, describe_exc, post_checks, read_rows
from ._soak_env import ACTIVE, Batch, JobRecord, stage_of
from ._soak_plan import HostScenario, JobPlan, draw_batch

__all__ = ["HOST_BATCH_BASE", "run_host_scenario"]

HOST_BATCH_BASE = 1_000_000
"""Host scenarios number their batches from here, so their rows never mix with phase one's."""


class BodyError(ValueError):
    """What the ``body_raises`` scenario raises from the block's body."""


class _Interrupter(Tool[None]):
    """Raises ``KeyboardInterrupt`` (or ``SystemExit``) after ``after`` virtual seconds."""

    def __init__(self, parent: Identifiable, after: float, exit: bool) -> None:
        super().__init__(parent, prefix="interrupter")
        self.after = after
        self.exit = exit
        self.timeout = after + 60.0

    async def execute(self, context: JobContext) -> None:
        await trio.sleep(self.after)
        if self.exit:
            raise SystemExit(3)
        raise KeyboardInterrupt


class _InterruptingObserver:
    """Raises KeyboardInterrupt on the first JobStartedEvent delivered at or after ``at``."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.fired = False

    def __call__(self, event: ev.JobEvent) -> None:
        if not self.fired and trio.current_time() >= self.at:
            self.fired = True
            raise KeyboardInterrupt


def _expected_escape(scenario: HostScenario) -> tuple[type[BaseException], ...]:
    if scenario.kind == "fail_after":
        return (trio.TooSlowError,)
    if scenario.kind == "body_raises":
        return (BodyError,)
    if scenario.kind in ("job_interrupt", "observer_interrupt"):
        return (KeyboardInterrupt,)
    if scenario.kind == "job_system_exit":
        return (SystemExit,)
    return ()


async def _host_main(
    scenario: HostScenario, batch: Batch, roots: list[JobPlan], seed: int, out: dict[str, Any]
) -> None:
    config = DispatcherConfig(
        http_connections=12,
        seed=seed * 7919 + batch.number,
        memory=MemoryConfig(enabled=False),
        shutdown_timeout=5.0,
    )
    records_at_cut: list[tuple[JobRecord, str]] = []
    interrupter: list[Any] = []

    async def body(helpers: trio.Nursery) -> None:
        async with open_dispatcher(config, bus=batch.bus) as dispatcher:
            batch.attach(dispatcher, helpers)
            if scenario.kind == "observer_interrupt":
                dispatcher.bus.subscribe(
                    _InterruptingObserver(scenario.cut_at), event_type=ev.JobStartedEvent
                )
            start = trio.current_time()
            if scenario.kind in ("job_interrupt", "job_system_exit"):
                job = _Interrupter(
                    workflow("host", "interrupt"),
                    scenario.cut_at,
                    exit=scenario.kind == "job_system_exit",
                )
                interrupter.append(dispatcher.submit(job))
            submitted: list[Any] = []
            for root in roots:
                await trio.sleep_until(start + root.submit_at)
                identity = workflow(f"user{root.index % 7}", f"soak-h{scenario.index}")
                job = batch.make(root, identity)
                deps = [submitted[root.root_dep]] if root.root_dep is not None else []
                handle = dispatcher.submit(job, dependencies=deps)
                batch.submitted(job.record, handle)
                submitted.append(handle)
            if scenario.kind == "body_raises":
                await trio.sleep_until(start + scenario.cut_at)
                _note_stages(batch, records_at_cut)
                raise BodyError("the program's own failure, raised in the block's body")
            if scenario.kind in ("job_interrupt", "job_system_exit", "observer_interrupt"):
                await trio.sleep(scenario.cut_at + 120.0)  # the interrupt should end this
                return
            if scenario.kind == "move_on_after_draining":
                # leave the block halfway to the cut: the cut lands while shutdown drains
                await trio.sleep_until(start + scenario.cut_at / 2)
                _note_stages(batch, records_at_cut)
                return
            try:
                await trio.sleep_forever()
            finally:
                _note_stages(batch, records_at_cut)

    escaped: BaseException | None = None
    async with trio.open_nursery() as helpers:
        try:
            if scenario.kind in ("move_on_after", "move_on_after_draining"):
                with trio.move_on_after(scenario.cut_at):
                    await body(helpers)
            elif scenario.kind == "fail_after":
                with trio.fail_after(scenario.cut_at):
                    await body(helpers)
            elif scenario.kind == "cancel_nursery":
                async with trio.open_nursery() as parent:

                    async def cutter() -> None:
                        await trio.sleep(scenario.cut_at)
                        parent.cancel_scope.cancel()

                    parent.start_soon(cutter)
                    await body(helpers)
            else:
                await body(helpers)
        except BaseException as exc:  # noqa: BLE001 - what escaped is the measurement
            escaped = exc
        helpers.cancel_scope.cancel()
    out["escaped"] = escaped
    out["stages"] = records_at_cut
    out["interrupter"] = interrupter


def _kind_of(exc: BaseException | None) -> str:
    """``nothing``, ``TooSlowError``, ``ExceptionGroup[RuntimeError]``..."""
    if exc is None:
        return "nothing"
    if isinstance(exc, BaseExceptionGroup):
        return f"{type(exc).__name__}[{', '.join(_kind_of(e) for e in exc.exceptions)}]"
    return type(exc).__name__


def _note_stages(batch: Batch, into: list[tuple[JobRecord, str]]) -> None:
    for record in batch.records:
        stage = stage_of(record)
        record.host_stage = stage
        into.append((record, stage))


def run_host_scenario(
    scenario: HostScenario, seed: int, db_path: Path, violations: Violations
) -> dict[str, Any]:
    """Run one scenario in its own ``trio.run`` and check what it left."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    number = HOST_BATCH_BASE + scenario.index
    batch = Batch(number, db_path, clock)
    roots = draw_batch(seed, number, scenario.jobs) if scenario.jobs else []
    out: dict[str, Any] = {}
    tag = f"host #{scenario.index} {scenario.kind} cut at {scenario.cut_at:.2f}s"
    ACTIVE[0] = batch
    try:
        trio.run(_host_main, scenario, batch, roots, seed, out, clock=clock)
    except BaseException as exc:  # noqa: BLE001 - an escape past the scenario is a finding
        if isinstance(exc, KeyboardInterrupt) and scenario.kind not in (
            "job_interrupt",
            "observer_interrupt",
        ):
            raise  # a real Ctrl-C
        violations.add(
            "host: exception escaped the scenario's own handler", f"{tag}: {describe_exc(exc)}"
        )
        out.setdefault("escaped", None)
    finally:
        ACTIVE[0] = None
    escaped = out.get("escaped")
    expected = _expected_escape(scenario)
    if escaped is None:
        if expected:
            names = "/".join(e.__name__ for e in expected)
            violations.add(
                f"host[{scenario.kind}]: {names} did not come out of open_dispatcher",
                f"{tag}: the block ended normally",
            )
    elif not (expected and type(escaped) in expected):
        what = "an exception group" if isinstance(escaped, BaseExceptionGroup) else "an exception"
        violations.add(
            f"host[{scenario.kind}]: {what} escaped instead of "
            + ("/".join(e.__name__ for e in expected) or "nothing"),
            f"{tag}: {describe_exc(escaped)}",
        )
    unsettled: Counter[str] = Counter()
    for record in batch.records:
        handle = record.handle
        if handle is not None and not handle.done:
            stage = record.host_stage or stage_of(record)
            unsettled[stage] += 1
            violations.add(
                f"host[{scenario.kind}]: handle never settled",
                f"{tag}: {record.describe()} | was {stage} | state {handle.state.value}",
            )
    for handle in out.get("interrupter", ()):
        if not handle.done:
            violations.add(
                f"host[{scenario.kind}]: handle never settled",
                f"{tag}: the interrupting job | state {handle.state.value}",
            )
    for account in (batch.gate_a, batch.gate_b, batch.ledger, batch.provider.admission()):
        if account.in_use:
            violations.add(
                f"host[{scenario.kind}]: account not back to zero",
                f"{tag}: {account.limiter_name} in_use={account.in_use}",
            )
    if batch.provider.open_connections or batch.connections_open:
        violations.add(
            f"host[{scenario.kind}]: a connection still open or closing in a worker thread "
            "after the block was left",
            f"{tag}: provider counts {batch.provider.open_connections}, "
            f"really open {batch.connections_open}",
        )
    sub = Violations()
    post_checks(batch, read_rows(db_path, number), sub)
    violations.merge(sub, f"host[{scenario.kind}]: ", tag)
    return {
        "jobs": len(batch.records),
        "unsettled": sum(unsettled.values()),
        "escaped": _kind_of(escaped),
    }
