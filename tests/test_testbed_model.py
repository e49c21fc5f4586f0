"""Testbed descriptions: shipped examples, shorthands, round trip, and errors with file:line:key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genie.errors import TestbedError
from genie.testbed import dumps_testbed, load_testbed, loads_testbed, loopback_testbed
from genie.testbed.toml_lines import key_lines

EXAMPLES = Path(__file__).resolve().parent.parent / "testbed"


def _lab_filled(tmp_path: Path) -> Path:
    text = (EXAMPLES / "lab.toml").read_text()
    text = text.replace("<10.0.0.1", "10.0.0.1").replace("<192.168.100.1", "192.168.100.1")
    text = text.replace(">", "").replace("<", "")
    out = tmp_path / "lab.toml"
    out.write_text(text)
    return out


def test_netns_star_example_expands_to_four_hosts_on_one_switch() -> None:
    tb = load_testbed(EXAMPLES / "netns-star.toml")
    assert tb.kind == "netns" and tb.transport == "tcp"
    assert [h.name for h in tb.hosts] == ["h0", "h1", "h2", "h3"]
    assert [h.netns for h in tb.hosts] == ["genie-h0", "genie-h1", "genie-h2", "genie-h3"]
    assert [s.netns for s in tb.switches] == ["genie-sw0"]
    assert {(lk.a, lk.b) for lk in tb.links} == {(f"h{i}", "sw0") for i in range(4)}
    assert all(lk.rate == 1e9 / 8 for lk in tb.links)
    assert [h.data_addr for h in tb.hosts] == [f"198.18.0.{i}" for i in range(1, 5)]
    assert tb.hosts[1].control == "198.19.0.6:7000"
    assert len({h.control for h in tb.hosts}) == 4


def test_leafspine_example_uplink_is_oversubscribed_two_to_one() -> None:
    tb = load_testbed(EXAMPLES / "netns-leafspine.toml")
    assert tb.switch_names() == ["leaf0", "leaf1", "spine0"]
    host_links = [lk for lk in tb.links if lk.a.startswith("h")]
    up = [lk for lk in tb.links if lk.b == "spine0"]
    assert {(lk.a, lk.b) for lk in host_links} == {
        ("h0", "leaf0"),
        ("h1", "leaf0"),
        ("h2", "leaf1"),
        ("h3", "leaf1"),
    }
    per_leaf_host_capacity = 2 * host_links[0].rate
    assert all(per_leaf_host_capacity / lk.rate == pytest.approx(2.0) for lk in up)


def test_leafspine_uplink_rate_splits_over_spines_for_static_kind() -> None:
    tb = loads_testbed(
        '[testbed]\nname = "ls"\nkind = "static"\n[topology]\nshape = "leafspine"\n'
        'leaves = 3\nspines = 2\nhosts_per_leaf = 4\noversubscription = 4\nrate = "100gbit"\n'
        "[[hosts]]\n"
        + "".join(
            f'name = "n{i}"\ncontrol = "10.0.0.{i + 1}:7000"\n' + ("[[hosts]]\n" if i < 11 else "")
            for i in range(12)
        )
    )
    up = [lk for lk in tb.links if lk.b.startswith("spine")]
    assert len(up) == 6
    assert all(lk.rate == pytest.approx(4 * 100e9 / 8 / (4 * 2)) for lk in up)
    assert [lk.b for lk in tb.links if lk.a == "n5"] == ["leaf1"]


def test_ring_shorthand_links_neighbours_in_a_cycle() -> None:
    tb = loads_testbed(
        '[testbed]\nname = "r"\nkind = "netns"\n[topology]\nshape = "ring"\nhosts = 5\n'
        'rate = "100mbit"\n'
    )
    assert tb.switches == []
    assert [(lk.a, lk.b) for lk in tb.links] == [
        ("h0", "h1"),
        ("h1", "h2"),
        ("h2", "h3"),
        ("h3", "h4"),
        ("h4", "h0"),
    ]


def test_lab_example_refuses_unfilled_placeholders_then_loads_filled(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"lab\.toml:\d+: hosts\[0\]\.control: .*placeholder"):
        load_testbed(EXAMPLES / "lab.toml")
    tb = load_testbed(_lab_filled(tmp_path))
    assert tb.transport == "rdma" and tb.n_ranks == 32
    assert tb.hosts[2].rdma_device == "mlx5_0" and tb.hosts[2].data_addr == "192.168.100.12"
    assert tb.intra_host.bandwidth == 300e9 and tb.intra_host.latency == 1e-6
    assert tb.rank_hosts()[7:10] == [0, 1, 1]


def test_rank_hosts_follows_ranks_per_host() -> None:
    tb = loads_testbed(
        '[testbed]\nname = "x"\nkind = "static"\n'
        '[[hosts]]\nname = "a"\ncontrol = "127.0.0.1:1"\nranks = 2\n'
        '[[hosts]]\nname = "b"\ncontrol = "127.0.0.1:2"\nranks = 3\n'
        '[[switches]]\nname = "s"\n'
        '[[links]]\na = "a"\nb = "s"\nrate = "1gbit"\n[[links]]\na = "b"\nb = "s"\nrate = "1gbit"\n'
    )
    assert tb.n_ranks == 5
    assert tb.rank_hosts() == [0, 0, 1, 1, 1]
    assert tb.hosts[0].data_addr == "127.0.0.1"
    assert tb.links[0].rate == tb.links[1].rate == 1.25e8


@pytest.mark.parametrize(
    "name",
    [
        "loopback",
        "netns-star",
        "netns-leafspine",
        "fabric-star",
        "fabric-leafspine-1to1",
        "fabric-leafspine-2to1",
        "fabric-rail",
    ],
)
def test_examples_round_trip_through_dumps(name: str) -> None:
    tb = load_testbed(EXAMPLES / f"{name}.toml")
    assert loads_testbed(dumps_testbed(tb)) == tb


def test_lab_round_trips(tmp_path: Path) -> None:
    tb = load_testbed(_lab_filled(tmp_path))
    assert loads_testbed(dumps_testbed(tb)) == tb


def test_loopback_testbed_hosts_have_distinct_ports_and_round_trip() -> None:
    tb = loopback_testbed(3, base_port=9100)
    assert [h.control for h in tb.hosts] == ["127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:9102"]
    assert {h.data_addr for h in tb.hosts} == {"127.0.0.1"}
    assert tb.kind == "static" and tb.n_ranks == 3
    assert loads_testbed(dumps_testbed(tb)) == tb
    assert loopback_testbed(1).links == []
    with pytest.raises(TestbedError):
        loopback_testbed(0)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    bits=st.integers(1000, 10**12),
    mtu=st.integers(68, 65535),
    ranks=st.integers(1, 8),
    kind=st.sampled_from(["static", "netns"]),
)
def test_star_of_any_size_round_trips(n: int, bits: int, mtu: int, ranks: int, kind: str) -> None:
    hosts = (
        ""
        if kind == "netns"
        else "".join(f'[[hosts]]\nname = "n{i}"\ncontrol = "10.1.0.{i}:70"\n' for i in range(n))
    )
    text = (
        f'[testbed]\nname = "s"\nkind = "{kind}"\n[topology]\nshape = "star"\nhosts = {n}\n'
        f'rate = "{bits}bit"\nmtu = {mtu}\nranks_per_host = {ranks}\n{hosts}'
    )
    tb = loads_testbed(text)
    assert tb.n_ranks == n * ranks and len(tb.links) == n
    assert loads_testbed(dumps_testbed(tb)) == tb


BASE = '[testbed]\nname = "x"\nkind = "netns"\n'


@pytest.mark.parametrize(
    ("text", "line", "key", "what"),
    [
        (BASE + "colour = 1\n", 4, "testbed.colour", "unknown key"),
        ('[testbed]\nname = "x"\n', 1, "testbed.kind", "required"),
        (
            BASE + '[topology]\nshape = "star"\nhosts = 2\nrate = "fast"\n',
            7,
            "topology.rate",
            "rate",
        ),
        (BASE + '[topology]\nshape = "cube"\n', 5, "topology.shape", "one of"),
        (
            BASE + '[topology]\nshape = "star"\nhosts = 0\nrate = "1gbit"\n',
            6,
            "topology.hosts",
            ">= 1",
        ),
        (
            BASE + '[topology]\nshape = "star"\nrate = "1gbit"\nhosts = 2\nmtu = 9\n',
            8,
            "topology.mtu",
            ">= 68",
        ),
        (
            BASE + '[topology]\nshape = "star"\nhosts = 2\nrate = "1gbit"\nleaves = 2\n',
            8,
            "topology.leaves",
            "does not apply",
        ),
        (
            BASE + '[[hosts]]\nname = "a"\n[[hosts]]\nname = "a"\n',
            7,
            "hosts[1].name",
            "duplicate",
        ),
        (
            BASE + '[[hosts]]\nname = "a"\n\n[[hosts]]\nname = "b"\ncontrol = "10.0.0.1:7000"\n',
            9,
            "hosts[1].control",
            "198.18.0.0/15",
        ),
        (
            BASE.replace("netns", "static") + '[[hosts]]\nname = "a"\ncontrol = "1.2.3.4"\n',
            6,
            "hosts[0].control",
            "IP:PORT",
        ),
        (
            BASE + '[[hosts]]\nname = "a"\n[[hosts]]\nname = "b"\n[[switches]]\nname = "s"\n'
            '[[links]]\na = "a"\nb = "s"\nrate = "1gbit"\n'
            '[[links]]\na = "b"\nb = "t"\nrate = "1gbit"\n',
            16,
            "links[1].b",
            "no host or switch named 't'",
        ),
        (
            BASE + '[[hosts]]\nname = "a"\n[[hosts]]\nname = "b"\n',
            6,
            "hosts[1]",
            "not connected",
        ),
        (
            BASE + '[[hosts]]\nname = "a"\nranks = "two"\n',
            6,
            "hosts[0].ranks",
            "must be int",
        ),
        (
            BASE + '[topology]\nshape = "star"\nhosts = 2\nrate = "1gbit"\nqueue_limit = "1KiB"\n',
            8,
            "topology.queue_limit",
            "below the MTU",
        ),
        (
            BASE.replace('"x"', '"bad name!"'),
            2,
            "testbed.name",
            "A-Z",
        ),
        (BASE + 'transport = "rdma"\n', 4, "testbed.transport", "RDMA"),
        (BASE + "[topology\n", 4, "", "invalid TOML"),
    ],
)
def test_errors_name_file_line_and_key(text: str, line: int, key: str, what: str) -> None:
    with pytest.raises(TestbedError) as info:
        loads_testbed(text, source="t.toml")
    msg = str(info.value)
    assert msg.startswith(f"t.toml:{line}: {key}"), msg
    assert what in msg
    assert "\n" not in msg


def test_load_error_names_the_path(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(
        '[testbed]\nname = "x"\nkind = "netns"\n[topology]\nshape = "star"\nrate = "1gbit"\n'
    )
    with pytest.raises(TestbedError, match=rf"^{p}:4: topology.hosts: is required"):
        load_testbed(p)
    with pytest.raises(TestbedError, match="cannot read"):
        load_testbed(tmp_path / "missing.toml")


def test_key_lines_handles_inline_tables_and_comments() -> None:
    text = (
        "# top\n[testbed] # c\nname = 'x'  # k = 1\n"
        "links = [\n  {a = 'h0', b = 'sw0'},\n  {a = 'h1',\n   b = 'sw0'},\n]\nafter = 1\n"
    )
    lines = key_lines(text)
    assert lines[("testbed", "name")] == 3
    assert lines[("testbed", "links", 0, "b")] == 5
    assert lines[("testbed", "links", 1, "b")] == 7
    assert lines[("testbed", "after")] == 9
    assert ("testbed", "k") not in lines


def test_to_topology_star_is_symmetric_with_link_rates() -> None:
    topo = load_testbed(EXAMPLES / "netns-star.toml").to_topology("line")
    assert topo.symmetry == "star" and topo.hosts == ("h0", "h1", "h2", "h3")
    route = topo.route("h1", "h3")
    assert [topo.link_name(i) for i in route] == ["h1->sw0", "sw0->h3"]
    assert topo.route_bandwidth(route) == 1e9 / 8
    assert topo.intra_bandwidth == 300e9


def test_to_topology_leafspine_routes_cross_leaf_over_the_uplink() -> None:
    text = (EXAMPLES / "netns-leafspine.toml").read_text().replace('"2:1"', '"4:1"')
    topo = loads_testbed(text).to_topology("line")
    cross = [topo.link_name(i) for i in topo.route("h0", "h3")]
    assert cross == ["h0->leaf0", "leaf0->spine0", "spine0->leaf1", "leaf1->h3"]
    assert topo.route_bandwidth(topo.route("h0", "h3")) == 0.5e9 / 8
    assert topo.route_bandwidth(topo.route("h0", "h1")) == 1e9 / 8


def test_to_topology_ring_and_link_latency() -> None:
    tb = loads_testbed(
        '[testbed]\nname = "r"\nkind = "netns"\n[topology]\nshape = "ring"\nhosts = 6\n'
        'rate = "1gbit"\nlatency = "2us"\n'
    )
    topo = tb.to_topology()
    assert topo.symmetry == "ring"
    assert len(topo.route(0, 3)) == 3 and len(topo.route(0, 5)) == 1
    assert topo.route_latency(topo.route(0, 2)) == pytest.approx(4e-6)
    assert loads_testbed(dumps_testbed(tb)) == tb


def test_the_model_prices_payload_after_headers_by_default() -> None:
    from msgspec.structs import replace

    from genie.testbed.to_topology import roce_payload_fraction, tcp_payload_fraction

    tb = load_testbed(EXAMPLES / "netns-star.toml")
    assert tcp_payload_fraction(1500) == pytest.approx(1448 / 1514)
    assert tcp_payload_fraction(9000, kind="static") == pytest.approx(8948 / 9038)
    # RoCEv2: the largest RDMA MTU that fits, 4096 at 9000 and 1024 at 1500, per packet
    assert roce_payload_fraction(9000) == pytest.approx(4096 / (4096 + 44 + 14 + 24))
    assert roce_payload_fraction(1500) == pytest.approx(1024 / (1024 + 44 + 14 + 24))
    line = tb.to_topology("line")
    good = tb.to_topology()  # the default: payload after headers
    assert good.symmetry == "star"
    assert good.links[0].bandwidth == pytest.approx(line.links[0].bandwidth * 1448 / 1514)
    assert "less TCP/IPv4 headers (95.6% of line rate at MTU 1500" in tb.model_note()
    measured = replace(tb, rates="payload")  # a probe's rates: taken as they are
    assert measured.to_topology().links[0].bandwidth == line.links[0].bandwidth
    assert "as measured payload rates" in measured.model_note()
    rdma = replace(tb, transport="rdma").to_topology()
    assert rdma.links[0].bandwidth == pytest.approx(line.links[0].bandwidth * 1024 / 1082)
    with pytest.raises(ValueError, match="payload or line"):
        tb.to_topology("goodput")
    # hosts on IPv6 data addresses carry 20 more header bytes per packet
    hosts6 = [replace(h, data_addr=f"fd00::{i + 1}") for i, h in enumerate(tb.hosts)]
    v6 = replace(tb, hosts=hosts6)
    assert "TCP/IPv6 headers (94.3% of line rate at MTU 1500" in v6.model_note()
    assert v6.to_topology().links[0].bandwidth == pytest.approx(
        line.links[0].bandwidth * 1428 / 1514
    )


def test_a_target_topology_is_priced_as_given_or_after_the_headers_asked_for() -> None:
    import genie
    from genie.api.fabric import build
    from genie.errors import UsageError

    def link_bw(**kw) -> tuple[float, tuple[str, ...]]:
        b = build(genie.Fabric(topology="switch", bandwidth="100gbit", **kw), 4)
        return b.topology.links[0].bandwidth, b.notes

    given, notes = link_bw()
    assert given == pytest.approx(12.5e9) and "as given: no packet headers" in notes[0]
    roce, notes = link_bw(headers="rocev2", mtu=9000)
    assert roce == pytest.approx(12.5e9 * 4096 / (4096 + 44 + 14 + 24))
    assert "RoCEv2 headers (98.0% of line rate at MTU 9000" in notes[0]
    tcp6, _ = link_bw(headers="tcp6", mtu=1500)
    assert tcp6 == pytest.approx(12.5e9 * 1428 / 1538)  # Ethernet: preamble, FCS and gap too
    with pytest.raises(UsageError, match="--mtu 100"):
        link_bw(headers="tcp", mtu=100)
    with pytest.raises(UsageError, match="testbed's transport and MTU"):
        build(genie.Fabric(testbed=str(EXAMPLES / "netns-star.toml"), headers="tcp"), 4)


def test_deploy_table_is_left_to_the_deploy_loader() -> None:
    text = dumps_testbed(loopback_testbed(2)) + '\n[deploy]\nuser = "lab"\n'
    tb = loads_testbed(text, "t.toml")
    assert [h.name for h in tb.hosts] == [h.name for h in loopback_testbed(2).hosts]
    with pytest.raises(TestbedError, match=r"t\.toml:.*deplyo"):
        loads_testbed(text.replace("[deploy]", "[deplyo]"), "t.toml")


@pytest.mark.parametrize("rate", ['"500"', "500", "1e9"])
def test_a_rate_without_a_unit_is_refused_naming_line_key_and_forms(rate: str) -> None:
    text = '[testbed]\nname = "x"\nkind = "netns"\n[topology]\nshape = "star"\nhosts = 2\n'
    text += f"rate = {rate}\n"
    with pytest.raises(TestbedError, match=r"^t.toml:7: topology.rate: .*needs a unit.*100gbit"):
        loads_testbed(text, "t.toml")


@pytest.mark.parametrize("over", ['"2:1"', "2", '"2"', "2.0"])
def test_oversubscription_as_a_ratio_or_a_number_in_files(over: str) -> None:
    text = (
        '[testbed]\nname = "x"\nkind = "netns"\n[topology]\nshape = "leafspine"\nleaves = 2\n'
        f'spines = 1\nhosts_per_leaf = 2\nrate = "1gbit"\noversubscription = {over}\n'
    )
    tb = loads_testbed(text, "t.toml")
    up = [lk for lk in tb.links if lk.a.startswith("leaf") or lk.b.startswith("leaf")]
    assert min(lk.rate for lk in up) == pytest.approx(1e9 / 8)  # 2 hosts x 1gbit / 2 / 1 spine
