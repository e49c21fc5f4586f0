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

Each distinct shape is priced once. On a switch or fully-connected topology whose links are all
alike, renaming hosts maps the network onto itself, so a group's cost depends only on the
collective, the size and the pattern of its hosts (which ranks share a host): every group of
that shape is priced once, on hosts 0, 1, ... in order of first appearance, and its link bytes
are mapped back onto the group's own hosts' links (the same numbers, on other links). On a
leaf-spine with one spine (no hash picks among paths) whose host links are all alike and whose
uplinks are all alike, renaming hosts within their leaf does the same: a group is priced on the
first hosts of its leaves, in order of first appearance per leaf. Elsewhere (rings, several
spines, testbeds; ECMP hashes ranks) each group is priced as itself.
``canonical=False`` prices every group as itself everywhere (the reference the tests compare).

A data-parallel ring of thousands of ranks on a leaf-spine (contiguous per leaf) is priced by
the cost model's contention-free shortcut (``genie.collectives.contention_free``: no flow shares
a link, so a max-plus recurrence over rank 0's steps gives the event simulation's figures bit
for bit), also beyond the event simulation's step limit, where it used to fall back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import truediv
from typing import Self

import numpy as np

from genie.collectives.topology import Topology
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
        topology: Topology,
        placement: Sequence[int | str],  # each rank's host: index or name
        n_ranks: int | None = None,
        algorithms: Mapping[str, str] | None = None,
        chunks: int = 1,
        canonical: bool = True,
        *,
        like: ProgramPricer | None = None,
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
        self.canonical = canonical and _relabels_hosts(topology)
        # ``like``: a pricer on this very topology object whose tables read from the topology
        # alone (leaf rows, link ids, link codes) are this one's too (``twin``)
        src = like if like is not None and like.topology is topology else None
        self._asked_canonical = canonical
        # a one-spine leaf-spine: each leaf's hosts in order (hosts relabel within their leaf)
        self._leaf_hosts: list[tuple[int, list[int]]] | None
        if src is not None and src._asked_canonical == canonical:
            self._leaf_hosts = src._leaf_hosts
        else:
            self._leaf_hosts = _leaf_hosts(topology) if canonical and not self.canonical else None
        # (comm type, size, host pattern) -> (time s, algorithm, canonical link bytes, intra
        # bytes), or None where the cost model declined
        self._shapes: dict[tuple, tuple | None] = {}
        self._lid: dict[tuple[str, str], int] = (
            src._lid
            if src is not None
            else {(lk.src, lk.dst): i for i, lk in enumerate(topology.links)}
        )
        # (comm type, size, ranks, hosts, splits) -> ``_cost``'s program cost (None: declined);
        # ``twin`` shares it with a pricer of the same topology, algorithms and chunks
        self._programs: dict[tuple, tuple | None] = {}
        # per canonical shape, its links' ends and bytes (``_ends``); the hosts and capacities
        # as lists (``_price`` reads a few of them per transfer, thousands of transfers)
        self._shape_ends: dict[tuple, tuple[list[str], list[str], list[float]]] = {}
        self._host_list: list[int] | None = None
        self._cap_of: np.ndarray | None = None
        self._cap_list: list[float] = []
        self._cap_positive = False
        # ``price_many``'s last few lists of transfers with what they name (``_layout``);
        # ``twin`` shares it: the line-rate check prices the NCCL-like check's very list
        self._layouts: list[tuple[tuple[Transfer, ...], list[tuple]]] = []
        # ``_link_codes``: node ids, links' sorted (src, dst) codes and their link ids
        self._codes: tuple[dict[str, int], np.ndarray, np.ndarray] | None = (
            src._codes if src is not None else None
        )

    def twin(self, algorithms: Mapping[str, str] | None = None) -> ProgramPricer:
        """A line-rate ``ProgramPricer`` on this pricer's topology (the same object), placement
        and chunks; with the same algorithms it shares the programs' costs (each step program
        both price is simulated once; the line-rate replay beside the NCCL-like one needs it)."""
        other = ProgramPricer(
            self.topology,
            self.host_of.tolist(),
            self.fallback.n_ranks,
            algorithms,
            self.chunks,
            like=self,
        )
        if other.algorithms == self.algorithms and other.canonical == self.canonical:
            other._programs = self._programs
        if other.canonical == self.canonical and other._leaf_hosts is self._leaf_hosts:
            other._layouts = self._layouts  # the same hosts, groups and canonical shapes
        return other

    def use_splits(self, splits: Mapping[int, np.ndarray]) -> Self:
        """Price instance ids in ``splits`` by their n x n byte matrix (the fallback too)."""
        super().use_splits(splits)
        self.fallback.use_splits(splits)
        return self

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
        ranks = tuple(map(int, transfer.ranks))
        n = len(ranks)
        if n < 2 or (transfer.size == 0 and name != "send_recv"):
            return self.fallback.price(transfer)
        if self._host_list is None:  # each rank's host, as Python ints (read per transfer)
            self._host_list = self.host_of.tolist()
        hosts = list(map(self._host_list.__getitem__, ranks))
        if (self.canonical or self._leaf_hosts is not None) and not splits:  # an all-to-all-v's
            first = self._first(hosts)  # matrix is its group's own
            pattern = tuple(map(first.__getitem__, hosts))
            key = (transfer.comm_type, int(transfer.size), pattern)
            if key not in self._shapes:
                self._shapes[key] = self._cost(transfer.comm_type, transfer.size, (), pattern)
            shape = self._shapes[key]
            if shape is not None:
                name_of = self.topology.hosts.__getitem__
                actual = dict(zip(map(name_of, first.values()), map(name_of, first), strict=True))
                src, dst, nbytes_of = self._ends(key, shape)
                get = actual.get  # each canonical link's ends renamed: the group's own link
                ends = zip(map(get, src, src), map(get, dst, dst), strict=True)
                moved = dict(zip(map(self._lid.__getitem__, ends), nbytes_of, strict=True))
                shape = (shape[0], shape[1], moved, shape[3])
        else:
            shape = self._cost(transfer.comm_type, transfer.size, ranks, tuple(hosts), splits)
        if shape is None:
            self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
            return self.fallback.price(transfer)
        time_s, algorithm, link_bytes, intra_bytes = shape
        cap = self.capacity()
        if cap is not self._cap_of:  # the capacities as Python floats (read per transfer)
            self._cap_of, self._cap_list = cap, cap.tolist()
            self._cap_positive = bool((cap > 0).all())
        links = sorted(link_bytes)
        nbytes = [float(link_bytes[lid]) for lid in links]
        if intra_bytes:
            base = self.fallback.n_links
            share = float(intra_bytes) / n
            links += [base + r for r in ranks]
            nbytes += [share] * n
        la = np.asarray(links, np.int64)
        nb = np.asarray(nbytes, np.float64)
        if not links:
            w = 0.0
        elif self._cap_positive:  # W = max(bytes / capacity) in Python floats: numpy's IEEE
            w = max(map(truediv, nbytes, map(self._cap_list.__getitem__, links)))  # division
        else:  # a link of no capacity: numpy's infinities and NaN, as before
            w = float(np.max(nb / cap[la]))
        dem = Demand(latency=max(0.0, time_s - w), links=la, nbytes=nb)
        self.priced[(name, algorithm, n, int(transfer.size))] = time_s
        return dem

    def price_many(self, transfers: Sequence[Transfer]) -> list[Demand]:
        """``[self.price(t) for t in transfers]``: the same demands, cached alike, the same cost
        model calls in the same order, but each canonical shape's links renamed onto all its
        groups at once as arrays (``_rename_rows``): ``orbits.check_pricing`` prices thousands
        of transfers (6,152 of a 4,096-rank llm) this way. Where there are no canonical shapes,
        a link has no capacity, or a subclass prices otherwise, it is that loop."""
        cap = self.capacity()
        if cap is not self._cap_of:
            self._cap_of, self._cap_list = cap, cap.tolist()
            self._cap_positive = bool((cap > 0).all())
        cls = type(self)
        if (
            not (self.canonical or self._leaf_hosts is not None)
            or not self._cap_positive
            or cls.price is not UnevenPricing.price
            or cls._price is not ProgramPricer._price
        ):
            return [self.price(t) for t in transfers]
        lay = self._layout(transfers)
        cache, uneven, shapes = self._cache, self._uneven, self._shapes
        out: list[Demand | None] = [None] * len(transfers)
        # canonical shape -> (its cost, [(slot, transfer, cache key, ranks, distinct hosts)])
        rows: dict[tuple, tuple[tuple, list[tuple[int, Transfer, tuple, tuple, list[int]]]]] = {}
        owner: dict[tuple, int] = {}  # cache key -> its first slot in this batch
        later: list[tuple[int, int]] = []  # (slot, the slot of its key's first transfer)
        for i, (t, (ck, named)) in enumerate(zip(transfers, lay, strict=True)):
            if t.iid in uneven:
                out[i] = self.price(t)
                continue
            hit = cache.get(ck)
            if hit is not None:
                out[i] = hit
                continue
            j = owner.get(ck)
            if j is not None:
                later.append((i, j))
                continue
            if named is None:  # too few ranks or nothing to move: as ``price`` prices it
                out[i] = self.price(t)
                continue
            name, ranks, n, first, key = named
            if key not in shapes:
                shapes[key] = self._cost(t.comm_type, t.size, (), key[2])
            shape = shapes[key]
            if shape is None:  # declined: the traffic model, counted as ``_price`` counts it
                out[i] = self.price(t)
                continue
            self.priced[(name, shape[1], n, int(t.size))] = shape[0]
            rows.setdefault(key, (shape, []))[1].append((i, t, ck, ranks, first))
            owner[ck] = i
        for key, (shape, group) in rows.items():
            dems = self._rename_rows(key, shape, group)
            for (i, _, ck, _, _), dem in zip(group, dems, strict=True):
                cache[ck] = out[i] = dem
        for i, j in later:
            out[i] = out[j]
        return out  # type: ignore[return-value]

    LAYOUTS_KEPT = 4

    def _layout(self, transfers: Sequence[Transfer]) -> list[tuple]:
        """Per transfer, what ``price_many`` reads of it besides this pricer's state: its cache
        key, and (name, ranks, rank count, its distinct hosts' canonical hosts in order of first
        appearance, canonical shape key), or None where ``price`` prices it alone (fewer than
        two ranks, or no bytes and not a send/recv). Made once per tuple of transfers (a list
        may change): the last ``LAYOUTS_KEPT`` tuples are remembered, by identity (each kept
        alive with its own)."""
        for seen, lay in self._layouts:
            if seen is transfers:
                return lay
        if self._host_list is None:
            self._host_list = self.host_of.tolist()
        host = self._host_list.__getitem__
        lay = []
        for t in transfers:
            ck: tuple = (t.comm_type, t.size, t.group)
            if t.group < 0:
                ck = (*ck, t.ranks)
            name = chakra_name(t.comm_type)
            ranks = tuple(map(int, t.ranks))
            n = len(ranks)
            if n < 2 or (t.size == 0 and name != "send_recv"):
                lay.append((ck, None))
                continue
            hosts = list(map(host, ranks))
            first = self._first(hosts)
            pattern = tuple(map(first.__getitem__, hosts))
            lay.append((ck, (name, ranks, n, list(first), (t.comm_type, int(t.size), pattern))))
        if type(transfers) is tuple:
            self._layouts.insert(0, (transfers, lay))
            del self._layouts[self.LAYOUTS_KEPT :]
        return lay

    def _rename_rows(self, key: tuple, shape: tuple, group: list[tuple]) -> list[Demand]:
        """The demands ``_price`` gives the groups of one canonical shape (``price_many``'s
        rows), as arrays: each canonical link's ends renamed onto each group's hosts, looked up,
        sorted per group, W and the latency as ``_price`` works them out (the same IEEE
        divisions; the largest quotient). A renaming onto a missing or repeated link (which
        ``_price`` raises on or merges) is left to ``_price``, group by group."""
        time_s, _, _, intra_bytes = shape
        src, dst, nbytes_of = self._ends(key, shape)
        canon = list(dict.fromkeys(key[2]))  # canonical hosts, as the groups' ``first`` values
        hosts = self.topology.hosts
        col = {hosts[c]: j for j, c in enumerate(canon)}
        acts = np.array([g[4] for g in group], np.int64)  # (groups, distinct hosts)
        nodes, codes, code_lid = self._link_codes()
        lids = None
        if all(x in nodes for x in (*src, *dst)):
            s_at = self._renamed(src, col, nodes, acts)
            d_at = self._renamed(dst, col, nodes, acts)
            code = s_at * len(nodes) + d_at
            pos = np.minimum(np.searchsorted(codes, code), len(codes) - 1)
            if len(codes) and np.array_equal(codes[pos], code):
                lids = code_lid[pos]
        if lids is not None:
            order = np.argsort(lids, axis=1, kind="stable")
            lids = np.take_along_axis(lids, order, axis=1)
            if np.any(lids[:, 1:] == lids[:, :-1]):
                lids = None
        if lids is None:  # ``price_many`` recorded ``priced`` in order: kept as it was
            kept = self.priced.copy()
            dems = [self._price(g[1]) for g in group]
            self.priced.update(kept)
            return dems
        nb = np.asarray(nbytes_of, np.float64)[order]
        if intra_bytes:
            n = len(group[0][3])
            base = self.fallback.n_links
            ranks = np.array([g[3] for g in group], np.int64)
            lids = np.concatenate([lids, ranks + base], axis=1)
            share = np.full((len(group), n), float(intra_bytes) / n)
            nb = np.concatenate([nb, share], axis=1)
        if lids.shape[1]:
            ws = np.max(nb / self._cap_of[lids], axis=1).tolist()  # type: ignore[index]
        else:
            ws = [0.0] * len(group)
        return [
            Demand(latency=max(0.0, time_s - w), links=la, nbytes=b)
            for w, la, b in zip(ws, lids, nb, strict=True)
        ]

    @staticmethod
    def _renamed(
        names: list[str], col: dict[str, int], nodes: dict[str, int], acts: np.ndarray
    ) -> np.ndarray:
        """Node ids of ``names`` per group: a canonical host's column of ``acts`` (the group's
        own host), any other node itself."""
        j = np.array([col.get(x, -1) for x in names], np.int64)
        fixed = np.array([nodes[x] for x in names], np.int64)
        return np.where(j >= 0, acts[:, np.maximum(j, 0)], fixed)

    def _link_codes(self) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """Node ids (host ``h`` is node ``h``), the sorted ``src * nodes + dst`` codes of the
        links ``_lid`` names, and each code's link id (``_lid``'s)."""
        got = self._codes
        if got is None:
            topo = self.topology
            nodes = {x: i for i, x in enumerate(topo.hosts)}
            for x in topo.switches:
                nodes.setdefault(x, len(nodes))
            for a, b in self._lid:
                nodes.setdefault(a, len(nodes))
                nodes.setdefault(b, len(nodes))
            code = np.array([nodes[a] * len(nodes) + nodes[b] for a, b in self._lid], np.int64)
            lid = np.array(list(self._lid.values()), np.int64)
            order = np.argsort(code, kind="stable")
            got = self._codes = (nodes, code[order], lid[order])
        return got

    def _first(self, hosts: list[int]) -> dict[int, int]:
        """Each distinct host of a group (in order of first appearance) -> the host its
        canonical shape puts it on (``canonical`` or a one-spine leaf-spine only)."""
        leaf_hosts = self._leaf_hosts
        if leaf_hosts is None:  # hosts numbered in order of first appearance
            if len(hosts) == 2:  # a pair (a send/recv: most transfers), numbered directly
                a, b = hosts
                return {a: 0} if a == b else {a: 0, b: 1}
            seen = dict.fromkeys(hosts)
            return dict(zip(seen, range(len(seen)), strict=True))
        # the k-th distinct host on a leaf stands for that leaf's k-th host
        if len(hosts) == 2:  # a pair, numbered directly
            a, b = hosts
            leaf, row = leaf_hosts[a]
            if a == b:
                return {a: row[0]}
            other, row_b = leaf_hosts[b]
            return {a: row[0], b: row[1] if other == leaf else row_b[0]}
        first: dict[int, int] = {}
        used: dict[int, int] = {}
        for h in hosts:
            if h not in first:
                leaf, row = leaf_hosts[h]
                first[h] = row[used.get(leaf, 0)]
                used[leaf] = used.get(leaf, 0) + 1
        return first

    def _ends(self, key: tuple, shape: tuple) -> tuple[list[str], list[str], list[float]]:
        """A canonical shape's links as columns: sources, destinations and bytes, in the order
        of its dict."""
        got = self._shape_ends.get(key)
        if got is None:
            links = [self.topology.links[lid] for lid in shape[2]]
            got = self._shape_ends[key] = (
                [lk.src for lk in links],
                [lk.dst for lk in links],
                list(shape[2].values()),
            )
        return got

    def _cost(
        self, ctype: int, size: int, ranks: tuple, hosts: tuple, splits: tuple[int, ...] = ()
    ) -> tuple | None:
        """(time s, algorithm, link bytes, intra bytes) of one program, None if declined;
        ``splits``: an all-to-all-v's per-peer sizes (row-major matrix). Memoised: callers read
        the tuple and its dict, never change them."""
        key = (ctype, int(size), ranks, hosts, splits)
        if key in self._programs:
            return self._programs[key]
        out = self._program_cost(ctype, size, ranks, hosts, splits)
        self._programs[key] = out
        return out

    def _program_cost(
        self, ctype: int, size: int, ranks: tuple, hosts: tuple, splits: tuple[int, ...]
    ) -> tuple | None:
        """``_cost`` computed: the program built and priced by the cost model."""
        try:
            planned = planned_name(ctype)
            prog = self._build(
                planned,
                self.algorithms.get(planned),
                len(hosts),
                int(size),
                chunks=self.chunks,
                ranks=ranks,
                ranks_per_host=ranks_per_host(hosts),
                splits=splits,
            )
            cost = self._estimate(prog, self.topology, list(hosts))
        except CollectiveError:
            return None
        return cost.time_s, prog.spec.algorithm, dict(cost.link_bytes), cost.intra_bytes


