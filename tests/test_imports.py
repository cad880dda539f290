"""Imports: what importing costs, and the import graph of the library.

What importing costs: a module imports what it needs, the package's names load on first use.

The import graph: one way, no cycle, the store below the decision core. Every ``examlops_policy``
module's imports are read from its source (module level, function bodies and TYPE_CHECKING blocks
alike: an import that only runs later is still a dependency), and:

* no cycle anywhere in the package;
* ``store/`` reaches nothing of the decision core (``_core/``), directly or through another module;
* the decision core imports no adapter: not the store's SQL, the OPA client, the façade, the
  command line, the executors or discovery.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import examlops_policy


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


HEAVY = ("examlops_policy.hardware", "examlops_policy.store", "examlops_policy.opa", "examlops_policy._core", "rich", "yaml", "jsonschema", "cryptography")


@pytest.mark.parametrize("statement", ["import examlops_policy", "import examlops_policy.errors", "import examlops_policy.model", "from examlops_policy import Workload, SpecError"])
def test_the_package_and_its_values_import_without_the_engine(statement: str) -> None:
    loaded = loaded_after(statement)
    assert not {m for m in loaded if m.startswith(HEAVY)}


def test_every_public_name_is_the_object_of_its_home_module() -> None:
    names = set(examlops_policy.__all__) - {"place", "__version__"}
    assert set(examlops_policy._HOME_OF) == names
    for name in sorted(names):
        home = importlib.import_module(examlops_policy._HOME_OF[name])
        assert getattr(examlops_policy, name) is getattr(home, name), name
    assert set(examlops_policy.__all__) <= set(dir(examlops_policy))


@pytest.mark.parametrize("package", ["examlops_policy.opa", "examlops_policy.executors"])
def test_a_packages_names_load_from_their_modules_on_first_use(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module._HOME_OF) == set(module.__all__)
    for name in sorted(module.__all__):
        assert getattr(module, name) is getattr(importlib.import_module(module._HOME_OF[name]), name), name
    with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
        module.Nonsense  # noqa: B018


@pytest.mark.parametrize(
    ("statement", "not_loaded"),
    [
        # The content proof and the transport: not the bundle builder, the server or an HTTP stack.
        ("import examlops_policy.opa.content", ("examlops_policy.opa.bundle", "examlops_policy.opa.server", "http.client", "ssl")),
        ("import examlops_policy.opa.transport", ("http.client", "ssl")),
        # The Slurm executor: not the Kubernetes one or its client.
        ("import examlops_policy.executors.slurm", ("examlops_policy.executors.kubernetes", "examlops_policy.executors.kubernetes_api")),
        # The estimator: neither scheduler's client nor a thread pool until a pool of theirs is asked.
        ("import examlops_policy.estimates.gather", ("examlops_policy.estimates.slurm", "examlops_policy.estimates.kubernetes", "concurrent.futures")),
        # The SQLite store: its migrations are files of the package, read without importlib.resources.
        ("import examlops_policy.store.sqlite", ("zipfile", "importlib.resources")),
    ],
)
def test_a_module_imports_only_what_it_needs(statement: str, not_loaded: tuple[str, ...]) -> None:
    assert loaded_after(statement) & set(not_loaded) == set()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
        examlops_policy.Nonsense  # noqa: B018
    with pytest.raises(ImportError):
        exec("from examlops_policy import Nonsense")  # noqa: S102


def test_the_e8_import_path_gets_every_name() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "from examlops.hardware import *; import examlops_policy; print(sorted(n for n in examlops_policy.__all__ if n not in globals()))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert loaded.strip() == "[]"


# --- the import graph ------------------------------------------------------------------------------

PACKAGE = Path(examlops_policy.__file__).parent
CORE = "examlops_policy._core"
STORE = "examlops_policy.store"
# What the decision core may import besides itself: the values, the errors, the tables, the
# carbon figures (accounting: pure, from the tables), the façade's return values and the store's
# narrow API (its protocol and rows), and the node packer (pure: nodes, devices and shares, and
# the packers that choose among them, the ones the simulator replays with), the one writer of
# canonical bytes (shared with the audit log, below the core), the quantities' written forms
# (pure: how a message says cores and sizes) and the records' base (pure: equality, hash, repr).
CORE_MAY_IMPORT = (
    "examlops_policy.model", "examlops_policy.errors", "examlops_policy.tables", "examlops_policy.accounting",
    "examlops_policy.views", "examlops_policy.store.api", "examlops_policy._nodes", "examlops_policy._node_packers",
    "examlops_policy._canonical", "examlops_policy.quantities", "examlops_policy._record",
)  # fmt: skip


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports_of(path: Path, known: Iterable[str]) -> set[str]:
    """The package modules ``path`` imports (``from a import b`` names module ``a.b`` when it is
    one, else ``a``); a package's ``__init__`` runs first but is not counted as a dependency of
    its own submodules."""
    known = set(known)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
    return {m for m in found if m in known}


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(root)
    return {name: imports_of(path, found) - {name} for name, path in found.items()}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def reachable(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in edges.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_package_has_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 40
    assert cycles(edges) == []


def test_the_store_reaches_nothing_of_the_decision_core() -> None:
    edges = graph()
    stores = [m for m in edges if within(m, STORE)]
    assert stores
    offending = {f"{m} -> {r}" for m in stores for r in reachable(edges, m) if within(r, CORE)}
    assert not offending, sorted(offending)


def test_the_decision_core_imports_no_adapter() -> None:
    edges = graph()
    core = [m for m in edges if within(m, CORE)]
    assert len(core) >= 6
    offending = {
        f"{m} -> {i}" for m in core for i in edges[m] if not within(i, CORE) and not any(within(i, ok) for ok in CORE_MAY_IMPORT)
    }
    assert not offending, sorted(offending)


def test_the_checks_see_a_cycle_and_a_forbidden_path(tmp_path: Path) -> None:
    root = tmp_path / "examlops_policy"
    (root / "store").mkdir(parents=True)
    (root / "_core").mkdir()
    (root / "__init__.py").write_text("", encoding="utf-8")
    (root / "store" / "__init__.py").write_text("from examlops_policy import helper\n", encoding="utf-8")
    (root / "helper.py").write_text("def f():\n    from examlops_policy._core import engine\n", encoding="utf-8")
    (root / "_core" / "__init__.py").write_text("", encoding="utf-8")
    (root / "_core" / "engine.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import examlops_policy.helper\n", encoding="utf-8")
    edges = graph(root)
    assert edges["examlops_policy.store"] == {"examlops_policy.helper"}
    assert cycles(edges) == [["examlops_policy._core.engine", "examlops_policy.helper"]]
    assert "examlops_policy._core.engine" in reachable(edges, "examlops_policy.store")
