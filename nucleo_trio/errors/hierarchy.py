"""The LLM-readable tree (its two branches and their kinds), and the failures outside it that
are never addressed to a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._checks import (
    CORRECTABLE_SUFFIX,
    UNCORRECTABLE_SUFFIX,
    _describe,
    _reduce_by_state,
    _require_cause,
    _require_name,
    _require_optional_str,
    _require_seconds,
    _require_str,
)


class LLMReadableError(Exception):
    """Base of every failure a model may read; raise one of its two branches, never this class."""

    # Set by the two branches; every other class inherits its branch's value unchanged.
    correctable: ClassVar[bool]
    """``True`` under :class:`CorrectableError`, ``False`` under :class:`UncorrectableError`.

    A subclass cannot change it: a class that sets the other value is refused when it is defined.
    """

    __reduce__ = _reduce_by_state

    def __init__(
        self,
        message: str,
        *,
        llm_message: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """Build the error from its technical message.

        ``llm_message`` is the text for the model when it should differ from the technical one
        (it defaults to ``message``); ``cause`` becomes ``__cause__``, as ``raise ... from cause``
        would set it.
        """
        owner = type(self).__name__
        if type(self) is LLMReadableError:
            raise TypeError(
                "LLMReadableError is the abstract root: raise CorrectableError, "
                "UncorrectableError or one of their subclasses"
            )
        _require_str("message", message, owner=owner)
        _require_optional_str("llm_message", llm_message, owner=owner)
        _require_cause(cause, owner=owner)
        super().__init__(message)
        self._llm_message = message if llm_message is None else llm_message
        if cause is not None:
            self.__cause__ = cause

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_is_branch" in cls.__dict__:
            return
        branches = [
            c for c in cls.__mro__ if "_is_branch" in c.__dict__ and issubclass(c, LLMReadableError)
        ]
        if len(branches) != 1:
            raise TypeError(
                f"{cls.__qualname__} must extend exactly one of CorrectableError and "
                f"UncorrectableError (it extends {len(branches)})"
            )
        if cls.correctable is not branches[0].correctable:
            raise TypeError(
                f"{cls.__qualname__} cannot set correctable={cls.correctable}: "
                f"it sits under {branches[0].__name__}"
            )

    @property
    def llm_message(self) -> str:
        """The text a model reads when this error is the result of its tool call."""
        return self._llm_message

    def explain_to_llm(self) -> str:
        """The model-facing message followed by one line saying whether a retry can help."""
        suffix = CORRECTABLE_SUFFIX if self.correctable else UNCORRECTABLE_SUFFIX
        return f"{self.llm_message}\n{suffix}"


class CorrectableError(LLMReadableError):
    """Raised when the model caused the failure and can fix it by changing what it asked for."""

    _is_branch: ClassVar[bool] = True
    correctable: ClassVar[bool] = True


class UncorrectableError(LLMReadableError):
    """Raised when nothing the model changes in its request can make the operation succeed."""

    _is_branch: ClassVar[bool] = True
    correctable: ClassVar[bool] = False


# ---- correctable branch ------------------------------------------------------------------------


class InvalidInputError(CorrectableError):
    """Raised when a tool argument or request is malformed, out of range or refused as invalid."""


class ResourceNotFoundError(CorrectableError):
    """Raised when a fetch by id finds nothing (an empty search is a valid answer, not this)."""


class GuardrailError(CorrectableError):
    """Raised when a guardrail refuses an input, an output or a submission."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        """``message`` is the refusal itself; the model reads it after "Guardrail violation: "."""
        _require_str("message", message, owner=type(self).__name__)
        super().__init__(message, llm_message=f"Guardrail violation: {message}", cause=cause)


class JsonParseError(CorrectableError):
    """Raised when a model's reply cannot be parsed as the JSON the caller expects."""

    def __init__(
        self, reason: str, expected_shape: str, *, cause: BaseException | None = None
    ) -> None:
        """``reason`` is the parser's complaint; ``expected_shape`` describes the JSON wanted."""
        owner = type(self).__name__
        self.reason = _require_str("reason", reason, owner=owner)
        """The parser's complaint, as given; it appears in both messages."""
        self.expected_shape = _require_name("expected_shape", expected_shape, owner=owner)
        """A description of the JSON wanted, shown to the model so its next reply can match."""
        super().__init__(
            f"Reply is not valid JSON: {reason}",
            llm_message=(
                f"Your reply could not be parsed as JSON ({reason}). "
                f"Reply with JSON of this shape:\n{expected_shape}"
            ),
            cause=cause,
        )


