"""The control socket: a running dispatcher's health, read from outside the process.

With ``DispatcherConfig(control_socket="/run/user/1000/orders.sock")`` the dispatcher opens a
Unix socket at start and answers on it until its run ends; ``nucleo-trio top`` reads it. It is
off by default.

**Who may connect.** The socket is created with mode 0600 (bound, made owner-only, and only then
listened on, so there is no instant at which anyone else can connect), in a directory that must
be a directory owned by the user the dispatcher runs as and writable by nobody else: otherwise
another user could replace the socket between two looks. ``/tmp`` is refused for that reason;
``$XDG_RUNTIME_DIR`` is the usual place. A socket file left by a dispatcher that died is
replaced; a path where something else lives, or where another dispatcher still answers, is
refused at start with a :class:`~nucleo_trio.errors.ConfigError` naming it.

**The protocol** is read-only: one JSON object on one line in, one JSON object on one line out,
then the server closes the connection. ``{"get": "snapshot"}`` answers
``{"ok": true, "protocol": 1, "snapshot": {...}}``, a :class:`LiveSnapshot` as
:meth:`LiveSnapshot.to_json` writes it; anything else answers ``{"ok": false, "error": "..."}``
saying what the socket understands. Nothing a client sends can change the dispatcher.

**A client cannot hurt the dispatcher.** At most :data:`MAX_CLIENTS` connections are served at
once (more wait in the listen backlog); a request is at most :data:`MAX_REQUEST_BYTES`; a client
that takes longer than :data:`CLIENT_TIMEOUT` seconds to send its line or to take its answer is
dropped; an error while serving one client (a reset, a bug) is logged and ends only that
connection. The server is one system task of the dispatcher: it costs nothing between requests,
and a snapshot is built only when one is asked for. What it does cost: it subscribes to the bus
for the recent failures, so every job's events are built (a few microseconds per job, as with
``health_every``).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import logging
import math
import os
import re
import socket
import stat
import struct
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .. import _bounded_json
from ..admission.limiter import LimiterIdentity
from ..bus.events import FailureEvent, JobEvent, TerminalEvent
from ..errors import ConfigError
from ..jobs.state import JobType
from .health import HealthSnapshot, LimiterRow, QueueSizes, capture_health

if TYPE_CHECKING:
    from ..bus.bus import Subscription
    from ..dispatch.dispatcher import JobDispatcher

__all__ = [
    "CLIENT_TIMEOUT",
    "DEFAULT_SOCKET_NAME",
    "LISTED_JOBS",
    "MAX_ANSWER_BYTES",
    "MAX_CLIENTS",
    "MAX_REQUEST_BYTES",
    "PROTOCOL",
    "RECENT_FAILURES",
    "REMEMBERED_ACCOUNTS",
    "ControlServer",
    "ControlSocketError",
    "FailureRow",
    "LiveSnapshot",
    "ParkedRow",
    "RunningRow",
    "check_socket_directory",
    "check_socket_path",
    "default_socket_path",
    "live_snapshot",
    "request_snapshot",
]

log = logging.getLogger("nucleo_trio.observability.control")

PROTOCOL: Final = 1
"""The version of the answer's shape; a client refuses an answer of another version."""
MAX_CLIENTS: Final = 4
"""Connections served at once; more wait in the listen backlog until one ends."""
MAX_REQUEST_BYTES: Final = 1024
"""The longest request line the server reads; a longer one is refused and the client dropped."""
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
"""The longest answer :func:`request_snapshot` accepts."""
CLIENT_TIMEOUT: Final = 5.0
"""Seconds a client has to send its line and take its answer before it is dropped."""
RECENT_FAILURES: Final = 20
"""How many of the latest failed or timed-out jobs a snapshot lists."""
LISTED_JOBS: Final = 50
"""How many running and how many parked jobs a snapshot lists at most (the oldest first)."""
REMEMBERED_ACCOUNTS: Final = 64
"""How many accounts a server remembers once admission has forgotten them (idle), so that
they stay in ``top``'s table; past that, the least recently busy is let go."""

_DRAIN_BYTES = 64 * MAX_REQUEST_BYTES
_CHUNK_BYTES = 65536  # one read's buffer: an answer's size limit is not allocated per read
_MESSAGE_CHARS = 500  # a failure's message in a snapshot is cut to this
_STATUS_CHARS = 300  # an account's status line likewise


