"""A job's claim on a model for one attempt: the binding, resolved once and priced once.

A job declares what it needs in words (a grade, a depth, an output size) through a
:class:`ModelBinding` in its requirements. The dispatcher captures the requirements once per
attempt, and every capture mints fresh bindings, so a re-run resolves again with what the
earlier attempts met. Before anything is held, the runtime **resolves** each binding to an
entry (through the picker and the compliance gate) and **prices** it: the tokens the call may
take on that entry, which become the binding's reservation on the entry's token bucket.

The forms, by what the job knows when it declares:

* **flat**: input tokens counted by the job, plus the declared output, plus the depth's
  thinking budget;
* **prompt**: a prompt text counted under the resolved entry's tokenizer, plus the declared
  output;
* **wired**: a conversation, priced as its total tokens plus its output and thinking budgets;
  resolving stamps the entry on the conversation, so the next call can stay with it;
* **pinned**: any of the above on one named entry, skipping the picker but not the gate;
* **embeddings**: a count of tokens to embed, no grade; and **decision**, a request
  counted under the entry's tokenizer with no output.

No form has a default output: an output declaration is part of every language-model form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from ..errors import UncorrectableError
from ..jobs.requirements import ModelClaim
from .catalog import ModelSpec
from .grades import Depth, Grade, Input, ModelKind, OutputSize

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter

__all__ = ["ModelBinding", "OutputDeclaration", "WiredConversation"]


def _output_value(value: OutputSize | int) -> OutputSize | int:
    if isinstance(value, OutputSize):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"an output declaration is an OutputSize rung or a positive token count, got {value!r}"
        )
    return value


@attrs.frozen
class OutputDeclaration:
    """How long an answer may be: an :class:`OutputSize` rung, or a number of tokens."""

    size: OutputSize | int = attrs.field(converter=_output_value)
    """An :class:`OutputSize` rung, or a positive number of tokens; anything else is a
    ValueError."""

    @classmethod
    def of(cls, value: OutputDeclaration | OutputSize | int) -> OutputDeclaration:
        """``value`` as a declaration: a declaration as it is, a rung or a token count wrapped
        (a ValueError when it is neither)."""
        return value if isinstance(value, OutputDeclaration) else cls(value)

    def budget(self, spec: ModelSpec) -> int:
        """The tokens this stands for on ``spec`` (the rung translated by the entry)."""
        return spec.output_budget(self.size)

    def __str__(self) -> str:
        return self.size.name if isinstance(self.size, OutputSize) else f"{self.size} tokens"


@runtime_checkable
class WiredConversation(Protocol):
    """What a wired binding reads from its conversation (see :mod:`nucleo_trio.llm`)."""

    prior_spec_id: str | None
    """The entry the conversation's last call used, ``None`` before its first; resolving a
    wired binding sets it to the resolved entry's id."""

    def input_tokens(self, spec: ModelSpec) -> int:
        """The tokens the conversation sends, counted under ``spec``'s tokenizer."""
        ...

    def output_budget(self, spec: ModelSpec) -> int | None:
        """The output tokens the next call asks for on ``spec``; ``None`` when the
        conversation declares no output size."""
        ...

    @property
    def carried_inputs(self) -> frozenset[Input]:
        """What the conversation carries besides text (images, documents)."""
        ...


def _require_depth(depth: object, form: str) -> Depth:
    if not isinstance(depth, Depth):
        raise ValueError(f"ModelBinding.{form}: a depth is required, got {depth!r}")
    return depth


def _require_grade(grade: object, form: str) -> Grade:
    if not isinstance(grade, Grade):
        raise ValueError(
            f"ModelBinding.{form}: a grade is required (MICRO..MEGA or CEILING), got {grade!r}"
        )
    return grade


def _require_output(output: object, form: str) -> OutputDeclaration:
    if output is None:
        raise ValueError(
            f"ModelBinding.{form}: an output declaration is required; no form has a default "
            "output (say OutputSize.COMPACT, or a number of tokens)"
        )
    if not isinstance(output, OutputDeclaration | OutputSize | int):
        raise ValueError(f"ModelBinding.{form}: not an output declaration: {output!r}")
    return OutputDeclaration.of(output)


