"""Start estimates from Slurm: how many per second over 4, 16 and 64 partitions, beside
``sbatch --test-only`` alone.

Needs the local Slurm (scripts/slurm-up). The benchmark partitions are declared for the run with
``scripts/slurm-up --partitions N`` (bench-0..bench-N-1 on exa-n[1-2], slurmctld reconfigured
live) and put back as they were at the end. For each size N it measures, over ``--rounds`` rounds
(medians reported, with the lowest and highest):

* ``sbatch_alone``: ``sbatch --test-only`` once per partition, one after the other, as a caller
  without the estimator would ask: N processes in sequence;
* ``estimator_cold``: ``SlurmEstimator.estimate_many`` over the N requests with an empty cache:
  one ``scontrol ping``, then the N questions at most ``--parallel`` at a time;
* ``estimator_warm``: the same batch again within the cache's lifetime (answers reused, each
  saying how old it is);
* ``gather_cold``: ``StartEstimator.estimate`` over N candidate pools, building each pool's
  request as ``submit`` would (``grant_request``) and asking Slurm with an empty cache.

Then decisions per second with estimates (``decisions``): a ``Hardware`` over the N Slurm pools
(a real OPA, the managed local one, and SQLite state in a temporary folder) decides
(``what_if``: verdicts, estimates before any lock, selection; nothing recorded) for a ``cost``
workload (the chosen pool's estimate only: one question) and an ``optimize: earliest`` one (every
candidate's: N questions), each cold (the estimator's cache off: every decision asks Slurm) and
warm (answers reused within the cache's lifetime), beside the same decisions with no Slurm to ask
(``no_slurm``: every Slurm pool "no estimate" at once).

With ``--error-jobs K`` it measures the estimates' error against what happened: K placements on
free benchmark partitions and K on a partition filled by a job of a one-minute time limit (each
placement records Slurm's estimate, is submitted with ``exa``'s Slurm executor, and its actual
start is read back from ``squeue``): per source and case, the median and 90th percentile of
actual minus estimated start (``views.estimate_errors``). The filled case waits for the filling
job's limit (about a minute and a half).

Figures are estimates per second (N / the batch's wall time) and the batch's milliseconds. Every
estimate of every run is checked to be known (a partition whose answer is missing fails the run);
``--check`` also compares each with ``sbatch --test-only`` asked directly for the same request
(the benchmark partitions are free: both answer "now", each its own second, so they may differ by
the seconds between the two questions; the exact comparison on a filled partition is a test,
tests/test_estimates_slurm.py).
The machine's load average is recorded: figures taken on a shared, loaded machine say so
("under load").

    .venv/bin/python benchmarks/estimates.py                   # sizes 4,16,64, 5 rounds
    .venv/bin/python benchmarks/estimates.py --sizes 4,16 --rounds 3 --parallel 8 --out out/bench/e.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from examlops_policy.estimates.gather import EstimateRequest, StartEstimator  # noqa: E402
from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402
from examlops_policy.views import estimate_errors  # noqa: E402
from examlops_policy.estimates.slurm import SlurmEstimator, run_in_utc, slurm_time  # noqa: E402
from examlops_policy.executors.slurm import SlurmRequest  # noqa: E402
from examlops_policy.model import Grant, Pool, Workload  # noqa: E402

ENV_FILE = REPO / ".exa-services" / "slurm" / "env"
BENCH_CONF = REPO / ".exa-services" / "slurm" / "etc" / "bench-partitions.conf"
WORKLOAD = Workload("exa-bench", "nvidia", walltime=1800)
GRANT = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)


def slurm_conf() -> str:
    for line in ENV_FILE.read_text(encoding="utf-8").splitlines() if ENV_FILE.is_file() else []:
        if line.startswith("export SLURM_CONF="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"{ENV_FILE.relative_to(REPO)} not found or names no SLURM_CONF: start Slurm with scripts/slurm-up")


def bench_partitions() -> int:
    if not BENCH_CONF.is_file():
        return 0
    return sum(1 for line in BENCH_CONF.read_text(encoding="utf-8").splitlines() if line.startswith("PartitionName="))


def declare(n: int) -> None:
    """``scripts/slurm-up --partitions n`` (reconfigures the running Slurm)."""
    subprocess.run([str(REPO / "scripts" / "slurm-up"), "--partitions", str(n)], check=True, capture_output=True, text=True, timeout=120)


def pools(n: int) -> list[Pool]:
    # Prices differ so that cost picks one pool (bench-0, the cheapest) and earliest sees them all.
    return [
        Pool(f"bench-{i}-h100", "hpc", "nvidia", 4, "de-juelich", model="h100", partition=f"bench-{i}", gres_type="h100", cost_per_hour=1.0 + i / 100)
        for i in range(n)
    ]


def requests(n: int) -> list[tuple[str, SlurmRequest]]:
    return [(f"bench-{i}-h100", SlurmRequest("", f"bench-{i}", WORKLOAD.name, Path(), gres="gpu:h100:1", time_min=30)) for i in range(n)]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def summary(n: int, seconds: Sequence[float]) -> dict[str, Any]:
    med = statistics.median(seconds)
    return {
        "batch_ms": {"median": round(med * 1000, 2), "min": round(min(seconds) * 1000, 2), "max": round(max(seconds) * 1000, 2)},
        "estimates_per_s": round(n / med, 1),
        "rounds": len(seconds),
    }


def sbatch_alone(reqs: Sequence[tuple[str, SlurmRequest]]) -> list[str]:
    """``sbatch --test-only`` per partition, in sequence; Slurm's answers."""
    answers = []
    for _, r in reqs:
        done = run_in_utc(r.test_only_argv(), 30)
        if " to start at " not in done.stderr:
            raise RuntimeError(f"sbatch --test-only did not answer with a start: {done.stderr.strip()[:200]}")
        answers.append(done.stderr.strip())
    return answers


