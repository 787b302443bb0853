"""The Redis heartbeat store against a real redis-server: the store contract, and its own rules.

The contract is the one every shipped store passes (``tests/test_heartbeat_store.py``, HB-13..16
and HB-03): its test functions are imported here and run against
:class:`~nucleo_trio_redis.heartbeat_store.RedisHeartbeatStore` through this module's ``store``
fixture. Each test gets a key prefix of its own on the session's server.

The store's own rules follow, with two or three stores on one prefix standing for as many
workers: a claimed slot is nobody else's, a fired slot never fires again, a claim that runs out
(on Redis's clock, so these waits are real and short) goes to another worker, a claim whose
answer was lost is let go, and what a worker owes Redis when it goes away is written when it is
back. Redis going away is a real server stopped and started again.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import coredis
import pytest
import trio
from nucleo_trio_redis.heartbeat_store import RedisHeartbeatStore

from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.errors import ConfigError, NucleoSystemError
from nucleo_trio.heartbeat import FixedInterval, HeartbeatStore, heartbeat_now

from . import test_heartbeat_store as contract
from .redis_server import running_redis
from .test_heartbeat_store import beat

# The contract, run here against this module's `store` fixture.
test_poll_due_answers_the_most_overdue_first_and_never_a_future_one = (
    contract.test_poll_due_answers_the_most_overdue_first_and_never_a_future_one
)
test_entries_due_at_one_instant_come_out_by_id = (
    contract.test_entries_due_at_one_instant_come_out_by_id
)
test_rebind_displaces_and_cancel_removes = contract.test_rebind_displaces_and_cancel_removes
test_the_recurrence_compare_and_set_yields_to_a_competing_rebind = (
    contract.test_the_recurrence_compare_and_set_yields_to_a_competing_rebind
)
test_head_changes_fire_the_listener = contract.test_head_changes_fire_the_listener
test_a_listener_that_raises_is_logged_and_the_others_still_run = (
    contract.test_a_listener_that_raises_is_logged_and_the_others_still_run
)
test_a_forged_heartbeat_cannot_be_enqueued = contract.test_a_forged_heartbeat_cannot_be_enqueued

_PREFIXES = itertools.count()


def fresh_prefix(name: str) -> str:
    return f"test-hb-{name}-{next(_PREFIXES)}"


@pytest.fixture
async def store(
    redis_server: Any, request: pytest.FixtureRequest
) -> AsyncIterator[RedisHeartbeatStore]:
    built = RedisHeartbeatStore(
        redis_server.url,
        prefix=fresh_prefix(request.node.name),
        claim_ttl=300,
        codec=contract.codec(),
    )
    yield built
    await built.aclose()


def stores(url: str, count: int, **settings: Any) -> list[RedisHeartbeatStore]:
    """``count`` stores on one fresh prefix: as many workers sharing one schedule."""
    prefix = fresh_prefix("workers")
    return [
        RedisHeartbeatStore(url, prefix=prefix, codec=contract.codec(), **settings)
        for _ in range(count)
    ]


async def fired_mark(url: str, store: RedisHeartbeatStore, heartbeat_id: str) -> float | None:
    """The latest run instant of ``heartbeat_id`` Redis has recorded as fired."""
    client: coredis.Redis[str] = coredis.Redis.from_url(url, decode_responses=True)
    async with client:
        mark = await client.hget(store.keys[4], heartbeat_id)
    return None if mark is None else float(mark)


async def test_a_claimed_slot_is_nobody_elses_until_its_fire_is_recorded(redis_server: Any) -> None:
    """A slot one worker polled is claimed: another worker's poll passes it by, and its peek
    answers when the claim would run out; once the fire is recorded with the next slot, that
    next slot is anyone's."""
    first, second = stores(redis_server.url, 2, claim_ttl=300)
    await first.enqueue(beat("x", 10.0, recurrence=FixedInterval(10)))
    taken = await first.poll_due(15.0)
    assert taken is not None and taken.run_at == 10.0
    assert await second.poll_due(15.0) is None, "x is claimed by the first worker"
    assert await second.inspect() == ()
    wake = await second.peek_next_run_at()
    assert wake is not None and 299 < wake - heartbeat_now() <= 300
    assert await first.re_enqueue_if_absent(taken.next(20.0)) is True
    assert await fired_mark(redis_server.url, first, "x") == 10.0
    following = await second.poll_due(25.0)
    assert following is not None and following.run_at == 20.0
    for store in (first, second):
        await store.aclose()


