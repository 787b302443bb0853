"""Issue 21, item 7: every test has a deadline, so a hang fails fast and names the test.

The suite runs under pytest-timeout (``timeout`` in ``pyproject.toml``): a test still running
at the deadline fails with "Timeout" naming it, and the tests after it still run. Shown here on
a hanging trio test in a throwaway project, run by pytest in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging

HANGING = """
import trio

async def test_that_hangs():
    await trio.sleep_forever()

def test_after_it():
    assert 1 + 1 == 2
"""


def test_the_suite_gives_every_test_a_deadline() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    deadline = options["ini_options"]["timeout"]
    assert isinstance(deadline, int) and 0 < deadline <= 300


def test_a_hanging_trio_test_fails_naming_itself_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text(HANGING)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_hang.py::test_that_hangs - Failed: Timeout" in done.stdout
    assert "1 failed, 1 passed" in done.stdout
