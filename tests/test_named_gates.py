"""The concrete counting gates (GATE)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    CountingGate,
    DatabaseGate,
    Demand,
    HttpConnectionGate,
    ModelGate,
    Replenishment,
    StdioEndpointGate,
    StdioPoolGate,
)
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher
from nucleo_trio.errors import UncorrectableError


def test_a_database_gate_counts_connections() -> None:
    """GATE-01, GATE-02: db:<name>, semaphore, RELEASE; two takes fill a gate of 2; a give frees
    one; a reservation ahead counts against a follower, on fits and on the take."""
    gate = DatabaseGate("orders", 2)
    assert gate.limiter_name == "db:orders" and gate.datasource == "orders"
    assert gate.limiter_category == "semaphore"
    assert gate.replenishment() is Replenishment.RELEASE
    assert gate.try_take([None], []) and gate.try_take([None], [])
    assert gate.in_use == 2 and not gate.fits([None], [])
    gate.give([None])
    assert gate.in_use == 1 and gate.capacity == 2
    assert gate.fits([None], []) is True
    assert gate.fits([None], [None]) is False
    assert gate.try_take([None], [None]) is False
    for bad in (0, -1):
        with pytest.raises(ValueError, match="capacity must be positive"):
            DatabaseGate("orders", bad)


def test_only_a_give_frees_a_database_permit() -> None:
    """GATE-03: earliest_fit is None even when full; more than the capacity is refused."""
    gate = DatabaseGate("orders", 2)
    gate.try_take([None, None], [])
    assert gate.earliest_fit([None], []) is None
    with pytest.raises(UncorrectableError, match="never fit"):
        gate.fits([None, None, None], [])


def test_a_model_gate_is_for_a_concurrency_bounded_entry() -> None:
    """GATE-04: named by the entry id, capacity max_concurrent, RELEASE; an entry without
    max_concurrent is refused, saying it is a token bucket's."""
    gate = ModelGate("local-llama", 3)
    assert gate.limiter_name == "local-llama" and gate.capacity == 3
    assert gate.replenishment() is Replenishment.RELEASE
    with pytest.raises(ValueError, match="TokenBucket"):
        ModelGate("hosted-model", None)


async def test_the_http_gate_is_the_dispatchers_own_sized_to_its_pool(
    nursery: trio.Nursery,
) -> None:
    """GATE-05: an `http` counting gate sized to the pool (1000 by default); each dispatcher has
    its own, so two in one process share nothing."""
    assert HttpConnectionGate().capacity == 1000
    one = JobDispatcher(DispatcherConfig(http_connections=8))
    two = JobDispatcher(DispatcherConfig(http_connections=8))
    assert isinstance(one.http_gate, HttpConnectionGate)
    assert one.http_gate.limiter_name == "http" and one.http_gate.capacity == 8
    assert one.http_gate is not two.http_gate


async def test_stdio_slots_per_endpoint_and_pool_wide(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """GATE-07, GATE-08: mcp:<endpoint> (10 by default) and mcp:stdio (20); a tool declares both
    and admission holds both for the head."""
    endpoint = StdioEndpointGate("files")
    pool = StdioPoolGate(1)
    assert endpoint.limiter_name == "mcp:files" and endpoint.capacity == 10
    assert StdioPoolGate().capacity == 20 and pool.limiter_name == "mcp:stdio"
    admission = Admission()
    await nursery.start(admission.run)
    first = await admission.admit(Demand().add(endpoint).add(pool))
    assert endpoint.in_use == 1 and pool.in_use == 1
    waiting: list[object] = []

    async def second() -> None:
        waiting.append(await admission.admit(Demand().add(endpoint).add(pool)))

    nursery.start_soon(second)
    await trio.testing.wait_all_tasks_blocked()
    assert not waiting and endpoint.in_use == 1  # short on the pool: holds no endpoint slot
    admission.release(first)
    await trio.testing.wait_all_tasks_blocked()
    assert waiting and endpoint.in_use == 1 and pool.in_use == 1
    admission.stop()


def test_a_closed_endpoint_refuses_everyone(caplog: pytest.LogCaptureFixture) -> None:
    """GATE-09: after close, fits and try_take refuse saying the endpoint is closed; idle means
    nothing in use; push-back only logs."""
    gate = StdioEndpointGate("files", 2)
    assert gate.is_idle
    gate.try_take([None], [])
    assert not gate.is_idle
    with caplog.at_level(logging.WARNING, logger="nucleo_trio.admission.gates"):
        gate.on_rate_limit_error("busy")
    assert [r.getMessage() for r in caplog.records] == ["mcp:files upstream failure: busy"]
    gate.close()
    for call in (gate.fits, gate.try_take):
        with pytest.raises(UncorrectableError, match="closed"):
            call([None], [])


class RenderSlots(CountingGate):
    def __init__(self) -> None:
        super().__init__("render", 4)


async def test_a_user_defined_gate_joins_admission_like_a_built_in(nursery: trio.Nursery) -> None:
    """GATE-10: a CountingGate subclass with a name is admitted with a built-in in one demand."""
    admission = Admission()
    await nursery.start(admission.run)
    render, db = RenderSlots(), DatabaseGate("main", 1)
    grant = await admission.admit(Demand().add(render).add(db))
    assert (render.in_use, db.in_use) == (1, 1)
    admission.rollback(grant)
    assert (render.in_use, db.in_use) == (0, 0)
    admission.stop()
