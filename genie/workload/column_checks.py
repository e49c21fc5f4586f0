"""Validation of one rank read in columns (``et_columns.NodeColumns``): ``validate_rank``'s
checks as array operations.

Ids, dependencies and durations are checked over the columns; the checks of a node's type and
derived fields (``validate._check_fields``) run once per distinct (type, derived tuple) pair,
which the columns intern. Where any check would fail, the rank goes to ``validate_rank`` (the
reference), which raises the error it always raised, naming the first bad node. Otherwise the
result is the reference's: the same problems, the same dropped counts, the same kept ctrl_deps
on the nodes, and the rank's topological order cached as ``graph.topological_indices`` would
compute it (Kahn's algorithm, ties by file order).
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

import numpy as np

from genie.errors import ValidationError
from genie.workload.et_columns import NodeColumns
from genie.workload.model import Node, RankGraph
from genie.workload.validate import ABSURD_MICROS, _check_fields, _drop_note, validate_rank


class NeedsReference(Exception):
    """A check failed on the columns: ``validate_rank`` says which, naming the node."""


@dataclass
class RankCheck:
    """What ``validate_rank`` finds on a valid rank, from its columns."""

    problems: list[str]
    counts: Counter[str]
    topo: np.ndarray | None  # topological order (int64 positions); None: file order
    ctrl_drop: np.ndarray | None  # per ctrl_deps value: set aside (None: none is)


def check_columns(cols: NodeColumns, rank: RankGraph, n_ranks: int) -> RankCheck:
    """``validate_rank``'s checks on ``cols`` (``rank`` names the rank in messages; its nodes
    are not read); raises ``NeedsReference`` where a check fails."""
    n = len(cols)
    if cols.fallback:
        raise NeedsReference
    order = np.argsort(cols.id, kind="stable")
    sid = cols.id[order]
    if (sid[1:] == sid[:-1]).any() or (cols.duration_micros > ABSURD_MICROS).any():
        raise NeedsReference  # a duplicate id or an absurd duration
    table = cols.derived_table
    probe = Node.__new__(Node)  # the checks read a node's type and derived fields alone
    probe.id, probe.name = 0, ""  # (and its label, for a message that is not kept)
    try:
        for r in _one_row_each(cols.type, cols.derived, len(table)):
            probe.type = int(cols.type[r])
            probe._d = table[cols.derived[r]]
            _check_fields(rank, probe, n_ranks)
    except ValidationError:
        raise NeedsReference from None
    row, pos, found = _dep_positions(cols.data_offsets, cols.data_deps, sid, order, n)
    if not found.all():
        raise NeedsReference  # a data_dep dangles
    selfs = pos == row
    topo = None
    if not (pos <= row).all():
        got = _topological(n, row[~selfs], pos[~selfs])
        if got is None:
            raise NeedsReference  # a cycle
        topo = np.array(got, dtype=np.int64)
    counts: Counter[str] = Counter()
    crow, cpos, cfound = _dep_positions(cols.ctrl_offsets, cols.ctrl_deps, sid, order, n)
    drop = None
    if crow.size:
        missing = ~cfound
        to_self = cfound & (cpos == crow)
        forward = cfound & (cpos > crow)
        for key, mask in (
            ("ctrl_deps_to_missing_ids", missing),
            ("ctrl_deps_to_self", to_self),
            ("ctrl_deps_forward", forward),
        ):
            c = int(np.count_nonzero(mask))
            if c:
                counts[key] = c
        drop = missing | to_self | forward
        if not drop.any():
            drop = None
    self_data = int(np.count_nonzero(selfs))
    if self_data:
        counts["data_deps_to_self"] += self_data
    note = _drop_note(rank, counts)
    return RankCheck([note] if note else [], counts, topo, drop)


def apply_ctrl_drop(nodes: list[Node], cols: NodeColumns, drop: np.ndarray | None) -> None:
    """Set ``ctrl_deps`` (the kept ones) on the nodes that set some aside, as
    ``validate.filter_ctrl_deps`` does."""
    if drop is None:
        return
    n = len(cols)
    crow = np.repeat(np.arange(n, dtype=np.int64), np.diff(cols.ctrl_offsets))
    kept = cols.ctrl_deps[~drop].tolist()
    koff = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(crow[~drop], minlength=n), out=koff[1:])
    ko = koff.tolist()
    for r in np.unique(crow[drop]).tolist():
        nodes[r].ctrl_deps = kept[ko[r] : ko[r + 1]]


def validate_rank_columns(
    rank: RankGraph, cols: NodeColumns, n_ranks: int, dropped: Counter[str] | None = None
) -> list[str]:
    """``validate_rank(rank, n_ranks, dropped)`` computed from ``cols``, the columns that
    ``rank.nodes`` were made from (and are still equal to)."""
    if len(cols) != len(rank.nodes):
        return validate_rank(rank, n_ranks, dropped)
    try:
        got = check_columns(cols, rank, n_ranks)
    except NeedsReference:
        return validate_rank(rank, n_ranks, dropped)  # raises, naming the first bad node
    apply_ctrl_drop(rank.nodes, cols, got.ctrl_drop)
    topo = got.topo.tolist() if got.topo is not None else list(range(len(cols)))
    rank.__dict__["_topo_cache"] = (len(cols), topo)  # as graph.topological_indices caches it
    if dropped is not None:
        dropped.update(got.counts)
    return got.problems


def _one_row_each(types: np.ndarray, derived: np.ndarray, n_derived: int) -> list[int]:
    """One row of each distinct (type, derived index) pair."""
    key = derived.astype(np.int64) * 256 + types
    if 256 * n_derived <= 4 * len(key) + 4096:  # few pairs: a table of first rows, no sort
        first = np.full(256 * n_derived, -1, dtype=np.int64)
        first[key[::-1]] = np.arange(len(key) - 1, -1, -1, dtype=np.int64)
        return first[first >= 0].tolist()
    return np.unique(key, return_index=True)[1].tolist()


def _dep_positions(
    offsets: np.ndarray, deps: np.ndarray, sid: np.ndarray, order: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per dependency: its row, the position of the node it names (ids unique), and whether
    such a node exists."""
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    if not n:
        return row, row.copy(), np.ones(0, dtype=bool)
    k = np.minimum(np.searchsorted(sid, deps), n - 1)
    found = sid[k] == deps
    return row, order[k], found


