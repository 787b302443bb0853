"""The picker, the compliance envelope and the resolution gate."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from nucleo_trio.errors import (
    ModelResolutionError,
    OverloadRetry,
    RateLimitRetry,
    TransientErrorRetry,
    UnauthorizedError,
    UncorrectableError,
    UpstreamFailure,
)
from nucleo_trio.models import (
    Attempt,
    AvailabilityBook,
    DefaultComplianceEnvelope,
    DefaultModelPicker,
    Grade,
    Input,
    ModelBinding,
    ModelCatalog,
    ModelSpec,
    OutputSize,
    Situation,
    failover_share,
)
from nucleo_trio.models.grades import Depth
from nucleo_trio.models.picker import Providers

from .model_doubles import catalog, entry, providers, runtime


def priced(
    spec_id: str, grade: str = "SMALL", price: float | None = 1.0, **kw: Any
) -> dict[str, Any]:
    if price is None:
        return entry(spec_id, grade=grade, **kw)
    return entry(
        spec_id,
        grade=grade,
        input_price_per_million=price,
        output_price_per_million=price,
        currency="USD",
        **kw,
    )


def flat(grade: Grade = Grade.SMALL, **kw: Any) -> ModelBinding:
    return ModelBinding.flat(grade, Depth.IMMEDIATE, 10, OutputSize.VERDICT, **kw)


# -- the default order (MOD-08, MOD-09) -----------------------------------------------------------


def test_the_first_callable_entry_of_the_order_serves() -> None:
    """MOD-08: the grade's pinned order first; an uncallable entry is skipped (and logged
    once); an entry of a provider with no artifact on this deployment is skipped likewise."""
    cat = catalog(
        priced("absent", provider_key="acme"),
        priced("first"),
        priced("second"),
        pins={"SMALL": ["absent", "second", "first"]},
    )
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert picker.pick(Grade.SMALL, Situation()).id == "second"


def test_unplaced_entries_fill_in_cheapest_first_and_unpriced_last(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MOD-08: with no callable pin, the grade's other entries serve cheapest first by input
    plus output price, unpriced entries after every priced one in catalog order; the fill-in
    is logged once at WARN."""
    cat = catalog(
        priced("free", price=None),
        priced("dear", price=5.0),
        priced("cheap", price=0.5),
        priced("pinned-gone", provider_key="acme"),
        pins={"SMALL": ["pinned-gone"]},
    )
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert [e.id for e in picker.order(Grade.SMALL)] == ["pinned-gone", "cheap", "dear", "free"]
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.picker"):
        assert picker.pick(Grade.SMALL, Situation()).id == "cheap"
        assert picker.pick(Grade.SMALL, Situation()).id == "cheap"
    assert len([r for r in caplog.records if "fills in" in r.message]) == 1
    no_pins = DefaultModelPicker(
        catalog(priced("b", price=2), priced("a", price=1)), providers("fake-llm")
    )
    assert no_pins.pick(Grade.SMALL, Situation()).id == "a"


def test_envelope_refused_and_input_refusing_entries_are_passed_over() -> None:
    """MOD-09: an entry the envelope refuses is skipped like an uncallable one; one that does
    not accept a declared input is passed over; with no declared inputs the first serves."""
    cat = catalog(
        priced("lax", requires_data_share=True, supports_vision=True),
        priced("text-only"),
        priced("eyes", supports_vision=True),
        pins={"SMALL": ["lax", "text-only", "eyes"]},
    )
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert picker.pick(Grade.SMALL, Situation()).id == "text-only"
    assert picker.pick(Grade.SMALL, Situation(inputs=frozenset({Input.IMAGES}))).id == "eyes"
    lax = Situation(envelope=DefaultComplianceEnvelope(allow_data_share=True))
    assert picker.pick(Grade.SMALL, lax).id == "lax"


