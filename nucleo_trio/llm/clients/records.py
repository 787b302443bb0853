"""What a job sends to a model and what comes back: frozen records, checked when built.

A request is a conversation so far (:class:`Message` turns), an output budget and optionally
tools or a schema the reply must follow. A response is the model's turn (text, tool calls or
both), why it stopped, what it used, and whether the call succeeded at all: a call that raised
is still kept, as an unsuccessful response carrying the reason, the error and the model, so a
job's record of its model calls is complete whatever happened to them.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ...errors import JsonParseError, LLMStopReason, OutputTruncationRetry, RateLimitRetry
from .rate_limit_info import RateLimitInfo

__all__ = [
    "EmbeddingPurpose",
    "EmbeddingsResponse",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "OutputSchema",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]


# --------------------------------------------------------------------------------------------
# Field checks
# --------------------------------------------------------------------------------------------


def _owner(instance: object) -> str:
    return type(instance).__name__


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(
            f"{_owner(instance)}.{attribute.name} must be a str, got {type(value).__name__}"
        )


def _name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _text(instance, attribute, value)
    if not str(value).strip():
        raise ValueError(f"{_owner(instance)}.{attribute.name} must not be blank")


def _optional_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _name(instance, attribute, value)


def _optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _text(instance, attribute, value)


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{_owner(instance)}.{attribute.name} must be an int >= 0, got {value!r}")


def _optional_instant(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"{_owner(instance)}.{attribute.name} must be a finite clock reading, got {value!r}"
        )


def _optional_error(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, BaseException):
        raise TypeError(
            f"{_owner(instance)}.{attribute.name} must be an exception, got {type(value).__name__}"
        )


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


def _tuple_of(kind: type) -> Any:
    """A validator that every member of a tuple field is a ``kind``, naming the first that is not."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for index, item in enumerate(value):
            if not isinstance(item, kind):
                raise TypeError(
                    f"{_owner(instance)}.{attribute.name}[{index}] must be a {kind.__name__}, "
                    f"got {type(item).__name__}"
                )

    return check


def _to_tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise TypeError(f"expected a sequence of records, got {type(value).__name__}")
    return tuple(value)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


class Role(enum.Enum):
    """Who speaks a turn of a conversation."""

    SYSTEM = "system"
    """The instructions that frame the conversation, sent first."""
    USER = "user"
    """The person or program asking: the objective, questions, corrections."""
    ASSISTANT = "assistant"
    """The model: its replies, text and tool calls."""
    TOOL = "tool"
    """The result of one tool call, sent back for the model to read."""


@attrs.frozen(kw_only=True)
class ToolCall:
    """One tool the model asked to call: the call's id, the tool's name and its JSON arguments.

    ``arguments`` is the text the model wrote, kept as written: whether it parses is a question
    for the caller, which can send a correction back to the model.
    """

    id: str = attrs.field(validator=_name)
    """The call's id, as the model gave it; the TOOL turn that answers the call names it. Must not
    be blank."""
    name: str = attrs.field(validator=_name)
    """The name of the tool the model asked for. Must not be blank."""
    arguments: str = attrs.field(default="{}", validator=_text)
    """The arguments as the JSON text the model wrote, unparsed; ``"{}"`` by default."""

    def parsed_arguments(self) -> Mapping[str, Any]:
        """The arguments as a JSON object; anything else is a correctable :class:`JsonParseError`."""
        shape = f"a JSON object of the arguments of tool {self.name!r}"
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise JsonParseError(str(exc), shape, cause=exc) from exc
        if not isinstance(value, dict):
            raise JsonParseError(f"expected an object, got {type(value).__name__}", shape)
        return value


