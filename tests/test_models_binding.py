"""Model bindings and their pricing; Cost, exact per currency."""

from __future__ import annotations

from decimal import Decimal

import pytest

from nucleo_trio.errors import UncorrectableError
from nucleo_trio.llm import Conversation
from nucleo_trio.models import (
    Cost,
    Depth,
    Grade,
    ModelBinding,
    ModelKind,
    OutputDeclaration,
    OutputSize,
)

from .model_doubles import catalog, entry, runtime

CAT = catalog(
    entry(
        "think",
        thinking_mode="BUDGETED",
        max_output_tokens=16_000,
        chars_per_token=1,
        input_price_per_million="2",
        output_price_per_million="10",
        currency="USD",
    ),
    entry("tiny", max_context_tokens=50, max_output_tokens=100, chars_per_token=1),
    entry(
        "emb",
        grade=None,
        provider_key="fake-embeddings",
        input_price_per_million="0.1",
        output_price_per_million="5",
        currency="USD",
    ),
    entry("free"),
)
THINK = CAT.spec("think")


def resolved(binding: ModelBinding, spec_id: str = "think") -> ModelBinding:
    binding.resolve(CAT.spec(spec_id))
    return binding


# -- guards (MOD-18) ------------------------------------------------------------------------------


def test_resolve_is_write_once_and_reads_are_guarded() -> None:
    """MOD-18: resolve() once (a second is a RuntimeError); model before resolve is an
    UncorrectableError; the reservation before pricing a RuntimeError; no form has a default
    output; an LLM form needs a grade and a depth."""
    binding = ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 100, 200)
    with pytest.raises(UncorrectableError, match="not resolved yet"):
        binding.model  # noqa: B018
    binding.resolve(THINK)
    with pytest.raises(RuntimeError, match="already resolved to think"):
        binding.resolve(THINK)
    with pytest.raises(RuntimeError, match="not priced yet"):
        binding.reservation  # noqa: B018
    with pytest.raises(ValueError, match="an output declaration is required"):
        ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="an output declaration is required"):
        ModelBinding.prompt(Grade.SMALL, Depth.IMMEDIATE, "hi", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a grade is required"):
        ModelBinding.flat(None, Depth.IMMEDIATE, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a depth is required"):
        ModelBinding.wired(Conversation(output=1), Grade.SMALL, None)  # type: ignore[arg-type]


# -- pricing (MOD-19..23) -------------------------------------------------------------------------


def test_flat_pricing_is_input_plus_declared_output_plus_the_depths_thinking() -> None:
    """MOD-19: at IMMEDIATE 100 + 200 = 300; at STANDARD input plus the output reserve; a sized
    rung is translated by the resolved entry."""
    assert resolved(ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 100, 200)).price() == 300
    standard = resolved(ModelBinding.flat(Grade.SMALL, Depth.STANDARD, 100, 200))
    assert standard.price() == 100 + THINK.output_reserve(200, Depth.STANDARD) == 100 + 200 + 2000
    sized = resolved(ModelBinding.flat(Grade.SMALL, Depth.IMMEDIATE, 1, OutputSize.EXTENDED))
    assert sized.price() == 1 + 16_000  # EXTENDED capped at the entry's max_output_tokens
    assert (sized.input_reservation, sized.output_reservation) == (1, 16_000)


def test_prompt_pricing_counts_under_the_resolved_spec_plus_declared_output() -> None:
    """MOD-20: the prompt's tokens under the resolved entry's tokenizer, plus the output."""
    binding = resolved(ModelBinding.prompt(Grade.SMALL, Depth.IMMEDIATE, "x" * 40, 60))
    assert binding.price() == THINK.count_tokens("x" * 40) + 60 == 100


def test_wired_pricing_matches_the_conversation_and_stamps_the_prior() -> None:
    """MOD-21: a wired binding prices at the conversation's tokens plus its output and thinking
    budgets; resolve stamps the entry on the conversation; input beyond the context window
    fails at pricing with "context window"."""
    conversation = Conversation(system="be brief", output=OutputSize.VERDICT)
    conversation.put_objective("say hi")
    binding = ModelBinding.wired(conversation, Grade.SMALL, Depth.QUICK)
    binding.resolve(THINK)
    assert conversation.prior_spec_id == "think"
    expected = conversation.input_tokens(THINK) + 1024 + THINK.thinking_budget(Depth.QUICK)
    assert binding.price() == expected
    crowded = Conversation(output=10)
    crowded.put_objective("y" * 51)
    over = ModelBinding.wired(crowded, Grade.SMALL, Depth.IMMEDIATE)
    over.resolve(CAT.spec("tiny"))
    with pytest.raises(UncorrectableError, match="context window"):
        over.price()


def test_a_pinned_form_sets_the_kind_and_validates_the_spec_at_mint() -> None:
    """MOD-22: the wrong kind, or a null spec or depth, fail at creation; is_pinned is true and
    is_resolved false until the gate resolves it; 64 + 16 at IMMEDIATE prices at 80;
    embeddings_pinned works the same."""
    with pytest.raises(ValueError, match="needs a ModelSpec"):
        ModelBinding.pinned(None, Depth.IMMEDIATE, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a depth is required"):
        ModelBinding.pinned(THINK, None, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pins EMBEDDINGS entries"):
        ModelBinding.embeddings_pinned(THINK, 5)
    pinned = ModelBinding.pinned(THINK, Depth.IMMEDIATE, 64, 16)
    assert pinned.is_pinned and not pinned.is_resolved and pinned.pinned_spec is THINK
    assert pinned.kind is ModelKind.LLM
    runtime(CAT).resolve(pinned)
    assert pinned.is_resolved and pinned.price() == 80
    emb = ModelBinding.embeddings_pinned(CAT.spec("emb"), 500)
    assert emb.is_pinned and emb.kind is ModelKind.EMBEDDINGS


def test_an_embeddings_binding_has_no_grade_and_prices_at_its_count() -> None:
    """MOD-23: no grade; the price is the declared count."""
    binding = ModelBinding.embeddings(500)
    assert binding.grade is None and binding.kind is ModelKind.EMBEDDINGS
    binding.resolve(CAT.spec("emb"))
    assert binding.price() == 500 and binding.output_reservation == 0


def test_an_output_declaration_is_a_rung_or_a_positive_count() -> None:
    """MOD-19: an OutputSize rung or a number of tokens, nothing else."""
    assert OutputDeclaration.of(OutputSize.COMPACT).budget(THINK) == 4096
    assert OutputDeclaration.of(300).budget(THINK) == 300
    with pytest.raises(ValueError, match="positive token count"):
        OutputDeclaration(0)


# -- Cost (OBS-26, OBS-27, MOD-31) ----------------------------------------------------------------


def test_cost_is_exact_to_a_billionth_per_currency() -> None:
    """OBS-26, MOD-31: a currency is 3 upper-case letters; amounts round to 1e-9, so a thousand
    0.001 sum to exactly 1; plus and exceeds refuse mixed currencies; exceeds is strict; the
    text shows 6 decimals and the currency."""
    with pytest.raises(ValueError, match="3 upper-case letters"):
        Cost(Decimal(1), "usd")
    total = Cost.zero("USD")
    for _ in range(1000):
        total = total.plus(Cost(Decimal("0.001"), "USD"))
    assert total == Cost(Decimal(1), "USD")
    assert Cost("0.0000000004", "USD").amount == 0
    euro = Cost(Decimal(1), "EUR")
    with pytest.raises(ValueError, match="never converted"):
        total.plus(euro)
    with pytest.raises(ValueError, match="never converted"):
        total.exceeds(euro)
    assert not total.exceeds(Cost(Decimal(1), "USD"))
    assert total.exceeds(Cost(Decimal("0.999999999"), "USD"))
    assert str(Cost(Decimal("1.5"), "EUR")) == "1.500000 EUR"


def test_cost_of_a_call_and_of_a_reservation() -> None:
    """OBS-27: uncached input at the input price, cache writes and reads at the entry's
    multipliers, output at the output price; embeddings on input only; reserved() counts
    nothing cached; an unpriced entry answers None, not zero."""
    cost = Cost.of(THINK, 1_000_000, 1_000_000, 1_000_000, 1_000_000)
    assert cost == Cost(Decimal("2") + Decimal("2.5") + Decimal("0.2") + Decimal("10"), "USD")
    assert Cost.of(CAT.spec("emb"), 1_000_000, output_tokens=1_000_000) == Cost("0.1", "USD")
    assert Cost.reserved(THINK, 500_000, 100_000) == Cost("2", "USD")
    assert Cost.of(CAT.spec("free"), 10) is None and Cost.reserved(CAT.spec("free"), 1, 1) is None
