"""Function tools: a coroutine function made into a Tool by @function_tool.

This module is also a typing test: ``mypy --strict tests/test_function_tools.py`` checks that
``await handle.result()`` of a function tool is the function's return type (``assert_type``),
and that using it as another type is an error (the ``type: ignore`` comments below would be
reported as unused under ``--strict`` if mypy accepted those lines).
"""

from __future__ import annotations

import math
from typing import Any, assert_type

import pytest
import trio

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import GuardrailError, JobTimeoutError
from nucleo_trio.guardrails import (
    Direction,
    PayloadSizeCapGuardrail,
    PIIDetectionGuardrail,
    PrincipalAllowListGuardrail,
    ValidationGuardrail,
)
from nucleo_trio.jobs import (
    DEFAULT_TIMEOUT,
    DEFAULT_UPSTREAM_RETRIES,
    JobContext,
    JobHandle,
    JobRequirements,
    JobType,
    Tool,
    workflow,
)
from nucleo_trio.tools import FunctionTool, function_tool

db = CountingGate("ft-db", 1)


@function_tool
async def shout(context: JobContext, text: str) -> str:
    """Says it louder."""
    return text.upper() + "!"


@function_tool(
    timeout=5,
    priority=3,
    upstream_retries=1,
    requirements=JobRequirements().require_rate_limiter(db),
    name="Query the database",
    action="querying",
)
async def query(context: JobContext, table: str, limit: int = 10) -> list[str]:
    await trio.sleep(2)
    return [f"{table}:{n}" for n in range(limit)]


# -- typing (checked by mypy --strict on this file) ----------------------------------------------


async def _typed(root: Any) -> None:
    async with open_dispatcher() as dispatcher:
        handle = dispatcher.submit(shout(root, "hi"))
        assert_type(handle, JobHandle[str])
        assert_type(await handle.result(), str)
        assert_type(await dispatcher.submit(query(root, "users", limit=2)).result(), list[str])
        assert_type(shout(root, "x"), FunctionTool[str])
        wrong: int = await handle.result()  # type: ignore[assignment]
        shout(root, 3)  # type: ignore[arg-type]
        shout(root)  # type: ignore[call-arg]
        del wrong


# -- running -------------------------------------------------------------------------------------


async def test_a_function_tool_runs_with_its_arguments_and_its_class_is_named_after_it() -> None:
    async with open_dispatcher() as dispatcher:
        root = workflow("alice", "shout")
        job = shout(root, "hello")
        assert isinstance(job, Tool)
        assert job.job_id.startswith("shout-")
        assert job.input == "hello"
        handle = dispatcher.submit(job)
        assert await handle.result() == "HELLO!"
        snapshot = handle.context.snapshot()
    assert snapshot.job_class == "shout"
    assert snapshot.job_class_qualname == f"{__name__}.shout"
    assert snapshot.kind is JobType.TOOL
    assert snapshot.description == "Says it louder."
    assert shout.__name__ == "shout" and shout.function.__name__ == "shout"
    assert type(job) is shout.job_class


async def test_the_decorator_declares_the_knobs_and_the_demand(autojump_clock: Any) -> None:
    root = workflow("alice", "query")
    job = query(root, "users", limit=2)
    assert (job.timeout, job.priority, job.upstream_retries) == (5.0, 3, 1)
    assert job.input == {"table": "users", "limit": 2}
    assert shout(root, "x").timeout == DEFAULT_TIMEOUT
    assert shout(root, "x").upstream_retries == DEFAULT_UPSTREAM_RETRIES
    names: list[tuple[str, str]] = []
    async with open_dispatcher() as dispatcher:

        def named(event: ev.JobEvent) -> None:
            assert event.snapshot is not None
            names.append((event.snapshot.name, event.snapshot.action))

        dispatcher.bus.subscribe(named, event_type=ev.JobScheduled)
        started = trio.current_time()
        # One db permit: the two calls run one after the other, two seconds each.
        first = dispatcher.submit(query(root, "users", limit=2))
        second = dispatcher.submit(query(root, "orders", 1))
        assert await first.result() == ["users:0", "users:1"]
        assert await second.result() == ["orders:0"]
        assert trio.current_time() - started == pytest.approx(4.0)
    assert names == [("Query the database", "querying")] * 2


