"""compiled.finish on columns numbers and checks instances exactly as the node-by-node loop."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from genie.errors import CollectiveError
from genie.sim import compiled as C
from genie.sim.adapter import compile_workload
from genie.sim.compiled import GraphBuilder
from genie.workload.generators import data_parallel, llm, moe


def _both(cw):
    a = C._finish_columns([copy.copy(r) for r in cw.ranks], cw.group_names, cw.group_ranks, "w")
    b = C._finish_loop([copy.copy(r) for r in cw.ranks], cw.group_names, cw.group_ranks, "w")
    return a, b


@pytest.mark.parametrize(
    "wl",
    [
        llm(32, tp=2, pp=2, layers=4, micro_batches=2),
        llm(64, tp=4, pp=4, layers=4, micro_batches=4, zero=True),
        moe(16, layers=2),
        data_parallel(8, layers=4),
    ],
    ids=["llm32", "llm64-zero", "moe16", "dp8"],
)
def test_columns_and_loop_give_the_same_instances(wl):
    fast, ref = _both(compile_workload(wl))
    assert fast is not None
    for f in ("comm_type", "size", "group", "seq", "src", "dst", "tag"):
        x, y = getattr(fast.instances, f), getattr(ref.instances, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert fast.instances.members == ref.instances.members
    for p, q in zip(fast.ranks, ref.ranks, strict=True):
        assert np.array_equal(p.instance, q.instance)


def test_a_mismatch_is_left_to_the_loop_which_names_it():
    b = GraphBuilder(2)
    b.collective(0, "all_reduce", 64)
    b.collective(1, "all_reduce", 128)
    with pytest.raises(CollectiveError, match="does not match across ranks"):
        b.build()
    b = GraphBuilder(2)
    g = b.group("a", [0])
    b.collective(0, "all_reduce", 64, group=g)
    b.collective(1, "all_reduce", 64, group=g)
    with pytest.raises(Exception, match="not a member"):
        b.build()