class ResponseValidationError(CorrectableError):
    """Raised when a parsed reply still leaves required fields empty or invalid."""

    def __init__(self, failures: Mapping[str, str], *, cause: BaseException | None = None) -> None:
        """``failures`` maps each failed field (a name or a path) to what is wrong with it.

        The message lists every field on its own line, so a model fixes them all in one go
        instead of one per correction round.
        """
        owner = type(self).__name__
        if not isinstance(failures, Mapping):
            raise TypeError(
                f"{owner}: failures must map field -> problem, got {type(failures).__name__}"
            )
        if not failures:
            raise ValueError(f"{owner}: failures is empty; a reply with no failed field is valid")
        for field, problem in failures.items():
            _require_name("field name", field, owner=owner)
            _require_str(f"problem of field {field!r}", problem, owner=owner)
        # A tuple, not a dict: the error is a value once raised, and a shared dict could change.
        self.failures: tuple[tuple[str, str], ...] = tuple(failures.items())
        """Each failed field with what is wrong with it, as ``(field, problem)`` pairs in the
        order given."""
        lines = "\n".join(f"- {field}: {problem}" for field, problem in self.failures)
        super().__init__(
            f"The reply failed validation on {len(self.failures)} field(s):\n{lines}",
            cause=cause,
        )

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the failed fields, in the order given."""
        return tuple(field for field, _ in self.failures)


# ---- uncorrectable branch ------------------------------------------------------------------


class ExternalServiceError(UncorrectableError):
    """Raised when a service the job depends on fails or cannot be reached."""

    def __init__(
        self,
        message: str,
        *,
        service: str | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``service`` names the upstream; ``retry_after`` is its Retry-After, in seconds."""
        owner = type(self).__name__
        self._service = _require_optional_str("service", service, owner=owner)
        self.retry_after = _require_seconds("retry_after", retry_after, owner=owner)
        """Seconds the upstream asked the caller to wait (its Retry-After) as a float, or
        ``None`` when it named no delay."""
        super().__init__(message, cause=cause)

    @property
    def service(self) -> str | None:
        """The upstream service that failed, when the raiser said."""
        return self._service


class UpstreamThrottleError(ExternalServiceError):
    """Raised when an upstream refuses the call because the caller is over its rate."""


class UnauthorizedError(UncorrectableError):
    """Raised when an upstream refuses the caller's credentials."""


class PermissionDeniedError(UncorrectableError):
    """Raised when the caller is known but not allowed to perform the operation."""


class NucleoSystemError(UncorrectableError):
    """Raised when the runtime itself fails, or a failure from outside nucleo_trio must reach a model."""

    def __init__(self, component: str, technical: str, cause: BaseException | None = None) -> None:
        """``component`` names where it broke; ``technical`` is the detail, kept from the model."""
        owner = type(self).__name__
        self.component = _require_name("component", component, owner=owner)
        """Where the failure happened (a subsystem's name); the model's text names it too."""
        self.technical = _require_str("technical", technical, owner=owner)
        """The technical detail: part of ``str(e)``, never of :attr:`llm_message`."""
        super().__init__(
            f"System error in {component}: {technical}",
            llm_message=(
                f"A system error occurred in {component}. The operation could not be completed."
            ),
            cause=cause,
        )


