"""The decision table Slurm's job_submit plugin reads (``hooks/slurm/job_submit.lua``).

slurmctld runs the plugin under its locks, one job at a time: it cannot ask OPA or this layer.
So the layer decides ahead, for every shape of GPU job it can foresee, and writes the answers to a
file the plugin reads:

* a row per (profile, GRES type, GPUs per node, nodes, engine, capabilities): a profile is what a
  Slurm account stands for (its project of budgets.yaml, residency class and data region, from a
  reviewed accounts file such as ``examples/slurm-accounts.yaml``); the GRES types, counts and
  node counts are those the Slurm pools (pools that name a partition and a GRES type) can hold; the
  engines those the accounts file maps licences to, and ``generic``; the capabilities each set of
  the pools' features a constraint may ask (every subset of them when a type's pools have at most
  ``MAX_FEATURES_FOR_SUBSETS`` features; else none, each one, each pair, and each pool's own set);
* each row is one policy decision, made the way ``exa hardware place --dry-run`` makes it
  (``Hardware.what_if``) over the Slurm pools of that GRES type with nothing held on them: live
  capacity is Slurm's to judge (a job waits in its partition), the rules that never change with
  capacity (residency, portability, budget caps, the shape fitting a node) are the policy's. A
  placement gives the chosen pool's partition, the partitions of every pool the policy admits,
  and the policy's reason for each partition it does not; a rejection gives the policy's reason.

Python words and serialises what the policy decided; it decides nothing. The file is a Lua chunk
(loaded by the plugin with no library in reach), whose first line says the table's revision and
when it was written; it is written whole or not at all (a temporary file renamed over it).
``Keeper`` keeps it current in ``exa hardware serve``: the rows are decided again when the policy
revision, the pools or the accounts file change, and the file is written again every step (its
``written_at`` says when the service last confirmed it; an older one is stale to the plugin).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from examlops_policy._private import write_atomically
from examlops_policy.errors import SpecError
from examlops_policy.model import ENGINES, RESIDENCIES, Placement, Pool, Workload, pool_spec

if TYPE_CHECKING:
    from examlops_policy.model import Decision, PoolState

FORMAT: Final = 1
HOOK: Final = Path(__file__).resolve().parent / "hooks" / "slurm" / "job_submit.lua"
CONF_NAME: Final = "exa_job_submit.conf"
TABLE_NAME: Final = "exa_job_submit_table.lua"
HEADER: Final = "-- exa-job-submit-table"
# A type's pools with at most this many features get a row for every subset a constraint may ask.
MAX_FEATURES_FOR_SUBSETS: Final = 6
# The most nodes a row is decided for (a job over more nodes has no row: on_unknown).
MAX_NODES: Final = 8
MAX_ROWS: Final = 20_000
# A refusal's text, as sbatch shows it, is cut here (the policy's reasons for every partition).
MAX_REASON_CHARS: Final = 1000
ROW_WORKLOAD: Final = "slurm-job"
_ACCOUNT_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class Deciding(Protocol):
    """What the table needs of the façade (``examlops_policy.hardware.Hardware``)."""

    def pools(self) -> list[PoolState]: ...

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None, *, where: bool = False) -> Decision: ...


# -- the accounts file ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """What a Slurm account's jobs are judged as: a project (None: the budgets table's
    ``unassigned`` one), a residency class and where the data lives."""

    project: str | None = None
    residency: str = "open"
    data_region: str | None = None

    @property
    def key(self) -> str:
        return f"{self.project or '-'}/{self.residency}/{self.data_region or '-'}"


@dataclass(frozen=True)
class Accounts:
    """The reviewed accounts file: account -> profile, the profile of any other account (None:
    such jobs have no row), and licence -> engine."""

    source: str
    accounts: Mapping[str, Profile]
    default: Profile | None
    licenses: Mapping[str, str]
    digest: str

    @classmethod
    def none(cls) -> Accounts:
        """No accounts file: every account's jobs are judged as the unassigned project's."""
        return cls("(no accounts file)", {}, Profile(), {}, "none")

    @property
    def profiles(self) -> list[Profile]:
        found = {p.key: p for p in (*self.accounts.values(), *([self.default] if self.default else []))}
        return [found[k] for k in sorted(found)]

    def accounts_of(self, profile: Profile) -> list[str]:
        names = sorted(a for a, p in self.accounts.items() if p == profile)
        return names + (["default"] if self.default == profile else [])


def _profile(raw: object, source: str, where: str) -> Profile:
    if not isinstance(raw, dict):
        raise SpecError("expected a mapping with project (and optionally residency, data_region)", source=source, field=where)
    unknown = sorted(set(raw) - {"project", "residency", "data_region"})
    if unknown:
        raise SpecError(f"unknown key(s) {', '.join(map(str, unknown))} (expected project, residency, data_region)", source=source, field=where)
    project, residency, region = raw.get("project"), raw.get("residency", "open"), raw.get("data_region")
    if not isinstance(project, str) or not project:
        raise SpecError("expected a project of policies/examlops/tables/budgets.yaml", source=source, field=f"{where}.project")
    if residency not in RESIDENCIES:
        raise SpecError(f"expected one of {', '.join(RESIDENCIES)} (got {residency!r})", source=source, field=f"{where}.residency")
    if region is not None and (not isinstance(region, str) or not region):
        raise SpecError("expected a region of policies/examlops/tables/regions.yaml", source=source, field=f"{where}.data_region")
    return Profile(project, str(residency), region)


def _name(value: object, source: str, where: str, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 64 or not set(value) <= _ACCOUNT_CHARS:
        raise SpecError(f"expected {what}: 1 to 64 of a-z, A-Z, 0-9, '_', '.', '-' (got {value!r})", source=source, field=where)
    return value


def load_accounts(path: Path) -> Accounts:
    """Read and check the accounts file (SpecError naming the file and field)."""
    from examlops_policy.specs import read_text, read_yaml

    source = str(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError("expected a mapping with accounts (and optionally default, licenses)", source=source)
    unknown = sorted(map(str, set(data) - {"accounts", "default", "licenses"}))
    if unknown:
        raise SpecError(f"unknown key(s) {', '.join(unknown)} (expected accounts, default, licenses)", source=source)
    raw_accounts = data.get("accounts") or {}
    if not isinstance(raw_accounts, dict):
        raise SpecError("expected a mapping of Slurm account -> {project, residency, data_region}", source=source, field="accounts")
    accounts = {_name(a, source, f"accounts.{a}", "a Slurm account name"): _profile(p, source, f"accounts.{a}") for a, p in raw_accounts.items()}
    default = _profile(data["default"], source, "default") if data.get("default") is not None else None
    if not accounts and default is None:
        raise SpecError("names no account and no default: every GPU job would have no row", source=source, field="accounts")
    raw_licenses = data.get("licenses") or {}
    if not isinstance(raw_licenses, dict):
        raise SpecError("expected a mapping of licence name -> engine", source=source, field="licenses")
    licenses = {}
    for name, engine in raw_licenses.items():
        _name(name, source, f"licenses.{name}", "a Slurm licence name")
        if engine not in ENGINES:
            raise SpecError(f"expected an engine, one of {', '.join(ENGINES)} (got {engine!r})", source=source, field=f"licenses.{name}")
        licenses[str(name)] = str(engine)
    digest = hashlib.sha256(read_text(path).encode("utf-8")).hexdigest()
    return Accounts(source, accounts, default, licenses, digest)


# -- the rows --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One decision: ``partition`` and ``admits`` (and ``no``: partition -> the policy's reason)
    for a placement, ``refuse`` (the policy's reason) for a rejection."""

    key: str
    partition: str | None = None
    admits: tuple[str, ...] = ()
    no: Mapping[str, str] = field(default_factory=dict)
    refuse: str | None = None
    code: str | None = None

    def as_json(self) -> dict[str, object]:
        if self.refuse is not None:
            return {"key": self.key, "refuse": self.refuse, "code": self.code}
        return {"key": self.key, "partition": self.partition, "admits": list(self.admits), "no": dict(sorted(self.no.items()))}


