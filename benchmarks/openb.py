"""openb: every packer on the published GPU-cluster trace, beside the published figures.

Replays the four openb workloads (``examples/traces/openb``) with the paper's protocol (inflate
1.3, seeds 42-51) for each packer, and writes a table of packer x workload at 100 % and 130 %
arrived demand beside the published means of the paper's simulator (JSON and Markdown), with the
failed pods by kind, the fragmentation at the end, and the seconds per replay.

    .venv/bin/python benchmarks/openb.py                         # all packers, 4 workloads, 10 seeds
    .venv/bin/python benchmarks/openb.py --seeds 42-44 --packers fgd,exa --workloads default
    .venv/bin/python benchmarks/openb.py --jobs 2                # replays in parallel processes

Seconds are CPU seconds of the replay loop in its process (placing every pod, scoring included),
and wall seconds; on a shared machine the CPU figure is the one to compare.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examlops_policy._node_packers import PACKERS  # noqa: E402
from examlops_policy._sim import expected_workload, packer_placer, read_openb_nodes, read_openb_pods, replay  # noqa: E402
from examlops_policy._sim.plot import Line, allocation_svg  # noqa: E402

WORKLOADS = ("default", "gpushare100", "gpuspec10", "multigpu50")
PUBLISHED_NAMES = {"01-Random": "random", "02-DotProd": "dot-product", "03-GpuClustering": "gpu-clustering",
                   "04-GpuPacking": "gpu-packing", "05-BestFit": "best-fit", "06-FGD": "fgd"}
POINTS = (100, 130)


def seeds_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def published(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """Mean over the published seeds at each arrived percent, by (workload, packer)."""
    rows: dict[tuple[str, str], list[dict[str, str]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            key = (row["workload"].removeprefix("openb_pod_list_"), PUBLISHED_NAMES[row["sc_policy"]])
            rows.setdefault(key, []).append(row)
    return {key: {x: round(statistics.fmean(float(r[x]) for r in rs), 2) for x in rs[0] if x.isdigit()} for key, rs in rows.items()}


@dataclass(frozen=True)
class Run:
    """One replay's figures."""

    workload: str
    packer: str
    seed: int
    pods: int
    placed: int
    alloc_pct: dict[int, float]
    failed: dict[str, int]
    fragmentation_pct: float
    wall_seconds: float
    cpu_seconds: float

    def as_json(self) -> dict[str, object]:
        out = asdict(self)
        out["alloc_pct"] = {str(k): v for k, v in self.alloc_pct.items()}
        out["placements_per_second"] = round(self.pods / self.cpu_seconds, 1) if self.cpu_seconds > 0 else None
        return out


def run_layer(data: str, workload: str, packer: str, seeds: Sequence[int], inflate: float, pools: str, home: str) -> list[Run]:
    """Every seed of one packer on one workload through the placement path (``Hardware.simulate``:
    the real OPA's verdicts, the core's selection, the node packer), in one process: the policy is
    asked once per workload signature, on the first seed. Seconds per seed: the replay loop's wall
    time (the first seed's includes asking OPA) and its CPU time in this process."""
    from examlops_policy.hardware import Hardware

    hw = Hardware(Path(home))
    try:
        cpu0 = time.process_time()
        sim = hw.simulate(Path(data) / f"openb_pod_list_{workload}.csv", Path(data) / "openb_node_list_gpu_node.csv", seeds=seeds,
                          inflate=inflate, packers=[packer], pools=pools)  # fmt: skip
        cpu = time.process_time() - cpu0
    finally:
        hw.close()
    run = sim.runs[0]
    wall = sum(r.seconds for r in run.results)
    return [
        Run(workload, packer, r.seed, r.pods, r.placed, r.alloc_pct, r.failed, round(r.fragmentation_pct, 2), round(r.seconds, 3),
            round(cpu * r.seconds / wall, 3) if wall > 0 else 0.0)  # fmt: skip
        for r in run.results
    ]


def run_one(data: str, workload: str, packer: str, seed: int, inflate: float) -> Run:
    nodes = read_openb_nodes(Path(data) / "openb_node_list_gpu_node.csv")
    pods = read_openb_pods(Path(data) / f"openb_pod_list_{workload}.csv", nodes)
    expected = expected_workload(pods)
    cpu0 = time.process_time()
    result = replay(pods, nodes, packer_placer(packer, expected), seed=seed, inflate=inflate, packer=packer, expected=expected)
    cpu = time.process_time() - cpu0
    return Run(workload, packer, seed, result.pods, result.placed, result.alloc_pct, result.failed,
               round(result.fragmentation_pct, 2), round(result.seconds, 3), round(cpu, 3))


