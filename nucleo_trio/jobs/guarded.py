"""What a job declares for the dispatcher's guardrails.

Every job is a :class:`GuardedExecution`: the dispatcher asks each one for its guards on every
route it takes, a direct submit included, so protection is a property of the job and not of
how it was called. The defaults declare nothing, and a job's input (its ``input`` attribute,
when it has one) is what the input-side guards judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..guardrails.kinds import (
        AdmissionGuardrail,
        AuthGuardrail,
        ContentGuardrail,
        ValidationGuardrail,
    )

__all__ = ["GuardedExecution"]


class GuardedExecution:
    """The guard declarations of a job; each method is asked once per submission.

    Return fresh guard instances built with the job as their parent: a guard is a job, and a job
    instance runs once. Content guards run on the side their direction names (the input before
    any resource is taken, the result after the resources are released); auth and admission
    guards run on the input side; validation guards run where a thinker holds a candidate final
    answer.
    """

    __slots__ = ()

    def content_guardrails(self) -> Sequence[ContentGuardrail]:
        """Guards on the job's input or its result; none by default."""
        return ()

    def auth_guardrails(self) -> Sequence[AuthGuardrail]:
        """Guards on the user the workflow works for; none by default."""
        return ()

    def admission_guardrails(self) -> Sequence[AdmissionGuardrail]:
        """Guards on who may call the job and from where; none by default."""
        return ()

    def validation_guardrails(self) -> Sequence[ValidationGuardrail]:
        """Guards on a thinker's candidate final answer; none by default."""
        return ()

    def guarded_input_target(self) -> Any:
        """What the input-side content guards judge and whose claim the door judges: the job's
        ``input`` attribute, ``None`` when it has none."""
        # GRD-09: the declarations are asked on every route, a direct submit included.
        return getattr(self, "input", None)
