"""The one check every executor makes before it builds a scheduler request."""

from __future__ import annotations

from examlops_policy.errors import SpecError
from examlops_policy.model import Placement, Pool
from examlops_policy.views import DecisionRecord



def live_placement(record: DecisionRecord, pool: Pool, *, nothing: str) -> Placement:
    """The placement behind ``record``: placed, not released, and on ``pool``.

    ``nothing`` ends the message for a decision that placed nothing ("to submit", "to emit").
    """
    decision = record.decision
    short = record.id[:12]
    if not isinstance(decision, Placement):
        raise SpecError(f"decision {short} placed nothing, so there is nothing {nothing}", field="ID")
    if record.released_at is not None and record.lease_ended:
        raise SpecError(f"decision {short}: its lease ended at {record.released_at} and its devices were released; place the workload again", field="ID")
    if record.released_at is not None:
        raise SpecError(f"decision {short} was released at {record.released_at}; place the workload again", field="ID")
    if pool.name != decision.pool:
        raise SpecError(f"pool {pool.name!r} is not the pool of decision {short} ({decision.pool!r})")
    return decision
