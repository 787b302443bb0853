"""JSON from outside the process, parsed without recursing past a fixed depth.

:func:`json.loads` recurses once per array or object, so a line of a hundred thousand ``[``
raises :class:`RecursionError` (or, parsed just under the interpreter's limit, leaves a value
that every later walk recurses through). :func:`loads` counts the nesting first, in C for the
common case where the text holds fewer brackets than the limit, and refuses deeper text with a
:class:`ValueError`; it is the parser for every file and socket answer the runtime reads.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_NESTING", "loads", "too_deep"]

MAX_NESTING: Final = 200
"""How deep arrays and objects may nest in JSON from outside (the runtime's own nests a few)."""

# A JSON string (so that brackets inside one are not counted), or one bracket.
_STRUCTURE: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether ``text`` opens more than ``limit`` arrays or objects inside one another."""
    if text.count("[") + text.count("{") <= limit:
        return False  # the common case, counted in C
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return True
        elif token in "]}":
            depth -= 1
    return False


def loads(text: str, limit: int = MAX_NESTING) -> Any:
    """The JSON value of ``text``, or a :class:`ValueError` saying why not: nested deeper than
    ``limit``, or not JSON (an integer of over 4300 digits included). ``NaN`` and ``Infinity``
    are read, as :func:`json.dumps` writes them."""
    if too_deep(text, limit):
        raise ValueError(f"nested more than {limit} arrays or objects deep")
    try:
        return json.loads(text)
    except RecursionError:  # a limit above what the interpreter can recurse
        raise ValueError(f"nested more than {limit} arrays or objects deep") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
