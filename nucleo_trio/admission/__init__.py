"""Admission: whole-demand grants over accounts that never block.

``limiter`` holds the account contract (:class:`RateLimiter`, :class:`LimiterIdentity`,
:class:`AbstractRateLimiter`, :class:`Replenishment`); ``gates`` the :class:`CountingGate` (a
number of permits, a job asking for several); ``demand`` the :class:`Demand` a job asks for and
the :class:`Grant` it gets; ``monitor`` the :class:`Admission` line and its evaluator;
``memory`` the memory account's seam and its no-op, :class:`UnboundedMemory`; ``memory_gate``
the :class:`MemoryPressureGate`, which reads memory through a :class:`MemoryReader` from
``memory_reader``; ``rate_limit`` the plain "N per period" account, :class:`RateLimit`;
``status`` the frozen status records.
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
from .memory_gate import MemoryPressureGate as MemoryPressureGate
from .memory_reader import (
    MemoryReader as MemoryReader,
    MemoryReading as MemoryReading,
    ProcessMemoryReader as ProcessMemoryReader,
    parse_memory_limit as parse_memory_limit,
)
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
from .rate_limit import RateLimit as RateLimit, RateLimitStatus as RateLimitStatus
from .registry import ModelLimits as ModelLimits, RateLimiterRegistry as RateLimiterRegistry
from .status import (
    MemoryPressureStatus as MemoryPressureStatus,
    MemoryZone as MemoryZone,
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
    "MemoryPressureGate",
    "MemoryPressureStatus",
    "MemoryReader",
    "MemoryReading",
    "MemoryZone",
    "ProcessMemoryReader",
    "RateLimit",
    "RateLimitStatus",
    "RateLimiter",
    "RateLimiterStatus",
    "RateLimiterRegistry",
    "ModelLimits",
    "Replenishment",
    "SemaphoreLimiterStatus",
    "Ticket",
    "TokenBucket",
    "TokenBucketConfig",
    "TokenBucketStatus",
    "UnboundedMemory",
    "UnboundedMemoryStatus",
    "format_window",
    "parse_memory_limit",
    "units_of",
]