def test_a_grade_with_nothing_callable_is_served_from_the_grade_above() -> None:
    """MOD-08: the same two steps at the next grade up; MOD-11: describe_pins reports the
    stand-in."""
    cat = catalog(
        priced("s", provider_key="acme"), priced("m", grade="MEDIUM"), priced("x", grade="XL")
    )
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert picker.pick(Grade.SMALL, Situation()).id == "m"
    pins = picker.describe_pins()
    assert pins["SMALL"] == "m (stand-in from MEDIUM)" and pins["MEDIUM"] == "m"
    assert pins["LARGE"] == "x (stand-in from XL)" and pins["MEGA"] == "(nothing callable)"


def test_nothing_callable_refuses_naming_grade_credential_and_artifact() -> None:
    """MOD-10: the refusal names the grade ("SMALL or above"), per provider the credential to
    supply or that no artifact is there, and says when the grade has no entry at all."""
    cat = catalog(
        priced("s"), priced("a", grade="LARGE", provider_key="acme"), priced("m", grade="MEGA")
    )
    env: dict[str, str] = {}
    picker = DefaultModelPicker(
        cat, providers("fake-llm", credentials={"fake-llm": "FAKE_LLM_KEY"}, environ=env)
    )
    with pytest.raises(ModelResolutionError, match="SMALL or above") as refused:
        picker.pick(Grade.SMALL, Situation())
    text = str(refused.value)
    assert "[fake-llm]" in text and "FAKE_LLM_KEY" in text
    assert "[acme] no provider artifact" in text and refused.value.grade == "SMALL"
    with pytest.raises(ModelResolutionError, match="no entry of that grade"):
        picker.pick(Grade.MEDIUM, Situation())
    env["FAKE_LLM_KEY"] = "sk-test"  # MOD-11: nothing is cached; the choice follows credentials
    assert picker.pick(Grade.SMALL, Situation()).id == "s"


def test_the_ceiling_is_the_highest_rung_with_a_callable_entry() -> None:
    """MOD-02: XL is the ceiling when XL has a live entry and MEGA none; None when nothing is
    callable."""
    cat = catalog(
        priced("s"), priced("x", grade="XL"), priced("m", grade="MEGA", provider_key="acme")
    )
    assert DefaultModelPicker(cat, providers("fake-llm")).ceiling() is Grade.XL
    assert DefaultModelPicker(cat, providers()).ceiling() is None


# -- the other seats (MOD-12, MOD-13) ------------------------------------------------------------


def test_the_embeddings_seat_follows_its_pin_then_the_first_callable_and_freezes() -> None:
    """MOD-12: the pin, else the first callable embeddings entry, else None; once resolved the
    seat is frozen, and a different declaration later is refused."""
    emb = {"grade": None, "provider_key": "fake-embeddings"}
    cat = catalog(entry("e1", **emb), entry("e2", **emb))
    picker = DefaultModelPicker(cat, providers("fake-embeddings"))
    assert picker.embeddings(Situation()).id == "e1"  # type: ignore[union-attr]
    pinned = catalog(entry("e1", **emb), entry("e2", **emb), pins={"embeddings": ["e2"]})
    assert DefaultModelPicker(pinned, providers()).embeddings(Situation()).id == "e2"  # type: ignore[union-attr]
    assert DefaultModelPicker(cat, providers()).embeddings(Situation()) is None
    models = runtime(cat, keys=("fake-embeddings",))
    first = ModelBinding.embeddings(500)
    assert models.resolve(first).id == "e1"
    assert models.resolve(ModelBinding.embeddings(5)).id == "e1"
    with pytest.raises(UncorrectableError, match="frozen to e1"):
        models.resolve(ModelBinding.embeddings_pinned(cat.spec("e2"), 5))


