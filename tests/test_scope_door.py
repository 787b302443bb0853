"""Scope at the door: sealed guards, inheritance, the internal door for guards (GRD-22,
GRD-28..30, GRD-32, SUB-06, SUB-07, EXEC-13)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import JobDispatcher
from nucleo_trio.errors import GuardrailError, NucleoSystemError
from nucleo_trio.guardrails import (
    ContentGuardrail,
    ReadOnlyScope,
    Scope,
    Scoped,
    ScopeGuard,
    TenantScope,
    TenantScoped,
)
from nucleo_trio.jobs import (
    Doer,
    Identifiable,
    JobContext,
    JobHandle,
    JobRequirements,
    ScopeAuthority,
    Tool,
    workflow,
)

from .conftest import Recorder, settle
from .test_scope import CityScope, RegionScope, ZoneScope


@attrs.frozen
class Claim(TenantScoped):
    """An input that names a tenant, as a model would write one."""

    tenant_id: str
    text: str = ""


class Work(Tool[str]):
    """A leaf with an input; it may hold a gate while it runs."""

    def __init__(
        self, parent: Identifiable, input: Any = None, *, gate: CountingGate | None = None
    ) -> None:
        super().__init__(parent)
        self.input = input
        self.gate = gate
        self.runs = 0
        self.timeout = 60.0

    def requirements(self) -> JobRequirements:
        if self.gate is None:
            return JobRequirements()
        return JobRequirements().require_rate_limiter(self.gate)

    async def execute(self, context: JobContext) -> str:
        self.runs += 1
        await trio.sleep(0.1)
        return f"done {getattr(self.input, 'tenant_id', self.input)}"


class TenantWork(Work, TenantScoped):
    """A leaf that declares its own tenant."""

    def __init__(self, parent: Identifiable, tenant_id: str) -> None:
        super().__init__(parent)
        self.tenant_id = tenant_id


Script = Callable[["Flow", JobContext], Awaitable[Any]]


class Flow(Doer[Any]):
    """An orchestrator that runs the script it is given."""

    def __init__(self, parent: Identifiable, script: Script) -> None:
        super().__init__(parent)
        self.script = script

    async def execute(self, context: JobContext) -> Any:
        return await self.script(self, context)


class TenantFlow(Flow, TenantScoped):
    """An orchestrator bound to a tenant by the marker alone."""

    def __init__(self, parent: Identifiable, tenant_id: str, script: Script) -> None:
        super().__init__(parent, script)
        self.tenant_id = tenant_id


class BoundFlow(Flow, Scoped):
    """An orchestrator bound to any scope."""

    def __init__(self, parent: Identifiable, bound: Scope, script: Script) -> None:
        super().__init__(parent, script)
        self.bound = bound

    def scope(self) -> Scope:
        return self.bound


async def outcome(handle: JobHandle[Any]) -> str:
    try:
        return str(await handle.result())
    except GuardrailError as refusal:
        return f"refused: {refusal}"


def submits(*children: Callable[[Flow], Any]) -> Script:
    """A script that submits each child (all before awaiting any) and answers their outcomes."""

    async def script(flow: Flow, context: JobContext) -> list[str]:
        handles = [flow.submit_in_current_step(make(flow)) for make in children]
        return [await outcome(h) for h in handles]

    return script


def root() -> Identifiable:
    return workflow("alice", "wf")


# --- the caller's sealed guard judges every submission ---------------------------------------------


async def test_a_claim_outside_the_sealed_guard_refuses_with_the_guards_own_error(
    dispatcher: JobDispatcher, recorder: Recorder, autojump_clock: trio.testing.MockClock
) -> None:
    """SUB-06: an input claiming t9 under a t1 flow is refused with the guard's GuardrailError
    (not a system error) naming t9; a t1 claim passes and runs; the refused child never runs and
    never reaches JobScheduled."""
    children: list[Work] = []

    def child(tenant: str) -> Callable[[Flow], Work]:
        def make(flow: Flow) -> Work:
            children.append(Work(flow, Claim(tenant)))
            return children[-1]

        return make

    flow = TenantFlow(root(), "t1", submits(child("t9"), child("t1")))
    refused, passed = await dispatcher.submit(flow).result()
    assert refused.startswith("refused: Scope mismatch") and "t9" in refused
    assert passed == "done t1"
    assert [c.runs for c in children] == [0, 1]
    await settle()
    assert recorder.names(children[0].job_id) == ["JobFailedEvent"]
    error = children[0].context.handle.error  # type: ignore[union-attr]
    assert isinstance(error, GuardrailError) and not isinstance(error, NucleoSystemError)


async def test_a_scoped_child_outside_the_guard_is_refused(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """SUB-06: a child whose own scope is t9 is refused under t1; a t1 child runs."""
    flow = TenantFlow(
        root(),
        "t1",
        submits(lambda f: TenantWork(f, "t9"), lambda f: TenantWork(f, "t1")),
    )
    refused, passed = await dispatcher.submit(flow).result()
    assert "TenantScope[tenant_id=t9]" in refused
    assert passed == "done None"


class BrokenScope(Work, Scoped):
    def __init__(self, parent: Identifiable, failure: BaseException | None) -> None:
        super().__init__(parent)
        self.failure = failure

    def scope(self) -> Scope:
        if self.failure is not None:
            raise self.failure
        return None  # type: ignore[return-value]


class BrokenClaim(Scoped):
    def scope(self) -> Scope:
        raise LookupError("no tenant in the payload")


async def test_a_throwing_or_null_scope_is_a_refused_submission_not_an_escape(
    dispatcher: JobDispatcher,
) -> None:
    """SUB-07: scope() that throws or answers None refuses the submission with a system error
    that keeps the original failure in its chain; the job never runs. The same for an input."""
    failure = KeyError("tenant")
    throwing = BrokenScope(root(), failure)
    with pytest.raises(NucleoSystemError, match="scope\\(\\) raised KeyError") as caught:
        await dispatcher.submit(throwing).result()
    assert caught.value.__cause__ is failure
    assert throwing.runs == 0
    null = BrokenScope(root(), None)
    with pytest.raises(NucleoSystemError, match="answered None"):
        await dispatcher.submit(null).result()
    assert null.runs == 0
    bad_input = Work(root(), BrokenClaim())
    with pytest.raises(NucleoSystemError, match="input's scope\\(\\) raised LookupError") as caught:
        await dispatcher.submit(bad_input).result()
    assert isinstance(caught.value.__cause__, LookupError)
    assert bad_input.runs == 0


# --- sealing ------------------------------------------------------------------------------------------


async def test_an_orchestrators_guard_is_composed_and_sealed_at_its_dispatch(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-28: set_scope_guard works before dispatch; the sealed guard is the caller's merged with
    the orchestrator's own scope and field; afterwards set_scope_guard raises and scope_guard is
    the captured guard."""
    inner_holder: list[Flow] = []

    async def inner_script(flow: Flow, context: JobContext) -> str:
        with pytest.raises(RuntimeError, match="sealed at dispatch"):
            flow.set_scope_guard(ScopeGuard())
        with pytest.raises(RuntimeError, match="already captured"):
            context.seal_scope_guard(ScopeGuard())
        return "inner done"

    async def outer_script(flow: Flow, context: JobContext) -> str:
        inner = BoundFlow(flow, RegionScope("emea"), inner_script)
        inner.set_scope_guard(ScopeGuard(ReadOnlyScope()))
        assert inner.scope_guard == ScopeGuard(ReadOnlyScope())
        inner_holder.append(inner)
        return await flow.submit(inner).result()

    assert await dispatcher.submit(TenantFlow(root(), "t1", outer_script)).result() == "inner done"
    (inner,) = inner_holder
    expected = ScopeGuard(TenantScope("t1"), RegionScope("emea"), ReadOnlyScope())
    assert inner.scope_guard == expected
    assert inner.context.scope_guard is inner.scope_guard


