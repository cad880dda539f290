"""Sphinx configuration of the documentation site (Sphinx + MyST-Parser; the ``docs`` extra).

Built strictly by ``scripts/test`` and tests/test_docs.py:
``.venv/bin/python -m sphinx -E -W --keep-going -n docs docs/_build/html``.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

project = "examlops-policy"
extensions = ["myst_parser", "sphinx.ext.autodoc", "exa_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
autodoc_typehints = "description"
autodoc_member_order = "bysource"
suppress_warnings: list[str] = []
nitpick_ignore_regex = [(r"py:.*", r".*")]  # -n checks the pages' references; type names in signatures are not pages
