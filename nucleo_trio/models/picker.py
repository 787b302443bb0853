"""Choosing an entry for a seat: providers and credentials, the situation, the default picker.

A **seat** is what a job asks for (a grade and the inputs it sends, or the embeddings or the
decision seat); the **situation** is what the runtime knows at the moment of asking: the
envelope, the depth, the entry the conversation used before, and every earlier attempt of this
execution with the failure it met. A picker answers a seat from the catalog.

:class:`DefaultModelPicker` searches, for a grade and then each grade above it, the grade's
pinned order and then its other entries cheapest first, and serves the first entry that is
callable, permitted by the envelope and accepts every declared input. It
caches nothing for language-model seats, so its choice follows credentials as they come and
go. A route overloaded earlier in the execution, or slowed by its upstream's push-back,
hands its traffic to another route of the same model.

A model whose endpoint says it is not there (a 404, "model not found") and that has not answered
for a day is **turned off** for a day (:class:`AvailabilityBook`): the picker serves the
seat from the next entry instead, and logs why and since when. A 5xx, a timeout, a refused or
dropped connection is a re-run, never a verdict on the model; and a turnoff never takes away
the last entry that can serve a seat: when every entry that could is turned off, the first of
them serves all the same.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import attrs
import trio

from ..errors import (
    HttpErrorResponse,
    ModelNotFoundError,
    ModelResolutionError,
    OverloadRetry,
    ResourceNotFoundError,
    UpstreamFailure,
)
from .catalog import PIN_DECISION, PIN_EMBEDDINGS, ModelCatalog, ModelSpec
from .envelope import ComplianceEnvelope, DefaultComplianceEnvelope
from .grades import Depth, Grade, Input, ModelKind

if TYPE_CHECKING:
    from ..admission.registry import RateLimiterRegistry

__all__ = [
    "AVAILABILITY_MEMORY",
    "Attempt",
    "AvailabilityBook",
    "DefaultModelPicker",
    "ModelPicker",
    "Provider",
    "Providers",
    "RouteHealth",
    "Situation",
    "Turnoff",
    "failover_share",
    "is_availability_failure",
]

log = logging.getLogger("nucleo_trio.models.picker")

AVAILABILITY_MEMORY = 24 * 60 * 60.0
"""A day, in seconds: a verdict within it of a success is not taken, and a turnoff
lasts it from the latest verdict."""

OVERLOAD_STATUS = 529
NOT_FOUND_STATUS = 404


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # outside a trio run: the monotonic clock
        return time.monotonic()


# --------------------------------------------------------------------------------------------
# Providers: who can call an entry
# --------------------------------------------------------------------------------------------


@attrs.frozen
class Provider:
    """One provider artifact: the code that calls the entries of a provider key.

    ``credential`` names the environment variable the provider needs (``None`` when it needs
    none). ``llm`` and ``embeddings`` build a client for an entry; ``serves`` says whether the
    provider's endpoint serves a wire id (a decision endpoint hosts a fixed set of models;
    ``None`` serves every id). ``close`` releases what the provider holds (a connection pool)
    when the dispatcher stops.
    """

    key: str
    """The provider key the provider serves; catalog entries name it as ``provider_key``."""
    credential: str | None = None
    """The environment variable that holds the provider's credential; an entry is callable only
    while it is set and not empty. ``None`` (the default): no credential is needed."""
    llm: Callable[[ModelSpec], Any] | None = None
    """Builds the language-model client for an entry; the runtime calls it once per entry, on
    first use. ``None``: the provider serves no language model."""
    embeddings: Callable[[ModelSpec], Any] | None = None
    """Builds the embeddings client for an entry, once per entry, on first use. ``None``: the
    provider serves no embeddings."""
    serves: Callable[[str], bool] | None = None
    """Answers whether the provider's endpoint serves a wire model id; the default picker asks
    before it picks an unpinned decision entry. ``None``: every id is served."""
    close: Callable[[], Awaitable[None]] | None = None
    """Releases what the provider holds (a connection pool), awaited when the dispatcher stops
    after its clients are closed. ``None``: nothing to release."""


class Providers:
    """The provider artifacts a deployment has, and the credentials they can read.

    An entry is **callable** when a provider for its key is registered and that provider's
    credential is present (``environ``, the process environment by default, is read on every
    question, so a credential set later makes the entry callable then).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._providers: dict[str, Provider] = {}
        self._environ = environ

    def register(self, provider: Provider) -> Provider:
        """Register ``provider`` under its key; a key registered twice is a ValueError."""
        if not isinstance(provider, Provider):
            raise TypeError(f"register() takes a Provider, got {type(provider).__name__}")
        if provider.key in self._providers:
            raise ValueError(f"a provider for {provider.key!r} is already registered")
        self._providers[provider.key] = provider
        return provider

    def get(self, key: str) -> Provider | None:
        """The provider registered under ``key``, or ``None``."""
        return self._providers.get(key)

    def __iter__(self) -> Iterator[Provider]:
        return iter(tuple(self._providers.values()))

    @property
    def keys(self) -> tuple[str, ...]:
        """The registered provider keys, in the order they were registered."""
        return tuple(self._providers)

    @property
    def environ(self) -> Mapping[str, str]:
        """Where credentials are read: the mapping given to the constructor, else the process
        environment as it is now."""
        return os.environ if self._environ is None else self._environ

    def is_callable(self, spec: ModelSpec) -> bool:
        """Whether a provider is registered for ``spec``'s key and its credential, if it needs
        one, is set and not empty."""
        provider = self._providers.get(spec.provider_key)
        if provider is None:
            return False
        return provider.credential is None or bool(self.environ.get(provider.credential))

    def serves(self, spec: ModelSpec) -> bool:
        """Whether a provider is registered for ``spec``'s key and its endpoint serves
        ``spec``'s wire model id; credentials are not checked."""
        provider = self._providers.get(spec.provider_key)
        return provider is not None and (
            provider.serves is None or provider.serves(spec.wire_model_id)
        )

    def missing(self, provider_key: str) -> str:
        """What to supply for ``provider_key``, as one line for an error message: the
        credential to set, or the provider to register; ``"[key] callable"`` when nothing is
        missing."""  # MOD-10
        provider = self._providers.get(provider_key)
        if provider is None:
            return f"[{provider_key}] no provider artifact (register a Provider for it)"
        if provider.credential is not None and not self.environ.get(provider.credential):
            return f"[{provider_key}] supply the credential {provider.credential}"
        return f"[{provider_key}] callable"


