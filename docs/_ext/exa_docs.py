"""Pages generated at each build, from the sources that define them.

* ``docs/commands/exa-<group>-<command>.md``: one page per CLI command, from the argparse parser
  (``examlops_policy.cli.main.build_parser``): its usage, description and every option's help.
* ``docs/checks/check-<name>.md``: one page per policy check, from its ``# METADATA`` (read through
  the real OPA, as ``exa policy docs`` reads it): order, stage, the fields it reads, whether it
  blocks a burst, and every reason code it gives with its kind and meaning.

The generated files are not committed (.gitignore); ``docs/commands/index.md`` and
``docs/checks/index.md`` list them with a toctree glob.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sphinx.application import Sphinx

DOCS = Path(__file__).resolve().parent.parent


def _write(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:  # unchanged files keep Sphinx's cache
        path.write_text(text, encoding="utf-8")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-commands here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_pages() -> dict[str, str]:
    """``exa-<group>-<command>`` -> the page's Markdown, for every command of the parser."""
    from examlops_policy.cli.main import build_parser

    root = build_parser()
    root.prog = "exa"
    pages: dict[str, str] = {}

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        children = _subparsers(parser)
        if not children:
            name = "exa-" + "-".join(path)
            parser.prog = "exa " + " ".join(path)
            parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
            lines = [f"# `exa {' '.join(path)}`", ""]
            if parser.description:
                lines += [parser.description.strip(), ""]
            lines += ["```text", parser.format_help().rstrip(), "```", ""]
            pages[name] = "\n".join(lines)
            return
        for child, sub in children.items():
            if child not in path:
                walk(sub, [*path, child])

    walk(root, [])
    return pages


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def check_pages() -> dict[str, str]:
    """``check-<name>`` -> the page's Markdown, for every check of the policy, in check order."""
    from examlops_policy._policy_docs import decode, policy_metadata

    codes = decode(policy_metadata())
    pages: dict[str, str] = {}
    for check in codes.checks:
        lines = [
            f"# {check.title} (`{check.name}`)",
            "",
            "Generated from the check's `# METADATA` in",
            f"`policies/examlops/hardware/checks/{check.name}/`; edit the metadata, not this page.",
            "",
            "| | |",
            "|---|---|",
            f"| order | {check.order} |",
            f"| stage | {check.stage} |",
            f"| reads of the pool | {', '.join(f'`{f}`' for f in check.shape_fields) or 'nothing'} |",
            f"| reads of the workload | {', '.join(f'`{f}`' for f in check.workload_fields) or 'nothing'} |",
            f"| blocks a burst | {'yes' if check.blocks_burst else 'no'} |",
            "",
            "## Reason codes",
            "",
            "| code | kind | meaning |",
            "|---|---|---|",
        ]
        own = [c for c in codes.codes if c.source == check.name]
        lines += [f"| `{c.code}` | {c.kind} | {_cell(c.meaning)} |" for c in own] or ["| (none) | | |"]
        lines += ["", "See [the reason codes](../reason-codes.md) for every code the policy gives, and",
                  "[writing a policy](../writing-a-policy.md) for how a check is added.", ""]
        pages[f"check-{check.order:03d}-{check.name}"] = "\n".join(lines)
    return pages


def generate(app: Sphinx) -> None:
    for folder, pages in (("commands", command_pages()), ("checks", check_pages())):
        target = DOCS / folder
        prefix = "exa-" if folder == "commands" else "check-"
        for old in target.glob(f"{prefix}*.md"):
            if old.stem not in pages:
                old.unlink()
        for name, text in pages.items():
            _write(target / f"{name}.md", text)


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
