"""Four dispatchers on one Redis heartbeat schedule, in one trio run.

Each dispatcher is a worker with its own ``RedisHeartbeatStore`` (its own claim token) on one
key prefix, and each publishes the same schedule at its start, the way every worker's boot code
would: the same ids, anchors and recurrences. In virtual time, the autojump clock holds still
while a store waits on Redis, so every Heart wakes at the very same virtual instant and the four
race for each slot on the server; the schedule must come out with every slot fired exactly
once, and so must catch-up after all four were down. Claims there live for minutes of Redis's
clock, so none runs out. Two tests run on the real clock, because what they wait for happens in
real time: a wake-up that travels over Redis pub/sub, and a Redis restarted under the four
workers. The worker killed mid-fire is in ``test_redis_heartbeat_processes.py``, with real
processes.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import trio
import trio.testing

from nucleo_trio.bus import MessageBus
from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, JobDispatcher, open_dispatcher
from nucleo_trio.heartbeat import (
    FixedInterval,
    HeartbeatFired,
    HeartbeatScheduled,
    ScheduleHeartbeat,
    heartbeat_now,
)
from nucleo_trio.jobs import JobContext, Tool

from .redis_server import running_redis

_PREFIXES = itertools.count()

TEST_KEY = "a test key, never a real one"


class Beat(Tool[str]):
    """The fired job; the fires themselves are what the tests count."""

    async def execute(self, context: JobContext) -> str:
        return "beat"


def redis_config(url: str, prefix: str) -> DispatcherConfig:
    return DispatcherConfig(
        heartbeat=HeartbeatConfig(
            kind="redis",
            settings={"url": url, "prefix": prefix, "claim_ttl": 600},
            signing_key=TEST_KEY,
        )
    )


class Worker:
    """One dispatcher and the slots it fired, as (worker, heartbeat id, run instant)."""

    def __init__(self, name: str, fired: list[tuple[str, str, float]]) -> None:
        self.name = name
        self.bus = MessageBus()
        self.bus.subscribe(
            lambda event: fired.append((name, event.heartbeat.id, event.heartbeat.run_at)),
            event_type=HeartbeatFired,
        )


def publish_schedules(dispatcher: JobDispatcher, anchor: float) -> None:
    """The boot code every worker runs: the same two schedules, with the same anchor."""
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Beat, "fast", anchor, recurrence=FixedInterval(0.5)), "ops"
    )
    dispatcher.schedule_heartbeat(
        ScheduleHeartbeat(Beat, "slow", anchor + 0.25, recurrence=FixedInterval(1.5)), "ops"
    )


@contextmanager
def capture_errors(failures: list[str]) -> Iterator[None]:
    """Every error the Heart logs meanwhile (a store operation that failed), with its cause."""

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            cause = record.exc_info[1] if record.exc_info else None
            failures.append(f"{record.getMessage()}: {cause}")

    handler = Keep(level=logging.ERROR)
    logger = logging.getLogger("nucleo_trio.heartbeat")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def slots(anchor: float, period: float, until: float) -> list[float]:
    """Every slot of a schedule from ``anchor`` up to ``until``."""
    count = int((until - anchor) / period + 1e-9) + 1
    return [anchor + index * period for index in range(count)]


async def test_four_racing_workers_fire_each_slot_once(
    autojump_clock: trio.testing.MockClock, redis_server: Any
) -> None:
    """Four workers start 1.25 s apart, each publishing the same schedules (the later ones
    rebinding them to an anchor whose first slots already fired); over ten virtual seconds
    every slot of both heartbeats fires exactly once, on some worker."""
    prefix = f"test-hb-race-{next(_PREFIXES)}"
    fired: list[tuple[str, str, float]] = []
    anchor = heartbeat_now() + 1
    async with AsyncExitStack() as stack:
        for index in range(4):
            worker = Worker(f"w{index}", fired)
            dispatcher = await stack.enter_async_context(
                open_dispatcher(
                    redis_config(redis_server.url, prefix), bus=worker.bus, heartbeat_jobs=[Beat]
                )
            )
            publish_schedules(dispatcher, anchor)
            await trio.sleep(1.25)
        await trio.sleep(10.0 - 5.0 - 0.1)  # ends between two slots
        end = heartbeat_now()
    counts = Counter((heartbeat_id, run_at) for _, heartbeat_id, run_at in fired)
    assert [run_at for (hid, run_at) in sorted(counts) if hid == "fast"] == slots(anchor, 0.5, end)
    assert [run_at for (hid, run_at) in sorted(counts) if hid == "slow"] == slots(
        anchor + 0.25, 1.5, end
    )
    assert set(counts.values()) == {1}, [key for key, n in counts.items() if n > 1]
    assert len({name for name, _, _ in fired}) > 1, "the four workers raced for the slots"


async def test_catch_up_after_every_worker_was_down_fires_each_missed_slot_once(
    autojump_clock: trio.testing.MockClock, redis_server: Any
) -> None:
    """Four workers run 2.9 s, all stop, and three seconds later four start again,
    publishing the same schedules: the slots that fell due while none ran fire once each, back
    to back as the first worker comes up, and the cadence goes on; no slot fires twice."""
    prefix = f"test-hb-down-{next(_PREFIXES)}"
    fired: list[tuple[str, str, float]] = []
    fired_at: list[float] = []
    anchor = heartbeat_now() + 0.5

    async def run_workers(generation: str, seconds: float) -> None:
        async with AsyncExitStack() as stack:
            for index in range(4):
                worker = Worker(f"{generation}{index}", fired)
                worker.bus.subscribe(
                    lambda event: fired_at.append(heartbeat_now()), event_type=HeartbeatFired
                )
                dispatcher = await stack.enter_async_context(
                    open_dispatcher(
                        redis_config(redis_server.url, prefix),
                        bus=worker.bus,
                        heartbeat_jobs=[Beat],
                    )
                )
                publish_schedules(dispatcher, anchor)
            await trio.sleep(seconds)

    await run_workers("first", 2.9)
    down_from = heartbeat_now()
    before = len(fired)
    await trio.sleep(3.0)
    back_at = heartbeat_now()
    await run_workers("second", 2.9)
    end = heartbeat_now()

    counts = Counter((heartbeat_id, run_at) for _, heartbeat_id, run_at in fired)
    assert set(counts.values()) == {1}, [key for key, n in counts.items() if n > 1]
    assert [at for (hid, at) in sorted(counts) if hid == "fast"] == slots(anchor, 0.5, end)
    assert [at for (hid, at) in sorted(counts) if hid == "slow"] == slots(anchor + 0.25, 1.5, end)
    missed = [(hid, at) for _, hid, at in fired[before:] if down_from < at <= back_at]
    assert len(missed) == 8, missed  # fast: 3.0 to 5.5, slow: 3.75 and 5.25

    assert all(instant == back_at for instant in fired_at[before : before + len(missed)])


async def test_a_worker_wakes_for_a_heartbeat_another_worker_scheduled(redis_server: Any) -> None:
    """On the real clock (the wake-up travels over Redis pub/sub, which a virtual clock would
    not wait for): worker B sleeps on an empty schedule; worker A schedules a heartbeat 0.4 s
    away and stops at once. B hears of the new head on the store's channel and fires it."""
    prefix = f"test-hb-wake-{next(_PREFIXES)}"
    fired: list[tuple[str, str, float]] = []
    config = redis_config(redis_server.url, prefix)
    b = Worker("b", fired)
    async with open_dispatcher(config, bus=b.bus, heartbeat_jobs=[Beat]):
        await trio.sleep(0.2)  # B has looked at the empty schedule and sleeps with no deadline
        scheduled = trio.Event()
        a_bus = MessageBus()
        a_bus.subscribe(lambda event: scheduled.set(), event_type=HeartbeatScheduled)
        async with open_dispatcher(config, bus=a_bus, heartbeat_jobs=[Beat]) as a:
            due = heartbeat_now() + 0.4
            a.schedule_heartbeat(ScheduleHeartbeat(Beat, "once", due), "ops")
            with trio.fail_after(5):
                await scheduled.wait()
        await trio.sleep(0.8)
    assert fired == [("b", "once", due)]


