"""The stream rules (``genie.workload.stream_rules``) on a rank held as columns.

``column_edges`` gives the edges ``stream_rules.stream_edges`` gives for the same rank, in the
same order (per node, the order the rules add them), with the same counts and skips, from numpy
columns: node types, an index into the workload's table of derived tuples (``is_cpu_op``,
``stream``, ``pg_name``), an index into the interned names, and the deps as positions. No
Python object is made per node: launch positions, the sequence key, streams and the
``stream_order`` and ``comm_after_compute`` rules are array passes; the ``wait`` and
``synchronize`` rules loop over those CPU ops only (a few per step). The ``tid`` attr, which
columns do not hold, is asked of ``tid_of`` for the rows that need it: the CPU ops after a
synchronize, and every GPU node where no GPU node has a ``stream`` attr.

The one piece of the object path that depends on hashing (the order in which a ``wait`` lists
the communication streams, a set of stream keys) is reproduced by building the same set of the
same keys in the same order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genie.workload.column_checks import _topological
from genie.workload.stream_rules import (
    _COMM_TYPES,
    _CPU_SKIP,
    _GPU_TYPES,
    _SYNC,
    _WAIT,
    RULES,
    StreamEdges,
)

_GPU = np.array(sorted(int(t) for t in _GPU_TYPES), np.int64)
_COMM = np.array(sorted(int(t) for t in _COMM_TYPES), np.int64)
_SKIP = np.array(sorted(int(t) for t in _CPU_SKIP), np.int64)
_COLL = 7  # Chakra COMM_COLL_NODE: its NCCL stream is its process group's


@dataclass
class ColumnEdges:
    """One rank's extra dependencies as arrays: ``after[k]`` waits for ``before[k]``, in the
    order the rules add them (so each node's list is in ``stream_edges``'s order)."""

    applies: bool = False
    streams: str = ""
    after: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    before: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    skipped: int = 0

    @property
    def added(self) -> int:
        """Edges added over all rules."""
        return len(self.after)

    def as_stream_edges(self) -> StreamEdges:
        """The same edges as ``stream_rules.StreamEdges`` (a dict of lists by node position)."""
        edges: dict[int, list[int]] = {}
        for a, b in zip(self.after.tolist(), self.before.tolist(), strict=True):
            edges.setdefault(a, []).append(b)
        return StreamEdges(self.applies, self.streams, edges, dict(self.counts), self.skipped)


def column_edges(
    types: np.ndarray,
    derived: np.ndarray,
    table: Sequence[tuple],
    name: np.ndarray,
    names: Sequence[str],
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    tid_of: Callable[[np.ndarray], list],
    topo: np.ndarray | None = None,
) -> ColumnEdges:
    """The stream rules' edges of one rank (see the module docstring).

    ``dep_ptr``/``dep_idx``: each row's deps as positions (CSR; deps outside the rank and on
    the row itself are ignored, duplicates kept). ``tid_of(rows)``: the ``tid`` attr of each
    row (None where absent). ``topo``: an order of the rows that keeps the deps, where the
    caller has one (validation's); without it a cycle is looked for here (a cycle: nothing).
    """
    n = len(types)
    if not n:
        return ColumnEdges()
    # each entry the rank uses, asked once: the table is the whole workload's (it grows with
    # the ranks: walking all of it per rank was quadratic, 0.8 of a 16,384-rank read)
    used, at = np.unique(derived, return_inverse=True)
    is_cpu = np.fromiter((bool(table[d][8]) for d in used.tolist()), bool, len(used))[at]
    if not is_cpu.any():  # no CPU op: not PyTorch-derived, nothing to infer
        return ColumnEdges()
    t = types.astype(np.int64)
    cpu = is_cpu & ~np.isin(t, _SKIP)
    gpu = ~is_cpu & np.isin(t, _GPU)
    owner, dep = _clean_deps(dep_ptr, dep_idx, n)
    if not (gpu[owner] & cpu[dep]).any():
        return ColumnEdges()
    if topo is None and not (dep < owner).all():
        got = _topological(n, owner, dep)
        if got is None:
            return ColumnEdges()  # a cycle: validation reports it; nothing to add to
        topo = np.asarray(got, np.int64)
    launch = _launch(n, owner, dep, cpu, gpu, topo)
    pos = np.arange(n, dtype=np.int64)
    # the sequence key: a CPU op at its position, a kernel just after the op that launched it
    key = np.where(gpu, launch * 2 + 1, pos * 2) * n + pos
    code, keys, source = _streams(t, derived, table, gpu, tid_of)
    comm_rows = np.flatnonzero(gpu & np.isin(t, _COMM))
    comm_order = _set_order(code[comm_rows], keys)  # as the object path iterates its set
    out = ColumnEdges(applies=True, streams=source)
    # which CPU ops are waits and synchronizes (each distinct name asked once)
    cpu_names = name[cpu]
    uniq = np.unique(cpu_names)
    is_sync = np.zeros(len(names) + 1, bool)
    is_wait = np.zeros(len(names) + 1, bool)
    for k in uniq.tolist():
        nm = names[k]
        is_sync[k] = bool(_SYNC.search(nm))
        is_wait[k] = bool(_WAIT.search(nm))
    sync_row = cpu & is_sync[name]
    wait_row = cpu & is_wait[name] & ~sync_row
    rows = np.flatnonzero(gpu | sync_row | wait_row)
    seq = rows[np.argsort(key[rows], kind="stable")]
    cands = _candidates(seq, t, gpu, code, keys, comm_order, sync_row, wait_row, cpu, tid_of)
    _keep(out, cands, owner, dep, key, topo, n)
    return out


def _clean_deps(dep_ptr: np.ndarray, dep_idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(owner, dep) of every dep inside the rank and not on its own row, in CSR order."""
    lens = np.diff(dep_ptr).astype(np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), lens)
    dep = dep_idx.astype(np.int64)
    ok = (dep >= 0) & (dep < n) & (dep != owner)
    if not ok.all():
        owner, dep = owner[ok], dep[ok]
    return owner, dep


