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
type's name and message; lists stand where tuples were; records stand as plain objects.

An events file is data from outside, and reading one never runs code it names and never fails
with anything but :class:`EventFileError` (the file, the line, what is wrong):

- nothing is imported: an error's type is looked up among the built-in exceptions,
  :mod:`nucleo_trio.errors` and the classes passed in ``known_errors``; a heartbeat's classes
  among the modules the program has already imported;
- a line is read up to ``max_line_bytes`` (:data:`DEFAULT_MAX_LINE_BYTES`) and a longer one is
  refused without being read whole; a line must be UTF-8 and nest at most :data:`MAX_NESTING`
  arrays and objects deep;
- an event's ``timestamp`` (and a terminal event's ``completion_time``) must be a finite number
  of epoch seconds a date can hold; any other number comes back as the file has it.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import enum
import functools
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TextIO

import attrs

from .. import _bounded_json, errors as _errors
from .._serialization import converter as _library_converter
from ..admission.limiter import name_of
from ..bus import events as ev
from ..bus.observers import JobObserver
from ..errors import NucleoSystemError
from ..heartbeat.records import Heartbeat, HeartbeatRow, heartbeat_from_row, heartbeat_to_row
from ..jobs.requirements import JobRequirements

if TYPE_CHECKING:
    from ..bus.bus import MessageBus, Subscription

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "EVENT_KINDS",
    "MAX_NESTING",
    "MAX_TYPE_NAME",
    "RECORDED_TYPES_KEPT",
    "EventFileError",
    "ForeignError",
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
    """An error as an events file recorded it: the name of the type that was raised, and its
    message.

    The reader rebuilds an event's ``error`` as an instance of a subclass of this class named
    like the recorded type (``type(error).__name__`` reads ``JobTimeoutError``), so an
    event's message reads as it did when it was written. ``str(error)`` is the message.

    When the reader knows the recorded type (a built-in exception, one of
    :mod:`nucleo_trio.errors`, or a class passed in ``known_errors``), the stand-in is also a
    subclass of it, so ``except LookupError`` and ``isinstance(error, JobTimeoutError)`` hold.
    It carries the message only: the recorded error's own attributes (a timeout's seconds, a
    response's status) are not in the file. Any other type name gives a :class:`ForeignError`.
    """

    type_name: str = "Exception"
    """The recorded type's name as the file gives it: ``module.QualName``, or the bare name of
    a built-in exception (``ValueError``)."""

    def __init__(self, message: str) -> None:
        # Not the recorded type's __init__: its arguments are not in the file.
        BaseException.__init__(self, message)
        self.message = message
        """The recorded error's message, as written."""

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ForeignError(RecordedError):
    """A recorded error whose type the reader does not stand in for: a name that is none of the
    built-in exceptions, :mod:`nucleo_trio.errors` or ``known_errors`` (an application's own
    error; the reader imports nothing an events file names), or a type that is no plain
    :class:`Exception` (``KeyboardInterrupt``, an exception group).

    Its class is still named like the recorded type (``type(error).__name__`` reads ``OrderError``,
    ``type_name`` is ``shop.errors.OrderError``); catch it as ``ForeignError`` and tell the types
    apart by ``type_name``. The reader keeps at most :data:`RECORDED_TYPES_KEPT` such classes
    (the most recently used), so a file naming a million types costs no more than a few.
    """


RECORDED_TYPES_KEPT: Final = 1024
"""How many stand-in error classes the reader keeps for reuse (the most recently used): two
errors of one type read close together share their class, and a file naming endless distinct
types costs a bounded memory."""

MAX_TYPE_NAME: Final = 512
"""The longest error type name a line may record (a dotted Python name is far shorter)."""


def _is_exception_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _own_errors() -> dict[str, type[BaseException]]:
    """The types a recorded name may stand for with no help: the built-in exceptions, by their
    bare names (as :func:`_type_name` writes them), and :mod:`nucleo_trio.errors`."""
    found: dict[str, type[BaseException]] = {}
    for module in (builtins, _errors):
        for value in vars(module).values():
            if _is_exception_class(value):
                found.setdefault(_class_name(value), value)
    return found


_OWN_ERRORS: dict[str, type[BaseException]] = {}


def _error_registry(known_errors: Iterable[type[BaseException]]) -> dict[str, type[BaseException]]:
    if not _OWN_ERRORS:
        _OWN_ERRORS.update(_own_errors())
    registry = dict(_OWN_ERRORS)
    for cls in known_errors:
        if not _is_exception_class(cls):
            raise TypeError(f"known_errors takes exception classes, got {cls!r}")
        registry[_class_name(cls)] = cls
    return registry


