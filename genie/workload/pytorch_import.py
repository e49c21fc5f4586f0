"""PyTorch execution traces to a genie workload in one step (``genie workload import pytorch``).

What Chakra's ``chakra_trace_link`` and ``chakra_converter`` do in two tools, read straight from
PyTorch's files (``genie.workload.pytorch_trace``), per rank:

* every recorded operator (not the thread/process labels) is a CPU node (``is_cpu_op``) of its
  thread: it depends on the operator its thread called before it (the host runs one operator at
  a time per thread) and takes its own time (Kineto's duration less its callees'; backend
  markers ``nccl:*``, ``gloo:*`` take none). PyTorch's ``## process_group:init ##`` record is the
  METADATA node that names the process groups;
* with a Kineto trace, every GPU event is a GPU node that depends on the operator that launched
  it (the Kineto ``External id``, else the operator enclosing its CUDA runtime call), on its
  ``stream``, with its measured duration. An NCCL kernel is the collective (COMM_COLL, or
  COMM_SEND / COMM_RECV for ``SendRecv`` kernels of ``send``/``recv``) with ``comm_type``,
  ``comm_size`` and ``pg_name``;
* without GPU events (no Kineto trace, or a run without a GPU), each collective operator gets a
  GPU collective node, and each leaf ``aten::`` operator that runs a kernel a GPU compute node
  with its shapes (``gemm_m/n/k`` for matrix products, ``num_ops``/``tensor_size`` otherwise),
  priced by the roofline of ``device`` (what ``genie calibrate compute`` reprices). Their
  streams are left to genie's inference (``genie.workload.stream_rules``).

Collectives: the type from ``record_param_comms``'s collective name, the kernel's ``Collective
name`` or the ``c10d::`` / ``_c10d_functional::`` operator; ``comm_size`` is the bytes of the
collective's input as ASTRA-sim reads it (the whole buffer for all-reduce, reduce-scatter and
all-to-all, the rank's shard for all-gather); the group from ``record_param_comms``'s process
group, the kernel's ``Process Group Name`` or the functional operator's group name; else the
group whose size matches an all-gather's output list (when exactly one does), else the default
group, counted in a note.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from genie.errors import WorkloadError
from genie.vocabulary import CollectiveType as C
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
from genie.workload.pytorch_trace import (
    GpuEvent,
    HostOp,
    HostTrace,
    KinetoTrace,
    is_tensor,
    nbytes,
    tensors,
)

_LABELS = re.compile(r"^\[pytorch\|profiler\|execution_(trace|graph)\|(thread|process)\]$")
_PG_INIT = "## process_group:init ##"
_BACKEND_MARK = re.compile(r"^(nccl|gloo|mpi|ucc|xccl|hccl):[a-z_]+$")
_PARAM_COMMS = "record_param_comms"
#: c10d operator (prefix and trailing ``_`` removed) -> (collective, index of its input argument)
_C10D: dict[str, tuple[str, int | None]] = {
    "allreduce": ("allreduce", 0),
    "allreduce_coalesced": ("allreduce", 0),
    "broadcast": ("broadcast", 0),
    "reduce": ("reduce", 0),
    "allgather": ("allgather", 1),
    "_allgather_base": ("allgather", 1),
    "allgather_coalesced": ("allgather", 1),
    "allgather_into_tensor_coalesced": ("allgather", 1),
    "reduce_scatter": ("reducescatter", 1),
    "_reduce_scatter_base": ("reducescatter", 1),
    "reduce_scatter_tensor_coalesced": ("reducescatter", 1),
    "alltoall": ("alltoall", 1),
    "alltoall_base": ("alltoall", 1),
    "gather": ("gather", 1),
    "scatter": ("scatter", 0),
    "barrier": ("barrier", None),
    "send": ("send", 0),
    "recv": ("recv", 0),
    "recv_any_source": ("recv", 0),
}
_FUNCTIONAL = {
    "all_reduce": "allreduce",
    "all_reduce_coalesced": "allreduce",
    "all_gather_into_tensor": "allgather",
    "all_gather_into_tensor_coalesced": "allgather",
    "reduce_scatter_tensor": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter",
    "all_to_all_single": "alltoall",
    "broadcast": "broadcast",
}
#: normalized collective name -> Chakra type (None: a point-to-point operation)
_TYPE: dict[str, C | None] = {
    "allreduce": C.ALL_REDUCE,
    "reducescatter": C.REDUCE_SCATTER,
    "allgather": C.ALL_GATHER,
    "alltoall": C.ALL_TO_ALL,
    "broadcast": C.BROADCAST,
    "barrier": C.BARRIER,
    "scatter": C.SCATTER,
    "gather": C.GATHER,
    "reduce": C.REDUCE,
    "send": None,
    "recv": None,
}
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
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "c10::half": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "long": 8,
    "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}  # fmt: skip


@dataclass
class Coll:
    """A collective as the host trace (and Kineto) describe it."""

    kind: str  # a key of _TYPE
    size: int  # bytes, ASTRA-sim's convention
    pg: str | None  # pg_name, None when the trace does not say
    peer: int | None = None  # group rank of the other end of a send/recv
    out_list: int | None = None  # length of an all-gather's output list (the group's size)


@dataclass
class RankImport:
    """One rank's graph and what building it found."""

    graph: RankGraph
    groups: dict[str, tuple[int, ...]]
    desc: dict[str, str]
    world_size: int | None
    gpu_source: str  # "kineto" or "shapes"
    notes: list[str] = field(default_factory=list)


