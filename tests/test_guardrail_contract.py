"""GuardrailContract, bound the way a guard's author binds it: to every guardrail nucleo_trio
ships, and to a validation guard of this file's (none ships), each with samples it lets through
and samples it refuses. The shipped guards' own rules stay in tests/test_guardrails_shipped.py;
this file shows that the contract holds for each, and that it fails guards that break it, each
at the check its fault breaks (GRD-01..05, GRD-13, GRD-16, GRD-33)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import pytest

from nucleo_trio.errors import GuardrailError
from nucleo_trio.guardrails import (
    AdmissionContext,
    CallerClassAllowListGuardrail,
    ContentGuardrail,
    ExfiltrationMarkerGuardrail,
    Guardrail,
    PayloadSizeCapGuardrail,
    PIIDetectionGuardrail,
    PrincipalAllowListGuardrail,
    UrlGuardrail,
    ValidationGuardrail,
    shipped,
)
from nucleo_trio.jobs import AbstractJob, JobContext, workflow
from nucleo_trio.testing import GuardrailContract, guardrail_contract

from .contract_checks import checks_of

ADDRESSES = {
    "public.example": ["93.184.216.34"],
    "intranet.example": ["10.1.2.3"],
    "split.example": ["93.184.216.34", "192.168.0.7"],
}


async def table(host: str) -> Sequence[str]:
    """A resolver that answers from :data:`ADDRESSES`, fails (not as a resolver does, with
    OSError, but as a bug would) for ``broken.example``, and knows nothing else."""
    if host == "broken.example":
        raise RuntimeError("the resolver's cache is corrupt")
    try:
        return ADDRESSES[host]
    except KeyError:
        raise OSError(f"[Errno -2] Name or service not known: {host!r}") from None


RELAY = "tests.test_guardrail_contract.Relay"
GATED = GuardrailContract.gated_tool


class TestPayloadSizeCapContract(GuardrailContract):
    """GRD-19: a content guard on the input side, judging any target by its JSON's length."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return PayloadSizeCapGuardrail(parent, 20)

    def passing_samples(self) -> Sequence[Any]:
        return ["short", {"q": 1}, "x" * 18]

    def refused_samples(self) -> Sequence[Any]:
        return ["x" * 19, {"query": "a question far over the cap"}]


class TestPIIDetectionContract(GuardrailContract):
    """GRD-19: a content guard on the output side: the result, withheld when refused."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return PIIDetectionGuardrail(parent)

    def passing_samples(self) -> Sequence[Any]:
        return ["all clear", {"rows": 3}, "order 2024-11-05, ref 1234 5678 9012 3456"]

    def refused_samples(self) -> Sequence[Any]:
        return ["ssn 123-45-6789", {"reply": "write to jane.doe@example.com"}]


class TestUrlContract(GuardrailContract):
    """GRD-35: a content guard of strings, whose resolver can fail: such a URL is no verdict
    (GRD-13), and fails the tool closed."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return UrlGuardrail(parent, resolver=table)

    def passing_samples(self) -> Sequence[Any]:
        return ["https://public.example/a", "http://93.184.216.34/"]

    def refused_samples(self) -> Sequence[Any]:
        return [
            "http://intranet.example/",
            "https://split.example/",
            "http://127.0.0.1:8080/",
            "not a url",
            "https://nowhere.example/",
        ]

    def unjudgeable_samples(self) -> Sequence[Any]:
        return ["https://broken.example/"]


class TestExfiltrationMarkerContract(GuardrailContract):
    """GRD-35: a content guard of strings on the input side."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return ExfiltrationMarkerGuardrail(parent)

    def passing_samples(self) -> Sequence[Any]:
        return ["plain text", "an artifact, named in words"]

    def refused_samples(self) -> Sequence[Any]:
        return ["see «artifact:a1»"]


class TestPrincipalAllowListContract(GuardrailContract):
    """GRD-18: an auth guard; a missing principal is refused (judged directly only)."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return PrincipalAllowListGuardrail(parent, {"alice", "bob"})

    def passing_samples(self) -> Sequence[Any]:
        return ["alice", "bob"]

    def refused_samples(self) -> Sequence[Any]:
        return ["mallory", None]


