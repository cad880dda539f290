"""Handing a placed decision to Slurm: ``sbatch`` with the pool's partition and GRES.

``slurm_request`` turns a decision record and its pool into the exact ``sbatch`` argument list:
the partition, ``--gres=gpu:<type>:<n>`` (or the GRES type of the granted slice for an honored
fraction, from ``gres.yaml``), ``--constraint`` from the requested capabilities that are node
features of the pool, a job name from the workload and a comment naming the decision. Every name
that reaches Slurm is checked first; arguments go to ``sbatch`` as a list, never through a shell.

A placement that names its nodes (``Placement.allocations``) is asked for exactly as granted, per
node (sbatch(1)): ``--nodes=N`` (a gang: N nodes, all or nothing), ``--nodelist`` (the granted
nodes, where the pool lists nodes by name), one task per node with ``--cpus-per-task`` (whole
CPUs: Slurm allocates no less), ``--mem`` in MiB per node, and per node ``--gres`` of the granted
devices, slices or shards (``shard:<type>:<k>``, Slurm's shared GPU GRES). Slurm picks the device
indices itself: no sbatch option names them, so a grant's indices are the layer's own account.

A workload's ``walltime`` is its time limit, ``--time`` in whole minutes (rounded up: Slurm counts
minutes); a workload without one that says its work (``work_class``, ``work``) is given its expected
run time on the grant (throughput.yaml) instead. ``grant_request`` builds the options for a grant whether or not it was recorded yet, so
the question "when would this start" (``test_only_argv``: ``sbatch --test-only``, which prints
Slurm's expected start) asks exactly what ``submit`` would ask.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from examlops_policy.executors.placed import live_placement
from examlops_policy.errors import ExecutorError, SpecError
from examlops_policy.executors.command import Runner, run_command
from examlops_policy.executors.gres import GresTable
from examlops_policy.model import Grant, NodeAllocation, Placement, Pool, Workload
from examlops_policy.views import DecisionRecord


TIMEOUT_S: Final = 60.0
SCHEDULER: Final = "slurm"
# Letters, digits, '.', '_', '-', starting with a letter or digit: nothing Slurm's option parser
# or a shell could read as syntax (',', ':', '&', '|', '=', spaces, quotes, control characters).
SAFE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
JOB_ID_RE: Final = re.compile(r"^\d+(?:_\d+)?$")


def safe_name(value: str | None, what: str) -> str:
    """``value`` when it is safe to pass to Slurm, else SpecError naming ``what``."""
    if value is None or not SAFE_RE.fullmatch(value):
        raise SpecError(
            f"{what} {value!r} is not safe for Slurm: use letters, digits, '.', '_' and '-' only, "
            "starting with a letter or digit",
            field=what,
        )
    return value


@dataclass(frozen=True)
class SlurmRequest:
    """One ``sbatch`` call for one decision."""

    decision_id: str
    partition: str
    job_name: str
    script: Path
    gres: str | None = None
    constraint: str | None = None
    cpus_per_task: int | None = None
    nodes: int | None = None
    nodelist: tuple[str, ...] = ()
    mem_mib: int | None = None
    time_min: int | None = None

    def options(self) -> list[str]:
        """What is asked of Slurm: partition, job name, time limit, nodes, CPUs, memory, GRES,
        constraints (everything but how to answer, the comment and the script)."""
        args = [f"--partition={self.partition}", f"--job-name={self.job_name}"]
        if self.time_min is not None:
            args.append(f"--time={self.time_min}")
        if self.nodes is not None:
            # Per node, as the grant holds it: one task on each node carrying the node's CPUs.
            args.append(f"--nodes={self.nodes}")
            if self.nodelist:
                args.append(f"--nodelist={','.join(self.nodelist)}")
            args.append("--ntasks-per-node=1")
            if self.cpus_per_task:
                args.append(f"--cpus-per-task={self.cpus_per_task}")
            if self.mem_mib:
                args.append(f"--mem={self.mem_mib}M")
            if self.gres:
                args.append(f"--gres={self.gres}")
        else:
            if self.gres:
                args.append(f"--gres={self.gres}")
            if self.cpus_per_task:
                args += ["--ntasks=1", f"--cpus-per-task={self.cpus_per_task}"]
        if self.constraint:
            args.append(f"--constraint={self.constraint}")
        return args

    def argv(self) -> list[str]:
        """The exact argument list given to ``sbatch``."""
        return ["sbatch", "--parsable", *self.options(), f"--comment=examlops-decision={self.decision_id}", str(self.script)]

    def test_only_argv(self) -> list[str]:
        """``sbatch --test-only`` with the same options: Slurm answers when and where the job would
        start, and submits nothing. The job script is not read (``--wrap``): its ``#SBATCH`` lines
        are unknown before submission, and the command line's options take precedence over them."""
        return ["sbatch", "--test-only", *self.options(), "--wrap=true"]

    def command_line(self) -> str:
        """``argv`` quoted for a POSIX shell, to read or copy (never run through one here)."""
        return shlex.join(self.argv())


