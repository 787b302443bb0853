"""Scope: the values a flow is bound to, and the guard that judges every claim against them.

The classes are defined in :mod:`nucleo_trio._scope`, a leaf module the jobs import without
importing the guardrails package (a guard is a job), and name this module as theirs.
"""

from .._scope import (
    CompositeScope as CompositeScope,
    ReadOnlyScope as ReadOnlyScope,
    Scope as Scope,
    Scoped as Scoped,
    ScopeGuard as ScopeGuard,
    TenantScope as TenantScope,
    TenantScoped as TenantScoped,
)

__all__ = [
    "CompositeScope",
    "ReadOnlyScope",
    "Scope",
    "ScopeGuard",
    "Scoped",
    "TenantScope",
    "TenantScoped",
]
