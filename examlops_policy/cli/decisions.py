"""``exa hardware place|burst|portable|decisions|explain|release|renew|accounting|burst-events``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from examlops_policy.cli.console import Console, Text

from examlops_policy import specs
from examlops_policy.cli import args as types
from examlops_policy.cli.args import Commands
from examlops_policy.cli import exits, render
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware, as_burst, schedulers
from examlops_policy.model import (
    ACCELERATORS, ENGINES, ISOLATIONS, OBJECTIVES, RESIDENCIES, SPOT, TOPOLOGIES, TOPOLOGY_MODES, WORKLOAD_TARGETS, Decision,
    Placement, Workload,
)  # fmt: skip
from examlops_policy.views import DecisionRecord, DecisionSummary, decision_json

if TYPE_CHECKING:
    from examlops_policy.views import Submit

# What a workload file says; given on the command line beside -f they would conflict.
WORKLOAD_OPTIONS = (
    "accelerator", "engine", "target", "fraction", "count", "capabilities", "residency", "data_region",
    "optimize", "carbon_weight", "max_cost_per_hour", "max_carbon_per_hour", "project", "spot",
    "nodes", "cpu", "memory", "topology", "topology_mode", "models", "isolation", "max_wait", "deadline", "walltime", "priority",
    "work_class", "work",
)  # fmt: skip
# Options that are lists, comma-separated on the command line.
LIST_OPTIONS = ("capabilities", "models")
WORKLOAD_FLAGS = ("allow_burst", "allow_cpu_fallback", "no_budget_fallback")


def outcome_code(decision: Decision) -> int:
    if isinstance(decision, Placement) or decision.queued:
        return exits.OK
    return exits.BURST_BLOCKED if decision.burst_blocked else exits.REJECTED


def workload(args: argparse.Namespace) -> Workload:
    """The workload of ``-f FILE``, or of NAME and the options; both at once is an error."""
    return placement(args)[0]


def placement(args: argparse.Namespace) -> tuple[Workload, bool]:
    """The workload of ``-f FILE`` (and whether the file says ``queue: true``), or of NAME and the
    options; both at once is an error."""
    if args.file:
        given = [f"--{o.replace('_', '-')}" for o in WORKLOAD_OPTIONS if getattr(args, o, None) is not None]
        given += [f"--{o.replace('_', '-')}" for o in WORKLOAD_FLAGS if getattr(args, o, False)]
        if args.name:
            given.insert(0, f"NAME ({args.name})")
        if given:
            raise SpecError(
                f"-f {args.file} says everything about the workload; {', '.join(given)} would conflict with it "
                "(give either -f FILE, or NAME with options)",
                source="command line",
            )
        return specs.placement_from_file(Path(args.file))
    if not args.name or not args.accelerator:
        raise SpecError("give a NAME and --accelerator, or -f workload.yaml", source="command line")
    values: dict[str, object] = {
        "name": args.name, "accelerator": args.accelerator, "capabilities": types.names(args.capabilities or ""),
        "allow_burst": args.allow_burst, "allow_cpu_fallback": args.allow_cpu_fallback,
        "allow_budget_fallback": not args.no_budget_fallback,
    }  # fmt: skip
    for option in WORKLOAD_OPTIONS[1:]:
        if option not in LIST_OPTIONS and getattr(args, option, None) is not None:
            values[option] = getattr(args, option)
    for option in ("max_wait", "walltime"):
        problem = types.unitless(str(values[option])) if option in values else None
        if problem:
            raise SpecError(problem, source="command line", field=option)
    if args.models is not None:
        values["models"] = types.names(args.models)
    specs.check_carbon_weight(values, source="command line", weight="--carbon-weight", optimize="--optimize")
    return specs.workload_from_mapping(values, source="command line"), False


def show(args: argparse.Namespace, console: Console, decision: Decision, record: DecisionRecord | None = None) -> int:
    if record is not None and record.released_at is not None and isinstance(decision, Placement):
        # Only a retry (--request-id) returns a decision made earlier, and it may be over: it
        # places nothing now, so it is not reported as placed (exit 2, as renewing it would be).
        raise ended_retry(record, decision)
    if args.json:
        render.dump_json(console, decision_json(decision, record))
    else:
        render.print_decision(console, decision, record.queue if record is not None else None)
        if getattr(args, "explain", False):
            render.print_explanation(console, decision)
            if record is not None:
                console.print(f"decision {record.id}")
            else:
                console.print("dry run: nothing was reserved or recorded")
    return outcome_code(decision)


def ended_retry(record: DecisionRecord, decision: Placement) -> SpecError:
    """A retry of a request whose placement was released since, or whose lease ended."""
    when = f"its lease ended at {record.released_at}" if record.lease_ended else f"it was released at {record.released_at}"
    return SpecError(
        f"request id {record.request_id!r} was placed by decision {record.id[:12]} ({decision.workload.name} → pool {decision.pool}) "
        f"and {when}: it holds nothing now, and nothing was placed again (use a new request id to place it again)",
        source="command line",
        field="--request-id",
    )


def _submission(args: argparse.Namespace, queue: bool) -> Submit | None:
    """``--submit slurm --script F`` or ``--submit kubernetes --image I ...`` (the scheduler builds
    it: ``Scheduler.queued``): submitted once admitted."""
    if args.submit is None:
        given = [f"--{o}" for o in ("script", "image", "namespace", *(() if args.ask_kubernetes else ("context", "kubeconfig"))) if getattr(args, o, None)]
        if given:
            which = " or ".join(f"--submit {name}" for name in schedulers.SCHEDULERS)
            raise SpecError(f"{', '.join(given)} say how to submit once admitted: add {which}", source="command line")
        return None
    if not queue:
        raise SpecError("--submit submits a queued workload once it is admitted: add --queue", source="command line", field="--submit")
    options = {o: getattr(args, o, None) for o in ("script", "image", "namespace", "context", "kubeconfig")}
    return schedulers.SCHEDULERS[args.submit].queued(options)


def _ask_kubernetes(args: argparse.Namespace, hw: Hardware) -> None:
    """``--ask-kubernetes``: the cluster of ``--kubeconfig``/``--context`` is asked for start
    estimates (its file is read now: a bad one is bad input, exit 2). Without it, ``--context``
    and ``--kubeconfig`` only say how to ``--submit kubernetes``."""
    if args.ask_kubernetes:
        hw.ask_kubernetes(kubeconfig=args.kubeconfig, context=args.context)
    if args.own_capacity_estimate:
        hw.estimate_from_own_capacity()


def cmd_place(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    w, queue_in_file = placement(args)
    queue = bool(args.queue or queue_in_file)
    submission = _submission(args, queue)
    _ask_kubernetes(args, hw)
    if args.dry_run:
        return show(args, console, hw.what_if(w, where=True))
    record = hw.place(w, request_id=args.request_id, lease=args.lease, queue=queue, submission=submission)
    code = show(args, console, record.decision, record)
    if submission is not None and record.job_id is not None and not args.json:
        known = schedulers.SCHEDULERS.get(record.scheduler or "")
        scheduler = f"{known.title} as {known.job_word}" if known is not None else "job"
        console.print(Text(f"  it fitted at once (nothing queued): submitted to {scheduler} {record.job_id}", style="green"))
    return code


def cmd_burst(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    if not args.allow_burst:
        raise SpecError("bursting to cloud is opt-in: add --allow-burst", source="exa hardware burst", field="--allow-burst")
    w = workload(args)
    if not args.ask_kubernetes and (args.context or args.kubeconfig):
        raise SpecError("--context and --kubeconfig name the cluster --ask-kubernetes asks: add --ask-kubernetes", source="command line")
    _ask_kubernetes(args, hw)
    if args.dry_run:
        return show(args, console, hw.what_if(as_burst(w), where=True))
    record = hw.burst(w, request_id=args.request_id, lease=args.lease)
    return show(args, console, record.decision, record)


def cmd_portable(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    found = hw.portable(args.engine, args.accelerator)
    reason = found.reason
    if args.json:
        render.dump_json(console, {"engine": found.engine, "accelerator": found.accelerator, "backend": found.backend, "portable": found.portable,
                                   "reason": None if reason is None else {"code": reason.code, "message": reason.message}})  # fmt: skip
    elif reason is None:
        console.print(f"✓ Portable: engine '{found.engine}' can run on {found.accelerator} (backend {found.backend})", style="green")
    else:
        console.print(f"✗ Rejected: {reason.message}", style="red")
    return exits.OK if found.portable else exits.REJECTED


def cmd_decisions(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    page = hw.decision_page(limit=args.limit, since=args.since, until=args.until, cursor=args.cursor)
    if args.json:
        render.stream_json(console, (render.summary_json(r) for r in page.decisions))
    else:
        print_page(console, page.decisions, page.cursor, ranged=bool(args.since or args.until or args.cursor))
    return exits.OK


def print_page(console: Console, rows: Sequence[DecisionSummary], cursor: str | None, *, ranged: bool) -> None:
    """A page of decisions as a table, and the cursor of the next page (``ranged``: a range or a
    cursor was asked, so an empty page is an empty range)."""
    if not rows:
        console.print("No decisions yet." if not ranged else "No decisions in that range.")
    else:
        render.print_decisions(console, rows)
    if cursor:
        console.print(f"more: --cursor {cursor}")


def cmd_explain(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    if args.replay:
        replay = hw.replay(args.id)
        if args.json:
            render.dump_json(console, dataclasses.asdict(replay))
        else:
            mark = "✓" if replay.same else "✗"
            console.print(f"{mark} replay of {replay.decision_id[:12]} under policy {replay.policy_revision[:19]}: {replay.summary}")
            for line in replay.differences:
                console.print(f"  {line}")
        return exits.OK if replay.same else exits.REJECTED
    record = hw.decision(args.id)
    if args.json:
        render.dump_json(console, decision_json(record.decision, record))
        return exits.OK
    console.print(f"decision {record.id} · {record.created_at}" + render.ended_text(record))
    render.print_decision(console, record.decision, record.queue)
    render.print_links(console, record)
    render.print_explanation(console, record.decision)
    return exits.OK


def cmd_release(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    result = hw.release(args.id, kubeconfig=args.kubeconfig, context=args.context)
    record = result.record
    if args.json:
        body: dict[str, object] = {"id": record.id, "decision_id": record.id, "released_at": record.released_at,
                                   "already_released": result.already, "job_deleted": result.job_deleted,
                                   "pool_removed": result.pool_removed}  # fmt: skip
        if result.admitted is not None:
            from examlops_policy.cli.queue import report_json

            body["admitted"] = report_json(result.admitted)
        if result.admission_error is not None:
            body["admission_error"] = result.admission_error
        render.dump_json(console, body)
        return exits.OK
    d = record.decision
    assert isinstance(d, Placement)
    if result.already:
        if record.lease_ended:
            console.print(f"decision {record.id[:12]}: its lease ended at {record.released_at}, which released it; nothing changed")
        else:
            console.print(f"decision {record.id[:12]} was already released at {record.released_at}; nothing changed")
        return exits.OK
    console.print(f"✓ released {render.grant_text(d.grant, d.accelerator)} on {d.pool} (decision {record.id[:12]})")
    if result.pool_removed:
        console.print(f"- {d.pool} removed: its removal was pending on its last live grant, this one")
    if result.job_deleted is not None:
        gone = "deleted" if result.job_deleted else "already gone"
        console.print(f"  Kubernetes Job {record.job_id}: {gone}")
    if result.admitted is not None:
        from examlops_policy.cli.queue import print_admission

        print_admission(console, result.admitted, quiet_when_empty=True)
    if result.admission_error is not None:
        console.print(Text(f"  the queue was not offered the capacity now ({result.admission_error}); exa hardware admit offers it", style="yellow"))
    return exits.OK


def cmd_renew(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    record = hw.renew(args.id, args.lease)
    if args.json:
        render.dump_json(console, {"id": record.id, "decision_id": record.id, "lease_expires_at": record.lease_expires_at})
    else:
        console.print(f"✓ decision {record.id[:12]} leased until {record.lease_expires_at}")
    return exits.OK


def cmd_accounting(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    figures = hw.accounting(args.id, args.hours)
    if args.json:
        render.dump_json(console, figures)
        return exits.OK
    record = hw.decision(args.id)
    d = record.decision
    assert isinstance(d, Placement)
    hours = float(args.hours)
    console.print(f"decision {record.id[:12]} · {render.grant_text(d.grant, d.accelerator)} on {d.pool} in {d.region} · "
                  f"held {render.number(hours)} hour{'' if hours == 1 else 's'}")  # fmt: skip
    console.print(f"  cost    {render.amount(cast(float, figures['cost']), 2, '$')}")
    console.print(f"  carbon  {render.number(cast(float, figures['carbon_g']))} gCO2e")
    if "carbon_g_grounded" in figures:
        console.print(f"          {render.number(cast(float, figures['carbon_g_grounded']))} gCO2e from the pool's power (board power x PUE x grid intensity)")
    return exits.OK


def cmd_burst_events(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    events = hw.burst_events(args.limit)
    projects = getattr(args, "projects", None)  # the service's caller: its projects' attempts only
    if projects is not None:
        events = [e for e in events if hw.decision(e.decision_id).decision.workload.project in projects]
    if args.json:
        render.dump_json(console, [dataclasses.asdict(e) for e in events])
        return exits.OK
    if not events:
        console.print("No burst attempts yet.")
    for e in events:
        mark = {"allowed": "✓", "blocked": "⚠", "unavailable": "✗"}[e.verdict]
        console.print(f"{mark} {e.created_at[:19]} {e.workload} · {e.residency} → {e.pool or '-'} ({e.region or '-'}): {e.verdict}"
                      + (f" · {e.reason}" if e.reason else ""))  # fmt: skip
    return exits.OK


# -- parser -----------------------------------------------------------------------------------


def _workload_args(p: argparse.ArgumentParser, *, target: bool, queue: bool = False) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("-f", "--file", help="a workload YAML file instead of the options")
    p.add_argument("--accelerator", choices=ACCELERATORS)
    p.add_argument("--engine", choices=ENGINES, help="default generic")
    if target:
        p.add_argument("--target", choices=WORKLOAD_TARGETS)
    p.add_argument("--fraction", type=float, help="share of a device, in (0, 1] (default 1)")
    p.add_argument("--count", type=int, help="devices on each node (default 1)")
    p.add_argument("--nodes", type=int, help="a gang of N nodes, --count devices on each, all or nothing (default 1)")
    p.add_argument("--cpu", metavar="CORES", help="CPU per node: cores (8, 0.5) or millicores (500m)")
    p.add_argument("--memory", metavar="SIZE", help="memory per node: 64Gi, 512Mi or MiB")
    p.add_argument("--topology", choices=TOPOLOGIES, help="a gang's nodes all in one block, or under one switch")
    p.add_argument("--topology-mode", choices=TOPOLOGY_MODES, help="whether --topology must hold (default required) or is preferred")
    p.add_argument("--models", help="comma-separated device models that will do (any of them), e.g. v100,t4")
    p.add_argument("--isolation", choices=ISOLATIONS, help="required: a fraction must be an isolated slice, never a shared device (default any)")
    p.add_argument("--capabilities", help="comma-separated tags the pool must advertise, e.g. fp8")
    p.add_argument("--residency", choices=RESIDENCIES, help="data residency class (default open)")
    p.add_argument("--data-region", help="where the workload's data lives (a region of regions.yaml)")
    p.add_argument("--allow-burst", action="store_true", help="allow bursting from HPC to cloud")
    p.add_argument("--allow-cpu-fallback", action="store_true", help="a CPU may stand in for the accelerator")
    p.add_argument("--optimize", choices=OBJECTIVES,
                   help="what to minimise among admissible pools (default cost; earliest: the soonest estimated start; "
                        "work-cost, work-carbon, work-time: the job's cost, carbon or completion, from --work-class and --work)")
    p.add_argument("--work-class", metavar="CLASS", help="the workload's class of work, a class of throughput.yaml (e.g. ResNet-50)")
    p.add_argument("--work", type=float, metavar="AMOUNT", help="how much work it does, in its class's unit (e.g. 20000 iterations)")
    p.add_argument("--carbon-weight", type=float, help="with --optimize balanced only: the weight of carbon against cost, 0 to 1 (default 0.5)")
    p.add_argument("--max-cost-per-hour", type=float, help="cap on what the grant may cost per hour (USD)")
    p.add_argument("--max-carbon-per-hour", type=float, help="cap on what the grant may emit per hour (gCO2e)")
    p.add_argument("--project", help="the project whose caps apply (budgets.yaml)")
    p.add_argument("--no-budget-fallback", action="store_true",
                   help="never fall back to another accelerator because the requested one's pools are over the budget")
    p.add_argument("--spot", choices=SPOT, help="spot (preemptible) capacity: never (default), allow, or require (spot only)")
    p.add_argument("--max-wait", metavar="DURATION", help="the longest the workload may wait to start, e.g. 2h, 90m, 1h30m")
    p.add_argument("--deadline", metavar="ISO-TIME", help="the time it must start by, with its offset, e.g. 2026-12-01T14:00:00Z")
    p.add_argument("--walltime", metavar="DURATION", help="its time limit, e.g. 30m, 2h (asked of the scheduler)")
    p.add_argument("--explain", action="store_true", help="show every pool's verdict and why the winner won")
    p.add_argument("--dry-run", action="store_true", help="decide without reserving or recording")
    p.add_argument("--request-id", help="idempotency key: a retry with the same key returns the same decision")
    p.add_argument("--lease", type=types.lease, help="release the placement unless submitted or renewed within this time, with its unit, e.g. 30m or 2h")
    p.add_argument("--priority", help="its priority class (priorities.yaml: orders the queue, may allow preemption)")
    p.add_argument("--ask-kubernetes", action="store_true",
                   help="ask the Kubernetes cluster (--kubeconfig, --context) when the pools it serves would start it, not the provisioning table")
    p.add_argument("--own-capacity-estimate", action="store_true",
                   help="where Slurm or Kubernetes gives no start estimate (cannot be asked), take now when this layer's own account has room (off by default)")
    uses = "--ask-kubernetes, --submit kubernetes" if queue else "--ask-kubernetes"
    p.add_argument("--context", help=f"{uses}: the kubeconfig context (default: its current context)")
    p.add_argument("--kubeconfig", help=f"{uses}: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    if queue:
        p.add_argument("--queue", action="store_true", help="wait in the queue when every pool that could take it is only full")
        p.add_argument("--submit", choices=tuple(schedulers.SCHEDULERS), help="once admitted from the queue, submit it (with --script, or --image)")
        p.add_argument("--script", help="--submit slurm: the batch script (its text is kept with the queued workload)")
        p.add_argument("--image", help="--submit kubernetes: the container image")
        p.add_argument("--namespace", help="--submit kubernetes: the namespace")


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    p = hardware.add_parser("place", parents=[common], help="place a workload on the cheapest eligible pool (or queue it: --queue)")
    _workload_args(p, target=True, queue=True)
    p.set_defaults(handler=cmd_place)

    p = hardware.add_parser("burst", parents=[common], help="burst a workload to cloud, governed by residency")
    _workload_args(p, target=False)
    p.set_defaults(handler=cmd_burst)

    p = hardware.add_parser("portable", parents=[common], help="can an engine run on an accelerator?")
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--accelerator", required=True, choices=ACCELERATORS)
    p.set_defaults(handler=cmd_portable)

    p = hardware.add_parser("decisions", parents=[common], help="recent placement decisions, a page at a time")
    p.add_argument("--limit", type=types.page_limit, default=20)
    p.add_argument("--since", help="only decisions made at or after this time (ISO 8601, UTC)")
    p.add_argument("--until", help="only decisions made before this time (ISO 8601, UTC)")
    p.add_argument("--cursor", type=types.cursor, help="the next page: the cursor the last page printed")
    p.set_defaults(handler=cmd_decisions)

    p = hardware.add_parser("explain", parents=[common], help="explain a decision pool by pool")
    p.add_argument("id")
    p.add_argument("--replay", action="store_true", help="ask the policy again with the recorded input: same answer?")
    p.set_defaults(handler=cmd_explain)

    p = hardware.add_parser("release", parents=[common], help="free the capacity a placement holds (and delete its Kubernetes Job)")
    p.add_argument("id")
    p.add_argument("--context", help="Kubernetes: the kubeconfig context the Job was submitted through")
    p.add_argument("--kubeconfig", help="Kubernetes: the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    p.set_defaults(handler=cmd_release)

    p = hardware.add_parser("renew", parents=[common], help="extend a placement's lease")
    p.add_argument("id")
    p.add_argument("--lease", type=types.lease, required=True, help="from now, with its unit, e.g. 30m, 2h")
    p.set_defaults(handler=cmd_renew)

    p = hardware.add_parser("accounting", parents=[common], help="cost and carbon of a placement held for --hours (--json: the figures)")
    p.add_argument("id")
    p.add_argument("--hours", type=types.hours, required=True)
    p.set_defaults(handler=cmd_accounting)

    p = hardware.add_parser("burst-events", parents=[common], help="every burst attempt, allowed or blocked")
    p.add_argument("--limit", type=types.limit, default=50)
    p.set_defaults(handler=cmd_burst_events)
