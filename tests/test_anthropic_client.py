"""The Anthropic plugin's client (plugins/nucleo-trio-anthropic) over the official SDK, against
the project's fake server speaking the Messages API on loopback: the wire format (system, tool
use and tool results, tools, tool choice, structured output), the reply (text, calls, stop
reasons, usage with the prompt cache's counts, rate-limit headers), streaming, failures turned
into re-run signals with their Retry-After and no retry of the SDK's own, and the pool closed."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest
import trio
import trio.testing
from nucleo_trio_anthropic import AnthropicClient, open_sdk_client
from nucleo_trio_anthropic.client import _status_failure

from nucleo_trio.errors import (
    ExternalServiceError,
    Http400Error,
    Http401Error,
    Http404Error,
    LLMReadableError,
    LLMStopReason,
    OverloadRetry,
    RateLimitRetry,
    TransientErrorRetry,
    UpstreamFailure,
)
from nucleo_trio.http import HttpSettings
from nucleo_trio.llm import LLMRequest, Message, OutputSchema, ToolCall, ToolSpec, Usage
from nucleo_trio.llm.clients import RateLimitType
from nucleo_trio.llm.clients.fake_server import FakeOpenAIServer, FakeReply, serve_fake_openai

KEY = "test-key"


def ask(text: str = "hello", **fields: Any) -> LLMRequest:
    fields.setdefault("max_tokens", 100)
    return LLMRequest(messages=[Message.user(text)], **fields)


def client_for(server: FakeOpenAIServer, **settings: Any) -> AnthropicClient:
    return AnthropicClient(
        "claude-test", api_key=KEY, base_url=server.root, http_settings=HttpSettings(**settings)
    )


# -- the wire format ----------------------------------------------------------------------------


async def test_a_conversation_goes_out_in_the_messages_format() -> None:
    """System turns become ``system``; an assistant's calls are ``tool_use`` blocks and the
    results that answer them one user turn of ``tool_result`` blocks, with the next user text
    merged into it; tools carry their schemas as ``input_schema``."""
    calls = (
        ToolCall(id="toolu_1", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCall(id="toolu_2", name="add", arguments="not json"),
    )
    request = LLMRequest(
        messages=[
            Message.system("Be brief."),
            Message.user("What is 1+2?"),
            Message.assistant("Adding.", tool_calls=calls),
            Message.tool_result("toolu_1", "3"),
            Message.tool_result("toolu_2", "arguments must be JSON"),
            Message.user("And then?"),
        ],
        max_tokens=64,
        tools=[ToolSpec(name="add", description="Adds two numbers", parameters=_ADD)],
        tool_choice="add",
        temperature=0.2,
        stop=("END",),
        extra={"cache_control": {"type": "ephemeral"}},
    )
    async with serve_fake_openai(api_key=KEY) as server:
        async with client_for(server) as client:
            await client.complete(request)
    body = server.requests[0].body
    assert server.requests[0].path == "/v1/messages"
    headers = server.requests[0].headers
    assert KEY in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in headers
    assert body["model"] == "claude-test" and body["max_tokens"] == 64
    assert body["system"] == "Be brief."
    assert body["messages"] == [
        {"role": "user", "content": "What is 1+2?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
                {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "arguments must be JSON",
                },
                {"type": "text", "text": "And then?"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "add", "description": "Adds two numbers", "input_schema": _ADD}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "add"}
    assert body["temperature"] == 0.2 and body["stop_sequences"] == ["END"]
    assert body["cache_control"] == {"type": "ephemeral"}


_ADD = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}


@pytest.mark.parametrize(
    ("choice", "wire"),
    [("auto", {"type": "auto"}), ("none", {"type": "none"}), ("required", {"type": "any"})],
)
async def test_tool_choice_words_map_to_the_apis(choice: str, wire: dict[str, Any]) -> None:
    async with serve_fake_openai() as server:
        async with client_for(server) as client:
            await client.complete(ask(tools=[ToolSpec(name="add")], tool_choice=choice))
    assert server.requests[0].body["tool_choice"] == wire


async def test_an_output_schema_asks_for_json_output() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    async with serve_fake_openai(FakeReply.completion('{"n": 3}')) as server:
        async with client_for(server) as client:
            response = await client.complete(
                ask(output_schema=OutputSchema(name="n", schema=schema))
            )
    assert server.requests[0].body["output_config"] == {
        "format": {"type": "json_schema", "schema": schema}
    }
    assert response.content == '{"n": 3}'


async def test_the_request_model_wins_and_a_missing_model_is_refused() -> None:
    async with serve_fake_openai() as server:
        async with client_for(server) as client:
            response = await client.complete(ask(model="claude-other"))
        async with AnthropicClient(api_key=KEY, base_url=server.root) as bare:
            with pytest.raises(ValueError, match="names no model"):
                await bare.complete(ask())
    assert server.requests[0].body["model"] == "claude-other"
    assert response.model == "claude-other" and len(server.requests) == 1


# -- the reply ----------------------------------------------------------------------------------


async def test_a_reply_carries_text_calls_usage_with_cache_counts_and_ids() -> None:
    """Text blocks join into the content, ``tool_use`` blocks are calls with their input as JSON
    text, and the usage keeps the cache's reads and writes apart from the uncached prompt."""
    reply = FakeReply.completion(
        "Let me add.",
        tool_calls=[ToolCall(id="toolu_9", name="add", arguments='{"a": 1, "b": 2}')],
        input_tokens=40,
        output_tokens=12,
        cache_read_tokens=1000,
        cache_write_tokens=200,
        headers={
            "anthropic-ratelimit-tokens-limit": "80000",
            "anthropic-ratelimit-tokens-remaining": "79000",
            "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:30Z",
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
        },
    )
    async with serve_fake_openai(reply) as server:
        async with client_for(server) as client:
            response = await client.complete(ask())
    assert response.content == "Let me add."
    assert response.tool_calls == (
        ToolCall(id="toolu_9", name="add", arguments='{"a": 1, "b": 2}'),
    )
    assert response.stop_reason is LLMStopReason.TOOL_USE
    assert response.provider_stop_reason == "tool_use"
    assert response.usage == Usage(
        input_tokens=40, output_tokens=12, cache_read_tokens=1000, cache_write_tokens=200
    )
    assert response.usage.total_tokens == 1252
    assert response.model == "claude-test" and response.provider_model == "claude-test"
    assert response.response_id == "msg_1"
    info = response.rate_limit_info
    assert info is not None and info.kind is RateLimitType.CAPACITY
    assert (info.token_limit, info.tokens_remaining) == (80000, 79000)
    assert (info.request_limit, info.requests_remaining) == (50, 49)
    assert info.reset == "2026-01-01T00:00:30Z"


