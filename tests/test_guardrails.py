"""Guardrails: the four kinds, what a guard records, and the dispatcher's enforcement (GRD,
EXEC-11..13)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.admission import CountingGate
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, open_dispatcher
from nucleo_trio.errors import GuardrailError, NucleoSystemError, RateLimitRetry
from nucleo_trio.guardrails import (
    FAIL,
    GUARDRAIL_TIMEOUT,
    OBS_GATES_JOB_ID,
    OBS_GATES_PHASE,
    OBS_GUARDS_INPUT,
    OBS_GUARDS_OUTPUT,
    OBS_GUARDS_VALIDATION,
    OBS_INPUT,
    OBS_OUTPUT,
    PASS,
    AdmissionContext,
    AdmissionGuardrail,
    AuthGuardrail,
    CallerClassAllowListGuardrail,
    ContentGuardrail,
    Direction,
    GateRung,
    Guardrail,
    PrincipalAllowListGuardrail,
    Scope,
    ScopeGuard,
    TenantScope,
    TenantScoped,
    ValidationGuardrail,
    validate_answer,
)
from nucleo_trio.jobs import (
    AbstractJob,
    Doer,
    GuardedExecution,
    Identifiable,
    JobContext,
    JobRequirements,
    JobState,
    JobType,
    Orchestrator,
    ScopeAuthority,
    Tool,
    workflow,
)

from .conftest import Recorder, settle
from .db_doubles import RecordingProvider
from .jobs_for_tests import Echo

Make = Callable[[AbstractJob[Any]], Guardrail]


class Probe(ContentGuardrail):
    """A content guard that writes each run to a shared log, then does what it is told:
    ``refuse`` with a message, ``crash`` with an exception, or ``hang``."""

    def __init__(
        self,
        parent: Identifiable,
        log: list[Any],
        direction: Direction = Direction.INPUT,
        *,
        refuse: str | None = None,
        crash: BaseException | None = None,
        hang: bool = False,
        look: Callable[[], Any] | None = None,
        timeout: float | None = GUARDRAIL_TIMEOUT,
    ) -> None:
        super().__init__(parent, direction, timeout=timeout)
        self.log = log
        self.refuse = refuse
        self.crash = crash
        self.hang = hang
        self.look = look

    async def validate(self, target: Any) -> None:
        self.log.append((self.gate_rung_label(), target, self.look() if self.look else None))
        if self.hang:
            await trio.sleep_forever()
        if self.crash is not None:
            raise self.crash
        if self.refuse is not None:
            raise GuardrailError(self.refuse)


class Guarded(Tool[Any]):
    """A tool with an input, guards built by the factories it is given, and an optional gate."""

    def __init__(
        self,
        parent: Identifiable,
        input: Any = "x",
        *,
        content: Sequence[Make] = (),
        auth: Sequence[Make] = (),
        admission: Sequence[Make] = (),
        gate: CountingGate | None = None,
        body: Callable[[JobContext], Any] | None = None,
        requirements: Callable[[], JobRequirements] | None = None,
    ) -> None:
        super().__init__(parent)
        self.input = input
        self._content, self._auth, self._admission = content, auth, admission
        self.gate = gate
        self.body = body
        self._requirements = requirements
        self.timeout = 60.0
        self.runs = 0
        self.seen_in_use: int | None = None

    def requirements(self) -> JobRequirements:
        if self._requirements is not None:
            return self._requirements()
        if self.gate is not None:
            return JobRequirements().require_rate_limiter(self.gate)
        return JobRequirements()

    def content_guardrails(self) -> list[Guardrail]:
        return [make(self) for make in self._content]

    def auth_guardrails(self) -> list[Guardrail]:
        return [make(self) for make in self._auth]

    def admission_guardrails(self) -> list[Guardrail]:
        return [make(self) for make in self._admission]

    async def execute(self, context: JobContext) -> Any:
        self.runs += 1
        if self.gate is not None:
            self.seen_in_use = self.gate.in_use
        if self.body is not None:
            return await self.body(context)
        return f"ran:{context.metadata.get(OBS_GUARDS_INPUT)}:{self.input}"


class Caller(Doer[Any]):
    """A doer that submits the job its factory builds and returns the result."""

    def __init__(self, parent: Identifiable, make: Callable[[AbstractJob[Any]], Any]) -> None:
        super().__init__(parent)
        self.make = make
        self.child: Any = None

    async def execute(self, context: JobContext) -> Any:
        self.child = self.make(self)
        return await self.submit_in_step(self.child).result()


def wf() -> Identifiable:
    return workflow("alice", "wf")


# --- the four kinds --------------------------------------------------------------------------------


def test_the_hierarchy_is_sealed_to_the_four_kinds() -> None:
    """GRD-01: Guardrail admits exactly four kinds; none of them is sealed; a guard of two kinds
    and a scope are not guardrails."""
    kinds = {ContentGuardrail, AuthGuardrail, AdmissionGuardrail, ValidationGuardrail}
    assert all(issubclass(kind, Guardrail) and Guardrail in kind.__bases__ for kind in kinds)
    with pytest.raises(TypeError, match="sealed to four kinds"):

        class Rogue(Guardrail):  # noqa: F841 - the definition is what is refused
            @property
            def rung(self) -> GateRung:
                return GateRung.AUTH

            async def validate(self, target: Any) -> None:
                return None

    for kind in kinds:  # none of the four is sealed: each takes subclasses of its own

        class Mine(kind):  # type: ignore[valid-type, misc]
            async def validate(self, target: Any) -> None:
                return None

            async def authorize(self, principal: str | None) -> None:
                return None

            async def check_admission(self, context: AdmissionContext | None) -> None:
                return None

        assert issubclass(Mine, kind)
    with pytest.raises(TypeError, match="several guardrail kinds"):

        class Both(ContentGuardrail, ValidationGuardrail):  # noqa: F841
            pass

    assert not issubclass(Scope, Guardrail)


def test_each_kind_labels_its_rung() -> None:
    """GRD-02: each base labels its rung: CONTENT_INPUT/OUTPUT by direction, AUTH, ADMISSION,
    VALIDATION."""
    root = wf()
    assert Probe(root, []).gate_rung_label() == "CONTENT_INPUT"
    assert Probe(root, [], Direction.OUTPUT).gate_rung_label() == "CONTENT_OUTPUT"
    assert PrincipalAllowListGuardrail(root, ["a"]).gate_rung_label() == "AUTH"
    assert CallerClassAllowListGuardrail(root, ["a.B"]).gate_rung_label() == "ADMISSION"
    assert AnswerCheck(root, []).gate_rung_label() == "VALIDATION"
    assert {rung.value for rung in GateRung} == {
        "CONTENT_INPUT",
        "CONTENT_OUTPUT",
        "AUTH",
        "ADMISSION",
        "VALIDATION",
    }
    with pytest.raises(ValueError, match="direction must be"):
        Probe(root, [], "sideways")  # type: ignore[arg-type]


def test_execute_is_final() -> None:
    """GRD-03: a guard that replaces execute (or the scope-guard seal) is refused at definition."""
    with pytest.raises(TypeError, match="execute, which is final"):

        class Sneaky(ContentGuardrail):  # noqa: F841
            async def execute(self, context: JobContext) -> None:
                return None

            async def validate(self, target: Any) -> None:
                return None

    with pytest.raises(TypeError, match="set_scope_guard, which is final"):

        class Authoring(ScopeAuthority, ContentGuardrail):  # noqa: F841 - the authority first
            async def validate(self, target: Any) -> None:
                return None


async def test_execute_validates_the_target_it_was_given(dispatcher: JobDispatcher) -> None:
    """GRD-03, GRD-07: run directly, a guard validates the target it was set and returns None;
    outside enforcement it has no gated snapshot and no principal."""
    log: list[Any] = []
    guard = Probe(wf(), log)
    guard.set_target({"q": 1})
    assert guard.gated_snapshot is None and guard.principal is None
    assert await dispatcher.submit(guard).result() is None
    assert log == [("CONTENT_INPUT", {"q": 1}, None)]
    assert guard.context.metadata[OBS_OUTPUT] == PASS
    assert guard.context.metadata[OBS_GATES_JOB_ID] is None


def test_a_guard_is_a_read_only_job_with_a_ten_second_timeout() -> None:
    """GRD-04: type GUARDRAIL, a read-only requirement with nothing to admit, 10 s unless the
    constructor sets another."""
    guard = Probe(wf(), [])
    assert guard.job_type is JobType.GUARDRAIL
    assert guard.timeout == GUARDRAIL_TIMEOUT == 10.0
    requirements = guard.requirements()
    assert requirements.read_only and not requirements.has_resources
    assert Probe(wf(), [], timeout=120.0).timeout == 120.0
    with pytest.raises(ValueError, match="timeout must be positive"):
        Probe(wf(), [], timeout=0)


async def test_a_guard_records_its_target_the_gated_job_and_the_rung(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """GRD-05, GRD-07, GRD-36: before it runs a guard records obs.input (its target as JSON),
    obs.gates_job_id and obs.gates_phase, and after it obs.output PASS; under enforcement its
    principal is the gated user. Its events are on the bus like any job's."""
    guards: list[Probe] = []

    def make(job: AbstractJob[Any]) -> Guardrail:
        guards.append(Probe(job, []))
        return guards[-1]

    tool = Guarded(wf(), {"city": "Lyon"}, content=[make])
    await dispatcher.submit(tool).result()
    await settle()
    (guard,) = guards
    assert guard.principal == "alice"
    assert guard.gated_snapshot is not None and guard.gated_snapshot.job_id == tool.job_id
    assert guard.context.metadata[OBS_INPUT] == '{"city": "Lyon"}'
    assert guard.context.metadata[OBS_GATES_JOB_ID] == tool.job_id
    assert guard.context.metadata[OBS_GATES_PHASE] == "CONTENT_INPUT"
    assert guard.context.metadata[OBS_OUTPUT] == PASS
    assert recorder.names(guard.job_id) == ["JobScheduled", "JobStartedEvent", "JobCompletedEvent"]
    assert guard.parent_job_id == tool.job_id


