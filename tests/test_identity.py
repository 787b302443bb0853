"""Identity, defaults, naming, snapshots, job states and the one-shot stop (spec A.1, ID-01..12)."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from nucleo_trio.jobs import (
    DEFAULT_TIMEOUT,
    AbstractJob,
    AbstractStoppable,
    Identifiable,
    JobContext,
    JobSnapshot,
    JobState,
    JobType,
    WorkflowRoot,
    display_name,
    tool_description,
    workflow,
)

TAIL = r"[0-9a-f]{12}"


class Plain(AbstractJob[None]):
    """A job with no naming of its own: the class name speaks for it."""

    async def execute(self, context: JobContext) -> None:
        return None


@display_name("Fetch the page", action="fetching")
@tool_description("Downloads one page and returns its text.")
class Decorated(AbstractJob[None]):
    async def execute(self, context: JobContext) -> None:
        return None


@display_name("Decorator name", action="deciding")
class Overriding(AbstractJob[None]):
    """The job's own display_name outranks the decorator (ID-08)."""

    @property
    def display_name(self) -> str | None:
        return "Own name"

    async def execute(self, context: JobContext) -> None:
        return None


def snapshot_of(job: AbstractJob[Any]) -> JobSnapshot:
    return JobContext(job, job.user_id).snapshot()


# -- ID-01, ID-02: the workflow root ------------------------------------------------------------


def test_a_workflow_is_its_own_root() -> None:
    """ID-01: a workflow's id is its own workflow id, it has no parent, it keeps the user, and
    its id is ``<prefix>-<tail>``."""
    root = workflow("alice", "research")
    assert isinstance(root, WorkflowRoot)
    assert isinstance(root, Identifiable)
    assert root.workflow_id == root.job_id
    assert root.parent_job_id is None
    assert root.user_id == "alice"
    assert re.fullmatch(rf"research-{TAIL}", root.job_id)


def test_two_workflows_with_one_prefix_get_different_ids() -> None:
    """ID-01: each workflow mints its own id."""
    assert workflow("alice", "wf").job_id != workflow("alice", "wf").job_id


@pytest.mark.parametrize("user", [None, "", "   "])
def test_a_workflow_refuses_a_missing_user(user: Any) -> None:
    """ID-02: a missing or empty user is refused with ValueError naming the user id."""
    with pytest.raises(ValueError, match="user id"):
        workflow(user, "wf")


@pytest.mark.parametrize("prefix", [None, "", "   "])
def test_a_workflow_refuses_a_missing_prefix(prefix: Any) -> None:
    """ID-02: a missing or empty prefix is refused with ValueError naming the prefix."""
    with pytest.raises(ValueError, match="prefix"):
        workflow("alice", prefix)


@pytest.mark.parametrize(
    ("field", "value"), [("job_id", ""), ("job_id", None), ("user_id", "  "), ("user_id", 7)]
)
def test_a_workflow_root_built_directly_refuses_what_is_no_id(field: str, value: Any) -> None:
    """Built without ``workflow()``, a root still refuses a missing, blank or non-string id or
    user, naming the field."""
    fields: dict[str, Any] = {"job_id": "wf-1", "user_id": "alice"}
    fields[field] = value
    with pytest.raises(ValueError, match=f"WorkflowRoot.{field} must be a non-empty str"):
        WorkflowRoot(**fields)


# -- ID-03..05: a job mints its id and inherits its lineage --------------------------------------


def test_a_job_mints_its_id_from_its_prefix() -> None:
    """ID-03: the id is ``<prefix>-<random tail>``, job_id and id agree, and two jobs with the
    same prefix get different ids."""
    root = workflow("alice", "wf")
    first, second = Plain(root, "search"), Plain(root, "search")
    assert re.fullmatch(rf"search-{TAIL}", first.job_id)
    assert first.job_id == first.id
    assert first.job_id != second.job_id


@pytest.mark.parametrize("prefix", [None, ""])
def test_without_a_prefix_the_id_starts_with_the_class_name(prefix: str | None) -> None:
    """ID-04: with no prefix the id starts with the class's simple name."""
    job = Plain(workflow("alice", "wf"), prefix)
    assert re.fullmatch(rf"Plain-{TAIL}", job.job_id)


@pytest.mark.parametrize("prefix", [5, b"search", ["search"]])
def test_a_prefix_that_is_not_a_string_is_refused(prefix: Any) -> None:
    with pytest.raises(TypeError, match="Plain's id prefix must be a str or None"):
        Plain(workflow("alice", "wf"), prefix)


def test_a_root_job_inherits_the_workflow_and_user() -> None:
    """ID-05: a job built under a workflow root copies its workflow and user; its parent is the
    root."""
    root = workflow("alice", "wf")
    job = Plain(root)
    assert job.workflow_id == root.workflow_id
    assert job.user_id == "alice"
    assert job.parent_job_id == root.job_id


