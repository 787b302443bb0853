"""The clients that talk to language models and embedding models, and what they say.

Everything a job sends to a model is an :class:`LLMRequest`, and everything it gets back is an
:class:`LLMResponse`; embeddings go through :meth:`EmbeddingsClient.embed` and come back as an
:class:`EmbeddingsResponse`. The records are frozen attrs classes in ``records``; the two
protocols are in ``protocols``.

The protocols (all methods are async and run on trio)::

    class LLMClient(Protocol):
        model_identifier: str | None          # property: the model called when a request names none
        async def complete(self, request: LLMRequest) -> LLMResponse
        async def stream(self, request: LLMRequest, on_text: Callable[[str], object]) -> LLMResponse

    class EmbeddingsClient(Protocol):
        model_identifier: str | None          # property: the model used when a call names none
        async def embed(self, texts: Sequence[str], *, model: str | None = None,
                        purpose: EmbeddingPurpose = EmbeddingPurpose.DOCUMENT) -> EmbeddingsResponse

``stream`` hands each piece of text to ``on_text`` as it arrives and then returns the whole
response, exactly as ``complete`` would have. A client that streams tool calls too takes a
keyword-only ``on_tool_call`` (a :data:`ToolCallSink`, called with each fragment as
``(index, id, name, arguments)``); the shipped clients all do. A client answers a call the model completed with
a successful response, *whatever the stop reason*: a reply cut at ``max_tokens`` comes back with
``stop_reason is LLMStopReason.MAX_TOKENS`` (it is the caller, an ``LLMCall``, that turns it into
an :class:`~nucleo_trio.errors.OutputTruncationRetry`). A call that did not complete raises:

* a 429 raises :class:`~nucleo_trio.errors.RateLimitRetry`, an overload (529, or a 503 that says
  so) :class:`~nucleo_trio.errors.OverloadRetry`, any other 5xx, a timeout or a dropped connection
  :class:`~nucleo_trio.errors.TransientErrorRetry`; each signal carries the upstream's
  ``Retry-After`` in seconds as ``retry_after`` and an :class:`~nucleo_trio.errors.UpstreamFailure`
  (status, service, detail, Retry-After, backpressure), with the upstream error as its cause;
* a 429 that says the quota is spent raises :class:`~nucleo_trio.errors.QuotaExhaustedError`;
* any other error status raises what :func:`~nucleo_trio.errors.http_error_from_status` makes of it.

The records (every field has the name given here; all are keyword arguments):

* :class:`Message`: ``role`` (:class:`Role`: SYSTEM, USER, ASSISTANT, TOOL), ``content: str``,
  ``tool_calls: tuple[ToolCall, ...]`` (an assistant turn that called tools), ``tool_call_id``
  (a TOOL turn: the call it answers). Shortcuts: ``Message.system(text)``, ``Message.user(text)``,
  ``Message.assistant(text, tool_calls=())``, ``Message.tool_result(call_id, text)``.
* :class:`ToolSpec`: ``name``, ``description``, ``parameters`` (a JSON schema mapping).
* :class:`ToolCall`: ``id``, ``name``, ``arguments`` (the JSON text the model wrote);
  ``parsed_arguments()`` returns the mapping or raises a correctable
  :class:`~nucleo_trio.errors.JsonParseError`.
* :class:`OutputSchema`: ``name``, ``schema`` (a JSON schema mapping), ``strict: bool = True``;
  a request carrying one asks for structured output (the reply's ``content`` is JSON text).
* :class:`LLMRequest`: ``messages: tuple[Message, ...]`` (at least one), ``max_tokens: int``
  (the output budget, mandatory and positive), ``model: str | None = None`` (the wire model id;
  ``None`` means the client's ``model_identifier``), ``tools: tuple[ToolSpec, ...] = ()``,
  ``tool_choice: str | None = None`` ("auto", "none", "required" or a tool's name),
  ``output_schema: OutputSchema | None = None``, ``temperature: float | None = None``,
  ``stop: tuple[str, ...] = ()``, ``extra: Mapping[str, Any] = {}`` (provider fields passed
  through as they are). ``with_max_tokens(n)`` and ``with_model(id)`` return modified copies.
* :class:`Usage`: ``input_tokens: int = 0``, ``output_tokens: int = 0``, ``estimated: bool =
  False`` (the provider reported none; see :meth:`Usage.estimate`), ``cache_read_tokens: int =
  0`` / ``cache_write_tokens: int = 0`` (the prompt's tokens read from and written to the
  provider's prompt cache, not counted in ``input_tokens``); ``total_tokens``.
* :class:`LLMResponse`: ``content: str = ""``, ``tool_calls: tuple[ToolCall, ...] = ()``,
  ``stop_reason: LLMStopReason = UNKNOWN``, ``provider_stop_reason: str | None`` (the provider's
  own word, e.g. "length"), ``usage: Usage``, ``model: str | None`` (the model id the call was
  made for, which the ledger prices), ``provider_model: str | None`` (what the provider said
  served it), ``response_id: str | None``, ``successful: bool = True``,
  ``reason_for_failure: str | None``, ``last_error: BaseException | None``,
  ``started_at`` / ``ended_at: float | None`` (``trio.current_time()`` seconds),
  ``rate_limit_info: RateLimitInfo | None`` (what the provider said of its limits). Properties:
  ``duration``, ``is_truncated`` (stop reason MAX_TOKENS), ``has_tool_calls``.
  ``LLMResponse.failure(error, model=..., started_at=..., ended_at=..., stop_reason=...)``
  builds the unsuccessful record the observable wrapper keeps for a call that raised.
* :class:`RateLimitInfo` (``rate_limit_info``): one reading of a provider's limits, frozen:
  ``model``, ``was_rate_limited``, ``retry_after`` (seconds), ``token_limit`` /
  ``tokens_remaining``, ``request_limit`` / ``requests_remaining`` (``None`` when unsaid),
  ``reset``, ``kind`` (:class:`RateLimitType`: CAPACITY, ACCELERATION, UNKNOWN), ``captured_at``;
  ``tokens_per_minute`` / ``requests_per_minute`` are the caps or 0.
  ``RateLimitInfo.rate_limited(model)`` is a bare 429, ``RateLimitInfo.from_headers(model,
  token_limit, tokens_remaining, reset)`` a CAPACITY reading.
* :class:`EmbeddingsResponse`: ``vectors: tuple[tuple[float, ...], ...]`` (one per text, in
  order), ``model``, ``purpose`` (:class:`EmbeddingPurpose`: DOCUMENT or QUERY), ``usage``,
  ``successful``, ``reason_for_failure``, ``last_error``, ``started_at``, ``ended_at``;
  ``EmbeddingsResponse.failure(error, model=..., purpose=..., started_at=..., ended_at=...)``.

The implementations:

* :class:`ObservableLLMClient` / :class:`ObservableEmbeddingsClient` (``observable``) wrap any
  client and record every call on a job's context (``context.record_llm_response``): a success
  as the delegate's own response object, a failure as ``LLMResponse.failure(...)`` with the
  reason, the cause and the model, then re-raise the same exception; a raised
  :class:`~nucleo_trio.errors.OutputTruncationRetry` is recorded with stop reason MAX_TOKENS.
  Built with a context they record there; built without one they record on
  :func:`~nucleo_trio.jobs.context.current_job` at each call, and outside any job nowhere.
* :class:`ScriptedLLMClient` / :class:`ScriptedEmbeddingsClient` (``scripted``): deterministic
  fakes, played from a script of responses, exceptions and functions of the request;
  :func:`reply` builds a scripted response in one line.
* :class:`OpenAICompatibleClient` / :class:`OpenAICompatibleEmbeddingsClient` (``openai``):
  chat completions and embeddings over httpx, on a connection pool sized by
  :class:`~nucleo_trio.http.HttpSettings` to the dispatcher's ``http`` gate.
* ``fake_server.serve_fake_openai(...)``: a local trio HTTP server that plays the OpenAI API on
  loopback, with scripted replies, 429 storms, a rate limit of its own, truncations and latency.
"""

