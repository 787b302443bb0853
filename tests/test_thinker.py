"""The goal-directed thinker: turns, tools as jobs, the validation seat, pins and budgets."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio

from nucleo_trio.bus import events as ev
from nucleo_trio.errors import (
    GuardrailError,
    RateLimitRetry,
    ResourceNotFoundError,
    UncorrectableError,
)
from nucleo_trio.guardrails import OBS_GUARDS_VALIDATION, ValidationGuardrail
from nucleo_trio.jobs import Identifiable, JobContext, JobType, Tool, workflow
from nucleo_trio.llm import (
    Conversation,
    LLMRequest,
    ScriptedLLMClient,
    Thinker,
    ThinkerDeclaration,
    ToolCall,
    conversation_store,
    llm_required,
    reply,
)
from nucleo_trio.llm.thinker import FINAL_ANSWER, ToollessThinker
from nucleo_trio.models import Depth, Grade, ModelRuntime, OutputDeclaration, OutputSize

from .conftest import Recorder
from .model_doubles import catalog, entry, model_dispatcher, providers

CAT = catalog(entry("think"), entry("big", grade="LARGE"))
DECLARED = ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT)


def models_with(client: ScriptedLLMClient) -> ModelRuntime:
    return ModelRuntime(
        CAT, providers=providers("fake-llm", clients={"think": client, "big": client})
    )


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def final(answer: Any, call_id: str = "final") -> Any:
    arguments = answer if isinstance(answer, dict) else {"answer": answer}
    return reply(tool_calls=[call(FINAL_ANSWER, call_id, **arguments)])


class Lookup(Tool[str]):
    """Looks a word up."""

    parameters = {"type": "object", "properties": {"word": {"type": "string"}}}
    started: list[float] = []
    parents: list[str | None] = []

    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        self.input: dict[str, Any] = {}

    async def execute(self, context: JobContext) -> str:
        Lookup.started.append(trio.current_time())
        Lookup.parents.append(self.parent_job_id)
        await trio.sleep(5)
        word = self.input.get("word", "")
        if word == "boom":
            raise GuardrailError("the word boom is not allowed")
        return f"{word} means something"


class Refuser(ValidationGuardrail):
    """Refuses any answer that is not "42"."""

    runs: list[Any] = []

    async def validate(self, target: Any) -> None:
        Refuser.runs.append(target)
        if target != "42":
            raise GuardrailError(f"{target} is not the answer")


class Checked(Thinker[str]):
    def validation_guardrails(self) -> list[ValidationGuardrail]:
        return [Refuser(self)]


@pytest.fixture(autouse=True)
def _fresh_logs() -> None:
    Lookup.started, Lookup.parents, Refuser.runs = [], [], []


# -- the declaration (TOOL-10) --------------------------------------------------------------------


def test_a_declaration_needs_a_grade_and_a_size() -> None:
    """TOOL-10: a null grade names "grade", a null size says it "must name its size"; the
    declaration reads back as given, and a token count is allowed."""
    with pytest.raises(ValueError, match="grade"):
        ThinkerDeclaration(None, OutputSize.COMPACT)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must name its size"):
        ThinkerDeclaration(Grade.SMALL, None)  # type: ignore[arg-type]
    declared = ThinkerDeclaration(Grade.LARGE, OutputSize.EXTENDED)
    assert declared.grade is Grade.LARGE and declared.output == OutputDeclaration(
        OutputSize.EXTENDED
    )
    assert ThinkerDeclaration(Grade.SMALL, 700).output.size == 700


# -- turns and tools (TOOL-01, TOOL-04, TOOL-13..16, TOOL-20) ------------------------------------


async def test_tool_calls_run_as_jobs_and_their_results_go_back(autojump_clock: Any) -> None:
    """TOOL-01, TOOL-04: a called tool is a fresh job built with the thinker as parent, its
    input set, then submitted. TOOL-14: every call of a turn is submitted before any is
    awaited. TOOL-15: N calls give N results, a failure going back explained. TOOL-16: a top
    level thinker's answer is also streamed."""
    client = ScriptedLLMClient(
        [
            reply(
                tool_calls=[
                    call("lookup", "c1", word="trio"),
                    call("lookup", "c2", word="boom"),
                    call("missing_tool", "c3"),
                ]
            ),
            final("trio is a library"),
        ]
    )
    recorder = Recorder()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        thinker = Thinker(workflow("u", "wf"), DECLARED, "What is trio?", tools=[Lookup])
        assert thinker.job_type is JobType.THINKER and thinker.timeout is None
        assert await dispatcher.submit(thinker).result() == "trio is a library"
        await trio.testing.wait_all_tasks_blocked()
    assert Lookup.started == [Lookup.started[0]] * 2  # both submitted before either finished
    assert Lookup.parents == [thinker.job_id, thinker.job_id]
    second = client.requests[1]
    results = {m.tool_call_id: m.content for m in second.messages if m.tool_call_id}
    assert results["c1"] == "trio means something"
    assert "the word boom is not allowed" in results["c2"]
    assert "There is no tool 'missing_tool'" in results["c3"]
    assert {t.name for t in client.requests[0].tools} == {"lookup", FINAL_ANSWER}
    (streamed,) = recorder.typed(ev.ContentStreamEvent)
    assert streamed.chunk == "trio is a library" and streamed.last
    assert thinker.conversation is not None and thinker.conversation.owner is None


