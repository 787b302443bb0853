"""Jobs: the unit of work the dispatcher runs, and its kinds (tools, orchestrators, doers)."""

from __future__ import annotations

import abc
import math
import numbers
import operator
import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .._scope import ScopeGuard
from .guarded import GuardedExecution
from .identity import Identifiable, mint_id
from .requirements import JobRequirements
from .snapshot import forget_class_facts
from .state import JobType

if TYPE_CHECKING:
    from .context import JobContext
    from .handle import JobHandle

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_UPSTREAM_RETRIES",
    "META_ITERATION",
    "PRIORITY_RANGE",
    "AbstractJob",
    "Doer",
    "Orchestrator",
    "ScopeAuthority",
    "Tool",
    "check_job_settings",
    "display_name",
    "requirements_of",
    "tool_description",
]

R = TypeVar("R")
T = TypeVar("T")
J = TypeVar("J", bound=type)

DEFAULT_TIMEOUT: float = 30 * 60.0  # ID-07
"""The deadline of each attempt of a job that declares no other, in seconds: thirty minutes."""

DEFAULT_UPSTREAM_RETRIES: int = 3
"""How many times a job is re-run on an upstream signal (a rate limit, a transient error)
unless it or its caller sets another ``upstream_retries``: three."""

META_ITERATION: str = "iteration"  # ORD-01
"""Metadata key under which a :class:`Doer` stamps each child with the step it was submitted
in: 1 for the first step, children submitted together share one."""

PRIORITY_RANGE: tuple[int, int] = (-(2**63), 2**63 - 1)
"""The priorities a job may have: a signed 64-bit int, what the recorders, exporters and SQLite
that events reach can hold."""

_INF = math.inf
_PRIORITY_MIN, _PRIORITY_MAX = PRIORITY_RANGE


def _who(job: object, setting: str) -> tuple[str, str]:
    # The job may not have its id yet: a subclass can set a knob before calling super().__init__.
    job_id = getattr(job, "_job_id", None)
    cls = job if isinstance(job, type) else type(job)
    where = f" (job {job_id})" if job_id is not None else ""
    return f"{cls.__name__}.{setting}", where


_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60
_repr.maxlong = 40


def _shown(value: object) -> str:
    """A value for an error message, cut short if it is huge."""
    return _repr.repr(value)


def _timeout_of(job: object, value: object) -> float | None:
    """``value`` as the timeout of ``job`` (an instance or a class), or TypeError/ValueError
    naming the job and the value.

    The slow path of the ``timeout`` setter: a float already in (0, inf) never gets here.
    """
    if value is None:
        return None
    name, where = _who(job, "timeout")
    if not getattr(job, "_has_deadline", True):
        raise TypeError(
            f"{name} must be None: an orchestrator has no deadline, the jobs it submits carry "
            f"their own; got {_shown(value)}{where}"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be positive and finite seconds or None (an int or a float), "
            f"got {type(value).__name__} {_shown(value)}{where}"
        )
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = _INF
    if not 0.0 < seconds < _INF:
        raise ValueError(
            f"{name} must be positive and finite seconds or None, got {_shown(value)}{where}"
        )
    return seconds


def _int_of(value: Any) -> int | None:
    """An int from an int-like (an IntEnum, a numpy integer); ``None`` for a bool, a float or
    anything else."""
    if isinstance(value, bool | float):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _priority_of(job: object, value: object) -> int:
    """``value`` as a job's priority: an int (never a bool) within :data:`PRIORITY_RANGE`."""
    number = _int_of(value)
    if number is None or not _PRIORITY_MIN <= number <= _PRIORITY_MAX:
        name, where = _who(job, "priority")
        if number is None:
            raise TypeError(
                f"{name} must be an int (higher runs first), "
                f"got {type(value).__name__} {_shown(value)}{where}"
            )
        raise ValueError(f"{name} must be between -2**63 and 2**63 - 1, got {_shown(value)}{where}")
    return number


def _retries_of(job: object, value: object) -> int:
    """``value`` as a job's transparent re-run budget: an int >= 0 (never a bool)."""
    number = _int_of(value)
    if number is None or number < 0:
        name, where = _who(job, "upstream_retries")
        kind = TypeError if number is None else ValueError
        raise kind(f"{name} must be an int >= 0, got {type(value).__name__} {_shown(value)}{where}")
    return number


def _tolerance_of(job: object, value: object) -> bool:
    if type(value) is not bool:
        name, where = _who(job, "tolerates_dependency_failures")
        raise TypeError(
            f"{name} must be True or False, got {type(value).__name__} {_shown(value)}{where}"
        )
    return value


