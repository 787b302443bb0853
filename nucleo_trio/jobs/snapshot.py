"""An immutable picture of a job at one moment: what events carry and recorders persist.

:class:`JobSnapshot` is defined in :mod:`nucleo_trio._job_snapshot`, a leaf module the event bus
imports without importing this package.
"""

from .._job_snapshot import (
    JobSnapshot as JobSnapshot,
    class_facts as class_facts,
    forget_class_facts as forget_class_facts,
)

__all__ = ["JobSnapshot"]
