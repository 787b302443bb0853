"""Shared accounts on a real redis-server: quotas across dispatchers, leases, reservations,
Redis going away, configuration.

Redis's clock is real, so these tests run on the real clock with small windows and lease
lifetimes (a second or two) and bound every wait. Each test keeps its keys under a namespace of
its own; the tests that stop or kill Redis start a server of their own.
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import Callable
from typing import Any

import coredis
import pytest
import trio
import trio.lowlevel
import trio.testing
from nucleo_trio_redis import (
    RedisAccounts,
    RedisUnavailableError,
    SharedAccount,
    SharedCountingGate,
)

from nucleo_trio import DispatcherConfig, open_dispatcher
from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch.config import LimiterConfig
from nucleo_trio.errors import ConfigError
from nucleo_trio.jobs import JobRequirements, workflow
from nucleo_trio.observability.health import capture_health

from .jobs_for_tests import Fn
from .redis_server import running_redis


def _ns() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


async def _log(url: str, account: SharedAccount) -> list[tuple[float, str, dict[str, str]]]:
    """The account's grant log: (Redis time in s, kind, fields)."""
    key = account.grant_log_key
    assert key is not None
    client = coredis.Redis.from_url(url, decode_responses=True)
    async with client:
        entries = await client.xrange(key)
    rows = []
    for entry in entries:
        fields = {str(name): str(value) for name, value in entry.field_values.items()}
        rows.append((int(str(entry.identifier).split("-")[0]) / 1000, fields["kind"], fields))
    return rows


def _worst_window(points: list[tuple[float, float]], span: float) -> float:
    """The largest net amount inside any window of ``span`` seconds starting at a point."""
    points = sorted(points)
    worst = 0.0
    for i, (start, _) in enumerate(points):
        total = 0.0
        for when, amount in points[i:]:
            if when > start + span:
                break
            total += amount
            worst = max(worst, total)
    return worst


async def _run_jobs(
    dispatcher: Any,
    count: int,
    requirements: Callable[[], JobRequirements],
    body: Callable[[Any], Any],
) -> list[Any]:
    root = workflow("alice", "shared")
    return [
        dispatcher.submit(Fn(root, body, requirements=requirements, timeout=30.0))
        for _ in range(count)
    ]


async def _two_workers(
    url: str, make: Callable[[RedisAccounts], SharedAccount], duration: float
) -> tuple[list[float], float, list[tuple[float, str, dict[str, str]]], int]:
    """Two workers (a hub and a dispatcher each) in one run, each submitting 20 jobs that need
    the shared account for ``duration`` seconds: the jobs' start instants, the first start, the
    grant log the script kept, and the round trips both hubs made."""
    ns = _ns()
    starts: list[float] = []

    async def job(context: Any) -> None:
        starts.append(trio.current_time())

    async with (
        RedisAccounts(url, namespace=ns, worker="w1", lease_ttl=2.0) as one,
        RedisAccounts(url, namespace=ns, worker="w2", lease_ttl=2.0) as two,
    ):
        accounts = [make(hub) for hub in (one, two)]
        config = DispatcherConfig(health_every=None)
        async with open_dispatcher(config) as first, open_dispatcher(config) as second:
            began = trio.current_time()
            with trio.move_on_after(duration):
                for dispatcher, account in zip((first, second), accounts, strict=True):
                    amount = 1 if account.kind == "bucket" else None
                    await _run_jobs(dispatcher, 20, _needs(account, amount), job)
                await trio.sleep_forever()
        log = await _log(url, accounts[0])
    return starts, began, log, one.round_trips + two.round_trips


def _needs(account: SharedAccount, amount: Any) -> Callable[[], JobRequirements]:
    return lambda: JobRequirements().require_rate_limiter(account, amount)


def _net(log: list[tuple[float, str, dict[str, str]]]) -> list[tuple[float, float]]:
    return [
        (when, float(fields["requests"]) * (-1 if kind == "return" else 1))
        for when, kind, fields in log
    ]


