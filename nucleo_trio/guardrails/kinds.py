"""The four kinds of guardrail, and what every guard records about its run.

A guardrail is a job of its own (type ``GUARDRAIL``, read-only, ten seconds unless it says
otherwise) that judges one target and either returns or refuses with
:class:`~nucleo_trio.errors.GuardrailError`. There are exactly four kinds, each a base class to
extend:

* :class:`ContentGuardrail` judges a job's input or its result, by direction;
* :class:`AuthGuardrail` judges the workflow's principal;
* :class:`AdmissionGuardrail` judges who calls the job, and from which class;
* :class:`ValidationGuardrail` judges a thinker's candidate final answer.

The dispatcher runs them (see :mod:`nucleo_trio.guardrails.enforcer`); a guard only says yes or
no. :meth:`Guardrail.execute` is final: it validates the target it was given and records
``PASS`` or ``FAIL`` under ``obs.output``.
"""

from __future__ import annotations

import abc
import enum
import json
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import attrs

from .._serialization import unstructure
from ..jobs.context import OBS_CALLER_CLASS
from ..jobs.job import AbstractJob
from ..jobs.requirements import JobRequirements
from ..jobs.state import JobType

if TYPE_CHECKING:
    from ..jobs.context import JobContext
    from ..jobs.identity import Identifiable
    from ..jobs.snapshot import JobSnapshot
    from .scope import ScopeGuard

__all__ = [
    "FAIL",
    "GUARDRAIL_TIMEOUT",
    "OBS_GATES_JOB_ID",
    "OBS_GATES_PHASE",
    "OBS_GUARDS_INPUT",
    "OBS_GUARDS_OUTPUT",
    "OBS_GUARDS_VALIDATION",
    "OBS_INPUT",
    "OBS_OUTPUT",
    "PASS",
    "AdmissionContext",
    "AdmissionGuardrail",
    "AuthGuardrail",
    "ContentGuardrail",
    "Direction",
    "GateRung",
    "Guardrail",
    "ValidationGuardrail",
    "to_json",
]

GUARDRAIL_TIMEOUT: float = 10.0  # GRD-04
"""A guard's deadline in seconds (10.0) unless its constructor is given another ``timeout``."""

OBS_INPUT = "obs.input"
"""A guard's metadata: its target as JSON (an admission guard: who calls what from where)."""
OBS_OUTPUT = "obs.output"
"""A guard's metadata: :data:`PASS`, or :data:`FAIL` when it refused or crashed."""
OBS_GATES_JOB_ID = "obs.gates_job_id"
"""A guard's metadata: the id of the job it gates (``None`` outside enforcement)."""
OBS_GATES_PHASE = "obs.gates_phase"
"""A guard's metadata: its rung (:class:`GateRung` value)."""
OBS_GUARDS_INPUT = "obs.guards_input"  # GRD-15
"""A gated job's metadata: how many input-side guards were applied to it (``0`` when none)."""
OBS_GUARDS_OUTPUT = "obs.guards_output"  # GRD-15
"""A gated job's metadata: how many output guards judged its result (``0`` when none)."""
OBS_GUARDS_VALIDATION = "obs.guards_validation"
"""A thinker's metadata: how many validation guards judged its last candidate answer."""

PASS = "PASS"
"""The value of a guard's :data:`OBS_OUTPUT` metadata when it passed."""
FAIL = "FAIL"
"""The value of a guard's :data:`OBS_OUTPUT` metadata when it refused or crashed."""


class GateRung(enum.Enum):  # GRD-02
    """Where on the dispatch path a guard stands; the value is recorded under
    ``obs.gates_phase``."""

    CONTENT_INPUT = "CONTENT_INPUT"
    """A content guard judging the job's input, before any resource is taken."""
    CONTENT_OUTPUT = "CONTENT_OUTPUT"
    """A content guard judging the job's result, after its resources are released."""
    AUTH = "AUTH"
    """An auth guard judging the workflow's principal, before any resource is taken."""
    ADMISSION = "ADMISSION"
    """An admission guard judging who calls the job and from which class."""
    VALIDATION = "VALIDATION"
    """A validation guard judging a thinker's candidate final answer."""


