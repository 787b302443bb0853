"""The OpenAI-compatible client against a local trio server that plays the API on loopback:
the wire format, failures turned into re-run signals with their Retry-After and backpressure
(and ERR-13's stop reasons), the pool sized by HttpSettings, and the fake server itself."""

from __future__ import annotations

import email.utils
import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import (
    ConfigError,
    ExternalServiceError,
    Http400Error,
    Http401Error,
    Http404Error,
    Http429Error,
    InvalidInputError,
    LLMReadableError,
    LLMStopReason,
    OverloadRetry,
    QuotaExhaustedError,
    RateLimitRetry,
    TransientErrorRetry,
    UnauthorizedError,
    UpstreamFailure,
)
from nucleo_trio.http import HttpSettings, open_http_client
from nucleo_trio.jobs import JobContext, workflow
from nucleo_trio.llm import (
    EmbeddingPurpose,
    LLMRequest,
    Message,
    ObservableLLMClient,
    OutputSchema,
    ToolCall,
    ToolSpec,
    Usage,
)
from nucleo_trio.llm.clients.fake_server import FakeReply, FakeRequest, serve_fake_openai
from nucleo_trio.llm.clients.openai import (
    OpenAICompatibleClient,
    OpenAICompatibleEmbeddingsClient,
    parse_retry_after,
)

from .conftest import Recorder, settle
from .jobs_for_tests import Fn


def ask(text: str = "hello", **fields: Any) -> LLMRequest:
    fields.setdefault("max_tokens", 100)
    return LLMRequest(messages=[Message.user(text)], **fields)


# -- the wire format ----------------------------------------------------------------------------


async def test_a_request_goes_out_in_the_chat_completions_format() -> None:
    """Roles, tool calls and results, tools, tool choice, structured output, temperature, stop
    and extra fields are written as the API expects; the key goes in a bearer header."""
    call = ToolCall(id="c1", name="lookup", arguments='{"id": 1}')
    request = LLMRequest(
        messages=[
            Message.system("be brief"),
            Message.user("find 1"),
            Message.assistant(tool_calls=(call,)),
            Message.tool_result("c1", "one"),
        ],
        max_tokens=64,
        tools=[ToolSpec(name="lookup", description="by id", parameters={"type": "object"})],
        tool_choice="lookup",
        output_schema=OutputSchema(name="answer", schema={"type": "object"}),
        temperature=0.2,
        stop=["END"],
        extra={"seed": 7, "metadata": {"job": "j1"}},
    )
    async with serve_fake_openai(api_key="sk-test") as server:
        async with OpenAICompatibleClient(server.base_url, api_key="sk-test", model="m") as client:
            await client.complete(request)
            await client.complete(ask(tool_choice="auto", tools=[ToolSpec(name="t")]))
    sent, second = server.requests
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = sent.body
    assert body["model"] == "m" and body["max_tokens"] == 64
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "find 1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"id": 1}'},
                }
            ],
        },
        {"role": "tool", "content": "one", "tool_call_id": "c1"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "by id",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }
    assert (body["temperature"], body["stop"], body["seed"]) == (0.2, ["END"], 7)
    assert body["metadata"] == {"job": "j1"}
    assert second.body["tool_choice"] == "auto"


async def test_the_request_model_wins_and_a_missing_model_is_refused() -> None:
    async with serve_fake_openai() as server:
        async with OpenAICompatibleClient(
            server.base_url, model="default", max_tokens_field="max_completion_tokens"
        ) as client:
            response = await client.complete(ask(model="override"))
            assert response.model == response.provider_model == "override"
            assert server.requests[-1].body["max_completion_tokens"] == 100
        async with OpenAICompatibleClient(server.base_url) as bare:
            assert bare.model_identifier is None
            with pytest.raises(ValueError, match="names no model"):
                await bare.complete(ask())
            with pytest.raises(ValueError, match=r"extra sets \['model'\]"):
                await bare.complete(ask(model="m", extra={"model": "sneaky"}))


