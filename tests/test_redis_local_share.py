"""Issue 21, item 4: shared accounts when Redis goes away.

With ``on_redis_lost="local_share"`` each worker's stand-in starts from what Redis had counted
for it when the loss came, against its share: two workers on a gate of 4 with a half share each,
one holding all four permits, the other none, never run more than four jobs at once while Redis
is away (before, the idle worker took its two: six at once).
"""

from __future__ import annotations

import uuid
from typing import Any

import trio
from nucleo_trio_redis import RedisAccounts

from .redis_server import running_redis
from .test_redis_accounts import _until


def _hub(url: str, namespace: str, worker: str) -> RedisAccounts:
    return RedisAccounts(
        url,
        namespace=namespace,
        worker=worker,
        lease_ttl=1.0,
        on_redis_lost="local_share",
        local_share=0.5,
    )


async def test_uneven_holdings_at_the_loss_never_pass_the_gate_while_redis_is_away(
    redis_binary: str,
) -> None:
    namespace = f"t{uuid.uuid4().hex[:10]}"
    with running_redis(redis_binary) as server:
        async with (
            _hub(server.url, namespace, "busy") as busy_hub,
            _hub(server.url, namespace, "idle") as idle_hub,
        ):
            busy = busy_hub.counting_gate("slots", 4)
            idle = idle_hub.counting_gate("slots", 4)
            for _ in range(4):
                await _until(lambda: busy.try_take([None], []))
            assert (busy.held, idle.held) == (4, 0)
            await trio.to_thread.run_sync(server.stop)
            for account in (busy, idle):
                account.fits([None], [])  # a shortfall: the settle finds Redis gone
            await _until(lambda: busy.local_share and idle.local_share)

            def total() -> int:
                held: Any = busy.held + idle.held
                return int(held)

            # The idle worker held nothing Redis had counted: it waits, it does not take.
            assert idle.try_take([None], []) is False
            assert total() == 4
            # The busy one's jobs end: it may hold its share, two, and no more.
            busy.give([None, None, None])
            assert busy.try_take([None], []) is True
            assert busy.try_take([None], []) is False
            assert idle.try_take([None], []) is False
            assert total() == 2
            busy.give([None, None])
            await trio.to_thread.run_sync(server.start)
            await _until(lambda: busy.lost is None and idle.lost is None)
            await _until(lambda: idle.try_take([None], []))  # Redis back: the idle one takes
            idle.give([None])