# --------------------------------------------------------------------------------------------
# The situation
# --------------------------------------------------------------------------------------------


def _status_of(failure: BaseException) -> int | None:
    if isinstance(failure, HttpErrorResponse):
        return failure.status_code
    upstream = getattr(failure, "failure", None)
    if isinstance(upstream, UpstreamFailure):
        return upstream.status
    return None


@attrs.frozen
class Attempt:
    """One earlier attempt of this execution: the entry it used and the failure it met."""

    spec_id: str
    """The id of the entry the attempt called."""
    failure: BaseException
    """The exception the call met."""

    @property
    def overloaded(self) -> bool:
        """Whether the route said it was overloaded (an overload signal, or HTTP 529)."""
        return (
            isinstance(self.failure, OverloadRetry) or _status_of(self.failure) == OVERLOAD_STATUS
        )

    @property
    def availability_shaped(self) -> bool:
        """Whether the endpoint said the model is not there (a 404, a not-found): the one
        failure that is a verdict on the model (:func:`is_availability_failure`)."""
        return is_availability_failure(self.failure)


def is_availability_failure(failure: BaseException) -> bool:
    """Whether ``failure`` is a verdict on the model: its endpoint says it is not there.

    Only a not-found is (an HTTP 404, :class:`~nucleo_trio.errors.ModelNotFoundError`, or
    :class:`~nucleo_trio.errors.ResourceNotFoundError`). A 5xx, an overload, a timeout, a
    refused or dropped connection says the upstream failed this once: it is a re-run, and says
    nothing about whether the model exists. A 429, an auth failure or an envelope refusal never
    is one either.
    """
    if isinstance(failure, OverloadRetry):
        return False
    status = _status_of(failure)
    if status is not None:
        return status == NOT_FOUND_STATUS
    return isinstance(failure, ModelNotFoundError | ResourceNotFoundError)


