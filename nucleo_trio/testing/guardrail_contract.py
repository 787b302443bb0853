"""The guardrail contract as a base test class: what the dispatcher relies on to enforce a guard.

A guard you write (in a program, or registered by a plugin) subclasses
:class:`GuardrailContract` in a test module: say how to build the guard gating a job, and give
samples it lets through and samples it refuses; pytest collects every check for that guard::

    from nucleo_trio.testing import GuardrailContract
    from my_guards import NoProfanity


    class TestNoProfanity(GuardrailContract):
        def make_guardrail(self, parent):
            return NoProfanity(parent)

        def passing_samples(self):
            return ["a polite reply"]

        def refused_samples(self):
            return ["a reply that swears"]

A sample is what the guard's kind judges: a target for a content guard (its input or its
result, by the guard's direction) and for a validation guard (a candidate answer), a principal
(a user id) for an auth guard, an :class:`~nucleo_trio.guardrails.AdmissionContext` for an
admission guard. Samples compare by value (``==``) and survive :func:`copy.deepcopy`: that is
how the checks see that a guard left them as they were. A guard that can fail to judge (a
service it asks is down) gives such samples too, with
:meth:`~GuardrailContract.unjudgeable_samples`, and is held to failing closed on them.

The checks judge each sample twice: by calling the kind's method directly (``validate``,
``authorize``, ``check_admission``), and under a real dispatcher's enforcement, where a tool of
the contract's (:attr:`~GuardrailContract.gated_tool`) declares a fresh guard and is submitted
with the sample as its input, its result, its candidate answer, its user, or its caller. For an
admission sample the contract submits the tool from a caller whose class has the sample's
``caller_class`` as its qualified name (``None``: a direct call), in a workflow of the sample's
principal; write its ``tool_class`` as :attr:`~GuardrailContract.gated_tool`. A sample whose
principal is ``None`` is judged only directly: every workflow has a user.

Like :class:`~nucleo_trio.testing.AccountContract`, the checks are plain synchronous methods
that raise :class:`AssertionError`, each in a ``trio.run`` of its own, so they need no pytest.
A guard may wait on a thread or a socket, which a virtual clock would jump over (and its
timeout with it), so these runs keep the real clock, and each gives up after
:attr:`~GuardrailContract.time_limit` seconds instead of hanging on a guard that never answers.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, ClassVar

import attrs
import trio

from ..dispatch import open_dispatcher
from ..errors import GuardrailError, NucleoSystemError
from ..errors._groups import leaves
from ..guardrails import (
    FAIL,
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
    ContentGuardrail,
    Direction,
    GateRung,
    Guardrail,
    ValidationGuardrail,
    validate_answer,
)
from ..jobs import AbstractJob, Doer, Identifiable, JobContext, JobType, Tool, workflow

__all__ = ["GuardrailContract"]

_KINDS = (ContentGuardrail, AuthGuardrail, AdmissionGuardrail, ValidationGuardrail)
_RUNG = {
    AuthGuardrail: GateRung.AUTH,
    AdmissionGuardrail: GateRung.ADMISSION,
    ValidationGuardrail: GateRung.VALIDATION,
}
_HOOK = {
    ContentGuardrail: "validate",
    AuthGuardrail: "authorize",
    AdmissionGuardrail: "check_admission",
    ValidationGuardrail: "validate",
}
_USER = "contract-user"


class _GatedTool(Tool[Any]):
    """The tool the contract's enforced checks gate: it declares the guard under test (built
    once, with the tool as its parent) under the guard's kind, takes the sample as its input,
    its result or its candidate answer, and counts its runs."""

    def __init__(
        self,
        parent: Identifiable,
        make_guard: Callable[[AbstractJob[Any]], Guardrail],
        *,
        input: Any = None,
        result: Any = "done",
        candidate: Any = None,
    ) -> None:
        super().__init__(parent)
        self.input = input
        self.result = result
        self.candidate = candidate
        self.runs = 0
        self.validation_error: Exception | None = None
        self._make_guard = make_guard
        self.guard: Guardrail | None = None

    def _declared(self, kind: type) -> list[Any]:
        if self.guard is None:
            self.guard = self._make_guard(self)
        return [self.guard] if isinstance(self.guard, kind) else []

    def content_guardrails(self) -> list[ContentGuardrail]:
        return self._declared(ContentGuardrail)

    def auth_guardrails(self) -> list[AuthGuardrail]:
        return self._declared(AuthGuardrail)

    def admission_guardrails(self) -> list[AdmissionGuardrail]:
        return self._declared(AdmissionGuardrail)

    def validation_guardrails(self) -> list[ValidationGuardrail]:
        return self._declared(ValidationGuardrail)

    async def execute(self, context: JobContext) -> Any:
        self.runs += 1
        if self.validation_guardrails():
            try:
                await validate_answer(context, self.candidate)
            except Exception as exc:  # what the validation seat answered is the check's to judge
                self.validation_error = exc
        return self.result


class _Caller(Doer[None]):
    """Submits the gated tool from inside a job, so the call has a caller class (a subclass
    named after the sample's ``caller_class``), and keeps what the tool's handle answered."""

    def __init__(self, parent: Identifiable, build: Callable[[Identifiable], _GatedTool]) -> None:
        super().__init__(parent)
        self._build = build
        self.tool: _GatedTool | None = None
        self.outcome: _Outcome | None = None

    async def execute(self, context: JobContext) -> None:
        self.tool = self._build(self)
        self.outcome = await _outcome_of(self.submit_in_step(self.tool).result())


@functools.cache
def _caller_class(qualified: str) -> type[_Caller]:
    """A caller class whose ``module.qualname`` is ``qualified``, as the dispatcher names it."""
    module, _, qualname = qualified.rpartition(".")
    return type(
        qualname.rpartition(".")[2],
        (_Caller,),
        {"__module__": module, "__qualname__": qualname},
    )


@attrs.frozen
class _Outcome:
    """What awaiting a handle gave: a value, or the exception it raised."""

    value: Any = None
    error: Exception | None = None


async def _outcome_of(answer: Awaitable[Any]) -> _Outcome:
    try:
        return _Outcome(value=await answer)
    except Exception as exc:  # the check compares what the handle raised with the contract
        return _Outcome(error=exc)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the members of any group among them."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(leaves(current))
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def _in_trio(
    check: Callable[[GuardrailContract], Awaitable[None]],
) -> Callable[[GuardrailContract], None]:
    """Run an async check in a ``trio.run`` of its own on the real clock, within
    :attr:`GuardrailContract.time_limit`."""

    def run(self: GuardrailContract) -> None:
        async def body() -> None:
            try:
                with trio.fail_after(self.time_limit):
                    await check(self)
            except trio.TooSlowError:
                raise AssertionError(
                    f"{check.__name__} did not finish within {self.time_limit} s: the guard "
                    "never answered"
                ) from None

        trio.run(body)

    functools.update_wrapper(run, check)
    # pytest reads a test's arguments through __wrapped__, and would take the async original
    # for a trio test of its own.
    del run.__wrapped__  # type: ignore[attr-defined]
    return run


class GuardrailContract:
    """The guardrail contract as a base test class; see the module docstring.

    Subclasses implement :meth:`make_guardrail`, :meth:`passing_samples` and
    :meth:`refused_samples`, and may override :meth:`unjudgeable_samples` and set
    :attr:`time_limit`.
    """

    gated_tool: ClassVar[type[Tool[Any]]] = _GatedTool
    """The class of the tool the enforced checks gate: the ``tool_class`` an admission
    sample names."""

    time_limit: ClassVar[float] = 30.0
    """Seconds one check may take before it fails as hung."""

    # -- what a subclass provides ----------------------------------------------------------------
    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        """A fresh guard gating ``parent``, built with it as its parent the way a job's
        declaration (``content_guardrails()`` and the others) builds one."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_guardrail(parent) to return a fresh "
            "guard gating parent"
        )

    def passing_samples(self) -> Sequence[Any]:
        """What the guard lets through: targets (content, validation), principals (auth) or
        admission contexts (admission). At least one."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement passing_samples() to give what the guard "
            "lets through"
        )

    def refused_samples(self) -> Sequence[Any]:
        """What the guard refuses, in the same terms as :meth:`passing_samples`. At least
        one."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement refused_samples() to give what the guard refuses"
        )

    def unjudgeable_samples(self) -> Sequence[Any]:
        """What the guard cannot render a verdict on (the service it asks fails, say), in the
        same terms; empty (the default) for a guard that always can."""
        return ()

    # -- helpers -----------------------------------------------------------------------------------
    def _fresh(self, parent: AbstractJob[Any] | None = None) -> Guardrail:
        parent = parent or _GatedTool(workflow(_USER, "contract"), self.make_guardrail)
        guard = self.make_guardrail(parent)
        assert isinstance(guard, Guardrail), (
            f"make_guardrail() returned a {type(guard).__name__}, which is not a Guardrail"
        )
        return guard

    @staticmethod
    def _kind(guard: Guardrail) -> type[Guardrail]:
        kinds = [kind for kind in _KINDS if isinstance(guard, kind)]
        assert len(kinds) == 1, f"{guard!r} is of {len(kinds)} guardrail kinds"
        return kinds[0]

    async def _judge(self, sample: Any) -> Any:
        """The kind's method of a fresh guard, called directly on ``sample``."""
        guard = self._fresh()
        hook = getattr(guard, _HOOK[self._kind(guard)])
        return await hook(sample)

    def _samples(self, which: str) -> list[Any]:
        return list(getattr(self, which)())

    def _on_input_side(self, guard: Guardrail) -> bool:
        """Whether a refusal keeps the tool from running."""
        if isinstance(guard, ContentGuardrail):
            return guard.direction is Direction.INPUT
        return not isinstance(guard, ValidationGuardrail)

    async def _enforce(self, sample: Any) -> tuple[_GatedTool, _Outcome]:
        """Submit the gated tool with ``sample`` where the guard's kind judges it, through a
        real dispatcher; answer the tool and what its gated run gave."""
        probe = self._fresh()
        make = self.make_guardrail
        async with open_dispatcher() as dispatcher:
            if isinstance(probe, AuthGuardrail):
                tool = _GatedTool(workflow(sample, "contract"), make)
                return tool, await _outcome_of(dispatcher.submit(tool).result())
            if isinstance(probe, AdmissionGuardrail):
                return await self._admit(dispatcher.submit, sample)
            if isinstance(probe, ValidationGuardrail):
                tool = _GatedTool(workflow(_USER, "contract"), make, candidate=sample)
                await dispatcher.submit(tool).result()
                return tool, _Outcome(value=sample, error=tool.validation_error)
            assert isinstance(probe, ContentGuardrail)
            root = workflow(_USER, "contract")
            if probe.direction is Direction.INPUT:
                tool = _GatedTool(root, make, input=sample)
            else:
                tool = _GatedTool(root, make, result=sample)
            return tool, await _outcome_of(dispatcher.submit(tool).result())

    async def _admit(
        self, submit: Callable[[Any], Any], sample: AdmissionContext
    ) -> tuple[_GatedTool, _Outcome]:
        assert sample.tool_class is self.gated_tool, (
            f"the admission sample {sample} names the tool class {sample.tool_class!r}: name "
            "GuardrailContract.gated_tool, the tool the enforced checks gate"
        )
        root = workflow(sample.principal or _USER, "contract")

        def build(parent: Identifiable) -> _GatedTool:
            return _GatedTool(parent, self.make_guardrail)

        if sample.caller_class is None:
            tool = build(root)
            return tool, await _outcome_of(submit(tool).result())
        assert "." in sample.caller_class, (
            f"caller_class {sample.caller_class!r} is not a qualified class name (module.Class)"
        )
        caller = _caller_class(sample.caller_class)(root, build)
        await submit(caller).result()
        assert caller.tool is not None and caller.outcome is not None
        return caller.tool, caller.outcome

    def _enforceable(self, sample: Any) -> bool:
        """Whether a dispatcher can reproduce ``sample``: a principal every workflow can have."""
        if isinstance(sample, AdmissionContext):
            return sample.principal is not None
        guard = self._fresh()
        return not isinstance(guard, AuthGuardrail) or sample is not None

    # -- the checks --------------------------------------------------------------------------------
    def test_it_is_a_read_only_guard_of_one_kind(self) -> None:
        """A guard of exactly one of the four kinds, gating the parent it was built with: a
        ``GUARDRAIL`` job, read-only and writing nothing, with a timeout that is ``None`` or a
        positive number of seconds, on the rung its kind (and a content guard's direction)
        names. Auth and admission guards judge no target (``target_type`` ``None``); content
        and validation guards judge a class of target."""
        # Holds GRD-01, GRD-02, GRD-04, GRD-08, GRD-11.
        parent = _GatedTool(workflow(_USER, "contract"), self.make_guardrail)
        guard = self._fresh(parent)
        kind = self._kind(guard)
        assert guard.parent_job_id == parent.job_id, "the guard does not gate its parent"
        assert guard.job_type is JobType.GUARDRAIL, f"the guard's job type is {guard.job_type}"
        requirements = guard.requirements()
        assert requirements.read_only, "the guard's requirements are not read-only"
        assert not requirements.requires_transaction, "the guard asks for a transaction"
        timeout = guard.timeout
        assert timeout is None or (
            isinstance(timeout, float) and timeout > 0 and math.isfinite(timeout)
        ), f"the guard's timeout is {timeout!r}"
        if isinstance(guard, ContentGuardrail):
            expected = (
                GateRung.CONTENT_INPUT
                if guard.direction is Direction.INPUT
                else GateRung.CONTENT_OUTPUT
            )
        else:
            expected = _RUNG[kind]
        assert guard.rung is expected, f"a {kind.__name__} stands on the rung {guard.rung}"
        assert guard.gate_rung_label() == expected.value, "gate_rung_label() names another rung"
        target_type = guard.target_type
        if kind in (AuthGuardrail, AdmissionGuardrail):
            assert target_type is None, f"a {kind.__name__} judges targets of {target_type!r}"
        else:
            classes = target_type if isinstance(target_type, tuple) else (target_type,)
            assert classes and all(isinstance(cls, type) for cls in classes), (
                f"target_type {target_type!r} is not a class or a tuple of classes: the "
                "dispatcher would never give the guard a target"
            )

    def test_it_judges_in_a_coroutine(self) -> None:
        """``validate`` and the kind's method are ``async``: the dispatcher awaits them, and a
        plain method's answer cannot be awaited."""
        # Holds GRD-03.
        guard = self._fresh()
        for name in {"validate", _HOOK[self._kind(guard)]}:
            assert inspect.iscoroutinefunction(getattr(guard, name)), (
                f"{type(guard).__name__}.{name} is not a coroutine function (async def)"
            )

    def test_its_samples_are_what_its_kind_judges(self) -> None:
        """At least one passing and one refused sample, each of what the kind judges: an
        instance of the guard's ``target_type`` (a target the dispatcher would give it), a
        principal (a user id or ``None``), or an ``AdmissionContext``."""
        # Holds GRD-08, GRD-11.
        guard = self._fresh()
        for which in ("passing_samples", "refused_samples"):
            assert self._samples(which), f"{which}() gave no sample"
        every = [
            *self._samples("passing_samples"),
            *self._samples("refused_samples"),
            *self._samples("unjudgeable_samples"),
        ]
        for sample in every:
            if isinstance(guard, AuthGuardrail):
                assert sample is None or isinstance(sample, str), f"{sample!r} is no principal"
            elif isinstance(guard, AdmissionGuardrail):
                assert isinstance(sample, AdmissionContext), f"{sample!r} is no AdmissionContext"
            else:
                target_type = guard.target_type
                assert target_type is not None
                assert sample is not None and isinstance(sample, target_type), (
                    f"{sample!r} is not a {target_type!r}: the dispatcher never gives it to "
                    "the guard"
                )
            assert copy.deepcopy(sample) == sample, (
                f"{sample!r} is not equal to its copy: samples compare by value"
            )

    @_in_trio
    async def test_it_lets_each_passing_sample_through(self) -> None:
        """Called directly, the kind's method returns ``None`` for each passing sample: a
        verdict is returning or raising, never a value (the dispatcher ignores one)."""
        # Holds GRD-03.
        for sample in self._samples("passing_samples"):
            try:
                answer = await self._judge(sample)
            except Exception as exc:
                raise AssertionError(
                    f"the guard raised {type(exc).__name__}: {exc} on the passing sample {sample!r}"
                ) from exc
            assert answer is None, (
                f"the guard answered {answer!r} for {sample!r}: it lets a sample through by "
                "returning None"
            )

    @_in_trio
    async def test_it_refuses_each_refused_sample_with_a_guardrail_error(self) -> None:
        """Called directly, the kind's method raises ``GuardrailError`` with a message for each
        refused sample. Returning, even ``False``, lets the sample through; any other
        exception is a crash, which fails the gated job instead of refusing it."""
        # Holds GRD-10, GRD-13.
        for sample in self._samples("refused_samples"):
            try:
                answer = await self._judge(sample)
            except GuardrailError as refusal:
                assert str(refusal).strip(), f"the refusal of {sample!r} has no message"
            except Exception as exc:
                raise AssertionError(
                    f"the guard raised {type(exc).__name__}: {exc} on {sample!r}, not a "
                    "GuardrailError: the dispatcher takes it for a crash, not a refusal"
                ) from exc
            else:
                raise AssertionError(
                    f"the guard answered {answer!r} for the refused sample {sample!r} instead of "
                    "raising GuardrailError: the dispatcher would let it through"
                )

    @_in_trio
    async def test_it_leaves_what_it_judges_as_it_was(self) -> None:
        """Judging a sample, directly or under enforcement, changes nothing of it: every
        sample equals its copy afterwards, and so do the gated tool's input and result."""
        # Holds GRD-04 (a read-only job, for what it is handed too).
        samples = [
            *self._samples("passing_samples"),
            *self._samples("refused_samples"),
            *self._samples("unjudgeable_samples"),
        ]
        for sample in samples:
            before = copy.deepcopy(sample)
            try:
                await self._judge(sample)
            except Exception:  # the verdict is the other checks' to judge
                pass
            assert sample == before, f"judging it changed the sample {before!r} to {sample!r}"
        for sample in self._samples("passing_samples"):
            if not self._enforceable(sample):
                continue
            before = copy.deepcopy(sample)
            tool, outcome = await self._enforce(sample)
            assert sample == before, f"enforcement changed the sample {before!r} to {sample!r}"
            if tool.input is not None:
                assert tool.input == before, f"the tool's input became {tool.input!r}"
            if outcome.error is None and tool.result is not None and tool.result is sample:
                assert outcome.value == before, f"the tool's result became {outcome.value!r}"

    @_in_trio
    async def test_under_enforcement_it_lets_through_and_refuses(self) -> None:
        """Declared by a tool and run by a real dispatcher, the guard is applied once and lets
        each passing sample through (the tool runs and its result is delivered), and refuses
        each refused one with ``GuardrailError``: on the input side the tool never runs; an
        output guard withholds the result of a tool that ran; a validation guard's refusal
        reaches the thinker's seat."""
        # Holds GRD-12, GRD-15, GRD-16, GRD-33.
        guard = self._fresh()
        count = (
            OBS_GUARDS_VALIDATION
            if isinstance(guard, ValidationGuardrail)
            else OBS_GUARDS_OUTPUT
            if isinstance(guard, ContentGuardrail) and guard.direction is Direction.OUTPUT
            else OBS_GUARDS_INPUT
        )
        for refused, which in ((False, "passing_samples"), (True, "refused_samples")):
            for sample in self._samples(which):
                if not self._enforceable(sample):
                    continue
                tool, outcome = await self._enforce(sample)
                applied = tool.context.metadata.get(count)
                assert applied == 1, f"the guard was applied {applied} times to {sample!r}"
                if not refused:
                    assert outcome.error is None, (
                        f"under enforcement {sample!r} failed with "
                        f"{type(outcome.error).__name__}: {outcome.error}"
                    )
                    assert tool.runs == 1, f"the tool ran {tool.runs} times for {sample!r}"
                    continue
                assert isinstance(outcome.error, GuardrailError), (
                    f"under enforcement {sample!r} gave {outcome.error or outcome.value!r}, not "
                    "a GuardrailError"
                )
                if self._on_input_side(guard):
                    assert tool.runs == 0, f"the tool ran though {sample!r} was refused"

    @_in_trio
    async def test_under_enforcement_its_run_is_recorded(self) -> None:
        """The guard records its run on its own context: its target (``obs.input``), the job
        it gates (``obs.gates_job_id``), its rung (``obs.gates_phase``) and its verdict
        (``obs.output``: ``PASS``, or ``FAIL`` for a refusal)."""
        # Holds GRD-05.
        for verdict, which in ((PASS, "passing_samples"), (FAIL, "refused_samples")):
            sample = next((s for s in self._samples(which) if self._enforceable(s)), None)
            if sample is None:
                continue
            tool, _ = await self._enforce(sample)
            guard = tool.guard
            assert guard is not None, "the tool did not declare the guard"
            metadata = guard.context.metadata
            assert isinstance(metadata.get(OBS_INPUT), str), "the guard recorded no obs.input"
            assert metadata.get(OBS_GATES_JOB_ID) == tool.job_id, (
                f"obs.gates_job_id is {metadata.get(OBS_GATES_JOB_ID)!r}, not the tool's id"
            )
            assert metadata.get(OBS_GATES_PHASE) == guard.rung.value, (
                f"obs.gates_phase is {metadata.get(OBS_GATES_PHASE)!r}, not {guard.rung.value!r}"
            )
            assert metadata.get(OBS_OUTPUT) == verdict, (
                f"obs.output is {metadata.get(OBS_OUTPUT)!r} for {sample!r}, not {verdict!r}"
            )

    @_in_trio
    async def test_a_sample_it_cannot_judge_gets_no_verdict(self) -> None:
        """On a sample it cannot judge the guard raises, and not ``GuardrailError``: a crash is
        no verdict. Under enforcement the gated job fails closed with it, with no
        ``GuardrailError`` anywhere in the chain (the tool never runs on the input side, an
        output guard withholds the result), and a validation seat answers a
        ``NucleoSystemError``, so nothing is fed back as a correction."""
        # Holds GRD-13, GRD-33.
        guard = self._fresh()
        for sample in self._samples("unjudgeable_samples"):
            try:
                answer = await self._judge(sample)
            except GuardrailError as refusal:
                raise AssertionError(
                    f"the guard refused {sample!r}, which it cannot judge ({refusal}): a crash "
                    "passed off as a verdict"
                ) from refusal
            except Exception:
                pass
            else:
                raise AssertionError(
                    f"the guard answered {answer!r} for {sample!r}, which it cannot judge: it "
                    "fails open"
                )
            if not self._enforceable(sample):
                continue
            tool, outcome = await self._enforce(sample)
            error = outcome.error
            assert error is not None, f"under enforcement {sample!r} was let through"
            refusals = [e for e in _chain(error) if isinstance(e, GuardrailError)]
            assert not refusals, f"{sample!r} failed with a refusal in its chain: {refusals[0]}"
            if isinstance(guard, ValidationGuardrail):
                assert isinstance(error, NucleoSystemError), (
                    f"the validation seat answered {type(error).__name__}, not a NucleoSystemError"
                )
            elif self._on_input_side(guard):
                assert tool.runs == 0, f"the tool ran though its guard could not judge {sample!r}"
