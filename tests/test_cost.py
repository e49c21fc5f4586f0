"""The cost model: closed forms, fair link sharing, the symmetric shortcut against the full run."""

from __future__ import annotations

import math

import pytest

from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate, estimate_concurrent, nccl_size
from genie.errors import CollectiveError, DeadlockError, TopologyError
from genie.vocabulary import algbw, bus_factor, busbw, closed_form

B = 12.5e9  # 100 Gbit/s in bytes/s
LAT = 1e-6  # per link; a switch path has two links


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


CASES = [
    ("all_reduce", "ring", 8, 64 << 20, 1),
    ("all_reduce", "ring", 8, 64 << 20, 4),
    ("all_reduce", "ring", 7, 7 * 3000, 3),
    ("reduce_scatter", "ring", 6, 6 * 1024, 1),
    ("all_gather", "ring", 5, 4096, 2),
    ("all_reduce", "halvingDoubling", 8, 1 << 20, 1),
    ("all_reduce", "halvingDoubling", 16, 1 << 22, 1),
    ("reduce_scatter", "halvingDoubling", 16, 1 << 20, 1),
    ("all_gather", "halvingDoubling", 4, 1 << 18, 1),
    ("broadcast", "tree", 8, 1 << 20, 1),
    ("reduce", "tree", 16, 1 << 20, 1),
    ("all_reduce", "tree", 8, 1 << 20, 1),
    ("all_to_all", "direct", 8, 8 << 20, 1),
    ("send_recv", "pairwise", 4, 1 << 20, 1),
]


@pytest.mark.parametrize(("coll", "algo", "n", "size", "chunks"), CASES)
def test_matches_closed_form_on_a_uniform_switch(coll, algo, n, size, chunks):
    p = build_program(coll, algo, n, size, chunks=chunks)
    cf = closed_form(coll, algo, n, size, B, 2 * LAT, chunks=chunks)
    for symmetric in (None, False):
        c = estimate(p, T.switch(n, B, LAT), symmetric=symmetric)
        assert _rel(c.time_s, cf) < 1e-3, (c.method, c.time_s, cf)


def test_binomial_broadcast_off_a_power_of_two_is_bounded_by_its_closed_form():
    # n = 7: the root's second send starts as its first one's bytes are out (its latency
    # overlaps), so the tree beats ceil(log2 n)(a + S/B) by at most one message latency
    p = build_program("broadcast", "tree", 7, 1 << 20)
    cf = closed_form("broadcast", "tree", 7, 1 << 20, B, 2 * LAT)
    t = estimate(p, T.switch(7, B, LAT)).time_s
    assert cf - 2 * LAT - 1e-12 <= t <= cf + 1e-12


@pytest.mark.parametrize("size", [64 << 10, 1 << 20, 64 << 20])
@pytest.mark.parametrize("chunks", [1, 2, 4, 8])
def test_chunks_pipeline_a_ring_as_its_closed_form_says(size, chunks):
    # T = max(k S/(nB) + a, k a + (k + C - 1) S/(nCB)): exact where one regime holds, within
    # 2% where they cross (fair sharing stands in for the link's FIFO there)
    n, k = 8, 14
    p = build_program("all_reduce", "ring", n, size, chunks=chunks)
    t = estimate(p, T.switch(n, B, LAT), symmetric=False).time_s
    cf = closed_form("all_reduce", "ring", n, size, B, 2 * LAT, chunks=chunks)
    assert _rel(t, cf) < 0.02
    latency_bound = k * 2 * LAT + (k + chunks - 1) * size / (n * chunks * B)
    if latency_bound > k * size / (n * B) + 2 * LAT:
        assert cf == pytest.approx(latency_bound)  # k + C - 1 stages of a C-times smaller message


def test_more_chunks_trade_latency_for_overlap():
    n, size = 8, 64 << 10  # latency-bound: chunks hide latency behind transmission
    times = [
        estimate(build_program("all_reduce", "ring", n, size, chunks=c), T.switch(n, B, LAT)).time_s
        for c in (1, 2, 4, 8)
    ]
    assert times == sorted(times, reverse=True) and times[-1] < 0.85 * times[0]


