"""The job classes a stored heartbeat may name: a registry the program fills, read by name.

A durable row names its job class by a stable name, never by anything the runtime would import:
what a row says is data, and the only classes a fire can build are the ones this program put in
its dispatcher's :class:`HeartbeatJobs`. They get there three ways, all in the program's hands:

* ``open_dispatcher(heartbeat_jobs=[...])`` (or ``JobDispatcher(heartbeat_jobs=...)``), or
  ``dispatcher.heartbeat_jobs.register(cls)`` before the dispatcher starts;
* a plugin's ``nucleo_trio_heartbeat_jobs`` hook;
* scheduling: a class handed to ``schedule_heartbeat`` or published in a ``ScheduleHeartbeat``
  is a class object of this program, so it is registered under its name there and then.

A class's name is its ``heartbeat_name`` (a class attribute set on the class itself, not
inherited) or else ``module:qualname``. An explicit name survives moving or renaming the class;
the default changes with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import UsageTypeError, UsageValueError
from ..jobs.job import AbstractJob

__all__ = ["HeartbeatJobs", "heartbeat_job_name"]

_COMPONENT = "heartbeat"

JobClass = type[AbstractJob[Any]]


def heartbeat_job_name(job_class: type) -> str:
    """The name a durable store writes for ``job_class``: its own ``heartbeat_name`` attribute
    (defined in its class body; a subclass does not inherit it) or ``module:qualname``."""
    own = vars(job_class).get("heartbeat_name")
    if own is None:
        return f"{job_class.__module__}:{job_class.__qualname__}"
    if not isinstance(own, str) or not own.strip():
        raise UsageTypeError(
            _COMPONENT,
            f"{job_class.__qualname__}.heartbeat_name must be a non-blank string, got {own!r}",
            "name the class for its heartbeat rows with text, e.g. heartbeat_name = 'nightly'",
        )
    return own


def _job_class(value: object) -> JobClass:
    if not isinstance(value, type) or not issubclass(value, AbstractJob):
        raise UsageTypeError(
            _COMPONENT,
            f"a heartbeat job is a job class (an AbstractJob subclass), got {value!r}",
            "register the class itself, e.g. heartbeat_jobs=[Nightly]",
        )
    return value


class HeartbeatJobs:
    """Job classes by the name a durable heartbeat row gives them: one class per name, one name
    per class.

    Build it from classes (each under its :func:`heartbeat_job_name`), from a mapping of name
    to class, or from another registry (a copy). Registering a second class under a taken name, or a class again under another
    name, is a :class:`~nucleo_trio.errors.UsageValueError` naming both.
    """

    __slots__ = ("_by_class", "_by_name")

    def __init__(
        self, jobs: Iterable[JobClass] | Mapping[str, JobClass] | HeartbeatJobs = ()
    ) -> None:
        self._by_name: dict[str, JobClass] = {}
        self._by_class: dict[JobClass, str] = {}
        given: object = jobs
        if isinstance(given, HeartbeatJobs):
            given = dict(given.items())
        if isinstance(given, Mapping):
            for name, job_class in given.items():
                self.register(job_class, name)
        elif isinstance(given, Iterable) and not isinstance(given, str | bytes):
            for job_class in given:
                self.register(job_class)
        else:
            raise UsageTypeError(
                _COMPONENT,
                f"heartbeat jobs are job classes or a mapping of name to job class, got {jobs!r}",
                "pass e.g. heartbeat_jobs=[Nightly] or heartbeat_jobs={'nightly': Nightly}",
            )

    def register(self, job_class: JobClass, name: str | None = None) -> str:
        """Let stored heartbeats name ``job_class`` as ``name`` (its
        :func:`heartbeat_job_name` when ``None``); answer the name. Registering the same class
        under the same name again changes nothing."""
        job_class = _job_class(job_class)
        if name is None:
            name = heartbeat_job_name(job_class)
        elif not isinstance(name, str) or not name.strip():
            raise UsageValueError(
                _COMPONENT,
                f"a heartbeat job name must be a non-blank string, got {name!r}",
                f"register {job_class.__qualname__} under a name such as 'nightly'",
            )
        holder = self._by_name.get(name)
        if holder is not None and holder is not job_class:
            raise UsageValueError(
                _COMPONENT,
                f"the heartbeat job name {name!r} is taken by {_path(holder)}, so "
                f"{_path(job_class)} cannot have it",
                "give one of them a heartbeat_name of its own, or register it under another name",
            )
        known = self._by_class.get(job_class)
        if known is not None and known != name:
            raise UsageValueError(
                _COMPONENT,
                f"{_path(job_class)} is registered for heartbeats as {known!r}, not {name!r}",
                "a class has one name in the rows; keep the first or set heartbeat_name",
            )
        self._by_name[name] = job_class
        self._by_class[job_class] = name
        return name

    def name_of(self, job_class: type) -> str | None:
        """The name ``job_class`` is registered under, or ``None``."""
        return self._by_class.get(job_class)

    def get(self, name: str) -> JobClass | None:
        """The class registered as ``name``, or ``None``. Nothing is ever imported."""
        return self._by_name.get(name)

    def items(self) -> Iterator[tuple[str, JobClass]]:
        """Every (name, class), in the order they were registered."""
        return iter(tuple(self._by_name.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"<HeartbeatJobs {sorted(self._by_name)}>"


def _path(job_class: type) -> str:
    return f"{job_class.__module__}.{job_class.__qualname__}"
