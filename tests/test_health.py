"""The health snapshot and the SystemHealthReporter (SHR), and ``dispatcher.health()``."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate, LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.jobs import JobRequirements, JobSnapshot, JobState, JobType, workflow
from nucleo_trio.observability import (
    SNAPSHOT_TITLE,
    CpuLoad,
    HealthSnapshot,
    LimiterRow,
    QueueSizes,
    SystemHealthReporter,
    _layout as layout,
    capture_health,
    is_health_event,
)

from .admission_doubles import MemoryDouble
from .jobs_for_tests import Echo

LOGGER = "nucleo_trio.observability.health"
RED = "\x1b[38;2;255;80;80m"
YELLOW = "\x1b[38;2;230;170;50m"
GREEN = "\x1b[38;2;80;200;100m"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FULL, EMPTY = "\u2588", "\u2591"


# -- doubles ----------------------------------------------------------------------------------------
@attrs.frozen
class ZoneStatus:
    zone: str
    held: int

    @property
    def summary(self) -> str:
        return f"usage 41.0%, zone {self.zone}, {self.held} in memory's line"


class LatchedMemory(MemoryDouble):
    """A memory account that holds everyone while latched, and wakes admission on release; it
    reads 7.9 G of 34.4 G (the reporter's row strings)."""

    def __init__(self, latched: bool = False) -> None:
        self.latched = latched

    @property
    def capacity(self) -> int:
        return 34_400_000_000

    @property
    def in_use(self) -> int:
        return 7_900_000_000

    def status(self) -> ZoneStatus:  # type: ignore[override]
        return ZoneStatus("LATCHED" if self.latched else "NORMAL", 0)

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return not self.latched

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return not self.latched

    def give(self, amounts: Sequence[Any]) -> None:
        return None

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        return None

    def release(self) -> None:
        self.latched = False
        self._capacity_changed()


def snapshot(
    job_id: str, *, kind: JobType = JobType.TOOL, workflow_id: str = "wf-1"
) -> JobSnapshot:
    return JobSnapshot(
        job_id=job_id,
        workflow_id=workflow_id,
        parent_job_id=workflow_id,
        user_id="alice",
        job_class="Probe",
        job_class_qualname="tests.Probe",
        kind=kind,
        name="Probe",
    )


def limiter_event(
    name: str,
    *,
    category: str = "semaphore",
    capacity: float = 100,
    in_use: float = 0,
    waiters: int = 0,
    type: LimiterEventType = LimiterEventType.GRANTED_IMMEDIATE,
    status: str | None = None,
    amount: float = 1,
) -> ev.LimiterEvent:
    return ev.LimiterEvent(
        limiter_name=name,
        limiter_category=category,
        capacity=capacity,
        in_use=in_use,
        waiters=waiters,
        type=type,
        reject_reason="cancelled" if type is LimiterEventType.REJECTED else None,
        status_indicator=status,
        amount=amount,
    )


def started(job_id: str, **kwargs: Any) -> ev.JobStartedEvent:
    return ev.JobStartedEvent(snapshot=snapshot(job_id, **kwargs), attempt=1)


def completed(job_id: str, **kwargs: Any) -> ev.JobCompletedEvent:
    return ev.JobCompletedEvent(snapshot=snapshot(job_id, **kwargs).with_state(JobState.COMPLETED))


def reporter(**kwargs: Any) -> SystemHealthReporter:
    kwargs.setdefault("cpu", None)
    kwargs.setdefault("color", False)
    return SystemHealthReporter(**kwargs)


def row_of(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.lstrip().startswith(name))


# -- the predicate and the cadence ----------------------------------------------------------------
def test_the_predicate_keeps_limiter_and_lifecycle_events_only() -> None:
    """SHR-01, OBS-20: limiter and lifecycle events pass; progress and system events do not."""
    probe = reporter()
    assert probe.predicate is is_health_event
    assert is_health_event(limiter_event("db"))
    assert is_health_event(started("j1"))
    assert is_health_event(completed("j1"))
    assert is_health_event(ev.JobScheduled(snapshot=snapshot("j1")))
    assert not is_health_event(ev.JobProgressEvent(snapshot=snapshot("j1"), percent=50))
    assert not is_health_event(ev.SchedulerEvent(type=ev.SchedulerEventType.STARTED))


async def test_a_snapshot_is_logged_on_the_fiftieth_event_and_not_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SHR-02, OBS-20: every observed event counts, whatever its type; after 49 nothing is logged,
    the 50th logs exactly one INFO record starting with the title and with no trailing newline."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    probe = reporter()
    for index in range(49):
        if index % 2:
            probe.observe(ev.JobProgressEvent(snapshot=snapshot("j1"), percent=1))
        else:
            probe.observe(limiter_event("db", in_use=index % 100))
    assert probe.events_seen == 49
    assert [r for r in caplog.records if r.name == LOGGER] == []
    probe.observe(ev.JobProgressEvent(snapshot=snapshot("j1"), percent=2))
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    text = records[0].getMessage()
    assert text.startswith(SNAPSHOT_TITLE) and not text.endswith("\n")
    for _ in range(50):
        probe.observe(started("j2"))
    assert len([r for r in caplog.records if r.name == LOGGER]) == 2


def test_every_is_validated() -> None:
    """The cadence is a positive count; anything else is refused naming it."""
    for bad in (0, -5, True, 2.5):
        with pytest.raises(ValueError, match="every must be a positive int"):
            SystemHealthReporter(every=bad, cpu=None)  # type: ignore[arg-type]


# -- the sections ---------------------------------------------------------------------------------
async def test_five_sections_in_order() -> None:
    """SHR-03, SHR-04, OBS-21: Limiters, Memory, Jobs running, Workflows active, Queue; with no
    limiter event the first reads "(none active)"."""
    text = reporter(memory=LatchedMemory()).render()
    lines = text.splitlines()
    assert lines[0] == SNAPSHOT_TITLE
    assert lines[1] == "  Limiters: (none active)"
    assert lines[2] == "  Memory: usage 41.0%, zone NORMAL, 0 in memory's line"
    assert lines[3] == "  Jobs running: 0 total"
    assert lines[4] == "  Workflows active: 0"
    assert lines[5] == "  Queue: 0 standard, 0 fast, 0 parked in admission"
    assert len(lines) == 6


async def test_one_row_per_limiter_name_from_its_latest_event() -> None:
    """SHR-04: a second event on the same name replaces the first one's figures."""
    probe = reporter()
    probe.observe(limiter_event("db", in_use=10, waiters=0))
    probe.observe(limiter_event("db", in_use=70, waiters=4, type=LimiterEventType.HELD))
    rows = probe.snapshot().limiters
    assert [row.name for row in rows] == ["db"]
    assert (rows[0].used, rows[0].waiters, rows[0].utilisation) == (70, 4, 0.7)
    assert probe.render().splitlines()[1] == "  Limiters:"


async def test_limiter_rows_are_sorted_by_utilisation_with_units_short_counts_and_indicators() -> (
    None
):
    """SHR-05, SHR-07, SHR-08, OBS-20: highest utilisation first (90 % > 30 % > 23 %, and a
    capacity of 0 is 0 %), each row in its unit, counts shortened in base 1000, the indicator
    last."""
    probe = reporter()
    probe.observe(limiter_event("api", category="elastic_window", capacity=10, in_use=3))
    probe.observe(limiter_event("slots", capacity=100, in_use=90, status="probing"))
    probe.observe(
        limiter_event("memory", category="memory", capacity=34.4e9, in_use=7.9e9, waiters=1)
    )
    probe.observe(limiter_event("broken", category="custom", capacity=0, in_use=5))
    text = probe.render()
    names = [line.split()[0] for line in text.splitlines()[2:6]]
    assert names == ["slots", "api", "memory", "broken"]
    assert probe.snapshot().limiter("broken").utilisation == 0.0  # type: ignore[union-attr]
    assert "used:   7.9G  total: 34.4G  B" in row_of(text, "memory")
    assert "total: 100    slot  probing" in row_of(text, "slots")
    assert row_of(text, "api").endswith("total: 10     req")
    assert "used:     90" in row_of(text, "slots")
    assert row_of(text, "broken").endswith("total: 0")  # no unit for an unknown category
    assert "  30.0% " in row_of(text, "api") and "  23.0% " in row_of(text, "memory")


def test_short_counts_use_base_1000() -> None:
    """SHR-08, OBS-20: as is below 1000, then one decimal and K, M, G, T."""
    cases = {
        0: "0",
        40: "40",
        999: "999",
        1000: "1.0K",
        1200: "1.2K",
        2_500_000: "2.5M",
        7.9e9: "7.9G",
        34.4e9: "34.4G",
        3e12: "3.0T",
    }
    assert {value: layout.short_count(value) for value in cases} == cases


def test_the_row_layout() -> None:
    """SHR-06, OBS-20: four spaces, the name padded to 28, the percent, the 20-cell bar, waiters
    (width 3), used (right, width 6), total (left, width 6), the unit (width 4), the status;
    trailing spaces trimmed; a longer name is its first 25 characters and "..."."""
    row = LimiterRow("db:orders", "semaphore", capacity=100, used=40, waiters=3)
    bar = FULL * 8 + EMPTY * 12
    assert row.render() == (
        "    db:orders                     40.0% "
        + bar
        + "  waiters=  3  used:     40  total: 100    slot"
    )
    long = LimiterRow("an-account-name-that-runs-past-the-column", "token_bucket", 10, 5)
    text = long.render()
    assert text.startswith("    an-account-name-that-runs...  50.0% ")
    assert text.endswith("total: 10     tok")
    with_status = LimiterRow("w", "elastic_window", 5, 5, waiters=12, status="throttle:2.5x")
    assert with_status.render().endswith(
        "waiters= 12  used:      5  total: 5      req   throttle:2.5x"
    )


async def test_a_token_buckets_used_figure_is_the_minutes_granted_amount(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SHR-09, OBS-20: a token bucket's "used" adds the amounts granted (at once or from hold) in
    the last 60 s of the trio clock, never RELEASED; other categories use the event's in_use."""
    probe = reporter()
    bucket = {"category": "token_bucket", "capacity": 2000, "in_use": 1999}
    for _ in range(2):
        probe.observe(limiter_event("gpt", amount=400, **bucket))
    probe.observe(
        limiter_event("gpt", amount=400, type=LimiterEventType.GRANTED_FROM_HOLD, **bucket)
    )
    probe.observe(limiter_event("gpt", amount=400, type=LimiterEventType.RELEASED, **bucket))
    probe.observe(limiter_event("gpt", amount=400, type=LimiterEventType.HELD, **bucket))
    probe.observe(limiter_event("slots", capacity=100, in_use=40))
    text = probe.render()
    assert "60.0%" in row_of(text, "gpt")
    assert "used:   1.2K  total: 2.0K" in row_of(text, "gpt")
    assert row_of(text, "gpt").endswith("tok")
    assert "40.0%" in row_of(text, "slots")

    await trio.sleep(30)
    probe.observe(limiter_event("gpt", amount=200, **bucket))
    assert probe.snapshot().limiter("gpt").used == 1400  # type: ignore[union-attr]
    await trio.sleep(30)  # the first three grants are now 60 s old
    assert probe.snapshot().limiter("gpt").used == 200  # type: ignore[union-attr]
    await trio.sleep(30)
    assert probe.snapshot().limiter("gpt").used == 0  # type: ignore[union-attr]


def test_abnormal_rows_are_tinted_red_for_blocked_and_yellow_for_throttle_pace_or_probing() -> None:
    """SHR-10, OBS-20: "blocked" tints the row red (255, 80, 80); "throttle", "pace" and
    "probing" tint it yellow (230, 170, 50); the tint covers the name and percent and the
    counts, not the bar; a nominal row has no tint, and without colour there is no escape at
    all."""
    blocked = LimiterRow("api", "elastic_window", 10, 10, status="blocked").render(color=True)
    head, _, rest = blocked.partition("\x1b[0m")
    assert head.startswith(RED + "    api") and head.endswith("100.0%")
    assert f"{RED}  waiters=  0" in rest and rest.endswith("blocked\x1b[0m")
    bar_part = rest[: rest.index(RED)]
    assert GREEN + FULL in bar_part and RED not in bar_part
    for status in ("throttle:1.5x", "pace:1500ms", "probing"):
        text = LimiterRow("x", "token_bucket", 10, 1, status=status).render(color=True)
        assert text.startswith(YELLOW + "    x") and text.count(YELLOW) == 2
    nominal = LimiterRow("db", "semaphore", 10, 2).render(color=True)
    assert RED not in nominal and YELLOW not in nominal and nominal.startswith("    db")
    plain = LimiterRow("api", "elastic_window", 10, 10, status="blocked").render(color=False)
    assert "\x1b[" not in plain


def test_the_bar_and_the_cpu_row() -> None:
    """SHR-11: round(ratio x 20) cells are filled (a half rounds up); filled cells are green up to
    60 % of the width, then fade to red; empty cells are dim grey '░'. The CPU row,
    "cpu (N cores)" with the system load, follows the limiters when a reading exists."""
    assert layout.bar(0.45, color=False) == FULL * 9 + EMPTY * 11
    assert layout.bar(0.225, color=False) == FULL * 5 + EMPTY * 15
    assert layout.bar(1.7, color=False) == FULL * 20
    assert layout.bar(0.0, color=False) == EMPTY * 20
    assert layout.bar(0.5, color=False, ascii_only=True) == "#" * 10 + "." * 10

    coloured = layout.bar(1.0, color=True)
    runs = re.findall(r"\x1b\[38;2;(\d+);(\d+);(\d+)m(" + FULL + "+)", coloured)
    colours = [(int(r), int(g), int(b)) for r, g, b, cells in runs for _ in cells]
    assert len(colours) == 20
    assert set(colours[:12]) == {layout.GREEN}
    assert colours[-1] == layout.RED
    reds = [r for r, _, _ in colours[12:]]
    assert reds == sorted(reds) and len(set(reds)) == 8, "a fade, one step a cell"
    half = layout.bar(0.5, color=True)
    assert "\x1b[38;2;110;110;110m" + EMPTY * 10 in half

    probe = reporter(cpu=lambda: CpuLoad(cores=8, load=0.25))
    probe.observe(limiter_event("db", capacity=4, in_use=1))
    lines = probe.render().splitlines()
    assert lines[2].startswith("    db")
    assert lines[3] == "    cpu (8 cores)                 25.0% " + FULL * 5 + EMPTY * 15
    assert lines[4].startswith("  Memory:")
    assert not any("cpu (" in line for line in reporter(cpu=None).render().splitlines())
    assert not any("cpu (" in line for line in reporter(cpu=lambda: None).render().splitlines())


async def test_the_memory_line_is_always_present() -> None:
    """SHR-12, OBS-21: "  Memory: " + the memory account's status summary; without one it says
    so."""
    memory = LatchedMemory(latched=True)
    assert "  Memory: usage 41.0%, zone LATCHED, 0 in memory's line" in (
        reporter(memory=memory).render().splitlines()
    )
    assert "  Memory: not reported" in reporter().render().splitlines()


def test_running_jobs_count_once_per_job_across_retries_and_leave_on_their_terminal_event() -> None:
    """SHR-13, SHR-14, OBS-21: the first start adds a job, its re-runs do not add it again, its
    terminal event removes it; rows by type, highest count first ("%-10s %4d"); workflows are
    the distinct workflow ids of running jobs."""
    probe = reporter()
    for _ in range(3):
        probe.observe(started("tool-1", kind=JobType.TOOL, workflow_id="wf-a"))
    probe.observe(started("thinker-1", kind=JobType.THINKER, workflow_id="wf-b"))
    probe.observe(started("gone", kind=JobType.TOOL, workflow_id="wf-c"))
    probe.observe(completed("gone", kind=JobType.TOOL, workflow_id="wf-c"))
    probe.observe(completed("never-started"))
    probe.observe(started(""))  # no job id: nothing to count
    lines = probe.render().splitlines()
    at = lines.index("  Jobs running: 2 total")
    assert sorted(lines[at + 1 : at + 3]) == ["    THINKER       1", "    TOOL          1"]
    assert lines[at + 3] == "  Workflows active: 2"

    for job_id in ("d1", "d2"):
        probe.observe(started(job_id, kind=JobType.DOER, workflow_id="wf-a"))
    lines = probe.render().splitlines()
    at = lines.index("  Jobs running: 4 total")
    assert lines[at + 1] == "    DOER          2"
    assert lines[at + 4] == "  Workflows active: 2"

    coloured = reporter(color=True).render()
    assert "\x1b[1;97mJobs running: 0 total\x1b[0m" in coloured


def test_the_queue_line_reads_the_dispatcher() -> None:
    """SHR-15, OBS-21: "Queue: <standard> standard, <fast> fast, <n> parked in admission"."""
    sizes = QueueSizes(standard=4, fast=1, parked=7)
    assert reporter(queues=lambda: sizes).render().splitlines()[-1] == (
        "  Queue: 4 standard, 1 fast, 7 parked in admission"
    )


def test_a_snapshot_built_from_live_accounts() -> None:
    """capture_health reads each account once (duplicates dropped), asks the waiters reader, and
    groups the running jobs by type and workflow."""
    a, b = CountingGate("a", 4), CountingGate("b", 2)
    a.try_take([None], [])
    b.try_take([None, None], [])
    snap = capture_health(
        [a, b, a],
        waiters=lambda account: 5 if account is b else 0,
        running=[(JobType.TOOL, "w1"), (JobType.TOOL, "w2"), (JobType.JOB, "w1")],
        queues=QueueSizes(1, 2, 5),
    )
    assert [(r.name, r.used, r.waiters) for r in snap.limiters] == [("b", 2, 5), ("a", 1, 0)]
    assert snap.running == ((JobType.TOOL, 2), (JobType.JOB, 1))
    assert (snap.jobs_running, snap.workflows_active) == (3, 2)
    assert snap.memory == "not reported"
    assert isinstance(snap, HealthSnapshot)


# -- the dispatcher ---------------------------------------------------------------------------------
async def test_dispatcher_health_with_parked_jobs_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SHR-03..15 on a live dispatcher: two jobs run on a 2-slot gate while three wait parked
    holding nothing; health() shows the gate full with three waiters, two tools running in one
    workflow, three parked; once everything has run, all of it is back to zero."""
    gate = CountingGate("render", 2)
    memory = LatchedMemory()
    config = DispatcherConfig(health_every=None)
    async with open_dispatcher(config, memory=memory) as dispatcher:
        root = workflow("alice", "health")
        handles = [
            dispatcher.submit(
                Echo(
                    root,
                    sleep=10,
                    requirements=lambda: JobRequirements().require_rate_limiter(gate),
                )
            )
            for _ in range(5)
        ]
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        health = dispatcher.health()
        assert health.at == start
        render = health.limiter("render")
        assert render is not None
        assert (render.used, render.capacity, render.waiters) == (2, 2, 3)
        assert health.limiters[0] is render, "the full gate sorts first"
        assert health.limiter("http") is not None
        assert health.limiter("memory") is None, "memory is a row only while it holds jobs"
        assert health.running == ((JobType.TOOL, 2),)
        assert health.workflows_active == 1
        assert health.queues == QueueSizes(standard=0, fast=0, parked=3)
        assert health.memory == "usage 41.0%, zone NORMAL, 0 in memory's line"
        text = health.render()
        assert "waiters=  3  used:      2  total: 2      slot" in row_of(text, "render")
        assert "  Queue: 0 standard, 0 fast, 3 parked in admission" in text.splitlines()

        await trio.sleep(10)
        await trio.testing.wait_all_tasks_blocked()
        middle = dispatcher.health()
        assert middle.queues.parked == 1 and middle.jobs_running == 2

        for handle in handles:
            assert await handle.result() == "ok"
        assert trio.current_time() - start == pytest.approx(30)
        done = dispatcher.health()
        assert done.jobs_running == 0 and done.workflows_active == 0
        assert done.queues == QueueSizes()
        assert done.limiter("render") is None  # admission forgot the idle per-job gate


async def test_memory_is_a_row_while_it_holds_jobs(autojump_clock: trio.testing.MockClock) -> None:
    """SHR-07, SHR-12: a latched memory account holds every resourceful job; health() shows it
    as a row (bytes, with its waiters) until it releases them."""
    memory = LatchedMemory(latched=True)
    gate = CountingGate("render", 4)
    async with open_dispatcher(DispatcherConfig(health_every=None), memory=memory) as dispatcher:
        root = workflow("alice", "memory")
        handles = [
            dispatcher.submit(
                Echo(root, requirements=lambda: JobRequirements().require_rate_limiter(gate))
            )
            for _ in range(2)
        ]
        await trio.testing.wait_all_tasks_blocked()
        health = dispatcher.health()
        row = health.limiter("memory")
        assert row is not None and row.waiters == 2 and row.unit == "B"
        assert "used:   7.9G  total: 34.4G  B" in health.render()
        assert health.queues.parked == 2 and health.jobs_running == 0
        memory.release()
        for handle in handles:
            await handle.result()
        assert dispatcher.health().limiter("memory") is None


async def test_the_dispatcher_subscribes_a_reporter_unless_told_not_to(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """SHR-02 through the dispatcher: health_every (off by default; the seed's 50 when asked)
    subscribes a reporter at start that logs every that many limiter and lifecycle events;
    None subscribes none."""
    assert DispatcherConfig().health_every is None
    caplog.set_level(logging.INFO, logger=LOGGER)
    gate = CountingGate("render", 1)
    async with open_dispatcher(DispatcherConfig(health_every=10)) as dispatcher:
        reporters = [s for s in dispatcher.bus.subscriptions if "SystemHealthReporter" in repr(s)]
        assert len(reporters) == 1
        root = workflow("alice", "reporter")
        for _ in range(6):
            dispatcher.submit(
                Echo(
                    root, sleep=1, requirements=lambda: JobRequirements().require_rate_limiter(gate)
                )
            )
        await trio.sleep(10)
    texts = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert texts and all(text.startswith(SNAPSHOT_TITLE) for text in texts)
    assert any("    render" in text for text in texts)

    quiet = JobDispatcher(DispatcherConfig(health_every=None))
    async with trio.open_nursery() as nursery:
        await nursery.start(quiet.run)
        assert not [s for s in quiet.bus.subscriptions if "SystemHealthReporter" in repr(s)]
        await quiet.shutdown()


def test_health_can_be_read_before_the_dispatcher_starts() -> None:
    """SHR-03: outside a trio run, health() still answers in the five sections, in order; it
    has no instant and runs nothing."""
    health = JobDispatcher(DispatcherConfig()).health()
    assert health.at is None and health.jobs_running == 0
    assert health.limiter("http") is not None and health.queues == QueueSizes()
    lines = health.render().splitlines()
    titles = ["  Limiters:", "  Memory:", "  Jobs running:", "  Workflows active:", "  Queue:"]
    positions = [next(i for i, line in enumerate(lines) if line.startswith(t)) for t in titles]
    assert positions == sorted(positions)
    assert lines[-1] == "  Queue: 0 standard, 0 fast, 0 parked in admission"
    memory = next(line for line in lines if line.startswith("  Memory:"))
    assert "zone GREEN" in memory and "unavailable" not in memory


def test_health_every_is_validated_and_read_from_plain_data() -> None:
    """A positive count or None; from_mapping reads it like any other key."""
    for bad in (0, -1, True, "50"):
        with pytest.raises(ValueError, match="health_every must be a positive int or None"):
            DispatcherConfig(health_every=bad)  # type: ignore[arg-type]
    assert DispatcherConfig.from_mapping({"health_every": 5}).health_every == 5
    assert DispatcherConfig.from_mapping({"health_every": None}).health_every is None


# -- the demo -------------------------------------------------------------------------------------
def test_the_demo_shows_the_health_snapshot_mid_run(capsys: pytest.CaptureFixture[str]) -> None:
    """SHR-03: ``nucleo-trio demo`` prints what ``dispatcher.health()`` answered mid-run, in the
    five sections, before the report; one seed prints the same snapshot."""
    from nucleo_trio._demo.options import HEALTH_AT, DemoOptions
    from nucleo_trio._demo.render import WIDTH
    from nucleo_trio._demo.runner import execute_demo
    from nucleo_trio.cli import main

    assert main(["demo", "--jobs", "60"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(SNAPSHOT_TITLE))
    assert f"{HEALTH_AT:.1f} s of virtual time into the run" in lines[at]
    block = lines[at : lines.index("", at)]
    titles = ["  Limiters:", "  Memory:", "  Jobs running:", "  Workflows active:", "  Queue:"]
    positions = [next(i for i, line in enumerate(block) if line.startswith(t)) for t in titles]
    assert positions == sorted(positions)
    for account in ("db", "http", "search-api"):
        assert any(line.startswith(f"    {account} ") for line in block), account
    assert out.index(SNAPSHOT_TITLE) < out.index("Jobs by kind")
    assert max(len(line) for line in block) <= WIDTH

    first = execute_demo(DemoOptions(jobs=40, seed=3)).health
    second = execute_demo(DemoOptions(jobs=40, seed=3)).health
    assert first is not None and first == second
    assert first.at is not None and first.jobs_running >= 1
