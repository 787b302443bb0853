"""What a watchable value costs a grant: ``python -m benchmarks.watch_cost``.

A :class:`~nucleo_trio.admission.CountingGate` sets its ``use`` value on every take and give
once someone has read it. This times one take and one give (a grant and its release) on a gate

* never watched (``use`` never read: one attribute test per call),
* watched with nobody waiting (``use`` read once: each call sets the value, waking nobody),
* watched by a task parked on a predicate the value never meets (each call tests it),

and, for scale, the same pair on a bare counter with no value at all (what the gate did
before). It prints nanoseconds per pair, the best of several rounds (the least disturbed by the
rest of the machine), and the difference each mode adds to the never-watched gate.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import trio
import trio.testing

from nucleo_trio.admission import CountingGate

PAIRS = 200_000
ROUNDS = 7
_ONE: tuple[None] = (None,)
_NONE: tuple[()] = ()


class _Bare:
    """The counting a gate does per take and give, and nothing else."""

    def __init__(self) -> None:
        self.in_use = 0

    def try_take(self, mine: tuple[None], ahead: tuple[()]) -> bool:
        self.in_use += 1
        return True

    def give(self, amounts: tuple[None]) -> None:
        self.in_use -= 1


def _best(pairs: Callable[[int], None]) -> float:
    """Nanoseconds per take-and-give pair, the best of ROUNDS."""
    timings = []
    for _ in range(ROUNDS):
        gc.disable()
        start = time.perf_counter_ns()
        pairs(PAIRS)
        elapsed = time.perf_counter_ns() - start
        gc.enable()
        timings.append(elapsed / PAIRS)
    return min(timings)


def _loop(account: CountingGate | _Bare) -> Callable[[int], None]:
    take, give = account.try_take, account.give

    def pairs(n: int) -> None:
        for _ in range(n):
            take(_ONE, _NONE)
            give(_ONE)

    return pairs


async def _measure() -> dict[str, float]:
    results = {"bare counter (for scale)": _best(_loop(_Bare()))}
    results["gate, never watched"] = _best(_loop(CountingGate("plain", 10)))
    watched = CountingGate("watched", 10)
    assert watched.use.value == 0
    results["gate, watched, nobody waiting"] = _best(_loop(watched))
    waited = CountingGate("waited", 10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waited.use.wait_value, lambda n: n > 5)
        await trio.testing.wait_all_tasks_blocked()
        results["gate, one task waiting (not woken)"] = _best(_loop(waited))
        nursery.cancel_scope.cancel()
    return results


def main() -> None:
    results = trio.run(_measure)
    base = results["gate, never watched"]
    print(f"ns per take + give pair, best of {ROUNDS} rounds of {PAIRS}:")
    for name, ns in results.items():
        extra = "" if name.startswith("bare") else f"  ({ns - base:+.0f} ns vs never watched)"
        print(f"  {name:<36} {ns:7.0f}{extra}")


if __name__ == "__main__":
    main()
