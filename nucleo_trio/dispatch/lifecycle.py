"""Where a dispatcher is in its life, as :attr:`JobDispatcher.state` tells it."""

from __future__ import annotations

import enum

__all__ = ["DispatcherState"]


class DispatcherState(enum.Enum):
    """The four stages of a dispatcher, in order; it never goes back.

    ``NEW`` until :meth:`~nucleo_trio.dispatch.JobDispatcher.run` has started every task of its
    own, ``RUNNING`` while it takes jobs, ``STOPPING`` from the instant a stop is asked for
    (:meth:`~nucleo_trio.dispatch.JobDispatcher.shutdown`, the end of the block, a failure) and
    ``STOPPED`` once its run has ended, however it ended.
    """

    NEW = "NEW"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
