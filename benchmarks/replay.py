"""The generic replay (``exa hardware simulate --format generic``) as its trace grows: time and peak
memory at 1,000, 16,000 and 1,000,000 workloads.

    .venv/bin/python benchmarks/replay.py [--sizes 1000,16000,1000000] [--nodes 64]

A synthetic site in CSV (``_sim.generic``'s columns): ``--nodes`` nodes of 8 A100 (96 cores, 1 TiB)
in one pool, and N workloads arriving one a minute, each running 30 minutes to 4 hours (about 60 % of the
devices held once it settles): whole
devices (1, 2, 4 or 8), a share of one (0.25, 0.5), or CPU only, each with CPU and memory, drawn
from a fixed seed. Each size runs in its own process (``Hardware.simulate``, the path the command
runs: the CSV read and checked, every workload through the policy's verdicts, the selection and
the node packer, the allocation curve), so its peak RSS is its own. Prints JSON: per size, the
seconds to read and replay (wall, and the CPU seconds of this process: the machine may be shared),
the placements per second, the peak RSS in MiB, and how many of the package's modules ran compiled
(``--package DIR``: the package imported from DIR, for example ``scripts/build-compiled``'s build
with the decision path compiled by mypyc; else the checkout's sources, none compiled).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = (
    {"accelerator": "nvidia", "count": 1}, {"accelerator": "nvidia", "count": 2}, {"accelerator": "nvidia", "count": 4},
    {"accelerator": "nvidia", "count": 8}, {"accelerator": "nvidia", "fraction": 0.5}, {"accelerator": "nvidia", "fraction": 0.25},
    {"accelerator": "cpu"},
)  # fmt: skip


def write_trace(folder: Path, workloads: int, nodes: int, seed: int = 42) -> tuple[Path, Path]:
    """The node list and the workload list (CSV) of a synthetic site."""
    rng = random.Random(seed)
    node_csv = folder / "nodes.csv"
    with node_csv.open("w", encoding="utf-8") as out:
        out.write("node,pool,region,accelerator,model,devices,cpu,memory,cost_per_hour\n")
        for i in range(nodes):
            out.write(f"gpu-{i:05d},a100,eu,nvidia,a100,8,96,1Ti,2.4\n")
    work_csv = folder / "workloads.csv"
    with work_csv.open("w", encoding="utf-8") as out:
        out.write("name,arrival,duration,accelerator,count,fraction,cpu,memory,models\n")
        for i in range(workloads):
            shape = rng.choice(SHAPES)
            cpu, memory = rng.choice((2, 4, 8, 16)), rng.choice(("8Gi", "16Gi", "64Gi"))
            duration = rng.randrange(1800, 4 * 3600)
            out.write(f"w{i},{60 * i},{duration},{shape['accelerator']},{shape.get('count', '')},{shape.get('fraction', '')},{cpu},{memory},\n")
    return node_csv, work_csv


def compiled_modules() -> list[str]:
    """The package's modules this process imported compiled (extension modules), by name."""
    return sorted(name for name, m in sys.modules.items() if name.startswith("examlops_policy") and str(getattr(m, "__file__", "")).endswith(".so"))


def one(workloads: int, nodes: int, home: Path | None = None) -> dict[str, object]:
    """One size, in this process (run by ``main`` in a child per size). ``home``: an EXA_HOME whose
    OPA its caller started and stops (``replay_instructions.py``, whose child runs under valgrind)."""
    from examlops_policy._sim.simulate import PackerRun
    from examlops_policy.hardware import Hardware
    from examlops_policy.opa import stop_server

    with tempfile.TemporaryDirectory(prefix="exa-replay-") as base:
        folder = Path(base)
        node_csv, work_csv = write_trace(folder, workloads, nodes)
        own = home is None
        home = folder / "home" if home is None else home
        hw = Hardware(home)
        try:
            hw.policy.confirm()  # the OPA started before the clock: what is timed is the replay
            began, cpu_began = time.perf_counter(), time.process_time()
            result = hw.simulate(work_csv, node_csv, format="generic")
            seconds, cpu = time.perf_counter() - began, time.process_time() - cpu_began
        finally:
            hw.close()
            if own:
                stop_server(home)
    packer_run = result.runs[0]
    assert isinstance(packer_run, PackerRun), "a generic trace replays per packer"
    run = packer_run.results[0]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "workloads": workloads, "nodes": nodes, "seconds": round(seconds, 2), "replay_seconds": round(run.seconds, 2),
        "cpu_seconds": round(cpu, 2), "placed": run.placed, "workloads_per_second": round(workloads / seconds, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "compiled_modules": len(compiled_modules()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,16000,1000000", help="comma-separated numbers of workloads")
    parser.add_argument("--nodes", type=int, default=64, help="nodes of 8 devices in the site")
    parser.add_argument("--package", type=Path, help="import the package from this folder (scripts/build-compiled's), not the checkout")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one size
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)  # with --one: a home whose OPA the caller runs
    parser.add_argument("--trace-only", action="store_true", help=argparse.SUPPRESS)  # with --one: the trace written, nothing replayed (replay_instructions.py)
    args = parser.parse_args(argv)
    if args.package is not None:
        if not (args.package / "examlops_policy" / "__init__.py").is_file():
            parser.error(f"--package {args.package}: no examlops_policy package there (scripts/build-compiled {args.package} builds one)")
        sys.path.insert(0, str(args.package.resolve()))
        # A package installed elsewhere finds no .tools/bin/opa beside it: the checkout's, unless one is named.
        if "EXA_OPA_BIN" not in os.environ and "EXA_OPA_URL" not in os.environ and (ROOT / ".tools" / "bin" / "opa").is_file():
            os.environ["EXA_OPA_BIN"] = str(ROOT / ".tools" / "bin" / "opa")
    if args.one is not None and args.trace_only:
        with tempfile.TemporaryDirectory(prefix="exa-replay-") as base:
            write_trace(Path(base), args.one, args.nodes)
        return 0
    if args.one is not None:
        print(json.dumps(one(args.one, args.nodes, args.home)))
        return 0
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        package = [] if args.package is None else ["--package", str(args.package)]
        done = subprocess.run([sys.executable, __file__, "--one", str(size), "--nodes", str(args.nodes), *package], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            results.append({"workloads": size, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    with open("/proc/loadavg", encoding="ascii") as load:
        print(json.dumps({"load": load.read().split()[0], "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
