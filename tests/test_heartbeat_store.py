"""The heartbeat store contract (HB-13..16), run against every store nucleo_trio ships, and the
records' own validation (HB-17).

One parametrized suite holds the in-memory store and the SQLite store to the same contract: the
most overdue entry first and never a future one, one entry per id with the displaced one
answered, a compare-and-set re-enqueue that yields to a rebind, the change listener on every
head change, and no forged heartbeat, ever. The SQLite store's own tests follow: what it can
write, what it refuses, what it reads back after a reopen. The SQLite store waits on its
worker thread and never on a clock, so nothing here needs one; its writer is held in
``test_store_writers.py``.
"""

from __future__ import annotations

import copy
import datetime
import logging
import pickle
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from nucleo_trio.bus.events import HeartbeatRequested
from nucleo_trio.errors import NucleoSystemError
from nucleo_trio.guardrails import CompositeScope, ReadOnlyScope, ScopeGuard, TenantScope
from nucleo_trio.heartbeat import (
    FixedInterval,
    Heartbeat,
    HeartbeatCodec,
    HeartbeatJobs,
    HeartbeatStore,
    InMemoryHeartbeatStore,
    Recurrence,
    ScheduleHeartbeat,
    SigningKey,
    SQLiteHeartbeatStore,
    UnknownHeartbeatJob,
    UnregisteredHeartbeatJob,
    is_genuine,
)
from nucleo_trio.heartbeat.records import _mint_from
from nucleo_trio.jobs import JobContext, Tool, workflow

from .test_scope import RegionScope


class Nightly(Tool[str]):
    """The job class the stored heartbeats name; the store never runs it."""

    async def execute(self, context: JobContext) -> str:
        return "ran"


class Tick(Tool[str]):
    """Another job class: one a second process registers instead of Nightly."""

    async def execute(self, context: JobContext) -> str:
        return "tick"


@attrs.frozen
class Report:
    """An input the SQLite store writes as JSON and reads back equal."""

    title: str
    pages: int


GUARD = ScopeGuard(TenantScope("acme"))
KEY = SigningKey("a test key, never a real one")


def codec(*jobs: type[Tool[Any]]) -> HeartbeatCodec:
    """What a dispatcher would hand its durable store: these classes, and the test key."""
    return HeartbeatCodec(HeartbeatJobs(jobs or (Nightly,)), KEY)


def beat(
    heartbeat_id: str,
    run_at: float,
    *,
    user: str = "alice",
    guard: ScopeGuard = GUARD,
    **spec: Any,
) -> Heartbeat:
    """A genuine heartbeat, minted the way the runtime mints one."""
    return _mint_from(ScheduleHeartbeat(Nightly, heartbeat_id, run_at, **spec), user, guard)


def forged(heartbeat_id: str = "forged", run_at: float = 1.0) -> Heartbeat:
    """A Heartbeat put together by hand, past its constructor: what no store may take."""
    fake = object.__new__(Heartbeat)
    fields = attrs.asdict(ScheduleHeartbeat(Nightly, heartbeat_id, run_at), recurse=False)
    for name, value in {**fields, "user_id": "mallory", "scope_guard": ScopeGuard()}.items():
        object.__setattr__(fake, name, value)
    return fake


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HeartbeatStore]:
    """Each shipped store, fresh."""
    built: HeartbeatStore
    if request.param == "memory":
        built = InMemoryHeartbeatStore()
    else:
        built = SQLiteHeartbeatStore(tmp_path / "beats.db", codec=codec())
    yield built
    await built.aclose()


def ids(heartbeats: tuple[Heartbeat, ...]) -> list[str]:
    return [heartbeat.id for heartbeat in heartbeats]


# -- the contract --------------------------------------------------------------------------------


async def test_poll_due_answers_the_most_overdue_first_and_never_a_future_one(
    store: HeartbeatStore,
) -> None:
    """HB-13: poll_due(now) returns the most overdue entry first and never a future one;
    peek_next_run_at() answers the next run instant (None when empty)."""
    assert await store.peek_next_run_at() is None
    assert await store.poll_due(1e12) is None
    for heartbeat in (beat("c", 30.0), beat("a", 10.0), beat("b", 20.0)):
        await store.enqueue(heartbeat)
    assert await store.peek_next_run_at() == 10.0
    assert await store.poll_due(5.0) is None, "nothing is due before 10"
    first = await store.poll_due(25.0)
    second = await store.poll_due(25.0)
    assert first is not None and second is not None
    assert (first.id, second.id) == ("a", "b")
    assert await store.poll_due(25.0) is None, "c falls due at 30"
    assert await store.peek_next_run_at() == 30.0
    assert ids(await store.inspect()) == ["c"]