@pytest.mark.parametrize(
    ("finish", "provider", "reason"),
    [
        (None, "end_turn", LLMStopReason.END_TURN),
        ("length", "max_tokens", LLMStopReason.MAX_TOKENS),
        ("stop_sequence", "stop_sequence", LLMStopReason.STOP_SEQUENCE),
        ("refusal", "refusal", LLMStopReason.CONTENT_FILTERED),
        ("pause_turn", "pause_turn", LLMStopReason.UNKNOWN),
    ],
)
async def test_stop_reasons_map_onto_the_runtimes(
    finish: str | None, provider: str, reason: LLMStopReason
) -> None:
    """A reply cut at its budget is a successful response with stop reason MAX_TOKENS (the
    caller decides on a re-run); a word the runtime has no name for is UNKNOWN, kept as said."""
    async with serve_fake_openai(FakeReply.completion("text", finish_reason=finish)) as server:
        async with client_for(server) as client:
            response = await client.complete(ask())
    assert response.successful
    assert response.stop_reason is reason and response.provider_stop_reason == provider


async def test_no_rate_limit_headers_is_no_reading() -> None:
    async with serve_fake_openai() as server:
        async with client_for(server) as client:
            response = await client.complete(ask("hi"))
    assert response.rate_limit_info is None
    assert response.content == "echo: hi"


# -- streaming ----------------------------------------------------------------------------------


