"""Ranks of one workload that share a structure, so that what depends on it is worked out once.

Two ranks share a *shape* when their nodes' ids, data_deps, raw ctrl_deps and types are equal
node for node. What depends on those alone is then the same for both: the id positions, whether
file order is topological, the topological order, the dependencies validation drops, and where
the send/recv and collective nodes fall in that order. ``validate_workload`` validates the first
rank of each shape in full and the others only for what differs (their derived fields and
durations). A generated workload has a handful of shapes over thousands of ranks; one whose ranks
all differ stops looking after ``GIVE_UP`` misses.

A registry lives for one check of one workload: a shape holds the first rank's lists (the deps
lists are that rank's own), which nothing changes while the check runs.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any

from genie.workload.graph import _dep_scan, _positions, topological_indices
from genie.workload.model import Node, NodeType, RankGraph

#: ranks with more nodes than this are not compared (the lists would cost memory, not time)
MAX_NODES = 1 << 16
#: shapes kept per registry, and per node count
MAX_SHAPES = 64
MAX_PER_LENGTH = 4
#: a registry that found no rank like an earlier one after this many stops looking
GIVE_UP = 64

_SEND, _RECV = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
_COLL = int(NodeType.COMM_COLL_NODE)


class Shape:
    """The structure of a rank and what follows from it (see the module docstring)."""

    __slots__ = ("_coll", "_ctrl_at", "_groups", "_p2p", "counts", "first", "rows", "types")

    def __init__(self, rank: RankGraph, rows: list[tuple]) -> None:
        self.rows = rows  # per node: (id, type, data_deps, raw ctrl_deps)
        self.types = [r[1] for r in rows]
        self.first = rank  # the rank the structure was taken from
        #: dropped-dependency counts once ``first`` validated (None: not yet)
        self.counts: Counter[str] | None = None
        self._ctrl_at: list[int] | None = None
        self._groups: list[tuple[int, Any, list[int]]] | None = None
        self._p2p: list[int] | None = None
        self._coll: list[int] | None = None

    def learn(self, counts: Counter[str]) -> None:
        """Record that ``first`` validated with these dropped-dependency counts; its positions,
        dependency scan and topological order are cached on it from now on."""
        first = self.first
        _dep_scan(first, _positions(first))  # (validate_rank left these cached)
        topological_indices(first)
        self.counts = +counts

    def adopt(self, rank: RankGraph) -> None:
        """Give ``rank`` the first rank's cached positions, dependency scan and order (shared:
        nothing changes them)."""
        src, dst = self.first.__dict__, rank.__dict__
        for key in ("_pos_cache", "_backward_cache", "_topo_cache"):
            got = src.get(key)
            if got is not None:
                dst[key] = got

    def ctrl_at(self) -> list[int]:
        """Positions of the nodes with raw ctrl_deps."""
        if self._ctrl_at is None:
            self._ctrl_at = [i for i, r in enumerate(self.rows) if r[3]]
        return self._ctrl_at

    def type_groups(self) -> list[tuple[int, Any, list[int]]]:
        """Per node type: the type, a getter of its positions' items (a tuple), the positions."""
        if self._groups is None:
            at: dict[int, list[int]] = {}
            for i, t in enumerate(self.types):
                at.setdefault(t, []).append(i)
            self._groups = [(t, _getter(pos), pos) for t, pos in at.items()]
        return self._groups

    def p2p_order(self) -> list[int]:
        """Positions of the send and recv nodes in topological order."""
        if self._p2p is None:
            types = self.types
            if _SEND in types or _RECV in types:
                topo = topological_indices(self.first)
                self._p2p = [i for i in topo if types[i] in (_SEND, _RECV)]
            else:
                self._p2p = []
        return self._p2p

    def coll_order(self) -> list[int]:
        """Positions of the collective nodes in topological order."""
        if self._coll is None:
            types = self.types
            topo = topological_indices(self.first)
            self._coll = [i for i in topo if types[i] == _COLL]
        return self._coll


def _getter(pos: list[int]) -> Any:
    if len(pos) == 1:
        only = pos[0]
        return lambda seq: (seq[only],)
    return itemgetter(*pos)


class RankShapes:
    """The shapes of the ranks of one workload, as they are met (see the module docstring)."""

    def __init__(self) -> None:
        self.by_length: dict[int, list[Shape]] = {}
        self.kept = 0
        self.hits = 0
        self.misses = 0

    def of(self, rank: RankGraph) -> tuple[Shape, bool] | None:
        """``rank``'s shape and whether an earlier rank had it, or None where not compared."""
        nodes: list[Node] = rank.nodes
        n = len(nodes)
        if n > MAX_NODES or (self.misses >= GIVE_UP and not self.hits):
            return None
        rows = [(x.id, x.type, x.data_deps, x.raw_ctrl_deps) for x in nodes]
        same = self.by_length.setdefault(n, [])
        for s in same:
            if rows == s.rows:
                self.hits += 1
                return s, True
        self.misses += 1
        s = Shape(rank, rows)
        if len(same) < MAX_PER_LENGTH and self.kept < MAX_SHAPES:
            same.append(s)
            self.kept += 1
        return s, False
