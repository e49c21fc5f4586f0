"""Trace tools: one rank made into N (``replicate``), compute durations scaled (``scale``), and
the first iterations or a node-id range cut out (``slice_iterations``, ``slice_nodes``).

Pure functions of workloads (no files); ``genie workload replicate|scale|slice`` load, call them
and write. They change the workload they are given and return it (or a new one built from its
nodes), so a huge trace is never copied whole.

``replicate`` (SPMD): every new rank runs the source rank's graph. Node ids stay as they are
(ids are per rank file); peers of sends and receives shift with the rank (``peer - s + r`` mod N
for source rank s, new rank r); process groups are rebuilt for N ranks and renamed to integers
from 1 (ASTRA-sim's rule): a group of every source rank becomes every new rank (its name kept),
any other group must be a strided block, ``c`` ranks ``d`` apart starting at a multiple of
``c d`` plus an offset below ``d`` (Megatron's tensor/pipeline/data groups are), and becomes the
block of the same shape holding each new rank. Groups the source rank is not in are dropped.
The new groups go into every copy of PyTorch's process_group:init node, into genie's
``pg_ranks:`` metadata attrs, and into the comm-group side file when written.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable

from genie.errors import UsageError, ValidationError, WorkloadError
from genie.workload.loader import GROUP_ATTR_PREFIX, group_attrs
from genie.workload.model import (
    DEFAULT_GROUP,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    RankGraph,
    Workload,
)
from genie.workload.process_groups import WORLD_PG_NAME

Advance = Callable[[], None]

#: Name prefix of PyTorch's per-iteration record_function marker nodes.
ITERATION_MARKER = "ProfilerStep#"


def _noop() -> None:
    return None


# ----------------------------------------------------------------------------- replicate


def _block(rank: int, stride: int, count: int) -> tuple[int, ...]:
    """Members of the strided block of ``count`` ranks ``stride`` apart holding ``rank``."""
    span = stride * count
    base = rank // span * span + rank % stride
    return tuple(base + k * stride for k in range(count))


def _shape(name: str, members: tuple[int, ...], src: int) -> tuple[int, int]:
    """(stride, count) of a strided-block group holding ``src``; WorkloadError otherwise."""
    m = sorted(members)
    stride = m[1] - m[0] if len(m) > 1 else 1
    if stride < 1 or _block(src, stride, len(m)) != tuple(m):
        raise WorkloadError(
            f"process group {name!r} {list(members)} is not a strided block of ranks; "
            "replicate cannot place it on other ranks (give the groups of the new ranks in a "
            "comm-group JSON file after replicating)"
        )
    return stride, len(m)


def _pg_init_text(groups: dict[str, tuple[int, ...]]) -> str:
    """``inputs.values`` of a process_group:init node as Chakra's converter writes it."""
    rows = [
        {"pg_name": k, "pg_desc": "", "backend_config": "", "pg_size": len(v), "ranks": list(v)}
        for k, v in groups.items()
    ]
    return str([json.dumps(rows)])


