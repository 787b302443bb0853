"""A griffe extension that lets the reference render docstrings written in reStructuredText.

nucleo_trio's docstrings use the Sphinx habits (``:class:`Name```, ```text <url>`_``, a
paragraph ending in ``::`` before an indented example), and the site renders Markdown. This
extension rewrites each docstring as griffe loads it, before mkdocstrings renders it:

- a role such as ``:class:`~nucleo_trio.jobs.Tool``` becomes the code span ```Tool```
  (``~`` keeps the last dotted part, as Sphinx does; ``text <target>`` keeps the text), linked
  to the target's entry when the target is an object griffe knows and the site documents;
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

import functools
import html
import re
from collections.abc import Callable, Iterator
from typing import Any, cast

import griffe

__all__ = ["RstDocstrings", "markdown_from_rst"]

# :class:`Name`, :py:func:`~a.b`, :ref:`text <target>` (any role, with or without a domain).
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`([^`]+)`")
# `text <https://...>`_ and `text <https://...>`__
_LINK = re.compile(r"`([^`<]+?)\s*<([^>`]+)>`__?")
_TITLED_TARGET = re.compile(r"^(.*?)\s*<([^>]+)>$", re.S)


_EXTRA, _CONVERTED = "nucleo_trio_docs", "markdown"  # obj.extra marks a converted docstring

Resolver = Callable[[str], "str | None"]
"""Finds the full dotted path of a role's target, or ``None`` when it names nothing known."""


def _role(match: re.Match[str], resolve: Resolver | None) -> str:
    """A role as code, and as an optional cross-reference when ``resolve`` finds its target."""
    target = match.group(1).strip()
    titled = _TITLED_TARGET.match(target)
    if titled:
        title, target = titled.group(1), titled.group(2).strip()
    elif target.startswith("~"):
        target = target[1:]
        title = target.rsplit(".", 1)[-1]
    else:
        title = target
    target = target.lstrip(".").removesuffix("()")
    identifier = resolve(target) if resolve is not None and target else None
    if identifier is None:
        return f"`{title}`"
    return f'<autoref identifier="{html.escape(identifier)}" optional><code>{html.escape(title)}</code></autoref>'


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


def markdown_from_rst(text: str, resolve: Resolver | None = None) -> str:
    """``text``, a docstring in the Sphinx habits, rewritten as the Markdown the site renders;
    ``resolve`` turns a role's target into the identifier it cross-references."""
    text = _LINK.sub(lambda match: f"[{match.group(1)}]({match.group(2)})", text)
    text = _ROLE.sub(lambda match: _role(match, resolve), text)
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
    """Rewrites every docstring of a package once griffe has loaded all of it.

    A role becomes a cross-reference when its target names an object griffe knows, looked up
    the way Python would read the name where the docstring stands (the object's own members,
    then its parents', then its module's imports), or as a full dotted path. The reference is
    optional: it links when the site documents that object and stays plain code when not.
    """

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the docstrings of ``pkg`` and of everything in it."""
        collection = loader.modules_collection
        objects = list(_objects(pkg))
        for obj in objects:
            if obj.docstring is None:
                _inherit_docstring(obj)
        for obj in objects:
            if obj.docstring is not None and not obj.extra[_EXTRA].get(_CONVERTED):
                resolve = functools.partial(_resolve, obj, collection=collection)
                obj.docstring.value = markdown_from_rst(obj.docstring.value, resolve)
                obj.extra[_EXTRA][_CONVERTED] = True


def _inherit_docstring(obj: griffe.Object) -> None:
    """Give a method or attribute that overrides a documented one of a base class, and says
    nothing itself, the base's docstring (as Sphinx's autodoc does): an account's ``fits`` is
    described by the contract it implements."""
    parent = obj.parent
    if not isinstance(parent, griffe.Class):
        return
    try:
        bases = parent.mro()
    except Exception:  # noqa: BLE001 - a base griffe cannot resolve (outside the loaded packages)
        return
    for base in bases:
        member = base.members.get(obj.name)
        if member is None:
            continue
        try:
            docstring = member.docstring
        except Exception:  # noqa: BLE001 - an alias whose target is not loaded
            continue
        if docstring is not None and docstring.value.strip():
            obj.docstring = griffe.Docstring(docstring.value, parent=obj)
            # A base in a package loaded earlier is Markdown already: not converted twice.
            source = member.target if isinstance(member, griffe.Alias) else member
            if source.extra[_EXTRA].get(_CONVERTED):
                obj.extra[_EXTRA][_CONVERTED] = True
            return


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined in it, depth first (aliases are defined elsewhere)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(cast("griffe.Object", member))


def _resolve(obj: griffe.Object, target: str, collection: griffe.ModulesCollection) -> str | None:
    """The full path of what ``target`` names in the docstring of ``obj``, or ``None``."""
    first, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        member = scope.members.get(first)
        if member is not None:
            base = member.target_path if isinstance(member, griffe.Alias) else member.path
            return f"{base}.{rest}" if rest else base
        scope = scope.parent
    if first in collection.members:
        return target
    return None
