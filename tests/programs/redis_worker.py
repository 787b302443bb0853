"""A worker process for the multi-process tests and benchmarks: its own ``trio.run``, its own
dispatcher, and one account on a quota several such processes share.

Run as ``python -m tests.programs.redis_worker URL --worker w1 --kind bucket ...``. The worker
opens its account and its dispatcher, prints a ``ready`` line, and waits until ``--start-at``
(microseconds on the Redis server's clock; read from the first line of stdin when not given, so
a parent can start every worker and then tell them all one instant). Then it submits jobs at
``--rate`` a second for ``--duration`` seconds (or ``--jobs`` of them, or until a ``stop``
line arrives on stdin). Each job needs ``--amount`` of the account; as it starts and as it
ends it appends a line to the upstream log (``--log``, a Redis list) stamped by the server
(:data:`benchmarks._redis_quota.UPSTREAM_LOG_SCRIPT`), which is what a provider behind the
quota would see, and each start is also a ``started`` line on stdout. At the end the worker
cancels what still waits, closes the account (a shared one hands its unused lease back) and
prints one JSON line: how many jobs it submitted, started and saw fail (by the failure's
type, with the first message of each), and the account's status. The upstream log may live on
a Redis of its own (``--log-url``), so a test can restart the quota's Redis and keep the log.

``--local`` gives the worker a local account with the whole quota instead of the shared one:
what one configures without shared accounts, and what overshoots with four workers (the
benchmark shows by how much).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import coredis
import trio

from benchmarks._redis_quota import MICROS, UPSTREAM_LOG_SCRIPT, redis_now_us
from nucleo_trio.admission import (
    CountingGate,
    ElasticWindow,
    RateLimiter,
    TokenBucket,
    TokenBucketConfig,
)
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, JobHandle, JobRequirements, Tool, workflow

TOKENS_PER_REQUEST_CAP = 1000
"""A bucket's tokens a minute per request a minute: jobs ask for far fewer tokens than this, so
only the request side binds."""

KINDS = ("bucket", "window", "gate", "limits")
"""The shared account's kind; ``limits`` is no account of ours but ``limits``' own moving window
on the same Redis (``async+redis://``), driven by the same load for comparison."""


def _positive(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a positive finite number, got {text!r}")
    return value


def _not_negative(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a finite number >= 0, got {text!r}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive whole number, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """The worker's command line (every option is checked where it is read)."""
    p = argparse.ArgumentParser(prog="python -m tests.programs.redis_worker")
    p.add_argument("url", help="the Redis server, redis://host:port/db")
    p.add_argument("--worker", required=True, help="this worker's name in the logs")
    p.add_argument("--kind", choices=KINDS, required=True, help="the shared account's kind")
    p.add_argument("--name", default="quota", help="the account's name (its keys' tag)")
    p.add_argument("--limit", type=_count, required=True, help="burst, window count or permits")
    p.add_argument(
        "--period",
        type=_positive,
        default=1.0,
        help="bucket: seconds to refill --limit; window: its length (seconds)",
    )
    p.add_argument(
        "--ttl", type=_positive, default=1.0, help="shared: the hub's lease_ttl (seconds)"
    )
    p.add_argument("--local", action="store_true", help="a local account with the whole quota")
    p.add_argument("--no-lease", action="store_true", help="shared: one round trip per grant")
    p.add_argument("--grant-log", action="store_true", help="shared: keep the grant log")
    p.add_argument("--namespace", default="nucleo", help="shared: the keys' hash tag")
    p.add_argument("--log", required=True, help="the upstream log (a Redis list key)")
    p.add_argument(
        "--log-url", default=None, help="the Redis the upstream log lives on (default: url)"
    )
    p.add_argument("--rate", type=_positive, required=True, help="jobs submitted per second")
    p.add_argument("--jobs", type=_count, default=None, help="submit at most this many jobs")
    p.add_argument("--duration", type=_positive, required=True, help="seconds of submitting")
    p.add_argument(
        "--start-at",
        type=int,
        default=None,
        help="Redis time (µs) to start at; without it, read from the first line of stdin",
    )
    p.add_argument("--hold", type=_not_negative, default=0.0, help="seconds a job runs")
    p.add_argument("--amount", type=_count, default=1, help="permits or tokens per job")
    return p


def local_account(args: argparse.Namespace) -> RateLimiter:
    """One process's own account with the whole quota (the ``--local`` control)."""
    if args.kind == "bucket":
        rpm = int(args.limit * 60 / args.period)
        tpm = rpm * TOKENS_PER_REQUEST_CAP
        return TokenBucket(args.name, TokenBucketConfig(rpm, tpm, burst=args.limit))
    if args.kind == "window":

        class Window(ElasticWindow):
            base_window = args.period
            max_requests = args.limit

        return Window(args.name)
    return CountingGate(args.name, args.limit)


@asynccontextmanager
async def open_shared_account(args: argparse.Namespace) -> AsyncIterator[RateLimiter]:
    """The shared account on Redis, through a hub that settles its lease for the block's life
    and hands the unused part back when it ends."""
    from nucleo_trio_redis import RedisAccounts

    lease = not args.no_lease
    async with RedisAccounts(
        args.url, namespace=args.namespace, worker=args.worker, lease_ttl=args.ttl
    ) as redis:
        account: RateLimiter
        if args.kind == "bucket":
            rpm = int(args.limit * 60 / args.period)
            account = redis.token_bucket(
                args.name,
                rpm=rpm,
                tpm=rpm * TOKENS_PER_REQUEST_CAP,
                burst=args.limit,
                lease=lease,
                grant_log=args.grant_log,
            )
        elif args.kind == "window":
            account = redis.elastic_window(
                args.name,
                max_requests=args.limit,
                window=args.period,
                lease=lease,
                grant_log=args.grant_log,
            )
        else:
            account = redis.counting_gate(
                args.name, args.limit, lease=lease, grant_log=args.grant_log
            )
        yield account


@asynccontextmanager
async def open_account(args: argparse.Namespace) -> AsyncIterator[RateLimiter]:
    """The account the worker's jobs need: shared on Redis, or local with ``--local``."""
    if args.local:
        yield local_account(args)
        return
    async with open_shared_account(args) as account:
        yield account


class Call(Tool[None]):
    """One request against the quota: logged on the server's clock as it starts and ends."""

    timeout = 600.0

    def __init__(self, parent: Any, worker: Worker) -> None:
        super().__init__(parent)
        self._worker = worker

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self._worker.account, self._worker.amount)

    async def execute(self, context: JobContext) -> None:
        await self._worker.stamp_start(self.job_id, context.started_at)
        if self._worker.hold > 0:
            await trio.sleep(self._worker.hold)
        await self._worker.log("end", self.job_id)


class Worker:
    """What the jobs of one worker share: the account, the log, and the counts."""

    def __init__(self, args: argparse.Namespace, client: Any, account: Any) -> None:
        self.name: str = args.worker
        self.account: RateLimiter = account
        self.amount: Any = None if args.kind == "gate" and args.amount == 1 else args.amount
        self.hold: float = args.hold
        self._client = client
        self._script = client.register_script(UPSTREAM_LOG_SCRIPT)
        self._log_key: str = args.log
        self.submitted = 0
        self.started = 0
        self.failed: dict[str, int] = {}
        self.failures: dict[str, str] = {}
        self.stamp_lag = 0.0  # the longest a start's stamp came back after the job started

    async def outcome(self, handle: JobHandle[None]) -> None:
        """Wait for one job; a failure is counted by its type, with its first message."""
        try:
            await handle.result()
        except Exception as failure:  # the job's own failure, as its handle raises it
            kind = type(failure).__name__
            self.failed[kind] = self.failed.get(kind, 0) + 1
            self.failures.setdefault(kind, str(failure))

    def summary(self, status: str) -> dict[str, Any]:
        """The line the worker prints at the end."""
        return {
            "event": "done",
            "worker": self.name,
            "submitted": self.submitted,
            "started": self.started,
            "failed": self.failed,
            "failures": self.failures,
            "stamp_lag": self.stamp_lag,
            "status": status,
        }

    async def stamp_start(self, job: str, started_at: float | None) -> None:
        """Stamp a start and count it, both or neither: shielded, so the end of the run
        cancelling the job cannot land between the stamp reaching Redis and the count (a start
        in the log that the summary missed, under load). ``started_at`` (wall-clock seconds,
        the job's move to RUNNING, after its grant) measures how late the stamp can be: a
        loaded machine stretches it, and the parent's stamp-based checks allow what it saw."""
        with trio.CancelScope(shield=True):
            await self.log("start", job)
            self.started += 1
            if started_at is not None:
                self.stamp_lag = max(self.stamp_lag, time.time() - started_at)

    async def log(self, event: str, job: str) -> None:
        """Stamp the job's start or end in the upstream log; a start is also announced on
        stdout (``{"event": "started"}``), so a parent can act once jobs hold the account."""
        amount = 1 if self.amount is None else self.amount
        await self._script(keys=[self._log_key], args=[self.name, event, job, amount])
        if event == "start":
            print(json.dumps({"event": "started", "job": job}), flush=True)


async def start_together(args: argparse.Namespace, client: Any, name: str) -> None:
    """Say ``ready``, then sleep until the start instant (given, or read from stdin)."""
    print(json.dumps({"event": "ready", "worker": name}), flush=True)
    start_at = args.start_at
    if start_at is None:  # the parent starts every worker, then tells them all when
        start_at = int(await trio.to_thread.run_sync(sys.stdin.readline))
    await trio.sleep(max(0.0, (start_at - await redis_now_us(client)) / MICROS))


async def run_limits(args: argparse.Namespace) -> dict[str, Any]:
    """The same load on ``limits``' moving window: every request asks ``hit`` and, refused,
    sleeps until the window says a slot frees (``limits`` has no line to wait in, so each
    refused request asks again then, and the first to ask wins)."""
    from limits import RateLimitItemPerSecond
    from limits.aio.strategies import MovingWindowRateLimiter
    from limits.storage import storage_from_string

    item = RateLimitItemPerSecond(args.limit, int(args.period))
    storage: Any = storage_from_string("async+" + args.url)
    client = coredis.Redis.from_url(args.url, decode_responses=True)
    async with client, storage.bridge.storage:
        limiter = MovingWindowRateLimiter(storage)
        worker = Worker(args, client, None)
        await start_together(args, client, worker.name)

        async def request(job: str) -> None:
            while not await limiter.hit(item, args.name):
                stats = await limiter.get_window_stats(item, args.name)
                await trio.sleep(max(0.001, stats.reset_time - time.time()))
            await worker.stamp_start(job)
            if worker.hold > 0:
                await trio.sleep(worker.hold)
            await worker.log("end", job)

        async with trio.open_nursery() as nursery:
            await submit_for_the_duration(
                args,
                worker,
                lambda: nursery.start_soon(request, f"{worker.name}-{worker.submitted}"),
            )
            nursery.cancel_scope.cancel()
    return worker.summary("limits moving window")


async def submit_for_the_duration(
    args: argparse.Namespace, worker: Worker, submit: Callable[[], object]
) -> None:
    """Call ``submit`` ``--rate`` times a second (at most ``--jobs`` times) until
    ``--duration`` seconds have passed, or until a ``stop`` line arrives on stdin."""
    limit = args.jobs if args.jobs is not None else math.inf
    began = trio.current_time()

    async def until_stop(scope: trio.CancelScope) -> None:
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if line.strip() == "stop" or not line:
                scope.cancel()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(until_stop, nursery.cancel_scope)
        while worker.submitted < limit:
            submit()
            worker.submitted += 1
            due = began + worker.submitted / args.rate
            if due - began >= args.duration:
                break
            await trio.sleep_until(due)
        await trio.sleep_until(began + args.duration)
        nursery.cancel_scope.cancel()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Wait for the start, submit for the duration, then cancel what waits; the counts."""
    if args.kind == "limits":
        return await run_limits(args)
    client = coredis.Redis.from_url(args.log_url or args.url, decode_responses=True)
    async with client, open_account(args) as account:
        worker = Worker(args, client, account)
        with trio.CancelScope() as scope:
            async with open_dispatcher() as dispatcher, trio.open_nursery() as outcomes:
                await start_together(args, client, worker.name)
                root = workflow(worker.name, "quota")

                def submit() -> None:
                    outcomes.start_soon(worker.outcome, dispatcher.submit(Call(root, worker)))

                await submit_for_the_duration(args, worker, submit)
                scope.cancel()  # what still waits for the quota goes; the block settles it
        status = account.status()
    summary = worker.summary(getattr(status, "summary", str(status)))
    summary["grant_log"] = getattr(account, "grant_log_key", None)
    return summary


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse combinations of options that would run something other than what was asked."""
    if args.kind == "limits" and (args.local or args.no_lease or args.grant_log):
        p.error("--kind limits takes none of --local, --no-lease, --grant-log")
    if args.kind == "limits" and not float(args.period).is_integer():
        p.error(f"--kind limits counts whole seconds: --period {args.period} is not")
    if args.local and (args.no_lease or args.grant_log):
        p.error("--local takes neither --no-lease nor --grant-log (they are shared options)")
    if args.kind == "bucket" and not (args.limit * 60 / args.period).is_integer():
        p.error(f"--limit {args.limit} per --period {args.period} s is no whole number a minute")


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    check(p, args)
    summary = trio.run(run, args)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
