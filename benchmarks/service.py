"""The placement service under concurrent HTTP clients, at 1,000 pools (issue 33).

Reports, each from real ``exa hardware serve --listen`` processes:

* dry-run and durable placement latency (p50, p99 ms) with 1 and 16 clients on SQLite, one replica
  (answers without every pool's verdict, ``?verdicts=false``; one client's dry runs with them too);
* durable decisions per second with 16 clients on PostgreSQL, with 1 and 2 replicas (when
  ``EXA_TEST_PG_URL`` or ``scripts/pg-up``'s URL names a server);
* the HTTP overhead: one client's dry-run latency against ``Hardware.what_if`` in process (the same
  workload, the same fleet);
* cold ``exa hardware place --dry-run`` through the client (``EXA_SERVER``): whole-process wall
  time, median of 9.

Targets (issue 33): dry-run p50 <= 3 ms, p99 <= 15 ms; durable p50 <= 5 ms, p99 <= 25 ms;
>= 400 durable decisions/s with 2 replicas; cold client <= 60 ms.

    .venv/bin/python benchmarks/service.py [--pools 1000] [--requests 400] [--clients 16] [--no-pg]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet import generate_fleet  # noqa: E402

EXA = Path(sys.executable).parent / "exa"
PROJECT = "default"  # a project without a quota: the fleet is what runs out, not the project's share


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def build(home: Path, pools: int, env: dict[str, str]) -> str:
    """A home with ``pools`` pools of the synthetic fleet; the most common accelerator."""
    from examlops_policy.hardware import Hardware

    fleet = [s.pool for s in generate_fleet(pools)]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        hw = Hardware(home)
        try:
            hw.apply(fleet)
        finally:
            hw.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Counter(p.accelerator for p in fleet if p.accelerator != "cpu").most_common(1)[0][0]


def exa(home: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(EXA), *args], env={**os.environ, "EXA_HOME": str(home), **env}, capture_output=True, text=True, check=True)
    return done.stdout


def serve(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen([str(EXA), "hardware", "serve", "--listen", f"127.0.0.1:{port}", "--interval", "30s"],
                            env={**os.environ, "EXA_HOME": str(home), **env}, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the service did not become ready")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def load(ports: list[int], token: str, body: dict[str, Any], requests: int, clients: int, *, verdicts: bool = False) -> dict[str, Any]:
    """``requests`` POST /v1/decisions from ``clients`` threads (keep-alive connections), the
    replicas taken in turn: latency per request and decisions per second. ``verdicts``: the whole
    decision as ``place --json`` prints it (every pool's verdict: ~800 KB at 1,000 pools), else
    ``?verdicts=false``."""
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    per = requests // clients
    payload = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=300)
        mine: list[float] = []
        seen: Counter[str] = Counter()
        for _ in range(per):
            t0 = time.perf_counter()
            conn.request("POST", "/v1/decisions" if verdicts else "/v1/decisions?verdicts=false", body=payload, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            mine.append((time.perf_counter() - t0) * 1000)
            seen[json.loads(data).get("outcome", f"http {answer.status}")] += 1
        conn.close()
        with lock:
            latencies.extend(mine)
            outcomes.update(seen)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {"requests": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 2), "p99_ms": round(percentile(latencies, 0.99), 2),
            "per_s": round(len(latencies) / wall, 1), "outcomes": dict(outcomes)}  # fmt: skip


def in_process(home: Path, accelerator: str, rounds: int) -> float:
    from examlops_policy.hardware import Hardware
    from examlops_policy.model import Workload

    hw = Hardware(home)
    try:
        w = Workload("bench", accelerator=accelerator, project=PROJECT)
        hw.what_if(w, where=True)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            hw.what_if(w, where=True)
            times.append((time.perf_counter() - t0) * 1000)
        return round(statistics.median(times), 2)
    finally:
        hw.close()


def cold_client(port: int, token: str, accelerator: str, runs: int = 9) -> float:
    env = {**os.environ, "EXA_SERVER": f"http://127.0.0.1:{port}", "EXA_TOKEN": token}
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([str(EXA), "hardware", "place", "cold", "--accelerator", accelerator, "--dry-run"], env=env, capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def pg_url() -> str | None:
    url = os.environ.get("EXA_TEST_PG_URL")
    found = ROOT / ".exa-services" / "pg" / "url"
    return url or (found.read_text(encoding="utf-8").strip() if found.is_file() else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pools", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--no-pg", action="store_true")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores", flush=True)
    report: dict[str, Any] = {"pools": args.pools, "clients": args.clients}
    with tempfile.TemporaryDirectory(prefix="exa-bench-service-") as tmp:
        home = Path(tmp) / "home"
        accelerator = build(home, args.pools, {})
        token = json.loads(exa(home, {}, "tokens", "create", "--project", PROJECT, "--scope", "place,read", "--json"))["token"]
        body = {"workload": {"name": "bench", "accelerator": accelerator}}
        proc, port = serve(home, {})
        try:
            report["sqlite_dry_run_1_client_with_verdicts"] = load([port], token, {**body, "dry_run": True}, 50, 1, verdicts=True)
            one = load([port], token, {**body, "dry_run": True}, max(50, args.requests // 4), 1)
            report["sqlite_dry_run_1_client"] = one
            report["in_process_what_if_p50_ms"] = in_process(home, accelerator, 50)
            report["http_overhead_p50_ms"] = round(one["p50_ms"] - report["in_process_what_if_p50_ms"], 2)
            report["sqlite_dry_run"] = load([port], token, {**body, "dry_run": True}, args.requests, args.clients)
            report["sqlite_durable_1_client"] = load([port], token, body, max(50, args.requests // 4), 1)
            report["sqlite_durable"] = load([port], token, body, args.requests, args.clients)
            report["cold_client_place_dry_run_median_ms"] = cold_client(port, token, accelerator)
        finally:
            stop(proc)
        print(json.dumps(report, indent=2), flush=True)
        url = None if args.no_pg else pg_url()
        if url is not None:
            import uuid

            import psycopg

            for replicas in (1, 2):
                schema = f"exa_bench_{uuid.uuid4().hex[:10]}"
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"CREATE SCHEMA {schema}")
                try:
                    env = {"EXA_DB_URL": f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"}
                    pg_home = Path(tmp) / f"pg{replicas}"
                    build(pg_home, args.pools, env)
                    pg_token = json.loads(exa(pg_home, env, "tokens", "create", "--project", PROJECT, "--scope", "place,read", "--json"))["token"]
                    procs = [serve(Path(tmp) / f"pg{replicas}-r{i}", env) for i in range(replicas)]
                    try:
                        report[f"postgres_durable_{replicas}_replica{'s' if replicas > 1 else ''}"] = load(
                            [p for _, p in procs], pg_token, body, args.requests, args.clients)
                    finally:
                        for p, _ in procs:
                            stop(p)
                finally:
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
