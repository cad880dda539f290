"""What a policy change does to decisions: the same decisions made under two policies, compared.

A *case* is one decision to make: a workload, the pools with their price and carbon per
device-hour, and the capacity each had. Cases come from the recorded decisions (their workload,
the fleet and capacity they were made on, from the compact record: ``store.decision_inputs``,
``records.judged_from``) and from a workload suite over a fleet file (the example workloads over
``examples/fleet.yaml``, every pool empty; prices and carbon from the working tree's tables, so
that both policies judge the same facts).

Each case goes to each policy's complete reference rule (``data.examlops.hardware.placement
.decision``) on that policy's own OPA, with the input built for that policy's signature (its
``about``: the shape keys depend on the fields its checks read). ``compare`` says what changed,
by kind:

    outcome    placed, rejected or blocked changed (placed <-> rejected, ...)
    pool       placed both times, on another pool
    fallback   placed both times, and whether it is a fallback (or the note saying so) changed
    burst      the burst verdict changed (attempted, allowed, blocked, unavailable, or its pool)
    reasons    a pool's reason codes (or the decision's reason) changed

``run_impact`` builds both bundles, starts both OPAs (``opa.scratch``: private, on Unix sockets in
a temporary folder, stopped afterwards whatever happens), evaluates every case and returns an
``Impact``; ``to_json``, ``to_markdown`` and ``to_lines`` (also its methods) render it. Everything
but ``run_impact`` and the case loaders is pure. ``Hardware.policy_impact`` is the façade's call
(through ``app.policy_review``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from examlops_policy.quantities import shown
from examlops_policy._core.engine import reference_input
from examlops_policy.errors import PolicyError, SpecError
from examlops_policy.model import Capacity, JSONObject, JSONValue, Pool, Workload
from examlops_policy._core.selection import Fleet, FleetEntry, carbon_per_hour, effective_cost
from examlops_policy._core.codec import content_key
from examlops_policy._core.verdicts import About
from examlops_policy._core.waiting import Starts

if TYPE_CHECKING:
    from examlops_policy._core.records import DecisionInputs
    from examlops_policy.tables import Tables
    from examlops_policy.app.ports import Recorded
    from examlops_policy.views import DecisionSummary

KINDS: Final = ("outcome", "pool", "fallback", "burst", "reasons")
KIND_TITLES: Final = {
    "outcome": "outcome changed (placed ↔ rejected / blocked)",
    "pool": "placed on another pool",
    "fallback": "fallback changed",
    "burst": "burst verdict changed",
    "reasons": "reasons changed",
}
MAX_RECORDED: Final = 10_000


class ReferencePolicy(Protocol):
    """What a policy side must answer: its ``about`` and its reference ``decision``."""

    def about(self) -> About: ...

    def decision(self, policy_input: JSONObject) -> JSONObject: ...


# -- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PricedPool:
    """A pool as a decision saw it: with its price (USD) and carbon (gCO2e) per device-hour."""

    pool: Pool
    price: float
    carbon: float


@dataclass(frozen=True)
class Case:
    """One decision to make under both policies (``source``: "recorded" or "workloads")."""

    label: str
    source: str
    workload: Workload
    pools: tuple[PricedPool, ...]
    capacities: tuple[Capacity, ...]
    starts: Starts | None = None  # a recorded decision's time and start estimates (None: none)
    quota_use: JSONObject | None = None  # what the projects held for its quotas, as recorded (None: nothing)

    def policy_input(self, about: About) -> JSONObject:
        """The reference rule's input for a policy whose signature ``about`` gives."""
        entries = tuple(FleetEntry(p.pool, content_key(about.signature.shape_of(p.pool)), p.price, p.carbon) for p in self.pools)
        return reference_input(self.workload, Fleet("impact", entries), self.capacities, about, self.starts, quota_use=self.quota_use)