def _launch(
    n: int,
    owner: np.ndarray,
    dep: np.ndarray,
    cpu: np.ndarray,
    gpu: np.ndarray,
    topo: np.ndarray | None,
) -> np.ndarray:
    """Each row's launch position: a GPU node's latest CPU dep, else its latest GPU dep's
    launch, else its own position (as ``stream_rules._infer``)."""
    launch = np.arange(n, dtype=np.int64)
    maxcpu = np.full(n, -1, np.int64)
    c = cpu[dep]
    if c.any():
        o, v = owner[c], dep[c]
        starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
        maxcpu[o[starts]] = np.maximum.reduceat(v, starts)
    has_cpu = gpu & (maxcpu >= 0)
    launch[has_cpu] = maxcpu[has_cpu]
    g = gpu[dep] & gpu[owner] & (maxcpu[owner] < 0)
    if g.any():  # kernels launched through other kernels: in an order that keeps the deps
        lone = np.unique(owner[g])
        if topo is not None:
            lone = topo[np.isin(topo, lone)]
        o, v = owner[g], dep[g]
        ptr = np.searchsorted(o, lone), np.searchsorted(o, lone, side="right")
        vals = v.tolist()
        lv = launch  # read and written in order: each dep's launch is final when read
        for i, a, b in zip(lone.tolist(), ptr[0].tolist(), ptr[1].tolist(), strict=True):
            lv[i] = max(int(lv[j]) for j in vals[a:b])
    return launch


