"""``exa hardware simulate`` through the placement path: the real OPA judges, the core selects, the
node packer ``place`` uses chooses; nothing is written. Known answers on tiny hand-made traces,
the errors of bad traces (file, line, column), the simulator and ``place`` agreeing node for node
and device for device, the CLI's JSON, and the summaries worked out for the changed nodes alone
equal to ones worked out whole."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from examlops_policy import Placement
from examlops_policy._core import rooms
from examlops_policy._core.state import Capacities
from examlops_policy._nodes import Node as TraceNode
from examlops_policy._nodes import NodeRequest
from examlops_policy._sim.layer import LayerPlacer, fleet_pools, workload_of
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Grant, NodeAllocation, NodeRoom, Pool
from examlops_policy.tables import load_tables
from tests.conftest import run_exa

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def tiny(tmp_path: Path, pods: str, nodes: str = "n0,8000,16384,2,T4\nn1,8000,16384,2,V100M16\n") -> tuple[Path, Path]:
    return write(tmp_path / "nodes.csv", NODES + nodes), write(tmp_path / "pods.csv", PODS + pods)


# -- the openb protocol through the layer, known answers ----------------------------------------------


def test_every_pod_fits_whatever_the_order_so_allocation_is_all_of_it(hardware: Hardware, tmp_path: Path) -> None:
    # 4 GPUs asked of 4 (inflate 1.0: nothing tuned), each model's pods only on its model's nodes,
    # a CPU-only pod on the host CPU left beside them: every seed places everything.
    nodes, pods = tiny(tmp_path, "a,2000,1024,1,1000,T4\nb,2000,1024,1,1000,T4\nc,2000,1024,1,1000,V100M16\nd,2000,1024,1,1000,V100M16\ne,4000,1024,0,0,\n")
    sim = hardware.simulate(pods, nodes, inflate=1.0, seeds=[1, 2, 3])
    run = sim.runs[0]
    assert run.packer == "exa" and sim.pools == ("cpu", "t4", "v100m16")
    assert [r.placed for r in run.results] == [5, 5, 5]
    assert run.alloc_pct[100] == 100.0
    assert run.failed == {"cpu": 0, "share": 0, "one": 0, "multi": 0}


def test_a_third_pod_asking_a_model_with_two_devices_fails_by_the_models_rule(hardware: Hardware, tmp_path: Path) -> None:
    # Three pods want T4 (two T4 devices), two want V100M16: one T4 pod fails whatever the order;
    # the V100M16 devices stay with the pods that asked for them. 5 of 4 GPUs asked: inflate 1.25.
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,T4\nb,1000,1024,1,1000,T4\nx,1000,1024,1,1000,T4\nc,1000,1024,1,1000,V100M16\nd,1000,1024,1,1000,V100M16\n")
    sim = hardware.simulate(pods, nodes, inflate=1.25, seeds=[42, 43])
    for r in sim.runs[0].results:
        assert r.placed == 4 and r.failed == {"cpu": 0, "share": 0, "one": 1, "multi": 0}
        assert r.alloc_pct[125] == 100.0 and r.allocated_milli == 4000
    assert sim.runs[0].refused == {}


def test_shares_of_one_device_are_packed_on_one_device_and_the_host_cpu_is_shared(hardware: Hardware, tmp_path: Path) -> None:
    # One node, 1 GPU, 8 cores. Two half-GPU pods share the device (2 cores each); a CPU-only pod
    # asks 5 cores of the same node's CPU: 9 of 8 asked, so exactly one of the three fails,
    # whatever the order (were the host CPU not shared, all three would be placed).
    nodes, pods = tiny(tmp_path, "a,2000,1024,1,500,\nb,2000,1024,1,500,\nc,5000,1024,0,0,\n", nodes="n0,8000,16384,1,T4\n")
    sim = hardware.simulate(pods, nodes, inflate=1.0, seeds=list(range(1, 13)))
    for r in sim.runs[0].results:
        assert r.placed == 2 and sum(r.failed.values()) == 1
    # Two shares of 500 on one device: the device is full, nothing fragmented.
    both = [r for r in sim.runs[0].results if r.failed["cpu"] == 1]
    assert both and all(r.allocated_milli == 1000 and r.fragmentation_milli == 0 for r in both)


def test_the_replay_goes_through_the_layers_selection_pool_by_pool(hardware: Hardware) -> None:
    # Selection picks the pool (cost, then name), the packer the node within it: a pod that any
    # model will do goes to the first pool by name with room (t4 before v100m16, the same price).
    confirmed = hardware.engine.confirm()
    nodes = [TraceNode("n0", 2, "T4", 8000, 16384), TraceNode("n1", 2, "V100M16", 8000, 16384)]
    placer = LayerPlacer(hardware.engine, confirmed, fleet_pools(nodes, region="eu"))
    got = [placer.decide(NodeRequest(devices=1, cpu_milli=1000)) for _ in range(5)]
    assert [(p.pool, p.allocations[0].node) if p else None for p in got] == [("t4", "n0"), ("t4", "n0"), ("v100m16", "n1"), ("v100m16", "n1"), None]
    assert placer.capacity.allocated_milli == 4000
    assert placer.judged_new == 1  # one signature: the policy was asked once
    # The CPU pool sees the 4 cores the GPU pods took: 12 of 16 left.
    cpu = placer.summaries[[p.name for p in placer.pools].index("cpu")]
    assert cpu.nodes is not None and sorted(int(r.cpu or 0) for r in cpu.nodes for _ in range(r.count)) == [6000, 6000]


def test_work_that_ends_gives_back_its_devices_and_cpu_on_every_pool_sharing_the_node(hardware: Hardware) -> None:
    confirmed = hardware.engine.confirm()
    placer = LayerPlacer(hardware.engine, confirmed, fleet_pools([TraceNode("n0", 1, "T4", 4000, 8192)], region="eu"))
    first = placer.decide(NodeRequest(devices=1, cpu_milli=4000))
    assert first is not None
    assert placer.decide(NodeRequest(cpu_milli=1000)) is None  # no CPU left for the host pool either
    placer.release(first)
    assert placer.decide(NodeRequest(devices=1, cpu_milli=4000)) is not None
    assert placer.capacity.allocated_milli == 1000


# -- bad traces ---------------------------------------------------------------------------------------


def test_a_pod_naming_a_model_no_node_has_is_an_error_naming_file_line_and_column(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,T4\nb,1000,1024,1,1000,H800X\n")
    with pytest.raises(SpecError) as err:
        hardware.simulate(pods, nodes)
    assert err.value.source == f"{pods} line 3" and err.value.field == "gpu_spec" and "unknown GPU model 'H800X'" in str(err.value)


def test_a_model_the_policys_models_table_does_not_know_is_an_error_not_pods_failing(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,X9\n", nodes="n0,8000,16384,2,X9\n")
    with pytest.raises(SpecError, match="'X9' of node 'n0' is not in the policy's models table"):
        hardware.simulate(pods, nodes)


def test_a_pod_larger_than_any_node_is_an_error(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,\nbig,1000,1024,4,1000,\n")
    with pytest.raises(SpecError) as err:
        hardware.simulate(pods, nodes)
    assert (err.value.source, err.value.field) == (f"{pods} line 3", "num_gpu") and "larger than every node" in str(err.value)


def test_a_malformed_row_names_its_file_line_and_column(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,\nb,lots,1024,1,1000,\n")
    with pytest.raises(SpecError) as err:
        hardware.simulate(pods, nodes)
    assert (err.value.source, err.value.field) == (f"{pods} line 3", "cpu_milli")


def test_bad_options_are_refused_before_anything_runs(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,\n")
    with pytest.raises(SpecError, match="unknown packer 'tetris'"):
        hardware.simulate(pods, nodes, packers=["tetris"])
    with pytest.raises(SpecError, match="inflate"):
        hardware.simulate(pods, nodes, inflate=0)
    with pytest.raises(SpecError, match="needs the node list"):
        hardware.simulate(pods)


# -- the generic format -------------------------------------------------------------------------------

TRACE = """\
pools:
  - name: t4-eu
    target: hpc
    accelerator: nvidia
    model: t4
    region: eu
    cost_per_hour: 0.4
    nodes:
      - {name: a, devices: 2, cpu: 8, memory: 16Gi}
  - name: h100-eu
    target: hpc
    accelerator: nvidia
    model: h100
    region: eu
    cost_per_hour: 3.0
    nodes:
      - {name: b, devices: 2, cpu: 8, memory: 16Gi}
