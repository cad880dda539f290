"""``exa``'s console: piped, the same characters rich prints, without importing rich."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console as RichConsole
from rich.text import Text as RichText

from examlops_policy.cli import console as console_module
from examlops_policy.cli.console import Console, Text

from conftest import run_exa

STYLES = ("", "green", "red", "yellow", "dim")
# Printable text and everything rich treats specially: control characters, tab stops, wide
# characters, markup- and emoji-looking text, escape sequences.
TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(list("\t\r\n\x07\x08\x0b\x0c\x1b[]:日本 é"))), max_size=60)


def rich_output(objects: list[object], style: str | None, *, emoji: bool = False) -> str:
    out = io.StringIO()
    RichConsole(file=out, highlight=False, markup=False, soft_wrap=True, emoji=emoji, width=160).print(*objects, style=style)
    return out.getvalue()


def plain_output(objects: list[object], style: str | None, *, emoji: bool = False) -> str:
    out = io.StringIO()
    Console(file=out, width=160, emoji=emoji).print(*objects, style=style)
    return out.getvalue()


@pytest.fixture()
def piped(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(TEXT, st.sampled_from(STYLES), st.booleans()), min_size=0, max_size=3), style=st.sampled_from((None, *STYLES)))
def test_piped_output_is_what_rich_prints(parts: list[tuple[str, str, bool]], style: str | None) -> None:
    ours: list[object] = [Text(t, style=s) if styled else t for t, s, styled in parts]
    theirs: list[object] = [RichText(t, style=s) if styled else t for t, s, styled in parts]
    assert plain_output(ours, style) == rich_output(theirs, style)


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_error_lines_keep_richs_emoji_codes(text: str) -> None:
    line = f"SpecError: {text} :warning:"
    assert plain_output([line], "red", emoji=True) == rich_output([line], "red", emoji=True)


def test_printing_piped_never_imports_rich(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from examlops_policy.cli.console import Console, Text\n"
        "c = Console(width=160)\n"
        "c.print('plain', Text('styled', style='green'), style='dim')\n"
        "print('rich' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out == "plain styled\nFalse\n"


@pytest.mark.parametrize(
    ("env", "tty"),
    [({}, False), ({}, True), ({"FORCE_COLOR": "1"}, False), ({"FORCE_COLOR": ""}, True), ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, True),
     ({"TTY_COMPATIBLE": "1"}, False), ({"TTY_COMPATIBLE": "x"}, True)],
)  # fmt: skip
def test_a_terminal_is_what_rich_calls_one(piped: pytest.MonkeyPatch, env: dict[str, str], tty: bool) -> None:
    for key, value in env.items():
        piped.setenv(key, value)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    assert console_module.is_terminal(stream) == RichConsole(file=stream).is_terminal


def test_on_a_terminal_rich_prints_the_styles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    Console(file=out, width=80).print(Text("placed", style="green"))
    assert "\x1b[" in out.getvalue() and "placed" in out.getvalue()


def test_a_piped_command_imports_neither_rich_nor_the_other_groups(exa_home: Path) -> None:
    """``exa hardware pools`` piped: no rich, and none of the other groups' command modules."""
    code = (
        "import sys\n"
        "from examlops_policy.cli.main import main\n"
        "sys.argv = ['exa', 'hardware', 'pools']\n"
        "code = main()\n"
        "loaded = sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.') or m in "
        "('examlops_policy.cli.ledger', 'examlops_policy.cli.policy', 'examlops_policy.cli.opa_cmds'))\n"
        "print(code, loaded)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "EXA_HOME": str(exa_home)})
    assert out.stdout.splitlines()[-1] == "0 []"


def test_a_reader_that_goes_away_ends_the_command_quietly(exa_home: Path) -> None:
    pools = exa_home.parent / "pools.yaml"
    pools.write_text("pools:\n" + "".join(f"  - {{name: pool-{i:02d}, target: hpc, accelerator: amd, count: 4, region: eu}}\n" for i in range(40)), encoding="utf-8")
    run_exa(exa_home, "hardware", "apply", "-f", str(pools), check=True)
    env = {**os.environ, "EXA_HOME": str(exa_home)}
    exa = Path(sys.executable).parent / "exa"
    # The reader closes the pipe before exa writes: every write fails (EPIPE).
    proc = subprocess.Popen([str(exa), "hardware", "pools"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141  # exits.PIPE_CLOSED, as a Unix tool killed by SIGPIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
