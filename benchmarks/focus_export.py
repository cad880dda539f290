"""`exa finops export --format focus` at scale: the time to write N rows and the peak memory.

    .venv/bin/python benchmarks/focus_export.py [--placements 1000] [--hours 1000] [--home DIR] [--version 1.2]

The state is made by the product itself, through the library's façade on the managed local OPA,
with a store clock that stands still while the placements are made (at 2025-01-01T00:00Z) and then
moves on ``--hours`` (in the past: placements still held are billed up to the export's end): ``--placements`` placements of one device each on 250 pools of 4 devices;
every other one was submitted to Slurm and its job's start and end recorded as reconcile records
them (it started 30 minutes in and ended 30 minutes before the end: the first and last hour have a
used and an idle row), the rest are held to the end. The export then covers ``--hours`` hours:
about placements x hours rows (1,000 x 1,000 = 1,000,000 by default).

The export runs as a fresh ``exa finops export`` process (the figure a user sees: start, open, the
pages read, every row written), ``--runs`` times; its peak RSS is the child's (``ru_maxrss`` of
RUSAGE_CHILDREN, measured per run in a fresh wrapper process). Prints JSON: rows, file size,
seconds per run, and peak RSS in MiB. ``--home`` keeps the state for later runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examlops_policy._core import commit, leases  # noqa: E402
from examlops_policy.hardware import Hardware, ManagedPolicy  # noqa: E402
from examlops_policy.model import Pool, Workload  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402
from examlops_policy.store.sqlite import SQLiteStore  # noqa: E402

EXA = Path(sys.executable).parent / "exa"
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
POOLS = [Pool(f"mi300-{i:03d}", "hpc", "amd", 4, "eu", cost_per_hour=1.8, carbon_factor=250.0) for i in range(250)]


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> str:
        return leases.text_of(self.at)


def build(home: Path, placements: int, hours: int) -> float:
    """Make the state (see the module docstring); seconds taken."""
    began = time.monotonic()
    clock = Clock()
    home.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(home / "state.db", clock=clock)
    store._db.execute("PRAGMA synchronous=OFF")
    hw = Hardware(home, store=store, policy=ManagedPolicy(home))
    try:
        hw.apply(POOLS)
        made = [hw.place(Workload(f"w{n % 50}", "amd", count=1)).id for n in range(placements)]
        for n, ident in enumerate(made[::2]):
            hw.set_job(ident, str(1000 + n), scheduler="slurm")
        clock.at = T0 + timedelta(minutes=30)
        for n, ident in enumerate(made[::2]):
            commit.start_job(hw.store, ident, str(1000 + n), clock(), scheduler="slurm", source="benchmark")
        clock.at = T0 + timedelta(hours=hours)
        ended = leases.text_of(T0 + timedelta(hours=hours, minutes=-30))
        started = leases.text_of(T0 + timedelta(minutes=30))
        for n, ident in enumerate(made[::2]):
            commit.end_job(hw.store, hw.cycle.capacities, ident, str(1000 + n), "COMPLETED", started, ended, scheduler="slurm", source="benchmark")
    finally:
        hw.close()
    (home / "built.json").write_text(json.dumps({"placements": placements, "hours": hours}))
    return time.monotonic() - began


def run_once(home: Path, hours: int, out: Path, version: str) -> dict[str, float]:
    """One ``exa finops export`` in a fresh wrapper process: its seconds and peak RSS (MiB)."""
    to = T0 + timedelta(hours=hours)
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "s = time.perf_counter() - t\n"
        "print(json.dumps({'seconds': s, 'peak_rss_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))\n"
    )
    argv = [str(EXA), "finops", "export", "--format", "focus", "--from", T0.isoformat(), "--to", to.isoformat(), "--out", str(out),
            "--focus-version", version]  # fmt: skip
    env = {**os.environ, "EXA_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--version", default="1.2", choices=("1.2", "1.3"))
    args = parser.parse_args()
    scratch = None if args.home else tempfile.TemporaryDirectory(prefix="exa-focus-bench-")
    home = args.home or Path(scratch.name) / "home"  # type: ignore[union-attr]
    try:
        built = home / "built.json"
        want = {"placements": args.placements, "hours": args.hours}
        build_s = None
        if not built.is_file() or json.loads(built.read_text()) != want:
            build_s = build(home, args.placements, args.hours)
        out = home / "bill.csv"
        runs = [run_once(home, args.hours, out, args.version) for _ in range(args.runs)]
        with out.open(encoding="utf-8") as f:
            rows = sum(1 for _ in f) - 1
        print(json.dumps({
            "placements": args.placements, "hours": args.hours, "focus_version": args.version, "rows": rows,
            "file_mib": round(out.stat().st_size / 2**20, 1), "build_s": None if build_s is None else round(build_s, 1),
            "export_s": [round(r["seconds"], 2) for r in runs], "peak_rss_mib": [round(r["peak_rss_mib"], 1) for r in runs],
            "this_process_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }, indent=2))  # fmt: skip
    finally:
        stop_server(home)
        if scratch is not None:
            scratch.cleanup()


if __name__ == "__main__":
    main()
