"""The local OPA's life: recorded before it serves, never a stranger signalled, stopped when idle,
orphaned or asked, honestly reported, and nothing left running on a full disk."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.opa import ensure_server, stop_server
from examlops_policy.opa.procs import ProcessIdentity
from examlops_policy.opa.server import OPA_GC_ENV, Record, ServerPaths, read_record, write_record
from examlops_policy.opa.transport import Endpoint, OpaTransport
from tests.conftest import EXA, run_exa
from tests.opa_support import opa_pids_for, suspend, wait_until
from tests.disk_support import fill, small_tmpfs

pytestmark = pytest.mark.opa  # these tests start, stop and break their own OPA servers

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (needs root)")


def local_exa(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``exa`` on this home's own OPA (not the session's shared one)."""
    return run_exa(home, *args, env=env, shared_opa=False)


def gone(pid: int) -> bool:
    return ProcessIdentity.of(pid) is None


@pytest.fixture()
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process this project did not start as OPA: a plain ``sleep``."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("forged", ["pid only", "pid and start time"])
def test_a_stale_record_naming_another_process_is_removed_and_never_signalled(
    exa_home: Path, stranger: subprocess.Popen[bytes], forged: str
) -> None:
    server = ensure_server(exa_home)
    paths = ServerPaths(exa_home)
    record, _ = read_record(paths)
    assert record is not None and record.opa is not None
    stop_server(exa_home)
    who = ProcessIdentity.of(stranger.pid)
    assert who is not None
    # The old OPA's command line, now with the sleep's PID (and, worse, its real start time).
    ticks = who.start_ticks if forged == "pid and start time" else record.opa.start_ticks
    opa = ProcessIdentity(stranger.pid, ticks, record.opa.argv)
    supervisor = ProcessIdentity(stranger.pid, ticks, record.supervisor.argv)
    os.makedirs(paths.dir, exist_ok=True)
    write_record(paths, Record("ready", record.revision, server.socket, 900.0, supervisor, opa, record.started_at))

    status = local_exa(exa_home, "opa", "status")
    assert status.returncode == 0 and "OPA is not running" in status.stdout
    assert f"removed a stale record: pid {stranger.pid} is not the OPA it recorded" in status.stdout
    assert "nothing was signalled" in status.stdout
    write_record(paths, Record("ready", record.revision, server.socket, 900.0, supervisor, opa, record.started_at))
    stopped = local_exa(exa_home, "opa", "stop")
    assert stopped.returncode == 0 and "nothing was signalled" in stopped.stdout
    assert not paths.record.exists()
    write_record(paths, Record("ready", record.revision, server.socket, 900.0, supervisor, opa, record.started_at))
    assert local_exa(exa_home, "hardware", "portable", "--engine", "vllm", "--accelerator", "amd").returncode == 0  # starts a real one
    assert stranger.poll() is None  # never signalled, through any of the three paths
    assert opa_pids_for(exa_home) == {ensure_server(exa_home).pid}


def test_status_json_names_pid_revision_idle_time_socket_and_protection(exa_home: Path) -> None:
    server = ensure_server(exa_home)
    doc = json.loads(local_exa(exa_home, "opa", "status", "--json").stdout)
    assert doc["running"] is True and doc["managed"] is True
    assert doc["pid"] == server.pid and doc["supervisor_pid"] == server.supervisor_pid
    assert doc["served_revision"] == server.revision and doc["revision_matches"] is True
    assert doc["reached_at"] == f"unix://{exa_home}/opa/opa.sock" and doc["listeners"] == ["unix://opa.sock"]
    assert doc["protection"] == {
        "token_auth": True, "token_file": str(exa_home / "opa" / "token"),
        "authorization_policy": "system.authz", "bundle_roots": ["examlops", "system/authz", "examlops_runtime"],
        "signed_bundle": True,
    }  # fmt: skip
    assert doc["content_problem"] is None
    assert doc["idle_timeout_s"] == 900.0 and 0 <= doc["idle_s"] < 900