def _require_count(value: object, what: str, form: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"ModelBinding.{form}: {what} must be a token count >= 0, got {value!r}")
    return value


def _require_spec(spec: object, kind: ModelKind, form: str) -> ModelSpec:
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"ModelBinding.{form}: a pinned form needs a ModelSpec, got {spec!r}")
    if spec.kind is not kind:
        raise ValueError(
            f"ModelBinding.{form}: {spec.id} is a {spec.kind.value} entry; this form pins "
            f"{kind.value} entries"
        )
    return spec


class ModelBinding(ModelClaim):
    """One model a job needs for one attempt; build it with a class method per form.

    ``resolve(spec)`` happens once (a second call is a RuntimeError), ``model`` is readable
    only after it (an :class:`~nucleo_trio.errors.UncorrectableError` before), and
    ``reservation`` only after :meth:`price` (a RuntimeError before). The dispatcher resolves
    and prices every binding of an attempt before the attempt runs; a job only builds them.

    A bad argument to a form (no output declaration, a negative count, a pinned entry of the
    wrong kind) is a ValueError when the binding is built.
    """

    # MOD-18: resolve once; model before resolution and reservation before price refuse.

    def __init__(
        self,
        *,
        kind: ModelKind,
        form: str,
        grade: Grade | None = None,
        depth: Depth = Depth.IMMEDIATE,
        output: OutputDeclaration | None = None,
        input_tokens: int | None = None,
        prompt: str | None = None,
        conversation: WiredConversation | None = None,
        pinned: ModelSpec | None = None,
        inputs: frozenset[Input] = frozenset(),
    ) -> None:
        self.kind = kind
        """What the binding calls: a language model, embeddings or a decision entry."""
        self.form = form
        """The form it was built with: ``"flat"``, ``"prompt"``, ``"wired"`` (pinned or not),
        ``"pinned"``, ``"embeddings"`` (pinned or not) or ``"decision"``."""
        self.grade = grade
        """The grade asked for; ``None`` for a pinned, embeddings or decision binding."""
        self.depth = depth
        """The depth the call works at; IMMEDIATE for an embeddings or decision binding."""
        self.output = output
        """The declared output; ``None`` for a wired binding (its conversation declares it)
        and for an embeddings or decision binding."""
        self.inputs = inputs
        """What the call declares it sends besides text; empty unless declared."""
        self._input_tokens = input_tokens
        self._prompt = prompt
        self.conversation = conversation
        """The conversation of a wired binding; ``None`` for every other form."""
        self._pinned = pinned
        self._spec: ModelSpec | None = None
        self._input_reservation: int | None = None
        self._output_reservation: int | None = None
        self.account: RateLimiter | None = None
        """The account the assembler put the reservation on (its bucket or gate), once
        assembled; the dispatcher tells it the upstream's verdict."""

    # -- the forms --------------------------------------------------------------------------------
    @classmethod
    def flat(
        cls,
        grade: Grade,
        depth: Depth,
        input_tokens: int,
        output: OutputDeclaration | OutputSize | int,
        *,
        inputs: frozenset[Input] | set[Input] = frozenset(),
    ) -> ModelBinding:
        """A grade, a depth, a counted input and a declared output. Priced as the input
        tokens plus the output budget plus the depth's thinking budget."""  # MOD-19
        return cls(
            kind=ModelKind.LLM,
            form="flat",
            grade=_require_grade(grade, "flat"),
            depth=_require_depth(depth, "flat"),
            output=_require_output(output, "flat"),
            input_tokens=_require_count(input_tokens, "input_tokens", "flat"),
            inputs=frozenset(inputs),
        )

    @classmethod
    def prompt(
        cls,
        grade: Grade,
        depth: Depth,
        prompt: str,
        output: OutputDeclaration | OutputSize | int,
        *,
        inputs: frozenset[Input] | set[Input] = frozenset(),
    ) -> ModelBinding:
        """A grade, a depth, a prompt and a declared output. Priced as the prompt's tokens,
        counted under the resolved entry's tokenizer, plus the output budget; no thinking
        budget is added."""  # MOD-20
        if not isinstance(prompt, str):
            raise ValueError(f"ModelBinding.prompt: the prompt must be a str, got {prompt!r}")
        return cls(
            kind=ModelKind.LLM,
            form="prompt",
            grade=_require_grade(grade, "prompt"),
            depth=_require_depth(depth, "prompt"),
            output=_require_output(output, "prompt"),
            prompt=prompt,
            inputs=frozenset(inputs),
        )

    @classmethod
    def wired(
        cls,
        conversation: WiredConversation,
        grade: Grade,
        depth: Depth,
        *,
        inputs: frozenset[Input] | set[Input] = frozenset(),
    ) -> ModelBinding:
        """A binding on a conversation, priced from it: its tokens under the resolved entry,
        plus its output budget, plus the depth's thinking budget. Pricing is an
        :class:`~nucleo_trio.errors.UncorrectableError` when the conversation declares no
        output size or no longer fits the entry's context window."""  # MOD-21
        if conversation is None:
            raise ValueError("ModelBinding.wired: a conversation is required")
        return cls(
            kind=ModelKind.LLM,
            form="wired",
            grade=_require_grade(grade, "wired"),
            depth=_require_depth(depth, "wired"),
            conversation=conversation,
            inputs=frozenset(inputs),
        )

    @classmethod
    def pinned(
        cls,
        spec: ModelSpec,
        depth: Depth,
        input_tokens: int,
        output: OutputDeclaration | OutputSize | int,
        *,
        inputs: frozenset[Input] | set[Input] = frozenset(),
    ) -> ModelBinding:
        """The flat form on one named language-model entry. The picker is skipped, the checks
        are not: the entry must still be open, permitted by the envelope and accept the
        inputs, but no grade floor applies and a re-run gets the same entry."""  # MOD-22, MOD-24
        return cls(
            kind=ModelKind.LLM,
            form="pinned",
            depth=_require_depth(depth, "pinned"),
            output=_require_output(output, "pinned"),
            input_tokens=_require_count(input_tokens, "input_tokens", "pinned"),
            pinned=_require_spec(spec, ModelKind.LLM, "pinned"),
            inputs=frozenset(inputs),
        )

    @classmethod
    def pinned_wired(
        cls, conversation: WiredConversation, spec: ModelSpec, depth: Depth
    ) -> ModelBinding:
        """The wired form on one named entry."""
        if conversation is None:
            raise ValueError("ModelBinding.pinned_wired: a conversation is required")
        return cls(
            kind=ModelKind.LLM,
            form="wired",
            depth=_require_depth(depth, "pinned_wired"),
            conversation=conversation,
            pinned=_require_spec(spec, ModelKind.LLM, "pinned_wired"),
        )

    @classmethod
    def embeddings(cls, tokens: int) -> ModelBinding:
        """An embeddings call of ``tokens`` tokens; no grade, priced at the count. The
        runtime serves every embeddings binding from one entry, fixed at the first
        resolution."""  # MOD-23
        return cls(
            kind=ModelKind.EMBEDDINGS,
            form="embeddings",
            input_tokens=_require_count(tokens, "tokens", "embeddings"),
        )

    @classmethod
    def embeddings_pinned(cls, spec: ModelSpec, tokens: int) -> ModelBinding:
        """An embeddings call of ``tokens`` tokens on one named embeddings entry. Once the
        runtime's embeddings entry is fixed, naming another is refused."""  # MOD-22
        return cls(
            kind=ModelKind.EMBEDDINGS,
            form="embeddings",
            input_tokens=_require_count(tokens, "tokens", "embeddings_pinned"),
            pinned=_require_spec(spec, ModelKind.EMBEDDINGS, "embeddings_pinned"),
        )

    @classmethod
    def decision(cls, request: str, *, pinned: ModelSpec | None = None) -> ModelBinding:
        """A decision call: the wire request counted under the resolved entry, no output."""
        if not isinstance(request, str) or not request:
            raise ValueError("ModelBinding.decision: the request must be a non-empty str")
        return cls(
            kind=ModelKind.DECISION,
            form="decision",
            prompt=request,
            pinned=None
            if pinned is None
            else _require_spec(pinned, ModelKind.DECISION, "decision"),
        )

    # -- state --------------------------------------------------------------------------------------
    @property
    def is_pinned(self) -> bool:
        """Whether the binding names its entry (a pinned form, or a decision with ``pinned``)."""
        return self._pinned is not None

    @property
    def pinned_spec(self) -> ModelSpec | None:
        """The entry the binding names, or ``None`` when the picker chooses."""
        return self._pinned

    @property
    def is_resolved(self) -> bool:
        """Whether :meth:`resolve` has fixed the entry."""
        return self._spec is not None

    @property
    def is_priced(self) -> bool:
        """Whether :meth:`price` has run."""
        return self._input_reservation is not None

    @property
    def model(self) -> ModelSpec:
        """The resolved entry; before resolution an
        :class:`~nucleo_trio.errors.UncorrectableError`."""
        if self._spec is None:
            raise UncorrectableError(
                f"the {self.form} model binding is not resolved yet; the dispatcher resolves "
                "it before the attempt runs"
            )
        return self._spec

    def resolve(self, spec: ModelSpec) -> None:
        """Fix the entry, once (a second call is a RuntimeError); a wired binding stamps it
        on its conversation's ``prior_spec_id``."""
        if self._spec is not None:
            raise RuntimeError(
                f"the {self.form} model binding is already resolved to {self._spec.id}; a "
                "binding resolves once (a re-run mints a fresh one)"
            )
        self._spec = spec
        if self.conversation is not None:
            self.conversation.prior_spec_id = spec.id

    # -- pricing ------------------------------------------------------------------------------------
    def price(self) -> int:
        """The tokens this call may take on the resolved entry, kept as the reservation."""
        spec = self.model
        output = 0
        if self.kind is ModelKind.LLM:
            if self.conversation is not None:
                input_tokens = self.conversation.input_tokens(spec)
                budget = self.conversation.output_budget(spec)
                if budget is None:
                    raise UncorrectableError(
                        "the conversation declares no output size; an output size is mandatory"
                    )
                if input_tokens > spec.max_context_tokens:
                    raise UncorrectableError(
                        f"the conversation holds {input_tokens} tokens, more than the context "
                        f"window of {spec.id} ({spec.max_context_tokens} tokens)",
                        llm_message="The conversation no longer fits the model's context window.",
                    )
                output = budget + spec.thinking_budget(self.depth)
            elif self._prompt is not None:
                input_tokens = spec.count_tokens(self._prompt)
                assert self.output is not None
                output = self.output.budget(spec)
            else:
                assert self._input_tokens is not None and self.output is not None
                input_tokens = self._input_tokens
                output = spec.output_reserve(self.output.size, self.depth)
        elif self.kind is ModelKind.DECISION:
            assert self._prompt is not None
            input_tokens = spec.count_tokens(self._prompt)
        else:
            assert self._input_tokens is not None
            input_tokens = self._input_tokens
        self._input_reservation = input_tokens
        self._output_reservation = output
        return input_tokens + output

    @property
    def reservation(self) -> int:
        """The priced tokens: input plus output reserve. Before :meth:`price`, a RuntimeError."""
        if self._input_reservation is None or self._output_reservation is None:
            raise RuntimeError(f"the {self.form} model binding is not priced yet")
        return self._input_reservation + self._output_reservation

    @property
    def input_reservation(self) -> int:
        """The input tokens of the reservation. Before :meth:`price`, a RuntimeError."""
        self.reservation  # noqa: B018 - the same refusal before pricing
        assert self._input_reservation is not None
        return self._input_reservation

    @property
    def output_reservation(self) -> int:
        """The output tokens of the reservation, thinking included (0 for an embeddings or
        decision binding). Before :meth:`price`, a RuntimeError."""
        self.reservation  # noqa: B018 - the same refusal before pricing
        assert self._output_reservation is not None
        return self._output_reservation

    def describe(self) -> str:
        """One line for logs: the form, the grade (or the pinned entry, or the kind) and, once
        resolved, the entry: ``"flat binding (SMALL) -> gpt-small"``."""
        what = self.grade.value if self.grade is not None else self.kind.value
        if self._pinned is not None:
            what = f"pinned {self._pinned.id}"
        state = f" -> {self._spec.id}" if self._spec is not None else ""
        return f"{self.form} binding ({what}){state}"

    def __repr__(self) -> str:
        return f"<ModelBinding {self.describe()}>"
