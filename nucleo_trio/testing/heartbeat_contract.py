"""The heartbeat store contract as a base test class: what the dispatcher's Heart relies on.

A plugin that keeps the heartbeat schedule somewhere of its own subclasses
:class:`HeartbeatStoreContract` in a test module and says how to build a fresh, empty store;
pytest collects every check for that store::

    from nucleo_trio.testing import HeartbeatStoreContract
    from my_stores import PostgresHeartbeatStore


    class TestPostgresStore(HeartbeatStoreContract):
        shared = True  # several workers on one database share the schedule

        def make_store(self):
            return PostgresHeartbeatStore(DSN, table=fresh_table_name())

        def open_again(self, store):
            return PostgresHeartbeatStore(DSN, table=store.table)

Build each store without a codec: a durable store
(:class:`~nucleo_trio.heartbeat.DurableHeartbeatStore`) is handed one by the contract, as a
dispatcher hands its own at start. A store whose schedule lives outside the process says how to
reach that schedule again with :meth:`~HeartbeatStoreContract.open_again`, and the checks of
what survives a close, and of rows signed with another key, run too; one whose handles may be
used at once (several workers on one schedule) sets :attr:`~HeartbeatStoreContract.shared`,
and each slot is then held to firing once across two handles. One that can edit its own rows
behind its back answers :meth:`~HeartbeatStoreContract.tamper`, and an edited row must be
refused at its fire. A check that needs what a store does not have returns at once.

Like :class:`~nucleo_trio.testing.AccountContract`, the checks are plain synchronous methods
that raise :class:`AssertionError`, each in a ``trio.run`` of its own, so they need no pytest.
A store may wait on a thread or a socket, which a virtual clock would jump over, so these runs
keep the real clock: none of them sleeps for long (the check through a dispatcher waits for
three slots a fifth of a second apart), and each gives up after
:attr:`~HeartbeatStoreContract.time_limit` seconds instead of hanging on a store that never
answers. Every store a check opens is closed when it ends.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

import attrs
import trio

from ..bus import events as ev
from ..dispatch import DispatcherConfig, HeartbeatConfig, open_dispatcher
from ..errors import NucleoSystemError, UsageRuntimeError, UsageValueError
from ..guardrails import ReadOnlyScope, ScopeGuard, TenantScope
from ..heartbeat import (
    REFUSED_USER,
    DurableHeartbeatStore,
    FixedInterval,
    Heartbeat,
    HeartbeatCodec,
    HeartbeatJobs,
    HeartbeatRowRefused,
    HeartbeatStore,
    RefusedHeartbeatRow,
    ScheduleHeartbeat,
    SigningKey,
    heartbeat_now,
    is_genuine,
)
from ..heartbeat.records import _mint_from
from ..jobs import JobContext, Tool, workflow

__all__ = ["HeartbeatStoreContract"]

_KEY = "the heartbeat store contract's key"
_OTHER_KEY = "another deployment's key, as long"
_USER = "contract-user"
_GUARD = ScopeGuard(TenantScope("contract"), ReadOnlyScope())

_OPERATIONS = (
    "enqueue",
    "cancel",
    "poll_due",
    "peek_next_run_at",
    "re_enqueue_if_absent",
    "inspect",
    "aclose",
)
"""The store's coroutines; ``on_change`` is the one plain call."""


_RUNS: trio.lowlevel.RunVar[list[tuple[str, str, float]]] = trio.lowlevel.RunVar(
    "nucleo_trio_heartbeat_contract_runs"
)
"""What each fired job saw, in the run of the dispatcher check: its id, its user, its instant."""


class _ContractBeat(Tool[None]):
    """The job class the contract's heartbeats name; only the dispatcher check builds it."""

    async def execute(self, context: JobContext) -> None:
        _RUNS.get().append((self.job_id, context.user_id, heartbeat_now()))


def _codec(key: str = _KEY) -> HeartbeatCodec:
    return HeartbeatCodec(HeartbeatJobs([_ContractBeat]), SigningKey(key))


