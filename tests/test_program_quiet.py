"""Issue 20, item 5: the library is quiet, and a user's mistake is named as one.

An unconfigured program prints nothing for the failures it handles itself (the ``nucleo_trio``
logger has a ``NullHandler``); a program that configures logging still gets every record. A
mistake in the program (a resourceful job with no timeout, a submission before the start or
after the stop, an amount an account does not take, a limiter's name for the limiter) is a
``UsageError`` that says what to write instead, and still matches the ``except`` clauses written
for the error classes raised before.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import CountingGate
from nucleo_trio.dispatch import JobDispatcher, open_dispatcher
from nucleo_trio.errors import (
    NucleoSystemError,
    UsageError,
    UsageRuntimeError,
    UsageTypeError,
)
from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

ROOT = Path(__file__).resolve().parent.parent
HANG_BOUND = 60  # seconds: only so a broken build fails instead of hanging

PROGRAM = textwrap.dedent(
    """
    import logging, sys
    import trio
    from nucleo_trio.admission import CountingGate
    from nucleo_trio.dispatch import open_dispatcher
    from nucleo_trio.errors import InvalidInputError
    from nucleo_trio.jobs import JobContext, JobRequirements, Tool, workflow

    if sys.argv[1:] == ["configured"]:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    gate = CountingGate("db", 1)

    class Refuses(Tool[str]):
        async def execute(self, context: JobContext) -> str:
            raise InvalidInputError("the order id is not a number")

    class TooSlow(Tool[str]):
        timeout = 1.0

        async def execute(self, context: JobContext) -> str:
            await trio.sleep(10)
            return "never"

    class NoTimeout(Tool[str]):
        timeout = None

        def requirements(self) -> JobRequirements:
            return JobRequirements().require_rate_limiter(gate)

        async def execute(self, context: JobContext) -> str:
            return "never"

    async def main() -> None:
        async with open_dispatcher() as dispatcher:
            root = workflow("u", "quiet")
            handles = [dispatcher.submit(cls(root)) for cls in (Refuses, TooSlow, NoTimeout)]
        for handle in handles:
            try:
                await handle.result()
            except Exception as exc:
                print(type(exc).__name__)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    """
).replace("import trio\n", "import trio\nimport trio.testing\n", 1)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def test_an_unconfigured_program_prints_nothing_for_the_failures_it_handles() -> None:
    """A refusal, a timeout and a door refusal, each caught by the program: stdout has the
    program's own three lines, and stderr is empty."""
    done = _run("-c", PROGRAM)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["InvalidInputError", "JobTimeoutError", "UsageError"]
    assert done.stderr == ""


def test_a_program_that_configures_logging_still_gets_every_record() -> None:
    """The same program with ``logging.basicConfig``: each failure is one warning record of
    the ``nucleo_trio`` hierarchy, so the NullHandler hides nothing from a configured program."""
    done = _run("-c", PROGRAM, "configured")
    assert done.returncode == 0, done.stderr
    records = [line for line in done.stderr.splitlines() if line.startswith("WARNING nucleo_trio")]
    assert len(records) == 3, done.stderr
    assert any("InvalidInputError" in line for line in records)
    assert any("UsageError" in line and "timeout = 60" in line for line in records)


@pytest.mark.parametrize("example", ["guarded_tenants.py", "timeouts_and_retries.py"])
def test_the_examples_print_each_refusal_once_on_stdout_and_nothing_on_stderr(
    example: str,
) -> None:
    """The examples that meet refusals, timeouts and re-runs print their own report only."""
    done = _run(str(ROOT / "examples" / example))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


gate = CountingGate("db", 2)


class Resourceful(Tool[str]):
    timeout = None

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(gate)

    async def execute(self, context: JobContext) -> str:
        return "ran"


class Asks(Tool[str]):
    def __init__(self, parent: Any, limiter: Any, amount: Any = None) -> None:
        super().__init__(parent)
        self.limiter = limiter
        self.amount = amount

    def requirements(self) -> JobRequirements:
        return JobRequirements().require_rate_limiter(self.limiter, self.amount)

    async def execute(self, context: JobContext) -> str:
        return "ran"


async def test_a_resourceful_job_with_no_timeout_is_told_what_to_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SUB-08: the refusal is a UsageError (still a NucleoSystemError) naming the class and the line
    to add; it is not a "System error in dispatcher"."""
    async with open_dispatcher() as dispatcher:
        handle = dispatcher.submit(Resourceful(workflow("u", "w")))
    with pytest.raises(NucleoSystemError) as caught:
        await handle.result()
    assert isinstance(caught.value, UsageError)
    message = str(caught.value)
    assert "declares resources but no timeout" in message
    assert "give Resourceful a timeout: `timeout = 60` in the class body" in message
    assert "System error" not in message
    assert caught.value.fix.startswith("give Resourceful a timeout")


async def test_a_submission_before_the_start_or_after_the_stop_says_where_it_belongs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """SUB-14: before the start (and after the stop) a UsageRuntimeError, which ``except RuntimeError``
    still catches, naming the block to submit in."""
    dispatcher = JobDispatcher()
    with pytest.raises(RuntimeError) as before:
        dispatcher.submit(Resourceful(workflow("u", "early")))
    assert isinstance(before.value, UsageRuntimeError)
    assert "the dispatcher is not started" in str(before.value)
    assert "async with open_dispatcher() as dispatcher:" in str(before.value)
    async with open_dispatcher() as dispatcher:
        pass
    with pytest.raises(UsageRuntimeError, match="has stopped; call it before the") as after:
        dispatcher.submit(Resourceful(workflow("u", "late")))
    assert isinstance(after.value, NucleoSystemError)
    with pytest.raises(UsageRuntimeError, match="not started"):
        await JobDispatcher().shutdown()


async def test_an_amount_the_account_does_not_take_names_the_value_and_the_method(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``require_rate_limiter(gate, "x")``: the job is born failed with a UsageError naming
    the value, the account and the class's requirements() to fix."""
    async with open_dispatcher() as dispatcher:
        handle = dispatcher.submit(Asks(workflow("u", "w"), gate, "x"))
    with pytest.raises(UsageError) as caught:
        await handle.result()
    message = str(caught.value)
    assert "'x' is not a permit count" in message and "db" in message
    assert "fix the declaration in Asks.requirements()" in message
    assert isinstance(caught.value.__cause__, TypeError)


async def test_a_limiter_named_by_a_string_is_refused_saying_how_to_get_the_object(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``require_rate_limiter("db")`` raises a UsageTypeError (a TypeError) at once, naming the
    lookup that gives the account; a job that does it is born failed with the same words."""
    with pytest.raises(TypeError) as direct:
        JobRequirements().require_rate_limiter("db")  # type: ignore[arg-type]
    assert isinstance(direct.value, UsageTypeError)
    assert "self.context.dispatcher.limiters['db']" in str(direct.value)
    with pytest.raises(UsageTypeError, match="got int"):
        JobRequirements().require_rate_limiter(42)  # type: ignore[arg-type]
    async with open_dispatcher() as dispatcher:
        handle = dispatcher.submit(Asks(workflow("u", "w"), "db"))
    with pytest.raises(UsageError, match=r"limiters\['db'\]"):
        await handle.result()


def test_the_package_logger_has_a_null_handler() -> None:
    """Importing the package is enough: its logger carries a NullHandler."""
    handlers = logging.getLogger("nucleo_trio").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