class ControlSocketError(Exception):
    """A control socket could not be read: nobody listens there, or the answer is not one."""


# -- the snapshot ---------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class RunningRow:
    """A job that has started an attempt: for ``seconds`` (wall clock) in attempt ``attempt``."""

    job_id: str
    """The job's id."""
    name: str
    """The job's display name."""
    kind: str
    """Its :class:`~nucleo_trio.jobs.JobType` value (``"TOOL"``, ``"THINKER"``...)."""
    workflow_id: str
    """The workflow it runs in."""
    attempt: int
    """The attempt it is in, counted from 1."""
    seconds: float
    """Wall-clock seconds since it started, when the snapshot was taken."""


@attrs.frozen(kw_only=True)
class ParkedRow:
    """A job parked in admission for ``seconds``, held on the accounts ``held_on``."""

    job_id: str
    """The job's id; ``""`` for a wait that belongs to no job."""
    name: str
    """The job's display name; ``"(no job)"`` for a wait that belongs to no job."""
    kind: str
    """Its :class:`~nucleo_trio.jobs.JobType` value."""
    workflow_id: str
    """The workflow it belongs to; ``""`` for a wait that belongs to no job."""
    seconds: float
    """Seconds it has been parked, on the dispatcher's trio clock."""
    held_on: tuple[str, ...] = ()
    """The names of the accounts it waits on, in the order it was first held on each; empty by
    default."""


@attrs.frozen(kw_only=True)
class FailureRow:
    """A job that ended ``FAILED`` or ``TIMED_OUT`` at the wall-clock instant ``at``."""

    job_id: str
    """The job's id."""
    name: str
    """The job's display name."""
    state: str
    """The :class:`~nucleo_trio.jobs.JobState` value it ended in (``"FAILED"``,
    ``"TIMED_OUT"``)."""
    at: float
    """When the failure was told, in wall-clock epoch seconds."""
    message: str
    """The failure event's message, cut to 500 characters."""


