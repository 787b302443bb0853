"""What a heartbeat is: the intent a publisher states, and the stored record only two places mint.

A heartbeat is a job the runtime submits on a schedule: at one instant, and again at every
period after it when it recurs. The publisher-facing :class:`ScheduleHeartbeat` carries intent
only (which job class, under which id, when, with what input, how often): nothing in it says who
asks or under which scope, so there is nothing in it to forge. The stored :class:`Heartbeat`
carries the rest, the user the fire runs for and the sealed
:class:`~nucleo_trio.guardrails.ScopeGuard` it is judged under, and it has no public
constructor. It is minted at exactly two places:

* ``JobContext.publish(ScheduleHeartbeat(...))`` from an orchestrator, which stamps the
  orchestrator's own user and sealed guard (anyone else is refused: scheduling is deferred
  submission, and only orchestrators submit);
* ``JobDispatcher.schedule_heartbeat(spec, user_id)``, the authority-bearing entry for boot code
  and operators.

A store refuses a :class:`Heartbeat` those two did not mint (:func:`is_genuine`), so neither a
hand-built object nor ``attrs.evolve``-style copying can put a forged user or guard on the
schedule. :meth:`Heartbeat.next` is the recurrence's copy: everything but the instant.

A heartbeat written down is a :class:`HeartbeatRow`. :func:`heartbeat_to_row` and
:func:`heartbeat_from_row` are its plain, unsigned form (an events file's): classes by import
path, read back only from modules this process has already imported. A durable store writes
the signed form instead, through its :class:`~nucleo_trio.heartbeat.HeartbeatCodec`: job classes
by registered name, every row signed, and a row changed outside the runtime refused.

**Instants** are wall-clock seconds since the epoch (``time.time()``), so a durable store means
the same moment after a restart. The Heart reads them on trio's clock through
:func:`heartbeat_now`, anchored to the wall clock once per ``trio.run``, which is what lets a
test drive a schedule in virtual time.
"""

from __future__ import annotations

import abc
import datetime
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple, NoReturn, final

import attrs
import trio

from .._heartbeat_mint import MintedHeartbeat, format_instant, is_genuine, register_minted
from .._serialization import converter
from ..errors import NucleoSystemError
from ..guardrails.scope import CompositeScope, Scope, ScopeGuard
from ..jobs.carrier import ConversationCarrier
from ..jobs.job import AbstractJob

__all__ = [
    "ConversationCarrier",
    "FixedInterval",
    "Heartbeat",
    "HeartbeatRow",
    "Recurrence",
    "ScheduleHeartbeat",
    "format_instant",
    "heartbeat_from_row",
    "heartbeat_now",
    "heartbeat_to_row",
    "is_genuine",
]


# -- the clock ---------------------------------------------------------------------------------

_WALL_OFFSET: trio.lowlevel.RunVar[float] = trio.lowlevel.RunVar("nucleo_trio_heartbeat_wall")


def heartbeat_now() -> float:
    """The current instant as the Heart reads it: wall-clock seconds on trio's clock.

    The first call in a ``trio.run`` anchors trio's clock to ``time.time()``; every later call in
    that run is ``trio.current_time()`` plus that offset. On the real clock this is the wall
    clock; under a :class:`trio.testing.MockClock` virtual time moves it, so a test schedules
    with ``heartbeat_now() + 5`` and a virtual sleep of 5 s reaches the fire. Two dispatchers in
    one run share the anchor, so a pause between them is a pause on this clock too.
    """
    try:
        offset = _WALL_OFFSET.get()
    except LookupError:
        offset = time.time() - trio.current_time()
        _WALL_OFFSET.set(offset)
    return trio.current_time() + offset


def _instant(value: object) -> float:
    """Epoch seconds from a number or an aware datetime; ``None`` and the rest are refused."""
    if value is None:
        raise ValueError("ScheduleHeartbeat needs a run instant (run_at), got None")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(
                f"ScheduleHeartbeat.run_at: a datetime needs a time zone to name an instant, "
                f"got the naive {value.isoformat()}"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"ScheduleHeartbeat.run_at must be epoch seconds or an aware datetime, "
            f"got {type(value).__name__}: {value!r}"
        )
    if not math.isfinite(value):
        raise ValueError(f"ScheduleHeartbeat.run_at must be a finite instant, got {value!r}")
    return float(value)


