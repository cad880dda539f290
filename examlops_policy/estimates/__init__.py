"""When a pool would start a workload: an estimate from whoever can know it, said with its source
and its age.

The contract (``StartEstimate``):

* ``at``: the instant (aware, UTC) the workload is expected to start on ``pool``, or None when
  there is no estimate; then ``reason`` says why (a stopped controller, a full pool nobody can
  say anything about). No estimate is never turned into "now": the caller judges the pool without
  one and says so (the wait policy, ``checks/wait``, does not take such a pool under a
  ``max_wait`` or a ``deadline``).
* ``source``: who said it. ``slurm``: Slurm itself, for the exact request ``submit`` would send
  (``sbatch --test-only``; ``squeue --start`` for a job already queued). ``kubernetes``: the
  cluster's nodes and pending pods (Kubernetes does not estimate starts: only "now" or unknown).
  ``table``: the reviewed table of typical provisioning delays (``tables/provisioning.yaml``), for
  cloud pools with no scheduler to ask. ``now``: the pool has room for the grant now and no
  scheduler of its own to ask.
* ``observed_at``: when the source answered; ``age(now)`` is how old the estimate is (estimates
  are cached for a few seconds, see ``slurm.SlurmEstimator``).
* ``detail``: one line for people, naming the source's own words (the nodes and partition Slurm
  named, the table row and what its figure means).
* ``facts``: the same as data (for ``--json``).

Sources: ``slurm.SlurmEstimator``, ``kubernetes.KubernetesEstimator``,
``table.ProvisioningTable``; ``gather.StartEstimator`` asks each pool's own. ``waiting`` holds the
wait policy's answer (``WaitLimits``) and the comparison of an estimate with it, as the policy
makes it.

Estimates are asked for outside the state's write lock: they wait on schedulers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Final, Literal

from examlops_policy.model import JSONObject, JSONValue

Source = Literal["slurm", "kubernetes", "table", "now"]
SOURCES: Final[tuple[Source, ...]] = ("slurm", "kubernetes", "table", "now")


def utc_now() -> datetime:
    """The current instant, aware, in UTC."""
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    """An aware instant as RFC 3339 UTC text with ``Z``, to the second (estimates have no finer grain)."""
    return moment.astimezone(timezone.utc).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


@dataclass(frozen=True)
class StartEstimate:
    """When ``pool`` would start the workload (``at``; None: no estimate, ``reason`` says why),
    who said so (``source``) and when (``observed_at``)."""

    pool: str
    at: datetime | None
    source: Source
    observed_at: datetime
    detail: str
    reason: str | None = None
    facts: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown estimate source {self.source!r} (expected one of {', '.join(SOURCES)})")
        for name in ("at", "observed_at"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValueError(f"{name} must be an aware datetime (got {value!r})")
        if (self.at is None) != (self.reason is not None):
            raise ValueError("an estimate has a start or a reason why it has none, not both")

    @property
    def known(self) -> bool:
        """True when there is an estimated start."""
        return self.at is not None

    def wait(self, now: datetime) -> timedelta | None:
        """How long from ``now`` until the estimated start (zero when it is due); None: unknown."""
        return None if self.at is None else max(timedelta(0), self.at - now)

    def age(self, now: datetime) -> timedelta:
        """How old the estimate is at ``now``."""
        return max(timedelta(0), now - self.observed_at)

    def as_json(self) -> JSONObject:
        """The estimate as ``--json`` shows it: times as RFC 3339 UTC text."""
        return {
            "pool": self.pool,
            "estimated_start": None if self.at is None else iso(self.at),
            "estimate_source": self.source,
            "observed_at": iso(self.observed_at),
            "detail": self.detail,
            "reason": self.reason,
            "facts": dict(self.facts),
        }

    def policy_input(self) -> JSONObject:
        """The estimate as the wait policy reads it (``input.pool.estimate``): whole epoch seconds
        (the decision's time is given the same way, ``input.now``)."""
        return {
            "at": None if self.at is None else math.floor(self.at.timestamp()),
            "source": self.source,
            "observed_at": math.floor(self.observed_at.timestamp()),
        }


def unknown(pool: str, source: Source, reason: str, observed_at: datetime, facts: Mapping[str, JSONValue] | None = None) -> StartEstimate:
    """No estimate for ``pool`` from ``source``, and why (the detail says it too)."""
    return StartEstimate(pool, None, source, observed_at, f"{source}: no estimate: {reason}", reason, dict(facts or {}))


def start_now(pool: str, now: datetime, why: str = "free capacity now: starts now") -> StartEstimate:
    """The pool has room for the grant now and no scheduler of its own to ask."""
    return StartEstimate(pool, now, "now", now, f"now: {why}")


__all__ = ["SOURCES", "Source", "StartEstimate", "iso", "start_now", "unknown", "utc_now"]
