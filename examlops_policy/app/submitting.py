"""Handing placed decisions to schedulers, reading their jobs back: library workflows.

Called through ``Hardware.submit``, ``Hardware.job_status`` and ``Hardware.manifest``; each asks
the registry (``app.schedulers``) for the scheduler and calls it through the port. A job is
recorded on its decision (and in the audit log) in one transaction after the scheduler accepted
it; when the recording fails, a Kubernetes Job just created is deleted again, so nothing runs that
the state does not know.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from examlops_policy.app import schedulers
from examlops_policy.errors import SpecError
from examlops_policy.model import JSONObject
from examlops_policy.views import DecisionRecord, JobReport, Submission

if TYPE_CHECKING:
    from examlops_policy.app.ports import Jobs, Scheduler


def manifest(jobs: Jobs, ident: str, *, image: str, **options: object) -> JSONObject:
    """The Kubernetes ``batch/v1`` Job for a live placement (nothing is sent)."""
    from examlops_policy.app.schedulers.kubernetes import KubernetesOptions
    from examlops_policy.app.schedulers.kubernetes import manifest as job_manifest

    return job_manifest(jobs, ident, KubernetesOptions.read({**options, "image": image}))


def submit(jobs: Jobs, ident: str, scheduler: str, *, dry_run: bool, **options: object) -> Submission:
    """Hand a live placement to a registered scheduler: ``slurm`` (``script``) or ``kubernetes``
    (``image``, ``namespace``, ``command``, ``context``, ``kubeconfig``), and record the job on
    the decision and in the audit log in one transaction. ``dry_run``: Slurm prints the command;
    Kubernetes runs the server's dry run (admission and validation for real), recording nothing.
    ExecutorError when the scheduler refuses or cannot be reached (nothing recorded)."""
    return schedulers.scheduler(scheduler).submit(jobs, ident, options, dry_run=dry_run)


def status(jobs: Jobs, ident: str, **options: object) -> JobReport:
    """The decision's job as its scheduler reports it; a Kubernetes Job deleted outside this
    layer is marked ``missing`` on the decision (audited)."""
    record = jobs.decision(ident)
    if record.job_id is None:
        raise SpecError(f"decision {record.id[:12]} was not submitted to a scheduler", field="ID")
    return _scheduler_of(record).status(jobs, record, options)


def cancel(record: DecisionRecord, *, kubeconfig: str | None = None, context: str | None = None) -> bool:
    """Stop a decision's job through its scheduler (``scancel``; the Kubernetes Job of the recorded
    uid deleted, its pods first): True when a job was stopped, False when there was none left.
    ExecutorError when the scheduler refuses or cannot be reached."""
    if record.job_id is None:
        return False
    return _scheduler_of(record).cancel(record, {"kubeconfig": kubeconfig, "context": context})


def _scheduler_of(record: DecisionRecord) -> Scheduler:
    found = schedulers.of_job(record.scheduler)
    if found is None:
        raise SpecError(
            f"decision {record.id[:12]} was submitted to {record.scheduler}, which is none of the schedulers here "
            f"({', '.join(schedulers.SCHEDULERS)}): ask it", field="ID",
        )  # fmt: skip
    return found