def time_minutes(walltime_s: int | None) -> int | None:
    """A time limit in whole seconds as ``--time`` minutes, rounded up (Slurm counts minutes)."""
    return None if walltime_s is None else max(1, math.ceil(walltime_s / 60))


def time_limit_s(workload: Workload, grant: Grant, pool: Pool) -> int | None:
    """The job's time limit: its walltime; else, for a workload that says its work, its expected
    run time on this grant (work / the grant's throughput, throughput.yaml), rounded up; else none."""
    if workload.walltime is not None or workload.work is None:
        return workload.walltime
    from examlops_policy.tables import load_tables

    run_s = load_tables().run_s(workload.work_class, workload.work, pool.model, grant)
    return None if run_s is None else max(1, math.ceil(run_s))


def _script(path: Path) -> Path:
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise SpecError("no such job script (a regular file is needed)", source=str(path), field="--script")
    return resolved


def slurm_request(record: DecisionRecord, pool: Pool, script: Path, gres: GresTable) -> SlurmRequest:
    """The ``sbatch`` request for a placed, unreleased, not yet submitted decision on ``pool``."""
    decision = live_placement(record, pool, nothing="to submit")
    short = record.id[:12]
    if record.job_id is not None:
        raise SpecError(f"decision {short} was already submitted as job {record.job_id}", field="ID")
    _served_by_slurm(pool)
    return grant_request(decision.workload, decision.grant, decision.allocations, pool, gres,
                         decision_id=record.id, script=_script(script), what=f"decision {short}")  # fmt: skip


def _served_by_slurm(pool: Pool) -> str:
    """The pool's partition, checked; SpecError for a pool no Slurm partition serves."""
    if pool.target != "hpc" or pool.partition is None:
        raise SpecError(
            f"pool {pool.name!r} is not served by a Slurm partition (for cloud pools use 'exa hardware manifest')",
            field="partition",
        )
    return safe_name(pool.partition, "partition")


