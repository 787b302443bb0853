"""The dispatcher's account registry (FAC): one instance per class, one bucket and one gate per
model entry, updated in place, cleared at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from nucleo_trio.admission import (
    CountingGate,
    LimiterIdentity,
    ModelGate,
    ModelLimits,
    RateLimiter,
    RateLimiterRegistry,
    TokenBucket,
    TokenBucketConfig,
    TokenBucketStatus,
)
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.plugins import LimiterRegistry, hookimpl, make_plugin_manager


@attrs.frozen
class Entry:
    """A catalog entry as far as the registry reads it."""

    id: str
    tpm: int | None = None
    rpm: int | None = None
    max_concurrent: int | None = None


class RenderSlots(CountingGate):
    def __init__(self) -> None:
        super().__init__("render", 4)


class Defaulted(CountingGate):
    """Buildable with no arguments because every argument has a default."""

    def __init__(self, capacity: int = 3, *, name: str = "defaulted") -> None:
        super().__init__(name, capacity)


class NeedsCapacity(CountingGate):
    def __init__(self, capacity: int) -> None:
        super().__init__("needs", capacity)


class Exploding(CountingGate):
    def __init__(self) -> None:
        raise RuntimeError("the config file is missing")


class NotAnAccount:
    def __init__(self) -> None:
        self.name = "nope"


def test_a_class_has_one_instance_until_cleared() -> None:
    """FAC-01: one instance per concrete class, built with no arguments (defaults count)."""
    registry = RateLimiterRegistry()
    slots = registry.instance(RenderSlots)
    assert isinstance(slots, RenderSlots) and slots.capacity == 4
    assert registry.instance(RenderSlots) is slots
    defaulted = registry.instance(Defaulted)
    assert defaulted.capacity == 3 and registry.instance(Defaulted) is defaulted
    assert defaulted is not slots
    registry.clear()
    assert registry.instance(RenderSlots) is not slots


def test_a_class_without_a_no_arg_constructor_is_a_deployment_fault() -> None:
    """FAC-02: refused as uncorrectable, naming the class and "no no-arg constructor", caused
    by the TypeError of the binding; nothing is cached."""
    registry = RateLimiterRegistry()
    with pytest.raises(UncorrectableError) as refused:
        registry.instance(NeedsCapacity)
    message = str(refused.value)
    assert "NeedsCapacity" in message and "no no-arg constructor" in message
    assert isinstance(refused.value.__cause__, TypeError)
    assert refused.value.correctable is False
    assert len(registry) == 0


def test_any_other_build_failure_says_it_could_not_be_built() -> None:
    """FAC-02: a constructor that raises gives "could not be built: <msg>" with the failure as
    cause; a class that is not an account is refused by name."""
    registry = RateLimiterRegistry()
    with pytest.raises(UncorrectableError, match="could not be built: the config file is missing"):
        registry.instance(Exploding)
    with pytest.raises(UncorrectableError) as refused:
        registry.instance(Exploding)
    assert isinstance(refused.value.__cause__, RuntimeError)
    with pytest.raises(TypeError, match="NotAnAccount is not a RateLimiter"):
        registry.instance(NotAnAccount)
    with pytest.raises(TypeError, match="takes a limiter class"):
        registry.instance(RenderSlots())  # type: ignore[arg-type]
    assert len(registry) == 0


async def test_a_spec_is_seeded_from_its_pair() -> None:
    """FAC-03: the bucket is named after the entry id and seeded from tpm and rpm, with a burst
    of one request when the entry states none; an rpm of 0 or none is tpm / 1000 requests
    (120 000 tokens give 120)."""
    registry = RateLimiterRegistry()
    bucket = registry.bucket(Entry("gpt-large", tpm=90_000, rpm=500))
    assert isinstance(bucket, TokenBucket)
    assert bucket.limiter_name == "gpt-large"
    assert bucket.config == TokenBucketConfig(rpm=500, tpm=90_000, burst=1)
    assert registry.bucket(Entry("no-rpm", tpm=120_000, rpm=0)).config.rpm == 120
    assert registry.bucket(Entry("unstated", tpm=120_000)).config.rpm == 120
    assert registry.bucket(Entry("tiny", tpm=500)).config.rpm == 1
    with pytest.raises(ValueError, match="'local' states no positive tpm.*ModelGate"):
        registry.bucket(Entry("local", max_concurrent=2))


async def test_specs_are_keyed_by_their_id() -> None:
    """FAC-03: a second entry object with the same id gets the same bucket, and its numbers are
    not read again."""
    registry = RateLimiterRegistry()
    first = registry.bucket(Entry("gpt-large", tpm=90_000, rpm=500))
    again = registry.bucket(Entry("gpt-large", tpm=1, rpm=1))
    assert again is first and first.config == TokenBucketConfig(rpm=500, tpm=90_000, burst=1)
    with pytest.raises(TypeError, match="non-blank str id"):
        registry.bucket(Entry("  ", tpm=10))


def test_one_model_gate_per_spec() -> None:
    """FAC-04: one ModelGate per entry id, sized by max_concurrent; an entry without it is
    refused as a token bucket's (GATE-04)."""
    registry = RateLimiterRegistry()
    gate = registry.gate(Entry("local-llama", max_concurrent=3))
    assert isinstance(gate, ModelGate) and gate.capacity == 3
    assert gate.limiter_name == "local-llama"
    assert registry.gate(Entry("local-llama", max_concurrent=9)) is gate
    with pytest.raises(ValueError, match="TokenBucket"):
        registry.gate(Entry("hosted", tpm=1000))


