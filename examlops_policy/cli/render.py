"""How decisions, pools and reports look to people (rich) and to scripts (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from examlops_policy import codec
from examlops_policy.model import Decision, Placement, PoolState, PoolVerdict, Rejection
from examlops_policy.placement import effective_cost
from examlops_policy.store import DecisionRecord
from examlops_policy.tables import Tables

# Which policy check each reason code belongs to, for the clause-by-clause summary.
CHECKS: Final = {
    "backend_unsupported": "portability",
    "burst_not_allowed": "target",
    "target_mismatch": "target",
    "capability_missing": "capabilities",
    "residency_forbids": "residency",
    "region_unknown": "residency",
    "capacity_exhausted": "capacity",
    "fallback_not_needed": "tier",
    "burst_not_needed": "tier",
    "request_rejected": "tier",
}
CHECK_ORDER: Final = ("portability", "target", "capabilities", "residency", "capacity", "tier")


Cell = str | Text


def emit_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]], *, right: Sequence[str] = ()) -> None:
    """A rich table on a terminal; plain aligned columns when piped (greppable, and rendering a
    rich table costs a listing of a hundred pools more than a tenth of a second)."""
    if console.is_terminal:
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, justify="right" if column in right else "left", overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    plain = [[c.plain if isinstance(c, Text) else c for c in row] for row in rows]
    widths = [max([len(column), *(len(row[i]) for row in plain)]) for i, column in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if col in right else c.ljust(w) for c, w, col in zip(cells, widths, columns)).rstrip()

    console.file.write("\n".join([title, line(columns), *(line(row) for row in plain)]) + "\n")


def dump_json(console: Console, value: object) -> None:
    console.file.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def decision_json(record: DecisionRecord | None, decision: Decision) -> dict[str, object]:
    body: dict[str, object] = dict(codec.to_json(decision))
    if record is not None:
        body.update(id=record.id, created_at=record.created_at, released_at=record.released_at, job_id=record.job_id)
    return body


def share_text(placement: Placement) -> str | None:
    grant = placement.grant
    if grant.requested >= 1 or not grant.honored:
        return None
    scheme = {"mig": "MIG", "amd-compute-partition": "AMD compute partition"}.get(grant.scheme or "", grant.scheme or "")
    return f"fraction {grant.requested:g} honored as {scheme} {grant.profile} ({grant.granted:.3g} of a device)"


def print_decision(console: Console, decision: Decision) -> None:
    """The E8 specification's lines: ✓ placed, ✗ rejected, ⚠ burst blocked."""
    if isinstance(decision, Placement):
        flags = ""
        if decision.burst.attempted and decision.burst.verdict == "allowed":
            flags += " (burst)"
        if decision.fallback:
            flags += " (fallback)"
        line = f"✓ {decision.workload.name} → pool {decision.pool} · {decision.accelerator} on {decision.target}{flags}"
        console.print(Text(line, style="green"))
        for part in (decision.note or "").split("; "):
            if part:
                console.print(Text(f"  {part}", style="yellow"))
        share = share_text(decision)
        if share:
            console.print(Text(f"  {share}", style="dim"))
        return
    assert isinstance(decision, Rejection)
    if decision.burst_blocked:
        console.print(Text(f"⚠ Burst blocked: {decision.reason}", style="yellow"))
    else:
        console.print(Text(f"✗ Rejected: {decision.reason}", style="red"))


def _verdict_cell(v: PoolVerdict) -> Text:
    if v.eligible:
        return Text("eligible", style="green")
    kinds = {r.kind for r in v.reasons}
    if "never" in kinds:
        return Text("never", style="red")
    if "not_now" in kinds:
        return Text("not now", style="yellow")
    return Text("passed over", style="cyan")