async def test_two_dispatchers_on_one_bucket_never_exceed_the_quota(redis_server: Any) -> None:
    """Two workers draw on one bucket of 120 requests a minute with a burst of 4: the starts
    the workers see, and the grant log the script keeps, never hold more than
    ``burst + rate * T`` in any ``T`` seconds, and the quota is used."""
    rate, burst = 2.0, 4
    starts, began, log, trips = await _two_workers(
        redis_server.url,
        lambda hub: hub.token_bucket("quota", rpm=120, tpm=1_000_000, burst=burst, grant_log=True),
        2.5,
    )
    # contended, every ask goes through Redis's line; waiting never turns into polling
    assert trips <= 6 * len(starts), f"{trips} round trips for {len(starts)} grants"
    for span in (0.5, 1.0, 2.0):
        allowed = burst + rate * span
        local = _worst_window([(s, 1.0) for s in starts], span)
        assert local <= allowed + 0.01, f"{local} starts in {span}s; at most {allowed} allowed"
        logged = _worst_window(_net(log), span)
        assert logged <= allowed + 1e-6, f"{logged} leased in {span}s; at most {allowed}"
    possible = burst + rate * (max(starts) - began)
    assert len(starts) >= 0.75 * possible, f"only {len(starts)} of {possible:.1f} were used"


async def test_two_dispatchers_on_one_window_never_exceed_its_count(redis_server: Any) -> None:
    """Two workers on one window of 4 requests a second: no second holds more than 4 starts or
    4 net leased slots, and the window is used."""
    starts, began, log, trips = await _two_workers(
        redis_server.url,
        lambda hub: hub.elastic_window("search", max_requests=4, window=1.0, grant_log=True),
        2.5,
    )
    assert trips <= 6 * len(starts), f"{trips} round trips for {len(starts)} grants"
    assert _worst_window([(s, 1.0) for s in starts], 1.0 - 0.01) <= 4
    assert _worst_window(_net(log), 1.0 - 0.01) <= 4
    possible = 4 * math.ceil(max(starts) - began)
    assert len(starts) >= 0.6 * possible, f"only {len(starts)} of {possible} were used"


async def test_leases_go_back_on_close_and_a_crashed_workers_permits_return_within_the_ttl(
    redis_server: Any,
) -> None:
    """A worker that leaves gives its spare back at once; a worker that dies holding permits
    (its run cancelled, no give-back) keeps them for the lease lifetime, never less, and then
    the other worker gets them."""
    ns, ttl = _ns(), 1.5
    async with RedisAccounts(
        redis_server.url, namespace=ns, worker="other", lease_ttl=ttl
    ) as other:
        gate = other.counting_gate("slots", 2, grant_log=True)
        # A polite worker leases, takes and gives back, then leaves: the gate is whole again.
        async with RedisAccounts(redis_server.url, namespace=ns, worker="polite") as polite:
            theirs = polite.counting_gate("slots", 2)
            await _until(lambda: theirs.try_take([2], []))
            theirs.give([2])
        await _until(lambda: other.accounts["slots"].fits([2], []))
        assert gate.try_take([2], []) is True
        gate.give([2])
        await _until(lambda: gate.lease == (0.0, 0.0), limit=ttl)  # idle spare goes back
        # A worker that dies holding both permits: nothing comes back before its lease lifetime.
        dead = RedisAccounts(redis_server.url, namespace=ns, worker="dead", lease_ttl=ttl)
        doomed = dead.counting_gate("slots", 2)

        async def no_give_back() -> None:
            return None

        dead._give_back = no_give_back  # type: ignore[method-assign] # the process dies here
        async with trio.open_nursery() as nursery:
            await nursery.start(dead.run)
            await _until(lambda: doomed.try_take([2], []))
            nursery.cancel_scope.cancel()
        died = trio.current_time()
        assert gate.fits([None], []) is False
        await _until(lambda: gate.try_take([None], []), limit=ttl + 2.0)
        waited = trio.current_time() - died
        assert waited >= ttl - 0.5 * ttl / 3 - 0.05, f"permits came back after {waited:.2f}s"
        gate.give([None])
    kinds = [kind for _, kind, _ in await _log(redis_server.url, gate)]
    assert "expire" in kinds, kinds


