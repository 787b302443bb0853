"""Scope values and the ScopeGuard (GRD-20..27)."""

from __future__ import annotations

import dataclasses

import attrs
import pytest
from hypothesis import given, strategies as st

from nucleo_trio.errors import GuardrailError
from nucleo_trio.guardrails import (
    CompositeScope,
    ReadOnlyScope,
    Scope,
    Scoped,
    ScopeGuard,
    TenantScope,
    TenantScoped,
)


@attrs.frozen
class RegionScope(Scope):
    region: str


@attrs.frozen
class CountryScope(RegionScope):
    country: str


@attrs.frozen
class CityScope(CountryScope):
    city: str


@attrs.frozen
class ZoneScope(RegionScope):
    """A sibling of CountryScope: shares only the region axis with it."""

    zone: str


@dataclasses.dataclass(frozen=True)
class ProjectScope(Scope):
    """A scope written as a dataclass."""

    project: str


def refused(bound: Scope | ScopeGuard, candidate: object) -> bool:
    try:
        if isinstance(bound, ScopeGuard):
            bound.pass_all(candidate)
        else:
            bound.pass_(candidate)
    except GuardrailError:
        return True
    return False


def test_equal_values_pass_and_a_mismatch_refuses_legibly() -> None:
    """GRD-20: equal tenant scopes pass; a mismatch is a GuardrailError with the exact message
    naming the binding and the claim."""
    TenantScope("t1").pass_(TenantScope("t1"))
    with pytest.raises(GuardrailError) as caught:
        TenantScope("t1").pass_(TenantScope("t2"))
    assert str(caught.value) == (
        "Scope mismatch: this flow is bound to TenantScope[tenant_id=t1] but the input names "
        "TenantScope[tenant_id=t2]"
    )


def test_an_unrecognized_type_passes_untouched() -> None:
    """GRD-21: a candidate of an unrelated scope class, a non-scope and None all pass, so
    independent axes coexist."""
    for candidate in (RegionScope("emea"), ProjectScope("p"), "t2", None, 7):
        assert not refused(TenantScope("t1"), candidate)
    assert refused(ProjectScope("p"), ProjectScope("q"))


def test_a_parent_bound_scope_judges_a_child_claim_on_the_shared_axis() -> None:
    """GRD-22: a region-bound scope refuses a city in another region and admits one in its own."""
    assert refused(RegionScope("emea"), CityScope("apac", "jp", "tokyo"))
    assert not refused(RegionScope("emea"), CityScope("emea", "fr", "paris"))


def test_a_child_bound_scope_judges_a_parent_claim_on_the_shared_axis() -> None:
    """GRD-22: a city-bound scope judges a region claim on the region alone."""
    paris = CityScope("emea", "fr", "paris")
    assert not refused(paris, RegionScope("emea"))
    assert refused(paris, RegionScope("apac"))


def test_a_child_bound_scope_judges_a_child_claim_on_every_axis() -> None:
    """GRD-22: two cities are judged on region, country and city."""
    paris = CityScope("emea", "fr", "paris")
    assert not refused(paris, CityScope("emea", "fr", "paris"))
    assert refused(paris, CityScope("emea", "fr", "lyon"))
    assert refused(paris, CityScope("emea", "de", "paris"))
    assert refused(paris, CityScope("apac", "fr", "paris"))


def test_sibling_subtypes_are_judged_on_their_shared_axis() -> None:
    """GRD-22: a country and a zone meet only on the region."""
    assert not refused(CountryScope("emea", "fr"), ZoneScope("emea", "z1"))
    assert refused(CountryScope("emea", "fr"), ZoneScope("apac", "z1"))
    assert not refused(ZoneScope("emea", "z1"), CityScope("emea", "de", "berlin"))


def test_a_three_level_chain_is_judged_at_every_shared_depth() -> None:
    """GRD-22: a country-bound scope judges a city on region and country, never on city."""
    france = CountryScope("emea", "fr")
    assert not refused(france, CityScope("emea", "fr", "lyon"))
    assert refused(france, CityScope("emea", "de", "lyon"))
    assert refused(france, CityScope("apac", "fr", "lyon"))


def test_nested_authorities_on_one_axis_both_pin() -> None:
    """GRD-22, GRD-23: a guard holding a region and, merged in, a city of it refuses a claim
    that either refuses."""
    guard = ScopeGuard(RegionScope("emea")).merge(CityScope("emea", "fr", "paris"))
    assert not refused(guard, CityScope("emea", "fr", "paris"))
    assert refused(guard, CityScope("emea", "fr", "lyon"))
    assert refused(guard, RegionScope("apac"))


def test_a_guard_runs_every_member_and_any_one_blocks() -> None:
    """GRD-23: pass_all is an AND over the members."""
    guard = ScopeGuard(TenantScope("t1"), RegionScope("emea"))
    assert not refused(guard, TenantScope("t1"))
    assert not refused(guard, RegionScope("emea"))
    assert refused(guard, TenantScope("t2"))
    assert refused(guard, RegionScope("apac"))
    assert not refused(guard, None)


def test_the_guard_constructors_dedup_whichever_form_is_used() -> None:
    """GRD-23: the varargs and the list forms are the same guard, equal members kept once."""
    t1, region = TenantScope("t1"), RegionScope("emea")
    varargs = ScopeGuard(t1, TenantScope("t1"), region)
    listed = ScopeGuard([t1, TenantScope("t1"), region])
    assert varargs.scopes == listed.scopes == (t1, region)
    assert varargs == listed
    with pytest.raises(TypeError, match="holds scopes, got str"):
        ScopeGuard(["t1"])  # type: ignore[list-item]


