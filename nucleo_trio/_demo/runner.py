"""Running the demo: build the accounts, run the workflow under one dispatcher, print the tally.

A :class:`~nucleo_trio.observability.TrajectoryRecorder` records the run into a SQLite file (a
temporary one unless ``record`` names one), and the report ends with the workflow read back from
it in call order. With ``events`` a :class:`~nucleo_trio.observability.JsonLinesSink` writes every event
of the run to that file.

On a terminal the fan-out shows a progress bar (rich), cleared when the run ends; a pipe, a
file or a test gets the plain report alone. The bar ticks from the tally's own subscription, so
drawing it adds no task to the run and a seed prints the same numbers either way; so does
writing the events.

By default the whole run happens in virtual time: ``trio.run`` gets a
:class:`trio.testing.MockClock` with ``autojump_threshold=0``, so whenever every task is waiting
the clock jumps straight to the next deadline. A run that spans half a minute of timeouts,
re-run pacing and quota windows takes a fraction of a second, and, with trio's scheduler seeded
as well, the same seed prints the same numbers. ``real_time`` runs it on the wall clock instead.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

import attrs
import pluggy
import trio
import trio.testing

from .._progress import RunProgress, terminal_console
from ..admission import CountingGate
from ..bus import JobObserver, MessageBus, events as ev
from ..dispatch import DispatcherConfig, open_dispatcher
from ..jobs import JobState, workflow
from ..observability import (
    HealthSnapshot,
    JsonLinesSink,
    Trajectory,
    TrajectoryRecorder,
    trajectory,
)
from ..plugins.manager import make_plugin_manager
from .memory import DemoMemory
from .options import (
    DB_SLOTS,
    HEALTH_AT,
    HTTP_CONNECTIONS,
    SEARCH_REQUESTS_PER_SECOND,
    DemoOptions,
)
from .quota import SearchApiQuota
from .render import Style, render_header, render_health, render_report, render_trajectory_section
from .tally import Tally, TallyReport
from .thinking import render_thinker_section, run_thinker
from .workload import KIND_CLASSES, Accounts, Fanout, JobPlan, Signals, plan_workload

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["DemoOutcome", "execute_demo", "run_demo"]


@attrs.frozen
class DemoOutcome:
    """One finished run: what the bus told, what the orchestrator saw, and how long it took.

    ``elapsed`` is seconds on the run's own clock (virtual or real) from the root's submission
    to its settlement; ``wall`` is the real seconds the whole ``trio.run`` took. ``health`` is
    what ``dispatcher.health()`` answered :data:`~.options.HEALTH_AT` seconds into the run
    (``None`` if the run ended before). ``trajectory`` is the workflow as the recorder kept it.
    """

    report: TallyReport
    states: Mapping[JobState, int]
    elapsed: float
    wall: float
    health: HealthSnapshot | None = None
    trajectory: Trajectory | None = None
    interrupted: bool = False
    """Ctrl-C stopped the run: the dispatcher cancelled what was left, and the report tells
    what happened until then."""
    finished: int | None = None
    """After Ctrl-C, how many jobs had settled before it (those its stop cancelled left out);
    ``None`` for a run that was not interrupted. ``elapsed`` then runs to the interrupt."""

    def inconsistencies(self, jobs: int) -> list[str]:
        """Where the numbers do not add up; empty when every job is accounted for once."""
        total = self.report.total
        problems: list[str] = []
        if total.settled != jobs or total.jobs != jobs:
            problems.append(
                f"{jobs} jobs were submitted but the bus told of {total.jobs} jobs and "
                f"{total.settled} terminal events"
            )
        heard = {
            JobState.COMPLETED: total.completed,
            JobState.FAILED: total.failed,
            JobState.TIMED_OUT: total.timed_out,
            JobState.CANCELLED: total.cancelled,
        }
        for state, count in heard.items():
            seen = self.states.get(state, 0)
            if seen != count:
                problems.append(
                    f"the orchestrator saw {seen} {state.value} jobs, the bus told of {count}"
                )
        return problems


def run_demo(
    options: DemoOptions, out: TextIO | None = None, *, console: Console | None = None
) -> int:
    """Run the demo, print it to ``out`` (stdout by default) and answer the exit code.

    0 when every job is accounted for exactly once (the planned failures are part of the show,
    not an error), 1 when the tally does not add up, 130 when Ctrl-C stopped it (the report
    then tells what happened until the interrupt).

    The fan-out draws a progress bar on ``console``, a rich console writing to ``out``; when
    none is given, one is made if ``out`` is a terminal (and ``verbose`` is off: the runtime's
    log would tear the bar), and there is no bar otherwise.
    """
    stream = out if out is not None else sys.stdout
    style = Style.for_stream(stream, options.color)
    if console is None and not options.verbose:
        console = terminal_console(stream, color=style.color)
    plans = plan_workload(options.jobs, options.seed)
    # Plugins first: a broken one is refused in one line before anything is printed.
    plugins = make_plugin_manager()
    # The header goes out first: on the real clock the reader has something to read meanwhile.
    print(render_header(plans, options, style), file=stream, flush=True)

    with RunProgress(console, stream) as progress:

        def show(snapshot: HealthSnapshot, at: float) -> None:
            progress.print(render_health(snapshot, at, options, style))

        progress.start(f"{options.jobs} jobs", total=options.jobs)
        outcome = execute_demo(
            options, plans, on_health=show, plugins=plugins, on_settled=progress.advance
        )
    print(
        render_report(
            outcome.report, outcome.elapsed, outcome.wall, options, style, outcome.finished
        ),
        file=stream,
        flush=True,
    )
    if outcome.interrupted:
        print(
            f"\nInterrupted {outcome.elapsed:.1f} s into the run: every job still queued, "
            "parked or running was cancelled, and the report above is what happened until then.",
            file=stream,
            flush=True,
        )
        return 130
    if outcome.trajectory is not None:
        print(render_trajectory_section(outcome.trajectory, options, style), file=stream)
    thinker = run_thinker(options.seed, verbose=options.verbose)
    print(render_thinker_section(thinker, style), file=stream, flush=True)
    problems = outcome.inconsistencies(options.jobs)
    for problem in problems:
        print(f"nucleo-trio demo: the tally does not add up: {problem}", file=sys.stderr)
    return 1 if problems else 0


def execute_demo(
    options: DemoOptions,
    plans: Sequence[JobPlan] | None = None,
    *,
    on_health: Callable[[HealthSnapshot, float], None] | None = None,
    plugins: pluggy.PluginManager | None = None,
    on_settled: Callable[[], None] | None = None,
) -> DemoOutcome:
    """Run the workload (``plans``, or the seeded plan of ``options``) and print nothing.

    ``on_health`` is handed the mid-run health snapshot and its time into the run, as soon as
    it is taken. ``plugins`` is the plugin manager the dispatcher uses (loaded afresh if
    ``None``). ``on_settled`` is called each time one of the fanned-out jobs settles.
    """
    if plans is None:
        plans = plan_workload(options.jobs, options.seed)
    started = time.perf_counter()
    with (
        _runtime_logs(options.verbose),
        _full_collections_paced_for_the_fan_out(),
        tempfile.TemporaryDirectory() as scratch,
    ):
        database = options.record or f"{scratch}/demo.db"
        # On the loop in virtual time: a worker thread answering at a moment of its own
        # choosing would reorder trio's seeded scheduler, and the same seed must print the
        # same run (a stalled loop costs nothing in virtual time).
        recorder = TrajectoryRecorder(database, in_thread=options.real_time)
        sink = None if options.events is None else JsonLinesSink(options.events)
        tally = _tally(on_settled)
        observer: JobObserver[ev.JobEvent] = tally if sink is None else _Both(tally, sink)
        run = (tuple(plans), options, on_health, recorder, plugins, tally, observer)
        try:
            if options.real_time:
                report, states, elapsed, health, root, finished = trio.run(_run, *run)
            else:
                with _seeded_scheduler(options.seed):
                    clock = trio.testing.MockClock(autojump_threshold=0)
                    report, states, elapsed, health, root, finished = trio.run(
                        _run, *run, clock=clock
                    )
        finally:
            recorder.close()
            if sink is not None:
                sink.close()
        recorded = trajectory(database, root)
    wall = time.perf_counter() - started
    return DemoOutcome(
        report, states, elapsed, wall, health, recorded, finished is not None, finished
    )


async def _run(
    plans: tuple[JobPlan, ...],
    options: DemoOptions,
    on_health: Callable[[HealthSnapshot, float], None] | None,
    recorder: TrajectoryRecorder,
    plugins: pluggy.PluginManager | None,
    tally: Tally,
    observer: JobObserver[ev.JobEvent],
) -> tuple[TallyReport, Mapping[JobState, int], float, HealthSnapshot | None, str, int | None]:
    accounts = Accounts(
        db=CountingGate("db", DB_SLOTS),
        search_api=SearchApiQuota("search-api", SEARCH_REQUESTS_PER_SECOND, 1.0),
    )
    tally.watch(accounts.db, f"{DB_SLOTS} slots")
    # Subscribed before the dispatcher starts, so the tally hears its very first event too.
    bus = MessageBus()
    bus.subscribe(observer)
    recorder.attach(bus)
    config = DispatcherConfig(
        http_connections=HTTP_CONNECTIONS, seed=options.seed, control_socket=options.control_socket
    )
    signals = Signals.brief() if options.real_time else Signals()
    health: list[HealthSnapshot] = []
    root = Fanout(workflow("demo-user", "demo"), plans, accounts, signals)
    states: Mapping[JobState, int] = {}
    started = trio.current_time()
    interrupt: list[float] = []  # the wall-clock and trio instants Ctrl-C reached the run
    finished: int | None = None
    try:
        # The process's real memory would make two runs print two different "Memory:" lines.
        async with open_dispatcher(
            config, bus=bus, memory=DemoMemory(), plugin_manager=plugins
        ) as dispatcher:
            tally.watch(dispatcher.http_gate, f"{HTTP_CONNECTIONS} connections")
            tally.watch(accounts.search_api, f"{SEARCH_REQUESTS_PER_SECOND} per second")
            started = trio.current_time()
            handle = dispatcher.submit(root)
            with _noting_interrupt(interrupt):
                async with trio.open_nursery() as nursery:

                    async def look_mid_run() -> None:
                        await trio.sleep_until(started + HEALTH_AT)
                        health.append(dispatcher.health())
                        if on_health is not None:
                            on_health(health[0], HEALTH_AT)

                    nursery.start_soon(look_mid_run)
                    states = await handle.result()
                    elapsed = trio.current_time() - started
                    nursery.cancel_scope.cancel()
    except KeyboardInterrupt:
        # Ctrl-C: the dispatcher cancelled every job and the bus delivered every terminal
        # event before the interrupt left the block, so the tally is whole up to here. The
        # rate counts the jobs that settled before the interrupt, not those it cancelled.
        if not interrupt:  # it came while the dispatcher started or stopped
            interrupt.extend((time.time(), trio.current_time()))
        wall, at = interrupt
        elapsed = at - started
        finished = tally.settled_by(wall)
    # Leaving the block shut the dispatcher down, and the bus delivered everything before it.
    snapshot = health[0] if health else None
    return tally.report(), states, elapsed, snapshot, root.workflow_id, finished


@contextlib.contextmanager
def _noting_interrupt(moments: list[float]) -> Iterator[None]:
    """Note in ``moments`` the wall-clock and trio instants a Ctrl-C leaves the block with,
    before the dispatcher's stop cancels what is left."""
    try:
        yield
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or (
            isinstance(exc, BaseExceptionGroup) and exc.split(KeyboardInterrupt)[0] is not None
        )
        if interrupted and not moments:
            moments.extend((time.time(), trio.current_time()))
        raise


