"""(d) Rate bounds as the upstream sees them, on the real clock, idle and under load.

Every limiter is set to 50 requests a second and driven by :data:`CALLERS` tasks that each ask
again the moment they start. A caller that starts goes through :data:`CLIENT_STEPS` checkpoints
(the awaits an HTTP client makes before its bytes leave: the pool, the connection, the write)
and then sends one datagram to a loopback "upstream". The kernel stamps each datagram as it
arrives (``SO_TIMESTAMPNS``), so the upstream's clock is the kernel's, not the reader's: the
figure is the most arrivals in any 1 s interval, against the bound of 50, beside the p99 lag from
the caller's start to the arrival and the rate served.

Ours: the plain :class:`~nucleo_trio.admission.RateLimit` (with no margin and with
:data:`MARGIN`), the elastic window, and the token bucket a catalog entry gets by default
(3,000 rpm, one request at a time, so any second holds at most 50). The peers:
``aiolimiter``'s ``AsyncLimiter(50, 1)`` and ``pyrate-limiter``'s ``Rate(50, 1 s)``, on an
ordinary asyncio loop, sending the same way.

Scenarios: an idle machine; ``--load N`` CPU burner processes (two in the table), each spinning
for at most the scenario's length and stopped after it; and (full runs) one CPU-busy task in the
caller's own loop, holding it :data:`BUSY_STEP` s of every :data:`BUSY_STEP` + :data:`BUSY_GAP`.
Each limiter runs :data:`ROUNDS` rounds of :data:`SECONDS` s per scenario, interleaved; the row
shows the median round and the progress line the best and the worst. The real clock is noisy:
these figures come from here, never from a timed assertion in a test.

``python -m benchmarks._rate_realclock [--quick] [--load N] [--busy]`` runs one scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import importlib
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any

import attrs
import trio

from nucleo_trio.admission import (
    Admission,
    Demand,
    ElasticWindow,
    RateLimit,
    RateLimiter,
    TokenBucket,
    TokenBucketConfig,
)

from ._harness import Row, format_table, percentile, progress, verdict

RATE = 50
CALLERS = 200
CLIENT_STEPS = 3
MARGIN = 0.1
BUSY_STEP = 0.2
BUSY_GAP = 0.5
SECONDS = 2.5
ROUNDS = 3
QUICK_SECONDS = 2.0
QUICK_ROUNDS = 1
LOAD = 2

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_BURN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass\n"


class FiftyPerSecond(ElasticWindow):
    base_window = 1.0
    max_requests = RATE


def most_in_any(instants: list[float], span: float = 1.0) -> int:
    """The most instants in any half-open interval [t, t + span)."""
    ordered = sorted(instants)
    return max(
        (bisect.bisect_left(ordered, t + span) - i for i, t in enumerate(ordered)), default=0
    )


def _busy_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# ------------------------------------------------------------------------------------------------
# The upstream: a loopback UDP socket whose arrivals the kernel stamps
# ------------------------------------------------------------------------------------------------


@attrs.frozen
class Scenario:
    """What runs beside the callers: ``load`` burner processes, or a busy task in their loop;
    each limiter's round lasts ``seconds``."""

    label: str
    seconds: float
    load: int = 0
    busy: bool = False


@attrs.frozen
class Run:
    """One limiter's round: when callers started, when their requests arrived, and the lags."""

    starts: list[float]
    arrivals: list[float]
    lags: list[float]


