"""Hosts with several NICs and rail-optimised fabrics: testbed files, the model, the job options."""

from __future__ import annotations

import pytest

from genie.collectives import build_program
from genie.collectives.cost import estimate
from genie.controller.local import options_for_testbed
from genie.errors import TestbedError
from genie.testbed import dumps_testbed, loads_testbed
from genie.wire.messages import DataOptions

RAIL = """
[testbed]
name = "rail"
kind = "netns"

[intra_host]
bandwidth = "800gbit"
latency = "2us"

[topology]
shape = "rail"
hosts = 4
rails = 2
spines = 2
rate = "1gbit"
"""


def test_rail_shorthand_puts_nic_k_of_every_host_on_rail_leaf_k() -> None:
    tb = loads_testbed(RAIL)
    assert [h.n_nics for h in tb.hosts] == [2] * 4 and [h.ranks for h in tb.hosts] == [2] * 4
    assert tb.endpoint_names()[:3] == ["h0.nic0", "h0.nic1", "h1.nic0"]
    by_nic = {lk.a: lk.b for lk in tb.links if "." in lk.a}
    assert all(by_nic[f"h{i}.nic{k}"] == f"leaf{k}" for i in range(4) for k in range(2))
    up = [lk for lk in tb.links if lk.b.startswith("spine")]
    assert len(up) == 2 * 2 and all(lk.rate == 4 * 1e9 / 8 / 2 for lk in up)  # 1:1, 2 spines
    # every NIC has an address of its own in the testbed's block
    addrs = [a for h in tb.hosts for a in h.nic_addrs()]
    assert len(set(addrs)) == 8 and tb.hosts[0].data_addr == tb.hosts[0].nics[0].data_addr
    assert loads_testbed(dumps_testbed(tb)) == tb


def test_rank_i_of_a_host_uses_nic_i_mod_n_unless_mapped() -> None:
    tb = loads_testbed(RAIL.replace("rails = 2", "rails = 2\nranks_per_host = 4"))
    assert tb.rank_endpoints()[:4] == ["h0.nic0", "h0.nic1", "h0.nic0", "h0.nic1"]
    mapped = loads_testbed(
        '[testbed]\nname = "m"\nkind = "static"\n'
        '[[hosts]]\nname = "a"\ncontrol = "10.0.0.1:7000"\nranks = 4\nrank_nics = [0, 0, 1, 1]\n'
        '[[hosts.nics]]\ndata_addr = "10.1.0.1"\ndevice = "ens1"\n'
        '[[hosts.nics]]\ndata_addr = "10.2.0.1"\n'
        '[[hosts]]\nname = "b"\ncontrol = "10.0.0.2:7000"\n'
        '[[switches]]\nname = "sw"\n'
        '[[links]]\na = "a.nic0"\nb = "sw"\nrate = "100gbit"\n'
        '[[links]]\na = "a.nic1"\nb = "sw"\nrate = "50gbit"\n'
        '[[links]]\na = "b"\nb = "sw"\nrate = "100gbit"\n'
    )
    assert mapped.rank_endpoints() == ["a.nic0", "a.nic0", "a.nic1", "a.nic1", "b"]
    assert mapped.rank_hosts() == [0, 0, 1, 1, 2]
    # round-robin placement: the k-th rank placed on a host takes that host's k-th mapping
    assert mapped.rank_endpoints(["a", "b", "a"]) == ["a.nic0", "b", "a.nic0"]
    assert mapped.rank_nic_addrs(["a", "a", "a", "b"]) == ["10.1.0.1", "10.1.0.1", "10.2.0.1", ""]
    assert mapped.hosts[0].nics[0].device == "ens1"
    assert loads_testbed(dumps_testbed(mapped)) == mapped


def test_a_ranks_traffic_leaves_through_its_nics_link_and_nics_of_one_server_are_intra() -> None:
    tb = loads_testbed(RAIL)
    topo = tb.to_topology()
    assert topo.multi_nic and "4 hosts (8 NICs)" in topo.describe()
    ends = tb.rank_endpoints()
    assert topo.same_server(topo.host_index(ends[0]), topo.host_index(ends[1]))
    # ranks 0 and 1 (one server, NICs 0 and 1): the intra-host path, no link
    res, lat = topo.flow_route(topo.host_index("h0.nic0"), topo.host_index("h0.nic1"), 0, 1)
    assert res == () and lat == pytest.approx(2e-6)
    # rank 1 (h0 NIC 1) to rank 3 (h1 NIC 1): through rail leaf 1 only, NIC 1's links
    res, _ = topo.flow_route(topo.host_index("h0.nic1"), topo.host_index("h1.nic1"), 1, 3)
    assert [topo.link_name(lid) for lid, _ in res] == ["h0.nic1->leaf1", "leaf1->h1.nic1"]
    # a ring over all 8 ranks: 4 of its 8 hops stay in a server, priced on the intra-host path;
    # rank 1 (NIC 1) sends to rank 2 (the next server's NIC 0), rank 0 receives from rank 7
    prog = build_program("all_reduce", "ring", 8, 8 << 20)
    cost = estimate(prog, topo, ends)
    assert cost.intra_bytes > 0
    used = {topo.link_name(lid) for lid in cost.link_bytes}
    assert {"h0.nic1->leaf1", "leaf0->h1.nic0", "leaf0->h0.nic0"} <= used
    assert "h0.nic0->leaf0" not in used and "leaf1->h0.nic1" not in used


