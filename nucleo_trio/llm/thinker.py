"""A goal-directed thinker: an orchestrator that converses with a model, calls tools, answers.

A :class:`Thinker` owns one conversation for its run. Each iteration submits an
:class:`~nucleo_trio.llm.LLMCall` on it (resolved, priced and admitted like any job, with the
thinker's pin and its upstream re-run budget); when the model calls tools, every
call of the turn is submitted as a job before any is awaited, and each one's result, or its
failure explained to the model, goes back as that call's result. A tool is a
job like any other, so one that fans out is re-run on its children's signals by the dispatcher,
and one whose children failed several ways at once has each failure explained. When the
model gives a final answer, the answer meets the thinker's validation guardrails while the
thinker still holds its conversation: a refusal goes back to the model as a correction turn and
uses one iteration, and the caller only ever sees an answer that passed, or ``None`` when the
iteration budget runs out.

The model answers by calling the ``final_answer`` tool, whose arguments follow the answer's
schema; a thinker whose answer is text also takes a plain reply with no tool calls as its answer.
A reply that is neither is asked again.

Tools are job classes: each call builds a fresh instance with the thinker as parent, sets its
``input`` to the call's arguments, and submits it. A thinker used as a tool never works
deeper than the thinker that called it.

A thinker built with ``stream=True`` streams every turn: each turn's
:class:`~nucleo_trio.llm.LLMCall` publishes its text and its tool calls on the bus as they
arrive (see :mod:`nucleo_trio.llm.call`), under the call's own job; the thinker reads each
reply exactly as it reads a completed one.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import attrs

from ..bus.events import ContentStreamEvent
from ..errors import (
    GuardrailError,
    JsonParseError,
    LLMReadableError,
    UncorrectableError,
    unwrap,
)
from ..errors._groups import leaves
from ..guardrails import to_json, validate_answer
from ..jobs.carrier import ConversationCarrier
from ..jobs.job import AbstractJob, Orchestrator
from ..jobs.state import JobType
from ..models.binding import OutputDeclaration
from ..models.grades import Depth, Grade, OutputSize
from .answers import RawResponse, StructuredAnswer, TextAnswer
from .call import LLMCall
from .clients import LLMResponse, ToolCall, ToolSpec
from .conversation import Conversation, conversation_store

if TYPE_CHECKING:
    from ..jobs.context import JobContext
    from ..jobs.handle import JobHandle
    from ..jobs.identity import Identifiable
    from ..models.catalog import ModelSpec

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "FINAL_ANSWER",
    "MAX_GUARDRAIL_CORRECTIONS",
    "QuickLLMQuestion",
    "Thinker",
    "ThinkerDeclaration",
    "ThinkerTool",
    "ToollessThinker",
]

T = TypeVar("T")

DEFAULT_MAX_ITERATIONS = 50  # TOOL-13
"""Turns a thinker takes before giving up with ``None``: 50."""

MAX_GUARDRAIL_CORRECTIONS = 2  # TOOL-22
"""Validation refusals a toolless thinker feeds back before it fails with the next one: two."""

FINAL_ANSWER = "final_answer"
"""The tool a model calls to give a thinker its final answer."""

_NUDGE = f"Reply with a tool call, or give your final answer by calling {FINAL_ANSWER}."


@attrs.frozen(init=False)
class ThinkerDeclaration:
    """What a thinker needs from a model: a grade, and the size of its answers.

    Both are required: a grade that is not a :class:`~nucleo_trio.models.Grade`, or no
    output, is a :class:`ValueError`.
    """

    grade: Grade
    """The grade every call of the thinker asks for, unless the thinker is pinned to an entry."""
    output: OutputDeclaration
    """The size of each reply: an :class:`~nucleo_trio.models.OutputSize` rung or a token count,
    as a declaration."""

    def __init__(self, grade: Grade, output: OutputSize | int | OutputDeclaration) -> None:
        if not isinstance(grade, Grade):
            raise ValueError(f"a ThinkerDeclaration needs a grade, got {grade!r}")
        if output is None:
            raise ValueError("a ThinkerDeclaration must name its size (an OutputSize or tokens)")
        self.__attrs_init__(grade, OutputDeclaration.of(output))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@attrs.frozen
class ThinkerTool:
    """A job class offered to the model as a tool: its name, description and argument schema.

    ``ThinkerTool.of(cls)`` reads them from the class: ``tool_name`` (else the class name in
    snake case), the ``@tool_description`` text, and ``parameters`` (a JSON schema; default an
    object with no declared properties).
    """

    job_class: type[AbstractJob[Any]]
    """The job class each call builds, with the thinker as parent and the call's arguments as
    its ``input``."""
    name: str
    """The name the model calls the tool by; unique among a thinker's tools, and never
    ``final_answer``."""
    description: str = ""
    """What the tool does, as the model reads it; empty by default."""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    """The JSON schema of the tool's arguments; by default an object with no declared
    properties."""

    @classmethod
    def of(cls, job_class: type[AbstractJob[Any]] | ThinkerTool) -> ThinkerTool:
        """The tool for ``job_class``, read from the class as described above; a
        :class:`ThinkerTool` is answered as it is, and anything but a job class is a
        :class:`TypeError`."""
        if isinstance(job_class, ThinkerTool):
            return job_class
        if not isinstance(job_class, type) or not issubclass(job_class, AbstractJob):
            raise TypeError(f"a thinker's tool is a job class, got {job_class!r}")
        return cls(
            job_class,
            getattr(job_class, "tool_name", None) or _snake(job_class.__name__),
            getattr(job_class, "__nucleo_description__", None) or (job_class.__doc__ or "").strip(),
            getattr(job_class, "parameters", None) or {"type": "object", "properties": {}},
        )

    def spec(self) -> ToolSpec:
        """The tool as the request offers it to the model: its name, description and schema."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