async def test_a_stream_hands_text_over_as_it_comes_and_returns_the_whole_turn() -> None:
    reply = FakeReply.completion(
        "one two three",
        tool_calls=[ToolCall(id="toolu_3", name="add", arguments='{"a": 5}')],
        input_tokens=30,
        output_tokens=9,
        cache_read_tokens=500,
        cache_write_tokens=50,
    )
    pieces: list[str] = []
    async with serve_fake_openai(reply, reply) as server:
        async with client_for(server) as client:
            streamed = await client.stream(ask(), pieces.append)
            completed = await client.complete(ask())
    assert pieces == ["one ", "two ", "three"]
    assert server.requests[0].is_stream
    for field in ("content", "tool_calls", "stop_reason", "provider_stop_reason", "usage", "model"):
        assert getattr(streamed, field) == getattr(completed, field), field
    assert streamed.usage.cache_read_tokens == 500 and streamed.usage.cache_write_tokens == 50
    assert json.loads(streamed.tool_calls[0].arguments) == {"a": 5}


async def test_a_stream_hands_tool_calls_over_piece_by_piece_when_asked() -> None:
    """Each call's first piece names it; the pieces after it carry its JSON arguments, which
    joined are the arguments the returned call holds."""
    calls = [
        ToolCall(id="toolu_a", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCall(id="toolu_b", name="neg", arguments='{"x": 7}'),
    ]
    pieces: list[tuple[int, str | None, str, str]] = []
    async with serve_fake_openai(FakeReply.completion("Two calls.", tool_calls=calls)) as server:
        async with client_for(server) as client:
            response = await client.stream(
                ask(), lambda _: None, on_tool_call=lambda *piece: pieces.append(piece)
            )
    assert response.tool_calls == tuple(calls)
    assert [p for p in pieces if p[2]] == [(0, "toolu_a", "add", ""), (1, "toolu_b", "neg", "")]
    for index, call in enumerate(calls):
        assert all(p[1] == call.id for p in pieces if p[0] == index)
        joined = "".join(p[3] for p in pieces if p[0] == index)
        assert json.loads(joined) == json.loads(call.arguments)


async def test_a_streamed_error_status_is_the_same_signal() -> None:
    pieces: list[str] = []
    async with serve_fake_openai(FakeReply.rate_limited(retry_after=7)) as server:
        async with client_for(server) as client:
            with pytest.raises(RateLimitRetry) as caught:
                await client.stream(ask(), pieces.append)
    assert caught.value.retry_after == 7 and pieces == []
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("error_type", "kind", "status"),
    [
        ("overloaded_error", OverloadRetry, 529),
        ("rate_limit_error", RateLimitRetry, 429),
        ("api_error", TransientErrorRetry, 500),
        ("invalid_request_error", Http400Error, 400),
    ],
)
def test_an_error_event_inside_a_stream_is_read_by_its_type(
    error_type: str, kind: type[Exception], status: int
) -> None:
    """A stream fails after its 200 with an ``error`` event; its type says which signal it is."""
    body = {"type": "error", "error": {"type": error_type, "message": "mid-stream"}}
    response = httpx2.Response(200, request=httpx2.Request("POST", "http://x/v1/messages"))
    error = anthropic.APIStatusError("mid-stream", response=response, body=body)
    failure = _status_failure(error, "claude-test")
    assert type(failure) is kind
    if isinstance(failure, RateLimitRetry | OverloadRetry | TransientErrorRetry):
        assert UpstreamFailure.from_exception(failure).status == status


# -- failures -----------------------------------------------------------------------------------


async def _fail_with(reply: FakeReply) -> tuple[BaseException, int]:
    async with serve_fake_openai(reply) as server:
        async with client_for(server) as client:
            with pytest.raises(Exception) as caught:
                await client.complete(ask())
    return caught.value, len(server.requests)


async def test_a_429_is_a_rate_limit_signal_with_retry_after_and_no_retry_of_the_sdks() -> None:
    signal, sent = await _fail_with(FakeReply.rate_limited(retry_after=12))
    assert isinstance(signal, RateLimitRetry)
    assert signal.retry_after == 12
    upstream = UpstreamFailure.from_exception(signal)
    assert (upstream.status, upstream.service, upstream.retry_after) == (429, "anthropic", 12)
    assert upstream.backpressure == RateLimitRetry.backpressure_increment
    assert sent == 1  # the SDK's retries are off


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (FakeReply.overloaded(529), OverloadRetry),
        (FakeReply.overloaded(503), OverloadRetry),
        (FakeReply.server_error(503), TransientErrorRetry),
        (FakeReply.server_error(500), TransientErrorRetry),
        (FakeReply.server_error(502), TransientErrorRetry),
        (FakeReply.error(408, "request timeout"), TransientErrorRetry),
    ],
)
async def test_overloads_and_server_errors_are_their_signals(
    reply: FakeReply, kind: type[Exception]
) -> None:
    """529, or a 503 that says overloaded, is OverloadRetry; any other 5xx or a 408 is
    TransientErrorRetry; each after exactly one request."""
    signal, sent = await _fail_with(reply)
    assert type(signal) is kind and sent == 1
    upstream = UpstreamFailure.from_exception(signal)
    assert upstream.status == reply.status
    assert upstream.backpressure == kind.backpressure_increment  # type: ignore[attr-defined]


