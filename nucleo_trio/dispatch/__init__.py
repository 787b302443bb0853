"""The dispatcher: door, lanes, the attempt pipeline, timeouts, re-runs, shutdown."""

from .config import (
    DatabaseConfig as DatabaseConfig,
    DispatcherConfig as DispatcherConfig,
    HeartbeatConfig as HeartbeatConfig,
    LimiterConfig as LimiterConfig,
    MemoryConfig as MemoryConfig,
    ModelProviderConfig as ModelProviderConfig,
)
from .dispatcher import (
    MAX_CORRECTION_RETRIES as MAX_CORRECTION_RETRIES,
    OBS_CALLER_CLASS as OBS_CALLER_CLASS,
    DelayedSubmission as DelayedSubmission,
    JobDispatcher as JobDispatcher,
    open_dispatcher as open_dispatcher,
)
from .lanes import (
    PRIORITY_LANE_MAX_TIMEOUT as PRIORITY_LANE_MAX_TIMEOUT,
    grace_period as grace_period,
)
from .lifecycle import DispatcherState as DispatcherState
from .seams import (
    DemandAssembler as DemandAssembler,
    GuardrailEnforcer as GuardrailEnforcer,
    NoGuardrails as NoGuardrails,
    StandardDemandAssembler as StandardDemandAssembler,
)

__all__ = [
    "MAX_CORRECTION_RETRIES",
    "OBS_CALLER_CLASS",
    "PRIORITY_LANE_MAX_TIMEOUT",
    "DatabaseConfig",
    "DelayedSubmission",
    "DemandAssembler",
    "DispatcherConfig",
    "DispatcherState",
    "GuardrailEnforcer",
    "HeartbeatConfig",
    "JobDispatcher",
    "LimiterConfig",
    "MemoryConfig",
    "ModelProviderConfig",
    "NoGuardrails",
    "StandardDemandAssembler",
    "grace_period",
    "open_dispatcher",
]
