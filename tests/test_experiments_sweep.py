"""Sweeps (``genie.run_sweep``, ``genie sweep``): the grid over spec fields, the local pool, a
Dask cluster, rows equal to separate simulations, the table and the figure files."""

from __future__ import annotations

import json

import pytest

import genie
from genie.cli import main
from genie.errors import RuntimeFault, UsageError
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


def test_the_grid_of_a_sweep_spec_is_every_combination_of_spec_fields(dp) -> None:
    spec = genie.SweepSpec(
        base=genie.SimulateSpec(workload=dp),
        axes=(
            genie.Axis(field="fabric.topology", values=("switch", "leaf_spine")),
            genie.Axis(field="fabric.bandwidth", values=(12.5e9, "400gbit"), labels=("a", "b")),
        ),
        fixed=(genie.Axis(field="model.chunks", values=(2,)),),
    )
    pts = spec.points()
    assert [p.point for p in pts] == [
        {"topology": t, "bandwidth": b} for t in ("switch", "leaf_spine") for b in ("a", "b")
    ]
    assert pts[1].label == "topology switch, bandwidth b"
    assert pts[1].spec == genie.SimulateSpec(
        workload=dp,
        fabric=genie.Fabric(topology="switch", bandwidth="400gbit"),
        model=genie.Model(chunks=2),
    )
    assert [p.spec.fabric.bandwidth for p in pts[:2]] == [12.5e9, "400gbit"]
    # refused before anything runs: a field the spec lacks, a value of the wrong type, no axis
    bad = [
        (spec.replace(axes=(genie.Axis(field="fabric.speed", values=(1,)),)), "no field 'speed'"),
        (spec.replace(axes=(genie.Axis(field="fabric.spines", values=("two",)),)), "spines"),
        (spec.replace(axes=(genie.Axis(field="fabric.topology", values=("torus",)),)), "torus"),
        (spec.replace(axes=()), "at least one axis"),
        (spec.replace(fixed=(genie.Axis(field="model.chunks", values=(1, 2)),)), "one value"),
    ]
    for wrong, msg in bad:
        with pytest.raises(UsageError, match=msg):
            wrong.points()
    assert genie.SweepSpec.from_dict(spec.to_dict()) == spec


def _leaf_spine_sweep(dp: str, out=None, workers=2) -> genie.SweepSpec:
    """Oversubscription x bandwidth on a 2-leaf leaf-spine (what the CLI test sweeps too)."""
    return genie.SweepSpec(
        base=genie.SimulateSpec(workload=dp),
        axes=(
            genie.Axis(
                field="fabric.oversubscription",
                values=(1.0, 4.0),
                name="oversubscription",
                labels=("1", "4"),
            ),
            genie.Axis(field="fabric.bandwidth", values=("100gbit", "400gbit")),
        ),
        fixed=(
            genie.Axis(field="fabric.topology", values=("leaf_spine",)),
            genie.Axis(field="fabric.leaves", values=(2,), labels=("2",)),
        ),
        workers=workers,
        out=None if out is None else str(out),
    )


def test_sweep_compares_fabrics_in_one_table_and_one_figure(dp, tmp_path):
    out = tmp_path / "sw"
    res = genie.run_sweep(_leaf_spine_sweep(dp, out))
    rows = {(r.point["oversubscription"], r.point["bandwidth"]): r for r in res.rows}
    assert len(rows) == 4 and not res.failed and res.where == "2 processes"
    # 4x faster links: less time; 4:1 uplinks: more time on the same links
    assert rows[("1", "400gbit")].iteration_s < rows[("1", "100gbit")].iteration_s / 2
    assert rows[("4", "100gbit")].iteration_s > 1.5 * rows[("1", "100gbit")].iteration_s
    assert "spine" in rows[("4", "100gbit")].busiest_link
    best = min(r.iteration_s for r in rows.values())
    assert all(r.vs_best == pytest.approx(r.iteration_s / best) for r in rows.values())
    # every row is what genie.simulate says of that point, number for number
    for (over, bw), row in rows.items():
        fabric = genie.Fabric(
            topology="leaf_spine", leaves=2, oversubscription=float(over), bandwidth=bw
        )
        sim = genie.simulate(genie.SimulateSpec(workload=dp, fabric=fabric))
        rep = sim.reports[0]
        assert (row.iteration_s, row.exposed_comm_s) == (rep.iteration_s, rep.mean("exposed_comm"))
        assert (row.compute_s, row.wait_s) == (rep.mean("compute"), rep.mean("wait"))
        assert row.network == sim.network and row.busiest_link == rep.links[0]["link"]
    assert res.title == "dp (topology leaf_spine, leaves 2): sweep of oversubscription, bandwidth"
    assert [f.name for f in res.files] == [
        *(f"sweep.{x}" for x in ("json", "csv", "png", "svg", "pdf")),
        "figures.json",
    ]
    for f in res.files:
        assert f.stat().st_size > 100
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["keys"] == ["oversubscription", "bandwidth"]
    assert saved["fixed"] == {"topology": "leaf_spine", "leaves": "2"}
    assert saved["rows"] == json.loads(json.dumps(res.to_dict()["rows"]))
    assert (out / "sweep.csv").read_text().count("\n") == 5
    # the figure's data with what its axes showed: every bar inside, and what priced it
    from genie.report.checks import report_problems

    figs = json.loads((out / "figures.json").read_text())
    assert report_problems(figs) == []
    assert res.model == "genie simulate, NCCL-like collective model"
    assert res.model in figs["figures"][0]["title"]


