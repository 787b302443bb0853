"""A hub's life on a real redis-server: a fresh reading on demand, a configured account's hub
that ends with its dispatcher, and what leaves ``async with RedisAccounts(...)``.

Redis's clock is real, so these run on the real clock and bound every wait. Each test keeps its
keys under a namespace of its own.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

import coredis
import pytest
import trio
from nucleo_trio_redis import RedisAccounts, SharedCountingGate

from nucleo_trio import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.config import LimiterConfig
from nucleo_trio.jobs import JobRequirements, workflow

from .jobs_for_tests import Fn


def _ns() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


async def _holds(url: str, gate: SharedCountingGate) -> bool:
    """Whether Redis keeps a holder record (a lease, permits) for the gate's worker."""
    client = coredis.Redis.from_url(url, decode_responses=True)
    async with client:
        return bool(await client.hexists(gate.keys[1], f"h:{gate.hub.worker}"))


async def _until(check: Callable[[], object], *, limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        # what is watched (a take that waits for a lease) has no wake-up of its own here
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def _nothing(context: Any) -> None:
    return None


def _free_port_url() -> str:
    with socket.socket() as probe:  # a free port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


# -- a configured account's hub ends with its dispatcher ---------------------------------------


async def test_a_configured_accounts_hub_gives_its_lease_back_when_the_dispatcher_closes(
    redis_server: Any,
) -> None:
    """The hub that starts itself for a configured account stops with the dispatcher that
    built it: once ``open_dispatcher`` is left, Redis holds nothing for that worker, while the
    trio run goes on."""
    ns = _ns()
    config = DispatcherConfig(
        health_every=None,
        limiters={
            "slots": LimiterConfig(
                kind="redis_counting",
                settings={
                    "url": redis_server.url,
                    "namespace": ns,
                    "worker": "configured",
                    "capacity": 4,
                    "lease_ttl": 30.0,
                },
            )
        },
    )
    async with open_dispatcher(config) as dispatcher:
        gate = dispatcher.limiters["slots"]
        assert isinstance(gate, SharedCountingGate)
        handle = dispatcher.submit(
            Fn(
                workflow("alice", "configured"),
                _nothing,
                requirements=lambda: JobRequirements().require_rate_limiter(gate, 2),
                timeout=10.0,
            )
        )
        with trio.fail_after(5):
            await handle.result()
        assert await _holds(redis_server.url, gate)  # the permits came back as spare
    assert not await _holds(redis_server.url, gate)
    assert gate.lease == (0.0, 0.0)


async def test_closing_an_account_of_your_own_hub_leaves_the_hub_running(
    redis_server: Any,
) -> None:
    async with RedisAccounts(redis_server.url, namespace=_ns(), worker="mine") as hub:
        gate = hub.counting_gate("slots", 2)
        await _until(lambda: gate.try_take([None], []))
        await gate.aclose()
        assert await _holds(redis_server.url, gate)
        gate.give([None])


async def test_aclose_stops_a_running_hub_and_gives_back(redis_server: Any) -> None:
    async with RedisAccounts(redis_server.url, namespace=_ns(), worker="w") as hub:
        gate = hub.counting_gate("slots", 2)
        await _until(lambda: gate.try_take([None], []))
        gate.give([None])
        assert await _holds(redis_server.url, gate)
        with trio.fail_after(5):
            await hub.aclose()
        assert not await _holds(redis_server.url, gate)
        await hub.aclose()  # a second close returns at once


async def test_aclose_stops_a_hub_that_started_itself(redis_server: Any) -> None:
    hub = RedisAccounts(redis_server.url, namespace=_ns(), worker="auto")
    gate = hub.counting_gate("slots", 2)
    await _until(lambda: gate.try_take([None], []))  # the first ask starts the hub
    gate.give([None])
    assert await _holds(redis_server.url, gate)
    with trio.fail_after(5):
        await hub.aclose()
    assert not await _holds(redis_server.url, gate)
    gate.fits([None], [])  # asked again: a closed hub does not start itself again
    await trio.sleep(0.2)
    assert not await _holds(redis_server.url, gate)


# -- a fresh reading --------------------------------------------------------------------------


async def test_fresh_status_shows_what_another_worker_took_since_the_last_settle(
    redis_server: Any,
) -> None:
    ns = _ns()
    async with (
        RedisAccounts(redis_server.url, namespace=ns, worker="w1") as one,
        RedisAccounts(redis_server.url, namespace=ns, worker="w2") as two,
    ):
        mine, theirs = one.counting_gate("db", 8), two.counting_gate("db", 8)
        with trio.fail_after(5):
            await mine.wait_ready()
        await _until(lambda: theirs.try_take([3], []))
        assert mine.status().used == 0  # as the last settle left it
        trips = one.round_trips
        with trio.fail_after(5):
            fresh = await mine.fresh_status()
        assert fresh.used >= 3, fresh
        assert fresh.redis == "ok"
        assert one.round_trips >= trips + 1
        theirs.give([3])


async def test_settle_now_settles_a_hub_that_is_not_running_on_its_own_connection(
    redis_server: Any,
) -> None:
    ns = _ns()
    async with RedisAccounts(redis_server.url, namespace=ns, worker="w2") as two:
        theirs = two.counting_gate("db", 8)
        await _until(lambda: theirs.try_take([2], []))
        by_hand = RedisAccounts(redis_server.url, namespace=ns, worker="w1", autostart=False)
        mine = by_hand.counting_gate("db", 8)
        assert mine.status().redis == "connecting"
        with trio.fail_after(5):
            await by_hand.settle_now()
        assert mine.status().used >= 2
        assert by_hand.round_trips == 1
        with pytest.raises(RuntimeError, match="settle_now"):
            async with by_hand:
                await by_hand.settle_once()
        theirs.give([2])


async def test_settle_now_starts_a_hub_that_starts_itself(redis_server: Any) -> None:
    hub = RedisAccounts(redis_server.url, namespace=_ns(), worker="auto")
    gate = hub.counting_gate("slots", 2)
    with trio.fail_after(5):
        await hub.settle_now()
    assert gate.status().redis == "ok"
    await hub.aclose()


async def test_settle_now_returns_when_redis_is_out_of_reach() -> None:
    async with RedisAccounts(_free_port_url(), namespace=_ns(), worker="w", timeout=1.0) as hub:
        gate = hub.counting_gate("slots", 2)
        with trio.fail_after(5):
            status = await gate.fresh_status()
        assert status.redis.startswith("lost: "), status
        with trio.fail_after(5):
            await hub.settle_now()  # during the reconnect backoff too


# -- what leaves async with RedisAccounts(...) ------------------------------------------------


async def test_an_error_inside_the_hubs_block_comes_out_as_itself(redis_server: Any) -> None:
    with pytest.raises(KeyError) as caught:
        async with RedisAccounts(redis_server.url, namespace=_ns(), worker="w") as hub:
            gate = hub.counting_gate("slots", 2)
            await _until(lambda: gate.try_take([None], []))
            gate.give([None])
            raise KeyError("mine")
    assert type(caught.value) is KeyError
    assert not await _holds(redis_server.url, gate)  # the leases went back all the same


async def test_a_cancellation_of_the_hubs_block_is_caught_by_its_own_scope(
    redis_server: Any,
) -> None:
    with trio.move_on_after(0.2) as scope:
        async with RedisAccounts(redis_server.url, namespace=_ns(), worker="w"):
            await trio.sleep_forever()
    assert scope.cancelled_caught


async def test_a_failure_of_the_settling_task_comes_out_as_itself(redis_server: Any) -> None:
    hub = RedisAccounts(redis_server.url, namespace=_ns(), worker="w")

    async def broken(client: Any, keys: Any, args: Any) -> Any:
        raise RuntimeError("the script broke")

    hub._eval = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="the script broke") as caught:
        async with hub:
            gate = hub.counting_gate("slots", 2)
            gate.fits([None], [])  # noted: the hub settles, and its task fails
            await trio.sleep_forever()
    assert type(caught.value) is RuntimeError
