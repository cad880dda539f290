"""The local OPA: one per state folder, started on demand, reachable by its owner only.

Layout of ``<home>/opa/`` (0700; every file 0600)::

    opa.sock        the only listener (a Unix socket; OPA gets no TCP address at all)
    token           the bearer token, 32 random bytes as hex, new for every start
    bundle.tar.gz   the reviewed policy (see ``bundle``), with the token's SHA-256 (never the
                    token) as ``data.examlops_runtime``, signed with a key made for this start
    server.json     the record: who serves, proven by PID + start time + command line
    lock            serializes starts and stops across processes
    activity        its modification time is the last time OPA served a request
    opa.log, supervisor.log

Lifecycle. A start runs under the lock: remove what a start killed halfway left behind (scratch
folders, temporary files), write a fresh token, make a signing key (in memory only), build the
bundle signed with it, then spawn the supervisor (``supervisor.py``), which records *itself*
before it starts OPA, starts OPA as its child with a parent-death signal (OPA cannot outlive it),
records OPA, waits until OPA answers, marks the record ready and lets the lock go. The lock is
shared with the supervisor, so a caller killed mid-start leaves the start to finish, recorded,
and other callers wait for it. OPA runs in bundle mode with the public key on its command line:
it loads the bundle only if the signature verifies, so a bundle swapped in after the build (by
anyone who can write to the folder) is refused and the start fails closed. Once OPA answers, the
starter checks the digest of the tables it serves (``content.prove_content``). The supervisor stops OPA after ``EXA_OPA_IDLE_TIMEOUT`` seconds without a request
(default 900) and at once when the state folder or the record disappears.

A record is trusted only while the processes it names are alive and have the recorded start
time and command line; otherwise it is stale: removed, and nothing is signalled. Stopping sends
SIGTERM, then SIGKILL after a grace period, and reports which it took.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from examlops_policy.errors import ExaError, PolicyError, PolicyUnavailable, SpecError
from examlops_policy.opa import procs
from examlops_policy.opa.bundle import Signer, build_bundle, content_digest, opa_binary, remove_scratch
from examlops_policy.opa.content import prove_content
from examlops_policy.opa.procs import ProcessIdentity, StopOutcome
from examlops_policy.opa.transport import Endpoint, OpaTransport
from examlops_policy.model import JSONObject
from examlops_policy._private import describe_os_error, ensure_private_dir, open_private_log, write_private_file
from examlops_policy.tables import policy_dir, revision

START_TIMEOUT_S: Final = 15.0
STOP_GRACE_S: Final = 3.0
DEFAULT_IDLE_TIMEOUT_S: Final = 900.0
SUPERVISOR_MODULE: Final = "examlops_policy.opa.supervisor"
RECORD_FORMAT: Final = 1
_PACKAGE_PARENT: Final = Path(__file__).resolve().parents[2]
# The local OPA's garbage collector runs by a memory limit rather than by heap growth. Every
# decision confirms the revision (about 0.3 ms); with Go's default (collect whenever the heap has
# doubled, from a few MB) about one confirm in 300 paused 2-6 ms on a 2-core machine, while the
# heap stayed under 80 MB at 1,000 pools. Collecting once the heap reaches 256 MiB removes those
# pauses (confirm p99 1.1 -> 0.54 ms, docs/performance.md). A GOGC or GOMEMLIMIT already in
# the environment is kept as it is.
OPA_GC_ENV: Final = {"GOGC": "off", "GOMEMLIMIT": "256MiB"}


@dataclass(frozen=True)
class ServerPaths:
    """The files of one home's OPA (see the module docstring)."""

    home: Path

    @property
    def dir(self) -> Path:
        return self.home / "opa"

    @property
    def socket(self) -> Path:
        return self.dir / "opa.sock"

    @property
    def token(self) -> Path:
        return self.dir / "token"

    @property
    def runtime(self) -> Path:
        """Where an earlier version kept the token's digest (now in the signed bundle): removed."""
        return self.dir / "runtime.json"

    @property
    def record(self) -> Path:
        return self.dir / "server.json"

    @property
    def lock(self) -> Path:
        return self.dir / "lock"

    @property
    def activity(self) -> Path:
        return self.dir / "activity"

    @property
    def opa_log(self) -> Path:
        return self.dir / "opa.log"

    @property
    def supervisor_log(self) -> Path:
        return self.dir / "supervisor.log"


