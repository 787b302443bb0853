"""Reading memory, configuring the gate, choosing the reader through the plugins, the gate in a
dispatcher, and the latch over real memory (MEM-02, MEM-05, MEM-06, MEM-34, MEM-50)."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest
import trio
import trio.testing

from nucleo_trio.admission import (
    Admission,
    CountingGate,
    Demand,
    MemoryPressureGate,
    MemoryReader,
    MemoryReading,
    MemoryZone,
    ProcessMemoryReader,
    UnboundedMemory,
    parse_memory_limit,
)
from nucleo_trio.admission.memory_reader import (
    DEFAULT_MAX_AGE,
    cgroup_memory_limit,
    memory_reader_from,
)
from nucleo_trio.dispatch import DispatcherConfig, JobDispatcher, MemoryConfig, open_dispatcher
from nucleo_trio.errors import ConfigError
from nucleo_trio.jobs import JobRequirements, workflow
from nucleo_trio.plugins import PluginError, hookimpl, make_plugin_manager

from .admission_doubles import FakeJob
from .jobs_for_tests import Echo
from .test_memory_gate import FakeHeap

GIB = 1024**3
MIB = 1024**2


# -- sizes and configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8GiB", 8 * GIB),
        ("512 MiB", 512 * MIB),
        ("2GB", 2 * 10**9),
        ("1.5gib", 3 * GIB // 2),
        ("64Mi", 64 * MIB),
        ("100", 100),
        ("4096 B", 4096),
        (1024, 1024),
        (8e9, 8 * 10**9),
    ],
)
def test_a_limit_is_bytes_or_a_size(text: object, size: int) -> None:
    assert parse_memory_limit(text) == size


@pytest.mark.parametrize("bad", [0, -1, True, "lots", "8 parsecs", "-2GiB", "", 2.5, None, [1]])
def test_a_limit_that_is_not_a_positive_size_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match="memory limit") as caught:
        parse_memory_limit(bad)
    assert repr(bad) in str(caught.value)


def test_the_memory_config() -> None:
    """On by default with no limit; a size is stored as bytes; a bad one is a ConfigError that
    names it, from code and from plain data; ``memory = false`` switches the gate off."""
    assert DispatcherConfig().memory == MemoryConfig(enabled=True, limit=None)
    assert MemoryConfig(limit="8GiB").limit == 8 * GIB
    with pytest.raises(ConfigError, match="'lots'"):
        MemoryConfig(limit="lots")
    config = DispatcherConfig.from_mapping({"memory": {"limit": "2GiB"}})
    assert config.memory == MemoryConfig(limit=2 * GIB)
    assert DispatcherConfig.from_mapping({"memory": False}).memory.enabled is False
    with pytest.raises(ConfigError, match="'8 parsecs'"):
        DispatcherConfig.from_mapping({"memory": {"limit": "8 parsecs"}})
    with pytest.raises(ConfigError, match="limt"):
        DispatcherConfig.from_mapping({"memory": {"limt": "1GiB"}})
    with pytest.raises(ConfigError, match="memory"):
        DispatcherConfig.from_mapping({"memory": "big"})
    with pytest.raises(TypeError):
        DispatcherConfig(memory=True)  # type: ignore[arg-type]


# -- the cgroup and the default reader -----------------------------------------------------------


def _proc(tmp_path: Path, own: str, limits: dict[str, str], *, v2: bool = True) -> Path:
    root = tmp_path / "cgroup"
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    kind = "cgroup2 cgroup2 rw" if v2 else "cgroup cgroup rw,memory"
    (proc / "mountinfo").write_text(
        f"22 1 0:21 / /proc rw - proc proc rw\n31 23 0:28 / {root} rw,nosuid - {kind}\n"
    )
    (proc / "cgroup").write_text(f"0::{own}\n")
    for path, value in limits.items():
        directory = root / path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "memory.max").write_text(value + "\n")
    return proc


def test_the_cgroup_limit_is_the_tightest_on_the_way_up(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "/a/b", {"/a/b": "max", "/a": str(2 * GIB), "/": str(8 * GIB)})
    assert cgroup_memory_limit(proc=proc) == 2 * GIB


def test_no_cgroup_limit(tmp_path: Path) -> None:
    assert cgroup_memory_limit(proc=_proc(tmp_path / "1", "/x", {"/x": "max"})) is None
    assert cgroup_memory_limit(proc=_proc(tmp_path / "2", "/", {}, v2=False)) is None
    assert cgroup_memory_limit(proc=tmp_path / "nowhere") is None


def test_the_default_reader_picks_its_limit() -> None:
    """The tighter of the cgroup's and the configured limit, else physical memory."""
    cgroup = ProcessMemoryReader("2GiB", cgroup_limit=lambda: GIB)
    assert (cgroup.limit_bytes, cgroup.limit_source) == (GIB, "cgroup")
    configured = ProcessMemoryReader(512 * MIB, cgroup_limit=lambda: GIB)
    assert (configured.limit_bytes, configured.limit_source) == (512 * MIB, "configured")
    alone = ProcessMemoryReader("3GiB", cgroup_limit=lambda: None)
    assert (alone.limit_bytes, alone.limit_source) == (3 * GIB, "configured")
    physical = ProcessMemoryReader(cgroup_limit=lambda: None)
    assert physical.limit_bytes == psutil.virtual_memory().total
    assert physical.limit_source == "physical"
    assert "physical" in repr(physical)
    with pytest.raises(ValueError, match="'lots'"):
        ProcessMemoryReader("lots")
    with pytest.raises(ValueError, match="max_age"):
        ProcessMemoryReader(max_age=-1)
    assert ProcessMemoryReader(resident=lambda: 1).resident_source == "given"


