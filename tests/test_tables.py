"""The reviewed tables and their compiled cache: the YAML is the only source; the cache is used
only when it was compiled from exactly these files, is intact and is ours, else the YAML is parsed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from examlops_policy import tables as tables_module
from examlops_policy.errors import PolicyError
from examlops_policy.tables import Tables, load_tables, policy_dir

ROOT = Path(__file__).resolve().parent.parent


def from_yaml(root: Path) -> dict[str, object]:
    """The tables as PyYAML reads them, merged in file order: what the cache must hand back."""
    merged: dict[str, object] = {}
    for path in sorted((root / "examlops" / "tables").glob("*.yaml")):
        merged.update(yaml.safe_load(path.read_text(encoding="utf-8")))
    return merged


def as_dict(t: Tables) -> dict[str, object]:
    return {name: getattr(t, name) for name in Tables.__dataclass_fields__}


def expected(root: Path) -> dict[str, object]:
    merged = from_yaml(root)
    return {name: (tuple(merged[name]) if name == "eu_member_states" else merged[name]) for name in Tables.__dataclass_fields__}  # type: ignore[arg-type]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache folder for this test (the ``tables`` folder inside EXA_CACHE_DIR)."""
    monkeypatch.setenv("EXA_CACHE_DIR", str(tmp_path / "cache"))
    load_tables.cache_clear()
    yield tmp_path / "cache" / "tables"
    load_tables.cache_clear()


@pytest.fixture()
def policies(tmp_path: Path) -> Path:
    """A private copy of the policy folder whose tables a test may change."""
    copy = tmp_path / "policies"
    shutil.copytree(policy_dir(), copy)
    return copy


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def reload(root: Path) -> Tables:
    load_tables.cache_clear()
    return load_tables(root)


def test_the_first_load_parses_the_yaml_and_writes_one_private_entry(cache: Path, policies: Path) -> None:
    assert as_dict(load_tables(policies)) == expected(policies)
    (entry,) = entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    assert not list(cache.glob(".*.tmp"))


def test_a_cached_load_equals_the_yaml_type_for_type(cache: Path, policies: Path) -> None:
    load_tables(policies)
    cached = reload(policies)
    want = expected(policies)
    assert as_dict(cached) == want
    # == holds 1 == 1.0 == True; the JSON text of both tells an int from a float from a bool.
    assert json.dumps(as_dict(cached), sort_keys=True) == json.dumps(want, sort_keys=True)


def test_a_cold_process_with_the_cache_filled_never_imports_yaml(tmp_path: Path) -> None:
    env = {**os.environ, "EXA_CACHE_DIR": str(tmp_path / "cache")}
    code = "import sys; from examlops_policy.tables import load_tables; t = load_tables(); print('yaml' in sys.modules, t.accounting['reference_pue'])"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert first[0] == "True" and second[0] == "False"
    assert first[1] == second[1]


@pytest.mark.parametrize("bare", ["NO", "no", "Yes", "on", "OFF", "y"])
def test_a_bare_yaml_11_boolean_is_text_in_python_as_in_opa(cache: Path, policies: Path, bare: str) -> None:
    """``country: NO`` is Norway: PyYAML's default (YAML 1.1) would read false where OPA (YAML 1.2)
    reads the text, and the layer would price and judge with tables the policy does not see."""
    from examlops_policy.opa.content import read_tables

    regions = policies / "examlops" / "tables" / "regions.yaml"
    regions.write_text(regions.read_text(encoding="utf-8").replace("country: CH,", f"country: {bare},"), encoding="utf-8")
    assert reload(policies).regions["ch"]["country"] == bare  # type: ignore[index, call-overload]
    assert reload(policies).regions["ch"]["country"] == read_tables(policies)["regions"]["ch"]["country"]  # type: ignore[index, call-overload]
    assert reload(policies).priorities["classes"]["high"]["may_preempt"] is True  # type: ignore[index, call-overload]: true stays a boolean


def test_a_changed_table_is_read_from_the_yaml_not_the_stale_entry(cache: Path, policies: Path) -> None:
    load_tables(policies)
    accounting = policies / "examlops" / "tables" / "accounting.yaml"
    text = accounting.read_text(encoding="utf-8")
    pue = yaml.safe_load(text)["accounting"]["reference_pue"]
    accounting.write_text(text.replace(f"reference_pue: {pue}", "reference_pue: 1.77"), encoding="utf-8")
    assert reload(policies).accounting["reference_pue"] == 1.77
    assert len(entries(cache)) == 2  # one entry per set of files; the other stays for a checkout that has them


def test_a_damaged_entry_is_ignored_and_written_again(cache: Path, policies: Path) -> None:
    load_tables(policies)
    (entry,) = entries(cache)
    header, payload = entry.read_bytes().split(b"\n", 1)
    pue = str(from_yaml(policies)["accounting"]["reference_pue"]).encode()  # type: ignore[index]
    # Still valid JSON with a consistent header format: only the payload's checksum can tell.
    entry.write_bytes(header + b"\n" + payload.replace(b'"reference_pue":' + pue, b'"reference_pue":9.9'))
    assert reload(policies).accounting["reference_pue"] == float(pue)
    assert entry.read_bytes() == header + b"\n" + payload  # rewritten whole


