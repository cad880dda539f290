"""HPC pools from a running Slurm: one pool per partition x GPU GRES type.

Reads nodes (partitions, typed GPU GRES, GRES in use, features, state) from ``sinfo -N --json``
and partition states from ``scontrol -o show partitions``. The accelerator family and model of a
GRES type come from the reviewed table ``gres.yaml``; capabilities are the node features every
node of the pool has. Nodes without GPU GRES make a ``cpu`` pool whose devices are CPUs.

Both shapes of ``sinfo --json`` are read: Slurm <= 22.05 (``nodes: [...]``, OpenAPI v0.0.37/38)
and Slurm >= 23.02 (``sinfo: [...]``, one record per node and partition with ``-N``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

from examlops_policy.discovery import DiscoveredPool, Discovery
from examlops_policy.errors import ExecutorError
from examlops_policy.executors.command import CommandResult, Runner, run_command
from examlops_policy.executors.gres import GresTable
from examlops_policy.model import JSONObject, JSONValue, Pool

SINFO: Final = ("sinfo", "-N", "--json")
PARTITIONS: Final = ("scontrol", "-o", "show", "partitions")
TIMEOUT_S: Final = 30.0

NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
TAG_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")
# A MIG slice typed by its profile, optionally after the device ("1g.10gb", "a100_3g.40gb").
SLICE_RE: Final = re.compile(r"^(?:[a-z0-9.-]+_)?\d+g\.\d+gb$")
# Node states in which no new work starts (Slurm sinfo(1) "NODE STATE CODES").
UNUSABLE: Final = frozenset(
    {"down", "drain", "drained", "draining", "fail", "failing", "future", "inval", "not_responding", "unknown",
     "powered_down", "powering_down", "power_down", "maint", "reboot_issued"}
)  # fmt: skip


@dataclass(frozen=True)
class Gres:
    """One GRES entry of a node: ``gpu:h100:4`` -> Gres("gpu", "h100", 4)."""

    name: str
    type: str | None
    count: int


@dataclass(frozen=True)
class SlurmNode:
    """A node as discovery needs it."""

    name: str
    partitions: tuple[str, ...]
    gres: tuple[Gres, ...]
    gres_used: tuple[Gres, ...]
    features: tuple[str, ...]
    states: tuple[str, ...]
    cpus: int
    alloc_cpus: int

    @property
    def usable(self) -> bool:
        """True when new work can start here (not down, drained, invalid, ...)."""
        return not any(state in UNUSABLE for state in self.states)

    def gpus(self) -> list[Gres]:
        return [g for g in self.gres if g.name == "gpu" and g.count > 0]

    def gpus_used(self, gres_type: str) -> int:
        return sum(g.count for g in self.gres_used if g.name == "gpu" and g.type == gres_type)


@dataclass(frozen=True)
class SlurmCluster:
    """Nodes and partition states as one read of Slurm saw them."""

    version: str
    nodes: tuple[SlurmNode, ...]
    partitions: Mapping[str, str]


# -- parsing ----------------------------------------------------------------------------------


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_gres(text: str | None) -> tuple[Gres, ...]:
    """``gpu:h100:4(S:0-1),gpu:2,tmpsize:7T`` -> typed entries; non-numeric counts are skipped."""
    if not text or text in {"(null)", "N/A"}:
        return ()
    entries: list[Gres] = []
    for item in _split_outside_parens(text):
        item = item.split("(", 1)[0]
        parts = item.split(":")
        if len(parts) == 1:
            name, gres_type, count_text = parts[0], None, "1"
        elif len(parts) == 2:
            name, gres_type, count_text = parts[0], None, parts[1]
        else:
            name, gres_type, count_text = parts[0], ":".join(parts[1:-1]), parts[-1]
        if not count_text.isdigit():
            continue
        entries.append(Gres(name.lower(), gres_type.lower() if gres_type else None, int(count_text)))
    return tuple(entries)


def _features(value: JSONValue) -> tuple[str, ...]:
    if isinstance(value, list):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.split(",")
    else:
        items = []
    return tuple(sorted({i.strip() for i in items if i.strip() and i.strip() != "(null)"}))


def _int(value: JSONValue) -> int:
    if isinstance(value, dict):  # Slurm >= 23.02: {"set": true, "infinite": false, "number": 4}
        value = value.get("number")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _states(state: JSONValue, flags: JSONValue) -> tuple[str, ...]:
    names = list(state) if isinstance(state, list) else [state]
    names += list(flags) if isinstance(flags, list) else []
    return tuple(sorted({str(s).lower().rstrip("*~#!%$@^-") for s in names if s}))


def _node_old(raw: JSONObject) -> SlurmNode:
    return SlurmNode(
        name=str(raw.get("name", "")),
        partitions=tuple(str(p) for p in cast(list[JSONValue], raw.get("partitions") or [])),
        gres=parse_gres(cast("str | None", raw.get("gres"))),
        gres_used=parse_gres(cast("str | None", raw.get("gres_used"))),
        features=_features(raw.get("features")),
        states=_states(raw.get("state"), raw.get("state_flags")),
        cpus=_int(raw.get("cpus")),
        alloc_cpus=_int(raw.get("alloc_cpus")),
    )


def _nodes_new(records: list[JSONValue]) -> list[SlurmNode]:
    """Slurm >= 23.02: one record per (node group, partition); merge a node's partitions."""
    by_name: dict[str, SlurmNode] = {}
    for record in records:
        raw = cast(JSONObject, record)
        names = cast(list[str], cast(JSONObject, raw.get("nodes") or {}).get("nodes") or [])
        partition = cast(JSONObject, raw.get("partition") or {}).get("name")
        gres = cast(JSONObject, raw.get("gres") or {})
        cpus = cast(JSONObject, raw.get("cpus") or {})
        features = cast(JSONObject, raw.get("features") or {})
        for name in names:
            node = SlurmNode(
                name=name,
                partitions=(str(partition),) if partition else (),
                gres=parse_gres(cast("str | None", gres.get("total"))),
                gres_used=parse_gres(cast("str | None", gres.get("used"))),
                features=_features(features.get("total")),
                states=_states(cast(JSONObject, raw.get("node") or {}).get("state"), None),
                cpus=_int(cpus.get("total")) // max(1, len(names)),
                alloc_cpus=_int(cpus.get("allocated")) // max(1, len(names)),
            )
            seen = by_name.get(name)
            if seen is not None:
                node = dataclasses.replace(node, partitions=tuple(sorted(set(seen.partitions) | set(node.partitions))))
            by_name[name] = node
    return list(by_name.values())


