"""The demo's workload: four kinds of tool, the plan that shapes them, and the orchestrator.

Every job is ordinary user code written against the public API: a :class:`~nucleo_trio.jobs.Tool`
that declares what it needs in ``requirements()`` and does cooperative work in ``execute``
(checking for cancellation between steps). The plan decides, from the seed alone, which kind
each job is, how long its work takes, and which few misbehave: a job whose work outlasts its
timeout, a job that raises, a job whose upstream pushes back once (it re-runs and succeeds), a
job whose upstream never stops pushing back (it exhausts its re-run budget), and a job its user
cancels.
"""

from __future__ import annotations

import abc
import enum
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import trio

from .. import errors
from ..admission import CountingGate
from ..jobs import (
    Identifiable,
    JobContext,
    JobHandle,
    JobRequirements,
    JobState,
    Orchestrator,
    Tool,
)
from .quota import SearchApiQuota

__all__ = [
    "CANCEL_AFTER",
    "KIND_CLASSES",
    "META_LABEL",
    "SHORT_TIMEOUT",
    "TOOL_TIMEOUT",
    "Accounts",
    "Behaviour",
    "DemoTool",
    "Fanout",
    "JobPlan",
    "Kind",
    "Signals",
    "plan_workload",
]

META_LABEL = "demo.label"
"""Metadata key under which each job carries its readable label, e.g. ``"search #088"``."""

TOOL_TIMEOUT = 60.0
"""Every well-behaved tool's timeout: far above its work, so only the planned ones time out."""

SHORT_TIMEOUT = 2.0
"""The timeout of the jobs planned to time out; their work lasts much longer."""

CANCEL_AFTER = 1.0
"""Seconds after submission at which the orchestrator cancels the jobs planned for it."""

_STEP = 0.05
"""Seconds of work between two cancellation checks."""


class Kind(enum.Enum):
    """What a job does, and so what it must hold while it runs."""

    FETCH = "fetch"
    QUERY = "query"
    SEARCH = "search"
    REPORT = "report"

    @property
    def needs(self) -> str:
        """The accounts its demand names, for the report."""
        return _NEEDS[self]


_NEEDS = {
    Kind.FETCH: "http",
    Kind.QUERY: "db",
    Kind.SEARCH: "search-api + http",
    Kind.REPORT: "db + http",
}

# Share of the jobs, and the range of seconds of work, per kind.
_MIX: Mapping[Kind, tuple[float, tuple[float, float]]] = {
    Kind.FETCH: (0.35, (0.05, 0.40)),
    Kind.QUERY: (0.30, (0.05, 0.30)),
    Kind.SEARCH: (0.20, (0.05, 0.20)),
    Kind.REPORT: (0.15, (0.10, 0.50)),
}


class Behaviour(enum.Enum):
    """How a planned job behaves; all but NORMAL are the few that show the runtime's paths."""

    NORMAL = "normal"
    TIMES_OUT = "times out"
    FAILS = "fails"
    RERUNS = "re-runs once"
    OVER_BUDGET = "exhausts its re-run budget"
    CANCELLED = "is cancelled"


@attrs.frozen
class JobPlan:
    """One job of the workload: its position, kind, seconds of work and behaviour."""

    index: int
    kind: Kind
    work: float
    behaviour: Behaviour = Behaviour.NORMAL

    @property
    def label(self) -> str:
        return f"{self.kind.value} #{self.index:03d}"


