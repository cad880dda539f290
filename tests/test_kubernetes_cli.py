"""``exa`` end to end against a real Kubernetes control plane (scripts/k8s-up): discover → burst →
submit → status → release, through the real CLI (a subprocess per command, as a person runs it).

The GPU nodes are kwok fake nodes this module creates (tests/test_kubernetes_cluster.py's
conventions: the harness's own kubeconfig only, skipped when no cluster answers unless
``EXA_REQUIRE_SERVICES`` is set). They all sit in ``europe-north2``, a region no other test module
puts nodes in, so the pools discovered there are this module's alone; it is also the region of the
lowest grid intensity in the regions table, so ``--optimize carbon`` makes the policy choose these
pools even while tests/test_kubernetes_cluster.py's nodes (other regions) are in the same cluster.
Every command gets the kubeconfig through ``KUBECONFIG`` (or ``--kubeconfig``/``--context``).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from examlops_policy.executors.kubernetes_api import KubernetesCluster
from examlops_policy.opa import stop_server
from tests.conftest import free_port, run_exa
from tests.kubernetes_support import KUBECONFIG, admin, cluster, delete_nodes, fake_node, wait_ready  # noqa: F401 - fixtures

pytestmark = pytest.mark.kubernetes

RUN = secrets.token_hex(3)  # names of this run's nodes and workloads
REGION = "europe-north2"
IMAGE = "busybox"  # never pulled: kwok runs no containers
CONTEXT = "exa-local"  # the context scripts/k8s-up writes
ENV = {"KUBECONFIG": str(KUBECONFIG)}
H100 = f"k8s-{REGION}-h100"
MIG = f"k8s-{REGION}-a100-mig-1g.10gb"
MI300X = f"k8s-{REGION}-mi300x"
H100_PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
NODES = {  # key: (allocatable devices, product labels)
    "h100-a": ({"nvidia.com/gpu": "8"}, H100_PRODUCT),
    "h100-b": ({"nvidia.com/gpu": "8"}, H100_PRODUCT),  # two nodes of 8: a pool of 16, no node holds 16
    "a100-mig": ({"nvidia.com/mig-1g.10gb": "7"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
    "mi300x": ({"amd.com/gpu": "4"}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
}


@pytest.fixture(scope="module")
def nodes(cluster: KubernetesCluster, admin: Any) -> Iterator[dict[str, str]]:  # noqa: F811 - fixtures
    """This module's fake GPU nodes, Ready (kwok) before use; deleted afterwards, with any Job of
    this run still there."""
    from lightkube import codecs

    names = {key: f"exa-cli-{RUN}-{key}" for key in NODES}
    try:
        for key, (allocatable, labels) in NODES.items():
            admin.create(codecs.from_dict(fake_node(names[key], REGION, allocatable, labels)))
        wait_ready(cluster, names.values())
        yield names
    finally:
        # Jobs of this run that a failed test left behind (every workload name holds RUN).
        for ref in cluster.jobs():
            if f"-{RUN}-" in ref.name:
                cluster.delete_job(ref.namespace, ref.name, wait_s=60)
        delete_nodes(admin, names.values())


@pytest.fixture()
def jobs(cluster: KubernetesCluster) -> Iterator[list[str]]:  # noqa: F811 - fixture
    """``namespace/name`` of the Jobs a test submitted; deleted (with their pods) when it ends."""
    created: list[str] = []
    yield created
    for job_id in created:
        namespace, _, name = job_id.partition("/")
        cluster.delete_job(namespace, name, wait_s=60)


def exa(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_exa(home, *args, env=ENV if env is None else env)


def ok_json(home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    # Before --command, which takes everything after it.
    at = args.index("--command") if "--command" in args else len(args)
    result = exa(home, *args[:at], "--json", *args[at:], env=env)
    assert result.returncode == 0, f"exa {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def register_pools(home: Path) -> None:
    """``discover kubernetes --apply`` into ``home``, in process: a fixture's setup, not under test
    (test_discover_shows_the_diff_then_applies_cloud_pools_idempotently runs the command)."""
    from examlops_policy.hardware import Hardware

    hw = Hardware(home)
    try:
        found = hw.discover("kubernetes", apply=True, kubeconfig=str(KUBECONFIG))
    finally:
        hw.close()
    assert {H100, MIG, MI300X} <= {c.pool.name for c in found.changes}


@pytest.fixture()
def home(tmp_path: Path, nodes: dict[str, str]) -> Iterator[Path]:
    """A fresh EXA_HOME where the cluster's pools are registered."""
    path = tmp_path / "exa-home"
    register_pools(path)
    yield path
    stop_server(path)


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory, nodes: dict[str, str]) -> Iterator[Path]:
    """One registered EXA_HOME for the tests that record nothing (server dry runs)."""
    path = tmp_path_factory.mktemp("exa-k8s-cli") / "exa-home"
    register_pools(path)
    yield path
    stop_server(path)


