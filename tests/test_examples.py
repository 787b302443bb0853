"""The programs in examples/ and the code blocks of the documentation run as written.

Each example runs in a subprocess of its own with ``sys.executable``, exactly as a reader would
run it from the repository root, and must exit 0 and print the lines it promises. Every
```` ```python ```` block of the README and the guide runs too: a page's blocks run in order in
one namespace (each page builds on its earlier blocks), in a subprocess of its own, and must
exit 0. So the documentation cannot drift from the API without a test failing.

The subprocesses are started together, once per module, and each test waits for its own: the
examples that wait on the real clock then overlap instead of adding up.
"""

from __future__ import annotations

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

# What each example must print: whole lines, or fragments of one line, in this order.
EXPECTED: dict[str, list[str]] = {
    "quickstart.py": [
        "page: 'Trio makes structured concurrency pleasant to write'",
        "words: 7",
        "CountWords JobCompletedEvent Job completed successfully (attempt 1)",
    ],
    "fanout_with_gates.py": [
        "50 tools done in",
        "db  held",
        "RELEASED 50",
        "api held",
        "RELEASED 0",
        "db permits in use at the end: 0",
    ],
    "timeouts_and_retries.py": [
        "timed out: Job timed out after 2 s (state TIMED_OUT)",
        "retried: answer after 3 calls",
        "gave up after 2 calls: UncorrectableError from TransientErrorRetry",
        "cancel() found the job: True",
        "cancelled: Job cancelled: the user pressed stop (state CANCELLED)",
    ],
}

# Runs one markdown page: its python blocks in order, in one namespace, each compiled under a
# name that points a traceback at the page and the block.
PAGE_RUNNER = r"""
import re, sys
page = sys.argv[1]
text = open(page, encoding="utf-8").read()
namespace = {"__name__": "__main__"}
blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
for number, source in enumerate(blocks, 1):
    exec(compile(source, f"{page} (python block {number})", "exec"), namespace)
"""


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # The tree under test, whether or not it is the installed copy.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[Path, subprocess.Popen[str]]]:
    """Every example and every page with code, started at once; killed if still running."""
    env = _environment()
    commands: dict[Path, list[str]] = {path: [sys.executable, str(path)] for path in EXAMPLES}
    for page in PAGES:
        if page.exists() and python_blocks(page):
            commands[page] = [sys.executable, "-c", PAGE_RUNNER, str(page)]
    started = {
        path: subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for path, command in commands.items()
    }
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


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
    names = [path.name for path in EXAMPLES]
    assert len(names) >= 3, names
    assert sorted(names) == sorted(EXPECTED), (
        "every example needs an entry in EXPECTED (and every entry an example)"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_runs_and_prints_what_it_promises(
    example: Path, runs: dict[Path, subprocess.Popen[str]]
) -> None:
    lines = finish(runs[example], example).splitlines()
    position = 0
    for expected in EXPECTED[example.name]:
        found = next(
            (i for i in range(position, len(lines)) if expected in lines[i]),
            None,
        )
        assert found is not None, (
            f"{example.name}: no line containing {expected!r} after line {position}:\n"
            + "\n".join(lines)
        )
        position = found + 1


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_is_short_enough_to_read_in_one_sitting(example: Path) -> None:
    count = len(example.read_text(encoding="utf-8").splitlines())
    assert count <= MAX_EXAMPLE_LINES, f"{example.name} has {count} lines"


@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if page.exists() and python_blocks(page)],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_code_blocks_of_a_page_run_in_order(
    page: Path, runs: dict[Path, subprocess.Popen[str]]
) -> None:
    finish(runs[page], page)


def test_every_guide_page_exists_and_teaches_with_code() -> None:
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


def test_relative_links_in_the_docs_point_at_files_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    # docs/performance.md is written by another part of the project; until it lands, it is the
    # one link allowed to dangle.
    broken = [link for link in broken if not link.endswith("performance.md")]
    assert not broken, "broken links:\n" + "\n".join(broken)
