"""The wheel's build hook: the decision path compiled into C extensions by mypyc, from the same
sources (the modules listed in pyproject.toml, ``[tool.hatch.build.targets.wheel.hooks.custom]``
``modules``). Off by default; a wheel built with ``HATCH_BUILD_HOOK_ENABLE_CUSTOM=1`` holds them
compiled (``scripts/build-compiled``), beside every module's source. An editable install is never
compiled: an extension built from a source would go on shadowing it after the source changed.

The sources are compiled in a copy of the package in a temporary folder (nothing is written into
the checkout); a module mypyc cannot compile fails the build, naming it, rather than ship it
uncompiled silently."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "examlops_policy"
SETUP = """\
from setuptools import setup
from mypyc.build import mypycify
setup(name="examlops-policy-compiled", py_modules=[], ext_modules=mypycify({modules!r}, opt_level="3"))
"""


class CompiledCore(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def modules(self) -> list[str]:
        """The modules to compile, as paths from the project's root, each checked to exist."""
        modules = self.config.get("modules")
        if not isinstance(modules, list) or not modules or not all(isinstance(m, str) and m.endswith(".py") for m in modules):
            raise ValueError("pyproject.toml [tool.hatch.build.targets.wheel.hooks.custom] modules: expected a list of .py paths")
        outside = [m for m in modules if not m.startswith(f"{PACKAGE}/")]
        if outside:
            raise ValueError(f"pyproject.toml [tool.hatch.build.targets.wheel.hooks.custom] modules: not in {PACKAGE}/: {', '.join(outside)}")
        missing = [m for m in modules if not (Path(self.root) / m).is_file()]
        if missing:
            raise ValueError(f"pyproject.toml [tool.hatch.build.targets.wheel.hooks.custom] modules: no such file: {', '.join(missing)}")
        return modules

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        modules = self.modules()
        self._work = Path(tempfile.mkdtemp(prefix="exa-mypyc-"))
        try:
            build_data["force_include"].update(self._compile(modules))
        except BaseException:
            shutil.rmtree(self._work, ignore_errors=True)
            raise
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _compile(self, modules: list[str]) -> dict[str, str]:
        """Compile ``modules`` in a copy of the package; the extensions built, each with its path in the wheel."""
        shutil.copytree(Path(self.root) / PACKAGE, self._work / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        (self._work / "setup.py").write_text(SETUP.format(modules=modules), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace"],
            cwd=self._work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"mypyc could not compile {', '.join(modules)}:\n{done.stdout[-6000:]}")
        built = sorted((self._work / PACKAGE).rglob("*.so"))
        for module in modules:
            stem = Path(module).with_suffix("")
            if not any(p.relative_to(self._work).with_suffix("").with_suffix("") == stem for p in built):
                raise RuntimeError(f"mypyc built no extension for {module}")
        # The shared library of the group (``<hash>__mypyc...so``) lands at the copy's top.
        built += sorted(self._work.glob("*__mypyc*.so"))
        return {str(path): str(path.relative_to(self._work)) for path in built}

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
