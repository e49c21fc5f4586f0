"""The contention-free shortcut against the flow-by-flow simulation it stands for: every field
of the Cost equal (bit for bit), where it applies, and the reference used where it declines."""

from __future__ import annotations

import pytest

from genie.collectives import Program, build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.collectives.program import Op, ProgramSpec, Step
from genie.collectives.registry import build_steps
from genie.errors import CollectiveError

B = 12.5e9  # 100 Gbit/s in bytes/s
LAT = 5e-7


def _same(fast, ref) -> None:
    """Every number the cost model reports, equal to the reference's."""
    assert ref.method == "event"
    assert fast.time_s == ref.time_s
    assert fast.rank_finish_s == ref.rank_finish_s
    assert fast.link_bytes == ref.link_bytes
    assert fast.intra_bytes == ref.intra_bytes
    assert type(fast.intra_bytes) is type(ref.intra_bytes)
    assert (fast.messages, fast.bytes_sent, fast.steps) == (ref.messages, ref.bytes_sent, ref.steps)
    assert fast.bottleneck_s == ref.bottleneck_s


def _contiguous(leaves: int, per_leaf: int, members: int, ranks_per_host: int = 1) -> list[int]:
    """The group's hosts: the first hosts of each leaf in turn, ring order contiguous per leaf."""
    hosts = [lf * per_leaf + i for lf in range(leaves) for i in range(members // leaves)]
    return [h for h in hosts for _ in range(ranks_per_host)]


@pytest.mark.parametrize("leaves,per_leaf,over", [(2, 16, 1.0), (3, 8, 4.0), (4, 4, 1000.0)])
@pytest.mark.parametrize(
    "coll,members,unit,chunks",
    [
        ("all_reduce", 8, 4096, 1),
        ("all_reduce", 12, 1000, 4),
        ("reduce_scatter", 16, 3000, 1),
        ("reduce_scatter", 12, 512, 2),
        ("all_gather", 8, 97, 1),
        ("all_gather", 16, 1000, 3),
    ],
)
def test_rings_on_a_leaf_spine_match_the_flow_simulation(
    leaves, per_leaf, over, coll, members, unit, chunks
):
    members -= members % leaves  # evenly spread over the leaves
    if members // leaves > per_leaf:
        pytest.skip("more members than hosts")
    topo = T.leaf_spine(leaves, 1, per_leaf, B, LAT, over)
    p = build_program(coll, "ring", members, members * unit * chunks, chunks=chunks)
    hosts = _contiguous(leaves, per_leaf, members)
    fast = estimate(p, topo, hosts)
    # with chunks, a rank may get its next round's first chunk before it has sent this round's
    # last one (a chunk's transfer outlasting a hop's latency, or a slow uplink): its sends
    # then leave out of step order (O4) and the shortcut leaves the ring to the event simulation
    # likewise behind an uplink slower than a host link (1000:1 on 4 hosts a leaf): the rank
    # before it falls behind, and two of its sends become ready at one instant (O4 declines)
    if chunks == 1 and over <= per_leaf:
        assert fast.method == "contention-free"
    _same(fast, estimate(p, topo, hosts, contention_free=False))


@pytest.mark.parametrize("over", [1.0, 4.0, 1000.0])
def test_several_ranks_per_host_and_oversubscribed_uplinks(over):
    # two ranks per host: one of each pair sends over the intra-host port; at 1000:1 the uplink
    # (8 x B / 1000) is slower than a host link and the rank before it falls behind (O4 fails
    # at the reduce-scatter's end: the shortcut declines and the answer is the reference's)
    topo = T.leaf_spine(2, 1, 8, B, LAT, over)
    p = build_program("all_reduce", "ring", 16, 16 * 8192, ranks_per_host=2)
    hosts = _contiguous(2, 8, 8, ranks_per_host=2)
    fast = estimate(p, topo, hosts)
    assert fast.method == ("event" if over > 8 else "contention-free")
    assert fast.intra_bytes > 0
    _same(fast, estimate(p, topo, hosts, contention_free=False))


def test_compute_bandwidth_and_switch_placements():
    p = build_program("all_reduce", "ring", 6, 6 * 5000, chunks=2)
    topo = T.switch(6, B, LAT)
    for hosts in ([5, 4, 3, 2, 1, 0], [2, 0, 4, 1, 5, 3]):
        fast = estimate(p, topo, hosts, compute_bandwidth=3e9)
        assert fast.method == "contention-free"
        _same(fast, estimate(p, topo, hosts, compute_bandwidth=3e9, contention_free=False))


@pytest.mark.parametrize(
    "what",
    ["interleaved", "uneven-shards", "overhead", "channels", "direct", "two-spines"],
)
def test_declines_where_an_obligation_fails_and_prices_as_the_reference(what):
    topo = T.leaf_spine(2, 1, 8, B, LAT, 4.0)
    p = build_program("all_reduce", "ring", 8, 8 * 4096)
    hosts = _contiguous(2, 8, 8)
    declines = True
    if what == "interleaved":  # ring order alternates leaves: every hop shares the uplink
        hosts = [(i % 2) * 8 + i // 2 for i in range(8)]
    elif what == "uneven-shards":
        p = build_program("all_reduce", "ring", 8, 8 * 4096 + 3)
    elif what == "overhead":
        topo.step_overhead = 1e-6
    elif what == "channels":  # NCCL-style: a connection per channel on the same links
        from genie.collectives.nccl_wire import NcclStyle

        p = build_program("all_reduce", "ring", 8, 8 << 20, style=NcclStyle(channels=2))
    elif what == "direct":  # every rank to every rank: the uplinks carry many connections
        p = build_program("all_to_all", "direct", 8, 8 * 4096)
    else:  # two spines, ECMP: may or may not collide; either way the same answer
        topo = T.leaf_spine(2, 2, 8, B, LAT, 1.0)
        declines = False
    fast = estimate(p, topo, hosts)
    ref = estimate(p, topo, hosts, contention_free=False)
    if declines:
        assert fast.method == "event"
        with pytest.raises(CollectiveError, match="contention-free shortcut does not apply"):
            estimate(p, topo, hosts, contention_free=True)
    assert fast.time_s == ref.time_s
    assert fast.rank_finish_s == ref.rank_finish_s
    assert fast.link_bytes == ref.link_bytes


def test_tied_sends_on_one_connection_decline():
    # O4: two SENDs to the same peer ready at once, of different sizes: the FIFO order of the
    # event simulation, not step order, would decide; the shortcut must leave it to the reference
    def builder(spec: ProgramSpec, r: int) -> list[Step]:
        n = spec.n_ranks
        return [
            Step(Op.SEND, (r + 1) % n, 1000, 0),
            Step(Op.SEND, (r + 1) % n, 3000, 1),
            Step(Op.RECV, (r - 1) % n, 1000, 0),
            Step(Op.RECV, (r - 1) % n, 3000, 1),
        ]

    p = Program(ProgramSpec(collective="all_gather", algorithm="ring", n_ranks=4, size=4), builder)
    topo = T.switch(4, B, LAT)
    with pytest.raises(CollectiveError, match="contention-free"):
        estimate(p, topo, [3, 2, 1, 0], contention_free=True)
    assert estimate(p, topo, [3, 2, 1, 0]).method == "event"


def test_rank_dependent_steps_decline():
    # O1: a program whose ranks are not rotations of rank 0 (rank 2 sends more) is refused
    base = build_program("all_gather", "ring", 4, 4000)

    def builder(spec: ProgramSpec, r: int) -> list[Step]:
        steps = build_steps(spec, r)
        if r == 2:
            steps[0] = Step(Op.SEND, steps[0].peer, steps[0].nbytes + 8, steps[0].tag)
        return steps

    p = Program(base.spec, builder)
    topo = T.switch(4, B, LAT)
    with pytest.raises(CollectiveError, match="contention-free"):
        estimate(p, topo, [3, 2, 1, 0], contention_free=True)


def test_large_ring_beyond_the_event_step_limit_is_priced():
    # 1,200 members x 3,597 steps: over EVENT_STEP_LIMIT, refused by the event simulation; the
    # shortcut prices it (the rings above check it against the reference)
    topo = T.leaf_spine(2, 1, 600, B, LAT)
    p = build_program("reduce_scatter", "ring", 1200, 1200 * 64)
    hosts = _contiguous(2, 600, 1200)
    with pytest.raises(CollectiveError, match="steps to simulate"):
        estimate(p, topo, hosts, contention_free=False)
    cost = estimate(p, topo, hosts)
    assert cost.method == "contention-free" and len(cost.rank_finish_s) == 1200
    assert cost.time_s > 1199 * 64 / B  # 1,199 transfers one after another at least
