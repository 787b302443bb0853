"""Admission: whole-demand grants over accounts that never block.

``limiter`` holds the account contract (:class:`RateLimiter`, :class:`LimiterIdentity`,
:class:`AbstractRateLimiter`, :class:`Replenishment`); ``gates`` the unit-permit
:class:`CountingGate`; ``demand`` the :class:`Demand` a job asks for and the :class:`Grant` it
gets; ``monitor`` the :class:`Admission` line and its evaluator; ``memory`` the memory account's
seam and its default, :class:`UnboundedMemory`; ``status`` the frozen status records.
"""

from .demand import (
    Demand as Demand,
    DemandEntry as DemandEntry,
    Grant as Grant,
    units_of as units_of,
)
from .elastic_window import (
    Circuit as Circuit,
    CircuitState as CircuitState,
    ElasticWindow as ElasticWindow,
    ElasticWindowStatus as ElasticWindowStatus,
    format_window as format_window,
)
from .gates import CountingGate as CountingGate
from .limiter import (
    AbstractRateLimiter as AbstractRateLimiter,
    LimiterEventType as LimiterEventType,
    LimiterIdentity as LimiterIdentity,
    RateLimiter as RateLimiter,
    Replenishment as Replenishment,
)
from .memory import UnboundedMemory as UnboundedMemory
from .monitor import (
    Admission as Admission,
    AdmissionClosedError as AdmissionClosedError,
    AdmissionWaiter as AdmissionWaiter,
    LimiterEmitter as LimiterEmitter,
    Ticket as Ticket,
)
from .named_gates import (
    DatabaseGate as DatabaseGate,
    HttpConnectionGate as HttpConnectionGate,
    ModelGate as ModelGate,
    StdioEndpointGate as StdioEndpointGate,
    StdioPoolGate as StdioPoolGate,
)
from .status import (
    RateLimiterStatus as RateLimiterStatus,
    SemaphoreLimiterStatus as SemaphoreLimiterStatus,
    UnboundedMemoryStatus as UnboundedMemoryStatus,
)
from .token_bucket import (
    TokenBucket as TokenBucket,
    TokenBucketConfig as TokenBucketConfig,
    TokenBucketStatus as TokenBucketStatus,
)

__all__ = [
    "StdioPoolGate",
    "StdioEndpointGate",
    "ModelGate",
    "HttpConnectionGate",
    "DatabaseGate",
    "AbstractRateLimiter",
    "Admission",
    "AdmissionClosedError",
    "AdmissionWaiter",
    "Circuit",
    "CircuitState",
    "CountingGate",
    "Demand",
    "DemandEntry",
    "ElasticWindow",
    "ElasticWindowStatus",
    "Grant",
    "LimiterEmitter",
    "LimiterEventType",
    "LimiterIdentity",
    "RateLimiter",
    "RateLimiterStatus",
    "Replenishment",
    "SemaphoreLimiterStatus",
    "Ticket",
    "TokenBucket",
    "TokenBucketConfig",
    "TokenBucketStatus",
    "UnboundedMemory",
    "UnboundedMemoryStatus",
    "format_window",
    "units_of",
]