class Upstream:
    """A loopback socket and a thread that drains it, keeping each datagram's arrival stamp.

    A datagram carries its round and its caller's start (``time.time()``); the arrival is the
    kernel's receive stamp in the same clock, so neither the reader's scheduling nor the
    caller's is in it. Where the kernel gives no stamp the reader's own clock stands in. A
    datagram of a round already collected (a straggler) is dropped, never counted in the next.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.kernel_stamps = False
        if _SO_TIMESTAMPNS is not None:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.kernel_stamps = True
            except OSError:
                pass
        self._sock.bind(("127.0.0.1", 0))
        self.address = self._sock.getsockname()
        self._seen: dict[int, list[tuple[float, float]]] = {}
        self._round = 0
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="upstream", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        space = socket.CMSG_SPACE(16)
        while True:
            data, ancillary, _, _ = self._sock.recvmsg(64, space)
            if data == b"stop":
                return
            arrived = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", payload[:16])
                    arrived = seconds + nanoseconds * 1e-9
            if arrived is None:
                arrived = time.time()
            started, round_id = struct.unpack("dI", data[:12])
            with self._lock:
                if round_id == self._round:
                    self._seen.setdefault(round_id, []).append((started, arrived))

    def sender(self) -> Sender:
        """The sending end of a new round."""
        with self._lock:
            self._round += 1
            return Sender(self.address, self._round)

    def collect(self, starts: list[float], sent: int) -> Run:
        """Wait (at most 2 s) for the ``sent`` datagrams of the round, and hand its figures
        over."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._seen.get(self._round, ())) >= sent:
                    break
            time.sleep(0.01)
        with self._lock:
            seen = self._seen.pop(self._round, [])
        return Run(starts, [a for _, a in seen], [a - s for s, a in seen])

    def close(self) -> None:
        stop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stop.sendto(b"stop", self.address)
        stop.close()
        self._reader.join(timeout=5)
        self._sock.close()


class Sender:
    """Sends one request per call, stamped with its round and its caller's start."""

    def __init__(self, address: tuple[str, int], round_id: int) -> None:
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._out.connect(address)
        self._out.setblocking(False)
        self._round = round_id
        self.sent = 0

    def __call__(self, started: float) -> None:
        with contextlib.suppress(BlockingIOError):  # a full loopback buffer: never here
            self._out.send(struct.pack("dI", started, self._round))
            self.sent += 1

    def close(self) -> None:
        self._out.close()


# ------------------------------------------------------------------------------------------------
# The callers
# ------------------------------------------------------------------------------------------------


def ours(
    make: Callable[[], RateLimiter], amount: Any, upstream: Upstream, scenario: Scenario
) -> Run:
    """Callers through a real Admission and ``make()``'s account, sending once they start."""

    async def main() -> Run:
        account = make()
        admission = Admission()
        send = upstream.sender()
        starts: list[float] = []

        async def caller() -> None:
            while True:
                grant = await admission.admit(Demand().add(account, amount))
                started = time.time()
                starts.append(started)
                admission.release(grant)
                for _ in range(CLIENT_STEPS):
                    await trio.lowlevel.checkpoint()
                send(started)

        async def busy_task() -> None:
            while True:
                _busy_for(BUSY_STEP)
                await trio.sleep(BUSY_GAP)

        async with trio.open_nursery() as nursery:
            await nursery.start(admission.run)
            with trio.move_on_after(scenario.seconds):
                async with trio.open_nursery() as inner:
                    if scenario.busy:
                        inner.start_soon(busy_task)
                    for _ in range(CALLERS):
                        inner.start_soon(caller)
            admission.stop()
        await trio.sleep(0.05)  # the last sends leave
        send.close()
        return upstream.collect(starts, send.sent)

    return trio.run(main)


def _asyncio(
    make: Callable[[], Callable[[], Awaitable[Any]]], upstream: Upstream, scenario: Scenario
) -> Run:
    """Callers through an asyncio limiter, on a real asyncio loop, sending once they start."""

    async def main() -> Run:
        acquire = make()
        send = upstream.sender()
        starts: list[float] = []

        async def caller() -> None:
            while True:
                await acquire()
                started = time.time()
                starts.append(started)
                for _ in range(CLIENT_STEPS):
                    await asyncio.sleep(0)
                send(started)

        async def busy_task() -> None:
            while True:
                _busy_for(BUSY_STEP)
                await asyncio.sleep(BUSY_GAP)

        tasks = [asyncio.create_task(caller()) for _ in range(CALLERS)]
        if scenario.busy:
            tasks.append(asyncio.create_task(busy_task()))
        await asyncio.sleep(scenario.seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.05)
        send.close()
        return upstream.collect(starts, send.sent)

    return asyncio.run(main())


