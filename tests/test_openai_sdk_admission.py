"""The OpenAI plugin behind admission, end to end: a dispatcher whose configuration names the
``"openai"`` provider kind (found through the plugin's entry point) calls models through the
official SDK, and no request ever reaches the server that admission did not grant.

Two servers play the API: the project's fake (in process) and LLMock (``llmock`` on PyPI, an
independent implementation run as a process; tests/llm_mock_servers.py). Each is told to answer
with 429s; the requests it received are counted against the grants the model's account
reported on the bus.

The clock: the SDK reads the platform it runs on in a worker thread before its first request,
and LLMock is another process; the autojump clock reads either wait as idle and leaps to the
next deadline. So these tests run a clock at :data:`FAST` times real speed, with every timeout
far beyond reach; no assertion depends on how long anything took. (LLMock's own check that a
re-run waited out Retry-After measures real time, which this clock outruns, so it is not
asked.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing
from nucleo_trio_openai import OpenAIClient

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
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.models import Cost, CostLedger, Grade, ModelCatalog, ModelRuntime

from .conftest import Recorder
from .llm_mock_servers import Llmock, running_llmock
from .model_doubles import catalog, entry

HTTP = 4
FAST = 1000.0
"""How many times real speed the LLMock tests' clock runs."""
FAR = 10.0**7
"""Seconds no test reaches at :data:`FAST`."""


@pytest.fixture
def fast_clock() -> trio.testing.MockClock:
    """The trio clock of these tests (see the module documentation)."""
    return trio.testing.MockClock(rate=FAST)


def _catalog(wire: str) -> ModelCatalog:
    return catalog(
        entry(
            "gpt",
            provider_key="openai",
            wire_model_id=wire,
            max_output_tokens=1000,
            tpm=1_000_000,
            rpm=600,
            input_price_per_million="1000",
            output_price_per_million="1000",
            currency="USD",
        )
    )


@asynccontextmanager
async def dispatching(base_url: str, models: ModelCatalog) -> AsyncIterator[JobDispatcher]:
    """A dispatcher whose ``openai`` provider key is the plugin's kind, from configuration."""
    settings = {"base_url": base_url, "api_key": "test-key", "pool_size": HTTP, "timeout": FAR}
    config = DispatcherConfig(
        seed=24,
        http_connections=HTTP,
        model_providers={"openai": ModelProviderConfig(kind="openai", settings=settings)},
    )
    async with open_dispatcher(config, models=ModelRuntime(models)) as dispatcher:
        yield dispatcher


def ask(text: str, *, output: int = 200) -> LLMCall[str]:
    conversation = Conversation(output=output, grade=Grade.SMALL)
    conversation.put_objective(text)
    call = LLMCall(workflow("u", "openai-sdk"), conversation, answer=TextAnswer())
    call.timeout = FAR
    return call


def grant_times(recorder: Recorder, account: str) -> list[float]:
    """When the account named ``account`` granted, in order."""
    granted = (LimiterEventType.GRANTED_IMMEDIATE, LimiterEventType.GRANTED_FROM_HOLD)
    return [
        event.timestamp
        for event in recorder.typed(ev.LimiterEvent)
        if event.limiter_name == account and event.type in granted
    ]


def account_of(call: LLMCall[Any]) -> str:
    assert call.binding is not None and call.binding.account is not None
    name: str = call.binding.account.limiter_name
    return name


# -- the project's fake server ---------------------------------------------------------------------


async def test_configured_kind_calls_through_the_sdk_and_closes_it_with_the_dispatcher(
    fast_clock: trio.testing.MockClock,
) -> None:
    """The entry point's kind builds the provider; its client is the plugin's, over an
    AsyncOpenAI with retries off; the call's usage reaches the spend ledger; the AsyncOpenAI is
    closed once the dispatcher has stopped."""
    reply = FakeReply.completion("booked", input_tokens=100, output_tokens=50)
    async with serve_fake_openai(reply) as fake:
        async with dispatching(fake.base_url, _catalog("fake-model")) as dispatcher:
            assert dispatcher.model_provider_kinds is not None
            assert "nucleo-trio-openai" in dispatcher.model_provider_kinds.provider("openai")
            ledger = CostLedger(dispatcher.models.catalog).attach(dispatcher)
            call = ask("book me")
            assert await dispatcher.submit(call).result() == "booked"
            assert call.binding is not None
            client = dispatcher.models.provider_client(call.binding.model)
            assert isinstance(client, OpenAIClient) and client.sdk.max_retries == 0
            await trio.testing.wait_all_tasks_blocked()
            assert ledger.spent(call.workflow_id, "USD") == Cost(Decimal("0.15"), "USD")
        assert client.sdk.is_closed()
    assert len(fake.requests) == 1