# -- recurrence ----------------------------------------------------------------------------------


class Recurrence(abc.ABC):
    """How a heartbeat recurs: the instant of the next slot after the one that fired.

    Slots are anchored: the next one is computed from the slot that fired, never from the moment
    it actually ran, so a schedule paused for a while fires each overdue slot back to back and
    then keeps its cadence. ``Recurrence.FixedInterval`` is :class:`FixedInterval`.
    """

    FixedInterval: ClassVar[type[FixedInterval]]
    """:class:`FixedInterval`, reachable as ``Recurrence.FixedInterval``."""

    @abc.abstractmethod
    def next_after(self, run_at: float) -> float:
        """The instant of the slot that follows the slot at ``run_at``."""


def _period(value: object) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"FixedInterval needs a period in seconds or a timedelta, got {type(value).__name__}: "
            f"{value!r}"
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"FixedInterval needs a positive, finite period, got {value!r}")
    return float(value)


@final
@attrs.frozen
class FixedInterval(Recurrence):
    """A slot every ``period`` seconds (or a :class:`datetime.timedelta`), counted from the
    heartbeat's first instant. A zero, negative or infinite period is refused."""

    period: float = attrs.field(converter=_period)
    """Seconds between two slots; a :class:`datetime.timedelta` is converted to seconds. A
    non-number is a ``TypeError``, a zero, negative or infinite period a ``ValueError``."""

    def next_after(self, run_at: float) -> float:
        return run_at + self.period

    def __str__(self) -> str:
        return f"every {self.period:g} s"


Recurrence.FixedInterval = FixedInterval


# -- the publisher's intent ------------------------------------------------------------------------


def _job_class(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        raise ValueError("ScheduleHeartbeat needs a job class, got None")
    if not isinstance(value, type) or not issubclass(value, AbstractJob):
        raise TypeError(
            f"ScheduleHeartbeat.job_class must be a job class (an AbstractJob subclass), "
            f"got {value!r}"
        )


def _heartbeat_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"ScheduleHeartbeat needs a non-blank id, got {value!r}")


def _conversation_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(
            f"ScheduleHeartbeat.conversation_id must be a non-blank string or None, got {value!r}"
        )


def _recurrence(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Recurrence):
        raise TypeError(
            f"ScheduleHeartbeat.recurrence must be a Recurrence (such as FixedInterval) or None, "
            f"got {type(value).__name__}: {value!r}"
        )


@final
@attrs.frozen
class ScheduleHeartbeat:
    """A request to run ``job_class`` at ``run_at`` under the id ``id``: intent only.

    ``job_class`` is built at each fire with the fire's workflow identity as its only argument
    (``job_class(parent)``). ``run_at`` is epoch seconds or an aware datetime. With a
    ``conversation_id`` the fire hands it to the job through
    :meth:`ConversationCarrier.set_conversation_id`; with an ``input`` (anything but ``None``)
    through the job's typed ``set_input``. With a ``recurrence`` the heartbeat fires again at
    each of its slots. Scheduling an id that is already scheduled replaces it: the most recent
    wins.

    Publish it from an orchestrator with ``context.publish(spec)``, or schedule it with the
    dispatcher's authority with ``dispatcher.schedule_heartbeat(spec, user_id)``. A missing job
    class, a blank id or a missing instant is refused with :class:`ValueError`.
    """

    job_class: type[AbstractJob[Any]] = attrs.field(validator=_job_class)
    """The job class each fire builds, as ``job_class(parent)``; anything but an
    :class:`~nucleo_trio.jobs.AbstractJob` subclass is a ``TypeError``."""
    id: str = attrs.field(validator=_heartbeat_id)
    """The heartbeat's id: scheduling it again replaces it, cancelling names it."""
    run_at: float = attrs.field(converter=_instant)
    """The first fire's instant, in epoch seconds; an aware datetime is converted, a naive one,
    ``None`` or a non-finite number is a ``ValueError``."""
    conversation_id: str | None = attrs.field(default=None, validator=_conversation_id)
    """The conversation each fire continues, handed to a
    :class:`~nucleo_trio.jobs.ConversationCarrier` job; ``None`` (the default) for none. A blank
    string is a ``ValueError``."""
    input: Any = None
    """The value each fire gives the job through its ``set_input``; ``None`` (the default) for
    none."""
    recurrence: Recurrence | None = attrs.field(default=None, validator=_recurrence)
    """How the heartbeat recurs after its first fire; ``None`` (the default) fires it once."""


