"""Topologies: factories, deterministic routes, explicit construction and its errors."""

from __future__ import annotations

import pytest

from genie.collectives import topology as T
from genie.errors import TopologyError


def test_switch_routes_up_then_down():
    t = T.switch(4, 1e9, 1e-6)
    assert t.route(1, 3) == (2, 7)
    assert [t.link_name(i) for i in t.route(1, 3)] == ["h1->sw0", "sw0->h3"]
    assert t.route(2, 2) == ()
    assert t.route_latency(t.route(0, 1)) == pytest.approx(2e-6)
    assert t.route_latency(()) == t.intra_latency
    assert t.symmetry == "star"


def test_fast_routes_equal_generic_shortest_paths():
    for topo in (T.switch(6, 1e9, 0), T.fully_connected(6, 1e9, 0)):
        generic = T.Topology(topo.hosts, topo.switches, topo.links)
        for a in range(6):
            for b in range(6):
                assert topo.route(a, b) == generic.route(a, b)


def test_ring_takes_the_short_way_clockwise_on_ties():
    t = T.ring(6, 1e9, 1e-6)
    assert t.route(0, 2) == (0, 2)
    assert t.route(0, 3) == (0, 2, 4)  # tie: clockwise
    assert t.route(4, 1) == (8, 10, 0)
    assert t.route(0, 5) == (11,)
    assert [t.link_name(i) for i in t.route(1, 0)] == ["h1->h0"]
    assert T.ring(2, 1e9, 0).route(1, 0) == (1,)


def test_leaf_spine_oversubscription_and_ecmp():
    t = T.leaf_spine(4, 2, 4, 10e9, 1e-6, oversubscription=2.0)
    assert t.n_hosts == 16
    r = t.route(0, 15)
    names = [t.link_name(i) for i in r]
    assert names[0] == "h0->leaf0" and names[-1] == "leaf3->h15" and len(r) == 4
    assert t.links[r[1]].bandwidth == pytest.approx(4 * 10e9 / 2.0 / 2)
    assert len(t.route(0, 1)) == 2  # same leaf
    assert t.route(0, 15) == t.route(0, 15)  # deterministic
    spines = {t.link_name(t.route(a, b)[1]) for a in range(4) for b in range(12, 16)}
    assert len(spines) == 2  # pairs spread over both spines
    assert t.symmetry is None


def test_explicit_construction_for_testbeds():
    t = T.Topology.from_parts(
        ["a", "b", "c"],
        ["s1", "s2"],
        [("a", "s1", 1e9, 1e-6), ("b", "s1", 1e9, 1e-6), ("s1", "s2", 5e8, 2e-6),
         ("c", "s2", 1e9, 1e-6)],
        intra_bandwidth=5e10,
        intra_latency=1e-7,
    )  # fmt: skip
    r = t.route("a", "c")
    assert [t.link_name(i) for i in r] == ["a->s1", "s1->s2", "s2->c"]
    assert t.route_bandwidth(r) == 5e8
    assert t.route_latency(r) == pytest.approx(4e-6)
    assert t.host_index("c") == 2
    assert t.intra_bandwidth == 5e10


@pytest.mark.parametrize(
    ("hosts", "links", "match"),
    [
        (["a", "a"], [], "unique"),
        (["a", "b"], [("a", "x", 1e9, 0)], "unknown node"),
        (["a", "b"], [("a", "b", 0, 0)], "bandwidth"),
        (["a", "b"], [("a", "b", 1e9, -1)], "latency"),
        (["a", "b"], [("a", "a", 1e9, 0)], "loops"),
        ([], [], "at least one host"),
    ],
)
def test_bad_topologies_are_topology_errors(hosts, links, match):
    with pytest.raises(TopologyError, match=match):
        T.Topology.from_parts(hosts, [], links)


def test_unreachable_and_unknown_hosts():
    t = T.Topology.from_parts(["a", "b"], [], [])
    with pytest.raises(TopologyError, match="no path"):
        t.route(0, 1)
    with pytest.raises(TopologyError, match="unknown host"):
        t.route("a", "zz")
    with pytest.raises(TopologyError, match="outside"):
        t.route(0, 5)
    with pytest.raises(TopologyError, match="positive integer"):
        T.switch(0, 1e9, 0)
    with pytest.raises(TopologyError, match="oversubscription"):
        T.leaf_spine(2, 2, 2, 1e9, 0, oversubscription=0)