def measure(n: int, rounds: int, parallel: int, check: bool) -> dict[str, Any]:
    reqs = requests(n)
    alone: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    gather: list[float] = []
    mismatches: list[str] = []
    for _ in range(rounds):
        first = time.monotonic()
        t, answers = timed(lambda: sbatch_alone(reqs))
        alone.append(t)
        est = SlurmEstimator(parallel=parallel, ttl_s=300)
        t, got = timed(lambda: est.estimate_many(reqs))
        cold.append(t)
        # A free partition starts "now": two questions asked apart answer their own seconds.
        apart = math.ceil(time.monotonic() - first) + 1
        t, again = timed(lambda: est.estimate_many(reqs))
        warm.append(t)
        for e in [*got, *again]:  # type: ignore[misc]
            if not e.known:
                raise RuntimeError(f"no estimate for {e.pool}: {e.reason}")
        if check:
            for (pool, _), e, answer in zip(reqs, got, answers):  # type: ignore[call-overload]
                direct = slurm_time(answer.split(" to start at ", 1)[1].split()[0])
                if abs((e.at - direct).total_seconds()) > apart:
                    mismatches.append(f"{pool}: estimator {e.at}, sbatch: {answer}")
        starter = StartEstimator(slurm=SlurmEstimator(parallel=parallel, ttl_s=300))
        cands = [EstimateRequest(p, WORKLOAD, GRANT, fits_now=True) for p in pools(n)]
        t, found = timed(lambda: starter.estimate(cands))
        gather.append(t)
        if not all(e.known for e in found):  # type: ignore[attr-defined]
            raise RuntimeError("gather: an estimate is missing")
    return {
        "partitions": n,
        "sbatch_alone": summary(n, alone),
        "estimator_cold": summary(n, cold),
        "estimator_warm": summary(n, warm),
        "gather_cold": summary(n, gather),
        "speedup_cold_vs_alone": round(statistics.median(alone) / statistics.median(cold), 2),
        "checked_against_sbatch": check,
        "mismatches": mismatches,
    }


