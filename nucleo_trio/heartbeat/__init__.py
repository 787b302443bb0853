"""Heartbeats: jobs the dispatcher runs on a schedule, with the authority that scheduled them.

An orchestrator schedules one with ``context.publish(ScheduleHeartbeat(...))`` (stamped with its
own user and sealed scope guard); boot code and operators with
``dispatcher.schedule_heartbeat(spec, user_id)``. The dispatcher's :class:`Heart` keeps the
schedule in a :class:`HeartbeatStore` (in memory by default, or :class:`SQLiteHeartbeatStore`
to survive a restart) and fires each heartbeat through the same door as a live submission, with
the captured guard in the caller's seat. A durable store's rows are data, never code: each
names its job class by a name registered in the dispatcher's :class:`HeartbeatJobs` and is
signed with a :class:`SigningKey` through a :class:`HeartbeatCodec`, so a row written outside
the runtime fails its fire instead of running. Six events on the bus tell everything it does
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
from .codec import (
    REFUSED_USER as REFUSED_USER,
    HeartbeatCodec as HeartbeatCodec,
    HeartbeatRowRefused as HeartbeatRowRefused,
    RefusedHeartbeatRow as RefusedHeartbeatRow,
    UnknownHeartbeatJob as UnknownHeartbeatJob,
    UnregisteredHeartbeatJob as UnregisteredHeartbeatJob,
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
from .registry import (
    HeartbeatJobs as HeartbeatJobs,
    heartbeat_job_name as heartbeat_job_name,
)
from .signing import SigningKey as SigningKey, signing_key_from as signing_key_from
from .sqlite import SQLiteHeartbeatStore as SQLiteHeartbeatStore
from .stethoscope import Stethoscope as Stethoscope
from .store import (
    DurableHeartbeatStore as DurableHeartbeatStore,
    HeartbeatStore as HeartbeatStore,
    InMemoryHeartbeatStore as InMemoryHeartbeatStore,
    heartbeat_store_from as heartbeat_store_from,
)

__all__ = [
    "META_HEARTBEAT_ID",
    "REFUSED_USER",
    "STORE_RETRY_DELAY",
    "CancelHeartbeat",
    "ConversationCarrier",
    "DurableHeartbeatStore",
    "FixedInterval",
    "Heart",
    "Heartbeat",
    "HeartbeatCodec",
    "HeartbeatFireFailed",
    "HeartbeatFired",
    "HeartbeatJobs",
    "HeartbeatRebound",
    "HeartbeatRequested",
    "HeartbeatRow",
    "HeartbeatRowRefused",
    "HeartbeatScheduled",
    "HeartbeatStore",
    "InMemoryHeartbeatStore",
    "Recurrence",
    "RefusedHeartbeatRow",
    "SQLiteHeartbeatStore",
    "ScheduleHeartbeat",
    "SigningKey",
    "Stethoscope",
    "UnknownHeartbeatJob",
    "UnregisteredHeartbeatJob",
    "format_instant",
    "heartbeat_from_row",
    "heartbeat_job_name",
    "heartbeat_now",
    "heartbeat_store_from",
    "heartbeat_to_row",
    "is_genuine",
    "signing_key_from",
]
