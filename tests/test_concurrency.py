"""Several exa processes at once against one state: capacity is never oversubscribed, the audit
chain never forks, and no queued workload is admitted twice."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from reliability.backends import Backend, backend, fresh_backend  # noqa: F401  (backend: the fixture)
from reliability.harness import violations
from tests.conftest import EXA, run_exa, shared_opa_env


def test_concurrent_cli_placements_never_exceed_a_pools_count(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "only", "--target", "hpc", "--accelerator", "amd", "--count", "6", "--region", "eu", check=True)
    env = {"EXA_HOME": str(exa_home), **shared_opa_env(), "PATH": "/usr/bin:/bin"}
    script = f"for i in 1 2 3; do {EXA} hardware place w$$-$i --accelerator amd --engine vllm --json; done"
    procs = [subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    outcomes = [json.loads(doc)["outcome"] for out in outputs for doc in _documents(out)]
    assert len(outcomes) == 12
    assert outcomes.count("placed") == 6 and outcomes.count("rejected") == 6
    db = sqlite3.connect(exa_home / "state.db")
    held = db.execute("SELECT SUM(devices) FROM allocations WHERE released_at IS NULL").fetchone()[0]
    assert held == 6
    seqs = [s for (s,) in db.execute("SELECT seq FROM audit_log ORDER BY seq")]
    assert seqs == list(range(1, 14))  # one pool entry + 12 decisions, no gap, no fork
    assert run_exa(exa_home, "audit", "verify").returncode == 0


def test_concurrent_cli_placements_never_hold_a_nodes_device_or_cores_twice(exa_home: Path) -> None:
    """Two nodes of 4 devices and 20 cores: 2 devices and 8 cores fit twice on each node (the
    cores run out first), whatever four processes placing at once do."""
    run_exa(exa_home, "hardware", "add-pool", "nodes", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
            "--nodes", "2", "--cpu-per-node", "20", check=True)  # fmt: skip
    env = {"EXA_HOME": str(exa_home), **shared_opa_env(), "PATH": "/usr/bin:/bin"}
    script = f"for i in 1 2 3; do {EXA} hardware place w$$-$i --accelerator nvidia --count 2 --cpu 8 --json; done"
    procs = [subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    outcomes = [json.loads(doc)["outcome"] for out in outputs for doc in _documents(out)]
    assert sorted(outcomes) == ["placed"] * 4 + ["rejected"] * 8
    db = sqlite3.connect(exa_home / "state.db")
    held = db.execute("SELECT node, device, COUNT(*) FROM holdings GROUP BY node, device").fetchall()
    assert sorted((node, device) for node, device, _ in held) == [(f"nodes-{n}", d) for n in (0, 1) for d in range(4)]
    assert all(n == 1 for _, _, n in held)
    cores = dict(db.execute("SELECT node, SUM(cpu_milli) FROM node_grants GROUP BY node").fetchall())
    assert cores == {"nodes-0": 16000, "nodes-1": 16000}
    assert run_exa(exa_home, "audit", "verify").returncode == 0


def _documents(text: str) -> list[str]:
    """Split concatenated pretty-printed JSON documents."""
    docs, depth, current = [], 0, ""
    for line in text.splitlines(keepends=True):
        current += line
        depth += line.count("{") - line.count("}")
        if depth == 0 and current.strip():
            docs.append(current)
            current = ""
    return docs


@pytest.mark.opa  # the session's OPA, through shared_opa_env
def test_admitters_placers_and_releasers_at_once_admit_nothing_twice(backend: Backend, tmp_path: Path) -> None:
    """4 admitters, 4 placers queueing work and 2 releasers against one state (SQLite or
    PostgreSQL): every queued workload is admitted at most once, no pool holds more than it has,
    the audit chain verifies and replays to the state."""
    home = Path(backend.target).parent if backend.name == "sqlite" else tmp_path / "home"
    env = {**os.environ, "EXA_HOME": str(home), **backend.env(), **shared_opa_env(), "COLUMNS": "200"}
    run_exa(home, "hardware", "add-pool", "only", "--target", "hpc", "--accelerator", "amd", "--count", "6", "--region", "eu",
            "--cost-per-hour", "0.5", env=backend.env(), check=True)  # fmt: skip
    holders = [json.loads(run_exa(home, "hardware", "place", f"h{i}", "--accelerator", "amd", "--json", env=backend.env(), check=True).stdout)["id"]
               for i in range(6)]  # fmt: skip
    admit = f"for i in 1 2 3 4 5 6; do {EXA} hardware admit --json >/dev/null; sleep 0.2; done"
    place = f"for i in 1 2 3; do {EXA} hardware place w$$-$i --accelerator amd --queue --json >/dev/null; done"
    releases = [" ; ".join(f"sleep 0.5; {EXA} hardware release {h} --json >/dev/null" for h in holders[k::2]) for k in (0, 1)]
    scripts = [admit] * 4 + [place] * 4 + releases
    procs = [subprocess.Popen(["bash", "-c", s], env=env, stderr=subprocess.PIPE, text=True) for s in scripts]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    run_exa(home, "hardware", "admit", env=backend.env(), check=True)  # whatever fits now is in
    with backend.raw() as db:
        twice = db.execute("SELECT queued_id FROM decisions WHERE queued_id IS NOT NULL GROUP BY queued_id HAVING count(*) > 1").fetchall()
        live = db.execute("SELECT COALESCE(SUM(devices), 0) FROM allocations WHERE released_at IS NULL").fetchone()[0]
        states = dict(db.execute("SELECT state, count(*) FROM queue GROUP BY state").fetchall())
        linked = db.execute("SELECT count(*) FROM decisions WHERE queued_id IS NOT NULL").fetchone()[0]
        direct = db.execute("SELECT count(*) FROM decisions WHERE outcome = 'placed' AND workload LIKE 'w%' AND queued_id IS NULL").fetchone()[0]
    assert twice == []
    assert states.get("admitted", 0) == linked
    # Every placement asked for was placed at once or queued; the six devices freed all went to them.
    assert states.get("admitted", 0) + states.get("queued", 0) + direct == 12
    assert live == 6 and states.get("admitted", 0) + direct == 6
    assert violations(backend) == []
    assert run_exa(home, "audit", "verify", env=backend.env()).returncode == 0


@pytest.mark.opa  # the session's OPA, through shared_opa_env
def test_admitters_at_once_after_a_preemption_place_the_victim_once(backend: Backend, tmp_path: Path) -> None:
    """Issue 32, 2, under concurrency: a high-priority workload queued with place --queue preempts a
    low one on spot capacity, and the victim fits at once on demand; 4 admitters running beside it
    (each finishing what a preemption left) and the preemptor's release never place or queue the
    victim twice."""
    home = Path(backend.target).parent if backend.name == "sqlite" else tmp_path / "home"
    env = {**os.environ, "EXA_HOME": str(home), **backend.env(), **shared_opa_env(), "COLUMNS": "200"}
    for name, spot in (("nv-spot", ["--spot"]), ("nv-od", [])):
        run_exa(home, "hardware", "add-pool", name, "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu",
                "--cost-per-hour", "0.5" if spot else "2", *spot, env=backend.env(), check=True)  # fmt: skip
    victim = json.loads(run_exa(home, "hardware", "place", "victim", "--accelerator", "nvidia", "--count", "2", "--priority", "low",
                                "--spot", "allow", "--json", env=backend.env(), check=True).stdout)["id"]  # fmt: skip
    # The boss is queued beside the admitters: its place --queue preempts at once, while they run.
    boss_place = (f"{EXA} hardware place boss --accelerator nvidia --count 2 --priority high --spot require --queue >/dev/null; "
                  f"{EXA} hardware admit --json >/dev/null")  # fmt: skip
    admit = f"for i in 1 2 3 4; do {EXA} hardware admit --json >/dev/null; done"
    procs = [subprocess.Popen(["bash", "-c", script], env=env, stderr=subprocess.PIPE, text=True) for script in (boss_place, *[admit] * 4)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    with backend.raw() as db:
        boss = db.execute("SELECT id FROM decisions WHERE workload = 'boss' AND outcome = 'placed' AND released_at IS NULL").fetchall()
    assert len(boss) == 1
    run_exa(home, "hardware", "release", boss[0][0], env=backend.env(), check=True)
    run_exa(home, "hardware", "admit", env=backend.env(), check=True)
    with backend.raw() as db:
        live = db.execute("SELECT count(*) FROM decisions WHERE workload = 'victim' AND outcome = 'placed' AND released_at IS NULL").fetchone()[0]
        again = db.execute("SELECT count(*) FROM decisions WHERE replaces = " + ("?" if backend.name == "sqlite" else "%s"), (victim,)).fetchone()[0]
        waiting = db.execute("SELECT count(*) FROM queue WHERE workload = 'victim' AND state = 'queued'").fetchone()[0]
    assert (live, again, waiting) == (1, 1, 0)
    assert violations(backend) == []
    assert run_exa(home, "audit", "verify", env=backend.env()).returncode == 0


@pytest.mark.opa  # the session's OPA, through shared_opa_env
def test_small_jobs_placed_and_admitted_at_once_do_not_starve_a_reserved_large_one(backend: Backend, tmp_path: Path) -> None:
    """Issue 32, 3, under concurrency: a 4-device high-priority job waits behind 4 one-device jobs;
    4 processes queue small jobs and 2 admit while the 4 are released one by one. The large job
    holds its reservation throughout and is admitted; no pool holds more than it has."""
    home = Path(backend.target).parent if backend.name == "sqlite" else tmp_path / "home"
    env = {**os.environ, "EXA_HOME": str(home), **backend.env(), **shared_opa_env(), "COLUMNS": "200"}
    run_exa(home, "hardware", "add-pool", "nv", "--target", "hpc", "--accelerator", "nvidia", "--count", "4", "--region", "eu",
            "--cost-per-hour", "0.5", env=backend.env(), check=True)  # fmt: skip
    holders = [json.loads(run_exa(home, "hardware", "place", f"s{i}", "--accelerator", "nvidia", "--json", env=backend.env(), check=True).stdout)["id"]
               for i in range(4)]  # fmt: skip
    big = json.loads(run_exa(home, "hardware", "place", "big", "--accelerator", "nvidia", "--count", "4", "--priority", "high", "--queue",
                             "--json", env=backend.env(), check=True).stdout)["id"]  # fmt: skip
    place = f"for i in 1 2 3; do {EXA} hardware place q$$-$i --accelerator nvidia --queue --json >/dev/null; sleep 0.3; done"
    admit = f"for i in 1 2 3 4 5; do {EXA} hardware admit --json >/dev/null; sleep 0.3; done"
    release = " ; ".join(f"sleep 0.4; {EXA} hardware release {h} --json >/dev/null" for h in holders)
    procs = [subprocess.Popen(["bash", "-c", s], env=env, stderr=subprocess.PIPE, text=True) for s in [place] * 4 + [admit] * 2 + [release]]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    run_exa(home, "hardware", "admit", env=backend.env(), check=True)
    with backend.raw() as db:
        state = db.execute("SELECT state FROM queue WHERE id = " + ("?" if backend.name == "sqlite" else "%s"), (big,)).fetchone()[0]
        live = db.execute("SELECT COALESCE(SUM(devices), 0) FROM allocations WHERE released_at IS NULL").fetchone()[0]
    assert state == "admitted" and live == 4
    assert violations(backend) == []
    assert run_exa(home, "audit", "verify", env=backend.env()).returncode == 0


OVERLAPPING = """
pools:
  - {name: ts4, target: hpc, accelerator: nvidia, model: L4, region: eu, cost_per_hour: 0.5, sharing: time-slice,
     shares_per_device: 4, nodes: [{name: l1, devices: 2, cpu: 16, memory: 64Gi}]}
  - {name: mps8, target: hpc, accelerator: nvidia, model: L4, region: eu, cost_per_hour: 0.5, sharing: mps,
     shares_per_device: 8, nodes: [{name: l1, devices: 2, cpu: 16, memory: 64Gi}]}
  - {name: whole, target: hpc, accelerator: nvidia, model: L4, region: eu, cost_per_hour: 0.5,
     nodes: [{name: l1, devices: 2, cpu: 16, memory: 64Gi}]}
  - {name: cores, target: hpc, accelerator: cpu, region: eu, cost_per_hour: 0.1,
     nodes: [{name: l1, devices: 16, cpu: 16, memory: 64Gi}]}
