"""Conversations: what a thinker and its model calls say to each other, owned by one job at a time.

A :class:`Conversation` is the system prompt, the objective and the turns so far, with the output
size every call on it declares. It is what a wired :class:`~nucleo_trio.models.ModelBinding` is
priced from (its tokens under the resolved entry, plus the next call's output budget) and what an
:class:`~nucleo_trio.llm.LLMCall` turns into a request.

Each turn remembers what its call asked for: ``requested_output_tokens`` (raised to the model's
ceiling after a truncation, so the re-run reserves the larger budget) and the response handler
that reads the reply. A correction is one more user turn that keeps both.

Only one job owns a conversation at a time: :meth:`Conversation.acquire` waits up to
30 seconds for the owner to let go, and the owner's teardown releases it
(``JobContext.release_conversations``). A conversation is temporary unless
:meth:`Conversation.mint_conversation_id` makes it durable; a durable one is kept in its
dispatcher's :class:`ConversationStore` when released, so a later job, a heartbeat's fire
included, can resume it by id (:class:`ConversationCarrier`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import ResourceNotFoundError, UncorrectableError
from ..jobs.carrier import ConversationCarrier
from ..jobs.identity import mint_id
from ..models.binding import OutputDeclaration
from ..models.grades import Grade, Input, OutputSize
from .clients import LLMRequest, LLMResponse, Message, OutputSchema, Role, ToolSpec

if TYPE_CHECKING:
    from ..dispatch.dispatcher import JobDispatcher
    from ..jobs.context import JobContext
    from ..models.catalog import ModelSpec

__all__ = [
    "OWNERSHIP_WAIT",
    "Conversation",
    "ConversationCarrier",
    "ConversationStore",
    "Turn",
    "conversation_store",
]

log = logging.getLogger("nucleo_trio.llm.conversation")

OWNERSHIP_WAIT = 30.0
"""Seconds a job waits for another job to release a conversation: 30."""


@attrs.frozen
class Turn:
    """One turn and what its call asked for: the output budget, and the reply's reader."""

    message: Message
    """What the turn says, as the model reads it."""
    requested_output_tokens: int | None = None
    """The output budget, in tokens, the call sending this turn asks for; ``None`` leaves it to
    the conversation's declared output."""
    response_handler: Any = None
    """The :class:`~nucleo_trio.llm.ResponseHandler` that reads the reply to this turn, or
    ``None``."""