@pytest.mark.parametrize(
    ("finish_reason", "expected"),
    [
        ("stop", LLMStopReason.END_TURN),
        ("length", LLMStopReason.MAX_TOKENS),
        ("tool_calls", LLMStopReason.TOOL_USE),
        ("content_filter", LLMStopReason.CONTENT_FILTERED),
        ("STOP", LLMStopReason.END_TURN),
        ("something_new", LLMStopReason.UNKNOWN),
    ],
)
async def test_the_finish_reason_maps_to_the_stop_reason(
    finish_reason: str, expected: LLMStopReason
) -> None:
    """ERR-13: the provider's finish reason maps case-insensitively, an unknown one to UNKNOWN,
    and the provider's own word is kept beside it."""
    async with serve_fake_openai(FakeReply.completion("x", finish_reason=finish_reason)) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            response = await client.complete(ask())
    assert response.successful
    assert response.stop_reason is expected
    assert response.provider_stop_reason == finish_reason


async def test_a_refusal_is_content_filtered() -> None:
    refusal = {
        "choices": [
            {
                "message": {"role": "assistant", "content": None, "refusal": "I can't help"},
                "finish_reason": "stop",
            }
        ]
    }
    async with serve_fake_openai(FakeReply(body=refusal)) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            response = await client.complete(ask())
    assert response.stop_reason is LLMStopReason.CONTENT_FILTERED
    assert response.content == ""


async def test_a_truncation_is_max_tokens_and_a_larger_budget_completes() -> None:
    """finish_reason "length" is a successful MAX_TOKENS response with what was written; the
    caller's re-run at a larger budget goes out with that budget."""
    async with serve_fake_openai(
        FakeReply.truncated("half an ans", output_tokens=16),
        FakeReply.completion("half an answer, then the rest"),
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            request = ask(max_tokens=16)
            cut = await client.complete(request)
            assert cut.is_truncated and cut.usage.output_tokens == 16
            whole = await client.complete(request.with_max_tokens(4096))
    assert not whole.is_truncated
    assert [r.max_tokens for r in server.requests] == [16, 4096]


# -- failures -----------------------------------------------------------------------------------


async def _fail_with(reply: FakeReply, request: LLMRequest | None = None) -> BaseException:
    async with serve_fake_openai(reply) as server:
        async with OpenAICompatibleClient(server.base_url, model="m", service="fakeai") as client:
            with pytest.raises(Exception) as info:
                await client.complete(request or ask())
    return info.value


async def test_a_429_is_a_rate_limit_signal_carrying_retry_after_and_backpressure() -> None:
    """A 429 raises RateLimitRetry whose retry_after is the Retry-After header, with an
    UpstreamFailure (status 429, the service, backpressure 1) and the HTTP error as cause."""
    signal = await _fail_with(FakeReply.rate_limited(retry_after=12))
    assert isinstance(signal, RateLimitRetry)
    assert signal.retry_after == 12
    assert isinstance(signal.__cause__, Http429Error)
    assert signal.__cause__.retry_after == 12
    failure = UpstreamFailure.from_exception(signal)
    assert (failure.status, failure.service, failure.retry_after) == (429, "fakeai", 12)
    assert failure.backpressure == RateLimitRetry.backpressure_increment == 1
    assert "Rate limit reached" in failure.detail


async def test_retry_after_ms_wins_over_retry_after() -> None:
    signal = await _fail_with(FakeReply.rate_limited(retry_after=20, retry_after_ms=1500))
    assert isinstance(signal, RateLimitRetry)
    assert signal.retry_after == 1.5


def test_retry_after_reads_seconds_milliseconds_and_dates() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 42, usegmt=True)
    assert parse_retry_after({"Retry-After": "7"}) == 7
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"Retry-After-Ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": date}, now=now) == 42
    assert parse_retry_after({"Retry-After": email.utils.formatdate(now - 5)}, now=now) == 0
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    assert parse_retry_after({}) is None


async def test_a_spent_quota_is_never_a_rerun() -> None:
    """A 429 whose body says insufficient_quota is QuotaExhaustedError, not a signal: waiting
    does not refill a quota."""
    error = await _fail_with(FakeReply.quota_exhausted())
    assert isinstance(error, QuotaExhaustedError)
    assert isinstance(error.__cause__, Http429Error)


