"""``compile_workload`` for a workload held as columns (``genie.workload.columnar``).

A ``ColumnarWorkload`` keeps each rank's nodes as numpy columns (type, an index into the
workload's shared table of derived tuples, duration, ids, CSR data deps, name indices), never a
Python object per node. This path compiles it without making those objects: the distinct
(type, derived, duration) triples are found with two sorts over the whole workload and each is
worked out once (``genie.sim.batch_compile.Probes``, on a bare probe node holding just those
fields), deps are mapped from ids to positions with one sort per rank whose ids are not its
positions, and the rest is ``batch_compile.make_ranks``. Nodes are made only where the compile
needs what columns do not hold: an all-to-all-v node's per-peer sizes. The stream rules of
PyTorch-derived ranks come from the columns too (``genie.workload.stream_columns``).

It gives exactly what compiling ``ColumnarWorkload.to_workload()`` gives (tests compare the
arrays) and answers None where it cannot (rows decoded as fallback nodes, derived tables not
shared, ids past int64, any problem to name); the adapter then compiles the object model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from genie.sim.batch_compile import Declined, Gathered, Probes, attempt, make_ranks, split_row
from genie.sim.compiled import CompiledWorkload
from genie.sim.uneven import SPLIT_ATTR
from genie.workload.columnar import rank_stream_edges
from genie.workload.model import DEFAULT_GROUP, Node

_INT64_MAX = np.iinfo(np.int64).max


def compile_columns(
    cw: Any, edges: str, fields_of: Callable[[Any, int, tuple], tuple], a2a: int
) -> CompiledWorkload | None:
    """``cw`` (a ColumnarWorkload) compiled, or None where the object path must run (it also
    declines where ``batch_compile``'s probes and rows do, with their exception)."""
    return attempt("columns compile", _compile, cw, edges, fields_of, a2a)


class _Groups:
    """What ``Probes`` reads of a workload: the groups as ``Workload`` would hold them."""

    def __init__(self, cw: Any) -> None:
        self.groups = dict(cw.groups)
        self.groups.setdefault(DEFAULT_GROUP, tuple(range(cw.n_ranks)))  # as Workload does
        self.n_ranks = cw.n_ranks
        self.name = cw.name
        self.group_desc = cw.group_desc


def _compile(cw: Any, edges: str, fields_of: Any, a2a: int) -> CompiledWorkload:
    ranks = cw.ranks
    if not ranks:
        raise Declined("no ranks")
    table = ranks[0].derived_table
    if any(c.fallback or c.derived_table is not table for c in ranks):
        raise Declined("fallback rows or derived tables not shared")
    view = _Groups(cw)
    probes = Probes(view, fields_of, a2a)
    counts = [len(c) for c in ranks]
    offsets = np.zeros(len(ranks) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    pid = _probe_ids(ranks, probes, table, offsets)
    ids = np.concatenate([c.id for c in ranks])
    if len(ids) and int(ids.max()) > _INT64_MAX:
        raise Declined("an id past int64")
    node_ids = ids.astype(np.int64)
    del ids  # (at 10 M nodes each column of the workload is 80 MB: none is kept past its use)
    infer = edges == "inferred"
    lens_parts: list[np.ndarray] = []
    flat_parts: list[np.ndarray] = []
    names: list[list[str]] = []
    splits: list[dict[int, list[int]]] = []
    split_p = np.fromiter(probes.split, np.int64, len(probes.split))
    cpu_p = np.fromiter(probes.cpu, np.int64, len(probes.cpu))
    for r, c in enumerate(ranks):
        a, b = int(offsets[r]), int(offsets[r + 1])
        rank_pid = pid[a:b]
        row_splits: dict[int, list[int]] = {}
        if len(split_p):
            for i in np.flatnonzero(np.isin(rank_pid, split_p)).tolist():
                row = c.node(i).attr(SPLIT_ATTR)
                if row is not None:
                    row_splits[i] = split_row(row)
        splits.append(row_splits)
        lens, flat = _positions(c, node_ids[a:b])
        if infer and len(cpu_p) and np.isin(rank_pid, cpu_p).any():
            ptr = np.zeros(len(lens) + 1, np.int64)
            np.cumsum(lens, out=ptr[1:])
            extra = rank_stream_edges(cw, r, ptr, flat)
            if extra.added:
                lens, flat = _with_edges(lens, flat, extra.after, extra.before)
        lens_parts.append(lens)
        flat_parts.append(flat)
        table_names = c.names
        names.append([table_names[i] for i in c.name.tolist()])
    dep_len = np.concatenate(lens_parts) if lens_parts else np.zeros(0, np.int64)
    lens_parts.clear()
    dep_flat = np.concatenate(flat_parts) if flat_parts else np.zeros(0, np.int64)
    flat_parts.clear()
    gathered = Gathered(
        pid=pid,
        node_ids=node_ids,
        dep_len=dep_len,
        dep_flat=dep_flat,
        counts=counts,
        names=names,
        splits=splits,
    )
    del pid, node_ids, dep_len, dep_flat  # held by gathered alone
    ranks_out = make_ranks(probes.fields, gathered)
    del gathered  # the ranks hold what they need of it
    return probes.finish(view, ranks_out)


def _probe_ids(ranks: list, probes: Probes, table: list, offsets: np.ndarray) -> np.ndarray:
    """Each node's probe: the distinct (type, derived, duration) triples, worked out in order of
    first appearance (the order the object path meets them in)."""
    types = np.concatenate([c.type for c in ranks]).astype(np.int64)
    derived = np.concatenate([c.derived for c in ranks]).astype(np.int64)
    micros = np.concatenate([c.duration_micros for c in ranks])
    if not len(types):
        return np.zeros(0, np.int64)
    u_micros, m_inv = np.unique(micros, return_inverse=True)
    if (len(table) + 1) * 256 * (len(u_micros) + 1) >= 2**62:
        raise Declined("too many distinct triples for one int64 code")
    code = (derived * 256 + types) * len(u_micros) + m_inv.reshape(-1)
    found = np.unique(code, return_index=True, return_inverse=True)
    first, inv = np.asarray(found[1]), np.asarray(found[2])
    pid_of = np.empty(len(first), np.int64)
    rank_of = np.searchsorted(offsets, first, side="right") - 1
    for j in np.argsort(first, kind="stable").tolist():
        row = int(first[j])
        r = int(rank_of[j])
        c = ranks[r]
        i = row - int(offsets[r])
        key = (int(types[row]), table[int(derived[row])], int(micros[row]))
        nd = Node.__new__(Node)  # what _fields reads: type, derived fields, duration, a label
        nd.type, nd._d, nd.duration_micros = key
        nd.id, nd.name = int(c.id[i]), c.names[int(c.name[i])]
        pid_of[j] = probes.add(nd, key, r)
    return pid_of[inv.reshape(-1)]


def _positions(c: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One rank's deps as positions (lengths, flat); ids that are positions keep the values
    (the bad ones are dropped later), others are looked up (first of equal ids; missing and
    self deps dropped, as the object path does)."""
    n = len(ids)
    lens = np.diff(c.data_offsets).astype(np.int64)
    deps = c.data_deps
    if not n:
        return lens, np.zeros(0, np.int64)
    if np.array_equal(ids, np.arange(n)):
        if len(deps) and int(deps.max()) > _INT64_MAX:
            raise Declined("a dep past int64")  # the object path refuses it
        return lens, deps.astype(np.int64)
    order = np.argsort(c.id, kind="stable")
    sid = c.id[order]
    at = np.minimum(np.searchsorted(sid, deps), n - 1)
    owner = np.repeat(np.arange(n, dtype=np.int64), lens)
    found = sid[at] == deps
    pos = order[at].astype(np.int64)
    keep = found & (pos != owner)
    return np.bincount(owner[keep], minlength=n).astype(np.int64), pos[keep]


def _with_edges(
    lens: np.ndarray, flat: np.ndarray, after: np.ndarray, before: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The deps with the stream rules' edges (``after[k]`` waits for ``before[k]``, in the
    order the rules add them) appended to each node's own."""
    n = len(lens)
    owner = np.repeat(np.arange(n, dtype=np.int64), lens)
    at = np.argsort(np.concatenate((owner, after)), kind="stable")  # own deps first, in order
    new_flat = np.concatenate((flat, before))[at]
    return lens + np.bincount(after, minlength=n).astype(np.int64), new_flat