def plan_workload(jobs: int, seed: int) -> tuple[JobPlan, ...]:
    """The seeded plan of ``jobs`` jobs (at least 10): the same seed gives the same plan.

    Roughly 1.5 % time out, 2 % fail, 3 % re-run once, 1 % are cancelled, and one search (if
    there is a search) exhausts its re-run budget; each is at least one job.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 10:
        raise ValueError(f"plan_workload: jobs must be an int of at least 10, got {jobs!r}")
    rng = random.Random(seed)
    kinds = list(_MIX)
    weights = [share for share, _ in _MIX.values()]
    drawn = rng.choices(kinds, weights=weights, k=jobs)
    works = [round(rng.uniform(*_MIX[kind][1]), 3) for kind in drawn]

    behaviours = [Behaviour.NORMAL] * jobs
    searches = [i for i, kind in enumerate(drawn) if kind is Kind.SEARCH]
    over_budget = rng.choice(searches) if searches else rng.randrange(jobs)
    behaviours[over_budget] = Behaviour.OVER_BUDGET
    rest = [i for i in range(jobs) if i != over_budget]
    quotas = [
        (Behaviour.TIMES_OUT, max(1, round(jobs * 0.015))),
        (Behaviour.FAILS, max(1, round(jobs * 0.02))),
        (Behaviour.RERUNS, max(1, round(jobs * 0.03))),
        (Behaviour.CANCELLED, max(1, round(jobs * 0.01))),
    ]
    chosen = rng.sample(rest, sum(count for _, count in quotas))
    for behaviour, count in quotas:
        for index in chosen[:count]:
            behaviours[index] = behaviour
        chosen = chosen[count:]
    return tuple(
        JobPlan(i + 1, kind, work, behaviour)
        for i, (kind, work, behaviour) in enumerate(zip(drawn, works, behaviours, strict=True))
    )


@attrs.frozen
class Signals:
    """The upstream signals the misbehaving jobs raise.

    In virtual time they are the runtime's own classes, paced 5-30 s before the re-run. On the
    real clock the demo uses subclasses whose pacing window is ten times shorter, so the run
    ends in seconds; they are still a TransientErrorRetry and a RateLimitRetry.
    """

    transient: type[errors.TransientErrorRetry] = errors.TransientErrorRetry
    rate_limit: type[errors.RateLimitRetry] = errors.RateLimitRetry

    @classmethod
    def brief(cls) -> Signals:
        return cls(_BriefTransientErrorRetry, _BriefRateLimitRetry)


class _BriefTransientErrorRetry(errors.TransientErrorRetry):
    """A TransientErrorRetry paced 0.5-3 s instead of 5-30 s (the demo's real-clock runs)."""

    jitter_window = (0.5, 3.0)


class _BriefRateLimitRetry(errors.RateLimitRetry):
    """A RateLimitRetry paced 0.5-3 s instead of 5-30 s (the demo's real-clock runs)."""

    jitter_window = (0.5, 3.0)


@attrs.frozen
class Accounts:
    """The accounts the demo's tools declare (the ``http`` gate is the dispatcher's own)."""

    db: CountingGate
    search_api: SearchApiQuota


class DemoTool(Tool[str]):
    """One planned job: declares its kind's accounts and does its work in small steps.

    The work is ``plan.work`` seconds of sleeping in ``_STEP`` slices with a cancellation check
    before each, which is how a cooperative job notices a cancel or a timeout's first phase.
    """

    kind: ClassVar[Kind]

    def __init__(
        self, parent: Identifiable, plan: JobPlan, accounts: Accounts, signals: Signals
    ) -> None:
        super().__init__(parent, prefix=plan.kind.value)
        self.plan = plan
        self.accounts = accounts
        self.signals = signals
        self.timeout = SHORT_TIMEOUT if plan.behaviour is Behaviour.TIMES_OUT else TOOL_TIMEOUT
        if plan.behaviour is Behaviour.OVER_BUDGET:
            self.upstream_retries = 1

    async def execute(self, context: JobContext) -> str:
        plan = self.plan
        behaviour = plan.behaviour
        if behaviour is Behaviour.OVER_BUDGET:
            await _work(context, plan.work / 2)
            raise self.signals.rate_limit(f"{self.upstream} answered 429 Too Many Requests")
        if behaviour is Behaviour.RERUNS and context.attempt == 1:
            await _work(context, plan.work / 2)
            raise self.upstream_signal()
        if behaviour is Behaviour.TIMES_OUT:
            await _work(context, SHORT_TIMEOUT * 15)
        elif behaviour is Behaviour.CANCELLED:
            await _work(context, CANCEL_AFTER * 20)
        else:
            await _work(context, plan.work)
        if behaviour is Behaviour.FAILS:
            raise self.failure()
        return f"{plan.label} done"

    @property
    def display_name(self) -> str:
        """The plan's label (``"search #088"``): how the recorded trajectory names the job."""
        return self.plan.label

    @property
    @abc.abstractmethod
    def upstream(self) -> str:
        """What the job talks to, for its messages."""

    def upstream_signal(self) -> errors.UpstreamRetry:
        """The signal a RERUNS job raises on its first attempt."""
        return self.signals.transient(f"{self.upstream} answered 503 Service Unavailable")

    @abc.abstractmethod
    def failure(self) -> Exception:
        """What a FAILS job raises once its work is done."""


async def _work(context: JobContext, seconds: float) -> None:
    until = trio.current_time() + seconds
    while (left := until - trio.current_time()) > 0:
        context.check_cancellation()
        await trio.sleep(min(_STEP, left))
    context.check_cancellation()


class Fetch(DemoTool):
    """Downloads an article: one connection from the HTTP pool."""

    kind = Kind.FETCH

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_http()

    @property
    def upstream(self) -> str:
        return "news.example.org"

    def failure(self) -> Exception:
        return errors.ResourceNotFoundError(
            f"GET https://news.example.org/articles/{self.plan.index} answered 404 Not Found"
        )


class Query(DemoTool):
    """Reads rows: one permit on the ``db`` gate."""

    kind = Kind.QUERY

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.accounts.db)

    @property
    def upstream(self) -> str:
        return "the database"

    def upstream_signal(self) -> errors.UpstreamRetry:
        return self.signals.transient(
            "the database answered 40001: could not serialize access due to concurrent update"
        )

    def failure(self) -> Exception:
        return errors.InvalidInputError('column "publshed_at" does not exist')


