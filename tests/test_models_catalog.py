"""The model catalog: grades, entries, where a catalog comes from, pins, translations."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nucleo_trio.errors import ConfigError, ModelNotFoundError
from nucleo_trio.models import (
    Depth,
    EntryStatus,
    Grade,
    Input,
    ModelCatalog,
    ModelKind,
    OutputSize,
    Situation,
    ThinkingMode,
    load_catalog,
)
from nucleo_trio.models.picker import DefaultModelPicker

from .model_doubles import catalog, entry, providers

# -- grades (MOD-01, MOD-02) -------------------------------------------------------------------


def test_the_rungs_run_from_micro_to_mega_and_a_grade_is_a_floor() -> None:
    """MOD-01: MICRO < SMALL < MEDIUM < LARGE < XL < MEGA; a grade is served by itself or any
    rung above, never below."""
    assert [g.value for g in Grade.rungs()] == ["MICRO", "SMALL", "MEDIUM", "LARGE", "XL", "MEGA"]
    assert Grade.LARGE.at_least() == (Grade.LARGE, Grade.XL, Grade.MEGA)
    assert Grade.MEGA.at_least() == (Grade.MEGA,)
    assert Grade.MICRO.rank < Grade.SMALL.rank < Grade.MEGA.rank
    assert Grade.XL.above() is Grade.MEGA and Grade.MEGA.above() is None


def test_ceiling_is_not_a_rung() -> None:
    """MOD-02: rungs() leaves CEILING out, at_least() refuses it, no entry carries it and it
    cannot be pinned under either spelling."""
    assert Grade.CEILING not in Grade.rungs()
    with pytest.raises(ValueError, match="CEILING is not a rung"):
        Grade.CEILING.at_least()
    with pytest.raises(ConfigError, match="'grade': CEILING is not a rung"):
        catalog(entry("top", grade="CEILING"))
    for key in ("ceiling", "CEILING"):
        with pytest.raises(ConfigError, match="CEILING cannot be pinned"):
            catalog(entry("a"), pins={key: ["a"]})


# -- entries (MOD-04, MOD-06) ---------------------------------------------------------------------


def test_an_entry_carries_its_fields_and_equals_by_id() -> None:
    """MOD-04: every field is read; the currency is inherited from provider_defaults; two
    entries with one id are equal and hash alike."""
    cat = catalog(
        entry(
            "gpt-small",
            identity="gpt",
            wire_model_id="gpt-4o-mini",
            supports_vision=True,
            thinking_mode="BUDGETED",
            input_price_per_million="0.15",
            output_price_per_million=0.6,
        ),
        provider_defaults={"fake-llm": {"currency": "USD"}},
    )
    spec = cat.spec("gpt-small")
    assert (spec.identity, spec.grade, spec.provider_key, spec.wire_model_id) == (
        "gpt",
        Grade.SMALL,
        "fake-llm",
        "gpt-4o-mini",
    )
    assert (spec.max_context_tokens, spec.max_output_tokens) == (100_000, 32_000)
    assert spec.supports_vision and not spec.supports_documents
    assert spec.thinking_mode is ThinkingMode.BUDGETED
    assert (spec.tpm, spec.rpm, spec.max_concurrent) == (1_000_000, 1_000, None)
    assert spec.input_price_per_million == Decimal("0.15")
    assert spec.output_price_per_million == Decimal("0.6")
    assert spec.currency == "USD" and spec.kind is ModelKind.LLM
    other = catalog(entry("gpt-small", grade="MEGA")).spec("gpt-small")
    assert other == spec and hash(other) == hash(spec) and other.grade is not spec.grade


def test_a_closed_entry_is_found_and_priced_but_never_picked() -> None:
    """MOD-06: the statuses; a closed entry stays findable and priced, nothing picks it;
    spec() of an unknown id raises ModelNotFoundError while find_spec() answers None."""
    assert [s.value for s in EntryStatus] == [
        "OPEN",
        "DISABLED",
        "DEPRECATED",
        "UNLISTED",
        "UNREACHABLE",
    ]
    cat = catalog(
        entry("old", status="DEPRECATED", input_price_per_million=1, currency="USD"),
        entry("new", input_price_per_million=2, currency="USD"),
    )
    old = cat.find_spec("old")
    assert old is not None and old.status is EntryStatus.DEPRECATED and old.is_priced
    picker = DefaultModelPicker(cat, providers("fake-llm"))
    assert picker.pick(Grade.SMALL, Situation()).id == "new"
    assert cat.find_spec("nope") is None
    with pytest.raises(ModelNotFoundError, match="no model entry 'nope'"):
        cat.spec("nope")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tpm": -3}, r"'x': field 'tpm': must be a positive int"),
        ({"max_context_tokens": None}, r"'x': field 'max_context_tokens': is required"),
        ({"grade": "HUGE"}, r"'x': field 'grade': .*not a grade"),
        ({"input_price_per_million": "cheap"}, r"'x': field 'input_price_per_million'"),
        ({"currency": "usd", "input_price_per_million": 1}, r"'x': field 'currency'"),
        ({"status": "GONE"}, r"'x': field 'status': 'GONE' is not one of"),
        ({"colour": "blue"}, r"'x': unknown field\(s\) \['colour'\]"),
        ({"supports_vision": "yes"}, r"'x': field 'supports_vision'"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_entry_and_the_field(
    fields: dict[str, Any], message: str
) -> None:
    """MOD-04: a bad field fails the load with an error naming the entry and the field."""
    with pytest.raises(ConfigError, match=message):
        catalog(entry("x", **fields))


# -- sources (MOD-05) -----------------------------------------------------------------------------


def test_a_named_file_is_the_whole_catalog_in_toml_or_json(tmp_path: Path) -> None:
    """MOD-05: the file named (by configuration or NUCLEO_TRIO_MODELS) is the whole catalog."""
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[provider_defaults.fake-llm]\ncurrency = "EUR"\n\n'
        '[[models]]\nid = "t"\ngrade = "MICRO"\nprovider_key = "fake-llm"\n'
        'max_context_tokens = 1000\nmax_output_tokens = 100\ninput_price_per_million = "1.5"\n\n'
        '[pins]\nMICRO = ["t"]\n'
    )
    from_toml = load_catalog(toml, environ={})
    assert [e.id for e in from_toml] == ["t"] and from_toml.spec("t").currency == "EUR"
    assert from_toml.pins(Grade.MICRO) == ("t",)
    js = tmp_path / "models.json"
    js.write_text(json.dumps({"models": [entry("j")]}))
    assert [e.id for e in load_catalog(environ={"NUCLEO_TRIO_MODELS": str(js)})] == ["j"]
    assert [e.id for e in load_catalog(js, environ={"NUCLEO_TRIO_MODELS": str(toml)})] == ["j"]


def test_load_refusals(tmp_path: Path) -> None:
    """MOD-05: an unreadable named file, a duplicate id, a price without a currency, and no
    source at all each fail the load."""
    with pytest.raises(ConfigError, match="cannot be read"):
        load_catalog(tmp_path / "missing.json", environ={})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="does not parse"):
        load_catalog(broken, environ={})
    with pytest.raises(ConfigError, match="'a' is declared twice"):
        catalog(entry("a"), entry("a"))
    with pytest.raises(ConfigError, match="'a': field 'currency': a price needs a currency"):
        catalog(entry("a", input_price_per_million=1))
    with pytest.raises(ConfigError, match="no model catalog"):
        load_catalog(environ={})


def test_a_dispatcher_config_names_its_catalog_file(tmp_path: Path) -> None:
    """MOD-05: DispatcherConfig.models names the file the dispatcher's models load on first
    use; an unknown key in a configuration is refused by name."""
    from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher

    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": [entry("configured")]}))
    dispatcher = JobDispatcher(DispatcherConfig.from_mapping({"models": str(path)}))
    assert [e.id for e in dispatcher.models.catalog] == ["configured"]
    with pytest.raises(ConfigError, match="model"):
        DispatcherConfig.from_mapping({"model": str(path)})


# -- pins (MOD-07) --------------------------------------------------------------------------------


def test_pins_rules() -> None:
    """MOD-07: per-grade arrays, first id the default; an id may name a higher grade, never a
    lower one, once per grade; the keys are the grades plus embeddings and decision; a decision
    entry under a grade pin fails."""
    base = [
        entry("s1"),
        entry("s2"),
        entry("m1", grade="MEDIUM"),
        entry("emb", grade=None, provider_key="fake-embeddings"),
        entry("dec", grade=None, provider_key="fake-decision", max_concurrent=None),
    ]
    good = catalog(*base, pins={"SMALL": ["s2", "m1", "s1"], "embeddings": ["emb"]})
    assert good.pins(Grade.SMALL) == ("s2", "m1", "s1") and good.pins("embeddings") == ("emb",)
    assert catalog(*base, pins={"small": ["s1"]}).pins(Grade.SMALL) == ("s1",)
    refusals = {
        "never a lower one": {"MEDIUM": ["s1"]},
        "appears twice": {"SMALL": ["s1", "s1"]},
        "not a pins key": {"fast": ["s1"]},
        "is a DECISION entry": {"SMALL": ["dec"]},
        "not an entry of the catalog": {"SMALL": ["ghost"]},
        "is a LLM entry": {"embeddings": ["s1"]},
    }
    for message, pins in refusals.items():
        with pytest.raises(ConfigError, match=message):
            catalog(*base, pins=pins)


# -- translations (MOD-25) ------------------------------------------------------------------------


def test_thinking_and_output_budgets_per_entry() -> None:
    """MOD-25, TOOL-11: thinking defaults to a share of max_output (QUICK 1/16, STANDARD 1/8, THOROUGH
    and ULTRA 1/4, never below 1024); overrides need a thinking mode, stay in range and are
    whole; the sized rungs default to 1024, 4096, 16384 and 32768 capped at max_output and MAX
    is the ceiling, overridable but for MAX; comfort context falls back to 128K."""
    spec = catalog(entry("t", thinking_mode="BUDGETED", max_output_tokens=32_000)).spec("t")
    assert [spec.thinking_budget(d) for d in Depth] == [0, 2000, 4000, 8000, 8000]
    small = catalog(entry("s", thinking_mode="ADAPTIVE", max_output_tokens=8000)).spec("s")
    assert small.thinking_budget(Depth.QUICK) == 1024
    plain = catalog(entry("p")).spec("p")
    assert plain.thinking_budget(Depth.THOROUGH) == 0
    assert [plain.output_budget(s) for s in OutputSize] == [1024, 4096, 16384, 32000, 32000]
    assert plain.comfort_context == 100_000
    assert catalog(entry("w", max_context_tokens=500_000)).spec("w").comfort_context == 128_000
    budgets = {"QUICK": 1024, "STANDARD": 2048, "THOROUGH": 4096, "ULTRA_THOROUGH": 8192}
    tuned = catalog(
        entry(
            "o",
            thinking_mode="BUDGETED",
            thinking_budgets=budgets,
            output_budgets={"VERDICT": 10, "COMPACT": 20, "STANDARD": 30, "EXTENDED": 40},
            comfort_context_tokens=5000,
        )
    ).spec("o")
    assert tuned.thinking_budget(Depth.STANDARD) == 2048 and tuned.comfort_context == 5000
    assert tuned.output_budget(OutputSize.COMPACT) == 20
    assert tuned.output_budget(OutputSize.MAX) == 32_000
    refused = {
        "needs a thinking_mode": {"thinking_budgets": budgets},
        "outside": {"thinking_mode": "BUDGETED", "thinking_budgets": {**budgets, "QUICK": 10}},
        "partial override": {"thinking_mode": "BUDGETED", "thinking_budgets": {"QUICK": 2000}},
        "MAX is the entry's ceiling": {"output_budgets": {"MAX": 5}},
        "comfort_context_tokens": {"comfort_context_tokens": 10**9},
    }
    for message, fields in refused.items():
        with pytest.raises(ConfigError, match=message):
            catalog(entry("bad", **fields))


def test_inputs_are_accepted_by_capability() -> None:
    """MOD-09: IMAGES needs supports_vision and DOCUMENTS supports_documents."""
    spec = catalog(entry("v", supports_vision=True)).spec("v")
    assert spec.accepts({Input.IMAGES}) and not spec.accepts({Input.DOCUMENTS})
    assert spec.accepts(())


# -- decision entries (MOD-32) -------------------------------------------------------------------


def test_decision_entry_rules() -> None:
    """MOD-32: a decision entry has no grade, states max_context_tokens and exactly one of tpm
    and max_concurrent; without rpm its request budget is tpm/1000; max_concurrent on any other
    kind fails the load."""
    from nucleo_trio.admission import RateLimiterRegistry

    dec = {"grade": None, "provider_key": "local-decision", "rpm": None}
    windowed = catalog(entry("d", **dec, tpm=50_000)).spec("d")
    assert windowed.kind is ModelKind.DECISION and windowed.grade is None
    assert RateLimiterRegistry().bucket(windowed).config.rpm == 50
    gated = catalog(entry("g", **dec, tpm=None, max_concurrent=2)).spec("g")
    assert gated.max_concurrent == 2
    with pytest.raises(ConfigError, match="'d': field 'grade': an decision entry has no grade"):
        catalog(entry("d", **{**dec, "grade": "SMALL"}))
    with pytest.raises(ConfigError, match="exactly one of tpm and max_concurrent"):
        catalog(entry("d", **dec, tpm=100, max_concurrent=2))
    with pytest.raises(ConfigError, match="exactly one of tpm and max_concurrent"):
        catalog(entry("d", **dec, tpm=None))
    with pytest.raises(ConfigError, match="'max_context_tokens': is required"):
        catalog(entry("d", **dec, max_context_tokens=None))
    with pytest.raises(ConfigError, match="only a decision entry may state max_concurrent"):
        catalog(entry("l", max_concurrent=4))


def test_from_mapping_refuses_unknown_top_level_keys() -> None:
    """MOD-05: a typo at the top of a catalog names itself."""
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['modles'\]"):
        ModelCatalog.from_mapping({"modles": []})


@pytest.mark.parametrize("name", ["nucleo_trio.models", "nucleo_trio.llm"])
def test_the_models_and_llm_packages_export_what_they_name(name: str) -> None:
    """Every name in the package's __all__ resolves, once each."""
    import importlib

    package = importlib.import_module(name)
    assert len(package.__all__) == len(set(package.__all__))
    assert [n for n in package.__all__ if not hasattr(package, n)] == []


