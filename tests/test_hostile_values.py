"""Hostile values: a job's knobs, the timekeeper and a handle used from the wrong trio run.

Each bad value is refused where it is written (an assignment, a class body), naming the job,
the setting and the value; the door's :func:`check_job_settings` catches what bypassed both;
the timekeeper never lets a bad deadline reach the one task that serves every job's timeout; a
handle awaited from another ``trio.run`` refuses instead of crashing the job's run.
"""

from __future__ import annotations

import enum
import logging
import math
import weakref
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.dispatch.timekeeper import Timekeeper
from nucleo_trio.jobs import (
    DEFAULT_TIMEOUT,
    DEFAULT_UPSTREAM_RETRIES,
    Doer,
    JobContext,
    JobHandle,
    Orchestrator,
    Tool,
    workflow,
)
from nucleo_trio.jobs.job import PRIORITY_RANGE, check_job_settings

from .conftest import settle
from .jobs_for_tests import Echo, Fn

NAN = float("nan")
INF = float("inf")


class Plain(Tool[str]):
    async def execute(self, context: JobContext) -> str:
        return "ok"


class Conductor(Orchestrator[str]):
    async def execute(self, context: JobContext) -> str:
        return "ok"


def plain() -> Plain:
    return Plain(workflow("u", "wf"))


# Each knob with the values it refuses, the error each is refused with, and what the message says.
BAD_TIMEOUTS: list[tuple[Any, type[Exception]]] = [
    (NAN, ValueError),
    (INF, ValueError),
    (-INF, ValueError),
    (0, ValueError),
    (0.0, ValueError),
    (-1, ValueError),
    (-1e-9, ValueError),
    (10**400, ValueError),  # past any float: as good as infinite
    (True, TypeError),
    (False, TypeError),
    ("10", TypeError),
    (b"10", TypeError),
    ([10], TypeError),
    (1j, TypeError),
]
BAD_PRIORITIES: list[tuple[Any, type[Exception]]] = [
    ("high", TypeError),
    (None, TypeError),
    (1.0, TypeError),
    (NAN, TypeError),
    (INF, TypeError),
    (True, TypeError),
    (PRIORITY_RANGE[1] + 1, ValueError),
    (PRIORITY_RANGE[0] - 1, ValueError),
    (10**400, ValueError),
]
BAD_RETRIES: list[tuple[Any, type[Exception]]] = [
    (-1, ValueError),
    (NAN, TypeError),
    (INF, TypeError),
    (2.0, TypeError),
    ("3", TypeError),
    (None, TypeError),
    (True, TypeError),
]
BAD_TOLERANCES: list[tuple[Any, type[Exception]]] = [
    (1, TypeError),
    (0, TypeError),
    ("no", TypeError),
    (None, TypeError),
]
HOSTILE: list[tuple[str, Any, type[Exception], str]] = [
    *(
        ("timeout", v, e, "timeout must be positive and finite seconds or None")
        for v, e in BAD_TIMEOUTS
    ),
    *(("priority", v, e, "priority must be") for v, e in BAD_PRIORITIES),
    *(("upstream_retries", v, e, "upstream_retries must be an int >= 0") for v, e in BAD_RETRIES),
    *(
        (
            "tolerates_dependency_failures",
            v,
            e,
            "tolerates_dependency_failures must be True or False",
        )
        for v, e in BAD_TOLERANCES
    ),
]


def _label(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 20 else text[:17] + "..."


# -- on assignment ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "error", "says"),
    HOSTILE,
    ids=[f"{s}={_label(v)}" for s, v, _, _ in HOSTILE],
)
def test_a_hostile_knob_is_refused_where_it_is_assigned(
    setting: str, value: Any, error: type[Exception], says: str
) -> None:
    """The assignment raises, naming the class, the setting, the value and the job; the job
    keeps the value it had."""
    job = plain()
    before = getattr(job, setting)
    with pytest.raises(error, match=f"^Plain.{says}") as caught:
        setattr(job, setting, value)
    assert job.job_id in str(caught.value)
    if isinstance(value, float) and math.isnan(value):
        assert "nan" in str(caught.value)
    assert getattr(job, setting) == before


def test_set_timeout_is_the_same_check() -> None:
    job = plain()
    with pytest.raises(ValueError, match=r"Plain.timeout must be positive .* got nan"):
        job.set_timeout(NAN)
    with pytest.raises(TypeError, match=r"got str '10'"):
        job.set_timeout("10")  # type: ignore[arg-type]
    assert job.timeout == DEFAULT_TIMEOUT


