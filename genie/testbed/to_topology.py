"""Turn a Testbed into the cost model's Topology (``genie.collectives.topology``)."""

from __future__ import annotations

from typing import Any

from genie.testbed.model import Testbed


def _uniform(tb: Testbed) -> bool:
    return len({(lk.rate, lk.latency) for lk in tb.links}) == 1


def testbed_topology(tb: Testbed) -> Any:
    """The Topology of ``tb``: its hosts, switches and links (both directions) with their rates."""
    from genie.collectives import topology

    hosts = [h.name for h in tb.hosts]
    intra = {"intra_bandwidth": tb.intra_host.bandwidth, "intra_latency": tb.intra_host.latency}
    n = len(hosts)
    if not tb.links:
        return topology.Topology(hosts, tb.switch_names(), [], **intra)
    if (
        not tb.switches
        and n >= 2
        and _uniform(tb)
        and hosts == [f"h{i}" for i in range(n)]
        and [(lk.a, lk.b) for lk in tb.links]
        == [(hosts[i], hosts[(i + 1) % n]) for i in range(n if n > 2 else 1)]
    ):
        lk = tb.links[0]
        return topology.ring(n, lk.rate, lk.latency, **intra)
    parts = [(lk.a, lk.b, lk.rate, lk.latency) for lk in tb.links]
    topo = topology.Topology.from_parts(hosts, tb.switch_names(), parts, **intra)
    star = (
        len(tb.switches) == 1
        and _uniform(tb)
        and [(lk.a, lk.b) for lk in tb.links] == [(h, tb.switches[0].name) for h in hosts]
    )
    topo.kind = "star" if star else ("leaf_spine" if _leafspine(tb) else "custom")
    return topo


def _leafspine(tb: Testbed) -> bool:
    names = tb.switch_names()
    return any(s.startswith("leaf") for s in names) and any(s.startswith("spine") for s in names)
