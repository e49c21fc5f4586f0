"""Stream semantics for PyTorch-derived traces (genie.workload.stream_rules) and the warning when
the network cannot matter (genie.sim.independence), through the library and the CLI.

The trace is built here as Chakra's PyTorch converter writes one: CPU ops chained in call order,
each launching one GPU kernel that depends on that CPU op only; a host ``c10d::allreduce_``
launcher (is_cpu_op, no comm_type) and its ``ncclKernel_AllReduce`` depending on the launcher
only. The CPU runs far ahead of the GPU, so without the rules the all-reduce starts long before
the compute launched ahead of it has run.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import genie
from genie.cli import main
from genie.sim.adapter import compile_workload
from genie.workload import load_workload, save_workload
from genie.workload.columnar import load_columns, rank_stream_edges
from genie.workload.generators.data_parallel import data_parallel
from genie.workload.generators.pytorch_style import pytorch_style
from genie.workload.model import Attr, Node, NodeType, RankGraph, Workload
from genie.workload.stream_rules import stream_edges

KERNEL_US, KERNELS, SIZE = 1000, 20, 8 * 2**20  # 20 ms of compute, one 8 MiB all-reduce


def _cpu(nid: int, name: str, us: int, deps: list[int], t=NodeType.COMP_NODE) -> Node:
    return Node(
        nid,
        name,
        t,
        data_deps=deps,
        duration_micros=us,
        attrs=[Attr("is_cpu_op", "bool_val", True), Attr("tid", "int64_val", 1)],
    )


def _gpu(nid: int, name: str, us: int, deps: list[int], comm: bool = False, **kw) -> Node:
    attrs = [Attr("is_cpu_op", "bool_val", False)]
    if kw.get("stream") is not None:
        attrs.append(Attr("stream", "int64_val", kw["stream"]))
    t = NodeType.COMP_NODE
    if comm:
        t = NodeType.COMM_COLL_NODE
        attrs += [Attr("comm_type", "int64_val", 0), Attr("comm_size", "int64_val", SIZE)]
    return Node(nid, name, t, data_deps=deps, duration_micros=us, attrs=attrs)


def pytorch_rank(
    rank: int, wait: bool = False, sync: bool = False, streams: bool = False
) -> RankGraph:
    """Forward/backward kernels, then the gradients' all-reduce, then an optimizer kernel."""
    nodes: list[Node] = []
    nid = 0
    last_cpu: list[int] = []
    compute_stream = 7 if streams else None
    comm_stream = 20 if streams else None

    def cpu(name: str, us: int, t=NodeType.COMP_NODE) -> int:
        nonlocal nid
        nodes.append(_cpu(nid, name, us, last_cpu[-1:], t))
        last_cpu.append(nid)
        nid += 1
        return nid - 1

    def gpu(name: str, us: int, launcher: int, comm: bool = False, stream=None) -> int:
        nonlocal nid
        nodes.append(_gpu(nid, name, us, [launcher], comm, stream=stream))
        nid += 1
        return nid - 1

    for k in range(KERNELS):
        gpu(f"sm90_gemm_{k}", KERNEL_US, cpu("aten::mm", 5), stream=compute_stream)
    c10d = cpu("c10d::allreduce_", 10, NodeType.COMM_COLL_NODE)
    gpu("ncclKernel_AllReduce_RING_LL_Sum_float", 0, c10d, comm=True, stream=comm_stream)
    if wait:
        cpu("c10d::wait", 2)
    gpu("optimizer_step", KERNEL_US, cpu("aten::_foreach_add_", 5), stream=compute_stream)
    if sync:
        cpu("cudaDeviceSynchronize", 1)
        nodes[cpu("aten::zero_", 5)].data_deps = []  # ready at once but for the host's block
    return RankGraph(rank, nodes)


def write(tmp: Path, ranks: int = 4, **kw) -> Path:
    wl = Workload([pytorch_rank(r, **kw) for r in range(ranks)], name="pt")
    prefix = tmp / "pt"
    save_workload(wl, prefix)
    return prefix


def iteration(prefix: Path, bandwidth: str, edges: str = "inferred") -> genie.Simulation:
    spec = genie.SimulateSpec(
        workload=str(prefix),
        fabric=genie.Fabric(bandwidth=bandwidth),
        model=genie.Model(collective_model="line-rate", trace_edges=edges),
    )
    return genie.simulate(spec)


def comm_time(sim: genie.Simulation) -> float:
    return max(c.time for c in sim.reports[0].collectives)


def test_rules_count_the_edges_they_add() -> None:
    """Kernels chained on the inferred compute stream; the all-reduce after the last gemm."""
    se = stream_edges(pytorch_rank(0))
    assert se.applies and se.streams == "inferred" and se.skipped == 0
    # 20 gemms + the optimizer kernel on one stream: 20 links; one collective after compute
    assert se.counts == {"stream_order": 20, "comm_after_compute": 1, "wait": 0, "synchronize": 0}
    coll = next(i for i, n in enumerate(pytorch_rank(0).nodes) if n.type == 7 and not n.is_cpu_op)
    last_gemm = coll - 2  # the 20th gemm, launched by the CPU op before the c10d launcher
    assert se.edges[coll] == [last_gemm]