def replicate(
    rg: RankGraph,
    src_rank: int,
    groups: dict[str, tuple[int, ...]],
    n_ranks: int,
    name: str = "replicated",
    advance: Advance = _noop,
) -> Workload:
    """``n_ranks`` SPMD copies of rank ``src_rank``'s graph (see the module docstring).

    ``groups`` are the source job's process groups; an empty member tuple means every rank.
    """
    if n_ranks < 1:
        raise UsageError(f"--ranks must be >= 1, got {n_ranks}")
    world_size = max([src_rank + 1, *(max(v) + 1 for v in groups.values() if v)])
    world = tuple(range(world_size))
    used = {n.pg_name for n in rg.nodes if n.type == NodeType.COMM_COLL_NODE}
    kept: dict[str, tuple[int, ...]] = {}  # world groups: name kept
    shapes: dict[str, tuple[int, int]] = {}  # other groups: (stride, count)
    for g in sorted(used):
        if g in groups:
            members = groups[g]
        elif g in (DEFAULT_GROUP, WORLD_PG_NAME):
            members = ()  # every rank
        else:
            raise WorkloadError(f"process group {g!r} is used but its members are unknown")
        if not members or tuple(sorted(members)) == world:
            kept[g] = tuple(range(n_ranks))
            continue
        if src_rank not in members:
            raise WorkloadError(
                f"rank {src_rank} calls collectives on group {g!r} {list(members)} but is "
                "not a member of it"
            )
        stride, count = _shape(g, members, src_rank)
        if n_ranks % (stride * count):
            raise UsageError(
                f"process group {g!r} is {count} ranks {stride} apart; --ranks {n_ranks} "
                f"is not a multiple of {stride * count}"
            )
        shapes[g] = (stride, count)
    taken = set(kept)
    new_name: dict[tuple[str, tuple[int, ...]], str] = {}
    new_groups: dict[str, tuple[int, ...]] = dict(kept)
    next_id = 1
    for r in range(n_ranks):
        for g, (stride, count) in shapes.items():
            key = (g, _block(r, stride, count))
            if key not in new_name:
                while str(next_id) in taken:
                    next_id += 1
                new_name[key] = str(next_id)
                new_groups[str(next_id)] = key[1]
                taken.add(str(next_id))
    pg_text = _pg_init_text({k: v for k, v in new_groups.items() if k != DEFAULT_GROUP})
    meta_attrs = [a for a in rg.metadata.attrs if not a.name.startswith(GROUP_ATTR_PREFIX)]
    meta_attrs += group_attrs(new_groups)
    pg_nodes: dict[int, Node] = {}  # one rewritten process_group:init node per source node
    send, recv = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
    ranks = []
    for r in range(n_ranks):
        nodes = []
        for n in rg.nodes:
            t = n.type
            if t == NodeType.METADATA_NODE and n.inputs is not None and n.inputs.values:
                if n.id not in pg_nodes:
                    c = n.copy()
                    c.inputs = IOInfo(pg_text, n.inputs.shapes, n.inputs.types)
                    pg_nodes[n.id] = c
                nodes.append(pg_nodes[n.id])
            elif t == NodeType.COMM_COLL_NODE and n.pg_name in shapes:
                c = n.copy()
                stride, count = shapes[n.pg_name]
                c.set_attr("pg_name", "string_val", new_name[(n.pg_name, _block(r, stride, count))])
                nodes.append(c)
            elif t in (send, recv) and (n.comm_src is not None or n.comm_dst is not None):
                c = n.copy()
                for attr in ("comm_src", "comm_dst"):
                    old = n.attr(attr)
                    if isinstance(old, int) and not isinstance(old, bool):
                        kind = next(a.kind for a in n.attrs if a.name == attr)
                        if kind is None:  # a value without a value kind: what set_attr says
                            raise ValidationError(
                                f"unknown attribute value kind {kind!r} for {attr!r}"
                            )
                        c.set_attr(attr, kind, (old - src_rank + r) % n_ranks)
                nodes.append(c)
            else:
                nodes.append(n)  # unchanged: shared by every copy
        ranks.append(RankGraph(r, nodes, Metadata(rg.metadata.version, list(meta_attrs))))
        advance()
    return Workload(ranks=ranks, groups=new_groups, name=name)


# ----------------------------------------------------------------------------- scale


def scale(wl: Workload, factor: float, cpu: bool = False, advance: Advance = _noop) -> dict:
    """Multiply the durations of GPU compute nodes (and CPU ones with ``cpu``) by ``factor``.

    Chakra durations are whole microseconds: each is rounded to the nearest, and a node that
    took time keeps at least 1 us. Returns what changed: nodes scaled, microseconds before and
    after (summed over ranks).
    """
    if not factor > 0 or factor == float("inf"):
        raise UsageError(f"--factor must be a positive number, got {factor}")
    comp = NodeType.COMP_NODE
    count = before = after = 0
    for rg in wl.ranks:
        for n in rg.nodes:
            d = n.duration_micros
            if n.type != comp or not d or (n.is_cpu_op and not cpu):
                continue
            new = max(1, round(d * factor))
            n.duration_micros = new
            count += 1
            before += d
            after += new
        advance()
    return {"nodes": count, "before_us": before, "after_us": after}


