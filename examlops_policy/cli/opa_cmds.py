"""``exa opa status|stop|restart|bundle``: the OPA that decides."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from examlops_policy.cli.console import Console

from examlops_policy.cli.args import Commands
from examlops_policy.cli import exits, render
from examlops_policy.hardware import Hardware

if TYPE_CHECKING:
    from examlops_policy.hardware import OpaStatus


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def status_code(st: OpaStatus) -> int:
    """5 when an external OPA would refuse decisions (no bundle, another policy, other tables under
    the reviewed revision's label); the local one restarts on its own when the policy files changed."""
    return exits.OK if st.matches or (st.managed and st.content_problem is None) else exits.POLICY


def print_status(console: Console, st: OpaStatus) -> None:
    if not st.running:
        console.print("OPA is not running; the next command that needs a decision starts it")
        if st.note:
            console.print(f"  {st.note}")
        return
    served = st.served_revision or "none"
    if st.managed:
        idle = f" · idle {duration(st.idle_s)}" if st.idle_s is not None else ""
        limit = f" (stops after {duration(st.idle_timeout_s)} idle)" if st.idle_timeout_s else ""
        console.print(f"✓ OPA running · pid {st.pid} (supervisor {st.supervisor_pid}){idle}{limit}")
        only_unix = all(a.startswith("unix://") for a in st.listeners)
        where = "only on its Unix socket (no TCP port)" if only_unix else f"on {', '.join(st.listeners)}"
        console.print(f"  reached at {st.reached_at} · listens {where}")
    else:
        console.print(f"✓ OPA at {st.reached_at} (external: EXA_OPA_URL; exa neither starts nor stops it)")
    if st.matches and st.proven:
        console.print(f"  policy {served} · matches the policy files")
    elif st.matches:
        console.print(f"  policy {served} · matches the policy files: reported by the OPA, not proven ({render.NOT_PROVEN})")
    elif st.same_revision and st.content_problem is not None:
        console.print(f"  ✗ policy {served}, but {st.content_problem}: decisions are refused", style="red")
    elif st.managed:
        console.print(f"  policy {served} · the policy files are now {st.policy_revision}: it restarts on the next decision")
    else:
        console.print(f"  ✗ policy {served}, but the policy files are {st.policy_revision}: decisions are refused", style="red")
    token = f"requests without the token are refused (401){f', token in {st.token_file} (0600)' if st.token_file else ''}"
    guard = token if st.refuses_anonymous else "NOT PROTECTED: it answers requests without a token"
    roots = ", ".join(st.bundle_roots) or "none"
    authz = "authorization policy system.authz · " if "system/authz" in st.bundle_roots else ""
    signed = " · bundle signature verified at load (a key made for this start)" if st.signed_bundle else ""
    console.print(f"  protected: {guard} · {authz}bundle roots {roots} (OPA refuses writes there){signed}",
                  style=None if st.refuses_anonymous else "red")  # fmt: skip
    if st.managed and not st.signed_bundle:
        console.print(f"  ⚠ {render.UNSIGNED_LOCAL}", style="yellow")


def cmd_status(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    st = hw.opa_status()
    if args.json:
        render.dump_json(console, st.to_json())
    else:
        print_status(console, st)
    return status_code(st)


def cmd_bundle(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    """``exa opa bundle``: the same as ``exa policy build``."""
    from examlops_policy.cli.policy import cmd_build

    return cmd_build(args, hw, console)


def cmd_stop(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    report = hw.opa_stop()
    if args.json:
        render.dump_json(console, {"was_running": report.was_running, "stopped": report.stopped, "report": report.lines()})
    else:
        for line in report.lines():
            console.print(("✓ " if report.stopped and report.was_running else "") + line)
    return exits.OK if report.stopped else exits.INTERNAL


def cmd_restart(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    connection = hw.opa_restart()
    assert connection.server is not None
    if args.json:
        render.dump_json(console, {"pid": connection.server.pid, "revision": connection.expected_revision, "reached_at": connection.describe})
    else:
        console.print(f"✓ OPA restarted · pid {connection.server.pid} · {connection.describe} · policy {connection.expected_revision}")
    return exits.OK


HANDLERS = {"status": cmd_status, "stop": cmd_stop, "restart": cmd_restart, "bundle": cmd_bundle}


def cmd_opa(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    return HANDLERS[args.action](args, hw, console)


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    p = groups.add_parser("opa", parents=[common], help="the OPA that decides: status, stop, restart; build a bundle")
    p.add_argument("action", choices=list(HANDLERS))
    p.add_argument("--out", default=".", help="bundle: folder to write bundle.tar.gz into")
    p.add_argument("--signing-key", help="bundle: sign with this key (PEM RSA/EC private key, or an HMAC secret)")
    p.set_defaults(handler=cmd_opa)
