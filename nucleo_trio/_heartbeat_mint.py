"""Which heartbeats the runtime minted, and how a heartbeat names its run instant.

What the heartbeat events of :mod:`nucleo_trio.bus.events` check and print about the heartbeat
they carry. Those events cannot import the :mod:`nucleo_trio.heartbeat` package: its Heart
publishes them, and a heartbeat names its job class, whose package (:mod:`nucleo_trio.jobs`)
publishes events too. So this leaf module (it imports nothing of nucleo_trio) holds the base
class of :class:`~nucleo_trio.heartbeat.Heartbeat` and the registry its mint writes to, and an
event asks :func:`is_genuine` about the heartbeat it carries. Users import :func:`is_genuine`
and :func:`format_instant` from :mod:`nucleo_trio.heartbeat`.
"""

from __future__ import annotations

import datetime
import weakref

__all__ = ["MintedHeartbeat", "format_instant", "is_genuine", "register_minted"]


class MintedHeartbeat:
    """The base of :class:`~nucleo_trio.heartbeat.Heartbeat`, its one subclass: what an event
    checks a value against before it asks whether the runtime minted it."""

    __slots__ = ("__weakref__",)


_GENUINE: weakref.WeakValueDictionary[int, MintedHeartbeat] = weakref.WeakValueDictionary()
"""Every heartbeat the mints made and that is still alive, by identity."""


def register_minted(heartbeat: MintedHeartbeat) -> None:
    """Record ``heartbeat`` as one the runtime minted; the heartbeat records' mint calls it."""
    _GENUINE[id(heartbeat)] = heartbeat


def is_genuine(heartbeat: object) -> bool:
    """Whether ``heartbeat`` is a :class:`~nucleo_trio.heartbeat.Heartbeat` one of the two mints
    made (or a store restored, or :meth:`~nucleo_trio.heartbeat.Heartbeat.next` copied from one):
    what a store checks before it enqueues anything."""
    return isinstance(heartbeat, MintedHeartbeat) and _GENUINE.get(id(heartbeat)) is heartbeat


def format_instant(instant: float) -> str:
    """``instant`` (epoch seconds) as UTC ISO 8601 to the millisecond, e.g.
    ``2025-11-30T12:00:00.000Z``: how heartbeat messages name a run instant."""
    moment = datetime.datetime.fromtimestamp(instant, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
