"""NCCL's stream semantics for collectives: one process group's collectives run in issue order.

NCCL enqueues every collective of a communicator on that communicator's stream, so on a rank they
run one at a time, in the order the program issued them; collectives of different communicators
run concurrently. ``order_collectives`` gives a compiled workload that rule: on every rank, the
k-th collective of a process group (in issue order, which is node order, the order instances are
matched across ranks by) waits until the (k - N)-th collective of the same group on that rank
has finished, where N is the ``concurrency`` (1, the default, is NCCL's one stream per
communicator; N > 1 lets N be in flight, as N communicators over the same ranks would; 0 or None
lets every collective run as soon as its data is ready, the old behaviour).

Point-to-point sends and receives are left alone: Chakra does not say how they were grouped
(``ncclGroupStart/End``), and ordering them on one stream would deadlock pipelines that NCCL runs
grouped. Collectives already on a lane (a CUDA stream named by the trace, ``genie.sim.lanes``)
keep that lane's order and get no extra rule. The ordering is plain dependencies, so waiting for
an earlier collective shows as wait in the reports and the engine needs nothing new.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from genie.sim.compiled import CompiledRank, CompiledWorkload, Kind, with_deps

#: what the reports call the rule
DESCRIPTION = {
    0: "collectives of a process group run concurrently (no stream order)",
    1: "collectives of a process group run one at a time in issue order (NCCL's stream)",
}


def describe(concurrency: int | None) -> str:
    """One phrase for reports."""
    if not concurrency:
        return DESCRIPTION[0]
    if concurrency == 1:
        return DESCRIPTION[1]
    return f"at most {concurrency} collectives of a process group in flight, in issue order"


def order_collectives(cw: CompiledWorkload, concurrency: int | None = 1) -> CompiledWorkload:
    """``cw`` with each group's collectives ordered per rank (see the module docstring)."""
    if not concurrency or concurrency < 1:
        return cw
    ranks = _ordered_all(cw, concurrency)
    if all(a is b for a, b in zip(ranks, cw.ranks, strict=True)):
        return cw
    return dataclasses.replace(cw, ranks=ranks)


def order_reference(cw: CompiledWorkload, concurrency: int | None = 1) -> CompiledWorkload:
    """``order_collectives`` rank by rank: the reference the vector path is tested against."""
    if not concurrency or concurrency < 1:
        return cw
    cache: dict[bytes, tuple[np.ndarray, np.ndarray] | None] = {}
    ranks = [_ordered(cr, cw, concurrency, cache) for cr in cw.ranks]
    if all(a is b for a, b in zip(ranks, cw.ranks, strict=True)):
        return cw
    return dataclasses.replace(cw, ranks=ranks)


