"""How decisions, pools and reports look to people (rich on a terminal, plain text piped) and to scripts (JSON)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from examlops_policy.cli.console import Console, Text
from examlops_policy.quantities import memory_text

from examlops_policy.model import WORK_OBJECTIVES, Decision, Grant, Placement, PoolState, PoolVerdict, Queued, Rejection, article
from examlops_policy.views import (
    DecisionRecord, DecisionSummary, Explanation, JobFigures, PoolDetail, PoolView, QueueEntry, Standing, duration_text,
    start_text, wait_text,
)  # fmt: skip

Cell = str | Text


def emit_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]], *, right: Sequence[str] = ()) -> None:
    """A rich table on a terminal; plain aligned columns when piped (greppable, and rendering a
    rich table costs a listing of a hundred pools more than a tenth of a second)."""
    if console.is_terminal:
        from rich.table import Table
        from rich.text import Text as RichText

        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, justify="right" if column in right else "left", overflow="fold")
        for row in rows:
            table.add_row(*(RichText(c.plain, style=c.style) if isinstance(c, Text) else c for c in row))
        console.print(table)
        return
    plain = [[c.plain if isinstance(c, Text) else c for c in row] for row in rows]
    widths = [max([len(column), *(len(row[i]) for row in plain)]) for i, column in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if col in right else c.ljust(w) for c, w, col in zip(cells, widths, columns)).rstrip()

    console.file.write("\n".join([title, line(columns), *(line(row) for row in plain)]) + "\n")


def dump_json(console: Console, value: object, *, sort_keys: bool = True) -> None:
    """``value`` as indented JSON; ``sort_keys=False`` keeps the order it was built in (e.g. keys
    that are numbers, which sorted as text would read 0, 1, 104, 39)."""
    console.file.write(json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n")


def plain_yaml(value: object) -> str:
    """``value`` as block YAML in its own key order, every repeated part written out in full: no
    anchors and aliases (``&id001`` / ``*id001``), which kubectl reads but people and many tools do not."""
    import yaml

    class _Plain(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    return yaml.dump(value, Dumper=_Plain, sort_keys=False, default_flow_style=False)


def stream_json(console: Console, items: Iterable[object]) -> None:
    """A JSON array written item by item: a long list never sits in memory as one document."""
    first = True
    console.file.write("[")
    for item in items:
        console.file.write(("\n  " if first else ",\n  ") + json.dumps(item, sort_keys=True, ensure_ascii=False))
        first = False
    console.file.write("\n]\n" if not first else "]\n")


def summary_json(s: DecisionSummary) -> dict[str, object]:
    return {**s.__dict__, "decision_id": s.id, "estimate_error_s": s.estimate_error_s}


def number(value: float) -> str:
    """A figure without float noise: at most three decimals, trailing zeros dropped."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text if text != "-0" else "0"


def amount(value: float, digits: int, unit: str = "") -> str:
    """A figure to ``digits`` decimals after ``unit`` (``$``) that never reads zero when it is not:
    ``<0.1`` (``<$0.01``) below what the digits show."""
    if 0 < value < 0.5 * 10**-digits:
        return f"<{unit}{10**-digits:.{digits}f}"
    return f"{unit}{value:.{digits}f}"


def print_carbon_legend(console: Console, methods: dict[str, str]) -> None:
    """What each carbon method shown means (``carbon from``): method -> text."""
    for method, text in sorted(methods.items()):
        console.print(Text(f"carbon from {method}: {text}", style="dim"))


def devices_text(count: float, accelerator: str) -> str:
    if count == 1:
        return f"1 {accelerator} device"
    return f"{number(count)} {accelerator} devices"


def grant_text(grant: Grant, accelerator: str) -> str:
    """What a grant holds, for people: ``2 amd devices``, ``a 4g.40gb slice (4/7 of an nvidia
    device)``, ``1 of 4 shares of an nvidia device``, ``2 nvidia devices on each of 2 nodes``."""
    if grant.shares is not None:
        return f"{grant.shares} of {round(grant.shares / grant.share)} shares of {article(accelerator)} device"
    if grant.nodes > 1:
        return f"{devices_text(grant.units, accelerator) if grant.profile is None else grant.profile} on each of {grant.nodes} nodes"
    if grant.profile is None:
        return devices_text(grant.units, accelerator)
    share = f"{round(grant.share * (8 if grant.scheme == 'amd-compute-partition' else 7))}/{8 if grant.scheme == 'amd-compute-partition' else 7}"
    slices = "a" if grant.units == 1 else str(grant.units)
    plural = "" if grant.units == 1 else "s"
    return f"{slices} {grant.profile} slice{plural} ({share} of {article(accelerator)} device each)" if grant.units > 1 else (
        f"a {grant.profile} slice ({share} of {article(accelerator)} device)"
    )


