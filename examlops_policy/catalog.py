"""Cloud price catalogs (SkyPilot format) read into offers, and the pools an import would change.

    catalog = read_catalog(Path("examples/catalogs/aws-vms-eu.csv"))      # offers, notes, unknowns
    plan = plan_import(catalog, registered_pools, ImportOptions(count=8))  # a diff, nothing written
    for pool in plan.writes(): ...                                         # the caller registers them

Only ``read_catalog`` touches the file system; ``parse_catalog`` and ``plan_import`` are pure.

**The format.** A SkyPilot ``vms.csv`` (skypilot-org/skypilot-catalog, schema v7/v8), read BY
HEADER since the column order differs per cloud. Required columns: ``InstanceType``,
``AcceleratorName``, ``AcceleratorCount``, ``Price``, ``SpotPrice``, ``Region``; ``vCPUs``,
``MemoryGiB``, ``GpuInfo``, ``AvailabilityZone`` and ``Arch`` may be present (the v7 Nebius and
Seeweb files have no ``AvailabilityZone``). Leading ``# key: value`` lines are snapshot metadata
(``cloud``, ``catalog``, ``commit``, ``read``); SkyPilot's own files have none.

**Refused** (``SpecError`` naming the file, the line and what was expected; nothing is returned):
a file over ``MAX_CATALOG_BYTES``, not UTF-8, without a required column or with a repeated one,
a row with the wrong number of fields, a price or count that is not a finite number, a negative
price, an accelerator count of 0 or less.

**Skipped with a note** (real catalogs have them): rows without an accelerator (CPU instances,
GCP host VMs), an empty on-demand or spot price, a zero price, a fractional accelerator count, a
row without a region, a TPU price of exactly 700.0 (the catalog's placeholder for an unavailable
combination), a GCP accelerator-only price row whose host VM price is not in the file.

**Listed, never guessed**: accelerator names missing from the reviewed table
``policies/examlops/tables/catalog_accelerators.yaml``; regions missing from ``regions.yaml`` or
belonging there to another provider (Nebius ``us-central1`` is not GCP's Iowa region).

**Prices**: per device-hour = instance price / devices in the instance (a TPU slice
``tpu-v6e-8`` is 8 chips). GCP A2/A3/A4 GPUs are priced in their own rows: their price is added to
the host VM's in the same zone. The cheapest instance is kept per (model, devices per instance,
region, spot); a pool per (model, region, spot) gets the cheapest of those per device-hour. Spot
prices are separate offers and become separate pools (``spot: true``, name suffix ``-spot``).

GpuInfo is not read: its memory figures are not reliable across clouds (Nebius reports host
memory there), so device identity comes from the reviewed table alone.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Final, Literal, cast

import yaml

from examlops_policy.quantities import shown
from examlops_policy.errors import PolicyError, SpecError
from examlops_policy.model import ACCELERATORS, JSONObject, JSONValue, Pool
from examlops_policy.specs import read_text
from examlops_policy.tables import Tables, load_tables, policy_dir

# Real catalogs are far smaller (SkyPilot v7 aws/vms.csv: 2.5 MB, gcp/vms.csv: 1.6 MB); anything
# past this is refused before it is read into memory.
MAX_CATALOG_BYTES: Final = 16 * 1024 * 1024
MAX_ACCELERATOR_COUNT: Final = 1_000_000
MAX_POOL_COUNT: Final = 10_000_000  # as schemas/pool.schema.json
# Shared reference "hardware-and-regions", catalog caveats: "a TPU price of 700.0 is a
# placeholder for unavailable combinations".
TPU_PLACEHOLDER_PRICE: Final = 700.0

REQUIRED_COLUMNS: Final = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region")
OPTIONAL_COLUMNS: Final = ("vCPUs", "MemoryGiB", "GpuInfo", "AvailabilityZone", "Arch")

_POOL_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_CLOUD: Final = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
_SOURCE_PART: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,150}$")
_META_LINE: Final = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9_-]*)\s*:\s*(.*?)\s*$")
_MAX_NOTE_LINES: Final = 5

ChangeKind = Literal["added", "price_changed", "source_changed", "unchanged", "kept", "conflict", "skipped"]
CHANGE_LABELS: Final[Mapping[str, str]] = {
    "added": "added",
    "price_changed": "price changed",
    "source_changed": "source changed",
    "unchanged": "unchanged",
    "kept": "kept (set by hand)",
    "conflict": "conflict",
    "skipped": "skipped",
}


# --- the reviewed name table --------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceEntry:
    """What a catalog accelerator name is: a family, a model key, and how to count devices."""

    accelerator: str
    model: str
    devices_from_suffix: bool = False  # tpu-v6e-8: one unit of 8 devices
    host_included: bool = False  # an accelerator-only row already prices the whole unit


@dataclass(frozen=True)
class CatalogMapping:
    """``catalog_accelerators.yaml``, validated against the accelerators and models tables."""

    names: Mapping[str, DeviceEntry]
    by_cloud: Mapping[str, Mapping[str, DeviceEntry]]
    prefixes: tuple[tuple[str, DeviceEntry], ...]  # longest prefix first
    hosts: Mapping[str, Mapping[str, Mapping[int, tuple[str, ...]]]]

    def resolve(self, name: str, cloud: str) -> tuple[DeviceEntry, int] | None:
        """The device a catalog name is and the devices in one unit of it, or None if unknown."""
        entry = self.by_cloud.get(cloud, {}).get(name) or self.names.get(name)
        if entry is not None:
            return entry, 1
        for prefix, candidate in self.prefixes:
            suffix = name[len(prefix) :]
            if name.startswith(prefix) and suffix.isascii() and suffix.isdigit() and int(suffix) >= 1:
                return candidate, int(suffix) if candidate.devices_from_suffix else 1
        return None

    def host_types(self, cloud: str, name: str, count: int) -> tuple[str, ...]:
        """Host instance types sold with ``count`` of accelerator ``name`` (empty if none listed)."""
        return tuple(self.hosts.get(cloud, {}).get(name, {}).get(count, ()))

    def knows(self, name: str) -> bool:
        """Whether ``name`` appears anywhere in the table (for the accelerator filter)."""
        lowered = name.lower()
        every = list(self.names) + [n for entries in self.by_cloud.values() for n in entries]
        return any(n.lower() == lowered for n in every)


def _entry(data: object, *, where: str, tables: Tables, prefix: bool) -> DeviceEntry:
    if not isinstance(data, dict):
        raise PolicyError(f"catalog_accelerators.yaml: {where}: expected a mapping")
    allowed = {"accelerator", "model", "devices", "host"} if prefix else {"accelerator", "model"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PolicyError(f"catalog_accelerators.yaml: {where}: unknown field(s) {', '.join(map(str, unknown))}")
    accelerator, model = data.get("accelerator"), data.get("model")
    if accelerator not in ACCELERATORS:
        raise PolicyError(f"catalog_accelerators.yaml: {where}: accelerator {accelerator!r} is not one of {', '.join(ACCELERATORS)}")
    entry = tables.models.get(str(model))
    if not isinstance(model, str) or not isinstance(entry, dict):
        raise PolicyError(f"catalog_accelerators.yaml: {where}: model {model!r} is not a key of models.yaml")
    if entry.get("accelerator") != accelerator:
        raise PolicyError(f"catalog_accelerators.yaml: {where}: model {model!r} is a {entry.get('accelerator')} device, not {accelerator}")
    devices, host = data.get("devices", "count"), data.get("host", "separate")
    if devices not in ("count", "name_suffix") or host not in ("separate", "included"):
        raise PolicyError(f"catalog_accelerators.yaml: {where}: devices must be count or name_suffix, host separate or included")
    return DeviceEntry(accelerator, model, devices_from_suffix=devices == "name_suffix", host_included=host == "included")


def _hosts(data: object) -> dict[str, dict[str, dict[int, tuple[str, ...]]]]:
    result: dict[str, dict[str, dict[int, tuple[str, ...]]]] = {}
    for cloud, names in cast(dict[str, object], data or {}).items():
        for name, counts in cast(dict[str, object], names or {}).items():
            for count, types in cast(dict[object, object], counts or {}).items():
                where = f"hosts.{cloud}.{name}.{count}"
                if not str(count).isdigit() or not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
                    raise PolicyError(f"catalog_accelerators.yaml: {where}: expected a count and a list of instance types")
                result.setdefault(str(cloud), {}).setdefault(str(name), {})[int(str(count))] = tuple(types)
    return result


@lru_cache(maxsize=4)
def load_catalog_mapping(root: Path | None = None) -> CatalogMapping:
    """Read and check ``<policy dir>/examlops/tables/catalog_accelerators.yaml``.

    Raises ``PolicyError`` when the reviewed table is missing or names an unknown family or model.
    """
    base = (root or policy_dir()) / "examlops" / "tables"
    path = base / "catalog_accelerators.yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read the catalog accelerator table: {exc}") from exc
    table = document.get("catalog_accelerators") if isinstance(document, dict) else None
    if not isinstance(table, dict):
        raise PolicyError(f"{path}: expected a top-level mapping catalog_accelerators")
    tables = load_tables(root)
    names = {str(n): _entry(e, where=f"names.{n}", tables=tables, prefix=False) for n, e in (table.get("names") or {}).items()}
    by_cloud = {
        str(c): {str(n): _entry(e, where=f"by_cloud.{c}.{n}", tables=tables, prefix=False) for n, e in (entries or {}).items()}
        for c, entries in (table.get("by_cloud") or {}).items()
    }
    prefixes = sorted(
        ((str(p), _entry(e, where=f"prefixes.{p}", tables=tables, prefix=True)) for p, e in (table.get("prefixes") or {}).items()),
        key=lambda item: (-len(item[0]), item[0]),
    )
    return CatalogMapping(names, by_cloud, tuple(prefixes), _hosts(table.get("hosts")))


# --- what a catalog says --------------------------------------------------------------------------


@dataclass(frozen=True)
class Offer:
    """One way to rent a device: the cheapest instance for its (model, devices, region, spot)."""

    cloud: str
    accelerator: str
    model: str
    region: str
    zone: str | None
    instance_type: str
    devices: int  # devices in one instance (a TPU slice counts its chips)
    price_per_hour: float  # the whole instance, USD
    price_per_device_hour: float
    spot: bool
    line: int  # where the accelerator's price row is in the file


@dataclass(frozen=True)
class Unrecognized:
    """A catalog value the reviewed tables do not know, with how many rows carry it."""

    value: str
    reason: str
    rows: int
    first_line: int


@dataclass(frozen=True)
class Note:
    """Rows skipped for one reason (not an error: real catalogs have them)."""

    code: str
    message: str
    rows: int
    lines: tuple[int, ...]  # the first few


@dataclass(frozen=True)
class Catalog:
    """A parsed catalog: its offers, and everything that did not become one, said plainly."""

    source: str
    cloud: str
    price_source: str
    rows: int
    offers: tuple[Offer, ...]
    unknown_accelerators: tuple[Unrecognized, ...]
    unknown_regions: tuple[Unrecognized, ...]
    notes: tuple[Note, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Row:
    line: int
    instance_type: str
    name: str
    count: float | None
    price: float | None
    spot: float | None
    region: str
    zone: str | None


def _shown(value: str, limit: int = 60) -> str:
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"


class _Reader:
    """Turns CSV records into ``_Row``s, raising SpecError with the file and line."""

    def __init__(self, source: str, header: Sequence[str], header_line: int) -> None:
        self.source = source
        names = [h.strip() for h in header]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise SpecError(f"column {name!r} appears twice in the header", source=source, field=f"line {header_line}")
            seen.add(name)
        missing = [c for c in REQUIRED_COLUMNS if c not in seen]
        if missing:
            raise SpecError(
                f"missing column(s) {', '.join(missing)}; a SkyPilot vms.csv header names "
                f"{', '.join(REQUIRED_COLUMNS)} (and may name {', '.join(OPTIONAL_COLUMNS)})",
                source=source,
                field=f"line {header_line}",
            )
        self.index = {name: i for i, name in enumerate(names)}
        self.width = len(names)
        self.ignored = sorted(seen - set(REQUIRED_COLUMNS) - set(OPTIONAL_COLUMNS))

    def _number(self, record: Sequence[str], column: str, line: int) -> float | None:
        text = record[self.index[column]].strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise SpecError(f"{column} must be a number (got {_shown(text)})", source=self.source, field=f"line {line}, {column}")
        return value

    def row(self, record: Sequence[str], line: int) -> _Row:
        if len(record) != self.width:
            raise SpecError(f"expected {self.width} fields as in the header, found {len(record)}", source=self.source, field=f"line {line}")

        def text(column: str) -> str:
            return record[self.index[column]].strip() if column in self.index else ""

        price, spot = self._number(record, "Price", line), self._number(record, "SpotPrice", line)
        for column, value in (("Price", price), ("SpotPrice", spot)):
            if value is not None and value < 0:
                raise SpecError(f"{column} must not be negative (got {shown(value)})", source=self.source, field=f"line {line}, {column}")
        name = text("AcceleratorName")
        count = self._number(record, "AcceleratorCount", line)
        if name:
            if count is None:
                raise SpecError(f"AcceleratorCount is empty for accelerator {_shown(name)}", source=self.source, field=f"line {line}, AcceleratorCount")
            if count <= 0:
                raise SpecError(
                    f"AcceleratorCount must be more than 0 for accelerator {_shown(name)} (got {shown(count)})",
                    source=self.source,
                    field=f"line {line}, AcceleratorCount",
                )
            if count > MAX_ACCELERATOR_COUNT:
                raise SpecError(f"AcceleratorCount {shown(count)} is larger than {MAX_ACCELERATOR_COUNT}", source=self.source, field=f"line {line}, AcceleratorCount")
        return _Row(line, text("InstanceType"), name, count, price, spot, text("Region"), text("AvailabilityZone") or None)


def _split_metadata(text: str, source: str) -> tuple[dict[str, str], int, str]:
    """Leading ``# key: value`` lines (and blank lines): metadata, lines consumed, the rest."""
    metadata: dict[str, str] = {}
    lines = text.splitlines(keepends=True)
    consumed = 0
    for line in lines:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        consumed += 1
        match = _META_LINE.match(stripped)
        if match:
            key = match.group(1).lower()
            if key in metadata:
                raise SpecError(f"metadata {key!r} given twice", source=source, field=f"line {consumed}")
            metadata[key] = match.group(2)
    return metadata, consumed, "".join(lines[consumed:])


