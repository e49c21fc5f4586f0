"""Turn a Testbed into the cost model's Topology (``genie.collectives.topology``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genie.testbed.model import Testbed

if TYPE_CHECKING:
    from genie.collectives.topology import Topology

TCP_IP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamp option 12
ETH_HEADER = 14  # what tbf and veth count per frame
ETH_WIRE_EXTRA = 24  # preamble 8 + FCS 4 + inter-frame gap 12, on real Ethernet only


def tcp_payload_fraction(mtu: int, kind: str = "netns") -> float:
    """TCP payload bytes per byte the link carries at this MTU (0.956 at 1500 on netns)."""
    per_frame = mtu + ETH_HEADER + (ETH_WIRE_EXTRA if kind != "netns" else 0)
    return (mtu - TCP_IP_HEADERS) / per_frame


def _uniform(tb: Testbed) -> bool:
    return len({(lk.rate, lk.latency, lk.mtu) for lk in tb.links}) == 1


def testbed_topology(tb: Testbed, tcp_goodput: bool = False) -> Topology:
    """The Topology of ``tb``: its hosts, switches and links (both directions) with their rates.

    With ``tcp_goodput`` each link's bandwidth is the TCP payload it can carry (line rate x
    ``tcp_payload_fraction``), which is what a TCP transport can at best measure.
    """
    from msgspec.structs import replace

    from genie.collectives import topology

    if tcp_goodput:
        frac = {lk.mtu: tcp_payload_fraction(lk.mtu, tb.kind) for lk in tb.links}
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
    return topo


def _leafspine(tb: Testbed) -> bool:  # also rail-optimised: rail leaves are leaves
    names = tb.switch_names()
    return any(s.startswith("leaf") for s in names) and any(s.startswith("spine") for s in names)
