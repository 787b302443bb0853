"""The model catalog: every entry a deployment may call, its prices, limits and pins.

An entry (:class:`ModelSpec`) is one model on one route: its grade, the provider that serves it
and the id it goes by on the wire, its context and output limits, its prices per million tokens
in one currency, and the quota that bounds it (tokens and requests per minute, with the most
requests its bucket lets go at once, or a cap on concurrent requests for a model served from a
machine the deployment owns). Two entries are the
same entry when their ids are equal.

A catalog is read from plain data: a TOML or JSON file, or the fragments plugins contribute
through the ``nucleo_trio_model_catalog`` hook (:func:`load_catalog` says which wins). The shape,
in TOML::

    [provider_defaults.openai]
    currency = "USD"

    [[models]]
    id = "gpt-small"
    grade = "SMALL"
    provider_key = "openai"
    wire_model_id = "gpt-4o-mini"
    max_context_tokens = 128000
    max_output_tokens = 16384
    tpm = 200000
    rpm = 500
    input_price_per_million = "0.15"
    output_price_per_million = "0.60"

    [pins]
    SMALL = ["gpt-small"]

Everything is checked when the catalog is built, and a malformed one is refused with a
:class:`~nucleo_trio.errors.ConfigError` that names the entry and the field at fault.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

from .._plugin_errors import PluginError, plugin_label
from .._serialization import read_settings_file
from ..errors import ConfigError, ModelNotFoundError
from .grades import (
    SIZED_RUNGS,
    THINKING_DEPTHS,
    Depth,
    EntryStatus,
    Grade,
    Input,
    ModelKind,
    OutputSize,
    ThinkingMode,
)

if TYPE_CHECKING:
    import pluggy

__all__ = [
    "CATALOG_ENV_VAR",
    "DEFAULT_CACHE_READ_MULTIPLIER",
    "DEFAULT_CACHE_WRITE_MULTIPLIER",
    "DEFAULT_COMFORT_CONTEXT",
    "MIN_THINKING_BUDGET",
    "PIN_DECISION",
    "PIN_EMBEDDINGS",
    "ModelCatalog",
    "ModelSpec",
    "ProviderDefaults",
    "catalog_fragments",
    "load_catalog",
]

log = logging.getLogger("nucleo_trio.models.catalog")

CATALOG_ENV_VAR = "NUCLEO_TRIO_MODELS"
"""The environment variable that names a catalog file when the configuration names none."""

PIN_EMBEDDINGS = "embeddings"
"""The pins key of the embeddings seat (``[pins] embeddings = ["..."]``)."""
PIN_DECISION = "decision"
"""The pins key of the decision seat (``[pins] decision = ["..."]``)."""

MIN_THINKING_BUDGET = 1024  # MOD-25
"""No thinking budget, default or override, is below this many tokens."""

DEFAULT_COMFORT_CONTEXT = 128_000
"""The context a conversation is kept under when the entry states no ``comfort_context_tokens``."""

DEFAULT_CACHE_WRITE_MULTIPLIER = Decimal("1.25")
"""A token written to the provider's prompt cache costs this many times the input price,
unless the entry states its own ``cache_write_multiplier``."""
DEFAULT_CACHE_READ_MULTIPLIER = Decimal("0.1")
"""A token read from the provider's prompt cache costs this many times the input price,
unless the entry states its own ``cache_read_multiplier``."""

_THINKING_SHARE: Mapping[Depth, int] = {
    Depth.QUICK: 16,
    Depth.STANDARD: 8,
    Depth.THOROUGH: 4,
    Depth.ULTRA_THOROUGH: 4,
}
"""The default thinking budget is max_output_tokens divided by this."""  # MOD-25

_CURRENCY = re.compile(r"^[A-Z]{3}$")


@attrs.frozen(eq=False, kw_only=True)
class ModelSpec:
    """One catalog entry. Equal to, and hashed as, any entry with the same ``id``.

    Build entries through :meth:`ModelCatalog.from_mapping` (which checks every field and
    names the one at fault); the constructor trusts its caller.
    """

    # MOD-04: the fields; equality and hashing use the id alone.
    id: str
    """The entry's name, unique in the catalog; pins, pinned bindings and the spend ledger
    name the entry by it."""
    identity: str
    """The model behind the entry: entries of one identity are routes to the same model. The
    picker fails over between them, and an envelope's ``denied_identities`` denies them all. A
    catalog file defaults it to ``id``."""
    grade: Grade | None
    """The entry's rung (never ``CEILING``); ``None`` for an embeddings or decision entry."""
    provider_key: str
    """The key of the :class:`Provider` that calls the entry. Its suffix gives the entry's
    kind: ``-embeddings``, ``-decision``, else a language model."""
    wire_model_id: str
    """The model id sent to the provider with each request. A catalog file defaults it to
    ``id``."""
    max_context_tokens: int
    """The context window, in tokens: the most one request may send. Required."""
    max_output_tokens: int = 0
    """The most tokens one answer may be. The output rungs are capped at it and the default
    thinking budgets are shares of it. Required for a language model; 0 for an entry that
    writes no text."""
    supports_vision: bool = False
    """Whether the entry accepts images (``Input.IMAGES``). Default false."""
    supports_documents: bool = False
    """Whether the entry accepts documents (``Input.DOCUMENTS``). Default false."""
    thinking_mode: ThinkingMode = ThinkingMode.NONE
    """Whether and how the entry thinks; with ``NONE``, the default, every depth gets a
    thinking budget of 0."""
    tpm: int | None = None
    """The provider's quota in tokens per minute, which sizes the entry's token bucket.
    ``None``: the entry has no bucket and its calls are not admitted on tokens."""
    rpm: int | None = None
    """The provider's quota in requests per minute. ``None``: the bucket allows
    ``tpm // 1000`` requests a minute. A limit the provider publishes on a reply may lower
    the bucket, never raise it above this."""
    burst: int | None = None
    """The most requests the entry's bucket lets go at once; ``None``: the registry's default
    (one at a time, so no sliding minute holds more than ``rpm``)."""
    max_concurrent: int | None = None
    """For a decision entry served from a machine the deployment owns: the most requests in
    flight at once, admitted through a gate rather than a token bucket. Only a decision entry
    may state it, and then instead of ``tpm``."""
    input_price_per_million: Decimal | None = None
    """The price of a million uncached input tokens, in ``currency``. ``None``: the entry is
    unpriced, and its calls are recorded without a cost."""
    output_price_per_million: Decimal | None = None
    """The price of a million output tokens, in ``currency``; ``None`` counts as 0. It needs an
    input price beside it."""
    currency: str | None = None
    """The ISO 4217 code of the prices (``"USD"``), stated on the entry or inherited from its
    provider's :class:`ProviderDefaults`. Required once a price is stated."""
    status: EntryStatus = EntryStatus.OPEN
    """Whether a picker may choose the entry; only ``OPEN``, the default, may be chosen."""
    requires_data_share: bool = False
    """Whether calling the entry shares the data sent with its provider beyond the call. An
    envelope that does not allow data sharing (the default one) refuses the entry. Default
    false."""
    eligible_for_failover: bool = True
    """Whether the picker may move traffic to this entry from an overloaded or slowed route of
    the same ``identity``. Default true."""
    thinking_budgets: Mapping[Depth, int] | None = None
    """Thinking budgets in tokens that replace the defaults, one for each of QUICK, STANDARD,
    THOROUGH and ULTRA_THOROUGH, each from 1,024 to ``max_output_tokens``. ``None``: the
    defaults (:meth:`thinking_budget`)."""
    output_budgets: Mapping[OutputSize, int] | None = None
    """Output budgets in tokens that replace the defaults, one for each of VERDICT, COMPACT,
    STANDARD and EXTENDED, each from 1 to ``max_output_tokens`` (``MAX`` is never overridden).
    ``None``: the defaults, capped at ``max_output_tokens``."""
    comfort_context_tokens: int | None = None
    """The context, in tokens, a conversation on this entry is kept under, at most
    ``max_context_tokens``. ``None``: 128,000 or the window, whichever is smaller
    (:attr:`comfort_context`)."""
    cache_write_multiplier: Decimal = DEFAULT_CACHE_WRITE_MULTIPLIER
    """The price of a token written to the prompt cache, as a multiple of the input price;
    1.25 by default."""
    cache_read_multiplier: Decimal = DEFAULT_CACHE_READ_MULTIPLIER
    """The price of a token read from the prompt cache, as a multiple of the input price; 0.1
    by default."""
    chars_per_token: float = 4.0
    """The characters a token stands for when :meth:`count_tokens` estimates a text; 4.0 by
    default."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelSpec):
            return NotImplemented
        return self.id == other.id

    def __hash__(self) -> int:
        return hash(("ModelSpec", self.id))

    # -- what it is ---------------------------------------------------------------------------
    @property
    def kind(self) -> ModelKind:
        """LLM, EMBEDDINGS or DECISION, from the provider key's suffix."""
        return ModelKind.of_provider(self.provider_key)

    @property
    def is_open(self) -> bool:
        """Whether a picker may choose it: only an OPEN entry is."""
        return self.status is EntryStatus.OPEN

    @property
    def is_deprecated(self) -> bool:
        """Whether the status is ``DEPRECATED``."""
        return self.status is EntryStatus.DEPRECATED

    @property
    def is_priced(self) -> bool:
        """Whether the entry has an input price, so its calls can be costed."""
        return self.input_price_per_million is not None

    @property
    def price_per_million(self) -> Decimal | None:
        """Input plus output price per million tokens, the key by which the default picker
        sorts a grade's unpinned entries, cheapest first; ``None`` for an unpriced entry."""
        if self.input_price_per_million is None:
            return None
        return self.input_price_per_million + (self.output_price_per_million or Decimal(0))

    def accepts(self, inputs: Iterable[Input]) -> bool:
        """Whether it accepts every declared input: images need ``supports_vision``,
        documents ``supports_documents``."""
        for carried in inputs:
            if carried is Input.IMAGES and not self.supports_vision:
                return False
            if carried is Input.DOCUMENTS and not self.supports_documents:
                return False
        return True

    # -- translations (MOD-25) ----------------------------------------------------------------
    def output_budget(self, size: OutputSize | int) -> int:
        """The tokens an output declaration stands for on this entry: a sized rung's override
        or default capped at ``max_output_tokens``, ``MAX`` the ceiling itself, a number of
        tokens as it is (capped likewise)."""
        if isinstance(size, OutputSize):
            if size is OutputSize.MAX:
                return self.max_output_tokens
            if self.output_budgets is not None:
                return self.output_budgets[size]
            assert size.default_tokens is not None
            return min(size.default_tokens, self.max_output_tokens)
        return min(size, self.max_output_tokens) if self.max_output_tokens else size

    def thinking_budget(self, depth: Depth) -> int:
        """Tokens of thinking at ``depth``: none at IMMEDIATE or for an entry that does not
        think; else the override, or a share of ``max_output_tokens`` (QUICK 1/16, STANDARD
        1/8, THOROUGH and ULTRA_THOROUGH 1/4), never below 1,024."""
        if depth is Depth.IMMEDIATE or self.thinking_mode is ThinkingMode.NONE:
            return 0
        if self.thinking_budgets is not None:
            return self.thinking_budgets[depth]
        return max(MIN_THINKING_BUDGET, self.max_output_tokens // _THINKING_SHARE[depth])

    def output_reserve(self, size: OutputSize | int, depth: Depth) -> int:
        """What an answer may take at most: the output budget plus the depth's thinking."""
        return self.output_budget(size) + self.thinking_budget(depth)

    @property
    def comfort_context(self) -> int:
        """The context a conversation is kept under: the entry's own, else 128K (capped at the
        window)."""
        if self.comfort_context_tokens is not None:
            return self.comfort_context_tokens
        return min(DEFAULT_COMFORT_CONTEXT, self.max_context_tokens)

    def count_tokens(self, text: str) -> int:
        """The tokens ``text`` counts for under this entry's tokenizer (an estimate by
        characters per token; a provider that counts exactly overrides it through its client)."""
        return math.ceil(len(text) / self.chars_per_token) if text else 0

    def __repr__(self) -> str:
        grade = self.grade.value if self.grade is not None else self.kind.value
        return f"ModelSpec({self.id!r}, {grade}, {self.provider_key})"


@attrs.frozen
class ProviderDefaults:
    """What every entry of one provider inherits unless it states its own."""

    currency: str | None = None
    """The ISO 4217 code of the provider's prices (``"USD"``); ``None``: entries state their
    own."""


class ModelCatalog:
    """Every entry of a deployment, in catalog order, and its pins.

    :meth:`spec` answers an entry by id and raises :class:`~nucleo_trio.errors.ModelNotFoundError`
    for an unknown one; :meth:`find_spec` answers ``None`` instead. A closed entry (any status
    but OPEN) is still found and still priced, but no picker chooses it.

    The constructor refuses an id declared twice and pins that break the pin rules, with a
    :class:`~nucleo_trio.errors.ConfigError`; to read a file, use :meth:`load` or
    :func:`load_catalog`.
    """

    def __init__(
        self,
        entries: Sequence[ModelSpec],
        pins: Mapping[str, Sequence[str]] | None = None,
        *,
        source: str = "the catalog",
    ) -> None:
        self.source = source
        """Where the catalog came from (a file name, the plugins' fragments), as its errors
        name it."""
        by_id: dict[str, ModelSpec] = {}
        for entry in entries:
            if entry.id in by_id:
                raise ConfigError(f"{source}: model entry {entry.id!r} is declared twice")
            by_id[entry.id] = entry
        self._entries = tuple(entries)
        self._by_id: Mapping[str, ModelSpec] = MappingProxyType(by_id)
        self._pins: Mapping[str, tuple[str, ...]] = MappingProxyType(
            _check_pins(pins or {}, by_id, source)
        )

    # -- reading ----------------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[ModelSpec, ...]:
        """Every entry, any status, in catalog order."""
        return self._entries

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, spec_id: object) -> bool:
        return spec_id in self._by_id

    def spec(self, spec_id: str) -> ModelSpec:
        """The entry ``spec_id``, closed or not; an unknown id is a
        :class:`~nucleo_trio.errors.ModelNotFoundError` that lists the known ones."""
        found = self._by_id.get(spec_id)
        if found is None:
            known = ", ".join(sorted(self._by_id)) or "none"
            raise ModelNotFoundError(
                f"no model entry {spec_id!r} in {self.source} (entries: {known})",
                llm_message=f"There is no model called {spec_id!r}.",
            )
        return found

    def find_spec(self, spec_id: str | None) -> ModelSpec | None:
        """The entry ``spec_id``, or ``None`` (closed entries included)."""
        return None if spec_id is None else self._by_id.get(spec_id)

    def of_grade(self, grade: Grade) -> tuple[ModelSpec, ...]:
        """The LLM entries of exactly ``grade``, any status, in catalog order."""
        return tuple(e for e in self._entries if e.grade is grade and e.kind is ModelKind.LLM)

    def of_kind(self, kind: ModelKind) -> tuple[ModelSpec, ...]:
        """The entries of ``kind``, any status, in catalog order."""
        return tuple(e for e in self._entries if e.kind is kind)

    def pins(self, key: Grade | str) -> tuple[str, ...]:
        """The pinned ids of a grade (or ``"embeddings"``, ``"decision"``), preferred first."""
        name = key.value if isinstance(key, Grade) else key
        return self._pins.get(name, ())

    @property
    def all_pins(self) -> Mapping[str, tuple[str, ...]]:
        """Every pins key (a grade's name, ``"embeddings"``, ``"decision"``) with its ids,
        preferred first; read-only."""
        return self._pins

    # -- building ---------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "the catalog") -> ModelCatalog:
        """Build a catalog from plain data (a parsed file); every fault is a ConfigError
        naming the entry and the field."""
        entries, pins = _parse(data, source, allow_pins=True)
        return cls(entries, pins, source=source)

    @classmethod
    def from_fragments(cls, fragments: Sequence[tuple[Mapping[str, Any], str]]) -> ModelCatalog:
        """Merge the fragments plugins contribute, each with the label of its plugin. A
        fragment may not declare pins, and an id declared by two fragments is refused."""
        entries: list[ModelSpec] = []
        seen: dict[str, str] = {}
        for data, label in fragments:
            found, _ = _parse(data, label, allow_pins=False)
            for entry in found:
                if entry.id in seen:
                    raise ConfigError(
                        f"model entry {entry.id!r} is declared by two catalog fragments: "
                        f"{seen[entry.id]} and {label}"
                    )
                seen[entry.id] = label
                entries.append(entry)
        labels = ", ".join(label for _, label in fragments)
        return cls(entries, {}, source=f"the catalog fragments of {labels}")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelCatalog:
        """Read the catalog file ``path`` (``.toml``, else JSON). A file that cannot be read or
        parsed is refused naming it."""
        where = Path(path)
        data = read_settings_file(where, "the model catalog")
        return cls.from_mapping(data, source=f"the model catalog {str(where)!r}")

    def __repr__(self) -> str:
        return f"<ModelCatalog {len(self._entries)} entries from {self.source}>"


