"""``exa hardware serve``: reconcile, expire leases and admit, in a loop, until SIGTERM or SIGINT.

Each step, in order: look at the reviewed policy files (a changed revision is read, and OPA is
confirmed to serve it before anything is decided under it); release the placements whose lease
ended; reconcile with the schedulers it was told to read; offer the queue the capacity there is
(admission). Then wait the interval, woken early by a signal, or when work waits in the queue and
a lease ends before the interval does (just after it ends: the capacity it held is offered then).

With a Slurm decision table to keep (``--slurm-table``, ``job_submit.Keeper``), each step whose
policy is served also writes the table again: decided again when the policy revision, the pools or
the accounts file changed; written with a new ``written_at`` otherwise. A step that cannot write it
logs why and leaves the file as it was (it grows stale, and the plugin does what its conf says).

* SIGTERM, SIGINT: no new step; the step under way finishes (its transactions commit or roll back
  whole); exit 0. A second signal changes nothing.
* OPA unavailable: logged, admission skipped (expiry and reconcile need no OPA), the next step
  after a back-off (the interval x 2^k, at most ``MAX_BACKOFF_S``), reset by a clean step. The state
  database unreachable: the same. A scheduler that cannot be read: logged, skipped (the others are
  read). Any other error of a step: logged with its type, the step tried again next interval.
* The process records itself (pid, start, command line) in ``<home>/serve/<pid>.json`` before it
  serves, and removes the record when it stops. Records that serve processes killed outright
  (SIGKILL, a crash) left behind are removed by the next start: only those whose process is proven
  gone (no process has that pid, or the one that has it started at another time than recorded); a
  record that cannot be told apart from a live process is kept. No process is ever signalled.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final, Protocol, TextIO

from examlops_policy.errors import ExaError, PolicyError, PolicyUnavailable, SpecError, StateError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from examlops_policy.job_submit import Keeper
    from examlops_policy.model import Decision, Pool, PoolState, Workload
    from examlops_policy.opa.procs import ProcessIdentity, StopOutcome

    from examlops_policy._core.engine import Engine
    from examlops_policy._reviewed import PolicySnapshot
    from examlops_policy.views import AdmissionReport, ReconcileReport

MAX_BACKOFF_S: Final = 300.0
# The shortest interval between steps: a step reads the policy files, the state and the schedulers,
# so a shorter one would only keep a core busy (an interval of 0 s is a busy loop).
MIN_INTERVAL_S: Final = 1.0
# Woken for a lease's end this long after it (a lease is released once its end has passed).
WAKE_SLACK_S: Final = 0.2


def check_interval(interval_s: float) -> float:
    """``interval_s``, or SpecError when it is shorter than ``MIN_INTERVAL_S`` (or not a number of
    seconds at all)."""
    if not isinstance(interval_s, (int, float)) or isinstance(interval_s, bool) or not interval_s >= MIN_INTERVAL_S:
        raise SpecError(
            f"expected at least {MIN_INTERVAL_S:g} s between steps (got {interval_s!r} s): a shorter interval would only keep a core busy",
            field="interval",
        )
    return float(interval_s)


class Hardware(Protocol):
    """What serving needs of the façade (``examlops_policy.hardware.Hardware``, which makes the
    server: no import of it here): the policy snapshot and its engine, lease expiry, reconcile and
    admission, and closing."""

    @property
    def engine(self) -> Engine: ...

    def policy_snapshot(self, *, force: bool = False) -> PolicySnapshot: ...

    def close_policy(self) -> None: ...

    def close(self) -> None: ...

    def expire_leases(self) -> list[str]: ...

    def queue_wakes_at(self) -> datetime | None: ...

    def reconcile(
        self, *, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, admit: bool = True
    ) -> tuple[ReconcileReport, AdmissionReport | None]: ...

    def admit(self, *, limit: int | None = None) -> AdmissionReport: ...

    def pools(self) -> list[PoolState]: ...

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None, *, where: bool = False) -> Decision: ...



def slurm_keeper(table: Path | None, accounts: Path | None) -> Keeper | None:
    """The keeper of the Slurm job_submit plugin's decision table at ``table`` (its accounts mapped
    by ``accounts``), or None when neither is given; SpecError at once for an accounts file it
    cannot use or a table it cannot write (``job_submit.keeper``)."""
    if table is None and accounts is None:
        return None
    from examlops_policy import job_submit

    return job_submit.keeper(table, accounts)

@dataclass
class StepReport:
    """What one step did: the lines it logged, and whether it met a fault that backs off."""

    lines: list[str] = field(default_factory=list)
    fault: bool = False
    wakes: datetime | None = None  # when capacity next frees (read for the wait after a step)


class Server:
    """One serving loop over a ``Hardware`` (made by ``make``: made again after it was closed)."""

    def __init__(
        self,
        make: Callable[[], Hardware],
        *,
        interval_s: float,
        slurm: bool | None,
        kubernetes: Mapping[str, str | None] | None,
        out: TextIO | None = None,
        slurm_table: Keeper | None = None,
        http: Callable[[Server], int] | None = None,
        confine: Callable[[Callable[[], StepReport]], StepReport] | None = None,
    ) -> None:
        self._make = make
        # The placement service (service.server): served on this thread while the loop runs beside
        # it, each step run by ``confine`` on the thread that owns the process's one Hardware (the
        # service's worker): one store connection and one policy snapshot per process.
        self.http = http
        self._confine = confine or (lambda work: work())
        self.slurm_table = slurm_table
        self.interval_s = check_interval(interval_s)
        self.slurm = slurm
        self.kubernetes = kubernetes
        self._out = out or sys.stdout
        self._stop = threading.Event()
        self._hw: Hardware | None = None
        self.revision: str | None = None
        self.steps = 0
        self.faults = 0

    # -- the loop -------------------------------------------------------------------------------

    def stop(self, *_: object) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def log(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._out.write(f"{stamp} {text}\n")
        self._out.flush()

    def run(self, home: Path, *, once: bool = False) -> int:
        """Serve until stopped (SIGTERM, SIGINT), or one step with ``once``. Exit status 0; 5 when
        the policy cannot be served at start (it does not compile, or OPA will not serve it)."""
        record, gone = _record(home)
        for pid in gone:
            self.log(f"removed the record of serve process {pid}: it is gone (killed without stopping)")
        previous = {sig: signal.signal(sig, self._signalled) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            start = StepReport()
            if not self._policy(start) or self.revision is None:
                for line in start.lines:
                    self.log(line)
                return 5
            self.log(f"serving: policy {self.revision[:19]} · every {self.interval_s:g} s" + (
                " · slurm" if self.slurm else "") + (" · kubernetes" if self.kubernetes is not None else "") + (
                f" · slurm table {self.slurm_table.path}" if self.slurm_table is not None else ""))  # fmt: skip
            if self.http is None:
                self._loop(once)
            else:
                self._reset()  # a connection serves the thread that opened it: the worker's opens it again
                looper = threading.Thread(target=self._loop, args=(once,), name="exa-serve-loop", daemon=True)
                looper.start()
                try:
                    self.http(self)
                finally:
                    self.stop()
                    looper.join()
            self.log("stopped")
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._hw is not None:
                self._confine(self._closed)
            record.unlink(missing_ok=True)

    def _loop(self, once: bool) -> None:
        backoff = 0
        while not self.stopping:
            report = self._confine(self.step)
            for line in report.lines:
                self.log(line)
            if once:
                break
            backoff = min(backoff + 1, 16) if report.fault else 0
            wait = min(MAX_BACKOFF_S, self.interval_s * (2 ** backoff if backoff else 1))
            if report.fault:
                self.log(f"backing off: next step in {wait:g} s")
            else:
                wait = self._until_capacity_frees(wait)
            self._stop.wait(wait)

    def _until_capacity_frees(self, wait: float) -> float:
        """``wait``, or less when work waits in the queue and a lease ends sooner: the step after
        that lease's end releases it and offers the queue what it held."""
        try:
            wakes = self._confine(lambda: StepReport(wakes=self.hw.queue_wakes_at())).wakes
        except Exception:  # noqa: BLE001 - the next step reports what is wrong; the interval stands
            return wait
        if wakes is None:
            return wait
        return min(wait, max(0.0, wakes.timestamp() - time.time()) + WAKE_SLACK_S)

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.log(f"{signal.Signals(signum).name}: finishing the current step, then stopping")
        self.stop()

    @property
    def hw(self) -> Hardware:
        if self._hw is None:
            self._hw = self._make()
        return self._hw

    # -- one step --------------------------------------------------------------------------------

    def step(self) -> StepReport:
        """Policy, leases, reconcile, admission; every fault logged, none raised."""
        self.steps += 1
        report = StepReport()
        policy_ok = self._policy(report)
        self._guarded(report, "leases", self._leases)
        if self.slurm is not None or self.kubernetes is not None:
            self._guarded(report, "reconcile", self._reconcile)
        if policy_ok:
            self._guarded(report, "admit", self._admit)
            if self.slurm_table is not None:
                self._guarded(report, "slurm table", self._slurm_table)
        else:
            report.lines.append("admission skipped: no policy to decide under")
        if report.fault:
            self.faults += 1
        return report

    def _guarded(self, report: StepReport, what: str, work: Callable[[StepReport], None]) -> None:
        try:
            work(report)
        except (StateError, PolicyUnavailable, PolicyError) as exc:
            report.fault = True
            report.lines.append(f"fault: {what}: {type(exc).__name__}: {exc}")
            if isinstance(exc, StateError):
                self._reset()
        except ExaError as exc:
            report.lines.append(f"fault: {what}: {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a serving loop logs what it did not foresee, and goes on
            report.fault = True
            report.lines.append(f"fault: {what}: {type(exc).__name__}: {exc}")

    def reset(self) -> None:
        """Drop the Hardware (and its connections): the next step opens them again."""
        self._reset()

    def _closed(self) -> StepReport:
        self._reset()
        return StepReport()

    def _reset(self) -> None:
        """Drop the Hardware (and its connections): the next step opens them again."""
        if self._hw is not None:
            try:
                self._hw.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._hw = None

    def _policy(self, report: StepReport) -> bool:
        """The reviewed files' revision, and OPA confirmed to serve it (restarted on the files when
        it is local and serves another). False when nothing may be decided now."""
        hw = self.hw
        try:
            snapshot = hw.policy_snapshot(force=True)
            if snapshot.revision != self.revision and self.revision is not None and not _same(snapshot.revision, self.revision):
                report.lines.append(f"policy changed: {self.revision[:19]} -> {snapshot.revision[:19]}")
            try:
                served = hw.engine.confirm()[0]
            except PolicyError as exc:
                if "serves policy revision" not in str(exc):
                    raise
                hw.close_policy()  # a local OPA is started again on the files as they are
                served = hw.engine.confirm()[0]
            self.revision = served
            return True
        except (PolicyError, PolicyUnavailable, StateError) as exc:
            report.fault = True
            report.lines.append(f"fault: policy: {type(exc).__name__}: {exc}")
            hw.close_policy()
            return False

    def _leases(self, report: StepReport) -> None:
        for ident in self.hw.expire_leases():
            report.lines.append(f"lease ended: released decision {ident[:12]}")

    def _reconcile(self, report: StepReport) -> None:
        result, _ = self.hw.reconcile(slurm=self.slurm, kubernetes=self.kubernetes, admit=False)
        for change in result.changes:
            report.lines.append(change.text)
        for name, why in result.unreadable:
            report.lines.append(f"fault: {name} could not be read (skipped): {why}")

    def _slurm_table(self, report: StepReport) -> None:
        assert self.slurm_table is not None and self.revision is not None
        report.lines.extend(self.slurm_table.step(self.hw, self.revision))

    def _admit(self, report: StepReport) -> None:
        admitted = self.hw.admit()
        for a in admitted.admitted:
            line = f"admitted {a.workload} (queued {a.queued_id[:12]}) on {a.pool}: decision {a.decision_id[:12]}"
            if a.job_id:
                line += f", {a.scheduler} job {a.job_id}"
            if a.preempted:
                line += f", preempting {', '.join(v[:12] for v in a.preempted)}"
            if a.submit_error:
                line += f" (not submitted yet: {a.submit_error})"
            report.lines.append(line)
        for e in admitted.failed:
            report.lines.append(f"failed {e.workload} (queued {e.id[:12]}): {e.message}")


def _same(a: str, b: str) -> bool:
    return a.split("@", 1)[0] == b.split("@", 1)[0]


def _record(home: Path) -> tuple[Path, list[int]]:
    """This process recorded in ``<home>/serve/<pid>.json`` (pid, start time, command line) before
    it serves, and the pids of the records of gone serve processes removed on the way."""
    from examlops_policy._private import ensure_private_dir, write_private_file
    from examlops_policy.opa.procs import ProcessIdentity

    folder = ensure_private_dir(home / "serve")
    gone = _remove_gone(folder)
    me = ProcessIdentity.of(os.getpid())
    path = folder / f"{os.getpid()}.json"
    doc = {"pid": os.getpid(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "identity": me.to_json() if me is not None else None, "argv": sys.argv}  # fmt: skip
    write_private_file(path, json.dumps(doc).encode("utf-8"))
    return path, gone


RECORD_LIMIT_BYTES: Final = 1 << 20  # a record holds a command line
STOP_GRACE_S: Final = 60.0  # how long --stop waits on SIGTERM (the step and the requests under way finish) before SIGKILL


@dataclass(frozen=True)
class Stopped:
    """What ``exa hardware serve --stop`` did: one line per serve process a record proved live."""

    outcomes: tuple[StopOutcome, ...] = ()

    @property
    def stopped(self) -> bool:
        return all(o.exited for o in self.outcomes)

    def lines(self) -> list[str]:
        return [o.describe("serve") for o in self.outcomes] or ["no serve process runs on this state folder"]


def stop_recorded(home: Path, *, grace: float = STOP_GRACE_S) -> Stopped:
    """Stop the serve processes recorded in ``<home>/serve/``: SIGTERM to each one whose live
    process is the recorded one (pid and start time as recorded), SIGKILL after ``grace`` seconds.
    A record that does not prove its process (malformed, another pid, a reused pid) is never
    signalled; records of processes proven gone are removed, before and after."""
    from examlops_policy.opa.procs import stop

    folder = home / "serve"
    if not folder.is_dir():
        return Stopped()
    _remove_gone(folder)
    outcomes: list[StopOutcome] = []
    for _, pid, recorded in _records(folder):
        outcome = stop(recorded, grace=grace) if recorded is not None and recorded.pid == pid else None  # not proven: never signalled
        if outcome is not None:
            outcomes.append(outcome)
    _remove_gone(folder)
    return Stopped(tuple(outcomes))


def _records(folder: Path) -> Iterator[tuple[Path, int, ProcessIdentity | None]]:
    """The records of other serve processes in ``folder``: (path, the pid it is named by, the
    identity it records, or None when it cannot be read)."""
    from examlops_policy._private import read_small_file
    from examlops_policy.opa.procs import ProcessIdentity

    for path in sorted(folder.glob("*.json")):
        if not path.stem.isdigit() or int(path.stem) == os.getpid():
            continue
        try:
            recorded: ProcessIdentity | None = ProcessIdentity.from_json(json.loads(read_small_file(path, RECORD_LIMIT_BYTES))["identity"])
        except (OSError, ValueError, KeyError, TypeError):
            recorded = None
        yield path, int(path.stem), recorded


def _remove_gone(folder: Path) -> list[int]:
    """Remove the records (``<pid>.json``) whose serve process is proven gone: no live process has
    the pid, or the live one with it started at another time (its pid was reused). A record of a
    live process, or one that does not say when its process started, is left as it is."""
    from examlops_policy.opa.procs import ProcessIdentity

    gone: list[int] = []
    for path, pid, recorded in _records(folder):
        now = ProcessIdentity.of(pid)
        if now is not None:
            if recorded is None:
                continue  # not known to be another process: kept
            if recorded.pid != pid or recorded.start_ticks == now.start_ticks:
                continue  # the recorded process itself (or a record that names another pid)
        try:
            path.unlink()
        except OSError:
            continue
        gone.append(pid)
    return gone
