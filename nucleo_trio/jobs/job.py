"""Jobs: the unit of work the dispatcher runs, and its kinds (tools, orchestrators, doers)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .guarded import GuardedExecution
from .identity import Identifiable, mint_id
from .requirements import JobRequirements
from .state import JobType

if TYPE_CHECKING:
    from ..guardrails.scope import ScopeGuard
    from .context import JobContext
    from .handle import JobHandle

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_UPSTREAM_RETRIES",
    "META_ITERATION",
    "AbstractJob",
    "Doer",
    "Orchestrator",
    "ScopeAuthority",
    "Tool",
    "display_name",
    "tool_description",
]

R = TypeVar("R")
T = TypeVar("T")
J = TypeVar("J", bound=type)

DEFAULT_TIMEOUT: float = 30 * 60.0
"""A job's deadline unless it declares another: thirty minutes (ID-07)."""

DEFAULT_UPSTREAM_RETRIES: int = 3
"""Transparent re-runs a job gets on upstream signals unless it or its caller sets another."""

META_ITERATION: str = "iteration"
"""Metadata key of a child's ordinal in its parent's execution order (ORD-01)."""


def display_name(name: str, action: str = "") -> Callable[[J], J]:
    """Class decorator naming a job for people: its snapshot's ``name`` and ``action`` (ID-08)."""

    def mark(cls: J) -> J:
        setattr(cls, "__nucleo_display_name__", name)  # noqa: B010 - a dunder mypy cannot see
        setattr(cls, "__nucleo_action__", action)  # noqa: B010
        return cls

    return mark


def tool_description(text: str) -> Callable[[J], J]:
    """Class decorator describing what a tool does; snapshots carry it as ``description``."""

    def mark(cls: J) -> J:
        setattr(cls, "__nucleo_description__", text)  # noqa: B010
        return cls

    return mark


class AbstractJob(GuardedExecution, abc.ABC, Generic[R]):
    """A unit of work with an identity in a workflow tree.

    A job is built under a parent :class:`Identifiable`: a :func:`workflow` root or another job.
    It mints the id ``<prefix>-<tail>`` (the class name when no prefix is given) and inherits
    its parent's workflow and user (ID-03..05). Override :meth:`execute`; override
    :meth:`requirements` to declare what admission must grant before it runs.

    Knobs a subclass or its caller may set: ``priority`` (higher runs first in the priority
    lane), ``timeout`` in seconds (``None`` for no deadline; a job that declares resources must
    have one), ``upstream_retries`` (the transparent re-run budget) and
    ``tolerates_dependency_failures``.
    """

    job_type: ClassVar[JobType] = JobType.JOB

    def __init__(self, parent: Identifiable, prefix: str | None = None) -> None:
        if parent is None:
            raise ValueError(f"{type(self).__name__} needs a parent identity, got None")
        try:
            self._parent_job_id: str | None = parent.job_id
            self._workflow_id = parent.workflow_id
            self._user_id = parent.user_id
        except AttributeError:
            raise TypeError(
                f"{type(self).__name__}'s parent must be a workflow root or a job, "
                f"got {type(parent).__name__}"
            ) from None
        self._job_id = mint_id(prefix or type(self).__name__)
        self.priority: int = 0
        if not isinstance(self, Orchestrator):
            self.timeout: float | None = DEFAULT_TIMEOUT
        self.upstream_retries: int = DEFAULT_UPSTREAM_RETRIES
        self.tolerates_dependency_failures: bool = False
        self._context: JobContext | None = None

    # -- identity -----------------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        return self._job_id

    @property
    def id(self) -> str:
        return self._job_id

    @property
    def parent_job_id(self) -> str | None:
        return self._parent_job_id

    @property
    def workflow_id(self) -> str:
        return self._workflow_id

    @property
    def user_id(self) -> str:
        return self._user_id

    @property
    def name(self) -> str:
        return f"{type(self).__name__}-{self._job_id}"

    @property
    def display_name(self) -> str | None:
        """A name for people; ``None`` lets the ``@display_name`` decorator or the class name speak."""
        return None

    @property
    def context(self) -> JobContext:
        """The job's context, once it has been submitted."""
        if self._context is None:
            raise RuntimeError(f"{self.name} has not been submitted to a dispatcher yet")
        return self._context

    def set_timeout(self, seconds: float | None) -> None:
        """Declare the job's deadline in seconds; ``None`` declares none."""
        if seconds is not None and not seconds > 0:
            raise ValueError(
                f"{self.name}: a timeout must be positive seconds or None, got {seconds!r}"
            )
        self.timeout = seconds

    # -- the contract -------------------------------------------------------------------------
    def requirements(self) -> JobRequirements:
        """What admission must grant before the job runs. Called once at submit and once per
        attempt, by the dispatcher only."""
        return JobRequirements()

    async def pre_execute(self, context: JobContext) -> None:  # noqa: B027 - an optional hook
        """Runs once per attempt with the resources held, before the job turns RUNNING."""

    @abc.abstractmethod
    async def execute(self, context: JobContext) -> R:
        """Do the work and return the result."""

    async def post_execute(self, context: JobContext) -> None:  # noqa: B027 - an optional hook
        """Runs after the resources are released and the output guards passed."""

    def __repr__(self) -> str:
        return f"<{self.name}>"


