"""The soak's plan: every random choice, drawn from the seed before anything runs.

A batch is a list of job trees. Each node is a :class:`JobPlan` that says what the job is (a
tool or an orchestrator), what it does when it runs (its *behaviour*), what it demands of
admission, whether it writes to the database in a transaction (and whether that commit must
fail), and whether and when it is cancelled. Nothing is drawn while jobs run: the tasks'
order depends on the scheduler and on the SQLite worker threads, and the plan must not.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

__all__ = [
    "ACCOUNTS",
    "COMMIT_CANCELS",
    "OVERRUNS",
    "HostScenario",
    "JobPlan",
    "draw_batch",
    "draw_host_scenarios",
]

ACCOUNTS = ("gate_a", "gate_b", "bucket", "ledger")
"""The four accounts a demand draws from: two counting gates, a token bucket, a custom limiter."""

OVERRUNS = frozenset({"overrun_coop", "overrun_deaf", "overrun_shield"})
"""Behaviours that run past the job's timeout on purpose."""

COMMIT_CANCELS = frozenset({"commit", "deadline_commit", "phase2_commit"})
"""Cancel plans that land while the job's COMMIT is in flight (transactional jobs only)."""

# (behaviour, weight) for tools
_TOOL_BEHAVIOURS: tuple[tuple[str, int], ...] = (
    ("return", 34),
    ("raise_value", 6),
    ("raise_correctable", 4),
    ("rerun", 9),  # re-run signals, then success within the budget
    ("rerun_exhaust", 3),  # re-run signals past the budget
    ("correction", 4),  # ResponseCorrectionRetry, sometimes past the backstop of 4
    ("overrun_coop", 6),  # watches its flags: stops at phase one
    ("overrun_deaf", 5),  # ignores them: stopped at phase two
    ("overrun_shield", 1),  # a bounded shielded section past the grace
    ("thread", 3),  # real blocking work in a worker thread (abandon_on_cancel)
    ("listen", 3),  # a long wait tied to the job's cancellation
    ("ignore_cancel", 3),  # never looks at its flags and returns
)

_ORCH_MODES: tuple[tuple[str, int], ...] = (
    ("await_all", 40),  # awaits every child, tolerating failures
    ("strict", 20),  # awaits in order; a child's failure becomes its own
    ("fire_forget", 12),  # returns at once, its children run on
    ("raise_early", 10),  # raises while its children run
    ("cancel_children", 10),  # cancels some of its own children, then awaits them all
    ("watch", 8),  # awaits, checking its own cancellation between children
)

_SIGNALS = ("RateLimitRetry", "TransientErrorRetry", "OverloadRetry")


@attrs.define(eq=False)
class JobPlan:
    """One job of a tree, fully decided before the batch runs."""

    index: int
    kind: str  # "tool" | "orch"
    depth: int
    behaviour: str = "return"  # tools; orchestrators use ``orch_mode``
    orch_mode: str = ""
    work: float = 0.0  # virtual seconds of work
    timeout: float = 60.0
    upstream_retries: int = 3
    signals: int = 0  # re-run signals raised before the job answers
    signal_kind: str = ""
    demand: tuple[str, ...] = ()
    http: bool = False
    tokens: int = 0
    db: str = ""  # "" | "tx" | "tx_fail"
    cancel: str = (
        ""  # "" | queued | timed | running | pacing | commit | deadline_commit | phase2_commit
    )
    cancel_after: float = 0.0
    workflow_cancel_after: float | None = None  # roots: cancel the whole workflow then
    deps: tuple[int, ...] = ()  # earlier siblings (positions in the parent's children)
    root_dep: int | None = None  # roots: an earlier root of the batch (another workflow)
    tolerant: bool = False
    cancel_children: tuple[int, ...] = ()
    submit_at: float = 0.0  # roots: virtual seconds after the batch starts
    children: list[JobPlan] = attrs.field(factory=list)

    def describe(self) -> str:
        """A short label for reports: kind, behaviour, demand, database and cancel plan."""
        if self.kind == "orch":
            text = f"orchestrator[{self.orch_mode}, {len(self.children)} children]"
        else:
            text = f"tool[{self.behaviour}"
            if self.signals:
                text += f" x{self.signals} {self.signal_kind or 'correction'}"
            text += f", timeout {self.timeout:g}s"
            if self.demand or self.http:
                text += ", " + "+".join((*self.demand, *(("http",) if self.http else ())))
            if self.db:
                text += f", {self.db}"
            text += "]"
        if self.cancel:
            text += f" cancel={self.cancel}"
        if self.deps or self.root_dep is not None:
            text += " (tolerant deps)" if self.tolerant else " (deps)"
        return text


