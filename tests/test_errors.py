"""Contract tests for nucleo_trio.errors: the LLM-readable tree, HTTP mapping, translation helpers,
re-run signals and their pacing."""

from __future__ import annotations

import inspect
import logging
import pickle
import random
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import pytest
import trio

from nucleo_trio import errors
from nucleo_trio.errors import (
    CORRECTABLE_SUFFIX,
    UNCORRECTABLE_SUFFIX,
    CancellationRequested,
    ContextOverflowError,
    CorrectableError,
    DependencyFailedError,
    ExternalServiceError,
    GuardrailError,
    Http400Error,
    Http401Error,
    Http403Error,
    Http404Error,
    Http413Error,
    Http422Error,
    Http429Error,
    Http500Error,
    Http502Error,
    Http503Error,
    HttpErrorDetail,
    HttpErrorResponse,
    HttpUnmappedStatusError,
    InvalidInputError,
    JobCancelledError,
    JobDeadlockError,
    JobTimeoutError,
    JsonParseError,
    LLMReadableError,
    LLMStopReason,
    ModelNotFoundError,
    ModelResolutionError,
    NucleoSystemError,
    OutputTruncationRetry,
    OverloadRetry,
    PermissionDeniedError,
    PromptNotFoundError,
    ProviderRefusalError,
    QuotaExhaustedError,
    RateLimitRetry,
    RerunSignal,
    ResourceNotFoundError,
    ResponseCorrectionRetry,
    ResponseValidationError,
    SpendCapExceededError,
    TokenEstimateExceedsLimitError,
    TransientErrorRetry,
    UnauthorizedError,
    UncorrectableError,
    UpstreamFailure,
    UpstreamRetry,
    UpstreamThrottleError,
    UsageError,
    UsageKeyError,
    UsageRuntimeError,
    UsageTypeError,
    UsageValueError,
    http_error_from_status,
    is_fatal_crash,
    log_failure,
    unwrap,
    unwrap_runtime,
    wrap_with_context,
)

E = TypeVar("E", bound=BaseException)

# ------------------------------------------------------------------------------------------
# Samples: one instance of every class, built the way the runtime builds it
# ------------------------------------------------------------------------------------------


def _http(status: int) -> LLMReadableError:
    return http_error_from_status(status, service="svc", endpoint="/x", body="{}")


SAMPLES: dict[type[BaseException], BaseException] = {
    CorrectableError: CorrectableError("fix the argument"),
    UncorrectableError: UncorrectableError("give up"),
    InvalidInputError: InvalidInputError("limit must be positive"),
    Http400Error: _http(400),
    Http413Error: _http(413),
    Http422Error: _http(422),
    ResourceNotFoundError: ResourceNotFoundError("no order 42"),
    Http404Error: _http(404),
    GuardrailError: GuardrailError("no PII"),
    JsonParseError: JsonParseError("Expecting value", '{"a": int}'),
    ResponseValidationError: ResponseValidationError({"verdict": "is required"}),
    ExternalServiceError: ExternalServiceError("connection refused", service="svc"),
    Http500Error: _http(500),
    Http502Error: _http(502),
    Http503Error: _http(503),
    HttpUnmappedStatusError: _http(418),
    UpstreamThrottleError: UpstreamThrottleError("slow down", service="svc"),
    Http429Error: _http(429),
    UnauthorizedError: UnauthorizedError("bad key"),
    Http401Error: _http(401),
    Http403Error: _http(403),
    PermissionDeniedError: PermissionDeniedError("not yours"),
    NucleoSystemError: NucleoSystemError("db", "pool closed"),
    UsageError: UsageError("job", "no timeout", "set `timeout = 60`"),
    UsageRuntimeError: UsageRuntimeError("dispatcher", "not started", "use open_dispatcher()"),
    UsageTypeError: UsageTypeError("job", "a name, not a limiter", "pass the limiter"),
    UsageValueError: UsageValueError("job", "a negative amount", "ask for one or more"),
    UsageKeyError: UsageKeyError("dispatcher", "no limiter named 'x'", "declare it"),
    JobCancelledError: JobCancelledError(),
    CancellationRequested: CancellationRequested("user left"),
    JobTimeoutError: JobTimeoutError(0.2),
    TokenEstimateExceedsLimitError: TokenEstimateExceedsLimitError(130, 100),
    ContextOverflowError: ContextOverflowError("still too long"),
    PromptNotFoundError: PromptNotFoundError("no prompt 'summary'"),
    QuotaExhaustedError: QuotaExhaustedError("monthly quota spent"),
    SpendCapExceededError: SpendCapExceededError("cap 10 USD reached"),
    ModelNotFoundError: ModelNotFoundError("no model 'x'"),
    ProviderRefusalError: ProviderRefusalError("provider refused"),
    DependencyFailedError: DependencyFailedError("job-1", ValueError("boom")),
    JobDeadlockError: JobDeadlockError("job-a", "job-b", "tools.py:12"),
    ModelResolutionError: ModelResolutionError("no model at FAST or above", grade="FAST"),
    RateLimitRetry: RateLimitRetry("429", retry_after=3),
    OverloadRetry: OverloadRetry("529"),
    TransientErrorRetry: TransientErrorRetry("502"),
    OutputTruncationRetry: OutputTruncationRetry("cut", "m1", 32000, previous_max_tokens=16000),
    ResponseCorrectionRetry: ResponseCorrectionRetry(
        "fix it", "add verdict", model="m1", attempt=1
    ),
}