class TestCallerClassAllowListContract(GuardrailContract):
    """GRD-17: an admission guard: a call from the listed class passes, a direct call and a
    call from another class are refused."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return CallerClassAllowListGuardrail(parent, [RELAY])

    def passing_samples(self) -> Sequence[Any]:
        return [AdmissionContext("alice", RELAY, GATED)]

    def refused_samples(self) -> Sequence[Any]:
        return [
            AdmissionContext("alice", None, GATED),
            AdmissionContext("alice", "tests.test_guardrail_contract.Other", GATED),
        ]


SOURCES = {"atlas": "a world atlas", "census": "the 2020 census"}


class CitesItsSource(ValidationGuardrail):
    """Refuses a candidate answer that cites no source; looks the cited source up, and cannot
    judge an answer citing one its index does not hold."""

    target_type = str

    async def validate(self, target: Any) -> None:
        if "[" not in target:
            raise GuardrailError("cite a source in brackets, such as [atlas]")
        source = target[target.index("[") + 1 : target.index("]")]
        SOURCES[source]  # noqa: B018 - an index that lacks it fails the lookup


class TestValidationGuardContract(GuardrailContract):
    """GRD-33: a validation guard, judged by the validation seat of a tool that puts each
    candidate to validate_answer; the candidate it cannot judge fails the seat closed."""

    def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
        return CitesItsSource(parent)

    def passing_samples(self) -> Sequence[Any]:
        return ["Paris [atlas]"]

    def refused_samples(self) -> Sequence[Any]:
        return ["Paris"]

    def unjudgeable_samples(self) -> Sequence[Any]:
        return ["Paris [gazetteer]"]


def test_every_shipped_guardrail_is_bound_here() -> None:
    """Every guard class the shipped module exports runs through the contract above."""
    exported = {
        getattr(shipped, name)
        for name in shipped.__all__
        if inspect.isclass(getattr(shipped, name)) and issubclass(getattr(shipped, name), Guardrail)
    }
    bound = {
        type(contract().make_guardrail(GATED(workflow("u", "wf"), contract().make_guardrail)))
        for contract in (
            TestPayloadSizeCapContract,
            TestPIIDetectionContract,
            TestUrlContract,
            TestExfiltrationMarkerContract,
            TestPrincipalAllowListContract,
            TestCallerClassAllowListContract,
        )
    }
    assert exported == bound


# -- guards that break the contract ----------------------------------------------------------------


class NoDrop(ContentGuardrail):
    """A correct guard to break: refuses a query that drops a table."""

    target_type = dict

    async def validate(self, target: Any) -> None:
        if "drop" in str(target.get("sql", "")).lower():
            raise GuardrailError(f"{self.gated_tool} runs read-only queries; DROP is not allowed")


class ReturnsFalse(NoDrop):
    """Breaks GRD-03: it says no by returning False, which the dispatcher never reads."""

    async def validate(self, target: Any) -> Any:
        return "drop" not in str(target.get("sql", "")).lower()


class RefusesWithValueError(NoDrop):
    """Breaks GRD-13: a refusal raised as a ValueError is a crash to the dispatcher."""

    async def validate(self, target: Any) -> None:
        if "drop" in str(target.get("sql", "")).lower():
            raise ValueError("DROP is not allowed")


class Tidies(NoDrop):
    """Breaks the guard's hands-off rule: it strips the query it judges, in place."""

    async def validate(self, target: Any) -> None:
        target["sql"] = target["sql"].strip()
        await super().validate(target)


class JudgesInAPlainMethod(NoDrop):
    """Breaks the kind: its validate is a plain method, whose answer cannot be awaited."""

    def validate(self, target: Any) -> None:  # type: ignore[override]
        if "drop" in str(target.get("sql", "")).lower():
            raise GuardrailError("DROP is not allowed")


