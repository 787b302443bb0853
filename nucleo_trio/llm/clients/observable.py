"""The clients a job receives: every call it makes lands on its context.

A job's record of its model calls is what its terminal event carries and what a spend ledger
prices, so it has to hold every call, including the ones that raised. The wrappers here sit
between a job and any client and append one record per call to the job's
:attr:`~nucleo_trio.jobs.context.JobContext.llm_responses`:

* a success is recorded as the delegate's own response object, and returned as it is;
* a failure is recorded as an unsuccessful response (the reason, the error, the model, the start
  and end times), and the same exception is raised on, so the dispatcher still sees the signal
  or error the delegate raised; a truncation signal is recorded with the MAX_TOKENS stop reason;
* a success whose usage is an estimate (the provider reported none) is recorded, and returned,
  at the call's reservation when the wrapper was given one (``reserved``, what admission held
  for the call: the most it could cost), or at the text's estimate where that is larger, so
  what a ledger books for it is never less than what the call was let through on.

A wrapper built with a context records there. One built without records on
:func:`~nucleo_trio.jobs.context.current_job` at each call, so one wrapper can serve every job
of a dispatcher: trio copies the current job into the tasks a job starts, and a call made
outside any job is passed through unrecorded. Wrapping a wrapper wraps its delegate instead,
so no call is ever recorded twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import trio

from ...jobs.context import JobContext, current_job
from .protocols import EmbeddingsClient, LLMClient, TextSink, ToolCallSink
from .records import EmbeddingPurpose, EmbeddingsResponse, LLMRequest, LLMResponse, Usage

__all__ = ["ObservableEmbeddingsClient", "ObservableLLMClient"]


def _check_context(context: object, owner: str) -> None:
    if context is not None and not isinstance(context, JobContext):
        raise TypeError(
            f"{owner}: context must be a JobContext or None, got {type(context).__name__}"
        )


C = TypeVar("C", LLMClient, EmbeddingsClient)


class _Observing(Generic[C]):
    """What both wrappers share: the delegate (never another wrapper, so nothing is recorded
    twice), the context calls are recorded on, and the recording itself."""

    _protocol: ClassVar[type]
    _needs: ClassVar[str]

    def __init__(self, delegate: C, context: JobContext | None = None) -> None:
        """Wrap ``delegate``; record on ``context``, or on the current job at each call."""
        owner = type(self).__name__
        if isinstance(delegate, type(self)):
            delegate = delegate.delegate
        if not isinstance(delegate, self._protocol):
            raise TypeError(f"{owner} needs {self._needs}, got {type(delegate).__name__}")
        _check_context(context, owner)
        self._delegate: C = delegate
        self._context = context

    @property
    def delegate(self) -> C:
        """The client whose calls are recorded."""
        return self._delegate

    @property
    def context(self) -> JobContext | None:
        """The context calls are recorded on, or ``None`` for the current job's."""
        return self._context

    @property
    def model_identifier(self) -> str | None:
        """The delegate's model identifier."""
        return self._delegate.model_identifier

    def _record(self, response: LLMResponse | EmbeddingsResponse) -> None:
        context = self._context if self._context is not None else current_job()
        if context is not None:
            context.record_llm_response(response)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._delegate!r}>"


