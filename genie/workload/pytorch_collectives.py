"""The collectives and process groups of PyTorch traces, decoded for the PyTorch import.

A collective's type, input bytes (ASTRA-sim's convention), group and peer come from the host
trace's ``c10d::`` / ``_c10d_functional::`` / ``record_param_comms`` operators and from the
Kineto args of NCCL kernels; the process groups from ``## process_group:init ##``. Once a
rank's graph is built, ``resolve_pg_groups`` gives every collective a group and every send/recv
a global peer. The rules are ``genie.workload.pytorch_import``'s docstring.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from genie.vocabulary import CollectiveType as C
from genie.workload.model import Attr, NodeType, RankGraph
from genie.workload.process_groups import WORLD_PG_NAME
from genie.workload.pytorch_calls import CallTree, typed
from genie.workload.pytorch_trace import GpuEvent, HostOp, HostTrace, is_tensor, nbytes

PG_INIT = "## process_group:init ##"
PARAM_COMMS = "record_param_comms"
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
COLL_TYPE: dict[str, C | None] = {
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
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "c10::half": 2, "c10::bfloat16": 2, "int": 4, "int32": 4, "long": 8,
    "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}  # fmt: skip


@dataclass
class Coll:
    """A collective as the host trace (and Kineto) describe it."""

    kind: str  # a key of COLL_TYPE
    size: int  # bytes, ASTRA-sim's convention
    pg: str | None  # pg_name, None when the trace does not say
    peer: int | None = None  # group rank of the other end of a send/recv
    out_list: int | None = None  # length of an all-gather's output list (the group's size)


def _norm(name: str) -> str | None:
    """The COLL_TYPE key of a collective name (``all_gather``, ``_allgather_base``, ...)."""
    n = name.lower().replace("_", "").replace("-", "")
    for key in ("reducescatter", "allreduce", "allgather", "alltoall", "broadcast", "barrier"):
        if key in n:
            return key
    for key in ("sendrecv", "send", "recv", "scatter", "gather", "reduce"):
        if key in n:
            return "send" if key == "sendrecv" else key
    return None


def collective_of(op: HostOp, tree: CallTree, backend_ids: dict[str, str]) -> Coll | None:
    """The collective a ``c10d::`` / ``_c10d_functional::`` / record_param_comms op issues."""
    name = op.name
    rpc = next((o for o in tree.subtree(op) if o.name == PARAM_COMMS), None)
    if name == PARAM_COMMS:
        rpc = op
    base: tuple[str, int | None] | None = None
    pg: str | None = None
    if name.startswith("c10d::"):
        base = _C10D.get(name[6:].rstrip("_")) or _C10D.get(name[6:])
    elif name.startswith("_c10d_functional::"):
        kind = _FUNCTIONAL.get(name.split("::", 1)[1])
        if kind:
            base = (kind, 0)
            strs = typed(op, "String")
            pg = strs[-1] if strs and isinstance(strs[-1], str) else None
    if base is None and rpc is None:
        return None
    kind, arg = base if base else (None, 0)
    size = nbytes(op.in_values[arg]) if arg is not None and arg < len(op.in_values) else 0
    peer = None
    if kind in ("send", "recv"):
        ints = typed(op, "Int")
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
    if kind is None or kind not in COLL_TYPE:
        return None
    return Coll(kind, size, pg, peer, out_list)


def _param_comms(
    op: HostOp, backend_ids: dict[str, str]
) -> tuple[str | None, int, str | None] | None:
    """(collective, input bytes, pg_name) of a record_param_comms op, any PyTorch version's."""
    vals, types = op.in_values, op.in_types
    coll = next((v for v in typed(op, "String") if isinstance(v, str)), None)
    if coll is None:
        return None
    kind = "wait" if coll.lower() == "wait" else _norm(coll)
    size = nbytes(vals[0]) if vals and types and "Tensor" in types[0] else 0
    pg = None
    for v in typed(op, "Tuple"):
        if type(v) is list and v and isinstance(v[0], str):
            pg = v[0]  # (pg_name, pg_desc), PyTorch >= 2.3
            break
    ints = typed(op, "Int")
    if pg is None and len(ints) >= 2 and str(ints[1]) in backend_ids:
        pg = backend_ids[str(ints[1])]  # (seq, backend id, rank, ...), PyTorch 2.1-2.2
    return kind, size, pg


def host_pg(tree: CallTree, host: HostTrace) -> tuple[str, dict[str, str]]:
    """The process_group:init text and a backend_id -> pg_name map (old record_param_comms)."""
    for op in host.ops:
        if op.name == PG_INIT and op.in_values and isinstance(op.in_values[0], str):
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


def kernel_coll(g: GpuEvent) -> Coll | None:
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


def world_of(host: HostTrace) -> int | None:
    """The job's size as the host trace's process groups give it."""
    text, _ = host_pg(CallTree(host), host)
    return group_sizes(text).get(WORLD_PG_NAME) if text else None


def group_sizes(text: str) -> dict[str, int]:
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


def resolve_pg_groups(
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
