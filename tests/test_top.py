"""``nucleo-trio top``: the plain and the rich rendering of a snapshot, the live view in virtual
time against an in-process dispatcher, the command's refusals, and the real thing: the command
against a dispatcher in another process, over its socket, on the real clock."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from rich.console import Console

from nucleo_trio.cli import main
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs.state import JobType
from nucleo_trio.observability import HealthSnapshot, LimiterRow, QueueSizes
from nucleo_trio.observability.control import (
    ControlSocketError,
    FailureRow,
    LiveSnapshot,
    ParkedRow,
    RunningRow,
    default_socket_path,
)
from nucleo_trio.observability.top import render_text, render_view, watch

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging


@pytest.fixture
def place() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="nt-top-"))
    directory.chmod(0o700)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Wall-clock instants print as UTC, so the expected text is the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _sample() -> LiveSnapshot:
    return LiveSnapshot(
        state="RUNNING",
        pid=4242,
        wall=1_800_000_000.0,  # 2027-01-15 08:00:00 UTC
        health=HealthSnapshot(
            limiters=(
                LimiterRow("render", "semaphore", 2, 2, waiters=3),
                LimiterRow("search", "token_bucket", 600, 150, status="throttle:2.0x"),
            ),
            memory="memory 41.3% (6.4/15.5 GiB)",
            running={JobType.TOOL: 2, JobType.THINKER: 1},
            workflows_active=2,
            queues=QueueSizes(1, 0, 3),
            at=12.0,
        ),
        running=(
            RunningRow(
                job_id="Render-1",
                name="Render",
                kind="TOOL",
                workflow_id="w",
                attempt=2,
                seconds=75,
            ),
            RunningRow(
                job_id="Plan-2",
                name="Plan",
                kind="THINKER",
                workflow_id="w",
                attempt=1,
                seconds=3.5,
            ),
        ),
        running_total=3,
        parked=(
            ParkedRow(
                job_id="Render-3",
                name="Render",
                kind="TOOL",
                workflow_id="w",
                seconds=1.25,
                held_on=("render", "memory"),
            ),
        ),
        parked_total=1,
        failures=(
            FailureRow(
                job_id="Publish-4",
                name="Publish",
                state="TIMED_OUT",
                at=1_799_999_990.0,
                message="Job timed out after 2 seconds",
            ),
        ),
        status_lines=(
            ("render", "permits 2/2 active, last activity at 11.500s"),
            ("search", "requests 450/600, tokens 81000/90000"),
        ),
    )


def test_once_prints_the_health_report_then_the_jobs(utc: None) -> None:
    assert render_text(_sample(), source="/run/user/1000/d.sock", rows=1).splitlines() == [
        "nucleo-trio top: dispatcher pid 4242 on /run/user/1000/d.sock, RUNNING, at 08:00:00",
        "[System health snapshot]",
        "  Limiters:",
        "    render                       100.0% ████████████████████  waiters=  3"
        "  used:      2  total: 2      slot",
        "    search                        25.0% █████░░░░░░░░░░░░░░░  waiters=  0"
        "  used:    150  total: 600    tok   throttle:2.0x",
        "  Memory: memory 41.3% (6.4/15.5 GiB)",
        "  Jobs running: 3 total",
        "    TOOL          2",
        "    THINKER       1",
        "  Workflows active: 2",
        "  Queue: 1 standard, 0 fast, 3 parked in admission",
        "Running (1 of 3), the longest first:",
        "  Render                   TOOL      attempt 2    1m15s  Render-1",
        "Parked in admission (1):",
        "  Render                   TOOL      waiting    1.2s on render, memory  Render-3",
        "Recent failures (1):",
        "  07:59:50  Publish                  TIMED_OUT Job timed out after 2 seconds",
    ]


def test_the_view_shows_the_same_in_tables(utc: None) -> None:
    """The status column holds each account's status line, after its indicator if any."""
    console = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    console.print(render_view(_sample(), source="/run/d.sock", note="stopped refreshing: gone"))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines == [
        "nucleo-trio top: dispatcher pid 4242 on /run/d.sock, RUNNING, at 08:00:00",
        "Accounts",
        "",
        "  account   use                        %    used/total   waiters   status",
        " " + "─" * 118,
        "  render    ████████████████████   100.0      2/2 slot         3"
        "   permits 2/2 active, last activity at 11.500s",
        "  search    █████░░░░░░░░░░░░░░░    25.0   150/600 tok         0"
        "   throttle:2.0x; requests 450/600, tokens 81000/90000",
        "",
        "Memory: memory 41.3% (6.4/15.5 GiB)",
        "Jobs running: 3 (2 TOOL, 1 THINKER); workflows active: 2",
        "Queue: 1 standard, 0 fast, 3 parked in admission",
        "Running (2 of 3), the longest first",
        "",
        "  job      type      attempt   for     id",
        " " + "─" * 47,
        "  Render   TOOL      2         1m15s   Render-1",
        "  Plan     THINKER   1         3.5s    Plan-2",
        "",
        "Parked in admission (1)",
        "",
        "  job      type   waiting   held on          id",
        " " + "─" * 53,
        "  Render   TOOL   1.2s      render, memory   Render-3",
        "",
        "Recent failures (1)",
        "",
        "  at         job       state       message",
        " " + "─" * 64,
        "  07:59:50   Publish   TIMED_OUT   Job timed out after 2 seconds",
        "",
        "stopped refreshing: gone",
    ]


