"""Hostile input: refused with a clear SpecError and exit code 2, and nothing written.

Every case runs twice: through the real CLI as a subprocess (a temporary EXA_HOME holding a state
with pools, decisions, a burst event and an audit chain, EXA_OPA_BIN set) and through the library
(``examlops_policy.specs`` and ``Hardware``). After each CLI case the state must be exactly as it
was (pools, decisions, burst events and audit rows compared through the public Store methods) and
the audit chain must still verify; the module ends with ``exa audit verify`` on a state every
hostile CLI input has been thrown at.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from examlops_policy.opa import stop_server
from tests.conftest import run_exa
from examlops_policy.specs import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    check_pool_facts,
    pool_from_mapping,
    pools_from_file,
    workload_from_file,
    workload_from_mapping,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hostile"
PWNED = Path("/tmp/exa-pwned")  # what the shell-injection fixtures would create
BAD_INPUT = 2
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")

GOOD_POOLS = """\
pools:
  - {name: hpc-nvidia, target: hpc, accelerator: nvidia, count: 8, region: eu, cost_per_hour: 2.5, supports_fractions: true}
  - {name: hpc-mi300, target: hpc, accelerator: amd, count: 4, region: eu}
  - {name: cloud-a100, target: cloud, accelerator: nvidia, count: 100, region: us}
"""

# --- running the CLI and reading the state ------------------------------------------------------


def exa(home: Path, *args: str | bytes, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``exa`` on ``home``, with that home's own OPA should it need one (bad input must not)."""
    return run_exa(home, *args, shared_opa=False, timeout=timeout, binary=True)


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


State = tuple[object, ...]


def snapshot(home: Path) -> State:
    """Everything a write could change, through the façade and the store's reads."""
    hw = Hardware(home=home)
    try:
        store = hw.store
        return (
            sorted((s.pool.name, s.pool, s.free) for s in hw.pools()),
            [(r.id, r.created_at, r.released_at, r.job_id, r.decision) for r in hw.decisions(limit=1_000_000)],
            store.burst_events(limit=1_000_000),
            store.audit_rows(),
            hw.verify_audit().ok,
        )
    finally:
        hw.close()


