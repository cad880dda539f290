"""``exa tokens create|list|revoke``: the placement service's bearer tokens (``service.tokens``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from examlops_policy.cli import exits, render
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware


def _expires(text: str) -> object:
    from datetime import timedelta

    from examlops_policy import quantities
    from examlops_policy.cli.args import unitless

    problem = unitless(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    try:
        return timedelta(seconds=quantities.duration_s(text, least=60))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_create(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    import examlops_policy.service.tokens as tokens

    made = tokens.create(hw.cycle.opened_store(), args.project, args.scope, expires=args.expires)
    if args.json:
        render.dump_json(console, {"token": made.token, "id": made.row.id, "project": made.row.project, "scopes": list(made.row.scopes),
                                   "expires_at": made.row.expires_at})  # fmt: skip
        return exits.OK
    until = f", expires {made.row.expires_at}" if made.row.expires_at else ", does not expire"
    console.print(f"✓ token {made.row.id} for project {made.row.project} (scopes {','.join(made.row.scopes)}{until})")
    console.print("  shown once; keep it as a secret (only its digest is stored):")
    print(made.token)
    return exits.OK


def cmd_list(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    import examlops_policy.service.tokens as tokens

    rows = tokens.listing(hw.cycle.opened_store())
    if args.json:
        render.dump_json(console, [tokens.as_json(r) for r in rows])
        return exits.OK
    if not rows:
        console.print("No tokens yet (exa tokens create --project P --scope place,read).")
    for r in rows:
        console.print(f"{r.id}  {r.project:<16} {','.join(r.scopes):<18} {tokens.state(r):<8} created {r.created_at[:19]}"
                      + (f" · expires {r.expires_at[:19]}" if r.expires_at else ""))  # fmt: skip
    return exits.OK


def cmd_revoke(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    import examlops_policy.service.tokens as tokens

    row, changed = tokens.revoke(hw.cycle.opened_store(), args.id)
    if args.json:
        render.dump_json(console, {"id": row.id, "revoked_at": row.revoked_at, "already_revoked": not changed})
    elif changed:
        console.print(f"✓ token {row.id} revoked (project {row.project})")
    else:
        console.print(f"token {row.id} was already revoked at {row.revoked_at}; nothing changed")
    return exits.OK


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    sub = groups.add_parser("tokens", help="bearer tokens of the placement service (exa hardware serve --listen)").add_subparsers(
        dest="command", required=True
    )
    p = sub.add_parser("create", parents=[common], help="make a token for a project (printed once)")
    p.add_argument("--project", required=True, help="the project the token places and reads for")
    p.add_argument("--scope", required=True, help="comma-separated: place, read, admin")
    p.add_argument("--expires", type=_expires, help="it stops working this long from now, e.g. 90d, 12h (default: never)")
    p.set_defaults(handler=cmd_create)
    p = sub.add_parser("list", parents=[common], help="every token: id, project, scopes, state (never the token)")
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser("revoke", parents=[common], help="revoke a token at once")
    p.add_argument("id")
    p.set_defaults(handler=cmd_revoke)
