"""The words a job uses to say what model it needs: a grade, a depth, an output size, inputs.

A job never names a model. It names a **grade** (how capable a model must be at least), a
**depth** (how much thinking the work deserves) and an **output size** (how long the answer may
be); the deployment's catalog and picker turn those words into an entry. The grade is a floor:
MICRO < SMALL < MEDIUM < LARGE < XL < MEGA, and a seat may be served by its own rung or any
rung above, never one below (MOD-01). ``CEILING`` is not a rung but a request for the best the
deployment can serve today (MOD-02).
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
    SMALL = "SMALL"
    MEDIUM = "MEDIUM"
    LARGE = "LARGE"
    XL = "XL"
    MEGA = "MEGA"
    CEILING = "CEILING"

    @classmethod
    def rungs(cls) -> tuple[Grade, ...]:
        """The six rungs, lowest first; ``CEILING`` is not among them (MOD-02)."""
        return _RUNGS

    @property
    def is_rung(self) -> bool:
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
    QUICK = "QUICK"
    STANDARD = "STANDARD"
    THOROUGH = "THOROUGH"
    ULTRA_THOROUGH = "ULTRA_THOROUGH"

    @property
    def rank(self) -> int:
        return list(Depth).index(self)

    def at_most(self, other: Depth) -> Depth:
        """This depth, lowered to ``other`` when deeper: a callee never works deeper than its
        caller (TOOL-12)."""
        return self if self.rank <= other.rank else other


THINKING_DEPTHS: tuple[Depth, ...] = (
    Depth.QUICK,
    Depth.STANDARD,
    Depth.THOROUGH,
    Depth.ULTRA_THOROUGH,
)
"""The depths that think; IMMEDIATE never does."""


class OutputSize(enum.Enum):
    """How long an answer may be, as a rung an entry translates to tokens (TOOL-11).

    The four sized rungs default to 1,024, 4,096, 16,384 and 32,768 tokens, each capped at the
    entry's ``max_output_tokens``; ``MAX`` is the entry's ceiling itself.
    """

    VERDICT = 1024
    COMPACT = 4096
    STANDARD = 16384
    EXTENDED = 32768
    MAX = 0

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
    DOCUMENTS = "DOCUMENTS"


class ThinkingMode(enum.Enum):
    """Whether (and how) an entry thinks before it answers."""

    NONE = "NONE"
    BUDGETED = "BUDGETED"
    ADAPTIVE = "ADAPTIVE"


class ModelKind(enum.Enum):
    """What an entry serves, read from its provider key's suffix (MOD-14): a key ending in
    ``-embeddings`` serves embeddings, one ending in ``-decision`` decisions, any other a
    language model."""

    LLM = "LLM"
    EMBEDDINGS = "EMBEDDINGS"
    DECISION = "DECISION"

    @classmethod
    def of_provider(cls, provider_key: str) -> ModelKind:
        key = provider_key.strip().lower()
        if key.endswith("-embeddings"):
            return cls.EMBEDDINGS
        if key.endswith("-decision"):
            return cls.DECISION
        return cls.LLM


class EntryStatus(enum.Enum):
    """Whether an entry may be picked (MOD-06). Only ``OPEN`` entries are; a closed entry stays
    in the catalog, findable and priced, so the calls it already served can still be costed."""

    OPEN = "OPEN"
    DISABLED = "DISABLED"
    DEPRECATED = "DEPRECATED"
    UNLISTED = "UNLISTED"
    UNREACHABLE = "UNREACHABLE"