def grant_request(
    workload: Workload,
    grant: Grant,
    allocations: Sequence[NodeAllocation],
    pool: Pool,
    gres: GresTable,
    *,
    decision_id: str = "",
    script: Path = Path(),
    what: str = "the grant",
) -> SlurmRequest:
    """The ``sbatch`` request for ``grant`` of ``pool`` to ``workload`` (its ``allocations`` node
    by node where it names nodes): what ``submit`` asks for a decision, and what a start estimate
    asks before one is made. ``what`` names the grant in errors."""
    request = SlurmRequest(
        decision_id=decision_id,
        partition=_served_by_slurm(pool),
        job_name=safe_name(workload.name, "job name"),
        script=script,
        time_min=time_minutes(time_limit_s(workload, grant, pool)),
    )
    # Only features Slurm knows on the pool's nodes can be constraints; capabilities the model
    # guarantees (models.yaml) are already implied by the GRES type.
    features = [safe_name(c, "capability") for c in workload.capabilities if c in pool.capabilities]
    constraint = "&".join(features) or None
    if allocations:
        nodes = _node_request(workload.name, grant, allocations, pool, gres)
        return _replace(nodes, decision_id=request.decision_id, partition=request.partition, job_name=request.job_name,
                        script=request.script, constraint=constraint, time_min=request.time_min)  # fmt: skip
    if grant.per_node and pool.accelerator != "cpu":
        # What the grant asks of each node before nodes are chosen (a start estimate's question):
        # Slurm picks the nodes among the partition's.
        return _replace(_per_node_request(grant, pool, gres), decision_id=request.decision_id, partition=request.partition,
                        job_name=request.job_name, script=request.script, constraint=constraint, time_min=request.time_min)  # fmt: skip
    if pool.accelerator == "cpu":
        return _replace(request, cpus_per_task=max(1, int(grant.devices)), constraint=constraint)
    gres_type = safe_name(pool.gres_type, "gres type")
    if pool.fixed_profile is not None:
        # Fixed slices are their own GRES type: one unit per slice granted.
        return _replace(request, gres=f"gpu:{gres_type}:{grant.units}", constraint=constraint)
    if grant.honored and grant.profile is not None and grant.requested < 1:
        slice_type = safe_name(gres.slice_type(grant.scheme or "", gres_type, grant.profile), "slice gres type")
        return _replace(request, gres=f"gpu:{slice_type}:{workload.count}", constraint=constraint)
    devices = grant.devices
    if devices != int(devices) or devices < 1:
        raise SpecError(f"{what} holds {devices:g} devices; Slurm GRES counts are whole numbers")
    return _replace(request, gres=f"gpu:{gres_type}:{int(devices)}", constraint=constraint)


NODE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def _same_on_every_node(allocations: Sequence[NodeAllocation]) -> NodeAllocation:
    """The first allocation, when every node holds the same (a job asks the same of each node)."""

    def shape(a: NodeAllocation) -> tuple[object, ...]:
        return (sorted(h.profile or "" for h in a.holdings), a.share.shares if a.share else 0, a.cpu_milli, a.memory_mib)

    first = allocations[0]
    for other in allocations[1:]:
        if shape(other) != shape(first):
            raise SpecError(
                f"node {other.node} holds other devices, CPU or memory than node {first.node}: "
                "one Slurm job asks the same of every node it runs on",
                field="allocations",
            )
    return first


def node_request(decision: Placement, pool: Pool, gres: GresTable, *, script: Path | None = None) -> SlurmRequest:
    """The per-node part of the ``sbatch`` request for a placement that names its nodes: node
    count, node list (where the pool's nodes have names Slurm knows), CPUs, memory and GRES per
    node. SpecError for a grant Slurm cannot be asked for exactly (nodes holding different
    amounts, a fraction of a CPU, a node the pool does not have)."""
    request = _node_request(decision.workload.name, decision.grant, decision.allocations, pool, gres)
    return _replace(request, decision_id=decision.decision_id or "", script=script or Path())


