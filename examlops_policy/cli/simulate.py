"""``exa hardware simulate``: replay a trace against a fleet through the placement path, in memory."""

from __future__ import annotations

import argparse
from pathlib import Path

from examlops_policy.cli import exits, render
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import OBJECTIVES, PACKERS, TRACE_FORMATS


def seeds_of(text: str) -> list[int]:
    """``42-51``, ``42,45`` or ``42``: the seeds, in order; SpecError for anything else."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
                if last < first or last - first >= 1000:
                    raise ValueError
                out.extend(range(first, last + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise SpecError(f"seeds are whole numbers or ranges such as 42-51 or 42,45 (got {text!r})", source="--seeds") from None
    return out


def cmd_simulate(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    packers = [p for group in (args.packer or [[PACKERS[0]]]) for p in group]
    result = hw.simulate(
        Path(args.pods), Path(args.nodes) if args.nodes else None, format=args.format, inflate=args.inflate, seeds=seeds_of(args.seeds),
        packers=packers, policy=Path(args.policy) if args.policy else None, region=args.region, pools=args.pools,
        optimize=[o for group in (args.optimize or []) for o in group],
    )  # fmt: skip
    if args.plot:
        svg = result.svg()  # SpecError for a replay by work: it reports a table, no allocation to draw
        try:
            Path(args.plot).write_text(svg)
        except OSError as exc:
            raise SpecError(f"cannot write the plot: {exc.strerror}", source=args.plot) from exc
    if args.json:
        render.dump_json(console, result.to_json(), sort_keys=False)  # alloc_pct in the order of its numbers
    else:
        for line in result.lines():
            console.print(line, markup=False, highlight=False)
        if args.plot:
            console.print(f"plot: {args.plot}", markup=False, highlight=False)
    return exits.OK


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    p = hardware.add_parser(
        "simulate", parents=[common], help="replay a trace against a fleet through the placement path, in memory (nothing written)"
    )
    p.add_argument("--pods", required=True, metavar="FILE", help="the pod list (openb CSV), or a generic trace (YAML: pools and workloads)")
    p.add_argument("--nodes", metavar="FILE", help="the node list (openb CSV; required for openb), or a pools file replacing a generic trace's pools")
    p.add_argument("--format", choices=TRACE_FORMATS,
                   help="openb: the openb protocol; generic (generic-yaml, generic-csv): in time order (default: from --pods: a YAML trace, "
                        "or a CSV with an arrival column, is generic; else openb)")  # fmt: skip
    p.add_argument("--inflate", type=float, default=1.3, help="openb: GPU demand tuned to this x the GPU capacity (default 1.3)")
    p.add_argument("--seeds", default="42", help="openb: seeds, e.g. 42-51 (default 42)")
    p.add_argument("--packer", nargs="+", action="append", metavar="NAME", choices=PACKERS,
                   help=f"node packer(s) to replay with: {', '.join(PACKERS)} (default {PACKERS[0]}, the one place uses)")  # fmt: skip
    p.add_argument("--policy", metavar="DIR", help="judge with the policy in DIR (its own OPA) instead of the reviewed one")
    p.add_argument("--region", default="eu", help="openb: the region of the fleet's pools (default eu)")
    p.add_argument("--pools", choices=["model", "one"], default="model",
                   help="openb: a pool per GPU model (default; the models rule tells them apart), or one pool of every GPU node")
    p.add_argument("--plot", metavar="FILE.svg", help="write allocation against arrived demand as an SVG")
    p.add_argument("--optimize", nargs="+", action="append", choices=OBJECTIVES, metavar="OBJECTIVE",
                   help="generic: replay by work under each objective (e.g. cost work-cost work-time): waiting work placed as room frees, "
                        "running for its duration or its work over its grant's throughput; reports total cost, cost per unit of work, "
                        "mean and p95 completion, utilisation per device model")
    p.set_defaults(handler=cmd_simulate)