def test_observed_paths_replace_the_policy_for_their_pairs_only() -> None:
    from genie.collectives.topology import leaf_spine

    topo = leaf_spine(2, 2, 1, 1e9, 1e-6)  # h0 on leaf0, h1 on leaf1, spines 0 and 1
    name = {topo.link_name(i): i for i in range(len(topo.links))}
    via0 = tuple(name[n] for n in ("h0->leaf0", "leaf0->spine0", "spine0->leaf1", "leaf1->h1"))
    via1 = tuple(name[n] for n in ("h0->leaf0", "leaf0->spine1", "spine1->leaf1", "leaf1->h1"))
    seen = topo.with_observed_paths({(0, 1): [via0, via0, via0, via1]})
    res, lat = seen.flow_route(0, 1, 0, 1)
    w = dict(res)
    assert w[name["leaf0->spine0"]] == pytest.approx(0.75)
    assert w[name["leaf0->spine1"]] == pytest.approx(0.25)
    assert w[name["h0->leaf0"]] == pytest.approx(1.0) and lat == pytest.approx(4e-6)
    # the other direction was not observed: the policy (ECMP) decides, as before
    assert seen.flow_route(1, 0, 1, 0) == topo.flow_route(1, 0, 1, 0)
    assert topo._observed == {}  # the original is untouched


def _bfs_to(t: T.Topology, dst: int) -> list[int]:
    """Hop counts to node ``dst`` by a plain breadth-first search (the reference)."""
    dist = [-1] * len(t._out)
    dist[dst] = 0
    todo = [dst]
    while todo:
        nxt = []
        for v in todo:
            for lid in t._in[v]:
                u = t._node_index[t.links[lid].src]
                if dist[u] < 0:
                    dist[u] = dist[v] + 1
                    nxt.append(u)
        todo = nxt
    return dist


def test_distances_through_a_hosts_only_switch_equal_a_search_per_host() -> None:
    bw, lat = 12.5e9, 1e-6
    custom = T.Topology(  # h2 has two NICs on two switches; h3 hangs off h2 (a host as transit)
        ["h0", "h1", "h2", "h3", "h4"],
        ["s0", "s1"],
        [(a, b, bw, lat) for x, y in (("h0", "s0"), ("h1", "s0"), ("h2", "s0"), ("h2", "s1"),
                                      ("h3", "h2"), ("h4", "s1"), ("s0", "s1"))
         for a, b in ((x, y), (y, x))]
        + [("h4", "s0", bw, lat)],  # one-way: h4's links do not all go to one switch
    )  # fmt: skip
    pair = T.Topology(["a", "b"], [], [("a", "b", bw, lat), ("b", "a", bw, lat)])
    tops = [T.leaf_spine(4, 2, 3, bw, lat), T.leaf_spine(3, 1, 5, bw, lat, 2.0), custom, pair]
    for t in tops:
        for d in range(len(t._out)):
            want = _bfs_to(t, d)
            got = t._dist_to(d)
            assert [got[u] for u in range(len(want))] == want, (t.kind, d)
            assert list(got) == want
    # hosts of a leaf-spine are reached through their leaf: one search per leaf, not per host
    ls = T.leaf_spine(4, 2, 3, bw, lat)
    for d in range(len(ls.hosts)):
        ls._dist_to(d)
    assert sum(isinstance(v, list) for v in ls._dist_cache.values()) == 4
    # the through-distances route as the searches did
    for s in range(len(ls.hosts)):
        for d in range(len(ls.hosts)):
            if s != d:
                assert len(ls.route(s, d)) == (2 if s // 3 == d // 3 else 4)


def test_next_hops_memos_give_the_search_routes() -> None:
    """Routes and ECMP candidates with the routing memos (next hops per switch search, links
    between two nodes, a node's one neighbour) equal those of a plain search per host, link
    for link, on leaf-spines (parallel uplinks too) and a host used as transit."""
    bw, lat = 12.5e9, 1e-6
    custom = T.Topology(
        ["h0", "h1", "h2", "h3"],
        ["s0", "s1"],
        [(a, b, bw, lat) for x, y in (("h0", "s0"), ("h1", "s0"), ("h2", "s0"), ("h2", "s1"),
                                      ("h3", "h2"), ("s0", "s1"), ("s0", "s1"))
         for a, b in ((x, y), (y, x))],
    )  # fmt: skip
    tops = [T.leaf_spine(4, 2, 3, bw, lat), T.leaf_spine(3, 3, 2, bw, lat, 2.0), custom]
    for t in tops:
        n = len(t.hosts)
        for d in range(n):
            want = _bfs_to(t, d)
            for v in range(len(t._out)):
                if want[v] > 0:
                    plain = [
                        lid
                        for lid in t._out[v]
                        if want[t._node_index[t.links[lid].dst]] == want[v] - 1
                    ]
                    assert t._next_hops(v, t._dist_to(d)) == plain, (t.kind, v, d)
        for s in range(n):
            for d in range(n):
                if s == d:
                    continue
                route = t.route(s, d)
                assert t.links[route[0]].src == t.hosts[s]
                assert t.links[route[-1]].dst == t.hosts[d]
                assert len(route) == _bfs_to(t, d)[s]
    assert tops[0]._hop_cache and tops[0]._pair_links  # the memos were the ones asked
