"""A client for any endpoint that speaks the OpenAI chat-completions and embeddings API.

OpenAI itself, and the many servers that copy its wire format (vLLM, llama.cpp's server,
Ollama, LiteLLM, most hosted gateways), answer ``POST {base_url}/chat/completions`` and
``POST {base_url}/embeddings``. One :class:`OpenAICompatibleClient` talks to one such endpoint::

    settings = HttpSettings(pool_size=50)
    async with OpenAICompatibleClient(
        "https://api.openai.com/v1", api_key=key, model="gpt-4o-mini", http_settings=settings
    ) as client:
        response = await client.complete(
            LLMRequest(messages=[Message.user("Say hi")], max_tokens=50)
        )

The client speaks the protocol and translates failures; it decides nothing about re-running.
What the upstream says becomes the signal the dispatcher acts on:

* **429** is a :class:`~nucleo_trio.errors.RateLimitRetry`, unless the body says the quota is
  spent (``insufficient_quota``), which waiting does not fix: that is a
  :class:`~nucleo_trio.errors.QuotaExhaustedError`, never re-run;
* **529**, or a **503** whose body says it is overloaded, is an
  :class:`~nucleo_trio.errors.OverloadRetry`;
* **408**, any other **5xx**, a timeout, a refused or dropped connection is a
  :class:`~nucleo_trio.errors.TransientErrorRetry`;
* any other error status is what :func:`~nucleo_trio.errors.http_error_from_status` makes of it
  (a 400 is correctable, a 401 is not).

Each signal carries the upstream's ``Retry-After`` (``retry-after-ms`` when the server sends it,
else ``Retry-After`` as seconds or an HTTP date) as ``retry_after``, and an
:class:`~nucleo_trio.errors.UpstreamFailure` whose backpressure is the signal's own, so the
dispatcher's pacing and an account's push-back both read it; the HTTP error is the cause. A reply
cut at its budget (``finish_reason: "length"``) is a successful response whose stop reason is
MAX_TOKENS: whether to re-run it with a larger budget is the caller's decision. A stream that
ends with neither a finish reason nor ``[DONE]`` was cut by the upstream, not by the budget: it
is a :class:`~nucleo_trio.errors.TransientErrorRetry`, never an answer.

A reply that reports no token usage (the streams of some servers, some gateways) gets an estimate
from its text instead (:meth:`~nucleo_trio.llm.clients.Usage.estimate`), marked ``estimated``,
so a spend ledger never books it at zero.

A successful answer's ``x-ratelimit-limit-*`` and ``x-ratelimit-remaining-*`` headers become its
:class:`~nucleo_trio.llm.clients.RateLimitInfo` (a CAPACITY reading; ``None`` when the endpoint
sends none), which the models layer hands to the entry's token bucket.

Connections come from one :class:`httpx.AsyncClient` whose pool is sized by
:class:`~nucleo_trio.http.HttpSettings`, the same number that sizes the dispatcher's ``http``
gate, so a job the gate admits always finds a connection. Pass ``http_client`` to share a pool
the caller owns (the client then never closes it), or ``http_settings`` to have the client open
and own one; :meth:`OpenAICompatibleClient.embeddings` hands out an embeddings client over the
same pool.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, ClassVar, Self

import attrs
import httpx
import trio

from ..._redact import install_redacting_filter, redact_text, redact_url
from ...errors import (
    ConfigError,
    ExternalServiceError,
    LLMStopReason,
    QuotaExhaustedError,
    TransientErrorRetry,
    http_error_from_status,
    lost_in_transit,
    rerun_for_status,
)
from ...errors._boundary_map import map_exceptions
from ...http import TRANSPORT_ERRORS, HttpSettings, open_http_client
from .protocols import TextSink, ToolCallSink
from .rate_limit_info import RateLimitInfo
from .records import (
    EmbeddingPurpose,
    EmbeddingsResponse,
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    Usage,
)

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_EMBEDDINGS_MODEL",
    "ENV_MODEL",
    "OpenAICompatibleClient",
    "OpenAICompatibleEmbeddingsClient",
    "parse_retry_after",
]

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "OPENAI_MODEL"
ENV_EMBEDDINGS_MODEL = "OPENAI_EMBEDDINGS_MODEL"

# The status an overloaded upstream answers with when it has its own (Anthropic's, and gateways
# that copy it); a plain 503 counts as an overload only when its body says so.
_QUOTA_CODES = frozenset({"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached"})
_PREVIEW = 300


# --------------------------------------------------------------------------------------------
# Retry-After
# --------------------------------------------------------------------------------------------


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The seconds an upstream asks the caller to wait, or ``None`` when it does not say.

    ``retry-after-ms`` (milliseconds, sent by OpenAI) wins over ``Retry-After``, which is either
    a number of seconds or an HTTP date (measured from ``now``, wall-clock seconds, default the
    current time; a date in the past means no wait). A value that parses as neither is ignored.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # An HTTP date is always GMT; "-0000" parses as "zone unknown", which here means UTC.
        when = when.replace(tzinfo=datetime.UTC)
    wall = time.time() if now is None else now
    return max(0.0, when.timestamp() - wall)


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


# --------------------------------------------------------------------------------------------
# Failure translation
# --------------------------------------------------------------------------------------------


def _error_code(body: str) -> str:
    """The ``error.code`` or ``error.type`` of an OpenAI-style error body, lower-cased, or ''."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return ""
    code = error.get("code") or error.get("type") or ""
    return str(code).lower()


