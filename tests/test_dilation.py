"""Time dilation: gaps x K on the wire, times / K in the report, and what does not scale; the
emulate and bench reports with the model error (nominal vs calibrated) on live local agents."""

from __future__ import annotations

import numpy as np
import pytest

import genie
from genie.calibration.dilation import (
    check_dilation,
    dilated_topology,
    kept_latency,
    kept_latency_topology,
)
from genie.calibration.model import Calibration, ClassParams
from genie.cli import main
from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.commands.emulate import render
from genie.controller.local import LocalCluster
from genie.errors import UsageError
from genie.live.plan import compile_oplists, dilate_plan
from genie.sim.compiled import GraphBuilder
from genie.store import RunStore
from genie.workload import save_workload
from genie.workload.generators.builder import finish

MS = 1e-3


def test_dilating_a_plan_multiplies_every_compute_gap_and_nothing_else():
    b = GraphBuilder(2)
    for r in range(2):
        c0 = b.compute(r, 1 * MS)
        a = b.collective(r, "all_reduce", 1000, deps=[c0])
        c1 = b.compute(r, 2 * MS, deps=[a])
        b.collective(r, "all_reduce", 1000, deps=[c1])
    plan = compile_oplists(b.build())
    slow = dilate_plan(plan, 4)
    for r in range(2):
        assert [g for _, _, g in slow.rank_ops[r]] == [4_000_000, 8_000_000]
        assert [(p, d) for p, d, _ in slow.rank_ops[r]] == [(p, d) for p, d, _ in plan.rank_ops[r]]
    assert slow.programs is plan.programs and slow.op_iid == plan.op_iid
    assert [g for _, _, g in plan.rank_ops[0]] == [1_000_000, 2_000_000]  # not in place


def test_the_dilated_model_is_the_lab_model_divided_by_k_and_latency_is_what_does_not_scale():
    lab = T.switch(4, 3.125e9, 5e-6).derive(step_overhead=20e-6, message_latency=2e-6)
    items = []
    for coll, algo in (("all_reduce", "ring"), ("all_to_all", "direct")):
        for s in (1024, 1 << 24):
            prog = build_program(coll, algo, 4, s, size_convention="nccl")
            t_lab = estimate(prog, lab).time_s
            assert estimate(prog, dilated_topology(lab, 4)).time_s == pytest.approx(t_lab / 4)
            items.append((coll, s, prog, lab.hosts))
    effects = kept_latency(items, lab, 4)
    small, big = effects[0], effects[1]
    # ring all-reduce: 6 steps, each 2 overheads + 2 hops + one message of fixed time, and S/4
    # on links 4x faster
    fixed, wire = 6 * (2 * 20e-6 + 2 * 5e-6 + 2e-6), 6 * (1 << 24) / 4 / (4 * 3.125e9)
    assert big.kept_s == pytest.approx(fixed + wire)
    assert big.dilated_s == pytest.approx(fixed / 4 + wire)
    # at 1 KiB the fixed times dominate: keeping them costs nearly x4; at 16 MiB about 11 %
    assert small.pct > 200 and 5 < big.pct < 15
    assert small.kept_s == pytest.approx(
        estimate(items[0][2], kept_latency_topology(lab, 4)).time_s
    )
    # a lab with no fixed times: dilation loses nothing
    bare = T.switch(4, 3.125e9, 0.0)
    (e,) = kept_latency([items[0]], bare, 4)
    assert e.pct == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(UsageError, match="--dilation"):
        check_dilation(0.5)


def test_bench_rows_are_divided_by_k_and_bandwidths_multiplied():
    from genie.api.benchmark import dilate
    from genie.controller.results import stats
    from genie.controller.sweep import SizeRow

    row = SizeRow(
        size=1 << 20,
        count=1 << 20,
        dtype="uint8",
        n_ranks=4,
        stats=stats([0.4, 0.8, 1.2]),
        algbw=(1 << 20) / 0.8,
        busbw=(1 << 20) / 0.8 * 1.5,
        modeled_s=0.6,
        calibrated_s=1.0,
    )
    d = dilate(row, 4)
    assert (d.stats.p50, d.stats.min, d.stats.max) == pytest.approx((0.2, 0.1, 0.3))
    assert d.algbw == pytest.approx(row.algbw * 4) and d.busbw == pytest.approx(row.busbw * 4)
    assert (d.modeled_s, d.calibrated_s) == pytest.approx((0.15, 0.25))
    assert row.stats.p50 == 0.8  # the stored row is left as measured


def _step(compute_s: float):
    """Two ranks: compute, an all-reduce, compute, an all-reduce."""
    from genie.workload.generators.builder import RankBuilder
    from genie.workload.model import CollectiveType

    builders = []
    for r in range(2):
        b = RankBuilder(r)
        c0 = b.compute("fwd", compute_s)
        a = b.collective("ar0", CollectiveType.ALL_REDUCE, 1 << 16, [c0])
        c1 = b.compute("bwd", compute_s, [a])
        b.collective("ar1", CollectiveType.ALL_REDUCE, 1 << 16, [c1])
        builders.append(b)
    return finish("step", builders)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    with LocalCluster.start(2, d) as cl:
        yield cl