class ObservableLLMClient(_Observing[LLMClient]):
    """An :class:`LLMClient` that records each of its calls on a job's context.

    Every call is recorded once: a success as the delegate's own response, a failure as
    :meth:`LLMResponse.failure` (the exception is then raised on unchanged). A reply that
    reports no usage is recorded at ``reserved`` when one was given.
    """

    # OC-01..04: every call recorded, failures and truncations included; streams too.

    _protocol = LLMClient
    _needs = "an LLMClient (complete, stream, model_identifier)"

    def __init__(
        self,
        delegate: LLMClient,
        context: JobContext | None = None,
        *,
        reserved: Usage | None = None,
    ) -> None:
        """Wrap ``delegate``; record on ``context``, or on the current job at each call.

        ``reserved`` is the usage the call was admitted on (its binding's input and output
        reservation): a reply that reports no usage is recorded at it, or at its own estimate
        from the text where that is larger, and marked estimated.
        """
        super().__init__(delegate, context)
        if reserved is not None and not isinstance(reserved, Usage):
            raise TypeError(
                f"ObservableLLMClient: reserved must be a Usage or None, got "
                f"{type(reserved).__name__}"
            )
        self._reserved = reserved

    @property
    def reserved(self) -> Usage | None:
        """The usage an estimated reply is recorded at, or ``None``."""
        return self._reserved

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The delegate's reply, recorded as it is; a failure is recorded and raised. A
        request that is not an :class:`LLMRequest`, or a reply that is not an
        :class:`LLMResponse`, is a :class:`TypeError`."""
        return await self._observe(request, lambda: self._delegate.complete(request), stream=False)

    def streams_tool_calls(self) -> bool:
        """Whether the delegate hands tool calls over as they arrive: its ``stream`` takes an
        ``on_tool_call`` keyword."""
        try:
            parameters = inspect.signature(self._delegate.stream).parameters
        except (TypeError, ValueError):
            return False
        return "on_tool_call" in parameters

    async def stream(
        self, request: LLMRequest, on_text: TextSink, *, on_tool_call: ToolCallSink | None = None
    ) -> LLMResponse:
        """The delegate's streamed reply, recorded through the same path as :meth:`complete`.

        ``on_tool_call`` is passed on when given and the delegate takes it
        (:meth:`streams_tool_calls`); a delegate that does not still returns its tool calls in
        the response. A streamed response that arrives without a start time gets the call's
        own.
        """
        extra: dict[str, Any] = {}
        if on_tool_call is not None and self.streams_tool_calls():
            extra["on_tool_call"] = on_tool_call
        return await self._observe(
            request, lambda: self._delegate.stream(request, on_text, **extra), stream=True
        )

    async def _observe(
        self, request: LLMRequest, call: Callable[[], Awaitable[LLMResponse]], *, stream: bool
    ) -> LLMResponse:
        if not isinstance(request, LLMRequest):
            raise TypeError(f"an LLM call needs an LLMRequest, got {type(request).__name__}")
        started = trio.current_time()
        try:
            response = await call()
            if not isinstance(response, LLMResponse):
                raise TypeError(
                    f"{type(self._delegate).__name__} answered a {type(response).__name__}, "
                    "not an LLMResponse"
                )
        except BaseException as error:
            # Cancellation included: the call was made and may have been paid for, so the
            # record keeps it; the exception itself goes on unchanged.
            self._record(
                LLMResponse.failure(
                    error,
                    model=request.model or self._delegate.model_identifier,
                    started_at=started,
                    ended_at=trio.current_time(),
                )
            )
            raise
        if stream and response.started_at is None:
            response = attrs.evolve(response, started_at=started)
        if response.usage.estimated and self._reserved is not None:
            response = attrs.evolve(response, usage=response.usage.at_least(self._reserved))
        self._record(response)
        return response


class ObservableEmbeddingsClient(_Observing[EmbeddingsClient]):
    """An :class:`EmbeddingsClient` that records each of its calls on a job's context: a
    success as the delegate's own response, a failure as :meth:`EmbeddingsResponse.failure`,
    the exception then raised on unchanged."""

    # OC-05

    _protocol = EmbeddingsClient
    _needs = "an EmbeddingsClient (embed, model_identifier)"

    async def embed(
        self,
        texts: Sequence[str],
        *,
        model: str | None = None,
        purpose: EmbeddingPurpose = EmbeddingPurpose.DOCUMENT,
    ) -> EmbeddingsResponse:
        """The delegate's vectors, recorded as they are; a failure is recorded and raised.

        The failure record carries the requested purpose and the model, so a ledger can still
        price the call.
        """
        started = trio.current_time()
        try:
            response = await self._delegate.embed(texts, model=model, purpose=purpose)
            if not isinstance(response, EmbeddingsResponse):
                raise TypeError(
                    f"{type(self._delegate).__name__} answered a {type(response).__name__}, "
                    "not an EmbeddingsResponse"
                )
        except BaseException as error:
            self._record(
                EmbeddingsResponse.failure(
                    error,
                    model=model or self._delegate.model_identifier,
                    purpose=purpose,
                    started_at=started,
                    ended_at=trio.current_time(),
                )
            )
            raise
        self._record(response)
        return response
