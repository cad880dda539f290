"""Where ``exa`` writes for people: rich on a terminal, plain text when piped.

Piped, a command writes the same characters rich would (no styles, no wrapping) without importing
rich: a cold command that a script runs spends its time on the work, not on a terminal library.
rich is imported on the first print to a terminal (as rich itself decides what a terminal is:
``TTY_COMPATIBLE``, ``FORCE_COLOR``, else ``isatty()``). ``tests/test_cli_console.py`` holds the
plain output equal to rich's.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import rich.console

# What rich drops from printed text (bell, backspace, vertical tab, form feed, carriage return).
_STRIPPED = dict.fromkeys((7, 8, 11, 12, 13))
# Something rich might read as an emoji code (``:smile:``), where emoji codes are on.
_EMOJI_LIKE = re.compile(r":\S+?:")


class Text:
    """A line with a style (``"green"``, ``"dim"``): the style shows on a terminal only."""

    __slots__ = ("plain", "style")

    def __init__(self, text: str = "", style: str = "") -> None:
        self.plain = text
        self.style = style

    def __str__(self) -> str:
        return self.plain

    def __repr__(self) -> str:
        return f"Text({self.plain!r}, style={self.style!r})"


def is_terminal(stream: TextIO) -> bool:
    """rich's own test, so that both paths agree on which one prints."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Console:
    """The subset of ``rich.console.Console`` the commands use: ``print``, ``file``, ``is_terminal``."""

    def __init__(self, *, file: TextIO | None = None, stderr: bool = False, width: int | None = None, emoji: bool = False) -> None:
        self._file = file
        self._stderr = stderr
        self._width = width
        self._emoji = emoji
        self._rich: rich.console.Console | None = None

    @property
    def file(self) -> TextIO:
        if self._file is not None:
            return self._file
        return sys.stderr if self._stderr else sys.stdout

    @property
    def is_terminal(self) -> bool:
        return is_terminal(self.file)

    def rich_console(self) -> rich.console.Console:
        """The rich console behind this one (imported on first use)."""
        if self._rich is None:
            from rich.console import Console as RichConsole

            class _Quiet(RichConsole):
                """rich would exit with status 1 on a closed pipe; ``cli.main`` decides instead."""

                def on_broken_pipe(self) -> None:
                    self.quiet = True
                    raise BrokenPipeError

            # No markup: names, reasons and messages print as they are ("[count]" is text, not a style).
            self._rich = _Quiet(
                file=self._file, stderr=self._stderr, highlight=False, markup=False, soft_wrap=True, emoji=self._emoji, width=self._width
            )
        return self._rich

    def print(self, *objects: Any, style: str | None = None, markup: bool | None = None, highlight: bool | None = None) -> None:
        del markup, highlight  # never markup, never highlighting: the same on both paths
        text = " ".join(o.plain if isinstance(o, Text) else o if isinstance(o, str) else "\0" for o in objects)
        if self.is_terminal or "\0" in text or "\t" in text or (self._emoji and _EMOJI_LIKE.search(text)):
            # A terminal; or something only rich renders (a table, tab stops, :emoji: codes).
            self._print_rich(objects, style)
            return
        # A closed pipe (``exa ... | head``) raises BrokenPipeError to ``cli.main``, which stops quietly.
        self.file.write(text.translate(_STRIPPED) + "\n")
        self.file.flush()

    def _print_rich(self, objects: tuple[Any, ...], style: str | None) -> None:
        from rich.text import Text as RichText

        shown = [RichText(o.plain, style=o.style) if isinstance(o, Text) else o for o in objects]
        self.rich_console().print(*shown, style=style)