def _norm(name: str) -> str | None:
    """The _TYPE key of a collective name (``all_gather``, ``_allgather_base``, ...)."""
    n = name.lower().replace("_", "").replace("-", "")
    for key in ("reducescatter", "allreduce", "allgather", "alltoall", "broadcast", "barrier"):
        if key in n:
            return key
    for key in ("sendrecv", "send", "recv", "scatter", "gather", "reduce"):
        if key in n:
            return "send" if key == "sendrecv" else key
    return None


class _Tree:
    """The call tree of a host trace: children in call order, depth-first order."""

    def __init__(self, host: HostTrace) -> None:
        self.by_id = {op.id: op for op in host.ops}
        self.children: dict[int, list[HostOp]] = {}
        for op in host.ops:
            if op.parent is not None and op.parent in self.by_id and op.parent != op.id:
                self.children.setdefault(op.parent, []).append(op)

    def subtree(self, op: HostOp) -> list[HostOp]:
        """``op`` and everything it called, in call order (bounded depth)."""
        out: list[HostOp] = []
        stack = [(op, 0)]
        while stack:
            o, d = stack.pop()
            out.append(o)
            if d < 64:
                stack += [(c, d + 1) for c in reversed(self.children.get(o.id, []))]
        return out

    def ancestors(self, op: HostOp) -> list[HostOp]:
        """The operators that called ``op``, innermost first."""
        out: list[HostOp] = []
        seen = {op.id}
        p = op.parent
        while p is not None and p in self.by_id and p not in seen and len(out) < 256:
            seen.add(p)
            out.append(self.by_id[p])
            p = self.by_id[p].parent
        return out


def _collective(op: HostOp, tree: _Tree, backend_ids: dict[str, str]) -> Coll | None:
    """The collective a ``c10d::`` / ``_c10d_functional::`` / record_param_comms op issues."""
    name = op.name
    rpc = next((o for o in tree.subtree(op) if o.name == _PARAM_COMMS), None)
    if name == _PARAM_COMMS:
        rpc = op
    base: tuple[str, int | None] | None = None
    pg: str | None = None
    if name.startswith("c10d::"):
        base = _C10D.get(name[6:].rstrip("_")) or _C10D.get(name[6:])
    elif name.startswith("_c10d_functional::"):
        kind = _FUNCTIONAL.get(name.split("::", 1)[1])
        if kind:
            base = (kind, 0)
            strs = _typed(op, "String")
            pg = strs[-1] if strs and isinstance(strs[-1], str) else None
    if base is None and rpc is None:
        return None
    kind, arg = base if base else (None, 0)
    size = nbytes(op.in_values[arg]) if arg is not None and arg < len(op.in_values) else 0
    peer = None
    if kind in ("send", "recv"):
        ints = _typed(op, "Int")
        peer = ints[0] if ints and isinstance(ints[0], int) else None
    out_list = None
    if kind == "allgather" and op.in_values and type(op.in_values[0]) is list:
        first = op.in_values[0]
        if first and type(first[0]) is list and not is_tensor(first[0]):
            out_list = len(first[0])  # allgather_: a list (per input) of output lists
    if rpc is not None:
        info = _param_comms(rpc, backend_ids)
        if info is not None:
            rkind, rsize, rpg = info
            if rkind == "wait":
                return None
            kind = rkind or kind
            size = rsize if rsize and not size else size
            pg = rpg if rpg is not None else pg
    if kind is None or kind not in _TYPE:
        return None
    return Coll(kind, size, pg, peer, out_list)


