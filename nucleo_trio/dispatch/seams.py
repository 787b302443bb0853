"""The dispatcher's seams: where guardrails, scope and demand assembly plug into the door and
the attempt.

The kernel ships the plain implementations: no guards, and a demand built from the custom
limiters and the HTTP gate. The guardrails, accounts and models layers replace them without
touching the dispatch path, so every route a job can take crosses the same seats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..admission import Demand
from ..resources.job_resources import demand_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..admission.limiter import RateLimiter
    from ..jobs.context import JobContext
    from ..jobs.job import AbstractJob
    from ..jobs.requirements import JobRequirements
    from ..resources.provider import DBResourceProvider

__all__ = ["DemandAssembler", "GuardrailEnforcer", "NoGuardrails", "StandardDemandAssembler"]


class GuardrailEnforcer(Protocol):
    """The guardrail and scope seats of the dispatch path."""

    def judge_submission(
        self, job: AbstractJob[Any], caller: JobContext | None, metadata: dict[str, Any]
    ) -> BaseException | None:
        """The door's third wall (scope): the refusal for ``job`` submitted by ``caller``, or
        ``None`` to let it in. Runs after the authority and parent/thread walls."""
        ...

    async def before_resources(self, job: AbstractJob[Any], context: JobContext) -> None:
        """Input-side guards: after dependencies, before any resource. Raise to refuse."""
        ...

    async def after_release(self, job: AbstractJob[Any], context: JobContext, result: Any) -> None:
        """Output-side guards: after the resources are released, before delivery. Raise to
        turn the success into a failure."""
        ...


class NoGuardrails:
    """An enforcer that lets every submission pass and runs no guard.

    Pass it as ``JobDispatcher(guardrails=NoGuardrails())`` to run without guardrails; the
    dispatcher's default is the standard enforcer of :mod:`nucleo_trio.guardrails`.
    """

    def judge_submission(
        self, job: AbstractJob[Any], caller: JobContext | None, metadata: dict[str, Any]
    ) -> BaseException | None:
        """Always ``None``: every submission is let in."""
        return None

    async def before_resources(self, job: AbstractJob[Any], context: JobContext) -> None:
        """Runs no guard."""
        return None

    async def after_release(self, job: AbstractJob[Any], context: JobContext, result: Any) -> None:
        """Runs no guard; the result is delivered as it is."""
        return None


class DemandAssembler(Protocol):
    """Turns one attempt's captured requirements into the whole demand admission grants."""

    def assemble(
        self,
        requirements: JobRequirements,
        context: JobContext,
        http_gate: RateLimiter,
        providers: Sequence[DBResourceProvider] = (),
    ) -> Demand:
        """Build the demand; ``providers`` are the declared databases, already resolved by
        name. Raise to fail the attempt before anything is held (a model that cannot be
        resolved, a spend gate that refuses)."""
        ...


class StandardDemandAssembler:
    """A demand of the HTTP gate when anything needs it, each custom limiter with its amount,
    one permit per declared database, and the job's memory claim on the memory gate
    (:func:`~nucleo_trio.resources.demand_of`).

    It knows nothing of models: a model binding adds only the HTTP gate here. The
    dispatcher's default assembler also resolves and prices the bindings and puts their
    accounts first.
    """

    def assemble(
        self,
        requirements: JobRequirements,
        context: JobContext,
        http_gate: RateLimiter,
        providers: Sequence[DBResourceProvider] = (),
    ) -> Demand:
        """The demand of ``requirements``, in this order: ``http_gate`` when :attr:`needs_http
        <nucleo_trio.jobs.JobRequirements.needs_http>`, each limiter with its amount, a permit
        on the gate of each of ``providers``, then the memory claim."""
        # JR-02
        return demand_of(requirements, http_gate, providers)
