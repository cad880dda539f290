"""Proving that a process is the one this layer started, before signalling it.

A PID alone proves nothing: once the process exits, the kernel hands the number to the next
process. A recorded ``ProcessIdentity`` is the PID plus the process's start time (field 22 of
``/proc/<pid>/stat``, clock ticks after boot, fixed for the life of a process) plus its exact
command line. A live process matching all three is the recorded one. Signals go through a pidfd
opened *before* the check, so the process checked is the process signalled, even if it exits
and its PID is reused in between.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from examlops_policy.model import JSONObject


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a process is: PID, start time (clock ticks after boot) and command line."""

    pid: int
    start_ticks: int
    argv: tuple[str, ...]

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of the live process ``pid`` now; None when there is none (or only a zombie)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        # The command name (field 2) is in parentheses and may itself hold spaces and ")".
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in {"Z", "X"}:  # exited, not yet reaped: no longer a running server
            return None
        argv = tuple(part.decode("utf-8", "surrogateescape") for part in cmdline.split(b"\0")[:-1])
        return cls(pid=pid, start_ticks=int(fields[19]), argv=argv)

    def alive(self) -> bool:
        """True while the recorded process itself (not a successor with its PID) runs."""
        return ProcessIdentity.of(self.pid) == self

    def to_json(self) -> JSONObject:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "argv": list(self.argv)}

    @classmethod
    def from_json(cls, doc: object) -> ProcessIdentity:
        """Raises ValueError (or TypeError, KeyError) on a malformed record."""
        if not isinstance(doc, dict):
            raise ValueError("a process identity is an object")
        argv = doc["argv"]
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        return cls(pid=int(doc["pid"]), start_ticks=int(doc["start_ticks"]), argv=tuple(argv))


# Runs in the child, then becomes the command: SIGKILL arrives when the process that started it
# dies (PR_SET_PDEATHSIG survives execve), and a parent already gone means do nothing at all.
_DIE_WITH_PARENT: Final = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None).prctl(1,9,0,0,0)\n"
    "if os.getppid()!=int(sys.argv[1]):os._exit(1)\n"
    "os.execv(sys.argv[2],sys.argv[2:])\n"
)


def dying_with_this_process(argv: list[str]) -> list[str]:
    """``argv`` run so that it is killed when this process dies (killed with SIGKILL included).

    A command this layer runs while holding a lock or writing in a state folder must not outlive
    the caller: a placer killed mid-start would leave it writing (or hanging) on its own. A tiny
    interpreter sets the parent-death signal and ``exec``s the command (no ``preexec_fn``, which
    is unsafe in a process with threads).
    """
    return [sys.executable, "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


def state(pid: int) -> str | None:
    """The process state letter (R running, S sleeping, T stopped, D in I/O wait, ...), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@dataclass(frozen=True)
class StopOutcome:
    """What stopping one process took: the signals sent, whether it exited, and how long it took."""

    identity: ProcessIdentity
    signals: tuple[str, ...]
    exited: bool
    seconds: float
    state_before_kill: str | None = None

    def describe(self, name: str) -> str:
        pid = self.identity.pid
        if not self.signals:
            return f"{name} (pid {pid}) had already exited"
        if not self.exited:
            return f"{name} (pid {pid}) still runs after {' and '.join(self.signals)} ({self.seconds:.1f} s)"
        if self.signals == ("SIGTERM",):
            return f"{name} (pid {pid}) stopped on SIGTERM in {self.seconds:.1f} s"
        why = " (it was stopped, state T)" if self.state_before_kill == "T" else ""
        return f"{name} (pid {pid}) did not exit on SIGTERM{why}; killed with SIGKILL, gone after {self.seconds:.1f} s"


def _open(identity: ProcessIdentity) -> int | None:
    """A pidfd on the recorded process, or None when it is not running (or is someone else)."""
    try:
        fd = os.pidfd_open(identity.pid)
    except ProcessLookupError:
        return None
    # Checked after opening: the pidfd now pins exactly the process that passed the check.
    if not identity.alive():
        os.close(fd)
        return None
    return fd


def _wait_exit(fd: int, identity: ProcessIdentity, timeout: float) -> bool:
    """Wait until the process exits (a pidfd turns readable when it does)."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if poller.poll(max(0, int(left * 1000))) or ProcessIdentity.of(identity.pid) != identity:
            return True
        if left <= 0:
            return False


def stop(identity: ProcessIdentity, *, grace: float, kill_wait: float = 5.0) -> StopOutcome | None:
    """SIGTERM the recorded process, SIGKILL it if it has not exited after ``grace`` seconds.

    Returns None, and signals nothing, when no live process matches ``identity`` (a stale
    record naming a PID that now belongs to someone else is never signalled). A SIGSTOPped
    process ignores SIGTERM until continued, but not SIGKILL.
    """
    fd = _open(identity)
    if fd is None:
        return None
    started = time.monotonic()
    try:
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        if _wait_exit(fd, identity, grace):
            return StopOutcome(identity, ("SIGTERM",), True, time.monotonic() - started)
        before = state(identity.pid)
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        exited = _wait_exit(fd, identity, kill_wait)
        return StopOutcome(identity, ("SIGTERM", "SIGKILL"), exited, time.monotonic() - started, before)
    except ProcessLookupError:  # it exited between the check and the signal
        return StopOutcome(identity, ("SIGTERM",), True, time.monotonic() - started)
    finally:
        os.close(fd)