@dataclass(frozen=True)
class Record:
    """``server.json``: what serves this home, and how to prove it before any signal."""

    state: str  # "starting" until OPA answers, then "ready"
    revision: str
    socket: Path
    idle_timeout_s: float
    supervisor: ProcessIdentity
    opa: ProcessIdentity | None
    started_at: str

    def to_json(self) -> dict[str, object]:
        return {
            "format": RECORD_FORMAT,
            "state": self.state,
            "revision": self.revision,
            "socket": str(self.socket),
            "idle_timeout_s": self.idle_timeout_s,
            "supervisor": self.supervisor.to_json(),
            "opa": None if self.opa is None else self.opa.to_json(),
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, doc: object) -> Record:
        """Raises ValueError (or KeyError, TypeError) unless ``doc`` is a record of this format."""
        if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT:
            raise ValueError("not a server record of this version")
        if doc["state"] not in {"starting", "ready"}:
            raise ValueError(f"unknown state {doc['state']!r}")
        return cls(
            state=str(doc["state"]),
            revision=str(doc["revision"]),
            socket=Path(str(doc["socket"])),
            idle_timeout_s=float(doc["idle_timeout_s"]),
            supervisor=ProcessIdentity.from_json(doc["supervisor"]),
            opa=None if doc["opa"] is None else ProcessIdentity.from_json(doc["opa"]),
            started_at=str(doc["started_at"]),
        )

    def running(self) -> bool:
        """Ready, and both recorded processes are alive and are who the record says."""
        return self.state == "ready" and self.opa is not None and self.opa.alive() and self.supervisor.alive()


@dataclass(frozen=True)
class StartPlan:
    """What the supervisor needs to start OPA (sent as JSON on its stdin)."""

    opa_argv: tuple[str, ...]
    lock_fd: int  # the start lock, inherited; the supervisor closes it once the record is ready
    idle_timeout_s: float
    start_timeout_s: float
    revision: str
    started_at: str

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "opa_argv": list(self.opa_argv)})

    @classmethod
    def from_json(cls, text: str | bytes) -> StartPlan:
        doc = json.loads(text)
        return cls(
            opa_argv=tuple(str(a) for a in doc["opa_argv"]),
            lock_fd=int(doc["lock_fd"]),
            idle_timeout_s=float(doc["idle_timeout_s"]),
            start_timeout_s=float(doc["start_timeout_s"]),
            revision=str(doc["revision"]),
            started_at=str(doc["started_at"]),
        )


@dataclass(frozen=True)
class OpaServer:
    """A running local OPA: its socket, its PID and the bundle revision it loaded."""

    socket: Path
    pid: int
    revision: str
    supervisor_pid: int

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @classmethod
    def of(cls, record: Record) -> OpaServer:
        assert record.opa is not None  # a ready record names OPA
        return cls(record.socket, record.opa.pid, record.revision, record.supervisor.pid)


@dataclass(frozen=True)
class StopReport:
    """What ``stop_server`` found and did. ``stale`` says why a record was dropped unsignalled."""

    opa: StopOutcome | None = None
    supervisor: StopOutcome | None = None
    stale: str | None = None

    @property
    def was_running(self) -> bool:
        return self.opa is not None or self.supervisor is not None

    @property
    def stopped(self) -> bool:
        """Nothing the record named still runs."""
        return all(o is None or o.exited for o in (self.opa, self.supervisor))

    def lines(self) -> list[str]:
        out = []
        if self.opa is not None:
            out.append(self.opa.describe("OPA"))
        # The supervisor is worth a line when there was no OPA yet, or when it resisted SIGTERM.
        if self.supervisor is not None and (self.opa is None or self.supervisor.signals[1:] or not self.supervisor.exited):
            out.append(self.supervisor.describe("the OPA supervisor"))
        if self.stale:
            out.append(self.stale)
        return out or ["OPA was not running"]


