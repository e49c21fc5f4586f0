"""Turn a Testbed into the cost model's Topology (``genie.collectives.topology``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genie.testbed.model import Testbed

if TYPE_CHECKING:
    from genie.collectives.topology import Topology

TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
TCP_IP6_HEADERS = 72  # IPv6 40 + TCP 20 + timestamp option 12
ETH_HEADER = 14  # what tbf and veth count per frame
ETH_WIRE_EXTRA = 24  # preamble 8 + FCS 4 + inter-frame gap 12, on real Ethernet only
ROCE_HEADERS = 20 + 8 + 12 + 4  # RoCEv2 per packet: IPv4 20 + UDP 8 + BTH 12 + ICRC 4
ROCE_MTUS = (4096, 2048, 1024, 512, 256)  # the RDMA path MTUs a port may run


def tcp_payload_fraction(mtu: int, kind: str = "netns", ipv6: bool = False) -> float:
    """TCP payload bytes per byte the link carries at this MTU (0.956 at 1500 on netns)."""
    per_frame = mtu + ETH_HEADER + (ETH_WIRE_EXTRA if kind != "netns" else 0)
    return (mtu - (TCP_IP6_HEADERS if ipv6 else TCP_IP_HEADERS)) / per_frame


def roce_payload_fraction(mtu: int, kind: str = "static") -> float:
    """RoCEv2 payload bytes per byte the link carries: the largest RDMA path MTU that fits the
    netdev MTU with its headers (4096 at a 9000 MTU: 0.980 on Ethernet), per packet."""
    path = next((m for m in ROCE_MTUS if m + ROCE_HEADERS <= mtu), 256)
    per_frame = path + ROCE_HEADERS + ETH_HEADER + (ETH_WIRE_EXTRA if kind != "netns" else 0)
    return path / per_frame


PROTOCOLS = {"tcp": "TCP/IPv4", "tcp6": "TCP/IPv6", "rdma": "RoCEv2", "rocev2": "RoCEv2"}


def payload_fraction(transport: str, mtu: int, kind: str) -> float:
    """Payload bytes per byte a link carries for ``transport`` at ``mtu``: "tcp" (IPv4),
    "tcp6", "rdma" or "rocev2"; ``kind`` "netns" counts veth frames, else real Ethernet."""
    if transport in ("rdma", "rocev2"):
        return roce_payload_fraction(mtu, kind)
    if transport not in ("tcp", "tcp6"):
        raise ValueError(f"transport {transport!r}: one of {', '.join(PROTOCOLS)}")
    return tcp_payload_fraction(mtu, kind, ipv6=transport == "tcp6")


def wire_phrase(transport: str, mtus: list[int], kind: str) -> str:
    """'link rates less PROTO headers (F of line rate at MTU M: payload per byte of ...)'."""
    fr = ", ".join(
        f"{payload_fraction(transport, m, kind):.1%} of line rate at MTU {m}" for m in mtus
    )
    where = "veth frame" if kind == "netns" else "Ethernet frame with preamble and gap"
    return f"link rates less {PROTOCOLS[transport]} headers ({fr}: payload per byte of {where})"


def wire_transport(tb: Testbed) -> str:
    """The header stack of ``tb``'s data: rdma, or tcp / tcp6 by its hosts' data addresses."""
    if tb.transport == "rdma":
        return "rdma"
    v6 = [":" in a for h in tb.hosts for a in (h.data_addr, *(n.data_addr for n in h.nics))]
    return "tcp6" if v6 and all(v6) else "tcp"


def describe_wire(tb: Testbed) -> str:
    """One phrase for reports: what the model's link rates are."""
    mtus = sorted({lk.mtu for lk in tb.links})
    if not mtus:
        return "no links"
    if tb.rates == "payload":
        return "link rates as measured payload rates"
    return wire_phrase(wire_transport(tb), mtus, tb.kind)


def _uniform(tb: Testbed) -> bool:
    return len({(lk.rate, lk.latency, lk.mtu) for lk in tb.links}) == 1


def testbed_topology(tb: Testbed, wire: str = "payload") -> Topology:
    """The Topology of ``tb``: its hosts, switches and links (both directions) with their rates.

    ``wire`` "payload" (the default): each link's bandwidth is the payload it can carry for
    the testbed's transport (line rate x ``payload_fraction``: the headers of every packet taken
    off), which is what the wire can at best deliver; "line": the declared line rates.
    """
    from msgspec.structs import replace

    from genie.collectives import topology

    if wire not in ("payload", "line"):
        raise ValueError(f"wire {wire!r}: payload or line")
    if wire == "payload" and tb.rates == "line":
        proto = wire_transport(tb)
        frac = {lk.mtu: payload_fraction(proto, lk.mtu, tb.kind) for lk in tb.links}
        tb = replace(tb, links=[replace(lk, rate=lk.rate * frac[lk.mtu]) for lk in tb.links])
    hosts = tb.endpoint_names()
    multi = len(hosts) > len(tb.hosts)  # some host has several NICs: one endpoint per NIC
    intra_bw, intra_lat, routing = tb.intra_host.bandwidth, tb.intra_host.latency, tb.routing
    servers = [h.name for h in tb.hosts for _ in range(h.n_nics)] if multi else None
    n = len(hosts)
    if not tb.links:
        return topology.Topology(
            hosts,
            tb.switch_names(),
            [],
            intra_bandwidth=intra_bw,
            intra_latency=intra_lat,
            routing=routing,
            servers=servers,
        )
    if (
        not multi
        and not tb.switches
        and n >= 2
        and _uniform(tb)
        and hosts == [f"h{i}" for i in range(n)]
        and [(lk.a, lk.b) for lk in tb.links]
        == [(hosts[i], hosts[(i + 1) % n]) for i in range(n if n > 2 else 1)]
    ):
        lk = tb.links[0]
        return topology.ring(
            n,
            lk.rate,
            lk.latency,
            intra_bandwidth=intra_bw,
            intra_latency=intra_lat,
            routing=routing,
        )
    parts = [(lk.a, lk.b, lk.rate, lk.latency) for lk in tb.links]
    topo = topology.Topology.from_parts(
        hosts,
        tb.switch_names(),
        parts,
        intra_bandwidth=intra_bw,
        intra_latency=intra_lat,
        routing=routing,
        servers=servers,
    )
    star = (
        not multi
        and len(tb.switches) == 1
        and _uniform(tb)
        and [(lk.a, lk.b) for lk in tb.links] == [(h, tb.switches[0].name) for h in hosts]
    )
    topo.kind = "star" if star else ("leaf_spine" if _leafspine(tb) else "custom")
    if routing.paths:  # the host pairs a path map lists take its paths
        from genie.testbed.pathmap import load_path_map

        topo = topo.with_observed_paths(load_path_map(routing.paths, topo)[0])
    return topo


def _leafspine(tb: Testbed) -> bool:  # also rail-optimised: rail leaves are leaves
    names = tb.switch_names()
    return any(s.startswith("leaf") for s in names) and any(s.startswith("spine") for s in names)
