"""HPC pools from a running Slurm: one pool per partition x GPU GRES type, node by node.

Reads nodes (partitions, typed GPU GRES and shards, GRES in use with their indices, CPUs and
memory with what is allocated, features, state) from ``sinfo -N --json``, partition states from
``scontrol -o show partitions`` and the network (leaf switches, blocks) from ``scontrol show
topology`` where a topology plugin is configured. The accelerator family and model of a GRES type
come from the reviewed table ``gres.yaml``; capabilities are the node features every node of the
pool has. Nodes without GPU GRES make a ``cpu`` pool whose devices are CPUs.

Each pool lists its nodes (``Pool.nodes``): name, devices of the pool's type, CPUs, memory
(``RealMemory``, MiB), state (``up``; ``drained`` for DRAIN, DRAINING, DRAINED and maintenance;
``down`` for DOWN, FAIL, NOT_RESPONDING and the like) and switch/block. Pools of overlapping
partitions name the same nodes, with the same figures. Typed shards of the pool's GPU type
(``shard:h100:16`` beside ``gpu:h100:4``: Slurm's shared GPU GRES) make the pool shared
(``sharing: time-slice``, shards per GPU); ``mps`` GRES likewise (``sharing: mps``). What each node
has busy is ``DiscoveredPool.usage``; shards in use are read from the running jobs
(``scontrol -d -o show jobs``), since Slurm 22.05's ``GresUsed`` does not count them.

Both shapes of ``sinfo --json`` are read: Slurm <= 22.05 (``nodes: [...]``, OpenAPI v0.0.37/38)
and Slurm >= 23.02 (``sinfo: [...]``, one record per node and partition with ``-N``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

from examlops_policy.discovery import DiscoveredPool, Discovery, NodeUsage
from examlops_policy.errors import ExecutorError, SpecError
from examlops_policy.executors.command import CommandResult, Runner, run_command
from examlops_policy.executors.gres import GresTable
from examlops_policy.model import JSONObject, JSONValue, Node, Pool

SINFO: Final = ("sinfo", "-N", "--json")
PARTITIONS: Final = ("scontrol", "-o", "show", "partitions")
TOPOLOGY: Final = ("scontrol", "show", "topology")
JOBS: Final = ("scontrol", "-d", "-o", "show", "jobs")
SHARING_GRES: Final = {"shard": "time-slice", "mps": "mps"}
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
# Of those, the states in which a node finishes its work and returns (the model's "drained").
DRAINED: Final = frozenset({"drain", "drained", "draining", "maint", "reboot_issued"})


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
    memory: int = 0  # RealMemory, MiB (0: not reported)
    alloc_memory: int = 0
    # (GRES name, type) -> the indices in use, where GresUsed names them.
    used_indices: tuple[tuple[str, str | None, tuple[int, ...]], ...] = ()

    @property
    def usable(self) -> bool:
        """True when new work can start here (not down, drained, invalid, ...)."""
        return not any(state in UNUSABLE for state in self.states)

    @property
    def state(self) -> str:
        """The model's node state: ``up``, ``drained`` (finishes its work, takes none) or ``down``."""
        unusable = {state for state in self.states if state in UNUSABLE}
        if not unusable:
            return "up"
        return "drained" if unusable <= DRAINED else "down"

    def gres_count(self, name: str, gres_type: str | None) -> int:
        return sum(g.count for g in self.gres if g.name == name and g.type == gres_type)

    def indices_used(self, name: str, gres_type: str | None) -> tuple[int, ...]:
        return next((idx for n, t, idx in self.used_indices if n == name and t == gres_type), ())

    def gpus(self) -> list[Gres]:
        return [g for g in self.gres if g.name == "gpu" and g.count > 0]

    def gpus_used(self, gres_type: str) -> int:
        return sum(g.count for g in self.gres_used if g.name == "gpu" and g.type == gres_type)


