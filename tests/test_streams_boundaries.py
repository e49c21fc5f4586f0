"""``order_collectives`` reads every rank's dep pointers side by side (one diff, the differences
across rank boundaries dropped) and hands each changed rank its rebased pointers as a slice of one
array: checked against the per-rank ``order_reference`` array for array where ranks have no
nodes, no collectives, no deps, or differ in length, beside ranks that gain deps."""

from __future__ import annotations

import numpy as np

from genie.sim.compiled import GraphBuilder
from genie.sim.streams import order_collectives, order_reference


def _workload():
    b = GraphBuilder(5)
    b.group("world", [0, 1, 2, 3, 4])
    b.group("pair", [0, 3])
    for r in (0, 3):  # many collectives of two groups, deps of several lengths
        c = b.compute(r, 1e-3)
        for _ in range(3):
            b.collective(r, "all_reduce", 1 << 20, group="pair", deps=[c])
        d = b.compute(r, 2e-3, deps=[c])
        b.collective(r, "all_reduce", 1 << 20, group="pair", deps=[c, d])
    b.compute(1, 1e-3)  # rank 1: compute only; rank 2: no node at all
    b.compute(4, 1e-3)
    b.compute(4, 1e-3, deps=[0])
    return b.build()


def test_vector_order_matches_the_reference_across_rank_boundaries():
    cw = _workload()
    assert cw.ranks[2].n_nodes == 0
    for k in (1, 2, 3):
        fast, ref = order_collectives(cw, k), order_reference(cw, k)
        for a, b in zip(fast.ranks, ref.ranks, strict=True):
            for f in ("dep_ptr", "dep_idx"):
                x, y = getattr(a, f), getattr(b, f)
                assert x.dtype == y.dtype and np.array_equal(x, y), (k, f)
        changed = [a is not c for a, c in zip(fast.ranks, cw.ranks, strict=True)]
        assert changed == [k < 4, False, False, k < 4, False]
