"""Bindings in the dispatch path: resolution, pricing and spend gates before admission, the
demand they assemble, and the cost ledger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import ModelGate, TokenBucket
from nucleo_trio.bus import events as ev
from nucleo_trio.errors import RateLimitRetry, SpendCapExceededError
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, Tool, workflow
from nucleo_trio.llm import LLMResponse, Usage
from nucleo_trio.models import (
    Cost,
    CostLedger,
    Depth,
    Grade,
    ModelBinding,
    OutputSize,
    binding_accounts,
)

from .model_doubles import catalog, entry, model_dispatcher, runtime

CAT = catalog(
    entry(
        "think",
        input_price_per_million="1000",
        output_price_per_million="1000",
        currency="USD",
        tpm=100_000,
        rpm=100,
    ),
    entry("gated", grade=None, provider_key="local-decision", tpm=None, max_concurrent=2),
    entry("unpriced", grade="MEDIUM"),
)


def flat(tokens: int = 100, output: int = 100) -> ModelBinding:
    return ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, tokens, output)


class Priced(Tool[str]):
    """Declares the bindings ``make`` mints (fresh per capture) and records ``responses``."""

    def __init__(
        self,
        parent: Identifiable,
        make: Callable[[], Sequence[ModelBinding]],
        *,
        responses: Sequence[LLMResponse] = (),
        work: float = 0.0,
        fail: BaseException | None = None,
    ) -> None:
        super().__init__(parent)
        self.timeout = 600.0
        self.make = make
        self.responses = responses
        self.work = work
        self.fail = fail
        self.minted: list[list[ModelBinding]] = []
        self.seen: list[tuple[int, int]] = []

    def requirements(self) -> JobRequirements:
        bindings = list(self.make())
        self.minted.append(bindings)
        requirements = JobRequirements()
        for binding in bindings:
            requirements.require_model(binding)
        return requirements

    async def execute(self, context: JobContext) -> str:
        for response in self.responses:
            context.record_llm_response(response)
        if self.work:
            await trio.sleep(self.work)
        if self.fail is not None:
            failure, self.fail = self.fail, None
            raise failure
        return "done"


def response(model: str | None, tokens: int = 1000) -> LLMResponse:
    return LLMResponse(
        content="ok", model=model, usage=Usage(input_tokens=tokens, output_tokens=tokens)
    )


# -- the demand (JR-02, JR-03, JR-06) -------------------------------------------------------------


async def test_bindings_head_the_demand_and_merge_on_one_bucket(autojump_clock: Any) -> None:
    """JR-02, JR-06: each binding's account comes first (its reservation on the entry's bucket),
    then http; two bindings on one bucket merge into one entry with two amounts; a gate-bound
    entry demands one permit on its ModelGate and http as well (JR-03)."""
    models = runtime(CAT, keys=("fake-llm", "local-decision"))
    async with model_dispatcher(models) as dispatcher:
        root = workflow("u", "wf")
        job = Priced(root, lambda: [flat(40, 60), flat(40, 60)])
        context = JobContext(job, "u", dispatcher=dispatcher)
        requirements = job.requirements()
        assert requirements.needs_http and requirements.has_resources
        demand = dispatcher.demand_assembler.assemble(requirements, context, dispatcher.http_gate)
        bucket = dispatcher.accounts.bucket(CAT.spec("think"))
        assert [(e.limiter, e.amounts) for e in demand.entries] == [
            (bucket, (100, 100)),
            (dispatcher.http_gate, (None,)),
        ]
        assert binding_accounts(requirements) == [bucket]  # told of an upstream verdict once
        decision = JobRequirements().require_model(ModelBinding.decision("is it spam?"))
        gated = dispatcher.demand_assembler.assemble(decision, context, dispatcher.http_gate)
        gate = dispatcher.accounts.gate(CAT.spec("gated"))
        assert isinstance(gate, ModelGate)
        assert [(e.limiter, e.amounts) for e in gated.entries] == [
            (gate, (None,)),
            (dispatcher.http_gate, (None,)),
        ]


async def test_every_attempt_mints_fresh_bindings_resolved_once(autojump_clock: Any) -> None:
    """MOD-18, SUB-10, SIG-06: the door's capture mints bindings that are never resolved; each
    attempt mints and resolves its own; the model bucket hears the upstream's verdict."""
    models = runtime(CAT)
    async with model_dispatcher(models) as dispatcher:
        job = Priced(workflow("u", "wf"), lambda: [flat()], fail=RateLimitRetry("429"))
        assert await dispatcher.submit(job).result() == "done"
    door, first, second = job.minted
    assert not door[0].is_resolved
    assert first[0].is_resolved and second[0].is_resolved and first[0] is not second[0]
    bucket = first[0].account
    assert isinstance(bucket, TokenBucket) and bucket.throttle > 0  # the 429 tightened it