class Direction(enum.Enum):
    """Which side of a job a content guard judges."""

    INPUT = "INPUT"
    """The job's input, judged before any resource is taken."""
    OUTPUT = "OUTPUT"
    """The job's result, judged after its resources are released and before delivery."""


def to_json(value: Any) -> str:
    """``value`` as the JSON a guard records and measures: attrs classes as their fields,
    anything JSON cannot say as its ``str``."""
    try:
        plain = unstructure(value)
    except Exception:  # a value the converter cannot take apart is measured as it prints
        plain = value
    return json.dumps(plain, default=str, ensure_ascii=False)


@attrs.frozen
class AdmissionContext:
    """What an admission guard judges: who calls, from which class, which tool."""

    # GRD-08
    principal: str | None
    """The gated workflow's user id; ``None`` when the workflow names no user."""
    caller_class: str | None
    """The fully qualified class of the job that submitted the tool; ``None`` for a direct call
    from outside any job."""
    tool_class: type
    """The class of the gated job (the tool being called)."""

    def __str__(self) -> str:
        caller = self.caller_class or "a direct call"
        return f"{self.principal} via {caller} -> {self.tool_class.__name__}"


# Members the four kinds share that no guard may replace: the run is the dispatcher's contract,
# and the scope guard is the door's to seal.
_FINAL = ("execute", "set_scope_guard", "seal_scope_guard", "scope_guard")


