"""What the fixtures are made of: an event recorder, ``settle``, a scripted-LLM factory, a seed.

They need no pytest, so a test written without the plugin can use them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import trio.testing

from ..bus import events as ev
from ..errors import UncorrectableError
from ..llm.clients import LLMRequest, LLMResponse, ScriptedLLMClient
from ..llm.clients.scripted import LLMStep
from ..models import Grade, ModelCatalog, ModelSpec, Provider

__all__ = ["DEFAULT_SEED", "SCRIPTED_PROVIDER", "EventRecorder", "ScriptedLLMFactory", "settle"]

DEFAULT_SEED = 7
"""The seed of the fixture dispatcher's re-run pacing, so jittered pauses repeat run to run."""

E = TypeVar("E", bound=ev.JobEvent)


async def settle() -> None:
    """Let every task run until all of them are blocked: published events are delivered, parked
    waiters are parked, a job that can run has run as far as it can without time passing.

    Under the autojump clock this returns before the clock jumps, so it never moves time.
    """
    await trio.testing.wait_all_tasks_blocked()


class EventRecorder:
    """Keeps every event the bus delivers to it, in delivery order.

    Subscribe it with ``dispatcher.bus.subscribe(recorder)``; ``events`` is the whole record,
    :meth:`of` one job's share, :meth:`typed` one kind. Events are delivered by the bus's own
    task, so ``await recorder.settle()`` before reading what a job just published.
    """

    def __init__(self) -> None:
        self.events: list[ev.JobEvent] = []
        """Every event delivered so far, oldest first."""

    def __call__(self, event: ev.JobEvent) -> None:
        """Keep ``event``: the bus calls this for each event it delivers."""
        self.events.append(event)

    def of(self, job_id: str, *, limiter: bool = False) -> list[ev.JobEvent]:
        """The events about job ``job_id``; its per-account limiter events only with
        ``limiter=True`` (there is one per account per transition, which drowns the rest)."""
        return [
            event
            for event in self.events
            if event.snapshot is not None
            and event.snapshot.job_id == job_id
            and (limiter or not isinstance(event, ev.LimiterEvent))
        ]

    def names(self, job_id: str) -> list[str]:
        """The class names of :meth:`of`, the shortest way to assert an order of events."""
        return [type(event).__name__ for event in self.of(job_id)]

    def typed(self, kind: type[E]) -> list[E]:
        """Every event that is an instance of ``kind`` (a class or a family), in order."""
        return [event for event in self.events if isinstance(event, kind)]

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self.events.clear()

    async def settle(self) -> None:
        """:func:`settle`: let the bus deliver what has been published."""
        await settle()

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return f"<EventRecorder {len(self.events)} events>"


SCRIPTED_PROVIDER = "scripted"
"""The provider key of the entries :meth:`ScriptedLLMFactory.catalog` lists and
:meth:`ScriptedLLMFactory.provider` serves."""

_GRADES = (Grade.MICRO, Grade.SMALL, Grade.MEDIUM, Grade.LARGE, Grade.XL, Grade.MEGA)


class ScriptedLLMFactory:
    """Builds :class:`~nucleo_trio.llm.clients.ScriptedLLMClient` objects and keeps them.

    ``scripted_llm([reply("hello")])`` takes the client's own arguments; ``clients`` lists every
    client built in the test, so the test can read back the requests each one was sent.

    It can also stand in for a deployment's models. :meth:`catalog` is a catalog of one free
    entry per grade (``scripted-micro`` … ``scripted-mega``, provider ``"scripted"``) and
    :meth:`provider` the provider that answers them: a client built with ``entry="<id>"``
    answers that entry, and every other entry is answered by the latest client built without
    one. The ``nucleo_dispatcher`` fixture installs both when a test asks for this one too (the
    catalog only when the configuration names none), so a thinker or an ``LLMCall`` submitted
    to it talks to the script.
    """

    provider_key = SCRIPTED_PROVIDER
    """The provider key this factory's provider serves."""

    def __init__(self) -> None:
        self.clients: list[ScriptedLLMClient] = []
        """Every client built so far, in the order they were built."""
        self._by_entry: dict[str, ScriptedLLMClient] = {}
        self._default: ScriptedLLMClient | None = None

    def __call__(
        self,
        steps: Iterable[LLMStep] = (),
        *,
        responder: Callable[[LLMRequest], Any] | None = None,
        model: str = "scripted-model",
        latency: float = 0.0,
        entry: str | None = None,
    ) -> ScriptedLLMClient:
        """A new client playing ``steps`` (or ``responder``), kept in :attr:`clients`; with
        ``entry``, the one that answers that catalog entry through :meth:`provider`."""
        client = ScriptedLLMClient(steps, responder=responder, model=model, latency=latency)
        self.clients.append(client)
        if entry is None:
            self._default = client
        else:
            self._by_entry[entry] = client
        return client

    def client_for(self, entry: str) -> ScriptedLLMClient:
        """The client answering the catalog entry ``entry`` now; an :class:`UncorrectableError`
        saying what to build when there is none."""
        client = self._by_entry.get(entry, self._default)
        if client is None:
            raise UncorrectableError(
                f"no scripted client answers the model entry {entry!r}: build one with "
                f"scripted_llm([...]) (or scripted_llm([...], entry={entry!r})) before the call"
            )
        return client

    def provider(self) -> Provider:
        """The provider (key :attr:`provider_key`) whose clients ask :meth:`client_for` on every
        call, so a client built after the first call still answers the next one."""
        return Provider(self.provider_key, llm=lambda spec: _Relay(self, spec))

    def catalog(self) -> ModelCatalog:
        """A catalog of one free entry per grade, each served by :meth:`provider`: a
        128,000-token context and 16,384 output tokens."""
        return ModelCatalog.from_mapping(
            {
                "models": [
                    {
                        "id": f"scripted-{grade.value.lower()}",
                        "grade": grade.value,
                        "provider_key": self.provider_key,
                        "max_context_tokens": 128_000,
                        "max_output_tokens": 16_384,
                    }
                    for grade in _GRADES
                ]
            },
            source="the scripted_llm catalog",
        )

    def __repr__(self) -> str:
        return f"<ScriptedLLMFactory {len(self.clients)} clients>"


class _Relay:
    """The client the runtime keeps for one entry: each call goes to the factory's client for
    that entry at the time of the call."""

    def __init__(self, factory: ScriptedLLMFactory, spec: ModelSpec) -> None:
        self._factory = factory
        self._spec = spec

    @property
    def model_identifier(self) -> str | None:
        return self._spec.wire_model_id

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self._factory.client_for(self._spec.id).complete(request)

    async def stream(self, request: LLMRequest, on_text: Callable[[str], object]) -> LLMResponse:
        return await self._factory.client_for(self._spec.id).stream(request, on_text)
