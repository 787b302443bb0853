"""``nucleo-trio demo | head``: the demo behind a real pipe whose reader leaves early.

A Unix filter whose reader goes away ends quietly, with the status a shell reports for a
process SIGPIPE ended (141), not with the demo's status for a tally that does not add up (1).
The reader here takes the banner's three lines and closes its end, as ``head -3`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nucleo_trio.cli import READER_GONE

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 120  # seconds: only so a broken build fails instead of hanging


def _demo_into_head(lines: int, *args: str) -> tuple[list[str], int, str]:
    """Run the demo with its stdout on a pipe, read ``lines`` lines, close the pipe, and
    answer those lines, the exit status and stderr."""
    read_end, write_end = os.pipe()
    demo = subprocess.Popen(
        [sys.executable, "-m", "nucleo_trio", "demo", "--color", "never", *args],
        cwd=ROOT,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as reader:
        taken = [reader.readline() for _ in range(lines)]
    try:
        _, err = demo.communicate(timeout=HANG_BOUND)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    return taken, demo.returncode, err


@pytest.mark.parametrize("args", [(), ("--real-time",)], ids=["virtual", "real-time"])
def test_a_reader_that_leaves_early_ends_the_demo_as_a_filter(args: tuple[str, ...]) -> None:
    """Virtual time: the report's first write meets the closed pipe. Real time: the mid-run
    health snapshot does, inside the trio run. Either way: 141, and nothing on stderr."""
    taken, status, err = _demo_into_head(3, *args)
    assert taken[0].startswith("nucleo-trio demo: 300 jobs"), taken
    assert status == READER_GONE == 141, err
    assert err == ""
