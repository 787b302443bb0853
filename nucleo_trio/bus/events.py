"""The typed events the runtime tells on its message bus.

Every event is a frozen, slotted attrs class: what varies is given at construction, and no event
exposes a mutator. Every event answers ``snapshot`` (the job it is about, or ``None``),
``timestamp`` (wall-clock seconds, ``time.time()``, when it was built) and ``message`` (its log
line, built from what it carries; ``None`` when it has nothing to say).

Events come in *families*, plain marker classes under :class:`JobEvent`::

    JobEvent                         the root; applications may subclass it for their own events
    |-- LifecycleEvent               JobScheduled, JobStartedEvent, OrchestratorIdleEvent,
    |   |                            OrchestratorResumedEvent
    |   `-- TerminalEvent            DependencyFailureEvent
    |       |-- AbstractTerminalEvent  JobCompletedEvent, JobFailedEvent, JobTimedOut, JobCancelled
    |       |-- SuccessEvent         JobCompletedEvent
    |       `-- FailureEvent         JobFailedEvent, JobTimedOut, DependencyFailureEvent
    |-- WorkflowTerminationEvent     WorkflowCompleteEvent (parallel to lifecycle, not under it)
    |-- ProgressEvent                JobProgressEvent and its subclass ContentStreamEvent
    |-- RetryEvent                   the four *RetryEvent classes
    |-- NotificationEvent            UserNotificationEvent
    |-- OperationalEvent             LimiterEvent
    |-- SystemEvent                  SchedulerEvent
    `-- HeartbeatEvent               HeartbeatRequested, CancelHeartbeat, HeartbeatScheduled,
                                     HeartbeatRebound, HeartbeatFired, HeartbeatFireFailed

A family is a class, so ``isinstance(event, LifecycleEvent)`` and subscribing to the bus with
``event_type=LifecycleEvent`` both reach every member and nothing else. :class:`HumanReadable`
is an orthogonal marker for events written for a person; :class:`MessageCompleteEvent`
is human-readable and in no family. A family or marker class cannot be built on its own, and
a concrete event marked ``@final`` cannot be subclassed (only :class:`JobProgressEvent`,
:class:`ContentStreamEvent` and :class:`MessageCompleteEvent` are open).

Job-scoped families (lifecycle, workflow termination, progress, retry, notification) refuse to
be built without a snapshot; system and heartbeat events refuse to carry one; a
:class:`LimiterEvent` carries one when the transition has an owning job.
"""

import enum
import functools
import time
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, final

import attrs

from nucleo_trio._amounts import units_of
from nucleo_trio._heartbeat_mint import MintedHeartbeat, format_instant, is_genuine
from nucleo_trio._job_snapshot import JobSnapshot, JobState
from nucleo_trio.admission.limiter import LimiterEventType

if TYPE_CHECKING:
    from nucleo_trio.heartbeat.records import Heartbeat

__all__ = [
    "EVENT_FAMILIES",
    "AbstractTerminalEvent",
    "CancelHeartbeat",
    "ContentStreamEvent",
    "DependencyFailureEvent",
    "FailureEvent",
    "HeartbeatEvent",
    "HeartbeatFireFailed",
    "HeartbeatFired",
    "HeartbeatRebound",
    "HeartbeatRequested",
    "HeartbeatScheduled",
    "HumanReadable",
    "JobCancelled",
    "JobCompletedEvent",
    "JobEvent",
    "JobFailedEvent",
    "JobProgressEvent",
    "JobScheduled",
    "JobStartedEvent",
    "JobTimedOut",
    "LifecycleEvent",
    "LimiterEvent",
    "MessageCompleteEvent",
    "MsgType",
    "NotificationEvent",
    "OperationalEvent",
    "OrchestratorIdleEvent",
    "OrchestratorResumedEvent",
    "OutputTruncationRetryEvent",
    "ProgressEvent",
    "RateLimitRetryEvent",
    "ResponseCorrectionRetryEvent",
    "RetryEvent",
    "ScheduledState",
    "SchedulerEvent",
    "SchedulerEventType",
    "Severity",
    "SuccessEvent",
    "SystemEvent",
    "TerminalEvent",
    "ToolCallStreamEvent",
    "TransientErrorRetryEvent",
    "UserNotificationEvent",
    "WorkflowCompleteEvent",
    "WorkflowTerminationEvent",
    "amount_of",
    "family_of",
]


# --------------------------------------------------------------------------------------------
# Enumerations
# --------------------------------------------------------------------------------------------


class MsgType(enum.Enum):
    """What a person-facing event is, for a UI that shows it.

    Four lifecycle phases (``STARTING``, ``PROGRESSING``, ``COMPLETING``, ``FAILING``) and three
    general-purpose values (``STATUS_UPDATE``, ``MESSAGE``, ``ERROR``).
    """

    # OBS-09: the message types and which event answers which.
    STARTING = "STARTING"
    """Work has begun: progress at 0 %."""
    PROGRESSING = "PROGRESSING"
    """Work is under way: progress from 1 to 99 %, or a streamed chunk that is not the last."""
    COMPLETING = "COMPLETING"
    """Work finished well: progress at 100 %, the last streamed chunk, a success."""
    FAILING = "FAILING"
    """Work finished badly: a failed workflow or message exchange."""
    STATUS_UPDATE = "STATUS_UPDATE"
    """A status with no phase, such as progress without a percent; the default."""
    MESSAGE = "MESSAGE"
    """A message to the person: a notification of severity info or warning."""
    ERROR = "ERROR"
    """An error to the person: a notification of severity error."""


class Severity(enum.Enum):
    """How much a :class:`UserNotificationEvent` asks of the person reading it."""

    INFO = "INFO"
    """For information; nothing to do."""
    SUCCESS = "SUCCESS"
    """Something the person asked for succeeded."""
    WARNING = "WARNING"
    """Something may need the person's attention."""
    ERROR = "ERROR"
    """Something failed."""