def _pick(rng: random.Random, table: Sequence[tuple[str, int]]) -> str:
    names = [name for name, _ in table]
    weights = [weight for _, weight in table]
    return rng.choices(names, weights)[0]


def _tool(rng: random.Random, index: int, depth: int) -> JobPlan:
    plan = JobPlan(index=index, kind="tool", depth=depth)
    plan.behaviour = behaviour = _pick(rng, _TOOL_BEHAVIOURS)
    plan.work = rng.choice((0.0, rng.uniform(0.05, 0.5), rng.uniform(0.5, 3.0)))
    plan.timeout = rng.choice((1.0, 2.0, 4.0, 8.0, 30.0))
    plan.upstream_retries = rng.choice((0, 1, 2, 3, 3, 3))
    if behaviour in OVERRUNS:
        plan.timeout = rng.choice((0.5, 1.0, 2.0, 4.0))
        plan.work = 0.0
    elif behaviour != "listen":
        # leave room under the deadline (the budget is armed at the grant)
        plan.work = min(plan.work, plan.timeout * 0.6)
    if behaviour == "rerun":
        plan.signal_kind = rng.choice(_SIGNALS)
        plan.signals = rng.randint(1, max(1, plan.upstream_retries)) if plan.upstream_retries else 1
    elif behaviour == "rerun_exhaust":
        plan.signal_kind = rng.choice(_SIGNALS)
        plan.signals = plan.upstream_retries + 1
    elif behaviour == "correction":
        plan.signals = rng.choice((1, 2, 4, 5))  # 5 is past the dispatcher's backstop of 4
    # multi-account demands: mostly two or three of the four accounts
    how_many = rng.choices((0, 1, 2, 3), (25, 15, 42, 18))[0]
    plan.demand = tuple(sorted(rng.sample(ACCOUNTS, how_many)))
    if "bucket" in plan.demand:
        plan.tokens = rng.randint(200, 4000)
    plan.http = rng.random() < 0.3
    roll = rng.random()
    if roll < 0.14:
        plan.db = "tx"
    elif roll < 0.19:
        plan.db = "tx_fail"
    # cancels
    if plan.db and rng.random() < 0.22:
        plan.cancel = rng.choices(("commit", "deadline_commit", "phase2_commit"), (5, 3, 2))[0]
        if plan.cancel != "commit" and plan.behaviour not in OVERRUNS:
            # The commit hook jumps the clock to the deadline (and past the grace): a short
            # budget keeps that jump well inside the runtime's commit window (10 s), so the
            # race is the deadline against a commit that answers, not a commit that hangs.
            plan.timeout = rng.choice((0.5, 1.0, 2.0, 4.0))
            plan.work = min(plan.work, plan.timeout * 0.6)
        return plan
    roll = rng.random()
    if roll < 0.04:
        plan.cancel = "queued"
    elif roll < 0.12:
        plan.cancel = "timed"
        plan.cancel_after = rng.choice((0.0, rng.uniform(0.0, 1.0), rng.uniform(0.5, 6.0)))
    elif roll < 0.17:
        plan.cancel = "running"  # from a helper task, partway through the job's own work
        plan.cancel_after = plan.work * rng.uniform(0.2, 0.8)
    elif roll < 0.32 and plan.signals and plan.signal_kind:
        plan.cancel = "pacing"  # from a helper task, once a re-run signal was raised
        plan.cancel_after = rng.uniform(0.0, 4.0)
    return plan


def _orchestrator(rng: random.Random, index: int, depth: int) -> JobPlan:
    plan = JobPlan(index=index, kind="orch", depth=depth)
    plan.orch_mode = _pick(rng, _ORCH_MODES)
    plan.work = rng.uniform(0.0, 2.0)
    roll = rng.random()
    if roll < 0.03:
        plan.cancel = "queued"
    elif roll < 0.10:
        plan.cancel = "timed"
        plan.cancel_after = rng.uniform(0.0, 5.0)
    return plan


