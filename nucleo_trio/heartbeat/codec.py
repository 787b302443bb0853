"""How a durable store writes a heartbeat and reads it back: signed, and named by registry.

A durable store keeps rows where others can write, so a row is data and never code. The
:class:`HeartbeatCodec` a store writes and reads through holds the dispatcher's
:class:`~nucleo_trio.heartbeat.HeartbeatJobs` and its :class:`~nucleo_trio.heartbeat.SigningKey`:

* writing, the job class is named by its registered name (a class this program minted a
  heartbeat for is registered there and then), and the row is signed with an HMAC over its
  other eight values;
* reading, the signature is checked before anything else in the row is looked at. A row with
  no signature or a wrong one is *refused*: the store still hands the Heart a heartbeat for it,
  but one whose job class is a :class:`RefusedHeartbeatRow` stand-in, with no user, guard, input
  or recurrence of the row's, which fails its fire with :class:`HeartbeatRowRefused` (a
  :class:`~nucleo_trio.heartbeat.HeartbeatFireFailed` on the bus) and is not put back;
* a signed row whose job name this process has not registered is genuine, but there is nothing
  to build: its job class is an :class:`UnregisteredHeartbeatJob` stand-in that fails each fire
  with :class:`UnknownHeartbeatJob`, and the schedule goes on (a recurring heartbeat keeps its
  slots, written back under the same name) until a worker that registered the name fires it.

The job name is looked up in the registry only, never imported. The classes of the values
(the guard's scopes, the input, the recurrence) are imported by path, but only once the
signature matched: the row was written by a runtime holding the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar, Final, NoReturn, final

from ..errors import NucleoSystemError
from ..guardrails.scope import ScopeGuard
from ..jobs.context import JobContext
from ..jobs.identity import Identifiable
from ..jobs.job import AbstractJob, Tool
from .records import (
    Heartbeat,
    HeartbeatRow,
    _mint,
    _restore,
    _row_values,
)
from .registry import HeartbeatJobs
from .signing import SigningKey

__all__ = [
    "REFUSED_USER",
    "HeartbeatCodec",
    "HeartbeatRowRefused",
    "RefusedHeartbeatRow",
    "UnknownHeartbeatJob",
    "UnregisteredHeartbeatJob",
]

_COMPONENT: Final = "heartbeat-store"

_CONTEXT: Final = "nucleo-trio heartbeat row v1"
"""What a signature covers besides the row, so it can mean nothing anywhere else."""

REFUSED_USER: Final = "(unverified)"
"""The user a refused row's stand-in heartbeat carries: never the one the row claims."""


class HeartbeatRowRefused(NucleoSystemError):
    """Raised at the fire of a heartbeat whose stored row was refused: unsigned, signed with
    another key or changed since, or unreadable. ``heartbeat_id`` is the id the row gives and
    ``reason`` says what was wrong; the row is not fired and not put back."""

    def __init__(self, heartbeat_id: str, reason: str) -> None:
        self.heartbeat_id = heartbeat_id
        """The heartbeat id the refused row gives."""
        self.reason = reason
        """Why the row was refused, in words (with what the row claims to be)."""
        super().__init__(
            _COMPONENT,
            f"heartbeat {heartbeat_id!r}: its stored row is refused and not fired: {reason}",
        )


class UnknownHeartbeatJob(NucleoSystemError):
    """Raised at the fire of a genuine heartbeat whose job name (``name``) this process has
    not registered: nothing is built, and the schedule goes on."""

    def __init__(self, name: str) -> None:
        self.name = name
        """The job name the row gives, which no class is registered under in this process."""
        super().__init__(
            "heartbeat",
            f"the job {name!r} is not registered in this process, so nothing is built; "
            "register its class (open_dispatcher(heartbeat_jobs=[...]) or the "
            "nucleo_trio_heartbeat_jobs hook) in every worker that shares the store",
        )


class _StandIn(Tool[None]):
    """A job class that is never built: building one raises why."""

    def __init__(self, parent: Identifiable, prefix: str | None = None) -> None:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise NotImplementedError

    async def execute(self, context: JobContext) -> None:  # pragma: no cover - never built
        raise RuntimeError(f"{type(self).__name__} is never built")