def share_text(placement: Placement) -> str | None:
    grant = placement.grant
    if grant.requested >= 1 or not grant.honored or grant.shares is not None:
        return None
    scheme = {"mig": "MIG", "amd-compute-partition": "AMD compute partition"}.get(grant.scheme or "", grant.scheme or "")
    where = ""
    if placement.holdings:
        h = placement.holdings[0]
        if grant.geometry is None:  # a pool of fixed slices: its units are the slices
            where = f" as slice {h.device} of the pool"
        else:
            where = f" on device {h.device}" + (f" at slice {h.start}" if h.start is not None and grant.scheme == "mig" else "")
    return f"fraction {grant.requested:g} honored as {scheme} {grant.profile} ({grant.share:.3g} of a device){where}"


def queued_line(name: str, entry: QueueEntry | None) -> str:
    """``⏳ Queued: NAME · position P of N · waits for: capacity_exhausted on 2 pools, ...``."""
    parts = [f"⏳ Queued: {name}"]
    if entry is not None:
        if entry.state != "queued":
            parts.append(entry.state)
        elif entry.position is not None:
            parts.append(f"position {entry.position} of {entry.of}")
        if entry.state == "queued":
            parts.append(f"waits for: {waits_text(dict(entry.waits_for))}")
    return " · ".join(parts)


def waits_text(waits: dict[str, int]) -> str:
    return ", ".join(f"{code} on {n} pool{'s' if n != 1 else ''}" for code, n in sorted(waits.items())) or "capacity"


def print_decision(console: Console, decision: Decision, entry: QueueEntry | None = None) -> None:
    """The E8 specification's lines: ✓ placed, ✗ rejected, ⚠ burst blocked; and ⏳ queued."""
    if isinstance(decision, Placement):
        flags = [f for f, on in (("burst", decision.burst.attempted and decision.burst.verdict == "allowed"), ("fallback", decision.fallback)) if on]
        line = f"✓ {decision.workload.name} → pool {decision.pool} · {decision.accelerator} on {decision.target}"
        if flags:
            line += f" ({', '.join(flags)})"
        console.print(Text(line, style="green"))
        for part in (decision.note or "").split("; "):
            if part:
                console.print(Text(f"  {part}", style="yellow"))
        share = share_text(decision)
        if share:
            console.print(Text(f"  {share}", style="dim"))
        for line in allocation_lines(decision):
            console.print(Text(f"  {line}", style="dim"))
        return
    if isinstance(decision, Queued):
        console.print(Text(queued_line(decision.workload.name, entry), style="yellow"))
        console.print(Text(f"  {decision.reason}", style="dim"))
        if entry is not None and entry.state == "admitted" and entry.preempted:
            console.print(Text(f"  admitted at once by decision {entry.admitted_by}: preempted {', '.join(v[:12] for v in entry.preempted)}", style="green"))
        elif entry is not None and entry.state == "queued" and entry.preemption:
            console.print(Text(f"  not preempting: {entry.preemption}", style="dim"))
    elif decision.burst_blocked:
        console.print(Text(f"⚠ Burst blocked: {decision.reason}", style="yellow"))
    else:
        console.print(Text(f"✗ Rejected: {decision.reason}", style="red"))


def print_links(console: Console, record: DecisionRecord) -> None:
    """How a decision and the queue are linked: the queued record a placement admitted, or what
    became of a queued one (the placement that admitted it, or that it waits, was cancelled or
    failed); and what reconcile read of its job."""
    entry = record.queue
    if record.queued_id is not None:
        console.print(f"admitted from queued record {record.queued_id}")
    if record.preempted:
        console.print(f"preempted {', '.join(record.preempted)} to make room")
    if record.preempted_by is not None:
        console.print(f"preempted by decision {record.preempted_by} (for queued record {record.preempting_for}) at {record.released_at}")
    if entry is not None:
        if entry.state == "admitted":
            console.print(f"admitted by decision {entry.admitted_by} at {entry.ended_at}")
            if entry.preempted:
                console.print(f"preempted {', '.join(entry.preempted)} to make room")
        elif entry.state == "queued":
            where = f"position {entry.position} of {entry.of}" if entry.position is not None else "not ordered: " + "; ".join(entry.invalid)
            console.print(f"waiting since {entry.queued_at} · {where}" + (f" · {entry.order_reason}" if entry.order_reason else ""))
            if entry.reservation:
                console.print(f"reserved: {entry.reservation}")
            if entry.preemption:
                console.print(f"not preempting: {entry.preemption}")
        else:
            console.print(f"{entry.state} at {entry.ended_at}" + (f": {entry.message}" if entry.message else ""))
        if entry.preempted_from is not None:
            console.print(f"queued again after decision {entry.preempted_from} was preempted")
    if record.job_started_at or record.job_ended_at:
        ended = f", ended {record.job_ended_at} ({record.job_state})" if record.job_ended_at else ""
        console.print(f"job started {record.job_started_at or '-'}{ended}")
    if record.node_down_at:
        console.print(Text(f"a node of this grant went down at {record.node_down_at}", style="red"))


