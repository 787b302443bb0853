"""A durable heartbeat row is data, not code (issue 21, item 1), checked from the outside.

Each test writes into a store the way someone who can reach it would, not through the runtime:
``sqlite3`` on the schedule's file, a plain Redis client on the schedule's keys. A row naming a
module nobody imported, another user, another registered job, or a row copied, edited or signed
with another key, is refused when it falls due: the module is not imported (``sys.modules``),
the job does not run, and a ``HeartbeatFireFailed`` names the heartbeat and why. A genuine row
naming a job this process did not register fails its fire naming the job and keeps its slots.
A durable store without a key refuses the start. The Redis tests run against a real
redis-server and skip only when none is installed; the access rules the scaling-out guide gives
are run as written.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
import trio.testing

from nucleo_trio.bus import MessageBus
from nucleo_trio.dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from nucleo_trio.errors import ConfigError, UsageValueError
from nucleo_trio.guardrails import ScopeGuard, TenantScope
from nucleo_trio.heartbeat import (
    REFUSED_USER,
    FixedInterval,
    HeartbeatCodec,
    HeartbeatFired,
    HeartbeatFireFailed,
    HeartbeatJobs,
    HeartbeatRowRefused,
    HeartbeatScheduled,
    RefusedHeartbeatRow,
    ScheduleHeartbeat,
    SigningKey,
    SQLiteHeartbeatStore,
    UnknownHeartbeatJob,
    heartbeat_now,
    signing_key_from,
)
from nucleo_trio.heartbeat.records import _mint_from
from nucleo_trio.jobs import JobContext, Tool

KEY = "the deployment's key, 32 characters"
OTHER_KEY = "another deployment's key, as long"
RAN: list[tuple[str, str]] = []


class Report(Tool[str]):
    """What the program schedules for its users."""

    heartbeat_name = "reports.daily"

    async def execute(self, context: JobContext) -> str:
        RAN.append(("report", context.user_id))
        return "report"


class WipeTenant(Tool[str]):
    """An admin-only job the program registered, which a forged row would like to run."""

    heartbeat_name = "admin.wipe-tenant"

    async def execute(self, context: JobContext) -> str:
        RAN.append(("wipe", context.user_id))
        return "wiped"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


@pytest.fixture
def payload_module(tmp_path: Path) -> Iterator[str]:
    """The name of a module that is importable (it is on ``sys.path``) and that nobody imported:
    importing it would leave a mark."""
    name = f"heartbeat_payload_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import os

            os.environ["HEARTBEAT_PAYLOAD_RAN"] = "1"

            def system(command):
                raise AssertionError("a row ran code")
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def sqlite_config(path: Path, **key: str) -> DispatcherConfig:
    return DispatcherConfig(
        heartbeat=HeartbeatConfig(
            kind="sqlite", settings={"path": str(path)}, **(key or {"signing_key": KEY})
        )
    )


def failures_and_fires() -> tuple[MessageBus, list[HeartbeatFireFailed], list[HeartbeatFired]]:
    """A bus that keeps every failed and successful fire from the dispatcher's very start."""
    bus = MessageBus()
    failed: list[HeartbeatFireFailed] = []
    fired: list[HeartbeatFired] = []
    bus.subscribe(failed.append, event_type=HeartbeatFireFailed)
    bus.subscribe(fired.append, event_type=HeartbeatFired)
    return bus, failed, fired


def rows(path: Path) -> dict[str, tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return {row[0]: row for row in db.execute("SELECT * FROM heartbeats")}


async def schedule_a_report(path: Path, *, user: str = "alice", period: float = 60) -> float:
    """The program's own row: a recurring report for ``user``, written by a dispatcher. Answers
    its first instant."""
    at = heartbeat_now() + period
    async with open_dispatcher(sqlite_config(path)) as dispatcher:
        dispatcher.schedule_heartbeat(
            ScheduleHeartbeat(Report, "report", at, recurrence=FixedInterval(period)),
            user,
            scope_guard=ScopeGuard(TenantScope("acme")),
        )
        await trio.sleep(1)  # stored, not yet due
    return at


# -- SQLite: rows written around the runtime ---------------------------------------------------


async def test_a_row_naming_an_arbitrary_module_is_not_imported_and_not_fired(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, payload_module: str
) -> None:
    """A row put in the file by hand, naming a module on the path and the user "admin", is
    refused at its instant: the module is never imported, nothing runs, the failure names the
    heartbeat, why, and what the row claims, and the row is gone."""
    path = tmp_path / "beats.db"
    await schedule_a_report(path)
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO heartbeats VALUES ('evil', 0, ?, 'admin', '[]', NULL, NULL, NULL, NULL)",
            (f"{payload_module}:system",),
        )
    bus, failed, fired = failures_and_fires()
    async with open_dispatcher(sqlite_config(path), bus=bus, heartbeat_jobs=[Report]):
        await trio.sleep(1)
    assert payload_module not in sys.modules
    assert "HEARTBEAT_PAYLOAD_RAN" not in os.environ
    assert RAN == [] and fired == []
    (failure,) = failed
    assert failure.heartbeat_id == "evil" and isinstance(failure.error, HeartbeatRowRefused)
    assert failure.heartbeat.user_id == REFUSED_USER
    assert issubclass(failure.heartbeat.job_class, RefusedHeartbeatRow)
    assert (
        "it is not signed" in failure.message and "schedule the heartbeat again" in failure.message
    )
    assert f"claims the job '{payload_module}:system' for the user 'admin'" in failure.message
    assert set(rows(path)) == {"report"}


