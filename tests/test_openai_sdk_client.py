"""The OpenAI plugin's clients (plugins/nucleo-trio-openai) over the official SDK, against the
project's fake OpenAI server on loopback: the wire format both ways, streaming, embeddings, and
every refusal turned into the runtime's signal after exactly one request (the SDK's retries are
off, whatever the AsyncOpenAI it is given was built with)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
import trio
import trio.testing
from nucleo_trio_openai import (
    OpenAIClient,
    OpenAIEmbeddingsClient,
    open_async_openai,
    openai_provider,
)

from nucleo_trio.errors import (
    ExternalServiceError,
    InvalidInputError,
    LLMStopReason,
    OverloadRetry,
    QuotaExhaustedError,
    RateLimitRetry,
    ResourceNotFoundError,
    TransientErrorRetry,
    UnauthorizedError,
    UpstreamFailure,
)
from nucleo_trio.llm.clients import (
    LLMRequest,
    Message,
    OutputSchema,
    ToolCall,
    ToolSpec,
)
from nucleo_trio.llm.clients.fake_server import FakeOpenAIServer, FakeReply, serve_fake_openai

WEATHER = ToolSpec(
    name="weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def ask(text: str = "hello there", **fields: Any) -> LLMRequest:
    return LLMRequest(messages=(Message.user(text),), max_tokens=50, **fields)


@asynccontextmanager
async def sdk_for(
    *steps: FakeReply, **server: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeOpenAIServer]]:
    async with serve_fake_openai(*steps, **server) as fake:
        sdk = open_async_openai(api_key="test-key", base_url=fake.base_url)
        try:
            yield sdk, fake
        finally:
            await sdk.close()


async def test_a_completion_reads_text_usage_and_limits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first choice's text, the reported usage, the model ids and the x-ratelimit headers
    reach the response; the key goes as a bearer token."""
    async with sdk_for(publish_limits=True, requests_per_minute=60) as (sdk, fake):
        response = await OpenAIClient(sdk, model="fake-model").complete(ask())
    assert response.content == "echo: hello there"
    assert response.stop_reason is LLMStopReason.END_TURN
    assert response.provider_stop_reason == "stop"
    assert response.model == "fake-model" and response.provider_model == "fake-model"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert not response.usage.estimated
    assert response.rate_limit_info is not None
    assert response.rate_limit_info.request_limit == 60
    (request,) = fake.requests
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["max_tokens"] == 50 and "stream" not in request.body


async def test_tools_schemas_and_extra_fields_go_on_the_wire_and_tool_calls_come_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Tools, the tool choice, an output schema, a temperature, stops and extra fields are sent
    as the API has them; an assistant turn with tool calls and its tool result go back; the
    reply's tool calls are parsed."""
    call = ToolCall(id="call_1", name="weather", arguments='{"city": "Oslo"}')
    async with sdk_for(FakeReply.completion(tool_calls=[call])) as (sdk, fake):
        client = OpenAIClient(sdk, model="fake-model", max_tokens_field="max_completion_tokens")
        request = LLMRequest(
            messages=(
                Message.system("Be brief."),
                Message.user("Weather?"),
                Message.assistant("", tool_calls=(call,)),
                Message.tool_result("call_1", "sunny"),
            ),
            max_tokens=40,
            tools=(WEATHER,),
            tool_choice="weather",
            output_schema=OutputSchema(name="answer", schema={"type": "object"}),
            temperature=0.2,
            stop=("END",),
            extra={"seed": 7},
        )
        response = await client.complete(request)
    assert response.tool_calls == (call,) and response.has_tool_calls
    assert response.stop_reason is LLMStopReason.TOOL_USE
    body = fake.requests[0].body
    assert body["max_completion_tokens"] == 40 and "max_tokens" not in body
    assert body["tools"][0]["function"]["name"] == "weather"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["response_format"]["json_schema"]["name"] == "answer"
    assert body["temperature"] == 0.2 and body["stop"] == ["END"] and body["seed"] == 7
    assistant, tool = body["messages"][2], body["messages"][3]
    assert assistant["content"] is None and assistant["tool_calls"][0]["id"] == "call_1"
    assert tool == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    with pytest.raises(ValueError, match="extra sets \\['model'\\]"):
        await client.complete(ask(extra={"model": "other"}))


