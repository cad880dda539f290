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

from collections.abc import Mapping
from datetime import datetime, timezone

# The estimate itself is a value of the decision (``model.StartEstimate``): decisions carry their
# candidates' estimates.
from examlops_policy.model import NO_SCHEDULER, SOURCES, JSONValue, Source, StartEstimate, iso

# Worded for people where decisions are (the command line renders views).
from examlops_policy.views import duration_text, start_text


def utc_now() -> datetime:
    """The current instant, aware, in UTC."""
    return datetime.now(timezone.utc)


def unknown(pool: str, source: Source, reason: str, observed_at: datetime, facts: Mapping[str, JSONValue] | None = None) -> StartEstimate:
    """No estimate for ``pool`` from ``source``, and why (the detail says it too)."""
    return StartEstimate(pool, None, source, observed_at, f"{source}: no estimate: {reason}", reason, dict(facts or {}))


def start_now(pool: str, now: datetime, why: str = "free capacity now: starts now") -> StartEstimate:
    """The pool has room for the grant now and no scheduler of its own to ask."""
    return StartEstimate(pool, now, NO_SCHEDULER, now, f"{NO_SCHEDULER}: {why}")


__all__ = ["SOURCES", "Source", "StartEstimate", "duration_text", "iso", "start_now", "start_text", "unknown", "utc_now"]