def _status_failure(
    status: int, headers: Mapping[str, str], body: str, *, service: str, endpoint: str
) -> Exception:
    """The exception to raise for an error status: a re-run signal, or the HTTP error."""
    retry_after = parse_retry_after(headers)
    error = http_error_from_status(
        status, service=service, endpoint=endpoint, body=body or None, retry_after=retry_after
    )
    if status == 429 and _error_code(body) in _QUOTA_CODES:
        return QuotaExhaustedError(
            f"{service} says the quota is exhausted (HTTP 429 for {endpoint}): {body[:_PREVIEW]}",
            cause=error,
        )
    return rerun_for_status(
        error,
        status=status,
        service=service,
        endpoint=endpoint,
        body=body,
        retry_after=retry_after,
    )


def _malformed(service: str, endpoint: str, what: str, body: str) -> ExternalServiceError:
    return ExternalServiceError(
        f"{service} answered {endpoint} with {what}: {redact_text(body)[:_PREVIEW]}",
        service=service,
    )


# --------------------------------------------------------------------------------------------
# The wire format
# --------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """``value`` with every mapping a dict and every tuple a list, as ``json`` writes them."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _wire_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _wire_message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        wire["tool_calls"] = [_wire_call(call) for call in message.tool_calls]
        # The API wants null, not "", for an assistant turn that only called tools.
        wire["content"] = message.content or None
    if message.role is Role.TOOL:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _tool_choice(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _request_body(request: LLMRequest, model: str, max_tokens_field: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [_wire_message(message) for message in request.messages],
        max_tokens_field: request.max_tokens,
    }
    if request.tools:
        body["tools"] = [
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
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.output_schema is not None:
        schema = request.output_schema
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": _plain(schema.schema),
                "strict": schema.strict,
            },
        }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    clashes = sorted(set(request.extra) & set(body))
    if clashes:
        raise ValueError(
            f"LLMRequest.extra sets {clashes}, which the client writes itself from the request"
        )
    body.update(_plain(request.extra))
    return body


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _counted(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _usage(data: object) -> Usage | None:
    """The usage the provider reported, or ``None`` when it reported none (no ``usage``, a null
    one, or one that counts neither side)."""
    if not isinstance(data, dict):
        return None
    sent, written = data.get("prompt_tokens"), data.get("completion_tokens")
    if not _counted(sent) and not _counted(written):
        return None
    return Usage(input_tokens=_int(sent), output_tokens=_int(written))


def _request_text(request: LLMRequest) -> str:
    """Everything a request sends that a model reads, as text, to estimate its tokens by."""
    parts: list[str] = []
    for message in request.messages:
        parts.append(message.content)
        for call in message.tool_calls:
            parts.extend((call.name, call.arguments))
    for tool in request.tools:
        parts.extend((tool.name, tool.description, json.dumps(_plain(tool.parameters))))
    if request.output_schema is not None:
        parts.append(json.dumps(_plain(request.output_schema.schema)))
    return "\n".join(parts)


def _reply_text(content: str, calls: Sequence[ToolCall]) -> str:
    """What a reply wrote, as text: its content and each tool call's name and arguments."""
    return "\n".join([content, *(f"{call.name} {call.arguments}" for call in calls)])


def _reported_or_estimated(
    reported: Usage | None, request: LLMRequest, content: str, calls: Sequence[ToolCall]
) -> Usage:
    if reported is not None:
        return reported
    return Usage.estimate(_request_text(request), _reply_text(content, calls))


def _stop_reason(finish_reason: object, refusal: object) -> tuple[LLMStopReason, str | None]:
    if isinstance(refusal, str) and refusal:
        return LLMStopReason.CONTENT_FILTERED, "refusal"
    raw = finish_reason if isinstance(finish_reason, str) else None
    return LLMStopReason.from_provider(raw), raw


def _parse_calls(raw_calls: object) -> tuple[ToolCall, ...]:
    if not isinstance(raw_calls, list):
        return ()
    calls = []
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict):
            raise ValueError(f"tool call {index} has no function")
        arguments = function.get("arguments")
        calls.append(
            ToolCall(
                id=str(raw.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                arguments=arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
            )
        )
    return tuple(calls)


# --------------------------------------------------------------------------------------------
# The endpoint both clients share
# --------------------------------------------------------------------------------------------


class _Endpoint:
    """One base URL, its credentials and the pool the requests go through.

    A base URL may carry credentials: a userinfo (``https://user:pw@gateway/v1``) is taken off
    the URL and sent as HTTP basic auth, so the URL httpx holds, and logs at INFO for every
    request, never has it; a credential in the query (``?api_key=k``) has to stay in the URL
    the request goes to, so the ``httpx`` logger gets a filter that masks it in its records.
    Everything this client shows (its repr, ``base_url``, every error message) shows the URL
    through :func:`~nucleo_trio._redact.redact_url`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        http_client: httpx.AsyncClient | None,
        http_settings: HttpSettings | None,
        service: str | None,
        headers: Mapping[str, str] | None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.strip():
            raise ConfigError(f"an OpenAI-compatible client needs a base URL, got {base_url!r}")
        url = httpx.URL(base_url.strip())
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(
                f"the base URL must be an http(s) URL with a host, got {redact_url(base_url)!r} "
                "(e.g. https://api.openai.com/v1)"
            )
        if http_client is not None and http_settings is not None:
            raise ConfigError(
                "pass http_client (a pool you own) or http_settings (to have the client open "
                "one), not both"
            )
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise TypeError(
                f"http_client must be an httpx.AsyncClient, got {type(http_client).__name__}"
            )
        url = url.copy_with(path=url.path.rstrip("/"))
        self._given = url
        self.given_url = str(url)
        """The base URL as given, credentials included: for another client of the endpoint."""
        self.base_url = redact_url(self.given_url)
        """The base URL fit to show, its credentials masked."""
        self._target = url.copy_with(userinfo=b"")
        self.service = service or url.host
        self.headers = {"Accept": "application/json", **dict(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._auth: httpx.Auth | None = None  # None: the pool's own, if any
        if url.userinfo:
            if any(name.lower() == "authorization" for name in self.headers):
                raise ConfigError(
                    f"the base URL {self.base_url} carries a user and password, which are sent "
                    "as the Authorization header, and so does the api_key (or the headers "
                    "given): give one of them"
                )
            self._auth = httpx.BasicAuth(url.username, url.password)
        install_redacting_filter("httpx")
        self.owns_client = http_client is None
        self.client = http_client if http_client is not None else open_http_client(http_settings)

    def url(self, path: str) -> str:
        """Where ``path`` under the base URL is, fit to show (its credentials masked)."""
        return redact_url(str(_joined(self._given, path)))

    def _wire(self, path: str) -> httpx.URL:
        """Where a request for ``path`` goes: the base URL without its userinfo (sent as basic
        auth instead), ``path`` joined to its path, its query kept."""
        return _joined(self._target, path)

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` and return the parsed JSON answer, or raise what the failure means."""
        data, _ = await self.post(path, body)
        return data

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, httpx.Headers]:
        """POST ``body`` and return the parsed JSON answer with the response's headers."""
        endpoint = self.url(path)
        with map_exceptions(TRANSPORT_ERRORS, service=self.service, endpoint=endpoint):
            response = await self.client.post(
                self._wire(path),
                json=body,
                headers=self.headers,
                auth=self._auth or httpx.USE_CLIENT_DEFAULT,
            )
        text = response.text
        if response.status_code >= 400:
            raise _status_failure(
                response.status_code,
                response.headers,
                redact_text(text),
                service=self.service,
                endpoint=endpoint,
            )
        try:
            return json.loads(text), response.headers
        except ValueError:
            raise _malformed(self.service, endpoint, "a body that is not JSON", text) from None

    @asynccontextmanager
    async def post_stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """POST ``body`` and yield the open response once its status says it succeeded."""
        endpoint = self.url(path)
        headers = {**self.headers, "Accept": "text/event-stream"}
        # Around the yield too: what httpx raises while the caller reads the stream.
        with map_exceptions(TRANSPORT_ERRORS, service=self.service, endpoint=endpoint):
            async with self.client.stream(
                "POST",
                self._wire(path),
                json=body,
                headers=headers,
                auth=self._auth or httpx.USE_CLIENT_DEFAULT,
            ) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise _status_failure(
                        response.status_code,
                        response.headers,
                        redact_text(text),
                        service=self.service,
                        endpoint=endpoint,
                    )
                yield response

    async def aclose(self) -> None:
        if self.owns_client:
            await self.client.aclose()