def test_a_stated_zero_cache_multiplier_is_kept_not_replaced_by_the_default() -> None:
    """OBS-27: a cache priced at zero (a provider that does not charge for cache reads) is what
    the entry says; only an absent multiplier takes the default."""
    from decimal import Decimal

    from nucleo_trio.models import ModelCatalog
    from nucleo_trio.models.catalog import (
        DEFAULT_CACHE_READ_MULTIPLIER,
        DEFAULT_CACHE_WRITE_MULTIPLIER,
    )

    entry = {
        "grade": "SMALL",
        "provider_key": "openai",
        "max_context_tokens": 8000,
        "max_output_tokens": 1000,
    }
    catalog = ModelCatalog.from_mapping(
        {
            "models": [
                {
                    "id": "free-cache",
                    **entry,
                    "cache_read_multiplier": 0,
                    "cache_write_multiplier": 0,
                },
                {"id": "default-cache", **entry},
            ]
        },
        source="test",
    )
    free, default = catalog.spec("free-cache"), catalog.spec("default-cache")
    assert free.cache_read_multiplier == Decimal(0) == free.cache_write_multiplier
    assert default.cache_read_multiplier == DEFAULT_CACHE_READ_MULTIPLIER
    assert default.cache_write_multiplier == DEFAULT_CACHE_WRITE_MULTIPLIER
