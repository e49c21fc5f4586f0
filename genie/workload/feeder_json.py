"""Read the JSON form Chakra's C++ JSON feeder reads (``src/feeder/json_node.cpp``).

One object per rank file with a ``workload_graph`` list of nodes, each with ``Id``, ``Name``,
``NodeType`` (a number or a NodeType name), ``runtime`` (microseconds, the ET's
``duration_micros``), ``data_deps``, ``is_cpu_op`` and, for communication nodes, ``comm_type``,
``comm_size``, ``comm_src``, ``comm_dst``, ``comm_tag``, ``comm_priority``, ``tensor_size``;
``ctrlDeps``/``ctrl_deps`` and ``num_ops`` where present. Top-level fields beside the graph
(``workload_name``, ``ngpus``, ``soc``) become GlobalMetadata attrs. A node field genie does not
know is skipped and counted in one problem line, never a crash. The result is the same model a
``.et`` gives (attrs as Chakra's converter writes them), so the feeder JSON of a trace and its
ET load to the same node count and kinds.

Chakra's own feeder sample leaves ``comm_type`` out of its NCCL kernels; there the type is taken
from the kernel's name (``ncclKernel_AllReduce_*``, ``ncclDevKernel_Broadcast_*``), and its
missing ``comm_size`` is read as 0 bytes; a problem line says how many of each (the ET form of
the same trace has the sizes).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from genie.errors import TraceFormatError
from genie.workload.et_schema import NODE_TYPES
from genie.workload.model import DEFAULT_VERSION, Attr, Metadata, Node

GRAPH_KEY = "workload_graph"
#: feeder field -> (attr name, attr value kind) for the attrs Chakra's converter writes
_ATTRS = {
    "is_cpu_op": ("is_cpu_op", "bool_val"),
    "comm_type": ("comm_type", "int64_val"),
    "comm_size": ("comm_size", "int64_val"),
    "comm_src": ("comm_src", "int32_val"),
    "comm_dst": ("comm_dst", "int32_val"),
    "comm_tag": ("comm_tag", "int32_val"),
    "comm_priority": ("comm_priority", "int32_val"),
    "tensor_size": ("tensor_size", "uint64_val"),
    "num_ops": ("num_ops", "int64_val"),
    "pg_name": ("pg_name", "string_val"),
    "stream": ("stream", "int64_val"),
}
_PLAIN = {"Id", "Name", "NodeType", "runtime", "data_deps", "ctrlDeps", "ctrl_deps"}
_NODE_TYPE = {name: i for i, name in enumerate(NODE_TYPES)}
_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce)_")
_KERNEL_TYPE = {"AllReduce": 0, "Reduce": 1, "AllGather": 2, "Broadcast": 5, "ReduceScatter": 7}
_COLL = 7  # COMM_COLL_NODE


def is_feeder_json(obj: Any) -> bool:
    """Whether a decoded JSON value is the feeder form (an object with a workload_graph list)."""
    return type(obj) is dict and type(obj.get(GRAPH_KEY)) is list


def decode_feeder(obj: dict, source: str) -> tuple[Metadata, list[Node], list[str]]:
    """Metadata, nodes and problems of one feeder-form rank file (see the module docstring)."""
    meta = Metadata(DEFAULT_VERSION, [_meta_attr(k, v) for k, v in obj.items() if k != GRAPH_KEY])
    unknown: Counter[str] = Counter()
    nodes = []
    for k, d in enumerate(obj[GRAPH_KEY]):
        if type(d) is not dict:
            raise TraceFormatError(f"{source}: {GRAPH_KEY}[{k}] is not an object")
        try:
            nodes.append(_node(d, unknown))
        except (TypeError, ValueError, KeyError) as exc:
            raise TraceFormatError(f"{source}: {GRAPH_KEY}[{k}]: {exc}") from None
    problems = [f"{source}: Chakra feeder JSON (workload_graph); version {DEFAULT_VERSION} assumed"]
    named = unknown.pop(" named", 0)
    if named:
        problems.append(
            f"{source}: comm_type taken from the NCCL kernel's name for {named} node(s) "
            "(the feeder JSON gives none)"
        )
    sizeless = unknown.pop(" sizeless", 0)
    if sizeless:
        problems.append(
            f"{source}: {sizeless} GPU collective(s) without comm_size read as 0 bytes (the "
            "feeder JSON gives none; the .et form of the trace has them)"
        )
    if unknown:
        what = ", ".join(f"{name} ({n} nodes)" for name, n in sorted(unknown.items()))
        problems.append(f"{source}: skipped node field(s) genie does not read: {what}")
    return meta, nodes, problems


def _node(d: dict, unknown: Counter[str]) -> Node:
    if "Id" not in d:
        raise KeyError("no Id")
    t = d.get("NodeType", 0)
    if isinstance(t, str):
        if t not in _NODE_TYPE:
            raise ValueError(f"unknown NodeType {t!r}")
        t = _NODE_TYPE[t]
    attrs = []
    for key, value in d.items():
        spec = _ATTRS.get(key)
        if spec is not None:
            name, kind = spec
            v = bool(value) if kind == "bool_val" else str(value) if kind == "string_val" else value
            if kind not in ("bool_val", "string_val"):
                v = _whole(v, key)
            attrs.append(Attr(name, kind, v))
        elif key not in _PLAIN:
            unknown[key] += 1
    name = d.get("Name", "")
    if not isinstance(name, str):
        raise TypeError(f"Name {name!r} is not a string")
    m = _KERNEL.search(name) if t == _COLL and "comm_type" not in d else None
    if m is not None and not d.get("is_cpu_op"):
        attrs.append(Attr("comm_type", "int64_val", _KERNEL_TYPE[m.group(1)]))
        unknown[" named"] += 1
    if t == _COLL and not d.get("is_cpu_op") and "comm_size" not in d:
        attrs.append(Attr("comm_size", "int64_val", 0))
        unknown[" sizeless"] += 1
    return Node(
        _whole(d["Id"], "Id"),
        name,
        _whole(t, "NodeType"),
        data_deps=[_whole(x, "data_deps") for x in d.get("data_deps", [])],
        ctrl_deps=[_whole(x, "ctrlDeps") for x in d.get("ctrlDeps", d.get("ctrl_deps", []))],
        duration_micros=_whole(d.get("runtime", 0), "runtime"),
        attrs=attrs,
    )


def _whole(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} {v!r} is not a whole number")
    return v


def _meta_attr(name: str, v: Any) -> Attr:
    if isinstance(v, bool):
        return Attr(name, "bool_val", v)
    if isinstance(v, int):
        return Attr(name, "int64_val", v)
    return Attr(name, "string_val", v if isinstance(v, str) else repr(v))
