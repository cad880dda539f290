"""The decision core's vocabulary: pools, workloads, verdicts, placements and rejections.

Plain frozen dataclasses with no I/O. Names follow the E8 specification: a ``Workload`` is placed
on a ``Pool``; ``place()`` returns a ``Placement`` or a ``Rejection`` (a ``Queued`` when it waits in
the queue); every pool gets a
``PoolVerdict`` with stable reason codes.

``Pool`` and ``Workload`` check every field on construction, types and values, as a YAML file is
checked (``SpecError`` naming the field and what was expected), so a bare string where a list of
tags belongs never becomes a tuple of letters. Facts that need the reviewed tables (a region's
jurisdiction, a model's accelerator) are checked where the tables are at hand
(``examlops_policy.specs``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Final, Literal, Union

from examlops_policy import quantities
# A pool's capacity summary and its rows, and what a grant holds on a node, are records (made per
# decision, by the million in a replay: ``_record``'s docstring says why not dataclasses); named
# here with the rest of the model.
from examlops_policy._holding import Holding as Holding
from examlops_policy._record import Capacity as Capacity, DeviceShare as DeviceShare, NodeAllocation as NodeAllocation, NodeRoom as NodeRoom
from examlops_policy.errors import SpecError

# The vocabulary. The reviewed tables (accelerators.yaml, engines.yaml, vocabulary.yaml) are the
# source; tests/test_vocabulary.py holds these, the JSON Schemas, the Rego and the CLI to them.
ACCELERATORS: Final = ("nvidia", "amd", "intel-gaudi", "tpu", "cpu")
ENGINES: Final = ("vllm", "sglang", "ipex", "cpu", "generic")
POOL_TARGETS: Final = ("hpc", "cloud")
WORKLOAD_TARGETS: Final = ("hpc", "cloud", "any")
# Ordered: each class at least as strict as the one before.
RESIDENCIES: Final = ("open", "eu-only", "no-egress", "restricted")
# What selection minimises among the admissible pools of the best tier (``earliest``: the soonest
# estimated start, then cost).
OBJECTIVES: Final = ("cost", "carbon", "balanced", "earliest", "work-cost", "work-carbon", "work-time")
# The objectives that rank by the workload's work (its work_class and work, throughput.yaml): the
# cost or carbon of the whole job on a pool, or its estimated completion (start + run time).
WORK_OBJECTIVES: Final = ("work-cost", "work-carbon", "work-time")
# The objectives whose ranking depends on each decision's start estimates.
START_OBJECTIVES: Final = ("earliest", "work-time")
# The most work a workload may say (in its class's unit).
MAX_WORK: Final = 1e18
# How a pool shares whole devices between workloads (NVIDIA time-slicing or MPS, Slurm shards).
SHARING: Final = ("time-slice", "mps")
# What ``exa hardware simulate --format`` takes: a trace reader's name, or ``generic`` (the generic
# reader for the file's suffix); ``_sim.readers`` registers the readers (and checks these names).
TRACE_FORMATS: Final = ("openb", "generic", "generic-csv", "generic-yaml")
# The node packers (``_node_packers``, which says what each does); the first is the one placement uses.
PACKERS: Final = ("exa", "fgd", "best-fit", "gpu-packing", "dot-product", "gpu-clustering", "random")
# Whether a workload's fraction must be an isolated slice (``required``) or may be a shared device.
ISOLATIONS: Final = ("required", "any")
# Where the nodes of a gang must be, and how firmly.
TOPOLOGIES: Final = ("same-block", "same-switch")
TOPOLOGY_MODES: Final = ("required", "preferred")
# A node takes new work only when ``up``; ``drained`` (cordoned) finishes what runs; ``down`` is gone.
NODE_STATES: Final = ("up", "drained", "down")
# Whether a workload takes spot (preemptible) capacity: never (the default), allow, or require.
SPOT: Final = ("never", "allow", "require")

JSONValue = Union[None, bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject = dict[str, JSONValue]

NAME_MAX: Final = 63
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
NAME_RE: Final = _NAME_RE
"""The names ``name_problem`` accepts by default: one it matches is fine (its first check, for a
caller that checks a million names and calls it only on the others)."""
_TAG_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")
_REGION_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_SOURCE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$")
_CLUSTER_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label (pool.schema.json#/properties/cluster)
MAX_TAGS: Final = 64
MAX_COUNT: Final = {"workload": 100_000, "pool": 10_000_000}
MAX_NODES: Final = 100_000  # nodes of one pool
MAX_GANG: Final = 10_000  # nodes of one workload
MAX_SHARES_PER_DEVICE: Final = 1000  # 1000: milli granularity
MAX_MODELS: Final = 64
# A job's time limit: at least a second (Slurm counts whole minutes, rounding up).
MIN_WALLTIME_S: Final = 1
# Kubernetes node names are DNS subdomains (up to 253 characters); Slurm node names are plainer.
# Nothing here that a Slurm hostlist or a shell would read as syntax (',', '[', ':', spaces).
_NODE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def name_problem(value: object, *, pattern: re.Pattern[str] = _NAME_RE, limit: int = NAME_MAX, what: str = "a name") -> str | None:
    """What is wrong with ``value`` as a name (or tag, or region), or None when it is fine."""
    if not isinstance(value, str):
        return f"{what} must be a string (got {type(value).__name__})"
    if not value:
        return f"{what} must not be empty"
    if len(value) > limit:
        return f"{what} is at most {limit} characters (got {len(value)})"
    if pattern.fullmatch(value):
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{what} must not hold control characters (newline, tab, escape, ...)"
    if pattern is not _NAME_RE and any(c.isupper() for c in value):
        return f"{what} must be lower case (got {value!r})"
    if not value[0].isalnum() or not value[0].isascii():
        return f"{what} must start with a letter or digit (got {value!r})"
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))})
    shown = ", ".join(repr(c) for c in bad[:5])
    return f"{what} may hold only letters, digits, '.', '_' and '-' (got {shown} in {value!r})"


# Said as letters or with a vowel sound: "an nvidia device", "an amd device", "an intel-gaudi device".
_AN: Final = frozenset({"nvidia", "amd", "intel-gaudi"})


def article(word: str) -> str:
    """``word`` with its indefinite article, as it is said: ``an nvidia``, ``a tpu``."""
    return f"an {word}" if word.lower() in _AN or word[:1].lower() in "aeiou" else f"a {word}"


def _bad(field_: str, message: str, owner: str) -> SpecError:
    return SpecError(message, source=owner, field=field_)


def _check_number(owner: str, name: str, value: object, *, low: float, high: float, low_open: bool = False, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        kind = "a whole number" if integer else "a number"
        raise _bad(name, f"must be {kind} (got {quantities.shown(value)})", owner)
    if not math.isfinite(value):
        raise _bad(name, "must be a finite number (not NaN or infinity)", owner)
    if value < low or (low_open and value == low) or value > high:
        said = quantities.number_text
        lower = f"greater than {said(low)}" if low_open else f"at least {said(low)}"
        raise _bad(name, f"must be {lower} and at most {said(high)} (got {said(value)})", owner)


def _check_choice(owner: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _bad(name, f"expected one of {', '.join(choices)} (got {quantities.shown(value)})", owner)


def _check_bool(owner: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _bad(name, f"must be true or false (got {quantities.shown(value)})", owner)


def _tags(owner: str, name: str, value: object) -> tuple[str, ...]:
    """A sequence of capability tags, never a bare string (which would become its letters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise _bad(name, f"must be a list of tags such as [fp8] (got {quantities.shown(value)})", owner)
    if len(value) > MAX_TAGS:
        raise _bad(name, f"at most {MAX_TAGS} tags (got {len(value)})", owner)
    for tag in value:
        problem = name_problem(tag, pattern=_TAG_RE, limit=32, what="a capability tag")
        if problem:
            raise _bad(name, problem, owner)
    return tuple(sorted(set(value)))


def _models(owner: str, value: object) -> tuple[str, ...]:
    """Acceptable device models: a list of names (never a bare string), lower case, sorted."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise _bad("models", f"must be a list of models such as ['v100', 't4'] (got {value!r:.80})", owner)
    if len(value) > MAX_MODELS:
        raise _bad("models", f"at most {MAX_MODELS} models (got {len(value)})", owner)
    for model in value:
        problem = name_problem(model, what="a model")
        if problem:
            raise _bad("models", problem, owner)
    return tuple(sorted({str(m).lower() for m in value}))


def _optional_name(owner: str, name: str, value: object, *, pattern: re.Pattern[str] = _NAME_RE, what: str = "a name") -> None:
    if value is not None:
        problem = name_problem(value, pattern=pattern, what=what)
        if problem:
            raise _bad(name, problem, owner)


def _cpu(owner: str, name: str, value: object) -> int | float:
    """``value`` as cores (whole millicores), the number a spec stores."""
    try:
        return quantities.cores(quantities.cpu_milli(value))
    except ValueError as exc:
        raise _bad(name, str(exc), owner) from exc


def _memory(owner: str, name: str, value: object) -> int:
    """``value`` as whole MiB."""
    try:
        return quantities.memory_mib(value)
    except ValueError as exc:
        raise _bad(name, str(exc), owner) from exc


def _duration(owner: str, name: str, value: object, *, least: int) -> int:
    """``value`` as whole seconds (``quantities.duration_s``)."""
    try:
        return quantities.duration_s(value, least=least)
    except ValueError as exc:
        raise _bad(name, str(exc), owner) from exc


def _instant(owner: str, name: str, value: object) -> str:
    """``value`` as RFC 3339 UTC text (``quantities.instant_text``)."""
    try:
        return quantities.instant_text(value)
    except ValueError as exc:
        raise _bad(name, str(exc), owner) from exc


@dataclass(frozen=True)
class Node:
    """One node of a pool: its ``devices`` of the pool's accelerator and model (slices for a pool
    of fixed slices, CPUs for a ``cpu`` pool), its ``cpu`` in cores and ``memory`` in MiB (None:
    not tracked), its ``state`` (only ``up`` takes new work) and where it sits in the network
    (``block``, ``switch``: topology labels, None when unknown).

    ``cpu`` and ``memory`` may be given as text (``"500m"``, ``"64Gi"``); they are held as the
    numbers a spec stores (cores, MiB).
    """

    name: str
    devices: int
    cpu: int | float | None = None
    memory: int | None = None
    state: str = "up"
    block: str | None = None
    switch: str | None = None

    def __post_init__(self) -> None:
        owner = f"node {self.name!r}" if isinstance(self.name, str) else "node"
        problem = name_problem(self.name, pattern=_NODE_NAME_RE, limit=253, what="a node name")
        if problem:
            raise _bad("name", problem, owner)
        _check_number(owner, "devices", self.devices, low=1, high=MAX_COUNT["pool"], integer=True)
        if self.cpu is not None:
            object.__setattr__(self, "cpu", _cpu(owner, "cpu", self.cpu))
        if self.memory is not None:
            object.__setattr__(self, "memory", _memory(owner, "memory", self.memory))
        _check_choice(owner, "state", self.state, NODE_STATES)
        _optional_name(owner, "block", self.block, what="a block label")
        _optional_name(owner, "switch", self.switch, what="a switch label")

    @property
    def cpu_milli(self) -> int | None:
        """The node's CPU in millicores (None: not tracked)."""
        return None if self.cpu is None else round(self.cpu * 1000)

    @property
    def memory_mib(self) -> int | None:
        """The node's memory in MiB (None: not tracked)."""
        return self.memory

    @property
    def labels(self) -> dict[str, str]:
        """The node's topology labels by level (``block``, ``switch``), those it has."""
        return {level: value for level, value in (("block", self.block), ("switch", self.switch)) if value is not None}

    @property
    def usable(self) -> bool:
        """True when the node takes new work."""
        return self.state == "up"


