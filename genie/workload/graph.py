"""Graph algorithms over one rank's DAG: order, cycles, critical path, collective sequences.

Scheduling follows data_deps only (ctrl_deps are kept but never scheduled on). A data_dep of a
node on itself is ignored (validation counts it as dropped), never a cycle. Every function is
pure: it reads a RankGraph and returns data.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

from genie.errors import ValidationError
from genie.vocabulary import UNEVEN_ATTR
from genie.workload.model import DEFAULT_GROUP, Node, NodeKind, NodeType, RankGraph, Workload


def _positions(rank: RankGraph) -> dict[int, int]:
    """id -> position of the first node with that id (cached on the rank)."""
    cache = rank.__dict__.get("_pos_cache")
    if cache is not None and cache[0] == len(rank.nodes):
        return cache[1]
    nodes = rank.nodes
    pos = {nodes[i].id: i for i in range(len(nodes) - 1, -1, -1)}
    rank.__dict__["_pos_cache"] = (len(rank.nodes), pos)
    return pos


def _all_backward(rank: RankGraph, pos: dict[int, int]) -> bool:
    """True when every data_dep names an earlier node (or itself): file order is topological."""
    return _dep_scan(rank, pos)[0]


def _dep_scan(rank: RankGraph, pos: dict[int, int]) -> tuple[bool, int]:
    """(every data_dep names an earlier node or itself, deps of a node on itself).

    The count is exact only when the first is true. Cached on the rank with the positions
    (validation asks three times: dangling deps, cycles, then order).
    """
    cache = rank.__dict__.get("_backward_cache")
    if cache is not None and cache[0] is pos:
        return cache[1]
    get = pos.get
    ok = True
    selfs = 0
    for i, n in enumerate(rank.nodes):
        for d in n.data_deps:
            j = get(d)
            if j is None or j > i:
                ok = False
                break
            if j == i:
                selfs += 1
        if not ok:
            break
    rank.__dict__["_backward_cache"] = (pos, (ok, selfs))
    return ok, selfs


def find_cycle(rank: RankGraph) -> list[Node] | None:
    """One cycle of data_deps as a list of nodes (each depends on the next), or None."""
    pos = _positions(rank)
    if _all_backward(rank, pos):
        return None
    nodes = rank.nodes
    state = [0] * len(nodes)  # 0 new, 1 on stack, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = [root]
        state[root] = 1
        while stack:
            i, k = stack[-1]
            deps = nodes[i].data_deps
            if k < len(deps):
                stack[-1] = (i, k + 1)
                j = pos.get(deps[k])
                if j is None or j == i:
                    continue
                if state[j] == 1:
                    cyc = path[path.index(j) :]
                    return [nodes[x] for x in cyc]
                if state[j] == 0:
                    state[j] = 1
                    stack.append((j, 0))
                    path.append(j)
            else:
                state[i] = 2
                stack.pop()
                path.pop()
    return None


def topological_order(rank: RankGraph) -> list[Node]:
    """Nodes ordered after their data_deps, ties broken by file order; raises on a cycle."""
    nodes = rank.nodes
    return [nodes[i] for i in topological_indices(rank)]


def topological_indices(rank: RankGraph) -> list[int]:
    """Positions of the nodes in topological order (see ``topological_order``; cached)."""
    cache = rank.__dict__.get("_topo_cache")
    if cache is not None and cache[0] == len(rank.nodes):
        return cache[1]
    order = _topological_indices(rank)
    rank.__dict__["_topo_cache"] = (len(rank.nodes), order)
    return order


def index_order(deps: list[list[int]]) -> list[int] | None:
    """Positions 0..n-1 ordered after ``deps[i]`` (positions each one waits for), ties broken by
    position (Kahn's algorithm over a heap); None when the deps form a cycle."""
    n = len(deps)
    indeg = [len(set(d)) for d in deps]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j in set(d):
            users[j].append(i)
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        out.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, u)
    return out if len(out) == n else None


