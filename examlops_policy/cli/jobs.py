"""``exa hardware submit|status|manifest``: placed decisions handed to Slurm or Kubernetes.

* ``submit ID --script job.sh`` hands a placed decision to Slurm (``sbatch``); ``submit ID
  --kubernetes --image IMAGE`` creates its Job through the Kubernetes API. Either records the job
  on the decision and in the audit log; ``--dry-run`` prints the sbatch command, or runs the API
  server's dry run (admission and validation for real), recording nothing.
* ``status ID``: the job as its scheduler reports it (pending with why, running, complete, failed).
* ``manifest ID --image IMAGE [--command CMD ARG...]``: the Kubernetes ``batch/v1`` Job, unsent.
"""

from __future__ import annotations

import argparse

from examlops_policy.cli.console import Console
from examlops_policy.cli.console import Text

from examlops_policy.cli.args import Commands
from examlops_policy.cli import exits, render
from examlops_policy.hardware import Hardware
from examlops_policy.views import JobReport, Submission

STATE_STYLE = {"pending": "yellow", "running": "cyan", "complete": "green", "failed": "red", "missing": "red", "unknown": "red"}


def _k8s_options(args: argparse.Namespace) -> dict[str, object]:
    return {k: getattr(args, k) for k in ("context", "kubeconfig") if getattr(args, k, None) is not None}


def _submission_json(s: Submission) -> dict[str, object]:
    return {
        "decision": s.decision_id, "decision_id": s.decision_id, "scheduler": s.scheduler, "submitted": s.submitted, "job_id": s.job_id,
        "job_uid": s.job_uid, "namespace": s.namespace, "command": s.command, "argv": list(s.argv), "manifest": s.manifest,
        "partition": s.partition, "gres": s.gres,
    }  # fmt: skip


def cmd_submit(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    # --kubernetes (with --image) or --script: the flags say which scheduler, its options go as given.
    options: dict[str, object] = (
        {"image": args.image, "namespace": args.namespace, "command": list(args.command), **_k8s_options(args)} if args.kubernetes
        else {"script": args.script}
    )  # fmt: skip
    done = hw.submit(args.id, "kubernetes" if args.kubernetes else "slurm", dry_run=args.dry_run, **options)
    if args.json:
        render.dump_json(console, _submission_json(done))
    elif not done.submitted and done.command is not None:
        console.file.write(f"{done.command}\n")  # the exact command a dry run would run, as it is
    else:
        console.print(Text(done.said, style="green"))
    return exits.OK


def _print_job(console: Console, job: JobReport) -> None:
    native = f" ({job.native_state})" if job.native_state and job.native_state.lower() != job.state else ""
    console.print(Text(f"{job.scheduler} job {job.job_id} of decision {job.decision_id[:12]}: {job.state}{native}", style=STATE_STYLE.get(job.state, "")))
    if job.reason:
        console.print(f"  reason: {job.reason}")
    if job.message:
        console.print(f"  {job.message}")


def cmd_status(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    job = hw.job_status(args.id, **_k8s_options(args))
    if args.json:
        render.dump_json(console, {"decision_id": job.decision_id, "scheduler": job.scheduler, "job_id": job.job_id, "state": job.state,
                                   "reason": job.reason, "message": job.message, "native_state": job.native_state})  # fmt: skip
    else:
        _print_job(console, job)
    return exits.OK


def cmd_manifest(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    manifest = hw.manifest(
        args.id, image=args.image, command=list(args.command), namespace=args.namespace,
        amd_memory_partition=args.amd_memory_partition, tpu_topology=args.tpu_topology,
    )  # fmt: skip
    if args.json:
        render.dump_json(console, manifest)
    else:
        console.file.write(render.plain_yaml(manifest))
    return exits.OK


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")


def _command_arg(p: argparse.ArgumentParser) -> None:
    # An option, not "-- COMMAND": Python 3.11's argparse loses "--" in nested subcommands.
    p.add_argument("--command", nargs=argparse.REMAINDER, default=[],
                   help="the container's command; give it last: everything after it belongs to the command")  # fmt: skip


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    p = hardware.add_parser("submit", parents=[common], help="submit a placed decision to Slurm (sbatch) or Kubernetes (a Job)")
    p.add_argument("id", help="decision id (or a unique prefix)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--script", help="Slurm: the batch script to run")
    how.add_argument("--kubernetes", action="store_true", help="create the decision's Job through the Kubernetes API")
    p.add_argument("--image", help="Kubernetes: container image")
    p.add_argument("--namespace", help="Kubernetes: namespace (default: the context's, else default)")
    _cluster_args(p)
    p.add_argument("--dry-run", action="store_true", help="Slurm: print the exact sbatch command; Kubernetes: the server's dry run")
    _command_arg(p)
    p.set_defaults(handler=cmd_submit)

    p = hardware.add_parser("status", parents=[common], help="a submitted decision's job, as its scheduler reports it")
    p.add_argument("id", help="decision id (or a unique prefix)")
    _cluster_args(p)
    p.set_defaults(handler=cmd_status)

    p = hardware.add_parser("manifest", parents=[common], help="emit the Kubernetes Job for a placed decision")
    p.add_argument("id", help="decision id (or a unique prefix)")
    p.add_argument("--image", required=True, help="container image")
    p.add_argument("--namespace", help="Kubernetes namespace")
    p.add_argument("--amd-memory-partition", choices=["nps1", "nps2", "nps4"], default="nps1",
                   help="AMD memory partition mode of the nodes, for an honored AMD fraction (default nps1)")  # fmt: skip
    p.add_argument("--tpu-topology", help="TPU slice topology node selector, e.g. 2x2x1")
    _command_arg(p)
    p.set_defaults(handler=cmd_manifest)
