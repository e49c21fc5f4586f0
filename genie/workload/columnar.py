"""A workload held as columns: one ``NodeColumns`` per rank, loaded and validated without a
Python object per node.

``load_columns`` is ``load_workload`` for ``.et`` rank files (plain or gzip) that stops short of
the object model: every rank is decoded in columns (``et_columns``), process groups come from
the same sources (comm-group file, process_group:init nodes, GlobalMetadata attrs), and the
checks of ``validate_workload`` run on the columns (``column_checks``; the cross-rank ones over
only the send, recv and collective nodes, made as objects). Where a check fails, the workload
is made as objects and put through ``validate_workload``, which raises the error it always
raised. ``ColumnarWorkload.to_workload`` gives what ``load_workload`` gives for the same files
(tests compare them node for node).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genie.errors import ValidationError, WorkloadError
from genie.vocabulary import UNEVEN_ATTR
from genie.workload.column_checks import NeedsReference, RankCheck, apply_ctrl_drop, check_columns
from genie.workload.et_codec import GZIP_MAGIC, _first_frame, frame_notes, gc_paused, open_bytes
from genie.workload.et_columns import Interner, NodeColumns, decode_columns
from genie.workload.et_fast import decode_attr_section
from genie.workload.graph import UNEVEN, CollectiveCall, compare_collective_sequences
from genie.workload.loader import all_rank_files, resolve_groups
from genie.workload.model import DEFAULT_GROUP, Metadata, Node, NodeType, RankGraph, Workload
from genie.workload.process_groups import WORLD_PG_NAME
from genie.workload.stream_columns import ColumnEdges, column_edges
from genie.workload.stream_rules import SUMMARY_KEY, StreamEdges, stream_edges
from genie.workload.validate import DROP_REASONS, match_point_to_point, validate_workload

_A2A = 6  # Chakra ALL_TO_ALL


@dataclass
class ColumnarWorkload:
    """Ranks as columns, with the process groups and what validation found."""

    ranks: list[NodeColumns]
    metadata: list[Metadata]
    sources: list[str]
    groups: dict[str, tuple[int, ...]]
    problems: list[str] = field(default_factory=list)
    name: str = ""
    dropped: dict[str, int] = field(default_factory=dict)
    group_desc: dict[str, str] = field(default_factory=dict)
    #: per rank, what validation found (None: not validated)
    checks: list[RankCheck | None] = field(default_factory=list)

    @property
    def n_ranks(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def node_count(self) -> int:
        """Total nodes over all ranks."""
        return sum(len(c) for c in self.ranks)

    def nbytes(self) -> int:
        """Bytes of the columns (not the file bytes they point into)."""
        return sum(c.nbytes() for c in self.ranks)

    def rank_graph(self, r: int, nodes: list[Node] | None = None) -> RankGraph:
        """Rank ``r`` as a RankGraph holding ``nodes`` (default: none; for names in messages)."""
        return RankGraph(r, nodes or [], self.metadata[r], self.sources[r])

    def to_workload(self) -> Workload:
        """The object model of the same workload (what ``load_workload`` gives)."""
        ranks = []
        for r, cols in enumerate(self.ranks):
            rg = self.rank_graph(r, cols.to_nodes())
            check = self.checks[r] if r < len(self.checks) else None
            if check is not None:
                apply_ctrl_drop(rg.nodes, cols, check.ctrl_drop)
                topo = check.topo.tolist() if check.topo is not None else list(range(len(cols)))
                rg.__dict__["_topo_cache"] = (len(cols), topo)
            ranks.append(rg)
        wl = Workload(ranks=ranks, groups=dict(self.groups), problems=list(self.problems))
        wl.name = self.name
        wl.dropped = dict(self.dropped)
        wl.group_desc = dict(self.group_desc)
        return wl


def load_columns(
    path_prefix_or_dir: str | Path,
    *,
    validate: bool = True,
    comm_groups: str | Path | None = None,
    keep_bytes: bool = True,
) -> ColumnarWorkload:
    """``load_workload`` for ``.et`` files, into columns (see the module docstring).

    ``keep_bytes=False`` drops each file's bytes once its rank is read and checked
    (``NodeColumns.release``): the columns alone stay in memory, and making nodes reads the
    file again.
    """
    with gc_paused():
        return _load_columns(path_prefix_or_dir, validate, comm_groups, keep_bytes)


def _load_columns(
    path_prefix_or_dir: str | Path,
    validate: bool,
    comm_groups: str | Path | None,
    keep_bytes: bool,
) -> ColumnarWorkload:
    prefix, found, n = all_rank_files(path_prefix_or_dir)
    json_files = [f for f in found.values() if f.name.endswith((".json", ".json.gz"))]
    if json_files:
        raise WorkloadError(f"{json_files[0]}: Chakra JSON is not read into columns")
    cw = ColumnarWorkload([], [], [], {}, name=prefix.name)
    memo: dict = {}
    checks: list[RankCheck | None] = []
    meta_nodes: list[RankGraph] = []  # ranks holding their METADATA nodes alone
    meta_type = NodeType.METADATA_NODE
    interner = Interner()  # names and attrs repeat across ranks: each decoded once
    failed = False
    for r in range(n):
        data, note = open_bytes(found[r])
        src = str(found[r])
        meta, pos, notes = _first_frame(data, src, note, memo)
        cols = decode_columns(data, pos, src, note, interner)
        cols.path = found[r]
        del data
        notes += frame_notes(src, cols.zero, cols.odd)
        cw.ranks.append(cols)
        cw.metadata.append(meta)
        cw.sources.append(src)
        cw.problems += notes
        check = None
        if validate and not failed:
            try:
                check = check_columns(cols, cw.rank_graph(r), n)
            except NeedsReference:
                failed = True  # validate_workload says why, once every file is read
        checks.append(check)
        meta_nodes.append(cw.rank_graph(r, cols.nodes(cols.rows_of_type(meta_type).tolist())))
        if not keep_bytes:
            cols.release()
            if cols._size >= _TRIM_BYTES:
                trim_heap()
    cw.checks = checks
    heads = [cw.rank_graph(r) for r in range(n)]
    groups, desc = resolve_groups(
        prefix,
        n,
        heads,
        meta_nodes,
        comm_groups,
        lambda: any(_uses_group(c, WORLD_PG_NAME) for c in cw.ranks),
    )
    groups.setdefault(DEFAULT_GROUP, tuple(range(n)))
    cw.groups = groups
    cw.group_desc = {k: v for k, v in desc.items() if k in groups}
    if validate:
        if failed:
            wl = cw.to_workload()
            validate_workload(wl)  # raises the error the columns' checks found
            raise AssertionError("validate_workload passed a workload the columns' checks refused")
        _validate_across(cw)
    if not keep_bytes and sum(c._size for c in cw.ranks) >= _TRIM_BYTES:
        trim_heap()  # what the cross-rank checks freed
    return cw


_TRIM_BYTES = 64 * 2**20  # a rank file from which its decoding's freed heap is given back


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). Decoding a large rank leaves hundreds of MB of freed blocks the allocator keeps:
    at 10 M nodes about 80 bytes a node that the compile and the replay would add to."""
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = False
        try:
            import ctypes
            import ctypes.util

            name = ctypes.util.find_library("c")
            if name:
                _malloc_trim = getattr(ctypes.CDLL(name), "malloc_trim", False)
        except OSError:
            pass
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def _uses_group(cols: NodeColumns, name: str) -> bool:
    """Whether some node of ``cols`` has ``pg_name`` ``name``."""
    if any(nd._d[2] == name for nd in cols.fallback.values()):
        return True
    used = np.unique(cols.derived).tolist()
    return any(cols.derived_table[i][2] == name for i in used)