def test_good_values_are_kept_and_numbers_become_seconds() -> None:
    """An int timeout is stored as float seconds; int-likes (an IntEnum) serve as priorities
    and budgets; huge but finite is allowed."""

    class Level(enum.IntEnum):
        HIGH = 9

    job = plain()
    job.timeout = 5
    assert job.timeout == 5.0 and type(job.timeout) is float
    job.timeout = 1e300
    assert job.timeout == 1e300
    job.timeout = None
    assert job.timeout is None
    job.priority = Level.HIGH
    assert job.priority == 9 and type(job.priority) is int
    job.priority = PRIORITY_RANGE[0]
    assert job.priority == PRIORITY_RANGE[0]
    job.upstream_retries = 0
    assert job.upstream_retries == 0
    job.tolerates_dependency_failures = True
    assert job.tolerates_dependency_failures is True
    check_job_settings(job)


def test_a_message_shows_a_huge_value_cut_short() -> None:
    job = plain()
    with pytest.raises(TypeError) as caught:
        job.timeout = "x" * 10_000  # type: ignore[assignment]
    assert len(str(caught.value)) < 300


def test_a_knob_set_before_the_parent_constructor_still_names_the_class() -> None:
    class Early(Tool[str]):
        def __init__(self, parent: Any) -> None:
            self.timeout = NAN
            super().__init__(parent)

        async def execute(self, context: JobContext) -> str:
            return "ok"

    with pytest.raises(ValueError, match=r"^Early.timeout must be positive .* got nan$"):
        Early(workflow("u", "wf"))


def test_an_orchestrator_refuses_any_timeout_but_none() -> None:
    """TOOL-03: an orchestrator has no timeout; setting one is refused, None is accepted."""
    conductor = Conductor(workflow("u", "wf"))
    for value in (5.0, NAN, "10"):
        with pytest.raises(TypeError, match="is an orchestrator and has no timeout"):
            conductor.timeout = value  # type: ignore[assignment]
    conductor.timeout = None
    assert conductor.timeout is None
    check_job_settings(conductor)


# -- in a class body -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "error", "says"),
    HOSTILE,
    ids=[f"{s}={_label(v)}" for s, v, _, _ in HOSTILE],
)
def test_a_hostile_knob_in_a_class_body_is_refused_when_the_class_is_made(
    setting: str, value: Any, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=f"^Slow.{says}"):
        type("Slow", (Plain,), {setting: value})


def test_a_class_body_value_is_the_class_default_and_assignment_stays_checked() -> None:
    class Slow(Tool[str]):
        timeout = 600
        priority = 4
        upstream_retries = 0
        tolerates_dependency_failures = True

        async def execute(self, context: JobContext) -> str:
            return "ok"

    job = Slow(workflow("u", "wf"))
    assert (job.timeout, job.priority, job.upstream_retries) == (600.0, 4, 0)
    assert job.tolerates_dependency_failures is True
    with pytest.raises(ValueError, match="Slow.timeout"):
        job.timeout = NAN
    assert job.timeout == 600.0
    job.timeout = 2.0
    assert job.timeout == 2.0 and Slow(workflow("u", "wf")).timeout == 600.0
    # and the base keeps its own defaults
    assert (plain().timeout, plain().upstream_retries) == (
        DEFAULT_TIMEOUT,
        DEFAULT_UPSTREAM_RETRIES,
    )


def test_an_orchestrator_class_body_may_only_say_none() -> None:
    """TOOL-03: an orchestrator's timeout is always None, declared in its body or not."""
    with pytest.raises(TypeError, match="^Timed.timeout must be None: an orchestrator"):
        type("Timed", (Conductor,), {"timeout": 60.0})

    class Untimed(Doer[str]):
        timeout = None

        async def execute(self, context: JobContext) -> str:
            return "ok"

    job = Untimed(workflow("u", "wf"))
    assert job.timeout is None
    with pytest.raises(TypeError, match="has no timeout"):
        job.timeout = 1.0  # type: ignore[assignment]


def test_a_class_body_value_over_a_property_of_its_parent_is_kept_in_place() -> None:
    """A plain value overriding a subclass's own property is checked, then left where it is (it
    overrides that property, not the base's knob)."""

    class Computed(Plain):
        @property  # type: ignore[misc] # read-only on purpose
        def timeout(self) -> float:
            return 7.0

    class Fixed(Computed):
        timeout = 3.0

    assert Computed(workflow("u", "wf")).timeout == 7.0
    assert Fixed(workflow("u", "wf")).timeout == 3.0
    with pytest.raises(ValueError, match="^Broken.timeout"):
        type("Broken", (Computed,), {"timeout": -3.0})


