"""Streaming where agents use it: an ``LLMCall`` or a ``Thinker`` built with ``stream=True``
publishes the reply's text and tool calls on the bus as they arrive, before the call's terminal
event; the answer is read exactly as a completed reply's, and its usage is recorded and booked
once, when the stream ends.

Against a scripted client (text a word at a time, each tool call in two fragments), a client
that streams text but not tool calls (its calls are published whole at the end), and the
OpenAI-compatible client and the OpenAI plugin over the project's fake server.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import trio
import trio.testing
from nucleo_trio_openai import openai_provider

from nucleo_trio.bus import events as ev
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import Tool, workflow
from nucleo_trio.llm import (
    Conversation,
    LLMCall,
    ScriptedLLMClient,
    TextAnswer,
    Thinker,
    ThinkerDeclaration,
    openai_compatible,
    reply,
)
from nucleo_trio.llm.clients import LLMRequest, LLMResponse, TextSink, ToolCall, ToolSpec
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.llm.thinker import FINAL_ANSWER
from nucleo_trio.models import Cost, CostLedger, Grade, ModelRuntime, OutputSize, Providers

from .conftest import Recorder
from .model_doubles import catalog, entry, model_dispatcher, providers

PRICED = catalog(
    entry(
        "think",
        wire_model_id="fake-model",
        input_price_per_million="1000",
        output_price_per_million="1000",
        currency="USD",
    )
)
DECLARED = ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT)
WEATHER = ToolSpec(
    name="weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
OSLO = ToolCall(id="c1", name="weather", arguments=json.dumps({"city": "Oslo"}))


def models_with(client: Any) -> ModelRuntime:
    return ModelRuntime(PRICED, providers=providers("fake-llm", clients={"think": client}))


def ask(text: str = "Tell me", *, stream: bool, tools: tuple[ToolSpec, ...] = ()) -> LLMCall[Any]:
    conversation = Conversation(output=200, grade=Grade.SMALL)
    conversation.put_objective(text)
    return LLMCall(workflow("u", "streams"), conversation, tools=tools, stream=stream)


def of_job(recorder: Recorder, job_id: str) -> list[ev.JobEvent]:
    return [e for e in recorder.events if e.snapshot is not None and e.snapshot.job_id == job_id]


def streamed_before_the_end(recorder: Recorder, job_id: str) -> list[ev.JobEvent]:
    """The job's stream events, checked to come before its terminal event, in order."""
    events = of_job(recorder, job_id)
    kinds = (ev.ContentStreamEvent, ev.ToolCallStreamEvent)
    end = next(i for i, e in enumerate(events) if isinstance(e, ev.AbstractTerminalEvent))
    assert all(not isinstance(e, kinds) for e in events[end:])
    return [e for e in events[:end] if isinstance(e, kinds)]


def text_of(events: list[ev.JobEvent]) -> str:
    return "".join(e.chunk or "" for e in events if isinstance(e, ev.ContentStreamEvent))


def calls_of(events: list[ev.JobEvent]) -> dict[int, tuple[str | None, str, str]]:
    """Each streamed tool call, its fragments joined: index -> (id, name, arguments)."""
    joined: dict[int, list[Any]] = {}
    for event in events:
        if isinstance(event, ev.ToolCallStreamEvent):
            call = joined.setdefault(event.index, [None, "", ""])
            call[0] = event.call_id or call[0]
            call[1] += event.name
            call[2] += event.arguments
    return {index: (c[0], c[1], c[2]) for index, c in joined.items()}


