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
from datetime import datetime, timezone

# The estimate itself is a value of the decision (``model.StartEstimate``): decisions carry their
# candidates' estimates.
from examlops_policy.model import SOURCES, JSONValue, Source, StartEstimate, iso


def utc_now() -> datetime:
    """The current instant, aware, in UTC."""
    return datetime.now(timezone.utc)


def duration_text(seconds: float) -> str:
    """Whole seconds for people, the two largest units: ``45 s``, ``1 m 30 s``, ``2 h 05 m``,
    ``1 d 01 h`` (the wait policy's ``duration_text``, which words ``max_wait`` in its
    messages)."""
    s = int(math.floor(seconds))
    for size, big, small, next_size in ((86400, "d", "h", 3600), (3600, "h", "m", 60), (60, "m", "s", 1)):
        if s >= size:
            whole, part = divmod(s, size)
            part //= next_size
            return f"{whole} {big}" if part == 0 else f"{whole} {big} {part:02d} {small}"
    return f"{s} s"


def start_text(estimate: StartEstimate, now: datetime) -> str:
    """An estimate for people, seen from ``now``: ``slurm: expected start 14:20 UTC (in 2 h 05 m)``,
    ``now: starts now``, ``table: expected start 12:10 UTC (in 10 m; provisioning at most 10 m ...)``,
    ``slurm: no estimate (Slurm's controller does not answer ...)``. A start on another day than
    ``now`` says its date."""
    if estimate.at is None:
        return f"{estimate.source}: no estimate ({estimate.reason})"
    wait = estimate.wait(now)
    if estimate.source == "now" or (wait is not None and wait.total_seconds() < 1):
        return f"{estimate.source}: starts now"
    at = estimate.at.astimezone(timezone.utc)
    when = at.strftime("%H:%M UTC") if at.date() == now.astimezone(timezone.utc).date() else at.strftime("%Y-%m-%d %H:%M UTC")
    after = f"in {duration_text(wait.total_seconds())}" if wait is not None else ""
    if estimate.source == "table" and "delay_s" in estimate.facts:
        kind = "typical" if estimate.facts.get("typical") else "at most"
        after += f"; provisioning {kind} {duration_text(float(str(estimate.facts['delay_s'])))}"
    return f"{estimate.source}: expected start {when} ({after})"


def unknown(pool: str, source: Source, reason: str, observed_at: datetime, facts: Mapping[str, JSONValue] | None = None) -> StartEstimate:
    """No estimate for ``pool`` from ``source``, and why (the detail says it too)."""
    return StartEstimate(pool, None, source, observed_at, f"{source}: no estimate: {reason}", reason, dict(facts or {}))


def start_now(pool: str, now: datetime, why: str = "free capacity now: starts now") -> StartEstimate:
    """The pool has room for the grant now and no scheduler of its own to ask."""
    return StartEstimate(pool, now, "now", now, f"now: {why}")


__all__ = ["SOURCES", "Source", "StartEstimate", "duration_text", "iso", "start_now", "start_text", "unknown", "utc_now"]