def load_catalog(
    path: str | os.PathLike[str] | None = None,
    *,
    plugins: pluggy.PluginManager | None = None,
    environ: Mapping[str, str] | None = None,
) -> ModelCatalog:
    """The deployment's catalog, from the first source that exists:

    1. the file ``path`` (a dispatcher passes its configuration's ``models``);
    2. else the file named by the ``NUCLEO_TRIO_MODELS`` environment variable;
    3. a file found either way is the whole catalog;
    4. else every fragment the plugins contribute through ``nucleo_trio_model_catalog``.

    With neither a file nor a fragment the load fails with a
    :class:`~nucleo_trio.errors.ConfigError` that says where it looked; a file that cannot be
    read or parsed, or a malformed catalog, is a ConfigError naming it. ``environ`` replaces
    the process environment.
    """
    # MOD-05: the order of the sources.
    env = os.environ if environ is None else environ
    named = path if path is not None else env.get(CATALOG_ENV_VAR) or None
    if named is not None:
        return ModelCatalog.load(named)
    fragments = catalog_fragments(plugins) if plugins is not None else []
    if fragments:
        return ModelCatalog.from_fragments(fragments)
    raise ConfigError(
        "no model catalog: name a catalog file in the dispatcher's configuration (models = "
        f'"models.toml") or in the {CATALOG_ENV_VAR} environment variable, or install a plugin '
        "that contributes entries through nucleo_trio_model_catalog"
    )