@attrs.frozen(kw_only=True)
class Message:
    """One turn of a conversation.

    A TOOL turn answers one call and names it in ``tool_call_id``; only an ASSISTANT turn
    carries ``tool_calls``.
    """

    role: Role = attrs.field(validator=attrs.validators.instance_of(Role))
    """Who speaks the turn."""
    content: str = attrs.field(default="", validator=_text)
    """The turn's text; empty by default (an assistant turn may only call tools)."""
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolCall)
    )
    """The tools an ASSISTANT turn calls, in order; empty for any other turn."""
    tool_call_id: str | None = attrs.field(default=None, validator=_optional_name)
    """The id of the call a TOOL turn answers; ``None`` for any other turn."""

    def __attrs_post_init__(self) -> None:
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError(
                f"Message: only an assistant turn carries tool calls, not {self.role.value}"
            )
        if (self.role is Role.TOOL) != (self.tool_call_id is not None):
            raise ValueError(
                "Message: a tool turn must name the call it answers in tool_call_id, "
                "and only a tool turn may"
            )

    @classmethod
    def system(cls, content: str) -> Message:
        """A system instruction."""
        return cls(role=Role.SYSTEM, content=content)

    @classmethod
    def user(cls, content: str) -> Message:
        """A user turn."""
        return cls(role=Role.USER, content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        """A model turn: text, tool calls or both."""
        return cls(role=Role.ASSISTANT, content=content, tool_calls=tool_calls)

    @classmethod
    def tool_result(cls, call_id: str, content: str) -> Message:
        """The result of tool call ``call_id``, as the model will read it."""
        return cls(role=Role.TOOL, content=content, tool_call_id=call_id)


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and a JSON schema of its arguments."""

    name: str = attrs.field(validator=_name)
    """The name the model calls the tool by. Must not be blank."""
    description: str = attrs.field(default="", validator=_text)
    """What the tool does, as the model reads it; empty by default."""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}, converter=_frozen_mapping
    )
    """The JSON schema of the tool's arguments, kept read-only; by default an object with no
    declared properties."""


@attrs.frozen(kw_only=True)
class OutputSchema:
    """The JSON schema a structured reply must follow; ``name`` identifies it to the provider."""

    name: str = attrs.field(validator=_name)
    """The name the provider knows the schema by. Must not be blank."""
    schema: Mapping[str, Any] = attrs.field(converter=_frozen_mapping)
    """The JSON schema the reply must follow, kept read-only."""
    strict: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """Whether the provider is asked to hold the reply to the schema exactly; ``True`` by
    default."""


def _positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{_owner(instance)}.{attribute.name} must be a positive int (the output budget "
            f"is mandatory), got {value!r}"
        )


def _temperature(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"LLMRequest.temperature must be a finite number >= 0, got {value!r}")


def _messages(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    _tuple_of(Message)(instance, attribute, value)
    if not value:
        raise ValueError("LLMRequest.messages must hold at least one message")


def _stops(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise ValueError(f"LLMRequest.stop[{index}] must be a non-empty str, got {item!r}")


@attrs.frozen(kw_only=True)
class LLMRequest:
    """One call to a chat model.

    ``model`` is the id the provider knows the model by; ``None`` leaves the choice to the
    client (its ``model_identifier``). ``max_tokens`` is the output budget and has no default:
    the budget is what admission reserves, so every call must declare it. ``extra`` holds
    provider fields a client passes through to the wire as they are.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_to_tuple, validator=_messages)
    """The conversation so far, oldest first; at least one message."""
    max_tokens: int = attrs.field(validator=_positive)
    """The output budget in tokens: a positive int, required."""
    model: str | None = attrs.field(default=None, validator=_optional_name)
    """The wire id of the model to call; ``None`` (the default) leaves it to the client's
    ``model_identifier``."""
    tools: tuple[ToolSpec, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolSpec)
    )
    """The tools the model may call; empty by default."""
    tool_choice: str | None = attrs.field(default=None, validator=_optional_name)
    """``"auto"``, ``"none"``, ``"required"`` or one tool's name; ``None`` (the default) leaves it
    to the provider. Setting it with no tools is a :class:`ValueError`."""
    output_schema: OutputSchema | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(OutputSchema)),
    )
    """The schema a structured reply must follow, or ``None`` (the default) for free text."""
    temperature: float | None = attrs.field(default=None, validator=_temperature)
    """The sampling temperature, a finite number >= 0; ``None`` (the default) leaves it to the
    provider."""
    stop: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple, validator=_stops)
    """Stop sequences: text at which the model stops writing; empty by default."""
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    """Provider fields passed through to the request body as they are, kept read-only; empty by
    default."""

    def __attrs_post_init__(self) -> None:
        if self.tool_choice is not None and not self.tools:
            raise ValueError("LLMRequest: tool_choice is set but the request offers no tools")

    def with_max_tokens(self, max_tokens: int) -> LLMRequest:
        """This request with another output budget (a truncation re-run raises it)."""
        return attrs.evolve(self, max_tokens=max_tokens)

    def with_model(self, model: str | None) -> LLMRequest:
        """This request sent to another model."""
        return attrs.evolve(self, model=model)


