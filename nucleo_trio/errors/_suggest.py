"""The nearest known name to a misspelt one, for messages that say what to type."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean", "nearest"]


def nearest(name: object, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (``capcity`` → ``capacity``), or ``None`` when none
    is close enough to be a likely typo."""
    if not isinstance(name, str) or not name:
        return None
    candidates = list(known)
    folded = {candidate.lower(): candidate for candidate in candidates}
    if name.lower() in folded:
        return folded[name.lower()]  # only the case differs
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """``"; did you mean 'capacity'?"`` for a likely typo of a known name, else ``""``: a clause
    a message appends right after naming what it does not know."""
    match = nearest(name, known)
    return f"; did you mean {match!r}?" if match is not None and match != name else ""
