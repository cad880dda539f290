#!/usr/bin/env python3
"""Placement benchmark: where the time goes, and how cost grows with the fleet.

    .venv/bin/python benchmarks/placement.py --quick            # fleets up to 1,000; about a minute
    .venv/bin/python benchmarks/placement.py                    # fleets up to 10,000; 6-8 minutes
    .venv/bin/python benchmarks/placement.py --profile out/prof # also cProfile decide() and place()

Measures, warm, through the product's own API (see benchmarks/README.md for what each figure is):

* ``decide()`` latency p50/p99 per fleet size (build_input -> OPA over REST -> interpret), with the
  default evaluator ``Hardware(home).evaluator`` (the managed local OPA, 5 s timeout);
* OPA's own time for the same queries (``timer_rego_query_eval_ns`` and
  ``timer_server_handler_ns`` from ``?metrics=true``) and the ratio of the whole to the engine;
* a stage-by-stage replica of ``decide()`` (input, JSON encode, HTTP, JSON decode, check, digest,
  interpret) so the remainder can be attributed;
* durable placements per second: ``Hardware.place`` on SQLite (WAL, synchronous=FULL), each one
  committing reservation, decision row and audit entries;
* cold start of ``exa hardware pools`` and ``exa hardware place`` (OPA already running).

Prints tables, writes JSON (``--out``) with every figure under a stable key, and a PNG plot of
latency against fleet size (``--plot``; needs matplotlib: ``pip install matplotlib``).
Nothing here changes product code; state lives in a temporary EXA_HOME removed at the end, and the
OPA servers this run started are stopped.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


import fleet  # noqa: E402
from examlops_policy.hardware import Hardware, ManagedOpaEvaluator  # noqa: E402
from examlops_policy.model import JSONObject, PoolState, Provenance, Workload  # noqa: E402
from examlops_policy.opa import OPA_VERSION, OpaUnreachable, connect, stop_server  # noqa: E402
from examlops_policy.placement import build_input, decide, digest, interpret  # noqa: E402
from examlops_policy.errors import PolicyError, PolicyUnavailable  # noqa: E402
from examlops_policy.policy import DECISION_PACKAGE, DECISION_RULE, DEFAULT_TIMEOUT_S, check_decision  # noqa: E402
from examlops_policy.tables import load_tables, policy_dir, revision  # noqa: E402

SCHEMA_VERSION = 1
DECISION_PATH = "/v1/data/" + DECISION_PACKAGE.replace(".", "/") + "/" + DECISION_RULE

# Targets from issue #6 (2-core machine).
TARGET_P50_1000_MS = 10.0
TARGET_P99_1000_MS = 25.0
TARGET_P50_10000_MS = 100.0
TARGET_RATIO_1000 = 2.0
TARGET_EXPONENT = 1.1  # "no worse than linear", with 10 % slack for noise and fixed costs
TARGET_DURABLE = {100: 300.0, 1000: 100.0}
TARGET_COLD_POOLS_MS = 300.0
TARGET_COLD_PLACE_MS = 500.0


class Profile:
    """How hard to push: repetitions and per-section wall-clock budgets (seconds)."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.sizes = [10, 100, 1000] if quick else [10, 100, 1000, 10000]
        self.latency_reps = 40 if quick else 200
        self.latency_min_calls = 3 if quick else len(fleet.WORKLOADS)
        self.latency_budget_s = 5.0 if quick else 60.0
        self.engine_reps = 20 if quick else 100
        self.engine_budget_s = 4.0 if quick else 40.0
        self.durable_sizes = [100, 1000]
        self.durable_reps = {100: 150, 1000: 60} if quick else {100: 1000, 1000: 300}
        self.durable_budget_s = 4.0 if quick else 40.0
        self.durable_min_calls = 2 if quick else 5
        self.cold_sizes = [100] if quick else [100, 1000]
        self.cold_reps = 3 if quick else 10
        # When the product's evaluator times out at a size, one engine-only query with this
        # timeout still learns OPA's own time there (0: don't).
        self.long_engine_timeout_s = 0.0 if quick else 300.0


# -- statistics ----------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values_ms: Sequence[float]) -> dict[str, float | int | None]:
    if not values_ms:
        return {"n": 0, "p50": None, "p99": None, "mean": None, "min": None, "max": None}
    return {
        "n": len(values_ms),
        "p50": round(pct(values_ms, 50), 3),
        "p99": round(pct(values_ms, 99), 3),
        "mean": round(statistics.fmean(values_ms), 3),
        "min": round(min(values_ms), 3),
        "max": round(max(values_ms), 3),
    }