# ERR-04..06: every LLM-readable class, its semantic parent, and its branch.
TREE: dict[type[LLMReadableError], tuple[type[LLMReadableError], bool]] = {
    CorrectableError: (LLMReadableError, True),
    UncorrectableError: (LLMReadableError, False),
    InvalidInputError: (CorrectableError, True),
    Http400Error: (InvalidInputError, True),
    Http413Error: (InvalidInputError, True),
    Http422Error: (InvalidInputError, True),
    ResourceNotFoundError: (CorrectableError, True),
    Http404Error: (ResourceNotFoundError, True),
    GuardrailError: (CorrectableError, True),
    JsonParseError: (CorrectableError, True),
    ResponseValidationError: (CorrectableError, True),
    ExternalServiceError: (UncorrectableError, False),
    Http500Error: (ExternalServiceError, False),
    Http502Error: (ExternalServiceError, False),
    Http503Error: (ExternalServiceError, False),
    HttpUnmappedStatusError: (ExternalServiceError, False),
    UpstreamThrottleError: (ExternalServiceError, False),
    Http429Error: (UpstreamThrottleError, False),
    UnauthorizedError: (UncorrectableError, False),
    Http401Error: (UnauthorizedError, False),
    Http403Error: (UnauthorizedError, False),
    PermissionDeniedError: (UncorrectableError, False),
    NucleoSystemError: (UncorrectableError, False),
    UsageError: (NucleoSystemError, False),
    UsageRuntimeError: (UsageError, False),
    UsageTypeError: (UsageError, False),
    UsageValueError: (UsageError, False),
    UsageKeyError: (UsageError, False),
    JobCancelledError: (UncorrectableError, False),
    CancellationRequested: (UncorrectableError, False),
    JobTimeoutError: (UncorrectableError, False),
    TokenEstimateExceedsLimitError: (UncorrectableError, False),
    ContextOverflowError: (UncorrectableError, False),
    PromptNotFoundError: (UncorrectableError, False),
    QuotaExhaustedError: (UncorrectableError, False),
    SpendCapExceededError: (UncorrectableError, False),
    ModelNotFoundError: (UncorrectableError, False),
    ProviderRefusalError: (UncorrectableError, False),
}

HTTP_CLASSES = [cls for cls in TREE if issubclass(cls, HttpErrorResponse)]
RERUN_SIGNALS: list[type[RerunSignal]] = [RateLimitRetry, OverloadRetry, TransientErrorRetry]
RERUN_SIGNALS += [OutputTruncationRetry, ResponseCorrectionRetry]


def _public_classes() -> list[type]:
    return [
        obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and obj.__module__ == errors.__name__ and not name.startswith("_")
    ]


def _caused_by(outer: E, inner: BaseException) -> E:
    outer.__cause__ = inner
    return outer


# ------------------------------------------------------------------------------------------
# The two messages and the suffix
# ------------------------------------------------------------------------------------------


def test_explain_to_llm_appends_the_suffix_of_the_branch() -> None:
    """ERR-01: explain_to_llm is the LLM message and one suffix line, chosen by the branch."""
    fix = CorrectableError("bad id")
    quit_ = UncorrectableError("service down")
    assert fix.explain_to_llm() == "bad id\n" + CORRECTABLE_SUFFIX
    assert quit_.explain_to_llm() == "service down\n" + UNCORRECTABLE_SUFFIX
    assert CORRECTABLE_SUFFIX == (
        "[This error may be correctable - you can retry with different parameters "
        "or try a different approach]"
    )
    assert UNCORRECTABLE_SUFFIX == (
        "[This error is not correctable - consider an alternative approach]"
    )


@pytest.mark.parametrize("cls", list(TREE), ids=lambda c: c.__name__)
def test_every_llm_readable_class_explains_itself_with_its_branch_suffix(
    cls: type[LLMReadableError],
) -> None:
    """ERR-01: every class in the tree ends its explanation with its branch's suffix line."""
    exc = SAMPLES[cls]
    assert isinstance(exc, LLMReadableError)
    head, _, last = exc.explain_to_llm().rpartition("\n")
    assert head == exc.llm_message
    assert last == (CORRECTABLE_SUFFIX if cls.correctable else UNCORRECTABLE_SUFFIX)


def test_system_error_speaks_two_languages() -> None:
    """ERR-02: NucleoSystemError tells the model only where it broke, and the log what broke."""
    cause = OSError("disk full")
    exc = NucleoSystemError("heartbeat-store", "write failed: disk full", cause)
    assert str(exc) == "System error in heartbeat-store: write failed: disk full"
    assert exc.llm_message == (
        "A system error occurred in heartbeat-store. The operation could not be completed."
    )
    assert "disk full" not in exc.llm_message
    assert exc.component == "heartbeat-store"
    assert exc.technical == "write failed: disk full"
    assert exc.__cause__ is cause


def test_the_two_branches_are_built_from_the_model_facing_text() -> None:
    """ERR-03: CorrectableError and UncorrectableError carry one text as both messages."""
    for cls in (CorrectableError, UncorrectableError):
        exc = cls("the model reads this")
        assert str(exc) == exc.llm_message == "the model reads this"


def test_a_cause_keyword_sets_dunder_cause() -> None:
    """ERR-03: the unchecked branches accept a cause and keep it."""
    root = ValueError("root")
    exc = UncorrectableError("wrapped", cause=root)
    assert exc.__cause__ is root
    assert CorrectableError("no cause").__cause__ is None


def test_an_llm_message_can_differ_from_the_technical_one() -> None:
    """ERR-02: a Nucleo error has a technical message and a separate one for the model."""
    exc = InvalidInputError("param x=-1 rejected by validator v3", llm_message="x must be >= 0")
    assert str(exc) == "param x=-1 rejected by validator v3"
    assert exc.llm_message == "x must be >= 0"


# ------------------------------------------------------------------------------------------
# Membership: the closed tree
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(TREE), ids=lambda c: c.__name__)
def test_every_class_sits_under_its_parent_in_its_branch(cls: type[LLMReadableError]) -> None:
    """ERR-04, ERR-05, ERR-06: each class sits under its semantic parent with its branch's flag."""
    parent, correctable = TREE[cls]
    assert issubclass(cls, parent)
    assert cls.correctable is correctable
    branch = CorrectableError if correctable else UncorrectableError
    other = UncorrectableError if correctable else CorrectableError
    assert issubclass(cls, branch) or cls is branch
    assert not issubclass(cls, other)
    assert isinstance(SAMPLES[cls], cls)


def test_the_tree_has_exactly_the_listed_members() -> None:
    """ERR-04, ERR-05, ERR-06: a scan of the module finds no LLM-readable class beyond the list."""
    found = {c for c in _public_classes() if issubclass(c, LLMReadableError)}
    assert found == set(TREE) | {LLMReadableError}


def test_the_unchecked_leaves_are_uncorrectable() -> None:
    """ERR-06: quota, spend cap, unknown model and provider refusal are uncorrectable leaves."""
    for cls in (QuotaExhaustedError, SpendCapExceededError, ModelNotFoundError):
        assert issubclass(cls, UncorrectableError) and not cls.correctable
    assert issubclass(ProviderRefusalError, UncorrectableError)