async def test_each_job_gets_its_own_copy_of_the_declared_requirements() -> None:
    root = workflow("alice", "copies")
    one, two = query(root, "a"), query(root, "b")
    declared = one.requirements()
    declared.require_http()
    assert not two.requirements().requires_http
    assert [r.limiter for r in two.requirements().limiters] == [db]


async def test_requirements_may_be_a_function_called_per_attempt(autojump_clock: Any) -> None:
    calls: list[int] = []

    def demand() -> JobRequirements:
        calls.append(1)
        return JobRequirements().require_rate_limiter(db)

    @function_tool(requirements=demand, timeout=60)
    async def flaky(context: JobContext) -> int:
        if context.attempt == 1:
            raise errors.TransientErrorRetry("503 once")
        return context.attempt

    async with open_dispatcher(DispatcherConfig(seed=1)) as dispatcher:
        assert await dispatcher.submit(flaky(workflow("alice", "flaky"))).result() == 2
    assert len(calls) == 3  # at submit and at each of the two attempts


async def test_a_requirements_function_that_returns_something_else_fails_the_job() -> None:
    @function_tool(requirements=lambda: "http")  # type: ignore[arg-type]
    async def odd(context: JobContext) -> None:
        return None

    async with open_dispatcher() as dispatcher:
        with pytest.raises(
            errors.NucleoSystemError, match="must return a JobRequirements, got str 'http'"
        ) as caught:
            await dispatcher.submit(odd(workflow("alice", "odd"))).result()
    assert isinstance(caught.value.__cause__, TypeError)


async def test_the_timeout_declared_in_the_decorator_stops_the_job(autojump_clock: Any) -> None:
    @function_tool(timeout=3)
    async def stuck(context: JobContext) -> str:
        await trio.sleep(100)
        return "never"

    async with open_dispatcher() as dispatcher:
        started = trio.current_time()
        with pytest.raises(JobTimeoutError):
            await dispatcher.submit(stuck(workflow("alice", "stuck"))).result()
        assert trio.current_time() - started >= 3.0
        assert trio.current_time() - started < 100


async def test_the_retry_budget_declared_in_the_decorator_is_spent(autojump_clock: Any) -> None:
    attempts: list[int] = []

    @function_tool(upstream_retries=2)
    async def throttled(context: JobContext) -> str:
        attempts.append(context.attempt)
        raise errors.RateLimitRetry("429")

    async with open_dispatcher(DispatcherConfig(seed=3)) as dispatcher:
        with pytest.raises(errors.UncorrectableError) as caught:
            await dispatcher.submit(throttled(workflow("alice", "throttled"))).result()
    assert attempts == [1, 2, 3]  # the first attempt and two re-runs
    assert isinstance(caught.value.__cause__, errors.RateLimitRetry)


async def test_a_per_call_knob_overrides_the_decorator(autojump_clock: Any) -> None:
    job = query(workflow("alice", "override"), "t")
    job.timeout = 1
    async with open_dispatcher() as dispatcher:
        with pytest.raises(JobTimeoutError):
            await dispatcher.submit(job).result()


async def test_results_flow_through_dependencies() -> None:
    @function_tool
    async def count(context: JobContext) -> int:
        return len(context.single_dependency_result())

    async with open_dispatcher() as dispatcher:
        root = workflow("alice", "deps")
        loud = dispatcher.submit(shout(root, "abc"))
        assert await dispatcher.submit(count(root), dependencies=[loud]).result() == 4


# -- guards --------------------------------------------------------------------------------------


@function_tool(
    guards=[
        lambda job: PayloadSizeCapGuardrail(job, max_chars=40),
        lambda job: PIIDetectionGuardrail(job, Direction.OUTPUT),
        lambda job: PrincipalAllowListGuardrail(job, {"alice"}),
    ]
)
async def look_up(context: JobContext, question: str) -> str:
    return "write to jane.doe@example.com" if "email" in question else "since 2021"


async def test_guards_declared_in_the_decorator_judge_the_arguments_and_the_result() -> None:
    async with open_dispatcher() as dispatcher:
        root = workflow("alice", "guards")
        assert await dispatcher.submit(look_up(root, "since when?")).result() == "since 2021"
        with pytest.raises(GuardrailError, match="over the cap of 40"):
            await dispatcher.submit(look_up(root, "x" * 100)).result()
        with pytest.raises(GuardrailError, match="personal data"):
            await dispatcher.submit(look_up(root, "their email?")).result()
        with pytest.raises(GuardrailError, match="mallory"):
            await dispatcher.submit(look_up(workflow("mallory", "guards"), "hi")).result()