class UsageError(NucleoSystemError):
    """Raised when the program around the runtime uses it wrongly; the message says what to write instead."""

    def __init__(self, component: str, problem: str, fix: str) -> None:
        """``problem`` is what is wrong, ``fix`` what to change; the message is both.

        Never a fault of the runtime itself. As a :class:`NucleoSystemError` it is still caught
        by an ``except`` written for the runtime's refusals, and a model that meets it reads the
        same "system error" text (the fix is the program's, not the model's). Where the runtime
        raised a built-in error for the same mistake, a subclass that is also that built-in is
        raised (:class:`UsageRuntimeError`, :class:`UsageTypeError`, :class:`UsageValueError`),
        so ``except RuntimeError`` / ``TypeError`` / ``ValueError`` match as before.
        """
        owner = type(self).__name__
        self.problem = _require_str("problem", problem, owner=owner)
        """What the calling program did wrong."""
        self.fix = _require_str("fix", fix, owner=owner)
        """What to change in the calling program instead."""
        super().__init__(component, f"{problem}; {fix}")
        self.args = (f"{problem}; {fix}",)
        """One item, ``"problem; fix"``: ``str(e)`` is the mistake and its fix, without the
        "System error in ..." prefix of other :class:`NucleoSystemError` messages."""


class UsageRuntimeError(UsageError, RuntimeError):
    """Raised for a call made at the wrong moment (a submission before the start or after the stop)."""


class UsageTypeError(UsageError, TypeError):
    """Raised for a value of the wrong type, such as a limiter's name where the limiter is wanted."""


class UsageValueError(UsageError, ValueError):
    """Raised for a value of the right type that the runtime cannot take."""


class UsageKeyError(UsageError, KeyError):
    """Raised for a name the runtime holds nothing under; it lists the names there are."""

    def __str__(self) -> str:
        """The message itself, not the quoted key a plain :class:`KeyError` shows."""
        return str(self.args[0])


class JobCancelledError(UncorrectableError):
    """Raised to a job's caller when the job was cancelled before it finished."""

    def __init__(self, message: str | None = None, *, cause: BaseException | None = None) -> None:
        """``message`` says why (e.g. "Cancelled while queued"); it defaults to the cause's reason."""
        owner = type(self).__name__
        _require_optional_str("message", message, owner=owner)
        reason = message
        if reason is None and isinstance(cause, CancellationRequested):
            reason = cause.reason
        super().__init__(
            message or (f"Job cancelled: {reason}" if reason else "Job cancelled"),
            llm_message=(
                f"The job was cancelled before it finished: {reason}"
                if reason
                else "The job was cancelled before it finished."
            ),
            cause=cause,
        )


class CancellationRequested(UncorrectableError):
    """Raised inside a job by ``check_cancellation()`` once the job has been asked to stop."""

    def __init__(self, reason: str | None = None, *, cause: BaseException | None = None) -> None:
        """``reason`` is the canceller's own words, passed on to the log and the model."""
        owner = type(self).__name__
        self.reason = _require_optional_str("reason", reason, owner=owner)
        """Why the job was asked to stop, in the canceller's words, or ``None`` when it gave
        no reason."""
        super().__init__(
            f"Job cancelled: {reason}" if reason else "Job cancelled",
            llm_message=(
                f"The job was cancelled: {reason}" if reason else "The job was cancelled."
            ),
            cause=cause,
        )


class JobTimeoutError(UncorrectableError):
    """Raised to a job's caller when the job ran past its timeout and was stopped."""

    def __init__(self, timeout_seconds: float, cause: BaseException | None = None) -> None:
        """``timeout_seconds`` is the budget the job exceeded; ``cause`` is its own casualty."""
        owner = type(self).__name__
        seconds = _require_seconds("timeout_seconds", timeout_seconds, owner=owner)
        if not seconds:
            raise ValueError(f"{owner}: timeout_seconds must be > 0, got {timeout_seconds!r}")
        self.timeout_seconds = seconds
        """The timeout the job ran past, in seconds, as a float (always more than 0)."""
        super().__init__(
            f"Job timed out after {seconds:g} s",
            llm_message=(
                f"The job exceeded its time budget of {seconds:g} seconds and was stopped."
            ),
            cause=cause,
        )