def _node_request(job_name: str, grant: Grant, allocations: Sequence[NodeAllocation], pool: Pool, gres: GresTable) -> SlurmRequest:
    if not allocations:
        raise SpecError("the placement names no node", field="allocations")
    names = [a.node for a in allocations]
    if len(set(names)) != len(names):
        raise SpecError(f"a node is granted twice in one placement: {', '.join(names)}", field="allocations")
    known = {n.name for n in pool.node_list()} if pool.nodes_named else None
    for name in names:
        if not NODE_NAME_RE.fullmatch(name):
            raise SpecError(f"node name {name!r} is not safe for Slurm", field="allocations")
        if known is not None and name not in known:
            raise SpecError(f"node {name} is not a node of pool {pool.name}", field="allocations")
    each = _same_on_every_node(allocations)
    if each.cpu_milli % 1000:
        raise SpecError(
            f"the grant holds {each.cpu_milli / 1000:g} CPUs per node; Slurm allocates whole CPUs", field="allocations"
        )
    cpus = each.cpu_milli // 1000 or None
    gres_text: str | None = None
    if pool.accelerator == "cpu":
        # The devices of a cpu pool are its CPUs.
        cpus = max(cpus or 0, each.devices) or None
    elif each.share is not None:
        if pool.sharing is None:
            raise SpecError(f"pool {pool.name} is not shared, yet the grant holds a share of a device", field="allocations")
        gres_text = f"shard:{safe_name(pool.gres_type, 'gres type')}:{each.share.shares}"
    elif each.holdings:
        profiles = {h.profile for h in each.holdings}
        if len(profiles) != 1:
            raise SpecError("one node holds slices of several profiles; a job asks for one GRES type per node", field="allocations")
        profile = profiles.pop()
        gres_type = safe_name(pool.gres_type, "gres type")
        if profile is None or pool.fixed_profile is not None:
            gres_text = f"gpu:{gres_type}:{len(each.holdings)}"
        else:
            slice_type = safe_name(gres.slice_type(grant.scheme or "", gres_type, profile), "slice gres type")
            gres_text = f"gpu:{slice_type}:{len(each.holdings)}"
    return SlurmRequest(
        decision_id="",
        partition=safe_name(pool.partition, "partition"),
        job_name=safe_name(job_name, "job name"),
        script=Path(),
        gres=gres_text,
        cpus_per_task=cpus,
        nodes=len(allocations),
        nodelist=tuple(names) if pool.nodes_named else (),
        mem_mib=each.memory_mib or None,
    )


def _per_node_request(grant: Grant, pool: Pool, gres: GresTable) -> SlurmRequest:
    """A grant that asks something of each node (a gang, CPU, memory, a share), said per node
    without naming the nodes: ``--nodes=N`` and, on each, its GPUs (or shards), CPUs and memory."""
    gres_type = safe_name(pool.gres_type, "gres type")
    if grant.shares is not None:
        gres_text = f"shard:{gres_type}:{grant.shares}"
    elif grant.profile is None or pool.fixed_profile is not None:
        gres_text = f"gpu:{gres_type}:{grant.units}"
    else:
        gres_text = f"gpu:{safe_name(gres.slice_type(grant.scheme or '', gres_type, grant.profile), 'slice gres type')}:{grant.units}"
    return SlurmRequest(
        decision_id="", partition="", job_name="", script=Path(), gres=gres_text,
        cpus_per_task=-(-grant.cpu_milli // 1000) or None, nodes=grant.nodes, mem_mib=grant.memory_mib or None,
    )  # fmt: skip


def _replace(request: SlurmRequest, **changes: object) -> SlurmRequest:
    import dataclasses

    return dataclasses.replace(request, **changes)  # type: ignore[arg-type]


def submit(request: SlurmRequest, runner: Runner = run_command) -> str:
    """Run ``sbatch`` and return the job id; ExecutorError with Slurm's reason when it refuses."""
    result = runner(request.argv(), timeout=TIMEOUT_S)
    if not result.ok:
        raise ExecutorError(f"sbatch refused the job: {result.reason()}")
    job_id = result.stdout.strip().split(";", 1)[0]
    if not JOB_ID_RE.fullmatch(job_id):
        raise ExecutorError(f"sbatch answered without a job id: {result.stdout.strip()[:200]!r}")
    return job_id


@dataclass(frozen=True)
class SlurmJob:
    """A job as ``scontrol show job`` reports it."""

    job_id: str
    state: str
    partition: str | None
    gres: tuple[str, ...]
    fields: dict[str, str]

    @property
    def finished(self) -> bool:
        return self.state not in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


def job(job_id: str, runner: Runner = run_command) -> SlurmJob:
    """State and allocated GRES of a job (kept by slurmctld for MinJobAge after it ends)."""
    if not JOB_ID_RE.fullmatch(job_id):
        raise SpecError(f"not a Slurm job id: {job_id!r}", field="job id")
    result = runner(["scontrol", "-o", "-d", "show", "job", job_id], timeout=TIMEOUT_S)
    if not result.ok:
        raise ExecutorError(f"scontrol show job {job_id} failed: {result.reason()}")
    fields: dict[str, str] = {}
    gres: list[str] = []
    for token in result.stdout.split():
        key, sep, value = token.partition("=")
        if not sep:
            continue
        if key == "GRES" and value:  # per node with -d: gpu:mi300x:2(IDX:0-1)
            gres.append(value)
        fields.setdefault(key, value)
    return SlurmJob(job_id, fields.get("JobState", "UNKNOWN"), fields.get("Partition"), tuple(gres), fields)


# -- reading jobs and nodes back (reconcile) -------------------------------------------------------

# Job states that end a job (squeue --states=all shows them for MinJobAge after the end; sacct
# keeps them where accounting is configured).
ENDED_STATES: Final = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
)
RUNNING_STATES: Final = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESIZING"})


