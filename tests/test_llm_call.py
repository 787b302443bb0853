"""LLMCall: requirements, corrections, truncation; conversations and their owners."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio

from nucleo_trio.bus import events as ev
from nucleo_trio.errors import (
    JsonParseError,
    LLMStopReason,
    OutputTruncationRetry,
    ResourceNotFoundError,
    ResponseCorrectionRetry,
    ResponseValidationError,
    UncorrectableError,
)
from nucleo_trio.jobs import JobContext, JobState, JobType, Orchestrator, display_name, workflow
from nucleo_trio.llm import (
    Conversation,
    LLMCall,
    LLMResponse,
    Role,
    ScriptedLLMClient,
    StructuredAnswer,
    TextAnswer,
    conversation_store,
    llm_required,
    reply,
)
from nucleo_trio.llm.call import LLM_CALL_TIMEOUT, MAX_CORRECTIONS
from nucleo_trio.llm.conversation import OWNERSHIP_WAIT
from nucleo_trio.llm.thinker import QuickLLMQuestion
from nucleo_trio.models import Depth, Grade, ModelRuntime, OutputSize

from .conftest import Recorder
from .model_doubles import catalog, entry, model_dispatcher, providers

CAT = catalog(entry("think", max_output_tokens=32_000))


def models_with(client: ScriptedLLMClient) -> ModelRuntime:
    return ModelRuntime(CAT, providers=providers("fake-llm", clients={"think": client}))


def talk(output: Any = 16_000, objective: str = "Judge the claim.") -> Conversation:
    conversation = Conversation(system="You judge claims.", output=output, grade=Grade.SMALL)
    conversation.put_objective(objective)
    return conversation


@attrs.frozen
class Verdict:
    verdict: str = llm_required()
    notes: str = ""


# -- the call as a job (TOOL-23, TOOL-24) --------------------------------------------------------


def test_an_llm_call_is_a_six_minute_read_only_job_of_its_own_type() -> None:
    """TOOL-23: six minutes, type LLM_CALL, a conversation required, the id prefix from the
    parent's display name, read-only non-transactional requirements, the grade on the
    conversation. TOOL-24: MAX_CORRECTIONS is 2."""
    root = workflow("u", "wf")
    with pytest.raises(ValueError, match="needs a conversation"):
        LLMCall(root, None)  # type: ignore[arg-type]
    conversation = talk()
    call: LLMCall[Any] = LLMCall(root, conversation, grade=Grade.MEDIUM)
    assert call.timeout == LLM_CALL_TIMEOUT == 360.0 and call.job_type is JobType.LLM_CALL
    assert call.job_id.startswith("llm-call-") and LLMCall.MAX_CORRECTIONS == MAX_CORRECTIONS == 2
    requirements = call.requirements()
    assert requirements.read_only and not requirements.requires_transaction
    assert len(requirements.model_bindings) == 1 and call.binding is not None
    assert conversation.grade is Grade.MEDIUM
    call.grade = Grade.LARGE
    assert conversation.grade is Grade.LARGE and call.grade is Grade.LARGE
    assert call.pinned_model() is None and call.binding.pinned_spec is None

    @display_name("Fact check!")
    class Named(Orchestrator[None]):
        @property
        def display_name(self) -> str | None:
            return "Fact check!"

        async def execute(self, context: JobContext) -> None:
            return None

    context = JobContext(Named(root), "u")
    assert LLMCall(context, talk()).job_id.startswith("llm-call-Factcheck-")
    pinned: LLMCall[Any] = LLMCall(root, talk(), pinned=CAT.spec("think"))
    assert pinned.requirements().model_bindings[0].pinned_spec is CAT.spec("think")


async def test_a_reply_is_read_by_its_handler_and_lands_on_the_record(autojump_clock: Any) -> None:
    """OBS-11: the completed call's terminal event carries its one LLM response; the request
    names the resolved model, the declared output and the answer's schema, and the handler reads
    the reply."""
    client = ScriptedLLMClient([reply('{"verdict": "true", "notes": "checked"}')])
    recorder = Recorder()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        call = LLMCall(workflow("u", "wf"), talk(), answer=StructuredAnswer(Verdict))
        assert await dispatcher.submit(call).result() == Verdict("true", "checked")
    (request,) = client.requests
    assert request.model == "think" and request.max_tokens == 16_000
    assert request.output_schema is not None and request.output_schema.name == "Verdict"
    (completed,) = recorder.typed(ev.JobCompletedEvent)
    assert len(completed.llm_responses) == 1 and completed.llm_responses[0].content.startswith("{")


# -- corrections (TOOL-25, TOOL-26, TOOL-29, EXEC-15, ERR-18) --------------------------------------


async def test_an_unparseable_reply_is_corrected_twice_then_fails(autojump_clock: Any) -> None:
    """TOOL-25: a reply that does not parse raises ResponseCorrectionRetry twice and
    JsonParseError on the third; each correction is a user turn with a non-empty explanation
    that keeps the response handler and copies the requested output. TOOL-29: the signal
    carries the model id and the attempt. EXEC-15: three executions, three starts."""
    client = ScriptedLLMClient([reply("not json"), reply("still not"), reply("nope")])
    recorder = Recorder()
    handler = StructuredAnswer(Verdict)
    conversation = talk()
    conversation.add_user("Answer now.", requested_output_tokens=20_000, response_handler=handler)
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        call = LLMCall(workflow("u", "wf"), conversation, answer=handler)
        with pytest.raises(JsonParseError):
            await dispatcher.submit(call).result()
        await trio.testing.wait_all_tasks_blocked()
    retries = recorder.typed(ev.ResponseCorrectionRetryEvent)
    assert [e.model for e in retries] == ["think", "think"]
    assert len(recorder.typed(ev.JobStartedEvent)) == 3 and call.corrections == 2
    corrections = [t for t in conversation.turns if t.message.role is Role.USER][1:]
    assert len(corrections) == 2
    for turn in corrections:
        assert "could not be parsed as JSON" in turn.message.content
        assert turn.response_handler is handler and turn.requested_output_tokens == 20_000
    assert [r.max_tokens for r in client.requests] == [20_000, 20_000, 20_000]


async def test_a_required_field_left_empty_is_corrected_then_refused_by_name(
    autojump_clock: Any,
) -> None:
    """TOOL-26, ERR-18: a reply that parses but leaves a required field empty gets 2
    corrections, then ResponseValidationError whose explanation names the field. TOOL-24: the
    count lives on the job instance, across the dispatcher's re-runs."""
    empty = reply('{"verdict": "", "notes": "hmm"}')
    client = ScriptedLLMClient([empty, empty, empty])
    async with model_dispatcher(models_with(client)) as dispatcher:
        call = LLMCall(workflow("u", "wf"), talk(), answer=StructuredAnswer(Verdict))
        with pytest.raises(ResponseValidationError) as refused:
            await dispatcher.submit(call).result()
    assert refused.value.fields == ("verdict",) and "verdict" in refused.value.explain_to_llm()
    assert len(client.requests) == 3 and call.context.attempt == 3