async def _until(check: Callable[[], object], *, limit: float = 5.0) -> None:
    """Wait (on wake-ups, checking every 10 ms) until ``check()`` is true, at most ``limit``."""
    with trio.fail_after(limit):
        # what these tests watch (a lease given back, a throttle read at a settle) has no
        # wake-up of its own to wait on: a short, bounded poll
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def _nothing(context: Any) -> None:
    return None


async def test_the_longest_waiting_demand_is_not_starved_by_small_ones_from_another_worker(
    redis_server: Any,
) -> None:
    """A worker asking for the whole gate gets it although another worker keeps taking and
    giving single permits: its reservation in Redis holds the other worker's new takes back."""
    ns = _ns()
    async with (
        RedisAccounts(redis_server.url, namespace=ns, worker="big", lease_ttl=2.0) as big_hub,
        RedisAccounts(redis_server.url, namespace=ns, worker="small", lease_ttl=2.0) as small_hub,
    ):
        big = big_hub.counting_gate("gate", 4)
        small = small_hub.counting_gate("gate", 4)
        config = DispatcherConfig(health_every=None)
        granted: list[float] = []
        async with open_dispatcher(config) as mine, open_dispatcher(config) as theirs:

            async def short(context: Any) -> None:
                await trio.sleep(0.05)

            async def whole(context: Any) -> None:
                granted.append(trio.current_time())

            stop = trio.Event()

            async def stream() -> None:
                root = workflow("bob", "small")
                while not stop.is_set():
                    handles = [
                        theirs.submit(
                            Fn(
                                root,
                                short,
                                requirements=lambda: JobRequirements().require_rate_limiter(
                                    small, None
                                ),
                            )
                        )
                        for _ in range(3)
                    ]
                    for handle in handles:
                        await handle.result()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream)
                await trio.sleep(0.3)  # the stream is flowing
                asked = trio.current_time()
                handle = mine.submit(
                    Fn(
                        workflow("alice", "big"),
                        whole,
                        requirements=lambda: JobRequirements().require_rate_limiter(big, 4),
                    )
                )
                with trio.fail_after(5):
                    await handle.result()
                stop.set()
    assert granted and granted[0] - asked < 3.0


async def test_a_mixed_demand_never_holds_the_local_part_while_waiting_for_the_shared_one(
    redis_server: Any,
) -> None:
    """A job needing a local gate and a shared gate waits holding neither while another
    worker holds the shared permit, and runs holding both once it comes back."""
    ns = _ns()
    local = CountingGate("local", 1)
    async with (
        RedisAccounts(redis_server.url, namespace=ns, worker="a") as hub_a,
        RedisAccounts(redis_server.url, namespace=ns, worker="b") as hub_b,
    ):
        shared_a = hub_a.counting_gate("shared", 1)
        shared_b = hub_b.counting_gate("shared", 1)
        await _until(lambda: shared_b.try_take([None], []))  # worker b holds the only permit
        seen: list[tuple[int, int]] = []

        async def both(context: Any) -> None:
            seen.append((local.in_use, shared_a.held))

        async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
            handle = dispatcher.submit(
                Fn(
                    workflow("alice", "mixed"),
                    both,
                    requirements=lambda: (
                        JobRequirements().require_rate_limiter(local).require_rate_limiter(shared_a)
                    ),
                )
            )
            await trio.sleep(0.5)
            assert seen == [] and local.in_use == 0, "the waiting job holds the local gate"
            shared_b.give([None])  # worker b is done: its spare goes back, a is woken
            with trio.fail_after(3):
                await handle.result()
        assert seen == [(1, 1)]
        assert local.in_use == 0