def _ordered_all(cw: CompiledWorkload, k: int) -> list[CompiledRank]:
    """Every rank with its new deps, worked out over the whole workload at once: the
    collectives sorted by (rank, group, sequence), each waiting for the one k places before it
    in its run. Ranks whose deps do not all point backwards (node order is not topological) go
    through the per-rank path, which checks each new edge against a topological order."""
    ranks = cw.ranks
    n_r = len(ranks)
    if not n_r:
        return []
    counts = np.array([cr.n_nodes for cr in ranks], np.int64)
    offsets = np.zeros(n_r + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    kind = np.concatenate([cr.kind for cr in ranks])
    lane = np.concatenate([cr.lane for cr in ranks])
    inst = np.concatenate([cr.instance for cr in ranks])
    group = np.concatenate([cr.group for cr in ranks]).astype(np.int64)
    coll = np.flatnonzero((kind == Kind.COLLECTIVE) & (lane < 0) & (inst >= 0))
    rank_of = np.repeat(np.arange(n_r, dtype=np.int64), counts)
    c_rank = rank_of[coll]
    n_coll = np.bincount(c_rank, minlength=n_r)
    # deps as one CSR (rank after rank), to tell the ranks whose deps all point backwards
    # each rank's dep counts: one diff over every rank's pointers side by side, less the
    # n_r - 1 differences across a rank boundary (a rank's pointers start at offsets[r] + r)
    ptrs = np.concatenate([cr.dep_ptr for cr in ranks])
    dep_len = np.delete(np.diff(ptrs), offsets[1:-1] + np.arange(n_r - 1, dtype=np.int64))
    dep_idx = np.concatenate([cr.dep_idx for cr in ranks])
    owner = np.repeat(np.arange(len(kind), dtype=np.int64), dep_len)
    forward = dep_idx >= owner - offsets[rank_of[owner]]
    slow = np.zeros(n_r, bool)
    if forward.any():
        slow[rank_of[owner[forward]]] = True
    out = list(ranks)
    cache: dict[bytes, tuple[np.ndarray, np.ndarray] | None] = {}
    for r in np.flatnonzero(slow & (n_coll > k)).tolist():
        out[r] = _ordered(ranks[r], cw, k, cache)
    take = ~slow[c_rank] & (n_coll[c_rank] > k)
    coll, c_rank = coll[take], c_rank[take]
    if not len(coll):
        return out
    c_group = group[coll]
    c_seq = cw.instances.seq[inst[coll]]
    order = np.lexsort((coll, c_seq, c_group, c_rank))
    coll, c_rank, c_group = coll[order], c_rank[order], c_group[order]
    run_key = c_rank * (int(c_group.max()) + 2) + (c_group + 1)
    run_start = np.flatnonzero(np.r_[True, run_key[1:] != run_key[:-1]])
    pos = np.arange(len(coll)) - np.repeat(run_start, np.diff(np.r_[run_start, len(coll)]))
    later = np.flatnonzero(pos >= k)
    if not len(later):
        return out
    node, before = coll[later], coll[later - k]  # global positions
    add = np.zeros(len(kind), np.int64)
    add[node] = 1
    new_len = dep_len + add
    ptr = np.zeros(len(kind) + 1, np.int64)
    np.cumsum(new_len, out=ptr[1:])
    idx = np.empty(int(ptr[-1]), np.int64)
    old_ptr = np.zeros(len(kind) + 1, np.int64)
    np.cumsum(dep_len, out=old_ptr[1:])
    old_pos = np.repeat(ptr[:-1], dep_len) + (np.arange(len(dep_idx)) - old_ptr[owner])
    idx[old_pos] = dep_idx
    idx[ptr[node] + dep_len[node]] = before - offsets[c_rank[later]]
    changed = np.zeros(n_r, bool)
    changed[c_rank[later]] = True
    # every rank's new pointers rebased to 0, side by side (rank r's n + 1 at offsets[r] + r)
    at = np.arange(len(kind) + n_r, dtype=np.int64) - np.repeat(np.arange(n_r), counts + 1)
    local = ptr[at] - np.repeat(ptr[offsets[:-1]], counts + 1)
    bounds, starts = offsets.tolist(), ptr[offsets].tolist()
    for r in np.flatnonzero(changed).tolist():
        a, b = bounds[r], bounds[r + 1]
        out[r] = with_deps(ranks[r], local[a + r : b + r + 1], idx[starts[r] : starts[r + 1]])
    return out


def _ordered(cr: CompiledRank, cw: CompiledWorkload, k: int, cache: dict) -> CompiledRank:
    coll = np.flatnonzero((cr.kind == Kind.COLLECTIVE) & (cr.lane < 0) & (cr.instance >= 0))
    if len(coll) <= k:
        return cr
    groups = cr.group[coll]
    seqs = cw.instances.seq[cr.instance[coll]]
    # ranks alike in structure and in how their nodes fall into groups get the same new deps
    _, local_group = np.unique(groups, return_inverse=True)
    key = b"|".join(
        np.ascontiguousarray(a).tobytes() for a in (cr.dep_ptr, cr.dep_idx, coll, local_group, seqs)
    )
    hit = cache.get(key)
    if key not in cache:
        hit = cache[key] = _new_deps(cr, coll, groups, seqs, k)
    if hit is None:
        return cr
    return with_deps(cr, hit[0], hit[1])


def _new_deps(
    cr: CompiledRank, coll: np.ndarray, groups: np.ndarray, seqs: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR deps of the rank with "after the k-th earlier collective of my group" added."""
    n = cr.n_nodes
    by_group: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for node, g, s in zip(coll.tolist(), groups.tolist(), seqs.tolist(), strict=True):
        by_group[g].append((s, node))
    topo = _topological_positions(cr)
    extra: dict[int, int] = {}
    for members in by_group.values():
        members.sort()
        for j in range(k, len(members)):
            before, node = members[j - k][1], members[j][1]
            if topo is None or topo[before] < topo[node]:  # never a cycle
                extra[node] = before
    if not extra:
        return None
    counts = np.diff(cr.dep_ptr)
    add = np.zeros(n, np.int64)
    nodes = np.fromiter(extra.keys(), np.int64, len(extra))
    add[nodes] = 1
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts + add, out=ptr[1:])
    idx = np.empty(int(ptr[-1]), np.int64)
    # old deps first, then the new one, node by node (vectorised)
    starts = ptr[:-1]
    old_pos = np.repeat(starts, counts) + (
        np.arange(len(cr.dep_idx)) - np.repeat(cr.dep_ptr[:-1], counts)
    )
    idx[old_pos] = cr.dep_idx
    idx[starts[nodes] + counts[nodes]] = np.fromiter(extra.values(), np.int64, len(extra))
    return ptr, idx


def _topological_positions(cr: CompiledRank) -> np.ndarray | None:
    """None when every dep points to an earlier node (node order is topological), else each
    node's position in a topological order."""
    owner = np.repeat(np.arange(cr.n_nodes), np.diff(cr.dep_ptr))
    if not len(cr.dep_idx) or bool((cr.dep_idx < owner).all()):
        return None
    n = cr.n_nodes
    pending = np.diff(cr.dep_ptr).tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    for v, d in zip(owner.tolist(), cr.dep_idx.tolist(), strict=True):
        succ[d].append(v)
    pos = np.full(n, n, np.int64)
    order = [v for v in range(n) if pending[v] == 0]
    i = 0
    while i < len(order):
        v = order[i]
        pos[v] = i
        for w in succ[v]:
            pending[w] -= 1
            if pending[w] == 0:
                order.append(w)
        i += 1
    return pos
