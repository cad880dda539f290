"""The layers, held by reading the source (``ast``), as ``test_imports.py`` holds the module graph.

* one decision cycle: ``FLEET_ROUNDS`` is defined once, the decide -> commit -> stale-fleet retry
  loop is written once (``app/cycle.py``), and only the cycle commits a decision
  (``commit.place``): ``Hardware.place`` and queue admission both go through ``DecisionCycle.run``;
* the façade's privates: no module but ``hardware.py`` (tests and benchmarks included) reads an
  underscored member of a ``Hardware``, and no protocol declares an underscored member;
* the ports are typed: no ``Any`` in ``app/ports.py`` nor in any protocol of the application layer;
* the folders: no import circle between folders (a top-level module counts as a folder of its
  own; imports that run later or only for type checking count); the adapters and the core import
  nothing of the application layer, and it imports neither the façade nor the command line; the
  values the workflows return (``views``) import nothing but the values below them (``model``,
  ``errors``): no ranking, no adapter;
* the façade is a composition root small enough to read in one sitting (at most 400 lines).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from test_imports import PACKAGE, cycles, graph, modules

ROOT = PACKAGE.parent
APP = "examlops_policy.app"
CYCLE = PACKAGE / "app" / "cycle.py"
FACADE = PACKAGE / "hardware.py"
PORTS = PACKAGE / "app" / "ports.py"
VIEWS = "examlops_policy.views"
ADAPTERS = ("examlops_policy._core", "examlops_policy.store", "examlops_policy.opa", "examlops_policy.executors", "examlops_policy.discovery")


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def sources(root: Path = PACKAGE) -> list[Path]:
    return sorted(root.rglob("*.py"))


# --- one decision cycle ------------------------------------------------------------------------------


def defines(module: ast.Module, name: str) -> int:
    """How many times ``module`` assigns ``name`` (at any depth)."""
    count = 0
    for node in ast.walk(module):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        count += sum(1 for t in targets if isinstance(t, ast.Name) and t.id == name)
    return count


def named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def retry_loops(module: ast.Module) -> int:
    """Loops over ``range(FLEET_ROUNDS)``, and handlers of ``StaleFleet`` (a retry written another way)."""
    loops = sum(
        1 for n in ast.walk(module)
        if isinstance(n, (ast.For, ast.While)) and any(isinstance(c, ast.Call) and named(c.func, "range") and any(named(a, "FLEET_ROUNDS") for a in c.args) for c in ast.walk(n.iter if isinstance(n, ast.For) else n.test))
    )  # fmt: skip
    handlers = sum(
        1 for n in ast.walk(module)
        if isinstance(n, ast.ExceptHandler) and n.type is not None and any(named(t, "StaleFleet") for t in ast.walk(n.type))
    )  # fmt: skip
    return loops + handlers


def commits(module: ast.Module) -> int:
    """Calls of the core's commit of a decision: ``commit.place(...)``."""
    return sum(
        1 for n in ast.walk(module)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "place" and named(n.func.value, "commit")
    )  # fmt: skip


def per_file(counter: object, files: Iterable[Path]) -> dict[str, int]:
    assert callable(counter)
    found = {str(p.relative_to(ROOT)): counter(tree(p)) for p in files}
    return {p: n for p, n in found.items() if n}


def test_fleet_rounds_is_defined_once_in_the_cycle() -> None:
    assert per_file(lambda m: defines(m, "FLEET_ROUNDS"), sources()) == {"examlops_policy/app/cycle.py": 1}


def test_the_retry_loop_is_written_once_in_the_cycle() -> None:
    # One loop over the rounds and one StaleFleet handler, both in DecisionCycle.run.
    assert per_file(retry_loops, sources()) == {"examlops_policy/app/cycle.py": 2}


def test_only_the_cycle_commits_a_decision() -> None:
    assert per_file(commits, sources()) == {"examlops_policy/app/cycle.py": 1}


def test_place_and_admission_go_through_the_cycle() -> None:
    """``Placing.place`` and ``queue.admit_one`` each run the cycle (``cycle.run``)."""

    def runs(module: ast.Module, function: str) -> bool:
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef) and node.name == function:
                return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "run" and named(c.func.value, "cycle") for c in ast.walk(node))
        raise AssertionError(f"no function {function}")

    assert runs(tree(PACKAGE / "app" / "placing.py"), "place")
    assert runs(tree(PACKAGE / "app" / "queue.py"), "admit_one")