@attrs.frozen(kw_only=True)
class LiveSnapshot:
    """What the control socket answers: the health report and the jobs behind it.

    ``state`` is the dispatcher's :class:`~nucleo_trio.dispatch.DispatcherState` name; ``pid``
    its process; ``wall`` the :func:`time.time` the snapshot was taken. ``running`` and
    ``parked`` list at most :data:`LISTED_JOBS` jobs each, the longest first, out of
    ``running_total`` and ``parked_total``; ``failures`` the latest failures, newest first.
    """

    state: str
    """The dispatcher's :class:`~nucleo_trio.dispatch.DispatcherState` name (``"RUNNING"``...)."""
    pid: int
    """The dispatcher's process id."""
    wall: float
    """When the snapshot was taken, in wall-clock epoch seconds (:func:`time.time`)."""
    health: HealthSnapshot
    """The dispatcher's health report at that instant (``JobDispatcher.health()``)."""
    running: tuple[RunningRow, ...] = ()
    """At most :data:`LISTED_JOBS` running jobs, the longest-running first."""
    running_total: int = 0
    """How many jobs are running in all, listed or not."""
    parked: tuple[ParkedRow, ...] = ()
    """At most :data:`LISTED_JOBS` jobs parked in admission, the longest-parked first."""
    parked_total: int = 0
    """How many jobs are parked in all, listed or not."""
    failures: tuple[FailureRow, ...] = ()
    """The latest failed or timed-out jobs (at most :data:`RECENT_FAILURES`), newest first."""
    status_lines: tuple[tuple[str, str], ...] = ()
    """``(account name, status line)`` for the accounts of ``health.limiters``: each one's
    ``status().summary`` (``"permits 2/4 active, ..."``), cut to 300 characters, or
    ``"unavailable (...)"`` when reading it raised. Empty from a server that sends none."""

    def status_line(self, name: str) -> str | None:
        """The status line of the account ``name``, or ``None`` when the snapshot has none."""
        return next((line for account, line in self.status_lines if account == name), None)

    def to_json(self) -> dict[str, Any]:
        """The snapshot as plain JSON data, with stable field names."""
        health = self.health
        return {
            "state": self.state,
            "pid": self.pid,
            "wall": self.wall,
            "health": {
                "limiters": [attrs.asdict(row) for row in health.limiters],
                "memory": health.memory,
                "running": [[kind.value, count] for kind, count in health.running],
                "workflows_active": health.workflows_active,
                "queues": attrs.asdict(health.queues),
                "at": health.at,
            },
            "running": [attrs.asdict(row) for row in self.running],
            "running_total": self.running_total,
            "parked": [{**attrs.asdict(row), "held_on": list(row.held_on)} for row in self.parked],
            "parked_total": self.parked_total,
            "failures": [attrs.asdict(row) for row in self.failures],
            "status_lines": [[name, line] for name, line in self.status_lines],
        }

    @classmethod
    def from_json(cls, data: object) -> LiveSnapshot:
        """Rebuild a snapshot from :meth:`to_json`'s data; ``ValueError`` names what is wrong."""
        try:
            return _snapshot_from(data)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            reason = _shown(str(exc), 300)
            raise ValueError(
                f"not a control-socket snapshot: {type(exc).__name__}: {reason}"
            ) from exc


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: object, what: str) -> int | float:
    """A number as sent, NaN and the infinities included (a custom account may report them;
    the health report draws them): an integer too large for a float is refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} is {_shown(repr(value))}, not a number")
    if isinstance(value, int) and abs(value) > 2**53:
        try:
            return float(value)  # what the bars and percentages divide
        except OverflowError:
            raise ValueError(f"{what} is {_shown(repr(value))}, too large a number") from None
    return value


def _count(value: object, what: str) -> int:
    """A whole count or id, from 0 below 2**63 (a float that is whole is taken)."""
    number = _number(value, what)
    if not (math.isfinite(number) and number == int(number) and 0 <= number < 2**63):
        raise ValueError(f"{what} is {_shown(repr(value))}, not a whole number from 0")
    return int(number)


def _moment(value: object, what: str) -> float:
    """A wall-clock instant the view can show as a time of day."""
    number = float(_number(value, what))
    try:
        if not math.isfinite(number):
            raise ValueError
        time.localtime(number)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{what} is {_shown(repr(value))}, not a moment") from None
    return number


# C0 and C1 controls (an escape sequence would drive the terminal top prints to) and lone
# surrogates (which no output can encode) in text from the socket.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _text(value: object, what: str) -> str:
    """Text as sent, with what a terminal would obey or cannot print shown instead: a control
    character as its ``\\x1b`` escape, a lone surrogate as U+FFFD."""
    if not isinstance(value, str):
        raise TypeError(f"{what} is {_shown(repr(value))}, not a string")
    return _UNPRINTABLE.sub(_printable, value)


def _printable(match: re.Match[str]) -> str:
    char = match.group()
    return "\ufffd" if "\ud800" <= char <= "\udfff" else f"\\x{ord(char):02x}"


def _table(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is {type(value).__name__}, not an object")
    return value


def _listed(value: object, what: str = "held_on") -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is {type(value).__name__}, not a list")
    return value


def _rows(value: object, what: str) -> list[Mapping[str, Any]]:
    return [_table(item, what) for item in _listed(value, what)]


def _snapshot_from(data: object) -> LiveSnapshot:
    top = _table(data, "the snapshot")
    health = _table(top["health"], "health")
    limiters = tuple(
        LimiterRow(
            name=_text(row["name"], "a limiter's name"),
            category=_text(row["category"], "a limiter's category"),
            capacity=_number(row["capacity"], "a limiter's capacity"),
            used=_number(row["used"], "a limiter's use"),
            waiters=_count(row["waiters"], "a limiter's waiters"),
            status=None if row["status"] is None else _text(row["status"], "a limiter's status"),
        )
        for row in _rows(health["limiters"], "health.limiters")
    )
    running_by_type = tuple(
        (JobType(_text(kind, "a job type")), _count(count, "a job count"))
        for kind, count in health["running"]
    )
    queues = _table(health["queues"], "health.queues")
    at = health["at"]
    return LiveSnapshot(
        state=_text(top["state"], "state"),
        pid=_count(top["pid"], "pid"),
        wall=_moment(top["wall"], "wall"),
        health=HealthSnapshot(
            limiters=limiters,
            memory=_text(health["memory"], "health.memory"),
            running=running_by_type,
            workflows_active=_count(health["workflows_active"], "workflows_active"),
            queues=QueueSizes(
                _count(queues["standard"], "queues.standard"),
                _count(queues["fast"], "queues.fast"),
                _count(queues["parked"], "queues.parked"),
            ),
            at=None if at is None else float(_number(at, "health.at")),
        ),
        running=tuple(
            RunningRow(
                job_id=_text(row["job_id"], "job_id"),
                name=_text(row["name"], "name"),
                kind=_text(row["kind"], "kind"),
                workflow_id=_text(row["workflow_id"], "workflow_id"),
                attempt=_count(row["attempt"], "attempt"),
                seconds=float(_number(row["seconds"], "seconds")),
            )
            for row in _rows(top["running"], "running")
        ),
        running_total=_count(top["running_total"], "running_total"),
        parked=tuple(
            ParkedRow(
                job_id=_text(row["job_id"], "job_id"),
                name=_text(row["name"], "name"),
                kind=_text(row["kind"], "kind"),
                workflow_id=_text(row["workflow_id"], "workflow_id"),
                seconds=float(_number(row["seconds"], "seconds")),
                held_on=tuple(_text(name, "held_on") for name in _listed(row["held_on"])),
            )
            for row in _rows(top["parked"], "parked")
        ),
        parked_total=_count(top["parked_total"], "parked_total"),
        failures=tuple(
            FailureRow(
                job_id=_text(row["job_id"], "job_id"),
                name=_text(row["name"], "name"),
                state=_text(row["state"], "state"),
                at=_moment(row["at"], "a failure's at"),
                message=_text(row["message"], "message"),
            )
            for row in _rows(top["failures"], "failures")
        ),
        status_lines=tuple(
            (_text(name, "a status line's account"), _text(line, "a status line"))
            for name, line in (
                _pair(item) for item in _listed(top.get("status_lines", []), "status_lines")
            )
        ),
    )


def _pair(value: object) -> tuple[object, object]:
    pair = _listed(value, "a status line")
    if len(pair) != 2:
        raise ValueError(f"a status line has {len(pair)} items, not [account, line]")
    return pair[0], pair[1]


def live_snapshot(
    dispatcher: JobDispatcher,
    failures: tuple[FailureRow, ...] = (),
    *,
    remembered: Sequence[LimiterIdentity] = (),
) -> LiveSnapshot:
    """``dispatcher`` at this instant: its :meth:`health`, its running and parked jobs, and
    each account's status line.

    ``remembered`` are accounts an earlier snapshot showed. Admission forgets an account once
    nobody holds or waits on it, and the health report then leaves it out; each one here that
    the report lacks is added as a row of its own, read live (an idle gate shows 0 used), so a
    live view does not lose it between two busy moments. Called inside the dispatcher's trio
    run (the parked jobs' waits are on its clock).
    """
    now_wall = time.time()
    now = trio.current_time()
    # The jobs with a task, as JobDispatcher.health() reads them: the dispatcher's own table,
    # read here so that the dispatcher carries nothing for a view nobody may ever open.
    # What is listed is built, nothing more: the longest-running LISTED_JOBS, and a count.
    started = [
        queued
        for queued in list(dispatcher._executing.values())
        if queued.context.started_at is not None and not queued.context.state.is_terminal
    ]
    longest = heapq.nsmallest(
        LISTED_JOBS, started, key=lambda queued: queued.context.started_at or 0.0
    )
    running = tuple(
        RunningRow(
            job_id=queued.job.job_id,
            name=queued.context.snapshot().name,
            kind=queued.job.job_type.value,
            workflow_id=queued.job.workflow_id,
            attempt=queued.context.attempt,
            seconds=max(0.0, now_wall - (queued.context.started_at or now_wall)),
        )
        for queued in longest
    )
    parked: list[ParkedRow] = []
    for waiter, arrival, held_on in dispatcher.admission.parked(LISTED_JOBS):
        snapshot = waiter.snapshot() if waiter is not None else None
        parked.append(
            ParkedRow(
                job_id=snapshot.job_id if snapshot is not None else "",
                name=snapshot.name if snapshot is not None else "(no job)",
                kind=snapshot.kind.value if snapshot is not None else JobType.JOB.value,
                workflow_id=snapshot.workflow_id if snapshot is not None else "",
                seconds=max(0.0, now - arrival),
                held_on=held_on,
            )
        )
    health = dispatcher.health()
    known = _accounts_of(dispatcher)
    shown = {row.name for row in health.limiters}
    idle = [account for account in remembered if _name_of(account) not in shown]
    if idle:
        extra = capture_health(idle, waiters=dispatcher.admission.held_on, at=health.at)
        health = attrs.evolve(health, limiters=health.limiters + extra.limiters)
    by_name: dict[str, LimiterIdentity] = {}
    for account in (*known, *idle):
        by_name.setdefault(_name_of(account) or "", account)
    lines = tuple(
        (row.name, _status_line(by_name[row.name]))
        for row in health.limiters
        if row.name in by_name
    )
    return LiveSnapshot(
        state=dispatcher.state.value.name,
        pid=os.getpid(),
        wall=now_wall,
        health=health,
        running=running,
        running_total=len(started),
        parked=tuple(parked),
        parked_total=dispatcher.admission.queue_size,
        failures=failures,
        status_lines=lines,
    )


def _accounts_of(dispatcher: JobDispatcher) -> list[LimiterIdentity]:
    """The accounts :meth:`JobDispatcher.health` reads, as objects: the ``http`` gate, the
    configured limiters, the registry's accounts, each database's gate, those admission holds
    now, and the memory account."""
    admission = dispatcher.admission
    databases = dispatcher.databases
    return [
        dispatcher.http_gate,
        *dispatcher.limiters.values(),
        *dispatcher.accounts.accounts(),
        *(databases.provider(name).admission() for name in databases.names()),
        *admission.accounts(),
        admission.memory.account_for(None),
    ]


def _name_of(account: LimiterIdentity) -> str | None:
    try:
        return str(account.limiter_name)
    except Exception:  # noqa: BLE001 - one broken account must not hide the others
        return None


def _status_line(account: LimiterIdentity) -> str:
    """The account's ``status().summary``, cut to 300 characters; ``"unavailable (...)"``
    naming the error when reading it raised."""
    try:
        line = str(account.status().summary)
    except Exception as exc:  # noqa: BLE001 - a snapshot must not fail on one bad reading
        line = f"unavailable ({type(exc).__name__}: {exc})"
    return _cut(line, _STATUS_CHARS)


class _Remembered:
    """The accounts admission has held, the most recently seen last, at most ``keep``."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._accounts: dict[int, LimiterIdentity] = {}

    def note(self, accounts: Iterable[LimiterIdentity]) -> tuple[LimiterIdentity, ...]:
        """Remember ``accounts`` as seen now; answer every account remembered."""
        for account in accounts:
            self._accounts.pop(id(account), None)
            self._accounts[id(account)] = account
        while len(self._accounts) > self._keep:
            del self._accounts[next(iter(self._accounts))]
        return tuple(self._accounts.values())


class _Failures:
    """The latest failed and timed-out jobs, as the bus reports them (newest first)."""

    def __init__(self, keep: int) -> None:
        self.rows: deque[FailureRow] = deque(maxlen=keep)

    def __call__(self, event: JobEvent) -> None:
        snapshot = event.snapshot
        if not isinstance(event, FailureEvent) or snapshot is None:
            return
        self.rows.appendleft(
            FailureRow(
                job_id=snapshot.job_id,
                name=snapshot.name,
                state=snapshot.state.value,
                at=event.timestamp,
                message=_cut(event.message or "", _MESSAGE_CHARS),
            )
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the socket's place ---------------------------------------------------------------------------
def check_socket_directory(path: str | os.PathLike[str]) -> Path:
    """The socket's path, once its directory is fit to hold it; a ConfigError says why not.

    The directory must exist, be a directory, belong to the user running this process, and be
    writable by nobody else (no group or other write bit), so nobody else can replace the
    socket.
    """
    socket_path = Path(path).absolute()
    directory = socket_path.parent
    where = f"control socket {str(socket_path)!r}"
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        raise ConfigError(f"{where}: the directory {str(directory)!r} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the directory {str(directory)!r}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{where}: {str(directory)!r} is not a directory")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"{where}: the directory {str(directory)!r} belongs to uid {info.st_uid}, not to "
            f"this process's user (uid {os.getuid()}); use a directory of your own, such as "
            "$XDG_RUNTIME_DIR"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{where}: the directory {str(directory)!r} is writable by others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}), so they could replace the socket; use a "
            "directory only you can write, such as $XDG_RUNTIME_DIR"
        )
    return socket_path


