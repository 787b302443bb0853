"""The Anthropic plugin against a second, independent implementation of the Messages API:
LLMock's (``llmock`` on PyPI, a process on loopback; tests/llm_mock_servers.py), under
``/anthropic``. Text, tool use and both streamed; a stream LLMock cuts short or drops is a
re-run, never an answer; and behind a dispatcher, injected 429s and 529s re-run the call after
the server's Retry-After, with no request LLMock journaled that admission did not grant and
none the SDK retried on its own.

The clock is the real one: LLMock judges, by its own clock, whether the client waited as long
as each Retry-After asked (its ``retry_after_ignored`` finding), so the waits asked are a few
tenths of a second. Every assertion is on an outcome (what LLMock saw and judged, what the call
returned), none on how long anything took.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from nucleo_trio_anthropic import AnthropicClient

from nucleo_trio.admission import LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, ModelProviderConfig, open_dispatcher
from nucleo_trio.errors import OverloadRetry, RateLimitRetry, TransientErrorRetry
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Conversation, LLMCall, LLMRequest, Message, TextAnswer, ToolSpec
from nucleo_trio.llm.clients import ToolCall
from nucleo_trio.models import Grade, ModelRuntime

from .conftest import Recorder
from .llm_mock_servers import Llmock, running_llmock
from .model_doubles import catalog, entry

KEY = "test-key"
MODEL = "claude-test"
STATIC = f"Mock response from {MODEL}."
"""What LLMock answers with when nothing is scripted (``--response-style static``)."""
HTTP = 4
ANTHROPIC = {"provider": "anthropic"}
CAT = catalog(
    entry("claude", provider_key="anthropic", wire_model_id=MODEL, max_output_tokens=1000)
)


@pytest.fixture(scope="module")
def llmock_server() -> Iterator[Llmock]:
    with running_llmock() as server:
        yield server


@pytest.fixture
def llmock(llmock_server: Llmock) -> Llmock:
    """The module's LLMock, with no request and no behaviour left from an earlier test."""
    llmock_server.reset()
    return llmock_server


def client_for(server: Llmock) -> AnthropicClient:
    return AnthropicClient(MODEL, api_key=KEY, base_url=server.anthropic_base_url)


def ask(text: str = "hello", **fields: Any) -> LLMRequest:
    fields.setdefault("max_tokens", 100)
    return LLMRequest(messages=[Message.user(text)], **fields)


ADD = ToolSpec(name="add", description="Adds two numbers")


async def test_text_and_tool_use_come_back_whole_and_streamed(llmock: Llmock) -> None:
    call = {"name": "add", "arguments": {"a": 1, "b": 2}}
    tooled = {"provider": "anthropic", "tools": True}
    llmock.script(
        {"type": "reply", "text": "Adding.", "tool_calls": [call], "times": 2, "match": tooled}
    )
    pieces: list[str] = []
    async with client_for(llmock) as client:
        text = await client.complete(ask())
        tools = await client.complete(ask(tools=[ADD]))
        streamed = await client.stream(ask(tools=[ADD]), pieces.append)
        plain = await client.stream(ask(), pieces.append)
    assert text.content == STATIC and text.stop_reason.value == "end_turn"
    assert text.usage.output_tokens > 0
    for reply in (tools, streamed):
        assert reply.content == "Adding." and reply.provider_stop_reason == "tool_use"
        assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
            ("add", {"a": 1, "b": 2})
        ]
        assert all(isinstance(c, ToolCall) and c.id.startswith("toolu") for c in reply.tool_calls)
    assert plain.content == STATIC
    assert "".join(pieces) == "Adding." + STATIC
    served = llmock.requests()
    assert [r["path"] for r in served] == ["/anthropic/v1/messages"] * 4
    assert [r["stream"] for r in served] == [False, False, True, True]


@pytest.mark.parametrize("kind", ["truncate", "disconnect"])
async def test_a_stream_cut_short_or_dropped_is_a_rerun_never_an_answer(
    llmock: Llmock, kind: str
) -> None:
    llmock.script({"type": "stream_fault", "kind": kind, "after_chunks": 5, "match": ANTHROPIC})
    pieces: list[str] = []
    async with client_for(llmock) as client:
        with pytest.raises(TransientErrorRetry):
            await client.stream(ask(), pieces.append)
    assert "".join(pieces) != STATIC  # some text may have come; never the whole of it
    assert len(llmock.requests()) == 1


@pytest.mark.parametrize(("status", "kind"), [(429, RateLimitRetry), (529, OverloadRetry)])
async def test_a_429_or_529_is_its_signal_with_the_servers_retry_after(
    llmock: Llmock, status: int, kind: type[Exception]
) -> None:
    llmock.script({"type": "fail", "status": status, "retry_after": 0.25, "match": ANTHROPIC})
    async with client_for(llmock) as client:
        with pytest.raises(kind) as caught:
            await client.complete(ask())
    assert caught.value.retry_after == 0.25  # type: ignore[attr-defined]
    served = llmock.requests()
    assert len(served) == 1 and served[0]["status"] == status


async def test_behind_admission_every_request_was_granted_and_waited_as_asked(
    llmock: Llmock,
) -> None:
    """Three calls, each hit by a 429 and a 529 (LLMock's, Retry-After 0.3 s): all three
    complete; LLMock journaled exactly as many requests as admission granted the model's
    account, none an SDK retry, and finds no Retry-After ignored and no retry storm."""
    llmock.script(
        {"type": "fail", "status": 429, "retry_after": 0.3, "times": 3, "match": ANTHROPIC},
        {"type": "fail", "status": 529, "retry_after": 0.3, "times": 3, "match": ANTHROPIC},
    )
    settings = {
        "base_url": llmock.anthropic_base_url,
        "api_key": KEY,
        "http_settings": {"pool_size": HTTP},
    }
    config = DispatcherConfig(
        seed=24,
        http_connections=HTTP,
        model_providers={"anthropic": ModelProviderConfig(kind="anthropic", settings=settings)},
    )
    recorder = Recorder()
    async with open_dispatcher(config, models=ModelRuntime(CAT)) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        calls = []
        for index in range(3):
            conversation = Conversation(output=200, grade=Grade.SMALL)
            conversation.put_objective(f"call {index}")
            calls.append(LLMCall(workflow("u", "llmock"), conversation, answer=TextAnswer()))
        handles = [dispatcher.submit(call) for call in calls]
        with trio.fail_after(120):  # a bound on a wait for another process, not a timing
            results = [await handle.result() for handle in handles]
    assert results == [STATIC] * 3
    assert calls[0].binding is not None
    account = calls[0].binding.account.limiter_name
    granted = [
        e
        for e in recorder.typed(ev.LimiterEvent)
        if e.limiter_name == account
        and e.type in (LimiterEventType.GRANTED_IMMEDIATE, LimiterEventType.GRANTED_FROM_HOLD)
    ]
    served = llmock.requests()
    assert len(served) == len(granted) == 9
    assert sorted(r["status"] for r in served) == [200] * 3 + [429] * 3 + [529] * 3
    assert all(r["sdk_retry_count"] == 0 for r in served)
    findings = {finding["code"] for finding in llmock.verdict()["findings"]}
    assert not findings & {"retry_after_ignored", "retry_storm", "no_backoff"}, findings