def idle_timeout_from_env() -> float:
    """``EXA_OPA_IDLE_TIMEOUT`` in seconds (default 900): how long the local OPA may sit unused."""
    text = os.environ.get("EXA_OPA_IDLE_TIMEOUT")
    if not text:
        return DEFAULT_IDLE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise SpecError(f"EXA_OPA_IDLE_TIMEOUT={text!r}: expected a number of seconds greater than 0")
    return value


def read_record(paths: ServerPaths) -> tuple[Record | None, str | None]:
    """The record, or (None, why) when there is none or it cannot be read."""
    try:
        text = paths.record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the server record {paths.record} cannot be read ({exc.strerror})"
    try:
        return Record.from_json(json.loads(text)), None
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"the server record {paths.record} is malformed ({exc}); removed, nothing was signalled"


def write_record(paths: ServerPaths, record: Record) -> None:
    """Replace ``server.json`` atomically (PolicyUnavailable when it cannot be written, e.g. disk full)."""
    write_private_file(paths.record, json.dumps(record.to_json(), indent=1).encode(), error=PolicyUnavailable)


@contextlib.contextmanager
def locked(paths: ServerPaths, timeout: float = START_TIMEOUT_S + 15) -> Iterator[int]:
    """Hold ``<home>/opa/lock`` (yielding its descriptor); PolicyUnavailable after ``timeout`` s."""
    try:
        fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise PolicyUnavailable(describe_os_error("open", paths.lock, exc)) from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PolicyUnavailable(
                        f"another process has held {paths.lock} for {timeout:.0f} s (starting or stopping OPA); try again"
                    ) from None
                time.sleep(0.02)
        yield fd
    finally:
        os.close(fd)


def _remove_leftovers(paths: ServerPaths) -> None:
    """Drop the record and a socket file a killed OPA left behind (under the lock)."""
    for path in (paths.record, paths.socket):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _stop_recorded(record: Record) -> StopReport:
    """Stop what ``record`` names: OPA first (so the report is about OPA), then its supervisor."""
    opa = procs.stop(record.opa, grace=STOP_GRACE_S) if record.opa is not None else None
    supervisor = procs.stop(record.supervisor, grace=STOP_GRACE_S)
    stale = None
    if opa is None and supervisor is None:
        named = f"pid {record.opa.pid}" if record.opa is not None else f"supervisor pid {record.supervisor.pid}"
        stale = f"the record named {named}, which is not the OPA it recorded (gone, or the number now belongs to another process); removed the record, nothing was signalled"
    return StopReport(opa, supervisor, stale)


def stop_server(home: Path) -> StopReport:
    """Stop this home's OPA, if one runs, and remove its record.

    Only processes that match the record (PID, start time, command line) are signalled. The
    record stays when something it names survived SIGKILL, so it can still be found.
    """
    paths = ServerPaths(home)
    if not paths.record.exists():
        return StopReport()
    with locked(paths):
        record, problem = read_record(paths)
        if record is None:
            _remove_leftovers(paths)
            return StopReport(stale=problem)
        report = _stop_recorded(record)
        if report.stopped:
            _remove_leftovers(paths)
        return report


def ensure_server(home: Path, root: Path | None = None) -> OpaServer:
    """This home's OPA running the policy in ``root`` (default ``policy_dir()``), started if needed.

    Reused while it runs and its bundle has the content digest of ``root``; otherwise stopped
    (if recorded and proven) and started on a new bundle. Raises PolicyError when the policy does
    not build, PolicyUnavailable when OPA cannot be started (no binary, a full disk, a state
    folder others can write to), SpecError for a bad ``EXA_OPA_IDLE_TIMEOUT``.
    """
    root = root or policy_dir()
    return ensure_running(ServerPaths(home), root, revision(root))


def ensure_running(paths: ServerPaths, root: Path, content: str) -> OpaServer:
    """``ensure_server`` for callers that already computed the policy's content digest."""
    ensure_private_dir(paths.home, error=PolicyUnavailable)
    ensure_private_dir(paths.dir, error=PolicyUnavailable)
    record, _ = read_record(paths)
    if record is not None and record.running() and content_digest(record.revision) == content:
        return OpaServer.of(record)
    idle_timeout = idle_timeout_from_env()
    binary = opa_binary()
    with locked(paths) as lock_fd:
        record, _ = read_record(paths)  # another process may have started one meanwhile
        if record is not None and record.running() and content_digest(record.revision) == content:
            return OpaServer.of(record)
        if record is not None:
            report = _stop_recorded(record)
            if not report.stopped:
                raise PolicyUnavailable(f"cannot replace the running OPA: {'; '.join(report.lines())}")
        _remove_leftovers(paths)
        return OpaServer.of(_start(paths, root, binary, idle_timeout, lock_fd))