@pytest.mark.parametrize(
    ("reply", "kind", "backpressure"),
    [
        (FakeReply.overloaded(529), OverloadRetry, 3),
        (FakeReply.overloaded(503), OverloadRetry, 3),
        (FakeReply.server_error(503), TransientErrorRetry, 0),
        (FakeReply.server_error(500), TransientErrorRetry, 0),
        (FakeReply.server_error(502), TransientErrorRetry, 0),
        (FakeReply.server_error(504), TransientErrorRetry, 0),
        (FakeReply.error(408, "request timeout"), TransientErrorRetry, 0),
    ],
)
async def test_overloads_and_server_errors_are_their_signals(
    reply: FakeReply, kind: type[Exception], backpressure: int
) -> None:
    """529, or a 503 that says overloaded, is OverloadRetry (backpressure 3); any other 5xx or a
    408 is TransientErrorRetry (backpressure 0)."""
    signal = await _fail_with(reply)
    assert type(signal) is kind
    assert UpstreamFailure.from_exception(signal).backpressure == backpressure
    assert UpstreamFailure.from_exception(signal).status == reply.status


@pytest.mark.parametrize(
    ("status", "kind", "correctable"),
    [(400, Http400Error, True), (401, Http401Error, False), (404, Http404Error, True)],
)
async def test_other_error_statuses_are_their_http_errors(
    status: int, kind: type[Exception], correctable: bool
) -> None:
    error = await _fail_with(FakeReply.error(status, "nope"))
    assert type(error) is kind
    assert isinstance(error, LLMReadableError) and error.correctable is correctable
    assert "nope" in str(error)


async def test_a_wrong_key_is_unauthorized() -> None:
    async with serve_fake_openai(api_key="right") as server:
        async with OpenAICompatibleClient(server.base_url, api_key="wrong", model="m") as client:
            with pytest.raises(UnauthorizedError, match="Incorrect API key"):
                await client.complete(ask())


async def test_a_dropped_connection_is_transient() -> None:
    signal = await _fail_with(FakeReply.dropped())
    assert isinstance(signal, TransientErrorRetry)
    assert isinstance(signal.__cause__, ExternalServiceError)
    assert isinstance(signal.__cause__.__cause__, httpx.RemoteProtocolError)
    assert UpstreamFailure.from_exception(signal).backpressure == 0


async def test_a_refused_connection_is_transient() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens on the port now
    async with OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", model="m") as client:
        with pytest.raises(TransientErrorRetry) as info:
            await client.complete(ask())
    assert isinstance(info.value.__cause__.__cause__, httpx.ConnectError)  # type: ignore[union-attr]