# -- at the door -----------------------------------------------------------------------------


def _bypasses() -> list[tuple[str, Any, str]]:
    """Jobs whose knobs bypassed assignment and class definition, with what the door says."""
    cases: list[tuple[str, Any, str]] = []

    class Later(Plain):
        pass

    later = Later(workflow("u", "wf"))
    Later.timeout = NAN  # type: ignore[assignment] # replaced after the class was made
    cases.append(("class attribute replaced", later, r"Later.timeout must be positive .* got nan"))

    class Dynamic(Plain):
        @property  # type: ignore[misc] # read-only on purpose
        def priority(self) -> Any:
            return "high"

    cases.append(("property", Dynamic(workflow("u", "wf")), "Dynamic.priority must be an int"))

    written = plain()
    written._nucleo_timeout = -1.0  # written past the setter
    cases.append(("past the setter", written, r"Plain.timeout must be positive .* got -1.0"))

    retries = plain()
    retries._nucleo_retries = NAN  # type: ignore[assignment]
    cases.append(("retries", retries, "Plain.upstream_retries must be an int >= 0"))

    tolerant = plain()
    tolerant._nucleo_tolerates = "yes"  # type: ignore[assignment]
    cases.append(("tolerance", tolerant, "tolerates_dependency_failures must be True or False"))

    class Sneaky(Conductor):
        pass

    Sneaky.timeout = 5.0  # type: ignore[assignment]
    cases.append(("orchestrator", Sneaky(workflow("u", "wf")), "Sneaky.timeout must be None"))
    return cases


@pytest.mark.parametrize(("how", "job", "says"), _bypasses(), ids=[c[0] for c in _bypasses()])
def test_check_job_settings_catches_what_bypassed_the_setters(
    how: str, job: Any, says: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=says) as caught:
        check_job_settings(job)
    assert job.job_id in str(caught.value)


def test_check_job_settings_passes_every_default() -> None:
    for job in (plain(), Conductor(workflow("u", "wf")), Echo(workflow("u", "wf"), timeout=None)):
        check_job_settings(job)


# -- the timekeeper --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "error"),
    [(NAN, ValueError), ("soon", TypeError), (None, TypeError), (True, TypeError)],
)
async def test_the_timekeeper_refuses_a_when_that_is_no_time(when: Any, error: type) -> None:
    keeper = Timekeeper()
    with pytest.raises(error, match="Timekeeper.call_at: when must be a trio time"):
        keeper.call_at(when, lambda: None)
    assert len(keeper) == 0


