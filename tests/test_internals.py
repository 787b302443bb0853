"""The maintainers' section, docs/internals/, defines every rule id the repository cites.

Each page there defines rules under ``### ID`` headings; tests hold a rule by citing its id.
docs_tools/rule_tests.py does the reading (it is also the mkdocs hook that writes each entry's
"Held by" line), so these checks and the site agree by construction. Run
``python docs_tools/rule_tests.py`` to see every rule with the tests that hold it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs_tools"))

import described  # noqa: E402
import rule_tests  # noqa: E402

ROOT = rule_tests.ROOT
CITING = ("tests", "nucleo_trio", "plugins", "examples", "benchmarks", "docs")
TEXT = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini", ".sh", ".js", ".json"}
SKIPPED = {"__pycache__", "build", "dist", "node_modules"}


def _citing_files() -> list[Path]:
    """The text files under the directories whose ids must resolve, skipping caches, build
    output and hidden directories."""
    found = []
    for top in CITING:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if any(p.startswith(".") or p in SKIPPED or p.endswith(".egg-info") for p in parts):
                continue
            if path.is_file() and path.suffix in TEXT:
                found.append(path)
    return found


def _defined() -> dict[str, list[str]]:
    """Every defined id, with the pages that define it (one page, once, when all is well)."""
    pages: dict[str, list[str]] = {}
    for page in rule_tests.pages():
        for rule in rule_tests.defined_ids(page):
            pages.setdefault(rule, []).append(page.name)
    return pages


def _unbuilt() -> set[str]:
    return {rule for page in rule_tests.pages() for rule in rule_tests.unbuilt_ids(page)}


def _ids(text: str) -> str:
    """Sample text with its made-up rule ids written ``AAA~01``, so this file cites none."""
    return text.replace("~", "-")


def _user_pages() -> list[Path]:
    internals = rule_tests.INTERNALS.resolve()
    pages = [ROOT / "README.md"]
    pages += [
        page
        for page in sorted((ROOT / "docs").rglob("*.md"))
        if not page.resolve().is_relative_to(internals)
    ]
    return pages


def test_every_cited_id_is_defined_in_the_section() -> None:
    """A rule id a test, a comment, a docstring or a page cites must resolve to an entry."""
    defined = _defined()
    missing: dict[str, list[str]] = {}
    for path in _citing_files():
        for rule in sorted(rule_tests.cited_ids(path) - defined.keys()):
            missing.setdefault(rule, []).append(str(path.relative_to(ROOT)))
    assert not missing, f"{len(missing)} cited ids with no entry under docs/internals/:\n" + (
        "\n".join(f"  {rule}: {', '.join(files[:3])}" for rule, files in sorted(missing.items()))
    )


def test_every_entry_is_held_by_a_test_unless_it_is_marked_not_built() -> None:
    """An entry no test cites is either a rule nobody checks or one nobody built; the second
    says so with the mark."""
    holders = rule_tests.tests_by_id()
    unheld = sorted(set(_defined()) - _unbuilt() - holders.keys())
    assert not unheld, f"{len(unheld)} entries no test cites (and not marked not built):\n  " + (
        "\n  ".join(unheld)
    )


def test_no_test_cites_a_rule_marked_not_built() -> None:
    """A test that arrives for a rule marked not built means the rule is built now: remove the
    mark."""
    holders = rule_tests.tests_by_id()
    stale = {rule: holders[rule] for rule in sorted(_unbuilt() & holders.keys())}
    assert not stale, "entries marked not built that a test cites:\n" + "\n".join(
        f"  {rule}: {', '.join(tests)}" for rule, tests in stale.items()
    )


def test_each_id_is_defined_once() -> None:
    """Two entries for one id would say two things; the ids of a page are also in id order."""
    twice = {rule: pages for rule, pages in _defined().items() if len(pages) > 1}
    assert not twice, "ids defined more than once: " + ", ".join(
        f"{rule} ({', '.join(pages)})" for rule, pages in sorted(twice.items())
    )
    for page in rule_tests.pages():
        ids = rule_tests.defined_ids(page)
        for prefix in dict.fromkeys(rule.split("-")[0] for rule in ids):
            numbers = [int(rule.split("-")[1]) for rule in ids if rule.startswith(prefix + "-")]
            assert numbers == sorted(numbers), f"{page.name}: the {prefix} entries are out of order"


def test_no_user_page_cites_a_rule_id_or_a_porting_note() -> None:
    """The README and every page outside docs/internals/ speak to users: what the code does,
    not the number of the rule it keeps or the design it was ported from."""
    found = []
    for page in _user_pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            hits = [*described.RULE_ID.findall(line)]
            hits += [match.group(0) for match in described.PORTING_NOTE.finditer(line)]
            if hits:
                found.append(f"{page.relative_to(ROOT)}:{number}: {', '.join(hits)}")
    assert not found, f"{len(found)} lines on user pages speak to maintainers:\n  " + (
        "\n  ".join(found)
    )


def test_the_site_runs_the_hook_and_lists_the_section_last() -> None:
    """mkdocs.yml registers docs_tools/rule_tests.py as a hook, and the nav ends with the
    section, every page of it listed."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert "docs_tools/rule_tests.py" in config.get("hooks", [])
    last = config["nav"][-1]
    assert list(last) == ["Internals"]
    listed = [
        entry if isinstance(entry, str) else next(iter(entry.values()))
        for entry in last["Internals"]
    ]
    assert listed[0] == "internals/index.md"
    pages = {f"internals/{page.name}" for page in rule_tests.pages()}
    assert pages <= set(listed), f"pages of the section missing from the nav: {pages - set(listed)}"


