"""Deterministic clients for tests and the demo: the model's part, written out in advance.

A :class:`ScriptedLLMClient` plays a script, one step per call, in order. A step is a response
(returned), an exception (raised: a :class:`~nucleo_trio.errors.RateLimitRetry` plays a 429, an
:class:`~nucleo_trio.errors.OutputTruncationRetry` a truncation), or a function of the request
returning either, sync or async. When the script runs out the ``responder`` answers every
further call, and without one the call fails with a message saying how many steps there were::

    client = ScriptedLLMClient(
        [
            RateLimitRetry("429", retry_after=2.0),
            reply(tool_calls=[ToolCall(id="c1", name="search", arguments='{"q": "trio"}')]),
            reply("trio is a structured concurrency library"),
        ]
    )

Both fakes are real implementations of their protocol: they fill in what a provider would
(the model, the start and end times on the trio clock, a token count when the step gives none)
and keep every request they were sent, so a test can read back what a job asked. A ``latency``
is slept on the trio clock, so under the autojump clock it costs no real time.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import struct
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias

import attrs
import trio

from ...errors import LLMStopReason
from .protocols import TextSink, ToolCallSink
from .records import (
    EmbeddingPurpose,
    EmbeddingsResponse,
    LLMRequest,
    LLMResponse,
    ToolCall,
    Usage,
)

__all__ = [
    "EmbeddingsStep",
    "LLMStep",
    "ScriptExhaustedError",
    "ScriptedEmbeddingsClient",
    "ScriptedLLMClient",
    "estimate_tokens",
    "hashed_vector",
    "reply",
]

_LLMAnswer: TypeAlias = LLMResponse | BaseException
LLMStep: TypeAlias = (
    LLMResponse | BaseException | Callable[[LLMRequest], _LLMAnswer | Awaitable[_LLMAnswer]]
)
"""One call's part of a script: a response, an exception to raise, or a function of the request."""

_EmbeddingsAnswer: TypeAlias = EmbeddingsResponse | Sequence[Sequence[float]] | BaseException
EmbeddingsStep: TypeAlias = (
    _EmbeddingsAnswer | Callable[[Sequence[str]], _EmbeddingsAnswer | Awaitable[_EmbeddingsAnswer]]
)
"""One embeddings call's part: a response, the vectors, an exception, or a function of the texts."""

# The scripted token count: about four characters of English per token, the usual rule of
# thumb. It only has to be deterministic and roughly proportional, so a demo's ledger shows
# plausible numbers.
_CHARS_PER_TOKEN = 4


class ScriptExhaustedError(RuntimeError):
    """Raised by a scripted client called more often than its script has steps."""


