"""Start estimates from Slurm itself, for the exact request ``submit`` would send.

``sbatch --test-only`` with the request's own options (``SlurmRequest.test_only_argv``: partition,
GRES, CPUs, memory, nodes, constraints, ``--time`` from the workload's walltime) makes slurmctld
run its will-run test and print, without submitting anything::

    sbatch: Job 29 to start at 2026-12-01T14:47:41 using 1 processors on nodes vm in partition gpu

That start accounts for the jobs running (their time limits) and the jobs already pending ahead
(measured on the Slurm of ``scripts/slurm-up``: a pending job ahead moved the answer from its
start to its end). For a job already queued, ``squeue --start`` prints the start the backfill
scheduler planned (``N/A`` until its next pass: no estimate yet, said so).

Times: the commands run with ``TZ=UTC`` and ``SLURM_TIME_FORMAT=standard``, so Slurm prints UTC in
ISO 8601 whatever the machine's zone or the user's format.

Speed and bounds: one ``scontrol ping`` first (a few milliseconds, cached for ``ttl_s``): a
controller that is down gives every pool "no estimate" with Slurm's own words at once, instead of
one ``sbatch`` retrying for about 18 s per pool. The questions then run concurrently (at most
``parallel`` processes), each bounded by ``timeout_s``, the whole batch by ``budget_s``; what did
not answer in time has no estimate, with that reason. Answers are cached per request (partition,
grant, time limit: the command line) for ``ttl_s`` and keep the time Slurm gave them
(``observed_at``), so a reused answer says how old it is.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Final

from examlops_policy.errors import ExaError
from examlops_policy.estimates import StartEstimate, iso, unknown, utc_now
from examlops_policy.executors.command import CommandResult, run_command
from examlops_policy.executors.slurm import JOB_ID_RE, SlurmRequest
from examlops_policy.model import JSONObject

# sbatch --test-only, on stderr (Slurm 22.05 src/sbatch/sbatch.c: "Job %u to start at %s using %u
# processors on nodes %s in partition %s").
WILL_RUN_RE: Final = re.compile(
    r"Job (?P<job>\d+) to start at (?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) using (?P<cpus>\d+) processors "
    r"on nodes (?P<nodes>\S+) in partition (?P<partition>\S+)"
)
_UNREACHABLE: Final = ("Unable to contact slurm controller", "is DOWN", "Could not establish a configuration source")
DEFAULT_TTL_S: Final = 10.0
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_BUDGET_S: Final = 20.0
DEFAULT_PARALLEL: Final = 8

# What the estimator runs a command with: (argv, timeout) -> result; raises ExaError when the
# program cannot run or does not finish in time.
SlurmRunner = Callable[[Sequence[str], float], CommandResult]


def run_in_utc(argv: Sequence[str], timeout: float) -> CommandResult:
    """Run a Slurm command with its times in UTC and ISO 8601, whatever the caller's settings."""
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    return run_command(argv, timeout=timeout, env=env)


