"""One dispatcher's models: the catalog, the picker, the envelope, the spend gates, the clients.

Every dispatcher owns a :class:`ModelRuntime` (``dispatcher.models``), so two dispatchers in one
process share no picker, no envelope and no frozen embeddings seat. It does three things:

* it **resolves** a binding through the picker and the compliance gate:
  whichever picker answered, the gate checks the entry's kind, the envelope, the inputs, the
  status, and (for a picked seat) the grade floor; an entry the envelope refuses for an unpinned
  seat is replaced by the nearest permitted rung, while a pinned entry the envelope refuses
  stays refused;
* through :class:`ModelDemandAssembler` it turns an attempt's bindings into the first entries of
  the attempt's demand: resolved, priced, judged by every spend gate, then one token reservation
  on each entry's bucket, or one permit on its gate;
* it keeps the client each resolved entry's provider built (:meth:`ModelRuntime.provider_client`),
  one per entry, which the LLM layer wraps so every call lands on the job's context.

The catalog is loaded on first use, not at start, so a dispatcher that never calls a model
needs no catalog.
"""

from __future__ import annotations

import logging
import random
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..admission import Demand
from ..errors import ModelResolutionError, UncorrectableError
from ..jobs.stoppable import AbstractStoppable
from ..resources.job_resources import demand_of
from .binding import ModelBinding
from .catalog import ModelCatalog, ModelSpec, load_catalog
from .envelope import ComplianceEnvelope, EnvelopeSeal
from .grades import Grade, ModelKind
from .picker import (
    Attempt,
    AvailabilityBook,
    DefaultModelPicker,
    ModelPicker,
    Providers,
    RegistryRouteHealth,
    Situation,
)
from .spend import SpendGate

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter
    from ..admission.registry import RateLimiterRegistry
    from ..dispatch.dispatcher import JobDispatcher
    from ..jobs.context import JobContext
    from ..jobs.requirements import JobRequirements
    from ..llm.clients import EmbeddingsClient, LLMClient, LLMResponse
    from ..resources.provider import DBResourceProvider

__all__ = ["ModelDemandAssembler", "ModelRuntime", "binding_accounts"]

log = logging.getLogger("nucleo_trio.models")


