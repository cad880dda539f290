"""Handing placed decisions to schedulers, reading their jobs back: library workflows.

Called through ``Hardware.submit``, ``Hardware.job_status`` and ``Hardware.manifest``. A job is
recorded on its decision (and in the audit log) in one transaction after the scheduler accepted
it; when the recording fails, a Kubernetes Job just created is deleted again, so nothing runs that
the state does not know.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from examlops_policy.errors import ExaError, ExecutorError, SpecError
from examlops_policy.model import JSONObject, Pool
from examlops_policy.views import DecisionRecord, JobReport, Submission

if TYPE_CHECKING:
    from examlops_policy.app.ports import Jobs
    from examlops_policy.executors.kubernetes_api import KubernetesCluster


SCHEDULERS = ("slurm", "kubernetes")
# Slurm job states (squeue/scontrol/sacct) by what they mean here.
_SLURM: dict[str, str] = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "RESV_DEL_HOLD": "pending",
    "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running", "RESIZING": "running", "STAGE_OUT": "running",
    "COMPLETED": "complete",
    "FAILED": "failed", "CANCELLED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "OUT_OF_MEMORY": "failed", "REVOKED": "failed",
}  # fmt: skip


def _placed(jobs: Jobs, ident: str) -> tuple[DecisionRecord, Pool]:
    record = jobs.decision(ident)
    pool = jobs.pool_by_name(str(getattr(record.decision, "pool", "") or ""))
    from examlops_policy.executors.placed import live_placement

    live_placement(record, pool, nothing="to submit")
    return record, pool


def _cluster(options: dict[str, object]) -> KubernetesCluster:
    from examlops_policy.executors.kubernetes_api import KubernetesCluster

    return KubernetesCluster.connect(cast("str | None", options.get("kubeconfig")), cast("str | None", options.get("context")))


def manifest(jobs: Jobs, ident: str, *, image: str, **options: object) -> JSONObject:
    """The Kubernetes ``batch/v1`` Job for a live placement (nothing is sent)."""
    from examlops_policy.executors.kubernetes import job_manifest

    record, pool = _placed(jobs, ident)
    return job_manifest(
        record, pool, image=image,
        command=[str(c) for c in cast("list[object]", options.get("command") or [])],
        namespace=cast("str | None", options.get("namespace")),
        amd_memory_partition=str(options.get("amd_memory_partition") or "nps1"),
        tpu_topology=cast("str | None", options.get("tpu_topology")),
    )  # fmt: skip


def submit(jobs: Jobs, ident: str, scheduler: str, *, dry_run: bool, **options: object) -> Submission:
    """Hand a live placement to ``slurm`` (``script``) or ``kubernetes`` (``image``,
    ``namespace``, ``command``, ``context``, ``kubeconfig``) and record the job on the decision
    and in the audit log in one transaction. ``dry_run``: Slurm prints the command; Kubernetes
    runs the server's dry run (admission and validation for real), recording nothing.
    ExecutorError when the scheduler refuses or cannot be reached (nothing recorded)."""
    if scheduler == "slurm":
        return _submit_slurm(jobs, ident, dry_run=dry_run, script=options.get("script"))
    if scheduler == "kubernetes":
        return _submit_kubernetes(jobs, ident, dry_run=dry_run, options=dict(options))
    raise SpecError(f"expected one of {', '.join(SCHEDULERS)} (got {scheduler!r})", field="scheduler")


def _submit_slurm(jobs: Jobs, ident: str, *, dry_run: bool, script: object) -> Submission:
    from examlops_policy.executors.gres import load_gres_table
    from examlops_policy.executors.slurm import SCHEDULER, slurm_request
    from examlops_policy.executors.slurm import submit as sbatch

    if not script:
        raise SpecError("a batch script is needed to submit to Slurm", field="--script")
    record, pool = _placed(jobs, ident)
    request = slurm_request(record, pool, Path(str(script)), load_gres_table())
    common = {"command": request.command_line(), "argv": tuple(request.argv()), "partition": request.partition, "gres": request.gres}
    if dry_run:
        return Submission(record.id, SCHEDULER, False, **common)  # type: ignore[arg-type]
    job_id = sbatch(request)
    updated = jobs.set_job(record.id, job_id, scheduler=SCHEDULER)
    return Submission(updated.id, SCHEDULER, True, job_id=job_id, **common)  # type: ignore[arg-type]


def _submit_kubernetes(jobs: Jobs, ident: str, *, dry_run: bool, options: dict[str, object]) -> Submission:
    image = options.get("image")
    if not image:
        raise SpecError("a container image is needed to submit to Kubernetes", field="--image")
    record, _ = _placed(jobs, ident)
    if record.job_id is not None:
        raise SpecError(f"decision {record.id[:12]} was already submitted as job {record.job_id}", field="ID")
    job = manifest(jobs, record.id, image=str(image), **{k: v for k, v in options.items() if k not in ("image", "kubeconfig", "context")})
    with _cluster(options) as cluster:
        ref = cluster.create_job(job, dry_run=dry_run)
        if dry_run:
            return Submission(record.id, "kubernetes", False, namespace=ref.namespace, job_id=f"{ref.namespace}/{ref.name}", manifest=job)
        try:
            updated = jobs.set_job(record.id, f"{ref.namespace}/{ref.name}", scheduler="kubernetes", uid=ref.uid)
        except ExaError:
            # Recorded nowhere: nothing may run that the state does not know.
            cluster.delete_job(ref.namespace, ref.name)
            raise
    return Submission(updated.id, "kubernetes", True, job_id=f"{ref.namespace}/{ref.name}", job_uid=ref.uid, namespace=ref.namespace, manifest=job)


def status(jobs: Jobs, ident: str, **options: object) -> JobReport:
    """The decision's job as its scheduler reports it; a Kubernetes Job deleted outside this
    layer is marked ``missing`` on the decision (audited)."""
    record = jobs.decision(ident)
    if record.job_id is None:
        raise SpecError(f"decision {record.id[:12]} was not submitted to a scheduler", field="ID")
    if record.scheduler == "kubernetes":
        namespace, _, name = record.job_id.partition("/")
        with _cluster(dict(options)) as cluster:
            job = cluster.job_status(namespace, name)
        if job.state == "missing" and record.job_state != "missing":
            jobs.mark_job(record.id, "missing")
        return JobReport(record.id, "kubernetes", record.job_id, job.state, job.reason, job.message)
    return _slurm_status(record)


def _slurm_status(record: DecisionRecord) -> JobReport:
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
            return JobReport(record.id, "slurm", record.job_id, "missing", "Slurm no longer knows the job (and keeps no accounting)")
        native, _, reason = line.partition("|")
        native = native.split()[0]
    state = _SLURM.get(native, "unknown")
    shown = None if reason in (None, "", "None") else reason
    return JobReport(record.id, "slurm", record.job_id, state, shown, native_state=native)


def cancel(record: DecisionRecord, *, kubeconfig: str | None = None, context: str | None = None) -> bool:
    """Stop a decision's job through its scheduler (``scancel``; the Kubernetes Job of the recorded
    uid deleted, its pods first): True when a job was stopped, False when there was none left.
    ExecutorError when the scheduler refuses or cannot be reached."""
    from examlops_policy.executors.command import run_command
    from examlops_policy.executors.slurm import JOB_ID_RE

    if record.job_id is None:
        return False
    if record.scheduler == "kubernetes":
        from examlops_policy.executors.kubernetes_api import KubernetesCluster

        namespace, _, name = record.job_id.partition("/")
        with KubernetesCluster.connect(kubeconfig, context) as cluster:
            return cluster.delete_job(namespace, name, uid=record.job_uid)
    if not JOB_ID_RE.fullmatch(record.job_id):
        raise SpecError(f"not a Slurm job id: {record.job_id!r}", field="job id")
    result = run_command(["scancel", record.job_id], timeout=30)
    if not result.ok:
        raise ExecutorError(f"scancel {record.job_id} failed: {result.reason()}")
    return True
