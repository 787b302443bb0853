"""A local server that plays the OpenAI API and Anthropic's Messages API, for tests, examples
and the demo.

It listens on loopback with real trio sockets and speaks HTTP/1.1 (through h11, which httpx
already depends on), so the :class:`~nucleo_trio.llm.clients.openai.OpenAICompatibleClient` is
exercised end to end: its pool, its wire format, its failure translation. What the server
answers is scripted::

    async with serve_fake_openai(requests_per_minute=30) as server:
        server.script(
            FakeReply.rate_limited(retry_after=2),
            FakeReply.completion("hello"),
            FakeReply.truncated("a reply cut sh"),
        )
        client = OpenAICompatibleClient(server.base_url, model="fake-model")

Each request to ``/chat/completions`` or ``/embeddings`` takes the next step of the script: a
:class:`FakeReply`, or a function of the :class:`FakeRequest` returning one. With the script
played, the ``responder`` answers (by default: a completion that echoes the last user turn, or
vectors derived from each text's hash). Streaming requests (``"stream": true``) get the same
reply as server-sent events.

The same server answers Anthropic's ``POST /v1/messages`` from the same script, in that API's
shape: content blocks, ``stop_reason``, usage with the prompt cache's counts
(``cache_read_tokens`` and ``cache_write_tokens`` of a reply), error bodies of ``"type":
"error"``, and its streaming events (``message_start`` to ``message_stop``). Give an Anthropic
client :attr:`FakeOpenAIServer.root` as its base URL; it authenticates with ``x-api-key``.

Besides the script the server can behave like a provider under load:

* ``requests_per_minute`` / ``tokens_per_minute``: a sliding one-minute window, counted on the
  trio clock; a request over either limit gets a 429 with ``Retry-After`` set to the seconds
  until the window has room, and takes no step of the script;
* ``publish_limits``: every successful answer carries the ``x-ratelimit-limit-*`` and
  ``x-ratelimit-remaining-*`` headers of those limits, as OpenAI sends them;
* ``latency``: seconds slept on the trio clock before every answer (a reply may add its own
  ``delay``), so under the autojump clock a slow provider costs no real time;
* ``api_key``: requests without ``Authorization: Bearer <key>`` (or, to ``/v1/messages``,
  ``x-api-key: <key>``) get a 401.

The server keeps every request it received, how many were in flight at once, and how many it
refused for rate, so a test can assert what the client did.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeAlias

import attrs
import h11
import trio

from .records import ToolCall
from .scripted import estimate_tokens, hashed_vector

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "FakeRequest",
    "FakeStep",
    "serve_fake_openai",
]

_WINDOW = 60.0
_MAX_BODY = 16 * 1024 * 1024
_MESSAGES = "/v1/messages"
_PATHS = ("/v1/chat/completions", "/v1/embeddings", _MESSAGES)

# Anthropic's words for the finish reasons a script may give in OpenAI's; any other word is sent
# as it is (a script may name Anthropic's own, such as "pause_turn").
_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's error types by status; any other 5xx is an api_error, any other 4xx an
# invalid_request_error.
_ANTHROPIC_ERROR = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@attrs.frozen(kw_only=True)
class FakeRequest:
    """A request the server received: where it went, its headers and its JSON body."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    received_at: float

    @property
    def model(self) -> str | None:
        model = self.body.get("model") if isinstance(self.body, dict) else None
        return model if isinstance(model, str) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def is_stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def max_tokens(self) -> int | None:
        if not isinstance(self.body, dict):
            return None
        value = self.body.get("max_tokens", self.body.get("max_completion_tokens"))
        return value if isinstance(value, int) else None

    def last_user_text(self) -> str:
        """The content of the last user turn (its text blocks joined, when it is a list of
        blocks), or '' when there is none."""
        for message in reversed(self.messages):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    return "".join(
                        str(block.get("text", ""))
                        for block in content
                        if isinstance(block, dict) and block.get("type") == "text"
                    )
                return content if isinstance(content, str) else ""
        return ""

    def estimated_tokens(self) -> int:
        """The prompt's tokens by the scripted estimate, plus the output budget asked for."""
        return estimate_tokens(json.dumps(self.messages)) + (self.max_tokens or 0)


