"""CPU and memory sizes are read in one place: cores or millicores, MiB or binary suffixes; every
other spelling is refused with what was expected."""

from __future__ import annotations

import pytest

from examlops_policy.quantities import MAX_CPU_CORES, MAX_MEMORY_MIB, cores, cpu_milli, cpu_text, memory_mib, memory_text


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