def burst(home: Path, name: str, *options: str, pool: str) -> dict[str, Any]:
    """A burst to cloud that the policy places on ``pool``."""
    decision = ok_json(home, "hardware", "burst", f"{name}-{RUN}", "--allow-burst", "--optimize", "carbon", *options)
    assert (decision["outcome"], decision["pool"], decision["target"], decision["region"]) == ("placed", pool, "cloud", REGION), decision
    assert decision["burst"]["verdict"] == "allowed"
    return decision  # type: ignore[no-any-return]


def submit(home: Path, decision: dict[str, Any], jobs: list[str], *extra: str) -> dict[str, Any]:
    sub = ok_json(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, *extra)
    jobs.append(sub["job_id"])
    return sub  # type: ignore[no-any-return]


def poll_status(home: Path, ident: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = ok_json(home, "hardware", "status", ident)
        if done(status) or time.monotonic() > deadline:
            return status  # type: ignore[no-any-return]
        time.sleep(0.25)


def explain(home: Path, ident: str) -> dict[str, Any]:
    return ok_json(home, "hardware", "explain", ident)  # type: ignore[no-any-return]


def audit_entries(home: Path, kind: str, decision_id: str) -> list[dict[str, Any]]:
    with sqlite3.connect(home / "state.db") as db:
        rows = [json.loads(entry) for (entry,) in db.execute("SELECT entry FROM audit_log WHERE kind = ? ORDER BY seq", (kind,))]
    return [e for e in rows if e.get("decision_id") == decision_id]


def audit_verifies(home: Path) -> None:
    assert ok_json(home, "audit", "verify")["ok"] is True


def pools_by_name(home: Path) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in ok_json(home, "hardware", "pools")}


def ours(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in found["pools"] if p["name"] in (H100, MIG, MI300X)}


# -- discover ------------------------------------------------------------------------------------


def test_discover_shows_the_diff_then_applies_cloud_pools_idempotently(nodes: dict[str, str], exa_home: Path, tmp_path: Path) -> None:
    shown = exa(exa_home, "hardware", "discover", "kubernetes")
    assert shown.returncode == 0, shown.stderr
    assert f"+ {H100}: 16 × nvidia h100 (free 16) · region {REGION}\n" in shown.stdout
    assert f"+ {MIG}: 7 × nvidia a100 (free 7) · region {REGION} · fractions\n" in shown.stdout
    assert f"+ {MI300X}: 4 × amd mi300x (free 4) · region {REGION}\n" in shown.stdout
    assert "resource nvidia.com/mig-1g.10gb" in shown.stdout and "product AMD_Instinct_MI300X_OAM" in shown.stdout
    assert shown.stdout.rstrip().endswith("Nothing registered: add --apply to register these pools.")
    assert ok_json(exa_home, "hardware", "pools") == []  # nothing registered

    applied = ok_json(exa_home, "hardware", "discover", "kubernetes", "--apply")
    assert applied["applied"] is True and applied["source"].startswith("kubernetes https://127.0.0.1:")
    rows = ours(applied)
    assert {n: (p["action"], p["target"], p["accelerator"], p["model"], p["count"], p["fixed_profile"], p["free"], p["node_names"])
            for n, p in rows.items()} == {  # fmt: skip
        H100: ("add", "cloud", "nvidia", "h100", 16, None, 16.0, sorted([nodes["h100-a"], nodes["h100-b"]])),
        MIG: ("add", "cloud", "nvidia", "a100", 7, "1g.10gb", 7.0, [nodes["a100-mig"]]),
        MI300X: ("add", "cloud", "amd", "mi300x", 4, None, 4.0, [nodes["mi300x"]]),
    }
    registered = pools_by_name(exa_home)
    assert {n: (registered[n]["target"], registered[n]["region"], registered[n]["count"], registered[n]["free"]) for n in rows} == {
        H100: ("cloud", REGION, 16, 16.0), MIG: ("cloud", REGION, 7, 7.0), MI300X: ("cloud", REGION, 4, 4.0),
    }  # fmt: skip

    # Again, through --kubeconfig and --context (KUBECONFIG names no file: the options win): unchanged.
    elsewhere = {"KUBECONFIG": str(tmp_path / "absent")}
    again = exa(exa_home, "hardware", "discover", "kubernetes", "--kubeconfig", str(KUBECONFIG), "--context", CONTEXT, "--apply", env=elsewhere)
    assert again.returncode == 0, again.stderr
    for name, count, model in ((H100, 16, "nvidia h100"), (MIG, 7, "nvidia a100"), (MI300X, 4, "amd mi300x")):
        assert f"= {name}: {count} × {model} (free {count})" in again.stdout
    assert "✓ applied:" in again.stdout
    again_json = ok_json(exa_home, "hardware", "discover", "kubernetes", "--apply")
    assert {n: (p["action"], p["changed"]) for n, p in ours(again_json).items()} == {n: ("unchanged", []) for n in (H100, MIG, MI300X)}
    # An unknown context is bad input (exit 2), the same kubeconfig otherwise.
    unknown = exa(exa_home, "hardware", "discover", "kubernetes", "--context", "nope")
    assert unknown.returncode == 2 and "Context 'nope' not found" in unknown.stderr
    audit_verifies(exa_home)


