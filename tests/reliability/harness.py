"""Concurrent placers on a shared fleet, and the invariants their records must keep.

Used by the reliability tests and by benchmarks/reliability.py. Placers are separate processes
(multiprocessing, spawn), each with its own store connection, all asking one real OPA server.
After a run, `violations` checks the stored state against itself and against what the placers
were told:

- replaying the audit chain in seq order, no pool ever holds more devices than its count;
- every decision has exactly one ``decision`` audit entry and every such entry a decision; a
  placed decision holds exactly one allocation, any other none; releases match their entries;
- the live allocations equal the replay's final holdings, pool by pool;
- the chain verifies (and SQLite's integrity_check passes);
- the decisions stored are exactly those placers were handed: none lost, none extra;
- node by node (a node a pool names is one node whatever pools list it): no device is held
  whole twice, or whole beside a slice or a share; no device's slices or shares add up to more
  than the device; no node's live grants hold more CPU or memory than it has.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from examlops_policy import audit
from examlops_policy._core.state import state_of
from examlops_policy.errors import ExaError
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Pool, Workload
from examlops_policy.opa import ensure_server

from reliability.backends import Backend

FLEET = (
    Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5, carbon_factor=300, supports_fractions=True),
    Pool("hpc-mi300", "hpc", "amd", 4, "eu"),
    Pool("cloud-a100", "cloud", "nvidia", 16, "us"),
)
# A mix that fills the fleet: whole and fractional devices, fallbacks, an allowed and a blocked
# burst, and a pairing the policy never allows.
WORKLOADS = (
    Workload("train-amd", accelerator="amd", engine="vllm", target="hpc"),
    Workload("infer-half", accelerator="nvidia", engine="vllm", fraction=0.5, target="hpc"),
    Workload("train-nvidia", accelerator="nvidia", engine="vllm", count=2),
    Workload("burst-open", accelerator="nvidia", target="cloud", allow_burst=True),
    Workload("burst-eu", accelerator="nvidia", target="cloud", residency="eu-only", allow_burst=True),
    Workload("sglang-amd", accelerator="amd", engine="sglang"),
)
TOLERANCE = 1e-6
# Audit entry kinds that free a placement's devices: a release, a lease that ended, a grant
# preempted, a job that ended (reconcile).
RELEASES = frozenset({"release", "expired", "preempted", "job_ended"})
SPAWN = multiprocessing.get_context("spawn")


@dataclass
class PlacerReport:
    """What one placer was told: decision ids by outcome, releases, and errors by type."""

    placed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # rejected or blocked: recorded, nothing held
    released: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    ok_after_last_error: int = 0
    seconds: float = 0.0
    conflicts_retried: int = 0
    reconnects: int = 0


@dataclass(frozen=True)
class PlacerJob:
    backend: Backend
    opa_home: str
    seed: int
    count: int
    release_ratio: float
    out: str


@dataclass
class LoadRun:
    """A finished run: every placer's report and the wall time from the common start."""

    backend: Backend
    reports: list[PlacerReport]
    seconds: float

    @property
    def calls(self) -> int:
        return sum(len(r.placed) + len(r.refused) for r in self.reports)

    @property
    def errors(self) -> Counter[str]:
        return sum((Counter(r.errors) for r in self.reports), Counter())

    @property
    def conflicts_retried(self) -> int:
        return sum(r.conflicts_retried for r in self.reports)

    @property
    def reconnects(self) -> int:
        return sum(r.reconnects for r in self.reports)


def open_hardware(backend: Backend, opa_home: str | Path, **options: Any) -> Hardware:
    """The product's orchestrator on ``backend`` and the managed OPA of ``opa_home``."""
    home = Path(opa_home)
    return Hardware(home, store=backend.open(**options), policy=ManagedPolicy(home))


def place_loop(job: PlacerJob, start: Barrier) -> None:
    """A placer process: ``job.count`` placements, releasing some; the report goes to ``job.out``."""
    hw = open_hardware(job.backend, job.opa_home)
    rng = random.Random(job.seed)
    report, live = PlacerReport(), []
    start.wait(120)  # every placer connected, then all start at once
    began = time.monotonic()
    for _ in range(job.count):
        try:
            record = hw.place(rng.choice(WORKLOADS))
            (report.placed if record.decision.ok else report.refused).append(record.id)
            if record.decision.ok:
                live.append(record.id)
            if live and rng.random() < job.release_ratio:
                ident = live.pop(rng.randrange(len(live)))
                hw.release(ident)
                report.released.append(ident)
            report.ok_after_last_error += 1
        except ExaError as exc:
            name = type(exc).__name__
            report.errors[name] = report.errors.get(name, 0) + 1
            if len(report.error_samples) < 3:
                report.error_samples.append(f"{name}: {exc}")
            report.ok_after_last_error = 0
    report.seconds = time.monotonic() - began
    report.conflicts_retried = hw.store.conflicts_retried  # type: ignore[attr-defined]
    report.reconnects = hw.store.reconnects  # type: ignore[attr-defined]
    hw.close()
    tmp = Path(job.out + ".tmp")
    tmp.write_text(json.dumps(asdict(report)), encoding="utf-8")
    tmp.replace(job.out)