def test_the_decision_seat_is_chosen_once_per_picker() -> None:
    """MOD-13: the pin, else the first callable decision entry whose endpoint serves its wire
    id; an unpinned choice is made once per picker and a new picker asks again."""
    from nucleo_trio.models import Provider

    dec = {"grade": None, "provider_key": "local-decision"}
    cat = catalog(entry("d1", **dec), entry("d2", **dec))
    served = {"d2"}
    keys = Providers({})
    keys.register(Provider("local-decision", serves=lambda wire: wire in served))
    picker = DefaultModelPicker(cat, keys)
    assert picker.decision(Situation()).id == "d2"  # type: ignore[union-attr]
    served.add("d1")
    assert picker.decision(Situation()).id == "d2"  # type: ignore[union-attr]
    assert DefaultModelPicker(cat, keys).decision(Situation()).id == "d1"  # type: ignore[union-attr]
    pinned = catalog(entry("d1", **dec), entry("d2", **dec), pins={"decision": ["d2"]})
    assert DefaultModelPicker(pinned, keys).decision(Situation()).id == "d2"  # type: ignore[union-attr]


# -- the gate (MOD-03, MOD-14..16, MOD-24) --------------------------------------------------------


class Naive:
    """A picker that ignores the envelope: the first open entry at or above the rung."""

    def __init__(self, cat: ModelCatalog, ceiling: Grade | None = Grade.MEGA) -> None:
        self.cat = cat
        self._ceiling = ceiling
        self.asked: list[Grade] = []

    def pick(self, grade: Grade, situation: Situation) -> ModelSpec:
        self.asked.append(grade)
        for rung in grade.at_least():
            for spec in self.cat.of_grade(rung):
                return spec
        raise ModelResolutionError(f"nothing at {grade.value}", grade=grade.value)

    def ceiling(self) -> Grade | None:
        return self._ceiling

    def embeddings(self, situation: Situation) -> ModelSpec | None:
        return None

    def decision(self, situation: Situation) -> ModelSpec | None:
        return None


def test_an_explicit_seat_refused_at_its_rung_is_served_from_above() -> None:
    """MOD-15: when the envelope refuses the entry chosen for an unpinned seat, an explicit
    grade walks upward from its floor; a declared floor is never served from below."""
    cat = catalog(
        priced("s-lax", requires_data_share=True),
        priced("m-lax", grade="MEDIUM", requires_data_share=True),
        priced("l", grade="LARGE"),
        priced("micro", grade="MICRO"),
    )
    models = runtime(cat)
    naive = Naive(cat)
    models.use(naive)
    assert models.resolve(flat(Grade.SMALL)).id == "l"
    assert naive.asked == [Grade.SMALL, Grade.SMALL, Grade.MEDIUM, Grade.LARGE]


def test_a_ceiling_seat_refused_at_the_top_is_served_from_the_best_permitted_rung() -> None:
    """MOD-15, MOD-03: a CEILING seat is translated to the picker's ceiling and walks
    downward."""
    cat = catalog(
        priced("small", grade="SMALL"),
        priced("large", grade="LARGE"),
        priced("mega", grade="MEGA", requires_data_share=True),
    )
    models = runtime(cat)
    models.use(Naive(cat))
    assert models.resolve(flat(Grade.CEILING)).id == "large"


def test_an_envelope_refusing_everything_is_the_broken_deployment_error() -> None:
    """MOD-16: a walk the envelope refuses entirely throws ModelResolutionError naming the
    grade and every entry refused."""
    cat = catalog(
        priced("s", requires_data_share=True), priced("m", grade="MEDIUM", requires_data_share=True)
    )
    models = runtime(cat)
    models.use(Naive(cat))
    with pytest.raises(ModelResolutionError, match="SMALL or above.*refuses s, m") as refused:
        models.resolve(flat(Grade.SMALL))
    assert not isinstance(refused.value, UncorrectableError)  # an Error: a deployment fault


