"""One rank's Chakra graph from its PyTorch traces: operators, kernels and streams as nodes.

Every host operator is a CPU node on its thread; every Kineto GPU event a GPU node on its
stream, after the operator that launched it (NCCL kernels: the collective's COMM node);
without GPU events, collectives and kernel-running ``aten::`` operators get GPU nodes known by
their shapes. The rules are ``genie.workload.pytorch_import``'s docstring; the collectives are
decoded in ``genie.workload.pytorch_collectives``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from genie.workload.model import (
    DEFAULT_VERSION,
    Attr,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    RankGraph,
)
from genie.workload.process_groups import WORLD_PG_NAME, parse_pg_init
from genie.workload.pytorch_calls import CallTree, cpu_durations, typed
from genie.workload.pytorch_collectives import (
    COLL_TYPE,
    PARAM_COMMS,
    PG_INIT,
    Coll,
    collective_of,
    group_sizes,
    host_pg,
    kernel_coll,
    resolve_pg_groups,
)
from genie.workload.pytorch_trace import (
    GpuEvent,
    HostOp,
    HostTrace,
    KinetoTrace,
    nbytes,
    tensors,
)

_LABELS = re.compile(r"^\[pytorch\|profiler\|execution_(trace|graph)\|(thread|process)\]$")
#: leaf operators that launch no kernel (allocation, views, metadata)
_NO_KERNEL = frozenset(
    [
        "aten::" + n
        for n in [
            "empty",
            "empty_strided",
            "empty_like",
            "new_empty",
            "new_empty_strided",
            "view",
            "_unsafe_view",
            "as_strided",
            "t",
            "transpose",
            "expand",
            "expand_as",
            "detach",
            "detach_",
            "select",
            "slice",
            "reshape",
            "_reshape_alias",
            "permute",
            "unsqueeze",
            "squeeze",
            "alias",
            "lift_fresh",
            "resolve_conj",
            "resolve_neg",
            "is_same_size",
            "set_",
            "resize_",
            "result_type",
            "item",
            "_local_scalar_dense",
            "split",
            "chunk",
            "unbind",
            "narrow",
            "numpy_T",
            "contiguous",
            "_has_compatible_shallow_copy_type",
            "is_nonzero",
            "size",
            "stride",
            "dim",
        ]
    ]
) | frozenset(("detach", "detach_"))
_MATMUL = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1}


@dataclass
class RankImport:
    """One rank's graph and what building it found."""

    graph: RankGraph
    groups: dict[str, tuple[int, ...]]
    desc: dict[str, str]
    world_size: int | None
    gpu_source: str  # "kineto" or "shapes"
    notes: list[str] = field(default_factory=list)


def _gemm(op: HostOp) -> tuple[int, int, int, int] | None:
    """(m, n, k, batch) of a matrix-product operator from its input shapes."""
    first = _MATMUL.get(op.name)
    if first is None or len(op.in_shapes) < first + 2:
        return None
    a, b = op.in_shapes[first], op.in_shapes[first + 1]
    if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and len(a) in (2, 3)):
        return None
    if not all(isinstance(x, int) and x > 0 for x in a + b):
        return None
    batch = a[0] if len(a) == 3 else 1
    return a[-2], b[-1], a[-1], batch


def _kernel_op(op: HostOp, tree: CallTree, devices: tuple[str, ...]) -> bool:
    """Whether an ``aten::`` operator runs a kernel on ``devices`` (it calls none that does)."""
    if not op.name.startswith("aten::") or op.name in _NO_KERNEL:
        return False
    if any(c.name not in _NO_KERNEL for c in tree.children.get(op.id, [])):
        return False  # a composite: its callees run the kernels
    outs = tensors(op.out_values)
    ins = tensors(op.in_values)
    if not outs or not any(str(t[5]).startswith(devices) for t in outs + ins):
        return False
    if not op.name.endswith("_") and {t[1] for t in outs} <= {t[1] for t in ins}:
        return False  # every output shares an input's storage: a view
    return any(t[3] > 0 for t in outs)


