"""An account's shape is checked when admission first meets it (issue 12, item 4).

Python's abstract classes check only that a name is defined: a ``capacity`` written as a
method, a ``status()`` that answers ``None``, pass them, run, and then break every event. The
monitor checks the shape of each account the first time it tracks it, refuses only the job
that names a misshapen one (one error naming the account and everything wrong), and does not
check a sound account again while it lives.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    CountingGate,
    Demand,
    Replenishment,
)
from nucleo_trio.admission.limiter import account_faults, check_account
from nucleo_trio.bus import events as ev
from nucleo_trio.dispatch import DispatcherConfig, open_dispatcher
from nucleo_trio.errors import UncorrectableError
from nucleo_trio.jobs import JobRequirements, workflow
from nucleo_trio.observability.health import capture_health

from .admission_doubles import FakeJob
from .jobs_for_tests import Echo


class MethodCapacity(CountingGate):
    """The mistake the issue found: ``capacity`` and ``in_use`` written as plain methods."""

    def capacity(self) -> int:  # type: ignore[override]
        return 2

    def in_use(self) -> int:  # type: ignore[override]
        return 0


class Misshapen(CountingGate):
    """Everything wrong at once: numbers that are not numbers, a bad status, a bad answer."""

    @property
    def limiter_name(self) -> str:
        return "misshapen"

    @property
    def limiter_category(self) -> str:
        return ""

    @property
    def in_use(self) -> int:
        return True  # type: ignore[return-value]

    @property
    def status_indicator(self) -> str | None:
        return 3  # type: ignore[return-value]

    def status(self) -> Any:
        return None

    def replenishment(self) -> Replenishment:
        return "RELEASE"  # type: ignore[return-value]

    earliest_fit = None  # type: ignore[assignment]


class Counted(CountingGate):
    """A sound gate that counts how often its shape is read."""

    reads = 0

    @property
    def limiter_category(self) -> str:
        Counted.reads += 1
        return "render_slots"  # a plugin's own category: any non-blank name is sound


def test_a_sound_account_has_no_faults() -> None:
    assert account_faults(CountingGate("slots", 2)) == []
    check_account(CountingGate("slots", 2))


def test_a_method_where_a_number_belongs_is_named() -> None:
    faults = account_faults(MethodCapacity("render", 2))
    assert faults == [
        "capacity is a method, not a number (declare it with @property)",
        "in_use is a method, not a number (declare it with @property)",
    ]


def test_every_fault_is_named_in_one_error() -> None:
    with pytest.raises(UncorrectableError) as caught:
        check_account(Misshapen("x", 1))
    message = str(caught.value)
    assert message.startswith(
        "account 'misshapen' (tests.test_account_shape.Misshapen) does not keep the account "
        "contract: "
    )
    for fragment in (
        "earliest_fit is not callable",
        "replenishment() returned 'RELEASE', not a Replenishment",
        "limiter_category is '', not a non-blank str",
        "in_use is True (a bool), not an int or a float",
        "status_indicator is 3, not None or a str",
        "status() failed: AttributeError",
    ):
        assert fragment in message, fragment


def test_a_property_that_raises_is_a_fault_not_a_crash() -> None:
    class Nameless(CountingGate):
        @property
        def limiter_name(self) -> str:
            raise RuntimeError("no name today")

    faults = account_faults(Nameless("x", 1))
    assert faults == ["reading limiter_name raised RuntimeError: no name today"]
    with pytest.raises(UncorrectableError, match=r"^account tests\..*Nameless does not keep"):
        check_account(Nameless("x", 1))


def test_a_status_without_a_str_summary_is_named() -> None:
    class Mute(CountingGate):
        def status(self) -> Any:
            class Record:
                summary = 42

            return Record()

    (fault,) = account_faults(Mute("mute", 1))
    assert "whose summary is 42" in fault and "RateLimiterStatus" in fault


async def test_admission_refuses_only_the_job_naming_a_misshapen_account(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Refused at the door with one error naming it, nothing tracked, others granted."""
    admission = Admission()
    bad = MethodCapacity("render", 2)
    with pytest.raises(UncorrectableError) as caught:
        await admission.admit(Demand().add(bad), FakeJob("j"))
    assert str(caught.value) == (
        "account 'render' (tests.test_account_shape.MethodCapacity) does not keep the account "
        "contract: capacity is a method, not a number (declare it with @property); in_use is a "
        "method, not a number (declare it with @property)"
    )
    assert admission.accounts() == ()
    good = CountingGate("good", 1)
    grant = await admission.admit(Demand().add(good), FakeJob("k"))
    assert good.in_use == 1
    admission.release(grant)
    # A misshapen account is met afresh each time: it is refused again, not remembered sound.
    with pytest.raises(UncorrectableError, match="'render'"):
        await admission.admit(Demand().add(good).add(bad), FakeJob("l"))
    assert good.in_use == 0 and admission.accounts() == ()