def test_a_pinned_spec_the_envelope_refuses_stays_refused() -> None:
    """MOD-16, MOD-24: a pin skips only the picker; the envelope still applies and refuses
    with "refuses <id>"; a pin has no grade floor, and a retry resolves the same spec."""
    cat = catalog(priced("lax", requires_data_share=True), priced("micro", grade="MICRO"))
    models = runtime(cat)
    with pytest.raises(UncorrectableError, match="refuses lax"):
        models.resolve(ModelBinding.pinned(cat.spec("lax"), Depth.IMMEDIATE, 1, 1))
    micro = cat.spec("micro")
    first = models.resolve(ModelBinding.pinned(micro, Depth.IMMEDIATE, 1, 1))
    again = models.resolve(ModelBinding.pinned(micro, Depth.IMMEDIATE, 1, 1))
    assert first is micro and again is micro


def test_the_gate_checks_kind_inputs_and_deprecation_whichever_picker_answered() -> None:
    """MOD-14: the entry's kind, carried-but-undeclared and declared-but-not-accepted inputs,
    deprecation, and the grade floor for picked seats."""
    cat = catalog(
        priced("old", status="DEPRECATED"),
        priced("micro", grade="MICRO"),
        priced("ok"),
        entry("emb", grade=None, provider_key="fake-embeddings"),
    )
    models = runtime(cat)
    with pytest.raises(UncorrectableError, match="DEPRECATED"):
        models.resolve(ModelBinding.pinned(cat.spec("old"), Depth.IMMEDIATE, 1, 1))
    with pytest.raises(UncorrectableError, match="does not accept the declared inputs"):
        models.resolve(
            ModelBinding.pinned(cat.spec("ok"), Depth.IMMEDIATE, 1, 1, inputs={Input.DOCUMENTS})
        )

    class Carrying:
        prior_spec_id: str | None = None
        carried_inputs = frozenset({Input.IMAGES})

        def input_tokens(self, spec: ModelSpec) -> int:
            return 1

        def output_budget(self, spec: ModelSpec) -> int | None:
            return 1

    with pytest.raises(UncorrectableError, match="carries IMAGES but the call does not declare"):
        models.resolve(ModelBinding.pinned_wired(Carrying(), cat.spec("ok"), Depth.IMMEDIATE))

    class Below(Naive):
        def pick(self, grade: Grade, situation: Situation) -> ModelSpec:
            return cat.spec("micro")

    floor = runtime(cat)
    floor.use(Below(cat))
    with pytest.raises(UncorrectableError, match="below the seat's floor SMALL"):
        floor.resolve(flat(Grade.SMALL))
    with pytest.raises(ValueError, match="this form pins LLM entries"):
        ModelBinding.pinned(cat.spec("emb"), Depth.IMMEDIATE, 1, 1)


