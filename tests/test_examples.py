"""The programs in examples/ and the code blocks of the documentation run as written.

Each example runs in a subprocess of its own with ``sys.executable``, exactly as a reader would
run it from the repository root, and must exit 0 and print the lines it promises. Every
```` ```python ```` block of the README and the docs runs too: a page's blocks run in order in
one namespace (each page builds on its earlier blocks), and must not raise. So the
documentation cannot drift from the API without a test failing.

The subprocesses are started together, once per module, and each test waits for its own: the
programs that wait on the real clock then overlap instead of adding up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted(ROOT.glob("docs/guide/*.md"))]
TIMEOUT = 60.0
MAX_EXAMPLE_LINES = 99

# What each example must print: one regular expression per line it promises, matched in order
# (re.search, so a pattern may match part of a line). Timings on the real clock vary; the
# patterns leave them open.
EXPECTED: dict[str, list[str]] = {
    "quickstart.py": [
        r"^page: 'Trio makes structured concurrency pleasant to write'$",
        r"^words: 7$",
        r"^events:$",
        r"Fetch +JobCompletedEvent +Job completed successfully \(attempt 1\)",
        r"CountWords +JobStartedEvent +Job started \(attempt 1\)",
    ],
    "fanout_with_gates.py": [
        r"^50 tools done in [\d.]+ s, longest wait \d+ ms$",
        r"^  db  held \d+ tools, longest [\d.]+ s; RELEASED 50$",
        r"^  api held \d+ tools, longest [\d.]+ s; RELEASED 0$",
        r"^db permits in use at the end: 0$",
    ],
    "guarded_tenants.py": [
        r"^1 fetched: pricing: three plans, billed monthly$",
        r"^2 refused: Scope mismatch: .*tenant_id=acme\].*TenantScope\[tenant_id=globex\]$",
        r"^3 refused: .*169\.254\.169\.254, a link-local address",
        r"^4 refused: The output of Fetch contains personal data \(email address\)",
        r"^Fetch ran 2 times; the desk is sealed to ScopeGuard\[TenantScope\[tenant_id=acme\]\]$",
    ],
    "openai_compatible.py": [
        r"^endpoint: local fake server at http://127\.0\.0\.1:\d+/v1$",
        r"^model: small -> gpt-4o-mini, 2 attempts$",
        r"^answer: Structured concurrency ties every task to a scope that waits for it to finish\.$",
        r"^call 1: failed \(re-run\), 0 in, 0 out$",
        r"^call 2: ok, \d+ in, \d+ out$",
        r"^spent: 0\.0000\d\d USD of a 0\.050000 USD cap$",
    ],
    "timeouts_and_retries.py": [
        r"^\[  2\.5 s\] timed out: Job timed out after 2 s \(state TIMED_OUT\)$",
        r"event: Server error: upstream answered 503 \(call 1\)\. Retrying in ~[\d.]+ seconds",
        r"\] retried: answer after 3 calls$",
        r"\] gave up after 2 calls: UncorrectableError from TransientErrorRetry$",
        r"\] cancel\(\) found the job: True$",
        r"\] cancelled: Job cancelled: the user pressed stop \(state CANCELLED\)$",
    ],
}

# Runs the code of the markdown pages named on its command line, each page's python blocks in
# order in one namespace of its own, each block compiled under a name that points a traceback at
# its page and block. One process serves every page, so the interpreter starts once. It prints
# one JSON object: per page, what the page printed and the traceback if it failed.
PAGES_RUNNER = r"""
import contextlib, io, json, re, sys, traceback
results = {}
for page in sys.argv[1:]:
    text = open(page, encoding="utf-8").read()
    namespace = {"__name__": "__main__"}
    printed = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(printed):
            blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
            for number, source in enumerate(blocks, 1):
                exec(compile(source, f"{page} (python block {number})", "exec"), namespace)
    except BaseException:
        error = traceback.format_exc()
    results[page] = {"stdout": printed.getvalue(), "error": error}