async def test_a_read_timeout_is_transient_at_the_settings_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The read timeout of HttpSettings bounds a silent upstream, in virtual time."""
    settings = HttpSettings(read_timeout=20)
    async with serve_fake_openai(latency=600) as server:
        async with OpenAICompatibleClient(
            server.base_url, model="m", http_settings=settings
        ) as client:
            start = trio.current_time()
            with pytest.raises(TransientErrorRetry) as info:
                await client.complete(ask())
    assert trio.current_time() - start == 20
    assert isinstance(info.value.__cause__.__cause__, httpx.ReadTimeout)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "body", ["not json at all", {"choices": []}, {"object": "chat.completion"}]
)
async def test_a_body_that_is_not_a_completion_is_an_upstream_error(body: Any) -> None:
    error = await _fail_with(FakeReply(body=body))
    assert type(error) is ExternalServiceError
    assert "fakeai" in str(error)


async def test_a_failure_through_the_observable_wrapper_is_recorded_and_raised() -> None:
    """OC-02 over the wire: the 429 signal is raised on as the same instance and recorded as
    an unsuccessful response naming the model."""
    context = JobContext(Fn(workflow("alice", "wf"), _noop), "alice")
    async with serve_fake_openai(FakeReply.rate_limited(retry_after=3)) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as raw:
            client = ObservableLLMClient(raw, context)
            with pytest.raises(RateLimitRetry) as info:
                await client.complete(ask())
            await client.complete(ask())
    failed, succeeded = context.llm_responses
    assert failed.last_error is info.value and failed.model == "m" and not failed.successful
    assert succeeded.successful and succeeded.content == "echo: hello"


async def _noop(context: JobContext) -> None:
    return None


# -- streaming ----------------------------------------------------------------------------------


async def test_a_stream_assembles_text_tool_calls_and_usage() -> None:
    call = ToolCall(id="c9", name="search", arguments='{"query": "structured concurrency"}')
    async with serve_fake_openai(
        FakeReply.completion("let me look that up", tool_calls=[call], output_tokens=11)
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            pieces: list[str] = []
            response = await client.stream(ask(), pieces.append)
    assert server.requests[0].body["stream"] is True
    assert "".join(pieces) == response.content == "let me look that up"
    assert response.tool_calls == (call,)
    assert response.stop_reason is LLMStopReason.TOOL_USE
    assert response.usage.output_tokens == 11
    assert response.provider_model == "m"


async def test_a_streamed_error_status_is_the_same_signal() -> None:
    async with serve_fake_openai(
        FakeReply.rate_limited(retry_after=4), FakeReply.truncated("cut")
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            with pytest.raises(RateLimitRetry) as info:
                await client.stream(ask(), lambda piece: None)
            cut = await client.stream(ask(), lambda piece: None)
    assert info.value.retry_after == 4
    assert cut.is_truncated and cut.content == "cut"


def _sse(*events: Any) -> str:
    """A stream body as a server sends it: one ``data:`` line per event."""
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


def _chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


async def _stream_of(body: str) -> tuple[Any, list[str]]:
    pieces: list[str] = []
    async with serve_fake_openai(FakeReply(body=body)) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            try:
                return await client.stream(ask(), pieces.append), pieces
            except Exception as error:
                return error, pieces


async def test_a_stream_without_finish_reason_or_done_is_transient_never_an_answer() -> None:
    """A stream the upstream ended with neither a finish reason nor [DONE] raises
    TransientErrorRetry (no status, backpressure 0) naming how much came; the pieces handed out
    are all there is of it. An empty body is the same."""
    error, pieces = await _stream_of(_sse(_chunk("Half an "), _chunk("answer")))
    assert isinstance(error, TransientErrorRetry)
    assert pieces == ["Half an ", "answer"]
    assert "after 14 characters of text: the reply is incomplete" in str(error.__cause__)
    failure = UpstreamFailure.from_exception(error)
    assert failure.status is None and failure.backpressure == 0
    empty, _ = await _stream_of("")
    assert isinstance(empty, TransientErrorRetry)


async def test_a_stream_with_either_a_finish_reason_or_done_is_an_answer() -> None:
    """Either mark ends a stream: a finish reason without [DONE] (some servers stop there), or
    [DONE] without a finish reason (the stop reason is then UNKNOWN)."""
    finished, _ = await _stream_of(_sse(_chunk("whole", "stop")))
    assert finished.content == "whole" and finished.stop_reason is LLMStopReason.END_TURN
    done, _ = await _stream_of(_sse(_chunk("whole"), "[DONE]"))
    assert done.content == "whole" and done.stop_reason is LLMStopReason.UNKNOWN


async def test_a_reply_without_usage_carries_an_estimate_from_its_text() -> None:
    """No usage, a null one or one that counts neither side: the usage is estimated at a token
    per four characters (rounded up) of what was sent and what came back, and says so; a
    reported usage, zeros included, is taken as it is."""
    base = {"choices": [{"message": {"content": "twelve chars"}, "finish_reason": "stop"}]}
    request = ask("eight ch")  # 8 characters
    for usage in ({}, {"usage": None}, {"usage": {"total_tokens": 9}}):
        async with serve_fake_openai(FakeReply(body={**base, **usage})) as server:
            async with OpenAICompatibleClient(server.base_url, model="m") as client:
                response = await client.complete(request)
        assert response.usage == Usage(input_tokens=2, output_tokens=3, estimated=True), usage
    reported = {"usage": {"prompt_tokens": 0, "completion_tokens": 5}}
    async with serve_fake_openai(FakeReply(body={**base, **reported})) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            response = await client.complete(request)
    assert response.usage == Usage(input_tokens=0, output_tokens=5)
    streamed, _ = await _stream_of(_sse(_chunk("twelve chars", "stop", usage=None), "[DONE]"))
    assert streamed.usage.estimated and streamed.usage.output_tokens == 3


# -- embeddings ---------------------------------------------------------------------------------


async def test_embeddings_come_back_one_per_text_in_order() -> None:
    shuffled = {
        "data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]},
        ],
        "usage": {"prompt_tokens": 5},
    }
    async with serve_fake_openai(FakeReply(body=shuffled), dimensions=4) as server:
        async with OpenAICompatibleClient(server.base_url, model="chat") as chat:
            client = chat.embeddings("embed-small")
            assert client.model_identifier == "embed-small"
            first = await client.embed(["a", "b"], purpose=EmbeddingPurpose.QUERY)
            hashed = await client.embed(["a", "b", "c"])
            empty = await client.embed([])
            await client.aclose()  # shares the chat client's pool: closing it closes nothing
            assert not chat.http_client.is_closed
    assert first.vectors == ((1.0, 0.0), (0.0, 1.0))
    assert first.usage.input_tokens == 5 and first.purpose is EmbeddingPurpose.QUERY
    assert first.model == "embed-small"
    assert len(hashed.vectors) == 3 and hashed.dimensions == 4
    assert empty.vectors == () and len(server.requests) == 2
    assert server.requests[0].body == {
        "model": "embed-small",
        "input": ["a", "b"],
        "encoding_format": "float",
    }


async def test_embeddings_without_usage_carry_an_estimate_from_the_texts() -> None:
    """A null usage (or none) is estimated from the texts, and says so."""
    for usage in ({"usage": None}, {}):
        body = {"data": [{"index": 0, "embedding": [1.0]}], **usage}
        async with serve_fake_openai(FakeReply(body=body)) as server:
            async with OpenAICompatibleClient(server.base_url, model="chat") as chat:
                response = await chat.embeddings("embed").embed(["nine char"])
        assert response.usage == Usage(input_tokens=3, output_tokens=0, estimated=True)


async def test_embeddings_failures_are_the_same_signals() -> None:
    async with serve_fake_openai(
        FakeReply.rate_limited(retry_after=9), FakeReply.embeddings([[1.0]])
    ) as server:
        async with OpenAICompatibleEmbeddingsClient(server.base_url, model="e") as client:
            with pytest.raises(RateLimitRetry) as info:
                await client.embed(["a"])
            with pytest.raises(ExternalServiceError, match="1 vectors for 2 texts"):
                await client.embed(["a", "b"])
            with pytest.raises(TypeError, match="single str"):
                await client.embed("a")
    assert info.value.retry_after == 9


# -- the pool -----------------------------------------------------------------------------------


async def test_the_pool_holds_as_many_connections_as_the_http_gate_has_permits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """GATE-05's other half: with pool_size 2, six concurrent calls of 10 s each reach the
    server two at a time over two connections, and take 30 s."""
    settings = HttpSettings(pool_size=2)
    assert settings.gate().capacity == 2
    async with serve_fake_openai(latency=10) as server:
        async with OpenAICompatibleClient(
            server.base_url, model="m", http_settings=settings
        ) as client:
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for index in range(6):
                    nursery.start_soon(client.complete, ask(f"call {index}"))
            elapsed = trio.current_time() - start
    assert server.max_in_flight == 2
    assert server.connections == 2
    assert elapsed == 30


async def test_a_shared_pool_is_the_callers_and_an_own_pool_is_closed() -> None:
    async with open_http_client(HttpSettings(pool_size=4)) as shared:
        client = OpenAICompatibleClient("http://127.0.0.1:1/v1", http_client=shared)
        await client.aclose()
        assert not shared.is_closed
    owned = OpenAICompatibleClient("http://127.0.0.1:1/v1", http_settings=HttpSettings())
    await owned.aclose()
    assert owned.http_client.is_closed


def test_bad_configuration_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="base URL"):
        OpenAICompatibleClient("")
    with pytest.raises(ConfigError, match="http"):
        OpenAICompatibleClient("ftp://example.com")
    with pytest.raises(ConfigError, match="not both"):
        OpenAICompatibleClient(
            "http://x/v1", http_client=httpx.AsyncClient(), http_settings=HttpSettings()
        )
    with pytest.raises(ConfigError, match="max_tokens_field"):
        OpenAICompatibleClient("http://x/v1", max_tokens_field="tokens")
    with pytest.raises(ConfigError, match="model"):
        OpenAICompatibleClient("http://x/v1", model=" ")


def test_the_environment_names_the_endpoint() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        OpenAICompatibleClient.from_env({})
    client = OpenAICompatibleClient.from_env(
        {"OPENAI_BASE_URL": "http://localhost:8000/v1", "OPENAI_MODEL": "llama"}
    )
    assert (client.base_url, client.model_identifier) == ("http://localhost:8000/v1", "llama")
    keyed = OpenAICompatibleClient.from_env({"OPENAI_API_KEY": "sk"})
    assert keyed.base_url == "https://api.openai.com/v1"
    embeddings = OpenAICompatibleEmbeddingsClient.from_env(
        {"OPENAI_API_KEY": "sk", "OPENAI_EMBEDDINGS_MODEL": "text-embedding-3-small"}
    )
    assert embeddings.model_identifier == "text-embedding-3-small"


# -- the fake server ----------------------------------------------------------------------------


async def test_the_fake_servers_rate_limit_refuses_with_the_wait_until_the_window_has_room(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Over requests_per_minute the server answers 429 with Retry-After set to the seconds
    until its one-minute window has room; the client's signal carries it, and a call made
    after that wait succeeds."""
    async with serve_fake_openai(requests_per_minute=2) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            await client.complete(ask())
            await trio.sleep(15)
            await client.complete(ask())
            with pytest.raises(RateLimitRetry) as info:
                await client.complete(ask())
            assert info.value.retry_after == 45
            await trio.sleep(info.value.retry_after)
            assert (await client.complete(ask())).successful
    assert server.rate_limited == 1
    assert len(server.requests) == 4