@functools.lru_cache(maxsize=RECORDED_TYPES_KEPT)
def _recorded_type(type_name: str, original: object) -> type[RecordedError]:
    """The class standing for ``type_name``: a subclass of :class:`RecordedError` and of
    ``original`` when that can be stood in for, else of :class:`ForeignError`."""
    simple = type_name.rpartition(".")[2] or "Exception"
    namespace = {"type_name": type_name, "__module__": __name__, "__qualname__": simple}
    if (
        isinstance(original, type)
        and issubclass(original, Exception)
        and not issubclass(original, BaseExceptionGroup)
    ):
        try:
            stand_in = type(simple, (RecordedError, original), namespace)
            stand_in("")  # some built-in layouts refuse to be built this way
        except Exception:  # noqa: BLE001 - then a ForeignError stands for it
            pass
        else:
            return stand_in
    return type(simple, (ForeignError,), namespace)


def _type_name(error: BaseException) -> str:
    if isinstance(error, RecordedError):
        return error.type_name
    return _class_name(type(error))


def _class_name(cls: type) -> str:
    """How a file names an error's type: ``module.QualName``, the bare name for a built-in."""
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _error_data(error: BaseException) -> dict[str, str]:
    return {"type": _type_name(error), "message": str(error)}


def _error_of(data: object, errors: Mapping[str, type[BaseException]]) -> RecordedError:
    if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
        raise ValueError(f'an error is {{"type": ..., "message": ...}}, got {_shown(data)}')
    type_name: str = data["type"]
    if len(type_name) > MAX_TYPE_NAME:
        raise ValueError(
            f"an error's type is a name of at most {MAX_TYPE_NAME} characters, "
            f"got {len(type_name)}: {type_name[:40]!r}..."
        )
    message = data.get("message", "")
    original: object = errors.get(type_name)  # a class, or None
    cls = _recorded_type(type_name, original)
    return cls(message if isinstance(message, str) else str(message))


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a line from outside may hold megabytes."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    if not isinstance(data, Mapping):
        raise ValueError(f"a heartbeat is an object, got {_shown(data)}")
    if data.get("restorable", True) is False:
        raise ValueError(
            f"the heartbeat {data.get('id')!r} ({data.get('text')}) was written without what "
            "restores it (its job class has no import path, or its input is not JSON)"
        )
    for path in _class_paths(data):
        _check_imported(path)
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


def _class_paths(data: Mapping[str, Any]) -> Iterator[object]:
    """Every class path a heartbeat's data names: its job class, each scope of its guard, its
    input's and its recurrence's types (each written as ``{"type": path, "value": ...}``)."""
    yield data.get("job_class")
    pending: list[object] = list(_listed(data.get("scope_guard")))
    while pending:
        scope = pending.pop()
        if isinstance(scope, Mapping) and "composite" in scope:
            pending.extend(_listed(scope["composite"]))
        elif isinstance(scope, Mapping):
            yield scope.get("type")
    for name in ("input", "recurrence"):
        value = data.get(name)
        if isinstance(value, Mapping):
            yield value.get("type")


def _listed(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _check_imported(path: object) -> None:
    """Refuse a class path that does not lead, through modules the program has already
    imported, to a class: restoring a heartbeat then imports nothing (its store would import
    the module by path, which runs it)."""
    if not isinstance(path, str) or ":" not in path:
        raise ValueError(f"a heartbeat names its classes as module:qualname, got {_shown(path)}")
    module_name, _, qualname = path.partition(":")
    found: object = sys.modules.get(module_name)
    if found is None:
        raise ValueError(
            f"the heartbeat names {path}, whose module {module_name} this program has not "
            "imported; the reader imports nothing a file names, so import it before reading"
        )
    for part in qualname.split("."):
        # The namespace itself, never getattr: a module's __getattr__ may import.
        try:
            found = vars(found).get(part)
        except TypeError:
            found = None
        if found is None:
            raise ValueError(f"the heartbeat names {path}, which {module_name} does not define")
    if not isinstance(found, type):
        raise ValueError(f"the heartbeat names {path}, which is not a class")


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
    data: Mapping[str, Any],
    kinds: Iterable[type[ev.JobEvent]] = (),
    *,
    known_errors: Iterable[type[BaseException]] = (),
) -> ev.JobEvent:
    """Rebuild the event an :func:`event_to_json` object describes.

    The runtime's own kinds are known (:data:`EVENT_KINDS`); an application's event classes
    are passed in ``kinds``, and the exception classes its errors should be rebuilt as (beyond
    the built-in ones and :mod:`nucleo_trio.errors`) in ``known_errors``. Raises
    :class:`ValueError` naming the problem for an unknown kind, a field the class does not
    have, or a value its class refuses.
    """
    return _Reader(kinds, known_errors).event(data)