def test_a_narrow_view_wraps_a_status_line_instead_of_cutting_it(utc: None) -> None:
    console = Console(file=io.StringIO(), width=80, color_system=None, record=True)
    console.print(render_view(_sample()))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("  search "))
    end = lines.index("", start)
    # Wrapped at spaces, a word longer than the column folded: every character is there.
    column = "".join(line[67:].strip() for line in lines[start:end])
    assert column == "throttle:2.0x;requests450/600,tokens81000/90000"
    assert all(len(line) <= 80 for line in lines) and "…" not in "".join(lines)


def test_a_view_of_a_dispatcher_that_no_longer_answers_says_so_in_its_header(utc: None) -> None:
    console = Console(file=io.StringIO(), width=120, color_system=None, record=True)
    console.print(render_view(_sample(), source="/run/d.sock", answering=False))
    assert console.export_text().splitlines()[0] == (
        "nucleo-trio top: dispatcher pid 4242 on /run/d.sock, not answering "
        "(last seen RUNNING at 08:00:00)"
    )


def test_the_view_tints_a_throttled_row_and_colours_the_bars() -> None:
    console = Console(file=io.StringIO(), width=110, color_system="truecolor", record=True)
    console.print(render_view(_sample()))
    html = console.export_html(inline_styles=True)
    # The full bar is red (at or over 90 %), the quarter bar green; the throttled row yellow.
    spans = re.findall(r'<span style="color: (#[0-9a-f]{6})[^"]*">([^<]*)</span>', html)
    assert ("#800000", "█" * 20) in spans  # the render slots, full
    assert ("#008000", "█" * 5) in spans  # the search quota, a quarter used
    assert ("#808000", "search ") in spans  # throttled: its name and status in yellow
    assert ("#808000", "throttle:2.0x") in spans  # the indicator; the status line follows


