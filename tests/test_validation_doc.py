"""docs/validation.md: its table is what genie's model gives for the published data file, and
every published figure in the data file is in the line it was read from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genie.calibration.published import (
    TABLE_BEGIN,
    TABLE_END,
    document_block,
    load,
    price_config,
    replace_table,
)
from genie.errors import CalibrationError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "validation" / "published.toml"
DOC = ROOT / "docs" / "validation.md"


def test_the_document_carries_the_table_its_data_file_makes():
    doc = DOC.read_text()
    assert replace_table(doc, document_block(load(DATA))) == doc, (
        "docs/validation.md is out of date: python docs/validation/make_table.py"
    )


def test_at_least_four_configurations_each_with_its_source_and_hardware():
    configs = load(DATA)
    assert len(configs) >= 4
    for cfg in configs:
        assert re.match(r"https://github\.com/NVIDIA/[\w.-]+/(issues|pull)/\d+$", cfg["source"])
        for key in ("hardware", "nics", "switch", "command", "nccl_algorithm", "note"):
            assert cfg[key].strip(), (cfg["id"], key)
        assert cfg["rows"], cfg["id"]


def test_every_published_number_is_in_the_line_it_was_read_from():
    for cfg in load(DATA):
        for row in cfg["rows"]:
            quote = row["quote"]
            if "time_us" in row:
                assert re.search(rf"\b{row['time_us']:.2f}\b|\b{row['time_us']:.1f}\b", quote)
                assert str(row["size"]) in quote
            else:
                assert f"{row['busbw_GBps']:g}" in quote.replace("GB/s", " ")


def test_the_priced_rows_are_genies_model_and_their_error_is_against_the_source():
    cfg = next(c for c in load(DATA) if c["id"] == "A100-3x8-HDR")
    rows = price_config(cfg)
    # ring on 3 hosts at 4 x 200 Gb/s per host: busbw is the hosts' line rate, 100 GB/s, less
    # the latency of 46 steps
    assert all(99.0e9 < r.genie_busbw < 100.0e9 for r in rows)
    assert rows[0].published_s == pytest.approx(2560.7e-6)
    assert rows[0].error_pct == pytest.approx((rows[0].genie_s / 2560.7e-6 - 1) * 100)
    bad = {**cfg, "ranks": 25}
    with pytest.raises(CalibrationError, match="ranks 25"):
        price_config(bad)


def test_the_markers_must_be_there():
    assert TABLE_BEGIN in DOC.read_text() and TABLE_END in DOC.read_text()
    with pytest.raises(CalibrationError, match="markers"):
        replace_table("no markers", "x")
