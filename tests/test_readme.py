"""Every code block of the README and of the documentation pages (docs/*.md) runs, and shows
what really happens.

The pages are read in one order: README.md, then the pages of docs/index.md's toctree in the
order it lists them (PAGES). A block's id is ``<page>-<section>-<n>``: the page's name, the slug
of the ``##`` section it is in, and its number in that section (``queue-reconcile-and-serve-1``);
``pytest tests/test_readme.py -k queue-`` runs a page's blocks.

* ``console`` blocks are transcripts: each ``$ command`` runs in bash (``exa`` on PATH, the
  block's state folder in ``EXA_HOME``, a scratch working directory where ``examples/``,
  ``docs/`` and ``scripts/`` of the checkout are at hand) and its output must be the lines shown, in order. ``...``
  stands for any number of lines, and a line ending in `` ...`` for any line that begins so;
  ``[exit N]`` is the exit status (0 otherwise). ``$ export NAME=...`` keeps what it sets for the
  later commands of the home, as a shell would; a command run in the background (``... > FILE
  2>&1 &``) writes its output to a file, and a service it starts is stopped when the module ends
  (``exa hardware serve --stop``, if the block did not stop it itself). Decision ids,
  digests, uids, times, ports and process ids differ from run to run: they are compared as their
  kind, and an id shown in one output and typed in a later command is replaced by the id this run
  made. A policy revision's content digest (``policy sha256:6a95cdd850fd``) does not differ: it is
  the digest of the policy files, so it is compared as it is, and a block showing another policy
  than the files' fails (the ``@git:`` commit part, which differs from checkout to checkout, is
  left out of the comparison).
* ``python`` blocks run in a fresh interpreter against the state of the console blocks before them.
* ``yaml`` blocks parse; a fleet or workload file is checked as ``exa`` would check it.
* ``text`` blocks are prose (synopses, layouts), not run.

A comment right before a block sets where it runs: ``<!-- readme: home=NAME needs=SERVICE,... -->``
(blocks of one home share state, in page order, across pages: a section moved from the README into
a page keeps its place in that order as long as the page keeps its place in the toctree; the
default home is ``main``). ``needs``:
``kubernetes`` (the local control plane and kubectl), ``kueue`` (Kueue on it), ``multikueue`` (two worker
clusters with Kueue: ``KUBECONFIG_WORKER_A`` and ``KUBECONFIG_WORKER_B`` name their kubeconfigs), ``slurm``, ``chromium``, ``focus_validator``
(the FinOps Foundation's FOCUS validator, scripts/focus-validator-setup; ``scripts/`` is at hand). A block whose
service is missing is skipped, or fails under ``EXA_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from examlops_policy.cli import exits
from examlops_policy._serve import stop_recorded as stop_serving
from examlops_policy.opa import stop_server
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\{[\w-]+\}|\w*)(?:\s.*)?$")
MARK = re.compile(r"^<!--\s*readme:\s*(.*?)\s*-->\s*$")
LANGUAGES = {"console", "python", "yaml", "text", "json"}
TOCTREE = re.compile(r"^```\{toctree\}.*?\n(.*?)^```$", re.M | re.S)


def toctree(index: Path = DOCS / "index.md") -> list[str]:
    """The documents docs/index.md's toctrees list, in order (names relative to docs/, no suffix)."""
    names: list[str] = []
    for body in TOCTREE.findall(index.read_text(encoding="utf-8")):
        names += [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith(":")]
    return names


def pages() -> list[Path]:
    """README.md, then every page of the toctree that exists as Markdown, in the toctree's order."""
    return [README, *(DOCS / f"{name}.md" for name in toctree() if (DOCS / f"{name}.md").is_file())]