def _topological_indices(rank: RankGraph) -> list[int]:
    pos = _positions(rank)
    nodes = rank.nodes
    if _all_backward(rank, pos):
        return list(range(len(nodes)))
    deps = [
        [j for d in set(nd.data_deps) if (j := pos.get(d)) is not None and j != i]
        for i, nd in enumerate(nodes)
    ]
    out = index_order(deps)
    if out is None:
        cyc = find_cycle(rank) or []
        raise ValidationError(
            f"rank {rank.rank}: data_deps form a cycle: " + " -> ".join(x.label() for x in cyc)
        )
    return out


def critical_path(rank: RankGraph) -> tuple[float, list[Node]]:
    """Longest chain of data_deps weighted by node duration (seconds) and its nodes."""
    nodes = rank.nodes
    if not nodes:
        return 0.0, []
    pos = _positions(rank)
    finish = [0] * len(nodes)  # microseconds
    prev: list[int] = [-1] * len(nodes)
    for i in topological_indices(rank):
        nd = nodes[i]
        start = 0
        p = -1
        for d in nd.data_deps:
            j = pos.get(d)
            if j is not None and j != i and finish[j] > start:
                start = finish[j]
                p = j
        finish[i] = start + nd.duration_micros
        prev[i] = p
    end = max(range(len(nodes)), key=finish.__getitem__)
    chain = []
    cur = end
    while cur >= 0:
        chain.append(nodes[cur])
        cur = prev[cur]
    return finish[end] * 1e-6, chain[::-1]


class CollectiveCall(NamedTuple):
    """One collective as seen by the group-consistency check."""

    comm_type: int | None
    comm_size: int | None
    node: Node

    def key(self) -> tuple[int | None, int | None]:
        """What must agree across the ranks of a group."""
        return (self.comm_type, self.comm_size)


_tnew = tuple.__new__
_KEY = operator.itemgetter(0, 1)
UNEVEN = -1  # the comm_size the consistency check sees for an all-to-all-v
_A2A = 6  # Chakra ALL_TO_ALL


def collective_sequences(
    wl: Workload, coll_at: list[list[int] | None] | None = None
) -> dict[str, dict[int, list[CollectiveCall]]]:
    """Per process group, per member rank: its collectives in topological order.

    ``coll_at[k]``, where given, holds the positions of rank k's collective nodes in topological
    order (found once for the ranks that share a shape, ``genie.workload.shapes``)."""
    out: dict[str, dict[int, list[CollectiveCall]]] = {}
    for k, rg in enumerate(wl.ranks):
        mine = _per_group(_collectives(rg, coll_at, k), _call)
        for g, lst in mine.items():
            out.setdefault(g, {})[rg.rank] = lst
    return out


def _collectives(rg: RankGraph, coll_at: list[list[int] | None] | None, k: int) -> list[Node]:
    """Rank graph ``rg``'s collective nodes in topological order (``coll_at[k]``: their
    positions, where known)."""
    nodes = rg.nodes
    at = coll_at[k] if coll_at is not None else None
    if at is None:
        coll = NodeType.COMM_COLL_NODE
        return [nodes[i] for i in topological_indices(rg) if nodes[i].type == coll]
    return [nodes[i] for i in at]


def _call(ct: Any, size: Any, nd: Node) -> CollectiveCall:
    return _tnew(CollectiveCall, (ct, size, nd))


def _per_group(
    found: list[Node], make: Callable[[Any, Any, Node], Any] | None = None
) -> dict[Any, list]:
    """Per process group, ``make(comm_type, size, node)`` (None: the (comm_type, size) key) of
    each of these collective nodes, in their order: host-side launchers left out, no group the
    default one, an all-to-all-v's size ``UNEVEN`` (the one rule of what the sequence check
    compares)."""
    mine: dict[Any, list] = {}
    for nd in found:
        d = nd._d
        ct = d[0]
        if ct is None and d[8]:
            continue  # host-side launcher (genie.workload.model): not a collective
        g = d[2] or DEFAULT_GROUP
        lst = mine.get(g)
        if lst is None:
            lst = mine[g] = []
        size = d[1]
        if ct == _A2A and nd.attr(UNEVEN_ATTR) is not None:
            size = UNEVEN  # all-to-all-v: each rank's total differs, its per-peer sizes count
        lst.append((ct, size) if make is None else make(ct, size, nd))
    return mine