def node_spec(node: Node) -> JSONObject:
    """A node as a pool's spec stores it: name and devices, then what is set (state when not up)."""
    spec: JSONObject = {"name": node.name, "devices": node.devices}
    for key in ("cpu", "memory", "block", "switch"):
        value = getattr(node, key)
        if value is not None:
            spec[key] = value
    if node.state != "up":
        spec["state"] = node.state
    return spec


def _nodes(owner: str, value: object) -> tuple[Node, ...]:
    """A pool's list of nodes (Node objects or mappings, as a spec file or the store gives them)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise _bad("nodes", f"must be a number of nodes or a list of nodes (got {value!r:.80})", owner)
    if not 1 <= len(value) <= MAX_NODES:
        raise _bad("nodes", f"must list 1 to {MAX_NODES} nodes (got {len(value)})", owner)
    nodes: list[Node] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"nodes[{index}]"
        if isinstance(item, Node):
            node = item
        elif isinstance(item, Mapping):
            try:
                node = Node(**item)
            except SpecError as exc:
                raise _bad(f"{where}.{exc.field}" if exc.field else where, exc.detail, owner) from exc
            except TypeError as exc:  # a field Node does not have, or one it needs
                fields = Node.__dataclass_fields__
                unknown = sorted(str(k) for k in item if k not in fields)
                if unknown:
                    raise _bad(where, f"unknown field(s): {', '.join(unknown)} (fields: {', '.join(fields)})", owner) from exc
                missing = [k for k in ("name", "devices") if k not in item]
                raise _bad(where, f"missing field(s): {', '.join(missing)}", owner) from exc
        else:
            raise _bad(where, f"must be a node such as {{name: gpu-01, devices: 4}} (got {item!r:.80})", owner)
        if node.name in seen:
            raise _bad(f"{where}.name", f"duplicate node name {node.name!r}", owner)
        seen.add(node.name)
        nodes.append(node)
    return tuple(nodes)


@dataclass(frozen=True)
class Pool:
    """A set of identical devices, on an HPC system or in a cloud region.

    ``count`` counts devices, or slices for a pool of fixed slices (``fixed_profile``: a
    scheduler that exposes e.g. MIG ``1g.10gb`` instances as their own resource).

    Nodes: a pool with no node information (``nodes`` None) is one node holding ``count``
    devices, as before nodes existed. ``nodes`` may be a number N of identical nodes (``count``
    split evenly, ``devices_per_node`` each, optionally ``cpu_per_node`` cores and
    ``memory_per_node`` MiB), or the nodes themselves (``Node``, each with its name, devices, CPU,
    memory, state and topology labels; ``count`` is then their devices summed). Only listed nodes
    have real names a scheduler knows (``nodes_named``).

    Sharing: ``sharing`` (``time-slice`` or ``mps``) says the pool's devices are shared between
    workloads without partitioning, each split into ``shares_per_device`` shares (1000: a
    granularity of one thousandth). A share gives no memory isolation under time-slicing and no
    fault isolation under either.

    ``drained``: the pool takes no new grants and keeps the ones it holds (the policy denies it,
    ``pool_drained``). It is set by ``Hardware.drain``/``undrain`` and kept by ``apply``; a pool is
    not registered drained.
    """

    name: str
    target: str
    accelerator: str
    count: int
    region: str
    cost_per_hour: float | None = None
    carbon_factor: float | None = None
    supports_fractions: bool = False
    capabilities: tuple[str, ...] = ()
    model: str | None = None
    power_w: float | None = None
    pue: float | None = None
    partition: str | None = None
    gres_type: str | None = None
    fixed_profile: str | None = None
    spot: bool = False
    price_source: str | None = None
    nodes: int | tuple[Node, ...] | None = None
    devices_per_node: int | None = None
    cpu_per_node: int | float | None = None
    memory_per_node: int | None = None
    sharing: str | None = None
    shares_per_device: int | None = None
    drained: bool = False
    cluster: str | None = None

    def __post_init__(self) -> None:
        owner = f"pool {self.name!r}" if isinstance(self.name, str) else "pool"
        problem = name_problem(self.name, what="a pool name")
        if problem:
            raise _bad("name", problem, owner)
        _check_choice(owner, "target", self.target, POOL_TARGETS)
        _check_choice(owner, "accelerator", self.accelerator, ACCELERATORS)
        _check_number(owner, "count", self.count, low=1, high=MAX_COUNT["pool"], integer=True)
        # "" while a discovery does not know it yet; registering such a pool is refused.
        problem = None if self.region == "" else name_problem(self.region, pattern=_REGION_RE, what="a region")
        if problem:
            raise _bad("region", problem, owner)
        if self.cost_per_hour is not None:
            _check_number(owner, "cost_per_hour", self.cost_per_hour, low=0, high=1_000_000)
        if self.carbon_factor is not None:
            _check_number(owner, "carbon_factor", self.carbon_factor, low=0, high=10_000_000)
        _check_bool(owner, "supports_fractions", self.supports_fractions)
        object.__setattr__(self, "capabilities", _tags(owner, "capabilities", self.capabilities))
        _optional_name(owner, "model", self.model, what="a model")
        if self.power_w is not None:
            _check_number(owner, "power_w", self.power_w, low=0, high=100_000, low_open=True)
        if self.pue is not None:
            _check_number(owner, "pue", self.pue, low=1, high=10)
        _optional_name(owner, "partition", self.partition, what="a partition")
        _optional_name(owner, "gres_type", self.gres_type, what="a GRES type")
        _optional_name(owner, "fixed_profile", self.fixed_profile, what="a slice profile")
        _check_bool(owner, "spot", self.spot)
        _check_bool(owner, "drained", self.drained)
        if self.price_source is not None and not (isinstance(self.price_source, str) and _SOURCE_RE.fullmatch(self.price_source)):
            raise _bad("price_source", f"must say where the price came from, e.g. skypilot:v7/aws/vms.csv@001367d22a00 (got {self.price_source!r})", owner)
        if self.cluster is not None and not (isinstance(self.cluster, str) and _CLUSTER_RE.fullmatch(self.cluster)):
            raise _bad("cluster", f"must be a Kubernetes cluster's MultiKueueCluster name: lower-case letters, digits and dashes, at most 63 (got {self.cluster!r})", owner)
        if self.model is not None:
            object.__setattr__(self, "model", self.model.lower())
        self._check_nodes(owner)
        self._check_sharing(owner)

    def _check_nodes(self, owner: str) -> None:
        per_node = [f for f in ("devices_per_node", "cpu_per_node", "memory_per_node") if getattr(self, f) is not None]
        if self.nodes is None:
            if per_node:
                raise _bad(per_node[0], "needs nodes: how many nodes the pool has (nodes: 1 for one node)", owner)
            return
        if isinstance(self.nodes, int) and not isinstance(self.nodes, bool):
            _check_number(owner, "nodes", self.nodes, low=1, high=min(MAX_NODES, self.count), integer=True)
            if self.count % self.nodes:
                raise _bad(
                    "nodes",
                    f"{self.count} devices do not split evenly over {self.nodes} nodes "
                    f"({self.count} / {self.nodes} is not a whole number): give a count that is a multiple of the nodes, "
                    "or list the nodes",
                    owner,
                )
            each = self.count // self.nodes
            if self.devices_per_node is not None:
                _check_number(owner, "devices_per_node", self.devices_per_node, low=1, high=MAX_COUNT["pool"], integer=True)
                if self.devices_per_node != each:
                    raise _bad("devices_per_node", f"must be count / nodes = {self.count} / {self.nodes} = {each} (got {self.devices_per_node})", owner)
            object.__setattr__(self, "devices_per_node", each)
            if self.cpu_per_node is not None:
                object.__setattr__(self, "cpu_per_node", _cpu(owner, "cpu_per_node", self.cpu_per_node))
            if self.memory_per_node is not None:
                object.__setattr__(self, "memory_per_node", _memory(owner, "memory_per_node", self.memory_per_node))
            return
        nodes = _nodes(owner, self.nodes)
        object.__setattr__(self, "nodes", nodes)
        if per_node:
            raise _bad(per_node[0], "listed nodes each say their own devices, cpu and memory; leave it out", owner)
        total = sum(n.devices for n in nodes)
        if total != self.count:
            raise _bad("count", f"must be the devices of the listed nodes summed ({total}; got {self.count})", owner)

    def _check_sharing(self, owner: str) -> None:
        if self.sharing is None:
            if self.shares_per_device is not None:
                raise _bad("shares_per_device", f"needs sharing ({' or '.join(SHARING)})", owner)
            return
        _check_choice(owner, "sharing", self.sharing, SHARING)
        if self.shares_per_device is None:
            raise _bad("shares_per_device", "must be given with sharing: how many shares each device is split into (e.g. 4; 1000 for thousandths)", owner)
        _check_number(owner, "shares_per_device", self.shares_per_device, low=2, high=MAX_SHARES_PER_DEVICE, integer=True)
        if self.accelerator == "cpu":
            raise _bad("sharing", "a cpu pool has no devices to share", owner)
        if self.fixed_profile is not None:
            raise _bad("sharing", "a pool of fixed slices hands out its slices whole; it is not shared", owner)
        if self.sharing == "mps" and self.accelerator != "nvidia":
            raise _bad("sharing", f"mps is NVIDIA's Multi-Process Service: a {self.accelerator} pool cannot share through it (time-slice can)", owner)

    @property
    def node_tracked(self) -> bool:
        """True when capacity is counted node by node: the pool says its nodes or shares its
        devices. A pool that does neither is one node holding ``count`` devices, counted as before
        nodes existed (its shape, capacity and grants unchanged)."""
        return self.nodes is not None or self.sharing is not None

    @cached_property
    def node_sizes(self) -> tuple[tuple[int, int | None, int | None, int | None, int | None, int], ...] | None:
        """What the policy sees of the pool's nodes (its shape's ``node_sizes``), None when the pool
        is not node-tracked: rows ``(devices, cpu_milli, memory_mib, block, switch, count)``,
        identical nodes counted once, in order. Topology labels become group numbers (the label's
        place among the pool's labels of that level, sorted): only which nodes are together
        matters, so pools of the same hardware share one shape. Every node counts, whatever its
        state: a drained or down node may come back (capacity says what is up now)."""
        if not self.node_tracked:
            return None
        if not isinstance(self.nodes, tuple):  # N identical nodes, or the pool as one node
            first = self.node_list()[0]
            return ((first.devices, first.cpu_milli, first.memory_mib, None, None, self.nodes or 1),)
        nodes = self.node_list()
        blocks = {b: i for i, b in enumerate(sorted({n.block for n in nodes if n.block is not None}))}
        switches = {b: i for i, b in enumerate(sorted({n.switch for n in nodes if n.switch is not None}))}
        counted: dict[tuple[int, int | None, int | None, int | None, int | None], int] = {}
        for n in nodes:
            key = (
                n.devices, n.cpu_milli, n.memory_mib,
                None if n.block is None else blocks[n.block], None if n.switch is None else switches[n.switch],
            )  # fmt: skip
            counted[key] = counted.get(key, 0) + 1
        return tuple((*key, c) for key, c in sorted(counted.items(), key=lambda kv: tuple((v is None, v or 0) for v in kv[0])))

    @property
    def whole_cpus(self) -> bool | None:
        """True when the pool's scheduler allocates whole CPUs only (an HPC pool of a Slurm
        partition: ``--cpus-per-task`` counts cores), None otherwise (its shape's ``whole_cpus``,
        left out while None)."""
        return True if self.target == "hpc" and self.partition is not None else None

    @property
    def node_limits(self) -> tuple[str, ...] | None:
        """Which of ``cpu`` and ``memory`` every node of the pool says (its shape's
        ``node_limits``: what a node is checked for beside its devices), None when the pool is not
        node-tracked or its nodes say neither (a shape left as it was)."""
        if not self.node_tracked:
            return None
        nodes = self.node_list()
        said = tuple(what for what, attr in (("cpu", "cpu_milli"), ("memory", "memory_mib")) if all(getattr(n, attr) is not None for n in nodes))
        return said or None

    @property
    def nodes_named(self) -> bool:
        """True when the pool lists its nodes by the names its scheduler knows them by."""
        return isinstance(self.nodes, tuple)

    def node_list(self) -> tuple[Node, ...]:
        """The pool's nodes, each said in full: the listed ones; N identical nodes named
        ``<pool>-<i>``; or, with no node information, one node named like the pool that holds
        ``count`` devices (CPU and memory not tracked). Worked out once per pool."""
        if isinstance(self.nodes, tuple):
            return self.nodes
        return self._counted_nodes

    @cached_property
    def _counted_nodes(self) -> tuple[Node, ...]:
        if self.nodes is None or isinstance(self.nodes, tuple):
            return (Node(self.name, self.count),)
        each = self.count // self.nodes
        first = Node(f"{self.name}-0", each, self.cpu_per_node, self.memory_per_node)
        # The same node N times but for its name (checked once: the names differ only by number).
        return (first, *(dataclasses.replace(first, name=f"{self.name}-{i}") for i in range(1, self.nodes)))


# Fields that joined Pool later: left out of a pool's stored spec while they have their default,
# so a pool registered before them reads back unchanged.
_LATER_DEFAULTS: Final[dict[str, object]] = {"spot": False, "drained": False}


def pool_spec(pool: Pool) -> JSONObject:
    """The pool as stored and hashed: every field that is set (capabilities always, as a list)."""
    spec: JSONObject = {}
    for name in Pool.__dataclass_fields__:
        value = getattr(pool, name)
        if value is None or value == () or _LATER_DEFAULTS.get(name, ...) == value:
            continue
        if name == "nodes" and isinstance(value, tuple):
            spec[name] = [node_spec(n) for n in value]
        else:
            spec[name] = list(value) if isinstance(value, tuple) else value
    spec["capabilities"] = list(pool.capabilities)
    return spec


@dataclass(frozen=True)
class PoolState:
    """A pool with what is still free on it: ``free`` devices (shares summed, for people),
    ``capacity`` (what can really be placed, device by device) and the devices its scheduler
    reports busy with work this layer did not place (``held_outside``)."""

    pool: Pool
    free: float
    capacity: Capacity = field(default_factory=lambda: Capacity(0))
    held_outside: float = 0.0
    removing: str | None = None  # since when it is to go once its last live grant ends (it is drained)

    @classmethod
    def empty(cls, pool: Pool) -> PoolState:
        """A pool with nothing held (what-if decisions); slices are summarised by the caller."""
        return cls(pool, float(pool.count), Capacity(pool.count))


@dataclass(frozen=True)
class Workload:
    """What a workload needs, said neutrally (accelerator family, tags, target, engine, share).

    ``data_region`` says where the workload's data lives (a region of the regions table), for the
    stricter residency classes; ``allow_cpu_fallback`` lets a CPU stand in for the accelerator.
    ``optimize`` is what selection minimises among the best tier's admissible pools: the grant's
    cost, its carbon (then cost), or ``balanced`` (both normalised, carbon weighted by
    ``carbon_weight``). ``max_cost_per_hour`` / ``max_carbon_per_hour`` cap what the grant may
    cost and emit per hour, as do the caps of the ``project`` (budgets.yaml).

    Per node: ``count`` devices, ``cpu`` cores and ``memory`` MiB (None: not asked for) on each of
    ``nodes`` nodes (a gang: all or nothing, within one pool), optionally all in one network
    ``topology`` (``same-block``, ``same-switch``; ``topology_mode`` ``required`` unless
    ``preferred``). ``models`` names the device models that will do (any of them; empty: any).
    ``isolation`` ``required``: a fraction must be an isolated slice, never a shared device.
    ``spot``: whether spot (preemptible) capacity may be used (never, allow, require).
    ``allow_budget_fallback``: whether a stand-in accelerator may be used when the requested
    accelerator's pools are over the budget (the placement's note says so either way).

    When it must start: ``max_wait`` (whole seconds from the decision; pools whose estimated start
    is later are not taken now) and ``deadline`` (an instant, held as RFC 3339 UTC text ending in
    ``Z``: it must start by then). ``walltime`` is its time limit in whole seconds: part of what a
    scheduler is asked for, since when a job can start depends on how long it may run. Durations
    may be given as text (``"2h"``, ``"30m"``), the deadline with any offset; they are held as the
    numbers and text a spec stores. ``optimize: earliest`` ranks by the soonest estimated start,
    then cost. Every decision asks the candidate pools' owners (Slurm, Kubernetes, the provisioning
    table, free capacity) when they would start it; the ``wait`` check compares those estimates
    with ``max_wait`` and ``deadline`` (docs/waiting.md).

    What it does: ``work`` units of ``work_class`` (a class of throughput.yaml, e.g. 10000
    iterations of ``ResNet-50``); given together or not at all. From them and a pool's throughput,
    its run time, cost and carbon per job there; ``optimize: work-cost``, ``work-carbon`` and
    ``work-time`` rank by those.

    ``priority``: its priority class (priorities.yaml; None: the default class). The class orders
    the queue and may allow preemption; it is not part of what the policy judges a pool by.
    """

    name: str
    accelerator: str
    capabilities: tuple[str, ...] = ()
    target: str | None = None
    engine: str = "generic"
    fraction: float = 1.0
    count: int = 1
    residency: str = "open"
    allow_burst: bool = False
    data_region: str | None = None
    allow_cpu_fallback: bool = False
    optimize: str = "cost"
    carbon_weight: float = 0.5
    max_cost_per_hour: float | None = None
    max_carbon_per_hour: float | None = None
    project: str | None = None
    cpu: int | float | None = None
    memory: int | None = None
    nodes: int = 1
    topology: str | None = None
    topology_mode: str | None = None
    models: tuple[str, ...] = ()
    isolation: str = "any"
    spot: str = "never"
    allow_budget_fallback: bool = True
    max_wait: int | None = None
    deadline: str | None = None
    walltime: int | None = None
    priority: str | None = None
    work_class: str | None = None
    work: float | None = None

    def __post_init__(self) -> None:
        owner = f"workload {self.name!r}" if isinstance(self.name, str) else "workload"
        problem = name_problem(self.name, what="a workload name")
        if problem:
            raise _bad("name", problem, owner)
        _check_choice(owner, "accelerator", self.accelerator, ACCELERATORS)
        object.__setattr__(self, "capabilities", _tags(owner, "capabilities", self.capabilities))
        if self.target is not None:
            _check_choice(owner, "target", self.target, WORKLOAD_TARGETS)
        _check_choice(owner, "engine", self.engine, ENGINES)
        _check_number(owner, "fraction", self.fraction, low=0, high=1, low_open=True)
        _check_number(owner, "count", self.count, low=1, high=MAX_COUNT["workload"], integer=True)
        if self.fraction < 1 and self.count != 1:
            raise _bad("count", f"must be 1 when a fraction below 1 is requested (got {self.count})", owner)
        _check_choice(owner, "residency", self.residency, RESIDENCIES)
        _check_bool(owner, "allow_burst", self.allow_burst)
        _optional_name(owner, "data_region", self.data_region, pattern=_REGION_RE, what="a region")
        _check_bool(owner, "allow_cpu_fallback", self.allow_cpu_fallback)
        _check_choice(owner, "optimize", self.optimize, OBJECTIVES)
        _check_number(owner, "carbon_weight", self.carbon_weight, low=0, high=1)
        if self.max_cost_per_hour is not None:
            _check_number(owner, "max_cost_per_hour", self.max_cost_per_hour, low=0, high=1_000_000)
        if self.max_carbon_per_hour is not None:
            _check_number(owner, "max_carbon_per_hour", self.max_carbon_per_hour, low=0, high=1_000_000_000)
        _optional_name(owner, "project", self.project, what="a project")
        _optional_name(owner, "priority", self.priority, what="a priority class")
        _check_choice(owner, "spot", self.spot, SPOT)
        _check_bool(owner, "allow_budget_fallback", self.allow_budget_fallback)
        object.__setattr__(self, "fraction", float(self.fraction))
        object.__setattr__(self, "carbon_weight", float(self.carbon_weight))
        self._check_nodes(owner)

    def _check_nodes(self, owner: str) -> None:
        if self.cpu is not None:
            object.__setattr__(self, "cpu", _cpu(owner, "cpu", self.cpu))
        if self.memory is not None:
            object.__setattr__(self, "memory", _memory(owner, "memory", self.memory))
        _check_number(owner, "nodes", self.nodes, low=1, high=MAX_GANG, integer=True)
        if self.fraction < 1 and self.nodes != 1:
            raise _bad("nodes", f"must be 1 when a fraction below 1 is requested (got {self.nodes})", owner)
        if self.count * self.nodes > MAX_COUNT["workload"]:
            raise _bad("nodes", f"count x nodes is at most {MAX_COUNT['workload']} devices (got {self.count} x {self.nodes})", owner)
        if self.topology is None:
            if self.topology_mode is not None:
                raise _bad("topology_mode", f"needs topology ({' or '.join(TOPOLOGIES)})", owner)
        else:
            _check_choice(owner, "topology", self.topology, TOPOLOGIES)
            if self.topology_mode is None:
                object.__setattr__(self, "topology_mode", "required")
            _check_choice(owner, "topology_mode", self.topology_mode, TOPOLOGY_MODES)
        object.__setattr__(self, "models", _models(owner, self.models))
        _check_choice(owner, "isolation", self.isolation, ISOLATIONS)
        self._check_times(owner)

    def _check_times(self, owner: str) -> None:
        if self.max_wait is not None:
            object.__setattr__(self, "max_wait", _duration(owner, "max_wait", self.max_wait, least=0))
        if self.deadline is not None:
            object.__setattr__(self, "deadline", _instant(owner, "deadline", self.deadline))
        if self.walltime is not None:
            object.__setattr__(self, "walltime", _duration(owner, "walltime", self.walltime, least=MIN_WALLTIME_S))
        if self.work_class is not None or self.work is not None:
            if self.work_class is None:
                raise _bad("work_class", "is needed with work (the class of throughput.yaml the work is counted in)", owner)
            if self.work is None:
                raise _bad("work", f"is needed with work_class (how many units of {self.work_class} the workload does)", owner)
            _optional_name(owner, "work_class", self.work_class, what="a workload class")
            _check_number(owner, "work", self.work, low=0, high=MAX_WORK, low_open=True)
            object.__setattr__(self, "work", float(self.work))

    @property
    def cpu_milli(self) -> int | None:
        """CPU asked for per node, in millicores (None: not asked for)."""
        return None if self.cpu is None else round(self.cpu * 1000)

    @property
    def effective_target(self) -> str:
        """``any`` when no target was given (HPC first, cloud only by bursting)."""
        return self.target or "any"


@dataclass(frozen=True)
class CheckInfo:
    """A check as the policy's metadata describes it: its name, a title for people, whether it
    judges shapes or pools, and its reason codes as (code, kind, meaning)."""

    name: str
    title: str
    stage: str
    codes: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Reason:
    """Why a pool is not eligible (or why a workload is rejected), with a stable code."""

    code: str
    kind: str
    message: str
    details: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Grant:
    """What a pool gives: ``units`` of a slice ``profile`` (None: whole devices).

    ``share`` is one unit's share of a device, ``devices`` the devices held in all (shares
    summed, every node of a gang counted): what is priced and accounted. ``honored`` is False when
    a fraction was asked for and a whole device is given instead (``why`` says why). ``larger`` is
    True when the fraction is honored with a larger share than the smallest that covers it,
    because that one had no room (the note says so; it is priced as granted).

    Per node: ``units`` are asked of each of ``nodes`` nodes (a gang), beside ``cpu_milli``
    millicores and ``memory_mib`` MiB of the node's own; on a shared pool (``scheme`` time-slice or
    mps) a fraction is ``shares`` of one device's shares, shared without isolation; ``topology``
    is the level the gang's nodes must share (``same-block``, ``same-switch``; None: no
    requirement).
    """

    requested: float
    honored: bool
    share: float
    units: int
    devices: float
    scheme: str | None = None
    geometry: str | None = None
    profile: str | None = None
    why: str | None = None
    note: str | None = None
    larger: bool = False
    nodes: int = 1
    cpu_milli: int = 0
    memory_mib: int = 0
    shares: int | None = None
    topology: str | None = None

    @property
    def per_node(self) -> bool:
        """Whether the grant asks anything of a node beyond its devices (a gang, CPU, memory, a
        share or a required topology)."""
        return self.nodes > 1 or self.cpu_milli > 0 or self.memory_mib > 0 or self.shares is not None or self.topology is not None


@dataclass(frozen=True)
class PoolVerdict:
    """One pool's verdict for one workload: eligible or not, and every reason."""

    pool: str
    eligible: bool
    admissible: bool
    tier: int
    fallback: bool
    burst: bool
    reasons: tuple[Reason, ...]
    grant: Grant
    cost_per_hour: float
    note: str | None = None
    grant_cost_per_hour: float = 0.0
    accelerator: str = ""
    target: str = ""
    region: str = ""
    grant_carbon_per_hour: float = 0.0
    spot: bool = False  # spot (preemptible) capacity: the provider may reclaim it
    # When the pool would start the workload, from whoever can know it (None: not asked: only
    # candidates are, and for a workload without max_wait, deadline or earliest only the chosen one).
    estimate: StartEstimate | None = None
    # Units of the workload's work its grant does per second (throughput.yaml; None: the workload
    # says no work, or no throughput is known for the pool).
    work_rate: float | None = None


