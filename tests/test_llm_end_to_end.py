"""End to end: LLM calls through the dispatcher, the OpenAI-compatible client and the local fake
server that plays the API on loopback. A 429 storm slows the model's bucket and it recovers; a
truncation re-runs once at the ceiling; a spend cap stops new work and no running call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import TokenBucket
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import SpendCapExceededError
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Conversation, LLMCall, TextAnswer, openai_compatible
from nucleo_trio.llm.clients.fake_server import FakeOpenAIServer, FakeReply, serve_fake_openai
from nucleo_trio.models import Cost, CostLedger, Grade, ModelRuntime, Providers

from .conftest import Recorder
from .model_doubles import catalog, entry

CAT = catalog(
    entry(
        "gpt",
        provider_key="openai",
        wire_model_id="fake-model",
        max_output_tokens=1000,
        tpm=100_000,
        rpm=100,
        input_price_per_million="1000",
        output_price_per_million="1000",
        currency="USD",
    )
)
HTTP = 8


@asynccontextmanager
async def running(
    *steps: FakeReply, **server: Any
) -> AsyncIterator[tuple[JobDispatcher, FakeOpenAIServer]]:
    async with serve_fake_openai(*steps, **server) as fake:
        keys = Providers({})
        keys.register(
            openai_compatible("openai", fake.base_url, http_settings=HttpSettings(pool_size=HTTP))
        )
        models = ModelRuntime(CAT, providers=keys)
        config = DispatcherConfig(seed=3, http_connections=HTTP)
        async with open_dispatcher(config, models=models) as dispatcher:
            yield dispatcher, fake


def ask(text: str, output: int = 500) -> LLMCall[str]:
    conversation = Conversation(output=output, grade=Grade.SMALL)
    conversation.put_objective(text)
    return LLMCall(workflow("u", "e2e"), conversation, answer=TextAnswer())


async def test_a_429_storm_slows_the_bucket_and_it_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TB, ERR-14 end to end: three 429s re-run the call with the server's Retry-After, each
    tightening the model's token bucket (its refill window stretched by half a minute a 429);
    the call completes within its budget of three re-runs. After quiet minutes the successes
    relax the bucket back to its full rate."""
    recorder = Recorder()
    storm = [FakeReply.rate_limited(retry_after=4) for _ in range(3)]
    async with running(*storm) as (dispatcher, fake):
        dispatcher.bus.subscribe(recorder)
        call = ask("storm")
        assert await dispatcher.submit(call).result() == "echo: storm"
        assert call.context.attempt == 4 and len(fake.requests) == 4
        assert call.binding is not None
        bucket = call.binding.account
        assert isinstance(bucket, TokenBucket) and bucket.throttle == 1.5
        retries = recorder.typed(ev.RateLimitRetryEvent)
        assert len(retries) == 3 and all(r.delay is not None and r.delay >= 4 for r in retries)
        await trio.sleep(5 * 60)  # quiet: no push-back for five minutes
        for index in range(3):
            assert await dispatcher.submit(ask(f"calm {index}")).result() == f"echo: calm {index}"
        assert bucket.throttle == 0.0


async def test_a_truncation_reruns_once_at_the_ceiling_through_the_wire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """TOOL-28, EXEC-17 end to end: a reply with finish_reason "length" re-runs the call once
    with max_tokens raised to the entry's ceiling; the second reply is the answer."""
    async with running(FakeReply.truncated("a reply cut sh"), FakeReply.completion("whole")) as (
        dispatcher,
        fake,
    ):
        call = ask("tell me", output=300)
        assert await dispatcher.submit(call).result() == "whole"
    assert [r.max_tokens for r in fake.requests] == [300, 1000]
    assert call.context.attempt == 2


async def test_a_spend_cap_stops_new_work_and_no_running_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SPD-01, OBS-29, MOD-30 end to end: with a cap that one reservation fits and two do not,
    a call submitted while the first is in flight is refused before it reaches the wire; the
    running call completes and its real cost is recorded."""
    slow = FakeReply.completion("slow answer", delay=30, input_tokens=100, output_tokens=50)
    async with running(slow) as (dispatcher, fake):
        ledger = CostLedger(CAT).attach(dispatcher)
        root = workflow("u", "capped")
        ledger.cap(root.workflow_id, Cost(Decimal("0.9"), "USD"))
        first_call = LLMCall(root, _talk("first"), answer=TextAnswer())
        first = dispatcher.submit(first_call)
        await trio.sleep(1)
        assert len(fake.requests) == 1 and fake.in_flight == 1
        with pytest.raises(SpendCapExceededError, match="would pass its cap"):
            await dispatcher.submit(LLMCall(root, _talk("second"), answer=TextAnswer())).result()
        assert len(fake.requests) == 1  # the refused call never reached the wire
        assert await first.result() == "slow answer"
        await trio.testing.wait_all_tasks_blocked()
    assert ledger.spent(root.workflow_id, "USD") == Cost(Decimal("0.15"), "USD")


def _talk(text: str) -> Conversation:
    conversation = Conversation(output=500, grade=Grade.SMALL)
    conversation.put_objective(text)
    return conversation
