"""The reviewed data tables (accelerators, engines, models, partitioning, regions, accounting).

The same YAML files are loaded by OPA as ``data.examlops.tables`` and read here for what Python
needs them for: validating specs early, pricing and carbon defaults, and the policy revision.

Every command reads them, so the parsed tables are kept in a compiled cache (JSON, named by the
SHA-256 of the YAML files' names and bytes): a cold process reads one small file instead of
importing PyYAML and parsing every file. The YAML stays the only source: an entry is used only
when the digest of the files read now names it and its own checksum holds, and is otherwise
ignored, so a stale, damaged, foreign or unwritable cache costs a parse, never a wrong table.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from examlops_policy._canonical import canonical
from examlops_policy.errors import PolicyError

if TYPE_CHECKING:
    from examlops_policy.model import Grant, JSONObject

_PACKAGE_DIR: Final = Path(__file__).resolve().parent


def policy_dir() -> Path:
    """Where the Rego policies and tables live.

    ``EXA_POLICY_DIR`` wins; else the copy bundled in a wheel; else ``policies/`` beside the package
    in a source checkout.
    """
    env = os.environ.get("EXA_POLICY_DIR")
    candidates = [Path(env)] if env else [_PACKAGE_DIR / "_policies", _PACKAGE_DIR.parent / "policies"]
    for candidate in candidates:
        if (candidate / "examlops").is_dir():
            return candidate
    raise PolicyError(f"no policy directory found (looked in {', '.join(map(str, candidates))})")


def schema_dir() -> Path:
    """Where the JSON Schemas live (bundled copy first, then the source checkout)."""
    for candidate in (_PACKAGE_DIR / "_schemas", _PACKAGE_DIR.parent / "schemas"):
        if candidate.is_dir():
            return candidate
    raise PolicyError("no schema directory found")


def policy_files(root: Path) -> list[Path]:
    """The files that make up the policy: Rego (tests excluded) and the data tables, sorted."""
    files = [
        p
        for p in root.rglob("*")
        if p.is_file()
        and (p.suffix in {".yaml", ".yml", ".json"} or (p.suffix == ".rego" and not p.name.endswith("_test.rego")))
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def table_files(root: Path) -> list[Path]:
    """The table files a bundle holds: ``examlops/tables/*.yaml`` and ``*.yml``, in name order."""
    folder = root / "examlops" / "tables"
    return sorted((p for p in folder.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml"}), key=lambda p: p.name)


def revision(root: Path) -> str:
    """A digest of every policy and data file: the policy half of a decision's provenance."""
    digest = hashlib.sha256()
    for path in policy_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Tables:
    """The reviewed tables as plain mappings."""

    accelerators: JSONObject
    engines: JSONObject
    models: JSONObject
    partitioning: JSONObject
    regions: JSONObject
    eu_member_states: tuple[str, ...]
    accounting: JSONObject
    geometry: JSONObject
    fallback: JSONObject
    budgets: JSONObject = field(default_factory=dict)
    priorities: JSONObject = field(default_factory=dict)
    fair_share: JSONObject = field(default_factory=dict)
    quotas: JSONObject = field(default_factory=dict)

    @property
    def unassigned(self) -> str:
        """The project a workload that names none is counted under (budgets.yaml)."""
        return str(self.budgets.get("unassigned") or "default")

    @property
    def priority_classes(self) -> tuple[str, ...]:
        """The priority classes a workload may name (priorities.yaml), first-offered first."""
        classes = cast("JSONObject", self.priorities.get("classes") or {})
        return tuple(sorted(classes, key=lambda c: (int(cast(int, cast("JSONObject", classes[c]).get("rank", 0))), c)))

    @property
    def default_priority(self) -> str | None:
        value = self.priorities.get("default")
        return None if value is None else str(value)
    # Typical provisioning delays of cloud providers (provisioning.yaml): the start estimates of
    # cloud pools with no scheduler to ask, read with the rest of the snapshot.
    provisioning: JSONObject = field(default_factory=dict)
    # What a device does per second, per workload class (throughput.yaml).
    throughput: JSONObject = field(default_factory=dict)

    @property
    def work_classes(self) -> tuple[str, ...]:
        """The workload classes of throughput.yaml, in name order."""
        return tuple(sorted(cast("JSONObject", self.throughput.get("classes") or {})))

    def work_unit(self, work_class: str) -> str | None:
        entry = cast("JSONObject", cast("JSONObject", self.throughput.get("classes") or {}).get(work_class) or {})
        unit = entry.get("unit")
        return None if unit is None else str(unit)

    def work_rate(self, work_class: str | None, model: str | None, grant: Grant) -> float | None:
        """Units of ``work_class`` per second that ``grant`` on a pool of ``model`` does
        (throughput.yaml; the policy's reference rule reads it alike): a whole device's row x the
        devices granted, or the profile's row x the slices granted; None where the table has no row
        (no class, no model, a shared device, a profile without its own row)."""
        if work_class is None or model is None or grant.shares is not None:
            return None
        entry = cast("JSONObject", cast("JSONObject", self.throughput.get("classes") or {}).get(work_class) or {})
        key = model.lower()
        if grant.profile is None:
            row = cast("JSONObject", entry.get("models") or {}).get(key)
            many = grant.devices
        else:
            row = cast("JSONObject", cast("JSONObject", entry.get("profiles") or {}).get(key) or {}).get(grant.profile)
            many = float(grant.units * grant.nodes)
        if not isinstance(row, dict):
            return None
        return float(cast(float, row["per_second"])) * many

    def run_s(self, work_class: str | None, work: float | None, model: str | None, grant: Grant) -> float | None:
        """Seconds ``work`` units of ``work_class`` take on ``grant`` of a pool of ``model`` (None:
        no work said, or no throughput known)."""
        rate = self.work_rate(work_class, model, grant)
        return None if work is None or rate is None or rate <= 0 else work / rate

    def throughput_weight(self, model: str | None, reference: str) -> float:
        """How much more work than one device of ``reference`` one device of ``model`` does: the
        geometric mean, over the classes of throughput.yaml that measure both, of their rates'
        ratio; 1 where none does (a device of unknown speed counts as one device)."""
        if model is None:
            return 1.0
        one = {"requested": 1.0, "honored": True, "share": 1.0, "units": 1, "devices": 1.0}
        from examlops_policy.model import Grant

        grant = Grant(**one)  # type: ignore[arg-type]
        logs = []
        for name in self.work_classes:
            mine, theirs = self.work_rate(name, model, grant), self.work_rate(name, reference, grant)
            if mine is not None and theirs is not None and mine > 0 and theirs > 0:
                logs.append(math.log(mine / theirs))
        return math.exp(sum(logs) / len(logs)) if logs else 1.0

    def region_known(self, region: str) -> bool:
        return region in self.regions

    def scheme_for(self, accelerator: str, model: str | None) -> JSONObject | None:
        """The partitioning scheme of a device: by model where one is named, else by vendor."""
        part = self.partitioning
        by = cast("JSONObject", part["by_model"] if model is not None else part["by_vendor"])
        name = by.get(model if model is not None else accelerator)
        if name is None:
            return None
        return cast("JSONObject", cast("JSONObject", part["schemes"])[str(name)])

    def default_cost(self, accelerator: str) -> float:
        costs = cast("JSONObject", self.accounting["default_cost_per_hour"])
        return float(cast(float, costs[accelerator]))

    def grid_intensity(self, region: str) -> float | None:
        entry = cast("JSONObject", self.regions.get(region) or {})
        value = entry.get("grid_gco2_per_kwh")
        return None if value is None else float(cast(float, value))

    def region_pue(self, region: str) -> float | None:
        entry = cast("JSONObject", self.regions.get(region) or {})
        value = entry.get("pue")
        return None if value is None else float(cast(float, value))

    def model_power(self, model: str | None) -> float | None:
        if model is None:
            return None
        entry = cast("JSONObject", self.models.get(model) or {})
        value = entry.get("power_w")
        return None if value is None else float(cast(float, value))

    def reference_power(self, accelerator: str) -> float:
        """Watts of one device of ``accelerator`` whose pool names no power (accounting.yaml: the
        family's own reference, else the reference accelerator's)."""
        acc = self.accounting
        by_family = cast("JSONObject", acc.get("reference_power_w_by_accelerator") or {})
        return float(cast(float, by_family.get(accelerator, acc["reference_power_w"])))

    @property
    def charge_idle(self) -> bool:
        """Whether a placement's reserved-but-idle time is charged (accounting.yaml ``charge_idle``;
        true when the table does not say)."""
        value = self.accounting.get("charge_idle", True)
        if not isinstance(value, bool):
            raise PolicyError(f"accounting.yaml: charge_idle must be true or false, got {value!r}")
        return value

    def billing(self) -> dict[str, str]:
        """Who bills in the FOCUS export (accounting.yaml ``billing``): ``provider``,
        ``account_id``, ``account_name`` and ``currency``, each a non-empty string."""
        found = self.accounting.get("billing")
        defaults = {"provider": "ExaMLOps", "account_id": "examlops-fleet", "account_name": "ExaMLOps accelerator fleet", "currency": "USD"}
        if found is None:
            return defaults
        if not isinstance(found, dict):
            raise PolicyError(f"accounting.yaml: billing must be a mapping of {', '.join(defaults)}, got {found!r}")
        out = dict(defaults)
        for key, value in found.items():
            if key not in defaults or not isinstance(value, str) or not value.strip():
                raise PolicyError(f"accounting.yaml: billing.{key} must be one of {', '.join(defaults)} with a non-empty text value, got {value!r}")
            out[key] = value
        return out

    def default_carbon_factor(self, region: str, accelerator: str | None = None) -> float:
        """gCO2e per device-hour for a pool that states no carbon factor and no power: the
        reference power of its family (None: the reference accelerator's) x the reference PUE x
        the region's grid intensity (the reviewed per-region figures for the reference
        accelerator; see accounting.yaml)."""
        acc = self.accounting
        watts = self.reference_power(accelerator or "")
        reference = float(cast(float, acc["reference_power_w"]))
        by_region = cast("JSONObject", acc["default_carbon_factor"])
        if region in by_region and watts == reference:
            return float(cast(float, by_region[region]))
        intensity = self.grid_intensity(region)
        if intensity is None:
            return round(float(cast(float, acc["fallback_carbon_factor"])) * watts / reference, 1)
        return round(watts / 1000.0 * float(cast(float, acc["reference_pue"])) * intensity, 1)


@lru_cache(maxsize=1)
def yaml_loader() -> type:
    """The YAML loader of the reviewed tables, in Python as in OPA: it reads as OPA reads, YAML 1.2
    booleans (true/false only) and nulls, decimal, 0x and 0o integers, decimal floats; every other
    plain scalar is a string (``country: NO`` is Norway, not false; ``yes``, dates). Made on first
    use: a placement on a running OPA with the compiled tables never reads YAML."""
    import yaml

    class _TableLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    _TableLoader.yaml_implicit_resolvers = {}
    for tag, pattern, first in (
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN"),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+|0o[0-7]+)$", "-+0123456789"),
        ("tag:yaml.org,2002:float", r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", "-+.0123456789"),
    ):
        _TableLoader.add_implicit_resolver(tag, re.compile(pattern), list(first))
    _TableLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])

    def construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
        text = str(loader.construct_scalar(node))
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        if digits.startswith(("0x", "0o")):
            return sign * int(digits[2:], 16 if digits[1] == "x" else 8)
        return sign * int(digits)

    def construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
        return float(str(loader.construct_scalar(node)))

    _TableLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    _TableLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return _TableLoader


def read_table(path: Path) -> JSONObject:
    """One reviewed table file, read as every table is (``yaml_loader``: as OPA reads it)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy table: {exc}") from exc
    return _parse_yaml(path, raw)


def _parse_yaml(path: Path, raw: bytes) -> JSONObject:
    import yaml  # only when the compiled cache cannot answer

    try:
        data = yaml.load(raw.decode("utf-8"), Loader=yaml_loader())  # noqa: S506 - a safe loader
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read policy table: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: a policy table must be a mapping")
    return cast("JSONObject", data)


# -- the compiled cache ----------------------------------------------------------------------------

CACHE_FORMAT: Final = 2  # 2: read with yaml_loader (as OPA reads), not PyYAML's YAML 1.1 booleans
CACHE_KEEP: Final = 16  # entries kept (one per distinct set of tables); older ones are removed
_TMP_MAX_AGE_S: Final = 3600.0  # a writer's temporary file older than this was left by a crash


def cache_dir() -> Path | None:
    """Where compiled tables are kept: ``EXA_CACHE_DIR`` (empty: no cache), else
    ``$XDG_CACHE_HOME/examlops``, else ``~/.cache/examlops``; a ``tables`` folder inside."""
    env = os.environ.get("EXA_CACHE_DIR")
    if env is not None:
        return Path(env) / "tables" if env else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "examlops" / "tables"
    try:
        return Path.home() / ".cache" / "examlops" / "tables"
    except RuntimeError:  # no home directory to be found
        return None


def tables_digest(sources: list[tuple[str, bytes]]) -> str:
    """SHA-256 over the cache format and each table file's name and bytes, in order."""
    digest = hashlib.sha256(f"examlops-tables-cache {CACHE_FORMAT}\0".encode())
    for name, raw in sources:
        digest.update(f"{name}\0{len(raw)}\0".encode())
        digest.update(raw)
    return digest.hexdigest()


def _private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else: nobody but us can have put it there."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_cached(folder: Path, digest: str) -> JSONObject | None:
    """The merged tables compiled from the sources with ``digest``, or None (absent, damaged,
    compiled from other sources, or writable by someone else)."""
    try:
        if not _private(folder.stat()):
            return None
        with open(folder / f"{digest}.json", "rb") as handle:
            if not _private(os.fstat(handle.fileno())):
                return None
            raw = handle.read()
        header_line, _, payload = raw.partition(b"\n")
        header = json.loads(header_line)
        if (
            not isinstance(header, dict)
            or header.get("format") != CACHE_FORMAT
            or header.get("sources") != digest
            or header.get("payload") != hashlib.sha256(payload).hexdigest()
        ):
            return None
        tables = json.loads(payload)
    except (OSError, ValueError):  # ValueError: not JSON, not UTF-8
        return None
    return cast("JSONObject", tables) if isinstance(tables, dict) else None


def _json_exact(value: object) -> bool:
    """True when ``value`` survives a JSON round trip unchanged, type for type (no dates, no
    non-string keys, no NaN), so that the cache hands back exactly what the YAML said."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(_json_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def _write_cached(folder: Path, digest: str, tables: JSONObject) -> None:
    """Best effort: write the entry through a private temporary file renamed into place (readers
    see the whole entry or none; concurrent writers write the same bytes), then prune."""
    if not _json_exact(tables):
        return
    payload = canonical(tables)
    header = json.dumps({"format": CACHE_FORMAT, "sources": digest, "payload": hashlib.sha256(payload).hexdigest()}).encode()
    tmp = folder / f".{digest}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder.stat()):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(header + b"\n" + payload)
            os.replace(tmp, folder / f"{digest}.json")
        finally:
            tmp.unlink(missing_ok=True)
        _prune(folder)
    except OSError:
        return  # a read-only or full disk: the tables were parsed, only the cache is missing


def _prune(folder: Path) -> None:
    """Keep the newest CACHE_KEEP entries; remove temporary files a crashed writer left."""
    now = time.time()
    entries: list[tuple[float, Path]] = []
    for path in folder.iterdir():
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue  # removed by another process meanwhile
        if path.name.endswith(".json") and not path.name.startswith("."):
            entries.append((mtime, path))
        elif path.name.endswith(".tmp") and now - mtime > _TMP_MAX_AGE_S:
            path.unlink(missing_ok=True)
    for _, path in sorted(entries, reverse=True)[CACHE_KEEP:]:
        path.unlink(missing_ok=True)


def compiled(kind: str, sources: list[tuple[str, bytes]], build: Callable[[], JSONObject]) -> JSONObject:
    """What ``build`` makes of the table files ``sources`` (name, bytes), from the compiled cache
    when it holds it for these exact files, else built (and the cache written). ``kind`` names
    what is kept, so that different things made of the same files are kept apart."""
    folder = cache_dir()
    digest = tables_digest([(f"{kind}\0", b""), *sources])
    if folder is not None:
        cached = _read_cached(folder, digest)
        if cached is not None:
            return cached
    made = build()
    if folder is not None:
        _write_cached(folder, digest, made)
    return made


def _merged_tables(base: Path) -> JSONObject:
    """The table files under ``base`` merged into one mapping: from the compiled cache when it
    holds these exact files, else parsed from YAML (and the cache written)."""
    sources: list[tuple[str, bytes]] = []
    for path in sorted(base.glob("*.yaml")):
        try:
            sources.append((path.name, path.read_bytes()))
        except OSError as exc:
            raise PolicyError(f"{path}: cannot read policy table: {exc}") from exc
    folder = cache_dir()
    digest = tables_digest(sources)
    if folder is not None:
        cached = _read_cached(folder, digest)
        if cached is not None:
            return cached
    merged: JSONObject = {}
    for name, raw in sources:
        merged.update(_parse_yaml(base / name, raw))
    if folder is not None:
        _write_cached(folder, digest, merged)
    return merged


@lru_cache(maxsize=4)
def load_tables(root: Path | None = None) -> Tables:
    """Read every table under ``<policy dir>/examlops/tables``."""
    base = (root or policy_dir()) / "examlops" / "tables"
    merged = _merged_tables(base)
    try:
        return Tables(
            accelerators=cast("JSONObject", merged["accelerators"]),
            engines=cast("JSONObject", merged["engines"]),
            models=cast("JSONObject", merged["models"]),
            partitioning=cast("JSONObject", merged["partitioning"]),
            regions=cast("JSONObject", merged["regions"]),
            eu_member_states=tuple(cast("list[str]", merged["eu_member_states"])),
            accounting=cast("JSONObject", merged["accounting"]),
            geometry=cast("JSONObject", merged["geometry"]),
            fallback=cast("JSONObject", merged["fallback"]),
            budgets=cast("JSONObject", merged.get("budgets") or {}),
            priorities=cast("JSONObject", merged.get("priorities") or {}),
            fair_share=cast("JSONObject", merged.get("fair_share") or {}),
            quotas=cast("JSONObject", merged.get("quotas") or {}),
            provisioning=cast("JSONObject", merged.get("provisioning") or {}),
            throughput=cast("JSONObject", merged.get("throughput") or {}),
        )
    except KeyError as exc:
        raise PolicyError(f"{base}: table {exc} is missing") from exc