def test_http_classes_put_the_marker_first_and_the_meaning_second() -> None:
    """ERR-08, ERR-09: an HTTP class is an HttpErrorResponse and its semantic parent."""
    for cls in HTTP_CLASSES:
        assert cls.__mro__[1] is HttpErrorResponse
        assert cls.__mro__[2] is TREE[cls][0]


def test_the_root_cannot_be_raised_directly() -> None:
    """ERR-04: LLMReadableError is abstract; only its branches are raised."""
    with pytest.raises(TypeError, match="abstract root"):
        LLMReadableError("x")


def test_a_subclass_must_sit_in_exactly_one_branch() -> None:
    """ERR-04, ERR-05: the tree is closed; a class in both or neither branch is refused."""
    with pytest.raises(TypeError, match="exactly one"):
        type("Both", (CorrectableError, UncorrectableError), {})
    with pytest.raises(TypeError, match="exactly one"):
        type("Neither", (LLMReadableError,), {})
    with pytest.raises(TypeError, match="cannot set correctable=False"):
        type("Flipped", (GuardrailError,), {"correctable": False})

    class ToolArgumentError(InvalidInputError):
        """A user's own correctable error."""

    assert ToolArgumentError("x").correctable


def test_what_is_never_addressed_to_the_model_sits_outside_the_tree() -> None:
    """ERR-07: dependency, deadlock, model resolution and the re-run signals are not LLM-readable."""
    outside: list[type[Exception]] = [DependencyFailedError, JobDeadlockError]
    outside += [ModelResolutionError, RerunSignal, UpstreamRetry, *RERUN_SIGNALS]
    for cls in outside:
        assert issubclass(cls, Exception)
        assert not issubclass(cls, LLMReadableError)
    signals: list[type[Exception]] = [UpstreamRetry, *RERUN_SIGNALS]
    for signal in signals:
        assert issubclass(signal, RerunSignal)
    assert {c for c in _public_classes() if issubclass(c, UpstreamRetry)} == {
        UpstreamRetry,
        RateLimitRetry,
        OverloadRetry,
        TransientErrorRetry,
    }
    with pytest.raises(TypeError, match="abstract"):
        UpstreamRetry("x")
    with pytest.raises(TypeError, match="abstract"):
        RerunSignal("x")


def test_dependency_and_deadlock_errors_carry_what_they_name() -> None:
    """ERR-07: DependencyFailedError carries the dependency id; JobDeadlockError both jobs and the site."""
    root = ValueError("boom")
    dep = DependencyFailedError("fetch-7", root)
    assert dep.dependency_id == "fetch-7"
    assert dep.__cause__ is root
    assert "fetch-7" in str(dep) and "ValueError: boom" in str(dep)
    dead = JobDeadlockError("job-a", "job-b", "tools.py:12")
    assert (dead.waiting_job_id, dead.target_job_id, dead.call_site) == (
        "job-a",
        "job-b",
        "tools.py:12",
    )
    for part in ("job-a", "job-b", "tools.py:12", "deadlock"):
        assert part in str(dead)


# ------------------------------------------------------------------------------------------
# HTTP statuses
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls", "parent"),
    [
        (400, Http400Error, InvalidInputError),
        (413, Http413Error, InvalidInputError),
        (422, Http422Error, InvalidInputError),
        (401, Http401Error, UnauthorizedError),
        (403, Http403Error, UnauthorizedError),
        (404, Http404Error, ResourceNotFoundError),
        (429, Http429Error, UpstreamThrottleError),
        (500, Http500Error, ExternalServiceError),
        (502, Http502Error, ExternalServiceError),
        (503, Http503Error, ExternalServiceError),
    ],
)
def test_each_status_becomes_its_own_class_under_its_semantic_parent(
    status: int, cls: type[LLMReadableError], parent: type[LLMReadableError]
) -> None:
    """ERR-08: a mapped status becomes its own class under the parent that says what to do."""
    exc = http_error_from_status(status, service="search")
    assert type(exc) is cls
    assert isinstance(exc, parent)
    assert exc.status_code == status


@pytest.mark.parametrize("status", [302, 408, 409, 418, 451, 504, 529, 599])
def test_any_other_status_is_an_unmapped_external_failure_keeping_its_code(status: int) -> None:
    """ERR-08: any other status is an HttpUnmappedStatusError under ExternalServiceError."""
    exc = http_error_from_status(status, service="teapot")
    assert type(exc) is HttpUnmappedStatusError
    assert isinstance(exc, ExternalServiceError)
    assert exc.status_code == status
    assert not exc.correctable


def test_the_factory_composes_a_message_and_honours_a_given_one() -> None:
    """ERR-08: without a message the status, endpoint and body start are named."""
    exc = http_error_from_status(422, service="crm", endpoint="/orders", body="x" * 2000)
    assert str(exc).startswith("crm answered HTTP 422 for /orders: xxx")
    assert "more characters" in str(exc)
    assert len(str(exc)) < 700
    assert exc.response_body == "x" * 2000
    given = http_error_from_status(404, service="crm", message="order 9 does not exist")
    assert str(given) == given.llm_message == "order 9 does not exist"


@pytest.mark.parametrize(
    ("status", "error"),
    [(99, ValueError), (600, ValueError), ("404", TypeError), (True, TypeError)],
)
def test_a_status_outside_http_is_refused_by_name(status: object, error: type) -> None:
    """ERR-08: the factory refuses what is not an HTTP status, saying so."""
    with pytest.raises(error, match="status"):
        http_error_from_status(status, service="svc")  # type: ignore[arg-type]


def test_a_blank_service_is_refused() -> None:
    """ERR-09: every mapped error names its service."""
    with pytest.raises(ValueError, match="service must not be blank"):
        http_error_from_status(500, service=" ")


@pytest.mark.parametrize("cls", HTTP_CLASSES, ids=lambda c: c.__name__)
def test_every_mapped_error_carries_the_http_payload(cls: type[LLMReadableError]) -> None:
    """ERR-09: every mapped error exposes status, service, endpoint and body from HttpErrorDetail."""
    exc = SAMPLES[cls]
    assert isinstance(exc, HttpErrorResponse)
    assert exc.http_detail == HttpErrorDetail(exc.status_code, "svc", "/x", "{}")
    assert (exc.service, exc.endpoint, exc.response_body) == ("svc", "/x", "{}")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        exc.http_detail.status_code = 200  # type: ignore[misc]


