"""Adapter from ``genie.workload`` objects to the simulator's compiled form.

Reads only the documented node fields (id, name, kind, duration_s, num_ops, tensor_size,
comm_type, comm_size, pg_name, peer, tag, data_deps, is_cpu_op, stream, and an all-to-all's
per-peer sizes ``comm_split_sizes``, ``genie.sim.uneven``), so the engine stays
independent of the workload module's layout. Data deps to ids missing from the rank are dropped
(the workload loader reports them); ctrl_deps are not scheduled on, as the design says.

Stream semantics: with ``edges="inferred"`` (the default) a PyTorch-derived rank also waits on
the edges ``genie.workload.stream_rules`` infers (CUDA stream order, ProcessGroupNCCL's stream
sync, waits); ``edges="explicit"`` replays the trace's own data_deps only. Ranks without CPU ops
(generated workloads, ASTRA-sim traces) compile the same either way.

Host work (a COMM node's host-side launcher, kind ``host``) compiles to a COMPUTE node of its
trace duration on the CPU lane: never a network operation. Each node's lane comes from
``genie.sim.lanes.lane_key``.

Compute time: the trace's duration, or with a ``ComputeModel`` a roofline
``max(num_ops / (peak x efficiency), tensor_size / memory_bandwidth)`` (``mode="roofline"``:
always when num_ops is known; ``mode="trace"``: only for nodes whose duration is 0). The
roofline prices GPU work only: CPU-lane nodes keep their trace duration (as ASTRA-sim does).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.errors import ValidationError
from genie.sim.compiled import NO_DEPS, CompiledWorkload, Kind, finish, make_rank, positional_deps
from genie.sim.lanes import CPU as CPU_LANE
from genie.sim.lanes import lane_key
from genie.sim.uneven import SPLIT_ATTR
from genie.vocabulary import P2P, CollectiveType
from genie.workload.model import RankGraph
from genie.workload.stream_rules import MODES as EDGE_MODES
from genie.workload.stream_rules import stream_edges

A2A = int(CollectiveType.ALL_TO_ALL)

_KIND = {
    "compute": Kind.COMPUTE,
    "host": Kind.COMPUTE,
    "collective": Kind.COLLECTIVE,
    "send": Kind.SEND,
    "recv": Kind.RECV,
    "memory": Kind.MEMORY,
    "other": Kind.OTHER,
}


@dataclass(frozen=True)
class ComputeModel:
    """How compute and memory node durations are obtained (see the module docstring)."""

    mode: str = "trace"  # "trace" or "roofline"
    peak_flops: float | None = None  # FLOP/s
    efficiency: float = 1.0
    memory_bandwidth: float | None = None  # bytes/s

    def roofline(self, num_ops: float | None, tensor_size: float | None) -> float | None:
        """Roofline time of one node, or None when the model cannot price it."""
        t = None
        if num_ops and self.peak_flops:
            t = float(num_ops) / (self.peak_flops * self.efficiency)
        if tensor_size and self.memory_bandwidth:
            tm = float(tensor_size) / self.memory_bandwidth
            t = tm if t is None else max(t, tm)
        return t


# Chakra NodeType number -> kind (METADATA and INVALID are OTHER)
_BY_TYPE = {4: Kind.COMPUTE, 7: Kind.COLLECTIVE, 5: Kind.SEND, 6: Kind.RECV, 2: Kind.MEMORY}
_BY_TYPE.update({3: Kind.MEMORY, 0: Kind.OTHER, 1: Kind.OTHER})
_KIND_NAME = {
    Kind.COMPUTE: "compute",
    Kind.COLLECTIVE: "collective",
    Kind.SEND: "send",
    Kind.RECV: "recv",
    Kind.MEMORY: "memory",
    Kind.OTHER: "other",
}


_NETWORK = (Kind.COLLECTIVE, Kind.SEND, Kind.RECV)


def _kind_of(node: Any) -> Kind:
    k = node.kind
    key = getattr(k, "value", k)
    if isinstance(key, str):
        return _KIND[key.lower()]
    return Kind(int(key))


def compile_workload(
    wl: Any, compute: ComputeModel | None = None, edges: str = "inferred"
) -> CompiledWorkload:
    """Compile a ``genie.workload.Workload`` (ranks of nodes, groups by name) for the engine.

    ``edges``: ``inferred`` adds the stream rules' dependencies to PyTorch-derived ranks,
    ``explicit`` keeps the trace's data_deps only (see the module docstring). All ranks are
    compiled at once (``genie.sim.batch_compile``); where that path declines, the node-by-node
    reference ``compile_reference`` runs (it gives the same arrays, and names any problem).
    A ``genie.workload.columnar.ColumnarWorkload`` compiles from its columns
    (``genie.sim.columns_compile``), or where that declines from its object model.
    """
    if edges not in EDGE_MODES:
        raise ValidationError(f"edges must be one of {EDGE_MODES}, got {edges!r}")
    compute = compute or ComputeModel()
    from genie.sim.batch_compile import compile_batch

    roofline = compute.mode == "roofline"

    def fields_of(nd: Any, r: int, groups_of: tuple) -> tuple:
        return _fields(nd, r, compute, roofline, groups_of)

    columnar = sys.modules.get("genie.workload.columnar")  # loaded where wl can be columns
    if columnar is not None and isinstance(wl, columnar.ColumnarWorkload):
        from genie.sim.columns_compile import compile_columns

        got = compile_columns(wl, edges, fields_of, A2A)
        if got is not None:
            return got
        wl = wl.to_workload()
    fast = compile_batch(wl, edges, fields_of, A2A)
    return fast if fast is not None else compile_reference(wl, compute, edges)


def compile_reference(
    wl: Any, compute: ComputeModel | None = None, edges: str = "inferred"
) -> CompiledWorkload:
    """``compile_workload`` node by node and rank by rank: the reference the batch path is
    tested against, and the path that raises the error a bad workload deserves."""
    if edges not in EDGE_MODES:
        raise ValidationError(f"edges must be one of {EDGE_MODES}, got {edges!r}")
    compute = compute or ComputeModel()
    groups: dict[str, tuple[int, ...]] = dict(getattr(wl, "groups", {}) or {})
    group_names = list(groups)
    group_ranks = [tuple(int(x) for x in groups[g]) for g in group_names]
    gid = {g: i for i, g in enumerate(group_names)}
    world = tuple(range(wl.n_ranks))
    ranks = []
    roofline = compute.mode == "roofline"
    groups_of = (gid, group_names, group_ranks, world)
    # what a node compiles to depends only on its type, derived attrs and duration: nodes
    # alike (most of a trace) are worked out once, for the whole workload
    memo: dict[tuple, tuple] = {}
    for r, rg in enumerate(wl.ranks):
        nodes = rg.nodes
        n = len(nodes)
        # ids 0..n-1 in order (generated and most real traces): deps need no id lookup
        ids = [nd.id for nd in nodes]
        identity = ids == list(range(n))
        fields = []
        splits: dict[int, list[int]] = {}
        for i, nd in enumerate(nodes):
            derived = getattr(nd, "_d", None)
            if derived is not None:
                mk = (nd.type, derived, nd.duration_micros)
                f = memo.get(mk)
                if f is None:
                    f = memo[mk] = _fields(nd, r, compute, roofline, groups_of)
            else:
                f = _fields(nd, r, compute, roofline, groups_of)
            fields.append(f)
            if f[3] == A2A and f[0] == Kind.COLLECTIVE:  # per node: not in the memo's key
                row = nd.attr(SPLIT_ATTR)
                if row is not None:
                    if not isinstance(row, list | tuple):
                        raise ValidationError(
                            f"rank {r} node {nd.id} {nd.name!r}: {SPLIT_ATTR} must be a "
                            "list of byte counts"
                        )
                    splits[i] = [int(x) for x in row]
        if n:
            kind, keys, dur, ctype, csize, grp, peer, tag = (
                list(c) for c in zip(*fields, strict=True)
            )
        else:
            kind, keys, dur, ctype, csize, grp, peer, tag = [], [], [], [], [], [], [], []
        lane_ids: dict[str, int] = {}
        lane = [-1 if key is None else lane_ids.setdefault(key, len(lane_ids)) for key in keys]
        names = [nd.name or "" for nd in nodes]
        deps: list[list[int]]
        if identity:  # out-of-range and self deps are dropped by make_rank
            deps = [nd.data_deps or NO_DEPS for nd in nodes]
        else:
            deps = positional_deps(nodes, ids)
        if edges == "inferred" and isinstance(rg, RankGraph):
            _add_stream_edges(deps, stream_edges(rg).edges)
        cr = make_rank(
            kind,
            dur,
            deps,
            ctype,
            csize,
            grp,
            peer,
            tag,
            ids,
            names,
            drop_bad_deps=True,
            lane=lane,
            lane_names=list(lane_ids),
            splits=splits,
        )
        ranks.append(cr)
    name = getattr(wl, "name", "") or "workload"
    desc = getattr(wl, "group_desc", None) or {}
    labels = [f"{g} ({desc[g]})" if g in desc else g or "world" for g in group_names]
    return finish(ranks, labels, group_ranks, name)


def _add_stream_edges(deps: list[list[int]], extra: dict[int, list[int]]) -> None:
    """Append the inferred dependencies (positions) to ``deps`` (new lists, never shared)."""
    for i, before in extra.items():
        deps[i] = [*deps[i], *before]


def _fields(nd: Any, r: int, compute: ComputeModel, roofline: bool, groups_of: tuple) -> tuple:
    """(kind, lane key, duration s, comm type, comm size, group id, peer, tag) of one node.

    A process group first seen here (no members known: the world) is added to ``groups_of``.
    """
    gid, group_names, group_ranks, world = groups_of
    t_raw = getattr(nd, "type", None)
    k = _BY_TYPE.get(t_raw) if isinstance(t_raw, int) else None
    if k is None or k in _NETWORK:  # kind decides (host work is a COMM node's kind)
        kv = nd.kind
        kname = getattr(kv, "value", kv)
        k = _kind_of(nd)
    else:
        kname = _KIND_NAME[k]
    key = lane_key(kname, getattr(nd, "is_cpu_op", False), getattr(nd, "stream", None))
    if k in (Kind.COMPUTE, Kind.MEMORY, Kind.OTHER):
        micros = getattr(nd, "duration_micros", None)
        d = micros * 1e-6 if micros is not None else float(nd.duration_s or 0.0)
        if k != Kind.OTHER and key != CPU_LANE and (roofline or d == 0.0):
            t = compute.roofline(
                getattr(nd, "num_ops", None) if k == Kind.COMPUTE else None,
                getattr(nd, "tensor_size", None),
            )
            if t is not None:
                d = t
        return k, key, d, -2, 0, -1, -1, 0
    if nd.comm_size is None:
        raise ValidationError(f"rank {r} node {nd.id} {nd.name!r}: no comm_size")
    size = int(nd.comm_size)
    if k == Kind.COLLECTIVE:
        if nd.comm_type is None:
            raise ValidationError(f"rank {r} node {nd.id} {nd.name!r}: no comm_type")
        pg = nd.pg_name or ""
        if pg not in gid:
            if pg:
                raise ValidationError(
                    f"rank {r} node {nd.id} {nd.name!r}: process group {pg!r} has no "
                    f"known members (known: {sorted(gid)})"
                )
            gid[pg] = len(group_names)
            group_names.append(pg)
            group_ranks.append(world)
        return k, key, 0.0, int(nd.comm_type), size, gid[pg], -1, 0
    if nd.peer is None:
        raise ValidationError(f"rank {r} node {nd.id} {nd.name!r}: send/recv has no peer")
    return k, key, 0.0, P2P, size, -1, int(nd.peer), int(nd.tag or 0)


#: rank files (bytes over all ranks) from which ``load_workload`` reads a trace into columns:
#: Node objects cost 1.2-1.5 KB a node, several times a real-style trace's 280 bytes of file
#: (llm at 16,384 ranks is 360 MB of files: it stays on Node objects)
COLUMNS_BYTES = 512 * 2**20


def load_workload(prefix: str | Path, columns: bool | None = False) -> Any:
    """Load ``<prefix>.<rank>.et`` (or a directory of them) with genie.workload's loader.

    ``columns``: read the .et files into columns (``genie.workload.columnar``, the file bytes
    dropped once read: no Python object per node; ``compile_workload``, the trace facts and
    the stream rules' summary work on them); None: where the rank files, all .et, hold
    ``COLUMNS_BYTES`` or more (genie simulate on its own model); False (the default, for
    callers that read Node objects): never. Chakra JSON is read as objects.
    """
    from genie.workload.loader import load_workload as wl_load

    files = None
    if columns is None:
        files, size = _et_files(prefix)
        columns = size >= COLUMNS_BYTES
    if columns:
        from genie.workload.columnar import load_columns

        return load_columns(prefix, keep_bytes=False)
    return wl_load(prefix, files=files)  # (the files found here: not listed again)


def _et_bytes(prefix: str | Path) -> int:
    """Bytes of the rank files of ``prefix``; -1 where some is Chakra JSON (or none is found:
    the loader says why)."""
    return _et_files(prefix)[1]


def _et_files(prefix: str | Path) -> tuple[Any, int]:
    """The rank files of ``prefix`` (``loader.all_rank_files``, None where it finds none: the
    loader says why) and ``_et_bytes`` of them."""
    from genie.errors import WorkloadError
    from genie.workload.loader import all_rank_files

    try:
        files = all_rank_files(prefix)
    except WorkloadError:
        return None, -1
    found = files[1]
    if any(not f.name.endswith((".et", ".et.gz")) for f in found.values()):
        return files, -1
    return files, sum(f.stat().st_size for f in found.values())
