"""A durable schedule across a restart (HB-09, HB-11, HB-14), and no forged heartbeat on it.

The SQLite store writes in a worker thread and keeps an autojump clock still while an operation
is there, so these tests run in virtual time: the clock cannot move while a statement runs. Both dispatchers of the
first test live in one ``trio.run``, which anchors ``heartbeat_now()`` once, so the virtual pause
between closing the first and opening the second is a pause on the Heart's clock too.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.bus import MessageBus
from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.guardrails import ScopeGuard, TenantScope
from nucleo_trio.heartbeat import (
    FixedInterval,
    Heartbeat,
    HeartbeatCodec,
    HeartbeatFired,
    HeartbeatJobs,
    HeartbeatRequested,
    ScheduleHeartbeat,
    SigningKey,
    SQLiteHeartbeatStore,
    heartbeat_now,
)
from nucleo_trio.jobs import JobContext, Tool


@attrs.frozen
class Digest:
    """The typed input the durable heartbeat carries across the restart."""

    topic: str
    items: int


TICKS: list[tuple[float, str, Digest | None]] = []


class Tick(Tool[str]):
    """The fired job: notes when it ran, for whom, and what input it was handed."""

    input: Digest | None = None

    def set_input(self, digest: Digest) -> None:
        self.input = digest

    async def execute(self, context: JobContext) -> str:
        TICKS.append((trio.current_time(), context.user_id, self.input))
        return "tick"


@pytest.fixture(autouse=True)
def _fresh_ticks() -> None:
    TICKS.clear()


TEST_KEY = "a test key, never a real one"


def sqlite_config(path: Path) -> DispatcherConfig:
    return DispatcherConfig(
        heartbeat=HeartbeatConfig(kind="sqlite", settings={"path": str(path)}, signing_key=TEST_KEY)
    )


def offline_store(path: Path) -> SQLiteHeartbeatStore:
    """The file opened outside any dispatcher, as an operator's tool would, with the key."""
    return SQLiteHeartbeatStore(
        path, codec=HeartbeatCodec(HeartbeatJobs([Tick]), SigningKey(TEST_KEY))
    )