def test_discover_text_says_which_fields_an_update_changes(nodes: dict[str, str], exa_home: Path) -> None:
    add = exa(exa_home, "hardware", "add-pool", MI300X, "--target", "cloud", "--accelerator", "amd", "--model", "mi300x",
              "--count", "2", "--region", REGION)  # fmt: skip
    assert add.returncode == 0, add.stderr
    shown = exa(exa_home, "hardware", "discover", "kubernetes")
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if x.startswith(f"~ {MI300X}:")]
    # The registered pool said no nodes; the discovered one lists its node.
    assert line.rstrip().endswith("[count, nodes]"), line


# -- burst, submit, status -----------------------------------------------------------------------


def test_a_burst_placement_is_submitted_as_a_job_recorded_and_completes(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str]  # noqa: F811 - fixture
) -> None:
    decision = burst(home, "train", "--accelerator", "nvidia", "--count", "2", pool=H100)
    sub = submit(home, decision, jobs, "--command", "sh", "-c", "echo trained")
    namespace, _, name = sub["job_id"].partition("/")
    assert (sub["submitted"], sub["scheduler"], sub["namespace"], namespace) == (True, "kubernetes", "default", "default")
    assert name.startswith("train-") and sub["job_uid"]
    container = sub["manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2" and container["command"] == ["sh", "-c", "echo trained"]

    # The API server holds that Job, labelled with the decision.
    job = cluster.job_status(namespace, name)
    assert (job.uid, job.decision_id) == (sub["job_uid"], decision["id"])
    # The decision and the audit log record it.
    record = explain(home, decision["id"])
    assert (record["job_id"], record["scheduler"], record["job_state"], record["released_at"]) == (sub["job_id"], "kubernetes", None, None)
    [entry] = audit_entries(home, "submit", decision["id"])
    assert (entry["job_id"], entry["job_uid"], entry["scheduler"], entry["source"]) == (sub["job_id"], sub["job_uid"], "kubernetes", "exa-hardware")

    status = poll_status(home, decision["id"], lambda s: s["state"] in ("complete", "failed"))
    assert (status["state"], status["reason"], status["job_id"], status["scheduler"]) == ("complete", "CompletionsReached", sub["job_id"], "kubernetes")
    text = exa(home, "hardware", "status", decision["id"][:12])
    assert text.returncode == 0 and f"kubernetes job {sub['job_id']} of decision {decision['id'][:12]}: complete" in text.stdout
    # The real scheduler bound it to one of this module's H100 nodes.
    assert set(cluster.job_status(namespace, name).nodes) <= {nodes["h100-a"], nodes["h100-b"]}
    assert cluster.job_status(namespace, name).nodes

    twice = exa(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE)
    assert twice.returncode == 2 and f"already submitted as job {sub['job_id']}" in twice.stderr
    audit_verifies(home)


def test_explain_json_shows_the_submitted_jobs_uid(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str]  # noqa: F811 - fixture
) -> None:
    decision = burst(home, "uid", "--accelerator", "amd", pool=MI300X)
    sub = submit(home, decision, jobs)
    record = explain(home, decision["id"])
    assert (record["job_id"], record["job_uid"]) == (sub["job_id"], sub["job_uid"]) and sub["job_uid"]