# ----------------------------------------------------------------------------- slice


def _cut(rg: RankGraph, remove: list[int]) -> tuple[list[Node], int]:
    """The rank's nodes without positions ``remove`` and everything depending on them.

    Dependencies are data_deps and ctrl_deps alike (a removed caller takes its callees along).
    Returns the kept nodes and how many were removed.
    """
    nodes = rg.nodes
    pos = {n.id: i for i, n in enumerate(nodes)}
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for d in (*n.data_deps, *n.raw_ctrl_deps):
            j = pos.get(d)
            if j is not None and j != i:
                users[j].append(i)
    gone = bytearray(len(nodes))
    todo = deque(remove)
    for i in remove:
        gone[i] = 1
    while todo:
        for u in users[todo.popleft()]:
            if not gone[u]:
                gone[u] = 1
                todo.append(u)
    return [n for i, n in enumerate(nodes) if not gone[i]], sum(gone)


def _drop_deps_outside(nodes: list[Node]) -> int:
    """Remove deps to nodes no longer present (data and ctrl); return how many."""
    ids = {n.id for n in nodes}
    dropped = 0
    for n in nodes:
        if any(d not in ids for d in n.data_deps):
            kept = [d for d in n.data_deps if d in ids]
            dropped += len(n.data_deps) - len(kept)
            n.data_deps = kept
        if any(d not in ids for d in n.raw_ctrl_deps):
            kept = [d for d in n.raw_ctrl_deps if d in ids]
            dropped += len(n.raw_ctrl_deps) - len(kept)
            n.raw_ctrl_deps = n.ctrl_deps = kept
    return dropped


def slice_iterations(
    wl: Workload, iterations: int, marker: str = ITERATION_MARKER, advance: Advance = _noop
) -> list[str]:
    """Keep the first ``iterations`` iterations of every rank; return notes.

    An iteration starts at a node whose name starts with ``marker`` (PyTorch's
    ``ProfilerStep#N``); the slice removes the marker of iteration ``iterations + 1``, every
    later marker, and every node depending on them (data or ctrl). Nodes before the first
    marker (setup, process groups) stay.
    """
    if iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {iterations}")
    notes = []
    for rg in wl.ranks:
        marks = [i for i, n in enumerate(rg.nodes) if n.name.startswith(marker)]
        if not marks:
            raise WorkloadError(
                f"rank {rg.rank} ({rg.source or 'workload'}): no iteration markers (nodes named "
                f"{marker}...); give --marker or slice by --nodes"
            )
        if len(marks) <= iterations:
            notes.append(
                f"rank {rg.rank}: {len(marks)} iterations, fewer than {iterations + 1}: kept all"
            )
        else:
            before = len(rg.nodes)
            rg.nodes, _gone = _cut(rg, marks[iterations:])
            notes.append(f"rank {rg.rank}: kept {len(rg.nodes)} of {before} nodes")
        advance()
    return notes


def slice_nodes(wl: Workload, lo: int, hi: int, advance: Advance = _noop) -> list[str]:
    """Keep nodes with ``lo <= id < hi`` (and every METADATA node); return notes.

    Dependencies on nodes outside the range are removed (counted in the notes), so the result
    has no dangling ones.
    """
    if not 0 <= lo < hi:
        raise UsageError(f"--nodes needs 0 <= A < B, got {lo}:{hi}")
    notes = []
    meta = NodeType.METADATA_NODE
    for rg in wl.ranks:
        before = len(rg.nodes)
        rg.nodes = [n for n in rg.nodes if lo <= n.id < hi or n.type == meta]
        dropped = _drop_deps_outside(rg.nodes)
        notes.append(
            f"rank {rg.rank}: kept {len(rg.nodes)} of {before} nodes, removed {dropped} "
            "dependencies on nodes outside the range"
        )
        advance()
    return notes
