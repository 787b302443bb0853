"""An :class:`~nucleo_trio.llm.clients.LLMClient` over the official ``anthropic`` SDK.

:class:`AnthropicClient` sends an :class:`~nucleo_trio.llm.clients.LLMRequest` to the Messages
API through an ``anthropic.AsyncAnthropic`` and returns an
:class:`~nucleo_trio.llm.clients.LLMResponse`. It speaks the protocol and translates failures;
it decides nothing about re-running. The SDK's own retries are off (``max_retries=0``), so the
one request an admitted attempt sends is the only one that goes out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

import anthropic
import anthropic._base_client as anthropic_base_client
import httpx2
import trio

from nucleo_trio.errors import (
    OVERLOADED_STATUS,
    ExternalServiceError,
    JsonParseError,
    LLMStopReason,
    TransientErrorRetry,
    http_error_from_status,
    lost_in_transit,
    rerun_for_status,
)
from nucleo_trio.errors._boundary_map import exception_map, map_exceptions
from nucleo_trio.http import HttpSettings
from nucleo_trio.llm.clients import (
    LLMRequest,
    LLMResponse,
    Message,
    RateLimitInfo,
    RateLimitType,
    Role,
    TextSink,
    ToolCall,
    Usage,
    parse_int_or_null,
)
from nucleo_trio.llm.clients.openai import parse_retry_after

__all__ = ["SERVICE", "AnthropicClient", "open_sdk_client"]

SERVICE: Final = "anthropic"
"""The service name the client's errors and upstream failures carry."""

_ENDPOINT = "/v1/messages"
_PREVIEW = 300
_UNRESOLVED: Final = object()

# The status each error type of Anthropic's error body stands for; a stream that fails after
# its 200 says what went wrong only in the body of its ``error`` event.
_STATUS_OF_ERROR: Mapping[str, int] = MappingProxyType(
    {
        "invalid_request_error": 400,
        "authentication_error": 401,
        "billing_error": 402,
        "permission_error": 403,
        "not_found_error": 404,
        "request_too_large": 413,
        "rate_limit_error": 429,
        "api_error": 500,
        "timeout_error": 504,
        "overloaded_error": OVERLOADED_STATUS,
    }
)