async def test_losing_redis_refuses_naming_redis_and_the_account_and_recovery_grants_again(
    redis_binary: str,
) -> None:
    """Redis stopped mid-run: a job that needs the shared bucket is refused with an error that
    names Redis and the account, nothing is granted beyond the lease Redis gave; Redis back (a
    restart that forgot everything): the account grants again, starting empty."""
    with running_redis(redis_binary) as server:
        async with RedisAccounts(server.url, namespace=_ns(), worker="w", lease_ttl=1.0) as hub:
            bucket = hub.token_bucket("quota", rpm=60, tpm=6000, burst=3)
            await _until(lambda: bucket.try_take([10], []))
            await trio.to_thread.run_sync(server.stop)
            # the next settle (a shortfall, or the renewal within a third of the ttl) fails
            bucket.fits([6000], [])
            await _until(lambda: bucket.lost is not None)
            assert bucket.status_indicator == "redis-lost"
            with pytest.raises(RedisUnavailableError) as refused:
                bucket.fits([1], [])
            message = str(refused.value)
            assert "Redis" in message and "'quota'" in message and server.url in message
            assert refused.value.service == "redis"
            async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
                handle = dispatcher.submit(
                    Fn(
                        workflow("alice", "lost"),
                        _nothing,
                        requirements=lambda: JobRequirements().require_rate_limiter(bucket, 1),
                    )
                )
                with pytest.raises(RedisUnavailableError, match="quota"):
                    await handle.result()
            await trio.to_thread.run_sync(server.start)
            await _until(lambda: bucket.lost is None)
            # a restarted Redis starts the bucket empty for a worker that knew it: one request
            # refills in a second, not the whole burst at once
            started = trio.current_time()
            await _until(lambda: bucket.try_take([1], []), limit=4.0)
            assert trio.current_time() - started >= 0.5
            assert bucket.status().redis == "ok"


async def test_one_workers_push_back_slows_every_worker(redis_server: Any) -> None:
    """A 429 seen by one worker raises the throttle in Redis; the other worker reads it at its
    next settle, and a bucket's refill slows for both."""
    ns = _ns()
    async with (
        RedisAccounts(redis_server.url, namespace=ns, worker="a") as hub_a,
        RedisAccounts(redis_server.url, namespace=ns, worker="b") as hub_b,
    ):
        a = hub_a.token_bucket("quota", rpm=600, tpm=60_000)
        b = hub_b.token_bucket("quota", rpm=600, tpm=60_000)
        await _until(lambda: a.try_take([1], []))
        await _until(lambda: b.try_take([1], []))
        a.on_rate_limit_error(RuntimeError("429"))
        assert a.status_indicator == "throttle:1.5x"
        b.fits([60_000], [])  # a shortfall makes b settle
        await _until(lambda: b.throttle == pytest.approx(0.5))
        assert b.status_indicator == "throttle:1.5x"
        assert "throttle 0.5" in b.status().summary


async def test_a_status_row_shows_the_global_use_and_this_workers_share(
    redis_server: Any,
) -> None:
    ns = _ns()
    async with (
        RedisAccounts(redis_server.url, namespace=ns, worker="w1") as one,
        RedisAccounts(redis_server.url, namespace=ns, worker="w2") as two,
    ):
        g1, g2 = one.counting_gate("db", 8), two.counting_gate("db", 8)
        await _until(lambda: g1.try_take([3], []))
        await _until(lambda: g2.try_take([2], []))
        g1.fits([8], [])  # settle g1 so it sees w2's permits
        await trio.sleep(0.3)
        status = g1.status()
        assert status.worker == "w1" and status.held == 3
        assert status.used >= 5, status
        assert status.summary.startswith(f"global {round(status.used)}/8 permits; worker w1:")
        (row,) = capture_health([g1]).limiters
        assert (row.name, row.category, row.capacity, row.used) == (
            "db",
            "semaphore",
            8,
            status.used,
        )
        g1.give([3])
        g2.give([2])