def test_direct_all_to_all_window_bounds_sends_on_the_wire_not_the_time():
    n, size = 9, 9 * 4096
    for window in (1, 2, 3, 8):
        p = build_program("all_to_all", "direct", n, size, window=window)
        cf = closed_form("all_to_all", "direct", n, size, B, 2 * LAT, window=window)
        assert _rel(estimate(p, T.switch(n, B, LAT)).time_s, cf) < 1e-3


def test_closed_form_formulas():
    n, s, a, b = 8, 8e6, 1e-6, 1e9
    assert closed_form("all_reduce", "ring", n, s, b, a) == pytest.approx(14 * (a + s / 8 / b))
    assert closed_form("all_gather", "ring", n, 1e6, b, a) == pytest.approx(7 * (a + 1e6 / b))
    assert closed_form("all_reduce", "halvingDoubling", n, s, b, a) == pytest.approx(
        6 * a + 2 * 7 / 8 * s / b
    )
    with pytest.raises(CollectiveError, match="power of two"):
        closed_form("all_reduce", "halvingDoubling", 6, s, b, a)
    with pytest.raises(CollectiveError, match="no closed form"):
        closed_form("all_reduce", "doubleBinaryTree", 8, s, b, a)


def test_two_programs_on_one_link_take_twice_as_long():
    topo = T.Topology.from_parts(["a", "b"], [], [("a", "b", B, 0.0)])
    size = 10 << 20
    p = build_program("send_recv", "pairwise", 2, size, oneway=True)
    alone = estimate(p, topo).time_s
    assert alone == pytest.approx(size / B)
    both = estimate_concurrent([(p, 0.0), (p, 0.0)], topo)
    for c in both:
        assert c.time_s == pytest.approx(2 * alone, rel=1e-9)
        assert c.link_bytes == {0: size}
    # one starting halfway through the other: they share the rest fairly
    late = estimate_concurrent([(p, 0.0), (p, alone / 2)], topo)
    assert late[0].time_s == pytest.approx(1.5 * alone, rel=1e-9)
    assert late[1].time_s == pytest.approx(1.5 * alone, rel=1e-9)


def test_link_latency_is_paid_once_per_message_and_shared_bandwidth_twice():
    lat = 5e-6
    topo = T.Topology.from_parts(["a", "b"], [], [("a", "b", B, lat)])
    size = 1 << 20
    p = build_program("send_recv", "pairwise", 2, size, oneway=True)
    both = estimate_concurrent([(p, 0.0), (p, 0.0)], topo)
    assert both[0].time_s == pytest.approx(lat + 2 * size / B)


def test_two_ring_all_reduces_on_one_switch_share_it():
    n, size = 8, 8 << 20
    topo = T.switch(n, B, LAT)
    p = build_program("all_reduce", "ring", n, size)
    one = estimate(p, topo).time_s
    two = estimate_concurrent([(p, 0.0), (p, 0.0)], topo)
    beta = 2 * (n - 1) * size / n / B
    assert two[0].time_s == pytest.approx(one + beta, rel=1e-6)


SYM = [
    ("all_reduce", "ring", 1),
    ("all_reduce", "ring", 3),
    ("reduce_scatter", "ring", 2),
    ("all_gather", "ring", 1),
    ("all_reduce", "direct", 2),
    ("all_gather", "direct", 1),
    ("all_to_all", "direct", 1),
    ("send_recv", "pairwise", 2),
]


@pytest.mark.parametrize(("coll", "algo", "chunks"), SYM)
@pytest.mark.parametrize("kind", ["switch", "fully_connected", "ring"])
def test_symmetric_shortcut_agrees_with_full_simulation(coll, algo, chunks, kind):
    for n in (2, 3, 6):
        topo = T.FACTORIES[kind](n, B, LAT)
        p = build_program(coll, algo, n, n * chunks * 6000, chunks=chunks, window=2)
        fast = estimate(p, topo)
        full = estimate(p, topo, symmetric=False)
        assert fast.method == "symmetric" and full.method == "event"
        assert _rel(fast.time_s, full.time_s) < 1e-9
        assert fast.link_bytes == full.link_bytes
        assert fast.messages == full.messages and fast.bytes_sent == full.bytes_sent


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("kind", ["switch", "fully_connected"])
def test_xor_shortcut_for_halving_doubling_agrees_with_full_simulation(coll, kind):
    for n, chunks in ((2, 1), (4, 2), (8, 1), (16, 3)):
        topo = T.FACTORIES[kind](n, B, LAT)
        p = build_program(coll, "halvingDoubling", n, n * chunks * 4096, chunks=chunks)
        fast = estimate(p, topo)
        full = estimate(p, topo, symmetric=False)
        assert fast.method == "symmetric" and full.method == "event"
        assert _rel(fast.time_s, full.time_s) < 1e-9
        assert fast.link_bytes == full.link_bytes
    # not a power of two, or a ring network: no shortcut
    assert estimate(
        build_program(coll, "halvingDoubling", 6, 6000), T.switch(6, B, LAT)
    ).method == ("event")
    assert estimate(build_program(coll, "halvingDoubling", 4, 4000), T.ring(4, B, LAT)).method == (
        "event"
    )