def test_a_seat_above_the_ceiling_is_lowered_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MOD-03: a grade above what the deployment serves is lowered to the ceiling, warned
    once; a picker whose ceiling is None or CEILING is refused."""
    cat = catalog(priced("m", grade="MEDIUM"))
    models = runtime(cat)
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.models"):
        assert models.resolve(flat(Grade.MEGA)).id == "m"
        assert models.resolve(flat(Grade.MEGA)).id == "m"
    assert len([r for r in caplog.records if "lowered to the ceiling MEDIUM" in r.message]) == 1
    for bad in (None, Grade.CEILING):
        broken = runtime(cat)
        broken.use(Naive(cat, ceiling=bad))
        with pytest.raises(ModelResolutionError, match="no ceiling"):
            broken.resolve(flat(Grade.CEILING))


def test_a_picker_is_installed_once_before_the_first_resolution() -> None:
    """MOD-29: use(picker) once, before any resolution; a second call or a late one throws."""
    cat = catalog(priced("s"))
    models = runtime(cat)
    models.use(Naive(cat))
    with pytest.raises(RuntimeError, match="already installed"):
        models.use(Naive(cat))
    late = runtime(cat)
    late.resolve(flat())
    with pytest.raises(RuntimeError, match="before the first model resolution"):
        late.use(Naive(cat))
    with pytest.raises(TypeError, match="ModelPicker"):
        runtime(cat).use(object())  # type: ignore[arg-type]


# -- the envelope (MOD-17, ENV-01, ENV-02) --------------------------------------------------------


def test_the_default_envelope_refuses_data_share_and_applies_its_lists() -> None:
    """MOD-17: fresh, everything but data-share entries is permitted; allowed_provider_keys is
    a whitelist, denied_provider_keys and denied_identities never serve."""
    cat = catalog(
        priced("a", identity="gpt"),
        priced("b", provider_key="acme", identity="claude"),
        priced("c", requires_data_share=True),
    )
    a, b, c = (cat.spec(i) for i in "abc")
    fresh = DefaultComplianceEnvelope()
    assert fresh.permits(a) and fresh.permits(b) and not fresh.permits(c)
    assert "requires data sharing" in fresh.refusal(c)
    assert DefaultComplianceEnvelope(allow_data_share=True).permits(c)
    only_acme = DefaultComplianceEnvelope(allowed_provider_keys={"acme"})
    assert only_acme.permits(b) and not only_acme.permits(a)
    assert not DefaultComplianceEnvelope(denied_provider_keys={"acme"}).permits(b)
    assert not DefaultComplianceEnvelope(denied_identities={"gpt"}).permits(a)


async def test_reading_before_a_seal_answers_the_refusing_default_without_sealing() -> None:
    """ENV-01: before any seal the envelope read is the refusing default, and reading does not
    seal, so a later seal still takes effect."""
    from nucleo_trio.dispatch import JobDispatcher

    dispatcher = JobDispatcher()
    before = dispatcher.compliance_envelope
    assert isinstance(before, DefaultComplianceEnvelope) and not before.allow_data_share
    mine = DefaultComplianceEnvelope(allow_data_share=True)
    dispatcher.seal_compliance_envelope(mine)
    assert dispatcher.compliance_envelope is mine


async def test_the_seal_is_accepted_once_and_start_seals_the_default() -> None:
    """ENV-02: a second seal throws RuntimeError, None throws ValueError, and start() seals
    the default when nothing was sealed."""
    from nucleo_trio.dispatch import JobDispatcher, open_dispatcher

    dispatcher = JobDispatcher()
    with pytest.raises(ValueError, match="must not be None"):
        dispatcher.seal_compliance_envelope(None)  # type: ignore[arg-type]
    dispatcher.seal_compliance_envelope(DefaultComplianceEnvelope())
    with pytest.raises(RuntimeError, match="already sealed"):
        dispatcher.seal_compliance_envelope(DefaultComplianceEnvelope())
    async with open_dispatcher() as started:
        assert started.models.envelope.is_sealed
        with pytest.raises(RuntimeError, match="already sealed"):
            started.seal_compliance_envelope(DefaultComplianceEnvelope())


# -- the situation and failover (MOD-26..28) -----------------------------------------------------


def test_a_retry_resolves_with_the_accumulated_history() -> None:
    """MOD-26: the situation holds the prior spec, the attempts (spec plus failure), depth,
    declared and carried inputs and the envelope; a re-resolution with an overloaded attempt in
    its history fails over, which makes failover purely a picker decision."""
    cat = catalog(priced("route-a", identity="m"), priced("route-b", identity="m"))
    models = runtime(cat)
    models.use(DefaultModelPicker(cat, models.providers))

    class Job:
        job_id = "j"

    from nucleo_trio.jobs.context import JobContext
    from nucleo_trio.jobs.identity import workflow
    from tests.jobs_for_tests import Echo

    context = JobContext(Echo(workflow("u", "wf")), "u")
    assert models.resolve(flat(), context).id == "route-a"
    overload = OverloadRetry("529", failure=UpstreamFailure(529, "m", "overloaded"))
    models.note_attempt(context, cat.spec("route-a"), overload)
    situation = models.situation(flat(), context)
    assert situation.attempts == (Attempt("route-a", overload),)
    assert situation.overloaded_routes == {"route-a"} and situation.depth is Depth.IMMEDIATE
    assert models.resolve(flat(), context).id == "route-b"


def test_failover_share_and_candidate_rules() -> None:
    """MOD-27: no share below a 2x slowdown, 1 - 1/x between, all of it at 10x; the candidate
    has the same identity, is open, permitted, not down, eligible and strictly less
    throttled; a retry avoids every route already overloaded in this execution."""
    assert failover_share(1.5) == 0.0 and failover_share(4.0) == 0.75
    assert failover_share(10.0) == 1.0 and failover_share(50.0) == 1.0

    class Health:
        def __init__(self) -> None:
            self.slow: dict[str, float] = {}
            self.down: set[str] = set()

        def slowdown(self, spec: ModelSpec) -> float:
            return self.slow.get(spec.id, 1.0)

        def is_down(self, spec: ModelSpec) -> bool:
            return spec.id in self.down

    cat = catalog(
        priced("a", identity="m"),
        priced("other", identity="n"),
        priced("b", identity="m", eligible_for_failover=False),
        priced("c", identity="m"),
        pins={"SMALL": ["a", "other"]},
    )
    health = Health()
    picker = DefaultModelPicker(cat, providers("fake-llm"), health=health, rng=random.Random(1))
    assert picker.pick(Grade.SMALL, Situation()).id == "a"
    health.slow["a"] = 10.0
    assert picker.pick(Grade.SMALL, Situation()).id == "c"
    health.slow["c"] = 10.0  # not strictly less throttled: stays
    assert picker.pick(Grade.SMALL, Situation()).id == "a"
    health.slow.clear()
    overloaded = (Attempt("a", OverloadRetry("529")),)
    assert picker.pick(Grade.SMALL, Situation(attempts=overloaded)).id == "c"
    health.down.add("c")
    assert picker.pick(Grade.SMALL, Situation(attempts=overloaded)).id == "a"
    twice = (*overloaded, Attempt("c", OverloadRetry("529")))
    health.down.clear()
    assert picker.pick(Grade.SMALL, Situation(attempts=twice)).id == "a"


async def test_only_a_not_found_turns_a_model_off_for_a_day(
    autojump_clock: Any,
) -> None:
    """MOD-28, as issue 20 (item 6) has it: a 404 or not-found on a model with no success for a
    day turns it off for a day from the latest verdict, and the book says why and since when; a
    5xx, an overload, a timeout, a refused or dropped connection, a 429 or an auth failure never
    does; a success turns it back on at once, and a verdict within a day of one is not taken;
    pins bypass the turnoff."""
    import httpx
    import trio

    from nucleo_trio.errors import (
        ExternalServiceError,
        Http404Error,
        Http500Error,
        Http503Error,
        ModelNotFoundError,
    )

    book = AvailabilityBook(wall=lambda: 0.0)  # the wall clock at the epoch: a fixed text
    refused = ExternalServiceError("refused", service="api", cause=httpx.ConnectError("refused"))
    for failure in (
        RateLimitRetry("429"),
        UnauthorizedError("bad key"),
        OverloadRetry("529", failure=UpstreamFailure(529, "api", "overloaded")),
        Http500Error("boom", service="api"),
        Http503Error("down", service="api"),
        TransientErrorRetry("500", failure=UpstreamFailure(500, "api", "boom")),
        TransientErrorRetry("refused", cause=refused),
        TransientErrorRetry("reset", cause=ConnectionResetError()),
        ConnectionRefusedError(),
        refused,
    ):
        book.record("m", failure)
        assert not book.is_off("m"), failure
    book.record("m", Http404Error("the model does not exist", service="api"))
    await trio.sleep(3600)
    assert book.why_off("m") == (
        "m is turned off since 1970-01-01 00:00:00 UTC (60 min ago) after HTTP 404: the model "
        "does not exist; it is tried again in 23.0 h, or at once if it answers"
    )
    await trio.sleep(23 * 3600 - 1)
    assert book.is_off("m")
    await trio.sleep(2)  # a day after the verdict: tried again
    assert not book.is_off("m") and book.turned_off() == ()

    book.record("m", ModelNotFoundError("no such model"))
    assert [t.spec_id for t in book.turned_off()] == ["m"]
    book.record("m", None)  # it answered: on at once
    assert not book.is_off("m")
    book.record("m", Http404Error("gone", service="api"))
    assert not book.is_off("m")  # within a day of a success: not taken
    await trio.sleep(24 * 3600 + 1)
    book.record("m", Http404Error("gone", service="api"))
    assert book.is_off("m")

    cat = catalog(priced("flaky"), priced("steady"), pins={"SMALL": ["flaky", "steady"]})
    models = runtime(cat)
    models.availability = book
    book.record("flaky", Http404Error("gone", service="api"))
    from nucleo_trio.admission import RateLimiterRegistry
    from nucleo_trio.models.picker import RegistryRouteHealth

    models.use(
        DefaultModelPicker(
            cat, models.providers, health=RegistryRouteHealth(RateLimiterRegistry(), book)
        )
    )
    assert models.resolve(flat()).id == "steady"
    pinned = ModelBinding.pinned(cat.spec("flaky"), Depth.IMMEDIATE, 1, 1)
    assert models.resolve(pinned).id == "flaky"


def test_a_turnoff_never_takes_the_last_entry_away_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MOD-28, as issue 20 (item 6) has it: an entry turned off is passed over with one warning
    that says why and since when; when every entry that could serve is turned off, the first of
    the order serves all the same (one warning); a refusal for another reason names the
    turnoffs among its candidates."""
    from nucleo_trio.admission import RateLimiterRegistry
    from nucleo_trio.errors import Http404Error
    from nucleo_trio.models.picker import RegistryRouteHealth

    book = AvailabilityBook(clock=lambda: 50.0, wall=lambda: 0.0)
    cat = catalog(priced("gone", price=1.0), priced("steady", price=9.0))
    health = RegistryRouteHealth(RateLimiterRegistry(), book)
    picker = DefaultModelPicker(cat, providers("fake-llm"), health=health)
    book.record("gone", Http404Error("no such model", service="api"))
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.picker"):
        assert picker.pick(Grade.SMALL, Situation()).id == "steady"
        assert picker.pick(Grade.MICRO, Situation()).id == "steady"
    assert [r.getMessage() for r in caplog.records] == [
        "gone is turned off since 1970-01-01 00:00:00 UTC (0 s ago) after HTTP 404: no such "
        "model; it is tried again in 24.0 h, or at once if it answers; passed over"
    ]
    caplog.clear()
    book.record("steady", Http404Error("no such model", service="api"))
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.models.picker"):
        assert picker.pick(Grade.SMALL, Situation()).id == "gone"
        assert picker.pick(Grade.SMALL, Situation()).id == "gone"
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("steady is turned off since 1970-01-01 00:00:00 UTC")
    assert messages[1].startswith(
        "every entry that can serve SMALL or above is turned off; gone serves all the same "
        "(a turnoff never takes the last entry away): gone is turned off since"
    )
    assert len(messages) == 2

    envelope = DefaultComplianceEnvelope(denied_identities={"gone", "steady"})
    with pytest.raises(ModelResolutionError) as refusal:
        picker.pick(Grade.SMALL, Situation(envelope=envelope))
    message = str(refusal.value)
    assert "refused by the compliance envelope: gone, steady" in message
    assert "gone is turned off since 1970-01-01 00:00:00 UTC (0 s ago) after HTTP 404" in message
    assert "steady is turned off since" in message


def test_the_prior_spec_is_kept_while_it_qualifies() -> None:
    """MOD-26: a conversation's prior entry is kept (stickiness) while it still qualifies."""
    cat = catalog(priced("cheap", price=0.1), priced("dear", price=9.0))
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert picker.pick(Grade.SMALL, Situation(prior_spec_id="dear")).id == "dear"
    assert picker.pick(Grade.SMALL, Situation(prior_spec_id="gone")).id == "cheap"