def test_the_default_reader_reads_resident_memory() -> None:
    """The default reader answers this process's resident memory, fresh (from /proc/self/statm
    on Linux), so an allocation shows at the next read."""
    reader = ProcessMemoryReader(GIB, cgroup_limit=lambda: None)
    assert isinstance(reader, MemoryReader)
    first = reader.read()
    assert first.limit_bytes == GIB
    assert abs(first.used_bytes - psutil.Process().memory_info().rss) < 16 * MIB
    keep = bytearray(48 * MIB)
    keep[::4096] = b"\x01" * len(range(0, len(keep), 4096))
    assert reader.read().used_bytes > first.used_bytes + 32 * MIB
    del keep
    if reader.resident_source == "statm":
        assert reader.max_age == 0
    else:
        assert reader.max_age == DEFAULT_MAX_AGE


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reads_its_own_memory() -> None:
    """The kept-open statm descriptor is the parent's; a forked child opens its own."""
    reader = ProcessMemoryReader(GIB, cgroup_limit=lambda: None)
    if reader.resident_source != "statm":
        pytest.skip("no /proc/self/statm here")
    ballast = bytearray(128 * MIB)
    ballast[::4096] = b"\x01" * len(range(0, len(ballast), 4096))
    parent = reader.read().used_bytes
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop the ballast, report what it reads, leave at once
        try:
            del ballast
            os.write(write_end, str(reader.read().used_bytes).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child = int(os.read(read_end, 64))
    os.close(read_end)
    os.waitpid(pid, 0)
    assert child < parent - 64 * MIB
    del ballast


def test_a_slow_source_is_sampled() -> None:
    """A source that costs more (psutil, off Linux) is read at most once per max_age of the real
    clock: a burst of looks costs one read."""
    now = [0.0]
    calls = [0]

    def resident() -> int:
        calls[0] += 1
        return 1000 * calls[0]

    reader = ProcessMemoryReader(
        GIB, max_age=0.002, resident=resident, cgroup_limit=lambda: None, monotonic=lambda: now[0]
    )
    assert reader.resident_source == "given"
    first = reader.read()
    now[0] += 0.001
    assert reader.read() is first and calls[0] == 1
    now[0] += 0.001
    assert reader.read().used_bytes == 2000 and calls[0] == 2
    fresh = ProcessMemoryReader(GIB, max_age=0, resident=resident, cgroup_limit=lambda: None)
    fresh.read()
    fresh.read()
    assert calls[0] == 4


# -- the reader through the plugins ---------------------------------------------------------------


class TracedHeap:
    """A plugin's reader: a fixed reading, standing in for, say, tracemalloc's heap."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit or 100

    def read(self) -> MemoryReading:
        return MemoryReading(1, self.limit)


class TracedHeapPlugin:
    @hookimpl
    def nucleo_trio_memory_reader(self, limit_bytes: int | None) -> MemoryReader:
        return TracedHeap(limit_bytes)


class BrokenReaderPlugin:
    @hookimpl
    def nucleo_trio_memory_reader(self, limit_bytes: int | None) -> Any:
        return "not a reader"


def test_the_reader_comes_from_the_memory_reader_hook() -> None:
    """The nucleo_trio_memory_reader hook is firstresult: a plugin's answer wins, the built-in
    answers last with a ProcessMemoryReader, a non-reader is a PluginError."""
    builtin = memory_reader_from(make_plugin_manager(load_entrypoints=False), 2 * GIB)
    assert isinstance(builtin, ProcessMemoryReader)
    assert builtin.limit_bytes <= 2 * GIB
    pm = make_plugin_manager(load_entrypoints=False, plugins=[TracedHeapPlugin()])
    assert pm.hook.nucleo_trio_memory_reader(limit_bytes=None).read() == MemoryReading(1, 100)
    plugged = memory_reader_from(pm, 5 * GIB)
    assert isinstance(plugged, TracedHeap) and plugged.limit == 5 * GIB
    broken = make_plugin_manager(load_entrypoints=False, plugins=[BrokenReaderPlugin()])
    with pytest.raises(PluginError, match="not a reader"):
        memory_reader_from(broken, None)


# -- the gate in a dispatcher -----------------------------------------------------------------


class HeapPlugin:
    """Hands the dispatcher a scripted heap as its memory reader."""

    def __init__(self, heap: FakeHeap) -> None:
        self.heap = heap
        self.limits: list[int | None] = []

    @hookimpl
    def nucleo_trio_memory_reader(self, limit_bytes: int | None) -> MemoryReader:
        self.limits.append(limit_bytes)
        return self.heap


async def test_a_dispatcher_meets_memory_through_its_gate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """MEM-02, MEM-34, MEM-50: the gate is the dispatcher's own memory account (one per
    dispatcher, not a process singleton), reading through the reader its plugins chose with
    the configured limit; under the latch a job with resources waits while an orchestrator's
    job runs, and the job starts at the re-check that reads memory under 90 %."""
    heap = FakeHeap(0.50)
    plugin = HeapPlugin(heap)
    pm = make_plugin_manager(load_entrypoints=False, plugins=[plugin])
    config = DispatcherConfig(memory=MemoryConfig(limit="64GiB"))
    other = JobDispatcher()
    async with open_dispatcher(config, plugin_manager=pm) as dispatcher:
        gate = dispatcher.memory_gate
        assert isinstance(gate, MemoryPressureGate) and dispatcher.admission.memory is gate
        assert other.memory_gate is not None and other.memory_gate is not gate
        assert plugin.limits == [64 * GIB] and gate.reader is heap
        slots = CountingGate("slots", 4)
        root = workflow("u", "memory")
        heap.set(0.96)
        tool = dispatcher.submit(
            Echo(root, "tool", requirements=lambda: JobRequirements().require_rate_limiter(slots))
        )
        free = dispatcher.submit(Echo(root, "free"))
        assert await free.result() == "free"
        await trio.sleep(10)
        assert not tool.done and dispatcher.admission.held_on(gate) == 1
        assert gate.status().zone is MemoryZone.CRITICAL
        heap.set(0.50)
        started = trio.current_time()
        assert await tool.result() == "tool"
        assert trio.current_time() - started <= 2.0
        assert "zone GREEN" in gate.status().summary


async def test_the_gate_can_be_switched_off_or_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``MemoryConfig(enabled=False)`` seats UnboundedMemory; a memory account passed in takes
    the seat and the dispatcher builds no gate."""
    off = JobDispatcher(DispatcherConfig(memory=MemoryConfig(enabled=False)))
    assert off.memory_gate is None and isinstance(off.admission.memory, UnboundedMemory)
    mine = MemoryPressureGate(FakeHeap(0.2))
    given = JobDispatcher(memory=mine)
    assert given.memory_gate is None and given.admission.memory is mine
    async with open_dispatcher() as default:
        gate = default.memory_gate
        assert gate is not None and isinstance(gate.reader, ProcessMemoryReader)
        assert gate.status().usage_ratio < 0.95