# -- the stored record -----------------------------------------------------------------------------


@final
class Heartbeat(MintedHeartbeat):
    """A scheduled heartbeat as the store holds it: the intent, the user, the sealed guard.

    It has no public constructor (building one raises :class:`TypeError`): the runtime mints it
    from a :class:`ScheduleHeartbeat` at ``JobContext.publish`` (an orchestrator's user and
    sealed guard) or at ``JobDispatcher.schedule_heartbeat`` (the user the operator names). It
    is immutable, copies to itself, and cannot be pickled: a durable store persists its fields
    and restores it through the runtime. Equality is by value.
    """

    __slots__ = (
        "conversation_id",
        "id",
        "input",
        "job_class",
        "recurrence",
        "run_at",
        "scope_guard",
        "user_id",
    )

    job_class: type[AbstractJob[Any]]
    """The job class each fire builds, as ``job_class(parent)``."""
    id: str
    """The heartbeat's id, unique in its store."""
    run_at: float
    """The next fire's instant, in epoch seconds (see :func:`heartbeat_now`)."""
    conversation_id: str | None
    """The conversation each fire continues, or ``None``."""
    input: Any
    """The value each fire gives the job through its ``set_input``, or ``None``."""
    recurrence: Recurrence | None
    """How the heartbeat recurs, or ``None`` when it fires once."""
    user_id: str
    """The user each fire runs for: the orchestrator's that published it, or the one the
    operator named."""
    scope_guard: ScopeGuard
    """The sealed guard each fire is judged under at the dispatcher's door."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "Heartbeat has no public constructor: publish a ScheduleHeartbeat from an "
            "orchestrator (context.publish) or call dispatcher.schedule_heartbeat(spec, user_id)"
        )

    def next(self, instant: float) -> Heartbeat:
        """The same heartbeat at ``instant``: job class, id, conversation id, input, recurrence,
        user and the very same guard instance; only the run instant changes."""
        return _mint(
            self.job_class,
            self.id,
            _instant(instant),
            self.conversation_id,
            self.input,
            self.recurrence,
            self.user_id,
            self.scope_guard,
        )

    @property
    def spec(self) -> ScheduleHeartbeat:
        """The intent this heartbeat carries, without its user and guard."""
        return ScheduleHeartbeat(
            self.job_class,
            self.id,
            self.run_at,
            self.conversation_id,
            self.input,
            self.recurrence,
        )

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"a Heartbeat is immutable; next(instant) makes a copy ({name})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"a Heartbeat is immutable ({name})")

    def __copy__(self) -> Heartbeat:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> Heartbeat:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a Heartbeat cannot be pickled: a durable store persists its fields and the runtime "
            "restores it"
        )

    def _fields(self) -> tuple[object, ...]:
        return (
            self.job_class,
            self.id,
            self.run_at,
            self.conversation_id,
            self.input,
            self.recurrence,
            self.user_id,
            self.scope_guard,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Heartbeat):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((self.id, self.run_at))

    def __str__(self) -> str:
        parts = [f"{self.job_class.__name__} at {format_instant(self.run_at)}"]
        if self.recurrence is not None:
            parts.append(str(self.recurrence))
        parts.append(f"for {self.user_id}")
        if self.conversation_id is not None:
            parts.append(f"conversation {self.conversation_id}")
        return f"{self.id} ({', '.join(parts)})"

    def __repr__(self) -> str:
        return (
            f"<Heartbeat {self.id!r} {self.job_class.__qualname__} at {format_instant(self.run_at)}"
            f" user={self.user_id!r} guard={self.scope_guard!r}>"
        )


def _mint(
    job_class: type[AbstractJob[Any]],
    heartbeat_id: str,
    run_at: float,
    conversation_id: str | None,
    input: Any,
    recurrence: Recurrence | None,
    user_id: str,
    scope_guard: ScopeGuard,
) -> Heartbeat:
    """The one place a :class:`Heartbeat` comes into being. Private to the runtime: the Heart's
    two mints, :meth:`Heartbeat.next` and a durable store's restore call it."""
    if not isinstance(user_id, str) or not user_id.strip():
        raise ValueError(f"a Heartbeat needs a non-blank user, got {user_id!r}")
    if not isinstance(scope_guard, ScopeGuard):
        raise TypeError(f"a Heartbeat needs a ScopeGuard, got {type(scope_guard).__name__}")
    spec = ScheduleHeartbeat(job_class, heartbeat_id, run_at, conversation_id, input, recurrence)
    heartbeat = object.__new__(Heartbeat)
    values: dict[str, object] = {
        "job_class": spec.job_class,
        "id": spec.id,
        "run_at": spec.run_at,
        "conversation_id": spec.conversation_id,
        "input": spec.input,
        "recurrence": spec.recurrence,
        "user_id": user_id,
        "scope_guard": scope_guard,
    }
    for name, value in values.items():
        object.__setattr__(heartbeat, name, value)
    register_minted(heartbeat)
    return heartbeat


