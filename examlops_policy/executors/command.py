"""Running a scheduler or vendor tool: argument lists, never a shell, always a timeout.

``Runner`` is the seam: the real one runs a process, tests pass a fake that answers from recorded
outputs. A runner returns the exit status and both streams; it raises ``ExecutorError`` only when
the program cannot be run at all (not installed, not executable) or does not finish in time.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from examlops_policy.errors import ExecutorError

DEFAULT_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left: its argument list, exit status and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def reason(self) -> str:
        """The last line of stderr (or stdout), for an error message."""
        for stream in (self.stderr, self.stdout):
            lines = [line.strip() for line in stream.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit status {self.returncode}"


class Runner(Protocol):
    """Runs ``argv`` (no shell) and returns its result; ExecutorError if it cannot run or hangs."""

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult: ...


def run_command(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None) -> CommandResult:
    """Run ``argv`` as a list with ``shell=False``, capturing text output, killed after ``timeout``."""
    args = tuple(argv)
    try:
        done = subprocess.run(  # noqa: S603 - an argument list, never a shell
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise ExecutorError(f"{args[0]}: command not found") from exc
    except PermissionError as exc:
        raise ExecutorError(f"{args[0]}: not executable ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise ExecutorError(f"{args[0]}: no answer within {timeout:g} s") from exc
    return CommandResult(args, done.returncode, done.stdout, done.stderr)
