"""Jobs, their identity, state, requirements, context and handle."""

from .context import (
    META_ADMISSION_WAIT_MS as META_ADMISSION_WAIT_MS,
)
from .context import (
    META_WAIT_TIMES as META_WAIT_TIMES,
)
from .context import (
    CancellationToken as CancellationToken,
)
from .context import (
    JobContext as JobContext,
)
from .context import (
    current_job as current_job,
)
from .handle import JobHandle as JobHandle
from .identity import (
    Identifiable as Identifiable,
)
from .identity import (
    WorkflowRoot as WorkflowRoot,
)
from .identity import (
    workflow as workflow,
)
from .job import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
)
from .job import (
    DEFAULT_UPSTREAM_RETRIES as DEFAULT_UPSTREAM_RETRIES,
)
from .job import (
    META_ITERATION as META_ITERATION,
)
from .job import (
    AbstractJob as AbstractJob,
)
from .job import (
    Doer as Doer,
)
from .job import (
    Orchestrator as Orchestrator,
)
from .job import (
    ScopeAuthority as ScopeAuthority,
)
from .job import (
    Tool as Tool,
)
from .job import (
    display_name as display_name,
)
from .job import (
    tool_description as tool_description,
)
from .requirements import (
    JobRequirements as JobRequirements,
)
from .requirements import (
    LimiterRequirement as LimiterRequirement,
)
from .snapshot import JobSnapshot as JobSnapshot
from .state import JobState as JobState
from .state import JobType as JobType
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
    "Doer",
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