class _Notes:
    def __init__(self) -> None:
        self._items: dict[str, tuple[str, int, list[int]]] = {}

    def add(self, code: str, message: str, line: int) -> None:
        _, rows, lines = self._items.get(code, (message, 0, []))
        if len(lines) < _MAX_NOTE_LINES:
            lines.append(line)
        self._items[code] = (message, rows + 1, lines)

    def result(self) -> tuple[Note, ...]:
        return tuple(Note(code, message, rows, tuple(lines)) for code, (message, rows, lines) in sorted(self._items.items()))


class _Tally:
    def __init__(self) -> None:
        self._items: dict[tuple[str, str], list[int]] = {}

    def add(self, value: str, reason: str, line: int) -> None:
        entry = self._items.setdefault((value, reason), [0, line])
        entry[0] += 1

    def result(self) -> tuple[Unrecognized, ...]:
        return tuple(Unrecognized(value, reason, n, first) for (value, reason), (n, first) in sorted(self._items.items()))


def _price_source(metadata: Mapping[str, str], cloud: str, snapshot: str | None, digest: str, source: str) -> str:
    catalog = metadata.get("catalog") or f"{cloud}/vms.csv"
    commit = metadata.get("commit")
    when = snapshot or (commit[:12] if commit else None) or metadata.get("read") or f"sha256:{digest[:12]}"
    for label, part in (("catalog", catalog), ("snapshot", when)):
        if not _SOURCE_PART.match(part):
            raise SpecError(f"{label} {_shown(part)} cannot name a price source: use letters, digits and ._:/+=-", source=source)
    return f"skypilot:{catalog}@{when}"


