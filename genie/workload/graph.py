"""Graph algorithms over one rank's DAG: order, cycles, critical path, collective sequences.

Scheduling follows data_deps only (ctrl_deps are kept but never scheduled on). Every function is
pure: it reads a RankGraph and returns data.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from genie.errors import ValidationError
from genie.workload.model import DEFAULT_GROUP, Node, NodeKind, NodeType, RankGraph, Workload


def _positions(rank: RankGraph) -> dict[int, int]:
    pos: dict[int, int] = {}
    for i, n in enumerate(rank.nodes):
        pos.setdefault(n.id, i)
    return pos


def _all_backward(rank: RankGraph, pos: dict[int, int]) -> bool:
    """True when every data_dep names an earlier node: then file order is topological."""
    get = pos.get
    for i, n in enumerate(rank.nodes):
        for d in n.data_deps:
            j = get(d)
            if j is None or j >= i:
                return False
    return True


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
                if j is None:
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
    """Positions of the nodes in topological order (see ``topological_order``)."""
    pos = _positions(rank)
    nodes = rank.nodes
    if _all_backward(rank, pos):
        return list(range(len(nodes)))
    n = len(nodes)
    indeg = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for i, nd in enumerate(nodes):
        for d in set(nd.data_deps):
            j = pos.get(d)
            if j is not None:
                indeg[i] += 1
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
    if len(out) != n:
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


@dataclass(frozen=True)
class CollectiveCall:
    """One collective as seen by the group-consistency check."""

    comm_type: int | None
    comm_size: int | None
    node: Node

    def key(self) -> tuple[int | None, int | None]:
        """What must agree across the ranks of a group."""
        return (self.comm_type, self.comm_size)


def collective_sequences(wl: Workload) -> dict[str, dict[int, list[CollectiveCall]]]:
    """Per process group, per member rank: its collectives in topological order."""
    out: dict[str, dict[int, list[CollectiveCall]]] = {}
    for rg in wl.ranks:
        for nd in topological_order(rg):
            if nd.type != NodeType.COMM_COLL_NODE:
                continue
            g = nd.pg_name or DEFAULT_GROUP
            out.setdefault(g, {}).setdefault(rg.rank, []).append(
                CollectiveCall(nd.comm_type, nd.comm_size, nd)
            )
    return out


def _group_label(g: str) -> str:
    return repr(g) if g else "the default group (all ranks)"


def check_collective_sequences(wl: Workload) -> list[str]:
    """Mismatches between the collective sequences of the ranks of each group, as messages."""
    from genie.workload.model import CollectiveType

    def show(c: CollectiveCall) -> str:
        try:
            t = CollectiveType(c.comm_type).name
        except (ValueError, TypeError):
            t = f"comm_type {c.comm_type}"
        return f"{t} {c.comm_size} B ({c.node.label()})"

    problems = []
    for g, per_rank in collective_sequences(wl).items():
        members = wl.groups.get(g)
        if members is None:
            problems.append(f"process group {g!r} is used but its members are unknown")
            continue
        for r in per_rank:
            if r not in members:
                problems.append(f"rank {r} runs collectives in group {g!r} but is not a member")
        ref_rank = members[0]
        ref = per_rank.get(ref_rank, [])
        for r in members[1:]:
            seq = per_rank.get(r, [])
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