def decisions(n: int, count: int, parallel: int, work: Path) -> dict[str, Any]:
    """Decisions per second over the N benchmark pools, with estimates cold and warm, and without Slurm."""
    out: dict[str, Any] = {}
    for name, objective in (("cost", "cost"), ("earliest", "earliest")):
        w = Workload("exa-bench", "nvidia", walltime=1800, optimize=objective)
        for mode, estimator in (
            ("cold", StartEstimator(slurm=SlurmEstimator(parallel=parallel, ttl_s=0))),
            ("warm", StartEstimator(slurm=SlurmEstimator(parallel=parallel, ttl_s=300))),
            ("no_slurm", StartEstimator(slurm=None)),
        ):
            home = work / f"decide-{n}-{name}-{mode}"
            hw = Hardware(home, estimator=estimator)
            try:
                hw.apply(pools(n))
                hw.what_if(w)  # the verdicts asked once; the OPA started
                seconds = []
                asked = 0
                for _ in range(count):
                    before = estimator.slurm.asked if estimator.slurm else 0
                    t, d = timed(lambda: hw.what_if(w))
                    seconds.append(t)
                    asked += (estimator.slurm.asked if estimator.slurm else 0) - before
                    expected = "bench-0-h100"
                    if getattr(d, "pool", None) != expected:
                        raise RuntimeError(f"{name}/{mode}: placed on {getattr(d, 'pool', None)}, expected {expected}")
                    asked_pools = [v.estimate for v in getattr(d, "verdicts", ()) if v.estimate is not None]
                    if mode != "no_slurm" and not all(e.known for e in asked_pools):
                        raise RuntimeError(f"{name}/{mode}: an estimate is missing")
                med = statistics.median(seconds)
                out[f"{name}_{mode}"] = {
                    "decisions_per_s": round(1 / med, 1),
                    "decision_ms": {"median": round(med * 1000, 2), "min": round(min(seconds) * 1000, 2), "max": round(max(seconds) * 1000, 2)},
                    "sbatch_per_decision": round(asked / count, 1),
                    "decisions": count,
                }
            finally:
                hw.close()
                stop_server(home)
    return out


