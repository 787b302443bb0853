"""Jobs that fan out: re-run signals and failures raised from inside a trio nursery or an anyio
task group reach the dispatcher as an exception group, and are read leaf by leaf.

Every test drives the public API from outside: a job opens a nursery (or a task group) whose
children raise, a custom limiter writes down what the dispatcher tells it, and the clock is
virtual. The children raise before their first checkpoint, so every one of them is in the group.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.guardrails import ContentGuardrail, Direction, ValidationGuardrail
from nucleo_trio.jobs import Identifiable, JobContext, JobRequirements, JobState, Tool, workflow
from nucleo_trio.llm import ScriptedLLMClient, Thinker, ThinkerDeclaration, ToolCall, reply
from nucleo_trio.llm.thinker import FINAL_ANSWER
from nucleo_trio.models import Grade, ModelRuntime, OutputSize

from .model_doubles import catalog, entry, providers

Body = Callable[[], Coroutine[Any, Any, None]]
KINDS = ["trio nursery", "anyio task group"]


def raising(exc: BaseException) -> Body:
    """A child that raises ``exc`` at once, before any checkpoint."""

    async def body() -> None:
        raise exc

    return body


async def sleeping_forever() -> None:
    await trio.sleep_forever()


async def fan_out(kind: str, bodies: Sequence[Body]) -> None:
    """Run ``bodies`` as the children of a trio nursery or of an anyio task group."""
    if kind == "trio nursery":
        async with trio.open_nursery() as nursery:
            for body in bodies:
                nursery.start_soon(body)
    else:
        async with anyio.create_task_group() as group:
            for body in bodies:
                group.start_soon(body)


class Upstream(CountingGate):
    """A custom limiter that writes down every upstream failure the dispatcher tells it of."""

    def __init__(self) -> None:
        super().__init__("upstream", 4)
        self.pushbacks: list[errors.UpstreamFailure] = []
        self.successes = 0

    def on_success(self, input: Any = None) -> None:
        self.successes += 1

    def on_rate_limit_error(self, failure: Any, input: Any = None) -> None:
        self.pushbacks.append(failure)


class FanOut(Tool[str]):
    """Each attempt runs the next round of children in ``where`` (pre_execute, execute or
    post_execute); once the rounds are spent an attempt answers with its count."""

    def __init__(
        self,
        parent: Identifiable,
        kind: str,
        rounds: Sequence[Sequence[Body]],
        limiter: Upstream | None = None,
        *,
        where: str = "execute",
    ) -> None:
        super().__init__(parent)
        self.kind = kind
        self.rounds = [list(r) for r in rounds]
        self.limiter = limiter
        self.where = where
        self.timeout = 600.0
        self.runs = 0
        self.pre_runs = 0

    def requirements(self) -> JobRequirements:
        requirements = JobRequirements()
        if self.limiter is not None:
            requirements.require_rate_limiter(self.limiter)
        return requirements

    async def _round(self, where: str) -> None:
        if self.where == where and self.rounds:
            await fan_out(self.kind, self.rounds.pop(0))

    async def pre_execute(self, context: JobContext) -> None:
        self.pre_runs += 1
        await self._round("pre_execute")

    async def execute(self, context: JobContext) -> str:
        self.runs += 1
        await self._round("execute")
        return f"answer after {self.runs}"

    async def post_execute(self, context: JobContext) -> None:
        await self._round("post_execute")


@asynccontextmanager
async def running() -> AsyncIterator[tuple[JobDispatcher, list[ev.JobEvent]]]:
    """A dispatcher, and every event it publishes (all delivered once the block is left)."""
    seen: list[ev.JobEvent] = []
    async with open_dispatcher(DispatcherConfig(seed=7)) as dispatcher:
        dispatcher.bus.subscribe(seen.append)
        yield dispatcher, seen


def retries_of(seen: Sequence[ev.JobEvent], job: FanOut) -> list[ev.JobEvent]:
    return [
        e
        for e in seen
        if isinstance(e, ev.RetryEvent)
        and e.snapshot is not None
        and e.snapshot.job_id == job.job_id
    ]


# -- a group of nothing but re-run signals is a re-run -------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_an_all_signal_group_reruns_after_the_most_demanding_pause(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """A 429 naming 20 s beside a 503 naming nothing: the 429 demands the longer pause (20 s
    plus jitter, against the 503's 5-30 s floor of 5), so it decides it; the job re-runs once,
    and the limiter hears of both upstream failures."""
    limiter = Upstream()
    limit = errors.RateLimitRetry("429 Too Many Requests", retry_after=20)
    hiccup = errors.TransientErrorRetry("503 Service Unavailable")
    job = FanOut(workflow("u", "fan"), kind, [[raising(limit), raising(hiccup)]], limiter)
    async with running() as (dispatcher, seen):
        started = trio.current_time()
        assert await dispatcher.submit(job).result() == "answer after 2"
        elapsed = trio.current_time() - started
    (retry,) = retries_of(seen, job)
    assert isinstance(retry, ev.RateLimitRetryEvent) and retry.reason == str(limit)
    assert retry.delay is not None and 20.0 <= retry.delay <= 25.0
    assert elapsed == pytest.approx(retry.delay)
    assert sorted((f.detail, f.retry_after, f.backpressure) for f in limiter.pushbacks) == [
        ("429 Too Many Requests", 20.0, 1),
        ("503 Service Unavailable", None, 0),
    ]
    assert limiter.successes == 1  # the re-run answered


@pytest.mark.parametrize(
    ("signals", "event", "window"),
    [
        # an overload's 15-90 s outranks a rate limit's 5-30 s
        (
            [errors.RateLimitRetry("429"), errors.OverloadRetry("529")],
            ev.TransientErrorRetryEvent,
            (15.0, 90.0),
        ),
        # a transient error that names 40 s outranks an overload's floor of 15 s
        (
            [errors.OverloadRetry("529"), errors.TransientErrorRetry("503", retry_after=40)],
            ev.TransientErrorRetryEvent,
            (40.0, 50.0),
        ),
        # the same window: the one that pushes back harder (a rate limit over a 5xx)
        (
            [errors.TransientErrorRetry("503"), errors.RateLimitRetry("429")],
            ev.RateLimitRetryEvent,
            (5.0, 30.0),
        ),
        # an upstream signal over a correction, and its pause is kept
        (
            [errors.ResponseCorrectionRetry("fix it"), errors.RateLimitRetry("429", retry_after=3)],
            ev.RateLimitRetryEvent,
            (3.0, 4.0),
        ),
        # a truncation (a budget of one) over a correction (four), neither pausing
        (
            [errors.ResponseCorrectionRetry("fix it"), errors.OutputTruncationRetry("cut")],
            ev.OutputTruncationRetryEvent,
            None,
        ),
    ],
    ids=["overload", "named-delay", "push-back", "upstream-first", "truncation"],
)
async def test_the_most_demanding_signal_decides(
    autojump_clock: trio.testing.MockClock,
    signals: list[errors.RerunSignal],
    event: type[ev.JobEvent],
    window: tuple[float, float] | None,
) -> None:
    """Among signals raised at once, the one whose pause is longest decides it (its window's
    floor, a named Retry-After counting as that delay plus jitter), then the harder push-back;
    upstream signals outrank a truncation, which outranks a correction. One re-run, one event."""
    job = FanOut(workflow("u", "fan"), KINDS[0], [[raising(s) for s in signals]])
    async with running() as (dispatcher, seen):
        started = trio.current_time()
        assert await dispatcher.submit(job).result() == "answer after 2"
        elapsed = trio.current_time() - started
    (retry,) = retries_of(seen, job)
    assert type(retry) is event
    if window is None:
        assert elapsed == 0.0
    else:
        low, high = window
        assert isinstance(retry, ev.RateLimitRetryEvent | ev.TransientErrorRetryEvent)
        assert retry.delay is not None and low <= retry.delay <= high
        assert elapsed == pytest.approx(retry.delay)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_group_of_signals_draws_once_on_the_upstream_budget(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """Two 429s at once are one re-run on the job's budget, not two; with a budget of one the
    second attempt's group exhausts it, naming the budget, with a signal of that group as the
    cause. Each attempt's two 429s both reach the limiter."""
    limiter = Upstream()
    rounds = [
        [raising(errors.RateLimitRetry(f"429 #{n}.{i}", retry_after=1)) for i in (1, 2)]
        for n in (1, 2)
    ]
    job = FanOut(workflow("u", "fan"), kind, rounds, limiter)
    job.upstream_retries = 1
    async with running() as (dispatcher, _):
        with pytest.raises(
            errors.UncorrectableError, match=r"transparent retry budget \(1\)"
        ) as info:
            await dispatcher.submit(job).result()
    assert job.runs == 2
    cause = info.value.__cause__
    assert isinstance(cause, errors.RateLimitRetry) and str(cause).startswith("429 #2.")
    assert sorted(f.detail for f in limiter.pushbacks) == [
        "429 #1.1",
        "429 #1.2",
        "429 #2.1",
        "429 #2.2",
    ]


# -- a group with any other failure fails the job with it ----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_mixed_group_fails_with_its_failure_and_still_tells_the_limiter(
    autojump_clock: trio.testing.MockClock, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 beside a ValueError: the job fails with the ValueError, the very object raised,
    at once (no re-run, no retry event), and the limiter still hears of the 429. The debug log
    says which signal was not acted on."""
    caplog.set_level(logging.DEBUG, logger="nucleo_trio.dispatcher")
    limiter = Upstream()
    said = errors.UpstreamFailure(429, "search", "429 Too Many Requests", retry_after=2)
    boom = ValueError("the parser choked")
    limit = errors.RateLimitRetry("429", retry_after=2, failure=said)
    job = FanOut(workflow("u", "fan"), kind, [[raising(limit), raising(boom)]], limiter)
    async with running() as (dispatcher, seen):
        with pytest.raises(ValueError) as info:
            await dispatcher.submit(job).result()
        assert trio.current_time() == 0.0
    assert info.value is boom
    assert job.runs == 1 and retries_of(seen, job) == []
    (failed,) = [e for e in seen if isinstance(e, ev.JobFailedEvent)]
    assert failed.error is boom
    (pushback,) = limiter.pushbacks
    assert (pushback.status, pushback.service, pushback.retry_after) == (429, "search", 2.0)
    assert (
        "fails with ValueError: the parser choked; not acted on beside it: RateLimitRetry: 429"
        in (caplog.text)
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_a_single_failure_is_unwrapped_as_raised(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """A group of one failure, nested two nurseries deep, fails the job with that exception
    object: ``except ValueError`` works for the caller, and the terminal event carries it."""
    boom = ValueError("only child failed")

    async def nested() -> None:
        await fan_out(kind, [raising(boom)])

    job = FanOut(workflow("u", "fan"), kind, [[nested, trio.lowlevel.checkpoint]])
    async with running() as (dispatcher, seen):
        handle = dispatcher.submit(job)
        with pytest.raises(ValueError) as info:
            await handle.result()
    assert info.value is boom and handle.state is JobState.FAILED
    (failed,) = [e for e in seen if isinstance(e, ev.JobFailedEvent)]
    assert failed.error is boom


@pytest.mark.parametrize("kind", KINDS)
async def test_several_failures_stay_a_group_without_the_signals(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """Two failures at once stay a group holding both; a re-run signal beside them is dropped
    from it (the limiter still hears of it), and nothing re-runs."""
    limiter = Upstream()
    first, second = ValueError("first"), KeyError("second")
    job = FanOut(workflow("u", "fan"), kind, [[raising(first), raising(second)]])
    signalled = FanOut(
        workflow("u", "fan"),
        kind,
        [[raising(first), raising(errors.RateLimitRetry("429")), raising(second)]],
        limiter,
    )
    async with running() as (dispatcher, _):
        with pytest.raises(ExceptionGroup) as plain:
            await dispatcher.submit(job).result()
        with pytest.raises(ExceptionGroup) as mixed:
            await dispatcher.submit(signalled).result()
    for group in (plain.value, mixed.value):
        _, rest = group.split((ValueError, KeyError))
        assert rest is None  # nothing but the two failures
        found = group.exceptions
        while len(found) == 1 and isinstance(found[0], ExceptionGroup):
            found = found[0].exceptions  # anyio's group may sit inside trio's
        assert {id(e) for e in found} == {id(first), id(second)}
    assert job.runs == signalled.runs == 1
    assert [f.detail for f in limiter.pushbacks] == ["429"]


# -- cancellation and KeyboardInterrupt keep their meaning ---------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_group_holding_a_cancellation_is_a_cancellation(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """The timeout's second phase cancels a job whose children sleep; one of them answers the
    cancel with a 429. The group holds trio's Cancelled, so it is a cancellation: the job ends
    TIMED_OUT, is never re-run, and no limiter is charged."""
    limiter = Upstream()

    async def pushes_back_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise errors.RateLimitRetry("429 while closing") from None

    job = FanOut(
        workflow("u", "fan"), kind, [[sleeping_forever, pushes_back_when_cancelled]], limiter
    )
    job.timeout = 1.0
    async with running() as (dispatcher, seen):
        handle = dispatcher.submit(job)
        with pytest.raises(errors.JobTimeoutError):
            await handle.result()
    assert handle.state is JobState.TIMED_OUT
    assert job.runs == 1 and retries_of(seen, job) == []
    assert limiter.pushbacks == [] and limiter.successes == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_keyboard_interrupt_leaf_still_stops_the_dispatcher(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """A child's KeyboardInterrupt beside a 429: no re-run; the dispatcher stops, the job's
    handle settles cancelled, and the block leaves with the KeyboardInterrupt itself."""
    interrupt = KeyboardInterrupt()
    job = FanOut(
        workflow("u", "fan"),
        kind,
        [[raising(errors.RateLimitRetry("429")), raising(interrupt)]],
    )
    with pytest.raises(KeyboardInterrupt) as info:
        async with running() as (dispatcher, _):
            handle = dispatcher.submit(job)
            await trio.sleep_forever()
    assert info.value is interrupt
    assert job.runs == 1 and handle.state is JobState.CANCELLED


# -- pre_execute, post_execute and guards that fan out -------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_pre_execute_that_fans_out_is_read_as_the_attempt(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """A 429 from pre_execute's children re-runs the attempt after its named delay (pre_execute
    runs again, execute only once); the limiter hears of it."""
    limiter = Upstream()
    job = FanOut(
        workflow("u", "fan"),
        kind,
        [[raising(errors.RateLimitRetry("429", retry_after=2))]],
        limiter,
        where="pre_execute",
    )
    async with running() as (dispatcher, _):
        started = trio.current_time()
        assert await dispatcher.submit(job).result() == "answer after 1"
        assert 2.0 <= trio.current_time() - started <= 3.0
    assert (job.pre_runs, job.runs) == (2, 1)
    assert [f.detail for f in limiter.pushbacks] == ["429"]


@pytest.mark.parametrize("kind", KINDS)
async def test_post_execute_that_fans_out_fails_with_its_failure(
    autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """A failure from post_execute's children fails the job as raised; two stay a group."""
    boom = RuntimeError("the audit write failed")
    one = FanOut(workflow("u", "fan"), kind, [[raising(boom)]], where="post_execute")
    first, second = OSError("disk"), LookupError("index")
    two = FanOut(
        workflow("u", "fan"), kind, [[raising(first), raising(second)]], where="post_execute"
    )
    async with running() as (dispatcher, _):
        with pytest.raises(RuntimeError) as info:
            await dispatcher.submit(one).result()
        with pytest.raises(ExceptionGroup) as group:
            await dispatcher.submit(two).result()
    assert info.value is boom
    assert group.value.subgroup(OSError) is not None
    assert group.value.subgroup(LookupError) is not None