def _cloud(explicit: str | None, metadata: Mapping[str, str], source: str) -> str:
    cloud = explicit or metadata.get("cloud")
    if cloud is None and Path(source).name == "vms.csv":
        cloud = Path(source).parent.name  # catalogs/v7/<cloud>/vms.csv, as SkyPilot lays them out
    if not cloud:
        raise SpecError("cannot tell which cloud this catalog is for: give the cloud (e.g. aws, gcp) or a '# cloud: <name>' line", source=source)
    if not _CLOUD.match(cloud):
        raise SpecError(f"cloud {_shown(cloud)} must be lower-case letters, digits and '-', at most 16 characters", source=source)
    return cloud


def _region_problem(region: str, cloud: str, tables: Tables) -> str | None:
    entry = tables.regions.get(region)
    if not isinstance(entry, dict):
        return "not in the regions table"
    provider = entry.get("provider")
    if provider != cloud:
        return f"the regions table has it for {provider}, not {cloud}" if provider else f"the regions table has it as a non-{cloud} site"
    return None


def _read_rows(body: str, offset: int, source: str) -> tuple[_Reader, list[_Row]]:
    """The header and the rows of the CSV ``body`` (which starts on line ``offset + 1``)."""
    reader: _Reader | None = None
    rows: list[_Row] = []
    records = csv.reader(body.splitlines(keepends=True), strict=True)
    try:
        for record in records:
            line = offset + records.line_num
            if not record or all(not f.strip() for f in record):
                continue
            if reader is None:
                reader = _Reader(source, record, line)
                continue
            rows.append(reader.row(record, line))
    except csv.Error as exc:
        raise SpecError(f"malformed CSV: {exc}", source=source, field=f"line {offset + records.line_num}") from exc
    if reader is None:
        raise SpecError(f"no header line; expected a SkyPilot vms.csv header naming {', '.join(REQUIRED_COLUMNS)}", source=source)
    return reader, rows


