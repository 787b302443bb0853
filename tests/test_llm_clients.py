"""LLM and embeddings clients: the records, the observable wrappers a job's calls go through
(spec A.11, OC-01..05), the scripted fakes, and one contract every LLM client keeps."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import (
    CorrectableError,
    JsonParseError,
    LLMStopReason,
    OutputTruncationRetry,
    RateLimitRetry,
    TransientErrorRetry,
)
from nucleo_trio.jobs import AbstractJob, JobContext, workflow
from nucleo_trio.llm import (
    EmbeddingPurpose,
    EmbeddingsClient,
    EmbeddingsResponse,
    LLMClient,
    LLMRequest,
    LLMResponse,
    Message,
    ObservableEmbeddingsClient,
    ObservableLLMClient,
    OutputSchema,
    Role,
    ScriptedEmbeddingsClient,
    ScriptedLLMClient,
    ToolCall,
    ToolSpec,
    Usage,
    reply,
)
from nucleo_trio.llm.clients import ScriptExhaustedError, estimate_tokens
from nucleo_trio.llm.clients.fake_server import FakeReply, serve_fake_openai
from nucleo_trio.llm.clients.openai import OpenAICompatibleClient
from nucleo_trio.llm.clients.scripted import LLMStep

from .conftest import Recorder, settle
from .jobs_for_tests import Fn


def ask(text: str = "hello", *, max_tokens: int = 100, model: str | None = None) -> LLMRequest:
    return LLMRequest(messages=[Message.user(text)], max_tokens=max_tokens, model=model)


class _Plain(AbstractJob[Any]):
    async def execute(self, context: JobContext) -> Any:
        return None


def make_context() -> JobContext:
    return JobContext(_Plain(workflow("alice", "wf")), "alice")


# -- records ----------------------------------------------------------------------------------


def test_a_request_must_declare_messages_and_an_output_budget() -> None:
    """A request with no message, or without a positive output budget, is refused by name."""
    with pytest.raises(ValueError, match="at least one message"):
        LLMRequest(messages=[], max_tokens=10)
    for budget in (0, -5, True, 1.5):
        with pytest.raises(ValueError, match="max_tokens must be a positive int"):
            LLMRequest(messages=[Message.user("x")], max_tokens=budget)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a Message"):
        LLMRequest(messages=[Message.user("x"), "y"], max_tokens=10)
    with pytest.raises(ValueError, match="offers no tools"):
        LLMRequest(messages=[Message.user("x")], max_tokens=10, tool_choice="auto")
    with pytest.raises(ValueError, match="temperature"):
        LLMRequest(messages=[Message.user("x")], max_tokens=10, temperature=-1)


def test_messages_keep_tool_calls_and_results_where_they_belong() -> None:
    """Only an assistant turn carries tool calls; a tool turn must name the call it answers."""
    call = ToolCall(id="c1", name="search", arguments='{"q": "trio"}')
    assert Message.assistant(tool_calls=(call,)).tool_calls == (call,)
    assert Message.tool_result("c1", "found").tool_call_id == "c1"
    with pytest.raises(ValueError, match="only an assistant turn"):
        Message(role=Role.USER, content="x", tool_calls=(call,))
    with pytest.raises(ValueError, match="tool_call_id"):
        Message(role=Role.TOOL, content="orphan")
    with pytest.raises(ValueError, match="tool_call_id"):
        Message(role=Role.USER, content="x", tool_call_id="c1")


def test_a_requests_mappings_are_frozen_and_copies_change_one_field() -> None:
    schema = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    request = LLMRequest(
        messages=[Message.user("judge")],
        max_tokens=16,
        output_schema=OutputSchema(name="verdict", schema=schema),
        tools=[ToolSpec(name="look", description="look it up")],
        extra={"seed": 7},
    )
    schema["type"] = "array"
    assert request.output_schema is not None
    assert request.output_schema.schema["type"] == "object"
    with pytest.raises(TypeError):
        request.extra["seed"] = 8  # type: ignore[index]
    bigger = request.with_max_tokens(64_000)
    assert (bigger.max_tokens, request.max_tokens) == (64_000, 16)
    assert bigger.messages == request.messages
    assert request.with_model("m2").model == "m2"


def test_a_tool_calls_arguments_parse_or_fail_correctably() -> None:
    """Arguments that are not a JSON object are a correctable JsonParseError naming the tool."""
    assert ToolCall(id="c", name="f", arguments='{"a": 1}').parsed_arguments() == {"a": 1}
    assert ToolCall(id="c", name="f", arguments="").parsed_arguments() == {}
    for bad in ('{"a": ', "[1, 2]"):
        with pytest.raises(JsonParseError) as info:
            ToolCall(id="c", name="lookup", arguments=bad).parsed_arguments()
        assert isinstance(info.value, CorrectableError)
        assert "lookup" in info.value.llm_message


def test_a_failure_record_says_why_and_keeps_the_error() -> None:
    """OC-02, OC-03: the failure record is unsuccessful with the message, the error and the
    model; a truncation signal is labelled MAX_TOKENS, anything else UNKNOWN."""
    error = RateLimitRetry("slow down", retry_after=3.0)
    record = LLMResponse.failure(error, model="m", started_at=1.0, ended_at=4.0)
    assert not record.successful
    assert record.reason_for_failure == "slow down"
    assert record.last_error is error
    assert (record.model, record.duration) == ("m", 3.0)
    assert record.stop_reason is LLMStopReason.UNKNOWN
    cut = LLMResponse.failure(OutputTruncationRetry("cut", "m", 32_000), model="m")
    assert cut.stop_reason is LLMStopReason.MAX_TOKENS and cut.is_truncated
    # A message-less exception still says what it was.
    assert LLMResponse.failure(RuntimeError(), model=None).reason_for_failure == "RuntimeError"


# -- OC-01..04: the observable LLM client ----------------------------------------------------------


class _Timeless:
    """A delegate whose responses carry no times, as a streaming accumulator may leave them."""

    model_identifier = "timeless-model"

    def __init__(self, answer: LLMResponse | BaseException) -> None:
        self.answer = answer

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await trio.sleep(2)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    async def stream(self, request: LLMRequest, on_text: Callable[[str], object]) -> LLMResponse:
        response = await self.complete(request)
        on_text(response.content)
        return response


async def test_a_success_is_recorded_as_the_delegates_own_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OC-01: the recorded response is the delegate's object (same reference), the caller gets
    that same object, and model_identifier is the delegate's."""
    answer = LLMResponse(content="hi", model="timeless-model", started_at=0.0, ended_at=1.0)
    context = make_context()
    client = ObservableLLMClient(_Timeless(answer), context)
    assert client.model_identifier == "timeless-model"
    got = await client.complete(ask())
    assert got is answer
    assert len(context.llm_responses) == 1
    assert context.llm_responses[0] is answer