def _joined(base: httpx.URL, path: str) -> httpx.URL:
    """``base`` with ``path`` appended to its path; its query and userinfo stay as they are."""
    return base.copy_with(path=f"{base.path}/{path}")


def _endpoint_from_env(env: Mapping[str, str]) -> tuple[str, str | None]:
    """The base URL and key the environment names; with neither there is nothing to call."""
    base_url = env.get(ENV_BASE_URL, "").strip()
    api_key = env.get(ENV_API_KEY, "").strip() or None
    if not base_url and api_key is None:
        raise ConfigError(
            f"no OpenAI-compatible endpoint configured: set {ENV_BASE_URL} (and "
            f"{ENV_API_KEY} if the endpoint needs a key), and {ENV_MODEL} for the model"
        )
    return base_url or "https://api.openai.com/v1", api_key


def _check_model(owner: str, model: str | None) -> str | None:
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError(f"{owner}: model must be a non-blank str or None, got {model!r}")
    return model


# --------------------------------------------------------------------------------------------
# Chat completions
# --------------------------------------------------------------------------------------------


@attrs.define
class _StreamedCall:
    """A tool call assembled from stream deltas."""

    id: str = ""
    name: str = ""
    arguments: str = ""


class _PooledClient:
    """What both clients share: the endpoint they talk through, closed with the client (an
    ``async with`` block closes it too) when the client opened its pool."""

    _endpoint: _Endpoint
    _model: str | None
    _model_variable: ClassVar[str]
    """The environment variable naming the default model for :meth:`from_env`."""

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        http_settings: HttpSettings | None = None,
    ) -> Self:
        """A client for the endpoint the environment names.

        ``OPENAI_BASE_URL`` is the endpoint (default ``https://api.openai.com/v1``),
        ``OPENAI_API_KEY`` the key, and ``OPENAI_MODEL`` (``OPENAI_EMBEDDINGS_MODEL`` for the
        embeddings client) the default model. With neither a base URL nor a key set there is
        nothing to call, and the answer is a :class:`ConfigError`.
        """
        env = os.environ if environ is None else environ
        base_url, api_key = _endpoint_from_env(env)
        return cls(
            base_url,
            api_key=api_key,
            model=env.get(cls._model_variable, "").strip() or None,
            http_client=http_client,
            http_settings=http_settings,
        )

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        http_settings: HttpSettings | None = None,
        service: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._model = _check_model(type(self).__name__, model)
        self._endpoint = _Endpoint(base_url, api_key, http_client, http_settings, service, headers)

    @property
    def model_identifier(self) -> str | None:
        """The wire model id used when a request names none (``model``, or the environment's
        for :meth:`from_env`); ``None`` if every request must name one."""
        return self._model

    async def aclose(self) -> None:
        """Close the pool if this client opened it."""
        await self._endpoint.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class OpenAICompatibleClient(_PooledClient):
    """An :class:`LLMClient` for an OpenAI-compatible chat-completions endpoint."""

    _model_variable = ENV_MODEL

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        http_settings: HttpSettings | None = None,
        service: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        """Talk to ``base_url`` (e.g. ``https://api.openai.com/v1``).

        ``model`` is the wire id used when a request names none. ``service`` names the upstream
        in errors (default: the URL's host). ``max_tokens_field`` is the body field the output
        budget goes in: ``max_tokens`` for most servers, ``max_completion_tokens`` for OpenAI's
        reasoning models.
        """
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {max_tokens_field!r}"
            )
        self._max_tokens_field = max_tokens_field
        super().__init__(
            base_url,
            api_key=api_key,
            model=model,
            http_client=http_client,
            http_settings=http_settings,
            service=service,
            headers=headers,
        )

    @property
    def base_url(self) -> str:
        """The endpoint's base URL, trailing slash removed and any password or credential in
        the query masked: the form shown in reprs and errors."""
        return self._endpoint.base_url

    @property
    def http_client(self) -> httpx.AsyncClient:
        """The pool requests go through."""
        return self._endpoint.client

    def embeddings(self, model: str | None = None) -> OpenAICompatibleEmbeddingsClient:
        """An embeddings client for the same endpoint, over the same pool (which it never closes)."""
        endpoint = self._endpoint
        return OpenAICompatibleEmbeddingsClient(
            endpoint.given_url,
            model=model,
            http_client=endpoint.client,
            service=endpoint.service,
            headers=endpoint.headers,
        )

    def _model_for(self, request: LLMRequest) -> str:
        if not isinstance(request, LLMRequest):
            raise TypeError(
                f"OpenAICompatibleClient needs an LLMRequest, got {type(request).__name__}"
            )
        model = request.model or self._model
        if model is None:
            raise ValueError(
                "the request names no model and the client has none: set LLMRequest.model or "
                "pass model= to OpenAICompatibleClient"
            )
        return model

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` to ``/chat/completions`` and return the first choice."""
        model = self._model_for(request)
        body = _request_body(request, model, self._max_tokens_field)
        started = trio.current_time()
        data, headers = await self._endpoint.post("chat/completions", body)
        return self._parse_completion(data, request, model, started, headers)

    def _parse_completion(
        self,
        data: Any,
        request: LLMRequest,
        model: str,
        started: float,
        headers: Mapping[str, str],
    ) -> LLMResponse:
        endpoint = self._endpoint.url("chat/completions")
        try:
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content")
            content = content if isinstance(content, str) else ""
            tool_calls = _parse_calls(message.get("tool_calls"))
            stop_reason, raw = _stop_reason(choice.get("finish_reason"), message.get("refusal"))
            usage = _reported_or_estimated(_usage(data.get("usage")), request, content, tool_calls)
            return LLMResponse(
                content=content,
                tool_calls=tool_calls,
                stop_reason=stop_reason,
                provider_stop_reason=raw,
                usage=usage,
                model=model,
                provider_model=data.get("model") if isinstance(data.get("model"), str) else None,
                response_id=data.get("id") if isinstance(data.get("id"), str) else None,
                started_at=started,
                ended_at=trio.current_time(),
                rate_limit_info=RateLimitInfo.from_response_headers(model, headers),
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise _malformed(
                self._endpoint.service,
                endpoint,
                f"a body that is not a chat completion ({type(exc).__name__}: {exc})",
                json.dumps(data)[:_PREVIEW],
            ) from exc

    async def stream(
        self, request: LLMRequest, on_text: TextSink, *, on_tool_call: ToolCallSink | None = None
    ) -> LLMResponse:
        """Send ``request`` with ``stream: true``; each text delta goes to ``on_text``, and each
        tool-call fragment to ``on_tool_call`` when one is given.

        A stream that ends with neither a finish reason nor ``[DONE]`` was cut by the upstream:
        it raises :class:`~nucleo_trio.errors.TransientErrorRetry` (the text already handed to
        ``on_text`` is all there is of it), never returns the half it sent.
        """
        model = self._model_for(request)
        body = _request_body(request, model, self._max_tokens_field)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        started = trio.current_time()
        text: list[str] = []
        calls: dict[int, _StreamedCall] = {}
        finish: object = None
        refusal: list[str] = []
        usage: Usage | None = None
        done = False
        provider_model: str | None = None
        response_id: str | None = None
        endpoint = self._endpoint.url("chat/completions")
        async with self._endpoint.post_stream("chat/completions", body) as response:
            rate_limit_info = RateLimitInfo.from_response_headers(model, response.headers)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    # Read on to the end of the body rather than break: a response read to
                    # its end hands its connection back to the pool.
                    done = True
                    continue
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise _malformed(
                        self._endpoint.service, endpoint, "a stream event that is not JSON", payload
                    ) from None
                if not isinstance(chunk, dict):
                    continue
                provider_model = chunk.get("model") or provider_model
                response_id = chunk.get("id") or response_id
                usage = _usage(chunk.get("usage")) or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    piece = delta.get("content")
                    if isinstance(piece, str) and piece:
                        text.append(piece)
                        on_text(piece)
                    if isinstance(delta.get("refusal"), str):
                        refusal.append(delta["refusal"])
                    for raw in delta.get("tool_calls") or ():
                        _merge_call_delta(calls, raw, on_tool_call)
                    finish = choice.get("finish_reason") or finish
        content = "".join(text)
        if not done and finish is None:
            raise self._unterminated(endpoint, content, len(calls))
        stop_reason, raw_reason = _stop_reason(finish, "".join(refusal))
        tool_calls = tuple(
            ToolCall(id=call.id or f"call_{index}", name=call.name, arguments=call.arguments)
            for index, call in sorted(calls.items())
        )
        return LLMResponse(
            content=content,
            tool_calls=tool_calls,
            stop_reason=stop_reason,
            provider_stop_reason=raw_reason,
            usage=_reported_or_estimated(usage, request, content, tool_calls),
            model=model,
            provider_model=provider_model if isinstance(provider_model, str) else None,
            response_id=response_id if isinstance(response_id, str) else None,
            started_at=started,
            ended_at=trio.current_time(),
            rate_limit_info=rate_limit_info,
        )

    def _unterminated(self, endpoint: str, content: str, calls: int) -> TransientErrorRetry:
        """The signal for a stream the upstream ended before the model finished."""
        service = self._endpoint.service
        said = f"{len(content)} characters of text" + (f" and {calls} tool calls" if calls else "")
        error = ExternalServiceError(
            f"{service} ended the stream for {endpoint} with neither a finish reason nor "
            f"[DONE], after {said}: the reply is incomplete",
            service=service,
        )
        return lost_in_transit(
            f"{service} cut the stream for {endpoint} short (no finish reason, no [DONE])", error
        )

    def __repr__(self) -> str:
        return f"<OpenAICompatibleClient {self.base_url} model={self._model}>"


def _merge_call_delta(
    calls: dict[int, _StreamedCall], raw: object, on_tool_call: ToolCallSink | None = None
) -> None:
    if not isinstance(raw, dict):
        return
    index = raw.get("index", len(calls))
    position = index if isinstance(index, int) else len(calls)
    call = calls.setdefault(position, _StreamedCall())
    call_id = raw["id"] if isinstance(raw.get("id"), str) else None
    if call_id is not None:
        call.id = call_id
    name = arguments = ""
    function = raw.get("function")
    if isinstance(function, dict):
        if isinstance(function.get("name"), str):
            name = function["name"]
        if isinstance(function.get("arguments"), str):
            arguments = function["arguments"]
    call.name += name
    call.arguments += arguments
    if on_tool_call is not None and (call_id is not None or name or arguments):
        on_tool_call(position, call_id, name, arguments)


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


class OpenAICompatibleEmbeddingsClient(_PooledClient):
    """An :class:`EmbeddingsClient` for an OpenAI-compatible ``/embeddings`` endpoint.

    The API has no notion of purpose; it is recorded on the response and not sent.
    """

    _model_variable = ENV_EMBEDDINGS_MODEL

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
                "to OpenAICompatibleEmbeddingsClient"
            )
        batch = list(texts)
        started = trio.current_time()
        if not batch:
            return EmbeddingsResponse(
                model=chosen, purpose=purpose, started_at=started, ended_at=started
            )
        data = await self._endpoint.post_json(
            "embeddings", {"model": chosen, "input": batch, "encoding_format": "float"}
        )
        try:
            rows = sorted(data["data"], key=lambda row: row["index"])
            vectors = [row["embedding"] for row in rows]
            if len(vectors) != len(batch):
                raise ValueError(f"{len(vectors)} vectors for {len(batch)} texts")
            return EmbeddingsResponse(
                vectors=vectors,
                model=chosen,
                purpose=purpose,
                usage=_usage(data.get("usage")) or Usage.estimate("\n".join(batch), ""),
                started_at=started,
                ended_at=trio.current_time(),
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise _malformed(
                self._endpoint.service,
                self._endpoint.url("embeddings"),
                f"a body that is not an embeddings list ({type(exc).__name__}: {exc})",
                json.dumps(data)[:_PREVIEW],
            ) from exc

    def __repr__(self) -> str:
        return f"<OpenAICompatibleEmbeddingsClient {self._endpoint.base_url} model={self._model}>"
