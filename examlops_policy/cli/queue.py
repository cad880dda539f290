"""``exa hardware queue|admit|cancel|quotas``: workloads that wait for capacity, and the quotas.

* ``queue`` lists the waiting workloads in the order the policy offers them capacity (position,
  project, priority, age, what they ask, what they wait for, the order's reason); ``--all`` adds
  the admitted, cancelled and failed ones.
* ``admit`` offers the queue capacity now (what ``serve`` does every interval, and every release).
* ``cancel ID`` takes a waiting workload out of the queue.
* ``quotas`` shows use against quota per project and accelerator class.
* ``reconcile`` reads the schedulers (Slurm, Kubernetes) and writes back what changed: jobs that
  ended release their grants, jobs that run get their start, nodes not taking work leave capacity.
* ``serve`` reconciles, expires leases and admits, every interval, until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from examlops_policy.cli import args as types
from examlops_policy.cli import exits, render
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console, Text
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.views import AdmissionReport, QueueEntry, ReconcileChange, queue_entry_json


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def entry_json(e: QueueEntry) -> dict[str, object]:
    return dict(queue_entry_json(e))


def cmd_queue(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    listing = hw.queue(every=args.all)
    if args.json:
        render.dump_json(console, {"entries": [entry_json(e) for e in listing.entries], "projects": listing.projects})
        return exits.OK
    if not listing.entries:
        console.print("The queue is empty.")
        return exits.OK
    rows: list[list[render.Cell]] = []
    for e in listing.entries:
        if e.state == "queued":
            where = str(e.position) if e.position is not None else Text("invalid", style="red")
            waits = render.waits_text(dict(e.waits_for))
            why = e.order_reason or "; ".join(e.invalid)
            if e.preemption:
                why = f"{why}; not preempting: {e.preemption}" if why else f"not preempting: {e.preemption}"
        else:
            where = Text(e.state, style="green" if e.state == "admitted" else "red")
            waits = "-"
            why = f"by decision {e.admitted_by[:12]}" if e.admitted_by else (e.message or "")
        asks = render.devices_text(e.devices, e.accelerator)
        rows.append([where, e.id[:12], e.workload, e.project or "-", e.priority or "-", age_text(e.waited_s), asks, waits, why])
    columns = ("position", "id", "workload", "project", "priority", "age", "asks", "waits for", "order")
    render.emit_table(console, "Queue", columns, rows)
    for e in listing.entries:
        if e.reservation:  # the capacity later work of its class or below is held back from
            console.print(f"reserved: {e.workload} ({e.id[:12]}) {e.reservation}")
    return exits.OK


def report_json(report: AdmissionReport) -> dict[str, object]:
    return {
        "admitted": [dataclasses.asdict(a) for a in report.admitted],
        "failed": [entry_json(e) for e in report.failed],
        "waiting": report.waiting,
        "policy_revision": report.revision,
        "not_preempted": [{"id": i, "workload": w, "why": why} for i, w, why in report.not_preempted],
    }


def print_admission(console: Console, report: AdmissionReport, *, quiet_when_empty: bool = False) -> None:
    for a in report.admitted:
        line = f"✓ admitted {a.workload} (queued {a.queued_id[:12]}) → pool {a.pool} · decision {a.decision_id[:12]}"
        if a.job_id:
            line += f" · {a.scheduler} job {a.job_id}"
        if a.preempted:
            line += f" · preempted {', '.join(v[:12] for v in a.preempted)}"
        console.print(Text(line, style="green"))
        if a.submit_error:
            console.print(Text(f"  not submitted yet: {a.submit_error}", style="yellow"))
    for e in report.failed:
        console.print(Text(f"✗ failed {e.workload} (queued {e.id[:12]}): {e.message}", style="red"))
    for ident, workload, why in report.not_preempted:
        console.print(Text(f"  {workload} (queued {ident[:12]}) waits, not preempting: {why}", style="yellow"))
    if report.admitted or report.failed or not quiet_when_empty:
        console.print(f"{report.waiting} waiting" if report.waiting else "nothing waiting")


def cmd_admit(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    report = hw.admit(limit=args.max)
    if args.json:
        render.dump_json(console, report_json(report))
    else:
        print_admission(console, report)
    return exits.OK


def cmd_cancel(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    done = hw.cancel(args.id)
    e = done.entry
    if args.json:
        render.dump_json(console, {**entry_json(e), "already_cancelled": done.already})
    elif done.already:
        console.print(f"queued workload {e.id[:12]} ({e.workload}) was already cancelled at {e.ended_at}; nothing changed")
    else:
        console.print(f"✓ cancelled queued workload {e.id[:12]} ({e.workload})")
    return exits.OK


def cmd_quotas(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    rows = hw.quotas()
    if args.json:
        render.dump_json(console, [dataclasses.asdict(r) for r in rows])
        return exits.OK
    if not rows:
        console.print("No quotas (policies/examlops/tables/quotas.yaml lists none).")
        return exits.OK
    table = []
    for r in rows:
        table.append([
            r.project, r.accelerator, render.number(r.held), "-" if r.nominal is None else render.number(r.nominal),
            render.number(r.borrowed), "-" if r.room is None else render.number(r.room),
            "-" if r.device_hours_quota is None else f"{render.number(r.device_hours)} of {render.number(r.device_hours_quota)}",
        ])  # fmt: skip
    columns = ("project", "class", "held", "nominal", "borrowed", "room", "device-hours")
    render.emit_table(console, "Quotas", columns, table, right=("held", "nominal", "borrowed", "room"))
    return exits.OK


def _kubernetes(args: argparse.Namespace) -> dict[str, str | None] | None:
    if not args.kubernetes:
        if args.kubeconfig or args.context:
            raise SpecError("--kubeconfig and --context are for --kubernetes", source="command line")
        return None
    return {"kubeconfig": args.kubeconfig, "context": args.context}


def change_json(c: ReconcileChange) -> dict[str, object]:
    return dataclasses.asdict(c)


def cmd_reconcile(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    kubernetes = _kubernetes(args)
    slurm = True if args.slurm else (False if kubernetes is not None else None)
    report, admitted = hw.reconcile(slurm=slurm, kubernetes=kubernetes)
    if args.json:
        body: dict[str, object] = {
            "changes": [change_json(c) for c in report.changes],
            "unreadable": [{"scheduler": n, "error": why} for n, why in report.unreadable],
            "checked": report.checked,
        }
        if admitted is not None:
            body["admitted"] = report_json(admitted)
        render.dump_json(console, body)
    else:
        for c in report.changes:
            console.print(Text(f"✓ {c.text}", style="green" if c.kind in ("ended", "node_up", "started") else "yellow"))
        if not report.changes and not report.unreadable:
            console.print(f"no change ({report.checked} live job{'s' if report.checked != 1 else ''} checked)")
        for name, why in report.unreadable:
            console.print(Text(f"✗ {name} could not be read: {why}", style="red"))
        if admitted is not None:
            print_admission(console, admitted, quiet_when_empty=True)
    return exits.EXECUTOR if report.unreadable else exits.OK


def cmd_serve(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    kubernetes = _kubernetes(args)
    return hw.serve(interval_s=args.interval.total_seconds(), slurm=True if args.slurm else None, kubernetes=kubernetes,
                    out=console.file, once=args.once, slurm_table=Path(args.slurm_table) if args.slurm_table else None,
                    slurm_accounts=Path(args.slurm_accounts) if args.slurm_accounts else None)  # fmt: skip


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    p = hardware.add_parser("queue", parents=[common], help="the workloads waiting for capacity, in the order they are offered it")
    p.add_argument("--all", action="store_true", help="also the admitted, cancelled and failed ones")
    p.set_defaults(handler=cmd_queue)

    p = hardware.add_parser("admit", parents=[common], help="offer the queue the capacity there is now")
    p.add_argument("--max", type=types.admissions, help="admit at most this many (1 or more)")
    p.set_defaults(handler=cmd_admit)

    p = hardware.add_parser("cancel", parents=[common], help="take a waiting workload out of the queue")
    p.add_argument("id", help="the queued decision's id (or a unique prefix)")
    p.set_defaults(handler=cmd_cancel)

    p = hardware.add_parser("quotas", parents=[common], help="use against quota per project and accelerator class")
    p.set_defaults(handler=cmd_quotas)

    p = hardware.add_parser("reconcile", parents=[common], help="read the schedulers back: ended jobs release, nodes not taking work leave capacity")
    _scheduler_args(p)
    p.set_defaults(handler=cmd_reconcile)

    p = hardware.add_parser("serve", parents=[common], help="reconcile, expire leases and admit, every interval, until SIGTERM or SIGINT")
    p.add_argument("--interval", type=types.lease, default=types.lease("30s"), help="between steps, at least 1s, e.g. 2s, 30s, 5m (default 30s)")
    p.add_argument("--once", action="store_true", help="one step, then exit")
    p.add_argument("--slurm-table", metavar="PATH", help="keep the Slurm job_submit plugin's decision table at PATH current (exa slurm table)")
    p.add_argument("--slurm-accounts", metavar="FILE", help="--slurm-table: the reviewed accounts file (Slurm account -> project, residency; licence -> engine)")
    _scheduler_args(p)
    p.set_defaults(handler=cmd_serve)


def _scheduler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slurm", action="store_true", help="read Slurm (squeue, sacct, sinfo)")
    p.add_argument("--kubernetes", action="store_true", help="read the Kubernetes API (the layer's Jobs, the nodes)")
    p.add_argument("--kubeconfig", help="--kubernetes: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="--kubernetes: the kubeconfig context (default: the current one)")