async def test_a_fired_slot_never_fires_again(redis_server: Any) -> None:
    """Republishing a schedule whose first slots fired (a worker's boot code at its start) skips
    them: a recurring heartbeat moves on to its first slot after the last fire, a one-shot one
    is dropped; a later instant of the same id fires as usual."""
    first, second = stores(redis_server.url, 2, claim_ttl=300)
    every_ten = FixedInterval(10)
    await first.enqueue(beat("x", 10.0, recurrence=every_ten))
    taken = await first.poll_due(35.0)
    assert taken is not None and taken.run_at == 10.0
    assert await first.re_enqueue_if_absent(taken.next(20.0)) is True

    displaced = await second.enqueue(beat("x", 10.0, recurrence=every_ten))  # the same boot code
    assert displaced is not None and displaced.run_at == 20.0
    again = await second.poll_due(35.0)
    assert again is not None and again.run_at == 20.0, "the slot at 10 already fired"
    assert await second.re_enqueue_if_absent(again.next(30.0)) is True

    await first.enqueue(beat("once", 5.0))
    assert (await first.poll_due(6.0)) is not None
    assert await first.peek_next_run_at() == 30.0  # the firing task came back: recorded
    assert await first.cancel("x") is not None
    await second.enqueue(beat("once", 5.0))
    assert await first.poll_due(100.0) is None, "the one-shot slot at 5 fired already"
    assert [heartbeat.id for heartbeat in await first.inspect()] == []
    await second.enqueue(beat("once", 50.0))
    later = await first.poll_due(100.0)
    assert later is not None and later.run_at == 50.0
    for store in (first, second):
        await store.aclose()