def _settle(db: Path) -> None:
    """Fold the WAL into the main file so one file copy carries the whole state."""
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory, opa_home: Path) -> Iterator[tuple[Path, State]]:
    """A state made by the real CLI: three pools, a placement, a fallback, a blocked and an allowed
    burst, a release, decided by the session's OPA (``opa_home``); none runs on this home (bad
    input must not need one)."""
    home = tmp_path_factory.mktemp("baseline")
    pools = home / "pools.yaml"
    pools.write_text(GOOD_POOLS, encoding="utf-8")
    steps: list[tuple[Sequence[str], int]] = [
        (["hardware", "apply", "-f", str(pools)], 0),
        (["hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc"], 0),
        (["hardware", "place", "train", "--accelerator", "tpu", "--engine", "generic", "--target", "hpc"], 0),
        (["hardware", "burst", "train", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst"], 4),
        (["hardware", "burst", "serve", "--accelerator", "nvidia", "--allow-burst"], 0),
    ]
    try:
        for args, code in steps:
            result = run_exa(home, *args, binary=True)
            assert result.returncode == code, f"exa {' '.join(args)}: {text(result.stdout)}{text(result.stderr)}"
        first = run_exa(home, "hardware", "decisions", "--json", "--limit", "100", binary=True)
        ident = json.loads(first.stdout)[-1]["id"]
        assert run_exa(home, "hardware", "release", ident, binary=True).returncode == 0
    finally:
        stop_server(home)
    _settle(home / "state.db")
    state = snapshot(home)
    assert len(state[0]) == 3 and len(state[1]) == 4 and len(state[3]) >= 8 and state[4]  # type: ignore[arg-type]
    yield home, state


@pytest.fixture(scope="module")
def shared_home(baseline: tuple[Path, State], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the baseline that every CLI case in this module is run against, in turn."""
    home = tmp_path_factory.mktemp("shared")
    shutil.copy2(baseline[0] / "state.db", home / "state.db")
    yield home
    stop_server(home)


@pytest.fixture()
def home(shared_home: Path, baseline: tuple[Path, State]) -> Iterator[Path]:
    """The shared home; restored from the baseline after a case that wrote to it, so one failure
    does not cascade into the next case."""
    yield shared_home
    if snapshot(shared_home) != baseline[1]:
        stop_server(shared_home)
        for suffix in ("", "-wal", "-shm", ".head"):  # .head: its record of the audit head goes back too
            (shared_home / f"state.db{suffix}").unlink(missing_ok=True)
        shutil.copy2(baseline[0] / "state.db", shared_home / "state.db")


def assert_refused(result: subprocess.CompletedProcess[bytes], expected: str, home: Path, before: State, pwned: bool) -> None:
    out, err = text(result.stdout), text(result.stderr)
    assert result.returncode == BAD_INPUT, f"exit {result.returncode}, want {BAD_INPUT}\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in err, err
    assert err.startswith("SpecError: ") or err.startswith("usage: "), err
    assert expected in err, f"{expected!r} not in {err!r}"
    assert out == "", f"nothing may be printed as a result: {out!r}"
    assert snapshot(home) == before, "bad input changed the state"
    assert PWNED.exists() == pwned, "a shell metacharacter was executed"


# --- the cases -----------------------------------------------------------------------------------

ALIASES = "aliases are not allowed"
NAME = "letters, digits"
CONTROL = "control characters"
MALFORMED = "malformed YAML"
FINITE = "finite"
UTF8 = "not UTF-8"

# (fixture file, what its error must say)
POOL_FILES = [
    ("billion-laughs.yaml", ALIASES),
    ("alias-reuse.yaml", "merge keys (<<) are not allowed"),
    ("merge-key.yaml", "merge keys (<<) are not allowed"),
    ("duplicate-top-key.yaml", "duplicate key 'pools'"),
    ("duplicate-pool-key.yaml", "duplicate key 'count'"),
    ("duplicate-pool-name.yaml", "pools[1].name: duplicate pool name 'gpu'"),
    ("unhashable-key.yaml", "key"),
    ("mapping-key.yaml", "key"),
    ("python-tag.yaml", MALFORMED),
    ("multi-document.yaml", MALFORMED),
    ("top-level-list.yaml", "(top level)"),
    ("top-level-scalar.yaml", "(top level)"),
    ("empty.yaml", "(top level)"),
    ("deep-40.yaml", f"nested deeper than {MAX_DEPTH} levels"),
    ("huge-integer.yaml", MALFORMED),
    ("invalid-date.yaml", MALFORMED),
    ("nan-cost.yaml", "pools[0].cost_per_hour"),
    ("inf-carbon.yaml", "pools[0].carbon_factor"),
    ("nan-pue.yaml", FINITE),
    ("latin1.yaml", UTF8),
    ("utf16.yaml", UTF8),
    ("nul-byte.yaml", MALFORMED),
    ("invalid-utf8-sequence.yaml", UTF8),
    ("name-single-quote.yaml", NAME),
    ("name-double-quote.yaml", NAME),
    ("name-shell-subst.yaml", NAME),
    ("name-backticks.yaml", NAME),
    ("name-semicolon.yaml", NAME),
    ("name-pipe.yaml", NAME),
    ("name-path.yaml", NAME),
    ("name-leading-dash.yaml", NAME),
    ("name-newline.yaml", CONTROL),
    ("name-trailing-newline.yaml", CONTROL),
    ("name-carriage-return.yaml", CONTROL),
    ("name-escape.yaml", CONTROL),
    ("name-nul.yaml", CONTROL),
    ("name-tab.yaml", CONTROL),
    ("name-del.yaml", CONTROL),
    ("name-c1-nel.yaml", NAME),
    ("name-bidi.yaml", NAME),
    ("name-homoglyph.yaml", NAME),
    ("name-too-long.yaml", NAME),
    ("name-empty.yaml", NAME),
    ("name-sql-drop.yaml", NAME),
    ("name-sql-or.yaml", NAME),
    ("region-sql.yaml", "pools[0].region"),
    ("model-shell.yaml", "pools[0].model"),
    ("capability-sql.yaml", "pools[0].capabilities[0]"),
    ("partition-newline.yaml", CONTROL),
]

WORKLOAD_FILES = [
    ("workload-billion-laughs.yaml", ALIASES),
    ("workload-duplicate-key.yaml", "duplicate key 'residency'"),
    ("workload-name-shell.yaml", NAME),
    ("workload-name-sql.yaml", NAME),
    ("workload-name-newline.yaml", CONTROL),
    ("workload-name-escape.yaml", CONTROL),
    ("workload-fraction-nan.yaml", FINITE),
    ("workload-fraction-inf.yaml", FINITE),
    ("workload-fraction-count.yaml", "count must be 1"),
    ("workload-unknown-field.yaml", "unknown field(s): 'urgency'"),
    ("workload-latin1.yaml", UTF8),
    ("workload-unhashable-key.yaml", "key"),
    ("workload-invalid-date.yaml", MALFORMED),
    ("workload-huge-integer.yaml", MALFORMED),
]


def test_every_fixture_is_listed() -> None:
    listed = {name for name, _ in POOL_FILES + WORKLOAD_FILES}
    present = {p.name for p in FIXTURES.glob("*.yaml")}
    assert listed == present


def generated(kind: str, tmp_path: Path, *, workload: bool = False) -> tuple[Path, str]:
    """Inputs too large to keep as fixtures, and paths that are not plain files."""
    if kind == "huge":  # a valid file padded past the limit
        path = tmp_path / "huge.yaml"
        path.write_text(GOOD_POOLS + "#" + "x" * MAX_FILE_BYTES + "\n", encoding="utf-8")
        return path, f"at most {MAX_FILE_BYTES}"
    if kind == "deep":  # 100,000 levels: deeper than the parser's own recursion
        path = tmp_path / "deep.yaml"
        path.write_text("pools: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
        return path, "nest"  # libyaml: "exceeded maximum nesting depth"; ours: "nested deeper than"
    if kind == "long-name":  # a 3 MB name: refused, and the message does not echo all of it
        path = tmp_path / "long.yaml"
        if workload:
            path.write_text("workload: {name: " + "a" * 3_000_000 + ", accelerator: amd}\n")
        else:
            path.write_text("pools:\n  - {name: " + "a" * 3_000_000 + ", target: hpc, accelerator: amd, count: 1, region: eu}\n")
        return path, NAME
    if kind == "endless":  # a "file" that never ends
        return Path("/dev/zero"), f"at most {MAX_FILE_BYTES}"
    if kind == "directory":
        return tmp_path, "cannot read file"
    if kind == "missing":
        return tmp_path / "no-such.yaml", "cannot read file"
    raise AssertionError(kind)


GENERATED = ["huge", "deep", "long-name", "endless", "directory", "missing"]

# --- through the CLI -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), POOL_FILES, ids=[n for n, _ in POOL_FILES])
def test_cli_apply_refuses_hostile_pool_file(home: Path, baseline: tuple[Path, State], name: str, expected: str) -> None:
    pwned = PWNED.exists()
    assert_refused(exa(home, "hardware", "apply", "-f", str(FIXTURES / name)), expected, home, baseline[1], pwned)


@pytest.mark.parametrize(("name", "expected"), WORKLOAD_FILES, ids=[n for n, _ in WORKLOAD_FILES])
def test_cli_place_refuses_hostile_workload_file(home: Path, baseline: tuple[Path, State], name: str, expected: str) -> None:
    pwned = PWNED.exists()
    assert_refused(exa(home, "hardware", "place", "-f", str(FIXTURES / name)), expected, home, baseline[1], pwned)


@pytest.mark.parametrize("kind", GENERATED)
@pytest.mark.parametrize("command", ["apply", "place"])
def test_cli_refuses_oversized_endless_and_unreadable_files(
    home: Path, baseline: tuple[Path, State], tmp_path: Path, kind: str, command: str
) -> None:
    path, expected = generated(kind, tmp_path, workload=command == "place")
    result = exa(home, "hardware", command, "-f", str(path), timeout=30)
    assert_refused(result, expected, home, baseline[1], PWNED.exists())
    assert len(result.stderr) < 10_000, "the error echoes the whole input"


def test_cli_refuses_a_file_name_that_is_not_utf8(home: Path, baseline: tuple[Path, State], tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/pools-\xff\xfe.yaml"
    with open(raw, "wb") as handle:
        handle.write(b"pools:\n  - {name: \"a;b\", target: hpc, accelerator: amd, count: 1, region: eu}\n")
    assert_refused(exa(home, "hardware", "apply", "-f", raw), NAME, home, baseline[1], PWNED.exists())
    assert_refused(exa(home, "hardware", "apply", "-f", raw + b".missing"), "cannot read file", home, baseline[1], PWNED.exists())


HOSTILE_NAMES: list[tuple[str | bytes, str]] = [
    ("gpu'pool", NAME),
    ('gpu"pool', NAME),
    ("$(touch /tmp/exa-pwned)", "start with a letter or digit"),
    ("`touch /tmp/exa-pwned`", "start with a letter or digit"),
    ("gpu;touch /tmp/exa-pwned", NAME),
    ("gpu && touch /tmp/exa-pwned", NAME),
    ("gpu\nINJECTED", CONTROL),
    ("gpu\n", CONTROL),
    ("gpu\x1b[2J", CONTROL),
    ("gpu\x07", CONTROL),
    ("x'); DROP TABLE pools;--", NAME),
    ("a' OR '1'='1", NAME),
    ("", "must not be empty"),
    ("a" * 64, "at most 63 characters (got 64)"),
    ("gpu\u202e", NAME),
    (b"gpu\xff", NAME),
]
NAME_IDS = [f"name{i}" for i in range(len(HOSTILE_NAMES))]
POOL_ARGS = ["--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu"]


@pytest.mark.parametrize(("name", "expected"), HOSTILE_NAMES, ids=NAME_IDS)
def test_cli_add_pool_refuses_hostile_name(home: Path, baseline: tuple[Path, State], name: str | bytes, expected: str) -> None:
    pwned = PWNED.exists()
    assert_refused(exa(home, "hardware", "add-pool", *POOL_ARGS, "--", name), expected, home, baseline[1], pwned)


@pytest.mark.parametrize(("name", "expected"), HOSTILE_NAMES, ids=NAME_IDS)
def test_cli_place_refuses_hostile_workload_name(home: Path, baseline: tuple[Path, State], name: str | bytes, expected: str) -> None:
    pwned = PWNED.exists()
    result = exa(home, "hardware", "place", "--accelerator", "amd", "--", name)
    assert_refused(result, "give a NAME" if name == "" else expected, home, baseline[1], pwned)


ADD_POOL_VALUES: list[tuple[list[str], str]] = [
    (["--count", "0"], "count"),
    (["--count", "-5"], "count"),
    (["--count", str(10**12)], "count"),
    (["--cost-per-hour", "nan"], "cost_per_hour"),
    (["--cost-per-hour", "inf"], "cost_per_hour"),
    (["--cost-per-hour", "-1"], "cost_per_hour"),
    (["--carbon-factor", "nan"], "carbon_factor"),
    (["--pue", "nan"], "pue"),
    (["--power-w=-inf"], "power_w"),
    (["--region", "eu; DROP TABLE pools"], "region"),
    (["--region", "atlantis"], "regions table"),
    (["--region", "eu\n"], CONTROL),
    (["--capabilities", "fp8,$(touch /tmp/exa-pwned)"], "capabilities"),
    (["--capabilities", "FP8"], "capabilities"),
    (["--model", "mi300x\n"], CONTROL),
    (["--model", "mi300x'--"], "model"),
    (["--model", "h100"], "not amd"),
    (["--partition", "gpu\n#SBATCH --wrap=id"], CONTROL),
    (["--gres-type", "a100;id"], "gres_type"),
    (["--accelerator", "quantum"], "invalid choice"),
]


@pytest.mark.parametrize(("extra", "expected"), ADD_POOL_VALUES, ids=[" ".join(e).replace("\n", "\\n") for e, _ in ADD_POOL_VALUES])
def test_cli_add_pool_refuses_hostile_values(home: Path, baseline: tuple[Path, State], extra: list[str], expected: str) -> None:
    pwned = PWNED.exists()
    assert_refused(exa(home, "hardware", "add-pool", "ok-name", *POOL_ARGS, *extra), expected, home, baseline[1], pwned)


PLACE_VALUES: list[tuple[list[str], str]] = [
    (["--fraction", "nan"], "fraction"),
    (["--fraction", "inf"], "fraction"),
    (["--fraction", "0"], "fraction"),
    (["--fraction=-0.5"], "fraction"),
    (["--fraction", "0.5", "--count", "2"], "count: must be 1 when a fraction below 1"),
    (["--count", "0"], "count"),
    (["--capabilities", "fp8;id"], "capabilities"),
    (["--capabilities", "fp8,a\x1bb"], CONTROL),
]


@pytest.mark.parametrize(("extra", "expected"), PLACE_VALUES, ids=[" ".join(e).replace("\x1b", "ESC") for e, _ in PLACE_VALUES])
@pytest.mark.parametrize("command", ["place", "burst"])
def test_cli_place_and_burst_refuse_hostile_values(
    home: Path, baseline: tuple[Path, State], command: str, extra: list[str], expected: str
) -> None:
    pwned = PWNED.exists()
    result = exa(home, "hardware", command, "train", "--accelerator", "nvidia", "--allow-burst", *extra)
    assert_refused(result, expected, home, baseline[1], pwned)


@pytest.mark.parametrize("hours", ["-5", "nan", "inf"])
@pytest.mark.parametrize("command", ["accounting", "finops"])
def test_cli_refuses_hostile_hours(home: Path, baseline: tuple[Path, State], command: str, hours: str) -> None:
    if command == "finops":
        result = exa(home, "finops", "cost", f"--hours={hours}")
    else:
        ident = baseline[1][1][-1][0]  # type: ignore[index]
        result = exa(home, "hardware", "accounting", str(ident), f"--hours={hours}")
    assert_refused(result, "hours", home, baseline[1], PWNED.exists())


HUGE = "99999999999999999999"
NUMBERS_AND_CURSORS = [
    (["hardware", "decisions", "--limit", HUGE], "--limit: must be from 1 to 1000000"),
    (["hardware", "burst-events", "--limit", HUGE], "--limit: must be from 1 to 1000000"),
    (["hardware", "decisions", "--cursor", "garbage/zz"], "--cursor: a cursor is CREATED_AT/ID"),
    (["hardware", "decisions", "--cursor", "2026-11-30T16:53:12.516233Z/zz"], "--cursor: a cursor is CREATED_AT/ID"),
    (["hardware", "decisions", "--cursor", "2026-11-30T16:53:12.516233Z"], "--cursor: a cursor is CREATED_AT/ID"),
    (["finops", "cost", "--hours", "1e308"], "--hours: hours must be at most 1000000"),
    (["models", "cost", "--hours", "1e308"], "--hours: hours must be at most 1000000"),
]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(
    ("args", "expected"), NUMBERS_AND_CURSORS,
    ids=["huge-limit", "huge-events-limit", "garbage-cursor", "cursor-bad-id", "cursor-no-id", "finops-1e308-hours", "models-1e308-hours"],
)  # fmt: skip
def test_cli_refuses_numbers_out_of_range_and_malformed_cursors(
    home: Path, baseline: tuple[Path, State], args: list[str], expected: str, as_json: bool
) -> None:
    """A limit past what the database can count, a cursor that is not one, hours whose cost is
    infinite: a usage error (exit 2) naming the option, never a traceback or `Infinity`."""
    result = exa(home, *args, *(["--json"] if as_json else []))
    if not as_json:
        assert_refused(result, expected, home, baseline[1], PWNED.exists())
        return
    assert result.returncode == BAD_INPUT and result.stdout == b"", text(result.stdout) + text(result.stderr)
    error = json.loads(result.stderr)
    assert error["code"] == BAD_INPUT and error["error"] == "UsageError" and expected in error["message"]
    assert snapshot(home) == baseline[1]


def test_a_cursor_a_page_printed_is_accepted(home: Path) -> None:
    first = exa(home, "hardware", "decisions", "--limit", "1")
    assert first.returncode == 0, text(first.stderr)
    cursor = text(first.stdout).splitlines()[-1].removeprefix("more: --cursor ")
    nxt = exa(home, "hardware", "decisions", "--limit", "1", "--cursor", cursor)
    assert nxt.returncode == 0 and "decisions" not in text(nxt.stderr), text(nxt.stderr)


def test_audit_verifies_after_every_hostile_input(shared_home: Path, baseline: tuple[Path, State]) -> None:
    """Last in the module: the state every CLI case above ran against still verifies, unchanged."""
    result = exa(shared_home, "audit", "verify")
    assert result.returncode == 0, text(result.stdout) + text(result.stderr)
    assert f"{len(baseline[1][3])} entries" in text(result.stdout)  # type: ignore[arg-type]
    assert snapshot(shared_home) == baseline[1]


# --- through the library ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), POOL_FILES, ids=[n for n, _ in POOL_FILES])
def test_library_refuses_hostile_pool_file(name: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        pools_from_file(FIXTURES / name)
    assert expected in str(info.value)
    assert str(info.value).startswith(str(FIXTURES / name)), "the error names the file"


@pytest.mark.parametrize(("name", "expected"), WORKLOAD_FILES, ids=[n for n, _ in WORKLOAD_FILES])
def test_library_refuses_hostile_workload_file(name: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        workload_from_file(FIXTURES / name)
    assert expected in str(info.value)
    assert str(info.value).startswith(str(FIXTURES / name)), "the error names the file"


@pytest.mark.parametrize("kind", GENERATED)
def test_library_refuses_oversized_endless_and_unreadable_files(tmp_path: Path, kind: str) -> None:
    for workload, reader in ((False, pools_from_file), (True, workload_from_file)):
        path, expected = generated(kind, tmp_path, workload=workload)
        with pytest.raises(SpecError) as info:
            reader(path)
        assert expected in str(info.value)
        assert len(str(info.value)) < 10_000, "the error echoes the whole input"


NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("field", ["cost_per_hour", "carbon_factor", "power_w", "pue"])
def test_library_refuses_non_finite_pool_numbers(baseline: tuple[Path, State], tmp_path: Path, field: str, value: float) -> None:
    values: dict[str, object] = {"name": "p", "target": "hpc", "accelerator": "amd", "count": 1, "region": "eu", field: value}
    with pytest.raises(SpecError, match=field):
        pool_from_mapping(values)
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy2(baseline[0] / "state.db", home / "state.db")
    hw = Hardware(home=home)
    try:
        with pytest.raises(SpecError, match=field):
            hw.add_pool(Pool("p", "hpc", "amd", 1, "eu", **{field: value}))  # type: ignore[arg-type]
    finally:
        hw.close()
    assert snapshot(home) == baseline[1]


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_library_refuses_non_finite_fraction(baseline: tuple[Path, State], tmp_path: Path, value: float) -> None:
    with pytest.raises(SpecError, match="fraction"):
        workload_from_mapping({"name": "w", "accelerator": "amd", "fraction": value})
    with pytest.raises(SpecError, match="fraction"):
        Workload("w", "amd", fraction=value)
    assert snapshot(baseline[0]) == baseline[1]


@pytest.mark.parametrize(("name", "expected"), [n for n in HOSTILE_NAMES if isinstance(n[0], str)], ids=NAME_IDS[:-1])
def test_library_refuses_hostile_names(baseline: tuple[Path, State], tmp_path: Path, name: str, expected: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy2(baseline[0] / "state.db", home / "state.db")
    hw = Hardware(home=home)
    try:
        with pytest.raises(SpecError, match=re.escape(expected)):
            hw.add_pool(Pool(name, "hpc", "amd", 1, "eu"))
        with pytest.raises(SpecError, match=re.escape(expected)):
            hw.apply([Pool("fine", "hpc", "amd", 1, "eu"), Pool(name, "hpc", "amd", 1, "eu")])
        with pytest.raises(SpecError, match=re.escape(expected)):
            hw.place(Workload(name, "amd"))
        with pytest.raises(SpecError, match=re.escape(expected)):
            check_pool_facts(Pool("p", "hpc", "amd", 1, "eu", partition=name), hw.tables)
    finally:
        hw.close()
    assert snapshot(home) == baseline[1]


# --- fuzzing the library ---------------------------------------------------------------------------

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(name=st.text(max_size=70) | st.from_regex(NAME_PATTERN, fullmatch=True))
def test_a_pool_name_is_accepted_exactly_when_it_is_safe(name: str) -> None:
    """Letters, digits, '.', '_' and '-' (1-63, starting with a letter or digit), or SpecError."""
    values = {"name": name, "target": "hpc", "accelerator": "amd", "count": 1, "region": "eu"}
    if NAME_PATTERN.fullmatch(name):
        assert pool_from_mapping(values).name == name
    else:
        with pytest.raises(SpecError):
            pool_from_mapping(values)


VALID_POOLS = GOOD_POOLS.encode()
FRAGMENTS = [
    b"&a ", b"*a", b"<<: ", b"? [x]\n", b"? {x: 1} : 2\n", b"!!python/object:os.system ", b"!!binary ", b"!!set ",
    b"!!float ", b"!!int ", b"!!timestamp ", b"\x00", b"\xff", b"\xc3", b"\t", b"\r", b"{", b"[", b"}", b"]", b"---\n",
    b"9" * 4400, b".nan", b".inf", b"-.inf", b"2024-13-45", b"'", b'"', b"\\", b"\n  - ", b": ", b"#", b"%YAML 1.1\n",
    b"\xef\xbb\xbf", b"\xe2\x80\xae", b"0x", b"1e400", b"~", b"null", b"\n", b"|\n", b">\n",
]  # fmt: skip


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID_POOLS)), st.sampled_from(FRAGMENTS) | st.binary(max_size=8)), min_size=1, max_size=4
    ),
    workload=st.booleans(),
)
def test_mangled_files_give_pools_or_a_spec_error_and_nothing_else(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, bytes]], workload: bool
) -> None:
    """A valid file with hostile fragments spliced in: a valid result or SpecError, never a crash."""
    data = b"workload: {name: train, accelerator: amd, capabilities: [fp8], fraction: 0.5}\n" if workload else VALID_POOLS
    for at, fragment in edits:
        at = min(at, len(data))
        data = data[:at] + fragment + data[at:]
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_bytes(data)
    try:
        items: list[Pool | Workload] = [workload_from_file(path)] if workload else list(pools_from_file(path))
    except SpecError:
        return
    # Accepted: then the same safe loader without the product's checks reads it too (libyaml's
    # when installed, as the product uses; PyYAML's pure-Python reader differs on tabs and the
    # like), and nothing in it is unsafe.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert isinstance(yaml.load(data.decode("utf-8"), Loader=loader), dict)  # noqa: S506 - a safe loader
    for item in items:
        assert NAME_PATTERN.fullmatch(item.name)
        for number in (getattr(item, f, None) for f in ("cost_per_hour", "carbon_factor", "fraction", "pue", "power_w")):
            assert number is None or math.isfinite(number)