def build_rank(
    host: HostTrace, kineto: KinetoTrace | None, rank: int, ids: list[int]
) -> RankImport:
    """One rank's graph from its host trace and, where given, its Kineto trace.

    ``ids`` is a one-element counter shared by the caller: new GPU node ids start above the
    host trace's ids.
    """
    tree = CallTree(host)
    notes: list[str] = []
    pg_text, backend_ids = host_pg(tree, host)
    desc: dict[str, str] = {}
    groups: dict[str, tuple[int, ...]] = {}
    world = kineto.world_size if kineto else None
    if pg_text:
        where = f"{host.path}: {PG_INIT}"
        groups = parse_pg_init(pg_text, 0, where, desc)
        sizes = group_sizes(pg_text)
        world = world or sizes.get(WORLD_PG_NAME) or None
    if world is None and groups:
        world = max((max(v) + 1 for v in groups.values() if v), default=None)
    ops = [op for op in host.ops if not _LABELS.match(op.name)]
    durations, cpu_source = cpu_durations(ops, tree, kineto)
    gpu_events = kineto.gpu if kineto else []
    has_cuda = any(
        str(t[5]).startswith(("cuda", "hip")) for op in ops for t in tensors(op.out_values)
    )
    nodes: list[Node] = []
    last_on_thread: dict[int, int] = {}
    by_rf = {op.rf_id: op for op in ops if op.rf_id is not None}
    gpu_after: dict[int, list[Node]] = {}  # launcher id -> GPU nodes placed after it
    counts: Counter[str] = Counter()
    colls: dict[int, Coll] = {}
    for op in ops:
        if op.name.startswith(("c10d::", "_c10d_functional::")):
            c = collective_of(op, tree, backend_ids)
            if c is not None:
                colls[op.id] = c
    if gpu_events:
        gpu_source = "kineto"
        for g in gpu_events:
            launcher = _launcher(g, kineto, by_rf)  # type: ignore[arg-type]
            if launcher is None:
                counts["unlinked"] += 1
                continue
            node = _gpu_node(g, launcher, tree, colls, backend_ids, ids, counts)
            gpu_after.setdefault(launcher.id, []).append(node)
    else:
        gpu_source = "shapes"
        devices = ("cuda", "hip") if has_cuda else ("cuda", "hip", "cpu")
        if not has_cuda:
            notes.append(
                "the trace ran without a GPU (no CUDA tensors): its aten kernels are read as "
                "the GPU kernels they would be"
            )
        for op in ops:
            if op.id in colls:
                node = _coll_node(colls[op.id], op.name, None, backend_ids, ids, counts)
                launch = tree.subtree(op)[-1]
                gpu_after.setdefault(launch.id, []).append(node)
                node.data_deps.append(launch.id)
            elif _kernel_op(op, tree, devices):
                node = _shape_node(op, ids)
                node.data_deps.append(op.id)
                gpu_after.setdefault(op.id, []).append(node)
                if not has_cuda:
                    durations[op.id] = 0  # the CPU ran the kernel: its time is the GPU node's
    for op in ops:
        if op.name == PG_INIT:
            vals = json.dumps(op.in_values[:1])
            nodes.append(
                Node(op.id, op.name, NodeType.METADATA_NODE, inputs=IOInfo(vals, "", "String"))
            )
            continue
        deps = [last_on_thread[op.tid]] if op.tid in last_on_thread else []
        name = op.name
        if name == PARAM_COMMS:
            coll = next(iter(typed(op, "String")), None)
            if isinstance(coll, str) and coll:
                name = f"{PARAM_COMMS}:{coll[:60]}"
        attrs = [Attr("is_cpu_op", "bool_val", True), Attr("tid", "int64_val", op.tid)]
        if op.rf_id is not None:
            attrs.append(Attr("rf_id", "int64_val", op.rf_id))
        us = durations.get(op.id, 0.0)
        nodes.append(
            Node(
                op.id,
                name,
                NodeType.COMP_NODE,
                data_deps=deps,
                duration_micros=max(1, round(us)) if us > 0 else 0,
                attrs=attrs,
            )
        )
        last_on_thread[op.tid] = op.id
        nodes += gpu_after.pop(op.id, [])
    notes.append(f"CPU operator durations from {cpu_source}")
    meta = Metadata(
        DEFAULT_VERSION,
        [
            Attr("source", "string_val", "pytorch execution trace"),
            Attr("pytorch_schema", "string_val", host.schema[:80]),
            Attr("gpu_durations", "string_val", gpu_source),
            *(
                Attr(k, "string_val" if isinstance(v, str) else "int64_val", v)
                for k, v in host.header.items()
                if k != "schema" and isinstance(v, str | int) and not isinstance(v, bool)
            ),
        ],
    )
    rg = RankGraph(rank, nodes, meta, source=host.path)
    resolve_pg_groups(rg, groups, rank, counts)
    if counts["unlinked"]:
        notes.append(
            f"{counts['unlinked']} GPU event(s) of the Kineto trace have no operator of the host "
            "trace that launched them; left out"
        )
    if counts["pg_guessed"]:
        notes.append(
            f"{counts['pg_guessed']} collective(s) name no process group in the trace; the "
            "group of the matching size was taken"
        )
    if counts["pg_default"]:
        notes.append(
            f"{counts['pg_default']} collective(s) name no process group in the trace (the "
            f"backend records none); read as the default group {WORLD_PG_NAME!r}"
        )
    if counts["p2p_peerless"]:
        notes.append(
            f"{counts['p2p_peerless']} send/recv kernel(s) without a peer in the host trace "
            "were read as GPU time"
        )
    return RankImport(rg, groups, desc, world, gpu_source, notes)