def _beat(heartbeat_id: str, run_at: float, **spec: Any) -> Heartbeat:
    """A genuine heartbeat for the contract's user and guard, minted as the runtime mints one."""
    return _mint_from(ScheduleHeartbeat(_ContractBeat, heartbeat_id, run_at, **spec), _USER, _GUARD)


def _full(heartbeat_id: str, run_at: float) -> Heartbeat:
    """A heartbeat with every field set: what a row must carry through a store and back."""
    return _beat(
        heartbeat_id,
        run_at,
        conversation_id="conversation-1",
        input={"title": "q3", "pages": 4, "tags": ["a", None]},
        recurrence=FixedInterval(60),
    )


def _forged(heartbeat_id: str) -> Heartbeat:
    """A Heartbeat put together past its constructor: what no store may take."""
    fake = object.__new__(Heartbeat)
    fields = attrs.asdict(ScheduleHeartbeat(_ContractBeat, heartbeat_id, 10.0), recurse=False)
    for name, value in {**fields, "user_id": "mallory", "scope_guard": ScopeGuard()}.items():
        object.__setattr__(fake, name, value)
    return fake


def _ids(heartbeats: Sequence[Heartbeat]) -> list[str]:
    return [heartbeat.id for heartbeat in heartbeats]


def _in_trio(
    check: Callable[[HeartbeatStoreContract], Awaitable[None]],
) -> Callable[[HeartbeatStoreContract], None]:
    """Run an async check in a ``trio.run`` of its own on the real clock, within
    :attr:`HeartbeatStoreContract.time_limit`, closing every store it opened."""

    def run(self: HeartbeatStoreContract) -> None:
        async def body() -> None:
            self._opened = []
            try:
                with trio.fail_after(self.time_limit):
                    await check(self)
            except trio.TooSlowError:
                raise AssertionError(
                    f"{check.__name__} did not finish within {self.time_limit} s: the store "
                    "never answered"
                ) from None
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(self.time_limit):
                    for store in self._opened:
                        await store.aclose()

        trio.run(body)

    functools.update_wrapper(run, check)
    # pytest reads a test's arguments through __wrapped__, and would take the async original
    # for a trio test of its own.
    del run.__wrapped__  # type: ignore[attr-defined]
    return run


