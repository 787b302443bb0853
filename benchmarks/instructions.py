"""Instructions per job, counted with callgrind: ``python -m benchmarks.instructions``.

A timed ratio on a shared two-core machine moves by a third from one run to the next; the
number of instructions a path executes does not move at all. This script runs each measured
path in a fresh interpreter under ``valgrind --tool=callgrind`` and counts only the measured
section: N jobs' work, divided by N.

How only the section is counted. Callgrind starts with collection off
(``--collect-atstart=no``) and toggles it on entry to and exit from one C function
(``--toggle-collect=_operator_call``, the C body of :func:`operator.call`, which neither trio nor
nucleo_trio calls). The run is driven by :func:`run_marked`, a copy of ``trio.run``'s own loop
(the same ``setup_runner`` and ``unrolled_run`` generator, the same ``get_events`` between
batches) that sends each scheduler batch of the measured section through ``operator.call``, and
every other batch directly. The section starts and ends on a batch boundary: :meth:`Mark.start`
waits until every task is blocked, raises the flag and yields; :meth:`Mark.stop` lowers it and
yields. So interpreter start-up, imports, opening and closing a dispatcher and parking a line
are never counted; what is counted beyond the N jobs is one empty scheduler batch at either end
(about 150,000 instructions in all, under 0.1 % of any figure here at the default N).

The garbage collector is off in the measured interpreter (``gc.disable()`` after a full
collection): whether a full collection falls inside the section moves a per-job figure by tens of
thousands of instructions, and what a job leaves for the collector is measured by the
``parked`` benchmark instead. ``PYTHONHASHSEED=0`` makes the runs repeat exactly.

The subjects (``--only NAME``, repeatable):

* ``bare``: a trio task and a :class:`trio.Event` per job (the timed baseline of ``dispatch``);
* ``nursery``: the same task opening and closing an empty nursery;
* ``floor``: the minimal runtime of issue 23 (:mod:`benchmarks._floor`): the nursery per job, a
  timekeeper entry, a context with state and a contextvar, a grant on a counting account
  through a monitor, a handle with a result, one event appended;
* ``job``: a no-resource :class:`~nucleo_trio.jobs.Tool` through ``open_dispatcher``,
  ``submit`` and ``await handle.result()``;
* ``gate``: the same job holding one unit of a roomy ``CountingGate`` (one that never fills);
* ``listened``: the no-resource job with one no-op observer of every event;
* ``handoff``: a grant under contention, per grant: a line parked on a one-slot gate directly on
  ``Admission``, drained one grant at a time (each granted waiter releases at once);
* ``limiter``: the same drain on ``trio.CapacityLimiter(1)``.

The table gives instructions per job (per grant for the last two) and the ratios issue 23 reads:
the no-resource job against the bare task and against the floor (target: at most 260,000, at
most 1.3 times the floor). ``python -m benchmarks.run --only dispatch`` reports the same counts
for ``bare``, ``floor``, ``job`` and ``gate`` beside its timed rows, and says "valgrind not
installed" when there is no ``valgrind`` on ``PATH`` (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio
import trio.testing

from ._at import snapshot

__all__ = [
    "SUBJECTS",
    "Count",
    "Mark",
    "MISSING",
    "count",
    "count_many",
    "run_marked",
    "valgrind",
]

MARKER = "_operator_call"
"""The C function whose calls callgrind counts: the body of :func:`operator.call`."""
MISSING = "valgrind not installed"
JOB_TARGET = 260_000
"""Issue 23: instructions per no-resource job."""
FLOOR_TARGET = 1.3
"""Issue 23: the no-resource job against the floor, in instructions."""
DEFAULT_JOBS = 2_000


class Mark:
    """The measured section's two ends, each on a scheduler batch boundary."""

    def __init__(self) -> None:
        self.on = False
        self.batches = 0

    async def start(self) -> None:
        await trio.testing.wait_all_tasks_blocked()
        self.on = True
        await trio.lowlevel.checkpoint()  # the batch that raised the flag ends uncounted

    async def stop(self) -> None:
        self.on = False
        await trio.lowlevel.checkpoint()  # the rest of this batch is counted; no later one