workloads:
  - {arrival: 0, duration: 10, workload: {name: w1, accelerator: nvidia, count: 2, cpu: 2}}
  - {arrival: 1, workload: {name: w2, accelerator: nvidia, count: 2, cpu: 2}}
  - {arrival: 2, workload: {name: w3, accelerator: nvidia, count: 2, cpu: 2}}
  - {arrival: 10, workload: {name: w4, accelerator: nvidia, count: 2, cpu: 2}}
  - {arrival: 11, workload: {name: w5, accelerator: cpu, cpu: 4}}
"""


def test_a_generic_trace_places_by_price_and_frees_what_ends(hardware: Hardware, tmp_path: Path) -> None:
    # w1 takes the cheaper T4s, w2 the H100s, w3 finds nothing; w1 ends at 10, so w4 gets the T4s.
    trace = write(tmp_path / "trace.yaml", TRACE)
    sim = hardware.simulate(trace, format="generic", packers=["exa", "best-fit"])
    assert sim.pools == ("cpu", "h100-eu", "t4-eu")
    for run in sim.runs:
        r = run.results[0]
        assert (r.placed, r.failed) == (4, {"cpu": 0, "share": 0, "one": 0, "multi": 1})
        assert r.allocated_milli == 4000  # w2 and w4 hold all four GPUs at the end
    curve = sim.to_json()["alloc_pct"]
    assert isinstance(curve, dict) and curve["0"] == 0.0 and max(float(v) for v in curve.values()) == 100.0  # type: ignore[arg-type]
    assert "allocation at the end 100.00 %, at most 100.00 %" in sim.lines()[2]


def test_a_generic_trace_with_a_bad_entry_names_its_line_and_column(hardware: Hardware, tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.yaml", TRACE.replace("{name: w3, accelerator: nvidia, count: 2", "{name: w3, accelerator: nvidia, count: -2"))
    with pytest.raises(SpecError) as err:
        hardware.simulate(trace, format="generic")
    assert err.value.source == f"{trace} line 21 column 67" and err.value.field is not None and err.value.field.startswith("workloads[2].workload.count")
    unknown = write(tmp_path / "unknown.yaml", TRACE.replace("model: h100", "model: h900"))
    with pytest.raises(SpecError) as err:
        hardware.simulate(unknown, format="generic")
    assert err.value.source is not None and err.value.source.startswith(f"{unknown} line 13 column 12") and "h900" in str(err.value)


# -- the simulator and place agree ---------------------------------------------------------------------


def test_the_simulator_and_place_choose_the_same_node_and_devices(make_hardware: object) -> None:
    # The same fleet registered for place, and held in memory for the simulator; the same
    # workloads in the same order: every grant lands on the same pool, node and devices.
    nodes = [TraceNode("n0", 4, "T4", 16000, 65536), TraceNode("n1", 2, "T4", 8000, 32768), TraceNode("n2", 4, "V100", 32000, 65536)]
    pools = fleet_pools(nodes, region="eu")
    hw = make_hardware(pools=pools)  # type: ignore[operator]
    placer = LayerPlacer(hw.engine, hw.engine.confirm(), pools)
    rng = random.Random(7)
    asks = [NodeRequest(devices=1, cpu_milli=2000), NodeRequest(share_milli=300, cpu_milli=1000), NodeRequest(devices=2, cpu_milli=4000),
            NodeRequest(cpu_milli=3000, memory_mib=4096), NodeRequest(share_milli=700, cpu_milli=1000), NodeRequest(devices=1, cpu_milli=1000, models=frozenset({"V100"}))]
    compared = 0
    for k in range(24):
        request = rng.choice(asks)
        ours = placer.decide(request)
        theirs = hw.place(workload_of(request, f"w{k}")).decision
        if ours is None:
            assert not isinstance(theirs, Placement), (k, request, theirs)
            continue
        assert isinstance(theirs, Placement), (k, request, theirs.reason)
        assert (theirs.pool, theirs.allocations) == (ours.pool, ours.allocations), (k, request)
        compared += 1
    assert compared >= 12


# -- summaries of the nodes that changed ----------------------------------------------------------------


def test_a_summary_worked_out_for_the_changed_nodes_equals_one_worked_out_whole() -> None:
    # The rooms are in the order of their figures, each room once.
    tables = load_tables()
    nodes = [TraceNode(f"n{i}", 4 if i % 3 else 8, "T4", 8000 * (1 + i % 4), 65536) for i in range(40)]
    pool = next(p for p in fleet_pools(nodes, region="eu") if p.name == "t4")
    room = Capacities(tables).rooms_of(pool, [])
    rooms.summary(room)

    def figures(r: NodeRoom) -> tuple[int, int, int, int]:  # a room's figures here: CPU and memory tracked, no slices, block or switch
        assert r.cpu is not None and r.memory is not None and not r.slices and r.block is None and r.switch is None
        return (r.whole, int(r.cpu), int(r.memory), r.shares)

    rng = random.Random(3)
    held: list[tuple[NodeAllocation, ...]] = []
    for _ in range(300):
        if held and rng.random() < 0.3:
            gone = held.pop(rng.randrange(len(held)))
            touched = rooms.give_back(room, gone, devices=True)
        else:
            ask = rng.choice([NodeRequest(devices=1, cpu_milli=1000), NodeRequest(share_milli=250, cpu_milli=500), NodeRequest(devices=2, cpu_milli=3000)])
            share = ask.share_milli / 1000 if ask.share_milli else 1.0
            g = Grant(share, True, share, ask.devices or 1, share * (ask.devices or 1), cpu_milli=ask.cpu_milli, shares=ask.share_milli or None)
            got = rooms.choose(room, g, workload_of(ask))
            if got is None:
                continue
            held.append(got)
            touched = [room.capacity.index[a.node] for a in got]
        incremental = rooms.summary(room, touched)
        fresh = Capacities(tables).rooms_of(pool, [])
        fresh.capacity = room.capacity
        assert incremental == rooms.summary(fresh)
        rows = list(incremental[0].nodes or ())
        assert rows == sorted(rows, key=figures) and len({figures(r) for r in rows}) == len(rows)


def test_the_cli_prints_the_issues_json_keys_and_writes_the_plot(exa_home: Path, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,2000,1024,1,1000,T4\nb,2000,1024,1,500,\nc,2000,1024,2,1000,\nd,4000,1024,0,0,\ne,1000,1024,1,500,\n")
    plot = tmp_path / "alloc.svg"
    done = run_exa(exa_home, "hardware", "simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "42-44", "--inflate", "1", "--packer", "exa", "best-fit",
                   "--plot", str(plot), "--json", check=True, timeout=120)  # fmt: skip
    out = json.loads(done.stdout)
    assert {"alloc_pct", "per_seed", "failed", "packer", "placements_per_second"} <= set(out)
    assert "100" in out["alloc_pct"] and out["packer"] == "exa" and [s["seed"] for s in out["per_seed"]] == [42, 43, 44]
    assert all("alloc_pct" in s for s in out["per_seed"]) and set(out["failed"]) == {"cpu", "share", "one", "multi"}
    assert [p["packer"] for p in out["packers"]] == ["exa", "best-fit"]
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and ">best-fit</text>" in svg and "arrived demand" in svg
    assert not (exa_home / "state.db").exists() or "decision" not in run_exa(exa_home, "audit", "verify").stdout.lower()
    bad = run_exa(exa_home, "hardware", "simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "x")
    assert bad.returncode == 2 and "--seeds" in bad.stderr


def test_one_pool_of_every_gpu_node_packs_across_models_and_refuses_a_trace_naming_models(hardware: Hardware, tmp_path: Path) -> None:
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,\nb,1000,1024,2,1000,\nc,1000,1024,1,1000,\n")
    sim = hardware.simulate(pods, nodes, inflate=1.0, seeds=[5], pools="one")
    assert sim.pools == ("cpu", "gpu") and sim.runs[0].results[0].placed == 3
    named = write(tmp_path / "named.csv", PODS + "a,1000,1024,1,1000,T4\n")
    with pytest.raises(SpecError, match="--pools model"):
        hardware.simulate(named, nodes, pools="one")


def test_pools_of_the_trace_share_each_nodes_cpu_with_the_host_pool() -> None:
    pools = fleet_pools([TraceNode("n0", 2, "T4", 8000, 100), TraceNode("n1", 0, None, 4000, 100)], region="eu")
    by = {p.name: p for p in pools}
    assert set(by) == {"t4", "cpu"}
    assert [n.name for n in by["cpu"].node_list()] == ["n0", "n1"] and [n.devices for n in by["cpu"].node_list()] == [8, 4]
    assert isinstance(by["t4"], Pool) and by["t4"].sharing == "time-slice" and by["t4"].shares_per_device == 1000


class _ChangesAfterFirstConfirm:
    """The real OPA, but a second confirmation says another revision is served (a policy deployed
    while a replay ran)."""

    def __init__(self, policy: object) -> None:
        self.policy = policy
        self.confirmed = 0

    def confirm(self) -> object:
        import dataclasses

        real = self.policy.confirm()  # type: ignore[attr-defined]
        self.confirmed += 1
        return real if self.confirmed == 1 else dataclasses.replace(real, revision="sha256:" + "0" * 64)

    def __getattr__(self, name: str) -> object:
        return getattr(self.policy, name)


def test_a_replay_decides_under_one_policy_and_says_so_when_it_changed_meanwhile(hardware: Hardware, tmp_path: Path) -> None:
    from examlops_policy._core.engine import Engine
    from examlops_policy._sim import read_openb_nodes, read_openb_pods
    from examlops_policy._sim.simulate import simulate_openb
    from examlops_policy.errors import PolicyError

    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,\n")
    fleet = read_openb_nodes(nodes)
    engine = Engine(_ChangesAfterFirstConfirm(hardware.policy), hardware.tables, reviewed=None)  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="the policy changed during the replay"):
        simulate_openb(engine, fleet, read_openb_pods(pods, fleet), trace="t", seeds=[1], inflate=1.0, packers=["exa"], region="eu")


def test_a_candidate_policy_folder_judges_the_replay_on_its_own_opa(hardware: Hardware, tmp_path: Path) -> None:
    import shutil

    from examlops_policy.tables import policy_dir, revision

    candidate = tmp_path / "candidate"
    shutil.copytree(policy_dir(), candidate)
    nodes, pods = tiny(tmp_path, "a,1000,1024,1,1000,T4\nb,1000,1024,1,1000,\n")
    sim = hardware.simulate(pods, nodes, inflate=0.5, seeds=[1], policy=candidate)
    assert sim.policy_revision.split("@")[0] == revision(candidate).split("@")[0] and sim.runs[0].results[0].placed == 2
    # The candidate's models table no longer knows V100M16: the trace is refused, naming it.
    models = candidate / "examlops" / "tables" / "models.yaml"
    models.write_text(models.read_text().replace("  v100m16:\n", "  v100m16-gone:\n"))
    with pytest.raises(SpecError, match="'V100M16' of node 'n1' is not in the policy's models table"):
        hardware.simulate(pods, nodes, inflate=1.0, seeds=[1], policy=candidate)


def test_a_candidate_fleet_replaces_a_generic_traces_pools(hardware: Hardware, tmp_path: Path) -> None:
    trace = write(tmp_path / "trace.yaml", TRACE)
    fleet = write(tmp_path / "pools.yaml", TRACE.split("workloads:")[0].replace("devices: 2, cpu: 8, memory: 16Gi}\n  - name: h100-eu", "devices: 4, cpu: 8, memory: 16Gi}\n  - name: h100-eu"))
    sim = hardware.simulate(trace, fleet, format="generic")
    r = sim.runs[0].results[0]
    assert (r.placed, r.failed["multi"]) == (5, 0)  # four T4s: w3 fits beside w2 and w1


NODES_CSV = """node,pool,region,accelerator,model,devices,cpu,memory,cost_per_hour
a,t4-eu,eu,nvidia,t4,2,8,16Gi,0.4
b,h100-eu,eu,nvidia,h100,2,8,16Gi,3.0
"""
WORKLOADS_CSV = """name,arrival,duration,accelerator,count,fraction,cpu,memory,models
w1,0,10,nvidia,2,,2,,
w2,1,,nvidia,2,,2,,
w3,2,,nvidia,2,,2,,
w4,10,,nvidia,2,,2,,
w5,11,,cpu,,,4,,
"""


def test_a_generic_trace_in_csv_is_the_same_trace(hardware: Hardware, tmp_path: Path) -> None:
    nodes, workloads = write(tmp_path / "nodes.csv", NODES_CSV), write(tmp_path / "workloads.csv", WORKLOADS_CSV)
    sim = hardware.simulate(workloads, nodes, format="generic")
    yaml_sim = hardware.simulate(write(tmp_path / "trace.yaml", TRACE), format="generic")
    assert sim.pools == yaml_sim.pools
    r, y = sim.runs[0].results[0], yaml_sim.runs[0].results[0]
    assert (r.placed, r.failed, dict(r.alloc_pct), r.allocated_milli, r.peak_milli) == (y.placed, y.failed, dict(y.alloc_pct), y.allocated_milli, y.peak_milli)
    assert len(r.alloc_pct) > 10 and r.peak_milli > 0


@pytest.mark.parametrize(
    ("nodes", "workloads", "where", "column"),
    [
        (NODES_CSV + "c,t4-eu,us,nvidia,t4,2,8,16Gi,0.4\n", WORKLOADS_CSV, ("nodes.csv", 4), "region"),
        (NODES_CSV.replace("b,h100-eu,eu,nvidia,h100,2,", "b,h100-eu,eu,nvidia,h100,two,"), WORKLOADS_CSV, ("nodes.csv", 3), "devices"),
        (NODES_CSV, WORKLOADS_CSV.replace("w3,2,,nvidia,2,", "w3,2,,nvidia,-2,"), ("workloads.csv", 4), "count"),
        (NODES_CSV, WORKLOADS_CSV.replace("w4,10,", "w4,soon,"), ("workloads.csv", 5), "arrival"),
        (NODES_CSV, WORKLOADS_CSV.replace("w2,1,,nvidia,2,,2,,", "w2,1,,nvidia,2,,2"), ("workloads.csv", 3), None),
    ],
)
def test_a_bad_csv_cell_is_named_by_file_line_and_column(
    hardware: Hardware, tmp_path: Path, nodes: str, workloads: str, where: tuple[str, int], column: str | None
) -> None:
    files = {"nodes.csv": write(tmp_path / "nodes.csv", nodes), "workloads.csv": write(tmp_path / "workloads.csv", workloads)}
    with pytest.raises(SpecError) as err:
        hardware.simulate(files["workloads.csv"], files["nodes.csv"], format="generic")
    assert err.value.source == f"{files[where[0]]} line {where[1]}"
    assert err.value.field == column or (column is not None and (err.value.field or "").endswith(column)), err.value


def test_a_csv_trace_over_the_size_limit_is_refused_before_it_is_used(hardware: Hardware, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CSV trace is read up to ``MAX_CSV_BYTES`` (256 MiB, documented), refused beyond it naming
    the file; a line that never ends (a link to /dev/zero) is cut at the limit, not read whole."""
    from examlops_policy._sim import trace

    documented = getattr(trace, "MAX_CSV_BYTES", None)
    monkeypatch.setattr(trace, "MAX_CSV_BYTES", 4096, raising=False)
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    rows = "".join(f"x{i},{i},,nvidia,1,,2,,\n" for i in range(400))  # ~8 KB
    workloads = write(tmp_path / "workloads.csv", WORKLOADS_CSV + rows)
    with pytest.raises(SpecError) as err:
        hardware.simulate(workloads, nodes, format="generic")
    assert err.value.source == str(workloads) and "larger than 4096 bytes" in str(err.value)
    endless = tmp_path / "endless.csv"
    endless.symlink_to("/dev/zero")
    with pytest.raises(SpecError) as err:
        hardware.simulate(endless, nodes, format="generic")
    assert err.value.source == str(endless) and "larger than 4096 bytes" in str(err.value)
    assert hardware.simulate(write(tmp_path / "small.csv", WORKLOADS_CSV), nodes, format="generic").runs[0].results[0].placed == 4
    assert documented == 256 * 1024 * 1024  # as the README says
