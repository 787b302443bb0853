"""What a job declares it needs; the dispatcher turns it into one admission demand."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from ..admission.limiter import RateLimiter

__all__ = ["JobRequirements", "LimiterRequirement"]


@attrs.frozen
class LimiterRequirement:
    """One custom account a job needs, with the amount it debits (``None`` for a unit permit)."""

    limiter: RateLimiter
    amount: Any = None


@attrs.define
class JobRequirements:
    """A job's declared needs, captured by the dispatcher once at submit and once per attempt.

    Build it fluently from :meth:`Job.requirements`::

        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(self.search_quota, 1).require_http()

    ``requires_queueing=False`` runs the job at once instead of through a lane (ROUTE-01).
    A job that declares any resource must have a timeout (SUB-08).
    """

    requires_queueing: bool = True
    requires_http: bool = False
    requires_transaction: bool = False
    rate_limiters: list[LimiterRequirement] = attrs.field(factory=list)

    def require_rate_limiter(self, limiter: RateLimiter, amount: Any = None) -> JobRequirements:
        """Add a custom account to the job's demand; it joins admission like a built-in."""
        self.rate_limiters.append(LimiterRequirement(limiter, amount))
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
        return tuple(self.rate_limiters)

    @property
    def needs_http(self) -> bool:
        """True when the job or any of its limiters needs the HTTP connection gate."""
        return self.requires_http or any(
            bool(getattr(r.limiter, "requires_http_connection", False)) for r in self.rate_limiters
        )

    @property
    def has_resources(self) -> bool:
        """True when admission must grant something before the job runs."""
        return bool(self.rate_limiters) or self.needs_http