async def test_a_stream_hands_text_over_in_order_and_returns_the_same_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each text delta reaches the sink as it arrives; the streamed reply equals the completed
    one (text, stop reason, usage from ``include_usage``)."""
    async with sdk_for() as (sdk, fake):
        client = OpenAIClient(sdk, model="fake-model")
        whole = await client.complete(ask("one two three"))
        pieces: list[str] = []
        streamed = await client.stream(ask("one two three"), pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == streamed.content == whole.content
    assert streamed.stop_reason is whole.stop_reason and streamed.usage == whole.usage
    assert fake.requests[1].body["stream"] is True
    assert fake.requests[1].body["stream_options"] == {"include_usage": True}


async def test_a_streamed_tool_call_is_assembled_from_its_fragments(
    autojump_clock: trio.testing.MockClock,
) -> None:
    call = ToolCall(id="call_7", name="weather", arguments='{"city": "Bergen, Norway"}')
    async with sdk_for(FakeReply.completion(tool_calls=[call])) as (sdk, _):
        response = await OpenAIClient(sdk, model="fake-model").stream(ask(), lambda _: None)
    assert response.tool_calls == (call,)
    assert response.stop_reason is LLMStopReason.TOOL_USE


async def test_a_stream_cut_without_a_finish_reason_is_a_transient_rerun(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A body that ends before the finish reason is never an answer."""
    cut = FakeReply(
        body="data: "
        + json.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "fake-model",
                "choices": [{"index": 0, "delta": {"content": "half"}}],
            }
        )
        + "\n\n",
        headers={"content-type": "text/event-stream"},
    )
    async with sdk_for(cut) as (sdk, _):
        with pytest.raises(TransientErrorRetry, match="in transit"):
            await OpenAIClient(sdk, model="fake-model").stream(ask(), lambda _: None)


@pytest.mark.parametrize(
    ("reply", "signal", "retry_after"),
    [
        (FakeReply.rate_limited(retry_after=7), RateLimitRetry, 7.0),
        (FakeReply.rate_limited(retry_after=2, retry_after_ms=1500), RateLimitRetry, 1.5),
        (FakeReply.overloaded(), OverloadRetry, None),
        (FakeReply.overloaded(503), OverloadRetry, None),
        (FakeReply.server_error(500), TransientErrorRetry, None),
        (FakeReply.server_error(503), TransientErrorRetry, None),
        (FakeReply.error(408), TransientErrorRetry, None),
        (FakeReply.dropped(), TransientErrorRetry, None),
    ],
)
async def test_a_refusal_is_the_runtime_signal_after_one_request(
    autojump_clock: trio.testing.MockClock,
    reply: FakeReply,
    signal: type[Exception],
    retry_after: float | None,
) -> None:
    """A 429 (with the server's wait), an overload, a 5xx, a 408 and a dropped connection each
    raise their re-run signal, carrying an upstream failure; the server saw one request only,
    though the AsyncOpenAI was built to retry twice."""
    async with serve_fake_openai() as fake:
        retrying = openai.AsyncOpenAI(api_key="k", base_url=fake.base_url, max_retries=2)
        try:
            client = OpenAIClient(retrying, model="fake-model")
            assert client.sdk.max_retries == 0
            for call in (client.complete, lambda r: client.stream(r, lambda _: None)):
                fake.script(reply)
                with pytest.raises(signal) as caught:
                    await call(ask())
                failure = caught.value.failure  # type: ignore[attr-defined]
                assert isinstance(failure, UpstreamFailure)
                assert caught.value.retry_after == retry_after  # type: ignore[attr-defined]
                assert isinstance(caught.value.__cause__, ExternalServiceError)
        finally:
            await retrying.close()
    assert len(fake.requests) == 2  # one for the completion, one for the stream


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (FakeReply.quota_exhausted(), QuotaExhaustedError),
        (FakeReply.error(400, "bad schema"), InvalidInputError),
        (FakeReply.error(401, "no key"), UnauthorizedError),
        (FakeReply.error(404, "no such model"), ResourceNotFoundError),
    ],
)
async def test_a_status_waiting_does_not_fix_is_the_matching_error(
    autojump_clock: trio.testing.MockClock, reply: FakeReply, error: type[Exception]
) -> None:
    async with sdk_for(reply) as (sdk, fake):
        with pytest.raises(error):
            await OpenAIClient(sdk, model="fake-model").complete(ask())
    assert len(fake.requests) == 1


async def test_embeddings_come_back_in_order_with_usage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with sdk_for(FakeReply.embeddings([[1.0, 0.0], [0.0, 1.0]])) as (sdk, fake):
        client = OpenAIEmbeddingsClient(sdk, model="embed-model")
        response = await client.embed(["a", "b"])
        empty = await client.embed([])
        with pytest.raises(TypeError, match="single str"):
            await client.embed("a")
    assert response.vectors == ((1.0, 0.0), (0.0, 1.0)) and response.model == "embed-model"
    assert empty.vectors == () and len(fake.requests) == 1
    assert fake.requests[0].body["input"] == ["a", "b"]


async def test_the_provider_opens_one_sdk_at_the_first_call_and_closes_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every entry's clients share one AsyncOpenAI with its retries off; close() closes it."""
    from .model_doubles import catalog, entry

    models = catalog(entry("small", provider_key="openai", wire_model_id="fake-model"))
    async with serve_fake_openai() as fake:
        provider = openai_provider("openai", base_url=fake.base_url, api_key="k")
        assert provider.credential is None  # the key is given: nothing to look up
        assert provider.llm is not None and provider.embeddings is not None
        assert provider.close is not None
        small = provider.llm(models.spec("small"))
        vectors = provider.embeddings(models.spec("small"))
        assert isinstance(small, OpenAIClient) and isinstance(vectors, OpenAIEmbeddingsClient)
        assert small.sdk.max_retries == 0
        assert (await small.complete(ask("x"))).content == "echo: x"
        await provider.close()
        assert small.sdk.is_closed()
    assert openai_provider("openai").credential == "OPENAI_API_KEY"
