"""What the live grants hold of each node, recounted against what the node physically has.

``exa audit verify`` holds every table to the chain, and each pool's capacity summary to what its
live grants give. Neither sees a node granted twice over by two pools that list it: a state written
by a release before pools over one node shared its capacity (issue 30) can hold 1.5 of one GPU or
94 cores of a 64-core node, every row of it vouched for. This recount reads only the grants and the
nodes' physical totals, as a driver or a kernel would, not the layer's rooms:

* a device (of one kind: ``state.device_kind``) is in one mode at a time: whole, slices, or shares
  of one sharing mode with one number of shares per device;
* a device is held whole once; its shares, as fractions of the device, add up to at most one; its
  MIG instances neither overlap in memory slices nor hold more compute slices than it has; its AMD
  partitions are of one mode, each index held once, no more of them than the mode cuts;
* a device's index is below the node's device count;
* a node's cores (a ``cpu`` pool's devices: one core each, in its grants' CPU) and memory are
  granted at most once, whichever pools granted them.

Pure: the pools, their layouts and the live rows in, sentences out.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from examlops_policy.model import Node, Pool
from examlops_policy.quantities import cpu_text, memory_text
from examlops_policy.store.api import HeldRow, NodeGrantRow
from examlops_policy._core import packing
from examlops_policy._core.state import device_kind


@dataclass
class _Device:
    """What the live grants hold of one device."""

    modes: dict[str, set[str]] = field(default_factory=dict)  # mode -> the pools holding it so
    whole: list[str] = field(default_factory=list)  # decisions holding it whole
    shared: Fraction = Fraction(0)
    memory: dict[int, str] = field(default_factory=dict)  # MIG memory slice -> the decision holding it
    overlaps: set[str] = field(default_factory=set)
    compute: int = 0
    compute_slices: int = 0
    partitions: dict[int, list[str]] = field(default_factory=dict)  # AMD partition index -> decisions
    partition_modes: dict[int, int] = field(default_factory=dict)  # partitions per device -> held


def _mode(pool: Pool, row: HeldRow, layout: packing.PoolLayout) -> str:
    if row.shares is not None and pool.sharing is not None:
        return f"{pool.sharing} ({pool.shares_per_device} shares per device)"
    if row.holding.profile is not None and layout.kind in packing.PARTITIONED:
        return "MIG instances" if layout.kind == "mig" else "AMD partitions"
    return "whole"


def over_held(pools: Mapping[str, Pool], layout: Callable[[Pool], packing.PoolLayout], held: Iterable[HeldRow], grants: Iterable[NodeGrantRow]) -> list[str]:
    """Every device, core or MiB of a node the live grants (``held``, ``grants``) hold more of
    than the node has, as sentences naming the node, the device and the pools or decisions; empty
    when every node holds what it has. ``pools``: the pools present, by name (grants of a pool not
    in it, or not counted node by node, are left to its own capacity summary)."""
    devices: dict[tuple[str, tuple[object, ...], int], _Device] = defaultdict(_Device)
    cores_held: dict[tuple[str, str, str], int] = defaultdict(int)  # (decision, node, pool) -> a cpu pool's devices
    for row in held:
        pool = pools.get(row.pool or "")
        if pool is None or not pool.node_tracked or row.node is None:
            continue
        if pool.accelerator == "cpu":
            cores_held[(row.decision_id, row.node, pool.name)] += 1  # a cpu pool's devices are its node's cores
            continue
        rules = layout(pool)
        d = devices[(row.node, device_kind(pool), row.holding.device)]
        d.modes.setdefault(_mode(pool, row, rules), set()).add(pool.name)
        h = row.holding
        if row.shares is not None and pool.shares_per_device:
            d.shared += Fraction(row.shares, pool.shares_per_device)
        elif h.profile is None or rules.kind not in packing.PARTITIONED:
            d.whole.append(row.decision_id)
        elif rules.kind == "mig":
            share = rules.shares.get(h.profile)
            d.compute += share.compute if share is not None else h.units or 0
            d.compute_slices = max(d.compute_slices, rules.compute_slices)
            for s in range(h.start or 0, (h.start or 0) + (share.memory if share is not None else 1)):
                if s in d.memory and d.memory[s] != row.decision_id:
                    d.overlaps.update((d.memory[s], row.decision_id))
                d.memory.setdefault(s, row.decision_id)
        else:
            share = rules.shares.get(h.profile)
            per_device = share.partitions if share is not None else 0
            d.partition_modes[per_device] = d.partition_modes.get(per_device, 0) + 1
            d.partitions.setdefault(h.start or 0, []).append(row.decision_id)
    found: list[str] = []
    sizes = _node_sizes(pools.values())
    for (node, kind, index), d in sorted(devices.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2])):
        where = f"node {node!r}, device {index}" + (f" ({_kind_name(kind)})" if kind[1] is not None else "")
        has = sizes.devices.get((node, kind))
        if has is not None and index >= has:
            found.append(f"{where} is held, but the node has {has} such device(s)")
        if len(d.modes) > 1:
            said = "; ".join(f"{mode} by {', '.join(sorted(by))}" for mode, by in sorted(d.modes.items()))
            found.append(f"{where} is held in {len(d.modes)} modes at once ({said}): a device is in one mode at a time")
        if len(d.whole) > 1:
            found.append(f"{where} is held whole by {len(d.whole)} grants ({', '.join(sorted(i[:12] for i in d.whole))})")
        if d.shared > 1:
            found.append(f"{where}: its shares add up to {float(d.shared):g} of the device")
        if d.overlaps:
            found.append(f"{where}: MIG instances of {', '.join(sorted(i[:12] for i in d.overlaps))} overlap in memory slices")
        if d.compute_slices and d.compute > d.compute_slices:
            found.append(f"{where}: MIG instances hold {d.compute} compute slices, the device has {d.compute_slices}")
        if len(d.partition_modes) > 1:
            found.append(f"{where}: AMD partitions of {len(d.partition_modes)} modes at once ({', '.join(f'{m} per device' for m in sorted(d.partition_modes))})")
        for start, holders in sorted(d.partitions.items()):
            if len(holders) > 1:
                found.append(f"{where}: partition {start} is held by {len(holders)} grants ({', '.join(sorted(i[:12] for i in holders))})")
        for per_device, count in sorted(d.partition_modes.items()):
            if per_device and count > per_device:
                found.append(f"{where}: {count} partitions held, its mode cuts it into {per_device}")
    cpu: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    memory: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for g in grants:
        if g.pool in pools and pools[g.pool].node_tracked:
            # A cpu pool's grant holds a core for each of its devices, beside what it asked; a
            # grant made before its CPU said so holds them all the same.
            cores = 1000 * cores_held.pop((g.decision_id, g.node, g.pool), 0)
            cpu[g.node][g.pool] += max(g.cpu_milli, cores, 0)
            memory[g.node][g.pool] += max(g.memory_mib, 0)
    for (_, node, pool_name), count in cores_held.items():
        cpu[node][pool_name] += 1000 * count
    for node, by in sorted(cpu.items()):
        has = sizes.cpu_milli.get(node)
        if has is not None and sum(by.values()) > has:
            found.append(f"node {node!r}: {_cores(sum(by.values()))} CPU cores granted ({_by(by, _cores)}), it has {_cores(has)}")
    for node, by in sorted(memory.items()):
        has = sizes.memory_mib.get(node)
        if has is not None and sum(by.values()) > has:
            found.append(f"node {node!r}: {sum(by.values())} MiB of memory granted ({_by(by, str)}), it has {has}")
    return found


@dataclass
class _Sizes:
    """The nodes' physical totals, from the pools that list them (the smallest figure where two
    pools disagree: a state written before disagreeing facts were refused)."""

    devices: dict[tuple[str, tuple[object, ...]], int] = field(default_factory=dict)
    cpu_milli: dict[str, int] = field(default_factory=dict)
    memory_mib: dict[str, int] = field(default_factory=dict)


def _node_sizes(pools: Iterable[Pool]) -> _Sizes:
    sizes = _Sizes()
    for pool in pools:
        if not pool.node_tracked:
            continue
        for node in pool.node_list():
            if pool.accelerator != "cpu":
                key = (node.name, device_kind(pool))
                sizes.devices[key] = min(sizes.devices.get(key, node.devices), node.devices)
            for table, value in ((sizes.cpu_milli, node.cpu_milli), (sizes.memory_mib, node.memory_mib)):
                if value is not None:
                    table[node.name] = min(table.get(node.name, value), value)
    return sizes


def _kind_name(kind: tuple[object, ...]) -> str:
    return " ".join(str(k) for k in kind if k is not None)


def _cores(milli: int) -> str:
    return f"{milli / 1000:g}"


def _by(by: Mapping[str, int], shown: Callable[[int], str]) -> str:
    return ", ".join(f"{pool} {shown(v)}" for pool, v in sorted(by.items()) if v)


def disagreements(fleet: Sequence[Pool], changed: set[str]) -> list[tuple[str, str]]:
    """(pool, why) for each pool of ``changed`` that says a node's facts otherwise than another
    pool listing it by name: its CPU, memory, block, switch or state; and, between pools of the
    same devices (accelerator, scheduler resource and slices), how many and their model. A node is one machine whichever pools list it:
    a fact one pool leaves unsaid is not a disagreement."""
    by_node: dict[str, list[tuple[Pool, Node]]] = {}
    for pool in fleet:
        for node in pool.node_list() if pool.nodes_named else ():
            by_node.setdefault(node.name, []).append((pool, node))
    found: dict[str, str] = {}
    for name, seen in sorted(by_node.items()):
        if len(seen) < 2 or not any(p.name in changed for p, _ in seen):
            continue
        for (a, x), (b, y) in itertools.combinations(seen, 2):
            if b.name not in changed and a.name in changed:
                a, x, b, y = b, y, a, x  # name the changed pool second
            if b.name not in changed or b.name in found:
                continue
            # (what, one pool's, the other's, whether one left unsaid agrees)
            said: list[tuple[str, object, object, bool]] = [
                ("CPU", _said(x.cpu_milli, cpu_text), _said(y.cpu_milli, cpu_text), True),
                ("memory", _said(x.memory_mib, memory_text), _said(y.memory_mib, memory_text), True), ("block", x.block, y.block, True),
                ("switch", x.switch, y.switch, True), ("state", x.state, y.state, True),
            ]  # fmt: skip
            if (a.accelerator, a.gres_type, a.fixed_profile) == (b.accelerator, b.gres_type, b.fixed_profile):  # the same devices
                said += [("devices", x.devices, y.devices, True), ("device model", a.model, b.model, False)]
            for what, first, second, unsaid_agrees in said:
                if first != second and not (unsaid_agrees and (first is None or second is None)):
                    found[b.name] = (
                        f"pool {b.name!r} says node {name!r} has {what} {_fact(second)}, pool {a.name!r} says {_fact(first)}: "
                        "a node is one machine whichever pools list it; make them agree"
                    )
                    break
    return sorted(found.items())


def _fact(value: object) -> str:
    return "none named" if value is None else str(value)


def _said(value: int | None, text: Callable[[int], str]) -> str | None:
    return None if value is None else text(value)
