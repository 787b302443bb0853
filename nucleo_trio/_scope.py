"""Scope: the values a flow is bound to, and the guard that judges every claim against them.

A :class:`Scope` is a frozen value on one axis a flow can be bound to, such as a tenant. Its
fields are the axis values; refinement is inheritance, so a subclass that adds a field refines
its parent (a city within a region). Two scopes are judged on every scope class they share:
a region-bound flow judges a city's region, a city-bound flow judges a region claim on the
region, two siblings meet on their common parent, and a scope of an unrelated class passes
untouched, which is what lets independent axes live side by side (GRD-20..22).

A :class:`ScopeGuard` is an immutable set of bound scopes. The dispatcher composes one for every
orchestrator at its own dispatch (its caller's guard merged with its own scope) and seals it;
every job it submits has its own scope and its input's claim judged against that guard. A job
or an input declares a scope by implementing :class:`Scoped`, or :class:`TenantScoped` with a
``tenant_id`` for the common case.

Defined in this leaf module (it imports only :mod:`nucleo_trio.errors`) and exported from
:mod:`nucleo_trio.guardrails.scope`, the path the classes name as their module: a job class
carries a scope guard (:class:`~nucleo_trio.jobs.ScopeAuthority`), so :mod:`nucleo_trio.jobs`
imports it here, below the guardrails package, whose guards are jobs.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, final

import attrs

from .errors import GuardrailError

__all__ = [
    "CompositeScope",
    "ReadOnlyScope",
    "Scope",
    "ScopeGuard",
    "Scoped",
    "TenantScope",
    "TenantScoped",
]


class Scope:
    """A value a flow can be bound to, on one axis.

    Write a scope as a frozen attrs class (or a frozen dataclass) whose fields are the axis
    values; subclass it to refine it::

        @attrs.frozen
        class RegionScope(Scope):
            region: str

        @attrs.frozen
        class CityScope(RegionScope):
            city: str

    :meth:`pass_` judges a candidate against this bound scope. The candidate is compared on
    every scope class both belong to, each class on the fields it declares itself: a
    ``RegionScope("emea")`` refuses ``CityScope("apac", "tokyo")`` on the region, a
    ``CityScope("emea", "paris")`` refuses ``CityScope("emea", "lyon")`` on the city, and either
    lets a ``TenantScope`` through, since they share no axis.
    """

    __slots__ = ()

    def pass_(self, candidate: object) -> None:
        """Let ``candidate`` through, or raise :class:`GuardrailError` naming this binding and
        the claim when they differ on a shared axis. ``None``, a non-scope and a scope of an
        unrelated class pass untouched; so does a :class:`CompositeScope`, which only a
        :class:`ScopeGuard` opens."""
        # GRD-20..22 (shared axes), GRD-25 (a composite candidate is opened by the guard only)
        if not isinstance(candidate, Scope) or isinstance(candidate, CompositeScope):
            return
        for axis in _shared_axes(type(self), type(candidate)):
            for name in _own_fields(axis):
                if getattr(self, name) != getattr(candidate, name):
                    raise GuardrailError(
                        f"Scope mismatch: this flow is bound to {self} but the input names "
                        f"{candidate}"
                    )

    def __str__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)}" for name in _fields(type(self)))
        return f"{type(self).__name__}[{values}]"


def _fields(cls: type) -> tuple[str, ...]:
    """The axis values a scope class carries, inherited ones first."""
    if attrs.has(cls):
        return tuple(field.name for field in attrs.fields(cls))
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    return ()


_OWN_FIELDS: dict[type, tuple[str, ...]] = {}
_SHARED_AXES: dict[tuple[type, type], tuple[type, ...]] = {}


def _own_fields(cls: type) -> tuple[str, ...]:
    """The fields ``cls`` declares itself: the values of its own refinement step."""
    own = _OWN_FIELDS.get(cls)
    if own is None:
        inherited = {name for base in cls.__bases__ for name in _fields(base)}
        own = _OWN_FIELDS[cls] = tuple(n for n in _fields(cls) if n not in inherited)
    return own


def _shared_axes(bound: type, candidate: type) -> tuple[type, ...]:
    """The scope classes both belong to, most general first (Scope itself carries no axis)."""
    axes = _SHARED_AXES.get((bound, candidate))
    if axes is None:
        axes = _SHARED_AXES[bound, candidate] = tuple(
            cls
            for cls in reversed(bound.__mro__)
            if issubclass(cls, Scope) and cls is not Scope and issubclass(candidate, cls)
        )
    return axes


@attrs.frozen
class TenantScope(Scope):
    """The tenant a flow works for; what :class:`TenantScoped` declares."""

    tenant_id: str = attrs.field()
    """The tenant's id; a blank or non-string id is a ``ValueError``."""

    @tenant_id.validator
    def _check(self, attribute: attrs.Attribute[str], value: object) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"TenantScope needs a non-blank tenant id, got {value!r}")


@final
@attrs.frozen
class ReadOnlyScope(Scope):
    """The read-only binding, carried on the guard so it travels with the flow.

    Every instance is equal to every other, so two collapse into one member of a guard. It
    refuses no candidate: what honours it is whoever offers tools to the flow, which reads it
    off the guard.
    """

    # GRD-26
    def pass_(self, candidate: object) -> None:
        """Let every candidate through: the read-only binding refuses nothing by itself."""
        return None

    def __str__(self) -> str:
        return "ReadOnlyScope"