# Why a served policy that matches is not proven to: an external OPA's revision and table digest
# come from its own rules; a local one whose command line has no verification key loads any bundle.
NOT_PROVEN = "its revision and the digest of its tables come from the rules it serves, which are trusted to its operator"
UNSIGNED_LOCAL = (
    "its recorded command line has no --verification-key: it loads a bundle nobody signed, so what it serves is not "
    "proven to be what exa built (another process of this user may have started it); exa opa restart starts one that verifies"
)

NODES_SHOWN = 8


def allocation_lines(placement: Placement) -> list[str]:
    """Where a node-tracked grant is, node by node: ``on node ai-1: devices 0-3 · 16 CPU cores ·
    64Gi memory`` (a gang: each node, at most NODES_SHOWN, then how many more)."""
    out = []
    for a in placement.allocations[:NODES_SHOWN]:
        if a.share is not None:
            grant = placement.grant
            of = round(grant.shares / grant.share) if grant.shares and grant.share else None
            held = f"{a.share.shares}{f' of {of}' if of else ''} shares of device {a.share.device}"
        elif a.holdings and a.holdings[0].profile is not None and placement.grant.geometry is not None:
            held = ", ".join(f"{h.profile} on device {h.device}" + (f" at slice {h.start}" if h.start is not None else "") for h in a.holdings)
        else:
            held = f"device{'s' if len(a.holdings) != 1 else ''} {index_ranges([h.device for h in a.holdings])}"
        parts = [held]
        if a.cpu_milli:
            parts.append(f"{number(a.cpu_milli / 1000)} CPU cores")
        if a.memory_mib:
            parts.append(f"{memory_text(a.memory_mib)} memory")
        out.append(f"on node {a.node}: {' · '.join(parts)}")
    if len(placement.allocations) > NODES_SHOWN:
        out.append(f"... and {len(placement.allocations) - NODES_SHOWN} more node(s)")
    return out


