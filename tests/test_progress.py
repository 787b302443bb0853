"""Progress on long runs: a rich bar (or spinner) on a terminal, plain text when piped.

The terminal is forced with ``rich.console.Console(force_terminal=True)`` writing into a
string, or with a stream that says it is a terminal; the plain path is what a pipe, a file or
``capsys`` gets.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from nucleo_trio._demo.options import DemoOptions
from nucleo_trio._demo.runner import execute_demo, run_demo
from nucleo_trio._progress import RunProgress, terminal_console
from nucleo_trio.cli import main
from nucleo_trio.observability import recorded_workflows

JOBS = 40
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Terminal(io.StringIO):
    """A text stream that answers it is a terminal, as a tty does."""

    def isatty(self) -> bool:
        return True


def _forced(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=True, width=100, color_system="standard")


def _lines(text: str) -> list[str]:
    """Printed lines with the escape codes and the carriage returns taken out."""
    return [line.rstrip() for line in _ANSI.sub("", text).replace("\r", "\n").split("\n")]


def _report(text: str) -> list[str]:
    # The wall-clock seconds of the run differ from run to run.
    return [line for line in _lines(text) if line and "of real time" not in line]


def test_the_demo_draws_a_bar_on_a_terminal_and_prints_the_same_report() -> None:
    options = DemoOptions(jobs=JOBS)
    plain = io.StringIO()
    assert run_demo(options, out=plain) == 0
    shown = io.StringIO()
    assert run_demo(options, out=shown, console=_forced(shown)) == 0

    piped = plain.getvalue()
    assert "\x1b[" not in piped
    assert f"/{JOBS}" not in piped and "\u2501" not in piped  # no bar, no count
    terminal = shown.getvalue()
    assert "\x1b[" in terminal and "\u2501" in terminal
    assert f"{JOBS} jobs" in terminal
    assert f"{JOBS}/{JOBS}" in _ANSI.sub("", terminal)  # the bar filled before it was cleared
    assert f"0/{JOBS}" in _ANSI.sub("", terminal)
    # Every line of the piped report is on the terminal too, in the same order, and the health
    # snapshot printed mid-run went above the bar.
    on_terminal = [line for line in _report(terminal) if line in set(_report(piped))]
    assert on_terminal == _report(piped)
    assert any("[System health snapshot]" in line for line in _report(terminal))


def test_the_bar_ticks_once_per_fanned_out_job() -> None:
    ticks: list[int] = []
    outcome = execute_demo(DemoOptions(jobs=JOBS), on_settled=lambda: ticks.append(1))
    assert len(ticks) == JOBS == outcome.report.total.settled


def test_a_terminal_gets_a_console_and_anything_else_none() -> None:
    assert terminal_console(io.StringIO()) is None
    console = terminal_console(_Terminal(), color=False)
    assert console is not None and console.no_color


def test_the_verbose_demo_draws_no_bar_even_on_a_terminal() -> None:
    # The runtime's log on the same terminal would tear the bar.
    terminal = _Terminal()
    assert run_demo(DemoOptions(jobs=10, verbose=True), out=terminal) == 0
    assert "\u2501" not in terminal.getvalue()


def test_run_progress_without_a_console_only_prints() -> None:
    stream = io.StringIO()
    with RunProgress(None, stream) as progress:
        assert not progress.shown
        progress.start("work", total=3)
        progress.advance()
        progress.print("a line")
        with progress.status("thinking"):
            pass
    assert stream.getvalue() == "a line\n"


def test_run_progress_on_a_console_shows_its_count_and_its_lines() -> None:
    buffer = io.StringIO()
    with RunProgress(_forced(buffer)) as progress:
        progress.start("pages", total=4)
        progress.print("\x1b[1mbold\x1b[0m line")
        progress.advance(4)
    text = _ANSI.sub("", buffer.getvalue())
    assert "pages" in text and "4/4" in text
    assert "bold line" in text


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    database = tmp_path_factory.mktemp("progress") / "demo.db"
    assert run_demo(DemoOptions(jobs=10, record=str(database)), out=io.StringIO()) == 0
    (summary,) = recorded_workflows(database)
    return database, summary.workflow_id


def test_the_trajectory_command_spins_on_a_terminal(
    recording: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    database, workflow_id = recording
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["trajectory", str(database), workflow_id]) == 0
    text = _ANSI.sub("", terminal.getvalue())
    flowing = " ".join(text.split())  # the spinner's line wraps at the console's width
    assert f"Reading workflow {workflow_id} from {database}" in flowing
    assert "Laying out 11 jobs in call order" in flowing
    assert f"Workflow {workflow_id}" in text


def test_the_trajectory_command_stays_plain_when_piped(
    recording: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    database, workflow_id = recording
    assert main(["trajectory", str(database), workflow_id]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out and "Reading workflow" not in out
    assert out.startswith(f"Workflow {workflow_id}")