def check_job_settings(job: AbstractJob[Any]) -> float | None:
    """The door's check of a job's knobs as they read now; raises TypeError or ValueError
    naming the job, the setting and the value. Answers the timeout it checked, so the door
    reads it once.

    Assignment and class definition already refuse a bad value; this catches what bypassed
    both: a property override, a class attribute replaced after the class was made, a value
    written past the setter. Nothing in it awaits or registers anything, so the door can call it
    before the job is known to the dispatcher.
    """
    timeout = job.timeout
    has_deadline = job._has_deadline
    if timeout is not None and not (
        has_deadline and type(timeout) is float and 0.0 < timeout < _INF
    ):
        _timeout_of(job, timeout)
    priority = job.priority
    if type(priority) is not int or not _PRIORITY_MIN <= priority <= _PRIORITY_MAX:
        _priority_of(job, priority)
    retries = job.upstream_retries
    if type(retries) is not int or retries < 0:
        _retries_of(job, retries)
    tolerates: object = job.tolerates_dependency_failures
    if type(tolerates) is not bool:
        _tolerance_of(job, tolerates)
    return timeout


_ABSENT = object()


def _inherited(cls: type, name: str) -> object:
    """What ``cls`` would inherit as ``name`` without its own body's value."""
    for base in cls.__mro__[1:]:
        if name in vars(base):
            return vars(base)[name]
    return _ABSENT


_CHECKED_SETTINGS: dict[str, tuple[str, Callable[[object, Any], object]]] = {
    "timeout": ("_nucleo_timeout", _timeout_of),
    "priority": ("_nucleo_priority", _priority_of),
    "upstream_retries": ("_nucleo_retries", _retries_of),
    "tolerates_dependency_failures": ("_nucleo_tolerates", _tolerance_of),
}


def display_name(name: str, action: str = "") -> Callable[[J], J]:
    """Class decorator naming a job for people: its snapshots carry ``name`` and ``action``.

    A job's own ``display_name`` property, when it answers one, still wins over ``name``.
    """

    def mark(cls: J) -> J:
        setattr(cls, "__nucleo_display_name__", name)  # noqa: B010 - a dunder mypy cannot see
        setattr(cls, "__nucleo_action__", action)  # noqa: B010
        forget_class_facts()
        return cls

    return mark


def tool_description(text: str) -> Callable[[J], J]:
    """Class decorator describing what a tool does; snapshots carry it as ``description``."""

    def mark(cls: J) -> J:
        setattr(cls, "__nucleo_description__", text)  # noqa: B010
        forget_class_facts()
        return cls

    return mark