def _in_topo_order(check: RankCheck | None, rows: np.ndarray) -> list[int]:
    """``rows`` (ascending) in the rank's topological order."""
    if check is None or check.topo is None:
        return rows.tolist()
    return check.topo[np.isin(check.topo, rows)].tolist()


def _validate_across(cw: ColumnarWorkload) -> None:
    """``validate_workload``'s problems, counts and cross-rank checks, from the per-rank checks."""
    problems: list[str] = []
    dropped: Counter[str] = Counter()
    for check in cw.checks:
        assert check is not None
        problems += check.problems
        dropped.update(check.counts)
    cw.dropped = {k: dropped.get(k, 0) for k in DROP_REASONS}
    for name, members in cw.groups.items():
        bad = [r for r in members if not 0 <= r < cw.n_ranks]
        if bad:
            raise ValidationError(
                f"process group {name!r} names ranks {bad} but the workload has "
                f"{cw.n_ranks} ranks (rank files missing?)"
            )
    _match_p2p(cw)
    problems += _collective_problems(cw)
    for p in problems:
        if p not in cw.problems:
            cw.problems.append(p)


def _match_p2p(cw: ColumnarWorkload) -> None:
    """``validate.check_point_to_point`` from the columns: the send and recv nodes are made as
    objects (for the error's names) only when some do not match."""
    send, recv = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
    sends: dict[tuple[int, int, int], list] = {}
    recvs: dict[tuple[int, int, int], list] = {}
    found = []
    for r, (cols, check) in enumerate(zip(cw.ranks, cw.checks, strict=True)):
        rows = cols.rows_of_type(send, recv)
        if not rows.size:
            continue
        order = _in_topo_order(check, rows)
        found.append((r, cols, order))
        table = cols.derived_table
        for t, dk in zip(cols.type[order].tolist(), cols.derived[order].tolist(), strict=True):
            d = table[dk]
            peer = d[7] if t == send else d[6]
            if peer is None:
                continue  # a host-side launcher
            if t == send:
                sends.setdefault((r, peer, d[3] or 0), []).append(d[1])
            else:
                recvs.setdefault((peer, r, d[3] or 0), []).append(d[1])
    if sends != recvs:  # same keys, same sizes in order: every send meets its recv
        match_point_to_point((r, cols.nodes(order)) for r, cols, order in found)
        raise AssertionError("point-to-point mismatch in columns that the nodes do not show")


