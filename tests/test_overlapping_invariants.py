"""Pools over the same nodes never hold anything twice: random fleets, property-based (issue 30).

Random fleets of nodes (NVIDIA H100 and L4, AMD MI300X, each with its cores and memory) under
overlapping pools of every mode: whole devices, MIG slices (free or of one fixed profile), AMD
partitions, time-slice and MPS shares with any number of shares per device, and CPU pools over the
same nodes. Random sequences of placements and releases go through the product (``Hardware.place``
and ``release``, the real OPA and SQLite). After each step, the live grants are counted against the
nodes' physical totals, as a driver or a kernel would, independently of the layer's own rooms:

* a device is in one mode at a time: held whole by one grant, or cut into slices of one kind, or
  shared in one sharing mode with one number of shares per device;
* whole devices are held once; slices never hold more than the device's compute (sevenths on MIG,
  eighths on an MI300X) nor two grants at the same start; shares, as fractions of the device
  (shares over the pool's shares per device), never exceed one device;
* a node's cores (a CPU pool's devices included: one core each) and memory are never granted
  beyond what the node has, whichever pools granted them;

and ``exa audit verify`` recounts the same state and finds it whole.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, Placement, Pool, Workload
from examlops_policy.views import DecisionRecord
from tests.conftest import open_hardware

# The node kinds: the pools' accelerator, model, devices per node, and the modes their pools may offer.
KINDS = {
    "h100": ("nvidia", 4, ("whole", "mig", "fixed", "time-slice", "mps")),
    "l4": ("nvidia", 2, ("whole", "time-slice", "mps")),
    "mi300x": ("amd", 2, ("whole", "partitions", "time-slice")),
}
COMPUTE = {"nvidia": 7, "amd": 8}  # a device's compute in slice units


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[tuple[str, Node], ...]  # (kind, node)
    pools: tuple[Pool, ...]


def _pool(name: str, kind: str, mode: str, nodes: Sequence[Node], cost: float) -> Pool:
    accelerator, _, _ = KINDS[kind]
    extra: dict[str, object] = {}
    if mode in ("mig", "partitions"):
        extra["supports_fractions"] = True
    elif mode == "fixed":
        extra["fixed_profile"] = "1g.10gb"
    elif mode in ("time-slice", "mps"):
        extra["sharing"] = mode
        extra["shares_per_device"] = {"time-slice": 4, "mps": 8}[mode] if name.endswith("a") else 2
    count = sum(n.devices for n in nodes)
    return Pool(name, "hpc", accelerator, count, "eu", model=kind, nodes=tuple(nodes), cost_per_hour=cost, **extra)  # type: ignore[arg-type]


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    nodes: list[tuple[str, Node]] = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(sorted(KINDS)))
        cores = draw(st.sampled_from([8, 16, 32]))
        memory = draw(st.sampled_from([32768, 131072]))
        nodes.append((kind, Node(f"n{i}", KINDS[kind][1], cores, memory)))
    pools: list[Pool] = []
    for kind in sorted({k for k, _ in nodes}):
        mine = [n for k, n in nodes if k == kind]
        modes = draw(st.lists(st.sampled_from(KINDS[kind][2]), min_size=1, max_size=3))
        for j, mode in enumerate(modes):
            over = draw(st.lists(st.sampled_from(mine), min_size=1, unique_by=lambda n: n.name))
            suffix = "a" if draw(st.booleans()) else "b"
            cost = draw(st.sampled_from([1.0, 2.0, 3.0]))
            pools.append(_pool(f"{kind}-{mode.replace('-', '')}{j}{suffix}", kind, mode, sorted(over, key=lambda n: n.name), cost))
    if draw(st.booleans()):
        over = draw(st.lists(st.sampled_from([n for _, n in nodes]), min_size=1, unique_by=lambda n: n.name))
        cpu_nodes = tuple(Node(n.name, int(n.cpu or 0), n.cpu, n.memory) for n in sorted(over, key=lambda n: n.name))
        pools.append(Pool("cores", "hpc", "cpu", sum(n.devices for n in cpu_nodes), "eu", nodes=cpu_nodes, cost_per_hour=0.5))
    return Fleet(tuple(nodes), tuple(pools))


@st.composite
def workloads(draw: st.DrawFn, index: int) -> Workload:
    accelerator = draw(st.sampled_from(["nvidia", "nvidia", "amd", "cpu"]))
    kw: dict[str, object] = {}
    if accelerator == "cpu":
        kw["count"] = draw(st.integers(1, 12))
    elif draw(st.booleans()):
        kw["fraction"] = draw(st.sampled_from([0.125, 0.25, 0.3, 0.5, 0.75]))
    else:
        kw["count"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        kw["cpu"] = draw(st.sampled_from([1, 2, 4, 6]))
    if draw(st.booleans()):
        kw["memory"] = draw(st.sampled_from(["4Gi", "16Gi", "40Gi"]))
    engine = "cpu" if accelerator == "cpu" else "vllm"
    return Workload(f"w{index}", accelerator, engine=engine, **kw)  # type: ignore[arg-type]


def _live(hw: Hardware) -> list[Placement]:
    records: list[DecisionRecord] = hw.decisions(limit=10_000)
    return [r.decision for r in records if r.released_at is None and isinstance(r.decision, Placement)]


def _check(fleet: Fleet, pools: dict[str, Pool], live: Sequence[Placement]) -> None:
    """The live grants against the nodes' physical totals."""
    kinds = {node.name: kind for kind, node in fleet.nodes}
    sizes = {node.name: node for _, node in fleet.nodes}
    modes: dict[tuple[str, int | str], set[tuple[object, ...]]] = defaultdict(set)
    whole: dict[tuple[str, int | str], int] = defaultdict(int)
    units: dict[tuple[str, int], int] = defaultdict(int)
    starts: dict[tuple[str, int], list[int | None]] = defaultdict(list)
    shared: dict[tuple[str, int], Fraction] = defaultdict(Fraction)
    cores: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    for p in live:
        pool = pools[p.pool]
        for a in p.allocations:
            cores[a.node] += a.cpu_milli
            memory[a.node] += a.memory_mib
            if pool.accelerator == "cpu":
                continue  # its devices are the node's cores, counted in cpu_milli
            assert kinds[a.node] == pool.model, f"{p.pool} granted on {a.node}, a {kinds[a.node]} node"
            if a.share is not None:
                key = (a.node, a.share.device)
                modes[key].add(("shared", pool.sharing, pool.shares_per_device))
                shared[key] += Fraction(a.share.shares, pool.shares_per_device or 1)
            for h in a.holdings:
                if pool.fixed_profile is not None:
                    # A pool of fixed slices counts slices (a scheduler resource of their own, as
                    # MIG's mixed strategy exposes them): each is held once.
                    slot = (a.node, f"{pool.fixed_profile}:{h.device}")
                    modes[slot].add(("fixed",))
                    whole[slot] += 1
                    continue
                key = (a.node, h.device)
                if h.profile is None:
                    modes[key].add(("whole",))
                    whole[key] += 1
                else:
                    modes[key].add(("slices", pool.accelerator))
                    units[key] += h.units or 0
                    starts[key].append(h.start)
    for key, held in modes.items():
        assert len(held) == 1, f"device {key} held in {len(held)} modes at once: {sorted(map(str, held))}"
        assert whole[key] <= 1, f"device {key} held whole {whole[key]} times"
        if not isinstance(key[1], int):
            continue
        accelerator = KINDS[kinds[key[0]]][0]
        assert units[key] <= COMPUTE[accelerator], f"device {key}: slices of {units[key]} units, more than {COMPUTE[accelerator]}"
        assert len(starts[key]) == len(set(starts[key])), f"device {key}: two slices at one start {starts[key]}"
        assert shared[key] <= 1, f"device {key} shared {shared[key]} times over"
        assert key[1] < sizes[key[0]].devices, f"device {key} beyond the node's {sizes[key[0]].devices}"
    for name, milli in cores.items():
        assert milli <= round((sizes[name].cpu or 0) * 1000), f"node {name}: {milli}m of CPU granted, it has {sizes[name].cpu} cores"
    for name, mib in memory.items():
        assert mib <= (sizes[name].memory or 0), f"node {name}: {mib} MiB granted, it has {sizes[name].memory}"


@settings(max_examples=int(os.environ.get("EXA_OVERLAP_EXAMPLES", "20")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fleet=fleets(), data=st.data())
def test_overlapping_pools_never_hold_a_device_share_core_or_mib_twice(
    tmp_path_factory: pytest.TempPathFactory, opa_home: Path, fleet: Fleet, data: st.DataObject
) -> None:
    home = tmp_path_factory.mktemp("overlap")
    hw = open_hardware(home)
    try:
        hw.apply(list(fleet.pools))
        pools = {p.name: p for p in fleet.pools}
        for step in range(data.draw(st.integers(4, 14))):
            live = [r.id for r in hw.decisions(limit=10_000) if r.released_at is None and isinstance(r.decision, Placement)]
            if live and data.draw(st.integers(0, 3)) == 0:
                hw.release(data.draw(st.sampled_from(live)))
            else:
                hw.place(data.draw(workloads(step)))
            _check(fleet, pools, _live(hw))
        assert hw.verify_audit().ok
    finally:
        hw.close()