@dataclass(frozen=True)
class Table:
    """The rows with what they were decided under: the policy revision OPA served, the inputs'
    digest (pools and accounts file) and the table's own revision (a digest of what it says)."""

    policy_revision: str
    inputs: str
    accounts: Mapping[str, str]
    default_profile: str | None
    licenses: Mapping[str, str]
    rows: tuple[Row, ...]
    revision: str

    @property
    def routed(self) -> int:
        return sum(1 for r in self.rows if r.refuse is None)

    @property
    def refused(self) -> int:
        return len(self.rows) - self.routed


def slurm_pools(states: Iterable[PoolState]) -> list[Pool]:
    """The pools a Slurm job can be routed to: those that name a partition and a GPU GRES type."""
    return sorted((s.pool for s in states if s.pool.partition and s.pool.gres_type), key=lambda p: p.name)


def inputs_digest(pools: Sequence[Pool], accounts: Accounts) -> str:
    """What the rows depend on beside the policy: the Slurm pools and the accounts file."""
    doc = {"pools": [pool_spec(p) for p in pools], "accounts": accounts.digest}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")).hexdigest()


def capability_sets(pools: Sequence[Pool]) -> list[tuple[str, ...]]:
    """The sets of capabilities a job's constraint may ask that get a row (see the module)."""
    union = sorted({c for p in pools for c in p.capabilities})
    if len(union) <= MAX_FEATURES_FOR_SUBSETS:
        sets = {tuple(c) for n in range(len(union) + 1) for c in itertools.combinations(union, n)}
    else:
        sets = {(), *((c,) for c in union), *itertools.combinations(union, 2), *(tuple(sorted(p.capabilities)) for p in pools)}
    return sorted(sets, key=lambda s: (len(s), s))