def _instance_prices(
    row: _Row,
    entry: DeviceEntry,
    count: int,
    cloud: str,
    mapping: CatalogMapping,
    hosts: Mapping[tuple[str, str, str | None], _Row],
    notes: _Notes,
) -> tuple[str, float | None, float | None] | None:
    """The instance type, price and spot price an accelerator row stands for.

    An accelerator-only row (no InstanceType, as GCP prices A2/A3/A4 GPUs) adds the price of the
    host VM sold with that many accelerators in the same zone; None (noted) when there is none.
    """
    if row.instance_type:
        return row.instance_type, row.price, row.spot
    if entry.host_included:
        return row.name, row.price, row.spot
    types = mapping.host_types(cloud, row.name, count)
    if not types:
        notes.add("no_host_type", "accelerator-only price rows for which catalog_accelerators.yaml names no host VM are skipped", row.line)
        return None
    candidates = [hosts[k] for k in ((t, row.region, row.zone) for t in types) if k in hosts and hosts[k].price is not None]
    if not candidates:
        notes.add("no_host_price", "accelerator-only price rows whose host VM has no price in the same zone are skipped", row.line)
        return None
    host = min(candidates, key=lambda h: (cast(float, h.price), h.instance_type))
    price = None if row.price is None else row.price + cast(float, host.price)
    spot = None if row.spot is None or host.spot is None else row.spot + host.spot
    return host.instance_type, price, spot