async def test_a_correction_signal_carries_the_model_and_its_number(autojump_clock: Any) -> None:
    """TOOL-29: ResponseCorrectionRetry names the model and counts corrections from 1."""
    client = ScriptedLLMClient([reply(""), reply("fine")])
    signals: list[BaseException] = []
    async with model_dispatcher(models_with(client)) as dispatcher:

        class Watching(LLMCall[str]):
            async def execute(self, context: JobContext) -> str:
                try:
                    return await super().execute(context)
                except ResponseCorrectionRetry as signal:
                    signals.append(signal)
                    raise

        call = Watching(workflow("u", "wf"), talk(), answer=TextAnswer())
        assert await dispatcher.submit(call).result() == "fine"
    (signal,) = signals
    assert isinstance(signal, ResponseCorrectionRetry)
    assert signal.model == "think" and signal.attempt == 1 and signal.feedback


# -- truncation (TOOL-28, TOOL-37, EXEC-17) ------------------------------------------------------


async def test_a_truncation_reruns_once_at_the_models_ceiling(autojump_clock: Any) -> None:
    """TOOL-28: a MAX_TOKENS stop raises OutputTruncationRetry with the declared output (16000)
    as the previous budget and the model's max output as the new one; the outgoing turn's
    requested output is raised, so the re-run reserves the larger budget. EXEC-17: one
    truncation gives two executions and then the answer."""
    client = ScriptedLLMClient(
        [reply("cut sh", stop_reason=LLMStopReason.MAX_TOKENS), reply("whole answer")]
    )
    recorder = Recorder()
    conversation = talk()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        call = LLMCall(workflow("u", "wf"), conversation, answer=TextAnswer())
        assert await dispatcher.submit(call).result() == "whole answer"
        await trio.testing.wait_all_tasks_blocked()
    (event,) = recorder.typed(ev.OutputTruncationRetryEvent)
    assert (event.previous_budget, event.new_budget, event.model) == (16_000, 32_000, "think")
    assert [r.max_tokens for r in client.requests] == [16_000, 32_000]
    assert call.binding is not None and call.binding.output_reservation == 32_000
    assert conversation.turns[-2].requested_output_tokens == 32_000
    assert len(recorder.typed(ev.JobStartedEvent)) == 2