@attrs.frozen(kw_only=True)
class Situation:
    """What the runtime knows when it asks a picker.

    ``inputs`` are what the request declares it sends (an entry must accept each); ``carried``
    what the conversation actually carries. ``prior_spec_id`` is the entry the conversation
    used last (a picker may stay with it); ``attempts`` every earlier attempt of this execution
    with its failure. Guardrail refusals are never attempts.
    """

    # MOD-26: what the situation holds.
    envelope: ComplianceEnvelope = attrs.field(factory=DefaultComplianceEnvelope)
    """The compliance envelope in force; by default a fresh :class:`DefaultComplianceEnvelope`."""
    depth: Depth = Depth.STANDARD
    """The depth the call works at; STANDARD by default."""
    inputs: frozenset[Input] = frozenset()
    """What the request declares it sends besides text; an entry must accept each. Empty by
    default."""
    carried: frozenset[Input] = frozenset()
    """What the conversation carries besides text. The runtime refuses a call whose
    conversation carries an input it does not declare. Empty by default."""
    prior_spec_id: str | None = None
    """The entry the conversation used last; the default picker stays with it while it still
    qualifies and has not said it is overloaded. ``None`` by default."""
    attempts: tuple[Attempt, ...] = ()
    """Every earlier attempt of this execution, oldest first; empty on the first attempt."""

    @property
    def overloaded_routes(self) -> frozenset[str]:
        """Every entry that said it was overloaded in this execution."""
        return frozenset(a.spec_id for a in self.attempts if a.overloaded)


# --------------------------------------------------------------------------------------------
# Route health: throttle and availability
# --------------------------------------------------------------------------------------------


def failover_share(slowdown: float) -> float:
    """The share of new traffic, from 0.0 to 1.0, moved off a route slowed ``slowdown`` times:
    none below 2x, ``1 - 1/x`` between, all of it from 10x (or for a slowdown that is not
    finite)."""  # MOD-27
    if not math.isfinite(slowdown) or slowdown >= 10.0:
        return 1.0
    if slowdown < 2.0:
        return 0.0
    return 1.0 - 1.0 / slowdown


