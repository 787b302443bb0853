"""The Anthropic plugin behind admission, end to end in virtual time: a dispatcher configured
with the ``anthropic`` provider kind (found through the plugin's entry point) runs LLM calls
against the project's fake server speaking the Messages API. Injected 429s and 529s re-run the
calls after the server's Retry-After; no request reaches the server that admission did not
grant (requests counted at the server against the grants on the model's account); usage with
the prompt cache's counts is booked and priced; the SDK client is closed with the dispatcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing
from nucleo_trio_anthropic import AnthropicClient, anthropic_provider

from nucleo_trio.admission import LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import (
    DispatcherConfig,
    JobDispatcher,
    ModelProviderConfig,
    open_dispatcher,
)
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Conversation, LLMCall, TextAnswer
from nucleo_trio.llm.clients.fake_server import FakeOpenAIServer, FakeReply, serve_fake_openai
from nucleo_trio.models import Cost, CostLedger, Grade, ModelRuntime
from nucleo_trio.plugins import ModelProviderKinds, make_plugin_manager

from .conftest import Recorder
from .model_doubles import catalog, entry

KEY = "test-key"
HTTP = 8
CAT = catalog(
    entry(
        "claude",
        provider_key="anthropic",
        wire_model_id="claude-test",
        max_output_tokens=1000,
        tpm=100_000,
        rpm=100,
        input_price_per_million="3",
        output_price_per_million="15",
        cache_write_multiplier="1.25",
        cache_read_multiplier="0.1",
        currency="USD",
    )
)
GRANTED = (LimiterEventType.GRANTED_IMMEDIATE, LimiterEventType.GRANTED_FROM_HOLD)


def _config(server: FakeOpenAIServer) -> DispatcherConfig:
    settings = {"base_url": server.root, "api_key": KEY, "http_settings": {"pool_size": HTTP}}
    return DispatcherConfig(
        seed=24,
        http_connections=HTTP,
        model_providers={"anthropic": ModelProviderConfig(kind="anthropic", settings=settings)},
    )


@asynccontextmanager
async def running(
    *steps: FakeReply, **server: Any
) -> AsyncIterator[tuple[JobDispatcher, FakeOpenAIServer, Recorder]]:
    async with serve_fake_openai(*steps, api_key=KEY, **server) as fake:
        recorder = Recorder()
        async with open_dispatcher(_config(fake), models=ModelRuntime(CAT)) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            yield dispatcher, fake, recorder


def ask(text: str, *, parent: Any = None, output: int = 200) -> LLMCall[str]:
    conversation = Conversation(output=output, grade=Grade.SMALL)
    conversation.put_objective(text)
    return LLMCall(parent or workflow("u", "anthropic"), conversation, answer=TextAnswer())


def _grants(recorder: Recorder, account: str) -> int:
    return sum(
        1
        for event in recorder.typed(ev.LimiterEvent)
        if event.limiter_name == account and event.type in GRANTED
    )


def test_the_kind_comes_through_the_entry_point() -> None:
    """Installed, the distribution registers ``anthropic`` as a model provider kind."""
    kinds = ModelProviderKinds(make_plugin_manager())
    assert "anthropic" in kinds.kinds
    provider = kinds.create("anthropic", "claude-eu", api_key=KEY)
    assert provider.key == "claude-eu" and provider.credential is None
    assert anthropic_provider("claude").credential == "ANTHROPIC_API_KEY"


async def test_429s_and_529s_rerun_after_their_retry_after_and_every_request_was_granted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 429 with Retry-After 4, a 529 with Retry-After 6 and a 429 with Retry-After 2 re-run
    the call, each re-run sent no sooner than the server asked; the fourth request is the
    answer. The server saw exactly as many requests as admission granted the model's account."""
    storm = [
        FakeReply.rate_limited(retry_after=4),
        FakeReply.error(529, "Overloaded", code="overloaded_error", headers={"retry-after": "6"}),
        FakeReply.rate_limited(retry_after=2),
    ]
    async with running(*storm) as (dispatcher, fake, recorder):
        call = ask("storm")
        assert await dispatcher.submit(call).result() == "echo: storm"
        assert call.binding is not None
        account = call.binding.account.limiter_name
    sent = [request.received_at for request in fake.requests]
    assert len(sent) == 4 and call.context.attempt == 4
    for gap, wait in zip(
        (b - a for a, b in zip(sent, sent[1:], strict=False)), (4, 6, 2), strict=True
    ):
        assert gap >= wait
    assert _grants(recorder, account) == len(fake.requests)
    assert len(recorder.typed(ev.RateLimitRetryEvent)) == 2
    assert len(recorder.typed(ev.TransientErrorRetryEvent)) == 1  # the overload


