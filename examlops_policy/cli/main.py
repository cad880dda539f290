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
from typing import TYPE_CHECKING, Any, Final, NoReturn

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
    """argparse, with a usage error as JSON on stderr when ``--json`` was asked for (exit 2).

    With ``wanted`` (the words of the command line), a subcommand whose name is not among them is
    listed (name and help, so usage, help and errors read the same) but its arguments are not
    built: building every command's arguments costs a cold command about ten milliseconds.
    """

    def __init__(self, *args: Any, wanted: frozenset[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)
        self.wanted = wanted

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        if isinstance(action, _Commands):
            action.wanted = self.wanted
        return action

    def error(self, message: str) -> NoReturn:
        if "--json" in sys.argv[1:]:
            _error("UsageError", exits.BAD_INPUT, f"{self.prog}: {message}", as_json=True)
            sys.exit(exits.BAD_INPUT)
        super().error(message)


class _NotBuilt(Exception):
    """argparse chose a subcommand that was listed but not built (``main`` then builds them all)."""


class _Unbuilt:
    def parse_known_args(self, args: object = None, namespace: object = None) -> NoReturn:
        raise _NotBuilt


class _Sink:
    """Takes a command's registration (arguments, defaults, groups, subcommands) and keeps nothing."""

    def __getattr__(self, name: str) -> Callable[..., _Sink]:
        return self._take

    def _take(self, *args: object, **kwargs: object) -> _Sink:
        return self


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """A group's subcommands: only those named on the command line are built (see ``_Parser``)."""

    wanted: frozenset[str] | None = None

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        aliases = tuple(kwargs.get("aliases", ()))
        if self.wanted is None or not self.wanted.isdisjoint((name, *aliases)):
            return super().add_parser(name, wanted=self.wanted, **kwargs)
        if "help" in kwargs:
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, kwargs["help"]))
        for key in (name, *aliases):
            self._name_parser_map[key] = _Unbuilt()
        return _Sink()


GROUPS: Final = ("hardware", "audit", "finops", "models", "opa", "policy")


def build_parser(group: str | None = None, *, wanted: frozenset[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``group``) only that group's commands, or (``wanted``, the
    words of a command line) only the commands it names: a command builds the parser it needs,
    not every one."""
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--home", help="state directory (default $EXA_HOME or ~/.local/share/examlops)")
    common.add_argument("--debug", action="store_true", help="show tracebacks")

    parser = _Parser(prog="exa", description="ExaMLOps: heterogeneous hardware placement by policy.", wanted=wanted)
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
    group = first if first in GROUPS else None
    try:
        args = build_parser(group, wanted=frozenset(a for a in given if not a.startswith("-"))).parse_args(given)
    except _NotBuilt:  # not expected (argparse picks a subcommand by a word of the line); built in full then
        args = build_parser(group).parse_args(given)
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
