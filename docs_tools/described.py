"""What the API reference shows without a word, and public docstrings that speak to maintainers.

The reference is what ``mkdocstrings`` renders from the ``::: name`` directives under
``docs/reference/``: each named object and, for a class or a module, the public members it
shows (a module's ``__all__``; a class's names without a leading underscore, plus
``__call__``). This module loads the packages the way the site does (griffe, with the
``rst_docstrings`` extension, so an override that says nothing inherits its base's docstring)
and answers two questions:

* :func:`undescribed`: every shown object whose docstring is empty;
* :func:`maintainer_notes`: every shown docstring that cites a rule id (``ADM-23``) or carries
  a porting note (the Java original, the reference runtime): those belong in the maintainers'
  section, ``docs/internals/``, and in code comments.

Run it to see what is left, optionally under one dotted prefix::

    python docs_tools/described.py nucleo_trio.errors
    python docs_tools/described.py --notes nucleo_trio.admission

``tests/test_reference_described.py`` fails, naming each, while either list is not empty.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
PACKAGES = (
    "nucleo_trio",
    "nucleo_trio_postgres",
    "nucleo_trio_redis",
    "nucleo_trio_otel",
    "nucleo_trio_anthropic",
    "nucleo_trio_mcp",
    "nucleo_trio_openai",
)
_DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)

RULE_ID = re.compile(r"\b(?!SHA-)[A-Z]{2,5}-\d{2,3}\b")
"""A rule id as the spec numbers them (``ADM-23``, ``TOOL-05``); ``SHA-256`` is not one."""

PORTING_NOTE = re.compile(
    r"\bJava\b|\breference (?:runtime|implementation)\b|\bthe original\b|\bSpring\b|\bQuarkus\b"
    r"|\bnanoTime\b|\bvirtual thread",
    re.I,
)
"""Words that speak of where the design came from rather than of what the code does."""


@cache
def _loader() -> griffe.GriffeLoader:
    extensions = griffe.load_extensions(str(ROOT / "docs_tools" / "rst_docstrings.py"))
    paths = [str(ROOT), *(str(path) for path in sorted((ROOT / "plugins").iterdir()))]
    loader = griffe.GriffeLoader(search_paths=paths, extensions=extensions)
    for package in PACKAGES:
        loader.load(package)
    loader.resolve_aliases(implicit=True, external=False)
    return loader


def directives() -> list[str]:
    """Every identifier a ``:::`` directive of the reference names, page by page."""
    return [
        identifier
        for page in sorted(REFERENCE.glob("*.md"))
        for identifier in _DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    ]


def _get(identifier: str) -> griffe.Object | griffe.Alias:
    collection = _loader().modules_collection
    top, _, rest = identifier.partition(".")
    obj = collection[top]
    return obj[rest] if rest else obj


def _shown(owner: griffe.Object | griffe.Alias, name: str, member: object) -> bool:
    if name.startswith("_") and name != "__call__":
        return False
    if owner.kind is griffe.Kind.MODULE:
        return bool(getattr(member, "is_public", False))
    return True


def shown_objects() -> Iterator[tuple[str, griffe.Object | griffe.Alias]]:
    """Every object the reference shows, with the dotted path it is shown under, once each."""
    seen: set[str] = set()

    def walk(
        obj: griffe.Object | griffe.Alias, path: str
    ) -> Iterator[tuple[str, griffe.Object | griffe.Alias]]:
        if path in seen:
            return
        seen.add(path)
        yield path, obj
        if obj.kind in (griffe.Kind.CLASS, griffe.Kind.MODULE):
            for name, member in obj.members.items():
                if _shown(obj, name, member):
                    yield from walk(member, f"{path}.{name}")

    for identifier in directives():
        yield from walk(_get(identifier), identifier)


def _docstring(obj: griffe.Object | griffe.Alias) -> str:
    try:
        docstring = obj.docstring
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return ""
    return "" if docstring is None else docstring.value.strip()


def undescribed(prefix: str = "") -> list[str]:
    """The dotted paths, under ``prefix``, of every shown object with no docstring."""
    return [
        path for path, obj in shown_objects() if path.startswith(prefix) and not _docstring(obj)
    ]


def maintainer_notes(prefix: str = "") -> list[str]:
    """``path: what`` for every shown docstring, under ``prefix``, that cites a rule id or
    carries a porting note."""
    found = []
    for path, obj in shown_objects():
        if not path.startswith(prefix):
            continue
        text = _docstring(obj)
        hits = sorted({*RULE_ID.findall(text), *(m.group(0) for m in PORTING_NOTE.finditer(text))})
        if hits:
            found.append(f"{path}: {', '.join(hits)}")
    return found


def main(argv: list[str]) -> int:
    notes = "--notes" in argv
    prefixes = [arg for arg in argv if not arg.startswith("--")] or [""]
    for prefix in prefixes:
        rows = maintainer_notes(prefix) if notes else undescribed(prefix)
        print("\n".join(rows))
        what = "docstrings with maintainers' notes" if notes else "shown without a description"
        print(f"-- {len(rows)} {what} under {prefix or 'the reference'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