class ScheduledState(enum.Enum):
    """What a :class:`JobScheduled` announces: acceptance alone, or a place in a queue."""

    # OBS-10: the two scheduled states.
    ACCEPTED = "ACCEPTED"
    """The job was accepted; the default of an event built from a snapshot alone."""
    QUEUED = "QUEUED"
    """The job was queued for execution, with its requirements and priority; what the
    dispatcher publishes."""


class SchedulerEventType(enum.Enum):
    """The transitions a :class:`SchedulerEvent` reports, each with its default message."""

    STARTED = "STARTED"
    """The scheduler started: "Job scheduler started"."""
    STOPPING = "STOPPING"
    """The scheduler began to stop: "Job scheduler stopping"."""
    STOPPED = "STOPPED"
    """The scheduler stopped: "Job scheduler stopped"."""
    ERROR = "ERROR"
    """The scheduler hit an error: "Scheduler error"."""

    @property
    def default_message(self) -> str:
        """The message a :class:`SchedulerEvent` of this type reads unless given its own."""
        return _SCHEDULER_MESSAGES[self]


_SCHEDULER_MESSAGES: Final = {
    SchedulerEventType.STARTED: "Job scheduler started",
    SchedulerEventType.STOPPING: "Job scheduler stopping",
    SchedulerEventType.STOPPED: "Job scheduler stopped",
    SchedulerEventType.ERROR: "Scheduler error",
}


# --------------------------------------------------------------------------------------------
# Small helpers shared by the event classes
# --------------------------------------------------------------------------------------------

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