def summarise(results: Sequence[Run], pub: dict[tuple[str, str], dict[str, float]]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    keys = sorted({(r.workload, r.packer) for r in results}, key=lambda k: (WORKLOADS.index(k[0]) if k[0] in WORKLOADS else 99, PACKERS.index(k[1]) if k[1] in PACKERS else 99))
    for workload, packer in keys:
        mine = [r for r in results if r.workload == workload and r.packer == packer]
        row: dict[str, object] = {"workload": workload, "packer": packer, "seeds": sorted(r.seed for r in mine)}
        for x in POINTS:
            values = [r.alloc_pct[x] for r in mine]
            mean = round(statistics.fmean(values), 2)
            row[f"alloc_{x}"] = mean
            row[f"alloc_{x}_sd"] = round(statistics.stdev(values), 2) if len(values) > 1 else 0.0
            ref = pub.get((workload, packer), {}).get(str(x))
            row[f"published_{x}"] = ref
            row[f"diff_{x}"] = round(mean - ref, 2) if ref is not None else None
            fgd = pub.get((workload, "fgd"), {}).get(str(x))
            row[f"vs_published_fgd_{x}"] = round(mean - fgd, 2) if fgd is not None else None
        row["cpu_seconds_per_replay"] = round(statistics.fmean(r.cpu_seconds for r in mine), 2)
        row["cpu_seconds_max"] = round(max(r.cpu_seconds for r in mine), 2)
        row["placements_per_second"] = round(statistics.fmean(r.pods / r.cpu_seconds for r in mine), 0)
        row["failed"] = {k: round(statistics.fmean(r.failed[k] for r in mine), 1) for k in ("cpu", "share", "one", "multi")}
        row["fragmentation_pct"] = round(statistics.fmean(r.fragmentation_pct for r in mine), 2)
        out.append(row)
    return out


def mean_curves(results: Sequence[Run], workload: str) -> dict[str, dict[int, float]]:
    curves: dict[str, dict[int, float]] = {}
    for packer in dict.fromkeys(r.packer for r in results if r.workload == workload):
        mine = [r.alloc_pct for r in results if r.workload == workload and r.packer == packer]
        xs = set(mine[0]).intersection(*mine[1:])
        curves[packer] = {x: round(statistics.fmean(c[x] for c in mine), 2) for x in sorted(xs)}
    return curves


def markdown(summary: Sequence[dict[str, object]], meta: dict[str, object]) -> str:
    lines = [
        "# openb: packers beside the published figures" + (
            f", through the placement path (OPA's verdicts, the core's selection, the node packer; pools: {meta['pools']})"
            if meta.get("through") == "layer" else ", each packer over the nodes directly"
        ),
        "",
        f"GPU allocation % at 100 % and 130 % arrived GPU demand, mean of seeds {meta['seeds']} "
        f"(inflate {meta['inflate']}); published: the paper's simulator, mean of seeds 42-51; diff: "
        "against the same packer's published mean (for `exa`: against published FGD). "
        "Failed pods at the end (mean per replay): CPU-only / shared / one GPU / multi-GPU. "
        "Seconds: CPU seconds of one replay's loop (about 10,800 placements for default), mean and max; "
        "placements per second: pods / CPU seconds, mean over the seeds.",
        "",
        "| workload | packer | 100 % | published | 130 % | published | diff 130 | failed c/s/1/m | frag % | s/replay (max) | placements/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(x: object) -> str:
        return "" if x is None else f"{x}"

    for r in summary:
        f = r["failed"]
        assert isinstance(f, dict)
        if r["diff_130"] is not None:
            diff = cell(r["diff_130"])
        else:
            diff = f"{cell(r['vs_published_fgd_130'])} vs FGD"
        lines.append(
            f"| {r['workload']} | {r['packer']} | {r['alloc_100']} | {cell(r['published_100'])} | {r['alloc_130']} | "
            f"{cell(r['published_130'])} | {diff} | {f['cpu']}/{f['share']}/{f['one']}/{f['multi']} | {r['fragmentation_pct']} | "
            f"{r['cpu_seconds_per_replay']} ({r['cpu_seconds_max']}) | {r['placements_per_second']} |"
        )
    lines += ["", f"Machine: {meta['machine']}. {meta['note']}", ""]
    return "\n".join(lines)


def combine(paths: Sequence[str], labels: Sequence[str], workload: str, data: str, svg: str) -> None:
    """One plot of ``workload``'s mean curves from several runs' JSON (each labelled), beside the
    published FGD mean."""
    lines = []
    for path, label in zip(paths, labels):
        doc = json.loads(Path(path).read_text())
        runs = [Run(**{**r, "alloc_pct": {int(k): v for k, v in r["alloc_pct"].items()}})
                for r in ({k: v for k, v in r.items() if k != "placements_per_second"} for r in doc["results"])]
        for packer, curve in mean_curves(runs, workload).items():
            lines.append(Line(f"{packer}, {label}", curve))
    ref = published(Path(data) / "published_allocation.csv").get((workload, "fgd"))
    if ref:
        lines.append(Line("fgd (published)", {int(x): v for x, v in ref.items()}, dashed=True))
    Path(svg).write_text(allocation_svg(lines, title=f"openb {workload}: GPU allocation, mean of seeds 42-51", x_min=50, y_min=50))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--packers", default=",".join(PACKERS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--inflate", type=float, default=1.3)
    ap.add_argument("--data", default=str(ROOT / "examples" / "traces" / "openb"))
    ap.add_argument("--out", default=str(ROOT / "out" / "bench" / "openb.json"))
    ap.add_argument("--markdown", default=None, help="Markdown table (default: beside the JSON, .md)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--through", choices=["packer", "layer"], default="packer",
                    help="packer: each packer over the nodes directly; layer: through the placement path (OPA, selection, packer)")
    ap.add_argument("--pools", choices=["model", "one"], default="model", help="layer: a pool per GPU model, or one pool of every GPU node")
    ap.add_argument("--home", default=str(ROOT / "out" / "bench" / "openb-home"), help="layer: the state home whose OPA judges")
    ap.add_argument("--note", default="Timings taken under load (a shared 2-core machine) unless said otherwise.")
    ap.add_argument("--combine", nargs="+", metavar="LABEL=JSON", help="plot earlier runs' mean curves together (--workloads: the first)")
    ap.add_argument("--svg", default=str(ROOT / "out" / "bench" / "openb-combined.svg"), help="where --combine writes its plot")
    args = ap.parse_args(argv)
    if args.combine:
        pairs = [c.split("=", 1) for c in args.combine]
        combine([p for _, p in pairs], [label for label, _ in pairs], args.workloads.split(",")[0], args.data, args.svg)
        print(f"wrote {args.svg}")
        return 0
    seeds = seeds_of(args.seeds)
    packers = [p for p in args.packers.split(",") if p]
    workloads = [w for w in args.workloads.split(",") if w]
    jobs = [(args.data, w, p, s, args.inflate) for w in workloads for p in packers for s in seeds]
    results: list[Run] = []
    started = time.perf_counter()
    if args.through == "layer":
        layer_jobs = [(args.data, w, p, seeds, args.inflate, args.pools, args.home) for w in workloads for p in packers]
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            for runs in pool.map(run_layer, *zip(*layer_jobs)):
                results.extend(runs)
                for r in runs:
                    print(f"{r.workload:12} {r.packer:15} seed {r.seed}: {r.alloc_pct[100]:6} {r.alloc_pct[130]:6}  {r.wall_seconds} s wall, {r.cpu_seconds} s CPU", flush=True)
    elif args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for r in pool.map(run_one, *zip(*jobs)):
                results.append(r)
                print(f"{r.workload:12} {r.packer:15} seed {r.seed}: {r.alloc_pct[100]:6} {r.alloc_pct[130]:6}  {r.cpu_seconds} s", flush=True)
    else:
        for job in jobs:
            r = run_one(*job)
            results.append(r)
            print(f"{r.workload:12} {r.packer:15} seed {r.seed}: {r.alloc_pct[100]:6} {r.alloc_pct[130]:6}  {r.cpu_seconds} s", flush=True)
    pub = published(Path(args.data) / "published_allocation.csv")
    summary = summarise(results, pub)
    meta: dict[str, object] = {
        "seeds": args.seeds, "inflate": args.inflate, "packers": packers, "workloads": workloads,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "note": args.note, "wall_seconds": round(time.perf_counter() - started, 1), "through": args.through,
        "pools": args.pools if args.through == "layer" else None,
        "source": "examples/traces/openb (Weng et al., ATC'23; Apache-2.0; see its README.md)",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "summary": summary, "results": [r.as_json() for r in results]}, indent=1) + "\n")
    md = Path(args.markdown) if args.markdown else out.with_suffix(".md")
    md.write_text(markdown(summary, meta))
    for workload in workloads:
        lines = [Line(p, c) for p, c in mean_curves(results, workload).items()]
        ref = pub.get((workload, "fgd"))
        if ref:
            lines.append(Line("fgd (published)", {int(x): v for x, v in ref.items()}, dashed=True))
        svg = out.with_name(f"{out.stem}-{workload}.svg")
        svg.write_text(allocation_svg(lines, title=f"openb {workload}: GPU allocation, mean of seeds {args.seeds}", x_min=50, y_min=50))
    print(markdown(summary, meta))
    print(f"wrote {out} and {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