def test_the_rail_fabric_beats_one_nic_per_server_for_the_same_ranks() -> None:
    rail = loads_testbed(RAIL)
    one = loads_testbed(
        '[testbed]\nname = "one"\nkind = "netns"\n[intra_host]\nbandwidth = "800gbit"\n'
        '[topology]\nshape = "star"\nhosts = 4\nrate = "1gbit"\nranks_per_host = 2\n'
    )
    prog = build_program("all_to_all", "direct", 8, 8 << 20)
    t_rail = estimate(prog, rail.to_topology(), rail.rank_endpoints()).time_s
    t_one = estimate(prog, one.to_topology(), one.rank_hosts()).time_s
    # twice the NICs at the same rate: an all-to-all leaves a server at twice the rate
    assert t_rail < 0.6 * t_one


def test_the_job_gets_the_testbeds_intra_host_model_and_nic_addresses() -> None:
    tb = loads_testbed(RAIL)
    placement = ["h0", "h0", "h1", "h1"]
    opts = options_for_testbed(tb, DataOptions(), placement)
    assert opts.intra_bandwidth == 100e9 and opts.intra_latency == pytest.approx(2e-6)
    assert opts.rank_addrs == [
        tb.hosts[0].nics[0].data_addr,
        tb.hosts[0].nics[1].data_addr,
        tb.hosts[1].nics[0].data_addr,
        tb.hosts[1].nics[1].data_addr,
    ]
    # what the caller set is kept; a plain testbed changes nothing
    mine = DataOptions(intra_bandwidth=5e9, rank_addrs=["198.18.0.9"] * 4)
    kept = options_for_testbed(tb, mine, placement)
    assert kept.intra_bandwidth == 5e9 and kept.rank_addrs == ["198.18.0.9"] * 4
    plain = loads_testbed(
        '[testbed]\nname = "p"\nkind = "netns"\n[topology]\nshape = "star"\n'
        'hosts = 2\nrate = "1gbit"\n'
    )
    opts = DataOptions()
    assert options_for_testbed(plain, opts, ["h0", "h1"]) is opts


@pytest.mark.parametrize(
    ("extra", "what"),
    [
        ('[[hosts]]\nname = "a"\nnics = 2\n', "link them by name"),
        ('[[hosts]]\nname = "a"\nnics = 99\n', "1..64"),
        ('[[hosts]]\nname = "a"\nranks = 2\nrank_nics = [0]\n', "1 NICs for 2 ranks"),
        ('[[hosts]]\nname = "a"\nnics = 2\nranks = 2\nrank_nics = [0, 2]\n', "0..1"),
        ('[[hosts]]\nname = "a"\nnics = 2\nnic = "eth0"\n', "interfaces from genie"),
    ],
)
def test_bad_nic_settings_are_refused_in_one_line(extra: str, what: str) -> None:
    text = (
        '[testbed]\nname = "x"\nkind = "netns"\n'
        + extra
        + '[[hosts]]\nname = "b"\n[[switches]]\nname = "s"\n'
        '[[links]]\na = "a"\nb = "s"\nrate = "1gbit"\n[[links]]\na = "b"\nb = "s"\nrate = "1gbit"\n'
    )
    with pytest.raises(TestbedError, match=what) as info:
        loads_testbed(text, "t.toml")
    assert "\n" not in str(info.value)


def test_rail_shape_needs_rails_and_whole_groups() -> None:
    with pytest.raises(TestbedError, match="rails: is required"):
        loads_testbed(RAIL.replace("rails = 2\n", ""))
    with pytest.raises(TestbedError, match="groups of 3"):
        loads_testbed(RAIL.replace("spines = 2", "spines = 2\nhosts_per_leaf = 3"))
    grouped = loads_testbed(RAIL.replace("spines = 2", "spines = 2\nhosts_per_leaf = 2"))
    assert grouped.switch_names() == ["leaf0", "leaf1", "leaf2", "leaf3", "spine0", "spine1"]


def test_readme_fabrics_give_every_server_the_same_400g() -> None:
    """The README's "Which fabric?" files compare topologies at equal bandwidth per server."""
    from pathlib import Path

    from genie.testbed import load_testbed

    here = Path(__file__).resolve().parent.parent / "testbed"
    fabrics = {f: load_testbed(here / f"fabric-{f}.toml") for f in ("star", "rail")}
    for name in ("leafspine-1to1", "leafspine-2to1"):
        fabrics[name] = load_testbed(here / f"fabric-{name}.toml")
    for tb in fabrics.values():  # 64 GPUs, 400 Gbit/s out of every server
        assert tb.n_ranks == 64 and len(tb.hosts) == 8
        per_server = {}
        for lk in tb.links:
            host = lk.a.split(".")[0]
            if host in {h.name for h in tb.hosts}:
                per_server[host] = per_server.get(host, 0) + lk.rate
        assert set(per_server.values()) == {400e9 / 8}
