"""Events as JSON lines: a sink that writes every event it hears, and readers that bring them back.

One event is one JSON object on one line. Its keys, which stay as they are from release to
release:

- ``kind``: the event's class name (``JobCompletedEvent``); an application's own event class
  is named ``module:qualname``;
- ``family``: its family's class name (``LifecycleEvent``), ``null`` for an event in none;
- ``message``: its log line, ``null`` when it has none;
- then the event's own fields, under their attribute names: ``snapshot`` (the job's snapshot,
  an object with the :class:`~nucleo_trio.jobs.JobSnapshot` field names, or ``null``),
  ``timestamp`` (wall-clock epoch seconds) and the fields of the kind (``attempts``,
  ``result``, ``error``...).

Values go through the library's cattrs converter: enums as their values, snapshots and other
attrs records as objects, tuples as lists. An error is ``{"type": "module.QualName",
"message": "..."}``; a job's requirements are a summary (limiter names and amounts, database
names, the flags); a heartbeat is the fields a durable heartbeat store keeps. A value JSON
cannot hold and no converter knows is written as its ``str``. Non-finite floats are written as
Python's :mod:`json` writes them (``Infinity``, ``NaN``).

Reading back, :func:`read_events` rebuilds each line into its event class: every field that
JSON holds comes back equal; an error comes back as a :class:`RecordedError` with the original
type's name and message; lists stand where tuples were; records stand as plain objects. A
heartbeat is restored the way the SQLite heartbeat store restores one (its job class imported by
path), so read an events file with the trust you give that store's file.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TextIO

import attrs

from .._serialization import converter as _library_converter
from ..admission.limiter import name_of
from ..errors import NucleoSystemError
from ..jobs.requirements import JobRequirements
from . import events as ev
from .observers import JobObserver

if TYPE_CHECKING:
    from ..heartbeat.records import Heartbeat
    from .bus import MessageBus, Subscription

__all__ = [
    "EVENT_KINDS",
    "EventFileError",
    "JsonLinesSink",
    "RecordedError",
    "dumps_event",
    "event_from_json",
    "event_kind",
    "event_to_json",
    "loads_event",
    "read_event_records",
    "read_events",
]

_RESERVED: Final = frozenset({"kind", "family"})


def _concrete_events() -> dict[str, type[ev.JobEvent]]:
    found: dict[str, type[ev.JobEvent]] = {}
    pending: list[type[ev.JobEvent]] = [ev.JobEvent]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # The module's own binding only: attrs replaces each class it makes slotted, and the
        # class it replaced lingers among the subclasses until it is collected.
        if getattr(ev, cls.__name__, None) is cls and not vars(cls).get("_abstract_event", False):
            found[cls.__name__] = cls
    return dict(sorted(found.items()))


EVENT_KINDS: Final[Mapping[str, type[ev.JobEvent]]] = MappingProxyType(_concrete_events())
"""Every event class the runtime defines that can be built, by its ``kind``: what
:func:`event_from_json` rebuilds without being told about it."""


class EventFileError(ValueError):
    """A line of an events file that does not read back: not JSON, not an event object, a kind
    nobody registered, or fields its class refuses. The message names the file and the line."""


class RecordedError(Exception):
    """An error as an events file recorded it: the original type's name and its message.

    The reader rebuilds an event's ``error`` as an instance of a subclass of this class named
    like the original type (``type(error).__name__`` reads ``JobTimeoutError``), so an
    event's message reads as it did when it was written. ``type_name`` is the original's
    ``module.QualName``; ``str(error)`` is its message.
    """

    type_name: str = "builtins.Exception"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


_RECORDED_TYPES: dict[str, type[RecordedError]] = {}


def _recorded_type(type_name: str) -> type[RecordedError]:
    """The :class:`RecordedError` subclass standing for ``type_name`` (one per name)."""
    known = _RECORDED_TYPES.get(type_name)
    if known is None:
        simple = type_name.rpartition(".")[2] or "Exception"
        known = type(simple, (RecordedError,), {"type_name": type_name, "__module__": __name__})
        _RECORDED_TYPES[type_name] = known
    return known


def _type_name(error: BaseException) -> str:
    if isinstance(error, RecordedError):
        return error.type_name
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _error_data(error: BaseException) -> dict[str, str]:
    return {"type": _type_name(error), "message": str(error)}


def _error_of(data: object) -> RecordedError:
    if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
        raise ValueError(f'an error is {{"type": ..., "message": ...}}, got {data!r}')
    message = data.get("message", "")
    return _recorded_type(data["type"])(message if isinstance(message, str) else str(message))


def _requirements_data(requirements: JobRequirements) -> dict[str, Any]:
    """A job's requirements as plain data: what it asked for, by name (limiters and providers
    are live objects, not data)."""
    return {
        "requires_queueing": requirements.requires_queueing,
        "requires_http": requirements.requires_http,
        "requires_transaction": requirements.requires_transaction,
        "read_only": requirements.read_only,
        "rate_limiters": [
            {"limiter": name_of(need.limiter), "amount": _plain(need.amount)}
            for need in requirements.rate_limiters
        ],
        "databases": [
            db if isinstance(db, str) else str(getattr(db, "name", db))
            for db in requirements.databases
        ],
        "model_bindings": [str(binding) for binding in requirements.model_bindings],
        "memory_bytes": requirements.memory_bytes,
    }


_converter = _library_converter.copy()
_converter.register_unstructure_hook(BaseException, _error_data)
# By predicate: registering the class itself would make cattrs resolve its annotations, which
# name types imported only for the type checker.
_converter.register_unstructure_hook_func(lambda cls: cls is JobRequirements, _requirements_data)
_converter.register_unstructure_hook(MappingProxyType, lambda value: _plain(dict(value)))


def _plain(value: Any) -> Any:
    """``value`` as data JSON can hold: containers walked here (a key JSON cannot hold becomes
    its ``str``, where :mod:`json` would refuse the whole event), everything else through the
    events converter (records as objects, enums as their values)."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, Mapping):
        return {
            (key if isinstance(key, _JSON_KEYS) else str(key)): _plain(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item) for item in value]
    return _converter.unstructure(value)