# -- spend gates (EXEC-14, MOD-30, SPD-01) --------------------------------------------------------


async def test_spend_gates_judge_resolved_priced_bindings_before_anything_is_held(
    autojump_clock: Any,
) -> None:
    """EXEC-14, SPD-01, MOD-30: a gate sees resolved bindings with non-zero reservations while
    nothing is held; a refusal fails the attempt before admission; None is refused; gates stay
    registered."""
    seen: list[tuple[bool, int, int]] = []

    class Watch:
        def __init__(self) -> None:
            self.refuse = False

        def admit(self, context: JobContext, priced: Sequence[ModelBinding]) -> None:
            held = dispatcher.http_gate.in_use + int(context.is_executing_job_with_resources)
            seen.append((priced[0].is_resolved, priced[0].reservation, held))
            if self.refuse:
                raise SpendCapExceededError("no budget left")

    models = runtime(CAT)
    async with model_dispatcher(models) as dispatcher:
        with pytest.raises(ValueError, match="must not be None"):
            dispatcher.register_spend_gate(None)  # type: ignore[arg-type]
        gate = Watch()
        dispatcher.register_spend_gate(gate)
        assert await dispatcher.submit(Priced(workflow("u", "a"), lambda: [flat()])).result()
        gate.refuse = True
        refused = Priced(workflow("u", "b"), lambda: [flat()])
        with pytest.raises(SpendCapExceededError, match="no budget left"):
            await dispatcher.submit(refused).result()
        assert dispatcher.http_gate.in_use == 0 and refused.context.attempt == 0
        assert models.spend_gates == (gate,)
    assert seen == [(True, 200, 0), (True, 200, 0)]


# -- the ledger (OBS-28, OBS-29) ------------------------------------------------------------------