"""


@pytest.mark.opa  # the session's OPA, through shared_opa_env
def test_placers_at_once_on_overlapping_pools_never_hold_a_device_share_or_core_twice(backend: Backend, tmp_path: Path) -> None:
    """Issue 30, under concurrency: four pools over one node of 2 L4 and 16 cores (time-slice 4
    ways, MPS 8 ways, whole devices, and the node's cores as a CPU pool), priced alike; four
    processes place fractions, whole devices and cores with CPU at once. Counted from the stored
    holdings against the node: a device is in one mode, its shares make at most one device, and
    the cores granted are at most 16."""
    home = Path(backend.target).parent if backend.name == "sqlite" else tmp_path / "home"
    env = {**os.environ, "EXA_HOME": str(home), **backend.env(), **shared_opa_env(), "COLUMNS": "200"}
    fleet = tmp_path / "overlapping.yaml"
    fleet.write_text(OVERLAPPING, encoding="utf-8")
    run_exa(home, "hardware", "apply", "-f", str(fleet), env=backend.env(), check=True)
    asks = [
        "--accelerator nvidia --engine vllm --fraction 0.25 --cpu 1",
        "--accelerator nvidia --engine vllm --fraction 0.125 --cpu 1",
        "--accelerator nvidia --engine vllm --fraction 0.5 --cpu 2",
        "--accelerator nvidia --engine vllm --cpu 2",
        "--accelerator cpu --engine cpu --count 3",
    ]
    scripts = [
        # Each place exits 0 (placed) or 3 (refused: the node is full); anything else is a fault.
        " ; ".join(f"{EXA} hardware place w{k}-{i} {asks[(k + i) % len(asks)]} --json >/dev/null; echo $?" for i in range(5)) for k in range(4)
    ]
    procs = [subprocess.Popen(["bash", "-c", s], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in scripts]
    done = [p.communicate(timeout=600) for p in procs]
    codes = [int(c) for out, _ in done for c in out.split()]
    assert len(codes) == 20 and set(codes) <= {0, 3}, done
    assert 0 in codes
    per_device = {"ts4": 4, "mps8": 8}
    with backend.raw() as db:
        rows = db.execute("SELECT node, device, pool, shares FROM holdings WHERE node = 'l1'").fetchall()
        cores = db.execute("SELECT COALESCE(SUM(cpu_milli), 0) FROM node_grants WHERE node = 'l1'").fetchone()[0]
    modes: dict[int, set[str]] = {}
    used: dict[int, float] = {}
    for _node, device, pool, shares in rows:
        if pool == "cores":
            continue  # the CPU pool's devices are the node's cores, counted in node_grants
        modes.setdefault(device, set()).add(pool if shares is not None else "whole")
        used[device] = used.get(device, 0.0) + (shares / per_device[pool] if shares is not None else 1.0)
    assert all(len(m) == 1 for m in modes.values()), modes
    assert all(u <= 1.0 + 1e-9 for u in used.values()), used
    assert cores <= 16000, cores
    assert rows, "nothing was placed"
    assert violations(backend) == []
    assert run_exa(home, "audit", "verify", env=backend.env()).returncode == 0