def test_the_scan_names_each_test_by_what_cites_the_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test function, a test method and a class each hold what they cite; a citation
    anywhere else in the file belongs to the file; a plain string is data, not a citation."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_sample.py").write_text(
        _ids(
            '"""Module docstring citing AAA~01."""\n'
            "import pytest\n\n\n"
            "def helper():\n"
            "    return 1  # BBB~02\n\n\n"
            "@pytest.mark.slow  # CCC~03\n"
            "def test_one():\n"
            '    """DDD~04: a rule."""\n\n\n'
            "class TestGroup:\n"
            '    """EEE~05 for the class."""\n\n'
            "    def test_two(self):\n"
            "        assert 'GGG~07' != 'SHA~256'  # FFF~06\n"
        ),
        encoding="utf-8",
    )
    monkeypatch.setattr(rule_tests, "ROOT", tmp_path.resolve())
    holders = rule_tests.tests_by_id(tests)
    file = "tests/test_sample.py"
    assert holders == {
        _ids(rule): tests
        for rule, tests in {
            "AAA~01": [file],
            "BBB~02": [file],
            "CCC~03": [f"{file}::test_one"],
            "DDD~04": [f"{file}::test_one"],
            "EEE~05": [f"{file}::TestGroup"],
            "FFF~06": [f"{file}::TestGroup::test_two"],
        }.items()
    }


def test_each_entry_gets_its_held_by_line() -> None:
    """The hook closes every entry with the tests that cite its id, or says none does; the
    text around the entries is left as it was."""
    page = _ids(
        "# Title\n\nIntro.\n\n## Area (XX)\n\n### XX~01\n\nFirst rule.\n\n"
        "### XX~02\n\n**Not built yet.** Nothing does it.\n\n## After\n\nTail.\n"
    )
    out = rule_tests.add_held_by(
        page, {_ids("XX~01"): ["tests/test_a.py::test_b", "tests/test_c.py"]}
    )
    assert (
        _ids("First rule.\n\nHeld by: `tests/test_a.py::test_b`, `tests/test_c.py`.\n\n### XX~02")
        in out
    )
    assert "Nothing does it.\n\nHeld by: no test yet.\n\n## After\n\nTail.\n" in out
    assert out.startswith(_ids("# Title\n\nIntro.\n\n## Area (XX)\n\n### XX~01\n"))
    assert rule_tests.entries(page) == [
        (_ids("XX~01"), "First rule."),
        (_ids("XX~02"), "**Not built yet.** Nothing does it."),
    ]