class Thinker(Orchestrator[T | None], ConversationCarrier, Generic[T]):
    """Works an objective with a model and tools; see the module documentation.

    ``declaration`` is the grade and answer size; ``objective`` what to work on (non-blank);
    ``system`` the system prompt; ``tools`` the job classes offered to the model; ``answer``
    the type of the final answer (``str`` by default, or an attrs class); ``depth`` how hard to
    think; ``pinned`` one entry for every call instead of the picker. ``max_iterations`` bounds
    the turns (default 50). ``stream`` streams every turn's reply onto the bus (default
    ``False``). A tool named ``final_answer``, or two tools of one name, is a
    :class:`ValueError`.
    """

    job_type: ClassVar[JobType] = JobType.THINKER
    """``JobType.THINKER``: snapshots, the health report and the metrics group thinkers apart
    from other orchestrators."""
    DEFAULT_MAX_ITERATIONS: ClassVar[int] = DEFAULT_MAX_ITERATIONS
    """The turns a thinker takes when ``max_iterations`` is not given: 50."""

    def __init__(
        self,
        parent: Identifiable,
        declaration: ThinkerDeclaration,
        objective: str,
        *,
        system: str | None = None,
        tools: Sequence[type[AbstractJob[Any]] | ThinkerTool] = (),
        answer: type[T] | None = str,  # type: ignore[assignment]  # T is str when omitted
        depth: Depth = Depth.STANDARD,
        pinned: ModelSpec | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        stream: bool = False,
    ) -> None:
        super().__init__(parent)
        if not isinstance(declaration, ThinkerDeclaration):
            raise TypeError(f"a thinker needs a ThinkerDeclaration, got {declaration!r}")
        if not isinstance(objective, str) or not objective.strip():
            raise ValueError(f"a thinker needs an objective, got {objective!r}")
        self.declaration = declaration
        """The grade every call asks for, and the size of each reply."""
        self.objective = objective
        """What the thinker works on, sent as the conversation's objective."""
        self.system = system
        """The system prompt of a new conversation, or ``None`` for none."""
        self.tools = tuple(ThinkerTool.of(t) for t in tools)
        """The tools offered to the model, beside ``final_answer``; :meth:`add_tool` adds one."""
        names = [t.name for t in self.tools]
        if FINAL_ANSWER in names or len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique and not {FINAL_ANSWER!r}: {names}")
        self.answer_type = answer
        """The type of the final answer: ``str`` (the default) or an attrs class. ``None``
        makes the run fail, since no reply can then be its answer."""
        self._answer = None if answer in (str, None) else StructuredAnswer(answer)
        self.depth = depth
        """How much thinking each call deserves (default ``Depth.STANDARD``); a thinker used as
        a tool is held to its caller's depth."""
        self.pinned = pinned
        """The model entry every call is pinned to, or ``None`` (the default) for the picker's
        choice."""
        self.set_max_iterations(max_iterations)
        self.stream = stream
        """Whether each turn's reply is streamed, its pieces published on the bus as they
        arrive; ``False`` by default."""
        self._conversation_id: str | None = None
        self.conversation: Conversation | None = None
        """The conversation of the current or last run; ``None`` before the first run."""
        self.turns = 0
        """Model calls made by the last run."""

    def add_tool(self, tool: type[AbstractJob[Any]] | ThinkerTool) -> None:
        """Offer one more tool to the model from the next turn on."""
        added = ThinkerTool.of(tool)
        if added.name == FINAL_ANSWER or any(t.name == added.name for t in self.tools):
            raise ValueError(f"a tool named {added.name!r} is already offered")
        self.tools = (*self.tools, added)

    def set_max_iterations(self, iterations: int) -> None:
        """Bound the turns of the next run to ``iterations``, an int >= 1 (else a
        :class:`ValueError`); a run that reaches it answers ``None``."""
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"max_iterations must be an int >= 1, got {iterations!r}")
        self.max_iterations = iterations

    # -- conversation continuity (TOOL-34) ---------------------------------------------------------
    def set_conversation_id(self, conversation_id: str) -> None:
        """Resume the durable conversation ``conversation_id`` when the thinker runs; if no
        store holds it, the run fails."""
        if not isinstance(conversation_id, str) or not conversation_id.strip():
            raise ValueError(f"a conversation id is non-blank, got {conversation_id!r}")
        self._conversation_id = conversation_id

    def transcript(self) -> str | None:
        """The last run's whole conversation as text, one turn a paragraph; ``None`` before the
        first run."""
        return None if self.conversation is None else self.conversation.transcript()

    # -- the run -------------------------------------------------------------------------------------
    def _open_conversation(self, context: JobContext) -> Conversation:
        store = conversation_store(context.dispatcher)
        if self._conversation_id is not None:
            return store.get(self._conversation_id)
        return store.adopt(
            Conversation(
                system=self.system,
                output=self.declaration.output,
                grade=self.declaration.grade,
            )
        )

    def new_llm_call(self, context: JobContext, conversation: Conversation) -> LLMCall[LLMResponse]:
        """The call of one turn: on the pin (or the declared grade), at the thinker's depth,
        offering its tools and ``final_answer``, streamed when the thinker streams, with the
        thinker's upstream re-run budget.
        Override it to change how each turn's call is built."""
        # TOOL-30: the pin; TOOL-31: the thinker's upstream re-run budget.
        call: LLMCall[LLMResponse] = LLMCall(
            context,
            conversation,
            grade=None if self.pinned is not None else self.declaration.grade,
            depth=self.depth,
            pinned=self.pinned,
            answer=RawResponse(),
            tools=(*(t.spec() for t in self.tools), self._final_answer_spec()),
            stream=self.stream,
        )
        call.upstream_retries = self.upstream_retries
        return call

    def _final_answer_spec(self) -> ToolSpec:
        if self._answer is None:
            parameters: Mapping[str, Any] = {
                "type": "object",
                "properties": {"answer": {"type": "string"}},
                "required": ["answer"],
            }
        else:
            parameters = self._answer.schema()
        return ToolSpec(
            name=FINAL_ANSWER,
            description="Give your final answer to the objective.",
            parameters=parameters,
        )

    async def execute(self, context: JobContext) -> T | None:
        conversation = self._open_conversation(context)
        await conversation.acquire(context)
        self.conversation = conversation
        conversation.put_objective(self.objective)
        self.turns = 0
        for _ in range(self.max_iterations):
            context.check_cancellation()
            self.turns += 1
            if self.answer_type is None:
                raise UncorrectableError(
                    f"{self.name} has no answer type, so no reply can be its answer; give it "
                    "answer=str or an attrs class"
                )
            handle = self.submit(self.new_llm_call(context, conversation))
            response = await handle.result()
            if any(call.name != FINAL_ANSWER for call in response.tool_calls):
                await self._run_tools(conversation, response.tool_calls)
                continue
            candidate, answered = self._final(response, conversation)
            if not answered:
                continue
            try:
                await validate_answer(context, candidate)
            except GuardrailError as refusal:
                conversation.add_correction(refusal.explain_to_llm())
                continue
            self._deliver(context, candidate)
            answer: T = candidate
            return answer
        return None

    def _final(self, response: LLMResponse, conversation: Conversation) -> tuple[Any, bool]:
        """The candidate answer of a turn that called no other tool, if the model gave one."""
        if response.tool_calls:
            call = response.tool_calls[0]
            for extra in response.tool_calls[1:]:
                conversation.add_tool_result(extra.id, "Give one final answer.")
            try:
                candidate = self._read_final(call)
            except LLMReadableError as mistake:
                conversation.add_tool_result(call.id, mistake.explain_to_llm())
                return None, False
            conversation.add_tool_result(call.id, "Answer received.")
            return candidate, True
        if self._answer is None and response.content.strip():
            return response.content, True
        conversation.add_user(_NUDGE)
        return None, False

    def _read_final(self, call: ToolCall) -> Any:
        arguments = call.parsed_arguments()
        if self._answer is None:
            text = arguments.get("answer")
            if not isinstance(text, str) or not text.strip():
                raise JsonParseError("the answer is missing", '{"answer": "<your answer>"}')
            return text
        return self._answer.from_mapping(arguments)

    def _deliver(self, context: JobContext, answer: Any) -> None:
        """A top-level thinker's answer is also streamed to the person watching (TOOL-16)."""
        if self.parent_job_id != self.workflow_id:
            return  # called by another job: the answer goes back to the caller only
        text = answer if isinstance(answer, str) else to_json(answer)
        context.dispatcher.bus.publish(
            ContentStreamEvent(snapshot=context.snapshot(), chunk=text, last=True)
        )

    # -- tools ---------------------------------------------------------------------------------------
    async def _run_tools(self, conversation: Conversation, calls: Sequence[ToolCall]) -> None:
        """Submit every tool call of the turn, then await each; every call gets a result, a
        failure explained to the model included (TOOL-14, TOOL-15)."""
        submitted: list[tuple[ToolCall, JobHandle[Any] | str]] = []
        for call in calls:
            if call.name == FINAL_ANSWER:
                submitted.append((call, "Give your final answer once the tools have answered."))
            else:
                submitted.append((call, self._submit_tool(call)))
        for call, handle in submitted:
            if isinstance(handle, str):
                conversation.add_tool_result(call.id, handle)
                continue
            try:
                result = await handle.result()
            except Exception as failure:
                text = _explain_failure(failure, call.name)
            else:
                text = result if isinstance(result, str) else to_json(result)
            conversation.add_tool_result(call.id, text)

    def _submit_tool(self, call: ToolCall) -> JobHandle[Any] | str:
        tool = next((t for t in self.tools if t.name == call.name), None)
        if tool is None:
            known = ", ".join(t.name for t in self.tools) or "none"
            return f"There is no tool {call.name!r}; the tools are: {known}."
        try:
            arguments = call.parsed_arguments()
        except LLMReadableError as mistake:
            return mistake.explain_to_llm()
        job = tool.job_class(self)
        job.input = dict(arguments)  # type: ignore[attr-defined]  # a tool reads its `input`
        if isinstance(job, Thinker):
            job.depth = job.depth.at_most(self.depth)
            job.upstream_retries = self.upstream_retries
        return self.submit(job)