_JSON_KEYS: Final = (str, int, float, bool, type(None))


def _heartbeat_data(heartbeat: Heartbeat) -> dict[str, Any]:
    from ..heartbeat.records import heartbeat_to_row

    try:
        row = heartbeat_to_row(heartbeat)
    except NucleoSystemError:
        # A job class with no import path, or an input JSON cannot hold: say what it was.
        cls = heartbeat.job_class
        return {
            "id": heartbeat.id,
            "run_at": heartbeat.run_at,
            "job_class": f"{cls.__module__}:{cls.__qualname__}",
            "user_id": heartbeat.user_id,
            "conversation_id": heartbeat.conversation_id,
            "restorable": False,
            "text": str(heartbeat),
        }
    return {
        "id": row.id,
        "run_at": row.run_at,
        "job_class": row.job_class,
        "user_id": row.user_id,
        "conversation_id": row.conversation_id,
        "scope_guard": json.loads(row.scope_guard),
        "input": None if row.input is None else json.loads(row.input),
        "recurrence": None if row.recurrence is None else json.loads(row.recurrence),
    }


def _heartbeat_of(data: object) -> Heartbeat:
    from ..heartbeat.records import HeartbeatRow, heartbeat_from_row

    if not isinstance(data, Mapping):
        raise ValueError(f"a heartbeat is an object, got {data!r}")
    if data.get("restorable", True) is False:
        raise ValueError(
            f"the heartbeat {data.get('id')!r} ({data.get('text')}) was written without what "
            "restores it (its job class has no import path, or its input is not JSON)"
        )
    row = HeartbeatRow(
        data["id"],
        data["run_at"],
        data["job_class"],
        data["user_id"],
        json.dumps(data["scope_guard"]),
        data.get("conversation_id"),
        None if data.get("input") is None else json.dumps(data["input"]),
        None if data.get("recurrence") is None else json.dumps(data["recurrence"]),
    )
    return heartbeat_from_row(row)


class _Codec(enum.Enum):
    PLAIN = "plain"  # through the converter, both ways
    PASS = "pass"  # any value: written through the converter, read back as JSON gives it
    ERROR = "error"
    HEARTBEAT = "heartbeat"


_PASSED_TYPES: Final[tuple[object, ...]] = (Any, object, object | None, int | float)
_ERROR_TYPES: Final[tuple[object, ...]] = (BaseException, BaseException | None)