def _or_default(stated: Decimal | None, default: Decimal) -> Decimal:
    """What the entry states, ``0`` included (a free cache), else ``default``."""
    return default if stated is None else stated


def catalog_fragments(plugins: pluggy.PluginManager) -> list[tuple[Mapping[str, Any], str]]:
    """Every fragment the plugins contribute, each with its plugin's label, in registration
    order (the built-ins first)."""
    fragments: list[tuple[Mapping[str, Any], str]] = []
    for impl in plugins.hook.nucleo_trio_model_catalog.get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        label = f"plugin {plugin_label(plugins, impl.plugin)}"
        try:
            answer = impl.function()
        except Exception as exc:
            raise PluginError(
                f"{label} failed answering nucleo_trio_model_catalog: {exc!r}"
            ) from exc
        if answer is None:
            continue
        if not isinstance(answer, Mapping):
            raise PluginError(
                f"{label} answered nucleo_trio_model_catalog with {type(answer).__name__}, "
                "expected a catalog fragment (a mapping with a 'models' list)"
            )
        fragments.append((answer, label))
    return fragments


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_TOP_KEYS = {"models", "pins", "provider_defaults"}
_ENTRY_KEYS = {field.name for field in attrs.fields(ModelSpec)}


class _Entry:
    """Reads one entry's fields, each fault a ConfigError naming the entry and the field."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def fail(self, field: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: field {field!r}: {problem}")

    def text(self, field: str, default: str | None = None) -> str:
        value = self.data.get(field, default)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field, f"must be a non-blank string, got {value!r}")
        return value

    def count(self, field: str, *, required: bool = False) -> int | None:
        value = self.data.get(field)
        if value is None:
            if required:
                raise self.fail(field, "is required")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(field, f"must be a positive int, got {value!r}")
        return value

    def flag(self, field: str, default: bool = False) -> bool:
        value = self.data.get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {value!r}")
        return value

    def decimal(self, field: str) -> Decimal | None:
        value = self.data.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            raise self.fail(field, f"must be a number, got {value!r}")
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise self.fail(field, f"must be a number, got {value!r}") from None
        if not number.is_finite() or number < 0:
            raise self.fail(field, f"must be a finite number >= 0, got {value!r}")
        return number

    def enum(self, field: str, cls: type[Any], default: Any) -> Any:
        value = self.data.get(field)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        names = ", ".join(cls.__members__)
        raise self.fail(field, f"{value!r} is not one of {names}")


def _parse(
    data: Mapping[str, Any], source: str, *, allow_pins: bool
) -> tuple[list[ModelSpec], Mapping[str, Sequence[str]]]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a table with a 'models' list")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; known: {sorted(_TOP_KEYS)}")
    if not allow_pins and data.get("pins"):
        raise ConfigError(
            f"{source}: a catalog fragment may not declare pins; pins belong to the deployment's "
            "own catalog file"
        )
    defaults = _provider_defaults(data.get("provider_defaults") or {}, source)
    models = data.get("models")
    if not isinstance(models, list):
        raise ConfigError(f"{source}: 'models' must be a list of entries, got {models!r}")
    entries = [
        _entry(raw, defaults, f"{source}: model entry {_name_of(raw, i)}")
        for i, raw in enumerate(models)
    ]
    pins = data.get("pins") or {}
    if not isinstance(pins, Mapping):
        raise ConfigError(f"{source}: 'pins' must be a table of grade -> [ids], got {pins!r}")
    return entries, pins


def _name_of(raw: object, index: int) -> str:
    if isinstance(raw, Mapping) and isinstance(raw.get("id"), str) and raw["id"].strip():
        return repr(raw["id"])
    return f"#{index + 1}"


def _provider_defaults(raw: object, source: str) -> dict[str, ProviderDefaults]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: 'provider_defaults' must be a table per provider key")
    found: dict[str, ProviderDefaults] = {}
    for key, settings in raw.items():
        if not isinstance(settings, Mapping) or set(settings) - {"currency"}:
            raise ConfigError(
                f"{source}: provider_defaults {key!r}: expected a table with 'currency', "
                f"got {settings!r}"
            )
        currency = settings.get("currency")
        if currency is not None and (
            not isinstance(currency, str) or not _CURRENCY.match(currency)
        ):
            raise ConfigError(
                f"{source}: provider_defaults {key!r}: field 'currency': must be an ISO 4217 "
                f"code of 3 upper-case letters, got {currency!r}"
            )
        found[str(key)] = ProviderDefaults(currency)
    return found


def _entry(raw: object, defaults: Mapping[str, ProviderDefaults], where: str) -> ModelSpec:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a table of fields, got {raw!r}")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}")
    e = _Entry(raw, where)
    spec_id = e.text("id")
    provider_key = e.text("provider_key")
    kind = ModelKind.of_provider(provider_key)
    grade: Grade | None = None
    if kind is ModelKind.LLM:
        if raw.get("grade") is None:
            raise e.fail("grade", "is required for a language model entry")
        try:
            grade = Grade.parse(raw["grade"], what="grade")
        except ValueError as exc:
            raise e.fail("grade", str(exc)) from None
        if grade is Grade.CEILING:
            raise e.fail("grade", "CEILING is not a rung; an entry carries a rung (MICRO..MEGA)")
    elif raw.get("grade") is not None:
        raise e.fail("grade", f"an {kind.value.lower()} entry has no grade")
    max_context = e.count("max_context_tokens", required=True)
    assert max_context is not None
    max_output = e.count("max_output_tokens", required=kind is ModelKind.LLM) or 0
    tpm, rpm, max_concurrent = e.count("tpm"), e.count("rpm"), e.count("max_concurrent")
    if kind is ModelKind.DECISION:
        if (tpm is None) == (max_concurrent is None):
            raise e.fail(
                "tpm",
                "a decision entry states exactly one of tpm and max_concurrent "
                f"(got tpm={tpm!r}, max_concurrent={max_concurrent!r})",
            )
    elif max_concurrent is not None:
        raise e.fail("max_concurrent", "only a decision entry may state max_concurrent")
    burst = e.count("burst")
    if burst is not None:
        if tpm is None:
            raise e.fail(
                "burst",
                "bounds the requests a token bucket lets go at once, and an entry without "
                "tpm has no bucket",
            )
        if rpm is not None and burst > rpm:
            raise e.fail(
                "burst", f"must be at most rpm ({rpm}): a minute never holds more, got {burst}"
            )
    input_price = e.decimal("input_price_per_million")
    output_price = e.decimal("output_price_per_million")
    currency = raw.get("currency")
    if currency is None:
        currency = defaults.get(provider_key, ProviderDefaults()).currency
    if currency is not None and (not isinstance(currency, str) or not _CURRENCY.match(currency)):
        raise e.fail(
            "currency", f"must be an ISO 4217 code of 3 upper-case letters, got {currency!r}"
        )
    if (input_price is not None or output_price is not None) and currency is None:
        raise e.fail(
            "currency",
            "a price needs a currency: state one on the entry or in provider_defaults",
        )
    if output_price is not None and input_price is None:
        raise e.fail("input_price_per_million", "an output price needs an input price too")
    thinking_mode = e.enum("thinking_mode", ThinkingMode, ThinkingMode.NONE)
    chars = raw.get("chars_per_token", 4.0)
    if isinstance(chars, bool) or not isinstance(chars, int | float) or not chars > 0:
        raise e.fail("chars_per_token", f"must be a positive number, got {chars!r}")
    spec = ModelSpec(
        id=spec_id,
        identity=e.text("identity", spec_id),
        grade=grade,
        provider_key=provider_key,
        wire_model_id=e.text("wire_model_id", spec_id),
        max_context_tokens=max_context,
        max_output_tokens=max_output,
        supports_vision=e.flag("supports_vision"),
        supports_documents=e.flag("supports_documents"),
        thinking_mode=thinking_mode,
        tpm=tpm,
        rpm=rpm,
        burst=burst,
        max_concurrent=max_concurrent,
        input_price_per_million=input_price,
        output_price_per_million=output_price,
        currency=currency,
        status=e.enum("status", EntryStatus, EntryStatus.OPEN),
        requires_data_share=e.flag("requires_data_share"),
        eligible_for_failover=e.flag("eligible_for_failover", True),
        thinking_budgets=_thinking_budgets(e, thinking_mode, max_output),
        output_budgets=_output_budgets(e, max_output),
        comfort_context_tokens=_comfort(e, max_context),
        cache_write_multiplier=_or_default(
            e.decimal("cache_write_multiplier"), DEFAULT_CACHE_WRITE_MULTIPLIER
        ),
        cache_read_multiplier=_or_default(
            e.decimal("cache_read_multiplier"), DEFAULT_CACHE_READ_MULTIPLIER
        ),
        chars_per_token=float(chars),
    )
    return spec


def _thinking_budgets(e: _Entry, mode: ThinkingMode, max_output: int) -> Mapping[Depth, int] | None:
    raw = e.data.get("thinking_budgets")
    if raw is None:
        return None
    if mode is ThinkingMode.NONE:
        raise e.fail("thinking_budgets", "an override needs a thinking_mode other than NONE")
    budgets = _rung_table(e, "thinking_budgets", raw, {d.value: d for d in THINKING_DEPTHS})
    for depth, tokens in budgets.items():
        if not MIN_THINKING_BUDGET <= tokens <= max_output:
            raise e.fail(
                "thinking_budgets",
                f"{depth.value} = {tokens} is outside [{MIN_THINKING_BUDGET}, {max_output}]",
            )
    return MappingProxyType(budgets)


def _output_budgets(e: _Entry, max_output: int) -> Mapping[OutputSize, int] | None:
    raw = e.data.get("output_budgets")
    if raw is None:
        return None
    if isinstance(raw, Mapping) and any(str(k).upper() == "MAX" for k in raw):
        raise e.fail("output_budgets", "MAX is the entry's ceiling and can never be overridden")
    budgets = _rung_table(e, "output_budgets", raw, {s.name: s for s in SIZED_RUNGS})
    for size, tokens in budgets.items():
        if not 1 <= tokens <= max_output:
            raise e.fail("output_budgets", f"{size.name} = {tokens} is outside [1, {max_output}]")
    return MappingProxyType(budgets)


def _rung_table(e: _Entry, field: str, raw: object, names: Mapping[str, Any]) -> dict[Any, int]:
    if not isinstance(raw, Mapping):
        raise e.fail(field, f"must be a table of rung -> tokens, got {raw!r}")
    table: dict[Any, int] = {}
    for key, tokens in raw.items():
        rung = names.get(str(key).upper())
        if rung is None:
            raise e.fail(field, f"{key!r} is not one of {', '.join(names)}")
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise e.fail(field, f"{key} must be a whole number of tokens, got {tokens!r}")
        table[rung] = tokens
    missing = [name for name, rung in names.items() if rung not in table]
    if missing:
        raise e.fail(field, f"a partial override is refused: {', '.join(missing)} missing")
    return table


def _comfort(e: _Entry, max_context: int) -> int | None:
    value = e.data.get("comfort_context_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_context:
        raise e.fail("comfort_context_tokens", f"must be within [1, {max_context}], got {value!r}")
    return value


def _check_pins(
    pins: Mapping[str, Sequence[str]], by_id: Mapping[str, ModelSpec], source: str
) -> dict[str, tuple[str, ...]]:
    """The pins rules (MOD-07): valid keys, known ids, each once, never a lower grade, and the
    right kind under each key."""
    checked: dict[str, tuple[str, ...]] = {}
    for raw_key, ids in pins.items():
        key = str(raw_key)
        where = f"{source}: pins {key!r}"
        if key in (PIN_EMBEDDINGS, PIN_DECISION):
            grade: Grade | None = None
            wanted = ModelKind.EMBEDDINGS if key == PIN_EMBEDDINGS else ModelKind.DECISION
        else:
            if key.upper() == Grade.CEILING.value:
                raise ConfigError(f"{where}: CEILING cannot be pinned; it is not a rung")
            try:
                grade = Grade.parse(key, what="pins key")
            except ValueError:
                raise ConfigError(
                    f"{where}: not a pins key; the keys are the grades "
                    f"({', '.join(g.value for g in Grade.rungs())}), {PIN_EMBEDDINGS!r} and "
                    f"{PIN_DECISION!r}"
                ) from None
            key = grade.value
            wanted = ModelKind.LLM
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ConfigError(f"{where}: must be a list of entry ids, got {ids!r}")
        seen: set[str] = set()
        for spec_id in ids:
            entry = by_id.get(spec_id) if isinstance(spec_id, str) else None
            if entry is None:
                raise ConfigError(f"{where}: {spec_id!r} is not an entry of the catalog")
            if spec_id in seen:
                raise ConfigError(f"{where}: {spec_id!r} appears twice")
            seen.add(spec_id)
            if entry.kind is not wanted:
                raise ConfigError(
                    f"{where}: {spec_id!r} is a {entry.kind.value} entry; this key pins "
                    f"{wanted.value} entries"
                )
            if grade is not None and entry.grade is not None and entry.grade.rank < grade.rank:
                raise ConfigError(
                    f"{where}: {spec_id!r} is a {entry.grade.value} entry; a pin may name a "
                    "higher grade, never a lower one"
                )
        if key in checked:
            raise ConfigError(f"{where}: the key is given twice")
        checked[key] = tuple(ids)
    return checked