def _collective_problems(cw: ColumnarWorkload) -> list[str]:
    """``graph.check_collective_sequences`` from the columns: nodes are made as objects (for
    the messages' names) only in groups whose ranks disagree."""
    coll = NodeType.COMM_COLL_NODE
    keys: dict[str, dict[int, list]] = {}
    rows_of: dict[str, dict[int, list[int]]] = {}
    for r, (cols, check) in enumerate(zip(cw.ranks, cw.checks, strict=True)):
        order = _in_topo_order(check, cols.rows_of_type(coll))
        table = cols.derived_table
        mine: dict[str, list] = {}
        mrows: dict[str, list[int]] = {}
        dks = cols.derived[order].tolist()
        a2a = [i for i, dk in zip(order, dks, strict=True) if table[dk][0] == _A2A]
        uneven = {nd.id for nd in cols.nodes(a2a) if nd.attr(UNEVEN_ATTR) is not None}
        for i, dk in zip(order, dks, strict=True):
            d = table[dk]
            if d[0] is None and d[8]:
                continue  # host-side launcher: not a collective
            size = d[1]
            if d[0] == _A2A and uneven and int(cols.id[i]) in uneven:
                size = UNEVEN
            g = d[2] or DEFAULT_GROUP
            mine.setdefault(g, []).append((d[0], size))
            mrows.setdefault(g, []).append(i)
        for g in mine:
            keys.setdefault(g, {})[r] = mine[g]
            rows_of.setdefault(g, {})[r] = mrows[g]
    seqs: dict[str, dict[int, list[CollectiveCall]]] = {}
    for g, per_rank in keys.items():
        members = cw.groups.get(g)
        ref = per_rank.get(members[0], []) if members else []
        agree = members is not None and all(per_rank.get(r, []) == ref for r in members[1:])
        seqs[g] = {}
        for r, lst in per_rank.items():
            cols = cw.ranks[r]
            nodes = rows_of[g][r]
            made = [None] * len(nodes) if agree else cols.nodes(nodes)
            seqs[g][r] = [
                tuple.__new__(CollectiveCall, (k[0], k[1], nd))
                for k, nd in zip(lst, made, strict=True)
            ]
    return compare_collective_sequences(cw.groups, seqs)


