"""The caller's side of a submitted job: await its outcome, cancel it, watch its workflow."""

from __future__ import annotations

import math
import traceback
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio
from trio import lowlevel as _lowlevel  # (trio's own module attributes cost a slow look-up)

from ..errors import JobDeadlockError
from .context import _current

if TYPE_CHECKING:
    from ..bus.bus import Subscription
    from .context import JobContext
    from .job import AbstractJob
    from .state import JobState

__all__ = ["JobHandle"]

R = TypeVar("R")


def _call_site() -> str:
    for frame in reversed(traceback.extract_stack(limit=8)[:-2]):
        if not frame.filename.endswith(("handle.py",)):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


def _check_wait(name: str, timeout: object) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"{name}: result(timeout=...) takes seconds or None, got {timeout!r}")
    if math.isnan(timeout):
        raise ValueError(f"{name}: result(timeout=...) takes seconds or None, got nan")


class JobHandle(Generic[R]):
    """What :meth:`JobDispatcher.submit` returns at once.

    ``await handle.result()`` waits for the job and returns its result or raises its failure
    (the failure itself, chained with ``__cause__``). The handle settles last on every path:
    after the terminal event, the workflow event and the job's teardown.
    """

    def __init__(
        self,
        job: AbstractJob[R],
        context: JobContext,
        token: trio.lowlevel.TrioToken | None = None,
    ) -> None:
        """``token`` is the trio run the job runs in (the dispatcher's), else the current
        one's; a handle built by hand outside any run belongs to the first run that waits."""
        # EXEC-09: _settle is the last step of every path (JobDispatcher._finish).
        self.job = job
        """The job this handle is for."""
        self.context = context
        """The job's context: its state, metadata, progress and timing."""
        # Whether the handle has settled, and the event a wait before the settle parks on:
        # made by the first such wait, since most handles are never waited on before they
        # settle, and a job parked in admission's line would hold its event (and the event's
        # set of tasks) for nothing.
        self._done = False
        self._event: trio.Event | None = None
        if token is None:
            try:
                token = trio.lowlevel.current_trio_token()
            except RuntimeError:
                pass
        self._token = token
        self._result: Any = None
        self._error: BaseException | None = None
        # Made by the first workflow observer: most handles never have one.
        self._subscriptions: list[Subscription] | None = None
        self._canceller: Any = None

    @property
    def job_id(self) -> str:
        """The job's id."""
        return self.job.job_id

    @property
    def workflow_id(self) -> str:
        """The id of the job's workflow."""
        return self.job.workflow_id

    @property
    def state(self) -> JobState:
        """The job's state now. It turns terminal a moment before the handle is :attr:`done`."""
        return self.context.state

    @property
    def done(self) -> bool:
        """True once the handle has settled: :meth:`outcome` then answers without waiting."""
        return self._done

    async def _wait_settled(self) -> None:
        """Wait until the handle settles (a checkpoint if it has), without reading its
        outcome: what a job that depends on this one waits on, holding nothing. The event is
        made by the first wait before the settle, as for :meth:`result`."""
        if self._done:
            await trio.lowlevel.checkpoint()
            return
        event = self._event
        if event is None:
            event = self._event = trio.Event()
        await event.wait()

    @property
    def error(self) -> BaseException | None:
        """The failure once settled, ``None`` on success or while running."""
        return self._error

    @property
    def trio_token(self) -> trio.lowlevel.TrioToken | None:
        """The token of the trio run the job runs in: what a thread trio did not start passes
        to :func:`trio.from_thread.run` to await :meth:`result` there."""
        return self._token

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - get(timeout)
        """Wait for the job and return its result, or raise its failure.

        A caller that holds admitted resources may not wait on another job (that is
        hold-and-wait): it gets :class:`JobDeadlockError` naming both jobs and the call site. An
        orchestrator holds nothing and waits freely. ``timeout`` (seconds) bounds the wait with
        :class:`trio.TooSlowError`; zero or less only looks.

        Await it in the trio run the job runs in. Another run (a thread with a ``trio.run`` of
        its own) gets :class:`RuntimeError` at once: parking there would crash the job's run
        when the job settles. From a thread, ``trio.from_thread.run(handle.result,
        trio_token=handle.trio_token)`` waits in the right run; :meth:`outcome` answers from
        anywhere once :attr:`done`.
        """
        # Every caller awaits this once per job: the run check's common answer (the job's own
        # run) and current_job() are inline, and the outcome is read in place (the handle has
        # settled once the wait is over). _check_run is the whole check.
        try:
            token: trio.lowlevel.TrioToken | None = _lowlevel.current_trio_token()
        except RuntimeError:
            token = None
        if token is not self._token or token is None:
            self._check_run("result()")
        if timeout is not None and (type(timeout) is not float or timeout != timeout):
            _check_wait(self.job.name, timeout)
        caller = _current.get()
        if caller is not None and caller.is_executing_job_with_resources:
            raise JobDeadlockError(caller.job_id, self.job_id, _call_site())
        if self._done:
            await _lowlevel.checkpoint()  # settled: only a checkpoint, even with a zero wait
        else:
            event = self._event
            if event is None:
                event = self._event = trio.Event()
            if timeout is None:
                await event.wait()
            else:
                with trio.fail_after(timeout if timeout >= 0 else 0):
                    await event.wait()
        if self._error is not None:
            raise self._error
        result: R = self._result
        return result

    def _check_run(self, call: str) -> None:
        """Refuse a call from outside the job's trio run, before it touches anything of it."""
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            token = None
        if token is self._token and token is not None:
            return
        if self._token is None and token is not None:
            self._token = token
            return
        where = "outside any trio run" if token is None else "in another trio run"
        bridge = "run(handle.result" if call == "result()" else "run_sync(handle.cancel"
        raise RuntimeError(
            f"{self.job.name}: handle.{call} was called {where}, not in the one the job runs in "
            "(a thread with a trio.run of its own?), where it would crash the job's run. From "
            f"another thread use trio.from_thread.{bridge}, trio_token=handle.trio_token); "
            "handle.outcome() answers from anywhere once the handle is done"
        )

    def outcome(self) -> R:
        """The settled outcome without waiting; RuntimeError while the job is still running."""
        if not self._done:
            raise RuntimeError(f"{self.job.name} has not settled yet")
        if self._error is not None:
            raise self._error
        result: R = self._result  # (typing.cast would be a call)
        return result

    def cancel(self, reason: str = "Job cancelled") -> bool:
        """The cooperative cancel of ``dispatcher.cancel(job_id, reason)``: answers whether the
        job was found queued or running (``False`` once the handle has settled).

        Call it in the job's trio run; from another thread,
        ``trio.from_thread.run_sync(handle.cancel, trio_token=handle.trio_token)``.
        """
        if self._done or self._canceller is None:
            return False
        self._check_run("cancel()")
        return bool(self._canceller(self.job_id, reason))

    def register_workflow_observer(self, observer: Any) -> Subscription:
        """Subscribe ``observer`` to this handle's workflow only, until the handle settles."""
        bus = self.context.dispatcher.bus
        subscription = bus.subscribe(observer, workflow_id=self.workflow_id)
        if self._done:
            subscription.unsubscribe()
        else:
            if self._subscriptions is None:
                self._subscriptions = []
            self._subscriptions.append(subscription)
        return subscription

    # -- the dispatcher's side ---------------------------------------------------------------------
    def _settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if self._done:
            return
        self._result = result
        self._error = error
        subscriptions = self._subscriptions
        if subscriptions is not None:  # most handles never had a workflow observer
            self._subscriptions = None
            for subscription in subscriptions:
                subscription.unsubscribe()
        self._done = True
        event = self._event
        if event is not None:
            event.set()  # wakes whoever waits on it

    def __repr__(self) -> str:
        status = "settled" if self.done else self.context.state.value
        return f"<JobHandle {self.job.name} {status}>"
