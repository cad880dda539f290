"""``exa``: the ExaMLOps command line for hardware placement, audit and finops.

Each command parses its arguments, calls one method of the library's façade
(``examlops_policy.hardware.Hardware``) and renders what it returns; the workflows live in the
library. Exit codes: one table in ``examlops_policy.cli.exits`` (docs/cli.md shows it). With
``--json`` an error is a JSON object on stderr: ``{"error": ..., "code": ..., "message": ...}``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from examlops_policy.cli import exits
from examlops_policy.cli.console import Console
from examlops_policy.errors import ExaError, SpecError

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware

Handler = Callable[[argparse.Namespace, "Hardware", Console], int]
# What argparse takes for a (negative) value rather than an option: a minus, then a digit.
_NEGATIVE_VALUE: Final = re.compile(r"^-\.?\d")


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

    A word that starts with a minus and a digit (``-5Gi``, ``-1h``, ``-0.5``) is a value, not an
    option (no option starts with a digit): ``--memory-per-node -5Gi`` reaches the option's reader,
    which says that it cannot be negative, instead of argparse's "expected one argument".

    With ``wanted`` (the words of the command line), a subcommand whose name is not among them is
    listed (name and help, so usage, help and errors read the same) but its arguments are not
    built: building every command's arguments costs a cold command about ten milliseconds.
    """

    def __init__(self, *args: Any, wanted: frozenset[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE
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


GROUPS: Final = ("hardware", "audit", "finops", "models", "opa", "policy", "slurm", "kueue")


def _common_options(parser: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """``--json``, ``--home`` and ``--debug``: after the command, or before the group (``prefix``
    keeps the root's values apart: a subcommand's defaults would overwrite them)."""
    parser.add_argument("--json", action="store_true", dest=f"{prefix}json", help="machine-readable output")
    parser.add_argument("--home", dest=f"{prefix}home", metavar="DIR", help="state directory (default $EXA_HOME or ~/.local/share/examlops)")
    parser.add_argument("--debug", action="store_true", dest=f"{prefix}debug", help="show tracebacks")


def build_parser(group: str | None = None, *, wanted: frozenset[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``group``) only that group's commands, or (``wanted``, the
    words of a command line) only the commands it names: a command builds the parser it needs,
    not every one. ``--json``, ``--home`` and ``--debug`` go before the group or after the command
    (``exa --home X hardware pools`` or ``exa hardware pools --home X``)."""
    common = _Parser(add_help=False)
    _common_options(common)

    parser = _Parser(prog="exa", description="ExaMLOps: heterogeneous hardware placement by policy.", wanted=wanted)
    _common_options(parser, prefix="root_")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{" + ",".join(GROUPS) + "}")
    # A group's command modules are imported only when that group is built.
    if group in (None, "hardware"):
        from examlops_policy.cli import decisions, jobs, pools, queue, simulate

        hardware = groups.add_parser("hardware", help="device pools and placements").add_subparsers(dest="command", required=True)
        pools.register(hardware, common)
        decisions.register(hardware, common)
        queue.register(hardware, common)
        jobs.register(hardware, common)
        simulate.register(hardware, common)
    if group in (None, "audit", "finops", "models"):
        from examlops_policy.cli import ledger

        ledger.register(groups, common)
    if group in (None, "opa"):
        from examlops_policy.cli import opa_cmds

        opa_cmds.register(groups, common)
    if group in (None, "policy"):
        from examlops_policy.cli import policy

        policy.register(groups, common)
    if group in (None, "slurm"):
        from examlops_policy.cli import slurm

        slurm.register(groups, common)
    if group in (None, "kueue"):
        from examlops_policy.cli import kueue

        kueue.register(groups, common)
    return parser


def _group(given: Sequence[str]) -> str | None:
    """The command group named on the command line (the first word that is no option or the
    value of ``--home``)."""
    words = iter(given)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` chose (the deepest subcommand), else ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            sub = action.choices.get(chosen) if isinstance(chosen, str) else None
            if sub is not None:
                return _command_parser(sub, args)
    return parser


def _merge_root_options(args: argparse.Namespace) -> None:
    """The options given before the group count as if given after the command."""
    args.json = bool(getattr(args, "json", False) or args.root_json)
    args.debug = bool(getattr(args, "debug", False) or args.root_debug)
    if getattr(args, "home", None) is None:
        args.home = args.root_home


def _pipe_closed() -> int:
    """The reader of standard output went away (``exa ... | head``): stop quietly, as a Unix tool
    does; the rest of the output goes nowhere instead of raising again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return exits.PIPE_CLOSED


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    first = _group(given)
    group = first if first in GROUPS else None
    try:
        parser = build_parser(group, wanted=frozenset(a for a in given if not a.startswith("-")))
        args, extra = parser.parse_known_args(given)
    except _NotBuilt:  # not expected (argparse picks a subcommand by a word of the line); built in full then
        parser = build_parser(group)
        args, extra = parser.parse_known_args(given)
    if extra:
        # An option the command does not know: the command's own usage says which it takes.
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    _merge_root_options(args)
    console = _console()
    from examlops_policy.hardware import Hardware

    try:
        hw = Hardware(args.home)  # made absolute once; an empty --home or EXA_HOME is refused
    except SpecError as exc:
        code = exits.code_for(exc)
        _error(type(exc).__name__, code, str(exc), as_json=args.json)
        return code
    try:
        handler: Handler = args.handler
        code = handler(args, hw, console)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except ExaError as exc:
        if args.debug:
            import traceback

            traceback.print_exc()
        code = exits.code_for(exc)
        _error(type(exc).__name__, code, str(exc), as_json=args.json)
        return code
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    finally:
        hw.close()


if __name__ == "__main__":
    sys.exit(main())
