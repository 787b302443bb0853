"""The ``nucleo-trio`` command line and its ``demo`` showcase.

The demo runs in virtual time, so a whole run of 60 jobs takes a fraction of a second; these
tests run it in-process through ``main`` (and once as ``python -m nucleo_trio``), check that
every section is printed and that the numbers add up, and test the demo's custom limiter on its
own and inside a real dispatcher.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from nucleo_trio import errors
from nucleo_trio._demo.options import DemoOptions
from nucleo_trio._demo.quota import SearchApiQuota
from nucleo_trio._demo.render import SECTION_TITLES, WIDTH
from nucleo_trio._demo.runner import DemoOutcome, execute_demo
from nucleo_trio._demo.tally import TallyReport
from nucleo_trio._demo.workload import Behaviour, Kind, plan_workload
from nucleo_trio.admission import Replenishment
from nucleo_trio.cli import main
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, JobState, Tool, workflow

from .test_plugins import _install_fake_distribution

ROOT = Path(__file__).resolve().parents[1]

# One row of the "Jobs by kind" table: name, needs (may hold spaces), then the numbers.
_KIND_ROW = re.compile(
    r"^  (?P<kind>fetch|query|search|report|all jobs)\s+(?P<needs>.*?)\s*"
    r"(?P<jobs>\d+)\s+(?P<completed>\d+)\s+(?P<failed>\d+)\s+(?P<timed_out>\d+)\s+"
    r"(?P<cancelled>\d+)\s+(?P<reruns>\d+)\s+(?P<waits>\S+)$"
)
_NUMBERS = ("jobs", "completed", "failed", "timed_out", "cancelled", "reruns")


def _kind_rows(out: str) -> dict[str, dict[str, int]]:
    rows: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        match = _KIND_ROW.match(line)
        if match:
            rows[match["kind"]] = {name: int(match[name]) for name in _NUMBERS}
    return rows


def _without_real_time(out: str) -> str:
    # The one number that depends on the machine: how long the virtual run took for real.
    return re.sub(r"\(the run took [0-9.]+ s of real time\)", "", out)


# -- the demo, in process -----------------------------------------------------------------------
def test_demo_prints_every_section_and_the_numbers_add_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--jobs", "60"]) == 0
    out = capsys.readouterr().out

    header = out.splitlines()[:3]
    assert (
        "60 jobs" in header[0]
        and "db (4 slots)" in header[0]
        and "http (8 connections)" in header[0]
    )
    assert "search-api (a custom limiter, 5 requests/s)" in header[1]
    assert "virtual time (seed 7)" in header[1] and "deterministic" in header[1]
    positions = [out.index(title) for title in SECTION_TITLES]
    assert positions == sorted(positions), "sections print in order"

    rows = _kind_rows(out)
    total = rows.pop("all jobs")
    assert set(rows) == {kind.value for kind in Kind}
    settled = total["completed"] + total["failed"] + total["timed_out"] + total["cancelled"]
    assert settled == total["jobs"] == 60
    for name in _NUMBERS:
        assert sum(row[name] for row in rows.values()) == total[name], name
    for row in rows.values():
        assert row["completed"] + row["failed"] + row["timed_out"] + row["cancelled"] == row["jobs"]
    # The planned trouble happened: at least one of each, and every push-back was a re-run.
    assert total["timed_out"] >= 1 and total["failed"] >= 2 and total["cancelled"] >= 1
    assert total["reruns"] >= 2

    for account in ("db ", "http ", "search-api "):
        assert re.search(rf"^  {account}", out, re.MULTILINE), account
    assert re.search(r"^  JobScheduled\s+61$", out, re.MULTILINE), "60 jobs and the root"
    assert re.search(r"^  WorkflowCompleteEvent\s+1$", out, re.MULTILINE)
    assert re.search(
        r"^  timed out\s+\w+ #\d{3}\s+Job timed out after 2 seconds$", out, re.MULTILINE
    )
    assert re.search(r"^  failed\s+\w+ #\d{3}\s+\w+Error: ", out, re.MULTILINE)
    unwrapped = re.sub(r"\n {20,}", " ", out)  # long example messages wrap onto indented lines
    assert re.search(
        r"^  over budget\s+\w+ #\d{3}\s+UncorrectableError: .* exhausted its transparent retry "
        r"budget \(1\)",
        unwrapped,
        re.MULTILINE,
    )
    assert re.search(
        r"^Elapsed: [0-9.]+ s of virtual time for 60 jobs, [0-9.]+ jobs/s", out, re.MULTILINE
    )
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert "\x1b[" not in out, "no colour when stdout is not a terminal"


def test_the_structured_outcome_agrees_with_the_orchestrator_and_the_plan() -> None:
    plans = plan_workload(60, 7)
    planned = Counter(plan.behaviour for plan in plans)
    outcome = execute_demo(DemoOptions(jobs=60), plans)
    total = outcome.report.total

    assert outcome.inconsistencies(60) == []
    assert outcome.states[JobState.TIMED_OUT] == total.timed_out == planned[Behaviour.TIMES_OUT]
    assert total.failed == planned[Behaviour.FAILS] + planned[Behaviour.OVER_BUDGET]
    assert total.cancelled == planned[Behaviour.CANCELLED]
    # A re-run once, and the job over budget re-runs once before its budget (1) refuses it.
    assert total.reruns == planned[Behaviour.RERUNS] + planned[Behaviour.OVER_BUDGET]
    assert [example.outcome for example in outcome.report.examples] == [
        "timed out",
        "failed",
        "over budget",
    ]
    accounts = {row.name: row for row in outcome.report.accounts}
    assert accounts["db"].peak_in_use <= 4 and accounts["http"].peak_in_use <= 8
    assert accounts["search-api"].replenishment == "TIME"
    # A TIME account never comes back at release; nothing in this run was rolled back.
    assert accounts["search-api"].released == 0
    assert accounts["db"].released == accounts["db"].immediate + accounts["db"].after_hold
    assert outcome.report.workflow == "Workflow completed successfully"
    assert outcome.elapsed > 5.0, "virtual time covers the 5-30 s re-run pacing"


def test_one_seed_prints_the_same_run_and_another_seed_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = []
    for seed in ("11", "11", "12"):
        assert main(["demo", "--jobs", "40", "--seed", seed]) == 0
        outputs.append(_without_real_time(capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


def test_colour_only_when_asked_or_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--jobs", "10", "--color", "always"]) == 0
    coloured = capsys.readouterr().out
    assert "\x1b[1mJobs by kind\x1b[0m" in coloured
    assert main(["demo", "--jobs", "10", "--color", "never"]) == 0
    assert "\x1b[" not in capsys.readouterr().out


def test_a_tally_that_does_not_add_up_is_reported() -> None:
    outcome = execute_demo(DemoOptions(jobs=10))
    assert outcome.inconsistencies(10) == []
    skewed = DemoOutcome(
        outcome.report, {**outcome.states, JobState.COMPLETED: 0}, outcome.elapsed, outcome.wall
    )
    problems = skewed.inconsistencies(11)
    assert any("11 jobs were submitted" in problem for problem in problems)
    assert any("saw 0 COMPLETED" in problem for problem in problems)
    assert isinstance(outcome.report, TallyReport)


# -- the command line ---------------------------------------------------------------------------
def test_python_dash_m_runs_the_demo() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nucleo_trio", "demo", "--jobs", "40"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "40 jobs from one orchestrator" in done.stdout
    assert "Jobs by kind" in done.stdout and "Elapsed:" in done.stdout
    assert done.stderr == "", "the runtime's failure logs stay quiet without --verbose"


def test_help_lists_the_demo_and_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as top:
        main(["--help"])
    assert top.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nucleo-trio") and "demo" in out

    with pytest.raises(SystemExit) as demo:
        main(["demo", "--help"])
    assert demo.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--jobs N", "--seed", "--real-time", "--color", "--verbose"):
        assert flag in out
    assert "virtual time" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--jobs", "lots"], "argument --jobs: expected a whole number, got 'lots'"),
        (["demo", "--jobs", "3"], "argument --jobs: must be from 10 to 10000, got 3"),
        (["demo", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["demo", "--color", "pink"], "argument --color: invalid choice: 'pink'"),
        (["demo", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["juggle"], "invalid choice: 'juggle'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_a_bad_flag_exits_2_with_argparse_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


# -- the demo's custom limiter ------------------------------------------------------------------
async def test_quota_names_the_instant_its_window_frees_a_slot(autojump_clock: Any) -> None:
    """ACC-05: earliest_fit is the instant the clock alone makes it fit (now if it already
    does), and None when the ask and the reservation together exceed the capacity."""
    quota = SearchApiQuota("search-api", 2, 1.0)
    await trio.sleep(10.0)
    assert quota.earliest_fit([None], []) == 10.0
    assert quota.try_take([None], [])
    await trio.sleep(0.25)
    assert quota.try_take([None], [])
    assert not quota.fits([None], [])
    assert quota.earliest_fit([None], []) == 11.0  # the oldest stamp leaves the window
    assert quota.earliest_fit([None, None], []) == 11.25  # both stamps must leave
    assert quota.earliest_fit([None], [None]) == 11.25  # one slot behind a reservation of one
    assert quota.earliest_fit([None], [None, None]) is None  # 1 + 2 reserved never fit in 2
    await trio.sleep_until(11.0)
    assert quota.fits([None], [])
    assert quota.in_use == 1


async def test_quota_is_time_kind_and_a_refund_is_immediate(autojump_clock: Any) -> None:
    """ACC-07: a TIME window still binds after the work is done; give still refunds at once."""
    quota = SearchApiQuota("search-api", 2, 1.0)
    assert quota.replenishment() is Replenishment.TIME
    assert quota.try_take([None], []) and quota.try_take([None], [])
    await trio.sleep(0.5)  # the work is over, but only the clock returns the slots
    assert not quota.try_take([None], [])
    quota.give([None])  # a roll-back: the newest stamp goes
    assert quota.in_use == 1 and quota.try_take([None], [])
    assert quota.status().summary.startswith("2/2 requests in the last 1 s")


async def test_quota_refuses_what_can_never_fit(autojump_clock: Any) -> None:
    """ACC-02: more than the window ever holds is refused with an uncorrectable error, while
    fitting alone but not beside the reservation is a plain False."""
    quota = SearchApiQuota("search-api", 2, 1.0)
    with pytest.raises(errors.UncorrectableError, match="3 requests can never fit a window of 2"):
        quota.fits([None] * 3, [])
    with pytest.raises(errors.UncorrectableError):
        quota.try_take([None] * 3, [])
    assert quota.in_use == 0
    assert quota.fits([None], [None]) and not quota.fits([None], [None, None])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": " "}, "name must be a non-blank str"),
        ({"requests": 0}, "requests must be a positive int, got 0"),
        ({"per_seconds": -1}, "per_seconds must be positive seconds, got -1"),
    ],
)
def test_quota_refuses_a_bad_configuration(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchApiQuota(**kwargs)


class _Call(Tool[float]):
    """Spends one request of a quota and answers when it started."""

    def __init__(self, parent: Any, quota: SearchApiQuota) -> None:
        super().__init__(parent)
        self.quota = quota
        self.timeout = 60.0

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.quota)

    async def execute(self, context: JobContext) -> float:
        return trio.current_time()


async def test_the_custom_quota_joins_admission_like_a_built_in(autojump_clock: Any) -> None:
    """ADM-46: release gives back only RELEASE accounts, so the custom TIME quota's permits come
    back with its window alone: a job short only on the quota is granted at the instant the
    window frees a slot, with no give at all."""
    quota = SearchApiQuota("search-api", 2, 1.0)
    root = workflow("tester", "quota")
    async with open_dispatcher(DispatcherConfig(seed=1)) as dispatcher:
        start = trio.current_time()
        handles = [dispatcher.submit(_Call(root, quota)) for _ in range(5)]
        started = [await handle.result() for handle in handles]
    assert [round(t - start, 6) for t in started] == [0.0, 0.0, 1.0, 1.0, 2.0]
    assert dispatcher.http_gate.in_use == 0, "the quota also took (and gave back) an http permit"


def test_the_plan_is_seeded_and_holds_each_kind_of_trouble() -> None:
    plans = plan_workload(300, 7)
    assert plans == plan_workload(300, 7) and plans != plan_workload(300, 8)
    planned = Counter(plan.behaviour for plan in plans)
    assert planned[Behaviour.OVER_BUDGET] == 1
    assert all(planned[behaviour] >= 1 for behaviour in Behaviour)
    assert [plan.index for plan in plans] == list(range(1, 301))
    with pytest.raises(ValueError, match="at least 10, got 9"):
        plan_workload(9, 7)
    with pytest.raises(ValueError, match="DemoOptions.jobs must be from 10 to 10000, got 10001"):
        DemoOptions(jobs=10_001)


def test_health_checks_a_configuration_and_prints_its_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nucleo-trio health --config FILE` starts a dispatcher with the file's settings and prints
    its snapshot: the configured limiter and database rows beside the http gate, the memory
    line, the empty lanes; uncoloured unless asked."""
    config = tmp_path / "service.toml"
    config.write_text(
        "http_connections = 8\n"
        "[limiters.search]\n"
        'kind = "token_bucket"\n'
        "settings = { rpm = 60, tpm = 6000 }\n"
        "[databases.notes]\n"
        'kind = "counting"\n'
        "settings = { max_concurrent = 2 }\n"
    )
    assert main(["health", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[System health snapshot]") and "\x1b[" not in out
    for row in ("db:notes", "search", "http"):
        assert re.search(rf"^    {re.escape(row)} +0\.0% ", out, re.MULTILINE), row
    assert "total: 8      slot" in out and "total: 6.0K   tok" in out
    assert "  Memory: " in out and "zone GREEN" in out
    assert "Queue: 0 standard, 0 fast, 0 parked in admission" in out
    assert main(["health", "--config", str(config), "--color", "always"]) == 0
    assert "\x1b[" in capsys.readouterr().out


def test_health_refuses_a_bad_configuration_naming_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo'd key, a file that is not TOML, a missing file and an unknown limiter kind each end
    the command with status 1 and one line naming the problem."""
    cases = {
        "typo.toml": ("htp_connections = 8\n", "htp_connections"),
        "broken.toml": ("http_connections = [\n", "not valid TOML"),
        "kind.json": ('{"limiters": {"q": {"kind": "no_such_kind"}}}', "no_such_kind"),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        assert main(["health", "--config", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("nucleo-trio health: ") and expected in err, (name, err)
    assert main(["health", "--config", str(tmp_path / "missing.toml")]) == 1
    assert "cannot be read" in capsys.readouterr().err


def test_health_refuses_a_sqlite_database_in_a_missing_directory_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The provider is refused when built, so health exits 1 naming the database and the
    directory instead of printing a snapshot of a database no job could open."""
    missing = tmp_path / "gone"
    config = tmp_path / "dispatcher.toml"
    config.write_text(
        f'[databases.notes]\nkind = "sqlite"\nsettings = {{ path = "{missing / "notes.db"}", max_connections = 2 }}\n'
    )
    assert main(["health", "--config", str(config)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("nucleo-trio health: ")
    assert "'notes'" in line and f"the directory {missing} of" in line


def test_health_refuses_a_yaml_configuration_as_an_unsupported_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "dispatcher.yaml"
    config.write_text("http_connections: 8\n")
    assert main(["health", "--config", str(config)]) == 1
    assert capsys.readouterr().err == (
        f"nucleo-trio health: dispatcher config {config}: unsupported format ('.yaml'); "
        "write it as TOML (.toml) or JSON (.json)\n"
    )


@pytest.mark.parametrize("command", [["demo", "--jobs", "20"], ["health"]])
def test_a_plugin_that_fails_to_import_is_one_line_and_status_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    """An installed distribution whose entry point cannot be imported: every command says so
    in one line naming the distribution, the entry point and the import error, no traceback."""
    _install_fake_distribution(
        tmp_path, monkeypatch, "nt-broken-plugin", "nt_broken_plugin_module", source=None
    )
    assert main(command) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        f"nucleo-trio {command[0]}: the 'nucleo_trio' entry point "
        "nt_broken_plugin_module = nt_broken_plugin_module of distribution nt-broken-plugin 0.1 "
        "failed to import: ModuleNotFoundError: No module named 'nt_broken_plugin_module'"
    )


def test_demo_refuses_a_recording_in_a_missing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "missing" / "run.db"
    assert main(["demo", "--record", str(record)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"nucleo-trio demo: --record {record}: the directory {record.parent} does not exist\n"
    )