# -- the live view, in virtual time ----------------------------------------------------------------
async def test_the_live_view_redraws_every_interval_until_its_count(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    output = io.StringIO()
    console = Console(file=output, width=100, color_system=None)
    async with open_dispatcher(DispatcherConfig(control_socket=str(path))) as dispatcher:
        assert dispatcher.config.control_socket == str(path)
        last = await watch(path, interval=2.5, console=console, refreshes=3)
        assert trio.current_time() == 5.0
    assert last.state == "RUNNING"
    assert last.health.at == 5.0
    assert "nucleo-trio top: dispatcher pid" in output.getvalue()


async def test_the_live_view_keeps_the_last_frame_when_the_dispatcher_goes(
    autojump_clock: trio.testing.MockClock, place: Path
) -> None:
    path = place / "d.sock"
    output = io.StringIO()
    console = Console(file=output, width=100, color_system=None)
    async with trio.open_nursery() as nursery:
        async with open_dispatcher(DispatcherConfig(control_socket=str(path))):
            watching = trio.Event()

            async def view() -> None:
                with pytest.raises(ControlSocketError) as gone:
                    await watch(path, interval=1, console=console)
                assert str(gone.value) == (
                    f"dispatcher pid {os.getpid()} stopped: its control socket '{path}' is gone"
                )
                watching.set()

            nursery.start_soon(view)
            await trio.sleep(3.5)
        await watching.wait()
    assert trio.current_time() == 4.0
    frames = output.getvalue()
    # The last frame (read at 3.0) is redrawn: its header no longer says RUNNING, and a line
    # under it says why.
    last = " ".join(frames[frames.rindex("nucleo-trio top: dispatcher pid") :].split())
    assert f"dispatcher pid {os.getpid()} on {path}, not answering (last seen RUNNING" in last
    assert f"dispatcher pid {os.getpid()} stopped: its control socket" in last
    assert "RUNNING, at" not in last


async def test_the_live_view_refuses_bad_settings_and_an_absent_socket(place: Path) -> None:
    with pytest.raises(ValueError, match="interval must be finite seconds > 0"):
        await watch(place / "d.sock", interval=0)
    with pytest.raises(TypeError, match="interval must be seconds"):
        await watch(place / "d.sock", interval="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="refreshes must be a positive int or None"):
        await watch(place / "d.sock", refreshes=0)
    with pytest.raises(ControlSocketError, match="no such socket"):
        await watch(place / "d.sock")


# -- the command's refusals -----------------------------------------------------------------------
def test_the_command_says_when_there_is_no_socket(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", "--socket", str(place / "d.sock"), "--once"]) == 1
    assert capsys.readouterr().err == (
        f"nucleo-trio top: control socket '{place / 'd.sock'}': no such socket "
        "(is a dispatcher running with control_socket set?)\n"
    )


def test_the_command_reads_the_socket_from_a_configuration(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = place / "bare.toml"
    bare.write_text("health_every = 50\n")
    assert main(["top", "--config", str(bare)]) == 1
    assert "sets no control_socket, so its dispatcher opens none" in capsys.readouterr().err
    configured = place / "on.toml"
    configured.write_text(f'control_socket = "{place / "d.sock"}"\n')
    assert main(["top", "--config", str(configured), "--json"]) == 1
    assert "no such socket" in capsys.readouterr().err
    typo = place / "typo.toml"
    typo.write_text('control_sockets = "x"\n')
    assert main(["top", "--config", str(typo)]) == 1
    assert "control_sockets" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["top", "--socket", "a", "--config", "b"], "not allowed with argument --socket"),
        (["top", "--socket", "a", "--interval", "0"], "must be finite seconds >= 0.05"),
        (["top", "--socket", "a", "--interval", "nan"], "must be finite seconds >= 0.05"),
        (["top", "--socket", "a", "--count", "0"], "must be at least 1"),
        (["top", "--socket", "a", "--once", "--json"], "not allowed with argument"),
    ],
)
def test_the_command_refuses_bad_options(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert complaint in capsys.readouterr().err


def test_the_demo_refuses_a_socket_in_a_directory_others_can_write(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = place / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    argv = ["demo", "--jobs", "20", "--control-socket", str(shared / "demo.sock")]
    assert main(argv) == 1
    assert "is writable by others (mode 0777)" in capsys.readouterr().err


# -- the real thing -------------------------------------------------------------------------------
def _top(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nucleo_trio", "top", *args],
        cwd=ROOT,
        env=dict(env if env is not None else os.environ, NO_COLOR="1", COLUMNS="120"),
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )


def _service(socket: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """tests/programs/top_target.py with its socket at ``socket`` (``--default``: the default
    place), once it said ``ready``."""
    service = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "programs" / "top_target.py"), socket],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env if env is not None else os.environ, PYTHONPATH=str(ROOT)),
    )
    assert service.stdout is not None
    line = service.stdout.readline()
    if line != "ready\n":
        service.kill()
        _, err = service.communicate()
        pytest.fail(f"the service did not start: {line!r} {err}")
    return service