@pytest.mark.parametrize("damage", [b"", b"{", b"not json\n{}", b'{"format": 1}\n{}', b"\xff\xfe\n\x00"])
def test_a_truncated_or_garbled_entry_is_ignored(cache: Path, policies: Path, damage: bytes) -> None:
    load_tables(policies)
    (entry,) = entries(cache)
    entry.write_bytes(damage)
    assert as_dict(reload(policies)) == expected(policies)


def test_an_entry_for_other_sources_under_this_name_is_ignored(cache: Path, policies: Path) -> None:
    load_tables(policies)
    (entry,) = entries(cache)
    other = policies.parent / "other"
    shutil.copytree(policies, other)
    (other / "examlops" / "tables" / "accounting.yaml").write_text(
        (policies / "examlops" / "tables" / "accounting.yaml").read_text(encoding="utf-8").replace("reference_pue:", "reference_pue: 2.5 #"),
        encoding="utf-8",
    )
    reload(other)
    (other_entry,) = [e for e in entries(cache) if e != entry]
    # A consistent entry of other tables, put under this tables' name: its header names its own sources.
    entry.write_bytes(other_entry.read_bytes())
    assert as_dict(reload(policies)) == expected(policies)


def test_an_entry_others_can_write_is_not_trusted(cache: Path, policies: Path) -> None:
    load_tables(policies)
    (entry,) = entries(cache)
    header, payload = entry.read_bytes().split(b"\n", 1)
    forged = payload.replace(b'"reference_pue":', b'"reference_pue":3.5,"x":')
    meta = json.loads(header)
    meta["payload"] = hashlib.sha256(forged).hexdigest()
    entry.write_bytes(json.dumps(meta).encode() + b"\n" + forged)
    assert reload(policies).accounting["reference_pue"] == 3.5  # ours (0600): a consistent entry is used
    entry.chmod(0o666)
    assert reload(policies).accounting["reference_pue"] == expected(policies)["accounting"]["reference_pue"]  # type: ignore[index]
    entry.chmod(0o600)
    cache.chmod(0o777)
    assert reload(policies).accounting["reference_pue"] == expected(policies)["accounting"]["reference_pue"]  # type: ignore[index]


def test_an_unwritable_cache_costs_a_parse_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policies: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("EXA_CACHE_DIR", str(blocker))  # mkdir fails here even for root (a read-only home alike)
    try:
        assert as_dict(reload(policies)) == expected(policies)
        assert as_dict(reload(policies)) == expected(policies)
    finally:
        load_tables.cache_clear()


def test_an_empty_cache_dir_setting_turns_the_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policies: Path) -> None:
    monkeypatch.setenv("EXA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    try:
        assert as_dict(reload(policies)) == expected(policies)
    finally:
        load_tables.cache_clear()
    assert not (tmp_path / "xdg").exists()


def test_the_cache_lives_under_xdg_cache_home_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tables_module.cache_dir() == tmp_path / "xdg" / "examlops" / "tables"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tables_module.cache_dir() == tmp_path / "home" / ".cache" / "examlops" / "tables"


def test_tables_json_cannot_carry_are_parsed_every_time_not_cached(cache: Path, policies: Path) -> None:
    extra = policies / "examlops" / "tables" / "zz_dated.yaml"
    # A date (tagged: a plain one is text, as OPA reads it): JSON would hand back a string.
    extra.write_text("reviewed_on: !!timestamp 2026-01-05\n", encoding="utf-8")
    assert as_dict(load_tables(policies)) == expected(policies)
    assert entries(cache) == []


def test_concurrent_first_loads_agree_and_leave_one_whole_entry(tmp_path: Path, policies: Path) -> None:
    env = {**os.environ, "EXA_CACHE_DIR": str(tmp_path / "cache"), "EXA_POLICY_DIR": str(policies)}
    code = "import json; from examlops_policy.tables import load_tables; print(json.dumps(load_tables().regions, sort_keys=True))"

    def one(_: int) -> str:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout

    with ThreadPoolExecutor(max_workers=6) as pool:
        outputs = set(pool.map(one, range(12)))
    assert outputs == {json.dumps(from_yaml(policies)["regions"], sort_keys=True) + "\n"}
    folder = tmp_path / "cache" / "tables"
    assert len(entries(folder)) == 1 and not list(folder.glob(".*.tmp"))


def test_old_entries_are_pruned(cache: Path, policies: Path) -> None:
    cache.mkdir(parents=True, mode=0o700)
    for i in range(tables_module.CACHE_KEEP + 5):
        stale = cache / f"{i:064x}.json"
        stale.write_bytes(b"{}")
        os.utime(stale, (1000 + i, 1000 + i))
    left = cache / ".dead.1.abcd.tmp"
    left.write_bytes(b"half")
    os.utime(left, (1000, 1000))
    load_tables(policies)
    assert len(entries(cache)) == tables_module.CACHE_KEEP
    assert not left.exists()


def test_a_broken_table_is_still_a_clear_error(cache: Path, policies: Path) -> None:
    (policies / "examlops" / "tables" / "accounting.yaml").write_text("accounting: [unclosed\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="accounting.yaml: cannot read policy table"):
        load_tables(policies)
    (policies / "examlops" / "tables" / "accounting.yaml").write_text("- a list\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="a policy table must be a mapping"):
        reload(policies)
