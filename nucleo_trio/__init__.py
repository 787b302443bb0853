"""nucleo_trio: a trio-native structured-concurrency job runtime.

Jobs run as trio tasks under one dispatcher that admits each job's whole demand at once or parks
it holding nothing, times it out in two phases, re-runs it on upstream signals, and tells
everything on a typed event bus::

    import trio
    from nucleo_trio import Tool, open_dispatcher, workflow

    class Hello(Tool[str]):
        async def execute(self, context):
            return "hello"

    async def main():
        async with open_dispatcher() as dispatcher:
            print(await dispatcher.submit(Hello(workflow("alice", "demo"))).result())

    trio.run(main)

The library is quiet: its ``nucleo_trio`` logger has a :class:`logging.NullHandler`, so a program
that configures no logging prints nothing for the failures it handles itself. Configure logging
(``logging.basicConfig(level=logging.INFO)``) to see the runtime's records.
"""

import logging as _logging

from . import errors as errors
from .admission import (
    AbstractRateLimiter as AbstractRateLimiter,
    Admission as Admission,
    CountingGate as CountingGate,
    Demand as Demand,
    Grant as Grant,
    LimiterIdentity as LimiterIdentity,
    RateLimit as RateLimit,
    RateLimiter as RateLimiter,
    Replenishment as Replenishment,
)
from .bus import JobObserver as JobObserver, MessageBus as MessageBus
from .dispatch import (
    DispatcherConfig as DispatcherConfig,
    JobDispatcher as JobDispatcher,
    open_dispatcher as open_dispatcher,
)
from .jobs import (
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    DEFAULT_UPSTREAM_RETRIES as DEFAULT_UPSTREAM_RETRIES,
    META_ITERATION as META_ITERATION,
    AbstractJob as AbstractJob,
    AbstractStoppable as AbstractStoppable,
    CancellationToken as CancellationToken,
    Doer as Doer,
    JobContext as JobContext,
    JobHandle as JobHandle,
    JobRequirements as JobRequirements,
    JobSnapshot as JobSnapshot,
    JobState as JobState,
    JobType as JobType,
    Orchestrator as Orchestrator,
    ScopeAuthority as ScopeAuthority,
    Tool as Tool,
    current_job as current_job,
    display_name as display_name,
    tool_description as tool_description,
    workflow as workflow,
)
from .tools import function_tool as function_tool

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_UPSTREAM_RETRIES",
    "META_ITERATION",
    "AbstractJob",
    "AbstractRateLimiter",
    "AbstractStoppable",
    "Admission",
    "CancellationToken",
    "CountingGate",
    "Demand",
    "DispatcherConfig",
    "Doer",
    "Grant",
    "JobContext",
    "JobDispatcher",
    "JobHandle",
    "JobObserver",
    "JobRequirements",
    "JobSnapshot",
    "JobState",
    "JobType",
    "LimiterIdentity",
    "MessageBus",
    "Orchestrator",
    "RateLimit",
    "RateLimiter",
    "Replenishment",
    "ScopeAuthority",
    "Tool",
    "current_job",
    "display_name",
    "errors",
    "function_tool",
    "open_dispatcher",
    "tool_description",
    "workflow",
]

# A library's logger gets a NullHandler, so Python's last-resort handler does not print the
# warnings of an unconfigured program (every job failure it handles would reach stderr).
_logging.getLogger("nucleo_trio").addHandler(_logging.NullHandler())