def test_uneven_shards_use_the_full_simulation():
    p = build_program("all_reduce", "ring", 5, 1001)
    c = estimate(p, T.switch(5, B, LAT))
    assert c.method == "event"
    with pytest.raises(CollectiveError, match="shortcut does not apply"):
        estimate(build_program("all_reduce", "tree", 4, 64), T.switch(4, B, LAT), symmetric=True)


def test_ring_topology_multi_hop_loads_every_link_it_crosses():
    n = 6
    topo = T.ring(n, B, LAT)
    p = build_program("all_to_all", "direct", n, n * 6000)
    fast, full = estimate(p, topo), estimate(p, topo, symmetric=False)
    assert fast.time_s == pytest.approx(full.time_s, rel=1e-9)
    # every block of 6000 B crosses min(s, n-s) links: 2*(1+2) + 3 hops per rank, 12 links
    assert sum(full.link_bytes.values()) == n * 6000 * (1 + 2 + 3 + 2 + 1)


def test_hierarchical_uses_intra_host_path_and_fewer_network_bytes():
    n, k, size = 8, 4, 8 << 20
    topo = T.switch(2, B, LAT, intra_bandwidth=4 * B)
    h = estimate(build_program("all_reduce", "hierarchical", n, size, ranks_per_host=k), topo)
    r = estimate(build_program("all_reduce", "ring", n, size, ranks_per_host=k), topo)
    assert h.intra_bytes > 0 and h.method == "event"
    assert sum(h.link_bytes.values()) < sum(r.link_bytes.values())
    assert h.time_s < r.time_s


def test_leaf_spine_oversubscription_slows_cross_leaf_traffic():
    size = 16 << 20
    p = build_program("all_reduce", "ring", 8, size)
    full = estimate(p, T.leaf_spine(2, 2, 4, B, LAT, 1.0)).time_s
    over = estimate(p, T.leaf_spine(2, 2, 4, B, LAT, 4.0)).time_s
    assert over > full * 1.5


def test_compute_bandwidth_adds_reduction_time():
    p = build_program("reduce", "tree", 2, 1 << 20)
    topo = T.switch(2, B, LAT)
    base = estimate(p, topo).time_s
    slow = estimate(p, topo, compute_bandwidth=1e9).time_s
    assert slow == pytest.approx(base + (1 << 20) / 1e9)


def test_placement_and_errors():
    p = build_program("all_reduce", "ring", 4, 4000)
    topo = T.switch(4, B, LAT)
    rev = estimate(p, topo, placement=["h3", "h2", "h1", "h0"])
    assert rev.method == "contention-free"  # not the symmetric shortcut: hosts reversed
    ref = estimate(p, topo, placement=["h3", "h2", "h1", "h0"], symmetric=False)
    assert ref.method == "event" and ref.time_s == rev.time_s
    assert rev.time_s == pytest.approx(estimate(p, topo).time_s)
    with pytest.raises(TopologyError, match="need 8 hosts"):
        estimate(build_program("all_reduce", "ring", 8, 64), topo)
    with pytest.raises(TopologyError, match="lists 2 hosts"):
        estimate(p, topo, placement=[0, 1])
    with pytest.raises(TopologyError, match="unknown host"):
        estimate(p, topo, placement={0: "h0", 1: "h1", 2: "h2", 3: "x"})


def test_cost_model_reports_deadlock():
    from genie.collectives import Program
    from genie.collectives.registry import build_steps

    base = build_program("all_reduce", "ring", 3, 30)
    broken = Program(base.spec, lambda s, r: build_steps(s, r) if r else [])
    with pytest.raises(DeadlockError, match="deadlock"):
        estimate(broken, T.switch(3, B, LAT), symmetric=False)