async def test_a_limiter_kind_from_configuration_starts_its_own_hub(redis_server: Any) -> None:
    """``redis_counting`` from a DispatcherConfig: the account's hub starts itself when admission
    first asks, grants, and gives its lease back when the run ends."""
    ns = _ns()
    config = DispatcherConfig(
        health_every=None,
        limiters={
            "slots": LimiterConfig(
                kind="redis_counting",
                settings={"url": redis_server.url, "namespace": ns, "capacity": 2},
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
            )
        )
        with trio.fail_after(5):
            await handle.result()
        assert gate.status().redis == "ok"


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"url": "http://localhost:6379"}, ValueError, "redis://"),
        ({"url": "redis://"}, ValueError, "names no host"),
        ({"url": 6379}, TypeError, "url must be a str"),
        ({"lease_ttl": math.nan}, ValueError, "lease_ttl"),
        ({"lease_ttl": -1}, ValueError, "lease_ttl"),
        ({"lease_ttl": "10"}, TypeError, "lease_ttl"),
        ({"reservation_ttl": math.inf}, ValueError, "reservation_ttl"),
        ({"on_redis_lost": "ignore"}, ValueError, "on_redis_lost"),
        ({"namespace": "a{b}"}, ValueError, "namespace"),
        ({"timeout": True}, TypeError, "timeout"),
        ({"autostart": "yes"}, TypeError, "autostart"),
    ],
)
def test_a_bad_hub_setting_is_refused_by_name(
    kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    settings: dict[str, Any] = {"url": "redis://127.0.0.1:6379/0", **kwargs}
    with pytest.raises(error, match=words):
        RedisAccounts(**settings)


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda hub: hub.token_bucket("q", rpm=0, tpm=10), ValueError, "rpm must be positive"),
        (lambda hub: hub.token_bucket("q", rpm=1.5, tpm=10), TypeError, "rpm must be an int"),
        (lambda hub: hub.token_bucket("q", rpm=1, tpm=10, burst=math.nan), ValueError, "burst"),
        (lambda hub: hub.token_bucket("q", rpm=1, tpm=10, burst=0.5), ValueError, "burst"),
        (lambda hub: hub.elastic_window("w", max_requests=5, window=-1), ValueError, "window"),
        (
            lambda hub: hub.elastic_window("w", max_requests=5, window=1, max_throttle=math.nan),
            ValueError,
            "max_throttle",
        ),
        (lambda hub: hub.counting_gate("g", -2), ValueError, "capacity must be positive"),
        (lambda hub: hub.counting_gate("g", 2, lease_max=0), ValueError, "lease_max"),
        (lambda hub: hub.counting_gate("g", 2, lease="yes"), TypeError, "lease must be a bool"),
        (lambda hub: hub.counting_gate("a b", 2), ValueError, "name"),
    ],
)
def test_a_bad_account_setting_is_refused_by_name(
    build: Callable[[RedisAccounts], object], error: type[Exception], words: str
) -> None:
    hub = RedisAccounts("redis://127.0.0.1:6379/0")
    with pytest.raises(error, match=words):
        build(hub)


def test_two_accounts_of_one_name_on_one_hub_are_refused() -> None:
    hub = RedisAccounts("redis://127.0.0.1:6379/0")
    hub.counting_gate("g", 2)
    with pytest.raises(ValueError, match="'g' already exists"):
        hub.token_bucket("g", rpm=1, tpm=1)


async def test_a_bad_configured_limiter_fails_the_start_naming_it() -> None:
    config = DispatcherConfig(
        health_every=None,
        limiters={
            "slots": LimiterConfig(
                kind="redis_counting", settings={"url": "redis://h:6379", "capacity": math.nan}
            )
        },
    )
    with pytest.raises(ConfigError, match="'slots'.*capacity"):
        async with open_dispatcher(config):
            pass
    missing = DispatcherConfig(
        health_every=None,
        limiters={"q": LimiterConfig(kind="redis_token_bucket", settings={"rpm": 1, "tpm": 1})},
    )
    with pytest.raises(ConfigError, match="'q'.*url"):
        async with open_dispatcher(missing):
            pass


