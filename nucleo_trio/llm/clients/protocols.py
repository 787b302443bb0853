"""The two client interfaces: a chat model and an embedding model, both async on trio.

Any object with these methods is a client; nothing needs to inherit from anything. The shipped
implementations are the scripted fakes, the OpenAI-compatible client, and the observable
wrappers a job's calls go through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from .records import EmbeddingPurpose, EmbeddingsResponse, LLMRequest, LLMResponse

__all__ = ["EmbeddingsClient", "LLMClient", "TextSink", "ToolCallSink"]

TextSink = Callable[[str], object]
"""Receives each piece of a streamed reply's text as it arrives."""

ToolCallSink = Callable[[int, "str | None", str, str], object]
"""Receives each fragment of a streamed tool call as it arrives, as ``(index, id, name,
arguments)``: the call's position in the reply, its id once the model has said it (else
``None``), and the pieces of its name and of its JSON arguments this fragment adds (``""`` when
it adds none). Joined in order, a call's pieces are its whole name and arguments."""


@runtime_checkable
class LLMClient(Protocol):
    """Calls a chat model.

    A call the model completed returns a successful :class:`LLMResponse`, whatever its stop
    reason; a call that did not complete raises (a re-run signal for a 429, an overload or a
    transient fault, the matching HTTP error otherwise). A client never retries on its own:
    re-running is the dispatcher's decision.
    """

    @property
    def model_identifier(self) -> str | None:
        """The model called when a request names none; ``None`` if every request must name one."""
        ...

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` and return the model's whole reply."""
        ...

    async def stream(self, request: LLMRequest, on_text: TextSink) -> LLMResponse:
        """Send ``request``, hand each piece of text to ``on_text`` as it arrives, and return
        the whole reply, as :meth:`complete` would have.

        A client that can also hand over tool calls as they arrive takes a keyword-only
        ``on_tool_call`` (a :data:`ToolCallSink`, default ``None``) beside ``on_text``; the
        observable wrapper passes it on only to a client whose ``stream`` names it.
        """
        ...


@runtime_checkable
class EmbeddingsClient(Protocol):
    """Turns texts into vectors."""

    @property
    def model_identifier(self) -> str | None:
        """The model used when a call names none; ``None`` if every call must name one."""
        ...

    async def embed(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        purpose: EmbeddingPurpose = EmbeddingPurpose.DOCUMENT,
    ) -> EmbeddingsResponse:
        """One vector per text, in order, from ``model`` (else :attr:`model_identifier`)."""
        ...