def open_sdk_client(
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    http_settings: HttpSettings | None = None,
) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` with its retries off, over a connection pool of its own sized and
    timed by ``http_settings`` (the defaults of :class:`~nucleo_trio.http.HttpSettings` when
    ``None``).

    ``api_key`` ``None`` lets the SDK read ``ANTHROPIC_API_KEY``; ``base_url`` ``None`` is the
    SDK's default (or ``ANTHROPIC_BASE_URL``). The caller owns the client: ``await
    client.close()`` closes its pool, which on trio nothing else does.
    """
    settings = http_settings or HttpSettings()
    if not isinstance(settings, HttpSettings):
        raise TypeError(f"http_settings must be HttpSettings, got {type(settings).__name__}")
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
    # The SDK needs a client from httpx2 (its fork of httpx), not the runtime's httpx one. The
    # limits go on the transport: a client ignores its own once a transport is given.
    pool = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(limits=limits, retries=0), timeout=timeout
    )
    # A timeout of our own also keeps the SDK from refusing a large max_tokens unstreamed.
    return _platform_resolved(
        anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout, http_client=pool
        )
    )


def _platform_resolved(client: anthropic.AsyncAnthropic) -> anthropic.AsyncAnthropic:
    """``client`` with the platform of its request headers already known.

    Left unknown, the SDK works it out in a worker thread at its first request. Under trio's
    autojump clock a wait on a thread reads as idle, and the clock leaps to the next deadline
    (a job's timeout) before the request is sent. Worked out here, once, it costs a few
    ``platform`` calls on the trio thread.
    """
    if getattr(client, "_platform", _UNRESOLVED) is None:
        client._platform = anthropic_base_client.get_platform()
    return client


# --------------------------------------------------------------------------------------------
# Failure translation
# --------------------------------------------------------------------------------------------


def _body_text(body: object) -> str:
    if body is None:
        return ""
    return body if isinstance(body, str) else json.dumps(body, default=str)


def _error_type(body: object) -> str:
    """The ``error.type`` of an Anthropic error body, or ''."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else ""


def _status_failure(exc: anthropic.APIStatusError, model: str) -> Exception:
    """A re-run signal for a 429, an overload, another 5xx or a 408; the HTTP error otherwise."""
    status = exc.status_code
    if status < 400:  # an error event inside a stream that began with a 200
        status = _STATUS_OF_ERROR.get(_error_type(exc.body), 500)
    headers = exc.response.headers
    retry_after = parse_retry_after(dict(headers.items()))
    body = _body_text(exc.body)
    endpoint = f"{_ENDPOINT} ({model})"
    error = http_error_from_status(
        status, service=SERVICE, endpoint=endpoint, body=body or None, retry_after=retry_after
    )
    error.__cause__ = exc
    return rerun_for_status(
        error,
        status=status,
        service=SERVICE,
        endpoint=endpoint,
        body=body,
        retry_after=retry_after,
    )


def _lost(exc: Exception, model: str) -> TransientErrorRetry:
    """The signal for a request or reply lost below HTTP (refused, dropped, timed out)."""
    error = ExternalServiceError(
        f"{SERVICE} could not be reached or dropped the reply for {_ENDPOINT} ({model}): "
        f"{type(exc).__name__}",
        service=SERVICE,
        cause=exc,
    )
    return lost_in_transit(
        f"{SERVICE} failed in transit for {_ENDPOINT} ({type(exc).__name__})", error
    )


def _not_a_message(exc: anthropic.APIResponseValidationError, model: str) -> ExternalServiceError:
    return ExternalServiceError(
        f"{SERVICE} answered {_ENDPOINT} with a body that is not a message: {exc}",
        service=SERVICE,
        cause=exc,
    )


# What the runtime acts on in place of what the SDK raised, each builder given the model: a
# signal's cause is the runtime's error for it, whose cause is the SDK's exception. A timeout
# is a connection error too; httpx2's own errors reach here from a stream's body, read after
# the SDK handed the response over.
_SDK_ERRORS = exception_map(
    {
        anthropic.APIStatusError: _status_failure,
        anthropic.APIConnectionError: _lost,
        httpx2.TransportError: _lost,
        anthropic.APIResponseValidationError: _not_a_message,
    }
)


# --------------------------------------------------------------------------------------------
# The wire format
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Read-only mappings (the records' frozen schemas) as plain dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _tool_input(call: ToolCall) -> Any:
    """The arguments of a call the model made, as the object the API takes back. Arguments that
    do not parse (a call the model is being asked to correct) go back as an empty object: the
    API accepts nothing else, and the correction says what was wrong."""
    try:
        return dict(call.parsed_arguments())
    except JsonParseError:
        return {}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)}
        for call in message.tool_calls
    ]
    return blocks


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    if message.role is Role.TOOL:
        return [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content}
        ]
    return [{"type": "text", "text": message.content}]


def _wire_messages(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The system prompt and the turns, in the API's shape.

    System turns join into the one ``system`` text. A tool result is a user turn holding a
    ``tool_result`` block; user and tool turns in a row merge into one user turn (the API wants
    every result of an assistant turn's calls in the next user turn), and so do assistant turns
    in a row. An assistant turn with neither text nor calls is left out (the API refuses an
    empty block).
    """
    system = [m.content for m in messages if m.role is Role.SYSTEM and m.content]
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            continue
        if message.role is Role.ASSISTANT:
            role, blocks = "assistant", _assistant_blocks(message)
        else:
            role, blocks = "user", _user_blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    for turn in wire:
        # A lone text block goes as plain text, the API's shorter form.
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return ("\n\n".join(system) or None), wire


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def _request_params(request: LLMRequest, model: str) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``request``; ``request.extra`` goes to
    the body as it is (``cache_control``, ``thinking``, ``metadata``, ...)."""
    system, messages = _wire_messages(request.messages)
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": messages,
    }
    if system is not None:
        params["system"] = system
    if request.tools:
        params["tools"] = [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": _plain(tool.parameters),
            }
            for tool in request.tools
        ]
    if request.tool_choice is not None:
        params["tool_choice"] = _tool_choice(request.tool_choice)
    if request.output_schema is not None:
        schema = _plain(request.output_schema.schema)
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    # The SDK takes no temperature of its own (the newest models have none), so it goes to the
    # body beside the request's extra fields.
    body: dict[str, Any] = {}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    body.update(_plain(request.extra))
    if body:
        params["extra_body"] = body
    return params


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(usage: Any) -> Usage:
    """The usage the API reported: the uncached prompt, the output, and the cache's reads and
    writes apart (Anthropic counts none of them twice)."""
    return Usage(
        input_tokens=_count(getattr(usage, "input_tokens", 0)),
        output_tokens=_count(getattr(usage, "output_tokens", 0)),
        cache_read_tokens=_count(getattr(usage, "cache_read_input_tokens", 0)),
        cache_write_tokens=_count(getattr(usage, "cache_creation_input_tokens", 0)),
    )


def _rate_limit_info(model: str, headers: httpx2.Headers) -> RateLimitInfo | None:
    """The CAPACITY reading of a successful answer's ``anthropic-ratelimit-*`` headers, or
    ``None`` when it sends none."""

    def number(name: str) -> int | None:
        parsed = parse_int_or_null(headers.get(f"anthropic-ratelimit-{name}"))
        return parsed if parsed is not None and parsed >= 0 else None

    token_limit, tokens_remaining = number("tokens-limit"), number("tokens-remaining")
    request_limit, requests_remaining = number("requests-limit"), number("requests-remaining")
    if all(n is None for n in (token_limit, tokens_remaining, request_limit, requests_remaining)):
        return None
    reset = headers.get("anthropic-ratelimit-tokens-reset")
    return RateLimitInfo(
        model=model,
        token_limit=token_limit,
        tokens_remaining=tokens_remaining,
        request_limit=request_limit,
        requests_remaining=requests_remaining,
        reset=reset.strip() or None if isinstance(reset, str) else None,
        kind=RateLimitType.CAPACITY,
    )


def _response(message: Any, model: str, started: float, headers: httpx2.Headers) -> LLMResponse:
    """The :class:`LLMResponse` of a ``Message``: its text blocks joined, its ``tool_use``
    blocks as calls (the input as JSON text), thinking left out of the text."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input)))
    raw = message.stop_reason if isinstance(message.stop_reason, str) else None
    return LLMResponse(
        content="".join(text),
        tool_calls=tuple(calls),
        stop_reason=LLMStopReason.from_provider(raw),
        provider_stop_reason=raw,
        usage=_usage(message.usage),
        model=model,
        provider_model=message.model if isinstance(message.model, str) else None,
        response_id=message.id if isinstance(message.id, str) else None,
        started_at=started,
        ended_at=trio.current_time(),
        rate_limit_info=_rate_limit_info(model, headers),
    )


_ToolCallPieces = Callable[[int, "str | None", str, str], object]
"""Receives each piece of a streamed tool call: ``(index, id, name, arguments)``."""


def _hand_over_call(
    event: Any, calls: dict[int, tuple[int, str]], on_tool_call: _ToolCallPieces
) -> None:
    """Pass a streamed ``tool_use`` block's start (its id and name) and each of its
    ``input_json_delta`` pieces to ``on_tool_call``, numbering the calls in order."""
    if event.type == "content_block_start" and event.content_block.type == "tool_use":
        block = event.content_block
        calls[event.index] = (len(calls), block.id)
        on_tool_call(len(calls) - 1, block.id, block.name, "")
    elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
        position, call_id = calls.get(event.index, (None, None))
        if position is not None and event.delta.partial_json:
            on_tool_call(position, call_id, "", event.delta.partial_json)


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


class AnthropicClient:
    """A language-model client for Anthropic's Messages API, over ``anthropic.AsyncAnthropic``.

    ``model`` is the model a request that names none is sent to (``None``: every request must
    name one). ``client`` is an SDK client to send through, which the caller keeps owning (one
    with retries of its own is copied with them off); without one the client opens its own with
    :func:`open_sdk_client` (``api_key``, ``base_url``, ``http_settings``) and closes it in
    :meth:`aclose`.

    What the API says becomes the signal the dispatcher acts on: a 429 is a
    :class:`~nucleo_trio.errors.RateLimitRetry`, a 529 (or a 503 that says it is overloaded) an
    :class:`~nucleo_trio.errors.OverloadRetry`, a 408, any other 5xx, a timeout or a lost
    connection a :class:`~nucleo_trio.errors.TransientErrorRetry`, each carrying the
    ``Retry-After`` in seconds; any other error status is what
    :func:`~nucleo_trio.errors.http_error_from_status` makes of it. A reply cut at its budget
    comes back with stop reason MAX_TOKENS; ``refusal`` is CONTENT_FILTERED, and a word the
    runtime has no name for (``pause_turn``) UNKNOWN, kept as ``provider_stop_reason``.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        http_settings: HttpSettings | None = None,
    ) -> None:
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ValueError(
                f"AnthropicClient: model must be a non-blank str or None, got {model!r}"
            )
        if client is not None and (api_key, base_url, http_settings) != (None, None, None):
            raise ValueError(
                "AnthropicClient: give either client= or the settings to open one "
                "(api_key, base_url, http_settings), not both"
            )
        self._model = model
        self._owned = client is None
        if client is None:
            client = open_sdk_client(
                api_key=api_key, base_url=base_url, http_settings=http_settings
            )
        elif client.max_retries != 0:
            client = client.with_options(max_retries=0)
        self._sdk = _platform_resolved(client)

    @property
    def model_identifier(self) -> str | None:
        """The model a request that names none is sent to, or ``None``."""
        return self._model

    @property
    def sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client the requests go through (its retries off)."""
        return self._sdk

    def _model_for(self, request: LLMRequest) -> str:
        if not isinstance(request, LLMRequest):
            raise TypeError(f"AnthropicClient needs an LLMRequest, got {type(request).__name__}")
        model = request.model or self._model
        if model is None:
            raise ValueError(
                "the request names no model and the client has none: set LLMRequest.model or "
                "pass model= to AnthropicClient"
            )
        return model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` to the Messages API and return the model's turn."""
        model = self._model_for(request)
        params = _request_params(request, model)
        started = trio.current_time()
        with map_exceptions(_SDK_ERRORS, model=model):
            raw = await self._sdk.messages.with_raw_response.create(**params)
            message = await raw.parse()
        return _response(message, model, started, raw.headers)

    async def stream(
        self,
        request: LLMRequest,
        on_text: TextSink,
        *,
        on_tool_call: _ToolCallPieces | None = None,
    ) -> LLMResponse:
        """Send ``request`` streamed; each piece of text goes to ``on_text`` as it arrives, and
        the whole turn comes back as :meth:`complete` would return it.

        ``on_tool_call``, when given, receives each tool call as it arrives, as ``(index, id,
        name, arguments)`` pieces: the call's position among the reply's calls, its id, and
        the name and the piece of JSON arguments the fragment adds (``""`` when none). A call's
        first piece names it, with no arguments yet; the pieces after it carry its arguments.

        A stream that ends before ``message_stop`` was cut by the upstream: it raises
        :class:`~nucleo_trio.errors.TransientErrorRetry` (the text already handed to
        ``on_text`` is all there is of it), never returns the half it sent.
        """
        model = self._model_for(request)
        params = _request_params(request, model)
        started = trio.current_time()
        stopped = False
        calls: dict[int, tuple[int, str]] = {}  # content block index -> (call position, id)
        with map_exceptions(_SDK_ERRORS, model=model):
            async with self._sdk.messages.stream(**params) as stream:
                headers = stream.response.headers
                async for event in stream:
                    if event.type == "text":
                        on_text(event.text)
                    elif event.type == "message_stop":
                        stopped = True
                    elif on_tool_call is not None:
                        _hand_over_call(event, calls, on_tool_call)
                message = stream.current_message_snapshot if stopped else None
        if message is None:
            error = ExternalServiceError(
                f"{SERVICE} ended the stream for {_ENDPOINT} ({model}) before message_stop: "
                "the reply is incomplete",
                service=SERVICE,
            )
            raise lost_in_transit(f"{SERVICE} cut the stream for {_ENDPOINT} short", error)
        return _response(message, model, started, headers)

    async def aclose(self) -> None:
        """Close the SDK client and its pool when this client opened them; a client given to
        the constructor is the caller's to close."""
        if self._owned:
            await self._sdk.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AnthropicClient {self._sdk.base_url} model={self._model}>"