# --- the façade's privates ------------------------------------------------------------------------------


def facade_privates(facade: ast.Module) -> set[str]:
    """The underscored (not dunder) members of ``class Hardware``: its methods and what it sets on itself."""
    found: set[str] = set()
    for cls in (n for n in facade.body if isinstance(n, ast.ClassDef) and n.name == "Hardware"):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(node.name)
            elif isinstance(node, ast.Attribute) and named(node.value, "self") and isinstance(node.ctx, ast.Store):
                found.add(node.attr)
    return {n for n in found if n.startswith("_") and not n.startswith("__")}


# The façade's privates that workflows used to name: never again an attribute of anything but self.
FORMER = frozenset({"_current", "_snapshot", "_decide", "_capacities", "_prepare", "_engine_of", "_estimator_of", "_record", "_freed", "_with_queue"})


def private_reads(module: ast.Module, privates: Iterable[str]) -> list[str]:
    """``x._name`` for a façade private ``_name`` on anything but ``self``/``cls``, and any
    underscored member read on a name that says it is the façade (``hw``, ``hardware``)."""
    privates = set(privates)
    out = []
    for node in ast.walk(module):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        on_facade = isinstance(owner, ast.Name) and owner.id in ("hw", "hardware", "facade")
        if node.attr in privates or on_facade:
            out.append(f"{ast.unparse(node)} (line {node.lineno})")
    return out


def protocol_privates(module: ast.Module) -> list[str]:
    """Underscored members declared by a ``Protocol`` (what a workflow would need of a private)."""
    out = []
    for cls in (n for n in ast.walk(module) if isinstance(n, ast.ClassDef)):
        if not any(named(b, "Protocol") for b in cls.bases):
            continue
        for item in cls.body:
            name = item.name if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else item.target.id if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) else None
            if name is not None and name.startswith("_") and not name.startswith("__"):
                out.append(f"{cls.name}.{name}")
    return out


def test_no_module_but_the_facade_names_its_privates() -> None:
    privates = facade_privates(tree(FACADE)) | FORMER
    assert {"_records", "_pools"} <= privates  # the check reads the façade it guards
    here = Path(__file__)
    files = [p for p in sources() if p != FACADE] + [p for p in sources(ROOT / "tests") if p != here] + sources(ROOT / "benchmarks")
    offending = {str(p.relative_to(ROOT)): found for p in files if (found := private_reads(tree(p), privates))}
    assert not offending, offending


def test_no_protocol_declares_a_private_member() -> None:
    offending = {str(p.relative_to(ROOT)): found for p in sources() if (found := protocol_privates(tree(p)))}
    assert not offending, offending


# --- typed ports --------------------------------------------------------------------------------------


def names_any(node: ast.AST) -> bool:
    return any(named(n, "Any") for n in ast.walk(node))


def protocols(module: ast.Module) -> list[ast.ClassDef]:
    return [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and any(named(b, "Protocol") for b in n.bases)]


def test_the_ports_are_protocols_that_name_no_any() -> None:
    ports = tree(PORTS)
    classes = [n for n in ports.body if isinstance(n, ast.ClassDef)]
    assert len(classes) >= 6 and all(c in protocols(ports) for c in classes)
    assert not names_any(ports)
    app = [p for p in sources(PACKAGE / "app")]
    offending = [f"{p.name}: {c.name}" for p in app for c in protocols(tree(p)) if names_any(c)]
    assert not offending


# --- folders ------------------------------------------------------------------------------------------


def folder(module: str) -> str:
    """The folder a module is in: its first package below the root, a top-level module its own."""
    return ".".join(module.split(".")[:2])


