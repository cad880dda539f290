"""``exa audit verify`` over a SQL store: the chain and every table it describes, read in ONE
consistent transaction (a placement committed meanwhile cannot show up as a row without its entry),
then checked by the pure functions of ``audit`` and ``_chain_state``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from examlops_policy import _chain_state as chain_state, _packing as packing, audit
from examlops_policy._chain_state import ALLOCATION_COLUMNS, BURST_COLUMNS, DECISION_COLUMNS, HOLDING_COLUMNS, POOL_COLUMNS, StateRows
from examlops_policy._engine import capacity_json
from examlops_policy.model import Holding, Pool

if TYPE_CHECKING:
    from examlops_policy.store import Store
    from examlops_policy.store._sql import SQLStore


def _select(store: SQLStore, table: str, columns: Sequence[str], order: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store._execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()]


def read(store: SQLStore) -> tuple[list[audit.AuditRow], StateRows, list[tuple[str, str]]]:
    """The audit rows, every table ``_chain_state`` compares, and the stored fleet and verdict-set
    documents, in one read-only transaction."""
    from examlops_policy.store._sql import _audit_row, _layout_digest

    def work() -> tuple[list[audit.AuditRow], StateRows, list[tuple[str, str]]]:
        rows = [_audit_row(r) for r in store._execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq").fetchall()]
        documents = [(str(r[0]), str(r[1])) for r in store._execute(
            "SELECT revision, document FROM fleets UNION ALL SELECT key, document FROM verdict_sets"
        ).fetchall()]  # fmt: skip
        layout = store._execute("SELECT layout FROM state WHERE id = 1").fetchone()
        current = layout is not None and layout[0] == _layout_digest(store.tables)
        state = StateRows(
            decisions=_select(store, "decisions", DECISION_COLUMNS, "id"),
            allocations=_select(store, "allocations", ALLOCATION_COLUMNS, "decision_id"),
            holdings=_select(store, "holdings", HOLDING_COLUMNS, "decision_id, device"),
            burst_events=_select(store, "burst_events", BURST_COLUMNS, "id"),
            pools=_select(store, "pools", POOL_COLUMNS, "name"),
            fleets={k: v for k, v in documents if k.startswith("fleet:")},
            summary=_summary(store) if current else None,
        )
        return rows, state, documents

    return store._run(work, consistent=True)


def _summary(store: SQLStore) -> chain_state.Summary:
    def summary(pool: Pool, held: Sequence[tuple[Holding, float]], outside: float) -> tuple[object, float]:
        layout = packing.layout_of(pool, store.tables)
        capacity = packing.summarize(layout, [h for h, _ in held], outside)
        # A pool of fixed slices counts slices; any other counts the shares of its devices.
        devices = float(len(held)) if layout.kind == "fixed" else sum(share for _, share in held)
        return json.loads(json.dumps(capacity_json(capacity))), devices

    return summary


def verify(store: Store, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None) -> audit.VerifyReport:
    """The chain (and ``checkpoint``, signed by ``key``), the records it vouches for, the stored
    fleets and verdict sets, and every table held to the state the chain describes."""
    from examlops_policy.store._sql import SQLStore

    if not isinstance(store, SQLStore):
        rows = store.audit_rows()
        report = audit.verify_chain(rows, checkpoint, public_key=key)
        return audit.verify_records(report, rows, store.records_for_audit(), store.stored_documents())
    rows, state, documents = read(store)
    report = audit.verify_chain(rows, checkpoint, public_key=key)
    index = {name: i for i, name in enumerate(DECISION_COLUMNS)}
    records = [
        (str(r[0]), str(r[index["document"]]), r[index["record_digest"]],
         tuple(r[index[c]] for c in ("outcome", "pool", "cost_per_hour", "carbon_factor")))
        for r in state.decisions
    ]  # fmt: skip
    entries = chain_state.entries_of(rows)  # parsed once, for both
    verified: dict[str, dict[str, object]] = {}
    report = audit.verify_records(report, rows, records, documents, entries=entries, records=verified)  # type: ignore[arg-type]
    return chain_state.verify_state(report, rows, state, entries=entries, records=verified)