async def test_update_limits_applies_in_place_keeps_the_throttle_and_creates_when_absent() -> None:
    """FAC-05: an existing bucket is reconfigured in place (same instance, throttle kept, a
    raised cap wakes admission); without one, a bucket is built with the new numbers."""
    registry = RateLimiterRegistry()
    spec = Entry("gpt-large", tpm=90_000, rpm=500)
    bucket = registry.bucket(spec)
    bucket.record_429()
    woken: list[str] = []
    bucket.on_capacity_change(lambda: woken.append("wake"))
    registry.update_limits(spec, 600, 120_000)
    assert registry.bucket(spec) is bucket
    assert bucket.config == TokenBucketConfig(rpm=600, tpm=120_000, burst=1)
    assert bucket.throttle == 0.5
    assert woken == ["wake"]

    fresh = Entry("new-model", tpm=10, rpm=10)
    registry.update_limits(fresh, 30, 40_000)
    assert registry.bucket(fresh).config == TokenBucketConfig(rpm=30, tpm=40_000, burst=1)


async def test_update_limits_keeps_the_burst_bound_a_bucket_was_given() -> None:
    """FAC-05: published per-minute caps replace rpm and tpm; a burst bound set on the bucket
    (how fast a minute may be spent) is not the provider's to drop."""
    registry = RateLimiterRegistry()
    spec = Entry("gpt-large", tpm=90_000, rpm=500)
    bucket = registry.bucket(spec)
    bucket.set_config(TokenBucketConfig(rpm=500, tpm=90_000, burst=20))
    registry.update_limits(spec, 600, 120_000)
    assert bucket.config == TokenBucketConfig(rpm=600, tpm=120_000, burst=20)
    assert bucket.config.request_cap == 20


async def test_update_limits_ignores_a_pair_that_is_not_both_positive() -> None:
    """FAC-05: either number <= 0 leaves everything as it was (and builds nothing)."""
    registry = RateLimiterRegistry()
    spec = Entry("gpt-large", tpm=90_000, rpm=500)
    bucket = registry.bucket(spec)
    for rpm, tpm in ((0, 1000), (100, 0), (-1, -1)):
        registry.update_limits(spec, rpm, tpm)
        assert bucket.config == TokenBucketConfig(rpm=500, tpm=90_000, burst=1)
    registry.update_limits(Entry("absent"), 0, 1000)
    assert len(registry) == 1