class ModelRuntime(AbstractStoppable):
    """A dispatcher's models; see the module documentation.

    ``catalog`` is the catalog to use; without one it is loaded on first use from the
    dispatcher's configuration (``models``), the ``NUCLEO_TRIO_MODELS`` variable or the plugins'
    fragments (:func:`~nucleo_trio.models.load_catalog`). ``providers`` are the artifacts that
    can call entries (register more with ``runtime.providers.register(...)``).
    """

    def __init__(
        self,
        catalog: ModelCatalog | None = None,
        *,
        providers: Providers | None = None,
    ) -> None:
        self._catalog = catalog
        self.providers = providers or Providers()
        """The provider artifacts that can call entries, and the credentials they read."""
        self.availability = AvailabilityBook()
        """Which models are turned off because their endpoint said they are not there; the
        default picker passes over them."""
        self.envelope = EnvelopeSeal()
        """The seal that holds this dispatcher's compliance envelope."""
        self._spend_gates: list[SpendGate] = []
        self._picker: ModelPicker | None = None
        self._default_picker: DefaultModelPicker | None = None
        self._resolved_once = False
        self._embeddings: ModelSpec | None = None
        self._warned: set[str] = set()
        self._attempts: weakref.WeakKeyDictionary[JobContext, list[Attempt]] = (
            weakref.WeakKeyDictionary()
        )
        self._clients: dict[str, LLMClient] = {}
        self._embedding_clients: dict[str, EmbeddingsClient] = {}
        self._dispatcher: JobDispatcher | None = None
        self._accounts: RateLimiterRegistry | None = None

    def attach(self, dispatcher: JobDispatcher) -> ModelRuntime:
        """Serve ``dispatcher``: its accounts, its configuration and its plugins. A runtime
        serves one dispatcher (two dispatchers share no picker, envelope or spend gate)."""
        if self._dispatcher is not None and self._dispatcher is not dispatcher:
            raise RuntimeError("this ModelRuntime already serves another dispatcher")
        self._dispatcher = dispatcher
        self._accounts = dispatcher.accounts
        return self

    # -- the catalog ------------------------------------------------------------------------------
    @property
    def catalog(self) -> ModelCatalog:
        """The catalog, loaded on first use (:func:`~nucleo_trio.models.load_catalog`); with
        no catalog to be found, a :class:`~nucleo_trio.errors.ConfigError`."""
        if self._catalog is None:
            dispatcher = self._dispatcher
            path = getattr(dispatcher.config, "models", None) if dispatcher else None
            plugins = dispatcher.plugins if dispatcher else None
            self._catalog = load_catalog(path, plugins=plugins)
        return self._catalog

    def use_catalog(self, catalog: ModelCatalog) -> None:
        """Use ``catalog``; only before the first resolution."""
        if self._resolved_once:
            raise RuntimeError("the catalog cannot change after the first model resolution")
        self._catalog = catalog

    # -- the picker (MOD-29) ------------------------------------------------------------------------
    def use(self, picker: ModelPicker) -> None:
        """Install ``picker``, once, before the first resolution: a second call, or one after
        a resolution, is a RuntimeError, and an object that is not a :class:`ModelPicker` a
        TypeError."""  # MOD-29
        if not isinstance(picker, ModelPicker):
            raise TypeError(
                f"use() takes a ModelPicker (pick, ceiling, embeddings, decision), got "
                f"{type(picker).__name__}"
            )
        if self._resolved_once:
            raise RuntimeError("use() must come before the first model resolution")
        if self._picker is not None:
            raise RuntimeError("a model picker is already installed; use() is called once")
        self._picker = picker

    @property
    def picker(self) -> ModelPicker:
        """The installed picker, else the :class:`DefaultModelPicker` over the catalog."""
        if self._picker is not None:
            return self._picker
        if self._default_picker is None:
            rng = random.Random(getattr(getattr(self._dispatcher, "config", None), "seed", None))
            health = (
                RegistryRouteHealth(self._accounts, self.availability)
                if self._accounts is not None
                else None
            )
            self._default_picker = DefaultModelPicker(
                self.catalog, self.providers, health=health, rng=rng
            )
        return self._default_picker

    # -- the envelope (ENV-01, ENV-02) --------------------------------------------------------------
    @property
    def compliance_envelope(self) -> ComplianceEnvelope:
        """The sealed envelope, or before any seal the refusing default (without sealing)."""
        return self.envelope.envelope

    def seal_compliance_envelope(self, envelope: ComplianceEnvelope) -> None:
        """Seal ``envelope``, once; ``None`` is a ValueError, a second seal a RuntimeError."""
        self.envelope.seal(envelope)

    # -- spend gates (EXEC-14) ----------------------------------------------------------------------
    def register_spend_gate(self, gate: SpendGate) -> None:
        """Consult ``gate`` on every attempt with model bindings, for the runtime's life."""
        if gate is None:
            raise ValueError("register_spend_gate: the gate must not be None")
        if not isinstance(gate, SpendGate):
            raise TypeError(f"a spend gate has admit(context, priced), got {type(gate).__name__}")
        self._spend_gates.append(gate)

    @property
    def spend_gates(self) -> tuple[SpendGate, ...]:
        """Every registered spend gate, in the order they were registered."""
        return tuple(self._spend_gates)

    # -- history ------------------------------------------------------------------------------------
    def note_attempt(self, context: JobContext, spec: ModelSpec, failure: BaseException) -> None:
        """Record that this execution's call on ``spec`` failed with ``failure``: the next
        attempt resolves with it in its history, and the availability book hears of it."""
        self._attempts.setdefault(context, []).append(Attempt(spec.id, failure))
        self.availability.record(spec.id, failure)

    def note_success(self, spec: ModelSpec, response: LLMResponse | None = None) -> None:
        """Record a call on ``spec`` that succeeded (it turns an unavailable model back on).

        When ``response`` carries a CAPACITY reading with both per-minute caps, the entry's
        token bucket takes them (:meth:`~nucleo_trio.admission.RateLimiterRegistry.update_limits`),
        so admission paces to what the provider publishes. Only an entry admitted
        through a bucket is fed: an entry bounded by ``max_concurrent`` is a gate, and one with
        no ``tpm`` was never admitted on tokens.

        The catalog's numbers are the ceiling: a published limit can lower the bucket but never
        raise it above the entry's ``rpm``/``tpm``. Providers do not say which window a limit
        covers (some publish a per-day request limit in the same header), and reading a daily
        figure as a minute's would let admission overrun the real quota.
        """
        # FAC-05: the registry takes the published pair; the catalog caps it.
        self.availability.record(spec.id, None)
        info = response.rate_limit_info if response is not None else None
        if (
            info is None
            or not info.describes_capacity
            or self._accounts is None
            or spec.max_concurrent is not None
            or spec.tpm is None
        ):
            return
        rpm, tpm = info.requests_per_minute, info.tokens_per_minute
        if rpm > 0 and tpm > 0:
            if spec.rpm is not None and spec.rpm > 0:
                rpm = min(rpm, spec.rpm)
            self._accounts.update_limits(spec, rpm, min(tpm, spec.tpm))

    def situation(self, binding: ModelBinding, context: JobContext | None) -> Situation:
        """What the picker is told for ``binding`` in ``context``'s execution."""
        conversation = binding.conversation
        return Situation(
            envelope=self.compliance_envelope,
            depth=binding.depth,
            inputs=binding.inputs,
            carried=conversation.carried_inputs if conversation is not None else frozenset(),
            prior_spec_id=conversation.prior_spec_id if conversation is not None else None,
            attempts=tuple(self._attempts.get(context, ())) if context is not None else (),
        )

    # -- resolution ---------------------------------------------------------------------------------
    def resolve(self, binding: ModelBinding, context: JobContext | None = None) -> ModelSpec:
        """Resolve ``binding`` through the picker and the gate, and answer the entry."""
        situation = self.situation(binding, context)
        self._resolved_once = True
        if binding.kind is ModelKind.EMBEDDINGS:
            spec = self._embeddings_seat(binding, situation)
        elif binding.kind is ModelKind.DECISION:
            decision = binding.pinned_spec or self.picker.decision(situation)
            if decision is None:
                raise ModelResolutionError(
                    "no decision entry: pin one under 'decision' or add a callable decision "
                    "entry whose endpoint serves its wire id",
                    grade="decision",
                )
            self._check(decision, binding, situation, floor=None)
            spec = decision
        elif binding.pinned_spec is not None:
            spec = binding.pinned_spec
            self._check(spec, binding, situation, floor=None)  # MOD-24: no grade floor
        else:
            spec = self._picked(binding, situation)
        binding.resolve(spec)
        return spec

    def _embeddings_seat(self, binding: ModelBinding, situation: Situation) -> ModelSpec:
        """The pin, else the picker's entry; frozen for the runtime once resolved (MOD-12)."""
        wanted = binding.pinned_spec
        if self._embeddings is not None:
            if wanted is not None and wanted != self._embeddings:
                raise UncorrectableError(
                    f"the embeddings seat is frozen to {self._embeddings.id}; a later "
                    f"declaration of {wanted.id} is refused (vectors from two models do not mix)"
                )
            return self._embeddings
        spec = wanted or self.picker.embeddings(situation)
        if spec is None:
            raise ModelResolutionError(
                "no embeddings entry: pin one under 'embeddings' or add a callable embeddings "
                "entry",
                grade="embeddings",
            )
        self._check(spec, binding, situation, floor=None)
        self._embeddings = spec
        return spec

    def _picked(self, binding: ModelBinding, situation: Situation) -> ModelSpec:
        """An unpinned language-model seat: the grade translated, the picker asked, and the
        envelope walk when the envelope refuses its answer (MOD-03, MOD-15, MOD-16)."""
        asked = binding.grade
        assert asked is not None
        picker = self.picker
        ceiling = picker.ceiling()
        if ceiling is None or not ceiling.is_rung:
            raise ModelResolutionError(
                f"no model entry can serve {asked.value} or above: the picker has no ceiling "
                f"({ceiling!r}), so nothing is callable",
                grade=asked.value,
            )
        if asked is Grade.CEILING:
            seat = ceiling
            walk = tuple(reversed(Grade.rungs()[: ceiling.rank + 1]))
        else:
            seat = asked
            if asked.rank > ceiling.rank:
                if asked.value not in self._warned:
                    self._warned.add(asked.value)
                    log.warning(
                        "%s is above what this deployment serves; lowered to the ceiling %s",
                        asked.value,
                        ceiling.value,
                    )
                seat = ceiling
            walk = seat.at_least()
        spec = picker.pick(seat, situation)
        if situation.envelope.permits(spec):
            self._check(spec, binding, situation, floor=seat)
            return spec
        refused = [spec.id]
        for rung in walk:
            try:
                candidate = picker.pick(rung, situation)
            except ModelResolutionError:
                continue
            if situation.envelope.permits(candidate):
                floor = rung if asked is Grade.CEILING else seat
                self._check(candidate, binding, situation, floor=floor)
                return candidate
            if candidate.id not in refused:
                refused.append(candidate.id)
        raise ModelResolutionError(
            f"no model entry can serve {asked.value} or above within the compliance envelope: "
            f"it refuses {', '.join(refused)} (a broken deployment: widen the envelope or "
            "add a permitted entry)",
            grade=asked.value,
        )

    def _check(
        self,
        spec: ModelSpec,
        binding: ModelBinding,
        situation: Situation,
        *,
        floor: Grade | None,
    ) -> None:
        """The gate every answer passes, whichever picker gave it (MOD-14)."""
        if spec.kind is not binding.kind:
            raise UncorrectableError(
                f"{spec.id} is a {spec.kind.value} entry; the seat needs {binding.kind.value}"
            )
        if not situation.envelope.permits(spec):
            raise UncorrectableError(
                f"the compliance envelope refuses {spec.id}: {situation.envelope.refusal(spec)}"
            )
        undeclared = situation.carried - situation.inputs
        if undeclared:
            names = ", ".join(sorted(i.value for i in undeclared))
            raise UncorrectableError(
                f"the conversation carries {names} but the call does not declare it; declare "
                "every input a call sends"
            )
        if not spec.accepts(situation.inputs):
            names = ", ".join(sorted(i.value for i in situation.inputs))
            raise UncorrectableError(f"{spec.id} does not accept the declared inputs ({names})")
        if not spec.is_open:
            raise UncorrectableError(f"{spec.id} is {spec.status.value} and serves no call")
        if floor is not None and spec.grade is not None and spec.grade.rank < floor.rank:
            raise UncorrectableError(
                f"{spec.id} is a {spec.grade.value} entry, below the seat's floor {floor.value}"
            )

    # -- clients ------------------------------------------------------------------------------------
    def provider_client(self, spec: ModelSpec) -> LLMClient:
        """The client ``spec``'s provider built for it: one per entry, built on first use and
        closed when the dispatcher stops. Callers wrap it
        (:class:`~nucleo_trio.llm.clients.ObservableLLMClient`) so each call is recorded on
        the job that made it."""
        delegate = self._clients.get(spec.id)
        if delegate is None:
            provider = self.providers.get(spec.provider_key)
            if provider is None or provider.llm is None:
                raise UncorrectableError(f"{spec.id}: {self.providers.missing(spec.provider_key)}")
            delegate = self._clients[spec.id] = provider.llm(spec)
        return delegate

    def provider_embeddings_client(self, spec: ModelSpec) -> EmbeddingsClient:
        """The embeddings client ``spec``'s provider built for it, as :meth:`provider_client`
        (wrapped by :class:`~nucleo_trio.llm.clients.ObservableEmbeddingsClient`)."""
        delegate = self._embedding_clients.get(spec.id)
        if delegate is None:
            provider = self.providers.get(spec.provider_key)
            if provider is None or provider.embeddings is None:
                raise UncorrectableError(f"{spec.id}: {self.providers.missing(spec.provider_key)}")
            delegate = self._embedding_clients[spec.id] = provider.embeddings(spec)
        return delegate

    async def do_stop(self) -> None:
        """Close every client the providers built, then what the providers hold."""
        closers = [
            getattr(client, "aclose", None)
            for client in [*self._clients.values(), *self._embedding_clients.values()]
        ]
        closers.extend(provider.close for provider in self.providers)
        for close in closers:
            if close is None:
                continue
            try:
                await close()
            except Exception:
                log.exception("closing a model client or provider failed")

    def __repr__(self) -> str:
        state = "catalog loaded" if self._catalog is not None else "catalog not loaded"
        return f"<ModelRuntime {state}, {len(self._spend_gates)} spend gates>"


