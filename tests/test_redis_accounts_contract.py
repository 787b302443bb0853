"""The shared accounts pass the account contract, on a real redis-server.

Each check builds a fresh account on a namespace of its own and primes its lease with the whole
capacity in one settle (a ``trio.run`` of its own, in a thread: the contract's checks are
synchronous and run in their own virtual-time run), so every answer the contract asks for comes
from the lease, as admission's do.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import trio
from nucleo_trio_redis import (
    RedisAccounts,
    SharedAccount,
    SharedCountingGate,
    SharedElasticWindow,
    SharedTokenBucket,
)

from nucleo_trio.testing import AccountContract


def _primed(url: str, build: Any, fill: Any) -> SharedAccount:
    hub = RedisAccounts(
        url, namespace=f"contract-{uuid.uuid4().hex[:10]}", worker="contract", autostart=False
    )
    account: SharedAccount = build(hub)
    everything = fill(account)
    assert account.fits(everything, []) is False, "a fresh account fits before any lease"
    failure: list[BaseException] = []

    def settle() -> None:
        try:
            trio.run(hub.settle_once)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            failure.append(exc)

    worker = threading.Thread(target=settle)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the priming settle did not finish"
    if failure:
        raise failure[0]
    assert account.fits(everything, []) is True, (
        f"the lease does not cover the capacity: {account.status().summary}"
    )
    return account


@pytest.fixture(autouse=True)
def _server_url(request: pytest.FixtureRequest, redis_server: Any) -> None:
    request.instance.url = redis_server.url


class TestSharedCountingGate(AccountContract):
    url: str

    def make_account(self) -> SharedCountingGate:
        account = _primed(
            self.url, lambda hub: hub.counting_gate("gate", 3), lambda gate: [None] * 3
        )
        assert isinstance(account, SharedCountingGate)
        return account


class TestSharedTokenBucket(AccountContract):
    url: str
    amount = 1
    clocked = False  # the lease refills from Redis, an event, not from the local clock

    def make_account(self) -> SharedTokenBucket:
        account = _primed(
            self.url,
            lambda hub: hub.token_bucket("bucket", rpm=20, tpm=20),
            lambda bucket: [1] * 20,
        )
        assert isinstance(account, SharedTokenBucket)
        return account


class TestSharedElasticWindow(AccountContract):
    url: str
    clocked = False  # the lease refills from Redis, an event, not from the local clock

    def make_account(self) -> SharedElasticWindow:
        account = _primed(
            self.url,
            lambda hub: hub.elastic_window("window", max_requests=5, window=60.0),
            lambda window: [None] * 5,
        )
        assert isinstance(account, SharedElasticWindow)
        return account
