"""The programs in examples/ and the code blocks of the documentation run as written, and
print what they say they print.

Each example runs in a subprocess of its own with ``sys.executable``, exactly as a reader would
run it from the repository root, and must exit 0 and print the lines it promises (``EXPECTED``).

The pages (``PAGES``) follow one convention, which the tests below hold them to:

- Every ```` ```python ```` block runs: a page's blocks run in order in one namespace (each page
  builds on its earlier blocks), and none may raise.
- A block that prints is followed by a ```` ```text ```` block (nothing but blank lines between)
  holding exactly what the block prints. The two are compared line by line, trailing whitespace
  and trailing blank lines aside; a difference fails naming the page, the block number and the
  first line that differs. A block that prints without an output block after it fails ("block N
  of PAGE prints but shows no output"), and so does an output block after a block that prints
  nothing.
- In an output block, ``...`` stands for any text (perhaps none) within one line, for what
  differs from run to run: a random job id, a wall-clock time. A line that is ``...`` alone
  (indentation aside) stands for any number of lines: the frames of a traceback. Keep both
  rare: prefer the virtual clock (``trio.run(main, clock=trio.testing.MockClock(
  autojump_threshold=0))``) and a seed to wildcards.
- A block that cannot run on its own (a file of a plugin package, a snippet using names the page
  never defines) is marked ```` ```python fragment ```` and is skipped; so is any block whose
  info string is not exactly ``python``.
- A trailing comment in a block must not claim output: what a block prints is in its output
  block.

The subprocesses are started together, once per module, and each test waits for its own: the
programs that wait on the real clock then overlap instead of adding up.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "index.md",
    ROOT / "docs" / "plugins.md",
    *sorted(ROOT.glob("docs/guide/*.md")),
]
# What an example or a page needs besides nucleo_trio: a program on PATH or a module to import.
# Without it the test skips, saying what to install (.ci/run installs all of them).
NEEDS: dict[str, tuple[str, ...]] = {
    "scaling_out.py": ("redis-server", "nucleo_trio_redis"),
    "docs/guide/scaling-out.md": ("redis-server", "nucleo_trio_redis"),
    "otel_console.py": ("opentelemetry.sdk", "nucleo_trio_otel"),
    "web_service.py": ("hypercorn", "starlette"),
    "docs/guide/web-service.md": ("hypercorn", "starlette"),
    "docs/guide/opentelemetry.md": ("opentelemetry.sdk", "nucleo_trio_otel"),
    "mcp_tools.py": ("nucleo_trio_mcp",),
    "docs/guide/mcp.md": ("nucleo_trio_mcp",),
}
# How to install what an example needs besides nucleo_trio, and the modules that brings: the
# command its docstring names and the one line it prints when one of them is missing.
INSTALL: dict[str, tuple[str, tuple[str, ...]]] = {
    "scaling_out.py": (
        "pip install -e plugins/nucleo-trio-redis",
        ("nucleo_trio_redis", "coredis"),
    ),
    "otel_console.py": (
        "pip install -e 'plugins/nucleo-trio-otel[sdk]'",
        ("nucleo_trio_otel", "opentelemetry"),
    ),
    "web_service.py": ("pip install hypercorn starlette", ("hypercorn", "starlette")),
    "mcp_tools.py": ("pip install -e plugins/nucleo-trio-mcp", ("nucleo_trio_mcp", "mcp")),
}
TIMEOUT = 150.0
"""Seconds an example or the pages' run may take before it counts as hung: a bound for a broken
build, not a timing. The pages run one after another in one process, a few seconds on an idle
machine; a loaded one (the suite beside CPU burners) has been seen past 60 s. Below the suite's
180 s deadline per test, so the hang is named here."""
MAX_EXAMPLE_LINES = 99
# A web service carries its framework's glue besides the one thing it teaches (the middleware that
# turns a client gone into a cancellation, and a server run around itself so it can be run); an
# example that needs more than nucleo_trio imports it under a check that says what to install.
LONGER_EXAMPLES = {"web_service.py": 137, "scaling_out.py": 105, "otel_console.py": 105}

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
    "otel_console.py": [
        r"^span 'handle request' UNSET \[\]$",
        r"^-- metrics while the third fetch waits:$",
        r"^metric nucleo\.admission\.parked\{\} 1$",
        r"^metric nucleo\.jobs\.running\{job\.type=TOOL\} 2$",
        r"^metric nucleo\.limiter\.in_use\{limiter\.category=semaphore,limiter\.name=api\} 2$",
        r"^span 'fetch faq' OK TOOL attempt 1 "
        r"\[limiter\.held, limiter\.granted_from_hold, limiter\.released\]$",
        r"^-- metrics at exit \(the dispatcher has stopped: no gauges\):$",
        r"^metric nucleo\.job\.completed\{job\.type=TOOL\} 3$",
        r"^metric nucleo\.limiter\.acquire\{.*limiter\.name=api,outcome=held\} 1$",
    ],
    "openai_compatible.py": [
        r"^endpoint: local fake server at http://127\.0\.0\.1:\d+/v1$",
        r"^model: small -> gpt-4o-mini, 2 attempts$",
        r"^answer: Structured concurrency ties every task to a scope that waits for it to finish\.$",
        r"^call 1: failed \(re-run\), 0 in, 0 out$",
        r"^call 2: ok, \d+ in, \d+ out$",
        r"^spent: 0\.0000\d\d USD of a 0\.050000 USD cap$",
    ],
    "scaling_out.py": [
        r"^4 workers, one bucket: at most 40 calls in any 2 s$",
        r"^  0-2 s: +\d+ calls$",
        r"^  2-4 s: +\d+ calls$",
        r"^  4-6 s: +\d+ calls$",
        r"^busiest 2 s: \d+ calls; quota used in 6 s: \d+%$",
    ],
    "web_service.py": [
        r"^/quote/3/50 \{\"items\":3,\"total\":5\}$",
        r"^/quote/99/50 \{\"error\":\"items must be 1 to 32 and ms 0 to 60000\"\}$",
        r"^settled 9 of 9 jobs: 4 COMPLETED, 5 CANCELLED$",
    ],
    "mcp_tools.py": [
        r"^tools: facts\.road_distance, units\.km_to_miles$",
        r"^facts\.road_distance returned 465\.0$",
        r"^units\.km_to_miles returned 288\.94$",
        r"^answer: Paris to Lyon is 465\.0 km by road, 288\.94 miles\.$",
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

# Runs the python blocks of the markdown pages given in a JSON file ({page: [source, ...]}),
# each page's blocks in order in one namespace of its own, each block compiled under a name that
# points a traceback at its page and block, and its stdout captured on its own. One process serves
# every page, so the interpreter starts once. It prints one JSON object: per page, what each block
# printed (up to the one that failed) and the traceback if one failed.
PAGES_RUNNER = r"""
import contextlib, io, json, sys, traceback
results = {}
for page, sources in json.load(open(sys.argv[1], encoding="utf-8")).items():
    namespace = {"__name__": "__main__"}
    outputs, error = [], None
    for number, source in enumerate(sources, 1):
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(source, f"{page} (python block {number})", "exec"), namespace)
        except BaseException:
            error = f"python block {number} raised:\n" + traceback.format_exc()
        outputs.append(printed.getvalue())
        if error is not None:
            break
    results[page] = {"outputs": outputs, "error": error}
