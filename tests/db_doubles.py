"""A database provider that records every call, with failures on demand."""

from __future__ import annotations

from typing import Any

import trio

from nucleo_trio.admission import DatabaseGate, RateLimiter
from nucleo_trio.resources import DBHandle


class ProviderFault(RuntimeError):
    """What a :class:`RecordingProvider` raises when told to fail."""


class RecordingProvider:
    """Follows the provider contract and writes ``"<name>.<verb>"`` to a shared log.

    ``fail`` names the verbs that raise :class:`ProviderFault`; ``close_blocks`` makes
    ``close`` wait until the handle is aborted (or the caller is cancelled).
    """

    def __init__(
        self,
        name: str,
        log: list[str] | None = None,
        *,
        max_concurrent: int = 2,
        fail: frozenset[str] | set[str] = frozenset(),
        close_blocks: bool = False,
    ) -> None:
        self._name = name
        self.log = [] if log is None else log
        self.gate = DatabaseGate(name, max_concurrent)
        self.fail = set(fail)
        self.close_blocks = close_blocks
        self.open_handles = 0
        self.aborted_at: float | None = None
        self._aborted = trio.Event()

    @property
    def name(self) -> str:
        return self._name

    def admission(self) -> RateLimiter:
        return self.gate

    def _record(self, verb: str) -> None:
        self.log.append(f"{self._name}.{verb}")
        if verb in self.fail:
            raise ProviderFault(f"{self._name} {verb} failed")

    async def acquire(self, read_only: bool = False) -> DBHandle:
        await trio.lowlevel.checkpoint()
        self._record("acquire")
        self.open_handles += 1
        return DBHandle(self, connection=f"conn:{self._name}", read_only=read_only)

    async def begin(self, handle: DBHandle) -> None:
        self._record("begin")

    async def commit(self, handle: DBHandle) -> None:
        await trio.lowlevel.checkpoint()
        self._record("commit")

    async def await_completion(self, handle: DBHandle) -> None:
        self._record("await")

    async def rollback(self, handle: DBHandle) -> None:
        self._record("rollback")

    async def close(self, handle: DBHandle) -> None:
        if handle.closed:
            return
        self.log.append(f"{self._name}.close")
        if self.close_blocks and not handle.aborted:
            await self._aborted.wait()
        handle.closed = True
        self.open_handles -= 1
        if "close" in self.fail:
            raise ProviderFault(f"{self._name} close failed")

    def abort(self, handle: DBHandle) -> None:
        self.log.append(f"{self._name}.abort")
        handle.aborted = True
        self.aborted_at = trio.current_time()
        self._aborted.set()


class SlowClose(RecordingProvider):
    """A provider whose close, abort or not, returns only once the test sets ``closable``:
    a statement that does not notice the abort, with the close queued behind it."""

    def __init__(self, name: str, log: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(name, log, **kwargs)
        self.closable = trio.Event()

    async def close(self, handle: DBHandle) -> None:
        if handle.closed:
            return
        self.log.append(f"{self._name}.close")
        await self.closable.wait()
        handle.closed = True
        self.open_handles -= 1
