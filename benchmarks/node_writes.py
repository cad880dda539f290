"""Writes on one large pool of nodes: what a placement and a release cost as the pool's nodes grow.

    .venv/bin/python benchmarks/node_writes.py [--nodes 1000,10000] [--writes 40]

For each size, a fresh ``EXA_HOME`` with one pool of N nodes (8 H100, 64 cores and 512 GiB each),
then ``--writes`` placements of 2 devices through the façade (``Hardware.place``), a release of the
oldest live one after every second placement: the store, the managed local OPA and the node packer
are the product's. A write works out again only the nodes its grant took or gave back, on the
rooms the process kept from its last write on the pool; the pool is built from its rows when they
were not kept. Prints JSON: per size, the median and p90 milliseconds of a placement and of a
release, and whether ``audit verify`` (which recounts every node) holds the stored summaries.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.model import Pool, Workload  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def run(nodes: int, writes: int, base: Path) -> dict[str, object]:
    home = base / f"nodes-{nodes}"
    hw = Hardware(home)
    try:
        hw.add_pool(Pool("big", "hpc", "nvidia", 8 * nodes, "eu", model="h100", cost_per_hour=1.0, nodes=nodes, cpu_per_node=64,
                         memory_per_node="512Gi"))  # fmt: skip
        workload = Workload("w", "nvidia", count=2, models=("h100",))
        live = [hw.place(workload).id]  # the first write starts OPA and builds the rooms
        placed: list[float] = []
        released: list[float] = []
        for i in range(writes):
            began = time.perf_counter()
            live.append(hw.place(workload).id)
            placed.append((time.perf_counter() - began) * 1000)
            if i % 2 == 1:
                began = time.perf_counter()
                hw.release(live.pop(0))
                released.append((time.perf_counter() - began) * 1000)
        verified = hw.verify_audit().ok
    finally:
        hw.close()
        stop_server(home)
    return {
        "nodes": nodes,
        "place_ms": {"median": round(statistics.median(placed), 2), "p90": round(_p90(placed), 2), "n": len(placed)},
        "release_ms": {"median": round(statistics.median(released), 2), "p90": round(_p90(released), 2), "n": len(released)},
        "audit_verify_ok": verified,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", default="1000,10000", help="comma-separated pool sizes in nodes")
    parser.add_argument("--writes", type=int, default=40, help="placements per size (a release after every second one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="exa-node-writes-") as base:
        results = [run(int(n), args.writes, Path(base)) for n in args.nodes.split(",")]
    with open("/proc/loadavg", encoding="ascii") as load:
        print(json.dumps({"load": load.read().split()[0], "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