class Search(DemoTool):
    """Calls the search API: one request of the ``search-api`` quota (which also needs http)."""

    kind = Kind.SEARCH

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.accounts.search_api)

    @property
    def upstream(self) -> str:
        return "search-api"

    def upstream_signal(self) -> errors.UpstreamRetry:
        return self.signals.rate_limit("search-api answered 429 Too Many Requests")

    def failure(self) -> Exception:
        return errors.InvalidInputError("search-api refused the query: the query string is empty")


class Report(DemoTool):
    """Renders a report from the database to a web hook: a ``db`` permit and an http connection
    at once, granted together or not at all."""

    kind = Kind.REPORT

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.accounts.db).require_http()

    @property
    def upstream(self) -> str:
        return "hooks.example.org"

    def failure(self) -> Exception:
        return ValueError("template 'quarterly' has no section 'summary'")


KIND_CLASSES: Mapping[Kind, type[DemoTool]] = {
    Kind.FETCH: Fetch,
    Kind.QUERY: Query,
    Kind.SEARCH: Search,
    Kind.REPORT: Report,
}


class Fanout(Orchestrator[Mapping[JobState, int]]):
    """The root: submits every planned job, cancels the planned few, and waits for them all.

    An orchestrator holds nothing admission manages, so it may wait on its children freely. It
    answers how many of its children ended in each state.
    """

    def __init__(
        self,
        parent: Identifiable,
        plans: Sequence[JobPlan],
        accounts: Accounts,
        signals: Signals,
    ) -> None:
        super().__init__(parent, prefix="fanout")
        self.plans = tuple(plans)
        self.accounts = accounts
        self.signals = signals

    async def execute(self, context: JobContext) -> Mapping[JobState, int]:
        handles = [
            self.submit(
                KIND_CLASSES[plan.kind](self, plan, self.accounts, self.signals),
                metadata={META_LABEL: plan.label},
            )
            for plan in self.plans
        ]
        total = len(handles)
        context.publish_user_progress("fan-out", f"submitted {total} jobs", 0)
        doomed = [
            handle
            for plan, handle in zip(self.plans, handles, strict=True)
            if plan.behaviour is Behaviour.CANCELLED
        ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_later, doomed)
            every = max(1, total // 10)
            for collected, handle in enumerate(handles, start=1):
                try:
                    await handle.result()
                except Exception:  # noqa: BLE001 - a child's failure is its outcome, tallied below
                    pass
                if collected % every == 0 or collected == total:
                    percent = collected * 100 // total
                    context.publish_user_progress(
                        "fan-out", f"{collected}/{total} settled", percent
                    )
        return Counter(handle.state for handle in handles)


async def _cancel_later(handles: Sequence[JobHandle[Any]]) -> None:
    await trio.sleep(CANCEL_AFTER)
    for handle in handles:
        handle.cancel("the user closed the tab")
