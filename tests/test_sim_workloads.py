"""Generated workloads (genie.workload generators) through the simulator, and random graphs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder, Kind
from genie.sim.netmodel import NetModel
from genie.sim.network import AnalyticalBackend
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
    rep, _ = replay(cw, be(16, ranks_per_host=2, intra_bandwidth=300e9))
    assert not rep.symmetric  # stages differ, so every rank is replayed
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
