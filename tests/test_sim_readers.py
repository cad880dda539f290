"""The replay's trace readers and its bounds: each reader registered once by name and chosen from
``--format`` or the file; a CSV trace's size limit, checked before a row is read; a trace whose
arrivals are out of order refused (exit 2), never sorted in memory; a CSV workload list read row by
row with each shape checked once; the allocation curve built as events come equal to the one
worked out from every event; and memory that does not grow with the trace."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path

import pytest

from examlops_policy import model
from examlops_policy._sim import readers
from examlops_policy._sim.generic import CsvWorkloads
from examlops_policy._sim.replay import Curve, allocation_curve
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.tables import load_tables
from tests.conftest import run_exa

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "examples" / "traces" / "site" / "trace.yaml"
OPENB_PODS = ROOT / "examples" / "traces" / "openb" / "openb_pod_list_default.csv"
HEADER = "name,arrival,duration,accelerator,count,fraction,cpu,memory,models\n"
NODES_CSV = """node,pool,region,accelerator,model,devices,cpu,memory,cost_per_hour
a1,a100-eu,eu,nvidia,a100,4,32,256Gi,2.4
a2,a100-eu,eu,nvidia,a100,4,32,256Gi,2.4
"""


def fleet_csv(nodes: int) -> str:
    """A node list of ``nodes`` nodes of 4 A100 in one pool."""
    return NODES_CSV.splitlines(keepends=True)[0] + "".join(f"n{i},a100-eu,eu,nvidia,a100,4,32,256Gi,2.4\n" for i in range(nodes))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def workloads_csv(n: int, *, duration: int = 420) -> str:
    """``n`` workloads, one a minute, each holding 1 of 8 devices for ``duration`` seconds (at most
    seven running at once: the fleet is never full)."""
    return HEADER + "".join(f"w{i},{60 * i},{duration},nvidia,1,,2,8Gi,\n" for i in range(n))


# -- the registry -------------------------------------------------------------------------------------


def test_every_reader_is_registered_once_by_name_and_the_cli_offers_them() -> None:
    assert list(readers.READERS) == ["generic-yaml", "generic-csv", "openb"]
    assert sorted(readers.FORMATS) == sorted(model.TRACE_FORMATS)
    with pytest.raises(SpecError, match="registered already"):
        readers.register(readers.READERS["openb"])
    assert list(readers.READERS) == ["generic-yaml", "generic-csv", "openb"]


def test_the_reader_is_read_from_the_suffix_and_the_header(tmp_path: Path) -> None:
    generic = write(tmp_path / "workloads.csv", workloads_csv(1))
    assert readers.infer(SITE).name == "generic-yaml"
    assert readers.infer(write(tmp_path / "t.yml", "")).name == "generic-yaml"
    assert readers.infer(generic).name == "generic-csv"
    assert readers.infer(OPENB_PODS).name == "openb"  # a CSV without an arrival column
    assert readers.infer(tmp_path / "missing.csv").name == "openb"  # openb's reader names the missing file
    # --format: a reader by name, or the generic family (its reader for the suffix, else the YAML one).
    assert readers.reader_for("generic", generic).name == "generic-csv"
    assert readers.reader_for("generic", SITE).name == "generic-yaml"
    assert readers.reader_for("generic", tmp_path / "trace.txt").name == "generic-yaml"
    assert readers.reader_for("generic-csv", tmp_path / "x.data").name == "generic-csv"
    assert readers.reader_for("openb", generic).name == "openb"
    with pytest.raises(SpecError, match="unknown trace format 'swf'; known: openb, generic, generic-csv, generic-yaml"):
        readers.reader_for("swf", generic)


def test_a_named_reader_replays_its_file(hardware: Hardware, tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    pods = write(tmp_path / "workloads.csv", workloads_csv(5))
    by_name = hardware.simulate(pods, nodes, format="generic-csv").runs[0].results[0]
    inferred = hardware.simulate(pods, nodes).runs[0].results[0]
    assert (by_name.placed, by_name.pods) == (inferred.placed, inferred.pods) == (5, 5)
    with pytest.raises(SpecError, match="needs its node list"):
        hardware.simulate(pods, format="generic-csv")
    assert hardware.simulate(SITE, format="generic-yaml").runs[0].results[0].pods == 7


# -- limits and order ---------------------------------------------------------------------------------


def test_a_csv_over_the_limit_is_refused_before_a_row_is_read(hardware: Hardware, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from examlops_policy._sim import trace

    assert trace.MAX_CSV_BYTES == 256 * 1024 * 1024  # the documented limit
    monkeypatch.setattr(trace, "MAX_CSV_BYTES", 2048)
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    # Its first row is bad and its rows are out of order: the size is what is refused, first.
    big = write(tmp_path / "workloads.csv", HEADER + "w0,soon,,nvidia,1,,,,\n" + "".join(f"w{i},{9999 - i},,nvidia,1,,,,\n" for i in range(1, 200)))
    with pytest.raises(SpecError) as err:
        hardware.simulate(big, nodes)
    assert err.value.source == str(big) and f"the file is {big.stat().st_size} bytes, larger than 2048 bytes" in str(err.value)
    # The node list too.
    many = write(tmp_path / "many.csv", NODES_CSV + "".join(f"n{i},a100-eu,eu,nvidia,a100,4,32,256Gi,2.4\n" for i in range(100)))
    with pytest.raises(SpecError, match="larger than 2048 bytes") as err:
        hardware.simulate(write(tmp_path / "small.csv", workloads_csv(2)), many)
    assert err.value.source == str(many)


def test_a_csv_stream_is_read_line_by_line_and_cut_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that is no regular file (its size unknown: a device, a pipe) is read a line at a
    time, each line cut at the limit: ``/dev/zero`` (one line that never ends) is refused there."""
    from examlops_policy._sim import trace

    monkeypatch.setattr(trace, "MAX_CSV_BYTES", 4096)
    with pytest.raises(SpecError, match="larger than 4096 bytes") as err:
        list(trace._rows(Path("/dev/zero"), ("name",)))
    assert err.value.source == "/dev/zero"