def _plain(o: object) -> object:
    """A numpy number as a number, anything else unknown to JSON as a string (as --json)."""
    return o.item() if isinstance(o, np.generic) else str(o)


def _emulate(cluster, prefix, store, **changes) -> genie.Emulation:
    """Two measured iterations (no warm-up) of ``prefix`` on the local agents."""
    spec = genie.EmulateSpec(
        testbed=str(cluster.testbed_path),
        workload=str(prefix),
        store=str(store),
        iterations=2,
        warmup=0,
    )
    return genie.emulate(spec.replace(**changes))


def test_dilated_emulate_scales_the_gaps_and_reports_what_does_not_scale(cluster, tmp_path):
    prefix = tmp_path / "step"
    save_workload(_step(5 * MS), prefix)
    store = tmp_path / "runs.sqlite"
    doc = _emulate(cluster, prefix, store, dilation=4.0).doc()
    assert doc["dilation"] == 4
    # 10 ms of compute per iteration: on the wire it took 40 ms; reported / 4 it is >= 10 ms.
    # Had the gaps not been scaled, the reported time would be about 10 ms / 4.
    for run in doc["runs"]:
        assert run["makespan_s"] >= 0.95 * 10 * MS
    for inst in doc["instances"]:
        for first, _, _ in inst["intervals_s"]:
            assert first >= 0.95 * 5 * MS  # each all-reduce starts after 5 ms of compute
    (note,) = doc["notes"]
    assert note.startswith("dilation x4") and "do not get faster" in note and "iteration" in note
    with RunStore(store) as st:
        info = st.run(doc["run_id"])
        assert info.meta["dilation"] == 4
        # the store keeps what the wire did: the first all-reduce began after >= 20 ms
        starts = [x["start_ns"] for x in st.instances(info.run_id)]
        assert max(starts) - min(starts) >= 0.95 * 4 * 10 * MS * 1e9 / 2


def test_emulate_and_bench_show_nominal_and_calibrated_error(cluster, tmp_path, capsys):
    from genie.testbed import load_testbed

    store = tmp_path / "runs.sqlite"
    name = load_testbed(cluster.testbed_path).name
    cal = Calibration(
        testbed_name=name,
        step_overhead_s=100e-6,
        classes={"inter-host": ClassParams(latency_s=1e-6, bandwidth_fraction=0.5)},
        offered=True,  # as a fit that beat nominal on held-back sizes would be
    )
    import msgspec

    with RunStore(store) as st:
        cal_id = st.add_calibration(
            msgspec.to_builtins(cal), testbed_name=name, testbed_text="", runs=[]
        )
    prefix = tmp_path / "step"
    save_workload(_step(1 * MS), prefix)
    doc = _emulate(cluster, prefix, store, calibration="latest").doc()
    assert doc["calibration"] == cal_id  # --calibration latest: the newest offered one
    backends = [r["backend"] for r in doc["reports"]]
    assert backends[1:] == ["analytical", f"analytical (calibrated {cal_id})"]
    rows = doc["model_error"]
    assert rows[-1]["label"] == "iteration (replayed)"
    assert rows[-1]["measured_s"] == pytest.approx(doc["reports"][0]["iteration_s"])
    assert rows[-1]["calibrated_s"] == pytest.approx(doc["reports"][2]["iteration_s"])
    for r in rows:
        want = (r["calibrated_s"] - r["measured_s"]) / r["measured_s"] * 100
        assert r["calibrated_error_pct"] == pytest.approx(want)
    # the HTML report of the emulate JSON carries the same rows
    sim = tmp_path / "emulate.json"
    sim.write_bytes(msgspec.json.encode(doc, enc_hook=_plain))
    rep = genie.write_report(genie.ReportSpec(out=str(tmp_path / "rep"), sims=(str(sim),)))
    html = rep.html.read_text()
    assert f"model error of {sim}" in html and "iteration (replayed)" in html
    render(_emulate(cluster, prefix, store, calibration="none"), detail=True)  # emulate --detail
    out = capsys.readouterr().out
    assert "model error per collective" in out and "model error of the iteration" in out
    assert "MAPE over" in out
    assert "calibrated: nominal model: no calibration asked for (--calibration none)" in out
    assert f"calibrated {cal_id}" not in out
    bench = ["bench", "--testbed", str(cluster.testbed_path), "--store", str(store)]
    bench += ["--sizes", "4KiB,64KiB", "--iters", "3", "--warmup", "1"]
    assert main([*bench, "--dilation", "2", "--calibration", "latest"]) == 0
    out = capsys.readouterr().out
    assert "model error per size" in out and f"calibrated {cal_id}" in out
    assert "dilated x2" in out and "dilation x2: times are the lab's divided by 2" in out
    spec = genie.BenchSpec(
        testbed=str(cluster.testbed_path),
        store=str(store),
        sizes=(4096, 65536),
        iters=3,
        warmup=1,
        calibration="latest",
        progress=False,
    )
    rows = genie.bench(spec).to_dict()["rows"]
    assert all(r["calibrated_s"] and r["calibrated_error_pct"] is not None for r in rows)
