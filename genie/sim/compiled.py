"""The simulator's own compact form of a workload: per-rank arrays, CSR deps, comm instances.

The engine never touches the workload module's objects. A ``CompiledWorkload`` holds, per rank,
numpy arrays of node kind, duration, collective type and size, peer and tag, dependencies as CSR
index arrays (``dep_ptr``/``dep_idx``: node ``i`` depends on ``dep_idx[dep_ptr[i]:dep_ptr[i+1]]``,
all indices local to the rank), the lane each node holds while it runs (``lane``, an index into
``lane_names``, -1 for none; see ``genie.sim.lanes``), and the communication *instances* the
nodes belong to:

* a collective instance is (group, sequence number of the collective within that group on each
  member rank, in node order); all members must agree on type and size, else CollectiveError;
* an uneven all-to-all (all-to-all-v) is a collective instance whose members each give the bytes
  they send to every group rank (``CompiledRank.splits``, in group order); its members may then
  differ in comm_size (each rank's own total) and the instance keeps the n x n matrix
  (``Instances.splits``; its ``size`` is the largest rank's total);
* a point-to-point instance pairs the k-th SEND from s to d with tag t with the k-th RECV on d
  from s with tag t. An unpaired SEND or RECV keeps an instance with one side only; the engine
  reports it as a deadlock when it is reached.

``GraphBuilder`` builds this form directly (tests, synthetic benchmarks); ``genie.sim.adapter``
builds it from a ``genie.workload.Workload``.
"""

from __future__ import annotations

import enum
import itertools
import operator
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

try:  # hashlib's own blake2b, without hashlib loading OpenSSL (start-up: issue 33)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter without the builtin module
    from hashlib import blake2b

from genie.errors import CollectiveError, ValidationError
from genie.sim.lanes import GPU as GPU_LANE
from genie.vocabulary import P2P, chakra_name, chakra_type


class Kind(enum.IntEnum):
    """What a compiled node does (mirrors the workload's NodeKind)."""

    COMPUTE = 0
    COLLECTIVE = 1
    SEND = 2
    RECV = 3
    MEMORY = 4
    OTHER = 5


COMM_KINDS = (Kind.COLLECTIVE, Kind.SEND, Kind.RECV)
#: the lane a CompiledRank is given when none is: __post_init__ lays out genie's classic model
CLASSIC_LANES = np.zeros(0, np.int16)


