"""An orchestrator fans out 50 tools over two accounts; the limiter events tell who waited.

Each ``Lookup`` needs a permit on ``db`` (a CountingGate: four connections) and a start on
``api`` (a custom limiter, 20 starts a second; docs/guide/admission.md writes one). Admission
grants both or parks the tool holding neither. Real clock, two seconds; needs only nucleo_trio.
"""

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import trio

from nucleo_trio.admission import CountingGate, Replenishment
from nucleo_trio.admission.limiter import LimiterEventType
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import open_dispatcher
from nucleo_trio.jobs import JobContext, JobRequirements, Orchestrator, Tool, workflow


class StartsPerWindow(CountingGate):
    """``limit`` starts per ``period`` seconds: a TIME account, only the clock gives starts back."""

    def __init__(self, name: str, limit: int, period: float) -> None:
        super().__init__(name, limit)
        self._period, self._resets_at = period, -math.inf

    def _roll(self) -> None:
        if trio.current_time() >= self._resets_at:  # a new window: every start comes back
            self._resets_at = trio.current_time() + self._period
            super().give([None] * self.in_use)

    @property
    def limiter_category(self) -> str:
        return "elastic_window"

    def replenishment(self) -> Replenishment:
        return Replenishment.TIME

    def fits(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        self._roll()
        return super().fits(mine, reserved_ahead)

    def try_take(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> bool:
        return self.fits(mine, reserved_ahead) and super().try_take(mine, reserved_ahead)

    def give(self, amounts: Sequence[Any]) -> None:  # only a roll-back gives to a TIME account
        self._roll()  # and a window that ended already gave every start back
        super().give(amounts[: self.in_use])

    def earliest_fit(self, mine: Sequence[Any], reserved_ahead: Sequence[Any]) -> float | None:
        # Asked right after fits() said no. None: the clock alone can never make it fit.
        return None if len(mine) + len(reserved_ahead) > self.capacity else self._resets_at


db = CountingGate("db", 4)
api = StartsPerWindow("api", limit=20, period=1.0)


class Lookup(Tool[int]):
    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(db).require_rate_limiter(api)

    async def execute(self, context: JobContext) -> int:
        await trio.sleep(0.05)  # the query
        return int(context.metadata["admission_wait_ms"])  # admission recorded it


class FanOut(Orchestrator[int]):
    async def execute(self, context: JobContext) -> int:
        handles = [self.submit(Lookup(self)) for _ in range(50)]
        return max([await handle.result() for handle in handles])


async def main() -> None:
    waits: dict[str, list[float]] = {"db": [], "api": []}
    seen: Counter[tuple[str, LimiterEventType]] = Counter()

    def on_limiter(event: ev.LimiterEvent) -> None:
        seen[event.limiter_name, event.type] += 1
        if event.type is LimiterEventType.GRANTED_FROM_HOLD:
            waits[event.limiter_name].append(event.wait)

    async with open_dispatcher() as dispatcher:
        dispatcher.bus.subscribe(on_limiter, event_type=ev.LimiterEvent)
        started = trio.current_time()
        longest = await dispatcher.submit(FanOut(workflow("alice", "fanout"))).result()
        print(f"50 tools done in {trio.current_time() - started:.1f} s, longest wait {longest} ms")
    # The bus delivered every event before the block ended. RELEASED shows the two replenishment
    # kinds: db's permits come back when a tool ends, api's starts do not (the clock refills it).
    for name, held in waits.items():
        released = seen[name, LimiterEventType.RELEASED]
        print(f"  {name:<3} held {len(held)} tools, longest {max(held):.2f} s; RELEASED {released}")
    print(f"db permits in use at the end: {db.in_use}")


if __name__ == "__main__":
    trio.run(main)