async def test_a_sound_account_is_checked_once_while_it_lives(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Accounts are forgotten when idle; the verdict is not, so a grant costs no re-check."""
    admission = Admission()
    gate = Counted("slots", 1)
    for _ in range(5):
        admission.release(await admission.admit(Demand().add(gate), FakeJob("j")))
        assert admission.accounts() == ()
    assert Counted.reads == 1
    # A new account is a new meeting, even if it lands on the id of one that died.
    del gate
    other = Counted("slots", 1)
    admission.release(await admission.admit(Demand().add(other), FakeJob("j")))
    assert Counted.reads == 2


async def test_an_account_without_weak_references_is_checked_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A limiter that takes no weak reference is remembered by its class: neither held alive
    by the monitor nor checked again per grant."""

    class Slotted:
        __slots__ = ("_gate", "asked")

        def __init__(self, gate: CountingGate) -> None:
            self._gate = gate
            self.asked = 0

        def __getattr__(self, name: str) -> Any:
            if name == "earliest_fit":  # read by the check, never asked here
                self.asked += 1
            return getattr(self._gate, name)

    limiter = Slotted(CountingGate("bare", 1))
    admission = Admission()
    for _ in range(3):
        grant = await admission.admit(Demand().add(limiter), FakeJob("j"))  # type: ignore[arg-type]
        admission.release(grant)
    assert limiter.asked == 1 and limiter.in_use == 0


async def test_a_dispatcher_keeps_serving_around_a_misshapen_account(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Through a dispatcher: the job on the misshapen account fails naming it and what is
    wrong; jobs before and after it succeed, and limiter events flow for them."""
    bad = MethodCapacity("render", 2)
    slots = CountingGate("slots", 1)
    seen: list[ev.LimiterEvent] = []
    async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
        dispatcher.bus.subscribe(seen.append, event_type=ev.LimiterEvent)
        root = workflow("alice", "shapes")
        first = dispatcher.submit(
            Echo(root, requirements=lambda: JobRequirements().require_rate_limiter(slots))
        )
        broken = dispatcher.submit(
            Echo(root, requirements=lambda: JobRequirements().require_rate_limiter(bad))
        )
        with pytest.raises(UncorrectableError, match=r"'render' .*capacity is a method"):
            await broken.result()
        assert await first.result() == "ok"
        late = dispatcher.submit(
            Echo(root, requirements=lambda: JobRequirements().require_rate_limiter(slots))
        )
        assert await late.result() == "ok"
        await trio.testing.wait_all_tasks_blocked()
    assert seen and {e.limiter_name for e in seen} == {"slots"}


async def test_a_category_of_its_own_reaches_the_events(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 5: a plugin's own category is carried as it is; no event is dropped for it."""
    gate = Counted("render", 1)
    seen: list[ev.LimiterEvent] = []
    with caplog.at_level(logging.DEBUG, logger="nucleo_trio.admission"):
        async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
            dispatcher.bus.subscribe(seen.append, event_type=ev.LimiterEvent)
            root = workflow("alice", "own-kind")
            handle = dispatcher.submit(
                Echo(root, requirements=lambda: JobRequirements().require_rate_limiter(gate))
            )
            assert await handle.result() == "ok"
            await trio.testing.wait_all_tasks_blocked()
    assert [e.limiter_category for e in seen] == ["render_slots", "render_slots"]
    assert not [r for r in caplog.records if "Dropped a" in r.getMessage()]


async def test_health_lists_a_category_of_its_own_generically() -> None:
    """Item 5: health renders an unknown category as it is, with no unit."""
    gate = Counted("render", 2)
    snapshot = capture_health([gate, CountingGate("slots", 2)])
    rows = {row.name: row for row in snapshot.limiters}
    assert rows["render"].category == "render_slots" and rows["render"].unit == ""
    assert rows["slots"].unit == "slot"
    assert "render" in rows["render"].render(ascii_only=True)


async def test_an_event_that_fails_to_build_is_a_warning_once_per_account(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Never dropped silently: an account that turns misshapen after admission met it (its
    capacity now None) loses its events, with one warning naming it and the error, then
    debug lines."""

    class Turning(CountingGate):
        turned = False

        @property
        def capacity(self) -> int:
            return None if self.turned else super().capacity  # type: ignore[return-value]

    gate = Turning("turning", 1)
    with caplog.at_level(logging.DEBUG, logger="nucleo_trio.admission"):
        async with open_dispatcher(DispatcherConfig(health_every=None)) as dispatcher:
            dispatcher.bus.subscribe(lambda event: None, event_type=ev.LimiterEvent)
            root = workflow("alice", "turning")

            needs = lambda: JobRequirements().require_rate_limiter(gate)  # noqa: E731
            for _ in range(2):
                handle = dispatcher.submit(Echo(root, requirements=needs))
                assert await handle.result() == "ok"
                gate.turned = True
    dropped = [r for r in caplog.records if "Dropped a" in r.getMessage()]
    warned = [r for r in dropped if r.levelno == logging.WARNING]
    # The first job's events were built; the second's GRANTED_IMMEDIATE and RELEASED were not.
    assert len(warned) == 1 and len(dropped) == 2
    assert warned[0].getMessage() == (
        "Dropped a GRANTED_IMMEDIATE limiter event for turning: TypeError: 'capacity' must be "
        "(<class 'int'>, <class 'float'>) (got None that is a <class 'NoneType'>). (later ones "
        "for this account are logged at debug)"
    )
