"""The accounts a dispatcher builds on demand: one per limiter class, one bucket and one gate
per model entry.

A job names its accounts in its requirements, and most of them are shared: every request to one
model must debit the *same* bucket, every job that needs ``RenderSlots`` the same slots. The
registry is where that sharing lives. Each dispatcher owns one (``dispatcher.accounts``), so two
dispatchers in one process share no account unless both are handed it::

    slots = dispatcher.accounts.instance(RenderSlots)   # the same object on every call
    bucket = dispatcher.accounts.bucket(spec)           # one TokenBucket per spec id
    gate = dispatcher.accounts.gate(local_spec)         # one ModelGate per spec id

A model entry is anything that answers :class:`ModelLimits` (the catalog's entries do). The
registry reads an entry's numbers once, when it builds the account; later changes go through
:meth:`RateLimiterRegistry.update_limits`, which adjusts the bucket in place so its throttle and
its waiters' wake-ups survive.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, cast

from ..errors import UncorrectableError
from .limiter import RateLimiter
from .named_gates import ModelGate
from .token_bucket import TokenBucket, TokenBucketConfig, TokenBucketStatus

__all__ = ["DEFAULT_BURST", "ModelLimits", "RateLimiterRegistry"]

DEFAULT_BURST = 1
"""The burst of a model entry's bucket when the entry states none: one request at a time, spaced
``60 / rpm`` seconds apart. A bucket that starts full lets ``burst - 1`` more than ``rpm`` into
one sliding minute, so this is the one burst under which no sliding minute (the way providers
count) ever holds more than the quota, at the full sustained rate."""

L = TypeVar("L")

# Read off the class, never the instance: a property may need a running trio clock.
_ACCOUNT_METHODS = ("fits", "try_take", "give", "earliest_fit", "account_for", "status")


class ModelLimits(Protocol):
    """What the registry reads from a model entry: its id and its bounds.

    ``tpm`` and ``rpm`` are the provider's tokens and requests per minute (an entry bounded by
    a quota window); ``max_concurrent`` is the cap of an entry served from a machine the
    deployment owns. A value the entry does not state is ``None``.

    An entry may also answer ``burst``, the most requests its bucket lets go at once; the
    registry reads it when present (the catalog's entries have it) and gives a bucket
    :data:`DEFAULT_BURST` when the entry states none.
    """

    @property
    def id(self) -> str:
        """The entry's id, a non-blank ``str``: the key of its bucket and its gate, and their
        name."""
        ...

    @property
    def rpm(self) -> int | None:
        """Requests per minute, or ``None`` (then the bucket allows ``tpm // 1000``, at least
        one)."""
        ...

    @property
    def tpm(self) -> int | None:
        """Tokens per minute, or ``None`` for an entry with no quota window (no bucket)."""
        ...

    @property
    def max_concurrent(self) -> int | None:
        """Concurrent requests, or ``None`` for an entry with no concurrency cap (no gate)."""
        ...


def _spec_id(spec: ModelLimits) -> str:
    spec_id = getattr(spec, "id", None)
    if not isinstance(spec_id, str) or not spec_id.strip():
        raise TypeError(
            f"a model entry needs a non-blank str id, got {spec_id!r} on {type(spec).__name__}"
        )
    return spec_id


def _burst_of(spec: ModelLimits, spec_id: str) -> float | None:
    """The entry's stated burst, or :data:`DEFAULT_BURST`; refused unless a number >= 1."""
    burst = getattr(spec, "burst", None)
    if burst is None:
        return DEFAULT_BURST
    if (
        isinstance(burst, bool)
        or not isinstance(burst, int | float)
        or not math.isfinite(burst)
        or burst < 1
    ):
        raise ValueError(
            f"model entry {spec_id!r}: burst must be a finite number of requests >= 1, "
            f"got {burst!r}"
        )
    return float(burst) if isinstance(burst, float) else burst


def _requests_for(rpm: int | None, tpm: int) -> int:
    """The request budget: the entry's own, or tpm/1000 when it publishes none (FAC-03).

    A budget under a thousand tokens still allows one request a minute, since a bucket with no
    requests could never grant anything.
    """
    if isinstance(rpm, int) and not isinstance(rpm, bool) and rpm > 0:
        return rpm
    return max(1, tpm // 1000)


class RateLimiterRegistry:
    """One dispatcher's shared accounts, built on first use and kept until :meth:`clear`.

    Three maps: limiter instances by concrete class (:meth:`instance`), token buckets by model
    entry id (:meth:`bucket`) and model gates by entry id (:meth:`gate`). :meth:`accounts` walks
    all of them, which is how the health snapshot finds them.
    """

    def __init__(self) -> None:
        self._instances: dict[type, Any] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._gates: dict[str, ModelGate] = {}

    # -- by class -----------------------------------------------------------------------------------
    def instance(self, cls: type[L]) -> L:
        """The one instance of ``cls``, built with no arguments on first use.

        A class that cannot be called without arguments is a deployment fault, not something a
        model can fix: it is refused with :class:`~nucleo_trio.errors.UncorrectableError` naming
        the class and saying "no no-arg constructor", caused by the :class:`TypeError` of the
        binding. Any other failure to build it says "could not be built: <message>", caused by
        that failure. What the class builds must be a
        :class:`~nucleo_trio.admission.RateLimiter`, which is checked on the class alone: the
        registry never reads an account's live state (``capacity``, ``in_use``, ``status()``),
        which may need a running trio clock, so an account can be built outside a run.
        Admission checks the rest of its shape when it first meets it.
        """
        if not isinstance(cls, type):
            raise TypeError(f"instance() takes a limiter class, got {cls!r}")
        present = self._instances.get(cls)
        if present is not None:
            return cast(L, present)
        name = f"{cls.__module__}.{cls.__qualname__}"
        try:
            signature = inspect.signature(cls)
        except (TypeError, ValueError):
            signature = None  # a class inspect cannot read is simply called
        if signature is not None:
            try:
                signature.bind()
            except TypeError as exc:
                raise UncorrectableError(
                    f"rate limiter class {name} has no no-arg constructor "
                    f"(its constructor is {cls.__name__}{signature}); give it defaults for every "
                    "argument, or build the instance yourself and declare it directly",
                    cause=exc,
                ) from exc
        try:
            built = cls()
        except Exception as exc:
            raise UncorrectableError(
                f"rate limiter class {name} could not be built: {exc}", cause=exc
            ) from exc
        missing = [m for m in _ACCOUNT_METHODS if not callable(getattr(cls, m, None))]
        if missing:
            raise TypeError(f"{name} is not a RateLimiter: it has no {', '.join(missing)}")
        self._instances[cls] = built
        return built

    # -- by model entry ----------------------------------------------------------------------------
    def bucket(self, spec: ModelLimits) -> TokenBucket:
        """The token bucket of the entry ``spec``, keyed by its id.

        Built on first use from the entry's ``tpm`` and ``rpm`` (``tpm // 1000`` requests when
        ``rpm`` is missing or not positive) and its ``burst`` (:data:`DEFAULT_BURST`, one request
        at a time, when it states none), and named after the id. Another entry object with the
        same id gets the same bucket; its numbers are not read again. An entry with no positive
        ``tpm`` is refused: a concurrency-bounded entry is a gate (:meth:`gate`).
        """
        spec_id = _spec_id(spec)
        present = self._buckets.get(spec_id)
        if present is not None:
            return present
        tpm = spec.tpm
        if isinstance(tpm, bool) or not isinstance(tpm, int) or tpm <= 0:
            raise ValueError(
                f"model entry {spec_id!r} states no positive tpm (got {tpm!r}); an entry bounded "
                "by max_concurrent is a ModelGate account, not a token bucket"
            )
        return self._new_bucket(
            spec_id, _requests_for(spec.rpm, tpm), tpm, _burst_of(spec, spec_id)
        )

    def _new_bucket(self, spec_id: str, rpm: int, tpm: int, burst: float | None) -> TokenBucket:
        bucket = TokenBucket(spec_id, TokenBucketConfig(rpm=rpm, tpm=tpm, burst=burst))
        self._buckets[spec_id] = bucket
        return bucket

    def gate(self, spec: ModelLimits) -> ModelGate:
        """The :class:`~nucleo_trio.admission.ModelGate` of the entry ``spec``, keyed by its
        id, built on first use with ``max_concurrent`` permits. An entry with no
        ``max_concurrent`` is refused with :class:`ValueError`, as the gate refuses it."""
        spec_id = _spec_id(spec)
        present = self._gates.get(spec_id)
        if present is not None:
            return present
        gate = ModelGate(spec_id, spec.max_concurrent)
        self._gates[spec_id] = gate
        return gate

    def update_limits(self, spec: ModelLimits, rpm: int, tpm: int) -> None:
        """Apply newly learned per-minute caps to the entry's bucket.

        A pair where either number is not positive is ignored. An existing bucket is adjusted
        in place (:meth:`TokenBucket.set_config`): the same instance, its throttle kept, its
        ``burst`` bound kept (the provider publishes per-minute caps, not how fast a minute may
        be spent), and a raised cap wakes admission. Without one, a bucket is built with these
        numbers and the entry's burst.
        """
        spec_id = _spec_id(spec)
        if not _positive_int(rpm) or not _positive_int(tpm):
            return
        present = self._buckets.get(spec_id)
        if present is None:
            self._new_bucket(spec_id, rpm, tpm, _burst_of(spec, spec_id))
        else:
            present.set_config(TokenBucketConfig(rpm=rpm, tpm=tpm, burst=present.config.burst))

    def status(self, spec: ModelLimits) -> TokenBucketStatus:
        """The entry's :class:`~nucleo_trio.admission.TokenBucketStatus`, building the bucket
        if needed."""
        return self.bucket(spec).status()

    # -- all of them -------------------------------------------------------------------------------
    def accounts(self) -> Iterator[RateLimiter]:
        """Every account the registry holds: instances, then buckets, then gates, each in the
        order they were built."""
        yield from self._instances.values()
        yield from self._buckets.values()
        yield from self._gates.values()

    def clear(self) -> None:
        """Forget every instance, bucket and gate; the next call builds afresh."""
        self._instances.clear()
        self._buckets.clear()
        self._gates.clear()

    def __len__(self) -> int:
        return len(self._instances) + len(self._buckets) + len(self._gates)

    def __repr__(self) -> str:
        return (
            f"<RateLimiterRegistry {len(self._instances)} instances, "
            f"{len(self._buckets)} buckets, {len(self._gates)} gates>"
        )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
