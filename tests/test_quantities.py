"""CPU and memory sizes, durations and instants are read in one place: cores or millicores, MiB or
binary suffixes, units or whole seconds, RFC 3339 times with their offset; every other spelling is
refused with what was expected."""

from __future__ import annotations

from datetime import datetime

import pytest

from examlops_policy.quantities import (
    MAX_CPU_CORES, MAX_DURATION_S, MAX_MEMORY_MIB, cores, cpu_milli, cpu_text, duration_s, duration_text, instant, instant_text,
    memory_mib, memory_text,
)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "milli"),
    [(2, 2000), (0.5, 500), ("500m", 500), ("2", 2000), ("1.5", 1500), ("0.001", 1), (64.25, 64250), ("100000", 100_000_000)],
)
def test_cpu_is_cores_or_millicores(value: object, milli: int) -> None:
    assert cpu_milli(value) == milli


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "more than 0 cores"),
        ("0m", "more than 0 cores"),
        (-1, "more than 0 cores"),
        ("0.0005", "whole number of millicores"),
        ("1.5m", "whole number of millicores"),
        ("two", "expected cores"),
        ("2 cores", "expected cores"),
        (True, "expected cores"),
        (float("nan"), "finite"),
        (MAX_CPU_CORES + 1, f"at most {MAX_CPU_CORES} cores"),
        ([2], "expected cores"),
    ],
)
def test_cpu_refuses_what_is_not_a_quantity(value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        cpu_milli(value)


@pytest.mark.parametrize(
    ("value", "mib"),
    [(2048, 2048), ("2048", 2048), ("512Mi", 512), ("64Gi", 65536), ("1Ti", 1 << 20), ("1.5Gi", 1536), ("1048576Ki", 1024), (64.0, 64)],
)
def test_memory_is_mib_or_a_binary_size(value: object, mib: int) -> None:
    assert memory_mib(value) == mib


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("64G", "ambiguous"),
        ("512M", "ambiguous"),
        ("1GB", "ambiguous"),
        ("512Ki", "whole number of MiB"),
        ("1.5", "whole MiB"),
        (1.5, "whole MiB"),
        (0, "at least 1 MiB"),
        ("lots", "expected a size"),
        (True, "expected a size"),
        (MAX_MEMORY_MIB + 1, "at most 1Pi"),
    ],
)
def test_memory_refuses_ambiguous_or_partial_sizes(value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        memory_mib(value)


def test_quantities_are_written_back_exactly() -> None:
    assert (cores(2000), cores(500), cores(1)) == (2, 0.5, 0.001)
    assert isinstance(cores(2000), int)
    assert (cpu_text(2000), cpu_text(500), cpu_text(2500)) == ("2", "500m", "2500m")
    assert (memory_text(65536), memory_text(1536), memory_text(512), memory_text(1 << 20)) == ("64Gi", "1536Mi", "512Mi", "1Ti")
    for mib in (1, 512, 1536, 65536, 1 << 20, (1 << 30)):
        assert memory_mib(memory_text(mib)) == mib
    for milli in (1, 500, 2000, 2500, 96000):
        assert cpu_milli(cpu_text(milli)) == milli
        assert cpu_milli(cores(milli)) == milli


# -- durations and instants ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400), (" 2 h ", 7200),
        ("1d2h3m4s", 93784), (7200, 7200), ("7200", 7200), (7200.0, 7200), ("0s", 0), (0, 0),
    ],
)  # fmt: skip
def test_a_duration_is_units_or_whole_seconds(value: object, seconds: int) -> None:
    assert duration_s(value) == seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2 hours", "expected a duration"),
        ("2h30", "expected a duration"),
        ("PT2H", "expected a duration"),
        ("", "expected a duration"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("0.5s", "whole number of seconds"),
        (1.5, "whole seconds"),
        (-1, "at least 0s"),
        (True, "expected a duration"),
        ([60], "expected a duration"),
        (float("inf"), "whole seconds"),
        ("367d", "at most 366d"),
        (MAX_DURATION_S + 1, "at most 366d"),
    ],
)
def test_a_duration_refuses_what_is_not_one(value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        duration_s(value)


def test_a_duration_has_a_floor_where_the_field_needs_one() -> None:
    with pytest.raises(ValueError, match="at least 1s"):
        duration_s("0s", least=1)
    assert duration_s("1s", least=1) == 1


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 90, 3600, 5400, 7500, 86400, 93784, MAX_DURATION_S])
def test_duration_text_reads_back(seconds: int) -> None:
    assert duration_s(duration_text(seconds)) == seconds


@pytest.mark.parametrize(
    ("value", "utc"),
    [
        ("2026-12-01T14:00:00Z", "2026-12-01T14:00:00Z"),
        ("2026-12-01T15:00:00+01:00", "2026-12-01T14:00:00Z"),
        ("2026-12-01t14:00:00z", "2026-12-01T14:00:00Z"),
        ("2026-12-01 14:00:00.25Z", "2026-12-01T14:00:00.250000Z"),
        ("2026-12-01T00:30:00-02:00", "2026-12-01T02:30:00Z"),
    ],
)
def test_an_instant_is_held_as_utc_text(value: str, utc: str) -> None:
    assert instant_text(value) == utc
    assert instant_text(instant(value)) == utc


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-12-01T14:00:00", "with its offset"),
        ("2026-12-01", "with its offset"),
        ("tomorrow", "with its offset"),
        ("2026-13-01T00:00:00Z", "not a real time"),
        ("2026-02-30T00:00:00Z", "not a real time"),
        ("1999-12-31T23:59:59Z", "between the years 2000 and 2200"),
        ("2263-01-01T00:00:00Z", "between the years 2000 and 2200"),
        (1764597600, "with its offset"),
    ],
)
def test_an_instant_refuses_what_is_not_one(value: object, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        instant_text(value)


def test_a_datetime_without_an_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="say the offset"):
        instant_text(datetime(2026, 12, 1, 14, 0, 0))
