"""The Slurm job_submit plugin's cost: sbatch submissions per second with and without it, and the
plugin's own time per job.

    scripts/slurm-up && .venv/bin/python benchmarks/job_submit.py [--jobs 100] [--rounds 10] [--lua-jobs 20000]

Against the Slurm of scripts/slurm-up (this checkout's ``.exa-services/slurm``; it must not be in
use by tests meanwhile: the run reconfigures it). The decision table is the one ``exa slurm table``
writes for the pools ``exa hardware discover slurm`` finds there and ``examples/slurm-accounts.yaml``
(a temporary ``EXA_HOME``), with ``on_stale``/``on_unknown`` closed and a ``timing_log``.

1. Submissions per second: ``--jobs`` held GPU jobs (``sbatch --hold -A physics
   --gres=gpu:h100:1``, each routed by the plugin) one after another, timed by the wall clock,
   with the plugin off (``JobSubmitPlugins`` commented out, ``scontrol reconfigure``) and on, in
   ``--rounds`` alternating rounds; the held jobs are cancelled after each round. Also slurmctld's
   own mean time per ``REQUEST_SUBMIT_BATCH_JOB`` RPC (``sdiag``, reset before each round).
2. The plugin's time per job inside slurmctld: the ``timing_log`` the plugin appends to (Lua's
   ``os.clock()`` around the whole call: reading the conf, the table's header, the decision and
   the stamp; ``os.clock`` is the process's CPU time, all of slurmctld's threads, so an upper bound).
3. The plugin alone in a Lua 5.1 interpreter (``--lua-jobs`` decisions in one process, a stand-in
   ``slurm`` table) on the real table and on one of ``job_submit.MAX_ROWS`` rows: microseconds per
   decision (p50, p99) and the time to load each table.

The plugin, its conf and the table slurm-up left are put back at the end, and slurmctld
reconfigured with the plugin on. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examlops_policy import job_submit  # noqa: E402
from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.job_submit import Row, Table  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402

STATE = ROOT / ".exa-services" / "slurm"
ETC = STATE / "etc"
EXA = Path(sys.executable).parent / "exa"
JOB = ["-A", "physics", "--gres=gpu:h100:1"]


def env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(ETC / "slurm.conf")}


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env(), capture_output=True, text=True, timeout=120, check=check)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def plugin(on: bool, original: str) -> None:
    """The plugin on (slurm.conf as slurm-up wrote it) or off (its line commented out)."""
    text = original if on else original.replace("JobSubmitPlugins=lua", "#JobSubmitPlugins=lua (benchmarks/job_submit.py: off)")
    (ETC / "slurm.conf").write_text(text, encoding="utf-8")
    run("scontrol", "reconfigure")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if run("scontrol", "ping", check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit("slurmctld did not answer after scontrol reconfigure")


def submit_round(jobs: int, cwd: Path) -> tuple[float, list[str], float | None]:
    """Seconds for ``jobs`` sequential submissions, their ids, and sdiag's mean µs per submit RPC."""
    run("sdiag", "--reset")
    ids = []
    began = time.perf_counter()
    for _ in range(jobs):
        done = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true", *JOB],
                              env=env(), capture_output=True, text=True, timeout=60, cwd=cwd, check=True)  # fmt: skip
        ids.append(done.stdout.strip().split(";")[0])
    seconds = time.perf_counter() - began
    mean = None
    for line in run("sdiag").stdout.splitlines():
        if "REQUEST_SUBMIT_BATCH_JOB" in line and "ave_time:" in line:
            mean = float(line.split("ave_time:")[1].split()[0])
    return seconds, ids, mean


def stamped(job_id: str) -> bool:
    shown = run("scontrol", "-o", "show", "job", job_id).stdout
    return "AdminComment=exa:" in shown


def cancel(ids: list[str]) -> None:
    for i in range(0, len(ids), 200):
        run("scancel", *ids[i : i + 200], check=False)


def lua_bench(table_text: str, jobs: int, folder: Path) -> dict[str, float]:
    """The plugin alone: µs per decision (os.clock, one interpreter) and the table's load time."""
    lua = shutil.which("lua5.1") or shutil.which("lua")
    if lua is None:
        return {}
    shutil.copy(job_submit.HOOK, folder / "job_submit.lua")
    (folder / job_submit.CONF_NAME).write_text("on_stale = closed\non_unknown = closed\nmax_age_seconds = 100000000\n", encoding="utf-8")
    (folder / job_submit.TABLE_NAME).write_text(table_text, encoding="utf-8")
    driver = f"""
slurm = {{SUCCESS = 0, ERROR = -1, log_user = function() end, log_info = function() end, log_error = function() end}}
dofile("job_submit.lua")
local t0 = os.clock()
local ok = exa_job_submit.load_table("./{job_submit.TABLE_NAME}")
local load = os.clock() - t0
assert(ok, "the table loads")
-- One decision untimed: the conf read and parsed once (the table is cached from the load above).
slurm_job_submit({{account = "physics", tres_per_node = "gres:gpu:h100:1"}}, {{}}, 0)
local times = {{}}
for i = 1, {jobs} do
  local job = {{account = "physics", tres_per_node = "gres:gpu:h100:1", min_nodes = 4294967294}}
  local s = os.clock()
  slurm_job_submit(job, {{}}, 0)
  times[i] = (os.clock() - s) * 1e6
  assert(job.partition ~= nil, "routed")
end
table.sort(times)
print(string.format("%.3f %.1f %.1f %.1f", load * 1000, times[math.floor(#times * 0.5)], times[math.floor(#times * 0.99)], times[#times]))
"""
    (folder / "bench.lua").write_text(driver, encoding="utf-8")
    out = subprocess.run([lua, "bench.lua"], cwd=folder, capture_output=True, text=True, timeout=600, check=True).stdout.split()
    return {"table_load_ms": float(out[0]), "p50_us": float(out[1]), "p99_us": float(out[2]), "max_us": float(out[3])}


