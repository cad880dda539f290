"""Reliability suite fixtures. Tests marked ``slow`` run only when asked (``-m slow`` or EXA_SLOW=1)."""

from __future__ import annotations

import os

import pytest

from reliability.backends import backend  # noqa: F401  (the fixture, for every test here)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("EXA_SLOW") or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or EXA_SLOW=1 (or benchmarks/reliability.py)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