DEFAULT_SOCKET_NAME: Final = "nucleo-trio.sock"
"""The file name of :func:`default_socket_path`."""


def default_socket_path(*, make: bool = False) -> Path:
    """Where ``nucleo-trio demo --control-socket`` opens its socket when given no path, and
    where ``nucleo-trio top`` looks when given neither ``--socket`` nor ``--config``.

    ``$XDG_RUNTIME_DIR/nucleo-trio.sock`` when that variable names a directory
    :func:`check_socket_directory` accepts. Otherwise (it is unset, as in most containers, or
    names another user's directory, as in a root shell opened with ``sudo``) the socket is
    ``nucleo-trio.sock`` in ``nucleo-trio-<uid>`` under the temporary directory
    (:func:`tempfile.gettempdir`, usually ``/tmp``): a directory of this user's own, which
    ``make=True`` creates with mode 0700 when it is not there. Nothing else is checked here;
    the server's start checks that directory as it checks any.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        candidate = Path(runtime) / DEFAULT_SOCKET_NAME
        try:
            return check_socket_directory(candidate)
        except ConfigError:
            pass  # not a place of this user's own: the fallback below is
    directory = Path(tempfile.gettempdir()) / f"nucleo-trio-{os.getuid()}"
    if make:
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    return directory / DEFAULT_SOCKET_NAME


def check_socket_path(path: str | os.PathLike[str]) -> Path:
    """What a server's start checks of ``path``, checked now, without binding it: the
    directory as :func:`check_socket_directory` does, and that nothing but a dead server's
    socket is there. A ConfigError says what is wrong, as the start would; a caller can refuse
    a path before it prints or starts anything (``nucleo-trio demo`` does)."""
    socket_path = check_socket_directory(path)
    try:
        info = os.lstat(socket_path)
    except FileNotFoundError:
        return socket_path
    except OSError as exc:
        raise ConfigError(f"control socket {str(socket_path)!r}: cannot read it: {exc}") from exc
    where = f"control socket {str(socket_path)!r}"
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"{where}: something that is not a socket is there; not replacing it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(socket_path))
        except OSError:
            return socket_path  # nobody answers: the start will replace it
    raise ConfigError(f"{where}: another process is serving on it")


async def _clear_stale(path: Path) -> None:
    """Remove a socket a dead dispatcher left at ``path``; refuse anything else there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    where = f"control socket {str(path)!r}"
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(f"{where}: something that is not a socket is there; not replacing it")
    probe = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await probe.connect(str(path))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ConfigError(f"{where}: cannot tell whether it is in use: {exc}") from exc
    else:
        raise ConfigError(f"{where}: another process is serving on it")
    finally:
        probe.close()
    os.unlink(path)  # nobody listens: a dead dispatcher's socket