async def test_redis_restarted_mid_run_fires_no_slot_twice_and_loses_none(
    redis_binary: str,
) -> None:
    """On the real clock (Redis restarts in real time): four workers on a Redis that writes
    every change to its append-only file before it answers (appendfsync always). 1.2 s in,
    Redis stops, stays down for 0.6 s and starts again on the same port. Meanwhile the workers'
    store operations fail with errors that name Redis; once it is back the slots that fell due
    fire, and every slot, before, during and after, fires exactly once."""
    fired: list[tuple[str, str, float]] = []
    failures: list[str] = []
    with running_redis(redis_binary, persistent=True) as server:
        config = DispatcherConfig(
            heartbeat=HeartbeatConfig(
                kind="redis",
                settings={"url": server.url, "prefix": "restart", "claim_ttl": 1, "timeout": 1},
                signing_key=TEST_KEY,
            )
        )
        with capture_errors(failures):
            async with AsyncExitStack() as stack:
                anchor = heartbeat_now() + 0.2
                for index in range(4):
                    worker = Worker(f"w{index}", fired)
                    dispatcher = await stack.enter_async_context(
                        open_dispatcher(config, bus=worker.bus, heartbeat_jobs=[Beat])
                    )
                    dispatcher.schedule_heartbeat(
                        ScheduleHeartbeat(Beat, "pulse", anchor, recurrence=FixedInterval(0.25)),
                        "ops",
                    )
                await trio.sleep(anchor + 1.2 - heartbeat_now())
                await trio.to_thread.run_sync(server.stop)
                down_at = heartbeat_now()
                await trio.sleep(0.6)
                await trio.to_thread.run_sync(server.start)
                back_at = heartbeat_now()
                await trio.sleep(anchor + 3.6 - heartbeat_now())
    counts = Counter(run_at for _, _, run_at in fired)
    assert set(counts.values()) == {1}, [at - anchor for at, n in counts.items() if n > 1]
    instants = sorted(counts)
    assert instants == slots(anchor, 0.25, instants[-1] + 0.01)
    assert any(down_at < at <= back_at for at in instants), "slots due while Redis was down"
    assert instants[-1] >= back_at + 1.0, "the schedule went on after the restart"
    assert any(f"Redis at {server.url}" in failure for failure in failures), failures