async def test_an_answer_already_cut_at_the_ceiling_fails(autojump_clock: Any) -> None:
    """TOOL-37: an output size is mandatory; a truncated answer is retried once at the
    ceiling, and an answer already cut at the ceiling fails."""
    cut = reply("cut", stop_reason=LLMStopReason.MAX_TOKENS)
    client = ScriptedLLMClient([cut, cut])
    async with model_dispatcher(models_with(client)) as dispatcher:
        call = LLMCall(workflow("u", "wf"), talk(), answer=TextAnswer())
        with pytest.raises(UncorrectableError, match="cut at the model's ceiling of 32000"):
            await dispatcher.submit(call).result()
        at_max = LLMCall(workflow("u", "wf"), talk(OutputSize.MAX), answer=TextAnswer())
        client2 = ScriptedLLMClient([cut])
        dispatcher.models._clients["think"] = client2
        with pytest.raises(UncorrectableError, match="ceiling"):
            await dispatcher.submit(at_max).result()
        assert len(client2.requests) == 1
        silent = Conversation(grade=Grade.SMALL)
        silent.put_objective("no size")
        with pytest.raises(UncorrectableError, match="output size is mandatory"):
            await dispatcher.submit(LLMCall(workflow("u", "wf"), silent)).result()


def test_a_truncation_signal_carries_both_budgets() -> None:
    """TOOL-28: the signal's budgets are the declared output and the ceiling."""
    call = LLMCall(workflow("u", "wf"), talk(), answer=TextAnswer())
    with pytest.raises(OutputTruncationRetry) as signal:
        call._truncated(CAT.spec("think"), 16_000)
    assert (signal.value.previous_max_tokens, signal.value.escalated_max_tokens) == (16_000, 32_000)


# -- conversations (TOOL-35) ----------------------------------------------------------------------