def _group_label(g: str) -> str:
    return repr(g) if g else "the default group (all ranks)"


def check_collective_sequences(
    wl: Workload,
    coll_at: list[list[int] | None] | None = None,
    keys_at: list[dict[Any, list[tuple]] | None] | None = None,
) -> list[str]:
    """Mismatches between the collective sequences of the ranks of each group, as messages
    (``coll_at`` as ``collective_sequences`` takes it; ``keys_at[k]``, where given, is
    ``sequence_keys`` of rank k's collectives, worked out while its nodes were at hand).

    The sequences are compared as (type, size) keys first; only where some group's do not
    agree are they made with their nodes, for ``compare_collective_sequences`` to name."""
    keys: dict[Any, dict[int, list[tuple]]] = {}
    for k, rg in enumerate(wl.ranks):
        mine = keys_at[k] if keys_at is not None else None
        if mine is None:
            mine = sequence_keys(_collectives(rg, coll_at, k))
        for g, lst in mine.items():
            per_rank = keys.get(g)
            if per_rank is None:
                per_rank = keys[g] = {}
            per_rank[rg.rank] = lst
    if _all_agree(wl.groups, keys):
        return []
    return compare_collective_sequences(wl.groups, collective_sequences(wl, coll_at))


def sequence_keys(found: list[Node]) -> dict[Any, list[tuple]]:
    """Per process group, the ``CollectiveCall.key()`` of each of these collective nodes (in
    their order) that ``collective_sequences`` keeps."""
    return _per_group(found)


def _all_agree(groups: dict[str, tuple[int, ...]], keys: dict[Any, dict[int, list]]) -> bool:
    """Whether ``compare_collective_sequences`` finds nothing, from the sequences' keys."""
    for g, per_rank in keys.items():
        members = groups.get(g)
        if not members:
            return False
        if len(per_rank) > len(members) or not per_rank.keys() <= set(members):
            return False
        ref = per_rank.get(members[0], [])
        get = per_rank.get
        for r in members[1:]:
            if get(r, []) != ref:
                return False
    return True


def compare_collective_sequences(
    groups: dict[str, tuple[int, ...]], seqs: dict[str, dict[int, list[CollectiveCall]]]
) -> list[str]:
    """Mismatches between the ranks' sequences ``seqs`` (``collective_sequences``'s form)."""
    from genie.workload.model import CollectiveType

    def show(c: CollectiveCall) -> str:
        ct = c.comm_type
        try:
            t = CollectiveType(ct).name if ct is not None else f"comm_type {ct}"
        except (ValueError, TypeError):
            t = f"comm_type {ct}"
        size = "uneven (per-peer sizes)" if c.comm_size == UNEVEN else f"{c.comm_size} B"
        return f"{t} {size} ({c.node.label()})"

    problems = []
    for g, per_rank in seqs.items():
        members = groups.get(g)
        if members is None:
            problems.append(f"process group {g!r} is used but its members are unknown")
            continue
        if not members:
            problems.append(f"process group {g!r} is used but has no members")
            continue
        outside = per_rank.keys() - set(members)  # (a group's members are a tuple: a scan)
        for r in per_rank:
            if r in outside:
                problems.append(f"rank {r} runs collectives in group {g!r} but is not a member")
        ref_rank = members[0]
        ref = per_rank.get(ref_rank, [])
        ref_keys = list(map(_KEY, ref))
        for r in members[1:]:
            seq = per_rank.get(r, [])
            if len(seq) == len(ref) and list(map(_KEY, seq)) == ref_keys:
                continue
            for k in range(max(len(ref), len(seq))):
                a = ref[k] if k < len(ref) else None
                b = seq[k] if k < len(seq) else None
                if a is None or b is None or a.key() != b.key():
                    problems.append(
                        f"{_group_label(g)}: collective #{k} differs between rank {ref_rank} "
                        f"({show(a) if a else 'none'}) and rank {r} ({show(b) if b else 'none'})"
                    )
                    break
    return problems


def compute_time(rank: RankGraph) -> float:
    """Sum of the durations (seconds) of the rank's compute nodes."""
    return sum(n.duration_micros for n in rank.nodes if n.kind is NodeKind.COMPUTE) * 1e-6