class _Reader:
    """What rebuilding events needs, worked out once per file: the kinds and the error types
    it may name."""

    def __init__(
        self, kinds: Iterable[type[ev.JobEvent]], known_errors: Iterable[type[BaseException]]
    ) -> None:
        self.kinds = {event_kind(cls): cls for cls in kinds}
        self.errors = _error_registry(known_errors)

    def event(self, data: Mapping[str, Any]) -> ev.JobEvent:
        if not isinstance(data, Mapping):
            raise ValueError(f"an event is a JSON object, got {type(data).__name__}")
        kind = data.get("kind")
        if not isinstance(kind, str):
            raise ValueError(f"an event needs its kind, got {_shown(kind)}")
        cls = self._class_of(kind)
        fields = _fields_of(cls)
        names = {name for name, _, _ in fields}
        unknown = sorted(set(data) - names - _RESERVED - {"message"})
        if unknown:
            raise ValueError(f"{_cut(kind)} has no field(s) {_cut(', '.join(unknown))}")
        values: dict[str, Any] = {}
        for name, declared, codec in fields:
            if name not in data:
                continue
            value = data[name]
            try:
                if name in _MOMENTS:
                    _check_moment(value)
                if value is None or codec is _Codec.PASS:
                    values[name] = value
                elif codec is _Codec.HEARTBEAT:
                    values[name] = _heartbeat_of(value)
                elif codec is _Codec.ERROR:
                    values[name] = _error_of(value, self.errors)
                else:
                    values[name] = _converter.structure(value, declared)
            except Exception as exc:
                raise ValueError(f"{kind}.{name}: {_reason(exc)}") from exc
        try:
            return cls(**values)
        except Exception as exc:  # any refusal of the class is the line's fault
            raise ValueError(f"{kind}: {_reason(exc)}") from exc

    def _class_of(self, kind: str) -> type[ev.JobEvent]:
        cls = self.kinds.get(kind) or EVENT_KINDS.get(kind)
        if cls is None:
            hint = " (an application's event: pass its class in kinds=...)" if ":" in kind else ""
            raise ValueError(f"unknown event kind {_shown(kind)}{hint}")
        return cls


_MOMENTS: Final = frozenset({"timestamp", "completion_time"})