def test_http_classes_build_directly_and_an_unmapped_one_needs_its_code() -> None:
    """ERR-09: the classes build without the factory; the unmapped class keeps the code it is given."""
    exc = Http429Error("slow down", service="llm", retry_after=7)
    assert (exc.status_code, exc.service, exc.endpoint, exc.response_body) == (
        429,
        "llm",
        None,
        None,
    )
    assert exc.retry_after == 7.0
    odd = HttpUnmappedStatusError("teapot", status_code=418, service="pot")
    assert odd.status_code == 418
    with pytest.raises(ValueError, match="status_code must be in 100..599"):
        HttpUnmappedStatusError("x", status_code=1000, service="pot")


def test_a_client_error_drops_retry_after_and_an_upstream_failure_keeps_it() -> None:
    """ERR-09, ERR-14: Retry-After is kept by upstream failures, where it paces the next try."""
    upstream = http_error_from_status(503, service="s", retry_after=2)
    assert isinstance(upstream, ExternalServiceError) and upstream.retry_after == 2.0
    client: object = http_error_from_status(400, service="s", retry_after=2)
    assert not hasattr(client, "retry_after")


def test_a_connection_failure_is_external_but_not_an_http_response() -> None:
    """ERR-09: a failure with no status is an ExternalServiceError that is not an HttpErrorResponse."""
    exc = ExternalServiceError("connection refused", service="search", cause=ConnectionError())
    assert not isinstance(exc, HttpErrorResponse)
    assert exc.service == "search"
    assert not exc.correctable


# ------------------------------------------------------------------------------------------
# unwrap
# ------------------------------------------------------------------------------------------


def test_unwrap_wraps_a_raw_exception_as_a_system_error() -> None:
    """ERR-10, ERR-15: an exception from outside nucleo_trio reaches the model as a NucleoSystemError."""
    raw = OSError("connection reset")
    exc = unwrap(raw)
    assert isinstance(exc, NucleoSystemError)
    assert exc.component == "unknown"
    assert exc.__cause__ is raw
    assert str(exc) == "System error in unknown: OSError: connection reset"
    assert exc.explain_to_llm().startswith("A system error occurred in unknown.")
    named = unwrap(KeyError("k"), component="catalog")
    assert isinstance(named, NucleoSystemError) and named.component == "catalog"


def test_unwrap_passes_llm_readable_errors_through_as_the_same_instance() -> None:
    """ERR-10: an LLM-readable error is returned itself, dug out of causes, contexts and groups."""
    guard = GuardrailError("no PII")
    assert unwrap(guard) is guard
    assert unwrap(_caused_by(RuntimeError("a"), _caused_by(ValueError("b"), guard))) is guard
    try:
        try:
            raise guard
        except GuardrailError:
            raise RuntimeError("sloppy wrapper")  # noqa: B904 - the implicit context is the point
    except RuntimeError as implicit:
        assert unwrap(implicit) is guard
    group = ExceptionGroup("nursery", [ValueError("x"), ExceptionGroup("inner", [guard])])
    assert unwrap(group) is guard


def test_unwrap_ignores_a_context_suppressed_with_from_none() -> None:
    """ERR-10: `raise ... from None` hides the context, so unwrap does not dig into it."""
    try:
        try:
            raise GuardrailError("hidden")
        except GuardrailError:
            raise ValueError("replacement") from None
    except ValueError as exc:
        assert isinstance(unwrap(exc), NucleoSystemError)


def test_unwrap_ends_on_a_cyclic_chain() -> None:
    """ERR-10: a chain that loops back on itself is searched once and then wrapped."""
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert isinstance(unwrap(a), NucleoSystemError)


@pytest.mark.parametrize("cls", RERUN_SIGNALS, ids=lambda c: c.__name__)
def test_unwrap_rethrows_re_run_signals_never_converts_them(cls: type[RerunSignal]) -> None:
    """ERR-10: a re-run signal in the chain is raised as the same instance, not converted."""
    signal = SAMPLES[cls]
    with pytest.raises(cls) as raised:
        unwrap(signal)
    assert raised.value is signal
    wrapper = _caused_by(RuntimeError("client failed"), signal)
    with pytest.raises(cls) as raised:
        unwrap(wrapper)
    assert raised.value is signal
    with pytest.raises(cls):
        unwrap(ExceptionGroup("nursery", [wrapper]))


def test_unwrap_returns_an_error_that_already_gave_up_on_a_signal() -> None:
    """ERR-10: the nearest meaningful link wins, so a spent retry budget is not re-run again."""
    last = TransientErrorRetry("502 again")
    spent = UncorrectableError("transparent retry budget (0) spent: 502 again", cause=last)
    assert unwrap(spent) is spent


def test_unwrap_returns_the_cancellation_signal_itself() -> None:
    """ERR-10, ST-10: unwrap of an exception caused by the cancellation signal returns that signal."""
    signal = CancellationRequested("user closed the tab")
    assert unwrap(signal) is signal
    assert unwrap(_caused_by(RuntimeError("wrapped"), signal)) is signal


def test_the_cancellation_signal_is_uncorrectable_and_names_its_reason() -> None:
    """ST-10: CancellationRequested is LLM-readable, uncorrectable, and its LLM text has the reason."""
    signal = CancellationRequested("user closed the tab")
    assert isinstance(signal, UncorrectableError)
    assert not signal.correctable
    assert signal.reason == "user closed the tab"
    assert "cancelled" in signal.llm_message and "user closed the tab" in signal.llm_message
    assert "not correctable" in signal.explain_to_llm()
    assert str(CancellationRequested()) == "Job cancelled"


async def test_unwrap_never_swallows_trio_cancellation() -> None:
    """ERR-10: a trio.Cancelled handed to unwrap is re-raised unchanged, so the scope still ends."""
    seen: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as cancelled:
            seen.append(cancelled)
            unwrap(cancelled)
        pytest.fail("unwrap returned instead of re-raising the cancellation")
    assert scope.cancelled_caught
    assert len(seen) == 1