def _calls(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@attrs.frozen(kw_only=True)
class FakeReply:
    """One scripted answer.

    A 200 to a chat request is built from ``content``, ``tool_calls``, ``finish_reason`` and the
    token counts (estimated from the request when left ``None``; the cache counts are reported
    by ``/v1/messages`` only, and are 0 by default); a 200 to an embeddings
    request from ``vectors`` (hashed from the texts when ``None``). ``body`` replaces all of
    that with a JSON value (or a raw string) sent as it is, which is how error bodies are sent.
    ``delay`` is slept before answering; ``disconnect`` closes the connection without a word.
    """

    status: int = 200
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    vectors: tuple[tuple[float, ...], ...] | None = None
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    delay: float = 0.0
    disconnect: bool = False

    @classmethod
    def completion(
        cls,
        content: str = "",
        *,
        tool_calls: Iterable[ToolCall] = (),
        finish_reason: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> FakeReply:
        """A chat completion; ``finish_reason`` defaults to ``tool_calls`` or ``stop``
        (``tool_use`` or ``end_turn`` on ``/v1/messages``)."""
        return cls(
            content=content,
            tool_calls=tuple(tool_calls),
            finish_reason=finish_reason,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            delay=delay,
            headers=dict(headers or {}),
        )

    @classmethod
    def truncated(cls, content: str = "", *, output_tokens: int | None = None) -> FakeReply:
        """A completion cut at its budget: ``finish_reason`` is ``length``."""
        return cls(content=content, finish_reason="length", output_tokens=output_tokens)

    @classmethod
    def embeddings(cls, vectors: Sequence[Sequence[float]]) -> FakeReply:
        """These vectors, in order, for an embeddings request."""
        return cls(vectors=tuple(tuple(float(x) for x in row) for row in vectors))

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "",
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> FakeReply:
        """An error status with an OpenAI-style error body."""
        return cls(
            status=status,
            body={"error": {"message": message or f"HTTP {status}", "type": code, "code": code}},
            headers=dict(headers or {}),
        )

    @classmethod
    def rate_limited(
        cls, retry_after: float | None = None, *, retry_after_ms: int | None = None
    ) -> FakeReply:
        """A 429, with ``Retry-After`` in seconds and/or ``retry-after-ms`` when given."""
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        return cls.error(
            429, "Rate limit reached for requests", code="rate_limit_exceeded", headers=headers
        )

    @classmethod
    def quota_exhausted(cls) -> FakeReply:
        """A 429 that says the quota is spent (``insufficient_quota``)."""
        return cls.error(429, "You exceeded your current quota", code="insufficient_quota")

    @classmethod
    def overloaded(cls, status: int = 529) -> FakeReply:
        """An overload: 529, or a 503 whose body says overloaded."""
        return cls.error(status, "The server is overloaded", code="overloaded_error")

    @classmethod
    def server_error(cls, status: int = 500) -> FakeReply:
        """A 5xx that is not an overload."""
        return cls.error(status, "The server had an error while processing your request")

    @classmethod
    def dropped(cls) -> FakeReply:
        """Close the connection without answering."""
        return cls(disconnect=True)


def _anthropic_stop(reply: FakeReply) -> str:
    if reply.finish_reason is None:
        return "tool_use" if reply.tool_calls else "end_turn"
    return _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)


def _tool_use_block(call: ToolCall, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def _anthropic_error(status: int, body: Any) -> Any:
    """An OpenAI-style error body in Anthropic's shape (``{"type": "error", "error": {"type",
    "message"}}``); any other body is sent as it is."""
    error = body.get("error") if isinstance(body, dict) and "type" not in body else None
    if not isinstance(error, dict):
        return body
    code = str(error.get("code") or error.get("type") or "")
    kind = _ANTHROPIC_ERROR.get(status) or (
        "api_error" if status >= 500 else "invalid_request_error"
    )
    if status == 503 and "overload" in code:
        kind = "overloaded_error"
    return {"type": "error", "error": {"type": kind, "message": error.get("message") or ""}}


FakeStep: TypeAlias = FakeReply | Callable[[FakeRequest], FakeReply]
"""A scripted answer, or a function of the request that returns one."""


def _echo(request: FakeRequest) -> FakeReply:
    return FakeReply.completion(f"echo: {request.last_user_text()}")


class FakeOpenAIServer:
    """The running server: its address, its script, and what it saw."""

    def __init__(
        self,
        *,
        responder: Callable[[FakeRequest], FakeReply] | None,
        latency: float,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        api_key: str | None,
        model: str,
        dimensions: int,
        publish_limits: bool = False,
    ) -> None:
        for name, limit in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0
            ):
                raise ValueError(f"serve_fake_openai: {name} must be a positive int, got {limit!r}")
        if isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0:
            raise ValueError(f"serve_fake_openai: latency must be seconds >= 0, got {latency!r}")
        self._steps: deque[FakeStep] = deque()
        self._responder = responder
        self.latency = float(latency)
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.publish_limits = publish_limits
        self.api_key = api_key
        self.model = model
        self.dimensions = dimensions
        self.port = 0
        self.host = "127.0.0.1"
        self.requests: list[FakeRequest] = []
        """Every request received, in order, the ones refused included."""
        self.in_flight = 0
        self.max_in_flight = 0
        self.rate_limited = 0
        """How many requests the server's own rate limits refused."""
        self._window: deque[tuple[float, int]] = deque()
        self._connections = 0

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI-compatible client, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root(self) -> str:
        """The server's address with no path: the base URL an Anthropic client takes."""
        return f"http://{self.host}:{self.port}"

    @property
    def connections(self) -> int:
        """How many connections clients have opened so far."""
        return self._connections

    def script(self, *steps: FakeStep) -> None:
        """Append ``steps`` to the script, each answering one request in order."""
        for index, step in enumerate(steps):
            if not isinstance(step, FakeReply) and not callable(step):
                raise TypeError(
                    f"script step {index} must be a FakeReply or a function of the request, "
                    f"got {type(step).__name__}"
                )
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        """Steps of the script not yet played."""
        return len(self._steps)

    # -- rate ---------------------------------------------------------------------------------
    def _refusal(self, request: FakeRequest) -> FakeReply | None:
        """A 429 when the request would break a per-minute limit, else ``None`` (and count it)."""
        now = trio.current_time()
        while self._window and self._window[0][0] <= now - _WINDOW:
            self._window.popleft()
        tokens = request.estimated_tokens()
        over_requests = (
            self.requests_per_minute is not None and len(self._window) >= self.requests_per_minute
        )
        # An empty window takes any request, so one larger than the whole limit is not
        # refused forever.
        over_tokens = (
            self.tokens_per_minute is not None
            and self._window
            and (sum(used for _, used in self._window) + tokens > self.tokens_per_minute)
        )
        if over_requests or over_tokens:
            self.rate_limited += 1
            wait = max(1, math.ceil(self._window[0][0] + _WINDOW - now))
            return FakeReply.rate_limited(retry_after=wait)
        self._window.append((now, tokens))
        return None

    def _limit_headers(self, reply: FakeReply) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers of the limits and the current window, as OpenAI names
        them (empty unless ``publish_limits``); a header the reply sets itself wins."""
        if not self.publish_limits:
            return {}
        headers: dict[str, str] = {}
        if self.requests_per_minute is not None:
            left = max(0, self.requests_per_minute - len(self._window))
            headers["x-ratelimit-limit-requests"] = str(self.requests_per_minute)
            headers["x-ratelimit-remaining-requests"] = str(left)
        if self.tokens_per_minute is not None:
            left = max(0, self.tokens_per_minute - sum(used for _, used in self._window))
            headers["x-ratelimit-limit-tokens"] = str(self.tokens_per_minute)
            headers["x-ratelimit-remaining-tokens"] = str(left)
        own = {name.lower() for name in reply.headers}
        return {name: value for name, value in headers.items() if name not in own}

    # -- answering ------------------------------------------------------------------------------
    def _answer(self, request: FakeRequest) -> FakeReply:
        if self.api_key is not None:
            bearer = request.headers.get("authorization") == f"Bearer {self.api_key}"
            keyed = request.path == _MESSAGES and request.headers.get("x-api-key") == self.api_key
            if not bearer and not keyed:
                return FakeReply.error(401, "Incorrect API key provided", code="invalid_api_key")
        if request.path not in _PATHS:
            return FakeReply.error(404, f"Unknown path {request.path}", code="not_found")
        if request.method != "POST":
            return FakeReply.error(405, f"{request.method} is not allowed here")
        if not isinstance(request.body, dict):
            return FakeReply.error(400, "The body must be a JSON object", code="invalid_json")
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        if self._steps:
            step = self._steps.popleft()
        elif self._responder is not None:
            step = self._responder
        elif request.path == "/v1/embeddings":
            return FakeReply()
        else:
            step = _echo
        reply = step(request) if callable(step) else step
        if not isinstance(reply, FakeReply):
            raise TypeError(f"a script step answered a {type(reply).__name__}, not a FakeReply")
        return reply

    def _completion_body(self, request: FakeRequest, reply: FakeReply) -> dict[str, Any]:
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": request.model or self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(request, reply),
        }

    def _usage(self, request: FakeRequest, reply: FakeReply) -> dict[str, int]:
        prompt = (
            reply.input_tokens
            if reply.input_tokens is not None
            else estimate_tokens(json.dumps(request.messages))
        )
        written = reply.content + "".join(call.arguments for call in reply.tool_calls)
        completion = (
            reply.output_tokens if reply.output_tokens is not None else estimate_tokens(written)
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _embeddings_body(self, request: FakeRequest, reply: FakeReply) -> dict[str, Any]:
        raw = request.body.get("input") if isinstance(request.body, dict) else None
        texts = [raw] if isinstance(raw, str) else [str(text) for text in raw or ()]
        vectors = reply.vectors or tuple(hashed_vector(text, self.dimensions) for text in texts)
        return {
            "object": "list",
            "model": request.model or self.model,
            "data": [
                {"object": "embedding", "index": index, "embedding": list(vector)}
                for index, vector in enumerate(vectors)
            ],
            "usage": {
                "prompt_tokens": sum(estimate_tokens(text) for text in texts),
                "total_tokens": sum(estimate_tokens(text) for text in texts),
            },
        }

    def _stream_events(self, request: FakeRequest, reply: FakeReply) -> list[bytes]:
        body = self._completion_body(request, reply)
        base = {"id": body["id"], "object": "chat.completion.chunk", "model": body["model"]}
        deltas: list[dict[str, Any]] = [{"role": "assistant"}]
        words = reply.content.split(" ") if reply.content else []
        deltas += [
            {"content": word if i == len(words) - 1 else word + " "} for i, word in enumerate(words)
        ]
        for index, call in enumerate(reply.tool_calls):
            half = len(call.arguments) // 2
            head = {"index": index, "id": call.id, "type": "function"}
            deltas.append(
                {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]}
            )
            for part in (call.arguments[:half], call.arguments[half:]):
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        chunks = [{**base, "choices": [{"index": 0, "delta": delta}]} for delta in deltas]
        finish = body["choices"][0]["finish_reason"]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({**base, "choices": [], "usage": body["usage"]})
        events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
        events.append(b"data: [DONE]\n\n")
        return events

    # -- Anthropic's Messages API --------------------------------------------------------------
    def _message_body(self, request: FakeRequest, reply: FakeReply) -> dict[str, Any]:
        """A ``message`` object: text and ``tool_use`` blocks, the stop reason, the usage."""
        content: list[dict[str, Any]] = []
        if reply.content or not reply.tool_calls:
            content.append({"type": "text", "text": reply.content})
        content += [
            _tool_use_block(call, json.loads(call.arguments or "{}")) for call in reply.tool_calls
        ]
        return {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": request.model or self.model,
            "content": content,
            "stop_reason": _anthropic_stop(reply),
            "stop_sequence": None,
            "usage": self._message_usage(request, reply),
        }

    def _message_usage(self, request: FakeRequest, reply: FakeReply) -> dict[str, int]:
        counts = self._usage(request, reply)
        return {
            "input_tokens": counts["prompt_tokens"],
            "output_tokens": counts["completion_tokens"],
            "cache_creation_input_tokens": reply.cache_write_tokens,
            "cache_read_input_tokens": reply.cache_read_tokens,
        }

    def _message_events(self, request: FakeRequest, reply: FakeReply) -> list[bytes]:
        """The reply as Anthropic streams it: ``message_start``, one block at a time (text a
        word a delta, a tool's input in two ``input_json_delta`` halves), ``message_delta``
        with the stop reason and the output count, ``message_stop``."""
        body = self._message_body(request, reply)
        usage = body["usage"]
        start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
        for index, block in enumerate(body["content"]):
            if block["type"] == "text":
                events.append(
                    (
                        "content_block_start",
                        {"index": index, "content_block": {"type": "text", "text": ""}},
                    )
                )
                events.append(("ping", {}))
                words = block["text"].split(" ") if block["text"] else []
                for i, word in enumerate(words):
                    piece = word if i == len(words) - 1 else word + " "
                    delta = {"type": "text_delta", "text": piece}
                    events.append(("content_block_delta", {"index": index, "delta": delta}))
            else:
                arguments = json.dumps(block["input"])
                half = len(arguments) // 2
                events.append(
                    (
                        "content_block_start",
                        {"index": index, "content_block": {**block, "input": {}}},
                    )
                )
                for part in (arguments[:half], arguments[half:]):
                    delta = {"type": "input_json_delta", "partial_json": part}
                    events.append(("content_block_delta", {"index": index, "delta": delta}))
            events.append(("content_block_stop", {"index": index}))
        stop = {"stop_reason": body["stop_reason"], "stop_sequence": None}
        events.append(
            ("message_delta", {"delta": stop, "usage": {"output_tokens": usage["output_tokens"]}})
        )
        events.append(("message_stop", {}))
        return [
            f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
            for name, data in events
        ]

    # -- the wire -------------------------------------------------------------------------------
    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        self._connections += 1
        connection = h11.Connection(h11.SERVER)
        try:
            async with stream:
                while True:
                    request = await self._read_request(connection, stream)
                    if request is None:
                        return
                    keep_open = await self._respond(connection, stream, request)
                    if not keep_open or connection.our_state is not h11.DONE:
                        return
                    try:
                        connection.start_next_cycle()
                    except h11.LocalProtocolError:
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            # The client went away (a cancelled call closes its connection): nothing to answer.
            return

    async def _read_request(
        self, connection: h11.Connection, stream: trio.SocketStream
    ) -> FakeRequest | None:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        size = 0
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > _MAX_BODY:
                    return None
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return None  # ConnectionClosed or PAUSED: the client is done with us.
        assert head is not None
        raw = b"".join(chunks)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        request = FakeRequest(
            method=head.method.decode(),
            path=head.target.decode().split("?", 1)[0],
            headers={name.decode().lower(): value.decode() for name, value in head.headers},
            body=body,
            received_at=trio.current_time(),
        )
        self.requests.append(request)
        return request

    async def _respond(
        self, connection: h11.Connection, stream: trio.SocketStream, request: FakeRequest
    ) -> bool:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self._answer(request)
            delay = self.latency + reply.delay
            if delay:
                await trio.sleep(delay)
            if reply.disconnect:
                return False
            if reply.status == 200 and reply.body is None and request.is_stream:
                await self._send_stream(connection, stream, request, reply)
                return True
            payload = self._payload(request, reply)
            headers = [
                ("content-type", "application/json"),
                ("content-length", str(len(payload))),
                *reply.headers.items(),
            ]
            if reply.status == 200:
                headers.extend(self._limit_headers(reply).items())
            await self._send(
                connection, stream, h11.Response(status_code=reply.status, headers=headers)
            )
            await self._send(connection, stream, h11.Data(data=payload))
            await self._send(connection, stream, h11.EndOfMessage())
            return True
        finally:
            self.in_flight -= 1

    def _payload(self, request: FakeRequest, reply: FakeReply) -> bytes:
        if reply.body is not None:
            body = reply.body
            if request.path == _MESSAGES and reply.status != 200:
                body = _anthropic_error(reply.status, body)
        elif reply.status != 200:
            body = {"error": {"message": f"HTTP {reply.status}", "type": None, "code": None}}
            if request.path == _MESSAGES:
                body = _anthropic_error(reply.status, body)
        elif request.path == "/v1/embeddings":
            body = self._embeddings_body(request, reply)
        elif request.path == _MESSAGES:
            body = self._message_body(request, reply)
        else:
            body = self._completion_body(request, reply)
        return body.encode() if isinstance(body, str) else json.dumps(body).encode()

    async def _send_stream(
        self,
        connection: h11.Connection,
        stream: trio.SocketStream,
        request: FakeRequest,
        reply: FakeReply,
    ) -> None:
        head = h11.Response(
            status_code=200,
            headers=[
                ("content-type", "text/event-stream"),
                *reply.headers.items(),
                *self._limit_headers(reply).items(),
            ],
        )
        await self._send(connection, stream, head)
        events = (
            self._message_events(request, reply)
            if request.path == _MESSAGES
            else self._stream_events(request, reply)
        )
        for event in events:
            await self._send(connection, stream, h11.Data(data=event))
        await self._send(connection, stream, h11.EndOfMessage())

    @staticmethod
    async def _send(
        connection: h11.Connection, stream: trio.SocketStream, event: h11.Event
    ) -> None:
        data = connection.send(event)
        if data:
            await stream.send_all(data)


@asynccontextmanager
async def serve_fake_openai(
    *steps: FakeStep,
    responder: Callable[[FakeRequest], FakeReply] | None = None,
    latency: float = 0.0,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    api_key: str | None = None,
    model: str = "fake-model",
    dimensions: int = 8,
    publish_limits: bool = False,
) -> AsyncIterator[FakeOpenAIServer]:
    """Run a fake OpenAI endpoint on a free loopback port for the duration of the block.

    ``steps`` start the script (more can be added with :meth:`FakeOpenAIServer.script`);
    ``responder`` answers once the script is played; ``model`` is the model a reply names when
    the request names none; ``dimensions`` is the length of the hashed embedding vectors;
    ``publish_limits`` sends the per-minute limits as ``x-ratelimit-*`` headers on every success.
    """
    server = FakeOpenAIServer(
        responder=responder,
        latency=latency,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        api_key=api_key,
        model=model,
        dimensions=dimensions,
        publish_limits=publish_limits,
    )
    server.script(*steps)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, server._serve_connection, 0, host=server.host)
        )
        server.port = listeners[0].socket.getsockname()[1]
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