def parse_catalog(
    text: str,
    *,
    source: str,
    cloud: str | None = None,
    snapshot: str | None = None,
    tables: Tables | None = None,
    mapping: CatalogMapping | None = None,
) -> Catalog:
    """Parse the text of a SkyPilot ``vms.csv`` into offers (pure; see the module docstring).

    ``cloud`` defaults to the file's ``# cloud:`` line, else the parent folder of a ``vms.csv``;
    ``snapshot`` (a commit or date for ``price_source``) to its ``# commit:`` or ``# read:`` line,
    else a digest of the text. Raises ``SpecError`` for bad input.
    """
    tables = tables or load_tables()
    mapping = mapping or load_catalog_mapping()
    metadata, offset, body = _split_metadata(text, source)
    cloud = _cloud(cloud, metadata, source)
    price_source = _price_source(metadata, cloud, snapshot, hashlib.sha256(text.encode()).hexdigest(), source)

    reader, rows = _read_rows(body, offset, source)
    notes, unknown_names, unknown_regions = _Notes(), _Tally(), _Tally()
    if reader.ignored:
        notes.add("columns_ignored", f"columns not read: {', '.join(reader.ignored)}", offset + 1)
    # Host VM prices by (instance type, region, zone), for accelerator-only rows (GCP A2/A3/A4).
    hosts: dict[tuple[str, str, str | None], _Row] = {}
    for row in rows:
        if row.instance_type and not row.name:
            where = (row.instance_type, row.region, row.zone)
            if where not in hosts or (row.price or math.inf) < (hosts[where].price or math.inf):
                hosts[where] = row

    best: dict[tuple[str, int, str, bool], Offer] = {}
    for row in rows:
        if not row.name:
            notes.add("no_accelerator", "rows without an accelerator (CPU instances, host VMs) are not offers", row.line)
            continue
        resolved = mapping.resolve(row.name, cloud)
        if resolved is None:
            unknown_names.add(row.name, "not in catalog_accelerators.yaml", row.line)
            continue
        entry, per_unit = resolved
        count = cast(float, row.count)
        if not count.is_integer():
            notes.add("fractional_count", "fractional accelerator counts (shared devices) are not imported", row.line)
            continue
        if not row.region:
            notes.add("no_region", "rows without a region cannot be placed", row.line)
            continue
        problem = _region_problem(row.region, cloud, tables)
        if problem:
            unknown_regions.add(row.region, problem, row.line)
            continue
        priced = _instance_prices(row, entry, int(count), cloud, mapping, hosts, notes)
        if priced is None:
            continue
        instance, price, spot = priced
        devices = int(count) * per_unit
        for is_spot, value in ((False, price), (True, spot)):
            kind = "spot" if is_spot else "on-demand"
            if value is None:
                notes.add(f"no_{'spot' if is_spot else 'on_demand'}_price", f"rows with an empty {kind} price", row.line)
                continue
            if entry.accelerator == "tpu" and value == TPU_PLACEHOLDER_PRICE:
                notes.add("placeholder_price", f"TPU prices of {TPU_PLACEHOLDER_PRICE:g} (the catalog's placeholder for unavailable combinations)", row.line)
                continue
            if value == 0:
                notes.add("zero_price", f"rows with a {kind} price of 0", row.line)
                continue
            offer = Offer(
                cloud, entry.accelerator, entry.model, row.region, row.zone, instance, devices,
                round(value, 6), round(value / devices, 6), is_spot, row.line,
            )  # fmt: skip
            group = (entry.model, devices, row.region, is_spot)
            current = best.get(group)
            if current is None or _offer_order(offer) < _offer_order(current):
                best[group] = offer
    offers = tuple(sorted(best.values(), key=lambda o: (o.model, o.region, o.spot, o.devices)))
    return Catalog(source, cloud, price_source, len(rows), offers, unknown_names.result(), unknown_regions.result(), notes.result(), metadata)