def _codec(field: attrs.Attribute[Any]) -> _Codec:
    declared: object = field.type
    if declared == "Heartbeat" or getattr(declared, "__name__", None) == "Heartbeat":
        return _Codec.HEARTBEAT
    if declared in _ERROR_TYPES:
        return _Codec.ERROR
    if declared is None or declared in _PASSED_TYPES or isinstance(declared, str):
        return _Codec.PASS
    return _Codec.PLAIN


_FIELDS: dict[type, tuple[tuple[str, Any, _Codec], ...]] = {}


def _fields_of(cls: type[ev.JobEvent]) -> tuple[tuple[str, Any, _Codec], ...]:
    """The fields an event of ``cls`` is built from (name, declared type, codec)."""
    known = _FIELDS.get(cls)
    if known is None:
        if cls.__module__ != ev.__name__:
            # An application's class written under `from __future__ import annotations` has
            # its field types as strings; resolved, its enums and records read back as such.
            with contextlib.suppress(NameError, TypeError):
                attrs.resolve_types(cls)
        fields = [f for f in attrs.fields(cls) if f.init]
        clash = sorted(_RESERVED.intersection(f.name for f in fields))
        if clash:
            raise ValueError(
                f"{cls.__qualname__} has a field named {', '.join(clash)}, which an events "
                "file keeps for the event's kind and family; rename the field"
            )
        known = tuple((f.name, f.type, _codec(f)) for f in fields)
        _FIELDS[cls] = known
    return known


def event_kind(event: ev.JobEvent | type[ev.JobEvent]) -> str:
    """The ``kind`` an events file gives the event (or event class): the class name for the
    runtime's own events, ``module:qualname`` for an application's."""
    cls = event if isinstance(event, type) else type(event)
    if cls.__module__ == ev.__name__:
        return cls.__name__
    return f"{cls.__module__}:{cls.__qualname__}"


def event_to_json(event: ev.JobEvent) -> dict[str, Any]:
    """The event as the JSON object an events file holds (plain data, ready for ``json``)."""
    if not isinstance(event, ev.JobEvent):
        raise TypeError(f"event_to_json takes a JobEvent, got {type(event).__name__}")
    cls = type(event)
    family = ev.family_of(cls)
    data: dict[str, Any] = {
        "kind": event_kind(cls),
        "family": None if family is None else family.__name__,
        "message": event.message,
    }
    for name, declared, codec in _fields_of(cls):
        value = getattr(event, name)
        if value is None:
            data[name] = None
        elif codec is _Codec.HEARTBEAT:
            data[name] = _heartbeat_data(value)
        elif codec is _Codec.ERROR:
            data[name] = _error_data(value)
        elif codec is _Codec.PASS:
            data[name] = _plain(value)
        else:
            data[name] = _converter.unstructure(value, unstructure_as=declared)
    return data