def _mint_from(spec: ScheduleHeartbeat, user_id: str, scope_guard: ScopeGuard) -> Heartbeat:
    """Mint the stored heartbeat for ``spec`` under ``user_id`` and ``scope_guard``."""
    if not isinstance(spec, ScheduleHeartbeat):
        raise TypeError(f"expected a ScheduleHeartbeat, got {type(spec).__name__}: {spec!r}")
    return _mint(
        spec.job_class,
        spec.id,
        spec.run_at,
        spec.conversation_id,
        spec.input,
        spec.recurrence,
        user_id,
        scope_guard,
    )


# -- the durable form ------------------------------------------------------------------------------

_COMPONENT = "heartbeat-store"
"""The component a refusal to write or restore a heartbeat names (its stores' component)."""


class HeartbeatRow(NamedTuple):
    """A heartbeat written down: nine plain values, in this order.

    ``job_class`` names the job class: its registered name in a durable store's signed row
    (:class:`~nucleo_trio.heartbeat.HeartbeatCodec`), its import path (``module:qualname``) in
    the plain form of :func:`heartbeat_to_row`. ``scope_guard`` is the guard as a JSON list,
    one object per scope: its class's import path and its fields through the library's
    converter, or for a :class:`~nucleo_trio.guardrails.CompositeScope` ``{"composite": [...]}``
    with its components. ``input`` and ``recurrence`` are JSON objects holding the value's class
    path and its fields, or ``None``. ``signature`` is the HMAC of the other eight under the
    store's key (``None`` in the plain form). The SQLite store writes the nine as the columns
    of its table, the Redis store as one JSON list.
    """

    id: str
    """The heartbeat's id."""
    run_at: float
    """The next fire's instant, in epoch seconds."""
    job_class: str
    """The job class: its registered name (signed row) or its ``module:qualname`` (plain row)."""
    user_id: str
    """The user each fire runs for."""
    scope_guard: str
    """The sealed scope guard, as a JSON list with one object per scope."""
    conversation_id: str | None
    """The conversation each fire continues, or ``None``."""
    input: str | None
    """The input as a JSON object (its class path and fields), or ``None``."""
    recurrence: str | None
    """The recurrence as a JSON object (its class path and fields), or ``None``."""
    signature: str | None = None
    """The HMAC of the other eight values under the store's key; ``None`` (the default) in the
    plain form."""


