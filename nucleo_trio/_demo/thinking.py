"""The demo's second act: a thinker works one small objective through the scripted fake model.

Everything here is ordinary user code on the public API. A :class:`Researcher` (a
:class:`~nucleo_trio.llm.Thinker`) answers a question about trio with a ``lookup`` tool over a
tiny glossary and a validation guard that refuses an answer citing no source. The model is a
:class:`~nucleo_trio.llm.ScriptedLLMClient` behind a catalog of two priced entries: it calls the
tool twice in one turn, gets pushed back once by its provider (a 429: the call re-runs and the
entry's token bucket tightens), answers without a source (refused, fed back as a correction),
then answers properly. A :class:`~nucleo_trio.models.CostLedger` on the bus prices every call,
capped per workflow, and the section ends with its ledger.

It runs in virtual time whatever the demo's clock, even with ``--real-time``, in a dispatcher of
its own, so the first act's numbers stay exactly as they were, and the section says so. On the
real clock it would show nothing more: its one wait is the provider's push-back (about 13 s),
which would only hold the terminal still, and a scripted model answers at once anyway.
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import attrs
import trio
import trio.testing

from ..bus import events as ev
from ..dispatch import DispatcherConfig, open_dispatcher
from ..dispatch.config import MemoryConfig
from ..errors import GuardrailError, RateLimitRetry, UpstreamFailure
from ..guardrails import ValidationGuardrail
from ..jobs import Identifiable, JobContext, Tool, workflow
from ..llm import (
    Role,
    ScriptedLLMClient,
    Thinker,
    ThinkerDeclaration,
    ToolCall,
    reply,
    scripted,
)
from ..llm.thinker import FINAL_ANSWER
from ..models import (
    Call,
    Cost,
    CostLedger,
    Grade,
    ModelCatalog,
    ModelRuntime,
    OutputSize,
    Providers,
)
from .render import WIDTH, Style

__all__ = ["OBJECTIVE", "ThinkerOutcome", "render_thinker_section", "run_thinker"]

OBJECTIVE = "What does a trio nursery do? Answer in one sentence and cite your source."
CAP = Cost(Decimal("0.01"), "USD")

_GLOSSARY = {
    "nursery": "A nursery owns the tasks started in it and waits for all of them to finish.",
    "cancel scope": "A cancel scope cancels everything inside it, at once or at a deadline.",
}

_CATALOG = {
    "provider_defaults": {"fake-llm": {"currency": "USD"}},
    "models": [
        {
            "id": "demo-small",
            "grade": "SMALL",
            "provider_key": "fake-llm",
            "max_context_tokens": 32_000,
            "max_output_tokens": 4_096,
            "tpm": 40_000,
            "rpm": 60,
            "input_price_per_million": "0.15",
            "output_price_per_million": "0.60",
        },
        {
            "id": "demo-large",
            "grade": "LARGE",
            "provider_key": "fake-llm",
            "max_context_tokens": 128_000,
            "max_output_tokens": 16_384,
            "tpm": 200_000,
            "rpm": 100,
            "input_price_per_million": "2.50",
            "output_price_per_million": "10.00",
        },
    ],
    "pins": {"SMALL": ["demo-small"], "LARGE": ["demo-large"]},
}


class Lookup(Tool[str]):
    """Looks a term up in the glossary."""

    tool_name = "lookup"
    parameters = {
        "type": "object",
        "properties": {"term": {"type": "string"}},
        "required": ["term"],
    }

    def __init__(self, parent: Identifiable) -> None:
        super().__init__(parent)
        self.timeout = 10.0
        self.input: dict[str, Any] = {}

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(0.2)
        term = str(self.input.get("term", "")).lower()
        return _GLOSSARY.get(term, f"The glossary has no entry for {term!r}.")


class CitesItsSource(ValidationGuardrail):
    """Refuses an answer that does not cite its source."""

    async def validate(self, target: Any) -> None:
        if "(source:" not in str(target):
            raise GuardrailError("the answer must cite its source, as (source: ...)")


class Researcher(Thinker[str]):
    """Answers a question with the glossary; its answers must cite their source."""

    def validation_guardrails(self) -> list[ValidationGuardrail]:
        return [CitesItsSource(self)]


def _call(call_id: str, name: str, **arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def _script() -> list[Any]:
    """The model's part, turn by turn."""
    unsourced = "A nursery runs the tasks started in it and waits for all of them to finish."
    return [
        reply(
            tool_calls=[
                _call("c1", "lookup", term="nursery"),
                _call("c2", "lookup", term="cancel scope"),
            ]
        ),
        RateLimitRetry(
            "the provider answered 429 Too Many Requests",
            retry_after=3.0,
            failure=UpstreamFailure(429, "fake-llm", "429 Too Many Requests", retry_after=3.0),
        ),
        reply(tool_calls=[_call("c3", FINAL_ANSWER, answer=unsourced)]),
        reply(
            tool_calls=[_call("c4", FINAL_ANSWER, answer=unsourced[:-1] + " (source: glossary).")]
        ),
    ]


@attrs.frozen
class ThinkerOutcome:
    """What the thinker's run left: its answer, its story, the ledger and the clock."""

    answer: str | None
    story: tuple[tuple[str, str], ...]
    calls: tuple[Call, ...]
    spent: Cost
    model: str
    elapsed: float