def _shapes(pools: Sequence[Pool]) -> tuple[int, int]:
    """The most GPUs one node of these pools has, and the most nodes one of them has."""
    per_node = max(max((n.devices for n in p.node_list()), default=p.count) for p in pools)
    nodes = max(len(p.node_list()) for p in pools)
    return max(1, per_node), max(1, min(nodes, MAX_NODES))


def _row(key: str, decided: Decision, pools: Sequence[Pool]) -> Row:
    partition_of = {p.name: str(p.partition) for p in pools}
    if isinstance(decided, Placement):
        admits = sorted({partition_of[v.pool] for v in decided.verdicts if v.admissible and v.pool in partition_of})
        no: dict[str, str] = {}
        for v in decided.verdicts:
            part = partition_of.get(v.pool)
            if part is None or part in admits or part in no:
                continue
            no[part] = "; ".join(r.message for r in v.reasons) or "not admitted by the policy"
        return Row(key, partition_of[decided.pool], tuple(admits), no)
    # The headline, then each partition's reasons in the policy's words (partitions that share
    # their reasons said once).
    said: dict[str, list[str]] = {}
    for v in decided.verdicts:
        part = partition_of.get(v.pool)
        if part is None:
            continue
        words = "; ".join(dict.fromkeys(r.message for r in v.reasons)) or "not admitted by the policy"
        if part not in sum(said.values(), []):
            said.setdefault(words, []).append(part)
    details = " · ".join(f"partition {', '.join(parts)}: {words}" for words, parts in said.items())
    text = f"{decided.reason} [{decided.code}]" + (f" · {details}" if details else "")
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 1] + "…"
    return Row(key, refuse=text, code=decided.code)