def heartbeat_to_row(heartbeat: Heartbeat) -> HeartbeatRow:
    """``heartbeat`` as a plain, unsigned row (see :class:`HeartbeatRow`): the job class by its
    import path, no signature. What an events file writes; a durable store writes through its
    :class:`~nucleo_trio.heartbeat.HeartbeatCodec`.

    Everything is checked here, so what cannot be written is refused when it is written: a
    class with no import path that leads back to it (defined inside a function, say) and a
    value that does not come back equal from JSON raise
    :class:`~nucleo_trio.errors.NucleoSystemError`, naming the heartbeat and what it holds.
    """
    what = f"heartbeat {heartbeat.id!r}"
    return HeartbeatRow(
        *_row_values(heartbeat, lambda: _class_path(heartbeat.job_class, f"{what}: the job class"))
    )


_RowValues = tuple[str, float, str, str, str, str | None, str | None, str | None]


def _row_values(heartbeat: Heartbeat, job_name: Callable[[], str]) -> _RowValues:
    """The fields of ``heartbeat``'s row but its signature, each checked to read back equal;
    the job class is named by ``job_name()``, asked once the scope guard has passed."""
    what = f"heartbeat {heartbeat.id!r}"
    guard = [_scope_data(scope, what) for scope in heartbeat.scope_guard]
    if _guard_of(guard) != heartbeat.scope_guard:
        raise NucleoSystemError(
            _COMPONENT, f"{what}: its scope guard {heartbeat.scope_guard} does not survive JSON"
        )
    return (
        heartbeat.id,
        heartbeat.run_at,
        job_name(),
        heartbeat.user_id,
        _dumps(guard, what),
        heartbeat.conversation_id,
        None if heartbeat.input is None else _value_text(heartbeat.input, f"{what}: the input"),
        None
        if heartbeat.recurrence is None
        else _value_text(heartbeat.recurrence, f"{what}: the recurrence"),
    )


def heartbeat_from_row(row: Sequence[Any]) -> Heartbeat:
    """The heartbeat a plain row holds (the form :func:`heartbeat_to_row` writes), restored.

    ``row`` is a :class:`HeartbeatRow` or a sequence of its first eight values (a ninth, the
    signature, is not looked at). Nothing is imported: each class the row names is looked up in
    a module this process has already imported, and a name anywhere else is refused. The row
    is not authenticated either, so the heartbeat carries whatever user and guard it names:
    use it for rows this program wrote and keeps (an events file it reads back), never for rows
    others can write; a durable store reads through its
    :class:`~nucleo_trio.heartbeat.HeartbeatCodec`, which checks the signature. A class that is
    not there, or is no longer a job class, a :class:`Recurrence` or a scope, and a value that
    no longer reads back raise :class:`~nucleo_trio.errors.NucleoSystemError`.
    """
    heartbeat_id, run_at, job_class, user_id, guard, conversation_id, input, recurrence = row[:8]
    cls = _resolve(job_class, may_import=False)
    if not issubclass(cls, AbstractJob):
        raise NucleoSystemError(_COMPONENT, f"{job_class} is no longer a job class")
    return _restore(
        cls, (heartbeat_id, run_at, user_id, guard, conversation_id, input, recurrence), False
    )


def _restore(
    job_class: type[AbstractJob[Any]], values: Sequence[Any], may_import: bool
) -> Heartbeat:
    """Mint the heartbeat of a row's values (id, run instant, user, guard, conversation id,
    input, recurrence) for ``job_class``, decoding the JSON ones; value classes are imported
    only when ``may_import`` (the row was authenticated)."""
    heartbeat_id, run_at, user_id, guard, conversation_id, input, recurrence = values
    restored_recurrence = (
        None if recurrence is None else _value_of(json.loads(recurrence), may_import)
    )
    if restored_recurrence is not None and not isinstance(restored_recurrence, Recurrence):
        raise NucleoSystemError(_COMPONENT, f"{recurrence} is no longer a Recurrence")
    return _mint(
        job_class,
        heartbeat_id,
        float(run_at),
        conversation_id,
        None if input is None else _value_of(json.loads(input), may_import),
        restored_recurrence,
        user_id,
        _guard_of(json.loads(guard), may_import),
    )


