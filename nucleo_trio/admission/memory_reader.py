"""Reading memory: how full the process is, as the memory pressure gate sees it.

The gate never measures anything itself; it asks a :class:`MemoryReader` for a
:class:`MemoryReading` (bytes used against a limit) once per look, and decides from the ratio.
That keeps the gate's rules testable with a scripted reader in virtual time, and lets a
deployment measure whatever its memory really is.

The default, :class:`ProcessMemoryReader`, reads the process's resident set size (RSS) against
a limit fixed when it is built: the tighter of the cgroup v2 ``memory.max`` of the cgroup the
process runs in (a container's limit) and a configured limit, else the machine's physical
memory. The admission fast path looks on every resourceful grant, so a read must cost next to
nothing: on Linux it is one ``pread`` of ``/proc/self/statm`` on a descriptor kept open (about
a microsecond, fresh at every look); elsewhere it goes through psutil and a reading is reused
for a couple of milliseconds of the real clock.

The reader a dispatcher uses is chosen through the ``nucleo_trio_memory_reader`` hook (a
``firstresult`` provider hook): a plugin answers first to measure something else, such as a
container's whole memory or the Python heap through :mod:`tracemalloc`; the built-in answers
last with a :class:`ProcessMemoryReader` (see :func:`memory_reader_from`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs
import psutil  # type: ignore[import-untyped, unused-ignore]

from .._plugin_errors import PluginError

if TYPE_CHECKING:
    import pluggy

__all__ = [
    "DEFAULT_MAX_AGE",
    "MemoryReader",
    "MemoryReading",
    "ProcessMemoryReader",
    "cgroup_memory_limit",
    "memory_reader_from",
    "parse_memory_limit",
]

DEFAULT_MAX_AGE = 0.002
"""How long (real seconds) :class:`ProcessMemoryReader` reuses a reading taken through psutil:
long enough that a burst of grants costs one read, short enough that a job's allocation is seen
by the next look. Readings from ``/proc/self/statm`` are cheap enough to be taken fresh."""


def _byte_count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"MemoryReading.{attribute.name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"MemoryReading.{attribute.name} must be >= 0, got {value!r}")


@attrs.frozen
class MemoryReading:
    """One look at memory: ``used_bytes`` against ``limit_bytes``.

    Both are ``int`` byte counts of 0 or more (:class:`TypeError` for another type,
    :class:`ValueError` for a negative).
    """

    used_bytes: int = attrs.field(validator=_byte_count)
    """Bytes in use (the process's resident set, for the default reader)."""
    limit_bytes: int = attrs.field(validator=_byte_count)
    """The limit they are measured against, in bytes; 0 when the reader cannot tell."""

    @property
    def ratio(self) -> float:
        """``used_bytes / limit_bytes`` (0.95 is 95 %), or 0.0 when the limit is 0: a reader
        that cannot tell its limit never latches anyone."""
        return self.used_bytes / self.limit_bytes if self.limit_bytes > 0 else 0.0


@runtime_checkable
class MemoryReader(Protocol):
    """What the memory pressure gate measures with.

    ``read()`` answers at once with the memory in use and the limit it is measured against. The
    gate calls it once per look (every ``fits``, ``try_take``, non-latched ``earliest_fit``,
    ``status`` and ``status_indicator``), on the trio thread and on the admission fast path, so
    it must be cheap and must never block: a reader backed by a slow source caches.
    """

    def read(self) -> MemoryReading:
        """The memory in use and the limit it is measured against, now (or as cached), as a
        :class:`MemoryReading`. It must answer at once, without blocking or awaiting."""
        ...


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_memory_limit(value: object, *, what: str = "memory limit") -> int:
    """A memory limit in bytes, from an int or a size such as ``"8GiB"``, ``"512 MiB"`` or
    ``"2GB"``.

    Binary units (``KiB``, ``MiB``, ``GiB``, ``TiB``, also ``Ki``...) count in 1024s, decimal
    ones (``KB``, ``MB``, ``GB``, ``TB``, also ``K``...) in 1000s, case-insensitively; a bare
    number is bytes. Anything that is not a positive whole number of bytes is refused with a
    :class:`ValueError` naming the value: ``0``, ``-1``, ``True``, ``"lots"``, ``"8 parsecs"``.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"{what} must be a positive number of bytes or a size like '8GiB', got {value!r}"
        )
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{what} must be a positive number of bytes, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(
            f"{what} must be a positive number of bytes or a size like '8GiB', "
            f"got {type(value).__name__} {value!r}"
        )
    match = _SIZE.fullmatch(value)
    factor = _UNITS.get(match.group(2).lower()) if match is not None else None
    if match is None or factor is None:
        raise ValueError(
            f"{what} {value!r} is not a size: write a number of bytes or a number with a unit "
            "(B, KB, MB, GB, TB in 1000s; KiB, MiB, GiB, TiB in 1024s), e.g. '8GiB'"
        )
    size = math.floor(float(match.group(1)) * factor)
    if size <= 0:
        raise ValueError(f"{what} must be a positive number of bytes, got {value!r}")
    return size


# --------------------------------------------------------------------------------------------
# cgroup v2
# --------------------------------------------------------------------------------------------


def _cgroup2_mount(mountinfo: str) -> Path | None:
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if sep and right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            if len(fields) >= 5:
                return Path(fields[4])
    return None


def cgroup_memory_limit(
    *,
    proc: Path = Path("/proc/self"),
) -> int | None:
    """The cgroup v2 memory limit this process runs under, in bytes, or ``None`` when there is
    none (no cgroup v2 hierarchy, no memory controller, or ``memory.max`` reading ``max``).

    The effective limit is the smallest ``memory.max`` on the way from the process's own cgroup
    up to the root of the mounted hierarchy, since a parent's limit binds its children too.
    Unreadable files count as no limit: the reader then falls back to the next source.
    """
    try:
        mount = _cgroup2_mount((proc / "mountinfo").read_text())
        if mount is None:
            return None
        own = ""
        for line in (proc / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:].strip()
                break
    except OSError:
        return None
    limits: list[int] = []
    directory = mount / own.lstrip("/")
    while True:
        try:
            text = (directory / "memory.max").read_text().strip()
        except OSError:
            text = "max"
        if text.isdigit() and int(text) > 0:
            limits.append(int(text))
        if directory == mount or mount not in directory.parents:
            break
        directory = directory.parent
    return min(limits) if limits else None


# --------------------------------------------------------------------------------------------
# The process's resident memory
# --------------------------------------------------------------------------------------------


class _Statm:
    """``/proc/self/statm``, opened once per process (and again in a forked child, which drops
    the parent's descriptor in an at-fork hook): one ``pread`` answers the resident set in
    about a microsecond, so every look can be fresh."""

    fd = -1
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    _opening = threading.Lock()

    @classmethod
    def resident(cls) -> int:
        fd = cls.fd
        if fd < 0:
            fd = cls._open()
        return int(os.pread(fd, 128, 0).split(None, 2)[1]) * cls.page

    @classmethod
    def _open(cls) -> int:
        with cls._opening:
            if cls.fd < 0:
                cls.fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            return cls.fd

    @classmethod
    def _forked(cls) -> None:
        """In a forked child: the inherited descriptor reads the parent's statm; the child's
        first read opens its own."""
        if cls.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(cls.fd)
        cls.fd = -1
        cls._opening = threading.Lock()  # a lock held by another thread at the fork stays held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Statm._forked)


_set = object.__setattr__


def _trusted_reading(used_bytes: int, limit_bytes: int) -> MemoryReading:
    """A :class:`MemoryReading` of two byte counts already known to be ints of 0 or more (a
    built-in source's, and the limit fixed when the reader was built), made without running
    the validators again: every look of the admission fast path reads one."""
    reading: MemoryReading = object.__new__(MemoryReading)
    _set(reading, "used_bytes", used_bytes)
    _set(reading, "limit_bytes", limit_bytes)
    return reading


def _psutil_resident() -> int:
    return int(psutil.Process().memory_info().rss)


def _resident_source() -> tuple[Callable[[], int], str]:
    """``/proc/self/statm`` where there is one (Linux), else psutil."""
    try:
        _Statm.resident()
    except (OSError, ValueError, IndexError, AttributeError):
        return _psutil_resident, "psutil"
    return _Statm.resident, "statm"


class ProcessMemoryReader:
    """The process's resident memory (RSS) against the process's memory limit.

    The limit is fixed at construction: the tighter of the cgroup v2 limit (when one is set) and
    ``limit_bytes`` (when given; an int or a size such as ``"8GiB"``, see
    :func:`parse_memory_limit`), else the machine's physical memory. ``limit_source`` says
    which: ``"cgroup"``, ``"configured"`` or ``"physical"``.

    Resident memory is read from ``/proc/self/statm`` where the platform has it (about a
    microsecond, so every read is fresh: ``max_age`` defaults to 0), else through psutil (tens of
    microseconds, so a reading is reused for :data:`DEFAULT_MAX_AGE` seconds of ``monotonic``, the
    real clock: resident memory is a fact of the machine, not of trio's clock). ``resident``
    replaces the source (a callable answering bytes); ``resident_source`` names the one in use.
    """

    def __init__(
        self,
        limit_bytes: int | str | None = None,
        *,
        max_age: float | None = None,
        cgroup_limit: Callable[[], int | None] = cgroup_memory_limit,
        monotonic: Callable[[], float] = time.monotonic,
        resident: Callable[[], int] | None = None,
    ) -> None:
        if max_age is not None and (
            isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age < 0
        ):
            raise ValueError(
                f"ProcessMemoryReader: max_age must be seconds >= 0 or None, got {max_age!r}"
            )
        configured = None if limit_bytes is None else parse_memory_limit(limit_bytes)
        from_cgroup = cgroup_limit()
        if from_cgroup is not None and (configured is None or from_cgroup < configured):
            self.limit_bytes, self.limit_source = from_cgroup, "cgroup"
        elif configured is not None:
            self.limit_bytes, self.limit_source = configured, "configured"
        else:
            self.limit_bytes, self.limit_source = int(psutil.virtual_memory().total), "physical"
        if resident is None:
            self._resident, self.resident_source = _resident_source()
        else:
            self._resident, self.resident_source = resident, "given"
        # A built-in source answers an int of bytes, so its readings skip the validators; a
        # given one is checked at every reading it answers.
        self._new_reading = MemoryReading if resident is not None else _trusted_reading
        if max_age is None:
            max_age = 0.0 if self.resident_source == "statm" else DEFAULT_MAX_AGE
        self.max_age = float(max_age)
        """Real seconds a reading is reused: 0 (always fresh) with ``/proc/self/statm``,
        :data:`DEFAULT_MAX_AGE` through psutil, unless given."""
        self._monotonic = monotonic
        self._reading: MemoryReading | None = None
        self._read_at = 0.0

    def read(self) -> MemoryReading:
        """The resident set against :attr:`limit_bytes`; fresh, or the last reading while it
        is younger than :attr:`max_age` real seconds.

        A fresh reading of the same bytes as the last one is answered as that same
        :class:`MemoryReading` (the resident set moves by whole pages, so most looks in a burst
        find it where it was): nothing is built, and the gate sees at once that nothing moved.
        """
        if self.max_age:
            now = self._monotonic()
            if self._reading is not None and now - self._read_at < self.max_age:
                return self._reading
            self._read_at = now
        used = self._resident()
        reading = self._reading
        if reading is None or reading.used_bytes != used:
            reading = self._reading = self._new_reading(used, self.limit_bytes)
        return reading

    def __repr__(self) -> str:
        return (
            f"<ProcessMemoryReader limit={self.limit_bytes} ({self.limit_source}), "
            f"resident from {self.resident_source}, max_age={self.max_age}>"
        )


def memory_reader_from(plugins: pluggy.PluginManager, limit_bytes: int | None) -> MemoryReader:
    """The reader the plugins provide through ``nucleo_trio_memory_reader`` (the first answer
    that is not ``None``), or a :class:`ProcessMemoryReader` when none answers (the built-ins
    blocked). An answer that is not a :class:`MemoryReader` is refused with a
    :class:`~nucleo_trio.plugins.PluginError` naming what came back."""
    reader = plugins.hook.nucleo_trio_memory_reader(limit_bytes=limit_bytes)
    if reader is None:
        return ProcessMemoryReader(limit_bytes)
    if not isinstance(reader, MemoryReader):
        raise PluginError(
            "the nucleo_trio_memory_reader hook answered "
            f"{type(reader).__name__} {reader!r}, which has no read(); a memory reader answers "
            "read() with a MemoryReading"
        )
    return reader