def run_marked(main: Callable[[Mark], Awaitable[None]]) -> Mark:
    """``trio.run(main, mark)``, with the batches run while ``mark.on`` sent through
    :func:`operator.call` (callgrind's toggle). The loop is ``trio.run``'s own."""
    from sniffio import thread_local as sniffio_library
    from trio._core._run import setup_runner, unrolled_run

    mark = Mark()
    runner = setup_runner(None, (), False, True)
    call = operator.call
    previous, sniffio_library.name = sniffio_library.name, "trio"
    try:
        gen = unrolled_run(runner, main, (mark,))
        next_send: Any = None
        while True:
            try:
                if mark.on:
                    mark.batches += 1
                    timeout = call(gen.send, next_send)
                else:
                    timeout = gen.send(next_send)
            except StopIteration:
                break
            if mark.on:
                next_send = call(runner.io_manager.get_events, timeout)
            else:
                next_send = runner.io_manager.get_events(timeout)
    finally:
        sniffio_library.name = previous
    if runner.main_task_outcome is None:
        raise RuntimeError("run_marked: the main task never finished")
    runner.main_task_outcome.unwrap()
    return mark


# -- the subjects ---------------------------------------------------------------------------------
Body = Callable[[Mark, int], Awaitable[None]]


async def _settled_tasks(
    mark: Mark, n: int, settle: Callable[[trio.Event], Awaitable[None]]
) -> None:
    """N tasks in one nursery, each running ``settle`` on an event the main task awaits."""
    async with trio.open_nursery() as nursery:
        await mark.start()
        events: list[trio.Event] = []
        for _ in range(n):
            done = trio.Event()
            events.append(done)
            nursery.start_soon(settle, done)
        for done in events:
            await done.wait()
        await trio.testing.wait_all_tasks_blocked()
        await mark.stop()


async def _bare(mark: Mark, n: int) -> None:
    async def settle(done: trio.Event) -> None:
        done.set()

    await _settled_tasks(mark, n, settle)


async def _nursery(mark: Mark, n: int) -> None:
    async def settle(done: trio.Event) -> None:
        async with trio.open_nursery():
            pass
        done.set()

    await _settled_tasks(mark, n, settle)


async def _floor(mark: Mark, n: int) -> None:
    from ._floor import CountingAccount, nop, open_floor

    account = CountingAccount("roomy", 10 * n + 1)
    async with open_floor() as runtime:
        await mark.start()
        handles = [runtime.submit(nop, account) for _ in range(n)]
        for handle in handles:
            await handle.result()
        await trio.testing.wait_all_tasks_blocked()
        await mark.stop()


async def _dispatched(mark: Mark, n: int, *, gate: bool = False, listened: bool = False) -> None:
    from nucleo_trio.admission import CountingGate
    from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
    from nucleo_trio.jobs import workflow

    from .dispatch_overhead import CountingObserver, Nop, OneUnit

    roomy = CountingGate("roomy", 10 * n + 1)
    observer = CountingObserver()
    async with open_dispatcher(DispatcherConfig()) as dispatcher:
        if listened:
            dispatcher.bus.subscribe(observer)
        root = workflow("bench", "instructions")
        await mark.start()
        if gate:
            handles = [dispatcher.submit(OneUnit(root, roomy)) for _ in range(n)]
        else:
            handles = [dispatcher.submit(Nop(root)) for _ in range(n)]
        for handle in handles:
            await handle.result()
        await trio.testing.wait_all_tasks_blocked()
        await mark.stop()
    if listened and observer.seen < n:
        raise RuntimeError(f"the observer saw {observer.seen} events for {n} jobs")


async def _job(mark: Mark, n: int) -> None:
    await _dispatched(mark, n)


async def _gate(mark: Mark, n: int) -> None:
    await _dispatched(mark, n, gate=True)


async def _listened(mark: Mark, n: int) -> None:
    await _dispatched(mark, n, listened=True)