def test_a_child_job_inherits_its_parents_lineage() -> None:
    """ID-05: a job built under another job copies its workflow and user, and its parent job id
    is the parent's job id."""
    root = workflow("bob", "wf")
    parent = Plain(root, "parent")
    child = Plain(parent, "child")
    grandchild = Plain(child)
    assert child.parent_job_id == parent.job_id
    assert grandchild.parent_job_id == child.job_id
    assert child.workflow_id == grandchild.workflow_id == root.workflow_id
    assert child.user_id == grandchild.user_id == "bob"
    assert isinstance(parent, Identifiable)


def test_a_job_refuses_a_missing_parent() -> None:
    """ID-05: a None parent is refused with ValueError naming the job class."""
    with pytest.raises(ValueError, match="Plain needs a parent"):
        Plain(None)  # type: ignore[arg-type]


def test_a_job_refuses_a_parent_that_is_not_an_identity() -> None:
    """A parent that is neither a workflow root nor a job is a TypeError naming what it got."""
    with pytest.raises(TypeError, match="got str"):
        Plain("wf-123")  # type: ignore[arg-type]


# -- ID-06, ID-07: defaults -----------------------------------------------------------------------


def test_default_priority_and_name() -> None:
    """ID-06: the default priority is 0 and the name is ``<ClassSimpleName>-<id>``."""
    job = Plain(workflow("alice", "wf"), "p")
    assert job.priority == 0
    assert job.name == f"Plain-{job.id}"
    assert re.fullmatch(r"Plain-p-[0-9a-f]{12}", job.name)


def test_a_name_never_says_the_class_twice() -> None:
    """An id minted from the class name already names the class: the name is the id itself,
    so a message reads ``Plain-7df1...`` and never ``Plain-Plain-7df1...``."""
    job = Plain(workflow("alice", "wf"))
    assert job.name == job.id
    assert re.fullmatch(r"Plain-[0-9a-f]{12}", job.name)
    assert "Plain-Plain" not in repr(job) and repr(job) == f"<{job.id}>"


def test_the_defaults_a_job_inherits() -> None:
    """ID-07: the job type is JOB, the display name is None and the timeout is thirty minutes."""
    job = Plain(workflow("alice", "wf"))
    assert job.job_type is JobType.JOB
    assert job.display_name is None
    assert job.timeout == DEFAULT_TIMEOUT == 1800.0


def test_a_timeout_of_none_means_no_deadline() -> None:
    """ID-07: setting the timeout to None declares no deadline, and the job then reports None."""
    job = Plain(workflow("alice", "wf"))
    job.set_timeout(None)
    assert job.timeout is None
    job.set_timeout(2.5)
    assert job.timeout == 2.5
    job.timeout = None
    assert job.timeout is None


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_a_timeout_must_be_positive(seconds: float) -> None:
    """A zero, negative or NaN timeout is refused with ValueError naming the job."""
    job = Plain(workflow("alice", "wf"))
    with pytest.raises(ValueError, match="timeout must be positive"):
        job.set_timeout(seconds)
    assert job.timeout == DEFAULT_TIMEOUT


def test_a_class_body_declares_the_defaults_its_jobs_start_with() -> None:
    """ID-06, ID-07: the defaults (priority 0, thirty minutes) hold unless a class body declares
    its own, which its jobs then start with; the base's stay as they were."""

    class Urgent(AbstractJob[None]):
        priority = 5
        timeout = 2

        async def execute(self, context: JobContext) -> None:
            return None

    job = Urgent(workflow("alice", "wf"))
    assert (job.priority, job.timeout) == (5, 2.0)
    plain = Plain(workflow("alice", "wf"))
    assert (plain.priority, plain.timeout) == (0, DEFAULT_TIMEOUT)


# -- ID-08, ID-09: snapshots ----------------------------------------------------------------------


def test_a_snapshot_without_naming_uses_the_class_name() -> None:
    """ID-08: with no override and no decorator the snapshot is named by the class's simple
    name, its action is "" and its description is None."""
    snap = snapshot_of(Plain(workflow("alice", "wf")))
    assert snap.name == "Plain"
    assert snap.action == ""
    assert snap.description is None


def test_a_snapshot_takes_name_action_and_description_from_the_decorators() -> None:
    """ID-08: the @display_name decorator gives the name and action, @tool_description the
    description."""
    snap = snapshot_of(Decorated(workflow("alice", "wf")))
    assert snap.name == "Fetch the page"
    assert snap.action == "fetching"
    assert snap.description == "Downloads one page and returns its text."


def test_the_jobs_own_display_name_outranks_the_decorator() -> None:
    """ID-08: the job's own display_name comes first; the decorator's action still applies."""
    job = Overriding(workflow("alice", "wf"))
    snap = snapshot_of(job)
    assert job.display_name == "Own name"
    assert snap.name == "Own name"
    assert snap.action == "deciding"
    assert snap.description is None


