"""The whole test suite, several times in a row, beside CPU burner processes.

A suite that passes only on an idle machine is not green. This runs ``pytest`` ``--runs`` times
(five by default) from the repository root while ``--load`` processes (two by default) spin on
the CPU beside it, and prints one line per run: its exit status, its closing line and how long it
took, then a verdict. It exits non-zero if any run failed. The burners are started by this script
and stopped when it ends, however it ends; each also stops by itself after the time the runs may
take at most.

    python -m benchmarks.suite_under_load               # 5 runs beside 2 burners
    python -m benchmarks.suite_under_load --runs 1 --load 2 -- -x tests/test_admission.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._rate_realclock import burners

ROOT = Path(__file__).resolve().parent.parent
RUN_BOUND = 45 * 60.0  # seconds one run may take before it counts as hung


def _closing_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs in a row (default 5)")
    parser.add_argument("--load", type=int, default=2, help="CPU burner processes (default 2)")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest, after --")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.load < 0:
        parser.error("--runs must be at least 1 and --load at least 0")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.pytest_args]
    print(f"{' '.join(command[2:])}: {args.runs} run(s) beside {args.load} CPU burner(s)")
    failed = 0
    logs = Path(tempfile.mkdtemp(prefix="suite-under-load-"))
    with burners(args.load, RUN_BOUND * args.runs):
        for run in range(1, args.runs + 1):
            began = time.monotonic()
            try:
                done = subprocess.run(
                    command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_BOUND
                )
                status, closing = done.returncode, _closing_line(done.stdout)
                (logs / f"run{run}.log").write_text(done.stdout + done.stderr)
            except subprocess.TimeoutExpired:
                status, closing = -1, f"hung: no end within {RUN_BOUND:.0f} s"
            took = time.monotonic() - began
            failed += status != 0
            print(f"run {run}: exit {status}, {closing} ({took:.0f} s)", flush=True)
            if status != 0 and status != -1:
                summary = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
                for line in summary:
                    print(f"    {line}")
                print(f"    the whole output: {logs / f'run{run}.log'}")
    verdict = "green every time" if not failed else f"{failed} of {args.runs} run(s) failed"
    print(f"verdict: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
