"""Pricer through the collectives' cost model: each instance planned as a real step program.

For a collective instance the pricer builds the program (``genie.collectives.build_program``
with the chosen algorithm, chunks, the group's global ranks) and prices it alone with
``genie.collectives.cost.estimate`` on the topology and placement. The fluid backend then gets
the program's bytes on each topology link (intra-host bytes spread evenly over the group's
intra-host ports) and a latency term chosen so that the instance alone takes exactly the cost
model's time: ``latency = time_s - max(bytes_l / capacity_l)``. So an isolated collective is
priced exactly as ``genie collective show`` prices it, and collectives in flight together share
the links they really load. Collectives the cost model has no plan for (gather, scatter,
barrier) fall back to the simulator's built-in traffic model on the same topology.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from genie.errors import CollectiveError
from genie.sim.network import CachedPricer, Demand, Transfer
from genie.sim.traffic import TopologyPricer
from genie.sim.uneven import UnevenPricing
from genie.vocabulary import chakra_name, planned_name


def ranks_per_host(hosts: Sequence[int]) -> int:
    """k when the group's ranks sit k to a host in contiguous runs (for hierarchical), else 1."""
    runs: list[int] = []
    seen: set[int] = set()
    for i, h in enumerate(hosts):
        if i and h == hosts[i - 1]:
            runs[-1] += 1
            continue
        if h in seen:
            return 1
        seen.add(h)
        runs.append(1)
    return runs[0] if runs and len(set(runs)) == 1 else 1


class ProgramPricer(UnevenPricing, CachedPricer):
    """Prices transfers with programs and the collectives cost model (see module docstring)."""

    def __init__(
        self,
        topology: Any,
        placement: Sequence[int],
        n_ranks: int | None = None,
        algorithms: Mapping[str, str] | None = None,
        chunks: int = 1,
    ) -> None:
        from genie.collectives import build_program
        from genie.collectives.cost import estimate

        super().__init__()
        self._build = build_program
        self._estimate = estimate
        self.fallback = TopologyPricer(topology, placement, n_ranks)
        self.topology = topology
        self.host_of = self.fallback.host_of
        self.algorithms = dict(algorithms or {})
        self.chunks = chunks
        self.fallbacks: dict[str, int] = {}
        self.priced: dict[tuple[str, str, int, int], float] = {}

    def capacity(self) -> np.ndarray:
        """Same link layout as TopologyPricer: topology links, then one intra port per rank."""
        return self.fallback.capacity()

    def link_names(self) -> list[str]:
        """Names of the links of ``capacity()`` (the fallback's layout)."""
        return self.fallback.link_names()

    def describe(self) -> str:
        """The topology, placement and algorithms."""
        algos = ", ".join(f"{k}={v}" for k, v in sorted(self.algorithms.items())) or "defaults"
        return f"{self.fallback.describe()}; programs priced by genie.collectives.cost ({algos})"

    def _price_uneven(self, transfer: Transfer, mat: np.ndarray) -> Demand:
        """An all-to-all-v: its program with the per-peer sizes, priced by the cost model."""
        return self._price(transfer, tuple(int(x) for x in mat.ravel()))

    def _price(self, transfer: Transfer, splits: tuple[int, ...] = ()) -> Demand:
        """Demand of one transfer from its program's cost."""
        name = chakra_name(transfer.comm_type)
        ranks = tuple(int(r) for r in transfer.ranks)
        n = len(ranks)
        if n < 2 or (transfer.size == 0 and name != "send_recv"):
            return self.fallback.price(transfer)
        hosts = [int(self.host_of[r]) for r in ranks]
        try:
            planned = planned_name(transfer.comm_type)
            prog = self._build(
                planned,
                self.algorithms.get(planned),
                n,
                int(transfer.size),
                chunks=self.chunks,
                ranks=ranks,
                ranks_per_host=ranks_per_host(hosts),
                splits=splits,
            )
            cost = self._estimate(prog, self.topology, hosts)
        except CollectiveError:
            self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
            return self.fallback.price(transfer)
        cap = self.capacity()
        links = sorted(cost.link_bytes)
        nbytes = [float(cost.link_bytes[lid]) for lid in links]
        if cost.intra_bytes:
            base = self.fallback.n_links
            share = float(cost.intra_bytes) / n
            links += [base + r for r in ranks]
            nbytes += [share] * n
        la = np.asarray(links, np.int64)
        nb = np.asarray(nbytes, np.float64)
        w = float(np.max(nb / cap[la])) if len(la) else 0.0
        dem = Demand(latency=max(0.0, cost.time_s - w), links=la, nbytes=nb)
        self.priced[(name, prog.spec.algorithm, n, int(transfer.size))] = cost.time_s
        return dem
