"""Reading a recorded workflow back in call order (OBS-32), rendering it, and the command
line that prints it (``nucleo-trio trajectory``), the demo's included.

The fan-out test is the one the rule is about: two branches run in parallel under one doer, and
the trajectory rebuilds the call order by walking the tree depth-first with each parent's
children ordered by ``iteration_number`` and then in submission order, while a flat sort of the
same rows by start time or by ordinal gives an order that is wrong. Everything runs in virtual
time; the recorded instants are wall-clock, so their order is the order things really happened
in, and durations come from the runtime's own (virtual) clock.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
import trio
import trio.testing

from nucleo_trio.cli import main
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import Doer, Identifiable, JobContext, Tool, workflow
from nucleo_trio.observability import (
    RECORDER_SCHEMA,
    Trajectory,
    TrajectoryRecorder,
    open_recording,
    recorded_workflows,
    render_trajectory,
    trajectory,
)


class Step(Tool[str]):
    """A leaf named for the trajectory, doing a second of (virtual) work."""

    def __init__(self, parent: Identifiable, label: str, *, fail: bool = False) -> None:
        super().__init__(parent, prefix=label)
        self.label = label
        self.fail = fail

    @property
    def display_name(self) -> str:
        return self.label

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(1)
        if self.fail:
            raise RuntimeError(f"{self.label} broke")
        return self.label


class Branch(Doer[str]):
    """Runs its two steps one after the other: ordinals 1 and 2 under this branch."""

    def __init__(self, parent: Identifiable, label: str) -> None:
        super().__init__(parent, prefix=label)
        self.label = label

    @property
    def display_name(self) -> str:
        return self.label

    async def execute(self, context: JobContext) -> str:
        for n in (1, 2):
            await self.submit_in_step(Step(self, f"{self.label}.{n}")).result()
        return self.label


class Research(Doer[str]):
    """Plan (step 1), then the two branches side by side (one fan-out, step 2), then sum up
    (step 3)."""

    @property
    def display_name(self) -> str:
        return "research"

    async def execute(self, context: JobContext) -> str:
        await self.submit_in_step(Step(self, "plan")).result()
        self.next_step()
        branches = [self.submit_in_current_step(Branch(self, name)) for name in ("left", "right")]
        for branch in branches:
            await branch.result()
        await self.submit_in_step(Step(self, "sum-up")).result()
        return "done"


async def record_research(path: Path) -> str:
    """Run the research workflow under a recorder into ``path``; answer its workflow id."""
    recorder = TrajectoryRecorder(path)
    root = Research(workflow("alice", "research"))
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        assert await dispatcher.submit(root).result() == "done"
    recorder.close()
    return root.workflow_id


def names(steps: object) -> list[str]:
    return [step.name for step in steps]  # type: ignore[attr-defined]


def flat(path: Path, workflow_id: str, order: str) -> list[str]:
    """The workflow's names sorted flat on one column: what the rule says not to do."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            f"SELECT name FROM jobs WHERE workflow_id = ? ORDER BY {order}, seq", (workflow_id,)
        )
        return [name for (name,) in rows]


