"""``exa hardware serve --listen``, and what the placement service answers with: the command line's own output. ``exa hardware serve
--listen`` hands this to the service (``service.app.Answers``), so that an answer is what the
command prints (``--json``, or its text with ``?format=text``), made by the same handler, and an
error carries the exit code the command would exit with. The service imports nothing of the
command line; the command line gives it this."""

from __future__ import annotations

import argparse
import dataclasses
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from examlops_policy.cli import args as args_types, decisions, exits, pools, queue, render
from examlops_policy.cli.args import Commands
from examlops_policy.cli.console import Console
from examlops_policy.errors import ExaError, SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Decision, Placement
from examlops_policy.views import DecisionRecord, DecisionSummary, PoolChange, decision_json

COLUMNS: Final = 160


def _ledger(name: str) -> Callable[[argparse.Namespace, Hardware, Console], int]:
    """A handler of ``cli.ledger``, imported when the service first runs it (a cold place does not load it)."""

    def run(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
        from examlops_policy.cli import ledger

        handler: Callable[[argparse.Namespace, Hardware, Console], int] = getattr(ledger, name)
        return handler(args, hw, console)

    return run


_HANDLERS: Final = {
    "explain": decisions.cmd_explain, "release": decisions.cmd_release, "renew": decisions.cmd_renew, "pools": pools.cmd_pools,
    "pool": pools.cmd_pool, "queue": queue.cmd_queue, "cancel": queue.cmd_cancel, "drain": pools.cmd_drain, "undrain": pools.cmd_drain,
    "remove-pool": pools.cmd_remove_pool, "add-pool": pools.cmd_add_pool, "quotas": queue.cmd_quotas, "portable": decisions.cmd_portable,
    "accounting": decisions.cmd_accounting, "burst-events": decisions.cmd_burst_events, "finops": _ledger("cmd_finops"),
    "audit-verify": _ledger("cmd_audit_verify"),
}  # fmt: skip
# Options the service passes as the request gave them, read by the command line's own types.
_TYPES: Final = {"hours": args_types.hours}


class CliAnswers:
    """``service.app.Answers`` made of the command line's handlers and renderers."""

    def command(self, command: str, hw: Hardware, *, text: bool, columns: int = COLUMNS, **options: object) -> tuple[int, str]:
        """``command`` run with ``options`` and its output captured: (exit code, output)."""
        for name, kind in _TYPES.items():
            if isinstance(options.get(name), str):
                try:
                    options[name] = kind(str(options[name]))
                except argparse.ArgumentTypeError as exc:
                    raise SpecError(str(exc), source="query", field=name) from None
        out = io.StringIO()
        code = _HANDLERS[command](argparse.Namespace(json=not text, **options), hw, Console(file=out, width=columns))
        return code, out.getvalue()

    def decision(
        self, decision: Decision, record: DecisionRecord | None, *, text: bool, explain: bool, columns: int = COLUMNS, verdicts: bool = True
    ) -> tuple[int, str | dict[str, object]]:
        """A decision as ``place`` prints it: (exit code, text or the JSON object; ``verdicts``:
        with every pool's verdict, as ``place --json`` has it, else without them)."""
        if not verdicts:
            decision = dataclasses.replace(decision, verdicts=())
        if record is not None and record.released_at is not None and isinstance(decision, Placement):
            raise decisions.ended_retry(record, decision)
        if not text:
            return decisions.outcome_code(decision), decision_json(decision, record)
        out = io.StringIO()
        code = decisions.show(argparse.Namespace(json=False, explain=explain), Console(file=out, width=columns), decision, record)
        return code, out.getvalue()

    def summaries(self, rows: Sequence[DecisionSummary]) -> list[dict[str, object]]:
        return [render.summary_json(s) for s in rows]

    def summaries_text(self, rows: Sequence[DecisionSummary], cursor: str | None, *, ranged: bool, columns: int = COLUMNS) -> str:
        """A page of decisions as ``exa hardware decisions`` prints it (``ranged``: a range or a
        cursor was asked)."""
        out = io.StringIO()
        decisions.print_page(Console(file=out, width=columns), rows, cursor, ranged=ranged)
        return out.getvalue()

    def changes_text(self, rows: Sequence[PoolChange], *, prune: bool, dry_run: bool, columns: int = COLUMNS) -> tuple[int, str]:
        """An apply's changes as ``exa hardware apply`` prints them, and its exit code."""
        out = io.StringIO()
        return pools.applied(argparse.Namespace(json=False, prune=prune, dry_run=dry_run), Console(file=out, width=columns), list(rows)), out.getvalue()

    def changes(self, rows: Sequence[PoolChange]) -> list[dict[str, object]]:
        return [pools.change_json(c) for c in rows]

    def exit_code(self, exc: ExaError) -> int:
        return exits.code_for(exc)


def cmd_serve(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    """``serve``, with ``--listen`` the placement service beside the loop (``service.server``)."""
    if args.stop:
        given = [f"--{k.replace('_', '-')}" for k in ("listen", "once", "tls_cert", "tls_key", "insecure", "oidc", "slurm_table", "slurm_accounts")
                 if getattr(args, k, None)]  # fmt: skip
        if given:
            raise SpecError(f"--stop stops the serve processes running on this state folder; it takes no {', '.join(given)}", source="command line")
        stopped = hw.serve_stop()
        if args.json:
            render.dump_json(console, {"stopped": stopped.stopped, "processes": [o.identity.pid for o in stopped.outcomes], "report": stopped.lines()})
        else:
            for line in stopped.lines():
                console.print(("✓ " if stopped.outcomes and stopped.stopped else "") + line)
        return exits.OK if stopped.stopped else exits.INTERNAL
    if args.listen is None:
        if args.tls_cert or args.tls_key or args.insecure or args.oidc:
            raise SpecError("--tls-cert, --tls-key, --insecure and --oidc say how to serve HTTP: add --listen", source="command line")
        return queue.cmd_serve(args, hw, console)
    if args.once:
        raise SpecError("--once runs one step and exits; a service with --listen keeps serving: drop one of them", source="command line")
    import examlops_policy.service.server as server

    return server.start(hw, CliAnswers(), listen=args.listen, tls_cert=args.tls_cert, tls_key=args.tls_key, insecure=args.insecure,
                        interval_s=args.interval.total_seconds(), out=console.file, slurm=True if args.slurm else None,
                        kubernetes=queue._kubernetes(args), oidc=args.oidc,
                        slurm_table=Path(args.slurm_table) if args.slurm_table else None,
                        slurm_accounts=Path(args.slurm_accounts) if args.slurm_accounts else None)  # fmt: skip


def register(hardware: Commands, common: argparse.ArgumentParser) -> None:
    """``serve``'s options of the placement service (the command itself: ``cli.queue``)."""
    choices = getattr(hardware, "choices", None)  # a group not named on the command line is not built (exa --help)
    p = choices.get("serve") if isinstance(choices, dict) else None
    if not isinstance(p, argparse.ArgumentParser):
        return  # not named on this command line: not built
    p.add_argument("--listen", metavar="ADDR", help="also serve the HTTP API (HOST:PORT or unix:PATH; docs/service.md)")
    p.add_argument("--tls-cert", metavar="FILE", help="--listen: serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="--listen: the certificate's key (PEM)")
    p.add_argument("--insecure", action="store_true", help="--listen: allow plain HTTP on an address that is not loopback")
    p.add_argument("--stop", action="store_true", help="stop the serve processes running on this state folder (SIGTERM: each finishes what is under way)")
    p.add_argument("--oidc", metavar="FILE", help="--listen: accept bearer JWTs of an OIDC issuer too, as this YAML file configures (docs/service.md)")
    p.set_defaults(handler=cmd_serve)