def _topological(n: int, row: np.ndarray, pos: np.ndarray) -> list[int] | None:
    """Positions ordered after their deps (``row`` waits for ``pos``), ties broken by position
    (``graph.index_order``'s order); None on a cycle."""
    key = np.sort(row * n + pos, kind="stable")  # in row order already: nearly sorted
    if len(key) > 1:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # each (row, dep) once
    waiter, dep = key // n, key % n
    indeg = np.bincount(waiter, minlength=n)
    by_dep = np.argsort(dep, kind="stable")
    users = waiter[by_dep].tolist()
    uoff = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dep, minlength=n), out=uoff[1:])
    uo = uoff.tolist()
    deg = indeg.tolist()
    heap = np.flatnonzero(indeg == 0).tolist()  # ascending: already a heap
    out: list[int] = []
    append = out.append
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        i = pop(heap)
        while True:  # i is the smallest ready position
            append(i)
            a, b = uo[i], uo[i + 1]
            if a == b:
                break
            nxt = -1  # the smallest position made ready by i (the others go on the heap)
            for u in users[a:b]:
                d = deg[u] - 1
                deg[u] = d
                if not d:
                    if nxt < 0:
                        nxt = u
                    elif u < nxt:
                        push(heap, nxt)
                        nxt = u
                    else:
                        push(heap, u)
            if nxt < 0:
                break
            if heap and heap[0] < nxt:
                push(heap, nxt)
                break
            i = nxt  # next without a trip through the heap (chains of deps, most of a trace)
    return out if len(out) == n else None
