"""``exa kueue admission-check``: Kueue's AdmissionCheck controller (``controllerName:
examlops.io/placement``), deciding each Workload through this layer's policy.

* ``admission-check [--kubeconfig K] [--context C] [--interval S] [--once]`` steps until SIGTERM or
  SIGINT (the step under way finishes; exit 0), or once with ``--once`` (exit 0 when the step
  went through; 5 when the policy could not be asked, 9 when the API server refused or did not
  answer). Each step's changes are printed one per line (a timestamp, the Workload, the check's
  state and why). Exit 2 for a bad kubeconfig or context.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from examlops_policy.cli import exits
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
import examlops_policy.kueue.controller as controller


def cmd_admission_check(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    if args.interval is not None and not args.interval >= 1.0:
        raise SpecError(f"at least 1 second: a step reads the cluster and the state (got {args.interval:g})", field="--interval")
    with controller.connect(args.kubeconfig, args.context) as api:
        cluster = api.cluster
        if args.once:
            report = controller.Controller(hw, api).step()
            for line in controller.lines(report):
                console.print(line)
            return exits.OK if report.policy_problem is None else exits.POLICY
        stop = threading.Event()

        def stopping(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
        print(f"exa kueue admission-check: {controller.CONTROLLER_NAME} on {cluster.server} (context {cluster.context})", file=sys.stderr, flush=True)
        controller.run(hw, api, stop=stop, interval=args.interval or controller.DEFAULT_INTERVAL_S, log=sys.stdout)
    return exits.OK


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    kueue = groups.add_parser("kueue", help="Kueue's admission check, decided by the policy").add_subparsers(dest="command", required=True)
    p = kueue.add_parser("admission-check", parents=[common], help=f"run the AdmissionCheck controller ({controller.CONTROLLER_NAME})")
    p.add_argument("--kubeconfig", metavar="K", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--context", metavar="C", help="kubeconfig context (default: its current context)")
    p.add_argument("--interval", type=float, metavar="S", help=f"seconds between steps (default {controller.DEFAULT_INTERVAL_S:g})")
    p.add_argument("--once", action="store_true", help="one step, then exit")
    p.set_defaults(handler=cmd_admission_check)