async def test_entries_due_at_one_instant_come_out_by_id(store: HeartbeatStore) -> None:
    """HB-13: a tie on the run instant is broken by id, in both stores."""
    for name in ("m", "z", "a"):
        await store.enqueue(beat(name, 5.0))
    polled = [await store.poll_due(5.0) for _ in range(3)]
    assert [heartbeat.id for heartbeat in polled if heartbeat is not None] == ["a", "m", "z"]


async def test_rebind_displaces_and_cancel_removes(store: HeartbeatStore) -> None:
    """HB-14: enqueue of an existing id answers the displaced entry and keeps one entry;
    cancel(id) answers the removed entry, or None for an absent id (no error)."""
    first = beat("x", 10.0, input="first")
    assert await store.enqueue(first) is None
    second = beat("x", 20.0, input="second")
    displaced = await store.enqueue(second)
    assert displaced == first and displaced.run_at == 10.0 and displaced.input == "first"
    assert ids(await store.inspect()) == ["x"]
    assert (await store.inspect())[0] == second
    assert await store.cancel("x") == second
    assert await store.cancel("x") is None
    assert await store.cancel("never-scheduled") is None
    assert await store.inspect() == ()


async def test_the_recurrence_compare_and_set_yields_to_a_competing_rebind(
    store: HeartbeatStore,
) -> None:
    """HB-15: re_enqueue_if_absent(next) answers False when an entry with that id exists, so an
    operator's rebind wins; it answers True when the slot is empty."""
    rebound = beat("x", 50.0, input="operator")
    await store.enqueue(rebound)
    following = beat("x", 11.0, input="recurrence")
    assert await store.re_enqueue_if_absent(following) is False
    assert (await store.inspect()) == (rebound,)
    await store.cancel("x")
    assert await store.re_enqueue_if_absent(following) is True
    assert (await store.inspect()) == (following,)


async def test_head_changes_fire_the_listener(store: HeartbeatStore) -> None:
    """HB-16: the change listener fires on every head change: one enqueue plus one cancel give
    two calls; an entry behind the head changes nothing; an unregistered listener hears no more."""
    calls: list[int] = []
    unregister = store.on_change(lambda: calls.append(1))
    await store.enqueue(beat("x", 10.0))
    await store.cancel("x")
    assert len(calls) == 2

    await store.enqueue(beat("head", 10.0))
    await store.enqueue(beat("later", 20.0))  # behind the head
    assert len(calls) == 3
    await store.enqueue(beat("sooner", 5.0))  # a new head
    assert len(calls) == 4
    assert await store.re_enqueue_if_absent(beat("soonest", 1.0)) is True
    assert len(calls) == 5
    assert await store.poll_due(1.0) is not None  # the head leaves
    assert len(calls) == 6
    unregister()
    await store.cancel("sooner")
    assert len(calls) == 6


async def test_a_listener_that_raises_is_logged_and_the_others_still_run(
    store: HeartbeatStore, caplog: pytest.LogCaptureFixture
) -> None:
    """HB-16: a failing listener does not keep the change from the others."""

    def broken() -> None:
        raise RuntimeError("dashboard down")

    heard: list[int] = []
    store.on_change(broken)
    store.on_change(lambda: heard.append(1))
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.heartbeat"):
        await store.enqueue(beat("x", 10.0))
    assert heard == [1]
    assert "change listener raised" in caplog.text


async def test_a_forged_heartbeat_cannot_be_enqueued(store: HeartbeatStore) -> None:
    """HB-03: a Heartbeat built past the two mints is refused by enqueue and by the
    recurrence's re-enqueue, and the schedule stays empty."""
    fake = forged()
    assert not is_genuine(fake)
    with pytest.raises(TypeError, match="forged heartbeat 'forged'.*JobContext.publish"):
        await store.enqueue(fake)
    with pytest.raises(TypeError, match="forged heartbeat"):
        await store.re_enqueue_if_absent(fake)
    with pytest.raises(TypeError, match="holds Heartbeats, got ScheduleHeartbeat"):
        await store.enqueue(ScheduleHeartbeat(Nightly, "spec", 1.0))  # type: ignore[arg-type]
    assert await store.inspect() == ()


# -- the records ---------------------------------------------------------------------------------