from .observable import (
    ObservableEmbeddingsClient as ObservableEmbeddingsClient,
    ObservableLLMClient as ObservableLLMClient,
)
from .openai import (
    OpenAICompatibleClient as OpenAICompatibleClient,
    OpenAICompatibleEmbeddingsClient as OpenAICompatibleEmbeddingsClient,
)
from .protocols import (
    EmbeddingsClient as EmbeddingsClient,
    LLMClient as LLMClient,
    TextSink as TextSink,
    ToolCallSink as ToolCallSink,
)
from .rate_limit_info import (
    RateLimitInfo as RateLimitInfo,
    RateLimitType as RateLimitType,
    parse_int_or_null as parse_int_or_null,
)
from .records import (
    EmbeddingPurpose as EmbeddingPurpose,
    EmbeddingsResponse as EmbeddingsResponse,
    LLMRequest as LLMRequest,
    LLMResponse as LLMResponse,
    Message as Message,
    OutputSchema as OutputSchema,
    Role as Role,
    ToolCall as ToolCall,
    ToolSpec as ToolSpec,
    Usage as Usage,
)
from .scripted import (
    ScriptedEmbeddingsClient as ScriptedEmbeddingsClient,
    ScriptedLLMClient as ScriptedLLMClient,
    ScriptExhaustedError as ScriptExhaustedError,
    estimate_tokens as estimate_tokens,
    reply as reply,
)

__all__ = [
    "EmbeddingPurpose",
    "EmbeddingsClient",
    "EmbeddingsResponse",
    "LLMClient",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "ObservableEmbeddingsClient",
    "ObservableLLMClient",
    "OpenAICompatibleClient",
    "OpenAICompatibleEmbeddingsClient",
    "OutputSchema",
    "RateLimitInfo",
    "RateLimitType",
    "Role",
    "ScriptExhaustedError",
    "ScriptedEmbeddingsClient",
    "ScriptedLLMClient",
    "TextSink",
    "ToolCallSink",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "estimate_tokens",
    "parse_int_or_null",
    "reply",
]
