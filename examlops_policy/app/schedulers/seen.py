"""What reconcile reads of a scheduler (``Scheduler.reconcile``): its jobs and its nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobSeen:
    """One of this layer's jobs as its scheduler reports it: its state in the scheduler's words,
    whether it ended or runs, when it started and ended (UTC, ISO 8601), and the uid of the object
    the scheduler knows it as (None: the scheduler has none; a different one: the job is gone)."""

    state: str
    ended: bool
    running: bool
    started_at: str | None = None
    ended_at: str | None = None
    uid: str | None = None


@dataclass(frozen=True)
class Seen:
    """What reconcile reads of a scheduler in one pass: the jobs asked about by job id (a job
    missing here is gone), and the state (``up``, ``drained``, ``down``) of each node it reports."""

    jobs: Mapping[str, JobSeen] = field(default_factory=dict)
    nodes: Mapping[str, str] = field(default_factory=dict)