def test_a_heartbeat_has_no_public_way_in() -> None:
    """HB-03: no constructor, no mutation, no pickling; a copy is the same object, and a spec
    alone never becomes a stored heartbeat on the bus."""
    with pytest.raises(TypeError, match="no public constructor"):
        Heartbeat(Nightly, "x", 1.0)
    genuine = beat("x", 1.0)
    assert is_genuine(genuine)
    with pytest.raises(AttributeError, match="immutable"):
        genuine.user_id = "mallory"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del genuine.scope_guard
    assert copy.copy(genuine) is genuine and copy.deepcopy(genuine) is genuine
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(genuine)
    with pytest.raises(TypeError, match="forged Heartbeat"):
        HeartbeatRequested(heartbeat=forged())
    with pytest.raises(TypeError, match="must be a Heartbeat, got ScheduleHeartbeat"):
        HeartbeatRequested(heartbeat=ScheduleHeartbeat(Nightly, "x", 1.0))  # type: ignore[arg-type]


def test_bare_schedule_heartbeat_validates() -> None:
    """HB-17: ValueError for a missing job class, a blank id, a missing run instant, a zero (or
    negative) FixedInterval and a Heartbeat with a blank user; wrong types are TypeErrors."""
    with pytest.raises(ValueError, match="needs a job class, got None"):
        ScheduleHeartbeat(None, "x", 1.0)  # type: ignore[arg-type]
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="needs a non-blank id"):
            ScheduleHeartbeat(Nightly, blank, 1.0)
    with pytest.raises(ValueError, match="needs a run instant"):
        ScheduleHeartbeat(Nightly, "x", None)  # type: ignore[arg-type]
    for period in (0, 0.0, -1, datetime.timedelta(0), float("inf")):
        with pytest.raises(ValueError, match="positive, finite period"):
            Recurrence.FixedInterval(period)
    with pytest.raises(ValueError, match="non-blank user"):
        _mint_from(ScheduleHeartbeat(Nightly, "x", 1.0), " ", ScopeGuard())

    with pytest.raises(TypeError, match="must be a job class"):
        ScheduleHeartbeat(str, "x", 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="epoch seconds or an aware datetime"):
        ScheduleHeartbeat(Nightly, "x", "tomorrow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a time zone"):
        ScheduleHeartbeat(Nightly, "x", datetime.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="finite instant"):
        ScheduleHeartbeat(Nightly, "x", float("nan"))
    with pytest.raises(TypeError, match="must be a Recurrence"):
        ScheduleHeartbeat(Nightly, "x", 1.0, recurrence=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="conversation_id must be a non-blank string"):
        ScheduleHeartbeat(Nightly, "x", 1.0, conversation_id=" ")
    with pytest.raises(TypeError, match="seconds or a timedelta"):
        FixedInterval("hourly")  # type: ignore[arg-type]

    aware = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    assert ScheduleHeartbeat(Nightly, "x", aware).run_at == aware.timestamp()
    assert FixedInterval(datetime.timedelta(minutes=1)).period == 60.0
    assert Recurrence.FixedInterval is FixedInterval


def test_next_copies_everything_but_the_instant() -> None:
    """HB-11: next(instant) keeps the job class, id, conversation id, input, recurrence, user
    and the very same guard instance; only the run instant changes, and the copy is genuine."""
    guard = ScopeGuard(TenantScope("acme"), RegionScope("emea"))
    original = beat(
        "x",
        10.0,
        user="bob",
        guard=guard,
        conversation_id="conv-1",
        input=Report("q3", 4),
        recurrence=FixedInterval(60),
    )
    following = original.next(70.0)
    assert is_genuine(following) and following is not original
    assert following.run_at == 70.0 and original.run_at == 10.0
    assert following.scope_guard is original.scope_guard
    for name in ("job_class", "id", "conversation_id", "input", "recurrence", "user_id"):
        assert getattr(following, name) == getattr(original, name), name
    assert following.spec == attrs.evolve(original.spec, run_at=70.0)


# -- the SQLite store ----------------------------------------------------------------------------