def _stop(service: subprocess.Popen[str]) -> None:
    assert service.stdin is not None
    service.stdin.close()  # the service's signal to stop
    assert service.wait(timeout=HANG_BOUND) == 0, service.stderr.read() if service.stderr else ""


def _without_runtime_dir(place: Path, runtime_dir: str | None) -> dict[str, str]:
    """The environment of a container or a root shell: no $XDG_RUNTIME_DIR, or one this user
    may not use; the temporary directory is ``place``, so nothing is left in /tmp."""
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    if runtime_dir is not None:
        env["XDG_RUNTIME_DIR"] = runtime_dir
    env["TMPDIR"] = str(place)
    return env


def test_top_reads_a_dispatcher_running_in_another_process(place: Path) -> None:
    path = place / "service.sock"
    service = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "programs" / "top_target.py"), str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert service.stdout is not None and service.stdin is not None
        assert service.stdout.readline() == "ready\n"
        assert oct(path.stat().st_mode & 0o777) == "0o600"

        once = _top("--socket", str(path), "--once")
        assert once.returncode == 0, once.stderr
        lines = once.stdout.splitlines()
        assert lines[0].startswith(f"nucleo-trio top: dispatcher pid {service.pid} on {path}")
        assert ", RUNNING, at " in lines[0]
        assert any(
            line.split()[:2] == ["render", "100.0%"] and "waiters=  3" in line for line in lines
        )
        assert "Running (2), the longest first:" in lines
        assert "Parked in admission (3):" in lines
        assert sum(" on render  Render-" in line for line in lines) == 3
        assert "Recent failures (1):" in lines
        assert lines[-1].endswith(
            "Publish                  FAILED    Job failed: the printer is on fire"
        )

        as_json = _top("--socket", str(path), "--json")
        assert as_json.returncode == 0, as_json.stderr
        snapshot = LiveSnapshot.from_json(json.loads(as_json.stdout))
        assert (snapshot.pid, snapshot.running_total, snapshot.parked_total) == (service.pid, 2, 3)

        live = _top("--socket", str(path), "--count", "2", "--interval", "0.1")
        assert live.returncode == 0, live.stderr
        assert f"dispatcher pid {service.pid} on {path}, RUNNING" in live.stdout
        assert "Parked in admission (3)" in live.stdout
        assert "the printer is on fire" in live.stdout

        service.stdin.close()  # the service's signal to stop
        assert service.wait(timeout=HANG_BOUND) == 0, (
            service.stderr.read() if service.stderr else ""
        )
        assert service.stdout.read() == "stopped\n"
        assert not path.exists(), "the service removed its socket on the way out"
        gone = _top("--socket", str(path), "--once")
        assert gone.returncode == 1
        assert "no such socket" in gone.stderr
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()


def test_top_exits_saying_so_when_the_dispatcher_it_watches_stops(place: Path) -> None:
    """The live view, forced to draw as on a terminal so each frame is written when drawn: once
    the first frame is out, the service stops; top redraws the last frame with a header that
    no longer says RUNNING, and exits 1 naming what happened."""
    path = place / "service.sock"
    service = _service(str(path))
    try:
        watching = subprocess.Popen(
            [sys.executable, "-m", "nucleo_trio", "top", "--socket", str(path)]
            + ["--interval", "0.2", "--color", "always"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, COLUMNS="150"),
        )
        assert watching.stdout is not None
        first = watching.stdout.readline()  # the first frame's header: top is watching
        assert f"dispatcher pid {service.pid} on {path}" in first, first
        _stop(service)
        out, err = watching.communicate(timeout=HANG_BOUND)
    finally:
        for process in (service, watching):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert watching.returncode == 1, (out, err)
    assert err == (
        f"nucleo-trio top: dispatcher pid {service.pid} stopped: its control socket "
        f"'{path}' is gone\n"
    )
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", first + out)
    last = text[text.rindex("nucleo-trio top: dispatcher pid") :]
    assert last.startswith(
        f"nucleo-trio top: dispatcher pid {service.pid} on {path}, not answering (last seen "
    )
    assert "RUNNING, at" not in last
    assert f"dispatcher pid {service.pid} stopped: its control socket" in last