def _freeze_metadata(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A read-only copy: the publisher keeps no handle through which a delivered event changes.
    if not value:
        return _EMPTY_METADATA
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


def _freeze_responses(value: Iterable[Any] | None) -> tuple[Any, ...]:
    # "Empty, never null" (OBS-11): None becomes the empty tuple.
    if value is None:
        return ()
    if isinstance(value, str | bytes):
        raise TypeError("llm_responses must be a sequence of responses, not a string")
    return tuple(value)


def _seconds(value: float) -> str:
    # 30.0 reads "30", 0.5 reads "0.5": the number a person would write.
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"


def _error_text(error: BaseException | None) -> str:
    return str(error) if error is not None else ""


_non_negative_int = attrs.validators.and_(attrs.validators.instance_of(int), attrs.validators.ge(0))
_positive_int = attrs.validators.and_(attrs.validators.instance_of(int), attrs.validators.ge(1))
_optional_str = attrs.validators.optional(attrs.validators.instance_of(str))
_optional_error = attrs.validators.optional(attrs.validators.instance_of(BaseException))


def _optional_non_negative_seconds(instance: object, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be seconds as a number, got {value!r}")
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


def _non_negative_seconds(instance: object, attribute: Any, value: Any) -> None:
    if value is None:
        raise TypeError(f"{attribute.name} must be seconds as a number, got None")
    _optional_non_negative_seconds(instance, attribute, value)


def _abstract(cls: type) -> type:
    """Mark a family or base class: it classifies events and is never built on its own.

    The class's own ``__init__`` refuses to build it. attrs writes each event class an
    ``__init__`` of its own, which never calls its base's, so a concrete event pays nothing for
    the check; a plain subclass without attrs runs its base's and is built, as it always was.
    """
    setattr(cls, "_abstract_event", True)  # noqa: B010 - a marker no base declares
    init = vars(cls)["__init__"]  # the one attrs wrote for it

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self) is cls:
            raise TypeError(
                f"{cls.__name__} classifies events and cannot be built on its own; "
                f"build one of its members"
            )
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010 - mypy refuses an assigned method
    return cls


class _SnapshotRule(enum.Enum):
    REQUIRED = "required"  # a job-scoped family: no job, no event
    OPTIONAL = "optional"
    ABSENT = "absent"  # system and heartbeat events belong to no job (OBS-04)


# Module globals for what every event's construction reads: on CPython 3.11 a member read off
# an Enum class goes through EnumType's __getattr__ hook and is never specialised (about 900
# instructions a read).
_REQUIRED: Final = _SnapshotRule.REQUIRED
_ABSENT: Final = _SnapshotRule.ABSENT
_REJECTED: Final = LimiterEventType.REJECTED


def _check_snapshot(event: "JobEvent", attribute: "attrs.Attribute[Any]", value: object) -> None:
    # The type and the family's rule in one validator: every event pays it, several per job.
    rule = type(event)._snapshot_rule
    if value is None:
        if rule is _REQUIRED:
            raise ValueError(f"{type(event).__name__} is about a job and needs its snapshot")
        return
    if not isinstance(value, JobSnapshot):
        raise TypeError(
            f"'snapshot' must be a JobSnapshot or None (got {value!r} that is a "
            f"{type(value).__name__})"
        )
    if rule is _ABSENT:
        raise ValueError(f"{type(event).__name__} belongs to no job and carries no snapshot")


# --------------------------------------------------------------------------------------------
# The root and the families
# --------------------------------------------------------------------------------------------


@_abstract
@attrs.frozen(kw_only=True)
class JobEvent:
    """The root of every event the bus carries.

    ``snapshot`` is the job the event is about (``None`` for system and heartbeat events and
    for a limiter transition with no owning job); ``timestamp`` is the wall-clock instant it was
    built (``time.time()``). ``message`` is the event's log line, ``None`` when it has none.

    ``JobEvent`` is deliberately open: an application defines its own events as frozen attrs
    subclasses of it (or of a family), and the bus delivers them like any other.
    """

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.OPTIONAL

    snapshot: JobSnapshot | None = attrs.field(default=None, validator=_check_snapshot)
    """The job the event is about, as it stood when the event was built; ``None`` (the default)
    for an event that belongs to no job."""
    timestamp: float = attrs.field(
        factory=time.time,
        validator=attrs.validators.instance_of((float, int)),
    )
    """When the event was built, in wall-clock seconds since the epoch; ``time.time()`` unless
    given."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__bases__:
            if base.__dict__.get("__final__", False):
                raise TypeError(
                    f"{base.__name__} is a final event and cannot be subclassed; "
                    f"subclass JobEvent or one of its families instead"
                )

    @property
    def message(self) -> str | None:
        """The event's log line, or ``None`` when the event has nothing to say."""
        return None


@_abstract
@attrs.frozen(kw_only=True)
class HumanReadable(JobEvent):
    """Marker for an event written for a person to read.

    Progress and streaming events, the four retry events, user notifications, the workflow's
    completion, a chat message's completion and the two orchestrator transitions carry it;
    telemetry (scheduling, start, terminal, scheduler, limiter and heartbeat events) does not.
    Subscribe with ``event_type=HumanReadable`` to reach "anything a user can read" across
    families.
    """

    @property
    def human_message(self) -> str | None:
        """The text to show the person; the log line unless the event says otherwise."""
        return self.message

    @property
    def title(self) -> str | None:
        """A short heading for the text; the job's display name unless the event names one."""
        return self.snapshot.name if self.snapshot is not None else None

    @property
    def msg_type(self) -> MsgType:
        """What kind of message this is for a UI; ``STATUS_UPDATE`` unless the event says
        otherwise."""
        return MsgType.STATUS_UPDATE

    @property
    def job_state(self) -> JobState | None:
        """The job's state as the snapshot recorded it."""
        return self.snapshot.state if self.snapshot is not None else None


@_abstract
@attrs.frozen(kw_only=True)
class LifecycleEvent(JobEvent):
    """A job's state transitions as the runtime fires them: scheduled, started, terminal, idle."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.REQUIRED


@_abstract
@attrs.frozen(kw_only=True)
class TerminalEvent(LifecycleEvent):
    """The one event that ends a job's run.

    Every terminal event answers the run's attempts, LLM responses, metadata, completion time,
    duration, result and error. :class:`AbstractTerminalEvent` carries them for a job the
    dispatcher ran; :class:`DependencyFailureEvent` (a job that never ran) answers the defaults
    defined here: no responses, no metadata, timing from the snapshot.
    """

    @property
    def attempts(self) -> int:
        """How many attempts the run made."""
        return self.snapshot.attempt_number if self.snapshot is not None else 0

    @property
    def llm_responses(self) -> tuple[Any, ...]:
        """The LLM responses recorded during the run; empty, never ``None``."""
        return ()

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The run's metadata (wait times, costs...); empty, never ``None``."""
        return _EMPTY_METADATA

    @property
    def completion_time(self) -> float:
        """Wall-clock seconds at which the terminal state was reached."""
        if self.snapshot is not None and self.snapshot.ended_at is not None:
            return self.snapshot.ended_at
        return self.timestamp

    @property
    def duration(self) -> float:
        """Seconds from the snapshot's start to :attr:`completion_time`; 0.0 if never started."""
        if self.snapshot is None or self.snapshot.started_at is None:
            return 0.0
        return max(0.0, self.completion_time - self.snapshot.started_at)

    @property
    def result(self) -> Any:
        """The job's result, present on a completion only."""
        return None

    @property
    def error(self) -> BaseException | None:
        """The failure's exception, when the event carries one."""
        return None

    @property
    def cause(self) -> BaseException | None:
        """The error on a :class:`FailureEvent`; ``None`` otherwise, so a cancellation has none."""
        return self.error if isinstance(self, FailureEvent) else None


@_abstract
@attrs.frozen(kw_only=True)
class SuccessEvent(TerminalEvent):
    """Verdict marker: the run succeeded. Only :class:`JobCompletedEvent` carries it."""


@_abstract
@attrs.frozen(kw_only=True)
class FailureEvent(TerminalEvent):
    """Verdict marker: the run failed (a failure, a timeout, a failed dependency).

    A cancellation is a deliberate stop, neither a success nor a failure.
    """


@_abstract
@attrs.frozen(kw_only=True)
class WorkflowTerminationEvent(JobEvent):
    """A workflow has ended: workflow-scoped observers may clean themselves up.

    Parallel to :class:`LifecycleEvent`, not under it.
    """

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.REQUIRED


@_abstract
@attrs.frozen(kw_only=True)
class ProgressEvent(JobEvent):
    """User-visible progress and streamed content."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.REQUIRED


@_abstract
@attrs.frozen(kw_only=True)
class RetryEvent(JobEvent):
    """A job is being re-run transparently after an upstream signal."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.REQUIRED


@_abstract
@attrs.frozen(kw_only=True)
class NotificationEvent(JobEvent):
    """A discrete notification for the person behind a job."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.REQUIRED


@_abstract
@attrs.frozen(kw_only=True)
class OperationalEvent(JobEvent):
    """High-volume operational telemetry (admission's per-account transitions)."""


@_abstract
@attrs.frozen(kw_only=True)
class SystemEvent(JobEvent):
    """Framework-internal state changes; tied to no job, so never carries a snapshot."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.ABSENT


@_abstract
@attrs.frozen(kw_only=True)
class HeartbeatEvent(JobEvent):
    """The heartbeat control plane; tied to no job, so never carries a snapshot."""

    _snapshot_rule: ClassVar[_SnapshotRule] = _SnapshotRule.ABSENT


EVENT_FAMILIES: Final[tuple[type[JobEvent], ...]] = (
    LifecycleEvent,
    WorkflowTerminationEvent,
    ProgressEvent,
    RetryEvent,
    NotificationEvent,
    OperationalEvent,
    SystemEvent,
    HeartbeatEvent,
)
"""The eight families every framework event belongs to exactly one of, in the order
:func:`family_of` tries them."""


def family_of(event: JobEvent | type[JobEvent]) -> type[JobEvent] | None:
    """The family an event (or event class) belongs to, or ``None`` for one in no family.

    :class:`MessageCompleteEvent` and an application's direct ``JobEvent`` subclasses answer
    ``None``.
    """
    cls = event if isinstance(event, type) else type(event)
    for family in EVENT_FAMILIES:
        if issubclass(cls, family):
            return family
    return None


# --------------------------------------------------------------------------------------------
# Lifecycle
# --------------------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class JobScheduled(LifecycleEvent):
    """A job was accepted, or queued for execution.

    The dispatcher publishes it with ``state=ScheduledState.QUEUED``, the job's requirements and
    its priority. Built from a snapshot alone it is acceptance: ``ACCEPTED``, no requirements,
    priority 0. It has no message.
    """

    state: ScheduledState = attrs.field(
        default=ScheduledState.ACCEPTED, validator=attrs.validators.instance_of(ScheduledState)
    )
    """Acceptance or a place in a queue; ``ACCEPTED`` by default."""
    requirements: object | None = None
    """What admission must grant before the job runs (the dispatcher gives its
    :class:`~nucleo_trio.jobs.JobRequirements`); ``None`` by default."""
    priority: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))
    """The job's priority, higher first; 0 by default."""


@final
@attrs.frozen(kw_only=True)
class JobStartedEvent(LifecycleEvent):
    """An attempt of the job started; a job re-run three times publishes three of these."""

    attempt: int = attrs.field(validator=_positive_int)
    """Which attempt started, counting from 1."""

    @property
    def message(self) -> str:
        return f"Job started (attempt {self.attempt})"


@final
@attrs.frozen(kw_only=True)
class OrchestratorIdleEvent(LifecycleEvent, HumanReadable):
    """An orchestrator finished its current exchange and went idle; reads "Ready".

    Carries the exchange's LLM responses and metadata as given.
    """

    llm_responses: tuple[Any, ...] = attrs.field(default=(), converter=_freeze_responses)
    """The LLM responses of the exchange, as a tuple; empty by default, never ``None``."""
    metadata: Mapping[str, Any] = attrs.field(default=_EMPTY_METADATA, converter=_freeze_metadata)
    """The exchange's metadata, as a read-only copy; empty by default, never ``None``."""

    @property
    def message(self) -> str:
        return "Ready"


@final
@attrs.frozen(kw_only=True)
class OrchestratorResumedEvent(LifecycleEvent, HumanReadable):
    """An idle orchestrator took up work again; reads "Processing"."""

    @property
    def message(self) -> str:
        return "Processing"


# --------------------------------------------------------------------------------------------
# Terminal
# --------------------------------------------------------------------------------------------


def _default_attempts(self: "AbstractTerminalEvent") -> int:
    return self.snapshot.attempt_number if self.snapshot is not None else 0


def _default_completion_time(self: "AbstractTerminalEvent") -> float:
    return float(self.timestamp)


@_abstract
@attrs.frozen(kw_only=True)
class AbstractTerminalEvent(TerminalEvent):
    """The base of the four terminal events the dispatcher fires for a job it ran.

    Carries the attempt count (the snapshot's attempt number unless given), the LLM responses
    and metadata collected during the run (empty when none were given, never ``None``; both
    frozen at construction) and ``completion_time``, the wall-clock instant the terminal state
    was reached (the event's timestamp unless given). ``duration`` runs from the snapshot's
    ``started_at`` to that instant and is 0.0 for a job that never started.
    """

    attempts: int = attrs.field(
        default=attrs.Factory(_default_attempts, takes_self=True), validator=_non_negative_int
    )
    llm_responses: tuple[Any, ...] = attrs.field(default=(), converter=_freeze_responses)
    metadata: Mapping[str, Any] = attrs.field(default=_EMPTY_METADATA, converter=_freeze_metadata)
    completion_time: float = attrs.field(
        default=attrs.Factory(_default_completion_time, takes_self=True),
        validator=attrs.validators.instance_of((float, int)),
    )


@final
@attrs.frozen(kw_only=True)
class JobCompletedEvent(AbstractTerminalEvent, SuccessEvent):
    """The job completed; carries its result."""

    result: Any = None

    @property
    def message(self) -> str:
        return f"Job completed successfully (attempt {self.attempts})"


@final
@attrs.frozen(kw_only=True)
class JobFailedEvent(AbstractTerminalEvent, FailureEvent):
    """The job failed with an error (not a timeout, not a cancellation).

    Published for every failure, root or child, including a refusal at the door.
    """

    error: BaseException | None = attrs.field(default=None, validator=_optional_error)

    @property
    def message(self) -> str:
        return f"Job failed: {_error_text(self.error) or 'unknown error'}"


@final
@attrs.frozen(kw_only=True)
class JobTimedOut(AbstractTerminalEvent, FailureEvent):
    """The job exceeded its timeout. A failure with no error: what it carries is the budget."""

    timeout: float = attrs.field(validator=_non_negative_seconds)
    """The timeout the job ran past, in seconds."""

    @property
    def message(self) -> str:
        return f"Job timed out after {_seconds(self.timeout)} seconds"


def _default_cancel_message(self: "JobCancelled") -> str:
    return "Job forcefully cancelled" if self.force else "Job cancelled"


@final
@attrs.frozen(kw_only=True)
class JobCancelled(AbstractTerminalEvent):
    """The job was cancelled: a deliberate stop, neither success nor failure.

    Its message is "Job cancelled", or "Job forcefully cancelled" when ``force`` is set, unless
    the publisher states its own: the dispatcher says "Cancelled while queued: <reason>",
    "Workflow cancelled: <reason>" or "Cancelled by shutdown" for a job it takes out of a queue.
    """

    force: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Whether the cancellation was forced; ``False`` by default."""
    message: str = attrs.field(
        default=attrs.Factory(_default_cancel_message, takes_self=True),
        validator=attrs.validators.instance_of(str),
    )


@final
@attrs.frozen(kw_only=True)
class DependencyFailureEvent(FailureEvent):
    """The job failed because a job it depended on failed, before it ran.

    The one terminal event outside :class:`AbstractTerminalEvent`: no responses, no metadata,
    timing from the snapshot.
    """

    error: BaseException | None = attrs.field(default=None, validator=_optional_error)

    @property
    def message(self) -> str:
        if self.error is None:
            return "Job failed due to dependency failure: Unknown"
        return (
            "Job failed due to dependency failure: "
            f"{type(self.error).__name__}: {_error_text(self.error)}"
        )


# --------------------------------------------------------------------------------------------
# Workflow termination
# --------------------------------------------------------------------------------------------


def _default_workflow_reason(self: "WorkflowCompleteEvent") -> str:
    return "Workflow completed successfully" if self.successful else "Workflow failed"


@final
@attrs.frozen(kw_only=True)
class WorkflowCompleteEvent(WorkflowTerminationEvent, HumanReadable):
    """A root job settled and so its workflow ended; published for roots only.

    Carries the outcome and the reason, which is its message. Built from a snapshot alone it is
    a success reading "Workflow completed successfully".
    """

    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """Whether the root job succeeded; ``True`` by default."""
    reason: str = attrs.field(
        default=attrs.Factory(_default_workflow_reason, takes_self=True),
        validator=attrs.validators.instance_of(str),
    )
    """Why the workflow ended, which is the event's message; "Workflow completed successfully"
    or "Workflow failed" unless given."""

    @property
    def message(self) -> str:
        return self.reason

    @property
    def msg_type(self) -> MsgType:
        return MsgType.COMPLETING if self.successful else MsgType.FAILING

    @property
    def title(self) -> str:
        return "Workflow Complete" if self.successful else "Workflow Failed"


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------


def _percent(instance: object, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"percent must be an int from 0 to 100 or None, got {value!r}")
    if not 0 <= value <= 100:
        raise ValueError(f"percent must be from 0 to 100, got {value}")


def _display_name(self: JobEvent) -> str | None:
    return self.snapshot.name if self.snapshot is not None else None


@attrs.frozen(kw_only=True)
class JobProgressEvent(ProgressEvent, HumanReadable):
    """A job reported progress: a payload and, optionally, a percent.

    The message is the payload's text (``None`` for no payload); ``title`` is the job's display
    name unless given. ``msg_type`` follows the percent: none is ``STATUS_UPDATE``, 0
    ``STARTING``, 1-99 ``PROGRESSING``, 100 ``COMPLETING``. Open for subclassing, so an
    application can give its progress a payload of its own.
    """

    payload: Any = None
    """What the job reported, of any type; its ``str`` is the message. ``None`` by default."""
    percent: int | None = attrs.field(default=None, validator=_percent)
    """How far the job is, as an int from 0 to 100, or ``None`` (the default) when it did not
    say; another value raises."""
    title: str | None = attrs.field(
        default=attrs.Factory(_display_name, takes_self=True), validator=_optional_str
    )

    @property
    def has_progress(self) -> bool:
        """Whether a percent was given."""
        return self.percent is not None

    @property
    def message(self) -> str | None:
        return None if self.payload is None else str(self.payload)

    @property
    def msg_type(self) -> MsgType:
        if self.percent is None:
            return MsgType.STATUS_UPDATE
        if self.percent == 0:
            return MsgType.STARTING
        if self.percent >= 100:
            return MsgType.COMPLETING
        return MsgType.PROGRESSING


def _chunk_payload(self: "ContentStreamEvent") -> str | None:
    return self.chunk


def _chunk_percent(self: "ContentStreamEvent") -> int | None:
    return 100 if self.last else None


def _chunk_title(self: "ContentStreamEvent") -> str:
    return "Streaming Complete" if self.last else "Streaming Content"


@attrs.frozen(kw_only=True)
class ContentStreamEvent(JobProgressEvent):
    """One chunk of content streamed to the person watching a job.

    ``chunk`` is the text (also the payload) and ``last`` marks the final chunk, which is 100%.
    The log message is "Streaming chunk: <first 50 characters>", or "Streaming complete" on the
    last chunk; the human message is the chunk itself.
    """

    chunk: str | None = attrs.field(default=None, validator=_optional_str)
    """The streamed text, or ``None`` (the default) for a chunk with none."""
    last: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    """Whether this is the final chunk of the stream; ``False`` by default."""
    # Redeclared after chunk and last so their defaults can read them: the payload is the
    # chunk, the last chunk is 100%, and the title says which kind of chunk it is.
    payload: Any = attrs.field(init=False, default=attrs.Factory(_chunk_payload, takes_self=True))
    """The chunk itself; not a constructor argument."""
    percent: int | None = attrs.field(
        init=False, default=attrs.Factory(_chunk_percent, takes_self=True)
    )
    """100 on the last chunk, ``None`` on the others; not a constructor argument."""
    title: str | None = attrs.field(
        init=False, default=attrs.Factory(_chunk_title, takes_self=True)
    )

    @property
    def message(self) -> str:
        if self.last:
            return "Streaming complete"
        return f"Streaming chunk: {(self.chunk or '')[:50]}"

    @property
    def human_message(self) -> str:
        if self.chunk is not None:
            return self.chunk
        return "Stream completed" if self.last else "Streaming..."

    @property
    def msg_type(self) -> MsgType:
        return MsgType.COMPLETING if self.last else MsgType.PROGRESSING


def _tool_call_payload(self: "ToolCallStreamEvent") -> dict[str, Any]:
    return {
        "index": self.index,
        "id": self.call_id,
        "name": self.name,
        "arguments": self.arguments,
    }


@final
@attrs.frozen(kw_only=True)
class ToolCallStreamEvent(JobProgressEvent):
    """One fragment of a tool call a model is streaming, published by the model call's job as
    it arrives.

    A reply may call several tools; ``index`` says which (0 for the first), so the fragments
    of one call are those of one index, in order. ``call_id`` is the call's id on the fragment
    that first says it (``None`` on the others), and ``name`` and ``arguments`` are the pieces
    of the tool's name and of its JSON arguments this fragment adds (``""`` when it adds none):
    joined in order they are the call's whole name and arguments. The payload is the four as a
    mapping; the message is "Streaming tool call <index>: <name and the first 50 characters of
    the arguments>".
    """

    index: int = attrs.field(validator=_non_negative_int)
    """Which of the reply's tool calls the fragment belongs to: 0 for the first; an int >= 0."""
    call_id: str | None = attrs.field(default=None, validator=_optional_str)
    """The call's id, on the fragment that says it; ``None`` (the default) on the others."""
    name: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    """The piece of the tool's name this fragment adds; ``""`` by default."""
    arguments: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    """The piece of the call's JSON arguments this fragment adds; ``""`` by default."""
    payload: Any = attrs.field(
        init=False, default=attrs.Factory(_tool_call_payload, takes_self=True)
    )
    """``{"index", "id", "name", "arguments"}``; not a constructor argument."""
    percent: int | None = attrs.field(init=False, default=None)
    """Always ``None``; not a constructor argument."""
    title: str | None = attrs.field(init=False, default="Streaming Tool Call")
    """``"Streaming Tool Call"``; not a constructor argument."""

    @property
    def message(self) -> str:
        return f"Streaming tool call {self.index}: {self.name}{self.arguments[:50]}"

    @property
    def human_message(self) -> str:
        return self.name + self.arguments

    @property
    def msg_type(self) -> MsgType:
        return MsgType.PROGRESSING


# --------------------------------------------------------------------------------------------
# Retry
# --------------------------------------------------------------------------------------------


def _delay_text(delay: float | None) -> str:
    # An estimated delay that is not known reads as zero seconds.
    return _seconds(delay if delay is not None else 0)


@final
@attrs.frozen(kw_only=True)
class RateLimitRetryEvent(RetryEvent, HumanReadable):
    """An upstream rate limit (a 429) is being waited out before the attempt re-runs.

    ``attempt`` is the attempt about to run, ``delay`` the estimated wait in seconds (``None``
    when unknown), ``reason`` the limit in the upstream's words, ``model`` the model hit.
    """

    attempt: int = attrs.field(validator=_positive_int)
    """The attempt about to run, counting from 1 (the first re-run is attempt 2)."""
    delay: float | None = attrs.field(default=None, validator=_optional_non_negative_seconds)
    """The estimated wait before the re-run, in seconds, or ``None`` (the default) when not
    known; it reads as 0 in the message."""
    reason: str = attrs.field(default="rate limited", validator=attrs.validators.instance_of(str))
    """The limit, in the upstream's words; "rate limited" by default."""
    model: str | None = attrs.field(default=None, validator=_optional_str)
    """The model whose limit was hit, or ``None`` (the default)."""

    @property
    def message(self) -> str:
        on = f" for {self.model}" if self.model else ""
        return (
            f"Hit rate limit{on}: {self.reason}. "
            f"Retrying in ~{_delay_text(self.delay)} seconds (attempt {self.attempt})"
        )

    @property
    def title(self) -> str:
        return "Rate Limit Retry"


@final
@attrs.frozen(kw_only=True)
class TransientErrorRetryEvent(RetryEvent, HumanReadable):
    """A transient upstream fault (a 5xx, or a 529 overload) is being retried.

    ``reason`` carries the upstream's words, which say which kind of fault it was.
    """

    attempt: int = attrs.field(validator=_positive_int)
    """The attempt about to run, counting from 1 (the first re-run is attempt 2)."""
    delay: float | None = attrs.field(default=None, validator=_optional_non_negative_seconds)
    """The estimated wait before the re-run, in seconds, or ``None`` (the default) when not
    known; it reads as 0 in the message."""
    reason: str = attrs.field(default="server error", validator=attrs.validators.instance_of(str))
    """The fault, in the upstream's words; "server error" by default."""
    provider: str | None = attrs.field(default=None, validator=_optional_str)
    """The provider that failed, or ``None`` (the default)."""

    @property
    def message(self) -> str:
        source = f" from {self.provider}" if self.provider else ""
        return (
            f"Server error{source}: {self.reason}. "
            f"Retrying in ~{_delay_text(self.delay)} seconds (attempt {self.attempt})"
        )

    @property
    def title(self) -> str:
        return "Server Error Retry"


@final
@attrs.frozen(kw_only=True)
class OutputTruncationRetryEvent(RetryEvent, HumanReadable):
    """A reply stopped at its token budget; the attempt re-runs with a larger one."""

    attempt: int = attrs.field(validator=_positive_int)
    """The attempt about to run, counting from 1 (the first re-run is attempt 2)."""
    reason: str = attrs.field(
        default="output truncated", validator=attrs.validators.instance_of(str)
    )
    """Why the re-run, in words; "output truncated" by default."""
    model: str | None = attrs.field(default=None, validator=_optional_str)
    """The model whose reply was cut, or ``None`` (the default)."""
    previous_budget: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive_int)
    )
    """The output budget the cut reply had, in tokens, or ``None`` (the default)."""
    new_budget: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive_int)
    )
    """The output budget of the re-run, in tokens, or ``None`` (the default)."""

    @property
    def message(self) -> str:
        at = f" at {self.previous_budget} tokens" if self.previous_budget is not None else ""
        on = f" on {self.model}" if self.model else ""
        budget = f" with budget {self.new_budget}" if self.new_budget is not None else ""
        return (
            f"Output truncated{at}{on} ({self.reason}). Retrying{budget} (attempt {self.attempt})"
        )

    @property
    def title(self) -> str:
        return "Output Truncation Retry"