def _offer_order(offer: Offer) -> tuple[float, int, str, str, int]:
    # Cheapest per device-hour; then the smaller instance (easier to rent), then by name: stable.
    return (offer.price_per_device_hour, offer.devices, offer.instance_type, offer.zone or "", offer.line)


def read_catalog(
    path: Path,
    *,
    cloud: str | None = None,
    snapshot: str | None = None,
    tables: Tables | None = None,
    mapping: CatalogMapping | None = None,
    max_bytes: int = MAX_CATALOG_BYTES,
) -> Catalog:
    """Read a catalog file (at most ``max_bytes``, UTF-8) and parse it with ``parse_catalog``."""
    source = str(path)
    text = read_text(path, max_bytes).removeprefix("\ufeff")  # a spreadsheet's byte-order mark is not data
    if "\x00" in text:
        raise SpecError(f"NUL byte on line {text.count(chr(10), 0, text.index(chr(0))) + 1}: not a text catalog", source=source)
    return parse_catalog(text, source=source, cloud=cloud, snapshot=snapshot, tables=tables, mapping=mapping)


# --- what an import would change ----------------------------------------------------------------


@dataclass(frozen=True)
class ImportOptions:
    """How to import: capacity for new pools, filters, spot, and whether hand-set prices yield.

    ``count``: devices of each NEW pool (required to write additions; a dry run may omit it).
    ``regions`` / ``accelerators``: keep only these (regions of the table; families, model keys
    or catalog names). ``spot``: import spot offers too. ``overwrite``: replace prices an
    operator set by hand (pools without a ``price_source``).
    """

    count: int | None = None
    overwrite: bool = False
    spot: bool = False
    regions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportChange:
    """What the import does to one pool; ``after`` is what would be registered (None: nothing)."""

    kind: ChangeKind
    name: str
    offer: Offer
    before: Pool | None
    after: Pool | None
    reason: str | None = None

    @property
    def label(self) -> str:
        return CHANGE_LABELS[self.kind]


