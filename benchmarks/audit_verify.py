"""`exa audit verify` at scale: a state of N recorded decisions (default 100,000), verified.

    .venv/bin/python benchmarks/audit_verify.py [--decisions 100000] [--home DIR] [--runs 3]

The state is made by the product itself, through the library's façade on the managed local OPA
(``Hardware(home).place/burst``): 600 pools of 4 devices (HPC AMD, NVIDIA H100 and A100 with MIG
slices, Gaudi, CPU; cloud NVIDIA in the US and the EU, TPU, AMD), a mix of whole-device
placements, fractions, fallbacks, rejections, allowed and blocked bursts, every placement made
with a lease of ``--lease`` seconds, so the next write after it ends releases it (audited as
``expired``) and the fleet never fills. (Small pools and leases keep the build's writes cheap:
a write's capacity queries read every holding its pool ever had, and a release by id scans the
decisions, so a few large pools with explicit releases slow down as the history grows.) Only the
SQLite commit's fsync is turned off while the state is made (``PRAGMA synchronous=OFF``): the rows,
holdings, records and audit entries are the product's. ``--home`` keeps the state (a later run
with the same ``--home`` and count reuses it).

Then ``exa audit verify --json`` runs ``--runs`` times as a fresh process (the figure cron and CI
see: start, open, one consistent read streaming the log and the decisions, chain, records, state and
capacity log; its time and its peak resident set), and once in-process for the time and the peak of
Python's allocations (tracemalloc) of the verification alone. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.model import Pool, Workload  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402

EXA = Path(sys.executable).parent / "exa"
TEMPLATES = [
    ("hpc-mi300", dict(target="hpc", accelerator="amd", region="eu")),
    ("hpc-h100", dict(target="hpc", accelerator="nvidia", region="eu-west-3", model="h100", supports_fractions=True)),
    ("hpc-a100", dict(target="hpc", accelerator="nvidia", region="eu", model="a100", supports_fractions=True)),
    ("hpc-gaudi", dict(target="hpc", accelerator="intel-gaudi", region="eu")),
    ("hpc-cpu", dict(target="hpc", accelerator="cpu", region="eu")),
    ("cloud-us", dict(target="cloud", accelerator="nvidia", region="us-east-1", cost_per_hour=3.0)),
    ("cloud-fra", dict(target="cloud", accelerator="nvidia", region="eu-central-1", cost_per_hour=3.4)),
    ("cloud-tpu", dict(target="cloud", accelerator="tpu", region="us", cost_per_hour=4.0)),
    ("cloud-amd", dict(target="cloud", accelerator="amd", region="eu-west-1", cost_per_hour=2.6)),
]
POOLS = [
    Pool(f"{name}-{i:03d}", count=4, **spec)  # type: ignore[arg-type]
    for i in range(600 // len(TEMPLATES) + 1)
    for name, spec in TEMPLATES
][:600]
MIX = [
    ("place", Workload("train", "amd", engine="vllm", count=2)),
    ("place", Workload("serve", "nvidia", engine="vllm", fraction=0.5)),
    ("place", Workload("tiny", "nvidia", engine="vllm", fraction=0.1)),
    ("place", Workload("fallback", "tpu", engine="generic", target="hpc", allow_cpu_fallback=True)),
    ("place", Workload("gaudi", "intel-gaudi", engine="generic")),
    ("place", Workload("not-portable", "amd", engine="sglang")),
    ("burst", Workload("eu-data", "nvidia", residency="eu-only", allow_burst=True)),
    ("burst", Workload("open-data", "nvidia", allow_burst=True)),
    ("place", Workload("train", "amd", engine="vllm", count=3)),
    ("place", Workload("serve", "nvidia", engine="vllm", count=1)),
]


def build(home: Path, decisions: int, lease_s: float) -> dict[str, float]:
    """Record ``decisions`` decisions in ``home`` through the façade (see the module docstring)."""
    began = time.monotonic()
    hw = Hardware(home)
    try:
        hw.apply(POOLS)
        hw.store._db.execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]
        lease = timedelta(seconds=lease_s)
        for i in range(decisions):
            kind, workload = MIX[i % len(MIX)]
            (hw.burst if kind == "burst" else hw.place)(workload, lease=lease)
            if i and i % 10_000 == 0:
                print(f"  {i} decisions, {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    finally:
        hw.close()
        stop_server(home)
    return {"build_seconds": round(time.monotonic() - began, 1)}


def count(home: Path, table: str) -> int:
    import sqlite3

    db = sqlite3.connect(home / "state.db")
    try:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--home", type=Path, help="keep the state here (reused when it holds as many decisions)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lease", type=float, default=5.0, help="seconds a placement is held before its lease ends (the build)")
    args = parser.parse_args(argv)
    opa = ROOT / ".tools" / "bin" / "opa"
    if "EXA_OPA_BIN" not in os.environ and opa.is_file():
        os.environ["EXA_OPA_BIN"] = str(opa)
    for var in ("EXA_OPA_URL", "EXA_DB_URL"):
        os.environ.pop(var, None)
    home = args.home or Path(tempfile.mkdtemp(prefix="exa-verify-")) / "home"
    result: dict[str, object] = {"decisions_asked": args.decisions, "home": str(home)}
    if not (home / "state.db").exists() or count(home, "decisions") != args.decisions:
        print(f"building a state of {args.decisions} decisions in {home} ...", file=sys.stderr, flush=True)
        result.update(build(home, args.decisions, args.lease))
    result.update(
        decisions=count(home, "decisions"), audit_entries=count(home, "audit_log"), holdings=count(home, "holdings"),
        burst_events=count(home, "burst_events"), capacity_log=count(home, "capacity_log"), state_mb=round((home / "state.db").stat().st_size / 2**20, 1),
    )  # fmt: skip
    env = {**os.environ, "EXA_HOME": str(home)}
    walls = []
    for _ in range(args.runs):
        began = time.monotonic()
        done = subprocess.run([str(EXA), "audit", "verify", "--json"], capture_output=True, text=True, env=env, check=False)
        walls.append(time.monotonic() - began)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
            return 1
    result["cli_seconds"] = {"median": round(statistics.median(walls), 2), "runs": [round(w, 2) for w in walls]}
    # The largest resident set of the verify processes (the only children this script waited for).
    result["cli_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)

    # In-process: the time and the peak of Python's allocations (tracemalloc) of the verification
    # alone, the log and the decisions streamed (its phases interleave: no split by phase).
    hw = Hardware(home)
    try:
        hw.verify_audit()  # the imports and the OPA's start outside the figures
        tracemalloc.start()
        began = time.monotonic()
        report = hw.verify_audit()
        seconds = time.monotonic() - began
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        hw.close()
    result["in_process_seconds"] = round(seconds, 2)  # under tracemalloc: slower than the CLI's run
    result["in_process_peak_alloc_mib"] = round(peak / 2**20, 1)
    result["ok"] = report.ok
    print(json.dumps(result, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