@dataclass(frozen=True)
class BurstVerdict:
    """Whether cloud pools were considered, and if so whether the burst was allowed."""

    attempted: bool
    verdict: str | None = None  # "allowed" | "blocked" | "unavailable"
    pool: str | None = None
    region: str | None = None
    reason: Reason | None = None


@dataclass(frozen=True)
class Provenance:
    """What a decision is a function of, so it can be replayed.

    ``input_digest`` covers the workload, the fleet revision and the capacity the decision saw, and
    ``quota_use``: what the projects its pools' quotas count held then (the policy's
    ``quota_use``; None when no quota counted anything); ``policy_revision`` is the bundle revision
    OPA reported serving; ``verdicts`` says whether the pool verdicts were asked for (``fresh``) or
    reused from earlier answers under the same revision.
    """

    input_digest: str
    policy_revision: str
    opa_version: str
    verdicts: str = "fresh"
    fleet_revision: str | None = None
    quota_use: JSONObject | None = None


# -- start estimates -----------------------------------------------------------------------------

# Who said when a pool would start a workload (``StartEstimate.source``): Slurm itself, a Kubernetes
# cluster, the reviewed provisioning table, or the layer's own account of free capacity (now).
Source = Literal["slurm", "kubernetes", "table", "now"]
SOURCES: Final[tuple[Source, ...]] = ("slurm", "kubernetes", "table", "now")
NO_SCHEDULER: Final[Source] = "now"
"""The source of a start where the pool has room now and no scheduler of its own to ask."""


