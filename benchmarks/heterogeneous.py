"""Cheapest per hour against cheapest per unit of work on Gavel's heterogeneous cluster.

    .venv/bin/python benchmarks/heterogeneous.py [--jobs 400] [--seed 42] [--out out/bench/heterogeneous.json]

The cluster of Gavel's simulations (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling
Policies for Deep Learning Workloads", OSDI 2020): 36 K80, 36 P100 and 36 V100 (three pools of nine
nodes of four GPUs), at GCP's on-demand prices per GPU-hour in us-central1 (K80 $0.45, P100 $1.46,
V100 $2.48: cloud.google.com/compute/gpus-pricing as SkyPilot's sky/clouds/gcp.py lists them; the
comment on k80 in models.yaml). Gavel's seven job types, each job single-GPU, its work in training
iterations: the job's run time alone on a V100 drawn as Gavel's simulations draw durations, 10^x
minutes with x ~ U[1.5, 3] (probability 0.8) or U[3, 4], times the V100's throughput of its type
(throughput.yaml, Gavel's measurements), so that it runs for work / throughput on whatever GPU it
is given. Job types uniform.

Arrivals: a Poisson process (exponential gaps, ``random.Random(seed)``), at three load levels: the
offered work per hour in V100-hours is 0.5x, 1x and 1.5x the V100 pool's 36 V100-hours per hour
(mean V100 run time 16.8 h: 1.07, 2.14 and 3.21 jobs an hour). The same jobs and arrivals are
replayed under each objective through ``exa hardware simulate --format generic --optimize ...``'s
path (``Hardware.simulate``: the real OPA's verdicts, the core's selection, the node packer): work
waits until a GPU is free, first come first served, a later job taking a GPU an earlier one
cannot use.

What it reports per load and objective: finished jobs, total cost, cost per V100-hour of work (the
unit in which the types' iterations add up; $ per raw iteration beside it), mean and p95
completion time (finish - arrival), utilisation per GPU model. Targets (issue 36): work-cost at
least 20 % lower cost per unit of work than cost with mean completion no worse; work-time at least
30 % lower mean completion than cost. The run says which are met, and the JSON keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402
from examlops_policy.tables import load_tables  # noqa: E402

GAVEL = ("Transformer", "CycleGAN", "ResNet-50", "LM", "ResNet-18", "A3C", "Recommendation")
GPUS = (("k80", 0.45), ("p100", 1.46), ("v100", 2.48))
PER_POOL = 36
PER_NODE = 4
LOADS = (0.5, 1.0, 1.5)
OBJECTIVES = ("cost", "work-cost", "work-time")


def v100_minutes(rng: random.Random) -> float:
    """A job's run time alone on a V100, in minutes, as Gavel's simulations draw durations."""
    return 10 ** (rng.uniform(1.5, 3) if rng.random() <= 0.8 else rng.uniform(3, 4))


def mean_v100_hours() -> float:
    """The mean of ``v100_minutes``, in hours (E[10^U(a, b)] = (10^b - 10^a) / ((b - a) ln 10))."""
    def mean(a: float, b: float) -> float:
        return (10**b - 10**a) / ((b - a) * math.log(10))

    return (0.8 * mean(1.5, 3) + 0.2 * mean(3, 4)) / 60


def trace(jobs: int, load: float, seed: int) -> dict[str, Any]:
    """The cluster and ``jobs`` jobs arriving at ``load`` x the V100 pool's capacity."""
    classes = load_tables().throughput["classes"]
    rng = random.Random(seed)
    per_hour = load * PER_POOL / mean_v100_hours()
    pools = [
        {
            "name": f"{model}s", "target": "hpc", "accelerator": "nvidia", "model": model, "region": "us-central1",
            "cost_per_hour": price, "nodes": [{"name": f"{model}-{i:02d}", "devices": PER_NODE} for i in range(PER_POOL // PER_NODE)],
        }  # fmt: skip
        for model, price in GPUS
    ]
    workloads = []
    at = 0.0
    for i in range(jobs):
        at += rng.expovariate(per_hour) * 3600
        kind = rng.choice(GAVEL)
        rate = float(classes[kind]["models"]["v100"]["per_second"])  # type: ignore[index,call-overload,arg-type]
        work = round(rate * v100_minutes(rng) * 60, 3)
        workloads.append({"arrival": round(at, 3), "workload": {"name": f"job-{i}", "accelerator": "nvidia", "work_class": kind, "work": work}})
    return {"host_cpu": False, "pools": pools, "workloads": workloads}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400, help="jobs per load level (default 400)")
    parser.add_argument("--seed", type=int, default=42, help="arrivals, job types and durations (default 42)")
    parser.add_argument("--out", default="out/bench/heterogeneous.json", help="the JSON report")
    args = parser.parse_args()
    report: dict[str, Any] = {"jobs": args.jobs, "seed": args.seed, "loads": {}, "mean_v100_hours": mean_v100_hours()}
    with tempfile.TemporaryDirectory(prefix="exa-bench-het-") as scratch:
        home = Path(scratch) / "home"
        hw = Hardware(home)
        try:
            for load in LOADS:
                path = Path(scratch) / f"trace-{load}.json"
                path.write_text(json.dumps(trace(args.jobs, load, args.seed)))
                started = time.perf_counter()
                result = hw.simulate(path, format="generic", optimize=OBJECTIVES)
                seconds = time.perf_counter() - started
                data: Any = result.to_json()
                runs: dict[str, Any] = {r["objective"]: r for r in data["runs"]}
                cost, by_work, by_time = runs["cost"], runs["work-cost"], runs["work-time"]
                cheaper = 1 - by_work["cost_per_v100_hour_of_work"] / cost["cost_per_v100_hour_of_work"]
                sooner = 1 - by_time["mean_completion_s"] / cost["mean_completion_s"]
                targets = {
                    "work_cost_cost_per_work_lower_pct": round(100 * cheaper, 1),
                    "work_cost_mean_completion_no_worse": by_work["mean_completion_s"] <= cost["mean_completion_s"],
                    "work_time_mean_completion_lower_pct": round(100 * sooner, 1),
                }
                targets["met"] = cheaper >= 0.20 and bool(targets["work_cost_mean_completion_no_worse"]) and sooner >= 0.30
                report["loads"][str(load)] = {"runs": runs, "targets": targets, "seconds": round(seconds, 2)}
                print(f"load {load}x ({args.jobs} jobs, seed {args.seed}, {seconds:.1f} s):")
                for line in result.lines()[1:]:
                    print("  " + line)
                print(f"  work-cost: {targets['work_cost_cost_per_work_lower_pct']}% lower $/V100-h of work than cost "
                      f"(target >= 20%), mean completion {'no worse' if targets['work_cost_mean_completion_no_worse'] else 'WORSE'}; "
                      f"work-time: {targets['work_time_mean_completion_lower_pct']}% lower mean completion (target >= 30%)"
                      f" -> {'met' if targets['met'] else 'NOT met'}", flush=True)  # fmt: skip
        finally:
            hw.close()
            stop_server(home)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
