"""Collapse runs of compute nodes into one engine node each, and expand the times back.

A rank's compute runs on one stream in the order nodes become ready. When every compute node
of a rank (in node order) has the compute node before it among its ancestors, the compute nodes
are totally ordered, so at most one of them is ever ready or running and the stream never queues.
Then a compute node ``b`` whose only dependency is the compute node ``a`` before it, where ``b``
is ``a``'s only successor, starts exactly when ``a`` ends: the pair behaves as one node of
duration ``a + b``, and nobody else observes ``a``'s end. Such runs are merged into their first
node before the replay (a data-parallel step of 2,000 nodes becomes about a hundred), and every
merged node's times are recovered exactly afterwards: start = head start + the durations before
it in the run, ready = its start, end = start + its duration.

Ranks that do not meet the condition are replayed as they are, and so are ranks with more than
one lane or with non-compute nodes on a lane (``genie.sim.lanes``): the proof above is for one
compute stream that nothing else holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genie.sim.compiled import CompiledRank, Kind


@dataclass
class Collapsed:
    """A rank with its compute runs merged, and how to map times back."""

    kind: np.ndarray
    duration: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    instance: np.ndarray
    lane: np.ndarray
    keep: np.ndarray  # original indices of the kept nodes (new node i is keep[i])
    new_of: np.ndarray  # original index -> new index of the node or of its run's head
    head_offset: np.ndarray  # original index -> start offset inside its run (0 for kept nodes)

    @property
    def n_nodes(self) -> int:
        """Nodes after merging."""
        return len(self.kind)


def _compute_is_a_chain(cr: CompiledRank, comp: np.ndarray) -> bool:
    """Whether each compute node (node order) has the previous compute node as an ancestor."""
    n = cr.n_nodes
    ptr, idx = cr.dep_ptr.tolist(), cr.dep_idx.tolist()
    owner = np.repeat(np.arange(n), np.diff(cr.dep_ptr))
    if len(cr.dep_idx) and not bool(np.all(cr.dep_idx < owner)):
        return False  # deps point forward: not in topological node order, do not try
    pos = np.full(n, -1, np.int64)
    pos[comp] = np.arange(len(comp))
    pos_l = pos.tolist()
    latest = [-1] * n  # the latest compute node (chain position) among ancestors-or-self
    for v in range(n):
        m = -1
        for j in range(ptr[v], ptr[v + 1]):
            x = latest[idx[j]]
            if x > m:
                m = x
        p = pos_l[v]
        if p >= 0:
            if m != p - 1:
                return False
            m = p
        latest[v] = m
    return True


def collapse(cr: CompiledRank) -> Collapsed | None:
    """Merge the rank's compute runs (see the module docstring), or None when not provable."""
    n = cr.n_nodes
    comp = np.flatnonzero(cr.kind == Kind.COMPUTE)
    if len(comp) < 2:
        return None
    laned = cr.lane >= 0
    lanes = cr.lane[comp]  # not np.unique: numpy 2.4's unique imports numpy.ma (~15 ms)
    if np.count_nonzero(laned) != len(comp) or bool((lanes != lanes[0]).any()):
        return None  # several lanes, or something besides compute holds one
    ptr, idx = cr.dep_ptr, cr.dep_idx
    counts = np.diff(ptr)
    prev = comp[:-1]
    nxt = comp[1:]
    prev_of = np.full(n, -1, np.int64)
    prev_of[nxt] = prev
    if not _compute_is_a_chain(cr, comp):
        return None
    # mergeable pair (a, b): b's only dep is a and a's only successor is b
    succ_count = np.bincount(idx, minlength=n)
    single = counts[nxt] == 1
    first_dep = np.where(single, idx[np.minimum(ptr[nxt], max(len(idx) - 1, 0))], -1)
    merge_b = nxt[single & (first_dep == prev) & (succ_count[prev] == 1)]
    if not len(merge_b):
        return None
    merged = np.zeros(n, bool)
    merged[merge_b] = True
    # along the compute chain, a run starts at every compute node that is not merged
    dur = cr.duration.astype(np.float64)
    m = merged[comp]
    pos = np.arange(len(comp))
    run_start = np.maximum.accumulate(np.where(m, 0, pos))
    head = np.arange(n)
    head[comp] = comp[run_start]
    keep = np.flatnonzero(~merged)
    new_index = np.full(n, -1, np.int64)
    new_index[keep] = np.arange(len(keep))
    new_of = new_index[head]
    # durations: a run's head carries the whole run; offsets are the durations before a node
    run_total = np.bincount(new_of, weights=dur, minlength=len(keep))
    csum = np.concatenate([[0.0], np.cumsum(dur[comp])])
    head_offset = np.zeros(n)
    head_offset[comp] = csum[pos] - csum[run_start]
    # deps of kept nodes, with every dep on a run member redirected to the run's head
    kept_counts = counts[keep]
    new_ptr = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(kept_counts, out=new_ptr[1:])
    keep_entry = np.repeat(~merged, counts)  # dep entries owned by kept nodes, in order
    new_idx = new_of[idx[keep_entry]]
    new_dur = dur[keep].copy()
    comp_keep = cr.kind[keep] == Kind.COMPUTE
    new_dur[comp_keep] = run_total[np.flatnonzero(comp_keep)]
    return Collapsed(
        kind=cr.kind[keep],
        duration=new_dur,
        dep_ptr=new_ptr,
        dep_idx=new_idx.astype(np.int64),
        instance=cr.instance[keep],
        lane=cr.lane[keep],
        keep=keep,
        new_of=new_of,
        head_offset=head_offset,
    )


def expand(
    c: Collapsed, orig: CompiledRank, ready: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times of every original node from the times of the collapsed rank."""
    h = c.new_of
    st = start[h] + c.head_offset
    en = st + orig.duration
    rd = ready[h].copy()
    merged = np.ones(orig.n_nodes, bool)
    merged[c.keep] = False
    rd[merged] = st[merged]
    kept = c.keep
    # kept non-compute nodes keep their own times exactly
    other = orig.kind[kept] != Kind.COMPUTE
    en[kept[other]] = end[np.flatnonzero(other)]
    st[kept[other]] = start[np.flatnonzero(other)]
    return rd, st, en
