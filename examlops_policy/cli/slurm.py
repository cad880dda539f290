"""``exa slurm table|plugin``: the decision table Slurm's job_submit plugin reads, and the plugin.

* ``table --out PATH [--accounts FILE]`` decides the table now (one policy decision per row, as
  ``exa hardware place --dry-run`` decides) and writes it at PATH whole or not at all. Exit 0;
  2 for bad input (the accounts file, a folder that is not there), nothing written; 5 when the
  policy cannot decide.
* ``plugin`` prints where the shipped ``job_submit.lua`` is (to copy into Slurm's configuration
  folder, beside slurm.conf).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from examlops_policy import job_submit
from examlops_policy.cli import exits, render
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console
from examlops_policy.hardware import Hardware


def cmd_table(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    accounts = job_submit.load_accounts(Path(args.accounts)) if args.accounts else job_submit.Accounts.none()
    out = Path(args.out)
    table = job_submit.write(hw, out, accounts)
    if args.json:
        render.dump_json(console, {
            "out": str(out), "rows": len(table.rows), "routed": table.routed, "refused": table.refused,
            "policy_revision": table.policy_revision, "revision": table.revision, "accounts": dict(table.accounts),
            "default_profile": table.default_profile, "licenses": dict(table.licenses),
        })  # fmt: skip
    else:
        console.print(f"✓ wrote {out} · {len(table.rows)} rows ({table.routed} routed, {table.refused} refused) · "
                      f"policy {table.policy_revision[:19]} · table {table.revision[:12]}", style="green")  # fmt: skip
    return exits.OK


def cmd_plugin(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    if args.json:
        render.dump_json(console, {"plugin": str(job_submit.HOOK), "conf": job_submit.CONF_NAME, "table": job_submit.TABLE_NAME})
    else:
        console.print(str(job_submit.HOOK))
    return exits.OK


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    slurm = groups.add_parser("slurm", help="Slurm's job_submit plugin and the decision table it reads").add_subparsers(dest="command", required=True)
    p = slurm.add_parser("table", parents=[common], help="decide the job_submit plugin's table now and write it (whole or not at all)")
    p.add_argument("--out", required=True, metavar="PATH", help="the table's file (the conf's `table`; default there: exa_job_submit_table.lua beside job_submit.lua)")
    p.add_argument("--accounts", metavar="FILE", help="the reviewed accounts file: Slurm account -> project, residency, data region; licence -> engine")
    p.set_defaults(handler=cmd_table)
    p = slurm.add_parser("plugin", parents=[common], help="where the shipped job_submit.lua is")
    p.set_defaults(handler=cmd_plugin)
