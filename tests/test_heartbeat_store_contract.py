"""HeartbeatStoreContract, bound the way a plugin author binds it: to the in-memory store, to the
SQLite store on files in a temporary directory, and to the ``nucleo-trio-redis`` plugin's
RedisHeartbeatStore on the session's redis-server (``redis_server``), each check on a key prefix
of its own (two stores on one prefix stand for two workers). The stores' own rules stay in
tests/test_heartbeat_store.py and tests/test_redis_heartbeat_store.py; this file shows that the
contract a plugin runs holds for every store nucleo_trio ships, and that it fails stores that
break it, each at the check its fault breaks (HB-03, HB-11, HB-13..16)."""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio

from nucleo_trio.heartbeat import (
    Heartbeat,
    HeartbeatStore,
    InMemoryHeartbeatStore,
    SQLiteHeartbeatStore,
)
from nucleo_trio.heartbeat.codec import _signed
from nucleo_trio.testing import HeartbeatStoreContract, heartbeat_contract

from .contract_checks import checks_of

_NUMBERS = itertools.count()


class TestInMemoryStoreContract(HeartbeatStoreContract):
    """The default store: HB-03, HB-13..16 (a schedule of its own, so nothing reopens)."""

    def make_store(self) -> HeartbeatStore:
        return InMemoryHeartbeatStore()


class TestSQLiteStoreContract(HeartbeatStoreContract):
    """The durable built-in store, alone on its file: HB-03, HB-11, HB-13..16, and its rows
    signed (an edited row, or one signed with another key, is refused at its fire)."""

    directory: Path

    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path: Path) -> None:
        self.directory = tmp_path

    def make_store(self) -> HeartbeatStore:
        return SQLiteHeartbeatStore(self.directory / f"beats-{next(_NUMBERS)}.db")

    def open_again(self, store: HeartbeatStore) -> HeartbeatStore | None:
        assert isinstance(store, SQLiteHeartbeatStore)
        return SQLiteHeartbeatStore(store.path)

    async def tamper(self, store: HeartbeatStore, heartbeat_id: str) -> bool:
        assert isinstance(store, SQLiteHeartbeatStore)
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE heartbeats SET user_id = 'mallory' WHERE id = ?", (heartbeat_id,))
        return True


class TestRedisStoreContract(HeartbeatStoreContract):
    """The Redis plugin's store, shared by every store on its keys: HB-03, HB-11, HB-13..16,
    each slot once across two stores, and an edited row refused at its fire."""

    shared = True
    url: str

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: Any) -> None:
        self.url = redis_server.url

    def make_store(self) -> HeartbeatStore:
        from nucleo_trio_redis.heartbeat_store import RedisHeartbeatStore

        prefix = f"test-hb-contract-{next(_NUMBERS)}"
        return RedisHeartbeatStore(self.url, prefix=prefix, claim_ttl=300)

    def open_again(self, store: HeartbeatStore) -> HeartbeatStore | None:
        from nucleo_trio_redis.heartbeat_store import RedisHeartbeatStore

        assert isinstance(store, RedisHeartbeatStore)
        return RedisHeartbeatStore(store.url, prefix=store.prefix, claim_ttl=store.claim_ttl)

    async def tamper(self, store: HeartbeatStore, heartbeat_id: str) -> bool:
        from nucleo_trio_redis.heartbeat_store import RedisHeartbeatStore

        assert isinstance(store, RedisHeartbeatStore)
        entries = store.keys[1]
        client: coredis.Redis[str] = coredis.Redis.from_url(store.url, decode_responses=True)
        async with client:
            row = await client.hget(entries, heartbeat_id)
            assert row is not None, f"no row of {heartbeat_id!r} under {entries}"
            values = json.loads(row)
            values[3] = "mallory"  # the user each fire would run for
            await client.hset(entries, {heartbeat_id: json.dumps(values)})
        return True


# -- stores that break the contract ----------------------------------------------------------------


class LatestFirst(InMemoryHeartbeatStore):
    """Breaks HB-13: of the heartbeats due, poll_due answers the latest, not the most overdue."""

    async def poll_due(self, now: float) -> Heartbeat | None:
        due = [heartbeat for heartbeat in await self.inspect() if heartbeat.run_at <= now]
        return None if not due else await self.cancel(due[-1].id)


class OverwritesTheRebinding(InMemoryHeartbeatStore):
    """Breaks HB-15: the recurrence's next slot is stored whether or not the id is held."""

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        await self.enqueue(heartbeat)
        return True


class TellsNobody(InMemoryHeartbeatStore):
    """Breaks HB-16: it takes listeners and never calls them."""

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


class TrustsEveryRow(SQLiteHeartbeatStore):
    """Breaks the signature: it signs each row afresh as it reads it, so an edited row, or one
    signed with another key, reads back as whatever it says."""

    def _restored(self, row: tuple[Any, ...], what: str) -> Heartbeat | None:
        codec = self._require_codec()
        resigned = (*row[:8], codec._key.sign(_signed(row[:8])))
        return super()._restored(resigned, what)


class ReadThenDelete:
    """A handle on a schedule shared in this process that takes a due heartbeat in two steps,
    a read and then a delete with a round trip between, so two workers both take one slot.
    Every other operation goes straight to the shared schedule."""

    def __init__(self, backing: InMemoryHeartbeatStore) -> None:
        self.backing = backing

    async def enqueue(self, heartbeat: Heartbeat) -> Heartbeat | None:
        return await self.backing.enqueue(heartbeat)

    async def cancel(self, heartbeat_id: str) -> Heartbeat | None:
        return await self.backing.cancel(heartbeat_id)

    async def poll_due(self, now: float) -> Heartbeat | None:
        head = next(iter(await self.backing.inspect()), None)
        if head is None or head.run_at > now:
            return None
        await trio.lowlevel.checkpoint()  # the round trip between the read and the delete
        await self.backing.cancel(head.id)
        return head

    async def peek_next_run_at(self) -> float | None:
        return await self.backing.peek_next_run_at()

    async def re_enqueue_if_absent(self, heartbeat: Heartbeat) -> bool:
        return await self.backing.re_enqueue_if_absent(heartbeat)

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self.backing.on_change(listener)

    async def inspect(self) -> tuple[Heartbeat, ...]:
        return await self.backing.inspect()

    async def aclose(self) -> None:
        return None