class Conversation:
    """The turns of one conversation with a model, and who owns it now.

    ``system`` is the system prompt. ``output`` is the size every call on it declares, an
    :class:`~nucleo_trio.models.OutputSize` rung or a token count (mandatory before the first
    call: a conversation that declares none fails when it is priced). ``grade`` is the grade its
    calls ask for, read and written by the calls themselves. ``inputs`` are what it carries
    besides text (images, documents). ``conversation_id`` resumes a known id and makes the
    conversation durable.
    """

    # TOOL-23: the grade lives on the conversation; TOOL-37: an output size is mandatory.

    def __init__(
        self,
        *,
        system: str | None = None,
        output: OutputDeclaration | OutputSize | int | None = None,
        grade: Grade | None = None,
        inputs: frozenset[Input] | set[Input] = frozenset(),
        conversation_id: str | None = None,
    ) -> None:
        self.id = conversation_id or mint_id("conversation")
        """The conversation's id: ``conversation_id`` when given, else a fresh one."""
        self.durable = conversation_id is not None
        """Whether the conversation is kept in its dispatcher's store when released, so a later
        job can resume it by id: true when built with an id, or after
        :meth:`mint_conversation_id`."""
        self.system = system
        """The system prompt every call sends first, or ``None`` for none."""
        self.output = None if output is None else OutputDeclaration.of(output)
        """The output size every call declares, or ``None`` while none is declared (a call
        then fails when it is priced)."""
        self.grade = grade
        """The grade the calls on this conversation ask for, or ``None``; an
        :class:`~nucleo_trio.llm.LLMCall` given a grade sets it here."""
        self.carried = frozenset(inputs)
        """What the conversation carries besides text (images, documents); empty by default."""
        self.prior_spec_id: str | None = None
        """The id of the model entry the last call used, ``None`` before the first; the picker
        may stay with it."""
        self._objective: str | None = None
        self._sent = False
        self._turns: list[Turn] = []
        self._owner: JobContext | None = None
        self._released: trio.Event | None = None
        self._store: ConversationStore | None = None

    # -- identity -----------------------------------------------------------------------------
    def mint_conversation_id(self) -> str:
        """Make this conversation durable and answer its id; once released, a later job can
        resume it by that id."""
        self.durable = True
        return self.id

    # -- the objective ----------------------------------------------------------------------------
    @property
    def objective(self) -> str | None:
        """What the conversation is for, sent as the first user message; ``None`` until
        :meth:`put_objective` states it."""
        return self._objective

    def put_objective(self, text: str) -> None:
        """State what the conversation is for; it freezes at the first send. Later, the same
        text is a no-op and another text is ignored and logged as an error. Blank text is a
        :class:`ValueError`."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"an objective is non-blank text, got {text!r}")
        if self._sent and self._objective is not None:
            if text != self._objective:
                log.error(
                    "conversation %s: the objective is frozen after the first send; ignoring "
                    "a different one (%r)",
                    self.id,
                    text[:80],
                )
            return
        self._objective = text

    # -- turns --------------------------------------------------------------------------------------
    @property
    def turns(self) -> tuple[Turn, ...]:
        """The turns so far, oldest first (the system prompt and the objective are not turns)."""
        return tuple(self._turns)

    def __len__(self) -> int:
        return len(self._turns)

    def __iter__(self) -> Iterator[Turn]:
        return iter(self._turns)

    def add_user(
        self,
        text: str,
        *,
        requested_output_tokens: int | None = None,
        response_handler: Any = None,
    ) -> Turn:
        """Append a user turn; it may ask for an output budget and name its reply's reader."""
        turn = Turn(Message.user(text), requested_output_tokens, response_handler)
        self._turns.append(turn)
        return turn

    def add_assistant(self, response: LLMResponse) -> None:
        """Append the model's turn: its text and the tools it called."""
        self._turns.append(Turn(Message.assistant(response.content, response.tool_calls)))

    def add_tool_result(self, call_id: str, text: str) -> None:
        """Append the result of tool call ``call_id``, as the model will read it."""
        self._turns.append(Turn(Message.tool_result(call_id, text)))

    def add_correction(self, explanation: str) -> Turn:
        """Append a correction: a user turn with the explanation, keeping the last user turn's
        response handler and requested output. A blank explanation is a :class:`ValueError`."""
        # TOOL-25: a correction keeps the handler and the requested output.
        if not isinstance(explanation, str) or not explanation.strip():
            raise ValueError("a correction carries a non-empty explanation")
        last = self.last_user_turn()
        return self.add_user(
            explanation,
            requested_output_tokens=None if last is None else last.requested_output_tokens,
            response_handler=None if last is None else last.response_handler,
        )

    def last_user_turn(self) -> Turn | None:
        """The latest user turn (a correction included), or ``None`` when there is none."""
        for turn in reversed(self._turns):
            if turn.message.role is Role.USER:
                return turn
        return None

    def escalate_output(self, tokens: int) -> None:
        """Set the requested output of the outgoing turn (the latest turn that is not the
        model's) to ``tokens``, so a re-run after a truncation reserves the larger budget. With
        no such turn, a ``Continue.`` user turn is added to carry it."""
        # TOOL-28: the truncation re-run reserves the raised budget.
        for index in range(len(self._turns) - 1, -1, -1):
            turn = self._turns[index]
            if turn.message.role is not Role.ASSISTANT:
                self._turns[index] = attrs.evolve(turn, requested_output_tokens=tokens)
                return
        self.add_user("Continue.", requested_output_tokens=tokens)

    # -- what the binding reads ---------------------------------------------------------------------
    @property
    def carried_inputs(self) -> frozenset[Input]:
        """The same as :attr:`carried`: what the conversation carries besides text, as a model
        binding reads it."""
        return self.carried

    def messages(self) -> tuple[Message, ...]:
        """The messages a call sends: the system prompt, the objective, then the turns."""
        head: list[Message] = []
        if self.system:
            head.append(Message.system(self.system))
        if self._objective:
            head.append(Message.user(self._objective))
        return (*head, *(turn.message for turn in self._turns))

    def input_tokens(self, spec: ModelSpec) -> int:
        """The tokens the conversation sends, under ``spec``'s tokenizer."""
        total = 0
        for message in self.messages():
            total += spec.count_tokens(message.content)
            total += sum(spec.count_tokens(c.name + c.arguments) for c in message.tool_calls)
        return total

    def output_budget(self, spec: ModelSpec) -> int | None:
        """The next call's output budget on ``spec``: the outgoing turn's own request (capped at
        the entry's ceiling), else the declared output; ``None`` when none is declared."""
        for turn in reversed(self._turns):
            if turn.message.role is Role.ASSISTANT:
                break
            if turn.requested_output_tokens is not None:
                return min(turn.requested_output_tokens, spec.max_output_tokens)
        return None if self.output is None else self.output.budget(spec)

    def request_for(
        self,
        spec: ModelSpec,
        *,
        tools: Sequence[ToolSpec] = (),
        output_schema: OutputSchema | None = None,
    ) -> LLMRequest:
        """The request a call on ``spec`` sends; the objective freezes with it."""
        budget = self.output_budget(spec)
        if budget is None:
            raise UncorrectableError(
                f"conversation {self.id} declares no output size; an output size is mandatory"
            )
        self._sent = True
        return LLMRequest(
            messages=self.messages(),
            max_tokens=budget,
            model=spec.wire_model_id,
            tools=tuple(tools),
            tool_choice="auto" if tools else None,
            output_schema=output_schema,
        )

    def transcript(self) -> str:
        """The whole conversation as text, one turn a paragraph."""
        lines = []
        for message in self.messages():
            text = message.content
            if message.tool_calls:
                calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
                text = f"{text} [calls {calls}]".strip()
            lines.append(f"{message.role.value}: {text}")
        return "\n\n".join(lines)

    # -- ownership (TOOL-35) --------------------------------------------------------------------------
    @property
    def owner(self) -> JobContext | None:
        """The context of the job that owns the conversation now, or ``None``."""
        return self._owner

    async def acquire(self, context: JobContext, *, timeout: float = OWNERSHIP_WAIT) -> None:  # noqa: ASYNC109 - the rule's own bound
        """Own the conversation for ``context``'s job, waiting up to ``timeout`` seconds
        (default :data:`OWNERSHIP_WAIT`, 30) for the current owner to release it; the job's
        teardown releases it. Still owned after that, it raises
        :class:`~nucleo_trio.errors.UncorrectableError`. Owning it already returns at once."""
        if self._owner is context:
            return
        with trio.move_on_after(timeout):
            while self._owner is not None:
                assert self._released is not None
                await self._released.wait()
        if self._owner is not None:
            raise UncorrectableError(
                f"conversation {self.id} is still owned by {self._owner.job.name} after "
                f"{timeout:g} s; one job owns a conversation at a time"
            )
        self._owner = context
        self._released = trio.Event()
        context.hold_conversation(self)

    def release(self, context: JobContext) -> None:
        """Let go of the conversation, if ``context``'s job owns it; a durable one is kept in
        its store."""
        if self._owner is not context:
            return
        self._owner = None
        released, self._released = self._released, None
        if self.durable and self._store is not None:
            self._store.put(self)
        if released is not None:
            released.set()

    def __repr__(self) -> str:
        owner = self._owner.job.name if self._owner is not None else "nobody"
        return f"<Conversation {self.id}: {len(self._turns)} turns, owned by {owner}>"