def _streams(
    t: np.ndarray,
    derived: np.ndarray,
    table: Sequence[tuple],
    gpu: np.ndarray,
    tid_of: Callable[[np.ndarray], list],
) -> tuple[np.ndarray, list[tuple], str]:
    """Each row's stream as a code into ``keys`` (-1: not a GPU node) and the source."""
    grows = np.flatnonzero(gpu)
    gd = derived[grows].astype(np.int64)
    used = np.unique(gd).tolist()
    has_stream = any(table[k][9] is not None for k in used)
    tids: list[Any] | None = None
    if not has_stream:
        tids = tid_of(grows)
        if all(x is None for x in tids):
            tids = None
    code = np.full(len(t), -1, np.int64)
    keys: list[tuple] = []
    index: dict[tuple, int] = {}

    def key_of(s: Any, ty: int, d: tuple) -> int:
        if s is not None:
            k: tuple = ("stream", int(s))
        elif ty in _COMM_TYPES:
            k = ("nccl", d[2] if ty == _COLL else "p2p")
        else:
            k = ("compute",)
        got = index.get(k)
        if got is None:
            got = index[k] = len(keys)
            keys.append(k)
        return got

    gt = t[grows]
    if tids is None:  # the stream from the derived tuple (or none): one key per (type, derived)
        combo = gd * 256 + gt
        uc, inv = np.unique(combo, return_inverse=True)
        per = [
            key_of(table[c // 256][9] if has_stream else None, int(c % 256), table[c // 256])
            for c in uc.tolist()
        ]
        code[grows] = np.asarray(per, np.int64)[inv.reshape(-1)]
        source = "stream attr" if has_stream else "inferred"
    else:
        code[grows] = [
            key_of(s, ty, table[d]) for s, ty, d in zip(tids, gt.tolist(), gd.tolist(), strict=True)
        ]
        source = "tid"
    return code, keys, source


def _set_order(codes: np.ndarray, keys: list[tuple]) -> list[int]:
    """The codes of ``codes`` in the order a set of their keys, added in row order, iterates."""
    if not len(codes):
        return []
    uc, first = np.unique(codes, return_index=True)
    ordered = uc[np.argsort(first, kind="stable")].tolist()
    got = {keys[c] for c in ordered}
    code_of = {keys[c]: c for c in ordered}
    return [code_of[k] for k in got]


def _candidates(
    seq: np.ndarray,
    t: np.ndarray,
    gpu: np.ndarray,
    code: np.ndarray,
    keys: list[tuple],
    comm_order: list[int],
    sync_row: np.ndarray,
    wait_row: np.ndarray,
    cpu: np.ndarray,
    tid_of: Callable[[np.ndarray], list],
) -> tuple[np.ndarray, ...]:
    """Every edge the rules try to add, as (step, sub-step, rule, before, after) arrays: the
    rules' walk over ``seq`` is step after step, and within a step in sub-step order."""
    m = len(seq)
    g = gpu[seq]
    c = np.where(g, code[seq], len(keys))  # CPU ops: a code past every stream
    k_pad = len(keys) + 1
    nccl = np.zeros(k_pad, bool)
    nccl[: len(keys)] = [k[0] == "nccl" for k in keys]
    on_comm = np.zeros(k_pad, bool)
    on_comm[comm_order] = True
    comm = g & np.isin(t[seq], _COMM)
    compute = g & ~comm & ~on_comm[c]
    p_all = np.arange(m, dtype=np.int64)
    parts: list[tuple[np.ndarray, ...]] = []

    def emit(p: np.ndarray, sub: Any, rule: int, before: np.ndarray, after: np.ndarray) -> None:
        if len(p):
            s = np.broadcast_to(np.asarray(sub, np.int64), p.shape)
            parts.append((p, s, np.full(len(p), rule, np.int64), before, after))

    # stream_order: the GPU node before on the same stream (not on an inferred NCCL stream)
    gp = np.flatnonzero(g)
    by_stream = gp[np.argsort(c[gp], kind="stable")]
    sc = c[by_stream]
    same = np.flatnonzero(sc[1:] == sc[:-1])
    prev = np.full(m, -1, np.int64)
    prev[by_stream[same + 1]] = by_stream[same]
    so = np.flatnonzero((prev >= 0) & ~(comm & nccl[c]))
    emit(so, 0, 0, seq[prev[so]], seq[so])
    # comm_after_compute: the last compute kernel before, on another stream
    last = np.maximum.accumulate(np.where(compute, p_all, -1)) if m else p_all
    lc = np.where(comm, last, -1)
    cac = np.flatnonzero((lc >= 0) & (c[np.maximum(lc, 0)] != c))
    emit(cac, 1, 1, seq[lc[cac]], seq[cac])
    # per stream, its GPU nodes' steps (ascending): the last one before a step, by search
    bounds = np.searchsorted(sc, np.arange(k_pad + 1))
    steps_of = [by_stream[bounds[k] : bounds[k + 1]] for k in range(len(keys))]
    first_step = [int(s[0]) if len(s) else m for s in steps_of]

    def last_on(k: int, p: int) -> int:
        s = steps_of[k]
        j = int(np.searchsorted(s, p)) - 1
        return int(s[j]) if j >= 0 else -1

    # wait: the next compute kernel waits for the communication streams' last kernels
    waits = np.flatnonzero(wait_row[seq])
    comp_steps = np.flatnonzero(compute)
    if len(waits) and len(comp_steps):
        nxt = np.searchsorted(comp_steps, waits)
        for w, k in zip(waits.tolist(), nxt.tolist(), strict=True):
            if k == len(comp_steps):
                continue
            cstep = int(comp_steps[k])
            later = np.searchsorted(waits, w, side="right")
            if later < len(waits) and waits[later] < cstep:
                continue  # a later wait() sets what this kernel waits for
            got = [j for j in (last_on(s, w) for s in comm_order) if j >= 0]
            if got:
                n_got = len(got)
                emit(
                    np.full(n_got, cstep, np.int64),
                    np.arange(2, 2 + n_got),
                    2,
                    seq[np.asarray(got, np.int64)],
                    np.full(n_got, seq[cstep], np.int64),
                )
    # synchronize: waits for every stream's last kernel; the thread's next CPU op waits for it
    syncs = np.flatnonzero(sync_row[seq])
    if len(syncs):
        by_first = sorted(range(len(keys)), key=first_step.__getitem__)
        nexts = _next_cpu(seq[syncs], cpu, tid_of)
        for q, nx in zip(syncs.tolist(), nexts, strict=True):
            got = [j for j in (last_on(s, q) for s in by_first if first_step[s] < q) if j >= 0]
            n_got = len(got)
            before = [int(seq[j]) for j in got]
            after = [int(seq[q])] * n_got
            if nx is not None:
                before.append(int(seq[q]))
                after.append(nx)
            k = len(before)
            if k:
                emit(
                    np.full(k, q, np.int64),
                    np.arange(k),
                    3,
                    np.asarray(before, np.int64),
                    np.asarray(after, np.int64),
                )
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z, z, z
    cols = [np.concatenate(x) for x in zip(*parts, strict=True)]
    order = np.lexsort((cols[1], cols[0]))
    return tuple(x[order] for x in cols)


def _next_cpu(rows: np.ndarray, cpu: np.ndarray, tid_of: Callable[[np.ndarray], list]) -> list:
    """For each row, the next CPU op after it with the same ``tid`` (None: none)."""
    cpu_rows = np.flatnonzero(cpu)
    start = np.searchsorted(cpu_rows, rows, side="right")
    mine = tid_of(rows)
    out: list[int | None] = [None] * len(rows)
    todo = list(range(len(rows)))
    width = 1
    while todo:
        ask = [cpu_rows[start[k] : start[k] + width] for k in todo]
        got = tid_of(np.concatenate(ask)) if ask else []
        left = []
        at = 0
        for k, cand in zip(todo, ask, strict=True):
            tids = got[at : at + len(cand)]
            at += len(cand)
            hit = next((j for j, x in enumerate(tids) if x == mine[k]), None)
            if hit is not None:
                out[k] = int(cand[hit])
            elif start[k] + width < len(cpu_rows):
                start[k] += width
                left.append(k)
        todo = left
        width *= 4
    return out


def _keep(
    out: ColumnEdges,
    cands: tuple[np.ndarray, ...],
    owner: np.ndarray,
    dep: np.ndarray,
    key: np.ndarray,
    topo: np.ndarray | None,
    n: int,
) -> None:
    """Put into ``out`` the candidates the object path adds, counting what it counts: an edge
    the rank has (or was given before) is not added; one against the order that keeps the
    rank's deps is skipped (and counted each time it is tried)."""
    _p, _s, rule, before, after = cands
    if not len(after):
        return
    pair = after * n + before
    fresh = (before != after) & ~np.isin(pair, owner * n + dep)
    rule, before, after, pair = rule[fresh], before[fresh], after[fresh], pair[fresh]
    rank_in = _topo_rank(owner, dep, key, n)
    skip = rank_in[before] >= rank_in[after]
    out.skipped = int(np.count_nonzero(skip))
    rule, before, after, pair = rule[~skip], before[~skip], after[~skip], pair[~skip]
    _u, first = np.unique(pair, return_index=True)
    first.sort()
    out.after, out.before = after[first], before[first]
    counts = np.bincount(rule[first], minlength=len(RULES)).tolist()
    out.counts = dict(zip(RULES, counts, strict=True))


def _topo_rank(owner: np.ndarray, dep: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """Each row's place in a topological order of the deps that follows ``key`` where it can
    (``stream_rules._topo_rank``)."""
    rank_in = np.empty(n, np.int64)
    if (key[dep] < key[owner]).all():
        rank_in[np.argsort(key, kind="stable")] = np.arange(n, dtype=np.int64)
        return rank_in
    code = np.unique(owner * n + dep)  # each (row, dep) once
    waiter, on = code // n, code % n
    indeg = np.bincount(waiter, minlength=n).tolist()
    by_dep = np.argsort(on, kind="stable")
    users = waiter[by_dep].tolist()
    uoff = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(on, minlength=n), out=uoff[1:])
    uo = uoff.tolist()
    kl = key.tolist()
    heap = [kl[i] for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    placed = 0
    while heap:
        i = heapq.heappop(heap) % n
        rank_in[i] = placed
        placed += 1
        for u in users[uo[i] : uo[i + 1]]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, kl[u])
    if placed != n:  # cannot happen: the caller found no cycle
        raise AssertionError("a cycle in deps already checked for one")
    return rank_in
