"""Reconcile with the schedulers: what Slurm and Kubernetes say of this layer's jobs and of their
nodes, written back (``Hardware.reconcile``, ``exa hardware reconcile``, every ``serve`` step).

For every live placement with a job, in one read per scheduler: a job that ended (completed,
failed, cancelled, timed out, deleted: Slurm ``squeue --states=all``, then ``sacct`` for jobs
slurmctld no longer holds; the Kubernetes Jobs this layer created, in one list) releases its grant
with the job's end state and times; a job that runs gets its actual start recorded (once). A node a
scheduler reports drained, down, cordoned or NotReady takes its devices out of its pools' capacity
(its state in every pool that lists it, as discovery sets it: ``commit.reconcile_node``), and gives
them back when it is up; grants on a node that went down are flagged (not released: the
scheduler decides whether their jobs died). Each change is one audited transaction, written only
when it differs from what is stored: a run with no change writes nothing. A scheduler that cannot
be read changes nothing of its own and does not stop the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from examlops_policy._core import commit
from examlops_policy.app import schedulers
from examlops_policy.app.cycle import SOURCE
from examlops_policy.errors import ExaError, ExecutorError
from examlops_policy.executors.command import Runner, run_command
from examlops_policy.store.api import GrantRow
from examlops_policy.views import ReconcileChange, ReconcileReport

if TYPE_CHECKING:
    from examlops_policy.app.ports import Scheduler, State
    from examlops_policy.app.queue import Queue
    from examlops_policy.views import AdmissionReport


def reconcile(
    st: State, *, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, runner: Runner | None = None,
    read: Mapping[str, Mapping[str, object]] | None = None,
) -> ReconcileReport:
    """Read the schedulers and write what changed. ``read`` names the registered schedulers to read
    (jobs and nodes), each with its options; ``slurm`` (True: read it, False: not) and
    ``kubernetes`` (kubeconfig, context) add to it. Nothing named: each scheduler live grants were
    submitted to is read (its jobs and its nodes), Kubernetes through the default kubeconfig.
    ``runner``: how a scheduler's commands are run."""
    runner = runner or run_command
    grants = st.store.live_grants(with_jobs=True)
    by_scheduler: dict[str, list[GrantRow]] = {}
    for g in grants:
        by_scheduler.setdefault(g.scheduler or schedulers.UNRECORDED, []).append(g)  # only registered schedulers are read
    named = dict(read or {})
    if slurm:
        named.setdefault("slurm", {})
    if kubernetes is not None:
        named.setdefault("kubernetes", kubernetes)
    # None of them named (slurm=False names none to read): those live grants were submitted to.
    chosen = named if named or slurm is not None else {name: {} for name in by_scheduler}
    changes: list[ReconcileChange] = []
    unreadable: list[tuple[str, str]] = []
    for name in schedulers.SCHEDULERS:  # in the registry's order; an adapter is made only when read
        if name not in chosen:
            continue
        try:
            changes += _read(st, schedulers.SCHEDULERS[name], by_scheduler.get(name, []), chosen[name], runner)
        except ExaError as exc:
            unreadable.append((name, str(exc)))
    return ReconcileReport(tuple(changes), tuple(unreadable), len(grants))


def _read(st: State, scheduler: Scheduler, grants: Sequence[GrantRow], options: Mapping[str, object], runner: Runner) -> list[ReconcileChange]:
    """One scheduler's jobs and nodes, read once (``Scheduler.reconcile``), written back."""
    seen = scheduler.reconcile(grants, options, runner)
    name = scheduler.name
    changes: list[ReconcileChange] = []
    for g in grants:
        assert g.job_id is not None
        job = seen.jobs.get(g.job_id)
        if job is None or (g.job_uid and job.uid and job.uid != g.job_uid):
            changes += _ended(st, g, "missing", g.job_started_at, None, name)
        elif job.ended:
            changes += _ended(st, g, job.state, job.started_at, job.ended_at, name)
        elif job.running and job.started_at and g.job_started_at is None:
            changes += _started(st, g, job.started_at, name)
    # Nodes: the pools it serves, that name their nodes.
    changes += _nodes(st, seen.nodes, name, lambda state: scheduler.serves(state.pool))
    return changes


