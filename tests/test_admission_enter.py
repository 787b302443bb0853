"""The synchronous half of admission: enter() answers a grant or a ticket, wait() parks."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from nucleo_trio.admission import Admission, AdmissionClosedError, CountingGate, Demand, Grant


async def test_enter_grants_at_once_without_a_checkpoint(nursery: trio.Nursery) -> None:
    """ADM-11: with nobody parked and everything fitting, enter() is the grant, and it never
    yields to the scheduler."""
    admission = Admission()
    await nursery.start(admission.run)
    gate = CountingGate("slot", 1)
    with trio.testing.assert_no_checkpoints():
        entered = admission.enter(Demand().add(gate))
    assert isinstance(entered, Grant)
    assert gate.in_use == 1
    admission.release(entered)
    assert gate.in_use == 0
    admission.stop()


async def test_a_ticket_waits_holding_nothing_until_granted(nursery: trio.Nursery) -> None:
    """ADM-14, ADM-35: a demand that does not fit joins the line holding nothing; wait() returns
    the grant once the holder releases."""
    admission = Admission()
    await nursery.start(admission.run)
    slot = CountingGate("slot", 1)
    other = CountingGate("other", 5)
    held = admission.enter(Demand().add(slot))
    assert isinstance(held, Grant)
    ticket = admission.enter(Demand().add(other).add(slot))
    assert not isinstance(ticket, Grant)
    assert other.in_use == 0 and admission.queue_size == 1
    granted: list[Grant] = []

    async def waiter() -> None:
        granted.append(await admission.wait(ticket))

    nursery.start_soon(waiter)
    await trio.testing.wait_all_tasks_blocked()
    assert not granted
    admission.release(held)
    await trio.testing.wait_all_tasks_blocked()
    assert len(granted) == 1 and other.in_use == 1 and slot.in_use == 1
    admission.release(granted[0])
    admission.stop()


async def test_enter_refuses_a_wrong_demand_and_a_stopped_admission(nursery: trio.Nursery) -> None:
    admission = Admission()
    await nursery.start(admission.run)
    with pytest.raises(TypeError, match="Demand"):
        admission.enter("two slots")  # type: ignore[arg-type]
    admission.stop()
    with pytest.raises(AdmissionClosedError, match="shutting down"):
        admission.enter(Demand())