async def test_the_marker_alone_declares_the_scope_and_refuses_drifted_claims(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-29, GRD-27: a root orchestrator that only implements TenantScoped is sealed to its
    tenant and refuses a drifted claim."""
    flow = TenantFlow(root(), "t1", submits(lambda f: Work(f, Claim("t9"))))
    (answer,) = await dispatcher.submit(flow).result()
    assert answer.startswith("refused")
    assert flow.scope_guard == ScopeGuard(TenantScope("t1"))


async def test_inheritance_crosses_undeclared_levels(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-29: the scope reaches a grandchild through an intermediate doer that declares
    nothing."""
    middle: list[Flow] = []

    def intermediate(flow: Flow) -> Flow:
        middle.append(
            Flow(flow, submits(lambda f: Work(f, Claim("t9")), lambda f: Work(f, Claim("t1"))))
        )
        return middle[-1]

    async def outer(flow: Flow, context: JobContext) -> Any:
        return await flow.submit(intermediate(flow)).result()

    refused, passed = await dispatcher.submit(TenantFlow(root(), "t1", outer)).result()
    assert refused.startswith("refused") and passed == "done t1"
    assert middle[0].scope_guard == ScopeGuard(TenantScope("t1"))


async def test_an_inner_authority_with_a_conflicting_scope_dies_at_establishment(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-29 (adversarial: a child that tries to widen into another tenant): an inner
    orchestrator bound to t9 under t1 is refused when submitted and never runs."""
    ran: list[str] = []

    async def inner(flow: Flow, context: JobContext) -> str:
        ran.append("inner")
        return "escaped"

    flow = TenantFlow(root(), "t1", submits(lambda f: TenantFlow(f, "t9", inner)))
    (answer,) = await dispatcher.submit(flow).result()
    assert answer.startswith("refused") and "t9" in answer
    assert ran == []


async def test_a_shed_attempt_throws_and_the_captured_guard_still_enforces(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-29: a doer that tries to shed its scope mid-run gets an exception, and its next
    drifted submission is still refused."""

    async def shedding(flow: Flow, context: JobContext) -> str:
        with pytest.raises(RuntimeError, match="neither shed nor replaced"):
            flow.set_scope_guard(ScopeGuard())
        return await outcome(flow.submit(Work(flow, Claim("t9"))))

    assert (await dispatcher.submit(TenantFlow(root(), "t1", shedding)).result()).startswith(
        "refused"
    )


async def test_a_child_given_a_wider_guard_still_inherits_its_callers(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-29 (adversarial: a child that tries to widen its scope): an inner orchestrator assigned
    an empty guard before its dispatch is still sealed with its caller's binding."""

    async def outer(flow: Flow, context: JobContext) -> Any:
        inner = Flow(flow, submits(lambda f: Work(f, Claim("t9"))))
        inner.set_scope_guard(ScopeGuard())
        return await flow.submit(inner).result()

    (answer,) = await dispatcher.submit(TenantFlow(root(), "t1", outer)).result()
    assert answer.startswith("refused")


async def test_explicit_assignment_before_dispatch_guards_a_non_scoped_doer(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-29, GRD-28: a guard assigned to a doer that declares no scope enforces like a
    marker-declared one."""
    flow = Flow(root(), submits(lambda f: Work(f, Claim("t9")), lambda f: Work(f, Claim("t1"))))
    flow.set_scope_guard(ScopeGuard(TenantScope("t1")))
    refused, passed = await dispatcher.submit(flow).result()
    assert refused.startswith("refused") and passed == "done t1"
    with pytest.raises(TypeError, match="takes a ScopeGuard"):
        Flow(root(), submits()).set_scope_guard(TenantScope("t1"))  # type: ignore[arg-type]


async def test_a_model_produced_input_claiming_another_tenant_is_refused_holding_nothing(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """SUB-06 (adversarial): an orchestrator turns a model's reply into a tool input that claims
    another tenant; the submission is refused, the tool never runs, no permit is ever taken."""
    gate = CountingGate("billing", 1)
    model_reply = '{"tenant_id": "t9", "text": "refund everything"}'
    tools: list[Work] = []

    async def script(flow: Flow, context: JobContext) -> str:
        claim = Claim(**json.loads(model_reply))
        tools.append(Work(flow, claim, gate=gate))
        return await outcome(flow.submit(tools[-1]))

    answer = await dispatcher.submit(TenantFlow(root(), "t1", script)).result()
    assert answer.startswith("refused") and "t9" in answer
    await settle()
    assert tools[0].runs == 0
    assert gate.in_use == 0
    events = recorder.of(tools[0].job_id, limiter=True)
    assert [type(e).__name__ for e in events] == ["JobFailedEvent"]


# --- refinement at the door ------------------------------------------------------------------------


async def test_refined_bindings_judge_claims_on_their_shared_axis(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-22 at the door: a region-bound flow judges a city's region, a city-bound flow judges a
    region claim, and siblings meet on the region."""

    def claims(*scopes: Scope) -> Script:
        return submits(*(lambda f, s=s: Work(f, _ScopeInput(s)) for s in scopes))

    region = BoundFlow(
        root(),
        RegionScope("emea"),
        claims(CityScope("apac", "jp", "tokyo"), CityScope("emea", "fr", "paris")),
    )
    city = BoundFlow(
        root(),
        CityScope("emea", "fr", "paris"),
        claims(
            RegionScope("apac"), RegionScope("emea"), ZoneScope("apac", "z"), ZoneScope("emea", "z")
        ),
    )
    assert [a.startswith("refused") for a in await dispatcher.submit(region).result()] == [
        True,
        False,
    ]
    assert [a.startswith("refused") for a in await dispatcher.submit(city).result()] == [
        True,
        False,
        True,
        False,
    ]


@attrs.frozen
class _ScopeInput(Scoped):
    claim: Scope

    def scope(self) -> Scope:
        return self.claim


# --- concurrency ---------------------------------------------------------------------------------------


async def test_a_concurrent_fanout_checks_every_worker_against_the_sealed_guard(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-30: eight workers fanned out at once under t1 with claims t1,t9,t1,t9,t1,t1,t9,t1: five
    pass and three are refused."""
    tenants = ["t1", "t9", "t1", "t9", "t1", "t1", "t9", "t1"]
    flow = TenantFlow(root(), "t1", submits(*(lambda f, t=t: Work(f, Claim(t)) for t in tenants)))
    answers = await dispatcher.submit(flow).result()
    assert sum(a.startswith("refused") for a in answers) == 3
    assert [a for a in answers if not a.startswith("refused")] == ["done t1"] * 5


async def test_concurrent_workflows_keep_their_guards_apart(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-30: two workflows bound to tA and tB, running at once, each get 4 passes and 0
    refusals."""

    def flow(tenant: str) -> TenantFlow:
        return TenantFlow(
            workflow("alice", tenant),
            tenant,
            submits(*(lambda f: Work(f, Claim(tenant)) for _ in range(4))),
        )

    a, b = dispatcher.submit(flow("tA")), dispatcher.submit(flow("tB"))
    assert await a.result() == ["done tA"] * 4
    assert await b.result() == ["done tB"] * 4


# --- the internal door for guards ---------------------------------------------------------------------


class TenantCheck(ContentGuardrail, TenantScoped):
    """A content guard that carries its own tenant claim."""

    def __init__(self, parent: Identifiable, tenant_id: str, runs: list[str]) -> None:
        super().__init__(parent)
        self.tenant_id = tenant_id
        self.runs = runs

    async def validate(self, target: Any) -> None:
        self.runs.append(self.tenant_id)


class GuardedWork(Work):
    def __init__(self, parent: Identifiable, input: Any, guard: Callable[[Work], Any]) -> None:
        super().__init__(parent, input)
        self.guard = guard

    def content_guardrails(self) -> list[ContentGuardrail]:
        return [self.guard(self)]


async def test_a_scoped_guard_is_judged_against_the_flow_that_gates_the_tool(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-32, EXEC-13: a guard claiming t9 on a tool under a t1 flow is refused at the internal
    door: the tool fails with a system error caused by the GuardrailError, the guard never runs
    and the tool never executes; a guard claiming t1 runs."""
    runs: list[str] = []
    tools: list[Work] = []

    def tool(tenant: str) -> Callable[[Flow], Work]:
        def make(flow: Flow) -> Work:
            tools.append(GuardedWork(flow, Claim("t1"), lambda w: TenantCheck(w, tenant, runs)))
            return tools[-1]

        return make

    async def script(flow: Flow, context: JobContext) -> list[BaseException | str]:
        out: list[BaseException | str] = []
        for make in (tool("t9"), tool("t1")):
            try:
                out.append(await flow.submit(make(flow)).result())
            except NucleoSystemError as error:
                out.append(error)
        return out

    drifted, passed = await dispatcher.submit(TenantFlow(root(), "t1", script)).result()
    assert isinstance(drifted, NucleoSystemError)
    assert isinstance(drifted.__cause__, GuardrailError) and "t9" in str(drifted.__cause__)
    assert drifted.component == "guardrail"
    assert passed == "done t1"
    assert runs == ["t1"]
    assert [t.runs for t in tools] == [0, 1]


class Judge(Work):
    """What an authority guard spawns to help it judge."""


class PanelCheck(ContentGuardrail, ScopeAuthority):
    """A guard that is itself a ScopeAuthority: it asks a judge job for its verdict."""

    def __init__(self, parent: Identifiable, claim: str, seen: dict[str, Any]) -> None:
        super().__init__(parent)
        self.claim = claim
        self.seen = seen

    async def validate(self, target: Any) -> None:
        judge = Judge(self, Claim(self.claim))
        verdict = await outcome(self.context.submit(judge))
        self.seen[self.claim] = (self.scope_guard, verdict, judge.context.scope_guard)


async def test_an_authority_guard_is_sealed_with_the_flow_and_its_children_inherit(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-32: a guard that declares ScopeAuthority is sealed with the gated flow's binding, and a
    judge it submits inherits it: a t9 judge is refused, a t1 judge runs."""
    seen: dict[str, Any] = {}
    flow = TenantFlow(
        root(),
        "t1",
        submits(
            lambda f: GuardedWork(f, "a", lambda w: PanelCheck(w, "t9", seen)),
            lambda f: GuardedWork(f, "b", lambda w: PanelCheck(w, "t1", seen)),
        ),
    )
    assert await dispatcher.submit(flow).result() == ["done a", "done b"]
    bound = ScopeGuard(TenantScope("t1"))
    sealed_a, verdict_a, judge_a = seen["t9"]
    sealed_b, verdict_b, judge_b = seen["t1"]
    assert sealed_a == sealed_b == bound
    assert judge_a is None  # refused at the door, never captured
    assert verdict_a.startswith("refused") and "t9" in verdict_a
    assert verdict_b == "done t1"
    assert judge_b == bound


class PartialTarget(Work):
    """Points its content guards at one field of its input."""

    def guarded_input_target(self) -> Any:
        return self.input.text


async def test_narrowing_the_guarded_target_does_not_hide_the_inputs_claim(
    dispatcher: JobDispatcher,
) -> None:
    """SUB-06: a job whose guarded input target is part of its input still has the input's own
    claim judged at the door."""
    flow = TenantFlow(root(), "t1", submits(lambda f: PartialTarget(f, Claim("t9", "hello"))))
    (answer,) = await dispatcher.submit(flow).result()
    assert answer.startswith("refused") and "t9" in answer
