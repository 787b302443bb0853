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
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen(kw_only=True)
class ToolCall:
    """One tool the model asked to call: the call's id, the tool's name and its JSON arguments.

    ``arguments`` is the text the model wrote, kept as written: whether it parses is a question
    for the caller, which can send a correction back to the model.
    """

    id: str = attrs.field(validator=_name)
    name: str = attrs.field(validator=_name)
    arguments: str = attrs.field(default="{}", validator=_text)

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
    content: str = attrs.field(default="", validator=_text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolCall)
    )
    tool_call_id: str | None = attrs.field(default=None, validator=_optional_name)

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
    description: str = attrs.field(default="", validator=_text)
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}, converter=_frozen_mapping
    )


@attrs.frozen(kw_only=True)
class OutputSchema:
    """The JSON schema a structured reply must follow; ``name`` identifies it to the provider."""

    name: str = attrs.field(validator=_name)
    schema: Mapping[str, Any] = attrs.field(converter=_frozen_mapping)
    strict: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))


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
    max_tokens: int = attrs.field(validator=_positive)
    model: str | None = attrs.field(default=None, validator=_optional_name)
    tools: tuple[ToolSpec, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolSpec)
    )
    tool_choice: str | None = attrs.field(default=None, validator=_optional_name)
    output_schema: OutputSchema | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(OutputSchema)),
    )
    temperature: float | None = attrs.field(default=None, validator=_temperature)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_to_tuple, validator=_stops)
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)

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
    """

    input_tokens: int = attrs.field(default=0, validator=_count)
    output_tokens: int = attrs.field(default=0, validator=_count)
    estimated: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

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
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_tuple_of(ToolCall)
    )
    stop_reason: LLMStopReason = attrs.field(
        default=LLMStopReason.UNKNOWN, validator=attrs.validators.instance_of(LLMStopReason)
    )
    provider_stop_reason: str | None = attrs.field(default=None, validator=_optional_text)
    usage: Usage = attrs.field(factory=Usage, validator=attrs.validators.instance_of(Usage))
    model: str | None = attrs.field(default=None, validator=_optional_name)
    provider_model: str | None = attrs.field(default=None, validator=_optional_text)
    response_id: str | None = attrs.field(default=None, validator=_optional_text)
    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    reason_for_failure: str | None = attrs.field(default=None, validator=_optional_text)
    last_error: BaseException | None = attrs.field(
        default=None, validator=_optional_error, eq=False
    )
    started_at: float | None = attrs.field(default=None, validator=_optional_instant)
    ended_at: float | None = attrs.field(default=None, validator=_optional_instant)
    rate_limit_info: RateLimitInfo | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(RateLimitInfo)),
    )

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
        """The record of a call that raised ``error`` (OC-02).

        Unsuccessful, with the error's message as the reason and the error itself as
        ``last_error``. The stop reason defaults to MAX_TOKENS for an
        :class:`OutputTruncationRetry` (OC-03) and UNKNOWN for anything else. A
        :class:`RateLimitRetry` on a named model carries ``RateLimitInfo.rate_limited(model)``
        (RLI-01).
        """
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
        return bool(self.tool_calls)


class EmbeddingPurpose(enum.Enum):
    """What the vectors are for; some providers embed a query differently from a document."""

    DOCUMENT = "document"
    QUERY = "query"


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
    model: str | None = attrs.field(default=None, validator=_optional_name)
    purpose: EmbeddingPurpose = attrs.field(
        default=EmbeddingPurpose.DOCUMENT, validator=attrs.validators.instance_of(EmbeddingPurpose)
    )
    usage: Usage = attrs.field(factory=Usage, validator=attrs.validators.instance_of(Usage))
    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    reason_for_failure: str | None = attrs.field(default=None, validator=_optional_text)
    last_error: BaseException | None = attrs.field(
        default=None, validator=_optional_error, eq=False
    )
    started_at: float | None = attrs.field(default=None, validator=_optional_instant)
    ended_at: float | None = attrs.field(default=None, validator=_optional_instant)

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
        """The record of an embeddings call that raised ``error`` (OC-05)."""
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
