"""The dispatcher inside the trio program around it: outer cancel scopes, exceptions at the
boundary, KeyboardInterrupt and SystemExit, a cancelled or re-entered shutdown, a dead run, and
a job that will not end. Every scenario is driven from outside, and every one ends with every
handle settled exactly once, one terminal event per job, and every account back to zero.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.jobs import JobContext, JobHandle, JobRequirements, workflow
from nucleo_trio.jobs.job import AbstractJob

from .conftest import Recorder, settle
from .jobs_for_tests import Echo, Fn

# -- a program with jobs in every state ----------------------------------------------------------


class Program:
    """One dispatcher's worth of jobs, each held in a different place, and the checks that
    everything settled once and nothing is held."""

    def __init__(self) -> None:
        self.gate = CountingGate("slot", 1)
        self.rec = Recorder()
        self.handles: list[JobHandle[Any]] = []
        self.dispatcher: JobDispatcher | None = None

    def holds_slot(self, name: str, seconds: float = 1000.0) -> AbstractJob[Any]:
        return Echo(
            workflow("u", name),
            "held",
            sleep=seconds,
            requirements=lambda: JobRequirements().require_rate_limiter(self.gate),
            timeout=600.0,
        )

    def fill(self, d: JobDispatcher) -> None:
        """A running job on the slot, one parked behind it, one waiting on it as a dependency,
        and a free job sleeping (no resources)."""
        self.dispatcher = d
        running = d.submit(self.holds_slot("running"))
        self.handles.append(running)
        self.handles.append(d.submit(self.holds_slot("parked")))
        self.handles.append(d.submit(Echo(workflow("u", "dep"), "x"), dependencies=[running]))
        self.handles.append(d.submit(Echo(workflow("u", "free"), "free", sleep=1000.0)))

    def check_settled(self, *, all_cancelled: bool = True) -> None:
        d = self.dispatcher
        assert d is not None
        assert not d.is_running
        for handle in self.handles:
            assert handle.done, f"{handle} never settled"
            assert handle.error is not None
            if all_cancelled:
                assert isinstance(handle.error, errors.JobCancelledError), handle.error
            terminal = [e for e in self.rec.of(handle.job_id) if isinstance(e, ev.TerminalEvent)]
            assert len(terminal) == 1, (handle, terminal)
            assert not _has_group(handle.error)
        assert self.gate.in_use == 0
        assert d.running_jobs == 0
        assert d.admission.queue_size == 0
        assert d.queued_jobs == (0, 0)

    @asynccontextmanager
    async def open(self, **kwargs: Any) -> AsyncIterator[JobDispatcher]:
        async with open_dispatcher(DispatcherConfig(seed=3), **kwargs) as d:
            d.bus.subscribe(self.rec)
            self.dispatcher = d
            yield d


def _has_group(exc: BaseException | None) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BaseExceptionGroup):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# -- an outer cancel scope, at every phase -----------------------------------------------------


async def test_an_outer_scope_around_an_idle_dispatcher_catches_only_its_own_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The scope catches its own cancellation and nothing else leaves (no bus error)."""
    program = Program()
    with trio.move_on_after(5) as scope:
        async with program.open():
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(5)
    program.check_settled()


async def test_an_outer_scope_cancelled_while_jobs_run_park_and_wait_settles_every_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """EXEC-09: running, parked, dependency-waiting and free jobs all settle as cancelled, with
    one terminal event each, before the block is left; at once, with no grace wait."""
    program = Program()
    with trio.move_on_after(5) as scope:
        async with program.open() as d:
            program.fill(d)
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(5)  # no 30 s grace wait
    program.check_settled()


