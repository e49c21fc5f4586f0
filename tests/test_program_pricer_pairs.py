"""``ProgramPricer`` on a switch prices a group by its shape (the pattern of its hosts) and moves
the link bytes onto the group's own hosts; pairs (send/recv, two-rank groups: most transfers of
a pipeline-parallel trace) take a shortcut to that pattern. Checked against pricing every group
as itself (``canonical=False``): the same latency, links and bytes, bit for bit, for pairs on two
hosts and on one, in both orders, and for larger groups with shared hosts."""

from __future__ import annotations

import pytest

from genie.collectives.topology import switch
from genie.sim.network import Transfer
from genie.sim.program_pricer import ProgramPricer

P2P, ALL_REDUCE, ALL_GATHER = -1, 0, 2
# 6 hosts, two ranks each (rank r on host r // 2): pairs across hosts, within a host, reversed
GROUPS = [(0, 2), (2, 0), (5, 11), (0, 1), (7, 6), (3, 10), (0, 1, 2, 3), (9, 4, 5, 8, 1)]


@pytest.mark.parametrize("ctype", [P2P, ALL_REDUCE, ALL_GATHER])
def test_groups_priced_by_shape_are_priced_as_themselves(ctype: int) -> None:
    topo = switch(6, 50e9, 500e-9, intra_bandwidth=200e9)
    hosts = [r // 2 for r in range(12)]
    fast = ProgramPricer(topo, hosts, 12)
    ref = ProgramPricer(topo, hosts, 12, canonical=False)
    assert fast.canonical and not ref.canonical
    for g, ranks in enumerate(GROUPS):
        if ctype == P2P and len(ranks) != 2:
            continue
        t = Transfer(g, ctype, 3 << 20, ranks, -1 if ctype == P2P else g)
        a, b = fast.price(t), ref.price(t)
        assert a.latency == b.latency
        assert a.links.tolist() == b.links.tolist()
        assert a.nbytes.tolist() == b.nbytes.tolist()
    assert len(fast._shapes) < len(ref._programs)  # shapes repeat: each priced once
    if ctype == P2P:  # two shapes of pair: on two hosts, on one
        assert len(fast._shapes) == 2