def exponent(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(latency) against log(fleet size): 1.0 is linear."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / den, 3) if den else None


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- warm decisions ------------------------------------------------------------------------------


class CapturingEvaluator:
    """Delegates to the product's evaluator and keeps the last input decide() sent, so the engine
    figures are taken on exactly the same queries (one attribute store per call; nothing else)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: Any = None

    @property
    def revision(self) -> str:
        return cast(str, self.inner.revision)

    def evaluate(self, policy_input: Any) -> JSONObject:
        self.last = policy_input
        return cast(JSONObject, self.inner.evaluate(policy_input))


def run_latency(states: list[PoolState], hw: Hardware, prof: Profile) -> tuple[dict[str, Any], list[tuple[Workload, Any]]]:
    """decide() through the product's evaluator, cycling through the workload mix.

    Returns the figures and, per workload, the exact policy input decide() sent."""
    mix = fleet.rotation()
    evaluator = CapturingEvaluator(hw.evaluator)
    inputs: dict[str, tuple[Workload, Any]] = {}
    result: dict[str, Any] = {"timeouts": 0, "errors": 0, "status": "ok"}
    # Warm-up: one untimed decision (the first query compiles and caches in OPA).
    try:
        decide(mix[0][1], states, evaluator, hw.tables)
    except PolicyUnavailable as exc:
        inputs[mix[0][1].name] = (mix[0][1], evaluator.last)
        result.update(status="timeout", timeouts=1, error=str(exc), place_ms=summary([]), place_ms_by_kind={}, outcomes={})
        return result, list(inputs.values())
    samples: list[float] = []
    by_kind: dict[str, list[float]] = {}
    outcomes: dict[str, int] = {}
    start = time.perf_counter()
    i = 0
    while i < prof.latency_reps and (i < prof.latency_min_calls or time.perf_counter() - start < prof.latency_budget_s):
        kind, workload = mix[i % len(mix)]
        t0 = time.perf_counter()
        try:
            decision = decide(workload, states, evaluator, hw.tables)
        except PolicyUnavailable as exc:
            result["timeouts"] += 1
            result["status"] = "timeout"
            result["error"] = str(exc)
            break
        except PolicyError as exc:
            result["errors"] += 1
            result["error"] = str(exc)
            i += 1
            continue
        ms = (time.perf_counter() - t0) * 1000
        samples.append(ms)
        by_kind.setdefault(kind, []).append(ms)
        inputs.setdefault(workload.name, (workload, evaluator.last))
        label = "placed" if decision.ok else str(getattr(decision, "code", "rejected"))
        outcomes[label] = outcomes.get(label, 0) + 1
        i += 1
    result["place_ms"] = summary(samples)
    result["place_ms_by_kind"] = {k: round(pct(v, 50), 3) for k, v in sorted(by_kind.items())}
    result["outcomes"] = dict(sorted(outcomes.items()))
    return result, list(inputs.values())


def run_engine(
    states: list[PoolState], hw: Hardware, home: Path, captured: list[tuple[Workload, Any]], prof: Profile, *, timeout: float, reps: int | None = None
) -> dict[str, Any]:
    """Replays the inputs decide() sent with ``?metrics=true`` for OPA's own figures, timing a
    stage-by-stage replica of decide() around them.

    Stages: build_input, encode (the request body), http (POST round trip,
    bytes back), decode (JSON to dicts), check (check_decision), digest (the input digest),
    interpret (verdicts to a Placement/Rejection). The replica uses the product's functions; if
    they stop matching decide() the breakdown is left out and the engine figures remain.
    """
    transport = connect(home, timeout=timeout).transport
    stages = ("build_input", "encode", "http", "decode", "check", "digest", "interpret")
    times: dict[str, list[float]] = {s: [] for s in stages}
    engine: dict[str, list[float]] = {"eval": [], "handler": [], "input_parse": []}
    sizes_seen: list[tuple[int, int]] = []
    status, replica_error = "ok", None
    reps = reps if reps is not None else prof.engine_reps
    start = time.perf_counter()
    i = 0
    while captured and i < reps and (i == 0 or time.perf_counter() - start < prof.engine_budget_s):
        workload, sent = captured[i % len(captured)]
        policy_input = sent
        if replica_error is None and i < len(captured):  # first round: is the replica still faithful?
            try:
                if build_input(workload, states, hw.tables) != sent:
                    raise ValueError("build_input no longer produces what decide() sends")
            except Exception as exc:  # noqa: BLE001 - the replica is best effort
                replica_error = f"{type(exc).__name__}: {exc}"
        t = [time.perf_counter()]
        if replica_error is None:
            build_input(workload, states, hw.tables)
        t.append(time.perf_counter())
        body = json.dumps({"input": policy_input}, allow_nan=False).encode("utf-8")
        t.append(time.perf_counter())
        try:
            raw = transport.request("POST", DECISION_PATH + "?metrics=true", body)[1]
        except OpaUnreachable:
            status = "timeout"
            break
        t.append(time.perf_counter())
        doc = json.loads(raw)
        t.append(time.perf_counter())
        if replica_error is None:
            try:
                answer = check_decision(doc.get("result"), "bench")
                t.append(time.perf_counter())
                dig = digest(policy_input)
                t.append(time.perf_counter())
                meta = cast(JSONObject, answer.get("provenance") or {})
                interpret(workload, states, policy_input, answer, hw.tables, Provenance(dig, str(meta.get("policy_revision")), str(meta.get("opa_version"))))
                t.append(time.perf_counter())
                for name, a, b in zip(stages, t, t[1:]):
                    times[name].append((b - a) * 1000)
            except Exception as exc:  # noqa: BLE001
                replica_error = f"{type(exc).__name__}: {exc}"
        metrics = doc.get("metrics", {})
        engine["eval"].append(metrics.get("timer_rego_query_eval_ns", 0) / 1e6)
        engine["handler"].append(metrics.get("timer_server_handler_ns", 0) / 1e6)
        engine["input_parse"].append(metrics.get("timer_rego_input_parse_ns", 0) / 1e6)
        if "http" not in times or len(times["http"]) < len(engine["eval"]):
            times["http"].append((t[3] - t[2]) * 1000 if len(t) > 3 else 0.0)
        sizes_seen.append((len(body), len(raw)))
        i += 1
    transport.close()
    breakdown: dict[str, float | None] = {s: round(pct(v, 50), 3) if v else None for s, v in times.items()}
    if engine["handler"] and times["http"]:
        # The round trip minus OPA's handler time: OPA writing the answer out, HTTP over the socket, the transport.
        breakdown["http_outside_opa"] = round(pct([h - s for h, s in zip(times["http"], engine["handler"])], 50), 3)
    total = [sum(v[k] for v in times.values()) for k in range(len(times["build_input"]))]
    sizes = {  # medians over the replayed queries (they differ by workload)
        "input_bytes": round(statistics.median(b for b, _ in sizes_seen)) if sizes_seen else None,
        "response_bytes": round(statistics.median(r for _, r in sizes_seen)) if sizes_seen else None,
    }
    result = {
        "status": status,
        "engine_eval_ms": summary(engine["eval"]),
        "engine_handler_ms": summary(engine["handler"]),
        "engine_input_parse_ms": summary(engine["input_parse"]),
        "replica_total_ms": summary(total),
        "breakdown_ms": breakdown,
        **sizes,
    }
    if replica_error:
        result["breakdown_error"] = replica_error
    return result


def profile_decide(states: list[PoolState], hw: Hardware, out: Path, size: int, calls: int) -> list[dict[str, Any]]:
    """cProfile a few decide() calls; write the .pstats and return the top functions."""
    mix = fleet.rotation()
    profiler = cProfile.Profile()
    for i in range(calls):
        workload = mix[i % len(mix)][1]
        profiler.enable()
        try:
            decide(workload, states, hw.evaluator, hw.tables)
        except (PolicyUnavailable, PolicyError):
            profiler.disable()
            break
        profiler.disable()
    path = out / f"decide-{size}.pstats"
    profiler.dump_stats(path)
    return top_functions(path, calls)


def top_functions(path: Path, calls: int, limit: int = 15) -> list[dict[str, Any]]:
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename.replace(str(REPO) + "/", "").replace(sys.prefix + "/", "")
        rows.append({"function": f"{where}:{line}({func})", "calls": ncalls, "tottime_ms": tottime * 1000 / calls, "cumtime_ms": cumtime * 1000 / calls})
    rows.sort(key=lambda r: -r["tottime_ms"])
    return [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows[:limit]]


# -- durable placements --------------------------------------------------------------------------


def run_durable(
    size: int, seed: int, base: Path, evaluator: ManagedOpaEvaluator, prof: Profile, profile_dir: Path | None
) -> dict[str, Any]:
    """Hardware.place on a fresh SQLite state holding ``size`` pools, the placing workloads in turn."""
    home = base / f"durable-{size}"
    hw = Hardware(home, evaluator=evaluator, tables=load_tables(evaluator_root(evaluator)))
    pools = [s.pool for s in fleet.generate_fleet(size, seed)]
    t0 = time.perf_counter()
    hw.apply(pools)
    apply_s = time.perf_counter() - t0
    db = getattr(hw.store, "_db", None)
    sync = db.execute("PRAGMA synchronous").fetchone()[0] if isinstance(db, sqlite3.Connection) else None
    journal = db.execute("PRAGMA journal_mode").fetchone()[0] if isinstance(db, sqlite3.Connection) else None
    work = list(fleet.PLACING)
    result: dict[str, Any] = {"pools": size, "apply_s": round(apply_s, 3), "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(int(sync), sync) if sync is not None else None, "journal_mode": journal}
    try:
        hw.place(work[0])  # warm-up (recorded like any other, excluded from the timing)
    except PolicyUnavailable as exc:
        hw.close()
        return {**result, "status": "timeout", "error": str(exc), "placements": 0, "per_second": None, "place_ms": summary([])}
    samples: list[float] = []
    outcomes: dict[str, int] = {}
    profiler = cProfile.Profile() if profile_dir else None
    reps = prof.durable_reps.get(size, 100)
    start = time.perf_counter()
    status = "ok"
    i = 0
    while i < reps and (i < prof.durable_min_calls or time.perf_counter() - start < prof.durable_budget_s):
        t = time.perf_counter()
        try:
            if profiler:
                profiler.enable()
            record = hw.place(work[i % len(work)])
        except PolicyUnavailable as exc:
            status, result["error"] = "timeout", str(exc)
            break
        finally:
            if profiler:
                profiler.disable()
        samples.append((time.perf_counter() - t) * 1000)
        label = "placed" if record.decision.ok else str(getattr(record.decision, "code", "rejected"))
        outcomes[label] = outcomes.get(label, 0) + 1
        i += 1
    wall = time.perf_counter() - start
    hw.close()
    with sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True) as check:
        rows = {t: check.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("decisions", "allocations", "audit_log", "burst_events")}
        doc_bytes = check.execute("SELECT AVG(LENGTH(document)) FROM decisions").fetchone()[0]
    result.update(
        status=status,
        placements=len(samples),
        seconds=round(wall, 3),
        per_second=round(len(samples) / wall, 2) if samples else None,
        place_ms=summary(samples),
        outcomes=dict(sorted(outcomes.items())),
        rows=rows,
        decision_document_bytes=round(doc_bytes or 0),
        db_bytes=(home / "state.db").stat().st_size + sum(p.stat().st_size for p in home.glob("state.db-*")),
    )
    if profiler and profile_dir and samples:
        path = profile_dir / f"place-{size}.pstats"
        profiler.dump_stats(path)
        result["profile_top"] = top_functions(path, len(samples))
    return result


def evaluator_root(evaluator: ManagedOpaEvaluator) -> Path:
    return cast(Path, getattr(evaluator, "_root", None) or policy_dir())


# -- cold start ----------------------------------------------------------------------------------


def python_env(base: Path) -> dict[str, str]:
    """The environment for fresh processes: bytecode cached (in a private prefix under the run's
    temporary folder), as after a normal install, even where PYTHONDONTWRITEBYTECODE is set."""
    env = {k: v for k, v in os.environ.items() if k not in {"EXA_OPA_URL", "EXA_DB_URL", "PYTHONDONTWRITEBYTECODE"}}
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    env.setdefault("COLUMNS", "160")
    return env


def exa_env(home: Path) -> dict[str, str]:
    env = python_env(home.parent)
    env["EXA_HOME"] = str(home)
    return env


def timed_run(cmd: Sequence[str], env: dict[str, str], ok: set[int]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, check=False)
    ms = (time.perf_counter() - t0) * 1000
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return ms


def run_cold(size: int, seed: int, base: Path, prof: Profile, started: list[Path]) -> dict[str, Any]:
    """Fresh ``exa`` processes on a state holding ``size`` pools, OPA already running."""
    exa = str(REPO / ".venv" / "bin" / "exa")
    home = base / f"durable-{size}"
    if not (home / "state.db").exists():
        hw = Hardware(home)
        hw.apply([s.pool for s in fleet.generate_fleet(size, seed)])
        hw.close()
    env = exa_env(home)
    started.append(home)
    subprocess.run([exa, "opa", "restart"], env=env, stdout=subprocess.DEVNULL, check=True, cwd=REPO)
    pools_cmd = [exa, "hardware", "pools"]
    place_cmd = [exa, "hardware", "place", "cold-train", "--accelerator", "nvidia", "--engine", "vllm", "--target", "hpc"]
    timed_run(pools_cmd, env, {0})  # page cache and bytecode cache warm; each timed process is still new
    timed_run(place_cmd, env, {0, 3, 4})
    pools_ms = [timed_run(pools_cmd, env, {0}) for _ in range(prof.cold_reps)]
    place_ms = [timed_run(place_cmd, env, {0, 3, 4}) for _ in range(prof.cold_reps)]
    return {
        "pools": size,
        "hardware_pools_ms": {**summary(pools_ms), "median": round(statistics.median(pools_ms), 3)},
        "hardware_place_ms": {**summary(place_ms), "median": round(statistics.median(place_ms), 3)},
    }


def startup_costs(reps: int, base: Path) -> dict[str, Any]:
    """Python start-up alone, and importing the CLI module, in fresh processes."""
    py = str(REPO / ".venv" / "bin" / "python")
    env = python_env(base)
    timed_run([py, "-c", "import examlops_policy.cli.main"], env, {0})  # bytecode cache filled
    bare = [timed_run([py, "-c", "pass"], env, {0}) for _ in range(reps)]
    imp = [timed_run([py, "-c", "import examlops_policy.cli.main"], env, {0}) for _ in range(reps)]
    proc = subprocess.run([py, "-X", "importtime", "-c", "import examlops_policy.cli.main"], capture_output=True, text=True, cwd=REPO, env=env, check=False)
    top: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:"):].split("|")
        try:
            own = int(parts[0].strip())
        except ValueError:
            continue
        name = parts[2].strip()
        # the product's own modules one by one, everything else by distribution
        key = name if name.startswith("examlops_policy") else name.split(".")[0]
        top[key] = top.get(key, 0) + own
    heavy = sorted(top.items(), key=lambda kv: -kv[1])[:15]
    return {
        "python_startup_ms": round(statistics.median(bare), 3),
        "import_cli_ms": round(statistics.median(imp), 3),
        "import_self_ms_by_package": {k: round(v / 1000, 1) for k, v in heavy},
    }


# -- report --------------------------------------------------------------------------------------


def fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    fleets = report["fleets"]
    rows: list[dict[str, Any]] = []

    def add(key: str, what: str, value: float | None, limit: float, lower_is_better: bool = True, note: str = "") -> None:
        passed = value is not None and (value <= limit if lower_is_better else value >= limit)
        factor = None
        if value:
            factor = round(value / limit if lower_is_better else limit / value, 2)
        rows.append({"key": key, "what": what, "value": value, "limit": limit, "pass": passed, "factor_of_limit": factor, "note": note})

    def get(size: int, *path: str) -> Any:
        node: Any = fleets.get(str(size))
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        return node

    def place_note(size: int) -> str:
        return "timed out" if get(size, "status") == "timeout" else ""

    add("place_p50_1000_ms", "warm place p50 @1,000 (ms)", get(1000, "place_ms", "p50"), TARGET_P50_1000_MS, note=place_note(1000))
    add("place_p99_1000_ms", "warm place p99 @1,000 (ms)", get(1000, "place_ms", "p99"), TARGET_P99_1000_MS, note=place_note(1000))
    if "10000" in fleets:
        value = get(10000, "place_ms", "p50")
        note = place_note(10000)
        if value is None and note:
            note = f"every decision timed out (> {DEFAULT_TIMEOUT_S:g} s)"
        add("place_p50_10000_ms", "warm place p50 @10,000 (ms)", value, TARGET_P50_10000_MS, note=note)
    add("ratio_place_engine_1000", "place / OPA eval @1,000", get(1000, "ratio_place_to_engine_eval"), TARGET_RATIO_1000)
    add("scaling_exponent", "latency ~ size^k, k (place p50, >=100 pools)", report["scaling"].get("exponent_place_p50"), TARGET_EXPONENT)
    for size, limit in TARGET_DURABLE.items():
        d = report["durable"].get(str(size), {})
        add(f"durable_per_s_{size}", f"durable placements/s @{size:,}", d.get("per_second"), limit, lower_is_better=False)
    cold = report["cold"].get("100", {})
    add("cold_pools_ms", "cold `exa hardware pools` @100 (ms, median)", (cold.get("hardware_pools_ms") or {}).get("median"), TARGET_COLD_POOLS_MS)
    add("cold_place_ms", "cold `exa hardware place` @100 (ms, median)", (cold.get("hardware_place_ms") or {}).get("median"), TARGET_COLD_PLACE_MS)
    return rows


def print_report(report: dict[str, Any]) -> None:
    fleets = report["fleets"]
    meta = report["meta"]
    print(f"\nPlacement benchmark ({'quick' if meta['quick'] else 'full'}) · OPA {meta['opa_version']} · policy {meta['policy_revision'][:19]} · "
          f"commit {(meta['git'].get('head') or '?')[:10]}{'+' + str(meta['git']['modified_files']) + ' modified' if meta['git'].get('modified_files') else ''} · "
          f"{meta['cpus']} CPUs · load {meta['loadavg_start'][0]:.1f}->{meta.get('loadavg_end', [0])[0]:.1f} · seed {meta['seed']}")  # fmt: skip
    rows = []
    for size, f in fleets.items():
        p, e, h = f["place_ms"], f["engine_eval_ms"], f["engine_handler_ms"]
        rows.append([int(size), f["distinct_shapes"], p["n"], p["p50"], p["p99"], e["p50"], h["p50"], f.get("ratio_place_to_engine_eval"),
                     round(f["input_bytes"] / 1024, 1) if f.get("input_bytes") else None,
                     round(f["response_bytes"] / 1024, 1) if f.get("response_bytes") else None, f["status"]])  # fmt: skip
    print("\nWarm decisions: decide() through the managed OPA (ms)")
    print(table(["pools", "shapes", "n", "place p50", "place p99", "OPA eval p50", "OPA handler p50", "place/eval", "input KiB", "answer KiB", "status"], rows))
    stages = ["build_input", "encode", "http", "decode", "check", "digest", "interpret", "http_outside_opa"]
    rows = [[int(size)] + [f["breakdown_ms"].get(s) for s in stages] + [f["engine_eval_ms"]["p50"], f["engine_input_parse_ms"]["p50"]] for size, f in fleets.items()]
    print("\nWhere a decision's time goes: stage p50 of a replica of decide() (ms; http includes OPA)")
    print(table(["pools", *stages, "opa eval", "opa input parse"], rows))
    print("\nScaling: " + ", ".join(f"{s['from']:,}->{s['to']:,} pools x{s['place_ratio']} (k={s['exponent']})" for s in report["scaling"]["steps"])
          + f"; fitted k (>=100 pools) place {report['scaling'].get('exponent_place_p50')}, OPA eval {report['scaling'].get('exponent_engine_eval_p50')}")  # fmt: skip
    rows = [[int(size), d.get("placements"), d.get("seconds"), d.get("per_second"), (d.get("place_ms") or {}).get("p50"), (d.get("place_ms") or {}).get("p99"),
             d.get("decision_document_bytes"), d.get("apply_s"), d.get("synchronous"), (d.get("rows") or {}).get("decisions"), (d.get("rows") or {}).get("audit_log"),
             d.get("status")] for size, d in report["durable"].items()]  # fmt: skip
    print("\nDurable placements: Hardware.place on SQLite (reservation + decision + audit in one commit)")
    print(table(["pools", "placements", "s", "per s", "p50 ms", "p99 ms", "doc bytes", "apply s", "sync", "decision rows", "audit rows", "status"], rows))
    rows = [[int(size), c["hardware_pools_ms"]["median"], c["hardware_pools_ms"]["min"], c["hardware_place_ms"]["median"], c["hardware_place_ms"]["min"], c["hardware_pools_ms"]["n"]]
            for size, c in report["cold"].items() if size.isdigit()]  # fmt: skip
    su = report["cold"].get("startup", {})
    print("\nCold start: fresh exa processes, OPA already running (ms)")
    print(table(["pools", "pools median", "pools min", "place median", "place min", "runs"], rows))
    if su:
        top = ", ".join(f"{k} {v:g}" for k, v in list(su["import_self_ms_by_package"].items())[:10])
        print(f"python start-up {su['python_startup_ms']:.0f} ms; import examlops_policy.cli.main {su['import_cli_ms']:.0f} ms")
        print(f"  import time by package (own time under -X importtime, ms): {top}")
    print("\nTargets (issue #6)")
    rows = [[t["what"], t["value"], t["limit"], "PASS" if t["pass"] else "MISS", f"{t['factor_of_limit']}x" if t["factor_of_limit"] else "-", t["note"]] for t in report["targets"]]
    print(table(["target", "value", "limit", "", "of limit", "note"], rows))
    for size, f in fleets.items():
        if f.get("profile_top"):
            print(f"\ncProfile decide() @{int(size):,} pools, per call (top by own time)")
            print(table(["function", "calls", "own ms", "cum ms"], [[r["function"][-90:], r["calls"], r["tottime_ms"], r["cumtime_ms"]] for r in f["profile_top"][:10]]))
    for size, d in report["durable"].items():
        if d.get("profile_top"):
            print(f"\ncProfile Hardware.place @{int(size):,} pools, per call (top by own time)")
            print(table(["function", "calls", "own ms", "cum ms"], [[r["function"][-90:], r["calls"], r["tottime_ms"], r["cumtime_ms"]] for r in d["profile_top"][:10]]))


def plot(report: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install 'examlops-policy[bench]' or matplotlib): no plot written")
        return None
    fleets = report["fleets"]
    sizes = [int(s) for s in fleets]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)

    def series(key: str, q: str) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for s in sizes:
            v = fleets[str(s)][key].get(q)
            if v:
                xs.append(s)
                ys.append(v)
        return xs, ys

    for key, q, label, style in (
        ("place_ms", "p50", "decide() p50", "o-"),
        ("place_ms", "p99", "decide() p99", "s--"),
        ("engine_eval_ms", "p50", "OPA eval p50 (timer_rego_query_eval_ns)", "^-"),
        ("engine_handler_ms", "p50", "OPA handler p50", "v:"),
    ):
        xs, ys = series(key, q)
        if xs:
            ax.plot(xs, ys, style, label=label)
    timed_out = [s for s in sizes if fleets[str(s)]["status"] == "timeout" and not fleets[str(s)]["place_ms"].get("p50")]
    if timed_out:
        ax.plot(timed_out, [DEFAULT_TIMEOUT_S * 1000] * len(timed_out), "rx", markersize=12, label=f"decide() timed out (> {DEFAULT_TIMEOUT_S:g} s)")
    xs, ys = series("place_ms", "p50")
    anchor = next(((x, y) for x, y in zip(xs, ys) if x >= 100), (xs[0], ys[0]) if xs else None)
    if anchor:
        ref = [(x, anchor[1] * x / anchor[0]) for x in sizes if x >= anchor[0]]
        ax.plot([r[0] for r in ref], [r[1] for r in ref], color="grey", linewidth=0.8, label=f"linear from {anchor[0]:,} pools")
    ax.plot([1000, 1000, 10000], [TARGET_P50_1000_MS, TARGET_P99_1000_MS, TARGET_P50_10000_MS], "k*", markersize=11, label="targets (p50@1k, p99@1k, p50@10k)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pools in fleet")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"Warm placement latency vs fleet size ({report['meta']['cpus']} CPUs, OPA {report['meta']['opa_version']})")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def git_state() -> dict[str, Any]:
    """The commit measured and whether the tree had local changes (read-only git commands)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return {"head": head, "modified_files": len(dirty.splitlines())}
    except (OSError, subprocess.CalledProcessError):
        return {"head": None, "modified_files": None}


# -- main ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, fleets up to 1,000 (about a minute on 2 cores)")
    parser.add_argument("--out", type=Path, help="JSON results (default out/bench/placement[-quick].json)")
    parser.add_argument("--plot", type=Path, help="PNG plot (default: beside --out, .png)")
    parser.add_argument("--seed", type=int, default=42, help="fleet generator seed")
    parser.add_argument("--sizes", help="comma-separated fleet sizes (default 10,100,1000[,10000])")
    parser.add_argument("--no-durable", action="store_true", help="skip durable placements")
    parser.add_argument("--no-cold", action="store_true", help="skip cold starts")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="also cProfile decide() and Hardware.place; .pstats files go to DIR")
    parser.add_argument("--policy-dir", type=Path, help="evaluate this policy directory instead of the repository's (EXA_POLICY_DIR)")
    args = parser.parse_args(argv)

    prof = Profile(args.quick)
    if args.sizes:
        prof.sizes = [int(s) for s in args.sizes.split(",")]
    if args.policy_dir:
        os.environ["EXA_POLICY_DIR"] = str(args.policy_dir.resolve())
    os.environ.pop("EXA_OPA_URL", None)
    out = args.out or REPO / "out" / "bench" / ("placement-quick.json" if args.quick else "placement.json")
    plot_path = args.plot or out.with_suffix(".png")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    began = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="exa-bench-"))
    started: list[Path] = []
    root = policy_dir()
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "meta": {
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "quick": args.quick,
            "seed": args.seed,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "opa_version": OPA_VERSION,
            "policy_dir": str(root),
            "policy_revision": revision(root),
            "evaluator_timeout_s": DEFAULT_TIMEOUT_S,
            "git": git_state(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        },
        "fleets": {},
        "scaling": {},
        "durable": {},
        "cold": {},
    }
    try:
        main_home = base / "main"
        started.append(main_home)
        evaluator = ManagedOpaEvaluator(main_home, root)
        hw = Hardware(main_home, evaluator=evaluator, tables=load_tables(root))
        url = evaluator.url  # starts OPA
        log(f"OPA at {url}; state under {base}")
        for size in prof.sizes:
            states = fleet.generate_fleet(size, args.seed)
            log(f"[{time.perf_counter() - began:6.1f}s] {size:,} pools: warm decisions")
            entry: dict[str, Any] = {"pools": size, "distinct_shapes": fleet.distinct_shapes(states)}
            latency, captured = run_latency(states, hw, prof)
            entry.update(latency)
            log(f"[{time.perf_counter() - began:6.1f}s] {size:,} pools: engine metrics and stage breakdown")
            if entry["status"] == "timeout" and prof.long_engine_timeout_s:
                eng = run_engine(states, hw, main_home, captured, prof, timeout=prof.long_engine_timeout_s, reps=1)
            else:
                eng = run_engine(states, hw, main_home, captured, prof, timeout=DEFAULT_TIMEOUT_S)
            if eng["status"] == "timeout":
                entry["engine_status"] = "timeout"
            entry.update({k: v for k, v in eng.items() if k != "status"})
            p50, e50 = entry["place_ms"].get("p50"), entry["engine_eval_ms"].get("p50")
            entry["ratio_place_to_engine_eval"] = round(p50 / e50, 2) if p50 and e50 else None
            if args.profile and entry["status"] == "ok":
                log(f"[{time.perf_counter() - began:6.1f}s] {size:,} pools: cProfile")
                entry["profile_top"] = profile_decide(states, hw, args.profile, size, calls=len(fleet.WORKLOADS) if size <= 1000 else 3)
            report["fleets"][str(size)] = entry

        points = [(int(s), f["place_ms"]["p50"]) for s, f in report["fleets"].items() if int(s) >= 100 and f["place_ms"].get("p50")]
        epoints = [(int(s), f["engine_eval_ms"]["p50"]) for s, f in report["fleets"].items() if int(s) >= 100 and f["engine_eval_ms"].get("p50")]
        steps = []
        ordered = sorted((int(s), f) for s, f in report["fleets"].items())
        for (a, fa), (b, fb) in zip(ordered, ordered[1:]):
            pa, pb = fa["place_ms"].get("p50"), fb["place_ms"].get("p50")
            if pa and pb:
                steps.append({"from": a, "to": b, "place_ratio": round(pb / pa, 2), "exponent": round(math.log(pb / pa) / math.log(b / a), 3)})
        report["scaling"] = {"exponent_place_p50": exponent(points), "exponent_engine_eval_p50": exponent(epoints), "steps": steps}

        if not args.no_durable:
            for size in prof.durable_sizes:
                log(f"[{time.perf_counter() - began:6.1f}s] durable placements @{size:,} pools")
                report["durable"][str(size)] = run_durable(size, args.seed, base, evaluator, prof, args.profile)
        if not args.no_cold:
            for size in prof.cold_sizes:
                log(f"[{time.perf_counter() - began:6.1f}s] cold starts @{size:,} pools")
                report["cold"][str(size)] = run_cold(size, args.seed, base, prof, started)
            report["cold"]["startup"] = startup_costs(prof.cold_reps, base)
        hw.close()
    finally:
        for home in started:
            stop_server(home)
        shutil.rmtree(base, ignore_errors=True)
    report["targets"] = targets(report)
    report["meta"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["meta"]["wall_s"] = round(time.perf_counter() - began, 1)
    report["plot"] = plot(report, plot_path)
    print_report(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"\nwrote {out}" + (f" and {report['plot']}" if report["plot"] else "") + f" in {report['meta']['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
