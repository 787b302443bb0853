"""A counting gate's amount is a number of permits (the spec README's ruling on a counting
gate's amount): ``require_rate_limiter(gate, 24)`` takes 24 of the gate's permits, ``None``
takes one, and an ask the gate can never grant is refused when the job declares it."""

from __future__ import annotations

import decimal
import fractions
import math
import re
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import (
    Admission,
    CountingGate,
    DatabaseGate,
    Demand,
    HttpConnectionGate,
    LimiterEventType,
    ModelGate,
    StdioEndpointGate,
    StdioPoolGate,
)
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import JobContext, JobRequirements, workflow

from .jobs_for_tests import Echo, Fn


def needs(gate: CountingGate, amount: Any) -> Any:
    return lambda: JobRequirements().require_rate_limiter(gate, amount)


def timed(seconds: float, gate: CountingGate, starts: list[tuple[float, int]]) -> Any:
    """A job body that notes when it started and how many permits were in use then."""

    async def body(context: JobContext) -> float:
        starts.append((trio.current_time(), gate.in_use))
        await trio.sleep(seconds)
        return trio.current_time()

    return body


# -- the gate's own questions ------------------------------------------------------------------------


def test_the_questions_count_permits_not_entries() -> None:
    """ACC-02, ACC-03, ACC-15: fits, try_take and give count each amount's permits (None is
    one), on the job's ask and on the head's reservation alike."""
    gate = CountingGate("gpu-memory", 80)
    assert gate.fits([24], []) and gate.fits([80], [])
    assert gate.fits([24], [56]) and not gate.fits([24], [57])
    assert gate.try_take([24], [])
    assert gate.in_use == 24 and gate.available == 56
    assert gate.try_take([3, None], [])  # a merged ask: 3 + 1
    assert gate.in_use == 28
    assert not gate.try_take([24], [30])  # 28 + 24 + 30 > 80: nothing taken
    assert gate.in_use == 28
    gate.give([3, None])
    gate.give([24])
    assert gate.in_use == 0
    assert gate.earliest_fit([80], [80]) is None


def test_an_ask_beyond_the_capacity_is_refused_by_the_questions_too() -> None:
    """ACC-14, GATE-03: more permits than the gate has can never fit: fits and try_take refuse
    it naming both numbers, and the take takes nothing."""
    gate = DatabaseGate("orders", 2)
    for question in (gate.fits, gate.try_take):
        with pytest.raises(
            UncorrectableError, match="db:orders: 3 permits can never fit a gate of 2"
        ):
            question([3], [])
    assert gate.in_use == 0
    with pytest.raises(ValueError, match="db:orders: give of 2 permits exceeds the 0 in use"):
        gate.give([2])


@pytest.mark.parametrize(
    "gate",
    [
        HttpConnectionGate(5),
        DatabaseGate("orders", 5),
        ModelGate("local-llama", 5),
        StdioEndpointGate("files", 5),
        StdioPoolGate(5),
    ],
    ids=lambda gate: gate.limiter_name,
)
def test_every_named_gate_counts_permits(gate: CountingGate) -> None:
    """GATE-01, GATE-04, GATE-05, GATE-07, GATE-08: the named gates are counting gates, so an
    amount on any of them is a number of permits."""
    assert gate.try_take([4], []) and gate.in_use == 4
    assert not gate.fits([2], [])
    assert gate.fits([None], [])
    gate.give([4])
    assert gate.in_use == 0
    assert JobRequirements().require_rate_limiter(gate, 5).limiters[0].amount == 5
    with pytest.raises(ValueError, match=rf"{gate.limiter_name}: asks for 6 permits but the gate"):
        JobRequirements().require_rate_limiter(gate, 6)


# -- declaration -------------------------------------------------------------------------------------


def test_an_ask_that_can_never_fit_is_refused_at_declaration_naming_both_numbers() -> None:
    """A job that asks a gate for more permits than it has could never run: require_rate_limiter
    refuses it with a ValueError naming the gate and both numbers."""
    gpu = CountingGate("gpu-memory", 80)
    with pytest.raises(ValueError) as refused:
        JobRequirements().require_rate_limiter(gpu, 96)
    assert str(refused.value) == "gpu-memory: asks for 96 permits but the gate has only 80"
    assert JobRequirements().require_rate_limiter(gpu, 80).limiters[0].amount == 80


