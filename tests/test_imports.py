"""The import graph of the library: one way, no cycle, the store below the decision core.

Every ``examlops_policy`` module's imports are read from its source (module level, function bodies
and TYPE_CHECKING blocks alike: an import that only runs later is still a dependency), and:

* no cycle anywhere in the package;
* ``store/`` reaches nothing of the decision core (``_core/``), directly or through another module;
* the decision core imports no adapter: not the store's SQL, the OPA client, the façade, the
  command line, the executors or discovery.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import examlops_policy

PACKAGE = Path(examlops_policy.__file__).parent
CORE = "examlops_policy._core"
STORE = "examlops_policy.store"
# What the decision core may import besides itself: the values, the errors, the tables, the
# façade's return values and the store's narrow API (its protocol and rows).
CORE_MAY_IMPORT = ("examlops_policy.model", "examlops_policy.errors", "examlops_policy.tables", "examlops_policy.views", "examlops_policy.store.api")


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
