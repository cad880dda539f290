"""``exa audit verify|checkpoint|keygen``, ``exa finops cost|carbon|report``, ``exa models cost``."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from examlops_policy.cli.console import Console

from examlops_policy.cli import args as types
from examlops_policy.cli.args import Commands
from examlops_policy.cli import exits, render
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {what}: {exc}", source=path) from exc


def _write_atomically(path: Path, text: str) -> None:
    """All of ``text`` at ``path`` or nothing: a temporary file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SpecError(f"cannot write {path}: {exc.strerror or exc}", source=str(path)) from exc


# -- audit ------------------------------------------------------------------------------------


def cmd_audit_verify(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import audit

    checkpoint = audit.parse_checkpoint(_read_text(args.checkpoint, "checkpoint")) if args.checkpoint else None
    key = audit.VerifierKey.parse(_read_text(args.key, "verifier key").strip()) if args.key else None
    found = hw.verify_audit(checkpoint, key)
    unchecked = checkpoint is not None and bool(checkpoint.signatures) and key is None
    if args.json:
        render.dump_json(console, {"ok": found.ok, "size": found.size, "head": found.head.hex(),
                                   "signature_checked": key is not None if checkpoint is not None else None,
                                   "after_checkpoint": found.size - checkpoint.size if checkpoint is not None else None,
                                   "entries_signed_by": key.name if key is not None and found.ok else None,
                                   "problems": [dataclasses.asdict(p) for p in found.problems]})  # fmt: skip
    elif found.ok:
        signed = f", each signed by {key.name}" if key is not None else ""
        extra = f", matches checkpoint at size {checkpoint.size}" if checkpoint else ""
        if checkpoint is not None:
            after = found.size - checkpoint.size
            extra += f"; {'1 entry' if after == 1 else f'{after} entries'} after it{signed}"
        else:
            extra += signed
        entries = "1 entry" if found.size == 1 else f"{found.size} entries"
        console.print(f"✓ audit log verifies: {entries}, head {found.head.hex()[:16]}{extra}", style="green")
        if unchecked:
            console.print("⚠ the checkpoint is signed, but its signature was not checked: give --key VKEY to check it", style="yellow")
    else:
        count = len(found.problems)
        console.print(f"✗ audit log does NOT verify ({count} problem{'' if count == 1 else 's'}):", style="red")
        for p in found.problems:
            console.print(f"  seq {p.seq}: {p.kind}: {p.message}")
    return exits.OK if found.ok else exits.AUDIT


def cmd_audit_checkpoint(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import audit

    key = audit.read_signing_key(args.key) if args.key else None
    cp = hw.checkpoint(origin=args.origin, key=key)
    text = audit.format_checkpoint(cp)
    if args.out:
        _write_atomically(Path(args.out), text)
        console.print(f"✓ checkpoint written to {args.out}: size {cp.size}, head {cp.head.hex()[:16]}")
    else:
        console.file.write(text)
    return exits.OK


def cmd_audit_keygen(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import audit

    secret, public = audit.write_key_pair(args.name, Path(args.out_dir))
    console.print(f"✓ signer key {secret} (keep it off the database host) · verifier key {public}")
    return exits.OK


# -- finops -----------------------------------------------------------------------------------


def cmd_finops(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    found = hw.finops(args.hours, methods=args.kind == "carbon" or args.json)
    if args.json:
        totals = {"decisions": found.decisions, "device_hours": found.device_hours, "cost": found.cost, "carbon_g": found.carbon_g,
                  "used_device_hours": found.used_device_hours, "idle_device_hours": found.idle_device_hours,
                  "used_cost": found.used_cost, "idle_cost": found.idle_cost}  # fmt: skip
        render.dump_json(console, {"rows": [dataclasses.asdict(r) for r in found.rows], "totals": totals})
        return exits.OK
    if args.kind == "carbon":
        # Each row says how its carbon was found, and a legend explains the methods shown.
        columns: tuple[str, ...] = ("device", "region", "decisions", "device-hours", "used", "idle", "gCO2e", "carbon from")
        cells = [[r.device, r.region, str(r.decisions), render.amount(r.device_hours, 2), render.amount(r.used_device_hours, 2),
                  render.amount(r.idle_device_hours, 2), render.amount(r.carbon_g, 1), ",".join(r.carbon_methods) or "-"]
                 for r in found.rows]  # fmt: skip
        render.emit_table(console, "Carbon by device type and region", columns, cells, right=columns[2:7])
        console.print(f"total {render.amount(found.carbon_g, 1)} gCO2e")
        render.print_carbon_legend(console, dict(found.methods))
        return exits.OK
    columns = ("device", "region", "decisions", "device-hours", "used", "idle", "used USD", "idle USD", "USD")
    cells = [[r.device, r.region, str(r.decisions), render.amount(r.device_hours, 2), render.amount(r.used_device_hours, 2),
              render.amount(r.idle_device_hours, 2), render.amount(r.used_cost, 2), render.amount(r.idle_cost, 2), render.amount(r.cost, 2)]
             for r in found.rows]  # fmt: skip
    render.emit_table(console, "Cost by device type and region", columns, cells, right=columns[2:])
    console.print(f"total {render.amount(found.cost, 2, '$')} · used {render.amount(found.used_cost, 2, '$')} · idle "
                  f"{render.amount(found.idle_cost, 2, '$')}{'' if hw.tables.charge_idle else ' (not charged)'}")  # fmt: skip
    return exits.OK


def cmd_finops_report(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import report

    data = hw.finops_report(since=args.since, until=args.until, title=args.title)
    page = report.render_html(data)
    if args.html:
        _write_atomically(Path(args.html), page)
    t = data.totals
    if args.json:
        render.dump_json(console, {
            "html": args.html, "period_start": data.period_start.isoformat(), "period_end": data.period_end.isoformat(),
            "totals": {"decisions": t.decisions, "cost": t.cost, "carbon_g": t.carbon_g}, "currency": data.currency,
        })  # fmt: skip
    elif args.html:
        console.print(f"✓ report {args.html} · {data.period_start} to {data.period_end} · {t.decisions} decisions · "
                      f"${t.cost:.2f} · {t.carbon_g:.1f} gCO2e")  # fmt: skip
    else:
        console.file.write(page)
    return exits.OK


def cmd_finops_export(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy import focus

    start, end = focus.parse_hour(args.from_, "--from"), focus.parse_hour(args.to, "--to")
    count = focus.export(hw, start, end, Path(args.out), version=args.focus_version)
    if args.json:
        render.dump_json(console, {"out": args.out, "rows": count, "format": "focus", "focus_version": args.focus_version,
                                   "from": start.isoformat().replace("+00:00", "Z"), "to": end.isoformat().replace("+00:00", "Z")})  # fmt: skip
    else:
        console.print(f"✓ FOCUS {args.focus_version} export {args.out} · {count} rows · hourly charge periods "
                      f"{start:%Y-%m-%dT%H:%MZ} to {end:%Y-%m-%dT%H:%MZ} (UTC, end excluded)")  # fmt: skip
    return exits.OK


def cmd_models_cost(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    found = hw.models_cost(args.hours)
    if args.json:
        totals = {"cost": found.cost, "carbon_g": found.carbon_g, "used_cost": found.used_cost, "idle_cost": found.idle_cost}
        render.dump_json(console, {"rows": [dataclasses.asdict(r) for r in found.rows], "totals": totals})
        return exits.OK
    if not found.rows:
        console.print("No placements yet.")
        return exits.OK
    columns = ("workload", "decisions", "device-hours", "used", "idle", "idle USD", "USD", "gCO2e")
    cells = [[r.workload, str(r.decisions), render.amount(r.device_hours, 2), render.amount(r.used_device_hours, 2), render.amount(r.idle_device_hours, 2),
              render.amount(r.idle_cost, 2), render.amount(r.cost, 2), render.amount(r.carbon_g, 1)] for r in found.rows]  # fmt: skip
    render.emit_table(console, "Cost and carbon by workload (most expensive first)", columns, cells, right=columns[1:])
    console.print(f"total {render.amount(found.cost, 2, '$')} · used {render.amount(found.used_cost, 2, '$')} · idle "
                  f"{render.amount(found.idle_cost, 2, '$')}{'' if hw.tables.charge_idle else ' (not charged)'} · {render.amount(found.carbon_g, 1)} gCO2e")  # fmt: skip
    return exits.OK


# -- parser -----------------------------------------------------------------------------------


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    audit_cmds = groups.add_parser("audit", help="the tamper-evident audit log").add_subparsers(dest="command", required=True)
    p = audit_cmds.add_parser("verify", parents=[common], help="verify the hash chain (and a checkpoint)")
    p.add_argument("--checkpoint", help="a checkpoint file exported earlier")
    p.add_argument("--key", help="verifier key file (NAME.vkey of 'exa audit keygen', not the signer's NAME.skey): the checkpoint's signature, and every entry after it (every entry, without one) signed by it")
    p.set_defaults(handler=cmd_audit_verify)
    p = audit_cmds.add_parser("checkpoint", parents=[common], help="export a checkpoint (size + head), signed with --key")
    p.add_argument("--key", help="signer key file (Ed25519: NAME.skey of 'exa audit keygen')")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.add_argument("--origin", help="the log's origin line (default: the layer's own)")
    p.set_defaults(handler=cmd_audit_checkpoint)
    p = audit_cmds.add_parser("keygen", parents=[common], help="create an Ed25519 signer/verifier key pair")
    p.add_argument("name")
    p.add_argument("--out-dir", default=".")
    p.set_defaults(handler=cmd_audit_keygen)

    finops = groups.add_parser("finops", help="cost and carbon by device type and region").add_subparsers(dest="kind", required=True)
    for kind in ("cost", "carbon"):
        p = finops.add_parser(kind, parents=[common], help=f"{kind} by device type and region, with the total")
        p.add_argument("--hours", type=types.hours, help="hours per decision (default: time held until release or now)")
        p.set_defaults(handler=cmd_finops)
    p = finops.add_parser("report", parents=[common], help="one self-contained HTML page: cost, carbon, outcomes, bursts, honesty")
    p.add_argument("--html", help="write the page to this file (default: stdout)")
    p.add_argument("--since", help="first day (ISO 8601, UTC; default: the first decision's)")
    p.add_argument("--until", help="end, exclusive (ISO 8601, UTC; default: now)")
    p.add_argument("--title", default="FinOps report")
    p.set_defaults(handler=cmd_finops_report)
    p = finops.add_parser("export", parents=[common], help="the bill in FOCUS (FinOps Open Cost and Usage Specification), one row per placement-hour")
    p.add_argument("--format", choices=("focus",), default="focus", help="the format (FOCUS, the FinOps Foundation's)")
    p.add_argument("--from", dest="from_", required=True, metavar="T", help="first hour (ISO 8601, UTC, on a whole hour)")
    p.add_argument("--to", required=True, metavar="T", help="end hour, excluded (ISO 8601, UTC, on a whole hour)")
    p.add_argument("--out", required=True, metavar="FILE", help="the .csv file to write (whole or not at all)")
    p.add_argument("--focus-version", choices=("1.2", "1.3"), default="1.2",
                   help="1.2 (default), or 1.3 with split cost allocation of shared devices (slices, shares)")
    p.set_defaults(handler=cmd_finops_export)

    models = groups.add_parser("models", help="what each workload (model) cost and emitted").add_subparsers(dest="command", required=True)
    p = models.add_parser("cost", parents=[common], help="cost and carbon per workload name")
    p.add_argument("--hours", type=types.hours, help="hours per decision (default: time held until release or now)")
    p.set_defaults(handler=cmd_models_cost)
