"""Calibration: the fit recovers known parameters, the calibrated model prices what it says,
genie.calibrate fits and stores from a store's runs (MAPE on held-back sizes) and refuses what it
cannot fit, genie.compare_runs puts two runs side by side, the CLI prints both, errors and
extrapolations are explained."""

from __future__ import annotations

import json

import numpy as np
import pytest

import genie
from genie.calibration.accuracy import ErrorRow, error_pct, error_strip, mape, summary
from genie.calibration.fit import Point, assign_holdout, fit
from genie.calibration.model import (
    INTRA,
    NIC,
    UPLINK,
    Calibration,
    ClassParams,
    at_params,
    calibrate_topology,
    nominal_params,
)
from genie.cli import main
from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.errors import CalibrationError, StoreError

SIZES = [1 << k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB


def _points(topo, truth, colls, ns, rph=1, noise=0.0, seed=1):
    """Synthetic measurements: the cost model at ``truth``, times (1 + noise x N(0, 1))."""
    rng = np.random.default_rng(seed)
    true_topo = at_params(topo, truth)
    pts = []
    for c, a in colls:
        for n in ns:
            for s in SIZES:
                prog = build_program(c, a, n, s, size_convention="nccl", ranks_per_host=rph)
                hosts = [topo.hosts[r // rph] for r in range(n)]
                t = estimate(prog, true_topo, hosts).time_s
                t *= 1 + noise * rng.standard_normal()
                pts.append(Point(prog, hosts, topo, t, (c, a, n), s, f"{c} n={n}"))
    return pts


def _within(got: float, want: float, rel: float = 0.02) -> bool:
    return abs(got - want) <= rel * abs(want)


def test_fit_recovers_overhead_latency_and_bandwidth_within_2_percent_despite_noise():
    topo = T.switch(8, 1.25e9, 1e-6)  # 10 Gbit/s, 1 us per hop as declared
    truth = {
        **nominal_params(topo),
        "step_overhead_s": 50e-6,
        "nic.latency_s": 20e-6,
        "nic.inv_fraction": 1 / 0.8,
    }
    pts = _points(
        topo, truth, [("all_reduce", "ring"), ("all_to_all", "direct")], [4, 8], noise=0.003
    )
    rule = assign_holdout(pts, "alternate")
    cal = fit(pts, holdout=rule).calibration
    nic = cal.classes[NIC]
    assert _within(cal.step_overhead_s, 50e-6)
    assert _within(nic.latency_s, 20e-6)
    assert _within(nic.bandwidth_fraction, 0.8)
    # alpha (per message between hosts: 2 hops) and beta (the rate a message gets)
    assert _within(2 * nic.latency_s + nic.message_s, 40e-6)
    assert _within(1.25e9 * nic.bandwidth_fraction, 1.0e9)
    # the standard errors are small and honest: the truth lies within 4 of them
    assert abs(cal.step_overhead_s - 50e-6) < 4 * cal.step_overhead_err_s
    assert abs(nic.bandwidth_fraction - 0.8) < 4 * nic.bandwidth_fraction_err
    assert cal.mape["held_calibrated"] < 1.0 < 50 < cal.mape["held_nominal"]
    assert cal.points_held == len(pts) // 2


def test_fit_separates_every_class_where_hops_and_hosts_differ():
    # 2 leaves of 4 hosts, uplinks 4:1 oversubscribed: cross-leaf flows are held by the uplinks
    ls = T.leaf_spine(2, 2, 4, 1.25e9, 1e-6, 4.0, intra_bandwidth=10e9, intra_latency=1e-6)
    truth = {
        **nominal_params(ls),
        "step_overhead_s": 50e-6,
        "nic.latency_s": 10e-6,
        "nic.message_s": 30e-6,
        "nic.inv_fraction": 1 / 0.8,
        "uplink.latency_s": 10e-6,
        "uplink.inv_fraction": 1 / 0.6,
        "intra.latency_s": 5e-6,
        "intra.inv_fraction": 1 / 0.5,
    }
    colls = [("all_reduce", "ring"), ("all_to_all", "direct"), ("all_gather", "ring")]
    pts = _points(ls, truth, colls, [8, 16], rph=2)
    assign_holdout(pts, "largest")
    cal = fit(pts).calibration
    nic, up, intra = cal.classes[NIC], cal.classes[UPLINK], cal.classes[INTRA]
    assert _within(cal.step_overhead_s, 50e-6)
    # every message crosses two host NIC links: its own cost is one with theirs
    (note,) = cal.notes
    assert note.startswith("per-message cost: not separable from the latency per hop")
    assert nic.message_s == 0 and _within(nic.latency_s, 10e-6 + 30e-6 / 2)
    assert _within(nic.bandwidth_fraction, 0.8)
    assert _within(up.latency_s, 10e-6) and _within(up.bandwidth_fraction, 0.6)
    assert _within(intra.latency_s, 5e-6) and _within(intra.bandwidth_fraction, 0.5)
    assert cal.mape["held_calibrated"] < 1e-6


def test_what_the_data_cannot_separate_is_folded_and_said():
    topo = T.switch(8, 1.25e9, 1e-6)
    truth = {
        **nominal_params(topo),
        "step_overhead_s": 50e-6,
        "nic.latency_s": 20e-6,
        "nic.inv_fraction": 1.25,
    }
    pts = _points(topo, truth, [("all_reduce", "ring")], [4, 8])
    cal = fit(pts).calibration
    text = " ".join(cal.notes)
    assert "per-step overhead: not separable" in text
    assert "per-message cost: not separable" in text
    assert "intra-host parameters: not exercised" in text
    assert cal.step_overhead_s == 0 and cal.step_overhead_err_s is None
    # a ring step costs 2 overheads and 2 hops, so each hop absorbs one overhead
    assert _within(cal.classes[NIC].latency_s, 70e-6)
    assert cal.mape["fit_calibrated"] < 1e-6


def test_holdout_rules_mark_the_points_they_say():
    topo = T.switch(4, 1e9, 0.0)
    pts = _points(topo, nominal_params(topo), [("all_reduce", "ring")], [4])
    assert "every other size" in assign_holdout(pts, "alternate")
    assert [p.held for p in pts] == [False, True] * 4
    assign_holdout(pts, "largest")
    assert [p.held for p in pts] == [False] * 6 + [True] * 2
    assign_holdout(pts, "none")
    assert not any(p.held for p in pts)
    with pytest.raises(CalibrationError, match="unknown hold-out"):
        assign_holdout(pts, "random")
    with pytest.raises(CalibrationError, match="fit point"):
        fit(pts[:1])


def test_a_calibrated_topology_prices_the_closed_form_with_its_parameters():
    o, lat, frac, msg, n, s = 40e-6, 3e-6, 0.5, 7e-6, 4, 1 << 20
    cal = Calibration(
        cal_id="c-test",
        step_overhead_s=o,
        classes={NIC: ClassParams(latency_s=lat, bandwidth_fraction=frac, message_s=msg)},
    )
    topo = calibrate_topology(T.switch(n, 1e9, 1e-6), cal)
    prog = build_program("all_reduce", "ring", n, s, size_convention="nccl")
    # each of the 2(n-1) ring steps: a SEND and a REDUCE/COPY overhead, 2 hops, one message
    want = 2 * (n - 1) * (2 * o + 2 * lat + msg + s / n / (frac * 1e9))
    assert estimate(prog, topo).time_s == pytest.approx(want, rel=1e-9)
    assert estimate(prog, topo, symmetric=False).time_s == pytest.approx(want, rel=1e-9)
    assert "calibrated c-test" in topo.describe()


def test_step_overhead_is_spent_one_step_after_another_on_each_rank():
    o = 50e-6
    topo = T.switch(4, 1e12, 0.0).derive(step_overhead=o)
    prog = build_program("all_to_all", "direct", 4, 4, size_convention="nccl")
    # 3 SENDs then 3 COPYs, each waiting for the rank's software: 6 overheads in a row
    assert estimate(prog, topo).time_s == pytest.approx(6 * o, rel=1e-6)


def test_error_rows_mape_and_the_text_strip():
    assert error_pct(1.2, 1.0) == pytest.approx(20.0)
    assert error_pct(None, 1.0) is None and error_pct(1.0, 0.0) is None
    assert mape([10.0, -30.0, None]) == pytest.approx(20.0) and mape([None]) is None
    row = ErrorRow("x", 1024, 1.0, 1.5, 0.9)
    assert row.nominal_err == pytest.approx(50.0) and row.calibrated_err == pytest.approx(-10.0)
    assert summary([row]) == {
        "nominal_mape_pct": pytest.approx(50.0),
        "calibrated_mape_pct": pytest.approx(10.0),
    }
    strip = error_strip(50.0, -10.0)
    assert strip.index("c") < strip.index("|") < strip.index("n")
    assert error_strip(0.0, 0.0).strip() == "··········*··········"
    assert error_strip(300.0, None).endswith(">")


# ---- the CLI on a store of synthetic bench runs --------------------------------------------

TESTBED = """
[testbed]
name = "calib-test"
kind = "static"

[topology]
shape = "star"
rate = "1gbit"

[[hosts]]
name = "h0"
control = "127.0.0.1:7700"
data_addr = "127.0.0.1"

[[hosts]]
name = "h1"
control = "127.0.0.1:7701"
data_addr = "127.0.0.1"

[[hosts]]
name = "h2"
control = "127.0.0.1:7702"
data_addr = "127.0.0.1"

[[hosts]]
name = "h3"
control = "127.0.0.1:7703"
data_addr = "127.0.0.1"
"""

TRUTH = {"step_overhead_s": 80e-6, "nic.latency_s": 15e-6, "nic.inv_fraction": 1 / 0.7}


def _store_run(store, collective: str, algorithm: str, meta=None, noise: float = 0.01) -> str:
    """A bench run of ``collective`` over SIZES whose times come from TRUTH (seeded noise)."""
    from genie.controller.results import Instance
    from genie.testbed.loader import loads_testbed

    topo = loads_testbed(TESTBED).to_topology()
    true_topo = at_params(topo, {**nominal_params(topo), **TRUTH})
    rng = np.random.default_rng(len(collective))
    hosts = ["h0", "h1", "h2", "h3"]
    run = store.start_run(
        f"genie bench --collective {collective}",
        testbed_name="calib-test",
        testbed_text=TESTBED,
        meta={"placement": hosts, **(meta or {})},
    )
    for s in SIZES:
        prog = build_program(collective, algorithm, 4, s, size_convention="nccl")
        t0 = estimate(prog, true_topo, hosts).time_s
        insts = []
        for i in range(5):
            t = t0 * (1 + noise * rng.standard_normal())
            ns = int(t * 1e9)
            insts.append(
                Instance(
                    iteration=i,
                    warmup=i == 0,
                    start_ns=0,
                    end_ns=ns,
                    time_s=t if i else 10 * t,  # a slow warm-up, which must not count
                    rank_start_ns=[0] * 4,
                    rank_end_ns=[ns] * 4,
                    ranks=[0, 1, 2, 3],
                )
            )
        store.add_instances(run, prog.spec, insts)
    store.finish_run(run)
    return run


@pytest.fixture
def bench_store(tmp_path):
    from genie.store import RunStore

    path = tmp_path / "runs.sqlite"
    with RunStore(path) as st:
        ids = [_store_run(st, "all_reduce", "ring"), _store_run(st, "all_to_all", "direct")]
    return path, ids


def test_a_calibration_is_fit_judged_on_held_back_sizes_and_stored(bench_store):
    from genie.store import RunStore

    path, ids = bench_store
    cal = genie.calibrate(genie.CalibrateSpec(runs=tuple(ids), store=str(path)))
    assert cal.cal_id and cal.testbed_name == "calib-test" and cal.runs == ids
    assert "every other size" in cal.holdout
    m = cal.mape
    assert m["held_calibrated"] < 3.0 < 30.0 < m["held_nominal"]
    assert abs(cal.step_overhead_s - 80e-6) < 0.05 * 80e-6
    assert abs(cal.classes[NIC].bandwidth_fraction - 0.7) < 0.02 * 0.7
    # the held-back MAPE is the mean error over exactly the points the fit never saw
    held = [r for r in cal.rows if r["held"]]
    assert len(held) == cal.points_held == len(cal.rows) - cal.points_fit > 0
    errs = [abs(r["calibrated_s"] - r["measured_s"]) / r["measured_s"] * 100 for r in held]
    assert m["held_calibrated"] == pytest.approx(sum(errs) / len(errs))
    with RunStore(path) as st:
        (doc,) = st.calibrations("calib-test")
    assert doc["cal_id"] == cal.cal_id and doc["mape"] == pytest.approx(m)
    # unsaved: the same fit, nothing stored
    again = genie.calibrate(genie.CalibrateSpec(runs=tuple(ids), store=str(path), save=False))
    assert again.cal_id == "" and again.mape == pytest.approx(m)
    with RunStore(path) as st:
        assert len(st.calibrations()) == 1


def test_the_holdout_rule_decides_what_is_judged(bench_store):
    path, ids = bench_store
    spec = genie.CalibrateSpec(runs=(ids[0],), store=str(path), save=False)
    largest = genie.calibrate(spec.replace(holdout="largest"))
    sizes = sorted({r["size"] for r in largest.rows if r["held"]})
    assert sizes == SIZES[-2:]  # the largest quarter of 8 sizes
    none = genie.calibrate(spec.replace(holdout="none"))
    assert none.points_held == 0 and none.mape["held_calibrated"] is None
    with pytest.raises(genie.errors.UsageError, match="CalibrateSpec"):
        genie.CalibrateSpec.from_dict({"runs": ["x"], "holdout": "random"})


def test_calibrate_prints_mape_before_and_after_and_its_json_is_the_calibration(
    bench_store, capsys
):
    from genie.store import RunStore

    path, ids = bench_store
    assert main(["calibrate", *ids, "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MAPE" in out and "held back" in out and "every other size" in out
    assert "step overhead" in out and "of the payload rate" in out
    # per link class: the star's host NICs fitted, its (absent) uplinks nominal, and said
    assert "host NIC = a link with a host at one end, uplink = switch to switch" in out
    assert "\n  host NIC: " in out and "\n  uplink: nominal (not fitted)" in out
    assert "note: uplink parameters: not exercised by these runs" in out
    assert "offered: held-back" in out
    with RunStore(path) as st:
        (stored,) = st.calibrations("calib-test")
    assert f"stored as calibration {stored['cal_id']} in" in out
    assert main(["calibrate", *ids, "--store", str(path), "--json", "--no-save"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert NIC in doc["classes"] and "inter-host" not in doc["classes"]
    spec = genie.CalibrateSpec(runs=tuple(ids), store=str(path), save=False)
    assert doc == json.loads(json.dumps(genie.calibrate(spec).to_dict()))


def test_simulate_and_bench_price_with_a_stored_calibration(bench_store, tmp_path):
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    path, ids = bench_store
    cal_id = genie.calibrate(genie.CalibrateSpec(runs=tuple(ids), store=str(path))).cal_id
    tb = tmp_path / "tb.toml"
    tb.write_text(TESTBED)
    save_workload(data_parallel(4, layers=1, hidden=256, seq=64, batch=2), tmp_path / "dp")
    spec = genie.SimulateSpec(workload=str(tmp_path / "dp"), fabric=genie.Fabric(testbed=str(tb)))

    def priced_with(calibration: str) -> genie.SimulateSpec:
        fabric = spec.fabric.replace(calibration=calibration)
        return spec.replace(fabric=fabric, store=str(path))

    nominal = genie.simulate(spec)
    calibrated = genie.simulate(priced_with(cal_id[:12]))
    assert f"calibrated {cal_id}" in calibrated.network
    assert "calibrated" not in nominal.network
    # overhead and a 70 % rate: the calibrated iteration is slower than the nominal one
    assert calibrated.reports[0].iteration_s > nominal.reports[0].iteration_s
    assert genie.simulate(priced_with("latest")).network == calibrated.network
    with pytest.raises(StoreError, match=r"^no calibration 'cnope'") as exc:
        genie.simulate(priced_with("cnope"))
    assert "\n" not in str(exc.value)


def test_calibrate_refuses_what_it_cannot_fit(bench_store, capsys, tmp_path):
    from genie.store import RunStore

    path, ids = bench_store
    with RunStore(path) as st:
        over = _store_run(st, "all_reduce", "ring", meta={"mode": "overlapped"})

    def spec(*runs: str, store=path) -> genie.CalibrateSpec:
        return genie.CalibrateSpec(runs=runs, store=str(store))

    with pytest.raises(CalibrationError, match="overlapped emulate run"):
        genie.calibrate(spec(over))
    with pytest.raises(StoreError, match="no run 'rnope'"):
        genie.calibrate(spec("rnope"))
    with pytest.raises(StoreError, match="no run store"):
        genie.calibrate(spec(ids[0], store=tmp_path / "none.sqlite"))
    with pytest.raises(genie.errors.UsageError, match="no runs"):
        genie.calibrate(spec())
    with RunStore(path) as st:
        assert st.calibrations() == []  # nothing stored by a refusal
    # the command line: one line, exit 2
    assert main(["calibrate", over, "--store", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "overlapped emulate run" in err[0]
    assert main(["calibrate", ids[0], "--store", str(path), "--out", "x"]) == 2
    assert "only for genie calibrate compute" in capsys.readouterr().err


def test_runs_compare_shows_two_runs_side_by_side(bench_store, capsys):
    from genie.store import RunStore

    path, ids = bench_store
    with RunStore(path) as st:
        again = _store_run(st, "all_reduce", "ring", noise=0.0)
    cmp = genie.compare_runs(ids[0], again[:-2], store=path)
    assert (cmp.a.run_id, cmp.b.run_id) == (ids[0], again)
    assert [r.size for r in cmp.rows] == SIZES
    # the same truth with 1 % noise vs none: within a few percent at every size
    assert all(r.b_vs_a_pct is not None and abs(r.b_vs_a_pct) < 5 for r in cmp.rows)
    assert all(r.b_over_a == pytest.approx(r.b_p50_s / r.a_p50_s) for r in cmp.rows)
    with pytest.raises(StoreError, match="no collective in common"):
        genie.compare_runs(ids[0], ids[1], store=path)
    # the command line: --json is the comparison's to_dict, the text a table
    assert main(["runs", "compare", ids[0], again, "--store", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(cmp.to_dict()))
    assert main(["runs", "compare", ids[0], again, "--store", str(path)]) == 0
    assert "B/A" in capsys.readouterr().out
    assert main(["runs", "compare", ids[0], ids[1], "--store", str(path)]) == 2
    assert "no collective in common" in capsys.readouterr().err


def test_the_compare_rows_keep_a_size_only_one_run_measured():
    from genie.api.runs import compare_rows

    a = {("all_reduce", "ring", 4, 1024): [1.0, 3.0, 2.0], ("all_reduce", "ring", 4, 2048): [4.0]}
    b = {("all_reduce", "ring", 4, 1024): [3.0], ("all_gather", "ring", 4, 1024): [1.0]}
    (one, two) = compare_rows(a, b)  # all_gather: measured by B only, not compared
    assert (one.a_p50_s, one.b_p50_s, one.b_over_a) == (2.0, 3.0, 1.5)
    assert one.b_vs_a_pct == pytest.approx(50.0)
    assert (two.size, two.a_p50_s, two.b_p50_s, two.b_over_a) == (2048, 4.0, None, None)


def test_measured_backend_says_why_it_extrapolated():
    from genie.sim.measured import MeasuredBackend, MeasuredTable
    from genie.sim.network import Transfer
    from genie.vocabulary import chakra_type

    table = MeasuredTable(
        [("all_reduce", 4, 1024, 20e-6), ("all_reduce", 4, 16384, 80e-6)], source="run X"
    )
    be = MeasuredBackend(table, model=lambda tr: tr.size * 1e-9)
    ar = chakra_type("all_reduce")
    be.price(Transfer(0, ar, 32768, (0, 1, 2, 3), 0))
    be.price(Transfer(1, ar, 4096, tuple(range(8)), 0))
    be.price(Transfer(2, ar, 4096, tuple(range(8)), 0))
    text = be.summary()
    assert "3 EXTRAPOLATED" in text
    assert "2 x all_reduce on 8 ranks: never measured in run X (it has all_reduce on 4 ranks)" in (
        text
    )
    assert "above the largest measured size 16.0 KiB" in text
    # 80 us measured vs 16.4 us modelled at 16 KiB: the model is scaled by 4.88
    assert "x 4.88" in text


def test_the_html_report_shows_nominal_and_calibrated_error(bench_store, tmp_path):
    pytest.importorskip("matplotlib", reason="the report needs matplotlib (extra 'report')")
    path, ids = bench_store
    cal_id = genie.calibrate(genie.CalibrateSpec(runs=tuple(ids), store=str(path))).cal_id
    spec = genie.ReportSpec(runs=(ids[1],), store=str(path), out=str(tmp_path / "rep"))
    doc = genie.write_report(spec).to_dict()
    (fig,) = [f for f in doc["figures"] if f["kind"] == "model_error"]
    nominal, calibrated = fig["series"]
    assert calibrated["label"].endswith(f"calibrated {cal_id}")
    assert mape(calibrated["y"]) < 3.0 < 30.0 < mape(nominal["y"])
    html = (tmp_path / "rep" / "report.html").read_text()
    assert f"calibrated = calibrated {cal_id}" in html and "MAPE: nominal" in html
