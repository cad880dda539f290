"""Several exa processes at once against one state: capacity is never oversubscribed and the
audit chain never forks."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

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