class FanOutGuard(ContentGuardrail):
    """An input guard whose validation fans out: each run takes the next round of children."""

    rounds: list[list[Body]] = []
    runs = 0

    async def validate(self, target: Any) -> None:
        FanOutGuard.runs += 1
        if FanOutGuard.rounds:  # a nursery and a task group, run by run
            await fan_out(KINDS[FanOutGuard.runs % 2], FanOutGuard.rounds.pop(0))


class Guarded(Tool[str]):
    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        self.input = "the text to judge"
        self.timeout = 60.0

    def content_guardrails(self) -> list[ContentGuardrail]:
        return [FanOutGuard(self, Direction.INPUT)]

    async def execute(self, context: JobContext) -> str:
        return "guarded answer"


@pytest.fixture
def _fresh_guard() -> None:
    FanOutGuard.rounds, FanOutGuard.runs = [], 0


@pytest.mark.usefixtures("_fresh_guard")
async def test_a_guard_that_fans_out_is_rerun_and_refuses_as_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A guard is a job: a 429 from its children re-runs the guard after the named delay and
    the gated job goes on; a refusal from one child reaches the gated job as raised; refusals
    from several at once are one refusal naming each, with the group as its cause."""
    refusal = errors.GuardrailError("the text names a competitor")
    other = errors.GuardrailError("the text is too long")
    FanOutGuard.rounds = [
        [raising(errors.RateLimitRetry("429 from the moderation API", retry_after=1))],
        [],
        [raising(refusal)],
        [raising(refusal), raising(other)],
    ]
    async with running() as (dispatcher, _):
        started = trio.current_time()
        assert await dispatcher.submit(Guarded(workflow("u", "g"))).result() == "guarded answer"
        assert 1.0 <= trio.current_time() - started <= 2.0
        assert FanOutGuard.runs == 2
        with pytest.raises(errors.GuardrailError) as one:
            await dispatcher.submit(Guarded(workflow("u", "g"))).result()
        with pytest.raises(errors.GuardrailError) as both:
            await dispatcher.submit(Guarded(workflow("u", "g"))).result()
    assert one.value is refusal
    assert str(both.value).startswith("2 refusals at once: ")
    assert str(refusal) in str(both.value) and str(other) in str(both.value)
    assert isinstance(both.value.__cause__, ExceptionGroup)


# -- a thinker's tool calls and its validation seat ----------------------------------------------

CAT = catalog(entry("think"))
DECLARED = ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT)


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


class Search(Tool[str]):
    """Searches two indexes at once; the test gives each run its round of children."""

    parameters = {"type": "object", "properties": {"term": {"type": "string"}}}
    rounds: list[list[Body]] = []
    runs = 0

    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        self.input: dict[str, Any] = {}
        self.timeout = 60.0

    async def execute(self, context: JobContext) -> str:
        Search.runs += 1
        if Search.rounds:  # a nursery and a task group, run by run
            await fan_out(KINDS[Search.runs % 2], Search.rounds.pop(0))
        return f"{self.input.get('term')}: found on run {Search.runs}"


class Sourced(ValidationGuardrail):
    """A validation guard that checks two things at once, each in a child task."""

    async def validate(self, target: Any) -> None:
        async def cites() -> None:
            if "source" not in str(target):
                raise errors.GuardrailError("cite your source")

        async def short() -> None:
            if len(str(target)) > 40:
                raise errors.GuardrailError("keep it under 40 characters")

        await fan_out(KINDS[0], [cites, short])


class Researcher(Thinker[str]):
    def validation_guardrails(self) -> list[ValidationGuardrail]:
        return [Sourced(self)]


@asynccontextmanager
async def thinking(client: ScriptedLLMClient) -> AsyncIterator[JobDispatcher]:
    models = ModelRuntime(CAT, providers=providers("fake-llm", clients={"think": client}))
    async with open_dispatcher(DispatcherConfig(seed=7), models=models) as dispatcher:
        yield dispatcher


@pytest.fixture
def _fresh_search() -> None:
    Search.rounds, Search.runs = [], 0


def tool_results(request: Any) -> dict[str | None, str]:
    return {m.tool_call_id: m.content for m in request.messages if m.tool_call_id}


@pytest.mark.usefixtures("_fresh_search")
async def test_a_thinker_tool_call_that_fans_out_is_rerun_on_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool whose children meet a 429 is re-run by the dispatcher after the named delay: the
    model gets the re-run's answer, and the thinker itself makes no extra model call."""
    Search.rounds = [
        [raising(errors.RateLimitRetry("429", retry_after=2)), trio.lowlevel.checkpoint]
    ]
    client = ScriptedLLMClient(
        [reply(tool_calls=[call("search", "c1", term="nursery")]), reply("done")]
    )
    async with thinking(client) as dispatcher:
        thinker: Thinker[str] = Thinker(
            workflow("u", "t"), DECLARED, "Find nurseries.", tools=[Search]
        )
        assert await dispatcher.submit(thinker).result() == "done"
    assert Search.runs == 2 and len(client.requests) == 2
    assert tool_results(client.requests[1])["c1"] == "nursery: found on run 2"