@dataclass
class Block:
    line: int
    language: str
    body: list[str]
    home: str = "main"
    needs: tuple[str, ...] = ()
    page: str = "readme"
    section: str = "top"
    n: int = 1

    @property
    def id(self) -> str:
        return f"{self.page}-{self.section}-{self.n}"

    @property
    def where(self) -> str:
        return f"{'README.md' if self.page == 'readme' else 'docs/' + self.page + '.md'} line {self.line}"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST make it (lower case, punctuation dropped, spaces as -)."""
    text = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return text.replace(" ", "-")


def blocks(text: str, page: str = "readme") -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    section = "top"
    counts: dict[str, int] = {}
    i = 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = slug(lines[i])[:40].strip("-")
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, language = i, m.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        i += 1
        if language.startswith("{"):
            continue  # a MyST directive (toctree, automodule): not a block
        counts[section] = counts.get(section, 0) + 1
        block = Block(start + 1, language, body, page=page, section=section, n=counts[section])
        mark = MARK.match(lines[start - 1]) if start > 0 else None
        if mark:
            for part in mark.group(1).split():
                key, _, value = part.partition("=")
                if key == "home":
                    block.home = value
                elif key == "needs":
                    block.needs = tuple(v for v in value.split(",") if v)
                else:
                    raise AssertionError(f"{block.where}: unknown readme option {key!r}")
        found.append(block)
    return found


def page_name(path: Path) -> str:
    return "readme" if path == README else path.relative_to(DOCS).with_suffix("").as_posix().replace("/", "-")


ALL = [block for path in pages() for block in blocks(path.read_text(encoding="utf-8"), page_name(path))]


# -- comparing transcripts ----------------------------------------------------------------------

VOLATILE = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?\b"), "<time>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d\b"), "<date>"),
    (re.compile(r"sha256:[0-9a-f]{6,64}(?:@git:[0-9a-f]{6,40})?"), "<revision>"),
    (re.compile(r"\b[0-9a-f]{12,64}\b"), "<hex>"),  # decision ids and prefixes, digests, heads
    (re.compile(r"(?<=-)[0-9a-f]{8}\b"), "<hex>"),  # a Job's name: workload-<decision id prefix>
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"\b(pid|supervisor) \d+"), r"\1 <n>"),
    (re.compile(r"\bidle \d+(?:\.\d+)? (s|min|h)\b"), "idle <t>"),
    (re.compile(r"(?:unix://)?/\S*?/opa/(opa\.sock|token)\b"), r"<home>/opa/\1"),  # the state folder's OPA
    (re.compile(r"/tmp/\S+"), "<tmp>"),
]
HEX = re.compile(r"\b[0-9a-f]{12,64}\b")
# A content digest: a policy revision's (the policy files'), or an input digest (after "input ").
DIGEST = re.compile(r"(input )?sha256:([0-9a-f]{6,64})(@git:[0-9a-f]{6,40})?")


def _digest(m: re.Match[str]) -> str:
    """An input digest is volatile; a policy revision's content digest is compared as it is (upper
    case, so that no volatile pattern below takes it). Its ``@git:`` commit is dropped: present
    only where the policy folder is a clean checkout, and a different commit in every one."""
    if m.group(1):
        return "input <digest>"
    return "sha256:" + m.group(2).upper()


def normal(line: str) -> str:
    line = line.replace(f"{ROOT}/", "")  # paths in the checkout read as relative ones
    line = DIGEST.sub(_digest, line)
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def matches(expected: list[str], actual: list[str]) -> list[tuple[str, str]] | None:
    """The (expected, actual) line pairs when ``actual`` is ``expected`` with each ``...`` standing
    for any run of lines; None otherwise."""
    want = [normal(e) for e in expected]

    def walk(i: int, j: int) -> list[tuple[int, int]] | None:
        if i == len(want):
            return [] if j == len(actual) else None
        if want[i] == "...":
            for k in range(j, len(actual) + 1):
                rest = walk(i + 1, k)
                if rest is not None:
                    return rest
            return None
        if j < len(actual) and (normal(actual[j]) == want[i] or (want[i].endswith(" ...") and normal(actual[j]).startswith(want[i][:-3]))):
            rest = walk(i + 1, j + 1)
            return None if rest is None else [(i, j), *rest]
        return None

    pairs = walk(0, 0)
    return None if pairs is None else [(expected[i], actual[j]) for i, j in pairs]


@dataclass
class Session:
    """A state folder the blocks of one home share, and the ids the README showed -> this run's."""

    home: Path
    work: Path
    ids: dict[str, str] = field(default_factory=dict)
    exported: dict[str, str] = field(default_factory=dict)  # what ``$ export NAME=...`` set, for the later commands

    def env(self) -> dict[str, str]:
        # Each home starts its own OPA on demand, as a user's does (what `exa opa status` shows).
        venv = Path(sys.executable).parent
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_HOME", "EXA_DB_URL"))}
        return {**env, "EXA_HOME": str(self.home), "PATH": f"{venv}:{os.environ['PATH']}", "COLUMNS": "200"}

    def learn(self, pairs: list[tuple[str, str]]) -> None:
        for want, got in pairs:
            for shown, real in zip(HEX.findall(want), HEX.findall(got)):
                self.ids[shown] = real

    def typed(self, command: str) -> str:
        """``command`` with each id the README showed replaced by the one this run made (a prefix
        of a shown id by the same prefix)."""

        def swap(m: re.Match[str]) -> str:
            token = m.group(0)
            for shown, real in self.ids.items():
                if shown.startswith(token) or token.startswith(shown):
                    return real[: len(token)]
            return token

        return HEX.sub(swap, command)


