"""docs/validation.md: its table is what genie's model gives for the published data file, and
every published figure in the data file is in the line it was read from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genie.calibration.published import (
    TABLE_BEGIN,
    TABLE_END,
    load,
    load_all,
    price_config,
    replace_table,
)
from genie.calibration.published_doc import document_block
from genie.calibration.published_systems import system_of
from genie.errors import CalibrationError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "validation"
DOC = ROOT / "docs" / "validation.md"


def test_the_document_carries_the_table_its_data_file_makes():
    doc = DOC.read_text()
    assert replace_table(doc, document_block(load_all(DATA))) == doc, (
        "docs/validation.md is out of date: python docs/validation/make_table.py"
    )


def test_thirty_configurations_three_hundred_rows_each_with_its_source_and_hardware():
    configs = load_all(DATA)
    assert len(configs) >= 30 and sum(len(c["rows"]) for c in configs) >= 300
    for cfg in configs:
        assert re.match(r"https://[\w.-]+/\S+$", cfg["source"]), cfg["id"]
        if "github.com" in cfg["source"] and "/blob/" in cfg["source"]:  # a file: at a commit
            assert re.search(r"/blob/[0-9a-f]{40}/", cfg["source"]), cfg["id"]
        for key in ("hardware", "nics", "switch", "command", "nccl_algorithm", "note", "gpu"):
            assert cfg[key].strip(), (cfg["id"], key)
        assert cfg["rows"], cfg["id"]
        system_of(cfg)  # the NCCL-like model's rule accepts every configuration
    vendors = {"amd" if c["gpu"].upper().startswith("MI") else "nvidia" for c in configs}
    assert vendors == {"amd", "nvidia"}
    assert {c["collective"] for c in configs} >= {"all_reduce", "all_gather", "alltoall"}


def test_every_published_number_is_in_the_line_it_was_read_from():
    for cfg in load_all(DATA):
        for row in cfg["rows"]:
            quote = row["quote"]
            if "time_us" in row:
                t = row["time_us"]
                printed = rf"\b{t:.2f}\b|\b{t:.1f}\b|(?<![\d.]){t:g}(?![\d.])"  # 18006 as 18006
                assert re.search(printed, quote), (cfg["id"], row)
                assert str(row["size"]) in quote, (cfg["id"], row)
            else:
                assert f"{row['busbw_GBps']:g}" in quote.replace("GB/s", " "), (cfg["id"], row)
                label = row.get("size_label", "")  # a printed size (1K, 64M) is in the line
                assert not re.fullmatch(r"\d+[KMG]?", label) or label in quote, (cfg["id"], row)


def test_the_priced_rows_are_genies_model_and_their_error_is_against_the_source():
    cfg = next(c for c in load(DATA / "published.toml") if c["id"] == "A100-3x8-HDR")
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


def test_a_run_that_sourced_a_network_plugins_profile_is_priced_with_its_settings():
    # the TCPXO run sourced nccl-env-profile.sh of plugin v1.0.3 / v1.0.4, whose required
    # settings are NCCL_ALGO=Ring,Tree and NCCL_PROTO=Simple: the model honours them, so its
    # 8 B all-reduce is a tree with Simple, not NCCL's unrestricted choice (tree with LL)
    cfg = next(c for c in load_all(DATA) if c["id"] == "H100-2x8-TCPXO-allreduce-a3mega-ztan")
    _, algo, proto, note = system_of(cfg)
    assert (algo, proto, note) == ("ring,tree", "Simple", "")
    assert "nccl-plugin-gpudirecttcpx-dev:v1.0.3" in cfg["nccl_algorithm"]


def test_a_recorded_nccl_release_is_the_one_its_source_states():
    from genie.collectives.nccl_releases import parse_release

    recorded = [c for c in load_all(DATA) if "nccl_version" in c]
    assert len(recorded) >= 15
    for cfg in recorded:
        release = cfg["nccl_version"]
        parse_release(release)
        assert not cfg["gpu"].upper().startswith("MI"), cfg["id"]  # RCCL keeps its constants
        text = " ".join(
            str(cfg.get(k, ""))
            for k in ("hardware", "command", "note", "nccl_algorithm", "nccl_version_source")
        )
        assert re.search(rf"NCCL v?{re.escape(release)}(?!\.?\d)", text), cfg["id"]