def test_a_request_larger_than_any_node_is_refused_by_the_layer(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path  # noqa: F811 - fixture
) -> None:
    # The pool has 16 devices over two nodes of 8: no node can run 16, so the layer never places
    # them (before nodes counted, it placed them and the Job stayed Pending for ever; a pool
    # without node information still does: tests/test_kubernetes_cluster.py).
    result = exa(home, "hardware", "burst", f"huge-{RUN}", "--allow-burst", "--accelerator", "nvidia", "--count", "16", "--json")
    assert result.returncode == 3, result.stdout + result.stderr
    body = json.loads(result.stdout)
    verdict = next(v for v in body["verdicts"] if v["pool"] == H100)
    assert verdict["reasons"][0]["code"] == "no_node_fits", verdict["reasons"]
    assert verdict["reasons"][0]["message"] == "no node of the pool has 16 H100 device(s); the largest has 8"


DRY_RUN = {  # vendor: (burst options, pool, the resource the Job asks for, quantity)
    "nvidia-whole": (("--accelerator", "nvidia", "--count", "2"), H100, "nvidia.com/gpu", "2"),
    "nvidia-mig": (("--accelerator", "nvidia", "--fraction", "0.1"), MIG, "nvidia.com/mig-1g.10gb", "1"),
    "amd": (("--accelerator", "amd"), MI300X, "amd.com/gpu", "1"),
}


@pytest.mark.parametrize("vendor", sorted(DRY_RUN))
def test_submit_dry_run_is_accepted_by_the_server_and_records_nothing(
    cluster: KubernetesCluster, shared_home: Path, vendor: str  # noqa: F811 - fixture
) -> None:
    options, pool, resource, quantity = DRY_RUN[vendor]
    decision = burst(shared_home, f"dry-{vendor}", *options, pool=pool)
    sub = ok_json(shared_home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, "--dry-run")
    namespace, _, name = sub["job_id"].partition("/")
    assert (sub["submitted"], sub["job_uid"], sub["namespace"], namespace) == (False, None, "default", "default")
    limits = sub["manifest"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {resource: quantity}
    if vendor == "nvidia-mig":  # the text, once
        text = exa(shared_home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, "--dry-run")
        assert text.returncode == 0, text.stderr
        assert f"✓ the API server accepts Job {sub['job_id']} for decision {decision['id'][:12]} (dry run: nothing created)" in text.stdout
    # Nothing stored on the server, nothing recorded here.
    assert cluster.job_status(namespace, name).state == "missing"
    record = explain(shared_home, decision["id"])
    assert (record["job_id"], record["scheduler"], record["job_state"]) == (None, None, None)
    assert audit_entries(shared_home, "submit", decision["id"]) == []


# -- release, and Jobs deleted elsewhere ---------------------------------------------------------


def test_release_deletes_the_job_and_frees_the_reservation(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str]  # noqa: F811 - fixture
) -> None:
    decision = burst(home, "released", "--accelerator", "nvidia", "--count", "2", pool=H100)
    sub = submit(home, decision, jobs)
    namespace, _, name = sub["job_id"].partition("/")
    assert cluster.job_status(namespace, name).state != "missing"
    assert pools_by_name(home)[H100]["free"] == 14

    released = exa(home, "hardware", "release", decision["id"])
    assert released.returncode == 0, released.stderr
    assert f"✓ released 2 nvidia devices on {H100} (decision {decision['id'][:12]})" in released.stdout
    assert f"Kubernetes Job {sub['job_id']}: deleted" in released.stdout
    # Foreground deletion: the Job goes once its pods are gone.
    deadline = time.monotonic() + 60
    while (job := cluster.job_status(namespace, name)).state != "missing":
        assert time.monotonic() < deadline and job.deleting, job
        time.sleep(0.2)
    assert cluster.jobs(decision_id=decision["id"]) == ()
    assert pools_by_name(home)[H100]["free"] == 16
    assert explain(home, decision["id"])["released_at"] is not None
    assert len(audit_entries(home, "release", decision["id"])) == 1

    again = ok_json(home, "hardware", "release", decision["id"])
    assert (again["already_released"], again["job_deleted"]) == (True, None)
    assert len(audit_entries(home, "release", decision["id"])) == 1
    audit_verifies(home)