def _tally(on_settled: Callable[[], None] | None) -> Tally:
    return Tally({cls.__name__: kind for kind, cls in KIND_CLASSES.items()}, on_settled)


class _Both(JobObserver[ev.JobEvent]):
    """The tally and the events file on one subscription: a second one would add a task to
    the run, and trio's seeded scheduler would then order the run differently."""

    def __init__(self, tally: Tally, sink: JsonLinesSink) -> None:
        self.tally = tally
        self.sink = sink

    async def on_event(self, event: ev.JobEvent) -> None:
        self.tally.record(event)
        self.sink.write(event)


@contextlib.contextmanager
def _runtime_logs(verbose: bool) -> Iterator[None]:
    """Keep the runtime's own failure logs (a stack trace per planned failure) off the
    terminal unless asked for: the report shows each kind of failure in one line."""
    logger = logging.getLogger("nucleo_trio")
    if verbose:
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        yield
        return
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


FULL_COLLECTION_EVERY = 1_000
"""The third threshold of :func:`gc.set_threshold` during a run: how many collections of the
middle generation come before the collector considers a full one (CPython's default is 10)."""


@contextlib.contextmanager
def _full_collections_paced_for_the_fan_out() -> Iterator[None]:
    """Let the collector's full passes wait during the run, and put its thresholds back after.

    The root submits every job at once and each one waits in admission as a task of its own:
    about 70 tracked objects per job that live until the job settles, so the heap grows by
    hundreds of thousands of objects in the first virtual instant (some 670,000 for 10,000
    jobs). A full collection walks every one of them and frees none. With CPython's default
    thresholds one is considered every 77,000 net new objects, and the 25 % rule that bounds
    them (a full pass only once the objects promoted since the last one are a quarter of
    those it kept) only binds past some 300,000: 2 full passes for 1,000 jobs, 8 for 10,000,
    each slower per object as the heap outgrows the caches, so the cost per job grew with N.
    With the full passes a hundred times rarer, none happens during a run of up to 10,000 jobs
    (one follows it, once the thresholds are back) and the cost per job stays flat. The young
    collections keep their pace, so short-lived cycles are freed as before; a long-lived one
    waits for the pass after the run, as it did after the fan-out anyway. What the collector
    frees, and when, moves memory addresses, which decide the order trio wakes tasks whose
    deadlines tie; the tally picks its examples so that nothing printed depends on it.
    """
    previous = gc.get_threshold()
    gc.set_threshold(previous[0], previous[1], max(previous[2], FULL_COLLECTION_EVERY))
    try:
        yield
    finally:
        gc.set_threshold(*previous)


@contextlib.contextmanager
def _seeded_scheduler(seed: int) -> Iterator[None]:
    """Seed trio's scheduler for the run, and put its state back afterwards.

    trio deliberately runs each batch of ready tasks in a random order (to flush out code that
    depends on an order it never promised), drawing from a module-level ``random.Random``. The
    demo depends on no order either, but seeding that generator makes a virtual-time run repeat
    exactly, wait for wait. If a future trio moves it, the run is merely not bit-for-bit
    repeatable.
    """
    try:
        module = importlib.import_module("trio._core._run")
    except ImportError:  # pragma: no cover - a trio without this layout
        yield
        return
    rng = getattr(module, "_r", None)
    if not isinstance(rng, random.Random):  # pragma: no cover - as above
        yield
        return
    state = rng.getstate()
    rng.seed(seed)
    try:
        yield
    finally:
        rng.setstate(state)
