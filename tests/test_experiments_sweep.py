"""genie sweep: the grid, the local pool, a Dask cluster, the table and the figure files."""

from __future__ import annotations

import json

import pytest

import genie
from genie.cli import main
from genie.errors import UsageError
from genie.sweep.grid import parse_grid
from genie.sweep.pool import run_all


def test_the_grid_is_every_combination_last_key_fastest() -> None:
    g = parse_grid(["topology=switch,leaf_spine", "bandwidth=100gbit,400gbit"], ["chunks=2"])
    pts = g.points()
    assert [tuple(p.values()) for p in pts] == [
        ("switch", "100gbit"),
        ("switch", "400gbit"),
        ("leaf_spine", "100gbit"),
        ("leaf_spine", "400gbit"),
    ]
    assert g.argv("W", pts[1]) == ["W", "--chunks", "2", "--topology", "switch", "--bandwidth",
                                   "400gbit"]  # fmt: skip
    for bad in (["speed=1,2"], ["bandwidth"], ["bandwidth=1,1"], ["chunks=1", "chunks=2"]):
        with pytest.raises(UsageError):
            parse_grid(bad)
    with pytest.raises(UsageError, match="swept by --grid too"):
        parse_grid(["chunks=1,2"], ["chunks=4"])
    with pytest.raises(UsageError, match="10000"):
        parse_grid(["chunks=" + ",".join(map(str, range(1, 101)))] * 1
                   + ["spines=" + ",".join(map(str, range(1, 101)))]
                   + ["leaves=1,2"])  # fmt: skip


def _square(x: int) -> int:
    return x * x


def test_the_local_pool_returns_results_in_order_and_reports_each() -> None:
    seen = []
    out = run_all(_square, list(range(6)), workers=2, on_result=lambda i, r: seen.append(i))
    assert out == [0, 1, 4, 9, 16, 25] and sorted(seen) == list(range(6))


def test_sweep_compares_fabrics_in_one_table_and_one_figure(dp, tmp_path, capsys):
    out = tmp_path / "sw"
    grid = ["--grid", "oversubscription=1,4", "--grid", "bandwidth=100gbit,400gbit"]
    fixed = ["--set", "topology=leaf_spine", "--set", "leaves=2"]
    assert main(["sweep", dp, *grid, *fixed, "--out", str(out), "--workers", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {(r["point"]["oversubscription"], r["point"]["bandwidth"]): r for r in doc["rows"]}
    assert len(rows) == 4
    # 4x faster links: less time; 4:1 uplinks: more time on the same links
    assert rows[("1", "400gbit")]["iteration_s"] < rows[("1", "100gbit")]["iteration_s"] / 2
    assert rows[("4", "100gbit")]["iteration_s"] > 1.5 * rows[("1", "100gbit")]["iteration_s"]
    assert "spine" in rows[("4", "100gbit")]["busiest_link"]
    best = min(r["iteration_s"] for r in rows.values())
    assert all(r["vs_best"] == pytest.approx(r["iteration_s"] / best) for r in rows.values())
    # each point is what `genie simulate` (genie.simulate) says for it
    fabric = genie.Fabric(topology="leaf_spine", leaves=2, oversubscription=4, bandwidth="100gbit")
    one = genie.simulate(genie.SimulateSpec(workload=dp, fabric=fabric)).reports[0]
    assert one.iteration_s == pytest.approx(rows[("4", "100gbit")]["iteration_s"])
    for ext in ("json", "csv", "png", "svg", "pdf"):
        assert (out / f"sweep.{ext}").stat().st_size > 100
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["keys"] == ["oversubscription", "bandwidth"]
    assert (out / "sweep.csv").read_text().count("\n") == 5
    # text form: one table
    assert main(["sweep", dp, "--grid", "chunks=1,2", "--out", str(tmp_path / "t")]) == 0
    text = capsys.readouterr().out
    assert "sweep of chunks" in text and "vs best" in text and "sweep.svg" in text


@pytest.mark.parametrize(
    ("grid", "msg"),
    [
        (["--grid", "bandwidth=400"], "bandwidth"),  # simulate's own check, before any run
        (["--grid", "topology=torus"], "topology"),
        (["--grid", "colour=red"], "unknown sweep key"),
    ],
)
def test_a_bad_point_stops_the_sweep_before_it_runs(dp, tmp_path, capsys, grid, msg):
    assert main(["sweep", dp, *grid, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:") and msg in err[0]
    assert not (tmp_path / "x").exists()


def test_sweep_on_a_dask_cluster(dp, tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        args = ["sweep", dp, "--grid", "bandwidth=100gbit,200gbit,400gbit", "--json"]
        assert main([*args, "--out", str(tmp_path / "d"), "--dask", cluster.scheduler_address]) == 0
    doc = json.loads(capsys.readouterr().out)
    times = [r["iteration_s"] for r in doc["rows"]]
    assert len(times) == 3 and times[0] > times[1] > times[2]
    assert (tmp_path / "d" / "sweep.pdf").is_file()


def test_an_unreachable_dask_scheduler_is_one_line(dp, tmp_path, capsys):
    pytest.importorskip("distributed")
    args = ["sweep", dp, "--grid", "chunks=1,2", "--out", str(tmp_path / "d")]
    assert main([*args, "--dask", "tcp://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Dask scheduler" in err[0]
