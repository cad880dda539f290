"""The command line only parses, calls the façade and renders: an import check keeps it so.

Every module of ``examlops_policy.cli`` may import the façade (``hardware``), the values it takes
and returns (``model``, ``views``, ``errors``), the readers and writers of user files (``specs``:
pool and workload YAML; ``audit``: checkpoints and keys; ``report``: the HTML page; ``focus``: the
FOCUS billing export; ``job_submit``: the Slurm job_submit plugin's decision table) and the CLI's
own modules; never the store, the tables, the policy engine or the placement core.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import examlops_policy.cli

from conftest import run_exa, shared_opa_env

ALLOWED = {
    "examlops_policy.hardware", "examlops_policy.model", "examlops_policy.views", "examlops_policy.errors",
    "examlops_policy.specs", "examlops_policy.audit", "examlops_policy.report", "examlops_policy.focus",
    "examlops_policy.quantities",  # values: CPU and memory sizes, written the one way they are read
    "examlops_policy.job_submit",  # the decision table Slurm's job_submit plugin reads (written like the FOCUS export)
    "examlops_policy.kueue.controller",  # Kueue's admission check: a loop over the façade, as serve is
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


# What `exa hardware place --dry-run` may load of the package (here, and with the home's local OPA):
# the command line of its group, the façade, the decision cycle and the workflows it composes, the
# core, the SQLite store and the OPA client. Not the audit chain (a dry run writes no entry), the
# reports, the executors, discovery, the simulator, the PostgreSQL store or the other groups'
# commands. A module added here is a cost every cold placement pays: the list may shrink, not grow
# (_record, the base of the selection's outcome, joined it deliberately: one small class, so that
# the outcome is built compiled, see examlops_policy/_record.py; _holding is the model's Holding in a
# module of its own, which the model and the records both name without importing each other).
PLACE_DRY_RUN_MAY_LOAD = frozenset({
    "examlops_policy", "examlops_policy._canonical", "examlops_policy._lazy", "examlops_policy._policy", "examlops_policy._private",
    "examlops_policy._holding", "examlops_policy._record",
    "examlops_policy._reviewed", "examlops_policy.accounting", "examlops_policy.errors", "examlops_policy.hardware",
    "examlops_policy.model", "examlops_policy.quantities", "examlops_policy.specs", "examlops_policy.tables", "examlops_policy.views",
    "examlops_policy._core", "examlops_policy._core.codec", "examlops_policy._core.commit", "examlops_policy._core.engine",
    "examlops_policy._core.explain", "examlops_policy._core.leases", "examlops_policy._core.packing", "examlops_policy._core.quota",
    "examlops_policy._core.records", "examlops_policy._core.request", "examlops_policy._core.selection", "examlops_policy._core.state",
    "examlops_policy._core.verdicts", "examlops_policy._core.waiting",
    "examlops_policy.app", "examlops_policy.app.cycle", "examlops_policy.app.discovering", "examlops_policy.app.estimating",
    "examlops_policy.app.estimators", "examlops_policy.app.placing", "examlops_policy.app.policy_review", "examlops_policy.app.pools",
    "examlops_policy.app.queue", "examlops_policy.app.records", "examlops_policy.app.reports", "examlops_policy.app.simulate",
    "examlops_policy.app.submitting", "examlops_policy.app.under", "examlops_policy.app.wiring",
    "examlops_policy.app.schedulers",  # the registry's names (the --submit choices); it loads no adapter
    "examlops_policy.cli", "examlops_policy.cli.args", "examlops_policy.cli.console", "examlops_policy.cli.decisions",
    "examlops_policy.cli.exits", "examlops_policy.cli.jobs", "examlops_policy.cli.main", "examlops_policy.cli.pools",
    "examlops_policy.cli.queue", "examlops_policy.cli.render", "examlops_policy.cli.simulate",
    "examlops_policy.cli.serving",  # serve --listen's options: registered with the hardware group, imports only cli modules loaded anyway
    "examlops_policy.estimates", "examlops_policy.estimates.gather", "examlops_policy.estimates.table",
    "examlops_policy.opa", "examlops_policy.opa.bundle", "examlops_policy.opa.connection", "examlops_policy.opa.content",
    "examlops_policy.opa.procs", "examlops_policy.opa.server", "examlops_policy.opa.transport",
    "examlops_policy.store", "examlops_policy.store._queue_sql", "examlops_policy.store._sql", "examlops_policy.store.api",
    "examlops_policy.store._tokens_sql",  # the token table's SQL, a mixin of the store as the queue's is
    "examlops_policy.store.sqlite",
})  # fmt: skip


def test_a_cold_placement_loads_only_what_it_uses(exa_home: Path) -> None:
    """``exa hardware place --dry-run`` in a fresh interpreter loads no module of the package beyond
    ``PLACE_DRY_RUN_MAY_LOAD``, and none of the terminal, YAML, schema or crypto libraries."""
    run_exa(exa_home, "hardware", "add-pool", "gpu", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu", check=True)
    code = (
        "import sys\n"
        "from examlops_policy.cli.main import main\n"
        "sys.argv = ['exa', 'hardware', 'place', 'train', '--accelerator', 'nvidia', '--target', 'hpc', '--dry-run']\n"
        "code = main()\n"
        "print(code, ' '.join(sorted(m for m in sys.modules if m.startswith(('examlops_policy', 'rich', 'yaml', 'jsonschema', 'cryptography')))))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **shared_opa_env(), "EXA_HOME": str(exa_home)})
    status, *loaded = out.stdout.splitlines()[-1].split()
    assert status == "0", out.stdout + out.stderr
    assert {"examlops_policy.hardware", "examlops_policy._core.engine", "examlops_policy.store.sqlite"} <= set(loaded)
    assert set(loaded) <= PLACE_DRY_RUN_MAY_LOAD, sorted(set(loaded) - PLACE_DRY_RUN_MAY_LOAD)
