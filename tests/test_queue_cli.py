"""``exa hardware place --queue``, ``queue``, ``admit``, ``cancel``, ``quotas``, ``reconcile`` and
``serve`` as a person runs them: output, ``--json``, and the exit codes of the README's table (a
queued placement is not an error)."""

from __future__ import annotations

import json
from pathlib import Path

from examlops_policy.cli import exits
from tests.conftest import run_exa


def full(home: Path) -> str:
    run_exa(home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
            "--cost-per-hour", "0.5", check=True)  # fmt: skip
    return str(json.loads(run_exa(home, "hardware", "place", "a", "--accelerator", "amd", "--count", "2", "--json", check=True).stdout)["id"])


def test_a_queued_placement_exits_0_and_one_that_can_never_run_exits_3(exa_home: Path) -> None:
    full(exa_home)
    queued = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue")
    assert queued.returncode == exits.OK
    assert queued.stdout.startswith("⏳ Queued: b · position 1 of 1 · waits for: capacity_exhausted on 1 pool\n")
    never = run_exa(exa_home, "hardware", "place", "c", "--accelerator", "amd", "--engine", "sglang", "--queue")
    assert never.returncode == exits.REJECTED and never.stdout.startswith("✗ Rejected:")
    plain = run_exa(exa_home, "hardware", "place", "d", "--accelerator", "amd")
    assert plain.returncode == exits.REJECTED


def test_a_workload_file_may_say_queue_true(exa_home: Path, tmp_path: Path) -> None:
    full(exa_home)
    spec = tmp_path / "w.yaml"
    spec.write_text("workload:\n  name: from-file\n  accelerator: amd\n  priority: high\nqueue: true\n")
    done = json.loads(run_exa(exa_home, "hardware", "place", "-f", str(spec), "--json", check=True).stdout)
    assert done["outcome"] == "queued" and done["queue"]["priority"] == "high" and done["queue"]["position"] == 1
    assert done["queue"]["waits_for"] == {"capacity_exhausted": 1}, "the same shape as `queue --json` gives"
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload:\n  name: x\n  accelerator: amd\nqueue: yes-please\n")
    refused = run_exa(exa_home, "hardware", "place", "-f", str(bad))
    assert refused.returncode == exits.BAD_INPUT and "queue" in refused.stderr


def test_submission_options_need_queue_and_their_scheduler(exa_home: Path, tmp_path: Path) -> None:
    full(exa_home)
    no_queue = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--submit", "slurm", "--script", "x.sh")
    assert no_queue.returncode == exits.BAD_INPUT and "add --queue" in no_queue.stderr
    no_script = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--submit", "slurm")
    assert no_script.returncode == exits.BAD_INPUT and "--script" in no_script.stderr
    stray = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--image", "busybox")
    assert stray.returncode == exits.BAD_INPUT and "--submit" in stray.stderr
    missing = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--submit", "slurm", "--script", str(tmp_path / "none.sh"))
    assert missing.returncode == exits.BAD_INPUT and "no such job script" in missing.stderr
    unknown = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--priority", "urgent")
    assert unknown.returncode == exits.BAD_INPUT and "unknown priority class 'urgent'" in unknown.stderr


