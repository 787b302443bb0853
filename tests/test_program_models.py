"""What the model said is what is booked (issue 20, item 6), from the outside: dispatchers,
``LLMCall`` and the OpenAI-compatible client against OpenAI-compatible mock servers that are not
ours, LLMock and stubllm, each a process on loopback (tests/llm_mock_servers.py).

* a 5xx is a re-run, never a verdict on the model: one HTTP 500 on a one-entry catalog re-runs
  the call, and every later call on that dispatcher still reaches the server; an outage that
  outlasts the re-run budget fails naming the 500, and takes no model away;
* a refused connection is a re-run too; a 404 (the model is not there) is the one verdict: it
  turns the entry off, the next call is served by another entry, and the book says why and
  since when; but the last entry that can serve a seat is never taken away;
* a stream that ends with neither a finish reason nor ``[DONE]`` is an upstream failure that
  re-runs, never half an answer;
* a reply that reports no usage is booked at the call's reservation, marked estimated, with
  one warning per model, so a spend cap keeps capping.

The clock: a server in another process cannot be driven by trio's autojump clock (a wait on its
socket reads as idle, and the virtual clock would leap to the next deadline, a timeout). These
tests run a :class:`~trio.testing.MockClock` at :data:`FAST` times real speed instead, so a
re-run's pacing of seconds passes in milliseconds, with every HTTP timeout and every call's
deadline set far beyond what a test reaches; no assertion depends on how long anything took.
The rules that are about time (a turnoff lasts a day) are tested in virtual time in
test_models_picker.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import (
    ResourceNotFoundError,
    SpendCapExceededError,
    TransientErrorRetry,
    UncorrectableError,
)
from nucleo_trio.http import HttpSettings
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow
from nucleo_trio.llm import Conversation, LLMCall, TextAnswer, openai_compatible
from nucleo_trio.llm.clients import (
    LLMRequest,
    LLMResponse,
    Message,
    ObservableLLMClient,
    OpenAICompatibleClient,
)
from nucleo_trio.models import (
    Cost,
    CostLedger,
    Depth,
    Grade,
    ModelBinding,
    ModelCatalog,
    ModelRuntime,
    Providers,
)

from .conftest import Recorder
from .llm_mock_servers import Llmock, MockServer, running_llmock, running_stubllm
from .model_doubles import catalog, entry

FAST = 1000.0
"""How many times real speed the tests' clock runs (see the module documentation)."""
FAR = 10.0**7
"""Seconds no test reaches at :data:`FAST` (about three hours of real time)."""
HTTP = 4
STATIC = "Mock response from solo-model."
"""What LLMock answers the solo model's every request with (``--response-style static``)."""


def _model(spec_id: str, wire: str, price: str = "1000") -> dict[str, Any]:
    return entry(
        spec_id,
        provider_key="openai",
        wire_model_id=wire,
        max_output_tokens=1000,
        tpm=1_000_000,
        rpm=1_000,
        input_price_per_million=price,
        output_price_per_million=price,
        currency="USD",
    )


ONE = catalog(_model("solo", "solo-model"))
TWO = catalog(_model("retired", "retired-model", "1"), _model("current", "current-model", "2"))
QUIET = catalog(_model("quiet", "quiet-model"))


@pytest.fixture
def fast_clock() -> trio.testing.MockClock:
    """The trio clock of a test that waits on another process (see the module documentation)."""
    return trio.testing.MockClock(rate=FAST)


@pytest.fixture(scope="module")
def llmock_server() -> Iterator[Llmock]:
    with running_llmock() as server:
        yield server


@pytest.fixture
def llmock(llmock_server: Llmock) -> Llmock:
    """The module's LLMock, with no request and no behaviour left from an earlier test."""
    llmock_server.reset()
    return llmock_server


QUIET_REPLY = "booked all the same"


@pytest.fixture(scope="module")
def stubllm() -> Iterator[MockServer]:
    """stubllm answering the quiet model with an empty ``usage`` (its streams carry none)."""
    fixture = {
        "name": "no usage",
        "match": {"model": "quiet-model"},
        "response": {"content": QUIET_REPLY, "usage": {}, "stream_chunk_delay_ms": 0},
    }
    with running_stubllm([fixture]) as server:
        yield server