@dataclass
class CompiledRank:
    """One rank's graph as flat arrays (see the module docstring)."""

    kind: np.ndarray  # int8
    duration: np.ndarray  # float64 seconds
    dep_ptr: np.ndarray  # int64, n + 1
    dep_idx: np.ndarray  # int64
    comm_type: np.ndarray  # int16, Chakra number, P2P for send/recv, -2 for non-comm
    comm_size: np.ndarray  # int64 bytes
    group: np.ndarray  # int32 group id for collectives, -1 otherwise
    peer: np.ndarray  # int32 global peer rank for send/recv, -1 otherwise
    tag: np.ndarray  # int64
    node_ids: np.ndarray  # int64 ids in the source workload
    names: list[str] | None = None
    instance: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # iid or -1
    # int16 lane index held while running, -1 for none (CLASSIC_LANES: the classic model)
    lane: np.ndarray = field(default_factory=lambda: CLASSIC_LANES)
    lane_names: list[str] = field(default_factory=list)
    # all-to-all-v: node index -> bytes this rank sends to each rank of the group (group order)
    splits: dict[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.lane is CLASSIC_LANES:  # compute on one "gpu" lane, nothing else
            comp = self.kind == Kind.COMPUTE
            self.lane = np.where(comp, 0, -1).astype(np.int16)
            self.lane_names = [GPU_LANE] if comp.any() else []
        elif len(self.lane) and int(self.lane.max()) >= len(self.lane_names):
            raise ValidationError(f"lane index {int(self.lane.max())} has no name")

    @property
    def n_nodes(self) -> int:
        """Number of nodes of this rank."""
        return len(self.kind)

    def name(self, i: int) -> str:
        """Name of node ``i`` (its source id when names were not kept)."""
        if self.names is not None and self.names[i]:
            return self.names[i]
        return f"node{int(self.node_ids[i])}"

    def signature(self) -> bytes:
        """A digest of everything that decides this rank's timeline (not names, not peers)."""
        h = blake2b(digest_size=16)
        for arr in (
            self.kind,
            self.duration,
            self.dep_ptr,
            self.dep_idx,
            self.comm_type,
            self.comm_size,
            self.group,
            self.lane,
        ):
            h.update(np.ascontiguousarray(arr).tobytes())
            h.update(b"|")
        for i in sorted(self.splits):
            h.update(f"{i}:".encode())
            h.update(np.ascontiguousarray(self.splits[i], np.int64).tobytes())
        return h.digest()


def with_deps(cr: CompiledRank, dep_ptr: np.ndarray, dep_idx: np.ndarray) -> CompiledRank:
    """``cr`` with other deps (``dataclasses.replace`` without re-running the lane check)."""
    out = object.__new__(CompiledRank)
    out.__dict__.update(cr.__dict__)
    out.dep_ptr = dep_ptr
    out.dep_idx = dep_idx
    return out


@dataclass
class Instances:
    """Communication instances across ranks: one per collective call and per send/recv pair."""

    comm_type: np.ndarray  # int16 (P2P for send/recv)
    size: np.ndarray  # int64 bytes
    group: np.ndarray  # int32 gid or -1
    seq: np.ndarray  # int64 sequence within group (collectives) or pair index (p2p)
    src: np.ndarray  # int32 p2p sender or -1
    dst: np.ndarray  # int32 p2p receiver or -1
    tag: np.ndarray  # int64
    # (rank, node) of each participant: lists, or ``MemberLists`` (columns, lists made as read)
    members: Sequence[list[tuple[int, int]]]
    # all-to-all-v instances: iid -> n x n int64 bytes, row i = what group rank i sends to each
    splits: dict[int, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.size)


@dataclass
class CompiledWorkload:
    """Every rank compiled, plus the groups and communication instances."""

    ranks: list[CompiledRank]
    group_names: list[str]
    group_ranks: list[tuple[int, ...]]
    instances: Instances
    name: str = "workload"
    # nodes compiled from host work (a COMM node's host-side launcher, ``NodeKind.HOST``),
    # where the compile counted them (``genie.sim.batch_compile``); None: not counted
    host_work_nodes: int | None = field(default=None, compare=False, repr=False)

    @property
    def n_ranks(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    @property
    def n_nodes(self) -> int:
        """Total nodes over all ranks."""
        return sum(r.n_nodes for r in self.ranks)

    def instance_ranks(self, iid: int) -> tuple[int, ...]:
        """Global ranks taking part in instance ``iid`` (the group, or (src, dst))."""
        g = int(self.instances.group[iid])
        if g >= 0:
            return self.group_ranks[g]
        return (int(self.instances.src[iid]), int(self.instances.dst[iid]))


def _csr(deps: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(deps) + 1, np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps]) if deps else []
    flat = list(itertools.chain.from_iterable(deps))
    return ptr, np.asarray(flat, np.int64)


def finish(
    ranks: list[CompiledRank],
    group_names: list[str],
    group_ranks: list[tuple[int, ...]],
    name: str = "workload",
    whole: Mapping[str, np.ndarray] | None = None,
) -> CompiledWorkload:
    """Assign communication instances, check that collectives agree across ranks, and pack.

    ``whole``: per CompiledRank field, the ranks' arrays end to end, where the caller made the
    ranks' arrays as slices of one array each (not joined again here)."""
    fast = _finish_columns(ranks, group_names, group_ranks, name, whole)
    if fast is not None:
        return fast
    return _finish_loop(ranks, group_names, group_ranks, name)


def _finish_loop(
    ranks: list[CompiledRank],
    group_names: list[str],
    group_ranks: list[tuple[int, ...]],
    name: str = "workload",
) -> CompiledWorkload:
    """``finish`` node by node: the reference, and the path that names what is wrong."""
    n = len(ranks)
    i_type: list[int] = []
    i_size: list[int] = []
    i_group: list[int] = []
    i_seq: list[int] = []
    i_src: list[int] = []
    i_dst: list[int] = []
    i_tag: list[int] = []
    members: list[list[tuple[int, int]]] = []
    coll_iid: dict[tuple[int, int], int] = {}
    p2p_sends: dict[tuple[int, int, int], list[int]] = {}
    p2p_recvs: dict[tuple[int, int, int], list[int]] = {}
    member_sets = [frozenset(g) for g in group_ranks]
    n_groups = len(group_ranks)
    group_pos = [{x: k for k, x in enumerate(g)} for g in group_ranks]
    rows: dict[int, dict[int, np.ndarray]] = {}  # all-to-all-v: iid -> group rank -> row
    for r, cr in enumerate(ranks):
        seq: dict[int, int] = {}  # per group: a list per rank would be quadratic in ranks
        comm_nodes = np.flatnonzero((cr.kind >= Kind.COLLECTIVE) & (cr.kind <= Kind.RECV))
        kinds = cr.kind[comm_nodes].tolist()
        grps = cr.group[comm_nodes].tolist()
        ctypes = cr.comm_type[comm_nodes].tolist()
        sizes = cr.comm_size[comm_nodes].tolist()
        for i, k, g, ctype, size in zip(
            comm_nodes.tolist(), kinds, grps, ctypes, sizes, strict=True
        ):
            if k == Kind.COLLECTIVE:
                if not 0 <= g < n_groups:
                    raise ValidationError(f"rank {r} node {cr.name(i)}: unknown group id {g}")
                if r not in member_sets[g]:
                    raise ValidationError(
                        f"rank {r} node {cr.name(i)} calls a collective on group "
                        f"{group_names[g]!r} {list(group_ranks[g])} that it is not a member of"
                    )
                key = (g, seq.get(g, 0))
                seq[g] = key[1] + 1
                iid = coll_iid.get(key)
                row = cr.splits.get(i) if cr.splits else None
                if row is not None:
                    row = _split_row(cr, i, ctype, row, group_ranks[g])
                if iid is not None and (iid in rows) != (row is not None):
                    r0, n0 = members[iid][0]
                    raise CollectiveError(
                        f"all-to-all #{key[1]} of group {group_names[g]!r}: rank {r0} node "
                        f"{ranks[r0].name(n0)} and rank {r} node {cr.name(i)} disagree on "
                        "whether it is uneven (per-peer sizes on one, not the other)"
                    )
                if iid is not None and row is not None:  # all-to-all-v: totals may differ
                    if i_type[iid] != ctype:
                        size = i_size[iid]  # let the type check below name the mismatch
                    else:
                        i_size[iid] = size = max(i_size[iid], size)
                if iid is None:
                    iid = len(i_size)
                    coll_iid[key] = iid
                    i_type.append(ctype)
                    i_size.append(size)
                    i_group.append(g)
                    i_seq.append(key[1])
                    i_src.append(-1)
                    i_dst.append(-1)
                    i_tag.append(0)
                    members.append([])
                elif (i_type[iid], i_size[iid]) != (ctype, size):
                    r0, n0 = members[iid][0]
                    raise CollectiveError(
                        f"collective #{key[1]} of group {group_names[g]!r} does not match across "
                        f"ranks: rank {r0} node {ranks[r0].name(n0)} is {chakra_name(i_type[iid])} "
                        f"of {i_size[iid]} B, rank {r} node {cr.name(i)} is {chakra_name(ctype)} "
                        f"of {size} B"
                    )
                members[iid].append((r, i))
                if row is not None:
                    rows.setdefault(iid, {})[group_pos[g][r]] = row
            else:
                peer = int(cr.peer[i])
                if not 0 <= peer < n:
                    raise ValidationError(
                        f"rank {r} node {cr.name(i)}: peer {peer} outside 0..{n - 1}"
                    )
                chan = (r, peer, int(cr.tag[i])) if k == Kind.SEND else (peer, r, int(cr.tag[i]))
                book = p2p_sends if k == Kind.SEND else p2p_recvs
                book.setdefault(chan, []).append(i)
    # pair sends and recvs per channel, in order
    for s, d, t, k, mem, size in _p2p_instances(ranks, p2p_sends, p2p_recvs):
        i_type.append(P2P)
        i_size.append(size)
        i_group.append(-1)
        i_seq.append(k)
        i_src.append(s)
        i_dst.append(d)
        i_tag.append(t)
        members.append(mem)
    for cr in ranks:
        cr.instance = np.full(cr.n_nodes, -1, np.int64)
    for iid, mem in enumerate(members):
        for rr, nn in mem:
            ranks[rr].instance[nn] = iid
    splits = {}
    for iid, by_pos in rows.items():
        n_g = len(group_ranks[i_group[iid]])
        mat = np.zeros((n_g, n_g), np.int64)
        for k, row in by_pos.items():
            mat[k] = row
        splits[iid] = mat
    instances = _instances(
        (i_type, i_size), (i_group, i_seq), (i_src, i_dst), i_tag, members, splits
    )
    return CompiledWorkload(ranks, list(group_names), list(group_ranks), instances, name)


def _joined(
    ranks: list[CompiledRank], field: str, whole: Mapping[str, np.ndarray] | None, at: Any
) -> np.ndarray:
    """The ranks' ``field`` arrays end to end (``whole[field]`` where given) at ``at``, as int64."""
    got = whole.get(field) if whole is not None else None
    if got is None:
        got = np.concatenate([getattr(cr, field) for cr in ranks])
    return got[at].astype(np.int64)


def _finish_columns(
    ranks: list[CompiledRank],
    group_names: list[str],
    group_ranks: list[tuple[int, ...]],
    name: str,
    whole: Mapping[str, np.ndarray] | None = None,
) -> CompiledWorkload | None:
    """``finish`` on columns for the common case (no all-to-all-v, no error, no send/recv
    mismatch); None to leave it to the node-by-node loop, which numbers instances alike
    (collectives by first appearance in rank, then node order; send/recv pairs after them by
    channel) and names any problem."""
    n = len(ranks)
    if not ranks or any(cr.splits for cr in ranks):
        return None
    kinds = [cr.kind for cr in ranks]
    counts = np.array([len(k) for k in kinds], np.int64)
    kind = _joined(ranks, "kind", whole, slice(None))
    comm = np.flatnonzero((kind >= Kind.COLLECTIVE) & (kind <= Kind.RECV))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    rank = np.searchsorted(offsets, comm, side="right") - 1
    local = comm - offsets[rank]
    ck = kind[comm]
    coll = ck == Kind.COLLECTIVE
    group = _joined(ranks, "group", whole, comm)
    ctype = _joined(ranks, "comm_type", whole, comm)
    size = _joined(ranks, "comm_size", whole, comm)
    n_groups = len(group_ranks)
    cg, cr_, cl = group[coll], rank[coll], local[coll]
    if len(cg) and (cg.min() < 0 or cg.max() >= n_groups):
        return None
    # membership: (group, rank) pairs of every group, as one sorted code
    lens = np.array([len(g) for g in group_ranks], np.int64)
    flat = np.fromiter(itertools.chain.from_iterable(group_ranks), np.int64, int(lens.sum()))
    if len(cg):
        codes = np.sort(np.repeat(np.arange(n_groups, dtype=np.int64), lens) * n + flat)
        want = cg * n + cr_
        at = np.minimum(np.searchsorted(codes, want), len(codes) - 1)
        if not np.array_equal(codes[at], want):
            return None
    # sequence number of each collective within its group on its rank (node order)
    rank_group = cr_ * n_groups + cg  # the collectives are in (rank, node) order already:
    order = np.argsort(rank_group, kind="stable")  # a stable sort keeps node order in a run
    key_sorted = rank_group[order]
    run_start = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    run_len = np.diff(np.r_[run_start, len(key_sorted)])
    seq_sorted = np.arange(len(key_sorted)) - np.repeat(run_start, run_len)
    seq = np.empty(len(cg), np.int64)
    seq[order] = seq_sorted
    # instances by first appearance of (group, seq) in (rank, node) order
    ikey = cg * (int(seq.max(initial=0)) + 1) + seq
    uniq, first, inv = np.unique(ikey, return_index=True, return_inverse=True)
    rank_of_uniq = np.empty(len(uniq), np.int64)
    rank_of_uniq[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    iid = rank_of_uniq[inv]
    n_coll = len(uniq)
    lead = first[np.argsort(first, kind="stable")]  # each instance's first member (flat index)
    ct, sz = ctype[coll], size[coll]
    if not (np.array_equal(ct, ct[lead][iid]) and np.array_equal(sz, sz[lead][iid])):
        return None
    # members of each collective instance in (rank, node) order
    by_iid = np.argsort(iid, kind="stable")
    bounds = np.searchsorted(iid[by_iid], np.arange(n_coll + 1))
    # send/recv: paired per channel in node order, as the loop does
    pidx = np.flatnonzero(~coll)
    peer = _joined(ranks, "peer", whole, comm[pidx])
    if len(peer) and (peer.min() < 0 or peer.max() >= n):
        return None
    tag = _joined(ranks, "tag", whole, comm[pidx])
    p2p = _p2p_columns(rank[pidx], local[pidx], ck[pidx] == Kind.SEND, peer, tag, size[pidx])
    if p2p is None:
        return None  # a send and its receive differ in size: the reference names them
    (p_src, p_dst, p_tag, p_seq, p_size, p_bounds), (p_rank, p_local, p_iid) = p2p
    # the collectives' members, then the pairs' (each pair's rows follow one another too)
    members = MemberLists(
        np.r_[cr_[by_iid], p_rank],
        np.r_[cl[by_iid], p_local],
        np.r_[bounds, p_bounds[1:] + bounds[-1]],
    )
    # each node's instance
    inst_flat = np.full(int(offsets[-1]), -1, np.int64)
    inst_flat[offsets[cr_] + cl] = iid
    inst_flat[offsets[p_rank] + p_local] = p_iid + n_coll
    for r, cr in enumerate(ranks):
        cr.instance = inst_flat[offsets[r] : offsets[r + 1]]
    n_p2p = len(p_bounds) - 1
    instances = _instances(
        (np.r_[ct[lead], np.full(n_p2p, P2P, np.int64)], np.r_[sz[lead], p_size]),
        (np.r_[cg[lead], np.full(n_p2p, -1, np.int64)], np.r_[seq[lead], p_seq]),
        (np.r_[np.full(n_coll, -1, np.int64), p_src], np.r_[np.full(n_coll, -1, np.int64), p_dst]),
        np.r_[np.zeros(n_coll, np.int64), p_tag],
        members,
        {},
    )
    return CompiledWorkload(ranks, list(group_names), list(group_ranks), instances, name)


class MemberLists(Sequence[list[tuple[int, int]]]):
    """``Instances.members`` as columns: instance ``i``'s (rank, node) pairs are rows
    ``bounds[i]:bounds[i + 1]`` of ``rank`` and ``node``, made into a new list when read.

    Hundreds of thousands of small lists cost ~0.06 s and tens of MB at 4,096 ranks, where an
    orbit replay reads the members of a few instances; a full replay reads them all (a pass
    over them makes every list at once, as lists would have been made). Reads of single
    instances turn the columns into Python lists once ``LISTS_AFTER`` have been made.
    """

    LISTS_AFTER = 1024

    def __init__(self, rank: np.ndarray, node: np.ndarray, bounds: np.ndarray) -> None:
        self.rank = np.asarray(rank, np.int64)
        self.node = np.asarray(node, np.int64)
        self.bounds = np.asarray(bounds, np.int64)
        self._reads = 0
        self._lists: tuple[list[int], list[int], list[int]] | None = None

    def __len__(self) -> int:
        return len(self.bounds) - 1

    @overload
    def __getitem__(self, i: int) -> list[tuple[int, int]]: ...

    @overload
    def __getitem__(self, i: slice) -> list[list[tuple[int, int]]]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        k = operator.index(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("instance index out of range")
        cols = self._lists
        if cols is None:
            self._reads += 1
            if self._reads <= self.LISTS_AFTER:
                a, b = int(self.bounds[k]), int(self.bounds[k + 1])
                return list(zip(self.rank[a:b].tolist(), self.node[a:b].tolist(), strict=True))
            cols = self._lists = (self.rank.tolist(), self.node.tolist(), self.bounds.tolist())
        rank, node, bounds = cols
        a, b = bounds[k], bounds[k + 1]
        return list(zip(rank[a:b], node[a:b], strict=True))

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(_member_lists(self.rank, self.node, np.diff(self.bounds)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MemberLists({list(self)!r})"


def _member_lists(
    rank: np.ndarray, node: np.ndarray, sizes: np.ndarray
) -> list[list[tuple[int, int]]]:
    """The (rank, node) pairs cut into lists of ``sizes`` (in order): each size's lists made at
    once, by zipping one iterator over its pairs with itself, then put in place."""
    n = len(sizes)
    out: list[Any] = [None] * n
    each = np.repeat(sizes, sizes)  # per pair: its list's size
    distinct = sorted(set(sizes.tolist()))  # not np.unique: it imports numpy.ma (~9 ms)
    for k in distinct:
        at = np.flatnonzero(sizes == k).tolist() if len(distinct) > 1 else range(n)
        if k == 0:
            lists: Any = ([] for _ in at)
        else:
            mine = each == k
            it = zip(rank[mine].tolist(), node[mine].tolist(), strict=True)
            lists = map(list, zip(*([it] * k), strict=True))
        deque(map(out.__setitem__, at, lists), maxlen=0)
    return out


def _instances(
    type_size: tuple[Sequence[int], Sequence[int]],
    group_seq: tuple[Sequence[int], Sequence[int]],
    src_dst: tuple[Sequence[int], Sequence[int]],
    tag: Sequence[int],
    members: Sequence[list[tuple[int, int]]],
    splits: dict[int, np.ndarray],
) -> Instances:
    """``Instances`` from its columns as lists or arrays (each cast to its dtype)."""
    return Instances(
        comm_type=np.asarray(type_size[0], np.int16),
        size=np.asarray(type_size[1], np.int64),
        group=np.asarray(group_seq[0], np.int32),
        seq=np.asarray(group_seq[1], np.int64),
        src=np.asarray(src_dst[0], np.int32),
        dst=np.asarray(src_dst[1], np.int32),
        tag=np.asarray(tag, np.int64),
        members=members,
        splits=splits,
    )


def _p2p_columns(
    rank: np.ndarray,
    local: np.ndarray,
    is_send: np.ndarray,
    peer: np.ndarray,
    tag: np.ndarray,
    size: np.ndarray,
) -> tuple[tuple, tuple] | None:
    """``_p2p_instances`` on columns (one entry per send/recv node, in rank then node order):
    ``((src, dst, tag, seq, size, bounds), (rank, node, instance))`` with instances numbered
    as the loop numbers them (by channel, then k), or None where a send and its receive differ
    in size."""
    if not len(rank):
        empty = np.zeros(0, np.int64)
        return (empty, empty, empty, empty, empty, np.zeros(1, np.int64)), (empty, empty, empty)
    src = np.where(is_send, rank, peer)
    dst = np.where(is_send, peer, rank)
    side = (~is_send).astype(np.int64)  # sends before receives
    # k: the place of each send (receive) among its channel's sends (receives), in node order
    order = np.lexsort((local, side, tag, dst, src))
    s_src, s_dst, s_tag, s_side = src[order], dst[order], tag[order], side[order]
    new_run = np.r_[
        True,
        (s_src[1:] != s_src[:-1])
        | (s_dst[1:] != s_dst[:-1])
        | (s_tag[1:] != s_tag[:-1])
        | (s_side[1:] != s_side[:-1]),
    ]
    run_start = np.flatnonzero(new_run)
    k = np.empty(len(order), np.int64)
    k[order] = np.arange(len(order)) - np.repeat(run_start, np.diff(np.r_[run_start, len(order)]))
    # instances: (channel, k) in order, the send (if any) before the receive (if any)
    order = np.lexsort((side, k, tag, dst, src))
    o_src, o_dst, o_tag, o_k = src[order], dst[order], tag[order], k[order]
    first = np.r_[
        True,
        (o_src[1:] != o_src[:-1])
        | (o_dst[1:] != o_dst[:-1])
        | (o_tag[1:] != o_tag[:-1])
        | (o_k[1:] != o_k[:-1]),
    ]
    iid = np.cumsum(first) - 1
    lead = np.flatnonzero(first)
    o_size = size[order]
    last = np.r_[lead[1:] - 1, len(order) - 1]  # the receive where there is one
    pair = last != lead
    if not np.array_equal(o_size[lead[pair]], o_size[last[pair]]):
        return None
    o_rank, o_local = rank[order], local[order]
    bounds = np.r_[lead, len(order)]  # instance j's members: rows bounds[j]:bounds[j + 1]
    cols = (o_src[lead], o_dst[lead], o_tag[lead], o_k[lead], o_size[last], bounds)
    return cols, (o_rank, o_local, iid)


def _p2p_instances(
    ranks: Sequence[CompiledRank],
    sends: dict[tuple[int, int, int], list[int]],
    recvs: dict[tuple[int, int, int], list[int]],
) -> Iterator[tuple[int, int, int, int, list[tuple[int, int]], int]]:
    """Point-to-point instances, channel (src, dst, tag) by channel: the k-th send and the k-th
    receive of a channel are one instance, ``(src, dst, tag, k, members, size)``; a send and its
    receive of different sizes are a CollectiveError."""
    for chan in sorted(set(sends) | set(recvs)):
        s, d, t = chan
        out, inn = sends.get(chan, []), recvs.get(chan, [])
        for k in range(max(len(out), len(inn))):
            mem: list[tuple[int, int]] = []
            size = -1
            if k < len(out):
                mem.append((s, out[k]))
                size = int(ranks[s].comm_size[out[k]])
            if k < len(inn):
                mem.append((d, inn[k]))
                rsize = int(ranks[d].comm_size[inn[k]])
                if size >= 0 and rsize != size:
                    raise CollectiveError(
                        f"send rank {s} node {ranks[s].name(out[k])} ({size} B) and recv rank "
                        f"{d} node {ranks[d].name(inn[k])} ({rsize} B), tag {t}, differ in size"
                    )
                size = rsize
            yield s, d, t, k, mem, size


def _split_row(cr: CompiledRank, i: int, ctype: int, row, group: tuple[int, ...]) -> np.ndarray:
    """The checked per-peer bytes of an all-to-all-v node (group order)."""
    arr = np.asarray(row, np.int64)
    if ctype != chakra_type("all_to_all"):
        raise ValidationError(
            f"node {cr.name(i)}: per-peer sizes are for all-to-all, not {chakra_name(ctype)}"
        )
    if arr.ndim != 1 or len(arr) != len(group) or (arr < 0).any():
        raise ValidationError(
            f"node {cr.name(i)}: per-peer sizes must be {len(group)} byte counts >= 0 (one per "
            f"rank of its group), got {len(arr)}"
        )
    return arr


def make_rank(
    kind: Sequence[int],
    duration: Sequence[float],
    deps: Sequence[Sequence[int]],
    comm_type: Sequence[int] | None = None,
    comm_size: Sequence[int] | None = None,
    group: Sequence[int] | None = None,
    peer: Sequence[int] | None = None,
    tag: Sequence[int] | None = None,
    node_ids: Sequence[int] | None = None,
    names: list[str] | None = None,
    drop_bad_deps: bool = False,
    lane: Sequence[int] | None = None,
    lane_names: list[str] | None = None,
    splits: Mapping[int, Sequence[int]] | None = None,
) -> CompiledRank:
    """Pack one rank's per-node lists into a CompiledRank (deps are local node indices).

    With ``drop_bad_deps``, deps outside 0..n-1 and on the node itself are dropped (the
    workload loader has reported them); otherwise they are a ValidationError. Without ``lane``,
    compute nodes share one lane and nothing else holds one (``genie.sim.lanes``).
    """
    n = len(kind)
    ptr, idx = _csr(deps)
    if len(idx):
        owner = np.repeat(np.arange(n), np.diff(ptr))
        bad = (idx < 0) | (idx >= n) | (idx == owner)
        if bad.any():
            if not drop_bad_deps:
                raise ValidationError(f"dependency index outside 0..{n - 1} or on itself")
            idx = idx[~bad]
            ptr = np.zeros(n + 1, np.int64)
            np.cumsum(np.bincount(owner[~bad], minlength=n), out=ptr[1:])

    def arr(v, dtype, fill):
        return np.full(n, fill, dtype) if v is None else np.asarray(v, dtype)

    return CompiledRank(
        kind=np.asarray(kind, np.int8),
        duration=np.asarray(duration, np.float64),
        dep_ptr=ptr,
        dep_idx=idx,
        comm_type=arr(comm_type, np.int16, -2),
        comm_size=arr(comm_size, np.int64, 0),
        group=arr(group, np.int32, -1),
        peer=arr(peer, np.int32, -1),
        tag=arr(tag, np.int64, 0),
        node_ids=arr(node_ids, np.int64, 0) if node_ids is not None else np.arange(n),
        names=names,
        lane=CLASSIC_LANES if lane is None else np.asarray(lane, np.int16),
        lane_names=list(lane_names or []),
        splits={int(i): np.asarray(v, np.int64) for i, v in (splits or {}).items()},
    )


class GraphBuilder:
    """Build a CompiledWorkload node by node: for tests, examples and synthetic benchmarks."""

    def __init__(self, n_ranks: int, name: str = "workload") -> None:
        self.n_ranks = n_ranks
        self.name = name
        self._nodes: list[list[tuple]] = [[] for _ in range(n_ranks)]
        self.group_names: list[str] = []
        self.group_ranks: list[tuple[int, ...]] = []
        self._splits: dict[int, dict[int, list[int]]] = {}

    def group(self, name: str, ranks: Sequence[int] | None = None) -> int:
        """Declare a process group (default: every rank) and return its id."""
        members = tuple(range(self.n_ranks)) if ranks is None else tuple(ranks)
        if name in self.group_names:
            return self.group_names.index(name)
        self.group_names.append(name)
        self.group_ranks.append(members)
        return len(self.group_names) - 1

    def _add(self, rank: int, row: tuple, lane: str | None) -> int:
        self._nodes[rank].append((*row, lane))
        return len(self._nodes[rank]) - 1

    def compute(
        self,
        rank: int,
        duration: float,
        deps: Sequence[int] = (),
        name: str = "",
        lane: str = GPU_LANE,
    ) -> int:
        """Add a compute node taking ``duration`` seconds on ``lane``; return its local index."""
        return self._add(rank, (Kind.COMPUTE, duration, tuple(deps), -2, 0, -1, -1, 0, name), lane)

    def memory(
        self,
        rank: int,
        duration: float,
        deps: Sequence[int] = (),
        name: str = "",
        lane: str | None = None,
    ) -> int:
        """Add a memory node (a delay that holds no lane unless given one)."""
        return self._add(rank, (Kind.MEMORY, duration, tuple(deps), -2, 0, -1, -1, 0, name), lane)

    def collective(
        self,
        rank: int,
        ctype: int | str,
        size: int,
        group: int | str = 0,
        deps: Sequence[int] = (),
        name: str = "",
        lane: str | None = None,
        splits: Sequence[int] | None = None,
    ) -> int:
        """Add a collective call of ``size`` bytes on ``group`` (id or name); ``splits``: the
        bytes this rank sends to each group rank (an uneven all-to-all)."""
        g = self.group_names.index(group) if isinstance(group, str) else group
        row = (Kind.COLLECTIVE, 0.0, tuple(deps), chakra_type(ctype), size, g, -1, 0, name)
        i = self._add(rank, row, lane)
        if splits is not None:
            self._splits.setdefault(rank, {})[i] = list(splits)
        return i

    def send(
        self,
        rank: int,
        peer: int,
        size: int,
        tag: int = 0,
        deps: Sequence[int] = (),
        name="",
        lane: str | None = None,
    ) -> int:
        """Add a send of ``size`` bytes to global rank ``peer``."""
        return self._p2p(Kind.SEND, rank, peer, size, tag, deps, name, lane)

    def recv(
        self,
        rank: int,
        peer: int,
        size: int,
        tag: int = 0,
        deps: Sequence[int] = (),
        name="",
        lane: str | None = None,
    ) -> int:
        """Add a receive of ``size`` bytes from global rank ``peer``."""
        return self._p2p(Kind.RECV, rank, peer, size, tag, deps, name, lane)

    def _p2p(self, kind, rank, peer, size, tag, deps, name, lane) -> int:
        return self._add(rank, (kind, 0.0, tuple(deps), P2P, size, -1, peer, tag, name), lane)

    def build(self) -> CompiledWorkload:
        """Compile every rank and match the communication."""
        if not self.group_ranks:
            self.group("world")
        ranks = []
        for r, rows in enumerate(self._nodes):
            cols: list[Sequence[Any]] = (
                list(zip(*rows, strict=True)) if rows else [[] for _ in range(10)]
            )
            kind, dur, deps, ct, cs, g, peer, tag, names, lane_of = cols
            lane_ids: dict[str, int] = {}
            lane = [-1 if x is None else lane_ids.setdefault(x, len(lane_ids)) for x in lane_of]
            ranks.append(
                make_rank(
                    kind,
                    dur,
                    deps,
                    ct,
                    cs,
                    g,
                    peer,
                    tag,
                    names=list(names) or None,
                    lane=lane,
                    lane_names=list(lane_ids),
                    splits=self._splits.get(r),
                )
            )
        return finish(ranks, self.group_names, self.group_ranks, self.name)


#: the deps of a node without any (shared: read, never changed)
NO_DEPS: list[int] = []


def positional_deps(nodes: Sequence[Any], ids: Sequence[int]) -> list[list[int]]:
    """Each node's data deps as positions in ``nodes`` (``ids``: the nodes' ids, the first
    node of an id standing for it); deps to ids not in ``nodes`` and to the node itself are
    dropped, as ``make_rank`` drops them."""
    index: dict[int, int] = {}
    for i, node_id in enumerate(ids):
        index.setdefault(node_id, i)
    return [
        [index[d] for d in nd.data_deps if d in index and index[d] != i]
        if nd.data_deps
        else NO_DEPS
        for i, nd in enumerate(nodes)
    ]
