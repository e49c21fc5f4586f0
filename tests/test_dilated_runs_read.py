"""A dilated run reads the same in ``genie report`` and ``genie runs show`` as ``genie bench`` /
``genie emulate`` printed it: the store keeps the wire's times, every reader divides by the
run's dilation K (``genie.calibration.dilation.reported_s``), the model too."""

from __future__ import annotations

import json

import pytest
from test_runs_cli import _inst, _run

from genie.calibration.dilation import reported_s, run_dilation
from genie.collectives.program import ProgramSpec
from genie.report import data, size_figures
from genie.store import RunStore

TESTBED = (
    '[testbed]\nname = "star2"\nkind = "netns"\n'
    '[topology]\nshape = "star"\nhosts = 2\nrate = "1gbit"\n'
)
WIRE = {1 << 20: 0.040, 4 << 20: 0.150}  # s on the wire of the dilated run


def _store(path, k: float) -> str:
    """A run dilated x ``k`` whose wire times are ``WIRE`` x k / 4: it reads as ``WIRE`` / 4."""
    with RunStore(path) as st:
        rid = st.start_run(
            "genie bench",
            testbed_name="star2",
            testbed_text=TESTBED,
            meta={"dilation": k} if k != 1 else {},
        )
        for size, t in WIRE.items():
            spec = ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=size)
            wire = t * k / 4
            st.add_instances(rid, spec, [_inst(0, 9.0, True), _inst(1, wire), _inst(2, wire)])
        st.finish_run(rid, "ok")
    return rid


def test_the_one_definition():
    assert reported_s(0.4, 4.0) == pytest.approx(0.1)
    assert run_dilation({"dilation": 4}) == 4.0
    assert run_dilation({}) == run_dilation(None) == 1.0


def test_report_reads_a_dilated_run_as_the_cli_printed_it(tmp_path):
    plain, dilated = tmp_path / "plain.sqlite", tmp_path / "dilated.sqlite"
    a, b = _store(plain, 1.0), _store(dilated, 4.0)
    with RunStore(plain) as st:
        (ga,) = data.bench_groups(st, a)
    with RunStore(dilated) as st:
        (gb,) = data.bench_groups(st, b)
    for ra, rb in zip(ga["rows"], gb["rows"], strict=True):
        assert rb["time_p50_s"] == pytest.approx(WIRE[rb["size"]] / 4)
        assert rb["time_p50_s"] == pytest.approx(ra["time_p50_s"])
        assert rb["busbw_Bps"] == pytest.approx(ra["busbw_Bps"])
        # the model of a dilated run is the lab's / K, as bench and emulate price it
        assert ra["modeled_s"] and rb["modeled_s"] == pytest.approx(ra["modeled_s"] / 4)
    assert gb["model"][0]["time_s"] == pytest.approx(ga["model"][0]["time_s"] / 4)
    titles = [f["title"] for f in size_figures.bench_figures([gb])]
    assert titles and all("dilated x4 (times / 4)" in t for t in titles)
    assert not any("dilated" in f["title"] for f in size_figures.bench_figures([ga]))


def test_runs_show_reads_a_dilated_run_as_the_cli_printed_it(tmp_path, capsys):
    path = tmp_path / "dilated.sqlite"
    rid = _store(path, 4.0)
    rc, out, _ = _run(["runs", "show", rid, "--store", str(path), "--json"], capsys)
    assert rc == 0
    got = {r["size"]: r["p50_s"] for r in json.loads(out)["summary"]}
    assert got == pytest.approx({s: t / 4 for s, t in WIRE.items()})
    rc, out, _ = _run(["runs", "show", rid, "--store", str(path)], capsys)
    assert "dilation x4: the wire's times / 4" in out
    assert "p50 10000.0 us" in out and "p50 37500.0 us" in out


def test_a_flat_bus_bandwidth_curve_has_headroom_above_it(tmp_path):
    from genie.report.plots import draw

    path = tmp_path / "dilated.sqlite"
    rid = _store(path, 4.0)
    with RunStore(path) as st:
        groups = data.bench_groups(st, rid)
    (fig,) = [f for f in size_figures.bench_figures(groups) if f["id"].startswith("busbw")]
    draw(fig, tmp_path / "busbw.png")
    top = max(v for s in fig["series"] for v in s["y"])  # bytes/s, as the axes record says
    (ax,) = fig["axes"]
    assert ax["ylim"][0] == 0.0 and ax["ylim"][1] >= 1.1 * top  # the points clear the top edge
