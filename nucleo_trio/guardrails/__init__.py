"""Guardrails and scope, enforced by the dispatcher.

The four kinds of guard (:class:`ContentGuardrail`, :class:`AuthGuardrail`,
:class:`AdmissionGuardrail`, :class:`ValidationGuardrail`), the scope values and the immutable
:class:`ScopeGuard`, the dispatcher's enforcer, and the guards nucleo_trio ships. A job declares
its guards (see :class:`~nucleo_trio.jobs.GuardedExecution`) and its scope
(:class:`Scoped`, :class:`TenantScoped`); the dispatcher enforces them on every route.
"""

from .enforcer import (
    StandardGuardrailEnforcer as StandardGuardrailEnforcer,
    attached_guardrails as attached_guardrails,
    check_attached_guardrails as check_attached_guardrails,
    is_guard_under_enforcement as is_guard_under_enforcement,
    run_guards as run_guards,
    validate_answer as validate_answer,
)
from .kinds import (
    FAIL as FAIL,
    GUARDRAIL_TIMEOUT as GUARDRAIL_TIMEOUT,
    OBS_GATES_JOB_ID as OBS_GATES_JOB_ID,
    OBS_GATES_PHASE as OBS_GATES_PHASE,
    OBS_GUARDS_INPUT as OBS_GUARDS_INPUT,
    OBS_GUARDS_OUTPUT as OBS_GUARDS_OUTPUT,
    OBS_GUARDS_VALIDATION as OBS_GUARDS_VALIDATION,
    OBS_INPUT as OBS_INPUT,
    OBS_OUTPUT as OBS_OUTPUT,
    PASS as PASS,
    AdmissionContext as AdmissionContext,
    AdmissionGuardrail as AdmissionGuardrail,
    AuthGuardrail as AuthGuardrail,
    ContentGuardrail as ContentGuardrail,
    Direction as Direction,
    GateRung as GateRung,
    Guardrail as Guardrail,
    ValidationGuardrail as ValidationGuardrail,
    to_json as to_json,
)
from .scope import (
    CompositeScope as CompositeScope,
    ReadOnlyScope as ReadOnlyScope,
    Scope as Scope,
    Scoped as Scoped,
    ScopeGuard as ScopeGuard,
    TenantScope as TenantScope,
    TenantScoped as TenantScoped,
)
from .shipped import (
    CallerClassAllowListGuardrail as CallerClassAllowListGuardrail,
    ExfiltrationMarkerGuardrail as ExfiltrationMarkerGuardrail,
    PayloadSizeCapGuardrail as PayloadSizeCapGuardrail,
    PIIDetectionGuardrail as PIIDetectionGuardrail,
    PrincipalAllowListGuardrail as PrincipalAllowListGuardrail,
    Resolver as Resolver,
    UrlGuardrail as UrlGuardrail,
)

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
    "CallerClassAllowListGuardrail",
    "CompositeScope",
    "ContentGuardrail",
    "Direction",
    "ExfiltrationMarkerGuardrail",
    "GateRung",
    "Guardrail",
    "PIIDetectionGuardrail",
    "PayloadSizeCapGuardrail",
    "PrincipalAllowListGuardrail",
    "ReadOnlyScope",
    "Resolver",
    "Scope",
    "ScopeGuard",
    "Scoped",
    "StandardGuardrailEnforcer",
    "TenantScope",
    "TenantScoped",
    "UrlGuardrail",
    "ValidationGuardrail",
    "attached_guardrails",
    "check_attached_guardrails",
    "is_guard_under_enforcement",
    "run_guards",
    "validate_answer",
]