async def test_a_streamed_call_publishes_its_text_in_order_and_answers_as_a_completed_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The text reaches the bus a word at a time, in order, before the call's terminal event;
    the answer equals the completed call's; the reply is recorded once and the ledger books
    it once."""
    text = "the quick brown fox jumps"
    client = ScriptedLLMClient(
        responder=lambda request: reply(text, input_tokens=100, output_tokens=50)
    )
    recorder = Recorder()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        ledger = CostLedger(PRICED).attach(dispatcher)
        completed = ask(stream=False)
        streamed = ask(stream=True)
        whole = await dispatcher.submit(completed).result()
        answer = await dispatcher.submit(streamed).result()
        await trio.testing.wait_all_tasks_blocked()
    assert isinstance(answer, LLMResponse) and isinstance(whole, LLMResponse)
    assert (answer.content, answer.stop_reason, answer.usage) == (
        whole.content,
        whole.stop_reason,
        whole.usage,
    )
    chunks = streamed_before_the_end(recorder, streamed.job_id)
    assert [e.chunk for e in chunks] == ["the ", "quick ", "brown ", "fox ", "jumps"]  # type: ignore[attr-defined]
    assert not streamed_before_the_end(recorder, completed.job_id)
    (terminal,) = [
        e for e in of_job(recorder, streamed.job_id) if isinstance(e, ev.JobCompletedEvent)
    ]
    assert len(terminal.llm_responses) == 1
    assert ledger.spent(streamed.workflow_id, "USD") == Cost(Decimal("0.15"), "USD")


async def test_a_streamed_tool_call_reaches_the_bus_in_fragments_before_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client = ScriptedLLMClient([reply(tool_calls=[OSLO])])
    recorder = Recorder()
    async with model_dispatcher(models_with(client)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        call = ask(stream=True, tools=(WEATHER,))
        response = await dispatcher.submit(call).result()
        await trio.testing.wait_all_tasks_blocked()
    events = streamed_before_the_end(recorder, call.job_id)
    fragments = [e for e in events if isinstance(e, ev.ToolCallStreamEvent)]
    assert len(fragments) == 2 and fragments[0].payload == {
        "index": 0,
        "id": "c1",
        "name": "weather",
        "arguments": "",
    }
    assert calls_of(events) == {0: ("c1", "weather", OSLO.arguments)}
    assert response.tool_calls == (OSLO,)


class TextOnlyStream:
    """A client whose stream hands over text only (it has no ``on_tool_call``)."""

    model_identifier = "fake-model"

    def __init__(self) -> None:
        self.scripted = ScriptedLLMClient([reply("calling", tool_calls=[OSLO])])

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.scripted.complete(request)

    async def stream(self, request: LLMRequest, on_text: TextSink) -> LLMResponse:
        return await self.scripted.stream(request, on_text)


async def test_a_client_that_cannot_stream_tool_calls_has_them_published_whole_at_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder()
    async with model_dispatcher(models_with(TextOnlyStream())) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        call = ask(stream=True, tools=(WEATHER,))
        await dispatcher.submit(call).result()
        await trio.testing.wait_all_tasks_blocked()
    events = streamed_before_the_end(recorder, call.job_id)
    assert [type(e) for e in events] == [ev.ContentStreamEvent, ev.ToolCallStreamEvent]
    assert text_of(events) == "calling"
    assert calls_of(events) == {0: ("c1", "weather", OSLO.arguments)}


class Weather(Tool[str]):
    """The weather in a city."""

    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}

    def __init__(self, parent: Any) -> None:
        super().__init__(parent)
        self.input: dict[str, Any] = {}

    async def execute(self, context: Any) -> str:
        return f"sunny in {self.input.get('city')}"


def _final(answer: str) -> LLMResponse:
    return reply(
        tool_calls=[ToolCall(id="f", name=FINAL_ANSWER, arguments=json.dumps({"answer": answer}))]
    )


async def test_a_streaming_thinker_streams_every_turn_and_answers_as_a_plain_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each turn's call streams its tool calls (and text) under the call's own job; the tool
    runs, and the answer equals a thinker's that does not stream."""
    answers = []
    recorder = Recorder()
    for stream in (False, True):
        client = ScriptedLLMClient([reply(tool_calls=[OSLO]), _final("sunny")])
        async with model_dispatcher(models_with(client)) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            thinker = Thinker(
                workflow("u", "wf"), DECLARED, "Weather?", tools=[Weather], stream=stream
            )
            answers.append(await dispatcher.submit(thinker).result())
            await trio.testing.wait_all_tasks_blocked()
        assert thinker.turns == 2
    assert answers == ["sunny", "sunny"]
    turns = [
        e.snapshot.job_id
        for e in recorder.typed(ev.JobCompletedEvent)
        if e.snapshot is not None
        and e.snapshot.parent_job_id == thinker.job_id
        and e.snapshot.name == "LLMCall"
    ]
    assert len(turns) == 2
    first, second = (calls_of(streamed_before_the_end(recorder, turn)) for turn in turns)
    assert first == {0: ("c1", "weather", OSLO.arguments)}
    assert second == {0: ("f", FINAL_ANSWER, json.dumps({"answer": "sunny"}))}


async def test_streaming_over_the_wire_matches_the_completed_reply(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Over the fake server, through the OpenAI-compatible client: the text and the tool
    call's fragments reach the bus as the server streams them; the assembled answer is the
    completed one's."""
    tool_reply = FakeReply.completion("checking", tool_calls=[OSLO])
    recorder = Recorder()
    async with serve_fake_openai(tool_reply, tool_reply) as fake:
        keys = Providers({})
        keys.register(openai_compatible("fake-llm", fake.base_url, http_settings=HttpSettings()))
        async with model_dispatcher(ModelRuntime(PRICED, providers=keys)) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            completed = await dispatcher.submit(ask(stream=False, tools=(WEATHER,))).result()
            call = ask(stream=True, tools=(WEATHER,))
            streamed = await dispatcher.submit(call).result()
            await trio.testing.wait_all_tasks_blocked()
    assert (streamed.content, streamed.tool_calls) == (completed.content, completed.tool_calls)
    events = streamed_before_the_end(recorder, call.job_id)
    assert text_of(events) == "checking"
    assert calls_of(events) == {0: ("c1", "weather", OSLO.arguments)}
    assert sum(isinstance(e, ev.ToolCallStreamEvent) for e in events) > 2
    assert [r.is_stream for r in fake.requests] == [False, True]


async def test_streaming_through_the_openai_sdk_matches_the_completed_reply() -> None:
    """The same through the OpenAI plugin: its client hands the SDK's chunks over as they
    come. (On the real clock: the SDK reads its platform in a worker thread before its first
    request, a wait the autojump clock would leap over to the call's deadline.)"""
    answer = TextAnswer()
    recorder = Recorder()
    async with serve_fake_openai() as fake:
        keys = Providers({})
        provider = keys.register(openai_provider("fake-llm", base_url=fake.base_url, api_key="k"))
        runtime = ModelRuntime(PRICED, providers=keys)
        async with model_dispatcher(runtime) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            conversation = Conversation(output=200, grade=Grade.SMALL)
            conversation.put_objective("one two three")
            call = LLMCall(workflow("u", "sdk"), conversation, answer=answer, stream=True)
            text = await dispatcher.submit(call).result()
            await trio.testing.wait_all_tasks_blocked()
        assert provider.close is not None
    assert text == "echo: one two three"
    chunks = streamed_before_the_end(recorder, call.job_id)
    assert len(chunks) > 1 and text_of(chunks) == text