def prepare(backend: Backend, opa_home: Path) -> None:
    """Register the fleet and make sure the shared OPA runs before placers start."""
    ensure_server(opa_home)
    hw = open_hardware(backend, opa_home)
    hw.apply(FLEET)
    hw.close()


def run_load(
    backend: Backend,
    opa_home: Path,
    workdir: Path,
    *,
    procs: int,
    per_proc: int,
    release_ratio: float = 0.5,
    during: Callable[[], None] | None = None,
    timeout_s: float = 600,
) -> LoadRun:
    """``procs`` placer processes x ``per_proc`` placements on the fleet, started together.

    ``during`` runs in this process once all placers have started (to inject a fault).
    """
    prepare(backend, opa_home)
    start = SPAWN.Barrier(procs + 1)
    jobs = [
        PlacerJob(backend, str(opa_home), seed=i, count=per_proc, release_ratio=release_ratio, out=str(workdir / f"placer-{i}.json"))
        for i in range(procs)
    ]
    workers = [SPAWN.Process(target=place_loop, args=(job, start), daemon=True) for job in jobs]
    for worker in workers:
        worker.start()
    start.wait(120)
    began = time.monotonic()
    try:
        if during is not None:
            during()
        deadline = began + timeout_s
        for worker in workers:
            worker.join(max(1.0, deadline - time.monotonic()))
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
    seconds = time.monotonic() - began
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    if failed:
        raise AssertionError(f"placer processes failed with exit codes {failed}")
    reports = [PlacerReport(**json.loads(Path(job.out).read_text(encoding="utf-8"))) for job in jobs]
    return LoadRun(backend, reports, seconds)


def wait_for_decisions(backend: Backend, at_least: int, timeout_s: float = 120) -> None:
    """Block until ``at_least`` decisions are stored (a point in the middle of a run)."""
    deadline = time.monotonic() + timeout_s
    while backend.count("decisions") < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {at_least} decisions after {timeout_s}s")
        time.sleep(0.05)


def opa_pid(opa_home: Path) -> int:
    """The pid recorded for the managed OPA server of ``opa_home``."""
    return int(json.loads((opa_home / "opa" / "server.json").read_text(encoding="utf-8"))["opa"]["pid"])


def kill_opa(opa_home: Path, sig: int = signal.SIGKILL) -> int:
    """Signal the managed OPA server of ``opa_home`` and reap it if it is our child; its pid.

    Reaping matters: an unreaped zombie still looks alive to the launcher.
    """
    pid = opa_pid(opa_home)
    os.kill(pid, sig)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return pid


# -- invariants ------------------------------------------------------------------------------


def _entries(rows: Iterable[audit.AuditRow]) -> list[dict[str, Any]]:
    return [json.loads(row.canonical) for row in rows]