def test_merge_dedups_by_value_and_never_mutates() -> None:
    """GRD-23: merge returns a new guard and leaves both unchanged; merging the same members
    again adds nothing."""
    left = ScopeGuard(TenantScope("t1"))
    right = ScopeGuard(RegionScope("emea"))
    merged = left.merge(right)
    assert merged.scopes == (TenantScope("t1"), RegionScope("emea"))
    assert left.scopes == (TenantScope("t1"),)
    assert right.scopes == (RegionScope("emea"),)
    assert merged.merge(ScopeGuard(TenantScope("t1"), RegionScope("emea"))).scopes == merged.scopes
    assert merged.merge(None) is merged


def test_the_member_list_is_unmodifiable() -> None:
    """GRD-23: the members are a tuple and the guard refuses attribute writes."""
    guard = ScopeGuard(TenantScope("t1"))
    assert isinstance(guard.scopes, tuple)
    with pytest.raises(AttributeError, match="immutable"):
        guard._scopes = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        guard.scopes = ()  # type: ignore[misc]


def test_nested_composites_flatten_on_construction() -> None:
    """GRD-24: a composite of a composite has three plain components; its string lists them."""
    inner = CompositeScope(TenantScope("t1"), RegionScope("emea"))
    composite = CompositeScope(inner, ProjectScope("p"))
    assert composite.components == (TenantScope("t1"), RegionScope("emea"), ProjectScope("p"))
    assert not any(isinstance(c, CompositeScope) for c in composite.components)
    assert str(composite) == (
        "CompositeScope[TenantScope[tenant_id=t1], RegionScope[region=emea], ProjectScope[project=p]]"
    )
    with pytest.raises(TypeError, match="takes scopes"):
        CompositeScope("t1")  # type: ignore[arg-type]


def test_composite_equality_is_by_ordered_components() -> None:
    """GRD-24: equal components in the same order are equal; reordering breaks it."""
    a = CompositeScope(TenantScope("t1"), RegionScope("emea"))
    assert a == CompositeScope(TenantScope("t1"), RegionScope("emea"))
    assert hash(a) == hash(CompositeScope(TenantScope("t1"), RegionScope("emea")))
    assert a != CompositeScope(RegionScope("emea"), TenantScope("t1"))


def test_a_scope_alone_does_not_look_inside_a_composite_candidate_the_guard_does() -> None:
    """GRD-25: Scope.pass_ lets a composite through as an unrelated type; pass_all opens it so
    each axis is judged."""
    claim = CompositeScope(TenantScope("t2"), RegionScope("emea"))
    assert not refused(TenantScope("t1"), claim)
    assert refused(ScopeGuard(TenantScope("t1")), claim)
    assert not refused(ScopeGuard(TenantScope("t2")), claim)


def test_a_composite_member_judges_by_delegation() -> None:
    """GRD-25: a composite member of a guard judges a claim with each of its components."""
    guard = ScopeGuard(CompositeScope(TenantScope("t1"), RegionScope("emea")))
    assert not refused(guard, TenantScope("t1"))
    assert refused(guard, TenantScope("t2"))
    assert refused(guard, RegionScope("apac"))


def test_read_only_is_one_binding_by_type_and_judges_nobody() -> None:
    """GRD-26: every ReadOnlyScope is equal with one hash, reads "ReadOnlyScope", collapses to
    one member, and refuses no candidate."""
    assert ReadOnlyScope() == ReadOnlyScope()
    assert hash(ReadOnlyScope()) == hash(ReadOnlyScope())
    assert str(ReadOnlyScope()) == "ReadOnlyScope"
    assert ScopeGuard(ReadOnlyScope(), ReadOnlyScope()).scopes == (ReadOnlyScope(),)
    for candidate in (TenantScope("t1"), ReadOnlyScope(), CompositeScope(RegionScope("x"))):
        assert not refused(ReadOnlyScope(), candidate)
    # Riding the guard, it travels beside the tenant without blocking anything.
    guard = ScopeGuard(TenantScope("t1")).merge(ReadOnlyScope())
    assert ReadOnlyScope() in guard and not refused(guard, TenantScope("t1"))


def test_the_tenant_marker_produces_the_tenant_scope() -> None:
    """GRD-27: implementing TenantScoped with a tenant_id is the whole declaration."""

    @attrs.frozen
    class Order(TenantScoped):
        tenant_id: str
        item: str

    order = Order("t1", "book")
    assert isinstance(order, Scoped)
    assert order.scope() == TenantScope("t1")
    with pytest.raises(ValueError, match="non-blank tenant id"):
        TenantScope(" ")


tenants = st.sampled_from(["t1", "t2", "t3"])


@given(st.lists(tenants, max_size=3), st.lists(tenants, max_size=3), tenants)
def test_a_merged_guard_refuses_exactly_what_either_side_refuses(
    left: list[str], right: list[str], claim: str
) -> None:
    """GRD-23: merging is an AND of the verdicts, whatever the members."""
    a = ScopeGuard(TenantScope(t) for t in left)
    b = ScopeGuard(TenantScope(t) for t in right)
    candidate = TenantScope(claim)
    assert refused(a.merge(b), candidate) == (refused(a, candidate) or refused(b, candidate))
    assert refused(a.merge(b), candidate) == refused(b.merge(a), candidate)