def index_ranges(indices: Sequence[int]) -> str:
    """``0-3, 6``: device indices as runs."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def ended_text(record: DecisionRecord) -> str:
    """`` · released T`` or `` · lease ended T`` for a placement that holds nothing now; else empty."""
    if record.released_at is None:
        return ""
    if record.preempted_by is not None:
        return f" · preempted {record.released_at} by decision {record.preempted_by[:12]}"
    return f" · lease ended {record.released_at}" if record.lease_ended else f" · released {record.released_at}"


def _verdict_cell(v: PoolVerdict) -> Text:
    if v.eligible:
        return Text("eligible", style="green")
    kinds = {r.kind for r in v.reasons}
    if "never" in kinds:
        return Text("never", style="red")
    if "not_now" in kinds:
        return Text("not now", style="yellow")
    return Text("passed over", style="cyan")


def _grant_cell(v: PoolVerdict) -> str:
    g = v.grant
    if g.shares is not None:
        return f"{g.shares}/{round(g.shares / g.share)} share"
    gang = f" x {g.nodes} nodes" if g.nodes > 1 else ""
    if g.profile is not None:
        return (g.profile if g.units == 1 else f"{g.units} x {g.profile}") + gang
    return (f"{g.units} whole" if g.honored or g.requested >= 1 else f"{g.units} whole*") + gang


TIERS = {0: "0 (HPC, requested accelerator)", 1: "1 (HPC, stand-in)", 2: "2 (cloud, requested accelerator)", 3: "3 (cloud, stand-in)"}


def print_explanation(console: Console, decision: Decision) -> None:
    """Every pool's verdict and reasons, with what its grant would cost and emit per hour, a
    per-check count, and why the winner won under the workload's objective."""
    verdicts = decision.verdicts
    if not verdicts:
        console.print("No pool verdicts: the workload itself was rejected before any pool was judged.")
        return
    chosen = decision.pool if isinstance(decision, Placement) else None
    now = decision.decided_at
    # Each pool's start where the decision asked more pools than the one it chose (a wait limit,
    # or the earliest start); else the chosen pool's alone, below the table.
    starts = now is not None and any(v.estimate is not None for v in verdicts if v.pool != chosen)
    # What the workload's work takes on each pool, where it says its work.
    work = decision.workload.work
    unit = (decision.workload.work_class or "work") if work is not None else ""
    rows: list[list[Cell]] = []
    for v in verdicts:
        reasons = "; ".join(f"{r.code}: {r.message}" for r in v.reasons) or ("chosen" if v.pool == chosen else "")
        if v.spot:
            reasons = "; ".join(part for part in (reasons, "spot (preemptible)") if part)
        row: list[Cell] = [
            v.pool, v.accelerator, v.target, v.region, f"{v.cost_per_hour:.2f}", _grant_cell(v), f"{v.grant_cost_per_hour:.2f}",
            number(v.grant_carbon_per_hour), _verdict_cell(v),
        ]  # fmt: skip
        if starts:
            row.append(start_text(v.estimate, now) if v.estimate is not None and now is not None else "not asked")
        if work is not None:
            row.extend(_job_cells(v, work))
        rows.append([*row, reasons])
    work_columns = (f"{unit}/s", "run time", "$/job", "gCO2e/job") if work is not None else ()
    columns = (
        "pool", "accel", "target", "region", "$/device-h", "grant", "grant $/h", "grant gCO2e/h", "verdict", *(("start",) if starts else ()),
        *work_columns, "reasons",
    )  # fmt: skip
    right = ("$/device-h", "grant $/h", "grant gCO2e/h", *work_columns[:1], *work_columns[2:])
    emit_table(console, f"Pools for {decision.workload.name}", columns, rows, right=right)
    if work is not None and any(v.work_rate is None for v in verdicts):
        console.print(Text(f"-: no throughput known for {decision.workload.work_class} on the pool's model (throughput.yaml)", style="dim"))
    if any(_grant_cell(v).endswith("*") for v in verdicts):
        console.print(Text("* a whole device for the fraction asked: the pool cannot cut its devices into that share", style="dim"))
    total = len(verdicts)
    console.print(f"Checks over {total} pool{'s' if total != 1 else ''}:")
    width = max([len("eligible"), *(len(c.name) for c in decision.checks)])
    for check in decision.checks:
        codes = {c[0] for c in check.codes}
        failed = sum(1 for v in verdicts if any(r.code in codes for r in v.reasons))
        console.print(f"  {check.name:<{width}} {total - failed:>5} pass  {failed:>5} fail")
    eligible = sum(1 for v in verdicts if v.eligible)
    console.print(f"  {'eligible':<{width}} {eligible:>5}")
    if isinstance(decision, Placement):
        from examlops_policy.hardware import explain  # the core's ranking, as the façade offers it

        # Where on which node(s): said once, by the placement's own lines above the explanation.
        console.print(f"Chosen: {decision.pool}, {why_chosen(decision, explain(decision), eligible)}.")
        if not starts and decision.estimate is not None and now is not None:
            console.print(f"Start: {start_text(decision.estimate, now)}")
    prov = decision.provenance
    console.print(
        Text(
            f"policy {prov.policy_revision[:19]} · OPA {prov.opa_version} · input {prov.input_digest[:19]} · verdicts {prov.verdicts}",
            style="dim",
        )
    )


def _job_cells(v: PoolVerdict, work: float) -> list[Cell]:
    """A pool's throughput, run time, cost and carbon per job (``-`` where no throughput is known)."""
    job = JobFigures.of(v, work)
    if job is None:
        return ["-", "-", "-", "-"]
    return [_rate_text(job.rate), duration_text(job.run_s) if job.run_s >= 1 else "<1 s", amount(job.cost, 2, "$"), number(job.carbon_g)]


def _rate_text(rate: float) -> str:
    """Units a second, to three significant figures."""
    return f"{rate:.3g}" if rate < 1000 else f"{rate:,.0f}"