class Guardrail(AbstractJob[None]):
    """A guard: a read-only job that judges one target and refuses with GuardrailError.

    Extend one of the four kinds, never this class (a subclass of ``Guardrail`` itself, or of
    two kinds at once, is a ``TypeError`` when the class is defined), and implement
    :meth:`validate`. :meth:`execute` is final: it validates the target the guard was given
    (:meth:`set_target`, or the dispatcher's enforcement) and returns ``None``.

    Under enforcement the guard knows the job it gates: :attr:`gated_snapshot` is that job's
    snapshot and :attr:`principal` its user; outside enforcement both are ``None``.
    A guard never authors a scope guard: :meth:`set_scope_guard` always raises, and the door
    seals the gated flow's guard onto it.

    ``timeout`` is the guard's deadline in seconds (:data:`GUARDRAIL_TIMEOUT` by default;
    ``None`` for none).
    """

    # GRD-01 (sealed to four kinds), GRD-03 (execute is final), GRD-06 (scope guard), GRD-07
    job_type: ClassVar[JobType] = JobType.GUARDRAIL
    """Always :attr:`JobType.GUARDRAIL <nucleo_trio.jobs.JobType.GUARDRAIL>`."""
    target_type: ClassVar[type | tuple[type, ...] | None] = object  # GRD-11
    """The class (or tuple of classes) of target this guard judges; ``object`` by default. The
    dispatcher applies the guard only to a target that is not ``None`` and is an instance of
    it. ``None`` means the guard judges its context, never a target (auth and admission)."""
    _kind: ClassVar[type[Guardrail] | None] = None

    def __init__(
        self,
        parent: Identifiable,
        *,
        timeout: float | None = GUARDRAIL_TIMEOUT,
        prefix: str | None = None,
    ) -> None:
        super().__init__(parent, prefix)
        self.set_timeout(timeout)
        self._target: Any = None
        self._gated: JobContext | None = None
        self._gated_snapshot: JobSnapshot | None = None
        self._sealed: ScopeGuard | None = None

    def __init_subclass__(cls, *, kind: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            cls._kind = cls
            return
        kinds = {c for c in cls.__mro__ if vars(c).get("_kind") is c}
        if not kinds:
            raise TypeError(
                f"{cls.__qualname__} extends Guardrail directly, but the guardrail hierarchy is "
                "sealed to four kinds: extend ContentGuardrail, AuthGuardrail, "
                "AdmissionGuardrail or ValidationGuardrail"
            )
        if len(kinds) > 1:
            names = ", ".join(sorted(k.__name__ for k in kinds))
            raise TypeError(f"{cls.__qualname__} extends several guardrail kinds ({names})")
        for name in _FINAL:
            if getattr(cls, name) is not getattr(Guardrail, name):
                raise TypeError(
                    f"{cls.__qualname__} replaces {name}, which is final on a guardrail "
                    "(implement validate(); list the guardrail kind before any other base)"
                )

    # -- what it is ---------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def rung(self) -> GateRung:
        """Where this guard stands on the dispatch path."""

    def gate_rung_label(self) -> str:
        """The rung's value (``"AUTH"``, ``"CONTENT_INPUT"``...), as recorded under
        ``obs.gates_phase``."""
        return self.rung.value

    def requirements(self) -> JobRequirements:
        """Read-only, and nothing admission must grant: no rate limiter, database, model or
        memory."""
        return JobRequirements(read_only=True)

    # -- the target and the gated job ---------------------------------------------------------
    @property
    def target(self) -> Any:
        """What the guard judges: given by :meth:`set_target` or by the enforcer; ``None``
        until then, and for auth and admission guards under enforcement."""
        return self._target

    def set_target(self, target: Any) -> None:
        """Give the guard what to judge when it is run outside enforcement."""
        self._target = target

    def _gate(self, gated: JobContext, target: Any) -> None:
        """The enforcer's binding: the job this guard gates and the target it judges."""
        self._gated = gated
        self._gated_snapshot = gated.snapshot()
        self._target = target

    @property
    def gated_snapshot(self) -> JobSnapshot | None:
        """The gated job as it stood when enforcement bound this guard; ``None`` outside it."""
        return self._gated_snapshot

    @property
    def principal(self) -> str | None:
        """The gated workflow's user id; ``None`` outside enforcement."""
        return None if self._gated_snapshot is None else self._gated_snapshot.user_id

    @property
    def gated_tool(self) -> str:
        """The gated job's class name, for messages; ``"the tool"`` outside enforcement."""
        return "the tool" if self._gated_snapshot is None else self._gated_snapshot.job_class

    # -- scope ----------------------------------------------------------------------------------
    @property
    def scope_guard(self) -> ScopeGuard | None:
        """The gated flow's guard the door sealed onto this guard; ``None`` until then."""
        return self._sealed

    def set_scope_guard(self, guard: ScopeGuard) -> NoReturn:
        """Always refused: a guard judges under the flow's binding and never authors one."""
        raise TypeError(
            f"{self.name}: a guardrail never authors a scope guard; the door seals the gated "
            "flow's guard onto it"
        )

    def seal_scope_guard(self, guard: ScopeGuard) -> None:
        """Install the guard the door composed; the dispatcher's call, once."""
        if self._sealed is not None:
            raise RuntimeError(f"{self.name}: the scope guard is already sealed")
        self._sealed = guard

    # -- the run ----------------------------------------------------------------------------------
    def describe_target(self) -> str:
        """What ``obs.input`` records: the target as JSON."""
        return to_json(self._target)

    async def pre_execute(self, context: JobContext) -> None:
        """Record the target (``obs.input``), the gated job's id (``obs.gates_job_id``) and
        the rung (``obs.gates_phase``) before the guard runs."""
        context.metadata[OBS_INPUT] = self.describe_target()
        gated = self._gated_snapshot
        context.metadata[OBS_GATES_JOB_ID] = None if gated is None else gated.job_id
        context.metadata[OBS_GATES_PHASE] = self.gate_rung_label()

    async def execute(self, context: JobContext) -> None:
        """Validate the target and record :data:`PASS` or :data:`FAIL` under ``obs.output``;
        returns ``None`` and re-raises whatever :meth:`validate` raised. Final: a subclass
        that replaces it is a ``TypeError``."""
        try:
            await self.validate(self._target)
        except Exception:
            context.metadata[OBS_OUTPUT] = FAIL
            raise
        context.metadata[OBS_OUTPUT] = PASS

    @abc.abstractmethod
    async def validate(self, target: Any) -> None:
        """Return to let ``target`` through; raise GuardrailError to refuse it. Anything else
        raised is not a refusal: the gated job fails closed with it."""


def _direction(value: Direction | str, owner: str) -> Direction:
    if isinstance(value, Direction):
        return value
    if isinstance(value, str) and value.upper() in Direction.__members__:
        return Direction[value.upper()]
    raise ValueError(
        f"{owner}: direction must be Direction.INPUT or Direction.OUTPUT, got {value!r}"
    )


class ContentGuardrail(Guardrail, kind=True):
    """Judges a job's input (``Direction.INPUT``, before any resource is taken) or its result
    (``Direction.OUTPUT``, after the resources are released and before delivery)."""

    def __init__(
        self,
        parent: Identifiable,
        direction: Direction | str = Direction.INPUT,
        *,
        timeout: float | None = GUARDRAIL_TIMEOUT,
        prefix: str | None = None,
    ) -> None:
        super().__init__(parent, timeout=timeout, prefix=prefix)
        self.direction = _direction(direction, type(self).__name__)
        """Which side the guard judges: ``Direction.INPUT`` (the default) or
        ``Direction.OUTPUT``; a string such as ``"output"`` is accepted, anything else is a
        ``ValueError``."""

    @property
    def rung(self) -> GateRung:
        if self.direction is Direction.INPUT:
            return GateRung.CONTENT_INPUT
        return GateRung.CONTENT_OUTPUT


class AuthGuardrail(Guardrail, kind=True):
    """Judges the workflow's principal on the input side: implement :meth:`authorize`."""

    target_type: ClassVar[type | tuple[type, ...] | None] = None
    """``None``: an auth guard judges the principal, never a target."""

    @property
    def rung(self) -> GateRung:
        return GateRung.AUTH

    def describe_target(self) -> str:
        return to_json(self.principal)

    async def validate(self, target: Any) -> None:
        await self.authorize(self.principal)

    @abc.abstractmethod
    async def authorize(self, principal: str | None) -> None:
        """Return to admit ``principal`` (``None`` outside enforcement); raise GuardrailError
        to refuse."""


class AdmissionGuardrail(Guardrail, kind=True):
    """Judges who calls the tool and from where: implement :meth:`check_admission`.

    It judges its context, never a target: :meth:`validate` hands :attr:`admission_context`
    to :meth:`check_admission`.
    """

    target_type: ClassVar[type | tuple[type, ...] | None] = None  # GRD-08
    """``None``: an admission guard judges its context, never a target."""

    @property
    def rung(self) -> GateRung:
        return GateRung.ADMISSION

    @property
    def admission_context(self) -> AdmissionContext | None:
        """The principal, caller class and tool class of the gated job; ``None`` outside
        enforcement."""
        gated = self._gated
        if gated is None:
            return None
        caller = gated.metadata.get(OBS_CALLER_CLASS)
        return AdmissionContext(
            principal=gated.user_id,
            caller_class=caller if isinstance(caller, str) else None,
            tool_class=type(gated.job),
        )

    def describe_target(self) -> str:
        context = self.admission_context
        return "no admission context" if context is None else str(context)

    async def validate(self, target: Any) -> None:
        await self.check_admission(self.admission_context)

    @abc.abstractmethod
    async def check_admission(self, context: AdmissionContext | None) -> None:
        """Return to admit the call; raise GuardrailError to refuse it."""


class ValidationGuardrail(Guardrail, kind=True):
    """Judges a candidate final answer while the thinker that produced it still holds its
    conversation; a refusal goes back to that thinker as a correction."""

    @property
    def rung(self) -> GateRung:
        return GateRung.VALIDATION