def _typed(op: HostOp, prefix: str) -> list[Any]:
    """The input values of ``op`` whose recorded type starts with ``prefix``."""
    return [v for v, t in zip(op.in_values, op.in_types, strict=False) if t.startswith(prefix)]


def _param_comms(
    op: HostOp, backend_ids: dict[str, str]
) -> tuple[str | None, int, str | None] | None:
    """(collective, input bytes, pg_name) of a record_param_comms op, any PyTorch version's."""
    vals, types = op.in_values, op.in_types
    coll = next((v for v in _typed(op, "String") if isinstance(v, str)), None)
    if coll is None:
        return None
    kind = "wait" if coll.lower() == "wait" else _norm(coll)
    size = nbytes(vals[0]) if vals and types and "Tensor" in types[0] else 0
    pg = None
    for v in _typed(op, "Tuple"):
        if type(v) is list and v and isinstance(v[0], str):
            pg = v[0]  # (pg_name, pg_desc), PyTorch >= 2.3
            break
    ints = _typed(op, "Int")
    if pg is None and len(ints) >= 2 and str(ints[1]) in backend_ids:
        pg = backend_ids[str(ints[1])]  # (seq, backend id, rank, ...), PyTorch 2.1-2.2
    return kind, size, pg


def _host_pg(tree: _Tree, host: HostTrace) -> tuple[str, dict[str, str]]:
    """The process_group:init text and a backend_id -> pg_name map (old record_param_comms)."""
    for op in host.ops:
        if op.name == _PG_INIT and op.in_values and isinstance(op.in_values[0], str):
            text = op.in_values[0]
            ids: dict[str, str] = {}
            try:
                rows = json.loads(text)
            except ValueError:
                rows = []
            for row in rows if isinstance(rows, list) else []:
                if isinstance(row, dict) and "backend_id" in row and "pg_name" in row:
                    ids[str(row["backend_id"])] = str(row["pg_name"])
            return text, ids
    return "", {}


def _kernel_coll(g: GpuEvent) -> Coll | None:
    """The collective an NCCL kernel's Kineto args describe, if they do."""
    a = g.args
    name = a.get("Collective name")
    kind = _norm(name) if isinstance(name, str) else None
    if kind is None:
        return None
    n_in = a.get("In msg nelems")
    dtype = a.get("dtype")
    size = 0
    if isinstance(n_in, int) and isinstance(dtype, str):
        size = max(0, n_in) * _DTYPE_BYTES.get(dtype.lower(), 0)
    pg = a.get("Process Group Name")
    return Coll(kind, size, pg if isinstance(pg, str) else None)


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


def _kernel_op(op: HostOp, tree: _Tree, devices: tuple[str, ...]) -> bool:
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
    tree = _Tree(host)
    notes: list[str] = []
    pg_text, backend_ids = _host_pg(tree, host)
    desc: dict[str, str] = {}
    groups: dict[str, tuple[int, ...]] = {}
    world = kineto.world_size if kineto else None
    if pg_text:
        where = f"{host.path}: {_PG_INIT}"
        groups = parse_pg_init(pg_text, 0, where, desc)
        sizes = _group_sizes(pg_text)
        world = world or sizes.get(WORLD_PG_NAME) or None
    if world is None and groups:
        world = max((max(v) + 1 for v in groups.values() if v), default=None)
    ops = [op for op in host.ops if not _LABELS.match(op.name)]
    durations, cpu_source = _cpu_durations(ops, tree, kineto)
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
            c = _collective(op, tree, backend_ids)
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
        if op.name == _PG_INIT:
            vals = json.dumps(op.in_values[:1])
            nodes.append(
                Node(op.id, op.name, NodeType.METADATA_NODE, inputs=IOInfo(vals, "", "String"))
            )
            continue
        deps = [last_on_thread[op.tid]] if op.tid in last_on_thread else []
        name = op.name
        if name == _PARAM_COMMS:
            coll = next(iter(_typed(op, "String")), None)
            if isinstance(coll, str) and coll:
                name = f"{_PARAM_COMMS}:{coll[:60]}"
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
    _resolve_groups(rg, groups, rank, counts)
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


def _world_of(host: HostTrace) -> int | None:
    """The job's size as the host trace's process groups give it."""
    text, _ = _host_pg(_Tree(host), host)
    return _group_sizes(text).get(WORLD_PG_NAME) if text else None