# -- the server -----------------------------------------------------------------------------------
class ControlServer:
    """Serves :func:`live_snapshot` of ``dispatcher`` on the Unix socket ``path``. The
    dispatcher runs one with ``await nursery.start(server.run)`` in its system nursery when
    ``config.control_socket`` is set; it serves until cancelled.

    Each connection sends one JSON line, ``{"get": "snapshot"}``, and is answered with one
    line, ``{"ok": true, "protocol": 1, "snapshot": {...}}`` (:meth:`LiveSnapshot.to_json`), or
    ``{"ok": false, "error": "..."}`` for anything else; then the connection is closed. The
    socket is owner-only (mode 0600), and where the kernel tells a peer's user, a peer of
    another user is refused.

    ``max_clients`` connections at once (:data:`MAX_CLIENTS`), ``client_timeout`` seconds each
    on the dispatcher's clock (:data:`CLIENT_TIMEOUT`), ``failures`` recent failures kept
    (:data:`RECENT_FAILURES`). A count that is not a positive int, or a timeout that is not a
    finite number of seconds above 0, is a :class:`ValueError`.
    """

    def __init__(
        self,
        dispatcher: JobDispatcher,
        path: str | os.PathLike[str],
        *,
        max_clients: int = MAX_CLIENTS,
        client_timeout: float = CLIENT_TIMEOUT,
        failures: int = RECENT_FAILURES,
    ) -> None:
        for name, value in (("max_clients", max_clients), ("failures", failures)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ControlServer: {name} must be a positive int, got {value!r}")
        if (
            isinstance(client_timeout, bool)
            or not isinstance(client_timeout, int | float)
            or not 0 < client_timeout < float("inf")
        ):
            raise ValueError(
                f"ControlServer: client_timeout must be finite seconds > 0, got {client_timeout!r}"
            )
        self.dispatcher = dispatcher
        """The dispatcher whose snapshot is served."""
        self.path = Path(path).absolute()
        """The socket's absolute path."""
        self.client_timeout = float(client_timeout)
        """Seconds a client has to send its line and take its answer before it is dropped
        (:data:`CLIENT_TIMEOUT` by default)."""
        self._slots = trio.Semaphore(max_clients)
        self._failures = _Failures(failures)
        self._remembered = _Remembered(REMEMBERED_ACCOUNTS)
        self._subscription: Subscription | None = None
        self.served = 0
        """How many requests have been answered (a well-formed request or not)."""
        self.allowed_uid = os.getuid()
        """The one user whose processes are answered: the dispatcher's own. A peer of another
        uid (read with ``SO_PEERCRED``) is refused, whatever the socket file's mode."""
        self.refused = 0
        """How many peers were refused for their uid."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind the socket (refused with a ConfigError), report started, serve until cancelled;
        the socket file is removed on the way out. A failure of the server itself once started
        is logged and ends the serving, never the dispatcher."""
        listener, inode = await self._bind()
        try:
            self._subscription = self.dispatcher.bus.subscribe(
                self._failures, event_type=TerminalEvent
            )
            task_status.started()
            log.info("Control socket listening on %s", self.path)
            try:
                async with trio.open_nursery() as clients:
                    await self._accept(listener, clients)
            except Exception:  # noqa: BLE001 - the socket's trouble must never stop the dispatcher
                log.exception("Control socket %s stopped serving", self.path)
        finally:
            if self._subscription is not None:
                self._subscription.unsubscribe()
            with trio.CancelScope(shield=True):
                await listener.aclose()
            self._unlink(inode)

    async def _bind(self) -> tuple[trio.SocketListener, int]:
        path = check_socket_directory(self.path)
        await _clear_stale(path)
        # Bound here, not with trio's bind, which hands a Unix path to a worker thread: that
        # would let a virtual clock jump while the thread runs. Binding a local path is quick.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Owner-only before listen(): until then a connect is refused, so nobody else can
            # get in at any instant.
            os.chmod(path, 0o600)
            sock.listen(MAX_CLIENTS * 4)
            inode = os.lstat(path).st_ino
        except OSError as exc:
            sock.close()
            raise ConfigError(f"control socket {str(path)!r}: cannot listen: {exc}") from exc
        return trio.SocketListener(trio.socket.from_stdlib_socket(sock)), inode

    def _unlink(self, inode: int) -> None:
        try:
            if os.lstat(self.path).st_ino == inode:
                os.unlink(self.path)
        except OSError:
            pass  # gone already, or replaced by someone else's: theirs to keep

    async def _accept(self, listener: trio.SocketListener, clients: trio.Nursery) -> None:
        while True:
            await self._slots.acquire()
            try:
                stream = await listener.accept()
            except OSError as exc:
                # Out of descriptors and the like: say so, and try again a little later.
                self._slots.release()
                log.warning("Control socket: accept failed (%s); retrying in 1 s", exc)
                await trio.sleep(1.0)
                continue
            except BaseException:
                self._slots.release()
                raise
            clients.start_soon(self._serve_client, stream)

    def _foreign_peer(self, stream: trio.SocketStream) -> int | None:
        """The uid of a peer that is not :attr:`allowed_uid`, or ``None`` for an allowed one.
        Where the kernel cannot say (no ``SO_PEERCRED``), the socket file's 0600 mode is the
        only guard."""
        option = getattr(socket, "SO_PEERCRED", None)
        if option is None:
            return None
        credentials = stream.socket.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", credentials)
        return None if uid == self.allowed_uid else uid

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        try:
            uid = self._foreign_peer(stream)
            if uid is not None:
                self.refused += 1
                log.warning(
                    "Control socket: refused a peer of uid %d (only uid %d is answered)",
                    uid,
                    self.allowed_uid,
                )
                with trio.move_on_after(self.client_timeout):
                    await stream.send_all(
                        _line({"ok": False, "error": f"uid {uid} may not read this dispatcher"})
                    )
                return
            with trio.move_on_after(self.client_timeout) as window:
                request = await _read_line(stream, MAX_REQUEST_BYTES)
                answer = self._answer(request)
                self.served += 1
                await stream.send_all(answer)
                if request is None:
                    # The rest of an overlong request is still coming: closing on unread bytes
                    # would reset the connection and lose the answer, so take (a bounded amount
                    # of) it first.
                    await stream.send_eof()
                    await _discard(stream, _DRAIN_BYTES)
            if window.cancelled_caught:
                log.debug(
                    "Control socket: dropped a client slower than %.1f s", self.client_timeout
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("Control socket: a client went away (%s)", exc)
        except Exception:  # noqa: BLE001 - one client's trouble must never reach the dispatcher
            log.exception("Control socket: serving a client failed")
        finally:
            self._slots.release()
            await trio.aclose_forcefully(stream)

    def _answer(self, request: bytes | None) -> bytes:
        if request is None:
            return _line({"ok": False, "error": f"a request is at most {MAX_REQUEST_BYTES} bytes"})
        try:
            asked = _bounded_json.loads(request.decode("utf-8"))
        except ValueError:  # not UTF-8, not JSON, or nested past what is parsed
            asked = None
        if not isinstance(asked, dict) or asked.get("get") != "snapshot":
            return _line(
                {
                    "ok": False,
                    "error": f'unknown request {request[:80]!r}; this socket answers {{"get": "snapshot"}}',
                }
            )
        remembered = self._remembered.note(self.dispatcher.admission.accounts())
        snapshot = live_snapshot(self.dispatcher, tuple(self._failures.rows), remembered=remembered)
        return _line({"ok": True, "protocol": PROTOCOL, "snapshot": snapshot.to_json()})


def _line(answer: Mapping[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


async def _read_line(stream: trio.abc.ReceiveStream, limit: int) -> bytes | None:
    """One line (without its newline; what came before the end of the stream if none), or
    ``None`` when more than ``limit`` bytes came without one."""
    buffer = bytearray()
    while True:
        chunk = await stream.receive_some(min(limit + 1, _CHUNK_BYTES))
        if not chunk:
            return bytes(buffer)
        end = chunk.find(b"\n")
        if end >= 0:
            buffer += chunk[:end]
            return bytes(buffer) if len(buffer) <= limit else None
        buffer += chunk
        if len(buffer) > limit:
            return None


async def _discard(stream: trio.SocketStream, limit: int) -> None:
    taken = 0
    while taken < limit:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        taken += len(chunk)


# -- the client -----------------------------------------------------------------------------------
async def request_snapshot(
    path: str | os.PathLike[str], *, within: float = CLIENT_TIMEOUT
) -> LiveSnapshot:
    """Ask the dispatcher listening on ``path`` for a :class:`LiveSnapshot`.

    Raises :class:`ControlSocketError` saying what went wrong: nobody listens there, the answer
    is late (connecting, sending and reading take over ``within`` seconds), too long, refused, or not a snapshot.
    """
    where = f"control socket {os.fspath(path)!r}"
    try:
        with trio.fail_after(within):
            stream = await trio.open_unix_socket(os.fspath(path))
            async with stream:
                await stream.send_all(b'{"get": "snapshot"}\n')
                answer = await _read_line(stream, MAX_ANSWER_BYTES)
    except trio.TooSlowError:
        raise ControlSocketError(f"{where}: no answer within {within:g} s") from None
    except FileNotFoundError:
        raise ControlSocketError(
            f"{where}: no such socket (is a dispatcher running with control_socket set?)"
        ) from None
    except ConnectionRefusedError:
        raise ControlSocketError(f"{where}: nobody is listening (the dispatcher stopped)") from None
    except (OSError, trio.BrokenResourceError) as exc:
        raise ControlSocketError(f"{where}: {exc}") from exc
    if answer is None:
        raise ControlSocketError(f"{where}: the answer is over {MAX_ANSWER_BYTES} bytes")
    if not answer:
        raise ControlSocketError(f"{where}: the dispatcher closed the connection without answering")
    try:
        # Bounded: an answer nested a million deep is refused, not a RecursionError.
        data = _bounded_json.loads(answer.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ControlSocketError(
            f"{where}: the answer is not UTF-8 text (byte {exc.start + 1} of {len(answer)})"
        ) from None
    except ValueError as exc:
        raise ControlSocketError(f"{where}: the answer is {exc}") from None
    if not isinstance(data, dict) or data.get("ok") is not True:
        error = data.get("error") if isinstance(data, dict) else None
        said = _text(error, "error") if isinstance(error, str) and error else repr(answer[:200])
        raise ControlSocketError(f"{where}: refused: {_shown(said, 300)}")
    if data.get("protocol") != PROTOCOL:
        shown = _shown(repr(data.get("protocol")))
        raise ControlSocketError(f"{where}: answers protocol {shown}; this client reads {PROTOCOL}")
    try:
        return LiveSnapshot.from_json(data.get("snapshot"))
    except ValueError as exc:
        raise ControlSocketError(f"{where}: {exc}") from exc