@dataclass(frozen=True)
class ImportPlan:
    """The diff of an import against the registered pools. Applying ``writes()`` twice is a no-op."""

    catalog: Catalog
    options: ImportOptions
    offers: tuple[Offer, ...]  # after the filters
    changes: tuple[ImportChange, ...]

    def summary(self) -> dict[str, int]:
        """How many pools of each kind, every kind present (zero included), in a fixed order."""
        return {kind: sum(1 for c in self.changes if c.kind == kind) for kind in CHANGE_LABELS}

    def writes(self) -> tuple[Pool, ...]:
        """The pools to register or update, by name. Raises SpecError if additions lack a count."""
        if any(c.kind == "added" and c.after is None for c in self.changes):
            raise SpecError("count is required for new pools (how many devices each new pool may use)", field="count")
        return tuple(cast(Pool, c.after) for c in self.changes if c.kind in ("added", "price_changed", "source_changed"))

    def rows(self) -> list[tuple[str, str, str, str, str, str, str]]:
        """Table rows for people: pool, change, model, region, $/device-h (before -> after), instance, reason."""
        result = []
        for c in self.changes:
            before = c.before.cost_per_hour if c.before is not None else None
            price = f"{c.offer.price_per_device_hour:.4f}"
            if c.kind == "price_changed" and before is not None:
                price = f"{before:.4f} -> {price}"
            elif c.kind in ("kept", "conflict") and before is not None:
                price = f"{before:.4f} (catalog {price})"
            instance = f"{c.offer.devices} x {c.offer.instance_type}"
            result.append((c.name, c.label, c.offer.model, c.offer.region, price, instance, c.reason or ""))
        return result

    def to_json(self) -> JSONObject:
        """Everything a ``--json`` caller needs: summary, changes, offers and what was not imported."""
        catalog = self.catalog

        def offer(o: Offer) -> JSONObject:
            return {k: cast(JSONValue, getattr(o, k)) for k in Offer.__dataclass_fields__}

        def pool(p: Pool | None) -> JSONValue:
            if p is None:
                return None
            # Its fields (never the instance's __dict__, which may also hold what a pool caches).
            data = {k: cast(JSONValue, getattr(p, k)) for k in Pool.__dataclass_fields__ if getattr(p, k) is not None}
            data["capabilities"] = list(p.capabilities)
            return data

        return {
            "source": catalog.source,
            "cloud": catalog.cloud,
            "price_source": catalog.price_source,
            "rows": catalog.rows,
            "summary": cast(JSONValue, self.summary()),
            "changes": [
                {"name": c.name, "kind": c.kind, "label": c.label, "reason": c.reason, "offer": offer(c.offer), "before": pool(c.before), "after": pool(c.after)}
                for c in self.changes
            ],
            "offers": [offer(o) for o in self.offers],
            "unknown_accelerators": [{"name": u.value, "reason": u.reason, "rows": u.rows, "first_line": u.first_line} for u in catalog.unknown_accelerators],
            "unknown_regions": [{"region": u.value, "reason": u.reason, "rows": u.rows, "first_line": u.first_line} for u in catalog.unknown_regions],
            "notes": [{"code": n.code, "message": n.message, "rows": n.rows, "lines": list(n.lines)} for n in catalog.notes],
        }


def pool_name(cloud: str, model: str, region: str, spot: bool) -> str:
    """The deterministic name of an imported pool: ``aws-h100-eu-north-1``, ``...-spot``."""
    return f"{cloud}-{model}-{region}{'-spot' if spot else ''}"


def _check_options(options: ImportOptions, cloud: str, tables: Tables, mapping: CatalogMapping) -> None:
    count = options.count
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_POOL_COUNT):
        raise SpecError(f"count must be a whole number from 1 to {MAX_POOL_COUNT} (got {shown(count)})", field="count")
    for region in options.regions:
        problem = _region_problem(region, cloud, tables)
        if problem:
            raise SpecError(f"region {_shown(region)}: {problem}", field="regions")
    for name in options.accelerators:
        lowered = name.lower()
        if lowered not in ACCELERATORS and lowered not in tables.models and not mapping.knows(name):
            raise SpecError(
                f"accelerator {_shown(name)} is neither a family ({', '.join(ACCELERATORS)}), a model of models.yaml, "
                "nor a name of catalog_accelerators.yaml",
                field="accelerators",
            )


def _selected(offer: Offer, options: ImportOptions, mapping: CatalogMapping) -> bool:
    if offer.spot and not options.spot:
        return False
    if options.regions and offer.region not in options.regions:
        return False
    if options.accelerators:
        wanted = {a.lower() for a in options.accelerators}
        names = {n.lower() for n, e in mapping.names.items() if e.model == offer.model}
        names |= {n.lower() for entries in mapping.by_cloud.values() for n, e in entries.items() if e.model == offer.model}
        if not wanted & ({offer.accelerator, offer.model} | names):
            return False
    return True