# -- the writes ----------------------------------------------------------------------------------------


def _ended(st: State, g: GrantRow, state: str, started: str | None, ended: str | None, scheduler: str) -> list[ReconcileChange]:
    assert g.job_id is not None
    if not commit.end_job(st.store, st.capacities, g.id, g.job_id, state, started, ended, scheduler=scheduler, source=SOURCE):
        return []
    text = f"{scheduler} job {g.job_id} of decision {g.id[:12]} ended ({state}): released {g.devices:g} {g.accelerator} on {g.pool}"
    return [ReconcileChange("ended", scheduler, g.id, g.job_id, state, g.pool, None, started, ended, text)]


def _started(st: State, g: GrantRow, at: str, scheduler: str) -> list[ReconcileChange]:
    assert g.job_id is not None
    if not commit.start_job(st.store, g.id, g.job_id, at, scheduler=scheduler, source=SOURCE):
        return []
    return [ReconcileChange("started", scheduler, g.id, g.job_id, "running", g.pool, None, at, None,
                            f"{scheduler} job {g.job_id} of decision {g.id[:12]} started at {at}")]  # fmt: skip


def _nodes(st: State, observed: Mapping[str, str], scheduler: str, serves: object) -> list[ReconcileChange]:
    """Set each node whose state, as its scheduler reports it, differs from the one the pools
    listing it record (``commit.reconcile_node``: in every pool that lists it at once); nothing is
    written when none differs."""
    wanted: dict[str, str] = {}
    for pool in st.snapshot().states:
        if not callable(serves) or not serves(pool):
            continue
        for node in pool.pool.node_list():
            seen = observed.get(node.name)
            if seen is not None and seen != node.state:  # None: the scheduler does not report it
                wanted.setdefault(node.name, seen)
    changes: list[ReconcileChange] = []
    for name, seen in sorted(wanted.items()):
        pools, flagged = commit.reconcile_node(st.store, st.capacities, name, seen, scheduler=scheduler, source=SOURCE)
        if not pools:
            continue
        text = f"{scheduler} node {name} of pool{'s' if len(pools) > 1 else ''} {', '.join(pools)}: {seen}" + (
            f"; grants on it flagged: {', '.join(f[:12] for f in flagged)}" if flagged and seen == "down" else ""
        )
        kind = "node_up" if seen == "up" else "node_down" if seen == "down" else "node"
        changes.append(ReconcileChange(kind, scheduler, None, None, seen, pools[0], name, text=text))
    return changes


def reconcile_and_admit(
    q: Queue, *, slurm: bool | None = None, kubernetes: Mapping[str, str | None] | None = None, admit: bool = True
) -> tuple[ReconcileReport, AdmissionReport | None]:
    """``reconcile`` over the queue's state (``Hardware.reconcile``): each change one audited
    transaction; a run with no change writes nothing. With ``admit``, capacity freed (a job ended,
    a node came back) is offered to the queue at once. A scheduler that could not be read is in
    ``ReconcileReport.unreadable`` (the others' changes are written)."""
    from examlops_policy.app import queue

    report = reconcile(q.cycle, slurm=slurm, kubernetes=kubernetes)
    admitted = None
    if admit and freed(report):
        admitted, _ = queue.offer_freed(q)
    return report, admitted


def freed(report: ReconcileReport) -> bool:
    """Whether what reconcile wrote may have freed capacity (a job ended, a node came back)."""
    return any(c.kind in ("ended", "node_up") for c in report.changes)


def executor_error(report: ReconcileReport) -> ExecutorError | None:
    if not report.unreadable:
        return None
    return ExecutorError("; ".join(f"{name}: {why}" for name, why in report.unreadable))