def _leaf_hosts(topology: Topology) -> list[tuple[int, list[int]]] | None:
    """Per host, (its leaf, that leaf's hosts in order) where renaming hosts within their leaf
    maps ``topology`` onto itself and routes stay the same: a leaf-spine with at most one spine
    (so no hash picks among paths), no learned paths, one NIC per server, and all host links
    alike, all uplinks alike. None elsewhere."""
    if topology.kind != "leaf_spine" or topology.paths is not None:
        return None
    n = len(topology.hosts)
    if topology.server_of != tuple(range(n)):
        return None
    index = {name: i for i, name in enumerate(topology.hosts)}
    leaf_of: list[str | None] = [None] * n
    host_links: set[tuple[float, float]] = set()
    uplinks: set[tuple[float, float]] = set()
    for lk in topology.links:
        a, b = index.get(lk.src), index.get(lk.dst)
        if a is not None and b is not None:
            return None
        if a is not None:
            if leaf_of[a] not in (None, lk.dst):
                return None
            leaf_of[a] = lk.dst
        (host_links if a is not None or b is not None else uplinks).add((lk.bandwidth, lk.latency))
    leaves = {x for x in leaf_of if x is not None}
    spines = set(topology.switches) - leaves
    if None in leaf_of or len(spines) > 1 or len(host_links) > 1 or len(uplinks) > 1:
        return None
    rows: dict[str, list[int]] = {}
    for h, leaf in enumerate(leaf_of):
        assert leaf is not None
        rows.setdefault(leaf, []).append(h)
    number = {leaf: i for i, leaf in enumerate(rows)}
    return [(number[leaf], rows[leaf]) for leaf in leaf_of if leaf is not None]


def _relabels_hosts(topology: Topology) -> bool:
    """True when any renaming of hosts maps ``topology`` onto itself: a switch or a
    fully-connected network whose links all have one bandwidth and one latency."""
    if topology.symmetry not in ("star", "full"):
        return False
    links = topology.links
    return len({(lk.bandwidth, lk.latency) for lk in links}) <= 1