def _group_sizes(text: str) -> dict[str, int]:
    """pg_name -> group_size / pg_size of a process_group:init text."""
    try:
        rows = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, int] = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict):
            size = row.get("group_size", row.get("pg_size"))
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                out[str(row.get("pg_name"))] = size
    return out


def _cpu_durations(
    ops: list[HostOp], tree: _Tree, kineto: KinetoTrace | None
) -> tuple[dict[int, float], str]:
    """Each CPU operator's own time (us) and where the numbers came from."""
    incl: dict[int, float] = {}
    source = "nowhere (no Kineto trace, no durations in the host trace): 0"
    if kineto is not None and kineto.cpu_dur:
        for op in ops:
            if op.rf_id is not None and op.rf_id in kineto.cpu_dur:
                incl[op.id] = kineto.cpu_dur[op.rf_id]
        source = "the Kineto trace (each operator's time less its callees')"
    elif any(op.inclusive_us is not None or op.exclusive_us is not None for op in ops):
        out = {op.id: op.exclusive_us or 0.0 for op in ops if op.exclusive_us is not None}
        if out:
            return out, "the host trace's exclusive_dur"
        incl = {op.id: op.inclusive_us for op in ops if op.inclusive_us is not None}
        source = "the host trace's inclusive_dur (less callees')"
    out = {}
    for op in ops:
        if op.id not in incl or _BACKEND_MARK.match(op.name):
            continue
        callees = sum(
            incl.get(c.id, 0.0)
            for c in tree.children.get(op.id, [])
            if not _BACKEND_MARK.match(c.name) and c.tid == op.tid
        )
        out[op.id] = max(0.0, incl[op.id] - callees)
    return out, source


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
    t = _TYPE[c.kind]
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
    tree: _Tree,
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
        kc = _kernel_coll(g)
        c = host or kc
        if c is not None and kc is not None and host is not None:
            c = Coll(host.kind, kc.size or host.size, kc.pg or host.pg, host.peer, host.out_list)
        if c is not None and not (_TYPE.get(c.kind) is None and c.peer is None):
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


def _resolve_groups(
    rg: RankGraph, groups: dict[str, tuple[int, ...]], rank: int, counts: Counter[str]
) -> None:
    """Give every collective a pg_name and every send/recv a global peer (placeholders out)."""
    mine = {k: v for k, v in groups.items() if not v or rank in v}
    for node in rg.nodes:
        t = node.type
        if t not in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            continue
        size_hint = node.attr("_group_size")
        peer = node.attr("_peer")
        node.attrs = [a for a in node.attrs if a.name not in ("_group_size", "_peer")]
        if node.attr("pg_name") is None:
            match = [k for k, v in mine.items() if v and len(v) == size_hint]
            if size_hint and len(match) == 1:
                pg = match[0]
                counts["pg_guessed"] += 1
            else:
                pg = WORLD_PG_NAME
                counts["pg_default"] += 1
            node.attrs.append(Attr("pg_name", "string_val", pg))
        if peer is not None:
            members = groups.get(node.attr("pg_name"), ())
            glob = members[peer] if members and 0 <= peer < len(members) else peer
            attr = "comm_dst" if t == NodeType.COMM_SEND_NODE else "comm_src"
            node.attrs.append(Attr(attr, "int32_val", glob))
        node.refresh()


def check_ranks(found: dict[int, Any], what: str) -> int:
    """The number of ranks of a set of per-rank inputs, or an error naming the gaps."""
    n = max(found) + 1
    missing = [r for r in range(n) if r not in found]
    if missing:
        raise WorkloadError(f"{what}: no trace for rank(s) {missing[:16]} (found {sorted(found)})")
    return n


# ----------------------------------------------------------------------------- whole job

_RANK_IN_NAME = re.compile(r"(?:^|[._-])(?:rank)?[_-]?(\d{1,6})\.json(?:\.gz)?$", re.IGNORECASE)


@dataclass
class Imported:
    """A whole imported job: the workload, the rank it was replicated from, and notes."""

    workload: Any  # genie.workload.model.Workload
    notes: list[str]
    replicated_from: int | None = None
    shape_priced: bool = False  # GPU nodes known only by their shapes: they need a roofline