def _utc_text(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float) -> str:
    """``seconds`` as a person reads a wait: "45 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@attrs.frozen
class Turnoff:
    """Why and since when a model is turned off.

    ``since`` is the clock reading of the first verdict of the run (``at`` the wall-clock time
    of it, for people), ``latest`` the last one's, from which the turnoff lasts
    :data:`AVAILABILITY_MEMORY`; ``reason`` is what the endpoint said.
    """

    spec_id: str
    """The id of the entry turned off."""
    since: float
    """The clock reading, in seconds, of the first verdict (the trio clock inside a run)."""
    at: float
    """The wall-clock time of the first verdict, in seconds since the epoch."""
    latest: float
    """The clock reading, in seconds, of the latest verdict; the turnoff lasts a day from it."""
    reason: str
    """What the endpoint said, as text (``"HTTP 404: model not found"``)."""

    @property
    def until(self) -> float:
        """The clock reading at which the model is tried again."""
        return self.latest + AVAILABILITY_MEMORY

    def describe(self, now: float) -> str:
        """One sentence: which model, since when, why, and when it is tried again."""
        return (
            f"{self.spec_id} is turned off since {_utc_text(self.at)} "
            f"({_span(max(0.0, now - self.since))} ago) after {self.reason}; it is tried again "
            f"in {_span(max(0.0, self.until - now))}, or at once if it answers"
        )


class AvailabilityBook:
    """Which models are turned off for availability, and why and since when.

    A verdict (:func:`is_availability_failure`: the endpoint says the model is not there) on a
    model that has had no success for a day (:data:`AVAILABILITY_MEMORY`) turns it off, for a
    day from the latest verdict; a success turns it back on at once. A verdict within a day of
    a success is not taken (the model answered lately; a verdict once a day has passed without
    a success is). Any other failure is not recorded.
    """

    def __init__(
        self, clock: Callable[[], float] = _now, wall: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._last_success: dict[str, float] = {}
        self._turnoffs: dict[str, Turnoff] = {}

    def record(self, spec_id: str, failure: BaseException | None) -> None:
        """Record one call's outcome on ``spec_id``: ``None`` for a success."""
        now = self._clock()
        if failure is None:
            self._last_success[spec_id] = now
            self._turnoffs.pop(spec_id, None)
            return
        if not is_availability_failure(failure):
            return
        last = self._last_success.get(spec_id)
        if last is not None and now - last <= AVAILABILITY_MEMORY:
            return
        reason = _failure_text(failure)
        current = self._turnoffs.get(spec_id)
        if current is not None and now < current.until:
            self._turnoffs[spec_id] = attrs.evolve(current, latest=now, reason=reason)
        else:
            self._turnoffs[spec_id] = Turnoff(spec_id, now, self._wall(), now, reason)

    def turnoff(self, spec_id: str) -> Turnoff | None:
        """Why and since when ``spec_id`` is turned off, or ``None`` while it is on."""
        found = self._turnoffs.get(spec_id)
        if found is None:
            return None
        return found if self._clock() < found.until else None

    def is_off(self, spec_id: str) -> bool:
        """Whether ``spec_id`` is turned off now."""
        return self.turnoff(spec_id) is not None

    def why_off(self, spec_id: str) -> str | None:
        """The sentence that says why and since when ``spec_id`` is off, or ``None``."""
        found = self.turnoff(spec_id)
        return found.describe(self._clock()) if found is not None else None

    def turned_off(self) -> tuple[Turnoff, ...]:
        """Every model turned off now, earliest first."""
        found = (self.turnoff(spec_id) for spec_id in tuple(self._turnoffs))
        return tuple(sorted((t for t in found if t is not None), key=lambda t: t.since))


def _failure_text(failure: BaseException) -> str:
    status = _status_of(failure)
    text = str(failure) or type(failure).__name__
    head = f"HTTP {status}" if status is not None and f"HTTP {status}" not in text else ""
    return f"{head}: {text}" if head else text


@runtime_checkable
class RouteHealth(Protocol):
    """How a route is doing: its slowdown (1.0 unthrottled) and whether it is marked down.

    An implementation may also answer ``why_down(spec)``, a sentence the picker logs and puts
    in its errors when it passes over a route that is down.
    """

    def slowdown(self, spec: ModelSpec) -> float:
        """How many times slower than its normal pace the route runs now: 1.0 when unthrottled,
        more while its upstream pushes back. The default picker moves a share of new traffic
        off a slowed route (:func:`failover_share`)."""
        ...

    def is_down(self, spec: ModelSpec) -> bool:
        """Whether the route is marked down; the default picker passes over it, unless every
        entry that could serve the seat is down."""
        ...