async def test_under_a_storm_of_concurrent_calls_no_request_goes_out_ungranted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Twelve calls at once against a server that answers each call's first request with a
    429 and its second with a 529 (Retry-After 3 each): every call completes on its third, and
    the requests the server counted are the grants admission made on the model's account, one
    for one."""
    seen: dict[str, int] = {}

    def flaky(request: Any) -> FakeReply:
        text = request.last_user_text()
        seen[text] = seen.get(text, 0) + 1
        if seen[text] == 1:
            return FakeReply.rate_limited(retry_after=3)
        if seen[text] == 2:
            return FakeReply.error(
                529, "Overloaded", code="overloaded_error", headers={"retry-after": "3"}
            )
        return FakeReply.completion(f"echo: {text}")

    async with running(responder=flaky) as (dispatcher, fake, recorder):
        calls = [ask(f"call {index}") for index in range(12)]
        handles = [dispatcher.submit(call) for call in calls]
        results = [await handle.result() for handle in handles]
        assert calls[0].binding is not None
        account = calls[0].binding.account.limiter_name
    assert results == [f"echo: call {index}" for index in range(12)]
    assert len(fake.requests) == 36  # three for each call
    assert _grants(recorder, account) == len(fake.requests)
    assert fake.max_in_flight <= HTTP


async def test_usage_with_cache_tokens_is_booked_and_priced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The ledger books the uncached prompt, the cache's reads and writes and the output apart,
    and prices each at its rate: 100 x 3 + 2000 x 3 x 0.1 + 400 x 3 x 1.25 + 50 x 15 per
    million."""
    reply = FakeReply.completion(
        "cached", input_tokens=100, output_tokens=50, cache_read_tokens=2000, cache_write_tokens=400
    )
    async with running(reply) as (dispatcher, _fake, _recorder):
        ledger = CostLedger(CAT).attach(dispatcher)
        root = workflow("u", "cached")
        assert await dispatcher.submit(ask("cached", parent=root)).result() == "cached"
        await trio.testing.wait_all_tasks_blocked()
    spend = ledger.workflow(root.workflow_id)
    assert spend is not None and len(spend.calls) == 1
    booked = spend.calls[0]
    assert (booked.input_tokens, booked.output_tokens) == (100, 50)
    assert (booked.cache_read_tokens, booked.cache_write_tokens) == (2000, 400)
    assert not booked.estimated
    expected = (
        Decimal(100 * 3)
        + Decimal(2000 * 3) * Decimal("0.1")
        + Decimal(400 * 3) * Decimal("1.25")
        + Decimal(50 * 15)
    ) / 1_000_000
    assert ledger.spent(root.workflow_id, "USD") == Cost(expected, "USD")


async def test_the_sdk_client_is_closed_with_the_dispatcher(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running() as (dispatcher, _fake, _recorder):
        assert await dispatcher.submit(ask("hi")).result() == "echo: hi"
        client = dispatcher.models.provider_client(CAT.spec("claude"))
        assert isinstance(client, AnthropicClient)
        pool = client.sdk._client
        assert not pool.is_closed
    assert pool.is_closed


async def test_a_bad_setting_refuses_the_start_naming_the_provider() -> None:
    config = DispatcherConfig(
        model_providers={
            "anthropic": ModelProviderConfig(
                kind="anthropic", settings={"http_settings": {"pool_size": 0}}
            )
        }
    )
    with pytest.raises(Exception, match="anthropic"):
        async with open_dispatcher(config, models=ModelRuntime(CAT)):
            pass