async def test_under_a_429_storm_every_request_the_server_saw_was_granted_first(
    fast_clock: trio.testing.MockClock,
) -> None:
    """Six calls at once, and the server answers the first five requests with 429s: each is
    re-run by the dispatcher after the server's wait (the SDK never retries), every call
    answers, and the server received exactly as many requests as the model's account
    granted."""
    storm = [FakeReply.rate_limited(retry_after=3) for _ in range(5)]
    recorder = Recorder()
    async with serve_fake_openai(*storm) as fake:
        async with dispatching(fake.base_url, _catalog("fake-model")) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            calls = [ask(f"call {index}") for index in range(6)]
            handles = [dispatcher.submit(call) for call in calls]
            answers = [await handle.result() for handle in handles]
            await trio.testing.wait_all_tasks_blocked()
    assert answers == [f"echo: call {index}" for index in range(6)]
    assert sum(call.context.attempt for call in calls) == 11
    retries = recorder.typed(ev.RateLimitRetryEvent)
    assert len(retries) == 5 and all(r.delay is not None and r.delay >= 3 for r in retries)
    assert len(grant_times(recorder, account_of(calls[0]))) == len(fake.requests) == 11


async def test_a_streamed_call_passes_admission_like_a_completed_one(
    fast_clock: trio.testing.MockClock,
) -> None:
    """A stream refused with a 429 is re-run by the dispatcher, not the SDK: two requests,
    two grants."""
    recorder = Recorder()
    async with serve_fake_openai(FakeReply.rate_limited(retry_after=2)) as fake:
        async with dispatching(fake.base_url, _catalog("fake-model")) as dispatcher:
            dispatcher.bus.subscribe(recorder)
            call = ask("stream me")
            call.stream = True
            assert await dispatcher.submit(call).result() == "echo: stream me"
            await trio.testing.wait_all_tasks_blocked()
    assert [request.is_stream for request in fake.requests] == [True, True]
    assert len(grant_times(recorder, account_of(call))) == 2


# -- LLMock, an independent implementation of the API ------------------------------------------------


@pytest.fixture(scope="module")
def llmock_server() -> Iterator[Llmock]:
    with running_llmock() as server:
        yield server


@pytest.fixture
def llmock(llmock_server: Llmock) -> Llmock:
    """The module's LLMock, with no request and no behaviour left from an earlier test."""
    llmock_server.reset()
    return llmock_server


STATIC = "Mock response from solo-model."
"""What LLMock answers the solo model's every request with (``--response-style static``)."""


@pytest.mark.parametrize("stream", [False, True], ids=["completed", "streamed"])
async def test_llmock_429s_are_rerun_by_the_dispatcher_and_every_request_was_granted(
    fast_clock: trio.testing.MockClock, llmock: Llmock, stream: bool
) -> None:
    """LLMock answers the first three requests with 429s and a Retry-After: four calls at once
    all answer, the server's log holds exactly as many requests as the account granted (three
    refused, four served), and LLMock finds no retry the client made on its own."""
    llmock.script({"type": "fail", "status": 429, "retry_after": 1, "times": 3})
    recorder = Recorder()
    async with dispatching(llmock.base_url, _catalog("solo-model")) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        calls = [ask(f"call {index}") for index in range(4)]
        for call in calls:
            call.stream = stream
        handles = [dispatcher.submit(call) for call in calls]
        assert [await handle.result() for handle in handles] == [STATIC] * 4
        await trio.testing.wait_all_tasks_blocked()
    served = llmock.requests()
    assert sorted(r["status"] for r in served) == [200] * 4 + [429] * 3
    assert all(r["stream"] is stream for r in served)
    assert len(grant_times(recorder, account_of(calls[0]))) == len(served) == 7
    findings = {finding["code"] for finding in llmock.verdict()["findings"]}
    assert not findings & {"retry_storm", "retried_non_retryable"}, findings