class RegistryRouteHealth:
    """Route health read from a dispatcher's accounts and availability book: a route's
    slowdown is ``1 + throttle`` of its token bucket (1.0 before it has one); a route is down
    while the book has it turned off, and :meth:`why_down` says why and since when."""

    def __init__(self, accounts: RateLimiterRegistry, availability: AvailabilityBook) -> None:
        self._accounts = accounts
        self._availability = availability

    def slowdown(self, spec: ModelSpec) -> float:
        if spec.tpm is None:
            return 1.0
        for account in self._accounts.accounts():
            if getattr(account, "model_name", None) == spec.id:
                return 1.0 + float(getattr(account, "throttle", 0.0))
        return 1.0

    def is_down(self, spec: ModelSpec) -> bool:
        return self._availability.is_off(spec.id)

    def why_down(self, spec: ModelSpec) -> str | None:
        return self._availability.why_off(spec.id)


def _why_down(health: RouteHealth, spec: ModelSpec) -> str:
    """What ``health`` says about a route it has down: its own words when it has a
    ``why_down``, else that it is marked down."""
    explain = getattr(health, "why_down", None)
    said = explain(spec) if callable(explain) else None
    return said if isinstance(said, str) and said else f"{spec.id} is marked down by route health"


class _Healthy:
    def slowdown(self, spec: ModelSpec) -> float:
        return 1.0

    def is_down(self, spec: ModelSpec) -> bool:
        return False


# --------------------------------------------------------------------------------------------
# Pickers
# --------------------------------------------------------------------------------------------


@runtime_checkable
class ModelPicker(Protocol):
    """Chooses entries for seats. Install one per dispatcher with ``models.use(picker)``."""

    def pick(self, grade: Grade, situation: Situation) -> ModelSpec:
        """An entry for a language-model seat of ``grade`` (a rung, never CEILING), or
        :class:`~nucleo_trio.errors.ModelResolutionError` when nothing qualifies."""
        ...

    def ceiling(self) -> Grade | None:
        """The highest rung with a callable entry, ``None`` when nothing is callable."""
        ...

    def embeddings(self, situation: Situation) -> ModelSpec | None:
        """The embeddings entry, or ``None``."""
        ...

    def decision(self, situation: Situation) -> ModelSpec | None:
        """The decision entry, or ``None``."""
        ...