def recorded_cases(recorded: Recorded, *, last: int | None = None, since: str | None = None) -> tuple[list[Case], list[str]]:
    """The recorded decisions, newest first: the ``last`` N, or every one made at or after
    ``since`` (ISO 8601 UTC; at most ``MAX_RECORDED``). Returns the cases and, for decisions that
    cannot be replayed (recorded before decisions kept their inputs), why they were skipped."""
    from examlops_policy._core.records import judged_from

    limit = last if last is not None else (MAX_RECORDED if since is not None else 100)
    rows: list[DecisionSummary] = []
    cursor: str | None = None
    while len(rows) < limit:
        page = recorded.decision_page(limit=min(500, limit - len(rows)), since=since, cursor=cursor)
        rows.extend(page.decisions)
        if page.cursor is None:
            break
        cursor = page.cursor
    cases, skipped = [], []
    for row in rows:
        label = f"decision {row.id[:12]}"
        try:
            record = recorded.decision(row.id)
            fleet_rev = record.decision.provenance.fleet_revision
            if fleet_rev is None:
                raise SpecError("recorded before decisions kept their fleet")
            inputs = recorded.decision_inputs(row.id)
        except SpecError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        judged = judged_from(inputs.fleet, inputs.verdicts, fleet_rev)
        pools = tuple(PricedPool(e.pool, e.price, e.carbon) for e in judged.fleet.entries)
        cases.append(Case(
            f"{label} ({record.decision.workload.name})", "recorded", record.decision.workload, pools, inputs.capacities, inputs.starts,
            record.decision.provenance.quota_use,
        ))  # fmt: skip
    return cases, skipped


def suite_cases(workloads: Path, fleet: Path, tables: Tables) -> list[Case]:
    """Every workload file in ``workloads`` (a file, or a folder of ``*.yaml``) over the pools of
    ``fleet``, all empty. Raises SpecError for a file that is not a valid workload or pools file."""
    from examlops_policy._core.packing import layout_of, summarize
    from examlops_policy.specs import pools_from_file, workload_from_file

    files = sorted(workloads.glob("*.yaml")) + sorted(workloads.glob("*.yml")) if workloads.is_dir() else [workloads]
    if not files or not all(f.is_file() for f in files):
        raise SpecError(f"expected a workload YAML file or a folder of them: {workloads}", field="--workloads")
    pools = pools_from_file(fleet, tables)
    priced = tuple(PricedPool(p, effective_cost(p, tables), carbon_per_hour(p, tables)) for p in sorted(pools, key=lambda p: p.name))
    capacities = tuple(summarize(layout_of(p.pool, tables), []) for p in priced)
    return [Case(f"workload {f.stem}", "workloads", workload_from_file(f), priced, capacities) for f in files]


# -- a decision, as compared ------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What is compared of a reference decision."""

    outcome: str
    pool: str | None
    fallback: bool
    note: str | None
    burst: tuple[bool, str | None, str | None]  # attempted, verdict, pool
    reason: tuple[str, str] | None  # code, message
    pools: Mapping[str, tuple[tuple[str, str], ...]]  # pool -> (code, message) of each reason
    eligible: tuple[str, ...]

    def codes(self, pool: str) -> tuple[str, ...]:
        return tuple(code for code, _ in self.pools.get(pool, ()))