def test_unwrap_re_raises_keyboard_interrupt() -> None:
    """ERR-10: BaseExceptions that are not Exceptions leave unwrap exactly as they came."""
    interrupt = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt) as raised:
        unwrap(interrupt)
    assert raised.value is interrupt


# ------------------------------------------------------------------------------------------
# wrap_with_context and unwrap_runtime
# ------------------------------------------------------------------------------------------


def test_a_correctable_failure_becomes_invalid_input_naming_the_parameter() -> None:
    """ERR-11, ERR-16: a 404 on a fetch comes back as InvalidInputError naming the parameter and value."""
    not_found = http_error_from_status(404, service="crm", message="no order ORD-9")
    wrapper = _caused_by(RuntimeError("client"), not_found)
    exc = wrap_with_context(wrapper, service="crm", param="order_id", value="ORD-9", step="fetch")
    assert type(exc) is InvalidInputError
    assert exc.correctable
    for part in ("order_id", "'ORD-9'", "fetch", "no order ORD-9"):
        assert part in exc.llm_message
    assert exc.__cause__ is wrapper


def test_an_uncorrectable_or_raw_failure_becomes_external_naming_service_and_step() -> None:
    """ERR-11: uncorrectable or unreadable failures become ExternalServiceError naming service and step."""
    down = http_error_from_status(503, service="crm", retry_after=4)
    exc = wrap_with_context(down, service="crm", param="order_id", value=9, step="fetch")
    assert type(exc) is ExternalServiceError
    assert exc.service == "crm" and exc.retry_after == 4.0
    assert "crm" in str(exc) and "fetch" in str(exc)
    assert exc.__cause__ is down
    raw = wrap_with_context(
        TimeoutError("read"), service="crm", param="q", value="x", step="search"
    )
    assert type(raw) is ExternalServiceError
    assert "crm failed at step 'search': TimeoutError: read" == str(raw)


def test_wrap_with_context_rethrows_retry_signals_and_keeps_cancellation() -> None:
    """ERR-11: retry signals are rethrown; a cancellation stays itself so the job ends cancelled."""
    signal = RateLimitRetry("429")
    with pytest.raises(RateLimitRetry) as raised:
        wrap_with_context(
            _caused_by(OSError(), signal), service="s", param="p", value=1, step="call"
        )
    assert raised.value is signal
    cancel = CancellationRequested("stop")
    assert wrap_with_context(cancel, service="s", param="p", value=1, step="call") is cancel


def test_wrap_with_context_refuses_blank_names() -> None:
    """ERR-11: the service, parameter and step it names must be given."""
    with pytest.raises(ValueError, match="param must not be blank"):
        wrap_with_context(OSError(), service="s", param="", value=1, step="call")


def test_unwrap_runtime_falls_back_and_does_not_rethrow_signals() -> None:
    """ERR-12: readable errors pass as-is; otherwise UncorrectableError(fallback); signals are not raised."""
    guard = GuardrailError("no")
    assert unwrap_runtime(_caused_by(ValueError(), guard), "fallback") is guard
    raw = ValueError("x")
    fell = unwrap_runtime(raw, "lookup failed")
    assert type(fell) is UncorrectableError
    assert str(fell) == "lookup failed" and fell.__cause__ is raw
    signal = OverloadRetry("529")
    from_signal = unwrap_runtime(signal, "budget spent")
    assert type(from_signal) is UncorrectableError and from_signal.__cause__ is signal


# ------------------------------------------------------------------------------------------
# Stop reasons and upstream failures
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("end_turn", LLMStopReason.END_TURN),
        ("stop", LLMStopReason.END_TURN),
        ("COMPLETED", LLMStopReason.END_TURN),
        ("max_tokens", LLMStopReason.MAX_TOKENS),
        ("length", LLMStopReason.MAX_TOKENS),
        ("stop_sequence", LLMStopReason.STOP_SEQUENCE),
        ("tool_use", LLMStopReason.TOOL_USE),
        ("tool_calls", LLMStopReason.TOOL_USE),
        ("content_filter", LLMStopReason.CONTENT_FILTERED),
        ("guardrail_intervened", LLMStopReason.CONTENT_FILTERED),
        ("refusal", LLMStopReason.CONTENT_FILTERED),
        ("Max_Tokens", LLMStopReason.MAX_TOKENS),
        ("completed", LLMStopReason.END_TURN),
        (" TOOL_CALLS ", LLMStopReason.TOOL_USE),
        (None, LLMStopReason.UNKNOWN),
        ("", LLMStopReason.UNKNOWN),
        ("pause_turn", LLMStopReason.UNKNOWN),
        (42, LLMStopReason.UNKNOWN),
    ],
)
def test_stop_reason_normalisation_table(value: object, reason: LLMStopReason) -> None:
    """ERR-13: provider stop reasons map case-insensitively; anything else is UNKNOWN, never a raise."""
    assert LLMStopReason.from_provider(value) is reason  # type: ignore[arg-type]


def test_upstream_failure_reads_the_http_error_off_the_chain() -> None:
    """ERR-14: UpstreamFailure carries the status, service, detail and Retry-After from the chain."""
    http = http_error_from_status(429, service="llm", endpoint="/v1/chat", retry_after=12)
    failure = UpstreamFailure.from_exception(_caused_by(RuntimeError("sdk"), http))
    assert failure == UpstreamFailure(status=429, service="llm", detail=str(http), retry_after=12.0)


def test_upstream_failure_from_a_connection_failure_has_no_status() -> None:
    """ERR-14: an ExternalServiceError without a status gives its service and no status."""
    failure = UpstreamFailure.from_exception(ExternalServiceError("refused", service="db"))
    assert (failure.status, failure.service, failure.detail) == (None, "db", "refused")


def test_upstream_failure_prefers_a_signals_own_failure() -> None:
    """ERR-14: a signal that carries its UpstreamFailure answers with it."""
    own = UpstreamFailure(status=529, service="llm", detail="overloaded", retry_after=30)
    answer = UpstreamFailure.from_exception(OverloadRetry("529", failure=own))
    assert (answer.status, answer.service, answer.detail, answer.retry_after) == (
        529,
        "llm",
        "overloaded",
        30,
    )
    assert answer.backpressure == 3  # weighted by the signal it rode on (TB-16)