def iso(moment: datetime) -> str:
    """An aware instant as RFC 3339 UTC text with ``Z``, to the second (estimates have no finer grain)."""
    return moment.astimezone(timezone.utc).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


@dataclass(frozen=True)
class StartEstimate:
    """When ``pool`` would start the workload (``at``; None: no estimate, ``reason`` says why),
    who said so (``source``) and when (``observed_at``)."""

    pool: str
    at: datetime | None
    source: Source
    observed_at: datetime
    detail: str
    reason: str | None = None
    facts: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown estimate source {self.source!r} (expected one of {', '.join(SOURCES)})")
        for name in ("at", "observed_at"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValueError(f"{name} must be an aware datetime (got {value!r})")
        if (self.at is None) != (self.reason is not None):
            raise ValueError("an estimate has a start or a reason why it has none, not both")

    @property
    def known(self) -> bool:
        """True when there is an estimated start."""
        return self.at is not None

    def wait(self, now: datetime) -> timedelta | None:
        """How long from ``now`` until the estimated start, in whole seconds as the wait policy
        counts them (zero when it is due); None: unknown."""
        if self.at is None:
            return None
        return timedelta(seconds=max(0, math.floor(self.at.timestamp()) - math.floor(now.timestamp())))

    def age(self, now: datetime) -> timedelta:
        """How old the estimate is at ``now``."""
        return max(timedelta(0), now - self.observed_at)

    def as_json(self) -> JSONObject:
        """The estimate as ``--json`` shows it: times as RFC 3339 UTC text."""
        return {
            "pool": self.pool,
            "estimated_start": None if self.at is None else iso(self.at),
            "estimate_source": self.source,
            "observed_at": iso(self.observed_at),
            "detail": self.detail,
            "reason": self.reason,
            "facts": dict(self.facts),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, object], pool: str | None = None) -> StartEstimate:
        """An estimate as ``as_json`` wrote it (a decision's record keeps its candidates' so);
        ValueError for anything else."""
        at, observed = raw.get("estimated_start"), raw.get("observed_at")
        source, detail, reason, facts = raw.get("estimate_source"), raw.get("detail"), raw.get("reason"), raw.get("facts") or {}
        name = pool if pool is not None else raw.get("pool")
        if not (isinstance(name, str) and isinstance(observed, str) and isinstance(detail, str) and isinstance(facts, dict)):
            raise ValueError(f"not a start estimate: {str(dict(raw))[:120]}")
        if at is not None and not isinstance(at, str) or reason is not None and not isinstance(reason, str):
            raise ValueError(f"not a start estimate: {str(dict(raw))[:120]}")
        return cls(name, None if at is None else _moment(at), source, _moment(observed), detail, reason, facts)  # type: ignore[arg-type]

    def policy_input(self) -> JSONObject:
        """The estimate as the wait policy reads it (``input.pool.estimate``): whole epoch seconds
        (the decision's time is given the same way, ``input.now``)."""
        return {
            "at": None if self.at is None else math.floor(self.at.timestamp()),
            "source": self.source,
            "observed_at": math.floor(self.observed_at.timestamp()),
        }