async def test_the_fake_servers_token_limit_counts_prompt_and_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serve_fake_openai(tokens_per_minute=1000) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            await client.complete(ask(max_tokens=600))
            with pytest.raises(RateLimitRetry):
                await client.complete(ask(max_tokens=600))
            await trio.sleep(60)
            await client.complete(ask(max_tokens=600))
    assert server.rate_limited == 1


async def test_the_fake_server_answers_from_a_function_and_refuses_unknown_paths() -> None:
    def answer(request: FakeRequest) -> FakeReply:
        return FakeReply.completion(f"{request.model} got {len(request.messages)} message(s)")

    async with serve_fake_openai(responder=answer) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as client:
            assert (await client.complete(ask())).content == "m got 1 message(s)"
            async with httpx.AsyncClient() as raw:
                missing = await raw.post(f"{server.base_url}/completions", json={})
                wrong = await raw.get(f"{server.base_url}/chat/completions")
    assert missing.status_code == 404
    assert wrong.status_code == 405
    assert json.loads(missing.text)["error"]["code"] == "not_found"
    with pytest.raises(TypeError, match="step 0"):
        server.script("nonsense")  # type: ignore[arg-type]


# -- a job through the dispatcher -----------------------------------------------------------------


async def test_a_job_rides_out_a_429_storm_and_its_event_carries_every_call(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """End to end: two 429s re-run the job (the signal reaches the dispatcher unchanged), the
    third attempt completes, and the terminal event carries all three calls, the two refusals
    unsuccessful with their cause."""
    async with serve_fake_openai(
        FakeReply.rate_limited(retry_after=2), FakeReply.rate_limited(retry_after=2)
    ) as server:
        async with OpenAICompatibleClient(server.base_url, model="m") as raw:
            client = ObservableLLMClient(raw)

            async def body(context: JobContext) -> str:
                return (await client.complete(ask("storm"))).content

            handle = dispatcher.submit(Fn(workflow("alice", "wf"), body))
            assert await handle.result() == "echo: storm"
    await settle()  # the bus delivers on its own task
    (completed,) = recorder.typed(ev.JobCompletedEvent)
    assert completed.attempts == 3
    assert [r.successful for r in completed.llm_responses] == [False, False, True]
    assert all(isinstance(r.last_error, RateLimitRetry) for r in completed.llm_responses[:2])
    assert len(server.requests) == 3


def test_a_400_is_correctable_by_the_model() -> None:
    assert issubclass(Http400Error, InvalidInputError)
