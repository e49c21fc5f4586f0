"""Uneven all-to-all (all-to-all-v) in the analytical pricers: per-peer bytes, not one size.

An all-to-all-v instance carries its n x n matrix of bytes (``Instances.splits``: row i is what
group rank i sends to each rank). ``UnevenPricing`` is a ``CachedPricer`` that pricers derive
from: after ``use_splits(cw.instances.splits)`` it prices those instances by their matrix
(cached per matrix) with the pricer's ``_price_uneven``; every other transfer as before.
``skew`` sums a matrix up for reports: the largest per-peer block over the mean one.

Trace form: a COMM_COLL all-to-all node with the attribute ``comm_split_sizes`` (int64 list,
bytes this rank sends to each rank of its group, in group order; ``comm_size`` is then the
rank's total).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Self

import numpy as np

from genie.collectives.topology import Topology
from genie.sim.network import CachedPricer, Demand, Transfer
from genie.vocabulary import UNEVEN_ATTR

SPLIT_ATTR = UNEVEN_ATTR


class UnevenPricing(CachedPricer):
    """A ``CachedPricer`` whose all-to-all-v instances are priced by their matrix."""

    def __init__(self) -> None:
        super().__init__()
        self._uneven: dict[int, np.ndarray] = {}  # iid -> n x n bytes (use_splits)

    def use_splits(self, splits: Mapping[int, np.ndarray]) -> Self:
        """Price instance ids in ``splits`` by their n x n byte matrix; returns self."""
        self._uneven = {int(k): np.asarray(v, np.int64) for k, v in splits.items()}
        return self

    def price(self, transfer: Transfer) -> Demand:
        """The matrix's demand for an all-to-all-v instance, else the pricer's usual one."""
        mat = self._uneven.get(transfer.iid)
        if mat is None:
            return super().price(transfer)
        key = ("uneven", tuple(transfer.ranks), mat.tobytes())
        cache = self._cache
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = self._price_uneven(transfer, mat)
        return hit

    def _price_uneven(self, transfer: Transfer, mat: np.ndarray) -> Demand:
        raise NotImplementedError


def direct_demand(
    topology: Topology, host_of: np.ndarray, n_topo: int, ranks: tuple[int, ...], mat: np.ndarray
) -> Demand:
    """Every block on its own route at once (one step): bytes per link and the longest latency.

    Blocks between ranks of one host load the sender's intra-host port (link ``n_topo + rank``),
    as ``genie.sim.traffic`` places them.
    """
    loads: dict[int, float] = defaultdict(float)
    lat = 0.0
    for i, a in enumerate(ranks):
        for j, b in enumerate(ranks):
            nb = float(mat[i, j])
            if i == j or nb <= 0:
                continue
            ha, hb = int(host_of[a]), int(host_of[b])
            if ha == hb:
                loads[n_topo + a] += nb
                lat = max(lat, float(topology.intra_latency))
                continue
            res, rlat = topology.flow_route(ha, hb, a, b)
            for lid, w in res:
                loads[int(lid)] += w * nb
            lat = max(lat, float(rlat))
    over = 2 * (len(ranks) - 1) * topology.step_overhead
    links = np.asarray(sorted(loads), np.int64)
    return Demand(lat + over, links, np.asarray([loads[k] for k in links.tolist()], np.float64))


def skew(mat: np.ndarray) -> float:
    """Largest block sent to another rank over the mean one (1.0 = even)."""
    off = mat[~np.eye(len(mat), dtype=bool)]
    mean = float(off.mean()) if off.size else 0.0
    return float(off.max()) / mean if mean > 0 else 1.0
