"""The words a job uses to say what model it needs: a grade, a depth, an output size, inputs.

A job never names a model. It names a **grade** (how capable a model must be at least), a
**depth** (how much thinking the work deserves) and an **output size** (how long the answer may
be); the deployment's catalog and picker turn those words into an entry. The grade is a floor:
MICRO < SMALL < MEDIUM < LARGE < XL < MEGA, and a seat may be served by its own rung or any
rung above, never one below. ``CEILING`` is not a rung but a request for the best the
deployment can serve today.
"""

from __future__ import annotations

import enum

__all__ = [
    "SIZED_RUNGS",
    "THINKING_DEPTHS",
    "Depth",
    "EntryStatus",
    "Grade",
    "Input",
    "ModelKind",
    "OutputSize",
    "ThinkingMode",
]


class Grade(enum.Enum):
    """A model's capability rung, or ``CEILING`` for the highest rung the deployment serves."""

    MICRO = "MICRO"
    """The lowest rung: the smallest, cheapest models."""
    SMALL = "SMALL"
    """The second rung, above MICRO."""
    MEDIUM = "MEDIUM"
    """The third rung, above SMALL."""
    LARGE = "LARGE"
    """The fourth rung, above MEDIUM."""
    XL = "XL"
    """The fifth rung, above LARGE."""
    MEGA = "MEGA"
    """The highest rung: the most capable models."""
    CEILING = "CEILING"
    """Not a rung: the highest rung with a callable entry, worked out by the picker when the
    seat is resolved. No catalog entry or pin carries it."""

    # MOD-01: the rungs are a floor, lowest first; MOD-02: CEILING is not among them.
    @classmethod
    def rungs(cls) -> tuple[Grade, ...]:
        """The six rungs, lowest first; ``CEILING`` is not among them."""
        return _RUNGS

    @property
    def is_rung(self) -> bool:
        """``True`` for MICRO to MEGA, ``False`` for ``CEILING``."""
        return self is not Grade.CEILING

    @property
    def rank(self) -> int:
        """The rung's position, 0 for MICRO; ``CEILING`` has none and is refused."""
        self._refuse_ceiling("rank")
        return _RUNGS.index(self)

    def at_least(self) -> tuple[Grade, ...]:
        """This rung and every rung above it, lowest first: the rungs that may serve it."""
        self._refuse_ceiling("at_least")
        return _RUNGS[_RUNGS.index(self) :]

    def above(self) -> Grade | None:
        """The next rung up, ``None`` above MEGA."""
        rank = self.rank
        return _RUNGS[rank + 1] if rank + 1 < len(_RUNGS) else None

    def _refuse_ceiling(self, what: str) -> None:
        if self is Grade.CEILING:
            raise ValueError(
                f"Grade.CEILING is not a rung ({what}): it stands for the highest rung with a "
                "callable entry, which the picker works out (picker.ceiling())"
            )

    @classmethod
    def parse(cls, value: object, *, what: str = "grade") -> Grade:
        """The grade named ``value`` (any case); anything else is a ValueError naming it."""
        if isinstance(value, Grade):
            return value
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        names = ", ".join(g.value for g in _RUNGS)
        raise ValueError(f"{what}: {value!r} is not a grade; the rungs are {names}")


_RUNGS: tuple[Grade, ...] = (
    Grade.MICRO,
    Grade.SMALL,
    Grade.MEDIUM,
    Grade.LARGE,
    Grade.XL,
    Grade.MEGA,
)


class Depth(enum.Enum):
    """How much thinking the work deserves; each entry translates it to a thinking budget."""

    IMMEDIATE = "IMMEDIATE"
    """No thinking: the entry answers straight away (a thinking budget of 0)."""
    QUICK = "QUICK"
    """A little thinking: by default a sixteenth of the entry's ``max_output_tokens``."""
    STANDARD = "STANDARD"
    """The usual depth: by default an eighth of the entry's ``max_output_tokens``."""
    THOROUGH = "THOROUGH"
    """Careful work: by default a quarter of the entry's ``max_output_tokens``."""
    ULTRA_THOROUGH = "ULTRA_THOROUGH"
    """The deepest: a quarter of ``max_output_tokens`` by default, like THOROUGH, unless the
    entry's ``thinking_budgets`` gives it more."""

    @property
    def rank(self) -> int:
        """The depth's position, from 0 for IMMEDIATE to 4 for ULTRA_THOROUGH."""
        return list(Depth).index(self)

    # TOOL-12: a thinker called by another never works deeper than its caller.
    def at_most(self, other: Depth) -> Depth:
        """The shallower of this depth and ``other``. A thinker called by another thinker
        runs at this, so it never works deeper than its caller."""
        return self if self.rank <= other.rank else other