def violations(backend: Backend, reports: Sequence[PlacerReport] | None = None) -> list[str]:
    """Every broken invariant of the stored state (see the module docstring); [] when sound."""
    found: list[str] = []
    store = backend.open()
    try:
        rows = store.audit_rows()
        report = audit.verify_chain(rows)
        found += [f"audit chain: seq {p.seq} {p.kind}: {p.message}" for p in report.problems]
        with backend.raw() as db:
            decisions = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, outcome, released_at FROM decisions").fetchall()}
            admitted_twice = db.execute(
                "SELECT queued_id, count(*) FROM decisions WHERE queued_id IS NOT NULL GROUP BY queued_id HAVING count(*) > 1"
            ).fetchall()
            found += [f"queued record {q} admitted {n} times" for q, n in admitted_twice]
            allocations = {
                r[0]: (r[1], float(r[2]), r[3])
                for r in db.execute("SELECT decision_id, pool, devices, released_at FROM allocations").fetchall()
            }
            if backend.name == "sqlite":
                check = db.execute("PRAGMA integrity_check").fetchone()[0]
                if check != "ok":
                    found.append(f"sqlite integrity_check: {check}")
            holdings = db.execute(
                "SELECT h.pool, h.node, h.device, h.profile, h.share, h.shares FROM holdings h "
                "JOIN allocations a ON a.decision_id = h.decision_id WHERE a.released_at IS NULL"
            ).fetchall()
            node_grants = db.execute(
                "SELECT g.pool, g.node, g.cpu_milli, g.memory_mib FROM node_grants g "
                "JOIN allocations a ON a.decision_id = g.decision_id WHERE a.released_at IS NULL"
            ).fetchall()
        states = list(map(state_of, store.rows().pools))
        found += node_violations({s.pool.name: s.pool for s in states}, holdings, node_grants)
        # A node-tracked pool's devices free leave out nodes that are not up: count what is held.
        held_live: dict[str, float] = {}
        for ident, (pool_name, amount, released) in allocations.items():
            if released is None:
                held_live[pool_name] = held_live.get(pool_name, 0.0) + amount
        live = {s.pool.name: (held_live.get(s.pool.name, 0.0) if s.pool.node_tracked else s.pool.count - s.free) for s in states}
    finally:
        store.close()

    counts: dict[str, int] = {}
    held: dict[str, float] = {}
    devices: dict[str, tuple[str, float]] = {}
    entries: Counter[str] = Counter()
    releases: Counter[str] = Counter()
    for seq, entry in enumerate(_entries(rows), start=1):
        kind = entry["kind"]
        if kind == "pool":
            counts[entry["pool"]["name"]] = int(entry["pool"]["count"])
        elif kind == "decision":
            ident = entry["decision_id"]
            entries[ident] += 1
            if entry["outcome"] == "placed":
                pool, amount = entry["pool"], float(entry["devices"])
                devices[ident] = (pool, amount)
                held[pool] = held.get(pool, 0.0) + amount
                if held[pool] > counts.get(pool, 0) + TOLERANCE:
                    found.append(f"seq {seq}: pool {pool} holds {held[pool]:g} of {counts.get(pool, 0)} devices")
        elif kind in RELEASES:
            ident = entry["decision_id"]
            releases[ident] += 1
            if ident not in devices or releases[ident] > 1:
                found.append(f"seq {seq}: release of {ident} that holds nothing (or released twice)")
            else:
                pool, amount = devices[ident]
                held[pool] -= amount

    for ident, (outcome, released_at) in decisions.items():
        if entries[ident] != 1:
            found.append(f"decision {ident} has {entries[ident]} decision audit entries")
        allocation = allocations.get(ident)
        if outcome == "placed" and allocation is None:
            found.append(f"placed decision {ident} holds no allocation")
        if outcome != "placed" and allocation is not None:
            found.append(f"{outcome} decision {ident} holds an allocation")
        if allocation is not None and (allocation[2] is None) != (released_at is None):
            found.append(f"decision {ident}: allocation and decision disagree on release")
        if (released_at is not None) != (releases[ident] == 1):
            found.append(f"decision {ident}: released_at and release audit entries disagree")
    found += [f"audit entry for unknown decision {i}" for i in entries if i not in decisions]
    found += [f"allocation for unknown decision {i}" for i in allocations if i not in decisions]
    for pool in counts:
        if abs(live.get(pool, 0.0) - held.get(pool, 0.0)) > TOLERANCE:
            found.append(f"pool {pool}: {live.get(pool, 0.0):g} held live, the audit replay says {held.get(pool, 0.0):g}")

    if reports is not None:
        told = [i for r in reports for i in (*r.placed, *r.refused)]
        if len(told) != len(set(told)):
            found.append("a decision id was handed out twice")
        lost = set(told) - set(decisions)
        extra = set(decisions) - set(told)
        found += [f"decision {i} was reported to a placer but is not stored (lost)" for i in sorted(lost)]
        found += [f"decision {i} is stored but no placer was told of it" for i in sorted(extra)]
        for r in reports:
            found += [f"decision {i} reported placed, stored {decisions[i][0]}" for i in r.placed if i in decisions and decisions[i][0] != "placed"]
            found += [f"decision {i} reported released, stored unreleased" for i in r.released if i in decisions and decisions[i][1] is None]
    return found