@final
class CompositeScope(Scope):
    """Several scopes held as one value, such as a tenant and a region together.

    Nested composites are flattened when it is built, so its components are never composites.
    Equality is by the ordered component list. As a member of a guard it judges a candidate with
    each component in turn; as a candidate, only a :class:`ScopeGuard` opens it. A component
    that is not a :class:`Scope` is a ``TypeError``.
    """

    # GRD-24 (flattened, ordered equality), GRD-25 (opened only by a guard)

    __slots__ = ("_components",)

    def __init__(self, *components: Scope) -> None:
        flat: list[Scope] = []
        for component in components:
            if isinstance(component, CompositeScope):
                flat.extend(component.components)
            elif isinstance(component, Scope):
                flat.append(component)
            else:
                raise TypeError(
                    f"CompositeScope takes scopes, got {type(component).__name__}: {component!r}"
                )
        self._components = tuple(flat)

    @property
    def components(self) -> tuple[Scope, ...]:
        """The scopes held, in the order given, nested composites flattened."""
        return self._components

    def pass_(self, candidate: object) -> None:
        """Judge ``candidate`` with each component in turn; the first component's
        :class:`GuardrailError` is raised."""
        for component in self._components:
            component.pass_(candidate)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompositeScope):
            return NotImplemented
        return self._components == other._components

    def __hash__(self) -> int:
        return hash((CompositeScope, self._components))

    def __str__(self) -> str:
        return f"CompositeScope[{', '.join(str(c) for c in self._components)}]"

    def __repr__(self) -> str:
        return f"CompositeScope({', '.join(repr(c) for c in self._components)})"


@final
class ScopeGuard:
    """An immutable set of bound scopes: a claim passes when every member lets it through.

    Build it from scopes or from iterables of scopes, in any mix: ``ScopeGuard(a, b)`` and
    ``ScopeGuard([a, b])`` are the same guard. Members equal by value are kept once, in the
    order first given. :meth:`merge` returns a new guard and leaves both sides as they were;
    setting an attribute is an ``AttributeError``, and anything but a scope among the members
    is a ``TypeError``. Two guards are equal when they hold the same members in any order.
    """

    # GRD-23

    __slots__ = ("_scopes",)

    _scopes: tuple[Scope, ...]

    def __init__(self, *scopes: Scope | Iterable[Scope]) -> None:
        object.__setattr__(self, "_scopes", _dedup(_members(scopes)))

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """The members, in the order first given."""
        return self._scopes

    def pass_all(self, candidate: object) -> None:
        """Let ``candidate`` through, or raise the first member's :class:`GuardrailError`.

        A :class:`CompositeScope` candidate is opened so each of its axes is judged; ``None``
        passes.
        """
        if candidate is None:
            return
        parts = candidate.components if isinstance(candidate, CompositeScope) else (candidate,)
        for member in self._scopes:
            for part in parts:
                member.pass_(part)

    def merge(self, other: ScopeGuard | Scope | Iterable[Scope] | None) -> ScopeGuard:
        """A new guard holding this guard's members and ``other``'s."""
        if other is None:
            return self
        extra = other.scopes if isinstance(other, ScopeGuard) else other
        merged = ScopeGuard(self._scopes, extra)
        return self if merged._scopes == self._scopes else merged

    def __contains__(self, scope: object) -> bool:
        return scope in self._scopes

    def __len__(self) -> int:
        return len(self._scopes)

    def __iter__(self) -> Iterator[Scope]:
        return iter(self._scopes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScopeGuard):
            return NotImplemented
        return set(self._scopes) == set(other._scopes)

    def __hash__(self) -> int:
        return hash(frozenset(self._scopes))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a ScopeGuard is immutable; merge() returns a new one ({name})")

    def __repr__(self) -> str:
        return f"ScopeGuard[{', '.join(str(s) for s in self._scopes)}]"


def _members(given: Iterable[object]) -> Iterator[Scope]:
    for item in given:
        if isinstance(item, Scope):
            yield item
        elif isinstance(item, Iterable) and not isinstance(item, str | bytes):
            yield from _members(item)
        else:
            raise TypeError(f"a ScopeGuard holds scopes, got {type(item).__name__}: {item!r}")


def _dedup(scopes: Iterable[Scope]) -> tuple[Scope, ...]:
    kept: list[Scope] = []
    for scope in scopes:
        if scope not in kept:
            kept.append(scope)
    return tuple(kept)


class Scoped(abc.ABC):
    """Declares a scope: a job's own (the flow it works in) or an input's claim.

    The dispatcher's door judges both against the submitting orchestrator's sealed guard, and
    an orchestrator's own scope joins the guard it seals. A :meth:`scope` that raises, or
    answers anything but a :class:`Scope`, refuses the submission with
    :class:`~nucleo_trio.errors.NucleoSystemError`.
    """

    # SUB-07

    __slots__ = ()

    @abc.abstractmethod
    def scope(self) -> Scope:
        """The scope this job works in, or the one this input claims."""


class TenantScoped(Scoped):
    """The tenant marker: a class with a ``tenant_id`` attribute that implements this declares
    ``TenantScope(tenant_id)`` and nothing else is needed."""

    # GRD-27
    __slots__ = ()

    tenant_id: str
    """The tenant this job works for or this input claims; the implementing class provides it."""

    def scope(self) -> Scope:
        return TenantScope(self.tenant_id)


# The path users import these from: tracebacks and pickles name it, and a durable heartbeat
# store writes a scope's class by it (``nucleo_trio.guardrails.scope:TenantScope``), as it did
# when the classes were defined there.
for _public in (
    CompositeScope,
    ReadOnlyScope,
    Scope,
    ScopeGuard,
    Scoped,
    TenantScope,
    TenantScoped,
):
    _public.__module__ = "nucleo_trio.guardrails.scope"
del _public