def test_nccl_tests_factors():
    assert bus_factor("all_reduce", 8) == pytest.approx(14 / 8)
    for c in ("reduce_scatter", "all_gather", "all_to_all"):
        assert bus_factor(c, 8) == pytest.approx(7 / 8)
    for c in ("broadcast", "reduce", "send_recv"):
        assert bus_factor(c, 8) == 1.0
    assert algbw(1e9, 0.5) == 2e9
    assert busbw("all_reduce", 4, 1e9, 1.0) == pytest.approx(1.5e9)
    assert algbw(1, 0) == math.inf
    assert nccl_size(build_program("all_gather", "ring", 4, 100)) == 400
    assert nccl_size(build_program("all_gather", "ring", 4, 100, size_convention="nccl")) == 100


def test_ring_all_reduce_bus_bandwidth_approaches_link_rate():
    n, size = 16, 1 << 30
    p = build_program("all_reduce", "ring", n, size)
    t = estimate(p, T.switch(n, B, LAT)).time_s
    assert busbw("all_reduce", n, size, t) == pytest.approx(B, rel=1e-3)


def test_large_uneven_program_uses_the_approximate_shortcut():
    n, size = 1024, (64 << 20) + 1  # 1,025 B not divisible: shards differ by a byte
    p = build_program("all_reduce", "ring", n, size)
    c = estimate(p, T.switch(n, B, LAT))
    assert c.method == "symmetric-approx"
    assert _rel(c.time_s, closed_form("all_reduce", "ring", n, size, B, 2 * LAT)) < 1e-3


def test_1024_rank_ring_with_4_chunks_is_priced_by_one_rank():
    p = build_program("all_reduce", "ring", 1024, 64 << 20, chunks=4)
    c = estimate(p, T.switch(1024, B, LAT))
    assert c.method == "symmetric" and c.steps == len(p.steps(0))
    assert c.messages == 1024 * 4 * 2 * 1023
    assert len(c.link_bytes) == 2048
    cf = closed_form("all_reduce", "ring", 1024, 64 << 20, B, 2 * LAT, chunks=4)
    assert _rel(c.time_s, cf) < 1e-3


def test_intra_host_port_is_shared_by_programs_in_flight():
    topo = T.Topology(["h0"], [], [], intra_bandwidth=1e9, intra_latency=0.0)
    p = build_program("send_recv", "pairwise", 2, 10**6, oneway=True, ranks_per_host=2)
    alone = estimate(p, topo)
    assert alone.intra_bytes == 10**6 and alone.link_bytes == {}
    assert alone.time_s == pytest.approx(1e-3)
    both = estimate_concurrent([(p, 0.0), (p, 0.0)], topo)
    assert both[1].time_s == pytest.approx(2e-3)


def test_too_large_for_the_full_simulation_is_refused_quickly():
    p = build_program("all_reduce", "ring", 1024, 64 << 20, chunks=4)
    with pytest.raises(CollectiveError, match="steps to simulate in full"):
        estimate(p, T.leaf_spine(32, 4, 32, B, LAT))


def test_too_many_flows_per_link_is_refused_not_left_running():
    p = build_program("all_to_all", "direct", 64, 64 * 64)
    with pytest.raises(CollectiveError, match="re-rated flows"):
        estimate_concurrent([(p, 0.0)], T.switch(64, B, LAT), max_work=10_000)
    assert estimate_concurrent([(p, 0.0)], T.switch(64, B, LAT))[0].time_s > 0


def test_long_chains_of_local_steps_do_not_recurse():
    from genie.collectives import Op, Program, Step

    chain = 5000  # COPYs one after the other, all free, all released by one RECV

    def steps(_spec, r):
        if r == 1:
            return [Step(Op.SEND, peer=0, nbytes=8)]
        out = [Step(Op.RECV, peer=1, nbytes=8)]
        out += [Step(Op.COPY, nbytes=8, src=0, deps=(0, i) if i else (0,)) for i in range(chain)]
        return out

    base = build_program("send_recv", "pairwise", 2, 8)
    p = Program(base.spec, steps)
    c = estimate(p, T.switch(2, B, LAT), symmetric=False)
    assert c.time_s == pytest.approx(2 * LAT + 8 / B)