async def _handoff(mark: Mark, n: int) -> None:
    from nucleo_trio.admission import Admission, CountingGate, Demand

    admission = Admission()
    gate = CountingGate("slot", 1)
    drained = trio.Event()
    left = n

    async def waiter() -> None:
        nonlocal left
        grant = await admission.admit(Demand().add(gate))
        admission.release(grant)
        left -= 1
        if left == 0:
            drained.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        held = await admission.admit(Demand().add(gate))
        for _ in range(n):
            nursery.start_soon(waiter)
        await mark.start()
        if admission.queue_size != n:
            raise RuntimeError(f"{admission.queue_size} parked, expected {n}")
        admission.release(held)
        await drained.wait()
        await trio.testing.wait_all_tasks_blocked()
        await mark.stop()
        nursery.cancel_scope.cancel()


async def _limiter(mark: Mark, n: int) -> None:
    limiter = trio.CapacityLimiter(1)
    drained = trio.Event()
    left = n

    async def waiter() -> None:
        nonlocal left
        async with limiter:
            pass
        left -= 1
        if left == 0:
            drained.set()

    async with trio.open_nursery() as nursery:
        await limiter.acquire()
        for _ in range(n):
            nursery.start_soon(waiter)
        await mark.start()
        if limiter.statistics().tasks_waiting != n:
            raise RuntimeError("the line did not form")
        limiter.release()
        await drained.wait()
        await trio.testing.wait_all_tasks_blocked()
        await mark.stop()


@attrs.frozen
class Subject:
    label: str
    body: Body
    unit: str = "job"


SUBJECTS: dict[str, Subject] = {
    "bare": Subject("bare trio: a task + Event per job", _bare),
    "nursery": Subject("the same task opening an empty nursery", _nursery),
    "floor": Subject(
        "the floor: a minimal runtime with the nursery (benchmarks/_floor.py)", _floor
    ),
    "job": Subject("nucleo_trio: no-resource job, submit + await result", _job),
    "gate": Subject("nucleo_trio: one unit of a roomy gate per job", _gate),
    "listened": Subject(
        "nucleo_trio: no-resource job + 1 no-op observer of every event", _listened
    ),
    "handoff": Subject("a grant under contention: Admission, one-slot gate", _handoff, "grant"),
    "limiter": Subject("the same drain on trio.CapacityLimiter(1)", _limiter, "grant"),
}


# -- counting -------------------------------------------------------------------------------------
@attrs.frozen
class Count:
    """One subject's count: instructions in the measured section, and per job (or grant)."""

    subject: str
    n: int
    instructions: int
    batches: int

    @property
    def per(self) -> float:
        return self.instructions / self.n


def valgrind() -> str | None:
    """The ``valgrind`` on ``PATH``, or None."""
    return shutil.which("valgrind")


_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_BATCHES = re.compile(r"^marked batches: (\d+)$", re.MULTILINE)


def count(
    subject: str,
    n: int = DEFAULT_JOBS,
    *,
    root: str | None = None,
    env: dict[str, str] | None = None,
) -> Count:
    """Run ``subject`` with ``n`` jobs under callgrind in a fresh interpreter and count it:
    in this tree, or in the tree at ``root`` run with ``env`` (see :mod:`benchmarks._at`)."""
    program = valgrind()
    if program is None:
        raise RuntimeError(MISSING)
    if subject not in SUBJECTS:
        raise ValueError(f"unknown subject {subject!r}; one of: {', '.join(SUBJECTS)}")
    if root is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**(os.environ if env is None else env), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="nucleo-callgrind-") as scratch:
        command = [
            program,
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--toggle-collect={MARKER}",
            f"--callgrind-out-file={os.path.join(scratch, 'callgrind.out')}",
            sys.executable,
            "-m",
            "benchmarks.instructions",
            "--child",
            subject,
            str(n),
        ]
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    collected = _COLLECTED.findall(done.stderr)
    batches = _BATCHES.search(done.stdout)
    if done.returncode != 0 or not collected or batches is None:
        raise RuntimeError(
            f"callgrind run of {subject!r} failed (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    instructions = int(collected[-1])
    if instructions == 0:
        raise RuntimeError(
            f"callgrind counted nothing for {subject!r}: is {MARKER} a symbol of "
            f"{sys.executable} (not stripped)?"
        )
    return Count(subject, n, instructions, int(batches.group(1)))


def count_many(
    subjects: Sequence[str], n: int = DEFAULT_JOBS, *, workers: int = 2, at: str | None = None
) -> list[Count]:
    """:func:`count` for each subject, ``workers`` interpreters at a time (counts do not depend
    on what else runs), in the order given; ``at`` a commit to count instead of this tree."""
    with contextlib.ExitStack() as stack:
        root, env = stack.enter_context(snapshot(at)) if at is not None else (None, None)
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda subject: count(subject, n, root=root, env=env), subjects))