def compute(hw: Deciding, accounts: Accounts) -> Table:
    """Every row, each decided by the policy (``what_if`` over the type's Slurm pools, nothing held).
    SpecError for an accounts file the policy's tables refuse (an unknown project or region),
    naming the file and the accounts; PolicyUnavailable/PolicyError when the policy cannot decide."""
    pools = slurm_pools(hw.pools())
    by_type: dict[str, list[Pool]] = {}
    for p in pools:
        by_type.setdefault(str(p.gres_type).lower(), []).append(p)
    engines = sorted({"generic", *accounts.licenses.values()})
    rows: list[Row] = []
    revisions: set[str] = set()
    plan = []
    for gres, typed in sorted(by_type.items()):
        families = sorted({p.accelerator for p in typed})
        if len(families) != 1:
            names = ", ".join(f"{p.name} ({p.accelerator})" for p in typed)
            raise SpecError(f"the pools of GRES type {gres!r} are of more than one accelerator family: {names}", source="pools")
        per_node, most_nodes = _shapes(typed)
        for caps in capability_sets(typed):
            for count in range(1, per_node + 1):
                for nodes in range(1, most_nodes + 1):
                    for engine in engines:
                        plan.append((gres, families[0], typed, count, nodes, engine, caps))
    total = len(plan) * len(accounts.profiles)
    if total > MAX_ROWS:
        raise SpecError(f"the table would have {total} rows, more than {MAX_ROWS}: map fewer profiles, or fewer features per pool", source=accounts.source)
    for profile in accounts.profiles:
        for gres, family, typed, count, nodes, engine, caps in plan:
            key = "|".join((profile.key, gres, str(count), str(nodes), engine, ",".join(caps)))
            workload = Workload(
                ROW_WORKLOAD, family, capabilities=caps, engine=engine, count=count, nodes=nodes, project=profile.project,
                residency=profile.residency, data_region=profile.data_region,
            )  # fmt: skip
            try:
                decided = hw.what_if(workload, typed)
            except SpecError as exc:
                raise SpecError(f"{exc.detail} (accounts {', '.join(accounts.accounts_of(profile))})", source=accounts.source) from exc
            revisions.add(decided.provenance.policy_revision)
            rows.append(_row(key, decided, typed))
    if len(revisions) > 1:
        from examlops_policy.errors import PolicyError

        raise PolicyError(f"the policy changed while the table was decided ({', '.join(sorted(revisions))}): decide it again")
    policy_revision = revisions.pop() if revisions else "none"
    mapped = {a: p.key for a, p in sorted(accounts.accounts.items())}
    default = accounts.default.key if accounts.default else None
    body = {"format": FORMAT, "policy_revision": policy_revision, "accounts": mapped, "default_profile": default,
            "licenses": dict(sorted(accounts.licenses.items())), "rows": [r.as_json() for r in rows]}  # fmt: skip
    revision = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
    return Table(policy_revision, inputs_digest(pools, accounts), mapped, default, dict(sorted(accounts.licenses.items())), tuple(rows), revision)


# -- the file --------------------------------------------------------------------------------------


def lua_string(text: str) -> str:
    """``text`` as a Lua 5.1 string literal: quotes, backslashes and control bytes escaped."""
    out = ['"']
    for byte in text.encode("utf-8"):
        if byte in (0x22, 0x5C):
            out.append("\\" + chr(byte))
        elif byte < 0x20 or byte == 0x7F:
            out.append(f"\\{byte:03d}")
        else:
            out.append(chr(byte) if byte < 0x80 else f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


def _lua_map(values: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"[{lua_string(k)}] = {_lua_value(v)}" for k, v in values.items()) + "}"


def _lua_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Mapping):
        return _lua_map(value)
    raise TypeError(f"no Lua form for {type(value).__name__}")


def render_rows(table: Table) -> str:
    """The rows as Lua (the part of the file that changes only with the table's revision)."""
    lines = []
    for r in table.rows:
        if r.refuse is not None:
            fields: dict[str, object] = {"refuse": r.refuse}
        else:
            fields = {"partition": str(r.partition), "admitted": ", ".join(r.admits), "admits": {p: True for p in r.admits}}
            if r.no:
                fields["no"] = dict(sorted(r.no.items()))
        lines.append(f"[{lua_string(r.key)}] = {_lua_map(fields)},")
    return "\n".join(lines)


