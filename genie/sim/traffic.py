"""The simulator's built-in traffic model: collectives as bytes on the links of a topology.

Each collective becomes the traffic of one textbook algorithm between its ranks
(``genie.vocabulary.TRAFFIC_ALGORITHM``; ASTRA-sim size semantics: comm_size is the whole
buffer, the per-rank shard for all-gather): ring for all-reduce (2(n-1) steps of S/n),
reduce-scatter (n-1 steps of S/n) and all-gather (n-1 steps of S); direct for all-to-all (S/n
to every other rank, one step) and for gather/scatter; a pipelined chain from the root for
broadcast and reduce (S per edge, n-1 steps); dissemination barrier (ceil(log2 n) steps, no
bytes).

``TopologyPricer`` places ranks on the hosts of a ``genie.collectives.topology.Topology`` (a
testbed's or a target's): an edge between two hosts loads the links its flows take under the
topology's routing policy (``flow_route``: ECMP per flow, spraying, or a pinned path), an edge
inside a host loads the sending rank's private intra-host port (the topology's
``intra_bandwidth``), as the collectives cost model does. The latency term is steps x the
largest route latency among the edges (ASTRA-sim's hops x latency per message), plus, on a
calibrated topology, its per-step overhead twice per message a rank sends. Oversubscribed
uplinks of a leaf-spine thus show up as contended links, shared among concurrent transfers by the
analytical backend. ``NetModel`` is the same pricer on a switch or fully-connected topology
built from a bandwidth and a per-link latency, ``ranks_per_host`` ranks to a host; with one rank
per host on a switch it gives the classic closed forms (``genie.vocabulary.closed_form`` with
alpha = 2 hops x latency), e.g. ring all-reduce 2(n-1)(alpha + S/(n B)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from genie.collectives.topology import Topology
from genie.errors import TopologyError
from genie.sim.network import CachedPricer, Demand, Transfer
from genie.sim.uneven import UnevenPricing, direct_demand
from genie.vocabulary import P2P, base_collective

TOPOLOGIES = ("switch", "fully_connected")


def algorithm_edges(ctype: int, ranks: np.ndarray, size: int) -> tuple:
    """(src, dst, bytes per edge, steps) of one collective under the algorithms above."""
    n = len(ranks)
    name = base_collective(ctype)
    ring = np.roll(ranks, -1)
    if name in ("all_reduce",):
        return ranks, ring, 2 * (n - 1) / n * size, 2 * (n - 1)
    if name == "reduce_scatter":
        return ranks, ring, (n - 1) / n * size, n - 1
    if name == "all_gather":
        return ranks, ring, (n - 1) * size, n - 1
    if name == "all_to_all":
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        mask = i != j
        return ranks[i[mask]], ranks[j[mask]], size / n, 1
    if name in ("broadcast", "reduce"):
        chain_src, chain_dst = ranks[:-1], ranks[1:]
        if name == "reduce":
            chain_src, chain_dst = chain_dst, chain_src
        return chain_src, chain_dst, float(size), n - 1
    if name in ("gather", "scatter"):
        root, others = ranks[:1].repeat(n - 1), ranks[1:]
        if name == "gather":
            return others, root, size / n, 1
        return root, others, size / n, 1
    if name == "barrier":
        return ranks[:0], ranks[:0], 0.0, math.ceil(math.log2(n))
    raise TopologyError(f"no algorithm for {name}")


class TopologyPricer(UnevenPricing, CachedPricer):
    """Link loads of transfers on a collectives ``Topology`` with a rank placement."""

    def __init__(
        self, topology: Topology, placement: Sequence[int | str], n_ranks: int | None = None
    ):
        super().__init__()
        self.topology = topology
        n = len(placement) if n_ranks is None else n_ranks
        if len(placement) < n:
            raise TopologyError(
                f"placement covers {len(placement)} ranks but the workload has {n}; "
                "add ranks per host to the testbed"
            )
        self.host_of = np.asarray([topology.host_index(h) for h in placement[:n]], np.int64)
        self.server_of = np.asarray(topology.server_of, np.int64)
        self.n_ranks = n
        self.n_links = len(topology.links)
        self._cap = np.concatenate(
            [
                np.asarray([lk.bandwidth for lk in topology.links], np.float64),
                np.full(n, float(topology.intra_bandwidth)),
            ]
        )

    def capacity(self) -> np.ndarray:
        """Bandwidth of every topology link, then one intra-host port per rank (bytes/s)."""
        return self._cap

    def link_names(self) -> list[str]:
        """A name for every link of ``capacity()``: topology links, then intra-host ports."""
        topo = [self.topology.link_name(i) for i in range(self.n_links)]
        return topo + [f"intra-host port of rank {r}" for r in range(self.n_ranks)]

    def describe(self) -> str:
        """One line: topology, link rates (GiB/s and GB/s), latencies, placement."""
        hosts = len({int(self.server_of[h]) for h in self.host_of.tolist()})
        links = self.topology.links
        rates = sorted({lk.bandwidth for lk in links})
        lats = sorted({lk.latency for lk in links})
        rate_text = ", ".join(f"{b / 2**30:.3f} GiB/s = {b / 1e9:.3f} GB/s" for b in rates[:3])
        lat_text = ", ".join(f"{x * 1e9:.0f} ns" for x in lats[:3])
        intra = self.topology.intra_bandwidth
        return (
            f"{self.topology.describe()}; links {rate_text or '-'}, latency {lat_text or '-'} "
            f"per link; intra-host {intra / 1e9:.1f} GB/s; {self.n_ranks} ranks on {hosts} hosts"
        )

    def _price(self, transfer: Transfer) -> Demand:
        """Bytes per link and latency of one transfer."""
        ranks = np.asarray(transfer.ranks, np.int64)
        if len(ranks) and (ranks.min() < 0 or ranks.max() >= self.n_ranks):
            raise TopologyError(
                f"transfer on ranks up to {int(ranks.max())} but the network model has "
                f"{self.n_ranks} ranks"
            )
        if transfer.comm_type == P2P:
            src, dst, per_edge, steps = ranks[:1], ranks[1:2], float(transfer.size), 1
        elif len(ranks) <= 1:
            src, dst, per_edge, steps = ranks[:0], ranks[:0], 0.0, 0
        else:
            src, dst, per_edge, steps = algorithm_edges(transfer.comm_type, ranks, transfer.size)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        hs, hd = self.host_of[src], self.host_of[dst]
        same = self.server_of[hs] == self.server_of[hd]  # NICs of one server: intra-host
        parts = [self.n_links + src[same]]
        weights = [np.ones(int(same.sum()))]
        lat = float(self.topology.intra_latency) if same.any() else 0.0
        if (~same).any():
            # one path set per host pair where routing cannot tell ranks apart, else per rank pair
            by_rank = self.topology.routes_by_rank
            ends = np.stack([src[~same], dst[~same]] if by_rank else [hs[~same], hd[~same]], 1)
            pairs, counts = np.unique(ends, axis=0, return_counts=True)
            message = per_edge / max(1, steps)  # bytes of each message an edge carries
            for (a, b), c in zip(pairs.tolist(), counts.tolist(), strict=True):
                ha, hb = (int(self.host_of[a]), int(self.host_of[b])) if by_rank else (a, b)
                res, rlat = self.topology.flow_route(ha, hb, a, b, message)
                if res:
                    lids, ws = zip(*res, strict=True)
                    parts.append(np.asarray(lids, np.int64))
                    weights.append(np.asarray(ws) * c)
                lat = max(lat, rlat)
        elif not len(src):
            hosts = len(self.topology.hosts)
            lat = self.topology.flow_route(0, min(1, hosts - 1), 0, 1)[1] if steps else 0.0
        links = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if per_edge > 0 and len(links):
            uniq, inv = np.unique(links, return_inverse=True)
            nbytes = np.bincount(inv, weights=np.concatenate(weights)) * float(per_edge)
        else:
            uniq, nbytes = np.zeros(0, np.int64), np.zeros(0)
        # a calibrated topology's per-step software overhead: each message a rank sends costs a
        # SEND and a REDUCE/COPY step of its software, one after another
        sends = max(steps, len(src) // max(1, len(ranks)))
        over = 2 * sends * self.topology.step_overhead
        return Demand(latency=steps * lat + over, links=uniq.astype(np.int64), nbytes=nbytes)

    def _price_uneven(self, transfer: Transfer, mat: np.ndarray) -> Demand:
        """An all-to-all-v: every block on its own route, in one step."""
        return direct_demand(self.topology, self.host_of, self.n_links, tuple(transfer.ranks), mat)


class NetModel(TopologyPricer):
    """``TopologyPricer`` on a switch or fully-connected network of uniform links.

    Ranks sit ``ranks_per_host`` to a host (ranks 0..k-1 on host 0, ...); ``latency`` is per
    link, so a message between hosts takes ``alpha = hops x latency`` (2 hops through the
    switch, 1 on a fully-connected link).
    """

    def __init__(
        self,
        n_ranks: int,
        bandwidth: float,
        latency: float,
        topology: str = "switch",
        ranks_per_host: int = 1,
        intra_bandwidth: float | None = None,
        intra_latency: float = 0.0,
    ) -> None:
        from genie.collectives import topology as ctopo

        if topology not in TOPOLOGIES:
            raise TopologyError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
        if bandwidth <= 0 or latency < 0 or ranks_per_host < 1:
            raise TopologyError("need bandwidth > 0, latency >= 0 and ranks_per_host >= 1")
        self.kind = topology
        self.bandwidth = float(bandwidth)
        self.latency = float(latency)
        self.hops = 2 if topology == "switch" else 1
        self.alpha = self.hops * self.latency
        self.ranks_per_host = ranks_per_host
        self.n_hosts = max(1, math.ceil(n_ranks / ranks_per_host))
        self.intra_bandwidth = float(intra_bandwidth or bandwidth)
        intra_bw, intra_lat = self.intra_bandwidth, float(intra_latency)
        if topology == "switch":
            topo = ctopo.switch(
                self.n_hosts,
                self.bandwidth,
                self.latency,
                intra_bandwidth=intra_bw,
                intra_latency=intra_lat,
            )
        else:
            topo = ctopo.fully_connected(
                max(2, self.n_hosts),
                self.bandwidth,
                self.latency,
                intra_bandwidth=intra_bw,
                intra_latency=intra_lat,
            )
        super().__init__(topo, [r // ranks_per_host for r in range(n_ranks)], n_ranks)

    def describe(self) -> str:
        """One line naming the topology, rates (GiB/s and GB/s) and latency."""
        bw = self.bandwidth
        text = (
            f"{self.kind}, {self.n_hosts} hosts x {self.ranks_per_host} ranks, "
            f"{bw / 2**30:.3f} GiB/s = {bw / 1e9:.3f} GB/s per link, latency "
            f"{self.latency * 1e9:.0f} ns per link (alpha = {self.hops} hops = "
            f"{self.alpha * 1e9:.0f} ns per message)"
        )
        if self.ranks_per_host > 1:
            text += f", intra-host {self.intra_bandwidth / 1e9:.3f} GB/s"
        return text