def rank_of(path: str, kineto: KinetoTrace | None = None) -> int | None:
    """The rank a trace file is of: Kineto's distributedInfo, else a number in its name."""
    if kineto is not None and kineto.rank is not None:
        return kineto.rank
    m = _RANK_IN_NAME.search(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def import_pytorch(
    hosts: list[str],
    kinetos: list[str] | None = None,
    ranks: int | None = None,
    name: str = "pytorch",
) -> Imported:
    """Read host traces (one per rank) and Kineto traces (matched by rank) into a workload.

    One host trace of a job of N ranks (its process groups say N) is replicated to N ranks, or
    to ``ranks``; several must be ranks 0..N-1. GPU nodes known only by their shapes keep no
    duration here (``shape_priced``): ``genie.api.workload.import_pytorch`` prices them by a
    roofline (the workload layer does not depend on calibration).
    """
    from genie.workload.model import Workload
    from genie.workload.pytorch_trace import read_host_et, read_kineto
    from genie.workload.transform import replicate

    kin = [read_kineto(k) for k in kinetos or []]
    host_traces = [read_host_et(h) for h in hosts]
    notes: list[str] = []
    for h in host_traces:
        notes += h.problems
    for k in kin:
        notes += k.problems
    by_rank: dict[int, HostTrace] = {}
    for i, h in enumerate(host_traces):
        r = rank_of(h.path)
        if r is None:
            r = i if len(host_traces) > 1 else 0
        if r in by_rank:
            raise WorkloadError(f"{h.path}: rank {r} given twice (also {by_rank[r].path})")
        by_rank[r] = h
    kin_by_rank: dict[int, KinetoTrace] = {}
    if len(host_traces) == 1 and len(kin) == 1:  # one rank's pair: Kineto knows its rank
        r = rank_of(kin[0].path, kin[0])
        by_rank = {r if r is not None else next(iter(by_rank)): host_traces[0]}
    for i, kt in enumerate(kin):
        if len(kin) == 1 and len(by_rank) == 1:
            kin_by_rank[next(iter(by_rank))] = kt
            continue
        r = rank_of(kt.path, kt)
        if r is None:
            r = sorted(by_rank)[i] if i < len(by_rank) else i
        kin_by_rank[r] = kt
    if len(by_rank) == 1:
        ((r, h),) = by_rank.items()
        world = _world_of(h)
        if world is not None and r >= world:
            notes.append(f"{h.path}: the number in its name ({r}) is no rank of a job of {world}")
            by_rank = {0: h}
            kin_by_rank = {0: kin_by_rank[r]} if r in kin_by_rank else {}
    extra = sorted(set(kin_by_rank) - set(by_rank))
    if extra:
        raise WorkloadError(f"Kineto trace(s) for rank(s) {extra} have no host trace")
    ids = [max((op.id for h in host_traces for op in h.ops), default=0)]
    built = [build_rank(by_rank[r], kin_by_rank.get(r), r, ids) for r in sorted(by_rank)]
    for b in built:
        notes += [f"rank {b.graph.rank}: {n}" for n in b.notes]
    groups: dict[str, tuple[int, ...]] = {}
    desc: dict[str, str] = {}
    for b in built:
        for g, v in b.groups.items():
            if g in groups and groups[g] != v:
                raise WorkloadError(
                    f"process group {g!r} is {list(v)} in rank {b.graph.rank}'s trace but "
                    f"{list(groups[g])} in another's"
                )
            groups[g] = v
        desc.update(b.desc)
    world = max((b.world_size or 0 for b in built), default=0)
    replicated_from = None
    if len(built) == 1 and (ranks or world) and (ranks or world) != 1:
        n = ranks or world
        src = built[0]
        wl = replicate(src.graph, src.graph.rank, groups, n, name)
        replicated_from = src.graph.rank
        for rg in wl.ranks:
            rg.source = src.graph.source
    else:
        n = check_ranks({b.graph.rank: b for b in built}, "host traces")
        if world and n != world:
            raise WorkloadError(
                f"host traces of ranks 0..{n - 1} of a job of {world} ranks (its process "
                f"groups say): give all {world}, or one to replicate"
            )
        if ranks is not None and ranks != n:
            raise WorkloadError(f"--ranks {ranks} given with host traces of {n} ranks")
        full = {k: (v if v else tuple(range(n))) for k, v in groups.items()}
        wl = Workload(ranks=[b.graph for b in built], groups=full, name=name)
        wl.groups.setdefault(WORLD_PG_NAME, tuple(range(n)))
    wl.group_desc = {k: v for k, v in desc.items() if k in wl.groups}
    shapes = any(b.gpu_source == "shapes" for b in built)
    if shapes:
        without = "no Kineto trace" if not kin else "no GPU events in the Kineto trace"
        notes.append(f"GPU kernels known by their shapes only ({without})")
    else:
        notes.append("GPU kernel durations and streams from the Kineto trace")
    return Imported(wl, notes, replicated_from, shapes)
