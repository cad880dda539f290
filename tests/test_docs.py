"""The documentation: a short README, a site (docs/) whose links resolve and whose pages are all in
its table of contents, a strict Sphinx build, and a layout page that names files that exist.

The pages' command blocks run in tests/test_readme.py; this file holds the documentation's shape.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_readme import DOCS, README, slug, toctree

README_MOST_LINES = 300
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
GENERATED = ("commands/exa-", "checks/check-")  # written by docs/_ext/exa_docs.py at each build


def written_pages() -> list[Path]:
    """The Markdown pages of docs/ that are committed (not the build, not the generated pages)."""
    pages = []
    for path in sorted(DOCS.rglob("*.md")):
        name = path.relative_to(DOCS).as_posix()
        if name.startswith(("_build/", "_ext/")) or name.startswith(GENERATED):
            continue
        pages.append(path)
    return pages


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of ``text`` outside fenced blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def anchors(path: Path) -> set[str]:
    return {slug(line) for _, line in prose(path.read_text(encoding="utf-8")) if re.match(r"^#{1,6} ", line)}


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each internal link of ``path`` (a file, or a heading of a Markdown file) that leads nowhere."""
    broken = []
    for number, line in prose(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto: are not internal
            file, _, anchor = target.partition("#")
            where = (path.parent / file).resolve() if file else path
            if not where.exists():
                broken.append(f"{path.relative_to(root)}:{number}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{path.relative_to(root)}:{number}: {target} (no heading #{anchor} there)")
    return broken


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines; at most {README_MOST_LINES}: move a section into a page of docs/"


def test_the_readme_keeps_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "## The two commands" in text and "| `scripts/demo` |" in text and "| `scripts/test` |" in text


def test_every_internal_link_resolves() -> None:
    broken = [b for page in [README, *written_pages()] for b in broken_links(page)]
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_a_broken_link_is_seen(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](there.md#a-heading) [ok](#page) `[code](nowhere.md)`\n[gone](missing.md) [gone](there.md#nope)\n", encoding="utf-8")
    found = broken_links(page, tmp_path)
    assert found == ["page.md:4: missing.md (no such file)", "page.md:4: there.md#nope (no heading #nope there)"]


def test_every_page_is_in_the_toctree() -> None:
    listed = set(toctree())
    for index in ("commands/index.md", "checks/index.md"):
        listed |= {f"{index.split('/')[0]}/{name}" for name in toctree(DOCS / index)}
    missing = [p.relative_to(DOCS).with_suffix("").as_posix() for p in written_pages() if p.name != "index.md" or p.parent != DOCS]
    missing = [name for name in missing if name not in listed]
    assert not missing, f"pages in no toctree of docs/index.md: {missing}"
    assert {"commands/exa-*", "checks/check-*"} <= listed, "the generated pages are listed by a glob"


def _layout_paths() -> list[str]:
    """The paths the layout tree of docs/layout.md names (its first ``text`` block), each with the
    folders above it: a line's name column, split at commas; an indented name is inside the nearest
    folder above it with less indent; a ``label:`` line groups without being a folder."""
    text = (DOCS / "layout.md").read_text(encoding="utf-8")
    tree = text.split("```text\n", 1)[1].split("\n```", 1)[0]
    paths: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, folder path with a trailing /)
    for line in tree.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= 20:
            continue  # a description's continuation
        names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        if names.endswith(":"):
            stack.append((indent, parent))
            continue
        for name in (n.strip() for n in names.split(",")):
            if "<" in name:
                continue
            paths.append(parent + name)
            if name.endswith("/"):
                stack.append((indent, parent + name))
    return paths


def test_the_layout_names_files_that_exist() -> None:
    paths = _layout_paths()
    assert len(paths) >= 40 and "examlops_policy/_core/commit.py" in paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/layout.md names what is not there: {missing}"


def _leaf_commands() -> set[str]:
    from examlops_policy.cli.main import build_parser

    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.add("exa-" + "-".join(path))
        for action in subs:
            for name, child in action.choices.items():
                if name not in path:
                    walk(child, [*path, name])

    walk(build_parser(), [])
    return found


# Reads the policy's metadata through the real OPA binary (opa eval), as exa policy docs does.
@pytest.mark.opa
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``sphinx -E -W --keep-going -n``: any warning fails (a broken reference or link, a page in no
    toctree, a docstring autodoc cannot read). The generated pages cover every command and check."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-n", "-q", str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"the strict docs build failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert {p.stem for p in (DOCS / "commands").glob("exa-*.md")} == _leaf_commands()
    from examlops_policy._policy_docs import decode, policy_metadata

    checks = {c.name for c in decode(policy_metadata()).checks}
    assert {p.stem.split("-", 2)[2] for p in (DOCS / "checks").glob("check-*.md")} == checks
    assert (tmp_path / "html" / "commands" / "exa-hardware-place.html").is_file()
    assert (tmp_path / "html" / "checks" / "check-087-wait.html").is_file()


def test_the_service_page_shows_an_oidc_configuration_that_loads(tmp_path: Path) -> None:
    """docs/service.md's example of ``--oidc FILE`` is a configuration the service accepts."""
    from examlops_policy.service import oidc

    text = (DOCS / "service.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```yaml\n(.*?)^```$", text, re.M | re.S) if "jwks_file:" in b]
    assert len(blocks) == 1, "one OIDC configuration example in docs/service.md"
    path = tmp_path / "oidc.yaml"
    path.write_text(blocks[0], encoding="utf-8")
    config = oidc.load_config(path)
    assert config.jwks_file == tmp_path / "oidc-jwks.json" and config.issuer.startswith("https://")
    assert set(config.algorithms) <= set(oidc.ALGORITHMS) and config.scope_claim and config.leeway_s == 30