def _shape_conflict(pool: Pool, offer: Offer) -> str | None:
    differs = [
        f"{name} {mine!r} (catalog: {theirs!r})"
        for name, mine, theirs in (
            ("target", pool.target, "cloud"),
            ("accelerator", pool.accelerator, offer.accelerator),
            ("model", pool.model, offer.model),
            ("region", pool.region, offer.region),
            ("spot", pool.spot, offer.spot),
        )
        if mine != theirs
    ]
    return f"a registered pool of that name has {', '.join(differs)}; left as it is" if differs else None


def plan_import(
    catalog: Catalog,
    registered: Sequence[Pool],
    options: ImportOptions | None = None,
    *,
    tables: Tables | None = None,
    mapping: CatalogMapping | None = None,
) -> ImportPlan:
    """The change an import of ``catalog`` makes to ``registered`` pools, as a diff (pure).

    One pool per (model, region, spot): the cheapest offer per device-hour. A new pool is
    ``added``; a registered one of that name is ``unchanged``, ``price_changed`` or
    ``source_changed``, ``kept`` when its price was set by hand (no ``price_source``) unless
    ``options.overwrite``, and a ``conflict`` (never touched) when its shape differs. Updates keep
    every other field of the registered pool (count, carbon factor, capabilities, ...).
    """
    options = options or ImportOptions()
    tables = tables or load_tables()
    mapping = mapping or load_catalog_mapping()
    _check_options(options, catalog.cloud, tables, mapping)
    offers = tuple(o for o in catalog.offers if _selected(o, options, mapping))
    cheapest: dict[tuple[str, str, bool], Offer] = {}
    for offer in offers:
        key = (offer.model, offer.region, offer.spot)
        if key not in cheapest or _offer_order(offer) < _offer_order(cheapest[key]):
            cheapest[key] = offer
    by_name = {p.name: p for p in registered}
    changes = [
        _change(pool_name(catalog.cloud, o.model, o.region, o.spot), o, by_name, catalog.price_source, options) for o in cheapest.values()
    ]
    return ImportPlan(catalog, options, offers, tuple(sorted(changes, key=lambda c: c.name)))


def _change(name: str, offer: Offer, by_name: Mapping[str, Pool], source: str, options: ImportOptions) -> ImportChange:
    price = offer.price_per_device_hour
    if not _POOL_NAME.match(name):
        return ImportChange("skipped", name, offer, None, None, "the pool name would be longer than 63 characters")
    before = by_name.get(name)
    if before is None:
        after = None
        if options.count is not None:
            after = Pool(
                name, "cloud", offer.accelerator, options.count, offer.region,
                cost_per_hour=price, model=offer.model, spot=offer.spot, price_source=source,
            )  # fmt: skip
        return ImportChange("added", name, offer, None, after, None if after else "needs a count to be registered")
    conflict = _shape_conflict(before, offer)
    if conflict:
        return ImportChange("conflict", name, offer, before, None, conflict)
    if before.price_source is None and not options.overwrite:
        return ImportChange("kept", name, offer, before, None, "price set by hand; overwrite to replace it")
    if before.cost_per_hour == price and before.price_source == source:
        return ImportChange("unchanged", name, offer, before, before)
    after = replace(before, cost_per_hour=price, price_source=source)
    kind: ChangeKind = "source_changed" if before.cost_per_hour == price else "price_changed"
    return ImportChange(kind, name, offer, before, after)


def apply_writes(registered: Iterable[Pool], writes: Iterable[Pool]) -> list[Pool]:
    """``registered`` with ``writes`` replacing pools of the same name or appended (for what-ifs and tests)."""
    result = {p.name: p for p in registered}
    for pool in writes:
        result[pool.name] = pool
    return sorted(result.values(), key=lambda p: p.name)


@dataclass(frozen=True)
class CatalogImport:
    """An import as ``Hardware.import_catalog`` did it: the plan, and what applying it changed
    (``applied`` None: nothing was registered)."""

    plan: ImportPlan
    applied: tuple[str, ...] | None = None  # "<pool> <added|updated|unchanged>" per pool written