# -- real memory ----------------------------------------------------------------------------------


async def test_the_latch_holds_a_job_until_real_memory_is_freed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """MEM-06, MEM-07, MEM-50 over real memory: with a limit a quarter above this process's
    resident memory, an allocation that fills it sets the latch and a job with resources waits
    (for as long as the memory stays allocated); freeing it lets the job go at the next
    re-check. Resident memory is read for real; admission's waits are in virtual time."""
    caplog.set_level(logging.INFO, logger="nucleo_trio.admission.memory")
    gc.collect()
    rss = psutil.Process().memory_info().rss
    reader = ProcessMemoryReader(int(rss / 0.80), max_age=0, cgroup_limit=lambda: None)
    gate = MemoryPressureGate(reader)
    admission = Admission(gate)
    slots = CountingGate("slots", 2)
    assert gate.status().usage_ratio < 0.85
    size = max(64 * MIB, int(0.30 * rss))
    ballast = bytearray(size)
    ballast[::4096] = b"\x01" * len(range(0, size, 4096))
    assert gate.status().usage_ratio >= 0.95
    granted_at: list[float] = []

    async def job() -> None:
        grant = await admission.admit(Demand().add(slots), FakeJob("held"))
        granted_at.append(trio.current_time())
        admission.release(grant)

    async with trio.open_nursery() as nursery:
        await nursery.start(admission.run)
        nursery.start_soon(job)
        await trio.sleep(30)
        assert granted_at == [] and admission.held_on(gate) == 1
        assert gate.status_indicator == "blocked"
        del ballast
        freed = trio.current_time()
        await trio.sleep(2.5)
        assert len(granted_at) == 1 and granted_at[0] - freed <= 2.0
        assert slots.in_use == 0
        admission.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Memory latch set: ") for m in messages)
    assert any(m.startswith("Memory latch cleared: ") for m in messages)
