"""Headless Chromium for the tests that render the FinOps report (scripts/chromium-up)."""

from __future__ import annotations

import os
import shutil
import subprocess
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