def test_queue_admit_cancel_and_their_json(exa_home: Path) -> None:
    holder = full(exa_home)
    b = json.loads(run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--json", check=True).stdout)["id"]
    c = json.loads(run_exa(exa_home, "hardware", "place", "c", "--accelerator", "amd", "--queue", "--priority", "low", "--json", check=True).stdout)["id"]
    listing = json.loads(run_exa(exa_home, "hardware", "queue", "--json", check=True).stdout)
    assert [(e["id"], e["position"], e["state"]) for e in listing["entries"]] == [(b, 1, "queued"), (c, 2, "queued")]
    assert listing["entries"][0]["waits_for"] == {"capacity_exhausted": 1}
    nothing = json.loads(run_exa(exa_home, "hardware", "admit", "--json", check=True).stdout)
    assert nothing["admitted"] == [] and nothing["waiting"] == 2
    cancelled = run_exa(exa_home, "hardware", "cancel", c[:10])
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(f"✓ cancelled queued workload {c[:12]} (c)")
    again = json.loads(run_exa(exa_home, "hardware", "cancel", c, "--json", check=True).stdout)
    assert again["already_cancelled"] is True and again["state"] == "cancelled"
    released = json.loads(run_exa(exa_home, "hardware", "release", holder, "--json", check=True).stdout)
    assert [a["queued_id"] for a in released["admitted"]["admitted"]] == [b]
    admitted = run_exa(exa_home, "hardware", "cancel", b)
    assert admitted.returncode == exits.BAD_INPUT and "release that placement instead" in admitted.stderr
    assert run_exa(exa_home, "hardware", "cancel", "abcdef").returncode == exits.NOT_FOUND
    every = json.loads(run_exa(exa_home, "hardware", "queue", "--all", "--json", check=True).stdout)
    assert {e["id"]: e["state"] for e in every["entries"]} == {b: "admitted", c: "cancelled"}
    decisions = run_exa(exa_home, "hardware", "decisions", check=True).stdout
    assert " queued " in decisions and "admitted" in decisions


def test_quotas_and_reconcile_output(exa_home: Path, tmp_path: Path) -> None:
    quotas = json.loads(run_exa(exa_home, "hardware", "quotas", "--json", check=True).stdout)
    assert {(r["project"], r["accelerator"]) for r in quotas} >= {("inference-eu", "nvidia"), ("llm-pretraining", "amd")}
    assert run_exa(exa_home, "hardware", "reconcile", check=True).stdout == "no change (0 live jobs checked)\n"
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    unreadable = run_exa(exa_home, "hardware", "reconcile", "--slurm", "--json", env={"PATH": str(empty)})
    assert unreadable.returncode == exits.EXECUTOR
    assert json.loads(unreadable.stdout)["unreadable"][0]["scheduler"] == "slurm"
    stray = run_exa(exa_home, "hardware", "reconcile", "--kubeconfig", "k")
    assert stray.returncode == exits.BAD_INPUT


def test_serve_refuses_a_bad_interval(exa_home: Path) -> None:
    bad = run_exa(exa_home, "hardware", "serve", "--interval", "soon")
    assert bad.returncode == exits.BAD_INPUT
    once = run_exa(exa_home, "hardware", "serve", "--once", "--interval", "1s")
    assert once.returncode == 0 and once.stdout.rstrip().endswith("stopped")


def test_an_edited_queue_spec_fails_audit_verify_naming_the_row(exa_home: Path) -> None:
    import sqlite3

    full(exa_home)
    waiting = json.loads(run_exa(exa_home, "hardware", "place", "small", "--accelerator", "amd", "--queue", "--json", check=True).stdout)["id"]
    assert run_exa(exa_home, "audit", "verify").returncode == exits.OK
    with sqlite3.connect(exa_home / "state.db") as db:
        db.execute("UPDATE queue SET spec = ? WHERE id = ?", ('{"accelerator":"amd","count":2,"name":"small"}', waiting))
    verify = run_exa(exa_home, "audit", "verify")
    assert verify.returncode == exits.AUDIT, (verify.stdout, verify.stderr)  # "audit log does not verify"
    assert f"queue.spec of {waiting[:12]}" in verify.stdout + verify.stderr


def test_queue_and_explain_show_the_reservation_the_first_waiting_workload_holds(exa_home: Path) -> None:
    full(exa_home)
    big = json.loads(run_exa(exa_home, "hardware", "place", "big", "--accelerator", "amd", "--count", "2", "--priority", "high", "--queue",
                             "--json", check=True).stdout)["id"]  # fmt: skip
    run_exa(exa_home, "hardware", "place", "small", "--accelerator", "amd", "--queue", check=True)
    listing = run_exa(exa_home, "hardware", "queue", check=True).stdout
    assert f"reserved: big ({big[:12]}) holds a reservation of 2 devices on pool small from when enough of its grants end" in listing
    assert listing.count("reserved:") == 1
    explained = run_exa(exa_home, "hardware", "explain", big, check=True).stdout
    assert "reserved: holds a reservation of 2 devices on pool small" in explained
    entries = json.loads(run_exa(exa_home, "hardware", "queue", "--json", check=True).stdout)["entries"]
    assert [e["reservation"] is not None for e in entries] == [True, False]


def test_a_preemption_is_said_on_both_sides_and_a_preemption_not_done_says_why(exa_home: Path) -> None:
    """The victim's explain and the decisions list say "preempted" (by which placement), the
    preemptor's explain names its victims; urgent work that takes nothing says the plan's reasons
    (place, queue, admit --json, explain)."""
    run_exa(exa_home, "hardware", "add-pool", "spot", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu", "--spot",
            check=True)  # fmt: skip
    low = json.loads(run_exa(exa_home, "hardware", "place", "low", "--accelerator", "amd", "--count", "2", "--priority", "low", "--spot", "allow",
                             "--json", check=True).stdout)["id"]  # fmt: skip
    urgent = run_exa(exa_home, "hardware", "place", "urgent", "--accelerator", "amd", "--count", "2", "--priority", "high", "--spot", "allow",
                     "--queue", check=True).stdout.splitlines()  # fmt: skip
    assert urgent[0] == "⏳ Queued: urgent · admitted"
    assert urgent[2].startswith("  admitted at once by decision ") and urgent[2].endswith(f": preempted {low[:12]}")
    placed = urgent[2].removeprefix("  admitted at once by decision ").split(":")[0]
    victim = run_exa(exa_home, "hardware", "explain", low, check=True).stdout.splitlines()
    assert victim[0].endswith(f" · preempted {victim[0].split(' · preempted ')[1].split(' ')[0]} by decision {placed[:12]}")
    assert any(line.startswith(f"preempted by decision {placed} (for queued record ") for line in victim)
    assert f"preempted {low} to make room" in run_exa(exa_home, "hardware", "explain", placed, check=True).stdout
    row = next(line for line in run_exa(exa_home, "hardware", "decisions", check=True).stdout.splitlines() if line.startswith(low[:12]))
    assert row.split()[-1] == "preempted"

    # Urgent work of another class on a pool that is not spot capacity: nothing to take, and why.
    run_exa(exa_home, "hardware", "add-pool", "gpus", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu", check=True)
    run_exa(exa_home, "hardware", "place", "train", "--accelerator", "nvidia", "--count", "2", check=True)
    waits = run_exa(exa_home, "hardware", "place", "eval", "--accelerator", "nvidia", "--count", "2", "--priority", "high", "--queue", "--json",
                    check=True)  # fmt: skip
    entry = json.loads(waits.stdout)["queue"]
    assert entry["state"] == "queued" and entry["preemption"].startswith("pool_not_preemptible on 1 grant (")
    why = entry["preemption"]
    assert f"not preempting: {why}" in run_exa(exa_home, "hardware", "queue", check=True).stdout
    assert f"not preempting: {why}" in run_exa(exa_home, "hardware", "explain", entry["id"], check=True).stdout
    report = json.loads(run_exa(exa_home, "hardware", "admit", "--json", check=True).stdout)
    assert report["not_preempted"] == [{"id": entry["id"], "workload": "eval", "why": why}]


def _never(home: Path, name: str, *asks: str) -> dict[str, object]:
    """``place NAME --queue ASKS`` refused at once: exit 3 (rejected), the rejection's JSON."""
    done = run_exa(home, "hardware", "place", name, *asks, "--queue", "--json")
    assert done.returncode == exits.REJECTED, (name, done.stdout, done.stderr)
    out: dict[str, object] = json.loads(done.stdout)
    assert out["outcome"] == "rejected" and out["code"] == "no_eligible_pool" and out["queued"] is False, (name, out["reason"])
    return out


def _codes(decision: dict[str, object], pool: str) -> list[tuple[str, str]]:
    verdict = next(v for v in decision["verdicts"] if v["pool"] == pool)  # type: ignore[attr-defined]
    return [(r["code"], r["kind"]) for r in verdict["reasons"]]


def test_place_queue_refuses_what_a_pool_that_lists_no_nodes_could_never_hold(exa_home: Path) -> None:
    """A pool that lists no nodes is one node of all its devices: more devices than it has in all
    is never (pool_too_small), so ``place --queue`` refuses it (exit 3) and nothing waits; a request
    it could hold once its grants end still waits."""
    run_exa(exa_home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
            check=True)  # fmt: skip
    run_exa(exa_home, "hardware", "add-pool", "cores", "--target", "hpc", "--accelerator", "cpu", "--count", "64", "--region", "eu",
            check=True)  # fmt: skip
    text = run_exa(exa_home, "hardware", "place", "big", "--accelerator", "amd", "--count", "3", "--queue")
    assert text.returncode == exits.REJECTED
    assert text.stdout.splitlines()[0] == (
        "✗ Rejected: no pool is eligible for big (2 checked: capacity_exhausted on 1 pool, fallback_not_allowed on 1 pool, pool_too_small on 1 pool)"
    )
    big = _never(exa_home, "big", "--accelerator", "amd", "--count", "3")
    assert _codes(big, "small") == [("pool_too_small", "never"), ("capacity_exhausted", "not_now")]
    small_reason = next(v for v in big["verdicts"] if v["pool"] == "small")["reasons"][0]  # type: ignore[attr-defined]
    assert small_reason["message"] == (
        "needs 3 whole amd device(s) on one node, more than the pool has in all: it lists no nodes, so all its devices are one node"
    )
    # A CPU pool that lists no nodes is one node of its CPUs; the amd pool stands in for cpu, and is
    # too small as well.
    cores = _never(exa_home, "cores", "--accelerator", "cpu", "--count", "65")
    assert _codes(cores, "cores") == _codes(cores, "small") == [("pool_too_small", "never"), ("capacity_exhausted", "not_now")]
    assert json.loads(run_exa(exa_home, "hardware", "queue", "--json", check=True).stdout)["entries"] == []
    # What fits the pool once its grants end waits, as before.
    run_exa(exa_home, "hardware", "place", "a", "--accelerator", "amd", "--count", "2", check=True)
    waits = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", "--count", "2", "--queue")
    assert waits.returncode == exits.OK and waits.stdout.startswith("⏳ Queued: b · position 1 of 1 · waits for: capacity_exhausted on 1 pool\n")
    assert [e["workload"] for e in json.loads(run_exa(exa_home, "hardware", "queue", "--json", check=True).stdout)["entries"]] == ["b"]
    assert run_exa(exa_home, "audit", "verify").returncode == exits.OK


NODES = """\
pools:
  - name: gpu
    target: hpc
    accelerator: nvidia
    model: H100
    region: eu
    nodes:
      - {name: n1, devices: 4, cpu: 64, memory: 512Gi}
      - {name: n2, devices: 4, cpu: 64, memory: 512Gi, state: drained}
"""


def test_place_queue_refuses_what_no_node_could_ever_hold_and_waits_for_a_drained_node(exa_home: Path, tmp_path: Path) -> None:
    """A pool of nodes: more devices, CPU or memory on one node than any node has, or more nodes
    than the pool has, is never (no_node_fits) and ``place --queue`` refuses it; a gang that fits
    only with the drained node is not never (the node may come back): it waits."""
    pools = tmp_path / "pools.yaml"
    pools.write_text(NODES)
    run_exa(exa_home, "hardware", "apply", "-f", str(pools), check=True)
    for name, asks in {
        "eight": ("--count", "8"),
        "three-nodes": ("--count", "1", "--nodes", "3"),
        "gang-of-five": ("--count", "5", "--nodes", "2"),
        "cores": ("--cpu", "65"),
        "memory": ("--memory", "600Gi"),
    }.items():
        out = _never(exa_home, name, "--accelerator", "nvidia", *asks)
        assert _codes(out, "gpu") == [("no_node_fits", "never"), ("capacity_exhausted", "not_now")], name
    assert json.loads(run_exa(exa_home, "hardware", "queue", "--json", check=True).stdout)["entries"] == []
    waits = run_exa(exa_home, "hardware", "place", "pair", "--accelerator", "nvidia", "--count", "4", "--nodes", "2", "--queue")
    assert waits.returncode == exits.OK, (waits.stdout, waits.stderr)
    assert waits.stdout.startswith("⏳ Queued: pair · position 1 of 1 · waits for: capacity_exhausted on 1 pool\n")