async def test_a_local_share_grants_its_fraction_while_redis_is_lost_and_hands_back(
    redis_binary: str,
) -> None:
    """``on_redis_lost="local_share"``: Redis stopped, a gate of 4 with a share of one half
    grants up to 2 permits counting the job still holding one, refuses the third with a plain
    False (not an error), and a bucket's share starts empty and names when it refills. Redis
    back: both answer from Redis again."""
    with running_redis(redis_binary) as server:
        async with RedisAccounts(
            server.url,
            namespace=_ns(),
            worker="w",
            lease_ttl=1.0,
            on_redis_lost="local_share",
            local_share=0.5,
        ) as hub:
            gate = hub.counting_gate("slots", 4)
            bucket = hub.token_bucket("quota", rpm=120, tpm=12_000, burst=4)
            await _until(lambda: gate.try_take([None], []))
            await _until(lambda: bucket.try_take([1], []))
            await trio.to_thread.run_sync(server.stop)
            gate.fits([4], [])  # a shortfall: the settle finds Redis gone
            await _until(lambda: gate.local_share)
            assert gate.status_indicator == "redis-lost:local-share"
            assert gate.try_take([None], []) is True  # 2 of the half share of 4
            assert gate.fits([None], []) is False
            assert bucket.local_share and bucket.fits([1], []) is False  # it starts empty
            instant = bucket.earliest_fit([1], [])
            assert instant is not None and 0 < instant - trio.current_time() <= 1.0
            gate.give([None])
            await trio.to_thread.run_sync(server.start)
            await _until(lambda: gate.lost is None and not gate.local_share)
            assert gate.held == 1
            gate.give([None])


async def test_an_account_that_expired_while_idle_starts_full_and_one_redis_forgot_starts_empty(
    redis_server: Any,
) -> None:
    """The namespace's epoch tells the two apart: keys gone by expiry (deleted here, as their
    TTL would) bring a bucket back full; a flushed Redis (a new epoch) brings it back empty."""
    async with RedisAccounts(redis_server.url, namespace=_ns(), worker="w") as hub:
        bucket = hub.token_bucket("quota", rpm=60, tpm=6000, burst=3, lease_max=3)
        await _until(lambda: bucket.try_take([1, 1, 1], []))
        client = coredis.Redis.from_url(redis_server.url, decode_responses=True)
        async with client:
            await client.delete(list(bucket.keys))  # what an idle expiry does
            bucket.fits([1, 1, 1], [])
            await _until(lambda: bucket.try_take([1, 1, 1], []), limit=0.5)  # full at once
            await client.delete([*bucket.keys, hub.epoch_key])  # what a flush does
            bucket.fits([1], [])
            await trio.sleep(0.3)
            assert bucket.fits([1], []) is False  # empty: one request refills in a second


async def test_a_hub_that_cannot_reach_redis_at_start_refuses_naming_it() -> None:
    """Nothing listens on the port: the first settle fails at once, and every ask then raises
    the error that names Redis, its address and the account."""
    with socket.socket() as probe:  # a free port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    async with RedisAccounts(url, namespace=_ns(), worker="w", timeout=1.0) as hub:
        gate = hub.counting_gate("slots", 2)
        assert gate.fits([None], []) is False  # noted: the hub tries Redis
        await _until(lambda: gate.lost is not None)
        with pytest.raises(RedisUnavailableError, match=rf"'slots'.*{port}"):
            gate.fits([None], [])
        assert gate.status().redis.startswith("lost: ")


async def test_a_configured_limiter_with_a_bad_url_fails_the_start_naming_it() -> None:
    config = DispatcherConfig(
        health_every=None,
        limiters={
            "quota": LimiterConfig(
                kind="redis_token_bucket",
                settings={"url": "http://127.0.0.1:6379", "rpm": 60, "tpm": 6000},
            )
        },
    )
    with pytest.raises(ConfigError, match="'quota'.*redis://"):
        async with open_dispatcher(config):
            pass