class Atomic(ReadThenDelete):
    """The same handle, taking a due heartbeat off the shared schedule in one step."""

    async def poll_due(self, now: float) -> Heartbeat | None:
        return await self.backing.poll_due(now)


def _bound(store: Callable[[], HeartbeatStore]) -> HeartbeatStoreContract:
    class Bound(HeartbeatStoreContract):
        def make_store(self) -> HeartbeatStore:
            return store()

    return Bound()


def _sqlite(directory: Path, kind: type[SQLiteHeartbeatStore]) -> HeartbeatStoreContract:
    class Bound(TestSQLiteStoreContract):
        def make_store(self) -> HeartbeatStore:
            return kind(self.directory / f"beats-{next(_NUMBERS)}.db")

        def open_again(self, store: HeartbeatStore) -> HeartbeatStore | None:
            assert isinstance(store, SQLiteHeartbeatStore)
            return kind(store.path)

    contract = Bound()
    contract.directory = directory
    return contract


def _shared(handle: type[ReadThenDelete]) -> HeartbeatStoreContract:
    class Shared(HeartbeatStoreContract):
        shared = True

        def make_store(self) -> HeartbeatStore:
            return handle(InMemoryHeartbeatStore())

        def open_again(self, store: HeartbeatStore) -> HeartbeatStore | None:
            assert isinstance(store, ReadThenDelete)
            return handle(store.backing)

    return Shared()


def _fails(contract: HeartbeatStoreContract, check: str, match: str) -> None:
    """``check`` fails ``contract`` with an AssertionError whose message matches ``match``."""
    with pytest.raises(AssertionError, match=match):
        getattr(contract, check)()


@pytest.mark.parametrize(
    ("broken", "check", "match"),
    [
        (
            LatestFirst,
            "test_the_most_overdue_falls_due_first_and_never_a_future_one",
            r"answered \['a', 'z', 'm'\], not m and z",
        ),
        (
            OverwritesTheRebinding,
            "test_the_next_slot_yields_to_a_rebinding",
            "the next slot was stored over a rebinding",
        ),
        (TellsNobody, "test_every_head_change_is_told", "not told of enqueueing the first"),
    ],
)
def test_the_contract_fails_a_store_that_breaks_it(
    broken: type[InMemoryHeartbeatStore], check: str, match: str
) -> None:
    """HB-13, HB-15, HB-16: each broken in-memory store fails the check its fault breaks,
    naming what it did, while InMemoryHeartbeatStore passes the same check; the checks run
    without pytest's help."""
    getattr(_bound(InMemoryHeartbeatStore), check)()
    _fails(_bound(broken), check, match)


def test_the_contract_fails_a_durable_store_that_trusts_what_it_reads(tmp_path: Path) -> None:
    """HB-03: a SQLite store that does not check its rows' signatures lets an edited row fall
    due as what it now says, and lists one signed with another key as the user it claims: both
    checks fail, and pass for the real store."""
    for check, match in (
        ("test_an_edited_row_is_refused_at_its_fire", "user='mallory'.*not as a refused row"),
        (
            "test_a_row_signed_with_another_key_is_refused_at_its_fire",
            "a refused row is listed as .*user='contract-user'",
        ),
    ):
        getattr(_sqlite(tmp_path, SQLiteHeartbeatStore), check)()
        _fails(_sqlite(tmp_path, TrustsEveryRow), check, match)


def test_the_contract_fails_a_shared_store_whose_slots_fire_twice() -> None:
    """Two handles that take a due slot in a read and a delete both take it: the check of each
    slot once across two stores fails, naming the slots fired; it passes for handles that take
    it off the one shared schedule atomically."""
    check = "test_each_slot_fires_once_across_two_stores"
    getattr(_shared(Atomic), check)()
    _fails(_shared(ReadThenDelete), check, r"the two stores fired \[\('a', 10\.0\), \('a', 10\.0\)")


def test_a_contract_missing_a_method_says_which() -> None:
    """A subclass that forgot make_store fails naming it, not with a bare error."""

    class Forgot(HeartbeatStoreContract):
        pass

    with pytest.raises(NotImplementedError, match=r"Forgot must implement make_store\(\)"):
        Forgot().test_an_empty_store_holds_nothing()


def test_the_base_class_is_not_collected_and_every_check_names_its_rules() -> None:
    """HeartbeatStoreContract itself is no test class (pytest collects Test* only); every check says in
    its docstring what it checks, for the author whose implementation fails it, with no rule
    ids, and names the rule ids it holds in a comment, its first line, for maintainers."""
    assert not HeartbeatStoreContract.__name__.startswith("Test")
    checks = checks_of(heartbeat_contract, "HeartbeatStoreContract")
    assert len(checks) >= 9
    holds = re.compile(r"# Holds (HB-\d\d(, HB-\d\d)*( \(.+\))?|no numbered rule: .+)\.")
    for name, doc, first in checks:
        assert doc.strip() and not re.search(r"[A-Z]{2,4}-\d\d", doc), name
        assert holds.fullmatch(first), f"{name} begins {first!r}"