def aiolimiter_run(lib: ModuleType, upstream: Upstream, scenario: Scenario) -> Run:
    def make() -> Callable[[], Awaitable[Any]]:
        limiter = lib.AsyncLimiter(RATE, 1.0)
        return limiter.acquire  # type: ignore[no-any-return]

    return _asyncio(make, upstream, scenario)


def pyrate_run(lib: ModuleType, upstream: Upstream, scenario: Scenario) -> Run:
    """A ``Limiter`` over ``InMemoryBucket([Rate(50, 1000)])`` with its default 50 ms buffer."""

    def make() -> Callable[[], Awaitable[Any]]:
        bucket = lib.InMemoryBucket([lib.Rate(RATE, 1000)])
        limiter = lib.Limiter(lib.SingleBucketFactory(bucket, schedule_leak=False))

        async def acquire() -> bool:
            if not await limiter.try_acquire_async("quota", 1):
                raise RuntimeError("pyrate-limiter refused a request outright")
            return True

        return acquire

    return _asyncio(make, upstream, scenario)


# ------------------------------------------------------------------------------------------------
# Load and scenarios
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def burners(count: int, seconds: float) -> Iterator[None]:
    """``count`` CPU-bound processes, each spinning ``seconds`` at most, stopped on the way out."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", _BURN, f"{seconds:.1f}"]) for _ in range(count)
    ]
    try:
        time.sleep(0.2 if count else 0.0)  # they are spinning before the first round
        yield
    finally:
        for process in spinning:
            process.terminate()
        for process in spinning:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _runners(
    peers: dict[str, ModuleType | None], upstream: Upstream, scenario: Scenario
) -> dict[str, tuple[bool, Callable[[], Run]]]:
    """Each limiter's label, whether it is ours, and its round."""
    runners: dict[str, tuple[bool, Callable[[], Run]]] = {
        f"rate limit {RATE}/s": (
            True,
            lambda: ours(lambda: RateLimit(RATE, per=1.0), None, upstream, scenario),
        ),
        f"rate limit {RATE}/s, margin {MARGIN * 1000:g} ms": (
            True,
            lambda: ours(lambda: RateLimit(RATE, per=1.0, margin=MARGIN), None, upstream, scenario),
        ),
        f"elastic window {RATE}/s": (True, lambda: ours(FiftyPerSecond, None, upstream, scenario)),
        f"token bucket {RATE * 60:,} rpm, burst 1": (
            True,
            lambda: ours(
                lambda: TokenBucket("quota", TokenBucketConfig(RATE * 60, RATE * 60_000, burst=1)),
                1,
                upstream,
                scenario,
            ),
        ),
    }
    aio, pyrate = peers.get("aiolimiter"), peers.get("pyrate_limiter")
    if aio is not None:
        runners[f"aiolimiter AsyncLimiter({RATE}, 1)"] = (
            False,
            lambda: aiolimiter_run(aio, upstream, scenario),
        )
    if pyrate is not None:
        runners[f"pyrate-limiter Rate({RATE}, 1 s)"] = (
            False,
            lambda: pyrate_run(pyrate, upstream, scenario),
        )
    return runners


