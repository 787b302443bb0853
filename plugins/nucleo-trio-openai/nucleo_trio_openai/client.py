"""An :class:`~nucleo_trio.llm.clients.LLMClient` and an
:class:`~nucleo_trio.llm.clients.EmbeddingsClient` over the official SDK's ``AsyncOpenAI``.

The SDK runs on trio as it is: its HTTP layer (``httpx2``) finds the running event loop itself,
so no client needs to be passed in for that. What has to change is the SDK's habit of retrying:
by default it re-sends a refused request twice, behind admission's back, which spends quota
admission never granted. Both clients here use the SDK with ``max_retries=0`` whatever the
``AsyncOpenAI`` they are given was built with, so each request they send is one the dispatcher
admitted; a refusal becomes a re-run signal (see :mod:`nucleo_trio_openai.errors`).

:func:`open_async_openai` builds an ``AsyncOpenAI`` fit for that: no retries, a connection pool
the size of the dispatcher's ``http`` gate, the runtime's long timeouts. The ``AsyncOpenAI``
belongs to whoever built it, and must be closed (``await sdk.close()``) before the trio run
ends: the SDK closes a forgotten client only on asyncio, so on trio its pool leaks. The
provider (:func:`~nucleo_trio_openai.openai_provider`) closes its own when the dispatcher stops.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import openai
import trio

from nucleo_trio.errors import ConfigError, ExternalServiceError, LLMStopReason
from nucleo_trio.http import HttpSettings
from nucleo_trio.llm.clients import (
    EmbeddingPurpose,
    EmbeddingsResponse,
    LLMRequest,
    LLMResponse,
    Message,
    RateLimitInfo,
    Role,
    TextSink,
    ToolCall,
    ToolCallSink,
    Usage,
)

from .errors import translate

__all__ = ["OpenAIClient", "OpenAIEmbeddingsClient", "open_async_openai"]

_FIELDS = ("max_tokens", "max_completion_tokens")


def open_async_openai(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    organization: str | None = None,
    project: str | None = None,
    http_settings: HttpSettings | None = None,
    headers: Mapping[str, str] | None = None,
) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` with its retries off, over a pool sized by ``http_settings``.

    ``api_key`` and ``base_url`` default as the SDK defaults them (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``, then ``https://api.openai.com/v1``); with no key anywhere the SDK
    raises :class:`openai.OpenAIError`. ``http_settings`` (default
    :class:`~nucleo_trio.http.HttpSettings`: 1000 connections, a 30 s connect and 15 min read
    timeout) sizes the pool and its timeouts; size it to the dispatcher's ``http_connections``.
    The caller owns the result and closes it with ``await sdk.close()``.
    """
    settings = HttpSettings() if http_settings is None else http_settings
    timeout = httpx2.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.write_timeout,
        pool=settings.pool_timeout,
    )
    limits = httpx2.Limits(
        max_connections=settings.pool_size,
        max_keepalive_connections=settings.pool_size,
        keepalive_expiry=settings.keepalive_expiry,
    )
    # The limits live on the transport, where httpx2 also keeps its own retries (off).
    transport = httpx2.AsyncHTTPTransport(limits=limits, retries=0)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        organization=organization,
        project=project,
        max_retries=0,
        timeout=timeout,
        default_headers=headers,
        http_client=httpx2.AsyncClient(transport=transport, timeout=timeout),
    )