class _Heard:
    """A change listener that counts what it was told."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


class _Records(logging.Handler):
    """Keeps the records of WARNING and above that reach the root logger while installed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class HeartbeatStoreContract:
    """The heartbeat store contract as a base test class; see the module docstring.

    Subclasses implement :meth:`make_store`, which must return a fresh, empty store built
    without a codec each time it is called, and may set :attr:`shared` and :attr:`time_limit`
    and override :meth:`open_again` and :meth:`tamper`.
    """

    shared: ClassVar[bool] = False
    """Whether two stores on one backing store may be used at once and share the schedule (the
    Redis store: each slot fires on one worker). ``False`` (the default) for a store that
    expects to be alone on its backing store, as the SQLite store does."""

    time_limit: ClassVar[float] = 30.0
    """Seconds one check may take before it fails as hung."""

    _opened: list[HeartbeatStore]

    # -- what a subclass provides ----------------------------------------------------------------
    def make_store(self) -> HeartbeatStore:
        """A fresh store with an empty schedule, built without a codec; every check calls it for
        the stores it needs."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_store() to return a fresh, empty "
            "heartbeat store"
        )

    def open_again(self, store: HeartbeatStore) -> HeartbeatStore | None:
        """Another store on the schedule ``store`` keeps (the same file, the same keys), built
        without a codec; ``None`` (the default) when the schedule lives only in ``store``. The
        checks close ``store`` before they open another unless :attr:`shared` is set."""
        return None

    async def tamper(self, store: HeartbeatStore, heartbeat_id: str) -> bool:
        """Change the stored row of ``heartbeat_id`` (its user, say) the way someone who can
        write the backing store could, without the signing key, and answer ``True``; answer
        ``False`` (the default) when the store keeps no rows to edit."""
        return False

    # -- helpers -----------------------------------------------------------------------------------
    def _fresh(self, *, key: str | None = _KEY) -> HeartbeatStore:
        """A store from :meth:`make_store`, handed a codec under ``key`` if it is durable
        (``None``: left without one), and closed when the check ends."""
        return self._adopted(self.make_store(), "make_store()", key)

    def _adopted(self, store: object, made_by: str, key: str | None) -> HeartbeatStore:
        assert isinstance(store, HeartbeatStore), (
            f"{made_by} returned a {type(store).__name__}, which does not implement the "
            "HeartbeatStore protocol"
        )
        self._opened.append(store)
        if isinstance(store, DurableHeartbeatStore):
            assert store.codec is None, (
                f"{made_by} gave the store a codec: build it without one, the contract hands "
                "it its own as a dispatcher does"
            )
            if key is not None:
                store.use_codec(_codec(key))
        return store

    async def _again(self, store: HeartbeatStore, *, key: str = _KEY) -> HeartbeatStore | None:
        """Another handle on ``store``'s schedule (``store`` closed first unless
        :attr:`shared`), or ``None`` when the store has no schedule to reopen."""
        if not self.shared:
            await self._close(store)
        again = self.open_again(store)
        if again is None:
            return None
        return self._adopted(again, "open_again()", key)

    async def _close(self, store: HeartbeatStore) -> None:
        if store in self._opened:
            self._opened.remove(store)
        await store.aclose()

    # -- the checks --------------------------------------------------------------------------------
    @_in_trio
    async def test_it_is_a_heartbeat_store(self) -> None:
        """Every operation but ``on_change`` is a coroutine; ``on_change`` is a plain call that
        answers an unregister. A durable store keeps the codec it is given, takes the same one
        again, and refuses another (``UsageValueError``) and anything that is not a codec
        (``TypeError``)."""
        # Holds HB-03, HB-16.
        store = self._fresh(key=None)
        for name in _OPERATIONS:
            method = getattr(store, name)
            assert inspect.iscoroutinefunction(method), f"{name} is not a coroutine function"
        unregister = store.on_change(lambda: None)
        assert not inspect.isawaitable(unregister), "on_change answered an awaitable"
        assert callable(unregister), f"on_change answered {unregister!r}, not an unregister"
        unregister()
        if not isinstance(store, DurableHeartbeatStore):
            return
        codec = _codec()
        store.use_codec(codec)
        assert store.codec is codec, "use_codec did not keep the codec it was given"
        store.use_codec(codec)
        try:
            store.use_codec(_codec())
        except UsageValueError:
            pass
        else:
            raise AssertionError("use_codec took a second, different codec")
        try:
            store.use_codec("a codec")  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            raise AssertionError("use_codec took a string for a codec")
        assert store.codec is codec, "a refused codec replaced the one the store had"

    @_in_trio
    async def test_an_empty_store_holds_nothing(self) -> None:
        """A fresh schedule: no next instant, nothing due however late, nothing listed, and
        cancelling an id that was never scheduled answers ``None`` without an error."""
        # Holds HB-13, HB-14.
        store = self._fresh()
        assert await store.peek_next_run_at() is None, "an empty store names a next instant"
        assert await store.poll_due(1e12) is None, "an empty store answered a due heartbeat"
        assert await store.inspect() == (), "an empty store lists heartbeats"
        assert await store.cancel("never-scheduled") is None, "cancelling nothing answered"

    @_in_trio
    async def test_the_most_overdue_falls_due_first_and_never_a_future_one(self) -> None:
        """``poll_due(now)`` answers the earliest run instant first, ties broken by id, and
        never one after ``now``; ``peek_next_run_at`` answers the earliest instant held, and
        ``inspect`` lists the schedule in the order it falls due."""
        # Holds HB-13.
        store = self._fresh()
        for heartbeat_id, run_at in (("c", 30.0), ("m", 10.0), ("z", 10.0), ("a", 20.0)):
            await store.enqueue(_beat(heartbeat_id, run_at))
        listed = _ids(await store.inspect())
        assert listed == ["m", "z", "a", "c"], f"inspect listed {listed}, not in order"
        assert await store.peek_next_run_at() == 10.0, "the next instant is not the earliest"
        assert await store.poll_due(9.5) is None, "a heartbeat due at 10 came out at 9.5"
        polled = [await store.poll_due(25.0) for _ in range(3)]
        assert [beat.id if beat else None for beat in polled] == ["m", "z", "a"], (
            f"at 25 the store answered {[beat.id if beat else None for beat in polled]}, not "
            "m and z (due at 10, by id) then a (due at 20)"
        )
        assert await store.poll_due(25.0) is None, "c falls due at 30, not at 25"
        assert await store.peek_next_run_at() == 30.0, "after the polls the next instant is 30"
        assert _ids(await store.inspect()) == ["c"], "a polled heartbeat is still listed"

    @_in_trio
    async def test_what_comes_back_is_what_went_in(self) -> None:
        """A heartbeat comes back from ``inspect``, a displacing ``enqueue``, ``cancel`` and
        ``poll_due`` equal to what was stored: job class, id, instant, conversation, input,
        recurrence, user and scope guard, and genuine."""
        # Holds HB-03, HB-11, HB-14.
        store = self._fresh()
        first, rebound = _full("full", 10.0), _full("full", 12.0)
        await store.enqueue(first)
        (listed,) = await store.inspect()
        displaced = await store.enqueue(rebound)
        cancelled = await store.cancel("full")
        await store.enqueue(first)
        polled = await store.poll_due(10.0)
        answers = [
            ("inspect", listed, first),
            ("enqueue", displaced, first),
            ("cancel", cancelled, rebound),
            ("poll_due", polled, first),
        ]
        for operation, answer, expected in answers:
            assert answer is not None, f"{operation} answered None"
            assert answer == expected, f"{operation} answered {answer!r}, not {expected!r}"
            assert is_genuine(answer), f"{operation} answered a heartbeat the runtime did not mint"
            assert answer.input == expected.input and answer.scope_guard == _GUARD, (
                f"{operation} lost the input or the guard: {answer.input!r}, {answer.scope_guard}"
            )

    @_in_trio
    async def test_one_heartbeat_per_id_and_the_latest_wins(self) -> None:
        """Enqueueing an id already held replaces it and answers the one it displaced; one
        entry stays. ``cancel`` answers what it removed, then ``None``."""
        # Holds HB-07, HB-14.
        store = self._fresh()
        first = _beat("x", 10.0, input="first")
        assert await store.enqueue(first) is None, "a new id displaced something"
        second = _beat("x", 20.0, input="second")
        displaced = await store.enqueue(second)
        assert displaced == first, f"the rebinding displaced {displaced!r}, not the first"
        assert await store.inspect() == (second,), "the rebinding did not replace the first"
        assert await store.peek_next_run_at() == 20.0, "the displaced instant is still held"
        assert await store.cancel("x") == second, "cancel did not answer what it removed"
        assert await store.cancel("x") is None, "a second cancel answered something"
        assert await store.inspect() == (), "a cancelled heartbeat is still listed"

    @_in_trio
    async def test_the_next_slot_yields_to_a_rebinding(self) -> None:
        """``re_enqueue_if_absent`` stores the recurrence's next slot only when the id is free:
        an operator who rebound the id while its slot fired keeps the rebinding (``False``), a
        free id takes the slot (``True``), and the slot falls due at its instant."""
        # Holds HB-15.
        store = self._fresh()
        await store.enqueue(_beat("x", 10.0, recurrence=FixedInterval(10)))
        fired = await store.poll_due(10.0)
        assert fired is not None, "x did not fall due at 10"
        rebinding = _beat("x", 50.0, input="operator")
        await store.enqueue(rebinding)
        assert await store.re_enqueue_if_absent(fired.next(20.0)) is False, (
            "the next slot was stored over a rebinding"
        )
        assert await store.inspect() == (rebinding,), "the rebinding did not survive the slot"
        await store.cancel("x")
        await store.enqueue(_beat("y", 15.0, recurrence=FixedInterval(10)))
        taken = await store.poll_due(15.0)
        assert taken is not None, "y did not fall due at 15"
        following = taken.next(25.0)
        assert await store.re_enqueue_if_absent(following) is True, "a free id refused its slot"
        assert await store.inspect() == (following,), "the next slot is not on the schedule"
        assert await store.poll_due(24.0) is None, "the next slot came out before its instant"
        assert await store.poll_due(25.0) == following, "the next slot did not fall due"

    @_in_trio
    async def test_a_slot_put_back_unfired_falls_due_again(self) -> None:
        """A stopping Heart puts a slot it took and did not fire back as it was, with
        ``re_enqueue_if_absent``: it is on the schedule again and falls due at the next poll,
        for the next start to fire."""
        # Holds HB-13, HB-15.
        store = self._fresh()
        once = _beat("once", 10.0)
        await store.enqueue(once)
        taken = await store.poll_due(10.0)
        assert taken == once, "once did not fall due at 10"
        assert await store.re_enqueue_if_absent(taken) is True, "the unfired slot was refused"
        assert await store.inspect() == (once,), "the slot put back is not listed"
        assert await store.poll_due(10.0) == once, "the slot put back did not fall due again"

    @_in_trio
    async def test_every_head_change_is_told(self) -> None:
        """The change listener is called, by the time the operation returns, whenever the
        earliest entry appears, is replaced or leaves (enqueue, cancel, poll, re-enqueue); a
        listener unregistered hears no more. A store may tell more often, never less."""
        # Holds HB-16.
        store = self._fresh()
        heard = _Heard()
        unregister = store.on_change(heard)
        changes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("enqueueing the first heartbeat", lambda: store.enqueue(_beat("head", 20.0))),
            ("enqueueing a sooner one", lambda: store.enqueue(_beat("sooner", 10.0))),
            ("cancelling the head", lambda: store.cancel("sooner")),
            ("re-enqueueing a sooner one", lambda: store.re_enqueue_if_absent(_beat("s", 5.0))),
            ("polling the head", lambda: store.poll_due(5.0)),
        ]
        for what, change in changes:
            before = heard.calls
            await change()
            assert heard.calls > before, f"the listener was not told of {what}"
        unregister()
        before = heard.calls
        await store.enqueue(_beat("soonest", 1.0))
        await store.cancel("soonest")
        assert heard.calls == before, "an unregistered listener was still told"

    @_in_trio
    async def test_a_listener_that_raises_is_logged_and_the_others_still_hear(self) -> None:
        """One listener that raises neither fails the operation nor keeps the change from the
        others, and is logged (at WARNING or above)."""
        # Holds HB-16.
        store = self._fresh()

        def broken() -> None:
            raise RuntimeError("a dashboard that is down")

        heard = _Heard()
        store.on_change(broken)
        store.on_change(heard)
        records = _Records()
        root = logging.getLogger()
        root.addHandler(records)
        try:
            await store.enqueue(_beat("x", 10.0))
        except RuntimeError as exc:
            raise AssertionError(f"a listener's failure failed the enqueue: {exc}") from exc
        finally:
            root.removeHandler(records)
        assert heard.calls >= 1, "a listener that raised kept the change from the others"
        assert records.records, "a listener that raised was not logged"
        assert _ids(await store.inspect()) == ["x"], "the enqueue did not store the heartbeat"

    @_in_trio
    async def test_a_heartbeat_the_runtime_did_not_mint_is_refused(self) -> None:
        """``enqueue`` and ``re_enqueue_if_absent`` refuse a Heartbeat built past the runtime's
        mints with a ``TypeError`` naming its id, and anything that is not a Heartbeat with one
        naming its type; nothing is stored."""
        # Holds HB-03.
        store = self._fresh()
        forged = _forged("forged-beat")
        assert not is_genuine(forged)
        refusals: list[tuple[str, Callable[[], Awaitable[object]], str]] = [
            ("enqueue of a forged heartbeat", lambda: store.enqueue(forged), "forged-beat"),
            (
                "re_enqueue_if_absent of a forged heartbeat",
                lambda: store.re_enqueue_if_absent(forged),
                "forged-beat",
            ),
            (
                "enqueue of a ScheduleHeartbeat",
                lambda: store.enqueue(ScheduleHeartbeat(_ContractBeat, "spec", 10.0)),  # type: ignore[arg-type]
                "ScheduleHeartbeat",
            ),
        ]
        for what, call, named in refusals:
            try:
                answer = await call()
            except TypeError as refusal:
                assert named in str(refusal), f"the refusal of the {what} does not name {named!r}"
            else:
                raise AssertionError(f"the {what} answered {answer!r} instead of a TypeError")
        assert await store.inspect() == (), "a refused heartbeat is on the schedule"

    @_in_trio
    async def test_closing_twice_is_harmless(self) -> None:
        """``aclose`` lets go of what the store holds open, and a second call raises nothing:
        the program that built a store may close it after the dispatcher closed it at
        shutdown."""
        # Holds no numbered rule: aclose is idempotent, as trio's resources' is.
        store = self._fresh()
        await store.enqueue(_beat("x", 10.0))
        self._opened.remove(store)
        await store.aclose()
        await store.aclose()

    @_in_trio
    async def test_a_durable_store_writes_only_rows_that_read_back(self) -> None:
        """A durable store with no codec refuses to write a row (``UsageRuntimeError`` naming
        the codec it needs); with one, a value that would not read back equal is refused when
        it is stored (``NucleoSystemError`` naming the heartbeat), and nothing is written."""
        # Holds HB-05, HB-11 (the input a fire hands over is the input stored).
        bare = self._fresh(key=None)
        if not isinstance(bare, DurableHeartbeatStore):
            return
        try:
            await bare.enqueue(_beat("x", 10.0))
        except UsageRuntimeError as refusal:
            assert "codec" in str(refusal), f"the refusal {str(refusal)!r} does not name a codec"
        else:
            raise AssertionError("a durable store with no codec wrote a row")
        store = self._fresh()
        unreadable = _beat("keyed", 10.0, input={1: "an int key JSON makes a string"})
        try:
            await store.enqueue(unreadable)
        except NucleoSystemError as refusal:
            assert "keyed" in str(refusal), f"the refusal {str(refusal)!r} does not name 'keyed'"
        else:
            raise AssertionError("a durable store stored an input that does not read back")
        assert await store.inspect() == (), "a refused heartbeat was written"

    @_in_trio
    async def test_another_store_finds_the_schedule_where_it_was_left(self) -> None:
        """Opened again on the same backing store (after a close, unless the store is shared),
        the schedule holds every heartbeat with all its fields, the next slot put back
        included, and none that was taken out."""
        # Holds HB-11, HB-13.
        store = self._fresh()
        if self.open_again(store) is None:
            return
        await store.enqueue(_full("kept", 20.0))
        await store.enqueue(_beat("taken", 5.0))
        await store.enqueue(_beat("recurring", 6.0, recurrence=FixedInterval(10)))
        taken = await store.poll_due(5.0)
        assert taken is not None and taken.id == "taken", "taken did not fall due at 5"
        recurring = await store.poll_due(6.0)
        assert recurring is not None, "recurring did not fall due at 6"
        assert await store.re_enqueue_if_absent(recurring.next(16.0)) is True
        again = await self._again(store)
        assert again is not None
        found = await again.inspect()
        expected = (_beat("recurring", 16.0, recurrence=FixedInterval(10)), _full("kept", 20.0))
        assert found == expected, f"opened again, the schedule is {found}, not {expected}"
        assert all(is_genuine(heartbeat) for heartbeat in found)
        assert await again.peek_next_run_at() == 16.0

    @_in_trio
    async def test_a_row_signed_with_another_key_is_refused_at_its_fire(self) -> None:
        """Read by a store holding another key, a row is refused: it falls due as a stand-in
        whose job class (a ``RefusedHeartbeatRow``) fails the fire with
        ``HeartbeatRowRefused`` naming the id, under no user, guard, input or recurrence of the
        row's, and it is off the schedule after."""
        # Holds HB-03.
        store = self._fresh()
        if not isinstance(store, DurableHeartbeatStore) or self.open_again(store) is None:
            return
        await store.enqueue(_full("signed", 10.0))
        other = await self._again(store, key=_OTHER_KEY)
        assert other is not None
        await _refused_at_its_fire(other, "signed")

    @_in_trio
    async def test_an_edited_row_is_refused_at_its_fire(self) -> None:
        """A row changed behind the store's back (:meth:`tamper`) no longer matches its
        signature: it falls due as the refused stand-in, never as what it now says."""
        # Holds HB-03.
        store = self._fresh()
        if not isinstance(store, DurableHeartbeatStore):
            return
        await store.enqueue(_full("edited", 10.0))
        if not await self.tamper(store, "edited"):
            return
        await _refused_at_its_fire(store, "edited")

    @_in_trio
    async def test_each_slot_fires_once_across_two_stores(self) -> None:
        """Two stores on one schedule, polled at once as two workers poll it, each putting its
        next slot back: every slot of every heartbeat comes out exactly once, and a one-shot
        heartbeat one worker took never comes out on the other."""
        # Holds HB-13, HB-15 (one winner per slot, across workers).
        if not self.shared:
            return
        first = self._fresh()
        second = await self._again(first)
        assert second is not None, "a shared store must answer open_again()"
        await first.enqueue(_beat("once", 1.0))
        taken = await first.poll_due(2.0)
        assert taken is not None and taken.id == "once", "once did not fall due at 1"
        assert await second.poll_due(2.0) is None, "the other store took a slot already taken"
        assert await first.peek_next_run_at() is None, "nothing else is scheduled"
        assert await second.poll_due(2.0) is None, "a fired one-shot slot came out again"
        for heartbeat_id in ("a", "b", "c"):
            await first.enqueue(_beat(heartbeat_id, 10.0, recurrence=FixedInterval(10)))
        assert _ids(await second.inspect()) == ["a", "b", "c"], "the other store sees otherwise"
        fired: list[tuple[str, float]] = []

        async def work(store: HeartbeatStore) -> None:
            while (heartbeat := await store.poll_due(45.0)) is not None:
                fired.append((heartbeat.id, heartbeat.run_at))
                assert heartbeat.recurrence is not None
                following = heartbeat.next(heartbeat.recurrence.next_after(heartbeat.run_at))
                await store.re_enqueue_if_absent(following)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(work, first)
            nursery.start_soon(work, second)
        slots = [(i, at) for i in ("a", "b", "c") for at in (10.0, 20.0, 30.0, 40.0)]
        assert sorted(fired) == slots, f"the two stores fired {sorted(fired)}, not {slots} once"
        assert await second.peek_next_run_at() == 50.0

    @_in_trio
    async def test_a_listener_hears_what_another_store_changes(self) -> None:
        """A listener on one store is told when another store on the same schedule moves its
        head, so a worker wakes for a heartbeat another worker scheduled sooner."""
        # Holds HB-16.
        if not self.shared:
            return
        listening = self._fresh()
        other = await self._again(listening)
        assert other is not None, "a shared store must answer open_again()"
        told = trio.Event()
        listening.on_change(told.set)
        run_at = 1e9
        # The other store's news may take a moment to be heard: move the head until it is.
        while not told.is_set():
            run_at -= 1
            await other.enqueue(_beat(f"sooner-{run_at:.0f}", run_at))
            with trio.move_on_after(0.05):
                await told.wait()

    @_in_trio
    async def test_through_a_dispatcher_each_slot_fires_on_time(self) -> None:
        """Given to a real dispatcher (which hands a durable store its codec), a heartbeat
        recurring every 0.2 s fires its first three slots in order, each once, for the user it
        was scheduled for and never before its instant."""
        # Holds HB-01, HB-09, HB-12.
        store = self._fresh(key=None)
        runs: list[tuple[str, str, float]] = []
        _RUNS.set(runs)
        fires: list[ev.HeartbeatFired] = []
        failures: list[ev.HeartbeatFireFailed] = []
        third = trio.Event()

        def watch(event: ev.HeartbeatEvent) -> None:
            if isinstance(event, ev.HeartbeatFireFailed):
                failures.append(event)
            elif isinstance(event, ev.HeartbeatFired):
                fires.append(event)
                if len(fires) == 3:
                    third.set()

        config = DispatcherConfig(heartbeat=HeartbeatConfig(signing_key=_KEY))
        self._opened.remove(store)  # the dispatcher closes it
        async with open_dispatcher(
            config, heartbeat_store=store, heartbeat_jobs=[_ContractBeat]
        ) as dispatcher:
            dispatcher.bus.subscribe(watch, event_type=ev.HeartbeatEvent)
            period = 0.2
            first = heartbeat_now() + period
            spec = ScheduleHeartbeat(
                _ContractBeat, "contract-beat", first, recurrence=FixedInterval(period)
            )
            dispatcher.schedule_heartbeat(spec, _USER, scope_guard=_GUARD)
            await third.wait()
        assert not failures, f"a fire failed: {failures[0].message}"
        slots = [first, first + period, first + period + period]
        assert [fire.heartbeat.run_at for fire in fires[:3]] == slots, (
            f"the slots fired at {[fire.heartbeat.run_at for fire in fires[:3]]}, not {slots}"
        )
        ran = {job_id: (user, at) for job_id, user, at in runs}
        for fire in fires:
            assert fire.job_id in ran, f"the fire of {fire.heartbeat.run_at} ran no job"
            user, at = ran[fire.job_id]
            assert user == _USER, f"a fire ran for {user!r}, not {_USER!r}"
            assert at >= fire.heartbeat.run_at, "a slot fired before its instant"


