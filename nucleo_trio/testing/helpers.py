"""What the fixtures are made of: an event recorder, ``settle``, a scripted-LLM factory, a seed.

They need no pytest, so a test written without the plugin can use them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import trio.testing

from ..bus import events as ev
from ..llm.clients import LLMRequest, ScriptedLLMClient
from ..llm.clients.scripted import LLMStep

__all__ = ["DEFAULT_SEED", "EventRecorder", "ScriptedLLMFactory", "settle"]

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

    def __call__(self, event: ev.JobEvent) -> None:
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


class ScriptedLLMFactory:
    """Builds :class:`~nucleo_trio.llm.clients.ScriptedLLMClient` objects and keeps them.

    ``scripted_llm([reply("hello")])`` takes the client's own arguments; ``clients`` lists every
    client built in the test, so the test can read back the requests each one was sent.
    """

    def __init__(self) -> None:
        self.clients: list[ScriptedLLMClient] = []

    def __call__(
        self,
        steps: Iterable[LLMStep] = (),
        *,
        responder: Callable[[LLMRequest], Any] | None = None,
        model: str = "scripted-model",
        latency: float = 0.0,
    ) -> ScriptedLLMClient:
        client = ScriptedLLMClient(steps, responder=responder, model=model, latency=latency)
        self.clients.append(client)
        return client

    def __repr__(self) -> str:
        return f"<ScriptedLLMFactory {len(self.clients)} clients>"
