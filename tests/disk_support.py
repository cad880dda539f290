"""A small file system to fill: how the tests make a disk full (needs root to mount a tmpfs)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(folder: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at ``folder/small`` (skips the test where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounts a small tmpfs to fill the disk (needs root)")
    mount = folder / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write until the file system refuses (ENOSPC); the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC
    finally:
        os.close(fd)
    return filler


@contextmanager
def read_only(mount: Path) -> Iterator[Path]:
    """``mount`` (a file system ``small_tmpfs`` made) remounted read-only for the block."""
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
    try:
        yield mount
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True, capture_output=True)
