"""Program pricing on a one-spine leaf-spine prices each group shape once (issue 33).

Renaming hosts within their leaf maps such a fabric onto itself and leaves every route alone
(one spine: no hash chooses a path), so ``ProgramPricer`` prices a group on the first hosts of
its leaves and moves the link bytes back onto the group's own hosts. Checked against pricing
every group as itself (``canonical=False``): the same latency, links and bytes; and refused
where the argument fails (two spines: ECMP tells host pairs apart).
"""

from __future__ import annotations

import numpy as np
import pytest

from genie.collectives.topology import leaf_spine
from genie.sim.network import Transfer
from genie.sim.program_pricer import ProgramPricer

ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER = 0, 2, 6, 7
# 3 leaves x 4 hosts, rank i on host i: groups inside a leaf, across two or three leaves, in
# other orders, and with the same shape on other hosts
GROUPS = [
    (0, 1),
    (5, 6),
    (9, 11),
    (0, 4),
    (2, 7),
    (11, 3),
    (0, 4, 8),
    (1, 5, 9),
    (3, 10, 6),
    (0, 1, 4, 5),
    (2, 3, 10, 11),
    (8, 9, 10, 11),
    tuple(range(12)),
    (7, 0, 11, 2, 5, 9),
]


def _pricers(spines: int) -> tuple[ProgramPricer, ProgramPricer]:
    topo = leaf_spine(3, spines, 4, 50e9, 500e-9, oversubscription=2.0)
    ranks = list(range(12))
    return ProgramPricer(topo, ranks, 12), ProgramPricer(topo, ranks, 12, canonical=False)


@pytest.mark.parametrize("ctype", [ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER])
def test_one_spine_prices_each_leaf_shape_once_as_every_group_alone(ctype: int) -> None:
    fast, ref = _pricers(spines=1)
    assert fast._leaf_hosts is not None
    for g, ranks in enumerate(GROUPS):
        t = Transfer(g, ctype, 3 << 20, ranks, g)
        a, b = fast.price(t), ref.price(t)
        assert a.latency == pytest.approx(b.latency, rel=1e-12, abs=1e-18)
        order_a, order_b = np.argsort(a.links), np.argsort(b.links)
        assert a.links[order_a].tolist() == b.links[order_b].tolist()
        assert np.allclose(a.nbytes[order_a], b.nbytes[order_b], rtol=1e-12)
    # the shapes repeat ((0, 1) and (5, 6) are one shape; (0, 4) and (2, 7) another ...)
    assert len(fast._programs) < len(ref._programs) == len(GROUPS)


def test_two_spines_price_every_group_as_itself() -> None:
    fast, _ = _pricers(spines=2)
    assert fast._leaf_hosts is None