async def test_a_fan_out_is_rebuilt_in_call_order_where_a_flat_sort_is_noise(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-32: walking the tree depth-first with each parent's children ordered by
    iteration_number, then submission, rebuilds the call order of a fan-out with parallel
    branches; the same rows sorted flat by start time interleave the branches, and sorted flat
    by ordinal mix the levels, because ordinals are per parent."""
    path = tmp_path / "runs.db"
    workflow_id = await record_research(path)
    recorded = trajectory(path, workflow_id)

    order = names(recorded)
    first, second = [name for name in order if name in ("left", "right")]
    assert (first, second) == ("left", "right"), "siblings of one step in submission order"
    call_order = [
        "research",
        "plan",
        first,
        f"{first}.1",
        f"{first}.2",
        second,
        f"{second}.1",
        f"{second}.2",
        "sum-up",
    ]
    assert order == call_order
    (root,) = recorded.roots
    assert [(c.iteration_number, c.name) for c in root.children] == [
        (1, "plan"),
        (2, first),
        (2, second),
        (3, "sum-up"),
    ]
    assert [c.iteration_number for c in root.children[1].children] == [1, 2]
    assert [step.depth for step in recorded] == [0, 1, 1, 2, 2, 1, 2, 2, 1]

    by_time = flat(path, workflow_id, "started_at")
    assert by_time != call_order
    # The second branch and its first step started while the first branch was still busy:
    # sorted by time, the first branch's subtree is torn apart.
    positions = sorted(by_time.index(name) for name in (first, f"{first}.1", f"{first}.2"))
    assert positions != list(range(positions[0], positions[0] + 3))
    assert by_time.index(f"{second}.1") < by_time.index(f"{first}.2")

    by_ordinal = flat(path, workflow_id, "iteration_number, started_at")
    assert by_ordinal != call_order
    # Ordinals collide across parents: every step 1 comes before any step 2, so a branch's
    # first step sorts ahead of the branch itself.
    assert by_ordinal.index(f"{first}.1") < by_ordinal.index(first)
    assert by_ordinal[:4] == ["research", "plan", f"{first}.1", f"{second}.1"] or by_ordinal[
        :4
    ] == ["research", "plan", f"{second}.1", f"{first}.1"]


def test_siblings_follow_submission_order_not_start_order(tmp_path: Path) -> None:
    """Admission starts whichever sibling fits first, so the fortieth job submitted may start
    before the first: siblings of one ordinal (or of none) are read back in the order the
    recorder first heard of them, their submission order, whatever their start times."""
    path = tmp_path / "runs.db"
    rows = [
        # seq, job_id, parent, iteration, started_at
        (1, "root", None, None, 10.0),
        (2, "first", "root", None, 10.5),
        (3, "second", "root", None, 10.2),
        (4, "never-started", "root", None, None),
        (5, "fortieth", "root", None, 10.1),
        (6, "step-two", "root", 2, 10.0),
        (7, "step-one", "root", 1, 10.9),
    ]
    with sqlite3.connect(path) as db:
        db.executescript(RECORDER_SCHEMA)
        db.executemany(
            "INSERT INTO jobs (seq, job_id, parent_job_id, workflow_id, user_id, job_class, "
            "name, kind, iteration_number, state, started_at) "
            "VALUES (?, ?, ?, 'wf', 'u', 'app.Job', ?, 'TOOL', ?, 'COMPLETED', ?)",
            [(seq, job, parent, job, ordinal, at) for seq, job, parent, ordinal, at in rows],
        )
    recorded = trajectory(path, "wf")
    assert names(recorded) == [
        "root",
        "first",
        "second",
        "never-started",
        "fortieth",
        "step-one",
        "step-two",
    ]


async def test_the_rendered_tree_shows_ordinals_outcomes_and_durations(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-32: the tree prints in call order, one job a line, with ordinals, states and
    failures; ids and durations on request; max_children sums up the rest; width cuts."""

    class Chain(Doer[str]):
        @property
        def display_name(self) -> str:
            return "chain"

        async def execute(self, context: JobContext) -> str:
            for label, fail in (("fetch", False), ("parse", True), ("store", False)):
                try:
                    await self.submit_in_step(Step(self, label, fail=fail)).result()
                except RuntimeError:
                    pass
            return "chained"

    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    root = Chain(workflow("bob", "chain"))
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        await dispatcher.submit(root).result()
    recorder.close()
    recorded = trajectory(path, root.workflow_id)

    assert render_trajectory(recorded, ids=False, durations=False) == "\n".join(
        [
            "Workflow for bob: 4 jobs (3 completed, 1 failed)",
            "chain  COMPLETED",
            "|-- [1] fetch  COMPLETED",
            "|-- [2] parse  FAILED: RuntimeError: parse broke",
            "`-- [3] store  COMPLETED",
        ]
    )
    full = render_trajectory(recorded).splitlines()
    assert full[0] == f"Workflow {root.workflow_id} for bob: 4 jobs (3 completed, 1 failed)"
    assert full[1].startswith(f"chain  {root.job_id}  COMPLETED  ") and full[1].endswith(" s")
    assert render_trajectory(recorded, ids=False, durations=False, max_children=1).splitlines()[
        2:
    ] == ["|-- [1] fetch  COMPLETED", "`-- ... and 2 more: 1 completed, 1 failed"]
    cut = render_trajectory(recorded, ids=False, durations=False, width=20).splitlines()
    assert cut[3] == "|-- [2] parse  FA..." and max(len(line) for line in cut) <= 20
    with pytest.raises(ValueError, match="max_children must be a positive int"):
        render_trajectory(recorded, max_children=0)
    assert [s.duration for s in recorded.roots[0].children if s.duration is not None]


async def test_reading_a_recording_names_what_is_missing(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """OBS-32: an unknown workflow names the ones the file holds; a missing file or one that is
    not a recording is refused by path; an open connection can be read and stays open."""
    path = tmp_path / "runs.db"
    workflow_id = await record_research(path)
    with pytest.raises(LookupError, match=f"no workflow 'nope' .* holds: {workflow_id}"):
        trajectory(path, "nope")
    with pytest.raises(FileNotFoundError, match="no recording at .*missing.db"):
        trajectory(tmp_path / "missing.db", workflow_id)
    plain = tmp_path / "plain.db"
    with sqlite3.connect(plain) as db:
        db.execute("CREATE TABLE other (x)")
    with pytest.raises(ValueError, match="is not a recording: it has no 'jobs' table"):
        trajectory(plain, workflow_id)
    (summary,) = recorded_workflows(path)
    assert (summary.workflow_id, summary.user_id, summary.jobs) == (workflow_id, "alice", 9)
    db = open_recording(path)
    try:
        assert isinstance(trajectory(db, workflow_id), Trajectory)
        assert db.execute("SELECT count(*) FROM jobs").fetchone() == (9,)
    finally:
        db.close()


# -- the command line ----------------------------------------------------------------------------


async def test_the_trajectory_command_prints_lists_and_refuses(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OBS-32: `nucleo-trio trajectory DB WORKFLOW` prints the tree in call order; without
    WORKFLOW it lists the workflows; a missing file or workflow exits 1 with a message."""
    path = tmp_path / "runs.db"
    workflow_id = await record_research(path)

    assert main(["trajectory", str(path), workflow_id]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Workflow {workflow_id} for alice: 9 jobs (9 completed)"
    assert [line.split("  ")[0] for line in out[1:3]] == ["research", "|-- [1] plan"]
    assert out[-1].startswith("`-- [3] sum-up  sum-up-")

    assert main(["trajectory", str(path), workflow_id, "--max-children", "1"]) == 0
    assert "`-- ... and 3 more: 3 completed" in capsys.readouterr().out

    assert main(["trajectory", str(path)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing == [
        f"1 workflow(s) in {path}, the most recent first:",
        f"  {workflow_id}  alice  9 job(s)",
    ]

    assert main(["trajectory", str(path), "nope"]) == 1
    assert "no workflow 'nope' in the recording" in capsys.readouterr().err
    assert main(["trajectory", str(tmp_path / "none.db"), "x"]) == 1
    assert "no recording at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["trajectory", str(path), workflow_id, "--max-children", "0"])
    assert "must be at least 1, got 0" in capsys.readouterr().err


def test_the_demo_records_and_prints_its_trajectory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OBS-31, OBS-32: the demo records its run and ends with the trajectory: the root, its
    first children in submission order, the rest summed up, no ids, durations in virtual
    seconds; --record keeps the file, which the trajectory command reads again."""
    kept = tmp_path / "demo.db"
    assert main(["demo", "--jobs", "20", "--record", str(kept)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("Trajectory  (recorded into") :].splitlines()
    assert section[1] == "  Workflow for demo-user: 21 jobs (" + section[1].split("(", 1)[1]
    assert re.fullmatch(r"  Fanout  COMPLETED  \d+\.\d{3} s", section[2])
    assert all(line.startswith("  |-- ") for line in section[3:11])
    numbers = [int(re.findall(r" #(\d{3})  ", line)[0]) for line in section[3:11]]
    assert numbers == list(range(1, 9)), "the root's children in the order it submitted them"
    assert all(re.search(r"  \d+\.\d{3} s", line) for line in section[3:11])
    assert section[11].startswith("  `-- ... and 12 more: ")
    hint = section[12]
    assert hint.startswith(f"  All of it: nucleo-trio trajectory {kept} demo-")
    workflow_id = hint.rsplit(" ", 1)[1]
    assert main(["trajectory", str(kept), workflow_id]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 22

    assert main(["demo", "--jobs", "20"]) == 0
    plain = capsys.readouterr().out
    assert "recorded into a temporary file" in plain and "All of it:" not in plain


async def test_without_ids_a_failure_names_its_own_job_by_name(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A job's id is random: a failure that names its own job by id (as the runtime's messages
    do, ``Step-parse-7df1...``) names it by its name when ids are left out, so two runs print
    the same tree; with ids it is left as recorded."""

    class GivesUp(Step):
        async def execute(self, context: JobContext) -> str:
            raise RuntimeError(f"{self.name} gave up ({self.job_id})")

    path = tmp_path / "runs.db"
    recorder = TrajectoryRecorder(path)
    job = GivesUp(workflow("bob", "give-up"), "parse")
    async with open_dispatcher() as dispatcher:
        recorder.attach(dispatcher)
        with pytest.raises(RuntimeError):
            await dispatcher.submit(job).result()
    recorder.close()
    recorded = trajectory(path, job.workflow_id)

    assert job.name == f"GivesUp-{job.job_id}"
    plain = render_trajectory(recorded, ids=False, durations=False).splitlines()
    assert plain[1] == "parse  FAILED: RuntimeError: parse gave up (parse)"
    full = render_trajectory(recorded, durations=False).splitlines()
    assert full[1].endswith(f"FAILED: RuntimeError: {job.name} gave up ({job.job_id})")