async def test_one_job_owns_a_conversation_and_the_next_waits_for_the_teardown(
    autojump_clock: Any,
) -> None:
    """TOOL-35: only one job owns a conversation at a time; a second waits up to 30 s for it to
    be released, and the owner's teardown releases it."""
    conversation = talk()
    order: list[str] = []

    class Holder(Orchestrator[str]):
        def __init__(self, parent: Any, name: str, hold: float) -> None:
            super().__init__(parent)
            self.label, self.hold = name, hold

        async def execute(self, context: JobContext) -> str:
            await conversation.acquire(context)
            order.append(f"{self.label} at {trio.current_time():g}")
            await trio.sleep(self.hold)
            return self.label

    async with model_dispatcher(models_with(ScriptedLLMClient())) as dispatcher:
        first = dispatcher.submit(Holder(workflow("u", "a"), "first", 10))
        await trio.sleep(1)
        second = dispatcher.submit(Holder(workflow("u", "b"), "second", 0))
        assert await first.result() == "first" and await second.result() == "second"
        assert conversation.owner is None
        third = dispatcher.submit(Holder(workflow("u", "c"), "third", 100))
        await trio.sleep(1)
        late = dispatcher.submit(Holder(workflow("u", "d"), "late", 0))
        with pytest.raises(UncorrectableError, match="still owned by Holder"):
            await late.result()
        assert late.context.state is JobState.FAILED
        await third.result()
    start = order[0].split(" at ")[1]
    assert order == [f"first at {start}", f"second at {float(start) + 10:g}", order[2]]
    assert OWNERSHIP_WAIT == 30.0


def test_a_conversation_is_temporary_until_minted_and_its_objective_freezes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """TOOL-35: temporary by default, durable once mint_conversation_id() is called; the
    objective freezes at the first send, a later same text is a no-op and a different one is
    ignored and logged as an error."""
    conversation = Conversation(output=100)
    assert not conversation.durable
    assert conversation.mint_conversation_id() == conversation.id and conversation.durable
    conversation.put_objective("first")
    conversation.put_objective("second")  # before the first send it may still change
    conversation.request_for(CAT.spec("think"))
    conversation.put_objective("second")
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.llm.conversation"):
        conversation.put_objective("third")
    assert conversation.objective == "second"
    assert any("objective is frozen" in r.message for r in caplog.records)


async def test_a_durable_conversation_is_kept_when_released(autojump_clock: Any) -> None:
    """TOOL-35, TOOL-34: a durable conversation is kept by its dispatcher's store at release,
    and one no store holds is refused."""
    async with model_dispatcher(models_with(ScriptedLLMClient())) as dispatcher:
        store = conversation_store(dispatcher)
        kept = store.adopt(talk())
        kept.mint_conversation_id()
        temporary = store.adopt(talk())

        class Use(Orchestrator[None]):
            async def execute(self, context: JobContext) -> None:
                await kept.acquire(context)
                await temporary.acquire(context)

        await dispatcher.submit(Use(workflow("u", "wf"))).result()
        assert kept.id in store and temporary.id not in store
        assert store.get(kept.id) is kept
        with pytest.raises(ResourceNotFoundError, match="no store holds"):
            store.get("conversation-missing")


# -- the quick question (TOOL-38) ----------------------------------------------------------------


async def test_a_quick_question_needs_a_grade_and_corrects_like_a_call(autojump_clock: Any) -> None:
    """TOOL-38: a model-dependent tool's converse corrects a bad answer up to twice, the way an
    LLMCall does; the quick question's grade is required."""
    root = workflow("u", "wf")
    with pytest.raises(ValueError, match="grade"):
        QuickLLMQuestion(root, "Is trio async?", None)  # type: ignore[arg-type]
    client = ScriptedLLMClient([reply(""), reply(" "), reply("Yes.")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        question = QuickLLMQuestion(root, "Is trio async?", Grade.SMALL, output=OutputSize.VERDICT)
        assert await dispatcher.submit(question).result() == "Yes."
        stubborn = ScriptedLLMClient([reply("")] * 3)
        dispatcher.models._clients["think"] = stubborn
        again = QuickLLMQuestion(root, "Is it?", Grade.SMALL, output=OutputSize.VERDICT)
        with pytest.raises(ResponseValidationError, match="empty"):
            await dispatcher.submit(again).result()
    assert len(stubborn.requests) == 3


def test_a_raw_response_is_handed_back_as_it_is() -> None:
    """The default handler answers the LLMResponse itself, and a call works at the standard
    depth."""
    call: LLMCall[LLMResponse] = LLMCall(workflow("u", "wf"), talk())
    response = reply("x")
    assert call.answer.parse(response) is response and call.depth is Depth.STANDARD
