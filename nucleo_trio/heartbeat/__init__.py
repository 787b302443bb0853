"""Heartbeats: jobs the dispatcher runs on a schedule, with the authority that scheduled them.

An orchestrator schedules one with ``context.publish(ScheduleHeartbeat(...))`` (stamped with its
own user and sealed scope guard); boot code and operators with
``dispatcher.schedule_heartbeat(spec, user_id)``. The dispatcher's :class:`Heart` keeps the
schedule in a :class:`HeartbeatStore` (in memory by default, or :class:`SQLiteHeartbeatStore`
to survive a restart) and fires each heartbeat through the same door as a live submission, with
the captured guard in the caller's seat. Six events on the bus tell everything it does
(:class:`~nucleo_trio.bus.events.HeartbeatScheduled` and the rest, re-exported here), and a
:class:`Stethoscope` routes them to hooks.
"""

from ..bus.events import (
    CancelHeartbeat as CancelHeartbeat,
    HeartbeatFired as HeartbeatFired,
    HeartbeatFireFailed as HeartbeatFireFailed,
    HeartbeatRebound as HeartbeatRebound,
    HeartbeatRequested as HeartbeatRequested,
    HeartbeatScheduled as HeartbeatScheduled,
)
from .heart import (
    META_HEARTBEAT_ID as META_HEARTBEAT_ID,
    STORE_RETRY_DELAY as STORE_RETRY_DELAY,
    Heart as Heart,
)
from .records import (
    ConversationCarrier as ConversationCarrier,
    FixedInterval as FixedInterval,
    Heartbeat as Heartbeat,
    HeartbeatRow as HeartbeatRow,
    Recurrence as Recurrence,
    ScheduleHeartbeat as ScheduleHeartbeat,
    format_instant as format_instant,
    heartbeat_from_row as heartbeat_from_row,
    heartbeat_now as heartbeat_now,
    heartbeat_to_row as heartbeat_to_row,
    is_genuine as is_genuine,
)
from .sqlite import SQLiteHeartbeatStore as SQLiteHeartbeatStore
from .stethoscope import Stethoscope as Stethoscope
from .store import (
    HeartbeatStore as HeartbeatStore,
    InMemoryHeartbeatStore as InMemoryHeartbeatStore,
    heartbeat_store_from as heartbeat_store_from,
)

__all__ = [
    "META_HEARTBEAT_ID",
    "STORE_RETRY_DELAY",
    "CancelHeartbeat",
    "ConversationCarrier",
    "FixedInterval",
    "Heart",
    "Heartbeat",
    "HeartbeatFireFailed",
    "HeartbeatFired",
    "HeartbeatRebound",
    "HeartbeatRequested",
    "HeartbeatRow",
    "HeartbeatScheduled",
    "HeartbeatStore",
    "InMemoryHeartbeatStore",
    "Recurrence",
    "SQLiteHeartbeatStore",
    "ScheduleHeartbeat",
    "Stethoscope",
    "format_instant",
    "heartbeat_from_row",
    "heartbeat_now",
    "heartbeat_store_from",
    "heartbeat_to_row",
    "is_genuine",
]