class ScopeAuthority:
    """Marks a job that may submit other jobs from inside its execution: an orchestrator.

    Its effective :class:`~nucleo_trio.guardrails.ScopeGuard` is composed at its own dispatch
    (its caller's guard, merged with its own scope and with any guard assigned here before
    dispatch) and sealed. From then on :attr:`scope_guard` answers the captured guard and
    :meth:`set_scope_guard` refuses, so nothing the flow produces can shed or replace it
    (GRD-28, GRD-29).
    """

    _assigned_scope_guard: ScopeGuard | None = None
    _sealed_scope_guard: ScopeGuard | None = None

    @property
    def scope_guard(self) -> ScopeGuard | None:
        """The sealed guard once dispatched; before that, the one assigned, if any."""
        if self._sealed_scope_guard is not None:
            return self._sealed_scope_guard
        return self._assigned_scope_guard

    def set_scope_guard(self, guard: ScopeGuard) -> None:
        """Bind this orchestrator to ``guard`` before it is dispatched; the door merges it into
        the guard it seals. After the seal this raises :class:`RuntimeError`."""
        from ..guardrails.scope import ScopeGuard

        if self._sealed_scope_guard is not None:
            raise RuntimeError(
                f"{self!r}: the scope guard was sealed at dispatch ({self._sealed_scope_guard}); "
                "a sealed guard can be neither shed nor replaced"
            )
        if not isinstance(guard, ScopeGuard):
            raise TypeError(f"set_scope_guard takes a ScopeGuard, got {type(guard).__name__}")
        self._assigned_scope_guard = guard

    def seal_scope_guard(self, guard: ScopeGuard) -> None:
        """Install the guard the door composed; the dispatcher's call, once."""
        if self._sealed_scope_guard is not None:
            raise RuntimeError(f"{self!r}: the scope guard is already sealed")
        self._sealed_scope_guard = guard


class Tool(AbstractJob[R]):
    """A leaf job that does one thing, usually with resources; thirty minutes by default."""

    job_type: ClassVar[JobType] = JobType.TOOL


class Orchestrator(AbstractJob[R], ScopeAuthority):
    """A job that fans work out to other jobs and waits on them.

    It holds nothing admission manages, so it has no requirements and no deadline: it waits on
    its children freely (``await handle.result()`` is allowed) and never meets the memory gate.
    Its type is ``DOER`` (a thinker's is ``THINKER``, TOOL-03).
    """

    job_type: ClassVar[JobType] = JobType.DOER

    @property
    def timeout(self) -> None:
        """Always ``None``: an orchestrator has no deadline; the jobs it submits carry their own
        (TOOL-03)."""
        return None

    @timeout.setter
    def timeout(self, seconds: float | None) -> None:
        if seconds is not None:
            raise TypeError(
                f"{type(self).__name__} is an orchestrator and has no timeout (got {seconds!r}); "
                "give the jobs it submits their own"
            )

    def set_timeout(self, seconds: float | None) -> None:
        """Refused: an orchestrator has no timeout to set (TOOL-03)."""
        raise TypeError(
            f"{self.name} is an orchestrator and has no timeout; give the jobs it submits their own"
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "requirements" in vars(cls):
            raise TypeError(
                f"{cls.__qualname__} overrides requirements(), but an orchestrator holds nothing: "
                "declare resources on the tools it submits instead"
            )

    def submit(
        self,
        job: AbstractJob[T],
        dependencies: Iterable[JobHandle[Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[T]:
        """Submit a child from inside this orchestrator's execution."""
        return self.context.dispatcher.submit(job, dependencies, metadata)


class Doer(Orchestrator[R]):
    """An orchestrator that runs its children in steps and stamps each child's ordinal.

    ``submit_in_step`` opens a new step for one child; ``next_step`` opens a step and
    ``submit_in_current_step`` puts every job of one fan-out into it, so children that run in
    parallel share one ordinal and sequential ones count up (ORD-01). The ordinal lands in the
    child's metadata under :data:`META_ITERATION`.
    """

    job_type: ClassVar[JobType] = JobType.DOER

    def __init__(self, parent: Identifiable, prefix: str | None = None) -> None:
        super().__init__(parent, prefix)
        self._step = 0

    @property
    def current_step(self) -> int:
        return self._step

    def next_step(self) -> int:
        """Open a new step; the jobs submitted in it share its ordinal."""
        self._step += 1
        return self._step

    def submit_in_step(
        self,
        job: AbstractJob[T],
        dependencies: Iterable[JobHandle[Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[T]:
        """Submit ``job`` as the only job of a new step."""
        self.next_step()
        return self.submit_in_current_step(job, dependencies, metadata)

    def submit_in_current_step(
        self,
        job: AbstractJob[T],
        dependencies: Iterable[JobHandle[Any]] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> JobHandle[T]:
        """Submit ``job`` into the current step (a fan-out shares one ordinal)."""
        if self._step == 0:
            self._step = 1
        stamped = dict(metadata or {})
        stamped[META_ITERATION] = self._step
        return self.submit(job, dependencies, stamped)