class ConversationStore:
    """Durable conversations by id, in memory: one store per dispatcher."""

    def __init__(self) -> None:
        self._conversations: dict[str, Conversation] = {}

    def put(self, conversation: Conversation) -> None:
        """Keep ``conversation`` under its id, replacing any kept there; a released durable
        conversation is put here by itself."""
        conversation._store = self
        self._conversations[conversation.id] = conversation

    def adopt(self, conversation: Conversation) -> Conversation:
        """Keep ``conversation`` here once it is released (it must be durable to be kept)."""
        conversation._store = self
        return conversation

    def get(self, conversation_id: str) -> Conversation:
        """The conversation ``conversation_id``; one no store holds is refused."""
        found = self._conversations.get(conversation_id)
        if found is None:
            raise ResourceNotFoundError(
                f"no store holds conversation {conversation_id!r}",
                llm_message=f"There is no conversation {conversation_id!r} to resume.",
            )
        return found

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._conversations

    def __len__(self) -> int:
        return len(self._conversations)


_STORES: weakref.WeakKeyDictionary[JobDispatcher, ConversationStore] = weakref.WeakKeyDictionary()


def conversation_store(dispatcher: JobDispatcher) -> ConversationStore:
    """The conversation store of ``dispatcher`` (two dispatchers share none)."""
    store = _STORES.get(dispatcher)
    if store is None:
        store = _STORES[dispatcher] = ConversationStore()
    return store
