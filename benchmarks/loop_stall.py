"""(f) Loop stall: the longest the trio loop is held while the SQLite stores commit slowly.

The trajectory recorder and the SQLite heartbeat store used to commit on the trio thread, so a
slow disk held the whole loop for every commit (issue 11, item 13). They now hand every statement
to one writer per file that runs in a worker thread. This benchmark puts a number on the
difference: a dispatcher with a SQLite heartbeat store and a recorder runs, on the real clock,

* a job every 20 ms (each job's three lifecycle events go to the recorder), and
* a heartbeat every 0.5 s (each fire is a poll and a re-enqueue on the store),

while every ``COMMIT`` either store sends takes :data:`COMMIT_DELAY` seconds (a connection class
whose ``execute("COMMIT")`` sleeps first, in whatever thread runs it). A trio instrument times
every task step; the longest one is the longest stall of the scheduler, since nothing else runs
while a task holds the loop. It is reported overall and for the tasks that write (the Heart's,
the recorder's bus consumer). A ticker task that sleeps 2 ms at a time gives the same figure
from the outside: its longest lateness.

**Before** is the code as it was before the writers (the recorder and the store of commit
:data:`BEFORE`, loaded from git with ``git show`` and run against today's package); **after** is
the working tree. Both runs then check that every job has its row in the recording (nothing was
lost on the clean stop). Run it alone with ``python -m benchmarks.loop_stall``, or as part of
``python -m benchmarks.run --only loop_stall``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from nucleo_trio.bus import MessageBus
from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.guardrails import ScopeGuard
from nucleo_trio.heartbeat import FixedInterval, ScheduleHeartbeat, heartbeat_now
from nucleo_trio.jobs import JobContext, Tool, workflow

from ._harness import Row, progress, verdict

NAME = "loop_stall"
TITLE = "loop stall: the longest scheduler step while the SQLite stores commit in 200 ms"

BEFORE = "60a772ea2c197d243c406d4ce8d51a38fd1c6b23"
"""The last commit whose recorder and heartbeat store committed on the trio thread."""

COMMIT_DELAY = 0.2
JOB_INTERVAL = 0.02
HEARTBEAT_PERIOD = 0.5
TICK = 0.002
TARGET_MS = 50.0

ROOT = Path(__file__).resolve().parent.parent
_connect = sqlite3.connect


class Nop(Tool[None]):
    async def execute(self, context: JobContext) -> None:
        return None


class Pulse(Tool[None]):
    """What the heartbeat fires: nothing, so every stall is the store's or the recorder's."""

    async def execute(self, context: JobContext) -> None:
        return None


class _SlowCommit(sqlite3.Connection):
    def execute(self, sql: str, *parameters: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            time.sleep(COMMIT_DELAY)
        return super().execute(sql, *parameters)


@contextlib.contextmanager
def _slow_commits() -> Iterator[None]:
    """Connections opened inside the block send every COMMIT :data:`COMMIT_DELAY` s late."""

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return _connect(*args, factory=_SlowCommit, **kwargs)

    sqlite3.connect = connect  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite3.connect = _connect


class StallMeter(trio.abc.Instrument):
    """The longest task step, overall and per kind of task."""

    def __init__(self) -> None:
        self.longest: dict[str, float] = {"all": 0.0, "heart": 0.0, "recorder": 0.0}
        self._began = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self._began:  # the step that added the instrument: its start was not seen
            return
        took = time.perf_counter() - self._began
        self._began = 0.0
        kinds = ["all"]
        if "heartbeat" in task.name:
            kinds.append("heart")
        elif "TrajectoryRecorder" in task.name:
            kinds.append("recorder")
        for kind in kinds:
            self.longest[kind] = max(self.longest[kind], took)


@attrs.frozen
class Stalls:
    step: float
    heart: float
    recorder: float
    ticker: float
    jobs: int
    rows: int
    fires: int


def _before(relative: str, package: str) -> types.ModuleType:
    """The module at ``relative`` as it was at :data:`BEFORE`, imported into ``package``."""
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:{relative}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = f"{package}._before_{Path(relative).stem}"
    module = types.ModuleType(name)
    module.__package__ = package
    sys.modules[name] = module
    if relative.endswith("heartbeat/sqlite.py"):
        # The store of then wrote the eight unsigned columns rows had before they were signed.
        source = source.replace(
            "_COLUMNS = HeartbeatRow._fields", "_COLUMNS = HeartbeatRow._fields[:8]"
        )
        source = source.replace(
            "row = heartbeat_to_row(require_genuine(heartbeat))",
            "row = heartbeat_to_row(require_genuine(heartbeat))[:8]",
        )
    exec(compile(source, f"{BEFORE[:7]}:{relative}", "exec"), module.__dict__)
    return module


def _classes(before: bool) -> tuple[Any, Any]:
    if before:
        recorder = _before("nucleo_trio/observability/recorder.py", "nucleo_trio.observability")
        store = _before("nucleo_trio/heartbeat/sqlite.py", "nucleo_trio.heartbeat")
        return recorder.TrajectoryRecorder, store.SQLiteHeartbeatStore
    from nucleo_trio.heartbeat import SQLiteHeartbeatStore
    from nucleo_trio.observability import TrajectoryRecorder

    return TrajectoryRecorder, SQLiteHeartbeatStore


async def _scenario(before: bool, seconds: float, folder: Path) -> Stalls:
    recorder_class, store_class = _classes(before)
    with _slow_commits():
        recorder = recorder_class(folder / "runs.db")
        store = store_class(folder / "beats.db")
    bus = MessageBus()
    recorder.attach(bus)
    meter = StallMeter()
    late = 0.0
    jobs = 0
    fires: list[object] = []
    from nucleo_trio.heartbeat import HeartbeatFired

    bus.subscribe(fires.append, event_type=HeartbeatFired)

    async def ticker() -> None:
        nonlocal late
        while True:
            began = time.perf_counter()
            await trio.sleep(TICK)
            late = max(late, time.perf_counter() - began - TICK)

    trio.lowlevel.add_instrument(meter)
    try:
        config = DispatcherConfig(
            heartbeat=HeartbeatConfig(signing_key="a benchmark key, never a real one")
        )
        async with open_dispatcher(config, bus=bus, heartbeat_store=store) as dispatcher:
            dispatcher.schedule_heartbeat(
                ScheduleHeartbeat(
                    Pulse,
                    "pulse",
                    heartbeat_now() + HEARTBEAT_PERIOD,
                    recurrence=FixedInterval(HEARTBEAT_PERIOD),
                ),
                "bench",
                scope_guard=ScopeGuard(),
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                handles = []
                with trio.move_on_after(seconds):
                    while True:
                        handles.append(dispatcher.submit(Nop(workflow("bench", f"job-{jobs}"))))
                        jobs += 1
                        await trio.sleep(JOB_INTERVAL)
                for handle in handles:
                    await handle.result()
                nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(meter)
    if before:
        recorder.close()
    else:
        await recorder.aclose()
    with contextlib.closing(_connect(folder / "runs.db")) as db:
        (rows,) = db.execute("SELECT count(*) FROM jobs WHERE job_class LIKE '%Nop'").fetchone()
    return Stalls(
        step=meter.longest["all"],
        heart=meter.longest["heart"],
        recorder=meter.longest["recorder"],
        ticker=late,
        jobs=jobs,
        rows=rows,
        fires=len(fires),
    )


def measure(before: bool, seconds: float) -> Stalls:
    with tempfile.TemporaryDirectory() as scratch:
        return trio.run(_scenario, before, seconds, Path(scratch))


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def run(quick: bool) -> list[Row]:
    seconds = 3.0 if quick else 6.0
    measured: dict[str, Stalls] = {}
    for label, before in (("before", True), ("after", False)):
        try:
            stalls = measure(before, seconds)
        except subprocess.CalledProcessError as exc:
            progress(f"  loop_stall: no 'before' ({BEFORE[:7]} not readable from git: {exc})")
            continue
        measured[label] = stalls
        progress(
            f"  loop_stall {label}: longest step {_ms(stalls.step)} ms (Heart "
            f"{_ms(stalls.heart)} ms, recorder {_ms(stalls.recorder)} ms), ticker late "
            f"{_ms(stalls.ticker)} ms; {stalls.rows}/{stalls.jobs} jobs recorded, "
            f"{stalls.fires} fires"
        )
    rows: list[Row] = []
    for label, stalls in measured.items():
        held = label == "after"
        rows += [
            Row(
                NAME,
                f"longest task step, {label}",
                _ms(stalls.step),
                "ms",
                f"< {TARGET_MS:g} ms" if held else "",
                verdict(_ms(stalls.step) < TARGET_MS) if held else "",
            ),
            Row(NAME, f"longest step of the Heart, {label}", _ms(stalls.heart), "ms"),
            Row(NAME, f"longest step of the recorder, {label}", _ms(stalls.recorder), "ms"),
            Row(NAME, f"longest ticker lateness, {label}", _ms(stalls.ticker), "ms"),
            Row(
                NAME,
                f"jobs recorded after the clean stop, {label}",
                stalls.rows,
                f"of {stalls.jobs}",
                "all" if held else "",
                verdict(stalls.rows == stalls.jobs) if held else "",
            ),
        ]
    return rows


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    progress(f"{NAME}: {TITLE} ({'quick' if quick else 'full'})")
    rows = run(quick)
    width = max(len(row.metric) for row in rows)
    for row in rows:
        mark = f"  [{row.target}: {row.verdict}]" if row.target else ""
        print(f"{row.metric:<{width}}  {row.formatted_value():>8} {row.unit}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
