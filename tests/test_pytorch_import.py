"""``genie workload import pytorch``: PyTorch host execution traces (and Kineto traces) in one
step, on traces torch wrote (tests/data/pytorch_et, made by its make_traces.py) and on an
NCCL-style trace built here in PyTorch's layout."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from genie.api.workload import import_pytorch
from genie.cli import main
from genie.controller.local import LocalCluster
from genie.errors import WorkloadError
from genie.workload import NodeType, load_workload
from genie.workload.stream_rules import stream_edges, summarize_edges

DATA = Path(__file__).parent / "data" / "pytorch_et"
HOST0 = str(DATA / "host_et.0.json.gz")
KINETO0 = str(DATA / "kineto.0.json.gz")
# the MLP's gradients: Linear(64, 128) weight and bias, Linear(128, 64) weight and bias (fp32)
GRADS = [32768, 512, 32768, 256]


def _colls(rg) -> list:
    return [n for n in rg.nodes if n.type == NodeType.COMM_COLL_NODE]


def test_torch_host_trace_alone_gives_the_job_collectives_groups_and_stream_edges():
    got = import_pytorch([HOST0])
    wl = got.workload
    assert wl.n_ranks == 4 and got.replicated_from == 0  # the default group has 4 ranks
    for rg in wl.ranks:
        colls = _colls(rg)
        by_type = Counter(n.comm_type for n in colls)
        assert by_type == {0: 4, 2: 1, 5: 1}  # 4 all-reduces, 1 all-gather, 1 broadcast
        assert [n.comm_size for n in colls if n.comm_type == 0] == GRADS
        ag = next(n for n in colls if n.comm_type == 2)
        assert ag.comm_size == 4000  # the rank's shard: 1000 fp32
        assert wl.groups[ag.pg_name] == (rg.rank % 2, rg.rank % 2 + 2)  # the pair it ran in
        bc = next(n for n in colls if n.comm_type == 5)
        assert wl.groups[bc.pg_name or "0"] == (0, 1, 2, 3)
        assert all(not n.is_cpu_op for n in colls)
    edges = summarize_edges(wl.ranks)
    assert edges["streams"] == ["inferred"]
    assert edges["added"]["comm_after_compute"] == 4 * 6  # each collective after its compute
    assert edges["added"]["stream_order"] > 0
    assert any("roofline of h100" in n for n in got.notes)
    # GPU kernels priced from their shapes: the matrix products carry their GEMM
    mm = [n for n in wl.ranks[0].nodes if n.attr("gemm_m") is not None]
    assert mm and all(n.duration_micros >= 1 and not n.is_cpu_op for n in mm)


def test_kineto_trace_gives_cpu_times_and_launch_order():
    got = import_pytorch([HOST0], [KINETO0])
    rg = got.workload.ranks[0]
    cpu = [n for n in rg.nodes if n.is_cpu_op]
    assert sum(n.duration_micros for n in cpu) > 1000  # Kineto timed the host operators
    assert any("Kineto trace" in n for n in got.notes)
    # each CPU op of a thread waits for the one called before it
    chained = [n for n in cpu if n.data_deps]
    assert len(chained) >= len(cpu) - 4
    # without Kineto the same ops take no time
    bare = import_pytorch([HOST0]).workload.ranks[0]
    assert sum(n.duration_micros for n in bare.nodes if n.is_cpu_op) == 0


def test_cli_writes_ets_that_simulate_reads(tmp_path, capsys):
    out = tmp_path / "mlp"
    assert (
        main(["workload", "import", "pytorch", HOST0, "--kineto", KINETO0, "--out", str(out)]) == 0
    )
    cap = capsys.readouterr()
    assert "wrote 4 rank files" in cap.out
    assert "GPU durations from the roofline" in cap.err
    wl = load_workload(out)
    assert wl.n_ranks == 4 and sum(len(_colls(r)) for r in wl.ranks) == 24
    assert main(["simulate", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (report,) = doc["reports"]
    assert report["n_ranks"] == 4 and report["iteration_s"] > 0
    assert doc["trace"]["stream_rules"]["added"]["comm_after_compute"] == 24


def test_imported_ets_run_on_agents(tmp_path, capsys):
    """The imported job is a workload genie emulate runs on real agents (loopback), every
    collective measured on the wire."""
    out = tmp_path / "mlp"
    assert main(["workload", "import", "pytorch", HOST0, "--out", str(out)]) == 0
    capsys.readouterr()
    with LocalCluster.start(4, tmp_path / "cl") as cl:
        args = ["emulate", str(out), "--testbed", str(cl.testbed_path), "--json"]
        args += ["--store", str(tmp_path / "r.sqlite"), "--iterations", "1", "--warmup", "0"]
        assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["instances"]
    assert len(rows) >= 6 and all(r["measured_p50_s"] > 0 for r in rows)
    assert {r["collective"] for r in rows} >= {"all_reduce", "all_gather", "broadcast"}


def test_two_of_four_ranks_is_refused_in_one_line(tmp_path):
    with pytest.raises(WorkloadError, match="give all 4, or one to replicate"):
        import_pytorch([HOST0, str(DATA / "host_et.1.json.gz")])


# ------------------------------------------------------------------ an NCCL-style trace


def _t(tid: int, n: int, dev: str = "cuda:0") -> list:
    return [tid, tid, 0, n, 2, dev]  # bf16


def _op(i, name, parent, rf, ins=(), types=(), outs=(), otypes=()):
    return {
        "id": i,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {"values": list(ins), "shapes": [[] for _ in ins], "types": list(types)},
        "outputs": {"values": list(outs), "shapes": [[] for _ in outs], "types": list(otypes)},
        "attrs": [
            {"name": "rf_id", "type": "uint64", "value": rf},
            {"name": "tid", "type": "uint64", "value": 1},
            {"name": "future_field", "type": "string", "value": "x"},
        ],
        "new_node_field": 1,
    }


def _nccl_trace(tmp: Path) -> tuple[str, str]:
    """A host + Kineto pair of rank 1 of 2, laid out as PyTorch 2.4+ with NCCL writes them."""
    groups = [
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 2},
        {"pg_name": "1", "pg_desc": "dp", "ranks": [0, 1], "group_size": 2},
    ]
    big = _t(10, 8 * 2**20)  # 16 MiB of bf16
    nodes = [
        _op(1, "[pytorch|profiler|execution_trace|process]", 0, 0),
        _op(2, "[pytorch|profiler|execution_trace|thread]", 1, 0),
        _op(3, "## process_group:init ##", 2, 1, [json.dumps(groups)], ["String"]),
        _op(4, "aten::mm", 2, 2, [_t(1, 4096), _t(2, 4096)], ["Tensor(c10::BFloat16)"] * 2,
            [_t(3, 4096)], ["Tensor(c10::BFloat16)"]),
        _op(5, "c10d::allreduce_", 2, 3, [[big], "<Object>"], ["GenericList[Tensor]", "Object"],
            [[big]], ["GenericList[Tensor]"]),
        _op(6, "record_param_comms", 5, 4,
            [[big], 7, ["1", "dp"], 1, "allreduce", [], [], 0, 1, 2, True],
            ["GenericList[Tensor]", "Int", "Tuple[String,String]", "Int", "String",
             "GenericList[]", "GenericList[]", "Int", "Int", "Int", "Bool"]),
        _op(7, "nccl:all_reduce", 6, 5, [big], ["Tensor(c10::BFloat16)"]),
        _op(8, "record_param_comms", 2, 6, [7, ["1", "dp"], 1, "wait"],
            ["Int", "Tuple[String,String]", "Int", "String"]),
        _op(9, "aten::add_", 2, 7, [_t(3, 4096), _t(3, 4096)], ["Tensor(c10::BFloat16)"] * 2,
            [_t(3, 4096)], ["Tensor(c10::BFloat16)"]),
    ]  # fmt: skip
    host = {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "time": "t", "start_ts": 0,
            "finish_ts": 9, "nodes": nodes, "extra_top": 1}  # fmt: skip

    def cpu(name, rf, ext, ts, dur):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 7, "ts": ts,
                "dur": dur, "args": {"External id": ext, "Record function id": rf}}  # fmt: skip

    def gpu(name, ext, ts, dur, stream, **extra):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                "dur": dur, "args": {"External id": ext, "stream": stream, **extra}}  # fmt: skip

    events = [
        cpu("aten::mm", 2, 100, 0, 10), cpu("c10d::allreduce_", 3, 101, 10, 30),
        cpu("record_param_comms", 4, 102, 12, 20), cpu("nccl:all_reduce", 5, 103, 14, 10),
        cpu("record_param_comms", 6, 104, 40, 2), cpu("aten::add_", 7, 105, 42, 5),
        gpu("sm90_xmma_gemm_bf16", 100, 20, 500, 7),
        gpu("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 103, 30, 900, 20,
            **{"Collective name": "allreduce", "In msg nelems": 8 * 2**20, "dtype": "BFloat16",
               "Process Group Name": "1", "Process Group Ranks": "[0, 1]"}),
        gpu("vectorized_elementwise_kernel", 105, 60, 40, 7),
        gpu("orphan_kernel", 999, 70, 5, 7),
    ]  # fmt: skip
    kin = {"distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": events}
    hp, kp = tmp / "job_host.json", tmp / "job_device.json"
    hp.write_text(json.dumps(host))
    kp.write_text(json.dumps(kin))
    return str(hp), str(kp)


def test_nccl_trace_gives_kernel_times_streams_sizes_groups_and_edges(tmp_path):
    host, kineto = _nccl_trace(tmp_path)
    got = import_pytorch([host], [kineto])
    wl = got.workload
    assert wl.n_ranks == 2 and got.replicated_from == 1  # Kineto says rank 1 of 2
    rg = wl.ranks[0]
    (ar,) = _colls(rg)
    assert (ar.comm_type, ar.comm_size, ar.stream) == (0, 16 * 2**20, 20)
    assert wl.groups[ar.pg_name] == (0, 1) and wl.group_desc.get("1") == "dp"
    assert ar.duration_micros == 900
    gemm = next(n for n in rg.nodes if n.name == "sm90_xmma_gemm_bf16")
    assert (gemm.stream, gemm.duration_micros, gemm.is_cpu_op) == (7, 500, False)
    assert rg.by_id[gemm.data_deps[0]].name == "aten::mm"  # launched by its operator
    assert rg.by_id[ar.data_deps[0]].name == "nccl:all_reduce"
    assert any(n.name == "record_param_comms:wait" for n in rg.nodes)
    se = stream_edges(rg)
    assert se.streams == "stream attr"
    assert se.counts["comm_after_compute"] == 1 and se.counts["wait"] == 1
    assert se.counts["stream_order"] == 1  # the add kernel after the GEMM on stream 7
    notes = " ".join(got.notes)
    assert "1 GPU event(s)" in notes  # the orphan kernel
    assert "skipped node field(s) genie does not read: new_node_field" in notes
    assert "skipped top-level field(s) extra_top" in notes
    assert "GPU kernel durations and streams from the Kineto trace" in notes


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x00\xff garbage", "invalid JSON"),
        (b"{not json", "invalid JSON at line 1"),
        (b"[1, 2]", "not a PyTorch host execution trace (JSON list"),
        (b'{"schema": "1.1.1-chakra.0.0.4"}', "without a 'nodes' list"),
        (b'{"nodes": [{"id": "seven", "name": "x"}]}', "nodes[0]: id 'seven' is not a whole"),
        (b'{"nodes": [3]}', "nodes[0] is not an object"),
        (b'{"nodes": [{"id": 1}, {"id": 1}]}', "id 1 appears twice"),
        (b"[" * 100000 + b"]" * 100000, "not a PyTorch host execution trace"),
    ],
)
def test_hostile_host_trace_is_one_line_without_traceback(tmp_path, capsys, content, says):
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    assert main(["workload", "import", "pytorch", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert says in err


def test_hostile_kineto_trace_is_one_line(tmp_path, capsys):
    f = tmp_path / "k.json"
    f.write_text('{"traceEvents": 5}')
    rc = main(["workload", "import", "pytorch", HOST0, "--kineto", str(f), "--out", "x"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "not a Kineto trace" in err


def test_big_host_trace_shows_progress(tmp_path, monkeypatch):
    from genie.workload import pytorch_trace

    n = 60000
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0}]
    nodes += [
        {"id": i, "name": "aten::relu", "ctrl_deps": 1, "attrs": [{"name": "tid", "value": 1}]}
        for i in range(2, n + 1)
    ]
    f = tmp_path / "big.json.gz"
    f.write_bytes(
        gzip.compress(json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}).encode())
    )
    seen: list[tuple[str, float, float]] = []

    class Rec:
        def __init__(self, desc, total):
            self.desc, self.total, self.done = desc, total, 0.0

        def advance(self, k=1):
            self.done += k

    @contextlib.contextmanager
    def bar(desc, total, unit=""):
        r = Rec(desc, total)
        yield r
        seen.append((r.desc, r.total, r.done))

    monkeypatch.setattr(pytorch_trace.progress, "bar", bar)
    trace = pytorch_trace.read_host_et(f)
    assert len(trace.ops) == n
    assert seen == [("reading big.json.gz", n, n)]