def _child(subject: str, n: int) -> None:
    body = SUBJECTS[subject].body
    gc.collect()
    gc.disable()

    async def main(mark: Mark) -> None:
        await body(mark, n)

    mark = run_marked(main)
    print(f"marked batches: {mark.batches}")


def _table(counts: Sequence[Count]) -> str:
    from ._harness import Row, format_table

    by_name = {c.subject: c for c in counts}
    rows: list[Row] = []
    for c in counts:
        subject = SUBJECTS[c.subject]
        rows.append(
            Row(
                "instructions",
                f"{subject.label}, N={c.n:,}",
                round(c.per),
                f"instr/{subject.unit}",
            )
        )
    job, bare, floor = by_name.get("job"), by_name.get("bare"), by_name.get("floor")
    if job is not None:
        rows.append(
            Row(
                "instructions",
                "no-resource job: instructions per job",
                round(job.per),
                "instr/job",
                f"<= {JOB_TARGET:,}",
                "met" if job.per <= JOB_TARGET else "MISSED",
            )
        )
    for name, other in (("bare", bare), ("floor", floor), ("nursery", by_name.get("nursery"))):
        if other is None:
            continue
        if job is not None:
            target = f"<= {FLOOR_TARGET:g}x" if name == "floor" else ""
            verdict = ""
            if name == "floor":
                verdict = "met" if job.per / other.per <= FLOOR_TARGET else "MISSED"
            rows.append(
                Row("instructions", f"job / {name}", job.per / other.per, "x", target, verdict)
            )
        if name != "bare" and bare is not None:
            rows.append(Row("instructions", f"{name} / bare", other.per / bare.per, "x"))
    for name in ("gate", "listened"):
        other = by_name.get(name)
        if other is not None and job is not None:
            rows.append(Row("instructions", f"{name} / job", other.per / job.per, "x"))
            rows.append(
                Row("instructions", f"{name} - job", round(other.per - job.per), "instr/job")
            )
    handoff, limiter = by_name.get("handoff"), by_name.get("limiter")
    if handoff is not None and limiter is not None:
        rows.append(Row("instructions", "handoff / limiter", handoff.per / limiter.per, "x"))
    return format_table(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions",
        description="Instructions per job of each measured path, counted with callgrind.",
    )
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help="jobs (grants) per subject")
    parser.add_argument(
        "--only", action="append", choices=list(SUBJECTS), metavar="NAME", help="one subject"
    )
    parser.add_argument(
        "--at",
        metavar="COMMIT",
        help="count that commit (git archive) with this tree's benchmarks instead of this tree",
    )
    parser.add_argument("--child", nargs=2, metavar=("SUBJECT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return 0
    if valgrind() is None:
        print(f"{MISSING}: apt-get install valgrind", file=sys.stderr)
        return 1
    chosen = args.only or list(SUBJECTS)
    from ._harness import machine_line, progress

    where = f"at {args.at}" if args.at else "this tree"
    progress(f"callgrind, collector off, N={args.jobs:,}, {where}: {', '.join(chosen)}")
    counts = count_many(chosen, args.jobs, at=args.at)
    print(
        f"instructions per job ({where}; callgrind, collector off, PYTHONHASHSEED=0): "
        f"{machine_line()}"
    )
    print()
    print(_table(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