@final
@attrs.frozen(kw_only=True)
class ResponseCorrectionRetryEvent(RetryEvent, HumanReadable):
    """A reply failed to parse or validate; the attempt re-runs with a correction appended."""

    attempt: int = attrs.field(validator=_positive_int)
    """The attempt about to run, counting from 1 (the first re-run is attempt 2)."""
    reason: str = attrs.field(
        default="invalid response", validator=attrs.validators.instance_of(str)
    )
    """What was wrong with the reply; "invalid response" by default."""
    model: str | None = attrs.field(default=None, validator=_optional_str)
    """The model whose reply failed, or ``None`` (the default)."""

    @property
    def message(self) -> str:
        on = f" on {self.model}" if self.model else ""
        return (
            f"Response{on} failed to parse or validate ({self.reason}). "
            f"Retrying with correction (attempt {self.attempt})"
        )

    @property
    def title(self) -> str:
        return "Response Correction Retry"


# --------------------------------------------------------------------------------------------
# Notification
# --------------------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class UserNotificationEvent(NotificationEvent, HumanReadable):
    """A discrete notification for the person behind a job, at a given severity.

    The message is ``text``; ``msg_type`` follows the severity: an error is ``ERROR``,
    a success ``COMPLETING``, a warning or an info ``MESSAGE``. ``details`` is optional
    structured data.
    """

    severity: Severity = attrs.field(validator=attrs.validators.instance_of(Severity))
    """How much the notification asks of the person; it sets ``msg_type``."""
    title: str = attrs.field(validator=attrs.validators.instance_of(str))
    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    """The notification itself, which is the event's message."""
    details: object | None = None
    """Structured data to go with the text, of any type; ``None`` by default."""

    @property
    def message(self) -> str:
        return self.text

    @property
    def msg_type(self) -> MsgType:
        return _SEVERITY_MSG_TYPES[self.severity]


