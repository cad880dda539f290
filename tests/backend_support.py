"""A ``Hardware`` on each state backend in turn (SQLite, then PostgreSQL), for the tests that run
on both: ``hw``, and ``clocked`` (on a store whose clock the test moves).

A module imports the fixtures it uses together with ``backend`` (which they build on) and names the
pools to register with a marker::

    from tests.backend_support import backend, hw  # noqa: F401 - fixtures

    pytestmark = pytest.mark.hw_pools(SMALL)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.hardware import Hardware
from reliability.backends import Backend, backend  # noqa: F401 - the fixture these build on
from reliability.harness import open_hardware as open_on_backend
from tests.clock_support import Clock


@contextmanager
def _on_backend(backend: Backend, opa_home: Path, request: pytest.FixtureRequest, **store_options: Any) -> Iterator[Hardware]:
    marker = request.node.get_closest_marker("hw_pools")
    if marker is None:
        pytest.fail(f"{request.node.nodeid}: hw and clocked need a hw_pools marker naming the pools to register", pytrace=False)
    made = open_on_backend(backend, opa_home, **store_options)
    try:
        made.apply(list(marker.args))
        yield made
    finally:
        made.close()


@pytest.fixture()
def hw(backend: Backend, opa_home: Path, request: pytest.FixtureRequest) -> Iterator[Hardware]:
    """A ``Hardware`` on each state backend in turn (``backend``: SQLite, then PostgreSQL), deciding
    with the session's OPA, with the pools of the test's ``hw_pools`` marker registered (a module
    says ``pytestmark = pytest.mark.hw_pools(POOL, ...)``)."""
    with _on_backend(backend, opa_home, request) as made:
        yield made


@pytest.fixture()
def clocked(backend: Backend, opa_home: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Hardware, Clock]]:
    """``hw`` on a store whose clock the test moves: (the ``Hardware``, its ``Clock``)."""
    clock = Clock()
    with _on_backend(backend, opa_home, request, clock=clock) as made:
        yield made, clock
