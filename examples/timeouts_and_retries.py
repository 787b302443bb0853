"""Three ways a job ends other than plainly: a timeout, re-runs, a cancellation.

Runs in VIRTUAL time on trio's MockClock, so the minute of re-run pacing takes no real time:
``python examples/timeouts_and_retries.py`` finishes at once. ``seed=1`` makes the pacing
draws, and so the printed times, the same on every run. It needs nothing but nucleo_trio.
"""

import logging

import trio
import trio.testing

from nucleo_trio import errors
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.jobs import Identifiable, JobContext, Tool, workflow

# The runtime logs every failure with its traceback; this demo prints the outcomes itself.
logging.getLogger("nucleo_trio").setLevel(logging.CRITICAL)


class Stuck(Tool[str]):
    """Waits far longer than its 2 s timeout."""

    async def execute(self, context: JobContext) -> str:
        await trio.sleep(3600)
        return "unreachable"


class Flaky(Tool[str]):
    """Fails with a transient upstream error on its first ``failures`` calls."""

    def __init__(self, parent: Identifiable, failures: int) -> None:
        super().__init__(parent)
        self.failures, self.calls = failures, 0

    async def execute(self, context: JobContext) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise errors.TransientErrorRetry(f"upstream answered 503 (call {self.calls})")
        return f"answer after {self.calls} calls"


class Poll(Tool[None]):
    """Polls once a second until cancelled; check_cancellation() is where it finds out."""

    async def execute(self, context: JobContext) -> None:
        while True:
            context.check_cancellation()
            await trio.sleep(1)


async def main() -> None:
    t0 = trio.current_time()

    def say(what: str) -> None:
        print(f"[{trio.current_time() - t0:5.1f} s] {what}")

    async with open_dispatcher(DispatcherConfig(seed=1)) as dispatcher:
        dispatcher.bus.subscribe(lambda e: say(f"  event: {e.message}"), event_type=ev.RetryEvent)
        root = workflow("alice", "endings")

        stuck = Stuck(root)
        stuck.timeout = 2.0  # phase one at 2 s, phase two after a 0.5 s grace
        try:
            await dispatcher.submit(stuck).result()
        except errors.JobTimeoutError as exc:
            say(f"timed out: {exc} (state {stuck.context.state.name})")

        say(f"retried: {await dispatcher.submit(Flaky(root, failures=2)).result()}")

        hopeless = Flaky(root, failures=5)
        hopeless.upstream_retries = 1  # the default budget is 3
        try:
            await dispatcher.submit(hopeless).result()
        except errors.UncorrectableError as exc:
            cause = type(exc.__cause__).__name__
            say(f"gave up after {hopeless.calls} calls: {type(exc).__name__} from {cause}")

        poll = dispatcher.submit(Poll(root))
        await trio.sleep(3.5)
        say(f"cancel() found the job: {poll.cancel('the user pressed stop')}")
        try:
            await poll.result()
        except errors.JobCancelledError as exc:
            say(f"cancelled: {exc.__cause__} (state {poll.state.name})")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
