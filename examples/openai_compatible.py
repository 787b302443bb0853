"""Call an OpenAI-compatible endpoint through the dispatcher, with a spend ledger and a cap.

Set OPENAI_BASE_URL (and OPENAI_API_KEY, OPENAI_MODEL if the endpoint needs them) to call a real
endpoint: OpenAI, vLLM, llama.cpp's server, Ollama, a gateway. With none set, a local fake server
plays the API on loopback, pushes back once with a 429, and runs in virtual time. It needs
nothing but nucleo_trio: the client and the fake server ship with it.

Before the LLMCall runs, the dispatcher resolves its grade to the catalog's entry, prices the
conversation, lets the ledger judge the reservation against the cap, and admits the tokens on the
entry's bucket with an http permit. A 429 re-runs the call, paced, and tightens the bucket.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal

import trio
import trio.testing

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import workflow
from nucleo_trio.llm import Conversation, LLMCall, TextAnswer, openai_compatible
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.models import Cost, CostLedger, Grade, ModelCatalog, ModelRuntime, Providers

REAL = bool(os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"))
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
HTTP = 4  # the dispatcher's http gate and the client's pool: one number sizes both
CAP = Cost(Decimal("0.05"), "USD")

CATALOG = ModelCatalog.from_mapping(
    {
        "provider_defaults": {"openai": {"currency": "USD"}},
        "models": [
            {
                "id": "small",
                "grade": "SMALL",
                "provider_key": "openai",
                "wire_model_id": MODEL,
                "max_context_tokens": 128_000,
                "max_output_tokens": 4_096,
                "tpm": 200_000,
                "rpm": 500,
                "input_price_per_million": "0.15",
                "output_price_per_million": "0.60",
            }
        ],
    }
)


@asynccontextmanager
async def endpoint() -> AsyncIterator[str]:
    if REAL:
        yield os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return
    answer = "Structured concurrency ties every task to a scope that waits for it to finish."
    storm = FakeReply.rate_limited(retry_after=2)
    async with serve_fake_openai(storm, FakeReply.completion(answer), model=MODEL) as server:
        yield server.base_url


async def main() -> None:
    async with endpoint() as base_url:
        key, pool = os.environ.get("OPENAI_API_KEY"), HttpSettings(pool_size=HTTP)
        providers = Providers()
        providers.register(openai_compatible("openai", base_url, api_key=key, http_settings=pool))
        models = ModelRuntime(CATALOG, providers=providers)
        config = DispatcherConfig(http_connections=HTTP)
        async with open_dispatcher(config, models=models) as dispatcher:
            ledger = CostLedger(CATALOG).attach(dispatcher)
            root = workflow("example", "openai")
            ledger.cap(root.workflow_id, CAP)
            talk = Conversation(system="Answer in one sentence.", output=200, grade=Grade.SMALL)
            talk.put_objective("What is structured concurrency?")
            call = LLMCall(root, talk, answer=TextAnswer())
            answer = await dispatcher.submit(call).result()
            assert call.binding is not None  # the binding of the attempt that answered
            print(f"endpoint: {'real' if REAL else 'local fake server'} at {base_url}")
            print(f"model: {call.binding.model.id} -> {MODEL}, {call.context.attempt} attempts")
            print(f"answer: {answer}")
            await trio.sleep(0.1)  # the ledger hears the terminal event on its own task
    spend = ledger.workflow(root.workflow_id)
    for number, made in enumerate(spend.calls if spend else (), 1):
        outcome = "ok" if made.successful else "failed (re-run)"
        print(f"call {number}: {outcome}, {made.input_tokens} in, {made.output_tokens} out")
    print(f"spent: {ledger.spent(root.workflow_id, 'USD')} of a {CAP} cap")


if __name__ == "__main__":
    # The fake server answers in virtual time; a real endpoint needs the real clock.
    trio.run(main, clock=None if REAL else trio.testing.MockClock(autojump_threshold=0))
