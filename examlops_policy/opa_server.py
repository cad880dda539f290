"""Starting and finding the local OPA server that evaluates placements.

One OPA serves every ``exa`` process on the machine for a given state directory: it is started on
first use (loopback only, telemetry off), recorded in ``<state>/opa/server.json`` and reused while it
is healthy and runs the current policy revision. A changed policy or a dead server means a restart,
under a file lock so that concurrent processes start at most one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from examlops_policy.errors import PolicyError, PolicyUnavailable
from examlops_policy.tables import policy_dir, revision

OPA_VERSION: Final = "1.22.3"
START_TIMEOUT_S: Final = 15.0
_REPO_TOOLS: Final = Path(__file__).resolve().parent.parent / ".tools" / "bin" / "opa"


@dataclass(frozen=True)
class OpaServer:
    """A running OPA server: where it listens, its pid, and the policy revision it loaded."""

    url: str
    pid: int
    revision: str


def opa_binary() -> Path:
    """The OPA binary: ``EXA_OPA_BIN``, else the project's ``.tools/bin/opa``, else ``opa`` on PATH."""
    env = os.environ.get("EXA_OPA_BIN")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PolicyUnavailable(f"EXA_OPA_BIN={env} is not an executable file")
        return path
    if _REPO_TOOLS.is_file():
        return _REPO_TOOLS
    found = shutil.which("opa")
    if found:
        return Path(found)
    raise PolicyUnavailable("no OPA binary found: run scripts/setup, or set EXA_OPA_BIN or EXA_OPA_URL")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed child that its parent has not reaped yet still answers signal 0: a zombie is dead.
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _healthy(url: str, timeout: float = 1.0) -> bool:
    from examlops_policy.opa.transport import OpaTransport

    transport = OpaTransport.from_url(url, timeout=timeout)
    try:
        return transport.request("GET", "/health")[0] == 200
    except (PolicyError, PolicyUnavailable):
        return False
    finally:
        transport.close()


def _read_record(path: Path) -> OpaServer | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return OpaServer(url=str(data["url"]), pid=int(data["pid"]), revision=str(data["revision"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop_server(state_dir: Path) -> bool:
    """Stop the recorded server, if any. True if one was stopped."""
    record = _read_record(state_dir / "opa" / "server.json")
    if record is None or not _alive(record.pid):
        return False
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _alive(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def ensure_server(state_dir: Path, root: Path | None = None) -> OpaServer:
    """Return a healthy OPA server running the current policy revision, starting one if needed."""
    root = root or policy_dir()
    current = revision(root)
    opa_dir = state_dir / "opa"
    opa_dir.mkdir(parents=True, exist_ok=True)
    record_path = opa_dir / "server.json"
    record = _read_record(record_path)
    if record and record.revision == current and _alive(record.pid) and _healthy(record.url):
        return record
    with open(opa_dir / "lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_record(record_path)  # another process may have started one meanwhile
        if record and record.revision == current and _alive(record.pid) and _healthy(record.url):
            return record
        if record and _alive(record.pid):
            stop_server(state_dir)
        server = _start(opa_dir, root, current)
        tmp = record_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": server.url, "pid": server.pid, "revision": server.revision}), encoding="utf-8")
        tmp.replace(record_path)
        return server


def _start(opa_dir: Path, root: Path, current: str) -> OpaServer:
    from examlops_policy.opa.bundle import build_bundle

    binary = opa_binary()
    bundle = build_bundle(root, opa_dir)
    sock = opa_dir / "opa.sock"
    sock.unlink(missing_ok=True)
    url = f"unix://{sock}"
    log = open(opa_dir / "opa.log", "ab")  # noqa: SIM115 - handed to the child process
    cmd = [
        str(binary), "run", "--server", "--disable-telemetry",
        "--addr", url, "--log-level", "error", "--bundle", str(bundle.path),
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise PolicyUnavailable(f"cannot start OPA ({binary}): {exc}") from exc
    finally:
        log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (opa_dir / "opa.log").read_text(encoding="utf-8", errors="replace")[-2000:]
            raise PolicyError(f"OPA exited at start (does the policy compile?):\n{tail.strip()}")
        if _healthy(url, timeout=0.5):
            return OpaServer(url=url, pid=proc.pid, revision=current)
        time.sleep(0.05)
    proc.kill()
    raise PolicyUnavailable(f"OPA did not become healthy within {START_TIMEOUT_S:.0f}s")
