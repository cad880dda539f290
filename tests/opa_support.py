"""Helpers for the OPA tests: OPA servers a test runs itself, process and socket facts from /proc."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from examlops_policy.opa.transport import Endpoint, OpaTransport
from tests.conftest import OPA_BIN


def runtime_data(folder: Path, token: str) -> Path:
    """The non-bundle data an OPA with the bundle's ``system.authz`` needs: the token's digest."""
    path = folder / "runtime.json"
    doc = {"examlops_runtime": {"token_sha256": hashlib.sha256(token.encode()).hexdigest()}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@contextmanager
def opa_process(*args: str, endpoint: Endpoint, token: str | None = None, ca: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``opa run --server ARGS`` started by the test itself, ready, and killed afterwards."""
    proc = subprocess.Popen([str(OPA_BIN), "run", "--server", "--skip-version-check", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        probe = OpaTransport(endpoint, token=token, ca_file=ca, timeout=0.5)
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, f"test OPA exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            try:
                if probe.request("GET", "/health")[0] == 200:
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            assert time.monotonic() < deadline, "test OPA did not become ready"
            time.sleep(0.05)
        probe.close()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_listen_ports(pid: int) -> set[int]:
    """TCP ports (IPv4 and IPv6) on which process ``pid`` listens."""
    mine = socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in mine:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def opa_pids_for(home: Path) -> set[int]:
    """PIDs of running ``opa run --server`` processes whose last argument is inside ``home``."""
    from tests.conftest import opa_servers_under

    return {pid for pid, _ in opa_servers_under(home)}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate()`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting until {what}"
        time.sleep(0.05)


def suspend(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and wait until every one of its threads has stopped.

    ``kill`` only queues the signal: the kernel wakes one thread to act on it, and on a loaded
    machine the others may run (and answer a request) for a while before the group stop reaches
    them. A test that means "a hung server" must wait for the stop to be complete.
    """
    import os
    import signal

    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # a thread that just exited
        return bool(states) and all(s in {"T", "t"} for s in states)

    wait_until(stopped, timeout, f"every thread of pid {pid} is stopped (state T)")
