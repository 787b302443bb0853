"""Admission: whole-demand grants over accounts that never block.

``limiter`` holds the account contract (:class:`RateLimiter`, :class:`LimiterIdentity`,
:class:`AbstractRateLimiter`, :class:`Replenishment`); ``gates`` the unit-permit
:class:`CountingGate`; ``demand`` the :class:`Demand` a job asks for and the :class:`Grant` it
gets; ``monitor`` the :class:`Admission` line and its evaluator; ``memory`` the memory account's
seam and its default, :class:`UnboundedMemory`; ``status`` the frozen status records.
"""

from .demand import Demand as Demand
from .demand import DemandEntry as DemandEntry
from .demand import Grant as Grant
from .demand import units_of as units_of
from .gates import CountingGate as CountingGate
from .limiter import AbstractRateLimiter as AbstractRateLimiter
from .limiter import LimiterEventType as LimiterEventType
from .limiter import LimiterIdentity as LimiterIdentity
from .limiter import RateLimiter as RateLimiter
from .limiter import Replenishment as Replenishment
from .memory import UnboundedMemory as UnboundedMemory
from .monitor import Admission as Admission
from .monitor import AdmissionClosedError as AdmissionClosedError
from .monitor import AdmissionWaiter as AdmissionWaiter
from .monitor import LimiterEmitter as LimiterEmitter
from .status import RateLimiterStatus as RateLimiterStatus
from .status import SemaphoreLimiterStatus as SemaphoreLimiterStatus
from .status import UnboundedMemoryStatus as UnboundedMemoryStatus

__all__ = [
    "AbstractRateLimiter",
    "Admission",
    "AdmissionClosedError",
    "AdmissionWaiter",
    "CountingGate",
    "Demand",
    "DemandEntry",
    "Grant",
    "LimiterEmitter",
    "LimiterEventType",
    "LimiterIdentity",
    "RateLimiter",
    "RateLimiterStatus",
    "Replenishment",
    "SemaphoreLimiterStatus",
    "UnboundedMemory",
    "UnboundedMemoryStatus",
    "units_of",
]