async def test_guards_are_built_once_per_job_across_its_re_runs(autojump_clock: Any) -> None:
    built: list[str] = []

    def cap(job: FunctionTool[Any]) -> PayloadSizeCapGuardrail:
        built.append(job.job_id)
        return PayloadSizeCapGuardrail(job, max_chars=40)

    @function_tool(guards=[cap])
    async def flaky(context: JobContext, question: str) -> int:
        if context.attempt == 1:
            raise errors.TransientErrorRetry("503 once")
        return context.attempt

    async with open_dispatcher(DispatcherConfig(seed=2)) as dispatcher:
        root = workflow("alice", "rerun")
        first, second = flaky(root, "a"), flaky(root, "b")
        assert await dispatcher.submit(first).result() == 2
        assert await dispatcher.submit(second).result() == 2
    assert built == [first.job_id, second.job_id]


async def test_a_guard_factory_that_builds_no_usable_guard_fails_the_job() -> None:
    class Answers(ValidationGuardrail):
        async def validate(self, target: Any) -> None:
            return None

    @function_tool(guards=[Answers])
    async def answer(context: JobContext) -> str:
        return "42"

    async with open_dispatcher() as dispatcher:
        with pytest.raises(Exception, match="content, auth or admission guardrails"):
            await dispatcher.submit(answer(workflow("alice", "answer"))).result()


# -- refusals ------------------------------------------------------------------------------------


def _class_error(setting: str, value: object) -> str:
    """The message a class body with this value gets, for a class named ``twin``."""
    with pytest.raises((TypeError, ValueError)) as caught:
        type("twin", (Tool,), {setting: value, "execute": lambda self, context: None})
    return str(caught.value)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("timeout", math.nan),
        ("timeout", -1),
        ("timeout", math.inf),
        ("timeout", "10"),
        ("priority", True),
        ("priority", 1.5),
        ("upstream_retries", -1),
        ("upstream_retries", None),
        ("tolerates_dependency_failures", 1),
    ],
)
def test_bad_knobs_get_the_errors_a_class_body_gets(setting: str, value: object) -> None:
    async def twin(context: JobContext) -> None:
        return None

    settings: dict[str, Any] = {setting: value}
    with pytest.raises((TypeError, ValueError)) as caught:
        function_tool(**settings)(twin)
    assert str(caught.value) == _class_error(setting, value)
    assert str(caught.value).startswith(f"twin.{setting} must be")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"requirements": 5}, "requirements must be a JobRequirements or a function"),
        ({"guards": "pii"}, "guards must be a list of guard classes"),
        ({"guards": [42]}, "each of guards must be a guard class or a function"),
        ({"name": 3}, "name must be a str or None, got 3"),
        ({"action": None}, "action must be a str, got None"),
    ],
)
def test_bad_settings_are_refused_when_the_decorator_is_made(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message) as caught:
        function_tool(**settings)
    assert str(caught.value).startswith("function_tool(): ")


def test_a_model_binding_in_fixed_requirements_is_refused() -> None:
    requirements = JobRequirements()
    requirements.model_bindings.append(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="minted per attempt; pass requirements as a function"):
        function_tool(requirements=requirements)


def test_only_a_coroutine_function_with_a_context_parameter_becomes_a_tool() -> None:
    def plain(context: JobContext) -> str:
        return "sync"

    async def no_context() -> str:
        return "?"

    async def keyword_only(*, context: JobContext) -> str:
        return "?"

    with pytest.raises(TypeError, match="takes a coroutine function"):
        function_tool(plain)  # type: ignore[arg-type]
    for function in (no_context, keyword_only):
        with pytest.raises(TypeError, match="first positional parameter"):
            function_tool(function)  # type: ignore[arg-type]


def test_bad_arguments_are_refused_at_the_call() -> None:
    root = workflow("alice", "args")
    with pytest.raises(TypeError, match=r"^shout\(\): missing a required argument: 'text'"):
        shout(root)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^query\(\): got an unexpected keyword argument 'rows'"):
        query(root, "t", rows=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="parent must be a workflow root or a job"):
        shout("alice", "hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="built by a function decorated with @function_tool"):
        FunctionTool(root)
