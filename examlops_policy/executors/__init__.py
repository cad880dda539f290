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

from examlops_policy.executors.command import CommandResult, Runner, run_command
from examlops_policy.executors.gres import GresTable, GresType, load_gres_table
from examlops_policy.executors.kubernetes import job_manifest
from examlops_policy.executors.kubernetes_api import JobRef, JobStatus, KubernetesCluster, KubernetesError
from examlops_policy.executors.slurm import SlurmJob, SlurmRequest, job, slurm_request, submit

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