def _moment(text: str) -> datetime:
    """RFC 3339 text (``iso``'s) as an aware instant; ValueError for anything else."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"a time without its offset: {text!r}")
    return moment




@dataclass(frozen=True)
class Placement:
    """A workload placed on a pool; ``holdings`` are the devices (and slices) it holds, and
    ``allocations`` what it holds node by node (empty where the grant names no node)."""

    workload: Workload
    pool: str
    accelerator: str
    target: str
    region: str
    fallback: bool
    fraction_honored: bool
    note: str | None
    grant: Grant
    cost_per_hour: float
    carbon_factor: float
    model: str | None
    grounded_carbon_per_hour: float | None
    verdicts: Sequence[PoolVerdict]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None
    holdings: tuple[Holding, ...] = ()
    checks: tuple[CheckInfo, ...] = ()
    allocations: tuple[NodeAllocation, ...] = ()
    # When the chosen pool is expected to start it (its StartEstimate; None: none was asked for, as
    # in decisions from before estimates), and the decision's time the estimates were judged at.
    estimate: StartEstimate | None = None
    decided_at: datetime | None = None
    # The pools that tied with this one under the objective (same tier and figures), by name, this
    # one among them: the node packer chose among them (its best node is on this pool). Empty: none tied.
    tied: tuple[str, ...] = ()

    ok: bool = field(default=True, init=False)

    @property
    def outcome(self) -> str:
        """``placed``."""
        return "placed"

    @property
    def device(self) -> str:
        """The device type placed on (the accelerator family)."""
        return self.accelerator

    @property
    def grant_cost_per_hour(self) -> float:
        """USD per hour of what the workload holds (price per device-hour x devices granted)."""
        return self.cost_per_hour * self.grant.devices


@dataclass(frozen=True)
class Rejection:
    """A workload that cannot be placed, with the reason; nothing was reserved. (One that waits in
    the queue instead, its pools only full, is a ``Queued``.)"""

    workload: Workload
    reason: str
    code: str
    verdicts: Sequence[PoolVerdict]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None
    checks: tuple[CheckInfo, ...] = ()
    decided_at: datetime | None = None  # the time the candidates' start estimates were judged at

    ok: bool = field(default=False, init=False)
    queued: bool = field(default=False, init=False)

    @property
    def burst_blocked(self) -> bool:
        """True when the rejection is a burst that data residency blocked."""
        return self.burst.verdict == "blocked"

    @property
    def outcome(self) -> str:
        """``blocked`` (a burst that data governance blocked) or ``rejected``."""
        return "blocked" if self.burst_blocked else "rejected"


@dataclass(frozen=True)
class Queued:
    """A workload that waits in the queue (``place(queue=True)``): not placed now because every pool
    that could take it is only full (``code`` is the policy's ``no_capacity``; ``reason`` and each
    pool's verdict say what it waits for: capacity, a slice, its project's quota). Nothing was
    reserved; the record's ``queue`` (a ``QueueEntry``) says its place in the order and what
    became of it (admitted by which placement, cancelled, failed)."""

    workload: Workload
    reason: str
    code: str
    verdicts: Sequence[PoolVerdict]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None
    checks: tuple[CheckInfo, ...] = ()
    decided_at: datetime | None = None  # the time the candidates' start estimates were judged at

    ok: bool = field(default=False, init=False)
    queued: bool = field(default=True, init=False)

    @classmethod
    def of(cls, rejection: Rejection) -> Queued:
        """The decision that waits, from the selection's ``no_capacity`` rejection."""
        return cls(
            rejection.workload, rejection.reason, rejection.code, rejection.verdicts, rejection.burst, rejection.provenance,
            decision_id=rejection.decision_id, checks=rejection.checks, decided_at=rejection.decided_at,
        )  # fmt: skip

    @property
    def burst_blocked(self) -> bool:
        """False: a blocked burst never waits."""
        return False

    @property
    def outcome(self) -> str:
        """``queued``."""
        return "queued"


Decision = Union[Placement, Rejection, Queued]
