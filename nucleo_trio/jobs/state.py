"""The states a job moves through, and the kinds of job the health report counts.

Both are defined in :mod:`nucleo_trio._job_snapshot`, a leaf module the event bus imports
without importing this package.
"""

from .._job_snapshot import JobState as JobState, JobType as JobType

__all__ = ["JobState", "JobType"]