def run_thinker(seed: int, *, verbose: bool = False) -> ThinkerOutcome:
    """Run the thinker in virtual time and answer what happened. The runtime's own logs (the
    429, the refusal) stay off the terminal unless ``verbose``: the section tells them."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    logger = logging.getLogger("nucleo_trio")
    previous = logger.level
    if not verbose:
        logger.setLevel(logging.CRITICAL)
    try:
        result: ThinkerOutcome = trio.run(_run, seed, clock=clock)
    finally:
        logger.setLevel(previous)
    return result


async def _run(seed: int) -> ThinkerOutcome:
    catalog = ModelCatalog.from_mapping(_CATALOG, source="the demo catalog")
    providers = Providers({})
    providers.register(scripted("fake-llm", {"demo-small": ScriptedLLMClient(_script())}))
    models = ModelRuntime(catalog, providers=providers)
    retries: list[ev.RateLimitRetryEvent] = []
    async with open_dispatcher(
        DispatcherConfig(seed=seed, memory=MemoryConfig(enabled=False)), models=models
    ) as dispatcher:
        ledger = CostLedger(catalog).attach(dispatcher)
        dispatcher.bus.subscribe(retries.append, event_type=ev.RateLimitRetryEvent)
        root = workflow("demo-user", "research")
        ledger.cap(root.workflow_id, CAP)
        thinker = Researcher(
            root,
            ThinkerDeclaration(Grade.SMALL, OutputSize.COMPACT),
            OBJECTIVE,
            system="You answer questions about trio from the glossary.",
            tools=[Lookup],
        )
        started = trio.current_time()
        answer = await dispatcher.submit(thinker).result()
        elapsed = trio.current_time() - started
    spend = ledger.workflow(root.workflow_id)
    calls = tuple(spend.calls) if spend is not None else ()
    return ThinkerOutcome(
        answer=answer,
        story=tuple(_story(thinker, retries)),
        calls=calls,
        spent=ledger.spent(root.workflow_id, "USD"),
        model=catalog.spec("demo-small").id,
        elapsed=elapsed,
    )


def _story(thinker: Researcher, retries: Sequence[ev.RateLimitRetryEvent]) -> list[tuple[str, str]]:
    """One line per thing that happened, read back from the conversation and the bus."""
    conversation = thinker.conversation
    assert conversation is not None
    story: list[tuple[str, str]] = []
    turn = 0
    for item in conversation.turns:
        message = item.message
        if message.role is Role.ASSISTANT:
            turn += 1
            tools = [c for c in message.tool_calls if c.name != FINAL_ANSWER]
            if tools:
                called = ", ".join(f"{c.name}({c.parsed_arguments().get('term')})" for c in tools)
                story.append((f"turn {turn}", f"the model calls {called}: two jobs, run together"))
            else:
                story.append((f"turn {turn}", "the model gives its final answer"))
            if turn == 1 and retries:
                delay = retries[0].delay or 0.0
                story.append(
                    ("429", f"the provider pushes back: the next call re-runs after {delay:.1f} s")
                )
        elif message.role is Role.USER and message.content.startswith("Guardrail violation:"):
            refusal = message.content.splitlines()[0].removeprefix("Guardrail violation: ")
            story.append(("", f"refused by the validation guard: {refusal}"))
    story.append(("", "accepted; the thinker's conversation is released at its teardown"))
    return story


_CLOCK_NOTE = "virtual time, even with --real-time: a mock clock skips the provider's push-back"
"""What the section says of its clock: the thinker always runs on a ``MockClock``."""


def render_thinker_section(outcome: ThinkerOutcome, style: Style) -> str:
    """The thinker's story, then the spend ledger."""
    lines = [
        style.bold("A thinker at work")
        + style.dim("  (a Thinker, its LLM calls and tool jobs, on a scripted fake model)"),
        f"  objective  {OBJECTIVE}",
        f"  model      SMALL resolves to {outcome.model} (pinned for SMALL, 0.15/0.60 USD per M)",
        f"  clock      {_CLOCK_NOTE}",
    ]
    for label, text in outcome.story:
        lines.append(f"  {label:<9}  {text}")
    lines.extend(
        textwrap.wrap(
            str(outcome.answer),
            WIDTH,
            initial_indent="  answer     ",
            subsequent_indent=" " * 13,
        )
    )
    lines.append("")
    lines.append(
        style.bold("Spend ledger")
        + style.dim(
            f"  (a CostLedger on the bus prices every call; the workflow is capped at {CAP})"
        )
    )
    lines.append(f"  {'call':<24}{'model':<13}{'in':>6}{'out':>6}  {'cost':<16}outcome")
    for number, call in enumerate(outcome.calls, 1):
        cost = str(call.cost) if call.cost is not None else "unpriced"
        result = "ok" if call.successful else "failed (429)"
        lines.append(
            f"  {f'#{number} {call.job_name}':<24.24}{call.model_id:<13}"
            f"{call.input_tokens:>6}{call.output_tokens:>6}  {cost:<16}{result}"
        )
    lines.append(
        f"  Spent {outcome.spent} of {CAP} in {len(outcome.calls)} calls, "
        f"{outcome.elapsed:.1f} s of virtual time on its mock clock."
    )
    return "\n" + "\n".join(lines)