def event_from_json(
    data: Mapping[str, Any], kinds: Iterable[type[ev.JobEvent]] = ()
) -> ev.JobEvent:
    """Rebuild the event an :func:`event_to_json` object describes.

    The runtime's own kinds are known (:data:`EVENT_KINDS`); an application's event classes
    are passed in ``kinds``. Raises :class:`ValueError` naming the problem for an unknown kind,
    a field the class does not have, or a value its class refuses.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"an event is a JSON object, got {type(data).__name__}")
    kind = data.get("kind")
    if not isinstance(kind, str):
        raise ValueError(f"an event needs its kind, got {kind!r}")
    cls = _class_of(kind, kinds)
    fields = _fields_of(cls)
    names = {name for name, _, _ in fields}
    unknown = sorted(set(data) - names - _RESERVED - {"message"})
    if unknown:
        raise ValueError(f"{kind} has no field(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, declared, codec in fields:
        if name not in data:
            continue
        value = data[name]
        try:
            if value is None or codec is _Codec.PASS:
                values[name] = value
            elif codec is _Codec.HEARTBEAT:
                values[name] = _heartbeat_of(value)
            elif codec is _Codec.ERROR:
                values[name] = _error_of(value)
            else:
                values[name] = _converter.structure(value, declared)
        except Exception as exc:
            raise ValueError(f"{kind}.{name}: {_reason(exc)}") from exc
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{kind}: {exc}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(sub) for sub in exc.exceptions)
    return str(exc) or type(exc).__name__


def _class_of(kind: str, kinds: Iterable[type[ev.JobEvent]]) -> type[ev.JobEvent]:
    extra = {event_kind(cls): cls for cls in kinds}
    cls = extra.get(kind) or EVENT_KINDS.get(kind)
    if cls is None:
        hint = " (an application's event: pass its class in kinds=...)" if ":" in kind else ""
        raise ValueError(f"unknown event kind {kind!r}{hint}")
    return cls


def dumps_event(event: ev.JobEvent) -> str:
    """The event as one line of JSON (no newline)."""
    return json.dumps(event_to_json(event), default=str, ensure_ascii=False)


def loads_event(line: str, kinds: Iterable[type[ev.JobEvent]] = ()) -> ev.JobEvent:
    """The event one line of JSON describes (see :func:`event_from_json`)."""
    return event_from_json(json.loads(line), kinds)


def read_event_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each event of the file at ``path`` as the plain object it was written as, with its line
    number; blank lines are skipped. Nothing is imported or rebuilt, so this reads any events
    file. A line that is not a JSON object with a ``kind`` raises :class:`EventFileError`."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EventFileError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
                raise EventFileError(
                    f"{path}:{number}: not an event (no kind): {line.strip()[:80]}"
                )
            yield number, data


def read_events(
    path: str | os.PathLike[str], kinds: Iterable[type[ev.JobEvent]] = ()
) -> Iterator[ev.JobEvent]:
    """The events of the file at ``path``, rebuilt, in the order they were written.

    ``kinds`` names an application's own event classes. A line that does not read back raises
    :class:`EventFileError` naming the file, the line and the problem.
    """
    known = tuple(kinds)
    for number, data in read_event_records(path):
        try:
            yield event_from_json(data, known)
        except ValueError as exc:
            raise EventFileError(f"{path}:{number}: {exc}") from exc


class JsonLinesSink(JobObserver[ev.JobEvent]):
    """A bus observer that writes every event it receives as one line of JSON.

    ``target`` is a path (the file is created, or appended to with ``append=True``) or an open
    text stream (``sys.stdout``), which the sink writes to and never closes. Subscribe it to a
    bus like any observer, or with :meth:`attach`::

        with JsonLinesSink("events.jsonl") as sink:
            sink.attach(dispatcher.bus)  # every event, until the bus stops
            ...

    Lines are written as events arrive, through the file's buffer, in the subscription's own
    task (so in publish order); :meth:`flush` pushes the buffer out, :meth:`close` (or leaving
    the ``with`` block) flushes and closes a file the sink opened. ``written`` counts the lines.
    """

    def __init__(self, target: str | os.PathLike[str] | TextIO, *, append: bool = False) -> None:
        if isinstance(target, str | os.PathLike):
            path = Path(target)
            if not path.parent.is_dir():
                raise FileNotFoundError(
                    f"JsonLinesSink: the directory {path.parent} of {path} does not exist"
                )
            self._stream: TextIO = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
            self._owned = True
            self.name = str(path)
        elif callable(getattr(target, "write", None)):
            self._stream = target
            self._owned = False
            self.name = getattr(target, "name", None) or repr(target)
        else:
            raise TypeError(
                f"JsonLinesSink writes to a path or a text stream, got {type(target).__name__}"
            )
        self.written = 0
        self._closed = False

    async def on_event(self, event: ev.JobEvent) -> None:
        """Write the event's line."""
        self.write(event)

    def write(self, event: ev.JobEvent) -> None:
        """Write one event's line now (what :meth:`on_event` does for the bus)."""
        if self._closed:
            raise RuntimeError(f"JsonLinesSink {self.name} is closed")
        self._stream.write(dumps_event(event) + "\n")
        self.written += 1

    def attach(self, bus: MessageBus, event_type: type[ev.JobEvent] = ev.JobEvent) -> Subscription:
        """Subscribe to ``bus`` for every event of ``event_type`` (all of them by default)."""
        return bus.subscribe(self, event_type=event_type)

    def flush(self) -> None:
        """Push what was written through to the file."""
        if not self._closed:
            self._stream.flush()

    def close(self) -> None:
        """Flush, and close the file if the sink opened it; writing afterwards raises."""
        if self._closed:
            return
        self._stream.flush()
        if self._owned:
            self._stream.close()
        self._closed = True

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.written} events"
        return f"<JsonLinesSink {self.name} {state}>"