def _settings() -> HttpSettings:
    return HttpSettings(
        pool_size=HTTP,
        connect_timeout=FAR,
        read_timeout=FAR,
        write_timeout=FAR,
        pool_timeout=FAR,
    )


@asynccontextmanager
async def dispatching(base_url: str, models: ModelCatalog) -> AsyncIterator[JobDispatcher]:
    keys = Providers({})
    keys.register(openai_compatible("openai", base_url, http_settings=_settings()))
    config = DispatcherConfig(seed=20, http_connections=HTTP)
    async with open_dispatcher(config, models=ModelRuntime(models, providers=keys)) as dispatcher:
        yield dispatcher


def ask(text: str, *, parent: Any = None, output: int = 200) -> LLMCall[str]:
    conversation = Conversation(output=output, grade=Grade.SMALL)
    conversation.put_objective(text)
    call = LLMCall(parent or workflow("u", "program-models"), conversation, answer=TextAnswer())
    call.timeout = FAR
    return call


def _findings(server: Llmock) -> set[str]:
    return {finding["code"] for finding in server.verdict()["findings"]}


# -- 5xx, refused connections and 404s ------------------------------------------------------------


async def test_one_http_500_on_a_one_entry_catalog_is_a_rerun_not_a_verdict(
    fast_clock: trio.testing.MockClock, llmock: Llmock
) -> None:
    """One 500 re-runs the call, which then answers; a later call on the same dispatcher
    reaches the server too, and no model is turned off."""
    llmock.script({"type": "fail", "status": 500})
    async with dispatching(llmock.base_url, ONE) as dispatcher:
        first = ask("first")
        assert await dispatcher.submit(first).result() == STATIC
        assert first.context.attempt == 2
        later = ask("later")
        assert await dispatcher.submit(later).result() == STATIC
        assert later.context.attempt == 1
        assert dispatcher.models.availability.turned_off() == ()
    assert [r["status"] for r in llmock.requests()] == [500, 200, 200]
    assert "gave_up" not in _findings(llmock)


async def test_a_5xx_outage_fails_naming_the_500_and_takes_no_model_away(
    fast_clock: trio.testing.MockClock, llmock: Llmock
) -> None:
    """An outage that outlasts the re-run budget fails the call naming the HTTP 500; once the
    outage is over the next call reaches the server and answers."""
    llmock.script({"type": "fail", "status": 500, "times": None})
    async with dispatching(llmock.base_url, ONE) as dispatcher:
        call = ask("during the outage")
        with pytest.raises(UncorrectableError, match="HTTP 500") as failed:
            await dispatcher.submit(call).result()
        assert "retry budget" in str(failed.value)
        attempts = len(llmock.requests())
        assert attempts == call.context.attempt == call.upstream_retries + 1
        assert dispatcher.models.availability.turned_off() == ()
        llmock.reset()  # the outage is over
        assert await dispatcher.submit(ask("after it")).result() == STATIC
    assert [r["status"] for r in llmock.requests()] == [200]