def _explain_failure(failure: Exception, tool: str) -> str:
    """What the model reads for a tool call that failed: the failure explained, or, for a tool
    whose children (a nursery, a task group) failed several ways at once, each one explained on
    its own line, so the model can answer them all in its next turn."""
    found = leaves(failure)
    if len(found) == 1:
        return unwrap(failure, component=tool).explain_to_llm()
    lines = [f"The tool {tool} failed {len(found)} ways at once:"]
    lines.extend(
        f"{number}. {unwrap(leaf, component=tool).explain_to_llm()}"
        for number, leaf in enumerate(found, 1)
    )
    return "\n".join(lines)


class QuickLLMQuestion(Orchestrator[str]):
    """Ask a model one question and get its text answer.

    One :class:`~nucleo_trio.llm.LLMCall` on a conversation of its own, so a bad answer is
    corrected up to twice exactly as any call's is. The grade is required.
    """

    def __init__(
        self,
        parent: Identifiable,
        question: str,
        grade: Grade,
        *,
        output: OutputSize | int = OutputSize.COMPACT,
        depth: Depth = Depth.IMMEDIATE,
        system: str | None = None,
    ) -> None:
        super().__init__(parent)
        if not isinstance(grade, Grade):
            raise ValueError(f"QuickLLMQuestion needs a grade, got {grade!r}")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"QuickLLMQuestion needs a question, got {question!r}")
        self.question = question
        self.grade = grade
        self.output = output
        self.depth = depth
        self.system = system

    async def execute(self, context: JobContext) -> str:
        conversation = Conversation(system=self.system, output=self.output, grade=self.grade)
        await conversation.acquire(context)
        conversation.put_objective(self.question)
        call = LLMCall(context, conversation, depth=self.depth, answer=TextAnswer())
        call.upstream_retries = self.upstream_retries
        return await self.submit(call).result()