def _check_moment(value: object) -> None:
    """Refuse a wall-clock instant no date can hold (NaN, an infinity, beyond year 9999)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return  # the class's own validator says what it takes
    try:
        if not math.isfinite(value):
            raise ValueError
        datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    except (ValueError, OverflowError, OSError):
        raise ValueError(
            f"{_shown(value)} is not a moment (epoch seconds from year 1 to 9999)"
        ) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(sub) for sub in exc.exceptions)
    if isinstance(exc, RecursionError):
        return "nested too deeply to rebuild"
    return _cut(str(exc) or type(exc).__name__, 300)


def dumps_event(event: ev.JobEvent) -> str:
    """The event as one line of JSON (no newline)."""
    return json.dumps(event_to_json(event), default=str, ensure_ascii=False)


def loads_event(
    line: str,
    kinds: Iterable[type[ev.JobEvent]] = (),
    *,
    known_errors: Iterable[type[BaseException]] = (),
) -> ev.JobEvent:
    """The event one line of JSON describes (see :func:`event_from_json`); a line that is not
    JSON, or nests deeper than :data:`MAX_NESTING`, is a :class:`ValueError`."""
    return event_from_json(_parse(line), kinds, known_errors=known_errors)


DEFAULT_MAX_LINE_BYTES: Final = 4 * 1024 * 1024
"""The longest line the readers take by default (4 MiB, without its newline); pass
``max_line_bytes`` for a file with bigger events (a job whose result is a large document)."""

MAX_NESTING: Final = _bounded_json.MAX_NESTING
"""How deep a line's arrays and objects may nest (an event's own data nests a few levels)."""


def _parse(text: str) -> Any:
    """One line's JSON, or a :class:`ValueError` saying why not; nesting is checked before the
    parser, which recurses once per level, sees the line."""
    return _bounded_json.loads(text, MAX_NESTING)


def _check_limit(max_line_bytes: int) -> int:
    if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int):
        raise TypeError(f"max_line_bytes must be a whole number of bytes, got {max_line_bytes!r}")
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
    return max_line_bytes


def _lines(path: str | os.PathLike[str], max_line_bytes: int) -> Iterator[tuple[int, str]]:
    """Each line of the file with its number, decoded, its newline kept; at most
    ``max_line_bytes`` (plus the newline) is ever read into memory for one line."""
    with open(path, "rb") as stream:
        number = 0
        while line := stream.readline(max_line_bytes + 1):
            number += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                raise EventFileError(
                    f"{path}:{number}: the line is over {max_line_bytes} bytes (max_line_bytes) "
                    "and is refused without being read whole; raise the limit for a file with "
                    "bigger events"
                )
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise EventFileError(
                    f"{path}:{number}: not UTF-8 text (byte 0x{line[exc.start]:02x} at "
                    f"column {exc.start + 1})"
                ) from None
            yield number, text.removeprefix("\ufeff") if number == 1 else text


def read_event_records(
    path: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each event of the file at ``path`` as the plain object it was written as, with its line
    number; blank lines are skipped. Nothing is imported or rebuilt, so this reads any events
    file. A line longer than ``max_line_bytes``, not UTF-8, not JSON, nested deeper than
    :data:`MAX_NESTING`, or not an object with a ``kind``, raises :class:`EventFileError`
    naming the file and the line."""
    limit = _check_limit(max_line_bytes)
    for number, line in _lines(path, limit):
        if not line.strip():
            continue
        try:
            data = _parse(line)
        except ValueError as exc:
            raise EventFileError(f"{path}:{number}: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise EventFileError(f"{path}:{number}: not an event (no kind): {line.strip()[:80]}")
        yield number, data


def read_events(
    path: str | os.PathLike[str],
    kinds: Iterable[type[ev.JobEvent]] = (),
    *,
    known_errors: Iterable[type[BaseException]] = (),
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[ev.JobEvent]:
    """The events of the file at ``path``, rebuilt, in the order they were written.

    ``kinds`` names an application's own event classes, ``known_errors`` the exception classes
    of its own that a recorded error should be rebuilt as (see :class:`RecordedError`). A line
    that does not read back raises :class:`EventFileError` naming the file, the line and the
    problem; see :func:`read_event_records` for the limits on a line.
    """
    reader = _Reader(kinds, known_errors)
    for number, data in read_event_records(path, max_line_bytes=max_line_bytes):
        try:
            yield reader.event(data)
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

    A sink closed while its bus still runs would lose the events still queued for it: close
    it with ``await sink.aclose()`` (or ``async with JsonLinesSink(path) as sink:``), which
    ends its subscriptions and writes everything published before the call first.
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
            """Where the lines go: the path written to, or the stream's ``name`` (its ``repr``
            when it has none)."""
        elif callable(getattr(target, "write", None)):
            self._stream = target
            self._owned = False
            self.name = getattr(target, "name", None) or repr(target)
        else:
            raise TypeError(
                f"JsonLinesSink writes to a path or a text stream, got {type(target).__name__}"
            )
        self.written = 0
        """How many lines the sink has written so far."""
        self._closed = False
        self._subscriptions: list[Subscription] = []

    def on_subscribe(self, subscription: Subscription) -> None:
        """Keep ``subscription``, for :meth:`aclose` to end and drain."""
        self._subscriptions.append(subscription)

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
        """Flush, and close the file if the sink opened it; writing afterwards raises. The
        subscriptions stay: an event the bus delivers later is refused and logged by the bus.
        :meth:`aclose` ends them first."""
        if self._closed:
            return
        self._stream.flush()
        if self._owned:
            self._stream.close()
        self._closed = True

    async def aclose(self) -> None:
        """Unsubscribe from every bus the sink is subscribed to, wait until each event
        published before the call is written, then :meth:`close`. The wait is the sink's own
        writes (a bus's stop would cut it at :data:`~nucleo_trio.bus.DRAIN_TIMEOUT`); a
        cancelled ``aclose()`` still closes the file, and what was still queued is lost.
        Calling it again does nothing."""
        subscriptions, self._subscriptions = self._subscriptions, []
        try:
            for subscription in subscriptions:
                subscription.unsubscribe()
            for subscription in subscriptions:
                await subscription.wait_drained()
        finally:
            self.close()

    def __enter__(self) -> JsonLinesSink:
        return self

    async def __aenter__(self) -> JsonLinesSink:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

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