def _launcher(g: GpuEvent, k: KinetoTrace, by_rf: dict[int, HostOp]) -> HostOp | None:
    """The host operator that launched a GPU event."""
    rf = k.ext_to_rf.get(g.external_id) if g.external_id is not None else None
    if rf is None and g.correlation is not None:
        rf = k.launcher.get(g.correlation)
    return by_rf.get(rf) if rf is not None else None


def _new_id(ids: list[int]) -> int:
    ids[0] += 1
    return ids[0]


def _coll_node(
    c: Coll,
    name: str,
    stream: int | None,
    backend_ids: dict[str, str],
    ids: list[int],
    counts: Counter[str],
    dur_us: float = 0.0,
) -> Node:
    """A GPU communication node for collective ``c``."""
    t = COLL_TYPE[c.kind]
    attrs = [Attr("is_cpu_op", "bool_val", False)]
    if t is None:
        ntype = NodeType.COMM_SEND_NODE if c.kind == "send" else NodeType.COMM_RECV_NODE
        attrs += [Attr("comm_size", "int64_val", c.size), Attr("comm_tag", "int32_val", 0)]
        if c.peer is not None:
            attrs.append(Attr("_peer", "int64_val", c.peer))
    else:
        ntype = NodeType.COMM_COLL_NODE
        attrs += [Attr("comm_type", "int64_val", int(t)), Attr("comm_size", "int64_val", c.size)]
        if c.out_list is not None:
            attrs.append(Attr("_group_size", "int64_val", c.out_list))
    pg = backend_ids.get(c.pg, c.pg) if c.pg is not None else None
    if pg is not None:
        attrs.append(Attr("pg_name", "string_val", pg))
    if stream is not None:
        attrs.append(Attr("stream", "int64_val", stream))
    node = Node(_new_id(ids), name, ntype, attrs=attrs)
    node.duration_micros = max(1, round(dur_us)) if dur_us > 0 else 0
    return node


def _gpu_node(
    g: GpuEvent,
    launcher: HostOp,
    tree: CallTree,
    colls: dict[int, Coll],
    backend_ids: dict[str, str],
    ids: list[int],
    counts: Counter[str],
) -> Node:
    """The node of one Kineto GPU event launched by ``launcher``."""
    if "nccl" in g.name.lower() or "rccl" in g.name.lower():
        host = next(
            (colls[a.id] for a in [launcher, *tree.ancestors(launcher)] if a.id in colls), None
        )
        kc = kernel_coll(g)
        c = host or kc
        if c is not None and kc is not None and host is not None:
            c = Coll(host.kind, kc.size or host.size, kc.pg or host.pg, host.peer, host.out_list)
        if c is not None and not (COLL_TYPE.get(c.kind) is None and c.peer is None):
            if "sendrecv" in g.name.lower() and c.kind == "alltoall":
                c = Coll("alltoall", c.size, c.pg)
            node = _coll_node(c, g.name, g.stream, backend_ids, ids, counts, g.dur)
            node.data_deps.append(launcher.id)
            return node
        if c is not None:
            counts["p2p_peerless"] += 1
    attrs = [Attr("is_cpu_op", "bool_val", False)]
    if g.stream is not None:
        attrs.append(Attr("stream", "int64_val", g.stream))
    return Node(
        _new_id(ids),
        g.name,
        NodeType.COMP_NODE,
        data_deps=[launcher.id],
        duration_micros=max(1, round(g.dur)) if g.dur > 0 else 0,
        attrs=attrs,
    )


def _shape_node(op: HostOp, ids: list[int]) -> Node:
    """A GPU compute node for a kernel known by its operator's shapes (roofline-priced later)."""
    attrs = [Attr("is_cpu_op", "bool_val", False)]
    gm = _gemm(op)
    if gm is not None:
        m, n, k, b = gm
        attrs += [Attr("gemm_m", "int64_val", m), Attr("gemm_n", "int64_val", n)]
        attrs += [Attr("gemm_k", "int64_val", k)]
        if b > 1:
            attrs.append(Attr("gemm_count", "int64_val", b))
        attrs.append(Attr("num_ops", "int64_val", 2 * m * n * k * b))
    else:
        attrs.append(Attr("num_ops", "int64_val", sum(t[3] for t in tensors(op.out_values))))
    size = nbytes(op.in_values) + nbytes(op.out_values)
    attrs.append(Attr("tensor_size", "uint64_val", size))
    return Node(_new_id(ids), f"{op.name} (kernel)", NodeType.COMP_NODE, attrs=attrs)
