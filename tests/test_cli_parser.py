"""``exa`` builds only the parsers a command line names, and reads the same as the whole parser."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.cli import main as cli_main
from examlops_policy.cli.main import GROUPS, build_parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the whole command line: ("hardware", "place"), ("audit", "verify"), ..."""
    for name, sub in subcommands(parser).items():
        yield (*prefix, name)
        yield from paths(sub, (*prefix, name))


def described(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """What a parser accepts: every argument's options, destination, default, choices, ..."""
    return [
        (a.option_strings, a.dest, a.nargs, a.default, a.choices if not isinstance(a, argparse._SubParsersAction) else sorted(a.choices),
         a.required, a.type, a.help, a.metavar, type(a).__name__)
        for a in parser._actions
    ] + [sorted(parser._defaults.items(), key=lambda kv: kv[0])]  # fmt: skip


def along(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[argparse.ArgumentParser]:
    found = [parser]
    for word in path:
        found.append(subcommands(found[-1])[word])
    return found


FULL = build_parser()
ALL_PATHS = sorted(paths(FULL))


def test_every_group_has_commands() -> None:
    assert {p[0] for p in ALL_PATHS} == set(GROUPS)
    assert len(ALL_PATHS) > 30


@pytest.mark.parametrize("path", ALL_PATHS, ids=" ".join)
def test_a_command_line_builds_its_own_parsers_in_full(path: tuple[str, ...]) -> None:
    built = build_parser(path[0], wanted=frozenset(path))
    full = along(build_parser(path[0]), path)
    for ours, theirs in zip(along(built, path), full):
        assert ours.format_help() == theirs.format_help()
        assert ours.format_usage() == theirs.format_usage()
    assert described(along(built, path)[-1]) == described(full[-1])


@pytest.mark.parametrize("group", GROUPS)
def test_a_groups_help_lists_every_command_unbuilt(group: str) -> None:
    built = build_parser(group, wanted=frozenset({group}))
    assert along(built, (group,))[-1].format_help() == along(build_parser(group), (group,))[-1].format_help()


def test_the_roots_help_builds_no_group_and_reads_the_same() -> None:
    """``exa --help`` (no word on the command line) lists the groups without building any of them."""
    assert build_parser(None, wanted=frozenset()).format_help() == build_parser(None).format_help()


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return err.getvalue()


@pytest.mark.parametrize("argv", [["hardware", "nonsense"], ["hardware"], ["audit"], ["hardware", "discover"], ["hardware", "place", "--nope"], ["policy", "-h"]])
def test_usage_errors_and_help_read_the_same(argv: list[str]) -> None:
    wanted = frozenset(a for a in argv if not a.startswith("-"))
    if argv[-1] == "-h":
        out, full = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            build_parser(argv[0], wanted=wanted).parse_args(argv)
        with contextlib.redirect_stdout(full), pytest.raises(SystemExit):
            build_parser(argv[0]).parse_args(argv)
        assert out.getvalue() == full.getvalue()
        return
    assert parse_error(build_parser(argv[0], wanted=wanted), argv) == parse_error(build_parser(argv[0]), argv)


def test_a_command_that_was_not_built_is_built_when_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should argparse ever choose a command the line's words did not name, main builds them all."""
    real = cli_main.build_parser
    asked: list[frozenset[str] | None] = []

    def too_few(group: str | None = None, *, wanted: frozenset[str] | None = None) -> argparse.ArgumentParser:
        asked.append(wanted)
        return real(group, wanted=frozenset({"hardware"}) if len(asked) == 1 else wanted)

    monkeypatch.setattr(cli_main, "build_parser", too_few)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main.main(["hardware", "pools", "--json", "--home", str(tmp_path / "home")])
    assert code == 0 and json.loads(out.getvalue()) == []
    assert asked == [frozenset({"hardware", "pools", str(tmp_path / "home")}), None]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["hardware", "admit", "--max", "0"], "; leave out --max to admit every workload that fits"),
        (["hardware", "burst-events", "--limit", "0"], ""),
        (["hardware", "decisions", "--limit", "0"], "; page through more with --cursor"),
    ],
    ids=["admit", "burst-events", "decisions"],
)
def test_a_count_out_of_range_names_only_options_its_command_has(argv: list[str], hint: str) -> None:
    """Only ``decisions`` pages with --cursor: ``admit --max 0`` and ``burst-events --limit 0`` say
    the range without pointing at an option they do not have."""
    message = parse_error(build_parser(argv[0]), argv)
    option = argv[-2]
    assert message.rstrip().endswith(f"{option}: must be from 1 to 1000000 (got '0'){hint}"), message