async def test_an_outer_scope_cancelled_while_the_block_drains_settles_every_handle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The block ends normally and the graceful stop waits for running jobs; the outer scope's
    deadline lands in that wait and turns it into a fast stop."""
    program = Program()
    with trio.move_on_after(10) as scope:
        async with program.open() as d:
            program.fill(d)
            await trio.sleep(1)
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(10)
    # The graceful stop refused the parked job first (the seed's order); the rest are cancelled.
    program.check_settled(all_cancelled=False)
    parked = program.handles[1]
    assert isinstance(parked.error, errors.UncorrectableError)
    assert all(isinstance(h.error, errors.JobCancelledError) for h in program.handles[::2])


async def test_an_outer_scope_cancelled_during_an_explicit_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """shutdown() is cancelled part-way by the scope; the stop still finishes, fast."""
    program = Program()
    with trio.move_on_after(10) as scope:
        async with program.open() as d:
            program.fill(d)
            await trio.sleep(1)
            await d.shutdown(timeout=60)
            pytest.fail("shutdown() returned inside a cancelled scope")
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(10)
    program.check_settled(all_cancelled=False)


async def test_a_scope_cancelled_before_the_dispatcher_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Starting inside an already-cancelled scope: the dispatcher starts and stops in order,
    and the scope catches its own cancellation."""
    program = Program()
    with trio.CancelScope() as scope:
        scope.cancel()
        async with program.open():
            await trio.sleep_forever()
    assert scope.cancelled_caught
    # Whether the block ran before the cancel landed is trio's to decide; if it did, the
    # dispatcher it saw has stopped.
    assert program.dispatcher is None or not program.dispatcher.is_running


async def test_fail_after_raises_too_slow_bare(autojump_clock: trio.testing.MockClock) -> None:
    """Under fail_after the program sees TooSlowError itself, not a group."""
    program = Program()
    with pytest.raises(trio.TooSlowError) as caught:
        with trio.fail_after(5):
            async with program.open() as d:
                program.fill(d)
                await trio.sleep_forever()
    assert type(caught.value) is trio.TooSlowError
    program.check_settled()


async def test_a_cancelled_parent_nursery(autojump_clock: trio.testing.MockClock) -> None:
    """A program running in a nursery that its parent cancels: everything settles, nothing
    but the cancellation leaves, and the parent's scope catches it."""
    program = Program()

    async def run_program() -> None:
        async with program.open() as d:
            program.fill(d)
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_program)
        await trio.sleep(3)
        nursery.cancel_scope.cancel()
    assert nursery.cancel_scope.cancelled_caught
    program.check_settled()


async def test_run_started_in_a_nursery_that_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`nursery.start(dispatcher.run)` and a cancelled nursery: the run stops in order, is seen
    as dead (is_running false, submit raises naming the stop, shutdown returns)."""
    program = Program()
    d = JobDispatcher(DispatcherConfig(seed=3))
    async with trio.open_nursery() as nursery:
        await nursery.start(d.run)
        d.bus.subscribe(program.rec)
        program.fill(d)
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    program.check_settled()
    with pytest.raises(RuntimeError, match="the dispatcher has stopped"):
        d.submit(Echo(workflow("u", "late")))
    await d.shutdown()  # returns at once
    with pytest.raises(RuntimeError, match="stopped"):
        d.submit_with_delay(Echo(workflow("u", "later")), 1)


# -- exceptions at the boundary -------------------------------------------------------------------


async def test_what_the_block_raises_comes_out_as_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ValueError raised in the block leaves as itself (not in a group), and the jobs it
    left behind are cancelled at once."""
    program = Program()
    boom = ValueError("the user's own bug")
    with pytest.raises(ValueError) as caught:
        async with program.open() as d:
            program.fill(d)
            await trio.sleep(1)
            raise boom
    assert caught.value is boom
    assert trio.current_time() == pytest.approx(1)
    program.check_settled()


async def test_a_config_error_comes_out_bare() -> None:
    """Start-up errors are raised before the block, bare."""
    with pytest.raises(errors.ConfigError):
        async with open_dispatcher(
            DispatcherConfig.from_mapping({"limiters": {"x": {"kind": "no-such-kind"}}})
        ):
            pytest.fail("the block ran")