def _tree(rng: random.Random, budget: int, next_index: list[int], depth: int = 0) -> JobPlan:
    """A tree of at most ``budget`` jobs (at least one)."""
    index = next_index[0]
    next_index[0] += 1
    if budget <= 1 or depth >= 3 or rng.random() < (0.3 if depth == 0 else 0.75):
        return _tool(rng, index, depth)
    plan = _orchestrator(rng, index, depth)
    remaining = budget - 1
    for position in range(rng.randint(1, 6)):
        if remaining <= 0:
            break
        share = min(remaining, rng.choice((1, 1, 1, 3, 6)))
        child = _tree(rng, share, next_index, depth + 1)
        remaining -= _size(child)
        if position and rng.random() < 0.3:
            earlier = range(position)
            child.deps = tuple(sorted(rng.sample(earlier, min(len(earlier), rng.randint(1, 2)))))
            child.tolerant = rng.random() < 0.3
        plan.children.append(child)
    if plan.orch_mode == "cancel_children" and plan.children:
        count = rng.randint(1, len(plan.children))
        plan.cancel_children = tuple(sorted(rng.sample(range(len(plan.children)), count)))
    return plan


def _size(plan: JobPlan) -> int:
    return 1 + sum(_size(child) for child in plan.children)


def draw_batch(seed: int, batch: int, jobs: int) -> list[JobPlan]:
    """The roots of batch ``batch``: trees of about ``jobs`` jobs in all."""
    rng = random.Random(f"nucleo-soak:{seed}:{batch}")
    roots: list[JobPlan] = []
    total = 0
    next_index = [0]
    spread = max(1.0, jobs / 40)  # roots arrive over this many virtual seconds
    while total < jobs:
        root = _tree(rng, min(jobs - total, rng.choice((1, 4, 8, 16, 30))), next_index)
        root.submit_at = rng.uniform(0.0, spread)
        if roots and rng.random() < 0.08:
            root.root_dep = rng.randrange(len(roots))
            root.tolerant = rng.random() < 0.3
        if rng.random() < 0.02:
            root.workflow_cancel_after = rng.uniform(0.0, 4.0)
        roots.append(root)
        total += _size(root)
    # a dependency on an earlier root must be submitted before the root that names it
    order = sorted(range(len(roots)), key=lambda i: roots[i].submit_at)
    rank = {old: new for new, old in enumerate(order)}
    ordered = [roots[i] for i in order]
    for new, root in enumerate(ordered):
        if root.root_dep is not None:
            dep = rank[root.root_dep]
            root.root_dep = dep if dep < new else None
    return ordered


@attrs.frozen
class HostScenario:
    """One run of the second phase: a dispatcher cut off from outside while it works."""

    index: int
    kind: str  # a key of _HOST_KINDS
    cut_at: float  # virtual seconds after the block was entered
    jobs: int


_HOST_KINDS: tuple[tuple[str, int], ...] = (
    ("move_on_after", 5),
    ("move_on_after_draining", 2),
    ("fail_after", 2),
    ("cancel_nursery", 2),
    ("body_raises", 1),
    ("job_interrupt", 1),
    ("job_system_exit", 1),
    ("observer_interrupt", 1),
)


def draw_host_scenarios(seed: int, count: int, jobs: int) -> list[HostScenario]:
    """``count`` scenarios of the second phase: first a cut while the dispatcher starts and
    one while it idles, then one of each kind, then kinds drawn by weight."""
    rng = random.Random(f"nucleo-soak-host:{seed}")
    out: list[HostScenario] = []
    fixed = [("move_on_after", 0.0, 0), ("move_on_after", 1.0, 0)]
    fixed += [(kind, -1.0, jobs) for kind, _ in _HOST_KINDS]
    for index in range(count):
        if index < len(fixed):
            kind, cut, size = fixed[index]
        else:
            kind, cut, size = _pick(rng, _HOST_KINDS), -1.0, jobs
        if cut < 0:
            cut = rng.uniform(0.2, 12.0)
        out.append(HostScenario(index, kind, cut, size))
    return out