def big_table(real: Table) -> Table:
    """The real table's rows, and synthetic ones up to MAX_ROWS (other profiles, same shapes)."""
    rows = list(real.rows)
    n = 0
    while len(rows) < job_submit.MAX_ROWS:
        for r in real.rows:
            if len(rows) >= job_submit.MAX_ROWS:
                break
            profile, rest = r.key.split("|", 1)
            rows.append(Row(f"synthetic-{n}/{profile}|{rest}", r.partition, r.admits, dict(r.no), r.refuse, r.code))
        n += 1
    return Table(real.policy_revision, real.inputs, real.accounts, real.default_profile, real.licenses, tuple(rows), real.revision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100, help="submissions per round and mode")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of (off, on)")
    parser.add_argument("--lua-jobs", type=int, default=20000, help="decisions of the in-interpreter measure")
    args = parser.parse_args()
    if run("scontrol", "ping", check=False).returncode != 0 or "JobSubmitPlugins=lua" not in (ETC / "slurm.conf").read_text(encoding="utf-8"):
        raise SystemExit("no Slurm of scripts/slurm-up with the job_submit plugin: run scripts/slurm-up")
    original = (ETC / "slurm.conf").read_text(encoding="utf-8")
    saved = {name: (ETC / name).read_bytes() for name in (job_submit.CONF_NAME, job_submit.TABLE_NAME) if (ETC / name).exists()}
    folder = Path(tempfile.mkdtemp(prefix="exa-bench-job-submit-"))
    home = folder / "home"
    report: dict[str, object] = {"uptime": subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()}
    try:
        subprocess.run([str(EXA), "hardware", "discover", "slurm", "--region", "eu", "--apply"], env={**env(), "EXA_HOME": str(home)},
                       capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
        hw = Hardware(home)
        try:
            began = time.perf_counter()
            table = job_submit.write(hw, ETC / job_submit.TABLE_NAME, job_submit.load_accounts(ROOT / "examples" / "slurm-accounts.yaml"))
            report["table"] = {"rows": len(table.rows), "decided_in_s": round(time.perf_counter() - began, 2),
                               "bytes": (ETC / job_submit.TABLE_NAME).stat().st_size}  # fmt: skip
        finally:
            hw.close()
        timing = folder / "timing.txt"
        (ETC / job_submit.CONF_NAME).write_text(
            f"on_stale = closed\non_unknown = closed\nmax_age_seconds = 86400\ntiming_log = {timing}\n", encoding="utf-8"
        )
        modes: dict[str, list[tuple[float, float | None]]] = {"off": [], "on": []}
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                plugin(mode == "on", original)
                seconds, ids, rpc = submit_round(args.jobs, folder)
                if stamped(ids[0]) != (mode == "on"):
                    raise SystemExit(f"the plugin was not {mode} as asked (job {ids[0]})")
                cancel(ids)
                modes[mode].append((args.jobs / seconds, rpc))
        rate = {m: statistics.median(r for r, _ in v) for m, v in modes.items()}
        rpc_us = {m: statistics.median(u for _, u in v if u is not None) for m, v in modes.items() if any(u is not None for _, u in v)}
        # Each round's pair (off, then on) under the same load: the overhead of each pair, then their median.
        pairs = [100 * (off - on) / off for (off, _), (on, _) in zip(modes["off"], modes["on"])]
        report["submissions_per_s_median"] = {m: round(v, 1) for m, v in rate.items()}
        report["rounds"] = {m: [round(r, 1) for r, _ in v] for m, v in modes.items()}
        report["overhead_pct_median_of_pairs"] = round(statistics.median(pairs), 1)
        report["overhead_pct_pairs"] = [round(p, 1) for p in pairs]
        report["sdiag_submit_rpc_median_us"] = {m: round(v) for m, v in rpc_us.items()}
        inside = [float(x) for x in timing.read_text(encoding="utf-8").split()]
        # The first job of each round after a reconfigure loads the table (slurmctld starts the
        # plugin's Lua afresh); the others find it cached.
        loads = inside[:: args.jobs]
        cached = [x for i, x in enumerate(inside) if i % args.jobs]
        report["in_slurmctld_us"] = {"jobs": len(inside), "p50": percentile(cached, 0.5), "p99": percentile(cached, 0.99), "max": max(cached),
                                     "loading_the_table": {"jobs": len(loads), "max": max(loads)}}  # fmt: skip
        lua_dir = folder / "lua"
        lua_dir.mkdir()
        report["lua_alone"] = {
            "real_table": {"rows": len(table.rows), **lua_bench(job_submit.render(table, int(time.time())), args.lua_jobs, lua_dir)},
            "max_table": {"rows": job_submit.MAX_ROWS, **lua_bench(job_submit.render(big_table(table), int(time.time())), args.lua_jobs, lua_dir)},
        }
    finally:
        (ETC / "slurm.conf").write_text(original, encoding="utf-8")
        for name in (job_submit.CONF_NAME, job_submit.TABLE_NAME):
            if name in saved:
                (ETC / name).write_bytes(saved[name])
            else:
                (ETC / name).unlink(missing_ok=True)
        run("scontrol", "reconfigure", check=False)
        stop_server(home)
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
