"""Pricer over ``genie.collectives.topology.Topology``: testbeds and target topologies.

Ranks are placed on hosts by a placement list (rank -> host index; from the testbed's
``rank_hosts()``). Each collective becomes the traffic of the algorithms in ``netmodel``
(ring, direct, chain, dissemination) between its ranks; an edge between two hosts loads every
link of the topology's route between them, an edge inside a host loads the sending rank's
private intra-host port (the topology's ``intra_bandwidth``), as the collectives cost model
does. The latency term is steps x the largest route latency among the edges. Oversubscribed
uplinks of a leaf-spine therefore show up as contended links, shared among concurrent transfers
by the analytical backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from genie.errors import TopologyError
from genie.sim.compiled import P2P
from genie.sim.netmodel import algorithm_edges
from genie.sim.network import Demand, Transfer


class TopologyPricer:
    """Link loads of transfers on a collectives ``Topology`` with a rank placement."""

    def __init__(self, topology: Any, placement: Sequence[int], n_ranks: int | None = None):
        self.topology = topology
        n = len(placement) if n_ranks is None else n_ranks
        if len(placement) < n:
            raise TopologyError(
                f"placement covers {len(placement)} ranks but the workload has {n}; "
                "add ranks per host to the testbed"
            )
        self.host_of = np.asarray([topology.host_index(h) for h in placement[:n]], np.int64)
        self.n_ranks = n
        self.n_links = len(topology.links)
        self._cap = np.concatenate(
            [
                np.asarray([lk.bandwidth for lk in topology.links], np.float64),
                np.full(n, float(topology.intra_bandwidth)),
            ]
        )
        self._routes: dict[tuple[int, int], tuple[np.ndarray, float]] = {}
        self._cache: dict[tuple, Demand] = {}

    def capacity(self) -> np.ndarray:
        """Bandwidth of every topology link, then one intra-host port per rank (bytes/s)."""
        return self._cap

    def describe(self) -> str:
        """One line: topology, link rates (GiB/s and GB/s), latencies, placement."""
        hosts = len(set(self.host_of.tolist()))
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

    def _route(self, hs: int, hd: int) -> tuple[np.ndarray, float]:
        key = (hs, hd)
        hit = self._routes.get(key)
        if hit is None:
            route = self.topology.route(hs, hd)
            hit = (np.asarray(route, np.int64), float(self.topology.route_latency(route)))
            self._routes[key] = hit
        return hit

    def price(self, transfer: Transfer) -> Demand:
        """Bytes per link and latency of one transfer (cached per type, size and group)."""
        key = (transfer.comm_type, transfer.size, transfer.group)
        if transfer.group < 0:
            key = (*key, transfer.ranks)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ranks = np.asarray(transfer.ranks, np.int64)
        if transfer.comm_type == P2P:
            src, dst, per_edge, steps = ranks[:1], ranks[1:2], float(transfer.size), 1
        elif len(ranks) <= 1:
            src, dst, per_edge, steps = ranks[:0], ranks[:0], 0.0, 0
        else:
            src, dst, per_edge, steps = algorithm_edges(transfer.comm_type, ranks, transfer.size)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        hs, hd = self.host_of[src], self.host_of[dst]
        same = hs == hd
        parts = [self.n_links + src[same]]
        lat = float(self.topology.intra_latency) if same.any() else 0.0
        if (~same).any():
            pairs, counts = np.unique(
                np.stack([hs[~same], hd[~same]], axis=1), axis=0, return_counts=True
            )
            for (a, b), c in zip(pairs.tolist(), counts.tolist(), strict=True):
                links, rlat = self._route(a, b)
                parts.append(np.repeat(links, c))
                lat = max(lat, rlat)
        elif not len(src):
            lat = (
                float(
                    self.topology.route_latency(
                        self.topology.route(0, min(1, len(self.topology.hosts) - 1))
                    )
                )
                if steps
                else 0.0
            )
        links = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if per_edge > 0 and len(links):
            uniq, inv = np.unique(links, return_inverse=True)
            nbytes = np.bincount(inv) * float(per_edge)
        else:
            uniq, nbytes = np.zeros(0, np.int64), np.zeros(0)
        dem = Demand(latency=steps * lat, links=uniq.astype(np.int64), nbytes=nbytes)
        self._cache[key] = dem
        return dem