class TokenEstimateExceedsLimitError(UncorrectableError):
    """Raised before a model call whose estimated prompt would not fit the model's context."""

    def __init__(
        self,
        estimate: int,
        limit: int,
        *,
        model: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        """``estimate`` and ``limit`` are token counts; ``model`` names whose limit it is."""
        owner = type(self).__name__
        for name, value in (("estimate", estimate), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__}")
        if limit <= 0:
            raise ValueError(f"{owner}: limit must be > 0, got {limit}")
        if estimate <= limit:
            raise ValueError(f"{owner}: estimate {estimate} does not exceed the limit {limit}")
        self.estimate = estimate
        """The estimated size of the prompt, in tokens; always more than :attr:`limit`."""
        self.limit = limit
        """The most tokens the model's context takes (more than 0)."""
        self.model = _require_optional_str("model", model, owner=owner)
        """The model whose limit it is, or ``None`` when the raiser did not say."""
        where = f" of {model}" if model else ""
        super().__init__(
            f"Token estimate {estimate} exceeds the limit{where} of {limit} by "
            f"{self.overflow} tokens ({self.ratio:.2f}x the limit)",
            cause=cause,
        )

    @property
    def overflow(self) -> int:
        """How many tokens too many: ``estimate - limit``."""
        return self.estimate - self.limit

    @property
    def ratio(self) -> float:
        """``estimate / limit``: compacting the prompt by this factor would just fit."""
        return self.estimate / self.limit


class ContextOverflowError(UncorrectableError):
    """Raised when a prompt still exceeds the model's context after compaction."""


class PromptNotFoundError(UncorrectableError):
    """Raised when a named prompt template does not exist."""


class QuotaExhaustedError(UncorrectableError):
    """Raised when a provider quota is spent; it is never retried, since waiting does not refill it."""


class SpendCapExceededError(UncorrectableError):
    """Raised by a spend gate when new work would push a workflow past its spending cap."""


class ModelNotFoundError(UncorrectableError):
    """Raised when a model id is not in the catalog."""


class ProviderRefusalError(UncorrectableError):
    """Raised when a model provider refuses to serve the request."""


# --------------------------------------------------------------------------------------------
# Outside the tree: never addressed to a model
# --------------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """Raised when a configuration is malformed; the message names every bad key and value."""


class DependencyFailedError(Exception):
    """Raised to a job that did not run because a job it depends on failed."""

    __reduce__ = _reduce_by_state

    def __init__(self, dependency_id: str, cause: BaseException) -> None:
        """``dependency_id`` names the failed dependency; ``cause`` is its failure."""
        owner = type(self).__name__
        self.dependency_id = _require_name("dependency_id", dependency_id, owner=owner)
        """The id of the job that failed; its failure is ``__cause__``."""
        if not isinstance(cause, BaseException):
            raise TypeError(f"{owner}: cause must be an exception, got {type(cause).__name__}")
        super().__init__(f"Dependency {dependency_id} failed: {_describe(cause)}")
        self.__cause__ = cause


class JobDeadlockError(Exception):
    """Raised when a job holding resources waits on another job's result."""

    __reduce__ = _reduce_by_state

    def __init__(self, waiting_job_id: str, target_job_id: str, call_site: str) -> None:
        """Names the job that waited, the job it waited on, and where in the code it waited."""
        owner = type(self).__name__
        self.waiting_job_id = _require_name("waiting_job_id", waiting_job_id, owner=owner)
        """The id of the job that waited while holding resources."""
        self.target_job_id = _require_name("target_job_id", target_job_id, owner=owner)
        """The id of the job whose result it waited on."""
        self.call_site = _require_name("call_site", call_site, owner=owner)
        """Where in the code the wait was made, as ``"file:line in function"``."""
        super().__init__(
            f"Job {waiting_job_id} waits on job {target_job_id} at {call_site} while holding "
            f"resources: a job holding resources must not block on another job, since the "
            f"job it waits on may need those resources to run (deadlock)"
        )


class ModelResolutionError(Exception):
    """Raised when no model in the catalog can serve a grade (a configuration fault, not correctable)."""

    __reduce__ = _reduce_by_state

    def __init__(self, message: str, *, grade: str | None = None) -> None:
        """``message`` names the grade and what is missing; ``grade`` is kept for code."""
        owner = type(self).__name__
        _require_str("message", message, owner=owner)
        self.grade = _require_optional_str("grade", grade, owner=owner)
        """The grade no model could serve (its string value), or ``None`` when not given."""
        super().__init__(message)
