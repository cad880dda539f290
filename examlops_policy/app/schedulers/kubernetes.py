"""Kubernetes as a ``Scheduler``: an adapter around ``discovery.kubernetes`` (nodes' allocatable
devices), ``executors.kubernetes`` (the ``batch/v1`` Job of a placement) and
``executors.kubernetes_api`` (the API server). Each is imported when first used.

Options (``KubernetesOptions``): ``image``, ``namespace``, ``command``, ``amd_memory_partition``,
``tpu_topology`` for the Job; ``kubeconfig`` and ``context`` for the cluster (default:
``$KUBECONFIG``, else ``~/.kube/config``, and its current context); ``block_label`` and
``switch_label`` for discovery. A Job is created through the API; when recording it fails, it is
deleted again, so nothing runs that the state does not know. A cluster is asked for start
estimates only when told (``Hardware.ask_kubernetes``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from examlops_policy.app.schedulers.base import placed, text, texts
from examlops_policy.app.schedulers.seen import JobSeen, Seen
from examlops_policy.errors import ExaError, SpecError
from examlops_policy.model import JSONObject, JSONValue, Pool
from examlops_policy.views import JobReport, Submission, Submit

if TYPE_CHECKING:
    from examlops_policy.app.ports import Fleet, Jobs
    from examlops_policy.discovery import Discovery
    from examlops_policy.executors.command import Runner
    from examlops_policy.executors.kubernetes_api import KubernetesCluster
    from examlops_policy.store.api import GrantRow
    from examlops_policy.views import DecisionRecord

# What a queued submission keeps (``--submit kubernetes``) and hands over once admitted.
QUEUED: Final = ("image", "namespace", "command", "context", "kubeconfig")


@dataclass(frozen=True)
class KubernetesOptions:
    """What the Kubernetes adapter is given (see the module)."""

    image: str | None = None
    namespace: str | None = None
    command: tuple[str, ...] = ()
    amd_memory_partition: str = "nps1"
    tpu_topology: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    block_label: str | None = None
    switch_label: str | None = None

    @classmethod
    def read(cls, given: Mapping[str, object]) -> KubernetesOptions:
        return cls(
            image=text(given, "image"), namespace=text(given, "namespace"), command=texts(given, "command"),
            amd_memory_partition=text(given, "amd_memory_partition") or "nps1", tpu_topology=text(given, "tpu_topology"),
            kubeconfig=text(given, "kubeconfig"), context=text(given, "context"),
            block_label=text(given, "block_label"), switch_label=text(given, "switch_label"),
        )  # fmt: skip

    def cluster(self) -> KubernetesCluster:
        from examlops_policy.executors.kubernetes_api import KubernetesCluster

        return KubernetesCluster.connect(self.kubeconfig, self.context)


def manifest(jobs: Jobs, ident: str, options: KubernetesOptions) -> JSONObject:
    """The Kubernetes ``batch/v1`` Job for a live placement (nothing is sent)."""
    from examlops_policy.executors.kubernetes import job_manifest

    if not options.image:
        raise SpecError("a container image is needed for a Kubernetes Job", field="--image")
    record, pool = placed(jobs, ident)
    return job_manifest(
        record, pool, image=options.image, command=list(options.command), namespace=options.namespace,
        amd_memory_partition=options.amd_memory_partition, tpu_topology=options.tpu_topology,
    )  # fmt: skip


def _where(job_id: str) -> tuple[str, str]:
    namespace, _, name = job_id.partition("/")
    return namespace, name


class Kubernetes:
    """Kubernetes: nodes discovered as pools, jobs created as ``batch/v1`` Jobs (see the module)."""

    name: Final = "kubernetes"
    title: Final = "Kubernetes"
    job_word: Final = "Job"
    resubmit: Final = "--kubernetes --image IMAGE"

    def serves(self, pool: Pool) -> bool:
        """A pool of a cluster's nodes (no Slurm partition), that names its nodes."""
        return pool.partition is None and pool.nodes_named

    # -- discover -----------------------------------------------------------------------

    def discover(self, fleet: Fleet, *, region: str | None, prefix: str | None, options: Mapping[str, object]) -> tuple[Discovery, Callable[[Pool], bool]]:
        from examlops_policy.discovery.kubernetes import discover_kubernetes, from_kubernetes

        given = KubernetesOptions.read(options)
        k8s_prefix = prefix or "k8s-"
        with given.cluster() as cluster:
            found = discover_kubernetes(cluster, fleet.tables.regions, prefix=k8s_prefix, models=fleet.tables.models,
                                        block_label=given.block_label, switch_label=given.switch_label)  # fmt: skip
        return found, lambda p: from_kubernetes(p, prefix=k8s_prefix)

    # -- submit, status, cancel ----------------------------------------------------------------

    def submit(self, jobs: Jobs, ident: str, options: Mapping[str, object], *, dry_run: bool) -> Submission:
        given = KubernetesOptions.read(options)
        if not given.image:
            raise SpecError("a container image is needed to submit to Kubernetes", field="--image")
        record, _ = placed(jobs, ident)
        if record.job_id is not None:
            raise SpecError(f"decision {record.id[:12]} was already submitted as job {record.job_id}", field="ID")
        job = manifest(jobs, record.id, given)
        with given.cluster() as cluster:
            ref = cluster.create_job(job, dry_run=dry_run)
            job_id = f"{ref.namespace}/{ref.name}"
            if dry_run:
                said = f"✓ the API server accepts Job {job_id} for decision {record.id[:12]} (dry run: nothing created)"
                return Submission(record.id, self.name, False, namespace=ref.namespace, job_id=job_id, manifest=job, said=said)
            try:
                updated = jobs.set_job(record.id, job_id, scheduler=self.name, uid=ref.uid)
            except ExaError:
                # Recorded nowhere: nothing may run that the state does not know.
                cluster.delete_job(ref.namespace, ref.name)
                raise
        said = f"✓ decision {updated.id[:12]} submitted to Kubernetes as Job {job_id} (uid {ref.uid})"
        return Submission(updated.id, self.name, True, job_id=job_id, job_uid=ref.uid, namespace=ref.namespace, manifest=job, said=said)

    def queued(self, given: Mapping[str, object]) -> Submit:
        """``--submit kubernetes --image IMAGE`` (and a namespace, a context, a kubeconfig)."""
        image = text(given, "image")
        if not image:
            raise SpecError("--submit kubernetes needs --image", source="command line", field="--image")
        return Submit.kubernetes(image, namespace=text(given, "namespace"), context=text(given, "context"), kubeconfig=text(given, "kubeconfig"))

    def check_queued(self, options: Mapping[str, JSONValue]) -> None:
        if not options.get("image"):
            raise SpecError("a container image is needed to submit to Kubernetes once admitted", field="--image")

    def submit_queued(self, jobs: Jobs, ident: str, options: Mapping[str, JSONValue]) -> Submission:
        return self.submit(jobs, ident, {k: v for k, v in options.items() if k in QUEUED}, dry_run=False)

    def status(self, jobs: Jobs, record: DecisionRecord, options: Mapping[str, object]) -> JobReport:
        """The Job as the API reports it; one deleted outside this layer is marked ``missing`` on
        the decision (audited)."""
        assert record.job_id is not None
        with KubernetesOptions.read(options).cluster() as cluster:
            job = cluster.job_status(*_where(record.job_id))
        if job.state == "missing" and record.job_state != "missing":
            jobs.mark_job(record.id, "missing")
        return JobReport(record.id, self.name, record.job_id, job.state, job.reason, job.message)

    def cancel(self, record: DecisionRecord, options: Mapping[str, object]) -> bool:
        """Delete the Job of the recorded uid (its pods first); False when there was none left."""
        assert record.job_id is not None
        with KubernetesOptions.read(options).cluster() as cluster:
            return cluster.delete_job(*_where(record.job_id), uid=record.job_uid)

    def released(self, record: DecisionRecord, options: Mapping[str, object]) -> bool | None:
        """A release deletes the Job first (only the Job of the recorded uid)."""
        return self.cancel(record, options)

    # -- reconcile ------------------------------------------------------------------------------

    def reconcile(self, grants: Sequence[GrantRow], options: Mapping[str, object], runner: Runner) -> Seen:
        """The Jobs this layer created, in one list; the nodes (NotReady: down, cordoned: drained)."""
        with KubernetesOptions.read(options).cluster() as cluster:
            jobs = cluster.job_states()
            nodes = {n.name: "down" if not n.ready else "drained" if n.unschedulable else "up" for n in cluster.nodes()}
        seen: dict[str, JobSeen] = {}
        for g in grants:
            assert g.job_id is not None
            job = jobs.get(_where(g.job_id))
            if job is not None:
                seen[g.job_id] = JobSeen(job.state, job.ended, job.state == "active", job.started_at, job.ended_at, job.uid or None)
        return Seen(seen, nodes)
