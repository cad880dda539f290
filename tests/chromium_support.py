"""Headless Chromium for the tests that render the FinOps report (scripts/chromium-up)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def chromium() -> str:
    """The Chromium binary; skips (or fails under EXA_REQUIRE_SERVICES) where none is installed."""
    found = os.environ.get("EXA_CHROMIUM") or shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        if os.environ.get("EXA_REQUIRE_SERVICES"):
            pytest.fail("chromium is not installed (scripts/chromium-up) and EXA_REQUIRE_SERVICES is set")
        pytest.skip("chromium is not installed (scripts/chromium-up)")
    return found


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium with a private profile in ``tmp_path``, run there."""
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180, check=True, cwd=tmp_path
    )


def png_facts(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decompressed image data) of a PNG file: a
    screenshot that is one flat colour has very few."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat, at = b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            idat += data[at + 8 : at + 8 + length]
        at += 12 + length
    return width, height, len(set(zlib.decompress(idat)))