def folder_graph(edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in edges.items():
        out.setdefault(folder(a), set()).update(folder(b) for b in targets if folder(b) != folder(a))
    return out


def test_no_import_circle_between_folders() -> None:
    folders = folder_graph(graph())
    assert APP in folders and len(folders) > 20
    assert cycles(folders) == []


def test_the_values_the_workflows_return_hold_no_decision_logic() -> None:
    """``views`` is presentation: it imports no decision logic (the core's ranking, ``balanced_scores``
    and ``explain``, live in ``_core``), no adapter, no workflow, and defines no ranking."""
    edges = graph()
    below = {f"{VIEWS} -> {i}" for i in edges[VIEWS] if i.startswith((*ADAPTERS, "examlops_policy._policy", APP, "examlops_policy.hardware"))}
    assert not below, sorted(below)
    defined = {n.name for n in tree(PACKAGE / "views.py").body if isinstance(n, ast.FunctionDef)}
    assert not defined & {"balanced_scores", "explain"}, sorted(defined)


def test_the_application_layer_sits_between_the_facade_and_the_adapters() -> None:
    edges = graph()
    app = [m for m in edges if folder(m) == APP]
    assert len(app) >= 10
    upward = {f"{m} -> {i}" for m in app for i in edges[m] if folder(i) in ("examlops_policy.hardware", "examlops_policy.cli")}
    assert not upward, sorted(upward)
    below = {f"{m} -> {i}" for m in edges if m.startswith(ADAPTERS) for i in edges[m] if folder(i) == APP}
    assert not below, sorted(below)


# --- the composition root -----------------------------------------------------------------------------


def test_the_facade_is_a_composition_root_of_at_most_400_lines() -> None:
    lines = FACADE.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400, len(lines)
    # It decides nothing itself: no policy, no selection, no commit of a decision.
    assert commits(tree(FACADE)) == 0 and retry_loops(tree(FACADE)) == 0


# --- the checks see what they look for ---------------------------------------------------------------


def test_the_checks_see_a_second_loop_a_private_an_any_and_a_circle(tmp_path: Path) -> None:
    second = ast.parse(
        "FLEET_ROUNDS = 3\n"
        "def admit():\n"
        "    for _ in range(FLEET_ROUNDS):\n"
        "        try:\n"
        "            commit.place(store)\n"
        "        except StaleFleet:\n"
        "            continue\n"
    )
    assert (defines(second, "FLEET_ROUNDS"), retry_loops(second), commits(second)) == (1, 2, 1)
    facade = ast.parse("class Hardware:\n    def __init__(self):\n        self._store = 1\n    def _current(self):\n        pass\n")
    assert facade_privates(facade) == {"_store", "_current"}
    workflow = ast.parse("def f(hw, other):\n    self._store = hw._anything\n    return other._current()\n")
    assert private_reads(workflow, {"_current"}) == ["hw._anything (line 2)", "other._current (line 3)"]
    protocol = ast.parse("class Host(Protocol):\n    def _snapshot(self): ...\n    _x: int\n    store: Any\n")
    assert protocol_privates(protocol) == ["Host._snapshot", "Host._x"] and names_any(protocols(protocol)[0])
    edges = {
        "examlops_policy.app.cycle": {"examlops_policy.store.api"},
        "examlops_policy.store.api": {"examlops_policy.views"},
        "examlops_policy.views": {"examlops_policy.app.ports"},
    }
    assert cycles(folder_graph(edges)) == [["examlops_policy.app", "examlops_policy.store", "examlops_policy.views"]]


@pytest.mark.parametrize("module", ["examlops_policy.app.cycle", "examlops_policy.app.ports", "examlops_policy.app.queue"])
def test_the_modules_checked_exist(module: str) -> None:
    assert module in modules()


# --- schedulers and trace formats: names are tested only in their registries ------------------------

SCHEDULER_REGISTRY = PACKAGE / "app" / "schedulers" / "__init__.py"
TRACE_REGISTRY = PACKAGE / "_sim" / "readers.py"
# ``exa slurm`` is a command group (Slurm's job_submit plugin and its table), a word of the command
# line that chooses which parser to build, never a scheduler a workflow hands work to. Held here.
GROUP_WORDS = {"examlops_policy/cli/main.py": 1}


def scheduler_names() -> frozenset[str]:
    from examlops_policy.app.schedulers import SCHEDULERS

    return frozenset(SCHEDULERS)


def trace_formats() -> frozenset[str]:
    from examlops_policy._sim.readers import READERS

    return frozenset({*READERS, *(r.family for r in READERS.values())})


def name_tests(module: ast.Module, names: frozenset[str]) -> list[str]:
    """Where ``module`` tests a value against one of ``names`` written out: a comparison (``==``,
    ``!=``, ``in``, ``not in``, ``is``) with the name as a string constant on either side or in a
    tuple, list or set compared with, a dict literal keyed by a name (a lookup by name), a
    ``match`` case on a name."""

    def constant(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names

    def spelled(node: ast.AST) -> bool:
        return constant(node) or (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(constant(e) for e in node.elts))

    found: list[tuple[int, int, str]] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Compare) and any(spelled(side) for side in (node.left, *node.comparators)):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and any(k is not None and constant(k) for k in node.keys):
            found.append((node.lineno, node.col_offset, "a dict keyed by name"))
        elif isinstance(node, ast.MatchValue) and constant(node.value):
            found.append((node.lineno, node.col_offset, f"case {ast.unparse(node.value)}"))
    return [f"line {line}: {what}" for line, _, what in sorted(found)]


def branches_outside(registry: Path, names: frozenset[str]) -> dict[str, int]:
    files = [p for p in sources() if p != registry]
    return {str(p.relative_to(ROOT)): len(found) for p in files if (found := name_tests(tree(p), names))}


def test_no_module_but_the_registry_tests_a_scheduler_name() -> None:
    names = scheduler_names()
    assert {"slurm", "kubernetes"} <= names
    assert branches_outside(SCHEDULER_REGISTRY, names) == GROUP_WORDS


def test_no_module_but_the_registry_tests_a_trace_format_name() -> None:
    formats = trace_formats()
    assert {"openb", "generic", "generic-csv", "generic-yaml"} <= formats
    assert branches_outside(TRACE_REGISTRY, formats) == {}


def test_the_name_check_sees_a_planted_branch() -> None:
    names = frozenset({"slurm", "kubernetes"})
    planted = ast.parse(
        "def f(record, sub, how):\n"
        "    if record.scheduler == 'kubernetes':\n"
        "        pass\n"
        "    if 'slurm' != sub.scheduler or sub.scheduler in ('slurm', 'kubernetes') or how not in {'slurm'}:\n"
        "        pass\n"
        "    word = {'slurm': 'job', 'kubernetes': 'Job'}.get(how)\n"
        "    match how:\n"
        "        case 'slurm':\n"
        "            pass\n"
        "    return unknown(record, 'slurm', 'no answer'), record.scheduler == 'table', word\n"
    )
    found = name_tests(planted, names)
    assert [f.split(":")[0] for f in found] == ["line 2", "line 4", "line 4", "line 4", "line 6", "line 8"], found
    # A name passed or returned is no test of one; a comparison with another word is none either.
    assert name_tests(ast.parse("x = unknown(pool, 'slurm', why)\ny = a == 'table'\n"), names) == []


# --- a scheduler registered once is reached by every workflow ---------------------------------------


class ToyScheduler:
    """A scheduler that records what it is asked (the port, nothing else): registered in a test,
    it must be reached without a change to any other module."""

    name = "toy"
    title = "Toy"
    job_word = "task"
    resubmit = "--toy"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def serves(self, pool: object) -> bool:
        return False

    def discover(self, fleet: object, *, region: object, prefix: object, options: object) -> object:
        from examlops_policy.discovery import Discovery

        self.calls.append("discover")
        return Discovery("toy", ()), lambda pool: False

    def submit(self, jobs: object, ident: str, options: Mapping[str, object], *, dry_run: bool) -> object:
        from examlops_policy.views import Submission

        self.calls.append(f"submit {ident} {dict(options)} {dry_run}")
        return Submission(ident, self.name, False, said="toy")

    def queued(self, given: Mapping[str, object]) -> object:
        from examlops_policy.views import Submit

        return Submit(self.name, {"what": str(given.get("script"))})

    def check_queued(self, options: object) -> None:
        self.calls.append("check_queued")

    def submit_queued(self, jobs: object, ident: str, options: object) -> object:
        return self.submit(jobs, ident, {}, dry_run=False)

    def status(self, jobs: object, record: object, options: object) -> object:
        from examlops_policy.views import JobReport

        self.calls.append("status")
        return JobReport("d1", self.name, "t1", "running", None)

    def cancel(self, record: object, options: object) -> bool:
        self.calls.append("cancel")
        return True

    def released(self, record: object, options: object) -> bool | None:
        return None

    def reconcile(self, grants: object, options: object, runner: object) -> object:
        from examlops_policy.app.schedulers.seen import JobSeen, Seen

        self.calls.append(f"reconcile {[g.job_id for g in grants]} {dict(options)}")
        return Seen({"t1": JobSeen("RUNNING", False, True, "2026-01-01T00:00:00Z")})


class ToyAsking:
    """How the toy scheduler is asked for start estimates (registered with it)."""

    def __init__(self, toy: ToyScheduler) -> None:
        self.toy = toy

    def asker(self, root: Path) -> object:
        self.toy.calls.append("asker")
        return ToyAsker()


class ToyAsker:
    source = "now"

    def claims(self, pool: object) -> bool:
        return True

    def estimate_many(self, requests: list[object], now: object) -> list[object]:
        return []


@pytest.fixture()
def toy() -> Iterable[ToyScheduler]:
    from examlops_policy.app import schedulers

    made = ToyScheduler()
    schedulers.register("toy", made, asking=lambda: ToyAsking(made))
    try:
        yield made
    finally:
        schedulers.SCHEDULERS.remove("toy")


def test_a_scheduler_is_registered_once() -> None:
    from examlops_policy.app import schedulers
    from examlops_policy.errors import SpecError

    with pytest.raises(SpecError, match="registered already"):
        schedulers.register("slurm", schedulers.SCHEDULERS["slurm"])
    with pytest.raises(SpecError, match="expected one of slurm, kubernetes"):
        schedulers.scheduler("pbs")


def test_a_registered_scheduler_is_reached_by_the_cli_and_the_workflows(toy: ToyScheduler) -> None:
    from types import SimpleNamespace

    from examlops_policy.app import discovering, reconcile, submitting
    from examlops_policy.app.estimators import Estimators
    from examlops_policy.cli import decisions
    from examlops_policy.cli.main import build_parser
    from examlops_policy.tables import load_tables

    # The command line offers it (its choices are the registry's) and builds its submission.
    parser = build_parser("hardware")
    place = parser._subparsers._group_actions[0].choices["hardware"]._subparsers._group_actions[0].choices["place"]
    assert "toy" in next(a for a in place._actions if a.dest == "submit").choices
    args = SimpleNamespace(submit="toy", script="run.sh", image=None, namespace=None, context=None, kubeconfig=None, ask_kubernetes=False)
    assert decisions._submission(args, True).options == {"what": "run.sh"}

    # Submission, job status and cancel by the name recorded on the decision.
    record = SimpleNamespace(id="d1", job_id="t1", scheduler="toy", job_uid=None)
    jobs = SimpleNamespace(decision=lambda ident: record)
    assert submitting.submit(jobs, "d1", "toy", dry_run=True, colour="blue").said == "toy"
    assert submitting.status(jobs, "d1").state == "running"
    assert submitting.cancel(record) is True

    # Discovery offers it as a source.
    assert "toy" in discovering.sources()
    fleet = SimpleNamespace(tables=None, pools=lambda: [], apply=None, record_usage=None)
    assert discovering.discover(fleet, "toy", region=None, prefix=None, apply=False).source == "toy"

    # Reconcile reads it where live grants were submitted to it, and when it is named.
    grant = SimpleNamespace(job_id="t1", scheduler="toy", job_uid=None, job_started_at="2026-01-01T00:00:00Z")
    state = SimpleNamespace(store=SimpleNamespace(live_grants=lambda with_jobs: [grant]), snapshot=lambda: SimpleNamespace(states=()))
    assert reconcile.reconcile(state).changes == ()
    assert reconcile.reconcile(state, read={"toy": {"where": "here"}}).unreadable == ()

    # Start estimates ask it (its asker is in every policy snapshot's estimator).
    snapshot = SimpleNamespace(root=ROOT / "policies", tables=load_tables())
    estimator = Estimators().of(snapshot)
    assert any(isinstance(a, ToyAsker) for a in estimator.askers)

    assert toy.calls == [
        "submit d1 {'colour': 'blue'} True", "status", "cancel", "discover",
        "reconcile ['t1'] {}", "reconcile ['t1'] {'where': 'here'}", "asker",
    ]  # fmt: skip


def test_a_job_no_registered_scheduler_runs_is_left_to_whoever_recorded_it() -> None:
    """A grant recorded under a scheduler this registry does not hold (Kueue's admission check
    records its own, ``kueue``) is read by none: reconcile passes it by, release touches no job."""
    from types import SimpleNamespace

    from examlops_policy.app import reconcile, schedulers

    assert schedulers.of_job("kueue") is None and schedulers.of_job(None) is schedulers.SCHEDULERS["slurm"]
    grant = SimpleNamespace(job_id="ns/job", scheduler="kueue", job_uid="u1", job_started_at=None)
    state = SimpleNamespace(store=SimpleNamespace(live_grants=lambda with_jobs: [grant]), snapshot=lambda: SimpleNamespace(states=()))
    report = reconcile.reconcile(state)
    assert (report.changes, report.unreadable, report.checked) == ((), (), 1)
