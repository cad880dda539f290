"""Executors: handing placed decisions to the schedulers that run them.

* ``slurm``: the exact ``sbatch`` request for a decision (partition, typed GPU GRES or the granted
  slice's GRES type, constraints, job name), submitting it, reading a job back.
* ``kubernetes``: the ``batch/v1`` Job for a decision, asking each vendor's device plugin.
* ``kubernetes_api``: a Kubernetes API server: create (or server dry run), read and delete those
  Jobs, and read nodes and pods for discovery (``lightkube``, imported only when connecting).
* ``gres``: the reviewed GRES table (``policies/examlops/tables/gres.yaml``).
* ``command``: running a tool with an argument list and a timeout (the ``Runner`` seam).

Scheduler refusals and failures raise ``ExecutorError``; bad input raises ``SpecError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from examlops_policy._lazy import home_of, lazy_names

if TYPE_CHECKING:
    from examlops_policy.executors.command import CommandResult, Runner, run_command
    from examlops_policy.executors.gres import GresTable, GresType, load_gres_table
    from examlops_policy.executors.kubernetes import job_manifest
    from examlops_policy.executors.kubernetes_api import JobRef, JobStatus, KubernetesCluster, KubernetesError
    from examlops_policy.executors.slurm import SlurmJob, SlurmRequest, job, slurm_request, submit

# Imported on first use: the Slurm executor does not import the Kubernetes one, nor its client.
_HOME_OF: Final = home_of({
    "examlops_policy.executors.command": ("CommandResult", "Runner", "run_command"),
    "examlops_policy.executors.gres": ("GresTable", "GresType", "load_gres_table"),
    "examlops_policy.executors.kubernetes": ("job_manifest",),
    "examlops_policy.executors.kubernetes_api": ("JobRef", "JobStatus", "KubernetesCluster", "KubernetesError"),
    "examlops_policy.executors.slurm": ("SlurmJob", "SlurmRequest", "job", "slurm_request", "submit"),
})  # fmt: skip
__getattr__ = lazy_names(__name__, globals(), _HOME_OF)

__all__ = [
    "CommandResult",
    "GresTable",
    "GresType",
    "JobRef",
    "JobStatus",
    "KubernetesCluster",
    "KubernetesError",
    "Runner",
    "SlurmJob",
    "SlurmRequest",
    "job",
    "job_manifest",
    "load_gres_table",
    "run_command",
    "slurm_request",
    "submit",
]