_SEVERITY_MSG_TYPES: Final = {
    Severity.ERROR: MsgType.ERROR,
    Severity.SUCCESS: MsgType.COMPLETING,
    Severity.WARNING: MsgType.MESSAGE,
    Severity.INFO: MsgType.MESSAGE,
}


# --------------------------------------------------------------------------------------------
# Operational
# --------------------------------------------------------------------------------------------


def _reject_reason(instance: "LimiterEvent", attribute: Any, value: str | None) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"reject_reason must be a string or None, got {value!r}")
    if instance.type is _REJECTED and not value:
        raise ValueError("a REJECTED limiter event needs its reject_reason")


@final
@attrs.frozen(kw_only=True)
class LimiterEvent(OperationalEvent):
    """One admission transition on one account: a job held, granted, refused or released.

    ``snapshot`` is the waiting job's, or ``None`` when no job owns the transition. Only
    admission builds these.
    """

    # OBS-13 and EVT-02: the fields and their order.
    limiter_name: str = attrs.field(validator=attrs.validators.instance_of(str))
    """The name of the account."""
    limiter_category: str = attrs.field(validator=attrs.validators.instance_of(str))
    """The account's kind: ``memory``, ``token_bucket``, ``elastic_window`` or ``semaphore`` for
    the built-in accounts, or the name a plugin's own kind gives."""
    capacity: int | float = attrs.field(validator=attrs.validators.instance_of((int, float)))
    """How much the account holds in all, in its own units (such as tokens, bytes or permits)."""
    in_use: int | float = attrs.field(validator=attrs.validators.instance_of((int, float)))
    """How much of the capacity is taken after the transition, in the same units."""
    waiters: int = attrs.field(validator=_non_negative_int)
    """How many jobs wait on the account after the transition."""
    type: LimiterEventType = attrs.field(validator=attrs.validators.instance_of(LimiterEventType))
    """Which transition it is."""
    wait: float = attrs.field(default=0.0, validator=_non_negative_seconds)
    """Seconds the job was held; non-zero only on ``GRANTED_FROM_HOLD`` and on a ``REJECTED``
    after ``HELD``. 0.0 by default."""
    reject_reason: str | None = attrs.field(default=None, validator=_reject_reason)
    """Why a ``REJECTED`` job left without a grant: ``cancelled``, ``shutdown``,
    ``circuit_blocked`` or ``aborted``. Required on ``REJECTED``; ``None`` by default."""
    status_indicator: str | None = attrs.field(default=None, validator=_optional_str)
    """The account's state when it is not nominal, such as ``blocked`` or ``throttle:2.0x``;
    ``None`` (the default) when nominal."""
    amount: int | float = attrs.field(
        default=1, validator=attrs.validators.instance_of((int, float))
    )
    """How much moved: the tokens granted or asked, or 1 per permit. 1 by default."""

    @property
    def message(self) -> str:
        name, kind = self.limiter_name, self.type
        if kind is LimiterEventType.HELD:
            return f"{name} HELD ({self.in_use}/{self.capacity}, waiters={self.waiters})"
        if kind is LimiterEventType.GRANTED_IMMEDIATE:
            return f"{name} GRANTED ({self.in_use}/{self.capacity})"
        if kind is LimiterEventType.GRANTED_FROM_HOLD:
            # Whole milliseconds, truncated; the rounding keeps 0.07 s from reading 69 ms.
            return f"{name} GRANTED after {int(round(self.wait * 1000, 6))}ms"
        if kind is LimiterEventType.REJECTED:
            return f"{name} REJECTED ({self.reject_reason})"
        return f"{name} RELEASED ({self.in_use}/{self.capacity})"


