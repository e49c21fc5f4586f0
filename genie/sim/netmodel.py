"""The simulator's built-in pricer: collectives as traffic on the links of a simple topology.

Links are directed and full duplex. ``switch``: every host has one NIC link up to a
non-blocking switch and one down from it; ``fully_connected``: one link per ordered host pair.
Ranks are placed ``ranks_per_host`` to a host (ranks 0..k-1 on host 0, ...); traffic between
ranks of one host uses each rank's intra-host up/down links (NVLink-like bandwidth and latency).

Algorithms (ASTRA-sim size semantics: comm_size is the whole buffer, the per-rank shard for
all-gather): ring for all-reduce (2(n-1) steps of S/n), reduce-scatter (n-1 steps of S/n) and
all-gather (n-1 steps of S); direct for all-to-all (S/n to every other rank, one step) and for
gather/scatter; a pipelined chain from the root for broadcast and reduce (S per edge, n-1 steps);
dissemination barrier (ceil(log2 n) steps, no bytes). ``latency`` is per link, as in ASTRA-sim
(hops x latency): a message between hosts takes ``alpha = hops x latency`` with 2 hops through
the switch and 1 on a fully-connected link; the latency term is steps x alpha (steps x the
intra-host latency when every edge stays inside a host). On a switch with one rank per host
these give the classic closed forms (``closed_form``), e.g. ring all-reduce
2(n-1)(alpha + S/(n B)).
"""

from __future__ import annotations

import math
import re

import numpy as np

from genie.errors import TopologyError, UnitError
from genie.sim.compiled import COLL_NAMES, P2P, coll_type
from genie.sim.network import Demand, Transfer
from genie.units import parse_rate

TOPOLOGIES = ("switch", "fully_connected")

