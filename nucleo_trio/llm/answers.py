"""Reading a model's reply: as it is, as text, or as a structured answer checked field by field.

A response handler turns an :class:`~nucleo_trio.llm.clients.LLMResponse` into what the caller
wants, and says what output schema the request should carry. A reply it cannot read raises a
correctable error (:class:`~nucleo_trio.errors.JsonParseError` for a reply that does not parse,
:class:`~nucleo_trio.errors.ResponseValidationError` for one that leaves a required field empty),
which an :class:`~nucleo_trio.llm.LLMCall` feeds back to the model as a correction.

:class:`StructuredAnswer` reads an attrs class: every field without a default, and every field
marked with :func:`llm_required`, must be present and not empty::

    @attrs.frozen
    class Review:
        verdict: str = llm_required()
        notes: str = ""

    call = LLMCall(parent, conversation, answer=StructuredAnswer(Review))
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import attrs

from ..errors import JsonParseError, ResponseValidationError
from .clients import LLMResponse, OutputSchema

__all__ = [
    "LLM_REQUIRED",
    "RawResponse",
    "ResponseHandler",
    "StructuredAnswer",
    "TextAnswer",
    "llm_required",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
A = TypeVar("A")

LLM_REQUIRED = "nucleo.llm_required"
"""The attrs field metadata key :func:`llm_required` sets."""


def llm_required(**kwargs: Any) -> Any:
    """An attrs field the model must fill: present and not empty, or the reply is corrected."""
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[LLM_REQUIRED] = True
    kwargs.setdefault("default", None)
    return attrs.field(metadata=metadata, **kwargs)


@runtime_checkable
class ResponseHandler(Protocol[T_co]):
    """Reads a reply; raises a correctable error for one it cannot read."""

    def output_schema(self) -> OutputSchema | None:
        """The schema the request asks the model to follow, or ``None`` for free text."""
        ...

    def parse(self, response: LLMResponse) -> T_co:
        """What the caller gets from ``response``."""
        ...


class RawResponse:
    """The reply as it is: the whole :class:`LLMResponse` (a thinker reads its tool calls)."""

    def output_schema(self) -> OutputSchema | None:
        """Always ``None``: the request asks for no structured output."""
        return None

    def parse(self, response: LLMResponse) -> LLMResponse:
        """``response`` itself, unread; it never raises."""
        return response


class TextAnswer:
    """The reply's text; an empty reply is corrected."""

    def output_schema(self) -> OutputSchema | None:
        """Always ``None``: the reply is free text."""
        return None

    def parse(self, response: LLMResponse) -> str:
        """The reply's text, as written. A reply that is empty or only whitespace raises a
        :class:`~nucleo_trio.errors.ResponseValidationError`, which the call feeds back to the
        model as a correction."""
        if not response.content.strip():
            raise ResponseValidationError({"answer": "the reply is empty; answer in text"})
        return response.content


_JSON_TYPES: Mapping[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(members[0]) if len(members) == 1 else {}
    if origin is not None:
        annotation = origin
    if isinstance(annotation, type):
        for kind, name in _JSON_TYPES.items():
            if issubclass(annotation, kind):
                return {"type": name}
    return {}


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list | tuple | dict | set):
        return not value
    return False


class StructuredAnswer(Generic[A]):
    """The reply's JSON read into the attrs class ``cls``; anything but an attrs class is a
    :class:`TypeError`.

    The request carries the class's JSON schema; a reply that does not parse, is not an object
    or leaves a required field empty raises a correctable error, which the call feeds back to
    the model.
    """

    # TOOL-26: a structured answer checked field by field.

    def __init__(self, cls: type[A]) -> None:
        if not attrs.has(cls):
            raise TypeError(f"StructuredAnswer reads an attrs class, got {cls!r}")
        self.cls: type[A] = cast("type[A]", cls)
        """The attrs class the reply is read into."""
        self._fields = attrs.fields(cls)
        self._hints = typing.get_type_hints(cls)

    @property
    def required(self) -> tuple[str, ...]:
        """The fields the model must fill: those with no default and those marked required."""
        return tuple(
            f.name
            for f in self._fields
            if f.init and (f.default is attrs.NOTHING or f.metadata.get(LLM_REQUIRED))
        )

    def schema(self) -> dict[str, Any]:
        """The JSON schema of ``cls``: an object with one property per ``__init__`` field
        (typed where the annotation maps to a JSON type), the :attr:`required` names, and no
        other properties."""
        properties = {
            f.name: _json_type(self._hints.get(f.name, Any)) for f in self._fields if f.init
        }
        return {
            "type": "object",
            "properties": properties,
            "required": list(self.required),
            "additionalProperties": False,
        }

    def output_schema(self) -> OutputSchema | None:
        """:meth:`schema` as the request's output schema, named after ``cls``."""
        return OutputSchema(name=self.cls.__name__, schema=self.schema())

    def shape(self) -> str:
        """:meth:`schema` as JSON text: what a correction tells the model to follow."""
        return json.dumps(self.schema())

    def parse(self, response: LLMResponse) -> A:
        """An instance of ``cls`` from the reply's JSON text. Text that does not parse, or
        is not a JSON object, raises :class:`~nucleo_trio.errors.JsonParseError`; then as
        :meth:`from_mapping`."""
        try:
            data = json.loads(response.content)
        except json.JSONDecodeError as exc:
            raise JsonParseError(str(exc), self.shape(), cause=exc) from exc
        if not isinstance(data, dict):
            raise JsonParseError(f"expected a JSON object, got {type(data).__name__}", self.shape())
        return self.from_mapping(data)

    def from_mapping(self, data: Mapping[str, Any]) -> A:
        """Build the answer from parsed JSON; keys that name no field are dropped. Empty
        required fields, or values ``cls`` refuses, raise
        :class:`~nucleo_trio.errors.ResponseValidationError` naming them."""
        names = {f.name for f in self._fields if f.init}
        failures = {
            name: "is required and was left empty"
            for name in self.required
            if _is_empty(data.get(name))
        }
        if failures:
            raise ResponseValidationError(failures)
        try:
            built: A = self.cls(**{k: v for k, v in data.items() if k in names})
        except (TypeError, ValueError) as exc:
            raise ResponseValidationError({self.cls.__name__: str(exc)}, cause=exc) from exc
        return built
