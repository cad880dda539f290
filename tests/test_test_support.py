"""The shared test support is the one place for what it provides (issue 29).

tests/conftest.py and the ``tests/*_support.py`` modules hold the helpers and fixtures that several
test files use (running ``exa``, placing a workload, a ``Hardware`` on each backend, the store's
clock, the test Kubernetes cluster...). A test module that defines a function, class or fixture of
a name one of them provides writes it again, or shadows it with something else under the same
name: both are refused here, naming the module, the line and where the shared one lives.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def support_modules() -> list[Path]:
    return [TESTS / "conftest.py", *sorted(p for p in TESTS.glob("*_support.py") if not p.name.startswith("test_"))]


def suite_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def defined(path: Path) -> dict[str, int]:
    """The public names a module defines at its top level with ``def`` or ``class`` (fixtures
    included; pytest hooks and ``_private`` names left out): name -> line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith(("_", "pytest_"))
    }


def provided(support: Iterable[Path]) -> dict[str, Path]:
    """Each name the shared support defines -> the module that defines it."""
    return {name: path for path in support for name in defined(path)}


def shown(path: Path) -> str:
    return str(path.relative_to(TESTS.parent)) if path.is_relative_to(TESTS.parent) else str(path)


def redefinitions(support: Iterable[Path], modules: Iterable[Path]) -> list[str]:
    """``file:line defines NAME, which SUPPORT provides``, for each such definition in ``modules``."""
    shared = provided(support)
    return [
        f"{shown(path)}:{line} defines {name}, which {shown(shared[name])} provides"
        for path in modules
        for name, line in sorted(defined(path).items())
        if name in shared and not name.startswith("test_")
    ]


def test_no_test_module_defines_again_what_the_shared_support_provides() -> None:
    found = redefinitions(support_modules(), suite_modules())
    assert not found, "use the shared one (or name a different thing differently):\n" + "\n".join(found)


def test_the_shared_support_provides_the_helpers_once_repeated_across_test_files() -> None:
    shared = provided(support_modules())
    for name in ("exa_json", "run_exa", "exa_home", "hw", "clocked", "placed", "refused", "verdict", "placed_in", "granted", "Clock", "cluster", "fake_node"):
        assert name in shared, f"{name} is no longer provided by the shared test support"
    assert len(suite_modules()) > 100  # the scan sees the suite (tests/ and tests/reliability/)


def test_a_module_that_writes_a_shared_helper_again_is_named(tmp_path: Path) -> None:
    support = tmp_path / "conftest.py"
    support.write_text("import pytest\n\n@pytest.fixture()\ndef home():\n    pass\n\ndef placed(hw):\n    pass\n\ndef pytest_configure(config):\n    pass\n")
    module = tmp_path / "test_x.py"
    module.write_text(
        "def pytest_configure(config):\n    pass\n\ndef _own():\n    pass\n\nclass placed:\n    pass\n\n"
        "def test_home():\n    pass\n\ndef home(tmp_path):\n    pass\n"
    )
    assert redefinitions([support], [module]) == [
        f"{module}:13 defines home, which {support} provides",
        f"{module}:7 defines placed, which {support} provides",
    ]