@pytest.mark.parametrize("runtime_dir", [None, "others can write", "relative"])
def test_top_finds_the_default_socket_without_a_runtime_dir_of_ones_own(
    place: Path, runtime_dir: str | None
) -> None:
    """Without $XDG_RUNTIME_DIR (a container), with one this user may not use (a root shell
    opened by sudo keeps the caller's, which another user owns; here: one others can write), or
    with a relative one, a service opens its socket at the default place and `top` with no
    --socket reads it there, in a directory of the user's own under the temporary directory."""
    shared = place / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    value = {None: None, "others can write": str(shared), "relative": "run/user"}[runtime_dir]
    env = _without_runtime_dir(place, value)
    expected = place / f"nucleo-trio-{os.getuid()}" / "nucleo-trio.sock"
    service = _service("--default", env)
    try:
        assert expected.is_socket()
        assert oct(expected.parent.stat().st_mode & 0o777) == "0o700"
        once = _top("--once", env=env)
        assert once.returncode == 0, once.stderr
        assert once.stdout.startswith(
            f"nucleo-trio top: dispatcher pid {service.pid} on {expected}, RUNNING"
        )
        _stop(service)
        gone = _top("--once", env=env)
        assert gone.returncode == 1
        assert f"control socket '{expected}': no such socket" in gone.stderr
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()


def test_the_default_socket_is_in_the_runtime_dir_when_it_is_ones_own(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = place / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert default_socket_path() == runtime / "nucleo-trio.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("TMPDIR", str(place))
    tempfile.tempdir = None  # read TMPDIR again
    try:
        fallback = default_socket_path()
        assert fallback == place / f"nucleo-trio-{os.getuid()}" / "nucleo-trio.sock"
        assert not fallback.parent.exists(), "only make=True makes the directory"
        assert default_socket_path(make=True) == fallback
        assert oct(fallback.parent.stat().st_mode & 0o777) == "0o700"
        assert default_socket_path(make=True) == fallback  # there already: kept
    finally:
        tempfile.tempdir = None


# -- the demo's socket ----------------------------------------------------------------------------
def _demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nucleo_trio", "demo", "--jobs", "20", "--color", "never", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )


def test_the_demo_refuses_a_socket_in_the_shared_temporary_directory_before_its_banner(
    place: Path,
) -> None:
    """/tmp (or any directory others can write) is refused before anything is printed: one
    line on stderr, status 1, no banner on stdout."""
    shared = Path(tempfile.gettempdir())
    if not shared.stat().st_mode & 0o002:  # not a shared /tmp here: make a directory like one
        shared = place / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
    refused = _demo("--control-socket", str(shared / "demo.sock"))
    assert refused.returncode == 1
    assert refused.stdout == ""
    mode = oct(shared.stat().st_mode & 0o7777)[2:]
    assert refused.stderr == (
        f"nucleo-trio demo: --control-socket: control socket '{shared / 'demo.sock'}': the "
        f"directory '{shared}' is writable by others (mode {mode}), so they could replace the "
        "socket; use a directory only you can write, such as $XDG_RUNTIME_DIR; without a PATH "
        "it picks one of yours\n"
    )


def test_the_demo_refuses_a_socket_path_something_else_holds_before_its_banner(
    place: Path,
) -> None:
    taken = place / "taken.sock"
    taken.write_text("not a socket")
    refused = _demo("--control-socket", str(taken))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert "something that is not a socket is there; not replacing it" in refused.stderr


def test_the_demo_opens_the_default_socket_without_a_runtime_dir(place: Path) -> None:
    """`demo --control-socket` with no PATH, where $XDG_RUNTIME_DIR is unset: the run opens
    its socket in a directory of the user's own under the temporary directory (-v shows the
    runtime's log line), and ends as usual."""
    run = _demo("-v", "--control-socket", env=_without_runtime_dir(place, None))
    expected = place / f"nucleo-trio-{os.getuid()}" / "nucleo-trio.sock"
    assert run.returncode == 0, run.stderr
    assert f"Control socket listening on {expected}" in run.stderr
    assert oct(expected.parent.stat().st_mode & 0o777) == "0o700"
    assert not expected.exists(), "the run removed its socket on the way out"
