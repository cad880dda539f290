"""``exa audit verify``: the chain and every table it describes, read through the store's narrow API
in ONE consistent read (``Store.audited_read``: a placement committed meanwhile cannot show up as
a row without its entry), then checked by the pure functions of ``audit`` and ``_chain_state``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from examlops_policy import _chain_state as chain_state, audit
from examlops_policy.model import Pool
from examlops_policy.store.api import AUDITED, AuditedRead, AuditedState, HeldRow, NodeGrantRow, NodeUsageRow
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
        other_modes: frozenset[str],
        states: Mapping[str, str],
    ) -> tuple[object, float]:
        capacity, free = capacities.of(pool, held, held_outside, grants, usage, same_devices, other_modes, states)
        return codec.capacity_json(capacity), free

    return summary


# The tables read as they stream by, once (the rest are read whole): they grow with the decisions.
_STREAMED: Final = frozenset({"decisions", "capacity_log"})


def verify(
    store: Store, capacities: Capacities, checkpoint: audit.Checkpoint | None = None, key: audit.VerifierKey | None = None
) -> audit.VerifyReport:
    """The chain (and ``checkpoint``, signed by ``key``), its entries' times in their order and,
    with ``key``, their signatures by it after the checkpoint (``audit.EntryChecks``), the
    records it vouches for (each entry's fields held to its record), the stored
    fleets and verdict sets, and every table held to the state the chain describes. Pools'
    capacity summaries are always held to what the live grants give under ``capacities``' packing
    rules: the stored layout digest is a row like any other, so one that says they were worked out
    under other rules excuses nothing (a difference then names it too: a write works them out
    again under the policy's rules).

    In one consistent read, streamed: the log once (the chain walked, each entry checked and
    applied to the state it describes, none kept but a decision entry's bytes), then the decisions
    table once (each record checked and its rows compared as it goes by); the smaller tables are
    read whole. What it holds grows with the decisions by their entries' bytes and ids, not by
    their records or the log."""
    return store.audited_read(lambda read: _verify(read, capacities, checkpoint, key))


def _verify(read: AuditedRead, capacities: Capacities, checkpoint: audit.Checkpoint | None, key: audit.VerifierKey | None) -> audit.VerifyReport:
    signed_checkpoint = checkpoint is not None and key is not None
    entries = audit.EntryChecks(key=key, checkpoint=checkpoint)
    steps = chain_state.Replay()

    def walked() -> Iterator[audit.AuditRow]:
        for row in read.log():
            yield row  # to the chain walk first: each row is checked and applied once the walk has it
            entry = chain_state.entry_of(row)
            if entry is not None:
                entries.add(row.seq, row.prev_hash, entry)
                steps.add(row.seq, entry, row.canonical)

    report = audit.verify_chain(walked(), checkpoint, public_key=key if signed_checkpoint else None)
    report = entries.report(report)
    chain = steps.done()
    records = audit.RecordChecks(chain_lost=any(p.kind in audit.CHAIN_LOST for p in report.problems))
    documents = read.documents()
    tables = {table: list(read.rows(table)) for table in AUDITED if table not in _STREAMED}
    state = AuditedState(documents, tables, read.version, read.layout)
    broken = any(p.kind in audit.CHAIN_BROKEN for p in report.problems)
    # The state cannot be rebuilt from a chain that lost, gained or altered entries: its own
    # problems say what to restore first, and the tables are held to it once it verifies.
    comparison = None if broken else chain_state.Comparison(chain, state, chain_lost=False, summary=summary_of(capacities))
    index = {name: i for i, name in enumerate(chain_state.DECISION_COLUMNS)}
    at_document, at_digest = index["document"], index["record_digest"]
    columns = [index[c] for c in ("outcome", "pool", "cost_per_hour", "carbon_factor", "estimated_start", "estimate_source")]
    for r in read.rows("decisions"):
        ident = str(r[0])
        # Its record is held to its first decision entry, its rows to its last (one, but for a forgery).
        first, last = chain.said(ident), chain.decisions.get(ident)
        said = None if first is None else (first.seq, first.entry())
        record = records.check(ident, r[at_document], r[at_digest], tuple(r[i] for i in columns), said)
        if comparison is not None:
            entry = said[1] if said is not None and last is first else (None if last is None else last.entry())
            comparison.decision(r, entry, record)
    records.documents(documents)
    report = records.report(report)
    if comparison is not None:
        problems = (*report.problems, *comparison.found(read.rows("capacity_log"), capacities.layout))
        report = audit.VerifyReport(not problems, report.size, report.head, problems)
    if read.layout != capacities.digest and any(p.message.startswith(("pools.free ", "pools.capacity ")) for p in report.problems):
        layout = audit.Problem(
            0, "state", f"state.layout is {json.dumps(read.layout)}, not the digest of the policy's packing rules "
            f"({capacities.digest}): the summaries above were worked out under other rules, or edited; a write works them out again",
        )  # fmt: skip
        report = audit.VerifyReport(False, report.size, report.head, (*report.problems, layout))
    return report


def checkpoint(report: audit.VerifyReport, *, origin: str | None = None, key: audit.SigningKey | None = None) -> audit.Checkpoint:
    """A checkpoint (size and head) of the log ``report`` verified, signed with ``key`` when given;
    AuditIntegrityError when it did not verify."""
    report.raise_for_problems()
    cp = audit.make_checkpoint(report.size, report.head, origin or audit.ORIGIN)
    return audit.sign_checkpoint(cp, key) if key is not None else cp