def test_upstream_failure_counts_its_signals_push_back() -> None:
    """ERR-14, TB-16: a 429 counts 1, an overload 3, a transient error 0; a plain upstream error 1."""
    assert UpstreamFailure.from_exception(RateLimitRetry("429")).backpressure == 1
    assert UpstreamFailure.from_exception(OverloadRetry("529")).backpressure == 3
    http = http_error_from_status(503, service="llm")
    assert UpstreamFailure.from_exception(TransientErrorRetry("503", cause=http)).backpressure == 0
    assert UpstreamFailure.from_exception(http).backpressure == 1


def test_upstream_failure_from_a_bare_signal_looks_below_it_then_at_it() -> None:
    """ERR-14: a signal without a failure lends its Retry-After to the HTTP error below it."""
    http = http_error_from_status(502, service="llm")
    below = UpstreamFailure.from_exception(TransientErrorRetry("502", retry_after=5, cause=http))
    assert (below.status, below.service, below.retry_after) == (502, "llm", 5.0)
    bare = UpstreamFailure.from_exception(RateLimitRetry("over rate", retry_after=9))
    assert (bare.status, bare.detail, bare.retry_after) == (None, "over rate", 9.0)


def test_upstream_failure_always_exists() -> None:
    """ERR-14: with nothing upstream in the chain the failure still describes the exception."""
    failure = UpstreamFailure.from_exception(ValueError("odd"))
    assert failure == UpstreamFailure(status=None, service=None, detail="ValueError: odd")


def test_upstream_failure_refuses_a_negative_retry_after() -> None:
    """ERR-14: Retry-After is a number of seconds, never negative."""
    with pytest.raises(ValueError, match="retry_after"):
        UpstreamFailure(status=429, service="s", detail="d", retry_after=-1)


# ------------------------------------------------------------------------------------------
# Logging
# ------------------------------------------------------------------------------------------


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # only to give the exception a traceback to log
        return caught


