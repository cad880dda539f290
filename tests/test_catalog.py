"""Catalog import: SkyPilot vms.csv files read by header into offers, and the pool diff they make.

The shipped snapshots (examples/catalogs/, SkyPilot catalog v7) are read as they are; small
catalog files written here cover each refusal and each kind of skipped row.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from examlops_policy.catalog import (
    MAX_CATALOG_BYTES,
    Catalog,
    ImportOptions,
    apply_writes,
    load_catalog_mapping,
    parse_catalog,
    plan_import,
    pool_name,
    read_catalog,
)
from examlops_policy.errors import PolicyError, SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Workload
from examlops_policy.specs import check_pool_facts
from examlops_policy.tables import load_tables as _load_tables
from examlops_policy.tables import Tables, load_tables

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "examples" / "catalogs"
AWS, GCP = SNAPSHOTS / "aws-vms-eu.csv", SNAPSHOTS / "gcp-vms-eu.csv"
NEBIUS, SEEWEB = SNAPSHOTS / "nebius-vms.csv", SNAPSHOTS / "seeweb-vms.csv"

AWS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
GCP_HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
P5 = "p5.48xlarge,H100,8.0,192.0,2048.0,\"{'Gpus': [{'Name': 'H100', 'Count': 8}]}\""


def write(tmp_path: Path, text: str, name: str = "vms.csv", cloud: str | None = "aws") -> Path:
    path = tmp_path / name
    path.write_text((f"# cloud: {cloud}\n" if cloud else "") + text, encoding="utf-8")
    return path


def offer_map(catalog: Catalog) -> dict[tuple[str, str, bool, int], tuple[str, float]]:
    return {(o.model, o.region, o.spot, o.devices): (o.instance_type, o.price_per_device_hour) for o in catalog.offers}


def with_regions(**extra: dict[str, str]) -> Tables:
    """The reviewed tables plus regions a test declares (the shipped table lacks Nebius/Seeweb)."""
    tables = load_tables()
    return replace(tables, regions={**tables.regions, **extra})


# --- the shipped snapshots --------------------------------------------------------------------


def test_aws_snapshot_prices_per_device_hour_and_lists_what_it_cannot_map() -> None:
    catalog = read_catalog(AWS)
    assert catalog.cloud == "aws"
    assert catalog.price_source == "skypilot:v7/aws/vms.csv@001367d22a00"
    offers = offer_map(catalog)
    # p5.48xlarge eu-north-1: 105.2024 $/h for 8 H100; spot 28.528 in eun1-az3 only.
    assert offers[("h100", "eu-north-1", False, 8)] == ("p5.48xlarge", 13.1503)
    assert offers[("h100", "eu-north-1", True, 8)] == ("p5.48xlarge", 3.566)
    # The cheaper of the two eu-west-1 zones is not the point: p4d is one price per region.
    assert offers[("a100-40gb", "eu-west-1", False, 8)] == ("p4d.24xlarge", 4.424569)
    assert offers[("v100", "eu-west-1", False, 8)] == ("p3dn.24xlarge", 4.213875)
    unknown = {u.value: u for u in catalog.unknown_accelerators}
    assert set(unknown) == {"V100"} and unknown["V100"].rows == 21  # the 16 GB part is not models.yaml v100
    notes = {n.code: n for n in catalog.notes}
    assert notes["no_on_demand_price"].lines == (41, 42)  # the two p5e rows, by file line
    assert not catalog.unknown_regions


def test_gcp_snapshot_adds_the_host_vm_to_accelerator_only_rows() -> None:
    catalog = read_catalog(GCP)
    offers = offer_map(catalog)
    # H100 x1 europe-west4-b: 12.73552 (GPU row) + 1.24163 (a3-highgpu-1g host row).
    assert offers[("h100", "europe-west4", False, 1)] == ("a3-highgpu-1g", 13.97715)
    # A100 x16 rides on a2-megagpu-16g: (25.81838 + 9.68403) / 16.
    assert offers[("a100-40gb", "europe-west4", False, 16)] == ("a2-megagpu-16g", round((25.81838 + 9.68403) / 16, 6))
    # A TPU slice name counts chips; the TPU VM host costs nothing extra.
    assert offers[("tpu-v6e", "europe-west4", False, 8)] == ("tpu-v6e-8", 2.97)
    notes = {n.code: n for n in catalog.notes}
    # europe-west2 (no a3-highgpu host row) and europe-west3-a (host only in -c): 9 GPU rows.
    assert notes["no_host_price"].rows == 9
    assert notes["no_accelerator"].rows == 49  # the host VM rows themselves are not offers


def test_nebius_regions_are_read_and_a_gcp_region_name_is_not_taken_for_nebius() -> None:
    catalog = read_catalog(NEBIUS)
    assert {o.region for o in catalog.offers} == {"eu-north1", "eu-west1"}
    regions = {u.value: u.reason for u in catalog.unknown_regions}
    assert regions == {"us-central1": "the regions table has it for gcp, not nebius"}
    assert [u.value for u in catalog.unknown_accelerators] == ["L40S"]


def test_nebius_offers_appear_once_the_region_is_in_the_table() -> None:
    tables = with_regions(**{"eu-north1": {"country": "FI", "provider": "nebius"}})
    catalog = read_catalog(NEBIUS, tables=tables)
    assert offer_map(catalog)[("h100", "eu-north1", False, 8)] == ("gpu-h100-sxm_8gpu-128vcpu-1600gb", 2.95)
    assert offer_map(catalog)[("h200", "eu-north1", True, 1)] == ("gpu-h200-sxm_1gpu-16vcpu-200gb", 1.45)


def test_seeweb_a100_is_the_80_gb_part_and_rows_without_a_region_are_noted() -> None:
    tables = with_regions(**{"it-fr2": {"country": "IT", "provider": "seeweb"}})
    catalog = read_catalog(SEEWEB, tables=tables)
    assert offer_map(catalog)[("a100", "it-fr2", False, 1)] == ("ECS1GPU3", 0.99)
    assert {n.code: n.rows for n in catalog.notes}["no_region"] == 11


def test_columns_are_read_by_header_not_by_position(tmp_path: Path) -> None:
    row = dict(zip(AWS_HEADER.split(","), ["p5.48xlarge", "H100", "8", "192", "2048", "", "105.2024", "28.528", "eu-north-1", "eun1-az3"]))
    shuffled = sorted(row)
    text = ",".join(shuffled) + "\n" + ",".join(row[c] for c in shuffled) + "\n"
    assert offer_map(read_catalog(write(tmp_path, text)))[("h100", "eu-north-1", False, 8)] == ("p5.48xlarge", 13.1503)


def test_the_cloud_comes_from_the_folder_of_a_skypilot_vms_csv(tmp_path: Path) -> None:
    folder = tmp_path / "catalogs" / "v7" / "aws"
    folder.mkdir(parents=True)
    shutil.copy(AWS, folder / "vms.csv")
    text = (folder / "vms.csv").read_text().replace("# cloud: aws\n", "")
    (folder / "vms.csv").write_text(text)
    assert read_catalog(folder / "vms.csv").cloud == "aws"


# --- refusals: each names the file and the line ------------------------------------------------


ERRORS = [
    pytest.param(f"{AWS_HEADER.replace(',SpotPrice', '')}\n", 2, "missing column(s) SpotPrice", id="missing-column"),
    pytest.param(f"{AWS_HEADER},Price\n", 2, "column 'Price' appears twice", id="duplicate-column"),
    pytest.param(f"{AWS_HEADER}\n{P5},abc,1.0,eu-north-1,a\n", 3, "Price must be a number (got 'abc')", id="price-not-a-number"),
    pytest.param(f"{AWS_HEADER}\n{P5},nan,1.0,eu-north-1,a\n", 3, "Price must be a number (got 'nan')", id="price-nan"),
    pytest.param(f"{AWS_HEADER}\n{P5},-1.5,1.0,eu-north-1,a\n", 3, "Price must not be negative (got -1.5)", id="price-negative"),
    pytest.param(f"{AWS_HEADER}\n{P5},1.0,-2,eu-north-1,a\n", 3, "SpotPrice must not be negative (got -2)", id="spot-negative"),
    pytest.param(f"{AWS_HEADER}\n{P5},1.0,1e999,eu-north-1,a\n", 3, "SpotPrice must be a number", id="spot-infinite"),
    pytest.param(
        f"{AWS_HEADER}\n{P5.replace(',8.0,', ',0,')},1.0,,eu-north-1,a\n", 3, "AcceleratorCount must be more than 0", id="count-zero"
    ),
    pytest.param(
        f"{AWS_HEADER}\n{P5.replace(',8.0,', ',-8,')},1.0,,eu-north-1,a\n", 3, "AcceleratorCount must be more than 0", id="count-negative"
    ),
    pytest.param(f"{AWS_HEADER}\n{P5.replace(',8.0,', ',,')},1.0,,eu-north-1,a\n", 3, "AcceleratorCount is empty", id="count-empty"),
    pytest.param(f"{AWS_HEADER}\n{P5.replace(',8.0,', ',eight,')},1.0,,eu-north-1,a\n", 3, "AcceleratorCount must be a number", id="count-text"),
    pytest.param(f"{AWS_HEADER}\n{P5},1.0,,eu-north-1\n", 3, "expected 10 fields as in the header, found 9", id="short-row"),
    pytest.param(f"{AWS_HEADER}\np5,H100,8,1,1,\"{{unclosed,1.0,,eu-north-1,a\n", 3, "malformed CSV", id="unterminated-quote"),
    pytest.param("\n\n", None, "no header line", id="no-header"),
]


@pytest.mark.parametrize(("text", "line", "message"), ERRORS)
def test_bad_catalogs_are_refused_with_the_file_and_line(tmp_path: Path, text: str, line: int | None, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        read_catalog(path)
    error = str(caught.value)
    assert error.startswith(f"{path}: ")
    assert message in error
    if line is not None:
        assert f"line {line}" in error


def test_a_50_mb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    with path.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(SpecError, match=f"larger than {MAX_CATALOG_BYTES} bytes"):
        read_catalog(path, cloud="aws")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"# cloud: aws\n\xff\xfe" + AWS_HEADER.encode(), "not UTF-8", id="not-utf8"),
        pytest.param(b"# cloud: aws\n" + AWS_HEADER.encode() + b"\n\x00\n", "NUL byte on line 3", id="nul-byte"),
    ],
)
def test_binary_files_are_refused(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=message):
        read_catalog(path)


@pytest.mark.parametrize(
    ("cloud", "message"),
    [
        pytest.param(None, "cannot tell which cloud", id="no-cloud"),
        pytest.param("AWS; rm -rf", "must be lower-case letters", id="unsafe-cloud"),
    ],
)
def test_the_cloud_must_be_known_and_safe(tmp_path: Path, cloud: str | None, message: str) -> None:
    path = write(tmp_path, f"{AWS_HEADER}\n", name="prices.csv", cloud=None)
    with pytest.raises(SpecError, match=message):
        read_catalog(path, cloud=cloud)


# --- rows that are skipped, not refused ------------------------------------------------------


def test_placeholder_tpu_prices_empty_and_odd_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    text = (
        f"{GCP_HEADER}\n"
        ",,,tpu-v6e-8,1,tpu-v6e-8,europe-west4,europe-west4-a,700.0,700.0\n"  # line 3: placeholder
        ",,,tpu-v6e-4,1,tpu-v6e-4,europe-west4,europe-west4-a,11.88,700.0\n"  # line 4: spot placeholder only
        ",,,tpu-v6e-1,1,tpu-v6e-1,europe-west4,europe-west4-a,,\n"  # line 5: no prices
        ",,,tpu-v6e-1,0.5,tpu-v6e-1,europe-west4,europe-west4-a,1.0,\n"  # line 6: fractional
        ",,,tpu-v6e-1,1,tpu-v6e-1,,,1.0,\n"  # line 7: no region
        ",,,tpu-v6e-1,1,tpu-v6e-1,europe-west4,europe-west4-a,0,\n"  # line 8: zero
        ",,,tpu-v5p-8,1,tpu-v5p-8,europe-west4,europe-west4-a,4.2,\n"  # line 9: not in the table
        ",,,T4,1,,europe-west4,europe-west4-a,0.35,\n"  # line 10: no host type for T4 on GCP
    )
    catalog = read_catalog(write(tmp_path, text, cloud="gcp"))
    assert [(o.instance_type, o.spot, o.price_per_device_hour) for o in catalog.offers] == [("tpu-v6e-4", False, 2.97)]
    notes = {n.code: (n.rows, n.lines) for n in catalog.notes}
    assert notes["placeholder_price"] == (3, (3, 3, 4))
    assert notes["no_on_demand_price"] == (1, (5,))
    assert notes["fractional_count"] == (1, (6,))
    assert notes["no_region"] == (1, (7,))
    assert notes["zero_price"] == (1, (8,))
    assert notes["no_host_type"] == (1, (10,))
    assert [(u.value, u.first_line) for u in catalog.unknown_accelerators] == [("tpu-v5p-8", 9)]


# --- the diff an import makes ------------------------------------------------------------------


def test_new_pools_are_named_deterministically_and_valid() -> None:
    plan = plan_import(read_catalog(AWS), [], ImportOptions(count=16, spot=True))
    names = [c.name for c in plan.changes]
    assert names == sorted(names)
    assert "aws-h100-eu-north-1" in names and "aws-h100-eu-north-1-spot" in names
    assert set(plan.summary().items()) >= {("added", len(names)), ("unchanged", 0)}
    for pool in plan.writes():
        assert check_pool_facts(pool, _load_tables()) == pool  # region and model tables (the type checks ran on construction)
        assert pool.target == "cloud" and pool.count == 16
        assert pool.price_source == "skypilot:v7/aws/vms.csv@001367d22a00"
        assert pool.spot == pool.name.endswith("-spot")
    h100 = next(p for p in plan.writes() if p.name == "aws-h100-eu-north-1")
    assert (h100.accelerator, h100.model, h100.region, h100.cost_per_hour) == ("nvidia", "h100", "eu-north-1", 13.1503)


def test_one_pool_per_model_and_region_at_the_cheapest_offer_per_device() -> None:
    plan = plan_import(read_catalog(GCP), [], ImportOptions(count=8, regions=("europe-west1",), accelerators=("h100",)))
    assert [(c.name, c.offer.instance_type, c.offer.price_per_device_hour) for c in plan.changes] == [
        ("gcp-h100-europe-west1", "a3-megagpu-8g", 5.725995)
    ]


def test_importing_the_same_file_twice_changes_nothing() -> None:
    catalog = read_catalog(GCP)
    first = plan_import(catalog, [], ImportOptions(count=4, spot=True))
    registered = apply_writes([], first.writes())
    again = plan_import(read_catalog(GCP), registered, ImportOptions(count=4, spot=True))
    assert again.writes() == ()
    assert again.summary()["unchanged"] == len(first.changes) == len(registered)


def test_a_new_price_is_a_price_change_and_a_new_snapshot_alone_a_source_change(tmp_path: Path) -> None:
    old = write(tmp_path, f"# commit: 1111111111111111\n{AWS_HEADER}\n{P5},105.2024,,eu-north-1,a\n", name="old.csv")
    registered = apply_writes([], plan_import(read_catalog(old), [], ImportOptions(count=8)).writes())
    dearer = write(tmp_path, f"# commit: 2222222222222222\n{AWS_HEADER}\n{P5},120,,eu-north-1,a\n", name="dearer.csv")
    change = plan_import(read_catalog(dearer), registered).changes[0]
    assert (change.kind, change.before and change.before.cost_per_hour, change.after and change.after.cost_per_hour) == (
        "price_changed", 13.1503, 15.0,
    )  # fmt: skip
    assert change.after is not None and change.after.price_source == "skypilot:aws/vms.csv@222222222222"
    same = write(tmp_path, f"# commit: 3333333333333333\n{AWS_HEADER}\n{P5},105.2024,,eu-north-1,a\n", name="same.csv")
    assert plan_import(read_catalog(same), registered).changes[0].kind == "source_changed"


def test_a_price_set_by_hand_is_kept_unless_overwritten() -> None:
    by_hand = Pool("aws-h100-eu-north-1", "cloud", "nvidia", 4, "eu-north-1", cost_per_hour=9.0, model="h100", carbon_factor=50)
    plan = plan_import(read_catalog(AWS), [by_hand], ImportOptions(accelerators=("H100",), regions=("eu-north-1",)))
    assert [(c.kind, c.label) for c in plan.changes] == [("kept", "kept (set by hand)")]
    assert plan.writes() == ()
    forced = plan_import(read_catalog(AWS), [by_hand], ImportOptions(accelerators=("h100",), regions=("eu-north-1",), overwrite=True))
    (pool,) = forced.writes()
    # Only the price and its source change; what the operator set stays.
    assert pool == replace(by_hand, cost_per_hour=13.1503, price_source="skypilot:v7/aws/vms.csv@001367d22a00")


def test_a_registered_pool_of_another_shape_is_a_conflict_left_alone() -> None:
    hpc = Pool("aws-h100-eu-north-1", "hpc", "nvidia", 4, "eu-north-1", model="h100", price_source="skypilot:x")
    plan = plan_import(read_catalog(AWS), [hpc], ImportOptions(count=1, regions=("eu-north-1",), accelerators=("nvidia",)))
    (change,) = plan.changes
    assert change.kind == "conflict" and change.after is None
    assert "target 'hpc' (catalog: 'cloud')" in (change.reason or "")


def test_new_pools_need_a_count_to_be_written() -> None:
    plan = plan_import(read_catalog(AWS), [])
    assert all(c.kind == "added" and c.after is None for c in plan.changes)
    with pytest.raises(SpecError, match="count is required for new pools"):
        plan.writes()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(ImportOptions(count=0), "count must be a whole number", id="count-zero"),
        pytest.param(ImportOptions(count=True), "count must be a whole number", id="count-bool"),
        pytest.param(ImportOptions(regions=("atlantis",)), "not in the regions table", id="region-unknown"),
        pytest.param(ImportOptions(regions=("europe-west4",)), "has it for gcp, not aws", id="region-other-cloud"),
        pytest.param(ImportOptions(accelerators=("quantum",)), "neither a family", id="accelerator-unknown"),
    ],
)
def test_bad_options_are_refused(options: ImportOptions, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        plan_import(read_catalog(AWS), [], options)


def test_the_plan_renders_as_rows_and_json() -> None:
    plan = plan_import(read_catalog(AWS), [], ImportOptions(count=2, spot=True))
    document = json.loads(json.dumps(plan.to_json()))
    assert document["summary"]["added"] == len(document["changes"]) == len(plan.rows())
    assert document["unknown_accelerators"] == [{"name": "V100", "reason": "not in catalog_accelerators.yaml", "rows": 21, "first_line": 10}]
    name, label, model, region, price, instance, _ = plan.rows()[0]
    assert (name, label, model, region) == ("aws-a100-40gb-eu-central-1", "added", "a100-40gb", "eu-central-1")
    assert (price, instance) == ("5.1181", "8 x p4d.24xlarge")


def test_pool_names_are_safe() -> None:
    assert pool_name("gcp", "tpu-v6e", "europe-west4", True) == "gcp-tpu-v6e-europe-west4-spot"


# --- the reviewed name table -------------------------------------------------------------------


def test_the_name_table_only_names_known_families_and_models() -> None:
    mapping = load_catalog_mapping()
    models = load_tables().models
    for entry in [*mapping.names.values(), *(e for c in mapping.by_cloud.values() for e in c.values()), *(e for _, e in mapping.prefixes)]:
        assert models[entry.model]["accelerator"] == entry.accelerator  # type: ignore[index]


def test_a_broken_name_table_is_a_policy_error(tmp_path: Path) -> None:
    tables = tmp_path / "examlops" / "tables"
    shutil.copytree(ROOT / "policies" / "examlops" / "tables", tables)
    (tables / "catalog_accelerators.yaml").write_text("catalog_accelerators:\n  names:\n    H100: {accelerator: nvidia, model: h1000}\n")
    with pytest.raises(PolicyError, match="names.H100: model 'h1000' is not a key of models.yaml"):
        load_catalog_mapping(tmp_path)


def test_parse_is_pure_and_names_its_source() -> None:
    text = f"# cloud: aws\n# read: 2025-01-31\n{AWS_HEADER}\n{P5},105.2024,,eu-north-1,a\n"
    catalog = parse_catalog(text, source="inline")
    assert (catalog.source, catalog.price_source) == ("inline", "skypilot:aws/vms.csv@2025-01-31")


# --- with the real store and the real policy ---------------------------------------------------


def test_importing_twice_through_the_sqlite_store_changes_nothing(tmp_path: Path) -> None:
    from examlops_policy.store.sqlite import SQLiteStore

    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db"))
    options = ImportOptions(count=8, spot=True)
    first = plan_import(read_catalog(AWS), [s.pool for s in hw.pools()], options)
    assert {c.action for c in hw.apply(first.writes())} == {"added"}
    again = plan_import(read_catalog(AWS), [s.pool for s in hw.pools()], options)
    assert again.writes() == () and again.summary()["unchanged"] == len(first.changes)
    stored = {s.pool.name: s.pool for s in hw.pools()}
    assert stored["aws-h100-eu-north-1-spot"].spot and stored["aws-h100-eu-north-1-spot"].price_source == first.catalog.price_source
    hw.close()


def test_imported_pools_are_placed_on_by_the_policy(hardware: Hardware) -> None:
    pools = plan_import(read_catalog(AWS), [], ImportOptions(count=8)).writes()
    decision = hardware.what_if(Workload("train", accelerator="nvidia", capabilities=("fp8",), target="cloud", residency="eu-only"), pools)
    assert isinstance(decision, Placement)
    # fp8 needs H100 (models.yaml); London (eu-west-2) is not in the EU; Stockholm is.
    assert (decision.pool, decision.cost_per_hour) == ("aws-h100-eu-north-1", 13.1503)