def estimate_tokens(text: str) -> int:
    """The scripted clients' token count for ``text``: one per four characters, rounded up."""
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def reply(
    content: str = "",
    *,
    tool_calls: Iterable[ToolCall] = (),
    stop_reason: LLMStopReason | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> LLMResponse:
    """A scripted model turn.

    The stop reason defaults to TOOL_USE when there are tool calls and END_TURN otherwise; pass
    ``LLMStopReason.MAX_TOKENS`` to play a reply cut at its budget. Token counts left at 0 are
    estimated by the client when it plays the step.
    """
    calls = tuple(tool_calls)
    if stop_reason is None:
        stop_reason = LLMStopReason.TOOL_USE if calls else LLMStopReason.END_TURN
    return LLMResponse(
        content=content,
        tool_calls=calls,
        stop_reason=stop_reason,
        provider_stop_reason=stop_reason.value,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
    )


def _check_latency(owner: str, latency: float) -> float:
    if (
        isinstance(latency, bool)
        or not isinstance(latency, int | float)
        or not math.isfinite(latency)
        or latency < 0
    ):
        raise ValueError(
            f"{owner}: latency must be a finite number of seconds >= 0, got {latency!r}"
        )
    return float(latency)


def _check_model(owner: str, model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"{owner}: model must be a non-blank str, got {model!r}")
    return model


def _request_tokens(request: LLMRequest) -> int:
    text = "".join(
        message.content + "".join(call.arguments for call in message.tool_calls)
        for message in request.messages
    )
    return estimate_tokens(text)


async def _resolve(value: object) -> object:
    return await value if inspect.isawaitable(value) else value


class ScriptedLLMClient:
    """An :class:`LLMClient` that plays a script of responses, exceptions and functions."""

    def __init__(
        self,
        steps: Iterable[LLMStep] = (),
        *,
        responder: Callable[[LLMRequest], _LLMAnswer | Awaitable[_LLMAnswer]] | None = None,
        model: str = "scripted-model",
        latency: float = 0.0,
    ) -> None:
        """Play ``steps`` in order, then ``responder`` for every further call.

        ``model`` is the client's model identifier, and the model a response names when its
        request named none; ``latency`` is slept on the trio clock before every answer.
        """
        self._steps = list(steps)
        for index, step in enumerate(self._steps):
            if not isinstance(step, LLMResponse | BaseException) and not callable(step):
                raise TypeError(
                    f"ScriptedLLMClient: step {index} must be an LLMResponse, an exception or a "
                    f"function of the request, got {type(step).__name__}"
                )
        if responder is not None and not callable(responder):
            raise TypeError(
                f"ScriptedLLMClient: responder must be callable, got {type(responder).__name__}"
            )
        self._responder = responder
        self._model = _check_model("ScriptedLLMClient", model)
        self._latency = _check_latency("ScriptedLLMClient", latency)
        self._played = 0
        self.requests: list[LLMRequest] = []
        """Every request received, in order, failures included."""

    @property
    def model_identifier(self) -> str:
        """The model a reply names when neither the scripted reply nor the request names one
        (``model``, by default ``"scripted-model"``)."""
        return self._model

    @property
    def remaining(self) -> int:
        """Steps of the script not yet played."""
        return len(self._steps) - self._played

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Play the next step for ``request``."""
        if not isinstance(request, LLMRequest):
            raise TypeError(f"ScriptedLLMClient needs an LLMRequest, got {type(request).__name__}")
        self.requests.append(request)
        started = trio.current_time()
        step = self._next_step(len(self.requests))
        if self._latency:
            await trio.sleep(self._latency)
        answer = await _resolve(step(request) if callable(step) else step)
        if isinstance(answer, BaseException):
            raise answer
        if not isinstance(answer, LLMResponse):
            raise TypeError(
                f"ScriptedLLMClient: call {len(self.requests)} was answered with a "
                f"{type(answer).__name__}, not an LLMResponse or an exception"
            )
        return self._stamp(answer, request, started)

    async def stream(
        self, request: LLMRequest, on_text: TextSink, *, on_tool_call: ToolCallSink | None = None
    ) -> LLMResponse:
        """Play the next step and hand its text to ``on_text`` a word at a time, then each
        tool call to ``on_tool_call`` in two fragments: its id and name, then its arguments."""
        response = await self.complete(request)
        pieces = response.content.split(" ")
        for index, piece in enumerate(pieces):
            on_text(piece if index == len(pieces) - 1 else piece + " ")
        if on_tool_call is not None:
            for index, call in enumerate(response.tool_calls):
                on_tool_call(index, call.id, call.name, "")
                on_tool_call(index, None, "", call.arguments)
        return response

    def _next_step(self, call_number: int) -> LLMStep:
        if self._played < len(self._steps):
            step = self._steps[self._played]
            self._played += 1
            return step
        if self._responder is not None:
            return self._responder
        raise ScriptExhaustedError(
            f"ScriptedLLMClient: the script has {len(self._steps)} step(s) and no responder, "
            f"and call {call_number} arrived"
        )

    def _stamp(self, response: LLMResponse, request: LLMRequest, started: float) -> LLMResponse:
        # Fill in what a provider would have; a step that states a value keeps it.
        usage = response.usage
        if usage == Usage():
            usage = Usage(
                input_tokens=_request_tokens(request),
                output_tokens=estimate_tokens(
                    response.content + "".join(call.arguments for call in response.tool_calls)
                ),
            )
        return attrs.evolve(
            response,
            usage=usage,
            model=response.model or request.model or self._model,
            provider_model=response.provider_model or request.model or self._model,
            started_at=started if response.started_at is None else response.started_at,
            ended_at=trio.current_time() if response.ended_at is None else response.ended_at,
        )

    def __repr__(self) -> str:
        return f"<ScriptedLLMClient {self._model} played {self._played}/{len(self._steps)}>"


def hashed_vector(text: str, dimensions: int) -> tuple[float, ...]:
    """A unit vector that depends only on ``text``: the same text always gets the same vector."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        for (word,) in struct.iter_unpack(">I", digest):
            values.append(word / 0xFFFFFFFF * 2.0 - 1.0)
        counter += 1
    vector = values[:dimensions]
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return tuple(x / norm for x in vector)


class ScriptedEmbeddingsClient:
    """An :class:`EmbeddingsClient` that plays a script, then embeds every text by its hash.

    A step is an :class:`EmbeddingsResponse`, the vectors themselves, an exception to raise, or
    a function of the texts returning one of those. Once the script is played, each text gets a
    unit vector derived from its SHA-256, so equal texts get equal vectors in every run.
    """

    def __init__(
        self,
        steps: Iterable[EmbeddingsStep] = (),
        *,
        dimensions: int = 8,
        model: str = "scripted-embeddings",
        latency: float = 0.0,
    ) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions <= 0:
            raise ValueError(
                f"ScriptedEmbeddingsClient: dimensions must be a positive int, got {dimensions!r}"
            )
        self._steps = list(steps)
        self._dimensions = dimensions
        self._model = _check_model("ScriptedEmbeddingsClient", model)
        self._latency = _check_latency("ScriptedEmbeddingsClient", latency)
        self._played = 0
        self.calls: list[tuple[tuple[str, ...], str | None, EmbeddingPurpose]] = []
        """Every call received, in order: the texts, the model asked for, the purpose."""

    @property
    def model_identifier(self) -> str:
        """The model a response names when the call named none (``model``, by default
        ``"scripted-embeddings"``)."""
        return self._model

    async def embed(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        purpose: EmbeddingPurpose = EmbeddingPurpose.DOCUMENT,
    ) -> EmbeddingsResponse:
        """Play the next step for ``texts``, or embed them by their hash."""
        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise TypeError("ScriptedEmbeddingsClient.embed needs a sequence of str")
        batch = tuple(texts)
        self.calls.append((batch, model, purpose))
        started = trio.current_time()
        if self._latency:
            await trio.sleep(self._latency)
        if self._played < len(self._steps):
            step = self._steps[self._played]
            self._played += 1
            answer = await _resolve(step(batch) if callable(step) else step)
        else:
            answer = tuple(hashed_vector(text, self._dimensions) for text in batch)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, EmbeddingsResponse):
            return answer
        if not isinstance(answer, Sequence) or isinstance(answer, str):
            raise TypeError(
                f"ScriptedEmbeddingsClient: call {len(self.calls)} was answered with a "
                f"{type(answer).__name__}, not vectors, an EmbeddingsResponse or an exception"
            )
        return EmbeddingsResponse(
            vectors=answer,
            model=model or self._model,
            purpose=purpose,
            usage=Usage(input_tokens=sum(estimate_tokens(text) for text in batch)),
            started_at=started,
            ended_at=trio.current_time(),
        )

    def __repr__(self) -> str:
        return f"<ScriptedEmbeddingsClient {self._model} dimensions={self._dimensions}>"