async def test_a_refused_connection_is_a_rerun_never_a_verdict(
    fast_clock: trio.testing.MockClock,
) -> None:
    """Nothing listens on the port: every attempt is a transient failure that re-runs, the
    budget runs out naming the connection, and the model is not turned off."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the calls: nothing listens there
    async with dispatching(f"http://127.0.0.1:{port}/v1", ONE) as dispatcher:
        call = ask("anyone there?")
        with pytest.raises(UncorrectableError, match="ConnectError") as failed:
            await dispatcher.submit(call).result()
        assert isinstance(failed.value.__cause__, TransientErrorRetry)
        assert call.context.attempt == call.upstream_retries + 1
        assert dispatcher.models.availability.turned_off() == ()


async def test_a_404_turns_the_model_off_and_the_next_entry_serves(
    fast_clock: trio.testing.MockClock, llmock: Llmock, caplog: pytest.LogCaptureFixture
) -> None:
    """The cheaper entry's endpoint says its model does not exist: that call fails with the
    404 (not re-run: a 404 is not worth another try), the entry is turned off, and the book
    and a warning say why and since when; the next call is served by the other entry."""
    llmock.script(
        {
            "type": "fail",
            "status": 404,
            "message": "The model `retired-model` does not exist",
            "code": "model_not_found",
            "times": None,
            "match": {"model": "retired-model"},
        }
    )
    async with dispatching(llmock.base_url, TWO) as dispatcher:
        with pytest.raises(ResourceNotFoundError, match="HTTP 404"):
            await dispatcher.submit(ask("first")).result()
        why = dispatcher.models.availability.why_off("retired")
        assert why is not None and why.startswith("retired is turned off since ")
        assert "answered HTTP 404" in why and "does not exist" in why
        with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.picker"):
            second = ask("second")
            assert await dispatcher.submit(second).result() == "Mock response from current-model."
        assert second.binding is not None and second.binding.model.id == "current"
    assert [r["model"] for r in llmock.requests()] == ["retired-model", "current-model"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("retired is turned off since") for m in warnings), warnings
    assert "retried_non_retryable" not in _findings(llmock)


async def test_a_404_on_the_last_entry_that_can_serve_never_takes_it_away(
    fast_clock: trio.testing.MockClock, llmock: Llmock, caplog: pytest.LogCaptureFixture
) -> None:
    """On a one-entry catalog a 404 turns the entry off, yet the next call is still sent to it
    (with a warning saying so and why) and, answered, turns it back on."""
    llmock.script({"type": "fail", "status": 404, "message": "no such model"})
    async with dispatching(llmock.base_url, ONE) as dispatcher:
        with pytest.raises(ResourceNotFoundError, match="HTTP 404"):
            await dispatcher.submit(ask("first")).result()
        book = dispatcher.models.availability
        assert book.is_off("solo")
        with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.picker"):
            assert await dispatcher.submit(ask("second")).result() == STATIC
        assert not book.is_off("solo")
    assert [r["status"] for r in llmock.requests()] == [404, 200]
    assert any(
        r.getMessage().startswith(
            "every entry that can serve SMALL or above is turned off; solo serves all the same"
        )
        for r in caplog.records
    )


# -- streams cut short ----------------------------------------------------------------------------


class StreamedAnswer(Tool[str]):
    """Streams one reply from the SMALL model it declares."""

    def requirements(self) -> JobRequirements:
        self.binding = ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 50, 200)
        return JobRequirements().require_model(self.binding)

    async def execute(self, context: JobContext) -> str:
        spec = self.binding.model
        client = ObservableLLMClient(context.dispatcher.models.provider_client(spec), context)
        request = LLMRequest(messages=[Message.user("tell me everything")], max_tokens=200)
        response = await client.stream(request, lambda piece: None)
        return response.content


async def test_a_stream_cut_without_finish_reason_or_done_is_a_rerun_never_an_answer(
    fast_clock: trio.testing.MockClock, llmock: Llmock
) -> None:
    """LLMock ends the first stream cleanly after two chunks, with no finish reason and no
    [DONE]: the client raises a transient failure instead of returning the half, the job
    re-runs and answers with the whole text, and its record keeps both calls. LLMock, which
    watches for a client that uses a cut stream, finds none."""
    llmock.script({"type": "stream_fault", "kind": "truncate", "after_chunks": 2})
    recorder = Recorder()
    async with dispatching(llmock.base_url, ONE) as dispatcher:
        dispatcher.bus.subscribe(recorder)
        job = StreamedAnswer(workflow("u", "streams"))
        assert await dispatcher.submit(job).result() == STATIC
        assert job.context.attempt == 2
        await trio.testing.wait_all_tasks_blocked()
    (terminal,) = [e for e in recorder.of(job.id) if isinstance(e, ev.AbstractTerminalEvent)]
    cut, whole = terminal.llm_responses
    assert not cut.successful
    assert "neither a finish reason nor [DONE]" in str(cut.last_error.__cause__)
    assert whole.successful and whole.content == STATIC and not whole.usage.estimated
    assert [r["stream"] for r in llmock.requests()] == [True, True]
    assert "truncated_stream_accepted" not in _findings(llmock)


async def test_the_client_refuses_a_cut_stream_and_says_how_much_came(
    fast_clock: trio.testing.MockClock, llmock: Llmock
) -> None:
    """Called directly, the client raises TransientErrorRetry for a cut stream (the pieces
    already handed out are all there is of it); a whole stream after it is an answer."""
    llmock.script({"type": "stream_fault", "kind": "truncate", "after_chunks": 2})
    pieces: list[str] = []
    request = LLMRequest(messages=[Message.user("tell me")], max_tokens=100)
    async with OpenAICompatibleClient(
        llmock.base_url, model="solo-model", http_settings=_settings()
    ) as client:
        with pytest.raises(TransientErrorRetry, match="cut the stream") as cut:
            await client.stream(request, pieces.append)
        whole = await client.stream(request, lambda piece: None)
    said = "".join(pieces)
    assert said and STATIC.startswith(said) and said != STATIC
    assert f"after {len(said)} characters of text" in str(cut.value.__cause__)
    assert whole.content == STATIC


# -- replies without usage ------------------------------------------------------------------------


async def test_a_reply_without_usage_is_booked_at_its_reservation_marked_estimated(
    fast_clock: trio.testing.MockClock,
    stubllm: MockServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """stubllm answers with an empty usage. The ledger books each reply at the call's
    reservation (never 0 USD), marks it estimated and warns once for the model; a cap that one
    reservation fits and two do not refuses the second call before it is sent."""
    root = workflow("u", "quiet")
    async with dispatching(stubllm.base_url, QUIET) as dispatcher:
        ledger = CostLedger(QUIET).attach(dispatcher)
        with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.spend"):
            calls = [ask(f"call {n}", parent=root) for n in range(2)]
            for call in calls:
                assert await dispatcher.submit(call).result() == QUIET_REPLY
            await trio.testing.wait_all_tasks_blocked()
        spend = ledger.workflow(root.workflow_id)
        assert spend is not None and spend.estimated
        spec = QUIET.spec("quiet")
        expected = Cost.zero("USD")
        for call, booked in zip(calls, spend.calls, strict=True):
            assert call.binding is not None and booked.estimated and booked.successful
            reserved = (call.binding.input_reservation, call.binding.output_reservation)
            assert (booked.input_tokens, booked.output_tokens) == reserved
            cost = Cost.reserved(spec, *reserved)
            assert cost is not None and booked.cost == cost
            expected = expected.plus(cost)
        assert ledger.spent(root.workflow_id, "USD") == expected
        assert expected.amount > 0
        warned = [r.getMessage() for r in caplog.records if r.name == "nucleo_trio.models.spend"]
        assert warned == [
            "quiet-model reported no token usage; its calls are booked at an estimate (the "
            "call's reservation, or the text's length) and marked estimated"
        ]

        capped = workflow("u", "capped")
        one = Cost.reserved(spec, *reserved)
        assert one is not None
        ledger.cap(capped.workflow_id, Cost(one.amount * Decimal("1.5"), "USD"))
        assert await dispatcher.submit(ask("call 0", parent=capped)).result() == QUIET_REPLY
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(SpendCapExceededError, match="would pass its cap"):
            await dispatcher.submit(ask("call 1", parent=capped)).result()


async def test_a_streamed_reply_without_usage_carries_an_estimate_from_its_text(
    fast_clock: trio.testing.MockClock, stubllm: MockServer
) -> None:
    """stubllm's streams never carry usage: the client's response says so (estimated) and
    counts a token per four characters of what was sent and what came back."""
    request = LLMRequest(messages=[Message.user("say it")], max_tokens=100)
    async with OpenAICompatibleClient(
        stubllm.base_url, model="quiet-model", http_settings=_settings()
    ) as client:
        streamed: LLMResponse = await client.stream(request, lambda piece: None)
    assert streamed.content == QUIET_REPLY
    usage = streamed.usage
    assert usage.estimated
    assert (usage.input_tokens, usage.output_tokens) == (2, -(-len(QUIET_REPLY) // 4))