THINKING_DEPTHS: tuple[Depth, ...] = (
    Depth.QUICK,
    Depth.STANDARD,
    Depth.THOROUGH,
    Depth.ULTRA_THOROUGH,
)
"""The depths that think; IMMEDIATE never does."""


class OutputSize(enum.Enum):
    """How long an answer may be, as a rung an entry translates to tokens.

    The four sized rungs default to 1,024, 4,096, 16,384 and 32,768 tokens, each capped at the
    entry's ``max_output_tokens``; ``MAX`` is the entry's ceiling itself.
    """

    # TOOL-11: the default rungs, each capped at the entry's max_output_tokens.
    VERDICT = 1024
    """A short answer, a yes or no with a reason: 1,024 tokens by default."""
    COMPACT = 4096
    """A paragraph or a short list: 4,096 tokens by default."""
    STANDARD = 16384
    """A full answer: 16,384 tokens by default."""
    EXTENDED = 32768
    """A long answer: 32,768 tokens by default."""
    MAX = 0
    """As many tokens as the entry can write: its ``max_output_tokens``. An entry cannot
    override it."""

    @property
    def default_tokens(self) -> int | None:
        """The rung's default budget; ``None`` for ``MAX``, which is the entry's own ceiling."""
        return None if self is OutputSize.MAX else self.value


SIZED_RUNGS: tuple[OutputSize, ...] = (
    OutputSize.VERDICT,
    OutputSize.COMPACT,
    OutputSize.STANDARD,
    OutputSize.EXTENDED,
)


class Input(enum.Enum):
    """What a request may carry besides text; an entry must accept each declared input."""

    IMAGES = "IMAGES"
    """Images; only an entry with ``supports_vision`` accepts them."""
    DOCUMENTS = "DOCUMENTS"
    """Documents (a PDF, say); only an entry with ``supports_documents`` accepts them."""


class ThinkingMode(enum.Enum):
    """Whether (and how) an entry thinks before it answers."""

    NONE = "NONE"
    """The entry does not think: every depth has a thinking budget of 0. The default."""
    BUDGETED = "BUDGETED"
    """The entry thinks within a token budget it is given; the runtime reserves the depth's
    budget (:meth:`ModelSpec.thinking_budget`)."""
    ADAPTIVE = "ADAPTIVE"
    """The entry decides how long to think; the runtime reserves the depth's budget all the
    same, as for BUDGETED."""


class ModelKind(enum.Enum):
    """What an entry serves, read from its provider key's suffix: a key ending in
    ``-embeddings`` serves embeddings, one ending in ``-decision`` decisions, any other a
    language model."""

    LLM = "LLM"
    """A language model: text in, text (and tool calls) out. The only kind with a grade."""
    EMBEDDINGS = "EMBEDDINGS"
    """An embeddings model: text in, vectors out, priced on its input only."""
    DECISION = "DECISION"
    """A decision model: a request in, a verdict out, with no output budget."""

    # MOD-14: the kind is the provider key's suffix.
    @classmethod
    def of_provider(cls, provider_key: str) -> ModelKind:
        """The kind a provider key names, ignoring case and surrounding blanks: EMBEDDINGS for
        ``...-embeddings``, DECISION for ``...-decision``, else LLM."""
        key = provider_key.strip().lower()
        if key.endswith("-embeddings"):
            return cls.EMBEDDINGS
        if key.endswith("-decision"):
            return cls.DECISION
        return cls.LLM


# MOD-06: a closed entry is never removed from the catalog.
class EntryStatus(enum.Enum):
    """Whether an entry may be picked. Only ``OPEN`` entries are; a closed entry stays
    in the catalog, findable and priced, so the calls it already served can still be costed.
    The closed statuses all behave alike; they differ only in the reason they record."""

    OPEN = "OPEN"
    """The entry serves calls. The default."""
    DISABLED = "DISABLED"
    """Closed: switched off by whoever keeps the catalog."""
    DEPRECATED = "DEPRECATED"
    """Closed: the model is on its way out (:attr:`ModelSpec.is_deprecated` is true)."""
    UNLISTED = "UNLISTED"
    """Closed: kept for its history and prices, but not offered."""
    UNREACHABLE = "UNREACHABLE"
    """Closed: its endpoint cannot be reached from this deployment."""