def _figures(s: Standing, objective: str, ex: Explanation | None = None) -> str:
    if objective == "cost":
        return f"${s.cost_per_hour:.2f}/h"
    if objective == "earliest":
        return f"{wait_text(s.estimate, ex.decided_at if ex else None)} at ${s.cost_per_hour:.2f}/h"
    if objective == "carbon":
        return f"{number(s.carbon_per_hour)} gCO2e/h (${s.cost_per_hour:.2f}/h)"
    if objective in WORK_OBJECTIVES:
        job = s.job
        if job is None:
            return f"no throughput known (${s.cost_per_hour:.2f}/h, {number(s.carbon_per_hour)} gCO2e/h)"
        head = {
            "work-cost": f"{amount(job.cost, 2, '$')} per job",
            "work-carbon": f"{number(job.carbon_g)} gCO2e per job",
        }.get(objective)
        if head is None:  # work-time: its start, then its run time
            return f"starts {wait_text(s.estimate, ex.decided_at if ex else None)}, runs {duration_text(job.run_s)} at ${s.cost_per_hour:.2f}/h"
        return f"{head} ({duration_text(job.run_s)} at ${s.cost_per_hour:.2f}/h)"
    return f"score {s.score:.3f} (${s.cost_per_hour:.2f}/h, {number(s.carbon_per_hour)} gCO2e/h)"


def why_chosen(decision: Placement, ex: Explanation, eligible: int) -> str:
    """Why the winner won, in the objective's terms, and the runner-up."""
    tier = TIERS.get(ex.tier, str(ex.tier)) if ex.tier is not None else "?"
    held = grant_text(decision.grant, decision.accelerator)
    if ex.objective == "carbon":
        how = "lowest-carbon grant"
    elif ex.objective == "balanced":
        how = f"best balanced score (carbon weight {ex.carbon_weight:g}; cost and carbon each divided by the highest in the tier)"
    elif ex.objective == "earliest":
        how = "earliest start"
    elif ex.objective in WORK_OBJECTIVES:
        how = {"work-cost": "cheapest job", "work-carbon": "lowest-carbon job", "work-time": "earliest completion"}[ex.objective]
    else:
        how = "cheapest grant"
    top = ex.standings[0] if ex.standings else None
    figures = _figures(top, ex.objective, ex) if top is not None else f"${decision.grant_cost_per_hour:.2f}/h"
    if ex.objective == "cost":
        figures += f" (${decision.cost_per_hour:.2f} per device-hour)"
    # "2 nvidia devices now at $5.00/h": the start comes first under earliest.
    spaced = ex.objective in ("earliest", "work-time")
    why = f"{how} of {eligible} eligible in tier {tier}: {held} {figures}" if spaced else f"{how} of {eligible} eligible in tier {tier}: {held} at {figures}"
    others = [name for name in decision.tied if name != decision.pool]
    if others:
        # Pools that tie: the node packer chose among their nodes together.
        named = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        why += f"; tied with {named}: the node packer's best node among them is here"
    elif len(ex.standings) > 1:
        runner = ex.standings[1]
        joiner = " " if spaced else " at "
        why += f"; next: {runner.pool}{joiner}{_figures(runner, ex.objective, ex)}"
        if ex.objective in WORK_OBJECTIVES and top is not None:
            why += _against(top, runner)
    return why


def _against(top: Standing, other: Standing) -> str:
    """The winner against the runner-up by work: ``; 3.1x the work per hour for 1.6x the price``."""
    if top.job is None or other.job is None or other.job.rate <= 0 or other.cost_per_hour <= 0:
        return ""
    work = top.job.rate / other.job.rate
    price = top.cost_per_hour / other.cost_per_hour
    return f"; {top.pool} does {_times(work)} the work per hour of {other.pool} for {_times(price)} the price"