def _squeue_start(job: str, timeout_s: float) -> datetime | None:
    """The job's actual start once it runs (squeue %S of a RUNNING or finished-running job)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = run_in_utc(["squeue", "--noheader", f"--jobs={job}", "--format=%T|%S"], 30)
        row = done.stdout.strip().split("|")
        if len(row) == 2 and row[0] in ("RUNNING", "COMPLETING", "COMPLETED"):
            return slurm_time(row[1])
        time.sleep(0.5)
    return None


def estimate_error(k: int, work: Path) -> dict[str, Any]:
    """Decisions with Slurm's estimate, their grant submitted as ``submit`` sends it, the actual
    start read back: the error per case (a free partition, a filled one)."""
    from examlops_policy.executors.gres import load_gres_table
    from examlops_policy.executors.slurm import grant_request
    from examlops_policy.model import Placement

    script = work / "job.sh"
    script.write_text("#!/bin/sh\nsleep 20\n")
    script.chmod(0o755)
    home = work / "error"
    hw = Hardware(home, estimator=StartEstimator(slurm=SlurmEstimator(ttl_s=0)))
    gres = load_gres_table()
    jobs: list[str] = []
    out: dict[str, Any] = {}
    try:
        free, busy = pools(2)
        for case, pool in (("free", free), ("busy", busy)):
            if case == "busy":
                # The benchmark partitions' nodes (exa-n[1-2]) filled by one job of a one-minute
                # limit (Slurm ends it at its limit): it starts once the free case's jobs are done.
                fill = run_in_utc(["sbatch", "--parsable", "--partition=bench-1", "--job-name=exa-bench-fill", "--time=1", "--nodes=2",
                                   "--exclusive", "--wrap=sleep 600"], 30)  # fmt: skip
                if not fill.ok:
                    raise RuntimeError(f"could not fill bench-1: {fill.stderr.strip()[:200]}")
                jobs.append(fill.stdout.strip().split(";")[0])
                if _squeue_start(jobs[-1], 120) is None:
                    raise RuntimeError("the filling job did not start")
            pairs = []
            for i in range(k):
                w = Workload(f"exa-bench-{case}-{i}", "nvidia", walltime=60)
                decision = hw.what_if(w, [pool])
                if not isinstance(decision, Placement) or decision.estimate is None or decision.estimate.at is None:  # noqa: SIM102
                    raise RuntimeError(f"{case}: no estimate ({getattr(getattr(decision, 'estimate', None), 'reason', decision)})")
                request = grant_request(w, decision.grant, (), pool, gres, decision_id=f"bench{i}", script=script)
                sent = run_in_utc(request.argv(), 30)
                if not sent.ok:
                    raise RuntimeError(f"{case}: sbatch refused: {sent.stderr.strip()[:200]}")
                jobs.append(sent.stdout.strip().split(";")[0])
                actual = _squeue_start(jobs[-1], 240)
                if actual is None:
                    raise RuntimeError(f"{case}: job {jobs[-1]} did not start")
                at = decision.estimate.at
                pairs.append((decision.estimate.source, float(math.floor(actual.timestamp()) - math.floor(at.timestamp()))))
            (e,) = estimate_errors(pairs)
            out[case] = {"source": e.source, "placements": e.decisions, "median_s": e.median_s, "p90_s": e.p90_s, "errors_s": [p[1] for p in pairs]}
    finally:
        for job in jobs:
            run_in_utc(["scancel", job], 30)
        hw.close()
        stop_server(home)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4,16,64", help="partition counts (default 4,16,64; at most 256)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per size (medians reported; default 5)")
    parser.add_argument("--parallel", type=int, default=8, help="the estimator's concurrent questions (default 8)")
    parser.add_argument("--check", action="store_true", help="compare every estimate with sbatch --test-only asked directly")
    parser.add_argument("--decisions", type=int, default=5, help="decisions per objective and mode for decisions per second (0: skip; default 5)")
    parser.add_argument("--error-jobs", type=int, default=0, help="placements per case submitted to measure the estimate error (default 0: skip)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "estimates.json", help="JSON results")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or max(sizes) > 256 or args.rounds < 1 or args.parallel < 1:
        parser.error("sizes from 1 to 256, rounds and parallel at least 1")
    os.environ["SLURM_CONF"] = slurm_conf()
    ping = run_in_utc(["scontrol", "ping"], 10)
    if " is UP" not in ping.stdout:
        raise SystemExit(f"Slurm is not up ({(ping.stdout + ping.stderr).strip()[:200]}): start it with scripts/slurm-up")
    before = bench_partitions()
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: list[dict[str, Any]] = []
    errors: dict[str, Any] = {}
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="exa-bench-estimates-"))
    try:
        declare(max(sizes + [2]))
        for n in sizes:
            row = measure(n, args.rounds, args.parallel, args.check)
            if args.decisions > 0:
                row["decisions"] = decisions(n, args.decisions, args.parallel, work)
                d = row["decisions"]
                print(f"{n:>3} partitions: decisions/s cost cold {d['cost_cold']['decisions_per_s']} warm {d['cost_warm']['decisions_per_s']} "
                      f"(no Slurm {d['cost_no_slurm']['decisions_per_s']}) · earliest cold {d['earliest_cold']['decisions_per_s']} "
                      f"({d['earliest_cold']['sbatch_per_decision']} sbatch each) warm {d['earliest_warm']['decisions_per_s']} "
                      f"(no Slurm {d['earliest_no_slurm']['decisions_per_s']})", flush=True)  # fmt: skip
            results.append(row)
            print(f"{n:>3} partitions: sbatch --test-only alone {row['sbatch_alone']['estimates_per_s']:>7}/s "
                  f"({row['sbatch_alone']['batch_ms']['median']} ms) · estimator cold {row['estimator_cold']['estimates_per_s']:>7}/s "
                  f"({row['estimator_cold']['batch_ms']['median']} ms) · warm {row['estimator_warm']['estimates_per_s']:>9}/s "
                  f"· gather cold {row['gather_cold']['estimates_per_s']:>7}/s · x{row['speedup_cold_vs_alone']} vs alone"
                  + (f" · {len(row['mismatches'])} mismatch(es)" if row["mismatches"] else ""), flush=True)  # fmt: skip
        if args.error_jobs > 0:
            errors = estimate_error(args.error_jobs, work)
            for case, e in errors.items():
                print(f"estimate error ({case} partition, {e['source']}, {e['placements']} jobs): median {e['median_s']:+.0f} s, p90 {e['p90_s']:+.0f} s", flush=True)
    finally:
        declare(before)
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    load_after = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": load_after},
        "under_load": max(load_before[0], load_after[0]) >= (os.cpu_count() or 1) * 0.5,
        "parallel": args.parallel,
        "rounds": args.rounds,
        "results": results,
        "estimate_error": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    label = "under load" if doc["under_load"] else "quiet machine"
    print(f"({label}: load average {load_before} before, {load_after} after, {os.cpu_count()} CPUs) -> {args.out}")
    return 1 if any(r["mismatches"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
