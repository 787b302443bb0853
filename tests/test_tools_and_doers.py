"""Tools and doers as the thinker layer builds on them: timeouts and the doer's step helpers."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from nucleo_trio.guardrails import GUARDRAIL_TIMEOUT
from nucleo_trio.jobs import (
    DEFAULT_TIMEOUT,
    META_ITERATION,
    Doer,
    JobContext,
    JobHandle,
    JobRequirements,
    JobType,
    Orchestrator,
    Tool,
    workflow,
)
from nucleo_trio.llm import Conversation, LLMCall
from nucleo_trio.llm.call import LLM_CALL_TIMEOUT

from .jobs_for_tests import Echo


class Noop(Tool[None]):
    async def execute(self, context: JobContext) -> None:
        return None


def test_a_tools_default_timeout_is_thirty_minutes_and_built_ins_set_their_own() -> None:
    """TOOL-02: a tool's default timeout is 30 minutes; built-in tools set their own, up to six
    minutes for a model call (a guard's ten seconds, an LLM call's six minutes)."""
    root = workflow("u", "wf")
    assert Noop(root).timeout == DEFAULT_TIMEOUT == 30 * 60
    assert LLMCall(root, Conversation(output=10)).timeout == LLM_CALL_TIMEOUT == 6 * 60
    assert GUARDRAIL_TIMEOUT == 10.0


class Steps(Doer[list[Any]]):
    """Runs A, then B and C in parallel, then D after C, then E with its own metadata."""

    async def execute(self, context: JobContext) -> list[Any]:
        first = self.next_step()
        a = self.submit_in_step(Echo(self, "a"))
        self.next_step()
        b = self.submit_in_current_step(Echo(self, "b", sleep=1))
        c = self.submit_in_current_step(Echo(self, "c", sleep=5))
        d = self.submit_in_current_step(Echo(self, "d"), [c])
        e = self.submit_in_step(Echo(self, "e"), metadata={"source": "test"})
        handles: list[JobHandle[Any]] = [a, b, c, d, e]
        results = [await handle.result() for handle in handles]
        stamps = [h.context.metadata.get(META_ITERATION) for h in handles]
        finished_d = d.context.snapshot().started_at
        finished_c = c.context.snapshot().ended_at
        assert finished_c is not None and finished_d is not None and finished_d >= finished_c
        return [first, results, stamps, e.context.metadata.get("source"), self.current_step]


async def test_the_doer_step_helpers(autojump_clock: Any) -> None:
    """TOOL-09: next_step returns the counter plus one from 0, so the first step is 1 (before
    it the counter is 0); submit_in_step opens a step and submits in it; submit_in_current_step
    reuses the ordinal, holds a job with dependencies until they are done, and merges the
    caller's metadata with "iteration" added."""
    from nucleo_trio.dispatch import open_dispatcher

    async with open_dispatcher() as dispatcher:
        doer = Steps(workflow("u", "wf"))
        assert doer.current_step == 0
        first, results, stamps, source, last = await dispatcher.submit(doer).result()
        await trio.testing.wait_all_tasks_blocked()
    assert first == 1
    assert results == ["a", "b", "c", "d", "e"]
    assert stamps == [2, 3, 3, 3, 4] and source == "test" and last == 4


def test_an_orchestrator_has_no_timeout_and_refuses_one() -> None:
    """TOOL-03: an orchestrator's timeout is always None; setting one is refused, through
    set_timeout or the attribute, naming the orchestrator; its requirements cannot be
    overridden; an orchestrator and a Doer are typed DOER (a Thinker THINKER)."""

    class Fan(Orchestrator[None]):
        async def execute(self, context: JobContext) -> None:
            return None

    fan = Fan(workflow("u", "wf"))
    assert fan.timeout is None and fan.job_type is JobType.DOER
    with pytest.raises(TypeError, match="Fan.* is an orchestrator and has no timeout"):
        fan.set_timeout(5.0)
    with pytest.raises(TypeError, match="has no timeout"):
        fan.timeout = 5.0
    fan.timeout = None  # declaring none is what it already has
    assert fan.timeout is None
    with pytest.raises(TypeError, match="overrides requirements"):

        class Greedy(Orchestrator[None]):
            def requirements(self) -> JobRequirements:
                return JobRequirements()

            async def execute(self, context: JobContext) -> None:
                return None

    class Steps(Doer[None]):
        async def execute(self, context: JobContext) -> None:
            return None

    assert Steps(workflow("u", "wf")).job_type is JobType.DOER
    from nucleo_trio.llm import Thinker

    assert Thinker.job_type is JobType.THINKER