async def test_a_claim_that_runs_out_goes_to_another_worker(
    redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that claims a slot and never records it (it died mid-fire) loses the claim
    after claim_ttl on Redis's clock; the next poll on another worker takes the slot, with a
    warning. Should the first one come back and record its fire after all, it is told."""
    dead, alive = stores(redis_server.url, 2, claim_ttl=0.2)
    await dead.enqueue(beat("x", 1.0, recurrence=FixedInterval(1)))
    claimed = await dead.poll_due(1.5)
    assert claimed is not None
    assert await alive.poll_due(1.5) is None
    wake = await alive.peek_next_run_at()
    assert wake is not None and wake - heartbeat_now() <= 0.2
    await trio.sleep(0.3)
    with caplog.at_level(logging.WARNING, logger="nucleo_trio_redis.heartbeat"):
        recovered = await alive.poll_due(1.5)
        assert recovered is not None and recovered.run_at == 1.0
        assert "ran out before its fire was recorded" in caplog.text
        assert await alive.re_enqueue_if_absent(recovered.next(2.0)) is True
        assert await dead.re_enqueue_if_absent(claimed.next(2.0)) is False
        assert "another worker may have fired it too" in caplog.text
    assert [heartbeat.run_at for heartbeat in await alive.inspect()] == [2.0]
    for store in (dead, alive):
        await store.aclose()


class ReplyCutter:
    """A TCP relay in front of Redis that, once armed, passes the next script call on to Redis
    and then cuts the connection before the answer comes back: a reply lost on the wire."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.armed = False
        self.cut = trio.Event()
        self.url = ""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = f"redis://127.0.0.1:{listeners[0].socket.getsockname()[1]}/0"
        task_status.started()
        await trio.serve_listeners(self._relay, listeners)

    async def _relay(self, client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", self.port)
        async with client, server, trio.open_nursery() as nursery:
            cutting = False

            async def upstream() -> None:
                nonlocal cutting
                async for chunk in client:
                    if self.armed and b"EVALSHA" in chunk.upper():
                        self.armed = False
                        cutting = True  # from now on nothing Redis answers gets through
                    await server.send_all(chunk)
                    if cutting:
                        await trio.sleep(0.05)  # Redis runs the script meanwhile
                        self.cut.set()
                        nursery.cancel_scope.cancel()
                        return

            async def downstream() -> None:
                async for chunk in server:
                    if not cutting:
                        await client.send_all(chunk)

            nursery.start_soon(upstream)
            nursery.start_soon(downstream)


async def test_a_claim_whose_answer_was_lost_is_let_go(
    redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A poll whose answer is lost on the wire may still have claimed a slot on Redis; the
    store's next operation lets that claim go, so the slot is on the schedule again at once
    instead of after the claim's TTL."""
    cutter = ReplyCutter(redis_server.port)
    async with trio.open_nursery() as nursery:
        await nursery.start(cutter.serve)
        prefix = fresh_prefix("cut")
        store = RedisHeartbeatStore(
            cutter.url, prefix=prefix, claim_ttl=300, codec=contract.codec()
        )
        direct = RedisHeartbeatStore(
            redis_server.url, prefix=prefix, claim_ttl=300, codec=contract.codec()
        )
        assert await store.poll_due(2.0) is None  # the poll script is known to Redis now
        await store.enqueue(beat("x", 1.0))
        cutter.armed = True
        with pytest.raises(NucleoSystemError, match="Redis at redis://127.0.0.1:.*polling failed"):
            await store.poll_due(2.0)
        assert cutter.cut.is_set()
        assert await direct.inspect() == (), "the poll whose answer was lost claimed x"
        assert await direct.poll_due(2.0) is None, "and the claim holds"
        with caplog.at_level(logging.WARNING, logger="nucleo_trio_redis.heartbeat"):
            assert await store.peek_next_run_at() == 1.0
        assert "a claim whose answer was lost" in caplog.text
        again = await direct.poll_due(2.0)
        assert again is not None and again.id == "x"
        for each in (store, direct):
            await each.aclose()
        nursery.cancel_scope.cancel()


async def test_losing_redis_is_an_error_naming_it_and_nothing_owed_is_lost(
    redis_binary: str,
) -> None:
    """With Redis stopped, an operation fails with a system error naming Redis, its address
    (no password) and the operation. A fire the Heart could not record, with its next slot, is
    written when Redis is back, before anything else: the next slot is on the schedule and the
    fired slot does not fire again."""
    with running_redis(redis_binary, persistent=True) as server:
        worker, other = stores(server.url, 2, claim_ttl=300, timeout=2)
        await worker.enqueue(beat("x", 1.0, recurrence=FixedInterval(1)))
        taken = await worker.poll_due(1.5)
        assert taken is not None
        server.stop()
        where = f"Redis at redis://127.0.0.1:{server.port}/0"
        with pytest.raises(
            NucleoSystemError, match=f"{where}: recording the fire of heartbeat 'x'"
        ):
            await worker.re_enqueue_if_absent(taken.next(2.0))
        with pytest.raises(NucleoSystemError, match=f"{where}: reading the schedule failed"):
            await other.inspect()
        hidden = RedisHeartbeatStore(f"redis://:s3cret@127.0.0.1:{server.port}/0", timeout=2)
        with pytest.raises(NucleoSystemError, match=r"redis://:\*\*\*@127.0.0.1") as caught:
            await hidden.peek_next_run_at()
        assert "s3cret" not in str(caught.value)
        server.start()
        assert await worker.peek_next_run_at() == 2.0  # the owed record went first
        assert await fired_mark(server.url, worker, "x") == 1.0
        await other.enqueue(beat("x", 1.0, recurrence=FixedInterval(1)))  # republished
        following = await other.poll_due(2.5)
        assert following is not None and following.run_at == 2.0
        for store in (worker, other, hidden):
            await store.aclose()


async def test_a_restart_of_redis_is_not_counted_against_a_claim(
    redis_binary: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim granted before Redis restarted gets a whole claim_ttl from the restart: the
    downtime was not its holder's, so nobody takes the slot over while the holder records it."""
    with running_redis(redis_binary, persistent=True) as server:
        holder, other = stores(server.url, 2, claim_ttl=0.4)
        await holder.enqueue(beat("x", 1.0, recurrence=FixedInterval(1)))
        taken = await holder.poll_due(1.5)
        assert taken is not None
        server.stop()
        await trio.sleep(0.5)  # longer than the claim's TTL
        server.start()
        with caplog.at_level(logging.WARNING, logger="nucleo_trio_redis.heartbeat"):
            assert await other.poll_due(1.5) is None, "the claim lives on after the restart"
            assert await holder.re_enqueue_if_absent(taken.next(2.0)) is True
        assert caplog.records == []
        following = await other.poll_due(2.5)
        assert following is not None and following.run_at == 2.0
        for store in (holder, other):
            await store.aclose()


async def test_bad_settings_are_refused_by_name(redis_server: Any) -> None:
    """A missing or unknown setting, a URL that is not Redis's, a prefix that cannot be a hash
    tag, a TTL or timeout that is not a positive number of seconds, and a poll instant that is
    not finite are refused, each naming what is wrong; a closed store refuses to work."""
    with pytest.raises(ValueError, match="needs the setting 'url'"):
        RedisHeartbeatStore.from_settings({})
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['ttl'\]; known: url, prefix"):
        RedisHeartbeatStore.from_settings({"url": redis_server.url, "ttl": 3})
    with pytest.raises(ValueError, match="needs a Redis URL"):
        RedisHeartbeatStore(" ")
    with pytest.raises(ValueError, match="must start redis://"):
        RedisHeartbeatStore("http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="prefix must be a non-blank string without braces"):
        RedisHeartbeatStore(redis_server.url, prefix="{beats}")
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="claim_ttl must be a positive, finite number"):
            RedisHeartbeatStore(redis_server.url, claim_ttl=bad)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, got bool"):
        RedisHeartbeatStore(redis_server.url, timeout=True)
    with pytest.raises(TypeError, match="claim_ttl must be a number of seconds, got str"):
        RedisHeartbeatStore.from_settings({"url": redis_server.url, "claim_ttl": "30"})

    (store,) = stores(redis_server.url, 1)
    with pytest.raises(ValueError, match="poll_due needs a finite instant, got nan"):
        await store.poll_due(math.nan)
    with pytest.raises(TypeError, match="poll_due needs an instant in epoch seconds, got '1'"):
        await store.poll_due("1")  # type: ignore[arg-type]
    await store.aclose()
    with pytest.raises(RuntimeError, match="is closed"):
        await store.peek_next_run_at()
    assert "closed" in repr(store) and "prefix='test-hb-workers" in repr(store)


async def test_listeners_hear_other_workers_changes_and_the_return_of_redis(
    redis_binary: str,
) -> None:
    """A listener hears a head change another store makes (on the ``changed`` channel), not
    the echo of its own store's changes twice, and is told once more when the subscription
    comes back after Redis restarted (whatever changed meanwhile went unheard)."""
    with running_redis(redis_binary, persistent=True) as server:
        listening, other = stores(server.url, 2, claim_ttl=300, timeout=2)
        heard: list[float] = []
        told = trio.Event()

        def listener() -> None:
            heard.append(trio.current_time())
            told.set()

        listening.on_change(listener)
        await trio.sleep(0.2)  # the subscription is up
        await other.enqueue(beat("x", 10.0))
        with trio.fail_after(5):
            await told.wait()
        assert len(heard) == 1
        await listening.enqueue(beat("y", 5.0))  # its own change: told once, at once
        await trio.sleep(0.2)
        assert len(heard) == 2

        told = trio.Event()
        server.stop()
        server.start()
        with trio.fail_after(5):
            await told.wait()
        assert len(heard) == 3
        for store in (listening, other):
            await store.aclose()


async def test_the_kind_is_chosen_by_configuration_and_bad_settings_stop_the_start(
    redis_server: Any,
) -> None:
    """``heartbeat = {kind = "redis", settings = {...}}`` gives a dispatcher this store (the
    plugin answers the hook); a missing URL or a bad TTL stops the start with a ConfigError
    naming the kind and what is wrong."""
    config = DispatcherConfig.from_mapping(
        {
            "heartbeat": {
                "kind": "redis",
                "settings": {"url": redis_server.url, "claim_ttl": 5},
                "signing_key": "a test key, never a real one",
            }
        }
    )
    async with open_dispatcher(config) as dispatcher:
        assert dispatcher.heart is not None
        store = dispatcher.heart.store
        assert isinstance(store, RedisHeartbeatStore) and store.claim_ttl == 5.0
        assert isinstance(store, HeartbeatStore)
    with pytest.raises(ConfigError, match="kind 'redis'.*needs the setting 'url'"):
        async with open_dispatcher(DispatcherConfig(heartbeat=HeartbeatConfig(kind="redis"))):
            pass
    bad = HeartbeatConfig(kind="redis", settings={"url": redis_server.url, "claim_ttl": -1})
    with pytest.raises(ConfigError, match="claim_ttl must be a positive, finite number"):
        async with open_dispatcher(DispatcherConfig(heartbeat=bad)):
            pass
