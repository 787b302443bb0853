"""Round trips to Redis per grant, with and without leases, through a real admission.

Starts a throwaway ``redis-server`` (from PATH) on a free loopback port, then for each mode takes
``--grants`` grants in a row on one shared token bucket whose rate never binds (admit, then
release), and prints the settles the hub sent and the ``EVALSHA`` calls Redis counted
(``INFO commandstats``), per grant, with the wall time per grant::

    .venv/bin/python plugins/nucleo-trio-redis/measure_round_trips.py --grants 2000
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import coredis
import trio
from nucleo_trio_redis import RedisAccounts

from nucleo_trio.admission import Admission, Demand


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _evalsha_calls(client: coredis.Redis[str]) -> int:
    stats = await client.info("commandstats")
    entry = stats.get("cmdstat_evalsha")
    return int(entry["calls"]) if isinstance(entry, dict) else 0


async def _measure(url: str, lease: bool, grants: int) -> tuple[int, int, float]:
    admission = Admission()
    client = coredis.Redis.from_url(url, decode_responses=True)
    async with (
        client,
        trio.open_nursery() as nursery,
        RedisAccounts(url, namespace=f"measure-{lease}", worker="measure") as hub,
    ):
        bucket = hub.token_bucket(
            "quota", rpm=60_000_000, tpm=60_000_000, lease=lease, lease_max=10_000
        )
        await nursery.start(admission.run)
        admission.release(await admission.admit(Demand().add(bucket, 1)))  # warm up
        settles, calls = hub.round_trips, await _evalsha_calls(client)
        started = time.perf_counter()
        for _ in range(grants):
            admission.release(await admission.admit(Demand().add(bucket, 1)))
        elapsed = time.perf_counter() - started
        settles = hub.round_trips - settles
        calls = await _evalsha_calls(client) - calls
        admission.stop()
    return settles, calls, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grants", type=int, default=1000)
    grants = parser.parse_args().grants
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("no redis-server on PATH")
    port, directory = _free_port(), Path(tempfile.mkdtemp(prefix="measure-redis-"))
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
        + ["--save", "", "--appendonly", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        print(f"{grants} grants on one shared bucket, the rate never binding")
        print(f"{'mode':<16}{'settles/grant':>15}{'EVALSHA/grant':>15}{'us/grant':>10}")
        for lease in (True, False):
            settles, calls, elapsed = trio.run(_measure, url, lease, grants)
            mode = "with leases" if lease else "without leases"
            print(
                f"{mode:<16}{settles / grants:>15.4f}{calls / grants:>15.4f}"
                f"{elapsed / grants * 1e6:>10.0f}"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