async def test_a_row_edited_to_another_user_or_another_job_is_refused(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """The program's signed row, edited in the file to run as "admin", put back under the
    registered admin-only job with its signature, or copied whole under another id, no longer
    matches its signature: none runs, each fails its fire naming its id, and each is dropped."""
    path = tmp_path / "beats.db"
    at = await schedule_a_report(path)
    (report,) = rows(path).values()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE heartbeats SET user_id = 'admin'")
        as_wipe = (
            "wipe",
            report[1],
            "admin.wipe-tenant",
            "alice",
            "[]",
            None,
            None,
            None,
            report[8],
        )
        db.execute("INSERT INTO heartbeats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", as_wipe)
        untouched = ("kept", *report[1:])
        db.execute("INSERT INTO heartbeats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", untouched)
    bus, failed, fired = failures_and_fires()
    jobs = [Report, WipeTenant]
    async with open_dispatcher(sqlite_config(path), bus=bus, heartbeat_jobs=jobs):
        await trio.sleep(at - heartbeat_now() + 1)
    assert RAN == [] and fired == [], "the copy does not match either: the id is signed"
    assert sorted(event.heartbeat_id for event in failed) == ["kept", "report", "wipe"]
    assert all("its signature does not match" in event.message for event in failed)
    assert rows(path) == {}, "refused rows are dropped, recurring or not"


async def test_a_row_signed_with_another_key_is_refused(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A row another deployment signed (its own key) is not this one's: refused, not run."""
    path = tmp_path / "beats.db"
    other = SQLiteHeartbeatStore(
        path, codec=HeartbeatCodec(HeartbeatJobs([Report]), SigningKey(OTHER_KEY))
    )
    await other.enqueue(
        _mint_from(ScheduleHeartbeat(Report, "theirs", 0.0), "mallory", ScopeGuard())
    )
    await other.aclose()
    bus, failed, fired = failures_and_fires()
    async with open_dispatcher(sqlite_config(path), bus=bus, heartbeat_jobs=[Report]):
        await trio.sleep(1)
    assert RAN == [] and fired == []
    (failure,) = failed
    assert failure.heartbeat_id == "theirs" and "signed with another key" in failure.message


async def test_a_genuine_row_naming_an_unregistered_job_fails_each_fire_and_keeps_its_slots(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, payload_module: str
) -> None:
    """A row signed with the deployment's key by a worker that knows a job this one does not
    (its name a module path nobody imported) fails each of its fires with UnknownHeartbeatJob
    naming the job, without importing it; its recurrence goes on, so once the class is
    registered the next slot runs it, for the user the row was signed for."""
    path = tmp_path / "beats.db"
    at = await schedule_a_report(path, user="bob", period=10)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE heartbeats SET job_class = ?", (f"{payload_module}:system",))
    elsewhere = HeartbeatJobs({f"{payload_module}:system": Report})
    writer = SQLiteHeartbeatStore(
        tmp_path / "scratch.db", codec=HeartbeatCodec(elsewhere, SigningKey(KEY))
    )
    # The row as that other worker signs it, naming the job by that name.
    (report,) = rows(path).values()
    assert writer.codec is not None
    signed = writer.codec.to_row(
        _mint_from(
            ScheduleHeartbeat(Report, "report", report[1], recurrence=FixedInterval(10)),
            "bob",
            ScopeGuard(TenantScope("acme")),
        )
    )
    await writer.aclose()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM heartbeats")
        db.execute("INSERT INTO heartbeats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", tuple(signed))

    bus, failed, fired = failures_and_fires()
    async with open_dispatcher(sqlite_config(path), bus=bus):
        await trio.sleep(at - heartbeat_now() + 15)  # two slots
    assert payload_module not in sys.modules and RAN == [] and fired == []
    assert [event.heartbeat.run_at - at for event in failed] == [0, 10]
    assert all(isinstance(event.error, UnknownHeartbeatJob) for event in failed)
    assert f"the job '{payload_module}:system' is not registered" in failed[0].message
    assert failed[0].heartbeat.user_id == "bob", "a genuine row keeps its user"

    async with open_dispatcher(sqlite_config(path), heartbeat_jobs=dict(elsewhere.items())):
        await trio.sleep(10)
    assert RAN == [("report", "bob")]


async def test_rows_from_before_signing_are_refused_with_how_to_schedule_them_again(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A file written before rows were signed (eight columns) opens: the store adds the
    signature column, and each old row is refused when it falls due, saying it is not signed
    and that it is to be scheduled again."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE heartbeats (id TEXT PRIMARY KEY, run_at REAL NOT NULL, job_class TEXT "
            "NOT NULL, user_id TEXT NOT NULL, scope_guard TEXT NOT NULL, conversation_id TEXT, "
            "input TEXT, recurrence TEXT)"
        )
        db.execute(
            "INSERT INTO heartbeats VALUES ('legacy', 0, 'reports.daily', 'alice', '[]', NULL, "
            "NULL, NULL)"
        )
    bus, failed, fired = failures_and_fires()
    async with open_dispatcher(sqlite_config(path), bus=bus, heartbeat_jobs=[Report]):
        await trio.sleep(1)
    assert fired == [] and RAN == []
    (failure,) = failed
    assert failure.heartbeat_id == "legacy"
    assert "not signed (written before rows were signed" in failure.message
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(heartbeats)")]
    assert columns[-1] == "signature"


# -- keys and names ----------------------------------------------------------------------------


async def test_a_durable_store_without_a_key_refuses_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key configured, or a variable that is not set, stops the start with a ConfigError
    saying what to set; the key from the environment works, and no repr shows it."""
    path = tmp_path / "beats.db"
    bare = DispatcherConfig(heartbeat=HeartbeatConfig(kind="sqlite", settings={"path": str(path)}))
    with pytest.raises(
        ConfigError, match="no signing key is configured: set heartbeat.signing_key_env"
    ):
        async with open_dispatcher(bare):
            pass  # pragma: no cover - the start is refused
    from_env = sqlite_config(path, signing_key_env="BEATS_TEST_KEY")
    monkeypatch.delenv("BEATS_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="BEATS_TEST_KEY, which is not set"):
        async with open_dispatcher(from_env):
            pass  # pragma: no cover - the start is refused
    monkeypatch.setenv("BEATS_TEST_KEY", "short")
    with pytest.raises(
        ConfigError, match="BEATS_TEST_KEY: a heartbeat signing key needs at least 16"
    ):
        async with open_dispatcher(from_env):
            pass  # pragma: no cover - the start is refused
    monkeypatch.setenv("BEATS_TEST_KEY", KEY)
    async with open_dispatcher(from_env) as dispatcher:
        assert dispatcher.heart is not None and dispatcher.heart.codec is not None
    inline = sqlite_config(path)
    assert KEY not in repr(inline) and "signing_key='***'" in repr(inline)
    assert repr(signing_key_from(inline.heartbeat)) == "<SigningKey ***>"
    async with open_dispatcher(DispatcherConfig()) as memory:  # in memory: no rows, no key
        assert memory.heart is not None and memory.heart.codec is None


async def test_two_classes_under_one_name_are_refused_when_scheduled(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A class the program schedules is registered under its name there and then; one whose
    name another class already holds is refused at schedule_heartbeat, naming both."""

    class Impostor(Tool[str]):
        heartbeat_name = "reports.daily"

        async def execute(self, context: JobContext) -> str:
            return "impostor"

    async with open_dispatcher(sqlite_config(tmp_path / "beats.db")) as dispatcher:
        dispatcher.schedule_heartbeat(ScheduleHeartbeat(Report, "r", heartbeat_now() + 60), "a")
        assert dispatcher.heartbeat_jobs.get("reports.daily") is Report
        with pytest.raises(UsageValueError, match="'reports.daily' is taken by .*Report"):
            dispatcher.schedule_heartbeat(ScheduleHeartbeat(Impostor, "i", heartbeat_now()), "a")


# -- Redis: keys written around the runtime ------------------------------------------------------


def redis_config(url: str, prefix: str) -> DispatcherConfig:
    return DispatcherConfig(
        heartbeat=HeartbeatConfig(
            kind="redis",
            settings={"url": url, "prefix": prefix, "claim_ttl": 30},
            signing_key=KEY,
        )
    )


def arrival(bus: MessageBus, event_type: type[Any], count: int) -> trio.Event:
    """Set once ``count`` events of ``event_type`` were published on ``bus``."""
    arrived = trio.Event()
    seen: list[object] = []

    def note(event: object) -> None:
        seen.append(event)
        if len(seen) >= count:
            arrived.set()

    bus.subscribe(note, event_type=event_type)
    return arrived


async def test_a_forged_redis_row_is_refused_not_fired_and_not_marked(
    redis_server: Any, payload_module: str
) -> None:
    """Rows written into the schedule's keys with a plain client (Redis has no ACLs here): one
    naming the admin job for "admin", one naming a module on the path, and a genuine row copied
    under another id. None runs, nothing is imported, each fails its fire naming its id, and
    none is recorded as fired: a forged instant silences no real slot."""
    prefix = "trust-forged"
    tag = "{" + prefix + "}"
    bus, failed, fired = failures_and_fires()
    scheduled = arrival(bus, HeartbeatScheduled, 1)
    refused = arrival(bus, HeartbeatFireFailed, 3)
    jobs = [Report, WipeTenant]
    async with open_dispatcher(
        redis_config(redis_server.url, prefix), bus=bus, heartbeat_jobs=jobs
    ) as dispatcher:
        dispatcher.schedule_heartbeat(
            ScheduleHeartbeat(Report, "report", heartbeat_now() + 3600), "alice"
        )
        client: coredis.Redis[str] = coredis.Redis.from_url(redis_server.url, decode_responses=True)
        async with client:
            with trio.fail_after(20):  # the Redis store answers on the real clock
                await scheduled.wait()
            genuine = await client.hget(f"{tag}:entry", "report")
            assert genuine is not None
            forged = {
                "wipe": ["wipe", 1.0, "admin.wipe-tenant", "admin", "[]", None, None, None],
                "evil": ["evil", 1.0, f"{payload_module}:system", "admin", "[]", None, None, None],
                "copy": json.loads(genuine),
            }
            for heartbeat_id, row in forged.items():
                await client.hset(f"{tag}:entry", {heartbeat_id: json.dumps(row)})
                await client.zadd(f"{tag}:due", {heartbeat_id: 1.0})
            await client.publish(f"{tag}:changed", "someone")
            with trio.fail_after(20):
                await refused.wait()
            marks = await client.hgetall(f"{tag}:fired")
    assert RAN == [] and fired == [] and payload_module not in sys.modules
    by_id = {event.heartbeat_id: event.message for event in failed}
    assert set(by_id) == {"wipe", "evil", "copy"}
    assert (
        "not signed" in by_id["wipe"]
        and "'admin.wipe-tenant' for the user 'admin'" in by_id["wipe"]
    )
    assert "kept under this id is the heartbeat 'report'" in by_id["copy"]
    assert marks == {}, "a refused row is no fire: it silences nothing"


async def test_the_documented_redis_access_rules_run_the_store_and_nothing_else(
    redis_server: Any,
) -> None:
    """The ACL user the scaling-out guide gives, run as written: a store connected as it does
    everything a worker does (schedule, poll, fire, record, hear another worker) on its prefix,
    and is refused any key outside it."""
    guide = (Path(__file__).parents[1] / "docs" / "guide" / "scaling-out.md").read_text()
    block = guide.split("ACL SETUSER heartbeats ", 1)[1].split("```", 1)[0]
    rules = block.replace("a-long-random-password", "s3cret-for-tests").split()
    admin: coredis.Redis[str] = coredis.Redis.from_url(redis_server.url, decode_responses=True)
    async with admin:
        await admin.acl_setuser("heartbeats", "reset", *rules)
    url = redis_server.url.replace("redis://", "redis://heartbeats:s3cret-for-tests@", 1)
    bus, failed, fired = failures_and_fires()
    two_fires = arrival(bus, HeartbeatFired, 2)
    try:
        async with open_dispatcher(redis_config(url, "billing:heartbeats"), bus=bus) as first:
            first.schedule_heartbeat(
                ScheduleHeartbeat(
                    Report, "report", heartbeat_now() + 0.2, recurrence=FixedInterval(0.2)
                ),
                "alice",
            )
            with trio.fail_after(20):
                await two_fires.wait()
        assert failed == [] and RAN[:2] == [("report", "alice")] * 2
        outside = DispatcherConfig(
            heartbeat=HeartbeatConfig(
                kind="redis", settings={"url": url, "prefix": "elsewhere"}, signing_key=KEY
            )
        )
        async with open_dispatcher(outside) as second:
            assert second.heart is not None
            with pytest.raises(Exception, match="no permissions"):
                await second.heart.store.inspect()
    finally:
        cleanup: coredis.Redis[str] = coredis.Redis.from_url(redis_server.url)
        async with cleanup:
            await cleanup.acl_deluser(["heartbeats"])
