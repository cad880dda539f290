"""The supervisor of one home's OPA: records it, starts it, and stops it when no longer needed.

Started by ``server._spawn_supervisor`` as ``python -m examlops_policy.opa.supervisor <home>/opa``
with the start plan (JSON) on stdin and the start lock as an inherited descriptor. It forks once
(so it is nobody's child and no caller has to reap it), then:

1. writes the record naming itself (PID, start time, command line) before OPA exists; a record
   that cannot be written (a full disk) ends the start with nothing running;
2. starts OPA as its child with a parent-death signal (SIGKILL): OPA cannot outlive it, so a
   server is never without a recorded process answering for it;
3. records OPA, waits until ``GET /health`` answers, marks the record ready, releases the lock
   and reports one JSON line on stdout: ``{"ok": true, "record": ...}`` or
   ``{"ok": false, "kind": "PolicyError"|"PolicyUnavailable", "error": ...}``;
4. watches, once a tick (at most a second): OPA still running; the state folder still there
   (same inode); the record still naming this supervisor; a stop signal (TERM, INT, HUP); and
   idleness. Idleness is read from OPA itself: the sum of ``http_request_duration_seconds_count``
   in ``GET /metrics`` over every handler but ``authz`` (which counts every request, refused ones
   and these scrapes included), ``health`` and ``metrics``. When the sum has not moved for the
   idle timeout, OPA is stopped; the timeout is thus met within one scrape interval
   (``min(5 s, timeout / 5)``), with no help from clients.

It stops OPA with SIGTERM, then SIGKILL after the grace period, removes the record if it still
names this supervisor (and nobody holds the lock), and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Final

from examlops_policy.errors import ExaError, PolicyError, PolicyUnavailable
from examlops_policy.opa.procs import ProcessIdentity
from examlops_policy.opa.server import STOP_GRACE_S, Record, ServerPaths, StartPlan, read_record, read_token, write_record
from examlops_policy.opa.transport import Endpoint, OpaTransport
from examlops_policy._private import open_private_log, private_file

_PR_SET_PDEATHSIG: Final = 1
_IGNORED_HANDLERS: Final = frozenset({"authz", "health", "metrics"})
_COUNTER: Final = "http_request_duration_seconds_count{"


def _log(message: str) -> None:
    print(f"{datetime.now(UTC).isoformat(timespec='seconds')} {message}", file=sys.stderr, flush=True)


def requests_served(metrics: str) -> int:
    """Requests OPA has served to clients, from its Prometheus text (see the module docstring)."""
    total = 0
    for line in metrics.splitlines():
        if not line.startswith(_COUNTER):
            continue
        labels, _, value = line[len(_COUNTER) :].partition("} ")
        handler = next((part.split("=", 1)[1].strip('"') for part in labels.split(",") if part.startswith("handler=")), "")
        if handler not in _IGNORED_HANDLERS:
            total += int(float(value))
    return total


def _die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` arming SIGKILL for the child when this process dies (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork, not in the child
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the signal was armed
            os._exit(1)

    return arm


class Supervisor:
    """One OPA's start, watch and stop (see the module docstring)."""

    def __init__(self, paths: ServerPaths, plan: StartPlan) -> None:
        self.paths = paths
        self.argv = list(plan.opa_argv)
        self.lock_fd = plan.lock_fd
        self.idle_timeout = plan.idle_timeout_s
        self.start_timeout = plan.start_timeout_s
        me = ProcessIdentity.of(os.getpid())
        assert me is not None
        self.record = Record("starting", plan.revision, paths.socket, self.idle_timeout, me, None, plan.started_at)
        self.folder = os.stat(paths.dir)
        self.stop_signal: int | None = None
        self.holds_lock = True  # the start lock, inherited from the caller, until the record is ready

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signum

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        try:
            opa = self._start()
        except ExaError as exc:
            self._report({"ok": False, "kind": type(exc).__name__, "error": str(exc)})
            return 1
        self._report({"ok": True, "record": self.record.to_json()})
        reason = self._watch(opa)
        _log(f"stopping OPA (pid {opa.pid}): {reason}")
        self._stop(opa)
        self._cleanup()
        return 0

    def _start(self) -> subprocess.Popen[bytes]:
        write_record(self.paths, self.record)  # before OPA exists; a full disk stops here
        try:
            log_fd = open_private_log(self.paths.opa_log, error=PolicyUnavailable)
            try:
                opa = subprocess.Popen(
                    self.argv, cwd=self.paths.dir, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                    preexec_fn=_die_with_parent(),  # noqa: PLW1509 - single-threaded process
                )  # fmt: skip
            except OSError as exc:
                raise PolicyUnavailable(f"cannot start OPA ({self.argv[0]}): {exc}") from exc
            finally:
                os.close(log_fd)
        except BaseException:
            self._cleanup()
            raise
        try:
            identity = ProcessIdentity.of(opa.pid)
            if identity is None:
                raise PolicyError(f"OPA exited at start (does the policy compile?){self._log_tail()}")
            self.record = dataclasses.replace(self.record, opa=identity)
            write_record(self.paths, self.record)
            self._wait_ready(opa)
            private_file(self.paths.activity, error=PolicyUnavailable)
            self.record = dataclasses.replace(self.record, state="ready")
            write_record(self.paths, self.record)
        except BaseException:
            self._stop(opa)
            self._cleanup()
            raise
        os.close(self.lock_fd)  # the record is ready: other callers may use (or replace) it now
        self.holds_lock = False
        return opa

    def _transport(self, timeout: float) -> OpaTransport:
        return OpaTransport(Endpoint("unix", path=str(self.paths.socket)), token=read_token(self.paths), timeout=timeout)

    def _wait_ready(self, opa: subprocess.Popen[bytes]) -> None:
        transport = self._transport(timeout=1.0)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if opa.poll() is not None:
                tail = self._log_tail()
                if "signature" in tail or "verify" in tail:
                    raise PolicyError(
                        "OPA refused the policy bundle: its signature does not verify with the key made for this start "
                        f"(was the bundle replaced after it was built?); nothing serves{tail}"
                    )
                raise PolicyError(f"OPA exited at start with status {opa.returncode} (does the policy compile?){tail}")
            with contextlib.suppress(PolicyUnavailable):
                if transport.request("GET", "/health")[0] == 200:
                    transport.close()
                    return
            time.sleep(0.02)
        raise PolicyUnavailable(f"OPA did not answer on {self.paths.socket} within {self.start_timeout:.0f} s{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            text = self.paths.opa_log.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        return f":\n{text[-2000:]}" if text else ""

    def _report(self, message: dict[str, object]) -> None:
        with contextlib.suppress(OSError):  # the caller may be gone (killed mid-start): run anyway
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)

    def _orphaned(self) -> str | None:
        """Why OPA is no longer wanted here, or None."""
        try:
            folder = os.stat(self.paths.dir)
        except FileNotFoundError:
            return "its state folder is gone"
        if (folder.st_dev, folder.st_ino) != (self.folder.st_dev, self.folder.st_ino):
            return "its state folder was replaced"
        record, _ = read_record(self.paths)
        if record is None or record.supervisor != self.record.supervisor:
            return "its record is gone or names another server"
        return None

    def _watch(self, opa: subprocess.Popen[bytes]) -> str:
        tick = min(1.0, self.idle_timeout / 5)
        scrape_every = min(5.0, self.idle_timeout / 5)
        transport = self._transport(timeout=2.0)
        served: int | None = None
        last_active = next_scrape = time.monotonic()
        while True:
            if self.stop_signal is not None:
                return f"asked to stop ({signal.Signals(self.stop_signal).name})"
            if opa.poll() is not None:
                return f"OPA exited by itself with status {opa.returncode}"
            why = self._orphaned()
            if why:
                return why
            now = time.monotonic()
            if now >= next_scrape:
                count = self._served(transport)
                if count is not None and count != served:
                    if served is not None:
                        last_active = now
                        with contextlib.suppress(OSError):
                            os.utime(self.paths.activity)
                    served = count
                next_scrape = now + scrape_every
            if now - last_active >= self.idle_timeout:
                return f"no request for {self.idle_timeout:g} s"
            time.sleep(tick)

    @staticmethod
    def _served(transport: OpaTransport) -> int | None:
        try:
            status, body = transport.request("GET", "/metrics")
        except ExaError:
            return None  # a busy or stopped OPA: no evidence of use
        return requests_served(body.decode("utf-8", "replace")) if status == 200 else None

    @staticmethod
    def _stop(opa: subprocess.Popen[bytes]) -> None:
        """SIGTERM, then SIGKILL after the grace period (this process's own child: no PID doubt)."""
        if opa.poll() is not None:
            return
        opa.terminate()
        try:
            opa.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            opa.kill()
            opa.wait()

    def _cleanup(self) -> None:
        """Remove the record (and a stale socket) if it still names this supervisor.

        Only under the lock: while starting, this process holds it; later, a process holding it
        is starting or stopping a server and takes care of the record itself.
        """
        if self.holds_lock:
            self._remove_own_record()
            return
        try:
            fd = os.open(self.paths.lock, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return  # the folder is gone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._remove_own_record()
        except BlockingIOError:
            pass
        finally:
            os.close(fd)

    def _remove_own_record(self) -> None:
        record, _ = read_record(self.paths)
        if record is not None and record.supervisor == self.record.supervisor:
            for path in (self.paths.record, self.paths.socket):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m examlops_policy.opa.supervisor <home>/opa  (the start plan on stdin)", file=sys.stderr)
        return 2
    os.umask(0o077)
    if os.fork() > 0:
        os._exit(0)  # the caller waits for this first process only; the supervisor lives on
    plan = StartPlan.from_json(sys.stdin.buffer.read())
    os.close(0)
    paths = ServerPaths(Path(argv[1]).parent)
    try:
        return Supervisor(paths, plan).run()
    except Exception as exc:  # noqa: BLE001 - report to the caller rather than die silently
        with contextlib.suppress(OSError):
            print(json.dumps({"ok": False, "kind": "PolicyUnavailable", "error": f"the OPA supervisor failed: {exc!r}"}), flush=True)
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv))