def attr_values(cols: NodeColumns, rows: np.ndarray, attr: str) -> list:
    """The value of attr ``attr`` of each row (None where absent). Where the file's bytes were
    dropped, a plain file is read again at those rows' attr fields only (a few rows), else
    whole."""
    out: list = [None] * len(rows)
    if not len(rows):
        return out
    spans = cols.attrs[rows].tolist()
    fallback = cols.fallback
    few = len(rows) <= _FEW_ROWS
    data = cols.data
    read = False  # the rows' attr fields read one by one from a plain (not gzip) file
    if not data and cols.path is not None and few:
        try:
            with open(cols.path, "rb") as f:
                if f.read(2) != GZIP_MAGIC:
                    st = os.fstat(f.fileno())
                    if st.st_size != cols._size:
                        raise WorkloadError(f"{cols.path}: changed since it was read")
                    cols.unchanged(st)
                    for k, (a, b) in enumerate(spans):
                        f.seek(a)
                        out[k] = _last_attr(f.read(b - a), attr) if a < b else None
                    read = True
        except OSError as exc:
            raise WorkloadError(f"{cols.path}: cannot read it again ({exc.strerror})") from None
    if not read:
        if not data:
            data = cols._bytes()
        for k, (a, b) in enumerate(spans):
            out[k] = _last_attr(data[a:b], attr) if a < b else None
    for k, r in enumerate(rows.tolist()):
        nd = fallback.get(r)
        if nd is not None:
            out[k] = nd.attr(attr)
    return out


_FEW_ROWS = 4096  # rows whose attr fields are read one by one from a file rather than all of it


def _last_attr(section: bytes, attr: str) -> object:
    """The value of the last attr called ``attr`` in a run of canonical attr fields."""
    got = None
    for a in decode_attr_section(section):
        if a.name == attr:
            got = a.value
    return got


def rank_stream_edges(
    cw: ColumnarWorkload,
    r: int,
    dep_ptr: np.ndarray | None = None,
    dep_idx: np.ndarray | None = None,
) -> ColumnEdges:
    """The stream rules' edges of rank ``r`` from its columns (``columns_stream_edges``, with
    the topological order its validation found)."""
    check = cw.checks[r] if r < len(cw.checks) else None
    topo = check.topo if check is not None else None  # None after a check: file order
    return columns_stream_edges(cw.ranks[r], topo, dep_ptr, dep_idx)


def columns_stream_edges(
    cols: NodeColumns,
    topo: np.ndarray | None = None,
    dep_ptr: np.ndarray | None = None,
    dep_idx: np.ndarray | None = None,
) -> ColumnEdges:
    """The stream rules' edges of one rank's columns (``stream_columns.column_edges``); a rank
    with rows decoded as fallback nodes is made as objects. ``dep_ptr``/``dep_idx``: its deps
    as positions where the caller has them. What the rules added (not the edges) is kept on
    ``cols`` for ``stream_rules.summarize_edges``."""
    if cols.fallback:
        se = stream_edges(RankGraph(0, cols.to_nodes()))
        after = [a for a, bs in se.edges.items() for _ in bs]
        before = [b for bs in se.edges.values() for b in bs]
        got = ColumnEdges(
            se.applies,
            se.streams,
            np.asarray(after, np.int64),
            np.asarray(before, np.int64),
            dict(se.counts),
            se.skipped,
        )
    else:
        if dep_ptr is None or dep_idx is None:
            dep_ptr, dep_idx = dep_positions(cols)
        got = column_edges(
            cols.type,
            cols.derived,
            cols.derived_table,
            cols.name,
            cols.names,
            dep_ptr,
            dep_idx,
            lambda rows: attr_values(cols, rows, "tid"),
            topo,
        )
    summary = StreamEdges(got.applies, got.streams, {}, dict(got.counts), got.skipped)
    cols.__dict__[SUMMARY_KEY] = summary
    return got


def dep_positions(cols: NodeColumns) -> tuple[np.ndarray, np.ndarray]:
    """Each row's data deps as positions (CSR ptr, flat): the first row of each id, deps on
    missing ids dropped (and deps on the row itself, for ids that are not positions)."""
    n = len(cols)
    ptr = cols.data_offsets.astype(np.int64)
    deps = cols.data_deps
    ids = cols.id
    if np.array_equal(ids, np.arange(n, dtype=ids.dtype)):
        return ptr, np.where(deps < n, deps, n).astype(np.int64)  # n: outside, ignored
    order = np.argsort(ids, kind="stable")
    sid = ids[order]
    at = np.minimum(np.searchsorted(sid, deps), max(n - 1, 0))
    lens = np.diff(ptr)
    owner = np.repeat(np.arange(n, dtype=np.int64), lens)
    found = sid[at] == deps if n else np.zeros(len(deps), bool)
    pos = order[at].astype(np.int64)
    keep = found & (pos != owner)
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=n), out=out[1:])
    return out, pos[keep]