def _class_path(cls: type, what: str) -> str:
    """``module:qualname`` of ``cls``, once it is certain the path leads back to ``cls``."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    try:
        found: object = _resolve(path, may_import=False)
    except NucleoSystemError:
        found = None
    if found is not cls:
        raise NucleoSystemError(
            _COMPONENT,
            f"{what} {cls.__qualname__} cannot be named by an import path ({path}); a durable "
            "store restores classes by import path, so define it at module level",
        )
    return path


def _resolve(path: str, *, may_import: bool) -> type:
    """The class at ``path`` (``module:qualname``). Its module is imported only when
    ``may_import`` (a row whose signature was checked); otherwise it must already be imported,
    so that what a row says is never a reason to run a module."""
    if not isinstance(path, str):
        raise NucleoSystemError(_COMPONENT, f"a class is named by a string, got {path!r}")
    module_name, _, qualname = path.partition(":")
    try:
        if may_import:
            found: object = importlib.import_module(module_name)
        elif module_name in sys.modules:
            found = sys.modules[module_name]
        else:
            raise NucleoSystemError(
                _COMPONENT,
                f"the class {path} is in the module {module_name!r}, which this process has not "
                "imported; a row is never a reason to import one",
            )
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise NucleoSystemError(_COMPONENT, f"the class {path} no longer imports: {exc}") from exc
    if not isinstance(found, type):
        raise NucleoSystemError(_COMPONENT, f"{path} is not a class")
    return found


def _value_data(value: object, what: str) -> dict[str, Any]:
    return {"type": _class_path(type(value), what), "value": converter.unstructure(value)}


def _value_of(data: dict[str, Any], may_import: bool) -> Any:
    if not isinstance(data, dict) or set(data) != {"type", "value"}:
        raise NucleoSystemError(_COMPONENT, f"a stored value is {{type, value}}, got {data!r}")
    cls = _resolve(data["type"], may_import=may_import)
    try:
        return converter.structure(data["value"], cls)
    except Exception as exc:
        raise NucleoSystemError(
            _COMPONENT, f"a stored {data['type']} no longer reads back: {exc}"
        ) from exc


def _value_text(value: object, what: str) -> str:
    data = _value_data(value, what)
    text = _dumps(data, what)
    try:
        back = _value_of(json.loads(text), False)
    except NucleoSystemError as exc:
        raise NucleoSystemError(_COMPONENT, f"{what} {value!r} does not read back: {exc}") from exc
    if back != value:
        raise NucleoSystemError(
            _COMPONENT, f"{what} {value!r} does not survive JSON (it reads back as {back!r})"
        )
    return text


def _scope_data(scope: Scope, what: str) -> dict[str, Any]:
    if isinstance(scope, CompositeScope):
        return {"composite": [_scope_data(part, what) for part in scope.components]}
    return _value_data(scope, f"{what}: the scope")


def _scope_of(data: dict[str, Any], may_import: bool) -> Scope:
    if isinstance(data, dict) and "composite" in data:
        return CompositeScope(*(_scope_of(part, may_import) for part in data["composite"]))
    scope = _value_of(data, may_import)
    if not isinstance(scope, Scope):
        raise NucleoSystemError(_COMPONENT, f"{data['type']} is no longer a Scope")
    return scope


def _guard_of(data: list[dict[str, Any]], may_import: bool = False) -> ScopeGuard:
    if not isinstance(data, list):
        raise NucleoSystemError(_COMPONENT, f"a stored scope guard is a list, got {data!r}")
    return ScopeGuard(*(_scope_of(scope, may_import) for scope in data))


def _dumps(data: object, what: str) -> str:
    try:
        return json.dumps(data, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise NucleoSystemError(_COMPONENT, f"{what} cannot be written as JSON: {exc}") from exc