def test_requiring_a_gate_again_replaces_its_amount() -> None:
    """JR-04: the same gate required again replaces its amount; a job that needs 3 permits
    asks for 3, and None stands for one."""
    gpu = CountingGate("gpu", 8)
    requirements = JobRequirements().require_rate_limiter(gpu).require_rate_limiter(gpu, 3)
    assert [(need.limiter, need.amount) for need in requirements.limiters] == [(gpu, 3)]
    requirements.require_rate_limiter(gpu)
    assert [need.amount for need in requirements.limiters] == [None]
    # A replaced amount is checked like a first one: an ask beyond the gate is still refused.
    with pytest.raises(ValueError, match="gpu: asks for 9 permits but the gate has only 8"):
        requirements.require_rate_limiter(gpu, 9)


HOSTILE = [
    (True, TypeError, "a bool is not an amount"),
    (math.nan, ValueError, "it is NaN"),
    (math.inf, ValueError, "it is infinite"),
    (-3, ValueError, "it is negative"),
    (0, ValueError, "zero permits is no ask"),
    (2.5, TypeError, "a float is not a whole number of permits"),
    (24.0, TypeError, "a float is not a whole number of permits"),
    ("24", TypeError, "a str is not a whole number of permits"),
    (decimal.Decimal(2), TypeError, "a Decimal is not a whole number of permits"),
    (fractions.Fraction(1, 2), TypeError, "a Fraction is not a whole number of permits"),
]


def named(where: str, amount: Any, reason: str) -> str:
    """A pattern for a refusal that names ``where``, the value and the reason, in that order."""
    return rf"{where}.*{re.escape(repr(amount))}.*{re.escape(reason)}"


@pytest.mark.parametrize(("amount", "error", "reason"), HOSTILE, ids=repr)
def test_a_hostile_permit_count_is_refused_at_declaration_by_name(
    amount: Any, error: type[Exception], reason: str
) -> None:
    """JR-04: a gate's amount is None or a positive int. A bool, NaN, an infinity, a negative,
    zero, a float (even a whole one), a string or another number type is refused when the job
    declares it, naming the gate and the value."""
    gpu = CountingGate("gpu-memory", 80)
    with pytest.raises(error, match=named("gpu-memory", amount, reason)) as refused:
        JobRequirements().require_rate_limiter(gpu, amount)
    assert "require_rate_limiter" in str(refused.value)


@pytest.mark.parametrize(("amount", "error", "reason"), HOSTILE, ids=repr)
def test_a_hostile_permit_count_is_refused_by_every_question(
    amount: Any, error: type[Exception], reason: str
) -> None:
    """ACC-02..05: asked directly, every question refuses the same values naming the gate, the
    call and the value, and nothing is taken or given."""
    gate = CountingGate("gpu-memory", 80)
    assert gate.try_take([10], [])
    for question in (gate.fits, gate.try_take, gate.earliest_fit):
        with pytest.raises(error, match=named("gpu-memory: ", amount, reason)):
            question([amount], [])
    with pytest.raises(error, match=named("gpu-memory: reserved_ahead: ", amount, reason)):
        gate.fits([None], [amount])
    with pytest.raises(error, match=named("gpu-memory: give: ", amount, reason)):
        gate.give([amount])
    assert gate.in_use == 10


def test_a_routing_record_is_one_permit() -> None:
    """A value that is not a number at all (a routing record a subclass resolves) is one permit,
    as None is."""
    gate = CountingGate("routes", 2)
    assert gate.try_take([{"route": "a"}], []) and gate.in_use == 1
    gate.give([{"route": "a"}])
    assert gate.in_use == 0


# -- through admission and the dispatcher ----------------------------------------------------------


async def test_a_gate_of_80_runs_three_jobs_of_24_and_the_fourth_waits(
    autojump_clock: trio.abc.Clock, dispatcher: JobDispatcher
) -> None:
    """ADM-35, JR-02, JR-20: on a gate of 80, jobs needing 24 each run three at once (72 in
    use); the fourth waits holding nothing until one gives its 24 back."""
    gpu = CountingGate("gpu-memory", 80)
    starts: list[tuple[float, int]] = []
    root = workflow("u", "train")
    handles = [
        dispatcher.submit(Fn(root, timed(10, gpu, starts), requirements=needs(gpu, 24)))
        for _ in range(4)
    ]
    await trio.sleep(1)
    assert gpu.in_use == 72 and dispatcher.admission.queue_size == 1
    ends = [await handle.result() for handle in handles]
    assert [start for start, _ in starts] == [0.0, 0.0, 0.0, 10.0]
    assert [held for _, held in starts] == [24, 48, 72, 24]  # the three gave theirs back
    assert ends == [10.0, 10.0, 10.0, 20.0]
    assert gpu.in_use == 0  # every permit came back on release