def test_explicit_streams_and_waits() -> None:
    """Streams from the trace; a wait and a synchronize add what they wait for."""
    rg = pytorch_rank(0, wait=True, sync=True, streams=True)
    se = stream_edges(rg)
    assert se.streams == "stream attr"
    assert se.counts["stream_order"] == 20  # the collective alone on stream 20
    coll = next(i for i, n in enumerate(rg.nodes) if n.type == 7 and not n.is_cpu_op)
    opt = next(i for i, n in enumerate(rg.nodes) if n.name == "optimizer_step")
    sync = next(i for i, n in enumerate(rg.nodes) if n.name == "cudaDeviceSynchronize")
    assert coll in se.edges[opt] and se.counts["wait"] == 1
    assert set(se.edges[sync]) == {opt, coll} and se.edges[sync + 1] == [sync]
    assert se.counts["synchronize"] == 3


def test_generated_and_astra_traces_get_nothing(tmp_path: Path) -> None:
    """No CPU ops: the same compiled graph with and without the rules."""
    wl = data_parallel(4, layers=4)
    a, b = compile_workload(wl), compile_workload(wl, edges="explicit")
    assert not any(stream_edges(rg).applies for rg in wl.ranks)
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert np.array_equal(x.dep_ptr, y.dep_ptr) and np.array_equal(x.dep_idx, y.dep_idx)
    sample = Path(__file__).parents[1] / "../shared/et-samples/astra-sim/microbenchmarks"
    prefix = sample / "all_reduce/4npus_1MB/all_reduce"
    if not prefix.with_name("all_reduce.0.et").exists():
        pytest.skip(f"ASTRA-sim sample traces not found under {sample}")
    wl = load_workload(prefix)
    assert not any(stream_edges(rg).applies for rg in wl.ranks)


def test_network_matters_with_the_rules(tmp_path: Path) -> None:
    """Exposed communication grows as bandwidth falls; 10 Gbit/s exceeds 400 Gbit/s by the
    communication the compute did not hide (all of it: nothing is left to overlap)."""
    prefix = write(tmp_path)
    fast, mid, slow = (iteration(prefix, bw) for bw in ("400Gb/s", "100Gb/s", "10Gb/s"))
    exposed = [s.reports[0].mean("exposed_comm") for s in (fast, mid, slow)]
    assert exposed[0] < exposed[1] < exposed[2]
    grew = slow.iteration_s - fast.iteration_s
    hidden = KERNEL_US * 1e-6  # the optimizer kernel runs beside the all-reduce
    unhidden = (comm_time(slow) - hidden) - max(0.0, comm_time(fast) - hidden)
    assert grew == pytest.approx(unhidden, rel=1e-3)
    assert slow.iteration_s > KERNELS * KERNEL_US * 1e-6 + comm_time(slow)
    assert slow.facts["stream_rules"]["added"]["comm_after_compute"] == 4  # type: ignore[index]
    assert slow.facts["network_cannot_matter"] is None


def test_explicit_edges_reproduce_the_old_replay(tmp_path: Path) -> None:
    """The trace's edges only: the all-reduce hides behind compute at any bandwidth, and
    simulate says the network cannot matter."""
    prefix = write(tmp_path)
    fast, slow = (iteration(prefix, bw, "explicit") for bw in ("400Gb/s", "10Gb/s"))
    assert fast.iteration_s == slow.iteration_s
    assert slow.reports[0].mean("exposed_comm") == 0.0
    assert comm_time(slow) > 0.005  # 8 MiB on 4 ranks at 10 Gbit/s: ~10 ms, all hidden
    why = slow.facts["network_cannot_matter"]
    assert isinstance(why, str) and "cannot delay any computation" in why
    assert any("warning: the network cannot" in n for n in slow.reports[0].notes)
    assert slow.facts["stream_rules"] is None


