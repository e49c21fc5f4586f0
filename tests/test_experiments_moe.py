"""MoE all-to-all-v: uneven programs, the trace attribute, the generator's skew, the pricing."""

from __future__ import annotations

import numpy as np
import pytest

import genie
from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.collectives.data_exec import verify
from genie.collectives.layout import buffer_bytes
from genie.collectives.program import Op
from genie.commands.simulate import render
from genie.errors import CollectiveError, ValidationError
from genie.live.plan import compile_oplists
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.traffic import TopologyPricer
from genie.sim.uneven import skew
from genie.workload import load_workload, save_workload
from genie.workload.generators import moe
from genie.workload.generators.moe import expert_blocks
from genie_agent.programs import rebuild

M4 = np.array([[0, 100, 50, 0], [10, 0, 0, 300], [40, 40, 40, 40], [0, 0, 0, 0]])


@pytest.mark.parametrize("chunks", [1, 3])
@pytest.mark.parametrize("window", [None, 1, 2])
def test_uneven_all_to_all_moves_each_block_to_its_place(chunks, window) -> None:
    rng = np.random.default_rng(chunks * 10 + (window or 0))
    for mat in (M4, rng.integers(0, 64, (5, 5)) * 2):
        n = len(mat)
        flat = mat.ravel().tolist()
        p = build_program("all_to_all", "direct", n, 0, splits=flat, chunks=chunks, window=window)
        verify(p)  # the data executor: every block where it belongs, no race
        for r in range(n):
            sent = {}
            for st in p.steps(r):
                if st.op == Op.SEND:
                    sent[st.peer] = sent.get(st.peer, 0) + st.nbytes
            want = {j: int(mat[r, j]) for j in range(n) if j != r and mat[r, j]}
            assert sent == want


def test_uneven_specs_are_checked_and_travel_to_agents() -> None:
    p = build_program("all_to_all", "direct", 4, 0, splits=M4.ravel().tolist())
    q = rebuild(p.to_bytes())  # what an agent does with a Prepare's program
    assert q.spec.splits == p.spec.splits and list(q.steps(1)) == list(p.steps(1))
    assert buffer_bytes(p.spec) == 310 + 340  # largest row + largest column
    with pytest.raises(CollectiveError, match="n x n"):
        build_program("all_to_all", "direct", 4, 0, splits=[1, 2, 3])
    with pytest.raises(CollectiveError, match="all_to_all/direct"):
        build_program("all_reduce", "ring", 2, 8, splits=[0, 1, 1, 0])
    with pytest.raises(CollectiveError, match=">= 0"):
        build_program("all_to_all", "direct", 2, 0, splits=[0, -1, 1, 0])


def test_the_cost_model_prices_the_heaviest_block_not_the_mean() -> None:
    topo = T.switch(4, 1e9, 1e-6)
    hot = np.full((4, 4), 1000)
    hot[:, 0] = 30_000  # everyone sends rank 0 thirty times more: rank 0's downlink
    np.fill_diagonal(hot, 0)
    p = build_program("all_to_all", "direct", 4, 0, splits=hot.ravel().tolist())
    c = estimate(p, topo, [0, 1, 2, 3])
    assert c.method == "event"  # no rank stands for the others
    assert c.time_s == pytest.approx(3 * 30_000 / 1e9, rel=0.05)
    even = build_program("all_to_all", "direct", 4, 4 * int(hot.sum() / 12))
    assert estimate(even, topo, [0, 1, 2, 3]).time_s < c.time_s / 2


def _v_workload(mat: np.ndarray):
    n = len(mat)
    b = GraphBuilder(n)
    for r in range(n):
        b.collective(r, "all_to_all", int(mat[r].sum()), splits=mat[r].tolist())
    return b.build()