def _start(paths: ServerPaths, root: Path, binary: Path, idle_timeout: float, lock_fd: int) -> Record:
    # Under the lock, nothing else writes here: whatever scratch is left, a killed start left.
    remove_scratch(paths.dir)
    paths.runtime.unlink(missing_ok=True)
    token = secrets.token_hex(32)
    write_private_file(paths.token, (token + "\n").encode(), error=PolicyUnavailable)
    signer = Signer.ephemeral()
    runtime: JSONObject = {"token_sha256": hashlib.sha256(token.encode()).hexdigest()}
    bundle = build_bundle(root, paths.dir, opa=binary, signer=signer, runtime=runtime)
    argv = [
        str(binary), "run", "--server", "--skip-version-check", "--log-level=error",
        # Relative to OPA's working folder (<home>/opa): a socket path is limited to 107 bytes.
        "--addr=unix://opa.sock", "--unix-socket-perm=600",
        "--authentication=token", "--authorization=basic", "--shutdown-grace-period=2",
        *signer.verify_args(),
        # The last argument is a path inside the home: a server whose home is gone is easy to spot.
        str(paths.dir / bundle.path.name),
    ]  # fmt: skip
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    plan = StartPlan(tuple(argv), lock_fd, idle_timeout, START_TIMEOUT_S, bundle.revision, started_at)
    record = _spawn_supervisor(paths, plan)
    transport = OpaTransport(Endpoint("unix", path=str(paths.socket)), token=token, describe=f"unix://{paths.socket}")
    try:
        prove_content(transport, root)
    except ExaError:
        _stop_recorded(record)
        _remove_leftovers(paths)
        raise
    finally:
        transport.close()
    return record


def _spawn_supervisor(paths: ServerPaths, plan: StartPlan) -> Record:
    """Start the supervisor (it records itself, then starts OPA) and wait for its one-line report."""
    log_fd = open_private_log(paths.supervisor_log, error=PolicyUnavailable)
    env = dict(os.environ)
    # The supervisor imports this package from where this process found it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_PARENT), env.get("PYTHONPATH", "")) if p)
    if "GOGC" not in env and "GOMEMLIMIT" not in env:
        env.update(OPA_GC_ENV)  # OPA inherits the supervisor's environment
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR_MODULE, str(paths.dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fd,
            cwd=paths.dir, env=env, pass_fds=(plan.lock_fd,), start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise PolicyUnavailable(f"cannot start the OPA supervisor ({sys.executable}): {exc}") from exc
    finally:
        os.close(log_fd)
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(plan.to_json().encode())
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    proc.wait()  # the first process forks the real supervisor and exits at once
    line = _read_line(proc.stdout.fileno(), START_TIMEOUT_S + 10)
    proc.stdout.close()
    if line is None:
        tail = _tail(paths.supervisor_log)
        raise PolicyUnavailable(f"the OPA supervisor ended, or gave no report within {START_TIMEOUT_S + 10:.0f} s{tail}")
    try:
        report = json.loads(line)
        if report.get("ok"):
            return Record.from_json(report["record"])
        kind, message = str(report["kind"]), str(report["error"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PolicyUnavailable(f"the OPA supervisor reported {line[:300]!r}: {exc}") from exc
    raise (PolicyError if kind == "PolicyError" else PolicyUnavailable)(message)


def _read_line(fd: int, timeout: float) -> str | None:
    """One line from ``fd`` within ``timeout`` seconds; None on EOF or time-out."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", "replace")


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f":\n{text[-1500:]}" if text else ""


def read_token(paths: ServerPaths) -> str:
    """The bearer token of this home's OPA (PolicyUnavailable when it cannot be read)."""
    try:
        return paths.token.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyUnavailable(f"cannot read the OPA token {paths.token}: {exc}") from exc