def test_a_csv_not_utf8_deep_in_the_file_names_its_line(tmp_path: Path) -> None:
    """A regular file is read a block of lines at a time; a byte that is not UTF-8 text anywhere
    in a block is refused naming its own line, not the block's first."""
    bad = tmp_path / "workloads.csv"
    rows = [f"w{i},{i},,nvidia,1,,,,\n".encode() for i in range(5000)]
    rows[4321] = b"w\xff,4321,,nvidia,1,,,,\n"  # line 4323 (after the header), past the first 64 KiB
    bad.write_bytes(HEADER.encode() + b"".join(rows))
    assert sum(len(r) for r in rows[:4321]) > 64 * 1024
    with pytest.raises(SpecError, match="not UTF-8") as err:
        list(CsvWorkloads(bad, load_tables()))
    assert err.value.source == f"{bad} line 4323"


def test_the_cli_refuses_a_csv_over_the_limit_with_exit_2(exa_home: Path, tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    big = tmp_path / "workloads.csv"
    with big.open("w", encoding="utf-8") as out:
        out.write(workloads_csv(1))
        out.truncate(256 * 1024 * 1024 + 1)  # a sparse file: one byte over the limit, nothing written
    done = run_exa(exa_home, "hardware", "simulate", "--pods", str(big), "--nodes", str(nodes))
    assert done.returncode == 2, done.stderr
    assert str(big) in done.stderr and "larger than 268435456 bytes" in done.stderr


@pytest.mark.parametrize("suffix", ["csv", "yaml"])
def test_a_trace_out_of_order_is_refused_naming_the_file_and_line(exa_home: Path, tmp_path: Path, suffix: str) -> None:
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    if suffix == "csv":
        pods = write(tmp_path / "workloads.csv", HEADER + "a,0,60,nvidia,1,,,,\nb,120,60,nvidia,1,,,,\nc,60,60,nvidia,1,,,,\n")
        args = ["--pods", str(pods), "--nodes", str(nodes)]
        line = 4
    else:
        pods = write(tmp_path / "trace.yaml", SITE.read_text(encoding="utf-8").replace("arrival: 1200", "arrival: 1"))
        args = ["--pods", str(pods)]
        line = next(i for i, text in enumerate(pods.read_text(encoding="utf-8").splitlines(), 1) if "arrival: 1," in text)
    done = run_exa(exa_home, "hardware", "simulate", *args)
    assert done.returncode == 2, done.stderr
    assert f"{pods} line {line}: arrival:" in done.stderr and "in order of arrival" in done.stderr, done.stderr


def test_workloads_arriving_at_the_same_instant_are_in_order(hardware: Hardware, tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.csv", NODES_CSV)
    pods = write(tmp_path / "workloads.csv", HEADER + "a,5,,nvidia,1,,,,\nb,5,,nvidia,1,,,,\nc,5.5,,nvidia,1,,,,\n")
    assert hardware.simulate(pods, nodes).runs[0].results[0].placed == 3


# -- the CSV workload list, row by row ----------------------------------------------------------------


def test_rows_asking_the_same_share_one_checked_shape_and_every_name_is_checked(tmp_path: Path) -> None:
    tables = load_tables()
    listed = CsvWorkloads(write(tmp_path / "workloads.csv", HEADER + "a,0,,nvidia,1,,2,8Gi,\nb,1,,nvidia,1,,2,8Gi,\nc,2,,nvidia,2,,2,8Gi,\n"), tables)
    a, b, c = list(listed)
    assert a.shape is b.shape and a.shape is not c.shape
    assert (a.name, b.name, a.workload.name, b.workload.count, c.workload.count) == ("a", "b", "a", 1, 2)
    assert [w.name for w in listed] == ["a", "b", "c"]  # read again when iterated again
    # A bad name on a row whose shape was checked already is still refused, naming its line.
    bad = CsvWorkloads(write(tmp_path / "bad.csv", HEADER + "a,0,,nvidia,1,,,,\nBad Name,1,,nvidia,1,,,,\n"), tables)
    with pytest.raises(SpecError) as err:
        list(bad)
    assert err.value.source == f"{tmp_path / 'bad.csv'} line 3" and err.value.field == "name"
    with pytest.raises(SpecError, match="holds no workload"):
        CsvWorkloads(write(tmp_path / "empty.csv", HEADER), tables)


# -- the curve ----------------------------------------------------------------------------------------


def _events(rng: random.Random, n: int, total: int) -> list[tuple[int, int]]:
    """A replay's events: arrived demand that only grows, in steps small and large (whole percents
    skipped, one or several at once), allocation that rises and falls."""
    events = [(0, 0)]
    arrived = allocated = 0
    for _ in range(n):
        arrived += rng.choice((0, 1, 250, 500, 1000, 2000, 8000, rng.randrange(0, 40_000)))
        allocated = max(0, min(arrived, allocated + rng.randrange(-3000, 4000)))
        events.append((arrived, allocated))
    return events


@pytest.mark.parametrize("seed", range(40))
def test_the_curve_built_as_events_come_is_the_curve_of_every_event(seed: int) -> None:
    rng = random.Random(seed)
    total = rng.choice((1, 3, 8, 64, 512))
    events = _events(rng, rng.randrange(1, 400), total)
    upto = rng.choice((100, 130, 10_000))
    curve = Curve(total, upto)
    for a, u in events:
        curve.add(a, u)
    expected = allocation_curve(events, total, upto)
    assert dict(curve) == expected
    assert list(curve) == sorted(expected) and len(curve) == len(expected)
    assert all(curve[x] == v for x, v in expected.items())
    assert curve.peak_milli == max(u for _, u in events) and curve.events == len(events)


def test_a_curve_refuses_demand_that_falls() -> None:
    from examlops_policy.errors import StateError

    curve = Curve(8)
    curve.add(0, 0)
    curve.add(8000, 1000)
    with pytest.raises(StateError, match="demand fell"):
        curve.add(1000, 0)


def test_the_openb_replay_curve_is_the_curve_of_its_events(hardware: Hardware) -> None:
    nodes = ROOT / "examples" / "traces" / "openb" / "openb_node_list_gpu_node.csv"
    r = hardware.simulate(OPENB_PODS, nodes, seeds=[42], inflate=1.3).runs[0].results[0]
    assert len(r.events) > 1000
    assert dict(r.alloc_pct) == allocation_curve(r.events, r.capacity_milli // 1000, 130)


# -- memory ----------------------------------------------------------------------------------------


def _peak(hardware: Hardware, nodes: Path, pods: Path) -> int:
    """The most memory Python held while replaying ``pods`` (tracemalloc), beyond what it held before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = hardware.simulate(pods, nodes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.runs[0].results[0].placed == result.runs[0].results[0].pods
    return peak - before


def test_memory_does_not_grow_with_the_trace(hardware: Hardware, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four times the workloads, about the same peak: the trace is read as it is replayed, the curve
    keeps a number per whole percent of demand (8 bytes; 1,200 more percents here: 9 KB), the
    outcomes past the first ``HELD`` are written aside. Holding the outcomes alone costs about
    300 bytes a workload (1.8 MB more here), holding the trace too about 1 KB."""
    from examlops_policy._sim import simulate

    monkeypatch.setattr(simulate.Outcomes, "HELD", 200)
    nodes = write(tmp_path / "nodes.csv", fleet_csv(128))
    small = write(tmp_path / "small.csv", workloads_csv(2_000))
    large = write(tmp_path / "large.csv", workloads_csv(8_000))
    _peak(hardware, nodes, small)  # the policy's verdicts and the code's first use, out of the figure
    grown = _peak(hardware, nodes, large) - _peak(hardware, nodes, small)
    assert grown < 400_000, f"peak grew by {grown} bytes for 6,000 more workloads"
    outcomes = list(hardware.simulate(large, nodes).runs[0].outcomes)
    assert len(outcomes) == 8_000 and [o.name for o in outcomes[::1999]] == ["w0", "w1999", "w3998", "w5997", "w7996"]