def parse_sinfo_json(text: str) -> tuple[str, list[SlurmNode]]:
    """The Slurm version and the nodes of ``sinfo -N --json`` output (either shape)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExecutorError(f"sinfo --json: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise ExecutorError("sinfo --json: expected an object")
    errors = [e for e in cast(list[JSONValue], data.get("errors") or []) if e]
    if errors:
        raise ExecutorError(f"sinfo --json reported errors: {json.dumps(errors)[:300]}")
    meta = cast(JSONObject, data.get("meta") or {})
    slurm = cast(JSONObject, meta.get("Slurm") or meta.get("slurm") or {})
    version = str(slurm.get("release") or "unknown")
    if isinstance(data.get("sinfo"), list):
        nodes = _nodes_new(cast(list[JSONValue], data["sinfo"]))
    elif isinstance(data.get("nodes"), list):
        nodes = [_node_old(cast(JSONObject, n)) for n in cast(list[JSONValue], data["nodes"])]
    else:
        raise ExecutorError("sinfo --json: neither 'nodes' nor 'sinfo' in the output (unsupported Slurm version?)")
    return version, sorted(nodes, key=lambda n: n.name)


def parse_partitions(text: str) -> dict[str, str]:
    """``scontrol -o show partitions`` -> {partition: state (UP, DOWN, DRAIN, INACTIVE)}."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        if "PartitionName" in fields:
            states[fields["PartitionName"]] = fields.get("State", "UNKNOWN").upper()
    return states


# -- reading ----------------------------------------------------------------------------------


def _checked(result: CommandResult) -> str:
    if not result.ok:
        raise ExecutorError(f"{' '.join(result.argv)} failed: {result.reason()} (is Slurm running? see scripts/slurm-up)")
    return result.stdout


def read_cluster(runner: Runner = run_command) -> SlurmCluster:
    """Read nodes and partitions from the running Slurm; ExecutorError when it does not answer."""
    version, nodes = parse_sinfo_json(_checked(runner(SINFO, timeout=TIMEOUT_S)))
    partitions = parse_partitions(_checked(runner(PARTITIONS, timeout=TIMEOUT_S)))
    for node in nodes:
        for name in node.partitions:
            partitions.setdefault(name, "UNKNOWN")
    return SlurmCluster(version, tuple(nodes), partitions)


# -- pools ------------------------------------------------------------------------------------


def _capabilities(nodes: Sequence[SlurmNode], warnings: list[str]) -> tuple[str, ...]:
    common = set(nodes[0].features) if nodes else set()
    for node in nodes[1:]:
        common &= set(node.features)
    tags = set()
    for feature in sorted(common):
        tag = feature.lower()
        if TAG_RE.fullmatch(tag):
            tags.add(tag)
        else:
            warnings.append(f"node feature {feature!r} is not a capability tag (a-z, 0-9, '.', '_', '-'); not advertised")
    return tuple(sorted(tags))


