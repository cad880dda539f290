"""``exa audit verify``: the chain and every table it describes, read through the store's narrow API
in ONE consistent read (``Store.audited_state``: a placement committed meanwhile cannot show up as
a row without its entry), then checked by the pure functions of ``audit`` and ``_chain_state``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from examlops_policy import _chain_state as chain_state, audit
from examlops_policy.model import Pool
from examlops_policy.store.api import HeldRow, NodeGrantRow, NodeUsageRow
from examlops_policy._core import codec
from examlops_policy._core.state import Capacities

if TYPE_CHECKING:
    from examlops_policy.store import Store


def summary_of(capacities: Capacities) -> chain_state.Summary:
    """A pool's capacity summary (JSON, as stored) and free devices for what its live grants hold
    (node by node: and what is held and busy on its nodes), worked out as a write works them out
    (``Capacities.of``)."""

    def summary(
        pool: Pool,
        held: Sequence[HeldRow],
        held_outside: float,
        grants: Sequence[NodeGrantRow],
        usage: Sequence[NodeUsageRow],
        same_devices: frozenset[str] | None,
    ) -> tuple[object, float]:
        capacity, free = capacities.of(pool, held, held_outside, grants, usage, same_devices)
        return codec.capacity_json(capacity), free

    return summary


def verify(
    store: Store, capacities: Capacities, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None
) -> audit.VerifyReport:
    """The chain (and ``checkpoint``, signed by ``key``), its entries' times in their order and,
    with ``key``, their signatures by it after the checkpoint (``audit.verify_entries``), the
    records it vouches for (each entry's fields held to its record), the stored
    fleets and verdict sets, and every table held to the state the chain describes. Pools'
    capacity summaries are always held to what the live grants give under ``capacities``' packing
    rules: the stored layout digest is a row like any other, so one that says they were worked out
    under other rules excuses nothing (a difference then names it too: a write works them out
    again under the policy's rules)."""
    state = store.audited_state()
    report = audit.verify_chain(state.log, checkpoint, public_key=key if checkpoint is not None else None)
    index = {name: i for i, name in enumerate(chain_state.DECISION_COLUMNS)}
    columns = [index[c] for c in ("outcome", "pool", "cost_per_hour", "carbon_factor", "estimated_start", "estimate_source")]
    records = [
        (str(r[0]), str(r[index["document"]]), r[index["record_digest"]], tuple(r[i] for i in columns))
        for r in state.tables["decisions"]
    ]
    entries = chain_state.entries_of(state.log)  # parsed once, for all
    report = audit.verify_entries(report, state.log, entries, key=key, checkpoint=checkpoint)
    verified: dict[str, dict[str, object]] = {}
    report = audit.verify_records(report, state.log, records, state.documents, entries=entries, records=verified)  # type: ignore[arg-type]
    report = chain_state.verify_state(report, state, entries=entries, records=verified, summary=summary_of(capacities))
    if state.layout != capacities.digest and any(p.message.startswith(("pools.free ", "pools.capacity ")) for p in report.problems):
        layout = audit.Problem(
            0, "state", f"state.layout is {json.dumps(state.layout)}, not the digest of the policy's packing rules "
            f"({capacities.digest}): the summaries above were worked out under other rules, or edited; a write works them out again",
        )  # fmt: skip
        report = audit.VerifyReport(False, report.size, report.head, (*report.problems, layout))
    return report
