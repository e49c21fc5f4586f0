"""Stream semantics for PyTorch-derived traces (genie.workload.stream_rules) and the warning when
the network cannot matter (genie.sim.independence), through the library and the CLI.

The trace is built here as Chakra's PyTorch converter writes one: CPU ops chained in call order,
each launching one GPU kernel that depends on that CPU op only; a host ``c10d::allreduce_``
launcher (is_cpu_op, no comm_type) and its ``ncclKernel_AllReduce`` depending on the launcher
only. The CPU runs far ahead of the GPU, so without the rules the all-reduce starts long before
the compute launched ahead of it has run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import genie
from genie.cli import main
from genie.sim.adapter import compile_workload
from genie.workload import load_workload, save_workload
from genie.workload.generators.data_parallel import data_parallel
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
