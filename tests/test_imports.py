"""What importing costs: a module imports what it needs, the package's names load on first use."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import examlops_policy

from conftest import run_exa, shared_opa_env


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


HEAVY = ("examlops_policy.hardware", "examlops_policy.store", "examlops_policy.opa", "examlops_policy._engine", "rich", "yaml", "jsonschema", "cryptography")


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


def test_a_piped_placement_imports_neither_rich_nor_yaml(exa_home: Path) -> None:
    """``exa hardware place --dry-run`` with flags: no terminal library, no YAML parser (the tables
    come from their compiled cache, filled by the first command), no JSON Schema validator."""
    run_exa(exa_home, "hardware", "add-pool", "gpu", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu", check=True)
    code = (
        "import sys\n"
        "from examlops_policy.cli.main import main\n"
        "sys.argv = ['exa', 'hardware', 'place', 'train', '--accelerator', 'nvidia', '--target', 'hpc', '--dry-run']\n"
        "code = main()\n"
        "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'yaml', 'jsonschema'}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **shared_opa_env(), "EXA_HOME": str(exa_home)})
    assert out.stdout.splitlines()[-1] == "0 []", out.stdout + out.stderr
