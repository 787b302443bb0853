"""What the demo's report says, and that it says it once and on the right clock (issue 12,
item 8): names not doubled, the ``rejected`` column and the bus's REJECTED explained with their
reasons, the trajectory in submission order with durations on the run's own clock, and the
thinker's section naming the clock it ran on.

Every run here is in virtual time; nothing sleeps on the real clock.
"""

from __future__ import annotations

import contextlib
import gc
import re

import pytest
import trio
import trio.testing

from nucleo_trio._demo.options import DemoOptions
from nucleo_trio._demo.render import WIDTH, Style
from nucleo_trio._demo.runner import execute_demo
from nucleo_trio._demo.tally import Tally
from nucleo_trio._demo.thinking import render_thinker_section, run_thinker
from nucleo_trio._demo.workload import META_LABEL, Kind
from nucleo_trio.bus import events as ev
from nucleo_trio.cli import main
from nucleo_trio.jobs import JobSnapshot


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The default demo's report (300 jobs, seed 7), run once for the module."""
    capture = tmp_path_factory.mktemp("demo") / "out.txt"
    with capture.open("w", encoding="utf-8") as stream:
        with contextlib.redirect_stdout(stream):
            assert main(["demo", "--color", "never"]) == 0
    return capture.read_text(encoding="utf-8")


def section(report: str, title: str) -> list[str]:
    """The lines of the section whose heading starts with ``title``, up to the blank line."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_no_name_is_said_twice(report: str) -> None:
    """A job's id already starts with its class: nothing in the report reads ``X-X-``."""
    assert not re.search(r"\b([A-Z]\w*)-\1-", report)


def test_the_rejected_column_and_the_bus_rejections_are_explained(report: str) -> None:
    """One line under the admission table says what a rejection is and why each happened; its
    count is the column's sum and the bus's REJECTED."""
    admission = section(report, "Admission by account")
    (line,) = [line for line in admission if line.startswith("  rejected (REJECTED on the bus)")]
    assert len(line) <= WIDTH
    assert "a parked job refused, never granted" in line
    reasons = re.findall(r"(\d+) ([a-z ]+?)(?:,|\.$)", line.split(": ", 1)[1])
    assert reasons == [("3", "cancelled while parked")]
    rows = [row.split() for row in admission[2:] if re.search(r" \d+/\d+ +[0-9.]+s$", row)]
    assert len(rows) == 3, admission
    # From the right: max wait, peak use, released, rejected.
    assert sum(int(row[-4]) for row in rows) == 3
    assert re.search(r"REJECTED 3\b", report)
    assert report.count("3 cancelled while parked") == 1


def test_the_trajectory_follows_submission_order_with_virtual_durations(report: str) -> None:
    """The root's children in the order it submitted them (#001 first, where start order put
    a timed-out #039 ahead), each with its duration in virtual seconds: the timed-out jobs
    lasted their 2 s timeout, not the milliseconds of wall clock the run took."""
    trajectory = section(report, "Trajectory")
    children = [line for line in trajectory if line.startswith("  |-- ")]
    numbers = [int(n) for line in children for n in re.findall(r" #(\d{3})  ", line)]
    assert numbers == list(range(1, len(children) + 1))
    assert re.fullmatch(r"  Fanout  COMPLETED  \d+\.\d{3} s", trajectory[2])
    for line in children:
        assert re.search(r"  \d+\.\d{3} s", line), line
        if "TIMED_OUT" in line:
            assert "TIMED_OUT  2.000 s: Job timed out after 2 seconds" in line


def test_the_thinker_says_which_clock_it_ran_on() -> None:
    """The thinker always runs on a mock clock, also under --real-time (run_thinker takes no
    clock option): its section says so, not just "virtual time" as if the demo's clock ruled."""
    text = render_thinker_section(run_thinker(7), Style())
    (clock,) = [line for line in text.splitlines() if line.startswith("  clock ")]
    assert "virtual time, even with --real-time" in clock
    assert re.search(r"in 4 calls, \d+\.\d s of virtual time on its mock clock\.$", text)
    assert all(len(line) <= WIDTH for line in text.splitlines())


def test_one_seed_still_prints_one_report(report: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The new lines (reasons, durations) repeat for a seed like the rest of the report."""
    assert main(["demo", "--color", "never"]) == 0
    again = capsys.readouterr().out
    strip = re.compile(r"\(the run took [0-9.]+ s of real time\)")
    assert strip.sub("", again) == strip.sub("", report)


def _timed_out(heard: list[str], label: str) -> ev.JobTimedOut:
    """A demo fetch job's timeout, the job heard of in the order of ``heard``."""
    index = heard.index(label)
    snapshot = JobSnapshot(
        job_id=f"fetch-{index:012x}",
        workflow_id="wf",
        parent_job_id="fanout",
        user_id="u",
        job_class="Fetch",
        job_class_qualname="nucleo_trio._demo.workload.Fetch",
        name="Fetch",
        metadata={META_LABEL: label},
    )
    return ev.JobTimedOut(snapshot=snapshot, timeout=2.0)


@pytest.mark.parametrize("arrival", [("#2", "#1", "#3"), ("#3", "#1", "#2"), ("#1", "#2", "#3")])
def test_the_example_of_jobs_timing_out_together_is_the_first_submitted(
    arrival: tuple[str, ...],
) -> None:
    """Jobs that time out at one instant are woken in an order trio leaves to memory addresses
    (a tie between deadlines goes by ``id()``): the example the report shows is the one
    submitted first whatever the order their events arrive in; one heard at an earlier instant
    still comes first."""
    heard = ["#3", "#1", "#2", "#0"]  # the order the tally first hears of each job
    tally = Tally({"Fetch": Kind.FETCH})
    events = {label: _timed_out(heard, label) for label in heard}

    async def run() -> None:
        for label in heard:
            tally.record(ev.JobStartedEvent(snapshot=events[label].snapshot, attempt=1))
        await trio.sleep(2.0)
        for label in arrival:
            tally.record(events[label])
        await trio.sleep(1.0)
        tally.record(events["#0"])

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    (example,) = tally.report().examples
    assert (example.outcome, example.label) == ("timed out", "#3")

    first = Tally({"Fetch": Kind.FETCH})

    async def earlier_wins() -> None:
        for label in heard:
            first.record(ev.JobStartedEvent(snapshot=events[label].snapshot, attempt=1))
        await trio.sleep(1.0)
        first.record(events["#2"])
        await trio.sleep(1.0)
        first.record(events["#3"])

    trio.run(earlier_wins, clock=trio.testing.MockClock(autojump_threshold=0))
    assert first.report().examples[0].label == "#2"


def test_a_run_puts_the_collector_thresholds_back() -> None:
    """The run paces the collector's full passes (none during a fan-out of up to 10,000 jobs)
    and leaves the process's thresholds as it found them."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], 7)
    try:
        execute_demo(DemoOptions(jobs=10))
        assert gc.get_threshold() == (before[0], before[1], 7)
    finally:
        gc.set_threshold(*before)
