"""What the demo can be asked to do, and the sizes of the accounts it runs against."""

from __future__ import annotations

import attrs

__all__ = [
    "DB_SLOTS",
    "DEFAULT_JOBS",
    "DEFAULT_SEED",
    "HEALTH_AT",
    "HTTP_CONNECTIONS",
    "MAX_JOBS",
    "MIN_JOBS",
    "SEARCH_REQUESTS_PER_SECOND",
    "TRAJECTORY_CHILDREN",
    "DemoOptions",
]

DEFAULT_JOBS = 300
DEFAULT_SEED = 7
MIN_JOBS = 10
MAX_JOBS = 10_000
DB_SLOTS = 4
HTTP_CONNECTIONS = 8
SEARCH_REQUESTS_PER_SECOND = 5
HEALTH_AT = 1.5
"""Seconds into the run at which the demo prints ``dispatcher.health()``: the fan-out's rush."""
TRAJECTORY_CHILDREN = 8
"""How many of the root's children the printed trajectory shows before it sums up the rest."""


def _check_jobs(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"DemoOptions.jobs must be an int, got {type(value).__name__}")
    if not MIN_JOBS <= value <= MAX_JOBS:
        raise ValueError(f"DemoOptions.jobs must be from {MIN_JOBS} to {MAX_JOBS}, got {value}")


@attrs.frozen(kw_only=True)
class DemoOptions:
    """How to run the demo. ``color`` ``None`` means: only when the output is a terminal.
    ``record`` keeps the run's recording in that SQLite file; ``None`` records into a
    temporary file that is removed after the trajectory is printed. ``events`` writes every
    event of the run to that file as JSON lines (``nucleo-trio events FILE`` reads it).
    ``control_socket`` opens the dispatcher's control socket there, for ``nucleo-trio top``."""

    jobs: int = attrs.field(default=DEFAULT_JOBS, validator=_check_jobs)
    seed: int = attrs.field(default=DEFAULT_SEED, validator=attrs.validators.instance_of(int))
    real_time: bool = False
    verbose: bool = False
    color: bool | None = None
    record: str | None = None
    events: str | None = None
    control_socket: str | None = None
