"""Closing a JSON lines sink while its bus runs: ``aclose()`` writes every event published
before it, then closes; a subscription says when it has delivered all it ever will."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from nucleo_trio.bus import MessageBus, SchedulerEvent, SchedulerEventType
from nucleo_trio.bus.bus import DELIVERY_BATCH
from nucleo_trio.observability import JsonLinesSink


def _event(number: int) -> SchedulerEvent:
    return SchedulerEvent(type=SchedulerEventType.STARTED, message=f"event {number}")


def _messages(path: Path) -> list[str]:
    return [json.loads(line)["message"] for line in path.read_text("utf-8").splitlines()]


async def test_aclose_writes_every_event_published_before_it(tmp_path: Path) -> None:
    """Published in one step, more than two batches of them, then closed at once: each one is
    in the file, in order, and the bus runs on without the sink."""
    path = tmp_path / "events.jsonl"
    count = 2 * DELIVERY_BATCH + DELIVERY_BATCH // 2
    async with trio.open_nursery() as nursery:
        bus = MessageBus()
        await nursery.start(bus.run)
        sink = JsonLinesSink(path)
        subscription = sink.attach(bus)
        for number in range(count):
            bus.publish(_event(number))
        assert subscription.backlog == count
        await sink.aclose()
        assert sink.written == count
        assert _messages(path) == [f"event {number}" for number in range(count)]
        assert not subscription.is_active
        bus.publish(_event(count))  # after the close: nothing reaches the sink
        await bus.stop()
    assert len(_messages(path)) == count


async def test_leaving_async_with_drains_a_sink_subscribed_directly(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    async with trio.open_nursery() as nursery:
        bus = MessageBus()
        await nursery.start(bus.run)
        async with JsonLinesSink(path) as sink:
            bus.subscribe(sink)  # not through attach: the sink keeps it all the same
            for number in range(3):
                bus.publish(_event(number))
        assert _messages(path) == ["event 0", "event 1", "event 2"]
        with pytest.raises(RuntimeError, match="is closed"):
            sink.write(_event(3))
        await sink.aclose()  # a second close does nothing
        await bus.stop()


async def test_aclose_returns_at_once_on_a_bus_that_never_started(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = JsonLinesSink(path)
    subscription = sink.attach(MessageBus())
    with trio.fail_after(1):
        await sink.aclose()
    assert path.read_text("utf-8") == ""
    with trio.fail_after(1):
        await subscription.wait_drained()


async def test_aclose_after_the_bus_stopped_finds_nothing_left(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    async with trio.open_nursery() as nursery:
        bus = MessageBus()
        await nursery.start(bus.run)
        sink = JsonLinesSink(path)
        sink.attach(bus)
        bus.publish(_event(0))
        await bus.stop()
    with trio.fail_after(1):
        await sink.aclose()
    assert _messages(path) == ["event 0"]


async def test_a_cancelled_aclose_still_closes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    async with trio.open_nursery() as nursery:
        bus = MessageBus()
        await nursery.start(bus.run)
        sink = JsonLinesSink(path)
        subscription = sink.attach(bus)
        bus.publish(_event(0))
        with trio.CancelScope() as scope:
            scope.cancel()
            await sink.aclose()
        assert repr(sink).endswith("closed>")
        assert not subscription.is_active
        await bus.stop()  # the queued event meets a closed sink: the bus logs it


async def test_wait_drained_waits_while_the_subscription_is_active(autojump_clock: Any) -> None:
    heard: list[Any] = []
    async with trio.open_nursery() as nursery:
        bus = MessageBus()
        await nursery.start(bus.run)
        subscription = bus.subscribe(heard.append)
        with trio.move_on_after(10) as waited:
            await subscription.wait_drained()
        assert waited.cancelled_caught
        bus.publish(_event(0))
        subscription.unsubscribe()
        await subscription.wait_drained()
        assert len(heard) == 1
        await bus.stop()