def test_an_idle_server_stops_by_itself_and_a_used_one_does_not(exa_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_OPA_IDLE_TIMEOUT", "3")
    server = ensure_server(exa_home)
    token = (exa_home / "opa" / "token").read_text().strip()
    opa = OpaTransport(Endpoint("unix", path=str(server.socket)), token=token)
    busy_until = time.monotonic() + 9  # three idle timeouts of steady use
    while time.monotonic() < busy_until:
        assert opa.request("POST", "/v1/data/examlops/tables/regions/eu", b'{"input": {}}')[0] == 200
        time.sleep(0.2)
    assert not gone(server.pid), "stopped although it was in use"
    opa.close()
    wait_until(lambda: gone(server.pid) and gone(server.supervisor_pid), 30, "the idle OPA and its supervisor exit")
    assert not (exa_home / "opa" / "server.json").exists()
    assert "no request for 3 s" in (exa_home / "opa" / "supervisor.log").read_text()


def test_deleting_the_home_stops_its_server(exa_home: Path) -> None:
    import shutil

    server = ensure_server(exa_home)
    shutil.rmtree(exa_home)
    wait_until(lambda: gone(server.pid) and gone(server.supervisor_pid), 15, "OPA stops after its home is deleted")
    assert opa_pids_for(exa_home) == set()


def test_a_sigstopped_opa_is_really_stopped_and_the_report_says_how(exa_home: Path) -> None:
    server = ensure_server(exa_home)
    suspend(server.pid)
    result = local_exa(exa_home, "opa", "stop")
    assert result.returncode == 0, result.stderr
    assert f"OPA (pid {server.pid}) did not exit on SIGTERM (it was stopped, state T); killed with SIGKILL" in result.stdout
    assert gone(server.pid) and gone(server.supervisor_pid)
    assert not (exa_home / "opa" / "server.json").exists()
    assert local_exa(exa_home, "opa", "stop").stdout.strip() == "OPA was not running"


def test_a_sigstopped_supervisor_is_stopped_too(exa_home: Path) -> None:
    server = ensure_server(exa_home)
    suspend(server.supervisor_pid)
    result = local_exa(exa_home, "opa", "stop")
    assert result.returncode == 0, result.stderr
    assert f"OPA (pid {server.pid}) stopped on SIGTERM" in result.stdout
    assert f"the OPA supervisor (pid {server.supervisor_pid}) did not exit on SIGTERM (it was stopped, state T); killed" in result.stdout
    assert gone(server.pid) and gone(server.supervisor_pid)


def test_a_caller_killed_while_starting_leaves_only_recorded_servers(exa_home: Path) -> None:
    for delay in (0.05, 0.2, 0.4, 0.8):
        starting = subprocess.Popen([str(EXA), "opa", "restart"], env={**os.environ, "EXA_HOME": str(exa_home)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(delay)
        starting.kill()
        starting.wait()
        server = ensure_server(exa_home)  # waits for a start in progress, then reuses or starts one
        assert opa_pids_for(exa_home) == {server.pid}, f"killed after {delay} s"
    report = stop_server(exa_home)
    assert report.stopped and opa_pids_for(exa_home) == set()


def test_a_changed_policy_restarts_the_server_on_the_new_bundle(exa_home: Path, tmp_path: Path) -> None:
    import shutil

    from examlops_policy.tables import policy_dir, revision

    policies = tmp_path / "policies"
    shutil.copytree(policy_dir(), policies)
    first = ensure_server(exa_home, policies)
    table = policies / "examlops" / "tables" / "accounting.yaml"
    table.write_text(table.read_text() + "\n# reviewed change\n")
    second = ensure_server(exa_home, policies)
    assert second.revision == revision(policies) != first.revision
    assert gone(first.pid) and opa_pids_for(exa_home) == {second.pid}


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A home on a 1 MiB tmpfs that is then filled to the last byte."""
    with small_tmpfs(tmp_path) as mount:
        home = mount / "home"
        home.mkdir(mode=0o700)
        try:
            yield home
        finally:
            stop_server(home)


@needs_root
@pytest.mark.parametrize("when", ["before the first start", "after a start"])
def test_a_full_disk_is_a_clear_error_with_nothing_left_running(full_disk: Path, when: str) -> None:
    if when == "after a start":
        ensure_server(full_disk)
        stop_server(full_disk)
    fill(full_disk)
    for _ in range(3):  # never one more OPA per call
        result = local_exa(full_disk, "opa", "restart")
        assert result.returncode == 5, (result.stdout, result.stderr)
        assert "the disk is full" in result.stderr and "Traceback" not in result.stderr
        assert opa_pids_for(full_disk) == set()
        assert not (full_disk / "opa" / "server.json").exists()
    (full_disk / "filler").unlink()
    assert local_exa(full_disk, "opa", "restart").returncode == 0  # with space again, it starts


def test_a_connection_knows_when_its_local_server_stopped_and_connect_starts_it_anew(exa_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from examlops_policy.opa import connect

    # Long enough that the server is still up when checked right after each connect, on a loaded machine.
    monkeypatch.setenv("EXA_OPA_IDLE_TIMEOUT", "3")
    first = connect(exa_home)
    assert first.server is not None and first.still_serving()
    wait_until(lambda: not first.still_serving(), 30, "the connection sees its idle server stop")
    # An exiting process stops being the recorded one (its command line is gone) a moment before
    # it is gone from the process table: not serving first, then gone.
    wait_until(lambda: gone(first.server.pid), 10, "the idle OPA is gone")
    again = connect(exa_home)
    assert again.server is not None and again.server.pid != first.server.pid and again.still_serving()
    first.transport.close()
    again.transport.close()


def test_a_hung_server_is_replaced_by_the_next_connection(exa_home: Path) -> None:
    from examlops_policy.opa import connect

    hung = ensure_server(exa_home)
    suspend(hung.pid)  # stopped for sure: kill() alone leaves it answering for a moment
    connection = connect(exa_home, timeout=1.0)
    assert connection.server is not None and connection.server.pid != hung.pid
    assert gone(hung.pid) and opa_pids_for(exa_home) == {connection.server.pid}
    connection.transport.close()


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf"])
def test_an_idle_timeout_that_is_not_a_positive_number_is_bad_input(exa_home: Path, value: str) -> None:
    result = local_exa(exa_home, "opa", "restart", env={"EXA_OPA_IDLE_TIMEOUT": value})
    assert result.returncode == 2
    assert f"EXA_OPA_IDLE_TIMEOUT={value!r}: expected a number of seconds greater than 0" in result.stderr
    assert opa_pids_for(exa_home) == set()


def test_what_killed_starts_left_behind_is_removed_by_the_next_start(exa_home: Path) -> None:
    """Scratch folders of a bundle build and temporary files of a private write, as a placer
    killed mid-start leaves them, are gone after the next start; nothing else is touched."""
    ensure_server(exa_home)
    stop_server(exa_home)
    folder = exa_home / "opa"
    scratch = folder / ".bundle-k1ll3d"
    (scratch / "staging" / "examlops").mkdir(parents=True)
    (scratch / "bundle.tar.gz").write_bytes(os.urandom(256 * 1024))
    for name in (".token.a1b2c3.tmp", ".server.json.d4e5f6.tmp", ".runtime.json.g7h8.tmp"):
        (folder / name).write_text("left by a killed start")
    (folder / "runtime.json").write_text("{}")  # where an earlier version kept the token digest
    kept = folder / "notes.txt"
    kept.write_text("not ours to remove")
    ensure_server(exa_home)
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name == "runtime.json")
    assert left == [], left
    assert kept.read_text() == "not ours to remove"


def test_placers_killed_during_starts_leave_no_scratch_after_the_next_start(exa_home: Path) -> None:
    for delay in (0.3, 0.6, 0.9, 1.2):
        starting = subprocess.Popen([str(EXA), "opa", "restart"], env={**os.environ, "EXA_HOME": str(exa_home)},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(delay)
        starting.kill()
        starting.wait()
    server = ensure_server(exa_home)
    assert [p.name for p in (exa_home / "opa").iterdir() if p.name.startswith(".")] == []  # no .bundle-*, no .*.tmp
    assert opa_pids_for(exa_home) == {server.pid}


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_hanging_opa_binary_fails_closed_within_seconds_and_frees_the_lock(exa_home: Path, tmp_path: Path) -> None:
    import fcntl

    from examlops_policy.opa.bundle import OPA_TOOL_TIMEOUT_S

    hang = tmp_path / "hanging-opa"
    hang.write_text("#!/bin/sh\nsleep 3171 &\nwait\n")  # a child of its own holds its output open too
    hang.chmod(0o755)
    assert local_exa(exa_home, "hardware", "add-pool", "one", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu").returncode == 0
    began = time.monotonic()
    result = local_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm", env={"EXA_OPA_BIN": str(hang)})
    took = time.monotonic() - began
    assert result.returncode == 5, (result.stdout, result.stderr)
    assert f"did not finish reading the policy tables within {OPA_TOOL_TIMEOUT_S:g} s" in result.stderr and "Traceback" not in result.stderr
    assert took < OPA_TOOL_TIMEOUT_S + 10, f"the placement waited {took:.0f} s"
    assert _processes_with(str(hang)) == [] and _processes_with("sleep 3171") == []  # stopped, with its child
    with open(exa_home / "opa" / "lock", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the next placer does not wait
    assert json.loads(local_exa(exa_home, "hardware", "decisions", "--json").stdout) == []  # nothing placed
    assert local_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm").returncode == 0  # a working OPA places


def _go_gc_env(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = dict(e.decode().split("=", 1) for e in entries if b"=" in e)
    return {k: v for k, v in pairs.items() if k in ("GOGC", "GOMEMLIMIT")}


def test_the_local_opa_collects_garbage_by_a_memory_limit(exa_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    server = ensure_server(exa_home)
    assert _go_gc_env(server.pid) == OPA_GC_ENV == {"GOGC": "off", "GOMEMLIMIT": "256MiB"}


def test_a_go_gc_setting_in_the_environment_is_kept(exa_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOGC", "200")
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    server = ensure_server(exa_home)
    assert _go_gc_env(server.pid) == {"GOGC": "200"}