async def test_a_failure_to_start_comes_out_bare(autojump_clock: trio.testing.MockClock) -> None:
    """A part that fails while the dispatcher starts (here the heartbeat store's schedule
    listener) leaves open_dispatcher as itself."""

    class BrokenStore:
        def on_change(self, callback: Callable[[], None]) -> Callable[[], None]:
            raise OSError("the schedule store is unreachable")

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(name)

    with pytest.raises(OSError, match="unreachable"):
        async with open_dispatcher(heartbeat_store=BrokenStore()):  # type: ignore[arg-type]
            pytest.fail("the block ran")


# -- KeyboardInterrupt and SystemExit from anywhere ---------------------------------------------


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
async def test_a_fatal_exception_in_a_job_stops_everything_and_leaves_as_itself(
    autojump_clock: trio.testing.MockClock, fatal: type[BaseException]
) -> None:
    """KeyboardInterrupt or SystemExit raised by a job is no job failure: the dispatcher stops
    at once (no grace wait), every handle settles as cancelled, and it leaves as itself."""
    program = Program()

    async def interrupt(context: JobContext) -> None:
        await trio.sleep(2)
        raise fatal()

    with pytest.raises(fatal) as caught:
        async with program.open() as d:
            program.fill(d)
            program.handles.append(d.submit(Fn(workflow("u", "fatal"), interrupt)))
            await trio.sleep_forever()
    assert type(caught.value) is fatal
    assert trio.current_time() == pytest.approx(2)
    program.check_settled()


async def test_a_keyboard_interrupt_in_an_observer_stops_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An observer that raises KeyboardInterrupt: the bus keeps delivering the terminal events,
    the dispatcher stops at once, and the interrupt leaves as itself."""
    program = Program()

    def observer(event: ev.JobEvent) -> None:
        if isinstance(event, ev.JobCompletedEvent):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        async with program.open() as d:
            d.bus.subscribe(observer)
            program.fill(d)
            d.submit(Echo(workflow("u", "quick"), "done", sleep=2))
            await trio.sleep_forever()
    assert trio.current_time() == pytest.approx(2)
    program.check_settled()


async def test_a_keyboard_interrupt_in_the_block_stops_everything(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ctrl-C lands in the program's main task (trio delivers it there: the dispatcher's own
    tasks are KI-protected); raised in the block it cancels every job and leaves as itself."""
    program = Program()
    with pytest.raises(KeyboardInterrupt):
        async with program.open() as d:
            program.fill(d)
            await trio.sleep(1)
            raise KeyboardInterrupt
    program.check_settled()


# -- shutdown: cancelled, repeated, from inside a job --------------------------------------------