async def test_clear_empties_the_class_bucket_and_gate_maps() -> None:
    """FAC-06: after clear, every map is empty and the next call builds afresh."""
    registry = RateLimiterRegistry()
    slots = registry.instance(RenderSlots)
    bucket = registry.bucket(Entry("m", tpm=1000, rpm=10))
    gate = registry.gate(Entry("g", max_concurrent=1))
    assert len(registry) == 3
    registry.clear()
    assert len(registry) == 0 and list(registry.accounts()) == []
    assert registry.instance(RenderSlots) is not slots
    assert registry.bucket(Entry("m", tpm=1000, rpm=10)) is not bucket
    assert registry.gate(Entry("g", max_concurrent=1)) is not gate


async def test_the_registry_reaches_the_same_objects_and_reports_status(
    autojump_clock: trio.abc.Clock,
) -> None:
    """FAC-07: status builds the bucket if needed and answers its TokenBucketStatus; every
    entry point reaches the same objects, and accounts() walks all of them. (Virtual time: on
    the real clock a loaded machine lets the bucket refill between the take and the status.)"""
    registry = RateLimiterRegistry()
    spec = Entry("gpt-large", tpm=90_000, rpm=500)
    status = registry.status(spec)
    assert isinstance(status, TokenBucketStatus)
    # one request at once: the default burst
    assert (status.rpm, status.requests, status.tpm, status.tokens) == (500, 1, 90_000, 90_000)
    bucket = registry.bucket(spec)
    assert bucket.try_take([30_000], [])
    assert registry.status(spec).tokens == 60_000
    slots = registry.instance(RenderSlots)
    gate = registry.gate(Entry("local", max_concurrent=2))
    assert list(registry.accounts()) == [slots, bucket, gate]


def test_each_dispatcher_has_its_own_registry() -> None:
    """FAC-07, SUB-15: the registry is the dispatcher's (``dispatcher.accounts``); two
    dispatchers in one process share no account."""
    one, two = JobDispatcher(DispatcherConfig()), JobDispatcher(DispatcherConfig())
    assert isinstance(one.accounts, RateLimiterRegistry)
    assert one.accounts.instance(RenderSlots) is not two.accounts.instance(RenderSlots)


def test_a_catalog_entry_shape_satisfies_model_limits() -> None:
    """The protocol the model catalog's entries answer: id, rpm, tpm, max_concurrent."""

    def read(spec: ModelLimits) -> Sequence[Any]:
        return (spec.id, spec.rpm, spec.tpm, spec.max_concurrent)

    assert read(Entry("m", tpm=1, rpm=2, max_concurrent=None)) == ("m", 2, 1, None)


class Clocked(CountingGate):
    """An account whose live state needs a running trio: reading it outside one fails."""

    reads = 0

    def __init__(self, name: str = "clocked", capacity: int = 2) -> None:
        super().__init__(name, capacity)

    @property
    def in_use(self) -> int:
        Clocked.reads += 1
        trio.current_time()  # raises RuntimeError outside a trio run
        return super().in_use

    @property
    def capacity(self) -> int:
        Clocked.reads += 1
        trio.current_time()
        return super().capacity


def test_building_an_account_outside_trio_reads_no_live_state() -> None:
    """Issue 12, item 6: the registries build and check an account without reading its live
    state (``in_use``, ``capacity``, ``status``), so an account that reads the trio clock there
    can be built at import time, outside any run, on every Python version."""
    Clocked.reads = 0
    registry = RateLimiterRegistry()
    built = registry.instance(Clocked)
    assert isinstance(built, RateLimiter) and isinstance(built, LimiterIdentity)

    class Kinds:
        @hookimpl
        def nucleo_trio_limiter_kinds(self) -> Any:
            return {"clocked": lambda name, **settings: Clocked(name, **settings)}

    kinds = LimiterRegistry(make_plugin_manager(load_entrypoints=False, plugins=[Kinds()]))
    made = kinds.create("clocked", "window", capacity=3)
    assert isinstance(made, Clocked) and Clocked.reads == 0
    # A class missing a question is still refused, from the class alone.
    assert not isinstance(object(), RateLimiter)


async def test_inside_trio_the_clocked_account_reads_as_usual() -> None:
    built = RateLimiterRegistry().instance(Clocked)
    assert (built.capacity, built.in_use) == (2, 0)