def _without_retries(sdk: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    if not isinstance(sdk, openai.AsyncOpenAI):
        raise TypeError(f"needs an openai.AsyncOpenAI, got {type(sdk).__name__}")
    # A copy shares the original's connection pool; only the retry count differs.
    return sdk if sdk.max_retries == 0 else sdk.with_options(max_retries=0)


def _service(sdk: openai.AsyncOpenAI, service: str | None) -> str:
    return service or sdk.base_url.host or "openai"


# --------------------------------------------------------------------------------------------
# The wire format
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """``value`` with every mapping a dict and every tuple a list, as JSON has them."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _wire_message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
        # The API wants null, not "", for an assistant turn that only called tools.
        wire["content"] = message.content or None
    if message.role is Role.TOOL:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _arguments(request: LLMRequest, model: str, max_tokens_field: str) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``request``."""
    arguments: dict[str, Any] = {
        "model": model,
        "messages": [_wire_message(message) for message in request.messages],
        max_tokens_field: request.max_tokens,
    }
    if request.tools:
        arguments["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": _plain(tool.parameters),
                },
            }
            for tool in request.tools
        ]
    if request.tool_choice is not None:
        choice = request.tool_choice
        arguments["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "function": {"name": choice}}
        )
    if request.output_schema is not None:
        schema = request.output_schema
        arguments["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": _plain(schema.schema),
                "strict": schema.strict,
            },
        }
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    if request.stop:
        arguments["stop"] = list(request.stop)
    clashes = sorted(set(request.extra) & set(arguments))
    if clashes:
        raise ValueError(
            f"LLMRequest.extra sets {clashes}, which the client writes itself from the request"
        )
    if request.extra:
        # Sent in the body as they are, whether the SDK knows the field or not.
        arguments["extra_body"] = _plain(request.extra)
    return arguments


def _usage(reported: Any) -> Usage | None:
    """The SDK's usage as the runtime counts it: the cached part of the prompt apart."""
    if reported is None:
        return None
    prompt = getattr(reported, "prompt_tokens", None)
    written = getattr(reported, "completion_tokens", None)
    if not isinstance(prompt, int) and not isinstance(written, int):
        return None
    prompt = prompt if isinstance(prompt, int) and prompt >= 0 else 0
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    cached = min(cached, prompt) if isinstance(cached, int) and cached >= 0 else 0
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=written if isinstance(written, int) and written >= 0 else 0,
        cache_read_tokens=cached,
    )


def _request_text(request: LLMRequest) -> str:
    """What a request sends that a model reads, as text, to estimate its tokens by."""
    parts: list[str] = []
    for message in request.messages:
        parts.append(message.content)
        parts.extend(f"{call.name} {call.arguments}" for call in message.tool_calls)
    for tool in request.tools:
        parts.extend((tool.name, tool.description, json.dumps(_plain(tool.parameters))))
    if request.output_schema is not None:
        parts.append(json.dumps(_plain(request.output_schema.schema)))
    return "\n".join(parts)


def _usage_or_estimate(
    reported: Usage | None, request: LLMRequest, content: str, calls: Sequence[ToolCall]
) -> Usage:
    if reported is not None:
        return reported
    written = "\n".join([content, *(f"{call.name} {call.arguments}" for call in calls)])
    return Usage.estimate(_request_text(request), written)


def _stop_reason(
    finish_reason: str | None, refusal: str | None
) -> tuple[LLMStopReason, str | None]:
    if refusal:
        return LLMStopReason.CONTENT_FILTERED, "refusal"
    return LLMStopReason.from_provider(finish_reason), finish_reason


class _StreamedCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name = ""
        self.arguments = ""


# --------------------------------------------------------------------------------------------
# Chat completions
# --------------------------------------------------------------------------------------------