print(json.dumps(results))
"""


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


PAGES_WITH_CODE = [page for page in PAGES if page.exists() and python_blocks(page)]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # The tree under test, whether or not it is the installed copy.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONIOENCODING"] = "utf-8"
    # openai_compatible.py calls a real endpoint when these name one; the tests use its fake.
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        env.pop(name, None)
    return env


def _start(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[Path, subprocess.Popen[str]]]:
    """Every example in a process of its own, and the pages in one more, all started at once;
    whatever still runs at the end of the module is killed."""
    started = {path: _start([sys.executable, str(path)]) for path in EXAMPLES}
    pages = [str(page.relative_to(ROOT)) for page in PAGES_WITH_CODE]
    started[ROOT / "docs"] = _start([sys.executable, "-c", PAGES_RUNNER, *pages])
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def pages_run(runs: dict[Path, subprocess.Popen[str]]) -> dict[str, dict[str, str | None]]:
    """What each page printed, and its traceback if it failed, keyed by its relative path."""
    output = finish(runs[ROOT / "docs"], ROOT / "docs")
    results: dict[str, dict[str, str | None]] = json.loads(output)
    return results


def finish(process: subprocess.Popen[str], what: Path) -> str:
    """Wait for ``process``; fail naming ``what`` on a timeout or a non-zero exit."""
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"{what.relative_to(ROOT)} did not finish within {TIMEOUT:.0f} s:\n{stderr}")
    assert process.returncode == 0, (
        f"{what.relative_to(ROOT)} exited with {process.returncode}\n"
        f"--- stdout\n{stdout}\n--- stderr\n{stderr}"
    )
    return stdout


def test_there_are_at_least_three_examples_and_each_declares_its_output() -> None:
    """A new example must say what it prints, so the test below can hold it to that."""
    names = [path.name for path in EXAMPLES]
    assert len(names) >= 3, names
    assert sorted(names) == sorted(EXPECTED), (
        "every example needs an entry in EXPECTED (and every entry an example)"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_runs_and_prints_what_it_promises(
    example: Path, runs: dict[Path, subprocess.Popen[str]]
) -> None:
    """The example exits 0 within the timeout and prints its promised lines, in order."""
    lines = finish(runs[example], example).splitlines()
    position = 0
    for pattern in EXPECTED[example.name]:
        found = next(
            (i for i in range(position, len(lines)) if re.search(pattern, lines[i])),
            None,
        )
        assert found is not None, (
            f"{example.name}: no line matching {pattern!r} after line {position}:\n"
            + "\n".join(lines)
        )
        position = found + 1


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_is_short_enough_to_read_in_one_sitting(example: Path) -> None:
    """Under 100 lines: an example teaches one thing, and a newcomer reads all of it."""
    count = len(example.read_text(encoding="utf-8").splitlines())
    assert count <= MAX_EXAMPLE_LINES, f"{example.name} has {count} lines"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_code_blocks_of_a_page_run_in_order(
    page: Path, pages_run: dict[str, dict[str, str | None]]
) -> None:
    """Every python block of the page runs, in order, without raising, and shows something."""
    result = pages_run[str(page.relative_to(ROOT))]
    assert result["error"] is None, (
        f"{page.relative_to(ROOT)} failed:\n{result['error']}\n--- it printed\n{result['stdout']}"
    )
    assert result["stdout"], f"{page.relative_to(ROOT)} printed nothing: its examples show nothing"


def test_every_guide_page_exists_and_teaches_with_code() -> None:
    """The six pages of the user guide are there, and each has code that the test above runs."""
    guide = {path.name for path in (ROOT / "docs" / "guide").glob("*.md")}
    for name in (
        "first-workflow.md",
        "dispatcher.md",
        "jobs-and-handles.md",
        "admission.md",
        "timeouts-and-cancellation.md",
        "events.md",
    ):
        assert name in guide, f"docs/guide/{name} is missing"
        assert python_blocks(ROOT / "docs" / "guide" / name), f"docs/guide/{name} has no code"


def _anchors(page: Path) -> set[str]:
    """The anchors a markdown renderer gives the headings of ``page`` (GitHub's slugs)."""
    slugs = set()
    for heading in re.findall(r"^#+ +(.+?) *$", page.read_text(encoding="utf-8"), re.M):
        text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
        slugs.add(text.replace(" ", "-"))
    return slugs


def test_relative_links_in_the_docs_point_at_what_exists() -> None:
    """A relative link names a file that exists and, with an anchor, a heading of that file."""
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(
            r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text(encoding="utf-8")
        ):
            if "://" in target:
                continue
            linked = page.parent / target if target else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, "broken links:\n" + "\n".join(broken)