def node_violations(pools: dict[str, Pool], holdings: Sequence[Sequence[Any]], node_grants: Sequence[Sequence[Any]]) -> list[str]:
    """What live holdings (pool, node, device, profile, share, shares) and node grants (pool, node,
    cpu_milli, memory_mib) hold twice, node by node. A node a pool names is the same node in every
    pool naming it (its devices the same devices where the pools' accelerator, model and scheduler
    resource are the same); a node a pool only counts is its own."""
    found: list[str] = []

    def key(pool: str, node: str) -> tuple[str, str]:
        p = pools.get(pool)
        return ("", node) if p is not None and p.nodes_named else (pool, node)

    def kind(pool: str) -> str:
        p = pools.get(pool)
        return repr((p.accelerator, p.model, p.gres_type, p.fixed_profile)) if p is not None else pool

    sizes: dict[tuple[str, str], tuple[int, int | None, int | None, int | None]] = {}
    devices: dict[tuple[str, str, str], int] = {}  # a node's devices of one kind (a CPU pool's: its cores)
    for p in pools.values():
        for n in p.node_list():
            sizes[key(p.name, n.name)] = (n.devices, n.cpu_milli, n.memory_mib, p.shares_per_device)
            devices[(*key(p.name, n.name), kind(p.name))] = n.devices
    per_device: dict[tuple[str, str, str, int], list[tuple[str | None, float, int | None]]] = {}
    for pool, node, device, profile, share, shares in holdings:
        k = key(str(pool), str(node))
        count = devices.get((*k, kind(str(pool))))
        if count is not None and not 0 <= int(device) < count:
            found.append(f"node {node}: device {device} beyond its {count} devices")
        per_device.setdefault((*k, kind(str(pool)), int(device)), []).append((profile, float(share), None if shares is None else int(shares)))
    for (_, node, _, device), held in sorted(per_device.items()):
        whole = [h for h in held if h[0] is None and h[2] is None]
        if whole and len(held) > 1:
            found.append(f"node {node}: device {device} held whole and {len(held) - 1} more time(s)")
        if sum(h[1] for h in held if h[0] is not None) > 1 + TOLERANCE:
            found.append(f"node {node}: device {device} holds slices of more than a device")
        shared = [h for h in held if h[2] is not None]
        if shared and len(shared) < len(held):
            found.append(f"node {node}: device {device} shared beside a whole device or a slice")
        if shared and sum(h[1] for h in shared) > 1 + TOLERANCE:
            found.append(f"node {node}: device {device} shared beyond its shares")
    cpu: dict[tuple[str, str], int] = {}
    memory: dict[tuple[str, str], int] = {}
    for pool, node, cpu_milli, memory_mib in node_grants:
        k = key(str(pool), str(node))
        cpu[k] = cpu.get(k, 0) + int(cpu_milli)
        memory[k] = memory.get(k, 0) + int(memory_mib)
    for k, used in sorted(cpu.items()):
        total = sizes.get(k, (0, None, None, None))[1]
        if total is not None and used > total:
            found.append(f"node {k[1]}: grants hold {used} CPU milli of {total}")
    for k, used in sorted(memory.items()):
        total = sizes.get(k, (0, None, None, None))[2]
        if total is not None and used > total:
            found.append(f"node {k[1]}: grants hold {used} MiB of {total}")
    return found


# -- placers that die ------------------------------------------------------------------------


def hang_inside_transaction(backend: Backend, opa_home: str, complete: int, inside: Any) -> None:
    """Place ``complete`` bursts, then stop inside the next one's transaction and wait to be killed.

    It stops after the decision, allocation, burst event and burst audit entry are written and
    before the decision's audit entry: the most a crash can leave half-done.
    """
    hw = open_hardware(backend, opa_home)
    store: Any = hw.store
    append = store._append_audit
    done = 0

    def append_or_hang(kind: str, body: Any, *, source: str) -> None:
        if kind == "decision" and done == complete:
            inside.set()
            time.sleep(600)
        append(kind, body, source=source)

    store._append_audit = append_or_hang
    while True:
        hw.place(WORKLOADS[3])
        done += 1


def admit_until_killed(backend: Backend, opa_home: str, started: Any) -> None:
    """Urgent work queued (``place --queue`` preempts for it at once: marking, releasing and
    placing the victim again), then admission passes one after another, until killed."""
    from examlops_policy.model import Workload

    hw = open_hardware(backend, opa_home)
    started.set()
    hw.place(Workload("boss", "nvidia", count=2, priority="high", spot="require"), queue=True)
    while True:
        hw.admit()


def place_forever(backend: Backend, opa_home: str, out: str, started: Any) -> None:
    """Place and release until killed, appending each decision id to ``out`` once it is returned."""
    hw = open_hardware(backend, opa_home)
    rng = random.Random()
    with open(out, "a", encoding="utf-8", buffering=1) as told:
        while True:
            record = hw.place(rng.choice(WORKLOADS))
            told.write(record.id + "\n")
            started.set()
            if record.decision.ok and rng.random() < 0.5:
                hw.release(record.id)