async def test_the_ledger_records_every_response_by_workflow(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """OBS-28: every terminal event's responses are recorded, failed jobs included; a model the
    catalog does not know is recorded under its own id with a warning, one with no id under
    "(unknown)", an unpriced call is counted; workflow(id) is None until a response is
    recorded and spent(id, currency) starts at zero."""
    models = runtime(CAT)
    async with model_dispatcher(models) as dispatcher:
        ledger = CostLedger(lambda: dispatcher.models.catalog).attach(dispatcher)
        root = workflow("u", "spend")
        assert ledger.workflow(root.workflow_id) is None
        assert ledger.spent(root.workflow_id, "USD") == Cost.zero("USD")
        ok = Priced(root, list, responses=[response("think"), response(None)])
        bad = Priced(
            root,
            list,
            responses=[response("mystery"), response("unpriced")],
            fail=RuntimeError("boom"),
        )
        with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.spend"):
            await dispatcher.submit(ok).result()
            with pytest.raises(RuntimeError):
                await dispatcher.submit(bad).result()
            await trio.testing.wait_all_tasks_blocked()
    spend = ledger.workflow(root.workflow_id)
    assert spend is not None
    assert [(c.model_id, c.job_id) for c in spend.calls] == [
        ("think", ok.job_id),
        ("(unknown)", ok.job_id),
        ("mystery", bad.job_id),
        ("unpriced", bad.job_id),
    ]
    assert spend.calls[0].cost == Cost(Decimal(2), "USD") and spend.calls[3].cost is None
    assert ledger.spent(root.workflow_id, "USD") == Cost(Decimal(2), "USD")
    assert any("no entry 'mystery'" in r.message for r in caplog.records)


async def test_a_reply_without_usage_is_booked_marked_estimated_with_one_warning_a_model(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A response whose usage is an estimate is booked at it (never at zero), its Call marked
    estimated, and the workflow says its total rests on an estimate; the ledger warns once per
    model, however many such calls it books."""
    models = runtime(CAT)
    guess = Usage(input_tokens=500, output_tokens=500, estimated=True)
    guessed = LLMResponse(content="ok", model="think", usage=guess)
    async with model_dispatcher(models) as dispatcher:
        ledger = CostLedger(CAT).attach(dispatcher)
        root = workflow("u", "estimates")
        with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.spend"):
            await dispatcher.submit(Priced(root, list, responses=[response("think")])).result()
            await trio.testing.wait_all_tasks_blocked()  # the ledger hears the terminal event
            assert not ledger.workflow(root.workflow_id).estimated  # type: ignore[union-attr]
            await dispatcher.submit(Priced(root, list, responses=[guessed, guessed])).result()
            await trio.testing.wait_all_tasks_blocked()
    spend = ledger.workflow(root.workflow_id)
    assert spend is not None and spend.estimated
    assert [c.estimated for c in spend.calls] == [False, True, True]
    assert spend.calls[1].cost == Cost(Decimal(1), "USD")
    assert ledger.spent(root.workflow_id, "USD") == Cost(Decimal(4), "USD")
    assert [r.getMessage() for r in caplog.records] == [
        "think reported no token usage; its calls are booked at an estimate (the call's "
        "reservation, or the text's length) and marked estimated"
    ]


async def test_the_cap_refuses_new_work_counting_siblings_in_flight(autojump_clock: Any) -> None:
    """OBS-29, SPD-01: admit refuses when spent + in flight + the reservation exceeds the cap,
    naming all of them; the first sibling keeps running to completion; its reservation stays
    committed until its terminal event; caps are per currency and never lowered; uncap lifts
    them; an unpriced model, or a currency with no cap, is refused; a workflow with no cap is
    not gated."""
    models = runtime(CAT)
    async with model_dispatcher(models) as dispatcher:
        ledger = CostLedger(CAT).attach(dispatcher)
        root = workflow("u", "capped")
        wf = root.workflow_id
        ledger.cap(wf, Cost(Decimal("0.3"), "USD"))  # one reservation costs 0.2
        ledger.cap(wf, Cost(Decimal("0.1"), "USD"))  # never lowered
        assert ledger.caps(wf) == (Cost(Decimal("0.3"), "USD"),)
        running = Priced(root, lambda: [flat()], responses=[response("think", 100)], work=10.0)
        first = dispatcher.submit(running)
        await trio.sleep(1)
        assert ledger.in_flight(wf, "USD") == Cost(Decimal("0.2"), "USD")
        with pytest.raises(SpendCapExceededError) as refused:
            await dispatcher.submit(Priced(root, lambda: [flat()])).result()
        text = str(refused.value)
        assert "0.300000 USD" in text and "spent 0.000000 USD" in text
        assert "in flight 0.200000 USD" in text and "reservation 0.200000 USD" in text
        assert await first.result() == "done"  # the running sibling was never stopped
        await trio.testing.wait_all_tasks_blocked()
        assert ledger.in_flight(wf, "USD") == Cost.zero("USD")
        assert ledger.spent(wf, "USD") == Cost(Decimal("0.2"), "USD")
        with pytest.raises(SpendCapExceededError, match="unpriced"):
            unpriced = ModelBinding.flat(Grade.MEDIUM, Depth.IMMEDIATE, 1, 1)
            await dispatcher.submit(Priced(root, lambda: [unpriced])).result()
        ledger.uncap(wf)
        assert await dispatcher.submit(Priced(root, lambda: [flat()])).result() == "done"
        ledger.cap(wf, Cost(Decimal(5), "EUR"))
        with pytest.raises(SpendCapExceededError, match="no cap in USD"):
            await dispatcher.submit(Priced(root, lambda: [flat()])).result()
        free = workflow("u", "free")
        assert await dispatcher.submit(Priced(free, lambda: [flat(10**4, 10)])).result()


async def test_a_ledger_on_the_bus_sees_only_terminal_events(autojump_clock: Any) -> None:
    """OBS-28: the ledger counts only AbstractTerminalEvent: a progress event is ignored; a
    completion's response is priced (1000 in and 1000 out at 1000 USD per million each)."""
    ledger = CostLedger(CAT)
    snapshot = JobContext(Priced(workflow("u", "x"), list), "u").snapshot()
    ledger.record(ev.JobProgressEvent(snapshot=snapshot, payload="x"))
    assert ledger.workflow(snapshot.workflow_id) is None
    ledger.record(ev.JobCompletedEvent(snapshot=snapshot, llm_responses=(response("think"),)))
    assert ledger.spent(snapshot.workflow_id, "USD") == Cost(Decimal(2), "USD")


def test_output_size_rungs_price_through_the_resolved_entry() -> None:
    """MOD-19: a binding declared with a rung reserves the entry's budget for it."""
    binding = ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 0, OutputSize.COMPACT)
    runtime(CAT).resolve(binding)
    assert binding.price() == 4096
