"""The typed event bus: the events the runtime tells, the bus that carries them, observers.

``events`` defines every event and its family; ``bus`` the :class:`MessageBus` that delivers
them, one queue and one task per subscription; ``observers`` the :class:`JobObserver` base and
the workflow-scoped :class:`AbstractWorkflowObserver`.
"""

from .bus import DRAIN_TIMEOUT as DRAIN_TIMEOUT
from .bus import NOOP_SUBSCRIPTION_ID as NOOP_SUBSCRIPTION_ID
from .bus import QUEUE_CAPACITY as QUEUE_CAPACITY
from .bus import SWEEP_INTERVAL as SWEEP_INTERVAL
from .bus import MessageBus as MessageBus
from .bus import Subscription as Subscription
from .bus import open_message_bus as open_message_bus
from .events import EVENT_FAMILIES as EVENT_FAMILIES
from .events import AbstractTerminalEvent as AbstractTerminalEvent
from .events import ContentStreamEvent as ContentStreamEvent
from .events import DependencyFailureEvent as DependencyFailureEvent
from .events import FailureEvent as FailureEvent
from .events import HeartbeatEvent as HeartbeatEvent
from .events import HumanReadable as HumanReadable
from .events import JobCancelled as JobCancelled
from .events import JobCompletedEvent as JobCompletedEvent
from .events import JobEvent as JobEvent
from .events import JobFailedEvent as JobFailedEvent
from .events import JobProgressEvent as JobProgressEvent
from .events import JobScheduled as JobScheduled
from .events import JobStartedEvent as JobStartedEvent
from .events import JobTimedOut as JobTimedOut
from .events import LifecycleEvent as LifecycleEvent
from .events import LimiterEvent as LimiterEvent
from .events import MessageCompleteEvent as MessageCompleteEvent
from .events import MsgType as MsgType
from .events import NotificationEvent as NotificationEvent
from .events import OperationalEvent as OperationalEvent
from .events import OrchestratorIdleEvent as OrchestratorIdleEvent
from .events import OrchestratorResumedEvent as OrchestratorResumedEvent
from .events import OutputTruncationRetryEvent as OutputTruncationRetryEvent
from .events import ProgressEvent as ProgressEvent
from .events import RateLimitRetryEvent as RateLimitRetryEvent
from .events import ResponseCorrectionRetryEvent as ResponseCorrectionRetryEvent
from .events import RetryEvent as RetryEvent
from .events import ScheduledState as ScheduledState
from .events import SchedulerEvent as SchedulerEvent
from .events import SchedulerEventType as SchedulerEventType
from .events import Severity as Severity
from .events import SuccessEvent as SuccessEvent
from .events import SystemEvent as SystemEvent
from .events import TerminalEvent as TerminalEvent
from .events import TransientErrorRetryEvent as TransientErrorRetryEvent
from .events import UserNotificationEvent as UserNotificationEvent
from .events import WorkflowCompleteEvent as WorkflowCompleteEvent
from .events import WorkflowTerminationEvent as WorkflowTerminationEvent
from .events import amount_of as amount_of
from .events import family_of as family_of
from .observers import AbstractWorkflowObserver as AbstractWorkflowObserver
from .observers import JobObserver as JobObserver

__all__ = [
    "DRAIN_TIMEOUT",
    "EVENT_FAMILIES",
    "NOOP_SUBSCRIPTION_ID",
    "QUEUE_CAPACITY",
    "SWEEP_INTERVAL",
    "AbstractTerminalEvent",
    "AbstractWorkflowObserver",
    "ContentStreamEvent",
    "DependencyFailureEvent",
    "FailureEvent",
    "HeartbeatEvent",
    "HumanReadable",
    "JobCancelled",
    "JobCompletedEvent",
    "JobEvent",
    "JobFailedEvent",
    "JobObserver",
    "JobProgressEvent",
    "JobScheduled",
    "JobStartedEvent",
    "JobTimedOut",
    "LifecycleEvent",
    "LimiterEvent",
    "MessageBus",
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
    "Subscription",
    "SuccessEvent",
    "SystemEvent",
    "TerminalEvent",
    "TransientErrorRetryEvent",
    "UserNotificationEvent",
    "WorkflowCompleteEvent",
    "WorkflowTerminationEvent",
    "amount_of",
    "family_of",
    "open_message_bus",
]
