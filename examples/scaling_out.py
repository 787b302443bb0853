"""Four worker processes (each its own trio.run and dispatcher, loaded 15, 8, 3 and 1 calls a
second) share one provider quota through Redis: a bucket of 20 calls at once and 10 a second.
Each call stamps its start in Redis, on Redis's clock; the parent prints what the provider saw.
Needs the nucleo-trio-redis plugin (pip install -e plugins/nucleo-trio-redis) and a Redis URL,
or redis-server to start a throwaway one (apt-get update && apt-get install redis-server).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time

import trio

from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

try:
    import coredis
    from nucleo_trio_redis import RedisAccounts
except ModuleNotFoundError as missing:  # one line saying what to install, not a traceback
    sys.exit(f"{missing.name} is missing: pip install -e plugins/nucleo-trio-redis")

RATES, SECONDS, WINDOW, BURST, PER_SECOND = (15, 8, 3, 1), 6, 2, 20, 10
STAMP = "local t = redis.call('TIME') redis.call('RPUSH', KEYS[1], t[1] * 1e6 + t[2]) return 1"


async def worker(url: str, space: str, name: str, rate: int) -> None:
    class Call(Tool[None]):  # one call to the provider: one request of the shared quota
        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(api, 1)

        async def execute(self, context: JobContext) -> None:
            await client.eval(STAMP, keys=[f"{{{space}}}:calls"], args=[])

    client = coredis.Redis.from_url(url, decode_responses=True)
    async with client, RedisAccounts(url, namespace=space, worker=name) as redis:
        api = redis.token_bucket("api", rpm=PER_SECOND * 60, tpm=10**6, burst=BURST)
        with trio.CancelScope() as scope:
            async with open_dispatcher() as dispatcher:
                print("ready", flush=True)  # then wait for the parent's "go"
                await trio.to_thread.run_sync(sys.stdin.readline)
                scope.deadline = trio.current_time() + SECONDS  # then cancel what still waits
                for _ in range(rate * SECONDS):
                    dispatcher.submit(Call(workflow(name, "calls")))
                    await trio.sleep(1 / rate)


async def report(url: str, space: str, workers: list[subprocess.Popen[str]]) -> None:
    async with coredis.Redis.from_url(url, decode_responses=True) as client:
        start = (await client.time()).timestamp()  # Redis's clock, as the calls' stamps
        for process in workers:  # every worker is ready: start them all at once
            print("go", file=process.stdin, flush=True)
        if any(codes := await trio.to_thread.run_sync(lambda: [p.wait() for p in workers])):
            sys.exit(f"a worker failed: exit statuses {codes}")
        calls = [int(t) / 1e6 - start for t in await client.lrange(f"{{{space}}}:calls", 0, -1)]
    allowed = BURST + PER_SECOND * WINDOW  # the most any WINDOW seconds may hold
    print(f"{len(RATES)} workers, one bucket: at most {allowed} calls in any {WINDOW} s")
    for begin in range(0, SECONDS, WINDOW):
        count = sum(begin <= t < begin + WINDOW for t in calls)
        print(f"  {begin}-{begin + WINDOW} s: {count:3} calls")
    busiest = max(sum(t <= u < t + WINDOW for u in calls) for t in calls)
    used = sum(t < SECONDS for t in calls) / (BURST + PER_SECOND * SECONDS)
    print(f"busiest {WINDOW} s: {busiest} calls; quota used in {SECONDS} s: {used:.0%}")


def start_redis() -> tuple[str, subprocess.Popen[bytes]]:
    if shutil.which("redis-server") is None:
        sys.exit(
            "no redis-server: pass a Redis URL, or apt-get update && apt-get install redis-server"
        )
    with socket.socket() as probe:  # a free port on the loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = f"--port {port} --bind 127.0.0.1 --appendonly no"  # no persistence: no files
    server = subprocess.Popen(["redis-server", *options.split(), "--save", ""], stdout=-3)
    while True:  # until it listens
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            return f"redis://127.0.0.1:{port}/0", server
        time.sleep(0.05)


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        url, space, name, rate = sys.argv[2:6]
        return trio.run(worker, url, space, name, int(rate))
    url, server = (sys.argv[1], None) if len(sys.argv) > 1 else start_redis()
    space = f"scaling-out-{os.getpid()}"  # a fresh quota for this run
    command = [sys.executable, __file__, "--worker", url, space]
    workers = [subprocess.Popen([*command, f"w{i}", str(r)], stdin=-1, stdout=-1, text=True)
               for i, r in enumerate(RATES)]  # fmt: skip
    try:
        for process in workers:  # wait until each is ready (stdin and stdout are pipes: -1)
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        trio.run(report, url, space, workers)
    finally:
        if server is not None:
            server.terminate()


if __name__ == "__main__":
    main()
