"""Tests of unit parsing and formatting."""

import pytest

from genie.errors import UnitError
from genie.units import (
    format_bytes,
    format_seconds,
    parse_bandwidth,
    parse_duration,
    parse_ratio,
    parse_size,
    parse_size_sweep,
)


def test_sizes_binary_and_decimal():
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    assert parse_size("1.5KiB") == 1536


@pytest.mark.parametrize("bad", ["", "abc", "-1", "1.3B", "5 furlongs"])
def test_bad_sizes(bad):
    with pytest.raises(UnitError):
        parse_size(bad)


@pytest.mark.parametrize(
    "text,bytes_per_s",
    [
        ("1gbit", 125e6),
        ("100mbit", 12.5e6),
        ("100Gbit", 12.5e9),
        ("10Gbit/s", 1.25e9),
        ("100gbps", 12.5e9),
        ("100Gb/s", 12.5e9),
        ("50GB/s", 50e9),
        ("12.5GBps", 12.5e9),
        ("50GiB/s", 50 * 2**30),
        ("400 Gb/s", 50e9),
    ],
)
def test_bandwidths_are_bytes_per_second_with_b_for_bytes_and_b_for_bits(text, bytes_per_s):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("bare", ["400", "1e9", 400, 1e9, "  7 "])
def test_a_bandwidth_without_a_unit_is_an_error_showing_the_forms(bare):
    with pytest.raises(UnitError, match=r"needs a unit.*50GiB/s.*100gbit"):
        parse_bandwidth(bare)


@pytest.mark.parametrize("bad", ["0gbit", "-1GB/s", "nanGB/s", "1e30GB/s", "fast", "5 furlongs"])
def test_bad_bandwidths(bad):
    with pytest.raises(UnitError):
        parse_bandwidth(bad)


def test_ratios_as_a_to_b_or_a_number():
    assert parse_ratio("2:1") == parse_ratio("2") == parse_ratio(2) == 2.0
    assert parse_ratio("3:2") == 1.5
    for bad in ("2:0", "0", "-1", "nan", "x:1", "inf", True):
        with pytest.raises(UnitError):
            parse_ratio(bad)


def test_no_negative_zero():
    assert format_seconds(-1e-15) == "0 ns" and format_seconds(-0.0) == "0 ns"


def test_durations():
    assert parse_duration("500ns") == pytest.approx(500e-9)
    assert parse_duration("2ms") == pytest.approx(2e-3)


def test_sweeps():
    assert parse_size_sweep("1KiB:16KiB:x4") == [1024, 4096, 16384]
    assert parse_size_sweep("1,2,3") == [1, 2, 3]
    assert parse_size_sweep("10:30:+10") == [10, 20, 30]
    with pytest.raises(UnitError):
        parse_size_sweep("16:1:x2")


@pytest.mark.parametrize("sweep", ["1:1TiB:+1", "1:64MiB:+1", "1:1TiB:x1.000001"])
def test_huge_sweeps_are_refused_before_they_are_built(sweep):
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(UnitError, match="at most 10000"):
        parse_size_sweep(sweep)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20  # refused on the count, not after building a list


def test_format_bytes():
    assert format_bytes(64 * 2**20) == "64.0 MiB"
    assert format_bytes(10) == "10 B"
