"""``exa``: the ExaMLOps command line for hardware placement, audit and finops.

Each command parses its arguments, calls one method of the library's façade
(``examlops_policy.hardware.Hardware``) and renders what it returns; the workflows live in the
library. Exit codes: one table in ``examlops_policy.cli.exits`` (the README shows it). With
``--json`` an error is a JSON object on stderr: ``{"error": ..., "code": ..., "message": ...}``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

from examlops_policy.cli import exits
from examlops_policy.cli.console import Console, on_broken_pipe
from examlops_policy.errors import ExaError

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware

Handler = Callable[[argparse.Namespace, "Hardware", Console], int]


def _console() -> Console:
    # Piped output keeps whole table columns instead of rich's 80-column default.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(width=width)


def _error(name: str, code: int, message: str, *, as_json: bool) -> None:
    if as_json:
        import json

        sys.stderr.write(json.dumps({"error": name, "code": code, "message": message}, ensure_ascii=False) + "\n")
    else:
        Console(stderr=True, emoji=True).print(f"{name}: {message}", style="red")


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as JSON on stderr when ``--json`` was asked for (exit 2)."""

    def error(self, message: str) -> NoReturn:
        if "--json" in sys.argv[1:]:
            _error("UsageError", exits.BAD_INPUT, f"{self.prog}: {message}", as_json=True)
            sys.exit(exits.BAD_INPUT)
        super().error(message)


GROUPS: Final = ("hardware", "audit", "finops", "models", "opa", "policy")


def build_parser(group: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``group``) only that group's commands: a command builds the
    parser it needs, not every one."""
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--home", help="state directory (default $EXA_HOME or ~/.local/share/examlops)")
    common.add_argument("--debug", action="store_true", help="show tracebacks")

    parser = _Parser(prog="exa", description="ExaMLOps: heterogeneous hardware placement by policy.")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{" + ",".join(GROUPS) + "}")
    # A group's command modules are imported only when that group is built.
    if group in (None, "hardware"):
        from examlops_policy.cli import decisions, jobs, pools

        hardware = groups.add_parser("hardware", help="device pools and placements").add_subparsers(dest="command", required=True)
        pools.register(hardware, common)
        decisions.register(hardware, common)
        jobs.register(hardware, common)
    if group in (None, "audit", "finops", "models"):
        from examlops_policy.cli import ledger

        ledger.register(groups, common)
    if group in (None, "opa"):
        from examlops_policy.cli import opa_cmds

        opa_cmds.register(groups, common)
    if group in (None, "policy"):
        from examlops_policy.cli import policy

        policy.register(groups, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in given if not a.startswith("-")), None)
    args = build_parser(first if first in GROUPS else None).parse_args(given)
    console = _console()
    from examlops_policy.hardware import Hardware

    hw = Hardware(Path(args.home).expanduser() if args.home else None)
    try:
        handler: Handler = args.handler
        return handler(args, hw, console)
    except ExaError as exc:
        if args.debug:
            import traceback

            traceback.print_exc()
        code = exits.code_for(exc)
        _error(type(exc).__name__, code, str(exc), as_json=getattr(args, "json", False))
        return code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away (exa ... | head)
        on_broken_pipe()
        raise  # not reached: on_broken_pipe exits
    finally:
        hw.close()


if __name__ == "__main__":
    sys.exit(main())
