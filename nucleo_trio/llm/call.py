"""One model call as a job: resolved, priced and admitted like any tool, corrected, re-run.

An :class:`LLMCall` is a :class:`~nucleo_trio.jobs.Tool` of type ``LLM_CALL`` whose requirements
are one wired :class:`~nucleo_trio.models.ModelBinding` on its conversation, so the dispatcher
resolves its model, prices the conversation, lets the spend gates judge it and admits its token
reservation before the call is made. Its execute sends the conversation to the resolved
entry's client (every call lands on the job's context) and reads the reply:

* a reply the handler cannot read (it does not parse, or leaves a required field empty) is fed
  back as a correction turn and the attempt re-runs with :class:`~nucleo_trio.errors.ResponseCorrectionRetry`,
  at most :data:`MAX_CORRECTIONS` times per job; the next bad reply raises the handler's own
  error;
* a reply cut at its output budget raises :class:`~nucleo_trio.errors.OutputTruncationRetry`
  with the outgoing turn's budget raised to the model's ceiling, so the re-run reserves it; a
  reply already cut at the ceiling fails;
* an upstream failure goes into the execution's history, so the re-run resolves with it
  (failover is the picker's decision), and is raised as it is for the dispatcher to pace; a
  404 from the model's endpoint (the model is not there) goes into it too, and is the one
  failure that turns the entry off for a while (see
  :class:`~nucleo_trio.models.picker.AvailabilityBook`);
* a reply that reports no token usage is recorded at the call's reservation, marked estimated
  (:class:`~nucleo_trio.llm.clients.ObservableLLMClient`), so a spend ledger books what the
  call was let through on rather than nothing.

A call made with ``stream=True`` asks the client for a stream: each piece of text is published
on the dispatcher's bus as a :class:`~nucleo_trio.bus.ContentStreamEvent`, and each fragment of
a tool call as a :class:`~nucleo_trio.bus.ToolCallStreamEvent`, as they arrive and before the
call's terminal event (a client that cannot stream tool calls has each one published whole
once its reply is in). The reply is read exactly as a completed one, and its usage is recorded
once, when the stream ends. A re-run streams again from the start; each event's snapshot says
which attempt it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from ..bus.events import ContentStreamEvent, ToolCallStreamEvent
from ..errors import (
    CorrectableError,
    ExternalServiceError,
    ModelNotFoundError,
    OutputTruncationRetry,
    ResourceNotFoundError,
    ResponseCorrectionRetry,
    UncorrectableError,
    UpstreamRetry,
)
from ..jobs.context import JobContext
from ..jobs.job import Tool
from ..jobs.requirements import JobRequirements
from ..jobs.state import JobType
from ..models.binding import ModelBinding
from ..models.grades import Depth, Grade
from .answers import RawResponse, ResponseHandler
from .clients import LLMRequest, LLMResponse, ObservableLLMClient, ToolSpec, Usage
from .conversation import Conversation

if TYPE_CHECKING:
    from ..jobs.identity import Identifiable
    from ..models.catalog import ModelSpec

__all__ = ["LLM_CALL_TIMEOUT", "MAX_CORRECTIONS", "LLMCall"]

T = TypeVar("T")

LLM_CALL_TIMEOUT = 6 * 60.0  # TOOL-23
"""An LLM call's deadline, in seconds: six minutes."""

MAX_CORRECTIONS = 2  # TOOL-24
"""Corrections one LLM call job gets, across the dispatcher's re-runs: two."""


def _prefix(parent: Identifiable) -> str:
    if isinstance(parent, JobContext):
        display = parent.job.display_name
        if display:
            return "llm-call-" + re.sub(r"[^0-9A-Za-z]", "", display)
    return "llm-call"