def test_a_point_that_fails_is_a_row_with_its_error(dp, tmp_path):
    tb = tmp_path / "nope.toml"
    spec = genie.SweepSpec(
        base=genie.SimulateSpec(workload=dp),
        axes=(genie.Axis(field="fabric.testbed", values=(None, str(tb)), labels=("-", "nope")),),
        workers=1,
    )
    res = genie.run_sweep(spec)
    ok, bad = res.rows
    assert ok.error is None and ok.vs_best == 1.0 and not res.files
    assert res.failed == [bad] and bad.iteration_s is None and "nope.toml" in bad.error
    assert res.to_dict()["rows"][1] == {"point": {"testbed": "nope"}, "label": "testbed nope",
                                        "error": bad.error}  # fmt: skip


def test_the_command_prints_the_sweep_of_its_grid(dp, tmp_path, capsys):
    grid = ["--grid", "oversubscription=1,4", "--grid", "bandwidth=100gbit,400gbit"]
    fixed = ["--set", "topology=leaf_spine", "--set", "leaves=2"]
    out = ["--out", str(tmp_path / "sw"), "--workers", "2"]
    assert main(["sweep", dp, *grid, *fixed, *out, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    api = genie.run_sweep(_leaf_spine_sweep(dp))
    assert doc == json.loads(json.dumps(api.to_dict()))
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
        (["--grid", "chunks=1,2", "--grid", "latency=1us,soon"], "point chunks 1, latency soon"),
    ],
)
def test_a_bad_point_stops_the_sweep_before_it_runs(dp, tmp_path, capsys, grid, msg):
    assert main(["sweep", dp, *grid, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:") and msg in err[0]
    assert not (tmp_path / "x").exists()


def test_every_sweep_key_sets_the_spec_field_simulate_sets():
    from genie.commands.simulate import spec_from_args
    from genie.commands.sweep import FIELDS, _simulate_parser, _value
    from genie.sweep.grid import KEYS

    assert set(FIELDS) == set(KEYS)
    parser = _simulate_parser()
    samples = {"topology": "ring", "routing": "spray", "pricer": "builtin", "placement": "packed"}
    samples |= {"algorithm": "direct", "calibration": "latest", "testbed": "tb.toml"}
    samples |= {"straggler": "1=2", "jitter": "normal:0.1", "oversubscription": "3:1"}
    samples |= {"bandwidth": "3GB/s", "intra-bandwidth": "3GB/s", "latency": "3us"}
    base = genie.SweepSpec(base=spec_from_args(parser.parse_args(["simulate", "W"])), axes=())
    for key, flag in KEYS.items():
        text = samples.get(key, "3")
        want = spec_from_args(parser.parse_args(["simulate", "W", flag, text]))
        axis = genie.Axis(field=FIELDS[key], values=(_value(parser, "W", key, text),))
        assert base.replace(axes=(axis,)).points()[0].spec == want, key


def test_sweep_on_a_dask_cluster(dp, tmp_path):
    distributed = pytest.importorskip("distributed")
    axis = genie.Axis(field="fabric.bandwidth", values=("100gbit", "200gbit", "400gbit"))
    spec = genie.SweepSpec(base=genie.SimulateSpec(workload=dp), axes=(axis,))
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        where = cluster.scheduler_address
        res = genie.run_sweep(spec.replace(dask=where, out=str(tmp_path / "d")))
    assert res.where == f"Dask at {where}"
    times = [r.iteration_s for r in res.rows]
    assert len(times) == 3 and times[0] > times[1] > times[2]
    assert (tmp_path / "d" / "sweep.pdf").is_file()


def test_an_unreachable_dask_scheduler_is_one_line(dp, tmp_path):
    pytest.importorskip("distributed")
    axis = genie.Axis(field="model.chunks", values=(1, 2))
    spec = genie.SweepSpec(
        base=genie.SimulateSpec(workload=dp), axes=(axis,), dask="tcp://127.0.0.1:9"
    )
    with pytest.raises(RuntimeFault, match="no Dask scheduler") as exc:
        genie.run_sweep(spec.replace(out=str(tmp_path / "d")))
    assert "\n" not in str(exc.value) and not (tmp_path / "d").exists()
