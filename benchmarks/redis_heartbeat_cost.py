"""What the Redis heartbeat store costs a fire: ``python -m benchmarks.redis_heartbeat_cost``.

One fire asks the store three things: the poll that claims the slot, the re-enqueue that records
the fire with the next slot, and the peek at what is due next. This times that cycle on a
:class:`~nucleo_trio_redis.RedisHeartbeatStore` against a throwaway ``redis-server`` on
loopback (started the way the tests start one), next to the same cycle on the in-memory store
for scale, and prints milliseconds per fire, the best of several rounds (the least disturbed by
the rest of the machine). It also runs a catch-up: how long the first worker up takes to fire
a few hundred overdue slots back to back.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import trio

from nucleo_trio.guardrails import ScopeGuard
from nucleo_trio.heartbeat import (
    FixedInterval,
    HeartbeatCodec,
    HeartbeatJobs,
    HeartbeatStore,
    InMemoryHeartbeatStore,
    ScheduleHeartbeat,
    SigningKey,
)
from nucleo_trio.heartbeat.records import _mint_from
from nucleo_trio.jobs import JobContext, Tool

FIRES = 200
ROUNDS = 5
OVERDUE = 300


class Tick(Tool[str]):
    """The job class the stored heartbeat names; nothing here runs it."""

    async def execute(self, context: JobContext) -> str:
        return "tick"


def _codec() -> HeartbeatCodec:
    """What a dispatcher hands its durable store: every row signed and checked, as in use."""
    return HeartbeatCodec(HeartbeatJobs([Tick]), SigningKey("a benchmark key, never a real one"))


async def _fires(store: HeartbeatStore, fires: int) -> float:
    """Seconds per fire over ``fires`` poll / re-enqueue / peek cycles."""
    spec = ScheduleHeartbeat(Tick, "tick", 0.0, recurrence=FixedInterval(1))
    await store.enqueue(_mint_from(spec, "bench", ScopeGuard()))
    started = time.perf_counter()
    for _ in range(fires):
        due = await store.poll_due(1e12)
        assert due is not None and due.recurrence is not None
        await store.re_enqueue_if_absent(due.next(due.recurrence.next_after(due.run_at)))
        await store.peek_next_run_at()
    elapsed = (time.perf_counter() - started) / fires
    await store.cancel("tick")
    return elapsed


async def _catch_up(store: HeartbeatStore) -> float:
    """Seconds to fire ``OVERDUE`` overdue slots of one heartbeat, back to back."""
    spec = ScheduleHeartbeat(Tick, "late", 0.0, recurrence=FixedInterval(1))
    await store.enqueue(_mint_from(spec, "bench", ScopeGuard()))
    started = time.perf_counter()
    for _ in range(OVERDUE):
        due = await store.poll_due(OVERDUE - 0.5)
        assert due is not None and due.recurrence is not None
        await store.re_enqueue_if_absent(due.next(due.recurrence.next_after(due.run_at)))
    assert await store.poll_due(OVERDUE - 0.5) is None
    return time.perf_counter() - started


async def _measure(url: str) -> dict[str, Any]:
    from nucleo_trio_redis import RedisHeartbeatStore

    results: dict[str, Any] = {}
    for name, build in (
        ("memory", InMemoryHeartbeatStore),
        ("redis", lambda: RedisHeartbeatStore(url, prefix="bench", codec=_codec())),
    ):
        store = build()
        try:
            results[name] = min([await _fires(store, FIRES) for _ in range(ROUNDS)])
            results[f"{name} catch-up"] = await _catch_up(store)
        finally:
            await store.aclose()
    return results


def main() -> None:
    """Start a throwaway redis-server, measure, print."""
    from tests.redis_server import NO_SERVER_REASON, find_binary, running_redis

    binary = find_binary()
    if binary is None:
        sys.exit(NO_SERVER_REASON)
    with running_redis(binary) as server:
        results = trio.run(_measure, server.url)
    print(f"store work per fire (poll, re-enqueue, peek), best of {ROUNDS} x {FIRES}:")
    for name in ("memory", "redis"):
        print(f"  {name:<7} {results[name] * 1000:8.3f} ms")
    print(f"catch-up of {OVERDUE} overdue slots (poll and re-enqueue each):")
    for name in ("memory", "redis"):
        print(f"  {name:<7} {results[f'{name} catch-up'] * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