async def test_a_job_that_can_never_fit_is_refused_at_the_door(
    autojump_clock: trio.abc.Clock, dispatcher: JobDispatcher
) -> None:
    """SUB-01, ACC-14: the declaration's refusal reaches the door from requirements(), so the job
    is born failed with a NucleoSystemError naming the gate and both numbers, holds nothing and
    never runs; the next job on the gate runs."""
    gpu = CountingGate("gpu-memory", 80)
    greedy = Echo(workflow("u", "greedy"), requirements=needs(gpu, 96))
    handle = dispatcher.submit(greedy)
    assert handle.done
    with pytest.raises(errors.NucleoSystemError) as refused:
        await handle.result()
    assert "gpu-memory: asks for 96 permits but the gate has only 80" in str(refused.value)
    assert greedy.runs == 0 and gpu.in_use == 0
    fits = Echo(workflow("u", "fits"), "ran", requirements=needs(gpu, 80))
    assert await dispatcher.submit(fits).result() == "ran"
    assert gpu.in_use == 0


async def test_a_replaced_amount_is_what_the_job_takes(
    autojump_clock: trio.abc.Clock, dispatcher: JobDispatcher
) -> None:
    """JR-04: a job that required a gate for 2 and then for 5 holds 5 permits, not 7."""
    gpu = CountingGate("gpu", 8)
    held: list[int] = []

    async def body(context: JobContext) -> None:
        held.append(gpu.in_use)

    def requirements() -> JobRequirements:
        return JobRequirements().require_rate_limiter(gpu, 2).require_rate_limiter(gpu, 5)

    await dispatcher.submit(Fn(workflow("u", "wf"), body, requirements=requirements)).result()
    assert held == [5] and gpu.in_use == 0


async def test_the_head_reserves_its_permits(
    autojump_clock: trio.abc.Clock, dispatcher: JobDispatcher
) -> None:
    """ADM-36, ADM-37: on a gate of 3, a job holds 2; a big job needing all 3 heads the line;
    a small job needing 1 fits alone but not beside the head's 3, so it waits: they finish at
    10, 20 and 21 s."""
    gpu = CountingGate("gpu", 3)
    starts: list[tuple[float, int]] = []
    root = workflow("u", "train")
    first = dispatcher.submit(Fn(root, timed(10, gpu, starts), requirements=needs(gpu, 2)))
    await trio.sleep(1)
    big = dispatcher.submit(Fn(root, timed(10, gpu, starts), requirements=needs(gpu, 3)))
    await trio.sleep(1)
    small = dispatcher.submit(Fn(root, timed(1, gpu, starts), requirements=needs(gpu, 1)))
    await trio.sleep(1)
    assert gpu.in_use == 2 and gpu.available == 1 and dispatcher.admission.queue_size == 2
    assert [await h.result() for h in (first, big, small)] == [10.0, 20.0, 21.0]
    assert starts == [(0.0, 2), (10.0, 3), (20.0, 1)]


async def test_admission_checks_a_merged_ask_together_and_reports_its_permits(
    autojump_clock: trio.abc.Clock,
) -> None:
    """DG-05, EVT-13: amounts merged on one gate are checked together ([24, 24] is 48 of 80,
    so a second such demand waits), and the limiter events report the permits moved."""
    gpu = CountingGate("gpu-memory", 80)
    seen: list[tuple[LimiterEventType, Any]] = []

    def emit(account: Any, snapshot: Any, waiters: Any, kind: LimiterEventType, *rest: Any) -> None:
        seen.append((kind, rest[-1]))

    admission = Admission(emit=emit)
    granted: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)

        async def job() -> None:
            grant = await admission.admit(Demand().add(gpu, 24).add(gpu, 24))
            granted.append(trio.current_time())
            await trio.sleep(5)
            admission.release(grant)

        nursery.start_soon(job)
        nursery.start_soon(job)
        await trio.sleep(1)
        assert gpu.in_use == 48
        await trio.sleep(10)
        admission.stop()
    assert granted == [0.0, 5.0] and gpu.in_use == 0
    assert (LimiterEventType.GRANTED_IMMEDIATE, 48) in seen
    assert (LimiterEventType.RELEASED, 48) in seen


async def test_a_demand_beyond_a_lowered_capacity_is_refused_by_admission(
    autojump_clock: trio.abc.Clock,
) -> None:
    """ACC-14, ADM-41: an ask that fitted when declared but not after the gate was cut is
    refused at admission with the gate's UncorrectableError, holding nothing."""
    gpu = CountingGate("gpu-memory", 80)
    demand = Demand().add(gpu, 60)
    gpu.set_capacity(40)
    admission = Admission()
    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        with pytest.raises(UncorrectableError, match="60 permits can never fit a gate of 40"):
            await admission.admit(demand)
        admission.stop()
    assert gpu.in_use == 0