def print_explanation(console: Console, decision: Decision, states: Sequence[PoolState] | None = None) -> None:
    """Every pool's verdict and reasons, a per-check count, and why the winner won."""
    verdicts = decision.verdicts
    if not verdicts:
        console.print("No pool verdicts: the workload itself was rejected before any pool was judged.")
        return
    free = {s.pool.name: s for s in states or ()}
    rows: list[list[Cell]] = []
    for v in verdicts:
        state = free.get(v.pool)
        reasons = "; ".join(f"{r.code}: {r.message}" for r in v.reasons) or ("chosen" if isinstance(decision, Placement) and decision.pool == v.pool else "")
        rows.append([
            v.pool,
            state.pool.accelerator if state else "",
            state.pool.target if state else "",
            state.pool.region if state else "",
            f"{v.cost_per_hour:.2f}",
            _verdict_cell(v),
            reasons,
        ])  # fmt: skip
    columns = ("pool", "accel", "target", "region", "$/h", "verdict", "reasons")
    emit_table(console, f"Pools for {decision.workload.name}", columns, rows, right=("$/h",))
    total = len(verdicts)
    console.print(f"Checks over {total} pool{'s' if total != 1 else ''}:")
    for check in CHECK_ORDER:
        failed = sum(1 for v in verdicts if any(CHECKS.get(r.code) == check for r in v.reasons))
        console.print(f"  {check:<13} {total - failed:>5} pass  {failed:>5} fail")
    eligible = [v for v in verdicts if v.eligible]
    console.print(f"  eligible      {len(eligible):>5}")
    if isinstance(decision, Placement):
        others = sorted((v for v in eligible if v.pool != decision.pool), key=lambda v: (v.cost_per_hour, v.pool))
        why = f"cheapest of {len(eligible)} eligible at ${decision.cost_per_hour:.2f}/h"
        if others:
            why += f" (next: {others[0].pool} at ${others[0].cost_per_hour:.2f}/h)"
        console.print(f"Chosen: {decision.pool}, {why}.")
    prov = decision.provenance
    console.print(Text(f"policy {prov.policy_revision[:19]} · OPA {prov.opa_version} · input {prov.input_digest[:19]}", style="dim"))


def print_pools(console: Console, states: Sequence[PoolState], tables: Tables) -> None:
    rows: list[list[Cell]] = []
    for s in states:
        p = s.pool
        cost = effective_cost(s, tables)
        carbon = p.carbon_factor if p.carbon_factor is not None else tables.default_carbon_factor(p.region)
        rows.append([
            p.name, p.target, p.accelerator, p.model or "-", p.region, f"{s.free:g}/{p.count}",
            f"{cost:.2f}" + ("" if p.cost_per_hour is not None else "*"),
            f"{carbon:g}" + ("" if p.carbon_factor is not None else "*"),
            "yes" if p.supports_fractions else "no", ",".join(p.capabilities) or "-",
        ])  # fmt: skip
    columns = ("name", "target", "accelerator", "model", "region", "free/total", "$/h", "gCO2e/h", "fractions", "capabilities")
    emit_table(console, "Pools (cheapest first)", columns, rows, right=("free/total", "$/h", "gCO2e/h"))
    if any(s.pool.cost_per_hour is None or s.pool.carbon_factor is None for s in states):
        console.print(Text("* default from policies/examlops/tables/accounting.yaml", style="dim"))


def print_decisions(console: Console, records: Sequence[DecisionRecord]) -> None:
    rows: list[list[Cell]] = []
    for r in records:
        d = r.decision
        if isinstance(d, Placement):
            flags = [f for f, on in (("fallback", d.fallback), ("whole-device", not d.fraction_honored), ("burst", d.burst.verdict == "allowed"), ("released", r.released_at is not None)) if on]
            rows.append([r.id[:12], r.created_at[:19], d.workload.name, Text("placed", style="green"), d.pool, d.accelerator, d.region, ",".join(flags)])
        else:
            assert isinstance(d, Rejection)
            outcome = Text("blocked", style="yellow") if d.burst_blocked else Text("rejected", style="red")
            rows.append([r.id[:12], r.created_at[:19], d.workload.name, outcome, "-", d.workload.accelerator, "-", d.code])
    emit_table(console, "Recent placement decisions", ("id", "time", "workload", "outcome", "pool", "device", "region", "flags"), rows)
