"""``exa hardware serve`` as a real process: it admits waiting work every interval, stops cleanly on
SIGTERM and SIGINT (the step under way finishes, exit 0, no partial write), and survives what a
long-lived process meets: its OPA killed and unable to start for a while, an unreachable scheduler,
a PostgreSQL restart (logged, backed off, no crash, and it admits afterwards). Several serve
processes on one PostgreSQL never admit a workload twice. It decides under one policy snapshot and
notices when the reviewed files change: the next admission is made, and recorded, under the new
revision."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from examlops_policy.opa import stop_server
from examlops_policy.tables import policy_dir, revision
from reliability.backends import fresh_backend, managed_postgres, restart_postgres
from tests.conftest import EXA, OPA_BIN, run_exa, shared_opa_env


def serve(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = {**os.environ, "EXA_HOME": str(home), "COLUMNS": "200", **(env or {})}
    return subprocess.Popen([str(EXA), "hardware", "serve", *args], env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=home.parent)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def until(check: object, timeout_s: float = 60.0, every_s: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(every_s)
    return False


def setup_full(home: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    """A pool of two devices held by one placement leased for 8 s (long enough that the queued one still finds it held on a loaded machine), and a workload queued behind it."""
    run_exa(home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
            "--cost-per-hour", "0.5", check=True, env=env)  # fmt: skip
    first = json.loads(run_exa(home, "hardware", "place", "a", "--accelerator", "amd", "--count", "2", "--lease", "8s", "--json", check=True, env=env).stdout)
    queued = json.loads(run_exa(home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--json", check=True, env=env).stdout)
    assert queued["outcome"] == "queued"
    return first["id"], queued["id"]


def state_of(home: Path, ident: str, env: dict[str, str] | None = None) -> str:
    listing = json.loads(run_exa(home, "hardware", "queue", "--all", "--json", check=True, env=env).stdout)
    return next(e["state"] for e in listing["entries"] if e["id"] == ident)


def test_serve_admits_when_the_lease_ends_and_stops_cleanly_on_sigterm(exa_home: Path) -> None:
    _, queued = setup_full(exa_home)
    proc = serve(exa_home, "--interval", "1s")
    try:
        assert until(lambda: state_of(exa_home, queued) == "admitted", 60)
        assert list((exa_home / "serve").glob("*.json")), "serve records itself while it serves"
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert "lease ended: released decision" in out and "admitted b" in out and out.rstrip().endswith("stopped")
    assert not list((exa_home / "serve").glob("*.json"))
    assert run_exa(exa_home, "audit", "verify").returncode == 0


@pytest.mark.parametrize("interval", ["0s", "0m"])
def test_serve_refuses_an_interval_under_a_second_instead_of_spinning(exa_home: Path, interval: str) -> None:
    """``--interval 0s`` was accepted and stepped without pause (a core busy): below the documented
    minimum of 1 s, serve exits 2 at once, saying the minimum, and serves nothing."""
    proc = serve(exa_home, "--interval", interval)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, out
    assert "--interval: must be at least 1s (got" in out, out
    assert "serving" not in out


def test_the_serving_loop_refuses_a_short_interval_in_the_library_too(tmp_path: Path) -> None:
    from examlops_policy._serve import MIN_INTERVAL_S, Server
    from examlops_policy.errors import SpecError

    with pytest.raises(SpecError, match="at least 1 s") as info:
        Server(lambda: None, interval_s=0.0, slurm=None, kubernetes=None)  # type: ignore[arg-type,return-value]
    assert info.value.field == "interval"
    assert Server(lambda: None, interval_s=MIN_INTERVAL_S, slurm=None, kubernetes=None).interval_s == 1.0  # type: ignore[arg-type,return-value]


def test_serve_wakes_when_a_lease_ends_while_work_waits_not_at_the_next_interval(exa_home: Path) -> None:
    # The first step finds the pool still held (its lease ends 8 s after it was placed); the next
    # interval is a minute away, but capacity frees when the lease ends, and serve steps then.
    _, queued = setup_full(exa_home)
    started = time.monotonic()
    proc = serve(exa_home, "--interval", "60s")
    try:
        assert until(lambda: state_of(exa_home, queued) == "admitted", 30), "not admitted within 30 s of a lease of 8 s"
        took = time.monotonic() - started
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert took < 30 and "lease ended: released decision" in out and "admitted b" in out, out


def test_sigint_during_a_step_finishes_it_and_exits_0(exa_home: Path, tmp_path: Path) -> None:
    """A slow squeue keeps the step busy; SIGINT (twice) arrives during it: the step finishes, the
    process exits 0, nothing half written."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("squeue", "sinfo"):
        (bin_dir / tool).write_text("#!/bin/sh\nsleep 2\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    _, queued = setup_full(exa_home)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = serve(exa_home, "--interval", "1s", "--slurm", env=env)
    try:
        time.sleep(3.0)  # within a step's two slow reads
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    finally:
        code, out = stop(proc, signal.SIGINT)
    assert code == 0, out
    assert "SIGINT: finishing the current step, then stopping" in out and out.rstrip().endswith("stopped")
    assert run_exa(exa_home, "audit", "verify").returncode == 0
    assert state_of(exa_home, queued) in ("queued", "admitted")


def test_an_unreachable_scheduler_is_logged_and_skipped_and_admission_goes_on(exa_home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    _, queued = setup_full(exa_home)
    proc = serve(exa_home, "--interval", "1s", "--slurm", env={"PATH": str(empty)})
    try:
        assert until(lambda: state_of(exa_home, queued) == "admitted", 60)
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert "fault: slurm could not be read (skipped): squeue: command not found" in out


@pytest.mark.opa
def test_serve_survives_its_opa_killed_and_unable_to_start_for_a_while(tmp_path: Path) -> None:
    """The serving process's own OPA (this home's) is killed and cannot start again for a while:
    the steps log the fault and back off (no crash); once OPA can start, the queue is admitted."""
    home = tmp_path / "home"
    flag = tmp_path / "opa-broken"
    wrapper = tmp_path / "opa"
    wrapper.write_text(f"#!/bin/sh\nif [ -e '{flag}' ]; then echo 'opa: cannot start (test)' >&2; exit 1; fi\nexec '{OPA_BIN}' \"$@\"\n")
    wrapper.chmod(0o755)
    env = {"EXA_OPA_BIN": str(wrapper)}
    try:
        run_exa(home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
                "--cost-per-hour", "0.5", check=True, env=env, shared_opa=False)  # fmt: skip
        first = json.loads(run_exa(home, "hardware", "place", "a", "--accelerator", "amd", "--count", "2", "--json", check=True, env=env,
                                   shared_opa=False).stdout)  # fmt: skip
        queued = json.loads(run_exa(home, "hardware", "place", "b", "--accelerator", "amd", "--queue", "--json", check=True, env=env,
                                    shared_opa=False).stdout)["id"]  # fmt: skip
        proc = serve(home, "--interval", "1s", env=env)
        try:
            # Serving (its policy read at start, where an OPA that cannot start is exit 5): its first
            # line says so. On a loaded machine that takes longer than any fixed pause.
            assert proc.stdout is not None
            serving = proc.stdout.readline()
            assert "serving: policy" in serving, serving
            time.sleep(1.5)
            flag.touch()
            stop_server(home)  # OPA gone, and it cannot start again
            time.sleep(4.0)
            assert proc.poll() is None, "serve must not crash when OPA is unavailable"
            # Capacity frees while OPA is down: nothing may be decided until it serves again.
            run_exa(home, "hardware", "release", first["id"], check=True, env=env, shared_opa=False)
            flag.unlink()
            assert until(lambda: '"admitted"' in run_exa(home, "hardware", "queue", "--all", "--json", env=env, shared_opa=False).stdout, 90)
        finally:
            code, out = stop(proc)
        out = serving + out
        assert code == 0, out
        assert "fault: policy: Policy" in out and "backing off" in out and f"admitted b (queued {queued[:12]})" in out
    finally:
        stop_server(home)


@pytest.mark.postgres
def test_serve_survives_a_postgresql_restart(tmp_path: Path) -> None:
    if not managed_postgres():
        pytest.skip("the PostgreSQL under test is not the one scripts/pg-up started: not ours to restart")
    with fresh_backend("postgres", tmp_path) as backend:
        home = tmp_path / "home"
        env = {**backend.env(), **shared_opa_env()}
        _, queued = setup_full(home, env)
        proc = serve(home, "--interval", "1s", env=env)
        try:
            time.sleep(1.5)
            restart_postgres()
            assert until(lambda: state_of(home, queued, env) == "admitted", 90)
            assert proc.poll() is None
        finally:
            code, out = stop(proc)
        assert code == 0, out
        assert run_exa(home, "audit", "verify", env=env).returncode == 0


@pytest.mark.postgres
def test_several_serve_processes_on_one_postgresql_never_admit_a_workload_twice(tmp_path: Path) -> None:
    with fresh_backend("postgres", tmp_path) as backend:
        home = tmp_path / "home"
        env = {**backend.env(), **shared_opa_env()}
        run_exa(home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu",
                "--cost-per-hour", "0.5", check=True, env=env)  # fmt: skip
        holders = [json.loads(run_exa(home, "hardware", "place", f"h{i}", "--accelerator", "amd", "--json", check=True, env=env).stdout)["id"]
                   for i in range(4)]  # fmt: skip
        queued = [json.loads(run_exa(home, "hardware", "place", f"q{i}", "--accelerator", "amd", "--queue", "--json", check=True, env=env).stdout)["id"]
                  for i in range(6)]  # fmt: skip
        procs = [serve(home, "--interval", "1s", env=env) for _ in range(3)]
        try:
            for ident in holders:
                run_exa(home, "hardware", "release", ident, check=True, env=env)
            assert until(lambda: sum(state_of(home, q, env) == "admitted" for q in queued) == 4, 90)
        finally:
            outs = [stop(p) for p in procs]
        assert all(code == 0 for code, _ in outs)
        with backend.raw() as db:
            twice = db.execute("SELECT queued_id FROM decisions WHERE queued_id IS NOT NULL GROUP BY queued_id HAVING count(*) > 1").fetchall()
            live = db.execute("SELECT SUM(devices) FROM allocations WHERE released_at IS NULL").fetchone()[0]
        assert twice == [] and live == 4
        assert run_exa(home, "audit", "verify", env=env).returncode == 0


@pytest.mark.opa  # its own OPA, on a copy of the policy
def test_serve_follows_the_reviewed_files_and_decides_under_the_revision_it_records(tmp_path: Path) -> None:
    """The reviewed files change while serve runs (a quota grows): the next step reads the new
    revision, its own OPA serves it before anything is decided, and the workload that waited for
    the quota is admitted under the new revision (its placement records it)."""
    policies = tmp_path / "policies"
    shutil.copytree(policy_dir(), policies, ignore=shutil.ignore_patterns("*_test.rego"))
    quotas = policies / "examlops" / "tables" / "quotas.yaml"
    home = tmp_path / "home"
    env = {"EXA_POLICY_DIR": str(policies)}
    try:
        run_exa(home, "hardware", "add-pool", "gpus", "--target", "hpc", "--accelerator", "nvidia", "--count", "32", "--region", "eu",
                "--cost-per-hour", "0.1", "--carbon-factor", "1", check=True, env=env, shared_opa=False)  # fmt: skip
        run_exa(home, "hardware", "place", "a", "--accelerator", "nvidia", "--count", "16", "--project", "inference-eu", check=True, env=env,
                shared_opa=False)  # fmt: skip
        waiting = json.loads(run_exa(home, "hardware", "place", "b", "--accelerator", "nvidia", "--count", "4", "--project", "inference-eu",
                                     "--queue", "--json", check=True, env=env, shared_opa=False).stdout)  # fmt: skip
        assert waiting["outcome"] == "queued" and waiting["queue"]["waits_for"] == {"quota_exceeded": 1}
        before = revision(policies).split("@")[0]
        proc = serve(home, "--interval", "1s", env=env)
        try:
            time.sleep(2.5)
            quotas.write_text(quotas.read_text(encoding="utf-8").replace("nvidia: {devices: 16}", "nvidia: {devices: 24}"), encoding="utf-8")
            after = revision(policies).split("@")[0]
            assert after != before
            assert until(lambda: '"admitted"' in run_exa(home, "hardware", "queue", "--all", "--json", env=env, shared_opa=False).stdout, 90)
        finally:
            code, out = stop(proc)
        assert code == 0, out
        changed = out.index(f"policy changed: {before[:19]} -> {after[:19]}")
        assert changed < out.index("admitted b (queued"), "the change is noticed before the admission it allows"
        listing = json.loads(run_exa(home, "hardware", "queue", "--all", "--json", check=True, env=env, shared_opa=False).stdout)
        placed = json.loads(run_exa(home, "hardware", "explain", listing["entries"][0]["admitted_by"], "--json", check=True, env=env,
                                    shared_opa=False).stdout)  # fmt: skip
        assert placed["provenance"]["policy_revision"].split("@")[0] == after
    finally:
        stop_server(home)


def test_records_of_killed_serve_processes_are_removed_at_the_next_start_and_only_theirs(exa_home: Path) -> None:
    """A serve SIGKILLed leaves ``serve/<pid>.json``; the next start removes it, and a record whose
    pid a later process reuses, but keeps the record of a live process and one that cannot be told
    apart from the live process with its pid. Nothing is signalled."""
    setup_full(exa_home)
    killed = serve(exa_home, "--interval", "30s")
    record = exa_home / "serve" / f"{killed.pid}.json"
    try:
        assert until(record.exists, 60), "serve records itself"
    finally:
        killed.kill()
        killed.communicate(timeout=60)
    assert record.exists()
    live = subprocess.Popen(["sleep", "300"])
    try:
        folder = exa_home / "serve"
        me = json.loads(record.read_text())["identity"]
        identity = {**me, "pid": live.pid, "argv": ["sleep", "300"]}
        ticks = int(Path(f"/proc/{live.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        (folder / f"{live.pid}.json").write_text(json.dumps({"pid": live.pid, "identity": {**identity, "start_ticks": ticks}}))
        reused = folder / f"{os.getpid()}.json"  # this test's pid: alive, but not the recorded start
        reused.write_text(json.dumps({"pid": os.getpid(), "identity": {**identity, "pid": os.getpid(), "start_ticks": 1}}))
        unknown = folder / f"{os.getppid()}.json"  # a live pid whose record says nothing of its start
        unknown.write_text(json.dumps({"pid": os.getppid(), "identity": None}))
        once = serve(exa_home, "--once")
        out, _ = once.communicate(timeout=120)
        assert once.returncode == 0, out
        assert f"removed the record of serve process {killed.pid}" in out and f"serve process {os.getpid()}" in out
        assert sorted(p.name for p in folder.glob("*.json")) == sorted([f"{live.pid}.json", unknown.name])
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()


def test_serve_stop_stops_the_recorded_serve_processes_and_signals_nothing_it_cannot_prove(exa_home: Path) -> None:
    """``exa hardware serve --stop`` sends SIGTERM to each serve process its record proves (pid and
    start time), which finishes its step and exits 0, removing its record; a record naming a live
    process that started at another time (a reused pid) is never signalled. With other options, or
    nothing running, it says so and changes nothing."""
    setup_full(exa_home)
    assert run_exa(exa_home, "hardware", "serve", "--stop").stdout.strip() == "no serve process runs on this state folder"
    procs = [serve(exa_home, "--interval", "30s") for _ in range(2)]
    impostor = subprocess.Popen(["sleep", "300"])
    try:
        assert until(lambda: len(list((exa_home / "serve").glob("*.json"))) == 2, 60), "both record themselves"
        record = json.loads((exa_home / "serve" / f"{procs[0].pid}.json").read_text())
        forged = {**record["identity"], "pid": impostor.pid, "start_ticks": 1}  # a pid now someone else's
        (exa_home / "serve" / f"{impostor.pid}.json").write_text(json.dumps({"pid": impostor.pid, "identity": forged}))
        refused = run_exa(exa_home, "hardware", "serve", "--stop", "--once")
        assert refused.returncode == 2 and "--once" in refused.stderr and all(p.poll() is None for p in procs)
        stopped = run_exa(exa_home, "hardware", "serve", "--stop", "--json")
        assert stopped.returncode == 0, stopped.stderr
        doc = json.loads(stopped.stdout)
        assert doc["stopped"] is True and sorted(doc["processes"]) == sorted(p.pid for p in procs), doc
        for proc in procs:
            code, out = stop(proc)
            assert code == 0 and out.rstrip().endswith("stopped"), out
        assert impostor.poll() is None, "a record that does not prove its process is never signalled"
        assert not list((exa_home / "serve").glob("*.json")), "the stale record is removed, its pid's process left alone"
    finally:
        for proc in procs:
            stop(proc, signal.SIGKILL)
        impostor.kill()
        impostor.wait()