def test_a_fresh_snapshot() -> None:
    """ID-09: a fresh snapshot is QUEUED with attempt number 0, its job_type is the class's simple
    name, and it carries the job's identity."""
    root = workflow("alice", "wf")
    job = Decorated(root, "fetch")
    snap = snapshot_of(job)
    assert snap.state is JobState.QUEUED
    assert snap.attempt_number == 0
    assert snap.job_type == "Decorated"
    assert snap.job_class_qualname.endswith(".Decorated")
    assert snap.kind is JobType.JOB
    assert (snap.job_id, snap.workflow_id, snap.parent_job_id, snap.user_id) == (
        job.job_id,
        root.workflow_id,
        root.job_id,
        "alice",
    )
    assert snap.priority == 0
    assert snap.timeout == DEFAULT_TIMEOUT


def test_with_methods_return_copies_and_leave_the_original() -> None:
    """ID-09: with_state, with_attempt_number and with_description return changed copies and leave
    the original unchanged."""
    original = snapshot_of(Decorated(workflow("alice", "wf")))
    running = original.with_state(JobState.RUNNING)
    second = original.with_attempt_number(2)
    described = original.with_description("at runtime")
    assert (running.state, second.attempt_number, described.description) == (
        JobState.RUNNING,
        2,
        "at runtime",
    )
    assert original.state is JobState.QUEUED
    assert original.attempt_number == 0
    assert original.description == "Downloads one page and returns its text."
    assert running.job_id == second.job_id == described.job_id == original.job_id
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        original.state = JobState.RUNNING  # type: ignore[misc]


def test_a_description_set_at_runtime_overrides_the_decorators() -> None:
    """ID-09: a description set on the context at runtime outranks @tool_description."""
    job = Decorated(workflow("alice", "wf"))
    context = JobContext(job, "alice")
    context.description = "Fetching https://example.org"
    assert context.snapshot().description == "Fetching https://example.org"


def test_a_snapshot_is_hashable_so_it_can_key_dependency_results() -> None:
    """A snapshot is a frozen value that keys a dependent's dependency results: it must hash, and
    equal snapshots hash alike."""
    snap = snapshot_of(Plain(workflow("alice", "wf")))
    assert hash(snap) == hash(attrs.evolve(snap))
    assert {snap: "result"}[snap] == "result"


# -- ID-10, ID-11: job states ---------------------------------------------------------------------

TERMINAL = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT}
ACTIVE = {JobState.QUEUED, JobState.SCHEDULED, JobState.RUNNING, JobState.CANCELLING, JobState.IDLE}


def test_every_state_is_either_terminal_or_active() -> None:
    """ID-10: the terminal and active states partition JobState."""
    assert TERMINAL | ACTIVE == set(JobState)
    assert not TERMINAL & ACTIVE


@pytest.mark.parametrize("state", list(JobState))
def test_job_state_predicates(state: JobState) -> None:
    """ID-10, ID-11: COMPLETED, FAILED, CANCELLED and TIMED_OUT are terminal and the rest active;
    only FAILED and TIMED_OUT are failures; only COMPLETED is a success, so CANCELLED is terminal
    but neither."""
    assert state.is_terminal is (state in TERMINAL)
    assert state.is_active is (state in ACTIVE)
    assert state.is_failure is (state in {JobState.FAILED, JobState.TIMED_OUT})
    assert state.is_success is (state is JobState.COMPLETED)


def test_cancelled_is_terminal_but_neither_success_nor_failure() -> None:
    """ID-11: CANCELLED is terminal and counts as neither success nor failure."""
    assert JobState.CANCELLED.is_terminal
    assert not JobState.CANCELLED.is_success
    assert not JobState.CANCELLED.is_failure


# -- ID-12: the one-shot stop ----------------------------------------------------------------------


class SyncStoppable(AbstractStoppable):
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def do_stop(self) -> None:
        self.calls.append(self.is_stopping)


class AsyncStoppable(AbstractStoppable):
    def __init__(self) -> None:
        self.calls: list[bool] = []

    async def do_stop(self) -> None:
        self.calls.append(self.is_stopping)
        await trio.sleep(1)


async def test_stop_runs_a_plain_do_stop_once_with_the_flag_raised() -> None:
    """ID-12: stop() runs do_stop exactly once however often it is called, and is_stopping is
    already true inside do_stop."""
    component = SyncStoppable()
    assert not component.is_stopping
    for _ in range(3):
        await component.stop()
    assert component.calls == [True]
    assert component.is_stopping


async def test_concurrent_stops_run_an_async_do_stop_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ID-12: many tasks stopping at once while an async do_stop is still under way run it once,
    and it sees is_stopping already true."""
    component = AsyncStoppable()
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(component.stop)
    await component.stop()
    assert component.calls == [True]