def slurm_time(text: str) -> datetime:
    """A time Slurm printed under ``run_in_utc`` (``2026-12-01T14:47:41``) as an aware UTC instant."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class _Answer:
    estimate: StartEstimate
    until: float  # monotonic time the cached answer may be reused until


class SlurmEstimator:
    """Asks Slurm when requests would start; thread-safe; answers cached for ``ttl_s`` seconds.

    ``runner`` runs a command (``run_in_utc`` by default; tests pass recorded answers);
    ``clock`` gives the current instant (when an answer was observed)."""

    def __init__(
        self,
        runner: SlurmRunner = run_in_utc,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        budget_s: float = DEFAULT_BUDGET_S,
        parallel: int = DEFAULT_PARALLEL,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if parallel < 1 or timeout_s <= 0 or budget_s <= 0 or ttl_s < 0:
            raise ValueError("parallel must be at least 1; timeout_s and budget_s above 0; ttl_s at least 0")
        self._run = runner
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.budget_s = budget_s
        self.parallel = parallel
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, ...], _Answer] = {}
        self._down: tuple[str | None, float] | None = None  # (reason it is down or None, until)
        self.asked = 0  # sbatch/squeue questions actually sent (not answered from the cache)

    # -- the controller ---------------------------------------------------------------------

    def controller_down(self) -> str | None:
        """Why Slurm's controller cannot answer (its own words), or None when it answers
        (``scontrol ping``, cached for ``ttl_s``)."""
        with self._lock:
            if self._down is not None and time.monotonic() < self._down[1]:
                return self._down[0]
        try:
            result = self._run(["scontrol", "ping"], self.timeout_s)
            lines = [line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()]
            up = result.ok and any(" is UP" in line for line in lines)
            reason = None if up else _first_words(lines, result)
        except ExaError as exc:
            reason = str(exc)
        with self._lock:
            self._down = (reason, time.monotonic() + self.ttl_s)
        return reason

    def forget(self) -> None:
        """Drop every cached answer and the controller's state (the next question asks again)."""
        with self._lock:
            self._cache.clear()
            self._down = None

    # -- questions --------------------------------------------------------------------------

    def estimate(self, pool: str, request: SlurmRequest) -> StartEstimate:
        """When ``request`` would start on ``pool``'s partition (see ``estimate_many``)."""
        return self.estimate_many([(pool, request)])[0]

    def estimate_many(self, items: Sequence[tuple[str, SlurmRequest]]) -> list[StartEstimate]:
        """One estimate per (pool, request), in order: cached answers younger than ``ttl_s`` as
        they are, the rest asked of Slurm concurrently within the bounds above."""
        if not items:
            return []
        now = self._clock()
        down = self.controller_down()
        if down is not None:
            return [unknown(pool, "slurm", f"Slurm's controller does not answer ({down})", now, {"partition": r.partition}) for pool, r in items]
        results: list[StartEstimate | None] = [None] * len(items)
        missing: dict[tuple[str, ...], list[int]] = {}
        with self._lock:
            clock = time.monotonic()
            for index, (pool, request) in enumerate(items):
                key = tuple(request.test_only_argv())
                cached = self._cache.get(key)
                if cached is not None and clock < cached.until:
                    results[index] = replace(cached.estimate, pool=pool)
                else:
                    missing.setdefault(key, []).append(index)
        if missing:
            self._ask(items, missing, results)
        return [r if r is not None else unknown(items[i][0], "slurm", "no answer", now) for i, r in enumerate(results)]

    def _ask(self, items: Sequence[tuple[str, SlurmRequest]], missing: dict[tuple[str, ...], list[int]], results: list[StartEstimate | None]) -> None:
        from concurrent.futures import ThreadPoolExecutor, wait  # imported with the first batch

        keys = list(missing)
        pool = ThreadPoolExecutor(max_workers=min(self.parallel, len(keys)), thread_name_prefix="exa-slurm-estimate")
        try:
            futures = {pool.submit(self._will_run, items[missing[key][0]][0], key): key for key in keys}
            done, not_done = wait(futures, timeout=self.budget_s)
            for future in done:
                key = futures[future]
                answer = future.result()
                for index in missing[key]:
                    results[index] = replace(answer, pool=items[index][0])
            late = self._clock()
            for future in not_done:
                future.cancel()
                for index in missing[futures[future]]:
                    results[index] = unknown(items[index][0], "slurm", f"Slurm did not answer within {self.budget_s:g} s", late,
                                             {"partition": items[index][1].partition})  # fmt: skip
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _will_run(self, pool: str, argv: tuple[str, ...]) -> StartEstimate:
        """Ask ``sbatch --test-only`` (``argv``) and read its answer; cache it."""
        with self._lock:
            self.asked += 1
        command = " ".join(argv)
        partition = next((a.split("=", 1)[1] for a in argv if a.startswith("--partition=")), None)
        try:
            result = self._run(list(argv), self.timeout_s)
        except ExaError as exc:
            return unknown(pool, "slurm", str(exc), self._clock(), {"partition": partition, "command": command})
        observed = self._clock()
        output = result.stderr + "\n" + result.stdout
        match = WILL_RUN_RE.search(output)
        if result.ok and match:
            at = slurm_time(match["at"])
            facts: JSONObject = {
                "partition": match["partition"], "nodes": match["nodes"], "processors": int(match["cpus"]), "command": command,
            }  # fmt: skip
            estimate = StartEstimate(
                pool, at, "slurm", observed,
                f"slurm: expected start {iso(at)} on nodes {match['nodes']} in partition {match['partition']} (sbatch --test-only)",
                facts=facts,
            )  # fmt: skip
        else:
            lines = [line.strip() for line in output.splitlines() if line.strip()]
            reason = _first_words(lines, result) if not result.ok else f"unexpected answer from sbatch --test-only: {' '.join(lines)[:200]!r}"
            if any(mark in reason for mark in _UNREACHABLE):
                with self._lock:
                    self._down = None  # ask the controller again next time
                reason = f"Slurm's controller does not answer ({reason})"
            estimate = unknown(pool, "slurm", reason, observed, {"partition": partition, "command": command})
        if estimate.known:
            with self._lock:
                self._cache[argv] = _Answer(estimate, time.monotonic() + self.ttl_s)
        return estimate

    def queued(self, pool: str, job_id: str) -> StartEstimate:
        """When the job ``job_id``, already queued, is expected to start (``squeue --start``: the
        backfill scheduler's plan); a job already running says when it started."""
        now = self._clock()
        if not JOB_ID_RE.fullmatch(job_id):
            return unknown(pool, "slurm", f"not a Slurm job id: {job_id!r}", now)
        fmt = "%i|%T|%S|%P|%N|%r"
        try:
            pending = self._run(["squeue", "--start", "--noheader", f"--jobs={job_id}", f"--format={fmt}"], self.timeout_s)
            rows = [line for line in pending.stdout.splitlines() if line.strip()]
            if pending.ok and not rows:
                # squeue --start lists pending jobs only: read the job as it is.
                current = self._run(["squeue", "--noheader", f"--jobs={job_id}", f"--format={fmt}"], self.timeout_s)
                rows = [line for line in current.stdout.splitlines() if line.strip()] if current.ok else []
                pending = current
        except ExaError as exc:
            return unknown(pool, "slurm", str(exc), now, {"job": job_id})
        observed = self._clock()
        if not pending.ok:
            return unknown(pool, "slurm", _first_words([], pending), observed, {"job": job_id})
        if not rows:
            return unknown(pool, "slurm", f"job {job_id} is neither pending nor running", observed, {"job": job_id})
        _, state, start, partition, nodes, why = (rows[0].split("|") + [""] * 6)[:6]
        facts: JSONObject = {"job": job_id, "state": state, "partition": partition, "reason": why}
        if start in ("N/A", "", "Unknown"):
            return unknown(pool, "slurm", f"job {job_id} is {state.lower()} ({why}); Slurm has planned no start for it yet", observed, facts)
        at = slurm_time(start)
        what = "started" if state == "RUNNING" else "expected start"
        where = f" on nodes {nodes}" if nodes else ""
        return StartEstimate(pool, at, "slurm", observed, f"slurm: job {job_id} {what} {iso(at)}{where} (squeue --start)", facts=facts)


def _first_words(lines: Sequence[str], result: CommandResult) -> str:
    """Slurm's own words for a failure: its ``error:`` line or its last line."""
    if not lines:
        lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines() if line.strip()]
    errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    if errors:
        return errors[-1]
    down = [line for line in lines if " is DOWN" in line]
    if down:
        return down[0]
    return lines[-1] if lines else f"exit status {result.returncode}"


__all__ = ["SlurmEstimator", "WILL_RUN_RE", "run_in_utc", "slurm_time"]