class UnregisteredHeartbeatJob(_StandIn):
    """The job class of a heartbeat restored from a genuine row whose job name
    (``heartbeat_name``) is not registered here; building it raises :class:`UnknownHeartbeatJob`.
    One subclass per name, written back under that name."""

    heartbeat_name: ClassVar[str] = ""
    """The job name the row gives, which no class is registered under here."""

    def _refuse(self) -> NoReturn:
        raise UnknownHeartbeatJob(type(self).heartbeat_name)


class RefusedHeartbeatRow(_StandIn):
    """The job class of the heartbeat a refused row gives: building it raises
    :class:`HeartbeatRowRefused` with the row's id and the reason. One subclass per row; such a
    heartbeat is never written to a store."""

    heartbeat_id: ClassVar[str] = ""
    """The heartbeat id the refused row gives."""
    reason: ClassVar[str] = ""
    """Why the row was refused, in words."""

    def _refuse(self) -> NoReturn:
        cls = type(self)
        raise HeartbeatRowRefused(cls.heartbeat_id, cls.reason)


@final
class HeartbeatCodec:
    """The signed, registry-named form of a heartbeat that a durable store writes and reads.

    ``jobs`` are the classes rows may name (the dispatcher's
    :class:`~nucleo_trio.heartbeat.HeartbeatJobs`), ``key`` signs and checks every row. The
    dispatcher builds one at start and hands it to its store; a store used on its own is
    given one (``SQLiteHeartbeatStore(path, codec=HeartbeatCodec(jobs, key))``).
    """

    __slots__ = ("_key", "_unregistered", "jobs")

    def __init__(self, jobs: HeartbeatJobs, key: SigningKey) -> None:
        if not isinstance(jobs, HeartbeatJobs):
            raise TypeError(f"a HeartbeatCodec needs HeartbeatJobs, got {type(jobs).__name__}")
        if not isinstance(key, SigningKey):
            raise TypeError(
                f"a HeartbeatCodec needs a SigningKey to sign rows with, got {type(key).__name__}"
            )
        self.jobs = jobs
        """The job classes rows may name, by registered name; :meth:`admit` adds to it."""
        self._key = key
        self._unregistered: dict[str, type[UnregisteredHeartbeatJob]] = {}

    # -- writing --------------------------------------------------------------------------------
    def admit(self, job_class: type[AbstractJob[Any]]) -> str:
        """The name rows give ``job_class``, registering it under its
        :func:`~nucleo_trio.heartbeat.heartbeat_job_name` when it is not registered yet (a class
        this program schedules is its own). A name another class holds is a
        :class:`~nucleo_trio.errors.UsageValueError`."""
        if issubclass(job_class, UnregisteredHeartbeatJob):
            return job_class.heartbeat_name
        if issubclass(job_class, RefusedHeartbeatRow):
            raise NucleoSystemError(
                _COMPONENT,
                f"heartbeat {job_class.heartbeat_id!r} comes from a refused row and is never "
                "written back: re-schedule it",
            )
        known = self.jobs.name_of(job_class)
        return known if known is not None else self.jobs.register(job_class)

    def to_row(self, heartbeat: Heartbeat) -> HeartbeatRow:
        """``heartbeat`` as the signed row a durable store writes. A value that would not read
        back equal is refused here, naming the heartbeat and the value
        (:class:`~nucleo_trio.errors.NucleoSystemError`)."""
        name = self.admit(heartbeat.job_class)
        values = _row_values(heartbeat, lambda: name)
        return HeartbeatRow(*values, self._key.sign(_signed(values)))

    # -- reading --------------------------------------------------------------------------------
    def from_row(self, row: Sequence[Any]) -> Heartbeat:
        """The heartbeat ``row`` holds, once its signature is checked.

        A row with no signature or a wrong one, or one whose values do not read back, gives a
        heartbeat whose job class is a :class:`RefusedHeartbeatRow` (its fire fails with
        :class:`HeartbeatRowRefused`, naming the row's id and why); a signed row naming a job
        this process has not registered gives one whose job class is an
        :class:`UnregisteredHeartbeatJob`. Only a row with no id to name it by raises
        :class:`HeartbeatRowRefused`.
        """
        values = tuple(row)
        heartbeat_id = values[0] if values else None
        if not isinstance(heartbeat_id, str) or not heartbeat_id.strip():
            raise HeartbeatRowRefused(repr(heartbeat_id), "the row has no heartbeat id")
        if len(values) not in (8, 9):
            return self._refused(
                values, f"a row has 9 values, this one {len(values)}: not a row this store wrote"
            )
        signature = values[8] if len(values) == 9 else None
        try:
            payload = _signed(values[:8])
        except (TypeError, ValueError) as exc:
            return self._refused(values, f"its values cannot be read ({exc})")
        if signature is None:
            return self._refused(
                values,
                "it is not signed (written before rows were signed, or by something other than "
                "the runtime); schedule the heartbeat again",
            )
        if not self._key.verify(payload, signature):
            return self._refused(
                values,
                "its signature does not match: it was changed or written outside the runtime, "
                "or signed with another key",
            )
        _, run_at, name, user_id, guard, conversation_id, input, recurrence = values[:8]
        job_class = self.jobs.get(name) or self._unregistered_class(name)
        try:
            return _restore(
                job_class,
                (heartbeat_id, run_at, user_id, guard, conversation_id, input, recurrence),
                True,
            )
        except (NucleoSystemError, TypeError, ValueError, KeyError) as exc:
            return self._refused(values, f"its signed values no longer read back: {exc}")

    def _unregistered_class(self, name: str) -> type[UnregisteredHeartbeatJob]:
        known = self._unregistered.get(name)
        if known is None:
            known = type(
                "UnregisteredHeartbeatJob",
                (UnregisteredHeartbeatJob,),
                {"heartbeat_name": name, "__qualname__": f"UnregisteredHeartbeatJob[{name!r}]"},
            )
            self._unregistered[name] = known
        return known

    def refused(self, heartbeat_id: str, reason: str, run_at: object = 0.0) -> Heartbeat:
        """The stand-in heartbeat for a stored row that is refused (see :meth:`from_row`): its
        job class a :class:`RefusedHeartbeatRow` that fails the fire naming ``heartbeat_id``
        and ``reason``, the user :data:`REFUSED_USER`, no scope, input or recurrence. A store
        calls it for a row it cannot trust for reasons of its own (a row kept under another
        heartbeat's id)."""
        stand_in = type(
            "RefusedHeartbeatRow",
            (RefusedHeartbeatRow,),
            {
                "heartbeat_id": heartbeat_id,
                "reason": reason,
                "__qualname__": f"RefusedHeartbeatRow[{heartbeat_id!r}]",
            },
        )
        if isinstance(run_at, bool) or not isinstance(run_at, int | float):
            run_at = 0.0
        if not math.isfinite(run_at):
            run_at = 0.0
        return _mint(
            stand_in, heartbeat_id, float(run_at), None, None, None, REFUSED_USER, ScopeGuard()
        )

    def _refused(self, values: Sequence[Any], reason: str) -> Heartbeat:
        run_at = values[1] if len(values) > 1 else 0.0
        return self.refused(values[0], f"{reason}{_claims(values)}", run_at)

    def __repr__(self) -> str:
        return f"<HeartbeatCodec {len(self.jobs)} jobs, signed>"


def _signed(values: Sequence[Any]) -> bytes:
    """The bytes a row's signature covers: its eight values, canonical JSON, after a context
    string. ``run_at`` is taken as a float, so a driver's int for a whole second signs alike."""
    heartbeat_id, run_at, *rest = values
    if isinstance(run_at, bool) or not isinstance(run_at, int | float):
        raise TypeError(f"the run instant is {run_at!r}, not a number")
    for value in rest:
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{value!r} is not text")
    text = json.dumps(
        [_CONTEXT, heartbeat_id, float(run_at), *rest],
        ensure_ascii=True,
        allow_nan=False,
        separators=(",", ":"),
    )
    return text.encode("ascii")


def _claims(values: Sequence[Any]) -> str:
    """What a refused row says it is (its job and user), for the message: never trusted."""
    if len(values) < 4:
        return ""
    return f" (the row claims the job {_short(values[2])} for the user {_short(values[3])})"


def _short(value: object, most: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}...'"