async def test_a_cancelled_shutdown_goes_on_and_every_later_call_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first shutdown() is cancelled part-way; the stop goes on in the dispatcher's own
    task, and a second call (and the block's own) waits for it and returns."""
    program = Program()
    async with program.open() as d:
        program.fill(d)
        await trio.sleep(1)
        with trio.move_on_after(2) as first:
            await d.shutdown(timeout=5)
        assert first.cancelled_caught
        assert not program.handles[0].done  # still in its 5 s grace
        await d.shutdown()
        assert trio.current_time() == pytest.approx(6)
        await d.shutdown()  # idempotent
    program.check_settled(all_cancelled=False)


async def test_shutdown_called_from_inside_a_job_starts_the_stop_and_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job cannot wait for its own end: its shutdown() call starts the stop and returns; the
    job then finishes within the stop's grace."""
    program = Program()
    calls: list[float] = []

    async def stop_everything(context: JobContext) -> str:
        await context.dispatcher.shutdown(timeout=20)
        calls.append(trio.current_time())
        await trio.sleep(1)
        return "asked"

    async with program.open() as d:
        program.fill(d)
        asker = d.submit(Fn(workflow("u", "asker"), stop_everything))
        assert await asker.result() == "asked"
        await d.shutdown()
    assert calls == [0]
    assert trio.current_time() == pytest.approx(20)
    program.check_settled(all_cancelled=False)


async def test_shutdown_refuses_a_nan_timeout() -> None:
    """A timeout that is not a number of seconds is refused by name before anything stops."""
    async with open_dispatcher() as d:
        with pytest.raises(ValueError, match=r"shutdown\(timeout\).*nan"):
            await d.shutdown(timeout=float("nan"))
        assert d.is_running


# -- a job that will not end ----------------------------------------------------------------------


async def test_a_job_stuck_in_a_shield_is_named_and_does_not_hold_shutdown(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait after interrupting jobs is bounded: a job stuck in a shielded section is
    settled as cancelled, shutdown() returns, and a warning names the job, its class, and the
    line it is stuck on, repeated while its task lives."""
    program = Program()

    async def stubborn(context: JobContext) -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(100)  # the line the warning names

    caplog.set_level(logging.WARNING, logger="nucleo_trio.dispatcher")
    returned_at: list[float] = []
    async with program.open() as d:
        d.interrupt_window = 10
        program.handles.append(d.submit(Fn(workflow("u", "stubborn"), stubborn, timeout=600)))
        await trio.sleep(1)
        await d.shutdown(timeout=2)
        returned_at.append(trio.current_time())
        assert program.handles[0].done
    assert returned_at == [pytest.approx(13)]  # 1 + 2 s grace + 10 s window
    assert trio.current_time() == pytest.approx(100)  # the block waited for the task itself
    program.check_settled()
    warnings = [r.getMessage() for r in caplog.records if "has not ended" in r.getMessage()]
    assert len(warnings) >= 2  # at the window's end, then again while it ran
    assert "(Fn, workflow" in warnings[0] and "10.0 s after shutdown" in warnings[0]
    assert "test_host_contract.py" in warnings[0] and "in stubborn" in warnings[0]
    assert "20.0 s after shutdown" in warnings[1]


# -- the dispatcher keeps no trace of what it is done with ---------------------------------------


async def test_a_delayed_submission_outlived_by_the_dispatcher_says_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """DelayedSubmission.handle() of a submission the stop overtook raises a clear error
    naming the stop, not a bare AssertionError."""
    async with open_dispatcher() as d:
        later = d.submit_with_delay(Echo(workflow("u", "later")), 60)
        await trio.sleep(1)
        await d.shutdown()
    with pytest.raises(errors.NucleoSystemError, match="stopped before the delay passed"):
        await later.handle()


async def test_a_cancelled_wait_for_a_never_submitted_dependency_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A job waiting for a dependency that is never submitted is cancelled; the dispatcher
    forgets the wait."""
    async with open_dispatcher() as d:
        never = Echo(workflow("u", "never"))
        waiting = d.submit(Echo(workflow("u", "waiting")), dependencies=[never])
        await settle()
        assert d._graph.awaits_submission(never.job_id)
        waiting.cancel("not needed")
        with pytest.raises(errors.JobCancelledError):
            await waiting.result()
        assert d._graph.held() == {
            "edges": 0,
            "waited_on": 0,
            "submitted_waiters": 0,
            "awaiting_submission": 0,
        }


# -- the dependency graph at scale ----------------------------------------------------------------


async def test_a_deep_chain_of_live_dependents_and_a_cycle_at_its_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 3,000-deep chain of jobs named by their job objects before submission: no
    RecursionError, and the job that would close a cycle is refused with the cycle named."""
    root = workflow("u", "chain")
    jobs = [Echo(root, i) for i in range(3000)]
    async with open_dispatcher() as d:
        # jobs[i] depends on jobs[i + 1]: every job is named by a live dependent before it is
        # submitted, so every submission walks the chain below it.
        handles = [d.submit(jobs[i], dependencies=[jobs[i + 1]]) for i in range(len(jobs) - 1)]
        with pytest.raises(ValueError, match="Cycle detected") as caught:
            d.submit(jobs[-1], dependencies=[jobs[0]])
        assert caught.value.args[0].count("->") == len(jobs)
        last = d.submit(jobs[-1])
        await last.result()
        assert await handles[0].result() == 0
