"""``exa hardware add-pool|apply|pools|pool|discover|import-catalog``: the fleet."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from examlops_policy.cli.console import Console
from examlops_policy.cli.console import Text

from examlops_policy import quantities, specs
from examlops_policy.cli import args as types
from examlops_policy.cli.args import Commands
from examlops_policy.cli import exits, render
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import ACCELERATORS, POOL_TARGETS, SHARING, Pool, node_spec
from examlops_policy.views import DiscoveryResult, PoolChange, PoolView

MARKS = {"add": "+", "update": "~", "unchanged": "=", "stale": "?"}


def pool_json(pool: Pool) -> dict[str, object]:
    body: dict[str, object] = {f.name: getattr(pool, f.name) for f in dataclasses.fields(Pool)}
    body["capabilities"] = list(pool.capabilities)
    if isinstance(pool.nodes, tuple):
        body["nodes"] = [node_spec(n) for n in pool.nodes]
    return body


NODES_SHOWN = 8


def node_lines(pool: Pool) -> list[str]:
    """A line per listed node (at most NODES_SHOWN, then how many more): devices, CPUs, memory,
    network place and state."""
    if not isinstance(pool.nodes, tuple):
        return []
    kind = pool.gres_type or pool.model or pool.accelerator
    lines = []
    for node in pool.nodes[:NODES_SHOWN]:
        parts = [f"{node.devices} × {kind}" if pool.accelerator != "cpu" else f"{node.devices} CPUs"]
        if node.cpu is not None and pool.accelerator != "cpu":
            parts.append(f"{render.number(float(node.cpu))} CPUs")
        if node.memory is not None:
            parts.append(quantities.memory_text(node.memory))
        parts += [f"{level} {value}" for level, value in (("block", node.block), ("switch", node.switch)) if value]
        if node.state != "up":
            parts.append(node.state)
        lines.append(f"node {node.name}: {' · '.join(parts)}")
    if len(pool.nodes) > NODES_SHOWN:
        lines.append(f"... and {len(pool.nodes) - NODES_SHOWN} more node(s)")
    if pool.sharing:
        lines.append(f"shared: {pool.sharing}, {pool.shares_per_device} shares per device")
    return lines


def view_json(v: PoolView) -> dict[str, object]:
    s = v.state
    capacity: dict[str, object] = {"empty_devices": s.capacity.whole, "placeable": dict(s.capacity.slices)}
    if s.capacity.nodes is not None:
        # Node by node (its up nodes, identical ones counted once), and the largest block of whole
        # devices free on one node.
        capacity["largest_block"] = max((r.whole for r in s.capacity.nodes), default=0)
        capacity["nodes"] = [
            {"whole": r.whole, "cpu_milli": r.cpu, "memory_mib": r.memory, "shares": r.shares, "slices": dict(r.slices),
             "block": r.block, "switch": r.switch, "count": r.count}
            for r in s.capacity.nodes
        ]  # fmt: skip
    return {
        **pool_json(v.pool), "free": s.free, "capacity": capacity,
        "packing": v.packing, "placeable": v.placeable, "removal_pending_since": s.removing,
        "effective_cost_per_hour": v.cost_per_hour, "carbon_per_hour": v.carbon_per_hour,
        "cost_from_tables": v.cost_default, "carbon_from_tables": v.carbon_default, "carbon_method": v.carbon_method,
    }  # fmt: skip


def cmd_add_pool(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    values: dict[str, object] = {
        "name": args.name, "target": args.target, "accelerator": args.accelerator, "count": args.count, "region": args.region,
        "supports_fractions": args.supports_fractions, "capabilities": types.names(args.capabilities), "spot": args.spot,
    }  # fmt: skip
    for option in ("cost_per_hour", "carbon_factor", "model", "power_w", "pue", "partition", "gres_type", "fixed_profile",
                   "nodes", "cpu_per_node", "memory_per_node", "sharing", "shares_per_device", "cluster"):  # fmt: skip
        if getattr(args, option) is not None:
            values[option] = getattr(args, option)
    source = "exa hardware add-pool"
    if args.node:
        values = specs.pool_over_stored_nodes(values, args.node, [s.pool for s in hw.pools()], source=source)
    elif args.count is None:
        raise SpecError("give --count (the pool's devices), or --node for each stored node it offers", source=source, field="--count")
    pool = specs.pool_from_mapping(values, source=source)
    change = hw.add_pool(pool)
    if args.json:
        render.dump_json(console, {"pool": pool.name, "action": change.action})
    else:
        console.print(f"✓ pool {pool.name} added · {pool.count} × {pool.accelerator} on {pool.target} in {pool.region}")
    return exits.OK


CHANGE_MARKS = {
    "added": "+", "updated": "~", "unchanged": "=", "drained": "~", "undrained": "~", "removed": "-", "removal_pending": "-", "refused": "✗",
}  # fmt: skip


def change_json(c: PoolChange) -> dict[str, object]:
    return {"pool": c.name, "action": c.action, "changed": list(c.changed_fields), "live_grants": list(c.holders),
            "removal_cancelled": c.removal_cancelled, "refused": c.refused}  # fmt: skip


def grants_text(holders: tuple[str, ...]) -> str:
    """``live grant (ab12...)`` or ``3 live grants (ab12..., cd34..., ef56...)``."""
    named = ", ".join(h[:12] for h in holders[:5]) + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
    return f"live grant ({named})" if len(holders) == 1 else f"{len(holders)} live grants ({named})"


def change_line(c: PoolChange) -> str:
    """One pool's change as the diff shows it: a mark (+ added, ~ changed, = unchanged, - removed),
    the pool and what happens to it."""
    one = len(c.holders) == 1
    if c.action == "removal_pending":
        what = f"removal pending: drained, it goes when {'its' if one else 'the last of its'} {grants_text(c.holders)} ends"
    elif c.action == "drained":
        kept = f"; its {grants_text(c.holders)} {'is' if one else 'are'} kept" if c.holders else ""
        what = f"drained: takes no new grants{kept}"
    elif c.action == "undrained":
        what = "undrained: takes new grants again" + ("; its pending removal is cancelled" if c.removal_cancelled else "")
    elif c.action == "refused":
        change = "addition" if c.adding else f"update ({', '.join(c.changed_fields)})" if c.changed_fields else "removal"
        what = f"refused as it stands: {c.refused}" if c.as_stored else f"{change} refused: {c.refused}"
    else:
        what = c.action + (f" ({', '.join(c.changed_fields)})" if c.changed_fields else "")
    return f"{CHANGE_MARKS[c.action]} {c.name} {what}"


def show_changes(args: argparse.Namespace, console: Console, changes: list[PoolChange], *, summary: bool) -> None:
    if args.json:
        # apply: the list of changes; drain, undrain, remove-pool: the one change.
        render.dump_json(console, [change_json(c) for c in changes] if summary else {**change_json(changes[0]), "dry_run": args.dry_run})
        return
    for c in changes:
        console.print(change_line(c))
    if summary:
        counts = {a: sum(1 for c in changes if c.action == a) for a in ("added", "updated", "unchanged", "removed", "removal_pending", "refused")}
        line = f"{counts['added']} added, {counts['updated']} updated, {counts['unchanged']} unchanged"
        if getattr(args, "prune", False):
            line += f", {counts['removed']} removed" + (f", {counts['removal_pending']} removal pending" if counts["removal_pending"] else "")
        console.print(line + (f", {counts['refused']} refused" if counts["refused"] else ""))
    refused = sum(1 for c in changes if c.action == "refused")
    if args.dry_run and refused:
        them = "them" if refused > 1 else "it"
        console.print(Text(f"dry run: nothing was changed; {refused} change{'s' if refused > 1 else ''} would be refused, "
                           f"and with {them} the whole write (all or nothing): resolve {them} first", style="red"))  # fmt: skip
    elif args.dry_run:
        console.print("dry run: nothing was changed (run it again without --dry-run to make these changes)")


def cmd_apply(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    return applied(args, console, hw.apply_file(Path(args.file), prune=args.prune, dry_run=args.dry_run))


def applied(args: argparse.Namespace, console: Console, changes: list[PoolChange]) -> int:
    """An apply's changes shown, and its exit code: a dry run that would be refused exits as the
    write would (bad input), having shown it all."""
    show_changes(args, console, changes, summary=True)
    return exits.BAD_INPUT if any(c.action == "refused" for c in changes) else exits.OK


def cmd_drain(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    change = (hw.drain if args.handler_name == "drain" else hw.undrain)(args.name, dry_run=args.dry_run)
    if change.action == "unchanged" and not args.json:
        state = "drained already" if args.handler_name == "drain" else "not drained"
        console.print(f"= {change.name} {state}; nothing changed")
        return exits.OK
    show_changes(args, console, [change], summary=False)
    return exits.OK


def cmd_remove_pool(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    show_changes(args, console, [hw.remove_pool(args.name, dry_run=args.dry_run)], summary=False)
    return exits.OK


def cmd_pools(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    views = hw.pool_views()
    if args.json:
        render.dump_json(console, [view_json(v) for v in views])
    elif not views:
        console.print("No pools registered. Add one with 'exa hardware add-pool' or 'exa hardware apply -f pools.yaml'.")
    else:
        render.print_pools(console, views)
    return exits.OK


def cmd_pool(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    detail = hw.pool(args.name)
    if args.json:
        body = {
            **view_json(detail.view),
            "devices": [{"device": i, "layout": text} for i, text in enumerate(detail.devices)],
            "holdings": [dataclasses.asdict(h) for h in detail.holdings],
        }
        if detail.nodes:
            body["node_states"] = [dataclasses.asdict(n) for n in detail.nodes]
        render.dump_json(console, body)
    else:
        render.print_pool(console, detail)
    return exits.OK


# -- discover ---------------------------------------------------------------------------------


def _show_discovery(args: argparse.Namespace, console: Console, found: DiscoveryResult) -> None:
    if args.json:
        rows = [{**pool_json(c.pool), "region": c.pool.region or None, "action": c.action, "changed": list(c.changed_fields),
                 "free": c.free, "node_names": list(c.nodes), "details": list(c.details),
                 "usage": [dataclasses.asdict(u) for u in c.usage]} for c in found.changes]  # fmt: skip
        render.dump_json(console, {"source": found.source, "pools": rows, "warnings": list(found.warnings), "applied": found.applied,
                                   "held_outside": found.held_outside})  # fmt: skip
        return
    counts = {a: sum(1 for c in found.changes if c.action == a) for a in MARKS}
    discovered = len(found.changes) - counts["stale"]
    console.print(f"{found.source}: {discovered} pool(s) · {counts['add']} to add, {counts['update']} to update, "
                  f"{counts['unchanged']} unchanged" + (f", {counts['stale']} stale" if counts["stale"] else ""))  # fmt: skip
    for c in found.changes:
        p = c.pool
        if c.action == "stale":
            console.print(Text(f"? {p.name}: registered but not found any more (left as it is)", style="yellow"))
            continue
        free = "" if c.free is None else f" (free {c.free:g})"
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
        for line in c.details:
            console.print(Text(f"    {line}", style="dim"))
        for line in node_lines(p):
            console.print(Text(f"    {line}", style="dim"))
    for warning in found.warnings:
        console.print(Text(f"⚠ {warning}", style="yellow"))
    if found.applied:
        console.print(Text(f"✓ applied: {counts['add']} added, {counts['update']} updated, {counts['unchanged']} unchanged", style="green"))
        for name, held in sorted(found.held_outside.items()):
            if held:
                console.print(f"  {name}: {render.number(held)} device(s) busy with work this layer did not place (held outside)")
    else:
        console.print("Nothing registered: add --apply to register these pools.")


def cmd_discover(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    options = {k: getattr(args, k) for k in ("target", "context", "kubeconfig", "block_label", "switch_label") if getattr(args, k, None) is not None}
    found = hw.discover(args.source, region=args.region, prefix=args.prefix, apply=args.apply, **options)
    _show_discovery(args, console, found)
    return exits.OK


# -- import-catalog ---------------------------------------------------------------------------


def cmd_import_catalog(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    result = hw.import_catalog(
        Path(args.file), apply=args.apply, cloud=args.cloud, count=args.count, overwrite=args.overwrite, spot=args.spot,
        regions=tuple(types.names(args.regions or "")), accelerators=tuple(types.names(args.accelerators or "")),
    )  # fmt: skip
    plan = result.plan
    if args.json:
        render.dump_json(console, {**plan.to_json(), "applied": list(result.applied) if result.applied is not None else None})
        return exits.OK
    catalog = plan.catalog
    console.print(f"catalog {catalog.source} · cloud {catalog.cloud} · {catalog.rows} rows · {len(plan.offers)} offers selected")
    columns = ("pool", "change", "model", "region", "$/device-h", "instance", "reason")
    render.emit_table(console, "Pools from the catalog", columns, plan.rows(), right=("$/device-h",))
    console.print(", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in plan.summary().items()))
    for unknown in catalog.unknown_accelerators:
        console.print(Text(f"? accelerator {unknown.value}: {unknown.reason} ({unknown.rows} row{'s' if unknown.rows != 1 else ''}, first line {unknown.first_line})", style="yellow"))
    for unknown in catalog.unknown_regions:
        console.print(Text(f"? region {unknown.value}: {unknown.reason} ({unknown.rows} row{'s' if unknown.rows != 1 else ''}, first line {unknown.first_line})", style="yellow"))
    for note in catalog.notes:
        console.print(Text(f"  {note.code}: {note.message} ({note.rows} row{'s' if note.rows != 1 else ''})", style="dim"))
    if result.applied is None:
        console.print("Nothing registered: add --apply (and --count N for new pools) to register these pools.")
    else:
        console.print(Text(f"✓ applied: {len(result.applied)} pool(s) written", style="green"))
    return exits.OK


# -- parser -----------------------------------------------------------------------------------


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    p = hardware.add_parser("add-pool", parents=[common], help="register a device pool")
    p.add_argument("name")
    p.add_argument("--target", required=True, choices=POOL_TARGETS)
    p.add_argument("--accelerator", required=True, choices=ACCELERATORS)
    p.add_argument("--count", type=int, help="the pool's devices (or fixed slices); with --node: their sum by default")
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
    p.add_argument("--nodes", type=int, help="the pool's nodes: --count devices split evenly over N nodes")
    p.add_argument(
        "--node", action="append", metavar="NAME",
        help="a node the stored fleet already states (repeat for each): the pool offers its devices of --accelerator (a cpu pool: its cores), "
        "with its CPU, memory, state and labels as the pools listing it state them",
    )  # fmt: skip
    p.add_argument("--cpu-per-node", metavar="CORES", help="CPU of each node: cores (64, 0.5) or millicores (500m); needs --nodes")
    p.add_argument("--memory-per-node", metavar="SIZE", help="memory of each node: 512Gi, 64Gi, 512Mi or MiB; needs --nodes")
    p.add_argument("--sharing", choices=SHARING, help="devices shared without partitioning (time-slicing, MPS, Slurm shards)")
    p.add_argument("--shares-per-device", type=int, metavar="N", help="with --sharing: shares each device is split into (1000: thousandths)")
    p.add_argument("--cluster", metavar="NAME", help="the Kubernetes cluster running the nodes, by its MultiKueueCluster's name (MultiKueue nominates it)")
    p.set_defaults(handler=cmd_add_pool)

    p = hardware.add_parser("apply", parents=[common], help="register or update pools from a reviewed YAML file")
    p.add_argument("-f", "--file", required=True)
    p.add_argument("--prune", action="store_true",
                   help="also remove registered pools the file leaves out (refused for one live grants hold unless it is drained)")
    p.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
    p.set_defaults(handler=cmd_apply)

    for name, text in (("drain", "stop new grants on a pool; the grants it holds are kept"), ("undrain", "let a drained pool take new grants again")):
        p = hardware.add_parser(name, parents=[common], help=text)
        p.add_argument("name")
        p.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
        p.set_defaults(handler=cmd_drain, handler_name=name)

    p = hardware.add_parser("remove-pool", parents=[common],
                            help="remove a pool (one that live grants hold: only once drained, and it goes when the last ends)")
    p.add_argument("name")
    p.add_argument("--dry-run", action="store_true", help="show what would change; change nothing")
    p.set_defaults(handler=cmd_remove_pool)

    p = hardware.add_parser("pools", parents=[common], help="list pools, cheapest first, with what each can still place")
    p.set_defaults(handler=cmd_pools)

    p = hardware.add_parser("pool", parents=[common], help="one pool, device by device")
    p.add_argument("name")
    p.set_defaults(handler=cmd_pool)

    discover = hardware.add_parser("discover", help="find pools in a running Slurm or Kubernetes, or on this machine")
    sources = discover.add_subparsers(dest="source", required=True)
    p = sources.add_parser("slurm", parents=[common], help="one pool per Slurm partition x GPU GRES type")
    p.add_argument("--region", help="region of the cluster (a key of regions.yaml); kept from registered pools when absent")
    p.add_argument("--prefix", help="prefix for pool names (default: none, '<partition>-<gres type>')")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.set_defaults(handler=cmd_discover)
    p = sources.add_parser("local", parents=[common], help="the devices of this machine (else a cpu pool)")
    p.add_argument("--region", help="region of this machine (a key of regions.yaml)")
    p.add_argument("--target", choices=POOL_TARGETS, default="hpc")
    p.add_argument("--prefix", help="prefix for pool names (default: local-)")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.set_defaults(handler=cmd_discover)
    p = sources.add_parser("kubernetes", parents=[common], help="nodes' allocatable GPUs, slices, Gaudis and TPUs, by region")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--region", help=argparse.SUPPRESS)
    p.add_argument("--prefix", help="prefix for pool names (default: k8s-)")
    p.add_argument("--block-label", metavar="KEY", help="the node label that names a node's block, e.g. cloud.google.com/gce-topology-block")
    p.add_argument("--switch-label", metavar="KEY", help="the node label that names a node's switch or rack")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.set_defaults(handler=cmd_discover)

    p = hardware.add_parser("import-catalog", parents=[common], help="pools and prices from a public cloud catalog (SkyPilot format)")
    p.add_argument("file", help="a SkyPilot catalog CSV (vms.csv)")
    p.add_argument("--format", choices=["skypilot"], default="skypilot")
    p.add_argument("--cloud", help="the cloud the catalog is for (default: from its header or file path)")
    p.add_argument("--regions", help="comma-separated regions to import (default: every known region in the catalog)")
    p.add_argument("--accelerators", help="comma-separated accelerator families, models or catalog names")
    p.add_argument("--spot", action="store_true", help="also import spot prices, as separate pools flagged spot")
    p.add_argument("--count", type=int, help="devices per new pool (catalogs carry no capacity; required for new pools)")
    p.add_argument("--apply", action="store_true", help="register the pools (idempotent)")
    p.add_argument("--overwrite", action="store_true", help="replace prices an operator set by hand")
    p.set_defaults(handler=cmd_import_catalog)
