"""What a job declares it needs; the dispatcher turns it into one admission demand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..admission.demand import check_amount
from ..admission.gates import CountingGate
from ..admission.memory_reader import parse_memory_limit
from ..errors import UsageTypeError

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter
    from ..models.binding import ModelBinding
    from ..resources.provider import DBResourceProvider

__all__ = ["JobRequirements", "LimiterRequirement", "ModelClaim"]


def _check_limiter_amount(
    requirement: LimiterRequirement, attribute: attrs.Attribute[Any], amount: Any
) -> None:
    """Refuse, at declaration, an amount the demand would refuse later: a bool, NaN, an
    infinity, a negative (:func:`~nucleo_trio.admission.demand.check_amount`), or a value the
    account itself does not take (its ``account_for`` judges it: a token bucket takes only
    token counts). On a counting gate the amount is a number of permits, refused unless it is
    ``None`` or a positive int, and refused when it is more than the gate has, since that job
    could never run (:meth:`~nucleo_trio.admission.CountingGate.check_declared`)."""
    limiter = requirement.limiter
    if amount is not None:
        check_amount(limiter, amount, where="require_rate_limiter")
    resolve = getattr(limiter, "account_for", None)
    if callable(resolve):
        resolve(amount)
    if isinstance(limiter, CountingGate):
        limiter.check_declared(amount)


class ModelClaim:
    """What :meth:`JobRequirements.require_model` takes: a job's claim on a model for one
    attempt. :class:`~nucleo_trio.models.ModelBinding` is the one kind there is.

    The base is defined here, below the models package (whose runtime imports the jobs), so
    the requirements check what they are given without importing that package.
    """

    __slots__ = ()


@attrs.frozen
class LimiterRequirement:
    """One custom account a job needs, with the amount it debits: a number of permits on a
    counting gate (``None`` for one), tokens on a token bucket.

    The amount is checked when the requirement is built, so a bad one fails the job's
    declaration, naming the limiter and the value, before anything is submitted or held.
    """

    limiter: RateLimiter
    """The account the job draws on."""
    amount: Any = attrs.field(default=None, validator=_check_limiter_amount)
    """What the job takes from it: permits on a counting gate (``None`` for one), tokens on a
    token bucket, requests on a rate limit (``None`` for one)."""


@attrs.define
class JobRequirements:
    """A job's declared needs, captured by the dispatcher once at submit and once per attempt.

    Build it fluently in :meth:`AbstractJob.requirements
    <nucleo_trio.jobs.AbstractJob.requirements>`::

        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(self.search_quota, 1).require_http()

    A job that declares any resource must have a timeout: one whose ``timeout`` is ``None``
    is refused at submit (its handle is born failed).

    Databases are declared by provider (or by the name a dispatcher registered it under):
    the demand gets one permit on each provider's gate, and the job finds its connection
    through ``context.resources``. With :meth:`require_transaction` the dispatcher runs
    ``execute`` inside ``begin_all``/``commit_all``, rolling back on a failure.

    An events file (:class:`~nucleo_trio.observability.JsonLinesSink`) writes the
    requirements a ``JobScheduled`` event carries as a summary by name, an object with these
    keys, which reads back as a plain ``dict``:

    - ``requires_queueing``, ``requires_http``, ``requires_transaction``, ``read_only``: the
      flags below, as declared (``requires_http`` is the job's own; a model or a limiter that
      needs the HTTP gate does not set it);
    - ``rate_limiters``: ``{"limiter": <its name>, "amount": <the amount>}`` per limiter, in
      the order declared (the amount ``null`` when none was given);
    - ``databases``: the databases' names;
    - ``model_bindings``: each binding's ``repr``, ``"<ModelBinding flat binding (SMALL)>"``;
    - ``memory_bytes``: the memory promised, in bytes, or ``null``.
    """

    # ROUTE-01 (requires_queueing), SUB-08 (resources need a timeout, checked at the door).
    requires_queueing: bool = True
    """Whether the job waits in a lane (the default) or runs at once on a task of its own
    (:meth:`without_queueing`)."""
    requires_http: bool = False
    """Whether the job itself uses an HTTP connection (:meth:`require_http`); see also
    :attr:`needs_http`."""
    requires_transaction: bool = False
    """Whether ``execute`` runs inside a transaction on each declared database
    (:meth:`require_transaction`)."""
    read_only: bool = False
    """Whether the providers are asked for read-only connections
    (:meth:`read_only_connections`)."""
    rate_limiters: list[LimiterRequirement] = attrs.field(factory=list)
    """The custom accounts the job draws on, one :class:`LimiterRequirement` each, in the
    order declared (:meth:`require_rate_limiter`)."""
    databases: list[DBResourceProvider | str] = attrs.field(factory=list)
    """The databases the job uses: providers, or the names they are registered under in the
    dispatcher (:meth:`require_database`)."""
    model_bindings: list[ModelBinding] = attrs.field(factory=list)
    """The models the job calls in this attempt (:meth:`require_model`)."""
    memory_bytes: int | None = None
    """The memory the job promises to use (:meth:`require_memory`), or ``None``."""

    def require_memory(self, size: int | str) -> JobRequirements:
        """Promise the memory the job expects to use: a positive number of bytes or a size
        such as ``"50MiB"`` (binary units count in 1024s, decimal ones in 1000s). The memory
        gate reserves it against the headroom under its latch for as long as the job holds its
        resources, so a burst admitted while memory is low cannot overshoot by all of it.
        Anything else is refused, naming the value: ``0``, ``-1``, ``True``, ``"lots"``.
        Declaring again replaces the promise.
        """
        self.memory_bytes = parse_memory_limit(size, what="require_memory")
        return self

    def require_model(self, binding: ModelBinding) -> JobRequirements:
        """Add a model the job calls in this attempt (:class:`~nucleo_trio.models.ModelBinding`):
        resolved and priced before anything is held, then a token reservation on the entry's
        bucket (or a permit on its gate) heads the demand, and the ``http`` gate joins it.
        Mint the binding inside :meth:`AbstractJob.requirements
        <nucleo_trio.jobs.AbstractJob.requirements>`, so every attempt gets a fresh one.
        Anything but a binding raises :class:`ValueError`.
        """
        # JR-02, JR-03
        if not isinstance(binding, ModelClaim):
            raise ValueError(f"require_model takes a ModelBinding, got {binding!r}")
        self.model_bindings.append(binding)
        return self

    def require_rate_limiter(self, limiter: RateLimiter, amount: Any = None) -> JobRequirements:
        """Add a custom account to the job's demand; it joins admission like a built-in.

        ``amount`` is what the demand carries for it: on a counting gate, a number of
        permits (``require_rate_limiter(gpu_memory, 24)`` takes 24 of the gate's permits,
        ``None`` takes one); on a token bucket, tokens; on a
        :class:`~nucleo_trio.admission.RateLimit`, requests, so
        ``require_rate_limiter(five_per_second)`` with no amount is one request. Requiring the
        same limiter again replaces its amount, so a job that needs 3 permits asks for 3.

        A bool, NaN, an infinity, a negative or a value the account does not take (``None`` or
        a string on a token bucket; zero or a fraction on a gate or a rate limit) raises here,
        naming the limiter and the value. So does an ask the account can never grant:
        ``ValueError: gpu-memory: asks for 96 permits but the gate has only 80``.
        """
        if limiter is None:
            raise ValueError("require_rate_limiter: the limiter must not be None")
        if not callable(getattr(limiter, "account_for", None)):
            raise _not_a_limiter(limiter)
        for i, need in enumerate(self.rate_limiters):
            if need.limiter is limiter:
                self.rate_limiters[i] = LimiterRequirement(limiter, amount)
                return self
        self.rate_limiters.append(LimiterRequirement(limiter, amount))
        return self

    def require_database(self, provider: DBResourceProvider | str) -> JobRequirements:
        """Declare a database: a provider object, or the name it is registered under in the
        dispatcher (``dispatcher.databases``). Declaring one twice declares it once."""
        if provider is None or (isinstance(provider, str) and not provider.strip()):
            raise ValueError(f"require_database: a provider or a provider name, got {provider!r}")
        if not any(p is provider or p == provider for p in self.databases):
            self.databases.append(provider)
        return self

    def require_transaction(self, required: bool = True) -> JobRequirements:
        """Run ``execute`` inside one transaction per declared database: committed when it
        returns, rolled back when it raises, times out or is cancelled. Without a declared
        database there is no transaction. ``required=False`` takes the request back."""
        # EXEC-03..05
        self.requires_transaction = required
        return self

    def read_only_connections(self, read_only: bool = True) -> JobRequirements:
        """Ask the providers for read-only connections (a hint the provider passes on)."""
        self.read_only = read_only
        return self

    def require_http(self) -> JobRequirements:
        """The job uses a connection from the HTTP pool (the dispatcher's ``http`` gate)."""
        self.requires_http = True
        return self

    def without_queueing(self) -> JobRequirements:
        """Run at once on its own task instead of through a lane."""
        self.requires_queueing = False
        return self

    @property
    def limiters(self) -> Sequence[LimiterRequirement]:
        """:attr:`rate_limiters` as a tuple, read-only."""
        return tuple(self.rate_limiters)

    @property
    def needs_http(self) -> bool:
        """True when the job, any model binding or any of its limiters needs the HTTP
        connection gate: the demand then takes one permit on the dispatcher's ``http`` gate."""
        # JR-03
        if self.requires_http or self.model_bindings:
            return True
        for r in self.rate_limiters:  # a loop, not any() over a generator: read per demand
            if getattr(r.limiter, "requires_http_connection", False):
                return True
        return False

    @property
    def has_resources(self) -> bool:
        """True when admission must grant something before the job runs: a limiter, a
        database, the HTTP gate or a memory promise. Such a job must have a timeout."""
        # JR-05
        return (
            bool(self.rate_limiters)
            or bool(self.databases)
            or self.needs_http
            or self.memory_bytes is not None
        )


def _not_a_limiter(value: object) -> UsageTypeError:
    """What ``require_rate_limiter`` raises for a value that is not an account; a name gets the
    way to the account it names."""
    if isinstance(value, str):
        return UsageTypeError(
            "job",
            f"require_rate_limiter takes the limiter object, not its name {value!r}",
            f"pass the account itself: `self.context.dispatcher.limiters[{value!r}]` for a limiter "
            "the config declares, or the object you built (`CountingGate(...)`)",
        )
    return UsageTypeError(
        "job",
        f"require_rate_limiter takes a RateLimiter (an account with account_for, fits, "
        f"try_take, give), got {type(value).__name__}",
        "pass a CountingGate, TokenBucket, ElasticWindow or an account of your own",
    )
