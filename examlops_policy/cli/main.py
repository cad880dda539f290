"""``exa``: the ExaMLOps command line for hardware placement, audit and finops.

Exit codes: one table in ``examlops_policy.cli.exits`` (the README shows it). With ``--json`` an
error is a JSON object on stderr: ``{"error": ..., "code": ..., "message": ...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rich.console import Console

from examlops_policy import audit
from examlops_policy.accounting import device_accounting
from examlops_policy.cli import executors, exits, render
from examlops_policy.errors import ExaError, SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import ACCELERATORS, ENGINES, POOL_TARGETS, RESIDENCIES, WORKLOAD_TARGETS, Decision, Placement, Workload

if TYPE_CHECKING:
    from examlops_policy.opa import OpaStatus

Handler = Callable[[argparse.Namespace, Hardware, Console], int]


def _console() -> Console:
    # Piped output keeps whole table columns instead of rich's 80-column default.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(highlight=False, soft_wrap=True, emoji=False, width=width)


def _hours(text: str) -> float:
    """argparse type: a finite number of hours, at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"hours must be a finite number of at least 0 (got {text!r})")
    return value


def _limit(text: str) -> int:
    """argparse type: a whole number of rows, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _capabilities(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _outcome_code(decision: Decision) -> int:
    if isinstance(decision, Placement):
        return exits.OK
    return exits.BURST_BLOCKED if decision.burst_blocked else exits.REJECTED


# -- hardware ---------------------------------------------------------------------------------


def cmd_add_pool(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    values: dict[str, object] = {
        "name": args.name,
        "target": args.target,
        "accelerator": args.accelerator,
        "count": args.count,
        "region": args.region,
        "supports_fractions": args.supports_fractions,
        "capabilities": _capabilities(args.capabilities),
        "spot": args.spot,
    }
    for option in ("cost_per_hour", "carbon_factor", "model", "power_w", "pue", "partition", "gres_type", "fixed_profile"):
        value = getattr(args, option)
        if value is not None:
            values[option] = value
    from examlops_policy.specs import pool_from_mapping

    pool = pool_from_mapping(values, source="exa hardware add-pool", tables=hw.tables)
    change = hw.add_pool(pool)
    if args.json:
        render.dump_json(console, {"pool": pool.name, "action": change.action})
    else:
        console.print(f"✓ pool {pool.name} added · {pool.count} × {pool.accelerator} on {pool.target} in {pool.region}")
    return exits.OK


def cmd_apply(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.specs import pools_from_file

    pools = pools_from_file(Path(args.file), hw.tables)
    changes = hw.apply(pools)
    if args.json:
        render.dump_json(console, [{"pool": c.name, "action": c.action, "changed": list(c.changed_fields)} for c in changes])
        return exits.OK
    for c in changes:
        detail = f" ({', '.join(c.changed_fields)})" if c.changed_fields else ""
        mark = {"added": "+", "updated": "~", "unchanged": "="}[c.action]
        console.print(f"{mark} {c.name} {c.action}{detail}")
    counts = {a: sum(1 for c in changes if c.action == a) for a in ("added", "updated", "unchanged")}
    console.print(f"{counts['added']} added, {counts['updated']} updated, {counts['unchanged']} unchanged")
    return exits.OK


def cmd_pools(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.packing import describe, layout_of
    from examlops_policy.placement import carbon_per_hour, effective_cost

    states = hw.pools()
    layouts = {s.pool.name: layout_of(s.pool, hw.tables) for s in states}
    if args.json:
        render.dump_json(
            console,
            [
                {**s.pool.__dict__, "capabilities": list(s.pool.capabilities), "free": s.free,
                 "capacity": {"empty_devices": s.capacity.whole, "placeable": dict(s.capacity.slices)},
                 "placeable": describe(s.capacity, layouts[s.pool.name]) if layouts[s.pool.name].kind != "whole" else None,
                 "effective_cost_per_hour": effective_cost(s.pool, hw.tables), "carbon_per_hour": carbon_per_hour(s.pool, hw.tables)}
                for s in states
            ],
        )  # fmt: skip
    elif not states:
        console.print("No pools registered. Add one with 'exa hardware add-pool' or 'exa hardware apply -f pools.yaml'.")
    else:
        render.print_pools(console, states, hw.tables, layouts)
    return exits.OK


def cmd_pool(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.packing import describe, device_layouts, layout_of

    state, holdings = hw.pool(args.name)
    layout = layout_of(state.pool, hw.tables)
    if args.json:
        render.dump_json(console, {
            "pool": {**state.pool.__dict__, "capabilities": list(state.pool.capabilities)},
            "free": state.free, "empty_devices": state.capacity.whole, "placeable": dict(state.capacity.slices),
            "placeable_text": describe(state.capacity, layout) if layout.kind != "whole" else None, "packing": layout.kind,
            "devices": [{"device": i, "layout": text} for i, text in enumerate(device_layouts(layout, holdings))],
            "holdings": [h.__dict__ for h in holdings],
        })  # fmt: skip
    else:
        render.print_pool(console, state, holdings, layout, hw.tables)
    return exits.OK


# Options a workload file gives; given on the command line beside -f they would conflict.
_WORKLOAD_OPTIONS = ("accelerator", "engine", "target", "fraction", "count", "capabilities", "residency", "data_region")
_WORKLOAD_FLAGS = ("allow_burst", "allow_cpu_fallback")


def _workload(args: argparse.Namespace) -> Workload:
    from examlops_policy.specs import workload_from_file, workload_from_mapping

    if args.file:
        given = [f"--{o.replace('_', '-')}" for o in _WORKLOAD_OPTIONS if getattr(args, o, None) is not None]
        given += [f"--{o.replace('_', '-')}" for o in _WORKLOAD_FLAGS if getattr(args, o, False)]
        if args.name:
            given.insert(0, f"NAME ({args.name})")
        if given:
            raise SpecError(
                f"-f {args.file} says everything about the workload; {', '.join(given)} would conflict with it "
                "(give either -f FILE, or NAME with options)",
                source="command line",
            )
        return workload_from_file(Path(args.file))
    if not args.name or not args.accelerator:
        raise SpecError("give a NAME and --accelerator, or -f workload.yaml", source="command line")
    return workload_from_mapping(
        {
            "name": args.name,
            "accelerator": args.accelerator,
            "engine": args.engine or "generic",
            "target": getattr(args, "target", None),
            "fraction": 1.0 if args.fraction is None else args.fraction,
            "count": 1 if args.count is None else args.count,
            "capabilities": _capabilities(args.capabilities or ""),
            "residency": args.residency or "open",
            "allow_burst": args.allow_burst,
            "data_region": args.data_region,
            "allow_cpu_fallback": args.allow_cpu_fallback,
        },
        source="command line",
    )


def _show(args: argparse.Namespace, console: Console, record_id: str | None, decision: Decision, record: object = None) -> int:
    from examlops_policy.store import DecisionRecord

    if args.json:
        render.dump_json(console, render.decision_json(record if isinstance(record, DecisionRecord) else None, decision))
    else:
        render.print_decision(console, decision)
        if getattr(args, "explain", False):
            render.print_explanation(console, decision)
            if record_id:
                console.print(f"decision {record_id}")
    return _outcome_code(decision)


def _lease(text: str | None) -> timedelta | None:
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not match:
        raise SpecError(f"a lease is a number and a unit, e.g. 30m, 2h or 1d (got {text!r})", source="command line", field="--lease")
    value, unit = float(match.group(1)), match.group(2)
    unit_name = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]
    return timedelta(**{unit_name: value})


def cmd_place(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    workload = _workload(args)
    if args.dry_run:
        return _show(args, console, None, hw.what_if(workload))
    record = hw.place(workload, request_id=args.request_id, lease=_lease(args.lease))
    return _show(args, console, record.id, record.decision, record)


def cmd_burst(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    if not args.allow_burst:
        raise SpecError("bursting to cloud is opt-in: add --allow-burst", source="exa hardware burst", field="--allow-burst")
    workload = _workload(args)
    if args.dry_run:
        import dataclasses

        return _show(args, console, None, hw.what_if(dataclasses.replace(workload, target="cloud", allow_burst=True)))
    record = hw.burst(workload, request_id=args.request_id, lease=_lease(args.lease))
    return _show(args, console, record.id, record.decision, record)


def cmd_portable(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    reason = hw.portable(args.engine, args.accelerator)
    if args.json:
        render.dump_json(console, {"engine": args.engine, "accelerator": args.accelerator, "portable": reason is None,
                                   "reason": None if reason is None else {"code": reason.code, "message": reason.message}})  # fmt: skip
    elif reason is None:
        backend = cast(dict[str, str], hw.tables.accelerators[args.accelerator])["backend"]
        console.print(f"✓ Portable: engine '{args.engine}' can run on {args.accelerator} (backend {backend})", style="green")
    else:
        console.print(f"✗ Rejected: {reason.message}", style="red")
    return exits.OK if reason is None else exits.REJECTED


def cmd_decisions(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    before = None
    if args.cursor:
        created, _, ident = args.cursor.partition("/")
        if not created or not ident:
            raise SpecError("a cursor is CREATED_AT/ID, as the last page printed it", source="command line", field="--cursor")
        before = (created, ident)
    rows = hw.decision_summaries(limit=args.limit, since=args.since, until=args.until, before=before)
    if args.json:
        render.stream_json(console, (render.summary_json(r) for r in rows))
    elif not rows:
        console.print("No decisions yet.")
    else:
        render.print_decisions(console, rows)
        if len(rows) == args.limit:
            console.print(f"more: --cursor {rows[-1].created_at}/{rows[-1].id}")
    return exits.OK


def cmd_explain(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    record = hw.decision(args.id)
    if args.replay:
        replay = hw.replay(record.id)
        if args.json:
            render.dump_json(console, replay.__dict__)
        else:
            mark = "✓" if replay.same else "✗"
            console.print(f"{mark} replay of {record.id[:12]} under policy {replay.policy_revision[:19]}: {replay.summary}")
            for line in replay.differences:
                console.print(f"  {line}")
        return exits.OK if replay.same else exits.REJECTED
    if args.json:
        render.dump_json(console, render.decision_json(record, record.decision))
        return exits.OK
    console.print(f"decision {record.id} · {record.created_at}" + (f" · released {record.released_at}" if record.released_at else ""))
    render.print_decision(console, record.decision)
    render.print_explanation(console, record.decision)
    return exits.OK


def cmd_release(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    result = hw.release(args.id)
    record = result.record
    if args.json:
        render.dump_json(console, {"id": record.id, "decision_id": record.id, "released_at": record.released_at, "already_released": result.already})
        return exits.OK
    d = record.decision
    assert isinstance(d, Placement)
    if result.already:
        console.print(f"decision {record.id[:12]} was already released at {record.released_at}; nothing changed")
    else:
        console.print(f"✓ released {render.grant_text(d.grant, d.accelerator)} on {d.pool} (decision {record.id[:12]})")
    return exits.OK


def cmd_renew(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    lease = _lease(args.lease)
    assert lease is not None
    record = hw.renew(args.id, lease)
    if args.json:
        render.dump_json(console, {"id": record.id, "decision_id": record.id, "lease_expires_at": record.lease_expires_at})
    else:
        console.print(f"✓ decision {record.id[:12]} leased until {record.lease_expires_at}")
    return exits.OK


def cmd_accounting(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    record = hw.decision(args.id)
    if not isinstance(record.decision, Placement):
        raise SpecError(f"decision {record.id[:12]} placed nothing, so it has no cost or carbon", field="ID")
    render.dump_json(console, device_accounting(record.decision, args.hours))
    return exits.OK


def cmd_burst_events(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    events = hw.burst_events(args.limit)
    if args.json:
        render.dump_json(console, [e.__dict__ for e in events])
        return exits.OK
    if not events:
        console.print("No burst attempts yet.")
    for e in events:
        mark = {"allowed": "✓", "blocked": "⚠", "unavailable": "✗"}[e.verdict]
        console.print(f"{mark} {e.created_at[:19]} {e.workload} · {e.residency} → {e.pool or '-'} ({e.region or '-'}): {e.verdict}"
                      + (f" · {e.reason}" if e.reason else ""))  # fmt: skip
    return exits.OK


# -- audit ------------------------------------------------------------------------------------


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {what}: {exc}", source=path) from exc


def cmd_audit_verify(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    checkpoint = audit.parse_checkpoint(_read_text(args.checkpoint, "checkpoint")) if args.checkpoint else None
    key = audit.VerifierKey.parse(_read_text(args.key, "verifier key").strip()) if args.key else None
    report = hw.verify_audit(checkpoint, key)
    unchecked = checkpoint is not None and bool(checkpoint.signatures) and key is None
    if args.json:
        render.dump_json(console, {"ok": report.ok, "size": report.size, "head": report.head.hex(),
                                   "signature_checked": key is not None if checkpoint is not None else None,
                                   "problems": [p.__dict__ for p in report.problems]})  # fmt: skip
    elif report.ok:
        extra = f", matches checkpoint at size {checkpoint.size}" if checkpoint else ""
        entries = "1 entry" if report.size == 1 else f"{report.size} entries"
        console.print(f"✓ audit log verifies: {entries}, head {report.head.hex()[:16]}{extra}", style="green")
        if unchecked:
            console.print("⚠ the checkpoint is signed, but its signature was not checked: give --key VKEY to check it", style="yellow")
    else:
        count = len(report.problems)
        console.print(f"✗ audit log does NOT verify ({count} problem{'' if count == 1 else 's'}):", style="red")
        for p in report.problems:
            console.print(f"  seq {p.seq}: {p.kind}: {p.message}")
    return exits.OK if report.ok else exits.AUDIT


def cmd_audit_checkpoint(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    report = hw.verify_audit()
    report.raise_for_problems()
    cp = audit.make_checkpoint(report.size, report.head, args.origin)
    if args.key:
        cp = audit.sign_checkpoint(cp, audit.SigningKey.parse(_read_text(args.key, "signer key").strip()))
    text = audit.format_checkpoint(cp)
    if args.out:
        tmp = Path(args.out + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.out)
        console.print(f"✓ checkpoint written to {args.out}: size {cp.size}, head {cp.head.hex()[:16]}")
    else:
        console.file.write(text)
    return exits.OK


def cmd_audit_keygen(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    skey, vkey = audit.generate_key(args.name)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    secret = out / f"{args.name.replace('/', '_')}.skey"
    public = out / f"{args.name.replace('/', '_')}.vkey"
    for path, text in ((secret, skey), (public, vkey)):
        # 0600 whatever the umask: the signer key is secret, and a verifier key others could
        # rewrite would let them vouch for a forged checkpoint.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise SpecError(f"{path} already exists; choose another name or --out-dir", source="exa audit keygen") from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(text + "\n")
    console.print(f"✓ signer key {secret} (keep it off the database host) · verifier key {public}")
    return exits.OK


# -- finops -----------------------------------------------------------------------------------


def cmd_finops(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    rows = hw.finops(args.hours)
    if args.json:
        totals = {"decisions": sum(r.decisions for r in rows), "device_hours": round(sum(r.device_hours for r in rows), 6),
                  "cost": round(sum(r.cost for r in rows), 6), "carbon_g": round(sum(r.carbon_g for r in rows), 6)}  # fmt: skip
        render.dump_json(console, {"rows": [r.__dict__ for r in rows], "totals": totals})
        return exits.OK
    carbon = args.kind == "carbon"
    columns = ("device", "region", "decisions", "device-hours", "gCO2e" if carbon else "USD")
    cells = [[r.device, r.region, str(r.decisions), f"{r.device_hours:.2f}", f"{r.carbon_g:.1f}" if carbon else f"{r.cost:.2f}"] for r in rows]
    render.emit_table(console, f"{'Carbon' if carbon else 'Cost'} by device type and region", columns, cells, right=columns[2:])
    total = sum(r.carbon_g if carbon else r.cost for r in rows)
    console.print(f"total {total:.1f} gCO2e" if carbon else f"total ${total:.2f}")
    return exits.OK


# -- opa --------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _opa_status_code(st: OpaStatus) -> int:
    """5 when an external OPA would refuse decisions (no bundle or another policy); the local one
    restarts on its own when the policy files changed."""
    return exits.OK if st.managed or st.matches else exits.POLICY


def _print_opa_status(console: Console, st: OpaStatus) -> None:
    if not st.running:
        console.print("OPA is not running; the next command that needs a decision starts it")
        if st.note:
            console.print(f"  {st.note}")
        return
    served = st.served_revision or "none"
    if st.managed:
        idle = f" · idle {_duration(st.idle_s)}" if st.idle_s is not None else ""
        limit = f" (stops after {_duration(st.idle_timeout_s)} idle)" if st.idle_timeout_s else ""
        console.print(f"✓ OPA running · pid {st.pid} (supervisor {st.supervisor_pid}){idle}{limit}")
        only_unix = all(a.startswith("unix://") for a in st.listeners)
        where = "only on its Unix socket (no TCP port)" if only_unix else f"on {', '.join(st.listeners)}"
        console.print(f"  reached at {st.reached_at} · listens {where}")
    else:
        console.print(f"✓ OPA at {st.reached_at} (external: EXA_OPA_URL; exa neither starts nor stops it)")
    if st.matches:
        console.print(f"  policy {served} · matches the policy files")
    elif st.managed:
        console.print(f"  policy {served} · the policy files are now {st.policy_revision}: it restarts on the next decision")
    else:
        console.print(f"  ✗ policy {served}, but the policy files are {st.policy_revision}: decisions are refused", style="red")
    token = f"requests without the token are refused (401){f', token in {st.token_file} (0600)' if st.token_file else ''}"
    guard = token if st.refuses_anonymous else "NOT PROTECTED: it answers requests without a token"
    roots = ", ".join(st.bundle_roots) or "none"
    authz = "authorization policy system.authz · " if "system/authz" in st.bundle_roots else ""
    console.print(f"  protected: {guard} · {authz}bundle roots {roots} (OPA refuses writes there)",
                  style=None if st.refuses_anonymous else "red")  # fmt: skip


def cmd_opa(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import opa

    if args.action == "status":
        st = opa.status(hw.home)
        if args.json:
            render.dump_json(console, st.to_json())
        else:
            _print_opa_status(console, st)
        return _opa_status_code(st)
    if args.action == "bundle":
        from examlops_policy.opa.bundle import BUNDLE_ROOTS
        from examlops_policy.tables import policy_dir

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        bundle = opa.build_bundle(policy_dir(), out, signing_key=Path(args.signing_key) if args.signing_key else None)
        if args.json:
            render.dump_json(console, {"path": str(bundle.path), "revision": bundle.revision, "roots": list(BUNDLE_ROOTS)})
        else:
            signed = " (signed)" if args.signing_key else ""
            console.print(f"✓ bundle {bundle.path}{signed} · revision {bundle.revision} · roots {', '.join(BUNDLE_ROOTS)}")
        return exits.OK
    if os.environ.get("EXA_OPA_URL"):
        raise SpecError(f"OPA at {os.environ['EXA_OPA_URL']} is external (EXA_OPA_URL): exa neither starts nor stops it",
                        source=f"exa opa {args.action}")  # fmt: skip
    report = opa.stop_server(hw.home)
    if args.action == "stop" or not report.stopped:
        if args.json:
            render.dump_json(console, {"was_running": report.was_running, "stopped": report.stopped, "report": report.lines()})
        else:
            for line in report.lines():
                console.print(("✓ " if report.stopped and report.was_running else "") + line)
        return exits.OK if report.stopped else exits.INTERNAL
    connection = opa.connect(hw.home)
    assert connection.server is not None
    if args.json:
        render.dump_json(console, {"pid": connection.server.pid, "revision": connection.expected_revision, "reached_at": connection.describe})
    else:
        console.print(f"✓ OPA restarted · pid {connection.server.pid} · {connection.describe} · policy {connection.expected_revision}")
    return exits.OK


# -- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--home", help="state directory (default $EXA_HOME or ~/.local/share/examlops)")
    common.add_argument("--debug", action="store_true", help="show tracebacks")

    parser = argparse.ArgumentParser(prog="exa", description="ExaMLOps: heterogeneous hardware placement by policy.")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{hardware,audit,finops,opa}")

    hardware = groups.add_parser("hardware", help="device pools and placements").add_subparsers(dest="command", required=True)

    p = hardware.add_parser("add-pool", parents=[common], help="register a device pool")
    p.add_argument("name")
    p.add_argument("--target", required=True, choices=POOL_TARGETS)
    p.add_argument("--accelerator", required=True, choices=ACCELERATORS)
    p.add_argument("--count", required=True, type=int)
    p.add_argument("--region", required=True)
    p.add_argument("--cost-per-hour", type=float, help="USD per device-hour (default: the accelerator's)")
    p.add_argument("--carbon-factor", type=float, help="gCO2e per device-hour (default: the region's)")
    p.add_argument("--supports-fractions", action="store_true", help="partitioning (e.g. MIG) is enabled")
    p.add_argument("--capabilities", default="", help="comma-separated tags, e.g. fp8,hbm3")
    p.add_argument("--model", help="device model, e.g. H100, MI300X")
    p.add_argument("--power-w", type=float, help="board power per device in watts")
    p.add_argument("--pue", type=float, help="power usage effectiveness of the site")
    p.add_argument("--partition", help="Slurm partition serving this pool")
    p.add_argument("--gres-type", help="Slurm GRES type of the devices")
    p.add_argument("--fixed-profile", help="each counted unit is one fixed slice of this profile, e.g. 1g.10gb")
    p.add_argument("--spot", action="store_true", help="spot (preemptible) capacity")
    p.set_defaults(handler=cmd_add_pool)

    p = hardware.add_parser("apply", parents=[common], help="register or update pools from a reviewed YAML file")
    p.add_argument("-f", "--file", required=True)
    p.set_defaults(handler=cmd_apply)

    p = hardware.add_parser("pools", parents=[common], help="list pools, cheapest first, with what each can still place")
    p.set_defaults(handler=cmd_pools)

    p = hardware.add_parser("pool", parents=[common], help="one pool, device by device")
    p.add_argument("name")
    p.set_defaults(handler=cmd_pool)

    def workload_args(p: argparse.ArgumentParser, *, target: bool) -> None:
        p.add_argument("name", nargs="?")
        p.add_argument("-f", "--file", help="a workload YAML file instead of the options")
        p.add_argument("--accelerator", choices=ACCELERATORS)
        p.add_argument("--engine", choices=ENGINES, help="default generic")
        if target:
            p.add_argument("--target", choices=WORKLOAD_TARGETS)
        p.add_argument("--fraction", type=float, help="share of a device, in (0, 1] (default 1)")
        p.add_argument("--count", type=int, help="devices (default 1)")
        p.add_argument("--capabilities", help="comma-separated tags the pool must advertise, e.g. fp8")
        p.add_argument("--residency", choices=RESIDENCIES, help="data residency class (default open)")
        p.add_argument("--data-region", help="where the workload's data lives (a region of regions.yaml)")
        p.add_argument("--allow-burst", action="store_true", help="allow bursting from HPC to cloud")
        p.add_argument("--allow-cpu-fallback", action="store_true", help="a CPU may stand in for the accelerator")
        p.add_argument("--explain", action="store_true", help="show every pool's verdict and why the winner won")
        p.add_argument("--dry-run", action="store_true", help="decide without reserving or recording")
        p.add_argument("--request-id", help="idempotency key: a retry with the same key returns the same decision")
        p.add_argument("--lease", help="release the placement unless submitted or renewed within this time, e.g. 30m")

    p = hardware.add_parser("place", parents=[common], help="place a workload on the cheapest eligible pool")
    workload_args(p, target=True)
    p.set_defaults(handler=cmd_place)

    p = hardware.add_parser("burst", parents=[common], help="burst a workload to cloud, governed by residency")
    workload_args(p, target=False)
    p.set_defaults(handler=cmd_burst)

    p = hardware.add_parser("portable", parents=[common], help="can an engine run on an accelerator?")
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--accelerator", required=True, choices=ACCELERATORS)
    p.set_defaults(handler=cmd_portable)

    p = hardware.add_parser("decisions", parents=[common], help="recent placement decisions, a page at a time")
    p.add_argument("--limit", type=_limit, default=20)
    p.add_argument("--since", help="only decisions made at or after this time (ISO 8601, UTC)")
    p.add_argument("--until", help="only decisions made before this time (ISO 8601, UTC)")
    p.add_argument("--cursor", help="the next page: the cursor the last page printed")
    p.set_defaults(handler=cmd_decisions)

    p = hardware.add_parser("explain", parents=[common], help="explain a decision pool by pool")
    p.add_argument("id")
    p.add_argument("--replay", action="store_true", help="ask the policy again with the recorded input: same answer?")
    p.set_defaults(handler=cmd_explain)

    p = hardware.add_parser("release", parents=[common], help="free the capacity a placement holds")
    p.add_argument("id")
    p.set_defaults(handler=cmd_release)

    p = hardware.add_parser("renew", parents=[common], help="extend a placement's lease")
    p.add_argument("id")
    p.add_argument("--lease", required=True, help="from now, e.g. 30m, 2h")
    p.set_defaults(handler=cmd_renew)

    p = hardware.add_parser("accounting", parents=[common], help="cost and carbon of a placement")
    p.add_argument("id")
    p.add_argument("--hours", type=_hours, required=True)
    p.set_defaults(handler=cmd_accounting)

    p = hardware.add_parser("burst-events", parents=[common], help="every burst attempt, allowed or blocked")
    p.add_argument("--limit", type=_limit, default=50)
    p.set_defaults(handler=cmd_burst_events)

    executors.register(hardware, common)

    audit_cmds = groups.add_parser("audit", help="the tamper-evident audit log").add_subparsers(dest="command", required=True)
    p = audit_cmds.add_parser("verify", parents=[common], help="verify the hash chain (and a checkpoint)")
    p.add_argument("--checkpoint", help="a checkpoint file exported earlier")
    p.add_argument("--key", help="verifier key file for the checkpoint's signature")
    p.set_defaults(handler=cmd_audit_verify)
    p = audit_cmds.add_parser("checkpoint", parents=[common], help="export a checkpoint (size + head), signed with --key")
    p.add_argument("--key", help="signer key file (Ed25519)")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.add_argument("--origin", default=audit.ORIGIN)
    p.set_defaults(handler=cmd_audit_checkpoint)
    p = audit_cmds.add_parser("keygen", parents=[common], help="create an Ed25519 signer/verifier key pair")
    p.add_argument("name")
    p.add_argument("--out-dir", default=".")
    p.set_defaults(handler=cmd_audit_keygen)

    finops = groups.add_parser("finops", help="cost and carbon by device type and region").add_subparsers(dest="kind", required=True)
    for kind in ("cost", "carbon"):
        p = finops.add_parser(kind, parents=[common])
        p.add_argument("--hours", type=_hours, help="hours per decision (default: time held until release or now)")
        p.set_defaults(handler=cmd_finops)

    p = groups.add_parser("opa", parents=[common], help="the OPA that decides: status, stop, restart; build a bundle")
    p.add_argument("action", choices=["status", "restart", "stop", "bundle"])
    p.add_argument("--out", default=".", help="bundle: folder to write bundle.tar.gz into")
    p.add_argument("--signing-key", help="bundle: sign with this key (PEM RSA/EC private key, or an HMAC secret)")
    p.set_defaults(handler=cmd_opa)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = _console()
    hw = Hardware(Path(args.home).expanduser() if args.home else None)
    try:
        handler: Handler = args.handler
        return handler(args, hw, console)
    except ExaError as exc:
        code = exits.code_for(exc)
        if args.debug:
            traceback.print_exc()
        if getattr(args, "json", False):
            sys.stderr.write(json.dumps({"error": type(exc).__name__, "code": code, "message": str(exc)}, ensure_ascii=False) + "\n")
        else:
            err = Console(stderr=True, highlight=False, soft_wrap=True)
            err.print(f"{type(exc).__name__}: {exc}", style="red", markup=False)
        return code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    finally:
        hw.close()


if __name__ == "__main__":
    sys.exit(main())