@pytest.mark.parametrize("model", [None, "asked-for"])
async def test_a_failure_is_rethrown_and_recorded_unsuccessful(
    model: str | None, autojump_clock: trio.testing.MockClock
) -> None:
    """OC-02: the same exception instance is raised on, and one unsuccessful response is
    recorded with the message as reason, the exception as last error, the model (the
    request's, else the delegate's identifier) and the call's start and end times."""
    error = TransientErrorRetry("upstream hiccup")
    context = make_context()
    client = ObservableLLMClient(_Timeless(error), context)
    start = trio.current_time()
    with pytest.raises(TransientErrorRetry) as info:
        await client.complete(ask(model=model))
    assert info.value is error
    (record,) = context.llm_responses
    assert not record.successful
    assert record.reason_for_failure == "upstream hiccup"
    assert record.last_error is error
    assert record.model == (model or "timeless-model")
    assert (record.started_at, record.ended_at) == (start, start + 2)


async def test_a_reply_without_usage_is_recorded_at_the_calls_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A reply whose usage is an estimate is recorded, and returned, at the reservation the
    wrapper was given, or at its own estimate where that is larger; a reported usage, or a
    wrapper without a reservation, leaves the reply as it is; a reservation that is not a
    Usage is refused by name."""
    reserved = Usage(input_tokens=100, output_tokens=400, estimated=True)
    guessed = LLMResponse(
        content="x", usage=Usage(input_tokens=3, output_tokens=900, estimated=True)
    )
    context = make_context()
    got = await ObservableLLMClient(_Timeless(guessed), context, reserved=reserved).complete(ask())
    assert got.usage == Usage(input_tokens=100, output_tokens=900, estimated=True)
    assert context.llm_responses == [got]
    reported = LLMResponse(content="x", usage=Usage(input_tokens=3, output_tokens=4))
    wrapped = ObservableLLMClient(_Timeless(reported), context, reserved=reserved)
    assert wrapped.reserved is reserved
    assert await wrapped.complete(ask()) is reported
    assert await ObservableLLMClient(_Timeless(guessed), context).complete(ask()) is guessed
    with pytest.raises(TypeError, match="reserved must be a Usage or None, got int"):
        ObservableLLMClient(_Timeless(guessed), context, reserved=500)  # type: ignore[arg-type]


def test_usage_estimates_from_text_round_up_and_say_so() -> None:
    """Usage.estimate counts a token per four characters, rounded up, and marks the usage
    estimated; at_least takes the larger of each count."""
    assert Usage.estimate("12345", "") == Usage(input_tokens=2, output_tokens=0, estimated=True)
    low = Usage(input_tokens=1, output_tokens=9)
    assert low.at_least(Usage(input_tokens=5, output_tokens=2, estimated=True)) == Usage(
        input_tokens=5, output_tokens=9, estimated=True
    )
    with pytest.raises(TypeError, match="estimated"):
        Usage(estimated="yes")  # type: ignore[arg-type]


async def test_a_truncation_is_labelled_max_tokens_and_clearing_releases_the_list() -> None:
    """OC-03: a raised OutputTruncationRetry is recorded with stop reason MAX_TOKENS;
    clear_completion_data() empties the list."""
    context = make_context()
    signal = OutputTruncationRetry("cut at 16000", "m", 64_000, previous_max_tokens=16_000)
    client = ObservableLLMClient(ScriptedLLMClient([signal]), context)
    with pytest.raises(OutputTruncationRetry):
        await client.complete(ask())
    (record,) = context.llm_responses
    assert record.stop_reason is LLMStopReason.MAX_TOKENS
    assert not record.successful and record.last_error is signal
    context.clear_completion_data()
    assert context.llm_responses == []


async def test_a_stream_goes_through_the_same_wrapper_and_gets_the_calls_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OC-04: streaming is recorded like a completion, and a streamed response without a start
    time is given the call's start time; the text still reaches the sink."""
    context = make_context()
    client = ObservableLLMClient(_Timeless(LLMResponse(content="streamed")), context)
    start = trio.current_time()
    pieces: list[str] = []
    got = await client.stream(ask(), pieces.append)
    assert pieces == ["streamed"]
    assert got.started_at == start
    assert context.llm_responses == [got]
    failing = ObservableLLMClient(_Timeless(RateLimitRetry("429")), context)
    with pytest.raises(RateLimitRetry):
        await failing.stream(ask(), pieces.append)
    assert [r.successful for r in context.llm_responses] == [True, False]