# EVT-13: one rule adds up a demand's amounts.
amount_of = units_of
"""Add up the amounts of a demand the way limiter events report them; the same function as
:func:`nucleo_trio.admission.units_of`."""


# --------------------------------------------------------------------------------------------
# System
# --------------------------------------------------------------------------------------------


def _default_scheduler_message(self: "SchedulerEvent") -> str:
    if self.type is SchedulerEventType.ERROR:
        return f"Scheduler error: {_error_text(self.error) or 'Unknown'}"
    return self.type.default_message


@final
@attrs.frozen(kw_only=True)
class SchedulerEvent(SystemEvent):
    """The scheduler started, is stopping, stopped, or hit an error.

    Each type has a default message ("Job scheduler started", ...); an error reads
    "Scheduler error: <message>" (or "Unknown"). A caller may state its own message.
    """

    type: SchedulerEventType = attrs.field(
        validator=attrs.validators.instance_of(SchedulerEventType)
    )
    """Which transition it is."""
    error: BaseException | None = attrs.field(default=None, validator=_optional_error)
    """The error the scheduler hit, on an ``ERROR`` event; ``None`` by default."""
    message: str = attrs.field(
        default=attrs.Factory(_default_scheduler_message, takes_self=True),
        validator=attrs.validators.instance_of(str),
    )