def render(table: Table, written_at: int, rows: str | None = None) -> str:
    """The whole file: the header line, then a chunk that returns the table."""
    written = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written_at))
    head = {
        "format": FORMAT, "revision": table.revision, "policy_revision": table.policy_revision, "written_at": written_at,
        "written": written, "accounts": dict(table.accounts), "licenses": dict(table.licenses),
    }  # fmt: skip
    parts = [f"{HEADER} format={FORMAT} revision={table.revision} written_at={written_at}",
             "-- Written by examlops-policy (exa slurm table / exa hardware serve --slurm-table); do not edit: it is written again.",
             "return {"]  # fmt: skip
    parts += [f"{k} = {_lua_value(v)}," for k, v in head.items()]
    if table.default_profile is not None:
        parts.append(f"default_profile = {lua_string(table.default_profile)},")
    parts += ["rows = {", render_rows(table) if rows is None else rows, "},", "}", ""]
    return "\n".join(parts)


def write_atomic(path: Path, text: str, *, what: str = "--out") -> None:
    """``text`` at ``path`` whole or not at all: a temporary file beside it (mode 0644: slurmctld
    reads it as its own user), fsynced, renamed over it, the folder fsynced. SpecError naming the
    path when it cannot be written (the old file, if any, is untouched)."""
    folder = path.parent
    if not folder.is_dir():
        raise SpecError(f"no folder {folder} to write the table in", source=str(path), field=what)
    try:
        write_atomically(path, text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise SpecError(f"cannot write: {exc.strerror or exc}", source=str(path), field=what) from exc


def write(hw: Deciding, path: Path, accounts: Accounts, *, now: float | None = None) -> Table:
    """Decide the table and write it at ``path`` (see ``write_atomic``)."""
    if path.is_dir():
        raise SpecError("is a folder: name the table's file (e.g. exa_job_submit_table.lua)", source=str(path), field="--out")
    table = compute(hw, accounts)
    write_atomic(path, render(table, int(time.time() if now is None else now)))
    return table


class Keeper:
    """Keeps the table at ``path`` current for ``exa hardware serve``: ``step`` decides the rows
    again when the policy revision, the pools or the accounts file changed since it last did, and
    writes the file again (a new ``written_at``) every step."""

    def __init__(self, path: Path, accounts_file: Path | None) -> None:
        self.path = path
        self.accounts_file = accounts_file
        self.table: Table | None = None
        self._rows: str | None = None
        self._key: tuple[str, str] | None = None

    def step(self, hw: Deciding, policy_revision: str) -> list[str]:
        """Write the table (decided again if its inputs changed): the lines to log. Raises what
        ``compute`` and ``write_atomic`` raise; the file is then left as it was (it goes stale)."""
        accounts = load_accounts(self.accounts_file) if self.accounts_file is not None else Accounts.none()
        key = (policy_revision, inputs_digest(slurm_pools(hw.pools()), accounts))
        lines = []
        if self.table is None or key != self._key:
            table = compute(hw, accounts)
            self.table, self._rows, self._key = table, render_rows(table), key
            lines.append(f"slurm table: decided {len(table.rows)} rows ({table.routed} routed, {table.refused} refused) "
                         f"under policy {table.policy_revision[:19]} · table {table.revision[:12]} · {self.path}")  # fmt: skip
        write_atomic(self.path, render(self.table, int(time.time()), self._rows), what="--slurm-table")
        return lines


def keeper(table: Path | None, accounts_file: Path | None) -> Keeper:
    """A ``Keeper`` for ``serve``, its inputs checked now: SpecError for an accounts file without a
    table, an accounts file it cannot use, or a table whose folder is not there."""
    if table is None:
        raise SpecError("maps accounts for the Slurm decision table: add --slurm-table PATH", field="--slurm-accounts")
    if accounts_file is not None:
        load_accounts(accounts_file)
    if table.is_dir():
        raise SpecError("is a folder: name the table's file (e.g. exa_job_submit_table.lua)", source=str(table), field="--slurm-table")
    if not table.parent.is_dir():
        raise SpecError(f"no folder {table.parent} to write the table in", source=str(table), field="--slurm-table")
    return Keeper(table, accounts_file)


__all__ = [
    "Accounts", "CONF_NAME", "Deciding", "FORMAT", "HOOK", "Keeper", "Profile", "Row", "TABLE_NAME", "Table", "capability_sets",
    "compute", "keeper", "load_accounts", "lua_string", "render", "slurm_pools", "write", "write_atomic",
]  # fmt: skip