# --------------------------------------------------------------------------------------------
# Responses
# --------------------------------------------------------------------------------------------

# An estimate from text counts a token per four characters, rounded up: the usual rule of thumb
# for English prose (code and other scripts run at fewer characters a token, so an estimate from
# text is a floor, not a bound). The scripted clients count the same way.
_CHARS_PER_TOKEN = 4


def _estimated_tokens(text: str) -> int:
    return -(-len(text) // _CHARS_PER_TOKEN)


@attrs.frozen(kw_only=True)
class Usage:
    """The tokens a call consumed: the prompt read, and the output written (thinking included).

    ``estimated`` is true when the provider reported no usage and the counts were worked out
    here instead: from the text (see :meth:`estimate`), or from what the call reserved. A spend
    ledger books such a call all the same, marked estimated, rather than at zero.

    A provider with a prompt cache reports the cached part of the prompt apart:
    ``cache_read_tokens`` were read from the cache and ``cache_write_tokens`` written to it, and
    ``input_tokens`` is the rest of the prompt. The ledger prices each part at its own rate.
    """

    input_tokens: int = attrs.field(default=0, validator=_count)
    """Tokens of the prompt the model read, the cached ones not included; 0 by default."""
    output_tokens: int = attrs.field(default=0, validator=_count)
    """Tokens the model wrote, thinking included; 0 by default."""
    estimated: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Whether the counts were worked out here because the provider reported none; ``False`` by
    default."""
    cache_read_tokens: int = attrs.field(default=0, validator=_count)
    """Tokens of the prompt read from the provider's prompt cache; 0 by default."""
    cache_write_tokens: int = attrs.field(default=0, validator=_count)
    """Tokens of the prompt written to the provider's prompt cache; 0 by default."""

    @classmethod
    def estimate(cls, input_text: str, output_text: str) -> Usage:
        """An estimate for a call whose provider reported no usage: a token per four
        characters (rounded up) of what was sent and of what came back, marked ``estimated``.
        It is a floor (code and most scripts other than English run at fewer characters a
        token, and a model's hidden thinking is not in its text)."""
        return cls(
            input_tokens=_estimated_tokens(input_text),
            output_tokens=_estimated_tokens(output_text),
            estimated=True,
        )

    def at_least(self, other: Usage) -> Usage:
        """Each count the larger of this usage's and ``other``'s; estimated if either is."""
        return Usage(
            input_tokens=max(self.input_tokens, other.input_tokens),
            output_tokens=max(self.output_tokens, other.output_tokens),
            estimated=self.estimated or other.estimated,
            cache_read_tokens=max(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=max(self.cache_write_tokens, other.cache_write_tokens),
        )

    @property
    def total_tokens(self) -> int:
        """Every token the call consumed: the prompt, its cached parts included, and the
        output."""
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.output_tokens
        )


def _duration(started_at: float | None, ended_at: float | None) -> float | None:
    if started_at is None or ended_at is None:
        return None
    return ended_at - started_at


def _failure_reason(error: BaseException) -> str:
    # The exception's own message, as the reference records it; a message-less exception
    # (trio.Cancelled, a bare RuntimeError()) still says what it was.
    return str(error) or type(error).__name__


@attrs.frozen(kw_only=True)
class LLMResponse:
    """A model's answer to one call, or the record of a call that failed.

    A successful response holds the model's turn: ``content``, ``tool_calls``, the normalised
    ``stop_reason`` beside the provider's own word, and ``usage``. An unsuccessful one
    (``successful`` false) holds ``reason_for_failure`` and ``last_error`` instead. Both say which
    ``model`` the call was made for, which is what a spend ledger prices, and when it started and
    ended on the trio clock. ``rate_limit_info`` is what the provider said about its limits on
    this call, when it said anything: the caps in a successful answer's headers, or the bare
    fact of a 429 on a failure.
    """

    content: str = attrs.field(default="", validator=_text)
    """The reply's text; empty for a reply that only called tools, and for a failure."""
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolCall)
    )
    """The tools the model called, in order; empty by default."""
    stop_reason: LLMStopReason = attrs.field(
        default=LLMStopReason.UNKNOWN, validator=attrs.validators.instance_of(LLMStopReason)
    )
    """Why the model stopped, normalised across providers; ``UNKNOWN`` by default."""
    provider_stop_reason: str | None = attrs.field(default=None, validator=_optional_text)
    """The provider's own word for why it stopped (``"length"``, ``"stop"``), or ``None``."""
    usage: Usage = attrs.field(factory=Usage, validator=attrs.validators.instance_of(Usage))
    """The tokens the call consumed; zero counts by default."""
    model: str | None = attrs.field(default=None, validator=_optional_name)
    """The model id the call was made for, which a spend ledger prices; ``None`` when unknown."""
    provider_model: str | None = attrs.field(default=None, validator=_optional_text)
    """The model the provider says served the call (it may name a dated version), or ``None``."""
    response_id: str | None = attrs.field(default=None, validator=_optional_text)
    """The provider's id for the reply, or ``None``."""
    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """``False`` for the record of a call that raised; ``True`` by default."""
    reason_for_failure: str | None = attrs.field(default=None, validator=_optional_text)
    """Why a failed call failed (its error's message), or ``None`` for a success."""
    last_error: BaseException | None = attrs.field(
        default=None, validator=_optional_error, eq=False
    )
    """The exception a failed call raised, or ``None``; not compared in equality."""
    started_at: float | None = attrs.field(default=None, validator=_optional_instant)
    """When the call started, in ``trio.current_time()`` seconds, or ``None``."""
    ended_at: float | None = attrs.field(default=None, validator=_optional_instant)
    """When the call ended, in ``trio.current_time()`` seconds, or ``None``."""
    rate_limit_info: RateLimitInfo | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(RateLimitInfo)),
    )
    """What the provider said of its rate limits on this call, or ``None`` when it said nothing."""

    @classmethod
    def failure(
        cls,
        error: BaseException,
        *,
        model: str | None,
        started_at: float | None = None,
        ended_at: float | None = None,
        stop_reason: LLMStopReason | None = None,
    ) -> LLMResponse:
        """The record of a call that raised ``error``.

        Unsuccessful, with the error's message (else its class name) as the reason and the
        error itself as ``last_error``. The stop reason defaults to MAX_TOKENS for an
        :class:`OutputTruncationRetry` and UNKNOWN for anything else. A
        :class:`RateLimitRetry` on a named model carries ``RateLimitInfo.rate_limited(model)``.
        Anything but an exception is a :class:`TypeError`.
        """
        # OC-02, OC-03 (truncation as MAX_TOKENS), RLI-01 (a 429's bare reading).
        if not isinstance(error, BaseException):
            raise TypeError(f"LLMResponse.failure needs an exception, got {type(error).__name__}")
        if stop_reason is None:
            truncated = isinstance(error, OutputTruncationRetry)
            stop_reason = LLMStopReason.MAX_TOKENS if truncated else LLMStopReason.UNKNOWN
        limited = isinstance(error, RateLimitRetry)
        info = RateLimitInfo.rate_limited(model) if limited and model is not None else None
        return cls(
            stop_reason=stop_reason,
            model=model,
            successful=False,
            reason_for_failure=_failure_reason(error),
            last_error=error,
            started_at=started_at,
            ended_at=ended_at,
            rate_limit_info=info,
        )

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, or ``None`` when either is unknown."""
        return _duration(self.started_at, self.ended_at)

    @property
    def is_truncated(self) -> bool:
        """Whether the reply was cut at its output budget."""
        return self.stop_reason is LLMStopReason.MAX_TOKENS

    @property
    def has_tool_calls(self) -> bool:
        """Whether the model called any tool."""
        return bool(self.tool_calls)


class EmbeddingPurpose(enum.Enum):
    """What the vectors are for; some providers embed a query differently from a document."""

    DOCUMENT = "document"
    """Vectors of texts to be stored and searched; the default."""
    QUERY = "query"
    """Vectors of a search query, to be compared with stored documents."""


def _vectors(value: Any) -> tuple[tuple[float, ...], ...]:
    if isinstance(value, str | bytes | Mapping):
        raise TypeError(f"EmbeddingsResponse.vectors must be a sequence of vectors, got {value!r}")
    vectors = []
    for index, vector in enumerate(value):
        if isinstance(vector, str | bytes | Mapping):
            raise TypeError(f"EmbeddingsResponse.vectors[{index}] must be a sequence of floats")
        row = tuple(float(x) for x in vector)
        if not all(math.isfinite(x) for x in row):
            raise ValueError(f"EmbeddingsResponse.vectors[{index}] holds a non-finite number")
        vectors.append(row)
    return tuple(vectors)


@attrs.frozen(kw_only=True)
class EmbeddingsResponse:
    """The vectors for one embeddings call, one per text in order, or the record of a failure."""

    vectors: tuple[tuple[float, ...], ...] = attrs.field(default=(), converter=_vectors)
    """One vector of floats per text, in the order the texts were given; every number finite. Empty
    for a failure."""
    model: str | None = attrs.field(default=None, validator=_optional_name)
    """The model id the call was made for, or ``None`` when unknown."""
    purpose: EmbeddingPurpose = attrs.field(
        default=EmbeddingPurpose.DOCUMENT, validator=attrs.validators.instance_of(EmbeddingPurpose)
    )
    """What the vectors are for; ``DOCUMENT`` by default."""
    usage: Usage = attrs.field(factory=Usage, validator=attrs.validators.instance_of(Usage))
    """The tokens the call read; zero counts by default."""
    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """``False`` for the record of a call that raised; ``True`` by default."""
    reason_for_failure: str | None = attrs.field(default=None, validator=_optional_text)
    """Why a failed call failed (its error's message), or ``None`` for a success."""
    last_error: BaseException | None = attrs.field(
        default=None, validator=_optional_error, eq=False
    )
    """The exception a failed call raised, or ``None``; not compared in equality."""
    started_at: float | None = attrs.field(default=None, validator=_optional_instant)
    """When the call started, in ``trio.current_time()`` seconds, or ``None``."""
    ended_at: float | None = attrs.field(default=None, validator=_optional_instant)
    """When the call ended, in ``trio.current_time()`` seconds, or ``None``."""

    @classmethod
    def failure(
        cls,
        error: BaseException,
        *,
        model: str | None,
        purpose: EmbeddingPurpose,
        started_at: float | None = None,
        ended_at: float | None = None,
    ) -> EmbeddingsResponse:
        """The record of an embeddings call that raised ``error``: unsuccessful, with the
        error's message as the reason, the error as ``last_error``, and the model and purpose
        asked for, so a ledger can still price it. Anything but an exception is a
        :class:`TypeError`."""
        # OC-05
        if not isinstance(error, BaseException):
            raise TypeError(
                f"EmbeddingsResponse.failure needs an exception, got {type(error).__name__}"
            )
        return cls(
            model=model,
            purpose=purpose,
            successful=False,
            reason_for_failure=_failure_reason(error),
            last_error=error,
            started_at=started_at,
            ended_at=ended_at,
        )

    @property
    def duration(self) -> float | None:
        """Seconds from start to end, or ``None`` when either is unknown."""
        return _duration(self.started_at, self.ended_at)

    @property
    def dimensions(self) -> int | None:
        """The length of the vectors, or ``None`` when there are none."""
        return len(self.vectors[0]) if self.vectors else None
