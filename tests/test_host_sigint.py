"""Ctrl-C for real: a subprocess running a trio program (or the demo) receives SIGINT.

These run on the real clock because a signal is a real-world event; no timing is asserted
beyond a generous bound that keeps a hang from stalling the suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging


def _start(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _interrupt_after(proc: subprocess.Popen[str], marker: str) -> tuple[str, str]:
    """Read stdout until a line containing ``marker``, send SIGINT, collect the rest."""
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    else:
        proc.wait(HANG_BOUND)
        pytest.fail(f"never saw {marker!r}: {''.join(seen)} {proc.stderr and proc.stderr.read()}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_BOUND)
    return "".join(seen) + out, err


@pytest.mark.parametrize("attempt", range(3))  # where the signal lands varies run to run
@pytest.mark.parametrize("where", ["block", "shutdown", "exit"])
def test_ctrl_c_on_a_user_program_settles_everything_and_raises_itself(
    where: str, attempt: int
) -> None:
    """SIGINT while the block awaits a handle, while a graceful shutdown waits 300 s for
    running jobs, or while the block's normal exit waits for every job: the program sees a bare KeyboardInterrupt, every handle has settled
    (the parked one refused or cancelled, the rest cancelled), one terminal event each, and
    the gate is back to zero."""
    proc = _start(sys.executable, "-m", "tests.programs.ctrl_c", where)
    out, err = _interrupt_after(proc, "ready")
    assert proc.returncode == 130, (out, err)
    line = out.strip().splitlines()[-1]
    assert line.startswith("interrupted type=KeyboardInterrupt settled=4/4"), (out, err)
    assert "terminal=[1, 1, 1, 1]" in line and "in_use=0" in line
    states = line.split("states=")[1].split()[0].split(",")
    assert states.count("CANCELLED") >= 3
    assert "ExceptionGroup" not in err


def test_ctrl_c_on_the_demo_prints_what_it_had_and_exits_130() -> None:
    """The demo on the real clock, interrupted once its mid-run health snapshot is out:
    it prints the report of what happened until then and exits with status 130."""
    proc = _start(sys.executable, "-m", "nucleo_trio", "demo", "--real-time", "--color", "never")
    out, err = _interrupt_after(proc, "Queue:")
    assert proc.returncode == 130, (out, err)
    assert "Jobs by kind" in out
    assert "Interrupted" in out and "was cancelled" in out
    assert "Traceback" not in err
    # The rate counts the jobs that settled before Ctrl-C, not the ones its stop cancelled.
    elapsed = re.search(
        r"^Elapsed: ([\d.]+) s of real time for (\d+) jobs finished before Ctrl-C, "
        r"([\d.]+) jobs/s\.$",
        out,
        re.M,
    )
    assert elapsed is not None, out
    seconds, finished, rate = float(elapsed[1]), int(elapsed[2]), float(elapsed[3])
    totals = re.search(r"^  all jobs +300 +(\d+) +(\d+) +(\d+) +(\d+) ", out, re.M)
    assert totals is not None, out
    cancelled = int(totals[4])
    assert finished <= 300 - cancelled + 3, (finished, cancelled)  # 3 planned cancellations
    assert finished < 300
    assert rate == pytest.approx(finished / seconds, abs=0.1 + finished / seconds * 0.01)
