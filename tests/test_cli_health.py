"""`nucleo-trio health` against what a deployment points at: a Redis that answers, one that does
not, one that never replies, a models file that is missing, a control socket path taken by a
regular file. Each ends with the exit status a deployment script can act on."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nucleo_trio.cli import main


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def _shared_gate(tmp_path: Path, url: str, *, timeout: float = 0.5) -> Path:
    config = tmp_path / "service.toml"
    config.write_text(
        "[limiters.reports]\n"
        'kind = "redis_counting"\n'
        f'settings = {{ url = "{url}", capacity = 4, timeout = {timeout}, '
        f'namespace = "health-{tmp_path.name}" }}\n'
    )
    return config


def _row(out: str, name: str) -> str:
    [row] = [line for line in out.splitlines() if line.startswith(f"    {name} ")]
    return row


def test_an_unreachable_redis_shows_lost_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared account tries Redis before the snapshot is taken: its row says redis-lost with
    what this worker holds (nothing, not 100 %), and stderr names the account and the server."""
    port = _closed_port()
    config = _shared_gate(tmp_path, f"redis://:hunter2@127.0.0.1:{port}/0")
    assert main(["health", "--config", str(config), "--color", "never"]) == 1
    captured = capsys.readouterr()
    row = _row(captured.out, "reports")
    assert re.search(r"reports +0\.0% ", row) and "redis-lost" in row, row
    [line] = captured.err.splitlines()
    assert line.startswith("nucleo-trio health: account 'reports' is unavailable: ")
    assert f"127.0.0.1:{port}" in line and "out of reach" in line
    assert "hunter2" not in captured.out + captured.err


def test_a_redis_that_answers_exits_0_with_a_settled_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_server: Any
) -> None:
    """With the server up the first settle lands before the snapshot: the row shows the shared
    gate empty and nominal."""
    config = _shared_gate(tmp_path, redis_server.url)
    assert main(["health", "--config", str(config), "--color", "never"]) == 0
    captured = capsys.readouterr()
    row = _row(captured.out, "reports")
    assert re.search(r"reports +0\.0% ", row) and "redis" not in row, row
    assert captured.err == ""


def test_a_redis_that_never_replies_is_reported_after_the_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], silent_port: int
) -> None:
    """A server that accepts and never answers: after --wait the command stops waiting and says
    the account had no first reading."""
    config = _shared_gate(tmp_path, f"redis://127.0.0.1:{silent_port}/0", timeout=30)
    assert main(["health", "--config", str(config), "--wait", "0.2", "--color", "never"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("[System health snapshot]")
    assert captured.err == (
        "nucleo-trio health: account 'reports' had no first reading within 0.2 s\n"
    )


def test_a_missing_models_file_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The catalog loads lazily in a running service; health loads it, so a models file that
    is not there ends the check with status 1 and the file's name."""
    missing = tmp_path / "models.toml"
    config = tmp_path / "service.toml"
    config.write_text(f'models = "{missing}"\n')
    assert main(["health", "--config", str(config)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("nucleo-trio health: ") and str(missing) in line, line


def test_a_present_models_file_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A readable catalog named by the environment variable is loaded and the check passes."""
    models = tmp_path / "models.toml"
    models.write_text(
        "[[models]]\n"
        'id = "small"\n'
        'grade = "SMALL"\n'
        'provider_key = "openai"\n'
        'wire_model_id = "gpt-4o-mini"\n'
        "max_context_tokens = 128000\n"
        "max_output_tokens = 16384\n"
    )
    monkeypatch.setenv("NUCLEO_TRIO_MODELS", str(models))
    assert main(["health"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("[System health snapshot]")


def test_a_control_socket_path_that_is_a_regular_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A regular file where the control socket should go is never replaced: exit 1 naming it."""
    taken = tmp_path / "control.sock"
    taken.write_text("someone's notes\n")
    config = tmp_path / "service.toml"
    config.write_text(f'control_socket = "{taken}"\n')
    assert main(["health", "--config", str(config)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("nucleo-trio health: ") and str(taken) in line, line
    assert taken.read_text() == "someone's notes\n"