@pytest.mark.usefixtures("_fresh_search")
async def test_a_tool_that_failed_several_ways_at_once_has_each_explained(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool whose two children fail goes back to the model with each failure explained; one
    failure goes back as that failure alone."""
    Search.rounds = [
        [
            raising(errors.ResourceNotFoundError("no index named 'docs'")),
            raising(errors.InvalidInputError("the term is empty")),
        ],
        [raising(errors.ResourceNotFoundError("no index named 'wiki'"))],
    ]
    client = ScriptedLLMClient(
        [
            reply(tool_calls=[call("search", "c1", term=""), call("search", "c2", term="x")]),
            reply("gave up"),
        ]
    )
    async with thinking(client) as dispatcher:
        thinker: Thinker[str] = Thinker(workflow("u", "t"), DECLARED, "Search.", tools=[Search])
        assert await dispatcher.submit(thinker).result() == "gave up"
    results = tool_results(client.requests[1])
    several = next(text for text in results.values() if "2 ways at once" in text)
    assert "no index named 'docs'" in several and "the term is empty" in several
    assert several.splitlines()[0] == "The tool search failed 2 ways at once:"
    single = next(text for text in results.values() if "wiki" in text)
    assert "ways at once" not in single


async def test_a_validation_guard_refusing_two_ways_at_once_is_one_correction(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A validation guard whose two children refuse is one refusal naming both: the model is
    told both in one correction turn, and its next answer is delivered."""
    long_unsourced = "A nursery is where the tasks started in it live and die."
    client = ScriptedLLMClient(
        [
            reply(tool_calls=[call(FINAL_ANSWER, "f1", answer=long_unsourced)]),
            reply(tool_calls=[call(FINAL_ANSWER, "f2", answer="Task scopes (source: docs)")]),
        ]
    )
    async with thinking(client) as dispatcher:
        thinker = Researcher(workflow("u", "t"), DECLARED, "What is a nursery?")
        assert await dispatcher.submit(thinker).result() == "Task scopes (source: docs)"
    correction = client.requests[1].messages[-1].content
    assert "2 refusals at once" in correction
    assert "cite your source" in correction and "keep it under 40 characters" in correction
