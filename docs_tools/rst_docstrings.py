"""A griffe extension that lets the reference render docstrings written in reStructuredText.

nucleo_trio's docstrings use the Sphinx habits (``:class:`Name```, ```text <url>`_``, a
paragraph ending in ``::`` before an indented example), and the site renders Markdown. This
extension rewrites each docstring as griffe loads it, before mkdocstrings renders it:

- a role such as ``:class:`~nucleo_trio.jobs.Tool``` becomes the code span ```Tool```
  (``~`` keeps the last dotted part, as Sphinx does; ``text <target>`` keeps the text);
- a hyperlink ```pluggy <https://pluggy.readthedocs.io>`_`` becomes ``[pluggy](https://...)``;
- a paragraph ending in ``::`` ends in ``:`` and a line of ``::`` alone disappears, leaving the
  indented block after it, which Markdown shows as code as it stands;
- a doctest (``>>>`` lines and their output) becomes a fenced ``pycon`` block.

Double-backquoted literals are left alone: Markdown reads them as code spans too. Only the
rendered text changes; the source files are not touched.

mkdocs.yml loads it by path (``extensions: [docs_tools/rst_docstrings.py]`` in the python
handler's options).
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

__all__ = ["RstDocstrings", "markdown_from_rst"]

# :class:`Name`, :py:func:`~a.b`, :ref:`text <target>` (any role, with or without a domain).
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`([^`]+)`")
# `text <https://...>`_ and `text <https://...>`__
_LINK = re.compile(r"`([^`<]+?)\s*<([^>`]+)>`__?")
_TITLED_TARGET = re.compile(r"^(.*?)\s*<([^>]+)>$", re.S)


def _role_text(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    titled = _TITLED_TARGET.match(target)
    if titled:
        target = titled.group(1)
    elif target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _fence_doctests(lines: list[str]) -> list[str]:
    """Each doctest (a run of lines from one starting ``>>>`` to the next blank line) as a
    fenced ``pycon`` block: Markdown would read ``>>>`` as three nested quotes."""
    fenced: list[str] = []
    in_doctest = False
    for line in lines:
        if not in_doctest and line.lstrip().startswith(">>>"):
            in_doctest = True
            indent = line[: len(line) - len(line.lstrip())]
            if fenced and fenced[-1].strip():
                fenced.append("")
            fenced.append(f"{indent}```pycon")
        elif in_doctest and not line.strip():
            in_doctest = False
            fenced.append(f"{indent}```")
        fenced.append(line)
    if in_doctest:
        fenced.append(f"{indent}```")
    return fenced


def markdown_from_rst(text: str) -> str:
    """``text``, a docstring in the Sphinx habits, rewritten as the Markdown the site renders."""
    text = _LINK.sub(lambda match: f"[{match.group(1)}]({match.group(2)})", text)
    text = _ROLE.sub(_role_text, text)
    lines: list[str] = []
    for line in text.split("\n"):
        stripped = line.rstrip()
        if stripped.strip() == "::":
            continue
        if stripped.endswith("::") and not stripped.endswith(":::"):
            line = stripped[:-1]
        lines.append(line)
    return "\n".join(_fence_doctests(lines))


class RstDocstrings(griffe.Extension):
    """Rewrites every docstring griffe loads with :func:`markdown_from_rst`."""

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs: Any,
    ) -> None:
        """Rewrite ``obj``'s docstring, if it has one, as soon as griffe creates the object."""
        if obj.docstring is not None:
            obj.docstring.value = markdown_from_rst(obj.docstring.value)
