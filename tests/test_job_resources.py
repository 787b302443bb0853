"""JobResources: demand assembly, materialization under the grant, transactions, close."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import Admission, CountingGate, Demand, ElasticWindow, HttpConnectionGate
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import JobDeadlockError, UncorrectableError, suppressed
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, Orchestrator, workflow
from nucleo_trio.resources import (
    CommitError,
    DBHandle,
    GrantReleaseError,
    JobResources,
    ResourceCloseError,
    demand_of,
)

from .admission_doubles import Meter
from .conftest import settle
from .db_doubles import ProviderFault, RecordingProvider, SlowClose
from .jobs_for_tests import Fn, naps

HTTP = HttpConnectionGate(10)


class Search(ElasticWindow):
    max_requests = 5
    base_window = 1.0


def names(demand: Demand) -> list[str]:
    return [entry.limiter.limiter_name for entry in demand.entries]


async def opened(
    *providers: RecordingProvider, extra: Demand | None = None, read_only: bool = False
) -> tuple[Admission, JobResources]:
    """Admit one permit per provider (plus ``extra``) and materialize the handles."""
    admission = Admission()
    demand = extra or Demand()
    for provider in providers:
        demand.add(provider.admission())
    grant = await admission.admit(demand)
    resources = JobResources(admission, grant, providers, read_only=read_only)
    await resources.materialize()
    return admission, resources


# -- demand assembly ------------------------------------------------------------------------------


def test_no_requirements_and_empty_requirements_demand_nothing() -> None:
    """JR-01: None requirements (an orchestrator's) and empty ones give an empty demand."""
    assert demand_of(None, HTTP).is_empty
    assert demand_of(JobRequirements(), HTTP).is_empty


def test_the_demand_is_assembled_in_order_from_the_requirements() -> None:
    """JR-02: the http gate when needed, each custom limiter with its amount in declaration
    order, then one unit permit on each declared provider's gate."""
    quota, slots = CountingGate("quota", 5), CountingGate("slots", 3)
    orders, audit = RecordingProvider("orders"), RecordingProvider("audit")
    requirements = (
        JobRequirements()
        .require_database(orders)
        .require_rate_limiter(quota, 2)
        .require_http()
        .require_rate_limiter(slots)
        .require_database(audit)
    )
    demand = demand_of(requirements, HTTP, [orders, audit])
    assert names(demand) == ["http", "quota", "slots", "db:orders", "db:audit"]
    entries = {entry.limiter.limiter_name: entry for entry in demand.entries}
    assert demand.amounts_on(entries["quota"]) == (2,)
    assert demand.amounts_on(entries["db:orders"]) == (None,)


def test_a_window_or_an_explicit_flag_needs_the_http_gate() -> None:
    """JR-03: http is needed when set explicitly or when any custom limiter needs it (every
    elastic window); a plain gate alone does not bring it."""
    plain = JobRequirements().require_rate_limiter(CountingGate("quota", 5))
    assert not plain.needs_http
    assert names(demand_of(plain, HTTP)) == ["quota"]
    window = Search("search")
    windowed = JobRequirements().require_rate_limiter(window)
    assert windowed.needs_http
    assert names(demand_of(windowed, HTTP)) == ["http", "search"]
    assert JobRequirements().require_http().needs_http


def test_requiring_a_limiter_again_replaces_its_amount() -> None:
    """JR-04: a None limiter is refused; the same limiter again replaces its amount; the amount
    is what the demand carries (3 for 3, None for a unit permit)."""
    with pytest.raises(ValueError, match="must not be None"):
        JobRequirements().require_rate_limiter(None)  # type: ignore[arg-type]
    quota = CountingGate("quota", 5)
    requirements = JobRequirements().require_rate_limiter(quota, 1).require_rate_limiter(quota, 3)
    assert [(r.limiter, r.amount) for r in requirements.limiters] == [(quota, 3)]
    demand = demand_of(requirements, HTTP)
    assert demand.amounts_on(demand.entries[0]) == (3,)
    unit = demand_of(JobRequirements().require_rate_limiter(quota), HTTP)
    assert unit.amounts_on(unit.entries[0]) == (None,)


def test_a_database_alone_makes_a_job_resourceful() -> None:
    """JR-05: requires resources = databases, OR custom limiters, OR http needed."""
    assert not JobRequirements().has_resources
    assert JobRequirements().require_database("orders").has_resources
    assert JobRequirements().require_http().has_resources
    assert JobRequirements().require_rate_limiter(CountingGate("q", 1)).has_resources
    with pytest.raises(ValueError, match="provider name"):
        JobRequirements().require_database("  ")


async def test_a_database_job_without_a_timeout_is_refused_before_admission(
    dispatcher: JobDispatcher,
) -> None:
    """JR-05: a job that needs resources must declare a timeout; the dispatcher refuses it
    before admission (the message mentions the timeout) and the gate is never taken."""
    orders = RecordingProvider("orders")
    job = Fn(
        workflow("u", "wf"),
        naps(),
        requirements=lambda: JobRequirements().require_database(orders),
        timeout=None,
    )
    with pytest.raises(errors.NucleoSystemError, match="timeout"):
        await dispatcher.submit(job).result()
    assert orders.log == [] and orders.gate.in_use == 0


# -- construction = admission ---------------------------------------------------------------------


async def test_a_job_parked_on_one_account_holds_no_database_permit(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-07: the attempt is admitted as a whole; while it waits it holds nothing, so the free
    database gate in a demand that also names a full account stays at 0."""
    orders = RecordingProvider("orders")
    busy = CountingGate("busy", 1)
    gate_free = trio.Event()

    async def hog(ctx: JobContext) -> None:
        await gate_free.wait()

    async def write(ctx: JobContext) -> str:
        return str(ctx.resources.get(orders) if ctx.resources else None)

    root = workflow("u", "wf")
    first = dispatcher.submit(
        Fn(root, hog, requirements=lambda: JobRequirements().require_rate_limiter(busy))
    )
    second = dispatcher.submit(
        Fn(
            root,
            write,
            requirements=lambda: (
                JobRequirements().require_rate_limiter(busy).require_database(orders)
            ),
        )
    )
    await settle()
    assert busy.in_use == 1 and orders.gate.in_use == 0 and orders.log == []
    assert dispatcher.admission.queue_size == 1
    gate_free.set()
    await first.result()
    assert await second.result() == "conn:orders"
    assert orders.gate.in_use == 0 and orders.open_handles == 0


async def test_a_cancel_while_parked_leaves_the_line_holding_nothing(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-08: a job cancelled while parked in admission leaves the line (queue size 0), holds
    nothing, and ends CANCELLED; its provider never opened a handle."""
    orders = RecordingProvider("orders", max_concurrent=1)
    release = trio.Event()

    async def hold(ctx: JobContext) -> None:
        await release.wait()

    needs = lambda: JobRequirements().require_database(orders)  # noqa: E731
    root = workflow("u", "wf")
    holder = dispatcher.submit(Fn(root, hold, requirements=needs))
    waiter_job = Fn(root, hold, requirements=needs)
    waiter = dispatcher.submit(waiter_job)
    await settle()
    assert dispatcher.admission.queue_size == 1
    dispatcher.cancel(waiter_job.job_id, "not needed")
    with pytest.raises(errors.JobCancelledError):
        await waiter.result()
    assert dispatcher.admission.queue_size == 0
    assert waiter_job.context.state is JobState.CANCELLED and waiter_job.runs == 0
    release.set()
    await holder.result()
    assert orders.log.count("orders.acquire") == 1 and orders.gate.in_use == 0


async def test_the_waits_are_recorded_per_account_and_in_total(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-09: after the grant, each account's wait is summed under ``wait_times`` and the wall
    wait under ``admission_wait_ms``."""
    orders = RecordingProvider("orders", max_concurrent=1)
    needs = lambda: JobRequirements().require_database(orders)  # noqa: E731
    root = workflow("u", "wf")
    first = dispatcher.submit(Fn(root, naps(2), requirements=needs))
    second_job = Fn(root, naps(), requirements=needs)
    second = dispatcher.submit(second_job)
    await first.result()
    await second.result()
    metadata = second_job.context.metadata
    assert metadata["wait_times"]["db:orders"] == pytest.approx(2000, abs=5)
    assert metadata["admission_wait_ms"] == pytest.approx(2000, abs=5)


# -- materialization ------------------------------------------------------------------------------


async def test_a_handle_that_fails_to_open_rolls_back_the_whole_grant() -> None:
    """JR-10: handles open in declaration order; when one fails, those already open are closed
    in reverse and the whole grant is rolled back (the metered account too: 1 take, 1 give);
    the error names the provider and the job never runs."""
    log: list[str] = []
    first, second = RecordingProvider("a", log), RecordingProvider("b", log)
    third = RecordingProvider("c", log, fail={"acquire"})
    meter = Meter("tokens", cap=10, rate=0)
    admission = Admission()
    demand = Demand().add(meter, 4)
    for p in (first, second, third):
        demand.add(p.admission())
    grant = await admission.admit(demand)
    resources = JobResources(admission, grant, [first, second, third])
    with pytest.raises(UncorrectableError) as caught:
        await resources.materialize()
    assert "Failed to acquire database handle from RecordingProvider" in str(caught.value)
    assert isinstance(caught.value.__cause__, ProviderFault)
    assert log == ["a.acquire", "b.acquire", "c.acquire", "b.close", "a.close"]
    assert (meter.takes, meter.gives) == (1, 1)
    assert all(p.gate.in_use == 0 for p in (first, second, third))
    assert resources.settled and not resources.has_database


async def test_a_materialization_failure_through_the_dispatcher_never_runs_the_job(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-10: through the dispatcher, the job fails with the acquisition error, execute never
    runs, and the gate is back at 0."""
    broken = RecordingProvider("broken", fail={"acquire"})
    job = Fn(
        workflow("u", "wf"),
        naps(),
        requirements=lambda: JobRequirements().require_database(broken),
    )
    with pytest.raises(UncorrectableError, match="Failed to acquire database handle"):
        await dispatcher.submit(job).result()
    assert job.runs == 0 and broken.gate.in_use == 0
    assert job.context.state is JobState.FAILED


async def test_get_refuses_an_undeclared_provider() -> None:
    """JR-12: get and handle refuse a provider the job did not declare ("not declared");
    has_database is true when any handle exists; a declared one is found by object or name."""
    orders, other = RecordingProvider("orders"), RecordingProvider("other")
    _, resources = await opened(orders)
    assert resources.has_database
    assert resources.get(orders) == "conn:orders" == resources.get("orders")
    assert resources.handle(orders).provider is orders
    with pytest.raises(LookupError, match="not declared"):
        resources.get(other)
    with pytest.raises(LookupError, match="not declared"):
        resources.handle("other")
    _, empty = await opened()
    assert not empty.has_database


# -- transactions ---------------------------------------------------------------------------------


async def test_commit_all_commits_in_order_and_a_failure_rolls_back_the_uncommitted_rest() -> None:
    """JR-13, JR-14, JR-15, JR-16: begin on each in order; commit then await on each in order;
    when the second commit fails, the second and third are rolled back in reverse, the first
    stays committed, and the error names the failing provider with the failure as cause. A
    later rollback_all skips the committed first provider."""
    log: list[str] = []
    first = RecordingProvider("first", log)
    second = RecordingProvider("second", log, fail={"commit"})
    third = RecordingProvider("third", log)
    _, resources = await opened(first, second, third)
    await resources.begin_all()
    with pytest.raises(UncorrectableError) as caught:
        await resources.commit_all()
    assert "RecordingProvider ('second')" in str(caught.value)
    assert isinstance(caught.value.__cause__, ProviderFault)
    assert [e for e in log if e.startswith("first")] == [
        "first.acquire",
        "first.begin",
        "first.commit",
        "first.await",
    ]
    assert [e for e in log if e.startswith("second")] == [
        "second.acquire",
        "second.begin",
        "second.commit",
        "second.rollback",
    ]
    assert [e for e in log if e.startswith("third")] == [
        "third.acquire",
        "third.begin",
        "third.rollback",
    ]
    assert log.index("third.rollback") < log.index("second.rollback")
    log.clear()
    await resources.rollback_all()
    assert log == ["third.rollback", "second.rollback"]


async def test_a_rollback_that_fails_during_commit_all_rides_as_suppressed() -> None:
    """JR-15: rollback failures while commit_all unwinds are attached as suppressed."""
    log: list[str] = []
    first = RecordingProvider("first", log, fail={"commit"})
    second = RecordingProvider("second", log, fail={"rollback"})
    _, resources = await opened(first, second)
    await resources.begin_all()
    with pytest.raises(UncorrectableError) as caught:
        await resources.commit_all()
    riders = suppressed(caught.value)
    assert len(riders) == 1 and "second rollback failed" in str(riders[0])
    assert log[-2:] == ["second.rollback", "first.rollback"]


async def test_begin_all_clears_what_was_committed() -> None:
    """JR-13: a new begin_all starts a fresh transaction everywhere: a later commit_all commits
    every provider again."""
    log: list[str] = []
    only = RecordingProvider("only", log)
    _, resources = await opened(only)
    await resources.begin_all()
    await resources.commit_all()
    await resources.begin_all()
    await resources.commit_all()
    assert log.count("only.commit") == 2 and log.count("only.begin") == 2


async def test_rollback_all_goes_in_reverse_and_aggregates_failures() -> None:
    """JR-17: rollback_all runs in reverse, skips committed providers, goes on after a failure,
    and raises "rollback_all encountered N errors" with each failure suppressed."""
    log: list[str] = []
    first = RecordingProvider("first", log, fail={"rollback"})
    second = RecordingProvider("second", log)
    third = RecordingProvider("third", log, fail={"rollback"})
    _, resources = await opened(first, second, third)
    await resources.begin_all()
    log.clear()
    with pytest.raises(UncorrectableError, match="rollback_all encountered 2 errors") as caught:
        await resources.rollback_all()
    assert log == ["third.rollback", "second.rollback", "first.rollback"]
    assert [str(e) for e in suppressed(caught.value)] == [
        "third rollback failed",
        "first rollback failed",
    ]


# -- close ----------------------------------------------------------------------------------------


async def test_close_closes_every_handle_before_the_grant_returns_and_aggregates_failures() -> None:
    """JR-18: close marks the resources released, closes every handle in declaration order
    (going on after a failure), releases the grant, then raises ResourceCloseError naming the
    first failing provider, with that failure as cause and later ones suppressed."""
    log: list[str] = []
    first = RecordingProvider("first", log, fail={"close"})
    second = RecordingProvider("second", log)
    third = RecordingProvider("third", log, fail={"close"})
    providers = (first, second, third)
    admission = Admission()
    grant = await admission.admit(Demand().add(first.gate).add(second.gate).add(third.gate))
    context = SimpleNamespace(job_id="closing", is_executing_job_with_resources=True)
    resources = JobResources(admission, grant, providers, context=context)  # type: ignore[arg-type]
    await resources.materialize()
    resources.executed = True
    seen_at_close: list[tuple[bool, int]] = []
    for provider in providers:
        closing = provider.close

        async def look_then_close(handle: DBHandle, closing: Any = closing) -> None:
            held = sum(p.gate.in_use for p in providers)
            seen_at_close.append((context.is_executing_job_with_resources, held))
            await closing(handle)

        provider.close = look_then_close  # type: ignore[method-assign]
    with pytest.raises(ResourceCloseError) as caught:
        await resources.aclose()
    assert seen_at_close == [(False, 3)] * 3, "released first, the permits held while closing"
    assert str(caught.value) == (
        "Failed to close database handle from RecordingProvider: first close failed"
    )
    assert str(caught.value.__cause__) == "first close failed"
    assert [str(e) for e in suppressed(caught.value)] == ["third close failed"]
    assert [e for e in log if e.endswith("close")] == ["first.close", "second.close", "third.close"]
    assert all(p.gate.in_use == 0 for p in (first, second, third))
    await resources.aclose()  # a second close is harmless
    assert log.count("second.close") == 1


async def test_force_close_aborts_then_closes_and_settles_once(
    nursery: trio.Nursery,
) -> None:
    """JR-19: force_close aborts each handle at once, closes the aborted handles in the
    background and only then releases the grant; a later close is harmless because the grant
    settles once."""
    log: list[str] = []
    only = RecordingProvider("only", log)
    meter = Meter("tokens", cap=10, rate=0)
    admission = Admission()
    grant = await admission.admit(Demand().add(meter, 2).add(only.admission()))
    resources = JobResources(admission, grant, [only], spawn=nursery.start_soon)
    await resources.materialize()
    resources.executed = True
    resources.force_close()
    assert log == ["only.acquire", "only.abort"]
    assert only.gate.in_use == 1, "the permit waits for the aborted connection to close"
    await settle()
    assert log == ["only.acquire", "only.abort", "only.close"]
    assert only.gate.in_use == 0 and resources.settled
    await resources.aclose()
    resources.force_close()
    assert log.count("only.close") == 1 and (meter.takes, meter.gives) == (1, 0)


async def test_a_force_close_during_commit_all_walks_the_same_fixed_handles(
    nursery: trio.Nursery,
) -> None:
    """JR-11: the handles are fixed at materialization, so a force_close racing a commit_all
    changes no mapping under it; the grant settles exactly once."""
    log: list[str] = []
    first, second = RecordingProvider("first", log), RecordingProvider("second", log)
    _, resources = await opened(first, second)
    resources.executed = True
    await resources.begin_all()
    outcome: list[BaseException | None] = []

    async def commit() -> None:
        try:
            await resources.commit_all()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    nursery.start_soon(commit)
    await trio.lowlevel.checkpoint()  # commit_all is inside first.commit's checkpoint
    resources.force_close()
    await settle()
    assert outcome == [None]  # no "dictionary changed size during iteration"
    assert log.count("first.abort") == 1 and log.count("second.abort") == 1
    assert first.gate.in_use == 0 and second.gate.in_use == 0
    await resources.aclose()
    assert first.gate.in_use == 0


async def test_completion_gives_back_only_release_accounts(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-20: on completion the permits go back only to RELEASE accounts: the TIME meter is taken
    once and given back 0 times; the database gate is back at 0."""
    meter = Meter("tokens", cap=100, rate=0)
    orders = RecordingProvider("orders")
    job = Fn(
        workflow("u", "wf"),
        naps(0.5),
        requirements=lambda: (
            JobRequirements().require_rate_limiter(meter, 5).require_database(orders)
        ),
    )
    await dispatcher.submit(job).result()
    assert (meter.takes, meter.gives) == (1, 0)
    assert orders.gate.in_use == 0 and orders.open_handles == 0


async def test_a_job_holding_a_database_cannot_wait_on_another_job(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-21: a job holding a database permit that waits on another job's handle gets
    JobDeadlockError naming both jobs and its call site, even when the other job already
    finished; an orchestrator, which holds nothing, may wait on its children."""
    orders = RecordingProvider("orders")
    root = workflow("u", "wf")
    finished = dispatcher.submit(Fn(root, naps()))
    await finished.result()

    async def waits(ctx: JobContext) -> Any:
        return await finished.result()

    holder = Fn(root, waits, requirements=lambda: JobRequirements().require_database(orders))
    with pytest.raises(JobDeadlockError) as caught:
        await dispatcher.submit(holder).result()
    message = str(caught.value)
    assert holder.job_id in message and finished.job_id in message
    assert "test_job_resources.py" in message
    assert orders.gate.in_use == 0

    class Waits(Orchestrator[str]):
        async def execute(self, context: JobContext) -> str:
            child = context.dispatcher.submit(Fn(self, naps(1)))
            await child.result()
            return "waited"

    assert await dispatcher.submit(Waits(root)).result() == "waited"


async def test_a_database_declared_by_name_resolves_against_the_dispatcher(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """DB-07: a database declared by name is the provider the dispatcher registered under that
    name; a name nobody registered fails the job naming the missing and the registered names."""
    orders = RecordingProvider("orders")
    dispatcher.databases.register(orders)

    async def use(ctx: JobContext) -> str:
        assert ctx.resources is not None
        return str(ctx.resources.get("orders"))

    root = workflow("u", "wf")
    named = Fn(root, use, requirements=lambda: JobRequirements().require_database("orders"))
    assert await dispatcher.submit(named).result() == "conn:orders"
    missing = Fn(root, use, requirements=lambda: JobRequirements().require_database("ledger"))
    with pytest.raises(RuntimeError, match="'ledger'.*registered: orders"):
        await dispatcher.submit(missing).result()
    assert orders.gate.in_use == 0


# -- a forced close gives the permits back only once the connections closed (issue 11, item 7) ---


async def test_a_forced_close_aborts_at_once_and_gives_the_permits_back_after_the_close(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """JR-19, DB-12: force_close aborts every handle at once; the permits stay held while the
    aborted connection is still open (however long its close takes: past a window the stuck
    close is reported, never abandoned) and go back the moment it has closed; a second
    force_close and a later aclose change nothing."""
    log: list[str] = []
    slow, quick = SlowClose("slow", log), RecordingProvider("quick", log)
    admission = Admission()
    grant = await admission.admit(Demand().add(slow.gate).add(quick.gate))
    resources = JobResources(admission, grant, [slow, quick], spawn=nursery.start_soon)
    await resources.materialize()
    resources.executed = True
    resources.force_close()
    assert log[-2:] == ["slow.abort", "quick.abort"]
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.resources"):
        await trio.sleep(1000)  # the close is stuck: no time makes the permits come back
    assert (slow.gate.in_use, quick.gate.in_use) == (1, 1) and not resources.settled
    (stuck,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "SlowClose ('slow')'s close has not returned 30 s after an abort" in stuck
    resources.force_close()
    slow.closable.set()
    await resources.aclose()  # waits for the forced close to finish
    assert (slow.gate.in_use, quick.gate.in_use) == (0, 0) and resources.settled
    assert slow.open_handles == 0 and quick.open_handles == 0
    assert log.count("slow.close") == 1 and log.count("quick.close") == 1
    assert log.index("slow.close") < log.index("quick.close")


async def test_a_cancelled_cooperative_close_hands_over_to_a_forced_close(
    nursery: trio.Nursery,
) -> None:
    """JR-18, JR-19: a cooperative close cancelled while a close hangs aborts what is still
    open; the background close finishes the job, and only then do the permits go back."""
    slow = SlowClose("slow")
    admission = Admission()
    grant = await admission.admit(Demand().add(slow.gate))
    resources = JobResources(admission, grant, [slow], spawn=nursery.start_soon)
    await resources.materialize()
    with trio.CancelScope() as scope:
        nursery.start_soon(_cancel_when_blocked, scope)
        await resources.aclose()
    assert scope.cancelled_caught and "slow.abort" in slow.log
    await settle()
    assert slow.gate.in_use == 1, "the aborted connection is not closed yet"
    slow.closable.set()
    await settle()
    assert slow.gate.in_use == 0 and slow.open_handles == 0


async def _cancel_when_blocked(scope: trio.CancelScope) -> None:
    await settle()
    scope.cancel()


async def test_without_a_spawner_a_forced_close_settles_at_once_and_a_later_close_closes() -> None:
    """JR-19 with nothing to run the background close: the permits go back at once (nothing can
    wait for the close), and a later aclose closes the aborted handle."""
    only = RecordingProvider("only")
    _, resources = await opened(only)
    resources.force_close()
    assert only.gate.in_use == 0 and resources.settled and only.open_handles == 1
    await resources.aclose()
    assert only.open_handles == 0 and only.log[-2:] == ["only.abort", "only.close"]


# -- a commit sent is the outcome (issue 11, item 6) ----------------------------------------------


async def test_a_cooperative_close_waits_for_the_commit_in_flight(nursery: trio.Nursery) -> None:
    """EXEC-03, TMO-04: phase one's close, started while the commit is in flight, waits for its
    answer before it closes anything: the commit is not abandoned and the database commits."""
    from .test_commit_races import HeldCommit

    log: list[str] = []
    orders = HeldCommit("orders", log)
    _, resources = await opened(orders)
    await resources.begin_all()
    nursery.start_soon(resources.commit_all)
    await orders.sent.wait()
    assert resources.commit_in_flight
    nursery.start_soon(resources.aclose)
    await settle()
    assert "orders.close" not in log
    orders.answer()
    await settle()
    assert log[-3:] == ["orders.commit", "orders.await", "orders.close"]
    assert orders.committed and resources.all_committed and orders.gate.in_use == 0


async def test_commit_all_is_not_abandoned_by_its_callers_cancellation(
    nursery: trio.Nursery,
) -> None:
    """A cancel that lands on the task in commit_all does not abandon the commit: commit_all
    returns once the database answered, and the cancel takes effect after."""
    from .test_commit_races import HeldCommit

    orders = HeldCommit("orders")
    _, resources = await opened(orders)
    await resources.begin_all()
    returned: list[bool] = []
    with trio.CancelScope() as scope:
        nursery.start_soon(_answer_after_cancel, scope, orders)
        await resources.commit_all()
        returned.append(True)
        await trio.lowlevel.checkpoint()
    assert returned == [True] and scope.cancelled_caught
    assert orders.committed and resources.committed == (orders,)


async def _answer_after_cancel(scope: trio.CancelScope, provider: Any) -> None:
    await provider.sent.wait()
    scope.cancel()
    await settle()
    provider.answer()


async def test_a_commit_cut_short_by_the_window_has_an_unknown_fate_and_the_rest_is_not_committed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """JR-15: a commit in flight is left alone until a stop is requested; one that does not
    answer within the commit window after that is aborted. Its database is reported as unknown,
    never as rolled back; the one after it, never sent, is not committed; the one before it
    stays committed. No rollback runs once the window is spent."""
    from .test_commit_races import HeldCommit

    log: list[str] = []
    first = RecordingProvider("first", log)
    stuck = HeldCommit("stuck", log)
    last = RecordingProvider("last", log)
    admission = Admission()
    grant = await admission.admit(Demand().add(first.gate).add(stuck.gate).add(last.gate))
    resources = JobResources(admission, grant, [first, stuck, last], commit_window=5.0)
    await resources.materialize()
    await resources.begin_all()
    outcome: list[CommitError] = []
    answered = trio.Event()

    async def commit() -> None:
        try:
            await resources.commit_all()
        except CommitError as exc:
            outcome.append(exc)
        answered.set()

    nursery.start_soon(commit)
    await stuck.sent.wait()
    await trio.sleep(1000)
    assert outcome == [] and "stuck.abort" not in log  # nobody asked it to stop
    asked = trio.current_time()
    resources.request_stop()
    await answered.wait()
    assert trio.current_time() - asked == pytest.approx(5.0)
    (error,) = outcome
    assert error.committed == ("first",) and error.unknown == ("stuck",)
    assert error.not_committed == ("last",) and error.rolled_back == ()
    assert str(error) == (
        "commit failed on HeldCommit ('stuck'): no answer within 5 s of the request to stop, "
        "so it was aborted; committed: 'first'; not committed: 'last'; "
        "unknown whether committed: 'stuck'"
    )
    assert error.__cause__ is None and "stuck.abort" in log
    assert not [entry for entry in log if entry.endswith("rollback")]
    await resources.aclose()
    assert all(p.gate.in_use == 0 for p in (first, stuck, last))


async def test_a_forced_close_during_a_commit_leaves_its_fate_unknown(
    nursery: trio.Nursery,
) -> None:
    """JR-11, JR-19: phase two aborting a commit in flight is not a rollback: the error says
    whether it committed is unknown; the database after it, aborted too, is not committed."""
    log: list[str] = []
    cut = AbortableCommit("cut", log)
    after = RecordingProvider("after", log)
    admission = Admission()
    grant = await admission.admit(Demand().add(cut.gate).add(after.gate))
    resources = JobResources(admission, grant, [cut, after], spawn=nursery.start_soon)
    await resources.materialize()
    await resources.begin_all()
    outcome: list[BaseException] = []

    async def commit() -> None:
        try:
            await resources.commit_all()
        except CommitError as exc:
            outcome.append(exc)

    nursery.start_soon(commit)
    await cut.sent.wait()
    resources.force_close()
    await settle()
    (error,) = outcome
    assert isinstance(error, CommitError)
    assert error.unknown == ("cut",) and error.not_committed == ("after",)
    assert "cut short by an abort" in str(error) and "rolled back" not in str(error)
    assert cut.gate.in_use == 0 and after.gate.in_use == 0


class AbortableCommit(RecordingProvider):
    """A commit that waits until the handle is aborted, then fails as a severed connection."""

    def __init__(self, name: str, log: list[str] | None = None) -> None:
        super().__init__(name, log)
        self.sent = trio.Event()

    async def commit(self, handle: DBHandle) -> None:
        self._record("commit")
        self.sent.set()
        await self._aborted.wait()
        raise ProviderFault(f"{self.name}: the connection was aborted")


# -- an account that raises as the grant goes back (ADM-45) ---------------------------------------


class FaultyGate(CountingGate):
    """A gate whose give raises: a bug in an account."""

    def give(self, amounts: Any) -> None:
        raise RuntimeError(f"{self.limiter_name} lost its count")


async def test_an_account_raising_on_release_is_a_grant_release_error_naming_it() -> None:
    """ADM-45: a give that raises at release reaches aclose's caller as GrantReleaseError
    naming the account, with the account's error as cause; every other account and the
    database permit are back, and the grant is settled (a second close does nothing)."""
    orders = RecordingProvider("orders")
    faulty, fine = FaultyGate("faulty", 2), CountingGate("fine", 2)
    admission = Admission()
    grant = await admission.admit(Demand().add(fine).add(faulty).add(orders.gate))
    resources = JobResources(admission, grant, [orders])
    await resources.materialize()
    resources.executed = True
    with pytest.raises(GrantReleaseError) as caught:
        await resources.aclose()
    assert caught.value.account == "faulty"
    assert "account faulty raised RuntimeError: faulty lost its count" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert fine.in_use == 0 and orders.gate.in_use == 0 and orders.open_handles == 0
    assert resources.settled
    await resources.aclose()


async def test_an_account_raising_as_a_forced_close_settles_is_logged_naming_it(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """ADM-45 where nobody can be told: the background close of a forced close logs the
    account's fault at error, naming it, and the other permits are back."""
    orders = RecordingProvider("orders")
    faulty = FaultyGate("faulty", 2)
    admission = Admission()
    grant = await admission.admit(Demand().add(faulty).add(orders.gate))
    resources = JobResources(admission, grant, [orders], spawn=nursery.start_soon)
    await resources.materialize()
    resources.executed = True
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.resources"):
        resources.force_close()
        await settle()
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "account faulty raised" in record.getMessage()
    assert orders.gate.in_use == 0 and resources.settled


class SlowOpen(RecordingProvider):
    """A provider whose acquire (the connect) returns only once the test sets ``openable``."""

    def __init__(self, name: str, log: list[str] | None = None) -> None:
        super().__init__(name, log)
        self.openable = trio.Event()

    async def acquire(self, read_only: bool = False) -> DBHandle:
        await self.openable.wait()
        return await super().acquire(read_only)


@pytest.mark.parametrize("close", ["force_close", "aclose"])
async def test_a_close_while_the_connection_is_being_opened_waits_for_it(
    nursery: trio.Nursery, close: str
) -> None:
    """JR-19, DB-12: a close that comes while a handle is still being opened (a deadline or a
    shutdown landing on the connect) never gives the permit back under the connect: the
    permit stays held until the connection, once open, has been aborted (forced) and closed."""
    slow = SlowOpen("slow")
    admission = Admission()
    grant = await admission.admit(Demand().add(slow.gate))
    resources = JobResources(admission, grant, [slow], spawn=nursery.start_soon)
    nursery.start_soon(resources.materialize)
    await settle()
    if close == "force_close":
        resources.force_close()
    else:
        nursery.start_soon(resources.aclose)
    await settle()
    assert slow.gate.in_use == 1 and not resources.settled
    slow.openable.set()
    await settle()
    assert slow.gate.in_use == 0 and resources.settled and slow.open_handles == 0
    expected = ["slow.acquire", "slow.abort", "slow.close"]
    assert slow.log == (expected if close == "force_close" else [expected[0], expected[2]])
