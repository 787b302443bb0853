"""The ``nucleo-trio`` command line.

One parser with a subcommand per task (``demo``, ``health``, ``trajectory``, ``top``, ``events``); each subcommand adds its own arguments and names the
function that runs it (``handler``), which answers the exit code. A subcommand imports what it
runs only when it runs, so ``--help`` stays instant and one broken subcommand cannot take the
others down. ``main`` is the console script's entry point and what ``python -m nucleo_trio``
calls; argparse itself exits 2 on a bad flag, with its message.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._demo.options import (
    DB_SLOTS,
    DEFAULT_JOBS,
    DEFAULT_SEED,
    HTTP_CONNECTIONS,
    MAX_JOBS,
    MIN_JOBS,
    SEARCH_REQUESTS_PER_SECOND,
    DemoOptions,
)

__all__ = ["build_parser", "main"]

PROG = "nucleo-trio"

Handler = Callable[[argparse.Namespace], int]

READER_GONE = 141
"""The exit status when the reader of the output goes away (``nucleo-trio demo | head``):
128 + SIGPIPE, what a shell reports for a filter that the signal ended."""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when ``None``), run the subcommand, answer its exit code."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _reader_gone(exc):
            # `nucleo-trio demo | head`: the reader has what it wanted. Point stdout at devnull
            # so the interpreter's final flush does not fail a second time, and end as a filter
            # that SIGPIPE ended does, without a word: 1 would say the command failed.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return READER_GONE
        refusal = _refusal(exc)
        if refusal is None:
            raise
        print(f"{PROG} {args.command}: {refusal}", file=sys.stderr)
        return 1


def _reader_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is the output's reader having gone away (a ``BrokenPipeError``, perhaps
    inside error groups, as a write inside a trio run raises it)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_reader_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _refusal(exc: BaseException) -> BaseException | None:
    """The broken plugin or refused setting behind ``exc``, if that is what ended the command.

    Its message already names what is wrong (a plugin's distribution, entry point and import
    error; a setting's key and value), so one line says it better than a traceback. An error
    group holding only one such refusal is that refusal.
    """
    from .errors import ConfigError
    from .plugins import PluginError

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, PluginError | ConfigError) else None


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the top-level options and every subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="nucleo_trio: a trio-native structured-concurrency job runtime.",
        epilog=f"Start with `{PROG} demo`; `{PROG} COMMAND --help` describes a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_demo(commands)
    _add_health(commands)
    _add_trajectory(commands)
    _add_top(commands)
    _add_events(commands)
    return parser


# -- demo -----------------------------------------------------------------------------------------
_DEMO_DESCRIPTION = f"""\
Run the showcase. One orchestrator fans out N jobs whose demands compete for a "db" counting
gate ({DB_SLOTS} slots), the dispatcher's "http" gate ({HTTP_CONNECTIONS} connections) and "search-api", a custom
limiter written in the demo ({SEARCH_REQUESTS_PER_SECOND} requests per second). Each job's whole demand is granted at
once or it waits holding nothing. A few jobs time out, a few fail, a few are pushed back by
their upstream once and succeed on the re-run, one exhausts its re-run budget, a few are
cancelled. A bus observer tallies it all: outcomes per kind of job, admission per account,
the events by type, example failures, and the time and throughput. A TrajectoryRecorder
records every job into SQLite, and the run ends with the workflow read back in call order
(--record FILE keeps the recording; `nucleo-trio trajectory FILE` reads it again; --events FILE
writes every event as JSON lines, which `nucleo-trio events FILE` filters and prints). On a
terminal a progress bar follows the fan-out; piped, the output is the plain report alone.

By default the run happens in virtual time (trio's MockClock with autojump): instant, and the
same seed prints the same numbers. --real-time runs it on the wall clock (about ten seconds);
with --control-socket, `nucleo-trio top` in another terminal watches it (without a PATH the
socket is where top looks by default: $XDG_RUNTIME_DIR/nucleo-trio.sock, or
/tmp/nucleo-trio-UID/nucleo-trio.sock where that variable is unset or not this user's).
Exit status: 0 when every job is accounted for exactly once, 1 if the tally does not add up
or a file or socket option cannot be used, 2 for a bad option, 130 after Ctrl-C (the report
tells what happened until then), 141 when the reader of the output goes away (`demo | head`)."""


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the showcase: hundreds of jobs competing for gates and a custom limiter",
        description=_DEMO_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--jobs",
        type=_job_count,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"how many jobs the orchestrator fans out, {MIN_JOBS}..{MAX_JOBS} (default {DEFAULT_JOBS})",
    )
    demo.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"seeds the plan, the re-run pacing and the scheduler (default {DEFAULT_SEED})",
    )
    demo.add_argument(
        "--real-time",
        action="store_true",
        help="run on the real clock instead of virtual time",
    )
    demo.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="emphasis with ANSI codes: auto uses it on a terminal unless NO_COLOR is set",
    )
    demo.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="keep the run's recording in this SQLite file (a temporary file otherwise)",
    )
    demo.add_argument(
        "--events",
        metavar="FILE",
        default=None,
        help="write every event of the run to this file as JSON lines (`nucleo-trio events FILE`)",
    )
    demo.add_argument(
        "--control-socket",
        metavar="PATH",
        nargs="?",
        const="",  # given without a PATH: the default place, made before the run starts
        default=None,
        help="open the dispatcher's control socket at PATH (without one, where `nucleo-trio "
        "top` looks by default), to watch the run with `nucleo-trio top`",
    )
    demo.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the runtime's own log on stderr (a stack trace per planned failure)",
    )
    demo.set_defaults(handler=_run_demo)


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _job_count(text: str) -> int:
    value = _whole_number(text)
    if not MIN_JOBS <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be from {MIN_JOBS} to {MAX_JOBS}, got {value}")
    return value


def _run_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._demo.runner import run_demo

    for flag, path in (("--record", args.record), ("--events", args.events)):
        if path is not None and not Path(path).parent.is_dir():
            # Checked before the run: the file would only fail to open once the run started.
            print(
                f"{PROG} demo: {flag} {path}: the directory {Path(path).parent} does not exist",
                file=sys.stderr,
            )
            return 1
    control_socket = args.control_socket
    if control_socket is not None:
        from .errors import ConfigError
        from .observability.control import check_socket_path, default_socket_path

        try:
            if not control_socket:
                control_socket = str(default_socket_path(make=True))
            # Checked before the run, as the files are: the dispatcher's start would refuse
            # it only once the header is out.
            check_socket_path(control_socket)
        except (ConfigError, OSError) as exc:
            hint = "" if not args.control_socket else "; without a PATH it picks one of yours"
            print(f"{PROG} demo: --control-socket: {exc}{hint}", file=sys.stderr)
            return 1
    color = {"auto": None, "always": True, "never": False}[args.color]
    options = DemoOptions(
        jobs=args.jobs,
        seed=args.seed,
        real_time=args.real_time,
        verbose=args.verbose,
        color=color,
        record=args.record,
        events=args.events,
        control_socket=control_socket,
    )
    return run_demo(options)


# -- trajectory -----------------------------------------------------------------------------------
_TRAJECTORY_DESCRIPTION = """\
Print a recorded workflow as a tree, in the order its jobs were called: each parent's children
by iteration_number, then in submission order, depth first, with each job's outcome, attempts,
duration (on the runtime's own clock, virtual time included) and failure. DB is a file a TrajectoryRecorder wrote (nucleo_trio.observability); without WORKFLOW
the command lists the workflows the file holds, the most recent first. Past 32 levels the tree
stops indenting and each line names its depth.
Exit status: 0 when printed, 1 when the file or the workflow is not there, or a row of it does
not read back (the message names the row and what is wrong)."""


def _add_trajectory(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trajectory = commands.add_parser(
        "trajectory",
        help="print a recorded workflow in call order, with outcomes and durations",
        description=_TRAJECTORY_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    trajectory.add_argument("database", metavar="DB", help="the recording (a SQLite file)")
    trajectory.add_argument(
        "workflow", metavar="WORKFLOW", nargs="?", help="the workflow id; omit it to list them"
    )
    trajectory.add_argument(
        "--max-children",
        type=_positive,
        default=None,
        metavar="N",
        help="show at most N children of a parent and sum up the rest (default: all)",
    )
    trajectory.set_defaults(handler=_run_trajectory)


def _positive(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _run_trajectory(args: argparse.Namespace) -> int:
    import sqlite3

    from ._progress import RunProgress, terminal_console
    from .observability.trajectories import recorded_workflows, render_trajectory, trajectory

    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    # On a terminal a spinner says what a long read is doing; piped, only the tree is printed.
    progress = RunProgress(terminal_console(sys.stdout, color=not os.environ.get("NO_COLOR")))
    try:
        if args.workflow is None:
            with progress.status(f"Reading the workflows of {args.database}"):
                workflows = recorded_workflows(args.database)
            print(f"{len(workflows)} workflow(s) in {args.database}, the most recent first:")
            for summary in workflows:
                line = f"  {summary.workflow_id}  {summary.user_id}  {summary.jobs} job(s)"
                print(_printable(line, encoding))
            return 0
        with progress.status(f"Reading workflow {args.workflow} from {args.database}"):
            recorded = trajectory(args.database, args.workflow)
    except (OSError, ValueError, LookupError, sqlite3.Error) as exc:
        # A RecordingError (a ValueError) names the file, the row and what is wrong.
        print(f"{PROG} trajectory: {_printable(str(exc), encoding)}", file=sys.stderr)
        return 1
    with progress.status(f"Laying out {len(recorded)} jobs in call order"):
        text = render_trajectory(recorded, max_children=args.max_children)
    # A name recorded with an escape sequence in it is shown, not sent to the terminal.
    print("\n".join(_printable(line, encoding) for line in text.split("\n")))
    return 0


# -- events ---------------------------------------------------------------------------------------
_EVENTS_DESCRIPTION = """\
Print the events a JsonLinesSink wrote (nucleo_trio.observability.jsonl; `nucleo-trio demo --events FILE`
writes one), one line each: the UTC time, the kind, the job and the message. The filters narrow
what is printed: --kind and --family may be given several times (an event matching any of them
passes), --job and --workflow keep the events of one job or one workflow; all of them together
must hold. --json prints the matching events as the JSON lines they were written as.
A line longer than --max-line-bytes (4 MiB by default) is refused without being read whole; a
timestamp no date can hold (NaN, Infinity, past year 9999) is printed as the file has it.
Exit status: 0 when printed, 1 when the file cannot be read or holds a line that is not an
event (the events before it are printed), 2 for an unknown kind or family."""


def _add_events(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    events = commands.add_parser(
        "events",
        help="print and filter the events a JSON-lines sink wrote",
        description=_EVENTS_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    events.add_argument("file", metavar="FILE", help="the events file (JSON lines)")
    events.add_argument(
        "--kind",
        action="append",
        type=_event_kind,
        default=[],
        help="an event class name, e.g. JobFailedEvent (case does not matter)",
    )
    events.add_argument(
        "--family",
        action="append",
        type=_event_family,
        default=[],
        help="a family, e.g. lifecycle, retry, heartbeat (or its class name, LifecycleEvent)",
    )
    events.add_argument("--job", metavar="JOB_ID", default=None, help="one job's events")
    events.add_argument(
        "--workflow", metavar="WORKFLOW_ID", default=None, help="one workflow's events"
    )
    events.add_argument(
        "--json", action="store_true", help="print the matching events as JSON lines"
    )
    events.add_argument(
        "--max-line-bytes",
        type=_byte_size,
        default=None,
        metavar="SIZE",
        help="the longest line read, in bytes, or with K, M or G (default 4M)",
    )
    events.set_defaults(handler=_run_events)


def _byte_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit() or not 1 <= int(digits) * scale <= 64 * 1024**3:
        raise argparse.ArgumentTypeError(
            f"expected a size from 1 byte to 64G (such as 65536, 512K or 8M), got {text!r}"
        )
    return int(digits) * scale


def _event_kind(text: str) -> str:
    from .observability.jsonl import EVENT_KINDS

    if ":" in text:  # an application's own event, named by its path
        return text
    known = {name.lower(): name for name in EVENT_KINDS}
    kind = known.get(text.lower())
    if kind is None:
        raise argparse.ArgumentTypeError(f"unknown kind {text!r} (known: {', '.join(EVENT_KINDS)})")
    return kind


def _event_family(text: str) -> str:
    from .bus.events import EVENT_FAMILIES

    names = {}
    for family in EVENT_FAMILIES:
        names[family.__name__.lower()] = family.__name__
        names[family.__name__.removesuffix("Event").lower()] = family.__name__
    family_name = names.get(text.lower())
    if family_name is None:
        shown = ", ".join(f.__name__.removesuffix("Event").lower() for f in EVENT_FAMILIES)
        raise argparse.ArgumentTypeError(f"unknown family {text!r} (known: {shown})")
    return family_name


def _run_events(args: argparse.Namespace) -> int:
    import json

    from .observability.jsonl import DEFAULT_MAX_LINE_BYTES, EventFileError, read_event_records

    kinds, families = set(args.kind), set(args.family)
    limit = DEFAULT_MAX_LINE_BYTES if args.max_line_bytes is None else args.max_line_bytes
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        for _, record in read_event_records(args.file, max_line_bytes=limit):
            found = record.get("snapshot")
            snapshot: dict[str, object] = found if isinstance(found, dict) else {}
            job_id = snapshot.get("job_id")
            if kinds and record["kind"] not in kinds:
                continue
            if families and record.get("family") not in families:
                continue
            if args.job is not None and args.job not in (job_id, record.get("job_id")):
                continue
            if args.workflow is not None and snapshot.get("workflow_id") != args.workflow:
                continue
            if args.json:
                line = json.dumps(record, ensure_ascii=False)
                if not _encodes(line, encoding):  # a lone surrogate, or a narrow terminal
                    line = json.dumps(record)
                print(line)
            else:
                print(_printable(_event_line(record, job_id), encoding))
    except (OSError, EventFileError) as exc:
        print(f"{PROG} events: {_printable(str(exc), encoding)}", file=sys.stderr)
        return 1
    return 0


def _event_line(record: dict[str, object], job_id: object) -> str:
    """One event for a person: the UTC time to the millisecond, the kind, the job, the message.
    A timestamp no date can hold is shown as the file has it, in the time's place."""
    import datetime
    import json
    import math

    stamp = record.get("timestamp")
    when = "-"
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        try:
            if not math.isfinite(stamp):
                raise ValueError(stamp)
            moment = datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC)
            when = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        except (ValueError, OverflowError, OSError):
            shown = json.dumps(stamp)  # as the file has it: NaN, Infinity, 1e+300
            when = f"{shown[:21] + '...' if len(shown) > 24 else shown:<24}"
    message = record.get("message")
    job = job_id if isinstance(job_id, str) else "-"
    return f"{when}  {record['kind']!s:<20} {job:<18}  {'' if message is None else message}"


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if code != 0x09}


def _printable(text: str, encoding: str) -> str:
    """``text`` safe for a terminal: control characters (an escape sequence in a message
    could rewrite the screen) and what the output cannot encode, a lone surrogate included,
    shown as backslash escapes."""
    shown = text.translate(_CONTROLS)
    if _encodes(shown, encoding):
        return shown
    return shown.encode(encoding, "backslashreplace").decode(encoding, "replace")


# -- health ---------------------------------------------------------------------------------------
_HEALTH_DESCRIPTION = """\
Start a dispatcher from a configuration file (TOML or JSON, the shape DispatcherConfig.from_file
reads), print its health snapshot, and stop it: the accounts it would run with (the http gate,
the configured limiters, each database's gate), the memory reading against the limit it found
(cgroup, configured or physical), and the empty lanes. Without --config it uses the defaults.
The plugins are loaded as a real start loads them, so a broken plugin or a bad setting is
reported here, naming what is wrong, before a service ever starts with it. A shared account
(one settled through Redis, say) is given up to --wait seconds for its first reading, and the
model catalog the configuration names is read, so an unreachable server or a missing models
file is found here too.
Exit status: 0 when the snapshot is printed and every account could take its reading; 1 when
the configuration, a plugin or the model catalog is refused, or an account is unavailable (the
snapshot is still printed, and stderr says which account and why)."""


def _add_health(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = commands.add_parser(
        "health",
        help="check a configuration: start a dispatcher with it and print its health snapshot",
        description=_HEALTH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    health.add_argument(
        "--config", metavar="FILE", default=None, help="a TOML or JSON dispatcher configuration"
    )
    health.add_argument(
        "--wait",
        type=_seconds_between,
        default=10.0,
        metavar="SECONDS",
        help="how long a shared account may take for its first reading (default 10)",
    )
    health.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="tinted rows and coloured bars: auto uses them on a terminal unless NO_COLOR is set",
    )
    health.set_defaults(handler=_run_health)


def _run_health(args: argparse.Namespace) -> int:
    import trio

    from .dispatch import DispatcherConfig, open_dispatcher
    from .errors import ConfigError
    from .models import CATALOG_ENV_VAR
    from .plugins import PluginError

    problems: list[str] = []

    async def snapshot() -> str:
        config = (
            DispatcherConfig() if args.config is None else DispatcherConfig.from_file(args.config)
        )
        async with open_dispatcher(config) as dispatcher:
            if config.models is not None or os.environ.get(CATALOG_ENV_VAR):
                dispatcher.models.catalog  # noqa: B018 - loads it, raising ConfigError
            accounts = [*dispatcher.limiters.values(), *dispatcher.accounts.accounts()]
            problems.extend(await _first_readings(accounts, args.wait))
            return dispatcher.health().render(color=color)

    color = {
        "auto": sys.stdout.isatty() and not os.environ.get("NO_COLOR"),
        "always": True,
        "never": False,
    }[args.color]

    try:
        print(trio.run(snapshot))
    except (ConfigError, PluginError) as exc:
        print(f"{PROG} health: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"{PROG} health: {problem}", file=sys.stderr)
    return 1 if problems else 0


async def _first_readings(accounts: list[Any], wait: float) -> list[str]:
    """Give every account that reads its state from elsewhere (it has ``wait_ready``) up to
    ``wait`` seconds, all at once; then say which are unavailable, or still had no reading."""
    import trio

    readers = [account for account in accounts if callable(getattr(account, "wait_ready", None))]
    ready: set[int] = set()

    async def read(account: Any) -> None:
        await account.wait_ready()
        ready.add(id(account))

    with trio.move_on_after(wait):
        async with trio.open_nursery() as nursery:
            for account in readers:
                nursery.start_soon(read, account)
    problems = []
    for account in readers:
        name = account.limiter_name
        why = getattr(account, "unavailable", None)
        if why:
            problems.append(f"account {name!r} is unavailable: {why}")
        elif id(account) not in ready:
            problems.append(f"account {name!r} had no first reading within {wait:g} s")
    return problems


# -- top ------------------------------------------------------------------------------------------
_TOP_DESCRIPTION = """\
Watch a running dispatcher: its accounts with their bars, memory, the jobs running and parked
in admission, and the recent failures, redrawn in place every --interval seconds until Ctrl-C
(or --count frames). It reads the control socket the dispatcher opens when its configuration
sets control_socket (off by default); name it with --socket, or with --config, the dispatcher's
own configuration file. Without either, top reads the socket `nucleo-trio demo --control-socket`
opens when given no path: $XDG_RUNTIME_DIR/nucleo-trio.sock, or
/tmp/nucleo-trio-UID/nucleo-trio.sock where that variable is unset or names another user's
directory (a container, a root shell). --once prints one snapshot as plain text for scripts;
--json prints it as JSON. If the dispatcher stops while watched, the last frame stays, its
header saying it no longer answers, and top exits saying why.
Exit status: 0 when shown (Ctrl-C ends the live view), 1 when the socket cannot be read or
the dispatcher stops answering while watched, 2 for a bad option."""


def _add_top(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = commands.add_parser(
        "top",
        help="watch a running dispatcher's health live, through its control socket",
        description=_TOP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = top.add_mutually_exclusive_group()
    where.add_argument(
        "--socket",
        metavar="PATH",
        help="the dispatcher's control socket (default: where `demo --control-socket` opens it)",
    )
    where.add_argument(
        "--config",
        metavar="FILE",
        help="the dispatcher's configuration (TOML or JSON); its control_socket is read",
    )
    shape = top.add_mutually_exclusive_group()
    shape.add_argument("--once", action="store_true", help="print one snapshot as plain text")
    shape.add_argument("--json", action="store_true", help="print one snapshot as JSON")
    top.add_argument(
        "--interval",
        type=_seconds_between,
        default=1.0,
        metavar="SECONDS",
        help="seconds between two frames of the live view (default 1)",
    )
    top.add_argument(
        "--count",
        type=_positive,
        default=None,
        metavar="N",
        help="stop the live view after N frames (default: until Ctrl-C)",
    )
    top.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour: auto uses it on a terminal unless NO_COLOR is set",
    )
    top.set_defaults(handler=_run_top)


def _seconds_between(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0.05 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be finite seconds >= 0.05, got {text}")
    return value


def _run_top(args: argparse.Namespace) -> int:
    import json

    import trio
    from rich.console import Console

    from .dispatch import DispatcherConfig
    from .errors import ConfigError
    from .observability.control import ControlSocketError, default_socket_path, request_snapshot
    from .observability.top import render_text, watch

    path = args.socket
    if path is None and args.config is None:
        path = str(default_socket_path())
    elif path is None:
        try:
            path = DispatcherConfig.from_file(args.config).control_socket
        except ConfigError as exc:
            print(f"{PROG} top: {exc}", file=sys.stderr)
            return 1
        if path is None:
            print(
                f"{PROG} top: {args.config} sets no control_socket, so its dispatcher opens none",
                file=sys.stderr,
            )
            return 1
    terminal = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    color = {"auto": terminal, "always": True, "never": False}[args.color]
    try:
        if args.once or args.json:
            snapshot = trio.run(request_snapshot, path)
            if args.json:
                print(json.dumps(snapshot.to_json(), indent=2))
            else:
                print(render_text(snapshot, source=path, color=color))
            return 0
        console = Console(
            no_color=not color, force_terminal=True if args.color == "always" else None
        )

        async def live() -> None:
            await watch(path, interval=args.interval, console=console, refreshes=args.count)

        trio.run(live)
    except ControlSocketError as exc:
        print(f"{PROG} top: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how a live view ends
    return 0


def _version() -> str:
    try:
        return importlib.metadata.version("nucleo_trio")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