async def test_schedules_survive_a_restart_and_overdue_slots_catch_up(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """HB-09, HB-11: a recurring heartbeat in the SQLite store survives closing and reopening
    the dispatcher with its user, guard and input; the slots that fell due while it was down
    fire back to back as soon as it is up, each exactly one period after the last, counted
    from the anchor; then the cadence goes on."""
    path = tmp_path / "beats.db"
    guard = ScopeGuard(TenantScope("acme"))
    start = trio.current_time()
    anchor = heartbeat_now() + 1
    fired: list[HeartbeatFired] = []

    async with open_dispatcher(sqlite_config(path), bus=watched(fired)) as first:
        first.schedule_heartbeat(
            ScheduleHeartbeat(
                Tick, "digest", anchor, input=Digest("news", 3), recurrence=FixedInterval(1)
            ),
            "alice",
            scope_guard=guard,
        )
        await trio.sleep(2.5)  # fires at 1 and 2
    assert [round(at - start, 6) for at, _, _ in TICKS] == [1, 2]

    # Down from 2.5 to 5.75: the slots at 3, 4 and 5 fall due meanwhile. The file holds the
    # slot after the last fire, with everything the restart needs.
    await trio.sleep(3.25)
    offline = offline_store(path)
    (kept,) = await offline.inspect()
    await offline.aclose()
    assert kept.run_at == anchor + 2 and kept.user_id == "alice" and kept.scope_guard == guard

    async with open_dispatcher(sqlite_config(path), bus=watched(fired), heartbeat_jobs=[Tick]):
        await trio.sleep(1.0)  # the cadence goes on at 6
    assert [round(at - start, 6) for at, _, _ in TICKS] == [1, 2, 5.75, 5.75, 5.75, 6]
    assert {(user, digest) for _, user, digest in TICKS} == {("alice", Digest("news", 3))}
    assert [event.heartbeat.run_at - anchor for event in fired] == [0, 1, 2, 3, 4, 5]
    assert all(event.heartbeat.scope_guard == guard for event in fired)


def watched(fired: list[HeartbeatFired]) -> MessageBus:
    """A bus that tells ``fired`` of every fire, from the dispatcher's very start (overdue
    slots fire while it starts, before the block's body runs)."""
    bus = MessageBus()
    bus.subscribe(fired.append, event_type=HeartbeatFired)
    return bus


def test_the_schedule_outlives_the_trio_run_that_made_it(tmp_path: Path) -> None:
    """A schedule written in one trio.run is read back, field for field, by a dispatcher in
    another: the file, not the process, holds it."""
    path = tmp_path / "beats.db"
    later = {"at": 0.0}

    async def schedule() -> None:
        later["at"] = heartbeat_now() + 3600
        async with open_dispatcher(sqlite_config(path)) as dispatcher:
            dispatcher.schedule_heartbeat(
                ScheduleHeartbeat(Tick, "hourly", later["at"], recurrence=FixedInterval(3600)),
                "bob",
                scope_guard=ScopeGuard(TenantScope("globex")),
            )
            await trio.testing.wait_all_tasks_blocked()

    async def reopen() -> tuple[Heartbeat, ...]:
        async with open_dispatcher(sqlite_config(path), heartbeat_jobs=[Tick]) as dispatcher:
            assert dispatcher.heart is not None
            return await dispatcher.heart.store.inspect()

    trio.run(schedule, clock=trio.testing.MockClock(autojump_threshold=0))
    (restored,) = trio.run(reopen, clock=trio.testing.MockClock(autojump_threshold=0))
    assert (restored.id, restored.job_class, restored.user_id) == ("hourly", Tick, "bob")
    assert restored.run_at == later["at"] and restored.recurrence == FixedInterval(3600)
    assert restored.scope_guard == ScopeGuard(TenantScope("globex"))
    assert TICKS == [], "an hour away: nothing fired"


async def test_a_forged_heartbeat_cannot_be_enqueued_in_the_durable_store(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """HB-03: a Heartbeat built without the two mints (here past its constructor, with
    another user and no guard) is refused by the SQLite store and cannot even be put on the bus;
    the file stays empty, so no restart can bring it back."""
    forged = object.__new__(Heartbeat)
    fields = attrs.asdict(ScheduleHeartbeat(Tick, "forged", heartbeat_now()), recurse=False)
    for name, value in {**fields, "user_id": "root", "scope_guard": ScopeGuard()}.items():
        object.__setattr__(forged, name, value)

    path = tmp_path / "beats.db"
    async with open_dispatcher(sqlite_config(path)) as dispatcher:
        assert dispatcher.heart is not None
        with pytest.raises(TypeError, match="refusing a forged heartbeat 'forged'"):
            await dispatcher.heart.store.enqueue(forged)
        with pytest.raises(TypeError, match="forged Heartbeat"):
            dispatcher.bus.publish(HeartbeatRequested(heartbeat=forged))
        with pytest.raises(TypeError, match="no public constructor"):
            Heartbeat(Tick, "forged", heartbeat_now())
        await trio.sleep(5)
    store = offline_store(path)
    try:
        assert await store.inspect() == ()
    finally:
        await store.aclose()
    assert TICKS == []


async def test_a_bad_store_setting_refuses_the_start(tmp_path: Path) -> None:
    """The heartbeat store is built at start: a path that cannot be opened, or a kind nobody
    provides, is a ConfigError naming it before anything runs."""
    from nucleo_trio.errors import ConfigError

    with pytest.raises(ConfigError, match="heartbeat store \\(kind 'sqlite'\\) could not be built"):
        async with open_dispatcher(sqlite_config(tmp_path / "no-dir" / "beats.db")):
            pass
    with pytest.raises(ConfigError, match="no plugin provides the heartbeat store kind 'etcd'"):
        async with open_dispatcher(DispatcherConfig(heartbeat=HeartbeatConfig(kind="etcd"))):
            pass
    config = DispatcherConfig.from_mapping(
        {"heartbeat": {"kind": "sqlite", "settings": {"path": str(tmp_path / "b.db")}}}
    )
    assert config.heartbeat.settings == {"path": str(tmp_path / "b.db")}
    with pytest.raises(ConfigError, match="heartbeat"):
        DispatcherConfig.from_mapping({"heartbeat": {"kind": "sqlite", "stetings": {}}})
    with pytest.raises(ValueError, match="must name a heartbeat store kind"):
        HeartbeatConfig(kind=" ")
