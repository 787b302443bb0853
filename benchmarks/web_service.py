"""(j) A web service: what a one-job request costs beside the bare endpoint, through a real server.

One ``hypercorn --worker-class trio --workers 0`` process on the loopback serves
:mod:`benchmarks._web_app`: ``examples/web_service.py``'s lifespan (one dispatcher), its
middleware and its request pattern, with two routes that differ only in the dispatcher:
``/one/{item}`` submits one job and answers its result, ``/bare/{item}`` answers the same thing
itself. An ``httpx.AsyncClient`` on trio, in this process, sends N requests per round from a
fixed number of concurrent tasks over kept-alive connections; rounds of the two routes are
interleaved. Each round gives:

* **requests/s**: N over the round's wall time (higher is better; the best round is the
  highest);
* **p99 latency**: the nearest-rank 99th percentile of the round's request times, as the client
  saw them (the best round is the lowest);
* **server CPU per request**: the server process's user and system CPU over the round, divided
  by N, read with psutil. On a shared two-core machine the client competes with the server for
  the cores, so this is the steadiest of the three.

Each row gives the best round and the median round; a ratio's median is the median of the
per-round ratios. The rows are for context: the issue that asked for them set no target.
Without hypercorn and starlette the benchmark prints one row saying what to install.
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs
import httpx
import psutil
import trio

from ._harness import Row, percentile, progress

NAME = "web"
TITLE = (
    "a web service: requests/s, p99 latency and server CPU of a one-job request beside the bare "
    "endpoint, against a real hypercorn process on the loopback"
)

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks._web_app:app"
CONCURRENCY = 16
START_BOUND = 60.0


@attrs.frozen
class Round:
    """One round of N requests to one route."""

    per_second: float
    p99_ms: float
    cpu_us: float


@contextmanager
def _server() -> Iterator[tuple[str, psutil.Process]]:
    """A hypercorn process serving the app, its URL and its process; stopped with SIGTERM."""
    with tempfile.TemporaryDirectory() as directory:
        errors = Path(directory) / "stderr"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with errors.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--workers", "0"]
                + ["--bind", "127.0.0.1:0", "--graceful-timeout", "5", APP],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        try:
            deadline = time.monotonic() + START_BOUND
            while not (found := re.search(r"Running on (http://[\d.:]+)", errors.read_text())):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"hypercorn did not start:\n{errors.read_text()}")
                time.sleep(0.05)
            yield found.group(1), psutil.Process(process.pid)
        finally:
            process.terminate()
            try:
                process.wait(START_BOUND)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _cpu(server: psutil.Process) -> float:
    times = server.cpu_times()
    return times.user + times.system


async def _round(client: httpx.AsyncClient, server: psutil.Process, route: str, n: int) -> Round:
    """``n`` requests to ``route`` from CONCURRENCY tasks; every answer is checked."""
    latencies: list[float] = []
    remaining = iter(range(n))

    async def worker() -> None:
        for item in remaining:
            began = time.perf_counter()
            response = await client.get(f"/{route}/{item}")
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200 or response.json()["square"] != item * item:
                raise RuntimeError(f"/{route}/{item} answered {response.status_code}")

    cpu, wall = _cpu(server), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENCY):
            nursery.start_soon(worker)
    wall, cpu = time.perf_counter() - wall, _cpu(server) - cpu
    return Round(n / wall, percentile(latencies, 0.99) * 1e3, cpu / n * 1e6)


async def _measure(url: str, server: psutil.Process, n: int, rounds: int) -> dict[str, list[Round]]:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    measured: dict[str, list[Round]] = {"bare": [], "one": []}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=START_BOUND) as client:
        for route in measured:  # a warm-up round each: connections opened, code paths warm
            await _round(client, server, route, min(n, 200))
        for index in range(rounds):
            for route in measured if index % 2 == 0 else reversed(list(measured)):
                measured[route].append(await _round(client, server, route, n))
    return measured


def _rows(measured: dict[str, list[Round]], n: int) -> list[Row]:
    rows: list[Row] = []
    figures: Sequence[tuple[str, str, Callable[[Round], float], bool]] = (
        ("requests/s", "req/s", lambda r: r.per_second, True),
        ("p99 latency", "ms", lambda r: r.p99_ms, False),
        ("server CPU per request", "us/req", lambda r: r.cpu_us, False),
    )
    for label, unit, figure, higher in figures:
        pick = max if higher else min
        bare = [figure(r) for r in measured["bare"]]
        one = [figure(r) for r in measured["one"]]
        for name, values in (("bare endpoint", bare), ("one-job request", one)):
            rows.append(
                Row(NAME, f"{name}: {label}", pick(values), unit, median=statistics.median(values))
            )
        ratios = [o / b for o, b in zip(one, bare, strict=True)]
        rows.append(
            Row(
                NAME,
                f"one-job / bare: {label}",
                pick(one) / pick(bare),
                "x",
                median=statistics.median(ratios),
            )
        )
    rows.append(Row(NAME, f"requests per round, {CONCURRENCY} at a time", n, ""))
    return rows


def run(quick: bool) -> list[Row]:
    missing = [
        name for name in ("hypercorn", "starlette") if importlib.util.find_spec(name) is None
    ]
    if missing:
        return [Row(NAME, f"not run: pip install {' '.join(missing)} (the dev extra)", 0, "")]
    n, rounds = (500, 3) if quick else (2000, 7)
    with _server() as (url, server):
        began = time.perf_counter()
        measured = trio.run(_measure, url, server, n, rounds)
        progress(
            f"  {rounds} rounds of {n} requests per route ({time.perf_counter() - began:.1f} s)"
        )
    return _rows(measured, n)


if __name__ == "__main__":
    from ._harness import format_table

    print(format_table(run("--quick" in sys.argv[1:])))