def transcript(body: list[str]) -> Iterator[tuple[str, list[str], int]]:
    """(command, expected output lines, expected exit status) of a console block."""
    command: str | None = None
    output: list[str] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("$ "):
            if command is not None:
                yield from _step(command, output)
            command, output = line[2:], []
            while command.endswith("\\") and i + 1 < len(body):
                i += 1
                command = command[:-1].rstrip() + " " + body[i].strip()
        else:
            assert command is not None, f"output before any command: {line!r}"
            output.append(line)
        i += 1
    if command is not None:
        yield from _step(command, output)


def _step(command: str, output: list[str]) -> Iterator[tuple[str, list[str], int]]:
    status = 0
    if output and re.fullmatch(r"\[exit \d+\]", output[-1].strip()):
        status = int(output[-1].strip()[6:-1])
        output = output[:-1]
    yield command, output, status


# -- services -----------------------------------------------------------------------------------


def _available(service: str) -> str | None:
    """None when ``service`` can be used, else why not."""
    if service == "kubernetes":
        if not (ROOT / ".exa-services" / "k8s" / "env").is_file():  # written by k8s-up, removed by k8s-down
            return "no local Kubernetes control plane (scripts/k8s-up)"
        if shutil.which("kubectl") is None:
            return "kubectl is not installed"
        return None
    if service == "kueue":
        return None if (ROOT / ".exa-services" / "kueue" / "env").is_file() else "no local Kueue (scripts/kueue-up)"
    if service == "multikueue":
        return None if (ROOT / ".exa-services" / "multikueue" / "env").is_file() else "no MultiKueue workers (scripts/multikueue-up)"
    if service == "slurm":
        return None if (ROOT / ".exa-services" / "slurm" / "env").is_file() else "no local Slurm (scripts/slurm-up)"
    if service == "chromium":
        return None if shutil.which("chromium") or shutil.which("chromium-browser") else "no chromium"
    if service == "focus_validator":
        made = subprocess.run([str(ROOT / "scripts" / "focus-validator-setup")], capture_output=True, text=True, timeout=900)
        return None if made.returncode == 0 else f"no FOCUS validator (scripts/focus-validator-setup: {made.stderr.strip()[-200:]})"
    raise AssertionError(f"unknown service {service!r}")


def _service_env(needs: tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for service in needs:
        for name in ("k8s",) if service in ("kubernetes", "kueue") else ("slurm",) if service == "slurm" else ("multikueue",) if service == "multikueue" else ():
            for line in (ROOT / ".exa-services" / name / "env").read_text(encoding="utf-8").splitlines():
                m = re.fullmatch(r"(?:export )?([A-Z_][A-Z0-9_]*)=(.*)", line.strip())
                if m:
                    env[m.group(1)] = m.group(2).strip("'\"")
    return env


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Session]]:
    made: dict[str, Session] = {}
    yield made
    for session in made.values():
        stop_serving(session.home)  # a service a block started in the background (and did not stop: it failed)
        stop_server(session.home)


def session_for(sessions: dict[str, Session], name: str, tmp_path_factory: pytest.TempPathFactory) -> Session:
    if name not in sessions:
        base = tmp_path_factory.mktemp(f"readme-{name}")
        work = base / "work"
        work.mkdir()
        for folder in ("examples", "docs", "scripts"):
            (work / folder).symlink_to(ROOT / folder)
        sessions[name] = Session(base / "home", work)
    return sessions[name]


# -- the tests ----------------------------------------------------------------------------------