@dataclass(frozen=True)
class JobState:
    """A job as Slurm reports it: its state (the word before any ``+`` or ``by``), when it started
    and ended (UTC, ISO 8601; None when not yet), and the nodes it runs on."""

    job_id: str
    state: str
    started_at: str | None
    ended_at: str | None
    nodes: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES


def slurm_time(text: str) -> str | None:
    """A time squeue or sacct prints (the local time of this host, no offset) as UTC ISO 8601;
    None for ``N/A``, ``Unknown``, ``None`` or empty."""
    from datetime import datetime, timezone

    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local time it was printed in
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _state_word(text: str) -> str:
    return text.strip().split()[0].split("+")[0].upper() if text.strip() else "UNKNOWN"


def queue_states(runner: Runner = run_command) -> dict[str, JobState]:
    """Every job slurmctld holds (pending, running, and ended ones for MinJobAge), by id:
    ``squeue --states=all`` (``%S`` is a start only once a job runs: an estimate while pending)."""
    result = runner(["squeue", "--noheader", "--all", "--states=all", "--format=%i|%T|%S|%e|%N"], timeout=TIMEOUT_S)
    if not result.ok:
        raise ExecutorError(f"squeue failed: {result.reason()}")
    out: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or not JOB_ID_RE.fullmatch(parts[0].strip()):
            continue
        state = _state_word(parts[1])
        started = slurm_time(parts[2]) if state in RUNNING_STATES or state in ENDED_STATES else None
        ended = slurm_time(parts[3]) if state in ENDED_STATES else None
        out[parts[0].strip()] = JobState(parts[0].strip(), state, started, ended, parts[4].strip())
    return out


def accounting_states(job_ids: Sequence[str], runner: Runner = run_command) -> dict[str, JobState] | None:
    """What Slurm's accounting says of jobs slurmctld no longer holds; None where accounting is not
    configured (or cannot be read)."""
    ids = [j for j in job_ids if JOB_ID_RE.fullmatch(j)]
    if not ids:
        return {}
    try:
        result = runner(
            ["sacct", "--noheader", "--parsable2", "-X", f"--jobs={','.join(ids)}", "--format=JobIDRaw,State,Start,End,ExitCode"], timeout=TIMEOUT_S
        )
    except ExecutorError:
        return None
    if not result.ok:
        return None
    out: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or parts[0] not in ids:
            continue
        state = _state_word(parts[1])
        out[parts[0]] = JobState(parts[0], state, slurm_time(parts[2]), slurm_time(parts[3]) if state in ENDED_STATES else None)
    return out


def node_states(runner: Runner = run_command) -> dict[str, str]:
    """Every node's state as this layer names them (``sinfo --Node``): ``up`` (idle, mixed,
    allocated, completing), ``drained`` (drain, draining, drained) or ``down`` (down, fail, inval,
    and any state Slurm marks not responding with ``*``)."""
    result = runner(["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"], timeout=TIMEOUT_S)
    if not result.ok:
        raise ExecutorError(f"sinfo failed: {result.reason()}")
    out: dict[str, str] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        out[parts[0]] = node_state(parts[1])
    return out


def node_state(text: str) -> str:
    word = text.strip().lower()
    if word.endswith("*") or word.startswith(("down", "fail", "not_responding", "inval")):
        return "down"
    if word.startswith("drain") or "drain" in word:
        return "drained"
    return "up"