_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_PREFIX.update({"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40})


def parse_bandwidth(text: str | float) -> float:
    """Parse ``50GiB/s`` (2^30 B/s), ``50GB/s`` (10^9 B/s), ``100Gb/s`` or ``400gbit`` into B/s.

    ``B`` is bytes and ``b`` bits; ASTRA-sim's "GB/s" is 2^30 B/s, which is ``GiB/s`` here.
    """
    if isinstance(text, int | float):
        if text <= 0:
            raise UnitError(f"bandwidth must be positive: {text}")
        return float(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)[bB]/s\s*", text)
    if m:
        prefix, letter = m.group(2).lower(), text.strip()[-3]
        if prefix not in _PREFIX:
            raise UnitError(
                f"not a bandwidth: {text!r} (bytes: 50GiB/s = 50*2^30 B/s, 50GB/s = 50e9 B/s; "
                "bits: 100Gb/s, 400gbit)"
            )
        value = float(m.group(1)) * _PREFIX[prefix] / (8 if letter == "b" else 1)
        if value <= 0:
            raise UnitError(f"bandwidth must be positive: {text!r}")
        return value
    return parse_rate(text)


def algorithm_edges(ctype: int, ranks: np.ndarray, size: int) -> tuple:
    """(src, dst, bytes per edge, steps) of one collective under the algorithms above."""
    n = len(ranks)
    name = "send_recv" if ctype == P2P else COLL_NAMES[ctype]
    ring = np.roll(ranks, -1)
    if name in ("all_reduce",):
        return ranks, ring, 2 * (n - 1) / n * size, 2 * (n - 1)
    if name in ("reduce_scatter", "reduce_scatter_block"):
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


class NetModel:
    """A topology, a placement and the algorithms above, as a pricer for AnalyticalBackend."""

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
        if topology not in TOPOLOGIES:
            raise TopologyError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
        if bandwidth <= 0 or latency < 0 or ranks_per_host < 1:
            raise TopologyError("need bandwidth > 0, latency >= 0 and ranks_per_host >= 1")
        self.n_ranks = n_ranks
        self.topology = topology
        self.bandwidth = float(bandwidth)
        self.latency = float(latency)
        self.hops = 2 if topology == "switch" else 1
        self.alpha = self.hops * self.latency
        self.ranks_per_host = ranks_per_host
        self.n_hosts = max(1, math.ceil(n_ranks / ranks_per_host))
        self.intra_bandwidth = float(intra_bandwidth or bandwidth)
        self.intra_latency = float(intra_latency)
        self.host_of = np.arange(n_ranks) // ranks_per_host
        h, n = self.n_hosts, n_ranks
        self._n_inter = 2 * h if topology == "switch" else h * h
        self._cap = np.concatenate(
            [np.full(self._n_inter, self.bandwidth), np.full(2 * n, self.intra_bandwidth)]
        )
        self._cache: dict[tuple, Demand] = {}

    def describe(self) -> str:
        """One line naming the topology, rates (GiB/s and GB/s) and latency."""
        bw = self.bandwidth
        text = (
            f"{self.topology}, {self.n_hosts} hosts x {self.ranks_per_host} ranks, "
            f"{bw / 2**30:.3f} GiB/s = {bw / 1e9:.3f} GB/s per link, latency "
            f"{self.latency * 1e9:.0f} ns per link (alpha = {self.hops} hops = "
            f"{self.alpha * 1e9:.0f} ns per message)"
        )
        if self.ranks_per_host > 1:
            text += f", intra-host {self.intra_bandwidth / 1e9:.3f} GB/s"
        return text

    def capacity(self) -> np.ndarray:
        """Bandwidth of every link, bytes/s."""
        return self._cap

    def _edge_links(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Links crossed by each edge: (edge index, link id), plus whether any hop is inter-host."""
        hs, hd = self.host_of[src], self.host_of[dst]
        inter = hs != hd
        n = self.n_ranks
        base = self._n_inter
        if self.topology == "switch":
            up = np.where(inter, hs, base + src)
            down = np.where(inter, self.n_hosts + hd, base + n + dst)
            return np.concatenate([up, down]), inter
        direct = hs * self.n_hosts + hd
        up = np.where(inter, direct, base + src)
        down = np.where(inter, -1, base + n + dst)
        links = np.concatenate([up, down])
        return links, inter

    def price(self, transfer: Transfer) -> Demand:
        """Bytes per link and latency of one transfer (cached per type, size and group)."""
        key = (transfer.comm_type, transfer.size, transfer.group, transfer.ranks)
        if transfer.group >= 0:
            key = (transfer.comm_type, transfer.size, transfer.group)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
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
        if len(src) and np.any(src == dst):
            keep = src != dst
            src, dst = src[keep], dst[keep]
        links, inter = self._edge_links(src, dst)
        keep = links >= 0
        weights = np.full(len(links), float(per_edge))[keep]
        links = links[keep]
        if per_edge > 0 and len(links):
            uniq, inv = np.unique(links, return_inverse=True)
            nbytes = np.bincount(inv, weights=weights)
        else:
            uniq, nbytes = np.zeros(0, np.int64), np.zeros(0)
        hop_latency = self.alpha if inter.any() else self.intra_latency
        if not len(src):
            hop_latency = self.alpha if self.n_hosts > 1 else self.intra_latency
        dem = Demand(latency=steps * hop_latency, links=uniq.astype(np.int64), nbytes=nbytes)
        self._cache[key] = dem
        return dem


def closed_form(
    collective: int | str, n: int, size: int, bandwidth: float, latency: float
) -> float:
    """Textbook alpha-beta time of a collective, one rank per host (ring/direct/chain).

    ``latency`` is alpha, per message end to end (on a switch: 2 hops x link latency).
    """
    c = COLL_NAMES[coll_type(collective)]
    a, b, s = latency, bandwidth, size
    if n <= 1:
        return 0.0
    forms = {
        "all_reduce": 2 * (n - 1) * (a + s / (n * b)),
        "reduce_scatter": (n - 1) * (a + s / (n * b)),
        "reduce_scatter_block": (n - 1) * (a + s / (n * b)),
        "all_gather": (n - 1) * (a + s / b),
        "all_to_all": a + (n - 1) * s / (n * b),
        "broadcast": (n - 1) * a + s / b,
        "reduce": (n - 1) * a + s / b,
        "gather": a + (n - 1) * s / (n * b),
        "scatter": a + (n - 1) * s / (n * b),
        "barrier": math.ceil(math.log2(n)) * a,
    }
    return forms[c]
