"""Paper-ready reports: time axes in the unit of their ticks, figures in three formats, side by
side comparisons as grouped bars, aggregated timelines with a drill-down, no run ids in titles."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest

pytest.importorskip("matplotlib")

import genie
from genie.report.plots import draw, time_unit
from genie.report.simulation_figures import network_label
from genie.report.sweeps import sweep_figure
from genie.report.timelines import aggregate_ranks
from genie.workload import save_workload
from genie.workload.generators import data_parallel, llm


def test_time_axes_say_the_unit_their_ticks_are_in(tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from genie.report.plots import _seconds_axis

    assert time_unit(0.25) == (1e-3, "ms") and time_unit(3e-5) == (1e-6, "µs")
    assert time_unit(2.0) == (1.0, "s")
    f, ax = plt.subplots()
    ax.plot([0, 1], [0.0, 0.004])
    _scale, unit = _seconds_axis(ax.yaxis, "iteration")
    f.canvas.draw()
    ticks = [t.get_text() for t in ax.yaxis.get_ticklabels() if t.get_text()]
    assert ax.yaxis.get_label_text() == "iteration (ms)" and unit == "ms"
    assert "4" in ticks and not any("m" in t or "e-" in t for t in ticks)  # plain numbers, in ms
    plt.close(f)


def test_every_figure_is_written_as_png_svg_and_pdf(tmp_path) -> None:
    rows = [
        {"label": f"bandwidth {b}", "point": {"bandwidth": b}, "iteration_s": t,
         "exposed_comm_s": t / 2}
        for b, t in (("100gbit", 4e-3), ("400gbit", 1e-3))
    ]  # fmt: skip
    fig = sweep_figure(rows, ["bandwidth"], "dp", "model")
    assert fig["kind"] == "grouped_bars"  # two configurations: side by side
    paths = draw(fig, tmp_path / "f.png", all_formats=True)
    assert [p.suffix for p in paths] == [".png", ".svg", ".pdf"]
    assert paths[1].read_text().lstrip().startswith("<?xml")
    assert paths[2].read_bytes()[:4] == b"%PDF"
    many = rows + [dict(rows[0], label="x", point={"bandwidth": "200gbit"})] * 2
    assert sweep_figure(many, ["bandwidth"], "dp", "model")["kind"] == "small_multiples"


def test_many_ranks_are_aggregated_into_lanes() -> None:
    series = [
        {"label": f"rank {r}", "rank": r, "spans": {"comm": [[r * 0.1, 0.2]]}} for r in range(64)
    ]
    lanes = aggregate_ranks(series)
    assert (
        len(lanes) == 16 and lanes[0]["label"] == "ranks 0-3" and lanes[0]["ranks"] == [0, 1, 2, 3]
    )
    assert lanes[0]["spans"]["comm"] == [[0.0, pytest.approx(0.5)]]  # union of the four
    assert (
        network_label(
            "leaf_spine topology: 8 hosts, 3 switches, 20 links; links 11.642 GiB/s = 12.500 GB/s"
        )
        == "leaf_spine, 8 hosts, 12.5 GB/s links"
    )


def test_two_simulations_side_by_side_and_a_64_rank_timeline(tmp_path) -> None:
    dp = tmp_path / "dp"
    save_workload(data_parallel(4, layers=2, hidden=512, seq=256, batch=1), dp)
    big = tmp_path / "llm"
    save_workload(llm(64, tp=4, pp=2, layers=2, micro_batches=2, hidden=512, seq=256), big)
    sims = []
    for bw in ("100gbit", "400gbit"):
        fabric = genie.Fabric(bandwidth=bw)
        sim = genie.simulate(genie.SimulateSpec(workload=str(dp), fabric=fabric))
        sims.append(str(_write_json(tmp_path / f"{bw}.json", sim.to_dict())))
    trace = tmp_path / "t.json"
    four = genie.Fabric(ranks_per_host=4)
    sim = genie.simulate(genie.SimulateSpec(workload=str(big), fabric=four))
    assert sim.write_trace(trace) > 0
    _write_json(tmp_path / "big.json", sim.to_dict())
    out = tmp_path / "rep"
    rep = genie.write_report(genie.ReportSpec(out=str(out), sims=tuple(sims), traces=(str(trace),)))
    doc = rep.to_dict()
    figs = {f["id"]: f for f in doc["figures"]}
    cmp_ = figs["compare_iterations"]
    assert cmp_["kind"] == "grouped_bars" and len(cmp_["series"]) == 2
    assert {"sim0_iteration", "sim1_iteration"}.isdisjoint(figs)  # no one-bar charts
    labels = [s["label"] for s in cmp_["series"]]
    assert labels[0] != labels[1] and all("12.5 GB/s" in x or "50 GB/s" in x for x in labels)
    tl = figs["trace0_timeline"]
    assert len(tl["series"]) == 16 and len(tl["drilldown"]["series"]) == 64
    html = (out / "report.html").read_text()
    assert "<details><summary>drill down" in html
    for f in doc["figures"]:
        png = Path(f["file"])
        assert png.with_suffix(".svg").is_file() and png.with_suffix(".pdf").is_file()
    # the 64-rank simulation's collectives: groups aggregated by kind, every group drilled down
    big_only = genie.ReportSpec(out=str(tmp_path / "b"), sims=(str(tmp_path / "big.json"),))
    one = {f["id"]: f for f in genie.write_report(big_only).figures}
    ctl = one["sim0_timeline"]
    assert len(ctl["series"]) <= 16 and len(ctl["drilldown"]["series"]) > 16
    # lanes named by the kind of group in words, not a pattern of '#'s
    assert any(s["label"].startswith("p2p (") for s in ctl["series"])
    assert all("#" not in s["label"] for s in ctl["series"])


def _write_json(path: Path, doc: dict) -> Path:
    """``doc`` as the JSON the CLI's --json prints (numpy numbers as numbers, NaN as null)."""

    def plain(o: object) -> object:
        return o.item() if isinstance(o, np.generic) else str(o)

    path.write_bytes(msgspec.json.encode(doc, enc_hook=plain))
    return path


def test_intra_host_and_inter_host_points_are_separate_curves() -> None:
    from genie.report.data import group_key
    from genie.report.size_figures import _label

    inst = {"collective": "all_reduce", "algorithm": "ring", "n_ranks": 2, "program": {}}
    intra = group_key(inst, ["h0", "h0", "h1"])
    inter = group_key({**inst, "program": {"ranks": [1, 2]}}, ["h0", "h0", "h1"])
    assert intra[-1] == "intra-host" and inter[-1] == "inter-host" and intra != inter
    g = {"run_id": "r1", "algorithm": "ring", "n_ranks": 2, "span": "intra-host"}
    assert "intra-host" in _label(g, False, {"intra-host", "inter-host"})
