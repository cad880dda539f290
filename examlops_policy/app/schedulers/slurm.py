"""Slurm as a ``Scheduler``: an adapter around ``discovery.slurm`` (sinfo/scontrol),
``estimates.slurm`` (``sbatch --test-only``), ``executors.slurm`` (sbatch, squeue, sacct,
scancel). Each of them is imported when first used: a fleet without Slurm imports none of it.

Options (``SlurmOptions``): ``script``, the batch script to submit; a queued workload keeps the
script's text (``script``) and its file name (``name``), written to a private file while sbatch
reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy.app.schedulers.base import placed, region_of, text
from examlops_policy.app.schedulers.seen import JobSeen, Seen
from examlops_policy.errors import ExecutorError, SpecError
from examlops_policy.model import JSONValue, Pool
from examlops_policy.views import JobReport, Submission, Submit

if TYPE_CHECKING:
    from examlops_policy.app.ports import Fleet, Jobs
    from examlops_policy.discovery import Discovery
    from examlops_policy.executors.command import Runner
    from examlops_policy.store.api import GrantRow
    from examlops_policy.views import DecisionRecord

# Slurm job states (squeue/scontrol/sacct) by what they mean here.
STATES: Final[dict[str, str]] = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "RESV_DEL_HOLD": "pending",
    "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running", "RESIZING": "running", "STAGE_OUT": "running",
    "COMPLETED": "complete",
    "FAILED": "failed", "CANCELLED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "OUT_OF_MEMORY": "failed", "REVOKED": "failed",
}  # fmt: skip


@dataclass(frozen=True)
class SlurmOptions:
    """What a Slurm submission is given: the batch script (a file, or a queued script's text and
    file name)."""

    script: str | None = None
    name: str | None = None

    @classmethod
    def read(cls, given: Mapping[str, object]) -> SlurmOptions:
        return cls(text(given, "script"), text(given, "name"))


class Slurm:
    """Slurm: partitions discovered as pools, jobs submitted with sbatch (see the module)."""

    name: Final = "slurm"
    title: Final = "Slurm"
    job_word: Final = "job"
    resubmit: Final = "--script FILE"

    def serves(self, pool: Pool) -> bool:
        """A pool a Slurm partition serves, that names its nodes (reconcile sets their states)."""
        return pool.partition is not None and pool.nodes_named

    # -- discover -----------------------------------------------------------------------

    def discover(self, fleet: Fleet, *, region: str | None, prefix: str | None, options: Mapping[str, object]) -> tuple[Discovery, Callable[[Pool], bool]]:
        from examlops_policy.discovery.slurm import discover_slurm, from_slurm
        from examlops_policy.executors.gres import load_gres_table

        slurm_prefix = prefix or ""
        return (
            discover_slurm(load_gres_table(), region=region_of(fleet, region), prefix=slurm_prefix),
            lambda p: from_slurm(p) and p.name.startswith(slurm_prefix),
        )

    # -- submit, status, cancel ----------------------------------------------------------------

    def submit(self, jobs: Jobs, ident: str, options: Mapping[str, object], *, dry_run: bool) -> Submission:
        from examlops_policy.executors.gres import load_gres_table
        from examlops_policy.executors.slurm import slurm_request
        from examlops_policy.executors.slurm import submit as sbatch

        script = SlurmOptions.read(options).script
        if not script:
            raise SpecError("a batch script is needed to submit to Slurm", field="--script")
        record, pool = placed(jobs, ident)
        request = slurm_request(record, pool, Path(script), load_gres_table())
        command, argv, partition, gres = request.command_line(), tuple(request.argv()), request.partition, request.gres
        if dry_run:
            return Submission(record.id, self.name, False, command=command, argv=argv, partition=partition, gres=gres, said=command)
        job_id = sbatch(request)
        updated = jobs.set_job(record.id, job_id, scheduler=self.name)
        said = f"✓ decision {updated.id[:12]} submitted to Slurm as job {job_id} · partition {partition}" + (f" · {gres}" if gres else "")
        return Submission(updated.id, self.name, True, job_id=job_id, command=command, argv=argv, partition=partition, gres=gres, said=said)

    def queued(self, given: Mapping[str, object]) -> Submit:
        """``--submit slurm --script FILE``: the script's text is kept (the job runs what it said
        when it was queued)."""
        script = text(given, "script")
        if not script:
            raise SpecError("--submit slurm needs --script (the batch script to run)", source="command line", field="--script")
        return Submit.slurm(Path(script))

    def check_queued(self, options: Mapping[str, JSONValue]) -> None:
        if not isinstance(options.get("script"), str):
            raise SpecError("a batch script is needed to submit to Slurm once admitted", field="--script")

    def submit_queued(self, jobs: Jobs, ident: str, options: Mapping[str, JSONValue]) -> Submission:
        """The queued script's text in a private file while sbatch reads it (Slurm keeps its own copy)."""
        kept = SlurmOptions.read(options)
        with _script_file(kept.script or "", kept.name or "job.sh") as script:
            return self.submit(jobs, ident, {"script": str(script)}, dry_run=False)

    def status(self, jobs: Jobs, record: DecisionRecord, options: Mapping[str, object]) -> JobReport:
        """``scontrol show job`` while slurmctld remembers the job, then ``sacct``."""
        from examlops_policy.executors.command import run_command
        from examlops_policy.executors.slurm import job as slurm_job

        assert record.job_id is not None
        try:
            found = slurm_job(record.job_id)
            native, reason = found.state.split("+", 1)[0], found.fields.get("Reason")
        except ExecutorError:
            result = run_command(["sacct", "-n", "-X", "-P", "-j", record.job_id, "--format=State,Reason"], timeout=30)
            line = result.stdout.strip().splitlines()[0] if result.ok and result.stdout.strip() else ""
            if not line:
                return JobReport(record.id, self.name, record.job_id, "missing", "Slurm no longer knows the job (and keeps no accounting)")
            native, _, reason = line.partition("|")
            native = native.split()[0]
        state = STATES.get(native, "unknown")
        shown = None if reason in (None, "", "None") else reason
        return JobReport(record.id, self.name, record.job_id, state, shown, native_state=native)

    def cancel(self, record: DecisionRecord, options: Mapping[str, object]) -> bool:
        """``scancel`` the decision's job."""
        from examlops_policy.executors.command import run_command
        from examlops_policy.executors.slurm import JOB_ID_RE

        assert record.job_id is not None
        if not JOB_ID_RE.fullmatch(record.job_id):
            raise SpecError(f"not a Slurm job id: {record.job_id!r}", field="job id")
        result = run_command(["scancel", record.job_id], timeout=30)
        if not result.ok:
            raise ExecutorError(f"scancel {record.job_id} failed: {result.reason()}")
        return True

    def released(self, record: DecisionRecord, options: Mapping[str, object]) -> bool | None:
        """A release leaves a Slurm job to Slurm (its allocation ends with the job)."""
        return None

    # -- reconcile ------------------------------------------------------------------------------

    def reconcile(self, grants: Sequence[GrantRow], options: Mapping[str, object], runner: Runner) -> Seen:
        """``squeue --states=all``, then ``sacct`` for jobs slurmctld no longer holds; the nodes' states."""
        from examlops_policy.executors import slurm

        jobs = slurm.queue_states(runner)
        nodes = slurm.node_states(runner)
        gone = [g.job_id for g in grants if g.job_id and g.job_id not in jobs]
        accounted = slurm.accounting_states([str(j) for j in gone], runner) if gone else {}
        seen: dict[str, JobSeen] = {}
        for job_id in {g.job_id for g in grants if g.job_id}:
            job = jobs.get(job_id) or (accounted or {}).get(job_id)
            if job is not None:
                seen[job_id] = JobSeen(job.state, job.ended, job.running, job.started_at, job.ended_at)
        return Seen(seen, nodes)


class _script_file:
    """The queued batch script, in a private file while sbatch reads it (Slurm keeps its own copy)."""

    def __init__(self, text: str, name: str) -> None:
        self._text, self._name = text, name
        self._dir: str | None = None

    def __enter__(self) -> Path:
        import tempfile

        self._dir = tempfile.mkdtemp(prefix="exa-queued-")
        path = Path(self._dir) / (Path(self._name).name or "job.sh")
        path.write_text(self._text, encoding="utf-8")
        os.chmod(path, 0o700)
        return path

    def __exit__(self, *_: object) -> None:
        if self._dir is not None:
            for child in Path(self._dir).iterdir():
                child.unlink(missing_ok=True)
            os.rmdir(self._dir)