def test_every_block_has_a_known_language() -> None:
    unknown = [f"{b.where}: ```{b.language}" for b in ALL if b.language not in LANGUAGES]
    assert len({b.id for b in ALL}) == len(ALL), "two blocks share an id"
    assert not unknown, "blocks without a known language (console, python, yaml, text, json): " + ", ".join(unknown)
    assert sum(b.language == "console" for b in ALL) >= 5 and any(b.language == "python" for b in ALL)


# Every block runs exa on a real OPA; a block that needs a service carries that service's marker.
@pytest.mark.opa
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=[getattr(pytest.mark, s) for s in b.needs]) for b in ALL if b.language in ("console", "python")],
    ids=lambda b: b.id,
)
def test_the_block_runs_as_shown(block: Block, sessions: dict[str, Session], tmp_path_factory: pytest.TempPathFactory) -> None:
    for service in block.needs:
        why = _available(service)
        if why is not None:
            if os.environ.get("EXA_REQUIRE_SERVICES"):
                pytest.fail(f"{block.where} needs {service}: {why}")
            pytest.skip(f"needs {service}: {why}")
    # Blocks of one home run in page order: run the earlier ones first if this test runs alone.
    session = session_for(sessions, block.home, tmp_path_factory)
    for earlier in ALL:
        if earlier is block:
            break
        if earlier.home == block.home and earlier.language in ("console", "python") and earlier.id not in _done:
            _run(earlier, session)
    if block.id not in _done:
        _run(block, session)


_done: set[str] = set()


def _run(block: Block, session: Session) -> None:
    _done.add(block.id)
    env = {**session.env(), **_service_env(block.needs)}
    try:
        _run_in(block, session, env)
    except BaseException:
        if "slurm" in block.needs:
            _cancel_readme_jobs(env)  # a block that failed before its own scancel leaves no job behind
        raise


def _cancel_readme_jobs(env: dict[str, str]) -> None:
    """Cancel the jobs the README's blocks start (named exa-readme-*): the next Slurm test finds
    the nodes as the suite left them, not filled by a block that failed midway."""
    listed = subprocess.run(["squeue", "--noheader", "--format=%i %j"], capture_output=True, text=True, env=env, timeout=30)
    ids = [line.split()[0] for line in listed.stdout.splitlines() if len(line.split()) == 2 and line.split()[1].startswith("exa-readme")]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, env=env, timeout=30)


def _run_in(block: Block, session: Session, env: dict[str, str]) -> None:
    if block.language == "python":
        result = subprocess.run([sys.executable, "-c", "\n".join(block.body)], capture_output=True, text=True, env=env, cwd=session.work, timeout=120)
        assert result.returncode == 0, f"{block.where}: the Python block failed:\n{result.stderr}"
        return
    for command, expected, status in transcript(block.body):
        step(block.where, session, session.typed(command), expected, status, env)


def step(where: str, session: Session, typed: str, expected: list[str], status: int, env: dict[str, str],
         seen: Callable[[str], str] = str) -> None:  # fmt: skip
    """Run one command and hold its exit status and output (``seen`` of it) to the page's."""
    result = run_typed(typed, session, env, where)
    actual = seen(result.stdout + result.stderr).splitlines()
    assert result.returncode == status, f"{where}: `{typed}` exited {result.returncode}, the page says {status}\n" + "\n".join(actual)
    pairs = matches(expected, actual)
    assert pairs is not None, f"{where}: `{typed}` printed\n" + "\n".join(actual) + "\n--- the page shows\n" + "\n".join(expected)
    session.learn(pairs)


EXPORTED = re.compile(r"(?:^export|\s)\s*([A-Za-z_]\w*)=")
BACKGROUND = re.compile(r">\s*\S+\s+2>&1\s*&$")


def run_typed(typed: str, session: Session, env: dict[str, str], where: str) -> subprocess.CompletedProcess[str]:
    """Run one ``$`` command in bash, in the session's folder, with what earlier ``export``s set.
    An ``export`` keeps the values it set for the later commands of the home (as a shell would); a
    command run in the background (``&``) must write its output to a file, or the block would wait
    for it to end."""
    if typed.rstrip().endswith("&"):
        assert BACKGROUND.search(typed.rstrip()), f"{where}: a command run in the background writes its output to a file (> FILE 2>&1 &): `{typed}`"
    dump = session.work / ".exported"
    script = f"{typed} && env -0 > {shlex.quote(str(dump))}" if typed.startswith("export ") else typed
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={**env, **session.exported}, cwd=session.work, timeout=300)
    if typed.startswith("export ") and result.returncode == 0:
        values = dict(item.split("=", 1) for item in dump.read_text(encoding="utf-8").split("\0") if "=" in item)
        session.exported.update({name: values[name] for name in EXPORTED.findall(typed) if name in values})
        dump.unlink()
    return result