def test_compiled_instances_keep_the_matrix_and_both_pricers_use_it() -> None:
    cw = _v_workload(M4 * 1000)
    (mat,) = cw.instances.splits.values()
    assert np.array_equal(mat, M4 * 1000)
    assert int(cw.instances.size[0]) == 310_000  # the largest rank total
    topo = T.switch(4, 1e9, 1e-6)
    times = []
    for pricer in (ProgramPricer(topo, [0, 1, 2, 3], 4), TopologyPricer(topo, [0, 1, 2, 3], 4)):
        rep, _ = replay(cw, AnalyticalBackend(pricer.use_splits(cw.instances.splits)))
        times.append(rep.iteration_s)
        (row,) = rep.collectives
        assert row.uneven == pytest.approx(skew(M4 * 1000))
    # rank 3's downlink takes 300 + 40 kB: 0.34 ms at 1 GB/s
    assert times[0] == pytest.approx(0.34e-3, rel=0.1)
    assert times[1] == pytest.approx(0.34e-3, rel=0.1)


def test_ranks_must_agree_that_an_all_to_all_is_uneven() -> None:
    b = GraphBuilder(2)
    b.collective(0, "all_to_all", 10, splits=[0, 10])
    b.collective(1, "all_to_all", 10)
    with pytest.raises(CollectiveError, match="uneven"):
        b.build()
    b = GraphBuilder(2)
    b.collective(0, "all_reduce", 10, splits=[5, 5])
    b.collective(1, "all_reduce", 10, splits=[5, 5])
    with pytest.raises(ValidationError, match="all-to-all"):
        b.build()


def test_the_generator_skews_expert_load_and_the_trace_carries_it(tmp_path) -> None:
    blocks = expert_blocks(4, 2, 1.0, 1 << 20, 2)
    assert blocks[0] > blocks[1] > blocks[2] > blocks[3] and all(b % 2 == 0 for b in blocks)
    assert expert_blocks(4, 2, 0.0, 1 << 20, 2) is None
    wl = moe(4, layers=1, hidden=256, seq=256, batch=1, expert_skew=1.0)
    assert not wl.problems  # the validator accepts ranks' different totals of one all-to-all-v
    save_workload(wl, tmp_path / "m")
    cw = compile_workload(load_workload(tmp_path / "m"))  # through the .et files
    assert len(cw.instances.splits) == 4
    dispatch = cw.instances.splits[0]
    assert (dispatch == dispatch[0]).all()  # every rank sends the hot expert's rank the most
    assert dispatch[0, 0] > dispatch[0, 3]
    combine = cw.instances.splits[1]
    assert np.array_equal(combine, dispatch.T)
    # the hot experts' rank computes longest
    comp = [cr.duration[cr.kind == 0].sum() for cr in cw.ranks]
    assert comp[0] == max(comp) and comp[0] > comp[3]
    plain = compile_workload(moe(4, layers=1, hidden=256, seq=256, batch=1))
    assert plain.instances.splits == {}


def test_op_lists_ship_uneven_programs() -> None:
    cw = _v_workload(M4 * 8)
    plan = compile_oplists(cw)
    (prog,) = plan.programs
    assert prog.spec.splits == tuple(int(x) for x in (M4 * 8).ravel())
    assert plan.sent_bytes() == int((M4 * 8).sum() - np.trace(M4 * 8))


def test_simulate_prices_and_reports_skewed_moe(tmp_path, capsys) -> None:
    sims = {}
    for skew_arg, name in ((0.0, "even"), (1.5, "skew")):
        spec = genie.MixtureOfExperts(
            ranks=4, layers=1, hidden=512, seq=256, batch=1, expert_skew=skew_arg
        )
        save_workload(genie.generate(spec, target="genie").workload, tmp_path / name)
        fabric = genie.Fabric(bandwidth="100gbit")
        sims[name] = genie.simulate(
            genie.SimulateSpec(workload=str(tmp_path / name), fabric=fabric)
        )
    docs = {name: sim.to_dict()["reports"][0] for name, sim in sims.items()}
    a2a = [c for c in docs["skew"]["collectives"] if c["collective"] == "all_to_all"]
    assert a2a and all(c["uneven"] > 1.5 for c in a2a)
    assert all(c["closed_form_s"] is None for c in a2a)
    even = [c for c in docs["even"]["collectives"] if c["collective"] == "all_to_all"]
    assert all(c["uneven"] is None for c in even)
    assert max(c["time"] for c in a2a) > 1.5 * max(c["time"] for c in even)
    assert sims["skew"].iteration_s > sims["even"].iteration_s
    render(sims["skew"], rows=50)  # the printed table names the uneven all-to-alls
    assert "all_to_all_v" in capsys.readouterr().out