class AbstractJob(GuardedExecution, abc.ABC, Generic[R]):
    """A unit of work with an identity in a workflow tree.

    A job is built under a parent :class:`Identifiable`: a :func:`workflow` root or another job.
    It mints the id ``<prefix>-<tail>`` (the class name when no prefix is given) and inherits
    its parent's workflow and user. Override :meth:`execute`; override
    :meth:`requirements` to declare what admission must grant before it runs.

    Knobs a subclass or its caller may set: ``priority`` (an int; higher runs first in the
    priority lane), ``timeout`` in seconds (positive and finite, or ``None`` for no deadline; a
    job that declares resources must have one), ``upstream_retries`` (the transparent re-run
    budget, an int >= 0) and ``tolerates_dependency_failures`` (a bool). Each is checked when it
    is assigned, so a NaN, an infinity, a negative, a bool or a string is refused on the line
    that wrote it, naming the job and the value. A plain value in a subclass's body
    (``class Slow(Tool[str]): timeout = 600.0``) declares that class's default and is checked
    when the class is made; the door checks every knob once more at submit
    (:func:`check_job_settings`), for values that reached the job some other way.
    """

    job_type: ClassVar[JobType] = JobType.JOB
    """The kind of job, as snapshots, the health report and the metrics group it; each base
    class sets its own (``TOOL``, ``DOER``, ...), ``JOB`` here."""
    _has_deadline: ClassVar[bool] = True
    """False for orchestrators, whose timeout is always ``None``."""

    # The knobs' defaults live on the class, so building a job writes none of them.
    _nucleo_timeout: float | None = DEFAULT_TIMEOUT
    _nucleo_priority: int = 0
    _nucleo_retries: int = DEFAULT_UPSTREAM_RETRIES
    _nucleo_tolerates: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A plain value in the class body would hide the checked property (and let instances
        # write past it): check it now and make it the class's default instead.
        namespace = vars(cls)
        for setting, (slot, check) in _CHECKED_SETTINGS.items():
            value = namespace.get(setting, _ABSENT)
            if value is _ABSENT or hasattr(value, "__get__"):
                continue  # absent, or a property of the subclass's own: the door checks that
            checked = check(cls, value)
            if _inherited(cls, setting) in _KNOB_PROPERTIES:
                delattr(cls, setting)
                setattr(cls, slot, checked)

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
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(
                f"{type(self).__name__}'s id prefix must be a str or None, got {prefix!r}"
            )
        self._job_id = mint_id(prefix or type(self).__name__)
        self._context: JobContext | None = None

    # -- identity -----------------------------------------------------------------------------
    @property
    def job_id(self) -> str:
        """The job's id, minted when it is built: ``<prefix>-<12 hex digits>``."""
        return self._job_id

    @property
    def id(self) -> str:
        """The same as :attr:`job_id`."""
        return self._job_id

    @property
    def parent_job_id(self) -> str | None:
        """The id of the parent the job was built under: a workflow root or another job."""
        return self._parent_job_id

    @property
    def workflow_id(self) -> str:
        """The id of the workflow the job belongs to, inherited from its parent."""
        return self._workflow_id

    @property
    def user_id(self) -> str:
        """The user the job works for, inherited from its parent."""
        return self._user_id

    @property
    def name(self) -> str:
        """The job in messages: its id, which already starts with the class name unless a
        prefix was given (``Lookup-7df1...``); with a prefix of its own, the class name leads
        (``Lookup-fetch-7df1...``). Never the class name twice."""
        cls = type(self).__name__
        if self._job_id.startswith(f"{cls}-"):
            return self._job_id
        return f"{cls}-{self._job_id}"

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

    # -- knobs --------------------------------------------------------------------------------
    @property
    def timeout(self) -> float | None:
        """The deadline of each attempt, in seconds, counted from when admission grants it;
        ``None`` for none. Thirty minutes unless the class or the caller sets another; a
        value that is not positive and finite raises :class:`TypeError` or :class:`ValueError`
        on assignment."""
        return self._nucleo_timeout

    @timeout.setter
    def timeout(self, seconds: float | None) -> None:
        if type(seconds) is float and 0.0 < seconds < _INF:  # the common case: one comparison
            self._nucleo_timeout = seconds
        else:
            self._nucleo_timeout = _timeout_of(self, seconds)

    def set_timeout(self, seconds: float | None) -> None:
        """Declare the job's deadline in seconds; ``None`` declares none."""
        self.timeout = seconds

    @property
    def priority(self) -> int:
        """An int; higher runs first in the priority lane (jobs with a timeout of five seconds
        or less), 0 by default. A bool, a float or a value outside a signed 64-bit int raises
        on assignment."""
        return self._nucleo_priority

    @priority.setter
    def priority(self, value: int) -> None:
        if type(value) is int and _PRIORITY_MIN <= value <= _PRIORITY_MAX:
            self._nucleo_priority = value
        else:
            self._nucleo_priority = _priority_of(self, value)

    @property
    def upstream_retries(self) -> int:
        """How many times an upstream signal (a rate limit, a transient error) re-runs the job
        before it fails: an int >= 0, :data:`DEFAULT_UPSTREAM_RETRIES` by default."""
        return self._nucleo_retries

    @upstream_retries.setter
    def upstream_retries(self, value: int) -> None:
        if type(value) is int and value >= 0:
            self._nucleo_retries = value
        else:
            self._nucleo_retries = _retries_of(self, value)

    @property
    def tolerates_dependency_failures(self) -> bool:
        """Whether the job still runs when a dependency failed, reading ``None`` as that
        dependency's result; ``False`` by default, when a failed dependency fails the job."""
        return self._nucleo_tolerates

    @tolerates_dependency_failures.setter
    def tolerates_dependency_failures(self, value: bool) -> None:
        self._nucleo_tolerates = _tolerance_of(self, value)

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


# Every job's identity and knobs are read several times on its way through the runtime (the
# door's checks, the snapshots, each attempt), and on CPython 3.11 a property whose getter is a
# Python function runs a frame of its own on each read. Each of these getters is a C attrgetter
# of the field instead (about 200 instructions less a read); the properties, their setters and
# their docstrings stay the ones the class body declares.
for _name, _field in (
    ("job_id", "_job_id"),
    ("id", "_job_id"),
    ("parent_job_id", "_parent_job_id"),
    ("workflow_id", "_workflow_id"),
    ("user_id", "_user_id"),
    ("timeout", "_nucleo_timeout"),
    ("priority", "_nucleo_priority"),
    ("upstream_retries", "_nucleo_retries"),
    ("tolerates_dependency_failures", "_nucleo_tolerates"),
):
    _declared = vars(AbstractJob)[_name]
    setattr(
        AbstractJob,
        _name,
        property(operator.attrgetter(_field), _declared.fset, None, _declared.__doc__),
    )
del _name, _field, _declared


class ScopeAuthority:
    """Marks a job that may submit other jobs from inside its execution: an orchestrator.

    Its effective :class:`~nucleo_trio.guardrails.ScopeGuard` is composed at its own dispatch
    (its caller's guard, merged with its own scope and with any guard assigned here before
    dispatch) and sealed. From then on :attr:`scope_guard` answers the captured guard and
    :meth:`set_scope_guard` refuses, so nothing the flow produces can shed or replace it.
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
        if self._sealed_scope_guard is not None:
            raise RuntimeError(
                f"{self!r}: the scope guard was sealed at dispatch ({self._sealed_scope_guard}); "
                "a sealed guard can be neither shed nor replaced"
            )
        if not isinstance(guard, ScopeGuard):
            raise TypeError(f"set_scope_guard takes a ScopeGuard, got {type(guard).__name__}")
        self._assigned_scope_guard = guard

    def seal_scope_guard(self, guard: ScopeGuard) -> None:
        """Install the guard the door composed; the dispatcher's call, once (a second raises
        :class:`RuntimeError`)."""
        if self._sealed_scope_guard is not None:  # GRD-28, GRD-29
            raise RuntimeError(f"{self!r}: the scope guard is already sealed")
        self._sealed_scope_guard = guard


class Tool(AbstractJob[R]):
    """A leaf job that does one thing, usually with resources; thirty minutes by default."""

    job_type: ClassVar[JobType] = JobType.TOOL
    """``JobType.TOOL``."""


class Orchestrator(AbstractJob[R], ScopeAuthority):
    """A job that fans work out to other jobs and waits on them.

    It holds nothing admission manages, so it has no requirements and no deadline: it waits on
    its children freely (``await handle.result()`` is allowed) and never meets the memory gate.
    Its type is ``DOER`` (a thinker's is ``THINKER``). A subclass that overrides
    :meth:`requirements` is refused with :class:`TypeError` when the class is made.
    """

    # TOOL-03: no requirements, no deadline.
    job_type: ClassVar[JobType] = JobType.DOER
    """``JobType.DOER``."""
    _has_deadline: ClassVar[bool] = False
    _nucleo_timeout: float | None = None

    @property
    def timeout(self) -> None:
        """Always ``None``: an orchestrator has no deadline; the jobs it submits carry their
        own. Assigning anything but ``None`` raises :class:`TypeError`."""
        return None

    @timeout.setter
    def timeout(self, seconds: float | None) -> None:
        if seconds is not None:
            raise TypeError(
                f"{type(self).__name__} is an orchestrator and has no timeout (got {seconds!r}); "
                "give the jobs it submits their own"
            )

    def set_timeout(self, seconds: float | None) -> None:
        """Refused with :class:`TypeError`: an orchestrator has no timeout to set."""
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
    parallel share one ordinal and sequential ones count up. The ordinal lands in the child's
    metadata under :data:`META_ITERATION`.
    """

    job_type: ClassVar[JobType] = JobType.DOER
    """``JobType.DOER``, as for any orchestrator."""

    def __init__(self, parent: Identifiable, prefix: str | None = None) -> None:
        super().__init__(parent, prefix)
        self._step = 0

    @property
    def current_step(self) -> int:
        """The ordinal of the step open now: 0 before the first, 1 once the first opened."""
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


_KNOB_PROPERTIES: frozenset[object] = frozenset(
    [
        *(vars(AbstractJob)[setting] for setting in _CHECKED_SETTINGS),
        vars(Orchestrator)["timeout"],
    ]
)
"""The checked properties a class-body value may stand in for as the class's default."""


_DEFAULT_REQUIREMENTS = AbstractJob.requirements
NONE_REQUIRED = JobRequirements()
"""What every job that keeps the default :meth:`AbstractJob.requirements` declares: nothing.
Shared by all of them, so the runtime only ever reads it, and an event is given a copy."""


def requirements_of(job: AbstractJob[Any]) -> JobRequirements:
    """``job.requirements()``: the door's capture and each attempt's (SUB-10).

    A job that keeps the default (its class and the instance both) would answer fresh empty
    requirements and do nothing else, so its capture is one shared empty instance instead;
    the calls a job could observe are the same."""
    # Asked of the bound method, not of vars(job): reading an instance's __dict__ makes CPython
    # build one for it, and every later attribute read of the job is the slower for it.
    asked = job.requirements
    if getattr(asked, "__func__", None) is _DEFAULT_REQUIREMENTS:
        return NONE_REQUIRED
    return asked()
