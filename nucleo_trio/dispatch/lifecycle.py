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
    """Built, and not running yet; before its start a
    :meth:`~nucleo_trio.dispatch.JobDispatcher.submit` raises."""
    RUNNING = "RUNNING"
    """Started: every task of its own runs, and it takes jobs."""
    STOPPING = "STOPPING"
    """A stop was asked for: a job submitted now is refused, and the running ones are
    finishing or being cancelled."""
    STOPPED = "STOPPED"
    """Its run has ended, however it ended: every handle is settled and a submit raises."""
