"""Spend: the ledger of every model call, and the gates that cap new work by it.

A :class:`SpendGate` is consulted once per attempt, after every binding is resolved and priced
and before anything is held: it sees the priced bindings and refuses by
raising :class:`~nucleo_trio.errors.SpendCapExceededError`. A refusal fails only the attempt that
asked; nothing already running is ever stopped.

:class:`CostLedger` is both a bus observer and a spend gate. As an observer it
hears every terminal event and prices each LLM response the job recorded, failed jobs included,
per workflow and per currency. As a gate it refuses a reservation that would carry a capped
workflow past its cap, counting what its siblings have in flight: every admitted reservation
stays committed until that job's terminal event, when the real cost replaces it. Attach one to a
dispatcher with :meth:`CostLedger.attach`::

    ledger = CostLedger(dispatcher.models.catalog).attach(dispatcher)
    ledger.cap(root.workflow_id, Cost(Decimal("0.50"), "USD"))

A reply whose provider reported no token usage is booked all the same, at the estimate its
response carries (an :class:`~nucleo_trio.llm.LLMCall`'s is its reservation, the most the call
could cost), and its :class:`Call` is marked ``estimated``; the ledger warns once per model
that its calls are being estimated, so a cap keeps capping and nobody reads a guess as a bill.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ..bus.events import AbstractTerminalEvent, JobEvent
from ..bus.observers import JobObserver
from ..errors import SpendCapExceededError
from .pricing import Cost

if TYPE_CHECKING:
    from ..dispatch.dispatcher import JobDispatcher
    from ..jobs.context import JobContext
    from .binding import ModelBinding
    from .catalog import ModelCatalog, ModelSpec

__all__ = ["UNKNOWN_MODEL", "Call", "CostLedger", "SpendGate", "WorkflowSpend"]

log = logging.getLogger("nucleo_trio.models.spend")

UNKNOWN_MODEL = "(unknown)"
"""The model id a response with none is recorded under."""


@runtime_checkable
class SpendGate(Protocol):
    """Judges an attempt's priced bindings before anything is held; raise to refuse."""

    def admit(self, context: JobContext, priced: Sequence[ModelBinding]) -> None:
        """Return to let the attempt on; raise SpendCapExceededError to refuse it."""
        ...


@attrs.frozen
class Call:
    """One recorded model call. ``cost`` is ``None`` for an unpriced model.

    ``estimated`` is true when the provider reported no usage: the tokens (and so the cost) are
    the estimate the response carried, never a zero.
    """

    job_id: str
    """The id of the job that made the call."""
    job_name: str
    """The name of that job."""
    model_id: str
    """The model the response says the call was made for (a catalog id, or a wire id the
    ledger matched to an entry), or ``"(unknown)"`` when it names none."""
    served_model_id: str | None
    """The model the provider said served the call (a dated version, say), or ``None`` when it
    said nothing."""
    input_tokens: int
    """Input tokens, as the provider reported them (or as estimated)."""
    output_tokens: int
    """Output tokens, thinking included, as reported (or as estimated)."""
    cache_read_tokens: int
    """Input tokens read from the provider's prompt cache; 0 when the usage reports none."""
    cache_write_tokens: int
    """Input tokens written to the provider's prompt cache; 0 when the usage reports none."""
    latency: float | None
    """Seconds from the call's start to its end, or ``None`` when either is unknown."""
    successful: bool
    """Whether the call returned an answer; failed calls are recorded too."""
    cost: Cost | None
    """What the call cost at its entry's prices; ``None`` when the catalog has no entry for
    the model or the entry is unpriced."""
    estimated: bool = False
    """Whether the tokens, and so the cost, are an estimate. Default false."""