print(json.dumps(results))
"""

# The fences of a page: (info string, body, line number of the opening fence).
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass
class Block:
    """A python block that runs, and the output block that follows it, if any."""

    number: int
    line: int
    source: str
    shown: str | None


def page_blocks(page: Path) -> list[Block]:
    """The runnable python blocks of ``page``, in order, each with the output it shows: the body
    of a ```` ```text ```` block that comes right after it (nothing but blank lines between)."""
    text = page.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    blocks: list[Block] = []
    for index, fence in enumerate(fences):
        if fence.group(1).strip() != "python":
            continue
        shown = None
        if index + 1 < len(fences):
            following = fences[index + 1]
            between = text[fence.end() : following.start()]
            if following.group(1).strip() == "text" and not between.strip():
                shown = following.group(2)
        line = text.count("\n", 0, fence.start()) + 1
        blocks.append(Block(len(blocks) + 1, line, fence.group(2), shown))
    return blocks


def python_blocks(page: Path) -> list[str]:
    return [block.source for block in page_blocks(page)]


def _lines(text: str) -> list[str]:
    """``text`` as lines without trailing whitespace, and without trailing blank lines."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_matches(shown: str, printed: str) -> bool:
    """A shown line matches a printed one exactly, except that each ``...`` in it stands for any
    text (perhaps none) within the line."""
    if "..." not in shown:
        return shown == printed
    pattern = ".*?".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed) is not None


def output_difference(shown: str, printed: str) -> str | None:
    """None when ``printed`` is what ``shown`` says, else where they first differ. A shown line
    that is ``...`` alone (indentation aside) stands for any number of printed lines, the
    fewest that let the next shown line match."""
    expected, actual = _lines(shown), _lines(printed)
    position = 0
    for index, want in enumerate(expected):
        if want.strip() == "...":
            following = expected[index + 1] if index + 1 < len(expected) else None
            if following is None:
                return None
            while position < len(actual) and not _line_matches(following, actual[position]):
                position += 1
            continue
        if position >= len(actual):
            return f"line {position + 1} is shown but not printed: {want!r}"
        if not _line_matches(want, actual[position]):
            return (
                f"line {position + 1} differs:\n  shown:   {want!r}\n"
                f"  printed: {actual[position]!r}"
            )
        position += 1
    if position < len(actual):
        return f"line {position + 1} is printed but not shown: {actual[position]!r}"
    return None


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


def _missing(name: str) -> list[str]:
    """What ``name`` (an example's file name or a page's path) needs that is not here."""
    missing: list[str] = []
    for need in NEEDS.get(name, ()):
        if need == "redis-server":
            if shutil.which(need) is None:
                missing.append("redis-server (Debian: apt-get install redis-server)")
        elif importlib.util.find_spec(need.split(".")[0]) is None or (
            "." in need and importlib.util.find_spec(need) is None
        ):
            missing.append(f"the Python module {need}")
    return missing


def _skip_unless_present(name: str) -> None:
    missing = _missing(name)
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}")


def _start(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, subprocess.Popen[str]]]:
    """Every example in a process of its own, and the pages in one more, all started at once;
    whatever still runs at the end of the module is killed."""
    started = {
        path: _start([sys.executable, str(path)]) for path in EXAMPLES if not _missing(path.name)
    }
    sources = tmp_path_factory.mktemp("pages") / "blocks.json"
    blocks = {str(page.relative_to(ROOT)): python_blocks(page) for page in PAGES_WITH_CODE}
    sources.write_text(json.dumps(blocks), encoding="utf-8")
    started[ROOT / "docs"] = _start([sys.executable, "-c", PAGES_RUNNER, str(sources)])
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            # Bounded: a killed process whose pipes a child still holds must not hang teardown.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.communicate(timeout=5)


@pytest.fixture(scope="module")
def pages_run(runs: dict[Path, subprocess.Popen[str]]) -> dict[str, Any]:
    """What each block of each page printed, and the traceback if one failed, keyed by the
    page's relative path."""
    output = finish(runs[ROOT / "docs"], ROOT / "docs")
    results: dict[str, Any] = json.loads(output)
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


def test_what_an_example_or_a_page_needs_names_one_that_exists() -> None:
    """NEEDS may only name examples and pages that exist, so a rename cannot leave one
    unchecked on a machine that has everything."""
    known = {path.name for path in EXAMPLES} | {str(page.relative_to(ROOT)) for page in PAGES}
    assert set(NEEDS) <= known, sorted(set(NEEDS) - known)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_runs_and_prints_what_it_promises(
    example: Path, runs: dict[Path, subprocess.Popen[str]]
) -> None:
    """The example exits 0 within the timeout and prints its promised lines, in order."""
    _skip_unless_present(example.name)
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
    """Under 100 lines (the few in LONGER_EXAMPLES, say why there): an example teaches one thing,
    and a newcomer reads all of it."""
    count = len(example.read_text(encoding="utf-8").splitlines())
    limit = LONGER_EXAMPLES.get(example.name, MAX_EXAMPLE_LINES)
    assert count <= limit, f"{example.name} has {count} lines"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_an_example_says_in_its_docstring_what_it_needs(example: Path) -> None:
    """The docstring names what to install: the command, for an example that needs more than
    nucleo_trio; that it needs nothing more, for the others."""
    docstring = ast.get_docstring(ast.parse(example.read_text(encoding="utf-8"))) or ""
    flat = " ".join(docstring.split())
    if example.name in INSTALL:
        assert INSTALL[example.name][0] in flat, f"{example.name}: {docstring}"
    else:
        assert re.search(r"needs (only|nothing but) nucleo_trio", flat), (
            f"{example.name} does not say it needs only nucleo_trio: {docstring}"
        )


# Runs an example with one module made unimportable, as an uninstalled package is.
BLOCKED_RUN = (
    "import runpy, sys; sys.modules[sys.argv[1]] = None; "
    "runpy.run_path(sys.argv[2], run_name='__main__')"
)


@pytest.mark.parametrize(
    ("name", "module"),
    [(name, module) for name, (_, modules) in INSTALL.items() for module in modules],
)
def test_an_example_missing_a_module_says_what_to_install_in_one_line(
    name: str, module: str
) -> None:
    """With a module it needs not importable, the example prints one line naming it and the
    install command, exits with status 1, and shows no traceback."""
    run = subprocess.run(
        [sys.executable, "-c", BLOCKED_RUN, module, str(ROOT / "examples" / name)],
        cwd=ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(module), lines[0]
    assert lines[0].endswith(f" is missing: {INSTALL[name][0]}"), lines[0]


def test_the_readme_names_every_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [path.name for path in EXAMPLES if f"`{path.name}`" not in readme]
    assert not missing, f"README.md does not list {missing}"


def test_an_apt_get_install_follows_an_apt_get_update() -> None:
    """A fresh Debian image has no package lists, so ``apt-get install`` fails until
    ``apt-get update`` has run: each command the README, the examples page and the examples
    show for it runs the update first."""
    shown = [ROOT / "README.md", ROOT / "docs" / "examples.md", *EXAMPLES]
    bare = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in shown
        for line in path.read_text(encoding="utf-8").splitlines()
        if "apt-get install" in line and not re.search(r"apt-get update\s*&&", line)
    ]
    assert not bare, "apt-get install without apt-get update first:\n" + "\n".join(bare)


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_code_blocks_of_a_page_run_in_order_and_print_what_the_page_shows(
    page: Path, pages_run: dict[str, Any]
) -> None:
    """Every python block of the page runs, in order, without raising; a block that prints is
    followed by an output block holding exactly what it printed, and a block that prints
    nothing is not."""
    name = str(page.relative_to(ROOT))
    _skip_unless_present(name)
    result = pages_run[name]
    outputs: list[str] = result["outputs"]
    assert result["error"] is None, (
        f"{name} failed in {result['error']}\n--- it printed\n{''.join(outputs)}"
    )
    for block, printed in zip(page_blocks(page), outputs, strict=True):
        where = f"block {block.number} of {name} (line {block.line})"
        if block.shown is None:
            assert not printed, f"{where} prints but shows no output:\n{printed}"
            continue
        assert printed, f"{where} shows output but prints nothing"
        difference = output_difference(block.shown, printed)
        assert difference is None, f"{where}: {difference}\n--- it printed\n{printed}"


@pytest.mark.parametrize(
    ("shown", "printed", "same"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\nb\n", "a\nc\n", False),
        ("a\n", "a\nb\n", False),
        ("a\nb\n", "a\n", False),
        ("job ... done in ... s\n", "job Fetch-7df1 done in 0.02 s\n", True),
        ("job ... done\n", "job x\ndone\n", False),
        ("total: 64\n", "total: 1000\n", False),
        ("trailing   \n\n", "trailing\n", True),
        ("Traceback:\n  ...\nValueError: x\n", "Traceback:\n  a\n  b\nValueError: x\n", True),
        ("Traceback:\n  ...\nValueError: x\n", "Traceback:\n  a\nKeyError: x\n", False),
        ("first\n...\n", "first\nsecond\nthird\n", True),
    ],
)
def test_the_output_check_compares_line_by_line_with_its_wildcard(
    shown: str, printed: str, same: bool
) -> None:
    """Exact lines, ``...`` for any text within one line, a ``...`` line for any lines."""
    assert (output_difference(shown, printed) is None) is same


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