@dataclass(frozen=True)
class SlurmCluster:
    """Nodes and partition states as one read of Slurm saw them; the leaf switch and block of
    each node where a topology plugin says; shares (shards, MPS) in use per node and GRES type."""

    version: str
    nodes: tuple[SlurmNode, ...]
    partitions: Mapping[str, str]
    switches: Mapping[str, str] = dataclasses.field(default_factory=dict)
    blocks: Mapping[str, str] = dataclasses.field(default_factory=dict)
    shares_used: Mapping[tuple[str, str, str], int] = dataclasses.field(default_factory=dict)


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


_IDX_RE: Final = re.compile(r"\(IDX:([0-9,\-]+)\)")


def parse_gres_indices(text: str | None) -> tuple[tuple[str, str | None, tuple[int, ...]], ...]:
    """``gpu:h100:2(IDX:0,3),gpu:mi300x:0(IDX:N/A)`` -> (("gpu", "h100", (0, 3)),): the indices in use."""
    if not text or text in {"(null)", "N/A"}:
        return ()
    found: list[tuple[str, str | None, tuple[int, ...]]] = []
    for item in _split_outside_parens(text):
        match = _IDX_RE.search(item)
        if not match:
            continue
        parts = item.split("(", 1)[0].split(":")
        name, gres_type = parts[0].lower(), (":".join(parts[1:-1]).lower() or None) if len(parts) > 2 else None
        found.append((name, gres_type, tuple(_ranges(match.group(1)))))
    return tuple(found)


def _ranges(text: str) -> list[int]:
    """``0-2,5`` -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.extend(range(int(low), int(high or low) + 1))
    return out


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist expression as node names: ``gpu[01-03,07],login1`` -> gpu01, gpu02, gpu03,
    gpu07, login1 (leading zeros kept; several bracket groups, e.g. ``r[1-2]n[1-2]``, expand in order)."""
    names: list[str] = []
    for item in _split_outside_brackets(text):
        names.extend(_expand_one(item))
    return names


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text.strip():
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in (p.strip() for p in parts) if p]


def _expand_one(item: str) -> list[str]:
    start = item.find("[")
    if start == -1:
        return [item]
    end = item.find("]", start)
    if end == -1:
        return [item]
    head, body, tail = item[:start], item[start + 1 : end], item[end + 1 :]
    out: list[str] = []
    for part in body.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [item]  # not a hostlist this reader knows: the name as it is
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            out.extend(_expand_one(f"{head}{number:0{width}d}{tail}"))
    return out


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
        memory=_int(raw.get("real_memory")),
        alloc_memory=_int(raw.get("alloc_memory")),
        used_indices=parse_gres_indices(cast("str | None", raw.get("gres_used"))),
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
        memory = cast(JSONObject, raw.get("memory") or {})
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
                memory=_int(memory.get("maximum")),
                alloc_memory=_int(memory.get("allocated")) // max(1, len(names)),
                used_indices=parse_gres_indices(cast("str | None", gres.get("used"))),
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