async def test_a_refused_deadline_leaves_the_timekeeper_serving_everyone_else(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """A NaN among pending calls (item 8: it used to kill the keeper's task) is refused at the
    call; the calls around it run on time."""
    keeper = Timekeeper()
    await nursery.start(keeper.run)
    fired: list[tuple[str, float]] = []
    keeper.call_at(trio.current_time() + 5, lambda: fired.append(("late", trio.current_time())))
    with pytest.raises(ValueError):
        keeper.call_at(NAN, lambda: fired.append(("nan", trio.current_time())))
    keeper.call_at(trio.current_time() + 2, lambda: fired.append(("soon", trio.current_time())))
    await trio.sleep(10)
    assert fired == [("soon", 2.0), ("late", 5.0)]


async def test_a_raising_callback_is_logged_and_the_next_one_runs(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = Timekeeper()
    await nursery.start(keeper.run)
    fired: list[float] = []

    def boom() -> None:
        raise RuntimeError("boom")

    keeper.call_at(1, boom)
    keeper.call_at(1, lambda: fired.append(trio.current_time()))
    keeper.call_at(3, lambda: fired.append(trio.current_time()))
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.timekeeper"):
        await trio.sleep(5)
    assert fired == [1.0, 3.0]
    assert "a timed callback raised" in caplog.text


async def test_the_timekeeper_takes_ints_and_infinities(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """An int is a time; -inf is now; +inf, or an int past any float, is never (until
    cancelled)."""
    keeper = Timekeeper()
    await nursery.start(keeper.run)
    fired: list[str] = []
    keeper.call_at(2, lambda: fired.append("int"))
    keeper.call_at(-INF, lambda: fired.append("now"))
    never = keeper.call_at(INF, lambda: fired.append("never"))
    beyond = keeper.call_at(10**400, lambda: fired.append("beyond"))
    await trio.sleep(1e4)
    assert fired == ["now", "int"]
    assert len(keeper) == 2
    never.cancel()
    beyond.cancel()
    assert len(keeper) == 0


async def test_a_timer_that_ran_or_was_cancelled_keeps_nothing_of_its_callback(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """A cancelled call waits in the heap until it is popped or compacted away, and a job's
    deadline keeps its handle: neither keeps what the callback holds (a job's deadline, its
    resources and grant) alive for the collector to walk."""

    class Held:
        def fire(self) -> None:
            fired.append(trio.current_time())

    keeper = Timekeeper()
    await nursery.start(keeper.run)
    fired: list[float] = []
    cancelled, ran = Held(), Held()
    cancelled_ref, ran_ref = weakref.ref(cancelled), weakref.ref(ran)
    kept_cancelled = keeper.call_at(5, cancelled.fire)
    kept_ran = keeper.call_at(1, ran.fire)
    del cancelled, ran
    kept_cancelled.cancel()
    await trio.sleep(10)
    assert fired == [1.0]
    assert cancelled_ref() is None and ran_ref() is None
    assert kept_cancelled.cancelled and kept_ran.cancelled


# -- a handle and the trio run it belongs to -------------------------------------------------


async def test_a_handle_awaited_from_another_trio_run_is_refused_and_the_job_runs_on(
    dispatcher: JobDispatcher,
) -> None:
    """Item 10: ``trio.run(handle.result)`` on another thread used to crash the dispatcher's run
    when the job settled. It is refused at once, naming the job and the bridge; the bridge
    works; ``outcome()`` answers from any thread once the handle is done."""
    release = trio.Event()

    async def wait(context: JobContext) -> str:
        await release.wait()
        return "done"

    handle = dispatcher.submit(Fn(workflow("u", "wf"), wait, timeout=None))
    await settle()

    def foreign_run() -> BaseException | None:
        try:
            trio.run(handle.result)
        except RuntimeError as exc:
            return exc
        return None

    refused = await trio.to_thread.run_sync(foreign_run)
    assert isinstance(refused, RuntimeError)
    assert handle.job.name in str(refused)
    assert "in another trio run" in str(refused)
    assert "trio.from_thread.run(handle.result, trio_token=handle.trio_token)" in str(refused)

    def foreign_cancel() -> BaseException | None:
        try:
            trio.run(trio.lowlevel.checkpoint)  # a run of its own, then a plain call outside it
            handle.cancel()
        except RuntimeError as exc:
            return exc
        return None

    refused_cancel = await trio.to_thread.run_sync(foreign_cancel)
    assert isinstance(refused_cancel, RuntimeError)
    assert "handle.cancel() was called outside any trio run" in str(refused_cancel)
    assert not handle.done

    bridged: list[str] = []

    async def bridge() -> None:
        token = handle.trio_token
        bridged.append(
            await trio.to_thread.run_sync(
                lambda: trio.from_thread.run(handle.result, trio_token=token)
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge)
        await settle()
        release.set()
    assert bridged == ["done"]
    assert await handle.result() == "done"
    assert await trio.to_thread.run_sync(handle.outcome) == "done"
    # settled or not, another run is still another run: the answer does not depend on timing
    assert isinstance(await trio.to_thread.run_sync(foreign_run), RuntimeError)
    # and the dispatcher kept serving
    assert await dispatcher.submit(Echo(workflow("u", "wf"), 5)).result() == 5


async def test_a_handle_built_outside_any_run_belongs_to_the_first_run_that_waits() -> None:
    job = plain()
    built: list[JobHandle[str]] = []

    def build() -> None:
        built.append(JobHandle(job, JobContext(job, job.user_id)))

    await trio.to_thread.run_sync(build)
    (handle,) = built
    assert handle.trio_token is None
    handle._settle(result="ok")
    assert await handle.result() == "ok"
    assert handle.trio_token is trio.lowlevel.current_trio_token()


@pytest.mark.parametrize(
    ("timeout", "error"), [(NAN, ValueError), ("1", TypeError), (True, TypeError)]
)
async def test_result_refuses_a_wait_that_is_no_time(timeout: Any, error: type) -> None:  # noqa: ASYNC109
    job = plain()
    handle = JobHandle(job, JobContext(job, job.user_id))
    with pytest.raises(error, match=r"result\(timeout=...\) takes seconds or None"):
        await handle.result(timeout=timeout)


async def test_result_with_a_zero_or_negative_wait_only_looks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    job = plain()
    handle: JobHandle[str] = JobHandle(job, JobContext(job, job.user_id))
    for wait in (0, -1.0, -INF):
        with pytest.raises(trio.TooSlowError):
            await handle.result(timeout=wait)
    assert trio.current_time() == 0
    handle._settle(result="ok")
    assert await handle.result(timeout=-1) == "ok"
