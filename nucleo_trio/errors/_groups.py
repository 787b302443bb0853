"""Reading what a job raised, bare or as an exception group from a nursery or task group.

A job that fans out (``trio.open_nursery()``, an anyio task group) hears of its children's
failures as one ``ExceptionGroup``, however many children failed and whatever they raised. The
dispatcher acts on what is inside: :func:`read_raised` sorts the leaves of the group (nested
groups flattened) into the re-run to act on, the upstream failures the limiters hear of, and the
failure the job ends with. A bare exception is read as a group of one, so every rule below is
also the rule for an exception raised straight from ``execute``.
"""

from __future__ import annotations

import attrs
import trio

from .hierarchy import ExternalServiceError
from .signals import OutputTruncationRetry, RerunSignal, UpstreamRetry


@attrs.frozen
class Reading:
    """What one raised exception asks of the dispatcher.

    ``signal`` is the re-run to act on, set only when every leaf is a re-run signal; otherwise
    ``failure`` is what the job fails with (the exception as raised for a cancellation, a
    ``KeyboardInterrupt`` or a ``SystemExit``). ``upstream`` holds the leaves whose chain holds an
    upstream failure or signal, each told to the job's limiters on its own (none for a
    cancellation, which is never charged to a limiter). ``unheeded`` holds the re-run signals that
    did not decide: the other signals of an all-signal group, or every signal beside a failure.
    """

    raised: BaseException
    signal: RerunSignal | None = None
    failure: BaseException | None = None
    upstream: tuple[BaseException, ...] = ()
    unheeded: tuple[RerunSignal, ...] = ()

    @property
    def outcome(self) -> BaseException:
        """The one exception that goes on: the signal to act on, else the failure."""
        if self.signal is not None:
            return self.signal
        assert self.failure is not None
        return self.failure


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, nested groups flattened, in the order raised; a bare
    exception is its own one leaf. An exception found twice counts once."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    found: list[BaseException] = []
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        elif id(current) not in seen:
            seen.add(id(current))
            found.append(current)
    return found


def read_raised(exc: BaseException) -> Reading:
    """Read ``exc``, bare or a group, leaf by leaf:

    * a ``trio.Cancelled`` leaf makes the whole a cancellation: it goes on as raised, and no
      limiter hears of it;
    * a ``KeyboardInterrupt`` or ``SystemExit`` leaf goes on as raised (it stops the
      dispatcher); the upstream leaves beside it are still told;
    * when every leaf is a re-run signal, the most demanding one is the re-run (see
      :func:`demand`): it decides the pause and the budget it draws on;
    * otherwise the job fails with its failures: a single one as the very exception raised,
      several kept as a group (the original group when it holds no signal, else the group
      without its signals, its nesting kept). The signals beside them are not honoured.

    Every leaf whose chain holds an upstream failure (an :class:`ExternalServiceError`, an
    :class:`UpstreamRetry`) is in :attr:`Reading.upstream`, whichever way the reading goes.
    """
    found = leaves(exc)
    if any(isinstance(leaf, trio.Cancelled) for leaf in found):
        return Reading(exc, failure=exc)
    upstream = tuple(leaf for leaf in found if upstream_in_chain(leaf))
    if any(isinstance(leaf, KeyboardInterrupt | SystemExit) for leaf in found):
        return Reading(exc, failure=exc, upstream=upstream)
    signals = [leaf for leaf in found if isinstance(leaf, RerunSignal)]
    if len(signals) == len(found):
        chosen = max(signals, key=demand)  # the first of equals, as raised
        others = tuple(s for s in signals if s is not chosen)
        return Reading(exc, signal=chosen, upstream=upstream, unheeded=others)
    failures = [leaf for leaf in found if not isinstance(leaf, RerunSignal)]
    failure: BaseException | None = exc
    if len(failures) == 1:
        failure = failures[0]
    elif signals:
        assert isinstance(exc, BaseExceptionGroup)
        failure = exc.split(RerunSignal)[1]  # the group without its signals, nesting kept
    return Reading(exc, failure=failure, upstream=upstream, unheeded=tuple(signals))


def demand(signal: RerunSignal) -> tuple[float, ...]:
    """How demanding a re-run signal is, for choosing one among several raised at once.

    An upstream signal outranks the others: it asks for a pause before the re-run, and a re-run
    without it would meet the pushing-back upstream again. Among upstream signals the one whose
    pause is longest wins, by its window's floor then its ceiling (a Retry-After the upstream
    named counts as that delay plus jitter), so the pause chosen also honours every other; then
    the one that pushes back hardest on a throttling account (an overload over a rate limit over
    a transient error). A truncation outranks a correction: its budget is one re-run, a
    correction's four.
    """
    if isinstance(signal, UpstreamRetry):
        low, high = type(signal).pacing_window(1, signal.retry_after)
        return (2.0, low, high, float(type(signal).backpressure_increment))
    if isinstance(signal, OutputTruncationRetry):
        return (1.0,)
    return (0.0,)


def upstream_in_chain(exc: BaseException) -> bool:
    """Whether an upstream failure (an external service, an upstream re-run signal) is anywhere
    in ``exc``'s chain or group, a context hidden by ``raise ... from None`` included: the
    limiters then hear of it (SIG-01, ERR-14)."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        link = stack.pop()
        if id(link) in seen:
            continue
        seen.add(id(link))
        if isinstance(link, ExternalServiceError | UpstreamRetry):
            return True
        if isinstance(link, BaseExceptionGroup):
            stack.extend(link.exceptions)
        for nxt in (link.__cause__, link.__context__):
            if nxt is not None:
                stack.append(nxt)
    return False