async def test_a_refusing_guard_records_fail_on_its_own_run(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """GRD-05: a guard whose validate threw records obs.output FAIL on its own run."""
    guards: list[Probe] = []

    def make(job: AbstractJob[Any]) -> Guardrail:
        guards.append(Probe(job, [], refuse="no"))
        return guards[-1]

    with pytest.raises(GuardrailError):
        await dispatcher.submit(Guarded(wf(), content=[make])).result()
    await settle()
    (failed,) = [e for e in recorder.of(guards[0].job_id) if isinstance(e, ev.JobFailedEvent)]
    assert failed.metadata[OBS_OUTPUT] == FAIL


def test_a_guard_never_authors_a_scope_guard_but_accepts_the_doors_seal() -> None:
    """GRD-06: set_scope_guard always raises; scope_guard is None until the seal installs it."""
    guard = Probe(wf(), [])
    with pytest.raises(TypeError, match="never authors a scope guard"):
        guard.set_scope_guard(ScopeGuard(TenantScope("t1")))
    assert guard.scope_guard is None
    sealed = ScopeGuard(TenantScope("t1"))
    guard.seal_scope_guard(sealed)
    assert guard.scope_guard is sealed
    with pytest.raises(RuntimeError, match="already sealed"):
        guard.seal_scope_guard(ScopeGuard())


class Admits(AdmissionGuardrail):
    def __init__(self, parent: Identifiable, seen: list[AdmissionContext | None]) -> None:
        super().__init__(parent)
        self.seen = seen

    async def check_admission(self, context: AdmissionContext | None) -> None:
        self.seen.append(context)


async def test_an_admission_guard_judges_its_context_on_a_void_target(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-08, GRD-05: an admission guard's target type is None and validate delegates to
    check_admission with the principal, the caller class (None for a direct call) and the tool
    class; obs.input reads "<principal> via <caller> -> <Tool>"."""
    seen: list[AdmissionContext | None] = []
    guards: list[Admits] = []

    def make(job: AbstractJob[Any]) -> Guardrail:
        guards.append(Admits(job, seen))
        return guards[-1]

    assert Admits.target_type is None
    await dispatcher.submit(Guarded(wf(), 42, admission=[make])).result()
    await dispatcher.submit(Caller(wf(), lambda me: Guarded(me, admission=[make]))).result()
    direct, called = seen
    assert direct == AdmissionContext(principal="alice", caller_class=None, tool_class=Guarded)
    assert called is not None and called.caller_class == f"{__name__}.Caller"
    assert guards[0].context.metadata[OBS_INPUT] == "alice via a direct call -> Guarded"
    assert guards[1].context.metadata[OBS_INPUT] == f"alice via {__name__}.Caller -> Guarded"
    assert guards[0].context.metadata[OBS_GATES_PHASE] == "ADMISSION"
    outside = Admits(wf(), seen)
    await outside.validate(None)
    assert seen[-1] is None


def test_a_job_declares_no_guardrails_by_default() -> None:
    """GRD-09: every job is a GuardedExecution whose guard lists are empty and whose guarded
    input target is its input."""
    tool = Echo(wf())
    assert isinstance(tool, GuardedExecution)
    assert tool.content_guardrails() == ()
    assert tool.auth_guardrails() == ()
    assert tool.admission_guardrails() == ()
    assert tool.guarded_input_target() is None
    assert Guarded(wf(), {"q": 1}).guarded_input_target() == {"q": 1}


def test_a_refusal_is_correctable_and_speaks_to_the_model_as_a_guardrail_violation() -> None:
    """GRD-10: GuardrailError is correctable, its message is the raw text, the model reads
    "Guardrail violation: <text>", the explanation says it may be correctable, a cause is kept."""
    cause = ValueError("underlying")
    refusal = GuardrailError("too long", cause=cause)
    assert refusal.correctable
    assert str(refusal) == "too long"
    assert refusal.llm_message == "Guardrail violation: too long"
    assert "may be correctable" in refusal.explain_to_llm()
    assert refusal.__cause__ is cause


async def test_a_guard_applies_only_to_a_target_of_its_type(dispatcher: JobDispatcher) -> None:
    """GRD-11, GRD-15: a guard judges only a non-None target of its target type; the others are
    not applied and not counted."""

    class TextOnly(Probe):
        target_type = str

    log: list[Any] = []
    for value, applied in (("text", 1), (7, 0), (None, 0)):
        tool = Guarded(wf(), value, content=[lambda job: TextOnly(job, log)])
        await dispatcher.submit(tool).result()
        assert tool.context.metadata[OBS_GUARDS_INPUT] == applied
    assert [entry[1] for entry in log] == ["text"]


# --- enforcement in the attempt ------------------------------------------------------------------


async def test_guards_stand_around_the_permit(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """EXEC-11, GRD-12: input guards run after the dependency completed and with no permit
    held (in_use 0); execute holds the permit (in_use 1); output guards run after the release
    (in_use 0)."""
    gate = CountingGate("api", 1)
    log: list[Any] = []
    dependency = Echo(wf(), "dep", sleep=1.0)
    dep_handle = dispatcher.submit(dependency)

    def state() -> tuple[str, int]:
        return dependency.context.state.value, gate.in_use

    tool = Guarded(
        wf(),
        content=[
            lambda job: Probe(job, log, look=state),
            lambda job: Probe(job, log, Direction.OUTPUT, look=state),
        ],
        gate=gate,
    )
    assert await dispatcher.submit(tool, [dep_handle]).result() == "ran:1:x"
    assert log == [
        ("CONTENT_INPUT", "x", ("COMPLETED", 0)),
        ("CONTENT_OUTPUT", "ran:1:x", ("COMPLETED", 0)),
    ]
    assert tool.seen_in_use == 1
    assert tool.context.metadata[OBS_GUARDS_OUTPUT] == 1


async def test_output_guards_run_after_the_commit(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-12: for a transactional tool, output guards run after the commit and the close."""
    orders = RecordingProvider("orders")
    marks: list[Any] = []

    class Logs(Probe):
        async def validate(self, target: Any) -> None:
            orders.log.append(f"guard.{self.direction.value.lower()}")

    tool = Guarded(
        wf(),
        content=[
            lambda job: Logs(job, marks),
            lambda job: Logs(job, marks, Direction.OUTPUT),
        ],
        requirements=lambda: JobRequirements().require_database(orders).require_transaction(),
    )
    await dispatcher.submit(tool).result()
    assert orders.log == [
        "guard.input",
        "orders.acquire",
        "orders.begin",
        "orders.commit",
        "orders.await",
        "orders.close",
        "guard.output",
    ]


async def test_an_output_refusal_turns_the_success_into_a_failure(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """EXEC-12, GRD-16: an output refusal fails the job with the GuardrailError; the tool did
    execute but its result is withheld; the events are Scheduled, Started, Failed, Workflow."""
    log: list[Any] = []
    tool = Guarded(wf(), content=[lambda job: Probe(job, log, Direction.OUTPUT, refuse="leak")])
    handle = dispatcher.submit(tool)
    with pytest.raises(GuardrailError, match="leak"):
        await handle.result()
    await settle()
    assert tool.runs == 1
    assert handle.state is JobState.FAILED
    assert recorder.names(tool.job_id) == [
        "JobScheduled",
        "JobStartedEvent",
        "JobFailedEvent",
        "WorkflowCompleteEvent",
    ]


async def test_a_direct_submit_enforces_the_declared_input_guard(dispatcher: JobDispatcher) -> None:
    """GRD-16, GRD-36, EXEC-13: a direct submit runs the declared input guard; the refused tool
    never executes and its caller gets the plain GuardrailError (no cause), which a model reads
    as a correctable call result."""
    gate = CountingGate("api", 1)
    tool = Guarded(wf(), content=[lambda job: Probe(job, [], refuse="not this")], gate=gate)
    with pytest.raises(GuardrailError) as caught:
        await dispatcher.submit(tool).result()
    assert caught.value.__cause__ is None
    assert caught.value.correctable
    assert caught.value.llm_message == "Guardrail violation: not this"
    assert tool.runs == 0
    assert gate.in_use == 0


async def test_a_guard_that_throws_fails_the_job_closed_as_itself(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-13: a guard that crashes is not a refusal: the gated job fails with that exception
    as-is, no GuardrailError in the chain, and never executes; no permit is held (adversarial)."""
    gate = CountingGate("api", 1)
    crash = RuntimeError("guard bug")
    tool = Guarded(wf(), content=[lambda job: Probe(job, [], crash=crash)], gate=gate)
    handle = dispatcher.submit(tool)
    with pytest.raises(RuntimeError) as caught:
        await handle.result()
    assert caught.value is crash
    chain: list[BaseException] = []
    link: BaseException | None = caught.value
    while link is not None:
        chain.append(link)
        link = link.__cause__ or link.__context__
    assert not any(isinstance(e, GuardrailError) for e in chain)
    assert handle.state is JobState.FAILED
    assert tool.runs == 0
    assert gate.in_use == 0


async def test_a_guard_that_hangs_past_its_timeout_fails_the_job_closed(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-04, GRD-13: a guard that hangs is timed out at its 10 s (the grace is 1 s) and the
    gated job fails closed with that timeout; the tool never ran and holds no permit
    (adversarial)."""
    gate = CountingGate("api", 1)
    guards: list[Probe] = []

    def make(job: AbstractJob[Any]) -> Guardrail:
        guards.append(Probe(job, [], hang=True))
        return guards[-1]

    tool = Guarded(wf(), content=[make], gate=gate)
    start = trio.current_time()
    with pytest.raises(errors.JobTimeoutError):
        await dispatcher.submit(tool).result()
    assert trio.current_time() - start == pytest.approx(11.0)
    assert guards[0].context.state is JobState.TIMED_OUT
    assert tool.runs == 0
    assert gate.in_use == 0


async def test_cancelling_the_gated_job_cancels_its_guard(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """A cancel that lands while a guard runs cancels the guard and settles the gated job
    CANCELLED; the tool never executes."""
    guards: list[Probe] = []

    def make(job: AbstractJob[Any]) -> Guardrail:
        guards.append(Probe(job, [], hang=True))
        return guards[-1]

    tool = Guarded(wf(), content=[make])
    handle = dispatcher.submit(tool)
    await trio.sleep(1.0)
    assert handle.cancel("stop")
    with pytest.raises(errors.JobCancelledError):
        await handle.result()
    await settle()
    assert guards[0].context.state is JobState.CANCELLED
    assert tool.runs == 0


async def test_guards_run_once_per_submission_across_transparent_retries(
    dispatcher: JobDispatcher, autojump_clock: trio.testing.MockClock
) -> None:
    """GRD-14: a tool re-run once on a rate-limit signal gives one input-guard run and one
    output-guard run."""
    log: list[Any] = []
    calls = 0

    async def flaky(context: JobContext) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RateLimitRetry("slow down")
        return "done"

    tool = Guarded(
        wf(),
        content=[lambda job: Probe(job, log), lambda job: Probe(job, log, Direction.OUTPUT)],
        body=flaky,
    )
    assert await dispatcher.submit(tool).result() == "done"
    assert tool.context.attempt == 2
    assert [entry[0] for entry in log] == ["CONTENT_INPUT", "CONTENT_OUTPUT"]


async def test_zero_guards_is_an_audited_count(
    dispatcher: JobDispatcher, recorder: Recorder
) -> None:
    """GRD-15: a tool with no guards records 0 input and 0 output guards, so it answers
    "ran:0:x"; the counts travel on its terminal event."""
    tool = Guarded(wf())
    assert await dispatcher.submit(tool).result() == "ran:0:x"
    await settle()
    (done,) = [e for e in recorder.of(tool.job_id) if isinstance(e, ev.JobCompletedEvent)]
    assert done.metadata[OBS_GUARDS_INPUT] == 0
    assert done.metadata[OBS_GUARDS_OUTPUT] == 0


async def test_input_guards_run_admission_then_auth_then_content(dispatcher: JobDispatcher) -> None:
    """GRD-12: the input side runs admission, auth and input-content guards, in that order, and
    counts all three."""
    order: list[str] = []

    class A(AdmissionGuardrail):
        async def check_admission(self, context: AdmissionContext | None) -> None:
            order.append("admission")

    class U(AuthGuardrail):
        async def authorize(self, principal: str | None) -> None:
            order.append(f"auth:{principal}")

    class C(ContentGuardrail):
        async def validate(self, target: Any) -> None:
            order.append(f"content:{target}")

    tool = Guarded(wf(), content=[C], auth=[U], admission=[A])
    assert await dispatcher.submit(tool).result() == "ran:3:x"
    assert order == ["admission", "auth:alice", "content:x"]


async def test_a_wrong_kind_in_a_declaration_fails_the_job_closed(
    dispatcher: JobDispatcher,
) -> None:
    """A job that declares an auth guard among its content guards fails as a system error
    naming both, and never executes."""
    tool = Guarded(wf(), content=[lambda job: PrincipalAllowListGuardrail(job, ["alice"])])
    with pytest.raises(NucleoSystemError, match="PrincipalAllowListGuardrail among its content"):
        await dispatcher.submit(tool).result()
    assert tool.runs == 0


# --- the shipped allow-lists, enforced ------------------------------------------------------------


async def test_the_caller_class_allow_list_refuses_a_direct_call_and_admits_a_listed_doer(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-17: a direct call is refused "not available through a direct call"; a call from a
    listed doer class passes; without an admission context the guard is uncorrectable."""

    def allow(job: AbstractJob[Any]) -> Guardrail:
        return CallerClassAllowListGuardrail(job, [Caller])

    direct = Guarded(wf(), admission=[allow])
    with pytest.raises(GuardrailError, match="not available through a direct call"):
        await dispatcher.submit(direct).result()
    assert direct.runs == 0
    assert await dispatcher.submit(Caller(wf(), lambda me: Guarded(me, admission=[allow]))).result()

    class Other(Caller):
        pass

    with pytest.raises(GuardrailError, match=r"not available to .*Other"):
        await dispatcher.submit(Other(wf(), lambda me: Guarded(me, admission=[allow]))).result()
    with pytest.raises(errors.UncorrectableError, match="no admission context"):
        await allow(wf()).validate(None)


async def test_the_principal_allow_list_judges_the_workflow_principal(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-18: "test-user" is refused against {"alice"} naming the principal, the tool and the
    allowed set; "alice" passes; a missing principal is refused too."""

    def allow(job: AbstractJob[Any]) -> Guardrail:
        return PrincipalAllowListGuardrail(job, {"alice"})

    refused = Guarded(workflow("test-user", "wf"), auth=[allow])
    with pytest.raises(GuardrailError) as caught:
        await dispatcher.submit(refused).result()
    assert "test-user" in str(caught.value) and "Guarded" in str(caught.value)
    assert "[alice]" in str(caught.value)
    assert refused.runs == 0
    assert await dispatcher.submit(Guarded(wf(), auth=[allow])).result() == "ran:1:x"
    with pytest.raises(GuardrailError, match="No principal"):
        await allow(wf()).validate(None)


# --- configuration and plugins -------------------------------------------------------------------


class Fetch(Tool[str]):
    """A tool with no guards of its own; configuration attaches them."""

    def __init__(self, parent: Identifiable, input: Any) -> None:
        super().__init__(parent)
        self.input = input
        self.runs = 0

    async def execute(self, context: JobContext) -> str:
        self.runs += 1
        return f"fetched {self.input}"


class FetchHarder(Fetch):
    pass


FETCH = f"{__name__}.Fetch"


async def test_configuration_attaches_guards_to_a_tool_class_and_its_subclasses() -> None:
    """Guards attached by name in configuration hold for the class and its subclasses, on every
    submission, counted like declared ones."""
    config = DispatcherConfig.from_mapping(
        {
            "guardrails": {
                FETCH: [
                    {"kind": "payload_size_cap", "settings": {"max_chars": 12}},
                    {"kind": "pii_detection"},
                    {"kind": "exfiltration_marker", "settings": {"direction": "output"}},
                ]
            }
        }
    )
    async with open_dispatcher(config) as dispatcher:
        short = Fetch(wf(), "short")
        assert await dispatcher.submit(short).result() == "fetched short"
        assert short.context.metadata[OBS_GUARDS_INPUT] == 1
        assert short.context.metadata[OBS_GUARDS_OUTPUT] == 2
        long = FetchHarder(wf(), "far too long for the cap")
        with pytest.raises(GuardrailError, match="over the cap of 12"):
            await dispatcher.submit(long).result()
        assert long.runs == 0
        leaky = Fetch(wf(), "a@b.io")
        with pytest.raises(GuardrailError, match="email address"):
            await dispatcher.submit(leaky).result()
        assert leaky.runs == 1


@pytest.mark.parametrize(
    ("attachments", "message"),
    [
        ({FETCH: [{"kind": "nope"}]}, "unknown guardrail 'nope'"),
        ({FETCH: [{"kind": "payload_size_cap", "settings": {"max_chars": -1}}]}, "max_chars"),
        ({FETCH: [{"kind": "payload_size_cap", "settings": {"cap": 3}}]}, "cap"),
        ({"Fetch": [{"kind": "url"}]}, "fully qualified class name"),
    ],
)
async def test_a_bad_attachment_refuses_the_start_naming_it(
    attachments: dict[str, Any], message: str
) -> None:
    """A configuration that attaches an unknown guardrail, or one its settings cannot build, is
    a ConfigError at start naming the problem; nothing runs."""
    config = DispatcherConfig.from_mapping({"guardrails": attachments})
    with pytest.raises(errors.ConfigError, match=message):
        async with open_dispatcher(config):
            pytest.fail("the dispatcher started")  # pragma: no cover


async def test_a_config_typo_in_an_attachment_is_named() -> None:
    """An attachment with an unknown key is refused naming it."""
    with pytest.raises(errors.ConfigError, match="settngs"):
        DispatcherConfig.from_mapping({"guardrails": {FETCH: [{"kind": "url", "settngs": {}}]}})


# --- the validation seat's contract ---------------------------------------------------------------


class AnswerCheck(ValidationGuardrail):
    """Refuses any answer that is not "42"; logs each run."""

    def __init__(
        self, parent: Identifiable, log: list[Any], *, crash: BaseException | None = None
    ) -> None:
        super().__init__(parent)
        self.log = log
        self.crash = crash

    async def validate(self, target: Any) -> None:
        self.log.append(target)
        if self.crash is not None:
            raise self.crash
        if target != "42":
            raise GuardrailError(f"{target} is not the answer")


class ScopedCheck(AnswerCheck, TenantScoped):
    def __init__(self, parent: Identifiable, log: list[Any], tenant_id: str) -> None:
        super().__init__(parent, log)
        self.tenant_id = tenant_id


class Thinker(Orchestrator[Any], TenantScoped):
    """A stand-in for a goal-directed thinker's final-answer branch: each turn takes the next
    candidate from its script and puts it to the validation seat; a refusal is fed back as a
    correction and the candidate discarded."""

    def __init__(
        self,
        parent: Identifiable,
        answers: Sequence[str],
        guards: Sequence[Make],
        *,
        max_iterations: int = 3,
    ) -> None:
        super().__init__(parent)
        self.tenant_id = "t1"
        self.answers = answers
        self.guards = guards
        self.max_iterations = max_iterations
        self.turns = 0
        self.corrections: list[str] = []

    def validation_guardrails(self) -> list[Guardrail]:
        return [make(self) for make in self.guards]

    async def execute(self, context: JobContext) -> Any:
        for turn in range(self.max_iterations):
            self.turns += 1
            candidate = self.answers[min(turn, len(self.answers) - 1)]
            try:
                await validate_answer(context, candidate)
            except GuardrailError as refusal:
                self.corrections.append(refusal.llm_message)
                continue
            return candidate
        return None


async def test_a_validation_refusal_is_fed_back_and_the_corrected_answer_delivered(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-33: the first candidate is refused and fed back as a correction; the second is
    delivered after 2 turns and 2 guard runs, with obs.guards_validation 1."""
    log: list[Any] = []
    thinker = Thinker(wf(), ["41", "42"], [lambda job: AnswerCheck(job, log)])
    assert await dispatcher.submit(thinker).result() == "42"
    assert thinker.turns == 2
    assert log == ["41", "42"]
    assert thinker.corrections == ["Guardrail violation: 41 is not the answer"]
    assert thinker.context.metadata[OBS_GUARDS_VALIDATION] == 1


async def test_validation_refusals_exhaust_the_iteration_budget_to_none(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-33: refused every time with a budget of 3 iterations, the answer is None after 3
    turns; the caller never sees a refusal."""
    log: list[Any] = []
    thinker = Thinker(wf(), ["0"], [lambda job: AnswerCheck(job, log)], max_iterations=3)
    assert await dispatcher.submit(thinker).result() is None
    assert thinker.turns == 3 and len(log) == 3


async def test_a_crashing_validation_guard_fails_the_producer_closed(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-33: a crashing validation guard is no verdict: the thinker fails with a system error
    carrying the crash, after 1 turn and no correction."""
    crash = RuntimeError("validator bug")
    thinker = Thinker(wf(), ["42"], [lambda job: AnswerCheck(job, [], crash=crash)])
    with pytest.raises(NucleoSystemError) as caught:
        await dispatcher.submit(thinker).result()
    assert caught.value.__cause__ is crash
    assert thinker.turns == 1 and thinker.corrections == []


async def test_a_drifting_scoped_validation_guard_is_a_code_error_not_a_verdict(
    dispatcher: JobDispatcher,
) -> None:
    """GRD-33, GRD-32: a validation guard claiming another tenant is refused at the internal
    door: the thinker fails with a system error caused by the GuardrailError, the guard ran 0
    times, there was 1 turn."""
    log: list[Any] = []
    thinker = Thinker(wf(), ["42"], [lambda job: ScopedCheck(job, log, "t9")])
    with pytest.raises(NucleoSystemError) as caught:
        await dispatcher.submit(thinker).result()
    assert isinstance(caught.value.__cause__, GuardrailError)
    assert "t9" in str(caught.value.__cause__)
    assert log == [] and thinker.turns == 1
    same = Thinker(wf(), ["42"], [lambda job: ScopedCheck(job, log, "t1")])
    assert await dispatcher.submit(same).result() == "42"
    assert log == ["42"]


def test_the_guardrails_package_exports_what_it_names() -> None:
    """Every name in nucleo_trio.guardrails.__all__ resolves, once each."""
    import nucleo_trio.guardrails as package

    assert len(package.__all__) == len(set(package.__all__))
    assert [name for name in package.__all__ if not hasattr(package, name)] == []
