"""``exa hardware discover|submit|manifest``: the executor commands (Slurm, Kubernetes, local).

* ``discover slurm`` / ``discover local``: pools from a running Slurm or from this machine; shows
  what would change, ``--apply`` registers them (idempotent).
* ``submit ID --script job.sh [--dry-run]``: hands a placed decision to Slurm (``sbatch``) and
  records the job id on the decision and in the audit log.
* ``manifest ID --image IMAGE [--command CMD ARG...]``: the Kubernetes ``batch/v1`` Job for a decision.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import yaml
from rich.console import Console
from rich.text import Text

from examlops_policy.cli import exits
from examlops_policy.discovery import Discovery, PlannedChange, plan
from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool

SOURCE = "exa-hardware"
MARKS = {"add": "+", "update": "~", "unchanged": "=", "stale": "?"}


def _pool(hw: Hardware, name: str) -> Pool:
    for state in hw.pools():
        if state.pool.name == name:
            return state.pool
    raise NotFoundError(f"pool {name!r} of the decision is no longer registered")


def _region(hw: Hardware, region: str | None) -> str:
    if region is not None and not hw.tables.region_known(region):
        raise SpecError(f"region {region!r} is not in the reviewed regions table (policies/examlops/tables/regions.yaml)", field="--region")
    return region or ""


# -- discover ---------------------------------------------------------------------------------


def _pool_json(pool: Pool) -> dict[str, object]:
    body: dict[str, object] = {f.name: getattr(pool, f.name) for f in dataclasses.fields(Pool)}
    body["capabilities"] = list(pool.capabilities)
    body["region"] = pool.region or None
    return body


def _show_discovery(args: argparse.Namespace, console: Console, found: Discovery, changes: list[PlannedChange], applied: bool) -> None:
    extras = {d.pool.name: d for d in found.pools}
    if args.json:
        from examlops_policy.cli import render

        rows = []
        for c in changes:
            assert c.pool is not None
            extra = extras.get(c.name)
            rows.append({**_pool_json(c.pool), "action": c.action, "changed": list(c.changed_fields),
                         "free": extra.free if extra else None, "nodes": list(extra.nodes) if extra else [],
                         "details": list(extra.details) if extra else []})  # fmt: skip
        render.dump_json(console, {"source": found.source, "pools": rows, "warnings": list(found.warnings), "applied": applied})
        return
    counts = {a: sum(1 for c in changes if c.action == a) for a in MARKS}
    console.print(f"{found.source}: {len(found.pools)} pool(s) · {counts['add']} to add, {counts['update']} to update, "
                  f"{counts['unchanged']} unchanged" + (f", {counts['stale']} stale" if counts["stale"] else ""))  # fmt: skip
    for c in changes:
        assert c.pool is not None
        p = c.pool
        extra = extras.get(c.name)
        if c.action == "stale":
            console.print(Text(f"? {p.name}: registered but not found any more (left as it is)", style="yellow"))
            continue
        free = "" if extra is None or extra.free is None else f" (free {extra.free:g})"
        where = " · ".join(
            part for part in (
                f"partition {p.partition}" if p.partition else "",
                f"gres {p.gres_type}" if p.gres_type else "",
                f"region {p.region}" if p.region else "region -",
                f"capabilities {','.join(p.capabilities)}" if p.capabilities else "",
                "fractions" if p.supports_fractions else "",
            ) if part
        )  # fmt: skip
        changed = f" [{', '.join(c.changed_fields)}]" if c.changed_fields else ""
        console.print(f"{MARKS[c.action]} {p.name}: {p.count} × {p.accelerator}{' ' + p.model if p.model else ''}{free} · {where}{changed}")
        for line in extra.details if extra else ():
            console.print(Text(f"    {line}", style="dim"))
    for warning in found.warnings:
        console.print(Text(f"⚠ {warning}", style="yellow"))
    if applied:
        console.print(Text(f"✓ applied: {counts['add']} added, {counts['update']} updated, {counts['unchanged']} unchanged", style="green"))
    else:
        console.print("Nothing registered: add --apply to register these pools.")


def _discover(args: argparse.Namespace, hw: Hardware, console: Console, found: Discovery, owned: Callable[[Pool], bool]) -> int:
    changes = plan(found, hw.pools(), owned=owned)
    if args.apply:
        pools = [c.pool for c in changes if c.action != "stale" and c.pool is not None]
        missing = [p.name for p in pools if not p.region]
        if missing:
            raise SpecError(f"new pool(s) {', '.join(missing)} have no region: give --region", field="--region")
        hw.apply(pools)
        # What the scheduler reports busy, beyond this layer's own submitted placements, is not free.
        usage = {d.pool.name: d.pool.count - d.free for d in found.pools if d.free is not None}
        if usage:
            hw.store.record_scheduler_usage(usage, scheduler=found.source, source="exa-hardware")
    _show_discovery(args, console, found, changes, applied=bool(args.apply))
    return exits.OK


def cmd_discover_slurm(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.discovery.slurm import discover_slurm, from_slurm
    from examlops_policy.executors.gres import load_gres_table

    found = discover_slurm(load_gres_table(), region=_region(hw, args.region), prefix=args.prefix)
    return _discover(args, hw, console, found, lambda p: from_slurm(p) and p.name.startswith(args.prefix))


def cmd_discover_local(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.discovery.local import discover_local

    found = discover_local(hw.tables, region=_region(hw, args.region), target=args.target, prefix=args.prefix)
    return _discover(args, hw, console, found, lambda p: p.name.startswith(args.prefix) and p.partition is None)


# -- submit -----------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.cli import render
    from examlops_policy.executors.gres import load_gres_table
    from examlops_policy.executors.slurm import SCHEDULER, slurm_request, submit

    record = hw.decision(args.id)
    pool = _pool(hw, getattr(record.decision, "pool", ""))
    request = slurm_request(record, pool, Path(args.script), load_gres_table())
    if args.dry_run:
        if args.json:
            render.dump_json(console, {"decision": record.id, "argv": request.argv(), "command": request.command_line(), "submitted": False})
        else:
            console.file.write(request.command_line() + "\n")
        return exits.OK
    job_id = submit(request)
    updated = hw.store.set_job(record.id, job_id, scheduler=SCHEDULER, source=SOURCE)
    if args.json:
        render.dump_json(console, {"decision": updated.id, "argv": request.argv(), "command": request.command_line(),
                                   "submitted": True, "scheduler": SCHEDULER, "job_id": job_id})  # fmt: skip
    else:
        console.print(Text(f"✓ decision {record.id[:12]} submitted to Slurm as job {job_id} · partition {request.partition}"
                           + (f" · {request.gres}" if request.gres else ""), style="green"))  # fmt: skip
    return exits.OK


# -- manifest ---------------------------------------------------------------------------------


def cmd_manifest(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    from examlops_policy.cli import render
    from examlops_policy.executors.kubernetes import job_manifest

    record = hw.decision(args.id)
    pool = _pool(hw, getattr(record.decision, "pool", ""))
    command = list(args.command)
    manifest = job_manifest(
        record, pool, image=args.image, command=command, namespace=args.namespace,
        amd_memory_partition=args.amd_memory_partition, tpu_topology=args.tpu_topology,
    )  # fmt: skip
    if args.json:
        render.dump_json(console, manifest)
    else:
        console.file.write(yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False))
    return exits.OK


# -- parser -----------------------------------------------------------------------------------


def register(hardware: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """Add the executor subcommands to ``exa hardware``."""
    discover = hardware.add_parser("discover", help="find pools in a running Slurm or on this machine")
    sources = discover.add_subparsers(dest="source", required=True)

    p = sources.add_parser("slurm", parents=[common], help="one pool per Slurm partition x GPU GRES type")
    p.add_argument("--region", help="region of the cluster (a key of regions.yaml); kept from registered pools when absent")
    p.add_argument("--prefix", default="", help="prefix for pool names (default: none, '<partition>-<gres type>')")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.set_defaults(handler=cmd_discover_slurm)

    p = sources.add_parser("local", parents=[common], help="the devices of this machine (else a cpu pool)")
    p.add_argument("--region", help="region of this machine (a key of regions.yaml)")
    p.add_argument("--target", choices=["hpc", "cloud"], default="hpc")
    p.add_argument("--prefix", default="local-", help="prefix for pool names (default: local-)")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.set_defaults(handler=cmd_discover_local)

    p = hardware.add_parser("submit", parents=[common], help="submit a placed decision to Slurm (sbatch)")
    p.add_argument("id", help="decision id (or a unique prefix)")
    p.add_argument("--script", required=True, help="the batch script to run")
    p.add_argument("--dry-run", action="store_true", help="print the exact sbatch command; submit nothing")
    p.set_defaults(handler=cmd_submit)

    p = hardware.add_parser("manifest", parents=[common], help="emit the Kubernetes Job for a placed decision")
    p.add_argument("id", help="decision id (or a unique prefix)")
    p.add_argument("--image", required=True, help="container image")
    p.add_argument("--namespace", help="Kubernetes namespace")
    p.add_argument("--amd-memory-partition", choices=["nps1", "nps2", "nps4"], default="nps1",
                   help="AMD memory partition mode of the nodes, for an honored AMD fraction (default nps1)")  # fmt: skip
    p.add_argument("--tpu-topology", help="TPU slice topology node selector, e.g. 2x2x1")
    # An option, not "-- COMMAND": Python 3.11's argparse loses "--" in nested subcommands.
    p.add_argument("--command", nargs=argparse.REMAINDER, default=[],
                   help="the container's command; give it last: everything after it belongs to the command")  # fmt: skip
    p.set_defaults(handler=cmd_manifest)