def pools_from_cluster(cluster: SlurmCluster, gres: GresTable, *, region: str, prefix: str = "") -> Discovery:
    """One pool per partition x known GPU GRES type (and per partition's GPU-less nodes: cpu)."""
    warnings: list[str] = []
    found: list[DiscoveredPool] = []
    for partition in sorted(cluster.partitions):
        state = cluster.partitions[partition]
        if not NAME_RE.fullmatch(partition):
            warnings.append(f"partition {partition!r} is not a safe pool or Slurm name; skipped")
            continue
        members = [n for n in cluster.nodes if partition in n.partitions]
        if state != "UP":
            warnings.append(f"partition {partition} is {state}: its pools have nothing free now")
        by_type: dict[str, list[SlurmNode]] = {}
        slices: set[str] = set()
        cpu_nodes: list[SlurmNode] = []
        for node in members:
            gpus = node.gpus()
            if not gpus:
                cpu_nodes.append(node)
            for g in gpus:
                if g.type is None:
                    warnings.append(f"node {node.name}: untyped GPU GRES 'gpu:{g.count}' says no vendor; skipped")
                elif SLICE_RE.fullmatch(g.type):
                    slices.add(node.name)
                elif gres.lookup(g.type) is None:
                    warnings.append(f"node {node.name}: GPU GRES type {g.type!r} is not in gres.yaml; skipped (add it there)")
                else:
                    by_type.setdefault(g.type, []).append(node)
        for gres_type, nodes in sorted(by_type.items()):
            entry = gres.lookup(gres_type)
            assert entry is not None
            name = f"{prefix}{partition}-{gres_type}"
            if not NAME_RE.fullmatch(name):
                warnings.append(f"pool name {name!r} is not safe; skipped")
                continue
            count = sum(g.count for n in nodes for g in n.gpus() if g.type == gres_type)
            free = 0.0
            if state == "UP":
                free = float(sum(max(0, g.count - n.gpus_used(gres_type)) for n in nodes if n.usable for g in n.gpus() if g.type == gres_type))
            fractions = entry.accelerator == "nvidia" and any(n.name in slices for n in nodes)
            pool = Pool(
                name=name, target="hpc", accelerator=entry.accelerator, count=count, region=region,
                supports_fractions=fractions, capabilities=_capabilities(nodes, warnings), model=entry.model,
                partition=partition, gres_type=gres_type,
            )  # fmt: skip
            found.append(DiscoveredPool(pool, free, tuple(n.name for n in nodes)))
        if cpu_nodes:
            name = f"{prefix}{partition}-cpu"
            count = sum(n.cpus for n in cpu_nodes)
            if count > 0 and NAME_RE.fullmatch(name):
                free = float(sum(max(0, n.cpus - n.alloc_cpus) for n in cpu_nodes if n.usable)) if state == "UP" else 0.0
                pool = Pool(name=name, target="hpc", accelerator="cpu", count=count, region=region,
                            capabilities=_capabilities(cpu_nodes, warnings), partition=partition)  # fmt: skip
                found.append(DiscoveredPool(pool, free, tuple(n.name for n in cpu_nodes), ("devices are CPUs",)))
    warnings += _overlaps(found)
    return Discovery(f"slurm {cluster.version}", tuple(found), tuple(dict.fromkeys(warnings)))


def _overlaps(found: Sequence[DiscoveredPool]) -> list[str]:
    """Overlapping partitions are common in Slurm; their pools then count the same devices."""
    warnings = []
    for i, a in enumerate(found):
        for b in found[i + 1 :]:
            same_devices = a.pool.gres_type == b.pool.gres_type and a.pool.accelerator == b.pool.accelerator
            shared = sorted(set(a.nodes) & set(b.nodes))
            if same_devices and shared and a.pool.partition != b.pool.partition:
                warnings.append(
                    f"pools {a.pool.name} and {b.pool.name} share node(s) {', '.join(shared)}: "
                    "they count the same devices (overlapping partitions)"
                )
    return warnings


def discover_slurm(gres: GresTable, *, region: str, prefix: str = "", runner: Runner = run_command) -> Discovery:
    """Read the running Slurm and turn it into pools (see ``pools_from_cluster``)."""
    return pools_from_cluster(read_cluster(runner), gres, region=region, prefix=prefix)


def from_slurm(pool: Pool) -> bool:
    """True for a registered pool that Slurm discovery made (it names a partition)."""
    return pool.target == "hpc" and pool.partition is not None