# --------------------------------------------------------------------------------------------
# Heartbeat
# --------------------------------------------------------------------------------------------


def _minted_heartbeat(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, MintedHeartbeat):
        raise TypeError(f"{attribute.name} must be a Heartbeat, got {type(value).__name__}")
    if not is_genuine(value):
        raise TypeError(
            f"{attribute.name} is a forged Heartbeat: only JobContext.publish (from an "
            "orchestrator) and JobDispatcher.schedule_heartbeat mint one"
        )


def _heartbeat_id(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{attribute.name} must be a non-blank heartbeat id, got {value!r}")


@final
@attrs.frozen(kw_only=True)
class HeartbeatRequested(HeartbeatEvent):
    """A minted heartbeat on its way to the Heart, which stores it.

    Only the two mints make the :class:`~nucleo_trio.heartbeat.Heartbeat` it carries, so
    publishing one can only replay a schedule someone with authority already made.
    """

    heartbeat: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat to store. One not made by a mint raises :class:`TypeError`."""


@final
@attrs.frozen(kw_only=True)
class CancelHeartbeat(HeartbeatEvent):
    """Remove the heartbeat ``heartbeat_id`` from the schedule.

    Anyone may publish it, on the bus or through ``context.publish``: it can only take a
    schedule away, never add authority to one. An id that is not scheduled is no error.
    """

    heartbeat_id: str = attrs.field(validator=_heartbeat_id)
    """The id of the heartbeat to remove; a blank id raises :class:`ValueError`."""


@final
@attrs.frozen(kw_only=True)
class HeartbeatScheduled(HeartbeatEvent):
    """The Heart stored a heartbeat under an id that was free: "Heartbeat scheduled: <hb>"."""

    heartbeat: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat the Heart stored."""

    @property
    def message(self) -> str:
        return f"Heartbeat scheduled: {self.heartbeat}"


@final
@attrs.frozen(kw_only=True)
class HeartbeatRebound(HeartbeatEvent):
    """A heartbeat replaced the one scheduled under the same id (most recent wins).

    ``displaced`` is the one it replaced; reads "Heartbeat rebound: <id> (was <old instant>,
    now <new instant>)".
    """

    heartbeat: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat now scheduled under the id."""
    displaced: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat it replaced."""

    @property
    def message(self) -> str:
        was = format_instant(self.displaced.run_at)
        now = format_instant(self.heartbeat.run_at)
        return f"Heartbeat rebound: {self.heartbeat.id} (was {was}, now {now})"


@final
@attrs.frozen(kw_only=True)
class HeartbeatFired(HeartbeatEvent):
    """A heartbeat's job was admitted through the door: "Heartbeat fired: <id> -> job <job id>".

    ``job_id`` links the schedule to its run: every event of that job carries it.
    """

    heartbeat: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat that fired."""
    job_id: str = attrs.field(validator=attrs.validators.instance_of(str))
    """The id of the job the fire submitted."""

    @property
    def heartbeat_id(self) -> str:
        """The id of the heartbeat that fired."""
        return self.heartbeat.id

    @property
    def message(self) -> str:
        return f"Heartbeat fired: {self.heartbeat.id} -> job {self.job_id}"


@final
@attrs.frozen(kw_only=True)
class HeartbeatFireFailed(HeartbeatEvent):
    """A heartbeat's fire failed before its job ran: "Heartbeat fire failed: <id> - <failure>".

    The job could not be built, refused its conversation or input, or was refused at the door.
    A recurring heartbeat is still scheduled at its next slot.
    """

    heartbeat: "Heartbeat" = attrs.field(validator=_minted_heartbeat)
    """The heartbeat whose fire failed."""
    error: BaseException = attrs.field(validator=attrs.validators.instance_of(BaseException))
    """Why the fire failed."""

    @property
    def heartbeat_id(self) -> str:
        """The id of the heartbeat whose fire failed."""
        return self.heartbeat.id

    @property
    def message(self) -> str:
        return f"Heartbeat fire failed: {self.heartbeat.id} - {_error_text(self.error)}"


# --------------------------------------------------------------------------------------------
# Outside every family
# --------------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class MessageCompleteEvent(HumanReadable):
    """One message exchange of a chat session is done; the conversation continues.

    In no family, so it reaches only subscribers that ask for it by type (or for
    :class:`HumanReadable`) and those that take every event. Reads "Message processed" or
    "Message processing failed", with the error's description on a failure.
    """

    successful: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """Whether the exchange succeeded; ``True`` by default."""
    error_message: str | None = attrs.field(default=None, validator=_optional_str)
    """What went wrong, on a failure; ``None`` by default."""

    @property
    def message(self) -> str:
        return "Message processed" if self.successful else "Message processing failed"

    @property
    def msg_type(self) -> MsgType:
        return MsgType.COMPLETING if self.successful else MsgType.FAILING

    @property
    def title(self) -> str:
        return "Message Complete" if self.successful else "Message Failed"