def _obj(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise PolicyError(f"the reference decision's {what} is not an object: {str(value)[:120]}")
    return value


def _opt_text(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise PolicyError(f"the reference decision's {what} is not a string: {shown(value)}")
    return value


def summarize_decision(raw: Mapping[str, object]) -> Summary:
    """The comparable parts of a reference decision; PolicyError when it is malformed."""
    outcome = raw.get("outcome")
    if outcome not in ("placed", "rejected", "blocked"):
        raise PolicyError(f"the reference decision has no outcome (got {shown(outcome)})")
    verdicts = _obj(raw.get("verdicts"), "verdicts")
    pools: dict[str, tuple[tuple[str, str], ...]] = {}
    for name, v in sorted(verdicts.items()):
        reasons = _obj(v, f"verdict of {name}").get("reasons")
        if not isinstance(reasons, list):
            raise PolicyError(f"the reference decision's verdict of {name} has no reasons")
        pools[name] = tuple((str(_obj(r, "reason").get("code")), str(_obj(r, "reason").get("message"))) for r in reasons)
    burst = _obj(raw.get("burst"), "burst")
    reason = raw.get("reason")
    pool = _opt_text(raw.get("pool"), "pool")
    chosen = _obj(verdicts.get(pool), f"verdict of {pool}") if pool is not None else {}
    eligible = raw.get("eligible")
    return Summary(
        outcome=str(outcome),
        pool=pool,
        fallback=chosen.get("fallback") is True,
        note=_opt_text(raw.get("note"), "note"),
        burst=(burst.get("attempted") is True, _opt_text(burst.get("verdict"), "burst verdict"), _opt_text(burst.get("pool"), "burst pool")),
        reason=None if reason is None else (str(_obj(reason, "reason").get("code")), str(_obj(reason, "reason").get("message"))),
        pools=pools,
        eligible=tuple(str(e) for e in eligible) if isinstance(eligible, list) else (),
    )


def _burst_text(b: tuple[bool, str | None, str | None]) -> str:
    if not b[0]:
        return "not attempted"
    return f"{b[1]}" + (f" ({b[2]})" if b[2] else "")


def explain(s: Summary, pools: Sequence[str] | None = None) -> list[str]:
    """A decision in a few lines: its outcome, its note, its burst, and the reasons of ``pools``
    (every pool when None; the others are counted)."""
    if s.outcome == "placed":
        head = f"placed on {s.pool}" + (" (fallback)" if s.fallback else "") + (f" · {s.note}" if s.note else "")
    else:
        head = f"{s.outcome}" + (f": {s.reason[0]}: {s.reason[1]}" if s.reason else "")
    lines = [head, f"burst: {_burst_text(s.burst)}"]
    shown = list(s.pools) if pools is None else [p for p in s.pools if p in pools]
    for name in shown:
        reasons = s.pools[name]
        if name == s.pool:
            lines.append(f"  {name}: chosen")
        elif not reasons:
            lines.append(f"  {name}: admissible" + (", eligible" if name in s.eligible else ""))
        else:
            lines.append(f"  {name}: " + "; ".join(f"{c}: {m}" for c, m in reasons))
    if len(shown) < len(s.pools):
        lines.append(f"  ({len(s.pools) - len(shown)} other pool(s) with the same reasons before and after)")
    return lines


def explain_pair(base: Summary, head: Summary) -> tuple[list[str], list[str]]:
    """Both explanations of a changed case, showing the pools that matter: the chosen ones and
    those whose reasons changed."""
    pools = {p for p in set(base.pools) | set(head.pools) if base.codes(p) != head.codes(p)}
    pools |= {p for p in (base.pool, head.pool, base.burst[2], head.burst[2]) if p is not None}
    return explain(base, sorted(pools)), explain(head, sorted(pools))


# -- comparing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One kind of change (one of ``KINDS``) and what it was."""

    kind: str
    detail: str


def compare(base: Summary, head: Summary) -> tuple[Change, ...]:
    """What changed from ``base`` to ``head``, at most one ``Change`` per kind, in ``KINDS`` order."""
    out = []
    if base.outcome != head.outcome:
        out.append(Change("outcome", f"{base.outcome} → {head.outcome}"))
    if base.outcome == head.outcome == "placed":
        if base.pool != head.pool:
            out.append(Change("pool", f"{base.pool} → {head.pool}"))
        if base.fallback != head.fallback or base.note != head.note:
            parts = [f"fallback {_yes(base.fallback)} → {_yes(head.fallback)}"] if base.fallback != head.fallback else []
            parts += [f"note {_note(base.note)} → {_note(head.note)}"] if base.note != head.note else []
            out.append(Change("fallback", " · ".join(parts)))
    if base.burst != head.burst:
        out.append(Change("burst", f"{_burst_text(base.burst)} → {_burst_text(head.burst)}"))
    moved = []
    if base.reason != head.reason and base.outcome != "placed" and head.outcome != "placed":
        moved.append(f"decision: {base.reason[0] if base.reason else 'no reason'} → {head.reason[0] if head.reason else 'no reason'}")
    for name in sorted(set(base.pools) | set(head.pools)):
        if base.codes(name) != head.codes(name):
            moved.append(f"{name}: {', '.join(base.codes(name)) or 'none'} → {', '.join(head.codes(name)) or 'none'}")
    if moved:
        out.append(Change("reasons", "; ".join(moved)))
    return tuple(out)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _note(note: str | None) -> str:
    return "none" if note is None else f'"{note}"'


@dataclass(frozen=True)
class CaseResult:
    """A case, its decision under each policy, and what changed."""

    label: str
    source: str
    base: Summary
    head: Summary
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Side:
    """One policy compared: how it is named and the bundle revision its OPA served."""

    label: str
    revision: str


@dataclass(frozen=True)
class Impact:
    """Every case evaluated under both policies; ``skipped`` says which recorded decisions could not be."""

    base: Side
    head: Side
    results: tuple[CaseResult, ...]
    skipped: tuple[str, ...] = ()
    sources: Mapping[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.changes)

    @property
    def counts(self) -> dict[str, int]:
        """Per kind, how many cases changed that way (every kind, 0 included)."""
        return {k: sum(1 for r in self.results if any(c.kind == k for c in r.changes)) for k in KINDS}

    def example(self, kind: str) -> CaseResult | None:
        """The case that shows this kind of change: one that already shows an earlier kind (in
        ``KINDS`` order) when one changed this way too, else the first (in evaluation order)."""
        return dict(self._examples()).get(kind)

    def _examples(self) -> list[tuple[str, CaseResult]]:
        chosen: list[tuple[str, CaseResult]] = []
        for kind in KINDS:
            changed = [r for r in self.results if any(c.kind == kind for c in r.changes)]
            shown = [r for _, r in chosen if any(r is c for c in changed)]
            if changed:
                chosen.append((kind, shown[0] if shown else changed[0]))
        return chosen

    def examples(self) -> list[tuple[tuple[str, ...], CaseResult]]:
        """Each example case once, with the kinds of change it shows (``KINDS`` order): a case that
        changed in outcome, burst verdict and reasons is shown once for all three."""
        grouped: dict[int, tuple[list[str], CaseResult]] = {}
        for kind, case in self._examples():
            grouped.setdefault(id(case), ([], case))[0].append(kind)
        return [(tuple(kinds), case) for kinds, case in grouped.values()]

    def count_rows(self) -> list[tuple[str, int]]:
        """(what changed, in words; how many cases) for every kind, in ``KINDS`` order."""
        return [(KIND_TITLES[k], n) for k, n in self.counts.items()]

    def change_rows(self) -> list[tuple[str, str]]:
        """(case, what changed) for every changed case."""
        return [(r.label, "; ".join(f"{c.kind}: {c.detail}" for c in r.changes)) for r in self.changed]

    def to_json(self) -> JSONObject:
        """See ``to_json``."""
        return to_json(self)

    def to_markdown(self) -> str:
        """See ``to_markdown``."""
        return to_markdown(self)

    def lines(self) -> list[str]:
        """See ``to_lines``."""
        return to_lines(self)


def evaluate(cases: Sequence[Case], base: ReferencePolicy, head: ReferencePolicy, base_side: Side, head_side: Side) -> Impact:
    """Every case under both policies (each asked with the input of its own signature)."""
    base_about, head_about = base.about(), head.about()
    results = []
    for case in cases:
        b = summarize_decision(base.decision(case.policy_input(base_about)))
        h = summarize_decision(head.decision(case.policy_input(head_about)))
        results.append(CaseResult(case.label, case.source, b, h, compare(b, h)))
    sources: dict[str, int] = {}
    for case in cases:
        sources[case.source] = sources.get(case.source, 0) + 1
    return Impact(base_side, head_side, tuple(results), sources=sources)


def run_impact(
    against: str,
    cases: Sequence[Case],
    *,
    policy_root: Path,
    skipped: Sequence[str] = (),
    opa: Path | None = None,
) -> Impact:
    """``cases`` under the policy ``against`` names (a git revision or a directory, see
    ``opa.scratch.policy_source``) and under the policy in ``policy_root``, each on its own
    scratch OPA, stopped before this returns. Raises SpecError for an ``against`` that names no
    policy, PolicyError when a policy does not build or answers malformed decisions,
    PolicyUnavailable when an OPA does not start."""
    from examlops_policy.opa.scratch import policy_source, scratch_opa

    with tempfile.TemporaryDirectory(prefix="exa-impact-") as scratch:
        folder = Path(scratch)
        source = policy_source(against, policy_root, folder / "against")
        with scratch_opa(source.root, folder / "base", opa=opa) as base, scratch_opa(policy_root, folder / "head", opa=opa) as head:
            impact = evaluate(cases, base.policy, head.policy, Side(source.label, base.revision), Side(f"working tree ({policy_root})", head.revision))
    return Impact(impact.base, impact.head, impact.results, tuple(skipped), impact.sources)


# -- rendering --------------------------------------------------------------------------------


def _summary_json(s: Summary) -> JSONObject:
    return {
        "outcome": s.outcome,
        "pool": s.pool,
        "fallback": s.fallback,
        "note": s.note,
        "burst": {"attempted": s.burst[0], "verdict": s.burst[1], "pool": s.burst[2]},
        "reason": None if s.reason is None else {"code": s.reason[0], "message": s.reason[1]},
        "codes": {name: list(s.codes(name)) for name in s.pools},
    }


def to_json(impact: Impact) -> JSONObject:
    """The impact as JSON: both sides, the counts per kind, every changed case and one example
    per kind with both explanations."""
    examples: dict[str, JSONValue] = {}
    for kind in KINDS:
        ex = impact.example(kind)
        if ex is not None:
            before, after = explain_pair(ex.base, ex.head)
            examples[kind] = {"case": ex.label, "before": list[JSONValue](before), "after": list[JSONValue](after)}
    changed: list[JSONValue] = [
        {
            "case": r.label,
            "source": r.source,
            "changes": [{"kind": c.kind, "detail": c.detail} for c in r.changes],
            "before": _summary_json(r.base),
            "after": _summary_json(r.head),
        }
        for r in impact.changed
    ]
    return {
        "base": {"label": impact.base.label, "revision": impact.base.revision},
        "head": {"label": impact.head.label, "revision": impact.head.revision},
        "evaluated": len(impact.results),
        "sources": dict(impact.sources),
        "changed": len(impact.changed),
        "counts": dict(impact.counts),
        "cases": changed,
        "examples": examples,
        "skipped": list(impact.skipped),
    }


def _headline(impact: Impact) -> str:
    parts = [f"{n} {'recorded decision' if s == 'recorded' else 'example workload'}{'' if n == 1 else 's'}" for s, n in sorted(impact.sources.items())]
    evaluated = " and ".join(parts) or "no decisions"
    return f"{evaluated} evaluated; {len(impact.changed)} changed"


def to_lines(impact: Impact) -> list[str]:
    """The impact for people, as plain lines (the CLI adds a table)."""
    lines = [
        f"before: {impact.base.label} · {impact.base.revision}",
        f"after:  {impact.head.label} · {impact.head.revision}",
        _headline(impact),
    ]
    for kinds, ex in impact.examples():
        before, after = explain_pair(ex.base, ex.head)
        lines += ["", f"{'; '.join(KIND_TITLES[k] for k in kinds)} — e.g. {ex.label}:", "  before:"]
        lines += [f"    {line}" for line in before]
        lines += ["  after:"]
        lines += [f"    {line}" for line in after]
    lines += [f"skipped {s}" for s in impact.skipped]
    return lines


def _md(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def to_markdown(impact: Impact) -> str:
    """The impact as a pull-request comment: the counts, the affected cases, one example per kind."""
    out = [
        "### Policy impact",
        "",
        f"Before: `{impact.base.label}` · `{impact.base.revision}`  ",
        f"After: `{impact.head.label}` · `{impact.head.revision}`",
        "",
        f"**{_headline(impact)}.**",
        "",
        "| change | decisions |",
        "|---|---|",
    ]
    out += [f"| {title} | {n} |" for title, n in impact.count_rows()]
    if impact.changed:
        out += ["", "<details><summary>Affected decisions</summary>", "", "| decision | what changed |", "|---|---|"]
        out += [f"| {_md(label)} | {_md(what)} |" for label, what in impact.change_rows()]
        out += ["", "</details>"]
    for kinds, ex in impact.examples():
        before, after = explain_pair(ex.base, ex.head)
        out += ["", f"#### {'; '.join(KIND_TITLES[k] for k in kinds)}: {ex.label}", "", "Before:", "```", *before, "```", "After:", "```", *after, "```"]
    if impact.skipped:
        out += ["", f"Skipped {len(impact.skipped)} recorded decision(s) that cannot be replayed."]
    return "\n".join(out) + "\n"