def test_a_job_deleted_outside_this_layer_is_reported_missing_and_marked(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str]  # noqa: F811 - fixture
) -> None:
    decision = burst(home, "vanished", "--accelerator", "amd", pool=MI300X)
    sub = submit(home, decision, jobs)
    namespace, _, name = sub["job_id"].partition("/")
    assert cluster.delete_job(namespace, name, wait_s=60) is True  # someone else, with the API

    status = ok_json(home, "hardware", "status", decision["id"])
    assert (status["state"], status["reason"], status["job_id"]) == ("missing", "NotFound", sub["job_id"])
    assert "deleted outside examlops" in status["message"]
    record = explain(home, decision["id"])
    assert (record["job_state"], record["job_id"], record["released_at"]) == ("missing", sub["job_id"], None)
    [entry] = audit_entries(home, "job", decision["id"])
    assert (entry["state"], entry["job_id"], entry["scheduler"]) == ("missing", sub["job_id"], "kubernetes")
    text = exa(home, "hardware", "status", decision["id"])  # asked again: still missing, marked once
    assert text.returncode == 0 and f"kubernetes job {sub['job_id']} of decision {decision['id'][:12]}: missing" in text.stdout
    assert len(audit_entries(home, "job", decision["id"])) == 1

    released = ok_json(home, "hardware", "release", decision["id"])
    assert (released["already_released"], released["job_deleted"]) == (False, None)  # no Job to delete
    audit_verifies(home)


def test_a_job_submitted_with_kubeconfig_and_context_is_released_through_them(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str], tmp_path: Path  # noqa: F811 - fixture
) -> None:
    nowhere = {"KUBECONFIG": str(tmp_path / "absent"), "HOME": str(tmp_path)}  # no default kubeconfig at all
    decision = burst(home, "ctx", "--accelerator", "amd", pool=MI300X)
    through = ("--kubeconfig", str(KUBECONFIG), "--context", CONTEXT)
    sub = ok_json(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, *through, env=nowhere)
    jobs.append(sub["job_id"])
    namespace, _, name = sub["job_id"].partition("/")
    released = ok_json(home, "hardware", "release", decision["id"], *through, env=nowhere)
    assert (released["already_released"], released["job_deleted"]) == (False, True)
    deadline = time.monotonic() + 60
    while cluster.job_status(namespace, name).state != "missing":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    audit_verifies(home)


def test_release_never_deletes_a_job_of_the_same_name_with_another_uid(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, jobs: list[str]  # noqa: F811 - fixture
) -> None:
    decision = burst(home, "twin", "--accelerator", "amd", pool=MI300X)
    sub = submit(home, decision, jobs)
    namespace, _, name = sub["job_id"].partition("/")
    with sqlite3.connect(home / "state.db") as db:  # as if the Job had been recreated elsewhere under that name
        db.execute("UPDATE decisions SET job_uid = 'not-the-submitted-uid' WHERE id = ?", (decision["id"],))
    refused = exa(home, "hardware", "release", decision["id"])
    assert refused.returncode == 9 and "left alone" in refused.stderr, refused.stderr
    assert cluster.job_status(namespace, name).state != "missing"
    assert explain(home, decision["id"])["released_at"] is None  # nothing released either


