"""Translation at the boundary: digging the readable failure out of a chain or a group,
re-framing a failure, suppressed riders, and the one-line failure log."""

from __future__ import annotations

import logging
from typing import Any

import trio

from ._checks import _describe, _preview, _require_name, _require_str, _walk_chain
from .hierarchy import (
    CancellationRequested,
    ExternalServiceError,
    InvalidInputError,
    LLMReadableError,
    NucleoSystemError,
    UncorrectableError,
)
from .signals import RerunSignal


def _propagate_non_exceptions(exc: BaseException) -> None:
    # trio.Cancelled, KeyboardInterrupt and friends are not failures to translate: converting one
    # would swallow a cancellation. They leave exactly as they came.
    if not isinstance(exc, Exception):
        raise exc


def unwrap(exc: BaseException, *, component: str = "unknown") -> LLMReadableError:
    """The LLM-readable failure inside ``exc``, for a catch-all that must answer a model.

    The chain (causes, contexts, group members) is searched nearest first, and the first
    LLM-readable error or re-run signal found decides:

    * an LLM-readable error is returned as the same instance (a :class:`CancellationRequested`
      included, so a cancellation survives the catch-all and the job still ends cancelled);
    * a re-run signal is raised, never converted, so it still reaches the dispatcher;
    * with neither, the result is a :class:`NucleoSystemError` of ``component`` with ``exc`` as
      its cause: the model learns something failed, the log keeps what.

    Nearest first matters when both occur: an error that already gave up on a signal (a spent
    retry budget whose cause is the last signal) is returned, not turned back into a re-run.
    An ``exc`` that is not an ``Exception`` (``trio.Cancelled``, ``KeyboardInterrupt``) is
    re-raised unchanged.
    """
    _propagate_non_exceptions(exc)
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            return link
        if isinstance(link, RerunSignal):
            raise link
    return NucleoSystemError(component, _describe(exc), exc)


def unwrap_runtime(exc: BaseException, fallback: str) -> LLMReadableError:
    """The LLM-readable failure inside ``exc``, or an :class:`UncorrectableError` of ``fallback``.

    Unlike :func:`unwrap`, a re-run signal in the chain is not raised: it counts as nothing
    LLM-readable, and the result is ``UncorrectableError(fallback)`` caused by ``exc``. Use it
    where the answer must be a plain failure, such as a re-run budget that is spent. An ``exc``
    that is not an ``Exception`` is re-raised unchanged.
    """
    _require_str("fallback", fallback, owner="unwrap_runtime")
    _propagate_non_exceptions(exc)
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            return link
    return UncorrectableError(fallback, cause=exc)


def wrap_with_context(
    exc: BaseException, *, service: str, param: str, value: object, step: str
) -> LLMReadableError:
    """Re-frame a tool's failure in terms of the parameter it was called with.

    Searched like :func:`unwrap`, nearest first:

    * a correctable error becomes an :class:`InvalidInputError` naming ``param`` and ``value``,
      with ``step`` and the buried message as the rule (so a 404 on a fetch tells the model
      which id to fix);
    * a re-run signal is raised;
    * a :class:`CancellationRequested` is returned as itself, so the job still ends cancelled;
    * an uncorrectable error, or a chain with nothing LLM-readable, becomes an
      :class:`ExternalServiceError` naming ``service`` and ``step``.

    The result has ``exc`` as its cause. An ``exc`` that is not an ``Exception`` is re-raised.
    """
    owner = "wrap_with_context"
    _require_name("service", service, owner=owner)
    _require_name("param", param, owner=owner)
    _require_name("step", step, owner=owner)
    _propagate_non_exceptions(exc)
    found: LLMReadableError | None = None
    for link in _walk_chain(exc):
        if isinstance(link, LLMReadableError):
            found = link
            break
        if isinstance(link, RerunSignal):
            raise link
    if isinstance(found, CancellationRequested):
        return found
    if found is not None and found.correctable:
        return InvalidInputError(
            f"Invalid value for parameter '{param}': {_preview(repr(value))}. "
            f"At step '{step}': {found.llm_message}",
            cause=exc,
        )
    detail = found.llm_message if found is not None else _describe(exc)
    retry_after = found.retry_after if isinstance(found, ExternalServiceError) else None
    return ExternalServiceError(
        f"{service} failed at step '{step}': {detail}",
        service=service,
        retry_after=retry_after,
        cause=exc,
    )


_NOT_CRASHES = (trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)


def is_fatal_crash(exc: BaseException) -> bool:
    """Whether ``exc`` is a crash no job can be expected to handle, such as ``MemoryError``.

    True for ``MemoryError``, ``RecursionError`` and any ``BaseException`` that is not an
    ``Exception`` and not one of trio's or Python's control-flow exceptions (``trio.Cancelled``,
    ``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``). A group is fatal when any member
    is. The dispatcher fails such a job as a :class:`NucleoSystemError` of component ``job`` and
    never re-runs it.
    """
    if isinstance(exc, BaseExceptionGroup):
        return any(is_fatal_crash(member) for member in exc.exceptions)
    if isinstance(exc, MemoryError | RecursionError):
        return True
    return not isinstance(exc, Exception) and not isinstance(exc, _NOT_CRASHES)


_SUPPRESSED = "_nucleo_suppressed"


def add_suppressed(error: BaseException, other: BaseException) -> None:
    """Attach ``other`` to ``error`` as a failure that happened while ``error`` was handled.

    Python chains one exception through ``__context__``; a clean-up that fails after the job's
    own failure (a rollback, a close) must not replace that failure, so it rides along instead:
    readable through :func:`suppressed` and shown in the traceback as a note.
    """
    riders: list[BaseException] = error.__dict__.setdefault(_SUPPRESSED, [])
    riders.append(other)
    error.add_note(f"Suppressed while handling it: {type(other).__name__}: {other}")


def suppressed(error: BaseException) -> tuple[BaseException, ...]:
    """The failures attached to ``error`` with :func:`add_suppressed`, oldest first."""
    return tuple(error.__dict__.get(_SUPPRESSED, ()))


def log_failure(
    logger: logging.Logger | logging.LoggerAdapter[Any],
    exc: BaseException,
    *,
    job: str | None = None,
) -> None:
    """Log a job's failure as one line at WARNING, and its traceback at DEBUG.

    The line reads ``<job> failed: <ErrorClass>: <message>``, as the runtimes people already
    know log a failed task: with ``logging.basicConfig()`` a failing job is one line, and
    turning the logger down to DEBUG adds the traceback as a second record. ``job`` names the
    job (the dispatcher always passes it); without it the line says "a job".
    """
    name = job or "a job"
    logger.warning("%s failed: %s", name, _describe(exc))
    logger.debug("%s failed, traceback:", name, exc_info=exc)