class ForgetsItsRecords(NoDrop):
    """Breaks GRD-05: it replaces pre_execute and records nothing before it runs."""

    async def pre_execute(self, context: JobContext) -> None:
        return None


class FailsOpen(UrlGuardrail):
    """Breaks GRD-13: a resolver that fails lets the URL through."""

    async def validate(self, target: Any) -> None:
        try:
            await super().validate(target)
        except GuardrailError:
            raise
        except Exception:
            return


def _guarding(guard: type[Guardrail], **settings: Any) -> GuardrailContract:
    """The contract for ``guard`` with NoDrop's samples (a URL guard gets the URL samples)."""

    class Bound(GuardrailContract):
        def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
            return guard(parent, **settings)

        def passing_samples(self) -> Sequence[Any]:
            return [{"sql": " SELECT 1 "}]

        def refused_samples(self) -> Sequence[Any]:
            return [{"sql": "DROP TABLE orders"}]

    if issubclass(guard, UrlGuardrail):

        class BoundUrl(TestUrlContract):
            def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
                return guard(parent, resolver=table)

        return BoundUrl()
    return Bound()


@pytest.mark.parametrize(
    ("broken", "correct", "check", "match"),
    [
        (
            ReturnsFalse,
            NoDrop,
            "test_it_refuses_each_refused_sample_with_a_guardrail_error",
            "answered False for the refused sample .*would let it through",
        ),
        (
            RefusesWithValueError,
            NoDrop,
            "test_it_refuses_each_refused_sample_with_a_guardrail_error",
            "raised ValueError: DROP is not allowed .*not a GuardrailError",
        ),
        (
            Tidies,
            NoDrop,
            "test_it_leaves_what_it_judges_as_it_was",
            r"changed the sample \{'sql': ' SELECT 1 '\} to \{'sql': 'SELECT 1'\}",
        ),
        (
            JudgesInAPlainMethod,
            NoDrop,
            "test_it_judges_in_a_coroutine",
            r"JudgesInAPlainMethod\.validate is not a coroutine function",
        ),
        (
            ForgetsItsRecords,
            NoDrop,
            "test_under_enforcement_its_run_is_recorded",
            "the guard recorded no obs.input",
        ),
        (
            FailsOpen,
            UrlGuardrail,
            "test_a_sample_it_cannot_judge_gets_no_verdict",
            "answered None for 'https://broken.example/', which it cannot judge: it fails open",
        ),
    ],
)
def test_the_contract_fails_a_guard_that_breaks_it(
    broken: type[Guardrail], correct: type[Guardrail], check: str, match: str
) -> None:
    """Each broken guard fails the check its fault breaks, naming what it did, while the guard
    it breaks passes the same check; the checks run without pytest's help."""
    getattr(_guarding(correct), check)()
    with pytest.raises(AssertionError, match=match):
        getattr(_guarding(broken), check)()


def test_a_contract_missing_a_method_says_which() -> None:
    """A subclass that forgot its samples fails naming the method, not with a bare error."""

    class Forgot(GuardrailContract):
        def make_guardrail(self, parent: AbstractJob[Any]) -> Guardrail:
            return NoDrop(parent)

    with pytest.raises(NotImplementedError, match=r"Forgot must implement passing_samples\(\)"):
        Forgot().test_it_lets_each_passing_sample_through()


def test_the_base_class_is_not_collected_and_every_check_names_its_rules() -> None:
    """GuardrailContract itself is no test class (pytest collects Test* only); every check says in
    its docstring what it checks, for the author whose implementation fails it, with no rule
    ids, and names the rule ids it holds in a comment, its first line, for maintainers."""
    assert not GuardrailContract.__name__.startswith("Test")
    checks = checks_of(guardrail_contract, "GuardrailContract")
    assert len(checks) >= 9
    holds = re.compile(r"# Holds (GRD-\d\d(, GRD-\d\d)*( \(.+\))?|no numbered rule: .+)\.")
    for name, doc, first in checks:
        assert doc.strip() and not re.search(r"[A-Z]{2,4}-\d\d", doc), name
        assert holds.fullmatch(first), f"{name} begins {first!r}"
