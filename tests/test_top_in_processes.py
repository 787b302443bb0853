"""``nucleo-trio top`` and the demo's control socket, as a user meets them (issue 22, item 4).

A service and ``top`` run in processes of their own, in an environment without
``$XDG_RUNTIME_DIR`` (a container, a root shell): ``top`` finds the socket at the default place
with no ``--socket``, an account that went idle stays in its table with its status line, and
when the service stops ``top`` says so, its last header no longer saying RUNNING, and exits 1.
The live view runs on a pseudo-terminal, as on a screen, so the test can tell when its first
frame is drawn. Real processes on the real clock: outcomes are asserted, never durations.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nucleo_trio.cli import main
from nucleo_trio.observability.control import DEFAULT_SOCKET_NAME, default_socket_path

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 120  # seconds: only so a broken build fails instead of hanging


@pytest.fixture
def no_runtime_dir(tmp_path: Path) -> dict[str, str]:
    """An environment with no ``$XDG_RUNTIME_DIR`` and a temporary directory of the test's own
    (so the default place is not shared with anything else on the machine)."""
    env = {name: value for name, value in os.environ.items() if name != "XDG_RUNTIME_DIR"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="160", LINES="200")
    return env


def _top(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nucleo_trio", "top", "--color", "never", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )


def _row(frame: str, name: str) -> str:
    """The accounts table's row of ``name`` in a frame of the live view."""
    rows = [line for line in frame.splitlines() if line.split()[:1] == [name]]
    assert len(rows) == 1, frame
    return rows[0]


class _Screen:
    """What a process wrote to its pseudo-terminal, read as it comes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = ""

    def read_until(self, marker: str | None) -> None:
        """Read until ``marker`` has come (``None``: until the writer closes its end)."""
        while marker is None or marker not in self.text:
            ready, _, _ = select.select([self.fd], [], [], HANG_BOUND)
            assert ready, f"nothing for {HANG_BOUND} s; so far:\n{self.text}"
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: every writer has closed its end
                chunk = b""
            if not chunk:
                assert marker is None, f"never saw {marker!r}:\n{self.text}"
                return
            self.text += chunk.decode("utf-8", "replace")


@pytest.fixture
def service(no_runtime_dir: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "programs" / "top_idle_target.py")],
        cwd=ROOT,
        env=no_runtime_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=HANG_BOUND)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def test_top_follows_a_service_at_the_default_place_until_it_stops(
    no_runtime_dir: dict[str, str], service: subprocess.Popen[str]
) -> None:
    env = no_runtime_dir
    assert service.stdout is not None and service.stdin is not None
    place = Path(env["TMPDIR"]) / f"nucleo-trio-{os.getuid()}"
    assert service.stdout.readline() == f"ready {place / DEFAULT_SOCKET_NAME}\n"
    info = place.stat()
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (os.getuid(), "0o700")

    # No --socket: top reads the default place. Each account's status line is in its row.
    busy = _top(env, "--count", "1")
    assert busy.returncode == 0, busy.stderr
    assert "RUNNING, at" in busy.stdout
    assert "1/2 slot" in _row(busy.stdout, "batch")
    assert "permits 1/2 active" in _row(busy.stdout, "batch")
    assert "permits 1/1 active" in _row(busy.stdout, "render")

    # The batch job ends: admission forgets its gate, and the table keeps it, read live.
    service.stdin.write("go idle\n")
    service.stdin.flush()
    assert service.stdout.readline() == "idle\n"
    idle = _top(env, "--count", "1")
    assert idle.returncode == 0, idle.stderr
    assert "0/2 slot" in _row(idle.stdout, "batch")
    assert "permits 0/2 active" in _row(idle.stdout, "batch")

    # The live view on a terminal; once its first frame is up, the service stops.
    screen_fd, terminal_fd = pty.openpty()
    live = subprocess.Popen(
        [sys.executable, "-m", "nucleo_trio", "top", "--interval", "0.2", "--color", "never"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=terminal_fd,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal_fd)
    try:
        screen = _Screen(screen_fd)
        screen.read_until("RUNNING, at")
        service.stdin.close()
        assert service.wait(timeout=HANG_BOUND) == 0
        assert service.stdout.read() == "stopped\n"
        screen.read_until(None)
        _, err = live.communicate(timeout=HANG_BOUND)
    finally:
        os.close(screen_fd)
        if live.poll() is None:
            live.kill()
            live.wait()
    assert live.returncode == 1, err
    assert err.startswith("nucleo-trio top: dispatcher pid ") and "stopped" in err, err
    last = screen.text[screen.text.rindex("nucleo-trio top: dispatcher pid") :]
    header = last.splitlines()[0]
    assert "not answering (last seen" in header, header
    assert "RUNNING, at" not in header


def test_the_default_place_is_the_runtime_directory_when_it_is_this_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert default_socket_path() == runtime / DEFAULT_SOCKET_NAME
    # Writable by others (or another user's, as under sudo): not a place for the socket.
    runtime.chmod(0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fallback = tmp_path / f"nucleo-trio-{os.getuid()}" / DEFAULT_SOCKET_NAME
    assert default_socket_path() == fallback
    assert not fallback.parent.exists()  # only looked up: nothing is made unless asked
    assert default_socket_path(make=True) == fallback and fallback.parent.is_dir()


def test_the_demo_opens_its_socket_at_the_default_place_without_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo", "--jobs", "10", "--control-socket"]) == 0
    place = tmp_path / f"nucleo-trio-{os.getuid()}"
    assert oct(place.stat().st_mode & 0o777) == "0o700"
    assert not (place / DEFAULT_SOCKET_NAME).exists(), "the run removed its socket"
    assert "nucleo-trio demo: 10 jobs" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["/tmp", "shared"])
def test_the_demo_refuses_an_unsafe_socket_place_before_its_banner(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = Path(where) if where == "/tmp" else tmp_path / where
    directory.mkdir(exist_ok=True)
    if where != "/tmp":
        directory.chmod(0o777)
    path = directory / "demo.sock"
    assert main(["demo", "--jobs", "10", "--control-socket", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "", "refused before anything is printed"
    assert err.startswith(f"nucleo-trio demo: --control-socket: control socket '{path}'"), err
    assert "is writable by others" in err
    assert not path.exists()
