"""``genie emulate`` on a real local cluster: collectives of a workload run on live agents."""

from __future__ import annotations

import json

import pytest

from genie.cli import main
from genie.controller.local import LocalCluster
from genie.store import RunStore
from genie.workload import save_workload
from genie.workload.generators import data_parallel, llm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    with LocalCluster.start(4, d) as cl:
        yield cl


def _bench_times(cluster, size, iters):
    from genie.api.benchmark import BenchSpec, bench

    cfg = BenchSpec(
        testbed=str(cluster.testbed_path),
        sizes=[size],
        iters=iters,
        warmup=3,
        store=None,
        progress=False,
    )
    rows = bench(cfg).rows
    return [x.time_s for x in rows[0].instances if not x.warmup]


def test_emulate_dp_workload_and_compare_with_bench(cluster, tmp_path, capsys):
    prefix = tmp_path / "dp"
    save_workload(data_parallel(4, layers=2, hidden=64, bucket_bytes=2**20), prefix)
    size = 2 * 12 * 64 * 64 * 2  # one bucket: the gradients of both layers, bf16
    before = _bench_times(cluster, size, 8)  # also warms the agents up
    store = tmp_path / "runs.sqlite"
    args = ["emulate", str(prefix), "--testbed", str(cluster.testbed_path)]
    args += ["--store", str(store), "--iterations", "8", "--warmup", "3", "--json"]
    args += ["--mode", "isolated"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    (coll,) = doc["collectives"]  # one gradient bucket: one distinct all-reduce
    assert coll["collective"] == "all_reduce" and coll["ranks"] == [0, 1, 2, 3]
    assert coll["size"] == size
    assert len(coll["measured_s"]) == 8 and coll["measured_p50_s"] > 0
    testbed, _analytical = doc["reports"]
    assert testbed["backend"] == f"testbed:{doc['run_id']}"
    row = testbed["collectives"][0]
    assert row["time"] == pytest.approx(coll["measured_p50_s"])
    assert testbed["iteration_s"] > coll["measured_p50_s"]  # compute before and after it
    with RunStore(store) as rs:
        info = rs.run(doc["run_id"])
        assert info.status == "ok"
        assert len(rs.instances(info.run_id)) == 8
        assert len(rs.instances(info.run_id, include_warmup=True)) == 11
    # the same collective through genie bench, before and after: loopback on a busy 2-core
    # machine varies several-fold between iterations, and the best of 16 runs can be a lucky
    # outlier, so each side's best is held against the other side's median: emulate measuring
    # something else (the bucket run 32 times at once, say) is off by far more than 3x both ways
    after = _bench_times(cluster, size, 8)
    bench = sorted(before + after)
    emu = sorted(coll["measured_s"])
    bench_med, emu_med = bench[len(bench) // 2], emu[len(emu) // 2]
    print(
        f"{size} B all-reduce: emulate best/median {emu[0]:.3g}/{emu_med:.3g} s, "
        f"bench best/median {bench[0]:.3g}/{bench_med:.3g} s"
    )
    assert emu[0] < 3.0 * bench_med
    assert bench[0] < 3.0 * emu_med


def test_emulate_pipeline_runs_send_recv_on_the_agents(cluster, tmp_path, capsys):
    prefix = tmp_path / "llm"
    save_workload(llm(4, tp=1, pp=2, layers=2, hidden=64, seq=16, micro_batches=2), prefix)
    args = ["emulate", str(prefix), "--testbed", str(cluster.testbed_path)]
    args += ["--store", str(tmp_path / "r.sqlite"), "--iterations", "2", "--warmup", "1"]
    assert main([*args, "--json", "--mode", "isolated"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = {c["collective"] for c in doc["collectives"]}
    assert "send_recv" in kinds
    assert all(len(c["measured_s"]) == 2 for c in doc["collectives"])
    testbed = doc["reports"][0]
    p2p = [c for c in testbed["collectives"] if c["collective"] == "send_recv"]
    assert p2p and all(c["time"] > 0 for c in p2p)


def test_emulate_refuses_a_testbed_without_agents(tmp_path, capsys):
    prefix = tmp_path / "dp"
    save_workload(data_parallel(2, layers=1, hidden=32), prefix)
    tb = tmp_path / "tb.toml"
    from genie.testbed import dumps_testbed, loopback_testbed

    tb.write_text(dumps_testbed(loopback_testbed(2, base_port=1)))
    args = ["emulate", str(prefix), "--testbed", str(tb), "--max-collectives", "0"]
    args += ["--store", str(tmp_path / "runs.sqlite")]  # the failed run is stored: not in cwd
    assert main([*args, "--mode", "isolated"]) == 2  # refused before any agent is asked
    assert "distinct collectives" in capsys.readouterr().err
    # overlapped runs any number of distinct collectives: it gets as far as the agents
    assert main([*args, "--json"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no hello from agents h0, h1" in err[0]


def test_overlapped_emulation_runs_a_pipeline_of_send_recv(cluster, tmp_path, capsys):
    prefix = tmp_path / "llm"
    save_workload(llm(4, tp=1, pp=2, layers=2, hidden=64, seq=16, micro_batches=2), prefix)
    args = ["emulate", str(prefix), "--testbed", str(cluster.testbed_path), "--json"]
    args += ["--store", str(tmp_path / "r.sqlite"), "--iterations", "2", "--warmup", "1"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "overlapped"
    p2p = [x for x in doc["instances"] if x["collective"] == "send_recv"]
    assert p2p and all(len(x["ranks"]) == 2 and x["measured_p50_s"] > 0 for x in p2p)
    for x in p2p:  # a send/recv starts on the wire no earlier than its sender reached it
        for run in x["rank_intervals_s"]:
            (_, s_send, _), (_, _, e_recv) = run
            assert e_recv >= s_send
    testbed = doc["reports"][0]
    assert testbed["iteration_s"] > 0
    by_iid = {x["iid"]: x["measured_p50_s"] for x in doc["instances"]}
    assert sorted(c["time"] for c in testbed["collectives"]) == pytest.approx(
        sorted(by_iid.values())
    )