class OpenAIClient:
    """An :class:`~nucleo_trio.llm.clients.LLMClient` for chat completions through ``sdk``.

    ``model`` is the wire id used when a request names none. ``service`` names the upstream in
    errors (default: the SDK's base URL host). ``max_tokens_field`` is where the output budget
    goes: ``max_tokens`` (default), or ``max_completion_tokens`` for OpenAI's reasoning models.
    The client never closes ``sdk``: its owner does.
    """

    def __init__(
        self,
        sdk: openai.AsyncOpenAI,
        *,
        model: str | None = None,
        service: str | None = None,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        if max_tokens_field not in _FIELDS:
            raise ConfigError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_field!r}"
            )
        self._sdk = _without_retries(sdk)
        self._model = model
        self._service = _service(self._sdk, service)
        self._max_tokens_field = max_tokens_field
        self._endpoint = f"{str(self._sdk.base_url).rstrip('/')}/chat/completions"

    @property
    def model_identifier(self) -> str | None:
        """The wire model id used when a request names none; ``None`` if every request must
        name one."""
        return self._model

    @property
    def sdk(self) -> openai.AsyncOpenAI:
        """The ``AsyncOpenAI`` requests go through, with its retries off."""
        return self._sdk

    def _model_for(self, request: LLMRequest) -> str:
        if not isinstance(request, LLMRequest):
            raise TypeError(f"OpenAIClient needs an LLMRequest, got {type(request).__name__}")
        model = request.model or self._model
        if model is None:
            raise ValueError(
                "the request names no model and the client has none: set LLMRequest.model or "
                "pass model= to OpenAIClient"
            )
        return model

    def _failure(self, error: BaseException) -> BaseException:
        return translate(error, service=self._service, endpoint=self._endpoint)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` and return the first choice of the completion."""
        model = self._model_for(request)
        arguments = _arguments(request, model, self._max_tokens_field)
        started = trio.current_time()
        try:
            raw = await self._sdk.chat.completions.with_raw_response.create(**arguments)
            completion = raw.parse()
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            # The translation carries its own cause (the runtime's HTTP error, the SDK's
            # exception under it), which `from exc` would overwrite.
            raise self._failure(exc)  # noqa: B904
        if not completion.choices:
            raise ExternalServiceError(
                f"{self._service} answered {self._endpoint} with no choices", service=self._service
            )
        choice = completion.choices[0]
        message = choice.message
        content = message.content or ""
        calls = tuple(
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in message.tool_calls or ()
            if call.type == "function"
        )
        stop_reason, raw_reason = _stop_reason(choice.finish_reason, message.refusal)
        return LLMResponse(
            content=content,
            tool_calls=calls,
            stop_reason=stop_reason,
            provider_stop_reason=raw_reason,
            usage=_usage_or_estimate(_usage(completion.usage), request, content, calls),
            model=model,
            provider_model=completion.model or None,
            response_id=completion.id or None,
            started_at=started,
            ended_at=trio.current_time(),
            rate_limit_info=RateLimitInfo.from_response_headers(model, raw.headers),
        )

    async def stream(
        self, request: LLMRequest, on_text: TextSink, *, on_tool_call: ToolCallSink | None = None
    ) -> LLMResponse:
        """Send ``request`` as a stream; each piece of text goes to ``on_text`` as it arrives,
        each tool-call fragment to ``on_tool_call`` (``(index, id, name, arguments)``) when one
        is given, and the whole reply is returned as :meth:`complete` would have returned it.

        A stream that ends without a finish reason was cut by the upstream: it raises
        :class:`~nucleo_trio.errors.TransientErrorRetry`, never returns the part that came.
        """
        model = self._model_for(request)
        arguments = _arguments(request, model, self._max_tokens_field)
        started = trio.current_time()
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, _StreamedCall] = {}
        finish: str | None = None
        usage: Usage | None = None
        provider_model: str | None = None
        response_id: str | None = None
        try:
            stream = await self._sdk.chat.completions.create(
                **arguments, stream=True, stream_options={"include_usage": True}
            )
            rate_limit_info = RateLimitInfo.from_response_headers(model, stream.response.headers)
            async with stream:
                async for chunk in stream:
                    provider_model = chunk.model or provider_model
                    response_id = chunk.id or response_id
                    usage = _usage(chunk.usage) or usage
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            text.append(delta.content)
                            on_text(delta.content)
                        if delta.refusal:
                            refusal.append(delta.refusal)
                        for piece in delta.tool_calls or ():
                            call = calls.setdefault(piece.index, _StreamedCall())
                            call.id = piece.id or call.id
                            name = fragment = ""
                            if piece.function is not None:
                                name = piece.function.name or ""
                                fragment = piece.function.arguments or ""
                            call.name += name
                            call.arguments += fragment
                            if on_tool_call is not None and (piece.id or name or fragment):
                                on_tool_call(piece.index, piece.id, name, fragment)
                        finish = choice.finish_reason or finish
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise self._failure(exc)  # noqa: B904
        content = "".join(text)
        if finish is None:
            said = f"{len(content)} characters and {len(calls)} tool calls"
            raise self._failure(
                httpx2.RemoteProtocolError(
                    f"the stream ended without a finish reason, after {said}: the reply is "
                    "incomplete"
                )
            )
        tool_calls = tuple(
            ToolCall(id=call.id or f"call_{index}", name=call.name, arguments=call.arguments)
            for index, call in sorted(calls.items())
        )
        stop_reason, raw_reason = _stop_reason(finish, "".join(refusal))
        return LLMResponse(
            content=content,
            tool_calls=tool_calls,
            stop_reason=stop_reason,
            provider_stop_reason=raw_reason,
            usage=_usage_or_estimate(usage, request, content, tool_calls),
            model=model,
            provider_model=provider_model,
            response_id=response_id,
            started_at=started,
            ended_at=trio.current_time(),
            rate_limit_info=rate_limit_info,
        )

    def __repr__(self) -> str:
        return f"<OpenAIClient {self._sdk.base_url} model={self._model}>"


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


class OpenAIEmbeddingsClient:
    """An :class:`~nucleo_trio.llm.clients.EmbeddingsClient` for ``/embeddings`` through ``sdk``.

    ``model`` is the model used when a call names none; the API has no notion of purpose,
    which is recorded on the response and not sent. The client never closes ``sdk``.
    """

    def __init__(
        self, sdk: openai.AsyncOpenAI, *, model: str | None = None, service: str | None = None
    ) -> None:
        self._sdk = _without_retries(sdk)
        self._model = model
        self._service = _service(self._sdk, service)
        self._endpoint = f"{str(self._sdk.base_url).rstrip('/')}/embeddings"

    @property
    def model_identifier(self) -> str | None:
        """The model used when a call names none; ``None`` if every call must name one."""
        return self._model

    async def embed(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        purpose: EmbeddingPurpose = EmbeddingPurpose.DOCUMENT,
    ) -> EmbeddingsResponse:
        """One vector per text, in order; an empty batch is answered without a call."""
        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise TypeError("embed needs a sequence of str (a single str is not a batch)")
        chosen = model or self._model
        if chosen is None:
            raise ValueError(
                "the call names no model and the client has none: pass model= to embed or "
                "to OpenAIEmbeddingsClient"
            )
        batch = list(texts)
        started = trio.current_time()
        if not batch:
            return EmbeddingsResponse(
                model=chosen, purpose=purpose, started_at=started, ended_at=started
            )
        try:
            answer = await self._sdk.embeddings.create(
                model=chosen, input=batch, encoding_format="float"
            )
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            raise translate(exc, service=self._service, endpoint=self._endpoint)  # noqa: B904
        rows = sorted(answer.data, key=lambda row: row.index)
        if len(rows) != len(batch):
            raise ExternalServiceError(
                f"{self._service} answered {self._endpoint} with {len(rows)} vectors for "
                f"{len(batch)} texts",
                service=self._service,
            )
        reported = answer.usage
        usage = (
            Usage(input_tokens=reported.prompt_tokens)
            if reported is not None and reported.prompt_tokens >= 0
            else Usage.estimate("\n".join(batch), "")
        )
        return EmbeddingsResponse(
            vectors=[row.embedding for row in rows],
            model=chosen,
            purpose=purpose,
            usage=usage,
            started_at=started,
            ended_at=trio.current_time(),
        )

    def __repr__(self) -> str:
        return f"<OpenAIEmbeddingsClient {self._sdk.base_url} model={self._model}>"