async def test_the_sqlite_store_reads_back_what_it_wrote_after_a_reopen(tmp_path: Path) -> None:
    """HB-11, HB-13: a reopened file holds every heartbeat with its user, guard (composites
    included), conversation, typed input and recurrence, due in the same order."""
    path = tmp_path / "beats.db"
    guard = ScopeGuard(
        CompositeScope(TenantScope("acme"), RegionScope("emea")), ReadOnlyScope(), GUARD
    )
    written = [
        beat(
            "report",
            20.0,
            user="bob",
            guard=guard,
            conversation_id="conv-9",
            input=Report("q3", 4),
            recurrence=FixedInterval(3600),
        ),
        beat("plain", 10.0, input=["a", 1, None]),
        beat("counted", 30.0, input=7),
    ]
    first = SQLiteHeartbeatStore(path, codec=codec())
    for heartbeat in written:
        await first.enqueue(heartbeat)
    await first.aclose()
    with pytest.raises(RuntimeError, match="is closed"):
        await first.peek_next_run_at()

    reopened = SQLiteHeartbeatStore(str(path), codec=codec())
    try:
        restored = await reopened.inspect()
        assert ids(restored) == ["plain", "report", "counted"]
        assert list(restored) == sorted(written, key=lambda heartbeat: heartbeat.run_at)
        assert all(is_genuine(heartbeat) for heartbeat in restored)
        report = restored[1]
        assert report.scope_guard == guard and report.input == Report("q3", 4)
        assert report.user_id == "bob" and report.job_class is Nightly
        assert report.recurrence == FixedInterval(3600) and report.conversation_id == "conv-9"
    finally:
        await reopened.aclose()


async def test_the_sqlite_store_refuses_what_it_could_not_read_back(tmp_path: Path) -> None:
    """An input JSON changes is refused when stored, by name, and nothing is written; a job
    class needs no import path, only a name in the registry (a class defined in a function is
    named and read back by the same codec)."""
    store = SQLiteHeartbeatStore(tmp_path / "beats.db", codec=codec())

    class Local(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            return "x"

    try:
        with pytest.raises(NucleoSystemError, match=r"the input \{1: 'a'\} does not survive JSON"):
            await store.enqueue(beat("keys", 1.0, input={1: "a"}))
        with pytest.raises(NucleoSystemError, match="the input cannot be written as JSON"):
            await store.enqueue(beat("set", 1.0, input={1, 2}))
        assert await store.inspect() == ()
        await store.enqueue(_mint_from(ScheduleHeartbeat(Local, "local", 1.0), "alice", GUARD))
        (local,) = await store.inspect()
        assert local.job_class is Local
    finally:
        await store.aclose()


async def test_a_row_whose_job_class_is_not_registered_fails_its_fire_and_keeps_its_slot(
    tmp_path: Path,
) -> None:
    """HB-06, HB-13: a signed row naming a job this process did not register is restored with
    a stand-in class that raises UnknownHeartbeatJob, naming the job, when the fire builds it;
    its recurrence is kept and written back under the same name, so a process that registered
    the class later fires it."""
    path = tmp_path / "beats.db"
    writer = SQLiteHeartbeatStore(path, codec=codec())
    await writer.enqueue(beat("gone", 1.0, recurrence=FixedInterval(60)))
    await writer.aclose()

    store = SQLiteHeartbeatStore(path, codec=codec(Tick))
    try:
        polled = await store.poll_due(10.0)
        assert polled is not None and polled.id == "gone" and polled.user_id == "alice"
        assert issubclass(polled.job_class, UnregisteredHeartbeatJob)
        with pytest.raises(UnknownHeartbeatJob, match="'tests.test_heartbeat_store:Nightly'"):
            polled.job_class(workflow("alice", "fire"))
        assert await store.re_enqueue_if_absent(polled.next(61.0))
    finally:
        await store.aclose()
    reader = SQLiteHeartbeatStore(path, codec=codec())
    try:
        (kept,) = await reader.inspect()
        assert (kept.job_class, kept.run_at, kept.user_id) == (Nightly, 61.0, "alice")
    finally:
        await reader.aclose()


def test_the_sqlite_store_refuses_a_file_that_is_not_its_own(tmp_path: Path) -> None:
    """A file with someone else's 'heartbeats' table, or no usable path, is refused by name."""
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE heartbeats (id TEXT, beats INTEGER)")
    with pytest.raises(NucleoSystemError, match="not the store's"):
        SQLiteHeartbeatStore(path)
    with pytest.raises(NucleoSystemError, match="opening the heartbeat store"):
        SQLiteHeartbeatStore(tmp_path / "missing-dir" / "beats.db")
    with pytest.raises(ValueError, match="needs a database path"):
        SQLiteHeartbeatStore(" ")


async def test_the_shipped_stores_satisfy_the_protocol() -> None:
    """Both stores are HeartbeatStores, as the hook that chooses one checks."""
    durable = SQLiteHeartbeatStore(":memory:")
    assert isinstance(InMemoryHeartbeatStore(), HeartbeatStore)
    assert isinstance(durable, HeartbeatStore)
    assert "open" in repr(durable) and "0 scheduled" in repr(InMemoryHeartbeatStore())
    await durable.aclose()
    assert "closed" in repr(durable)
