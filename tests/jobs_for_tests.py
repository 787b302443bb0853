"""Small jobs the tests run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from nucleo_trio.jobs import AbstractJob, Identifiable, JobContext, JobRequirements, Tool


class Echo(Tool[Any]):
    """Returns its value, after an optional virtual sleep."""

    def __init__(
        self,
        parent: Identifiable,
        value: Any = "ok",
        *,
        sleep: float = 0.0,
        requirements: Callable[[], JobRequirements] | None = None,
        timeout: float | None = 60.0,
    ) -> None:
        super().__init__(parent)
        self.value = value
        self.sleep = sleep
        self._requirements = requirements
        self.timeout = timeout
        self.runs = 0
        self.requirement_calls = 0

    def requirements(self) -> JobRequirements:
        self.requirement_calls += 1
        return self._requirements() if self._requirements else JobRequirements()

    async def execute(self, context: JobContext) -> Any:
        self.runs += 1
        if self.sleep:
            await trio.sleep(self.sleep)
        return self.value


class Fn(AbstractJob[Any]):
    """Runs an async function of the context."""

    def __init__(
        self,
        parent: Identifiable,
        fn: Callable[[JobContext], Any],
        *,
        requirements: Callable[[], JobRequirements] | None = None,
        timeout: float | None = 60.0,
        prefix: str | None = None,
    ) -> None:
        super().__init__(parent, prefix)
        self.fn = fn
        self._requirements = requirements
        self.timeout = timeout
        self.runs = 0

    def requirements(self) -> JobRequirements:
        return self._requirements() if self._requirements else JobRequirements()

    async def execute(self, context: JobContext) -> Any:
        self.runs += 1
        return await self.fn(context)


def naps(seconds: float = 0.0) -> Callable[[JobContext], Any]:
    """A job body that sleeps ``seconds`` of trio time (a checkpoint for 0)."""

    async def nap(context: JobContext) -> None:
        if seconds:
            await trio.sleep(seconds)
        else:
            await trio.lowlevel.checkpoint()

    return nap