@pytest.mark.parametrize("block", [b for b in ALL if b.language in ("yaml", "json")], ids=lambda b: b.id)
def test_the_data_block_parses(block: Block, tmp_path: Path) -> None:
    text = "\n".join(block.body) + "\n"
    documents = list(yaml.safe_load_all(text))  # a manifest may hold several (Kubernetes' ---)
    assert documents, "an empty data block"
    document = documents[0] if len(documents) == 1 else None
    if isinstance(document, dict) and "pools" in document:
        from examlops_policy.specs import pools_from_file

        path = tmp_path / "pools.yaml"
        path.write_text(text, encoding="utf-8")
        assert pools_from_file(path)
    elif isinstance(document, dict) and {"name", "accelerator"} <= set(document):
        from examlops_policy.specs import workload_from_file

        path = tmp_path / "workload.yaml"
        path.write_text(text, encoding="utf-8")
        workload_from_file(path)
    elif isinstance(document, dict) and {"issuer", "jwks_file"} <= set(document):
        from examlops_policy.service.oidc import load_config

        path = tmp_path / "oidc.yaml"
        path.write_text(text, encoding="utf-8")
        load_config(path)


def test_the_exit_code_table_is_the_clis() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", text.split("\n## Exit codes", 1)[1].split("\n\n#", 1)[0], re.M)
    shown = {int(code): meaning for code, meaning in rows}
    table = {code: meaning for _, code, meaning in exits.TABLE}
    assert shown == table


def test_a_stale_policy_revision_is_a_difference() -> None:
    """The README once showed policy sha256:b6061eee1e14 where every run showed 6a95cdd850fd, and
    passed: every sha256 digest was compared as "<revision>". A policy's content digest is the
    digest of the policy files, the same in every run, so it is compared as it is."""
    shown = "policy sha256:b6061eee1e14 · OPA 1.22.3 · input sha256:e558cb5955ad · verdicts fresh"
    assert matches([shown], ["policy sha256:6a95cdd850fd · OPA 1.22.3 · input sha256:e558cb5955ad · verdicts fresh"]) is None
    assert matches([shown], ["policy sha256:b6061eee1e14 · OPA 1.22.3 · input sha256:0123456789ab · verdicts fresh"]) is not None
    revision = "reviewed revision sha256:" + "6a" * 32
    assert matches([revision + "@git:" + "1" * 40], [revision + "@git:" + "2" * 40]) is not None
    assert matches([revision], ["reviewed revision sha256:" + "6b" * 32]) is None


def test_every_policy_revision_the_readme_shows_is_the_policy_files() -> None:
    """Also in blocks that need a service this machine may lack: each revision a console block shows
    is the content digest of the policy files as they are (a prefix of it), except the one an
    ``exa policy impact`` shows of an earlier commit (``before: HEAD``)."""
    from examlops_policy.opa.bundle import content_digest, reviewed_revision
    from examlops_policy.tables import policy_dir

    digest = content_digest(reviewed_revision(policy_dir())).removeprefix("sha256:")
    stale = [
        f"{block.where}: {line.strip()}"
        for block in ALL
        if block.language == "console"
        for line in block.body
        if not line.startswith(("$ ", "before: "))
        for m in DIGEST.finditer(line)
        if not m.group(1) and not digest.startswith(m.group(2))
    ]
    assert not stale, f"the policy files are sha256:{digest[:12]}; these lines show another policy:\n" + "\n".join(stale)


def test_the_comparison_sees_a_difference() -> None:
    assert matches(["✓ a", "...", "✓ c"], ["✓ a", "b", "✓ c"]) is not None
    assert matches(["✓ a", "✓ c"], ["✓ a", "b", "✓ c"]) is None
    assert matches(["decision 3f2a9c1b2d4e"], ["decision 9a8b7c6d5e4f"]) is not None
    assert matches(["cost 18.0"], ["cost 18.5"]) is None
    assert matches(["total ..."], ["total $0.04"]) is not None and matches(["total ..."], ["sum $0.04"]) is None
