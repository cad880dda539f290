"""Fail closed: no policy verdict, no placement. Every failure mode against a real OPA process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from examlops_policy import PolicyError, PolicyUnavailable, Pool, Workload
from examlops_policy.hardware import Hardware, ManagedOpaEvaluator
from examlops_policy.model import PoolState
from examlops_policy.opa import connect, ensure_server, stop_server
from examlops_policy.placement import decide
from examlops_policy.policy import OpaEvaluator
from examlops_policy.tables import load_tables, policy_dir, revision
from tests.conftest import OPA_BIN
from tests.conftest import free_port as _free_port

WORKLOAD = Workload("w", accelerator="amd", engine="vllm")
STATES = [PoolState(Pool("hpc-mi300", "hpc", "amd", 4, "eu"), 4.0)]


def start_opa(*paths: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(OPA_BIN), "run", "--server", "--disable-telemetry", "--addr", f"127.0.0.1:{port}", *map(str, paths)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if requests.get(f"{url}/health", timeout=0.2).status_code == 200:
                return proc, url
        except requests.RequestException:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("test OPA did not start")


@pytest.fixture()
def opa_with(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def run(rego: str | None) -> str:
        folder = tmp_path / f"policy{len(procs)}"
        folder.mkdir()
        if rego is not None:
            (folder / "p.rego").write_text(rego)
        proc, url = start_opa(folder)
        procs.append(proc)
        return url

    yield run
    for proc in procs:
        proc.kill()
        proc.wait()


def evaluate(url: str, timeout: float = 5.0) -> object:
    return decide(WORKLOAD, STATES, OpaEvaluator(url, revision="sha256:x", timeout=timeout), load_tables())


def test_unreachable_opa_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable, match="not reachable; nothing was placed"):
        evaluate(f"http://127.0.0.1:{_free_port()}")


def test_opa_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        with pytest.raises(PolicyUnavailable, match="timed out"):
            evaluate(f"http://127.0.0.1:{port}", timeout=0.5)


def test_opa_without_the_placement_policy_is_an_undefined_decision(opa_with) -> None:  # type: ignore[no-untyped-def]
    url = opa_with(None)
    with pytest.raises(PolicyError, match="no decision \\(undefined\\)"):
        evaluate(url)


def test_malformed_decision_is_refused(opa_with) -> None:  # type: ignore[no-untyped-def]
    url = opa_with('package examlops.hardware.placement\n\ndecision_by_shape := {"eligible": ["hpc-mi300"]}\n')
    with pytest.raises(PolicyError, match="malformed decision"):
        evaluate(url)


def test_decision_missing_a_pool_verdict_is_refused(opa_with, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = opa_with(
        "package examlops.hardware.placement\n\n"
        'decision_by_shape := {"rejection": null, "shapes": {}, "short": [], "eligible": [], "burst": {"attempted": false},'
        ' "workload": {}, "provenance": {}, "selected_tier": null}\n'
    )
    with pytest.raises(PolicyError, match="did not return a verdict for every pool"):
        evaluate(url)


def test_policy_that_does_not_compile_stops_the_launcher(tmp_path: Path) -> None:
    broken = tmp_path / "policies"
    shutil.copytree(policy_dir(), broken)
    (broken / "examlops" / "hardware" / "broken.rego").write_text("package examlops.hardware.placement\n\ndecision_by_shape := {\n")
    with pytest.raises(PolicyError, match="does the policy compile"):
        ensure_server(tmp_path / "home", broken)


def test_stale_policy_revision_is_refused(tmp_path: Path) -> None:
    connection = connect(tmp_path, policy_root=policy_dir())
    try:
        evaluator = OpaEvaluator(connection.transport, revision="sha256:not-what-opa-loaded")
        with pytest.raises(PolicyError, match="restart OPA"):
            decide(WORKLOAD, STATES, evaluator, load_tables())
    finally:
        stop_server(tmp_path)


def test_changed_policy_restarts_the_managed_server(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(policy_dir(), policies)
    first = ensure_server(tmp_path / "home", policies)
    try:
        assert ensure_server(tmp_path / "home", policies) == first  # reused while unchanged
        table = policies / "examlops" / "tables" / "accounting.yaml"
        table.write_text(table.read_text() + "\n# reviewed change\n")
        second = ensure_server(tmp_path / "home", policies)
        assert second.revision == revision(policies) != first.revision
        assert second.pid != first.pid
    finally:
        stop_server(tmp_path / "home")


def test_killed_opa_fails_closed_then_is_started_anew(tmp_path: Path) -> None:
    evaluator = ManagedOpaEvaluator(tmp_path)
    hw = Hardware(tmp_path, evaluator=evaluator)
    try:
        hw.add_pool(Pool("hpc-mi300", "hpc", "amd", 4, "eu"))
        assert hw.place(WORKLOAD).decision.ok
        pid = int(__import__("json").loads((tmp_path / "opa" / "server.json").read_text())["opa"]["pid"])
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(PolicyUnavailable):
            hw.place(WORKLOAD)
        assert [s.free for s in hw.pools()] == [3.0]  # the failed attempt reserved nothing
        assert hw.place(WORKLOAD).decision.ok
        assert [s.free for s in hw.pools()] == [2.0]
    finally:
        hw.close()
        stop_server(tmp_path)


def test_missing_opa_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_OPA_BIN", str(tmp_path / "no-opa"))
    with pytest.raises(PolicyUnavailable, match="is not an executable file"):
        ensure_server(tmp_path)