class ToollessThinker(Thinker[T]):
    """A thinker that only answers: one model call per candidate answer, no tools.

    The reply itself is the candidate (text, or JSON for an attrs answer type). A validation
    refusal is fed back as a correction at most :data:`MAX_GUARDRAIL_CORRECTIONS` times; the
    next refusal fails the run with it. ``stream`` streams each reply onto the bus, as for a
    :class:`Thinker`. Implement :meth:`system_prompt_text`.
    """

    MAX_GUARDRAIL_CORRECTIONS: ClassVar[int] = MAX_GUARDRAIL_CORRECTIONS

    def __init__(
        self,
        parent: Identifiable,
        declaration: ThinkerDeclaration,
        objective: str,
        *,
        answer: type[T] = str,  # type: ignore[assignment]  # T is str when omitted
        depth: Depth = Depth.STANDARD,
        pinned: ModelSpec | None = None,
        stream: bool = False,
    ) -> None:
        super().__init__(
            parent,
            declaration,
            objective,
            answer=answer,
            depth=depth,
            pinned=pinned,
            stream=stream,
        )
        self.system = self.system_prompt_text()

    @abc.abstractmethod
    def system_prompt_text(self) -> str:
        """The system prompt of every call."""

    def add_tool(self, tool: type[AbstractJob[Any]] | ThinkerTool) -> None:
        """Refused: a toolless thinker offers no tools."""
        raise TypeError(f"{type(self).__name__} is toolless; it offers the model no tools")

    async def execute(self, context: JobContext) -> T | None:
        conversation = self._open_conversation(context)
        await conversation.acquire(context)
        self.conversation = conversation
        conversation.put_objective(self.objective)
        handler: Any = TextAnswer() if self._answer is None else self._answer
        refusals = 0
        self.turns = 0
        while True:
            context.check_cancellation()
            self.turns += 1
            call: LLMCall[Any] = LLMCall(
                context,
                conversation,
                grade=None if self.pinned is not None else self.declaration.grade,
                depth=self.depth,
                pinned=self.pinned,
                answer=handler,
                stream=self.stream,
            )
            call.upstream_retries = self.upstream_retries
            candidate = await self.submit(call).result()
            try:
                await validate_answer(context, candidate)
            except GuardrailError as refusal:
                refusals += 1
                if refusals > self.MAX_GUARDRAIL_CORRECTIONS:
                    raise
                conversation.add_correction(refusal.explain_to_llm())
                continue
            self._deliver(context, candidate)
            answer: T = candidate
            return answer
