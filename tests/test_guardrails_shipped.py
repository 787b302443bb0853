"""The shipped guardrails: one contract every registered guard meets, then each guard's own
rules (GRD-17..19, GRD-35)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.dispatch.config import GuardrailConfig
from nucleo_trio.errors import GuardrailError
from nucleo_trio.guardrails import (
    GUARDRAIL_TIMEOUT,
    AdmissionGuardrail,
    AuthGuardrail,
    ContentGuardrail,
    Direction,
    ExfiltrationMarkerGuardrail,
    Guardrail,
    PayloadSizeCapGuardrail,
    PIIDetectionGuardrail,
    PrincipalAllowListGuardrail,
    UrlGuardrail,
    ValidationGuardrail,
)
from nucleo_trio.jobs import Doer, Identifiable, JobContext, JobType, Tool, workflow
from nucleo_trio.plugins import make_plugin_manager
from nucleo_trio.plugins.manager import GuardrailKinds, UnknownGuardrailKindError

ADDRESSES = {
    "public.example": ["93.184.216.34"],
    "intranet.example": ["10.1.2.3"],
    "split.example": ["93.184.216.34", "192.168.0.7"],
}


async def table(host: str) -> Sequence[str]:
    """A resolver that answers from :data:`ADDRESSES` and knows nothing else."""
    try:
        return ADDRESSES[host]
    except KeyError:
        raise OSError(f"[Errno -2] Name or service not known: {host!r}") from None


class Carrier(Tool[Any]):
    """Carries an input in and an output out; configuration attaches the guard under test."""

    def __init__(self, parent: Identifiable, input: Any = None, output: Any = "ok") -> None:
        super().__init__(parent)
        self.input = input
        self.output = output
        self.runs = 0

    async def execute(self, context: JobContext) -> Any:
        self.runs += 1
        return self.output


class Relay(Doer[Any]):
    """Calls a Carrier from inside a job, so the call has a caller class."""

    async def execute(self, context: JobContext) -> Any:
        return await self.submit_in_step(Carrier(self)).result()


CARRIER = f"{__name__}.Carrier"
RELAY = f"{__name__}.Relay"

# Per registered name: its settings, then a (user, input, output, via relay) that passes and one
# that is refused.
CASES: dict[str, tuple[dict[str, Any], tuple[Any, ...], tuple[Any, ...]]] = {
    "payload_size_cap": (
        {"max_chars": 20},
        ("alice", "short", "ok", False),
        ("alice", "x" * 40, "ok", False),
    ),
    "pii_detection": (
        {},
        ("alice", None, "all clear", False),
        ("alice", None, "ssn 123-45-6789", False),
    ),
    "url": (
        {"resolver": table},
        ("alice", "https://public.example/a", "ok", False),
        ("alice", "http://intranet.example/", "ok", False),
    ),
    "exfiltration_marker": (
        {},
        ("alice", "plain", "ok", False),
        ("alice", "«artifact:a1»", "ok", False),
    ),
    "principal_allow_list": (
        {"allowed": ["alice"]},
        ("alice", None, "ok", False),
        ("mallory", None, "ok", False),
    ),
    "caller_class_allow_list": (
        {"allowed": [RELAY]},
        ("alice", None, "ok", True),
        ("alice", None, "ok", False),
    ),
}

OUTPUT_SIDE = {"pii_detection"}

KINDS = GuardrailKinds(make_plugin_manager())


def test_every_registered_guardrail_has_a_contract_case() -> None:
    """Every guardrail any installed plugin registers is run through the contract below."""
    assert set(KINDS.kinds) == set(CASES)


@pytest.mark.parametrize("name", KINDS.kinds)
def test_a_registered_guardrail_is_a_read_only_job_of_one_kind(name: str) -> None:
    """GRD-01, GRD-04: whatever is registered builds a guard of exactly one of the four kinds,
    a read-only GUARDRAIL job with a 10 s timeout, gating the parent it is built under."""
    settings = CASES[name][0]
    parent = Carrier(workflow("alice", "wf"))
    guard = KINDS.create(name, parent, **settings)
    assert isinstance(guard, Guardrail)
    kinds = (ContentGuardrail, AuthGuardrail, AdmissionGuardrail, ValidationGuardrail)
    assert sum(isinstance(guard, kind) for kind in kinds) == 1
    assert guard.job_type is JobType.GUARDRAIL
    assert guard.timeout == GUARDRAIL_TIMEOUT
    assert guard.requirements().read_only
    assert guard.parent_job_id == parent.job_id


@pytest.mark.parametrize("name", KINDS.kinds)
async def test_a_registered_guardrail_passes_the_benign_and_refuses_the_bad(name: str) -> None:
    """GRD-16: attached to a tool by name, each guard lets its benign case through and refuses
    its bad case with a GuardrailError; a tool refused on the input side never runs."""
    settings, benign, bad = CASES[name]
    config = DispatcherConfig(guardrails={CARRIER: [GuardrailConfig(kind=name, settings=settings)]})
    async with open_dispatcher(config) as dispatcher:
        for (user, input, output, via_relay), refused in ((benign, False), (bad, True)):
            root = workflow(user, "wf")
            carrier = Carrier(root, input, output)
            job: Any = Relay(root) if via_relay else carrier
            handle = dispatcher.submit(job)
            if refused:
                with pytest.raises(GuardrailError):
                    await handle.result()
                # Only an output guard lets the tool run before it refuses.
                assert carrier.runs == (1 if name in OUTPUT_SIDE else 0)
            else:
                assert await handle.result() == output


def test_an_unknown_guardrail_name_is_refused_listing_the_known() -> None:
    """The registry names the unknown guardrail and the known ones."""
    with pytest.raises(UnknownGuardrailKindError, match="'nope'.*'payload_size_cap'"):
        KINDS.create("nope", workflow("u", "wf"))


# --- payload size cap ---------------------------------------------------------------------------------


async def test_the_payload_cap_names_the_length_the_cap_and_the_tool() -> None:
    """GRD-19: an input whose JSON is longer than max_chars is refused naming the length, the cap
    and the tool; exactly the cap passes; no input passes."""
    guard = PayloadSizeCapGuardrail(workflow("u", "wf"), 12)
    await guard.validate("1234567890")  # 12 characters of JSON with its quotes
    await guard.validate(None)
    with pytest.raises(GuardrailError) as caught:
        await guard.validate({"query": "a"})
    message = str(caught.value)
    assert "14 characters" in message and "cap of 12" in message and "the tool" in message
    with pytest.raises(ValueError, match="positive int"):
        PayloadSizeCapGuardrail(workflow("u", "wf"), 0)


# --- PII ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("ssn 123-45-6789 on file", "social security number"),
        ("card 4111 1111 1111 1111 exp 12/29", "credit card number"),
        ("card 4111-1111-1111-1111", "credit card number"),
        ("write to jane.doe@example.com", "email address"),
        ("call (555) 123-4567 today", "phone number"),
        ("call +1 555.123.4567", "phone number"),
    ],
)
async def test_pii_detection_finds_each_kind(text: str, kind: str) -> None:
    """GRD-19: a social security number, a card number, an email address and a phone number are
    each refused."""
    with pytest.raises(GuardrailError, match=kind):
        await PIIDetectionGuardrail(workflow("u", "wf")).validate(text)


async def test_pii_detection_lets_ordinary_text_through() -> None:
    """GRD-19: numbers that are not personal data pass: an order id, a date, a 16-digit number
    that fails the Luhn check."""
    guard = PIIDetectionGuardrail(workflow("u", "wf"))
    await guard.validate("order 2024-11-05, ref 1234 5678 9012 3456, total 19.99")
    await guard.validate({"rows": 3})


async def test_one_refusal_lists_every_kind_and_only_the_summary_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """GRD-19: one refusal lists every kind found; the ERROR log carries only that summary, never
    the content, and neither does the refusal."""
    secret = "jane.doe@example.com 123-45-6789 4111111111111111"
    guard = PIIDetectionGuardrail(workflow("u", "wf"))
    with caplog.at_level(logging.ERROR, logger="nucleo_trio.guardrails"):
        with pytest.raises(GuardrailError) as caught:
            await guard.validate({"reply": secret})
    message = str(caught.value)
    for kind in ("social security number", "credit card number", "email address"):
        assert kind in message
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    logged = record.getMessage()
    assert "social security number, credit card number, email address" in logged
    for fragment in ("jane.doe", "123-45-6789", "4111111111111111"):
        assert fragment not in logged and fragment not in message


# --- the allow-lists, outside enforcement -----------------------------------------------------------------


async def test_the_allow_lists_refuse_bad_declarations() -> None:
    """GRD-17, GRD-18: an allow-list given a bare string is refused (it would allow letters)."""
    with pytest.raises(TypeError, match="collection of user ids"):
        PrincipalAllowListGuardrail(workflow("u", "wf"), "alice")
    from nucleo_trio.guardrails import CallerClassAllowListGuardrail

    with pytest.raises(TypeError, match="collection of classes"):
        CallerClassAllowListGuardrail(workflow("u", "wf"), "app.Planner")


# --- URL ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("", "blank URL"),
        ("   ", "blank URL"),
        ("not a url", "is not a URI"),
        ("example.com/path", "is not a URI"),
        ("http://[::1", "is not a URI"),
        ("http://", "names no host"),
        ("mailto:someone@example.com", "names no host"),
        ("https://nowhere.example/", "does not resolve"),
        ("http://127.0.0.1:8080/admin", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://10.0.0.5/", "RFC 1918"),
        ("http://172.16.4.2/", "RFC 1918"),
        ("http://192.168.1.1/", "RFC 1918"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[::ffff:10.0.0.1]/", "RFC 1918"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://intranet.example/", "RFC 1918"),
        ("http://split.example/", "RFC 1918"),
    ],
)
async def test_the_url_guard_refuses(url: str, why: str) -> None:
    """GRD-35: blank, not a URI, no host, unresolvable, loopback, RFC 1918 and link-local are
    refused; every address a name resolves to is judged."""
    with pytest.raises(GuardrailError, match=why):
        await UrlGuardrail(workflow("u", "wf"), resolver=table).validate(url)


async def test_the_url_guard_admits_a_public_address() -> None:
    """GRD-35: a host that resolves only to public addresses passes."""
    guard = UrlGuardrail(workflow("u", "wf"), resolver=table)
    await guard.validate("https://public.example/search?q=trio")
    await guard.validate("http://93.184.216.34/")


async def test_the_url_guard_resolves_through_the_system_without_the_network() -> None:
    """GRD-35: with the system resolver, loopback names and literals are refused and a name that
    cannot resolve is refused as unresolvable. The one query that may reach a DNS server asks
    for a name under the reserved .invalid domain, which never resolves."""
    guard = UrlGuardrail(workflow("u", "wf"))
    with pytest.raises(GuardrailError, match="loopback"):
        await guard.validate("http://localhost:8000/")
    with pytest.raises(GuardrailError, match="does not resolve"):
        await guard.validate("http://nonexistent.invalid/")
    await guard.validate("http://93.184.216.34/")  # a numeric host resolves without a lookup


# --- exfiltration marker ---------------------------------------------------------------------------------


async def test_the_exfiltration_marker_guard_refuses_an_artifact_reference() -> None:
    """GRD-35: text carrying «artifact:...» is refused; the same words without the marker pass."""
    guard = ExfiltrationMarkerGuardrail(workflow("u", "wf"), Direction.OUTPUT)
    with pytest.raises(GuardrailError, match="artifact reference marker"):
        await guard.validate("summary: «artifact:report-7» attached")
    await guard.validate("summary: artifact report-7 attached")
    assert guard.gate_rung_label() == "CONTENT_OUTPUT"