async def test_a_529_carries_its_retry_after() -> None:
    overloaded = FakeReply.error(
        529, "Overloaded", code="overloaded_error", headers={"retry-after": "20"}
    )
    signal, _ = await _fail_with(overloaded)
    assert isinstance(signal, OverloadRetry) and signal.retry_after == 20


@pytest.mark.parametrize(
    ("status", "kind", "correctable"),
    [(400, Http400Error, True), (401, Http401Error, False), (404, Http404Error, True)],
)
async def test_other_error_statuses_are_their_http_errors(
    status: int, kind: type[Exception], correctable: bool
) -> None:
    error, sent = await _fail_with(FakeReply.error(status, "nope"))
    assert type(error) is kind and sent == 1
    assert isinstance(error, LLMReadableError) and error.correctable is correctable
    assert "nope" in str(error)


async def test_a_wrong_key_is_unauthorized() -> None:
    async with serve_fake_openai(api_key="right") as server:
        async with client_for(server) as client:
            with pytest.raises(Http401Error, match="Incorrect API key"):
                await client.complete(ask())


async def test_a_dropped_connection_is_transient() -> None:
    signal, sent = await _fail_with(FakeReply.dropped())
    assert isinstance(signal, TransientErrorRetry) and sent == 1
    assert isinstance(signal.__cause__, ExternalServiceError)
    assert isinstance(signal.__cause__.__cause__, anthropic.APIConnectionError)


async def test_a_refused_connection_is_transient() -> None:
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AnthropicClient("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}") as client:
        with pytest.raises(TransientErrorRetry, match="in transit"):
            await client.complete(ask())


async def test_a_read_timeout_is_transient_at_the_settings_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The pool's read timeout is the HttpSettings' (virtual seconds here), and a request that
    outlasts it is a TransientErrorRetry, sent once."""
    async with serve_fake_openai(FakeReply.completion("late", delay=120)) as server:
        async with client_for(server, read_timeout=30) as client:
            start = trio.current_time()
            with pytest.raises(TransientErrorRetry):
                await client.complete(ask())
            assert trio.current_time() - start == pytest.approx(30, abs=1)
    assert len(server.requests) == 1


# -- the SDK client and its pool ----------------------------------------------------------------


async def test_the_pool_holds_as_many_connections_as_the_http_gate_has_permits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With pool_size 2, six concurrent calls of 10 s each reach the server two at a time over
    two connections, and take 30 s."""
    async with serve_fake_openai(latency=10) as server:
        async with client_for(server, pool_size=2) as client:
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for index in range(6):
                    nursery.start_soon(client.complete, ask(f"call {index}"))
            elapsed = trio.current_time() - start
    assert server.max_in_flight == 2 and server.connections == 2
    assert elapsed == 30


async def test_an_own_sdk_client_is_closed_and_a_given_one_is_the_callers() -> None:
    owned = AnthropicClient("m", api_key=KEY, base_url="http://127.0.0.1:1")
    assert owned.sdk.max_retries == 0
    await owned.aclose()
    assert owned.sdk._client.is_closed  # the SDK's pool: closed, which on trio nothing else does
    given = anthropic.AsyncAnthropic(api_key=KEY, base_url="http://127.0.0.1:1")
    borrowed = AnthropicClient("m", client=given)
    assert given.max_retries > 0 and borrowed.sdk.max_retries == 0  # a copy, its retries off
    await borrowed.aclose()
    assert not given._client.is_closed
    await given.close()


def test_bad_construction_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="model must be"):
        AnthropicClient("  ")
    with pytest.raises(ValueError, match="either client="):
        AnthropicClient("m", client=open_sdk_client(api_key=KEY), api_key=KEY)
    with pytest.raises(TypeError, match="HttpSettings"):
        open_sdk_client(http_settings={"pool_size": 2})  # type: ignore[arg-type]
