"""The dispatcher: door, lanes, the attempt pipeline, timeouts, re-runs, shutdown."""

from .dispatcher import (
    MAX_CORRECTION_RETRIES as MAX_CORRECTION_RETRIES,
)
from .dispatcher import (
    OBS_CALLER_CLASS as OBS_CALLER_CLASS,
)
from .dispatcher import (
    DelayedSubmission as DelayedSubmission,
)
from .dispatcher import (
    DispatcherConfig as DispatcherConfig,
)
from .dispatcher import (
    JobDispatcher as JobDispatcher,
)
from .dispatcher import (
    open_dispatcher as open_dispatcher,
)
from .lanes import (
    PRIORITY_LANE_MAX_TIMEOUT as PRIORITY_LANE_MAX_TIMEOUT,
)
from .lanes import (
    grace_period as grace_period,
)
from .seams import (
    DemandAssembler as DemandAssembler,
)
from .seams import (
    GuardrailEnforcer as GuardrailEnforcer,
)
from .seams import (
    NoGuardrails as NoGuardrails,
)
from .seams import (
    StandardDemandAssembler as StandardDemandAssembler,
)

__all__ = [
    "MAX_CORRECTION_RETRIES",
    "OBS_CALLER_CLASS",
    "PRIORITY_LANE_MAX_TIMEOUT",
    "DelayedSubmission",
    "DemandAssembler",
    "DispatcherConfig",
    "GuardrailEnforcer",
    "JobDispatcher",
    "NoGuardrails",
    "StandardDemandAssembler",
    "grace_period",
    "open_dispatcher",
]
