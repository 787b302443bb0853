"""Jobs, their identity, state, requirements, context and handle."""

from .carrier import ConversationCarrier as ConversationCarrier
from .context import (
    META_ADMISSION_WAIT_MS as META_ADMISSION_WAIT_MS,
    META_WAIT_TIMES as META_WAIT_TIMES,
    CancellationToken as CancellationToken,
    JobContext as JobContext,
    current_job as current_job,
)
from .guarded import GuardedExecution as GuardedExecution
from .handle import JobHandle as JobHandle
from .identity import (
    Identifiable as Identifiable,
    WorkflowRoot as WorkflowRoot,
    workflow as workflow,
)
from .job import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    DEFAULT_UPSTREAM_RETRIES as DEFAULT_UPSTREAM_RETRIES,
    META_ITERATION as META_ITERATION,
    AbstractJob as AbstractJob,
    Doer as Doer,
    Orchestrator as Orchestrator,
    ScopeAuthority as ScopeAuthority,
    Tool as Tool,
    display_name as display_name,
    tool_description as tool_description,
)
from .requirements import (
    JobRequirements as JobRequirements,
    LimiterRequirement as LimiterRequirement,
)
from .snapshot import JobSnapshot as JobSnapshot
from .state import JobState as JobState, JobType as JobType
from .stoppable import AbstractStoppable as AbstractStoppable

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_UPSTREAM_RETRIES",
    "META_ADMISSION_WAIT_MS",
    "META_ITERATION",
    "META_WAIT_TIMES",
    "AbstractJob",
    "AbstractStoppable",
    "CancellationToken",
    "ConversationCarrier",
    "Doer",
    "GuardedExecution",
    "Identifiable",
    "JobContext",
    "JobHandle",
    "JobRequirements",
    "JobSnapshot",
    "JobState",
    "JobType",
    "LimiterRequirement",
    "Orchestrator",
    "ScopeAuthority",
    "Tool",
    "WorkflowRoot",
    "current_job",
    "display_name",
    "tool_description",
    "workflow",
]