@pytest.mark.parametrize(
    "exc",
    [
        GuardrailError("no PII"),
        Http404Error("gone", service="s"),
        Http503Error("down", service="s"),
        NucleoSystemError("db", "closed"),
        ValueError("outside"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_failure_is_one_line_at_warning_and_its_traceback_at_debug(
    caplog: pytest.LogCaptureFixture, exc: BaseException
) -> None:
    """ERR-15: whatever its kind, a failure is one WARNING line ``<job> failed: <Class>: <msg>``
    without a trace; the traceback is a second record, at DEBUG, only when DEBUG is on."""
    logger = logging.getLogger("test_errors.log_failure")
    raised = _raised(exc)
    with caplog.at_level(logging.INFO, logger=logger.name):
        log_failure(logger, raised, job="Fetch-7df1")
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == f"Fetch-7df1 failed: {type(exc).__name__}: {exc}"
    assert "Traceback" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        log_failure(logger, raised, job="Fetch-7df1")
    warning, trace = caplog.records
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert trace.levelno == logging.DEBUG and trace.exc_info is not None
    assert trace.exc_info[1] is raised
    assert "Traceback" in caplog.text and "_raised" in caplog.text


def test_a_failure_logged_outside_a_job_names_no_job(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test_errors.log_failure")
    with caplog.at_level(logging.WARNING, logger=logger.name):
        log_failure(logger, ValueError("no such page"))
    assert [r.getMessage() for r in caplog.records] == ["a job failed: ValueError: no such page"]


async def test_the_dispatcher_logs_a_failing_job_as_one_line_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With logging's defaults (WARNING), a failing job is one line naming the job; the
    traceback joins it at DEBUG."""
    from nucleo_trio import JobContext, Tool, open_dispatcher, workflow

    class Broken(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            raise LookupError("no such page")

    for level, records in ((logging.WARNING, 1), (logging.DEBUG, 2)):
        caplog.clear()
        with caplog.at_level(level, logger="nucleo_trio.dispatcher"):
            async with open_dispatcher() as dispatcher:
                job = Broken(workflow("alice", "pages"))
                with pytest.raises(LookupError):
                    await dispatcher.submit(job).result()
        mine = [r for r in caplog.records if job.name in r.getMessage()]
        assert len(mine) == records
        assert mine[0].getMessage() == f"{job.name} failed: LookupError: no such page"
        assert mine[0].levelno == logging.WARNING and mine[0].exc_info is None


# ------------------------------------------------------------------------------------------
# Specific errors
# ------------------------------------------------------------------------------------------


def test_not_found_is_correctable() -> None:
    """ERR-16: a fetch by id that finds nothing is ResourceNotFoundError, which the model can correct."""
    exc = http_error_from_status(404, service="crm", endpoint="/orders/9")
    assert isinstance(exc, ResourceNotFoundError)
    assert "may be correctable" in exc.explain_to_llm()


def test_json_parse_error_tells_the_shape_and_the_reason() -> None:
    """ERR-17: JsonParseError tells the model the expected shape and the parser's reason."""
    exc = JsonParseError("Expecting ',' delimiter: line 1 column 9", '{"verdict": "yes" | "no"}')
    assert exc.correctable
    assert "Expecting ',' delimiter" in exc.llm_message
    assert '{"verdict": "yes" | "no"}' in exc.llm_message
    assert (exc.reason, exc.expected_shape) == (
        "Expecting ',' delimiter: line 1 column 9",
        '{"verdict": "yes" | "no"}',
    )


def test_response_validation_lists_every_failed_field_one_per_line() -> None:
    """ERR-17: ResponseValidationError lists every failed field on its own line; it is correctable."""
    exc = ResponseValidationError(
        {"verdict": "is required but empty", "best": "unknown artifact reference"}
    )
    assert exc.correctable
    lines = exc.llm_message.splitlines()
    assert "- verdict: is required but empty" in lines
    assert "- best: unknown artifact reference" in lines
    assert exc.fields == ("verdict", "best")
    assert "verdict" in exc.explain_to_llm()


def test_response_validation_refuses_nothing_to_report() -> None:
    """ERR-17: a validation error names at least one field."""
    with pytest.raises(ValueError, match="failures is empty"):
        ResponseValidationError({})
    with pytest.raises(TypeError, match="failures must map"):
        ResponseValidationError(["verdict"])  # type: ignore[arg-type]


def test_quota_exhaustion_is_a_final_answer_not_a_retry() -> None:
    """ERR-19: QuotaExhaustedError is never retried: not a signal, not a throttle, passed through."""
    quota = QuotaExhaustedError("monthly quota spent")
    assert not isinstance(quota, RerunSignal | ExternalServiceError)
    assert unwrap(quota) is quota
    assert unwrap_runtime(quota, "x") is quota


def test_token_estimate_error_carries_the_estimate_the_limit_and_the_overflow() -> None:
    """ERR-19: the estimate, the limit and the overflow as an amount and a ratio."""
    exc = TokenEstimateExceedsLimitError(150_000, 100_000, model="m-small")
    assert (exc.estimate, exc.limit, exc.overflow, exc.ratio) == (150_000, 100_000, 50_000, 1.5)
    for part in ("150000", "100000", "50000", "1.50x", "m-small"):
        assert part in str(exc)
    assert not exc.correctable
    with pytest.raises(ValueError, match="does not exceed"):
        TokenEstimateExceedsLimitError(10, 10)
    with pytest.raises(ValueError, match="limit must be > 0"):
        TokenEstimateExceedsLimitError(10, 0)


def test_model_resolution_error_is_not_readable_and_not_correctable() -> None:
    """ERR-19: ModelResolutionError is outside the tree and not correctable."""
    exc = ModelResolutionError("nothing serves FAST or above: supply FAKE_LLM_KEY", grade="FAST")
    assert not isinstance(exc, LLMReadableError | CorrectableError)
    assert exc.grade == "FAST"
    assert "FAST or above" in str(exc)
    assert isinstance(unwrap(exc), NucleoSystemError)


def test_termination_errors_are_uncorrectable_and_guardrails_correctable() -> None:
    """ERR-20, TMO-03: timeout and cancellation explain themselves as not correctable; a guardrail is correctable."""
    cause = ValueError("casualty")
    timeout = JobTimeoutError(1.5, cause)
    assert "time budget" in timeout.llm_message
    assert "not correctable" in timeout.explain_to_llm()
    assert timeout.timeout_seconds == 1.5 and timeout.__cause__ is cause
    cancelled = JobCancelledError(cause=CancellationRequested("user"))
    assert "cancelled" in cancelled.llm_message
    assert "not correctable" in cancelled.explain_to_llm()
    assert not timeout.correctable and not cancelled.correctable
    guard = GuardrailError("no PII")
    assert guard.correctable
    assert guard.llm_message.startswith("Guardrail violation: ")


def test_job_cancelled_error_names_why() -> None:
    """TMO-03: a cancellation says so, with the canceller's reason or the queue's message."""
    queued = JobCancelledError("Cancelled while queued")
    assert str(queued) == "Cancelled while queued"
    assert "cancelled" in queued.llm_message and "Cancelled while queued" in queued.llm_message
    signal = CancellationRequested("user left")
    from_signal = JobCancelledError(cause=signal)
    assert str(from_signal) == "Job cancelled: user left"
    assert from_signal.__cause__ is signal
    assert str(JobCancelledError()) == "Job cancelled"


def test_job_timeout_error_refuses_a_budget_that_is_not_positive() -> None:
    """TMO-03: a timeout names the positive budget the job exceeded."""
    with pytest.raises(ValueError, match="timeout_seconds must be > 0"):
        JobTimeoutError(0)
    with pytest.raises(TypeError, match="timeout_seconds must be a number"):
        JobTimeoutError("30")  # type: ignore[arg-type]


def test_a_guardrail_refusal_speaks_to_the_model_as_a_violation() -> None:
    """GRD-10, ERR-20: raw text as message, prefixed text for the model, may be correctable, cause kept."""
    cause = KeyError("tenant")
    exc = GuardrailError("Scope mismatch", cause=cause)
    assert str(exc) == "Scope mismatch"
    assert exc.llm_message == "Guardrail violation: Scope mismatch"
    assert "may be correctable" in exc.explain_to_llm()
    assert exc.__cause__ is cause


# ------------------------------------------------------------------------------------------
# Re-run signals and pacing
# ------------------------------------------------------------------------------------------


def test_windows_and_throttle_increments() -> None:
    """SIG-05: RateLimit 5-30 s +1, Overload 15-90 s +3, TransientError 5-30 s +0."""
    assert (RateLimitRetry.jitter_window, RateLimitRetry.backpressure_increment) == ((5, 30), 1)
    assert (OverloadRetry.jitter_window, OverloadRetry.backpressure_increment) == ((15, 90), 3)
    assert (TransientErrorRetry.jitter_window, TransientErrorRetry.backpressure_increment) == (
        (5, 30),
        0,
    )


class _EdgeRng(random.Random):
    """Answers one edge of the window it is asked for, and records the window."""

    def __init__(self, edge: int) -> None:
        super().__init__(0)
        self.edge = edge
        self.windows: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.windows.append((a, b))
        return (a, b)[self.edge]


@pytest.mark.parametrize("cls", [RateLimitRetry, OverloadRetry, TransientErrorRetry])
@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 9, 10, 11, 50])
def test_pacing_scales_both_edges_by_the_attempt_at_most_tenfold_and_caps_at_300(
    cls: type[UpstreamRetry], attempt: int
) -> None:
    """SIG-05: both window edges times min(attempt, 10), the wait never past 300 s."""
    low, high = cls.jitter_window
    scale = min(attempt, 10)
    for edge, expected in ((0, low * scale), (1, high * scale)):
        rng = _EdgeRng(edge)
        assert cls.pacing_delay(attempt, rng) == min(expected, 300.0)
        assert rng.windows == [(low * scale, high * scale)]


def test_the_smallest_possible_wait_is_five_seconds() -> None:
    """SIG-05: the jitter floor over every kind and attempt is 5 s, reached at attempt 1."""
    floors = [
        cls.pacing_delay(attempt, _EdgeRng(0))
        for cls in (RateLimitRetry, OverloadRetry, TransientErrorRetry)
        for attempt in range(1, 13)
    ]
    assert min(floors) == 5.0


def test_seeded_draws_stay_in_the_scaled_window() -> None:
    """SIG-05: real draws fall inside the scaled window and never exceed 300 s."""
    rng = random.Random(20240601)
    for cls in (RateLimitRetry, OverloadRetry, TransientErrorRetry):
        low, high = cls.jitter_window
        for attempt in (1, 2, 4, 10, 12):
            scale = min(attempt, 10)
            draws = [cls.pacing_delay(attempt, rng) for _ in range(300)]
            assert all(low * scale <= d <= min(high * scale, 300.0) for d in draws)
            assert max(draws) - min(draws) > 0  # jitter, not a constant
    assert RateLimitRetry.pacing_delay(1) <= 30.0  # the default generator works too


def test_pacing_is_reproducible_with_a_seed() -> None:
    """SIG-05: the same seed gives the same waits, so a test can pin them."""
    first = [OverloadRetry.pacing_delay(a, random.Random(7)) for a in range(1, 5)]
    again = [OverloadRetry.pacing_delay(a, random.Random(7)) for a in range(1, 5)]
    assert first == again


@pytest.mark.parametrize(
    ("attempt", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError)]
)
def test_pacing_refuses_an_attempt_that_is_not_a_count(attempt: object, error: type) -> None:
    """SIG-05: attempts count from 1."""
    with pytest.raises(error, match="attempt"):
        RateLimitRetry.pacing_delay(attempt)  # type: ignore[arg-type]


def test_pacing_needs_a_kind() -> None:
    """SIG-05: the window belongs to the kind of signal, so the base class has none."""
    with pytest.raises(TypeError, match="depends on the kind"):
        UpstreamRetry.pacing_delay(1)


def test_signals_carry_what_the_dispatcher_needs() -> None:
    """The re-run signals keep their message, Retry-After, failure, budgets and feedback."""
    failure = UpstreamFailure(status=429, service="llm", detail="slow", retry_after=3)
    rate = RateLimitRetry("slow down", retry_after=3, failure=failure, cause=OSError())
    assert (str(rate), rate.retry_after, rate.failure) == ("slow down", 3.0, failure)
    assert isinstance(rate.__cause__, OSError)
    cut = OutputTruncationRetry("cut at 16000", "m1", 64000, previous_max_tokens=16000)
    assert (cut.model, cut.escalated_max_tokens, cut.previous_max_tokens) == ("m1", 64000, 16000)
    fix = ResponseCorrectionRetry("missing verdict", "add a verdict", model="m1", attempt=2)
    assert (fix.feedback, fix.model, fix.attempt) == ("add a verdict", "m1", 2)
    with pytest.raises(ValueError, match="escalated_max_tokens"):
        OutputTruncationRetry("x", escalated_max_tokens=0)
    with pytest.raises(ValueError, match="retry_after"):
        TransientErrorRetry("x", retry_after=float("inf"))
    with pytest.raises(TypeError, match="failure must be an UpstreamFailure"):
        RateLimitRetry("x", failure="429")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Fatal crashes
# ------------------------------------------------------------------------------------------


class _Crash(BaseException):
    """A BaseException no job is written to handle."""


async def test_fatal_crashes_are_what_a_job_cannot_handle() -> None:
    """A job's MemoryError, RecursionError or foreign BaseException is fatal; control flow is not."""
    assert is_fatal_crash(MemoryError())
    assert is_fatal_crash(RecursionError())
    assert is_fatal_crash(_Crash())
    assert is_fatal_crash(BaseExceptionGroup("g", [ValueError(), _Crash()]))
    assert is_fatal_crash(ExceptionGroup("g", [MemoryError()]))
    for calm in (ValueError(), GuardrailError("x"), KeyboardInterrupt(), SystemExit(0)):
        assert not is_fatal_crash(calm)
    assert not is_fatal_crash(GeneratorExit())
    assert not is_fatal_crash(BaseExceptionGroup("g", [ValueError(), KeyboardInterrupt()]))
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as cancelled:
            assert not is_fatal_crash(cancelled)
            assert not is_fatal_crash(BaseExceptionGroup("g", [cancelled]))
            raise
    assert scope.cancelled_caught


# ------------------------------------------------------------------------------------------
# Every class: bad input, pickling, docstrings, exports
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_every_error_survives_a_pickle_round_trip(cls: type[BaseException]) -> None:
    """Errors cross process boundaries intact: type, message, LLM text and attributes."""
    original = SAMPLES[cls]
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is cls
    assert str(copy) == str(original)
    assert copy.args == original.args
    assert vars(copy) == vars(original)
    if isinstance(original, LLMReadableError):
        assert isinstance(copy, LLMReadableError)
        assert copy.explain_to_llm() == original.explain_to_llm()


@pytest.mark.parametrize(
    ("cls", "args", "kwargs", "error", "fragment"),
    [
        (CorrectableError, (42,), {}, TypeError, "message must be a str"),
        (UncorrectableError, ("x",), {"cause": "oops"}, TypeError, "cause must be an exception"),
        (NucleoSystemError, ("", "x"), {}, ValueError, "component must not be blank"),
        (JsonParseError, ("r", " "), {}, ValueError, "expected_shape must not be blank"),
        (DependencyFailedError, ("d", "boom"), {}, TypeError, "cause must be an exception"),
        (JobDeadlockError, ("a", "", "x.py:1"), {}, ValueError, "target_job_id"),
        (ExternalServiceError, ("x",), {"retry_after": -2}, ValueError, "retry_after"),
        (ResponseCorrectionRetry, ("x",), {"attempt": 0}, ValueError, "attempt"),
        (TokenEstimateExceedsLimitError, (5.0, 1), {}, TypeError, "estimate must be an int"),
        (ModelResolutionError, (None,), {}, TypeError, "message must be a str"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) and issubclass(v, BaseException) else None,
)
def test_bad_input_is_refused_naming_what_is_wrong(
    cls: Callable[..., BaseException],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    fragment: str,
) -> None:
    """Every constructor names the argument it refuses."""
    with pytest.raises(error, match=fragment):
        cls(*args, **kwargs)


def test_every_public_class_has_a_one_line_docstring_and_is_exported() -> None:
    """Each class says in one line when it is raised, and the module exports every public name."""
    for cls in _public_classes():
        doc = cls.__doc__ or ""
        assert doc.strip(), cls
        if issubclass(cls, BaseException):
            assert "\n" not in doc.strip(), cls
    exported = set(errors.__all__)
    assert {c.__name__ for c in _public_classes()} <= exported
    assert all(hasattr(errors, name) for name in exported)
