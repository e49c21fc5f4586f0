"""Tests of unit parsing and formatting."""

import pytest

from genie.errors import UnitError
from genie.units import format_bytes, parse_duration, parse_rate, parse_size, parse_size_sweep


def test_sizes_binary_and_decimal():
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    assert parse_size("1.5KiB") == 1536


@pytest.mark.parametrize("bad", ["", "abc", "-1", "1.3B", "5 furlongs"])
def test_bad_sizes(bad):
    with pytest.raises(UnitError):
        parse_size(bad)


def test_rates_are_bytes_per_second():
    assert parse_rate("1gbit") == 125e6
    assert parse_rate("100mbit") == 12.5e6
    assert parse_rate(8e9) == 1e9
    with pytest.raises(UnitError):
        parse_rate("0gbit")


def test_durations():
    assert parse_duration("500ns") == pytest.approx(500e-9)
    assert parse_duration("2ms") == pytest.approx(2e-3)


def test_sweeps():
    assert parse_size_sweep("1KiB:16KiB:x4") == [1024, 4096, 16384]
    assert parse_size_sweep("1,2,3") == [1, 2, 3]
    assert parse_size_sweep("10:30:+10") == [10, 20, 30]
    with pytest.raises(UnitError):
        parse_size_sweep("16:1:x2")


def test_format_bytes():
    assert format_bytes(64 * 2**20) == "64.0 MiB"
    assert format_bytes(10) == "10 B"
