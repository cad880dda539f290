"""The command line only parses, calls the façade and renders: an import check keeps it so.

Every module of ``examlops_policy.cli`` may import the façade (``hardware``), the values it takes
and returns (``model``, ``views``, ``errors``), the readers and writers of user files (``specs``:
pool and workload YAML; ``audit``: checkpoints and keys; ``report``: the HTML page; ``focus``: the
FOCUS billing export; ``job_submit``: the Slurm job_submit plugin's decision table) and the CLI's
own modules; never the store, the tables, the policy engine or the placement core.
"""

from __future__ import annotations

import ast
from pathlib import Path

import examlops_policy.cli

ALLOWED = {
    "examlops_policy.hardware", "examlops_policy.model", "examlops_policy.views", "examlops_policy.errors",
    "examlops_policy.specs", "examlops_policy.audit", "examlops_policy.report", "examlops_policy.focus",
    "examlops_policy.quantities",  # values: CPU and memory sizes, written the one way they are read
    "examlops_policy.job_submit",  # the decision table Slurm's job_submit plugin reads (written like the FOCUS export)
    "examlops_policy.service.tokens",  # the placement service's bearer tokens (made, listed, revoked: exa tokens)
    "examlops_policy.service.server",  # the placement service, started by exa hardware serve --listen
    "examlops_policy.service.client",  # the command line as the service's client (it imports no decision code)
}  # fmt: skip
CLI = Path(examlops_policy.cli.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every examlops_policy module ``path`` imports, at any depth (function bodies and
    TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            # "from examlops_policy import audit" imports the module examlops_policy.audit.
            if node.module in ("examlops_policy", "examlops_policy.cli"):
                found.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                found.add(node.module)
    return {m for m in found if m.startswith("examlops_policy")}


def test_the_cli_imports_only_the_facade_its_values_and_its_renderers() -> None:
    files = sorted(CLI.glob("*.py"))
    assert len(files) > 5
    offending = {
        f"{path.name}: {module}"
        for path in files
        for module in imported_modules(path)
        if module not in ALLOWED and not module.startswith("examlops_policy.cli.")
    }
    assert not offending, sorted(offending)


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from examlops_policy.store import Store\n    from examlops_policy import tables\n", encoding="utf-8")
    assert imported_modules(bad) == {"examlops_policy.store", "examlops_policy.tables"}