def scenario_rows(
    name: str, scenario: Scenario, peers: dict[str, ModuleType | None], rounds: int
) -> list[Row]:
    """Interleaved rounds of every limiter in one scenario; one row per limiter."""
    upstream = Upstream()
    try:
        runners = _runners(peers, upstream, scenario)
        worst: dict[str, list[int]] = {label: [] for label in runners}
        callers: dict[str, list[int]] = {label: [] for label in runners}
        lags: dict[str, list[float]] = {label: [] for label in runners}
        served: dict[str, list[float]] = {label: [] for label in runners}
        length = len(runners) * rounds * (scenario.seconds + 0.5) + 10.0
        with burners(scenario.load, length):
            for _ in range(rounds):
                for label, (_, run) in runners.items():
                    result = run()
                    worst[label].append(most_in_any(result.arrivals))
                    callers[label].append(most_in_any(result.starts))
                    lags[label].extend(result.lags)
                    served[label].append(len(result.arrivals) / scenario.seconds)
    finally:
        upstream.close()
    out: list[Row] = []
    for label, (mine, _) in runners.items():
        counts = worst[label]
        median = statistics.median(counts)
        p99 = percentile(lags[label], 0.99) * 1000 if lags[label] else float("nan")
        progress(
            f"  {label}, {scenario.label}: most arrivals in any 1 s median {median:g}, best "
            f"{min(counts)}, worst {max(counts)} (rounds {counts}); callers saw at most "
            f"{max(callers[label])}; start-to-arrival p99 {p99:.1f} ms; served "
            f"{statistics.median(served[label]):.1f}/s"
        )
        met = median <= RATE
        out.append(
            Row(
                name,
                f"{label}, {scenario.label}: most arrivals at the upstream in any 1 s (median of "
                f"{len(counts)}, best {min(counts)}; start-to-arrival p99 {p99:.0f} ms)",
                float(median),
                "requests",
                f"<= {RATE}",
                verdict(met) if mine else ("met" if met else "not met"),
            )
        )
    return out


def rows(
    name: str, peers: dict[str, ModuleType | None], quick: bool, missing: Callable[..., list[Row]]
) -> list[Row]:
    """Idle, under :data:`LOAD` CPU burners and (full runs) under a busy task in the loop."""
    seconds = QUICK_SECONDS if quick else SECONDS
    scenarios = [Scenario("idle", seconds), Scenario(f"{LOAD} CPU burners", seconds, load=LOAD)]
    if not quick:
        scenarios.append(
            Scenario(
                f"busy task {BUSY_STEP * 1000:g} of every {(BUSY_STEP + BUSY_GAP) * 1000:g} ms",
                seconds,
                busy=True,
            )
        )
    out: list[Row] = []
    for scenario in scenarios:
        out += scenario_rows(name, scenario, peers, QUICK_ROUNDS if quick else ROUNDS)
    labels = {
        "aiolimiter": f"aiolimiter AsyncLimiter({RATE}, 1)",
        "pyrate_limiter": f"pyrate-limiter Rate({RATE}, 1 s)",
    }
    for module, label in labels.items():
        if peers.get(module) is None:
            out += missing(label, module.replace("_", "-"))
    return out


def _optional(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks._rate_realclock",
        description="Arrivals at a loopback upstream in any 1 s, against a bound of 50.",
    )
    parser.add_argument("--quick", action="store_true", help="one shorter round")
    parser.add_argument("--load", type=int, default=0, metavar="N", help="CPU burner processes")
    parser.add_argument("--busy", action="store_true", help="a CPU-busy task in the loop")
    args = parser.parse_args(argv)
    if args.load < 0:
        parser.error("--load takes a number of processes >= 0")
    peers = {"aiolimiter": _optional("aiolimiter"), "pyrate_limiter": _optional("pyrate_limiter")}
    label = f"{args.load} CPU burners" if args.load else "idle"
    if args.busy:
        label += ", busy task in the loop"
    seconds = QUICK_SECONDS if args.quick else SECONDS
    scenario = Scenario(label, seconds, load=args.load, busy=args.busy)
    table = scenario_rows("rates", scenario, peers, QUICK_ROUNDS if args.quick else ROUNDS)
    print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
