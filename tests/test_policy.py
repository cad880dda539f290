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

import json

import pytest

from examlops_policy import PolicyError, PolicyUnavailable, Pool, Workload
from examlops_policy._core.engine import Engine
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Capacity, PoolState
from examlops_policy.opa import connect, ensure_server, stop_server
from examlops_policy.opa.transport import OpaTransport
from examlops_policy._policy import OpaPolicy
from examlops_policy.tables import load_tables, policy_dir, revision
from tests.conftest import OPA_BIN
from tests.opa_support import suspend
from tests.conftest import free_port as _free_port

pytestmark = pytest.mark.opa  # the policy adapter against real OPA servers, some started here

WORKLOAD = Workload("w", accelerator="amd", engine="vllm")
STATES = [PoolState(Pool("hpc-mi300", "hpc", "amd", 4, "eu"), 4.0, Capacity(4))]


def start_opa(folder: Path, revision: str | None = "sha256:test") -> tuple[subprocess.Popen[bytes], str]:
    """A real OPA serving ``folder`` (as a bundle with ``revision``, or as plain files) on a socket."""
    args: list[str] = [str(folder)]
    if revision is not None:
        (folder / ".manifest").write_text(json.dumps({"roots": ["examlops"], "revision": revision}))
        args = ["--bundle", str(folder)]
    sock = folder.parent / f"{folder.name}.sock"
    proc = subprocess.Popen(
        [str(OPA_BIN), "run", "--server", "--disable-telemetry", "--addr", f"unix://{sock}", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"unix://{sock}"
    for _ in range(200):
        transport = OpaTransport.from_url(url, timeout=0.5)
        try:
            if transport.request("GET", "/health")[0] == 200:
                return proc, url
        except (PolicyError, PolicyUnavailable):
            time.sleep(0.05)
        finally:
            transport.close()
    proc.kill()
    raise AssertionError("test OPA did not start")


@pytest.fixture()
def opa_with(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def run(rego: str | None, revision: str | None = "sha256:test") -> str:
        folder = tmp_path / f"policy{len(procs)}"
        folder.mkdir()
        if rego is not None:
            (folder / "p.rego").write_text(rego)
        proc, url = start_opa(folder, revision)
        procs.append(proc)
        return url

    yield run
    for proc in procs:
        proc.kill()
        proc.wait()


def evaluate(url: str, timeout: float = 5.0, reviewed: str | None = None) -> object:
    engine = Engine(OpaPolicy(OpaTransport.from_url(url, timeout=timeout)), load_tables(), reviewed=reviewed)
    return engine.decide(WORKLOAD, STATES)


# A placement package that confirms a revision and describes itself, so that the verdicts it gives
# are what a test is about.
FAKE_ABOUT = """package examlops.hardware.placement

confirm := {"revision": "sha256:test", "opa_version": "1.22.3"}

about := {"revision": "sha256:test", "opa_version": "1.22.3", "checks": [], "other_codes": [],
    "signature": {"shape": ["accelerator"], "workload": ["accelerator"]}, "pool_stage": ["budget", "capacity"],
    "texts": {"no_pools": "-", "no_eligible_pool": "-", "no_capacity": "-", "reason_on_one": "-", "reason_on_many": "-", "separator": "-"}}
"""


def test_unreachable_opa_is_policy_unavailable(tmp_path: Path) -> None:
    with pytest.raises(PolicyUnavailable, match="not reachable; nothing was placed"):
        evaluate(f"unix://{tmp_path / 'nobody.sock'}")
    with pytest.raises(PolicyUnavailable, match="not reachable; nothing was placed"):
        evaluate(f"http://127.0.0.1:{_free_port()}")


def test_opa_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        with pytest.raises(PolicyUnavailable, match="timed out"):
            evaluate(f"http://127.0.0.1:{port}", timeout=0.5)


def test_opa_without_the_placement_policy_is_refused(opa_with) -> None:  # type: ignore[no-untyped-def]
    url = opa_with(None)
    with pytest.raises(PolicyError, match="returned no confirm \\(undefined\\)"):
        evaluate(url)


def test_opa_serving_policies_without_a_bundle_revision_is_refused(tmp_path: Path) -> None:
    """An edited copy of the policies served as plain files: nobody can say what was evaluated."""
    folder = tmp_path / "edited"
    shutil.copytree(policy_dir(), folder, ignore=shutil.ignore_patterns("*_test.rego"))
    regions = folder / "examlops" / "tables" / "regions.yaml"
    regions.write_text(regions.read_text().replace("us: {area: US", "us: {area: EU"))
    proc, url = start_opa(folder, None)
    try:
        with pytest.raises(PolicyError, match="does not report a policy bundle revision \\(expected sha256:"):
            evaluate(url, reviewed=revision(policy_dir()))
    finally:
        proc.kill()
        proc.wait()


def test_malformed_verdicts_are_refused(opa_with) -> None:  # type: ignore[no-untyped-def]
    url = opa_with(FAKE_ABOUT + 'verdicts := {"judged": true, "shapes": 7}\n')
    with pytest.raises(PolicyError, match="malformed answer at verdicts"):
        evaluate(url)


def test_a_policy_with_another_pool_stage_places_nothing(opa_with) -> None:  # type: ignore[no-untyped-def]
    """The pool stage is closed: selection makes the budget, capacity, quota and wait comparisons
    itself, so a policy that declares a pool-stage check beyond them is refused, whatever its
    verdicts say."""
    url = opa_with(FAKE_ABOUT.replace('"pool_stage": ["budget", "capacity"]', '"pool_stage": ["budget", "capacity", "reservation"]'))
    with pytest.raises(PolicyError, match="check\\(s\\) reservation at a stage this engine cannot run"):
        evaluate(url)


def test_verdicts_missing_a_shape_are_refused(opa_with) -> None:  # type: ignore[no-untyped-def]
    url = opa_with(
        FAKE_ABOUT
        + 'verdicts := {"confirm": confirm, "judged": true, "rejection": null, "burst_mode": null, "missing": [], "reasons": [],'
        ' "grants": [], "notes": [], "shapes": {}, "preferences": [], "request_rejected": null, "budget_fallback": null,'
        ' "wait": {"start_within_s": null, "start_by_s": null, "invalid": null, "reasons": {}}}\n'
    )
    with pytest.raises(PolicyError, match="malformed answer at verdicts.shapes.*expected an object, got null"):
        evaluate(url)


def test_a_revision_other_than_the_reviewed_one_is_refused(tmp_path: Path) -> None:
    connection = connect(tmp_path, policy_root=policy_dir())
    try:
        engine = Engine(OpaPolicy(connection.transport), load_tables(), reviewed="sha256:what-was-reviewed")
        with pytest.raises(PolicyError, match="serves policy revision sha256:[0-9a-f]+.*but the reviewed policy is sha256:what-was-reviewed"):
            engine.decide(WORKLOAD, STATES)
    finally:
        stop_server(tmp_path)


def test_policy_that_does_not_compile_stops_the_launcher(tmp_path: Path) -> None:
    broken = tmp_path / "policies"
    shutil.copytree(policy_dir(), broken)
    (broken / "examlops" / "hardware" / "broken.rego").write_text("package examlops.hardware.placement\n\ndecision_by_shape := {\n")
    with pytest.raises(PolicyError, match="does the policy compile"):
        ensure_server(tmp_path / "home", broken)


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


def _opa_pid(home: Path) -> int:
    return int(json.loads((home / "opa" / "server.json").read_text())["opa"]["pid"])


def test_a_killed_opa_is_found_dead_before_a_decision_and_started_anew(tmp_path: Path) -> None:
    hw = Hardware(tmp_path, policy=ManagedPolicy(tmp_path))
    try:
        hw.add_pool(Pool("hpc-mi300", "hpc", "amd", 4, "eu"))
        assert hw.place(WORKLOAD).decision.ok
        pid = _opa_pid(tmp_path)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        record = hw.place(WORKLOAD)
        assert record.decision.ok and record.decision.provenance.verdicts in ("fresh", "reused")
        assert _opa_pid(tmp_path) != pid
        assert [s.free for s in hw.pools()] == [2.0]
    finally:
        hw.close()
        stop_server(tmp_path)


def test_a_hung_opa_fails_closed_and_never_blocks_other_writers(tmp_path: Path) -> None:
    """A stopped (SIGSTOP) OPA: the placement that asks it times out with nothing reserved, and a
    release by another process meanwhile is not held up: no write waits on OPA under the lock."""
    hw = Hardware(tmp_path, policy=ManagedPolicy(tmp_path, timeout=1.0))
    other = Hardware(tmp_path, policy=ManagedPolicy(tmp_path))
    try:
        hw.add_pool(Pool("hpc-mi300", "hpc", "amd", 4, "eu"))
        first = hw.place(WORKLOAD)
        assert first.decision.ok
        pid = _opa_pid(tmp_path)
        suspend(pid)
        try:
            began = time.monotonic()
            with pytest.raises(PolicyUnavailable, match="timed out"):
                hw.place(WORKLOAD)
            assert time.monotonic() - began < 4
            began = time.monotonic()
            assert not other.release(first.id).already  # a writer while OPA hangs
            assert time.monotonic() - began < 1.0
            assert [s.free for s in hw.pools()] == [4.0]  # the timed-out placement reserved nothing
        finally:
            os.kill(pid, signal.SIGCONT)
        assert hw.place(WORKLOAD).decision.ok
    finally:
        hw.close()
        other.close()
        stop_server(tmp_path)


def test_missing_opa_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_OPA_BIN", str(tmp_path / "no-opa"))
    with pytest.raises(PolicyUnavailable, match="is not an executable file"):
        ensure_server(tmp_path)
