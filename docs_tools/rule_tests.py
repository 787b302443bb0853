"""Which tests hold which rule: the scan behind the maintainers' section, ``docs/internals/``.

Each page of that section defines rules of the dispatch contract, one entry per rule under a
heading ``### ID`` (``### ADM-23``). A test holds a rule by citing its id, in its docstring
as a rule, and this module reads both sides:

* :func:`entries` and :func:`defined_ids`: the rules a page defines, in page order (an id
  defined twice shows twice); :func:`unbuilt_ids`: those whose entry starts with
  ``**Not built yet.**``;
* :func:`cited_ids`: every rule id a file mentions anywhere;
* :func:`citations` and :func:`tests_by_id`: which test cites which id. A test is a
  ``test*`` function or a ``Test*`` class (and its ``test*`` methods) in a ``test_*.py`` file
  under ``tests/``; an id in its decorators, docstring, comments or code is the test's. An id
  anywhere else in the file (the module docstring, a helper, a fixture) is a citation by the
  file as a whole, named by its path. A string literal that is not a docstring is data, not a
  citation (a test of a checker hands it sample ids).

Registered in mkdocs.yml under ``hooks:``, it appends a line ``Held by:`` under every entry of
every page of the section, naming the tests that cite the entry's id, so what the page says
and what ``tests/test_internals.py`` checks come from the same scan. Run it to print the
table::

    python docs_tools/rule_tests.py            # every defined id and its tests
    python docs_tools/rule_tests.py GRD        # the ids that start with GRD
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

from described import RULE_ID

ROOT = Path(__file__).resolve().parent.parent
INTERNALS = ROOT / "docs" / "internals"
TESTS = ROOT / "tests"
NOT_BUILT = "**Not built yet.**"

_ENTRY = re.compile(r"^### +(?P<id>\S+) *$", re.M)
_HEADING = re.compile(r"^#{1,6} ", re.M)
_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)


def _without_fences(markdown: str) -> str:
    """The text with every fenced block blanked, line for line, so offsets still match."""
    return _FENCE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), markdown)


def _spans(markdown: str) -> list[tuple[str, int, int]]:
    """``(id, start, end)`` of each entry: from its heading to the next heading of any level."""
    text = _without_fences(markdown)
    found = []
    for match in _ENTRY.finditer(text):
        following = _HEADING.search(text, match.end())
        end = following.start() if following else len(text)
        found.append((match.group("id"), match.start(), end))
    return found


def entries(markdown: str) -> list[tuple[str, str]]:
    """``(id, body)`` of every ``### ID`` entry of one page, in page order, the body being the
    text between the heading and the next heading, stripped."""
    found = []
    for rule, start, end in _spans(markdown):
        heading_end = markdown.find("\n", start, end)
        body = markdown[heading_end + 1 : end] if heading_end != -1 else ""
        found.append((rule, body.strip()))
    return found


def defined_ids(page: Path) -> list[str]:
    """The ids a page defines, in page order, duplicates kept."""
    return [rule for rule, _ in entries(page.read_text(encoding="utf-8"))]


def unbuilt_ids(page: Path) -> set[str]:
    """The ids of a page whose entry opens with ``**Not built yet.**``."""
    return {
        rule
        for rule, body in entries(page.read_text(encoding="utf-8"))
        if body.startswith(NOT_BUILT)
    }


def pages() -> list[Path]:
    """The pages of the maintainers' section."""
    return sorted(INTERNALS.glob("*.md"))


def cited_ids(path: Path) -> set[str]:
    """Every rule id the file at ``path`` mentions, wherever it stands."""
    return set(RULE_ID.findall(path.read_text(encoding="utf-8", errors="replace")))


def _node_id(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(decorator.lineno for decorator in decorators)])


def _is_test(node: ast.stmt) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _docstring_starts(tree: ast.Module) -> set[tuple[int, int]]:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                starts.add((first.lineno, first.col_offset))
    return starts


def _citing_lines(source: str, tree: ast.Module) -> list[str]:
    """The source's lines with every string literal but the docstrings blanked."""
    lines = source.splitlines()
    docstrings = _docstring_starts(tree)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING or token.start in docstrings:
            continue
        (first, start), (last, end) = token.start, token.end
        for row in range(first, last + 1):
            line = lines[row - 1]
            left = start if row == first else 0
            right = end if row == last else len(line)
            lines[row - 1] = line[:left] + " " * (right - left) + line[right:]
    return lines


def citations(path: Path) -> dict[str, set[str]]:
    """The ids each test of one test file cites, by test id (``tests/test_x.py::test_y``,
    ``tests/test_x.py::TestZ::test_y``); ids cited elsewhere in the file fall under the
    file's own path."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    lines = _citing_lines(source, tree)
    module = _node_id(path)
    owners = [module] * len(lines)

    def claim(node: ast.stmt, owner: str) -> None:
        for index in range(_first_line(node) - 1, node.end_lineno or node.lineno):
            owners[index] = owner

    for node in tree.body:
        if _is_test(node):
            claim(node, f"{module}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            claim(node, f"{module}::{node.name}")
            for member in node.body:
                if _is_test(member):
                    claim(member, f"{module}::{node.name}::{member.name}")
    found: dict[str, set[str]] = defaultdict(set)
    for owner, line in zip(owners, lines, strict=True):
        found[owner].update(RULE_ID.findall(line))
    return {owner: ids for owner, ids in found.items() if ids}


def test_files(tests: Path = TESTS) -> list[Path]:
    """The files pytest collects tests from: ``test_*.py`` under ``tests``, at any depth."""
    return sorted(path for path in tests.rglob("test_*.py") if "build" not in path.parts)


def tests_by_id(tests: Path = TESTS) -> dict[str, list[str]]:
    """For every id a test cites, the tests that cite it, in file and then line order."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in test_files(tests):
        for owner, ids in citations(path).items():
            for rule in ids:
                found[rule].append(owner)
    return dict(found)


def held_by(tests: Iterable[str]) -> str:
    """The line the site shows under an entry."""
    named = [f"`{test}`" for test in tests]
    return "Held by: " + (", ".join(named) if named else "no test yet") + "."


def add_held_by(markdown: str, holders: dict[str, list[str]]) -> str:
    """The page with a ``Held by:`` paragraph closing every entry."""
    pieces = []
    done = 0
    for rule, _, end in _spans(markdown):
        body = markdown[done:end].rstrip("\n")
        pieces.append(f"{body}\n\n{held_by(holders.get(rule, []))}\n\n")
        done = end
    pieces.append(markdown[done:])
    return "".join(pieces)


# The mkdocs hook: the scan runs once per build, then each page of the section gets its lines.
_holders: dict[str, list[str]] = {}


def on_pre_build(config: Any, **kwargs: Any) -> None:
    _holders.clear()
    _holders.update(tests_by_id())


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if not page.file.src_uri.startswith("internals/"):
        return markdown
    return add_held_by(markdown, _holders)


def main(argv: list[str]) -> int:
    prefixes = tuple(argv) or ("",)
    holders = tests_by_id()
    for page in pages():
        for rule in defined_ids(page):
            if rule.startswith(prefixes):
                print(f"{rule}  {page.name}  {held_by(holders.get(rule, []))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
