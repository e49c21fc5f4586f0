"""``genie simulate`` end to end: real ASTRA-sim samples, closed form, JSON, trace, errors.

What a simulation computes is checked through the API (``genie.simulate``); the CLI's own
tests here check its printed closed form and its one-line errors and exit codes.
"""

from __future__ import annotations

import json

import pytest

import genie
from genie.cli import main
from genie.errors import StoreError, UsageError
from genie.sim.adapter import ComputeModel, compile_workload
from genie.vocabulary import closed_form
from genie.workload.model import Attr, Node, NodeType, RankGraph, Workload

SAMPLES = "astra-sim/microbenchmarks"


def sample(et_samples, coll):
    return str(et_samples / SAMPLES / coll / "4npus_1MB" / coll)


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_astra_sim_samples_run(et_samples, coll):
    sim = genie.simulate(genie.SimulateSpec(workload=sample(et_samples, coll)))
    (rep,) = sim.reports
    assert rep.n_ranks == 4 and len(rep.collectives) == 1
    row = rep.collectives[0]
    assert row.collective == coll and row.size == 2**20 and row.ranks == 4
    assert rep.iteration_s == pytest.approx(row.time) and row.time > 0


SWITCH_50 = genie.Fabric(topology="switch", bandwidth="50GiB/s", latency="500ns")


def test_all_reduce_sample_beside_closed_form(et_samples):
    spec = genie.SimulateSpec(
        workload=sample(et_samples, "all_reduce"),
        fabric=SWITCH_50,
        model=genie.Model(collective_model="line-rate"),  # the closed form is line rate's
    )
    # ASTRA-sim latency is per link: a switch route is 2 hops, so alpha = 1000 ns per message
    expected = closed_form("all_reduce", None, 4, 2**20, 50 * 2**30, 1000e-9)
    row = genie.simulate(spec).to_dict()["reports"][0]["collectives"][0]
    assert row["time"] == pytest.approx(row["closed_form_s"], rel=1e-9)
    assert row["closed_form_s"] == pytest.approx(expected, rel=1e-12)
    # the built-in traffic model gives the same number
    builtin = spec.replace(model=genie.Model(pricer="builtin"))
    (row,) = genie.simulate(builtin).reports[0].collectives
    assert row.time == pytest.approx(expected, rel=1e-9)


def test_the_cli_prints_the_closed_form_beside_the_row(et_samples, capsys):
    args = ["simulate", sample(et_samples, "all_reduce")]
    args += ["--topology", "switch", "--bandwidth", "50GiB/s", "--latency", "500ns"]
    assert main([*args, "--collective-model", "line-rate"]) == 0
    out = capsys.readouterr().out
    expected = closed_form("all_reduce", None, 4, 2**20, 50 * 2**30, 1000e-9)
    assert f"closed form 2(n-1)(alpha + S/(nB)) = {expected * 1e6:.4f} us" in out
    assert "ratio 1.000000" in out


def test_samples_on_the_netns_star_testbed(et_samples, tmp_path):
    trace = tmp_path / "trace.json"
    fabric = genie.Fabric(testbed="testbed/netns-star.toml")
    sim = genie.simulate(
        genie.SimulateSpec(
            workload=sample(et_samples, "all_gather"),
            fabric=fabric,
            model=genie.Model(collective_model="line-rate"),  # TCP payload rate, no NCCL
        )
    )
    row = sim.reports[0].collectives[0]
    # 1 Gbit/s links less TCP/IPv4 headers (1448 payload bytes per 1514-byte veth frame): ring
    # all-gather of a 1 MiB shard moves 3 MiB through each NIC
    assert row.time == pytest.approx(3 * 2**20 / (125e6 * 1448 / 1514), rel=1e-3)
    assert sim.write_trace(trace) > 0
    ev = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in ev} == {0, 1, 2, 3}


