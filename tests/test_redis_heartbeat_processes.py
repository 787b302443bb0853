"""Four worker processes on one Redis heartbeat schedule, on the real clock: one hangs mid-fire
and is killed.

Each worker is ``tests/programs/redis_heartbeat_worker.py``: its own ``trio.run`` and
dispatcher, publishing the same ``pulse`` schedule at its start and appending each fire it makes
to a log file of its own. The logs are read after the workers exit: every slot from the anchor
to the last one fired must be there exactly once. The waits are real (the claims live on
Redis's clock) and short: slots a quarter second apart, claims of one second. Redis restarting
under four workers is in ``test_redis_heartbeat_workers.py``, with the workers in one process.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

PERIOD = 0.25
CLAIM_TTL = 1.0
RUN = 3.1
"""Seconds each worker runs from the anchor: slots 0 to 3 s fire."""

HANG_BOUND = 30.0
_PREFIXES = itertools.count()
_ROOT = Path(__file__).resolve().parent.parent


def launch(
    url: str, prefix: str, logs: Path, *extra: str, stall_after: float = math.inf
) -> tuple[list[subprocess.Popen[str]], float, float]:
    """Four workers, each logging to its own file under ``logs``; once all four are ready they
    are given one anchor (half a second away) and one end. Answers them, the anchor and the
    end."""
    workers = []
    for index in range(4):
        arguments = [
            sys.executable,
            "-m",
            "tests.programs.redis_heartbeat_worker",
            url,
            "--prefix",
            prefix,
            "--period",
            repr(PERIOD),
            "--log",
            str(logs / f"worker{index}.log"),
            "--claim-ttl",
            repr(CLAIM_TTL),
            *extra,
        ]
        workers.append(
            subprocess.Popen(
                arguments,
                cwd=_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for worker in workers:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if line.strip() != "ready":
            finish(workers)
            raise AssertionError(f"a worker did not start: {line!r}")
    anchor = time.time() + 0.5
    until = anchor + RUN
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(f"{anchor!r} {until!r} {anchor + stall_after!r}\n")
        worker.stdin.flush()
    return workers, anchor, until


def finish(workers: list[subprocess.Popen[str]]) -> tuple[list[int], str]:
    """Wait for every worker; their exit codes and everything they wrote to stderr."""
    codes: list[int] = []
    errors: list[str] = []
    for worker in workers:
        try:
            _, err = worker.communicate(timeout=HANG_BOUND)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
        codes.append(worker.returncode)
        errors.append(err)
    return codes, "\n".join(errors)


def fires(logs: Path) -> list[tuple[float, int]]:
    """Every fire any worker logged: (run instant, pid)."""
    found = []
    for log in sorted(logs.glob("worker*.log")):
        for line in log.read_text().splitlines():
            _, run_at, pid = line.split()
            found.append((float(run_at), int(pid)))
    return found


def assert_each_slot_once(fired: list[tuple[float, int]], anchor: float) -> list[float]:
    """Every slot from ``anchor`` to the last one fired, each exactly once; answers them."""
    counts = Counter(run_at for run_at, _ in fired)
    twice = sorted(run_at - anchor for run_at, n in counts.items() if n > 1)
    assert not twice, f"slots fired more than once (seconds after the anchor): {twice}"
    instants = sorted(counts)
    expected = [anchor + index * PERIOD for index in range(len(instants))]
    assert instants == expected, (
        f"slots missing: {sorted(set(expected) - set(instants))}; "
        f"unexpected: {sorted(set(instants) - set(expected))}"
    )
    return instants


def test_a_worker_killed_mid_fire_does_not_lose_the_slot(redis_server: Any, tmp_path: Path) -> None:
    """Four workers race for a quarter-second schedule; the first fire built after 0.6 s hangs
    its worker between claiming the slot and submitting the job, and the test SIGKILLs it.
    Its claim runs out after a second on Redis's clock, a surviving worker fires that slot
    (saying so on stderr), and every slot, before and after, fires exactly once."""
    marker = tmp_path / "stalled"
    workers, anchor, until = launch(
        redis_server.url,
        f"test-hb-kill-{next(_PREFIXES)}",
        tmp_path,
        "--stall-marker",
        str(marker),
        stall_after=0.6,
    )
    victim = None
    try:
        while not (marker.exists() and marker.read_text()):
            if time.time() > until + HANG_BOUND or all(w.poll() is not None for w in workers):
                break
            time.sleep(0.02)
        else:
            victim = int(marker.read_text())
            os.kill(victim, signal.SIGKILL)
    finally:
        codes, errors = finish(workers)
    assert victim is not None, f"no worker stalled mid-fire: exit codes {codes}\n{errors}"

    by_pid = {worker.pid: worker.returncode for worker in workers}
    assert by_pid.pop(victim) == -signal.SIGKILL
    assert set(by_pid.values()) == {0}, errors
    taken_over = re.findall(r"the claim on its slot at ([0-9.]+) ran out before its fire", errors)
    assert len(taken_over) == 1, errors
    recovered = float(taken_over[0])
    fired = fires(tmp_path)
    instants = assert_each_slot_once(fired, anchor)
    assert recovered in instants, "the slot the killed worker held fired after all"
    assert dict((run_at, pid) for run_at, pid in fired)[recovered] != victim
    assert instants[-1] >= recovered + 1.0, "the schedule went on after the take-over"