def parse_topology(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """``scontrol show topology`` -> ({node: leaf switch}, {node: block}). Leaf switches are those
    of ``Level=0`` (topology/tree); blocks are ``BlockName`` lines (topology/block). Empty when no
    topology plugin is configured ("No topology information available")."""
    switches: dict[str, str] = {}
    blocks: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        nodes = expand_hostlist(fields.get("Nodes", "")) if fields.get("Nodes") not in (None, "", "(null)") else []
        if "SwitchName" in fields and fields.get("Level", "0") == "0":
            for node in nodes:
                switches.setdefault(node, fields["SwitchName"])
        elif "BlockName" in fields:
            for node in nodes:
                blocks.setdefault(node, fields["BlockName"])
    return switches, blocks


def parse_jobs_shares(text: str) -> dict[tuple[str, str, str], int]:
    """Shares in use from ``scontrol -d -o show jobs``: {(node, GRES name, type): count} summed over
    the running jobs' per-node ``GRES=shard:h100:3(IDX:1)`` entries (names ``shard`` and ``mps``)."""
    used: dict[tuple[str, str, str], int] = {}
    for line in text.splitlines():
        tokens = line.split()
        fields = dict(token.split("=", 1) for token in tokens if "=" in token)
        if fields.get("JobState") not in ("RUNNING", "SUSPENDED", "COMPLETING"):
            continue
        nodes: list[str] = []
        for token in tokens:  # with -d, each node group: Nodes=... CPU_IDs=... Mem=... GRES=...
            key, _, value = token.partition("=")
            if key == "Nodes":
                nodes = expand_hostlist(value)
            elif key == "GRES" and nodes:
                for g in parse_gres(value):
                    if g.name in SHARING_GRES and g.type is not None and g.count > 0:
                        for node in nodes:
                            used[(node, g.name, g.type)] = used.get((node, g.name, g.type), 0) + g.count
    return used


def read_cluster(runner: Runner = run_command) -> SlurmCluster:
    """Read nodes, partitions and topology from the running Slurm (and the running jobs, when
    shared GPU GRES is in use); ExecutorError when it does not answer."""
    version, nodes = parse_sinfo_json(_checked(runner(SINFO, timeout=TIMEOUT_S)))
    partitions = parse_partitions(_checked(runner(PARTITIONS, timeout=TIMEOUT_S)))
    for node in nodes:
        for name in node.partitions:
            partitions.setdefault(name, "UNKNOWN")
    topology = runner(TOPOLOGY, timeout=TIMEOUT_S)  # answers 0 with nothing where no plugin is set
    switches, blocks = parse_topology(topology.stdout) if topology.ok else ({}, {})
    shares: dict[tuple[str, str, str], int] = {}
    if any(g.name in SHARING_GRES and g.count > 0 for node in nodes for g in node.gres_used):
        shares = parse_jobs_shares(_checked(runner(JOBS, timeout=TIMEOUT_S)))
    return SlurmCluster(version, tuple(nodes), partitions, switches, blocks, shares)


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
            sharing = _sharing(name, gres_type, nodes, warnings)
            pool = Pool(
                name=name, target="hpc", accelerator=entry.accelerator, count=count, region=region,
                supports_fractions=fractions, capabilities=_capabilities(nodes, warnings), model=entry.model,
                partition=partition, gres_type=gres_type,
                nodes=_pool_nodes(cluster, nodes, lambda n: n.gres_count("gpu", gres_type), warnings),
                sharing=sharing[0] if sharing else None, shares_per_device=sharing[1] if sharing else None,
            )  # fmt: skip
            usage = tuple(_usage(cluster, n, n.gpus_used(gres_type), n.indices_used("gpu", gres_type), gres_type) for n in nodes)
            found.append(DiscoveredPool(pool, free, tuple(n.name for n in nodes), usage=usage))
        if cpu_nodes:
            name = f"{prefix}{partition}-cpu"
            count = sum(n.cpus for n in cpu_nodes)
            if count > 0 and NAME_RE.fullmatch(name):
                free = float(sum(max(0, n.cpus - n.alloc_cpus) for n in cpu_nodes if n.usable)) if state == "UP" else 0.0
                counted = [n for n in cpu_nodes if n.cpus > 0]
                pool = Pool(name=name, target="hpc", accelerator="cpu", count=count, region=region,
                            capabilities=_capabilities(cpu_nodes, warnings), partition=partition,
                            nodes=_pool_nodes(cluster, counted, lambda n: n.cpus, warnings))  # fmt: skip
                usage = tuple(_usage(cluster, n, n.alloc_cpus, (), None) for n in counted)
                found.append(DiscoveredPool(pool, free, tuple(n.name for n in cpu_nodes), ("devices are CPUs",), usage))
    warnings += _overlaps(found)
    return Discovery(f"slurm {cluster.version}", tuple(found), tuple(dict.fromkeys(warnings)))


def _pool_nodes(cluster: SlurmCluster, nodes: Sequence[SlurmNode], devices: Callable[[SlurmNode], int],
                warnings: list[str]) -> tuple[Node, ...] | None:  # fmt: skip
    """The pool's nodes as the model says them (the same figures in every pool a node is in);
    None, with a warning, when a node cannot be said (a name the model does not take)."""
    out: list[Node] = []
    for n in nodes:
        try:
            out.append(Node(n.name, devices(n), cpu=n.cpus or None, memory=n.memory or None, state=n.state,
                            block=cluster.blocks.get(n.name), switch=cluster.switches.get(n.name)))  # fmt: skip
        except SpecError as exc:
            warnings.append(f"node {n.name}: {exc.detail}; its pools list no nodes")
            return None
    return tuple(out)


def _sharing(pool: str, gres_type: str, nodes: Sequence[SlurmNode], warnings: list[str]) -> tuple[str, int] | None:
    """(sharing, shares per GPU) when every node of the pool splits each of its ``gres_type`` GPUs
    into the same number of typed shards (or MPS shares); None otherwise (warned when partly)."""
    for kind, sharing in SHARING_GRES.items():
        per_node: set[int] = set()
        for n in nodes:
            gpus, shares = n.gres_count("gpu", gres_type), n.gres_count(kind, gres_type)
            untyped = n.gres_count(kind, None)
            if untyped and not shares:
                warnings.append(f"node {n.name}: untyped {kind} GRES '{kind}:{untyped}' says no GPU type; "
                                f"type it in gres.conf (Name={kind} Type={gres_type}) to share {gres_type} GPUs")  # fmt: skip
            if shares == 0 or gpus == 0 or shares % gpus:
                per_node.add(0 if shares == 0 else -1)
            else:
                per_node.add(shares // gpus)
        if per_node == {0}:
            continue
        if len(per_node) == 1 and min(per_node) >= 2:
            return sharing, per_node.pop()
        warnings.append(f"pool {pool}: its nodes do not split each {gres_type} GPU into the same number of {kind} shares (2 or more); "
                        "not a shared pool")  # fmt: skip
    return None


def _usage(cluster: SlurmCluster, node: SlurmNode, busy: int, indices: tuple[int, ...], gres_type: str | None) -> NodeUsage:
    shares = sum(cluster.shares_used.get((node.name, kind, gres_type), 0) for kind in SHARING_GRES) if gres_type else 0
    return NodeUsage(node.name, busy, indices, shares, node.alloc_cpus * 1000 if node.cpus else None, node.alloc_memory if node.memory else None)


def _overlaps(found: Sequence[DiscoveredPool]) -> list[str]:
    """Overlapping partitions are common in Slurm; their pools then draw on the same devices (one
    capacity: a grant through either takes them from both), which the discovery says."""
    warnings = []
    for i, a in enumerate(found):
        for b in found[i + 1 :]:
            same_devices = a.pool.gres_type == b.pool.gres_type and a.pool.accelerator == b.pool.accelerator
            shared = sorted(set(a.nodes) & set(b.nodes))
            if same_devices and shared and a.pool.partition != b.pool.partition:
                warnings.append(
                    f"pools {a.pool.name} and {b.pool.name} share node(s) {', '.join(shared)}: "
                    "one capacity, a grant through either takes its devices from both (overlapping partitions)"
                )
    return warnings


def discover_slurm(gres: GresTable, *, region: str, prefix: str = "", runner: Runner = run_command) -> Discovery:
    """Read the running Slurm and turn it into pools (see ``pools_from_cluster``)."""
    return pools_from_cluster(read_cluster(runner), gres, region=region, prefix=prefix)


def from_slurm(pool: Pool) -> bool:
    """True for a registered pool that Slurm discovery made (it names a partition)."""
    return pool.target == "hpc" and pool.partition is not None