@attrs.define
class WorkflowSpend:
    """What one workflow has spent: its calls, and the total per currency."""

    workflow_id: str
    """The id of the workflow."""
    calls: list[Call] = attrs.field(factory=list)
    """Every call recorded for it, in the order the ledger heard of them."""
    totals: dict[str, Cost] = attrs.field(factory=dict)
    """The cost of its priced calls, by currency code; unpriced calls add nothing."""

    def spent(self, currency: str) -> Cost:
        """The total in ``currency``; zero when no priced call was in it."""
        return self.totals.get(currency, Cost.zero(currency))

    @property
    def estimated(self) -> bool:
        """Whether any of its calls is booked at an estimate (its provider reported no usage)."""
        return any(call.estimated for call in self.calls)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class CostLedger(JobObserver[JobEvent]):
    """Records every model call by workflow, and caps spend per workflow and currency.

    ``catalog`` prices what it records (a callable answering the catalog is accepted too, so a
    ledger built before the catalog loads reads it at its first event).
    """

    def __init__(self, catalog: ModelCatalog | Callable[[], ModelCatalog]) -> None:
        self._catalog = catalog
        self._workflows: dict[str, WorkflowSpend] = {}
        self._caps: dict[str, dict[str, Cost]] = {}
        self._committed: dict[str, dict[str, Cost]] = {}  # job id -> currency -> reserved
        self._workflow_of: dict[str, str] = {}  # job id -> workflow id, while committed
        self._warned: set[str] = set()  # models without a catalog entry, warned of
        self._estimating: set[str] = set()  # models whose calls are booked at an estimate

    @property
    def catalog(self) -> ModelCatalog:
        """The catalog the ledger prices by (the callable's answer, when built with one)."""
        return self._catalog if not callable(self._catalog) else self._catalog()

    def attach(self, dispatcher: JobDispatcher) -> CostLedger:
        """Subscribe to ``dispatcher``'s terminal events and register as its spend gate."""
        dispatcher.bus.subscribe(self, event_type=AbstractTerminalEvent)
        dispatcher.register_spend_gate(self)
        return self

    # -- recording (OBS-28) -----------------------------------------------------------------------
    async def on_event(self, event: JobEvent) -> None:
        self.record(event)

    def record(self, event: JobEvent) -> None:
        """Record a terminal event's responses and release its job's commitment."""
        if not isinstance(event, AbstractTerminalEvent) or event.snapshot is None:
            return
        snapshot = event.snapshot
        self._committed.pop(snapshot.job_id, None)
        self._workflow_of.pop(snapshot.job_id, None)
        for response in event.llm_responses:
            self._record_response(snapshot.workflow_id, snapshot.job_id, snapshot.name, response)

    def _record_response(self, workflow_id: str, job_id: str, job_name: str, response: Any) -> None:
        model_id = getattr(response, "model", None) or UNKNOWN_MODEL
        usage = getattr(response, "usage", None)
        input_tokens = _int(getattr(usage, "input_tokens", 0))
        output_tokens = _int(getattr(usage, "output_tokens", 0))
        cache_read = _int(getattr(usage, "cache_read_tokens", 0))
        cache_write = _int(getattr(usage, "cache_write_tokens", 0))
        estimated = getattr(usage, "estimated", False) is True
        if estimated and model_id not in self._estimating:
            self._estimating.add(model_id)
            log.warning(
                "%s reported no token usage; its calls are booked at an estimate (the call's "
                "reservation, or the text's length) and marked estimated",
                model_id,
            )
        spec = self._spec_for(model_id)
        cost = (
            None
            if spec is None
            else Cost.of(spec, input_tokens, cache_write, cache_read, output_tokens)
        )
        call = Call(
            job_id=job_id,
            job_name=job_name,
            model_id=model_id,
            served_model_id=getattr(response, "provider_model", None),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            latency=getattr(response, "duration", None),
            successful=bool(getattr(response, "successful", True)),
            cost=cost,
            estimated=estimated,
        )
        spend = self._workflows.setdefault(workflow_id, WorkflowSpend(workflow_id))
        spend.calls.append(call)
        if cost is not None:
            spend.totals[cost.currency] = spend.spent(cost.currency).plus(cost)

    def _spec_for(self, model_id: str) -> ModelSpec | None:
        if model_id == UNKNOWN_MODEL:
            return None
        catalog = self.catalog
        spec = catalog.find_spec(model_id)
        if spec is None:
            spec = next((e for e in catalog if e.wire_model_id == model_id), None)
        if spec is None and model_id not in self._warned:
            self._warned.add(model_id)
            log.warning("the catalog has no entry %r; its calls are recorded unpriced", model_id)
        return spec

    # -- views --------------------------------------------------------------------------------------
    def workflow(self, workflow_id: str) -> WorkflowSpend | None:
        """The workflow's record; ``None`` until a response of it is recorded."""
        return self._workflows.get(workflow_id)

    def spent(self, workflow_id: str, currency: str) -> Cost:
        """What the workflow has spent in ``currency``; zero to begin with."""
        spend = self._workflows.get(workflow_id)
        return spend.spent(currency) if spend is not None else Cost.zero(currency)

    def in_flight(self, workflow_id: str, currency: str) -> Cost:
        """What the workflow's admitted jobs still have reserved in ``currency``."""
        total = Cost.zero(currency)
        for job_id, reserved in self._committed.items():
            if self._workflow_of.get(job_id) == workflow_id and currency in reserved:
                total = total.plus(reserved[currency])
        return total

    @property
    def workflows(self) -> Mapping[str, WorkflowSpend]:
        """Every workflow with a recorded response, by workflow id; read-only."""
        return MappingProxyType(self._workflows)

    # -- caps (OBS-29) -----------------------------------------------------------------------------
    def cap(self, workflow_id: str, cost: Cost) -> None:
        """Cap the workflow's spend in ``cost``'s currency; one cap per currency. The ledger
        never lowers a cap: a lower cap than the one set is ignored with a warning (uncap and
        cap again to lower one)."""
        if not isinstance(cost, Cost):
            raise TypeError(f"cap() takes a Cost, got {type(cost).__name__}")
        caps = self._caps.setdefault(workflow_id, {})
        present = caps.get(cost.currency)
        if present is not None and present.exceeds(cost):
            log.warning(
                "workflow %s keeps its cap of %s; the ledger never lowers a cap (asked %s)",
                workflow_id,
                present,
                cost,
            )
            return
        caps[cost.currency] = cost

    def caps(self, workflow_id: str) -> tuple[Cost, ...]:
        """The workflow's caps, one per currency; empty when it has none."""
        return tuple(self._caps.get(workflow_id, {}).values())

    def uncap(self, workflow_id: str) -> None:
        """Remove every cap of the workflow, so it is no longer gated; what it spent stays
        recorded."""
        self._caps.pop(workflow_id, None)

    def admit(self, context: JobContext, priced: Sequence[ModelBinding]) -> None:
        """Refuse an attempt whose reservation would carry its workflow past a cap, counting
        what its siblings have in flight; a workflow with no cap is not gated. Admitted, the
        reservation stays committed until the job's terminal event."""
        workflow_id = context.workflow_id
        caps = self._caps.get(workflow_id)
        if not caps:
            return
        reserved: dict[str, Cost] = {}
        for binding in priced:
            spec = binding.model
            cost = Cost.reserved(spec, binding.input_reservation, binding.output_reservation)
            if cost is None:
                raise SpendCapExceededError(
                    f"workflow {workflow_id} is spend-capped and {spec.id} is unpriced, so its "
                    "cost cannot be judged",
                    llm_message="The budget cannot cover this model call.",
                )
            if cost.currency not in caps:
                raise SpendCapExceededError(
                    f"workflow {workflow_id} has no cap in {cost.currency}, the currency of "
                    f"{spec.id} (caps: {', '.join(str(c) for c in caps.values())})",
                    llm_message="The budget cannot cover this model call.",
                )
            reserved[cost.currency] = reserved.get(cost.currency, Cost.zero(cost.currency)).plus(
                cost
            )
        job_id = context.job_id
        for currency, reservation in reserved.items():
            cap = caps[currency]
            spent = self.spent(workflow_id, currency)
            flight = self._in_flight_excluding(workflow_id, currency, job_id)
            if spent.plus(flight).plus(reservation).exceeds(cap):
                raise SpendCapExceededError(
                    f"workflow {workflow_id} would pass its cap of {cap}: spent {spent}, in "
                    f"flight {flight}, this reservation {reservation}",
                    llm_message="The workflow's budget for model calls is spent.",
                )
        self._committed[job_id] = reserved
        self._workflow_of[job_id] = workflow_id

    def _in_flight_excluding(self, workflow_id: str, currency: str, job_id: str) -> Cost:
        # A re-run's fresh reservation replaces the job's own earlier one.
        total = Cost.zero(currency)
        for other, reserved in self._committed.items():
            if other != job_id and self._workflow_of.get(other) == workflow_id:
                total = total.plus(reserved.get(currency, Cost.zero(currency)))
        return total

    def __repr__(self) -> str:
        return f"<CostLedger {len(self._workflows)} workflows, {len(self._committed)} in flight>"