async def test_without_a_context_the_current_job_records_and_outside_a_job_nothing_does(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """OC-01: one wrapper serves every job: each call lands on the job whose task made it (the
    terminal event carries them, the context is released at teardown); a call outside any job
    passes through unrecorded."""
    shared = ObservableLLMClient(
        ScriptedLLMClient(responder=lambda request: reply(f"re: {request.messages[-1].content}"))
    )
    contexts: list[JobContext] = []

    async def body(context: JobContext) -> str:
        contexts.append(context)
        first = await shared.complete(ask("one"))
        second = await shared.complete(ask("two"))
        return first.content + " / " + second.content

    handle = dispatcher.submit(Fn(workflow("alice", "wf"), body))
    assert await handle.result() == "re: one / re: two"
    await settle()  # the bus delivers on its own task
    (completed,) = recorder.typed(ev.JobCompletedEvent)
    assert [r.content for r in completed.llm_responses] == ["re: one", "re: two"]
    assert contexts[0].llm_responses == []
    outside = await shared.complete(ask("three"))
    assert outside.content == "re: three"


async def test_a_cancelled_call_is_recorded_and_the_cancellation_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OC-02: a call cancelled in flight is recorded unsuccessful; trio.Cancelled is not
    swallowed."""
    context = make_context()
    client = ObservableLLMClient(ScriptedLLMClient([reply("late")], latency=60), context)
    with trio.move_on_after(5) as scope:
        await client.complete(ask())
    assert scope.cancelled_caught
    (record,) = context.llm_responses
    assert not record.successful
    assert isinstance(record.last_error, trio.Cancelled)
    assert record.duration == 5


def test_wrapping_a_wrapper_wraps_its_delegate_and_bad_delegates_are_refused() -> None:
    """No call is recorded twice: an observable client of an observable client observes the
    inner delegate. A delegate that is not a client is refused by name."""
    scripted = ScriptedLLMClient()
    once = ObservableLLMClient(scripted)
    twice = ObservableLLMClient(once, make_context())
    assert twice.delegate is scripted
    with pytest.raises(TypeError, match="needs an LLMClient"):
        ObservableLLMClient(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs an EmbeddingsClient"):
        ObservableEmbeddingsClient(scripted)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="JobContext"):
        ObservableLLMClient(scripted, "ctx")  # type: ignore[arg-type]


# -- OC-05: the observable embeddings client ----------------------------------------------------


async def test_an_embeddings_success_is_recorded_as_the_same_object() -> None:
    """OC-05: a success is recorded as the delegate's own response object."""
    answer = EmbeddingsResponse(vectors=[[1.0, 0.0]], model="e")
    context = make_context()
    client = ObservableEmbeddingsClient(ScriptedEmbeddingsClient([answer], model="e"), context)
    got = await client.embed(["x"])
    assert got is answer
    assert context.llm_responses[0] is answer
    assert client.model_identifier == "e"


async def test_an_embeddings_failure_is_recorded_with_its_purpose_cause_and_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OC-05: a failure is recorded as an EmbeddingsResponse with the requested purpose, an
    unsuccessful status, the reason and the error, the delegate's model id, and the times."""
    error = RateLimitRetry("embeddings over quota")
    context = make_context()
    delegate = ScriptedEmbeddingsClient([error], model="embed-small", latency=3)
    client = ObservableEmbeddingsClient(delegate, context)
    start = trio.current_time()
    with pytest.raises(RateLimitRetry) as info:
        await client.embed(["q"], purpose=EmbeddingPurpose.QUERY)
    assert info.value is error
    (record,) = context.llm_responses
    assert isinstance(record, EmbeddingsResponse)
    assert record.purpose is EmbeddingPurpose.QUERY
    assert not record.successful
    assert record.reason_for_failure == "embeddings over quota"
    assert record.last_error is error
    assert record.model == "embed-small"
    assert (record.started_at, record.ended_at) == (start, start + 3)


# -- the scripted fakes -------------------------------------------------------------------------


async def test_a_script_plays_responses_exceptions_and_functions_in_order() -> None:
    async def slow(request: LLMRequest) -> LLMResponse:
        await trio.lowlevel.checkpoint()
        return reply(f"async saw {len(request.messages)}")

    signal = RateLimitRetry("429", retry_after=2)
    client = ScriptedLLMClient(
        [signal, reply("plain"), lambda request: reply(request.messages[0].content.upper()), slow],
        model="m1",
    )
    with pytest.raises(RateLimitRetry) as info:
        await client.complete(ask())
    assert info.value is signal
    assert (await client.complete(ask())).content == "plain"
    assert (await client.complete(ask("shout"))).content == "SHOUT"
    assert (await client.complete(ask())).content == "async saw 1"
    assert client.remaining == 0
    with pytest.raises(ScriptExhaustedError, match="4 step.*call 5 arrived"):
        await client.complete(ask())
    assert len(client.requests) == 5


async def test_a_scripted_reply_is_filled_in_as_a_provider_would(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The client stamps the model, the times (latency slept on the trio clock) and an estimated
    usage; a step's own values are kept."""
    client = ScriptedLLMClient(
        [reply("12345678"), reply("x", input_tokens=7, output_tokens=9)], latency=4
    )
    start = trio.current_time()
    first = await client.complete(ask("abcd" * 10))
    assert first.model == "scripted-model"
    assert (first.started_at, first.ended_at) == (start, start + 4)
    assert first.usage == Usage(input_tokens=10, output_tokens=2)
    second = await client.complete(ask(model="wire-id"))
    assert second.model == "wire-id"
    assert second.usage == Usage(input_tokens=7, output_tokens=9)
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2


def test_reply_picks_the_stop_reason_from_what_it_holds() -> None:
    call = ToolCall(id="c", name="f")
    assert reply("done").stop_reason is LLMStopReason.END_TURN
    assert reply(tool_calls=[call]).stop_reason is LLMStopReason.TOOL_USE
    cut = reply("cut", stop_reason=LLMStopReason.MAX_TOKENS)
    assert cut.is_truncated and cut.successful


def test_a_bad_script_is_refused_when_built() -> None:
    with pytest.raises(TypeError, match="step 1 must be"):
        ScriptedLLMClient([reply("ok"), "not a step"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="latency"):
        ScriptedLLMClient(latency=-1)
    with pytest.raises(ValueError, match="dimensions"):
        ScriptedEmbeddingsClient(dimensions=0)


async def test_scripted_embeddings_are_deterministic_unit_vectors() -> None:
    client = ScriptedEmbeddingsClient(
        [[[0.5, 0.5]], ValueError("bad batch")], dimensions=16, model="e"
    )
    assert (await client.embed(["a"])).vectors == ((0.5, 0.5),)
    with pytest.raises(ValueError, match="bad batch"):
        await client.embed(["b"])
    first = await client.embed(["alpha", "beta"], purpose=EmbeddingPurpose.QUERY)
    again = await ScriptedEmbeddingsClient(dimensions=16).embed(["beta"])
    assert first.vectors[1] == again.vectors[0]
    assert first.vectors[0] != first.vectors[1]
    assert first.dimensions == 16
    assert all(math.isclose(sum(x * x for x in v), 1.0) for v in first.vectors)
    assert first.purpose is EmbeddingPurpose.QUERY
    assert client.calls[-1] == (("alpha", "beta"), None, EmbeddingPurpose.QUERY)
    with pytest.raises(TypeError, match="sequence of str"):
        await client.embed("one string")


# -- the contract every LLM client keeps ---------------------------------------------------------

# A script in the terms both implementations understand: (kind, text).
Step = tuple[str, str]
MakeClient = Callable[[Sequence[Step]], Awaitable[LLMClient]]

_CALL = ToolCall(id="call-1", name="lookup", arguments='{"id": 42}')


def _scripted(steps: Sequence[Step]) -> ScriptedLLMClient:
    replies: dict[str, Callable[[str], LLMStep]] = {
        "text": lambda text: reply(text),
        "truncated": lambda text: reply(text, stop_reason=LLMStopReason.MAX_TOKENS),
        "tool": lambda text: reply(text, tool_calls=[_CALL]),
        "429": lambda text: RateLimitRetry(text, retry_after=1),
    }
    return ScriptedLLMClient([replies[kind](text) for kind, text in steps], model="contract")


def _fake_replies(steps: Sequence[Step]) -> list[FakeReply]:
    replies: dict[str, Callable[[str], FakeReply]] = {
        "text": lambda text: FakeReply.completion(text),
        "truncated": lambda text: FakeReply.truncated(text),
        "tool": lambda text: FakeReply.completion(text, tool_calls=[_CALL]),
        "429": lambda text: FakeReply.rate_limited(retry_after=1),
    }
    return [replies[kind](text) for kind, text in steps]


@pytest.fixture(params=["scripted", "openai-compatible"])
async def make_client(request: pytest.FixtureRequest) -> AsyncIterator[MakeClient]:
    if request.param == "scripted":

        async def scripted(steps: Sequence[Step]) -> LLMClient:
            return _scripted(steps)

        yield scripted
        return
    async with serve_fake_openai(model="contract") as server:
        async with OpenAICompatibleClient(server.base_url, model="contract") as client:

            async def served(steps: Sequence[Step]) -> LLMClient:
                server.script(*_fake_replies(steps))
                return client

            yield served


async def test_every_client_answers_a_completed_call_with_a_successful_response(
    make_client: MakeClient,
) -> None:
    """Contract: a completed call is successful, names the model, has times and usage; a tool
    call comes back with its id, name and arguments."""
    client = await make_client([("text", "hello there"), ("tool", "")])
    assert isinstance(client, LLMClient)
    assert client.model_identifier == "contract"
    response = await client.complete(ask())
    assert response.successful
    assert (response.content, response.stop_reason) == ("hello there", LLMStopReason.END_TURN)
    assert response.model == "contract"
    assert response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    assert response.started_at is not None and response.ended_at is not None
    called = await client.complete(ask())
    assert called.tool_calls == (_CALL,)
    assert called.stop_reason is LLMStopReason.TOOL_USE
    assert called.tool_calls[0].parsed_arguments() == {"id": 42}


async def test_every_client_returns_a_truncation_as_max_tokens_not_an_error(
    make_client: MakeClient,
) -> None:
    """Contract, OC-03's source: a reply cut at its budget is a successful MAX_TOKENS response;
    turning it into a re-run is the caller's decision."""
    client = await make_client([("truncated", "a reply cut sh")])
    response = await client.complete(ask(max_tokens=4))
    assert response.successful and response.is_truncated
    assert response.content == "a reply cut sh"


async def test_every_client_streams_the_text_it_returns(make_client: MakeClient) -> None:
    """Contract: the pieces handed to the sink join up to the returned content."""
    client = await make_client([("text", "one two three four")])
    pieces: list[str] = []
    response = await client.stream(ask(), pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == response.content == "one two three four"


async def test_every_client_raises_a_rate_limit_as_the_signal(make_client: MakeClient) -> None:
    """Contract: a 429 is a RateLimitRetry carrying the upstream's wait, never a response."""
    client = await make_client([("429", "slow down"), ("text", "ok")])
    with pytest.raises(RateLimitRetry) as info:
        await client.complete(ask())
    assert info.value.retry_after == 1
    assert (await client.complete(ask())).content == "ok"


def test_the_fakes_are_clients_of_their_protocols() -> None:
    assert isinstance(ScriptedLLMClient(), LLMClient)
    assert isinstance(ScriptedEmbeddingsClient(), EmbeddingsClient)
    assert isinstance(ObservableLLMClient(ScriptedLLMClient()), LLMClient)
    assert isinstance(ObservableEmbeddingsClient(ScriptedEmbeddingsClient()), EmbeddingsClient)
    assert attrs.has(LLMResponse) and attrs.has(EmbeddingsResponse)


@pytest.mark.parametrize("name", ["nucleo_trio.llm", "nucleo_trio.llm.clients"])
def test_every_exported_name_resolves(name: str) -> None:
    import importlib

    module = importlib.import_module(name)
    assert len(module.__all__) == len(set(module.__all__))
    assert [attr for attr in module.__all__ if not hasattr(module, attr)] == []