def _times(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio >= 0.095 else f"{ratio:.2g}x"


def print_pools(console: Console, views: Sequence[PoolView]) -> None:
    """The pools, cheapest first; each carbon figure says how it was found (``carbon from``), and
    a legend explains the methods shown."""
    rows: list[list[Cell]] = []
    for v in views:
        p, s = v.pool, v.state
        rows.append([
            p.name + state_suffix(s), p.target, p.accelerator, p.model or "-", p.region, f"{number(s.free)}/{p.count}", v.placeable or "-",
            f"{v.cost_per_hour:.2f}" + ("*" if v.cost_default else ""),
            number(v.carbon_per_hour), v.carbon_method, ",".join(p.capabilities) or "-",
        ])  # fmt: skip
    columns = ("name", "target", "accelerator", "model", "region", "free/total", "placeable", "$/h", "gCO2e/h", "carbon from", "capabilities")
    emit_table(console, "Pools (cheapest first)", columns, rows, right=("free/total", "$/h", "gCO2e/h"))
    if any(v.cost_default for v in views):
        console.print(Text("* the accelerator's default price (accounting.yaml)", style="dim"))
    print_carbon_legend(console, {v.carbon_method: v.carbon_method_text for v in views})
    if any(v.pool.drained for v in views):
        console.print(Text("drained: takes no new grants, keeps its live ones (exa hardware undrain NAME); "
                           "removal pending: goes when its last live grant ends", style="dim"))  # fmt: skip


def state_suffix(state: PoolState) -> str:
    """`` (drained)`` or `` (drained, removal pending)`` after a pool's name; else nothing."""
    if state.removing is not None:
        return " (drained, removal pending)"
    return " (drained)" if state.pool.drained else ""


PACKING = {"whole": "whole devices", "mig": "MIG", "amd-compute-partition": "AMD compute partitions"}


def print_pool(console: Console, detail: PoolDetail) -> None:
    view = detail.view
    p, state = view.pool, view.state
    console.print(f"pool {p.name} · {p.count} × {p.accelerator}{' ' + p.model if p.model else ''} on {p.target} in {p.region}"
                  + (f" · cluster {p.cluster}" if p.cluster else ""))  # fmt: skip
    if state.removing is not None:
        console.print(Text(f"  drained, removal pending since {state.removing}: it goes when its last live grant ends", style="yellow"))
    elif p.drained:
        console.print(Text("  drained: takes no new grants, keeps its live ones (exa hardware undrain to take new ones)", style="yellow"))
    if p.sharing is not None:
        packing = f"shared devices ({p.sharing}, {p.shares_per_device} shares each)"
    else:
        packing = f"fixed {p.fixed_profile} slices" if view.packing == "fixed" else PACKING[view.packing]
    console.print(f"  packing: {packing} · free {number(state.free)}/{p.count}"
                  + (f" · placeable {view.placeable}" if view.placeable is not None else "")
                  + f" · empty devices {state.capacity.whole}")  # fmt: skip
    if detail.nodes:
        node_rows: list[list[Cell]] = []
        for n in detail.nodes:
            node_state: Cell = n.state if n.state == "up" else Text(n.state, style="yellow")
            cpu = "-" if n.cpu_milli is None else f"{number((n.cpu_milli - (n.cpu_free or 0)) / 1000)}/{number(n.cpu_milli / 1000)}"
            used = n.memory_mib - (n.memory_free or 0) if n.memory_mib is not None else 0
            memory = "-" if n.memory_mib is None else f"{memory_text(used) if used else 0}/{memory_text(n.memory_mib)}"
            place = " ".join(f"{k} {v}" for k, v in (("block", n.block), ("switch", n.switch)) if v) or "-"
            node_rows.append([n.name, node_state, f"{n.free}/{n.devices}", n.layout, cpu, memory, place])
        columns = ("node", "state", "free/devices", "held", "CPUs used/all", "memory used/all", "topology")
        emit_table(console, "Nodes", columns, node_rows, right=("free/devices",))
        return
    rows = [[str(i), text] for i, text in enumerate(detail.devices)]
    emit_table(console, "Devices", ("device" if view.packing != "fixed" else "slice", "layout"), rows)


def print_decisions(console: Console, summaries: Sequence[DecisionSummary]) -> None:
    rows: list[list[Cell]] = []
    for s in summaries:
        if s.outcome == "placed":
            flags = [f for f, on in (
                ("fallback", s.fallback), ("whole-device", s.fraction_honored is False), ("larger-partition", s.larger_partition),
                ("admitted", s.queued_id is not None), ("lease-ended", s.lease_ended),
                ("preempted", s.released_at is not None and s.preempting_for is not None),
                ("released", s.released_at is not None and not s.lease_ended and s.preempting_for is None),
            ) if on]  # fmt: skip
            rows.append([s.id[:12], s.created_at[:19], s.workload, Text("placed", style="green"), s.pool or "-", s.accelerator or "-", s.region or "-", ",".join(flags)])
        else:
            style = {"blocked": "yellow", "queued": "yellow"}.get(s.outcome, "red")
            rows.append([s.id[:12], s.created_at[:19], s.workload, Text(s.outcome, style=style), "-", "-", "-", ""])
    emit_table(console, "Recent placement decisions", ("id", "time", "workload", "outcome", "pool", "device", "region", "flags"), rows)
