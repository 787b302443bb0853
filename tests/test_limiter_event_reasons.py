"""The words a LimiterEvent reports on the bus: its reject reason and its status indicator (OBS-14).

Each refusal is provoked through a running dispatcher, so what is checked is what an observer of
``dispatcher.bus`` receives, not what admission hands its emitter.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    AdmissionClosedError,
    CountingGate,
    ElasticWindow,
    LimiterEventType,
    MemoryPressureGate,
    MemoryReading,
)
from nucleo_trio.admission.memory_gate import throttle_delay_ms
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import JobCancelledError, UncorrectableError, UpstreamFailure
from nucleo_trio.jobs import JobRequirements, workflow

from .jobs_for_tests import Echo

REJECTED = LimiterEventType.REJECTED
REASONS = {"cancelled", "shutdown", "circuit_blocked", "aborted"}
INDICATOR = re.compile(r"blocked|probing|throttle:\d+\.\dx|pace:\d+ms")


class SearchApi(ElasticWindow):
    """A roomy window: its throttle and its circuit are what the test moves."""

    base_window = 1.0
    max_requests = 100


class Buggy(CountingGate):
    """An account with a bug: every question about it raises something no model can read."""

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        raise KeyError("lost state")

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        raise KeyError("lost state")


class Heap:
    """A memory reader stuck at one ratio of 100 GB."""

    def __init__(self, ratio: float) -> None:
        self.set(ratio)

    def set(self, ratio: float) -> None:
        self.used = round(ratio * 100 * 10**9)

    def read(self) -> MemoryReading:
        return MemoryReading(self.used, 100 * 10**9)


def needs(*accounts: Any) -> Any:
    def requirements() -> JobRequirements:
        demand = JobRequirements()
        for account in accounts:
            demand = demand.require_rate_limiter(account)
        return demand

    return requirements


def push_back(window: ElasticWindow, times: int) -> None:
    """``times`` push-backs, each counted as news (one burst's 429s would count once)."""
    failure = UpstreamFailure(status=429, service="search", detail="slow down")
    for _ in range(times):
        before = window.coalesced
        window.on_rate_limit_error(failure)
        if window.coalesced > before:
            window.record_pushback()


async def test_admission_rejects_only_with_its_four_reasons(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-14: a cancel while parked reads "cancelled", a shutdown "shutdown", an account's
    LLM-readable refusal "circuit_blocked", an account's bug "aborted"; no REJECTED event on the
    bus carries any other reason, and no other event carries one."""
    seen: list[ev.LimiterEvent] = []
    slots, api, buggy = CountingGate("slots", 1), SearchApi("search-api"), Buggy("buggy", 1)
    push_back(api, 12)  # the circuit opens
    config = DispatcherConfig(shutdown_timeout=60.0)
    async with open_dispatcher(config) as dispatcher:
        dispatcher.bus.subscribe(seen.append, event_type=ev.LimiterEvent)
        root = workflow("alice", "reasons")
        holder = dispatcher.submit(Echo(root, sleep=10, requirements=needs(slots)))
        cancelled = Echo(root, requirements=needs(slots))
        cancelled_handle = dispatcher.submit(cancelled)
        await trio.testing.wait_all_tasks_blocked()
        assert dispatcher.cancel(cancelled.job_id, "the user went away")
        blocked = dispatcher.submit(Echo(root, requirements=needs(api)))
        aborted = dispatcher.submit(Echo(root, requirements=needs(buggy)))
        stranded = Echo(root, requirements=needs(slots))
        stranded_handle = dispatcher.submit(stranded)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(JobCancelledError):
            await cancelled_handle.result()
        with pytest.raises(UncorrectableError, match="blocked after sustained rate limiting"):
            await blocked.result()
        with pytest.raises(UncorrectableError, match="buggy failed during admission"):
            await aborted.result()
        await dispatcher.shutdown()  # the parked are refused: the stop's reason
    assert await holder.result() == "ok"
    with pytest.raises(AdmissionClosedError):
        await stranded_handle.result()

    rejected = [e for e in seen if e.type is REJECTED]
    by_reason = {e.reject_reason: e for e in rejected}
    assert sorted(e.reject_reason or "" for e in rejected) == sorted(REASONS)
    assert by_reason["cancelled"].snapshot.job_id == cancelled.job_id  # type: ignore[union-attr]
    assert by_reason["shutdown"].snapshot.job_id == stranded.job_id  # type: ignore[union-attr]
    assert by_reason["circuit_blocked"].limiter_name == "search-api"
    assert by_reason["aborted"].limiter_name == "buggy"
    assert by_reason["cancelled"].limiter_name == by_reason["shutdown"].limiter_name == "slots"
    assert all(e.reject_reason is None for e in seen if e.type is not REJECTED)


async def test_the_status_indicator_is_none_when_nominal_else_a_short_word(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-14: a limiter event's status_indicator is None for a nominal account, "throttle:2.0x"
    for a window under push-back, "blocked" for one whose circuit is open and "probing" once
    its single probe is out."""
    seen: list[ev.LimiterEvent] = []
    slots, api = CountingGate("slots", 4), SearchApi("search-api")
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        dispatcher.bus.subscribe(seen.append, event_type=ev.LimiterEvent)
        root = workflow("alice", "indicators")

        async def run(*accounts: Any) -> None:
            handle = dispatcher.submit(Echo(root, requirements=needs(*accounts)))
            with contextlib.suppress(UncorrectableError):  # a refusal is read off the events
                await handle.result()
            await trio.testing.wait_all_tasks_blocked()

        await run(slots, api)
        push_back(api, 1)
        await run(api)
        push_back(api, 11)
        await run(api)
        await trio.sleep(api.cooldown_remaining + 1)
        await run(api)
    shown = [(e.limiter_name, e.type, e.status_indicator) for e in seen if e.limiter_name != "http"]
    assert shown == [
        ("slots", LimiterEventType.GRANTED_IMMEDIATE, None),
        ("search-api", LimiterEventType.GRANTED_IMMEDIATE, None),
        ("slots", LimiterEventType.RELEASED, None),
        ("search-api", LimiterEventType.GRANTED_IMMEDIATE, "throttle:2.0x"),
        ("search-api", REJECTED, "blocked"),
        ("search-api", LimiterEventType.GRANTED_IMMEDIATE, "probing"),
    ]
    assert all(INDICATOR.fullmatch(s) for _, _, s in shown if s is not None)


async def test_a_memory_gate_shows_blocked_then_its_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OBS-14: memory's events read "blocked" while the latch holds its line, then
    "pace:<ms>ms" while the line drains a job at a time, and nothing once it is nominal."""
    seen: list[ev.LimiterEvent] = []
    heap = Heap(0.96)
    memory = MemoryPressureGate(heap)
    slots = CountingGate("slots", 10)
    async with open_dispatcher(DispatcherConfig(), memory=memory) as dispatcher:
        dispatcher.bus.subscribe(seen.append, event_type=ev.LimiterEvent)
        root = workflow("alice", "paced")
        handles = [
            dispatcher.submit(Echo(root, sleep=20, requirements=needs(slots))) for _ in range(3)
        ]
        await trio.sleep(5)
        heap.set(0.89)
        for handle in handles:
            await handle.result()
        assert memory.status_indicator is None
    on_memory = [(e.type, e.status_indicator) for e in seen if e.limiter_name == "memory"]
    pace = f"pace:{throttle_delay_ms(0.89)}ms"
    assert on_memory == [
        (LimiterEventType.HELD, "blocked"),
        (LimiterEventType.HELD, "blocked"),
        (LimiterEventType.HELD, "blocked"),
        (LimiterEventType.GRANTED_FROM_HOLD, pace),
        (LimiterEventType.GRANTED_FROM_HOLD, pace),
        (LimiterEventType.GRANTED_FROM_HOLD, None),
    ]
    assert INDICATOR.fullmatch(pace)