async def _refused_at_its_fire(store: HeartbeatStore, heartbeat_id: str) -> None:
    """The row of ``heartbeat_id`` in ``store`` falls due as the refused stand-in and is gone
    after; what ``inspect`` lists for it never carries the row's user."""
    for listed in await store.inspect():
        assert listed.user_id != _USER, f"a refused row is listed as {listed!r}"
    polled = await store.poll_due(1e12)
    assert polled is not None, f"the row of {heartbeat_id!r} did not fall due"
    assert polled.id == heartbeat_id, f"the refused row fell due as {polled.id!r}"
    assert issubclass(polled.job_class, RefusedHeartbeatRow), (
        f"the row of {heartbeat_id!r} fell due as {polled!r}, not as a refused row"
    )
    assert polled.user_id == REFUSED_USER, f"a refused row runs for {polled.user_id!r}"
    assert polled.recurrence is None and polled.input is None, "a refused row keeps its values"
    assert polled.scope_guard == ScopeGuard(), "a refused row keeps its guard"
    try:
        polled.job_class(workflow(REFUSED_USER, "contract"))
    except HeartbeatRowRefused as refusal:
        assert refusal.heartbeat_id == heartbeat_id, f"the refusal names {refusal.heartbeat_id}"
    else:
        raise AssertionError("building the refused row's job did not raise HeartbeatRowRefused")
    assert await store.poll_due(1e12) is None, "the refused row fell due twice"
    assert await store.inspect() == (), "the refused row is still on the schedule"