def test_an_unreachable_api_server_exits_9_and_records_nothing(
    cluster: KubernetesCluster, nodes: dict[str, str], home: Path, tmp_path: Path  # noqa: F811 - fixture
) -> None:
    port = free_port()
    config = yaml.safe_load(KUBECONFIG.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    closed = tmp_path / "closed-kubeconfig"
    closed.write_text(yaml.safe_dump(config))
    offline = {"KUBECONFIG": str(closed)}

    decision = burst(home, "offline", "--accelerator", "nvidia", pool=H100)
    failed = exa(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, env=offline)
    assert failed.returncode == 9, (failed.stdout, failed.stderr)
    assert failed.stderr.startswith(f"KubernetesError: create Job default/offline-{RUN}-{decision['id'][:8]}: cannot reach the API server at https://127.0.0.1:{port}")
    as_json = exa(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, "--json", env=offline)
    error = json.loads(as_json.stderr)
    assert (as_json.returncode, error["error"], error["code"]) == (9, "KubernetesError", 9) and "cannot reach the API server" in error["message"]
    discovered = exa(home, "hardware", "discover", "kubernetes", env=offline)
    assert discovered.returncode == 9 and "list nodes: cannot reach the API server" in discovered.stderr

    # Nothing recorded as submitted: the placement is still live and unsubmitted.
    record = explain(home, decision["id"])
    assert (record["job_id"], record["scheduler"], record["released_at"]) == (None, None, None)
    assert audit_entries(home, "submit", decision["id"]) == []
    assert cluster.jobs(decision_id=decision["id"]) == ()
    # ... so it can still be submitted once the server answers (the server's dry run here).
    assert ok_json(home, "hardware", "submit", decision["id"], "--kubernetes", "--image", IMAGE, "--dry-run")["submitted"] is False
    audit_verifies(home)


def test_ask_kubernetes_takes_the_start_from_the_cluster_and_fails_closed_when_it_does_not_answer(
    cluster: KubernetesCluster, shared_home: Path, tmp_path: Path  # noqa: F811 - fixture
) -> None:
    """``--ask-kubernetes``: the start of a burst to a discovered pool comes from the cluster (now:
    the grant fits), not from the provisioning table; a cluster that does not answer gives no
    estimate, so a waiting limit refuses the pool (fail closed); a bad kubeconfig is bad input."""
    args = ("hardware", "burst", f"soon-{RUN}", "--allow-burst", "--optimize", "carbon", "--accelerator", "nvidia", "--count", "2", "--dry-run")
    table = ok_json(shared_home, *args)
    assert (table["pool"], table["estimate_source"]) == (H100, "table")
    asked = ok_json(shared_home, *args, "--ask-kubernetes", "--context", CONTEXT)
    assert (asked["pool"], asked["estimate_source"], asked["estimate_reason"]) == (H100, "kubernetes", None)
    started = time.mktime(time.strptime(asked["estimated_start"], "%Y-%m-%dT%H:%M:%SZ"))
    decided = time.mktime(time.strptime(asked["decided_at"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(started - decided) <= 1, asked  # now
    shown = exa(shared_home, *args, "--ask-kubernetes", "--explain")
    assert shown.returncode == 0 and "Start: kubernetes: starts now" in shown.stdout, shown.stdout

    port = free_port()
    config = yaml.safe_load(KUBECONFIG.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    closed = tmp_path / "closed-kubeconfig"
    closed.write_text(yaml.safe_dump(config))
    unanswered = ok_json(shared_home, *args, "--ask-kubernetes", "--kubeconfig", str(closed))
    assert (unanswered["pool"], unanswered["estimated_start"], unanswered["estimate_source"]) == (H100, None, "kubernetes")
    assert f"https://127.0.0.1:{port}" in unanswered["estimate_reason"], unanswered["estimate_reason"]
    limited = exa(shared_home, *args, "--ask-kubernetes", "--kubeconfig", str(closed), "--max-wait", "1h", "--json")
    verdict = next(v for v in json.loads(limited.stdout)["verdicts"] if v["pool"] == H100)
    assert "estimate_unknown" in [r["code"] for r in verdict["reasons"]], verdict

    missing = exa(shared_home, *args, "--ask-kubernetes", "--kubeconfig", str(tmp_path / "none"))
    assert missing.returncode == 2 and str(tmp_path / "none") in missing.stderr, (missing.stdout, missing.stderr)
    stray = exa(shared_home, *args, "--context", CONTEXT)
    assert stray.returncode == 2 and "add --ask-kubernetes" in stray.stderr, (stray.stdout, stray.stderr)
