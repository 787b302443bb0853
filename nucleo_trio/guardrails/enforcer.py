"""The dispatcher's guardrail and scope seats.

:class:`StandardGuardrailEnforcer` is the dispatcher's default
:class:`~nucleo_trio.dispatch.GuardrailEnforcer`. It does three things on the dispatch path:

* **At the door** (:meth:`~StandardGuardrailEnforcer.judge_submission`), the third wall: a
  scoped job and a scoped input are judged against the caller's sealed guard, a refusal being
  the guard's own :class:`~nucleo_trio.errors.GuardrailError`; an orchestrator's effective guard
  is composed (the caller's, merged with its own scope and any guard assigned to it) and sealed.
  A guard job gating a tool crosses the *internal* door instead: it is judged against the
  guard the gated job was admitted under, and a refusal there is a code error in the guard
  (:class:`~nucleo_trio.errors.NucleoSystemError` caused by the refusal), never a verdict.
* **Before any resource** (:meth:`~StandardGuardrailEnforcer.before_resources`): admission, auth
  and input-content guards, once per submission.
* **After the release** (:meth:`~StandardGuardrailEnforcer.after_release`): output-content
  guards against the result; a refusal turns the success into a failure.

Each guard runs as a job of its own, submitted from the gated job's task and awaited holding
nothing, so a guard that fans out (a nursery or a task group in ``validate``) is read as any job
is: a re-run signal from its children re-runs the guard, and one failure reaches the gated job
as raised. A guard's own failure reaches the gated job as-is: a :class:`GuardrailError` is a
refusal, anything else (a crash, its timeout) fails the gated job closed with that error. A
guard whose children refused several ways at once gave one refusal naming each.
:func:`validate_answer` is the same contract for the validation seat of a thinker.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ..errors import CancellationRequested, ConfigError, GuardrailError, NucleoSystemError
from ..errors._groups import leaves
from ..jobs.guarded import GuardedExecution
from ..jobs.identity import workflow
from ..jobs.job import AbstractJob, ScopeAuthority
from .kinds import (
    OBS_GUARDS_INPUT,
    OBS_GUARDS_OUTPUT,
    OBS_GUARDS_VALIDATION,
    AdmissionGuardrail,
    AuthGuardrail,
    ContentGuardrail,
    Direction,
    Guardrail,
    ValidationGuardrail,
)
from .scope import Scope, Scoped, ScopeGuard

if TYPE_CHECKING:
    from ..dispatch.config import GuardrailConfig
    from ..dispatch.dispatcher import JobDispatcher
    from ..jobs.context import JobContext
    from ..plugins.manager import GuardrailKinds

__all__ = [
    "StandardGuardrailEnforcer",
    "attached_guardrails",
    "check_attached_guardrails",
    "is_guard_under_enforcement",
    "run_guards",
    "validate_answer",
]

_NO_GUARD = ScopeGuard()


def is_guard_under_enforcement(job: AbstractJob[Any], caller: JobContext | None) -> bool:
    """Whether ``job`` is a guard the enforcer is running for ``caller``: the one job a
    non-orchestrator submits, through the internal door."""
    return caller is not None and isinstance(job, Guardrail) and job._gated is caller


class StandardGuardrailEnforcer:
    """Scope at the door, guards around the attempt; see the module documentation.

    A job is asked for its guards once per submission, on the input side: the output guards
    among them wait here for the release, keyed weakly by the job's context.
    """

    def __init__(self) -> None:
        self._output_guards: weakref.WeakKeyDictionary[JobContext, list[ContentGuardrail]] = (
            weakref.WeakKeyDictionary()
        )
        # The plain dict behind it (keyed by weak references), read for "any at all?" on every
        # job: the weak dictionary's own len() is a Python-level call. Empty exactly when no
        # output guard waits.
        self._output_refs: dict[Any, Any] = self._output_guards.data  # type: ignore[attr-defined]

    # -- the door -------------------------------------------------------------------------------
    def judge_submission(
        self, job: AbstractJob[Any], caller: JobContext | None, metadata: dict[str, Any]
    ) -> BaseException | None:
        """The third wall: the refusal for ``job`` submitted by ``caller``, or ``None``; an
        admitted job's guard is captured (and an orchestrator's sealed) on the way."""
        # A root submission (no caller) is never a guard under enforcement: not asked.
        if caller is not None and is_guard_under_enforcement(job, caller):
            return self._internal_door(job, caller)
        bound = _NO_GUARD if caller is None else caller.scope_guard or _NO_GUARD
        if (
            getattr(job, "input", None) is None
            and (_FACTS_BY_CLASS.get(type(job)) or _facts_of(type(job))).no_claims
        ):
            # The common case: a plain tool with nothing to claim answers to its caller's guard.
            # (The field behind job.context, which a submitted job has: a property is a call.)
            (job._context or job.context).seal_scope_guard(bound)
            return None
        return self.judge(job, bound)

    def judge(
        self, job: AbstractJob[Any], bound: ScopeGuard, *, seal: bool = False
    ) -> BaseException | None:
        """Judge ``job``'s claims against ``bound`` (the caller's sealed guard) and, when they
        pass, capture the guard the job answers to: an orchestrator (or, with ``seal``, a
        guard at the internal door) gets ``bound`` merged with its own scope, sealed. A
        heartbeat's fire passes its captured guard here in the caller's role."""
        try:
            claims = _claims_of(job)
        except _ScopeFailure as failure:
            return failure.error
        for claim in claims:
            try:
                bound.pass_all(claim)
            except GuardrailError as refusal:
                return refusal
            except Exception as exc:
                return NucleoSystemError(
                    "dispatcher",
                    f"judging {job.name}'s claim {claim} against {bound} raised "
                    f"{type(exc).__name__}: {exc}",
                    exc,
                )
        if seal or isinstance(job, ScopeAuthority):
            own = claims[0] if isinstance(job, Scoped) else None
            sealed = bound.merge(own).merge(_assigned_guard(job))
            _seal_on(job, sealed)
            job.context.seal_scope_guard(sealed)
        else:
            job.context.seal_scope_guard(bound)
        return None

    def _internal_door(self, guard: AbstractJob[Any], gated: JobContext) -> BaseException | None:
        """A guard is judged against the guard its gated job was admitted under; a refusal
        here rendered no verdict, so it is a system error carrying the refusal (GRD-32)."""
        refusal = self.judge(guard, gated.scope_guard or _NO_GUARD, seal=True)
        if isinstance(refusal, GuardrailError):
            return NucleoSystemError(
                "guardrail",
                f"{guard.name} gating {gated.job.name} was refused at the internal door: its "
                f"claim lies outside the flow it gates ({refusal}); a guard refused there "
                "rendered no verdict",
                refusal,
            )
        return refusal

    # -- the attempt ----------------------------------------------------------------------------
    def input_settled_now(self, job: AbstractJob[Any], context: JobContext) -> bool:
        """The input side of the common case, answered synchronously: ``True`` when ``job``
        has no input or content guard (none declared, none attached), having recorded that none
        applied, or is itself a guard; then :meth:`before_resources` has nothing left to do
        and need not be awaited. ``False``: await :meth:`before_resources`."""
        # The class's facts read inline, and the configuration asked inline whether it attaches
        # anything (not in the common case): both sides ask both of every job, and each call
        # avoided counts.
        guarding = (_FACTS_BY_CLASS.get(type(job)) or _facts_of(type(job))).guarding
        if guarding is _NONE_DECLARED:
            dispatcher = context.dispatcher
            # Attached guards are only built when the configuration attaches some.
            if dispatcher is not None and dispatcher.config.guardrails:
                if attached_guardrails(job, context):
                    return False
            context.metadata[OBS_GUARDS_INPUT] = 0  # none applied (GRD-15)
            return True
        return guarding is _GUARD

    def output_settled_now(self, job: AbstractJob[Any], context: JobContext) -> bool:
        """The output side of the common case, as :meth:`input_settled_now`: ``True`` when no
        output guard waits for ``job`` (none applied is recorded); ``False``: await
        :meth:`after_release`."""
        guarding = (_FACTS_BY_CLASS.get(type(job)) or _facts_of(type(job))).guarding
        if guarding is _GUARD:
            return True
        if self._output_refs and context in self._output_guards:  # empty: no weak ref made
            return False
        if guarding is _NONE_DECLARED:
            dispatcher = context.dispatcher
            # Attached guards are only built when the configuration attaches some.
            if dispatcher is not None and dispatcher.config.guardrails:
                if attached_guardrails(job, context):
                    return False
            context.metadata[OBS_GUARDS_OUTPUT] = 0  # none applied (GRD-15)
            return True
        return False

    async def before_resources(self, job: AbstractJob[Any], context: JobContext) -> None:
        """Run the admission, auth and input-content guards, in that order, after the job's
        dependencies and before any resource is taken; a refusal or a guard's failure is raised
        as-is, and a guard itself passes through untouched."""
        # GRD-12 (where the guards stand), GRD-13 (a guard's crash is raised as-is)
        if isinstance(job, Guardrail):
            return
        attached = attached_guardrails(job, context)
        if not attached and _declares_no_guards(type(job)):
            # The common case costs no guard lists; the output side finds nothing either.
            context.metadata[OBS_GUARDS_INPUT] = 0  # none applied (GRD-15)
            return
        content = _content(job, attached)
        self._output_guards[context] = [g for g in content if g.direction is Direction.OUTPUT]
        guards: list[Guardrail] = [
            *_declared(job, job.admission_guardrails(), AdmissionGuardrail, "admission"),
            *_of_kind(attached, AdmissionGuardrail),
            *_declared(job, job.auth_guardrails(), AuthGuardrail, "auth"),
            *_of_kind(attached, AuthGuardrail),
            *(g for g in content if g.direction is Direction.INPUT),
        ]
        target = job.guarded_input_target() if guards else None
        await run_guards(context, guards, target, OBS_GUARDS_INPUT)

    async def after_release(self, job: AbstractJob[Any], context: JobContext, result: Any) -> None:
        """Run the output-content guards against ``result``, after the resources are released
        and before delivery; a refusal is raised, turning the success into a failure."""
        # GRD-12, EXEC-12
        if isinstance(job, Guardrail):
            return
        guards = self._output_guards.pop(context, None)
        if guards is None:  # declared none, or the input side ran under another enforcer
            attached = attached_guardrails(job, context)
            if not attached and _declares_no_guards(type(job)):
                context.metadata[OBS_GUARDS_OUTPUT] = 0  # none applied (GRD-15)
                return
            content = _content(job, attached)
            guards = [g for g in content if g.direction is Direction.OUTPUT]
        await run_guards(context, guards, result, OBS_GUARDS_OUTPUT)


async def validate_answer(context: JobContext, candidate: Any) -> None:
    """The validation seat's contract, for a thinker holding a candidate final answer.

    Runs the job's validation guards (declared and attached) against ``candidate`` and records
    how many applied under ``obs.guards_validation``. Returns when the answer may be delivered.
    A :class:`GuardrailError` is a refusal: the seat feeds it back to the thinker as a
    correction and discards the candidate. Anything else rendered no verdict and fails the
    thinker closed as a :class:`NucleoSystemError`: a guard refused at the internal door (the
    refusal as its cause), or a guard that crashed or timed out (that failure as its cause).
    """
    job = context.job
    guards = [
        *_declared(job, job.validation_guardrails(), ValidationGuardrail, "validation"),
        *_of_kind(attached_guardrails(job, context), ValidationGuardrail),
    ]
    try:
        await run_guards(context, guards, candidate, OBS_GUARDS_VALIDATION)
    except (GuardrailError, NucleoSystemError, CancellationRequested):
        raise
    except Exception as exc:
        # No verdict was rendered, so nothing may be fed back as a correction.
        raise NucleoSystemError(
            "guardrail",
            f"a validation guard of {job.name} failed with {type(exc).__name__}: {exc}; the "
            "candidate answer could not be judged",
            exc,
        ) from exc


async def run_guards(
    gated: JobContext, guards: Sequence[Guardrail], target: Any, count_key: str
) -> None:
    """Run each guard that applies to ``target`` as a job of its own, in order, and record how
    many applied under ``count_key`` in ``gated``'s metadata (``0`` when none did). A guard
    applies when its ``target_type`` is ``None`` or ``target`` is an instance of it. The first
    failure stops the run and is raised as the guard raised it."""
    # GRD-15 (the count, zero included)
    applied = 0
    try:
        for guard in guards:
            if guard.target_type is None:
                judged = None
            elif target is not None and isinstance(target, guard.target_type):
                judged = target
            else:
                continue  # not this guard's kind of target (GRD-11)
            applied += 1
            guard._gate(gated, judged)
            await _run_one(gated, guard)
    finally:
        gated.metadata[count_key] = applied


async def _run_one(gated: JobContext, guard: Guardrail) -> None:
    """Submit ``guard`` through the internal door and wait for it holding nothing; a cancel of
    the gated job cancels the guard too."""
    handle = gated.dispatcher.submit(guard)
    with trio.CancelScope() as scope:
        unregister = gated.on_cancel(scope.cancel)
        try:
            await handle.result()
            return
        except ExceptionGroup as group:
            refusal = _one_refusal(group)
            if refusal is None:
                raise  # not all refusals: the gated job fails closed with the group
            raise refusal from group
        finally:
            unregister()
    reason = gated.cancel_reason or "Job cancelled"
    handle.cancel(f"the job it gates was cancelled: {reason}")
    raise CancellationRequested(reason)


def _one_refusal(group: BaseExceptionGroup[Any]) -> GuardrailError | None:
    """A guard whose children (a nursery or a task group in ``validate``) refused several ways
    at once refused once: one :class:`GuardrailError` naming each refusal, so the model reads
    them all in one correction and a caller's ``except GuardrailError`` still holds; the group
    is its cause. ``None`` when any leaf is not a refusal (then no verdict was rendered), and
    for a group of one, which the dispatcher has already unwrapped to the refusal itself."""
    refusals = leaves(group)
    if len(refusals) < 2 or not all(isinstance(r, GuardrailError) for r in refusals):
        return None
    named = "; ".join(str(refusal) for refusal in refusals)
    return GuardrailError(f"{len(refusals)} refusals at once: {named}", cause=group)


def _declared(job: AbstractJob[Any], guards: Iterable[Any], kind: type, what: str) -> list[Any]:
    declared = list(guards or ())
    for guard in declared:
        if not isinstance(guard, kind):
            raise NucleoSystemError(
                "guardrail",
                f"{job.name} declares {type(guard).__name__} among its {what} guardrails, "
                f"which is not a {kind.__name__}",
            )
    return declared


def _makes_no_claims(cls: type) -> bool:
    """True when jobs of ``cls`` can claim no scope whatever their instance holds besides an
    ``input``: not :class:`Scoped`, not a :class:`ScopeAuthority` (whose guard is composed at
    its dispatch), not a guard, and the default guarded input target (see :class:`_Facts`)."""
    return (
        not issubclass(cls, Scoped | ScopeAuthority | Guardrail)
        and getattr(cls, "guarded_input_target", None) is GuardedExecution.guarded_input_target
    )


_GUARD_DECLARATIONS = (
    "content_guardrails",
    "auth_guardrails",
    "admission_guardrails",
)
_NO_GUARDS_BY_CLASS: dict[type, bool] = {}


def _declares_no_guards(cls: type) -> bool:
    """True when ``cls`` keeps every input-side and content declaration of
    :class:`GuardedExecution` as it is (so it declares none); remembered per class."""
    known = _NO_GUARDS_BY_CLASS.get(cls)
    if known is None:
        known = all(
            getattr(cls, name) is getattr(GuardedExecution, name) for name in _GUARD_DECLARATIONS
        )
        _NO_GUARDS_BY_CLASS[cls] = known
    return known


class _Guarding(enum.Enum):
    """What a job class's own declarations make of the attempt's guard steps."""

    GUARD = "guard"
    """A guard itself: it passes through the guard steps untouched."""
    NONE_DECLARED = "none declared"
    """Declares no guard: only guards attached from configuration can apply."""
    DECLARED = "declared"
    """Declares guards of its own (or may: it overrides a declaration)."""


# Read on every job: on CPython 3.11 a module global is found much faster than an enum
# class's member (an attribute read on a class is never specialised there).
_GUARD, _NONE_DECLARED = _Guarding.GUARD, _Guarding.NONE_DECLARED


def _guarding_of(cls: type) -> _Guarding:
    """Whether ``cls`` is a guard, and else :func:`_declares_no_guards`, in one answer."""
    if issubclass(cls, Guardrail):
        return _Guarding.GUARD
    if _declares_no_guards(cls):
        return _Guarding.NONE_DECLARED
    return _Guarding.DECLARED


class _Facts:
    """What a job class's own declarations settle for every job of it, remembered per class
    (:func:`_facts_of`): the door asks whether it can claim a scope, each side of the attempt
    what it makes of the guard steps. Only the class is read, never an instance: a guard is
    attached by the configuration to a class (the dispatcher's, asked per job) and a claim on
    an instance rides its ``input``, which the door reads per job."""

    __slots__ = ("guarding", "no_claims")

    def __init__(self, cls: type) -> None:
        self.no_claims = _makes_no_claims(cls)
        self.guarding = _guarding_of(cls)


_FACTS_BY_CLASS: dict[type, _Facts] = {}
"""Read inline on the dispatch path (``_FACTS_BY_CLASS.get(cls) or _facts_of(cls)``): three
questions a job, one dictionary look-up each and no call."""


def _facts_of(cls: type) -> _Facts:
    facts = _FACTS_BY_CLASS[cls] = _Facts(cls)
    return facts


def _of_kind(guards: Iterable[Guardrail], kind: type) -> list[Any]:
    return [guard for guard in guards if isinstance(guard, kind)]


def _content(job: AbstractJob[Any], attached: Sequence[Guardrail]) -> list[ContentGuardrail]:
    declared = _declared(job, job.content_guardrails(), ContentGuardrail, "content")
    return [*declared, *_of_kind(attached, ContentGuardrail)]


# -- scope claims -----------------------------------------------------------------------------------
class _ScopeFailure(Exception):
    def __init__(self, error: NucleoSystemError) -> None:
        super().__init__(str(error))
        self.error = error


def _claims_of(job: AbstractJob[Any]) -> list[Scope]:
    """The job's own scope first (when it declares one), then its input's claim, then the
    members of a guard assigned to an orchestrator before dispatch.

    The input is the job's ``input`` attribute and, when it differs, its guarded input target:
    a job that points its content guards at part of its input does not hide the input's claim.
    """
    claims: list[Scope] = []
    if isinstance(job, Scoped):
        claims.append(_scope_of(job, job, "its scope()"))
    try:
        target = job.guarded_input_target()
    except Exception as exc:
        raise _ScopeFailure(
            NucleoSystemError(
                "dispatcher",
                f"{job.name}: guarded_input_target() raised {type(exc).__name__}: {exc}",
                exc,
            )
        ) from exc
    inputs = [getattr(job, "input", None)]
    if target is not inputs[0]:
        inputs.append(target)
    for given in inputs:
        if isinstance(given, Scoped):
            claims.append(_scope_of(job, given, "its input's scope()"))
    assigned = _assigned_guard(job)
    if assigned is not None:
        claims.extend(assigned.scopes)
    return claims


def _assigned_guard(job: object) -> ScopeGuard | None:
    """The guard assigned to an orchestrator before its dispatch (a guard has none)."""
    if isinstance(job, Guardrail) or not isinstance(job, ScopeAuthority):
        return None
    return job.scope_guard


def _seal_on(job: object, guard: ScopeGuard) -> None:
    if isinstance(job, Guardrail):
        job.seal_scope_guard(guard)
    elif isinstance(job, ScopeAuthority):
        job.seal_scope_guard(guard)


def _scope_of(job: AbstractJob[Any], declarer: Scoped, what: str) -> Scope:
    try:
        scope = declarer.scope()
    except Exception as exc:
        raise _ScopeFailure(
            NucleoSystemError(
                "dispatcher",
                f"{job.name} was refused at the door: {what} raised {type(exc).__name__}: {exc}",
                exc,
            )
        ) from exc
    if not isinstance(scope, Scope):
        raise _ScopeFailure(
            NucleoSystemError(
                "dispatcher",
                f"{job.name} was refused at the door: {what} answered {scope!r}, not a Scope",
            )
        )
    return scope


# -- guards attached from configuration -----------------------------------------------------------
def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def attached_guardrails(job: AbstractJob[Any], context: JobContext) -> list[Guardrail]:
    """The guards the dispatcher's configuration attaches to ``job``'s class or any class it
    extends (by fully qualified name), built fresh with ``job`` as their parent."""
    dispatcher: JobDispatcher | None = context.dispatcher
    if dispatcher is None:  # a context built outside any dispatcher
        return []
    attachments = dispatcher.config.guardrails
    kinds = dispatcher.guardrail_kinds
    if not attachments or kinds is None:
        return []
    built: list[Guardrail] = []
    for cls in type(job).__mro__:
        for declared in attachments.get(_class_path(cls), ()):
            built.append(kinds.create(declared.kind, job, **declared.settings))
    return built


def check_attached_guardrails(
    attachments: Mapping[str, Sequence[GuardrailConfig]], kinds: GuardrailKinds
) -> None:
    """Refuse, before anything runs, a configuration that attaches an unknown guardrail kind or
    one its kind cannot build from the settings given (a :class:`ConfigError` naming both)."""
    probe = workflow("nucleo-config", "guardrail-check")
    for path, declared in attachments.items():
        if "." not in path.strip("."):
            raise ConfigError(
                f"dispatcher config: guardrails are attached to a fully qualified class name "
                f"such as 'myapp.tools.Fetch', got {path!r}"
            )
        for entry in declared:
            try:
                kinds.create(entry.kind, probe, **entry.settings)
            except Exception as exc:
                raise ConfigError(
                    f"dispatcher config: guardrail {entry.kind!r} attached to {path}: {exc}"
                ) from exc