def test_cli_inspect_and_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """inspect says what each rule added; simulate --trace-edges explicit warns on stderr."""
    prefix = write(tmp_path)
    assert main(["workload", "inspect", str(prefix), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stream_rules"]["added"]["stream_order"] == 4 * 20
    assert main(["workload", "inspect", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "stream semantics (PyTorch-derived trace, streams from inferred): added 84" in out
    args = ["simulate", str(prefix), "--bandwidth", "10Gb/s", "--collective-model", "line-rate"]
    assert main([*args, "--trace-edges", "explicit"]) == 0
    cap = capsys.readouterr()
    assert "network cannot delay any computation" in cap.err
    assert main(args) == 0
    assert "network cannot delay" not in capsys.readouterr().err


# --- the rules on columns (genie.workload.stream_columns) against the object model -----------


def _same_edges_from_columns(prefix: Path, validate: bool = True, keep: bool = True) -> int:
    """Every rank's edges from its columns equal ``stream_edges`` on its nodes; edges added."""
    cw = load_columns(prefix, validate=validate, keep_bytes=keep)
    wl = cw.to_workload()
    added = 0
    for r, rg in enumerate(wl.ranks):
        ref = stream_edges(rg)
        got = rank_stream_edges(cw, r).as_stream_edges()
        assert (got.applies, got.streams) == (ref.applies, ref.streams)
        assert got.edges == ref.edges  # per node, the same positions in the same order
        assert list(got.edges) == list(ref.edges) or set(got.edges) == set(ref.edges)
        assert (got.counts, got.skipped) == (ref.counts, ref.skipped)
        added += ref.added
    return added


def _tid_streams(rank: int) -> RankGraph:
    """Older converters: the GPU stream in the ``tid`` attr, no ``stream`` attr."""
    rg = pytorch_rank(rank, wait=True, sync=True)
    for nd in rg.nodes:
        if not nd.is_cpu_op:
            nd.set_attr("tid", "int64_val", 20 if nd.type == NodeType.COMM_COLL_NODE else 7)
    return rg


def _odd(rank: int) -> RankGraph:
    """Kernels launched through other kernels, a dep forward in the file, repeated, missing
    and self deps, a second CPU thread after a synchronize, ids that are not positions."""
    rg = pytorch_rank(rank, wait=True, sync=True, streams=True)
    nodes = rg.nodes
    gemms = [i for i, nd in enumerate(nodes) if nd.name.startswith("sm90_gemm")]
    for a, b in itertools.pairwise(gemms[3:7]):
        nodes[b].data_deps = [nodes[a].id]  # launched through the kernel before
    nodes[gemms[8]].data_deps = [*nodes[gemms[8]].data_deps, nodes[gemms[9]].id, 10**6]
    nodes[gemms[10]].data_deps = [*nodes[gemms[10]].data_deps] * 2 + [nodes[gemms[10]].id]
    sync = next(i for i, nd in enumerate(nodes) if nd.name == "cudaDeviceSynchronize")
    nodes[sync + 1].set_attr("tid", "int64_val", 2)  # the thread's next op is further on
    nodes.append(_cpu(len(nodes), "aten::add", 3, [], NodeType.COMP_NODE))
    launcher = next(nd for nd in nodes if nd.name == "aten::_foreach_add_")
    launcher.name = "c10d::wait"  # a second wait before the next compute: the later one counts
    for nd in nodes:
        nd.id += 100
        nd.data_deps = [d + 100 for d in nd.data_deps]
    return rg


def _cycle(rank: int) -> RankGraph:
    """Two CPU ops waiting for each other: no order keeps the deps, the rules add nothing."""
    rg = pytorch_rank(rank, sync=True)
    rg.nodes[0].data_deps = [rg.nodes[2].id]
    return rg


@pytest.mark.parametrize(
    "make",
    [
        lambda r: pytorch_rank(r),
        lambda r: pytorch_rank(r, wait=True, sync=True),
        lambda r: pytorch_rank(r, wait=True, sync=True, streams=True),
        _tid_streams,
        _odd,
        _cycle,
    ],
    ids=["inferred", "wait-sync", "stream-attr", "tid", "odd", "cycle"],
)
@pytest.mark.parametrize("keep", [True, False], ids=["bytes", "released"])
def test_columns_give_the_object_models_edges(tmp_path: Path, make, keep: bool) -> None:
    wl = Workload([make(r) for r in range(2)], name="pt")
    save_workload(wl, tmp_path / "pt")
    odd = make in (_odd, _cycle)  # validation refuses a dangling dep and a cycle
    added = _same_edges_from_columns(tmp_path / "pt", validate=not odd, keep=keep)
    assert (added == 0) if make is _cycle else (added > 0)


@pytest.mark.parametrize("ranks,layers,steps", [(2, 2, 1), (4, 4, 2), (8, 6, 3)])
def test_columns_give_the_object_models_edges_pytorch_style(tmp_path, ranks, layers, steps):
    save_workload(pytorch_style(ranks, layers=layers, steps=steps), tmp_path / "w")
    assert _same_edges_from_columns(tmp_path / "w", keep=False) > 0


def test_columns_of_traces_without_cpu_ops_get_nothing(tmp_path: Path) -> None:
    save_workload(data_parallel(4, layers=2), tmp_path / "dp")
    assert _same_edges_from_columns(tmp_path / "dp") == 0
    sample = Path(__file__).parents[1] / "../shared/et-samples/astra-sim/microbenchmarks"
    if not (sample / "all_reduce/4npus_1MB/all_reduce.0.et").exists():
        pytest.skip(f"ASTRA-sim sample traces not found under {sample}")
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):  # no CPU op, no stream
        assert _same_edges_from_columns(sample / coll / "4npus_1MB") == 0