def test_two_backends_side_by_side(et_samples, tmp_path):
    rows = [{"collective": "all_reduce", "n_ranks": 4, "size": 2**20, "time_s": 100e-6}]
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(rows))
    spec = genie.SimulateSpec(
        workload=sample(et_samples, "all_reduce"), network=("analytical", f"measured:{f}")
    )
    reps = genie.simulate(spec).reports
    assert [r.backend for r in reps] == ["analytical", f"measured:{f}"]
    assert reps[1].iteration_s == pytest.approx(100e-6)
    assert reps[0].iteration_s != pytest.approx(100e-6)


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--network", "magic"], "unknown network backend"),
        (["--bandwidth", "lots"], "not a"),
        (["--network", "measured:/nonexistent/run.json"], "cannot read measured times"),
    ],
)
def test_bad_input_is_one_line_exit_2(et_samples, capsys, extra, msg):
    assert main(["simulate", sample(et_samples, "all_reduce"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:") and msg in err[0]


def test_missing_workload_is_a_clear_error(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nothing")]) == 2
    assert "genie: error:" in capsys.readouterr().err


def _node(i, ntype, deps=(), dur_us=0, **attrs):
    kinds = {
        "comm_type": "int64_val",
        "comm_size": "int64_val",
        "pg_name": "string_val",
        "comm_src": "int32_val",
        "comm_dst": "int32_val",
        "comm_tag": "int32_val",
        "num_ops": "int64_val",
        "tensor_size": "uint64_val",
    }
    return Node(
        i,
        f"n{i}",
        ntype,
        data_deps=list(deps),
        duration_micros=dur_us,
        attrs=[Attr(k, kinds[k], v) for k, v in attrs.items()],
    )


def test_adapter_compiles_workload_objects_with_groups_p2p_and_roofline():
    ranks = []
    for r in range(2):
        nodes = [
            _node(10, NodeType.COMP_NODE, dur_us=0, num_ops=2 * 10**12),
            _node(11, NodeType.COMM_COLL_NODE, [10], comm_type=0, comm_size=4096, pg_name="tp"),
            _node(
                12,
                NodeType.COMM_SEND_NODE if r == 0 else NodeType.COMM_RECV_NODE,
                [11],
                comm_size=64,
                comm_tag=3,
                **({"comm_dst": 1} if r == 0 else {"comm_src": 0}),
            ),
            _node(13, NodeType.COMP_NODE, [12, 999], dur_us=5),  # 999: missing id, dropped
        ]
        ranks.append(RankGraph(rank=r, nodes=nodes))
    wl = Workload(ranks=ranks, groups={"tp": (0, 1)})
    cw = compile_workload(wl, ComputeModel(peak_flops=1e15, efficiency=0.5))
    r0 = cw.ranks[0]
    assert r0.duration.tolist() == [pytest.approx(4e-3), 0.0, 0.0, pytest.approx(5e-6)]
    assert r0.dep_idx.tolist() == [0, 1, 2]
    assert cw.group_ranks[cw.group_names.index("tp")] == (0, 1)
    assert len(cw.instances) == 2  # the all-reduce and the send/recv pair
    assert cw.instances.src.tolist()[1] == 0 and cw.instances.dst.tolist()[1] == 1


def test_adapter_rejects_collective_without_type():
    nodes = [_node(1, NodeType.COMM_COLL_NODE, comm_size=8)]
    wl = Workload(ranks=[RankGraph(rank=0, nodes=nodes)])
    from genie.errors import ValidationError

    with pytest.raises(ValidationError, match="no comm_type"):
        compile_workload(wl)


def test_measured_backend_reads_a_bench_run_from_the_store(et_samples, tmp_path):
    from types import SimpleNamespace

    from genie.collectives import build_program
    from genie.store import RunStore

    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        run = store.start_run("genie bench (test)")
        spec = build_program("all_reduce", "ring", 4, 2**20).spec
        times = [(0, True, 900e-6), (1, False, 200e-6), (2, False, 300e-6), (3, False, 250e-6)]
        insts = [
            SimpleNamespace(
                iteration=i,
                warmup=w,
                start_ns=0,
                end_ns=int(t * 1e9),
                time_s=t,
                step0_spread_ns=-1,
                ranks=[0, 1, 2, 3],
                rank_start_ns=[0] * 4,
                rank_end_ns=[int(t * 1e9)] * 4,
            )
            for i, w, t in times
        ]
        store.add_instances(run, spec, insts)
        store.finish_run(run)
    spec = genie.SimulateSpec(
        workload=sample(et_samples, "all_reduce"), network=(f"measured:{run}",), store=str(path)
    )
    rep = genie.simulate(spec).reports[0]
    # median of the non-warm-up times (200, 250, 300 us); the warm-up (900 us) left out
    assert rep.iteration_s == pytest.approx(250e-6)
    assert any("0 EXTRAPOLATED" in n for n in rep.notes)
    with pytest.raises(StoreError, match="no run store at"):
        genie.simulate(spec.replace(store=str(tmp_path / "none.sqlite")))


def test_deadlocking_trace_files_are_reported_by_the_cli(tmp_path, capsys):
    from genie.workload import save_workload

    def coll(i, deps=()):
        attrs = [Attr("comm_type", "int64_val", 0), Attr("comm_size", "int64_val", 1024)]
        return Node(i, f"ar{i}", NodeType.COMM_COLL_NODE, data_deps=list(deps), attrs=attrs)

    r0 = RankGraph(rank=0, nodes=[coll(1), coll(2, [1])])
    r1 = RankGraph(rank=1, nodes=[coll(1)])
    save_workload(Workload(ranks=[r0, r1]), tmp_path / "dead")
    assert main(["simulate", str(tmp_path / "dead")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "rank 0: node ar2 (all_reduce #1 of group 'world') waits for ranks [1]" in err[0]


def test_roofline_compute_from_num_ops(tmp_path):
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    wl = data_parallel(2, layers=3, hidden=256)
    save_workload(wl, tmp_path / "dp")
    flops = sum(n.num_ops or 0 for n in wl.ranks[0].nodes)
    assert flops > 0
    roofline = genie.Compute(mode="roofline", peak_flops=1e12, efficiency=0.5)
    spec = genie.SimulateSpec(workload=str(tmp_path / "dp"), compute=roofline)
    rep = genie.simulate(spec).reports[0]
    assert rep.ranks[0].compute == pytest.approx(flops / 0.5e12, rel=1e-9)
    with pytest.raises(UsageError, match="needs --peak-flops"):
        genie.simulate(spec.replace(compute=genie.Compute(mode="roofline")))


def test_adapter_drops_self_and_missing_deps_when_ids_are_positions():
    nodes = [
        _node(0, NodeType.COMP_NODE, [0], dur_us=1),  # self dep
        _node(1, NodeType.COMP_NODE, [0, 7], dur_us=1),  # 7: no such node
        _node(2, NodeType.COMP_NODE, [1, 0], dur_us=1),
    ]
    cw = compile_workload(Workload(ranks=[RankGraph(rank=0, nodes=nodes)]))
    r0 = cw.ranks[0]
    assert r0.dep_ptr.tolist() == [0, 0, 1, 3]
    assert r0.dep_idx.tolist() == [0, 1, 0]
