"""A generated llm replayed on a leaf-spine with the contention-free shortcut pricing its rings,
against the same replay with every program simulated flow by flow: equal to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.streams import order_collectives
from genie.workload.generators import llm


def _pricer(n: int, over: float, canonical: bool, shortcut: bool, methods: list[str]):
    topo = T.leaf_spine(2, 1, n // 2, 50 * 2**30, 500e-9, over)
    pricer = ProgramPricer(topo, list(range(n)), n, canonical=canonical)

    def priced(program, topology, placement=None, **kw):
        cost = estimate(program, topology, placement, contention_free=shortcut, **kw)
        methods.append(cost.method)
        return cost

    pricer._estimate = priced
    return pricer


@pytest.mark.parametrize("canonical", [True, False])
@pytest.mark.parametrize("over", [1.0, 4.0])
def test_llm_on_a_leaf_spine_matches_the_flow_by_flow_replay(canonical, over):
    cw = order_collectives(compile_workload(llm(64, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    n = cw.n_ranks
    used: list[str] = []
    fast, fast_raw = replay(
        cw, AnalyticalBackend(_pricer(n, over, canonical, None, used), track_links=True)
    )
    ref_methods: list[str] = []
    ref, ref_raw = replay(
        cw, AnalyticalBackend(_pricer(n, over, canonical, False, ref_methods), track_links=True)
    )
    assert "contention-free" in used  # the data-parallel rings took the shortcut
    assert "contention-free" not in ref_methods
    assert fast.iteration_s == ref.iteration_s
    assert np.array_equal(fast_raw.inst_end, ref_raw.inst_end, equal_nan=True)
    assert np.array_equal(fast_raw.inst_start, ref_raw.inst_start, equal_nan=True)