async def test_a_text_reply_answers_and_an_empty_one_is_asked_again(autojump_clock: Any) -> None:
    """TOOL-20: a reply with neither tool calls nor an answer is asked again; for a text
    answer, a plain reply is the answer."""
    client = ScriptedLLMClient([reply(""), reply("plain answer")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Thinker(workflow("u", "wf"), DECLARED, "Say something.")
        assert await dispatcher.submit(thinker).result() == "plain answer"
    assert thinker.turns == 2
    assert "final_answer" in client.requests[1].messages[-1].content


async def test_the_iteration_budget_ends_in_none(autojump_clock: Any) -> None:
    """TOOL-13: the default budget is 50; a run that reaches its limit without an answer
    returns None."""
    assert Thinker.DEFAULT_MAX_ITERATIONS == 50
    client = ScriptedLLMClient(responder=lambda request: reply(""))
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Thinker(workflow("u", "wf"), DECLARED, "Loop.", max_iterations=4)
        assert thinker.max_iterations == 4
        assert await dispatcher.submit(thinker).result() is None
    assert thinker.turns == 4 and len(client.requests) == 4


@attrs.frozen
class Verdict:
    verdict: str = llm_required()
    confidence: float = 0.0


async def test_a_structured_answer_is_read_from_the_final_answer_call(autojump_clock: Any) -> None:
    """TOOL-26: the final answer follows the answer type's schema; an answer leaving a
    required field empty goes back as that call's result and the model answers again."""
    client = ScriptedLLMClient(
        [final({"verdict": "", "confidence": 1}), final({"verdict": "true", "confidence": 0.9})]
    )
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Thinker(workflow("u", "wf"), DECLARED, "Judge.", answer=Verdict)
        assert await dispatcher.submit(thinker).result() == Verdict("true", 0.9)
    schema = next(t for t in client.requests[0].tools if t.name == FINAL_ANSWER).parameters
    assert schema["required"] == ["verdict"]
    result = client.requests[1].messages[-1]
    assert result.tool_call_id == "final" and "verdict" in result.content


# -- the validation seat (GRD-33, TOOL-39) -------------------------------------------------------


async def test_a_refused_answer_is_corrected_and_the_next_delivered(autojump_clock: Any) -> None:
    """GRD-33, TOOL-39: a refusal goes back as a correction turn and uses an iteration; the
    second candidate is delivered after 2 turns and 2 guard runs, obs.guards_validation 1."""
    client = ScriptedLLMClient([final("41"), final("42")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Checked(workflow("u", "wf"), DECLARED, "Find the answer.")
        assert await dispatcher.submit(thinker).result() == "42"
        assert thinker.context.metadata[OBS_GUARDS_VALIDATION] == 1
    assert thinker.turns == 2 and Refuser.runs == ["41", "42"]
    assert "41 is not the answer" in client.requests[1].messages[-1].content


async def test_refusals_every_time_exhaust_the_budget_to_none(autojump_clock: Any) -> None:
    """GRD-33, TOOL-39: refused every time with max_iterations 3, the result is None after 3
    turns; the caller never sees the refusal."""
    client = ScriptedLLMClient(responder=lambda request: final("0"))
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Checked(workflow("u", "wf"), DECLARED, "Find it.", max_iterations=3)
        assert await dispatcher.submit(thinker).result() is None
    assert thinker.turns == 3 and Refuser.runs == ["0", "0", "0"]


class Toolless(ToollessThinker[str]):
    def system_prompt_text(self) -> str:
        return "Answer with a number."

    def validation_guardrails(self) -> list[ValidationGuardrail]:
        return [Refuser(self)]


async def test_a_toolless_thinker_fails_with_the_last_refusal_after_two_corrections(
    autojump_clock: Any,
) -> None:
    """TOOL-22: one call per candidate answer; MAX_GUARDRAIL_CORRECTIONS is 2, after which the
    run fails with the last refusal; add_tool throws."""
    client = ScriptedLLMClient([reply("1"), reply("2"), reply("3"), reply("42")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Toolless(workflow("u", "wf"), DECLARED, "What is the answer?")
        with pytest.raises(TypeError, match="toolless"):
            thinker.add_tool(Lookup)
        with pytest.raises(GuardrailError, match="3 is not the answer"):
            await dispatcher.submit(thinker).result()
        assert Toolless.MAX_GUARDRAIL_CORRECTIONS == 2 and len(client.requests) == 3
        assert client.requests[0].messages[0].content == "Answer with a number."
        assert not client.requests[0].tools
        again = Toolless(workflow("u", "wf"), DECLARED, "Again?")
        assert await dispatcher.submit(again).result() == "42"


# -- pins, budgets, depth (TOOL-12, TOOL-30, TOOL-31) --------------------------------------------


async def test_every_call_carries_the_pin_and_the_upstream_budget(autojump_clock: Any) -> None:
    """TOOL-30: a pinned thinker builds its calls on the pin (the same spec instance); an
    unpinned one asks for its grade. TOOL-31: the thinker's upstream retry budget, the
    default 3 or a set value, is handed to every call."""
    root = workflow("u", "wf")
    conversation = Conversation(output=100)
    unpinned = Thinker(root, DECLARED, "x")
    call = unpinned.new_llm_call(JobContext(unpinned, "u"), conversation)
    assert call.upstream_retries == 3 and call.pinned_model() is None
    binding = call.requirements().model_bindings[0]
    assert binding.grade is Grade.SMALL and binding.pinned_spec is None
    pinned = Thinker(root, DECLARED, "x", pinned=CAT.spec("big"))
    pinned.upstream_retries = 0
    pinned_call = pinned.new_llm_call(JobContext(pinned, "u"), conversation)
    assert pinned_call.upstream_retries == 0
    assert pinned_call.requirements().model_bindings[0].pinned_spec is CAT.spec("big")

    client = ScriptedLLMClient([RateLimitRetry("429"), RateLimitRetry("429"), final("late")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        tight = Thinker(workflow("u", "wf"), DECLARED, "x")
        tight.upstream_retries = 1
        with pytest.raises(UncorrectableError, match=r"retry budget \(1\)") as exhausted:
            await dispatcher.submit(tight).result()
        assert isinstance(exhausted.value.__cause__, RateLimitRetry)
        assert len(client.requests) == 2, "one call and one re-run: the budget of 1"


class Inner(Thinker[str]):
    seen_depth: list[Depth] = []

    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent, DECLARED, "inner", depth=Depth.ULTRA_THOROUGH)
        self.input: dict[str, Any] = {}

    async def execute(self, context: JobContext) -> str | None:
        Inner.seen_depth.append(self.depth)
        return "inner says hi"


async def test_a_thinker_called_as_a_tool_never_works_deeper_than_its_caller(
    autojump_clock: Any,
) -> None:
    """TOOL-12: depth defaults to STANDARD and a thinker called by a thinker is lowered to its
    caller's depth. TOOL-16: a thinker called as a tool returns its answer to the caller."""
    client = ScriptedLLMClient([reply(tool_calls=[call("inner", "c1")]), final("done")])
    recorder = Recorder()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        outer = Thinker(workflow("u", "wf"), DECLARED, "delegate", tools=[Inner], depth=Depth.QUICK)
        assert Thinker(workflow("u", "wf"), DECLARED, "x").depth is Depth.STANDARD
        assert await dispatcher.submit(outer).result() == "done"
        await trio.testing.wait_all_tasks_blocked()
    assert Inner.seen_depth == [Depth.QUICK]
    assert [m.content for m in client.requests[1].messages if m.tool_call_id] == ["inner says hi"]
    assert [e.chunk for e in recorder.typed(ev.ContentStreamEvent)] == ["done"]


# -- continuity and transcript (TOOL-34, TOOL-35, TOOL-40) ---------------------------------------


async def test_a_carrier_resumes_a_stored_conversation_and_fails_on_an_unknown_one(
    autojump_clock: Any,
) -> None:
    """TOOL-34: set_conversation_id resumes an existing conversation, and fails if no store
    holds it. TOOL-35: the conversation is released at teardown. TOOL-40: the transcript is
    None before the first run and the whole conversation after."""
    client = ScriptedLLMClient([final("first"), final("second")])
    async with model_dispatcher(models_with(client)) as dispatcher:
        first = Thinker(workflow("u", "wf"), DECLARED, "Remember me.")
        assert first.transcript() is None
        assert await dispatcher.submit(first).result() == "first"
        assert first.conversation is not None
        kept = first.conversation.mint_conversation_id()
        conversation_store(dispatcher).put(first.conversation)
        second = Thinker(workflow("u", "wf"), DECLARED, "Remember me.")
        second.set_conversation_id(kept)
        assert await dispatcher.submit(second).result() == "second"
        assert second.conversation is first.conversation and first.conversation.owner is None
        request: LLMRequest = client.requests[1]
        assert sum(1 for m in request.messages if m.content == "Remember me.") == 1
        lost = Thinker(workflow("u", "wf"), DECLARED, "x")
        lost.set_conversation_id("conversation-nowhere")
        with pytest.raises(ResourceNotFoundError, match="no store holds"):
            await dispatcher.submit(lost).result()
    transcript = second.transcript()
    assert transcript is not None and "user: Remember me." in transcript
    assert "final_answer" in transcript


def test_a_thinker_is_the_carrier_a_heartbeat_fires() -> None:
    """TOOL-34, HB-02: a thinker implements the one nominal ConversationCarrier, the interface
    the Heart checks before it hands a fired job a conversation id."""
    from nucleo_trio import heartbeat, llm
    from nucleo_trio.jobs import ConversationCarrier

    assert heartbeat.ConversationCarrier is ConversationCarrier is llm.ConversationCarrier
    assert issubclass(Thinker, ConversationCarrier)


async def test_a_thinker_without_an_answer_type_fails_on_its_first_turn(
    autojump_clock: Any,
) -> None:
    """TOOL-19: with no answer handler no reply can be the answer, so the run fails on its
    first turn, before any model call."""
    client = ScriptedLLMClient()
    async with model_dispatcher(models_with(client)) as dispatcher:
        thinker = Thinker(workflow("u", "wf"), DECLARED, "x", answer=None)
        with pytest.raises(UncorrectableError, match="has no answer type"):
            await dispatcher.submit(thinker).result()
    assert thinker.turns == 1 and client.requests == []