class LLMCall(Tool[T], Generic[T]):
    """Send a conversation to a model and read the reply (see the module documentation).

    ``grade`` (default: the conversation's) and ``depth`` say what model the call needs;
    ``pinned`` names one entry instead, skipping the picker but not the gate. ``answer`` reads
    the reply (default: the :class:`LLMResponse` itself). ``tools`` are offered to the model.
    ``stream`` asks for the reply as a stream, its pieces published on the bus as they arrive
    (default ``False``).
    """

    job_type: ClassVar[JobType] = JobType.LLM_CALL
    """``JobType.LLM_CALL``: snapshots, the health report and the metrics group model calls
    apart from other tools."""
    MAX_CORRECTIONS: ClassVar[int] = MAX_CORRECTIONS
    """Corrections a call gets before the next unreadable reply fails it (default 2); a
    subclass may set its own."""

    def __init__(
        self,
        parent: Identifiable,
        conversation: Conversation,
        *,
        grade: Grade | None = None,
        depth: Depth = Depth.STANDARD,
        pinned: ModelSpec | None = None,
        answer: ResponseHandler[T] | None = None,
        tools: Sequence[ToolSpec] = (),
        stream: bool = False,
    ) -> None:
        if conversation is None:
            raise ValueError("LLMCall needs a conversation, got None")
        if not isinstance(conversation, Conversation):
            raise TypeError(f"LLMCall needs a Conversation, got {type(conversation).__name__}")
        super().__init__(parent, _prefix(parent))
        self.timeout = LLM_CALL_TIMEOUT
        """Seconds each attempt may run, counted from when admission grants it: six minutes
        (:data:`LLM_CALL_TIMEOUT`) unless set otherwise."""
        self.conversation = conversation
        """The conversation the call sends, and to which the reply and any correction are
        added."""
        if grade is not None:
            conversation.grade = grade
        self.depth = depth
        """How much thinking the call deserves, which the entry turns into a thinking budget
        (default ``Depth.STANDARD``)."""
        self.pinned = pinned
        """The model entry the call is pinned to, or ``None`` (the default) for the picker's
        choice."""
        self.answer: ResponseHandler[Any] = answer if answer is not None else RawResponse()
        """The handler that reads the reply; by default a :class:`~nucleo_trio.llm.RawResponse`,
        which answers the :class:`LLMResponse` itself."""
        self.tools = tuple(tools)
        """The tools offered to the model, as :class:`~nucleo_trio.llm.clients.ToolSpec`
        records; empty by default."""
        self.stream = stream
        """Whether the reply is asked for as a stream, each piece of text and of a tool call
        published on the bus as it arrives; ``False`` by default."""
        self.corrections = 0
        """Corrections made so far; the count survives the dispatcher's re-runs."""
        self.binding: ModelBinding | None = None
        """The binding the latest requirements capture minted; resolved before execute."""

    # -- the grade lives on the conversation (TOOL-23) ----------------------------------------------
    @property
    def grade(self) -> Grade | None:
        """The grade the call asks for; it lives on the conversation, so setting it here sets
        the conversation's. ``None`` when neither the call nor the conversation gave one."""
        return self.conversation.grade

    @grade.setter
    def grade(self, grade: Grade | None) -> None:
        self.conversation.grade = grade

    def pinned_model(self) -> ModelSpec | None:
        """The entry the call is pinned to, ``None`` when the picker chooses."""
        return self.pinned

    # -- requirements --------------------------------------------------------------------------------
    def requirements(self) -> JobRequirements:
        """Read-only, non-transactional, and one wired binding minted fresh for this capture."""
        if self.pinned is not None:
            binding = ModelBinding.pinned_wired(self.conversation, self.pinned, self.depth)
        else:
            grade = self.conversation.grade
            if grade is None:
                raise ValueError(
                    f"{self.name}: the call needs a grade (on the call or its conversation), "
                    "or a pinned entry"
                )
            binding = ModelBinding.wired(self.conversation, grade, self.depth)
        self.binding = binding
        return JobRequirements(read_only=True).require_model(binding)

    # -- the call ------------------------------------------------------------------------------------
    async def execute(self, context: JobContext) -> T:
        assert self.binding is not None, "the dispatcher resolves the binding before execute"
        binding = self.binding
        spec = binding.model
        models = context.dispatcher.models
        reserved = (
            Usage(
                input_tokens=binding.input_reservation,
                output_tokens=binding.output_reservation,
                estimated=True,
            )
            if binding.is_priced
            else None
        )
        client = ObservableLLMClient(models.provider_client(spec), context, reserved=reserved)
        request = self.conversation.request_for(
            spec, tools=self.tools, output_schema=self.answer.output_schema()
        )
        try:
            if self.stream:
                response = await self._streamed(context, client, request)
            else:
                response = await client.complete(request)
        except (
            UpstreamRetry,
            ExternalServiceError,
            ResourceNotFoundError,
            ModelNotFoundError,
        ) as e:
            # The execution's history (the re-run resolves with it) and the availability book.
            models.note_attempt(context, spec, e)
            raise
        models.note_success(spec, response)
        if response.is_truncated:
            self._truncated(spec, request.max_tokens)
        self.conversation.add_assistant(response)
        try:
            return cast(T, self.answer.parse(response))
        except CorrectableError as mistake:
            self._correct(spec, mistake, response)
            raise

    async def _streamed(
        self, context: JobContext, client: ObservableLLMClient, request: LLMRequest
    ) -> LLMResponse:
        """The reply as a stream, each piece published on the bus as it arrives."""
        bus = context.dispatcher.bus

        def on_text(piece: str) -> None:
            if piece:
                bus.publish(ContentStreamEvent(snapshot=context.snapshot(), chunk=piece))

        def on_tool_call(index: int, call_id: str | None, name: str, arguments: str) -> None:
            bus.publish(
                ToolCallStreamEvent(
                    snapshot=context.snapshot(),
                    index=index,
                    call_id=call_id,
                    name=name,
                    arguments=arguments,
                )
            )

        streams_calls = client.streams_tool_calls()
        response = await client.stream(request, on_text, on_tool_call=on_tool_call)
        if not streams_calls:
            for index, call in enumerate(response.tool_calls):
                on_tool_call(index, call.id, call.name, call.arguments)
        return response

    def _truncated(self, spec: ModelSpec, budget: int) -> None:
        """Re-run once at the model's ceiling; a reply already cut there fails (TOOL-28, 37)."""
        ceiling = spec.max_output_tokens
        if budget >= ceiling:
            raise UncorrectableError(
                f"{self.name}: the reply of {spec.id} was cut at the model's ceiling of {ceiling} "
                "output tokens; ask for less, or split the work",
                llm_message="The answer was too long for the model to finish; ask for less.",
            )
        self.conversation.escalate_output(ceiling)
        raise OutputTruncationRetry(
            f"{self.name}: the reply of {spec.id} was cut at {budget} output tokens; re-running "
            f"at the model's ceiling of {ceiling}",
            spec.id,
            ceiling,
            previous_max_tokens=budget,
        )

    def _correct(self, spec: ModelSpec, mistake: CorrectableError, response: LLMResponse) -> None:
        """Feed ``mistake`` back as a correction turn and ask for a re-run, within the budget;
        past it, the caller re-raises the mistake itself (TOOL-25, TOOL-26)."""
        if self.corrections >= self.MAX_CORRECTIONS:
            return
        self.corrections += 1
        explanation = mistake.explain_to_llm()
        self.conversation.add_correction(explanation)
        raise ResponseCorrectionRetry(
            f"{self.name}: correction {self.corrections} of {self.MAX_CORRECTIONS} for "
            f"{spec.id}: {mistake}",
            explanation,
            model=spec.id,
            attempt=self.corrections,
            cause=mistake,
        ) from mistake
