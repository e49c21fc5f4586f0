"""Generated workloads (genie.workload generators) through the simulator, and random graphs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder, Kind
from genie.sim.network import AnalyticalBackend
from genie.sim.traffic import NetModel
from genie.workload.generators import data_parallel, llm, moe


def be(n, **kw):
    return AnalyticalBackend(NetModel(n, 50e9, 500e-9, **kw))


def parts_add_up(rep):
    for r in rep.ranks:
        total = r.compute + r.exposed_comm + r.wait + r.idle
        assert total == pytest.approx(rep.iteration_s, rel=1e-9, abs=1e-15), r


def test_llm_with_tp_pp_dp_runs_and_pairs_its_pipeline_sends():
    wl = llm(16, tp=2, pp=2, layers=4, hidden=1024, seq=512, micro_batches=2)
    cw = compile_workload(wl)
    rep, raw = replay(cw, be(16, ranks_per_host=2, intra_bandwidth=300e9))
    # stages differ: one rank per (tensor, pipeline) position is replayed (genie.sim.orbits)
    assert rep.symmetric and raw.sim_ranks == [0, 1, 2, 3]
    p2p = [row for row in rep.collectives if row.collective == "send_recv"]
    n_sends = sum(int((r.kind == Kind.SEND).sum()) for r in cw.ranks)
    assert len(p2p) == n_sends > 0  # every send found its recv
    assert {row.collective for row in rep.collectives} >= {"all_reduce", "send_recv"}
    parts_add_up(rep)
    # the last stage waits for activations from the first: it has waiting time
    last_stage = rep.ranks[2]
    assert last_stage.wait > 0


def test_faster_intra_host_fabric_shortens_tensor_parallel_steps():
    cw = compile_workload(llm(8, tp=2, pp=1, layers=4, hidden=2048, seq=1024, micro_batches=2))
    slow, _ = replay(cw, be(8, ranks_per_host=2, intra_bandwidth=10e9))
    fast, _ = replay(cw, be(8, ranks_per_host=2, intra_bandwidth=500e9))
    assert fast.iteration_s < slow.iteration_s


def test_generated_dp_is_symmetric_and_agrees_with_full_replay():
    cw = compile_workload(data_parallel(8, layers=24, hidden=512, bucket_bytes=4 * 2**20))
    sym, _ = replay(cw, be(8), symmetry=True)
    full, _ = replay(cw, be(8), symmetry=False)
    assert sym.symmetric and not full.symmetric
    assert sym.iteration_s == pytest.approx(full.iteration_s, rel=1e-12)
    assert [c.end for c in sym.collectives] == [pytest.approx(c.end) for c in full.collectives]
    parts_add_up(full)


def test_moe_all_to_all_runs():
    cw = compile_workload(moe(8, layers=2))
    rep, _ = replay(cw, be(8))
    assert "all_to_all" in {row.collective for row in rep.collectives}
    parts_add_up(rep)


@st.composite
def random_symmetric_graph(draw):
    n_ranks = draw(st.integers(2, 5))
    n = draw(st.integers(1, 25))
    rows = []
    for i in range(n):
        kind = draw(st.sampled_from(["compute", "compute", "memory", "coll"]))
        deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        value = draw(st.integers(1, 50))
        rows.append((kind, deps, value))
    return n_ranks, rows


@settings(max_examples=60, deadline=None, derandomize=True)
@given(random_symmetric_graph())
def test_random_graphs_symmetric_equals_full_and_parts_add_up(case):
    n_ranks, rows = case
    b = GraphBuilder(n_ranks)
    b.group("world")
    b.group("again", list(range(n_ranks)))
    for r in range(n_ranks):
        for i, (kind, deps, v) in enumerate(rows):
            if kind == "compute":
                b.compute(r, v * 1e-6, deps)
            elif kind == "memory":
                b.memory(r, v * 1e-6, deps)
            else:
                b.collective(r, "all_reduce", v * 4096, group=i % 2, deps=deps)
    cw = b.build()
    sym, _ = replay(cw, be(n_ranks), symmetry=True)
    full, _ = replay(cw, be(n_ranks), symmetry=False)
    assert sym.iteration_s == pytest.approx(full.iteration_s, rel=1e-9, abs=1e-15)
    parts_add_up(full)
    # the iteration is at least the serial compute of a rank and the longest dependency chain
    assert full.iteration_s >= full.ranks[0].compute * (1 - 1e-12)


def _same_times(a, b):
    import numpy as np

    for f in ("ready", "start", "end", "inst_start", "inst_end"):
        x, y = getattr(a, f), getattr(b, f)
        assert np.allclose(x, y, rtol=1e-12, atol=1e-15, equal_nan=True), f


def test_merged_compute_runs_give_every_node_the_same_times():
    from genie.sim.chains import collapse
    from genie.sim.engine import simulate

    for wl in (
        data_parallel(8, layers=40, hidden=512, bucket_bytes=8 * 2**20),
        llm(8, tp=2, pp=2, layers=4, hidden=512, seq=256, micro_batches=2),
    ):
        cw = compile_workload(wl)
        merged = simulate(cw, be(cw.n_ranks), merge_chains=True)
        plain = simulate(cw, be(cw.n_ranks), merge_chains=False)
        _same_times(merged, plain)
    c = collapse(compile_workload(data_parallel(2, layers=40, hidden=512)).ranks[0])
    assert c is not None and c.n_nodes < 30  # 81 compute nodes and buckets: about 20 left


def test_no_merging_when_two_compute_nodes_can_be_ready_together():
    from genie.sim.chains import collapse

    b = GraphBuilder(1)
    a = b.compute(0, 1e-6)
    b.compute(0, 1e-6, [a])
    b.compute(0, 1e-6)  # independent: could queue behind the others
    assert collapse(b.build().ranks[0]) is None
    b = GraphBuilder(1)
    a = b.compute(0, 1e-6)
    c = b.compute(0, 1e-6, [a])
    b.compute(0, 1e-6, [c])
    assert collapse(b.build().ranks[0]).n_nodes == 1


@st.composite
def random_graph(draw):
    n = draw(st.integers(1, 30))
    rows = []
    for i in range(n):
        kind = draw(st.sampled_from(["compute", "compute", "compute", "memory", "coll"]))
        if i and draw(st.booleans()):
            deps = [i - 1]  # chains are common, so merging gets exercised
        else:
            deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        rows.append((kind, deps, draw(st.integers(1, 50))))
    return rows


@settings(max_examples=80, deadline=None, derandomize=True)
@given(random_graph(), st.integers(1, 4))
def test_random_graphs_merged_equals_plain(rows, n_ranks):
    from genie.sim.engine import simulate

    b = GraphBuilder(n_ranks)
    b.group("world")
    for r in range(n_ranks):
        for kind, deps, v in rows:
            scale = 1 + r  # ranks differ: no symmetry, every rank replayed
            if kind == "compute":
                b.compute(r, v * scale * 1e-6, deps)
            elif kind == "memory":
                b.memory(r, v * 1e-6, deps)
            else:
                b.collective(r, "all_reduce", v * 4096, deps=deps)
    cw = b.build()
    merged = simulate(cw, be(n_ranks), merge_chains=True)
    _same_times(merged, simulate(cw, be(n_ranks), merge_chains=False))