def binding_accounts(requirements: JobRequirements | None) -> list[RateLimiter]:
    """The accounts the attempt's bindings were assembled on, each once, for the upstream's
    verdict (two bindings on one bucket hear one 429 once)."""
    if requirements is None:
        return []
    accounts: list[RateLimiter] = []
    for binding in requirements.model_bindings:
        if binding.account is not None and all(a is not binding.account for a in accounts):
            accounts.append(binding.account)
    return accounts


class ModelDemandAssembler:
    """Builds an attempt's demand with its model bindings first; the dispatcher uses one.

    For each binding, in declaration order: resolved (picker and gate), priced; then every spend
    gate judges them all; then one entry each, a null amount on the entry's
    :class:`~nucleo_trio.admission.ModelGate` when it declares ``max_concurrent``, else the
    reservation on its token bucket (an entry with no ``tpm`` adds nothing of its own). Bindings
    on one bucket merge into one entry through the demand. A binding always needs the ``http``
    gate, which is added next with the rest of the requirements.
    """

    # JR-02: the order of the demand; JR-06: one bucket, one entry; JR-03: the http gate.
    def __init__(self, runtime: ModelRuntime, accounts: RateLimiterRegistry) -> None:
        self.runtime = runtime
        """The runtime that resolves the bindings and holds the spend gates."""
        self.accounts = accounts
        """The registry that answers each entry's token bucket or gate."""

    def assemble(
        self,
        requirements: JobRequirements,
        context: JobContext,
        http_gate: RateLimiter,
        providers: Sequence[DBResourceProvider] = (),
    ) -> Demand:
        """The attempt's demand: its model bindings' entries first, as above, then the
        ``http`` gate, the custom limiters and the database providers' gates. Resolution and
        the spend gates raise what they raise (a
        :class:`~nucleo_trio.errors.ModelResolutionError`, an
        :class:`~nucleo_trio.errors.UncorrectableError`, a
        :class:`~nucleo_trio.errors.SpendCapExceededError`), before anything is held."""
        if requirements is None or not requirements.model_bindings:
            return demand_of(requirements, http_gate, providers)
        demand = Demand()
        bindings = list(requirements.model_bindings)
        if bindings:
            for binding in bindings:
                self.runtime.resolve(binding, context)
                binding.price()
            for gate in self.runtime.spend_gates:
                gate.admit(context, bindings)
            for binding in bindings:
                spec = binding.model
                if spec.max_concurrent is not None:
                    binding.account = self.accounts.gate(spec)
                    demand.add(binding.account, None)
                elif spec.tpm is not None:
                    binding.account = self.accounts.bucket(spec)
                    demand.add(binding.account, binding.reservation)
        return demand_of(requirements, http_gate, providers, into=demand)