class DefaultModelPicker:
    """The catalog's order: pins, then cheapest callable, then the grade above.

    ``health`` reads a route's slowdown and whether it is marked down (a dispatcher passes
    its accounts' view); ``rng`` decides which new calls a slowed route hands over.
    """

    # MOD-08..13: the search order, the refusal, the other seats and the report.

    def __init__(
        self,
        catalog: ModelCatalog,
        providers: Providers,
        *,
        health: RouteHealth | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.catalog = catalog
        """The catalog it picks from."""
        self.providers = providers
        """The providers that say which entries are callable."""
        self.health: RouteHealth = health or _Healthy()
        """The route health it reads; without one, every route is healthy (a slowdown of 1.0,
        never down)."""
        self._rng = rng or random.Random()
        self._logged: set[tuple[str, str]] = set()
        self._down_logged: set[str] = set()  # entries whose turnoff was logged, while off
        self._held_logged: set[tuple[str, str]] = set()  # (grade, entry) served though off
        self._decision: ModelSpec | None = None

    # -- the order --------------------------------------------------------------------------------
    def order(self, grade: Grade) -> tuple[ModelSpec, ...]:
        """The grade's search order: its pins, then its other entries cheapest first by input
        plus output price per million, the unpriced last in catalog order. Closed and
        uncallable entries are included; :meth:`pick` skips them."""
        pinned = [self.catalog.spec(spec_id) for spec_id in self.catalog.pins(grade)]
        rest = [e for e in self.catalog.of_grade(grade) if e not in pinned]
        priced = sorted(
            (e for e in rest if e.price_per_million is not None),
            key=lambda e: cast(float, e.price_per_million),  # None was filtered out above
        )
        unpriced = [e for e in rest if e.price_per_million is None]
        return (*pinned, *priced, *unpriced)

    def _qualifies(
        self, spec: ModelSpec, situation: Situation, grade: Grade, *, healthy: bool = True
    ) -> bool:
        """Open, callable, permitted, accepting the inputs and, when ``healthy``, not down."""
        if not spec.is_open or spec.kind is not ModelKind.LLM:
            return False
        if not self.providers.is_callable(spec):
            self._log_once(
                "uncallable", spec.id, f"{spec.id} is not callable; skipped for {grade.value}"
            )
            return False
        if not situation.envelope.permits(spec):
            self._log_once("envelope", spec.id, f"{spec.id} is refused by the envelope; skipped")
            return False
        if healthy and self.health.is_down(spec):
            return False
        return spec.accepts(situation.inputs)

    def pick(self, grade: Grade, situation: Situation) -> ModelSpec:
        """The first qualifying entry of the grade's order, then of each grade above; a prior
        entry the conversation used is kept while it still qualifies (stickiness).

        An entry that is down (turned off for availability) is passed over, with a warning
        that says why and since when; but when every entry that could serve is down, the first
        of them serves all the same: a turnoff never takes the last entry away."""
        if not grade.is_rung:
            raise ValueError("pick() takes a rung; translate CEILING with ceiling() first")
        prior = self.catalog.find_spec(situation.prior_spec_id)
        if (
            prior is not None
            and prior.grade is not None
            and prior.grade.rank >= grade.rank
            and prior.id not in situation.overloaded_routes
            and self._qualifies(prior, situation, grade)
        ):
            return self._route(prior, situation)
        held: ModelSpec | None = None
        for rung in grade.at_least():
            order = self.order(rung)
            pinned = len(self.catalog.pins(rung))
            for index, spec in enumerate(order):
                if not self._qualifies(spec, situation, rung, healthy=False):
                    continue
                if self.health.is_down(spec):
                    if spec.id not in self._down_logged:
                        self._down_logged.add(spec.id)
                        log.warning("%s; passed over", _why_down(self.health, spec))
                    held = held or spec
                    continue
                self._down_logged.discard(spec.id)
                self._held_logged.discard((grade.value, spec.id))
                if index >= pinned and pinned:
                    self._log_once(
                        "fill-in",
                        rung.value,
                        f"no pinned entry of {rung.value} is callable; {spec.id} fills in",
                        level=logging.WARNING,
                    )
                return self._route(spec, situation)
        if held is not None:
            if (grade.value, held.id) not in self._held_logged:
                self._held_logged.add((grade.value, held.id))
                log.warning(
                    "every entry that can serve %s or above is turned off; %s serves all the "
                    "same (a turnoff never takes the last entry away): %s",
                    grade.value,
                    held.id,
                    _why_down(self.health, held),
                )
            return held
        raise ModelResolutionError(self._nothing_for(grade, situation), grade=grade.value)

    def _route(self, chosen: ModelSpec, situation: Situation) -> ModelSpec:
        """Hand the call to another route of the same model when this one is overloaded in
        this execution, or slowed enough that its share of new traffic moves (MOD-27)."""
        overloaded = situation.overloaded_routes
        slowdown = self.health.slowdown(chosen)
        if chosen.id in overloaded:
            slowdown = math.inf  # no traffic of this execution goes back to it
        else:
            share = failover_share(slowdown)
            if share <= 0.0 or self._rng.random() >= share:
                return chosen
        for candidate in self.catalog:
            if not self._can_take_over(candidate, chosen, situation, slowdown):
                continue
            log.info("%s fails over to %s", chosen.id, candidate.id)
            return candidate
        return chosen

    def _can_take_over(
        self, candidate: ModelSpec, chosen: ModelSpec, situation: Situation, slowdown: float
    ) -> bool:
        """Another route of the same model that is open, eligible, callable, permitted, not
        down, not overloaded in this execution and strictly less throttled (MOD-27)."""
        return (
            candidate.id != chosen.id
            and candidate.identity == chosen.identity
            and candidate.id not in situation.overloaded_routes
            and candidate.is_open
            and candidate.eligible_for_failover
            and self.providers.is_callable(candidate)
            and situation.envelope.permits(candidate)
            and not self.health.is_down(candidate)
            and candidate.accepts(situation.inputs)
            and self.health.slowdown(candidate) < slowdown
        )

    def _nothing_for(self, grade: Grade, situation: Situation) -> str:
        """The refusal's message (MOD-10): the grade, and per provider what to supply."""
        candidates = [e for rung in grade.at_least() for e in self.catalog.of_grade(rung)]
        parts = [f"no model entry can serve {grade.value} or above"]
        if not self.catalog.of_grade(grade):
            parts.append(f"no entry of that grade ({grade.value})")
        keys = dict.fromkeys(e.provider_key for e in candidates if e.is_open)
        needs = [self.providers.missing(key) for key in keys]
        needs = [n for n in needs if not n.endswith("callable")]
        if needs:
            parts.append("; ".join(needs))
        refused = [e.id for e in candidates if e.is_open and not situation.envelope.permits(e)]
        if refused:
            parts.append(f"refused by the compliance envelope: {', '.join(refused)}")
        down = [
            _why_down(self.health, e) for e in candidates if e.is_open and self.health.is_down(e)
        ]
        if down:
            parts.append("; ".join(down))
        if not candidates:
            parts.append("the catalog has no entry at or above it")
        return " - ".join([parts[0], "; ".join(parts[1:])]) if parts[1:] else parts[0]

    def _log_once(self, what: str, key: str, message: str, level: int = logging.INFO) -> None:
        if (what, key) not in self._logged:
            self._logged.add((what, key))
            log.log(level, message)

    # -- the other seats --------------------------------------------------------------------------
    def ceiling(self) -> Grade | None:
        """The highest rung with a callable open entry, ``None`` when nothing is callable."""
        for rung in reversed(Grade.rungs()):
            if any(
                e.is_open and self.providers.is_callable(e) for e in self.catalog.of_grade(rung)
            ):
                return rung
        return None

    def embeddings(self, situation: Situation) -> ModelSpec | None:
        """The pin, else the first callable open embeddings entry the envelope permits, else
        ``None``."""
        return self._first(PIN_EMBEDDINGS, ModelKind.EMBEDDINGS, situation)

    def decision(self, situation: Situation) -> ModelSpec | None:
        """The pin, else the first callable open decision entry the envelope permits and whose
        endpoint serves its wire id. An unpinned choice, once found, is kept for the picker's
        life."""
        pinned = self.catalog.pins(PIN_DECISION)
        if pinned:
            return self.catalog.spec(pinned[0])
        if self._decision is None:
            self._decision = self._first(PIN_DECISION, ModelKind.DECISION, situation, endpoint=True)
        return self._decision

    def _first(
        self, key: str, kind: ModelKind, situation: Situation, *, endpoint: bool = False
    ) -> ModelSpec | None:
        pinned = self.catalog.pins(key)
        if pinned:
            return self.catalog.spec(pinned[0])
        for spec in self.catalog.of_kind(kind):
            if (
                spec.is_open
                and self.providers.is_callable(spec)
                and situation.envelope.permits(spec)
                and (not endpoint or self.providers.serves(spec))
            ):
                return spec
        return None

    # -- reporting --------------------------------------------------------------------------------
    def describe_pins(self, situation: Situation | None = None) -> dict[str, str]:
        """The choice per grade as it stands now, by grade name: an entry id, ``"<id>
        (stand-in from <GRADE>)"`` when a higher grade serves, or ``"(nothing callable)"``."""
        situation = situation or Situation()
        report: dict[str, str] = {}
        for rung in Grade.rungs():
            try:
                spec = self.pick(rung, situation)
            except ModelResolutionError:
                report[rung.value] = "(nothing callable)"
                continue
            if spec.grade is rung:
                report[rung.value] = spec.id
            else:
                grade = spec.grade.value if spec.grade is not None else "?"
                report[rung.value] = f"{spec.id} (stand-in from {grade})"
        return report
